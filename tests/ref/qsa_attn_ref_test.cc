#include "tests/ref/qsa_attn_ref.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/ref/half.h"
#include "tests/ref/qsa_index_ref.h"
#include "tests/ref/varlen.h"
#include "tests/ref/varlen_fixture.h"

namespace sm70ops::ref {
namespace {

constexpr int kHq = 4;
constexpr int kHkv = 2;
constexpr int kDim = 16;
constexpr float kScale = 0.25f;

struct Problem {
  Varlen meta = three_requests();
  std::vector<uint16_t> q;
  KvCache kv;
};

Problem random_problem(unsigned seed) {
  std::mt19937 rng(seed);
  Problem p;
  p.q = random_halves(num_rows(p.meta) * kHq * kDim, rng);
  p.kv.num_kv_heads = kHkv;
  p.kv.head_dim = kDim;
  p.kv.k = random_halves(kThreeRequestPages * kPageSize * kHkv * kDim, rng);
  p.kv.v = random_halves(kThreeRequestPages * kPageSize * kHkv * kDim, rng);
  return p;
}

// A selection that picks, for every row, the tokens listed (request-local positions).
Selection select_positions(const std::vector<std::vector<int32_t>>& per_row, int nb) {
  std::vector<Expansion> rows;
  for (const auto& positions : per_row) rows.push_back(qsa_index_expand(positions));
  return pack_selection(rows, nb);
}

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

TEST(Ref_QsaAttn, EmptySetGivesZerosAndMinusInf) {
  const Problem p = random_problem(1);
  const int rows = num_rows(p.meta);
  // Row 0 selects nothing; every other row selects only tokens past its own position.
  std::vector<std::vector<int32_t>> per_row(rows, std::vector<int32_t>{191});
  per_row[0] = {};
  const AttnResult out = qsa_attn_ref(p.q, kHq, p.kv, p.meta, select_positions(per_row, 3), kScale);
  for (double o : out.o) EXPECT_EQ(o, 0.0);
  for (double lse : out.lse) EXPECT_EQ(lse, -std::numeric_limits<double>::infinity());
}

// One token: o is that token's v exactly, lse its logit; query head h reads KV head h / 2.
TEST(Ref_QsaAttn, SingleTokenGivesV) {
  const Problem p = random_problem(2);
  const std::vector<RowInfo> info = varlen_rows(p.meta);
  std::vector<std::vector<int32_t>> per_row;
  for (const RowInfo& row : info) per_row.push_back({row.pos / 2});
  const AttnResult out = qsa_attn_ref(p.q, kHq, p.kv, p.meta, select_positions(per_row, 3), kScale);
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
TEST(Ref_QsaAttn, TwoTokensWeightedBySoftmax) {
  const Problem p = random_problem(3);
  const std::vector<RowInfo> info = varlen_rows(p.meta);
  std::vector<std::vector<int32_t>> per_row;
  for (const RowInfo& row : info) per_row.push_back({0, row.pos});
  const AttnResult out = qsa_attn_ref(p.q, kHq, p.kv, p.meta, select_positions(per_row, 3), kScale);
  const int t = 9, h = 3, request = 2;
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

// All-ones masks over every page of 0..pos (bits past pos included) equal dense causal attention.
TEST(Ref_QsaAttn, SelectAllEqualsDenseCausal) {
  const Problem p = random_problem(4);
  for (AttnPrecision precision : {AttnPrecision::kFp64, AttnPrecision::kFp32Fp16Out}) {
    const AttnResult sparse =
        qsa_attn_ref(p.q, kHq, p.kv, p.meta, select_all_tokens(p.meta, 3), kScale, precision);
    const AttnResult dense = dense_causal_attn_ref(p.q, kHq, p.kv, p.meta, kScale, precision);
    EXPECT_EQ(max_abs_diff(sparse.o, dense.o), 0.0);
    EXPECT_EQ(max_abs_diff(sparse.lse, dense.lse), 0.0);
  }
}

// Selecting every token through op 1's own expansion (K >= L) is dense too.
TEST(Ref_QsaAttn, TopkOfEverythingEqualsDense) {
  const Problem p = random_problem(5);
  std::vector<std::vector<int32_t>> per_row;
  for (const RowInfo& row : varlen_rows(p.meta)) {
    per_row.push_back(qsa_index_topk(std::vector<double>(row.len, 1.0), 4096));
  }
  const AttnResult sparse =
      qsa_attn_ref(p.q, kHq, p.kv, p.meta, select_positions(per_row, 3), kScale);
  const AttnResult dense = dense_causal_attn_ref(p.q, kHq, p.kv, p.meta, kScale);
  EXPECT_EQ(max_abs_diff(sparse.o, dense.o), 0.0);
  EXPECT_EQ(max_abs_diff(sparse.lse, dense.lse), 0.0);
}

// The fp32 same-precision reference stores fp16 values and stays close to fp64.
TEST(Ref_QsaAttn, Fp32ReferenceIsFp16AndClose) {
  const Problem p = random_problem(6);
  const AttnResult fp64 = dense_causal_attn_ref(p.q, kHq, p.kv, p.meta, kScale);
  const AttnResult fp32 =
      dense_causal_attn_ref(p.q, kHq, p.kv, p.meta, kScale, AttnPrecision::kFp32Fp16Out);
  for (double o : fp32.o) EXPECT_EQ(o, round_to_half(static_cast<float>(o)));
  EXPECT_LT(max_abs_diff(fp64.o, fp32.o), 2e-3);
  EXPECT_LT(max_abs_diff(fp64.lse, fp32.lse), 1e-5);
}

}  // namespace
}  // namespace sm70ops::ref
