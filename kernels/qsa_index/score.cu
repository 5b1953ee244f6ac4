// QSA index scorer: s[t,g] = sum_h w[t,h] * relu(q[t,h,:] . k[g,:]) on tensor cores.
//
// One block = 16 rows of one request x a range of keys. The four heads' Q tiles stay in shared
// memory; each warp streams groups of 32 keys through its own shared staging area
// (key_staging.h; the next slice of dimensions in flight during this one's MMAs, the next
// group's first slice during this one's epilogue) into WMMA B fragments. Each lane addresses its
// keys through the block table one by one, so a group may span pages (16-token pages of 4-token
// groups hold four keys) or be a stratified sample. One accumulator per head and key fragment
// keeps the heads apart, so the ReLU and the weighted head sum happen in registers; the group's
// scores then go row-major through the staging area, and the epilogue reads them in a layout it
// knows. Passes:
//   sample   scores the key each stratum samples into the workspace;
//   filter   scores every key and keeps those above the row's threshold, and marks and counts
//            those at it (one slot atomic per row and group; where every row of the call keeps
//            all its keys (call_keeps_all), key j in slot j and no atomic);
//   rescore  scores every key of the rows the filter misjudged (row_rescued) into slot = key.
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
static_assert(kTileRows == kFrag, "a tile's rows are one WMMA M");
static_assert(kSampleGroup == kKeysPerWarp, "a warp samples one stratum per key of its group");
// 1/sqrt(128): each head's weight when the call gives none (Qwen3.8's weight-free indexer).
constexpr float kUniformHeadWeight = 0.08838834764831845f;

constexpr int kSumLd = kKeysPerWarp + 4;  // floats; the pad staggers rows over the banks

// A warp's area: its staged key slice during the MMAs, then its group's scores, row-major, so
// that the epilogue reads them in a layout it knows (WMMA leaves the accumulator's open).
union WarpStage {
  __half keys[kKeysPerWarp][kKeyLd];
  float sums[kTileRows][kSumLd];
};
static_assert(sizeof(float[kTileRows][kSumLd]) <= sizeof(__half[kKeysPerWarp][kKeyLd]),
              "the scores fit in the slice they replace");

struct __align__(32) Smem {
  __half q[kHeads][kTileRows][kQLd];  // 17408 B
  WarpStage stage[kWarps];            // 10240 B
  // [h][r][c] = w[r][h]: loaded as an accumulator fragment, each element gets its row's weight
  // whatever the fragment's layout.
  float head_w[kHeads][kTileRows][kFrag];  // 4096 B
  float threshold[kTileRows];
  int32_t len[kTileRows];  // keys each row sees: its complete groups (causal bound)
  uint32_t rescued;        // bit r: row r is rescored (the rescore pass)
};
static_assert(kV100BlocksPerSm * sizeof(Smem) <= kV100SmemBytes,
              "static shared memory for the V100's blocks per SM");

using Tile = VarlenTile;

__device__ bool find_tile(const Params &p, const Rows &rows, int slot, Tile *tile) {
  return varlen_find_tile(p.query_start_loc, p.requests, rows.begin, rows.end, kTileRows, slot,
                          tile);
}

// The sample pass, and the filter pass with slot atomics (rows keeping few keys or many) or
// (call_keeps_all) none, and the rescore of misjudged rows.
enum class Pass { kSample, kFilter, kFilterDense, kFilterAll, kRescore };

// Prologue, rows: their key counts, and when the pass compares with them (not in a keep-all
// call) their thresholds; for the rescore, which rows it rescores.
template <Pass kPass>
__device__ void load_rows(const Params &p, const Tile &tile, int c0, const Workspace &ws, Smem &s) {
  if (threadIdx.x >= kTileRows) return;
  const int row = threadIdx.x, r = tile.row0 + row - c0;
  const bool live = row < tile.rows;
  const int keys = live ? row_tokens(p, tile.request, tile.row0 + row) / p.ratio : 0;
  s.len[row] = keys;
  const bool thresholds = kPass == Pass::kFilter || kPass == Pass::kFilterDense;
  s.threshold[row] = live && thresholds ? ws.threshold[r] : 0.f;
  if (kPass == Pass::kRescore) {
    const unsigned rescued = __ballot_sync(0xffffu, live && row_rescued(p, ws, r, keys));
    if (row == 0) s.rescued = rescued;
  }
}

