// The MoE's M tiling (kernels/nvfp4_moe/tiling.h): hand-written counts around the tile sizes,
// every count up to 5000 cut into tiles that cover it exactly (big tiles over 64 rows, the small
// one at most 64), and the table sizes: reached by experts of 128 q + 65 rows (also when only a
// few of many experts get any) and one-row experts, never exceeded by random routings of up to
// 262144 pairs. Then the warps' shares of an N tile with any multiple of 16 columns: every
// (column fragment, k-substep) that holds weights computed exactly once, none past the columns,
// and the work spread over all four warp columns where one or two column groups hold it.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/nvfp4_moe/tiling.h"

namespace {

using namespace sm70ops::nvfp4_moe;

// Rows of each of the expert's tiles: big tiles in order, then the small one if any.
std::vector<int> TileRows(int count) {
  std::vector<int> rows;
  for (int i = 0; i < big_tiles(count); ++i) rows.push_back(big_tile_rows(count, i));
  if (small_rows(count) > 0) rows.push_back(small_rows(count));
  return rows;
}

TEST(MoeTiling, HandWritten) {
  EXPECT_EQ(TileRows(0), std::vector<int>{});
  EXPECT_EQ(TileRows(1), std::vector<int>{1});
  EXPECT_EQ(TileRows(64), std::vector<int>{64});
  EXPECT_EQ(TileRows(65), std::vector<int>{65});  // one big tile, not 64 + 1
  EXPECT_EQ(TileRows(128), std::vector<int>{128});
  EXPECT_EQ(TileRows(129), (std::vector<int>{128, 1}));
  EXPECT_EQ(TileRows(192), (std::vector<int>{128, 64}));
  EXPECT_EQ(TileRows(193), (std::vector<int>{128, 65}));
  EXPECT_EQ(TileRows(257), (std::vector<int>{128, 128, 1}));
  EXPECT_EQ(small_tile_m(1), kNarrowTileM);
  EXPECT_EQ(small_tile_m(32), kNarrowTileM);
  EXPECT_EQ(small_tile_m(33), kWideTileM);
  EXPECT_EQ(small_tile_m(64), kWideTileM);
}

TEST(MoeTiling, TilesCoverEveryCountExactly) {
  for (int count = 0; count <= 5000; ++count) {
    const std::vector<int> rows = TileRows(count);
    int covered = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      covered += rows[i];
      const bool small = small_rows(count) > 0 && i + 1 == rows.size();
      if (small) {
        EXPECT_GE(rows[i], 1) << count;
        EXPECT_LE(rows[i], kWideTileM) << count;
      } else {
        EXPECT_GT(rows[i], kWideTileM) << count;  // the GEMMs' split of big tiles needs it
        EXPECT_LE(rows[i], kBigTileM) << count;
      }
    }
    EXPECT_EQ(covered, count);
    // Counted the long way: whole 128-row tiles, and one more for a rest of more than 64.
    EXPECT_EQ(big_tiles(count), count / kBigTileM + (count % kBigTileM > kWideTileM)) << count;
  }
}

// The bounds are reached: every expert with 128 q + 65 rows fills the big table, with one row
// the small one.
TEST(MoeTiling, TablesAreTight) {
  for (int experts : {1, 7, 512}) {
    for (int q : {0, 1, 3}) {
      const int count = q * kBigTileM + kWideTileM + 1;
      EXPECT_EQ(experts * big_tiles(count), max_big_tiles(experts * count, experts)) << q;
    }
    EXPECT_EQ(experts * (small_rows(1) > 0), max_small_tiles(experts, experts));
  }
  // Ten of 512 experts routed, 65 rows each: min(E, pairs / 65) is the routed ten, not E.
  EXPECT_EQ(10, max_big_tiles(10 * (kWideTileM + 1), 512));
  // Three one-row pairs over 512 experts: at most three small tiles, not E.
  EXPECT_EQ(3, max_small_tiles(3, 512));
}

