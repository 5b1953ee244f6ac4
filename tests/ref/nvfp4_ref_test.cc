#include "tests/ref/nvfp4_ref.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/ref/half.h"

namespace sm70ops::ref {
namespace {

std::vector<float> random_normal(size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(count);
  for (float& v : out) v = normal(rng);
  return out;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(err / norm);
}

// Largest error of rounding r >= 0 to the E2M1 grid, in units of the block step.
double e2m1_max_error(double r) {
  if (r <= 2) return 0.25;
  if (r <= 4) return 0.5;
  if (r <= 6) return 1.0;
  return r - 6;
}

TEST(Ref_Nvfp4, E2m1DecodesEveryCode) {
  const float expected[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                              -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int code = 0; code < 16; ++code) {
    EXPECT_EQ(e2m1_decode(code), expected[code]) << code;
    EXPECT_EQ(std::signbit(e2m1_decode(code)), code >= 8) << code;
    EXPECT_EQ(e2m1_encode(expected[code]), code) << code;
  }
  EXPECT_EQ(e2m1_decode(0xF3), 1.5f);  // only the low nibble counts
}

TEST(Ref_Nvfp4, E2m1EncodeRoundsToNearestEven) {
  EXPECT_EQ(e2m1_encode(0.25f), 0x0);  // 0 | 0.5: even 0
  EXPECT_EQ(e2m1_encode(0.26f), 0x1);
  EXPECT_EQ(e2m1_encode(0.75f), 0x2);  // 0.5 | 1: even 1
  EXPECT_EQ(e2m1_encode(1.25f), 0x2);  // 1 | 1.5: even 1
  EXPECT_EQ(e2m1_encode(1.75f), 0x4);  // 1.5 | 2: even 2
  EXPECT_EQ(e2m1_encode(2.5f), 0x4);   // 2 | 3: even 2
  EXPECT_EQ(e2m1_encode(3.5f), 0x6);   // 3 | 4: even 4
  EXPECT_EQ(e2m1_encode(5.0f), 0x6);   // 4 | 6: even 4
  EXPECT_EQ(e2m1_encode(5.01f), 0x7);
  EXPECT_EQ(e2m1_encode(100.0f), 0x7);  // saturates
  EXPECT_EQ(e2m1_encode(-0.3f), 0x9);
}

TEST(Ref_Nvfp4, E4m3HandComputedEdges) {
  EXPECT_EQ(e4m3_decode(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_decode(0x80)));
  EXPECT_EQ(e4m3_decode(0x01), 0x1p-9f);      // smallest subnormal
  EXPECT_EQ(e4m3_decode(0x07), 7 * 0x1p-9f);  // largest subnormal
  EXPECT_EQ(e4m3_decode(0x08), 0x1p-6f);      // smallest normal
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
  EXPECT_EQ(e4m3_decode(0x3F), 1.875f);
  EXPECT_EQ(e4m3_decode(0x40), 2.0f);
  EXPECT_EQ(e4m3_decode(0x78), 256.0f);  // exponent 15 is finite in the fn variant
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);  // largest finite
  EXPECT_EQ(e4m3_decode(0xFE), -448.0f);
  EXPECT_EQ(e4m3_decode(0xB8), -1.0f);
  EXPECT_EQ(e4m3_decode(0x81), -0x1p-9f);
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_decode(0xFF)));
}

TEST(Ref_Nvfp4, E4m3EncodeRoundsAndSaturates) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(e4m3_encode(e4m3_decode(code)), code) << code;
  }
  EXPECT_EQ(e4m3_encode(0x1p-10f), 0x00);       // 0 | 2^-9: even 0
  EXPECT_EQ(e4m3_encode(3 * 0x1p-10f), 0x02);   // 0x01 | 0x02: even
  EXPECT_EQ(e4m3_encode(15 * 0x1p-10f), 0x08);  // 0x07 | 0x08 (2^-6): even
  EXPECT_EQ(e4m3_encode(1.0625f), 0x38);        // 1 | 1.125: even 1
  EXPECT_EQ(e4m3_encode(464.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(1e6f), 0x7E);
  EXPECT_EQ(e4m3_encode(-1e6f), 0xFE);
  EXPECT_EQ(e4m3_encode(std::nanf("")), 0x7F);
}

