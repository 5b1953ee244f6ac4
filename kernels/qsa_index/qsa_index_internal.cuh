// What the QSA index kernels share: the configuration, the workspace layout, and the launchers
// that qsa_index.cu strings together (see the pipeline in qsa_index.cu).
//
// A "key" is an entry of the index cache: one per group of c = p.ratio tokens. Row t sees the
// G = floor(L / c) complete groups of its L tokens and selects K = B / c of them; the kernels
// count keys, and only the emission (select.cu) speaks of tokens again.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/checked.cuh"
#include "kernels/common/search.h"
#include "kernels/common/varlen.cuh"
#include "kernels/qsa_index/qsa_index.h"

namespace sm70ops::qsa_index {

using Params = sm70_qsa_index_params;

constexpr int kHeads = SM70_QSA_INDEX_HEADS;
constexpr int kDim = SM70_QSA_INDEX_DIM;
constexpr int kMaxKeys = SM70_QSA_INDEX_MAX_SEQ_LEN;  // keys a row sees: at most its tokens
constexpr int kTileRows = 16;  // rows of one request a scorer block owns: the WMMA M

__host__ __device__ inline int topk_keys(const Params &p) { return p.topk / p.ratio; }
__host__ __device__ inline int keys_per_page(const Params &p) { return p.page_size / p.ratio; }
__host__ __device__ inline int max_keys(const Params &p) { return p.max_seq_len / p.ratio; }

// ---- Sampling
// The threshold comes from a stratified sample: one key of every kStratum, at an offset within
// its stratum that a hash of the stratum's index picks. Whatever the order of the keys, the
// number of sampled keys among a row's top K then has mean K / kStratum and at most the variance
// of a binomial (each stratum contributes an independent Bernoulli draw), so the threshold's
// rank among the row's keys does not depend on the data; only on the hash, which real data does
// not know. (A fixed stride would not do: keys correlated along positions made the first keys
// of every span unrepresentative, and rows were misjudged by the thousand.)
constexpr int kStratum = 16;
constexpr int kSampleGroup = 32;   // strata a scorer warp samples at once: 512 keys
constexpr int kCandidates = 8192;  // per row: what the select kernel holds in shared memory

__host__ __device__ constexpr int strata(int keys) { return (keys + kStratum - 1) / kStratum; }

// The key stratum s samples (murmur3's finaliser of s, which spreads consecutive strata).
__host__ __device__ inline int stratum_key(int s) {
  uint32_t h = static_cast<uint32_t>(s);
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return s * kStratum + static_cast<int>(h % kStratum);
}

// K/16 expected samples above the K-th largest key, plus six standard deviations and a little:
// about 16 x sample_rank(K) keys (K..1.4K at K 4096, 4.3K at K 128) stay above the threshold.
// A row whose kept keys fall short of K or exceed kCandidates is rescued, never wrong.
__host__ __device__ constexpr int sample_rank(int topk) {
  int mean = topk / kStratum, sd = 1;
  while (sd * sd < mean) ++sd;
  return mean + 6 * sd + 8;
}
// The expected candidates leave a quarter of kCandidates for the spread: about seven standard
// deviations at K = 4096 keys.
static_assert(kStratum * sample_rank(SM70_QSA_INDEX_MAX_TOPK) <= kCandidates * 3 / 4,
              "candidates fit");

// A row that sees at most this many keys keeps them all as candidates (threshold -inf): no
// threshold to find, and the select's radix runs over the whole row; a call whose rows all see
// that few scores no sample either. Keeping up to 8192 made 8K keys 19% slower on an H200 (the
// select's radix over twice the candidates).
constexpr int kKeepAllMaxLen = 4096;
static_assert(kKeepAllMaxLen <= kCandidates, "the kept keys fit the candidates");
__host__ __device__ constexpr bool keeps_all(int keys) { return keys <= kKeepAllMaxLen; }
// A call all of whose rows keep every key: it runs no sample pass, no threshold kernel and no
// rescore, its filter puts key j in candidate slot j (no counter, no stored position), and its
// select takes count = G.
__host__ __device__ inline bool call_keeps_all(const Params &p) { return keeps_all(max_keys(p)); }

// ---- Workspace
// One chunk's workspace: per row a threshold, the keys strictly above it (scores, positions and
// how many), a bitmap of the keys equal to it and their count (ties at the threshold can be
// numerous: a row whose weights are all negative scores most keys exactly 0), and the samples;
// and, for rescue_rows rows at a time, room for every score of a row (row_rescued). A keep-all
// call uses the kept scores alone.
struct Workspace {
  float *threshold;   // [C]
  int32_t *count;     // [C] keys above the threshold (beyond kCandidates: the row is rescued)
  int32_t *tied;      // [C] keys equal to it
  float *cand_score;  // [C, kCandidates]
  int32_t *cand_pos;  // [C, kCandidates]; unused in keep-all calls, where slot j holds key j
  uint32_t *ties;     // [C, tie_words]: bit j set when key j scores exactly the threshold
  float *samples;     // [C, sample_ld]: column s holds stratum s's key
  float *stored;      // [rescue_rows, stored_ld]: a rescued row's score of key j in column j
  int32_t tie_words;
  int32_t sample_ld;
  int32_t stored_ld;
};

__host__ __device__ constexpr int tie_words(int keys) { return (keys + 31) / 32; }
__host__ __device__ constexpr int sample_ld(int keys) {
  return (strata(keys) + kSampleGroup - 1) / kSampleGroup * kSampleGroup;
}
// A stored row: float4 rows, and none in a keep-all call (no row is ever rescued).
__host__ __device__ constexpr int stored_ld(int keys) {
  return keeps_all(keys) ? 0 : (keys + 3) / 4 * 4;
}

// Bytes of one row of a chunk, and of one row of stored scores.
__host__ __device__ inline uint64_t chunk_row_bytes(int keys) {
  return 3 * sizeof(int32_t) + kCandidates * 8ull + tie_words(keys) * 4ull + sample_ld(keys) * 4ull;
}
__host__ __device__ inline uint64_t stored_row_bytes(int keys) { return stored_ld(keys) * 4ull; }

inline Workspace carve_workspace(void *base, const sm70_qsa_index_split &split, int keys) {
  Workspace w;
  w.tie_words = tie_words(keys);
  w.sample_ld = sample_ld(keys);
  w.stored_ld = stored_ld(keys);
  char *p = static_cast<char *>(base);
  auto take = [&](uint64_t bytes) {  // 256-byte aligned pieces
    char *piece = p;
    p += (bytes + 255) / 256 * 256;
    return piece;
  };
  const int64_t rows = split.chunk_rows;
  w.threshold = reinterpret_cast<float *>(take(rows * sizeof(float)));
  w.count = reinterpret_cast<int32_t *>(take(rows * sizeof(int32_t)));
  w.tied = reinterpret_cast<int32_t *>(take(rows * sizeof(int32_t)));
  w.cand_score = reinterpret_cast<float *>(take(rows * kCandidates * sizeof(float)));
  w.cand_pos = reinterpret_cast<int32_t *>(take(rows * kCandidates * sizeof(int32_t)));
  w.ties = reinterpret_cast<uint32_t *>(take(rows * w.tie_words * sizeof(uint32_t)));
  w.samples = reinterpret_cast<float *>(take(rows * w.sample_ld * sizeof(float)));
  w.stored = reinterpret_cast<float *>(take(int64_t(split.rescue_rows) * w.stored_ld * 4));
  return w;
}
constexpr uint64_t kWorkspaceSlack = 8 * 256;  // the alignment gaps of carve_workspace

// Whether the filter misjudged row r (chunk-local) of `keys` keys: it kept more keys than the
// select holds, or too few to fill K even with the ties at the threshold. Such a row is
// rescored whole into its row of the stored area and selected from there. Keep-all calls and
// rows that take every key never are.
__device__ __forceinline__ bool row_rescued(const Params &p, const Workspace &ws, int r, int keys) {
  if (call_keeps_all(p) || keys <= topk_keys(p)) return false;
  const int kept = ws.count[r];
  return kept > kCandidates || (kept < topk_keys(p) && kept + ws.tied[r] < topk_keys(p));
}

__device__ __forceinline__ int row_tokens(const Params &p, int r, int t) {
  return varlen_row_length(p.query_start_loc, p.seq_lens, p.max_seq_len, p.checked, r, t);
}

// The request row t belongs to, or -1 outside every request.
__device__ __forceinline__ int row_request(const Params &p, int t) {
  const int lo = last_at_most(p.query_start_loc, p.requests, t);
  return t >= p.query_start_loc[lo] && t < p.query_start_loc[lo + 1] ? lo : -1;
}

// Where key `key` of request r lies in k_index, or nullptr when its page id is out of range
// (then it reads as a zero key; checked mode records the page of `row`).
__device__ __forceinline__ const uint16_t *key_address(const Params &p, int r, int row, int key) {
  const int kpp = keys_per_page(p), shift = __ffs(kpp) - 1;  // a power of two: no division
  const int page = p.block_table[r * p.block_table_stride + (key >> shift)];
  if (page < 0 || page >= p.num_pages) {
    report_bad_index(p.checked, SM70_CHECKED_PAGE_ID, row, page, p.num_pages);
    return nullptr;
  }
  return p.k_index + page * p.k_page_stride + (key & (kpp - 1)) * p.k_token_stride;
}

// Shared memory of one block of each kernel, for a call whose rows see at most `keys` keys.
uint32_t score_smem_bytes();
uint32_t threshold_smem_bytes(int keys);
uint32_t select_smem_bytes(int keys);

// Rows [begin, end) of the chunk that starts at row c0: a whole chunk, or the part of one whose
// rescued rows' scores fit the stored area (a rescue group, stored row t - begin).
struct Rows {
  int c0, begin, end;
};

// Which rows a select launch takes: those the filter judged right (and those that take every
// key), over a chunk; or the rescued ones, over a rescue group once it is rescored.
enum class Selecting { kKept, kRescued };

// Launchers, in pipeline order: the first four over a chunk, then rescore and select over each
// of its rescue groups.
void launch_sample(const Params &p, const Rows &rows, const Workspace &w, cudaStream_t stream);
void launch_threshold(const Params &p, const Rows &rows, const Workspace &w, cudaStream_t stream);
void launch_filter(const Params &p, const Rows &rows, const Workspace &w, cudaStream_t stream);
void launch_rescore(const Params &p, const Rows &rows, const Workspace &w, cudaStream_t stream);
void launch_select(const Params &p, const Rows &rows, const Workspace &w, Selecting which,
                   cudaStream_t stream);

}  // namespace sm70ops::qsa_index
