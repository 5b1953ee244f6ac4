// The grouped W4A16 GEMMs on tensor cores. One block = one M tile (128, 64 or 32 rows, as the
// entry says) of one expert's sorted pairs (blockIdx.y indexes one of route.cu's two tile
// tables from its first entry; entries past its last tile exit) x one N tile of 256 weight rows
// (blockIdx.x); at short K a 128-row tile runs as two blocks of the small-tile kernel
// (blockIdx.z: its first 64 rows, the rest). Per K step of 64:
//   - A: the tile's rows, gathered x rows (gate/up) or contiguous activation rows (down), fp16;
//   - B: the weight tile's FP4 payload and e4m3 scales, decoded to fp16 into shared memory;
//   - 4 WMMA k-steps per warp on a (M/2) x 64 warp tile, fp32 accumulation.
// The next step's global loads are issued into registers before this step's MMAs.
// H and I need only be multiples of 16 (the scale block, the MMA's k and n): a last K step runs
// the k-substeps of 16 that hold weights, a last N tile the fragments that hold columns
// (WarpShare), and nothing past K or N is loaded or multiplied.
//   gate/up epilogue: a = silu(gate * s2_gate) * (up * s2_up), fp16, into the workspace;
//   down epilogue:    router weight * s2 * acc, fp16 (clamped to its finite range: two
//                     opposite overflowing terms must not sum to NaN; a NaN stays one), into
//                     the pair's row of the partials.
//
// Decode: e2m1 x e4m3 is exact in fp16 but can reach 6 x 448 = 2688 and fall to 2^-10, so the
// weights go to the MMA as w x 2^-7 (every such value is an exact binary16) and the epilogue
// multiplies by scale_2 x 2^7 in fp32.
#include <cuda_fp16.h>
#include <mma.h>

#include "kernels/common/smem.cuh"
#include "kernels/nvfp4_moe/nvfp4_moe_internal.cuh"

namespace sm70ops::nvfp4_moe {
namespace {

namespace wmma = nvcuda::wmma;

constexpr float kDecodeScale = 128.0f;     // 2^7: what the decoded fp16 weights leave out
constexpr float kHalfMax = 65504.0f;       // the largest finite fp16
constexpr int kSubsteps = kTileK / kFrag;  // WMMA k-steps of 16 per K step
constexpr unsigned kAllSubsteps = (1u << kSubsteps) - 1;
constexpr unsigned kAllFrags = (1u << kFragsN) - 1;

// x within fp16's finite range, a NaN kept (fmaxf alone would turn it into -65504 and hide it).
__device__ __forceinline__ float clamp_to_half(float x) {
  return x != x ? x : fminf(fmaxf(x, -kHalfMax), kHalfMax);
}
// Big tiles get their own kernel only where the K loop is long; at TP4's down GEMM (K 128, two
// steps) a lone block per SM cannot hide its prologue and epilogue behind another block's MMAs,
// so the small-tile kernel takes them, as a 64-row tile and the rest in two blocks (H200, T 8192:
// 3% faster). 8 steps is TP1's down GEMM (K 512), where big tiles measured as fast or faster.
constexpr int kBigTileMinKTiles = 8;

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

// 32 consecutive k of one weight row (16 payload bytes, two scales) into shared memory.
__device__ __forceinline__ void decode32(uint4 raw, uint32_t scales, uint4 *dst) {
  const __half2 s = scales_to_half2(scales);
  const __half2 lo = __low2half2(s), hi = __high2half2(s);
  dst[0] = decode8(raw.x, lo);
  dst[1] = decode8(raw.y, lo);
  dst[2] = decode8(raw.z, hi);
  dst[3] = decode8(raw.w, hi);
}

// ---- Configuration

enum class Gemm { kGateUp, kDown };

template <Gemm kKind, int kTileM>
struct Config {
  static constexpr int kHalves = kKind == Gemm::kGateUp ? 2 : 1;
  static constexpr int kWarpM = kTileM / kWarpsM;  // 16, 32 or 64 rows per warp
  static constexpr int kFragsM = kWarpM / kFrag;
  static constexpr int kAChunks = kTileM * kTileK / 8 / kThreads;  // 16-byte A loads per thread
  // K steps of 16 unrolled in the MMA loop, so that the next step's fragment loads overlap this
  // step's MMAs: all four where the registers allow it, none in the 64-row tile, which would
  // spill at two blocks per SM (the gain, 5-7%, was measured on an H200 only).
  static constexpr int kUnrollK = kTileM == kWideTileM ? 1 : kTileK / kFrag;
  // Whether the tile runs partial N tiles (WarpShare). The 64-row tile, at its register limit,
  // does not: small_entry runs it there as two 32-row tiles.
  static constexpr bool kShares = kTileM != kWideTileM;
  static_assert(kFragsM >= 1 && kAChunks >= 1, "M tile");
};

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, __half, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, __half, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// The shared memory of a kernel whose tiles have at most kRows rows (the small-tile kernel's
// layout is sized for the wide tile: a block picks its path per tile).
template <int kRows>
struct GemmSmem {
  static constexpr int kTileBytes = (kRows + kTileN) * kLd * 2;
  static constexpr int kStageBytes = kWarpsM * kWarpsN * kFrag * kFrag * 4;
  // The A and B tiles during the main loop, each warp's epilogue fragment after it.
  alignas(32) unsigned char buf[kTileBytes > kStageBytes ? kTileBytes : kStageBytes];
  int4 tile;                      // the tile table entry, kept here for the epilogue
  uint32_t share[kThreads / 32];  // each warp's WarpShare, read at every K step
  union {
    const uint16_t *x_row[kRows];  // gate/up: the row's x row (x's first past the tile's rows)
    int32_t pair[kRows];           // down: the row's pair, -1 past the tile's rows
  };
  float row_scale[kRows];  // down: router weight x scale_2 x 2^7

