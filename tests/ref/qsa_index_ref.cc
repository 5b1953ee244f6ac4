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

// Physical key of group g of `request`: the groups of KV page p are page p's keys.
int64_t group_key(const IndexInputs& in, int request, int g) {
  const int per_page = in.meta.page_size / in.ratio;
  const int32_t page =
      in.meta.block_table[static_cast<size_t>(request) * in.meta.max_pages + g / per_page];
  return static_cast<int64_t>(page) * per_page + g % per_page;
}

// keys: the whole k_index cache as floats; q_row: this row's [4, 128] queries as floats.
std::vector<double> score_row(const IndexInputs& in, const float* q_row, const float* w_row,
                              const std::vector<float>& keys, const RowInfo& row) {
  const int64_t cache_keys = static_cast<int64_t>(keys.size() / kIndexDim);
  std::vector<double> scores(row.len / in.ratio);
  for (size_t g = 0; g < scores.size(); ++g) {
    const int64_t key = group_key(in, row.request, static_cast<int>(g));
    require(key >= 0 && key < cache_keys, "block_table points outside k_index");
    const float* k = keys.data() + key * kIndexDim;
    double score = 0.0;
    for (int h = 0; h < kIndexHeads; ++h) {
      const double weight = w_row == nullptr ? 1.0 / std::sqrt(double{kIndexDim}) : w_row[h];
      score += weight * std::max(0.0, dot(q_row + h * kIndexDim, k));
    }
    scores[g] = score;
  }
  return scores;
}

// Indices ordered by score, highest first, ties to the lower index.
std::vector<int32_t> rank_indices(const std::vector<double>& scores) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  return order;
}

double largest_magnitude(const std::vector<double>& scores) {
  double m = 0.0;
  for (double s : scores) m = std::max(m, std::abs(s));
  return m;
}

// The groups a GPU row's token set selects, or false when the row is not a well-formed token
// set of a row with `len` tokens: c consecutive tokens per group, groups ascending, then exactly
// the tail c*G .. len-1, then -1 up to the row's width.
bool selected_groups(const int32_t* row, int width, int ratio, int len,
                     std::vector<int32_t>* groups) {
  const int tail0 = len / ratio * ratio;
  int i = 0;
  for (; i < width && row[i] >= 0 && row[i] < tail0; i += ratio) {
    if (i + ratio > width || row[i] % ratio != 0) return false;
    for (int j = 1; j < ratio; ++j) {
      if (row[i + j] != row[i] + j) return false;
    }
    if (!groups->empty() && row[i] / ratio <= groups->back()) return false;
    groups->push_back(row[i] / ratio);
  }
  for (int token = tail0; token < len; ++token, ++i) {
    if (i >= width || row[i] != token) return false;
  }
  for (; i < width; ++i) {
    if (row[i] != -1) return false;
  }
  return true;
}

// True when every group chosen by only one side scores near the K-th score.
bool swaps_are_near_ties(const std::vector<int32_t>& gpu, const std::vector<int32_t>& ref,
                         const std::vector<double>& scores, double kth, double scale) {
  std::vector<int32_t> differing;
  std::set_symmetric_difference(gpu.begin(), gpu.end(), ref.begin(), ref.end(),
                                std::back_inserter(differing));
  return std::all_of(differing.begin(), differing.end(),
                     [&](int32_t g) { return near_scores(scores[g], kth, scale); });
}

}  // namespace

std::vector<std::vector<double>> qsa_index_scores(const IndexInputs& in) {
  const std::vector<RowInfo> rows = varlen_rows(in.meta);
  require(in.ratio == 1 || in.ratio == 2 || in.ratio == 4, "c must be 1, 2 or 4");
  require(in.meta.page_size % in.ratio == 0, "P must be a multiple of c");
  require(in.q.size() == rows.size() * kIndexHeads * kIndexDim, "q must be [T, 4, 128]");
  require(in.w.empty() || in.w.size() == rows.size() * kIndexHeads, "w must be [T, 4] or absent");
  const size_t page_keys = static_cast<size_t>(in.meta.page_size / in.ratio) * kIndexDim;
  require(in.k_index.size() % page_keys == 0, "k_index must be [pages, P / c, 128]");
  // fp16 -> float is exact; converting once keeps the reference fast on long contexts.
  const std::vector<float> queries = from_half(in.q);
  const std::vector<float> keys = from_half(in.k_index);
  std::vector<std::vector<double>> scores(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) {
    const float* w_row = in.w.empty() ? nullptr : in.w.data() + t * kIndexHeads;
    scores[t] = score_row(in, queries.data() + t * kIndexHeads * kIndexDim, w_row, keys, rows[t]);
  }
  return scores;
}

