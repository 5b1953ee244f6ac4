// QSA selected attention on SM70 (op 2): o[t,h] = softmax(sm_scale * q[t,h] . k[sel]) v[sel].
//
// One block = a tile of R adjacent rows of one request x one KV head. Its M = R x G MMA rows are
// the G query heads sharing the KV head for each row (R = M / G, at most 16), in MF 16-row WMMA
// fragments. Adjacent rows select mostly the same pages (the seed measured 82% overlap), so the
// block walks the union of the rows' pages once, and a larger M reuses each gathered token for
// more rows at the price of a larger union (row_fragments() says which M wins):
//   prologue  a bitmap of each row's selected pages (causally live only) and their union;
//   window    32 union pages at a time: each row's mask for each page, found by the page's rank
//             in the row's sorted list (popcounts of the row bitmap: no search), and the page's
//             physical page from the block table;
//   chunk     64 selected tokens of the window at a time (a token selected by any row): their
//             K rows gathered into shared memory, S = Q K^T (8 warps over the 4 x MF tiles of
//             S, split over D when fewer), per-row masks, fp32 online softmax, then their V rows
//             into the same buffer and O += P V (each warp owns D/8 columns of O in registers
//             for all M rows). K and V take turns in one buffer, which is what lets 64 tokens
//             fit a V100's shared memory at D 256: four barriers per 64 tokens. Software-
//             pipelined: V is fetched into registers while S runs, the next chunk's tokens are
//             resolved beside softmax and its K fetched while P V runs, so gathers stay hidden;
//   epilogue  O / l to fp16, lse = m + log l (natural log); an empty set gives 0 and -inf.
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

constexpr int kFrag = 16;  // WMMA m16n16k16
constexpr int kWarps = 8;  // S tiles (split over D when fewer than 8), O over columns
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 64;  // tokens per step: four key fragments
constexpr int kKeyFrags = kChunk / kFrag;
constexpr int kPage = SM70_QSA_ATTN_PAGE;
constexpr int kWindow = 32;   // union pages resolved per step: one per lane
constexpr int kMaxRows = 16;  // tile rows: one bit each in a token's row mask, bitmaps on chip
constexpr int kPageWords = SM70_QSA_ATTN_MAX_SEQ_LEN / kPage / 32;
constexpr int kPad = 8;  // halves: staggers rows over the banks
constexpr int kPLd = kChunk + kPad;
static_assert(kWarps % kKeyFrags == 0, "S: the warps split D when there are fewer tiles");

// MMA rows M = 16 x MF: tile rows x query heads of the KV head.
template <int D, int MF>
struct __align__(32) Smem {
  static constexpr int kM = kFrag * MF;
  __half q[kM][D + kPad];
  __half kv[kChunk][D + kPad];  // the chunk's K rows, then its V rows; the epilogue's O staging
  alignas(16) float s_part[kWarps][kFrag][kFrag];  // S tiles, or partial sums over slices of D
  __half p[kM][kPLd];
  float row_ids[kFrag][kFrag];  // element (r, c) = r: accumulator element -> MMA row
  uint32_t row_pages[kMaxRows][kPageWords];
  int32_t row_prefix[kMaxRows][kPageWords];  // row's pages before each word: list ranks
  uint32_t union_pages[kPageWords];
  int32_t union_prefix[kPageWords + 1];
  uint64_t win_mask[kWindow][kMaxRows];
  uint64_t win_or[kWindow];
  int32_t win_phys[kWindow];        // physical page of each window page; -1: reads as zeros
  int32_t win_prefix[kWindow + 1];  // tokens of the window's pages before each page
  int64_t tok_k[2][kChunk];         // element offset of the token's K row; -1: zero key
  int64_t tok_v[2][kChunk];         // [2]: this chunk's and the next one's
  alignas(16) uint32_t tok_rows[2][kChunk];  // bit r: tile row r attends to the token
  float m[kM];
  float l[kM];
  float alpha[kM];
  int32_t row_t[kMaxRows];
  int32_t row_len[kMaxRows];
};

static_assert(sizeof(Smem<256, 2>) <= kV100SmemBytes && sizeof(Smem<128, 2>) <= kV100SmemBytes,
              "a V100 block holds at most 96 KB");

