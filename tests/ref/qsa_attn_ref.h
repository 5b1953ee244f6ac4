// CPU reference of op 2, QSA selected attention (ops.md version 2, "Op 2"), and a dense causal
// attention reference to check "selecting every token equals dense". fp16 tensors are uint16_t
// bit patterns (tests/ref/half.h).
#ifndef SM70OPS_TESTS_REF_QSA_ATTN_REF_H_
#define SM70OPS_TESTS_REF_QSA_ATTN_REF_H_

#include <cstdint>
#include <vector>

#include "tests/ref/qsa_index_ref.h"
#include "tests/ref/varlen.h"

namespace sm70ops::ref {

// Paged caches in the vLLM layout, k and v each [num_pages, P, num_kv_heads, head_dim] fp16, P
// the page size of the batch's Varlen.
struct KvCache {
  std::vector<uint16_t> k;
  std::vector<uint16_t> v;
  int num_kv_heads = 0;
  int head_dim = 0;
};

// kFp64: fp64 math, o unrounded: the reference the GPU is compared against.
// kFp32Fp16Out: fp32 logits, softmax, accumulation and gate, o rounded to fp16: the
// "same-precision reference" whose error (against kFp64) bounds the GPU's max-abs error at 2x.
enum class AttnPrecision { kFp64, kFp32Fp16Out };

struct AttnResult {
  std::vector<double> o;    // [T, Hq, D]
  std::vector<double> lse;  // [T, Hq], natural log of the ungated sums; -inf for an empty set
};

// Key set of row t: the tokens P * sel_blocks[t][i] + b of its first sel_count[t] entries whose
// mask bit b < P is set and whose position is < L_t (bits b >= P name no token of the page and
// are ignored). Query head h reads KV head h / (Hq / Hkv). q: [T, Hq, D] fp16; gate: [T, Hq, D]
// fp16 or empty (no gate): o[t,h,:] *= sigmoid(gate[t,h,:]).
AttnResult qsa_attn_ref(const std::vector<uint16_t>& q, int num_q_heads, const KvCache& kv,
                        const Varlen& meta, const Selection& sel, float sm_scale,
                        const std::vector<uint16_t>& gate = {},
                        AttnPrecision precision = AttnPrecision::kFp64);

// Causal attention of row t over every position 0 .. pos_t, gated as above.
AttnResult dense_causal_attn_ref(const std::vector<uint16_t>& q, int num_q_heads, const KvCache& kv,
                                 const Varlen& meta, float sm_scale,
                                 const std::vector<uint16_t>& gate = {},
                                 AttnPrecision precision = AttnPrecision::kFp64);

// Every page of 0 .. pos_t with an all-ones mask (bits past pos_t and past P included, as an
// NSA-style host passes them), packed to width nb.
Selection select_all_tokens(const Varlen& meta, int nb);

}  // namespace sm70ops::ref

#endif  // SM70OPS_TESTS_REF_QSA_ATTN_REF_H_
