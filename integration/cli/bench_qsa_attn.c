/* sm70ops bench qsa_attn: selected attention at the model's TP4 rank (ops.md v2: 6 query heads, 1
 * KV head, head dim 256, gated) on 64- and 16-token pages, over whole 8K/32K/128K prefills in
 * 8192-row chunks (sums of per-chunk medians).
 *
 * Selections are op 1's token sets: B = 2048 tokens, B/c groups of c = 4 tokens and the tail of
 * the incomplete group (every token while a row sees at most B/c groups). A row takes the B/16
 * best runs of 16 tokens, run j scoring base[j] + z_t[j] with z_t a unit-variance moving average
 * of noise over the last 32 rows: scores correlated along the rows, as the indexer's are, so
 * adjacent rows share about 70% of their pages at 128K (measured and printed). The same
 * generator as `python -m sm70ops bench qsa_attn` (integration/python/sm70ops/bench_attn.py).
 *
 * Besides the time and the floor, each prompt prints the K/V bytes a row tile gathers per row
 * (the union of its rows' tokens, once) for several tile heights, and the time those bytes take
 * at the device's copy bandwidth: the kernel's own tiles (check()'s message names their height)
 * and taller ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "integration/cli/bench.h"
#include "integration/cli/model_shapes.h"

enum { kTp = 4, kChunkRows = 8192, kMaxPrompt = 131072, kRun = 16, kWindow = 32 };
static const double kBaseWeight = 1.0;
static const int kPrompts[] = {8192, 32768, 131072};
static const int kPages[] = {64, 16};
enum { kPageCount = sizeof(kPages) / sizeof(kPages[0]) };
static const int kTileRows[] = {8, 16, 32, 64};
enum { kTileCount = sizeof(kTileRows) / sizeof(kTileRows[0]) };

/* The selection of consecutive rows of one prompt: run scores and their moving average. */
typedef struct selector {
  int runs;        /* complete runs of the prompt */
  int budget_runs; /* B / 16 */
  float *base;     /* [runs] */
  float *draws;    /* [kWindow][runs]: the last kWindow rows' noise, a ring */
  float *sum;      /* [runs]: the ring's sum */
  int next;        /* ring slot of the oldest row */
  uint32_t rng;
} selector;

static uint32_t next_random(uint32_t *state) {
  *state ^= *state << 13;
  *state ^= *state >> 17;
  *state ^= *state << 5;
  return *state;
}

/* About N(0, 1): four uniforms, centred and scaled to unit variance (Irwin-Hall). */
static float normal(uint32_t *state) {
  float s = 0;
  for (int i = 0; i < 4; ++i) s += (float)(next_random(state) >> 8) / 16777216.0f;
  return (s - 2.0f) * 1.7320508f;
}

static int selector_init(selector *s, int prompt, int budget) {
  s->runs = prompt / kRun, s->budget_runs = budget / kRun, s->next = 0, s->rng = 0x9e3779b9u;
  s->base = malloc((size_t)s->runs * sizeof(float));
  s->draws = malloc((size_t)kWindow * s->runs * sizeof(float));
  s->sum = calloc((size_t)s->runs, sizeof(float));
  if (!s->base || !s->draws || !s->sum) return 0;
  for (int j = 0; j < s->runs; ++j) s->base[j] = (float)kBaseWeight * normal(&s->rng);
  for (int i = 0; i < kWindow * s->runs; ++i) {
    s->draws[i] = normal(&s->rng);
    s->sum[i % s->runs] += s->draws[i];
  }
  return 1;
}

static void selector_free(selector *s) {
  free(s->base);
  free(s->draws);
  free(s->sum);
}

typedef struct scored {
  float score;
  int run;
} scored;

/* Puts the k highest of v[0..n) first (quickselect, Hoare partition). */
static void select_top(scored *v, int n, int k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const float pivot = v[lo + (hi - lo) / 2].score;
    int i = lo, j = hi;
    while (i <= j) {
      while (v[i].score > pivot) ++i;
      while (v[j].score < pivot) --j;
      if (i <= j) {
        const scored t = v[i];
        v[i++] = v[j], v[j--] = t;
      }
    }
    if (k - 1 <= j) {
      hi = j;
    } else if (k - 1 >= i) {
      lo = i;
    } else {
      return;
    }
  }
}

static int by_run(const void *a, const void *b) {
  return ((const scored *)a)->run - ((const scored *)b)->run;
}

