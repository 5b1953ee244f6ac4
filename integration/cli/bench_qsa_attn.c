/* sm70ops bench qsa_attn: selected attention at the per-rank TP4 shape (4 query heads, 1 KV head,
 * head dim 256, top-2048 tokens) over whole 8K/32K/128K prefills in 8192-row chunks, with
 * realistic selections: runs of 16 tokens, each row keeping about 80% of its neighbour's runs
 * (the seed measured 82% page overlap between adjacent rows). The overlap is measured and printed.
 */
#include <stdlib.h>
#include <string.h>

#include "integration/cli/bench.h"

enum { kHq = 4, kHkv = 1, kDim = 256, kPage = 64, kTopk = 2048, kRun = 16 };
/* Rows per kernel tile at this shape: its 32 MMA rows (two row fragments wherever the query
 * heads per KV head fill them: row_fragments in kernels/qsa_attn/qsa_attn.cu) over the query
 * heads of one KV head. The kernel gathers the union of a tile's selections once, which is what
 * the gathered-bytes line reports. */
enum { kTileRows = 32 / (kHq / kHkv) };
/* Rows a kernel can attend together while their output stays in registers: 64 rows' fp32 O
 * (4 heads x D 256 x 4 B = 4 KB a row) fill an SM's 256 KB register file (V100 and H200 alike).
 * Over consecutive 64-row tiles, the unions of the tiles' selections are what such a kernel
 * gathers at the least (the bound line). */
enum { kBoundRows = 64 };
enum { kChunkRows = 8192, kMaxKeys = 131072, kMaxPages = kMaxKeys / kPage };

typedef struct attn_buffers {
  void *q, *k, *v, *qsl, *lens, *table, *blocks, *masks, *count, *out, *lse;
  int32_t *h_blocks; /* host selection of one chunk, [kChunkRows, kMaxPages] */
  uint64_t *h_masks;
  int32_t *h_count;
} attn_buffers;

/* A row's selected tokens as runs: run starts, kTopk / kRun of them. */
typedef struct selector {
  int32_t starts[kTopk / kRun];
  uint32_t rng;
} selector;

static uint32_t next_random(uint32_t *state) {
  *state ^= *state << 13;
  *state ^= *state >> 17;
  *state ^= *state << 5;
  return *state;
}

/* The next row's runs: a fifth of the neighbour's runs move to fresh random starts. */
static void drift(selector *s, int len, int fresh) {
  for (int i = 0; i < kTopk / kRun; ++i) {
    if (fresh || next_random(&s->rng) % 5 == 0 || s->starts[i] + kRun > len) {
      s->starts[i] = (int32_t)(next_random(&s->rng) % (uint32_t)(len - kRun + 1));
    }
  }
}

/* Expands one row's selection to sorted pages and masks; returns the page count. */
static int expand(const selector *s, int len, uint64_t *page_masks, int32_t *blocks,
                  uint64_t *masks) {
  const int pages = (len + kPage - 1) / kPage;
  memset(page_masks, 0, (size_t)pages * sizeof(uint64_t));
  if (len <= kTopk) {
    for (int j = 0; j < len; ++j) page_masks[j / kPage] |= 1ull << (j % kPage);
  } else {
    for (int i = 0; i < kTopk / kRun; ++i) {
      for (int j = s->starts[i]; j < s->starts[i] + kRun; ++j)
        page_masks[j / kPage] |= 1ull << (j % kPage);
    }
  }
  int n = 0;
  for (int p = 0; p < pages; ++p) {
    if (page_masks[p]) blocks[n] = p, masks[n++] = page_masks[p];
  }
  return n;
}

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

/* Tokens in the union of rows [r0, r0 + rows)'s selections; `pages` is scratch, all zero on
 * entry and on return. */
static double tile_union(const attn_buffers *b, int r0, int rows, uint64_t *pages) {
  double tokens = 0;
  for (int r = r0; r < r0 + rows; ++r) {
    for (int i = 0; i < b->h_count[r]; ++i)
      pages[b->h_blocks[(size_t)r * kMaxPages + i]] |= b->h_masks[(size_t)r * kMaxPages + i];
  }
  for (int r = r0; r < r0 + rows; ++r) {
    for (int i = 0; i < b->h_count[r]; ++i) {
      uint64_t *m = &pages[b->h_blocks[(size_t)r * kMaxPages + i]];
      tokens += __builtin_popcountll(*m);
      *m = 0;
    }
  }
  return tokens;
}

/* Tokens of the unions of the chunk's tiles of `rows` rows: what a kernel with such tiles
 * gathers. */
static double gathered_tokens(const attn_buffers *b, int rows, uint64_t *page_masks) {
  double tokens = 0;
  memset(page_masks, 0, kMaxPages * sizeof(uint64_t));
  for (int r0 = 0; r0 < kChunkRows; r0 += rows) tokens += tile_union(b, r0, rows, page_masks);
  return tokens;
}

/* Selections of rows [end - kChunkRows, end) of one prompt; returns the mean neighbour overlap,
 * and in *tokens the selected tokens summed over rows (the useful work). */
