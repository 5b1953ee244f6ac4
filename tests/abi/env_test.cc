// abi.md item 7: the rollback variables, read once at context_create and logged through the host's
// callback. Malformed values turn the whole plugin off (never on) and are reported as errors.
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "tests/abi/op_cases.h"
#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

using Want = std::array<sm70ops_reason, 4>;  // per op, in kOps order
constexpr sm70ops_reason kSame = -1;  // the decision of a context made from a clean environment
constexpr sm70ops_reason kOpOff = SM70OPS_REASON_OP_DISABLED;
constexpr Want kNoEffect = {kSame, kSame, kSame, kSame};
constexpr Want kPluginOff = {SM70OPS_REASON_PLUGIN_DISABLED, SM70OPS_REASON_PLUGIN_DISABLED,
                             SM70OPS_REASON_PLUGIN_DISABLED, SM70OPS_REASON_PLUGIN_DISABLED};
constexpr Want kArchDeclined = {SM70OPS_REASON_ARCH, SM70OPS_REASON_ARCH, SM70OPS_REASON_ARCH,
                                SM70OPS_REASON_ARCH};
constexpr Want kIndexOff = {kOpOff, kSame, kSame, kSame};
constexpr Want kAttnOff = {kSame, kOpOff, kSame, kSame};
// One switch for both MoE ops: a repacked layout is useless without the MoE kernel.
constexpr Want kMoeOff = {kSame, kSame, kOpOff, kOpOff};

struct EnvCase {
  const char* label;
  const char* name;
  const char* value;
  int32_t cc;
  Want want;
  bool malformed;  // an ERROR log line must name the variable
};

const EnvCase kEnvCases[] = {
    {"disable_1", "SM70OPS_DISABLE", "1", 70, kPluginOff, false},
    {"disable_TRUE", "SM70OPS_DISABLE", "TRUE", 70, kPluginOff, false},
    {"disable_0", "SM70OPS_DISABLE", "0", 70, kNoEffect, false},
    {"disable_qsa_index", "SM70OPS_DISABLE_QSA_INDEX", "1", 70, kIndexOff, false},
    {"disable_qsa_attn", "SM70OPS_DISABLE_QSA_ATTN", "1", 70, kAttnOff, false},
    {"disable_nvfp4_moe", "SM70OPS_DISABLE_NVFP4_MOE", "1", 70, kMoeOff, false},
    {"indexer_cublas_0", "VLLM_SM70_QSA_INDEXER_CUBLAS", "0", 70, kIndexOff, false},
    {"indexer_cublas_1", "VLLM_SM70_QSA_INDEXER_CUBLAS", "1", 70, kNoEffect, false},
    {"allow_arch_90", "SM70OPS_ALLOW_ARCH", "90", 90, kNoEffect, false},
    {"allow_arch_sm_90", "SM70OPS_ALLOW_ARCH", "sm_90", 90, kNoEffect, false},
    {"allow_arch_9_0", "SM70OPS_ALLOW_ARCH", "9.0", 90, kNoEffect, false},
    {"allow_arch_list", "SM70OPS_ALLOW_ARCH", "80,90", 90, kNoEffect, false},
    {"allow_arch_other", "SM70OPS_ALLOW_ARCH", "80", 90, kArchDeclined, false},
    // Without ALLOW_ARCH the PTX opt-in lets nothing in; with it, see PtxOptInOnAnAllowedArch.
    {"allow_ptx_1", "SM70OPS_ALLOW_PTX", "1", 70, kNoEffect, false},
    {"allow_ptx_on_90", "SM70OPS_ALLOW_PTX", "yes", 90, kArchDeclined, false},
    {"malformed_disable", "SM70OPS_DISABLE", "maybe", 70, kPluginOff, true},
    {"malformed_disable_op", "SM70OPS_DISABLE_QSA_ATTN", "2", 70, kPluginOff, true},
    {"malformed_indexer_cublas", "VLLM_SM70_QSA_INDEXER_CUBLAS", "maybe", 70, kPluginOff, true},
    {"malformed_allow_arch", "SM70OPS_ALLOW_ARCH", "sm_9x", 70, kPluginOff, true},
    {"malformed_allow_ptx", "SM70OPS_ALLOW_PTX", "jit", 70, kPluginOff, true},
    // A malformed allow-list must not allow anything: still off on the GPU it failed to name.
    {"malformed_allow_arch_on_90", "SM70OPS_ALLOW_ARCH", "90,sm_9x", 90, kPluginOff, true},
    // Near misses a lenient number parser would read as 90 (found by tests/fuzz/env_fuzzer).
    {"allow_arch_leading_space", "SM70OPS_ALLOW_ARCH", " 90", 90, kPluginOff, true},
    {"allow_arch_plus_sign", "SM70OPS_ALLOW_ARCH", "+90", 90, kPluginOff, true},
    {"allow_arch_trailing_dot", "SM70OPS_ALLOW_ARCH", "9.", 90, kPluginOff, true},
    {"allow_arch_trailing_comma", "SM70OPS_ALLOW_ARCH", "90,", 90, kPluginOff, true},
    {"allow_arch_signed_minor", "SM70OPS_ALLOW_ARCH", "9.-0", 90, kPluginOff, true},
    {"allow_arch_space_after_prefix", "SM70OPS_ALLOW_ARCH", "sm_ 90", 90, kPluginOff, true},
};

