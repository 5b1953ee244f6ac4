// The one-time repack into the prepared layout (Operand's comment in nvfp4_moe_internal.cuh):
// per expert, K step and row half, the rows' 16 payload bytes and two scales one after another,
// K zero-padded to a multiple of 32, so that the GEMMs' main loop reads whole, aligned row halves
// in contiguous runs whatever H and I are. Both layouts are addressed through weight_offset(), the
// GEMMs' own address map.
#include "kernels/nvfp4_moe/nvfp4_moe_internal.cuh"

namespace sm70ops::nvfp4_moe {
namespace {

constexpr int kRepackThreads = 256;
constexpr int64_t kMaxRepackBlocks = 65535;

// One row half (32 k) per thread, consecutive threads on consecutive rows: the writes are
// contiguous. The checkpoint side is read as two 8-byte quarters (its rows are 8-byte aligned
// when K % 32 == 16); a quarter at or past K reads as zeros.
__global__ void __launch_bounds__(kRepackThreads)
    nvfp4_moe_prepare_halves(const Operand from, const Operand to, int experts, int rows) {
  const int halves = round_up(from.k, kHalfK) / kHalfK;  // per row
  const int64_t units = (int64_t)experts * halves * rows;
  for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < units;
       u += (int64_t)gridDim.x * blockDim.x) {
    const int n = (int)(u % rows);
    const int64_t expert_half = u / rows;
    const int e = (int)(expert_half / halves), k = (int)(expert_half % halves) * kHalfK;
    const WeightOffset src = weight_offset(from, e, n, k);
    const WeightOffset dst = weight_offset(to, e, n, k);
    uint2 quarters[2] = {make_uint2(0, 0), make_uint2(0, 0)};
    uint32_t scales = 0;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      if (k + q * kScaleBlock < from.k) {
        quarters[q] = *reinterpret_cast<const uint2 *>(from.packed + src.packed + q * 8);
        scales |= (uint32_t)from.scales[src.scales + q] << (8 * q);
      }
    }
    *reinterpret_cast<uint4 *>(const_cast<uint8_t *>(to.packed) + dst.packed) =
        make_uint4(quarters[0].x, quarters[0].y, quarters[1].x, quarters[1].y);
    *reinterpret_cast<uint16_t *>(const_cast<uint8_t *>(to.scales) + dst.scales) = (uint16_t)scales;
  }
}

__global__ void nvfp4_moe_prepare_scale_2(const sm70_nvfp4_moe_weights w, float *out, int experts) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= experts) return;
  out[e * kPreparedScale2Stride + 0] = w.w13_scale_2[2 * e];
  out[e * kPreparedScale2Stride + 1] = w.w13_scale_2[2 * e + 1];
  out[e * kPreparedScale2Stride + 2] = w.w2_scale_2[e];
  out[e * kPreparedScale2Stride + 3] = 0.0f;
}

void repack(const Operand &from, const Operand &to, int experts, int rows, cudaStream_t stream) {
  const int64_t units = (int64_t)experts * rows * (round_up(from.k, kHalfK) / kHalfK);
  const int64_t blocks = (units + kRepackThreads - 1) / kRepackThreads;
  nvfp4_moe_prepare_halves<<<(int)(blocks < kMaxRepackBlocks ? blocks : kMaxRepackBlocks),
                             kRepackThreads, 0, stream>>>(from, to, experts, rows);
}

}  // namespace

void launch_prepare(const sm70_nvfp4_moe_prepare_params &p, cudaStream_t stream) {
  const int e = p.experts, h = p.hidden, i = p.inter;
  repack(gate_up_operand(p.weights, nullptr, e, h, i),
         gate_up_operand(p.weights, p.prepared, e, h, i), e, 2 * i, stream);
  repack(down_operand(p.weights, nullptr, e, h, i), down_operand(p.weights, p.prepared, e, h, i), e,
         h, stream);
  float *scale_2 = reinterpret_cast<float *>(p.prepared + prepared_layout(e, h, i).scale_2);
  nvfp4_moe_prepare_scale_2<<<(e + 255) / 256, 256, 0, stream>>>(p.weights, scale_2, e);
}

}  // namespace sm70ops::nvfp4_moe
