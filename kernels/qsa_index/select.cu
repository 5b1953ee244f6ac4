// QSA index selection: per row, the threshold from the samples, then the exact top-K and its
// expansion to pages and 64-bit masks.
//
//   threshold  the sample_rank(K)-th largest sample of the row (-inf when the row keeps all its
//              keys, or has fewer samples; +inf when it sees at most K keys and takes them all).
//   select     with at least K keys above the threshold: radix select of the top K among them in
//              shared memory; with fewer: all of them, and the lowest-position keys tied at the
//              threshold. A row the sample misjudged (too few kept, or more than kCandidates) is
//              rescued: the same selection over scores recomputed on CUDA cores, exact but slow.
//              The selection is a bitmap in shared memory whose 64-bit words are the pages'
//              masks, so indices and expansion come out of one ordered scan. A row of at most
//              K keys needs none of this: emit_every_key writes all of them out directly.
#include <cuda_fp16.h>

#include "kernels/common/radix_select.cuh"
#include "kernels/common/smem.cuh"
#include "kernels/qsa_index/qsa_index_internal.cuh"

namespace sm70ops::qsa_index {
namespace {

constexpr int kThreads = 512;

// ---- threshold

struct ThresholdSmem {
  RadixScratch radix;
  uint32_t keys[SM70_QSA_INDEX_MAX_SEQ_LEN / kSampleSpan * kSampleGroup];
};

__global__ void __launch_bounds__(kThreads)
    qsa_index_threshold(const Params p, int c0, const Workspace ws, int rank) {
  __shared__ ThresholdSmem s;
  const int t = c0 + blockIdx.x, r = row_request(p, t);
  const int len = r < 0 ? 0 : row_length(p, r, t);
  const int n = sample_groups(len) * kSampleGroup;
  const float *samples = ws.samples + (int64_t)blockIdx.x * ws.sample_ld;
  const int valid = len / kSampleSpan * kSampleGroup + min(kSampleGroup, len % kSampleSpan);
  float threshold = INFINITY;  // L <= K: every key is taken, no candidate is needed
  const bool unsampled = keeps_all(len) || valid < rank;
  if (len > p.topk && unsampled) threshold = -INFINITY;
  if (len > p.topk && !unsampled) {
    for (int i = threadIdx.x; i < n; i += kThreads) {  // samples past L rank below every score
      const bool live = (i / kSampleGroup) * kSampleSpan + i % kSampleGroup < len;
      s.keys[i] = live ? order_key(samples[i]) : 0u;
    }
    __syncthreads();
    threshold = key_value(kth_largest_key<kThreads>(s.keys, n, rank, s.radix));
  }
  if (threadIdx.x == 0) {
    ws.threshold[blockIdx.x] = threshold;
    ws.count[blockIdx.x] = 0;
  }
  uint32_t *ties = ws.ties + (int64_t)blockIdx.x * ws.tie_words;
  for (int w = threadIdx.x; w < ws.tie_words; w += kThreads) ties[w] = 0;
}

// ---- select

// Row `row` of request `request`, `len` keys, whose scores a rescue recomputes on CUDA cores:
// its queries and weights, in shared memory (SelectSmem) with the rest, since held in registers
// across the rescue they spilled at a V100's 64 a thread (what two blocks of 512 threads per SM
// leave). The keys' layout is read from the kernel's parameters where a score needs it.
struct RecomputedRow {
  __half q[kHeads][kDim];
  float w[kHeads];
  int request;
  int row;
  int len;

  __device__ float score(const Params &p, int j) const {
    const int page = p.block_table[request * p.block_table_stride + j / kPage];
    if (page < 0 || page >= p.num_pages) {  // as the scorer: zero keys
      report_bad_index(p.checked, SM70_CHECKED_PAGE_ID, row, page, p.num_pages);
      return 0.f;
    }
    const uint4 *k = reinterpret_cast<const uint4 *>(p.k_index + page * p.k_page_stride +
                                                     (j % kPage) * p.k_token_stride);
    float dot[kHeads] = {0.f, 0.f, 0.f, 0.f};
    for (int c = 0; c < kDim / 8; ++c) {
      const uint4 raw = k[c];
      const __half2 *kh = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const __half2 *qh = reinterpret_cast<const __half2 *>(&q[h][c * 8]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 a = __half22float2(qh[e]), b = __half22float2(kh[e]);
          dot[h] += a.x * b.x + a.y * b.y;
        }
      }
    }
    float v = 0.f;
#pragma unroll
    for (int h = 0; h < kHeads; ++h) v += w[h] * fmaxf(dot[h], 0.f);
    return v;
  }
};

// A select block's shared memory: the candidates' keys, and after them the selection bitmap,
// sized for the call's longest row (select_smem_bytes). The candidates' positions stay in the
// workspace: only the keys a selection takes, and ties at its cut, read theirs. Up to about 55K
// keys a block then fits twice in a V100 SM's 96 KB (41 KB and a bit per key), where with the
// positions and a bitmap for 131072 keys (89 KB) it fitted once.
struct SelectSmem {
  RadixScratch radix;
  uint32_t cand_key[kCandidates];
  RecomputedRow rescued;
  uint32_t cand_count;

