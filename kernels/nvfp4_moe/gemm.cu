// The grouped W4A16 GEMMs on tensor cores (the tiling and why: nvfp4_moe_internal.cuh). One
// block = one M tile of an expert's sorted pairs (route.cu's table, blockIdx.y; entries past its
// last tile exit) x one N tile of 160 weight rows (blockIdx.x). Per K step of 64:
//   - A: the tile's rows, gathered x rows (gate/up) or contiguous activation rows (down), fp16;
//   - B: the weight tile's FP4 payload and e4m3 scales, decoded to fp16;
//   - each warp's 80 x 16 tile: 4 k-substeps of 5 WMMAs, fp32 accumulation.
// Shared memory holds two steps. A step's MMAs read one buffer; after its first k-substep the
// thread's part of the next step (in registers since the step before) goes to the other buffer
// and the loads of the step after that are issued, in flight during the other three: one
// barrier a step, the decode beside the tensor units' work.
// H and I need only be multiples of 16 (the scale block, the MMA's k and n): a last K step runs
// the k-substeps that hold weights, a last N tile the fragments that hold columns, an M tile the
// fragments that hold rows; nothing past K, N or the rows is loaded or multiplied.
//   gate/up epilogue: a = silu(gate * s2_gate) * (up * s2_up), fp16, into the workspace (the up
//                     warps' accumulators reach the gate warps through shared memory);
//   down epilogue:    router weight * s2 * acc, fp16 (clamped to its finite range: two
//                     opposite overflowing terms must not sum to NaN; a NaN stays one), into
//                     the pair's row of the partials.
//
// Decode: e2m1 x e4m3 is exact in fp16 but can reach 6 x 448 = 2688 and fall to 2^-10, so the
// weights go to the MMA as w x 2^-7 (every such value is an exact binary16) and the epilogue
// multiplies by scale_2 x 2^7 in fp32.
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>

#include "kernels/common/smem.cuh"
#include "kernels/nvfp4_moe/nvfp4_moe_internal.cuh"