// Prologue, queries: the Q tile (zeros past the tile's rows) and each head's weight.
__device__ void load_queries(const Params &p, const Tile &tile, Smem &s) {
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
  for (int i = threadIdx.x; i < kHeads * kTileRows * kFrag; i += blockDim.x) {
    const int h = i / (kTileRows * kFrag), row = i / kFrag % kTileRows;
    s.head_w[h][row][i % kFrag] = row >= tile.rows ? 0.f
                                  : p.weights == nullptr
                                      ? kUniformHeadWeight
                                      : p.weights[(tile.row0 + row) * p.weights_row_stride + h];
  }
}

using Acc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;
static_assert(Acc::num_elements == kAccElements, "accumulator elements per lane");

// A warp's key group in flight: where this lane's pieces (key_staging.h) start, nullptr for a
// key past the tile's rows or on an out-of-range page (both read as zero keys), and the first
// slice of them, loaded while the warp's previous group is still being kept.
struct KeyGroup {
  const uint4 *at[kStagePieces];
  uint4 piece[kStagePieces];
};

// This lane's pieces of dimensions d0 .. d0 + kStageDims - 1.
__device__ __forceinline__ void load_slice(const KeyGroup &group, int d0,
                                           uint4 (&piece)[kStagePieces]) {
#pragma unroll
  for (int i = 0; i < kStagePieces; ++i) {
    piece[i] = group.at[i] == nullptr ? make_uint4(0, 0, 0, 0) : __ldg(group.at[i] + d0 / 8);
  }
}

// The key in slot k of the warp group that starts at `first`: key first + k, or when sampling
// the key of stratum first + k.
template <Pass kPass>
__device__ __forceinline__ int group_key(int first, int k) {
  return kPass == Pass::kSample ? stratum_key(first + k) : first + k;
}

