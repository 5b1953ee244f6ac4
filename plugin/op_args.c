/* Argument checks and launch results shared by several ops. */
#include "plugin/cuda_device.h"
#include "plugin/op.h"
#include "plugin/status.h"

sm70ops_status sm70_launch_result(const char *op, int32_t cuda_status) {
  if (cuda_status == 0) return SM70OPS_OK;
  sm70_cuda_error err;
  sm70_cuda_describe(cuda_status, &err);
  return sm70_fail(SM70OPS_ERR_CUDA, "%s: %s", op, err.message);
}

int32_t sm70_check_tensors(const sm70ops_context *ctx, int32_t need_data,
                           const DLTensor *const *tensors, const sm70_tensor_spec *specs,
                           int32_t count, sm70_plan *plan) {
  for (int32_t i = 0; i < count; ++i) {
    sm70ops_reason r = sm70_tensor_check(tensors[i], &specs[i], ctx->device_ordinal, need_data,
                                         plan->message, sizeof(plan->message));
    if (r != SM70OPS_REASON_ACCEPTED) {
      plan->reason = r;
      return 0;
    }
  }
  return 1;
}

int32_t sm70_check_varlen(const sm70ops_context *ctx, int32_t need_data, const sm70_varlen *v,
                          int64_t rows, int32_t page_size, sm70_plan *plan) {
  const sm70_tensor_spec specs[] = {
      {.name = "query_start_loc", .dtype = SM70_I32, .rank = 1, .shape = {SM70_ANY}},
      {.name = "seq_lens", .dtype = SM70_I32, .rank = 1, .shape = {SM70_ANY}},
      {.name = "block_table", .dtype = SM70_I32, .rank = 2, .shape = {SM70_ANY, SM70_ANY}},
  };
  const DLTensor *tensors[] = {v->query_start_loc, v->seq_lens, v->block_table};
  if (!sm70_check_tensors(ctx, need_data, tensors, specs, 3, plan)) return 0;
  int64_t requests = v->seq_lens->shape[0];
  int64_t max_pages = v->block_table->shape[1];
  const sm70ops_reason bad = SM70OPS_REASON_INVALID_ARGUMENT;
  if (requests < 1) return sm70_decline(plan, bad, "seq_lens: no requests (R = 0)");
  if (v->query_start_loc->shape[0] != requests + 1) {
    return sm70_decline(plan, bad, "query_start_loc has %lld entries, expected R+1 = %lld",
                        (long long)v->query_start_loc->shape[0], (long long)(requests + 1));
  }
  if (v->block_table->shape[0] != requests) {
    return sm70_decline(plan, bad, "block_table has %lld rows, expected R = %lld",
                        (long long)v->block_table->shape[0], (long long)requests);
  }
  if (v->max_seq_len < 1) return sm70_decline(plan, bad, "max_seq_len %d < 1", v->max_seq_len);
  if ((int64_t)v->max_seq_len > max_pages * page_size) {
    return sm70_decline(plan, bad, "max_seq_len %d exceeds block_table capacity %lld pages x %d",
                        v->max_seq_len, (long long)max_pages, page_size);
  }
  if (rows > 0 &&
      (v->max_query_len < 1 || v->max_query_len > rows || v->max_query_len > v->max_seq_len)) {
    return sm70_decline(plan, bad, "max_query_len %d outside 1..min(rows %lld, max_seq_len %d)",
                        v->max_query_len, (long long)rows, v->max_seq_len);
  }
  return 1;
}

int32_t sm70_check_fast_path_seq_len(int32_t max_seq_len, int32_t limit, sm70_plan *plan) {
  if (max_seq_len <= limit) return 1;
  return sm70_decline(plan, SM70OPS_REASON_UNSUPPORTED_SHAPE,
                      "max_seq_len %d beyond the fast path's %d", max_seq_len, limit);
}