namespace sm70ops::nvfp4_moe {
namespace {

namespace wmma = nvcuda::wmma;

constexpr float kDecodeScale = 128.0f;     // 2^7: what the decoded fp16 weights leave out
constexpr float kHalfMax = 65504.0f;       // the largest finite fp16
constexpr int kSubsteps = kTileK / kFrag;  // WMMA k-steps of 16 per K step
constexpr unsigned kAllSubsteps = (1u << kSubsteps) - 1;

// x within fp16's finite range, a NaN kept (fmaxf alone would turn it into -65504 and hide it).
__device__ __forceinline__ float clamp_to_half(float x) {
  return x != x ? x : fminf(fmaxf(x, -kHalfMax), kHalfMax);
}

// ---- FP4 decode

// Two e4m3 bytes (bits 0-7, 8-15) -> (s0, s1) x 2^7. The e4m3 exponent and mantissa placed in a
// binary16's bits 13-7 read as s x 2^-8, normals and subnormals alike; x 2^15 is exact.
__device__ __forceinline__ __half2 scales_to_half2(uint32_t two) {
  const uint32_t z = __byte_perm(two, 0u, 0x4140);  // byte 0 -> lane 0, byte 1 -> lane 1
  const uint32_t bits = ((z & 0x007f007fu) << 7) | ((z & 0x00800080u) << 8);
  return __hmul2(as_half2(bits), as_half2(0x78007800u));  // 2^15, 2^15
}

// A word whose lanes hold an e2m1 code in bits 15-12 and 31-28 -> the two values x 2^-14: the
// sign stays, the magnitude bits e1 e0 m move to bits 11-9 (exponent e, mantissa m; e = 0 is the
// subnormal m x 2^-15, i.e. 0.5 x 2^-14). Then x (scale x 2^7).
__device__ __forceinline__ uint32_t decode_pair(uint32_t y, __half2 scale) {
  const uint32_t bits = (y & 0x80008000u) | ((y >> 3) & 0x0e000e00u);
  return as_bits(__hmul2(as_half2(bits), scale));
}

// Eight codes (low nibble = lower k) -> eight fp16 weights x 2^-7, in k order. Byte i of q holds
// k = 2i (low nibble) and 2i+1; q << 4 puts k = 2i in the high nibble of its byte i.
__device__ __forceinline__ uint4 decode8(uint32_t q, __half2 scale) {
  const uint32_t q4 = q << 4;
  uint4 out;
  out.x = decode_pair(__byte_perm(q4, q, 0x4400), scale);
  out.y = decode_pair(__byte_perm(q4, q, 0x5511), scale);
  out.z = decode_pair(__byte_perm(q4, q, 0x6622), scale);
  out.w = decode_pair(__byte_perm(q4, q, 0x7733), scale);
  return out;
}

// 16 consecutive k of one weight row (8 payload bytes, one scale) into shared memory.
__device__ __forceinline__ void decode16(uint2 raw, uint32_t scale, uint4 *dst) {
  const __half2 s = __low2half2(scales_to_half2(scale));
  dst[0] = decode8(raw.x, s);
  dst[1] = decode8(raw.y, s);
}

// ---- Configuration

enum class Gemm { kGateUp, kDown };

template <Gemm kKind>
constexpr int kHalves = kKind == Gemm::kGateUp ? 2 : 1;  // W13: gate and up rows

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;
using WarpAcc = Acc[kWarpFragsM];

struct GemmSmem {
  static constexpr int kStageHalves = (kTileM + kTileN) * kLd;  // a step's A rows, then B rows
  alignas(32) __half stage[2][kStageHalves];  // the epilogue's per-warp fragments after the loop
  // The row's A row: its x row (gate/up) or activation row (down); x's or the tile's first past
  // the tile's rows.
  const uint16_t *row_ptr[kTileM];
  int32_t pair[kTileM];     // down: the row's pair, -1 past the tile's rows
  float row_scale[kTileM];  // down: router weight x scale_2 x 2^7
  // The table entry and the block's N tiles, read back where needed: no register holds them.
  int4 tile;
  int first_nt, end_nt;

