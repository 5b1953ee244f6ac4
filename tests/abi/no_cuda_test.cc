// abi.md items 2 and 6: loading the plugin and asking it questions is free. After dlopen, get_api,
// get_identity, context_create with an explicit compute capability and a check of every op, no
// libcuda is mapped, no thread was started and nothing was printed.
//
// Its own binary: the fresh process starts without the plugin, so the snapshot "before" is clean
// and no other test can have loaded CUDA first.
#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include "tests/abi/op_cases.h"
#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

std::mutex dlopen_mu;
std::vector<std::string> dlopened;  // every name passed to dlopen in this process

}  // namespace
}  // namespace sm70ops_test

// Interposes dlopen: this binary is linked with -rdynamic, so the plugin's statically linked cudart
// binds its dlopen("libcuda.so.1") here. That catches an attempt to load the driver even on a
// machine where the load fails or is undone, which /proc/self/maps alone would miss.
extern "C" void* dlopen(const char* file, int mode) noexcept {
  using DlopenFn = void* (*)(const char*, int);
  static const auto real = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
  {
    std::lock_guard<std::mutex> lock(sm70ops_test::dlopen_mu);
    sm70ops_test::dlopened.push_back(file != nullptr ? file : "(null)");
  }
  return real(file, mode);
}

namespace sm70ops_test {
namespace {

struct ProcessState {
  bool libcuda_mapped = false;
  int threads = 0;
};

ProcessState Snapshot() {
  ProcessState state;
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  state.libcuda_mapped = text.str().find("libcuda") != std::string::npos;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(tasks)) state.threads += entry->d_name[0] != '.';
    closedir(tasks);
  }
  return state;
}

// Sends stdout and stderr to a temporary file while alive; text() is what arrived there.
class CaptureOutput {
 public:
  CaptureOutput() : file_(std::tmpfile()) {
    std::fflush(nullptr);
    for (int fd : {1, 2}) {
      saved_[fd - 1] = dup(fd);
      dup2(fileno(file_), fd);
    }
  }
  std::string Finish() {
    std::fflush(nullptr);
    for (int fd : {1, 2}) {
      dup2(saved_[fd - 1], fd);
      close(saved_[fd - 1]);
    }
    std::string out;
    std::rewind(file_);
    for (int ch = std::fgetc(file_); ch != EOF; ch = std::fgetc(file_))
      out += static_cast<char>(ch);
    std::fclose(file_);
    return out;
  }

 private:
  FILE* file_;
  int saved_[2] = {-1, -1};
};

class Abi_NoCuda : public testing::Test {
 protected:
  // Runs the whole sequence once; the tests below each judge one aspect of it. No gtest
  // assertion runs while output is captured, so nothing of the test's own reaches the capture.
  static void SetUpTestSuite() {
    before_ = Snapshot();
    CaptureOutput capture;
    plugin_ = new LoadedPlugin();
    if (plugin_->api() != nullptr) Exercise(*plugin_->api());
    after_ = Snapshot();  // taken with the plugin still loaded
    printed_ = capture.Finish();
  }

  static void Exercise(const sm70ops_api& api) {
    sm70ops_identity id{};
    id.struct_size = sizeof(id);
    statuses_.push_back(api.get_identity(&id));
    sm70ops_context_desc desc = ContextDesc(70);
    sm70ops_context* ctx = nullptr;
    statuses_.push_back(api.context_create(&desc, &ctx));
    for (sm70ops_op op : kOps) {
      auto c = MakeCase(op);
      sm70ops_decision d{};
      d.struct_size = sizeof(d);
      statuses_.push_back(api.check(ctx, op, c->args(), &d));
    }
    api.context_destroy(ctx);
  }

  static inline LoadedPlugin* plugin_ = nullptr;
  static inline ProcessState before_, after_;
  static inline std::string printed_;
  static inline std::vector<sm70ops_status> statuses_;
};

TEST_F(Abi_NoCuda, SequenceSucceeded) {
  EXPECT_EQ(plugin_->error(), "");
  EXPECT_EQ(statuses_, std::vector<sm70ops_status>(2 + kOps.size(), SM70OPS_OK));
}

TEST_F(Abi_NoCuda, NoLibcudaMapped) {
  ASSERT_FALSE(before_.libcuda_mapped) << "the test process itself mapped libcuda";
  EXPECT_FALSE(after_.libcuda_mapped);
}

TEST_F(Abi_NoCuda, NoLibcudaOpened) {
  std::lock_guard<std::mutex> lock(dlopen_mu);
  ASSERT_FALSE(dlopened.empty()) << "the dlopen interposer saw nothing, not even the plugin";
  for (const std::string& name : dlopened) EXPECT_EQ(name.find("libcuda"), std::string::npos);
}

TEST_F(Abi_NoCuda, NoThreadStarted) { EXPECT_EQ(after_.threads, before_.threads); }

TEST_F(Abi_NoCuda, NothingPrinted) { EXPECT_EQ(printed_, ""); }

}  // namespace
}  // namespace sm70ops_test
