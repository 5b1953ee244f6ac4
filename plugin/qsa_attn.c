/* Op 2, QSA selected attention: argument checks, supported shapes, dispatch. */
#include "kernels/qsa_attn/qsa_attn.h"

#include <math.h>
#include <stdio.h>

#include "kernels/qsa_attn/token_ids.h"
#include "plugin/op.h"
#include "plugin/status.h"

/* What the fast path runs. The capability check and the dispatch both read this one table: an
 * entry per head dim, whose kernel is the one launched. */
typedef struct qsa_attn_shape {
  const sm70_qsa_attn_kernel *kernel; /* head dim D, shared memory per block, launch */
  int32_t min_page; /* page sizes P: the powers of two from min_page to max_page tokens */
  int32_t max_page;
  int32_t max_group;   /* Hq / Hkv: query heads sharing one KV head, packed into one MMA tile */
  int32_t max_seq_len; /* longest context: the union of a tile's pages is a bitmap on chip */
  sm70ops_route route;
  sm70_launch_fn launch;
} qsa_attn_shape;

static sm70ops_status launch_qsa_attn(const sm70_plan *plan, const void *args, void *stream,
                                      void *workspace);

static const qsa_attn_shape kShapes[] = {
    {.kernel = &sm70_qsa_attn_d256,
     .min_page = SM70_QSA_ATTN_MIN_PAGE,
     .max_page = SM70_QSA_ATTN_MAX_PAGE,
     .max_group = SM70_QSA_ATTN_MAX_GROUP,
     .max_seq_len = SM70_QSA_ATTN_MAX_SEQ_LEN,
     .route = SM70OPS_ROUTE_QSA_ATTN_WMMA,
     .launch = launch_qsa_attn},
    {.kernel = &sm70_qsa_attn_d128,
     .min_page = SM70_QSA_ATTN_MIN_PAGE,
     .max_page = SM70_QSA_ATTN_MAX_PAGE,
     .max_group = SM70_QSA_ATTN_MAX_GROUP,
     .max_seq_len = SM70_QSA_ATTN_MAX_SEQ_LEN,
     .route = SM70OPS_ROUTE_QSA_ATTN_WMMA,
     .launch = launch_qsa_attn},
};
enum { kNumShapes = sizeof(kShapes) / sizeof(kShapes[0]) };

/* The table's entry for the call's head dim, or NULL. */
static const qsa_attn_shape *find_shape(const sm70ops_qsa_attn_args *a) {
  for (int32_t i = 0; i < kNumShapes; ++i) {
    if (a->q->shape[2] == kShapes[i].kernel->head_dim) return &kShapes[i];
  }
  return NULL;
}

static int64_t page_size(const sm70ops_qsa_attn_args *a) { return a->k_cache->shape[1]; }

static int64_t group_size(const sm70ops_qsa_attn_args *a) {
  return a->q->shape[1] / a->k_cache->shape[2];
}

/* The sel_* triple, [T, NB] with NB >= 1. */
static int32_t check_triple(const sm70ops_context *ctx, const sm70ops_qsa_attn_args *a,
                            int32_t need_data, int64_t rows, sm70_plan *plan) {
  const DLTensor *blocks = a->sel_blocks;
  int64_t nb = blocks != NULL && blocks->ndim == 2 && blocks->shape != NULL ? blocks->shape[1] : 0;
  const sm70_tensor_spec specs[] = {
      {.name = "sel_blocks", .dtype = SM70_I32, .rank = 2, .shape = {rows, SM70_ANY}},
      {.name = "sel_mask", .dtype = SM70_U64, .rank = 2, .shape = {rows, nb}},
      {.name = "sel_count", .dtype = SM70_I32, .rank = 1, .shape = {rows}},
  };
  const DLTensor *tensors[] = {a->sel_blocks, a->sel_mask, a->sel_count};
  if (!sm70_check_tensors(ctx, need_data, tensors, specs, 3, plan)) return 0;
  if (nb < 1)
    return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT, "sel_blocks has no columns");
  return 1;
}

/* The ids a token_ids row holds: its columns less the count column. */
static int64_t ids_per_row(const sm70ops_qsa_attn_args *a) {
  return a->token_ids->shape[1] - a->token_ids_count_column;
}

/* ABI 1.2: token_ids [T, W] in place of the triple, which must then be absent. */
static int32_t check_token_ids(const sm70ops_context *ctx, const sm70ops_qsa_attn_args *a,
                               int32_t need_data, int64_t rows, sm70_plan *plan) {
  const sm70ops_reason bad = SM70OPS_REASON_INVALID_ARGUMENT;
  if (a->sel_blocks != NULL || a->sel_mask != NULL || a->sel_count != NULL) {
    return sm70_decline(plan, bad, "token_ids and the sel_* triple both given: pass one of them");
  }
  if (a->token_ids_count_column != 0 && a->token_ids_count_column != 1) {
    return sm70_decline(plan, bad, "token_ids_count_column %d is neither 0 nor 1",
                        a->token_ids_count_column);
  }
  const sm70_tensor_spec spec = {
      .name = "token_ids", .dtype = SM70_I32, .rank = 2, .shape = {rows, SM70_ANY}};
  if (!sm70_check_tensors(ctx, need_data, &a->token_ids, &spec, 1, plan)) return 0;
  if (ids_per_row(a) < 1) {
    return sm70_decline(plan, bad, "token_ids has %lld column%s and no id column",
                        (long long)a->token_ids->shape[1], a->token_ids->shape[1] == 1 ? "" : "s");
  }
  return 1;
}

