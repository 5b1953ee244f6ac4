// Grouping of the routed (token, slot) pairs by expert, with static launch shapes and a stable,
// deterministic order (ascending pair index within an expert):
//   count    each sort block histograms its 1024 pairs per warp (match-any ranks, no atomics);
//   scan     one block: per expert, the exclusive prefix of the blocks' counts; the experts'
//            offsets; the M tiles of every expert in one table, heaviest first (tiling.h),
//            which the GEMMs index by blockIdx.y;
//   scatter  each sort block ranks its pairs again and writes them to their sorted positions.
// Ids outside [0, E) are dropped here: they reach no GEMM, and the combine skips them. Checked
// mode records the first one (count pass).
#include "kernels/common/block_scan.cuh"
#include "kernels/common/checked.cuh"
#include "kernels/nvfp4_moe/nvfp4_moe_internal.cuh"

namespace sm70ops::nvfp4_moe {
namespace {

struct RouteSmem {
  int32_t hist[kSortWarps][kMaxExperts];  // 16 KB: per warp, then the warp's next position
};

// The expert of pass-local pair `pair`, or -1 (past the pass, or an id outside [0, E)).
template <bool kReport>
__device__ __forceinline__ int expert_of(const Params &p, const Pass &pass, int pair) {
  if (pair >= pass.pairs) return -1;
  const int t = pair / p.topk, j = pair - t * p.topk;
  const int e = p.topk_ids[(int64_t)(pass.token0 + t) * p.topk_ids_row_stride + j];
  if (e >= 0 && e < p.experts) return e;
  if (kReport) report_bad_index(p.checked, SM70_CHECKED_EXPERT_ID, pass.token0 + t, e, p.experts);
  return -1;
}

__device__ __forceinline__ int first_pair(int warp, int step) {
  return blockIdx.x * kSortPairs + warp * kSortWarpPairs + step * 32 + (threadIdx.x & 31);
}

// Histogram of each warp's pairs into s.hist[warp][*]. Lanes of one step with the same expert
// find each other with __match_any_sync; the lowest of them adds the group, so each counter has
// one writer per step and the warp's steps run in order.
template <bool kReport>
__device__ void count_warp_pairs(const Params &p, const Pass &pass, RouteSmem &s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  for (int step = 0; step < kSortSteps; ++step) {
    const int e = expert_of<kReport>(p, pass, first_pair(warp, step));
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0 && lane == __ffs(peers) - 1) s.hist[warp][e] += __popc(peers);
    __syncwarp();
  }
}

// The block's per-warp expert counts in s.hist, for every thread to read: the first step of both
// sort kernels (the count reports bad expert ids, the scatter sees the same pairs again).
template <bool kReport>
__device__ void count_block_pairs(const Params &p, const Pass &pass, RouteSmem &s) {
  for (int i = threadIdx.x; i < kSortWarps * p.experts; i += blockDim.x) {
    s.hist[i / p.experts][i % p.experts] = 0;
  }
  __syncthreads();
  count_warp_pairs<kReport>(p, pass, s);
  __syncthreads();
}

__global__ void __launch_bounds__(kSortWarps * 32)
    nvfp4_moe_route_count(const Params p, const Pass pass, const Workspace w) {
  __shared__ RouteSmem s;
  count_block_pairs<true>(p, pass, s);
  for (int e = threadIdx.x; e < p.experts; e += blockDim.x) {
    int total = 0;
#pragma unroll
    for (int warp = 0; warp < kSortWarps; ++warp) total += s.hist[warp][e];
    w.block_counts[(int64_t)blockIdx.x * p.experts + e] = total;
  }
}

// The tile table's size classes (tiling.h) are scanned four at a time, as 16-bit fields of one
// 64-bit value: three block scans, not ten. A class's tiles fit a field: the table holds at most
// kMaxTableTiles entries.
constexpr int kClassBits = 16, kClassesPerScan = 4;
constexpr int kMaxTableTiles = max_m_tiles(kChunkTokens * kMaxTopk, kMaxExperts);
static_assert(kMaxTableTiles < (1 << kClassBits), "a class's tiles in one field");

struct ScanSmem {
  int32_t scratch[kScanThreads / 32 + 1];
  uint64_t classes[kScanThreads / 32 + 1];
};

// The first table entry of an expert of size class `frags` with `tiles` tiles, in the table's
// order (tiling.h: heaviest class first, then by expert id). *total gets every expert's tiles.
__device__ int first_table_entry(int frags, int tiles, ScanSmem &s, int *total) {
  constexpr uint64_t kField = (1u << kClassBits) - 1;
  int start = 0;
  *total = 0;
  for (int first = kMaxTileFrags; first > 0; first -= kClassesPerScan) {
    // Field i holds class first - i.
    const int field = first - frags;
    const bool here = frags > 0 && field >= 0 && field < kClassesPerScan;
    uint64_t sums = 0;
    const uint64_t before = block_exclusive_scan<kScanThreads>(
        here ? (uint64_t)tiles << (kClassBits * field) : uint64_t(0), s.classes, &sums);
    for (int i = 0; i < kClassesPerScan && first - i > 0; ++i) {
      if (here && i == field) start = *total + int(before >> (kClassBits * i) & kField);
      *total += int(sums >> (kClassBits * i) & kField);
    }
  }
  return start;
}

__global__ void __launch_bounds__(kScanThreads)
    nvfp4_moe_route_scan(const Params p, const Pass pass, const Workspace w) {
  __shared__ ScanSmem s;
  const int e = threadIdx.x;
  int count = 0;
  if (e < p.experts) {
    // kScanLoads blocks' counts loaded before any is overwritten: the loads overlap, where a
    // load-store-load chain would wait out one L2 round trip per sort block (80 at T 8192).
    for (int b0 = 0; b0 < pass.sort_blocks; b0 += kScanLoads) {
      int32_t *slot = &w.block_counts[(int64_t)b0 * p.experts + e];
      const int n = min(kScanLoads, pass.sort_blocks - b0);
      int c[kScanLoads];
#pragma unroll
      for (int i = 0; i < kScanLoads; ++i) c[i] = i < n ? slot[(int64_t)i * p.experts] : 0;
#pragma unroll
      for (int i = 0; i < kScanLoads; ++i) {
        if (i < n) slot[(int64_t)i * p.experts] = count;  // the block's first position
        count += c[i];
      }
    }
  }
  int total = 0, tiles = 0;
  const int offset = block_exclusive_scan<kScanThreads>(count, s.scratch, &total);
  const int start = first_table_entry(m_tile_frags(count), m_tiles(count), s, &tiles);
  if (e < p.experts) {
    w.expert_offset[e] = offset;
    for (int i = 0; i < m_tiles(count); ++i) {
      w.tiles[start + i] =
          make_int4(e, offset + i * m_tile_stride(count), m_tile_rows(count, i), 0);
    }
  }
  for (int tile = tiles + threadIdx.x; tile < pass.table_size; tile += blockDim.x) {
    w.tiles[tile] = make_int4(-1, 0, 0, 0);
  }
}

__global__ void __launch_bounds__(kSortWarps * 32)
    nvfp4_moe_route_scatter(const Params p, const Pass pass, const Workspace w) {
  __shared__ RouteSmem s;
  count_block_pairs<false>(p, pass, s);
  for (int e = threadIdx.x; e < p.experts; e += blockDim.x) {  // counts -> each warp's position
    int next = w.expert_offset[e] + w.block_counts[(int64_t)blockIdx.x * p.experts + e];
#pragma unroll
    for (int warp = 0; warp < kSortWarps; ++warp) {
      const int c = s.hist[warp][e];
      s.hist[warp][e] = next;
      next += c;
    }
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  for (int step = 0; step < kSortSteps; ++step) {
    const int pair = first_pair(warp, step);
    const int e = expert_of<false>(p, pass, pair);
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0) w.sorted[s.hist[warp][e] + __popc(peers & ((1u << lane) - 1))] = pair;
    __syncwarp();
    if (e >= 0 && lane == __ffs(peers) - 1) s.hist[warp][e] += __popc(peers);
    __syncwarp();
  }
}

}  // namespace

void launch_route(const Params &p, const Pass &pass, const Workspace &w, cudaStream_t stream) {
  nvfp4_moe_route_count<<<pass.sort_blocks, kSortWarps * 32, 0, stream>>>(p, pass, w);
  nvfp4_moe_route_scan<<<1, kScanThreads, 0, stream>>>(p, pass, w);
  nvfp4_moe_route_scatter<<<pass.sort_blocks, kSortWarps * 32, 0, stream>>>(p, pass, w);
}

}  // namespace sm70ops::nvfp4_moe
