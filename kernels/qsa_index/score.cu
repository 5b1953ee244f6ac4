// QSA index scorer: s[t,j] = sum_h w[t,h] * relu(q[t,h,:] . k[j,:]) on tensor cores.
//
// One block = 16 rows of one request x a range of keys. The four heads' Q tiles stay in shared
// memory; each warp streams 32-key groups of the paged keys (a group never crosses a page)
// through its own shared staging area (key_staging.h; the next slice of dimensions in flight
// during this one's MMAs) into WMMA B fragments. One accumulator per head and key fragment keeps
// the heads apart, so the ReLU and the weighted head sum happen in registers. Two modes:
//   sample  scores the first group of every 512 keys into the workspace;
//   filter  scores every key and keeps those above the row's threshold, and marks those at it
//           (where rows keep many keys, one slot atomic per row and warp; where every row of
//           the call keeps all its keys (call_keeps_all), key j in slot j and no atomic).
#include <cuda_fp16.h>
#include <mma.h>

#include "kernels/common/block_scan.cuh"
#include "kernels/common/smem.cuh"
#include "kernels/qsa_index/key_staging.h"
#include "kernels/qsa_index/qsa_index_internal.cuh"

namespace sm70ops::qsa_index {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kFrag = 16;  // WMMA m16n16k16
constexpr int kWarps = 4;  // 128 threads
// Blocks per SM the registers are capped for: four hide the key loads' latency on an H200 (12%
// faster than three at 1024 x 131072); a V100 build keeps three, which needs no spills.
constexpr int kV100BlocksPerSm = 3;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 750
constexpr int kBlocksPerSm = kV100BlocksPerSm;
#else
constexpr int kBlocksPerSm = 4;
#endif
constexpr int kAccElements = 8;  // floats of a 16 x 16 accumulator per lane
constexpr int kKeyFrags = kKeysPerWarp / kFrag;
// Key groups per block, both passes: as many as amortise the block's Q tile load, as few as
// give the GPU kMinBlocks blocks at short contexts, and at the least one per warp (sample) or
// eight (filter: four was 18% slower at 1024 x 2048).
constexpr int kMaxGroupsPerBlock = 64;
constexpr int kMinBlocks = 1024;
constexpr int kFilterMinGroupsPerBlock = 8;
constexpr int kQLd = kDim + 8;  // halves; the pad staggers rows over the banks
static_assert(kPage % kKeysPerWarp == 0 && kSampleGroup == kKeysPerWarp, "groups stay in a page");

struct __align__(32) Smem {
  __half q[kHeads][kTileRows][kQLd];          // 17408 B
  __half keys[kWarps][kKeysPerWarp][kKeyLd];  // each warp's staged slice, 10240 B
  float row_ids[kFrag][kFrag];                // element (r, c) = r: accumulator element -> row
  float col_ids[kFrag][kFrag];                // element (r, c) = c: accumulator element -> key
  uint32_t row_peers[kAccElements][32];       // [i][lane]: lanes whose element i shares lane's row
  float w[kTileRows][kHeads];
  float threshold[kTileRows];
  int32_t len[kTileRows];  // keys each row sees (causal bound)
};
static_assert(kV100BlocksPerSm * sizeof(Smem) <= kV100SmemBytes,
              "static shared memory for the V100's blocks per SM");

using Tile = VarlenTile;

__device__ bool find_tile(const Params &p, int c0, int c1, int slot, Tile *tile) {
  return varlen_find_tile(p.query_start_loc, p.requests, c0, c1, kTileRows, slot, tile);
}

// Prologue: Q tile (zeros past the tile's rows), weights, row lengths, row ids, and when the
// pass compares with them (not in a keep-all call) the rows' thresholds.
__device__ void load_tile(const Params &p, const Tile &tile, int c0, const Workspace &ws,
                          bool thresholds, Smem &s) {
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
  for (int i = threadIdx.x; i < kFrag * kFrag; i += blockDim.x) {
    s.row_ids[i / kFrag][i % kFrag] = i / kFrag;
    s.col_ids[i / kFrag][i % kFrag] = i % kFrag;
  }
  if (threadIdx.x < kTileRows) {
    const int row = threadIdx.x;
    const bool live = row < tile.rows;
    s.len[row] = live ? row_length(p, tile.request, tile.row0 + row) : 0;
    s.threshold[row] = live && thresholds ? ws.threshold[tile.row0 + row - c0] : 0.f;
  }
}

// Keys key0 .. key0+31 of request r (one page), or nullptr when the page id is out of range.
__device__ const __half *key_group(const Params &p, int r, int row, int key0) {
  const int page = p.block_table[r * p.block_table_stride + key0 / kPage];
  if (page < 0 || page >= p.num_pages) {
    report_bad_index(p.checked, SM70_CHECKED_PAGE_ID, row, page, p.num_pages);
    return nullptr;
  }
  const uint16_t *k = p.k_index + page * p.k_page_stride + (key0 % kPage) * p.k_token_stride;
  return reinterpret_cast<const __half *>(k);
}

using Acc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;
static_assert(Acc::num_elements == kAccElements, "accumulator elements per lane");

// This lane's pieces (key_staging.h) of dimensions d0 .. d0 + kStageDims - 1 of the warp's 32 keys.
__device__ __forceinline__ void load_slice(const __half *keys, int64_t ld, int d0,
                                           uint4 (&piece)[kStagePieces]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < kStagePieces; ++i) {
    const __half *src = keys + piece_key(lane, i) * ld + d0 + piece_dim(lane);
    piece[i] = __ldg(reinterpret_cast<const uint4 *>(src));
  }
}

