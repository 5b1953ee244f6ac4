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

// The call's tensors as floats (exact), converted once so long contexts stay fast.
struct FloatInputs {
  std::vector<float> q, k, v, gate;  // gate empty: no gate
  int num_q_heads, num_kv_heads, head_dim;
  int64_t tokens;  // rows of the caches: num_pages * P
};

FloatInputs to_float(const std::vector<uint16_t>& q, int num_q_heads, const KvCache& kv,
                     const std::vector<uint16_t>& gate, const Varlen& meta, size_t num_rows) {
  require(kv.num_kv_heads > 0 && kv.head_dim > 0, "kv heads and head dim must be > 0");
  require(num_q_heads > 0 && num_q_heads % kv.num_kv_heads == 0, "Hq must be a multiple of Hkv");
  require(q.size() == num_rows * num_q_heads * kv.head_dim, "q must be [T, Hq, D]");
  require(gate.empty() || gate.size() == q.size(), "gate must be [T, Hq, D] or absent");
  const size_t page_elems = static_cast<size_t>(meta.page_size) * kv.num_kv_heads * kv.head_dim;
  require(kv.k.size() % page_elems == 0, "k_cache must be [pages, P, Hkv, D]");
  require(kv.v.size() == kv.k.size(), "v_cache must match k_cache");
  const int64_t tokens = static_cast<int64_t>(kv.k.size() / (kv.num_kv_heads * kv.head_dim));
  return {from_half(q), from_half(kv.k), from_half(kv.v), from_half(gate),
          num_q_heads,  kv.num_kv_heads, kv.head_dim,     tokens};
}

// Row t's key set, ascending; a position selected twice counts once.
std::vector<int32_t> selected_positions(const Selection& sel, int page_size, size_t t, int len) {
  std::vector<bool> chosen(len, false);
  for (int i = 0; i < sel.count[t]; ++i) {
    const int64_t block = sel.blocks[t * sel.nb + i];
    const uint64_t mask = sel.masks[t * sel.nb + i];
    require(block >= 0, "a counted sel_blocks entry is negative");
    for (int bit = 0; bit < page_size; ++bit) {
      const int64_t position = block * page_size + bit;
      if (((mask >> bit) & 1) && position < len) chosen[position] = true;
    }
  }
  std::vector<int32_t> positions;
  for (int p = 0; p < len; ++p) {
    if (chosen[p]) positions.push_back(p);
  }
  return positions;
}

// Element offset of each key (and value) of `positions` in the caches, for KV head kv_head.
std::vector<size_t> key_offsets(const FloatInputs& in, const Varlen& meta, const RowInfo& row,
                                int kv_head, const std::vector<int32_t>& positions) {
  std::vector<size_t> offsets(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t token = physical_token(meta, row.request, positions[i]);
    require(token >= 0 && token < in.tokens, "block_table points outside the KV cache");
    offsets[i] = (token * in.num_kv_heads + kv_head) * in.head_dim;
  }
  return offsets;
}

template <typename Acc>
Acc sigmoid(Acc x) {
  return Acc{1} / (Acc{1} + std::exp(-x));
}

// Softmax attention of query head `head_row` (= t * Hq + h) over the keys at `offsets`; Acc is
// the precision of every step. In fp32 the output is rounded to fp16 as the GPU op stores it.
template <typename Acc>
void attend(const FloatInputs& in, size_t head_row, const std::vector<size_t>& offsets, Acc scale,
            double* o, double* lse) {
  const int dim = in.head_dim;
  if (offsets.empty()) {
    std::fill(o, o + dim, 0.0);
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  const float* q = in.q.data() + head_row * dim;
  std::vector<Acc> logits(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    Acc dot = 0;
    for (int d = 0; d < dim; ++d) dot += Acc{q[d]} * Acc{in.k[offsets[i] + d]};
    logits[i] = scale * dot;
  }
  const Acc max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<Acc> acc(dim, 0);
  Acc sum = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    const Acc p = std::exp(logits[i] - max_logit);
    sum += p;
    for (int d = 0; d < dim; ++d) acc[d] += p * Acc{in.v[offsets[i] + d]};
  }
  for (int d = 0; d < dim; ++d) {
    Acc value = acc[d] / sum;
    if (!in.gate.empty()) value *= sigmoid(Acc{in.gate[head_row * dim + d]});
    if constexpr (std::is_same_v<Acc, float>) {
      o[d] = round_to_half(value);
    } else {
      o[d] = value;
    }
  }
  *lse = std::log(sum) + max_logit;
}

