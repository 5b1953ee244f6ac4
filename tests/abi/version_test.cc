// abi.md item 3: version negotiation, and item 4: the function table of ABI 1.0 is complete.
#include <algorithm>
#include <cstring>
#include <vector>

#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

class Abi_Version : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(SharedPlugin().error(), ""); }
  sm70ops_get_api_fn get_api() const { return SharedPlugin().get_api(); }
  // A non-NULL value the plugin must overwrite, so "left untouched" cannot pass as "set to NULL".
  const sm70ops_api* stale_ = reinterpret_cast<const sm70ops_api*>(&stale_);
};

TEST_F(Abi_Version, OtherMajorIsRefused) {
  for (uint32_t major : {SM70OPS_ABI_MAJOR - 1u, SM70OPS_ABI_MAJOR + 1u, 0xFFFFFFFFu}) {
    SCOPED_TRACE(major);
    uint32_t minor = 99;
    const sm70ops_api* api = stale_;
    EXPECT_EQ(get_api()(major, SM70OPS_ABI_MINOR, &minor, &api), SM70OPS_ERR_ABI_MISMATCH);
    EXPECT_EQ(api, nullptr);
  }
}

TEST_F(Abi_Version, MinorNegotiatesToTheLower) {
  std::vector<uint32_t> host_minors = {SM70OPS_ABI_MINOR, SM70OPS_ABI_MINOR + 1u, 0xFFFFFFFFu};
  if (SM70OPS_ABI_MINOR > 0) host_minors.push_back(SM70OPS_ABI_MINOR - 1u);  // 1.0 has no -1
  for (uint32_t host_minor : host_minors) {
    SCOPED_TRACE(host_minor);
    uint32_t minor = 99;
    const sm70ops_api* api = nullptr;
    ASSERT_EQ(get_api()(SM70OPS_ABI_MAJOR, host_minor, &minor, &api), SM70OPS_OK);
    EXPECT_EQ(minor, std::min<uint32_t>(host_minor, SM70OPS_ABI_MINOR));
    EXPECT_NE(api, nullptr);
  }
}

TEST_F(Abi_Version, NullOutputsAreInvalid) {
  uint32_t minor = 0;
  const sm70ops_api* api = nullptr;
  EXPECT_EQ(get_api()(SM70OPS_ABI_MAJOR, 0, nullptr, &api), SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(get_api()(SM70OPS_ABI_MAJOR, 0, &minor, nullptr), SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(get_api()(SM70OPS_ABI_MAJOR, 0, nullptr, nullptr), SM70OPS_ERR_INVALID_ARGUMENT);
}

// A static table: every call hands out the same one, so get_api needs no allocation.
TEST_F(Abi_Version, SameStaticTableEveryCall) {
  uint32_t minor = 0;
  const sm70ops_api* first = nullptr;
  const sm70ops_api* second = nullptr;
  ASSERT_EQ(get_api()(SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, &minor, &first), SM70OPS_OK);
  ASSERT_EQ(get_api()(SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, &minor, &second), SM70OPS_OK);
  EXPECT_EQ(first, second);
}

TEST_F(Abi_Version, TableDescribesItself) {
  const sm70ops_api& api = Api();
  EXPECT_EQ(api.struct_size, sizeof(sm70ops_api));
  EXPECT_EQ(api.abi_major, SM70OPS_ABI_MAJOR);
  EXPECT_EQ(api.abi_minor, SM70OPS_ABI_MINOR);
  EXPECT_EQ(api.reserved0, 0u);
}

// Every slot ABI 1.0 defines (status_name .. execute) is implemented: a NULL slot would tell a
// host "not implemented".
TEST_F(Abi_Version, NoNullSlotInAbi10) {
  const auto* table = reinterpret_cast<const unsigned char*>(&Api());
  for (size_t at = offsetof(sm70ops_api, status_name); at < sizeof(sm70ops_api);
       at += sizeof(void (*)())) {
    void (*slot)() = nullptr;
    std::memcpy(&slot, table + at, sizeof(slot));
    EXPECT_NE(slot, nullptr) << "slot at byte offset " << at;
  }
}

}  // namespace
}  // namespace sm70ops_test