  __device__ __half *a(int row, int col) {
    return reinterpret_cast<__half *>(buf) + row * kLd + col;
  }
  __device__ __half *b(int row, int col) {
    return reinterpret_cast<__half *>(buf) + (kRows + row) * kLd + col;
  }
  __device__ float *stage(int warp) {
    return reinterpret_cast<float *>(buf) + warp * kFrag * kFrag;
  }
  // Split K (WarpShare): a warp's partial sums of one M fragment row, after the main loop.
  __device__ float *partials(int warp) {
    return reinterpret_cast<float *>(buf) + warp * kFragsN * kFrag * kFrag;
  }
  static_assert(kThreads / 32 * kFragsN * kFrag * kFrag * 4 <= sizeof(buf), "split-K partials");
};
static_assert(2 * sizeof(GemmSmem<kWideTileM>) <= kV100SmemBytes,
              "two small-tile blocks per V100 SM");
static_assert(sizeof(GemmSmem<kBigTileM>) <= kV100SmemBytes, "one big-tile block per V100 SM");

// ---- How the warps share the block's N tile

// The k-substeps of K step kt that hold weights: all of them but in a last step of K % 64.
__device__ __forceinline__ unsigned held_substeps(const Operand &b, int kt) {
  const unsigned rest = b.k - kt * kTileK;  // a multiple of 16
  return rest < kTileK ? (1u << rest / kFrag) - 1 : kAllSubsteps;
}

// A warp's share of the block's N tile (tiling.h, n_tile_share), packed into one word that the
// main loop reads back from shared memory at each step.
class WarpShare {
 public:
  // Warp column wn's share of N tile blockIdx.x.
  template <int kHalves>
  __device__ static WarpShare of(const Operand &b, int wn) {
    constexpr int kGroup = kTileN / kHalves;  // columns of an N tile
    const NTileShare s =
        n_tile_share(min(kGroup, b.half_rows - (int)blockIdx.x * kGroup), wn, kHalves);
    return WarpShare(s.substeps | s.frags << 4 | s.group << 8 | s.split << 12);
  }
  // A full N tile's share.
  __device__ static WarpShare whole(int wn) {
    return WarpShare(kAllSubsteps | kAllFrags << 4 | wn << 8 | 1 << 12);
  }

  __device__ explicit WarpShare(uint32_t bits) : bits_(bits) {}
  __device__ uint32_t bits() const { return bits_; }
  __device__ int column() const { return bits_ >> 8 & 0xf; }
  __device__ int split() const { return bits_ >> 12; }
  __device__ unsigned frags() const { return bits_ >> 4 & kAllFrags; }
  __device__ unsigned substeps() const { return bits_ & kAllSubsteps; }