TEST(MoeTiling, TablesHoldRandomRoutings) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int experts = std::uniform_int_distribution<int>(1, 512)(rng);
    const int pairs = std::uniform_int_distribution<int>(1, 262144)(rng);
    // Skewed counts: each pair goes to a random expert among a random prefix of them.
    const int used = std::uniform_int_distribution<int>(1, experts)(rng);
    std::vector<int> counts(experts, 0);
    std::uniform_int_distribution<int> pick(0, used - 1);
    for (int i = 0; i < pairs; ++i) ++counts[pick(rng)];
    int big = 0, small = 0;
    for (int c : counts) big += big_tiles(c), small += small_rows(c) > 0;
    EXPECT_LE(big, max_big_tiles(pairs, experts)) << experts << " experts, " << pairs << " pairs";
    EXPECT_LE(small, max_small_tiles(pairs, experts)) << experts << " experts, " << pairs;
  }
}

// Columns of an N tile: 128 column pairs (W13, halves 2) or 256 rows (W2).
int TileColumns(int halves) { return kShareColumns * kShareFrags * 16 / halves; }

// Fragment f of a warp computing column group g: its first column.
int FragColumn(int group, int f, int halves) {
  return group * kShareFrags / halves * 16 + (halves == 2 ? f % 2 : f) * 16;
}

TEST(MoeTiling, NTileSharesCoverEachColumnAndSubstepOnce) {
  for (int halves : {1, 2}) {
    for (int cols = 16; cols <= TileColumns(halves); cols += 16) {
      // times[column fragment][substep]: how many warps compute it (W13: gate and up together)
      std::vector<std::vector<int>> times(TileColumns(halves) / 16,
                                          std::vector<int>(kShareSubsteps, 0));
      for (int wn = 0; wn < kShareColumns; ++wn) {
        const NTileShare s = n_tile_share(cols, wn, halves);
        EXPECT_EQ(kShareColumns % s.split, 0);
        for (int f = 0; f < kShareFrags; ++f) {
          if (!(s.frags >> f & 1) || (halves == 2 && f >= 2)) continue;
          const int col = FragColumn(s.group, f, halves);
          EXPECT_LT(col, cols) << "fragment past the columns, cols " << cols << ", warp " << wn;
          for (int i = 0; i < kShareSubsteps; ++i) times[col / 16][i] += s.substeps >> i & 1;
        }
      }
      for (int c = 0; c < cols / 16; ++c) {
        for (int i = 0; i < kShareSubsteps; ++i) {
          EXPECT_EQ(times[c][i], 1) << "halves " << halves << ", cols " << cols << ", fragment "
                                    << c << ", substep " << i;
        }
      }
    }
  }
}

// The warps of one column group split K: the one whose index is the group's gets the others'
// sums, so every warp of a group has the group's fragments.
TEST(MoeTiling, NTileShareSplitsKOverEveryWarpColumn) {
  for (int halves : {1, 2}) {
    const int group_cols = kShareFrags / halves * 16;
    for (int cols = 16; cols <= TileColumns(halves); cols += 16) {
      const int groups = (cols + group_cols - 1) / group_cols;
      int busy = 0;
      for (int wn = 0; wn < kShareColumns; ++wn) {
        const NTileShare s = n_tile_share(cols, wn, halves);
        busy += s.substeps != 0;
        EXPECT_EQ(s.frags, n_tile_share(cols, s.group, halves).frags);
        EXPECT_EQ(s.split > 1, groups <= kShareColumns / 2) << cols;
      }
      EXPECT_EQ(busy, groups == 3 ? 3 : kShareColumns) << "halves " << halves << ", cols " << cols;
    }
  }
  // A full tile: warp column wn, every substep and fragment.
  for (int wn = 0; wn < kShareColumns; ++wn) {
    const NTileShare s = n_tile_share(TileColumns(2), wn, 2);
    EXPECT_EQ(s.group, wn);
    EXPECT_EQ(s.split, 1);
    EXPECT_EQ(s.substeps, (1u << kShareSubsteps) - 1);
    EXPECT_EQ(s.frags, (1u << kShareFrags) - 1);
  }
  // I 160, W13's last tile: 32 column pairs in one group, each warp column one substep.
  for (int wn = 0; wn < kShareColumns; ++wn) {
    const NTileShare s = n_tile_share(32, wn, 2);
    EXPECT_EQ(s.group, 0);
    EXPECT_EQ(s.split, 4);
    EXPECT_EQ(s.substeps, 1u << wn);
    EXPECT_EQ(s.frags, 0xfu);
  }
}

}  // namespace
