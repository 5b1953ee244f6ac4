// The loader against the real plugin, on any machine: compute capability 70 is given, so no CUDA
// device is needed; every call here is declined, which is what exercises the fallback path.
#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "integration/host/sm70ops_host.h"
#include "tests/abi/log_capture.h"

namespace {

std::string PluginPath() {
  const char *root = std::getenv("TEST_SRCDIR");
  return std::string(root != nullptr ? root : ".") + "/sm70ops/libsm70ops.so";
}

// The fallback, like the log callback (LogCapture), may be called from several threads at once.
struct FallbackCalls {
  std::mutex mutex;
  int count = 0;
  sm70ops_op op = 0;
  int result = 0;
};

int CountingFallback(void *user, sm70ops_op op, const void *, void *) {
  auto *calls = static_cast<FallbackCalls *>(user);
  std::lock_guard<std::mutex> lock(calls->mutex);
  ++calls->count;
  calls->op = op;
  return calls->result;
}

class HostTest : public ::testing::Test {
 protected:
  sm70ops_status Open(const std::string &path, sm70ops_log_level level) {
    library_ = path;
    sm70ops_host_options opt = {};
    opt.struct_size = sizeof(opt);
    opt.library_path = library_.c_str();
    opt.compute_capability = 70;
    opt.log_level = level;
    opt.log_fn = sm70ops_test::LogCapture::Callback;
    opt.log_user_data = &log_;
    sm70ops_status status = sm70ops_host_open(&opt, &host_, err_, sizeof(err_));
    log_.Clear();  // context creation's own lines are the plugin's business
    return status;
  }

  sm70ops_host_result Run(sm70ops_op op, const void *args) {
    return sm70ops_host_run(host_, op, args, nullptr, nullptr, 0, CountingFallback, &fallback_);
  }

  void TearDown() override { sm70ops_host_close(host_); }

