/* Op 3, grouped NVFP4 MoE (W4A16), and op 4, its one-time weight repack: argument checks,
 * supported shapes, dispatch. */
#include "kernels/nvfp4_moe/nvfp4_moe.h"

#include "plugin/op.h"

/* What the fast path runs. The capability check and the dispatch both read this one table. */
typedef struct nvfp4_moe_shape {
  int32_t max_experts; /* E */
  int32_t max_topk;    /* routed experts per token */
  int32_t h_multiple;  /* hidden size H: a multiple of this */
  int32_t i_multiple;  /* expert intermediate size I (per TP rank): a multiple of this */
  sm70ops_route route;
  sm70_launch_fn launch;
  sm70_launch_fn prepare;
} nvfp4_moe_shape;

static sm70ops_status launch_nvfp4_moe(const sm70_plan *plan, const void *args, void *stream,
                                       void *workspace);
static sm70ops_status launch_prepare(const sm70_plan *plan, const void *args, void *stream,
                                     void *workspace);

static const nvfp4_moe_shape kShapes[] = {
    {.max_experts = SM70_NVFP4_MOE_MAX_EXPERTS,
     .max_topk = SM70_NVFP4_MOE_MAX_TOPK,
     .h_multiple = SM70_NVFP4_MOE_DIM_MULTIPLE,
     .i_multiple = SM70_NVFP4_MOE_DIM_MULTIPLE,
     .route = SM70OPS_ROUTE_NVFP4_MOE_WMMA,
     .launch = launch_nvfp4_moe,
     .prepare = launch_prepare},
};

enum { kBlock = 16 }; /* NVFP4: one e4m3 scale per 16 weights */
enum { kAlign = 16 }; /* payload and scale bases: 16-byte loads */

typedef struct moe_dims {
  int64_t experts, hidden, inter;
} moe_dims;

/* The checkpoint layout of ops.md, relative to E, I (from w13) and H (from w13 or x). */
static int32_t check_weights(const sm70ops_context *ctx, const sm70ops_nvfp4_weights *w,
                             int32_t need_data, moe_dims *dims, sm70_plan *plan) {
  const sm70ops_reason bad = SM70OPS_REASON_INVALID_ARGUMENT;
  if (w == NULL) return sm70_decline(plan, bad, "weights is NULL");
  if (w->struct_size != sizeof(*w)) {
    return sm70_decline(plan, SM70OPS_REASON_STRUCT_SIZE,
                        "weights struct_size %u, this plugin knows %zu", w->struct_size,
                        sizeof(*w));
  }
  if (w->reserved0 != 0) return sm70_decline(plan, bad, "weights reserved0 must be 0");
  const sm70_tensor_spec w13_spec = {.name = "w13",
                                     .dtype = SM70_U8,
                                     .rank = 3,
                                     .contiguous = 1,
                                     .shape = {SM70_ANY, SM70_ANY, SM70_ANY}};
  if (!sm70_check_tensors(ctx, need_data, &w->w13, &w13_spec, 1, plan)) return 0;
  int64_t e = w->w13->shape[0], two_i = w->w13->shape[1], h = w->w13->shape[2] * 2;
  if (e < 1 || two_i < 2 || two_i % 2 != 0 || h % kBlock != 0) {
    return sm70_decline(plan, bad, "w13 [%lld, %lld, %lld]: need E >= 1, 2I even, H %% 16 == 0",
                        (long long)e, (long long)two_i, (long long)h / 2);
  }
  int64_t i = two_i / 2;
  if (i % kBlock != 0)
    return sm70_decline(plan, bad, "I = %lld is not a multiple of 16", (long long)i);
  const sm70_tensor_spec specs[] = {
      {.name = "w13_scale",
       .dtype = SM70_U8,
       .rank = 3,
       .contiguous = 1,
       .shape = {e, two_i, h / kBlock}},
      {.name = "w13_scale_2", .dtype = SM70_F32, .rank = 2, .contiguous = 1, .shape = {e, 2}},
      {.name = "w2", .dtype = SM70_U8, .rank = 3, .contiguous = 1, .shape = {e, h, i / 2}},
      {.name = "w2_scale",
       .dtype = SM70_U8,
       .rank = 3,
       .contiguous = 1,
       .shape = {e, h, i / kBlock}},
      {.name = "w2_scale_2", .dtype = SM70_F32, .rank = 1, .contiguous = 1, .shape = {e}},
  };
  const DLTensor *tensors[] = {w->w13_scale, w->w13_scale_2, w->w2, w->w2_scale, w->w2_scale_2};
  if (!sm70_check_tensors(ctx, need_data, tensors, specs, 5, plan)) return 0;
  *dims = (moe_dims){.experts = e, .hidden = h, .inter = i};
  return 1;
}

