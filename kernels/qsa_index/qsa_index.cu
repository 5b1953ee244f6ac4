// QSA index on SM70: s[t,j] = sum_h w[t,h] * relu(q[t,h,:] . k[j,:]), exact top-K, expansion.
//
// Two kernels per chunk of rows:
//   score_wmma  one block = 16 rows of one request x a 2048-key range. The four heads' Q tiles stay
//               in shared memory; each warp streams 32-key groups of the paged keys straight from
//               global memory into WMMA B fragments (a group never crosses a page). One
//               accumulator per head and key fragment keeps the heads apart, so the ReLU and the
//               weighted head sum happen in registers; one fp32 score per key goes to the
//               workspace.
//   topk        one block per row: radix select (11, 8, 8, 5 bits of an order-preserving key)
//               straight from the scores, moving to shared memory as soon as the boundary bin
//               fits there; the selection is a bitmap in shared memory whose 64-bit words are the
//               pages' masks, so top-k indices and the page expansion come out of one ordered scan.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "kernels/common/block_scan.cuh"
#include "kernels/qsa_index/qsa_index.h"

namespace sm70ops {
namespace {

namespace wmma = nvcuda::wmma;
using Params = sm70_qsa_index_params;

constexpr int kHeads = SM70_QSA_INDEX_HEADS;
constexpr int kDim = SM70_QSA_INDEX_DIM;
constexpr int kPage = SM70_QSA_INDEX_PAGE;

// ---- Scorer configuration
constexpr int kFrag = 16;         // WMMA m16n16k16
constexpr int kTileRows = kFrag;  // rows of one request per block: the MMA's M
constexpr int kScoreWarps = 4;    // 128 threads: three blocks fit a V100 SM
constexpr int kKeysPerWarp = 32;  // two key fragments share each A fragment load
constexpr int kKeyFrags = kKeysPerWarp / kFrag;
constexpr int kKeysPerBlock = 2048;         // amortises the Q tile over 64 key groups
constexpr int kQLd = kDim + 8;              // halves; the pad staggers rows over the banks
constexpr int kStageLd = kKeysPerWarp + 4;  // floats, same reason
constexpr int kScoreAlign = 32;             // scores rows padded to whole key groups
static_assert(kPage % kKeysPerWarp == 0, "a warp's key group stays inside one page");

struct __align__(32) ScorerSmem {
  __half q[kHeads][kTileRows][kQLd];              // 17408 B
  float stage[kScoreWarps][kTileRows][kStageLd];  // 9216 B: one warp's scores, for whole-row stores
  float row_ids[kFrag][kFrag];                    // maps accumulator elements to their rows
  float w[kTileRows][kHeads];
  int32_t len[kTileRows];  // keys each row sees (causal bound)
};
static_assert(sizeof(ScorerSmem) <= 48 * 1024, "static shared memory");

// ---- Top-k configuration
constexpr int kTopkThreads = 512;
constexpr int kMaxWords = SM70_QSA_INDEX_MAX_SEQ_LEN / 32;  // selection bitmap, 32 keys a word
constexpr int kCandidates = 2048;  // boundary-bin keys that fit shared memory
constexpr int kLevels = 4;
__constant__ int kLevelBits[kLevels] = {11, 8, 8, 5};
constexpr int kMaxBins = 1 << 11;

struct TopkSmem {
  uint32_t bitmap[kMaxWords];
  uint32_t hist[kMaxBins];
  uint32_t cand_key[kCandidates];  // boundary-bin keys, in no particular order
  int32_t cand_pos[kCandidates];
  int scan[kTopkThreads / 32 + 1];
  uint32_t bin;
  uint32_t above;
  uint32_t cand_count;
};
static_assert(sizeof(TopkSmem) <= 48 * 1024, "static shared memory");

__device__ __forceinline__ int clamp_int(int v, int lo, int hi) { return min(max(v, lo), hi); }

// Keys row t of request r sees: pos + 1, bounded by max_seq_len so bad metadata cannot make a
// kernel read or write past what the host sized.
__device__ int row_length(const Params &p, int r, int t) {
  const int begin = p.query_start_loc[r];
  const int64_t pos =
      (int64_t)p.seq_lens[r] - (p.query_start_loc[r + 1] - begin) + (int64_t)(t - begin);
  return (int)min(max(pos + 1, (int64_t)0), (int64_t)p.max_seq_len);
}

// ------------------------------------------------------------------------------------------------
// Scorer

// Tile slots of request r within chunk [c0, c1) start at first_slot(r); a request of n rows owns
// at least ceil(n / 16) slots, so no tile spans two requests and the grid size is static.
__device__ int first_slot(const Params &p, int c0, int c1, int r) {
  return (clamp_int(p.query_start_loc[r], c0, c1) - c0) / kTileRows + r;
}

struct Tile {
  int request;
  int row0;  // first row (global index)
  int rows;
};

__device__ bool find_tile(const Params &p, int c0, int c1, int slot, Tile *tile) {
  int lo = 0, hi = p.requests - 1;  // the last request whose slots start at or before `slot`
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_slot(p, c0, c1, mid) <= slot)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int begin = clamp_int(p.query_start_loc[lo], c0, c1);
  const int end = clamp_int(p.query_start_loc[lo + 1], c0, c1);
  const int row0 = begin + (slot - first_slot(p, c0, c1, lo)) * kTileRows;
  if (row0 >= end) return false;
  *tile = {lo, row0, min(kTileRows, end - row0)};
  return true;
}

// Prologue: Q tile (zeros past the tile's rows), weights, row lengths, the row-id matrix.
__device__ void load_tile(const Params &p, const Tile &tile, ScorerSmem &s) {
  constexpr int kChunks = kDim / 8;  // 16-byte pieces of a head row
  for (int i = threadIdx.x; i < kHeads * kTileRows * kChunks; i += blockDim.x) {
    const int h = i / (kTileRows * kChunks), row = (i / kChunks) % kTileRows, c = i % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row < tile.rows) {
      const uint16_t *src = p.q + (tile.row0 + row) * p.q_row_stride + h * p.q_head_stride;
      v = reinterpret_cast<const uint4 *>(src)[c];
    }
    *reinterpret_cast<uint4 *>(&s.q[h][row][c * 8]) = v;
  }
  for (int i = threadIdx.x; i < kTileRows * kHeads; i += blockDim.x) {
    const int row = i / kHeads, h = i % kHeads;
    s.w[row][h] = row < tile.rows ? p.weights[(tile.row0 + row) * p.weights_row_stride + h] : 0.f;
  }
  for (int i = threadIdx.x; i < kFrag * kFrag; i += blockDim.x)
    s.row_ids[i / kFrag][i % kFrag] = i / kFrag;
  if (threadIdx.x < kTileRows) {
    const int row = threadIdx.x;
    s.len[row] = row < tile.rows ? row_length(p, tile.request, tile.row0 + row) : 0;
  }
}