  // Bit j of word w: position 32 w + j is selected.
  __device__ uint32_t *bitmap() { return reinterpret_cast<uint32_t *>(this + 1); }
};

// Bitmap words for a row of `len` keys: whole pages, so that each pair of words is a page mask.
__host__ __device__ constexpr int bitmap_words(int len) { return 2 * ((len + kPage - 1) / kPage); }
constexpr uint32_t smem_bytes(int max_seq_len) {
  return sizeof(SelectSmem) + bitmap_words(max_seq_len) * sizeof(uint32_t);
}
constexpr uint32_t kMostSmemBytes = smem_bytes(SM70_QSA_INDEX_MAX_SEQ_LEN);
static_assert(kMostSmemBytes <= kV100SmemBytes, "a V100 block holds at most 96 KB");

// Where the candidates' positions are: the row's slots in the workspace, or none in a keep-all
// call, whose slot i holds key i.
__device__ __forceinline__ int candidate_position(const int32_t *pos, int i) {
  return pos == nullptr ? i : pos[i];
}

__device__ __forceinline__ void mark_position(int pos, SelectSmem &s) {
  atomicOr(&s.bitmap()[pos >> 5], 1u << (pos & 31));
}

// A warp covers 32 aligned positions, i.e. one bitmap word.
__device__ __forceinline__ void mark_word(bool selected, int i, SelectSmem &s) {
  const unsigned bits = __ballot_sync(kFullMask, selected);
  if ((threadIdx.x & 31) == 0 && bits) s.bitmap()[i >> 5] |= bits;
}

// The top K of a set of candidates as a cut of their keys: those above `key`, and of those equal
// to it all (tie_need < 0) or the tie_need lowest positions (ties go low).
struct Cut {
  uint32_t key;
  int tie_need;
};

// The cut of the top r.need of the n candidates matching r, from level `level` on, whose
// histogram is already in s.radix when `counted`. Stops as soon as the chosen bin is taken whole
// (scores are spread, so that is usually a level or two early): the keys at or above its lowest
// one are then exactly the top r.need.
__device__ Cut find_cut(int n, Radix r, int level, bool counted, SelectSmem &s) {
  for (;; ++level, counted = false) {
    const int width = radix_bits(level);
    if (!counted) key_histogram<kThreads>(s.cand_key, n, r, width, s.radix);
    find_bin(width, r.need, s.radix);
    const Radix next = narrowed(r, width, s.radix);
    if (s.radix.in_bin == (uint32_t)next.need) return Cut{next.prefix << (32 - next.consumed), -1};
    if (next.consumed == 32) return Cut{next.prefix, next.need};
    r = next;
  }
}

// Candidates equal to the cut's key, in no order: the `need` lowest positions win. Positions are
// unique, so rewriting each tie's key as its inverted position and selecting the `need` largest
// of those resolves the ties exactly; other candidates drop to key 0.
__device__ void take_candidate_ties(int n, uint32_t key, int need, const int32_t *pos,
                                    SelectSmem &s) {
  for (int i = threadIdx.x; i < n; i += kThreads) {
    s.cand_key[i] = s.cand_key[i] == key ? ~(uint32_t)candidate_position(pos, i) : 0u;
  }
  __syncthreads();
  const uint32_t last = kth_largest_key<kThreads>(s.cand_key, n, need, s.radix);
  for (int i = threadIdx.x; i < n; i += kThreads) {
    if (s.cand_key[i] >= last && s.cand_key[i] != 0u) mark_position(~s.cand_key[i], s);
  }
}

// Marks the cut's candidates in one pass over them. With their positions in the workspace, a
// marking pass per radix level (the keys above each level's bin) was 2-6% slower on an H200.
__device__ void take_cut(int n, const Cut cut, const int32_t *pos, SelectSmem &s) {
  const bool all_ties = cut.tie_need < 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const uint32_t k = s.cand_key[i];
    if (k > cut.key || (all_ties && k == cut.key)) mark_position(candidate_position(pos, i), s);
  }
  if (all_ties) return;
  __syncthreads();  // every key is read before the ties rewrite them
  take_candidate_ties(n, cut.key, cut.tie_need, pos, s);
}

