#include "tests/abi/op_cases.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

// 0x1000, 0x1100, ...: 256-byte aligned (the strictest alignment the ABI asks) and far below
// vm.mmap_min_addr, so never mapped.
constexpr uintptr_t kFakeBase = 0x1000, kFakeStep = 0x100;

}  // namespace

DLDataType BF16() { return DLDataType{kDLBfloat, 16, 1}; }

TensorSlot& OpCase::slot(const std::string& name) {
  for (TensorSlot& slot : slots_) {
    if (slot.name == name) return slot;
  }
  std::fprintf(stderr, "op_cases: no tensor '%s' in %s\n", name.c_str(), name_);
  std::abort();  // A typo in a test table, not a plugin failure.
}

// fp16 tensors are the model's data (activations, caches), whose dtype a fast path may lack; every
// other tensor's dtype is fixed by the ABI.
void OpCase::AddSlots(const std::vector<std::string>& optional) {
  for (int32_t i = 0; i < call_.tensor_count; ++i) {
    sm70ops_desc_tensor* t = &call_.tensors[i];
    t->tensor.data = reinterpret_cast<void*>(kFakeBase + kFakeStep * i);
    const bool is_optional = std::find(optional.begin(), optional.end(), t->name) != optional.end();
    const DLDataType dtype = t->tensor.dtype;
    const bool is_f16 = dtype.code == kDLFloat && dtype.bits == 16;
    slots_.push_back({t->name, t, is_optional, is_f16});
  }
}

