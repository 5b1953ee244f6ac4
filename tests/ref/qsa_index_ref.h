// CPU reference of op 1, the QSA index (ops.md version 2, "Op 1"): weighted-ReLU scores of a
// row's complete groups, the top B/c groups, the tail tokens, the token set's expansion to pages
// + 64-bit token masks, and the rule that judges a GPU row against the reference.
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
constexpr double kTopkTieAbsTol = 1e-5;  // ... or within this fraction of the row's largest |score|

// The indexer's inputs. k_index holds one key per group of `ratio` tokens: [num_pages, P / c,
// 128] with P = meta.page_size; group g of request r is key g % (P/c) of physical page
// block_table[r][g / (P/c)].
struct IndexInputs {
  std::vector<uint16_t> q;        // [T, 4, 128] fp16
  std::vector<float> w;           // [T, 4] fp32, or empty: every head weighs 1/sqrt(128)
  std::vector<uint16_t> k_index;  // [num_pages, P / c, 128] fp16
  Varlen meta;
  int ratio = 1;  // c
};

// scores[t][g] = sum_h w[t,h] * relu(q[t,h,:] . k[g,:]) for the G_t = floor(L_t / c) complete
// groups g of row t, in fp64.
std::vector<std::vector<double>> qsa_index_scores(const IndexInputs& in);

// Ascending indices of the k largest scores, ties to the lower index; all of them when there
// are at most k. Scores must not be NaN.
std::vector<int32_t> qsa_index_topk(const std::vector<double>& scores, int k);

// A row's token set S (ops.md): the c tokens of each selected group (ascending), then the tail
// tokens c*G .. len-1 that no complete group holds.
std::vector<int32_t> qsa_index_token_set(const std::vector<int32_t>& groups, int ratio, int len);

// One row's expansion at page size P: sorted unique logical pages, mask bit b = token P*page+b.
struct Expansion {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> masks;
  int32_t count = 0;
};

// Negative entries (the -1 padding of topk_idx) are skipped; order does not matter.
Expansion qsa_index_expand(const std::vector<int32_t>& tokens, int page_size);

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

// The whole op for a budget of `topk` tokens (a multiple of c): group scores, topk_idx [T, topk
// + c - 1] (each row's token set, -1 padded) and the expansion packed to width nb.
struct IndexResult {
  std::vector<std::vector<double>> scores;
  std::vector<int32_t> topk_idx;
  Selection selection;
};
IndexResult qsa_index_ref(const IndexInputs& in, int topk, int nb);

// Verdict on one GPU row of topk_idx (topk + c - 1 entries) against the reference group scores
// of that row (its G = floor(len / c) groups).
struct TopkVerdict {
  bool well_formed;  // a token set: whole groups ascending, then the tail, then -1 padding
  bool same_set;     // identical to the reference's set
  bool near_tie;     // G > K and the K-th and (K+1)-th group scores are near (near_scores)
  bool allowed;      // well formed and (same set, or a near tie with only near-tied swaps)
};
TopkVerdict judge_topk_row(const int32_t* gpu_row, int topk, int ratio, int len,
                           const std::vector<double>& ref_scores);

// Two scores an implementation may order either way (ops.md's gate): within kTopkTieRelTol of
// each other, relatively, or within kTopkTieAbsTol of the row's largest |score| (`scale`).
bool near_scores(double a, double b, double scale);

// Verdicts of a batch: gpu_topk_idx is [T, topk + c - 1].
struct TopkReport {
  std::vector<int> excused_rows;  // sets differ, allowed by the near-tie rule (to be reported)
  std::vector<int> failed_rows;   // not allowed
  bool ok() const { return failed_rows.empty(); }
};
TopkReport judge_topk(const std::vector<int32_t>& gpu_topk_idx, int topk, const IndexInputs& in,
                      const std::vector<std::vector<double>>& ref_scores);

}  // namespace sm70ops::ref

#endif  // SM70OPS_TESTS_REF_QSA_INDEX_REF_H_
