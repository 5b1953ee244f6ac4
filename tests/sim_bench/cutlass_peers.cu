// The library peers of the simulated-V100 bench (tools/sim_bench.sh): CUTLASS 2.x kernels run on
// the same GPGPU-Sim V100 model as our kernels, so that a kernel's share of its roofline floor can
// be read against what a library reaches on that model. fp16 operands, fp32 accumulation, fp16
// output, the SM70 WMMA path (OpClassWmmaTensorOp on Sm70: wmma.mma m16n16k16, HMMA.884 on a
// V100; CUTLASS's OpClassTensorOp path on Sm70 uses mma.sync.m8n8k4, which the simulator cannot
// parse).
//
//   cutlass_peers gemm M N K [CONFIG]
//       The dense calibration GEMM: D[M, N] = A[M, K] (row-major) x B, B column-major, i.e.
//       weights [N, K] as a checkpoint stores them. One device::Gemm launch is timed.
//   cutlass_peers grouped EXPERTS ROWS H I [CONFIG]
//       What an engine without an FP4 kernel runs for the MoE: device::GemmGrouped over
//       pre-dequantized fp16 expert weights, two timed grouped launches of EXPERTS problems each:
//         gate/up: [ROWS, H] x W13_e^T, W13_e [2I, H] row-major -> [ROWS, 2I]
//         down:    [ROWS, I] x W2_e^T,  W2_e [H, I] row-major  -> [ROWS, H]
//       Rows are pre-gathered and contiguous per expert, and the down GEMM reads its own random
//       [ROWS, I] input per expert: no gather, activation or combine is run or timed (a
//       comparison that favours the peer).
//
// CONFIG: the SM70 WMMA tile configurations of CUTLASS's own generator
// (cutlass_library/generator.py, GenerateSM70_WmmaTensorOp_161616) and unit tests, all with the
// 16x16x16 instruction, 2 stages and 8-element (128-bit) accesses:
//   w8   threadblock 128x128x32, warps 32x64x32 (8 warps): the profiler's [128, 128, 32] tile.
//        The default of gemm.
//   w4   threadblock 128x128x32, warps 64x64x32 (4 warps): the unit tests' tile
//   m64  threadblock  64x128x32, warps 32x64x32 (4 warps): the profiler's [64, 128, 32] tile.
//        The default of grouped: 160 rows an expert fill 3 of its 64-row tiles (83%) but only
//        2 of the 128-row ones (62%), and 2 of its threadblocks fit an SM (w8: 1).
// Simulated (timing mode, whole V100, cycles): gemm 1280x1024x512 (one wave): w8 40242, w4
// 40812, m64 39454. grouped 16 160 2560 160: w8 294307 (gate/up) + 131147 (down) = 425454, m64
// 157297 + 105455 = 262752 (w8's 96 gate/up tiles on 80 resident threadblocks leave 16 of them
// a second tile).
//
// Prints the lines of report.h (work, the timed bracket, the check against an fp64 CPU reference
// on the same fp16 inputs) and exits 0 only when the check passes. Inputs are pseudo-random fp16
// in [-1, 1); outputs are poisoned with 0xff bytes (fp16 NaN) before the run and every output
// entry must come back finite.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/gemm/device/gemm_grouped.h"
#include "cutlass/gemm/kernel/default_gemm_grouped.h"
#include "tests/sim_bench/report.h"