static int32_t check_activations(const sm70ops_context *ctx, const sm70ops_nvfp4_moe_args *a,
                                 int32_t need_data, const moe_dims *dims, sm70_plan *plan) {
  const sm70_tensor_spec ids_spec = {
      .name = "topk_ids", .dtype = SM70_I32, .rank = 2, .shape = {SM70_ANY, SM70_ANY}};
  if (!sm70_check_tensors(ctx, need_data, &a->topk_ids, &ids_spec, 1, plan)) return 0;
  int64_t rows = a->topk_ids->shape[0], topk = a->topk_ids->shape[1];
  const sm70_tensor_spec specs[] = {
      {.name = "topk_weights", .dtype = SM70_F32, .rank = 2, .shape = {rows, topk}},
      {.name = "x",
       .dtype = SM70_F16,
       .rank = 2,
       .vector_rows = 1,
       .model_dtype = 1,
       .shape = {rows, dims->hidden}},
      {.name = "out",
       .dtype = SM70_F16,
       .rank = 2,
       .vector_rows = 1,
       .model_dtype = 1,
       .shape = {rows, dims->hidden}},
  };
  const DLTensor *tensors[] = {a->topk_weights, a->x, a->out};
  if (!sm70_check_tensors(ctx, need_data, tensors, specs, 3, plan)) return 0;
  if (topk < 1)
    return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT, "topk_ids has 0 columns");
  if (rows * topk > INT32_MAX) {
    return sm70_decline(plan, SM70OPS_REASON_TOO_LARGE,
                        "T x top-k = %lld routed rows exceed 32-bit indexing",
                        (long long)(rows * topk));
  }
  return 1;
}

static const nvfp4_moe_shape *match_shape(const moe_dims *d, int64_t topk, sm70_plan *plan) {
  for (size_t i = 0; i < sizeof(kShapes) / sizeof(kShapes[0]); ++i) {
    const nvfp4_moe_shape *s = &kShapes[i];
    if (d->experts <= s->max_experts && topk <= s->max_topk && d->hidden % s->h_multiple == 0 &&
        d->inter % s->i_multiple == 0) {
      return s;
    }
  }
  sm70_decline(plan, SM70OPS_REASON_UNSUPPORTED_SHAPE,
               "E %lld, top-k %lld, H %lld, I %lld: the fast path runs E <= %d, top-k <= %d, H a "
               "multiple of %d, I a multiple of %d",
               (long long)d->experts, (long long)topk, (long long)d->hidden, (long long)d->inter,
               kShapes[0].max_experts, kShapes[0].max_topk, kShapes[0].h_multiple,
               kShapes[0].i_multiple);
  return NULL;
}

/* The kernels address an expert's weights with 32-bit byte offsets. */
static int32_t check_expert_size(const moe_dims *d, sm70_plan *plan) {
  if (d->hidden * d->inter > SM70_NVFP4_MOE_MAX_EXPERT_ELEMENTS) {
    return sm70_decline(plan, SM70OPS_REASON_TOO_LARGE,
                        "H x I = %lld x %lld weights per expert matrix exceed the kernels' %lld",
                        (long long)d->hidden, (long long)d->inter,
                        (long long)SM70_NVFP4_MOE_MAX_EXPERT_ELEMENTS);
  }
  return 1;
}

static uint64_t prepared_bytes(const moe_dims *d) {
  return sm70_nvfp4_moe_prepared_bytes((int32_t)d->experts, (int32_t)d->hidden, (int32_t)d->inter);
}

