// out[t] = sum over slots j = 0..k-1, in that order, of the down GEMM's partial of pair (t, j)
// (router weight already applied), fp32, then fp16. Slots whose id is outside [0, E) were never
// computed and add nothing. A fixed order and no atomics: the result is the same on every run.
#include <cuda_fp16.h>

#include <cstring>

#include "kernels/nvfp4_moe/nvfp4_moe_internal.cuh"

namespace sm70ops::nvfp4_moe {
namespace {

constexpr int kCombineThreads = 256;
constexpr int kColumnsPerThread = 8;  // two float4 reads per slot, one 16-byte fp16 store

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &h, sizeof(bits));
  return bits;
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__global__ void __launch_bounds__(kCombineThreads)
    nvfp4_moe_combine(const Params p, const Pass pass, const Workspace w) {
  const int t = blockIdx.y;
  const int col = (blockIdx.x * kCombineThreads + threadIdx.x) * kColumnsPerThread;
  if (col >= p.hidden) return;
  const int64_t token = pass.token0 + t;
  const int32_t *ids = p.topk_ids + token * p.topk_ids_row_stride;
  float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
  for (int j = 0; j < p.topk; ++j) {
    const int e = ids[j];
    if (e < 0 || e >= p.experts) continue;
    const float4 *src =
        reinterpret_cast<const float4 *>(w.partial + ((int64_t)t * p.topk + j) * p.hidden + col);
    lo = add4(lo, src[0]);
    hi = add4(hi, src[1]);
  }
  *reinterpret_cast<uint4 *>(p.out + token * p.out_row_stride + col) =
      make_uint4(pack_half2(lo.x, lo.y), pack_half2(lo.z, lo.w), pack_half2(hi.x, hi.y),
                 pack_half2(hi.z, hi.w));
}

}  // namespace

void launch_combine(const Params &p, const Pass &pass, const Workspace &w, cudaStream_t stream) {
  constexpr int kColumnsPerBlock = kCombineThreads * kColumnsPerThread;
  const dim3 grid((p.hidden + kColumnsPerBlock - 1) / kColumnsPerBlock, pass.tokens);
  nvfp4_moe_combine<<<grid, kCombineThreads, 0, stream>>>(p, pass, w);
}

}  // namespace sm70ops::nvfp4_moe