// Runs attend for every row and head; positions_of(t, row) gives row t's key set.
template <typename Acc, typename PositionsOf>
AttnResult attend_all(const FloatInputs& in, const Varlen& meta, float sm_scale,
                      PositionsOf positions_of) {
  const std::vector<RowInfo> rows = varlen_rows(meta);
  const int group = in.num_q_heads / in.num_kv_heads;
  AttnResult out;
  out.o.resize(in.q.size());
  out.lse.resize(rows.size() * in.num_q_heads);
  for (size_t t = 0; t < rows.size(); ++t) {
    const std::vector<int32_t> positions = positions_of(t, rows[t]);
    for (int kv_head = 0; kv_head < in.num_kv_heads; ++kv_head) {
      const std::vector<size_t> offsets = key_offsets(in, meta, rows[t], kv_head, positions);
      for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const size_t head_row = t * in.num_q_heads + h;
        attend<Acc>(in, head_row, offsets, Acc{sm_scale}, out.o.data() + head_row * in.head_dim,
                    out.lse.data() + head_row);
      }
    }
  }
  return out;
}

template <typename PositionsOf>
AttnResult attend_all_at(AttnPrecision precision, const std::vector<uint16_t>& q, int num_q_heads,
                         const KvCache& kv, const std::vector<uint16_t>& gate, const Varlen& meta,
                         float sm_scale, PositionsOf positions_of) {
  const FloatInputs in = to_float(q, num_q_heads, kv, gate, meta, num_rows(meta));
  if (precision == AttnPrecision::kFp32Fp16Out) {
    return attend_all<float>(in, meta, sm_scale, positions_of);
  }
  return attend_all<double>(in, meta, sm_scale, positions_of);
}

}  // namespace

AttnResult qsa_attn_ref(const std::vector<uint16_t>& q, int num_q_heads, const KvCache& kv,
                        const Varlen& meta, const Selection& sel, float sm_scale,
                        const std::vector<uint16_t>& gate, AttnPrecision precision) {
  const size_t rows = num_rows(meta);
  require(meta.page_size >= 1 && meta.page_size <= 64, "a page's mask holds at most 64 tokens");
  require(sel.count.size() == rows, "sel_count must be [T]");
  require(sel.blocks.size() == rows * sel.nb && sel.masks.size() == rows * sel.nb,
          "sel_blocks and sel_mask must be [T, NB]");
  for (int32_t count : sel.count)
    require(count >= 0 && count <= sel.nb, "sel_count outside [0, NB]");
  return attend_all_at(precision, q, num_q_heads, kv, gate, meta, sm_scale,
                       [&](size_t t, const RowInfo& row) {
                         return selected_positions(sel, meta.page_size, t, row.len);
                       });
}

AttnResult dense_causal_attn_ref(const std::vector<uint16_t>& q, int num_q_heads, const KvCache& kv,
                                 const Varlen& meta, float sm_scale,
                                 const std::vector<uint16_t>& gate, AttnPrecision precision) {
  return attend_all_at(precision, q, num_q_heads, kv, gate, meta, sm_scale,
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
    all.count = (row.len + meta.page_size - 1) / meta.page_size;
    all.blocks.resize(all.count);
    std::iota(all.blocks.begin(), all.blocks.end(), 0);
    all.masks.assign(all.count, ~uint64_t{0});
    rows.push_back(all);
  }
  return pack_selection(rows, nb);
}

}  // namespace sm70ops::ref
