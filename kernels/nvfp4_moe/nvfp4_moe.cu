// Grouped NVFP4 MoE on SM70. Per pass of at most kChunkTokens tokens (pairs = tokens x top-k):
//   1. route    (route.cu)   counts, offsets, the M tile tables and the pairs sorted by expert;
//   2. gate/up  (gemm.cu)    act[pos] = silu(x W_gate^T) * (x W_up^T) for every sorted position;
//   3. down     (gemm.cu)    partial[pair] = router weight x act W2^T, fp16;
//   4. combine  (combine.cu) out[t] = sum of the token's partials in slot order, fp32 -> fp16.
// The partials are the pipeline's largest traffic (pairs x H, written once and read once):
// fp16 halves it for one rounding of each term, relative 2^-11, before the fp32 sum (at TP1,
// T 8192 it saves 0.67 GB, about 0.8 ms at a V100's 0.85 TB/s, for rel-L2 3.6e-4 against 3.0e-4).
// Every grid is sized from host-side shapes (T, k, E, H, I) alone and the counts stay on the
// device, so the pipeline allocates nothing, never synchronises and can be captured in a graph.
#include "kernels/nvfp4_moe/nvfp4_moe.h"
#include "kernels/nvfp4_moe/nvfp4_moe_internal.cuh"

