/* models.txt (integration/python/sm70ops/models.txt): the served model's shapes and what check
 * plans, the one copy both front ends read. The build embeds the file (BUILD: models_text); this
 * parser accepts exactly what the Python package's does (sm70ops/model.py, parse_models), with the
 * same messages, within the capacities below (which parse_models mirrors). */
#ifndef SM70OPS_INTEGRATION_CLI_MODEL_FILE_H_
#define SM70OPS_INTEGRATION_CLI_MODEL_FILE_H_

#include <stddef.h>
#include <stdint.h>

enum {
  kModelMaxShapes = 4, /* [shapes ID] sections */
  kModelMaxList = 8,   /* values of a [plan] list */
  kModelIdBytes = 16,
  kModelNameBytes = 48,
  kModelMaxLine = 256
};

/* A model's shapes: the whole model (TP 1), or one rank's (model_shape_for). */
typedef struct model_shape {
  char name[kModelNameBytes];
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
  int32_t shared_inter;   /* the fp16 shared expert's intermediate size (0: none) */
  int32_t max_context;    /* tokens */
  /* Not in the file's [shapes] sections: */
  int32_t tp;         /* 1 for the whole model */
  int32_t page_size;  /* P: tokens per KV page; the whole model's is the plan's largest */
  int32_t chunk_rows; /* vLLM's chunked prefill runs a prompt as chunks of at most these */
} model_shape;

typedef struct model_list {
  int32_t count;
  int32_t values[kModelMaxList];
} model_list;

/* The parsed file: [plan], then the [shapes ID] sections in the file's order. */
typedef struct model_table {
  model_list tp_sizes, page_sizes, prefill_lengths; /* what check plans, shortest prompt first */
  int32_t chunk_rows;
  int32_t shape_count;
  char ids[kModelMaxShapes][kModelIdBytes]; /* "model": the served model, which check plans */
  model_shape shapes[kModelMaxShapes];
} model_table;

/* Parses models.txt's `text_bytes` bytes at `text` (NUL-terminated after them) into *out. Returns
 * 1, or 0 with "PATH:LINE: what is wrong" (`path` as given) in `error` when the text departs from
 * the format (described at the file's top), holds a NUL byte or gives sizes check cannot plan. */
int model_file_parse(const char *text, size_t text_bytes, const char *path, model_table *out,
                     char *error, size_t error_bytes);

/* The file the build embedded, NUL-terminated, its length without that NUL, and its path in the
 * source tree (generated). */
extern const char kModelsText[];
extern const size_t kModelsTextBytes;
extern const char kModelsPath[];

#endif /* SM70OPS_INTEGRATION_CLI_MODEL_FILE_H_ */
