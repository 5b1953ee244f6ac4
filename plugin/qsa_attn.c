/* Op 2, QSA selected attention: argument checks, supported shapes, dispatch. */
#include "kernels/qsa_attn/qsa_attn.h"

#include <math.h>

#include "plugin/op.h"

/* What the fast path runs. The capability check and the dispatch both read this one table. */
typedef struct qsa_attn_shape {
  int32_t head_dim;
  int32_t page_size;
  int32_t max_group;   /* Hq / Hkv: query heads sharing one KV head, packed into one MMA tile */
  int32_t max_seq_len; /* longest context: the union of a tile's pages is a bitmap on chip */
  sm70ops_route route;
  sm70_launch_fn launch; /* NULL: the kernel is not in this build */
} qsa_attn_shape;

static sm70ops_status launch_qsa_attn(const sm70_plan *plan, const void *args, void *stream,
                                      void *workspace);

static const qsa_attn_shape kShapes[] = {
    {.head_dim = 256,
     .page_size = SM70_QSA_ATTN_PAGE,
     .max_group = SM70_QSA_ATTN_MAX_GROUP,
     .max_seq_len = SM70_QSA_ATTN_MAX_SEQ_LEN,
     .route = SM70OPS_ROUTE_QSA_ATTN_WMMA,
     .launch = launch_qsa_attn},
    {.head_dim = 128,
     .page_size = SM70_QSA_ATTN_PAGE,
     .max_group = SM70_QSA_ATTN_MAX_GROUP,
     .max_seq_len = SM70_QSA_ATTN_MAX_SEQ_LEN,
     .route = SM70OPS_ROUTE_QSA_ATTN_WMMA,
     .launch = launch_qsa_attn},
};

static int32_t check_selection(const sm70ops_context *ctx, const sm70ops_qsa_attn_args *a,
                               int32_t need_data, int64_t rows, sm70_plan *plan) {
  const DLTensor *blocks = a->sel_blocks;
  int64_t nb = blocks != NULL && blocks->ndim == 2 && blocks->shape != NULL ? blocks->shape[1] : 0;
  int64_t heads = a->q->shape[1];
  const sm70_tensor_spec specs[] = {
      {.name = "sel_blocks", .dtype = SM70_I32, .rank = 2, .shape = {rows, SM70_ANY}},
      {.name = "sel_mask", .dtype = SM70_U64, .rank = 2, .shape = {rows, nb}},
      {.name = "sel_count", .dtype = SM70_I32, .rank = 1, .shape = {rows}},
      {.name = "out",
       .dtype = SM70_F16,
       .rank = 3,
       .vector_rows = 1,
       .model_dtype = 1,
       .shape = {rows, heads, a->q->shape[2]}},
      {.name = "lse", .dtype = SM70_F32, .rank = 2, .optional = 1, .shape = {rows, heads}},
  };
  const DLTensor *tensors[] = {a->sel_blocks, a->sel_mask, a->sel_count, a->out, a->lse};
  if (!sm70_check_tensors(ctx, need_data, tensors, specs, 5, plan)) return 0;
  if (nb < 1)
    return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT, "sel_blocks has no columns");
  return 1;
}

static int32_t check_inputs(const sm70ops_context *ctx, const sm70ops_qsa_attn_args *a,
                            int32_t need_data, sm70_plan *plan) {
  const sm70ops_reason bad = SM70OPS_REASON_INVALID_ARGUMENT;
  const sm70_tensor_spec q_spec = {.name = "q",
                                   .dtype = SM70_F16,
                                   .rank = 3,
                                   .vector_rows = 1,
                                   .model_dtype = 1,
                                   .shape = {SM70_ANY, SM70_ANY, SM70_ANY}};
  if (!sm70_check_tensors(ctx, need_data, &a->q, &q_spec, 1, plan)) return 0;
  int64_t dim = a->q->shape[2];
  const sm70_tensor_spec kv = {.name = "k_cache",
                               .dtype = SM70_F16,
                               .rank = 4,
                               .vector_rows = 1,
                               .model_dtype = 1,
                               .shape = {SM70_ANY, SM70_ANY, SM70_ANY, dim}};
  if (!sm70_check_tensors(ctx, need_data, &a->k_cache, &kv, 1, plan)) return 0;
  const int64_t *k = a->k_cache->shape;
  sm70_tensor_spec v_spec = kv;
  v_spec.name = "v_cache";
  for (int32_t d = 0; d < 4; ++d) v_spec.shape[d] = k[d];
  if (!sm70_check_tensors(ctx, need_data, &a->v_cache, &v_spec, 1, plan)) return 0;
  if (k[0] < 1 || k[1] < 1 || k[2] < 1) return sm70_decline(plan, bad, "k_cache is empty");
  if (a->q->shape[1] < 1 || a->q->shape[1] % k[2] != 0) {
    return sm70_decline(plan, bad, "q heads %lld not a positive multiple of KV heads %lld",
                        (long long)a->q->shape[1], (long long)k[2]);
  }
  if (!(a->sm_scale > 0.0f) || !isfinite(a->sm_scale)) {
    return sm70_decline(plan, bad, "sm_scale %g must be finite and positive", (double)a->sm_scale);
  }
  const sm70_varlen varlen = {a->query_start_loc, a->seq_lens, a->block_table, a->max_seq_len,
                              a->max_query_len};
  int64_t rows = a->q->shape[0];
  return sm70_check_varlen(ctx, need_data, &varlen, rows, (int32_t)k[1], plan) &&
         check_selection(ctx, a, need_data, rows, plan);
}

