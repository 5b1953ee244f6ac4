/*
 * sm70ops_desc.h: the argument struct of an op (abi/sm70ops.h) built from a few sizes, with a
 * DLTensor for each operand: the shapes the ABI gives it, dense strides (an empty dimension counts
 * as 1, as in PyTorch), CUDA device `device`, data NULL. The one builder of op descriptors: the
 * sm70ops tool plans with them as built; the conformance tests and the fuzzers point the data at
 * fake addresses and break fields; the GPU tests point it at buffers and make views strided.
 *
 *   sm70ops_desc_call call;
 *   sm70ops_desc_qsa_attn(&call, &sizes, 0);
 *   sm70ops_desc_find(&call, "q")->tensor.data = q;
 *   api->check(ctx, call.op, &call.args, &decision);
 *
 * A call points into itself (args -> tensors, args -> weights): build it where it is used and
 * never copy it. No allocation, no CUDA; C99 and C++.
 */
#ifndef SM70OPS_INTEGRATION_HOST_SM70OPS_DESC_H_
#define SM70OPS_INTEGRATION_HOST_SM70OPS_DESC_H_

#include <stdint.h>

#include "abi/sm70ops.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  SM70OPS_DESC_MAX_TENSORS = 12, /* qsa_attn's, with lse and gate */
  SM70OPS_DESC_MAX_RANK = 4      /* the KV caches' */
};

/* One operand. shape and strides keep a spare entry (1, 1) past the largest rank, so that a test
 * can raise ndim without the plugin reading past them. */
typedef struct sm70ops_desc_tensor {
  const char *name;       /* its field's name: "q", "w13" */
  const DLTensor **field; /* that field, in the call's args or weights */
  DLTensor tensor;
  int64_t shape[SM70OPS_DESC_MAX_RANK + 1];
  int64_t strides[SM70OPS_DESC_MAX_RANK + 1];
} sm70ops_desc_tensor;

typedef struct sm70ops_desc_call {
  sm70ops_op op;
  union {
    sm70ops_qsa_index_args qsa_index;
    sm70ops_qsa_attn_args qsa_attn;
    sm70ops_nvfp4_moe_args nvfp4_moe;
    sm70ops_nvfp4_moe_prepare_args nvfp4_moe_prepare;
  } args;                        /* struct_size is this header's sizeof */
  sm70ops_nvfp4_weights weights; /* what the MoE ops' args.weights points at */
  int32_t tensor_count;
  sm70ops_desc_tensor tensors[SM70OPS_DESC_MAX_TENSORS]; /* the fields' order; NULL ones left out */
} sm70ops_desc_call;

/* The varlen batch of both QSA ops: R requests of T rows in all, each request's pages in a row of
 * the block table, which maps them into a pool of cache pages. */
typedef struct sm70ops_desc_batch {
  int64_t rows;           /* T */
  int64_t requests;       /* R */
  int64_t max_pages;      /* block_table's width */
  int64_t cache_pages;    /* the KV and index caches' pages */
  int64_t page_size;      /* P */
  int64_t selected_pages; /* NB: sel_blocks' and sel_mask's width */
  int32_t max_seq_len;
  int32_t max_query_len;
} sm70ops_desc_batch;

typedef struct sm70ops_desc_qsa_index_sizes {
  sm70ops_desc_batch batch;
  int64_t heads, dim; /* of q and of the index keys */
  int32_t topk;       /* B */
  int32_t compress_ratio;
  int32_t with_weights;   /* weights [T, heads]; else NULL (the weight-free indexer) */
  int32_t with_topk_idx;  /* topk_idx [T, B + c - 1] */
  int32_t with_selection; /* sel_blocks, sel_mask [T, NB], sel_count [T] */
} sm70ops_desc_qsa_index_sizes;

typedef struct sm70ops_desc_qsa_attn_sizes {
  sm70ops_desc_batch batch;
  int64_t q_heads, kv_heads, head_dim;
  float sm_scale;
  int32_t with_lse;  /* lse [T, Hq] */
  int32_t with_gate; /* gate [T, Hq, D] */
  /* > 0: token_ids [T, token_ids_width] in place of the sel_* triple (batch.selected_pages is
   * then unused), its last column a count when token_ids_count_column (ABI 1.2). */
  int64_t token_ids_width;
  int32_t token_ids_count_column;
} sm70ops_desc_qsa_attn_sizes;

/* The checkpoint weights: E experts of hidden size H and intermediate size I. */
typedef struct sm70ops_desc_experts {
  int64_t experts, hidden, inter;
} sm70ops_desc_experts;

typedef struct sm70ops_desc_nvfp4_moe_sizes {
  sm70ops_desc_experts experts;
  int64_t rows, topk;     /* T, experts routed per token */
  int64_t prepared_bytes; /* prepared [bytes] (op 4's output); 0: NULL */
} sm70ops_desc_nvfp4_moe_sizes;

typedef struct sm70ops_desc_nvfp4_moe_prepare_sizes {
  sm70ops_desc_experts experts;
  int64_t prepared_bytes; /* prepared [bytes]; 0: NULL, as a host asks check for the size */
} sm70ops_desc_nvfp4_moe_prepare_sizes;

void sm70ops_desc_qsa_index(sm70ops_desc_call *call, const sm70ops_desc_qsa_index_sizes *sizes,
                            int32_t device);
void sm70ops_desc_qsa_attn(sm70ops_desc_call *call, const sm70ops_desc_qsa_attn_sizes *sizes,
                           int32_t device);
void sm70ops_desc_nvfp4_moe(sm70ops_desc_call *call, const sm70ops_desc_nvfp4_moe_sizes *sizes,
                            int32_t device);
void sm70ops_desc_nvfp4_moe_prepare(sm70ops_desc_call *call,
                                    const sm70ops_desc_nvfp4_moe_prepare_sizes *sizes,
                                    int32_t device);

/* The width NB of op 1's expansion that always suffices (ops.md) for rows whose block table has
 * `pages` pages: min(B/c + 1, pages), the + 1 the tail's page (c = 1 has no tail). */
static inline int64_t sm70ops_desc_selection_width(int64_t topk, int64_t compress_ratio,
                                                   int64_t pages) {
  const int64_t groups = topk / compress_ratio + (compress_ratio > 1);
  return groups < pages ? groups : pages;
}

/* The call's tensor named `name`; NULL if it has none. */
sm70ops_desc_tensor *sm70ops_desc_find(sm70ops_desc_call *call, const char *name);

/* Sets dimension `dim` to `size` and makes the strides dense again. */
void sm70ops_desc_resize(sm70ops_desc_tensor *t, int32_t dim, int64_t size);

/* A padded view: entries of dimension `dim` `stride` elements apart, the outer dimensions dense
 * around them (q rows of Hq x D + pad: dim 0; index keys of 128 + pad: dim 1 of the pages). */
void sm70ops_desc_stride(sm70ops_desc_tensor *t, int32_t dim, int64_t stride);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SM70OPS_INTEGRATION_HOST_SM70OPS_DESC_H_ */