using Tile = VarlenTile;

__device__ bool find_tile(const Params &p, int tile_rows, int slot, Tile *tile) {
  return varlen_find_tile(p.query_start_loc, p.requests, 0, p.rows, tile_rows, slot, tile);
}

__device__ int row_length(const Params &p, int r, int t) {
  return varlen_row_length(p.query_start_loc, p.seq_lens, p.max_seq_len, p.checked, r, t);
}

// Prologue: rows, Q (zeros for MMA rows out of use), softmax state.
template <int D, int MF>
__device__ void load_rows(const Params &p, const Tile &tile, int group, Smem<D, MF> &s) {
  const int kvh = blockIdx.y;
  if (threadIdx.x < kMaxRows) {
    const int r = threadIdx.x;
    s.row_t[r] = tile.row0 + r;
    s.row_len[r] = r < tile.rows ? row_length(p, tile.request, tile.row0 + r) : 0;
  }
  constexpr int kM = Smem<D, MF>::kM, kChunks = D / 8;
  for (int i = threadIdx.x; i < kM * kChunks; i += kThreads) {
    const int m = i / kChunks, c = i % kChunks, r = m / group, g = m % group;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < tile.rows) {
      const uint16_t *src = p.q + (int64_t)(tile.row0 + r) * p.q_row_stride +
                            (int64_t)(kvh * group + g) * p.q_head_stride;
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

// Prologue: each row's live selected pages as a bitmap (pages of the first sel_count entries,
// below the causal bound and the block table), their ranks, and the union.
template <int D, int MF>
__device__ void load_selection(const Params &p, const Tile &tile, Smem<D, MF> &s) {
  for (int i = threadIdx.x; i < kMaxRows * kPageWords; i += kThreads) (&s.row_pages[0][0])[i] = 0;
  __syncthreads();
  for (int r = 0; r < tile.rows; ++r) {
    const int t = s.row_t[r];
    const int live_pages = min((s.row_len[r] + kPage - 1) / kPage, p.max_pages);
    const int raw_count = p.sel_count[t];
    if (raw_count < 0 || raw_count > p.sel_width) {
      report_bad_index(p.checked, SM70_CHECKED_SEL_COUNT, t, raw_count, p.sel_width + 1ll);
    }
    const int count = min(max(raw_count, 0), p.sel_width);
    const int32_t *blocks = p.sel_blocks + (int64_t)t * p.sel_blocks_stride;
    for (int e = threadIdx.x; e < count; e += kThreads) {
      const int page = blocks[e];
      if (page < 0 || page >= p.max_pages) {
        report_bad_index(p.checked, SM70_CHECKED_SEL_PAGE, t, page, p.max_pages);
      }
      if (e > 0 && page <= blocks[e - 1]) {  // masks are found by rank: the list must ascend
        report_bad_index(p.checked, SM70_CHECKED_SEL_ORDER, t, page, blocks[e - 1]);
      }
      if (page >= 0 && page < live_pages) atomicOr(&s.row_pages[r][page / 32], 1u << (page % 32));
    }
  }
  __syncthreads();
  // Ranks: a warp scans one row's words (64 words = two per lane).
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  static_assert(kPageWords == 64, "two words per lane");
  for (int r = warp; r < kMaxRows; r += kWarps) {
    const int a = __popc(s.row_pages[r][2 * lane]), b = __popc(s.row_pages[r][2 * lane + 1]);
    const int before = warp_inclusive_scan(a + b) - (a + b);
    s.row_prefix[r][2 * lane] = before;
    s.row_prefix[r][2 * lane + 1] = before + a;
  }
  if (warp == 0) {
    uint32_t u0 = 0, u1 = 0;
    for (int r = 0; r < tile.rows; ++r)
      u0 |= s.row_pages[r][2 * lane], u1 |= s.row_pages[r][2 * lane + 1];
    s.union_pages[2 * lane] = u0;
    s.union_pages[2 * lane + 1] = u1;
    const int a = __popc(u0), b = __popc(u1);
    const int inclusive = warp_inclusive_scan(a + b);
    s.union_prefix[2 * lane] = inclusive - a - b;
    s.union_prefix[2 * lane + 1] = inclusive - b;
    if (lane == 31) s.union_prefix[kPageWords] = inclusive;
  }
  __syncthreads();
}

// The n-th set bit (0-based, n < popcount) of `bits`: halves, quarters, ... by popcount, six
// steps whatever n is (these run on the one warp the rest of the block waits for).
__device__ __forceinline__ int nth_bit(uint64_t bits, int n) {
  int pos = 0;
#pragma unroll
  for (int width = 32; width > 0; width /= 2) {
    const int below = __popcll(bits & ((1ull << width) - 1));
    if (n >= below) n -= below, bits >>= width, pos += width;
  }
  return pos;
}

// The page of union rank `rank`: the word holding it, then the bit within the word.
template <int D, int MF>
__device__ int union_page(int rank, const Smem<D, MF> &s) {
  const int word = last_at_most(s.union_prefix, kPageWords, rank);
  return word * 32 + nth_bit(s.union_pages[word], rank - s.union_prefix[word]);
}

// Tokens of `page` the row attends to: its mask, cut at the causal bound.
__device__ __forceinline__ uint64_t causal_mask(uint64_t mask, int page, int len) {
  const int live = len - page * kPage;
  return live >= kPage ? mask : live <= 0 ? 0 : mask & ((1ull << live) - 1);
}

// Window step: union pages [first, first + 32): each row's mask and the window's token counts.
template <int D, int MF>
__device__ void resolve_window(const Params &p, const Tile &tile, int first, int total,
                               Smem<D, MF> &s) {
  const int j = threadIdx.x % kWindow;
  const bool live = first + j < total;
  const int page = live ? union_page(first + j, s) : 0;
  for (int r = threadIdx.x / kWindow; r < kMaxRows; r += kThreads / kWindow) {
    uint64_t mask = 0;
    const uint32_t word = live && r < tile.rows ? s.row_pages[r][page / 32] : 0u;
    if (word >> (page % 32) & 1u) {
      const int rank = s.row_prefix[r][page / 32] + __popc(word & ((1u << (page % 32)) - 1));
      const uint64_t *masks = p.sel_mask + (int64_t)s.row_t[r] * p.sel_mask_stride;
      mask = causal_mask(masks[rank], page, s.row_len[r]);
    }
    s.win_mask[j][r] = mask;
  }
  __syncthreads();
  if (threadIdx.x < kWindow) {
    uint64_t any = 0;
    for (int r = 0; r < tile.rows; ++r) any |= s.win_mask[j][r];
    int phys = -1;
    if (any != 0) {
      phys = p.block_table[tile.request * p.block_table_stride + page];
      if (phys < 0 || phys >= p.num_pages) {  // an out-of-range page reads as zeros
        report_bad_index(p.checked, SM70_CHECKED_PAGE_ID, tile.row0, phys, p.num_pages);
        phys = -1;
      }
    }
    s.win_phys[j] = phys;
    s.win_or[j] = any;
    const int n = __popc((uint32_t)any) + __popc((uint32_t)(any >> 32));
    const int inclusive = warp_inclusive_scan(n);
    s.win_prefix[j] = inclusive - n;
    if (j == kWindow - 1) s.win_prefix[kWindow] = inclusive;
  }
  __syncthreads();
}

// Chunk step: the window's tokens [first, first + 64), their K/V rows and which rows want them,
// into token buffer `buf`.
template <int D, int MF>
__device__ void resolve_chunk(const Params &p, const Tile &tile, int first, int buf,
                              Smem<D, MF> &s) {
  if (threadIdx.x >= kChunk) return;
  const int idx = first + threadIdx.x;
  int64_t k_off = -1, v_off = -1;
  uint32_t rows = 0;
  if (idx < s.win_prefix[kWindow]) {
    const int i = last_at_most(s.win_prefix, kWindow, idx);  // the window page holding idx
    const int bit = nth_bit(s.win_or[i], idx - s.win_prefix[i]);
    for (int r = 0; r < tile.rows; ++r) rows |= (uint32_t)(s.win_mask[i][r] >> bit & 1u) << r;
    const int64_t page = s.win_phys[i];
    if (page >= 0) {
      const int kvh = blockIdx.y;
      k_off = page * p.k_page_stride + bit * p.k_token_stride + kvh * p.k_head_stride;
      v_off = page * p.v_page_stride + bit * p.v_token_stride + kvh * p.v_head_stride;
    }
  }
  s.tok_k[buf][threadIdx.x] = k_off;
  s.tok_v[buf][threadIdx.x] = v_off;
  s.tok_rows[buf][threadIdx.x] = rows;
}

// One chunk's K or V rows in flight: each thread's share, 16 bytes per load.
template <int D>
struct RowRegs {
  static constexpr int kChunks = D / 8;  // 16-byte pieces of a row
  static constexpr int kLoads = kChunk * kChunks / kThreads;
  static_assert(kLoads * kThreads == kChunk * kChunks, "whole rows per step");
  uint4 v[kLoads];
};

// Piece n of this thread: its token and 16-byte column.
template <int D>
__device__ __forceinline__ void row_piece(int n, int *tok, int *c) {
  constexpr int kChunks = RowRegs<D>::kChunks;
  const int i = threadIdx.x + n * kThreads;
  *tok = i / kChunks, *c = i % kChunks;
}

// Issues the loads of the chunk's K (or V) rows at `offsets` (zeros for missing tokens).
template <int D>
__device__ void fetch_rows(const uint16_t *cache, const int64_t (&offsets)[kChunk], RowRegs<D> &r) {
#pragma unroll
  for (int n = 0; n < RowRegs<D>::kLoads; ++n) {
    int tok, c;
    row_piece<D>(n, &tok, &c);
    const int64_t off = offsets[tok];
    r.v[n] = off < 0 ? make_uint4(0, 0, 0, 0) : reinterpret_cast<const uint4 *>(cache + off)[c];
  }
}

template <int D, int MF>
__device__ void store_rows(const RowRegs<D> &r, Smem<D, MF> &s) {
#pragma unroll
  for (int n = 0; n < RowRegs<D>::kLoads; ++n) {
    int tok, c;
    row_piece<D>(n, &tok, &c);
    *reinterpret_cast<uint4 *>(&s.kv[tok][c * 8]) = r.v[n];
  }
}

// Where the walk over the union stands: the window starting at union rank page0, and the chunk
// starting at its token tok0.
struct Cursor {
  int page0 = -kWindow;
  int tok0 = -kChunk;
  int tokens = 0;  // of the window
};

// Moves to the next chunk, resolving windows as they are entered; false past the last one.
// Block-uniform: every thread calls it with the same cursor.
template <int D, int MF>
__device__ bool advance(const Params &p, const Tile &tile, int total, Cursor &cur, Smem<D, MF> &s) {
  cur.tok0 += kChunk;
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

// S = Q K^T over the chunk: MF x 4 tiles of 16 x 16 (row fragment, key fragment); with fewer
// tiles than warps each tile's D is split and the slices summed in softmax. Two accumulators
// halve the chain of dependent MMAs.
template <int D, int MF>
__device__ void scores(Smem<D, MF> &s) {
  constexpr int kTiles = MF * kKeyFrags, kSplit = kWarps / kTiles, kSteps = D / kFrag / kSplit;
  static_assert(kWarps % kTiles == 0 && kSteps % 2 == 0, "every warp takes one tile slice");
  const int warp = threadIdx.x / 32, tile = warp % kTiles;
  const int row0 = (tile / kKeyFrags) * kFrag, key0 = (tile % kKeyFrags) * kFrag;
  const int k0 = (warp / kTiles) * kSteps * kFrag;
  Acc acc[2];
  wmma::fill_fragment(acc[0], 0.f);
  wmma::fill_fragment(acc[1], 0.f);
#pragma unroll
  for (int step = 0; step < kSteps; ++step) {
    const int k = k0 + step * kFrag;
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::col_major> b;
    wmma::load_matrix_sync(a, &s.q[row0][k], D + kPad);
    wmma::load_matrix_sync(b, &s.kv[key0][k], D + kPad);
    wmma::mma_sync(acc[step % 2], a, b, acc[step % 2]);
  }
#pragma unroll
  for (int i = 0; i < acc[0].num_elements; ++i) acc[0].x[i] += acc[1].x[i];
  wmma::store_matrix_sync(&s.s_part[warp][0][0], acc[0], kFrag, wmma::mem_row_major);
}

// Online softmax over the chunk: kLanes threads per MMA row m, kTokens adjacent tokens each (one
// key fragment's row: vector loads of S and of the token masks, one vector store of P). P (fp16)
// and the rescale factor of each row go to shared memory; the running max and sum advance.
template <int D, int MF>
__device__ void softmax(float sm_scale, int group, int buf, Smem<D, MF> &s) {
  constexpr int kM = Smem<D, MF>::kM, kTiles = MF * kKeyFrags, kLanes = kThreads / kM;
  constexpr int kTokens = kChunk / kLanes;
  static_assert(kLanes <= 32 && 32 % kLanes == 0, "a row's lanes sit in one warp");
  static_assert(kTokens == 4 || kTokens == 8, "float4 pieces of one fragment row; P stores");
  const int m = threadIdx.x / kLanes, j0 = (threadIdx.x % kLanes) * kTokens;
  const int row = m / group;  // the tile row of MMA row m: no mask bits past the tile's rows
  const int tile = (m / kFrag) * kKeyFrags + j0 / kFrag;
  float v[kTokens];
#pragma unroll
  for (int e = 0; e < kTokens; e += 4) {
    float4 dot = *reinterpret_cast<const float4 *>(&s.s_part[tile][m % kFrag][j0 % kFrag + e]);
#pragma unroll
    for (int w = tile + kTiles; w < kWarps; w += kTiles) {  // slices of D
      const float4 more =
          *reinterpret_cast<const float4 *>(&s.s_part[w][m % kFrag][j0 % kFrag + e]);
      dot.x += more.x, dot.y += more.y, dot.z += more.z, dot.w += more.w;
    }
    const uint4 want = *reinterpret_cast<const uint4 *>(&s.tok_rows[buf][j0 + e]);
    v[e] = want.x >> row & 1u ? dot.x * sm_scale : -INFINITY;
    v[e + 1] = want.y >> row & 1u ? dot.y * sm_scale : -INFINITY;
    v[e + 2] = want.z >> row & 1u ? dot.z * sm_scale : -INFINITY;
    v[e + 3] = want.w >> row & 1u ? dot.w * sm_scale : -INFINITY;
  }
  float top = -INFINITY;
#pragma unroll
  for (int e = 0; e < kTokens; ++e) top = fmaxf(top, v[e]);
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    top = fmaxf(top, __shfl_xor_sync(kFullMask, top, offset));
  const float m_old = s.m[m], m_new = fmaxf(m_old, top);
  const bool none = m_new == -INFINITY;  // nothing attended yet: avoid -inf - -inf
  float sum = 0.f;
  uint32_t p[kTokens / 2];
#pragma unroll
  for (int e = 0; e < kTokens; e += 2) {
    const float p0 = none ? 0.f : __expf(v[e] - m_new), p1 = none ? 0.f : __expf(v[e + 1] - m_new);
    sum += p0 + p1;
    p[e / 2] = pack_half2(p0, p1);
  }
  if constexpr (kTokens == 8) {
    *reinterpret_cast<uint4 *>(&s.p[m][j0]) = make_uint4(p[0], p[1], p[2], p[3]);
  } else {
    *reinterpret_cast<uint2 *>(&s.p[m][j0]) = make_uint2(p[0], p[1]);
  }
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(kFullMask, sum, offset);
  __syncwarp();  // every lane has read s.m[m] (m_old) before one lane updates it
  if (threadIdx.x % kLanes == 0) {
    const float alpha = none ? 1.f : __expf(m_old - m_new);
    s.alpha[m] = alpha;
    s.l[m] = s.l[m] * alpha + sum;
    s.m[m] = m_new;
  }
}

// This warp's D/8 columns of O for every row fragment: the accumulators a block holds.
template <int D, int MF>
struct OTile {
  static constexpr int kFrags = D / kFrag / kWarps;  // column fragments per warp
  Acc o[MF][kFrags];
};

// O = O * alpha[row] + P V.
template <int D, int MF>
__device__ void accumulate(Smem<D, MF> &s, const ElementRows &acc_rows, OTile<D, MF> &t) {
  constexpr int kFrags = OTile<D, MF>::kFrags;
  const int col0 = (threadIdx.x / 32) * kFrags * kFrag;
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
#pragma unroll
      for (int i = 0; i < t.o[mf][f].num_elements; ++i)
        t.o[mf][f].x[i] *= s.alpha[mf * kFrag + acc_rows.row[i]];
#pragma unroll
  for (int k = 0; k < kChunk; k += kFrag) {
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::row_major> b[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
      wmma::load_matrix_sync(b[f], &s.kv[k][col0 + f * kFrag], D + kPad);
#pragma unroll
    for (int mf = 0; mf < MF; ++mf) {
      wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major> a;
      wmma::load_matrix_sync(a, &s.p[mf * kFrag][k], kPLd);
#pragma unroll
      for (int f = 0; f < kFrags; ++f) wmma::mma_sync(t.o[mf][f], a, b[f], t.o[mf][f]);
    }
  }
}

// Epilogue: O / l through shared memory (the K/V buffer, one row fragment at a time) to
// fp16 rows, and lse.
template <int D, int MF>
__device__ void write_out(const Params &p, const Tile &tile, int group, Smem<D, MF> &s,
                          const OTile<D, MF> &t) {
  constexpr int kM = Smem<D, MF>::kM, kFrags = OTile<D, MF>::kFrags, kLd = D + 4;
  static_assert(sizeof(float) * kFrag * kLd <= sizeof(s.kv), "staging");
  float *stage = reinterpret_cast<float *>(&s.kv[0][0]);
  const int col0 = (threadIdx.x / 32) * kFrags * kFrag, kvh = blockIdx.y;
#pragma unroll
  for (int mf = 0; mf < MF; ++mf) {
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
      wmma::store_matrix_sync(stage + col0 + f * kFrag, t.o[mf][f], kLd, wmma::mem_row_major);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kFrag * (D / 2); i += kThreads) {
      const int row = i / (D / 2), m = mf * kFrag + row, d = (i % (D / 2)) * 2;
      const int r = m / group, g = m % group;
      if (r >= tile.rows) continue;
      const float inv = s.l[m] > 0.f ? 1.f / s.l[m] : 0.f;
      const __half2 v =
          __floats2half2_rn(stage[row * kLd + d] * inv, stage[row * kLd + d + 1] * inv);
      uint16_t *dst = p.out + (int64_t)(tile.row0 + r) * p.out_row_stride +
                      (int64_t)(kvh * group + g) * p.out_head_stride + d;
      *reinterpret_cast<__half2 *>(dst) = v;
    }
    __syncthreads();  // the stage is rewritten by the next row fragment
  }
  for (int m = threadIdx.x; p.lse != nullptr && m < kM; m += kThreads) {
    const int r = m / group, g = m % group;
    if (r < tile.rows) {
      p.lse[(int64_t)(tile.row0 + r) * p.lse_row_stride + kvh * group + g] =
          s.l[m] > 0.f ? s.m[m] + __logf(s.l[m]) : -INFINITY;
    }
  }
}

// Tile rows for MF row fragments and `group` query heads per KV head.
__host__ __device__ constexpr int tile_rows(int mf, int group) {
  return kFrag * mf / group < kMaxRows ? kFrag * mf / group : kMaxRows;
}

// Blocks per SM that shared memory allows (a V100 has 96 KB, a T4 64 KB, sm_86/89 100 KB, A100
// and H100 at least 164 KB), at most two: registers are capped to match, so they never bind first,
// and spill-free at 128 per thread where two blocks fit.
template <int D, int MF>
constexpr int blocks_per_sm() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 750
  constexpr int kSmemPerSm = kV100SmemBytes;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  constexpr int kSmemPerSm = 64 * 1024;
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890)
  constexpr int kSmemPerSm = 100 * 1024;
#else
  constexpr int kSmemPerSm = 164 * 1024;
#endif
  return kSmemPerSm / sizeof(Smem<D, MF>) >= 2 ? 2 : 1;
}

template <int D, int MF>
__global__ void __launch_bounds__(kThreads, blocks_per_sm<D, MF>())
    qsa_attn_wmma(const Params p, int group) {
  extern __shared__ __align__(32) unsigned char smem[];
  Smem<D, MF> &s = *reinterpret_cast<Smem<D, MF> *>(smem);
  Tile tile;
  if (!find_tile(p, tile_rows(MF, group), blockIdx.x, &tile)) return;
  // Prologue
  load_rows(p, tile, group, s);
  __syncthreads();
  load_selection(p, tile, s);
  const ElementRows acc_rows = element_rows(s);
  OTile<D, MF> o;
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int f = 0; f < OTile<D, MF>::kFrags; ++f) wmma::fill_fragment(o.o[mf][f], 0.f);
  // Main loop: windows of union pages, chunks of their tokens; K and V take turns in s.kv.
  const int total = s.union_prefix[kPageWords];
  Cursor cur;
  RowRegs<D> rows;
  bool live = advance(p, tile, total, cur, s);
  if (live) resolve_chunk(p, tile, cur.tok0, 0, s);
  __syncthreads();
  if (live) fetch_rows<D>(p.k_cache, s.tok_k[0], rows);
  for (int buf = 0; live; buf ^= 1) {
    store_rows(rows, s);  // K
    __syncthreads();
    fetch_rows<D>(p.v_cache, s.tok_v[buf], rows);  // in flight during S and softmax
    scores(s);
    __syncthreads();
    softmax(p.sm_scale, group, buf, s);
    const bool next = advance(p, tile, total, cur, s);
    if (next) resolve_chunk(p, tile, cur.tok0, buf ^ 1, s);
    store_rows(rows, s);  // V, over K: every warp has passed S
    __syncthreads();
    if (next) fetch_rows<D>(p.k_cache, s.tok_k[buf ^ 1], rows);  // in flight during P V
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

// The tile and the chunk, measured on the TP4 shape (G 4, D 256) with realistic selections (runs
// of 16, neighbour overlap 0.93/0.80/0.72), whole 8K/32K/128K prefills on an H200, ms, at two
// blocks per SM and at one (as on a V100, forced by reserving shared memory), 2026-11-30:
//                                                      two blocks        one block
//   MF 2, 32-token chunks, K and V side by side        1.64/9.38/44.0    2.40/14.0/65.9
//   MF 2, 64-token chunks, K and V taking turns        1.24/7.15/33.8    1.76/10.3/48.9
//   MF 1, 64-token chunks, K and V taking turns        1.33/7.25/32.9
//   MF 2, 64-token chunks, vector softmax (this one)   1.03/5.97/28.2    1.39/8.19/39.0
//   MF 1, the same                                     1.13/6.19/27.9    1.57/8.61/39.1
// 32 MMA rows (MF 2) wherever G fills them: a 16-row tile reuses each gathered token for more
// rows but its union grows with the context; at 32-token chunks it won only short prompts on a
// V100 and lost at 128K, and at 64 its Q and P no longer fit beside the chunk in 96 KB.
constexpr int row_fragments(int group) { return group == 1 ? 1 : 2; }

template <int D>
int32_t launch_dim(const Params &p, cudaStream_t stream) {
  return row_fragments(p.q_heads / p.kv_heads) == 1 ? launch<D, 1>(p, stream)
                                                    : launch<D, 2>(p, stream);
}

template <int D>
uint32_t smem_bytes(int32_t group) {
  return row_fragments(group) == 1 ? sizeof(Smem<D, 1>) : sizeof(Smem<D, 2>);
}

}  // namespace
}  // namespace sm70ops::qsa_attn

extern "C" uint32_t sm70_qsa_attn_smem_bytes(int32_t head_dim, int32_t group) {
  using namespace sm70ops::qsa_attn;
  return head_dim == 256 ? smem_bytes<256>(group) : smem_bytes<128>(group);
}

extern "C" int32_t sm70_qsa_attn_launch(const sm70_qsa_attn_params *p, void *stream) {
  using namespace sm70ops::qsa_attn;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return p->head_dim == 256 ? launch_dim<256>(*p, s) : launch_dim<128>(*p, s);
}