 private:
  uint32_t bits_;  // bits 0-3 substeps, 4-7 fragments, 8-11 column group, 12- split
};
static_assert(kShareColumns == kWarpsN && kShareFrags == kFragsN && kShareSubsteps == kSubsteps &&
                  kWarpN == kShareFrags * kFrag,
              "tiling.h's N tile share describes this warp grid");

// Whether N tile blockIdx.x holds a whole tile of weight columns.
template <int kHalves>
__device__ __forceinline__ bool whole_n_tile(const Operand &b) {
  return b.half_rows - (int)blockIdx.x * (kTileN / kHalves) >= kTileN / kHalves;
}

// ---- Main loop

// One K step of this thread's loads, held in registers until the shared tiles are free. Ragged
// loads keep their two scale bytes apart (combining them would wait for the loads at once).
template <int kAChunks, bool kRagged>
struct Staged {
  uint4 a[kAChunks];
  uint4 b[2];
  uint32_t scales[kRagged ? 4 : 2];

  __device__ uint32_t scale_pair(int q) const {
    return kRagged ? __byte_perm(scales[2 * q], scales[2 * q + 1], 0x0040) : scales[q];
  }
};

// A piece i of this thread: 16 bytes of row (tid + i * kThreads) / 8; every piece of a thread
// has the same columns.
__device__ __forceinline__ int a_row(int i) { return (threadIdx.x + i * kThreads) / 8; }
__device__ __forceinline__ int a_col() { return threadIdx.x % 8 * 8; }
// B pieces: rows tid / 2 and tid / 2 + 128, row half tid % 2.
__device__ __forceinline__ int b_row(int q) { return threadIdx.x / 2 + q * (kTileN / 2); }
__device__ __forceinline__ int b_half() { return threadIdx.x & 1; }

// The weight row of row r (0..255) of N tile blockIdx.x, or -1 past I or H: W13 tile rows 0-127
// are gate, 128-255 up of the same columns.
template <int kHalves>
__device__ __forceinline__ int tile_row_weight(const Operand &b, int r) {
  constexpr int kGroup = kTileN / kHalves;
  const int col = blockIdx.x * kGroup + r % kGroup;
  return col < b.half_rows ? r / kGroup * b.half_rows + col : -1;
}

// Where a thread's loads come from. Row halves past K (a last K step of 16, 32 or 48 k) read
// as zeros. The 64-row tile has no register to spare at two blocks per SM (the big and 32-row
// tiles have): it keeps no A address but reads its rows' x addresses (gate/up) or the tile's
// first row (down) back from shared memory at each step. Every tile keeps one weight address;
// the scales' follows from it (Operand's comment).
// kRagged (Operand::ragged): a row half is read as two 8-byte quarters and two scale bytes, the
// second zero past K, and gathered x pieces past H as zeros. Else a row half is one 16-byte load
// and x rows are read whole (H % 64 == 0).
template <Gemm kKind, int kTileM, bool kRagged>
struct Loader {
  using C = Config<kKind, kTileM>;
  using Stage = Staged<C::kAChunks, kRagged>;
  static constexpr bool kGathered = kKind == Gemm::kGateUp;
  static constexpr bool kHoldsA = kTileM != kWideTileM;
  // Held A addresses at step 0: gathered x rows (gate/up) each have one; the activation rows of
  // the down GEMM are contiguous, piece i sits kThreads / 8 rows below piece i - 1.
  const uint4 *a[kGathered ? C::kAChunks : 1];
  bool a_valid[C::kAChunks];  // the piece's row is one of the tile's rows
  const uint8_t *packed;      // weight row r, row half h at step 0 (row r + 128: Operand)
  // Rows r and r + 128 hold weights (not past I or H); for W13 they are gate and up of one column.
  bool row_valid[C::kHalves == 2 ? 1 : 2];

  template <class Smem>
  __device__ void init(const Params &p, const Workspace &w, const Operand &b, Smem &s) {
    if constexpr (kHoldsA) {
#pragma unroll
      for (int i = 0; i < C::kAChunks; ++i) {
        const uint4 *piece = a_row_start(p, w, s, i, a_valid[i]);
        if (kGathered || i == 0) a[i] = piece;
      }
    }
    const int n = tile_row_weight<C::kHalves>(b, b_row(0));
    packed = b.packed + weight_offset(b, s.tile.x, max(n, 0), b_half() * kHalfK).packed;
    row_valid[0] = n >= 0;
    if constexpr (C::kHalves == 1) row_valid[1] = tile_row_weight<1>(b, b_row(1)) >= 0;
  }