/* The noise moves one row on; the row's best budget_runs runs among its first `complete` go to
 * best[], ascending (a row with fewer takes every token). `scratch` holds s->runs entries. */
static void next_runs(selector *s, int complete, scored *scratch, int *best) {
  float *oldest = s->draws + (size_t)s->next * s->runs;
  for (int j = 0; j < s->runs; ++j) {
    const float fresh = normal(&s->rng);
    s->sum[j] += fresh - oldest[j];
    oldest[j] = fresh;
  }
  s->next = (s->next + 1) % kWindow;
  if (complete < s->budget_runs) return; /* the row takes every token */
  const float scale = 1.0f / sqrtf((float)kWindow);
  for (int j = 0; j < complete; ++j) scratch[j] = (scored){s->base[j] + s->sum[j] * scale, j};
  select_top(scratch, complete, s->budget_runs);
  qsort(scratch, (size_t)s->budget_runs, sizeof(scored), by_run);
  for (int i = 0; i < s->budget_runs; ++i) best[i] = scratch[i].run;
}

/* One chunk's token sets, as runs (and the rule for rows that take every token). */
typedef struct chunk_sets {
  int end; /* the chunk's rows end at position end - 1 */
  int budget, ratio;
  int budget_runs;
  int *runs; /* [kChunkRows][budget_runs] */
} chunk_sets;

static void make_sets(selector *s, chunk_sets *c, scored *scratch) {
  for (int r = 0; r < kChunkRows; ++r) {
    const int len = c->end - kChunkRows + r + 1;
    next_runs(s, len / kRun < s->runs ? len / kRun : s->runs, scratch,
              c->runs + (size_t)r * c->budget_runs);
  }
}

/* Row r's selected pages and masks at page size `page`, ascending; returns the count. `dense`
 * holds a zeroed mask per page of the prompt and is zeroed again on return. */
static int expand_row(const chunk_sets *c, int r, int page, uint64_t *dense, int32_t *blocks,
                      uint64_t *masks) {
  const int len = c->end - kChunkRows + r + 1;
  const int pages = (len + page - 1) / page;
  if (len / c->ratio <= c->budget / c->ratio) { /* every token */
    for (int p = 0; p < pages; ++p) {
      const int live = len - p * page < page ? len - p * page : page;
      blocks[p] = p, masks[p] = live == 64 ? ~0ull : (1ull << live) - 1;
    }
    return pages;
  }
  const int *runs = c->runs + (size_t)r * c->budget_runs;
  for (int i = 0; i < c->budget_runs; ++i) {
    const int token = runs[i] * kRun;
    dense[token / page] |= 0xffffull << (token % page);
  }
  for (int token = len / c->ratio * c->ratio; token < len; ++token)
    dense[token / page] |= 1ull << (token % page);
  int n = 0;
  for (int p = 0; p < pages; ++p) {
    if (dense[p] != 0) blocks[n] = p, masks[n++] = dense[p], dense[p] = 0;
  }
  return n;
}

/* Host copies of one chunk's selection at one page size. */
typedef struct selection {
  int nb;
  int32_t *blocks; /* [kChunkRows][nb] */
  uint64_t *masks;
  int32_t *count;
} selection;

/* |A & B| / |A | B| of two sorted page lists. */
static double jaccard(const int32_t *a, int na, const int32_t *b, int nb) {
  int i = 0, j = 0, both = 0;
  while (i < na && j < nb) {
    if (a[i] == b[j])
      ++both, ++i, ++j;
    else if (a[i] < b[j])
      ++i;
    else
      ++j;
  }
  return na + nb - both > 0 ? (double)both / (na + nb - both) : 1.0;
}

/* Expands the chunk at `page`; returns the mean neighbour Jaccard, and in *tokens the selected
 * tokens summed over rows (the useful work). */
static double expand_chunk(const chunk_sets *c, int page, uint64_t *dense, selection *s,
                           double *tokens) {
  double overlap = 0;
  *tokens = 0;
  for (int r = 0; r < kChunkRows; ++r) {
    int32_t *blocks = s->blocks + (size_t)r * s->nb;
    uint64_t *masks = s->masks + (size_t)r * s->nb;
    s->count[r] = expand_row(c, r, page, dense, blocks, masks);
    for (int i = 0; i < s->count[r]; ++i) *tokens += __builtin_popcountll(masks[i]);
    if (r > 0) overlap += jaccard(blocks - s->nb, s->count[r - 1], blocks, s->count[r]);
  }
  return overlap / (kChunkRows - 1);
}

