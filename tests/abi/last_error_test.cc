// abi.md item 5: last_error is per thread. A failure on one thread is invisible on another, and
// threads failing at the same time each read back their own message.
#include <string>
#include <thread>
#include <vector>

#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

using Abi_LastError = AbiTest;

// Fails context_create with a message naming `ordinal`, and returns that message.
std::string FailWithOrdinal(const sm70ops_api& api, int32_t ordinal) {
  sm70ops_context_desc desc = ContextDesc();
  desc.device_ordinal = ordinal;
  sm70ops_context* ctx = nullptr;
  EXPECT_EQ(api.context_create(&desc, &ctx), SM70OPS_ERR_INVALID_ARGUMENT);
  return api.last_error();
}

TEST_F(Abi_LastError, NotVisibleOnAnotherThread) {
  const std::string mine = FailWithOrdinal(api(), -7);
  ASSERT_TRUE(NamesWord(mine, "7")) << mine;
  std::string other_before, other_after;
  std::thread other([&] {
    other_before = api().last_error();
    other_after = FailWithOrdinal(api(), -8);
  });
  other.join();
  EXPECT_EQ(other_before, "");
  EXPECT_TRUE(NamesWord(other_after, "8")) << other_after;
  EXPECT_EQ(api().last_error(), mine);
}

TEST_F(Abi_LastError, ConcurrentFailuresKeepTheirOwnMessage) {
  std::vector<int> mixed_up(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        mixed_up[t] += !NamesWord(FailWithOrdinal(api(), -(100 + t)), std::to_string(100 + t));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mixed_up, std::vector<int>(8, 0));
}

}  // namespace
}  // namespace sm70ops_test
