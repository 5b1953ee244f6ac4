#include "tests/ref/qsa_index_ref.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "tests/ref/half.h"

namespace sm70ops::ref {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("qsa_index: " + what);
}

double dot(const float* a, const float* b) {
  double sum = 0.0;
  for (int d = 0; d < kIndexDim; ++d) sum += double{a[d]} * b[d];
  return sum;
}

// keys: the whole k_index cache as floats; q_row: this row's [4, 128] queries as floats.
std::vector<double> score_row(const float* q_row, const float* w_row,
                              const std::vector<float>& keys, const Varlen& meta,
                              const RowInfo& row) {
  const int64_t cache_tokens = static_cast<int64_t>(keys.size() / kIndexDim);
  std::vector<double> scores(row.len);
  for (int j = 0; j < row.len; ++j) {
    const int64_t token = physical_token(meta, row.request, j);
    require(token >= 0 && token < cache_tokens, "block_table points outside k_index");
    const float* key = keys.data() + token * kIndexDim;
    double score = 0.0;
    for (int h = 0; h < kIndexHeads; ++h) {
      score += double{w_row[h]} * std::max(0.0, dot(q_row + h * kIndexDim, key));
    }
    scores[j] = score;
  }
  return scores;
}

// Positions ordered by score, highest first, ties to the lower position.
std::vector<int32_t> rank_positions(const std::vector<double>& scores) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  return order;
}

bool near(double a, double b, double rel_tol) {
  return std::abs(a - b) <= rel_tol * std::max(std::abs(a), std::abs(b));
}

bool well_formed(const int32_t* row, int k, int len) {
  const int selected = std::min(k, len);
  for (int i = 0; i < k; ++i) {
    if (i >= selected) {
      if (row[i] != -1) return false;
    } else if (row[i] < 0 || row[i] >= len || (i > 0 && row[i] <= row[i - 1])) {
      return false;
    }
  }
  return true;
}

// True when every position chosen by only one side scores within rel_tol of the K-th score.
bool swaps_are_near_ties(const std::vector<int32_t>& gpu, const std::vector<int32_t>& ref,
                         const std::vector<double>& scores, double kth, double rel_tol) {
  std::vector<int32_t> differing;
  std::set_symmetric_difference(gpu.begin(), gpu.end(), ref.begin(), ref.end(),
                                std::back_inserter(differing));
  return std::all_of(differing.begin(), differing.end(),
                     [&](int32_t p) { return near(scores[p], kth, rel_tol); });
}

}  // namespace

std::vector<std::vector<double>> qsa_index_scores(const std::vector<uint16_t>& q,
                                                  const std::vector<float>& w,
                                                  const std::vector<uint16_t>& k_index,
                                                  const Varlen& meta) {
  const std::vector<RowInfo> rows = varlen_rows(meta);
  require(q.size() == rows.size() * kIndexHeads * kIndexDim, "q must be [T, 4, 128]");
  require(w.size() == rows.size() * kIndexHeads, "w must be [T, 4]");
  require(k_index.size() % (kPageSize * kIndexDim) == 0, "k_index must be [pages, 64, 128]");
  // fp16 -> float is exact; converting once keeps the reference fast on long contexts.
  const std::vector<float> queries = from_half(q);
  const std::vector<float> keys = from_half(k_index);
  std::vector<std::vector<double>> scores(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) {
    scores[t] = score_row(queries.data() + t * kIndexHeads * kIndexDim, w.data() + t * kIndexHeads,
                          keys, meta, rows[t]);
  }
  return scores;
}

std::vector<int32_t> qsa_index_topk(const std::vector<double>& scores, int k) {
  require(k >= 1, "k must be >= 1");
  std::vector<int32_t> order = rank_positions(scores);
  order.resize(std::min<size_t>(order.size(), k));
  std::sort(order.begin(), order.end());
  return order;
}

