// SM70_QsaIndex: the plugin's QSA index against the CPU reference (tests/ref) on fresh random
// inputs, outputs and workspace poisoned before each run. Checked per case: the scores the
// kernels computed (rel-L2 of the sampled and the kept scores, read from the workspace when one
// chunk holds every row), the top-k (ops.md's near-tie rule), and the expansion of the GPU's own
// top-k, which must match bit for bit.
#include "kernels/qsa_index/qsa_index.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/gpu_env.h"
#include "tests/gpu/robustness.h"
#include "tests/ref/half.h"
#include "tests/ref/qsa_index_ref.h"

namespace sm70ops_gpu {
namespace {

struct Case {
  std::string name;
  std::vector<std::pair<int, int>> requests;  // (query_len, seq_len)
  int topk;
  int q_row_pad = 0;               // extra halves between q rows: a strided q view
  bool repeated_keys = false;      // a few distinct keys repeated: exact ties everywhere
  int chunk_rows = 0;              // > 0: cap the workspace to chunks of this many rows
  bool sampled_keys_loud = false;  // sampled positions get 4x keys: the threshold misjudges
  int k_token_pad = 0;             // extra halves (NaN) between key rows: a strided k_index view
};

// gtest prints a failing case by its name.
void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

constexpr int kHeads = 4, kDim = 128, kPage = 64;
constexpr int kKeepAllBound = 4096;  // the kernels' keep-all bound (the workspace view reports it)

// The batch (requests' pages scattered over a shuffled cache with 3 spare pages) and its data.
struct Inputs : sm70ops::ref::ScatteredBatch {
  std::vector<uint16_t> q, k;  // q dense [T,4,128]; k [num_pages,64,128]
  std::vector<float> w;
};

// Keys at the positions the kernels sample (the first 32 of every 512) scaled by 4, so every
// row's threshold lands above nearly all unsampled keys and too few keys reach it.
void ScaleSampledKeys(Inputs &in) {
  for (size_t r = 0; r < in.meta.seq_lens.size(); ++r) {
    for (int j = 0; j < in.meta.seq_lens[r]; ++j) {
      if (j % 512 >= 32) continue;
      const int64_t tok = sm70ops::ref::physical_token(in.meta, int(r), j);
      for (int d = 0; d < kDim; ++d) {
        uint16_t &h = in.k[tok * kDim + d];
        h = sm70ops::ref::float_to_half(4.f * sm70ops::ref::half_to_float(h));
      }
    }
  }
}

Inputs MakeInputs(const Case &c, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  static_cast<sm70ops::ref::ScatteredBatch &>(in) =
      sm70ops::ref::scattered_batch(c.requests, 3, rng);
  in.q = sm70ops::ref::random_halves(size_t(in.rows) * kHeads * kDim, rng);
  in.k = sm70ops::ref::random_halves(size_t(in.num_pages) * kPage * kDim, rng);
  if (c.repeated_keys) {  // every token's key is one of 7 distinct keys
    for (size_t tok = 7; tok < size_t(in.num_pages) * kPage; ++tok) {
      std::copy_n(&in.k[(tok % 7) * kDim], kDim, &in.k[tok * kDim]);
    }
  }
  if (c.sampled_keys_loud) ScaleSampledKeys(in);
  std::uniform_real_distribution<float> weight(-1.f, 1.f);
  in.w.resize(size_t(in.rows) * kHeads);
  for (float &x : in.w) x = weight(rng);
  return in;
}

struct Outputs {
  std::vector<int32_t> topk_idx, sel_blocks, sel_count;
  std::vector<uint64_t> sel_mask;
  // What the kernels scored, from the workspace when one chunk held every row.
  bool single_chunk = false;
  sm70_qsa_index_workspace_view view{};
  std::vector<float> samples, cand_score;
  std::vector<int32_t> count, cand_pos;
  std::vector<uint32_t> ties;
  int nb = 0;
};

// White box: the scores the kernels kept, when one chunk held every row.
void DownloadWorkspace(const DeviceBuffer &workspace, const Case &c, const Inputs &in,
                       Outputs &out) {
  int32_t chunk_rows = 0;  // rows of one chunk holding them all: the layout to read
  const uint64_t all_rows = sm70_qsa_index_workspace(in.rows, in.max_seq_len, ~0ull, &chunk_rows);
  out.single_chunk = workspace.bytes() >= all_rows && c.chunk_rows == 0;
  if (!out.single_chunk) return;
  sm70_qsa_index_view(workspace.data(), chunk_rows, in.max_seq_len, &out.view);
  const auto offset = [&](const void *p) {
    return size_t(static_cast<const char *>(p) - static_cast<const char *>(workspace.data()));
  };
  const size_t cands = size_t(in.rows) * out.view.candidates;
  out.samples.resize(size_t(in.rows) * out.view.sample_ld);
  out.count.resize(in.rows), out.cand_score.resize(cands), out.cand_pos.resize(cands);
  workspace.Download(out.samples.data(), out.samples.size() * 4, offset(out.view.samples));
  workspace.Download(out.count.data(), out.count.size() * 4, offset(out.view.count));
  workspace.Download(out.cand_score.data(), cands * 4, offset(out.view.cand_score));
  workspace.Download(out.cand_pos.data(), cands * 4, offset(out.view.cand_pos));
  out.ties.resize(size_t(in.rows) * out.view.tie_words);
  workspace.Download(out.ties.data(), out.ties.size() * 4, offset(out.view.ties));
}

// The op on the device: inputs uploaded once, outputs and workspace poisoned before each run.
class IndexRun {
 public:
  IndexRun(const Case &c, const Inputs &in)
      : T_(in.rows), K_(c.topk), nb_(std::min<int>(c.topk, in.meta.max_pages)) {
    const int64_t R = int64_t(c.requests.size());
    // q as a strided view at a byte offset inside a larger buffer.
    const int64_t q_row = kHeads * kDim + c.q_row_pad, q_offset_halves = 128;
    q_ = Uploaded(Strided(in.q, T_, kHeads * kDim, q_row, q_offset_halves, kNanHalf));
    // k_index with k_token_pad NaN halves after each key row; a padded view also starts 16
    // bytes into its buffer (16- but not 32-byte aligned).
    const int64_t k_row = kDim + c.k_token_pad, k_rows = int64_t(in.num_pages) * kPage;
    const int64_t k_offset_halves = c.k_token_pad > 0 ? 8 : 0;
    k_ = Uploaded(Strided(in.k, k_rows, kDim, k_row, k_offset_halves, kNanHalf));
    w_ = Uploaded(in.w);
    qsl_ = Uploaded(in.meta.query_start_loc), lens_ = Uploaded(in.meta.seq_lens);
    table_ = Uploaded(in.meta.block_table);
    topk_ = DeviceBuffer(T_ * K_ * 4), blocks_ = DeviceBuffer(T_ * nb_ * 4);
    masks_ = DeviceBuffer(T_ * nb_ * 8), count_ = DeviceBuffer(T_ * 4);
    Add(q_.data(), kF16, {T_, kHeads, kDim}, {q_row, kDim, 1}, &args_.q, q_offset_halves * 2);
    Add(w_.data(), kF32, {T_, kHeads}, DenseStrides({T_, kHeads}), &args_.weights);
    const std::vector<int64_t> k_shape = {in.num_pages, kPage, kDim};
    Add(k_.data(), kF16, k_shape, {kPage * k_row, k_row, 1}, &args_.k_index, k_offset_halves * 2);
    Add(qsl_.data(), kI32, {R + 1}, {1}, &args_.query_start_loc);
    Add(lens_.data(), kI32, {R}, {1}, &args_.seq_lens);
    Add(table_.data(), kI32, {R, in.meta.max_pages}, {in.meta.max_pages, 1}, &args_.block_table);
    Add(topk_.data(), kI32, {T_, K_}, {K_, 1}, &args_.topk_idx);
    Add(blocks_.data(), kI32, {T_, nb_}, {nb_, 1}, &args_.sel_blocks);
    Add(masks_.data(), kU64, {T_, nb_}, {nb_, 1}, &args_.sel_mask);
    Add(count_.data(), kI32, {T_}, {1}, &args_.sel_count);
    args_.struct_size = sizeof(args_);
    args_.topk = c.topk;
    args_.max_seq_len = in.max_seq_len;
    args_.max_query_len = in.max_query_len;
    int32_t unused = 0;
    args_.max_workspace_bytes =
        c.chunk_rows ? sm70_qsa_index_workspace(c.chunk_rows, in.max_seq_len, ~0ull, &unused) : 0;
  }

