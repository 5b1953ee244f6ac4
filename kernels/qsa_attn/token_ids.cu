// Token ids to op 1's expansion (token_ids.h): one block a row.
//   mark   each id of the row (any order) sets its bit in a token bitmap and its page's bit in a
//          page bitmap, both in shared memory and both cleared up to the row's causal bound
//          first (in whole 64-token word pairs, what a 64-token page's mask reads); -1 is padding;
//          an id outside [0, L) is skipped and a repeat sets nothing new, each reported in checked
//          mode;
//   emit   the page bitmap's set bits in ascending order, a block scan of their counts giving
//          each page its slot: sel_blocks, sel_mask (the page's P bits of the token bitmap) and
//          sel_count. Slots past the count are left unwritten: the attention reads only counted
//          ones.
// The bitmaps make the result independent of the ids' order, and each row costs its ids plus a
// pass over its live bitmap words (at 128K tokens, 4096 token words and 256 page words of 16-token
// pages), so the expansion stays a few percent of the attention that reads it.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/block_scan.cuh"
#include "kernels/common/checked.cuh"
#include "kernels/common/search.h"
#include "kernels/common/varlen.cuh"
#include "kernels/qsa_attn/token_ids.h"

namespace sm70ops::qsa_attn {
namespace {

using Params = sm70_qsa_token_ids_params;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// The block scan's words lead the dynamic shared memory, which holds all of it: the simulated
// V100 (v100sim) lays dynamic shared memory over static, so a static array would alias it.
constexpr int kScanWords = 16;
static_assert(kScanWords >= kWarps + 1 && kScanWords % 4 == 0, "the scan, 16-byte aligned");

// The row's leading ids: every column, or as many as its count column says.
__device__ int row_entries(const Params &p, const int32_t *ids, int t) {
  if (!p.count_column) return p.width;
  const int limit = p.width - 1, count = ids[limit];
  if (count < 0 || count > limit) {
    report_bad_index(p.checked, SM70_CHECKED_TOKEN_COUNT, t, count, p.width);
  }
  return min(max(count, 0), limit);
}

// Marks the row's ids below `len` in the token and page bitmaps (32-bit words: the simulated
// V100 has no 64-bit shared atomicOr). `first` is ids[threadIdx.x], already loaded.
__device__ void mark(const Params &p, const int32_t *ids, int first, int entries, int t, int len,
                     uint32_t *tokens, uint32_t *pages) {
  for (int i = threadIdx.x; i < entries; i += kThreads) {
    const int id = i == threadIdx.x ? first : ids[i];
    if (id == -1) continue;  // padding
    if (id < 0 || id >= len) {
      report_bad_index(p.checked, SM70_CHECKED_TOKEN_ID, t, id, len);
      continue;
    }
    const uint32_t bit = 1u << (id % 32);
    if (atomicOr(&tokens[id / 32], bit) & bit) {
      report_bad_index(p.checked, SM70_CHECKED_TOKEN_REPEAT, t, id, len);
    }
    const int page = id / p.page_size;
    atomicOr(&pages[page / 32], 1u << (page % 32));
  }
}

// The P token bits of `page`: two whole words at P 64; at P 16 or 32 part of one word (P divides
// 32, so such a page never straddles two).
__device__ __forceinline__ uint64_t page_mask(const uint32_t *tokens, int page, int page_size) {
  const int first = page * page_size;
  if (page_size == 64) return tokens[first / 32] | uint64_t(tokens[first / 32 + 1]) << 32;
  const uint32_t word = tokens[first / 32] >> (first % 32);
  return page_size == 32 ? word : word & ((1u << page_size) - 1);
}

// Writes the marked pages in ascending order, kThreads page words a round; returns the count.
__device__ int emit(const Params &p, int t, int page_words, const uint32_t *tokens,
                    const uint32_t *pages, int *scan) {
  int32_t *blocks = p.sel_blocks + (int64_t)t * p.sel_width;
  uint64_t *masks = p.sel_mask + (int64_t)t * p.sel_width;
  int base = 0;
  for (int w0 = 0; w0 < page_words; w0 += kThreads) {
    const int w = w0 + threadIdx.x;
    uint32_t bits = w < page_words ? pages[w] : 0u;
    int total;
    int slot = base + block_exclusive_scan<kThreads>(__popc(bits), scan, &total);
    for (; bits; bits &= bits - 1, ++slot) {
      const int page = w * 32 + __ffs(bits) - 1;
      blocks[slot] = page;
      masks[slot] = page_mask(tokens, page, p.page_size);
    }
    base += total;
  }
  return base;
}

__global__ void __launch_bounds__(kThreads) token_ids_to_pages(const Params p) {
  extern __shared__ __align__(16) uint32_t smem[];
  int *scan = reinterpret_cast<int *>(smem);
  uint32_t *tokens = smem + kScanWords;
  const int t = blockIdx.x;
  // The row's count and first ids are loaded before its length, whose search of query_start_loc
  // is a chain of loads: the latencies overlap (a few thousand cycles a row on a V100).
  const int32_t *ids = p.token_ids + (int64_t)t * p.token_ids_stride;
  const int entries = row_entries(p, ids, t);
  const int first = threadIdx.x < p.width ? ids[threadIdx.x] : -1;
  const int r = last_at_most(p.query_start_loc, p.requests, t);
  const int len = varlen_row_length(p.query_start_loc, p.seq_lens, p.max_seq_len, p.checked, r, t);
  uint32_t *pages = tokens + (p.max_seq_len + 63) / 64 * 2;  // whole 64-token pairs of words
  const int page_words = ((len + p.page_size - 1) / p.page_size + 31) / 32;
  for (int i = threadIdx.x; i < (len + 63) / 64 * 2; i += kThreads) tokens[i] = 0;
  for (int i = threadIdx.x; i < page_words; i += kThreads) pages[i] = 0;
  __syncthreads();
  mark(p, ids, first, entries, t, len, tokens, pages);
  __syncthreads();
  const int count = emit(p, t, page_words, tokens, pages, scan);
  if (threadIdx.x == 0) p.sel_count[t] = count;
}

}  // namespace
}  // namespace sm70ops::qsa_attn

