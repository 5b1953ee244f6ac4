// The shared-memory limit a context plans to, set once at creation: the plugin's table when the
// host gives its compute capability (no device to ask), the device's own opt-in limit otherwise.
// For the second case the CUDA queries are replaced (the BUILD wraps them at link time) by a
// device whose limit differs from the table's for its capability, so a context that used the
// table would fail; on the H200 device machine the two agree and cannot tell (lifecycle_gpu_test).
extern "C" {
#include "plugin/context.h"
#include "plugin/cuda_device.h"
}

#include <gtest/gtest.h>

#include <cstring>

namespace {

constexpr int32_t kFakeCapability = 90;
constexpr uint32_t kFakeSmemPerBlock = 100u * 1024u;  // the table says 227 KB for 9.0

sm70ops_context *CreateContext(int32_t cc) {
  sm70ops_context_desc desc;
  std::memset(&desc, 0, sizeof(desc));
  desc.struct_size = sizeof(desc);
  desc.compute_capability = cc;  // 0: ask the (fake) device
  desc.log_level = SM70OPS_LOG_ERROR;
  sm70ops_context *ctx = nullptr;
  EXPECT_EQ(sm70_context_create(&desc, &ctx), SM70OPS_OK);
  return ctx;
}

uint32_t ContextSmem(int32_t cc) {
  sm70ops_context *ctx = CreateContext(cc);
  if (ctx == nullptr) return 0;
  const uint32_t smem = ctx->smem_per_block;
  sm70_context_destroy(ctx);
  return smem;
}

TEST(Plugin_ContextSmem, HostCapabilityUsesTheTable) {
  EXPECT_EQ(ContextSmem(70), 96u * 1024u);
  EXPECT_EQ(ContextSmem(90), 227u * 1024u);
  EXPECT_EQ(ContextSmem(61), 48u * 1024u);  // what needs no opt-in
}

TEST(Plugin_ContextSmem, RealDeviceUsesItsOwnLimit) {
  EXPECT_EQ(ContextSmem(0), kFakeSmemPerBlock);
}

}  // namespace

// The device the real-device case asks about (linked with -Wl,--wrap=NAME).
extern "C" int32_t __wrap_sm70_cuda_device_count(int32_t *count, sm70_cuda_error *) {
  *count = 1;
  return 0;
}
extern "C" int32_t __wrap_sm70_cuda_compute_capability(int32_t, int32_t *cc, sm70_cuda_error *) {
  *cc = kFakeCapability;
  return 0;
}
extern "C" int32_t __wrap_sm70_cuda_smem_per_block(int32_t, uint32_t *bytes, sm70_cuda_error *) {
  *bytes = kFakeSmemPerBlock;
  return 0;
}
