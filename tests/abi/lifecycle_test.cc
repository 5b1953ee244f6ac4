// abi.md items 2, 5 and 10: the plugin survives dlclose/dlopen cycles, identifies itself, and names
// every status and reason code (and tolerates codes it does not know).
#include <climits>
#include <cstring>
#include <fstream>
#include <string>

#include "tests/abi/op_cases.h"
#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

int MappingsOf(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find(needle) != std::string::npos;
  return count;
}

// Each cycle is a full host session; the answer must not depend on how often the plugin was
// loaded. The library is linked -z nodelete (its CUDA runtime cannot be unloaded cleanly), so
// after the first load it stays mapped once: reloading must reuse it, never map another copy.
TEST(Abi_Lifecycle, ReloadCycles) {
  auto c = MakeCase(SM70OPS_OP_QSA_INDEX);
  std::string first;
  int mapped_once = -1;
  for (int cycle = 0; cycle < 200; ++cycle) {
    {
      LoadedPlugin plugin;
      ASSERT_EQ(plugin.error(), "") << "cycle " << cycle;
      ContextPtr ctx = MakeContext(*plugin.api());
      const std::string answer = Describe(CheckCase(*plugin.api(), ctx.get(), *c));
      if (cycle == 0) first = answer;
      ASSERT_EQ(answer, first) << "cycle " << cycle;
    }
    if (cycle == 0) mapped_once = MappingsOf("libsm70ops.so");
  }
  EXPECT_GT(mapped_once, 0) << "dlclose unloaded the library: is -z nodelete gone?";
  EXPECT_EQ(MappingsOf("libsm70ops.so"), mapped_once);
}

using Abi_Identity = AbiTest;

TEST_F(Abi_Identity, Fields) {
  sm70ops_identity id{};
  id.struct_size = sizeof(id);
  ASSERT_EQ(api().get_identity(&id), SM70OPS_OK);
  EXPECT_STREQ(id.name, "sm70ops");
  EXPECT_EQ(id.abi_major, 1u);
  EXPECT_EQ(id.abi_minor, 2u);
  EXPECT_EQ(id.version_major, uint32_t{SM70OPS_VERSION_MAJOR});
  EXPECT_EQ(id.version_minor, uint32_t{SM70OPS_VERSION_MINOR});
  EXPECT_EQ(id.version_patch, uint32_t{SM70OPS_VERSION_PATCH});
  EXPECT_EQ(id.dlpack_version, 60u);
  EXPECT_GE(id.cuda_version, 11000u);  // both build configurations: CUDA 11.8 and 13
  EXPECT_STRNE(id.git_revision, "");
  EXPECT_EQ(std::string(id.sm_list).rfind("sm_", 0), 0u) << id.sm_list;
}

TEST_F(Abi_Identity, TooSmallOrNullIsInvalid) {
  EXPECT_EQ(api().get_identity(nullptr), SM70OPS_ERR_INVALID_ARGUMENT);
  sm70ops_identity id{};
  id.struct_size = offsetof(sm70ops_identity, sm_list);
  EXPECT_EQ(api().get_identity(&id), SM70OPS_ERR_INVALID_ARGUMENT);
}

// A newer host's larger struct: the plugin fills what it knows and leaves the rest alone.
TEST_F(Abi_Identity, LargerStructTailUntouched) {
  struct {
    sm70ops_identity id;
    unsigned char tail[32];
  } big;
  std::memset(&big, 0xA5, sizeof(big));
  big.id.struct_size = sizeof(big);
  ASSERT_EQ(api().get_identity(&big.id), SM70OPS_OK);
  EXPECT_STREQ(big.id.name, "sm70ops");
  for (unsigned char byte : big.tail) ASSERT_EQ(byte, 0xA5);
}

const char* const kStatusNames[SM70OPS_STATUS_COUNT] = {
    "SM70OPS_OK",
    "SM70OPS_ERR_INVALID_ARGUMENT",
    "SM70OPS_ERR_ABI_MISMATCH",
    "SM70OPS_ERR_UNSUPPORTED",
    "SM70OPS_ERR_NOT_IMPLEMENTED",
    "SM70OPS_ERR_WORKSPACE_TOO_SMALL",
    "SM70OPS_ERR_NO_DEVICE",
    "SM70OPS_ERR_CUDA",
    "SM70OPS_ERR_INDEX_OUT_OF_RANGE",
    "SM70OPS_ERR_INTERNAL",
};

const char* const kReasonNames[SM70OPS_REASON_COUNT] = {
    "ACCEPTED",
    "PLUGIN_DISABLED",
    "OP_DISABLED",
    "NO_DEVICE",
    "ARCH",
    "UNKNOWN_OP",
    "STRUCT_SIZE",
    "INVALID_ARGUMENT",
    "UNSUPPORTED_DTYPE",
    "UNSUPPORTED_SHAPE",
    "BELOW_CROSSOVER",
    "NOT_IMPLEMENTED",
    "TOO_LARGE",
};

constexpr int32_t kOutOfRange[] = {-1, SM70OPS_REASON_COUNT, 1000, INT32_MAX, INT32_MIN};

using Abi_Names = AbiTest;

TEST_F(Abi_Names, EveryStatus) {
  for (int32_t s = 0; s < SM70OPS_STATUS_COUNT; ++s) {
    EXPECT_STREQ(api().status_name(s), kStatusNames[s]);
    EXPECT_STRNE(api().status_string(s), "");
    EXPECT_STRNE(api().status_string(s), "unknown status") << s;
  }
}

TEST_F(Abi_Names, UnknownStatus) {
  for (int32_t s : kOutOfRange) {
    if (s == SM70OPS_REASON_COUNT) s = SM70OPS_STATUS_COUNT;
    EXPECT_STREQ(api().status_name(s), "SM70OPS_STATUS_UNKNOWN") << s;
    EXPECT_STREQ(api().status_string(s), "unknown status") << s;
  }
}

TEST_F(Abi_Names, EveryReason) {
  for (int32_t r = 0; r < SM70OPS_REASON_COUNT; ++r) {
    EXPECT_STREQ(api().reason_name(r), kReasonNames[r]);
  }
}

// The header promises only "a static string, never NULL"; it must not pass for a real reason.
TEST_F(Abi_Names, UnknownReason) {
  for (int32_t r : kOutOfRange) {
    const char* name = api().reason_name(r);
    ASSERT_NE(name, nullptr) << r;
    EXPECT_STRNE(name, "") << r;
    for (const char* known : kReasonNames) EXPECT_STRNE(name, known) << r;
  }
}

}  // namespace
}  // namespace sm70ops_test
