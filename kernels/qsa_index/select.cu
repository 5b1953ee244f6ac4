// QSA index selection: per row, the threshold from the samples, then the exact top K of its
// keys, and the expansion of its token set (the selected groups' tokens and the tail) to
// pages and 64-bit token masks.
//
//   threshold  the sample_rank(K)-th largest of the row's samples (-inf when the row keeps all
//              its keys, or has fewer samples; +inf when it sees at most K keys and takes them
//              all).
//   select     with at least K keys above the threshold: radix select of the top K among them in
//              shared memory; with fewer: all of them, and the lowest-position keys tied at the
//              threshold. A row the filter misjudged (row_rescued) was rescored with every score
//              stored: the same radix select runs over those, level by level from the
//              workspace. The selection is a bitmap of keys in shared memory, so indices and
//              expansion come out of one ordered scan. A row of at most K keys needs none of
//              this: emit_every_token writes all of its tokens out directly.
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/common/radix_select.cuh"
#include "kernels/common/smem.cuh"
#include "kernels/qsa_index/qsa_index_internal.cuh"

namespace sm70ops::qsa_index {
namespace {

constexpr int kThreads = 512;

// ---- threshold

// The samples of one row as order keys, after the radix scratch.
struct ThresholdSmem {
  RadixScratch radix;
  __device__ uint32_t *keys() { return reinterpret_cast<uint32_t *>(this + 1); }
};
constexpr uint32_t threshold_bytes(int keys) {
  return sizeof(ThresholdSmem) + sample_ld(keys) * sizeof(uint32_t);
}
static_assert(threshold_bytes(kMaxKeys) <= kV100SmemBytes, "a V100 block holds at most 96 KB");

// Strata of a row of `keys` keys whose sampled key it sees: all but perhaps the last.
__device__ __forceinline__ int live_strata(int keys) {
  const int whole = keys / kStratum;
  return whole + (keys % kStratum != 0 && stratum_key(whole) < keys);
}

__global__ void __launch_bounds__(kThreads)
    qsa_index_threshold(const Params p, int c0, const Workspace ws, int rank) {
  extern __shared__ __align__(16) unsigned char smem[];
  ThresholdSmem &s = *reinterpret_cast<ThresholdSmem *>(smem);
  const int t = c0 + blockIdx.x, r = row_request(p, t);
  const int keys = r < 0 ? 0 : row_tokens(p, r, t) / p.ratio;
  const float *samples = ws.samples + (int64_t)blockIdx.x * ws.sample_ld;
  float threshold = INFINITY;  // G <= K: every key is taken, no candidate is needed
  const bool unsampled = keeps_all(keys) || live_strata(keys) < rank;
  if (keys > topk_keys(p) && unsampled) threshold = -INFINITY;
  if (keys > topk_keys(p) && !unsampled) {
    const int n = strata(keys);
    for (int i = threadIdx.x; i < n; i += kThreads) {  // unseen keys rank below every score
      s.keys()[i] = stratum_key(i) < keys ? order_key(samples[i]) : 0u;
    }
    __syncthreads();
    threshold = key_value(kth_largest_key<kThreads>(s.keys(), n, rank, s.radix));
  }
  if (threadIdx.x == 0) {
    ws.threshold[blockIdx.x] = threshold;
    ws.count[blockIdx.x] = 0;
    ws.tied[blockIdx.x] = 0;
  }
  uint32_t *ties = ws.ties + (int64_t)blockIdx.x * ws.tie_words;
  for (int w = threadIdx.x; w < tie_words(keys); w += kThreads) ties[w] = 0;
}

// ---- select

// A select block's shared memory: the candidates' keys, and after them the selection bitmap,
// sized for the call's longest row (select_smem_bytes). The candidates' positions stay in the
// workspace: only the keys a selection takes, and ties at its cut, read theirs. A bit per key
// keeps two blocks on a V100 SM up to about 55K keys (41 KB and the bitmap).
struct SelectSmem {
  RadixScratch radix;
  uint32_t cand_key[kCandidates];
  uint32_t cand_count;

