// abi.md item 6: the capability check. Declines are SM70OPS_OK with a reason, never crashes; a
// model-shape descriptor is accepted, and execute agrees with the answer.
#include <cstring>
#include <thread>
#include <vector>

#include "tests/abi/op_cases.h"
#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

using Abi_Check = AbiTest;

TEST_F(Abi_Check, DecisionStructSizeTooSmallIsInvalid) {
  auto c = MakeCase(SM70OPS_OP_QSA_INDEX);
  for (uint32_t size : {0u, 4u, uint32_t{sizeof(sm70ops_decision)} - 1}) {
    SCOPED_TRACE(size);
    sm70ops_decision d{};
    d.struct_size = size;
    EXPECT_EQ(api().check(ctx(), c->op(), c->args(), &d), SM70OPS_ERR_INVALID_ARGUMENT);
  }
}

TEST_F(Abi_Check, NullContextOrDecisionIsInvalid) {
  auto c = MakeCase(SM70OPS_OP_QSA_INDEX);
  sm70ops_decision d{};
  d.struct_size = sizeof(d);
  EXPECT_EQ(api().check(nullptr, c->op(), c->args(), &d), SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api().check(ctx(), c->op(), c->args(), nullptr), SM70OPS_ERR_INVALID_ARGUMENT);
}

TEST_F(Abi_Check, UnknownOpIsDeclined) {
  auto known_args = MakeCase(SM70OPS_OP_QSA_INDEX);
  for (sm70ops_op op : {0, 5, -1, 1000, INT32_MIN}) {
    for (const void* args : {static_cast<const void*>(nullptr), known_args->args()}) {
      SCOPED_TRACE(testing::Message() << "op " << op << " args " << args);
      sm70ops_decision d = Check(api(), ctx(), op, args);
      EXPECT_EQ(d.accepted, 0);
      EXPECT_EQ(d.reason, SM70OPS_REASON_UNKNOWN_OP);
      EXPECT_EQ(d.route, SM70OPS_ROUTE_NONE);
      EXPECT_STRNE(d.message, "");
    }
  }
}

// Nested struct sizes are versioned like the args structs.
TEST_F(Abi_Check, WeightsStructSizeMismatchIsDeclined) {
  for (sm70ops_op op : {SM70OPS_OP_NVFP4_MOE, SM70OPS_OP_NVFP4_MOE_PREPARE}) {
    for (uint32_t wrong : {0u, uint32_t{sizeof(sm70ops_nvfp4_weights)} - 8}) {
      SCOPED_TRACE(testing::Message() << OpName(op) << " weights struct_size " << wrong);
      auto c = MakeCase(op);
      const auto* w = op == SM70OPS_OP_NVFP4_MOE ? c->As<sm70ops_nvfp4_moe_args>().weights
                                                 : c->As<sm70ops_nvfp4_moe_prepare_args>().weights;
      const_cast<sm70ops_nvfp4_weights*>(w)->struct_size = wrong;
      EXPECT_EQ(CheckCase(api(), ctx(), *c).reason, SM70OPS_REASON_STRUCT_SIZE);
    }
  }
}

class Abi_CheckOp : public AbiTest, public testing::WithParamInterface<sm70ops_op> {};

// A size no ABI minor gave the struct (smaller, between two minors', or a newer host's larger
// one) gets a STRUCT_SIZE decline, never a read of fields the plugin does not know; execute
// refuses the same descriptor as invalid.
TEST_P(Abi_CheckOp, ArgsStructSizeMismatchIsDeclined) {
  auto c = MakeCase(GetParam());
  const uint32_t size = c->args_size(), size_1_0 = ArgsSize10(GetParam());
  for (uint32_t wrong : {0u, 4u, size_1_0 - 8, size_1_0 - 1, size_1_0 + 4, size - 1, size + 1,
                         size + 8, size + 64}) {
    if (IsArgsSizeOfSomeMinor(GetParam(), wrong)) continue;  // a struct a minor left alone
    SCOPED_TRACE(wrong);
    alignas(8) unsigned char buffer[256] = {};
    std::memcpy(buffer, c->args(), size);
    std::memcpy(buffer, &wrong, sizeof(wrong));
    sm70ops_decision d = Check(api(), ctx(), c->op(), buffer);
    EXPECT_EQ(d.reason, SM70OPS_REASON_STRUCT_SIZE) << d.message;
    if (d.accepted) continue;  // fake pointers must never reach a kernel
    EXPECT_EQ(api().execute(ctx(), c->op(), buffer, nullptr, nullptr, 0),
              SM70OPS_ERR_INVALID_ARGUMENT);
  }
}

// A 1.0 host's struct is read at its size and no further: the bytes after it are garbage here
// (an out-of-range compress_ratio, a fake gate), and the answer is the one the same descriptor
// gets at the 1.1 size with the appended fields at their defaults.
TEST_P(Abi_CheckOp, Abi10SizeIsReadAsTheDefaults) {
  auto c = MakeCase10(GetParam());
  const uint32_t size_1_0 = ArgsSize10(GetParam());
  ASSERT_EQ(c->args_size(), size_1_0);
  alignas(8) unsigned char garbage[256];
  std::memset(garbage, 0xA5, sizeof(garbage));
  std::memcpy(garbage, c->args(), size_1_0);
  alignas(8) unsigned char defaults[256] = {};
  std::memcpy(defaults, c->args(), size_1_0);
  const uint32_t size_1_1 = MakeCase(GetParam())->args_size();
  std::memcpy(defaults, &size_1_1, sizeof(size_1_1));
  const sm70ops_decision at_1_0 = Check(api(), ctx(), c->op(), garbage);
  const sm70ops_decision at_1_1 = Check(api(), ctx(), c->op(), defaults);
  EXPECT_EQ(Describe(at_1_0), Describe(at_1_1));
  EXPECT_TRUE(at_1_0.accepted) << at_1_0.message;
}

