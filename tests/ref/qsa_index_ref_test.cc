#include "tests/ref/qsa_index_ref.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "tests/ref/half.h"
#include "tests/ref/varlen.h"
#include "tests/ref/varlen_fixture.h"

namespace sm70ops::ref {
namespace {

using Positions = std::vector<int32_t>;

// The definition of top-k: every chosen position beats every other one on (score, -position).
bool is_topk(const std::vector<double>& scores, const Positions& chosen, int k) {
  const size_t want = std::min<size_t>(k, scores.size());
  if (chosen.size() != want) return false;
  std::vector<bool> in(scores.size(), false);
  for (int32_t p : chosen) in[p] = true;
  for (size_t i = 0; i < scores.size(); ++i) {
    for (size_t j = 0; j < scores.size(); ++j) {
      const bool beats = scores[i] > scores[j] || (scores[i] == scores[j] && i < j);
      if (in[i] && !in[j] && !beats) return false;
    }
  }
  return true;
}

TEST(Ref_QsaIndex, VarlenRowsOfThreeRequests) {
  const std::vector<RowInfo> rows = varlen_rows(three_requests());
  const std::vector<int> requests = {0, 0, 0, 1, 1, 1, 1, 1, 2, 2};
  const std::vector<int> positions = {67, 68, 69, 0, 1, 2, 3, 4, 128, 129};
  ASSERT_EQ(rows.size(), 10u);
  for (size_t t = 0; t < rows.size(); ++t) {
    EXPECT_EQ(rows[t].request, requests[t]) << t;
    EXPECT_EQ(rows[t].pos, positions[t]) << t;
    EXPECT_EQ(rows[t].len, positions[t] + 1) << t;
  }
  EXPECT_EQ(physical_token(three_requests(), 2, 129), 2 * kPageSize + 1);
}

TEST(Ref_QsaIndex, VarlenRejectsInconsistentMetadata) {
  Varlen short_context = three_requests();
  short_context.seq_lens[1] = 4;  // 5 query rows cannot fit in 4 tokens
  EXPECT_THROW(varlen_rows(short_context), std::invalid_argument);
  Varlen narrow_table = three_requests();
  narrow_table.seq_lens[2] = 3 * kPageSize + 1;
  EXPECT_THROW(varlen_rows(narrow_table), std::invalid_argument);
}

// One row at position 2 reading physical page 1; page 0 holds poison.
TEST(Ref_QsaIndex, ScoresComputedByHand) {
  Varlen meta{{0, 1}, {3}, {1}, 1};
  std::vector<uint16_t> k_index(2 * kPageSize * kIndexDim, float_to_half(1000.0f));
  for (int j = 0; j < 3; ++j) {
    uint16_t* key = k_index.data() + (kPageSize + j) * kIndexDim;
    std::fill(key, key + kIndexDim, 0);
    key[0] = float_to_half(j - 1.0f);  // dot with e0: j - 1
    key[1] = float_to_half(2.0f);      // dot with e1: 2
  }
  std::vector<uint16_t> q(kIndexHeads * kIndexDim, 0);
  q[0] = float_to_half(1.0f);               // head 0: j - 1
  q[kIndexDim + 1] = float_to_half(1.0f);   // head 1: 2
  q[2 * kIndexDim] = float_to_half(-1.0f);  // head 2: 1 - j
  q[3 * kIndexDim] = float_to_half(0.5f);   // head 3: (j + 1) / 2
  q[3 * kIndexDim + 1] = float_to_half(0.5f);
  const std::vector<float> w = {1.0f, 0.5f, 2.0f, -1.0f};
  // s[j] = relu(j-1) + 0.5 * 2 + 2 * relu(1-j) - relu((j+1)/2)
  const std::vector<std::vector<double>> expected = {{2.5, 0.0, 0.5}};
  EXPECT_EQ(qsa_index_scores(q, w, k_index, meta), expected);
}

TEST(Ref_QsaIndex, TopkTiesGoToLowerPositions) {
  const std::vector<double> scores = {1, 3, 3, 2, 3};
  EXPECT_EQ(qsa_index_topk(scores, 2), (Positions{1, 2}));
  EXPECT_EQ(qsa_index_topk(scores, 3), (Positions{1, 2, 4}));
  EXPECT_EQ(qsa_index_topk(scores, 4), (Positions{1, 2, 3, 4}));
  EXPECT_EQ(qsa_index_topk({0, 0, 0, 0}, 2), (Positions{0, 1}));
}

TEST(Ref_QsaIndex, TopkShortRowsAndKOfOne) {
  EXPECT_EQ(qsa_index_topk({0.5, -1, 2}, 5), (Positions{0, 1, 2}));  // L < K
  EXPECT_EQ(qsa_index_topk({5, 1, 3}, 3), (Positions{0, 1, 2}));     // L == K
  EXPECT_EQ(qsa_index_topk({0.5, 2, 2, -1}, 1), (Positions{1}));     // K == 1, tie
  EXPECT_EQ(qsa_index_topk({-3, -1, -2}, 1), (Positions{1}));        // negative scores
  EXPECT_EQ(qsa_index_topk({7}, 1), (Positions{0}));                 // the first row, L = 1
}

// Small integer scores make ties common; the definition is checked for every k.
TEST(Ref_QsaIndex, TopkMatchesDefinitionOnRandomTies) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(0, 3), length(1, 12);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> scores(length(rng));
    for (double& s : scores) s = value(rng);
    for (int k = 1; k <= static_cast<int>(scores.size()) + 1; ++k) {
      ASSERT_TRUE(is_topk(scores, qsa_index_topk(scores, k), k)) << trial << " k=" << k;
    }
  }
}

