/* How the generic entry points (dispatch.c) meet the ops: each op file defines one sm70_op, whose
 * plan() validates the op's argument struct against its table of supported shapes and says
 * whether, how and with what workspace it would run. check() reports the plan; execute() runs it.
 */
#ifndef SM70OPS_PLUGIN_OP_H_
#define SM70OPS_PLUGIN_OP_H_

#include <stddef.h>

#include "abi/sm70ops.h"
#include "plugin/context.h"
#include "plugin/tensor.h"

typedef struct sm70_plan sm70_plan;

/* Runs an accepted plan on `stream`; arguments were validated by plan(). */
typedef sm70ops_status (*sm70_launch_fn)(const sm70_plan *plan, const void *args, void *stream,
                                         void *workspace);

struct sm70_plan {
  sm70ops_reason reason; /* SM70OPS_REASON_ACCEPTED or why not */
  sm70ops_route route;
  uint64_t workspace_bytes;
  uint64_t output_bytes;
  sm70_launch_fn launch; /* set on accept */
  int64_t work_items;    /* 0: valid but empty (no rows): execute launches nothing */
  uint32_t smem_bytes;   /* the most shared memory one of the route's blocks uses in this call */
  void *checked;         /* checked mode's device error record, or NULL (set by execute) */
  uint32_t smem_optin;   /* the context's smem_per_block (set by execute) */
  char message[SM70OPS_MESSAGE_BYTES];
};

typedef struct sm70_op {
  sm70ops_op id;
  const char *name; /* "qsa_index": CLI, logs and messages */
  /* The argument struct's size in each ABI minor, 1.0 first: a host's struct has one of them, and
   * plan() and launch see it copied into a whole current struct, zero past the host's size. */
  uint32_t args_sizes[SM70OPS_ABI_MINOR + 1];
  /* Fills `plan`; `need_data` (execute) also requires data pointers. Pure: no CUDA call. */
  void (*plan)(const sm70ops_context *ctx, const void *args, int32_t need_data, sm70_plan *plan);
} sm70_op;

extern const sm70_op sm70_op_qsa_index;
extern const sm70_op sm70_op_qsa_attn;
extern const sm70_op sm70_op_nvfp4_moe;
extern const sm70_op sm70_op_nvfp4_moe_prepare;

/* Sets plan->reason and a printf-style message. Returns 0 so a planner can `return
 * sm70_decline(...)` from a helper that answers "still valid?". */
int32_t sm70_decline(sm70_plan *plan, sm70ops_reason reason, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* SM70OPS_OK for a CUDA launch status of 0; else SM70OPS_ERR_CUDA with the runtime's message. */
sm70ops_status sm70_launch_result(const char *op, int32_t cuda_status);

/* Checks tensors[i] against specs[i] for i < count; on the first failure declines with its reason
 * and returns 0. */
int32_t sm70_check_tensors(const sm70ops_context *ctx, int32_t need_data,
                           const DLTensor *const *tensors, const sm70_tensor_spec *specs,
                           int32_t count, sm70_plan *plan);

/* The varlen batch metadata both QSA ops take (see the header). Checks query_start_loc [R+1],
 * seq_lens [R] and block_table [R, max_pages] int32, and the host bounds: 1 <= max_query_len <=
 * min(rows, max_seq_len) when rows > 0, and max_seq_len <= max_pages * page_size. */
typedef struct sm70_varlen {
  const DLTensor *query_start_loc;
  const DLTensor *seq_lens;
  const DLTensor *block_table;
  int32_t max_seq_len;
  int32_t max_query_len;
} sm70_varlen;

int32_t sm70_check_varlen(const sm70ops_context *ctx, int32_t need_data, const sm70_varlen *v,
                          int64_t rows, int32_t page_size, sm70_plan *plan);

static inline int32_t sm70_is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* A QSA fast path's page sizes: the powers of two from min_page to max_page tokens. */
static inline int32_t sm70_fast_path_page(int64_t page_size, int32_t min_page, int32_t max_page) {
  return sm70_is_power_of_two(page_size) && page_size >= min_page && page_size <= max_page;
}

/* The longest context a QSA fast path keeps on chip (its shape table's max_seq_len): past it,
 * declines UNSUPPORTED_SHAPE and returns 0. */
int32_t sm70_check_fast_path_seq_len(int32_t max_seq_len, int32_t limit, sm70_plan *plan);

#endif /* SM70OPS_PLUGIN_OP_H_ */
