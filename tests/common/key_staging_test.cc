// The scorer's key staging (kernels/qsa_index/key_staging.h): a slice's 32 keys x kStageDims
// dimensions are moved once each, every warp load reads whole 64-byte runs of keys, and each
// quarter warp's 16-byte stores (one shared-memory wavefront) touch 8 distinct 16-byte bank
// groups at the staged rows' pitch.
#include "kernels/qsa_index/key_staging.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace {

using namespace sm70ops::qsa_index;

TEST(KeyStaging, EveryPieceOnce) {
  std::set<std::pair<int, int>> pieces;
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < kStagePieces; ++i) {
      const int key = piece_key(lane, i), dim = piece_dim(lane);
      EXPECT_GE(key, 0);
      EXPECT_LT(key, kKeysPerWarp);
      EXPECT_EQ(dim % 8, 0);
      EXPECT_LT(dim, kStageDims);
      EXPECT_TRUE(pieces.insert({key, dim}).second) << "lane " << lane << " piece " << i;
    }
  }
  EXPECT_EQ(int(pieces.size()), kKeysPerWarp * kPiecesPerKey);
}

// Each load instruction i covers whole key slices: 32 lanes, 8 keys, all their pieces.
TEST(KeyStaging, LoadsTakeWholeKeySlices) {
  for (int i = 0; i < kStagePieces; ++i) {
    std::set<int> keys;
    for (int lane = 0; lane < 32; ++lane) keys.insert(piece_key(lane, i));
    EXPECT_EQ(int(keys.size()), 32 / kPiecesPerKey) << "load " << i;
  }
}

TEST(KeyStaging, QuarterWarpStoresAreConflictFree) {
  constexpr int kRowBytes = kKeyLd * 2;
  for (int i = 0; i < kStagePieces; ++i) {
    for (int quarter = 0; quarter < 4; ++quarter) {
      std::set<int> bank_groups;  // 16-byte groups of the 128 bytes the 32 banks cover
      for (int lane = 8 * quarter; lane < 8 * quarter + 8; ++lane) {
        const int byte = piece_key(lane, i) * kRowBytes + piece_dim(lane) * 2;
        bank_groups.insert(byte % 128 / 16);
      }
      EXPECT_EQ(int(bank_groups.size()), 8) << "load " << i << ", quarter " << quarter;
    }
  }
}

}  // namespace