// Keys key0 .. key0+31 of request r (one page), or nullptr when the page id is out of range.
__device__ const __half *key_group(const Params &p, int r, int key0) {
  const int page = p.block_table[r * p.block_table_stride + key0 / kPage];
  if (page < 0 || page >= p.num_pages) return nullptr;
  const uint16_t *k = p.k_index + page * p.k_page_stride + (key0 % kPage) * p.k_token_stride;
  return reinterpret_cast<const __half *>(k);
}

using Acc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

__device__ void score_group(const ScorerSmem &s, const __half *keys, int64_t ld,
                            Acc (&acc)[kHeads][kKeyFrags]) {
#pragma unroll
  for (int h = 0; h < kHeads; ++h)
#pragma unroll
    for (int f = 0; f < kKeyFrags; ++f) wmma::fill_fragment(acc[h][f], 0.f);
  if (keys == nullptr) return;  // an out-of-range page reads as zero keys
#pragma unroll 2
  for (int k = 0; k < kDim; k += kFrag) {
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::col_major> b[kKeyFrags];
#pragma unroll
    for (int f = 0; f < kKeyFrags; ++f) wmma::load_matrix_sync(b[f], keys + f * kFrag * ld + k, ld);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major> a;
      wmma::load_matrix_sync(a, &s.q[h][0][k], kQLd);
#pragma unroll
      for (int f = 0; f < kKeyFrags; ++f) wmma::mma_sync(acc[h][f], a, b[f], acc[h][f]);
    }
  }
}

