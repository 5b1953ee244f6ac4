/* sm70ops bench qsa_index: 1024 rows against 1K..128K tokens, and whole 8K/32K/128K prefills in
 * 1024-row chunks (the last rows of a prompt see the most keys). One request, the model's index
 * (a key per 4 tokens, weight-free, B 2048, 64-token pages) or, with --shapes v1, version 1's (a
 * key per token, per-head weights). */
#include <stdlib.h>
#include <string.h>

#include "integration/cli/bench.h"

enum { kRows = 1024, kMaxTokens = 131072, kPage = 64 };

/* The index's sizes in this run. */
typedef struct index_shape {
  int32_t heads, dim, ratio, topk, weighted;
  int64_t max_keys;  /* keys of the pool: one per `ratio` tokens */
  int64_t set_width; /* topk_idx columns: topk + ratio - 1 */
  int64_t max_nb;    /* sel_* columns at the longest context */
} index_shape;

typedef struct index_buffers {
  void *q, *w, *k, *qsl, *lens, *table, *topk, *blocks, *masks, *count, *workspace;
  uint64_t workspace_bytes;
} index_buffers;

typedef struct index_call {
  bench_views views;
  sm70ops_qsa_index_args args;
} index_call;

/* ops.md's sel_* width for contexts of `tokens`: min(B/c + 1, pages) (c = 1: min(B, pages)). */
static int64_t selection_width(const index_shape *s, int64_t tokens) {
  const int64_t pages = (tokens + kPage - 1) / kPage;
  const int64_t groups = s->topk / s->ratio + (s->ratio > 1);
  return pages < groups ? pages : groups;
}

static index_shape shape_of(const model_shape *m) {
  index_shape s = {.heads = m->index_heads,
                   .dim = m->index_dim,
                   .ratio = m->compress_ratio,
                   .topk = m->index_topk,
                   .weighted = m->index_weighted,
                   .max_keys = kMaxTokens / m->compress_ratio,
                   .set_width = m->index_topk + m->compress_ratio - 1};
  s.max_nb = selection_width(&s, kMaxTokens);
  return s;
}

/* Rows are the last `rows` of a `tokens`-token prompt. */
static void describe(index_call *c, const index_shape *s, const index_buffers *b, int rows,
                     int tokens) {
  const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
  const DLDataType u64 = {kDLUInt, 64, 1};
  const int64_t pages = (tokens + kPage - 1) / kPage, nb = selection_width(s, tokens);
  const int64_t pool_pages = kMaxTokens / kPage;
  sm70ops_qsa_index_args *a = &c->args;
  memset(a, 0, sizeof(*a));
  a->struct_size = sizeof(*a);
  a->topk = s->topk;
  a->compress_ratio = s->ratio;
  a->max_seq_len = tokens;
  a->max_query_len = rows;
  a->q = bench_view(&c->views, 0, b->q, f16, 3, (int64_t[]){rows, s->heads, s->dim});
  if (s->weighted) a->weights = bench_view(&c->views, 1, b->w, f32, 2, (int64_t[]){rows, s->heads});
  a->k_index =
      bench_view(&c->views, 2, b->k, f16, 3, (int64_t[]){pool_pages, kPage / s->ratio, s->dim});
  a->query_start_loc = bench_view(&c->views, 3, b->qsl, i32, 1, (int64_t[]){2});
  a->seq_lens = bench_view(&c->views, 4, b->lens, i32, 1, (int64_t[]){1});
  a->block_table = bench_view(&c->views, 5, b->table, i32, 2, (int64_t[]){1, pages});
  a->topk_idx = bench_view(&c->views, 6, b->topk, i32, 2, (int64_t[]){rows, s->set_width});
  a->sel_blocks = bench_view(&c->views, 7, b->blocks, i32, 2, (int64_t[]){rows, nb});
  a->sel_mask = bench_view(&c->views, 8, b->masks, u64, 2, (int64_t[]){rows, nb});
  a->sel_count = bench_view(&c->views, 9, b->count, i32, 1, (int64_t[]){rows});
}

static int fill_inputs(const index_shape *s, index_buffers *b) {
  const uint64_t q_n = (uint64_t)kRows * s->heads * s->dim, k_n = (uint64_t)s->max_keys * s->dim;
  const int32_t pages = kMaxTokens / kPage;
  uint16_t *halves = malloc((q_n > k_n ? q_n : k_n) * sizeof(uint16_t));
  float *w = malloc((uint64_t)kRows * s->heads * sizeof(float));
  int32_t *table = malloc(pages * sizeof(int32_t));
  int ok = halves && w && table;
  if (ok) {
    for (int32_t p = 0; p < pages; ++p) table[p] = (p * 7919) % pages;  // scattered pages
    bench_random_halves(halves, k_n, 11);
    ok = bench_upload(b->k, halves, k_n * 2);
    bench_random_halves(halves, q_n, 12);
    bench_random_floats(w, (uint64_t)kRows * s->heads, 13, -1.f, 1.f);
    ok = ok && bench_upload(b->q, halves, q_n * 2) &&
         bench_upload(b->w, w, (uint64_t)kRows * s->heads * 4) &&
         bench_upload(b->table, table, pages * 4);
  }
  free(halves);
  free(w);
  free(table);
  return ok;
}

