// abi.md item 9: bad input gets a clear status and a message naming the argument, from check
// (a decline with SM70OPS_REASON_INVALID_ARGUMENT) and from execute (SM70OPS_ERR_INVALID_ARGUMENT).
// The descriptors' fake data pointers are unmapped, so a plugin that touched them would crash here.
#include "tests/abi/op_cases.h"
#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

class Abi_BadInput : public AbiTest, public testing::WithParamInterface<sm70ops_op> {};

// One table per op: every generic tensor class on every tensor, then the op's own relations.
TEST_P(Abi_BadInput, CheckAndExecuteBlameTheArgument) {
  for (const Breakage& b : BadInputs(GetParam())) {
    SCOPED_TRACE(b.label);
    auto c = MakeCase(GetParam());
    b.apply(*c);
    sm70ops_decision d = CheckCase(api(), ctx(), *c);
    EXPECT_EQ(d.reason, SM70OPS_REASON_INVALID_ARGUMENT) << d.message;
    EXPECT_TRUE(NamesWord(d.message, b.blamed)) << d.message;
    if (d.accepted) continue;  // fake pointers must never reach a kernel
    EXPECT_EQ(ExecuteCase(api(), ctx(), *c), SM70OPS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(NamesWord(api().last_error(), b.blamed)) << api().last_error();
  }
}

// check() reads only descriptors (data may be NULL there); execute() needs every tensor's data.
TEST_P(Abi_BadInput, NullDataRefusedByExecuteOnly) {
  const auto probe = MakeCase(GetParam());
  const std::string baseline = Describe(CheckCase(api(), ctx(), *probe));
  for (const TensorSlot& slot : probe->slots()) {
    SCOPED_TRACE(slot.name);
    auto c = MakeCase(GetParam());
    c->tensor(slot.name).data = nullptr;
    EXPECT_EQ(Describe(CheckCase(api(), ctx(), *c)), baseline);
    EXPECT_EQ(ExecuteCase(api(), ctx(), *c), SM70OPS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(NamesWord(api().last_error(), slot.name)) << api().last_error();
  }
}

// Needs an accepted descriptor with a workspace; execute checks the size before any launch, so
// it runs without a GPU as soon as a kernel lands.
TEST_P(Abi_BadInput, WorkspaceTooSmall) {
  auto c = MakeCase(GetParam());
  sm70ops_decision d = CheckCase(api(), ctx(), *c);
  if (!d.accepted || d.workspace_bytes == 0) {
    GTEST_SKIP() << "unreachable: the model shape is declined (" << d.message
                 << ") or needs no workspace";
  }
  void* workspace = reinterpret_cast<void*>(0xF000);  // aligned, unmapped: must not be touched
  EXPECT_EQ(api().execute(ctx(), c->op(), c->args(), nullptr, workspace, d.workspace_bytes - 1),
            SM70OPS_ERR_WORKSPACE_TOO_SMALL);
}

INSTANTIATE_TEST_SUITE_P(Ops, Abi_BadInput, testing::ValuesIn(kOps),
                         [](const auto& info) { return OpName(info.param); });

}  // namespace
}  // namespace sm70ops_test