// Epilogue: sum_h w[row,h] * relu(acc_h) per element (row from the row-id fragment, whose layout
// equals the accumulators'), staged per warp, then whole 128-byte rows to the workspace.
__device__ void store_group(ScorerSmem &s, const Acc &ids, const Acc (&acc)[kHeads][kKeyFrags],
                            float *out, int64_t ld, int rows) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int f = 0; f < kKeyFrags; ++f) {
    Acc sum;
#pragma unroll
    for (int i = 0; i < sum.num_elements; ++i) {
      const int row = (int)ids.x[i];
      float v = 0.f;
#pragma unroll
      for (int h = 0; h < kHeads; ++h) v += s.w[row][h] * fmaxf(acc[h][f].x[i], 0.f);
      sum.x[i] = v;
    }
    wmma::store_matrix_sync(&s.stage[warp][0][f * kFrag], sum, kStageLd, wmma::mem_row_major);
  }
  __syncwarp();
  for (int row = 0; row < rows; ++row) out[row * ld + lane] = s.stage[warp][row][lane];
  __syncwarp();
}

__global__ void __launch_bounds__(kScoreWarps * 32)
    qsa_index_score_wmma(const Params p, int c0, int c1, float *scores, int64_t ld) {
  __shared__ ScorerSmem s;
  Tile tile;
  if (!find_tile(p, c0, c1, blockIdx.x, &tile)) return;
  load_tile(p, tile, s);
  __syncthreads();
  int tile_len = 0;
  for (int row = 0; row < kTileRows; ++row) tile_len = max(tile_len, s.len[row]);
  const int key_begin = blockIdx.y * kKeysPerBlock;
  const int key_end = min(key_begin + kKeysPerBlock, tile_len);

  Acc ids;
  wmma::load_matrix_sync(ids, &s.row_ids[0][0], kFrag, wmma::mem_row_major);
  float *out = scores + (int64_t)(tile.row0 - c0) * ld;
  const int warp = threadIdx.x / 32;
  for (int key0 = key_begin + warp * kKeysPerWarp; key0 < key_end;
       key0 += kScoreWarps * kKeysPerWarp) {
    Acc acc[kHeads][kKeyFrags];
    score_group(s, key_group(p, tile.request, key0), p.k_token_stride, acc);
    store_group(s, ids, acc, out + key0, ld, tile.rows);
  }
}

// ------------------------------------------------------------------------------------------------
// Top-k

// Larger float -> larger unsigned key, so radix digits rank scores.
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The selection so far: keys whose top `consumed` bits equal `prefix` are still undecided, and
// `need` of them are to be taken.
struct Radix {
  uint32_t prefix;
  int consumed;
  int need;
};

__device__ __forceinline__ bool matches(uint32_t key, const Radix &r) {
  return r.consumed == 0 || (key >> (32 - r.consumed)) == r.prefix;
}

__device__ __forceinline__ uint32_t digit(uint32_t key, int consumed, int width) {
  return (key >> (32 - consumed - width)) & ((1u << width) - 1);
}

// The row's scores in the workspace, or the candidates in shared memory: both in position order.
struct RowKeys {
  const float *row;
  int n;
  __device__ uint32_t key(int i) const { return order_key(row[i]); }
};

struct CandidateKeys {
  const uint32_t *keys;
  const int32_t *positions;
  int n;
  __device__ uint32_t key(int i) const { return keys[i]; }
  __device__ int pos(int i) const { return positions[i]; }
};