class Abi_Env : public AbiTest, public testing::WithParamInterface<EnvCase> {
 protected:
  // The decisions of the fixture's clean SM70 context, one per op.
  std::vector<sm70ops_decision> Baseline() {
    std::vector<sm70ops_decision> out;
    for (sm70ops_op op : kOps) out.push_back(CheckCase(api(), ctx(), *MakeCase(op)));
    return out;
  }
};

TEST_P(Abi_Env, SwitchesTheRightOps) {
  const EnvCase& p = GetParam();
  const std::vector<sm70ops_decision> baseline = Baseline();
  ScopedEnv env(p.name, p.value);
  LogCapture log;
  ContextPtr ctx = MakeContext(api(), p.cc, &log);
  ASSERT_NE(ctx, nullptr);
  for (size_t i = 0; i < kOps.size(); ++i) {
    SCOPED_TRACE(OpName(kOps[i]));
    sm70ops_decision d = CheckCase(api(), ctx.get(), *MakeCase(kOps[i]));
    if (p.want[i] == kSame) {
      EXPECT_EQ(Describe(d), Describe(baseline[i]));
      continue;
    }
    EXPECT_EQ(d.reason, p.want[i]) << d.message;
    if (p.want[i] != SM70OPS_REASON_ARCH) {
      EXPECT_TRUE(NamesWord(d.message, p.name)) << d.message;
    }
  }
}

TEST_P(Abi_Env, LoggedAtContextCreate) {
  const EnvCase& p = GetParam();
  ScopedEnv env(p.name, p.value);
  LogCapture log;
  ContextPtr ctx = MakeContext(api(), p.cc, &log);
  EXPECT_TRUE(log.Has(p.name)) << log.Dump();
  EXPECT_EQ(log.Has(p.name, SM70OPS_LOG_ERROR), p.malformed) << log.Dump();
}

INSTANTIATE_TEST_SUITE_P(Vars, Abi_Env, testing::ValuesIn(kEnvCases),
                         [](const auto& info) { return std::string(info.param.label); });

using Abi_EnvRead = AbiTest;

// An empty value means unset: no effect and nothing logged about it.
TEST_F(Abi_EnvRead, EmptyValueIsUnset) {
  for (const char* name : kRollbackVariables) {
    SCOPED_TRACE(name);
    ScopedEnv env(name, "");
    LogCapture log;
    ContextPtr empty = MakeContext(api(), 90, &log);
    EXPECT_FALSE(log.Has(name)) << log.Dump();
    for (sm70ops_op op : kOps) {
      EXPECT_EQ(CheckCase(api(), empty.get(), *MakeCase(op)).reason, SM70OPS_REASON_ARCH);
    }
  }
}

