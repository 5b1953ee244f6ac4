#include "tests/gpu/gpu_env.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace sm70ops_gpu {
namespace {

void Check(cudaError_t status, const char *what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

// $SM70OPS_LIBRARY, else the Bazel runfile next to the test.
std::string LibraryPath() {
  if (const char *env = std::getenv("SM70OPS_LIBRARY"); env != nullptr && *env) return env;
  const char *srcdir = std::getenv("TEST_SRCDIR");
  return std::string(srcdir ? srcdir : ".") + "/sm70ops/libsm70ops.so";
}

}  // namespace

std::string NoGpuReason() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device (") + cudaGetErrorString(status) + ")";
  }
  return count == 0 ? "no CUDA device" : "";
}

Plugin::Plugin() {
  sm70ops_host_options options = {};
  options.struct_size = sizeof(options);
  const std::string path = LibraryPath();
  options.library_path = path.c_str();
  char err[512] = "";
  if (sm70ops_host_open(&options, &host_, err, sizeof(err)) != SM70OPS_OK) error_ = err;
}

Plugin::~Plugin() { sm70ops_host_close(host_); }

sm70ops_decision Decide(const Plugin &plugin, sm70ops_op op, const void *args) {
  sm70ops_decision d = {};
  d.struct_size = sizeof(d);
  EXPECT_EQ(plugin.api().check(plugin.ctx(), op, args, &d), SM70OPS_OK);
  EXPECT_TRUE(d.accepted) << plugin.api().reason_name(d.reason) << ": " << d.message;
  return d;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  Check(cudaMalloc(&data_, bytes > 0 ? bytes : 1), "cudaMalloc");
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

void DeviceBuffer::Upload(const void *host, size_t bytes, size_t offset) {
  Check(cudaMemcpy(static_cast<char *>(data_) + offset, host, bytes, cudaMemcpyHostToDevice),
        "upload");
}

void DeviceBuffer::Download(void *host, size_t bytes, size_t offset) const {
  Check(cudaMemcpy(host, static_cast<const char *>(data_) + offset, bytes, cudaMemcpyDeviceToHost),
        "download");
}

void DeviceBuffer::Poison(uint8_t byte) { Check(cudaMemset(data_, byte, bytes_), "poison"); }

void DeviceBuffer::PoisonAsync(uint8_t byte, void *stream) {
  Check(cudaMemsetAsync(data_, byte, bytes_, static_cast<cudaStream_t>(stream)), "poison");
}

sm70ops_desc_batch DescBatch(const sm70ops::ref::ScatteredBatch &b, int64_t selected_pages) {
  sm70ops_desc_batch out{};
  out.rows = b.rows;
  out.requests = int64_t(b.meta.seq_lens.size());
  out.max_pages = b.meta.max_pages;
  out.cache_pages = b.num_pages;
  out.page_size = b.meta.page_size;
  out.selected_pages = selected_pages;
  out.max_seq_len = b.max_seq_len;
  out.max_query_len = b.max_query_len;
  return out;
}

sm70ops_desc_tensor *Bind(sm70ops_desc_call &call, const char *name, const DeviceBuffer &buffer,
                          uint64_t byte_offset) {
  sm70ops_desc_tensor *t = sm70ops_desc_find(&call, name);
  if (t == nullptr) {
    std::fprintf(stderr, "gpu_env: op %d has no tensor '%s'\n", call.op, name);
    std::abort();
  }
  t->tensor.data = buffer.data();
  t->tensor.byte_offset = byte_offset;
  return t;
}

void Synchronize() { Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

}  // namespace sm70ops_gpu