Expansion qsa_index_expand(const std::vector<int32_t>& topk_positions) {
  Expansion out;
  for (int32_t position : topk_positions) {
    if (position < 0) continue;
    const int32_t page = position / kPageSize;
    auto it = std::lower_bound(out.blocks.begin(), out.blocks.end(), page);
    const auto slot = it - out.blocks.begin();
    if (it == out.blocks.end() || *it != page) {
      out.blocks.insert(it, page);
      out.masks.insert(out.masks.begin() + slot, 0);
    }
    out.masks[slot] |= uint64_t{1} << (position % kPageSize);
  }
  out.count = static_cast<int32_t>(out.blocks.size());
  return out;
}

Selection pack_selection(const std::vector<Expansion>& rows, int nb) {
  require(nb >= 0, "nb must be >= 0");
  Selection sel;
  sel.nb = nb;
  sel.blocks.assign(rows.size() * nb, -1);
  sel.masks.assign(rows.size() * nb, 0);
  sel.count.resize(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) {
    require(rows[t].count <= nb, "row " + std::to_string(t) + " needs " +
                                     std::to_string(rows[t].count) + " pages, NB is " +
                                     std::to_string(nb));
    std::copy(rows[t].blocks.begin(), rows[t].blocks.end(), sel.blocks.begin() + t * nb);
    std::copy(rows[t].masks.begin(), rows[t].masks.end(), sel.masks.begin() + t * nb);
    sel.count[t] = rows[t].count;
  }
  return sel;
}

IndexResult qsa_index_ref(const std::vector<uint16_t>& q, const std::vector<float>& w,
                          const std::vector<uint16_t>& k_index, const Varlen& meta, int k, int nb) {
  IndexResult out;
  out.scores = qsa_index_scores(q, w, k_index, meta);
  out.topk_idx.assign(out.scores.size() * k, -1);
  std::vector<Expansion> expansions;
  for (size_t t = 0; t < out.scores.size(); ++t) {
    const std::vector<int32_t> top = qsa_index_topk(out.scores[t], k);
    std::copy(top.begin(), top.end(), out.topk_idx.begin() + t * k);
    expansions.push_back(qsa_index_expand(top));
  }
  out.selection = pack_selection(expansions, nb);
  return out;
}

TopkVerdict judge_topk_row(const int32_t* gpu_row, int k, const std::vector<double>& ref_scores,
                           double rel_tol) {
  require(k >= 1, "k must be >= 1");
  const int len = static_cast<int>(ref_scores.size());
  TopkVerdict v{};
  v.well_formed = well_formed(gpu_row, k, len);
  const std::vector<int32_t> order = rank_positions(ref_scores);
  v.near_tie = len > k && near(ref_scores[order[k - 1]], ref_scores[order[k]], rel_tol);
  if (!v.well_formed) return v;
  const std::vector<int32_t> gpu(gpu_row, gpu_row + std::min(k, len));
  const std::vector<int32_t> ref = qsa_index_topk(ref_scores, k);
  v.same_set = gpu == ref;
  v.allowed = v.same_set || (v.near_tie && swaps_are_near_ties(gpu, ref, ref_scores,
                                                               ref_scores[order[k - 1]], rel_tol));
  return v;
}

TopkReport judge_topk(const std::vector<int32_t>& gpu_topk_idx, int k,
                      const std::vector<std::vector<double>>& ref_scores, double rel_tol) {
  require(gpu_topk_idx.size() == ref_scores.size() * k, "gpu_topk_idx must be [T, k]");
  TopkReport report;
  for (size_t t = 0; t < ref_scores.size(); ++t) {
    const TopkVerdict v = judge_topk_row(gpu_topk_idx.data() + t * k, k, ref_scores[t], rel_tol);
    if (!v.allowed) {
      report.failed_rows.push_back(static_cast<int>(t));
    } else if (!v.same_set) {
      report.excused_rows.push_back(static_cast<int>(t));
    }
  }
  return report;
}

}  // namespace sm70ops::ref
