#include "tests/abi/plugin_loader.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <cstring>

namespace sm70ops_test {

const char* const kRollbackVariables[7] = {
    "SM70OPS_DISABLE",           "SM70OPS_DISABLE_QSA_INDEX", "SM70OPS_DISABLE_QSA_ATTN",
    "SM70OPS_DISABLE_NVFP4_MOE", "SM70OPS_ALLOW_ARCH",        "VLLM_SM70_QSA_INDEXER_CUBLAS",
    "SM70OPS_ALLOW_PTX",
};

std::string PluginPath() {
  if (const char* path = std::getenv("SM70OPS_LIBRARY"); path != nullptr && path[0] != '\0') {
    return path;
  }
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return "";  // Not under `bazel test`: the caller reports how to fix it.
  return std::string(srcdir) + "/" + (workspace != nullptr ? workspace : "sm70ops") +
         "/libsm70ops.so";
}

LoadedPlugin::LoadedPlugin() {
  const std::string path = PluginPath();
  if (path.empty()) {
    error_ = "set SM70OPS_LIBRARY or run under `bazel test` (TEST_SRCDIR is unset)";
    return;
  }
  // RTLD_LOCAL as a host would: the plugin must not rely on symbols leaking into the global scope.
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    error_ = std::string("dlopen: ") + dlerror();
    return;
  }
  get_api_ = reinterpret_cast<sm70ops_get_api_fn>(dlsym(handle_, SM70OPS_ENTRY_POINT_NAME));
  if (get_api_ == nullptr) {
    error_ = std::string("dlsym: ") + dlerror();
    return;
  }
  uint32_t minor = 0;
  sm70ops_status status = get_api_(SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, &minor, &api_);
  if (status != SM70OPS_OK || api_ == nullptr) error_ = "get_api failed: " + std::to_string(status);
}

LoadedPlugin::~LoadedPlugin() {
  if (handle_ != nullptr) dlclose(handle_);
}

const LoadedPlugin& SharedPlugin() {
  static const LoadedPlugin* plugin = new LoadedPlugin();  // Never closed: tests share its table.
  return *plugin;
}

const sm70ops_api& Api() { return *SharedPlugin().api(); }

sm70ops_context_desc ContextDesc(int32_t cc) {
  sm70ops_context_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.compute_capability = cc;
  desc.log_level = SM70OPS_LOG_DEBUG;
  return desc;
}

ContextPtr MakeContext(const sm70ops_api& api, int32_t cc, LogCapture* log) {
  sm70ops_context_desc desc = ContextDesc(cc);
  if (log != nullptr) {
    desc.log_fn = LogCapture::Callback;
    desc.log_user_data = log;
  }
  sm70ops_context* ctx = nullptr;
  sm70ops_status status = api.context_create(&desc, &ctx);
  EXPECT_EQ(status, SM70OPS_OK) << api.last_error();
  return ContextPtr(ctx, ContextDeleter{&api});
}

sm70ops_decision Check(const sm70ops_api& api, const sm70ops_context* ctx, sm70ops_op op,
                       const void* args) {
  sm70ops_decision decision{};
  decision.struct_size = sizeof(decision);
  EXPECT_EQ(api.check(ctx, op, args, &decision), SM70OPS_OK) << api.last_error();
  return decision;
}

std::string Describe(const sm70ops_decision& d) {
  return "accepted=" + std::to_string(d.accepted) + " reason=" + std::to_string(d.reason) +
         " route=" + std::to_string(d.route) + " workspace=" + std::to_string(d.workspace_bytes) +
         " output=" + std::to_string(d.output_bytes) + " message='" +
         std::string(d.message, strnlen(d.message, sizeof(d.message))) + "'";
}

bool NamesWord(const std::string& text, const std::string& word) {
  auto is_ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    bool starts = at == 0 || !is_ident(text[at - 1]);
    bool ends = at + word.size() == text.size() || !is_ident(text[at + word.size()]);
    if (starts && ends) return true;
  }
  return false;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) saved_ = old;
  if (value != nullptr) {
    setenv(name, value, 1);
  } else {
    unsetenv(name);
  }
}

ScopedEnv::~ScopedEnv() {
  if (saved_) {
    setenv(name_.c_str(), saved_->c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

void AbiTest::SetUp() {
  ASSERT_EQ(SharedPlugin().error(), "") << "plugin: " << PluginPath();
  api_ = &Api();
  ctx_ = MakeContext(*api_);
  ASSERT_NE(ctx_, nullptr);
}

}  // namespace sm70ops_test

// The suite's main: the tests assume the plugin's defaults, so a developer's rollback switches
// (SM70OPS_DISABLE=1 in the shell) must not leak in and turn every op off.
int main(int argc, char** argv) {
  for (const char* name : sm70ops_test::kRollbackVariables) unsetenv(name);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