// Read once: a context keeps the settings it was created with, whatever the variable does later.
TEST_F(Abi_EnvRead, ReadOnceAtContextCreate) {
  auto c = MakeCase(SM70OPS_OP_QSA_ATTN);
  const std::string clean = Describe(CheckCase(api(), ctx(), *c));
  ContextPtr disabled;
  {
    ScopedEnv env("SM70OPS_DISABLE", "1");
    disabled = MakeContext(api());
    EXPECT_EQ(Describe(CheckCase(api(), ctx(), *c)), clean);
  }
  EXPECT_EQ(CheckCase(api(), disabled.get(), *c).reason, SM70OPS_REASON_PLUGIN_DISABLED);
}

// An allow-listed GPU must also hold the kernels: a T4 (7.5) gives a block 64 KB of shared
// memory, and the attention's head-dim-256 tile and the MoE's double-buffered GEMM tile (93 KB),
// both sized for a V100's 96 KB, ask for more, as for the 48 KB assumed for a capability the
// plugin has no table entry for (6.1). The index's blocks at this case's 4096 keys (at most
// 42 KB: its select block grows with the call's rows) fit both. A context given its capability
// cannot ask the device, so these limits are the plugin's table (a context on a real device
// reads its own: tests/gpu/lifecycle_gpu_test.cc).
TEST_F(Abi_EnvRead, AllowedArchWithoutTheSharedMemoryDeclines) {
  ScopedEnv env("SM70OPS_ALLOW_ARCH", "61,75,90");
  for (int32_t cc : {61, 75, 90}) {
    ContextPtr allowed = MakeContext(api(), cc);
    ASSERT_NE(allowed, nullptr);
    for (sm70ops_op op : kOps) {
      SCOPED_TRACE(std::string(OpName(op)) + " on " + std::to_string(cc));
      const sm70ops_decision clean = CheckCase(api(), ctx(), *MakeCase(op));
      const sm70ops_decision d = CheckCase(api(), allowed.get(), *MakeCase(op));
      const bool attn = op == SM70OPS_OP_QSA_ATTN, moe = op == SM70OPS_OP_NVFP4_MOE;
      if ((cc == 75 || cc == 61) && (attn || moe)) {
        EXPECT_EQ(d.reason, SM70OPS_REASON_ARCH) << d.message;
        EXPECT_TRUE(NamesWord(d.message, "shared")) << d.message;
        EXPECT_NE(std::string(d.message).find(cc == 75 ? "gives 64 KB" : "gives 48 KB"),
                  std::string::npos)
            << d.message;
      } else {
        EXPECT_EQ(Describe(d), Describe(clean));
      }
    }
  }
}

// SM70OPS_ALLOW_PTX on an allowed GPU the build has no SASS for: the V100 build (sm_70 SASS,
// compute_70 PTX) says at context creation that the driver will JIT its PTX there; the
// validation build carries sm_90 SASS, so it has nothing to say. A context given its capability
// plans alike either way (the code check is a real device's: tests/gpu run it).
TEST_F(Abi_EnvRead, PtxOptInOnAnAllowedArch) {
  sm70ops_identity id = {};
  id.struct_size = sizeof(id);
  ASSERT_EQ(api().get_identity(&id), SM70OPS_OK);
  const bool v100_build = std::string(id.sm_list) == "sm_70";
  ScopedEnv arch("SM70OPS_ALLOW_ARCH", "90");
  ScopedEnv ptx("SM70OPS_ALLOW_PTX", "1");
  LogCapture log;
  ContextPtr ctx = MakeContext(api(), 90, &log);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(log.Has("compute_70 PTX runs through the driver's JIT", SM70OPS_LOG_WARN), v100_build)
      << id.sm_list << "\n"
      << log.Dump();
  EXPECT_FALSE(log.Has("carries code for", SM70OPS_LOG_WARN)) << log.Dump();
  for (sm70ops_op op : kOps) {
    EXPECT_NE(CheckCase(api(), ctx.get(), *MakeCase(op)).reason, SM70OPS_REASON_ARCH);
  }
}

}  // namespace
}  // namespace sm70ops_test