__device__ __forceinline__ void store_slice(const uint4 (&piece)[kStagePieces],
                                            __half (&stage)[kKeysPerWarp][kKeyLd]) {
  const int lane = threadIdx.x % 32;
  __syncwarp();  // the previous slice's fragments are loaded
#pragma unroll
  for (int i = 0; i < kStagePieces; ++i) {
    *reinterpret_cast<uint4 *>(&stage[piece_key(lane, i)][piece_dim(lane)]) = piece[i];
  }
  __syncwarp();
}

__device__ void score_group(Smem &s, const __half *keys, int64_t ld,
                            Acc (&acc)[kHeads][kKeyFrags]) {
#pragma unroll
  for (int h = 0; h < kHeads; ++h)
#pragma unroll
    for (int f = 0; f < kKeyFrags; ++f) wmma::fill_fragment(acc[h][f], 0.f);
  if (keys == nullptr) return;  // an out-of-range page reads as zero keys
  __half(&stage)[kKeysPerWarp][kKeyLd] = s.keys[threadIdx.x / 32];
  uint4 piece[kStagePieces];
  load_slice(keys, ld, 0, piece);
#pragma unroll  // the four slices, unrolled: 5% faster on an H200 (1024 x 131072)
  for (int d0 = 0; d0 < kDim; d0 += kStageDims) {
    store_slice(piece, stage);
    if (d0 + kStageDims < kDim) load_slice(keys, ld, d0 + kStageDims, piece);
#pragma unroll
    for (int k = 0; k < kStageDims; k += kFrag) {
      wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::col_major> b[kKeyFrags];
#pragma unroll
      for (int f = 0; f < kKeyFrags; ++f)
        wmma::load_matrix_sync(b[f], &stage[f * kFrag][k], kKeyLd);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major> a;
        wmma::load_matrix_sync(a, &s.q[h][0][d0 + k], kQLd);
#pragma unroll
        for (int f = 0; f < kKeyFrags; ++f) wmma::mma_sync(acc[h][f], a, b[f], acc[h][f]);
      }
    }
  }
}

// Which row and key of the tile each accumulator element holds. WMMA leaves the layout to the
// implementation, but it is the same for every accumulator fragment, so fragments loaded from
// index matrices tell it.
struct ElementMap {
  Acc row;
  Acc col;
};