enum { kMaxKvHeads = 65535 }; /* one grid row per KV head: CUDA's grid y limit */

static const qsa_attn_shape *match_shape(const sm70ops_qsa_attn_args *a, sm70_plan *plan) {
  int64_t dim = a->q->shape[2];
  int64_t page_size = a->k_cache->shape[1];
  int64_t group = a->q->shape[1] / a->k_cache->shape[2];
  for (size_t i = 0; i < sizeof(kShapes) / sizeof(kShapes[0]); ++i) {
    const qsa_attn_shape *s = &kShapes[i];
    if (dim != s->head_dim || page_size != s->page_size || group > s->max_group) continue;
    if (a->k_cache->shape[2] > kMaxKvHeads) {
      sm70_decline(plan, SM70OPS_REASON_TOO_LARGE, "%lld KV heads: a launch holds at most %d",
                   (long long)a->k_cache->shape[2], kMaxKvHeads);
      return NULL;
    }
    return sm70_check_fast_path_seq_len(a->max_seq_len, s->max_seq_len, plan) ? s : NULL;
  }
  sm70_decline(plan, SM70OPS_REASON_UNSUPPORTED_SHAPE,
               "head dim %lld, %lld-token pages, %lld query heads per KV head: the fast path runs "
               "head dim 128 or 256, 64-token pages, up to 16 query heads per KV head",
               (long long)dim, (long long)page_size, (long long)group);
  return NULL;
}

static void plan_qsa_attn(const sm70ops_context *ctx, const void *args, int32_t need_data,
                          sm70_plan *plan) {
  const sm70ops_qsa_attn_args *a = args;
  if (!check_inputs(ctx, a, need_data, plan)) return;
  const qsa_attn_shape *shape = match_shape(a, plan);
  if (shape == NULL) return;
  plan->route = shape->route;
  plan->launch = shape->launch;
  plan->shape = shape;
  plan->work_items = a->q->shape[0];
  plan->smem_bytes =
      sm70_qsa_attn_smem_bytes(shape->head_dim, (int32_t)(a->q->shape[1] / a->k_cache->shape[2]));
}

const sm70_op sm70_op_qsa_attn = {
    .id = SM70OPS_OP_QSA_ATTN,
    .name = "qsa_attn",
    .args_size = sizeof(sm70ops_qsa_attn_args),
    .disabled_field = offsetof(sm70_settings, qsa_attn_disabled),
    .disabled_by = "SM70OPS_DISABLE_QSA_ATTN",
    .plan = plan_qsa_attn,
};

static sm70ops_status launch_qsa_attn(const sm70_plan *plan, const void *args, void *stream,
                                      void *workspace) {
  (void)workspace;
  const sm70ops_qsa_attn_args *a = args;
  const DLTensor *k = a->k_cache, *v = a->v_cache;
  sm70_qsa_attn_params p = {
      .q = sm70_tensor_data(a->q),
      .q_row_stride = a->q->strides[0],
      .q_head_stride = a->q->strides[1],
      .k_cache = sm70_tensor_data(k),
      .v_cache = sm70_tensor_data(v),
      .k_page_stride = k->strides[0],
      .k_token_stride = k->strides[1],
      .k_head_stride = k->strides[2],
      .v_page_stride = v->strides[0],
      .v_token_stride = v->strides[1],
      .v_head_stride = v->strides[2],
      .query_start_loc = sm70_tensor_data(a->query_start_loc),
      .seq_lens = sm70_tensor_data(a->seq_lens),
      .block_table = sm70_tensor_data(a->block_table),
      .block_table_stride = a->block_table->strides[0],
      .sel_blocks = sm70_tensor_data(a->sel_blocks),
      .sel_blocks_stride = a->sel_blocks->strides[0],
      .sel_mask = sm70_tensor_data(a->sel_mask),
      .sel_mask_stride = a->sel_mask->strides[0],
      .sel_count = sm70_tensor_data(a->sel_count),
      .out = sm70_tensor_data(a->out),
      .out_row_stride = a->out->strides[0],
      .out_head_stride = a->out->strides[1],
      .lse = sm70_tensor_data(a->lse),
      .lse_row_stride = a->lse == NULL ? 0 : a->lse->strides[0],
      .sm_scale = a->sm_scale,
      .rows = (int32_t)a->q->shape[0],
      .requests = (int32_t)a->seq_lens->shape[0],
      .q_heads = (int32_t)a->q->shape[1],
      .kv_heads = (int32_t)k->shape[2],
      .head_dim = (int32_t)a->q->shape[2],
      .num_pages = (int32_t)k->shape[0],
      .max_pages = (int32_t)a->block_table->shape[1],
      .max_seq_len = a->max_seq_len,
      .sel_width = (int32_t)a->sel_blocks->shape[1],
      .checked = plan->checked,
  };
  return sm70_launch_result("qsa_attn", sm70_qsa_attn_launch(&p, stream));
}
