// What the QSA index kernels share: the configuration, the workspace layout, and the launchers
// that qsa_index.cu strings together (see the pipeline in qsa_index.cu).
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
constexpr int kPage = SM70_QSA_INDEX_PAGE;
constexpr int kTileRows = 16;  // rows of one request a scorer block owns: the WMMA M

// Sampling: the first 32 keys of every 512 (1/16 of them) are scored first; a row's threshold is
// the sample_rank(K)-th largest sample, expected to sit near rank 16 * sample_rank(K) of the
// row, safely above K and below kCandidates (see sample_rank).
constexpr int kSampleGroup = 32;
constexpr int kSampleSpan = 512;
constexpr int kCandidates = 8192;  // per row: what the select kernel holds in shared memory

// K/16 expected samples above the K-th largest key, plus six standard deviations and a little:
// a row whose kept keys still fall short of K (or exceed kCandidates) is rescued, never wrong.
__host__ __device__ constexpr int sample_rank(int topk) {
  int mean = topk / 16, sd = 1;
  while (sd * sd < mean) ++sd;
  return mean + 6 * sd + 8;
}
// The expected candidates leave a quarter of kCandidates for the spread: about seven standard
// deviations at K = 4096.
static_assert(16 * sample_rank(SM70_QSA_INDEX_MAX_TOPK) <= kCandidates * 3 / 4, "candidates fit");

// A row that sees at most this many keys keeps them all as candidates (threshold -inf): no
// threshold to find, and the select's radix runs over the whole row; a call whose max_seq_len
// is that short scores no sample either. H200,
// 1024 rows, K 2048, ms at 1K / 2K / 4K / 8K keys: sampled 0.041 / 0.058 / 0.183 / 0.231; up to
// 4096 kept whole 0.036 / 0.050 / 0.174 / 0.231; up to 8192 (kCandidates) 8K took 0.275.
constexpr int kKeepAllMaxLen = 4096;
static_assert(kKeepAllMaxLen <= kCandidates, "the kept keys fit the candidates");
__host__ __device__ inline bool keeps_all(int len) { return len <= kKeepAllMaxLen; }
// A call all of whose rows keep every key: it runs no sample pass and no threshold kernel, its
// filter puts key j in candidate slot j (no counter, no stored position), and its select takes
// count = L.
__host__ __device__ inline bool call_keeps_all(const Params &p) { return keeps_all(p.max_seq_len); }

__host__ __device__ inline int sample_groups(int max_seq_len) {
  return (max_seq_len + kSampleSpan - 1) / kSampleSpan;
}

// One chunk's workspace: per row a threshold, the keys strictly above it (scores, positions and
// how many), a bitmap of the keys equal to it (ties at the threshold can be numerous: a row whose
// weights are all negative scores most keys exactly 0), and the samples. A keep-all call uses
// the scores alone (call_keeps_all).
struct Workspace {
  float *threshold;   // [C]
  int32_t *count;     // [C] keys above the threshold (beyond kCandidates: the row is rescued)
  float *cand_score;  // [C, kCandidates]
  int32_t *cand_pos;  // [C, kCandidates]; unused in keep-all calls, where slot j holds key j
  uint32_t *ties;     // [C, tie_words]: bit j set when key j scores exactly the threshold
  float *samples;     // [C, sample_ld]
  int32_t tie_words;
  int32_t sample_ld;
};

__host__ __device__ inline int tie_words(int max_seq_len) { return (max_seq_len + 31) / 32; }

__host__ __device__ inline uint64_t row_workspace_bytes(int max_seq_len) {
  const uint64_t samples = (uint64_t)sample_groups(max_seq_len) * kSampleGroup;
  return 2 * sizeof(float) + kCandidates * 8ull + tie_words(max_seq_len) * 4ull +
         samples * sizeof(float);
}

inline Workspace carve_workspace(void *base, int chunk_rows, int max_seq_len) {
  Workspace w;
  w.tie_words = tie_words(max_seq_len);
  w.sample_ld = sample_groups(max_seq_len) * kSampleGroup;
  char *p = static_cast<char *>(base);
  auto take = [&](uint64_t bytes) {  // 256-byte aligned pieces
    char *piece = p;
    p += (bytes + 255) / 256 * 256;
    return piece;
  };
  const int64_t rows = chunk_rows;
  w.threshold = reinterpret_cast<float *>(take(rows * sizeof(float)));
  w.count = reinterpret_cast<int32_t *>(take(rows * sizeof(int32_t)));
  w.cand_score = reinterpret_cast<float *>(take(rows * kCandidates * sizeof(float)));
  w.cand_pos = reinterpret_cast<int32_t *>(take(rows * kCandidates * sizeof(int32_t)));
  w.ties = reinterpret_cast<uint32_t *>(take(rows * w.tie_words * sizeof(uint32_t)));
  w.samples = reinterpret_cast<float *>(take(rows * w.sample_ld * sizeof(float)));
  return w;
}
constexpr uint64_t kWorkspaceSlack = 6 * 256;  // the alignment gaps of carve_workspace

__device__ __forceinline__ int row_length(const Params &p, int r, int t) {
  return varlen_row_length(p.query_start_loc, p.seq_lens, p.max_seq_len, p.checked, r, t);
}

// The request row t belongs to, or -1 outside every request.
__device__ __forceinline__ int row_request(const Params &p, int t) {
  const int lo = last_at_most(p.query_start_loc, p.requests, t);
  return t >= p.query_start_loc[lo] && t < p.query_start_loc[lo + 1] ? lo : -1;
}

// Shared memory of one block of each kernel (the select's sized for the call's longest row).
uint32_t score_smem_bytes();
uint32_t threshold_smem_bytes();
uint32_t select_smem_bytes(int max_seq_len);

// Launchers of one chunk of rows [c0, c1), in pipeline order.
void launch_sample(const Params &p, int c0, int c1, const Workspace &w, cudaStream_t stream);
void launch_threshold(const Params &p, int c0, int c1, const Workspace &w, cudaStream_t stream);
void launch_filter(const Params &p, int c0, int c1, const Workspace &w, cudaStream_t stream);
void launch_select(const Params &p, int c0, int c1, const Workspace &w, cudaStream_t stream);

}  // namespace sm70ops::qsa_index
