#include "tests/ref/qsa_index_ref.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// The definition of top-k: every chosen index beats every other one on (score, -index).
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

// One key of 128 dims: `a` in dim 0 and `b` in dim 1, zeros elsewhere.
void set_key(std::vector<uint16_t>& k_index, int64_t key, float a, float b) {
  uint16_t* k = k_index.data() + key * kIndexDim;
  std::fill(k, k + kIndexDim, 0);
  k[0] = float_to_half(a);
  k[1] = float_to_half(b);
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
  EXPECT_EQ(physical_token(three_requests(), 2, 129), 2 * 64 + 1);
  Varlen sixteen = three_requests();
  sixteen.page_size = 16;  // the same table now maps 16-token pages
  EXPECT_EQ(physical_token(sixteen, 2, 33), 2 * 16 + 1);
}

TEST(Ref_QsaIndex, VarlenRejectsInconsistentMetadata) {
  Varlen short_context = three_requests();
  short_context.seq_lens[1] = 4;  // 5 query rows cannot fit in 4 tokens
  EXPECT_THROW(varlen_rows(short_context), std::invalid_argument);
  Varlen narrow_table = three_requests();
  narrow_table.seq_lens[2] = 3 * 64 + 1;
  EXPECT_THROW(varlen_rows(narrow_table), std::invalid_argument);
  Varlen small_pages = three_requests();
  small_pages.page_size = 16;  // 3 pages of 16 hold 48 tokens, request 0 has 70
  EXPECT_THROW(varlen_rows(small_pages), std::invalid_argument);
}

// One row at position 2 reading physical page 1; page 0 holds poison.
TEST(Ref_QsaIndex, ScoresComputedByHand) {
  IndexInputs in;
  in.meta = Varlen{{0, 1}, {3}, {1}, 1, 64};
  in.k_index.assign(2 * 64 * kIndexDim, float_to_half(1000.0f));
  for (int j = 0; j < 3; ++j) set_key(in.k_index, 64 + j, j - 1.0f, 2.0f);  // dots j-1 and 2
  in.q.assign(kIndexHeads * kIndexDim, 0);
  in.q[0] = float_to_half(1.0f);               // head 0: j - 1
  in.q[kIndexDim + 1] = float_to_half(1.0f);   // head 1: 2
  in.q[2 * kIndexDim] = float_to_half(-1.0f);  // head 2: 1 - j
  in.q[3 * kIndexDim] = float_to_half(0.5f);   // head 3: (j + 1) / 2
  in.q[3 * kIndexDim + 1] = float_to_half(0.5f);
  in.w = {1.0f, 0.5f, 2.0f, -1.0f};
  // s[j] = relu(j-1) + 0.5 * 2 + 2 * relu(1-j) - relu((j+1)/2)
  EXPECT_EQ(qsa_index_scores(in), (std::vector<std::vector<double>>{{2.5, 0.0, 0.5}}));
  in.w.clear();  // weight-free: every head weighs 1/sqrt(128)
  const double u = 1.0 / std::sqrt(128.0);
  const std::vector<double> uniform = {u * (0 + 2 + 1 + 0.5), u * (0 + 2 + 0 + 1),
                                       u * (1 + 2 + 0 + 1.5)};
  const std::vector<double> got = qsa_index_scores(in)[0];
  ASSERT_EQ(got.size(), 3u);
  for (int j = 0; j < 3; ++j) EXPECT_DOUBLE_EQ(got[j], uniform[j]) << j;
}

// P = 16 with c = 4: four keys a page. A row of 11 tokens has G = 2 complete groups (tokens
// 0..7) and a tail of 3; a row of 21 has 5 groups, the fifth on the second page. Group g's key
// holds g + 1 in dim 0, so each score says which key was read.
TEST(Ref_QsaIndex, GroupScoresAtFourKeysAPage) {
  IndexInputs in;
  in.ratio = 4;
  in.meta = Varlen{{0, 1, 2}, {11, 21}, {3, -1, 2, 0}, 2, 16};
  in.k_index.assign(4 * 4 * kIndexDim, float_to_half(-500.0f));  // 4 pages of 4 keys, poisoned
  for (int g = 0; g < 4; ++g) set_key(in.k_index, 3 * 4 + g, 1.0f + g, 0.0f);   // request 0
  for (int g = 0; g < 4; ++g) set_key(in.k_index, 2 * 4 + g, 10.0f + g, 0.0f);  // request 1
  set_key(in.k_index, 0 * 4 + 0, 20.0f, 0.0f);  // request 1, group 4 (page 1, key 0)
  in.q.assign(2 * kIndexHeads * kIndexDim, 0);
  for (int t = 0; t < 2; ++t) in.q[t * kIndexHeads * kIndexDim] = float_to_half(1.0f);  // head 0
  in.w = {2.0f, 0, 0, 0, 1.0f, 0, 0, 0};
  const auto scores = qsa_index_scores(in);
  EXPECT_EQ(scores[0], (std::vector<double>{2.0, 4.0}));
  EXPECT_EQ(scores[1], (std::vector<double>{10.0, 11.0, 12.0, 13.0, 20.0}));
}