/* Tokens of the unions of the chunk's tiles of `rows` rows: what a kernel with such tiles
 * gathers. `dense` as in expand_row. */
static double gathered_tokens(const selection *s, int rows, uint64_t *dense) {
  double tokens = 0;
  for (int r0 = 0; r0 < kChunkRows; r0 += rows) {
    const int r1 = r0 + rows < kChunkRows ? r0 + rows : kChunkRows;
    for (int r = r0; r < r1; ++r) {
      for (int i = 0; i < s->count[r]; ++i)
        dense[s->blocks[(size_t)r * s->nb + i]] |= s->masks[(size_t)r * s->nb + i];
    }
    for (int r = r0; r < r1; ++r) {
      for (int i = 0; i < s->count[r]; ++i) {
        uint64_t *m = &dense[s->blocks[(size_t)r * s->nb + i]];
        tokens += __builtin_popcountll(*m);
        *m = 0;
      }
    }
  }
  return tokens;
}

/* Device buffers: q, gate, out, lse of a chunk, K and V of the longest prompt (viewed at each
 * page size), the block table, the selection. */
typedef struct attn_buffers {
  void *q, *gate, *k, *v, *qsl, *lens, *table, *blocks, *masks, *count, *out, *lse;
} attn_buffers;

typedef struct attn_call {
  bench_views views;
  sm70ops_qsa_attn_args args;
} attn_call;

static void describe(attn_call *c, const attn_buffers *b, const model_shape *m, int end, int nb) {
  const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
  const DLDataType u64 = {kDLUInt, 64, 1};
  const int64_t P = m->page_size, T = kChunkRows, Hq = m->q_heads, D = m->head_dim;
  const int64_t pages = (end + P - 1) / P;
  sm70ops_qsa_attn_args *a = &c->args;
  memset(a, 0, sizeof(*a));
  a->struct_size = sizeof(*a);
  a->sm_scale = (float)(1.0 / sqrt((double)D));
  a->max_seq_len = end;
  a->max_query_len = kChunkRows;
  a->q = bench_view(&c->views, 0, b->q, f16, 3, (int64_t[]){T, Hq, D});
  const int64_t kv_shape[] = {kMaxPrompt / P, P, m->kv_heads, D};
  a->k_cache = bench_view(&c->views, 1, b->k, f16, 4, kv_shape);
  a->v_cache = bench_view(&c->views, 2, b->v, f16, 4, kv_shape);
  a->query_start_loc = bench_view(&c->views, 3, b->qsl, i32, 1, (int64_t[]){2});
  a->seq_lens = bench_view(&c->views, 4, b->lens, i32, 1, (int64_t[]){1});
  a->block_table = bench_view(&c->views, 5, b->table, i32, 2, (int64_t[]){1, pages});
  a->sel_blocks = bench_view(&c->views, 6, b->blocks, i32, 2, (int64_t[]){T, nb});
  a->sel_mask = bench_view(&c->views, 7, b->masks, u64, 2, (int64_t[]){T, nb});
  a->sel_count = bench_view(&c->views, 8, b->count, i32, 1, (int64_t[]){T});
  a->out = bench_view(&c->views, 9, b->out, f16, 3, (int64_t[]){T, Hq, D});
  a->lse = bench_view(&c->views, 10, b->lse, f32, 2, (int64_t[]){T, Hq});
  if (m->attention_gate)
    a->gate = bench_view(&c->views, 11, b->gate, f16, 3, (int64_t[]){T, Hq, D});
}

static int alloc_buffers(attn_buffers *b, const model_shape *m, int nb) {
  const uint64_t heads = (uint64_t)kChunkRows * m->q_heads, kv = (uint64_t)kMaxPrompt * m->kv_heads;
  const uint64_t sel = (uint64_t)kChunkRows * nb;
  const uint64_t head_bytes = heads * m->head_dim * 2, kv_bytes = kv * m->head_dim * 2;
  const uint64_t sizes[] = {
      head_bytes,          head_bytes, kv_bytes, kv_bytes,       8,          4,
      kMaxPrompt / 16 * 4, sel * 4,    sel * 8,  kChunkRows * 4, head_bytes, heads * 4};
  void **slots[] = {&b->q,     &b->gate,   &b->k,     &b->v,     &b->qsl, &b->lens,
                    &b->table, &b->blocks, &b->masks, &b->count, &b->out, &b->lse};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    if ((*slots[i] = bench_alloc(sizes[i])) == NULL) return 0;
  }
  uint16_t *halves = malloc(kv * m->head_dim * 2);
  int ok = halves != NULL;
  if (ok) {
    bench_random_halves(halves, kv * m->head_dim, 21);
    ok = bench_upload(b->k, halves, kv * m->head_dim * 2);
    bench_random_halves(halves, kv * m->head_dim, 22);
    ok = ok && bench_upload(b->v, halves, kv * m->head_dim * 2);
    bench_random_halves(halves, heads * m->head_dim, 23);
    ok = ok && bench_upload(b->q, halves, heads * m->head_dim * 2);
    bench_random_halves(halves, heads * m->head_dim, 24);
    ok = ok && bench_upload(b->gate, halves, heads * m->head_dim * 2);
  }
  free(halves);
  return ok;
}

