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
constexpr int kScanLoads = 16;             // sort blocks' counts in flight a thread

// ---- Grouped GEMMs (gemm.cu)
// Sized for the model at T 8192 / E 512 / top-10, where an expert holds 160 rows (T x top-k / E;
// 10 at T 512), and for a V100 SM: 96 KB of shared memory, 512 FMA a cycle on the tensor units.
//   - M tile up to 160 rows (tiling.h): an expert's rows in as few tiles as hold them, so that its
//     weights are decoded once per 160 rows; the model's 160 are one tile. (128 + 32-row tiles
//     ran the 32-row one at 17% of the tensor rate on the V100 model.)
//   - N tile of 160 weight rows: W13's 80 gate and the same 80 up rows, or 160 of W2's H rows.
//     Every I of the model (640 / 320 / 160 / 80 at TP 1 / 2 / 4 / 8) and H 2560 are whole tiles;
//     a last partial tile (any multiple of 16) leaves the warps of its missing columns idle.
//   - 20 warps: 2 along M x 10 along N, each 80 rows x 16 columns (5 fragments: 1.2 fragment
//     loads an MMA), five on each of an SM's four schedulers. (Ten warps of 80 x 32 put three on
//     two schedulers and two on the others, which capped the tensor units at 83%, and left 168
//     registers a thread.) Gate/up: warp columns 0-4 hold gate, 5-9 the same columns of up; the
//     epilogue pairs them through shared memory.
//   - K step 64, double buffered: A (the tile's rows) and B (the weight tile decoded to fp16) of
//     the next step go to the other buffer during this step's MMAs, and the loads of the step
//     after are issued: one barrier a step, and the decode overlaps the tensor units. 2 x 45 KB:
//     one block an SM.
constexpr int kWarpsM = 2;
constexpr int kWarpsN = 10;
constexpr int kThreads = kWarpsM * kWarpsN * 32;
constexpr int kTileN = 160;
constexpr int kTileK = 64;
constexpr int kFrag = 16;        // WMMA m16n16k16
constexpr int kLd = kTileK + 8;  // halves per shared row: the pad staggers rows over the banks
constexpr int kWarpFragsM = kTileM / kWarpsM / kFrag;
static_assert(kWarpFragsM == 5 && kTileN == kWarpsN * kFrag, "warp tile: 5 x 1 fragments");

// B: a thread loads 16 k of one weight row per K step (a quarter row: 8 payload bytes, one
// e4m3 scale); the block's 160 rows x 4 quarters are its 640 threads. Checkpoint rows are 8-byte
// aligned for any K that is a multiple of 16.
constexpr int kHalfK = kTileK / 2;  // the prepared layout's unit along k (Operand's comment)
constexpr int kScaleBlock = 16;     // NVFP4: one e4m3 scale per 16 weights along k
static_assert(kTileN * (kTileK / kScaleBlock) == kThreads, "one quarter row per thread");
// A: 16-byte pieces of the tile's rows, 8 a row, two a thread.
constexpr int kAPieces = kTileM * kTileK / 8 / kThreads;
static_assert(kAPieces * kThreads * 8 == kTileM * kTileK, "whole A pieces a thread");

// Passes: at most this many tokens at once, which bounds the workspace (the partials of one
// pass, 16384 x 10 x 2048 x 2 B = 0.67 GB at TP1) at one more read of the weights per pass.
constexpr int kChunkTokens = 16384;

// ---- Weights
// The B operand of one GEMM: N = kHalves x half_rows weight rows of K each, per expert. W13 has
// two halves (gate, up) of I rows and K = H; a block's N tile takes 80 rows of each, so one warp
// holds gate and up of the same columns. W2 has one half of H rows and K = I.
//
// Both layouts are one address map with their own strides (weight_offset): k = 64 kt + 32 h + j
// of row n of expert e sits at e x expert + n x row + kt x step + h x half + j / 2.
//   checkpoint  [E, N, K/2] (ModelOpt): row K/2, step 32, half 16. Rows are 8-byte aligned (16-
//               byte only when K % 32 == 0: I 80, H 2576 are not).
//   prepared    per expert, per K step, per row half: the N rows' 16 bytes one after another
//               (row 16, half 16 N, step 32 N), K zero-padded to a multiple of 32, so that a
//               block's tile of one step is 2-4 contiguous runs of 1.3-2.5 KiB and a warp's loads
//               256 contiguous bytes. No row padding: the model's shapes take exactly the
//               checkpoint's bytes.
// The scales follow the same map at 1/8 of the strides (one byte per 16 k).
struct Operand {
  const uint8_t *packed;  // checkpoint tensor, or the prepared section
  const uint8_t *scales;
  const float *scale_2;  // scale_2[e * scale_2_stride + half]
  int32_t scale_2_stride;
  int32_t half_rows;  // I (W13) or H (W2)
  int32_t k;          // H (W13) or I (W2)
  int32_t n_tiles;    // ceil(half_rows / (kTileN / kHalves))
  int32_t k_tiles;    // ceil(k / kTileK): the last K step may hold 16, 32 or 48 k
  // Byte strides of the payload (the scales': the same / 8), kernel parameters rather than
  // registers. 32-bit: H x I <= 2^30.
  int32_t expert_bytes, row_bytes, step_bytes, half_bytes;
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
  int32_t token0;       // first token of the pass
  int32_t tokens;       // tokens in it
  int32_t pairs;        // tokens x top-k: (token, slot) pairs, pass-local index t * k + j
  int32_t sort_blocks;  // ceil(pairs / kSortPairs)
  int32_t table_size;   // entries of the tile table: max_m_tiles(pairs, E) (tiling.h)
};

// Workspace of one pass (sized for the largest); pieces 256-byte aligned.
struct Workspace {
  int32_t *block_counts;   // [sort_blocks, E]: counts, then their exclusive prefix per expert
  int32_t *expert_offset;  // [E]: first position of the expert's pairs in `sorted`
  int4 *tiles;      // [table_size]: (expert, first sorted position, rows, 0); expert -1: none
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