/* The selection (the triple or token ids), the outputs and the optional gate: [T, ...] like q. */
static int32_t check_rows(const sm70ops_context *ctx, const sm70ops_qsa_attn_args *a,
                          int32_t need_data, int64_t rows, sm70_plan *plan) {
  const sm70ops_reason bad = SM70OPS_REASON_INVALID_ARGUMENT;
  if (a->reserved2 != 0) return sm70_decline(plan, bad, "reserved2 is %u, must be 0", a->reserved2);
  if (a->token_ids == NULL && a->token_ids_count_column != 0) {
    return sm70_decline(plan, bad, "token_ids_count_column %d without token_ids",
                        a->token_ids_count_column);
  }
  const int32_t selection = a->token_ids != NULL ? check_token_ids(ctx, a, need_data, rows, plan)
                                                 : check_triple(ctx, a, need_data, rows, plan);
  if (!selection) return 0;
  int64_t heads = a->q->shape[1], dim = a->q->shape[2];
  const sm70_tensor_spec specs[] = {
      {.name = "out",
       .dtype = SM70_F16,
       .rank = 3,
       .vector_rows = 1,
       .model_dtype = 1,
       .shape = {rows, heads, dim}},
      {.name = "lse", .dtype = SM70_F32, .rank = 2, .optional = 1, .shape = {rows, heads}},
      {.name = "gate",
       .dtype = SM70_F16,
       .rank = 3,
       .optional = 1,
       .vector_rows = 1,
       .model_dtype = 1,
       .shape = {rows, heads, dim}},
  };
  const DLTensor *tensors[] = {a->out, a->lse, a->gate};
  return sm70_check_tensors(ctx, need_data, tensors, specs, 3, plan);
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
  return sm70_check_varlen(ctx, need_data, &varlen, rows, (int32_t)page_size(a), plan) &&
         check_rows(ctx, a, need_data, rows, plan);
}

enum { kMaxKvHeads = 65535 }; /* one grid row per KV head: CUDA's grid y limit */

/* The head dims the table runs, for messages: "256 or 128". */
static void describe_head_dims(char *out, size_t bytes) {
  size_t used = 0;
  out[0] = '\0';
  for (int32_t i = 0; i < kNumShapes && used < bytes; ++i) {
    used += (size_t)snprintf(out + used, bytes - used, "%s%d", i == 0 ? "" : " or ",
                             kShapes[i].kernel->head_dim);
  }
}

static const qsa_attn_shape *match_shape(const sm70ops_qsa_attn_args *a, sm70_plan *plan) {
  const sm70ops_reason unsupported = SM70OPS_REASON_UNSUPPORTED_SHAPE;
  const qsa_attn_shape *s = find_shape(a);
  if (s == NULL) {
    char dims[32];
    describe_head_dims(dims, sizeof(dims));
    sm70_decline(plan, unsupported, "head dim %lld: the fast path runs head dim %s",
                 (long long)a->q->shape[2], dims);
    return NULL;
  }
  const int64_t p = page_size(a), group = group_size(a);
  if (!sm70_fast_path_page(p, s->min_page, s->max_page)) {
    sm70_decline(plan, unsupported,
                 "%lld-token pages: the fast path runs pages of %d to %d tokens "
                 "(powers of two)",
                 (long long)p, s->min_page, s->max_page);
    return NULL;
  }
  if (group > s->max_group) {
    sm70_decline(plan, unsupported, "%lld query heads per KV head: the fast path runs up to %d",
                 (long long)group, s->max_group);
    return NULL;
  }
  if (a->k_cache->shape[2] > kMaxKvHeads) {
    sm70_decline(plan, SM70OPS_REASON_TOO_LARGE, "%lld KV heads: a launch holds at most %d",
                 (long long)a->k_cache->shape[2], kMaxKvHeads);
    return NULL;
  }
  return sm70_check_fast_path_seq_len(a->max_seq_len, s->max_seq_len, plan) ? s : NULL;
}

/* NB of the triple that token ids expand into. */
static int32_t token_ids_width(const sm70ops_qsa_attn_args *a) {
  return sm70_qsa_token_ids_width((int32_t)ids_per_row(a), a->max_seq_len, (int32_t)page_size(a));
}