// Low nibble = even k; the block scale applies to 16 elements along k; scale_2 last.
TEST(Ref_Nvfp4, DequantizeReadsCheckpointLayout) {
  std::vector<uint8_t> packed(16, 0x00);
  packed[0] = 0x21;                                  // k0 = 0.5, k1 = 1.0
  packed[8] = 0xF9;                                  // k16 = -0.5, k17 = -6
  const std::vector<uint8_t> scales = {0x40, 0x30};  // 2.0 for k < 16, 0.5 for k >= 16
  const std::vector<float> w = nvfp4_dequantize(packed.data(), scales.data(), 0.25f, 1, 32);
  EXPECT_EQ(w[0], 0.5f * 2.0f * 0.25f);
  EXPECT_EQ(w[1], 1.0f * 2.0f * 0.25f);
  EXPECT_EQ(w[16], -0.5f * 0.5f * 0.25f);
  EXPECT_EQ(w[17], -6.0f * 0.5f * 0.25f);
  EXPECT_EQ(std::count(w.begin(), w.end(), 0.0f), 28);
}

// Each element lands within half an E2M1 gap of the block step, the block scale keeps the block
// amax near 6 steps, and the tensor's amax survives exactly. Blocks span 5 decades; rows of 64
// and of 80 (five blocks: the 40-byte rows and 5-byte scale rows of I 80).
class Ref_Nvfp4RoundTrip : public ::testing::TestWithParam<int> {};

TEST_P(Ref_Nvfp4RoundTrip, QuantizeDequantize) {
  const int rows = 8, cols = GetParam();
  std::vector<float> w = random_normal(rows * cols, 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] *= std::pow(10.0f, static_cast<float>(i / 16 % 6) - 3);
  const Nvfp4Matrix q = nvfp4_quantize(w.data(), rows, cols);
  const std::vector<float> back =
      nvfp4_dequantize(q.packed.data(), q.scales.data(), q.scale_2, rows, cols);
  float amax = 0.0f;
  for (float v : w) amax = std::max(amax, std::abs(v));
  EXPECT_FLOAT_EQ(q.scale_2, amax / (6 * 448));
  for (size_t block = 0; block < q.scales.size(); ++block) {
    const double step = double{e4m3_decode(q.scales[block])} * q.scale_2;
    double block_amax = 0.0;
    for (size_t i = block * 16; i < block * 16 + 16; ++i) {
      const double r = std::abs(w[i]) / step;
      EXPECT_LE(std::abs(back[i] - w[i]), e2m1_max_error(r) * step * (1 + 1e-6)) << i;
      block_amax = std::max(block_amax, r);
      if (std::abs(w[i]) == amax) {
        EXPECT_FLOAT_EQ(std::abs(back[i]), amax);
      }
    }
    if (q.scales[block] >= 0x08) {
      EXPECT_LE(block_amax, 6.0 / (1 - 1.0 / 16)) << block;
    }
  }
  EXPECT_LT(rel_l2(back, w), 0.12);
}

INSTANTIATE_TEST_SUITE_P(Cols, Ref_Nvfp4RoundTrip, ::testing::Values(64, 80));

// Rows of 80 weights: 40 payload bytes and 5 scales each, so no row after the first starts on a
// 16-byte (payload) or 2-byte (scales) boundary. Element (r, k) has code (3r + k) % 15 + 1 and
// block scale 2^((r + k/16) % 4 - 1); every value is checked against that closed form.
TEST(Ref_Nvfp4, DequantizeReadsOddLengthRows) {
  const int rows = 3, cols = 80;
  const double magnitudes[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  std::vector<uint8_t> packed(rows * cols / 2, 0), scales(rows * cols / 16);
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < cols; ++k) {
      const int code = (3 * r + k) % 15 + 1;
      packed[(r * cols + k) / 2] |= static_cast<uint8_t>(code << (k % 2 == 0 ? 0 : 4));
    }
    for (int b = 0; b < cols / 16; ++b) scales[r * cols / 16 + b] = 0x30 + 8 * ((r + b) % 4);
  }
  const std::vector<float> w = nvfp4_dequantize(packed.data(), scales.data(), 0.75f, rows, cols);
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < cols; ++k) {
      const int code = (3 * r + k) % 15 + 1;
      const double value = (code & 8 ? -1 : 1) * magnitudes[code & 7];
      const double scale = std::ldexp(1.0, (r + k / 16) % 4 - 1);
      EXPECT_EQ(w[r * cols + k], value * scale * 0.75) << "row " << r << ", k " << k;
    }
  }
}