  __device__ __half *a(int buf, int row, int col) { return stage[buf] + row * kLd + col; }
  __device__ __half *b(int buf, int row, int col) {
    return stage[buf] + (kTileM + row) * kLd + col;
  }
  // Epilogues: each warp's staged fragment in a free buffer; gate/up's up accumulators after
  // the fragments of buffer 0, into buffer 1 (both are free then).
  __device__ float *epilogue(int buf, int warp) {
    return reinterpret_cast<float *>(stage[buf]) + warp * kFrag * kFrag;
  }
  __device__ float *up(int warp_m, int column, int fm) {
    return epilogue(0, kThreads / 32) +
           ((warp_m * kWarpsN / 2 + column) * kWarpFragsM + fm) * kFrag * kFrag;
  }
};
static_assert(sizeof(GemmSmem) <= kV100SmemBytes, "one block per V100 SM");
static_assert(kThreads / 32 * kFrag * kFrag * 4 <= sizeof(GemmSmem::stage[0]),
              "a warp's fragment each in one buffer");
static_assert((kThreads / 32 + kTileM / kFrag * kWarpsN / 2) * kFrag * kFrag * 4 <=
                  sizeof(GemmSmem::stage),
              "gate/up: the fragments and the up accumulators in both buffers");

// ---- Where a warp and a thread stand in the tile

__device__ __forceinline__ int warp_m() { return threadIdx.x / 32 / kWarpsN; }
__device__ __forceinline__ int warp_n() { return threadIdx.x / 32 % kWarpsN; }
__device__ __forceinline__ int warp_row0() { return warp_m() * (kTileM / kWarpsM); }

// A pieces: piece i of this thread is 16 bytes of row (tid + i * kThreads) / 8; every piece of a
// thread has the same columns.
__device__ __forceinline__ int a_row(int i) { return (threadIdx.x + i * kThreads) / 8; }
__device__ __forceinline__ int a_col() { return threadIdx.x % 8 * 8; }
// B: this thread's row of the weight tile (0..159) and quarter of the K step (0..3): a warp
// reads 16 rows' two quarters of one half, 256 contiguous bytes of the prepared layout.
__device__ __forceinline__ int b_row() { return threadIdx.x % (kThreads / 2) / 2; }
__device__ __forceinline__ int b_quarter() {
  return threadIdx.x / (kThreads / 2) * 2 + threadIdx.x % 2;
}

// The weight row of row r of N tile nt, or -1 past I or H: W13 tile rows 0-79 are gate, 80-159
// up of the same columns.
template <Gemm kKind>
__device__ __forceinline__ int tile_weight_row(const Operand &b, int nt, int r) {
  constexpr int kGroup = kTileN / kHalves<kKind>;
  const int col = nt * kGroup + r % kGroup;
  return col < b.half_rows ? r / kGroup * b.half_rows + col : -1;
}

// Whether this warp's column of weight rows (the shared B rows warp_n() * 16 ..) of N tile nt
// holds weights: not past I or H.
template <Gemm kKind>
__device__ __forceinline__ bool warp_has_weights(const Operand &b, int nt) {
  return tile_weight_row<kKind>(b, nt, warp_n() * kFrag) >= 0;
}

// The output column of this warp's fragment in N tile nt (its first of 16): an I column
// (gate/up; gate and up warps of the same columns alike) or an H column.
template <Gemm kKind>
__device__ __forceinline__ int out_col(int nt) {
  if (kKind == Gemm::kGateUp) return nt * (kTileN / 2) + warp_n() % (kWarpsN / 2) * kFrag;
  return nt * kTileN + warp_n() * kFrag;
}

// Row fragments of this warp that hold some of the tile's `rows` rows (a prefix of its five).
__device__ __forceinline__ int held_frags_m(int rows) {
  const int mine = rows - warp_row0();
  return min(max((mine + kFrag - 1) / kFrag, 0), kWarpFragsM);
}

// The k-substeps of K step kt that hold weights: all of them but in a last step of K % 64.
__device__ __forceinline__ unsigned held_substeps(const Operand &b, int kt) {
  const unsigned rest = b.k - kt * kTileK;  // a multiple of 16
  return rest < kTileK ? (1u << rest / kFrag) - 1 : kAllSubsteps;
}

// ---- The block's walk: N tiles first_nt .. end_nt - 1 (n_per_block of them, fewer at the end
// of N), K steps within each, as one sequence of steps, so that the double buffer runs on from
// one N tile into the next. A step is (N tile, K step); the walk moves on with next_step.

struct Step {
  int nt, kt;
};

// The step `ahead` steps after `at` (no division: a walk's K steps number at least one). Gate/up
// walks one N tile: its steps past the last K step stay in it (and load nothing).
template <Gemm kKind>
__device__ __forceinline__ Step next_step(const Operand &b, Step at, int ahead) {
  at.kt += ahead;
  while (kKind == Gemm::kDown && at.kt >= b.k_tiles) at.kt -= b.k_tiles, ++at.nt;
  return at;
}

// The buffer of step `at`: the walk's steps before it, mod 2 (gate/up walks one N tile).
template <Gemm kKind>
__device__ __forceinline__ int step_buffer(const Operand &b, const GemmSmem &s, Step at) {
  return (at.kt + (kKind == Gemm::kDown ? (at.nt - s.first_nt) * b.k_tiles : 0)) & 1;
}

// Whether step `at` is one of the walk's.
template <Gemm kKind>
__device__ __forceinline__ bool in_walk(const Operand &b, const GemmSmem &s, Step at) {
  return kKind == Gemm::kGateUp ? at.kt < b.k_tiles : at.nt < s.end_nt;
}

// ---- Loads

// One step of this thread's loads, in registers until their buffer is free.
struct Staged {
  uint4 a[kAPieces];
  uint2 b;
  uint32_t scale;
  bool decode;  // the quarter row holds weights (not past I or H)
};

// This thread's quarter row of the block's first N tile at K step 0 (the scales follow from its
// address: Operand's comment). Its row in a later N tile lies kTileN / halves rows further, at a
// later K step step_bytes further: both maps are linear in the row and the step.
template <Gemm kKind>
__device__ const uint8_t *first_quarter(const Operand &b, const GemmSmem &s) {
  constexpr int kGroup = kTileN / kHalves<kKind>;
  const int n = b_row() / kGroup * b.half_rows + s.first_nt * kGroup + b_row() % kGroup;
  const int k = b_quarter() * kScaleBlock;
  return b.packed + weight_offset(b, s.tile.x, n, k / kHalfK * kHalfK).packed + k % kHalfK / 2;
}

// Step `at` of the walk: its A pieces (zeros past the tile's rows or K) and B quarter (zeros
// past K, none past I or H); a step past the walk loads nothing.
template <Gemm kKind>
__device__ void load_step(const Operand &b, const GemmSmem &s, const uint8_t *first, Step at,
                          Staged &st) {
  const bool live = in_walk<kKind>(b, s, at);
  const bool a_in_k = live && at.kt * kTileK + a_col() < b.k;
#pragma unroll
  for (int p = 0; p < kAPieces; ++p) {
    st.a[p] = make_uint4(0, 0, 0, 0);
    if (a_row(p) < s.tile.z && a_in_k) {
      st.a[p] =
          __ldg(reinterpret_cast<const uint4 *>(s.row_ptr[a_row(p)] + a_col() + at.kt * kTileK));
    }
  }
  constexpr int kGroup = kTileN / kHalves<kKind>;
  st.decode = live && tile_weight_row<kKind>(b, at.nt, b_row()) >= 0;
  st.b = make_uint2(0, 0);
  st.scale = 0;
  if (st.decode && at.kt * kTileK + b_quarter() * kScaleBlock < b.k) {
    const uint8_t *q =
        first + (int64_t)(at.nt - s.first_nt) * kGroup * b.row_bytes + at.kt * b.step_bytes;
    st.b = __ldg(reinterpret_cast<const uint2 *>(q));
    st.scale = __ldg(b.scales + ((q - b.packed) >> 3));
  }
}

// The staged step into buffer `buf`. A quarter past I or H is not decoded: no MMA reads it.
__device__ void store_step(const Staged &st, int buf, GemmSmem &s) {
#pragma unroll
  for (int p = 0; p < kAPieces; ++p) {
    *reinterpret_cast<uint4 *>(s.a(buf, a_row(p), a_col())) = st.a[p];
  }
  if (st.decode) {
    decode16(st.b, st.scale, reinterpret_cast<uint4 *>(s.b(buf, b_row(), b_quarter() * kFrag)));
  }
}

// ---- Main loop

// The MMAs of k-substep ks of buffer `buf`: every row fragment (kChecked false), or the first
// frags_m. One A fragment at a time beside the one B fragment.
template <bool kChecked>
__device__ __forceinline__ void mma_substep(GemmSmem &s, int buf, int ks, WarpAcc &acc,
                                            int frags_m) {
  FragB bf;
  wmma::load_matrix_sync(bf, s.b(buf, warp_n() * kFrag, ks * kFrag), kLd);
#pragma unroll
  for (int fm = 0; fm < kWarpFragsM; ++fm) {
    if (kChecked && fm >= frags_m) continue;
    FragA a;
    wmma::load_matrix_sync(a, s.a(buf, warp_row0() + fm * kFrag, ks * kFrag), kLd);
    wmma::mma_sync(acc[fm], a, bf, acc[fm]);
  }
}

// Step `at` on buffer `buf`, the warp's MMAs only where its column holds weights. Between its
// first and second k-substep the staged next step goes to the other buffer and the loads of the
// step after it are issued.
template <Gemm kKind, bool kChecked>
__device__ __forceinline__ void run_step(const Operand &b, const uint8_t *first, Staged &staged,
                                         GemmSmem &s, Step at, int buf, WarpAcc &acc,
                                         bool has_weights) {
#pragma unroll
  for (int ks = 0; ks < kSubsteps; ++ks) {
    if (has_weights && (!kChecked || (held_substeps(b, at.kt) >> ks & 1))) {
      mma_substep<kChecked>(s, buf, ks, acc, held_frags_m(s.tile.z));
    }
    if (ks == 0) {
      store_step(staged, buf ^ 1, s);
      load_step<kKind>(b, s, first, next_step<kKind>(b, at, 2), staged);
    }
  }
}

// ---- Epilogues

// Each lane of a warp takes 8 consecutive columns of one row of a staged 16 x 16 fragment.
__device__ __forceinline__ int stage_row() { return (threadIdx.x & 31) / 2; }
__device__ __forceinline__ int stage_col() { return (threadIdx.x & 1) * 8; }

// This lane's eight values of a staged fragment, times `scale`, through `f`, to fp16: four at a
// time (one 8-byte store each), which keeps the epilogue within the main loop's registers.
template <class F>
__device__ __forceinline__ void store_staged(uint16_t *dst, const float *stage, float scale, F f) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float4 v =
        *reinterpret_cast<const float4 *>(stage + stage_row() * kFrag + stage_col() + 4 * half);
    reinterpret_cast<uint2 *>(dst)[half] = make_uint2(pack_half2(f(v.x * scale), f(v.y * scale)),
                                                      pack_half2(f(v.z * scale), f(v.w * scale)));
  }
}