  // The 64-row tile runs whole N tiles only (small_entry).
  __device__ bool valid(int q) const { return !C::kShares || row_valid[C::kHalves == 2 ? 0 : q]; }

  // Piece i at step 0, and whether its row is one of the tile's.
  template <class Smem>
  __device__ const uint4 *a_row_start(const Params &p, const Workspace &w, Smem &s, int i,
                                      bool &in_tile) const {
    const int row = a_row(i);
    in_tile = row < s.tile.z;
    if (kGathered) return reinterpret_cast<const uint4 *>(s.x_row[row] + a_col());
    return reinterpret_cast<const uint4 *>(w.act + (int64_t)(s.tile.y + row) * p.inter + a_col());
  }

  template <class Smem>
  __device__ void load_a(const Params &p, const Workspace &w, const Operand &b, Smem &s, int kt,
                         Stage &st) const {
    const bool in_k = (kGathered && !kRagged) || kt * kTileK + a_col() < b.k;
#pragma unroll
    for (int i = 0; i < C::kAChunks; ++i) {
      bool in_tile;
      const uint4 *piece;
      if constexpr (kHoldsA) {
        in_tile = a_valid[i];
        piece = kGathered ? a[i] : a[0] + (int64_t)i * (kThreads / 8) * (p.inter / 8);
      } else {
        piece = a_row_start(p, w, s, i, in_tile);
      }
      st.a[i] = make_uint4(0, 0, 0, 0);
      if (in_tile && in_k) st.a[i] = __ldg(piece + kt * (kTileK / 8));
    }
  }

  __device__ void load_b(const Operand &b, int kt, Stage &st) const {
    const int k0 = kt * kTileK + b_half() * kHalfK;  // this thread's first k
    const bool in_k = k0 < b.k;
    const bool second_quarter = k0 + kScaleBlock < b.k;
    const uint8_t *row_packed = packed + kt * b.step_bytes;
    const uint8_t *row_scales = b.scales + ((row_packed - b.packed) >> 3);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      st.b[q] = make_uint4(0, 0, 0, 0);
      const uint8_t *pq = row_packed + q * b.second_bytes;
      const uint8_t *sq = row_scales + q * b.scale_second_bytes;
      if (kRagged) {
        st.scales[2 * q] = st.scales[2 * q + 1] = 0;
        if (!valid(q) || !in_k) continue;
        const uint2 lo = __ldg(reinterpret_cast<const uint2 *>(pq));
        uint2 hi = make_uint2(0, 0);
        st.scales[2 * q] = __ldg(sq);
        if (second_quarter) {
          hi = __ldg(reinterpret_cast<const uint2 *>(pq + 8));
          st.scales[2 * q + 1] = __ldg(sq + 1);
        }
        st.b[q] = make_uint4(lo.x, lo.y, hi.x, hi.y);
      } else {
        st.scales[q] = 0;
        if (!valid(q) || !in_k) continue;
        st.b[q] = __ldg(reinterpret_cast<const uint4 *>(pq));
        st.scales[q] = __ldg(reinterpret_cast<const unsigned short *>(sq));
      }
    }
  }
};

// Rows past I or H are not decoded: no MMA reads them (nor the zeros of a row half past K).
template <class Loader, class Smem>
__device__ void store_stage(const Loader &l, const typename Loader::Stage &st, Smem &s) {
#pragma unroll
  for (int i = 0; i < Loader::C::kAChunks; ++i) {
    *reinterpret_cast<uint4 *>(s.a(a_row(i), a_col())) = st.a[i];
  }
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    if (l.valid(q)) {
      decode32(st.b[q], st.scale_pair(q),
               reinterpret_cast<uint4 *>(s.b(b_row(q), b_half() * kHalfK)));
    }
  }
}