static void free_buffers(attn_buffers *b) {
  void *all[] = {b->q,     b->gate,   b->k,     b->v,     b->qsl, b->lens,
                 b->table, b->blocks, b->masks, b->count, b->out, b->lse};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) bench_free(all[i]);
}

/* A scattered block table of the chunk's pages at page size P. */
static int upload_table(const attn_buffers *b, int pages) {
  int32_t *table = malloc((size_t)pages * 4);
  if (table == NULL) return 0;
  for (int32_t p = 0; p < pages; ++p) table[p] = (int32_t)(((int64_t)p * 7919) % pages);
  const int ok = bench_upload(b->table, table, (uint64_t)pages * 4);
  free(table);
  return ok;
}

/* Useful work: QK and PV over the selected tokens; compulsory bytes: q, gate, out, lse, the
 * selection, and K and V of each page of the context once. */
static bench_work attn_work(const model_shape *m, double tokens, int end, int nb) {
  const double rows = kChunkRows, heads = rows * m->q_heads;
  bench_work w = {.flops = tokens * m->q_heads * m->head_dim * 2 * 2};
  const double io = heads * (m->head_dim * 2.0 * (m->attention_gate ? 3 : 2) + 4);
  w.bytes = io + rows * (nb * 12.0 + 4) + (double)end * m->kv_heads * m->head_dim * 4;
  return w;
}

/* Median ms of one chunk, or < 0; *tile_rows gets the height check() names (0 if none). */
static double time_chunk(const sm70ops_host *h, const attn_buffers *b, const model_shape *m,
                         const selection *s, int end, int *tile_rows) {
  const int32_t qsl[2] = {0, kChunkRows}, lens[1] = {end};
  const uint64_t sel = (uint64_t)kChunkRows * s->nb;
  if (!bench_upload(b->qsl, qsl, 8) || !bench_upload(b->lens, lens, 4) ||
      !upload_table(b, (end + m->page_size - 1) / m->page_size) ||
      !bench_upload(b->blocks, s->blocks, sel * 4) || !bench_upload(b->masks, s->masks, sel * 8) ||
      !bench_upload(b->count, s->count, kChunkRows * 4)) {
    return -1;
  }
  attn_call call;
  describe(&call, b, m, end, s->nb);
  sm70ops_decision d = {.struct_size = sizeof(d)};
  sm70ops_host_decide(h, SM70OPS_OP_QSA_ATTN, &call.args, &d);
  if (!d.accepted) {
    printf("  %d rows at %d, P %d: declined: %s\n", kChunkRows, end, m->page_size, d.message);
    return -1;
  }
  *tile_rows = atoi(d.message); /* "16-row tiles x 6 query heads" */
  return bench_time_execute(h, SM70OPS_OP_QSA_ATTN, &call.args, NULL, 0, 1, 3);
}

/* One prompt at one page size, summed over its chunks. */
typedef struct prompt_result {
  double ms, overlap, tokens[kTileCount];
  bench_work work;
  int tile_rows;
} prompt_result;

/* The K/V bytes each tile height gathers a row, the time they take at the device's copy
 * bandwidth and at a V100's, and the kernel's time against its own height's bytes. */
