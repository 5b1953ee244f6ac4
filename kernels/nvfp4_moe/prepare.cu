// The one-time repack into the prepared layout (nvfp4_moe.h): each GEMM block's weight tile of one
// K step, 256 rows x 64 k, becomes one contiguous 8 KiB run of payload and 1 KiB of scales, so
// the main loop reads it with fully coalesced 16-byte loads. Rows past I or H are zero-filled.
// Both layouts are addressed through row_source(), the GEMMs' own address map.
#include "kernels/nvfp4_moe/nvfp4_moe_internal.cuh"

namespace sm70ops::nvfp4_moe {
namespace {

constexpr int kRepackThreads = 256;
constexpr int kChunksPerStep = kTilePackedBytes / 16;  // 16-byte payload pieces of a tile step
constexpr int64_t kMaxRepackBlocks = 65535;

struct TileStep {  // which tile step (expert, N tile, K step) a flat index falls in
  int e, nt, kt;
};

__device__ TileStep tile_step(const Operand &b, int64_t step) {
  TileStep s;
  s.kt = (int)(step % b.k_tiles);
  step /= b.k_tiles;
  s.nt = (int)(step % b.n_tiles);
  s.e = (int)(step / b.n_tiles);
  return s;
}

template <int kHalves>
__global__ void __launch_bounds__(kRepackThreads)
    nvfp4_moe_prepare_payload(const Operand from, const Operand to, int experts) {
  const int64_t units = (int64_t)experts * from.n_tiles * from.k_tiles * kChunksPerStep;
  for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < units;
       u += (int64_t)gridDim.x * blockDim.x) {
    const TileStep s = tile_step(from, u / kChunksPerStep);
    const int chunk = (int)(u % kChunksPerStep), r = chunk / 2, h = chunk % 2;
    const RowSource src = row_source<kHalves>(from, s.e, s.nt, r, h);
    const RowSource dst = row_source<kHalves>(to, s.e, s.nt, r, h);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (src.valid)
      v = *reinterpret_cast<const uint4 *>(src.packed + (int64_t)s.kt * from.packed_step);
    *reinterpret_cast<uint4 *>(const_cast<uint8_t *>(dst.packed) + (int64_t)s.kt * to.packed_step) =
        v;
  }
}

template <int kHalves>
__global__ void __launch_bounds__(kRepackThreads)
    nvfp4_moe_prepare_scales(const Operand from, const Operand to, int experts) {
  const int64_t units = (int64_t)experts * from.n_tiles * from.k_tiles * kTileN;
  for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < units;
       u += (int64_t)gridDim.x * blockDim.x) {
    const TileStep s = tile_step(from, u / kTileN);
    const int r = (int)(u % kTileN);
    const RowSource src = row_source<kHalves>(from, s.e, s.nt, r, 0);
    const RowSource dst = row_source<kHalves>(to, s.e, s.nt, r, 0);
    uint32_t v = 0;  // the row's four scales of this K step
    if (src.valid)
      v = *reinterpret_cast<const uint32_t *>(src.scales + (int64_t)s.kt * from.scales_step);
    *reinterpret_cast<uint32_t *>(const_cast<uint8_t *>(dst.scales) +
                                  (int64_t)s.kt * to.scales_step) = v;
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

int repack_blocks(int64_t units) {
  const int64_t blocks = (units + kRepackThreads - 1) / kRepackThreads;
  return (int)(blocks < kMaxRepackBlocks ? blocks : kMaxRepackBlocks);
}

template <int kHalves>
void repack(const Operand &from, const Operand &to, int experts, cudaStream_t stream) {
  const int64_t steps = (int64_t)experts * from.n_tiles * from.k_tiles;
  nvfp4_moe_prepare_payload<kHalves>
      <<<repack_blocks(steps * kChunksPerStep), kRepackThreads, 0, stream>>>(from, to, experts);
  nvfp4_moe_prepare_scales<kHalves>
      <<<repack_blocks(steps * kTileN), kRepackThreads, 0, stream>>>(from, to, experts);
}

}  // namespace

void launch_prepare(const sm70_nvfp4_moe_prepare_params &p, cudaStream_t stream) {
  const int e = p.experts, h = p.hidden, i = p.inter;
  repack<2>(gate_up_operand(p.weights, nullptr, e, h, i),
            gate_up_operand(p.weights, p.prepared, e, h, i), e, stream);
  repack<1>(down_operand(p.weights, nullptr, e, h, i), down_operand(p.weights, p.prepared, e, h, i),
            e, stream);
  float *scale_2 = reinterpret_cast<float *>(p.prepared + prepared_layout(e, h, i).scale_2);
  nvfp4_moe_prepare_scale_2<<<(e + 255) / 256, 256, 0, stream>>>(p.weights, scale_2, e);
}

}  // namespace sm70ops::nvfp4_moe