  // Bit j of word w: key 32 w + j is selected.
  __device__ uint32_t *bitmap() { return reinterpret_cast<uint32_t *>(this + 1); }
};

// Bitmap words for a row of `keys` keys: whole 64-key spans, so that a page's keys (4 to 64 of
// them, a power of two) never straddle the bitmap's end.
__host__ __device__ constexpr int bitmap_words(int keys) { return 2 * ((keys + 63) / 64); }
constexpr uint32_t select_bytes(int keys) {
  return sizeof(SelectSmem) + bitmap_words(keys) * sizeof(uint32_t);
}
constexpr uint32_t kMostSmemBytes = select_bytes(kMaxKeys);
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

// Whether every one of the n candidates that matches r has the same key (then in s.radix.key):
// one pass, a warp reduction and one barrier's worth of shared scratch.
__device__ bool all_equal(int n, const Radix r, SelectSmem &s) {
  uint32_t lo = ~0u, hi = 0u;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const uint32_t k = s.cand_key[i];
    if (matches(k, r)) lo = min(lo, k), hi = max(hi, k);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    lo = min(lo, __shfl_xor_sync(kFullMask, lo, offset));
    hi = max(hi, __shfl_xor_sync(kFullMask, hi, offset));
  }
  constexpr int kWarps = kThreads / 32;
  static_assert(2 * kWarps <= sizeof(s.radix.scan) / sizeof(int), "a warp's lo and hi");
  uint32_t *bounds = reinterpret_cast<uint32_t *>(s.radix.scan);
  if (threadIdx.x % 32 == 0) bounds[threadIdx.x / 32] = lo, bounds[kWarps + threadIdx.x / 32] = hi;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) lo = min(lo, bounds[w]), hi = max(hi, bounds[kWarps + w]);
  if (threadIdx.x == 0) s.radix.key = lo;
  __syncthreads();  // bounds are read before the scratch is reused
  return lo == hi;
}

// The cut of the top r.need of the n candidates matching r, from level `level` on, whose
// histogram is already in s.radix when `counted`. Stops as soon as the chosen bin is taken whole
// (scores are spread, so that is usually a level or two early): the keys at or above its lowest
// one are then exactly the top r.need. When a level finds every candidate left in one bin (a
// row of equal scores), a pass that checks whether they share one key spares the levels below:
// ties decide.
__device__ Cut find_cut(int n, Radix r, int level, bool counted, SelectSmem &s) {
  uint32_t left = n;  // the candidates matching r
  for (;; ++level, counted = false) {
    const int width = radix_bits(level);
    if (!counted) key_histogram<kThreads>(s.cand_key, n, r, width, s.radix);
    find_bin(width, r.need, s.radix);
    const Radix next = narrowed(r, width, s.radix);
    if (s.radix.in_bin == (uint32_t)next.need) return Cut{next.prefix << (32 - next.consumed), -1};
    if (next.consumed == 32) return Cut{next.prefix, next.need};
    // in_bin and left are the same in every thread, so the whole block enters all_equal's barrier.
    const bool one_bin = s.radix.in_bin == left;
    if (one_bin && all_equal(n, next, s)) return Cut{s.radix.key, next.need};
    left = s.radix.in_bin;
    r = next;
  }
}

// Marks the first `need` of positions 0 .. n-1 for which is_tie(i) holds (ties go low): a block
// scan over the positions, a warp's 32 aligned ones a bitmap word.
template <class IsTie>
__device__ void take_first_ties(int n, int need, IsTie is_tie, SelectSmem &s) {
  int taken = 0;
  for (int base = 0; base < n && taken < need; base += kThreads) {
    const int i = base + threadIdx.x;
    const bool tie = i < n && is_tie(i);
    int total;
    const int rank = taken + block_exclusive_scan<kThreads>(tie, s.radix.scan, &total);
    mark_word(tie && rank < need, i, s);
    taken += total;
  }
}