static void print_gathered(const model_shape *m, const prompt_result *r, int chunks,
                           const bench_ceiling *device) {
  const double token_bytes = (double)m->kv_heads * m->head_dim * 4;
  const double rows = (double)chunks * kChunkRows, v100 = bench_v100()->tbytes_s;
  const double rate = device != NULL ? device->tbytes_s : v100;
  printf("    floor %.1f KB a row; a tile of R rows gathers its rows' union once:\n",
         r->work.bytes / rows / 1e3);
  printf("    %6s %11s %9s at %.2f TB/s %9s at %.2f TB/s  kernel\n", "R", "K/V a row", "", rate, "",
         v100);
  for (int i = 0; i < kTileCount; ++i) {
    const double bytes = r->tokens[i] * token_bytes, ms = bytes / (rate * 1e12) * 1e3;
    printf("    %6d %8.1f KB %20.3f ms %20.3f ms", kTileRows[i], bytes / rows / 1e3, ms,
           bytes / (v100 * 1e12) * 1e3);
    if (kTileRows[i] == r->tile_rows) printf("  %.3f ms, %.2fx its bytes' time", r->ms, r->ms / ms);
    printf("\n");
  }
}

static int run_page(const sm70ops_host *h, const model_shape *m, const attn_buffers *b,
                    selection *s, const chunk_sets *c, uint64_t *dense, prompt_result *r) {
  double tokens = 0;
  r->overlap += expand_chunk(c, m->page_size, dense, s, &tokens);
  for (int i = 0; i < kTileCount; ++i) r->tokens[i] += gathered_tokens(s, kTileRows[i], dense);
  const double ms = time_chunk(h, b, m, s, c->end, &r->tile_rows);
  if (ms < 0) return 0;
  const bench_work w = attn_work(m, tokens, c->end, s->nb);
  r->ms += ms, r->work.flops += w.flops, r->work.bytes += w.bytes;
  return 1;
}

int bench_qsa_attn(const sm70ops_host *h, const bench_ceiling *device) {
  model_shape m[kPageCount];
  for (int i = 0; i < kPageCount; ++i)
    m[i] = model_shape_for(&kModelQwen38FlashNext, kTp, kPages[i]);
  const int budget = m[0].index_topk, ratio = m[0].compress_ratio;
  const int nb = budget / ratio + (ratio > 1);
  attn_buffers b;
  memset(&b, 0, sizeof(b));
  selection s = {.nb = nb};
  chunk_sets c = {.budget = budget, .ratio = ratio, .budget_runs = budget / kRun};
  s.blocks = malloc((size_t)kChunkRows * nb * 4), s.masks = malloc((size_t)kChunkRows * nb * 8);
  s.count = malloc(kChunkRows * 4);
  c.runs = malloc((size_t)kChunkRows * c.budget_runs * sizeof(int));
  uint64_t *dense = calloc(kMaxPrompt / 16, sizeof(uint64_t));
  scored *scratch = malloc((size_t)(kMaxPrompt / kRun) * sizeof(scored));
  int ok =
      s.blocks && s.masks && s.count && c.runs && dense && scratch && alloc_buffers(&b, &m[0], nb);
  printf(
      "qsa_attn: %s TP%d rank (%d query heads, %d KV head, D %d%s), %d-token sets of %d-token "
      "runs, whole prefills in %d-row chunks (sums of per-chunk medians)\n",
      m[0].name, kTp, m[0].q_heads, m[0].kv_heads, m[0].head_dim,
      m[0].attention_gate ? ", gated" : "", budget, kRun, kChunkRows);
  bench_print_header();
  for (size_t i = 0; ok && i < sizeof(kPrompts) / sizeof(kPrompts[0]); ++i) {
    selector sel;
    ok = selector_init(&sel, kPrompts[i], budget);
    prompt_result r[kPageCount];
    memset(r, 0, sizeof(r));
    for (c.end = kChunkRows; ok && c.end <= kPrompts[i]; c.end += kChunkRows) {
      make_sets(&sel, &c, scratch);
      for (int p = 0; ok && p < kPageCount; ++p) ok = run_page(h, &m[p], &b, &s, &c, dense, &r[p]);
    }
    selector_free(&sel);
    const int chunks = kPrompts[i] / kChunkRows;
    for (int p = 0; ok && p < kPageCount; ++p) {
      char label[32], what[48];
      snprintf(label, sizeof(label), "prefill %dK P%d", kPrompts[i] / 1024, kPages[p]);
      snprintf(what, sizeof(what), "Jaccard %.2f", r[p].overlap / chunks);
      bench_print_row(label, what, r[p].ms, r[p].work, device);
      print_gathered(&m[p], &r[p], chunks, device);
    }
  }
  free(s.blocks), free(s.masks), free(s.count), free(c.runs), free(dense), free(scratch);
  free_buffers(&b);
  return ok;
}
