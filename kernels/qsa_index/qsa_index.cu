// QSA index on SM70: scores s[t,g] = sum_h w[t,h] * relu(q[t,h,:] . k[g,:]) of a row's complete
// groups, the exact top K = B / c (ties to the lower group), the tail tokens of an incomplete
// group, and the expansion of that token set to pages and 64-bit token masks.
//
// Scores are never written out whole: at 1024 rows x 128K keys that would be 512 MB each way,
// more DRAM time on a V100 than the tensor-core math. Per chunk of rows:
//   1. sample     (score.cu)  one key of every 16, at a hashed offset (a stratified sample), is
//                             scored on tensor cores;
//   2. threshold  (select.cu) each row's sample_rank(K)-th largest sample: a score about
//                             16 x sample_rank(K) keys reach, whatever the keys' order; a row of
//                             at most kKeepAllMaxLen keys keeps them all (and a call whose rows
//                             all see that few skips steps 1, 2 and 4);
//   3. filter     (score.cu)  every key is scored; those above the threshold are kept, those at
//                             it marked and counted;
//   4. rescore    (score.cu)  a row the sample misjudged (too few kept, or more than the select
//                             holds; about one in 10^9 on any data) is scored once more, every
//                             key's score stored: the one extra pass a misjudged row costs, and
//                             the worst case of a row (samples, two scoring passes, and the
//                             select's at most six reads of the stored scores);
//   5. select     (select.cu) exact radix top-K among the kept keys in shared memory (keys tied
//                             at the threshold come from a bitmap), or among a rescored row's
//                             stored scores, then the expansion; a row of at most K keys takes
//                             them all without one.
#include <algorithm>

#include "kernels/qsa_index/qsa_index.h"
#include "kernels/qsa_index/qsa_index_internal.cuh"

extern "C" uint32_t sm70_qsa_index_smem_bytes(int32_t max_keys) {
  using namespace sm70ops::qsa_index;
  return std::max(
      {score_smem_bytes(), threshold_smem_bytes(max_keys), select_smem_bytes(max_keys)});
}

namespace {

// As many rows as `bytes` hold at `row_bytes` each, in whole tiles, and at most `rows`.
int32_t rows_fitting(uint64_t bytes, uint64_t row_bytes, int32_t rows) {
  const uint64_t fit = row_bytes == 0 ? (uint64_t)rows : bytes / row_bytes;
  if (fit >= (uint64_t)rows) return rows;
  return (int32_t)(fit / sm70ops::qsa_index::kTileRows * sm70ops::qsa_index::kTileRows);
}

}  // namespace

// The stored scores take at most half the cap: a chunk's rows then keep the other half, so that
// rescue groups smaller than their chunk cost two launches of blocks that find no rescued row,
// where chunks smaller than a call cost whole passes over fewer blocks (1024 rows x 131072 keys
// on an H200: three chunks 20% slower than one).
extern "C" uint64_t sm70_qsa_index_workspace(int32_t rows, int32_t max_keys, uint64_t cap_bytes,
                                             sm70_qsa_index_split *split) {
  using namespace sm70ops::qsa_index;
  *split = {0, 0};
  if (rows <= 0) return 0;
  const uint64_t usable = cap_bytes > kWorkspaceSlack ? cap_bytes - kWorkspaceSlack : 0;
  const uint64_t stored = stored_row_bytes(max_keys), chunk = chunk_row_bytes(max_keys);
  const int32_t tile = std::min(rows, kTileRows);  // of each, at the least
  if (usable < tile * (stored + chunk)) return 0;
  // Half the cap for stored rows, unless that leaves less than a tile of chunk rows.
  int32_t rescue_rows = std::max(tile, rows_fitting(usable / 2, stored, rows));
  if (usable - rescue_rows * stored < tile * chunk) rescue_rows = tile;
  const int32_t chunk_rows = rows_fitting(usable - rescue_rows * stored, chunk, rows);
  rescue_rows = std::min(rescue_rows, chunk_rows);
  *split = {chunk_rows, rescue_rows};
  return chunk_rows * chunk + rescue_rows * stored + kWorkspaceSlack;
}

extern "C" void sm70_qsa_index_view(const void *workspace, const sm70_qsa_index_split *split,
                                    int32_t max_keys, sm70_qsa_index_workspace_view *out) {
  using namespace sm70ops::qsa_index;
  const Workspace w = carve_workspace(const_cast<void *>(workspace), *split, max_keys);
  *out = {w.samples,   w.count,     w.tied,   w.cand_score, w.cand_pos,    w.stored,
          w.sample_ld, w.stored_ld, kStratum, kCandidates,  kKeepAllMaxLen};
}

extern "C" int32_t sm70_qsa_index_stratum_key(int32_t stratum) {
  return sm70ops::qsa_index::stratum_key(stratum);
}

extern "C" int32_t sm70_qsa_index_launch(const sm70_qsa_index_params *p, void *workspace,
                                         void *stream) {
  using namespace sm70ops::qsa_index;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const sm70_qsa_index_split split{p->chunk_rows, p->rescue_rows};
  const Workspace w = carve_workspace(workspace, split, max_keys(*p));
  for (int c0 = 0; c0 < p->rows; c0 += split.chunk_rows) {
    const Rows chunk{c0, c0, std::min(p->rows, c0 + split.chunk_rows)};
    launch_sample(*p, chunk, w, s);
    launch_threshold(*p, chunk, w, s);
    launch_filter(*p, chunk, w, s);
    launch_select(*p, chunk, w, Selecting::kKept, s);
    if (call_keeps_all(*p)) continue;  // no row is misjudged
    for (int begin = c0; begin < chunk.end; begin += split.rescue_rows) {
      const Rows group{c0, begin, std::min(chunk.end, begin + split.rescue_rows)};
      launch_rescore(*p, group, w, s);
      launch_select(*p, group, w, Selecting::kRescued, s);
    }
  }
  return static_cast<int32_t>(cudaGetLastError());
}