TEST_P(Abi_CheckOp, NullArgsIsInvalid) {
  sm70ops_decision d = Check(api(), ctx(), GetParam(), nullptr);
  EXPECT_EQ(d.reason, SM70OPS_REASON_INVALID_ARGUMENT);
  EXPECT_EQ(api().execute(ctx(), GetParam(), nullptr, nullptr, nullptr, 0),
            SM70OPS_ERR_INVALID_ARGUMENT);
}

// SM70 only by default: Hopper and Turing decline with a message pointing at the allow-list.
TEST_P(Abi_CheckOp, OtherArchIsDeclined) {
  auto c = MakeCase(GetParam());
  for (int32_t cc : {75, 80, 90}) {
    SCOPED_TRACE(cc);
    ContextPtr other = MakeContext(api(), cc);
    sm70ops_decision d = CheckCase(api(), other.get(), *c);
    EXPECT_EQ(d.reason, SM70OPS_REASON_ARCH);
    EXPECT_TRUE(NamesWord(d.message, "SM70OPS_ALLOW_ARCH")) << d.message;
  }
}

// Every build carries every op's kernel: the model's shapes are accepted, with the route and the
// workspace that workspace_size agrees with (running execute needs a GPU: the device-machine
// suite covers it).
TEST_P(Abi_CheckOp, ModelShapeAccepted) {
  auto c = MakeCase(GetParam());
  sm70ops_decision d = CheckCase(api(), ctx(), *c);
  uint64_t workspace = 1;
  sm70ops_status ws_status = api().workspace_size(ctx(), c->op(), c->args(), &workspace);
  EXPECT_TRUE(d.accepted) << d.message;
  EXPECT_EQ(d.reason, SM70OPS_REASON_ACCEPTED);
  EXPECT_EQ(d.route, c->route());
  EXPECT_EQ(ws_status, SM70OPS_OK);
  EXPECT_EQ(workspace, d.workspace_bytes);
}

// ABI 1.1 lets the weight-free indexer leave `weights` NULL; a 1.0 host's struct must still give
// it, as 1.0 required.
TEST_F(Abi_Check, IndexWeightsOptionalFromAbi11) {
  auto c = MakeCase(SM70OPS_OP_QSA_INDEX);
  c->As<sm70ops_qsa_index_args>().weights = nullptr;
  const sm70ops_decision d = CheckCase(api(), ctx(), *c);
  EXPECT_TRUE(d.accepted) << d.message;
  auto old = MakeCase10(SM70OPS_OP_QSA_INDEX);
  old->As<sm70ops_qsa_index_args>().weights = nullptr;
  const sm70ops_decision d10 = CheckCase(api(), ctx(), *old);
  EXPECT_EQ(d10.reason, SM70OPS_REASON_INVALID_ARGUMENT);
  EXPECT_TRUE(NamesWord(d10.message, "weights")) << d10.message;
}

INSTANTIATE_TEST_SUITE_P(Ops, Abi_CheckOp, testing::ValuesIn(kOps),
                         [](const auto& info) { return OpName(info.param); });

class Abi_CheckUnsupported : public AbiTest, public testing::WithParamInterface<Unsupported> {};

TEST_P(Abi_CheckUnsupported, DeclinedWithReason) {
  auto c = MakeCase(GetParam().op);
  GetParam().apply(*c);
  sm70ops_decision d = CheckCase(api(), ctx(), *c);
  ASSERT_EQ(d.accepted, 0) << "fake pointers must never reach a kernel";
  EXPECT_EQ(d.reason, GetParam().reason) << d.message;
  EXPECT_STRNE(d.message, "");
  EXPECT_EQ(ExecuteCase(api(), ctx(), *c), SM70OPS_ERR_UNSUPPORTED);
  EXPECT_STREQ(api().last_error(), d.message);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Abi_CheckUnsupported, testing::ValuesIn(UnsupportedCases()),
                         [](const auto& info) { return info.param.label; });

// Every descriptor this suite knows: the four model shapes, token ids, each unsupported variant.
std::vector<std::unique_ptr<OpCase>> ProbeCases() {
  std::vector<std::unique_ptr<OpCase>> cases;
  for (sm70ops_op op : kOps) cases.push_back(MakeCase(op));
  cases.push_back(MakeTokenIdsCase(true));
  for (const Unsupported& u : UnsupportedCases()) {
    cases.push_back(MakeCase(u.op));
    u.apply(*cases.back());
  }
  return cases;
}

std::vector<std::string> DescribeAll(const sm70ops_api& api, const sm70ops_context* ctx,
                                     const std::vector<std::unique_ptr<OpCase>>& cases) {
  std::vector<std::string> out;
  for (const auto& c : cases) out.push_back(Describe(CheckCase(api, ctx, *c)));
  return out;
}

// Pure and deterministic: the same answer on every call, from any thread, concurrently.
TEST_F(Abi_Check, SameAnswerAcrossRepeatsAndThreads) {
  const auto cases = ProbeCases();
  const std::vector<std::string> reference = DescribeAll(api(), ctx(), cases);
  std::vector<std::vector<std::string>> seen(8);
  std::vector<std::thread> threads;
  for (auto& out : seen) {
    threads.emplace_back([&, mine = &out] {
      for (int repeat = 0; repeat < 50; ++repeat) {
        std::vector<std::string> answer = DescribeAll(api(), ctx(), cases);
        if (answer != reference || repeat == 0) *mine = answer;  // a mismatch, once seen, stays
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& out : seen) EXPECT_EQ(out, reference);
}

}  // namespace
}  // namespace sm70ops_test
