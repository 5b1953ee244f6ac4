/* The served model's shapes (shared/spec/ops.md, "The model the fast paths are for") and the op
 * descriptors they give at each prefill length. One table: check plans with it, bench times it. */
#ifndef SM70OPS_INTEGRATION_CLI_MODEL_SHAPES_H_
#define SM70OPS_INTEGRATION_CLI_MODEL_SHAPES_H_

#include <stdint.h>

#include "abi/sm70ops.h"

/* Per tensor-parallel rank. */
typedef struct model_shape {
  int32_t tp;
  int32_t hidden;      /* H */
  int32_t q_heads;     /* Hq of the sparse-attention layers */
  int32_t kv_heads;    /* Hkv */
  int32_t head_dim;    /* D */
  int32_t index_heads; /* QSA indexer, replicated on every rank */
  int32_t index_dim;
  int32_t index_topk;   /* tokens each row selects */
  int32_t page_size;    /* tokens per KV page */
  int32_t experts;      /* E */
  int32_t expert_topk;  /* experts routed per token */
  int32_t expert_inter; /* I, this rank's slice */
} model_shape;

/* The entry for tensor parallelism `tp`, or NULL when the table has none. */
const model_shape *model_shape_for_tp(int32_t tp);

/* Prompt lengths that matter, in tokens, shortest first. */
extern const int32_t kModelPrefillLengths[];
extern const int32_t kModelPrefillCount;

/* Every op, in pipeline order. */
extern const sm70ops_op kModelOps[];
extern const int32_t kModelOpCount;

enum { kModelMaxTensors = 12, kModelMaxRank = 4 };

typedef struct model_tensor {
  DLTensor tensor;
  int64_t shape[kModelMaxRank];
  int64_t strides[kModelMaxRank];
} model_tensor;

/* The descriptors of one call: data NULL, dense explicit strides, on one CUDA device. It points
 * into itself, so build it where it will be used and never copy it. */
typedef struct model_call {
  sm70ops_op op;
  int32_t device;
  char work[48]; /* "rows x keys" for people, e.g. "8192 x 131072" */
  union {
    sm70ops_qsa_index_args qsa_index;
    sm70ops_qsa_attn_args qsa_attn;
    sm70ops_nvfp4_moe_args nvfp4_moe;
    sm70ops_nvfp4_moe_prepare_args nvfp4_moe_prepare;
  } args;
  sm70ops_nvfp4_weights weights;
  model_tensor tensors[kModelMaxTensors];
  int32_t tensor_count;
} model_call;

/* Describes `op` on the last chunk of one `prefill`-token prompt (R = 1) under vLLM's chunked
 * prefill. */
void model_call_build(model_call *call, const model_shape *model, sm70ops_op op, int32_t prefill,
                      int32_t device);

#endif /* SM70OPS_INTEGRATION_CLI_MODEL_SHAPES_H_ */