/* A `prepared` buffer must hold the repacked layout of these dimensions. */
static int32_t check_prepared_size(const DLTensor *prepared, const moe_dims *d, sm70_plan *plan) {
  if (prepared == NULL || (uint64_t)prepared->shape[0] >= prepared_bytes(d)) return 1;
  return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT,
                      "prepared holds %lld bytes, the repacked weights of E %lld, H %lld, I %lld "
                      "take %llu (nvfp4_moe_prepare's output_bytes)",
                      (long long)prepared->shape[0], (long long)d->experts, (long long)d->hidden,
                      (long long)d->inter, (unsigned long long)prepared_bytes(d));
}

static int32_t check_weight_bases(const sm70ops_nvfp4_weights *w, sm70_plan *plan) {
  const DLTensor *const tensors[] = {w->w13, w->w13_scale, w->w2, w->w2_scale};
  static const char *const kNames[] = {"w13", "w13_scale", "w2", "w2_scale"};
  for (int32_t i = 0; i < 4; ++i) {
    if (sm70_tensor_address(tensors[i]) % kAlign != 0) {
      return sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT,
                          "%s: data + byte_offset is not %d-byte aligned", kNames[i], kAlign);
    }
  }
  return 1;
}

static void plan_nvfp4_moe(const sm70ops_context *ctx, const void *args, int32_t need_data,
                           sm70_plan *plan) {
  const sm70ops_nvfp4_moe_args *a = args;
  if (a->reserved0 != 0) {
    sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT, "reserved0 must be 0");
    return;
  }
  /* With repacked weights the checkpoint tensors only describe the shapes. */
  int32_t need_weight_data = need_data && a->prepared == NULL;
  moe_dims dims;
  const sm70_tensor_spec prepared_spec = {.name = "prepared",
                                          .dtype = SM70_U8,
                                          .rank = 1,
                                          .optional = 1,
                                          .vector_rows = 1,
                                          .shape = {SM70_ANY}};
  if (!check_weights(ctx, a->weights, need_weight_data, &dims, plan) ||
      !check_activations(ctx, a, need_data, &dims, plan) ||
      !sm70_check_tensors(ctx, need_data, &a->prepared, &prepared_spec, 1, plan)) {
    return;
  }
  const nvfp4_moe_shape *shape = match_shape(&dims, a->topk_ids->shape[1], plan);
  if (shape == NULL || !check_weight_bases(a->weights, plan) || !check_expert_size(&dims, plan) ||
      !check_prepared_size(a->prepared, &dims, plan)) {
    return;
  }
  plan->route = shape->route;
  plan->launch = shape->launch;
  plan->work_items = a->topk_ids->shape[0];
  plan->smem_bytes = sm70_nvfp4_moe_smem_bytes();
  plan->workspace_bytes =
      sm70_nvfp4_moe_workspace((int32_t)a->topk_ids->shape[0], (int32_t)a->topk_ids->shape[1],
                               (int32_t)dims.experts, (int32_t)dims.hidden, (int32_t)dims.inter);
}

static void plan_prepare(const sm70ops_context *ctx, const void *args, int32_t need_data,
                         sm70_plan *plan) {
  const sm70ops_nvfp4_moe_prepare_args *a = args;
  if (a->reserved0 != 0) {
    sm70_decline(plan, SM70OPS_REASON_INVALID_ARGUMENT, "reserved0 must be 0");
    return;
  }
  moe_dims dims;
  if (!check_weights(ctx, a->weights, need_data, &dims, plan)) return;
  /* check() may omit `prepared`: a host asks for output_bytes before it allocates the buffer. */
  const sm70_tensor_spec spec = {.name = "prepared",
                                 .dtype = SM70_U8,
                                 .rank = 1,
                                 .optional = !need_data,
                                 .vector_rows = 1,
                                 .shape = {SM70_ANY}};
  if (!sm70_check_tensors(ctx, need_data, &a->prepared, &spec, 1, plan)) return;
  const nvfp4_moe_shape *shape = match_shape(&dims, 1, plan);
  if (shape == NULL || !check_weight_bases(a->weights, plan) || !check_expert_size(&dims, plan) ||
      !check_prepared_size(a->prepared, &dims, plan)) {
    return;
  }
  plan->route = SM70OPS_ROUTE_NVFP4_MOE_PREPARE;
  plan->launch = shape->prepare;
  plan->work_items = dims.experts;
  plan->output_bytes = prepared_bytes(&dims);
}

