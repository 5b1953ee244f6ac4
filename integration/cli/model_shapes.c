#include "integration/cli/model_shapes.h"

#include <math.h>
#include <stdio.h>

const model_shape kModelQwen38FlashNext = {.name = "Qwen3.8-Flash-Next",
                                           .hidden = 2560,
                                           .q_heads = 24,
                                           .kv_heads = 2,
                                           .head_dim = 256,
                                           .attention_gate = 1,
                                           .index_heads = 4,
                                           .index_dim = 128,
                                           .index_weighted = 0,
                                           .compress_ratio = 4,
                                           .index_topk = 2048,
                                           .experts = 512,
                                           .expert_topk = 10,
                                           .expert_inter = 640,
                                           .max_context = 262144,
                                           .tp = 1,
                                           .page_size = 64};

const model_shape kModelV1 = {.name = "contract version 1",
                              .hidden = 2048,
                              .q_heads = 16,
                              .kv_heads = 2,
                              .head_dim = 256,
                              .attention_gate = 0,
                              .index_heads = 4,
                              .index_dim = 128,
                              .index_weighted = 1,
                              .compress_ratio = 1,
                              .index_topk = 2048,
                              .experts = 512,
                              .expert_topk = 10,
                              .expert_inter = 512,
                              .max_context = 131072,
                              .tp = 1,
                              .page_size = 64};

model_shape model_shape_for(const model_shape *m, int32_t tp, int32_t page_size) {
  model_shape s = *m;
  s.q_heads = m->q_heads / tp;
  s.kv_heads = m->kv_heads / tp > 0 ? m->kv_heads / tp : 1;
  s.expert_inter = m->expert_inter / tp;
  s.tp = tp;
  s.page_size = page_size;
  return s;
}

#define COUNT(array) ((int32_t)(sizeof(array) / sizeof((array)[0])))

const int32_t kModelTpSizes[] = {1, 2, 4, 8};
const int32_t kModelTpCount = COUNT(kModelTpSizes);
const int32_t kModelPageSizes[] = {16, 64};
const int32_t kModelPageCount = COUNT(kModelPageSizes);
const int32_t kModelPrefillLengths[] = {8192, 32768, 131072, 262144};
const int32_t kModelPrefillCount = COUNT(kModelPrefillLengths);

/* vLLM's chunked prefill runs a prompt as chunks of at most this many rows. */
enum { kChunkRows = 8192 };
/* NVFP4: one e4m3 scale per 16 weights, two weights per byte. */
enum { kNvfp4Block = 16 };

/* Appends the cases of `op` over the TP sizes, page sizes and prompts that change it. */
static int32_t add_cases(sm70ops_op op, int32_t tp, int32_t page_size, int32_t by_tp,
                         int32_t by_page, int32_t by_prefill, model_case *out, int32_t n) {
  for (int32_t i = 0; i < (by_tp ? kModelTpCount : 1); ++i) {
    if (by_tp && tp != 0 && kModelTpSizes[i] != tp) continue;
    for (int32_t j = 0; j < (by_page ? kModelPageCount : 1); ++j) {
      if (by_page && page_size != 0 && kModelPageSizes[j] != page_size) continue;
      for (int32_t k = 0; k < (by_prefill ? kModelPrefillCount : 1); ++k) {
        out[n++] = (model_case){.op = op,
                                .tp = by_tp ? kModelTpSizes[i] : 0,
                                .page_size = by_page ? kModelPageSizes[j] : 0,
                                .prefill = by_prefill ? kModelPrefillLengths[k] : 0};
      }
    }
  }
  return n;
}

int32_t model_plan(int32_t tp, int32_t page_size, model_case out[kModelMaxCases]) {
  int32_t n = add_cases(SM70OPS_OP_QSA_INDEX, tp, page_size, 0, 1, 1, out, 0);
  n = add_cases(SM70OPS_OP_QSA_ATTN, tp, page_size, 1, 1, 1, out, n);
  n = add_cases(SM70OPS_OP_NVFP4_MOE, tp, page_size, 1, 0, 0, out, n);
  return add_cases(SM70OPS_OP_NVFP4_MOE_PREPARE, tp, page_size, 1, 0, 0, out, n);
}

static const DLDataType kF16 = {kDLFloat, 16, 1};
static const DLDataType kF32 = {kDLFloat, 32, 1};
static const DLDataType kI32 = {kDLInt, 32, 1};
static const DLDataType kU8 = {kDLUInt, 8, 1};
static const DLDataType kU64 = {kDLUInt, 64, 1};