extern "C" int32_t sm70_qsa_token_ids_width(int32_t ids_per_row, int32_t max_seq_len,
                                            int32_t page_size) {
  const int32_t pages = (max_seq_len + page_size - 1) / page_size;
  return ids_per_row < pages ? ids_per_row : pages;
}

extern "C" uint64_t sm70_qsa_token_ids_workspace_bytes(int32_t rows, int32_t sel_width) {
  return uint64_t(rows) * uint64_t(sel_width) * 12u + uint64_t(rows) * 4u;
}

extern "C" void sm70_qsa_token_ids_place(void *workspace, int32_t rows, int32_t sel_width,
                                         sm70_qsa_token_ids_params *p) {
  const uint64_t entries = uint64_t(rows) * uint64_t(sel_width);
  p->sel_mask = static_cast<uint64_t *>(workspace);
  p->sel_blocks = reinterpret_cast<int32_t *>(p->sel_mask + entries);
  p->sel_count = p->sel_blocks + entries;
  p->sel_width = sel_width;
}

extern "C" uint32_t sm70_qsa_token_ids_smem_bytes(int32_t max_seq_len, int32_t page_size) {
  const uint32_t token_words = (uint32_t(max_seq_len) + 63u) / 64u;
  const uint32_t pages = (uint32_t(max_seq_len) + uint32_t(page_size) - 1u) / uint32_t(page_size);
  return sm70ops::qsa_attn::kScanWords * 4u + token_words * 8u + (pages + 31u) / 32u * 4u;
}

extern "C" int32_t sm70_qsa_token_ids_launch(const sm70_qsa_token_ids_params *p, void *stream) {
  const uint32_t smem = sm70_qsa_token_ids_smem_bytes(p->max_seq_len, p->page_size);
  sm70ops::qsa_attn::token_ids_to_pages<<<p->rows, sm70ops::qsa_attn::kThreads, smem,
                                          static_cast<cudaStream_t>(stream)>>>(*p);
  return static_cast<int32_t>(cudaGetLastError());
}