// Candidates equal to the cut's key, in no order: the `need` lowest positions win. Where slot i
// holds position i (pos NULL: a keep-all call), those are the first `need` ties in slot order.
// Otherwise positions are unique, so rewriting each tie's key as its inverted position and
// selecting the `need` largest of those resolves the ties exactly; other candidates drop to 0.
__device__ void take_candidate_ties(int n, uint32_t key, int need, const int32_t *pos,
                                    SelectSmem &s) {
  if (pos == nullptr) {
    return take_first_ties(
        n, need, [&](int i) { return s.cand_key[i] == key; }, s);
  }
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

// ---- a rescored row: the same selection over all of its stored scores, one key per thread

// A rescored row's scores in the workspace, slot = key.
struct StoredRow {
  const float *score;
  int len;
  __device__ __forceinline__ uint32_t key(int i) const { return order_key(score[i]); }
};

// A stored row's selection collects at most half as many candidates as the filter may keep:
// their positions take the other half of the keys' array.
constexpr int kStoredCandidates = kCandidates / 2;
__device__ __forceinline__ int32_t *stored_positions(SelectSmem &s) {
  return reinterpret_cast<int32_t *>(s.cand_key + kStoredCandidates);
}

// Appends the lanes' keys with `take` to the candidates: one shared atomic per warp.
__device__ __forceinline__ void collect_candidate(bool take, uint32_t key, int position,
                                                  SelectSmem &s) {
  const unsigned takers = __ballot_sync(kFullMask, take);
  const uint32_t slot = warp_reserve(&s.cand_count, takers);
  if (!take || slot >= (uint32_t)kStoredCandidates) return;  // the histogram counted at most that
  s.cand_key[slot] = key;
  stored_positions(s)[slot] = position;
}

// One pass over the row after level `width` chose a bin: marks the keys above it, and either
// histograms the next level over the keys in it or collects them as candidates.
__device__ void stored_pass(const StoredRow &row, const Radix r, int width, bool collect,
                            int next_width, SelectSmem &s) {
  const uint32_t bin = s.radix.bin;
  const Radix next = narrowed(r, width, s.radix);
  __syncthreads();  // s.radix.bin is read before the histogram is cleared
  if (!collect && next.consumed < 32) clear_histogram<kThreads>(next_width, s.radix);
  for (int base = 0; base < row.len; base += kThreads) {
    const int i = base + threadIdx.x;
    const uint32_t k = i < row.len ? row.key(i) : 0u;
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

// Each radix level reads the row's stored scores once: two passes when the bin holding the K-th
// key is small (the common case), at most six (every score a tie: four levels and the ties).
__device__ void select_stored(const Params &p, const StoredRow &row, SelectSmem &s) {
  Radix r{0u, 0, topk_keys(p)};
  if (threadIdx.x == 0) s.cand_count = 0;
  clear_histogram<kThreads>(radix_bits(0), s.radix);
  for (int base = 0; base < row.len; base += kThreads) {
    const int i = base + threadIdx.x;
    const uint32_t k = i < row.len ? row.key(i) : 0u;
    histogram_add(i < row.len, digit(k, 0, radix_bits(0)), s.radix.hist);
  }
  __syncthreads();
  for (int level = 0;; ++level) {
    const int width = radix_bits(level);
    find_bin(width, r.need, s.radix);
    const Radix next = narrowed(r, width, s.radix);
    const uint32_t in_bin = s.radix.in_bin;
    const bool last = next.consumed == 32;
    const bool collect = !last && in_bin <= (uint32_t)kStoredCandidates;
    stored_pass(row, r, width, collect, last ? 0 : radix_bits(level + 1), s);
    if (last) {  // the first next.need positions whose key equals the full prefix
      return take_first_ties(
          row.len, next.need, [&](int i) { return row.key(i) == next.prefix; }, s);
    }
    if (collect) {
      const Cut cut = find_cut((int)in_bin, next, level + 1, false, s);
      return take_cut((int)in_bin, cut, stored_positions(s), s);
    }
    r = next;
  }
}

// ---- emission of the row's token set S: the selected groups' tokens, then the tail tokens c*G
// .. L-1, which lie above every group. Each thread takes a contiguous run of words (pages), so
// one block scan orders the whole row.

__device__ __forceinline__ int run_begin(int n) {
  return min(threadIdx.x * ((n + kThreads - 1) / kThreads), n);
}
__device__ __forceinline__ int run_end(int n) {
  return min((threadIdx.x + 1) * ((n + kThreads - 1) / kThreads), n);
}

// A row to emit: its index, its tokens L and its complete groups G = floor(L / c).
struct RowExtent {
  int t;       // the row
  int tokens;  // L
  int keys;    // G
};

__device__ void emit_topk_idx(const Params &p, const RowExtent &row, SelectSmem &s) {
  int32_t *out = p.topk_idx + (int64_t)row.t * p.topk_idx_stride;
  const int words = bitmap_words(row.keys), c = p.ratio;
  const int w0 = run_begin(words), w1 = run_end(words);
  int selected = 0;
  const uint32_t *bitmap = s.bitmap();
  for (int w = w0; w < w1; ++w) selected += __popc(bitmap[w]);
  int total;
  int slot = c * block_exclusive_scan<kThreads>(selected, s.radix.scan, &total);
  for (int w = w0; w < w1; ++w) {
    for (uint32_t bits = bitmap[w]; bits; bits &= bits - 1) {
      const int first = (w * 32 + __ffs(bits) - 1) * c;
      for (int i = 0; i < c; ++i) out[slot++] = first + i;
    }
  }
  const int tail0 = row.keys * c, set_size = total * c + (row.tokens - tail0);
  for (int i = total * c + threadIdx.x; i < set_size; i += kThreads) {
    out[i] = tail0 + i - total * c;
  }
  for (int i = set_size + threadIdx.x; i < p.topk + c - 1; i += kThreads) out[i] = -1;
}

// The token mask of `bits`, keys of c tokens each: key b covers bits c*b .. c*b + c - 1.
__device__ __forceinline__ uint64_t token_mask(uint64_t bits, int c) {
  if (c == 1) return bits;
  uint64_t mask = 0;
  for (; bits; bits &= bits - 1) mask |= ((1ull << c) - 1) << (c * (__ffsll(bits) - 1));
  return mask;
}

// Token mask of page `page`: its selected groups' tokens, and the tail tokens when it holds
// them (the tail lies in one page: P is a multiple of c).
__device__ uint64_t page_mask(const Params &p, const RowExtent &row, int page,
                              const uint32_t *bitmap) {
  const int c = p.ratio, kpp = keys_per_page(p), key0 = page * kpp;
  uint64_t keys = 0;
  if (key0 < row.keys) {  // pages past the groups hold no bit of the bitmap
    keys = kpp == 64 ? bitmap[key0 / 32] | (uint64_t)bitmap[key0 / 32 + 1] << 32
                     : bitmap[key0 / 32] >> (key0 % 32) & (kpp == 32 ? ~0u : (1u << kpp) - 1);
  }
  uint64_t mask = token_mask(keys, c);
  const int tail0 = row.keys * c;
  if (row.tokens > tail0 && tail0 / p.page_size == page) {
    const int first = tail0 % p.page_size, count = row.tokens - tail0;
    mask |= ((1ull << count) - 1) << first;
  }
  return mask;
}

__device__ void emit_pages(const Params &p, const RowExtent &row, SelectSmem &s) {
  int32_t *blocks = p.sel_blocks + (int64_t)row.t * p.sel_blocks_stride;
  uint64_t *masks = p.sel_mask + (int64_t)row.t * p.sel_mask_stride;
  const int pages = (row.tokens + p.page_size - 1) / p.page_size;
  const int g0 = run_begin(pages), g1 = run_end(pages);
  const uint32_t *bitmap = s.bitmap();
  int used = 0;
  for (int g = g0; g < g1; ++g) used += page_mask(p, row, g, bitmap) != 0;
  int total;
  int slot = block_exclusive_scan<kThreads>(used, s.radix.scan, &total);
  for (int g = g0; g < g1; ++g) {
    const uint64_t mask = page_mask(p, row, g, bitmap);
    if (mask != 0) {
      blocks[slot] = g;
      masks[slot++] = mask;
    }
  }
  for (int i = total + threadIdx.x; i < p.sel_width; i += kThreads) {
    blocks[i] = -1;
    masks[i] = 0;
  }
  if (threadIdx.x == 0) p.sel_count[row.t] = total;
}

// A row of at most K keys takes every group and the tail: all of its L tokens, every page whole
// but the last.
__device__ void emit_every_token(const Params &p, const RowExtent &row) {
  int32_t *out = p.topk_idx + (int64_t)row.t * p.topk_idx_stride;
  for (int i = threadIdx.x; p.topk_idx != nullptr && i < p.topk + p.ratio - 1; i += kThreads) {
    out[i] = i < row.tokens ? i : -1;
  }
  if (p.sel_blocks == nullptr) return;
  int32_t *blocks = p.sel_blocks + (int64_t)row.t * p.sel_blocks_stride;
  uint64_t *masks = p.sel_mask + (int64_t)row.t * p.sel_mask_stride;
  const int pages = (row.tokens + p.page_size - 1) / p.page_size;
  const uint64_t whole = p.page_size == 64 ? ~0ull : (1ull << p.page_size) - 1;
  for (int g = threadIdx.x; g < p.sel_width; g += kThreads) {
    const int rest = row.tokens - g * p.page_size;
    blocks[g] = g < pages ? g : -1;
    masks[g] = rest >= p.page_size ? whole : rest > 0 ? (1ull << rest) - 1 : 0ull;
  }
  if (threadIdx.x == 0) p.sel_count[row.t] = pages;
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

// The top K from what the filter kept of chunk row r, which row_rescued judged enough: at least K
// with the ties, at most kCandidates.
__device__ void select_kept(const Params &p, const Workspace &ws, int r, int keys, SelectSmem &s) {
  // A keep-all call's filter put key j in slot j, with no counter: all G are kept.
  const bool slot_is_position = call_keeps_all(p);
  const int n = slot_is_position ? keys : ws.count[r];
  const int32_t *pos = slot_is_position ? nullptr : ws.cand_pos + (int64_t)r * kCandidates;
  const float *score = ws.cand_score + (int64_t)r * kCandidates;
  // The copy into shared memory also counts the first radix level when a selection follows.
  // It is latency-bound: each thread loads a batch before it uses any of it (a `#pragma unroll
  // 4` loop instead was about 0.5% slower on an H200).
  const bool radix_follows = n >= topk_keys(p);
  if (radix_follows) clear_histogram<kThreads>(radix_bits(0), s.radix);
  constexpr int kBatch = 4;
  for (int base = 0; base < n; base += kBatch * kThreads) {
    float v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads + threadIdx.x;
      v[j] = i < n ? score[i] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads + threadIdx.x;
      const uint32_t key = order_key(v[j]);
      if (i < n) s.cand_key[i] = key;
      if (radix_follows) histogram_add(i < n, digit(key, 0, radix_bits(0)), s.radix.hist);
    }
  }
  __syncthreads();
  if (radix_follows) {
    take_cut(n, find_cut(n, Radix{0u, 0, topk_keys(p)}, 0, true, s), pos, s);
  } else {
    take_cut(n, Cut{0u, -1}, pos, s);  // every kept key (no key is below 0)
    const uint32_t *ties = ws.ties + (int64_t)r * ws.tie_words;
    take_ties(ties, tie_words(keys), topk_keys(p) - n, s);
  }
}

// Two blocks per SM where their shared memory allows it (select_smem_bytes). One block per row;
// a row of the other kind (Selecting) returns at once.
__global__ void __launch_bounds__(kThreads, 2)
    qsa_index_select(const Params p, const Rows rows, const Workspace ws, Selecting which) {
  extern __shared__ __align__(16) unsigned char smem[];
  SelectSmem &s = *reinterpret_cast<SelectSmem *>(smem);
  const bool kept = which == Selecting::kKept;
  if (kept && rows.begin == 0 && blockIdx.x == 0) {
    varlen_check_starts(p.query_start_loc, p.requests, p.rows, p.checked);
  }
  const int t = rows.begin + blockIdx.x, r = t - rows.c0, request = row_request(p, t);
  const int tokens = request < 0 ? 0 : row_tokens(p, request, t);
  const RowExtent row{t, tokens, tokens / p.ratio};
  if (row.keys <= topk_keys(p)) {
    if (kept) emit_every_token(p, row);
    return;
  }
  if (row_rescued(p, ws, r, row.keys) == kept) return;
  for (int w = threadIdx.x; w < bitmap_words(row.keys); w += kThreads) s.bitmap()[w] = 0u;
  __syncthreads();
  if (kept) {
    select_kept(p, ws, r, row.keys, s);
  } else {
    select_stored(p, StoredRow{ws.stored + (int64_t)blockIdx.x * ws.stored_ld, row.keys}, s);
  }
  __syncthreads();
  if (p.topk_idx != nullptr) emit_topk_idx(p, row, s);
  if (p.sel_blocks != nullptr) emit_pages(p, row, s);
}

}  // namespace

void launch_threshold(const Params &p, const Rows &rows, const Workspace &w, cudaStream_t stream) {
  if (call_keeps_all(p)) return;  // no row has a threshold, and the select knows count = G
  allow_dynamic_smem(qsa_index_threshold, std::min(threshold_bytes(kMaxKeys), p.smem_optin));
  qsa_index_threshold<<<rows.end - rows.begin, kThreads, threshold_bytes(max_keys(p)), stream>>>(
      p, rows.c0, w, sample_rank(topk_keys(p)));
}

void launch_select(const Params &p, const Rows &rows, const Workspace &w, Selecting which,
                   cudaStream_t stream) {
  allow_dynamic_smem(qsa_index_select, std::min(kMostSmemBytes, p.smem_optin));
  prefer_max_carveout(qsa_index_select);  // two blocks per V100 SM up to about 55K keys
  qsa_index_select<<<rows.end - rows.begin, kThreads, select_bytes(max_keys(p)), stream>>>(
      p, rows, w, which);
}

uint32_t threshold_smem_bytes(int keys) { return threshold_bytes(keys); }

uint32_t select_smem_bytes(int keys) { return select_bytes(keys); }

}  // namespace sm70ops::qsa_index