  // check() accepts, and the workspace it asks for is allocated.
  bool Accepted(const Plugin &plugin) {
    sm70ops_decision d = {};
    d.struct_size = sizeof(d);
    EXPECT_EQ(plugin.api().check(plugin.ctx(), SM70OPS_OP_QSA_INDEX, &args_, &d), SM70OPS_OK);
    EXPECT_TRUE(d.accepted) << plugin.api().reason_name(d.reason) << ": " << d.message;
    workspace_ = DeviceBuffer(d.workspace_bytes);
    return d.accepted;
  }

  void Poison(void *stream) {
    workspace_.PoisonAsync(0xff, stream);  // NaN scores
    for (DeviceBuffer *b : {&topk_, &blocks_, &masks_, &count_}) b->PoisonAsync(0x7f, stream);
  }

  sm70ops_status Execute(const Plugin &plugin, void *stream) {
    return plugin.api().execute(plugin.ctx(), SM70OPS_OP_QSA_INDEX, &args_, stream,
                                workspace_.data(), workspace_.bytes());
  }

  Outputs Download(const Case &c, const Inputs &in) const {
    Outputs out;
    out.nb = int(nb_);
    out.topk_idx.resize(T_ * K_), out.sel_blocks.resize(T_ * nb_), out.sel_mask.resize(T_ * nb_);
    out.sel_count.resize(T_);
    topk_.Download(out.topk_idx.data(), T_ * K_ * 4);
    blocks_.Download(out.sel_blocks.data(), T_ * nb_ * 4);
    masks_.Download(out.sel_mask.data(), T_ * nb_ * 8);
    count_.Download(out.sel_count.data(), T_ * 4);
    DownloadWorkspace(workspace_, c, in, out);
    return out;
  }