// Adds `count` lanes' worth of `bin` once per distinct bin of the warp: scores crowd into few
// bins, and one shared atomic per lane would serialise on them.
__device__ __forceinline__ void warp_histogram_add(bool live, uint32_t bin, uint32_t *hist) {
  const unsigned active = __ballot_sync(kFullMask, live);
  if (!live) return;
  const unsigned peers = __match_any_sync(active, bin);
  if ((threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
}

__device__ void clear_histogram(int width, TopkSmem &s) {
  for (int b = threadIdx.x; b < (1 << width); b += kTopkThreads) s.hist[b] = 0;
  __syncthreads();
}

// Positions the row passes visit per step: kLoads per thread, issued before any is used.
constexpr int kLoads = 4;
constexpr int kStep = kLoads * kTopkThreads;

__device__ void row_histogram(const RowKeys &keys, const Radix &r, int width, TopkSmem &s) {
  clear_histogram(width, s);
  for (int base = 0; base < keys.n; base += kStep) {
    float v[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int i = base + j * kTopkThreads + threadIdx.x;
      v[j] = i < keys.n ? keys.row[i] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const uint32_t k = order_key(v[j]);
      const bool live = base + j * kTopkThreads + (int)threadIdx.x < keys.n && matches(k, r);
      warp_histogram_add(live, digit(k, r.consumed, width), s.hist);
    }
  }
  __syncthreads();
}

__device__ void candidate_histogram(const CandidateKeys &keys, const Radix &r, int width,
                                    TopkSmem &s) {
  clear_histogram(width, s);
  for (int i = threadIdx.x; i < keys.n; i += kTopkThreads) {
    const uint32_t k = keys.key(i);
    if (matches(k, r)) atomicAdd(&s.hist[digit(k, r.consumed, width)], 1u);
  }
  __syncthreads();
}

// The bin holding the need-th largest key: bins above it hold s.above < need keys.
__device__ void find_bin(int width, int need, TopkSmem &s) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, per = (1 << width) / 32;
    const int top = (1 << width) - lane * per;  // lane 0 takes the highest bins
    int sum = 0;
    for (int b = top - per; b < top; ++b) sum += s.hist[b];
    const int inclusive = warp_inclusive_scan(sum);
    const int owner = __ffs(__ballot_sync(kFullMask, inclusive >= need)) - 1;
    if (lane == owner) {
      int running = inclusive - sum;
      for (int b = top - 1; b >= top - per; --b) {
        if (running + (int)s.hist[b] >= need) {
          s.bin = b;
          s.above = running;
          break;
        }
        running += s.hist[b];
      }
    }
  }
  __syncthreads();
}

// Marks positions into the bitmap. For the row, a warp covers 32 aligned positions, i.e. one word.
__device__ __forceinline__ void mark_row_word(bool selected, int i, TopkSmem &s) {
  const unsigned bits = __ballot_sync(kFullMask, selected);
  if ((threadIdx.x & 31) == 0 && bits) s.bitmap[i >> 5] |= bits;
}

__device__ __forceinline__ void mark_position(int pos, TopkSmem &s) {
  atomicOr(&s.bitmap[pos >> 5], 1u << (pos & 31));
}

// Appends the lanes' keys with `take` to the candidates: one shared atomic per warp.
__device__ __forceinline__ void collect(bool take, uint32_t key, int pos, TopkSmem &s) {
  const unsigned takers = __ballot_sync(kFullMask, take);
  if (takers == 0) return;
  const int lane = threadIdx.x & 31;
  uint32_t base = 0;
  if (lane == __ffs(takers) - 1) base = atomicAdd(&s.cand_count, __popc(takers));
  base = __shfl_sync(kFullMask, base, __ffs(takers) - 1);
  if (take) {
    const uint32_t slot = base + __popc(takers & ((1u << lane) - 1));
    s.cand_key[slot] = key;
    s.cand_pos[slot] = pos;
  }
}

enum class Then { kHistogram, kCollect, kNothing };

// One pass over the row after a level chose `bin`: marks the keys above it, and either
// histograms the next level over the keys in it, or collects those keys into shared memory.
__device__ void row_pass(const RowKeys &keys, const Radix &r, int width, Then then,
                         const Radix &next, int next_width, TopkSmem &s) {
  const uint32_t bin = s.bin;
  __syncthreads();  // everyone has read s.bin before s.hist is cleared
  if (then == Then::kHistogram) clear_histogram(next_width, s);
  for (int base = 0; base < keys.n; base += kStep) {
    float v[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int i = base + j * kTopkThreads + threadIdx.x;
      v[j] = i < keys.n ? keys.row[i] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int i = base + j * kTopkThreads + threadIdx.x;
      const uint32_t k = order_key(v[j]);
      const bool live = i < keys.n && matches(k, r);
      const uint32_t d = live ? digit(k, r.consumed, width) : 0u;
      mark_row_word(live && d > bin, i, s);
      const bool in_bin = live && d == bin;
      if (then == Then::kHistogram) {
        warp_histogram_add(in_bin, digit(k, next.consumed, next_width), s.hist);
      } else if (then == Then::kCollect) {
        collect(in_bin, k, i, s);
      }
    }
  }
  __syncthreads();
}