static double make_chunk(attn_buffers *b, selector *s, int end, uint64_t *page_masks,
                         double *tokens) {
  double overlap = 0;
  *tokens = 0;
  for (int r = 0; r < kChunkRows; ++r) {
    const int len = end - kChunkRows + r + 1;
    if (len > kTopk) drift(s, len, len == kTopk + 1);
    int32_t *blocks = b->h_blocks + (size_t)r * kMaxPages;
    const int n = expand(s, len, page_masks, blocks, b->h_masks + (size_t)r * kMaxPages);
    b->h_count[r] = n;
    for (int i = 0; i < n; ++i)
      *tokens += __builtin_popcountll(b->h_masks[(size_t)r * kMaxPages + i]);
    if (r > 0) overlap += jaccard(blocks - kMaxPages, b->h_count[r - 1], blocks, n);
  }
  return overlap / (kChunkRows - 1);
}

typedef struct attn_call {
  bench_views views;
  sm70ops_qsa_attn_args args;
} attn_call;

static void describe(attn_call *c, const attn_buffers *b, int end) {
  const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
  const DLDataType u64 = {kDLUInt, 64, 1};
  const int64_t pages = (end + kPage - 1) / kPage, T = kChunkRows, nb = kMaxPages;
  sm70ops_qsa_attn_args *a = &c->args;
  memset(a, 0, sizeof(*a));
  a->struct_size = sizeof(*a);
  a->sm_scale = 0.0625f; /* 1 / sqrt(256) */
  a->max_seq_len = end;
  a->max_query_len = kChunkRows;
  a->q = bench_view(&c->views, 0, b->q, f16, 3, (int64_t[]){T, kHq, kDim});
  const int64_t kv_shape[] = {kMaxPages, kPage, kHkv, kDim};
  a->k_cache = bench_view(&c->views, 1, b->k, f16, 4, kv_shape);
  a->v_cache = bench_view(&c->views, 2, b->v, f16, 4, kv_shape);
  a->query_start_loc = bench_view(&c->views, 3, b->qsl, i32, 1, (int64_t[]){2});
  a->seq_lens = bench_view(&c->views, 4, b->lens, i32, 1, (int64_t[]){1});
  a->block_table = bench_view(&c->views, 5, b->table, i32, 2, (int64_t[]){1, pages});
  a->sel_blocks = bench_view(&c->views, 6, b->blocks, i32, 2, (int64_t[]){T, nb});
  a->sel_mask = bench_view(&c->views, 7, b->masks, u64, 2, (int64_t[]){T, nb});
  a->sel_count = bench_view(&c->views, 8, b->count, i32, 1, (int64_t[]){T});
  a->out = bench_view(&c->views, 9, b->out, f16, 3, (int64_t[]){T, kHq, kDim});
  a->lse = bench_view(&c->views, 10, b->lse, f32, 2, (int64_t[]){T, kHq});
}

static int alloc_buffers(attn_buffers *b) {
  const uint64_t kv_bytes = (uint64_t)kMaxPages * kPage * kHkv * kDim * 2;
  const uint64_t sel = (uint64_t)kChunkRows * kMaxPages;
  const uint64_t sizes[] = {(uint64_t)kChunkRows * kHq * kDim * 2,
                            kv_bytes,
                            kv_bytes,
                            8,
                            4,
                            kMaxPages * 4,
                            sel * 4,
                            sel * 8,
                            kChunkRows * 4,
                            (uint64_t)kChunkRows * kHq * kDim * 2,
                            (uint64_t)kChunkRows * kHq * 4};
  void **slots[] = {&b->q,      &b->k,     &b->v,     &b->qsl, &b->lens, &b->table,
                    &b->blocks, &b->masks, &b->count, &b->out, &b->lse};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    if ((*slots[i] = bench_alloc(sizes[i])) == NULL) return 0;
  }
  b->h_blocks = malloc(sel * 4), b->h_masks = malloc(sel * 8), b->h_count = malloc(kChunkRows * 4);
  uint16_t *halves = malloc(kv_bytes);
  int32_t *table = malloc(kMaxPages * 4);
  int ok = b->h_blocks && b->h_masks && b->h_count && halves && table;
  if (ok) {
    for (int32_t p = 0; p < kMaxPages; ++p) table[p] = (p * 7919) % kMaxPages;
    bench_random_halves(halves, kv_bytes / 2, 21);
    ok = bench_upload(b->k, halves, kv_bytes);
    bench_random_halves(halves, kv_bytes / 2, 22);
    ok = ok && bench_upload(b->v, halves, kv_bytes);
    bench_random_halves(halves, (uint64_t)kChunkRows * kHq * kDim, 23);
    ok = ok && bench_upload(b->q, halves, (uint64_t)kChunkRows * kHq * kDim * 2) &&
         bench_upload(b->table, table, kMaxPages * 4);
  }
  free(halves);
  free(table);
  return ok;
}

static void free_buffers(attn_buffers *b) {
  void *all[] = {b->q,      b->k,     b->v,     b->qsl, b->lens, b->table,
                 b->blocks, b->masks, b->count, b->out, b->lse};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) bench_free(all[i]);
  free(b->h_blocks);
  free(b->h_masks);
  free(b->h_count);
}

