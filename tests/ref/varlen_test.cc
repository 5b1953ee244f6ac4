#include "tests/ref/varlen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace sm70ops::ref {
namespace {

// The GPU tests' batches: rows and lengths as asked, every used logical page on its own physical
// page of the pool, the spare pages unused, and a layout that varlen_rows accepts.
TEST(Ref_Varlen, ScatteredBatchCoversEachPageOnce) {
  std::mt19937 rng(11);
  const ScatteredBatch b = scattered_batch({{3, 70}, {5, 5}, {2, 130}, {0, 64}}, 3, rng);
  EXPECT_EQ(b.meta.query_start_loc, (std::vector<int32_t>{0, 3, 8, 10, 10}));
  EXPECT_EQ(b.meta.seq_lens, (std::vector<int32_t>{70, 5, 130, 64}));
  EXPECT_EQ(b.rows, 10);
  EXPECT_EQ(b.max_seq_len, 130);
  EXPECT_EQ(b.max_query_len, 5);
  EXPECT_EQ(b.meta.max_pages, 3);
  const int used = 2 + 1 + 3 + 1;
  EXPECT_EQ(b.num_pages, used + 3);
  std::vector<int32_t> physical;
  for (size_t r = 0; r < b.meta.seq_lens.size(); ++r) {
    for (int p = 0; p < b.meta.max_pages; ++p) {
      const int32_t page = b.meta.block_table[r * b.meta.max_pages + p];
      if (p * b.meta.page_size < b.meta.seq_lens[r]) {
        EXPECT_TRUE(page >= 0 && page < b.num_pages) << "request " << r << " page " << p;
        physical.push_back(page);
      } else {
        EXPECT_EQ(page, -1) << "request " << r << " page " << p;
      }
    }
  }
  std::sort(physical.begin(), physical.end());
  EXPECT_EQ(std::adjacent_find(physical.begin(), physical.end()), physical.end());
  EXPECT_EQ(int(physical.size()), used);
  EXPECT_EQ(int(varlen_rows(b.meta).size()), b.rows);
}

// Different generators scatter differently: logical pages are not physical ones.
TEST(Ref_Varlen, ScatteredBatchShuffles) {
  std::mt19937 a(1), b(2);
  const ScatteredBatch x = scattered_batch({{1, 4096}}, 2, a);
  const ScatteredBatch y = scattered_batch({{1, 4096}}, 2, b);
  EXPECT_NE(x.meta.block_table, y.meta.block_table);
}

// At 16-token pages the same requests take ceil(L / 16) pages each, and a position maps to its
// page's slot.
TEST(Ref_Varlen, ScatteredBatchAtSixteenTokenPages) {
  std::mt19937 rng(5);
  const ScatteredBatch b = scattered_batch({{3, 70}, {2, 16}, {1, 17}}, 2, rng, 16);
  EXPECT_EQ(b.meta.page_size, 16);
  EXPECT_EQ(b.meta.max_pages, 5);
  EXPECT_EQ(b.num_pages, 5 + 1 + 2 + 2);
  const int32_t page = b.meta.block_table[2 * b.meta.max_pages + 1];  // request 2, tokens 16..31
  EXPECT_EQ(physical_token(b.meta, 2, 16), int64_t{page} * 16);
  EXPECT_EQ(b.meta.block_table[1 * b.meta.max_pages + 1], -1);  // request 1 fits one page
  EXPECT_NO_THROW(varlen_rows(b.meta));
}

}  // namespace
}  // namespace sm70ops::ref
