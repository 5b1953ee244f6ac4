// out[t] = sum over slots j = 0..k-1, in that order, of the down GEMM's fp16 partial of pair
// (t, j) (router weight already applied), in fp32, then fp16. Slots whose id is outside [0, E) were
// never computed and add nothing. A fixed order and no atomics: the result is the same on every
// run.
#include <cuda_fp16.h>

#include "kernels/nvfp4_moe/nvfp4_moe_internal.cuh"

namespace sm70ops::nvfp4_moe {
namespace {

constexpr int kCombineThreads = 256;
constexpr int kColumnsPerThread = 8;  // one 16-byte fp16 read per slot, one 16-byte store

// sum[0..7] += the eight halves of `bits`.
__device__ __forceinline__ void add8(uint4 bits, float (&sum)[8]) {
  const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(as_half2(words[i]));
    sum[2 * i] += f.x;
    sum[2 * i + 1] += f.y;
  }
}

__global__ void __launch_bounds__(kCombineThreads)
    nvfp4_moe_combine(const Params p, const Pass pass, const Workspace w) {
  const int t = blockIdx.y;
  const int col = (blockIdx.x * kCombineThreads + threadIdx.x) * kColumnsPerThread;
  if (col >= p.hidden) return;
  const int64_t token = pass.token0 + t;
  const int32_t *ids = p.topk_ids + token * p.topk_ids_row_stride;
  // Every slot's partial in flight at once (the ids first, then the loads); the sum still runs
  // in slot order.
  bool routed[kMaxTopk];
  uint4 part[kMaxTopk];
#pragma unroll
  for (int j = 0; j < kMaxTopk; ++j) {
    const int e = j < p.topk ? ids[j] : -1;
    routed[j] = e >= 0 && e < p.experts;
  }
#pragma unroll
  for (int j = 0; j < kMaxTopk; ++j) {
    if (routed[j]) {
      part[j] =
          *reinterpret_cast<const uint4 *>(w.partial + ((int64_t)t * p.topk + j) * p.hidden + col);
    }
  }
  float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < kMaxTopk; ++j) {
    if (routed[j]) add8(part[j], sum);
  }
  *reinterpret_cast<uint4 *>(p.out + token * p.out_row_stride + col) =
      make_uint4(pack_half2(sum[0], sum[1]), pack_half2(sum[2], sum[3]), pack_half2(sum[4], sum[5]),
                 pack_half2(sum[6], sum[7]));
}

}  // namespace

void launch_combine(const Params &p, const Pass &pass, const Workspace &w, cudaStream_t stream) {
  constexpr int kColumnsPerBlock = kCombineThreads * kColumnsPerThread;
  const dim3 grid((p.hidden + kColumnsPerBlock - 1) / kColumnsPerBlock, pass.tokens);
  nvfp4_moe_combine<<<grid, kCombineThreads, 0, stream>>>(p, pass, w);
}

}  // namespace sm70ops::nvfp4_moe
