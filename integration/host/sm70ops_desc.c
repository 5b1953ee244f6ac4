#include "integration/host/sm70ops_desc.h"

#include <assert.h>
#include <string.h>

static const DLDataType kF16 = {kDLFloat, 16, 1};
static const DLDataType kF32 = {kDLFloat, 32, 1};
static const DLDataType kI32 = {kDLInt, 32, 1};
static const DLDataType kU8 = {kDLUInt, 8, 1};
static const DLDataType kU64 = {kDLUInt, 64, 1};

/* NVFP4: one e4m3 scale per 16 weights, two weights per byte. */
enum { kNvfp4Block = 16 };

void sm70ops_desc_stride(sm70ops_desc_tensor *t, int32_t dim, int64_t stride) {
  assert(dim >= 0 && dim <= SM70OPS_DESC_MAX_RANK); /* shape and strides hold the spare entry */
  t->strides[dim] = stride;
  for (int32_t d = dim - 1; d >= 0; --d) {
    t->strides[d] = t->strides[d + 1] * (t->shape[d + 1] > 1 ? t->shape[d + 1] : 1);
  }
}

void sm70ops_desc_resize(sm70ops_desc_tensor *t, int32_t dim, int64_t size) {
  assert(dim >= 0 && dim <= SM70OPS_DESC_MAX_RANK); /* shape and strides hold the spare entry */
  t->shape[dim] = size;
  sm70ops_desc_stride(t, t->tensor.ndim - 1, 1);
}

/* Appends a dense tensor and points `field` at it. */
static void add_tensor(sm70ops_desc_call *call, const char *name, const DLTensor **field,
                       DLDataType dtype, int32_t ndim, const int64_t *shape, int32_t device) {
  assert(call->tensor_count < SM70OPS_DESC_MAX_TENSORS);
  assert(ndim > 0 && ndim <= SM70OPS_DESC_MAX_RANK);
  sm70ops_desc_tensor *t = &call->tensors[call->tensor_count++];
  *t = (sm70ops_desc_tensor){.name = name, .field = field};
  for (int32_t d = 0; d <= SM70OPS_DESC_MAX_RANK; ++d) {
    t->shape[d] = d < ndim ? shape[d] : 1;
    t->strides[d] = 1;
  }
  t->tensor = (DLTensor){.device = {kDLCUDA, device},
                         .ndim = ndim,
                         .dtype = dtype,
                         .shape = t->shape,
                         .strides = t->strides};
  sm70ops_desc_stride(t, ndim - 1, 1);
  *field = &t->tensor;
}

