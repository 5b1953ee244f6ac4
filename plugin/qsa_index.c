/* Op 1, QSA index (score, top-k, expand): argument checks, supported shapes, dispatch. */
#include "kernels/qsa_index/qsa_index.h"

#include "plugin/op.h"
#include "plugin/status.h"

/* What the fast path runs. The capability check and the dispatch both read this one table. */
typedef struct qsa_index_shape {
  int32_t heads;     /* indexer heads of q */
  int32_t head_dim;  /* q and k_index inner size */
  int32_t page_size; /* tokens per k_index page */
  int32_t topk_min;  /* K range of the fast path */
  int32_t topk_max;
  int32_t max_seq_len; /* longest context the kernel keeps on chip */
  sm70ops_route route;
  sm70_launch_fn launch; /* NULL: the kernel is not in this build */
} qsa_index_shape;

static sm70ops_status launch_qsa_index(const sm70_plan *plan, const void *args, void *stream,
                                       void *workspace);

static const qsa_index_shape kShapes[] = {
    {.heads = SM70_QSA_INDEX_HEADS,
     .head_dim = SM70_QSA_INDEX_DIM,
     .page_size = SM70_QSA_INDEX_PAGE,
     .topk_min = 512,
     .topk_max = SM70_QSA_INDEX_MAX_TOPK,
     .max_seq_len = SM70_QSA_INDEX_MAX_SEQ_LEN,
     .route = SM70OPS_ROUTE_QSA_INDEX_WMMA,
     .launch = launch_qsa_index},
};

/* The reference semantics accept any K in 1..kMaxTopk; the table narrows the fast path. */
enum { kMaxTopk = 4096 };

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
  const sm70_tensor_spec specs[] = {
      {.name = "topk_idx", .dtype = SM70_I32, .rank = 2, .optional = 1, .shape = {rows, a->topk}},
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

static int32_t check_inputs(const sm70ops_context *ctx, const sm70ops_qsa_index_args *a,
                            int32_t need_data, sm70_plan *plan) {
  const sm70_tensor_spec q_spec = {.name = "q",
                                   .dtype = SM70_F16,
                                   .rank = 3,
                                   .vector_rows = 1,
                                   .model_dtype = 1,
                                   .shape = {SM70_ANY, SM70_ANY, SM70_ANY}};
  if (!sm70_check_tensors(ctx, need_data, &a->q, &q_spec, 1, plan)) return 0;
  int64_t rows = a->q->shape[0];
  int64_t heads = a->q->shape[1];
  int64_t dim = a->q->shape[2];
  const sm70_tensor_spec specs[] = {
      {.name = "weights", .dtype = SM70_F32, .rank = 2, .shape = {rows, heads}},
      {.name = "k_index",
       .dtype = SM70_F16,
       .rank = 3,
       .vector_rows = 1,
       .model_dtype = 1,
       .shape = {SM70_ANY, SM70_ANY, dim}},
  };
  const DLTensor *tensors[] = {a->weights, a->k_index};
  if (!sm70_check_tensors(ctx, need_data, tensors, specs, 2, plan)) return 0;
  if (a->k_index->shape[0] < 1 || a->k_index->shape[1] < 1) {
    return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT, "k_index has no pages or no tokens");
  }
  if (a->topk < 1 || a->topk > kMaxTopk) {
    return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT, "topk %d outside 1..%d", a->topk,
                        kMaxTopk);
  }
  const sm70_varlen varlen = {a->query_start_loc, a->seq_lens, a->block_table, a->max_seq_len,
                              a->max_query_len};
  int32_t page_size = (int32_t)a->k_index->shape[1];
  return sm70_check_varlen(ctx, need_data, &varlen, rows, page_size, plan) &&
         check_outputs(ctx, a, need_data, rows, plan);
}

static const qsa_index_shape *match_shape(const sm70ops_qsa_index_args *a, sm70_plan *plan) {
  const DLTensor *q = a->q;
  int64_t page_size = a->k_index->shape[1];
  for (size_t i = 0; i < sizeof(kShapes) / sizeof(kShapes[0]); ++i) {
    const qsa_index_shape *s = &kShapes[i];
    if (q->shape[1] != s->heads || q->shape[2] != s->head_dim || page_size != s->page_size)
      continue;
    if (a->topk < s->topk_min || a->topk > s->topk_max) {
      sm70_decline(plan, SM70OPS_REASON_UNSUPPORTED_SHAPE, "topk %d outside the fast path's %d..%d",
                   a->topk, s->topk_min, s->topk_max);
      return NULL;
    }
    return sm70_check_fast_path_seq_len(a->max_seq_len, s->max_seq_len, plan) ? s : NULL;
  }
  sm70_decline(plan, SM70OPS_REASON_UNSUPPORTED_SHAPE,
               "q [T, %lld, %lld] with %lld-token pages: the fast path runs %d heads x %d dims, "
               "%d-token pages",
               (long long)q->shape[1], (long long)q->shape[2], (long long)page_size,
               kShapes[0].heads, kShapes[0].head_dim, kShapes[0].page_size);
  return NULL;
}

