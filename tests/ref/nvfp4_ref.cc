#include "tests/ref/nvfp4_ref.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "tests/ref/half.h"

namespace sm70ops::ref {
namespace {

constexpr std::array<float, 8> kE2m1Magnitudes = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
constexpr uint8_t kE4m3MaxCode = 0x7E;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("nvfp4: " + what);
}

// The 127 non-negative finite E4M3 values, indexed by code 0x00..0x7E (increasing).
const std::array<float, kE4m3MaxCode + 1>& e4m3_magnitudes() {
  static const std::array<float, kE4m3MaxCode + 1> table = [] {
    std::array<float, kE4m3MaxCode + 1> values{};
    for (int code = 0; code <= kE4m3MaxCode; ++code) values[code] = e4m3_decode(code);
    return values;
  }();
  return table;
}

// Index of the magnitude nearest to x >= 0 in an increasing table; a tie goes to the even
// index, which for both formats is the even mantissa; x past the end saturates.
int nearest_index(const float* magnitudes, int count, float x) {
  const float* upper = std::lower_bound(magnitudes, magnitudes + count, x);
  if (upper == magnitudes + count) return count - 1;
  const int hi = static_cast<int>(upper - magnitudes);
  if (hi == 0 || *upper == x) return hi;
  const float below = x - magnitudes[hi - 1];
  const float above = *upper - x;
  if (below != above) return below < above ? hi - 1 : hi;
  return (hi % 2 == 0) ? hi : hi - 1;
}

float max_abs(const float* w, size_t count) {
  float amax = 0.0f;
  for (size_t i = 0; i < count; ++i) {
    require(std::isfinite(w[i]), "weights must be finite");
    amax = std::max(amax, std::abs(w[i]));
  }
  return amax;
}

// Quantizes one 16-element block; returns its e4m3 scale code, writes 8 packed bytes.
uint8_t quantize_block(const float* w, float scale_2, uint8_t* packed) {
  const float block_amax = max_abs(w, kNvfp4Block);
  const uint8_t scale_code = scale_2 > 0.0f ? e4m3_encode(block_amax / (kE2m1Max * scale_2)) : 0;
  const float step = e4m3_decode(scale_code) * scale_2;
  for (int i = 0; i < kNvfp4Block; i += 2) {
    const uint8_t even = step > 0.0f ? e2m1_encode(w[i] / step) : 0;
    const uint8_t odd = step > 0.0f ? e2m1_encode(w[i + 1] / step) : 0;
    packed[i / 2] = static_cast<uint8_t>(even | (odd << 4));
  }
  return scale_code;
}

double silu(double z) { return z / (1.0 + std::exp(-z)); }

// y[n] = sum_k w[n, k] * x[k] for w [rows, cols].
std::vector<double> mat_vec(const std::vector<float>& w, const std::vector<double>& x, int rows) {
  const size_t cols = x.size();
  std::vector<double> y(rows, 0.0);
  for (int n = 0; n < rows; ++n) {
    for (size_t k = 0; k < cols; ++k) y[n] += double{w[n * cols + k]} * x[k];
  }
  return y;
}

// y_e for one token: the expert's SiLU-gated MLP.
std::vector<double> expert_mlp(const DenseExpert& expert, const std::vector<double>& x, int inter) {
  const std::vector<double> h = mat_vec(expert.w13, x, 2 * inter);
  std::vector<double> a(inter);
  for (int i = 0; i < inter; ++i) a[i] = silu(h[i]) * h[inter + i];
  return mat_vec(expert.w2, a, static_cast<int>(x.size()));
}

void check_moe_shapes(const Nvfp4MoeWeights& w) {
  const size_t e = w.num_experts, h = w.hidden, i = w.inter;
  require(e > 0 && h % kNvfp4Block == 0 && i % kNvfp4Block == 0 && h > 0 && i > 0,
          "E > 0 and H, I multiples of 16");
  require(w.w13.size() == e * 2 * i * h / 2 && w.w13_scale.size() == e * 2 * i * h / kNvfp4Block,
          "w13 must be [E, 2I, H/2], w13_scale [E, 2I, H/16]");
  require(w.w2.size() == e * h * i / 2 && w.w2_scale.size() == e * h * i / kNvfp4Block,
          "w2 must be [E, H, I/2], w2_scale [E, H, I/16]");
  require(w.w13_scale_2.size() == 2 * e && w.w2_scale_2.size() == e, "scale_2 shapes");
}

}  // namespace

float e2m1_decode(uint8_t code) {
  const float magnitude = kE2m1Magnitudes[code & 0x7];
  return (code & 0x8) ? -magnitude : magnitude;
}

uint8_t e2m1_encode(float x) {
  const int index = nearest_index(kE2m1Magnitudes.data(), kE2m1Magnitudes.size(), std::abs(x));
  return static_cast<uint8_t>((std::signbit(x) ? 0x8 : 0) | index);
}

float e4m3_decode(uint8_t byte) {
  const bool negative = byte & 0x80;
  const int exponent = (byte >> 3) & 0xF;
  const int mantissa = byte & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                        : std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  return negative ? -magnitude : magnitude;
}

uint8_t e4m3_encode(float x) {
  if (std::isnan(x)) return 0x7F;
  const auto& magnitudes = e4m3_magnitudes();
  const int code = nearest_index(magnitudes.data(), magnitudes.size(), std::abs(x));
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | code);
}

