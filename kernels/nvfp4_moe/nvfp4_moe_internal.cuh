// What the NVFP4 MoE kernels share: the tile configuration and its rationale, the workspace and
// prepared layouts, the weight operand of the GEMMs, and the launchers nvfp4_moe.cu strings
// together (see the pipeline there).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/half_bits.cuh"
#include "kernels/nvfp4_moe/nvfp4_moe.h"
#include "kernels/nvfp4_moe/tiling.h"

namespace sm70ops::nvfp4_moe {

using Params = sm70_nvfp4_moe_params;

constexpr int kMaxExperts = SM70_NVFP4_MOE_MAX_EXPERTS;
constexpr int kMaxTopk = SM70_NVFP4_MOE_MAX_TOPK;

// ---- Grouping (route.cu)
// A sort block takes 1024 consecutive pairs: 8 warps x 4 steps of 32. That gives 80 blocks at
// T 8192 x top-10, where 4096 pairs a block left most SMs idle (2-7% slower on an H200), and at
// most 256 (16384 tokens x top-16), whose counts one thread per expert scans.
constexpr int kSortWarps = 8;
constexpr int kSortSteps = 4;
constexpr int kSortWarpPairs = kSortSteps * 32;
constexpr int kSortPairs = kSortWarps * kSortWarpPairs;
constexpr int kScanThreads = kMaxExperts;  // one per expert

// ---- Grouped GEMMs (gemm.cu)
// Tuning for the decode-heavy W4A16 case. Every weight element is decoded once per M tile, and
// experts hold few rows: T x top-k / E is 10 at T = 512 and 160 at T = 8192 (E = 512, top-10).
//   - N tile 256: each block reads and decodes a 256-row weight tile, and its A tile (gathered x
//     rows, or the fused activation) is read once per 256 columns. At I = 128 the whole W13 of an
//     expert (128 gate + 128 up rows) is one N tile, so each routed x row is gathered once; a
//     warp's 4 B fragments per A fragment give 0.75 fragment loads per MMA from shared memory.
//     N need only be a multiple of 16: a last N tile runs the fragments that hold columns, and
//     where one or two warp columns hold them all (I 160, the model at TP4: 32 of 128 column
//     pairs) the warps split its K steps instead (tiling.h), so no MMA runs on padding.
//   - K tile 64: one 16-byte load per half row of the payload (32 k), two e4m3 scales with it;
//     46 KB of shared memory for tiles of up to 64 rows, so two such blocks (16 warps) share a
//     V100 SM; 55 KB for 128 rows, one block. K need only be a multiple of 16: a last K step
//     of 16, 32 or 48 k loads, decodes and multiplies only those (I 160: 64 + 64 + 32), in the
//     same pass over the weights.
//   - M tile 128, 64 or 32, per tile (tiling.h): an expert's rows go in 128-row (big) tiles while
//     more than 64 remain, the last 64 or fewer in one 64- or 32-row (small) tile. A big tile
//     decodes each weight once per 128 rows and its warps hold 64 x 64 (16 accumulators: a third
//     fewer fragment loads per MMA than 32 x 64), at the price of one block of 8 warps per SM
//     (about 240 registers a thread on sm_70; 3-4% faster than 64-row tiles alone on an H200 at
//     TP1). Small tiles keep two blocks per SM; a 32-row remainder in a 64-row tile would double
//     its MMAs (at T 8192, 160 rows per expert, half the experts end in one).
//   - Single-buffered shared memory with register prefetch: the next K tile's global loads are in
//     flight during this tile's MMAs; a second shared buffer would cost the second block per SM.
constexpr int kThreads = 256;  // 8 warps: 2 along M x 4 along N
constexpr int kWarpsM = 2;
constexpr int kWarpsN = 4;
constexpr int kTileN = 256;
constexpr int kTileK = 64;
constexpr int kFrag = 16;        // WMMA m16n16k16
constexpr int kLd = kTileK + 8;  // halves per shared row: the pad staggers rows over banks
constexpr int kWarpN = kTileN / kWarpsN;
constexpr int kFragsN = kWarpN / kFrag;
static_assert(kWarpsM * kWarpsN * 32 == kThreads, "warp grid");
static_assert(kFragsN == 4, "W13 warps hold two gate and two up fragments");

// A thread loads 32 k of a weight row per K step (a row half): 16 payload bytes and two e4m3
// scales, two rows per thread.
constexpr int kHalfK = kTileK / 2;
constexpr int kScaleBlock = 16;  // NVFP4: one e4m3 scale per 16 weights along k
static_assert(kTileN * (kTileK / kHalfK) == 2 * kThreads, "two row halves per thread");

// Passes: at most this many tokens at once, which bounds the workspace (the partials of one
// pass, 16384 x 10 x 2048 x 2 B = 0.67 GB at TP1) at one more read of the weights per pass.
constexpr int kChunkTokens = 16384;

// ---- Weights
// The B operand of one GEMM: N = kHalves x half_rows weight rows of K each, per expert. W13 has
// two halves (gate, up) of I rows and K = H; a block's N tile takes 128 rows of each, so one warp
// holds gate and up of the same columns. W2 has one half of H rows and K = I.
//
// Both layouts are one address map with their own strides (weight_offset): k = 64 kt + 32 h + j
// of row n of expert e sits at e x expert + n x row + kt x step + h x half + j / 2.
//   checkpoint  [E, N, K/2] (ModelOpt): row K/2, step 32, half 16. Rows are 16-byte aligned only
//               when K % 32 == 0; else (I 80, H 2576) a row half is read as two 8-byte quarters.
//   prepared    per expert, per K step, per row half: the N rows' 16 bytes one after another
//               (row 16, half 16 N, step 32 N), K zero-padded to a multiple of 32, so that every
//               load is a whole aligned half and a block's tile of one step is 2-4 contiguous runs
//               of 2-4 KiB. No row padding: the model's shapes take exactly the checkpoint's bytes.
// The scales follow the same map at 1/8 of the strides (one byte per 16 k).
struct Operand {
  const uint8_t *packed;  // checkpoint tensor, or the prepared section
  const uint8_t *scales;
  const float *scale_2;  // scale_2[e * scale_2_stride + half]
  int32_t scale_2_stride;
  // 1: the GEMM reads row halves as two 8-byte quarters (checkpoint rows are 8-byte aligned when
  // K % 32 == 16) and, gate/up, stops its x loads at H; set where K needs either (H % 64 != 0,
  // or a checkpoint I % 32 != 0).
  int32_t ragged;
  int32_t half_rows;  // I (W13) or H (W2)
  int32_t k;          // H (W13) or I (W2)
  int32_t n_tiles;    // ceil(half_rows / (kTileN / kHalves))
  int32_t k_tiles;    // ceil(k / kTileK): the last K step may hold 16, 32 or 48 k
  // Byte strides of the payload (the scales': the same / 8), kernel parameters rather than
  // registers. 32-bit: H x I <= 2^30.
  int32_t expert_bytes, row_bytes, step_bytes, half_bytes;
  // From a thread's row r to its row r + 128: the up row of the same column (W13) or the next
  // 128 rows (W2).
  int32_t second_bytes, scale_second_bytes;  // the scales': second_bytes / 8
};

struct WeightOffset {
  int64_t packed, scales;
};

// Row n (0 .. N-1) of expert e at k, a multiple of 16.
__host__ __device__ inline WeightOffset weight_offset(const Operand &b, int e, int n, int k) {
  WeightOffset o;
  o.packed = (int64_t)e * b.expert_bytes + (int64_t)n * b.row_bytes +
             (int64_t)(k / kTileK) * b.step_bytes + (k / kHalfK % 2) * b.half_bytes +
             k % kHalfK / 2;
  o.scales = o.packed / 8;  // every stride is a multiple of 8; k % 32 / 2 is 0 or 8
  return o;
}

// Byte offsets of the prepared sections (each 256-byte aligned).
struct PreparedLayout {
  uint64_t w13, w13_scale, w2, w2_scale, scale_2, total;
};

__host__ __device__ inline int32_t round_up(int32_t x, int32_t to) {
  return (x + to - 1) / to * to;
}

inline PreparedLayout prepared_layout(int experts, int hidden, int inter) {
  const auto aligned = [](uint64_t bytes) { return (bytes + 255) / 256 * 256; };
  const uint64_t w13 = (uint64_t)experts * 2 * inter * round_up(hidden, kHalfK) / 2;
  const uint64_t w2 = (uint64_t)experts * hidden * round_up(inter, kHalfK) / 2;
  PreparedLayout l;
  l.w13 = 0;
  l.w13_scale = l.w13 + aligned(w13);
  l.w2 = l.w13_scale + aligned(w13 / 8);
  l.w2_scale = l.w2 + aligned(w2);
  l.scale_2 = l.w2_scale + aligned(w2 / 8);
  l.total = l.scale_2 + (uint64_t)experts * 4 * sizeof(float);
  return l;
}
constexpr int kPreparedScale2Stride = 4;  // gate, up, w2, 0

// The B operands of both GEMMs: the prepared layout when `prepared` is not NULL, else `w`.
Operand gate_up_operand(const sm70_nvfp4_moe_weights &w, const uint8_t *prepared, int experts,
                        int hidden, int inter);
Operand down_operand(const sm70_nvfp4_moe_weights &w, const uint8_t *prepared, int experts,
                     int hidden, int inter);

// ---- One pass over at most kChunkTokens tokens
struct Pass {
  int32_t token0;            // first token of the pass
  int32_t tokens;            // tokens in it
  int32_t pairs;             // tokens x top-k: (token, slot) pairs, pass-local index t * k + j
  int32_t sort_blocks;       // ceil(pairs / kSortPairs)
  int32_t big_table_size;    // entries of the big-tile table: max_big_tiles(pairs, E) (tiling.h)
  int32_t small_table_size;  // entries of the small-tile table: max_small_tiles(pairs, E)
};

// Workspace of one pass (sized for the largest); pieces 256-byte aligned.
struct Workspace {
  int32_t *block_counts;   // [sort_blocks, E]: counts, then their exclusive prefix per expert
  int32_t *expert_offset;  // [E]: first position of the expert's pairs in `sorted`
  // [big_table_size + small_table_size]: (expert, first sorted position, rows, M tile);
  // expert -1: none
  int4 *tiles;
  int32_t *sorted;  // [pairs]: pair indices grouped by expert, ascending within one
  uint16_t *act;    // [pairs, I] fp16: silu(gate) * up, by sorted position
  __half *partial;  // [pairs, H] fp16: router weight x expert output, by pair index
};

Workspace carve_workspace(void *base, const Params &p, int32_t capacity_tokens);
uint64_t workspace_bytes(const Params &p, int32_t capacity_tokens);

// Launchers of one pass, in pipeline order.
void launch_route(const Params &p, const Pass &pass, const Workspace &w, cudaStream_t stream);
void launch_gate_up(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                    cudaStream_t stream);
void launch_down(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                 cudaStream_t stream);
void launch_combine(const Params &p, const Pass &pass, const Workspace &w, cudaStream_t stream);

// The repack (prepare.cu).
void launch_prepare(const sm70_nvfp4_moe_prepare_params &p, cudaStream_t stream);

}  // namespace sm70ops::nvfp4_moe
