// fp16 (IEEE binary16) stored as uint16_t, with exact conversions, for the CPU references.
// The references take fp16 tensors in this form so they see the very bits the GPU sees.
#ifndef SM70OPS_TESTS_REF_HALF_H_
#define SM70OPS_TESTS_REF_HALF_H_

#include <cstdint>
#include <random>
#include <vector>

namespace sm70ops::ref {

// Exact: every binary16 value (subnormals, +-inf, NaN with its payload) is a float.
float half_to_float(uint16_t h);

// Round to nearest, ties to even; overflow gives +-inf, NaN stays a (quiet) NaN.
uint16_t float_to_half(float f);

// f rounded to the nearest fp16 value, as a float.
inline float round_to_half(float f) { return half_to_float(float_to_half(f)); }

std::vector<uint16_t> to_half(const std::vector<float>& values);
std::vector<float> from_half(const std::vector<uint16_t>& halves);

// `count` draws of N(0, 1) rounded to fp16: the test inputs of every op.
std::vector<uint16_t> random_halves(size_t count, std::mt19937& rng);

}  // namespace sm70ops::ref

#endif  // SM70OPS_TESTS_REF_HALF_H_