  std::string library_;
  sm70ops_host *host_ = nullptr;
  char err_[512] = {};
  sm70ops_test::LogCapture log_;
  FallbackCalls fallback_;
  // Declined with STRUCT_SIZE: a descriptor from a host that forgot struct_size.
  sm70ops_qsa_attn_args no_size_ = {};
};

TEST_F(HostTest, BadPathGivesClearError) {
  EXPECT_EQ(Open("/nonexistent/libsm70ops.so", SM70OPS_LOG_DEBUG), SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(host_, nullptr);
  EXPECT_NE(std::string(err_).find("cannot load the sm70ops plugin '/nonexistent/libsm70ops.so'"),
            std::string::npos)
      << err_;
}

TEST_F(HostTest, LibraryWithoutEntryPointIsRefused) {
  EXPECT_EQ(Open("libm.so.6", SM70OPS_LOG_DEBUG), SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(host_, nullptr);
  EXPECT_NE(std::string(err_).find("has no symbol sm70ops_get_api"), std::string::npos) << err_;
}

TEST_F(HostTest, OptionsWithoutStructSizeAreRefused) {
  sm70ops_host_options opt = {};
  EXPECT_EQ(sm70ops_host_open(&opt, &host_, err_, sizeof(err_)), SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(host_, nullptr);
  EXPECT_NE(std::string(err_).find("struct_size 0"), std::string::npos) << err_;
}

TEST_F(HostTest, OpensForV100WithoutDevice) {
  ASSERT_EQ(Open(PluginPath(), SM70OPS_LOG_DEBUG), SM70OPS_OK) << err_;
  ASSERT_NE(sm70ops_host_api(host_), nullptr);
  EXPECT_NE(sm70ops_host_context(host_), nullptr);
  EXPECT_EQ(sm70ops_host_api(host_)->abi_major, static_cast<uint32_t>(SM70OPS_ABI_MAJOR));
  EXPECT_EQ(sm70ops_host_abi_minor(host_), static_cast<uint32_t>(SM70OPS_ABI_MINOR));
  std::string loaded = sm70ops_host_library_path(host_);
  EXPECT_EQ(loaded.substr(loaded.rfind('/') + 1), "libsm70ops.so") << loaded;
}

TEST_F(HostTest, DeclineRunsFallbackExactlyOnce) {
  ASSERT_EQ(Open(PluginPath(), SM70OPS_LOG_ERROR), SM70OPS_OK) << err_;
  fallback_.result = 7;
  sm70ops_host_result r = Run(SM70OPS_OP_QSA_ATTN, &no_size_);
  EXPECT_EQ(r.path, SM70OPS_HOST_PATH_FALLBACK);
  EXPECT_EQ(r.plugin_status, SM70OPS_ERR_UNSUPPORTED);
  EXPECT_EQ(r.fallback_result, 7);
  EXPECT_EQ(fallback_.count, 1);
  EXPECT_EQ(fallback_.op, SM70OPS_OP_QSA_ATTN);
}

TEST_F(HostTest, DecideReportsTheDecline) {
  ASSERT_EQ(Open(PluginPath(), SM70OPS_LOG_ERROR), SM70OPS_OK) << err_;
  sm70ops_decision d;
  EXPECT_EQ(sm70ops_host_decide(host_, SM70OPS_OP_QSA_ATTN, &no_size_, &d), SM70OPS_OK);
  EXPECT_EQ(d.accepted, 0);
  EXPECT_EQ(d.reason, SM70OPS_REASON_STRUCT_SIZE);
  EXPECT_EQ(d.route, SM70OPS_ROUTE_NONE);
  EXPECT_EQ(fallback_.count, 0);
}

TEST_F(HostTest, NullHandleFailsOpenToFallback) {
  sm70ops_host_result r = Run(SM70OPS_OP_NVFP4_MOE, &no_size_);
  EXPECT_EQ(r.path, SM70OPS_HOST_PATH_FALLBACK);
  EXPECT_EQ(r.plugin_status, SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fallback_.count, 1);
  sm70ops_decision d;
  EXPECT_EQ(sm70ops_host_decide(nullptr, SM70OPS_OP_QSA_ATTN, &no_size_, &d),
            SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(d.accepted, 0);
  EXPECT_EQ(d.reason, SM70OPS_REASON_PLUGIN_DISABLED);
}

TEST_F(HostTest, NoFallbackMeansNothingRan) {
  ASSERT_EQ(Open(PluginPath(), SM70OPS_LOG_ERROR), SM70OPS_OK) << err_;
  sm70ops_host_result r = sm70ops_host_run(host_, SM70OPS_OP_QSA_ATTN, &no_size_, nullptr, nullptr,
                                           0, nullptr, nullptr);
  EXPECT_EQ(r.path, SM70OPS_HOST_PATH_NONE);
  EXPECT_EQ(r.fallback_result, 0);
}

TEST_F(HostTest, DecisionLoggedOncePerChange) {
  ASSERT_EQ(Open(PluginPath(), SM70OPS_LOG_INFO), SM70OPS_OK) << err_;
  for (int i = 0; i < 3; ++i) Run(SM70OPS_OP_QSA_ATTN, &no_size_);  // STRUCT_SIZE
  ASSERT_EQ(log_.Lines().size(), 1u);
  EXPECT_NE(log_.Lines()[0].second.find("qsa_attn declined (STRUCT_SIZE"), std::string::npos)
      << log_.Dump();
  for (int i = 0; i < 2; ++i) Run(SM70OPS_OP_QSA_ATTN, nullptr);  // INVALID_ARGUMENT
  Run(SM70OPS_OP_QSA_ATTN, &no_size_);                            // back: a change again
  Run(SM70OPS_OP_QSA_INDEX, &no_size_);                           // each op keeps its own
  EXPECT_EQ(log_.Lines().size(), 4u);
  for (const auto &line : log_.Lines()) EXPECT_EQ(line.first, SM70OPS_LOG_INFO) << line.second;
  EXPECT_EQ(fallback_.count, 7);
}

TEST_F(HostTest, DebugLevelLogsEveryCall) {
  ASSERT_EQ(Open(PluginPath(), SM70OPS_LOG_DEBUG), SM70OPS_OK) << err_;
  for (int i = 0; i < 3; ++i) Run(SM70OPS_OP_NVFP4_MOE, &no_size_);
  const auto lines = log_.Lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].first, SM70OPS_LOG_INFO);
  EXPECT_EQ(lines[1].first, SM70OPS_LOG_DEBUG);
  EXPECT_EQ(lines[2].first, SM70OPS_LOG_DEBUG);
}

TEST_F(HostTest, ConcurrentCallsLogOneChange) {
  ASSERT_EQ(Open(PluginPath(), SM70OPS_LOG_INFO), SM70OPS_OK) << err_;
  constexpr int kThreads = 8, kCallsEach = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this] {
      for (int i = 0; i < kCallsEach; ++i) Run(SM70OPS_OP_QSA_ATTN, &no_size_);
    });
  }
  for (auto &thread : threads) thread.join();
  EXPECT_EQ(log_.Lines().size(), 1u);
  EXPECT_EQ(fallback_.count, kThreads * kCallsEach);
}

TEST(HostNames, OpAndRouteNames) {
  EXPECT_STREQ(sm70ops_host_op_name(SM70OPS_OP_NVFP4_MOE_PREPARE), "nvfp4_moe_prepare");
  EXPECT_STREQ(sm70ops_host_op_name(99), "unknown");
  EXPECT_STREQ(sm70ops_host_route_name(SM70OPS_ROUTE_QSA_ATTN_WMMA), "qsa_attn_wmma");
  EXPECT_STREQ(sm70ops_host_route_name(-1), "unknown");
}

TEST(HostClose, NullIsNoOp) { sm70ops_host_close(nullptr); }

}  // namespace
