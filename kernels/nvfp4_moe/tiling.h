// How the grouped GEMMs cut an expert's sorted rows into M tiles: route.cu builds the tile
// table from it, gemm.cu runs it, nvfp4_moe.cu sizes it; tests/common checks it on the host.
// Why 160 rows: the tuning notes in nvfp4_moe_internal.cuh.
#pragma once

#include "kernels/common/host_device.h"

namespace sm70ops::nvfp4_moe {

constexpr int kTileM = 160;  // the most rows a tile holds: 10 WMMA fragments
constexpr int kRowFrag = 16;

// M tiles of an expert with `count` rows: as few as hold them.
SM70OPS_HOST_DEVICE constexpr int m_tiles(int count) { return (count + kTileM - 1) / kTileM; }

// Rows of each tile but the expert's last: the count split evenly, rounded up to whole
// fragments, so that the tiles' fragments add up to the fewest that hold the rows (161 rows: 96
// + 65, not 160 + 1, whose one-row tile decodes the expert's weights for a fragment).
SM70OPS_HOST_DEVICE constexpr int m_tile_stride(int count) {
  const int tiles = m_tiles(count);
  const int even = (count + tiles - 1) / tiles;
  const int whole = (even + kRowFrag - 1) / kRowFrag * kRowFrag;
  return whole < kTileM ? whole : kTileM;
}

// Rows of the expert's tile i < m_tiles(count).
SM70OPS_HOST_DEVICE constexpr int m_tile_rows(int count, int i) {
  const int stride = m_tile_stride(count), rest = count - i * stride;
  return rest < stride ? rest : stride;
}

// The tile table's order: experts by the fragments of their largest tile (their first),
// descending, then by id. A wave of blocks lasts as long as its heaviest; heaviest first, a skewed
// routing's full tiles run side by side in the first wave and the few-row tiles fill the SMs they
// free, where in expert order each wave waited on the full tiles that fell into it.
constexpr int kMaxTileFrags = kTileM / kRowFrag;

// The size class of an expert with `count` rows: its first tile's fragments, 0 without rows.
SM70OPS_HOST_DEVICE constexpr int m_tile_frags(int count) {
  return count > 0 ? (m_tile_rows(count, 0) + kRowFrag - 1) / kRowFrag : 0;
}

// Table entries for `pairs` routed pairs over `experts` experts: each of the at most
// min(experts, pairs) experts with rows has m_tiles(count) <= (count + kTileM - 1) / kTileM.
SM70OPS_HOST_DEVICE constexpr int max_m_tiles(int pairs, int experts) {
  const int routed = experts < pairs ? experts : pairs;
  return (pairs + (kTileM - 1) * routed) / kTileM;
}

}  // namespace sm70ops::nvfp4_moe