namespace {

// The varlen batch of both QSA ops: R requests of kSeqLen tokens each.
sm70ops_desc_batch Batch() {
  sm70ops_desc_batch b{};
  b.rows = kRows;
  b.requests = kRequests;
  b.max_pages = kMaxPages;
  b.cache_pages = kNumPages;
  b.page_size = kPageSize;
  b.selected_pages = kSelBlocks;
  b.max_seq_len = kSeqLen;
  b.max_query_len = kSeqLen;
  return b;
}

sm70ops_desc_experts Experts() { return {kExperts, kHidden, kInter}; }

// c = kRatio (the model), or c = 1 at the 1.0 size (a 1.0 host). The model's indexer has no head
// weights; the descriptor gives them so that their checks are exercised (NULL is valid from 1.1).
// topk_idx is optional because the sel_* triple is also given.
std::unique_ptr<OpCase> QsaIndexCase(bool abi_1_0) {
  auto c = std::make_unique<OpCase>("qsa_index", SM70OPS_ROUTE_QSA_INDEX_WMMA);
  sm70ops_desc_qsa_index_sizes s{};
  s.batch = Batch();
  s.heads = 4, s.dim = 128, s.topk = kTopk;
  s.compress_ratio = abi_1_0 ? 1 : kRatio;
  s.with_weights = s.with_topk_idx = s.with_selection = 1;
  sm70ops_desc_qsa_index(&c->call(), &s, 0);
  if (abi_1_0) {
    c->As<sm70ops_qsa_index_args>().struct_size = SM70OPS_QSA_INDEX_ARGS_SIZE_1_0;
    c->As<sm70ops_qsa_index_args>().compress_ratio = 0;
    c->AddSlots({"topk_idx"});
  } else {
    c->AddSlots({"weights", "topk_idx"});
  }
  return c;
}

sm70ops_desc_qsa_attn_sizes QsaAttnSizes() {
  sm70ops_desc_qsa_attn_sizes s{};
  s.batch = Batch();
  s.q_heads = kHeadsQ, s.kv_heads = kHeadsKv, s.head_dim = kHeadDim;
  s.sm_scale = 0.0625f;  // 1/sqrt(256)
  s.with_lse = s.with_gate = 1;
  return s;
}

// A 1.0 host's struct ends before `gate`.
std::unique_ptr<OpCase> QsaAttnCase(bool abi_1_0) {
  auto c = std::make_unique<OpCase>("qsa_attn", SM70OPS_ROUTE_QSA_ATTN_WMMA);
  sm70ops_desc_qsa_attn_sizes s = QsaAttnSizes();
  s.with_gate = !abi_1_0;
  sm70ops_desc_qsa_attn(&c->call(), &s, 0);
  if (abi_1_0) c->As<sm70ops_qsa_attn_args>().struct_size = SM70OPS_QSA_ATTN_ARGS_SIZE_1_0;
  c->AddSlots({"lse", "gate"});
  return c;
}

std::unique_ptr<OpCase> TokenIdsCase(bool count_column) {
  auto c = std::make_unique<OpCase>("qsa_attn", SM70OPS_ROUTE_QSA_ATTN_WMMA);
  sm70ops_desc_qsa_attn_sizes s = QsaAttnSizes();
  s.token_ids_width = count_column ? kPackedWidth : kSetWidth;
  s.token_ids_count_column = count_column;
  sm70ops_desc_qsa_attn(&c->call(), &s, 0);
  c->AddSlots({"lse", "gate"});
  return c;
}

std::unique_ptr<OpCase> MoeCase() {
  auto c = std::make_unique<OpCase>("nvfp4_moe", SM70OPS_ROUTE_NVFP4_MOE_WMMA);
  sm70ops_desc_nvfp4_moe_sizes s{};
  s.experts = Experts();
  s.rows = kRows, s.topk = kExpertTopk;
  sm70ops_desc_nvfp4_moe(&c->call(), &s, 0);
  c->AddSlots({});
  return c;
}

// `prepared` is optional to check(), which a host asks for output_bytes before allocating it.
std::unique_ptr<OpCase> PrepareCase() {
  auto c = std::make_unique<OpCase>("nvfp4_moe_prepare", SM70OPS_ROUTE_NVFP4_MOE_PREPARE);
  sm70ops_desc_nvfp4_moe_prepare_sizes s{};
  s.experts = Experts();
  // As many bytes as the checkpoint tensors, plus each expert's three fp32 scale_2 (16 bytes
  // with padding): a plausible repacked size.
  s.prepared_bytes = kExperts * (2 * kInter * kHidden * 9 / 16 + kHidden * kInter * 9 / 16 + 16);
  sm70ops_desc_nvfp4_moe_prepare(&c->call(), &s, 0);
  c->AddSlots({"prepared"});
  return c;
}

// ---- Generic classes: one breakage of one tensor, applied to every slot it makes sense for. ----

struct TensorClass {
  const char* label;
  bool (*applies)(const TensorSlot&);
  void (*apply)(TensorSlot&);
};

bool Always(const TensorSlot&) { return true; }
bool Required(const TensorSlot& s) { return !s.optional; }
// Another dtype of model data is UNSUPPORTED_DTYPE (see UnsupportedCases), not invalid.
bool Metadata(const TensorSlot& s) { return !s.model_dtype; }
// The stride of a size-1 dimension is meaningless, so the plugin may ignore it.
bool WideInnermost(const TensorSlot& s) {
  const DLTensor& t = s.desc->tensor;
  return t.shape[t.ndim - 1] > 1;
}
bool HasOuterDim(const TensorSlot& s) { return s.desc->tensor.ndim >= 2; }
DLTensor& T(TensorSlot& s) { return s.desc->tensor; }

// Each size and stride is in range, but their product, (2^31 - 2) * 2^40, wraps int64: a check
// that multiplies without care sees a small extent.
void WrapExtent(TensorSlot& s) {
  T(s).shape[0] = INT32_MAX;
  T(s).strides[0] = int64_t{1} << 40;
}

const TensorClass kTensorClasses[] = {
    {"null_pointer", Required, [](TensorSlot& s) { *s.desc->field = nullptr; }},
    {"null_strides", Always, [](TensorSlot& s) { T(s).strides = nullptr; }},
    {"null_shape", Always, [](TensorSlot& s) { T(s).shape = nullptr; }},
    {"wrong_dtype", Metadata,
     [](TensorSlot& s) { T(s).dtype.bits = T(s).dtype.bits == 64 ? 32 : 64; }},
    {"vector_lanes", Metadata, [](TensorSlot& s) { T(s).dtype.lanes = 2; }},
    {"rank_plus_1", Always, [](TensorSlot& s) { T(s).ndim += 1; }},
    {"rank_minus_1", Always, [](TensorSlot& s) { T(s).ndim -= 1; }},
    {"innermost_stride_2", WideInnermost, [](TensorSlot& s) { T(s).strides[T(s).ndim - 1] = 2; }},
    {"misaligned_byte_offset", Always, [](TensorSlot& s) { T(s).byte_offset = 1; }},
    {"negative_dim", Always, [](TensorSlot& s) { T(s).shape[0] = -1; }},
    {"extent_wraps_int64", HasOuterDim, WrapExtent},
    {"dim_over_int32", Always, [](TensorSlot& s) { T(s).shape[0] = int64_t{INT32_MAX} + 1; }},
    {"cpu_device", Always, [](TensorSlot& s) { T(s).device.device_type = kDLCPU; }},
    {"device_id_mismatch", Always, [](TensorSlot& s) { T(s).device.device_id = 1; }},
};

template <typename Args, typename Field>
std::function<void(OpCase&)> SetField(Field Args::*field, Field value) {
  return [field, value](OpCase& c) { c.As<Args>().*field = value; };
}

std::function<void(OpCase&)> Both(std::function<void(OpCase&)> a, std::function<void(OpCase&)> b) {
  return [a, b](OpCase& c) {
    a(c);
    b(c);
  };
}

const std::vector<std::string> kWeightTensors = {"w13",      "w2",          "w13_scale",
                                                 "w2_scale", "w13_scale_2", "w2_scale_2"};

// ---- Op-specific relations between tensors and scalars. ----

std::vector<Breakage> QsaIndexRelations() {
  using A = sm70ops_qsa_index_args;
  return {
      {"weights_rows", Resize({"weights"}, 0, kRows + 1), "weights"},
      {"weights_heads", Resize({"weights"}, 1, 3), "weights"},
      {"k_index_dim", Resize({"k_index"}, 2, 64), "k_index"},
      {"compress_ratio_3", SetField(&A::compress_ratio, int32_t{3}), "compress_ratio"},
      {"compress_ratio_8", SetField(&A::compress_ratio, int32_t{8}), "compress_ratio"},
      {"compress_ratio_negative", SetField(&A::compress_ratio, int32_t{-4}), "compress_ratio"},
      {"reserved1", SetField(&A::reserved1, uint32_t{1}), "reserved1"},
      {"topk_not_multiple_of_c",
       Both(SetField(&A::topk, int32_t{kTopk + 2}), Resize({"topk_idx"}, 1, kSetWidth + 2)),
       "topk"},
      {"sel_blocks_narrower_than_set", Resize({"sel_blocks", "sel_mask"}, 1, kSelBlocks - 1),
       "sel_blocks"},
      {"query_start_loc_entries", Resize({"query_start_loc"}, 0, kRequests + 2), "query_start_loc"},
      {"seq_lens_requests", Resize({"seq_lens"}, 0, kRequests + 1), "query_start_loc"},
      {"block_table_rows", Resize({"block_table"}, 0, kRequests + 1), "block_table"},
      {"topk_idx_width", Resize({"topk_idx"}, 1, kSetWidth + 1), "topk_idx"},
      {"topk_idx_width_of_c_1", Resize({"topk_idx"}, 1, kTopk), "topk_idx"},
      {"sel_blocks_rows", Resize({"sel_blocks"}, 0, kRows - 1), "sel_blocks"},
      {"sel_mask_width", Resize({"sel_mask"}, 1, kSelBlocks - 1), "sel_mask"},
      {"sel_count_rows", Resize({"sel_count"}, 0, kRows + 1), "sel_count"},
      {"topk_zero", SetField(&A::topk, int32_t{0}), "topk"},
      {"topk_over_8192", Both(SetField(&A::topk, int32_t{8196}), Resize({"topk_idx"}, 1, 8199)),
       "topk"},
      {"max_seq_len_zero", SetField(&A::max_seq_len, int32_t{0}), "max_seq_len"},
      {"max_seq_len_over_block_table", SetField(&A::max_seq_len, int32_t{kSeqLen + 1}),
       "block_table"},
      {"max_query_len_zero", SetField(&A::max_query_len, int32_t{0}), "max_query_len"},
  };
}

std::vector<Breakage> QsaAttnRelations() {
  using A = sm70ops_qsa_attn_args;
  return {
      {"k_cache_head_dim", Resize({"k_cache"}, 3, 128), "k_cache"},
      {"v_cache_pages", Resize({"v_cache"}, 0, kNumPages + 1), "v_cache"},
      {"v_cache_heads", Resize({"v_cache"}, 2, 2), "v_cache"},
      {"heads_not_multiple", Resize({"k_cache", "v_cache"}, 2, 4), "q"},
      {"out_head_dim", Resize({"out"}, 2, 128), "out"},
      {"out_heads", Resize({"out"}, 1, 8), "out"},
      {"lse_heads", Resize({"lse"}, 1, 8), "lse"},
      {"gate_heads", Resize({"gate"}, 1, 8), "gate"},
      {"gate_head_dim", Resize({"gate"}, 2, 128), "gate"},
      {"gate_rows", Resize({"gate"}, 0, kRows + 1), "gate"},
      {"query_start_loc_entries", Resize({"query_start_loc"}, 0, kRequests + 2), "query_start_loc"},
      {"block_table_rows", Resize({"block_table"}, 0, kRequests + 1), "block_table"},
      {"sel_blocks_rows", Resize({"sel_blocks"}, 0, kRows + 1), "sel_blocks"},
      {"sel_mask_width", Resize({"sel_mask"}, 1, kSelBlocks + 1), "sel_mask"},
      {"sel_count_rows", Resize({"sel_count"}, 0, kRows - 1), "sel_count"},
      {"sm_scale_zero", SetField(&A::sm_scale, 0.0f), "sm_scale"},
      {"sm_scale_nan", SetField(&A::sm_scale, std::numeric_limits<float>::quiet_NaN()), "sm_scale"},
      {"sm_scale_inf", SetField(&A::sm_scale, std::numeric_limits<float>::infinity()), "sm_scale"},
      {"max_query_len_over_seq", SetField(&A::max_query_len, int32_t{kSeqLen + 1}),
       "max_query_len"},
      {"reserved2", SetField(&A::reserved2, uint32_t{1}), "reserved2"},
      {"count_column_without_token_ids", SetField(&A::token_ids_count_column, int32_t{1}),
       "token_ids_count_column"},
  };
}

// On MakeTokenIdsCase(true). The triple is one of the two ways to give the selection: adding any
// of its tensors is a conflict that names token_ids.
std::vector<Breakage> TokenIdsRelations() {
  using A = sm70ops_qsa_attn_args;
  const auto add_sel_count = [](OpCase& c) {
    static const int64_t kShape[] = {kRows}, kStride[] = {1};
    static DLTensor count = {reinterpret_cast<void*>(0xF000),
                             {kDLCUDA, 0},
                             1,
                             {kDLInt, 32, 1},
                             const_cast<int64_t*>(kShape),
                             const_cast<int64_t*>(kStride),
                             0};
    c.As<A>().sel_count = &count;
  };
  return {
      {"token_ids_rows", Resize({"token_ids"}, 0, kRows + 1), "token_ids"},
      {"token_ids_only_a_count_column", Resize({"token_ids"}, 1, 1), "token_ids"},
      {"token_ids_and_the_triple", add_sel_count, "token_ids"},
      {"count_column_2", SetField(&A::token_ids_count_column, int32_t{2}),
       "token_ids_count_column"},
      {"count_column_negative", SetField(&A::token_ids_count_column, int32_t{-1}),
       "token_ids_count_column"},
      {"reserved2", SetField(&A::reserved2, uint32_t{7}), "reserved2"},
      {"out_rows", Resize({"out"}, 0, kRows - 1), "out"},
  };
}

// Relations inside sm70ops_nvfp4_weights, shared by both MoE ops.
template <typename Args>
std::vector<Breakage> WeightRelations() {
  return {
      {"w13_odd_rows", Resize({"w13"}, 1, 2 * kInter + 1), "w13"},
      {"w13_scale_groups", Resize({"w13_scale"}, 2, kHidden / 16 + 1), "w13_scale"},
      {"w13_scale_2_width", Resize({"w13_scale_2"}, 1, 3), "w13_scale_2"},
      {"w2_rows", Resize({"w2"}, 1, kHidden / 2), "w2"},
      {"w2_scale_groups", Resize({"w2_scale"}, 2, kInter / 16 + 1), "w2_scale"},
      {"w2_scale_2_experts", Resize({"w2_scale_2"}, 0, kExperts + 1), "w2_scale_2"},
      {"weights_null", SetField(&Args::weights, static_cast<const sm70ops_nvfp4_weights*>(nullptr)),
       "weights"},
      {"weights_reserved0",
       [](OpCase& c) { const_cast<sm70ops_nvfp4_weights*>(c.As<Args>().weights)->reserved0 = 1; },
       "weights"},
      {"reserved0", SetField(&Args::reserved0, uint32_t{1}), "reserved0"},
  };
}

std::vector<Breakage> MoeRelations() {
  std::vector<Breakage> out = WeightRelations<sm70ops_nvfp4_moe_args>();
  std::vector<Breakage> more = {
      {"topk_weights_width", Resize({"topk_weights"}, 1, kExpertTopk + 1), "topk_weights"},
      {"x_hidden", Resize({"x"}, 1, kHidden + 64), "x"},
      {"x_rows", Resize({"x"}, 0, kRows + 1), "x"},
      {"out_rows", Resize({"out"}, 0, kRows - 1), "out"},
      {"no_experts_routed", Resize({"topk_ids", "topk_weights"}, 1, 0), "topk_ids"},
  };
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

std::vector<Breakage> Relations(sm70ops_op op) {
  switch (op) {
    case SM70OPS_OP_QSA_INDEX:
      return QsaIndexRelations();
    case SM70OPS_OP_QSA_ATTN:
      return QsaAttnRelations();
    case SM70OPS_OP_NVFP4_MOE:
      return MoeRelations();
    default:
      return WeightRelations<sm70ops_nvfp4_moe_prepare_args>();
  }
}

}  // namespace

namespace {

std::unique_ptr<OpCase> MakeCaseOf(sm70ops_op op, bool abi_1_0) {
  switch (op) {
    case SM70OPS_OP_QSA_INDEX:
      return QsaIndexCase(abi_1_0);
    case SM70OPS_OP_QSA_ATTN:
      return QsaAttnCase(abi_1_0);
    case SM70OPS_OP_NVFP4_MOE:
      return MoeCase();
    case SM70OPS_OP_NVFP4_MOE_PREPARE:
      return PrepareCase();
    default:
      std::abort();
  }
}

}  // namespace

std::unique_ptr<OpCase> MakeCase(sm70ops_op op) { return MakeCaseOf(op, false); }
std::unique_ptr<OpCase> MakeCase10(sm70ops_op op) { return MakeCaseOf(op, true); }

uint32_t ArgsSize10(sm70ops_op op) { return MakeCase10(op)->args_size(); }

bool IsArgsSizeOfSomeMinor(sm70ops_op op, uint32_t size) {
  const bool abi_1_1 = op == SM70OPS_OP_QSA_ATTN && size == SM70OPS_QSA_ATTN_ARGS_SIZE_1_1;
  return size == ArgsSize10(op) || abi_1_1 || size == MakeCase(op)->args_size();
}

std::unique_ptr<OpCase> MakeTokenIdsCase(bool count_column) { return TokenIdsCase(count_column); }

std::string OpName(sm70ops_op op) {
  static const char* const kNames[] = {"", "QsaIndex", "QsaAttn", "NvFp4Moe", "NvFp4MoePrepare"};
  return kNames[op];
}

sm70ops_decision CheckCase(const sm70ops_api& api, const sm70ops_context* ctx, const OpCase& c) {
  return Check(api, ctx, c.op(), c.args());
}

sm70ops_status ExecuteCase(const sm70ops_api& api, const sm70ops_context* ctx, const OpCase& c) {
  return api.execute(ctx, c.op(), c.args(), nullptr, nullptr, 0);
}

std::function<void(OpCase&)> Resize(std::vector<std::string> tensors, int dim, int64_t size) {
  return [tensors, dim, size](OpCase& c) {
    for (const std::string& name : tensors) sm70ops_desc_resize(c.slot(name).desc, dim, size);
  };
}

std::function<void(OpCase&)> SetDtype(std::string tensor, DLDataType dtype) {
  return [tensor, dtype](OpCase& c) { c.tensor(tensor).dtype = dtype; };
}

namespace {

// Every generic tensor class on every tensor slot of `probe`.
std::vector<Breakage> TensorBreakages(OpCase& probe) {
  std::vector<Breakage> out;
  for (const TensorSlot& slot : probe.slots()) {
    for (const TensorClass& cls : kTensorClasses) {
      if (!cls.applies(slot)) continue;
      const std::string name = slot.name;
      auto apply = cls.apply;
      out.push_back(
          {name + "/" + cls.label, [name, apply](OpCase& c) { apply(c.slot(name)); }, name});
    }
  }
  return out;
}

}  // namespace

std::vector<Breakage> BadInputs(sm70ops_op op) {
  std::vector<Breakage> out = TensorBreakages(*MakeCase(op));
  std::vector<Breakage> relations = Relations(op);
  out.insert(out.end(), relations.begin(), relations.end());
  return out;
}

std::vector<Breakage> TokenIdsBadInputs() {
  std::vector<Breakage> out = TensorBreakages(*MakeTokenIdsCase(true));
  std::vector<Breakage> relations = TokenIdsRelations();
  out.insert(out.end(), relations.begin(), relations.end());
  return out;
}

std::vector<Unsupported> UnsupportedCases() {
  using Index = sm70ops_qsa_index_args;
  using Attn = sm70ops_qsa_attn_args;
  // One page past the fast paths' longest context, the block table wide enough to hold it.
  constexpr int32_t kTooLong = 262144 + 64;
  const auto index_too_long =
      Both(Both(SetField(&Index::max_seq_len, kTooLong), Resize({"block_table"}, 1, kTooLong / 64)),
           Resize({"sel_blocks", "sel_mask"}, 1, kTopk / kRatio + 1));  // as wide as a set needs
  const auto attn_too_long =
      Both(SetField(&Attn::max_seq_len, kTooLong), Resize({"block_table"}, 1, kTooLong / 64));
  const auto head_dim_64 =
      Both(Resize({"q", "out", "gate"}, 2, 64), Resize({"k_cache", "v_cache"}, 3, 64));
  const auto index_topk_256 =
      Both(SetField(&Index::topk, int32_t{256}), Resize({"topk_idx"}, 1, 256 + kRatio - 1));
  return {
      {"qsa_index_topk_256", SM70OPS_OP_QSA_INDEX, index_topk_256,
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"qsa_index_page_128", SM70OPS_OP_QSA_INDEX, Resize({"k_index"}, 1, 128 / kRatio),
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"qsa_index_page_8", SM70OPS_OP_QSA_INDEX,
       Both(Resize({"k_index"}, 1, 8 / kRatio),
            Both(Resize({"block_table"}, 1, kSeqLen / 8),
                 Resize({"sel_blocks", "sel_mask"}, 1, kSeqLen / 8))),
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"qsa_index_8_heads", SM70OPS_OP_QSA_INDEX, Resize({"q", "weights"}, 1, 8),
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"qsa_index_context_past_256k", SM70OPS_OP_QSA_INDEX, index_too_long,
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"qsa_attn_context_past_256k", SM70OPS_OP_QSA_ATTN, attn_too_long,
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"qsa_attn_page_128", SM70OPS_OP_QSA_ATTN, Resize({"k_cache", "v_cache"}, 1, 128),
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"qsa_index_bf16_q", SM70OPS_OP_QSA_INDEX, SetDtype("q", BF16()),
       SM70OPS_REASON_UNSUPPORTED_DTYPE},
      {"qsa_attn_head_dim_64", SM70OPS_OP_QSA_ATTN, head_dim_64, SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"qsa_attn_group_32", SM70OPS_OP_QSA_ATTN, Resize({"q", "out", "lse", "gate"}, 1, 32),
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"qsa_attn_bf16_q", SM70OPS_OP_QSA_ATTN, SetDtype("q", BF16()),
       SM70OPS_REASON_UNSUPPORTED_DTYPE},
      {"nvfp4_moe_1024_experts", SM70OPS_OP_NVFP4_MOE, Resize(kWeightTensors, 0, 1024),
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"nvfp4_moe_topk_17", SM70OPS_OP_NVFP4_MOE, Resize({"topk_ids", "topk_weights"}, 1, 17),
       SM70OPS_REASON_UNSUPPORTED_SHAPE},
      {"nvfp4_moe_bf16_x", SM70OPS_OP_NVFP4_MOE, SetDtype("x", BF16()),
       SM70OPS_REASON_UNSUPPORTED_DTYPE},
      // T x top-k = 2^28 x 10 routed rows overflow int32 although every dimension fits.
      {"nvfp4_moe_routed_rows_overflow", SM70OPS_OP_NVFP4_MOE,
       Resize({"x", "out", "topk_ids", "topk_weights"}, 0, int64_t{1} << 28),
       SM70OPS_REASON_TOO_LARGE},
      {"nvfp4_moe_prepare_1024_experts", SM70OPS_OP_NVFP4_MOE_PREPARE,
       Resize(kWeightTensors, 0, 1024), SM70OPS_REASON_UNSUPPORTED_SHAPE},
  };
}

}  // namespace sm70ops_test
