// How a scorer warp (score.cu) stages its group of 32 keys through its shared-memory area: a
// slice of kStageDims dimensions at a time, each lane moving kStagePieces 16-byte pieces. Each
// warp load takes 64 contiguous bytes of 8 keys, where a WMMA fragment load from the pages took
// 32 bytes of 16 keys. tests/common checks on the host that a slice's pieces are each moved once
// and that the stores are free of bank conflicts.
#pragma once

#include "kernels/common/host_device.h"

namespace sm70ops::qsa_index {

constexpr int kKeysPerWarp = 32;  // two key fragments share each A fragment load
// 32 dimensions keep three blocks on a V100 SM; 64 measured 15% slower on an H200 (1024 x
// 131072).
constexpr int kStageDims = 32;
constexpr int kKeyLd = kStageDims + 8;                           // halves per staged key
constexpr int kPiecesPerKey = kStageDims / 8;                    // 16-byte pieces of a key's slice
constexpr int kStagePieces = kKeysPerWarp * kPiecesPerKey / 32;  // pieces per lane

// Piece i of `lane` in a slice: its key, and the first of its 8 dimensions within the slice.
// Load i takes keys 8i .. 8i+7; the 8 lanes of a quarter warp (one shared-memory wavefront of a
// 16-byte store) take keys q and q + 4, whose rows' 64 bytes fall in opposite halves of the
// banks (rows are 80 bytes apart): consecutive keys there would be a two-way conflict.
static_assert(kPiecesPerKey == 4 && kKeyLd * 2 == 80, "piece layout for 32-dimension slices");
SM70OPS_HOST_DEVICE inline int piece_key(int lane, int i) {
  return 8 * i + lane / 8 + 4 * (lane % 8 / 4);
}
SM70OPS_HOST_DEVICE inline int piece_dim(int lane) { return lane % kPiecesPerKey * 8; }

}  // namespace sm70ops::qsa_index