Nvfp4Matrix nvfp4_quantize(const float* w, int rows, int cols) {
  require(rows >= 0 && cols % kNvfp4Block == 0, "cols must be a multiple of 16");
  const size_t count = static_cast<size_t>(rows) * cols;
  Nvfp4Matrix out;
  out.scale_2 = max_abs(w, count) / (kE2m1Max * kE4m3Max);
  out.packed.resize(count / 2);
  out.scales.resize(count / kNvfp4Block);
  for (size_t block = 0; block < out.scales.size(); ++block) {
    out.scales[block] = quantize_block(w + block * kNvfp4Block, out.scale_2,
                                       out.packed.data() + block * kNvfp4Block / 2);
  }
  return out;
}

std::vector<float> nvfp4_dequantize(const uint8_t* packed, const uint8_t* scales, float scale_2,
                                    int rows, int cols) {
  require(rows >= 0 && cols % kNvfp4Block == 0, "cols must be a multiple of 16");
  std::vector<float> w(static_cast<size_t>(rows) * cols);
  for (size_t i = 0; i < w.size(); ++i) {
    const uint8_t byte = packed[i / 2];
    const uint8_t nibble = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    // e2m1 * e4m3 is exact in fp32; only the scale_2 product rounds.
    w[i] = (e2m1_decode(nibble) * e4m3_decode(scales[i / kNvfp4Block])) * scale_2;
  }
  return w;
}

Nvfp4MoeWeights nvfp4_quantize_moe(const std::vector<float>& w13, const std::vector<float>& w2,
                                   int num_experts, int hidden, int inter) {
  const size_t half_elems = static_cast<size_t>(inter) * hidden;
  require(w13.size() == num_experts * 2 * half_elems && w2.size() == num_experts * half_elems,
          "w13 must be [E, 2I, H] and w2 [E, H, I]");
  Nvfp4MoeWeights out{num_experts, hidden, inter, {}, {}, {}, {}, {}, {}};
  auto append = [](const Nvfp4Matrix& m, std::vector<uint8_t>& packed, std::vector<uint8_t>& scales,
                   std::vector<float>& scale_2) {
    packed.insert(packed.end(), m.packed.begin(), m.packed.end());
    scales.insert(scales.end(), m.scales.begin(), m.scales.end());
    scale_2.push_back(m.scale_2);
  };
  for (int e = 0; e < num_experts; ++e) {
    const float* gate = w13.data() + e * 2 * half_elems;
    append(nvfp4_quantize(gate, inter, hidden), out.w13, out.w13_scale, out.w13_scale_2);
    append(nvfp4_quantize(gate + half_elems, inter, hidden), out.w13, out.w13_scale,
           out.w13_scale_2);
    append(nvfp4_quantize(w2.data() + e * half_elems, hidden, inter), out.w2, out.w2_scale,
           out.w2_scale_2);
  }
  return out;
}

DenseExpert nvfp4_dequantize_expert(const Nvfp4MoeWeights& w, int expert) {
  check_moe_shapes(w);
  require(expert >= 0 && expert < w.num_experts, "expert out of range");
  const size_t half_elems = static_cast<size_t>(w.inter) * w.hidden;
  const size_t base = expert * 2 * half_elems;
  DenseExpert out;
  for (int half = 0; half < 2; ++half) {
    const size_t start = base + half * half_elems;
    const std::vector<float> part =
        nvfp4_dequantize(w.w13.data() + start / 2, w.w13_scale.data() + start / kNvfp4Block,
                         w.w13_scale_2[2 * expert + half], w.inter, w.hidden);
    out.w13.insert(out.w13.end(), part.begin(), part.end());
  }
  const size_t w2_start = expert * half_elems;
  out.w2 = nvfp4_dequantize(w.w2.data() + w2_start / 2, w.w2_scale.data() + w2_start / kNvfp4Block,
                            w.w2_scale_2[expert], w.hidden, w.inter);
  return out;
}

std::vector<double> nvfp4_moe_ref(const std::vector<uint16_t>& x,
                                  const std::vector<int32_t>& topk_ids,
                                  const std::vector<float>& topk_weights, int topk,
                                  const Nvfp4MoeWeights& w) {
  check_moe_shapes(w);
  const size_t hidden = w.hidden;
  const size_t tokens = x.size() / hidden;
  require(x.size() == tokens * hidden, "x must be [T, H]");
  require(topk > 0 && topk_ids.size() == tokens * topk && topk_weights.size() == tokens * topk,
          "topk_ids and topk_weights must be [T, topk]");
  // Experts are dequantized once, and only those routed to: all of them would not fit in memory.
  std::vector<DenseExpert> experts(w.num_experts);
  std::vector<double> out(tokens * hidden, 0.0);
  for (size_t t = 0; t < tokens; ++t) {
    std::vector<double> x_row(hidden);
    for (size_t k = 0; k < hidden; ++k) x_row[k] = half_to_float(x[t * hidden + k]);
    for (int j = 0; j < topk; ++j) {
      const int32_t id = topk_ids[t * topk + j];
      require(id >= 0 && id < w.num_experts, "topk_ids entry out of [0, E)");
      if (experts[id].w13.empty()) experts[id] = nvfp4_dequantize_expert(w, id);
      const std::vector<double> y = expert_mlp(experts[id], x_row, w.inter);
      for (size_t n = 0; n < hidden; ++n) out[t * hidden + n] += topk_weights[t * topk + j] * y[n];
    }
  }
  return out;
}

}  // namespace sm70ops::ref
