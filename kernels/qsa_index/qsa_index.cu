// QSA index on SM70: scores s[t,j] = sum_h w[t,h] * relu(q[t,h,:] . k[j,:]), the exact top-K per
// row (ties to the lower position) and its expansion to pages and 64-bit token masks.
//
// Scores are never written out whole: at 1024 rows x 128K keys that would be 512 MB each way,
// more DRAM time on a V100 than the tensor-core math. Per chunk of rows:
//   1. sample     (score.cu)  the first 32 keys of every 512 are scored on tensor cores;
//   2. threshold  (select.cu) each row's sample_rank(K)-th largest sample: a score that about
//                             16 x sample_rank(K) keys (2K..6K) of the row reach; a row of at
//                             most kKeepAllMaxLen keys keeps them all (and a call whose
//                             max_seq_len is that short skips steps 1 and 2);
//   3. filter     (score.cu)  every key is scored; those above the threshold are kept, those at
//                             it marked;
//   4. select     (select.cu) exact radix top-K among the kept keys in shared memory (keys tied
//                             at the threshold come from a bitmap), then the expansion; a row of
//                             at most K keys takes them all without one. A row the sample
//                             misjudged is rescued, not approximated.
#include <algorithm>

#include "kernels/qsa_index/qsa_index.h"
#include "kernels/qsa_index/qsa_index_internal.cuh"

extern "C" uint32_t sm70_qsa_index_smem_bytes(int32_t max_seq_len) {
  using namespace sm70ops::qsa_index;
  return std::max({score_smem_bytes(), threshold_smem_bytes(), select_smem_bytes(max_seq_len)});
}

extern "C" uint64_t sm70_qsa_index_workspace(int32_t rows, int32_t max_seq_len, uint64_t cap_bytes,
                                             int32_t *chunk_rows) {
  using namespace sm70ops::qsa_index;
  const uint64_t row_bytes = row_workspace_bytes(max_seq_len);
  const uint64_t usable = cap_bytes > kWorkspaceSlack ? cap_bytes - kWorkspaceSlack : 0;
  const uint64_t fit = usable / row_bytes / kTileRows * kTileRows;
  *chunk_rows = 0;
  if (rows <= 0) return 0;
  if (fit < (uint64_t)kTileRows && fit < (uint64_t)rows) return 0;
  *chunk_rows = (int32_t)(fit < (uint64_t)rows ? fit : (uint64_t)rows);
  return (uint64_t)*chunk_rows * row_bytes + kWorkspaceSlack;
}

extern "C" void sm70_qsa_index_view(const void *workspace, int32_t chunk_rows, int32_t max_seq_len,
                                    sm70_qsa_index_workspace_view *out) {
  using namespace sm70ops::qsa_index;
  const Workspace w = carve_workspace(const_cast<void *>(workspace), chunk_rows, max_seq_len);
  *out = {w.samples,   w.count,      w.cand_score, w.cand_pos,  w.ties,        w.sample_ld,
          kSampleSpan, kSampleGroup, kCandidates,  w.tie_words, kKeepAllMaxLen};
}

extern "C" int32_t sm70_qsa_index_launch(const sm70_qsa_index_params *p, void *workspace,
                                         void *stream) {
  using namespace sm70ops::qsa_index;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Workspace w = carve_workspace(workspace, p->chunk_rows, p->max_seq_len);
  for (int c0 = 0; c0 < p->rows; c0 += p->chunk_rows) {
    const int c1 = p->rows - c0 < p->chunk_rows ? p->rows : c0 + p->chunk_rows;
    launch_sample(*p, c0, c1, w, s);
    launch_threshold(*p, c0, c1, w, s);
    launch_filter(*p, c0, c1, w, s);
    launch_select(*p, c0, c1, w, s);
  }
  return static_cast<int32_t>(cudaGetLastError());
}
