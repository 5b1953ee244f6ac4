// How the grouped GEMMs cut an expert's sorted rows into M tiles (route.cu builds the two tile
// tables from it, gemm.cu runs them, nvfp4_moe.cu sizes them) and how a block's warps share a
// last N tile; tests/common checks both on the host. Why these sizes: the tuning notes in
// nvfp4_moe_internal.cuh.
#pragma once

#include "kernels/common/host_device.h"

namespace sm70ops::nvfp4_moe {

constexpr int kBigTileM = 128;
constexpr int kWideTileM = 64;
constexpr int kNarrowTileM = 32;

// 128-row (big) tiles while more than 64 rows remain, then at most one small tile for the last
// 64 or fewer. A big tile therefore always holds more than 64 rows, which the GEMMs' split of big
// tiles over two blocks (at short K) relies on.
SM70OPS_HOST_DEVICE inline int big_tiles(int count) {
  return (count + kBigTileM - kWideTileM - 1) / kBigTileM;
}

// Rows of the expert's big tile i < big_tiles(count): 128, or for the last one 65 to 128.
SM70OPS_HOST_DEVICE inline int big_tile_rows(int count, int i) {
  const int rest = count - i * kBigTileM;
  return rest < kBigTileM ? rest : kBigTileM;
}

// Rows of the expert's small tile (0: none), its last.
SM70OPS_HOST_DEVICE inline int small_rows(int count) {
  const int rest = count % kBigTileM;
  return rest > kWideTileM ? 0 : rest;
}

// The M a tile of `rows` (at most 64) runs with.
SM70OPS_HOST_DEVICE inline int small_tile_m(int rows) {
  return rows <= kNarrowTileM ? kNarrowTileM : kWideTileM;
}

// Table sizes for `pairs` routed pairs over `experts` experts. An expert's big tiles number
// (count + 63) / 128 (big_tiles): none below 65 rows, so at most m = min(experts, pairs / 65)
// experts have any, and all together at most (pairs + 63 m) / 128. An expert has at most one small
// tile.
SM70OPS_HOST_DEVICE inline int max_big_tiles(int pairs, int experts) {
  const int most = pairs / (kWideTileM + 1);
  const int partial = experts < most ? experts : most;
  return (pairs + (kBigTileM - kWideTileM - 1) * partial) / kBigTileM;
}
SM70OPS_HOST_DEVICE inline int max_small_tiles(int pairs, int experts) {
  return experts < pairs ? experts : pairs;
}

// ---- Sharing an N tile
// A block's warps form kShareColumns warp columns, each computing kShareFrags fragments of 16
// weight columns (W2) or kShareFrags / 2 columns of gate and the same of up (W13) over the
// kShareSubsteps k-substeps of 16 of a K step. A full N tile gives warp column wn column group wn
// and every substep. A last N tile may hold fewer columns (I 160: 32 of W13's 128); fragments
// past them are skipped, and when one or two column groups hold them all, the warp columns
// split the substeps instead (1 group: one substep each; 2: every other), their partial sums
// added before the epilogue by the warp whose index is the group's. The MMAs then stay spread
// over an SM's four sub-partitions (a warp runs on sub-partition warp % 4).
constexpr int kShareColumns = 4;
constexpr int kShareFrags = 4;
constexpr int kShareSubsteps = 4;

struct NTileShare {
  unsigned substeps;  // bit i: the warp runs k-substep i
  unsigned frags;     // bit f: the warp's fragment f holds weight columns
  int group;          // the column group it computes
  int split;          // warp columns sharing one group: 1, 2 or 4
};

// Warp column wn's share of an N tile whose first `cols` columns hold weights (a multiple of 16,
// at most the tile's 256 / halves); halves 2: W13, fragments f and f + 2 are gate and up of the
// same columns.
SM70OPS_HOST_DEVICE inline NTileShare n_tile_share(int cols, int wn, int halves) {
  const int group_cols = kShareFrags / halves * 16;
  const int used = (cols + group_cols - 1) / group_cols;
  const int groups = used <= kShareColumns / 2 ? used : kShareColumns;  // divides kShareColumns
  NTileShare s;
  s.split = kShareColumns / groups;
  s.group = wn % groups;
  s.substeps = 0;
  for (int i = wn / groups; i < kShareSubsteps; i += s.split) s.substeps |= 1u << i;
  s.frags = 0;
  for (int f = 0; f < kShareFrags; ++f) {
    const int col = s.group * group_cols + (halves == 2 ? f % 2 : f) * 16;
    s.frags |= (col < cols ? 1u : 0u) << f;
  }
  if (s.frags == 0) s.substeps = 0;  // a fourth column group where three hold columns
  return s;
}

}  // namespace sm70ops::nvfp4_moe