// Row keys equal to the full prefix: the first `need` in position order win (ties go low).
__device__ void take_row_ties(const RowKeys &keys, const Radix &full, TopkSmem &s) {
  int taken = 0;
  for (int base = 0; base < keys.n && taken < full.need; base += kTopkThreads) {
    const int i = base + threadIdx.x;
    const bool tie = i < keys.n && keys.key(i) == full.prefix;
    int total;
    const int rank = taken + block_exclusive_scan<kTopkThreads>(tie, s.scan, &total);
    mark_row_word(tie && rank < full.need, i, s);
    taken += total;
  }
}

// Candidates equal to the full prefix, in no order: the `need` lowest positions win. Quadratic
// in the candidates, but only rows with exactly tied keys at the K-th place get here.
__device__ void take_candidate_ties(const CandidateKeys &keys, const Radix &full, TopkSmem &s) {
  for (int i = threadIdx.x; i < keys.n; i += kTopkThreads) {
    if (keys.key(i) != full.prefix) continue;
    int lower = 0;
    for (int j = 0; j < keys.n; ++j)
      lower += keys.key(j) == full.prefix && keys.pos(j) < keys.pos(i);
    if (lower < full.need) mark_position(keys.pos(i), s);
  }
}

__device__ void mark_candidates_above(const CandidateKeys &keys, const Radix &r, int width,
                                      TopkSmem &s) {
  const uint32_t bin = s.bin;
  for (int i = threadIdx.x; i < keys.n; i += kTopkThreads) {
    const uint32_t k = keys.key(i);
    if (matches(k, r) && digit(k, r.consumed, width) > bin) mark_position(keys.pos(i), s);
  }
  __syncthreads();
}

// Exact top-K of keys.n > K scores into s.bitmap.
__device__ void select_topk(const RowKeys &row, int k, TopkSmem &s) {
  CandidateKeys candidates{s.cand_key, s.cand_pos, 0};
  bool in_smem = false;
  Radix r{0u, 0, k};
  if (threadIdx.x == 0) s.cand_count = 0;
  row_histogram(row, r, kLevelBits[0], s);
  for (int level = 0;; ++level) {
    const int width = kLevelBits[level];
    find_bin(width, r.need, s);
    const uint32_t in_bin = s.hist[s.bin];
    const Radix next{(r.prefix << width) | s.bin, r.consumed + width, r.need - (int)s.above};
    const bool last = next.consumed == 32;
    const int next_width = last ? 0 : kLevelBits[level + 1];
    if (!in_smem) {
      const bool collect = !last && in_bin <= (uint32_t)kCandidates;
      const Then then = last ? Then::kNothing : collect ? Then::kCollect : Then::kHistogram;
      row_pass(row, r, width, then, next, next_width, s);
      if (last) return take_row_ties(row, next, s);
      if (collect) {
        in_smem = true;
        candidates.n = (int)in_bin;
        candidate_histogram(candidates, next, next_width, s);
      }
    } else {
      mark_candidates_above(candidates, r, width, s);
      if (last) return take_candidate_ties(candidates, next, s);
      candidate_histogram(candidates, next, next_width, s);
    }
    r = next;
  }
}

