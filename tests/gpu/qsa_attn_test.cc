// SM70_QsaAttn: the plugin's QSA selected attention against the CPU reference (tests/ref) on fresh
// random inputs, out and lse poisoned before each run. Gates of ops.md: rel-L2 <= 2e-3 against
// the fp64 reference, max-abs error <= 2x that of the same-precision (fp32 math, fp16 out)
// reference, no NaN or Inf the reference does not have; an empty selection gives 0 and -inf;
// selecting everything equals dense causal attention.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/gpu/gpu_env.h"
#include "tests/gpu/robustness.h"
#include "tests/ref/compare.h"
#include "tests/ref/half.h"
#include "tests/ref/qsa_attn_ref.h"

namespace sm70ops_gpu {
namespace {

using sm70ops::ref::Selection;

constexpr int kPage = 64;

enum class Pick {
  kAll,        // every token 0..pos: must equal dense causal attention
  kSparse,     // K tokens spread uniformly: about one per page
  kClustered,  // runs of 16 consecutive tokens
  kRealistic,  // clustered, each row keeping ~80% of its neighbour's tokens
  kEmptyRows,  // realistic, with every third row selecting nothing
};

struct Case {
  std::string name;
  std::vector<std::pair<int, int>> requests;  // (query_len, seq_len)
  int q_heads, kv_heads, head_dim;
  int topk;
  Pick pick;
  int q_row_pad = 0;      // strided q
  bool fused_kv = false;  // k and v as views of one [2, pages, 64, Hkv, D] buffer
  float sharpness = 1.f;  // sm_scale x this: logits wide enough that row maxima keep jumping
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

// The batch (requests' pages scattered over a shuffled cache with 2 spare pages) and its data.
struct Inputs : sm70ops::ref::ScatteredBatch {
  std::vector<uint16_t> q;
  sm70ops::ref::KvCache kv;
  Selection sel;
  double overlap = 0;  // mean Jaccard of adjacent rows' page sets
};

// Up to k positions in [0, len): runs of 16 from random starts.
std::set<int32_t> Clustered(int len, int k, std::mt19937 &rng) {
  std::set<int32_t> out;
  std::uniform_int_distribution<int> start(0, std::max(0, len - 1));
  while (int(out.size()) < std::min(k, len)) {
    for (int j = start(rng), n = 0; n < 16 && j < len && int(out.size()) < k; ++j, ++n)
      out.insert(j);
  }
  return out;
}

std::set<int32_t> Sparse(int len, int k, std::mt19937 &rng) {
  std::set<int32_t> out;
  std::uniform_int_distribution<int> any(0, std::max(0, len - 1));
  while (int(out.size()) < std::min(k, len)) out.insert(any(rng));
  return out;
}

// The neighbour's tokens still in range, a fifth of them replaced by fresh runs.
std::set<int32_t> Drift(const std::set<int32_t> &previous, int len, int k, std::mt19937 &rng) {
  std::set<int32_t> out;
  std::bernoulli_distribution keep(0.8);
  for (int32_t j : previous) {
    if (j < len && keep(rng)) out.insert(j);
  }
  for (int32_t j : Clustered(len, k - int(out.size()), rng)) out.insert(j);
  return out;
}

std::vector<sm70ops::ref::Expansion> PickTokens(const Case &c, const Inputs &in,
                                                std::mt19937 &rng) {
  const auto rows = sm70ops::ref::varlen_rows(in.meta);
  std::vector<sm70ops::ref::Expansion> out;
  std::set<int32_t> previous;
  for (int t = 0; t < in.rows; ++t) {
    const int len = rows[t].len;
    const bool first = t == 0 || rows[t - 1].request != rows[t].request;
    std::set<int32_t> chosen;
    if (c.pick == Pick::kSparse) chosen = Sparse(len, c.topk, rng);
    if (c.pick == Pick::kClustered) chosen = Clustered(len, c.topk, rng);
    if (c.pick == Pick::kRealistic || c.pick == Pick::kEmptyRows) {
      chosen = first ? Clustered(len, c.topk, rng) : Drift(previous, len, c.topk, rng);
    }
    previous = chosen;
    if (c.pick == Pick::kEmptyRows && t % 3 == 1) chosen.clear();
    out.push_back(sm70ops::ref::qsa_index_expand({chosen.begin(), chosen.end()}));
  }
  return out;
}

double MeanNeighbourJaccard(const std::vector<sm70ops::ref::Expansion> &rows) {
  double sum = 0;
  int pairs = 0;
  for (size_t t = 1; t < rows.size(); ++t) {
    std::vector<int32_t> both;
    const auto &a = rows[t - 1].blocks, &b = rows[t].blocks;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
    const size_t either = a.size() + b.size() - both.size();
    if (either > 0) sum += double(both.size()) / double(either), ++pairs;
  }
  return pairs ? sum / pairs : 0;
}

Inputs MakeInputs(const Case &c) {
  std::mt19937 rng(uint32_t(std::hash<std::string>{}(c.name)));
  Inputs in;
  static_cast<sm70ops::ref::ScatteredBatch &>(in) =
      sm70ops::ref::scattered_batch(c.requests, 2, rng);
  in.q = sm70ops::ref::random_halves(size_t(in.rows) * c.q_heads * c.head_dim, rng);
  const size_t kv_elems = size_t(in.num_pages) * kPage * c.kv_heads * c.head_dim;
  in.kv = {sm70ops::ref::random_halves(kv_elems, rng), sm70ops::ref::random_halves(kv_elems, rng),
           c.kv_heads, c.head_dim};
  const int nb = std::min(in.meta.max_pages, std::max(1, c.topk));
  if (c.pick == Pick::kAll) {
    in.sel = sm70ops::ref::select_all_tokens(in.meta, in.meta.max_pages);
  } else {
    const auto rows = PickTokens(c, in, rng);
    in.overlap = MeanNeighbourJaccard(rows);
    in.sel = sm70ops::ref::pack_selection(rows, nb);
  }
  return in;
}

struct Outputs {
  std::vector<uint16_t> o;
  std::vector<float> lse;
};

// The op on the device: inputs uploaded once, outputs poisoned before each run.
class AttnRun {
 public:
  AttnRun(const Case &c, const Inputs &in, float sm_scale)
      : T_(in.rows), Hq_(c.q_heads), D_(c.head_dim), q_row_(Hq_ * D_ + c.q_row_pad) {
    const int64_t Hkv = c.kv_heads, R = int64_t(c.requests.size()), P = in.num_pages;
    const int64_t nb = in.sel.nb;
    q_ = Uploaded(Strided(in.q, T_, Hq_ * D_, q_row_, 0, kNanHalf));
    std::vector<uint16_t> kv_host(in.kv.k);  // k then v: one [2, P, 64, Hkv, D] buffer
    kv_host.insert(kv_host.end(), in.kv.v.begin(), in.kv.v.end());
    kv_ = Uploaded(kv_host);
    k_only_ = Uploaded(in.kv.k), v_only_ = Uploaded(in.kv.v);
    qsl_ = Uploaded(in.meta.query_start_loc), lens_ = Uploaded(in.meta.seq_lens);
    table_ = Uploaded(in.meta.block_table);
    blocks_ = Uploaded(in.sel.blocks), masks_ = Uploaded(in.sel.masks);
    count_ = Uploaded(in.sel.count);
    o_ = DeviceBuffer(T_ * Hq_ * D_ * 2), lse_ = DeviceBuffer(T_ * Hq_ * 4);
    const std::vector<int64_t> kv_shape = {P, kPage, Hkv, D_};
    const uint64_t v_offset = c.fused_kv ? uint64_t(P * kPage * Hkv * D_) * 2 : 0;
    Add(q_.data(), kF16, {T_, Hq_, D_}, {q_row_, D_, 1}, &args_.q);
    Add(c.fused_kv ? kv_.data() : k_only_.data(), kF16, kv_shape, DenseStrides(kv_shape),
        &args_.k_cache);
    Add(c.fused_kv ? kv_.data() : v_only_.data(), kF16, kv_shape, DenseStrides(kv_shape),
        &args_.v_cache, v_offset);
    Add(qsl_.data(), kI32, {R + 1}, {1}, &args_.query_start_loc);
    Add(lens_.data(), kI32, {R}, {1}, &args_.seq_lens);
    Add(table_.data(), kI32, {R, in.meta.max_pages}, {in.meta.max_pages, 1}, &args_.block_table);
    Add(blocks_.data(), kI32, {T_, nb}, {nb, 1}, &args_.sel_blocks);
    Add(masks_.data(), kU64, {T_, nb}, {nb, 1}, &args_.sel_mask);
    Add(count_.data(), kI32, {T_}, {1}, &args_.sel_count);
    Add(o_.data(), kF16, {T_, Hq_, D_}, DenseStrides({T_, Hq_, D_}), &args_.out);
    Add(lse_.data(), kF32, {T_, Hq_}, {Hq_, 1}, &args_.lse);
    args_.struct_size = sizeof(args_);
    args_.sm_scale = sm_scale;
    args_.max_seq_len = in.max_seq_len;
    args_.max_query_len = in.max_query_len;
  }

