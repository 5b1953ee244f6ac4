// QSA selected attention on SM70 (op 2): o[t,h] = softmax(sm_scale * q[t,h] . k[sel]) v[sel],
// times sigmoid(gate[t,h]) when the call is gated.
//
// One block = a tile of R adjacent rows of one request x one KV head. Its M = 16 x MF MMA rows
// are the G query heads sharing the KV head for each row, R = min(M / G, 32): 48 or 96 rows,
// which the model's G 6 (TP4) and 12 (TP1) fill exactly. Adjacent rows select mostly the same
// tokens, so the block walks the union of its rows' pages once; a taller tile reuses each
// gathered token for more rows, at the price of a larger union that every MMA row pays for in
// S and P V (row_fragments() says which M runs):
//   prologue  the union of the rows' causally live selected pages, as a bitmap over every page a
//             262144-token context can have (16384 at P 16, 2 KB) with its prefix counts; no
//             per-row state but a cursor into the row's sorted page list;
//   window    16 union pages at a time: half a warp per row scatters the row's next entries
//             (those up to the window's last page) to their window slots, found by union rank,
//             and each page's physical page comes from the block table;
//   chunk     the window's tokens that any row selects, 64 (M 48) or 32 (M 96) at a time:
//             their K rows gathered into shared memory, S = Q K^T (12 warps, one 16 x 16 tile
//             each), per-row masks, fp32 online softmax writing P over S in place, then their
//             V rows into the same buffer and O += P V (the 12 warps as 3 row groups x 4
//             column groups of O, in registers). K and V take turns in one buffer, which is
//             what lets Q, a chunk and S fit a V100's 96 KB at D 256: four barriers a chunk.
//             Software-pipelined: V is fetched into registers while S runs, the next chunk's
//             tokens are resolved beside softmax and its K fetched while P V runs;
//   epilogue  O / l, times sigmoid(gate), to fp16; lse = m + log l (natural log, ungated); an
//             empty set gives 0 and -inf.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "kernels/common/block_scan.cuh"
#include "kernels/common/checked.cuh"
#include "kernels/common/half_bits.cuh"
#include "kernels/common/search.h"
#include "kernels/common/smem.cuh"
#include "kernels/common/varlen.cuh"
#include "kernels/qsa_attn/qsa_attn.h"

