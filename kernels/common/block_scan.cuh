// Block-wide exclusive prefix sum of one int per thread, for order-preserving compaction, and
// warp-aggregated slot reservation, for appending to a shared list.
#pragma once

#include <cstdint>

namespace sm70ops {

constexpr unsigned kFullMask = 0xffffffffu;

template <class T>
__device__ __forceinline__ T warp_inclusive_scan(T value) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T other = __shfl_up_sync(kFullMask, value, offset);
    if (lane >= offset) value += other;
  }
  return value;
}

// Warp-aggregated slot reservation on `counter` for the lanes of `group`: the group's first lane
// reserves popc(group) slots with one atomic (one per group, not per lane: lanes appending to one
// counter would otherwise serialise on it), and the lanes take them in lane order. Called by every
// lane of the warp; a lane of `group` gets its slot, any other lane a value to ignore (an empty
// group issues no atomic, and its source lane, -1, reads lane 31).
template <class T>
__device__ __forceinline__ T warp_reserve(T *counter, unsigned group) {
  const int lane = threadIdx.x & 31;
  const T issued =
      lane == __ffs(group) - 1 ? atomicAdd(counter, static_cast<T>(__popc(group))) : T(0);
  return __shfl_sync(kFullMask, issued, __ffs(group) - 1) +
         static_cast<T>(__popc(group & ((1u << lane) - 1)));
}

// Returns the sum of `v` (as a T, scratch's type) over the threads before this one; *total gets
// the block's sum. `scratch` holds kThreads / 32 + 1 values of shared memory. Every thread of the
// block must call it.
template <int kThreads, class T, class V>
__device__ __forceinline__ T block_exclusive_scan(V v, T *scratch, T *total) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const T value = v;
  const T inclusive = warp_inclusive_scan(value);
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const T warp_sum = lane < kWarps ? scratch[lane] : T(0);
    const T warp_prefix = warp_inclusive_scan(warp_sum);
    if (lane < kWarps) scratch[lane] = warp_prefix - warp_sum;
    if (lane == kWarps - 1) scratch[kWarps] = warp_prefix;
  }
  __syncthreads();
  const T result = scratch[warp] + inclusive - value;
  *total = scratch[kWarps];
  __syncthreads();  // scratch is reused by the next call
  return result;
}

}  // namespace sm70ops
