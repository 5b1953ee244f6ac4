// SM70_Lifecycle: what a long-lived server does to the plugin. The fork test must run before
// anything in this process touches CUDA, so it comes first and this binary holds nothing else
// that does.
#include <cuda_runtime_api.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/abi/log_capture.h"
#include "tests/gpu/gpu_env.h"

namespace sm70ops_gpu {
namespace {

std::string LibraryPath() {
  if (const char *env = std::getenv("SM70OPS_LIBRARY"); env != nullptr && *env) return env;
  const char *srcdir = std::getenv("TEST_SRCDIR");
  return std::string(srcdir ? srcdir : ".") + "/sm70ops/libsm70ops.so";
}

// With `log`, every message of the loader and the plugin goes to it.
sm70ops_host *Open(int32_t compute_capability, sm70ops_test::LogCapture *log = nullptr) {
  const std::string path = LibraryPath();
  sm70ops_host_options options = {};
  options.struct_size = sizeof(options);
  options.library_path = path.c_str();
  options.compute_capability = compute_capability;
  if (log != nullptr) {
    options.log_level = SM70OPS_LOG_DEBUG;
    options.log_fn = sm70ops_test::LogCapture::Callback;
    options.log_user_data = log;
  }
  sm70ops_host *host = nullptr;
  char err[512] = "";
  EXPECT_EQ(sm70ops_host_open(&options, &host, err, sizeof(err)), SM70OPS_OK) << err;
  return host;
}

// A capability query on a valid descriptor of `op` (qsa_index or qsa_attn): one request of 64
// rows at 4096 tokens on 64-token pages, the model's TP4 heads. Returns the call's status; the
// decision is not the point.
sm70ops_status Query(sm70ops_host *host, sm70ops_op op) {
  sm70ops_desc_batch b{};
  b.rows = 64, b.requests = 1, b.max_pages = 64, b.cache_pages = 64, b.page_size = 64;
  b.selected_pages = 64, b.max_seq_len = 4096, b.max_query_len = 64;
  sm70ops_desc_call call;
  if (op == SM70OPS_OP_QSA_INDEX) {
    sm70ops_desc_qsa_index_sizes s{};
    s.batch = b, s.heads = 4, s.dim = 128, s.topk = 2048, s.compress_ratio = 4;
    s.with_selection = 1;
    sm70ops_desc_qsa_index(&call, &s, 0);
  } else {
    sm70ops_desc_qsa_attn_sizes s{};
    s.batch = b, s.q_heads = 6, s.kv_heads = 1, s.head_dim = 256, s.sm_scale = 0.0625f;
    sm70ops_desc_qsa_attn(&call, &s, 0);
  }
  sm70ops_decision d = {};
  d.struct_size = sizeof(d);
  return sm70ops_host_decide(host, op, &call.args, &d);
}

enum { kChildOk = 0, kChildNoDevice = 3, kChildError = 1 };

// The child: a context that asks CUDA for the device, and a device query.
int ChildUsesCuda() {
  sm70ops_host *host = Open(0);
  if (host == nullptr) return kChildError;
  int32_t count = 0;
  const sm70ops_status status = sm70ops_host_api(host)->device_count(&count);
  sm70ops_host_close(host);
  if (status != SM70OPS_OK) return kChildError;
  return count > 0 ? kChildOk : kChildNoDevice;
}

TEST(SM70_Lifecycle, ForkAfterCapabilityQueriesThenCudaInChild) {
  sm70ops_host *host = Open(70);  // planning context: no CUDA call in this process
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(Query(host, SM70OPS_OP_QSA_ATTN), SM70OPS_OK);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(ChildUsesCuda());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  sm70ops_host_close(host);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died";
  if (WEXITSTATUS(status) == kChildNoDevice) GTEST_SKIP() << "needs a CUDA GPU: no CUDA device";
  EXPECT_EQ(WEXITSTATUS(status), kChildOk);
}

// A context on the real device reads the device's own shared memory limit and its creation log
// names it. (Where the device and the plugin's table agree, as on an H200, this cannot tell the
// two apart; tests/plugin/context_smem_test does, against a fake device.)
TEST(SM70_Lifecycle, DeviceContextReadsTheSharedMemoryLimit) {
  SM70OPS_REQUIRE_GPU();
  int optin = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0),
            cudaSuccess);
  sm70ops_test::LogCapture log;
  sm70ops_host *host = Open(0, &log);
  ASSERT_NE(host, nullptr);
  sm70ops_host_close(host);
  EXPECT_TRUE(log.Has(", " + std::to_string(optin / 1024) + " KB of shared memory per block"))
      << log.Dump();
}

