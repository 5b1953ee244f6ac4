#include "integration/cli/model_shapes.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const model_table *model_table_get(void) {
  static model_table table;
  static int parsed; /* 1: table holds the file; -1: it did not parse */
  if (parsed == 0) {
    char error[512];
    model_case cases[kModelMaxCases];
    parsed = -1;
    if (!model_file_parse(kModelsText, kModelsTextBytes, kModelsPath, &table, error,
                          sizeof(error))) {
      fprintf(stderr, "sm70ops: %s\n", error);
    } else if (model_plan(&table, 0, 0, cases) < 0) {
      fprintf(stderr, "sm70ops: %s: [plan] gives more than the %d cases check holds\n", kModelsPath,
              kModelMaxCases);
    } else {
      parsed = 1;
    }
  }
  return parsed > 0 ? &table : NULL;
}

const model_shape *model_shapes_of(const model_table *t, const char *id) {
  for (int32_t i = 0; i < t->shape_count; ++i) {
    if (strcmp(t->ids[i], id) == 0) return &t->shapes[i];
  }
  return NULL;
}

model_shape model_shape_for(const model_shape *m, int32_t tp, int32_t page_size) {
  model_shape s = *m;
  s.q_heads = m->q_heads / tp;
  s.kv_heads = m->kv_heads / tp > 0 ? m->kv_heads / tp : 1;
  s.expert_inter = m->expert_inter / tp;
  s.tp = tp;
  s.page_size = page_size;
  return s;
}

/* Appends the cases of `op` over the TP sizes, page sizes and prompts that change it to out[0..n);
 * returns the new count, or -1 past kModelMaxCases (or when n is already -1). */
static int32_t add_cases(const model_table *t, sm70ops_op op, const model_case *only,
                         const model_case *by, model_case *out, int32_t n) {
  if (n < 0) return n;
  const model_list *tps = &t->tp_sizes, *pages = &t->page_sizes, *prompts = &t->prefill_lengths;
  for (int32_t i = 0; i < (by->tp ? tps->count : 1); ++i) {
    if (by->tp && only->tp != 0 && tps->values[i] != only->tp) continue;
    for (int32_t j = 0; j < (by->page_size ? pages->count : 1); ++j) {
      if (by->page_size && only->page_size != 0 && pages->values[j] != only->page_size) continue;
      for (int32_t k = 0; k < (by->prefill ? prompts->count : 1); ++k) {
        if (n == kModelMaxCases) return -1;
        out[n++] = (model_case){.op = op,
                                .tp = by->tp ? tps->values[i] : 0,
                                .page_size = by->page_size ? pages->values[j] : 0,
                                .prefill = by->prefill ? prompts->values[k] : 0};
      }
    }
  }
  return n;
}

int32_t model_plan(const model_table *t, int32_t tp, int32_t page_size,
                   model_case out[kModelMaxCases]) {
  /* Which of TP, page and prompt each op's descriptor depends on (nonzero: it does). */
  static const model_case kIndex = {.page_size = 1, .prefill = 1};
  static const model_case kAttn = {.tp = 1, .page_size = 1, .prefill = 1};
  static const model_case kMoe = {.tp = 1};
  const model_case only = {.tp = tp, .page_size = page_size};
  int32_t n = add_cases(t, SM70OPS_OP_QSA_INDEX, &only, &kIndex, out, 0);
  n = add_cases(t, SM70OPS_OP_QSA_ATTN, &only, &kAttn, out, n);
  n = add_cases(t, SM70OPS_OP_NVFP4_MOE, &only, &kMoe, out, n);
  return add_cases(t, SM70OPS_OP_NVFP4_MOE_PREPARE, &only, &kMoe, out, n);
}

/* The last chunk of the prompt, one request: its rows see the whole prompt so far. */
static sm70ops_desc_batch last_chunk(const model_shape *m, int32_t prefill) {
  const int64_t pages = ((int64_t)prefill + m->page_size - 1) / m->page_size;
  const int32_t rows = prefill < m->chunk_rows ? prefill : m->chunk_rows;
  return (sm70ops_desc_batch){
      .rows = rows,
      .requests = 1,
      .max_pages = pages,
      .cache_pages = pages,
      .page_size = m->page_size,
      .selected_pages = sm70ops_desc_selection_width(m->index_topk, m->compress_ratio, pages),
      .max_seq_len = prefill,
      .max_query_len = rows};
}