  std::vector<uint8_t> Bytes() const {  // the op's outputs, not its workspace
    std::vector<uint8_t> bytes(T_ * (K_ * 4 + nb_ * 12 + 4));
    uint8_t *p = bytes.data();
    topk_.Download(p, T_ * K_ * 4), p += T_ * K_ * 4;
    blocks_.Download(p, T_ * nb_ * 4), p += T_ * nb_ * 4;
    masks_.Download(p, T_ * nb_ * 8), p += T_ * nb_ * 8;
    count_.Download(p, T_ * 4);
    return bytes;
  }

 private:
  void Add(void *data, DLDataType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides,
           const DLTensor **slot, uint64_t byte_offset = 0) {
    views_.push_back(std::make_unique<View>(data, dtype, shape, strides, byte_offset));
    *slot = views_.back()->get();
  }

  int64_t T_, K_, nb_;
  DeviceBuffer q_{0}, w_{0}, k_{0}, qsl_{0}, lens_{0}, table_{0};
  DeviceBuffer topk_{0}, blocks_{0}, masks_{0}, count_{0}, workspace_{0};
  std::vector<std::unique_ptr<View>> views_;
  sm70ops_qsa_index_args args_ = {};
};

Outputs RunOp(const Plugin &plugin, const Case &c, const Inputs &in) {
  IndexRun run(c, in);
  if (!run.Accepted(plugin)) return {};
  run.Poison(nullptr);
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << plugin.api().last_error();
  Synchronize();
  return run.Download(c, in);
}

// rel-L2 over (GPU score, reference score) pairs, and how many GPU scores were not finite.
struct ScoreError {
  double err2 = 0, ref2 = 0;
  int non_finite = 0, count = 0;
  void Add(double gpu, double ref) {
    non_finite += !std::isfinite(gpu);
    err2 += (gpu - ref) * (gpu - ref), ref2 += ref * ref, ++count;
  }
  double RelL2() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2); }
};

