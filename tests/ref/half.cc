#include "tests/ref/half.h"

#include <cstring>

namespace sm70ops::ref {
namespace {

constexpr uint32_t kFloatMantissaBits = 23;
constexpr uint32_t kDroppedBits = kFloatMantissaBits - 10;  // binary16 keeps 10 mantissa bits
constexpr int kExponentBiasShift = 127 - 15;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// value >> shift, rounded to nearest with ties to even.
uint32_t shift_right_rne(uint32_t value, uint32_t shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1);
  const uint32_t half_way = 1u << (shift - 1);
  return kept + ((rest > half_way || (rest == half_way && (kept & 1))) ? 1 : 0);
}

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000 | (mantissa << kDroppedBits));
  if (exponent != 0) {
    return float_of(sign | ((exponent + kExponentBiasShift) << kFloatMantissaBits) |
                    (mantissa << kDroppedBits));
  }
  // Subnormal (or zero): mantissa * 2^-24 is exact in float.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

uint16_t float_to_half(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t float_exponent = (u >> kFloatMantissaBits) & 0xff;
  const uint32_t mantissa = u & 0x7fffff;
  if (float_exponent == 0xff) {
    // Keep the top payload bits and force the quiet bit so a NaN never becomes inf.
    return sign | (mantissa ? 0x7e00 | (mantissa >> kDroppedBits) : 0x7c00);
  }
  const int exponent = static_cast<int>(float_exponent) - kExponentBiasShift;
  if (exponent >= 0x1f) return sign | 0x7c00;
  if (exponent > 0) {
    // A carry out of the mantissa correctly bumps the exponent (up to inf).
    const uint32_t biased = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> kDroppedBits);
    const uint32_t rest = mantissa & ((1u << kDroppedBits) - 1);
    const uint32_t half_way = 1u << (kDroppedBits - 1);
    const bool up = rest > half_way || (rest == half_way && (biased & 1));
    return static_cast<uint16_t>(sign | (biased + (up ? 1 : 0)));
  }
  // Below 2^-25 everything rounds to zero (2^-25 itself is a tie that goes to even zero).
  if (exponent < -10) return sign;
  // Subnormal result in units of 2^-24; rounding up to 0x400 gives the smallest normal.
  const uint32_t significand = mantissa | (1u << kFloatMantissaBits);
  const uint32_t shift = static_cast<uint32_t>(static_cast<int>(kDroppedBits) + 1 - exponent);
  return static_cast<uint16_t>(sign | shift_right_rne(significand, shift));
}

std::vector<uint16_t> to_half(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = float_to_half(values[i]);
  return out;
}

std::vector<float> from_half(const std::vector<uint16_t>& halves) {
  std::vector<float> out(halves.size());
  for (size_t i = 0; i < halves.size(); ++i) out[i] = half_to_float(halves[i]);
  return out;
}

std::vector<uint16_t> random_halves(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> out(count);
  for (auto& h : out) h = float_to_half(normal(rng));
  return out;
}

}  // namespace sm70ops::ref
