#include "integration/cli/model_shapes.h"

#include <math.h>
#include <stdio.h>

static const model_shape kModelShapes[] = {
    /* The whole model on one GPU. */
    {.tp = 1,
     .hidden = 2048,
     .q_heads = 16,
     .kv_heads = 2,
     .head_dim = 256,
     .index_heads = 4,
     .index_dim = 128,
     .index_topk = 2048,
     .page_size = 64,
     .experts = 512,
     .expert_topk = 10,
     .expert_inter = 512},
    /* The target: four V100-SXM2-32GB, attention heads and expert slices split four ways. */
    {.tp = 4,
     .hidden = 2048,
     .q_heads = 4,
     .kv_heads = 1,
     .head_dim = 256,
     .index_heads = 4,
     .index_dim = 128,
     .index_topk = 2048,
     .page_size = 64,
     .experts = 512,
     .expert_topk = 10,
     .expert_inter = 128},
};

const int32_t kModelPrefillLengths[] = {8192, 32768, 131072};
const int32_t kModelPrefillCount = sizeof(kModelPrefillLengths) / sizeof(kModelPrefillLengths[0]);

const sm70ops_op kModelOps[] = {SM70OPS_OP_QSA_INDEX, SM70OPS_OP_QSA_ATTN, SM70OPS_OP_NVFP4_MOE,
                                SM70OPS_OP_NVFP4_MOE_PREPARE};
const int32_t kModelOpCount = sizeof(kModelOps) / sizeof(kModelOps[0]);

/* vLLM's chunked prefill runs a prompt as chunks of at most this many rows. */
enum { kChunkRows = 8192 };
/* NVFP4: one e4m3 scale per 16 weights, two weights per byte. */
enum { kNvfp4Block = 16 };

const model_shape *model_shape_for_tp(int32_t tp) {
  for (size_t i = 0; i < sizeof(kModelShapes) / sizeof(kModelShapes[0]); ++i) {
    if (kModelShapes[i].tp == tp) return &kModelShapes[i];
  }
  return NULL;
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

static chunk last_chunk(const model_shape *m, int32_t prefill) {
  chunk c = {.rows = prefill < kChunkRows ? prefill : kChunkRows, .seq_len = prefill};
  c.pages = (prefill + m->page_size - 1) / m->page_size;
  c.selected_pages = c.pages < m->index_topk ? c.pages : m->index_topk;
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
      .weights = TENSOR(call, kF32, c->rows, m->index_heads),
      .k_index = TENSOR(call, kF16, c->pages, m->page_size, m->index_dim),
      .query_start_loc = v.query_start_loc,
      .seq_lens = v.seq_lens,
      .block_table = v.block_table,
      .sel_blocks = s.blocks,
      .sel_mask = s.mask,
      .sel_count = s.count,
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
  };
  int64_t keys = c->seq_len < m->index_topk ? c->seq_len : m->index_topk;
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

static int64_t tensor_bytes(const DLTensor *t) {
  int64_t elements = 1;
  for (int32_t d = 0; d < t->ndim; ++d) elements *= t->shape[d];
  return elements * t->dtype.bits / 8;
}

/* `prepared` is sized like the checkpoint's payload and scales plus each expert's scale_2 (the
 * repacked layout at these shapes): check reports the real size (output_bytes) only for a
 * descriptor that already has one. */
static void build_nvfp4_moe_prepare(model_call *call, const model_shape *m) {
  const sm70ops_nvfp4_weights *w = add_weights(call, m);
  int64_t bytes = tensor_bytes(w->w13) + tensor_bytes(w->w13_scale) + tensor_bytes(w->w2) +
                  tensor_bytes(w->w2_scale) + 16 * (int64_t)m->experts;
  call->args.nvfp4_moe_prepare = (sm70ops_nvfp4_moe_prepare_args){
      .struct_size = sizeof(sm70ops_nvfp4_moe_prepare_args),
      .weights = w,
      .prepared = TENSOR(call, kU8, bytes),
  };
  snprintf(call->work, sizeof(call->work), "%d experts", m->experts);
}

void model_call_build(model_call *call, const model_shape *model, sm70ops_op op, int32_t prefill,
                      int32_t device) {
  *call = (model_call){.op = op, .device = device};
  const chunk c = last_chunk(model, prefill);
  switch (op) {
    case SM70OPS_OP_QSA_INDEX:
      build_qsa_index(call, model, &c);
      break;
    case SM70OPS_OP_QSA_ATTN:
      build_qsa_attn(call, model, &c);
      break;
    case SM70OPS_OP_NVFP4_MOE:
      build_nvfp4_moe(call, model, &c);
      break;
    case SM70OPS_OP_NVFP4_MOE_PREPARE:
      build_nvfp4_moe_prepare(call, model);
      break;
  }
}
