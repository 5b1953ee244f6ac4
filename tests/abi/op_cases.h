// Argument descriptors for the four ops at the model's TP4 per-rank shapes (spec/ops.md), built so
// a test can break one field and see whether check and execute blame it.
//
// Data pointers are fake, distinct, 256-byte aligned addresses below 64 KiB, which Linux never maps
// (vm.mmap_min_addr): check and execute must not dereference them, and a plugin that did would
// crash the test instead of passing it.
#ifndef SM70OPS_TESTS_ABI_OP_CASES_H_
#define SM70OPS_TESTS_ABI_OP_CASES_H_

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "abi/sm70ops.h"
#include "integration/host/sm70ops_desc.h"

namespace sm70ops_test {

// The model numbers the descriptors use: Qwen3.8-Flash-Next at TP4 (ops.md version 2).
inline constexpr int64_t kRows = 8192;                     // T: two 4096-token prefill chunks
inline constexpr int64_t kRequests = 2;                    // R
inline constexpr int64_t kSeqLen = 4096;                   // max_seq_len = max_query_len
inline constexpr int64_t kPageSize = 64;                   // P, SGLang's
inline constexpr int64_t kMaxPages = kSeqLen / kPageSize;  // block_table width
inline constexpr int64_t kNumPages = kRequests * kMaxPages;
inline constexpr int64_t kRatio = 4;    // c: tokens per index key
inline constexpr int64_t kTopk = 2048;  // the indexer's budget B in tokens: 512 groups
inline constexpr int64_t kSetWidth = kTopk + kRatio - 1;  // topk_idx columns
inline constexpr int64_t kSelBlocks = 64;                 // NB = min(B / c + 1, ceil(max L / P))
inline constexpr int64_t kPackedWidth = kSetWidth + 1;    // vLLM's packed buffer: ids, then a count
inline constexpr int64_t kHeadsQ = 6, kHeadsKv = 1, kHeadDim = 256;
inline constexpr int64_t kExperts = 512, kExpertTopk = 10, kHidden = 2560, kInter = 160;

DLDataType BF16();  // a float type no fast path takes

// A tensor argument: its descriptor (and the args field that points at it), and whether NULL or
// another dtype is a legal (optional) or a "unsupported, not invalid" (model data) answer.
struct TensorSlot {
  std::string name;
  sm70ops_desc_tensor* desc;
  bool optional;     // NULL is valid in this descriptor
  bool model_dtype;  // another dtype declines UNSUPPORTED_DTYPE instead of INVALID_ARGUMENT
};

// A valid descriptor of one op (integration/host/sm70ops_desc.h): dense strides, CUDA device 0,
// a fake data pointer per tensor. It points into itself, so it lives behind a unique_ptr.
class OpCase {
 public:
  OpCase(const char* name, sm70ops_route route) : name_(name), route_(route) {}
  OpCase(const OpCase&) = delete;
  OpCase& operator=(const OpCase&) = delete;
  sm70ops_op op() const { return call_.op; }
  const char* name() const { return name_; }
  sm70ops_route route() const { return route_; }
  uint32_t args_size() const { return *static_cast<const uint32_t*>(args()); }
  const void* args() const { return &call_.args; }
  template <typename T>
  T& As() {
    return *reinterpret_cast<T*>(&call_.args);
  }
  sm70ops_desc_call& call() { return call_; }
  // Gives each tensor of the built call the next fake address and a slot; the `optional` ones
  // may be NULL.
  void AddSlots(const std::vector<std::string>& optional);
  std::vector<TensorSlot>& slots() { return slots_; }
  // Aborts the test binary on an unknown name: that is a typo in a test table.
  TensorSlot& slot(const std::string& name);
  DLTensor& tensor(const std::string& name) { return slot(name).desc->tensor; }

 private:
  const char* name_;
  sm70ops_route route_;
  sm70ops_desc_call call_{};
  std::vector<TensorSlot> slots_;
};

// The four ABI ops, in id order.
inline constexpr std::array<sm70ops_op, 4> kOps = {
    SM70OPS_OP_QSA_INDEX, SM70OPS_OP_QSA_ATTN, SM70OPS_OP_NVFP4_MOE, SM70OPS_OP_NVFP4_MOE_PREPARE};

// A fresh valid model-shape descriptor for `op`, at this header's ABI minor.
std::unique_ptr<OpCase> MakeCase(sm70ops_op op);
// The same descriptor as a 1.0 host builds it: the 1.0 struct size, and for QSA_INDEX a key per
// token (c = 1: k_index [pages, 64, 128], topk_idx [T, B]).
std::unique_ptr<OpCase> MakeCase10(sm70ops_op op);
// sizeof the op's argument struct in ABI 1.0.
uint32_t ArgsSize10(sm70ops_op op);
// Whether some ABI minor up to this header's gives the op's argument struct `size` bytes.
bool IsArgsSizeOfSomeMinor(sm70ops_op op, uint32_t size);
// ABI 1.2: QSA_ATTN with the engines' token ids [T, W] in place of the sel_* triple: vLLM's packed
// buffer (W = B + c, the last column a count) or, without the count column, SGLang's (B + c - 1).
std::unique_ptr<OpCase> MakeTokenIdsCase(bool count_column);
std::string OpName(sm70ops_op op);  // "QsaIndex", for test names

// One way to break a descriptor, and the argument the plugin must blame.
struct Breakage {
  std::string label;
  std::function<void(OpCase&)> apply;
  std::string blamed;
};

// Every bad-input class of abi.md item 9 for `op`: the generic tensor classes on every tensor
// slot, then the op's own cross-tensor and scalar relations.
std::vector<Breakage> BadInputs(sm70ops_op op);
// The same for MakeTokenIdsCase(true): the classes on its tensors, then token_ids' relations.
std::vector<Breakage> TokenIdsBadInputs();

// Well-formed descriptors outside the fast path, with the reason check must give.
struct Unsupported {
  std::string label;
  sm70ops_op op;
  std::function<void(OpCase&)> apply;
  sm70ops_reason reason;
};
std::vector<Unsupported> UnsupportedCases();

// check() / execute() on a case's args. Execute passes the legacy stream and no workspace: every
// call these tests make is declined before a launch, so no GPU is touched.
sm70ops_decision CheckCase(const sm70ops_api& api, const sm70ops_context* ctx, const OpCase& c);
sm70ops_status ExecuteCase(const sm70ops_api& api, const sm70ops_context* ctx, const OpCase& c);

// Breakage helpers, also used directly by tests. Resize keeps the strides dense, so only the
// shape relation is broken.
std::function<void(OpCase&)> Resize(std::vector<std::string> tensors, int dim, int64_t size);
std::function<void(OpCase&)> SetDtype(std::string tensor, DLDataType dtype);

}  // namespace sm70ops_test

#endif  // SM70OPS_TESTS_ABI_OP_CASES_H_