// ---- rescue: the row's scores recomputed on CUDA cores, one key per thread

// A rescue collects at most half as many candidates as the filter may keep: their positions
// take the other half of the keys' array.
constexpr int kRescueCandidates = kCandidates / 2;
__device__ __forceinline__ int32_t *rescue_positions(SelectSmem &s) {
  return reinterpret_cast<int32_t *>(s.cand_key + kRescueCandidates);
}

// Appends the lanes' keys with `take` to the candidates: one shared atomic per warp.
__device__ __forceinline__ void collect_candidate(bool take, uint32_t key, int position,
                                                  SelectSmem &s) {
  const unsigned takers = __ballot_sync(kFullMask, take);
  const uint32_t slot = warp_reserve(&s.cand_count, takers);
  if (!take || slot >= (uint32_t)kRescueCandidates) return;  // the histogram counted at most that
  s.cand_key[slot] = key;
  rescue_positions(s)[slot] = position;
}

// One pass over the row after level `width` chose a bin: marks the keys above it, and either
// histograms the next level over the keys in it or collects them as candidates.
__device__ void rescue_pass(const Params &p, const RecomputedRow &row, const Radix r, int width,
                            bool collect, int next_width, SelectSmem &s) {
  const uint32_t bin = s.radix.bin;
  const Radix next = narrowed(r, width, s.radix);
  __syncthreads();  // s.radix.bin is read before the histogram is cleared
  if (!collect && next.consumed < 32) clear_histogram<kThreads>(next_width, s.radix);
  for (int base = 0; base < row.len; base += kThreads) {
    const int i = base + threadIdx.x;
    const uint32_t k = i < row.len ? order_key(row.score(p, i)) : 0u;
    const bool live = i < row.len && matches(k, r);
    const uint32_t d = live ? digit(k, r.consumed, width) : 0u;
    mark_word(live && d > bin, i, s);
    const bool in_bin = live && d == bin;
    if (collect) {
      collect_candidate(in_bin, k, i, s);
    } else if (next.consumed < 32) {
      histogram_add(in_bin, digit(k, next.consumed, next_width), s.radix.hist);
    }
  }
  __syncthreads();
}

// The first `need` positions whose key equals the full prefix (ties go low).
__device__ void take_row_ties(const Params &p, const RecomputedRow &row, const Radix full,
                              SelectSmem &s) {
  int taken = 0;
  for (int base = 0; base < row.len && taken < full.need; base += kThreads) {
    const int i = base + threadIdx.x;
    const bool tie = i < row.len && order_key(row.score(p, i)) == full.prefix;
    int total;
    const int rank = taken + block_exclusive_scan<kThreads>(tie, s.radix.scan, &total);
    mark_word(tie && rank < full.need, i, s);
    taken += total;
  }
}

__device__ void rescue(const Params &p, const RecomputedRow &row, SelectSmem &s) {
  Radix r{0u, 0, p.topk};
  if (threadIdx.x == 0) s.cand_count = 0;
  clear_histogram<kThreads>(radix_bits(0), s.radix);
  for (int base = 0; base < row.len; base += kThreads) {
    const int i = base + threadIdx.x;
    const uint32_t k = i < row.len ? order_key(row.score(p, i)) : 0u;
    histogram_add(i < row.len, digit(k, 0, radix_bits(0)), s.radix.hist);
  }
  __syncthreads();
  for (int level = 0;; ++level) {
    const int width = radix_bits(level);
    find_bin(width, r.need, s.radix);
    const Radix next = narrowed(r, width, s.radix);
    const uint32_t in_bin = s.radix.in_bin;
    const bool last = next.consumed == 32;
    const bool collect = !last && in_bin <= (uint32_t)kRescueCandidates;
    rescue_pass(p, row, r, width, collect, last ? 0 : radix_bits(level + 1), s);
    if (last) return take_row_ties(p, row, next, s);
    if (collect) {
      const Cut cut = find_cut((int)in_bin, next, level + 1, false, s);
      return take_cut((int)in_bin, cut, rescue_positions(s), s);
    }
    r = next;
  }
}

// ---- emission: each thread takes a contiguous run of words (pages), so one block scan orders
// the whole row

__device__ __forceinline__ int run_begin(int n) {
  return min(threadIdx.x * ((n + kThreads - 1) / kThreads), n);
}
__device__ __forceinline__ int run_end(int n) {
  return min((threadIdx.x + 1) * ((n + kThreads - 1) / kThreads), n);
}