// Shared B row of warp column `column`'s fragment f. Gate/up: fragments 0-1 gate, 2-3 the same
// columns of up (tile rows 128..255).
template <Gemm kKind>
__device__ __forceinline__ int b_frag_row(int column, int f) {
  if (kKind == Gemm::kGateUp) {
    return (f / 2) * (kTileN / 2) + column * (kWarpN / 2) + (f % 2) * kFrag;
  }
  return column * kWarpN + f * kFrag;
}

// The MMAs of one k-substep at k = ks on the fragments in `frags`.
template <Gemm kKind, int kTileM, class Smem>
__device__ __forceinline__ void mma_substep(Smem &s,
                                            Acc (&acc)[Config<kKind, kTileM>::kFragsM][kFragsN],
                                            int column, int ks, unsigned frags) {
  using C = Config<kKind, kTileM>;
  const int wm = threadIdx.x / 32 / kWarpsN;
  FragA a[C::kFragsM];
#pragma unroll
  for (int fm = 0; fm < C::kFragsM; ++fm) {
    wmma::load_matrix_sync(a[fm], s.a(wm * C::kWarpM + fm * kFrag, ks), kLd);
  }
#pragma unroll
  for (int fn = 0; fn < kFragsN; ++fn) {
    if (!(frags >> fn & 1)) continue;
    FragB b;
    wmma::load_matrix_sync(b, s.b(b_frag_row<kKind>(column, fn), ks), kLd);
#pragma unroll
    for (int fm = 0; fm < C::kFragsM; ++fm) wmma::mma_sync(acc[fm][fn], a[fm], b, acc[fm][fn]);
  }
}

// One K step's MMAs of this warp: the k-substeps and fragments its share names. Where the loop
// is unrolled, a step of every substep and fragment (all but a last N tile and K step) runs a
// copy of its own without the checks, so that its loads and MMAs schedule as one block. The
// 64-row tile (whole N tiles only: its substeps are a prefix) runs its rolled loop to a bound.
template <Gemm kKind, int kTileM, class Smem>
__device__ void mma_tile(Smem &s, Acc (&acc)[Config<kKind, kTileM>::kFragsM][kFragsN], int column,
                         unsigned substeps, unsigned frags) {
  using C = Config<kKind, kTileM>;
  if constexpr (!C::kShares) {
    const int end = __popc(substeps) * kFrag;
#pragma unroll C::kUnrollK
    for (int ks = 0; ks < end; ks += kFrag) {
      mma_substep<kKind, kTileM>(s, acc, column, ks, kAllFrags);
    }
    return;
  }
  if (substeps == kAllSubsteps && frags == kAllFrags) {
#pragma unroll C::kUnrollK
    for (int ks = 0; ks < kTileK; ks += kFrag) {
      mma_substep<kKind, kTileM>(s, acc, column, ks, kAllFrags);
    }
    return;
  }
#pragma unroll C::kUnrollK
  for (int i = 0; i < kSubsteps; ++i) {
    if (substeps >> i & 1) mma_substep<kKind, kTileM>(s, acc, column, i * kFrag, frags);
  }
}

// ---- Epilogues

// Each lane of a warp takes 8 consecutive columns of one row of the staged 16 x 16 fragment.
__device__ __forceinline__ int stage_row() { return (threadIdx.x & 31) / 2; }
__device__ __forceinline__ int stage_col() { return (threadIdx.x & 1) * 8; }

// Split K (WarpShare): the warps of one column hold partial sums of the same fragments. The warp
// whose column it is adds the others' through shared memory, an M fragment row at a time, in
// the same order on every run; it alone runs the epilogue.
template <int kFragsM, class Smem>
__device__ void reduce_split_k(Smem &s, Acc (&acc)[kFragsM][kFragsN], const WarpShare &share) {
  const int warp = threadIdx.x / 32;
  const bool leads = warp % kWarpsN == share.column();
  const int step = kWarpsN / share.split();  // from one warp of the column to the next
  const unsigned frags = share.frags();
#pragma unroll
  for (int fm = 0; fm < kFragsM; ++fm) {
#pragma unroll
    for (int fn = 0; fn < kFragsN; ++fn) {
      if (frags >> fn & 1) {
        wmma::store_matrix_sync(s.partials(warp) + fn * kFrag * kFrag, acc[fm][fn], kFrag,
                                wmma::mem_row_major);
      }
    }
    __syncthreads();
    for (int part = 1; leads && part < share.split(); ++part) {
      const float *theirs = s.partials(warp + part * step);
#pragma unroll
      for (int fn = 0; fn < kFragsN; ++fn) {
        if (!(frags >> fn & 1)) continue;
        Acc other;
        wmma::load_matrix_sync(other, theirs + fn * kFrag * kFrag, kFrag, wmma::mem_row_major);
#pragma unroll
        for (int i = 0; i < other.num_elements; ++i) acc[fm][fn].x[i] += other.x[i];
      }
    }
    __syncthreads();
  }
}

