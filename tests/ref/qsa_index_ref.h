// CPU reference of op 1, the QSA index (ops.md "Op 1"): weighted-ReLU scores, top-k, expansion
// to pages + 64-bit token masks, and the rule that judges a GPU top-k against the reference.
// fp16 tensors are uint16_t bit patterns (tests/ref/half.h); scores are computed in fp64.
#ifndef SM70OPS_TESTS_REF_QSA_INDEX_REF_H_
#define SM70OPS_TESTS_REF_QSA_INDEX_REF_H_

#include <cstdint>
#include <vector>

#include "tests/ref/varlen.h"

namespace sm70ops::ref {

constexpr int kIndexHeads = 4;
constexpr int kIndexDim = 128;
constexpr double kTopkTieRelTol = 1e-3;  // ops.md gate: near-tie allowance on the K-th score

// scores[t][j] = sum_h w[t,h] * relu(q[t,h,:] . k[j,:]) for j < L_t, in fp64.
// q: [T, 4, 128] fp16; w: [T, 4] fp32; k_index: [num_pages, 64, 128] fp16 (physical pages).
std::vector<std::vector<double>> qsa_index_scores(const std::vector<uint16_t>& q,
                                                  const std::vector<float>& w,
                                                  const std::vector<uint16_t>& k_index,
                                                  const Varlen& meta);

// Ascending positions of the k largest scores, ties to the lower position; all of 0..L-1 when
// L <= k. Scores must not be NaN.
std::vector<int32_t> qsa_index_topk(const std::vector<double>& scores, int k);

// One row's expansion: sorted unique logical pages, mask bit b = token 64 * page + b.
struct Expansion {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> masks;
  int32_t count = 0;
};

// Negative entries (the -1 padding of topk_idx) are skipped; order does not matter.
Expansion qsa_index_expand(const std::vector<int32_t>& topk_positions);

// The expansion tensors of a batch: blocks [T, nb] (-1 padded), masks [T, nb] (0 padded), count
// [T]. This is also op 2's input.
struct Selection {
  int nb = 0;
  std::vector<int32_t> blocks;
  std::vector<uint64_t> masks;
  std::vector<int32_t> count;
};

// Throws std::invalid_argument when a row needs more than nb pages (as the op must fail).
Selection pack_selection(const std::vector<Expansion>& rows, int nb);

// The whole op: scores, topk_idx [T, k] (-1 padded) and the expansion packed to width nb.
struct IndexResult {
  std::vector<std::vector<double>> scores;
  std::vector<int32_t> topk_idx;
  Selection selection;
};
IndexResult qsa_index_ref(const std::vector<uint16_t>& q, const std::vector<float>& w,
                          const std::vector<uint16_t>& k_index, const Varlen& meta, int k, int nb);

// Verdict on one GPU top-k row (k entries, -1 padded) against the reference scores of that row.
struct TopkVerdict {
  bool well_formed;  // min(L,k) ascending positions in [0,L), then -1 padding
  bool same_set;     // identical to qsa_index_topk(ref_scores, k)
  bool near_tie;     // L > k and the K-th and (K+1)-th reference scores are within rel_tol
  bool allowed;      // well formed and (same set, or a near tie with only near-tied swaps)
};
TopkVerdict judge_topk_row(const int32_t* gpu_row, int k, const std::vector<double>& ref_scores,
                           double rel_tol = kTopkTieRelTol);

// Verdicts of a batch: gpu_topk_idx is [T, k].
struct TopkReport {
  std::vector<int> excused_rows;  // sets differ, allowed by the near-tie rule (to be reported)
  std::vector<int> failed_rows;   // not allowed
  bool ok() const { return failed_rows.empty(); }
};
TopkReport judge_topk(const std::vector<int32_t>& gpu_topk_idx, int k,
                      const std::vector<std::vector<double>>& ref_scores,
                      double rel_tol = kTopkTieRelTol);

}  // namespace sm70ops::ref

#endif  // SM70OPS_TESTS_REF_QSA_INDEX_REF_H_
