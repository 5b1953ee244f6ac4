/* The served model, Qwen3.8-Flash-Next (shared/spec/ops.md v2, "The model the fast paths are
 * for"), its per-rank shapes and the op descriptors they give: check plans with them, bench times
 * them. The Python twin is integration/python/sm70ops/model.py. */
#ifndef SM70OPS_INTEGRATION_CLI_MODEL_SHAPES_H_
#define SM70OPS_INTEGRATION_CLI_MODEL_SHAPES_H_

#include <stdint.h>

#include "abi/sm70ops.h"

/* A model's shapes: the whole model (TP 1), or one rank's (model_shape_for). */
typedef struct model_shape {
  const char *name;
  int32_t hidden;         /* H */
  int32_t q_heads;        /* Hq of the sparse-attention layers */
  int32_t kv_heads;       /* Hkv */
  int32_t head_dim;       /* D */
  int32_t attention_gate; /* 1: out *= sigmoid(gate), the gate from the q projection */
  int32_t index_heads;    /* QSA indexer, replicated on every rank */
  int32_t index_dim;      /* dims of an index head */
  int32_t index_weighted; /* 1: per-head index weights (DeepSeek-V3.2 style); 0: weight-free */
  int32_t compress_ratio; /* c: tokens per index key */
  int32_t index_topk;     /* B: tokens each row selects */
  int32_t experts;        /* E */
  int32_t expert_topk;    /* experts routed per token */
  int32_t expert_inter;   /* I of a routed expert (a rank's slice) */
  int32_t max_context;    /* tokens */
  int32_t tp;             /* 1 for the whole model */
  int32_t page_size;      /* P: tokens per KV page, the engine's (SGLang 64, vLLM-style 16) */
} model_shape;

/* Qwen3.8-Flash-Next, and the shapes contract version 1 had guessed (bench --shapes v1). */
extern const model_shape kModelQwen38FlashNext;
extern const model_shape kModelV1;

/* `m` on one rank of `tp` with `page_size`-token pages: attention heads and every expert's
 * intermediate size split TP ways (a KV head replicated where TP exceeds Hkv); the indexer and
 * the router replicated. */
model_shape model_shape_for(const model_shape *m, int32_t tp, int32_t page_size);

/* What check plans, shortest prompt first. */
extern const int32_t kModelTpSizes[];
extern const int32_t kModelTpCount;
extern const int32_t kModelPageSizes[];
extern const int32_t kModelPageCount;
extern const int32_t kModelPrefillLengths[];
extern const int32_t kModelPrefillCount;

/* One descriptor of check's plan; 0 where the op's descriptor does not depend on the value (the
 * index is replicated on every rank, the MoE knows no pages and sees 8192-row chunks). */
typedef struct model_case {
  sm70ops_op op;
  int32_t tp;
  int32_t page_size;
  int32_t prefill;
} model_case;

enum { kModelMaxCases = 64 };

/* check's cases op by op (restricted to one TP size or page size when nonzero) into out[0..n);
 * returns n. */
int32_t model_plan(int32_t tp, int32_t page_size, model_case out[kModelMaxCases]);

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
 * prefill, with `shape`'s sizes (a rank's, from model_shape_for). */
void model_call_build(model_call *call, const model_shape *shape, sm70ops_op op, int32_t prefill,
                      int32_t device);

/* model_call_build for one of model_plan's cases, Qwen3.8-Flash-Next's shapes. */
void model_case_build(model_call *call, const model_case *c, int32_t device);

#endif /* SM70OPS_INTEGRATION_CLI_MODEL_SHAPES_H_ */