// The group starting at `first`, of a tile whose longest row sees `len` keys.
template <Pass kPass>
__device__ void fetch_group(const Params &p, const Tile &tile, int first, int len,
                            KeyGroup &group) {
  const int lane = threadIdx.x % 32;
  // Pages of 32 keys or more hold a whole filter group: one block-table read for all of it.
  const bool one_page = kPass != Pass::kSample && keys_per_page(p) >= kKeysPerWarp;
  const uint16_t *page = one_page ? key_address(p, tile.request, tile.row0, first) : nullptr;
#pragma unroll
  for (int i = 0; i < kStagePieces; ++i) {
    const int key = group_key<kPass>(first, piece_key(lane, i));
    const uint16_t *k = key >= len ? nullptr
                        : one_page
                            ? (page == nullptr ? nullptr : page + (key - first) * p.k_token_stride)
                            : key_address(p, tile.request, tile.row0, key);
    group.at[i] = k == nullptr ? nullptr : reinterpret_cast<const uint4 *>(k + piece_dim(lane));
  }
  load_slice(group, 0, group.piece);
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

__device__ void score_group(Smem &s, KeyGroup &group, Acc (&acc)[kHeads][kKeyFrags]) {
#pragma unroll
  for (int h = 0; h < kHeads; ++h)
#pragma unroll
    for (int f = 0; f < kKeyFrags; ++f) wmma::fill_fragment(acc[h][f], 0.f);
  __half(&stage)[kKeysPerWarp][kKeyLd] = s.stage[threadIdx.x / 32].keys;
#pragma unroll  // the four slices, unrolled: 5% faster on an H200 (1024 x 131072)
  for (int d0 = 0; d0 < kDim; d0 += kStageDims) {
    store_slice(group.piece, stage);
    if (d0 + kStageDims < kDim) load_slice(group, d0 + kStageDims, group.piece);
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

// The group's scores, sum_h w[row,h] * relu(acc_h), row-major into the warp's stage.
__device__ void store_scores(Smem &s, const Acc (&acc)[kHeads][kKeyFrags]) {
  Acc sum[kKeyFrags];
#pragma unroll
  for (int f = 0; f < kKeyFrags; ++f) wmma::fill_fragment(sum[f], 0.f);
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    Acc w;
    wmma::load_matrix_sync(w, &s.head_w[h][0][0], kFrag, wmma::mem_row_major);
#pragma unroll
    for (int f = 0; f < kKeyFrags; ++f)
#pragma unroll
      for (int i = 0; i < kAccElements; ++i) sum[f].x[i] += w.x[i] * fmaxf(acc[h][f].x[i], 0.f);
  }
  WarpStage &stage = s.stage[threadIdx.x / 32];
  __syncwarp();  // every lane has loaded its last key fragment
#pragma unroll
  for (int f = 0; f < kKeyFrags; ++f)
    wmma::store_matrix_sync(&stage.sums[0][f * kFrag], sum[f], kSumLd, wmma::mem_row_major);
  __syncwarp();
}

// A lane's share of its warp's group: kLaneKeys consecutive keys of one row, two lanes a row.
constexpr int kLaneKeys = kKeysPerWarp * kTileRows / 32;
static_assert(kLaneKeys == 16 && kTileRows * 2 == 32, "two lanes of 16 keys per row");

struct LaneScores {
  int row;        // in the tile
  int key;        // position of the first
  unsigned live;  // bit j: key + j is below the row's length
  float v[kLaneKeys];
};

__device__ LaneScores lane_scores(const Smem &s, int key0) {
  const int lane = threadIdx.x % 32, column = lane % 2 * kLaneKeys;
  LaneScores l;
  l.row = lane / 2;
  l.key = key0 + column;
  const int live = min(max(s.len[l.row] - l.key, 0), kLaneKeys);
  l.live = (1u << live) - 1u;
  const float4 *src =
      reinterpret_cast<const float4 *>(&s.stage[threadIdx.x / 32].sums[l.row][column]);
#pragma unroll
  for (int j = 0; j < kLaneKeys / 4; ++j) {
    const float4 v = src[j];
    l.v[4 * j] = v.x, l.v[4 * j + 1] = v.y, l.v[4 * j + 2] = v.z, l.v[4 * j + 3] = v.w;
  }
  return l;
}

__device__ void store_lane_scores(const LaneScores &l, float *out) {
  float4 *dst = reinterpret_cast<float4 *>(out);
#pragma unroll
  for (int j = 0; j < kLaneKeys / 4; ++j)
    dst[j] = make_float4(l.v[4 * j], l.v[4 * j + 1], l.v[4 * j + 2], l.v[4 * j + 3]);
}

// Sample pass: every score of the tile's rows, live or not (the threshold kernel masks the
// strata whose key a row does not see).
__device__ void write_samples(const LaneScores &l, const Tile &tile, int c0, int column0,
                              const Workspace &ws) {
  if (l.row >= tile.rows) return;
  const int column = column0 + threadIdx.x % 2 * kLaneKeys;
  store_lane_scores(l, ws.samples + (int64_t)(tile.row0 + l.row - c0) * ws.sample_ld + column);
}

// Row r's candidate slots in the workspace.
struct CandidateRow {
  float *score;
  int32_t *pos;
};
__device__ __forceinline__ CandidateRow candidate_row(const Workspace &ws, int64_t r) {
  return {ws.cand_score + r * kCandidates, ws.cand_pos + r * kCandidates};
}

// A kept key into its row's candidate slot (slots past kCandidates: the row overflowed and is
// rescued).
__device__ __forceinline__ void store_kept(const CandidateRow &row, int slot, float v, int key) {
  if (slot < kCandidates) {
    row.score[slot] = v;
    row.pos[slot] = key;
  }
}

// Keeps the keys strictly above their row's threshold as candidates and marks and counts those
// equal to it, where rows keep few of their keys: each lane compares its own 16. The two lanes
// of a row share one slot atomic and the tie atomics per group (the group's 32 keys are one
// bitmap word), issued together before any slot is used.
__device__ void keep_candidates(const Smem &s, const LaneScores &l, const Tile &tile, int c0,
                                const Workspace &ws) {
  const float threshold = s.threshold[l.row];
  unsigned above = 0u, at = 0u;
#pragma unroll
  for (int j = 0; j < kLaneKeys; ++j) {
    above |= (unsigned)(l.v[j] > threshold) << j;
    at |= (unsigned)(l.v[j] == threshold) << j;
  }
  above &= l.live;
  at &= l.live;
  const bool first = threadIdx.x % 2 == 0;  // of the row's two lanes
  const int mine = __popc(above), partner = __shfl_xor_sync(kFullMask, mine, 1);
  const unsigned ties = at | __shfl_xor_sync(kFullMask, at, 1) << kLaneKeys;
  const int64_t r = tile.row0 + l.row - c0;
  int base = 0;
  if (first && mine + partner > 0) base = atomicAdd(&ws.count[r], mine + partner);
  if (first && ties != 0u) {
    atomicOr(&ws.ties[r * ws.tie_words + l.key / 32], ties);
    atomicAdd(&ws.tied[r], __popc(ties));
  }
  int slot = __shfl_sync(kFullMask, base, threadIdx.x % 32 & ~1) + (first ? 0 : partner);
  if (above == 0u) return;
  const CandidateRow row = candidate_row(ws, r);
#pragma unroll
  for (int j = 0; j < kLaneKeys; ++j) {
    if (above >> j & 1u) store_kept(row, slot++, l.v[j], l.key + j);
  }
}

// The same where rows keep many of their keys (short contexts): lane = key, one row at a time,
// so that a row's kept keys go out as one coalesced store. Lane r < 16 holds row r's masks and
// issues its atomics, all rows' together before any slot is used.
__device__ void keep_candidates_dense(const Smem &s, const Tile &tile, int c0, int key0,
                                      const Workspace &ws) {
  const int lane = threadIdx.x % 32, key = key0 + lane;
  const WarpStage &stage = s.stage[threadIdx.x / 32];
  float v[kTileRows];
  unsigned row_above = 0u, row_at = 0u;  // lane r: row r's keys above / at the threshold
#pragma unroll
  for (int row = 0; row < kTileRows; ++row) {
    v[row] = stage.sums[row][lane];
    const bool live = key < s.len[row];
    const float threshold = s.threshold[row];
    const unsigned above = __ballot_sync(kFullMask, live && v[row] > threshold);
    const unsigned at = __ballot_sync(kFullMask, live && v[row] == threshold);
    if (lane == row) row_above = above, row_at = at;
  }
  const int64_t r = tile.row0 + lane - c0;
  int base = 0;
  if (row_above != 0u) base = atomicAdd(&ws.count[r], __popc(row_above));
  if (row_at != 0u) {
    atomicOr(&ws.ties[r * ws.tie_words + key0 / 32], row_at);
    atomicAdd(&ws.tied[r], __popc(row_at));
  }
  const unsigned rows = __ballot_sync(kFullMask, row_above != 0u);
#pragma unroll
  for (int row = 0; row < kTileRows; ++row) {
    if ((rows >> row & 1u) == 0u) continue;
    const unsigned above = __shfl_sync(kFullMask, row_above, row);
    const int slot = __shfl_sync(kFullMask, base, row) + __popc(above & ((1u << lane) - 1u));
    if (above >> lane & 1u) {
      store_kept(candidate_row(ws, tile.row0 + row - c0), slot, v[row], key);
    }
  }
}

// Every live score of the lane's row at column = key of `scores` (the row's): a keep-all call's
// kept scores (call_keeps_all), where no counter is contended and no position is stored, and the
// select takes count = G from the same row length; and a rescued row's stored scores.
__device__ void store_every_key(const LaneScores &l, float *scores) {
  float *out = scores + l.key;
  if (l.live == (1u << kLaneKeys) - 1u) {
    store_lane_scores(l, out);
    return;
  }
#pragma unroll
  for (int j = 0; j < kLaneKeys; ++j) {
    if (l.live >> j & 1u) out[j] = l.v[j];
  }
}

// Keys the tile's rows need scored: none when every row sees at most K keys (it takes them all),
// nor, when sampling, when every row keeps all its keys (keeps_all: no threshold to find); when
// rescoring, those of the rescored rows.
template <Pass kPass>
__device__ int tile_length(const Params &p, const Smem &s) {
  int len = 0;
  for (int row = 0; row < kTileRows; ++row) {
    if (kPass != Pass::kRescore || (s.rescued >> row & 1u)) len = max(len, s.len[row]);
  }
  const int taken_whole = kPass == Pass::kSample ? kKeepAllMaxLen : topk_keys(p);  // K <= 4096
  return len > taken_whole ? len : 0;
}

// Keys a warp group spans: 32, or 32 strata when sampling.
template <Pass kPass>
__host__ __device__ constexpr int group_span() {
  return kPass == Pass::kSample ? kSampleGroup * kStratum : kKeysPerWarp;
}

template <Pass kPass>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSm)
    qsa_index_score_wmma(const Params p, const Rows rows, const Workspace ws,
                         int groups_per_block) {
  __shared__ Smem s;
  Tile tile;
  if (!find_tile(p, rows, blockIdx.x, &tile)) return;
  const int c0 = rows.c0;
  // Prologue
  load_rows<kPass>(p, tile, c0, ws, s);
  __syncthreads();
  if (kPass == Pass::kRescore && s.rescued == 0u) return;  // almost every block
  const int len = tile_length<kPass>(p, s);
  if (len == 0) return;
  load_queries(p, tile, s);
  __syncthreads();
  // Main loop: this warp's groups of the block's range, one in flight ahead.
  const int warp = threadIdx.x / 32;
  constexpr int kSpan = group_span<kPass>();
  const int first = blockIdx.y * groups_per_block, end = first + groups_per_block;
  auto scored = [&](int g) { return g < end && g * kSpan < len; };
  auto group_start = [](int g) { return kPass == Pass::kSample ? g * kSampleGroup : g * kSpan; };
  KeyGroup keys;
  if (scored(first + warp)) fetch_group<kPass>(p, tile, group_start(first + warp), len, keys);
  for (int g = first + warp; scored(g); g += kWarps) {
    const int key0 = g * kKeysPerWarp;  // of the filter and rescore; stratum 32g when sampling
    Acc acc[kHeads][kKeyFrags];
    score_group(s, keys, acc);
    if (scored(g + kWarps)) fetch_group<kPass>(p, tile, group_start(g + kWarps), len, keys);
    store_scores(s, acc);
    // Epilogue
    if (kPass == Pass::kSample) {
      write_samples(lane_scores(s, key0), tile, c0, key0, ws);
    } else if (kPass == Pass::kFilterAll) {
      const LaneScores l = lane_scores(s, key0);
      store_every_key(l, ws.cand_score + (int64_t)(tile.row0 + l.row - c0) * kCandidates);
    } else if (kPass == Pass::kRescore) {
      const LaneScores l = lane_scores(s, key0);
      const int64_t stored_row = tile.row0 + l.row - rows.begin;
      if (s.rescued >> l.row & 1u) store_every_key(l, ws.stored + stored_row * ws.stored_ld);
    } else if (kPass == Pass::kFilterDense) {
      keep_candidates_dense(s, tile, c0, key0, ws);
    } else {
      keep_candidates(s, lane_scores(s, key0), tile, c0, ws);
    }
  }
}

dim3 score_grid(const Params &p, const Rows &rows, int keys_per_block) {
  return dim3(varlen_slots(rows.end - rows.begin, kTileRows, p.requests),
              (max_keys(p) + keys_per_block - 1) / keys_per_block);
}

// A scorer launch: key groups per block and the grid they give.
struct ScoreShape {
  int groups;
  dim3 grid;
};

// The most key groups per block, down to min_groups, that still give the GPU kMinBlocks blocks;
// a group spans `span` keys. Measured on an H200 (1024 rows, K 2048): a fixed 64 groups per
// block left the sample pass a few hundred blocks, costing 9% of the index at 32K keys.
ScoreShape score_shape(const Params &p, const Rows &rows, int span, int min_groups) {
  ScoreShape shape{kMaxGroupsPerBlock, score_grid(p, rows, kMaxGroupsPerBlock * span)};
  while (shape.groups > min_groups && (int64_t)shape.grid.x * shape.grid.y < kMinBlocks) {
    shape.groups /= 2;
    shape.grid = score_grid(p, rows, shape.groups * span);
  }
  return shape;
}

template <Pass kPass>
void launch_score(const Params &p, const Rows &rows, const Workspace &w, int min_groups,
                  cudaStream_t stream) {
  const ScoreShape shape = score_shape(p, rows, group_span<kPass>(), min_groups);
  prefer_max_carveout(qsa_index_score_wmma<kPass>);  // three blocks of 31 KB per V100 SM
  qsa_index_score_wmma<kPass><<<shape.grid, kWarps * 32, 0, stream>>>(p, rows, w, shape.groups);
}

}  // namespace