__device__ void emit_topk_idx(const Params &p, int t, int words, SelectSmem &s) {
  int32_t *out = p.topk_idx + (int64_t)t * p.topk_idx_stride;
  const int w0 = run_begin(words), w1 = run_end(words);
  int selected = 0;
  const uint32_t *bitmap = s.bitmap();
  for (int w = w0; w < w1; ++w) selected += __popc(bitmap[w]);
  int total;
  int slot = block_exclusive_scan<kThreads>(selected, s.radix.scan, &total);
  for (int w = w0; w < w1; ++w) {
    for (uint32_t bits = bitmap[w]; bits; bits &= bits - 1) out[slot++] = w * 32 + __ffs(bits) - 1;
  }
  for (int i = total + threadIdx.x; i < p.topk; i += kThreads) out[i] = -1;
}

__device__ void emit_pages(const Params &p, int t, int pages, SelectSmem &s) {
  int32_t *blocks = p.sel_blocks + (int64_t)t * p.sel_blocks_stride;
  uint64_t *masks = p.sel_mask + (int64_t)t * p.sel_mask_stride;
  const int g0 = run_begin(pages), g1 = run_end(pages);
  const uint32_t *bitmap = s.bitmap();
  auto mask_of = [&](int g) {
    return (uint64_t)bitmap[2 * g] | ((uint64_t)bitmap[2 * g + 1] << 32);
  };
  int used = 0;
  for (int g = g0; g < g1; ++g) used += mask_of(g) != 0;
  int total;
  int slot = block_exclusive_scan<kThreads>(used, s.radix.scan, &total);
  for (int g = g0; g < g1; ++g) {
    const uint64_t mask = mask_of(g);
    if (mask != 0) {
      blocks[slot] = g;
      masks[slot++] = mask;
    }
  }
  for (int i = total + threadIdx.x; i < p.sel_width; i += kThreads) {
    blocks[i] = -1;
    masks[i] = 0;
  }
  if (threadIdx.x == 0) p.sel_count[t] = total;
}

// A row of at most K keys selects them all: positions 0..L-1, every page whole but the last.
__device__ void emit_every_key(const Params &p, int t, int len, int pages) {
  int32_t *out = p.topk_idx + (int64_t)t * p.topk_idx_stride;
  for (int i = threadIdx.x; p.topk_idx != nullptr && i < p.topk; i += kThreads) {
    out[i] = i < len ? i : -1;
  }
  if (p.sel_blocks == nullptr) return;
  int32_t *blocks = p.sel_blocks + (int64_t)t * p.sel_blocks_stride;
  uint64_t *masks = p.sel_mask + (int64_t)t * p.sel_mask_stride;
  for (int g = threadIdx.x; g < p.sel_width; g += kThreads) {
    const int rest = len - g * kPage;
    blocks[g] = g < pages ? g : -1;
    masks[g] = rest >= kPage ? ~0ull : rest > 0 ? (1ull << rest) - 1 : 0ull;
  }
  if (threadIdx.x == 0) p.sel_count[t] = pages;
}

// The first `need` set bits of the row's tie bitmap, in position order, into the selection. Its
// plain writes come after the scan's barrier, so after any marks made before the call.
__device__ void take_ties(const uint32_t *ties, int words, int need, SelectSmem &s) {
  int base = 0;
  for (int w0 = 0; w0 < words && base < need; w0 += kThreads) {
    const int w = w0 + threadIdx.x;
    uint32_t bits = w < words ? ties[w] : 0u;
    int total;
    const int before = base + block_exclusive_scan<kThreads>(__popc(bits), s.radix.scan, &total);
    for (int taken = before; bits && taken < need; ++taken) {
      s.bitmap()[w] |= bits & (~bits + 1);  // the lowest remaining tie
      bits &= bits - 1;
    }
    base += total;
  }
}

