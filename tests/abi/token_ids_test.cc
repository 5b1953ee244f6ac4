// ABI 1.2: qsa_attn takes the engines' token ids [T, W] in place of the sel_* triple (vLLM's
// packed buffer with its count column, SGLang's without). Accepted with a workspace for the
// expansion, every bad descriptor blamed by name, a 1.1 host's struct read at its size.
#include <cstring>

#include "tests/abi/op_cases.h"
#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

using Abi_TokenIds = AbiTest;

// NB of the expansion: a page per id at most, every page of the 4096-token context at most.
constexpr int64_t kExpandedPages = kSeqLen / kPageSize;
static_assert(kExpandedPages < kSetWidth, "the context bounds the model case's pages");

TEST_F(Abi_TokenIds, ModelShapeAcceptedWithTheExpansionsWorkspace) {
  for (const bool count_column : {true, false}) {
    SCOPED_TRACE(count_column ? "vLLM's packed buffer" : "SGLang's ids");
    auto c = MakeTokenIdsCase(count_column);
    const sm70ops_decision d = CheckCase(api(), ctx(), *c);
    EXPECT_TRUE(d.accepted) << d.message;
    EXPECT_EQ(d.route, SM70OPS_ROUTE_QSA_ATTN_WMMA);
    EXPECT_EQ(d.workspace_bytes, uint64_t(kRows * kExpandedPages * 12 + kRows * 4));
    EXPECT_TRUE(NamesWord(d.message, "token")) << d.message;
    uint64_t workspace = 0;
    EXPECT_EQ(api().workspace_size(ctx(), c->op(), c->args(), &workspace), SM70OPS_OK);
    EXPECT_EQ(workspace, d.workspace_bytes);
  }
}

// A row's ids bound its pages when they are fewer than the context's pages.
TEST_F(Abi_TokenIds, FewIdsAskForFewPages) {
  auto c = MakeTokenIdsCase(true);
  sm70ops_desc_resize(c->slot("token_ids").desc, 1, 10);  // 9 ids and the count
  const sm70ops_decision d = CheckCase(api(), ctx(), *c);
  EXPECT_TRUE(d.accepted) << d.message;
  EXPECT_EQ(d.workspace_bytes, uint64_t(kRows * 9 * 12 + kRows * 4));
}

TEST_F(Abi_TokenIds, CheckAndExecuteBlameTheArgument) {
  for (const Breakage& b : TokenIdsBadInputs()) {
    SCOPED_TRACE(b.label);
    auto c = MakeTokenIdsCase(true);
    b.apply(*c);
    const sm70ops_decision d = CheckCase(api(), ctx(), *c);
    EXPECT_EQ(d.reason, SM70OPS_REASON_INVALID_ARGUMENT) << d.message;
    EXPECT_TRUE(NamesWord(d.message, b.blamed)) << d.message;
    if (d.accepted) continue;  // fake pointers must never reach a kernel
    EXPECT_EQ(ExecuteCase(api(), ctx(), *c), SM70OPS_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(NamesWord(api().last_error(), b.blamed)) << api().last_error();
  }
}

TEST_F(Abi_TokenIds, NullDataRefusedByExecuteOnly) {
  auto c = MakeTokenIdsCase(true);
  const std::string baseline = Describe(CheckCase(api(), ctx(), *c));
  c->tensor("token_ids").data = nullptr;
  EXPECT_EQ(Describe(CheckCase(api(), ctx(), *c)), baseline);
  EXPECT_EQ(ExecuteCase(api(), ctx(), *c), SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(NamesWord(api().last_error(), "token_ids")) << api().last_error();
}

// The expansion's workspace is checked before any launch (aligned, unmapped addresses: never
// touched).
TEST_F(Abi_TokenIds, WorkspaceTooSmallOrMissing) {
  auto c = MakeTokenIdsCase(true);
  const sm70ops_decision d = CheckCase(api(), ctx(), *c);
  ASSERT_TRUE(d.accepted) << d.message;
  void* workspace = reinterpret_cast<void*>(0xF000);
  EXPECT_EQ(api().execute(ctx(), c->op(), c->args(), nullptr, workspace, d.workspace_bytes - 1),
            SM70OPS_ERR_WORKSPACE_TOO_SMALL);
  EXPECT_EQ(api().execute(ctx(), c->op(), c->args(), nullptr, nullptr, d.workspace_bytes),
            SM70OPS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(NamesWord(api().last_error(), "workspace")) << api().last_error();
}

// The shape table bounds the token-id route as the triple's: pages and contexts it does not run.
TEST_F(Abi_TokenIds, OutsideTheTableDeclinedAsTheTriple) {
  auto pages = MakeTokenIdsCase(true);
  Resize({"k_cache", "v_cache"}, 1, 128)(*pages);
  EXPECT_EQ(CheckCase(api(), ctx(), *pages).reason, SM70OPS_REASON_UNSUPPORTED_SHAPE);
  auto other_arch = MakeTokenIdsCase(true);
  ContextPtr hopper = MakeContext(api(), 90);
  EXPECT_EQ(CheckCase(api(), hopper.get(), *other_arch).reason, SM70OPS_REASON_ARCH);
}

// A 1.1 host's struct ends before token_ids: what lies past it (here garbage) is not read, and
// the answer is the one the full struct gets with token_ids NULL (the triple).
TEST_F(Abi_TokenIds, Abi11SizeIsReadAsTheTriple) {
  auto c = MakeCase(SM70OPS_OP_QSA_ATTN);
  const uint32_t size_1_1 = SM70OPS_QSA_ATTN_ARGS_SIZE_1_1;
  ASSERT_TRUE(IsArgsSizeOfSomeMinor(c->op(), size_1_1));
  alignas(8) unsigned char garbage[256];
  std::memset(garbage, 0xA5, sizeof(garbage));
  std::memcpy(garbage, c->args(), size_1_1);
  std::memcpy(garbage, &size_1_1, sizeof(size_1_1));
  const sm70ops_decision at_1_1 = Check(api(), ctx(), c->op(), garbage);
  const sm70ops_decision at_1_2 = CheckCase(api(), ctx(), *c);
  EXPECT_EQ(Describe(at_1_1), Describe(at_1_2));
  EXPECT_TRUE(at_1_1.accepted) << at_1_1.message;
  EXPECT_EQ(at_1_1.workspace_bytes, 0u);
}

}  // namespace
}  // namespace sm70ops_test