// Gate/up, after the block's one N tile (both buffers free): the up warps leave their
// accumulators in shared memory; the gate warp of the same columns and rows takes them (same
// layout: both stored and loaded as accumulator fragments).
__device__ void store_activation(const Params &p, const Workspace &w, const Operand &b, GemmSmem &s,
                                 WarpAcc &acc, int nt, bool has_weights) {
  const bool gate = warp_n() < kWarpsN / 2;
  const int column = warp_n() % (kWarpsN / 2), frags_m = held_frags_m(s.tile.z);
#pragma unroll
  for (int fm = 0; fm < kWarpFragsM; ++fm) {
    if (!gate && has_weights && fm < frags_m) {
      wmma::store_matrix_sync(s.up(warp_m(), column, fm), acc[fm], kFrag, wmma::mem_row_major);
    }
  }
  __syncthreads();
  if (!gate || !has_weights) return;
  const int4 tile = s.tile;
  const float gate_scale = b.scale_2[(int64_t)tile.x * b.scale_2_stride] * kDecodeScale;
  const float up_scale = b.scale_2[(int64_t)tile.x * b.scale_2_stride + 1] * kDecodeScale;
  float *stage = s.epilogue(0, threadIdx.x / 32);
  const int col = out_col<Gemm::kGateUp>(nt) + stage_col();
#pragma unroll
  for (int fm = 0; fm < kWarpFragsM; ++fm) {
    if (fm >= frags_m) continue;  // not break: the loop stays unrolled, acc in registers
    Acc up;
    wmma::load_matrix_sync(up, s.up(warp_m(), column, fm), kFrag, wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < up.num_elements; ++i) {
      const float g = acc[fm].x[i] * gate_scale;
      // silu(g) = g / (1 + e^-g); a far negative g gives e^-g = inf and the quotient 0.
      up.x[i] = __fdividef(g, 1.0f + __expf(-g)) * (up.x[i] * up_scale);
    }
    wmma::store_matrix_sync(stage, up, kFrag, wmma::mem_row_major);
    __syncwarp();
    const int row = warp_row0() + fm * kFrag + stage_row();
    if (row < tile.z) {
      store_staged(w.act + (int64_t)(tile.y + row) * p.inter + col, stage, 1.0f,
                   [](float v) { return v; });
    }
    __syncwarp();
  }
}