/* Useful work: QK and PV over the selected tokens; compulsory bytes: q, out, lse, selection,
 * and K and V of each page of the context once. */
static bench_work attn_work(double tokens, int end) {
  bench_work w = {.flops = tokens * kHq * kDim * 2 * 2};
  const double sel = (double)kChunkRows * ((end + kPage - 1) / kPage) * 12;
  w.bytes = (double)kChunkRows * kHq * (kDim * 4 + 4) + sel + (double)end * kHkv * kDim * 4;
  return w;
}

static double time_chunk(const sm70ops_host *h, attn_buffers *b, int end) {
  const int32_t qsl[2] = {0, kChunkRows}, lens[1] = {end};
  const uint64_t sel = (uint64_t)kChunkRows * kMaxPages;
  if (!bench_upload(b->qsl, qsl, 8) || !bench_upload(b->lens, lens, 4) ||
      !bench_upload(b->blocks, b->h_blocks, sel * 4) ||
      !bench_upload(b->masks, b->h_masks, sel * 8) ||
      !bench_upload(b->count, b->h_count, kChunkRows * 4)) {
    return -1;
  }
  attn_call call;
  describe(&call, b, end);
  sm70ops_decision d = {.struct_size = sizeof(d)};
  sm70ops_host_decide(h, SM70OPS_OP_QSA_ATTN, &call.args, &d);
  if (!d.accepted) {
    printf("  %d rows at %d: declined: %s\n", kChunkRows, end, d.message);
    return -1;
  }
  return bench_time_execute(h, SM70OPS_OP_QSA_ATTN, &call.args, NULL, 0, 1, 3);
}

/* What the kernel's tiles gather (each tile's union once), and what 64-row tiles would: the
 * latter at copy bandwidth bounds any kernel that keeps its rows' output in registers, wherever
 * the context's K and V outgrow the L2 (at 128K, 128 MB a KV head: a V100 has 6 MB, an H200
 * 60). */
static void print_gathered(double tile_tokens, double bound_tokens, double ms, bench_work work,
                           const bench_ceiling *device) {
  const double token_bytes = kHkv * kDim * 4; /* its K and V rows, fp16 */
  const double tile_bytes = tile_tokens * token_bytes, bound_bytes = bound_tokens * token_bytes;
  printf(
      "    K/V gathered over %d-row tiles' unions: %.1f GB (%.1fx the floor's bytes: K and V of "
      "each page once, q, out, lse, selection), %.2f TB/s\n",
      kTileRows, tile_bytes / 1e9, tile_bytes / work.bytes, tile_bytes / (ms * 1e-3) / 1e12);
  if (device == NULL) return;
  const double bound_ms = bound_bytes / (device->tbytes_s * 1e12) * 1e3;
  printf(
      "    %d-row tiles (their fp32 output fills an SM's registers) would still gather %.1f GB: "
      "%.2f ms at %.2f TB/s, %.1fx the floor\n",
      kBoundRows, bound_bytes / 1e9, bound_ms, device->tbytes_s,
      bound_ms / bench_floor_ms(work, device));
}

int bench_qsa_attn(const sm70ops_host *h, const bench_ceiling *device) {
  static const int kPrompts[] = {8192, 32768, 131072};
  attn_buffers b;
  memset(&b, 0, sizeof(b));
  uint64_t *page_masks = malloc(kMaxPages * sizeof(uint64_t));
  int ok = page_masks != NULL && alloc_buffers(&b);
  printf(
      "qsa_attn: TP4 rank (4 query heads, 1 KV head, D 256), top-%d tokens in runs of %d, "
      "whole prefills in %d-row chunks (sum of per-chunk medians)\n",
      kTopk, kRun, kChunkRows);
  bench_print_header();
  for (size_t i = 0; ok && i < sizeof(kPrompts) / sizeof(kPrompts[0]); ++i) {
    selector s = {.rng = 0x9e3779b9u};
    double total = 0, overlap = 0, tile_tokens = 0, bound_tokens = 0;
    bench_work work = {0, 0};
    for (int end = kChunkRows; ok && end <= kPrompts[i]; end += kChunkRows) {
      double tokens = 0;
      overlap += make_chunk(&b, &s, end, page_masks, &tokens);
      tile_tokens += gathered_tokens(&b, kTileRows, page_masks);
      bound_tokens += gathered_tokens(&b, kBoundRows, page_masks);
      const double ms = time_chunk(h, &b, end);
      if (ms < 0) ok = 0;
      const bench_work w = attn_work(tokens, end);
      total += ms, work.flops += w.flops, work.bytes += w.bytes;
    }
    if (!ok) break;
    char label[32], what[48];
    snprintf(label, sizeof(label), "prefill %dK", kPrompts[i] / 1024);
    snprintf(what, sizeof(what), "overlap %.2f", overlap / (kPrompts[i] / kChunkRows));
    bench_print_row(label, what, total, work, device);
    print_gathered(tile_tokens, bound_tokens, total, work, device);
  }
  free(page_masks);
  free_buffers(&b);
  return ok;
}
