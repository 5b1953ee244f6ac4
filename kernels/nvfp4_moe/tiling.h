// How the grouped GEMMs cut an expert's sorted rows into M tiles: route.cu builds the two tile
// tables from it, gemm.cu runs them, nvfp4_moe.cu sizes them; tests/common checks it on the
// host. Why these sizes: the tuning notes in nvfp4_moe_internal.cuh.
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

}  // namespace sm70ops::nvfp4_moe