TEST(Ref_QsaIndex, TopkTiesGoToLowerIndices) {
  const std::vector<double> scores = {1, 3, 3, 2, 3};
  EXPECT_EQ(qsa_index_topk(scores, 2), (Positions{1, 2}));
  EXPECT_EQ(qsa_index_topk(scores, 3), (Positions{1, 2, 4}));
  EXPECT_EQ(qsa_index_topk(scores, 4), (Positions{1, 2, 3, 4}));
  EXPECT_EQ(qsa_index_topk({0, 0, 0, 0}, 2), (Positions{0, 1}));
}

TEST(Ref_QsaIndex, TopkShortRowsAndKOfOne) {
  EXPECT_EQ(qsa_index_topk({0.5, -1, 2}, 5), (Positions{0, 1, 2}));  // G < K
  EXPECT_EQ(qsa_index_topk({5, 1, 3}, 3), (Positions{0, 1, 2}));     // G == K
  EXPECT_EQ(qsa_index_topk({0.5, 2, 2, -1}, 1), (Positions{1}));     // K == 1, tie
  EXPECT_EQ(qsa_index_topk({-3, -1, -2}, 1), (Positions{1}));        // negative scores
  EXPECT_EQ(qsa_index_topk({7}, 1), (Positions{0}));                 // one group
  EXPECT_TRUE(qsa_index_topk({}, 4).empty());                        // no complete group
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

TEST(Ref_QsaIndex, TokenSetIsGroupsThenTail) {
  EXPECT_EQ(qsa_index_token_set({}, 4, 3), (Positions{0, 1, 2}));  // L < c: the tail alone
  EXPECT_EQ(qsa_index_token_set({0, 1}, 4, 8), (Positions{0, 1, 2, 3, 4, 5, 6, 7}));  // no tail
  EXPECT_EQ(qsa_index_token_set({1}, 4, 10), (Positions{4, 5, 6, 7, 8, 9}));  // one group, tail
  EXPECT_EQ(qsa_index_token_set({0, 1}, 2, 5), (Positions{0, 1, 2, 3, 4}));   // c = 2, tail 1
  EXPECT_EQ(qsa_index_token_set({3, 5}, 1, 9), (Positions{3, 5}));            // c = 1: no tail ever
}

TEST(Ref_QsaIndex, ExpandBuildsSortedPagesAndMasks) {
  // Unordered input with -1 padding; page 1 holds no selected token.
  const Expansion e = qsa_index_expand({129, 5, -1, 0, 63, 128, -1}, 64);
  EXPECT_EQ(e.count, 2);
  EXPECT_EQ(e.blocks, (Positions{0, 2}));
  EXPECT_EQ(e.masks, (std::vector<uint64_t>{(1ull << 0) | (1ull << 5) | (1ull << 63), 0b11}));
  // The same tokens at 16-token pages.
  const Expansion small = qsa_index_expand({129, 5, -1, 0, 63, 128, -1}, 16);
  EXPECT_EQ(small.blocks, (Positions{0, 3, 8}));
  EXPECT_EQ(small.masks, (std::vector<uint64_t>{(1ull << 0) | (1ull << 5), 1ull << 15, 0b11}));
  const Expansion none = qsa_index_expand({-1, -1}, 64);
  EXPECT_EQ(none.count, 0);
  EXPECT_TRUE(none.blocks.empty());
}

TEST(Ref_QsaIndex, PackSelectionPadsAndRejectsNarrowNb) {
  const std::vector<Expansion> rows = {qsa_index_expand({0, 64, 130}, 64),
                                       qsa_index_expand({3}, 64)};
  const Selection sel = pack_selection(rows, 4);
  EXPECT_EQ(sel.blocks, (Positions{0, 1, 2, -1, 0, -1, -1, -1}));
  EXPECT_EQ(sel.masks, (std::vector<uint64_t>{1, 1, 4, 0, 8, 0, 0, 0}));
  EXPECT_EQ(sel.count, (Positions{3, 1}));
  EXPECT_THROW(pack_selection(rows, 2), std::invalid_argument);
}

// Rows of one request at P 16, c 4, budget 8 tokens (2 groups): L 3 (the tail alone), 8 (= c*G,
// no tail, G = B/c: every group), 13 (G 3 > 2, tail 1) with groups 0 and 2 tied above group 1.
TEST(Ref_QsaIndex, HandCasesOfTheTokenSet) {
  IndexInputs in;
  in.ratio = 4;
  in.meta = Varlen{{0, 1, 2, 3}, {3, 8, 13}, {0, -1, -1, 0, -1, -1, 0, -1, -1}, 3, 16};
  in.k_index.assign(4 * kIndexDim, 0);
  set_key(in.k_index, 0, 1.0f, 0.0f);
  set_key(in.k_index, 1, 0.5f, 0.0f);
  set_key(in.k_index, 2, 1.0f, 0.0f);
  set_key(in.k_index, 3, 9.0f, 0.0f);  // group 3 is past every row's complete groups
  in.q.assign(3 * kIndexHeads * kIndexDim, 0);
  for (int t = 0; t < 3; ++t) in.q[t * kIndexHeads * kIndexDim] = float_to_half(1.0f);
  const IndexResult out = qsa_index_ref(in, 8, 2);
  const int width = 8 + 3;
  const auto row = [&](int t) {
    return Positions(out.topk_idx.begin() + t * width, out.topk_idx.begin() + (t + 1) * width);
  };
  EXPECT_EQ(row(0), (Positions{0, 1, 2, -1, -1, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(row(1), (Positions{0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1}));
  EXPECT_EQ(row(2), (Positions{0, 1, 2, 3, 8, 9, 10, 11, 12, -1, -1}));
  EXPECT_EQ(out.selection.count, (Positions{1, 1, 1}));
  EXPECT_EQ(out.selection.masks[0], 0b111u);
  EXPECT_EQ(out.selection.masks[2], 0xffu);
  EXPECT_EQ(out.selection.masks[4], 0x1f0fu);
}

// The whole op at P 16 and 64, c 1, 2 and 4, on scattered pages: each row's groups are the
// definition's top B/c, its set those groups' tokens then the tail, and the expansion holds
// exactly the set.
TEST(Ref_QsaIndex, EndToEndOverRatiosAndPageSizes) {
  for (int page : {16, 64}) {
    for (int ratio : {1, 2, 4}) {
      SCOPED_TRACE(testing::Message() << "P " << page << " c " << ratio);
      std::mt19937 rng(page * 10 + ratio);
      const ScatteredBatch b = scattered_batch({{5, 70}, {4, 4}, {3, 131}}, 3, rng, page);
      IndexInputs in;
      in.ratio = ratio;
      in.meta = b.meta;
      in.q = random_halves(b.rows * kIndexHeads * kIndexDim, rng);
      in.w = from_half(random_halves(b.rows * kIndexHeads, rng));
      in.k_index = random_halves(static_cast<size_t>(b.num_pages) * page / ratio * kIndexDim, rng);
      const int topk = 16, nb = 16 / ratio + 1, width = topk + ratio - 1;
      const IndexResult out = qsa_index_ref(in, topk, nb);
      const std::vector<RowInfo> info = varlen_rows(in.meta);
      for (int t = 0; t < b.rows; ++t) {
        ASSERT_EQ(out.scores[t].size(), static_cast<size_t>(info[t].len / ratio));
        const Positions groups = qsa_index_topk(out.scores[t], topk / ratio);
        EXPECT_TRUE(is_topk(out.scores[t], groups, topk / ratio)) << t;
        const Positions set = qsa_index_token_set(groups, ratio, info[t].len);
        const auto row = out.topk_idx.begin() + t * width;
        EXPECT_TRUE(std::equal(set.begin(), set.end(), row)) << t;
        EXPECT_TRUE(std::all_of(row + set.size(), row + width, [](int32_t p) { return p == -1; }));
        Positions expanded;
        for (int i = 0; i < out.selection.count[t]; ++i) {
          const int32_t pg = out.selection.blocks[t * nb + i];
          const uint64_t mask = out.selection.masks[t * nb + i];
          for (int bit = 0; bit < page; ++bit) {
            if (mask >> bit & 1) expanded.push_back(pg * page + bit);
          }
        }
        EXPECT_EQ(expanded, set) << t;
      }
    }
  }
}

TEST(Ref_QsaIndex, JudgeAcceptsIdenticalAndRejectsMalformed) {
  const std::vector<double> scores = {1, 4, 2, 3};  // groups of a 4-group row
  const auto judge = [&](Positions gpu, int topk, int ratio, int len) {
    return judge_topk_row(gpu.data(), topk, ratio, len, scores).allowed;
  };
  EXPECT_TRUE(judge({1, 3}, 2, 1, 4));
  EXPECT_FALSE(judge({0, 1}, 2, 1, 4));           // a different set, no near tie
  EXPECT_FALSE(judge({3, 1}, 2, 1, 4));           // not ascending
  EXPECT_FALSE(judge({1, 4}, 2, 1, 4));           // past L
  EXPECT_TRUE(judge({0, 1, 2, 3, -1}, 5, 1, 4));  // G < K, padded
  EXPECT_FALSE(judge({0, 1, 2, 3, 0}, 5, 1, 4));  // bad padding
  EXPECT_FALSE(judge({0, 1, 2, -1, -1}, 5, 1, 4));
  // c = 2, L = 9: groups 1 and 3 are the best two, token 8 the tail.
  EXPECT_TRUE(judge({2, 3, 6, 7, 8}, 4, 2, 9));
  EXPECT_FALSE(judge({2, 3, 6, 7, -1}, 4, 2, 9));  // the tail is missing
  EXPECT_FALSE(judge({2, 6, 7, 8, -1}, 4, 2, 9));  // half a group
  EXPECT_FALSE(judge({3, 4, 6, 7, 8}, 4, 2, 9));   // a group not at a multiple of c
}

TEST(Ref_QsaIndex, JudgeExcusesOnlyNearTiedSwaps) {
  IndexInputs in;
  in.meta = Varlen{{0, 1, 2, 3, 4}, {3, 3, 3, 3}, {0, 0, 0, 0}, 1, 64};
  const std::vector<std::vector<double>> scores = {
      {1.0, 0.9995, 0.5},  // K-th and (K+1)-th within 1e-3: a swap is excused
      {1.0, 0.99, 0.5},    // not a near tie
      {1.0, 0.9995, 0.5},  // near tie, but index 2 is far from the K-th score
      {2.0, 1.0, 1.0},     // exact tie, the GPU agrees with the lower index
  };
  const Positions gpu = {1, 1, 2, 0};
  const TopkReport report = judge_topk(gpu, 1, in, scores);
  EXPECT_EQ(report.excused_rows, (std::vector<int>{0}));
  EXPECT_EQ(report.failed_rows, (std::vector<int>{1, 2}));
  EXPECT_FALSE(report.ok());
  const TopkVerdict tie = judge_topk_row(gpu.data() + 3, 1, 1, 3, {2.0, 1.0, 1.0});
  EXPECT_TRUE(tie.same_set);
  EXPECT_FALSE(tie.near_tie);
  const TopkVerdict exact_tie = judge_topk_row(gpu.data() + 2, 1, 1, 3, {1.0, 1.0, 1.0});
  EXPECT_TRUE(exact_tie.near_tie);
  EXPECT_TRUE(exact_tie.allowed);
  // Scores near zero beside a large one: 3e-6 apart is within 1e-5 of the row's largest |score|,
  // though far apart relatively.
  const Positions swapped = {0, 1};  // the reference takes {0, 2}
  const TopkVerdict scaled = judge_topk_row(swapped.data(), 2, 1, 3, {1.0, 1e-6, 4e-6});
  EXPECT_TRUE(scaled.near_tie);
  EXPECT_TRUE(scaled.allowed);
  const TopkVerdict apart = judge_topk_row(swapped.data(), 2, 1, 3, {1.0, 1e-6, 4e-4});
  EXPECT_FALSE(apart.allowed);
}

}  // namespace
}  // namespace sm70ops::ref