/* ADD(call, "q", &args->q, kF16, device, rows, heads, dim): a dense tensor of that shape. */
#define ADD(call, name, field, dtype, device, ...)                          \
  add_tensor(call, name, field, dtype,                                      \
             (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
             (int64_t[]){__VA_ARGS__}, device)

sm70ops_desc_tensor *sm70ops_desc_find(sm70ops_desc_call *call, const char *name) {
  for (int32_t i = 0; i < call->tensor_count; ++i) {
    if (strcmp(call->tensors[i].name, name) == 0) return &call->tensors[i];
  }
  return NULL;
}

/* The three varlen tensors, which both QSA ops' args hold in this order. */
typedef struct varlen_fields {
  const DLTensor **query_start_loc, **seq_lens, **block_table;
} varlen_fields;

static void add_varlen(sm70ops_desc_call *call, const sm70ops_desc_batch *b, varlen_fields f,
                       int32_t device) {
  ADD(call, "query_start_loc", f.query_start_loc, kI32, device, b->requests + 1);
  ADD(call, "seq_lens", f.seq_lens, kI32, device, b->requests);
  ADD(call, "block_table", f.block_table, kI32, device, b->requests, b->max_pages);
}

/* Op 1's expansion of each row's token set, which op 2 reads. */
typedef struct selection_fields {
  const DLTensor **sel_blocks, **sel_mask, **sel_count;
} selection_fields;

static void add_selection(sm70ops_desc_call *call, const sm70ops_desc_batch *b, selection_fields f,
                          int32_t device) {
  ADD(call, "sel_blocks", f.sel_blocks, kI32, device, b->rows, b->selected_pages);
  ADD(call, "sel_mask", f.sel_mask, kU64, device, b->rows, b->selected_pages);
  ADD(call, "sel_count", f.sel_count, kI32, device, b->rows);
}

void sm70ops_desc_qsa_index(sm70ops_desc_call *call, const sm70ops_desc_qsa_index_sizes *s,
                            int32_t device) {
  const sm70ops_desc_batch *b = &s->batch;
  *call = (sm70ops_desc_call){.op = SM70OPS_OP_QSA_INDEX};
  sm70ops_qsa_index_args *a = &call->args.qsa_index;
  *a = (sm70ops_qsa_index_args){.struct_size = sizeof(*a),
                                .topk = s->topk,
                                .max_seq_len = b->max_seq_len,
                                .max_query_len = b->max_query_len,
                                .compress_ratio = s->compress_ratio};
  ADD(call, "q", &a->q, kF16, device, b->rows, s->heads, s->dim);
  if (s->with_weights) ADD(call, "weights", &a->weights, kF32, device, b->rows, s->heads);
  ADD(call, "k_index", &a->k_index, kF16, device, b->cache_pages, b->page_size / s->compress_ratio,
      s->dim);
  add_varlen(call, b, (varlen_fields){&a->query_start_loc, &a->seq_lens, &a->block_table}, device);
  if (s->with_topk_idx) {
    ADD(call, "topk_idx", &a->topk_idx, kI32, device, b->rows, s->topk + s->compress_ratio - 1);
  }
  if (s->with_selection) {
    add_selection(call, b, (selection_fields){&a->sel_blocks, &a->sel_mask, &a->sel_count}, device);
  }
}

void sm70ops_desc_qsa_attn(sm70ops_desc_call *call, const sm70ops_desc_qsa_attn_sizes *s,
                           int32_t device) {
  const sm70ops_desc_batch *b = &s->batch;
  *call = (sm70ops_desc_call){.op = SM70OPS_OP_QSA_ATTN};
  sm70ops_qsa_attn_args *a = &call->args.qsa_attn;
  *a = (sm70ops_qsa_attn_args){.struct_size = sizeof(*a),
                               .sm_scale = s->sm_scale,
                               .max_seq_len = b->max_seq_len,
                               .max_query_len = b->max_query_len};
  const int64_t pages = b->cache_pages, page = b->page_size;
  ADD(call, "q", &a->q, kF16, device, b->rows, s->q_heads, s->head_dim);
  ADD(call, "k_cache", &a->k_cache, kF16, device, pages, page, s->kv_heads, s->head_dim);
  ADD(call, "v_cache", &a->v_cache, kF16, device, pages, page, s->kv_heads, s->head_dim);
  add_varlen(call, b, (varlen_fields){&a->query_start_loc, &a->seq_lens, &a->block_table}, device);
  if (s->token_ids_width > 0) {
    ADD(call, "token_ids", &a->token_ids, kI32, device, b->rows, s->token_ids_width);
    a->token_ids_count_column = s->token_ids_count_column;
  } else {
    add_selection(call, b, (selection_fields){&a->sel_blocks, &a->sel_mask, &a->sel_count}, device);
  }
  ADD(call, "out", &a->out, kF16, device, b->rows, s->q_heads, s->head_dim);
  if (s->with_lse) ADD(call, "lse", &a->lse, kF32, device, b->rows, s->q_heads);
  if (s->with_gate) ADD(call, "gate", &a->gate, kF16, device, b->rows, s->q_heads, s->head_dim);
}

/* The checkpoint layout: w13 [E, 2I, H/2], w2 [E, H, I/2], an e4m3 scale per 16 weights. */
static const sm70ops_nvfp4_weights *add_weights(sm70ops_desc_call *call,
                                                const sm70ops_desc_experts *x, int32_t device) {
  const int64_t e = x->experts, h = x->hidden, i = x->inter;
  sm70ops_nvfp4_weights *w = &call->weights;
  *w = (sm70ops_nvfp4_weights){.struct_size = sizeof(*w)};
  ADD(call, "w13", &w->w13, kU8, device, e, 2 * i, h / 2);
  ADD(call, "w13_scale", &w->w13_scale, kU8, device, e, 2 * i, h / kNvfp4Block);
  ADD(call, "w13_scale_2", &w->w13_scale_2, kF32, device, e, 2);
  ADD(call, "w2", &w->w2, kU8, device, e, h, i / 2);
  ADD(call, "w2_scale", &w->w2_scale, kU8, device, e, h, i / kNvfp4Block);
  ADD(call, "w2_scale_2", &w->w2_scale_2, kF32, device, e);
  return w;
}

void sm70ops_desc_nvfp4_moe(sm70ops_desc_call *call, const sm70ops_desc_nvfp4_moe_sizes *s,
                            int32_t device) {
  *call = (sm70ops_desc_call){.op = SM70OPS_OP_NVFP4_MOE};
  sm70ops_nvfp4_moe_args *a = &call->args.nvfp4_moe;
  *a = (sm70ops_nvfp4_moe_args){.struct_size = sizeof(*a)};
  const int64_t h = s->experts.hidden;
  ADD(call, "x", &a->x, kF16, device, s->rows, h);
  ADD(call, "topk_ids", &a->topk_ids, kI32, device, s->rows, s->topk);
  ADD(call, "topk_weights", &a->topk_weights, kF32, device, s->rows, s->topk);
  a->weights = add_weights(call, &s->experts, device);
  if (s->prepared_bytes) ADD(call, "prepared", &a->prepared, kU8, device, s->prepared_bytes);
  ADD(call, "out", &a->out, kF16, device, s->rows, h);
}

void sm70ops_desc_nvfp4_moe_prepare(sm70ops_desc_call *call,
                                    const sm70ops_desc_nvfp4_moe_prepare_sizes *s, int32_t device) {
  *call = (sm70ops_desc_call){.op = SM70OPS_OP_NVFP4_MOE_PREPARE};
  sm70ops_nvfp4_moe_prepare_args *a = &call->args.nvfp4_moe_prepare;
  *a = (sm70ops_nvfp4_moe_prepare_args){.struct_size = sizeof(*a)};
  a->weights = add_weights(call, &s->experts, device);
  if (s->prepared_bytes) ADD(call, "prepared", &a->prepared, kU8, device, s->prepared_bytes);
}