static int alloc_buffers(const index_shape *s, index_buffers *b) {
  const uint64_t sizes[] = {(uint64_t)kRows * s->heads * s->dim * 2,
                            (uint64_t)kRows * s->heads * 4,
                            (uint64_t)s->max_keys * s->dim * 2,
                            8,
                            4,
                            (kMaxTokens / kPage) * 4,
                            (uint64_t)kRows * s->set_width * 4,
                            (uint64_t)kRows * s->max_nb * 4,
                            (uint64_t)kRows * s->max_nb * 8,
                            kRows * 4};
  void **slots[] = {&b->q,     &b->w,    &b->k,      &b->qsl,   &b->lens,
                    &b->table, &b->topk, &b->blocks, &b->masks, &b->count};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    if ((*slots[i] = bench_alloc(sizes[i])) == NULL) return 0;
  }
  return fill_inputs(s, b);
}

static void free_buffers(index_buffers *b) {
  void *all[] = {b->q,    b->w,      b->k,     b->qsl,   b->lens,     b->table,
                 b->topk, b->blocks, b->masks, b->count, b->workspace};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) bench_free(all[i]);
}

static bench_work index_work(const index_shape *s, int rows, int tokens) {
  double scored = 0;  // sum over rows of the complete groups each row sees
  for (int i = 0; i < rows; ++i) scored += (tokens - rows + i + 1) / s->ratio;
  const int64_t nb = selection_width(s, tokens);
  bench_work w = {.flops = scored * s->heads * s->dim * 2};
  w.bytes = (double)rows * s->heads * (s->dim * 2 + (s->weighted ? 4 : 0)) +
            (double)(tokens / s->ratio) * s->dim * 2 +
            (double)rows * (s->set_width * 4 + nb * 12 + 4);
  return w;
}

/* Times one call shape; < 0 when declined or failed (the reason is printed). */
static double time_call(const sm70ops_host *h, const index_shape *s, index_buffers *b, int rows,
                        int tokens, int reps) {
  const int32_t qsl[2] = {0, rows}, lens[1] = {tokens};
  if (!bench_upload(b->qsl, qsl, sizeof(qsl)) || !bench_upload(b->lens, lens, sizeof(lens)))
    return -1;
  index_call call;
  describe(&call, s, b, rows, tokens);
  sm70ops_decision d = {.struct_size = sizeof(d)};
  sm70ops_host_decide(h, SM70OPS_OP_QSA_INDEX, &call.args, &d);
  if (!d.accepted) {
    printf("  %d x %d: declined: %s\n", rows, tokens, d.message);
    return -1;
  }
  if (d.workspace_bytes > b->workspace_bytes) {
    bench_free(b->workspace);
    if ((b->workspace = bench_alloc(d.workspace_bytes)) == NULL) return -1;
    b->workspace_bytes = d.workspace_bytes;
  }
  return bench_time_execute(h, SM70OPS_OP_QSA_INDEX, &call.args, b->workspace, d.workspace_bytes, 2,
                            reps);
}

static void sweep(const sm70ops_host *h, const index_shape *s, index_buffers *b,
                  const bench_ceiling *device) {
  printf("qsa_index: %d rows (the last of the prompt) x tokens, B = %d, c = %d, %s\n", kRows,
         s->topk, s->ratio, s->weighted ? "per-head weights" : "weight-free");
  bench_print_header();
  for (int tokens = 1024; tokens <= kMaxTokens; tokens *= 2) {
    double ms = time_call(h, s, b, kRows, tokens, tokens >= 65536 ? 9 : 21);
    if (ms < 0) continue;
    char work[32];
    snprintf(work, sizeof(work), "%d x %d", kRows, tokens);
    bench_print_row("sweep", work, ms, index_work(s, kRows, tokens), device);
  }
}

static void prefills(const sm70ops_host *h, const index_shape *s, index_buffers *b,
                     const bench_ceiling *device) {
  static const int kPrompts[] = {8192, 32768, 131072};
  printf("qsa_index: whole prefills in %d-row chunks (sum of per-chunk medians)\n", kRows);
  bench_print_header();
  for (size_t i = 0; i < sizeof(kPrompts) / sizeof(kPrompts[0]); ++i) {
    double total = 0;
    bench_work work = {0, 0};
    for (int end = kRows; end <= kPrompts[i]; end += kRows) {
      double ms = time_call(h, s, b, kRows, end, 5);
      if (ms < 0) return;
      bench_work w = index_work(s, kRows, end);
      total += ms, work.flops += w.flops, work.bytes += w.bytes;
    }
    char label[32], what[32];
    snprintf(label, sizeof(label), "prefill %dK", kPrompts[i] / 1024);
    snprintf(what, sizeof(what), "%d chunks", kPrompts[i] / kRows);
    bench_print_row(label, what, total, work, device);
  }
}

int bench_qsa_index(const sm70ops_host *h, const bench_ceiling *device, const bench_options *o) {
  const index_shape s = shape_of(o->model);
  index_buffers b;
  memset(&b, 0, sizeof(b));
  int ok = alloc_buffers(&s, &b);
  if (ok) {
    sweep(h, &s, &b, device);
    prefills(h, &s, &b, device);
  }
  free_buffers(&b);
  return ok;
}
