// last_at_most against a linear scan, on the shapes the kernels give it: request starts (ties from
// empty requests), expert tile starts, window prefixes; one element; values below and above all.
#include "kernels/common/search.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

int LinearLastAtMost(const std::vector<int32_t> &sorted, int value) {
  int last = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] <= value) last = static_cast<int>(i);
  }
  return last;
}

TEST(LastAtMost, HandWritten) {
  const std::vector<int32_t> starts = {0, 5, 5, 5, 9, 20};  // empty entries share a start
  EXPECT_EQ(sm70ops::last_at_most(starts.data(), 6, 0), 0);
  EXPECT_EQ(sm70ops::last_at_most(starts.data(), 6, 4), 0);
  EXPECT_EQ(sm70ops::last_at_most(starts.data(), 6, 5), 3);  // the last of the ties
  EXPECT_EQ(sm70ops::last_at_most(starts.data(), 6, 8), 3);
  EXPECT_EQ(sm70ops::last_at_most(starts.data(), 6, 9), 4);
  EXPECT_EQ(sm70ops::last_at_most(starts.data(), 6, 1000), 5);
  EXPECT_EQ(sm70ops::last_at_most(starts.data(), 6, -1), 0);  // below every entry: 0
  EXPECT_EQ(sm70ops::last_at_most(starts.data(), 1, 7), 0);
  EXPECT_EQ(sm70ops::last_at_most(starts.data(), 4, 7), 3);  // only the first n entries count
}

TEST(LastAtMost, RandomAgainstLinearScan) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 70);
    std::vector<int32_t> sorted(n);
    int32_t v = static_cast<int32_t>(rng() % 5);
    for (auto &x : sorted) x = v += static_cast<int32_t>(rng() % 4);  // steps of 0..3: ties
    const int value = static_cast<int>(rng() % (v + 6)) - 2;
    ASSERT_EQ(sm70ops::last_at_most(sorted.data(), n, value), LinearLastAtMost(sorted, value))
        << "n " << n << " value " << value;
  }
}

}  // namespace
