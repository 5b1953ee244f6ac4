// Block-wide radix selection over 32-bit order keys: the building blocks of an exact top-k.
//
// A selection narrows a key prefix level by level (widths: radix_bits). At each level a
// histogram of the next digit over the keys still matching the prefix tells which bin holds the
// need-th largest key; the bins above it are taken whole, the bin itself becomes the new prefix.
#pragma once

#include <cstdint>

#include "kernels/common/block_scan.cuh"

namespace sm70ops {

constexpr int kRadixLevels = 4;
constexpr int kRadixMaxBins = 1 << 11;

// Digit width of each level: 11 + 8 + 8 + 5 = 32. The first level is the widest because it runs
// over the most keys; later ones run over one bin's keys.
__host__ __device__ constexpr int radix_bits(int level) {
  return level == 0 ? 11 : level == 3 ? 5 : 8;
}

// Larger float -> larger unsigned key, so radix digits rank scores.
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The selection so far: keys whose top `consumed` bits equal `prefix` are undecided, and `need`
// of them are still to be taken.
struct Radix {
  uint32_t prefix;
  int consumed;
  int need;
};

__device__ __forceinline__ bool matches(uint32_t key, const Radix r) {
  return r.consumed == 0 || (key >> (32 - r.consumed)) == r.prefix;
}

__device__ __forceinline__ uint32_t digit(uint32_t key, int consumed, int width) {
  return (key >> (32 - consumed - width)) & ((1u << width) - 1);
}

// Shared memory a selection works in.
struct RadixScratch {
  alignas(16) uint32_t hist[kRadixMaxBins];  // read as uint4 by find_bin
  int scan[33];
  uint32_t bin;     // find_bin's answer
  uint32_t in_bin;  // keys in it
  uint32_t above;   // keys in the bins above it
  uint32_t key;     // kth_largest_key's answer once its bin holds one key
};

// The state after a level chose s.bin.
__device__ __forceinline__ Radix narrowed(const Radix r, int width, const RadixScratch &s) {
  return {(r.prefix << width) | s.bin, r.consumed + width, r.need - (int)s.above};
}

template <int kThreads>
__device__ void clear_histogram(int width, RadixScratch &s) {
  for (int b = threadIdx.x; b < (1 << width); b += kThreads) s.hist[b] = 0;
  __syncthreads();
}

// One shared atomic per live key, but one per warp where all of the warp's live keys fall in one
// bin: 32 atomics on one address serialise, and rows of equal scores (every key the same, or
// ReLU's zeros) put every key in one bin at every level. Finding each distinct bin of a warp
// instead (__match_any_sync) made the histograms wait on the match (H200, ncu: 35% of the
// threshold's stall samples); this costs a vote and a shuffle. Called by every lane of a warp.
__device__ __forceinline__ void histogram_add(bool live, uint32_t bin, uint32_t *hist) {
  const unsigned lanes = __ballot_sync(kFullMask, live);
  if (lanes == 0u) return;
  const uint32_t leader_bin = __shfl_sync(kFullMask, bin, __ffs(lanes) - 1);  // every lane
  if (__all_sync(kFullMask, !live || bin == leader_bin)) {
    const int leader = __ffs(lanes) - 1;
    if ((threadIdx.x & 31) == leader) atomicAdd(&hist[bin], __popc(lanes));
  } else if (live) {
    atomicAdd(&hist[bin], 1u);
  }
}

// Histogram of the next digit over keys[0, n) that match r.
template <int kThreads>
__device__ void key_histogram(const uint32_t *keys, int n, const Radix r, int width,
                              RadixScratch &s) {
  clear_histogram<kThreads>(width, s);
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + threadIdx.x;
    const uint32_t k = i < n ? keys[i] : 0u;
    histogram_add(i < n && matches(k, r), digit(k, r.consumed, width), s.hist);
  }
  __syncthreads();
}

// The bin holding the need-th largest key (bins above it hold s.above < need keys). One warp:
// each lane sums a slice of the bins (highest first), a scan finds the slice that reaches
// `need`, and the warp scans that slice 32 bins at a time. No lane walks bins one by one: at the
// first level's 2048 bins that walk was a quarter of the select kernel's time.
__device__ void find_bin(int width, int need, RadixScratch &s) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, per = (1 << width) / 32;
    const int top = (1 << width) - lane * per;  // lane 0 takes the highest bins
    int sum = 0;
    if (per % 4 == 0) {
      for (int b = top - per; b < top; b += 4) {
        const uint4 h = *reinterpret_cast<const uint4 *>(&s.hist[b]);
        sum += h.x + h.y + h.z + h.w;
      }
    } else {
      for (int b = top - per; b < top; ++b) sum += s.hist[b];
    }
    const int inclusive = warp_inclusive_scan(sum);
    // Callers ask for at most the keys counted, so some lane reaches `need`.
    const int owner = __ffs(__ballot_sync(kFullMask, inclusive >= need)) - 1;
    const int owner_top = (1 << width) - owner * per;
    int running = __shfl_sync(kFullMask, inclusive - sum, owner);  // keys above the slice
    for (int first = 0; owner >= 0 && first < per; first += 32) {
      const int b = owner_top - 1 - first - lane;  // descending
      const int h = first + lane < per ? (int)s.hist[b] : 0;
      const int upto = running + warp_inclusive_scan(h);
      const unsigned reached = __ballot_sync(kFullMask, upto >= need);
      if (reached != 0) {
        if (lane == __ffs(reached) - 1) {
          s.bin = b;
          s.in_bin = h;
          s.above = upto - h;
        }
        break;
      }
      running = __shfl_sync(kFullMask, upto, 31);
    }
  }
  __syncthreads();
}

// The need-th largest of keys[0, n) (1 <= need <= n): its exact key. A bin holding one key
// ends the narrowing early: one pass finds that key.
template <int kThreads>
__device__ uint32_t kth_largest_key(const uint32_t *keys, int n, int need, RadixScratch &s) {
  Radix r{0u, 0, need};
  for (int level = 0; level < kRadixLevels; ++level) {
    const int width = radix_bits(level);
    key_histogram<kThreads>(keys, n, r, width, s);
    find_bin(width, r.need, s);
    const bool single = s.in_bin == 1u;
    r = narrowed(r, width, s);
    __syncthreads();  // s.bin, s.in_bin and s.above are read before the next level
    if (single && r.consumed < 32) {
      for (int i = threadIdx.x; i < n; i += kThreads) {
        if (matches(keys[i], r)) s.key = keys[i];
      }
      __syncthreads();
      return s.key;
    }
  }
  return r.prefix;
}

}  // namespace sm70ops
