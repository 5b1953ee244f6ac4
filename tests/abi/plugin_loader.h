// Shared helpers of the ABI conformance suite: loading the plugin the way a host does (dlopen,
// never linked), contexts that touch no CUDA, environment capture, and message matchers.
#ifndef SM70OPS_TESTS_ABI_PLUGIN_LOADER_H_
#define SM70OPS_TESTS_ABI_PLUGIN_LOADER_H_

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "abi/sm70ops.h"
#include "tests/abi/log_capture.h"

namespace sm70ops_test {

// $SM70OPS_LIBRARY if set, else the Bazel runfile $TEST_SRCDIR/$TEST_WORKSPACE/libsm70ops.so.
std::string PluginPath();

// One dlopen(RTLD_NOW | RTLD_LOCAL) of the plugin, closed on destruction.
class LoadedPlugin {
 public:
  LoadedPlugin();
  ~LoadedPlugin();
  LoadedPlugin(const LoadedPlugin&) = delete;
  LoadedPlugin& operator=(const LoadedPlugin&) = delete;

  // Empty on success, else what dlopen/dlsym/get_api said.
  const std::string& error() const { return error_; }
  sm70ops_get_api_fn get_api() const { return get_api_; }
  // The table negotiated at the header's ABI version; NULL on error.
  const sm70ops_api* api() const { return api_; }

 private:
  void* handle_ = nullptr;
  sm70ops_get_api_fn get_api_ = nullptr;
  const sm70ops_api* api_ = nullptr;
  std::string error_;
};

// The process-wide plugin most tests share; loaded on first use and kept open. Api() requires
// SharedPlugin().error() to be empty (AbiTest::SetUp asserts it).
const LoadedPlugin& SharedPlugin();
const sm70ops_api& Api();

struct ContextDeleter {
  const sm70ops_api* api;
  void operator()(sm70ops_context* ctx) const { api->context_destroy(ctx); }
};
using ContextPtr = std::unique_ptr<sm70ops_context, ContextDeleter>;

// A context for compute capability `cc`: nonzero, so context_create makes no CUDA call. Logs at
// every level go to `log` when given. Returns NULL (and records a failure) if creation fails.
ContextPtr MakeContext(const sm70ops_api& api, int32_t cc = 70, LogCapture* log = nullptr);

// A zeroed desc with struct_size set, for tests that vary one field.
sm70ops_context_desc ContextDesc(int32_t cc = 70);

// check() with a correctly sized decision; records a failure unless it returns SM70OPS_OK.
sm70ops_decision Check(const sm70ops_api& api, const sm70ops_context* ctx, sm70ops_op op,
                       const void* args);

// Every field of a decision on one line, so two decisions compare (and print) as strings.
std::string Describe(const sm70ops_decision& d);

// True when `word` occurs in `text` as a whole identifier ("q" is in "q: rank 2", not in "query").
bool NamesWord(const std::string& text, const std::string& word);

// Sets (or, with nullptr, unsets) one variable for the object's lifetime, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// Every variable the plugin reads. Tests start with all of them unset (see the suite's main).
extern const char* const kRollbackVariables[7];

// Fixture: the shared plugin and an SM70 context created from a clean environment.
class AbiTest : public ::testing::Test {
 protected:
  void SetUp() override;
  const sm70ops_api& api() const { return *api_; }
  const sm70ops_context* ctx() const { return ctx_.get(); }

 private:
  const sm70ops_api* api_ = nullptr;
  ContextPtr ctx_{nullptr, ContextDeleter{nullptr}};
};

}  // namespace sm70ops_test

#endif  // SM70OPS_TESTS_ABI_PLUGIN_LOADER_H_