static const DLTensor *add_tensor(model_call *call, DLDataType dtype, int32_t ndim,
                                  const int64_t *shape) {
  model_tensor *t = &call->tensors[call->tensor_count++];
  int64_t stride = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    t->shape[d] = shape[d];
    t->strides[d] = stride;
    stride *= shape[d];
  }
  t->tensor = (DLTensor){.device = {kDLCUDA, call->device},
                         .ndim = ndim,
                         .dtype = dtype,
                         .shape = t->shape,
                         .strides = t->strides};
  return &t->tensor;
}

/* TENSOR(call, kF16, rows, heads, dim): a dense descriptor of that shape. */
#define TENSOR(call, dtype, ...)                                                         \
  add_tensor(call, dtype, (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
             (int64_t[]){__VA_ARGS__})

/* The last chunk of the prompt: its rows see the whole prompt so far. */
typedef struct chunk {
  int64_t rows;
  int64_t seq_len;
  int64_t pages;          /* of the block table, and of the cache pool */
  int64_t selected_pages; /* NB, the width of the sel_* expansion */
} chunk;

/* A width of op 1's expansion that always suffices (ops.md): min(B/c + 1, ceil(L / P)), the + 1
 * the tail's page (c = 1 has no tail). */
static int64_t selection_width(const model_shape *m, int64_t pages) {
  const int64_t groups = m->index_topk / m->compress_ratio + (m->compress_ratio > 1);
  return pages < groups ? pages : groups;
}

static chunk last_chunk(const model_shape *m, int32_t prefill) {
  chunk c = {.rows = prefill < kChunkRows ? prefill : kChunkRows, .seq_len = prefill};
  c.pages = (prefill + m->page_size - 1) / m->page_size;
  c.selected_pages = selection_width(m, c.pages);
  return c;
}

typedef struct varlen {
  const DLTensor *query_start_loc, *seq_lens, *block_table;
} varlen;

static varlen add_varlen(model_call *call, const chunk *c) {
  const int64_t requests = 1;
  return (varlen){.query_start_loc = TENSOR(call, kI32, requests + 1),
                  .seq_lens = TENSOR(call, kI32, requests),
                  .block_table = TENSOR(call, kI32, requests, c->pages)};
}

/* Op 1's expansion, which op 2 reads. */
typedef struct selection {
  const DLTensor *blocks, *mask, *count;
} selection;

static selection add_selection(model_call *call, const chunk *c) {
  return (selection){.blocks = TENSOR(call, kI32, c->rows, c->selected_pages),
                     .mask = TENSOR(call, kU64, c->rows, c->selected_pages),
                     .count = TENSOR(call, kI32, c->rows)};
}

static void build_qsa_index(model_call *call, const model_shape *m, const chunk *c) {
  varlen v = add_varlen(call, c);
  selection s = add_selection(call, c);
  call->args.qsa_index = (sm70ops_qsa_index_args){
      .struct_size = sizeof(sm70ops_qsa_index_args),
      .topk = m->index_topk,
      .max_seq_len = (int32_t)c->seq_len,
      .max_query_len = (int32_t)c->rows,
      .q = TENSOR(call, kF16, c->rows, m->index_heads, m->index_dim),
      .weights = m->index_weighted ? TENSOR(call, kF32, c->rows, m->index_heads) : NULL,
      .k_index = TENSOR(call, kF16, c->pages, m->page_size / m->compress_ratio, m->index_dim),
      .query_start_loc = v.query_start_loc,
      .seq_lens = v.seq_lens,
      .block_table = v.block_table,
      .sel_blocks = s.blocks,
      .sel_mask = s.mask,
      .sel_count = s.count,
      .compress_ratio = m->compress_ratio,
  };
  snprintf(call->work, sizeof(call->work), "%lld x %lld", (long long)c->rows,
           (long long)c->seq_len);
}

static void build_qsa_attn(model_call *call, const model_shape *m, const chunk *c) {
  varlen v = add_varlen(call, c);
  selection s = add_selection(call, c);
  call->args.qsa_attn = (sm70ops_qsa_attn_args){
      .struct_size = sizeof(sm70ops_qsa_attn_args),
      .sm_scale = (float)(1.0 / sqrt(m->head_dim)),
      .max_seq_len = (int32_t)c->seq_len,
      .max_query_len = (int32_t)c->rows,
      .q = TENSOR(call, kF16, c->rows, m->q_heads, m->head_dim),
      .k_cache = TENSOR(call, kF16, c->pages, m->page_size, m->kv_heads, m->head_dim),
      .v_cache = TENSOR(call, kF16, c->pages, m->page_size, m->kv_heads, m->head_dim),
      .query_start_loc = v.query_start_loc,
      .seq_lens = v.seq_lens,
      .block_table = v.block_table,
      .sel_blocks = s.blocks,
      .sel_mask = s.mask,
      .sel_count = s.count,
      .out = TENSOR(call, kF16, c->rows, m->q_heads, m->head_dim),
      .gate = m->attention_gate ? TENSOR(call, kF16, c->rows, m->q_heads, m->head_dim) : NULL,
  };
  /* The token set's bound: B tokens of whole groups and the tail's c - 1. */
  const int64_t set = m->index_topk + m->compress_ratio - 1;
  const int64_t keys = c->seq_len < set ? c->seq_len : set;
  snprintf(call->work, sizeof(call->work), "%lld x %lld", (long long)c->rows, (long long)keys);
}

/* The checkpoint layout: w13 [E, 2I, H/2], w2 [E, H, I/2], e4m3 scales per 16 weights. */
static const sm70ops_nvfp4_weights *add_weights(model_call *call, const model_shape *m) {
  const int64_t e = m->experts, h = m->hidden, i = m->expert_inter;
  call->weights = (sm70ops_nvfp4_weights){
      .struct_size = sizeof(sm70ops_nvfp4_weights),
      .w13 = TENSOR(call, kU8, e, 2 * i, h / 2),
      .w13_scale = TENSOR(call, kU8, e, 2 * i, h / kNvfp4Block),
      .w13_scale_2 = TENSOR(call, kF32, e, 2),
      .w2 = TENSOR(call, kU8, e, h, i / 2),
      .w2_scale = TENSOR(call, kU8, e, h, i / kNvfp4Block),
      .w2_scale_2 = TENSOR(call, kF32, e),
  };
  return &call->weights;
}

static void build_nvfp4_moe(model_call *call, const model_shape *m, const chunk *c) {
  call->args.nvfp4_moe = (sm70ops_nvfp4_moe_args){
      .struct_size = sizeof(sm70ops_nvfp4_moe_args),
      .x = TENSOR(call, kF16, c->rows, m->hidden),
      .topk_ids = TENSOR(call, kI32, c->rows, m->expert_topk),
      .topk_weights = TENSOR(call, kF32, c->rows, m->expert_topk),
      .weights = add_weights(call, m),
      .out = TENSOR(call, kF16, c->rows, m->hidden),
  };
  snprintf(call->work, sizeof(call->work), "%lld x %d experts", (long long)c->rows, m->expert_topk);
}

/* `prepared` is left out, as a host asks at load: check then reports its size (output_bytes). */
static void build_nvfp4_moe_prepare(model_call *call, const model_shape *m) {
  call->args.nvfp4_moe_prepare = (sm70ops_nvfp4_moe_prepare_args){
      .struct_size = sizeof(sm70ops_nvfp4_moe_prepare_args),
      .weights = add_weights(call, m),
  };
  snprintf(call->work, sizeof(call->work), "%d experts", m->experts);
}

void model_call_build(model_call *call, const model_shape *shape, sm70ops_op op, int32_t prefill,
                      int32_t device) {
  *call = (model_call){.op = op, .device = device};
  const chunk c = last_chunk(shape, prefill);
  switch (op) {
    case SM70OPS_OP_QSA_INDEX:
      build_qsa_index(call, shape, &c);
      break;
    case SM70OPS_OP_QSA_ATTN:
      build_qsa_attn(call, shape, &c);
      break;
    case SM70OPS_OP_NVFP4_MOE:
      build_nvfp4_moe(call, shape, &c);
      break;
    case SM70OPS_OP_NVFP4_MOE_PREPARE:
      build_nvfp4_moe_prepare(call, shape);
      break;
  }
}

void model_case_build(model_call *call, const model_case *c, int32_t device) {
  /* The index at any TP (it is replicated), the MoE at any page size and on a full chunk. */
  const int32_t largest_page = kModelPageSizes[kModelPageCount - 1];
  const model_shape s = model_shape_for(&kModelQwen38FlashNext, c->tp ? c->tp : 1,
                                        c->page_size ? c->page_size : largest_page);
  model_call_build(call, &s, c->op, c->prefill ? c->prefill : kChunkRows, device);
}