TEST(Ref_Nvfp4, QuantizeMoeScalesGateAndUpSeparately) {
  const int experts = 2, hidden = 32, inter = 16;
  std::vector<float> w13 = random_normal(experts * 2 * inter * hidden, 4);
  const std::vector<float> w2 = random_normal(experts * hidden * inter, 5);
  for (int e = 0; e < experts; ++e) {  // the up half 10x larger than the gate half
    for (int i = 0; i < inter * hidden; ++i) w13[(2 * e + 1) * inter * hidden + i] *= 10;
  }
  const Nvfp4MoeWeights q = nvfp4_quantize_moe(w13, w2, experts, hidden, inter);
  for (int e = 0; e < experts; ++e) {
    EXPECT_GT(q.w13_scale_2[2 * e + 1], 5 * q.w13_scale_2[2 * e]);
    const DenseExpert d = nvfp4_dequantize_expert(q, e);
    const auto begin = w13.begin() + e * 2 * inter * hidden;
    EXPECT_LT(rel_l2(d.w13, std::vector<float>(begin, begin + 2 * inter * hidden)), 0.12);
    const auto w2_begin = w2.begin() + e * hidden * inter;
    EXPECT_LT(rel_l2(d.w2, std::vector<float>(w2_begin, w2_begin + hidden * inter)), 0.12);
  }
}

// E = 2, H = I = 16, one token routed to experts 1 and 0; every value is written out below.
// x[k] = 1 (even k) or 2 (odd k). W13 gate rows: 1.0 on even k; up rows: -0.5 * 2.0 on odd k.
// So h_gate = 8 * s_gate and h_up = 8 * 2 * -1 * s_up. W2 row n: magnitude (n % 8) on every i.
Nvfp4MoeWeights hand_made_moe() {
  const int experts = 2, hidden = 16, inter = 16;
  Nvfp4MoeWeights w{experts, hidden, inter, {}, {}, {}, {}, {}, {}};
  for (int e = 0; e < experts; ++e) {
    for (int n = 0; n < 2 * inter; ++n) {
      w.w13.insert(w.w13.end(), hidden / 2, n < inter ? 0x02 : 0x90);
      w.w13_scale.push_back(n < inter ? 0x38 : 0x40);  // 1.0 and 2.0
    }
    for (int n = 0; n < hidden; ++n) {
      w.w2.insert(w.w2.end(), inter / 2, static_cast<uint8_t>((n % 8) * 0x11));
      w.w2_scale.push_back(0x38);
    }
  }
  w.w13_scale_2 = {0.25f, 0.125f, 0.5f, 0.0625f};  // e0: h = (2, -2); e1: h = (4, -1)
  w.w2_scale_2 = {1.0f, 0.5f};
  return w;
}