// Sampled scores of every row that needed them (L > keep_all_max_len, and L > K), and every kept
// key's score; a row of at most keep_all_max_len keys keeps all of them (which also pins the
// reported bound: a larger one would excuse sampled rows that keep fewer).
void ExpectScores(const Case &c, const Inputs &in, const Outputs &out,
                  const std::vector<std::vector<double>> &ref) {
  const auto &v = out.view;
  ASSERT_TRUE(v.keep_all_max_len > 0 && v.keep_all_max_len <= v.candidates) << v.keep_all_max_len;
  EXPECT_EQ(v.keep_all_max_len, kKeepAllBound) << "the ctx4096_keep_all_bound case sits on it";
  ScoreError sampled, kept;
  int rescued = 0;
  for (int t = 0; t < in.rows; ++t) {
    const int len = int(ref[t].size());
    if (len <= c.topk) continue;
    for (int i = 0; len > v.keep_all_max_len && i < v.sample_ld; ++i) {
      const int key = i / v.sample_group * v.sample_span + i % v.sample_group;
      if (key < len) sampled.Add(out.samples[size_t(t) * v.sample_ld + i], ref[t][key]);
    }
    // A keep-all call writes no count, no positions and no ties: slot i holds key i, i < L.
    const bool call_keeps_all = in.max_seq_len <= v.keep_all_max_len;
    const int n = call_keeps_all ? len : out.count[t];
    if (!call_keeps_all && len <= v.keep_all_max_len) {
      EXPECT_EQ(n, len) << "row " << t << " keeps all its keys";
    }
    int tied = 0;
    for (int w = 0; !call_keeps_all && w < v.tie_words; ++w)
      tied += __builtin_popcount(out.ties[size_t(t) * v.tie_words + w]);
    rescued += n + tied < c.topk || n > v.candidates;
    for (int i = 0; i < std::min(n, v.candidates); ++i) {
      const int pos = call_keeps_all ? i : out.cand_pos[size_t(t) * v.candidates + i];
      ASSERT_TRUE(pos >= 0 && pos < len) << "row " << t << " kept position " << pos;
      kept.Add(out.cand_score[size_t(t) * v.candidates + i], ref[t][pos]);
    }
  }
  EXPECT_EQ(sampled.non_finite + kept.non_finite, 0) << "scores the reference has as finite";
  EXPECT_LE(sampled.RelL2(), 1e-3) << "sampled scores rel-L2";
  EXPECT_LE(kept.RelL2(), 1e-3) << "kept scores rel-L2";
  if (c.sampled_keys_loud) {
    EXPECT_GT(rescued, 0) << "the misjudging sample rescued no row";
  }
  std::printf("  scores rel-L2: sampled %.3g (%d), kept %.3g (%d); rescued rows %d\n",
              sampled.RelL2(), sampled.count, kept.RelL2(), kept.count, rescued);
}

void ExpectExpansionOfOwnTopk(const Case &c, const Inputs &in, const Outputs &out) {
  std::vector<sm70ops::ref::Expansion> rows;
  for (int t = 0; t < in.rows; ++t) {
    std::vector<int32_t> row(&out.topk_idx[int64_t(t) * c.topk],
                             &out.topk_idx[int64_t(t) * c.topk] + c.topk);
    rows.push_back(sm70ops::ref::qsa_index_expand(row));
  }
  const auto want = sm70ops::ref::pack_selection(rows, out.nb);
  EXPECT_EQ(out.sel_count, want.count);
  EXPECT_EQ(out.sel_blocks, want.blocks);
  EXPECT_EQ(out.sel_mask, want.masks);
}

class SM70_QsaIndex : public ::testing::TestWithParam<Case> {};

TEST_P(SM70_QsaIndex, MatchesReference) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Case &c = GetParam();
  const Inputs in = MakeInputs(c, uint32_t(std::hash<std::string>{}(c.name)));
  const Outputs out = RunOp(plugin, c, in);
  if (HasFailure()) return;
  const auto ref_scores = sm70ops::ref::qsa_index_scores(in.q, in.w, in.k, in.meta);
  if (out.single_chunk) ExpectScores(c, in, out, ref_scores);
  const auto verdict = sm70ops::ref::judge_topk(out.topk_idx, c.topk, ref_scores);
  EXPECT_TRUE(verdict.ok()) << verdict.failed_rows.size() << " rows differ beyond near ties, first "
                            << verdict.failed_rows.front();
  std::printf("  %d rows, %zu near-tie rows excused\n", in.rows, verdict.excused_rows.size());
  ExpectExpansionOfOwnTopk(c, in, out);
}