template <int kFragsM, class Smem>
__device__ void store_activation(const Params &p, const Workspace &w, const Operand &b,
                                 const int4 &tile, Smem &s, Acc (&acc)[kFragsM][kFragsN],
                                 unsigned frags) {
  const int warp = threadIdx.x / 32, wm = warp / kWarpsN, wn = warp % kWarpsN;
  const float gate_scale = b.scale_2[(int64_t)tile.x * b.scale_2_stride] * kDecodeScale;
  const float up_scale = b.scale_2[(int64_t)tile.x * b.scale_2_stride + 1] * kDecodeScale;
  float *stage = s.stage(warp);
#pragma unroll
  for (int fm = 0; fm < kFragsM; ++fm) {
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      if (!(frags >> f & 1)) continue;
      Acc &gate = acc[fm][f];
      const Acc &up = acc[fm][f + 2];  // same columns, same element layout
#pragma unroll
      for (int i = 0; i < gate.num_elements; ++i) {
        const float g = gate.x[i] * gate_scale;
        // silu(g) = g / (1 + e^-g); a far negative g gives e^-g = inf and the quotient 0.
        gate.x[i] = __fdividef(g, 1.0f + __expf(-g)) * (up.x[i] * up_scale);
      }
      wmma::store_matrix_sync(stage, gate, kFrag, wmma::mem_row_major);
      __syncwarp();
      const int row = wm * (kFragsM * kFrag) + fm * kFrag + stage_row();
      const int col = blockIdx.x * (kTileN / 2) + wn * (kWarpN / 2) + f * kFrag + stage_col();
      if (row < tile.z && col < p.inter) {
        const float4 lo =
            *reinterpret_cast<const float4 *>(stage + stage_row() * kFrag + stage_col());
        const float4 hi =
            *reinterpret_cast<const float4 *>(stage + stage_row() * kFrag + stage_col() + 4);
        const uint4 out = make_uint4(pack_half2(lo.x, lo.y), pack_half2(lo.z, lo.w),
                                     pack_half2(hi.x, hi.y), pack_half2(hi.z, hi.w));
        *reinterpret_cast<uint4 *>(w.act + (int64_t)(tile.y + row) * p.inter + col) = out;
      }
      __syncwarp();
    }
  }
}

template <int kFragsM, class Smem>
__device__ void store_partials(const Params &p, const Workspace &w, const int4 &tile, Smem &s,
                               Acc (&acc)[kFragsM][kFragsN], unsigned frags) {
  const int warp = threadIdx.x / 32, wm = warp / kWarpsN, wn = warp % kWarpsN;
  float *stage = s.stage(warp);
#pragma unroll
  for (int fm = 0; fm < kFragsM; ++fm) {
#pragma unroll
    for (int fn = 0; fn < kFragsN; ++fn) {
      if (!(frags >> fn & 1)) continue;
      wmma::store_matrix_sync(stage, acc[fm][fn], kFrag, wmma::mem_row_major);
      __syncwarp();
      const int row = wm * (kFragsM * kFrag) + fm * kFrag + stage_row();
      const int col = blockIdx.x * kTileN + wn * kWarpN + fn * kFrag + stage_col();
      if (row < tile.z && col < p.hidden) {
        const float scale = s.row_scale[row];
        const float *v = stage + stage_row() * kFrag + stage_col();
        float t[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) t[i] = clamp_to_half(v[i] * scale);
        *reinterpret_cast<uint4 *>(w.partial + (int64_t)s.pair[row] * p.hidden + col) =
            make_uint4(pack_half2(t[0], t[1]), pack_half2(t[2], t[3]), pack_half2(t[4], t[5]),
                       pack_half2(t[6], t[7]));
      }
      __syncwarp();
    }
  }
}