/* A row selects at most min(K, its pages) pages; a narrower sel_blocks could overflow. */
static int32_t selection_wide_enough(const sm70ops_qsa_index_args *a, sm70_plan *plan) {
  if (a->sel_blocks == NULL) return 1;
  int64_t pages = ((int64_t)a->max_seq_len + SM70_QSA_INDEX_PAGE - 1) / SM70_QSA_INDEX_PAGE;
  int64_t needed = pages < a->topk ? pages : a->topk;
  if (a->sel_blocks->shape[1] < needed) {
    return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT,
                        "sel_blocks width %lld < min(topk %d, ceil(max_seq_len %d / 64)) = %lld",
                        (long long)a->sel_blocks->shape[1], a->topk, a->max_seq_len,
                        (long long)needed);
  }
  return 1;
}

enum { kDefaultWorkspaceBytes = 256 << 20 };

static int32_t plan_workspace(const sm70ops_qsa_index_args *a, sm70_plan *plan) {
  uint64_t cap = a->max_workspace_bytes ? a->max_workspace_bytes : kDefaultWorkspaceBytes;
  int32_t rows = (int32_t)a->q->shape[0];
  plan->workspace_bytes = sm70_qsa_index_workspace(rows, a->max_seq_len, cap, &plan->chunk_rows);
  if (rows > 0 && plan->chunk_rows == 0) {
    return sm70_decline(plan, SM70OPS_REASON_TOO_LARGE,
                        "max_workspace_bytes %llu cannot hold one 16-row chunk of %d scores",
                        (unsigned long long)cap, a->max_seq_len);
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
  plan->shape = shape;
  plan->work_items = a->q->shape[0];
  plan->smem_bytes = sm70_qsa_index_smem_bytes(a->max_seq_len);
}

static int64_t row_stride(const DLTensor *t) { return t == NULL ? 0 : t->strides[0]; }

static sm70ops_status launch_qsa_index(const sm70_plan *plan, const void *args, void *stream,
                                       void *workspace) {
  const sm70ops_qsa_index_args *a = args;
  sm70_qsa_index_params p = {
      .q = sm70_tensor_data(a->q),
      .q_row_stride = a->q->strides[0],
      .q_head_stride = a->q->strides[1],
      .weights = sm70_tensor_data(a->weights),
      .weights_row_stride = a->weights->strides[0],
      .k_index = sm70_tensor_data(a->k_index),
      .k_page_stride = a->k_index->strides[0],
      .k_token_stride = a->k_index->strides[1],
      .query_start_loc = sm70_tensor_data(a->query_start_loc),
      .seq_lens = sm70_tensor_data(a->seq_lens),
      .block_table = sm70_tensor_data(a->block_table),
      .block_table_stride = a->block_table->strides[0],
      .topk_idx = sm70_tensor_data(a->topk_idx),
      .topk_idx_stride = row_stride(a->topk_idx),
      .sel_blocks = sm70_tensor_data(a->sel_blocks),
      .sel_blocks_stride = row_stride(a->sel_blocks),
      .sel_mask = sm70_tensor_data(a->sel_mask),
      .sel_mask_stride = row_stride(a->sel_mask),
      .sel_count = sm70_tensor_data(a->sel_count),
      .rows = (int32_t)a->q->shape[0],
      .requests = (int32_t)a->seq_lens->shape[0],
      .num_pages = (int32_t)a->k_index->shape[0],
      .max_pages = (int32_t)a->block_table->shape[1],
      .max_seq_len = a->max_seq_len,
      .topk = a->topk,
      .sel_width = a->sel_blocks == NULL ? 0 : (int32_t)a->sel_blocks->shape[1],
      .chunk_rows = plan->chunk_rows,
      .checked = plan->checked,
  };
  return sm70_launch_result("qsa_index", sm70_qsa_index_launch(&p, workspace, stream));
}

const sm70_op sm70_op_qsa_index = {
    .id = SM70OPS_OP_QSA_INDEX,
    .name = "qsa_index",
    .args_size = sizeof(sm70ops_qsa_index_args),
    .disabled_field = offsetof(sm70_settings, qsa_index_disabled),
    .disabled_by = "SM70OPS_DISABLE_QSA_INDEX or VLLM_SM70_QSA_INDEXER_CUBLAS=0",
    .plan = plan_qsa_index,
};