  // check() accepts, and the (empty) workspace is allocated.
  bool Accepted(const Plugin &plugin) {
    sm70ops_decision d = {};
    d.struct_size = sizeof(d);
    EXPECT_EQ(plugin.api().check(plugin.ctx(), SM70OPS_OP_QSA_ATTN, &args_, &d), SM70OPS_OK);
    EXPECT_TRUE(d.accepted) << plugin.api().reason_name(d.reason) << ": " << d.message;
    workspace_ = DeviceBuffer(d.workspace_bytes);
    return d.accepted;
  }

  void Poison(void *stream) { o_.PoisonAsync(0x7f, stream), lse_.PoisonAsync(0x7f, stream); }

  sm70ops_status Execute(const Plugin &plugin, void *stream) {
    return plugin.api().execute(plugin.ctx(), SM70OPS_OP_QSA_ATTN, &args_, stream,
                                workspace_.data(), workspace_.bytes());
  }

  Outputs Download() const {
    Outputs out;
    out.o.resize(T_ * Hq_ * D_), out.lse.resize(T_ * Hq_);
    o_.Download(out.o.data(), out.o.size() * 2);
    lse_.Download(out.lse.data(), out.lse.size() * 4);
    return out;
  }

  std::vector<uint8_t> Bytes() const {
    const Outputs out = Download();
    std::vector<uint8_t> bytes(out.o.size() * 2 + out.lse.size() * 4);
    std::memcpy(bytes.data(), out.o.data(), out.o.size() * 2);
    std::memcpy(bytes.data() + out.o.size() * 2, out.lse.data(), out.lse.size() * 4);
    return bytes;
  }

