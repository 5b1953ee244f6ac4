/* Op 1, QSA index (score, top-k, expand): argument checks, supported shapes, dispatch. */
#include "kernels/qsa_index/qsa_index.h"

#include "plugin/op.h"
#include "plugin/status.h"

/* What the fast path runs. The capability check and the dispatch both read this one table. */
typedef struct qsa_index_shape {
  int32_t heads;    /* indexer heads of q */
  int32_t head_dim; /* q and k_index inner size */
  int32_t min_page; /* page sizes P: the powers of two from min_page to max_page tokens */
  int32_t max_page;
  int32_t max_ratio; /* compress ratios c: the powers of two up to max_ratio */
  int32_t topk_min;  /* token budget B of the fast path */
  int32_t topk_max;
  int32_t max_seq_len; /* longest context the kernel keeps on chip */
  sm70ops_route route;
  sm70_launch_fn launch;
} qsa_index_shape;

static sm70ops_status launch_qsa_index(const sm70_plan *plan, const void *args, void *stream,
                                       void *workspace);

static const qsa_index_shape kShapes[] = {
    {.heads = SM70_QSA_INDEX_HEADS,
     .head_dim = SM70_QSA_INDEX_DIM,
     .min_page = SM70_QSA_INDEX_MIN_PAGE,
     .max_page = SM70_QSA_INDEX_MAX_PAGE,
     .max_ratio = SM70_QSA_INDEX_MAX_RATIO,
     .topk_min = SM70_QSA_INDEX_MIN_TOPK,
     .topk_max = SM70_QSA_INDEX_MAX_TOPK,
     .max_seq_len = SM70_QSA_INDEX_MAX_SEQ_LEN,
     .route = SM70OPS_ROUTE_QSA_INDEX_WMMA,
     .launch = launch_qsa_index},
};

/* What the contract accepts (ops.md, op 1); the table narrows the fast path. */
enum { kMaxTopk = 8192, kMaxRatio = 4 };

/* c: 0 (a 1.0 host, or a 1.1 host that leaves it) means 1. */
static int32_t compress_ratio(const sm70ops_qsa_index_args *a) {
  return a->compress_ratio == 0 ? 1 : a->compress_ratio;
}

/* The page size P the caches' shapes give: k_index holds P / c keys a page. */
static int64_t page_size(const sm70ops_qsa_index_args *a) {
  return a->k_index->shape[1] * compress_ratio(a);
}

static int32_t check_outputs(const sm70ops_context *ctx, const sm70ops_qsa_index_args *a,
                             int32_t need_data, int64_t rows, sm70_plan *plan) {
  const sm70ops_reason bad = SM70OPS_REASON_INVALID_ARGUMENT;
  int32_t sel_given = (a->sel_blocks != NULL) + (a->sel_mask != NULL) + (a->sel_count != NULL);
  if (sel_given != 0 && sel_given != 3) {
    return sm70_decline(plan, bad, "sel_blocks, sel_mask and sel_count go together (%d of 3 given)",
                        sel_given);
  }
  if (a->topk_idx == NULL && sel_given == 0) {
    return sm70_decline(plan, bad, "no output: give topk_idx, the sel_* triple, or both");
  }
  const DLTensor *blocks = a->sel_blocks;
  int64_t nb = blocks != NULL && blocks->ndim == 2 && blocks->shape != NULL ? blocks->shape[1] : 0;
  const int64_t set_width = (int64_t)a->topk + compress_ratio(a) - 1; /* B + c - 1 tokens */
  const sm70_tensor_spec specs[] = {
      {.name = "topk_idx", .dtype = SM70_I32, .rank = 2, .optional = 1, .shape = {rows, set_width}},
      {.name = "sel_blocks",
       .dtype = SM70_I32,
       .rank = 2,
       .optional = 1,
       .shape = {rows, SM70_ANY}},
      {.name = "sel_mask", .dtype = SM70_U64, .rank = 2, .optional = 1, .shape = {rows, nb}},
      {.name = "sel_count", .dtype = SM70_I32, .rank = 1, .optional = 1, .shape = {rows}},
  };
  const DLTensor *tensors[] = {a->topk_idx, a->sel_blocks, a->sel_mask, a->sel_count};
  if (!sm70_check_tensors(ctx, need_data, tensors, specs, 4, plan)) return 0;
  if (sel_given && nb < 1) return sm70_decline(plan, bad, "sel_blocks has no columns (NB = 0)");
  return 1;
}

/* weights is optional from ABI 1.1 on; a 1.0 host's struct must give it, as 1.0 required. */
static int32_t check_weights(const sm70ops_context *ctx, const sm70ops_qsa_index_args *a,
                             int32_t need_data, sm70_plan *plan) {
  const sm70_tensor_spec spec = {
      .name = "weights",
      .dtype = SM70_F32,
      .rank = 2,
      .optional = a->struct_size > SM70OPS_QSA_INDEX_ARGS_SIZE_1_0,
      .shape = {a->q->shape[0], a->q->shape[1]},
  };
  return sm70_check_tensors(ctx, need_data, &a->weights, &spec, 1, plan);
}

