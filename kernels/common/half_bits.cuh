// fp16 pairs as the 32-bit words that vector loads and stores move (bit casts: no instructions).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace sm70ops {

__device__ __forceinline__ __half2 as_half2(uint32_t bits) {
  __half2 h;
  memcpy(&h, &bits, sizeof(h));
  return h;
}

__device__ __forceinline__ uint32_t as_bits(__half2 h) {
  uint32_t bits;
  memcpy(&bits, &h, sizeof(bits));
  return bits;
}

// Two floats rounded to fp16, as the word a half2 store writes.
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return as_bits(__floats2half2_rn(lo, hi));
}

}  // namespace sm70ops