// Down, N tile nt into the partials, staged through buffer `buf` (free after the tile's last
// step).
__device__ void store_partials(const Params &p, const Workspace &w, GemmSmem &s, WarpAcc &acc,
                               int nt, int buf) {
  float *stage = s.epilogue(buf, threadIdx.x / 32);
  const int rows = s.tile.z, frags_m = held_frags_m(rows);
  const int col = out_col<Gemm::kDown>(nt) + stage_col();
#pragma unroll
  for (int fm = 0; fm < kWarpFragsM; ++fm) {
    if (fm >= frags_m) continue;
    wmma::store_matrix_sync(stage, acc[fm], kFrag, wmma::mem_row_major);
    __syncwarp();
    const int row = warp_row0() + fm * kFrag + stage_row();
    if (row < rows) {
      store_staged(reinterpret_cast<uint16_t *>(w.partial) + (int64_t)s.pair[row] * p.hidden + col,
                   stage, s.row_scale[row], clamp_to_half);
    }
    __syncwarp();
  }
}

// Prologue: what each row of the tile refers to: its A row, and (down) its pair and router
// weight.
template <Gemm kKind>
__device__ void load_rows(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                          const int4 &tile, int n_per_block, GemmSmem &s) {
  const int row = threadIdx.x;
  if (row == 0) {
    s.tile = tile;
    s.first_nt = blockIdx.x * n_per_block;
    s.end_nt = min(s.first_nt + n_per_block, b.n_tiles);
  }
  if (row >= kTileM) return;
  const int pair = row < tile.z ? w.sorted[tile.y + row] : -1;
  const int t = pair / p.topk, j = pair - t * p.topk;
  if (kKind == Gemm::kGateUp) {
    s.row_ptr[row] = p.x + (pair < 0 ? 0 : (int64_t)(pass.token0 + t) * p.x_row_stride);
    return;
  }
  s.row_ptr[row] = w.act + (int64_t)(tile.y + (pair < 0 ? 0 : row)) * p.inter;
  s.pair[row] = pair;
  float scale = 0.0f;
  if (pair >= 0) {
    const float weight = p.topk_weights[(int64_t)(pass.token0 + t) * p.topk_weights_row_stride + j];
    scale = weight * b.scale_2[(int64_t)tile.x * b.scale_2_stride] * kDecodeScale;
  }
  s.row_scale[row] = scale;
}