// Two requests, one of them chunked, with rows above and below K.
const Case kRobustCase{"robust", {{40, 5000}, {7, 900}}, 1024, 0, false, 16};
// The same within the keep-all bound: no sample pass, the slot-j filter.
const Case kRobustKeepAllCase{"robust_keep_all", {{40, 3000}, {7, 900}}, 1024, 0, false, 16};

TEST(SM70_QsaIndexRobust, GraphReplayEqualsEager) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  for (const Case &c : {kRobustCase, kRobustKeepAllCase}) {
    SCOPED_TRACE(c.name);
    const Inputs in = MakeInputs(c, 7);
    IndexRun run(c, in);
    ASSERT_TRUE(run.Accepted(plugin));
    ExpectGraphReplayEqualsEager(plugin, run);
  }
}

TEST(SM70_QsaIndexRobust, EightStreamsEqualSerial) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  for (const Case &c : {kRobustCase, kRobustKeepAllCase}) {
    SCOPED_TRACE(c.name);
    const Inputs in = MakeInputs(c, 7);
    ExpectConcurrentStreamsBitIdentical<IndexRun>(
        plugin,
        [&] {
          auto run = std::make_unique<IndexRun>(c, in);
          EXPECT_TRUE(run->Accepted(plugin));
          return run;
        },
        8);
  }
}

// Checked mode: a block table entry past the cache reads as zero keys and is reported by the
// next execute on the context.
TEST(SM70_QsaIndexChecked, BadPageIdReportedByTheNextCall) {
  SM70OPS_REQUIRE_GPU();
  Inputs in = MakeInputs(kRobustCase, 7);
  in.meta.block_table[5] = in.num_pages + 7;  // request 0's page 5, below its context
  setenv("SM70OPS_CHECKED", "1", 1);
  Plugin plugin;
  unsetenv("SM70OPS_CHECKED");
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  IndexRun run(kRobustCase, in);
  ASSERT_TRUE(run.Accepted(plugin));
  run.Poison(nullptr);
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << plugin.api().last_error();
  Synchronize();
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_ERR_INDEX_OUT_OF_RANGE);
  EXPECT_NE(std::string(plugin.api().last_error()).find("block_table page id"), std::string::npos)
      << plugin.api().last_error();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SM70_QsaIndex,
    ::testing::Values(
        Case{"ctx1", {{1, 1}}, 512}, Case{"ctx63", {{1, 63}}, 512}, Case{"ctx64", {{1, 64}}, 512},
        Case{"ctx65_rows9", {{9, 65}}, 512}, Case{"ctx_equals_k", {{3, 2048}}, 2048},
        Case{"ctx4096_keep_all_bound", {{33, kKeepAllBound}}, 2048},
        Case{"ctx4097_k512", {{33, 4097}}, 512}, Case{"ctx4097_k1024", {{33, 4097}}, 1024},
        Case{"ctx4097_k2048", {{33, 4097}}, 2048}, Case{"ctx4097_k4096", {{33, 4097}}, 4096},
        Case{"ctx131072_k2048", {{5, 131072}}, 2048}, Case{"ctx131072_k4096", {{3, 131072}}, 4096},
        Case{"batch4_strided_q", {{17, 300}, {40, 5000}, {1, 1}, {70, 2100}}, 1024, 64},
        Case{"repeated_keys_ties", {{20, 3000}}, 512, 0, true},
        // Past keep_all_max_len: ties at a sampled threshold (the tie bitmaps).
        Case{"repeated_keys_ties_sampled", {{7, 12000}}, 512, 0, true},
        Case{"chunked_rows", {{100, 4097}, {19, 999}}, 2048, 8, false, 16},
        Case{"chunked_keep_all", {{40, 3000}, {19, 999}}, 512, 0, false, 16},
        Case{"rescue_misjudged_rows", {{6, 20000}}, 512, 0, false, 0, true},
        Case{"strided_keys_16_byte_rows", {{21, 3000}, {4, 700}}, 512, 0, false, 0, false, 8}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

}  // namespace
}  // namespace sm70ops_gpu