// An ordinal past the machine's devices is the host's mistake: refused, naming it, where a
// machine without any device gets a context whose every op declines NO_DEVICE.
TEST(SM70_Lifecycle, DeviceOrdinalPastTheDevicesIsRefused) {
  SM70OPS_REQUIRE_GPU();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  sm70ops_host *host = Open(70);  // the API without a device context
  ASSERT_NE(host, nullptr);
  const sm70ops_api *api = sm70ops_host_api(host);
  sm70ops_context_desc desc = {};
  desc.struct_size = sizeof(desc);
  desc.device_ordinal = count;
  sm70ops_context *ctx = reinterpret_cast<sm70ops_context *>(&desc);  // stale, must be reset
  EXPECT_EQ(api->context_create(&desc, &ctx), SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(api->last_error()).find("device_ordinal " + std::to_string(count)),
            std::string::npos)
      << api->last_error();
  sm70ops_host_close(host);
}

// What a process holds: resident set, malloc'd bytes in use, and mappings (a library or
// driver object left mapped shows up in the last one, a leaked allocation in the second).
struct Footprint {
  long rss_kib = 0;
  long heap_kib = 0;
  long mappings = 0;
  size_t device_free = 0;
};

// The device is asked first: this binary's own CUDA runtime starts on its first query and maps
// about 100 MB of driver (seen on the H200), which must land before a baseline, not in it.
Footprint Measure() {
  Footprint f;
  size_t total = 0;
  cudaMemGetInfo(&f.device_free, &total);
  long pages = 0;
  if (FILE *statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &pages, &f.rss_kib) != 2) f.rss_kib = 0;
    std::fclose(statm);
    f.rss_kib *= sysconf(_SC_PAGESIZE) / 1024;
  }
  const struct mallinfo2 heap = mallinfo2();
  f.heap_kib = long((heap.uordblks + heap.hblkhd) / 1024);
  if (FILE *maps = std::fopen("/proc/self/maps", "r")) {
    for (int c; (c = std::fgetc(maps)) != EOF;) f.mappings += c == '\n';
    std::fclose(maps);
  }
  return f;
}

// dlopen, a context (on the real device, or planning for compute capability 7.0), a check,
// context destroy, dlclose.
void Cycle(int32_t compute_capability) {
  sm70ops_host *host = Open(compute_capability);
  ASSERT_NE(host, nullptr);
  Query(host, SM70OPS_OP_QSA_INDEX);
  sm70ops_host_close(host);
}

void ExpectNoGrowth(int32_t compute_capability) {
  Measure();  // starts this binary's CUDA runtime (see Measure)
  for (int i = 0; i < 50; ++i) Cycle(compute_capability);  // caches and the primary context settle
  const Footprint before = Measure();
  for (int i = 0; i < 1000; ++i) Cycle(compute_capability);
  const Footprint after = Measure();
  const long device_drop = long(before.device_free) - long(after.device_free);
  std::printf(
      "  1000 cycles: host RSS %+ld KiB, heap in use %+ld KiB, mappings %+ld, device "
      "free memory %+ld KiB\n",
      after.rss_kib - before.rss_kib, after.heap_kib - before.heap_kib,
      after.mappings - before.mappings, -device_drop / 1024);
  EXPECT_LE(after.rss_kib - before.rss_kib, 4096) << "host memory grew over 1000 cycles";
  EXPECT_LE(device_drop, 4l << 20) << "device memory shrank over 1000 cycles";
}

TEST(SM70_Lifecycle, ThousandPlanningCyclesDoNotGrow) {
  SM70OPS_REQUIRE_GPU();
  ExpectNoGrowth(70);
}

TEST(SM70_Lifecycle, ThousandDeviceCyclesDoNotGrow) {
  SM70OPS_REQUIRE_GPU();
  ExpectNoGrowth(0);
}

}  // namespace
}  // namespace sm70ops_gpu