namespace sm70ops::qsa_attn {
namespace {

namespace wmma = nvcuda::wmma;
using Params = sm70_qsa_attn_params;

constexpr int kFrag = 16;   // WMMA m16n16k16
constexpr int kWarps = 12;  // S: one tile each; O: 3 row groups x 4 column groups
constexpr int kThreads = kWarps * 32;
constexpr int kRowGroups = 3, kColGroups = 4;
static_assert(kRowGroups * kColGroups == kWarps, "every warp owns one block of O");
constexpr int kMaxRows = 32;  // tile rows: one bit each in a token's row mask
static_assert(kMaxRows == 32, "a warp holds the per-row state: one lane a row");
constexpr int kWindow = 16;  // union pages resolved per step: half a warp per tile row
constexpr int kUnionWords = SM70_QSA_ATTN_MAX_SEQ_LEN / SM70_QSA_ATTN_MIN_PAGE / 32;
constexpr int kPad = 8;          // halves: staggers rows over the banks
constexpr int kPLd = 2 * kFrag;  // P (fp16) written over its S tile (fp32): halves a row

// The tile's shape for head dim D and MF 16-row fragments.
template <int D, int MF>
struct Shape {
  static_assert(MF % kRowGroups == 0 && kWarps % MF == 0, "whole S tiles and O blocks a warp");
  static constexpr int kM = kFrag * MF;             // MMA rows
  static constexpr int kKeyFrags = kWarps / MF;     // S = kM x kChunk: one tile per warp
  static constexpr int kChunk = kFrag * kKeyFrags;  // tokens a step
  static constexpr int kLanes = kThreads / kM;      // softmax: threads per MMA row
  static constexpr int kTokens = kChunk / kLanes;   // softmax: tokens per thread
  static_assert(kTokens == 8, "softmax: two float4 of S, one 16-byte store of P a thread");
};

template <int D, int MF>
struct __align__(32) Smem {
  using Sh = Shape<D, MF>;
  __half q[Sh::kM][D + kPad];
  __half kv[Sh::kChunk][D + kPad];  // the chunk's K rows, then its V rows; the epilogue's O staging
  alignas(32) float scores[MF][Sh::kKeyFrags][kFrag][kFrag];  // S tiles, then P over them
  float row_ids[kFrag][kFrag];  // element (r, c) = r: accumulator element -> MMA row
  uint32_t union_pages[kUnionWords];
  int32_t union_prefix[kUnionWords + 1];  // union pages before each word: their ranks
  uint64_t win_mask[kWindow][kMaxRows];   // each row's tokens of each window page
  uint64_t win_or[kWindow];
  int32_t win_page[kWindow];        // page of each window slot; -1 past the union
  int32_t win_phys[kWindow];        // physical page of each window page; -1: reads as zeros
  int32_t win_prefix[kWindow + 1];  // tokens of the window's pages before each page
  int64_t tok_k[2][Sh::kChunk];     // element offset of the token's K row; -1: zero key
  int64_t tok_v[2][Sh::kChunk];     // [2]: this chunk's and the next one's
  alignas(16) uint32_t tok_rows[2][Sh::kChunk];  // bit r: tile row r attends to the token
  float m[Sh::kM];
  float l[Sh::kM];
  float alpha[Sh::kM];
  int32_t row_len[kMaxRows];
  int32_t row_count[kMaxRows];      // sel_count, clamped to [0, NB]
  int32_t row_first[kMaxRows + 1];  // the tile's counted entries before each row's
  int32_t row_cursor[kMaxRows];     // the row's first sel_blocks entry not yet in a window
};

static_assert(sizeof(Smem<256, 3>) <= kV100SmemBytes && sizeof(Smem<256, 6>) <= kV100SmemBytes &&
                  sizeof(Smem<128, 3>) <= kV100SmemBytes && sizeof(Smem<128, 6>) <= kV100SmemBytes,
              "a V100 block holds at most 96 KB");

using Tile = VarlenTile;

__device__ bool find_tile(const Params &p, int tile_rows, int slot, Tile *tile) {
  return varlen_find_tile(p.query_start_loc, p.requests, 0, p.rows, tile_rows, slot, tile);
}

__device__ int row_length(const Params &p, int r, int t) {
  return varlen_row_length(p.query_start_loc, p.seq_lens, p.max_seq_len, p.checked, r, t);
}

// Pages a row with `len` keys can attend to: its causal bound, within the block table.
__device__ __forceinline__ int live_pages(const Params &p, int len) {
  return min((len + p.page_size - 1) / p.page_size, p.max_pages);
}

// Words of the union bitmap this call can touch (max_seq_len <= 262144, so at most 512).
__device__ __forceinline__ int union_words(const Params &p) {
  return (live_pages(p, p.max_seq_len) + 31) / 32;
}

// Prologue: the rows' lengths and selection counts, Q (zeros for MMA rows out of use), softmax
// state.
template <int D, int MF>
__device__ void load_rows(const Params &p, const Tile &tile, int group, Smem<D, MF> &s) {
  if (threadIdx.x < kMaxRows) {
    const int r = threadIdx.x, t = tile.row0 + r;
    int len = 0, count = 0;
    if (r < tile.rows) {
      len = row_length(p, tile.request, t);
      const int raw = p.sel_count[t];
      if (raw < 0 || raw > p.sel_width) {
        report_bad_index(p.checked, SM70_CHECKED_SEL_COUNT, t, raw, p.sel_width + 1ll);
      }
      count = min(max(raw, 0), p.sel_width);
    }
    s.row_len[r] = len;
    s.row_count[r] = count;
    s.row_cursor[r] = 0;
    const int inclusive = warp_inclusive_scan(count);  // kMaxRows threads: one warp
    s.row_first[r] = inclusive - count;
    if (r == kMaxRows - 1) s.row_first[kMaxRows] = inclusive;
  }
  constexpr int kM = Shape<D, MF>::kM, kPieces = D / 8;
  for (int i = threadIdx.x; i < kM * kPieces; i += kThreads) {
    const int m = i / kPieces, c = i % kPieces, r = m / group, g = m % group;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < tile.rows) {
      const uint16_t *src = p.q + (int64_t)(tile.row0 + r) * p.q_row_stride +
                            (int64_t)(blockIdx.y * group + g) * p.q_head_stride;
      v = reinterpret_cast<const uint4 *>(src)[c];
    }
    *reinterpret_cast<uint4 *>(&s.q[m][c * 8]) = v;
  }
  for (int i = threadIdx.x; i < kFrag * kFrag; i += kThreads)
    s.row_ids[i / kFrag][i % kFrag] = i / kFrag;
  for (int m = threadIdx.x; m < kM; m += kThreads) {
    s.m[m] = -INFINITY;
    s.l[m] = 0.f;
  }
}

// Checked mode's look at one counted sel_blocks entry.
__device__ void check_entry(const Params &p, const int32_t *blocks, int t, int e, int page) {
  if (page < 0 || page >= p.max_pages) {
    report_bad_index(p.checked, SM70_CHECKED_SEL_PAGE, t, page, p.max_pages);
  }
  if (e > 0 && page <= blocks[e - 1]) {  // windows take each row's entries in order
    report_bad_index(p.checked, SM70_CHECKED_SEL_ORDER, t, page, blocks[e - 1]);
  }
}

// Prologue: the union of the rows' live selected pages (counted entries inside the block table
// and the row's causal bound) as a bitmap, and each word's rank (one warp scans 16 words a lane).
// The tile's entries are taken as one list, so that each thread has several loads in flight.
template <int D, int MF>
__device__ void build_union(const Params &p, const Tile &tile, Smem<D, MF> &s) {
  const int words = union_words(p);
  for (int i = threadIdx.x; i < words; i += kThreads) s.union_pages[i] = 0;
  __syncthreads();
#pragma unroll 4
  for (int i = threadIdx.x; i < s.row_first[kMaxRows]; i += kThreads) {
    const int r = last_at_most(s.row_first, tile.rows, i), e = i - s.row_first[r];
    const int32_t *blocks = p.sel_blocks + (int64_t)(tile.row0 + r) * p.sel_blocks_stride;
    const int page = blocks[e];
    if (p.checked != nullptr) check_entry(p, blocks, tile.row0 + r, e, page);
    if (page >= 0 && page < live_pages(p, s.row_len[r])) {
      atomicOr(&s.union_pages[page / 32], 1u << (page % 32));
    }
  }
  __syncthreads();
  constexpr int kPerLane = kUnionWords / 32;
  if (threadIdx.x < 32) {
    const int w0 = threadIdx.x * kPerLane;
    int n = 0;
    for (int w = w0; w < min(w0 + kPerLane, words); ++w) n += __popc(s.union_pages[w]);
    int before = warp_inclusive_scan(n) - n;
    for (int w = w0; w < min(w0 + kPerLane, words); ++w) {
      s.union_prefix[w] = before;
      before += __popc(s.union_pages[w]);
    }
    if (threadIdx.x == 31) s.union_prefix[words] = before;
  }
  __syncthreads();
}

// The n-th set bit (0-based, n < popcount) of `bits`: halves, quarters, ... by popcount, six
// steps whatever n is (these run on the threads the rest of the block waits for).
__device__ __forceinline__ int nth_bit(uint64_t bits, int n) {
  int pos = 0;
#pragma unroll
  for (int width = 32; width > 0; width /= 2) {
    const int below = __popcll(bits & ((1ull << width) - 1));
    if (n >= below) n -= below, bits >>= width, pos += width;
  }
  return pos;
}

// Rank of a union page among the union's pages.
template <int D, int MF>
__device__ __forceinline__ int union_rank(int page, const Smem<D, MF> &s) {
  const uint32_t below = s.union_pages[page / 32] & ((1u << (page % 32)) - 1);
  return s.union_prefix[page / 32] + __popc(below);
}

// The page of union rank `rank`: the word holding it, then the bit within the word.
template <int D, int MF>
__device__ int union_page(int rank, int words, const Smem<D, MF> &s) {
  const int word = last_at_most(s.union_prefix, words, rank);
  return word * 32 + nth_bit(s.union_pages[word], rank - s.union_prefix[word]);
}

// Tokens of `page` a row with `len` keys attends to: mask bits below P (higher bits name no
// token of the page) and below the causal bound.
__device__ __forceinline__ uint64_t token_mask(uint64_t mask, int page, int len, int page_size) {
  const int live = min(len - page * page_size, page_size);
  return live >= 64 ? mask : live <= 0 ? 0 : mask & ((1ull << live) - 1);
}

// Window step, part 1: each row's next sel_blocks entries up to the window's last page go to
// their window slots. A row's list ascends and each of its live pages is a union page, so those
// entries follow its cursor, at most kWindow of them: half a warp per row, one entry a lane.
template <int D, int MF>
__device__ void scatter_masks(const Params &p, const Tile &tile, int first, int last_page,
                              Smem<D, MF> &s) {
  const int half = threadIdx.x / 16 % 2, lane = threadIdx.x % 16;
  for (int r0 = threadIdx.x / 32 * 2; r0 < tile.rows; r0 += 2 * kWarps) {  // warp-uniform
    const int r = r0 + half, e = r < tile.rows ? s.row_cursor[r] + lane : 0;
    const int64_t entry = (int64_t)(tile.row0 + r) * p.sel_blocks_stride + e;
    int page = -1;
    bool take = false;
    if (r < tile.rows && e < s.row_count[r]) {
      page = p.sel_blocks[entry];
      take = page <= last_page && page < live_pages(p, s.row_len[r]);
    }
    // The leading run of taken entries; what follows stays for later windows.
    const uint32_t taken = __ballot_sync(kFullMask, take) >> (16 * half) & 0xffffu;
    const int n = __ffs(~taken) - 1;
    if (lane < n && page >= 0) {
      const int slot = union_rank(page, s) - first;
      const uint64_t mask = p.sel_mask[(int64_t)(tile.row0 + r) * p.sel_mask_stride + e];
      if (slot >= 0 && slot < kWindow) {  // always, for sorted lists
        s.win_mask[slot][r] = token_mask(mask, page, s.row_len[r], p.page_size);
      }
    }
    if (lane == 0 && r < tile.rows) s.row_cursor[r] += n;
  }
}

// Window step, part 2 (one warp): the tokens any row wants of each window page, their counts'
// prefix, and the page's physical page.
template <int D, int MF>
__device__ void summarize_window(const Params &p, const Tile &tile, Smem<D, MF> &s) {
  const int j = threadIdx.x;
  uint64_t any = 0;
  if (j < kWindow) {
    for (int r = 0; r < tile.rows; ++r) any |= s.win_mask[j][r];
    int phys = -1;
    if (any != 0) {
      phys = p.block_table[tile.request * p.block_table_stride + s.win_page[j]];
      if (phys < 0 || phys >= p.num_pages) {  // an out-of-range page reads as zeros
        report_bad_index(p.checked, SM70_CHECKED_PAGE_ID, tile.row0, phys, p.num_pages);
        phys = -1;
      }
    }
    s.win_phys[j] = phys;
    s.win_or[j] = any;
  }
  const int n = __popcll(any);
  const int inclusive = warp_inclusive_scan(n);
  if (j < kWindow) s.win_prefix[j] = inclusive - n;
  if (j == kWindow - 1) s.win_prefix[kWindow] = inclusive;
}

// Window step: union pages [first, first + kWindow), each row's masks of them and the window's
// token counts.
template <int D, int MF>
__device__ void resolve_window(const Params &p, const Tile &tile, int first, int total,
                               Smem<D, MF> &s) {
  if (threadIdx.x < kWindow) {
    const int rank = first + threadIdx.x;
    s.win_page[threadIdx.x] = rank < total ? union_page(rank, union_words(p), s) : -1;
  }
  for (int i = threadIdx.x; i < kWindow * kMaxRows; i += kThreads) (&s.win_mask[0][0])[i] = 0;
  __syncthreads();
  scatter_masks(p, tile, first, s.win_page[min(kWindow, total - first) - 1], s);
  __syncthreads();
  if (threadIdx.x < 32) summarize_window(p, tile, s);
  __syncthreads();
}

// Chunk step: the window's tokens [first, first + kChunk), their K/V rows and which rows want
// them, into token buffer `buf`.
template <int D, int MF>
__device__ void resolve_chunk(const Params &p, const Tile &tile, int first, int buf,
                              Smem<D, MF> &s) {
  if (threadIdx.x >= Shape<D, MF>::kChunk) return;
  const int idx = first + threadIdx.x;
  int64_t k_off = -1, v_off = -1;
  uint32_t rows = 0;
  if (idx < s.win_prefix[kWindow]) {
    const int i = last_at_most(s.win_prefix, kWindow, idx);  // the window page holding idx
    const int bit = nth_bit(s.win_or[i], idx - s.win_prefix[i]);
    for (int r = 0; r < tile.rows; ++r) rows |= (uint32_t)(s.win_mask[i][r] >> bit & 1u) << r;
    const int64_t page = s.win_phys[i];
    if (page >= 0) {
      k_off = page * p.k_page_stride + bit * p.k_token_stride + blockIdx.y * p.k_head_stride;
      v_off = page * p.v_page_stride + bit * p.v_token_stride + blockIdx.y * p.v_head_stride;
    }
  }
  s.tok_k[buf][threadIdx.x] = k_off;
  s.tok_v[buf][threadIdx.x] = v_off;
  s.tok_rows[buf][threadIdx.x] = rows;
}

// The chunk's K (or V) rows in flight in registers: 16-byte pieces, consecutive threads along a
// row.
template <int D, int MF>
struct RowRegs {
  static constexpr int kPerRow = D / 8;
  static constexpr int kPieces = Shape<D, MF>::kChunk * kPerRow;
  static constexpr int kLoads = (kPieces + kThreads - 1) / kThreads;
  uint4 v[kLoads];
};

// Piece n of this thread, if it has one: its token and 16-byte column.
template <int D, int MF>
__device__ __forceinline__ bool row_piece(int n, int *tok, int *c) {
  using R = RowRegs<D, MF>;
  const int i = threadIdx.x + n * kThreads;
  *tok = i / R::kPerRow, *c = i % R::kPerRow;
  return R::kPieces % kThreads == 0 || i < R::kPieces;
}

// Issues the loads of the chunk's K (or V) rows at `offsets` (zeros for missing tokens).
template <int D, int MF>
__device__ void fetch_rows(const uint16_t *cache, const int64_t *offsets, RowRegs<D, MF> &r) {
#pragma unroll
  for (int n = 0; n < RowRegs<D, MF>::kLoads; ++n) {
    int tok, c;
    if (!row_piece<D, MF>(n, &tok, &c)) continue;
    const int64_t off = offsets[tok];
    r.v[n] = off < 0 ? make_uint4(0, 0, 0, 0) : reinterpret_cast<const uint4 *>(cache + off)[c];
  }
}

template <int D, int MF>
__device__ void store_rows(const RowRegs<D, MF> &r, Smem<D, MF> &s) {
#pragma unroll
  for (int n = 0; n < RowRegs<D, MF>::kLoads; ++n) {
    int tok, c;
    if (row_piece<D, MF>(n, &tok, &c)) *reinterpret_cast<uint4 *>(&s.kv[tok][c * 8]) = r.v[n];
  }
}

// Where the walk over the union stands: the window starting at union rank page0, and the chunk
// starting at its token tok0.
struct Cursor {
  int page0 = -kWindow;
  int tok0 = 0;
  int tokens = 0;  // of the window: the first advance() enters window 0
};

// Moves to the next chunk, resolving windows as they are entered; false past the last one.
// Block-uniform: every thread calls it with the same cursor.
template <int D, int MF>
__device__ bool advance(const Params &p, const Tile &tile, int total, Cursor &cur, Smem<D, MF> &s) {
  cur.tok0 += Shape<D, MF>::kChunk;
  while (cur.tok0 >= cur.tokens) {
    cur.page0 += kWindow;
    if (cur.page0 >= total) return false;
    resolve_window(p, tile, cur.page0, total, s);
    cur.tokens = s.win_prefix[kWindow];
    cur.tok0 = 0;
  }
  return true;
}

using Acc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// The MMA row of each accumulator element. WMMA leaves the layout to the implementation, but it
// is the same for every accumulator fragment, so a fragment loaded from s.row_ids tells it.
struct ElementRows {
  int row[Acc::num_elements];
};

template <int D, int MF>
__device__ ElementRows element_rows(const Smem<D, MF> &s) {
  Acc ids;
  wmma::load_matrix_sync(ids, &s.row_ids[0][0], kFrag, wmma::mem_row_major);
  ElementRows r;
#pragma unroll
  for (int i = 0; i < Acc::num_elements; ++i) r.row[i] = (int)ids.x[i];
  return r;
}

// S = Q K^T over the chunk: this warp's 16 x 16 tile (row fragment, key fragment) over all of
// D. Two accumulators halve the chain of dependent MMAs.
template <int D, int MF>
__device__ void scores(Smem<D, MF> &s) {
  constexpr int kKeyFrags = Shape<D, MF>::kKeyFrags;
  const int warp = threadIdx.x / 32, mf = warp / kKeyFrags, kf = warp % kKeyFrags;
  Acc acc[2];
  wmma::fill_fragment(acc[0], 0.f);
  wmma::fill_fragment(acc[1], 0.f);
#pragma unroll
  for (int step = 0; step < D / kFrag; ++step) {
    const int k = step * kFrag;
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::col_major> b;
    wmma::load_matrix_sync(a, &s.q[mf * kFrag][k], D + kPad);
    wmma::load_matrix_sync(b, &s.kv[kf * kFrag][k], D + kPad);
    wmma::mma_sync(acc[step % 2], a, b, acc[step % 2]);
  }
#pragma unroll
  for (int i = 0; i < acc[0].num_elements; ++i) acc[0].x[i] += acc[1].x[i];
  wmma::store_matrix_sync(&s.scores[mf][kf][0][0], acc[0], kFrag, wmma::mem_row_major);
}

// P tile (mf, kf): fp16, row-major with kPLd halves a row, over the S tile it came from.
template <int D, int MF>
__device__ __forceinline__ __half *p_tile(Smem<D, MF> &s, int mf, int kf) {
  return reinterpret_cast<__half *>(&s.scores[mf][kf][0][0]);
}

// Online softmax over the chunk: kLanes threads per MMA row m, 8 adjacent tokens each (half a
// key fragment's row: vector loads of S and of the token masks, one vector store of P). P (fp16)
// and the rescale factor of each row go to shared memory; the running max and sum advance.
template <int D, int MF>
__device__ void softmax(float sm_scale, int group, int tile_rows, int buf, Smem<D, MF> &s) {
  using Sh = Shape<D, MF>;
  const int m = threadIdx.x / Sh::kLanes, j0 = (threadIdx.x % Sh::kLanes) * Sh::kTokens;
  const int mf = m / kFrag, kf = j0 / kFrag, r = m % kFrag, c = j0 % kFrag;
  // The MMA row's tile row; rows past the tile (padding of M) attend to nothing.
  const uint32_t row_bit = m / group < tile_rows ? 1u << (m / group) : 0u;
  float v[8];
#pragma unroll
  for (int e = 0; e < 8; e += 4) {
    const float4 dot = *reinterpret_cast<const float4 *>(&s.scores[mf][kf][r][c + e]);
    const uint4 want = *reinterpret_cast<const uint4 *>(&s.tok_rows[buf][j0 + e]);
    v[e] = want.x & row_bit ? dot.x * sm_scale : -INFINITY;
    v[e + 1] = want.y & row_bit ? dot.y * sm_scale : -INFINITY;
    v[e + 2] = want.z & row_bit ? dot.z * sm_scale : -INFINITY;
    v[e + 3] = want.w & row_bit ? dot.w * sm_scale : -INFINITY;
  }
  float top = -INFINITY;
#pragma unroll
  for (int e = 0; e < 8; ++e) top = fmaxf(top, v[e]);
  for (int offset = Sh::kLanes / 2; offset > 0; offset /= 2)
    top = fmaxf(top, __shfl_xor_sync(kFullMask, top, offset));
  const float m_old = s.m[m], m_new = fmaxf(m_old, top);
  const bool none = m_new == -INFINITY;  // nothing attended yet: avoid -inf - -inf
  float sum = 0.f;
  uint32_t p[4];
#pragma unroll
  for (int e = 0; e < 8; e += 2) {
    const float p0 = none ? 0.f : __expf(v[e] - m_new), p1 = none ? 0.f : __expf(v[e + 1] - m_new);
    sum += p0 + p1;
    p[e / 2] = pack_half2(p0, p1);
  }
  // Every lane of the row has read its S and s.m[m] before P lands over S (a row's lanes sit in
  // one warp) and one lane updates the row's state.
  __syncwarp();
  *reinterpret_cast<uint4 *>(p_tile(s, mf, kf) + r * kPLd + c) = make_uint4(p[0], p[1], p[2], p[3]);
  for (int offset = Sh::kLanes / 2; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(kFullMask, sum, offset);
  if (threadIdx.x % Sh::kLanes == 0) {
    const float alpha = none ? 1.f : __expf(m_old - m_new);
    s.alpha[m] = alpha;
    s.l[m] = s.l[m] * alpha + sum;
    s.m[m] = m_new;
  }
}

// This warp's block of O: the row fragments of its row group x the D/4 columns of its column
// group, in registers.
template <int D, int MF>
struct OTile {
  static constexpr int kRowFrags = MF / kRowGroups;
  static constexpr int kColFrags = D / kFrag / kColGroups;
  Acc o[kRowFrags][kColFrags];
  __device__ static int row_group() { return threadIdx.x / 32 / kColGroups; }
  __device__ static int first_row_frag() { return row_group() * kRowFrags; }
  __device__ static int first_col() { return threadIdx.x / 32 % kColGroups * kColFrags * kFrag; }
};

// O = O * alpha[row] + P V.
template <int D, int MF>
__device__ void accumulate(Smem<D, MF> &s, const ElementRows &acc_rows, OTile<D, MF> &t) {
  using O = OTile<D, MF>;
  const int mf0 = O::first_row_frag(), col0 = O::first_col();
#pragma unroll
  for (int i = 0; i < O::kRowFrags; ++i)
#pragma unroll
    for (int f = 0; f < O::kColFrags; ++f)
#pragma unroll
      for (int e = 0; e < t.o[i][f].num_elements; ++e)
        t.o[i][f].x[e] *= s.alpha[(mf0 + i) * kFrag + acc_rows.row[e]];
#pragma unroll
  for (int kf = 0; kf < Shape<D, MF>::kKeyFrags; ++kf) {
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major> a[O::kRowFrags];
#pragma unroll
    for (int i = 0; i < O::kRowFrags; ++i)
      wmma::load_matrix_sync(a[i], p_tile(s, mf0 + i, kf), kPLd);
#pragma unroll
    for (int f = 0; f < O::kColFrags; ++f) {
      wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::row_major> b;
      wmma::load_matrix_sync(b, &s.kv[kf * kFrag][col0 + f * kFrag], D + kPad);
#pragma unroll
      for (int i = 0; i < O::kRowFrags; ++i) wmma::mma_sync(t.o[i][f], a[i], b, t.o[i][f]);
    }
  }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// Epilogue, one MMA row fragment from the stage: O / l, times sigmoid(gate), to fp16 rows.
template <int D>
__device__ void write_rows(const Params &p, const Tile &tile, int group, int mf, const float *l,
                           const float *stage, int ld) {
  for (int i = threadIdx.x; i < kFrag * (D / 2); i += kThreads) {
    const int row = i / (D / 2), m = mf * kFrag + row, d = (i % (D / 2)) * 2;
    const int r = m / group, h = blockIdx.y * group + m % group;
    if (r >= tile.rows) continue;
    const float inv = l[m] > 0.f ? 1.f / l[m] : 0.f;
    float2 o = make_float2(stage[row * ld + d] * inv, stage[row * ld + d + 1] * inv);
    const int64_t t = tile.row0 + r;
    if (p.gate != nullptr) {
      const float2 g = __half22float2(as_half2(*reinterpret_cast<const uint32_t *>(
          p.gate + t * p.gate_row_stride + h * p.gate_head_stride + d)));
      o.x *= sigmoid(g.x), o.y *= sigmoid(g.y);
    }
    uint16_t *dst = p.out + t * p.out_row_stride + h * p.out_head_stride + d;
    *reinterpret_cast<__half2 *>(dst) = __float22half2_rn(o);
  }
}

// Epilogue: O through shared memory (the K/V buffer, one row fragment at a time) to fp16 rows,
// and lse.
template <int D, int MF>
__device__ void write_out(const Params &p, const Tile &tile, int group, Smem<D, MF> &s,
                          const OTile<D, MF> &t) {
  using O = OTile<D, MF>;
  constexpr int kLd = D + 4;
  static_assert(sizeof(float) * kFrag * kLd <= sizeof(s.kv), "staging");
  float *stage = reinterpret_cast<float *>(&s.kv[0][0]);
  const int col0 = O::first_col();
  for (int g = 0; g < kRowGroups; ++g) {
#pragma unroll
    for (int i = 0; i < O::kRowFrags; ++i) {
      if (g == O::row_group()) {
#pragma unroll
        for (int f = 0; f < O::kColFrags; ++f) {
          wmma::store_matrix_sync(stage + col0 + f * kFrag, t.o[i][f], kLd, wmma::mem_row_major);
        }
      }
      __syncthreads();
      write_rows<D>(p, tile, group, g * O::kRowFrags + i, s.l, stage, kLd);
      __syncthreads();  // the stage is rewritten by the next row fragment
    }
  }
  for (int m = threadIdx.x; p.lse != nullptr && m < Shape<D, MF>::kM; m += kThreads) {
    const int r = m / group;
    if (r < tile.rows) {
      p.lse[(tile.row0 + r) * p.lse_row_stride + blockIdx.y * group + m % group] =
          s.l[m] > 0.f ? s.m[m] + __logf(s.l[m]) : -INFINITY;
    }
  }
}

// Tile rows for MF row fragments and `group` query heads per KV head.
__host__ __device__ constexpr int tile_rows(int mf, int group) {
  return kFrag * mf / group < kMaxRows ? kFrag * mf / group : kMaxRows;
}

template <int D, int MF>
__global__ void __launch_bounds__(kThreads, 1) qsa_attn_wmma(const Params p, int group) {
  extern __shared__ __align__(32) unsigned char smem[];
  Smem<D, MF> &s = *reinterpret_cast<Smem<D, MF> *>(smem);
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    varlen_check_starts(p.query_start_loc, p.requests, p.rows, p.checked);
  }
  Tile tile;
  if (!find_tile(p, tile_rows(MF, group), blockIdx.x, &tile)) return;
  // Prologue
  load_rows(p, tile, group, s);
  __syncthreads();
  build_union(p, tile, s);
  const ElementRows acc_rows = element_rows(s);
  OTile<D, MF> o;
#pragma unroll
  for (int i = 0; i < OTile<D, MF>::kRowFrags; ++i)
#pragma unroll
    for (int f = 0; f < OTile<D, MF>::kColFrags; ++f) wmma::fill_fragment(o.o[i][f], 0.f);
  // Main loop: windows of union pages, chunks of their tokens; K and V take turns in s.kv.
  const int total = s.union_prefix[union_words(p)];
  Cursor cur;
  RowRegs<D, MF> rows;
  bool live = advance(p, tile, total, cur, s);
  if (live) resolve_chunk(p, tile, cur.tok0, 0, s);
  __syncthreads();
  if (live) fetch_rows<D, MF>(p.k_cache, s.tok_k[0], rows);
  for (int buf = 0; live; buf ^= 1) {
    store_rows(rows, s);  // K
    __syncthreads();
    fetch_rows<D, MF>(p.v_cache, s.tok_v[buf], rows);  // in flight during S and softmax
    scores(s);
    __syncthreads();
    softmax(p.sm_scale, group, tile.rows, buf, s);
    const bool next = advance(p, tile, total, cur, s);
    if (next) resolve_chunk(p, tile, cur.tok0, buf ^ 1, s);
    store_rows(rows, s);  // V, over K: every warp has passed S
    __syncthreads();
    if (next) fetch_rows<D, MF>(p.k_cache, s.tok_k[buf ^ 1], rows);  // in flight during P V
    accumulate(s, acc_rows, o);
    __syncthreads();
    live = next;
  }
  // Epilogue
  write_out(p, tile, group, s, o);
}

template <int D, int MF>
int32_t launch(const Params &p, cudaStream_t stream) {
  const int group = p.q_heads / p.kv_heads;
  const dim3 grid(varlen_slots(p.rows, tile_rows(MF, group), p.requests), p.kv_heads);
  allow_dynamic_smem(qsa_attn_wmma<D, MF>, sizeof(Smem<D, MF>));
  qsa_attn_wmma<D, MF><<<grid, kThreads, sizeof(Smem<D, MF>), stream>>>(p, group);
  return static_cast<int32_t>(cudaGetLastError());
}

// MMA rows a tile holds, in 16-row fragments: 96 wherever `group` fills them with at most 32
// rows, else 48. A tile of 96 rows gathers its union once for twice the rows of one of 48 but
// computes S and P V over that larger union for every row (at 128K contexts, 16 rows' union is
// about 1.4x 8 rows'); the bench prints both heights' gathered bytes.
// SM70OPS_QSA_ATTN_MMA_ROWS (48 or 96) builds every group at one height, to measure them.
constexpr int row_fragments(int group) {
#ifdef SM70OPS_QSA_ATTN_MMA_ROWS
  static_assert(SM70OPS_QSA_ATTN_MMA_ROWS == 48 || SM70OPS_QSA_ATTN_MMA_ROWS == 96, "48 or 96");
  return (void)group, SM70OPS_QSA_ATTN_MMA_ROWS / kFrag;
#else
  return kFrag * 6 / group <= kMaxRows ? 6 : 3;
#endif
}

template <int D>
int32_t launch_dim(const sm70_qsa_attn_params *p, void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return row_fragments(p->q_heads / p->kv_heads) == 6 ? launch<D, 6>(*p, s) : launch<D, 3>(*p, s);
}

template <int D>
uint32_t smem_bytes(int32_t group) {
  return row_fragments(group) == 6 ? sizeof(Smem<D, 6>) : sizeof(Smem<D, 3>);
}

int32_t rows_of_tile(int32_t group) { return tile_rows(row_fragments(group), group); }

}  // namespace
}  // namespace sm70ops::qsa_attn

extern "C" const sm70_qsa_attn_kernel sm70_qsa_attn_d128 = {128, sm70ops::qsa_attn::smem_bytes<128>,
                                                            sm70ops::qsa_attn::rows_of_tile,
                                                            sm70ops::qsa_attn::launch_dim<128>};
extern "C" const sm70_qsa_attn_kernel sm70_qsa_attn_d256 = {256, sm70ops::qsa_attn::smem_bytes<256>,
                                                            sm70ops::qsa_attn::rows_of_tile,
                                                            sm70ops::qsa_attn::launch_dim<256>};
