#include "tests/ref/qsa_attn_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tests/ref/half.h"

namespace sm70ops::ref {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("qsa_attn: " + what);
}

void check_shapes(const std::vector<uint16_t>& q, int num_q_heads, const KvCache& kv,
                  size_t num_rows) {
  require(kv.num_kv_heads > 0 && kv.head_dim > 0, "kv heads and head dim must be > 0");
  require(num_q_heads > 0 && num_q_heads % kv.num_kv_heads == 0, "Hq must be a multiple of Hkv");
  require(q.size() == num_rows * num_q_heads * kv.head_dim, "q must be [T, Hq, D]");
  const size_t page_elems = static_cast<size_t>(kPageSize) * kv.num_kv_heads * kv.head_dim;
  require(kv.k.size() % page_elems == 0, "k_cache must be [pages, 64, Hkv, D]");
  require(kv.v.size() == kv.k.size(), "v_cache must match k_cache");
}

// The caches as floats (exact), converted once per call so long contexts stay fast.
struct FloatKv {
  std::vector<float> k;
  std::vector<float> v;
  int num_kv_heads;
  int head_dim;
  int64_t tokens;
};

FloatKv to_float(const KvCache& kv) {
  const int64_t tokens = static_cast<int64_t>(kv.k.size() / (kv.num_kv_heads * kv.head_dim));
  return {from_half(kv.k), from_half(kv.v), kv.num_kv_heads, kv.head_dim, tokens};
}

// Row t's key set, ascending; a position selected twice counts once.
std::vector<int32_t> selected_positions(const Selection& sel, size_t t, int len) {
  std::vector<bool> chosen(len, false);
  for (int i = 0; i < sel.count[t]; ++i) {
    const int64_t block = sel.blocks[t * sel.nb + i];
    const uint64_t mask = sel.masks[t * sel.nb + i];
    require(block >= 0, "a counted sel_blocks entry is negative");
    for (int bit = 0; bit < kPageSize; ++bit) {
      const int64_t position = block * kPageSize + bit;
      if (((mask >> bit) & 1) && position < len) chosen[position] = true;
    }
  }
  std::vector<int32_t> positions;
  for (int p = 0; p < len; ++p) {
    if (chosen[p]) positions.push_back(p);
  }
  return positions;
}

// Scaled logits of one query head against the keys at `positions`; offsets[i] locates key i
// (and its value) in the caches.
template <typename Acc>
std::vector<Acc> logits_of(const float* q_head, const FloatKv& kv, const Varlen& meta,
                           const RowInfo& row, int kv_head, const std::vector<int32_t>& positions,
                           Acc scale, std::vector<size_t>& offsets) {
  const int dim = kv.head_dim;
  offsets.resize(positions.size());
  std::vector<Acc> logits(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t token = physical_token(meta, row.request, positions[i]);
    require(token >= 0 && token < kv.tokens, "block_table points outside the KV cache");
    offsets[i] = (token * kv.num_kv_heads + kv_head) * dim;
    Acc dot = 0;
    for (int d = 0; d < dim; ++d) dot += Acc{q_head[d]} * Acc{kv.k[offsets[i] + d]};
    logits[i] = scale * dot;
  }
  return logits;
}