uint32_t score_smem_bytes() { return sizeof(Smem); }

void launch_sample(const Params &p, const Rows &rows, const Workspace &w, cudaStream_t stream) {
  if (call_keeps_all(p)) return;  // no row needs samples
  launch_score<Pass::kSample>(p, rows, w, kWarps, stream);
}

void launch_filter(const Params &p, const Rows &rows, const Workspace &w, cudaStream_t stream) {
  // Rows keep about 16 sample_rank(K) keys; coalescing their stores pays when that is an eighth
  // of the row or more (H200, 1024 rows, K 2048: 8K keys 25% faster, 131072 keys 4% slower).
  if (call_keeps_all(p)) {
    launch_score<Pass::kFilterAll>(p, rows, w, kFilterMinGroupsPerBlock, stream);
  } else if (int64_t{kStratum} * sample_rank(topk_keys(p)) * 8 >= max_keys(p)) {
    launch_score<Pass::kFilterDense>(p, rows, w, kFilterMinGroupsPerBlock, stream);
  } else {
    launch_score<Pass::kFilter>(p, rows, w, kFilterMinGroupsPerBlock, stream);
  }
}

// Over the rescue group's tiles: a block whose rows were all judged right returns after reading
// their counters. Never in a keep-all call: every row keeps all its keys.
void launch_rescore(const Params &p, const Rows &rows, const Workspace &w, cudaStream_t stream) {
  launch_score<Pass::kRescore>(p, rows, w, kFilterMinGroupsPerBlock, stream);
}

}  // namespace sm70ops::qsa_index
