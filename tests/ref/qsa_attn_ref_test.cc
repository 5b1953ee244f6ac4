#include "tests/ref/qsa_attn_ref.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/ref/half.h"
#include "tests/ref/qsa_index_ref.h"
#include "tests/ref/varlen.h"

namespace sm70ops::ref {
namespace {

constexpr int kHq = 4;
constexpr int kHkv = 2;
constexpr int kDim = 16;
constexpr float kScale = 0.25f;

// Three requests (query_len, seq_len): 3 rows at the end of 70 tokens, a fresh 5-token prompt,
// 2 rows at the end of 130 tokens; their pages scattered over a shuffled pool with 2 spare pages,
// so that a wrong block_table lookup reads other data.
struct Problem {
  Varlen meta;
  std::vector<uint16_t> q;
  KvCache kv;
};

Problem random_problem(unsigned seed, int page_size) {
  std::mt19937 rng(seed);
  const ScatteredBatch batch = scattered_batch({{3, 70}, {5, 5}, {2, 130}}, 2, rng, page_size);
  Problem p;
  p.meta = batch.meta;
  p.q = random_halves(num_rows(p.meta) * kHq * kDim, rng);
  p.kv.num_kv_heads = kHkv;
  p.kv.head_dim = kDim;
  const size_t cache = static_cast<size_t>(batch.num_pages) * page_size * kHkv * kDim;
  p.kv.k = random_halves(cache, rng);
  p.kv.v = random_halves(cache, rng);
  return p;
}

// A selection that picks, for every row, the tokens listed (request-local positions).
Selection select_positions(const std::vector<std::vector<int32_t>>& per_row, int page_size,
                           int nb) {
  std::vector<Expansion> rows;
  for (const auto& positions : per_row) rows.push_back(qsa_index_expand(positions, page_size));
  return pack_selection(rows, nb);
}

// Width enough for every row of random_problem to select all of its pages.
int full_width(const Problem& p) { return (130 + p.meta.page_size - 1) / p.meta.page_size; }

double half_at(const std::vector<uint16_t>& cache, const Varlen& meta, int request, int pos,
               int kv_head, int d) {
  const int64_t token = physical_token(meta, request, pos);
  return half_to_float(cache[(token * kHkv + kv_head) * kDim + d]);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

class Ref_QsaAttn : public ::testing::TestWithParam<int> {};  // the page size P

TEST_P(Ref_QsaAttn, EmptySetGivesZerosAndMinusInf) {
  const Problem p = random_problem(1, GetParam());
  const int rows = num_rows(p.meta);
  // Row 0 selects nothing; every other row selects only a token past its own position.
  std::vector<std::vector<int32_t>> per_row(rows, std::vector<int32_t>{129});
  per_row[0] = {};
  const AttnResult out =
      qsa_attn_ref(p.q, kHq, p.kv, p.meta, select_positions(per_row, GetParam(), 3), kScale);
  for (size_t t = 0; t < 9; ++t) {  // only the last row (request 2, position 129) sees 129
    for (int i = 0; i < kHq * kDim; ++i) EXPECT_EQ(out.o[t * kHq * kDim + i], 0.0);
    for (int h = 0; h < kHq; ++h)
      EXPECT_EQ(out.lse[t * kHq + h], -std::numeric_limits<double>::infinity());
  }
}

// One token: o is that token's v exactly, lse its logit; query head h reads KV head h / 2.
TEST_P(Ref_QsaAttn, SingleTokenGivesV) {
  const Problem p = random_problem(2, GetParam());
  const std::vector<RowInfo> info = varlen_rows(p.meta);
  std::vector<std::vector<int32_t>> per_row;
  for (const RowInfo& row : info) per_row.push_back({row.pos / 2});
  const AttnResult out =
      qsa_attn_ref(p.q, kHq, p.kv, p.meta, select_positions(per_row, GetParam(), 3), kScale);
  for (size_t t = 0; t < info.size(); ++t) {
    for (int h = 0; h < kHq; ++h) {
      double logit = 0.0;
      for (int d = 0; d < kDim; ++d) {
        const double v = half_at(p.kv.v, p.meta, info[t].request, per_row[t][0], h / 2, d);
        EXPECT_EQ(out.o[(t * kHq + h) * kDim + d], v);
        logit += half_to_float(p.q[(t * kHq + h) * kDim + d]) *
                 half_at(p.kv.k, p.meta, info[t].request, per_row[t][0], h / 2, d);
      }
      EXPECT_NEAR(out.lse[t * kHq + h], kScale * logit, 1e-12);
    }
  }
}

// Two tokens: the softmax weights written out.
TEST_P(Ref_QsaAttn, TwoTokensWeightedBySoftmax) {
  const Problem p = random_problem(3, GetParam());
  const std::vector<RowInfo> info = varlen_rows(p.meta);
  std::vector<std::vector<int32_t>> per_row;
  for (const RowInfo& row : info) per_row.push_back({0, row.pos});
  const AttnResult out = qsa_attn_ref(p.q, kHq, p.kv, p.meta,
                                      select_positions(per_row, GetParam(), full_width(p)), kScale);
  const int t = 9, h = 3, request = 2;  // the last row: position 129
  double logits[2] = {0.0, 0.0};
  for (int i = 0; i < 2; ++i) {
    for (int d = 0; d < kDim; ++d) {
      logits[i] += kScale * half_to_float(p.q[(t * kHq + h) * kDim + d]) *
                   half_at(p.kv.k, p.meta, request, per_row[t][i], h / 2, d);
    }
  }
  const double w0 = 1.0 / (1.0 + std::exp(logits[1] - logits[0]));
  for (int d = 0; d < kDim; ++d) {
    const double expected = w0 * half_at(p.kv.v, p.meta, request, 0, 1, d) +
                            (1 - w0) * half_at(p.kv.v, p.meta, request, 129, 1, d);
    EXPECT_NEAR(out.o[(t * kHq + h) * kDim + d], expected, 1e-12);
  }
  EXPECT_NEAR(out.lse[t * kHq + h], std::log(std::exp(logits[0]) + std::exp(logits[1])), 1e-12);
}

// Mask bit b names token P * page + b: at P 16, page 2 bit 3 is token 35 (not 131, as 64-token
// pages would have it), and a bit b >= P names no token at all.
TEST(Ref_QsaAttnPages, MaskBitsCountInPagesOfP) {
  const Problem p = random_problem(4, 16);
  const int rows = num_rows(p.meta);
  Selection sel = select_positions(std::vector<std::vector<int32_t>>(rows), 16, 2);
  const int t = 9;  // request 2, position 129
  sel.count[t] = 2;
  sel.blocks[t * 2] = 2, sel.masks[t * 2] = uint64_t{1} << 3;
  sel.blocks[t * 2 + 1] = 4, sel.masks[t * 2 + 1] = ~uint64_t{0} << 16;  // bits past the page
  const AttnResult out = qsa_attn_ref(p.q, kHq, p.kv, p.meta, sel, kScale);
  for (int h = 0; h < kHq; ++h) {
    for (int d = 0; d < kDim; ++d)
      EXPECT_EQ(out.o[(t * kHq + h) * kDim + d], half_at(p.kv.v, p.meta, 2, 35, h / 2, d));
  }
}

// All-ones masks over every page of 0..pos (bits past pos and past P included) equal dense
// causal attention.
TEST_P(Ref_QsaAttn, SelectAllEqualsDenseCausal) {
  const Problem p = random_problem(5, GetParam());
  for (AttnPrecision precision : {AttnPrecision::kFp64, AttnPrecision::kFp32Fp16Out}) {
    const AttnResult sparse = qsa_attn_ref(
        p.q, kHq, p.kv, p.meta, select_all_tokens(p.meta, full_width(p)), kScale, {}, precision);
    const AttnResult dense = dense_causal_attn_ref(p.q, kHq, p.kv, p.meta, kScale, {}, precision);
    EXPECT_EQ(max_abs_diff(sparse.o, dense.o), 0.0);
    EXPECT_EQ(max_abs_diff(sparse.lse, dense.lse), 0.0);
  }
}

// Selecting every token through op 1's own expansion is dense too.
TEST_P(Ref_QsaAttn, ExpansionOfEveryTokenEqualsDense) {
  const Problem p = random_problem(6, GetParam());
  std::vector<std::vector<int32_t>> per_row;
  for (const RowInfo& row : varlen_rows(p.meta)) {
    std::vector<int32_t> all(row.len);
    for (int j = 0; j < row.len; ++j) all[j] = j;
    per_row.push_back(all);
  }
  const AttnResult sparse = qsa_attn_ref(
      p.q, kHq, p.kv, p.meta, select_positions(per_row, GetParam(), full_width(p)), kScale);
  const AttnResult dense = dense_causal_attn_ref(p.q, kHq, p.kv, p.meta, kScale);
  EXPECT_EQ(max_abs_diff(sparse.o, dense.o), 0.0);
  EXPECT_EQ(max_abs_diff(sparse.lse, dense.lse), 0.0);
}

// The gate multiplies o by sigmoid(gate) element by element and leaves lse alone: a zero gate
// halves o exactly.
TEST_P(Ref_QsaAttn, GateScalesBySigmoidAndLeavesLse) {
  const Problem p = random_problem(7, GetParam());
  std::mt19937 rng(8);
  const std::vector<uint16_t> gate = random_halves(p.q.size(), rng);
  const std::vector<uint16_t> zero(p.q.size(), 0);
  const Selection sel = select_all_tokens(p.meta, full_width(p));
  const AttnResult plain = qsa_attn_ref(p.q, kHq, p.kv, p.meta, sel, kScale);
  const AttnResult gated = qsa_attn_ref(p.q, kHq, p.kv, p.meta, sel, kScale, gate);
  const AttnResult halved = qsa_attn_ref(p.q, kHq, p.kv, p.meta, sel, kScale, zero);
  for (size_t i = 0; i < plain.o.size(); ++i) {
    const double g = half_to_float(gate[i]);
    EXPECT_NEAR(gated.o[i], plain.o[i] / (1.0 + std::exp(-g)), 1e-12);
    EXPECT_EQ(halved.o[i], plain.o[i] / 2);
  }
  EXPECT_EQ(gated.lse, plain.lse);
}

// The fp32 same-precision reference stores fp16 values and stays close to fp64, gated or not.
TEST_P(Ref_QsaAttn, Fp32ReferenceIsFp16AndClose) {
  const Problem p = random_problem(9, GetParam());
  std::mt19937 rng(10);
  const std::vector<uint16_t> gate = random_halves(p.q.size(), rng);
  for (const std::vector<uint16_t>& g : {std::vector<uint16_t>{}, gate}) {
    const AttnResult fp64 = dense_causal_attn_ref(p.q, kHq, p.kv, p.meta, kScale, g);
    const AttnResult fp32 =
        dense_causal_attn_ref(p.q, kHq, p.kv, p.meta, kScale, g, AttnPrecision::kFp32Fp16Out);
    for (double o : fp32.o) EXPECT_EQ(o, round_to_half(static_cast<float>(o)));
    EXPECT_LT(max_abs_diff(fp64.o, fp32.o), 2e-3);
    EXPECT_LT(max_abs_diff(fp64.lse, fp32.lse), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(PageSizes, Ref_QsaAttn, ::testing::Values(16, 32, 64),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "P" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace sm70ops::ref
