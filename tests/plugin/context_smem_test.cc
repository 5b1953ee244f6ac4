// The shared-memory limit a context plans to when the host gives its compute capability (no
// device to ask): the plugin's table, set once at creation. A context on a real device reads its
// own limit instead (checked in tests/gpu/lifecycle_gpu_test.cc).
extern "C" {
#include "plugin/context.h"
}

#include <gtest/gtest.h>

#include <cstring>

namespace {

uint32_t HostContextSmem(int32_t cc) {
  sm70ops_context_desc desc;
  std::memset(&desc, 0, sizeof(desc));
  desc.struct_size = sizeof(desc);
  desc.compute_capability = cc;  // given: no CUDA call
  desc.log_level = SM70OPS_LOG_ERROR;
  sm70ops_context *ctx = nullptr;
  EXPECT_EQ(sm70_context_create(&desc, &ctx), SM70OPS_OK);
  if (ctx == nullptr) return 0;
  const uint32_t smem = ctx->smem_per_block;
  sm70_context_destroy(ctx);
  return smem;
}

TEST(Plugin_ContextSmem, HostCapabilityUsesTheTable) {
  EXPECT_EQ(HostContextSmem(70), 96u * 1024u);
  EXPECT_EQ(HostContextSmem(90), 227u * 1024u);
  EXPECT_EQ(HostContextSmem(61), 48u * 1024u);  // what needs no opt-in
}

}  // namespace