// Softmax attention of one query head over `positions`; Acc is the precision of every step.
// In fp32 the output is rounded to fp16 as the GPU op stores it.
template <typename Acc>
void attend(const float* q_head, const FloatKv& kv, const Varlen& meta, const RowInfo& row,
            int kv_head, const std::vector<int32_t>& positions, Acc scale, double* o, double* lse) {
  const int dim = kv.head_dim;
  if (positions.empty()) {
    std::fill(o, o + dim, 0.0);
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  std::vector<size_t> offsets;
  const std::vector<Acc> logits =
      logits_of(q_head, kv, meta, row, kv_head, positions, scale, offsets);
  const Acc max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<Acc> acc(dim, 0);
  Acc sum = 0;
  for (size_t i = 0; i < positions.size(); ++i) {
    const Acc p = std::exp(logits[i] - max_logit);
    sum += p;
    for (int d = 0; d < dim; ++d) acc[d] += p * Acc{kv.v[offsets[i] + d]};
  }
  for (int d = 0; d < dim; ++d) {
    if constexpr (std::is_same_v<Acc, float>) {
      o[d] = round_to_half(acc[d] / sum);
    } else {
      o[d] = acc[d] / sum;
    }
  }
  *lse = std::log(sum) + max_logit;
}

// Runs attend for every row and head; positions_of(t, row) gives row t's key set.
template <typename Acc, typename PositionsOf>
AttnResult attend_all(const std::vector<uint16_t>& q, int num_q_heads, const KvCache& kv,
                      const Varlen& meta, float sm_scale, PositionsOf positions_of) {
  const std::vector<RowInfo> rows = varlen_rows(meta);
  check_shapes(q, num_q_heads, kv, rows.size());
  const std::vector<float> queries = from_half(q);
  const FloatKv cache = to_float(kv);
  const int dim = kv.head_dim;
  const int group = num_q_heads / kv.num_kv_heads;
  AttnResult out;
  out.o.resize(q.size());
  out.lse.resize(rows.size() * num_q_heads);
  for (size_t t = 0; t < rows.size(); ++t) {
    const std::vector<int32_t> positions = positions_of(t, rows[t]);
    for (int h = 0; h < num_q_heads; ++h) {
      const size_t head_row = t * num_q_heads + h;
      attend<Acc>(queries.data() + head_row * dim, cache, meta, rows[t], h / group, positions,
                  Acc{sm_scale}, out.o.data() + head_row * dim, out.lse.data() + head_row);
    }
  }
  return out;
}

template <typename PositionsOf>
AttnResult attend_all_at(AttnPrecision precision, const std::vector<uint16_t>& q, int num_q_heads,
                         const KvCache& kv, const Varlen& meta, float sm_scale,
                         PositionsOf positions_of) {
  if (precision == AttnPrecision::kFp32Fp16Out) {
    return attend_all<float>(q, num_q_heads, kv, meta, sm_scale, positions_of);
  }
  return attend_all<double>(q, num_q_heads, kv, meta, sm_scale, positions_of);
}

}  // namespace

AttnResult qsa_attn_ref(const std::vector<uint16_t>& q, int num_q_heads, const KvCache& kv,
                        const Varlen& meta, const Selection& sel, float sm_scale,
                        AttnPrecision precision) {
  const size_t rows = num_rows(meta);
  require(sel.count.size() == rows, "sel_count must be [T]");
  require(sel.blocks.size() == rows * sel.nb && sel.masks.size() == rows * sel.nb,
          "sel_blocks and sel_mask must be [T, NB]");
  for (int32_t count : sel.count)
    require(count >= 0 && count <= sel.nb, "sel_count outside [0, NB]");
  return attend_all_at(
      precision, q, num_q_heads, kv, meta, sm_scale,
      [&](size_t t, const RowInfo& row) { return selected_positions(sel, t, row.len); });
}

AttnResult dense_causal_attn_ref(const std::vector<uint16_t>& q, int num_q_heads, const KvCache& kv,
                                 const Varlen& meta, float sm_scale, AttnPrecision precision) {
  return attend_all_at(precision, q, num_q_heads, kv, meta, sm_scale,
                       [](size_t, const RowInfo& row) {
                         std::vector<int32_t> positions(row.len);
                         std::iota(positions.begin(), positions.end(), 0);
                         return positions;
                       });
}

Selection select_all_tokens(const Varlen& meta, int nb) {
  std::vector<Expansion> rows;
  for (const RowInfo& row : varlen_rows(meta)) {
    Expansion all;
    all.count = (row.len + kPageSize - 1) / kPageSize;
    all.blocks.resize(all.count);
    std::iota(all.blocks.begin(), all.blocks.end(), 0);
    all.masks.assign(all.count, ~uint64_t{0});
    rows.push_back(all);
  }
  return pack_selection(rows, nb);
}

}  // namespace sm70ops::ref