// Which request row t belongs to, and how many keys it sees; 0 keys outside every request.
__device__ int topk_row_length(const Params &p, int t) {
  int lo = 0, hi = p.requests - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.query_start_loc[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (t < p.query_start_loc[lo] || t >= p.query_start_loc[lo + 1]) return 0;
  return row_length(p, lo, t);
}

__device__ void emit_topk_idx(const Params &p, int t, int words, TopkSmem &s) {
  int32_t *out = p.topk_idx + (int64_t)t * p.topk_idx_stride;
  int base = 0;
  for (int w0 = 0; w0 < words; w0 += kTopkThreads) {
    const int w = w0 + threadIdx.x;
    uint32_t bits = w < words ? s.bitmap[w] : 0u;
    int total;
    int slot = base + block_exclusive_scan<kTopkThreads>(__popc(bits), s.scan, &total);
    for (; bits; bits &= bits - 1) out[slot++] = w * 32 + __ffs(bits) - 1;
    base += total;
  }
  for (int i = base + threadIdx.x; i < p.topk; i += kTopkThreads) out[i] = -1;
}

__device__ void emit_pages(const Params &p, int t, int pages, TopkSmem &s) {
  int32_t *blocks = p.sel_blocks + (int64_t)t * p.sel_blocks_stride;
  uint64_t *masks = p.sel_mask + (int64_t)t * p.sel_mask_stride;
  int base = 0;
  for (int g0 = 0; g0 < pages; g0 += kTopkThreads) {
    const int g = g0 + threadIdx.x;
    const uint64_t mask =
        g < pages ? (uint64_t)s.bitmap[2 * g] | ((uint64_t)s.bitmap[2 * g + 1] << 32) : 0u;
    int total;
    const int slot = base + block_exclusive_scan<kTopkThreads>(mask != 0, s.scan, &total);
    if (mask != 0) {
      blocks[slot] = g;
      masks[slot] = mask;
    }
    base += total;
  }
  for (int i = base + threadIdx.x; i < p.sel_width; i += kTopkThreads) {
    blocks[i] = -1;
    masks[i] = 0;
  }
  if (threadIdx.x == 0) p.sel_count[t] = base;
}

__global__ void __launch_bounds__(kTopkThreads)
    qsa_index_topk(const Params p, int c0, const float *scores, int64_t ld) {
  __shared__ TopkSmem s;
  const int t = c0 + blockIdx.x;
  const int len = topk_row_length(p, t);
  const int pages = (len + kPage - 1) / kPage;
  const int words = 2 * pages;  // whole pages, so every mask word is initialised
  for (int w = threadIdx.x; w < words; w += kTopkThreads) {  // L <= K: every key is selected
    const int first = w * 32;
    const uint32_t all = first + 32 <= len ? ~0u : first < len ? (1u << (len - first)) - 1 : 0u;
    s.bitmap[w] = len > p.topk ? 0u : all;
  }
  __syncthreads();
  if (len > p.topk) select_topk(RowKeys{scores + (int64_t)blockIdx.x * ld, len}, p.topk, s);
  __syncthreads();
  if (p.topk_idx != nullptr) emit_topk_idx(p, t, words, s);
  if (p.sel_blocks != nullptr) emit_pages(p, t, pages, s);
}

constexpr uint64_t kRowAlign = kScoreAlign;

int64_t score_ld(int32_t max_seq_len) {
  return (max_seq_len + kRowAlign - 1) / kRowAlign * kRowAlign;
}

}  // namespace
}  // namespace sm70ops

extern "C" uint64_t sm70_qsa_index_workspace(int32_t rows, int32_t max_seq_len, uint64_t cap_bytes,
                                             int32_t *chunk_rows) {
  using namespace sm70ops;
  const uint64_t row_bytes = (uint64_t)score_ld(max_seq_len) * sizeof(float);
  const uint64_t fit = cap_bytes / row_bytes / kTileRows * kTileRows;
  *chunk_rows = 0;
  if (rows <= 0) return 0;
  if (fit < (uint64_t)kTileRows && fit < (uint64_t)rows) return 0;
  *chunk_rows = (int32_t)(fit < (uint64_t)rows ? fit : (uint64_t)rows);
  return (uint64_t)*chunk_rows * row_bytes;
}

extern "C" int32_t sm70_qsa_index_launch(const sm70_qsa_index_params *p, void *workspace,
                                         void *stream) {
  using namespace sm70ops;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  float *scores = static_cast<float *>(workspace);
  const int64_t ld = score_ld(p->max_seq_len);
  const int key_blocks = (p->max_seq_len + kKeysPerBlock - 1) / kKeysPerBlock;
  for (int c0 = 0; c0 < p->rows; c0 += p->chunk_rows) {
    const int c1 = p->rows - c0 < p->chunk_rows ? p->rows : c0 + p->chunk_rows;
    const dim3 score_grid((c1 - c0) / kTileRows + p->requests, key_blocks);
    qsa_index_score_wmma<<<score_grid, kScoreWarps * 32, 0, s>>>(*p, c0, c1, scores, ld);
    qsa_index_topk<<<c1 - c0, kTopkThreads, 0, s>>>(*p, c0, scores, ld);
  }
  return static_cast<int32_t>(cudaGetLastError());
}