// Prologue: what each row of the tile refers to (x row, or pair and its router weight).
template <Gemm kKind, int kTileM, class Smem>
__device__ void load_rows(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                          const int4 &tile, Smem &s) {
  const int row = threadIdx.x;
  if (row == 0) s.tile = tile;
  if (row >= kTileM) return;
  const int pair = row < tile.z ? w.sorted[tile.y + row] : -1;
  const int t = pair / p.topk, j = pair - t * p.topk;
  if (kKind == Gemm::kGateUp) {
    s.x_row[row] = p.x + (pair < 0 ? 0 : (int64_t)(pass.token0 + t) * p.x_row_stride);
    return;
  }
  s.pair[row] = pair;
  float scale = 0.0f;
  if (pair >= 0) {
    const float weight = p.topk_weights[(int64_t)(pass.token0 + t) * p.topk_weights_row_stride + j];
    scale = weight * b.scale_2[(int64_t)tile.x * b.scale_2_stride] * kDecodeScale;
  }
  s.row_scale[row] = scale;
}

// One M tile of kTileM rows (the tile table says which) x one N tile.
template <Gemm kKind, int kTileM, bool kRagged, class Smem>
__device__ void gemm_tile(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                          const int4 &tile, Smem &s) {
  using C = Config<kKind, kTileM>;
  const int warp = threadIdx.x / 32;
  load_rows<kKind, kTileM>(p, pass, w, b, tile, s);
  if (C::kShares && threadIdx.x % 32 == 0) {
    s.share[warp] = WarpShare::of<C::kHalves>(b, warp % kWarpsN).bits();
  }
  __syncthreads();
  Loader<kKind, kTileM, kRagged> loader;
  loader.init(p, w, b, s);
  Acc acc[C::kFragsM][kFragsN];
#pragma unroll
  for (int fm = 0; fm < C::kFragsM; ++fm)
#pragma unroll
    for (int fn = 0; fn < kFragsN; ++fn) wmma::fill_fragment(acc[fm][fn], 0.0f);
  typename Loader<kKind, kTileM, kRagged>::Stage staged;
  loader.load_a(p, w, b, s, 0, staged);
  loader.load_b(b, 0, staged);
  for (int kt = 0; kt < b.k_tiles; ++kt) {
    store_stage(loader, staged, s);
    __syncthreads();
    const bool more = kt + 1 < b.k_tiles;
    // The next step's weights (DRAM) and A rows (mostly L2 hits) are in flight during the MMAs
    // (issuing the A loads after the MMAs instead left their latency exposed: 2-4% slower).
    if (more) loader.load_b(b, kt + 1, staged);
    if (more) loader.load_a(p, w, b, s, kt + 1, staged);
    // A partial N tile's share is read back at each step rather than held in a register.
    const WarpShare share =
        C::kShares ? WarpShare(s.share[warp]) : WarpShare::whole(warp % kWarpsN);
    mma_tile<kKind, kTileM>(s, acc, share.column(), share.substeps() & held_substeps(b, kt),
                            share.frags());
    __syncthreads();  // the tiles are rewritten next step, or become the epilogue's stage
  }
  // Epilogue (the tile entry is read back from shared memory: no register holds it across the
  // main loop)
  const WarpShare share = C::kShares ? WarpShare(s.share[warp]) : WarpShare::whole(warp % kWarpsN);
  // split() depends on the N tile alone, so every warp of the block reaches the barriers inside.
  if (C::kShares && share.split() > 1) reduce_split_k(s, acc, share);
  if (warp % kWarpsN != share.column()) return;  // its sums went to another warp
  if (kKind == Gemm::kGateUp) {
    store_activation(p, w, b, s.tile, s, acc, share.frags());
  } else {
    store_partials(p, w, s.tile, s, acc, share.frags());
  }
}

