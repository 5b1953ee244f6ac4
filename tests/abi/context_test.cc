// abi.md item 4 for sm70ops_context_desc: creation with an explicit compute capability (no CUDA),
// and every malformed descriptor refused cleanly with *out NULL.
#include <cstring>
#include <string>

#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

// A desc followed by room, so a struct_size larger than the plugin's struct is readable memory.
struct OversizedDesc {
  sm70ops_context_desc desc;
  unsigned char tail[64];
};

class Abi_Context : public AbiTest {
 protected:
  // Expects `desc` refused with INVALID_ARGUMENT, *out reset to NULL and a message saying why.
  void ExpectRefused(const sm70ops_context_desc* desc) {
    sm70ops_context* ctx = reinterpret_cast<sm70ops_context*>(&ctx);  // stale, must be reset
    EXPECT_EQ(api().context_create(desc, &ctx), SM70OPS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(ctx, nullptr);
    EXPECT_STRNE(api().last_error(), "");
  }
};

TEST_F(Abi_Context, ExplicitCapabilityNeedsNoDevice) {
  ContextPtr ctx = MakeContext(api(), 70);
  EXPECT_NE(ctx, nullptr);
  EXPECT_STREQ(api().last_error(), "");
}

// A plan for a GPU this build has no code for answers from shapes and policy alone, so the
// context warns at creation (sm70ops check shows it); a build that carries sm_70 does not.
TEST_F(Abi_Context, ExplicitCapabilityWithoutCodeWarns) {
  sm70ops_identity id = {};
  id.struct_size = sizeof(id);
  ASSERT_EQ(api().get_identity(&id), SM70OPS_OK);
  const bool has_sm70 = std::string(id.sm_list).find("sm_70") != std::string::npos;
  LogCapture log;
  ContextPtr ctx = MakeContext(api(), 70, &log);
  EXPECT_EQ(log.Has("none for compute capability 7.0", SM70OPS_LOG_WARN), !has_sm70) << log.Dump();
}

TEST_F(Abi_Context, NullDescIsInvalid) { ExpectRefused(nullptr); }

TEST_F(Abi_Context, NullOutIsInvalid) {
  sm70ops_context_desc desc = ContextDesc();
  EXPECT_EQ(api().context_create(&desc, nullptr), SM70OPS_ERR_INVALID_ARGUMENT);
}

TEST_F(Abi_Context, WrongStructSizeIsInvalid) {
  const uint32_t kSize = sizeof(sm70ops_context_desc);
  for (uint32_t size : {0u, 4u, kSize - 8, kSize - 1, kSize + 1, kSize + 8, kSize + 64}) {
    SCOPED_TRACE(size);
    OversizedDesc big{};
    big.desc = ContextDesc();
    big.desc.struct_size = size;
    ExpectRefused(&big.desc);
  }
}

TEST_F(Abi_Context, OutOfRangeFieldsAreInvalid) {
  const struct { int32_t ordinal, cc; } kCases[] = {{-1, 70}, {0, -1}, {0, 1000}};
  for (const auto& c : kCases) {
    SCOPED_TRACE(testing::Message() << "ordinal " << c.ordinal << " cc " << c.cc);
    sm70ops_context_desc desc = ContextDesc(c.cc);
    desc.device_ordinal = c.ordinal;
    ExpectRefused(&desc);
  }
}

// Would crash, not fail, if destroy dereferenced its argument.
TEST_F(Abi_Context, DestroyNullIsNoOp) { api().context_destroy(nullptr); }

}  // namespace
}  // namespace sm70ops_test