static sm70_nvfp4_moe_weights checkpoint_weights(const sm70ops_nvfp4_weights *w) {
  return (sm70_nvfp4_moe_weights){
      .w13 = sm70_tensor_data(w->w13),
      .w13_scale = sm70_tensor_data(w->w13_scale),
      .w13_scale_2 = sm70_tensor_data(w->w13_scale_2),
      .w2 = sm70_tensor_data(w->w2),
      .w2_scale = sm70_tensor_data(w->w2_scale),
      .w2_scale_2 = sm70_tensor_data(w->w2_scale_2),
  };
}

static sm70ops_status launch_nvfp4_moe(const sm70_plan *plan, const void *args, void *stream,
                                       void *workspace) {
  const sm70ops_nvfp4_moe_args *a = args;
  const DLTensor *w13 = a->weights->w13;
  /* With repacked weights the checkpoint tensors only gave the shapes; their data may be NULL. */
  const sm70_nvfp4_moe_weights none = {0};
  sm70_nvfp4_moe_params p = {
      .x = sm70_tensor_data(a->x),
      .x_row_stride = a->x->strides[0],
      .topk_ids = sm70_tensor_data(a->topk_ids),
      .topk_ids_row_stride = a->topk_ids->strides[0],
      .topk_weights = sm70_tensor_data(a->topk_weights),
      .topk_weights_row_stride = a->topk_weights->strides[0],
      .out = (void *)sm70_tensor_base(a->out),
      .out_row_stride = a->out->strides[0],
      .weights = a->prepared == NULL ? checkpoint_weights(a->weights) : none,
      .prepared = a->prepared == NULL ? NULL : sm70_tensor_data(a->prepared),
      .tokens = (int32_t)a->topk_ids->shape[0],
      .topk = (int32_t)a->topk_ids->shape[1],
      .experts = (int32_t)w13->shape[0],
      .hidden = (int32_t)(w13->shape[2] * 2),
      .inter = (int32_t)(w13->shape[1] / 2),
      .checked = plan->checked,
  };
  return sm70_launch_result("nvfp4_moe", sm70_nvfp4_moe_launch(&p, workspace, stream));
}

static sm70ops_status launch_prepare(const sm70_plan *plan, const void *args, void *stream,
                                     void *workspace) {
  (void)plan;
  (void)workspace;
  const sm70ops_nvfp4_moe_prepare_args *a = args;
  const DLTensor *w13 = a->weights->w13;
  sm70_nvfp4_moe_prepare_params p = {
      .weights = checkpoint_weights(a->weights),
      .prepared = (uint8_t *)sm70_tensor_base(a->prepared),
      .experts = (int32_t)w13->shape[0],
      .hidden = (int32_t)(w13->shape[2] * 2),
      .inter = (int32_t)(w13->shape[1] / 2),
  };
  return sm70_launch_result("nvfp4_moe_prepare", sm70_nvfp4_moe_prepare_launch(&p, stream));
}

const sm70_op sm70_op_nvfp4_moe = {
    .id = SM70OPS_OP_NVFP4_MOE,
    .name = "nvfp4_moe",
    .args_sizes = {sizeof(sm70ops_nvfp4_moe_args), sizeof(sm70ops_nvfp4_moe_args),
                   sizeof(sm70ops_nvfp4_moe_args)},
    .plan = plan_nvfp4_moe,
};

const sm70_op sm70_op_nvfp4_moe_prepare = {
    .id = SM70OPS_OP_NVFP4_MOE_PREPARE,
    .name = "nvfp4_moe_prepare",
    .args_sizes = {sizeof(sm70ops_nvfp4_moe_prepare_args), sizeof(sm70ops_nvfp4_moe_prepare_args),
                   sizeof(sm70ops_nvfp4_moe_prepare_args)},
    .plan = plan_prepare,
};