 private:
  void Add(void *data, DLDataType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides,
           const DLTensor **slot, uint64_t byte_offset = 0) {
    views_.push_back(std::make_unique<View>(data, dtype, shape, strides, byte_offset));
    *slot = views_.back()->get();
  }

  int64_t T_, Hq_, D_, q_row_;
  DeviceBuffer q_{0}, kv_{0}, k_only_{0}, v_only_{0}, qsl_{0}, lens_{0}, table_{0};
  DeviceBuffer blocks_{0}, masks_{0}, count_{0}, o_{0}, lse_{0}, workspace_{0};
  std::vector<std::unique_ptr<View>> views_;
  sm70ops_qsa_attn_args args_ = {};
};

Outputs RunOp(const Plugin &plugin, const Case &c, const Inputs &in, float sm_scale) {
  AttnRun run(c, in, sm_scale);
  if (!run.Accepted(plugin)) return {};
  run.Poison(nullptr);
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << plugin.api().last_error();
  Synchronize();
  return run.Download();
}

void ExpectLse(const std::vector<float> &got, const std::vector<double> &want) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool empty = std::isinf(want[i]) && want[i] < 0;
    bad += empty ? !(std::isinf(got[i]) && got[i] < 0) : !(std::abs(got[i] - want[i]) <= 1e-3);
  }
  EXPECT_EQ(bad, 0) << "lse entries off by more than 1e-3 (or not -inf for an empty set)";
}

class SM70_QsaAttn : public ::testing::TestWithParam<Case> {};

// ops.md's gates for `out` against the fp64 and the same-precision references.
void ExpectMatchesReference(const Case &c, const Inputs &in, float sm_scale, const Outputs &out) {
  using sm70ops::ref::AttnPrecision;
  const auto ref = sm70ops::ref::qsa_attn_ref(in.q, c.q_heads, in.kv, in.meta, in.sel, sm_scale);
  const auto same = sm70ops::ref::qsa_attn_ref(in.q, c.q_heads, in.kv, in.meta, in.sel, sm_scale,
                                               AttnPrecision::kFp32Fp16Out);
  std::vector<double> got(out.o.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = sm70ops::ref::half_to_float(out.o[i]);
  const auto gpu = sm70ops::ref::compare(got, ref.o),
             fp16_ref = sm70ops::ref::compare(same.o, ref.o);
  EXPECT_EQ(gpu.non_finite, 0);
  EXPECT_LE(gpu.rel_l2, 2e-3);
  EXPECT_LE(gpu.max_abs, 2 * fp16_ref.max_abs) << "same-precision reference: " << fp16_ref.max_abs;
  ExpectLse(out.lse, ref.lse);
  if (c.pick == Pick::kAll) {  // selecting everything is dense causal attention
    const auto dense =
        sm70ops::ref::dense_causal_attn_ref(in.q, c.q_heads, in.kv, in.meta, sm_scale);
    EXPECT_LE(sm70ops::ref::compare(got, dense.o).rel_l2, 2e-3) << "against dense causal attention";
  }
  std::printf(
      "  rel-L2 %.3g, max-abs %.3g (same-precision reference %.3g), neighbour overlap %.2f\n",
      gpu.rel_l2, gpu.max_abs, fp16_ref.max_abs, in.overlap);
}

TEST_P(SM70_QsaAttn, MatchesReference) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Case &c = GetParam();
  const Inputs in = MakeInputs(c);
  const float sm_scale = c.sharpness / std::sqrt(float(c.head_dim));
  const Outputs out = RunOp(plugin, c, in, sm_scale);
  if (HasFailure()) return;
  ExpectMatchesReference(c, in, sm_scale, out);
}

// The TP4 shape with realistic selections, for the checks every execute must pass.
const Case kRobustCase{"robust", {{24, 3000}, {9, 700}}, 4, 1, 256, 512, Pick::kRealistic};

TEST(SM70_QsaAttnRobust, GraphReplayEqualsEager) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Inputs in = MakeInputs(kRobustCase);
  AttnRun run(kRobustCase, in, 0.0625f);
  ASSERT_TRUE(run.Accepted(plugin));
  ExpectGraphReplayEqualsEager(plugin, run);
}