// The K steps of N tile nt into `acc` (zeroed here: once a tile, where a test of the K step
// inside the walk cost 40 selects a step). Whether this warp's column of the tile holds weights.
template <Gemm kKind>
__device__ __forceinline__ bool walk_n_tile(const Operand &b, const uint8_t *first, Staged &staged,
                                            GemmSmem &s, int nt, bool whole, WarpAcc &acc) {
#pragma unroll
  for (int fm = 0; fm < kWarpFragsM; ++fm) wmma::fill_fragment(acc[fm], 0.0f);
  const bool has_weights = warp_has_weights<kKind>(b, nt);
  for (int kt = 0; kt < b.k_tiles; ++kt) {
    const Step at{nt, kt};
    const int buf = step_buffer<kKind>(b, s, at);
    if (whole && held_substeps(b, kt) == kAllSubsteps) {  // no checks: one block to schedule
      run_step<kKind, false>(b, first, staged, s, at, buf, acc, has_weights);
    } else {
      run_step<kKind, true>(b, first, staged, s, at, buf, acc, has_weights);
    }
    __syncthreads();  // this buffer is rewritten two steps on, or stages the epilogue
  }
  return has_weights;
}

// One M tile (the table entry `tile`: expert, first sorted position, rows) x the block's N tiles.
template <Gemm kKind>
__device__ void gemm_tile(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                          const int4 &tile, int n_per_block, GemmSmem &s) {
  load_rows<kKind>(p, pass, w, b, tile, n_per_block, s);
  __syncthreads();
  // Prologue: the first step in buffer 0, the second in registers.
  const Step start{s.first_nt, 0};
  const uint8_t *first = first_quarter<kKind>(b, s);
  Staged staged;
  load_step<kKind>(b, s, first, start, staged);
  store_step(staged, 0, s);
  load_step<kKind>(b, s, first, next_step<kKind>(b, start, 1), staged);
  __syncthreads();
  const bool whole = held_frags_m(tile.z) == kWarpFragsM;
  WarpAcc acc;
  if constexpr (kKind == Gemm::kGateUp) {  // one N tile, then its epilogue (both buffers free)
    const bool has_weights = walk_n_tile<kKind>(b, first, staged, s, s.first_nt, whole, acc);
    store_activation(p, w, b, s, acc, s.first_nt, has_weights);
  } else {
    for (int nt = s.first_nt; nt < s.end_nt; ++nt) {
      if (walk_n_tile<kKind>(b, first, staged, s, nt, whole, acc)) {
        store_partials(p, w, s, acc, nt, step_buffer<kKind>(b, s, {nt, b.k_tiles - 1}));
      }
      __syncthreads();  // the next step stages into the buffer the epilogue used
    }
  }
}

