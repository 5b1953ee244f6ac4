/* The served model, Qwen3.8-Flash-Next (shared/spec/ops.md v2, "The model the fast paths are
 * for"), from models.txt (model_file.h): its per-rank shapes, check's plan of them and the op
 * descriptors they give (integration/host/sm70ops_desc.h). The Python twin is
 * integration/python/sm70ops/model.py. */
#ifndef SM70OPS_INTEGRATION_CLI_MODEL_SHAPES_H_
#define SM70OPS_INTEGRATION_CLI_MODEL_SHAPES_H_

#include <stdint.h>

#include "abi/sm70ops.h"
#include "integration/cli/model_file.h"
#include "integration/host/sm70ops_desc.h"

/* The file the build embedded, parsed on first use. NULL, with why on stderr, when it breaks its
 * format or plans more than kModelMaxCases (model_file_test rules both out for the file a build
 * embeds). Not thread-safe on its first call. */
const model_table *model_table_get(void);

/* The shapes of section [shapes `id`]; NULL if the file has none. "model" is the served model. */
const model_shape *model_shapes_of(const model_table *t, const char *id);

/* `m` on one rank of `tp` with `page_size`-token pages: attention heads and every expert's
 * intermediate size split TP ways (a KV head replicated where TP exceeds Hkv); the indexer and
 * the router replicated. */
model_shape model_shape_for(const model_shape *m, int32_t tp, int32_t page_size);

/* One descriptor of check's plan; 0 where the op's descriptor does not depend on the value (the
 * index is replicated on every rank, the MoE knows no pages and sees full chunks). */
typedef struct model_case {
  sm70ops_op op;
  int32_t tp;
  int32_t page_size;
  int32_t prefill;
} model_case;

enum { kModelMaxCases = 64 };

/* check's cases of the served model op by op (restricted to one TP size or page size when
 * nonzero) into out[0..n); returns n, or -1 when the plan has more than kModelMaxCases. */
int32_t model_plan(const model_table *t, int32_t tp, int32_t page_size,
                   model_case out[kModelMaxCases]);

/* The descriptors of one call (data NULL) and, for people, its work: "rows x keys", e.g.
 * "8192 x 131072". It points into itself, so build it where it will be used and never copy it. */
typedef struct model_call {
  char work[48];
  sm70ops_desc_call desc;
} model_call;

/* Describes `op` on the last chunk of one `prefill`-token prompt (R = 1) under vLLM's chunked
 * prefill, with `shape`'s sizes (a rank's, from model_shape_for). */
void model_call_build(model_call *call, const model_shape *shape, sm70ops_op op, int32_t prefill,
                      int32_t device);

/* model_call_build for one of model_plan's cases, on the served model. */
void model_case_build(model_call *call, const model_table *t, const model_case *c, int32_t device);

#endif /* SM70OPS_INTEGRATION_CLI_MODEL_SHAPES_H_ */