static void plan_qsa_attn(const sm70ops_context *ctx, const void *args, int32_t need_data,
                          sm70_plan *plan) {
  const sm70ops_qsa_attn_args *a = args;
  if (!check_inputs(ctx, a, need_data, plan)) return;
  const qsa_attn_shape *shape = match_shape(a, plan);
  if (shape == NULL) return;
  plan->route = shape->route;
  plan->launch = shape->launch;
  plan->work_items = a->q->shape[0];
  const int32_t group = (int32_t)group_size(a);
  plan->smem_bytes = shape->kernel->smem_bytes(group);
  const int n = snprintf(plan->message, sizeof(plan->message), "%d-row tiles x %d query heads",
                         shape->kernel->tile_rows(group), group);
  if (a->token_ids == NULL) return;
  /* The table's page sizes and contexts bound the expansion too: masks of at most 64 tokens,
   * bitmaps of at most 34 KB. */
  const int32_t rows = (int32_t)a->q->shape[0], nb = token_ids_width(a);
  plan->workspace_bytes = sm70_qsa_token_ids_workspace_bytes(rows, nb);
  const uint32_t expand_smem = sm70_qsa_token_ids_smem_bytes(a->max_seq_len, (int32_t)page_size(a));
  if (expand_smem > plan->smem_bytes) plan->smem_bytes = expand_smem;
  snprintf(plan->message + n, sizeof(plan->message) - (size_t)n,
           ", token ids expanded to %d pages a row", nb);
}

const sm70_op sm70_op_qsa_attn = {
    .id = SM70OPS_OP_QSA_ATTN,
    .name = "qsa_attn",
    .args_sizes = {SM70OPS_QSA_ATTN_ARGS_SIZE_1_0, SM70OPS_QSA_ATTN_ARGS_SIZE_1_1,
                   sizeof(sm70ops_qsa_attn_args)},
    .plan = plan_qsa_attn,
};

/* ABI 1.2: token_ids expanded into the triple in the workspace, which `p` then reads. */
static sm70ops_status expand_token_ids(const sm70_plan *plan, const sm70ops_qsa_attn_args *a,
                                       void *stream, void *workspace, sm70_qsa_attn_params *p) {
  sm70_qsa_token_ids_params e = {
      .token_ids = sm70_tensor_data(a->token_ids),
      .token_ids_stride = a->token_ids->strides[0],
      .width = (int32_t)a->token_ids->shape[1],
      .count_column = a->token_ids_count_column,
      .query_start_loc = p->query_start_loc,
      .seq_lens = p->seq_lens,
      .rows = p->rows,
      .requests = p->requests,
      .max_seq_len = p->max_seq_len,
      .page_size = p->page_size,
      .checked = plan->checked,
  };
  sm70_qsa_token_ids_place(workspace, p->rows, token_ids_width(a), &e);
  p->sel_blocks = e.sel_blocks;
  p->sel_blocks_stride = e.sel_width;
  p->sel_mask = e.sel_mask;
  p->sel_mask_stride = e.sel_width;
  p->sel_count = e.sel_count;
  p->sel_width = e.sel_width;
  return sm70_launch_result("qsa_attn (token ids)", sm70_qsa_token_ids_launch(&e, stream));
}

static sm70ops_status launch_qsa_attn(const sm70_plan *plan, const void *args, void *stream,
                                      void *workspace) {
  const sm70ops_qsa_attn_args *a = args;
  const qsa_attn_shape *shape = find_shape(a);
  if (shape == NULL) { /* plan() accepted this head dim: the table cannot have lost it */
    return sm70_fail(SM70OPS_ERR_INTERNAL, "qsa_attn: no kernel for head dim %lld",
                     (long long)a->q->shape[2]);
  }
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
      .sel_blocks_stride = sm70_tensor_stride(a->sel_blocks, 0),
      .sel_mask = sm70_tensor_data(a->sel_mask),
      .sel_mask_stride = sm70_tensor_stride(a->sel_mask, 0),
      .sel_count = sm70_tensor_data(a->sel_count),
      .gate = sm70_tensor_data(a->gate),
      .gate_row_stride = sm70_tensor_stride(a->gate, 0),
      .gate_head_stride = sm70_tensor_stride(a->gate, 1),
      .out = sm70_tensor_data(a->out),
      .out_row_stride = a->out->strides[0],
      .out_head_stride = a->out->strides[1],
      .lse = sm70_tensor_data(a->lse),
      .lse_row_stride = sm70_tensor_stride(a->lse, 0),
      .sm_scale = a->sm_scale,
      .rows = (int32_t)a->q->shape[0],
      .requests = (int32_t)a->seq_lens->shape[0],
      .q_heads = (int32_t)a->q->shape[1],
      .kv_heads = (int32_t)k->shape[2],
      .page_size = (int32_t)page_size(a),
      .num_pages = (int32_t)k->shape[0],
      .max_pages = (int32_t)a->block_table->shape[1],
      .max_seq_len = a->max_seq_len,
      .sel_width = a->sel_blocks != NULL ? (int32_t)a->sel_blocks->shape[1] : 0,
      .checked = plan->checked,
  };
  if (a->token_ids != NULL) {
    const sm70ops_status expanded = expand_token_ids(plan, a, stream, workspace, &p);
    if (expanded != SM70OPS_OK) return expanded;
  }
  return sm70_launch_result("qsa_attn", shape->kernel->launch(&p, stream));
}