// sum_h w[row,h] * relu(acc_h) for each element of key fragment f.
__device__ void combine_heads(const Smem &s, const ElementMap &map,
                              const Acc (&acc)[kHeads][kKeyFrags], int f, Acc &sum) {
#pragma unroll
  for (int i = 0; i < sum.num_elements; ++i) {
    const int row = (int)map.row.x[i];
    float v = 0.f;
#pragma unroll
    for (int h = 0; h < kHeads; ++h) v += s.w[row][h] * fmaxf(acc[h][f].x[i], 0.f);
    sum.x[i] = v;
  }
}

__device__ void write_samples(const ElementMap &map, const Acc &sum, const Tile &tile, int c0,
                              int column0, const Workspace &ws) {
  float *out = ws.samples + (int64_t)(tile.row0 - c0) * ws.sample_ld + column0;
#pragma unroll
  for (int i = 0; i < sum.num_elements; ++i) {
    const int row = (int)map.row.x[i];
    if (row < tile.rows) out[row * ws.sample_ld + (int)map.col.x[i]] = sum.x[i];
  }
}

// The lanes that hold the same row in each accumulator element, for keep_candidates_aggregated.
__device__ void find_row_peers(const ElementMap &map, Smem &s) {
#pragma unroll
  for (int i = 0; i < kAccElements; ++i) {
    s.row_peers[i][threadIdx.x] = __match_any_sync(0xffffffffu, (int)map.row.x[i]);
  }
}

// A kept key into its row's candidate slot (slots past kCandidates: the row overflowed and is
// rescued).
__device__ __forceinline__ void store_kept(const Workspace &ws, int64_t r, int slot, float v,
                                           int key) {
  if (slot < kCandidates) {
    ws.cand_score[r * kCandidates + slot] = v;
    ws.cand_pos[r * kCandidates + slot] = key;
  }
}
// A key scoring exactly the threshold into the row's tie bitmap.
__device__ __forceinline__ void mark_tie(const Workspace &ws, int64_t r, int key) {
  atomicOr(&ws.ties[r * ws.tie_words + key / 32], 1u << (key % 32));
}