static void build_qsa_index(model_call *call, const model_shape *m, int32_t prefill,
                            int32_t device) {
  const sm70ops_desc_qsa_index_sizes s = {.batch = last_chunk(m, prefill),
                                          .heads = m->index_heads,
                                          .dim = m->index_dim,
                                          .topk = m->index_topk,
                                          .compress_ratio = m->compress_ratio,
                                          .with_weights = m->index_weighted,
                                          .with_selection = 1};
  sm70ops_desc_qsa_index(&call->desc, &s, device);
  snprintf(call->work, sizeof(call->work), "%lld x %d", (long long)s.batch.rows, prefill);
}

static void build_qsa_attn(model_call *call, const model_shape *m, int32_t prefill,
                           int32_t device) {
  const sm70ops_desc_qsa_attn_sizes s = {.batch = last_chunk(m, prefill),
                                         .q_heads = m->q_heads,
                                         .kv_heads = m->kv_heads,
                                         .head_dim = m->head_dim,
                                         .sm_scale = (float)(1.0 / sqrt(m->head_dim)),
                                         .with_gate = m->attention_gate};
  sm70ops_desc_qsa_attn(&call->desc, &s, device);
  /* The token set's bound: B tokens of whole groups and the tail's c - 1. */
  const int32_t set = m->index_topk + m->compress_ratio - 1;
  snprintf(call->work, sizeof(call->work), "%lld x %d", (long long)s.batch.rows,
           prefill < set ? prefill : set);
}

static sm70ops_desc_experts experts_of(const model_shape *m) {
  return (sm70ops_desc_experts){m->experts, m->hidden, m->expert_inter};
}

static void build_nvfp4_moe(model_call *call, const model_shape *m, int32_t prefill,
                            int32_t device) {
  const sm70ops_desc_nvfp4_moe_sizes s = {.experts = experts_of(m),
                                          .rows = prefill < m->chunk_rows ? prefill : m->chunk_rows,
                                          .topk = m->expert_topk};
  sm70ops_desc_nvfp4_moe(&call->desc, &s, device);
  snprintf(call->work, sizeof(call->work), "%lld x %d experts", (long long)s.rows, m->expert_topk);
}

/* `prepared` is left out, as a host asks at load: check then reports its size (output_bytes). */
static void build_nvfp4_moe_prepare(model_call *call, const model_shape *m, int32_t device) {
  const sm70ops_desc_nvfp4_moe_prepare_sizes s = {.experts = experts_of(m)};
  sm70ops_desc_nvfp4_moe_prepare(&call->desc, &s, device);
  snprintf(call->work, sizeof(call->work), "%d experts", m->experts);
}

void model_call_build(model_call *call, const model_shape *shape, sm70ops_op op, int32_t prefill,
                      int32_t device) {
  switch (op) {
    case SM70OPS_OP_QSA_INDEX:
      build_qsa_index(call, shape, prefill, device);
      break;
    case SM70OPS_OP_QSA_ATTN:
      build_qsa_attn(call, shape, prefill, device);
      break;
    case SM70OPS_OP_NVFP4_MOE:
      build_nvfp4_moe(call, shape, prefill, device);
      break;
    case SM70OPS_OP_NVFP4_MOE_PREPARE:
      build_nvfp4_moe_prepare(call, shape, device);
      break;
  }
}

void model_case_build(model_call *call, const model_table *t, const model_case *c, int32_t device) {
  /* The index at any TP (it is replicated), the MoE at any page size and on a full chunk. */
  const model_shape *served = model_shapes_of(t, "model");
  const model_shape s =
      model_shape_for(served, c->tp ? c->tp : 1, c->page_size ? c->page_size : served->page_size);
  model_call_build(call, &s, c->op, c->prefill ? c->prefill : served->chunk_rows, device);
}