namespace {

using Half = cutlass::half_t;
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;

// 128-bit global accesses: K and N (so H and I) must be multiples of 8.
constexpr int kAlignment = 8;
// rel-L2 bound over the sampled entries: fp16 outputs (a 2^-11 relative rounding step) of fp32
// sums, against fp64 on the same fp16 inputs.
constexpr double kTolerance = 2e-3;

#define CHECK_CUDA(call)                                                                \
  do {                                                                                  \
    cudaError_t err_ = (call);                                                          \
    if (err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "cutlass_peers: %s: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

#define CHECK_CUTLASS(call)                                   \
  do {                                                        \
    cutlass::Status status_ = (call);                         \
    if (status_ != cutlass::Status::kSuccess) {               \
      std::fprintf(stderr, "cutlass_peers: %s: %s\n", #call,  \
                   cutlass::cutlassGetStatusString(status_)); \
      std::exit(2);                                           \
    }                                                         \
  } while (0)

// One tile configuration: the dense Gemm and the GemmGrouped built from it.
template <int kTileM, int kTileN, int kWarpM, int kWarpN>
struct Config {
  using Threadblock = cutlass::gemm::GemmShape<kTileM, kTileN, 32>;
  using Warp = cutlass::gemm::GemmShape<kWarpM, kWarpN, 32>;
  using Instruction = cutlass::gemm::GemmShape<16, 16, 16>;
  using Epilogue = cutlass::epilogue::thread::LinearCombination<Half, kAlignment, float, float>;
  using Swizzle = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>;
  static constexpr int kStages = 2;
  static constexpr int kTileRows = kTileM;
  static constexpr int kTileCols = kTileN;
  static constexpr int kWarps = (kTileM / kWarpM) * (kTileN / kWarpN);

  using Gemm = cutlass::gemm::device::Gemm<Half, RowMajor, Half, ColumnMajor, Half, RowMajor, float,
                                           cutlass::arch::OpClassWmmaTensorOp, cutlass::arch::Sm70,
                                           Threadblock, Warp, Instruction, Epilogue, Swizzle,
                                           kStages, kAlignment, kAlignment>;

  using GroupedKernel = typename cutlass::gemm::kernel::DefaultGemmGrouped<
      Half, RowMajor, cutlass::ComplexTransform::kNone, kAlignment, Half, ColumnMajor,
      cutlass::ComplexTransform::kNone, kAlignment, Half, RowMajor, float,
      cutlass::arch::OpClassWmmaTensorOp, cutlass::arch::Sm70, Threadblock, Warp, Instruction,
      Epilogue, Swizzle, kStages,
      cutlass::gemm::kernel::GroupScheduleMode::kDeviceOnly>::GemmKernel;
  using Grouped = cutlass::gemm::device::GemmGrouped<GroupedKernel>;
};

using ConfigW8 = Config<128, 128, 32, 64>;
using ConfigW4 = Config<128, 128, 64, 64>;
using ConfigM64 = Config<64, 128, 32, 64>;

// --- Host data --------------------------------------------------------------------------------

// splitmix64: reproducible pseudo-random inputs.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float Uniform() { return float(Next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }  // [-1, 1)
  int Below(int n) { return int(Next() % uint64_t(n)); }
};

std::vector<Half> RandomHalves(size_t count, Rng *rng) {
  std::vector<Half> v(count);
  for (Half &x : v) x = Half(rng->Uniform());
  return v;
}

template <typename T>
T *Upload(const std::vector<T> &host) {
  T *device = nullptr;
  CHECK_CUDA(cudaMalloc(&device, host.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

Half *Poisoned(size_t count) {
  Half *device = nullptr;
  CHECK_CUDA(cudaMalloc(&device, count * sizeof(Half)));
  CHECK_CUDA(cudaMemset(device, 0xff, count * sizeof(Half)));  // 0xffff: fp16 NaN
  return device;
}

std::vector<Half> Download(const Half *device, size_t count) {
  std::vector<Half> host(count);
  CHECK_CUDA(cudaMemcpy(host.data(), device, count * sizeof(Half), cudaMemcpyDeviceToHost));
  return host;
}

// Entries that are NaN or infinite: the poison left where nothing was written, or a broken sum.
size_t NonFinite(const std::vector<Half> &v) {
  size_t bad = 0;
  for (const Half &x : v) bad += (x.raw() & 0x7c00) == 0x7c00;
  return bad;
}

// `count` rows of `rows` to check: the first, the last and pseudo-random others.
std::vector<int> SampleRows(int rows, int count, Rng *rng) {
  std::vector<int> sample = {0, rows - 1};
  while (int(sample.size()) < count) sample.push_back(rng->Below(rows));
  sample.resize(std::min<size_t>(sample.size(), size_t(count)));
  return sample;
}

// Squared error and squared reference summed over the checked entries.
struct Error {
  double err2 = 0, ref2 = 0;
  size_t entries = 0;
  double RelL2() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : INFINITY; }
  bool Ok() const { return entries > 0 && RelL2() <= kTolerance; }  // false on NaN too
};

// Checks rows `rows` of D [*, N] = A [*, K] x W^T, W [N, K] row-major (all host fp16), against
// fp64 sums of the same fp16 values.
void CheckRows(const Half *a, const Half *w, const Half *d, int n_cols, int k_dim,
               const std::vector<int> &rows, Error *error) {
  std::vector<double> wd(size_t(n_cols) * k_dim);
  for (size_t i = 0; i < wd.size(); ++i) wd[i] = double(float(w[i]));
  std::vector<double> ad(k_dim);
  for (int r : rows) {
    for (int k = 0; k < k_dim; ++k) ad[k] = double(float(a[size_t(r) * k_dim + k]));
    for (int n = 0; n < n_cols; ++n) {
      const double *wn = &wd[size_t(n) * k_dim];
      double ref = 0;
      for (int k = 0; k < k_dim; ++k) ref += ad[k] * wn[k];
      double out = double(float(d[size_t(r) * n_cols + n]));
      error->err2 += (out - ref) * (out - ref);
      error->ref2 += ref * ref;
      ++error->entries;
    }
  }
}

int TileCount(int m, int n, int tile_m, int tile_n) {
  return ((m + tile_m - 1) / tile_m) * ((n + tile_n - 1) / tile_n);
}

// --- gemm M N K ------------------------------------------------------------------------------

template <typename Cfg>
int RunGemm(const char *config_name, int m, int n, int k) {
  using Gemm = typename Cfg::Gemm;
  Rng rng{0x5eed0001};
  std::vector<Half> a = RandomHalves(size_t(m) * k, &rng);
  std::vector<Half> b = RandomHalves(size_t(n) * k, &rng);  // [N, K]: B column-major
  Half *d_a = Upload(a), *d_b = Upload(b), *d_d = Poisoned(size_t(m) * n);

  typename Gemm::Arguments args({m, n, k}, {d_a, k}, {d_b, k}, {d_d, n}, {d_d, n}, {1.0f, 0.0f});
  Gemm gemm;
  CHECK_CUTLASS(gemm.can_implement(args));
  CHECK_CUTLASS(gemm.initialize(args));
  std::printf(
      "cutlass_peers: gemm %dx%dx%d: cutlass::gemm::device::Gemm, Sm70 WMMA 16x16x16, config %s "
      "(threadblock %dx%dx32, %d warps, 2 stages), %d threadblocks\n",
      m, n, k, config_name, Cfg::kTileRows, Cfg::kTileCols, Cfg::kWarps,
      TileCount(m, n, Cfg::kTileRows, Cfg::kTileCols));
  sm70ops_bench::ReportWork(2.0 * m * n * k, 2.0 * (double(m) * k + double(n) * k + double(m) * n),
                            0, 0, "calibration");

  sm70ops_bench::BeginTimed();
  CHECK_CUTLASS(gemm.run());
  sm70ops_bench::EndTimed();
  CHECK_CUDA(cudaGetLastError());

  std::vector<Half> d = Download(d_d, size_t(m) * n);
  size_t bad = NonFinite(d);
  std::vector<int> rows = SampleRows(m, std::min(m, 32), &rng);
  Error error;
  CheckRows(a.data(), b.data(), d.data(), n, k, rows, &error);
  bool ok = bad == 0 && error.Ok();
  char detail[256];
  std::snprintf(detail, sizeof detail,
                "rel_l2=%.3g over %zu entries (tolerance %.0e), %zu of %zu outputs non-finite",
                error.RelL2(), error.entries, kTolerance, bad, d.size());
  sm70ops_bench::ReportCheck(int(rows.size()), ok, detail);
  CHECK_CUDA(cudaFree(d_a));
  CHECK_CUDA(cudaFree(d_b));
  CHECK_CUDA(cudaFree(d_d));
  return ok ? 0 : 1;
}

// --- grouped EXPERTS ROWS H I ----------------------------------------------------------------

// One grouped launch: EXPERTS problems [ROWS, N] = [ROWS, K] x W_e^T, W_e [N, K], with every
// operand of every expert contiguous in one allocation.
template <typename Cfg>
struct GroupedLaunch {
  using Grouped = typename Cfg::Grouped;
  int experts, rows, n, k;
  std::vector<Half> a, w;  // host copies: [E * ROWS, K] and [E, N, K]
  Half *d_a = nullptr, *d_w = nullptr, *d_d = nullptr;
  cutlass::gemm::GemmCoord *d_problems = nullptr;
  Half **d_ptr_a = nullptr, **d_ptr_w = nullptr, **d_ptr_d = nullptr;
  int64_t *d_lda = nullptr, *d_ldw = nullptr, *d_ldd = nullptr;
  int tiles = 0, threadblocks = 0, occupancy = 0;
  Grouped gemm;

  GroupedLaunch(int experts_, int rows_, int n_, int k_, Rng *rng)
      : experts(experts_), rows(rows_), n(n_), k(k_) {
    a = RandomHalves(size_t(experts) * rows * k, rng);
    w = RandomHalves(size_t(experts) * n * k, rng);
    d_a = Upload(a);
    d_w = Upload(w);
    d_d = Poisoned(size_t(experts) * rows * n);
    std::vector<cutlass::gemm::GemmCoord> problems(experts, cutlass::gemm::GemmCoord(rows, n, k));
    std::vector<Half *> ptr_a(experts), ptr_w(experts), ptr_d(experts);
    for (int e = 0; e < experts; ++e) {
      ptr_a[e] = d_a + size_t(e) * rows * k;
      ptr_w[e] = d_w + size_t(e) * n * k;
      ptr_d[e] = d_d + size_t(e) * rows * n;
    }
    d_problems = Upload(problems);
    d_ptr_a = Upload(ptr_a);
    d_ptr_w = Upload(ptr_w);
    d_ptr_d = Upload(ptr_d);
    d_lda = Upload(std::vector<int64_t>(experts, k));  // A row-major [ROWS, K]
    d_ldw = Upload(std::vector<int64_t>(experts, k));  // B column-major [K, N] = W_e [N, K]
    d_ldd = Upload(std::vector<int64_t>(experts, n));  // D row-major [ROWS, N]

    tiles = experts * TileCount(rows, n, Cfg::kTileRows, Cfg::kTileCols);
    occupancy = Grouped::maximum_active_blocks();
    // CUTLASS's own choice: one wave of resident threadblocks (SMs x occupancy), or the tile
    // count if smaller; each threadblock walks the tiles of the group (kDeviceOnly schedule).
    threadblocks = Grouped::sufficient(problems.data(), experts);
    if (threadblocks <= 0) {
      std::fprintf(stderr, "cutlass_peers: GemmGrouped::sufficient() gave %d (occupancy %d)\n",
                   threadblocks, occupancy);
      std::exit(2);
    }
    // ptr_C = ptr_D: beta is 0, so the epilogue never reads C.
    typename Grouped::Arguments args(d_problems, experts, threadblocks, {1.0f, 0.0f}, d_ptr_a,
                                     d_ptr_w, d_ptr_d, d_ptr_d, d_lda, d_ldw, d_ldd, d_ldd,
                                     problems.data());
    CHECK_CUTLASS(gemm.can_implement(args));
    size_t workspace = Grouped::get_workspace_size(args);
    if (workspace != 0) {
      std::fprintf(stderr, "cutlass_peers: unexpected GemmGrouped workspace of %zu bytes\n",
                   workspace);
      std::exit(2);
    }
    CHECK_CUTLASS(gemm.initialize(args));
  }

  // Samples 3 rows of each expert's output; returns the number of rows checked.
  int Check(Rng *rng, Error *error, size_t *bad, size_t *outputs) {
    std::vector<Half> d = Download(d_d, size_t(experts) * rows * n);
    *bad += NonFinite(d);
    *outputs += d.size();
    int checked = 0;
    for (int e = 0; e < experts; ++e) {
      std::vector<int> sample = SampleRows(rows, std::min(rows, 3), rng);
      CheckRows(&a[size_t(e) * rows * k], &w[size_t(e) * n * k], &d[size_t(e) * rows * n], n, k,
                sample, error);
      checked += int(sample.size());
    }
    return checked;
  }

  ~GroupedLaunch() {
    for (void *p : {(void *)d_a, (void *)d_w, (void *)d_d, (void *)d_problems, (void *)d_ptr_a,
                    (void *)d_ptr_w, (void *)d_ptr_d, (void *)d_lda, (void *)d_ldw, (void *)d_ldd})
      cudaFree(p);
  }
};

template <typename Cfg>
int RunGrouped(const char *config_name, int experts, int rows, int h, int inter) {
  Rng rng{0x5eed0002};
  GroupedLaunch<Cfg> gate_up(experts, rows, 2 * inter, h, &rng);
  GroupedLaunch<Cfg> down(experts, rows, h, inter, &rng);
  for (const GroupedLaunch<Cfg> *g : {&gate_up, &down})
    std::printf(
        "cutlass_peers: grouped %s: cutlass::gemm::device::GemmGrouped (kDeviceOnly), Sm70 WMMA "
        "16x16x16, config %s (threadblock %dx%dx32, %d warps, 2 stages): %d problems of "
        "%dx%dx%d, %d tiles, grid %d threadblocks (%d resident per SM)\n",
        g == &gate_up ? "gate/up" : "down", config_name, Cfg::kTileRows, Cfg::kTileCols,
        Cfg::kWarps, g->experts, g->rows, g->n, g->k, g->tiles, g->threadblocks, g->occupancy);

  const double e = experts, r = rows, hh = h, i = inter;
  const double flops = 2 * e * r * (2 * i * hh + i * hh);
  const double bytes = 2 * (e * 3 * i * hh + e * r * (hh + 2 * i) + e * r * (i + hh));
  // Every expert takes T x 10 / 512 rows of a chunk of T tokens (160 at T 8192).
  const std::string whole = "T " + std::to_string(rows * 512 / 10) + ", E 512, per layer and rank";
  sm70ops_bench::ReportWork(flops, bytes, 512.0 / experts, 1, whole.c_str());

  sm70ops_bench::BeginTimed();
  CHECK_CUTLASS(gate_up.gemm.run());
  CHECK_CUTLASS(down.gemm.run());
  sm70ops_bench::EndTimed();
  CHECK_CUDA(cudaGetLastError());

  Error error_gate_up, error_down;
  size_t bad = 0, outputs = 0;
  int checked = gate_up.Check(&rng, &error_gate_up, &bad, &outputs);
  checked += down.Check(&rng, &error_down, &bad, &outputs);
  bool ok = bad == 0 && error_gate_up.Ok() && error_down.Ok();
  char detail[512];
  std::snprintf(detail, sizeof detail,
                "gate/up rel_l2=%.3g over %zu entries, down rel_l2=%.3g over %zu entries "
                "(tolerance %.0e), %zu of %zu outputs non-finite; timed: the two grouped GEMMs "
                "alone (down reads its own random [ROWS, I] input per expert; no gather, "
                "activation or combine)",
                error_gate_up.RelL2(), error_gate_up.entries, error_down.RelL2(),
                error_down.entries, kTolerance, bad, outputs);
  sm70ops_bench::ReportCheck(checked, ok, detail);
  return ok ? 0 : 1;
}

int Usage() {
  std::fprintf(stderr,
               "usage: cutlass_peers gemm M N K [CONFIG]\n"
               "       cutlass_peers grouped EXPERTS ROWS H I [CONFIG]\n"
               "CONFIG: w8, w4 or m64 (default: w8 for gemm, m64 for grouped); N, K, H and I\n"
               "multiples of %d\n",
               kAlignment);
  return 2;
}

// Parses a positive integer argument; 0 when it is not one.
int Positive(const char *s) {
  char *end = nullptr;
  long v = std::strtol(s, &end, 10);
  return (*end == '\0' && v > 0 && v < (1l << 30)) ? int(v) : 0;
}

// Runs `Run<Cfg>` for the configuration named `name`.
template <template <typename> class Run, typename... Args>
int WithConfig(const std::string &name, Args... args) {
  if (name == "w8") return Run<ConfigW8>::Go("w8", args...);
  if (name == "w4") return Run<ConfigW4>::Go("w4", args...);
  if (name == "m64") return Run<ConfigM64>::Go("m64", args...);
  return Usage();
}

template <typename Cfg>
struct GemmRunner {
  static int Go(const char *name, int m, int n, int k) { return RunGemm<Cfg>(name, m, n, k); }
};

template <typename Cfg>
struct GroupedRunner {
  static int Go(const char *name, int e, int r, int h, int i) {
    return RunGrouped<Cfg>(name, e, r, h, i);
  }
};

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) return Usage();
  const std::string command = argv[1];
  if (command == "gemm" && (argc == 5 || argc == 6)) {
    int m = Positive(argv[2]), n = Positive(argv[3]), k = Positive(argv[4]);
    if (!m || !n || !k || n % kAlignment || k % kAlignment) return Usage();
    return WithConfig<GemmRunner>(argc == 6 ? argv[5] : "w8", m, n, k);
  }
  if (command == "grouped" && (argc == 6 || argc == 7)) {
    int e = Positive(argv[2]), r = Positive(argv[3]), h = Positive(argv[4]), i = Positive(argv[5]);
    if (!e || !r || !h || !i || h % kAlignment || i % kAlignment) return Usage();
    return WithConfig<GroupedRunner>(argc == 7 ? argv[6] : "m64", e, r, h, i);
  }
  return Usage();
}