TEST(Ref_QsaIndex, ExpandBuildsSortedPagesAndMasks) {
  // Unordered input with -1 padding; page 1 holds no selected token.
  const Expansion e = qsa_index_expand({129, 5, -1, 0, 63, 128, -1});
  EXPECT_EQ(e.count, 2);
  EXPECT_EQ(e.blocks, (Positions{0, 2}));
  EXPECT_EQ(e.masks, (std::vector<uint64_t>{(1ull << 0) | (1ull << 5) | (1ull << 63), 0b11}));
  const Expansion none = qsa_index_expand({-1, -1});
  EXPECT_EQ(none.count, 0);
  EXPECT_TRUE(none.blocks.empty());
}

TEST(Ref_QsaIndex, PackSelectionPadsAndRejectsNarrowNb) {
  const std::vector<Expansion> rows = {qsa_index_expand({0, 64, 130}), qsa_index_expand({3})};
  const Selection sel = pack_selection(rows, 4);
  EXPECT_EQ(sel.blocks, (Positions{0, 1, 2, -1, 0, -1, -1, -1}));
  EXPECT_EQ(sel.masks, (std::vector<uint64_t>{1, 1, 4, 0, 8, 0, 0, 0}));
  EXPECT_EQ(sel.count, (Positions{3, 1}));
  EXPECT_THROW(pack_selection(rows, 2), std::invalid_argument);
}