// Keeps the keys strictly above their row's threshold (a few percent at long contexts) as
// candidates, one slot atomic per kept key, and marks those equal to it as ties. The atomics of
// kBatch elements are issued before any of their slots is used, so their round trips overlap
// (waiting on each in turn was 31% of the filter's stalls at 131072 keys). The whole op on an
// H200, 1024 rows x 64K keys, one run, ms: one at a time 0.689, two 0.667, four 0.622, eight
// 0.676 (spills at the 128 registers of four blocks per SM; three blocks per SM were slower).
__device__ void keep_candidates(const Smem &s, const ElementMap &map, const Acc &sum,
                                const Tile &tile, int c0, int key0, const Workspace &ws) {
  constexpr int kBatch = 4;
#pragma unroll
  for (int i0 = 0; i0 < kAccElements; i0 += kBatch) {
    unsigned kept = 0u;  // bit j: element i0 + j is kept
    int slot[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j, row = (int)map.row.x[i], key = key0 + (int)map.col.x[i];
      const bool live = row < tile.rows && key < s.len[row];
      const float v = sum.x[i], threshold = s.threshold[row];
      const int64_t r = tile.row0 + row - c0;
      slot[j] = 0;
      if (live && v > threshold) {
        kept |= 1u << j;
        slot[j] = atomicAdd(&ws.count[r], 1);
      } else if (live && v == threshold) {
        mark_tie(ws, r, key);
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j, row = (int)map.row.x[i], key = key0 + (int)map.col.x[i];
      if (kept >> j & 1u) store_kept(ws, tile.row0 + row - c0, slot[j], sum.x[i], key);
    }
  }
}

// The same where rows keep many of their keys (short contexts): the lanes keeping keys of one
// row share one atomic on its counter (contention on it was the filter's main stall), and every
// element's atomic is issued before any slot is used, so their round trips overlap (waiting on
// each in turn was a third of the filter's stalls at 8K keys).
__device__ void keep_candidates_aggregated(const Smem &s, const ElementMap &map, const Acc &sum,
                                           const Tile &tile, int c0, int key0,
                                           const Workspace &ws) {
  const int lane = threadIdx.x % 32;
  unsigned group[kAccElements];  // the lanes keeping keys of this lane's row
  int issued[kAccElements];
#pragma unroll
  for (int i = 0; i < kAccElements; ++i) {
    const int row = (int)map.row.x[i], key = key0 + (int)map.col.x[i];
    const bool keep = row < tile.rows && key < s.len[row] && sum.x[i] > s.threshold[row];
    group[i] = __ballot_sync(kFullMask, keep) & s.row_peers[i][lane];
    issued[i] = keep ? warp_reserve_issue(&ws.count[tile.row0 + row - c0], group[i]) : 0;
  }
#pragma unroll
  for (int i = 0; i < kAccElements; ++i) {
    const int row = (int)map.row.x[i], key = key0 + (int)map.col.x[i];
    const bool live = row < tile.rows && key < s.len[row];
    const float v = sum.x[i], threshold = s.threshold[row];
    const int64_t r = tile.row0 + row - c0;
    const int slot = warp_reserve_slot(issued[i], group[i]);
    if (group[i] >> lane & 1u) {
      store_kept(ws, r, slot, v, key);
    } else if (live && v == threshold) {
      mark_tie(ws, r, key);
    }
  }
}

// A call whose rows all keep every key (call_keeps_all): each key's slot is its
// position, so no counter is contended and no position is stored. The select takes count = L
// from the same row length: every slot below it is written here.
__device__ void keep_every_key(const Smem &s, const ElementMap &map, const Acc &sum,
                               const Tile &tile, int c0, int key0, const Workspace &ws) {
#pragma unroll
  for (int i = 0; i < kAccElements; ++i) {
    const int row = (int)map.row.x[i], key = key0 + (int)map.col.x[i];
    const int64_t r = tile.row0 + row - c0;
    if (row < tile.rows && key < s.len[row]) {
      ws.cand_score[r * kCandidates + key] = sum.x[i];
    }
  }
}

// Rows that see at most K keys take them all and need no scores.
__device__ int tile_length(const Params &p, const Smem &s) {
  int len = 0;
  for (int row = 0; row < kTileRows; ++row) len = max(len, s.len[row]);
  return len > p.topk ? len : 0;
}

// The sample pass, and the filter pass with a slot atomic per kept key or per row and warp, or
// (call_keeps_all) none.
enum class Pass { kSample, kFilter, kFilterAggregated, kFilterAll };

template <Pass kPass>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSm)
    qsa_index_score_wmma(const Params p, int c0, int c1, const Workspace ws, int groups_per_block) {
  __shared__ Smem s;
  Tile tile;
  constexpr bool kSample = kPass == Pass::kSample;
  if (!find_tile(p, c0, c1, blockIdx.x, &tile)) return;
  load_tile(p, tile, c0, ws, kPass == Pass::kFilter || kPass == Pass::kFilterAggregated, s);
  __syncthreads();
  const int len = tile_length(p, s);
  ElementMap map;
  wmma::load_matrix_sync(map.row, &s.row_ids[0][0], kFrag, wmma::mem_row_major);
  wmma::load_matrix_sync(map.col, &s.col_ids[0][0], kFrag, wmma::mem_row_major);
  if (kPass == Pass::kFilterAggregated) {
    if (threadIdx.x < 32) find_row_peers(map, s);
    __syncthreads();
  }
  const int warp = threadIdx.x / 32;
  // Key groups this warp scores: every 16th group when sampling, all of them when filtering.
  const int stride = kSample ? kSampleSpan : kKeysPerWarp;
  const int first = blockIdx.y * groups_per_block;
  for (int g = first + warp; g < first + groups_per_block && g * stride < len; g += kWarps) {
    const int key0 = g * stride;
    Acc acc[kHeads][kKeyFrags];
    score_group(s, key_group(p, tile.request, tile.row0, key0), p.k_token_stride, acc);
#pragma unroll
    for (int f = 0; f < kKeyFrags; ++f) {
      Acc sum;
      combine_heads(s, map, acc, f, sum);
      if (kSample) {
        write_samples(map, sum, tile, c0, g * kSampleGroup + f * kFrag, ws);
      } else if (kPass == Pass::kFilterAll) {
        keep_every_key(s, map, sum, tile, c0, key0 + f * kFrag, ws);
      } else if (kPass == Pass::kFilterAggregated) {
        keep_candidates_aggregated(s, map, sum, tile, c0, key0 + f * kFrag, ws);
      } else {
        keep_candidates(s, map, sum, tile, c0, key0 + f * kFrag, ws);
      }
    }
  }
}