TEST(SM70_QsaAttnRobust, EightStreamsEqualSerial) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Inputs in = MakeInputs(kRobustCase);
  ExpectConcurrentStreamsBitIdentical<AttnRun>(
      plugin,
      [&] {
        auto run = std::make_unique<AttnRun>(kRobustCase, in, 0.0625f);
        EXPECT_TRUE(run->Accepted(plugin));
        return run;
      },
      8);
}

// Checked mode: a block table entry past the cache is skipped (reads as zero keys) and reported
// by the next execute on the context; without checked mode it is skipped silently.
TEST(SM70_QsaAttnChecked, BadPageIdReportedByTheNextCall) {
  SM70OPS_REQUIRE_GPU();
  Inputs in = MakeInputs(kRobustCase);
  in.meta.block_table[3] = in.num_pages + 7;  // request 0's page 3: selected by its rows
  for (const bool checked : {true, false}) {
    SCOPED_TRACE(checked ? "checked" : "unchecked");
    setenv("SM70OPS_CHECKED", checked ? "1" : "0", 1);
    Plugin plugin;
    unsetenv("SM70OPS_CHECKED");
    ASSERT_TRUE(plugin.error().empty()) << plugin.error();
    AttnRun run(kRobustCase, in, 0.0625f);
    ASSERT_TRUE(run.Accepted(plugin));
    EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << plugin.api().last_error();
    Synchronize();
    const sm70ops_status next = run.Execute(plugin, nullptr);
    Synchronize();
    if (checked) {
      EXPECT_EQ(next, SM70OPS_ERR_INDEX_OUT_OF_RANGE);
      EXPECT_NE(std::string(plugin.api().last_error()).find("block_table page id"),
                std::string::npos)
          << plugin.api().last_error();
      EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << "the report is given once";
      Synchronize();
    } else {
      EXPECT_EQ(next, SM70OPS_OK) << plugin.api().last_error();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SM70_QsaAttn,
    ::testing::Values(
        Case{"tp4_realistic", {{48, 5000}}, 4, 1, 256, 2048, Pick::kRealistic},
        Case{"tp4_sharp", {{40, 6000}}, 4, 1, 256, 2048, Pick::kRealistic, 0, false, 32.f},
        Case{"tp4_all_equals_dense", {{21, 700}}, 4, 1, 256, 2048, Pick::kAll},
        Case{"tp4_sparse", {{16, 9000}}, 4, 1, 256, 512, Pick::kSparse},
        Case{"tp4_clustered_partial_page", {{13, 4133}}, 4, 1, 256, 1024, Pick::kClustered},
        Case{"tp4_empty_rows", {{10, 3000}}, 4, 1, 256, 512, Pick::kEmptyRows},
        Case{"batch3_strided_fused_kv",
             {{9, 2100}, {1, 1}, {30, 900}},
             4,
             1,
             256,
             512,
             Pick::kRealistic,
             64,
             true},
        Case{"d128_g8_hkv2", {{20, 1500}}, 16, 2, 128, 512, Pick::kRealistic},
        Case{"d128_g1", {{33, 800}}, 2, 2, 128, 256, Pick::kClustered},
        // Group 1 at D 256 (one 16-row fragment, tiles of 16 rows): request 0 fills a tile and
        // part of a second, request 1 part of its own; both contexts longer than top-k.
        Case{"d256_g1_batch2", {{19, 2500}, {6, 700}}, 2, 2, 256, 512, Pick::kRealistic},
        // The whole model's TP1 shape (ops.md: 16 query heads, 2 KV heads, D 256).
        Case{"tp1_realistic", {{23, 3000}}, 16, 2, 256, 2048, Pick::kRealistic},
        Case{"d256_g16_all", {{5, 400}}, 16, 1, 256, 4096, Pick::kAll},
        Case{"d128_g3", {{11, 1000}}, 6, 2, 128, 256, Pick::kSparse}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

}  // namespace
}  // namespace sm70ops_gpu