// The whole op on three requests: each row's top-k is the definition's, and the expansion holds
// exactly the selected tokens (so nothing past pos, even on a partly valid page).
TEST(Ref_QsaIndex, EndToEndOnThreeRequests) {
  const Varlen meta = three_requests();
  std::mt19937 rng(11);
  const int rows = num_rows(meta), k = 16, nb = 3;
  const std::vector<uint16_t> q = random_halves(rows * kIndexHeads * kIndexDim, rng);
  const std::vector<uint16_t> keys = random_halves(kThreeRequestPages * kPageSize * kIndexDim, rng);
  const std::vector<float> w = from_half(random_halves(rows * kIndexHeads, rng));
  const IndexResult out = qsa_index_ref(q, w, keys, meta, k, nb);
  const std::vector<RowInfo> info = varlen_rows(meta);
  for (int t = 0; t < rows; ++t) {
    ASSERT_EQ(out.scores[t].size(), static_cast<size_t>(info[t].len));
    const auto row = out.topk_idx.begin() + t * k;
    const int valid = std::min(k, info[t].len);
    const Positions chosen(row, row + valid);
    EXPECT_TRUE(is_topk(out.scores[t], chosen, k)) << t;
    EXPECT_TRUE(std::all_of(row + valid, row + k, [](int32_t p) { return p == -1; })) << t;
    int bits = 0;
    for (int i = 0; i < out.selection.count[t]; ++i) {
      const int32_t page = out.selection.blocks[t * nb + i];
      const uint64_t mask = out.selection.masks[t * nb + i];
      for (int b = 0; b < kPageSize; ++b) {
        if ((mask >> b) & 1) {
          ++bits;
          EXPECT_TRUE(std::binary_search(chosen.begin(), chosen.end(), page * kPageSize + b));
        }
      }
    }
    EXPECT_EQ(bits, valid) << t;
  }
  // Request 1 (rows 3..7) has L <= 5 < K: its one partly valid page holds exactly tokens 0..pos.
  for (int t = 3; t < 8; ++t) {
    EXPECT_EQ(out.selection.count[t], 1);
    EXPECT_EQ(out.selection.blocks[t * nb], 0);
    EXPECT_EQ(out.selection.masks[t * nb], (uint64_t{1} << info[t].len) - 1);
  }
}

TEST(Ref_QsaIndex, JudgeAcceptsIdenticalAndRejectsMalformed) {
  const std::vector<double> scores = {1, 4, 2, 3};
  const auto judge = [&](Positions gpu, int k) {
    return judge_topk_row(gpu.data(), k, scores).allowed;
  };
  EXPECT_TRUE(judge({1, 3}, 2));
  EXPECT_FALSE(judge({0, 1}, 2));           // a different set, no near tie
  EXPECT_FALSE(judge({3, 1}, 2));           // not ascending
  EXPECT_FALSE(judge({1, 4}, 2));           // past L
  EXPECT_TRUE(judge({0, 1, 2, 3, -1}, 5));  // L < K, padded
  EXPECT_FALSE(judge({0, 1, 2, 3, 0}, 5));  // bad padding
  EXPECT_FALSE(judge({0, 1, 2, -1, -1}, 5));
}

TEST(Ref_QsaIndex, JudgeExcusesOnlyNearTiedSwaps) {
  const std::vector<std::vector<double>> scores = {
      {1.0, 0.9995, 0.5},  // K-th and (K+1)-th within 1e-3: a swap is excused
      {1.0, 0.99, 0.5},    // not a near tie
      {1.0, 0.9995, 0.5},  // near tie, but position 2 is far from the K-th score
      {2.0, 1.0, 1.0},     // exact tie, GPU agrees with the lower position
  };
  const Positions gpu = {1, 1, 2, 0};
  const TopkReport report = judge_topk(gpu, 1, scores);
  EXPECT_EQ(report.excused_rows, (std::vector<int>{0}));
  EXPECT_EQ(report.failed_rows, (std::vector<int>{1, 2}));
  EXPECT_FALSE(report.ok());
  const TopkVerdict tie = judge_topk_row(gpu.data() + 3, 1, {2.0, 1.0, 1.0});
  EXPECT_TRUE(tie.same_set);
  EXPECT_FALSE(tie.near_tie);
  const TopkVerdict exact_tie = judge_topk_row(gpu.data() + 2, 1, {1.0, 1.0, 1.0});
  EXPECT_TRUE(exact_tie.near_tie);
  EXPECT_TRUE(exact_tie.allowed);
}

}  // namespace
}  // namespace sm70ops::ref
