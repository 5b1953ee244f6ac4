// The MoE's M tiling (kernels/nvfp4_moe/tiling.h): hand-written counts around the tile size,
// every count up to 20000 cut into tiles that cover it exactly with at most 160 rows each and
// the fewest whole fragments there are, and the table size: reached by experts of 160 q + 1 rows
// (also when only a few of many experts get any), never exceeded by random routings of up to
// 262144 pairs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/nvfp4_moe/tiling.h"

namespace {

using namespace sm70ops::nvfp4_moe;

std::vector<int> TileRows(int count) {
  std::vector<int> rows;
  for (int i = 0; i < m_tiles(count); ++i) rows.push_back(m_tile_rows(count, i));
  return rows;
}

int Fragments(int rows) { return (rows + kRowFrag - 1) / kRowFrag; }

TEST(MoeTiling, HandWritten) {
  EXPECT_EQ(TileRows(0), std::vector<int>{});
  EXPECT_EQ(TileRows(1), std::vector<int>{1});
  EXPECT_EQ(TileRows(160), std::vector<int>{160});  // the model's rows an expert at T 8192
  EXPECT_EQ(TileRows(161), (std::vector<int>{96, 65}));
  EXPECT_EQ(TileRows(200), (std::vector<int>{112, 88}));
  EXPECT_EQ(TileRows(320), (std::vector<int>{160, 160}));
  EXPECT_EQ(TileRows(321), (std::vector<int>{112, 112, 97}));
  EXPECT_EQ(TileRows(1601),
            (std::vector<int>{160, 160, 160, 160, 160, 160, 160, 160, 160, 160, 1}));
}

TEST(MoeTiling, TilesCoverEveryCountExactly) {
  for (int count = 0; count <= 20000; ++count) {
    const std::vector<int> rows = TileRows(count);
    int covered = 0, frags = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_GE(rows[i], 1) << count;
      EXPECT_LE(rows[i], kTileM) << count;
      if (i + 1 < rows.size()) {
        EXPECT_EQ(rows[i] % kRowFrag, 0) << count;
      }
      covered += rows[i], frags += Fragments(rows[i]);
    }
    EXPECT_EQ(covered, count);
    EXPECT_EQ(int(rows.size()), (count + kTileM - 1) / kTileM) << count;
    EXPECT_EQ(frags, Fragments(count)) << count;  // no fragment more than the rows need
    // The table's order: an expert's size class is its largest tile's fragments.
    const int largest = rows.empty() ? 0 : *std::max_element(rows.begin(), rows.end());
    EXPECT_EQ(m_tile_frags(count), Fragments(largest)) << count;
    EXPECT_LE(m_tile_frags(count), kMaxTileFrags) << count;
  }
}

// The bound is reached: every expert with 160 q + 1 rows.
TEST(MoeTiling, TableIsTight) {
  for (int experts : {1, 7, 512}) {
    for (int q : {0, 1, 3}) {
      const int count = q * kTileM + 1;
      EXPECT_EQ(experts * m_tiles(count), max_m_tiles(experts * count, experts)) << q;
    }
  }
  // Ten of 512 experts routed, one row each: min(E, pairs) is the routed ten, not E.
  EXPECT_EQ(10, max_m_tiles(10, 512));
}

TEST(MoeTiling, TableHoldsRandomRoutings) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int experts = std::uniform_int_distribution<int>(1, 512)(rng);
    const int pairs = std::uniform_int_distribution<int>(1, 262144)(rng);
    // Skewed counts: each pair goes to a random expert among a random prefix of them.
    const int used = std::uniform_int_distribution<int>(1, experts)(rng);
    std::vector<int> counts(experts, 0);
    std::uniform_int_distribution<int> pick(0, used - 1);
    for (int i = 0; i < pairs; ++i) ++counts[pick(rng)];
    int tiles = 0;
    for (int c : counts) tiles += m_tiles(c);
    EXPECT_LE(tiles, max_m_tiles(pairs, experts)) << experts << " experts, " << pairs << " pairs";
  }
}

}  // namespace