TEST(Ref_Nvfp4, MoeComputedByHand) {
  const Nvfp4MoeWeights w = hand_made_moe();
  std::vector<uint16_t> x(16);
  for (int k = 0; k < 16; ++k) x[k] = float_to_half(k % 2 == 0 ? 1.0f : 2.0f);
  const std::vector<double> out = nvfp4_moe_ref(x, {1, 0}, {0.25f, 0.5f}, 2, w);
  const auto silu = [](double z) { return z / (1 + std::exp(-z)); };
  const double a0 = silu(2.0) * -2.0, a1 = silu(4.0) * -1.0;
  const double magnitudes[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  ASSERT_EQ(out.size(), 16u);
  for (int n = 0; n < 16; ++n) {
    const double y0 = 16 * magnitudes[n % 8] * 1.0 * a0;
    const double y1 = 16 * magnitudes[n % 8] * 0.5 * a1;
    EXPECT_NEAR(out[n], 0.5 * y0 + 0.25 * y1, 1e-12) << n;
  }
}

// H = 48 and I = 80, odd multiples of 16 (I 80 is the model's TP8 slice); one token routed to
// experts 1 and 0. x is 1, 2, -1 on its three blocks of 16. Gate row n of W13: code (n % 7) + 1
// on every k, block scales 1, 2, 0.5, so h_gate[n] = 72 m_n s_gate; up rows: -0.5 x 2 on every
// k, so h_up = -32 s_up. W2 row o: 1.0 on every i with block scale 2^((o + b) % 3) on block b of
// its five, so y[o] = s_2 sum_n a[n] 2^((o + n / 16) % 3).
TEST(Ref_Nvfp4, MoeAtOddMultiplesOf16ComputedByHand) {
  const int experts = 2, hidden = 48, inter = 80;
  const double magnitudes[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  Nvfp4MoeWeights w{experts, hidden, inter, {}, {}, {}, {}, {}, {}};
  for (int e = 0; e < experts; ++e) {
    for (int n = 0; n < 2 * inter; ++n) {
      const uint8_t code = n < inter ? static_cast<uint8_t>(n % 7 + 1) : 0x9;
      w.w13.insert(w.w13.end(), hidden / 2, static_cast<uint8_t>(code * 0x11));
      const std::vector<uint8_t> gate_scales = {0x38, 0x40, 0x30}, up_scales = {0x40, 0x40, 0x40};
      const std::vector<uint8_t>& row_scales = n < inter ? gate_scales : up_scales;
      w.w13_scale.insert(w.w13_scale.end(), row_scales.begin(), row_scales.end());
    }
    for (int o = 0; o < hidden; ++o) {
      w.w2.insert(w.w2.end(), inter / 2, 0x22);
      for (int b = 0; b < inter / 16; ++b) w.w2_scale.push_back(0x38 + 8 * ((o + b) % 3));
    }
  }
  w.w13_scale_2 = {0.25f, 0.125f, 0.5f, 0.0625f};
  w.w2_scale_2 = {1.0f, 0.5f};
  std::vector<uint16_t> x(hidden);
  for (int k = 0; k < hidden; ++k) x[k] = float_to_half(k < 16 ? 1.0f : k < 32 ? 2.0f : -1.0f);
  const std::vector<double> out = nvfp4_moe_ref(x, {1, 0}, {0.25f, 0.5f}, 2, w);
  const auto expert_out = [&](int e, int o) {
    double y = 0;
    for (int n = 0; n < inter; ++n) {
      const double gate = 72 * magnitudes[n % 7 + 1] * w.w13_scale_2[2 * e];
      const double up = -32 * double{w.w13_scale_2[2 * e + 1]};
      y += gate / (1 + std::exp(-gate)) * up * std::ldexp(1.0, (o + n / 16) % 3);
    }
    return y * w.w2_scale_2[e];
  };
  ASSERT_EQ(out.size(), static_cast<size_t>(hidden));
  for (int o = 0; o < hidden; ++o) {
    const double want = 0.25 * expert_out(1, o) + 0.5 * expert_out(0, o);
    EXPECT_NEAR(out[o], want, 1e-12 * std::abs(want)) << o;
  }
}

TEST(Ref_Nvfp4, MoeIgnoresTopkOrder) {
  const int experts = 4, hidden = 32, inter = 16, tokens = 3, topk = 3;
  const Nvfp4MoeWeights w =
      nvfp4_quantize_moe(random_normal(experts * 2 * inter * hidden, 6),
                         random_normal(experts * hidden * inter, 7), experts, hidden, inter);
  const std::vector<uint16_t> x = to_half(random_normal(tokens * hidden, 8));
  const std::vector<int32_t> ids = {0, 2, 3, 1, 0, 2, 3, 1, 2};
  const std::vector<float> weights = {0.5f, 0.3f, 0.2f, 0.6f, 0.1f, 0.3f, 0.4f, 0.4f, 0.2f};
  std::vector<int32_t> ids_reversed(ids.size());
  std::vector<float> weights_reversed(weights.size());
  for (int t = 0; t < tokens; ++t) {
    for (int j = 0; j < topk; ++j) {
      ids_reversed[t * topk + j] = ids[t * topk + topk - 1 - j];
      weights_reversed[t * topk + j] = weights[t * topk + topk - 1 - j];
    }
  }
  const std::vector<double> out = nvfp4_moe_ref(x, ids, weights, topk, w);
  const std::vector<double> reversed = nvfp4_moe_ref(x, ids_reversed, weights_reversed, topk, w);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_NEAR(out[i], reversed[i], 1e-12 * (1 + std::abs(out[i]))) << i;
  }
  EXPECT_GT(std::abs(out[0]), 0.0);
}

}  // namespace
}  // namespace sm70ops::ref
