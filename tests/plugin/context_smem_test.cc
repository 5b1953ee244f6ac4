// sm70_context_smem_per_block: a context on a real device plans to the limit read from that
// device, whatever the plugin's table says for its capability; a capability given by the host
// (no device to ask) plans to the table. The GPU lifecycle test checks the read itself, but on
// an H200 the device and the table agree, so only this test tells the two sources apart.
extern "C" {
#include "plugin/context.h"
}

#include <gtest/gtest.h>

#include <cstring>

namespace {

sm70ops_context Context(int32_t cc, int32_t from_host, uint32_t device_smem) {
  sm70ops_context ctx;
  std::memset(&ctx, 0, sizeof(ctx));
  ctx.compute_capability = cc;
  ctx.capability_from_host = from_host;
  ctx.device_smem_per_block = device_smem;
  return ctx;
}

TEST(Plugin_ContextSmem, RealDeviceUsesItsOwnLimit) {
  const sm70ops_context ctx = Context(70, 0, 72 * 1024);  // not the table's 96 KB
  EXPECT_EQ(sm70_context_smem_per_block(&ctx), 72u * 1024u);
}

TEST(Plugin_ContextSmem, HostCapabilityUsesTheTable) {
  const sm70ops_context v100 = Context(70, 1, 0);
  const sm70ops_context h100 = Context(90, 1, 0);
  const sm70ops_context unknown = Context(61, 1, 0);
  EXPECT_EQ(sm70_context_smem_per_block(&v100), 96u * 1024u);
  EXPECT_EQ(sm70_context_smem_per_block(&h100), 227u * 1024u);
  EXPECT_EQ(sm70_context_smem_per_block(&unknown), 48u * 1024u);  // what needs no opt-in
}

}  // namespace
