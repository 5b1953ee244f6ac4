// CPU reference of op 3, the grouped NVFP4 (W4A16) MoE (ops.md "Op 3"): E2M1 and E4M3 codecs,
// a quantizer to the ModelOpt/vLLM NVFP4 checkpoint layout, its dequantizer, and the MoE itself.
// Payload and e4m3 scales are uint8_t; x is fp16 as uint16_t bits (tests/ref/half.h).
#ifndef SM70OPS_TESTS_REF_NVFP4_REF_H_
#define SM70OPS_TESTS_REF_NVFP4_REF_H_

#include <cstdint>
#include <vector>

namespace sm70ops::ref {

constexpr int kNvfp4Block = 16;     // elements along k sharing one e4m3 scale
constexpr float kE2m1Max = 6.0f;    // largest E2M1 magnitude
constexpr float kE4m3Max = 448.0f;  // largest finite E4M3 (fn) value, code 0x7E

// Low 4 bits: magnitude index into {0, .5, 1, 1.5, 2, 3, 4, 6}, bit 3 the sign.
float e2m1_decode(uint8_t code);
// Nearest E2M1 code, ties to the even code; |x| > 6 saturates to 6. x must not be NaN.
uint8_t e2m1_encode(float x);

// E4M3 "fn": bias 7, subnormals m * 2^-9, no inf, 0x7F/0xFF NaN.
float e4m3_decode(uint8_t byte);
// Round to nearest, ties to even; |x| > 448 saturates to +-448 (ModelOpt clamps before casting);
// NaN gives 0x7F.
uint8_t e4m3_encode(float x);

// One NVFP4 matrix [rows, cols]: packed [rows, cols/2] (low nibble = even k), scales
// [rows, cols/16] e4m3, one fp32 scale_2.
struct Nvfp4Matrix {
  std::vector<uint8_t> packed;
  std::vector<uint8_t> scales;
  float scale_2 = 0.0f;
};

// ModelOpt recipe: scale_2 = amax / (6 * 448); block scale = e4m3(block_amax / (6 * scale_2));
// each value is the nearest E2M1 of w / (block scale * scale_2). w is [rows, cols], cols % 16 == 0.
Nvfp4Matrix nvfp4_quantize(const float* w, int rows, int cols);

// W[n, k] = fp32(e2m1(nibble) * e4m3(scale[n, k/16])) * scale_2, as [rows, cols].
std::vector<float> nvfp4_dequantize(const uint8_t* packed, const uint8_t* scales, float scale_2,
                                    int rows, int cols);

// Checkpoint layout of the routed experts (E experts, hidden H, intermediate I; H and I any
// multiples of 16, ops.md v2: rows of I = 80 are 40 bytes with 5 scales).
struct Nvfp4MoeWeights {
  int num_experts = 0;
  int hidden = 0;
  int inter = 0;
  std::vector<uint8_t> w13;        // [E, 2I, H/2]: rows 0..I-1 gate, I..2I-1 up
  std::vector<uint8_t> w13_scale;  // [E, 2I, H/16] e4m3
  std::vector<float> w13_scale_2;  // [E, 2]: gate, up
  std::vector<uint8_t> w2;         // [E, H, I/2]
  std::vector<uint8_t> w2_scale;   // [E, H, I/16] e4m3
  std::vector<float> w2_scale_2;   // [E]
};

// Quantizes float weights w13 [E, 2I, H] (gate and up halves each with its own scale_2) and
// w2 [E, H, I].
Nvfp4MoeWeights nvfp4_quantize_moe(const std::vector<float>& w13, const std::vector<float>& w2,
                                   int num_experts, int hidden, int inter);

// Expert e dequantized: w13 [2I, H], w2 [H, I].
struct DenseExpert {
  std::vector<float> w13;
  std::vector<float> w2;
};
DenseExpert nvfp4_dequantize_expert(const Nvfp4MoeWeights& w, int expert);

// out [T, H] in fp64 on the dequantized weights: h = x W13^T, a = silu(h[:I]) * h[I:],
// y_e = a W2^T, out[t] = sum_j topk_weights[t, j] * y_{topk_ids[t, j]}[t].
// x: [T, H] fp16; topk_ids: [T, topk] int32 in [0, E); topk_weights: [T, topk] fp32.
std::vector<double> nvfp4_moe_ref(const std::vector<uint16_t>& x,
                                  const std::vector<int32_t>& topk_ids,
                                  const std::vector<float>& topk_weights, int topk,
                                  const Nvfp4MoeWeights& w);

}  // namespace sm70ops::ref

#endif  // SM70OPS_TESTS_REF_NVFP4_REF_H_