template <Gemm kKind>
__global__ void __launch_bounds__(kThreads, 1)
    nvfp4_moe_gemm_wmma(const Params p, const Pass pass, const Workspace w, const Operand b,
                        int n_per_block) {
  extern __shared__ __align__(32) unsigned char smem[];
  GemmSmem &s = *reinterpret_cast<GemmSmem *>(smem);
  const int4 tile = w.tiles[blockIdx.y];
  if (tile.x < 0) return;  // past the table's last tile
  gemm_tile<kKind>(p, pass, w, b, tile, n_per_block, s);
}

// N tiles a block walks: enough K steps for its prologue's loads and its epilogues to hide behind
// MMAs (the down GEMM at TP4 has 3 K steps an N tile: 4 tiles a block, 12 steps), at most 4, so
// that a few M tiles still fill the GPU. Gate/up: one (its epilogue takes both buffers).
template <Gemm kKind>
int n_tiles_per_block(const Operand &b) {
  constexpr int kMinSteps = 12, kMostTiles = 4;
  if (kKind == Gemm::kGateUp) return 1;
  return std::min({kMostTiles, (kMinSteps + b.k_tiles - 1) / b.k_tiles, b.n_tiles});
}

template <Gemm kKind>
void launch_gemm(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                 cudaStream_t stream) {
  if (pass.table_size == 0) return;
  auto kernel = nvfp4_moe_gemm_wmma<kKind>;
  allow_dynamic_smem(kernel, sizeof(GemmSmem));
  prefer_max_carveout(kernel);
  const int per_block = n_tiles_per_block<kKind>(b);
  const dim3 grid((b.n_tiles + per_block - 1) / per_block, pass.table_size);
  kernel<<<grid, kThreads, sizeof(GemmSmem), stream>>>(p, pass, w, b, per_block);
}

}  // namespace

void launch_gate_up(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                    cudaStream_t stream) {
  launch_gemm<Gemm::kGateUp>(p, pass, w, b, stream);
}

void launch_down(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                 cudaStream_t stream) {
  launch_gemm<Gemm::kDown>(p, pass, w, b, stream);
}

}  // namespace sm70ops::nvfp4_moe

extern "C" uint32_t sm70_nvfp4_moe_smem_bytes(void) { return sizeof(sm70ops::nvfp4_moe::GemmSmem); }