namespace sm70ops::nvfp4_moe {
namespace {

// The operand of N = kHalves x half_rows rows of K, in the checkpoint or the prepared layout
// (Operand's comment).
template <int kHalves>
Operand operand(const uint8_t *packed, const uint8_t *scales, const float *scale_2,
                int32_t scale_2_stride, bool prepared, int32_t half_rows, int32_t k) {
  const int32_t n = kHalves * half_rows;
  Operand b;
  b.packed = packed;
  b.scales = scales;
  b.scale_2 = scale_2;
  b.scale_2_stride = scale_2_stride;
  b.half_rows = half_rows;
  b.k = k;
  b.n_tiles = (half_rows + kTileN / kHalves - 1) / (kTileN / kHalves);
  b.k_tiles = (k + kTileK - 1) / kTileK;
  b.expert_bytes = n * ((prepared ? round_up(k, kHalfK) : k) / 2);
  b.row_bytes = prepared ? kHalfK / 2 : k / 2;
  b.step_bytes = prepared ? n * (kTileK / 2) : kTileK / 2;
  b.half_bytes = prepared ? n * (kHalfK / 2) : kHalfK / 2;
  return b;
}

uint64_t align256(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

int32_t pass_tokens(int32_t tokens) { return tokens < kChunkTokens ? tokens : kChunkTokens; }

Pass make_pass(const Params &p, int32_t token0) {
  Pass pass;
  pass.token0 = token0;
  pass.tokens = pass_tokens(p.tokens - token0);
  pass.pairs = pass.tokens * p.topk;
  pass.sort_blocks = (pass.pairs + kSortPairs - 1) / kSortPairs;
  pass.table_size = max_m_tiles(pass.pairs, p.experts);
  return pass;
}

}  // namespace

Operand gate_up_operand(const sm70_nvfp4_moe_weights &w, const uint8_t *prepared, int experts,
                        int hidden, int inter) {
  if (prepared == nullptr) {
    return operand<2>(w.w13, w.w13_scale, w.w13_scale_2, 2, false, inter, hidden);
  }
  const PreparedLayout l = prepared_layout(experts, hidden, inter);
  const float *scale_2 = reinterpret_cast<const float *>(prepared + l.scale_2);
  return operand<2>(prepared + l.w13, prepared + l.w13_scale, scale_2, kPreparedScale2Stride, true,
                    inter, hidden);
}

Operand down_operand(const sm70_nvfp4_moe_weights &w, const uint8_t *prepared, int experts,
                     int hidden, int inter) {
  if (prepared == nullptr) {
    return operand<1>(w.w2, w.w2_scale, w.w2_scale_2, 1, false, hidden, inter);
  }
  const PreparedLayout l = prepared_layout(experts, hidden, inter);
  const float *scale_2 = reinterpret_cast<const float *>(prepared + l.scale_2) + 2;
  return operand<1>(prepared + l.w2, prepared + l.w2_scale, scale_2, kPreparedScale2Stride, true,
                    hidden, inter);
}

// Pieces in carve order.
uint64_t workspace_bytes(const Params &p, int32_t capacity_tokens) {
  const uint64_t pairs = (uint64_t)capacity_tokens * p.topk, e = p.experts;
  const uint64_t sort_blocks = (pairs + kSortPairs - 1) / kSortPairs;
  return align256(sort_blocks * e * 4) + align256(e * 4) +
         align256((uint64_t)max_m_tiles((int32_t)pairs, p.experts) * sizeof(int4)) +
         align256(pairs * 4) + align256(pairs * p.inter * 2) +
         align256(pairs * p.hidden * sizeof(__half));
}

Workspace carve_workspace(void *base, const Params &p, int32_t capacity_tokens) {
  const uint64_t pairs = (uint64_t)capacity_tokens * p.topk, e = p.experts;
  const uint64_t sort_blocks = (pairs + kSortPairs - 1) / kSortPairs;
  char *next = static_cast<char *>(base);
  auto take = [&](uint64_t bytes) {
    char *piece = next;
    next += align256(bytes);
    return piece;
  };
  Workspace w;
  w.block_counts = reinterpret_cast<int32_t *>(take(sort_blocks * e * 4));
  w.expert_offset = reinterpret_cast<int32_t *>(take(e * 4));
  w.tiles = reinterpret_cast<int4 *>(
      take((uint64_t)max_m_tiles((int32_t)pairs, p.experts) * sizeof(int4)));
  w.sorted = reinterpret_cast<int32_t *>(take(pairs * 4));
  w.act = reinterpret_cast<uint16_t *>(take(pairs * p.inter * 2));
  w.partial = reinterpret_cast<__half *>(take(pairs * p.hidden * sizeof(__half)));
  return w;
}

}  // namespace sm70ops::nvfp4_moe

using namespace sm70ops::nvfp4_moe;

extern "C" uint64_t sm70_nvfp4_moe_workspace(int32_t tokens, int32_t topk, int32_t experts,
                                             int32_t hidden, int32_t inter) {
  if (tokens <= 0) return 0;
  Params p = {};
  p.topk = topk;
  p.experts = experts;
  p.hidden = hidden;
  p.inter = inter;
  return workspace_bytes(p, pass_tokens(tokens));
}

extern "C" uint64_t sm70_nvfp4_moe_prepared_bytes(int32_t experts, int32_t hidden, int32_t inter) {
  return prepared_layout(experts, hidden, inter).total;
}

extern "C" int32_t sm70_nvfp4_moe_launch(const sm70_nvfp4_moe_params *p, void *workspace,
                                         void *stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Workspace w = carve_workspace(workspace, *p, pass_tokens(p->tokens));
  const Operand gate_up = gate_up_operand(p->weights, p->prepared, p->experts, p->hidden, p->inter);
  const Operand down = down_operand(p->weights, p->prepared, p->experts, p->hidden, p->inter);
  for (int32_t token0 = 0; token0 < p->tokens; token0 += kChunkTokens) {
    const Pass pass = make_pass(*p, token0);
    launch_route(*p, pass, w, s);
    launch_gate_up(*p, pass, w, gate_up, s);
    launch_down(*p, pass, w, down, s);
    launch_combine(*p, pass, w, s);
  }
  return static_cast<int32_t>(cudaGetLastError());
}

extern "C" int32_t sm70_nvfp4_moe_prepare_launch(const sm70_nvfp4_moe_prepare_params *p,
                                                 void *stream) {
  launch_prepare(*p, static_cast<cudaStream_t>(stream));
  return static_cast<int32_t>(cudaGetLastError());
}
