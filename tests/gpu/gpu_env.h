// What the GPU tests share: the plugin opened the way an engine opens it (integration/host), the
// device, device buffers poisoned before each run, strided inputs with poisoned padding, and the
// op descriptors (integration/host/sm70ops_desc.h) pointed at those buffers.
// Without a CUDA device every GPU test skips with a printed reason (GTEST_SKIP).
#ifndef SM70OPS_TESTS_GPU_GPU_ENV_H_
#define SM70OPS_TESTS_GPU_GPU_ENV_H_

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "integration/host/sm70ops_desc.h"
#include "integration/host/sm70ops_host.h"
#include "tests/ref/varlen.h"

namespace sm70ops_gpu {

// Empty when a CUDA device is usable, else why not ("no CUDA device").
std::string NoGpuReason();

#define SM70OPS_REQUIRE_GPU()                                      \
  do {                                                             \
    const std::string why = ::sm70ops_gpu::NoGpuReason();          \
    if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << why; \
  } while (0)

// The plugin through the host loader, context on device 0 with the device's real compute
// capability: on a non-SM70 GPU the caller must set SM70OPS_ALLOW_ARCH.
class Plugin {
 public:
  Plugin();
  ~Plugin();
  Plugin(const Plugin &) = delete;
  Plugin &operator=(const Plugin &) = delete;
  const std::string &error() const { return error_; }
  const sm70ops_api &api() const { return *sm70ops_host_api(host_); }
  const sm70ops_context *ctx() const { return sm70ops_host_context(host_); }

 private:
  sm70ops_host *host_ = nullptr;
  std::string error_;
};

// check()'s decision on `args`, expected (as a test failure otherwise) to be an acceptance.
sm70ops_decision Decide(const Plugin &plugin, sm70ops_op op, const void *args);

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void *data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void Upload(const void *host, size_t bytes, size_t offset = 0);
  void Download(void *host, size_t bytes, size_t offset = 0) const;
  void Poison(uint8_t byte);  // every byte, so unwritten outputs cannot pass as results
  void PoisonAsync(uint8_t byte, void *stream);  // the same, ordered on `stream`

 private:
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

// A device copy of `host`.
template <typename T>
DeviceBuffer Uploaded(const std::vector<T> &host) {
  DeviceBuffer buf(host.size() * sizeof(T));
  buf.Upload(host.data(), host.size() * sizeof(T));
  return buf;
}

// fp16 quiet NaN: what padding around an input view holds, so a kernel that reads past the view
// turns its result NaN and fails the comparison.
constexpr uint16_t kNanHalf = 0x7e00;

// Rows of `dense` [rows, cols] at `stride` elements, after `offset` elements: the buffer under a
// strided view (stride >= cols, byte_offset = offset * sizeof(T)), everything else `fill`.
template <typename T>
std::vector<T> Strided(const std::vector<T> &dense, int64_t rows, int64_t cols, int64_t stride,
                       int64_t offset, T fill) {
  std::vector<T> out(offset + rows * stride, fill);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(&dense[r * cols], cols, &out[offset + r * stride]);
  return out;
}

// The batch of sm70ops_desc's QSA ops for `b`, its selection `selected_pages` wide.
sm70ops_desc_batch DescBatch(const sm70ops::ref::ScatteredBatch &b, int64_t selected_pages);

// Points the call's tensor `name` at `buffer` plus `byte_offset` and returns it (to make it a
// strided view). Aborts on a name the call lacks: a typo in the test.
sm70ops_desc_tensor *Bind(sm70ops_desc_call &call, const char *name, const DeviceBuffer &buffer,
                          uint64_t byte_offset = 0);

void Synchronize();

}  // namespace sm70ops_gpu

#endif  // SM70OPS_TESTS_GPU_GPU_ENV_H_