// The top K from what the filter kept. False when it kept too little or too much: rescue the row.
__device__ bool select_kept(const Params &p, const Workspace &ws, int len, SelectSmem &s) {
  // A keep-all call's filter put key j in slot j, with no counter: all L are kept.
  const bool slot_is_position = call_keeps_all(p);
  const int n = slot_is_position ? len : ws.count[blockIdx.x];
  if (n > kCandidates) return false;
  const int64_t row = (int64_t)blockIdx.x * kCandidates;
  const int32_t *pos = slot_is_position ? nullptr : ws.cand_pos + row;
  const uint32_t *ties = ws.ties + (int64_t)blockIdx.x * ws.tie_words;
  const int words = (len + 31) / 32;
  int tied = 0;
  if (n < p.topk) {  // every kept key is taken: are there enough ties to fill up to K?
    int partial = 0;
    for (int w = threadIdx.x; w < words; w += kThreads) partial += __popc(ties[w]);
    block_exclusive_scan<kThreads>(partial, s.radix.scan, &tied);
    if (n + tied < p.topk) return false;
  }
  // The copy into shared memory also counts the first radix level when a selection follows.
  // It is latency-bound: each thread loads a batch before it uses any of it. Measured first while
  // the histogram voted per warp; with its plain atomic, a `#pragma unroll 4` loop instead was
  // still about 0.5% slower at every size (H200, same run: 131072 keys 0.880 -> 0.885 ms, 128K
  // prefill 65.0 -> 65.5).
  const bool radix_follows = n >= p.topk;
  if (radix_follows) clear_histogram<kThreads>(radix_bits(0), s.radix);
  constexpr int kBatch = 4;
  for (int base = 0; base < n; base += kBatch * kThreads) {
    float score[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads + threadIdx.x;
      score[j] = i < n ? ws.cand_score[row + i] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads + threadIdx.x;
      const uint32_t key = order_key(score[j]);
      if (i < n) s.cand_key[i] = key;
      if (radix_follows) histogram_add(i < n, digit(key, 0, radix_bits(0)), s.radix.hist);
    }
  }
  __syncthreads();
  if (radix_follows) {
    take_cut(n, find_cut(n, Radix{0u, 0, p.topk}, 0, true, s), pos, s);
  } else {
    take_cut(n, Cut{0u, -1}, pos, s);  // every kept key (no key is below 0)
    take_ties(ties, words, p.topk - n, s);
  }
  return true;
}

// Row t of request r, `len` keys, into s.rescued.
__device__ void load_rescued_row(const Params &p, int r, int t, int len, SelectSmem &s) {
  RecomputedRow &row = s.rescued;
  for (int i = threadIdx.x; i < kHeads * kDim; i += kThreads) {
    const int h = i / kDim, d = i % kDim;
    reinterpret_cast<uint16_t *>(row.q[h])[d] = p.q[t * p.q_row_stride + h * p.q_head_stride + d];
  }
  if (threadIdx.x < kHeads) row.w[threadIdx.x] = p.weights[t * p.weights_row_stride + threadIdx.x];
  if (threadIdx.x == 0) row.request = r, row.row = t, row.len = len;
  __syncthreads();
}

// Two blocks per SM where their shared memory allows it (select_smem_bytes).
__global__ void __launch_bounds__(kThreads, 2)
    qsa_index_select(const Params p, int c0, const Workspace ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  SelectSmem &s = *reinterpret_cast<SelectSmem *>(smem);
  const int t = c0 + blockIdx.x, r = row_request(p, t);
  const int len = r < 0 ? 0 : row_length(p, r, t);
  const int pages = (len + kPage - 1) / kPage;
  if (len <= p.topk) return emit_every_key(p, t, len, pages);
  const int words = bitmap_words(len);
  for (int w = threadIdx.x; w < words; w += kThreads) s.bitmap()[w] = 0u;
  __syncthreads();
  if (!select_kept(p, ws, len, s)) {
    load_rescued_row(p, r, t, len, s);
    rescue(p, s.rescued, s);
  }
  __syncthreads();
  if (p.topk_idx != nullptr) emit_topk_idx(p, t, words, s);
  if (p.sel_blocks != nullptr) emit_pages(p, t, pages, s);
}

}  // namespace

void launch_threshold(const Params &p, int c0, int c1, const Workspace &w, cudaStream_t stream) {
  if (call_keeps_all(p)) return;  // no row has a threshold, and the select knows count = L
  qsa_index_threshold<<<c1 - c0, kThreads, 0, stream>>>(p, c0, w, sample_rank(p.topk));
}

void launch_select(const Params &p, int c0, int c1, const Workspace &w, cudaStream_t stream) {
  const uint32_t bytes = smem_bytes(p.max_seq_len);
  // The opt-in is the kernel's, shared by every host thread's launches: always the most any call
  // needs, so that no thread lowers it under another's launch.
  allow_dynamic_smem(qsa_index_select, kMostSmemBytes);
  prefer_max_carveout(qsa_index_select);  // two blocks per V100 SM up to about 55K keys
  qsa_index_select<<<c1 - c0, kThreads, bytes, stream>>>(p, c0, w);
}

uint32_t threshold_smem_bytes() { return sizeof(ThresholdSmem); }

uint32_t select_smem_bytes(int max_seq_len) { return smem_bytes(max_seq_len); }

}  // namespace sm70ops::qsa_index