/* c, reserved1, the budget and the page size the caches give. */
static int32_t check_scalars(const sm70ops_qsa_index_args *a, sm70_plan *plan) {
  const sm70ops_reason bad = SM70OPS_REASON_INVALID_ARGUMENT;
  const int32_t c = compress_ratio(a);
  if (!sm70_is_power_of_two(c) || c > kMaxRatio) {
    return sm70_decline(plan, bad, "compress_ratio %d: 1, 2 or 4 tokens per key (0 means 1)",
                        a->compress_ratio);
  }
  if (a->reserved1 != 0) return sm70_decline(plan, bad, "reserved1 must be 0");
  if (a->topk < 1 || a->topk > kMaxTopk || a->topk % c != 0) {
    return sm70_decline(plan, bad, "topk %d: the budget is 1..%d tokens, a multiple of c = %d",
                        a->topk, kMaxTopk, c);
  }
  if (a->k_index->shape[0] < 1 || a->k_index->shape[1] < 1) {
    return sm70_decline(plan, bad, "k_index has no pages or no keys");
  }
  if (page_size(a) > INT32_MAX / 2) {
    return sm70_decline(plan, bad, "k_index holds %lld keys a page", (long long)page_size(a));
  }
  return 1;
}

static int32_t check_inputs(const sm70ops_context *ctx, const sm70ops_qsa_index_args *a,
                            int32_t need_data, sm70_plan *plan) {
  const sm70_tensor_spec q_spec = {.name = "q",
                                   .dtype = SM70_F16,
                                   .rank = 3,
                                   .vector_rows = 1,
                                   .model_dtype = 1,
                                   .shape = {SM70_ANY, SM70_ANY, SM70_ANY}};
  if (!sm70_check_tensors(ctx, need_data, &a->q, &q_spec, 1, plan)) return 0;
  const sm70_tensor_spec k_spec = {.name = "k_index",
                                   .dtype = SM70_F16,
                                   .rank = 3,
                                   .vector_rows = 1,
                                   .model_dtype = 1,
                                   .shape = {SM70_ANY, SM70_ANY, a->q->shape[2]}};
  if (!check_weights(ctx, a, need_data, plan) ||
      !sm70_check_tensors(ctx, need_data, &a->k_index, &k_spec, 1, plan) ||
      !check_scalars(a, plan)) {
    return 0;
  }
  const sm70_varlen varlen = {a->query_start_loc, a->seq_lens, a->block_table, a->max_seq_len,
                              a->max_query_len};
  int64_t rows = a->q->shape[0];
  return sm70_check_varlen(ctx, need_data, &varlen, rows, (int32_t)page_size(a), plan) &&
         check_outputs(ctx, a, need_data, rows, plan);
}

static const qsa_index_shape *match_shape(const sm70ops_qsa_index_args *a, sm70_plan *plan) {
  const DLTensor *q = a->q;
  const int64_t p = page_size(a);
  const int32_t c = compress_ratio(a);
  for (size_t i = 0; i < sizeof(kShapes) / sizeof(kShapes[0]); ++i) {
    const qsa_index_shape *s = &kShapes[i];
    if (q->shape[1] != s->heads || q->shape[2] != s->head_dim ||
        !sm70_fast_path_page(p, s->min_page, s->max_page) || c > s->max_ratio) {
      continue;
    }
    if (a->topk < s->topk_min || a->topk > s->topk_max) {
      sm70_decline(plan, SM70OPS_REASON_UNSUPPORTED_SHAPE,
                   "topk %d tokens outside the fast path's %d..%d", a->topk, s->topk_min,
                   s->topk_max);
      return NULL;
    }
    return sm70_check_fast_path_seq_len(a->max_seq_len, s->max_seq_len, plan) ? s : NULL;
  }
  sm70_decline(plan, SM70OPS_REASON_UNSUPPORTED_SHAPE,
               "q [T, %lld, %lld] with %lld-token pages, %d tokens a key: the fast path runs "
               "%d heads x %d dims, %d- to %d-token pages, 1 to %d tokens a key",
               (long long)q->shape[1], (long long)q->shape[2], (long long)p, c, kShapes[0].heads,
               kShapes[0].head_dim, kShapes[0].min_page, kShapes[0].max_page, kShapes[0].max_ratio);
  return NULL;
}

/* A row's set touches at most min(B/c + 1, ceil(L / P)) pages (c = 1: no tail, min(B, ...)):
 * groups never straddle a page, and the tail lies in one. A narrower sel_blocks could overflow. */
static int32_t selection_wide_enough(const sm70ops_qsa_index_args *a, sm70_plan *plan) {
  if (a->sel_blocks == NULL) return 1;
  const int32_t c = compress_ratio(a);
  const int64_t p = page_size(a);
  const int64_t pages = ((int64_t)a->max_seq_len + p - 1) / p;
  const int64_t groups = a->topk / c + (c > 1);
  const int64_t needed = pages < groups ? pages : groups;
  if (a->sel_blocks->shape[1] < needed) {
    return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT,
                        "sel_blocks width %lld < min(topk / c%s = %lld, ceil(max_seq_len %d / %lld)"
                        " = %lld), the most pages a row's tokens touch",
                        (long long)a->sel_blocks->shape[1], c > 1 ? " + 1" : "", (long long)groups,
                        a->max_seq_len, (long long)p, (long long)pages);
  }
  return 1;
}