// A tile of the small-tile kernel: a 64- or 32-row tile, or at short K part blockIdx.z of a
// big tile (see launch_gemm): its first 64 rows (z 0) or the rest (z 1). The 64-row tile has no
// register left for partial N tiles (Config::kShares) or ragged loads: there it runs as two
// 32-row tiles.
template <Gemm kKind, bool kRagged, class Smem>
__device__ void small_entry(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                            int4 tile, Smem &s) {
  if (tile.w == kBigTileM) {  // more than kWideTileM rows (tiling.h): both parts have some
    tile.y += blockIdx.z * kWideTileM;
    tile.z = blockIdx.z == 0 ? kWideTileM : tile.z - kWideTileM;
    tile.w = small_tile_m(tile.z);
  }
  if (!kRagged && tile.w == kWideTileM && whole_n_tile<Config<kKind, kWideTileM>::kHalves>(b)) {
    gemm_tile<kKind, kWideTileM, kRagged>(p, pass, w, b, tile, s);
    return;
  }
  const int rows = tile.z;
  tile.z = min(rows, kNarrowTileM);
  gemm_tile<kKind, kNarrowTileM, kRagged>(p, pass, w, b, tile, s);
  if (rows <= kNarrowTileM) return;
  __syncthreads();  // the first tile's epilogue still reads the shared rows
  tile.y += kNarrowTileM;
  tile.z = rows - kNarrowTileM;
  gemm_tile<kKind, kNarrowTileM, kRagged>(p, pass, w, b, tile, s);
}

// The tiles of one table: kRows = kBigTileM (128-row tiles: 16 accumulators a warp, one block
// per SM) or kWideTileM (64- and 32-row tiles, two blocks per SM; at short K also the big-tile
// table, each tile in two parts along z: small_entry). kRagged: Loader.
template <Gemm kKind, int kRows, bool kRagged>
__global__ void __launch_bounds__(kThreads, kRows == kBigTileM ? 1 : 2)
    nvfp4_moe_gemm_wmma(const Params p, const Pass pass, const Workspace w, const Operand b,
                        int32_t first_entry) {
  extern __shared__ __align__(32) unsigned char smem[];
  GemmSmem<kRows> &s = *reinterpret_cast<GemmSmem<kRows> *>(smem);
  const int4 tile = w.tiles[first_entry + blockIdx.y];
  if (tile.x < 0) return;  // past the last tile of this table
  if constexpr (kRows == kBigTileM) {
    gemm_tile<kKind, kBigTileM, kRagged>(p, pass, w, b, tile, s);
  } else {
    small_entry<kKind, kRagged>(p, pass, w, b, tile, s);
  }
}

// Entries first_entry .. first_entry + entries - 1 of the tile tables, `parts` blocks each along
// z: 2 only for the big-tile table at short K, whose entries are all 128-row tiles that
// small_entry splits in two (a small tile with two parts would run twice).
template <Gemm kKind, int kRows, bool kRagged>
void launch_table(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                  int32_t first_entry, int32_t entries, int parts, cudaStream_t stream) {
  if (entries == 0) return;
  auto kernel = nvfp4_moe_gemm_wmma<kKind, kRows, kRagged>;
  constexpr int kBytes = sizeof(GemmSmem<kRows>);
  allow_dynamic_smem(kernel, kBytes);
  prefer_max_carveout(kernel);  // two small-tile blocks (46 KB each); a big-tile block (55 KB)
  kernel<<<dim3(b.n_tiles, entries, parts), kThreads, kBytes, stream>>>(p, pass, w, b, first_entry);
}

template <Gemm kKind, bool kRagged>
void launch_gemm(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                 cudaStream_t stream) {
  if (b.k_tiles >= kBigTileMinKTiles) {
    launch_table<kKind, kBigTileM, kRagged>(p, pass, w, b, 0, pass.big_table_size, 1, stream);
  } else {  // a launch of its own: the small tiles' blocks need no second part along z
    launch_table<kKind, kWideTileM, kRagged>(p, pass, w, b, 0, pass.big_table_size, 2, stream);
  }
  launch_table<kKind, kWideTileM, kRagged>(p, pass, w, b, pass.big_table_size,
                                           pass.small_table_size, 1, stream);
}

template <Gemm kKind>
void launch_gemm(const Params &p, const Pass &pass, const Workspace &w, const Operand &b,
                 cudaStream_t stream) {
  if (b.ragged) {
    launch_gemm<kKind, true>(p, pass, w, b, stream);
  } else {
    launch_gemm<kKind, false>(p, pass, w, b, stream);
  }
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

extern "C" uint32_t sm70_nvfp4_moe_smem_bytes(void) {
  return sizeof(sm70ops::nvfp4_moe::GemmSmem<sm70ops::nvfp4_moe::kBigTileM>);
}