std::vector<int32_t> qsa_index_topk(const std::vector<double>& scores, int k) {
  require(k >= 1, "k must be >= 1");
  std::vector<int32_t> order = rank_indices(scores);
  order.resize(std::min<size_t>(order.size(), k));
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<int32_t> qsa_index_token_set(const std::vector<int32_t>& groups, int ratio, int len) {
  std::vector<int32_t> tokens;
  for (int32_t g : groups) {
    for (int j = 0; j < ratio; ++j) tokens.push_back(g * ratio + j);
  }
  for (int token = len / ratio * ratio; token < len; ++token) tokens.push_back(token);
  return tokens;
}

Expansion qsa_index_expand(const std::vector<int32_t>& tokens, int page_size) {
  require(page_size >= 1 && page_size <= 64, "a page's mask holds at most 64 tokens");
  Expansion out;
  for (int32_t token : tokens) {
    if (token < 0) continue;
    const int32_t page = token / page_size;
    auto it = std::lower_bound(out.blocks.begin(), out.blocks.end(), page);
    const auto slot = it - out.blocks.begin();
    if (it == out.blocks.end() || *it != page) {
      out.blocks.insert(it, page);
      out.masks.insert(out.masks.begin() + slot, 0);
    }
    out.masks[slot] |= uint64_t{1} << (token % page_size);
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

IndexResult qsa_index_ref(const IndexInputs& in, int topk, int nb) {
  require(topk >= 1 && topk % in.ratio == 0, "the budget must be a positive multiple of c");
  IndexResult out;
  out.scores = qsa_index_scores(in);
  const std::vector<RowInfo> rows = varlen_rows(in.meta);
  const int width = topk + in.ratio - 1;
  out.topk_idx.assign(out.scores.size() * width, -1);
  std::vector<Expansion> expansions;
  for (size_t t = 0; t < out.scores.size(); ++t) {
    const std::vector<int32_t> groups = qsa_index_topk(out.scores[t], topk / in.ratio);
    const std::vector<int32_t> set = qsa_index_token_set(groups, in.ratio, rows[t].len);
    std::copy(set.begin(), set.end(), out.topk_idx.begin() + t * width);
    expansions.push_back(qsa_index_expand(set, in.meta.page_size));
  }
  out.selection = pack_selection(expansions, nb);
  return out;
}

bool near_scores(double a, double b, double scale) {
  const double gap = std::abs(a - b);
  return gap <= kTopkTieRelTol * std::max(std::abs(a), std::abs(b)) ||
         gap <= kTopkTieAbsTol * scale;
}

TopkVerdict judge_topk_row(const int32_t* gpu_row, int topk, int ratio, int len,
                           const std::vector<double>& ref_scores) {
  require(topk >= 1 && topk % ratio == 0, "the budget must be a positive multiple of c");
  require(static_cast<int>(ref_scores.size()) == len / ratio, "one score per complete group");
  const int k = topk / ratio, groups = len / ratio;
  TopkVerdict v{};
  std::vector<int32_t> gpu;
  v.well_formed = selected_groups(gpu_row, topk + ratio - 1, ratio, len, &gpu) &&
                  static_cast<int>(gpu.size()) == std::min(k, groups);
  const std::vector<int32_t> order = rank_indices(ref_scores);
  const double scale = largest_magnitude(ref_scores);
  v.near_tie = groups > k && near_scores(ref_scores[order[k - 1]], ref_scores[order[k]], scale);
  if (!v.well_formed) return v;
  const std::vector<int32_t> ref = qsa_index_topk(ref_scores, k);
  v.same_set = gpu == ref;
  v.allowed = v.same_set || (v.near_tie && swaps_are_near_ties(gpu, ref, ref_scores,
                                                               ref_scores[order[k - 1]], scale));
  return v;
}

TopkReport judge_topk(const std::vector<int32_t>& gpu_topk_idx, int topk, const IndexInputs& in,
                      const std::vector<std::vector<double>>& ref_scores) {
  const std::vector<RowInfo> rows = varlen_rows(in.meta);
  const size_t width = topk + in.ratio - 1;
  require(gpu_topk_idx.size() == ref_scores.size() * width, "gpu_topk_idx must be [T, B + c - 1]");
  TopkReport report;
  for (size_t t = 0; t < ref_scores.size(); ++t) {
    const TopkVerdict v =
        judge_topk_row(gpu_topk_idx.data() + t * width, topk, in.ratio, rows[t].len, ref_scores[t]);
    if (!v.allowed) {
      report.failed_rows.push_back(static_cast<int>(t));
    } else if (!v.same_set) {
      report.excused_rows.push_back(static_cast<int>(t));
    }
  }
  return report;
}

}  // namespace sm70ops::ref