enum { kDefaultWorkspaceBytes = 256 << 20 };

/* The host's cap on scratch (0: 256 MiB) and the keys a row sees at most. */
static uint64_t workspace_cap(const sm70ops_qsa_index_args *a) {
  return a->max_workspace_bytes ? a->max_workspace_bytes : kDefaultWorkspaceBytes;
}
static int32_t max_keys(const sm70ops_qsa_index_args *a) {
  return a->max_seq_len / compress_ratio(a);
}

/* How the call's rows are cut to fit the cap, and what that takes. */
static uint64_t workspace_split(const sm70ops_qsa_index_args *a, sm70_qsa_index_split *split) {
  return sm70_qsa_index_workspace((int32_t)a->q->shape[0], max_keys(a), workspace_cap(a), split);
}

static int32_t plan_workspace(const sm70ops_qsa_index_args *a, sm70_plan *plan) {
  sm70_qsa_index_split split;
  plan->workspace_bytes = workspace_split(a, &split);
  if (a->q->shape[0] > 0 && split.chunk_rows == 0) {
    return sm70_decline(plan, SM70OPS_REASON_TOO_LARGE,
                        "max_workspace_bytes %llu cannot hold one 16-row chunk of %d keys",
                        (unsigned long long)workspace_cap(a), max_keys(a));
  }
  return 1;
}

static void plan_qsa_index(const sm70ops_context *ctx, const void *args, int32_t need_data,
                           sm70_plan *plan) {
  const sm70ops_qsa_index_args *a = args;
  if (!check_inputs(ctx, a, need_data, plan) || !selection_wide_enough(a, plan)) return;
  const qsa_index_shape *shape = match_shape(a, plan);
  if (shape == NULL || !plan_workspace(a, plan)) return;
  plan->route = shape->route;
  plan->launch = shape->launch;
  plan->work_items = a->q->shape[0];
  plan->smem_bytes = sm70_qsa_index_smem_bytes(max_keys(a));
}

static sm70ops_status launch_qsa_index(const sm70_plan *plan, const void *args, void *stream,
                                       void *workspace) {
  const sm70ops_qsa_index_args *a = args;
  sm70_qsa_index_split split;
  workspace_split(a, &split);
  sm70_qsa_index_params p = {
      .q = sm70_tensor_data(a->q),
      .q_row_stride = a->q->strides[0],
      .q_head_stride = a->q->strides[1],
      .weights = sm70_tensor_data(a->weights),
      .weights_row_stride = sm70_tensor_stride(a->weights, 0),
      .k_index = sm70_tensor_data(a->k_index),
      .k_page_stride = a->k_index->strides[0],
      .k_token_stride = a->k_index->strides[1],
      .query_start_loc = sm70_tensor_data(a->query_start_loc),
      .seq_lens = sm70_tensor_data(a->seq_lens),
      .block_table = sm70_tensor_data(a->block_table),
      .block_table_stride = a->block_table->strides[0],
      .topk_idx = sm70_tensor_data(a->topk_idx),
      .topk_idx_stride = sm70_tensor_stride(a->topk_idx, 0),
      .sel_blocks = sm70_tensor_data(a->sel_blocks),
      .sel_blocks_stride = sm70_tensor_stride(a->sel_blocks, 0),
      .sel_mask = sm70_tensor_data(a->sel_mask),
      .sel_mask_stride = sm70_tensor_stride(a->sel_mask, 0),
      .sel_count = sm70_tensor_data(a->sel_count),
      .rows = (int32_t)a->q->shape[0],
      .requests = (int32_t)a->seq_lens->shape[0],
      .num_pages = (int32_t)a->k_index->shape[0],
      .max_pages = (int32_t)a->block_table->shape[1],
      .max_seq_len = a->max_seq_len,
      .topk = a->topk,
      .ratio = compress_ratio(a),
      .page_size = (int32_t)page_size(a),
      .sel_width = a->sel_blocks == NULL ? 0 : (int32_t)a->sel_blocks->shape[1],
      .chunk_rows = split.chunk_rows,
      .rescue_rows = split.rescue_rows,
      .checked = plan->checked,
      .smem_optin = plan->smem_optin,
  };
  return sm70_launch_result("qsa_index", sm70_qsa_index_launch(&p, workspace, stream));
}

const sm70_op sm70_op_qsa_index = {
    .id = SM70OPS_OP_QSA_INDEX,
    .name = "qsa_index",
    .args_sizes = {SM70OPS_QSA_INDEX_ARGS_SIZE_1_0, sizeof(sm70ops_qsa_index_args),
                   sizeof(sm70ops_qsa_index_args)},
    .plan = plan_qsa_index,
};