dim3 score_grid(const Params &p, int c0, int c1, int keys_per_block) {
  return dim3(varlen_slots(c1 - c0, kTileRows, p.requests),
              (p.max_seq_len + keys_per_block - 1) / keys_per_block);
}

// A scorer launch: key groups per block and the grid they give.
struct ScoreShape {
  int groups;
  dim3 grid;
};

// The most key groups per block, down to min_groups, that still give the GPU kMinBlocks blocks;
// group g starts at key g * stride. Measured on an H200 (1024 rows, K 2048): a fixed 64 groups
// per block left the sample pass a few hundred blocks, costing 9% of the index at 32K keys.
ScoreShape score_shape(const Params &p, int c0, int c1, int stride, int min_groups) {
  ScoreShape shape{kMaxGroupsPerBlock, score_grid(p, c0, c1, kMaxGroupsPerBlock * stride)};
  while (shape.groups > min_groups && (int64_t)shape.grid.x * shape.grid.y < kMinBlocks) {
    shape.groups /= 2;
    shape.grid = score_grid(p, c0, c1, shape.groups * stride);
  }
  return shape;
}

template <Pass kPass>
void launch_score(const Params &p, int c0, int c1, const Workspace &w, const ScoreShape &shape,
                  cudaStream_t stream) {
  prefer_max_carveout(qsa_index_score_wmma<kPass>);  // three blocks of 31 KB per V100 SM
  qsa_index_score_wmma<kPass><<<shape.grid, kWarps * 32, 0, stream>>>(p, c0, c1, w, shape.groups);
}

}  // namespace

void launch_sample(const Params &p, int c0, int c1, const Workspace &w, cudaStream_t stream) {
  if (call_keeps_all(p)) return;  // no row needs samples
  launch_score<Pass::kSample>(p, c0, c1, w, score_shape(p, c0, c1, kSampleSpan, kWarps), stream);
}

void launch_filter(const Params &p, int c0, int c1, const Workspace &w, cudaStream_t stream) {
  const ScoreShape shape = score_shape(p, c0, c1, kKeysPerWarp, kFilterMinGroupsPerBlock);
  // Rows keep about 16 sample_rank(K) keys; aggregating pays when that is an eighth of the
  // context or more (H200, 1024 rows, K 2048, measured while 4K contexts were still sampled: 15%
  // faster at 4K keys, 4% at 16K, 5% slower at 32K and 3% at 128K; again once both issued their
  // atomics ahead, ms, aggregated against not: 8K 0.217 / 0.263, 16K 0.285 / 0.330, 32K 0.427 /
  // 0.422, 64K 0.716 / 0.618, 131072 1.27 / 1.07).
  if (call_keeps_all(p)) {
    launch_score<Pass::kFilterAll>(p, c0, c1, w, shape, stream);
  } else if (16ll * sample_rank(p.topk) * 8 >= p.max_seq_len) {
    launch_score<Pass::kFilterAggregated>(p, c0, c1, w, shape, stream);
  } else {
    launch_score<Pass::kFilter>(p, c0, c1, w, shape, stream);
  }
}

}  // namespace sm70ops::qsa_index
