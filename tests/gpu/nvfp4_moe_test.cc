// SM70_Nvfp4Moe: the plugin's grouped NVFP4 MoE against the CPU reference (tests/ref) on fresh
// random quantized weights, outputs, workspace and repacked weights poisoned before each run.
// Checked per case: rel-L2 <= 5e-3 (ops.md, op 3) and no NaN/Inf; two runs bit-identical; the
// prepared layout (op 4, then op 3 with the checkpoint data pointers NULL) bit-identical to the
// checkpoint layout. Shapes: the model's H 2560 with I 640 / 320 / 160 / 80 (TP 1 / 2 / 4 / 8),
// and H and I odd multiples of 16 (not of 32 or 64: 8-byte aligned checkpoint rows, partial K
// steps, partial N tiles). One case also runs the op captured in a CUDA graph; checked mode
// reports an expert id outside [0, E).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/gpu_env.h"
#include "tests/ref/compare.h"
#include "tests/ref/half.h"
#include "tests/ref/nvfp4_ref.h"
#include "tests/sim_bench/report.h"

namespace sm70ops_gpu {
namespace {

using sm70ops::ref::Nvfp4MoeWeights;

enum class Routing {
  kUniform,     // distinct experts per token, uniformly drawn
  kSkewed,      // expert 0 takes slot 0 of every even token; the last third of experts get nothing
  kInvalid,     // skewed, and about one slot in seven holds an id outside [0, E)
  kTileEdges,   // slot j's expert j * 18 + i takes exactly kTileEdgeCounts[i] tokens
  kDuplicates,  // skewed, and the last slot of every token repeats the expert of its first
  kEven,        // every expert takes exactly T x top-k / E rows (the bench: the model's 160 at
                // T 8192 / E 512), a token's experts consecutive, tokens in a shuffled order
  kZipf,        // distinct experts per token, the r-th most popular drawn with weight 1 / (r + 1):
                // a few hot experts hold most rows, a long tail a few each, the ranks at shuffled
                // ids (the bench's skewed case)
};

// Rows per expert at and around the GEMMs' 16-row fragments and 160-row M tiles (kernels/
// nvfp4_moe/tiling.h: one, two and three tiles, split evenly), and a few between; 3057 tokens.
constexpr int kTileEdgeCounts[] = {1,   15,  16,  17,  79,  80,  81,  95,  96,
                                   159, 160, 161, 176, 319, 320, 321, 480, 481};
constexpr int kTileEdgeExperts = int(std::size(kTileEdgeCounts));
constexpr int kTileEdgeTokens = 3057;
constexpr int SumOfTileEdgeCounts() {
  int sum = 0;
  for (int c : kTileEdgeCounts) sum += c;
  return sum;
}
static_assert(SumOfTileEdgeCounts() == kTileEdgeTokens, "every slot routes each token once");

struct Case {
  std::string name;
  int tokens, experts, topk, hidden, inter;
  Routing routing = Routing::kUniform;
  int x_row_pad = 0;         // extra halves between rows of x and of out: strided views
  int ids_row_pad = 0;       // extra entries between rows of topk_ids and topk_weights
  bool from_floats = false;  // weights through the ModelOpt quantizer instead of random codes
  bool graph = false;        // also capture execute in a CUDA graph
  int model_tokens = 8192;   // SimBench: the T of the whole op the case's time projects to
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

// ---- Inputs

struct Inputs {
  Nvfp4MoeWeights w;
  std::vector<uint16_t> x;       // [T, H] dense
  std::vector<int32_t> ids;      // [T, k] dense, as the GPU sees them
  std::vector<float> weights;    // [T, k]
  std::vector<int32_t> ref_ids;  // ids outside [0, E) as (0, weight 0): contribute nothing
  std::vector<float> ref_weights;
};

uint64_t Next(uint64_t &state) {  // splitmix64: the weights of E = 512 are hundreds of MB
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void RandomBytes(std::vector<uint8_t> &out, size_t n, uint64_t &state) {
  out.resize(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = Next(state);
    for (size_t b = 0; b < 8 && i + b < n; ++b) out[i + b] = uint8_t(v >> (8 * b));
  }
}

// Mostly normal e4m3 scales 0.5..448, some subnormal and zero ones (the decode's edge cases).
void RandomScales(std::vector<uint8_t> &out, size_t n, uint64_t &state) {
  out.resize(n);
  for (auto &code : out) {
    const uint64_t v = Next(state);
    const int pick = int(v & 255);
    if (pick == 0) {
      code = 0x00;
    } else if (pick < 4) {
      code = uint8_t(1 + (v >> 8) % 7);  // subnormal: m x 2^-9
    } else {
      code = uint8_t(0x30 + (v >> 8) % (0x7e - 0x30 + 1));
    }
  }
}

// RMS of the e2m1 values of uniform codes, and of the scale distribution above.
double CodeRms() {
  double sum = 0;
  for (int c = 0; c < 16; ++c) sum += std::pow(sm70ops::ref::e2m1_decode(uint8_t(c)), 2);
  return std::sqrt(sum / 16);
}

double ScaleRms() {
  double sum = 0;
  for (int c = 0x30; c <= 0x7e; ++c) sum += std::pow(sm70ops::ref::e4m3_decode(uint8_t(c)), 2);
  return std::sqrt(sum / (0x7e - 0x30 + 1));
}

// scale_2 that gives dot products over K inputs of RMS `in_rms` an RMS of about `out_rms`.
float Scale2(int k, double in_rms, double out_rms, uint64_t &state) {
  const double jitter = 0.5 + double(Next(state) % 1000) / 1000.0;
  return float(out_rms / (std::sqrt(double(k)) * in_rms * CodeRms() * ScaleRms()) * jitter);
}

// Random codes in the checkpoint layout: cheap for E = 512, where quantizing floats is not.
Nvfp4MoeWeights RandomCodes(const Case &c, uint64_t &state) {
  const size_t e = c.experts, h = c.hidden, i = c.inter;
  Nvfp4MoeWeights w{c.experts, c.hidden, c.inter, {}, {}, {}, {}, {}, {}};
  RandomBytes(w.w13, e * 2 * i * h / 2, state);
  RandomScales(w.w13_scale, e * 2 * i * h / 16, state);
  RandomBytes(w.w2, e * h * i / 2, state);
  RandomScales(w.w2_scale, e * h * i / 16, state);
  for (size_t x = 0; x < 2 * e; ++x) w.w13_scale_2.push_back(Scale2(c.hidden, 1.0, 2.0, state));
  for (size_t x = 0; x < e; ++x) w.w2_scale_2.push_back(Scale2(c.inter, 2.0, 1.0, state));
  return w;
}

Nvfp4MoeWeights QuantizedFloats(const Case &c, std::mt19937 &rng) {
  const size_t e = c.experts, h = c.hidden, i = c.inter;
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> w13(e * 2 * i * h), w2(e * h * i);
  const float s13 = 2.f / std::sqrt(float(h)), s2 = 1.f / std::sqrt(float(i));
  for (float &v : w13) v = normal(rng) * s13;
  for (float &v : w2) v = normal(rng) * s2;
  return sm70ops::ref::nvfp4_quantize_moe(w13, w2, c.experts, c.hidden, c.inter);
}

// Router weights of one token: softmax of normal logits.
std::vector<float> RouterWeights(int topk, std::mt19937 &rng) {
  std::normal_distribution<float> logit(0.f, 1.f);
  std::vector<float> w(topk);
  float sum = 0;
  for (float &v : w) sum += (v = std::exp(logit(rng)));
  for (float &v : w) v /= sum;
  return w;
}

// Slot j of every token from its own group of kTileEdgeExperts experts, each taking exactly its
// count of tokens in a shuffled order.
void RouteTileEdges(const Case &c, std::mt19937 &rng, Inputs &in) {
  ASSERT_TRUE(c.tokens == kTileEdgeTokens && c.experts >= c.topk * kTileEdgeExperts)
      << "tile-edge routing is laid out for " << kTileEdgeTokens << " tokens and "
      << kTileEdgeExperts << " experts a slot";
  std::vector<std::vector<int32_t>> slots(c.topk);
  for (int j = 0; j < c.topk; ++j) {
    for (int i = 0; i < kTileEdgeExperts; ++i) {
      slots[j].insert(slots[j].end(), kTileEdgeCounts[i], j * kTileEdgeExperts + i);
    }
    std::shuffle(slots[j].begin(), slots[j].end(), rng);
  }
  for (int t = 0; t < c.tokens; ++t) {
    const std::vector<float> w = RouterWeights(c.topk, rng);
    for (int j = 0; j < c.topk; ++j) {
      in.ids.push_back(slots[j][t]);
      in.weights.push_back(w[j]);
      in.ref_ids.push_back(slots[j][t]);
      in.ref_weights.push_back(w[j]);
    }
  }
}

// Token order[t], slot j: expert (t + j) % E. With T a multiple of E every expert takes T / E
// tokens of each slot, and a token's top-k (k <= E) are distinct.
void RouteEven(const Case &c, std::mt19937 &rng, Inputs &in) {
  ASSERT_TRUE(c.tokens % c.experts == 0 && c.topk <= c.experts) << "even routing: T % E, k <= E";
  std::vector<int> order(c.tokens);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  in.ids.resize(size_t(c.tokens) * c.topk);
  in.weights.resize(in.ids.size());
  for (int t = 0; t < c.tokens; ++t) {
    const std::vector<float> w = RouterWeights(c.topk, rng);
    for (int j = 0; j < c.topk; ++j) {
      const size_t slot = size_t(order[t]) * c.topk + j;
      in.ids[slot] = (t + j) % c.experts;
      in.weights[slot] = w[j];
    }
  }
  in.ref_ids = in.ids, in.ref_weights = in.weights;
}

// Each token's top-k distinct experts by weighted sampling without replacement: the k largest of
// u^(1/w) over the experts (Efraimidis-Spirakis), w = 1 / (r + 1) for the expert of rank r.
// Experts come in groups of kZipfGroup (one group below 2 x kZipfGroup), token t drawing from
// group t % groups: four times the experts and tokens route four times the same pattern (the
// bench's full runs). Rank r is expert id_of_rank[r] of its group, a shuffle: a real model's hot
// experts sit anywhere, and the kernels' work must not depend on their ids.
constexpr int kZipfGroup = 40;

void RouteZipf(const Case &c, std::mt19937 &rng, Inputs &in) {
  const int groups = std::max(1, c.experts / kZipfGroup), width = c.experts / groups;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<std::pair<double, int32_t>> keys(width);
  std::vector<int32_t> id_of_rank(width);
  std::iota(id_of_rank.begin(), id_of_rank.end(), 0);
  std::shuffle(id_of_rank.begin(), id_of_rank.end(), rng);
  for (int t = 0; t < c.tokens; ++t) {
    for (int r = 0; r < width; ++r) keys[r] = {std::pow(uniform(rng), r + 1.0), id_of_rank[r]};
    std::partial_sort(keys.begin(), keys.begin() + c.topk, keys.end(), std::greater<>());
    const std::vector<float> w = RouterWeights(c.topk, rng);
    for (int j = 0; j < c.topk; ++j) {
      in.ids.push_back(t % groups * width + keys[j].second);
      in.weights.push_back(w[j]);
    }
  }
  in.ref_ids = in.ids, in.ref_weights = in.weights;
}

// Distinct experts per token drawn from [first, last), slot 0 of even tokens pinned to expert 0
// when skewed.
void Route(const Case &c, std::mt19937 &rng, Inputs &in) {
  if (c.routing == Routing::kTileEdges) return RouteTileEdges(c, rng, in);
  if (c.routing == Routing::kEven) return RouteEven(c, rng, in);
  if (c.routing == Routing::kZipf) return RouteZipf(c, rng, in);
  const bool skewed = c.routing != Routing::kUniform;
  const int last = skewed ? std::max(c.topk + 1, c.experts * 2 / 3) : c.experts;
  std::vector<int32_t> pool(last);
  std::iota(pool.begin(), pool.end(), 0);
  std::uniform_int_distribution<int> seventh(0, 6), bad(0, 2);
  for (int t = 0; t < c.tokens; ++t) {
    std::shuffle(pool.begin() + (skewed ? 1 : 0), pool.end(), rng);
    const bool pinned = skewed && t % 2 == 0;
    const std::vector<float> w = RouterWeights(c.topk, rng);
    for (int j = 0; j < c.topk; ++j) {
      int32_t id = pinned ? pool[j] : pool[j + 1];  // pool[0] is expert 0 when skewed
      if (c.routing == Routing::kDuplicates && j == c.topk - 1) id = in.ids[size_t(t) * c.topk];
      if (c.routing == Routing::kInvalid && seventh(rng) == 0) {
        const int32_t kBad[] = {-1, c.experts, 1 << 30};
        id = kBad[bad(rng)];
      }
      const bool valid = id >= 0 && id < c.experts;
      in.ids.push_back(id);
      in.weights.push_back(w[j]);
      in.ref_ids.push_back(valid ? id : 0);
      in.ref_weights.push_back(valid ? w[j] : 0.f);
    }
  }
}

Inputs MakeInputs(const Case &c, uint32_t seed) {
  std::mt19937 rng(seed);
  uint64_t state = seed;
  Inputs in;
  in.w = c.from_floats ? QuantizedFloats(c, rng) : RandomCodes(c, state);
  std::normal_distribution<float> normal(0.f, 1.f);
  in.x.resize(size_t(c.tokens) * c.hidden);
  for (auto &h : in.x) h = sm70ops::ref::float_to_half(normal(rng));
  Route(c, rng, in);
  return in;
}

// The reference over slices of tokens in parallel (each slice dequantizes its own experts).
std::vector<double> Reference(const Case &c, const Inputs &in) {
  const int threads = std::max(1, std::min<int>(16, int(std::thread::hardware_concurrency())));
  const int slice = (c.tokens + threads - 1) / threads;
  std::vector<double> out(size_t(c.tokens) * c.hidden);
  std::vector<std::thread> pool;
  for (int t0 = 0; t0 < c.tokens; t0 += slice) {
    pool.emplace_back([&, t0] {
      const int t1 = std::min(c.tokens, t0 + slice);
      const size_t h = c.hidden, k = c.topk;
      const std::vector<uint16_t> x(in.x.begin() + t0 * h, in.x.begin() + t1 * h);
      const std::vector<int32_t> ids(in.ref_ids.begin() + t0 * k, in.ref_ids.begin() + t1 * k);
      const std::vector<float> w(in.ref_weights.begin() + t0 * k, in.ref_weights.begin() + t1 * k);
      const std::vector<double> part = sm70ops::ref::nvfp4_moe_ref(x, ids, w, c.topk, in.w);
      std::copy(part.begin(), part.end(), out.begin() + t0 * h);
    });
  }
  for (auto &t : pool) t.join();
  return out;
}

// The reference's rows of tokens `sample` only, [sample, H].
std::vector<double> SampledReference(const Case &c, const Inputs &in,
                                     const std::vector<int> &sample) {
  const size_t h = c.hidden, k = c.topk;
  std::vector<uint16_t> x;
  std::vector<int32_t> ids;
  std::vector<float> w;
  for (const int t : sample) {
    x.insert(x.end(), in.x.begin() + t * h, in.x.begin() + (t + 1) * h);
    ids.insert(ids.end(), in.ref_ids.begin() + t * k, in.ref_ids.begin() + (t + 1) * k);
    w.insert(w.end(), in.ref_weights.begin() + t * k, in.ref_weights.begin() + (t + 1) * k);
  }
  return sm70ops::ref::nvfp4_moe_ref(x, ids, w, c.topk, in.w);
}

// ---- Device side

// Everything on the device for one case, and the argument structs that point at it.
class Device {
 public:
  Device(const Case &c, const Inputs &in)
      : c_(c),
        x_stride_(c.hidden + c.x_row_pad),
        k_stride_(c.topk + c.ids_row_pad),
        x_(Uploaded(Strided(in.x, c.tokens, c.hidden, x_stride_, kOffset, kNanHalf))),
        ids_(Uploaded(Strided(in.ids, c.tokens, c.topk, k_stride_, 0, -7))),
        weights_(Uploaded(Strided(in.weights, c.tokens, c.topk, k_stride_, 0, NAN))),
        out_(size_t(kOffset + int64_t(c.tokens) * x_stride_) * 2),
        w13_(Uploaded(in.w.w13)),
        w13_scale_(Uploaded(in.w.w13_scale)),
        w13_scale_2_(Uploaded(in.w.w13_scale_2)),
        w2_(Uploaded(in.w.w2)),
        w2_scale_(Uploaded(in.w.w2_scale)),
        w2_scale_2_(Uploaded(in.w.w2_scale_2)) {
    Describe(checkpoint_, 0);
    BindWeights(checkpoint_);
  }
  Device(const Device &) = delete;  // the calls point into themselves
  Device &operator=(const Device &) = delete;

  // Op 3 on the checkpoint weights.
  const sm70ops_nvfp4_moe_args &MoeArgs() const { return checkpoint_.args.nvfp4_moe; }

  // Op 3 on op 4's output: the checkpoint tensors keep their shapes, not their data.
  const sm70ops_nvfp4_moe_args &PreparedMoeArgs(const DeviceBuffer &prepared) {
    Describe(prepared_, int64_t(prepared.bytes()));
    Bind(prepared_, "prepared", prepared);
    return prepared_.args.nvfp4_moe;
  }

  // Op 4 from the checkpoint weights into `prepared`; NULL asks check for the size it needs.
  const sm70ops_nvfp4_moe_prepare_args &PrepareArgs(const DeviceBuffer *prepared) {
    sm70ops_desc_nvfp4_moe_prepare_sizes s{};
    s.experts = {c_.experts, c_.hidden, c_.inter};
    s.prepared_bytes = prepared ? int64_t(prepared->bytes()) : 0;
    sm70ops_desc_nvfp4_moe_prepare(&prepare_, &s, 0);
    BindWeights(prepare_);
    if (prepared) Bind(prepare_, "prepared", *prepared);
    return prepare_.args.nvfp4_moe_prepare;
  }

  DeviceBuffer &out() { return out_; }

  // out as [T, H] halves.
  std::vector<uint16_t> DownloadOut() const {
    std::vector<uint16_t> strided(size_t(kOffset + int64_t(c_.tokens) * x_stride_));
    out_.Download(strided.data(), strided.size() * 2);
    std::vector<uint16_t> dense(size_t(c_.tokens) * c_.hidden);
    for (int64_t t = 0; t < c_.tokens; ++t) {
      std::copy_n(&strided[kOffset + t * x_stride_], c_.hidden, &dense[t * c_.hidden]);
    }
    return dense;
  }

 private:
  static constexpr int64_t kOffset = 64;  // halves before row 0 of x and out: a byte_offset

  // x, the routing and out as strided views; `prepared` (op 4's output) when bytes > 0.
  void Describe(sm70ops_desc_call &call, int64_t prepared_bytes) {
    sm70ops_desc_nvfp4_moe_sizes s{};
    s.experts = {c_.experts, c_.hidden, c_.inter};
    s.rows = c_.tokens, s.topk = c_.topk, s.prepared_bytes = prepared_bytes;
    sm70ops_desc_nvfp4_moe(&call, &s, 0);
    sm70ops_desc_stride(Bind(call, "x", x_, kOffset * 2), 0, x_stride_);
    sm70ops_desc_stride(Bind(call, "topk_ids", ids_), 0, k_stride_);
    sm70ops_desc_stride(Bind(call, "topk_weights", weights_), 0, k_stride_);
    sm70ops_desc_stride(Bind(call, "out", out_, kOffset * 2), 0, x_stride_);
  }

  void BindWeights(sm70ops_desc_call &call) {
    Bind(call, "w13", w13_), Bind(call, "w13_scale", w13_scale_);
    Bind(call, "w13_scale_2", w13_scale_2_), Bind(call, "w2", w2_);
    Bind(call, "w2_scale", w2_scale_), Bind(call, "w2_scale_2", w2_scale_2_);
  }

  const Case &c_;
  int64_t x_stride_, k_stride_;
  DeviceBuffer x_, ids_, weights_, out_;
  DeviceBuffer w13_, w13_scale_, w13_scale_2_, w2_, w2_scale_, w2_scale_2_;
  sm70ops_desc_call checkpoint_, prepared_, prepare_;
};

// One execute of op 3 with out and a fresh workspace poisoned (NaN in fp16 and fp32); `timed`
// brackets it for the simulated V100's bench (tests/sim_bench/report.h).
std::vector<uint16_t> RunMoe(const Plugin &plugin, Device &dev, const sm70ops_nvfp4_moe_args &args,
                             bool timed = false) {
  const sm70ops_decision d = Decide(plugin, SM70OPS_OP_NVFP4_MOE, &args);
  if (!d.accepted) return {};
  DeviceBuffer workspace(d.workspace_bytes);
  workspace.Poison(0xff);
  dev.out().Poison(0xff);
  if (timed) sm70ops_bench::BeginTimed();
  EXPECT_EQ(plugin.api().execute(plugin.ctx(), SM70OPS_OP_NVFP4_MOE, &args, nullptr,
                                 workspace.data(), d.workspace_bytes),
            SM70OPS_OK)
      << plugin.api().last_error();
  if (timed) sm70ops_bench::EndTimed();
  Synchronize();
  return dev.DownloadOut();
}

// Op 4 into a poisoned buffer, then op 3 on it (timed: op 3 alone).
std::vector<uint16_t> RunPrepared(const Plugin &plugin, Device &dev, bool timed = false) {
  const sm70ops_decision d =
      Decide(plugin, SM70OPS_OP_NVFP4_MOE_PREPARE, &dev.PrepareArgs(nullptr));
  if (!d.accepted) return {};
  EXPECT_GT(d.output_bytes, 0u);
  DeviceBuffer prepared(d.output_bytes);
  prepared.Poison(0xa5);
  EXPECT_EQ(plugin.api().execute(plugin.ctx(), SM70OPS_OP_NVFP4_MOE_PREPARE,
                                 &dev.PrepareArgs(&prepared), nullptr, nullptr, 0),
            SM70OPS_OK)
      << plugin.api().last_error();
  return RunMoe(plugin, dev, dev.PreparedMoeArgs(prepared), timed);
}

// The same execute captured in a CUDA graph on a non-default stream, then replayed.
std::vector<uint16_t> RunCaptured(const Plugin &plugin, Device &dev) {
  const sm70ops_nvfp4_moe_args &args = dev.MoeArgs();
  const sm70ops_decision d = Decide(plugin, SM70OPS_OP_NVFP4_MOE, &args);
  DeviceBuffer workspace(d.workspace_bytes);
  workspace.Poison(0xff);
  dev.out().Poison(0xff);
  cudaStream_t stream;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const sm70ops_status status = plugin.api().execute(plugin.ctx(), SM70OPS_OP_NVFP4_MOE, &args,
                                                     stream, workspace.data(), d.workspace_bytes);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(status, SM70OPS_OK) << plugin.api().last_error();
  cudaGraphExec_t exec = nullptr;
  if (graph != nullptr && cudaGraphInstantiateWithFlags(&exec, graph, 0) == cudaSuccess) {
    EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraphExecDestroy(exec);
  } else {
    ADD_FAILURE() << "graph capture or instantiation failed";
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return dev.DownloadOut();
}

class SM70_Nvfp4Moe : public ::testing::TestWithParam<Case> {};

TEST_P(SM70_Nvfp4Moe, MatchesReference) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Case &c = GetParam();
  const Inputs in = MakeInputs(c, uint32_t(std::hash<std::string>{}(c.name)));
  Device dev(c, in);
  const std::vector<uint16_t> first = RunMoe(plugin, dev, dev.MoeArgs());
  ASSERT_FALSE(HasFailure());
  const std::vector<uint16_t> second = RunMoe(plugin, dev, dev.MoeArgs());
  EXPECT_TRUE(first == second) << "two runs differ";
  const std::vector<uint16_t> prepared = RunPrepared(plugin, dev);
  EXPECT_TRUE(first == prepared) << "the prepared layout gives another result";
  if (c.graph) {
    const std::vector<uint16_t> captured = RunCaptured(plugin, dev);
    EXPECT_TRUE(first == captured) << "the graph replay gives another result";
  }
  std::vector<double> got(first.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = sm70ops::ref::half_to_float(first[i]);
  const sm70ops::ref::ErrorStats e = sm70ops::ref::compare(got, Reference(c, in));
  EXPECT_EQ(e.non_finite, 0) << "NaN/Inf outputs (the reference has none)";
  EXPECT_LE(e.rel_l2, 5e-3) << "rel-L2 against the fp64 reference";
  std::printf("  T %d, E %d, top-%d, H %d, I %d: rel-L2 %.3g, max |err| %.3g\n", c.tokens,
              c.experts, c.topk, c.hidden, c.inter, e.rel_l2, e.max_abs);
}

// Checked mode: an id outside [0, E) contributes nothing and is reported by the next execute on
// the context.
TEST(SM70_Nvfp4MoeChecked, BadExpertIdReportedByTheNextCall) {
  SM70OPS_REQUIRE_GPU();
  const Case c{"checked", 16, 8, 2, 128, 64};
  Inputs in = MakeInputs(c, 11);
  in.ids[5] = c.experts + 3;
  setenv("SM70OPS_CHECKED", "1", 1);
  Plugin plugin;
  unsetenv("SM70OPS_CHECKED");
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  Device dev(c, in);
  RunMoe(plugin, dev, dev.MoeArgs());
  const sm70ops_nvfp4_moe_args &args = dev.MoeArgs();
  const sm70ops_decision d = Decide(plugin, SM70OPS_OP_NVFP4_MOE, &args);
  DeviceBuffer workspace(d.workspace_bytes);
  EXPECT_EQ(plugin.api().execute(plugin.ctx(), SM70OPS_OP_NVFP4_MOE, &args, nullptr,
                                 workspace.data(), d.workspace_bytes),
            SM70OPS_ERR_INDEX_OUT_OF_RANGE);
  EXPECT_NE(std::string(plugin.api().last_error()).find("topk_ids expert id"), std::string::npos)
      << plugin.api().last_error();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SM70_Nvfp4Moe,
    ::testing::Values(
        // The model's ranks (H 2560, all 512 experts, top-10) at TP4 (I 160), TP1 (I 640), TP2
        // (I 320) and TP8 (I 80), decode-like T.
        Case{"tp4_t1_e512", 1, 512, 10, 2560, 160},
        Case{"tp1_t7_e512", 7, 512, 10, 2560, 640, Routing::kUniform, 0, 0, false, true},
        Case{"tp2_t5_e512", 5, 512, 10, 2560, 320},
        Case{"tp8_t13_e512_strided", 13, 512, 10, 2560, 80, Routing::kUniform, 40, 1},
        // Skewed routing (expert 0 takes half the tokens, a third of the experts none), strided
        // x / out / topk views; narrow M tiles (few rows per expert).
        Case{"tp4_t64_skewed_strided", 64, 64, 10, 2560, 160, Routing::kSkewed, 24, 3},
        Case{"tp1_t64_skewed", 64, 32, 8, 2560, 640, Routing::kSkewed},
        // Whole and split 160-row M tiles (>= 60 rows per expert on average).
        Case{"tp4_t1000_skewed", 1000, 32, 4, 2560, 160, Routing::kSkewed, 8},
        Case{"tp4_t512_zipf", 512, 64, 10, 2560, 160, Routing::kZipf},
        Case{"tp1_t999", 999, 16, 2, 2560, 640},
        Case{"tp8_t501_duplicates", 501, 16, 4, 2560, 80, Routing::kDuplicates},
        // Odd multiples of 16: I 208 and 112 (checkpoint w2 rows of 104 and 56 bytes, a last K
        // step of 16 or 48 k, a last W13 N tile of 48 or 32 of 80 columns), H 2576 and 272 (w13
        // rows of 1288 and 136 bytes, a last K step of 16 k, a last W2 N tile of 16 or 112 of 160
        // rows); duplicate ids, idle experts.
        Case{"i208_t33_duplicates", 33, 64, 10, 2560, 208, Routing::kDuplicates, 8, 2},
        Case{"h2576_i112_t300_skewed", 300, 32, 4, 2576, 112, Routing::kSkewed},
        Case{"h272_i80_t50_skewed_strided", 50, 16, 4, 272, 80, Routing::kSkewed, 8, 1},
        Case{"t8192_quantized_floats", 8192, 16, 2, 272, 112, Routing::kSkewed, 0, 0, true},
        // Ids outside [0, E) contribute nothing; H and I not multiples of the 160/80-row N
        // tiles (partial weight tiles).
        Case{"invalid_ids_partial_tiles", 100, 8, 3, 208, 48, Routing::kInvalid, 8, 1},
        // Experts with 1 .. 481 rows around the fragments and M tiles; K of 4 steps and fewer
        // (gate/up at H 256, down at I 160 and 80: the two-buffer pipeline's first and last
        // steps meet); H 528 ends its K steps on 16 k, I 160 and 80 are whole W13 N tiles.
        Case{"tile_edges_short_k_gate_up", kTileEdgeTokens, 2 * kTileEdgeExperts, 2, 256, 512,
             Routing::kTileEdges},
        Case{"tile_edges_i160", kTileEdgeTokens, 2 * kTileEdgeExperts, 2, 512, 160,
             Routing::kTileEdges},
        Case{"tile_edges_h528_i80", kTileEdgeTokens, 2 * kTileEdgeExperts, 2, 528, 80,
             Routing::kTileEdges},
        // More tokens than one pass (16384): two passes over the weights.
        Case{"two_passes", 16484, 4, 2, 80, 48, Routing::kSkewed, 0, 0, true}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

// Sized for the simulated V100 (tools/sim_tests.sh runs every Sim case): H and I odd multiples
// of 16 (8-byte aligned checkpoint rows, last K steps of 16 and 48 k, last N tiles of 112 and 16
// W2 rows and 32 of 80 W13 columns), idle experts, duplicate and invalid ids, strided views;
// experts of 1 .. 481 rows (one to four M tiles, partial fragments); a down GEMM whose blocks walk
// four N tiles of three K steps (the model's TP4 down) and two, the second partial.
INSTANTIATE_TEST_SUITE_P(
    Sim, SM70_Nvfp4Moe,
    ::testing::Values(Case{"h272_i80_skewed_strided", 11, 16, 4, 272, 80, Routing::kSkewed, 8, 1},
                      Case{"i160_duplicates", 13, 8, 2, 256, 160, Routing::kDuplicates},
                      Case{"i160_zipf", 12, 16, 6, 128, 160, Routing::kZipf},
                      Case{"i112_invalid_ids", 9, 12, 4, 256, 112, Routing::kInvalid, 0, 2},
                      Case{"tile_edges_h80_i48", kTileEdgeTokens, 2 * kTileEdgeExperts, 2, 80, 48,
                           Routing::kTileEdges},
                      Case{"down_walk_h640_i160", 40, 8, 4, 640, 160, Routing::kSkewed}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

// ---- The simulated V100's bench (tools/sim_bench.sh runs the SimBench cases in timing mode):
// the model's ranks (H 2560, top-10), prepared weights, every expert T x 10 / 512 rows as in a
// prefill chunk of T tokens (160 at T 8192: one M tile; 640 at T 32768: four), enough experts
// that the gate/up GEMM fills the SMs simulated with at least one wave (one block an SM; 2 N
// tiles an M tile at I 160, 8 at I 640): 40 on a whole V100, 10 on a quarter (top-10 needs 10).
// The skewed case routes the same pairs as T 8192's over 40 experts by Zipf's law. Op 3 once,
// timed; the output rows of a sample of tokens against the reference.
constexpr int kSampledTokens = 48;

// Useful FLOPs and compulsory bytes of one execute on prepared weights: the routed pairs' three
// products, each prepared weight byte (payload and scales) once, x and out once, the routing.
struct Work {
  double flops, bytes, scale;  // scale: the whole op's routed pairs over the case's
};

Work MoeWork(const Case &c) {
  const double pairs = double(c.tokens) * c.topk, weights = 3.0 * c.inter * c.hidden * c.experts;
  const double flops = 2 * pairs * 3.0 * c.inter * c.hidden;
  const double bytes = weights / 2 + weights / 16 + 4.0 * c.tokens * c.hidden + 8 * pairs;
  return {flops, bytes, double(c.model_tokens) / c.tokens};
}

class SM70_Nvfp4MoeBench : public ::testing::TestWithParam<Case> {};

TEST_P(SM70_Nvfp4MoeBench, PreparedOnce) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Case &c = GetParam();
  const Inputs in = MakeInputs(c, uint32_t(std::hash<std::string>{}(c.name)));
  Device dev(c, in);
  const Work work = MoeWork(c);
  const std::string whole = "T " + std::to_string(c.model_tokens) + ", E 512, per layer and rank";
  sm70ops_bench::ReportWork(work.flops, work.bytes, work.scale, 1, whole.c_str());
  const std::vector<uint16_t> out = RunPrepared(plugin, dev, true);
  ASSERT_FALSE(out.empty());
  std::vector<int> sample;
  for (int i = 0; i < kSampledTokens; ++i)
    sample.push_back(int(int64_t(i) * c.tokens / kSampledTokens));
  std::vector<double> got;
  for (const int t : sample) {
    for (int n = 0; n < c.hidden; ++n) {
      got.push_back(sm70ops::ref::half_to_float(out[size_t(t) * c.hidden + n]));
    }
  }
  const sm70ops::ref::ErrorStats e = sm70ops::ref::compare(got, SampledReference(c, in, sample));
  EXPECT_EQ(e.non_finite, 0) << "NaN/Inf outputs (the reference has none)";
  EXPECT_LE(e.rel_l2, 5e-3) << "rel-L2 against the fp64 reference";
  sm70ops_bench::ReportCheck(kSampledTokens, e.non_finite == 0 && e.rel_l2 <= 5e-3,
                             "rel-L2 " + std::to_string(e.rel_l2));
}

INSTANTIATE_TEST_SUITE_P(
    SimBench, SM70_Nvfp4MoeBench,
    ::testing::Values(
        Case{"tp4_e10", 160, 10, 10, 2560, 160, Routing::kEven},
        Case{"tp1_e10", 160, 10, 10, 2560, 640, Routing::kEven},
        Case{"tp4_t32k", 640, 10, 10, 2560, 160, Routing::kEven, 0, 0, false, false, 32768},
        Case{"tp1_t32k", 640, 10, 10, 2560, 640, Routing::kEven, 0, 0, false, false, 32768},
        Case{"tp4_zipf", 160, 40, 10, 2560, 160, Routing::kZipf},
        // The full runs of the quarter's cases (tools/sim_bench.py --validate): four times the
        // experts (and the tokens that keep each one's rows) on the whole V100.
        Case{"tp4_e40", 640, 40, 10, 2560, 160, Routing::kEven},
        Case{"tp1_e40", 640, 40, 10, 2560, 640, Routing::kEven},
        Case{"tp4_t32k_e40", 2560, 40, 10, 2560, 160, Routing::kEven, 0, 0, false, false, 32768},
        Case{"tp1_t32k_e40", 2560, 40, 10, 2560, 640, Routing::kEven, 0, 0, false, false, 32768},
        Case{"tp4_zipf_e160", 640, 160, 10, 2560, 160, Routing::kZipf}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

}  // namespace
}  // namespace sm70ops_gpu
