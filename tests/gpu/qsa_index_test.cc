// SM70_QsaIndex: the plugin's QSA index against the CPU reference (tests/ref) on fresh random
// inputs, outputs and workspace poisoned before each run. Checked per case: the scores the
// kernels computed (rel-L2 of the sampled, kept and rescored scores, read from the workspace
// when one chunk holds every row), the token set (ops.md's near-tie rule on the groups), and the
// expansion of the GPU's own set, which must match bit for bit. The data-dependent cases (keys
// correlated along positions, hot regions, ...) are integration/python's GPU tests, on the
// generators the benches share.
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
#include "tests/sim_bench/report.h"

namespace sm70ops_gpu {
namespace {

// Which way a case makes the sampled threshold misjudge every long row (ScaleSampledKeys).
enum class Misjudge { kNone, kHighThreshold, kLowThreshold };

struct Case {
  std::string name;
  std::vector<std::pair<int, int>> requests;  // (query_len, seq_len)
  int topk;                                   // the budget B in tokens
  int ratio = 1;                              // c
  int page = 64;                              // P
  bool weighted = true;                       // false: weights absent (1/sqrt(128) a head)
  int q_row_pad = 0;                          // extra halves between q rows: a strided q view
  bool repeated_keys = false;                 // a few distinct keys repeated: exact ties everywhere
  int chunk_rows = 0;                         // > 0: cap the workspace to chunks of this many rows
  Misjudge misjudge = Misjudge::kNone;        // the keys the sample reads scaled to fool it
  int k_token_pad = 0;          // extra halves (NaN) between key rows: a strided k_index view
  bool page_clustered = false;  // each page's keys share a component (sm70ops.data's pages-0.7)
};

// gtest prints a failing case by its name.
void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

constexpr int kHeads = 4, kDim = 128;
constexpr int kKeepAllBound = 4096;  // the kernels' keep-all bound (the workspace view reports it)

// The batch (requests' pages scattered over a shuffled cache with 3 spare pages) and its data.
struct Inputs : sm70ops::ref::ScatteredBatch {
  sm70ops::ref::IndexInputs index;  // q dense [T,4,128]; k_index [num_pages, P/c, 128]
  int keys_per_page = 0;
  int max_keys = 0;  // max_seq_len / c
};

// The keys the sample reads (one per stratum, sm70_qsa_index_stratum_key) scaled by 4, so every
// row's threshold lands above nearly all other keys and too few reach it; or by 1/4, so that
// nearly every other key lands above it and more than the select holds are kept. Either way
// every long row must be rescored.
void ScaleSampledKeys(Inputs &in, float factor) {
  for (size_t r = 0; r < in.meta.seq_lens.size(); ++r) {
    const int keys = in.meta.seq_lens[r] / in.index.ratio;
    for (int s = 0;; ++s) {
      const int g = sm70_qsa_index_stratum_key(s);
      if (g >= keys) break;
      const int32_t page = in.meta.block_table[r * in.meta.max_pages + g / in.keys_per_page];
      uint16_t *key =
          &in.index.k_index[(int64_t(page) * in.keys_per_page + g % in.keys_per_page) * kDim];
      for (int d = 0; d < kDim; ++d) {
        key[d] = sm70ops::ref::float_to_half(factor * sm70ops::ref::half_to_float(key[d]));
      }
    }
  }
}

// sm70ops.data's pages-S keys (integration/python/sm70ops/data.py, S = kPageWeight): each page's
// keys mix their own normal values with one shared by the page, sqrt(1 - S^2) a + S b, so that
// a row's best keys come in whole pages, as real keys correlated along positions do.
constexpr float kPageWeight = 0.7f;

void ClusterByPage(Inputs &in, std::mt19937 &rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  const float own = std::sqrt(1.f - kPageWeight * kPageWeight);
  std::vector<float> shared(kDim);
  for (size_t key = 0; key < in.index.k_index.size() / kDim; ++key) {
    if (key % in.keys_per_page == 0) {
      for (float &v : shared) v = normal(rng);
    }
    uint16_t *k = &in.index.k_index[key * kDim];
    for (int d = 0; d < kDim; ++d) {
      k[d] = sm70ops::ref::float_to_half(own * sm70ops::ref::half_to_float(k[d]) +
                                         kPageWeight * shared[d]);
    }
  }
}

Inputs MakeInputs(const Case &c, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  static_cast<sm70ops::ref::ScatteredBatch &>(in) =
      sm70ops::ref::scattered_batch(c.requests, 3, rng, c.page);
  in.keys_per_page = c.page / c.ratio;
  in.max_keys = in.max_seq_len / c.ratio;
  auto &x = in.index;
  x.meta = in.meta;
  x.ratio = c.ratio;
  x.q = sm70ops::ref::random_halves(size_t(in.rows) * kHeads * kDim, rng);
  const size_t cache_keys = size_t(in.num_pages) * in.keys_per_page;
  x.k_index = sm70ops::ref::random_halves(cache_keys * kDim, rng);
  if (c.page_clustered) ClusterByPage(in, rng);
  if (c.repeated_keys) {  // every key is one of 7 distinct keys
    for (size_t key = 7; key < cache_keys; ++key) {
      std::copy_n(&x.k_index[(key % 7) * kDim], kDim, &x.k_index[key * kDim]);
    }
  }
  if (c.misjudge != Misjudge::kNone) {
    ScaleSampledKeys(in, c.misjudge == Misjudge::kHighThreshold ? 4.f : 0.25f);
  }
  if (c.weighted) {
    std::uniform_real_distribution<float> weight(-1.f, 1.f);
    x.w.resize(size_t(in.rows) * kHeads);
    for (float &w : x.w) w = weight(rng);
  }
  return in;
}

struct Outputs {
  std::vector<int32_t> topk_idx, sel_blocks, sel_count;
  std::vector<uint64_t> sel_mask;
  // What the kernels scored, from the workspace when one chunk held every row.
  bool single_chunk = false;
  sm70_qsa_index_workspace_view view{};
  std::vector<float> samples, cand_score, stored;
  std::vector<int32_t> count, tied, cand_pos;
  int nb = 0;
};

template <typename T>
void DownloadPiece(const DeviceBuffer &workspace, const void *at, std::vector<T> &out,
                   size_t count) {
  out.resize(count);
  const size_t offset =
      size_t(static_cast<const char *>(at) - static_cast<const char *>(workspace.data()));
  workspace.Download(out.data(), count * sizeof(T), offset);
}

// White box: the scores the kernels kept, when one chunk and one rescue group held every row.
void DownloadWorkspace(const DeviceBuffer &workspace, const Case &c, const Inputs &in,
                       Outputs &out) {
  sm70_qsa_index_split all{};  // the split that holds every row at once: the layout to read
  const uint64_t all_rows = sm70_qsa_index_workspace(in.rows, in.max_keys, ~0ull, &all);
  out.single_chunk = workspace.bytes() >= all_rows && c.chunk_rows == 0;
  if (!out.single_chunk) return;
  sm70_qsa_index_view(workspace.data(), &all, in.max_keys, &out.view);
  const auto &v = out.view;
  const size_t rows = size_t(in.rows);
  DownloadPiece(workspace, v.samples, out.samples, rows * v.sample_ld);
  DownloadPiece(workspace, v.count, out.count, rows);
  DownloadPiece(workspace, v.tied, out.tied, rows);
  DownloadPiece(workspace, v.cand_score, out.cand_score, rows * v.candidates);
  DownloadPiece(workspace, v.cand_pos, out.cand_pos, rows * v.candidates);
  DownloadPiece(workspace, v.stored, out.stored, rows * v.stored_ld);
}

// The op on the device: inputs uploaded once, outputs and workspace poisoned before each run.
class IndexRun {
 public:
  IndexRun(const Case &c, const Inputs &in)
      : T_(in.rows), width_(c.topk + c.ratio - 1), nb_(SelectionWidth(c, in)) {
    const auto &x = in.index;
    // q as a strided view at a byte offset inside a larger buffer.
    const int64_t q_row = kHeads * kDim + c.q_row_pad, q_offset_halves = 128;
    q_ = Uploaded(Strided(x.q, T_, kHeads * kDim, q_row, q_offset_halves, kNanHalf));
    // k_index with k_token_pad NaN halves after each key row; a padded view also starts 16
    // bytes into its buffer (16- but not 32-byte aligned).
    const int64_t k_row = kDim + c.k_token_pad;
    const int64_t k_rows = int64_t(in.num_pages) * in.keys_per_page;
    const int64_t k_offset_halves = c.k_token_pad ? 8 : 0;
    k_ = Uploaded(Strided(x.k_index, k_rows, kDim, k_row, k_offset_halves, kNanHalf));
    qsl_ = Uploaded(in.meta.query_start_loc), lens_ = Uploaded(in.meta.seq_lens);
    table_ = Uploaded(in.meta.block_table);
    topk_ = DeviceBuffer(T_ * width_ * 4), blocks_ = DeviceBuffer(T_ * nb_ * 4);
    masks_ = DeviceBuffer(T_ * nb_ * 8), count_ = DeviceBuffer(T_ * 4);
    Describe(c, in);
    sm70ops_desc_stride(Bind(call_, "q", q_, q_offset_halves * 2), 0, q_row);
    if (c.weighted) {
      w_ = Uploaded(x.w);
      Bind(call_, "weights", w_);
    }
    sm70ops_desc_stride(Bind(call_, "k_index", k_, k_offset_halves * 2), 1, k_row);
    Bind(call_, "query_start_loc", qsl_), Bind(call_, "seq_lens", lens_);
    Bind(call_, "block_table", table_), Bind(call_, "topk_idx", topk_);
    Bind(call_, "sel_blocks", blocks_), Bind(call_, "sel_mask", masks_);
    Bind(call_, "sel_count", count_);
  }
  IndexRun(const IndexRun &) = delete;  // call_ points into itself
  IndexRun &operator=(const IndexRun &) = delete;

  // NB: the most pages a row's token set can touch (abi/sm70ops.h).
  static int64_t SelectionWidth(const Case &c, const Inputs &in) {
    return sm70ops_desc_selection_width(c.topk, c.ratio, in.meta.max_pages);
  }

  // check() accepts, and the workspace it asks for is allocated.
  bool Accepted(const Plugin &plugin) {
    const sm70ops_decision d = Decide(plugin, call_.op, &call_.args);
    workspace_ = DeviceBuffer(d.workspace_bytes);
    return d.accepted;
  }

  void Poison(void *stream) {
    workspace_.PoisonAsync(0xff, stream);  // NaN scores
    for (DeviceBuffer *b : {&topk_, &blocks_, &masks_, &count_}) b->PoisonAsync(0x7f, stream);
  }

  sm70ops_status Execute(const Plugin &plugin, void *stream) {
    return plugin.api().execute(plugin.ctx(), call_.op, &call_.args, stream, workspace_.data(),
                                workspace_.bytes());
  }

  Outputs Download(const Case &c, const Inputs &in) const {
    Outputs out;
    out.nb = int(nb_);
    out.topk_idx.resize(T_ * width_), out.sel_blocks.resize(T_ * nb_);
    out.sel_mask.resize(T_ * nb_), out.sel_count.resize(T_);
    topk_.Download(out.topk_idx.data(), T_ * width_ * 4);
    blocks_.Download(out.sel_blocks.data(), T_ * nb_ * 4);
    masks_.Download(out.sel_mask.data(), T_ * nb_ * 8);
    count_.Download(out.sel_count.data(), T_ * 4);
    DownloadWorkspace(workspace_, c, in, out);
    return out;
  }

  std::vector<uint8_t> Bytes() const {  // the op's outputs, not its workspace
    std::vector<uint8_t> bytes(T_ * (width_ * 4 + nb_ * 12 + 4));
    uint8_t *p = bytes.data();
    topk_.Download(p, T_ * width_ * 4), p += T_ * width_ * 4;
    blocks_.Download(p, T_ * nb_ * 4), p += T_ * nb_ * 4;
    masks_.Download(p, T_ * nb_ * 8), p += T_ * nb_ * 8;
    count_.Download(p, T_ * 4);
    return bytes;
  }

 private:
  // Every output, and the weights when the case has them; workspace capped to `chunk_rows`.
  void Describe(const Case &c, const Inputs &in) {
    sm70ops_desc_qsa_index_sizes s{};
    s.batch = DescBatch(in, nb_);
    s.heads = kHeads, s.dim = kDim, s.topk = c.topk, s.compress_ratio = c.ratio;
    s.with_weights = c.weighted, s.with_topk_idx = 1, s.with_selection = 1;
    sm70ops_desc_qsa_index(&call_, &s, 0);
    sm70_qsa_index_split unused{};
    call_.args.qsa_index.max_workspace_bytes =
        c.chunk_rows ? sm70_qsa_index_workspace(c.chunk_rows, in.max_keys, ~0ull, &unused) : 0;
  }

  int64_t T_, width_, nb_;
  DeviceBuffer q_{0}, w_{0}, k_{0}, qsl_{0}, lens_{0}, table_{0};
  DeviceBuffer topk_{0}, blocks_{0}, masks_{0}, count_{0}, workspace_{0};
  sm70ops_desc_call call_;
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

// Sampled scores of every row that needed them (G > keep_all_max_len, and G > K), every kept
// key's score, and every score of a rescored row; a row of at most keep_all_max_len keys keeps
// all of them (which also pins the reported bound: a larger one would excuse sampled rows that
// keep fewer). Returns the rows the kernels rescored.
int ExpectScores(const Case &c, const Inputs &in, const Outputs &out,
                 const std::vector<std::vector<double>> &ref) {
  const auto &v = out.view;
  EXPECT_TRUE(v.keep_all_max_len > 0 && v.keep_all_max_len <= v.candidates) << v.keep_all_max_len;
  EXPECT_EQ(v.keep_all_max_len, kKeepAllBound) << "the ctx4096_keep_all_bound case sits on it";
  const int k = c.topk / c.ratio;
  const bool call_keeps_all = in.max_keys <= v.keep_all_max_len;
  ScoreError sampled, kept;
  int rescued = 0;
  for (int t = 0; t < in.rows; ++t) {
    const int keys = int(ref[t].size());
    if (keys <= k) continue;
    for (int s = 0; keys > v.keep_all_max_len && s < v.sample_ld; ++s) {
      const int key = sm70_qsa_index_stratum_key(s);
      if (key < keys) sampled.Add(out.samples[size_t(t) * v.sample_ld + s], ref[t][key]);
    }
    // A keep-all call writes no count, no positions and no ties: slot i holds key i, i < G.
    const int n = call_keeps_all ? keys : out.count[t];
    if (!call_keeps_all && keys <= v.keep_all_max_len) {
      EXPECT_EQ(n, keys) << "row " << t << " keeps all its keys";
    }
    const bool rescore = !call_keeps_all && (n > v.candidates || n + out.tied[t] < k);
    rescued += rescore;
    const float *scores =
        rescore ? &out.stored[size_t(t) * v.stored_ld] : &out.cand_score[size_t(t) * v.candidates];
    for (int i = 0; i < (rescore ? keys : std::min(n, v.candidates)); ++i) {
      const int pos = call_keeps_all || rescore ? i : out.cand_pos[size_t(t) * v.candidates + i];
      EXPECT_TRUE(pos >= 0 && pos < keys) << "row " << t << " kept position " << pos;
      if (pos >= 0 && pos < keys) kept.Add(scores[i], ref[t][pos]);
    }
  }
  EXPECT_EQ(sampled.non_finite + kept.non_finite, 0) << "scores the reference has as finite";
  EXPECT_LE(sampled.RelL2(), 1e-3) << "sampled scores rel-L2";
  EXPECT_LE(kept.RelL2(), 1e-3) << "kept and rescored scores rel-L2";
  std::printf("  scores rel-L2: sampled %.3g (%d), kept %.3g (%d); rescored rows %d\n",
              sampled.RelL2(), sampled.count, kept.RelL2(), kept.count, rescued);
  return rescued;
}

void ExpectExpansionOfOwnSet(const Case &c, const Inputs &in, const Outputs &out) {
  std::vector<sm70ops::ref::Expansion> rows;
  const int64_t width = c.topk + c.ratio - 1;
  for (int t = 0; t < in.rows; ++t) {
    std::vector<int32_t> row(&out.topk_idx[t * width], &out.topk_idx[t * width] + width);
    rows.push_back(sm70ops::ref::qsa_index_expand(row, c.page));
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
  const auto ref_scores = sm70ops::ref::qsa_index_scores(in.index);
  if (out.single_chunk) {
    const int rescued = ExpectScores(c, in, out, ref_scores);
    if (c.misjudge != Misjudge::kNone) {
      EXPECT_GT(rescued, 0) << "the fooled sample rescued no row";
    }
  }
  const auto verdict = sm70ops::ref::judge_topk(out.topk_idx, c.topk, in.index, ref_scores);
  EXPECT_TRUE(verdict.ok()) << verdict.failed_rows.size() << " rows differ beyond near ties, first "
                            << verdict.failed_rows.front();
  std::printf("  %d rows, %zu near-tie rows excused\n", in.rows, verdict.excused_rows.size());
  ExpectExpansionOfOwnSet(c, in, out);
}

// Two requests, one of them chunked, with rows above and below K, at the model's c 4 on 16-token
// pages.
const Case kRobustCase{"robust", {{40, 20000}, {7, 900}}, 1024, 4, 16, false, 0, false, 16};
// The same within the keep-all bound: no sample pass, the slot-j filter.
const Case kRobustKeepAllCase{
    "robust_keep_all", {{40, 3000}, {7, 900}}, 1024, 1, 64, true, 0, false, 16};

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

// Checked mode: one execute on `in` succeeds, and the next on the context reports the bad index
// the first one saw, naming `what`.
void ExpectReportedByTheNextCall(const Inputs &in, const std::string &what) {
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
  EXPECT_NE(std::string(plugin.api().last_error()).find(what), std::string::npos)
      << plugin.api().last_error();
}

// A block table entry past the cache reads as zero keys.
TEST(SM70_QsaIndexChecked, BadPageIdReportedByTheNextCall) {
  SM70OPS_REQUIRE_GPU();
  Inputs in = MakeInputs(kRobustCase, 7);
  in.meta.block_table[5] = in.num_pages + 7;  // request 0's page 5, below its context
  ExpectReportedByTheNextCall(in, "block_table page id");
}

// A query_start_loc that decreases, or does not end at T (without checked mode such rows are
// written as empty or wrong: the plugin cannot read device metadata without a synchronisation).
TEST(SM70_QsaIndexChecked, MalformedQueryStartLocReportedByTheNextCall) {
  SM70OPS_REQUIRE_GPU();
  // kRobustCase has T = 47 rows in two requests: {0, 40, 47}.
  for (const std::vector<int32_t> &starts : {std::vector<int32_t>{0, 48, 47}, {0, 40, 46}}) {
    SCOPED_TRACE(starts[1] * 100 + starts[2]);
    Inputs in = MakeInputs(kRobustCase, 7);
    in.meta.query_start_loc = starts;
    ExpectReportedByTheNextCall(in, "query_start_loc");
  }
}

// Context lengths around the group and page edges (1, 3, 4, 5, 63, 64, 65, 2051, 2052, 4097,
// 131072, 262144 tokens), c 1, 2 and 4, P 16, 32 and 64, weights given or absent.
const Case kCases[] = {
    {"ctx1", {{1, 1}}, 512},
    {"ctx63", {{1, 63}}, 512},
    {"ctx64", {{1, 64}}, 512},
    {"ctx65_rows9", {{9, 65}}, 512},
    {"ctx_equals_k", {{3, 2048}}, 2048},
    {"ctx4096_keep_all_bound", {{33, kKeepAllBound}}, 2048},
    {"ctx4097_k512", {{33, 4097}}, 512},
    {"ctx4097_k1024", {{33, 4097}}, 1024},
    {"ctx4097_k2048", {{33, 4097}}, 2048},
    {"ctx4097_k4096", {{33, 4097}}, 4096},
    {"ctx131072_k2048", {{5, 131072}}, 2048},
    {"ctx131072_k4096", {{3, 131072}}, 4096},
    {"c4_p16_short_rows",
     {{1, 1}, {1, 3}, {1, 4}, {1, 5}, {1, 63}, {1, 64}, {2, 65}},
     2048,
     4,
     16,
     false},
    {"c4_p64_short_rows", {{3, 5}, {2, 64}, {4, 65}}, 512, 4, 64, false},
    {"c4_p64_tail_edges", {{5, 2051}, {5, 2052}, {9, 4097}}, 2048, 4, 64, false},
    {"c4_p16_tail_edges_weighted", {{5, 2051}, {6, 2053}, {9, 4099}}, 2048, 4, 16, true},
    {"c4_p16_ctx20003", {{24, 20003}}, 2048, 4, 16, false},
    {"c4_p16_k512_ctx65539", {{17, 65539}}, 512, 4, 16, false},
    {"c4_p16_ctx131072", {{3, 131072}}, 2048, 4, 16, false},
    {"c4_p64_ctx262144", {{2, 262144}}, 2048, 4, 64, false},
    {"c1_p64_ctx262144", {{2, 262144}}, 2048},
    {"c1_p16_ctx9000", {{19, 9000}}, 1024, 1, 16},
    {"c2_p32_ctx12345", {{11, 12345}, {3, 77}}, 2048, 2, 32},
    {"c2_p16_ctx4099_k4096", {{7, 4099}, {2, 8193}}, 4096, 2, 16, false},
    {"batch4_strided_q", {{17, 300}, {40, 5000}, {1, 1}, {70, 2100}}, 1024, 1, 64, true, 64},
    {"c4_batch4_strided_q", {{17, 301}, {40, 20001}, {1, 2}, {70, 8403}}, 2048, 4, 16, false, 64},
    {"repeated_keys_ties", {{20, 3000}}, 512, 1, 64, true, 0, true},
    // Past keep_all_max_len: ties at a sampled threshold (the tie bitmaps).
    {"repeated_keys_ties_sampled", {{7, 12000}}, 512, 1, 64, true, 0, true},
    {"c4_repeated_keys_ties_sampled", {{7, 48003}}, 512, 4, 16, false, 0, true},
    {"chunked_rows", {{100, 4097}, {19, 999}}, 2048, 1, 64, true, 8, false, 16},
    {"c4_chunked_rows", {{100, 30001}, {19, 999}}, 2048, 4, 16, false, 8, false, 16},
    {"chunked_keep_all", {{40, 3000}, {19, 999}}, 512, 1, 64, true, 0, false, 16},
    {"misjudged_high_threshold",
     {{6, 20000}},
     512,
     1,
     64,
     true,
     0,
     false,
     0,
     Misjudge::kHighThreshold},
    {"misjudged_low_threshold",
     {{6, 40000}},
     2048,
     1,
     64,
     true,
     0,
     false,
     0,
     Misjudge::kLowThreshold},
    {"c4_misjudged_rows",
     {{6, 80003}, {3, 40001}},
     2048,
     4,
     16,
     false,
     0,
     false,
     0,
     Misjudge::kHighThreshold},
    {"strided_keys_16_byte_rows",
     {{21, 3000}, {4, 700}},
     512,
     1,
     64,
     true,
     0,
     false,
     0,
     Misjudge::kNone,
     8},
    {"c4_strided_keys",
     {{21, 30000}, {4, 700}},
     2048,
     4,
     16,
     false,
     0,
     false,
     0,
     Misjudge::kNone,
     8},
};

// Cases sized for the simulated V100 (tools/sim_tests.sh runs Sim/*): seconds each there, and
// every path: rows that take everything, keep-all calls, the sampled threshold, ties at it,
// rows the fooled sample misjudges either way, tails, c 1 / 2 / 4 and P 16 / 32 / 64.
const Case kSimCases[] = {
    {"c1_p64_short_rows", {{3, 5}, {2, 64}, {4, 65}}, 512},
    {"c4_p16_tails",
     {{1, 3}, {1, 4}, {1, 5}, {2, 63}, {1, 65}, {3, 2051}, {2, 2053}},
     2048,
     4,
     16,
     false},
    {"c4_p64_keep_all_call", {{7, 9000}}, 512, 4, 64, false},
    {"c2_p32_keep_all_rows", {{9, 3001}, {2, 77}}, 1024, 2, 32},
    {"c1_p16_sampled", {{5, 5000}}, 512, 1, 16},
    {"c1_p64_ties_sampled", {{4, 6000}}, 512, 1, 64, true, 0, true},
    {"c1_misjudged_high_threshold",
     {{4, 9000}},
     512,
     1,
     64,
     true,
     0,
     false,
     0,
     Misjudge::kHighThreshold},
    {"c1_misjudged_low_threshold",
     {{3, 20000}},
     2048,
     1,
     64,
     true,
     0,
     false,
     0,
     Misjudge::kLowThreshold},
};

INSTANTIATE_TEST_SUITE_P(Sim, SM70_QsaIndex, ::testing::ValuesIn(kSimCases),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

INSTANTIATE_TEST_SUITE_P(Shapes, SM70_QsaIndex, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

// ---- The simulated V100's bench (tools/sim_bench.sh runs the SimBench cases in timing mode):
// the model's weight-free indexer (c 4, B 2048, 64-token pages), rows at the end of a 128K and an
// 8K context, on i.i.d. and page-clustered keys. One timed execute; a sample of rows judged
// against the reference (ops.md's near-tie rule), their expansion exact.
constexpr int kSampledRows = 16;

// Useful FLOPs (one scoring of each complete group a row sees, 4 heads of 128) and compulsory
// bytes (the keys once, q, topk_idx and the expansion) of the case; and how many times its FLOPs
// the whole prefill of its context takes (every row of the prompt scoring its own groups).
struct Work {
  double flops, bytes, scale;
};

Work IndexWork(const Case &c, const Inputs &in) {
  const double per_group = 2.0 * kHeads * kDim;
  double groups = 0;
  for (const auto &row : sm70ops::ref::varlen_rows(in.meta)) groups += row.len / c.ratio;
  double prompt = 0;
  for (int64_t len = 1; len <= in.max_seq_len; ++len) prompt += double(len / c.ratio);
  const double keys = double(in.max_seq_len / c.ratio) * kDim * 2;
  const double per_row =
      kHeads * kDim * 2 + (c.topk + c.ratio - 1) * 4.0 + IndexRun::SelectionWidth(c, in) * 12.0 + 4;
  return {per_group * groups, keys + per_row * in.rows, prompt / groups};
}

class SM70_QsaIndexBench : public ::testing::TestWithParam<Case> {};

TEST_P(SM70_QsaIndexBench, Once) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Case &c = GetParam();
  const Inputs in = MakeInputs(c, uint32_t(std::hash<std::string>{}(c.name)));
  const Work work = IndexWork(c, in);
  const std::string whole =
      "the whole " + std::to_string(in.max_seq_len) + "-token prefill, per layer";
  // The prefill runs in chunks of sm70ops_bench::kPrefillChunk rows, a call each.
  const int calls =
      (in.max_seq_len + sm70ops_bench::kPrefillChunk - 1) / sm70ops_bench::kPrefillChunk;
  sm70ops_bench::ReportWork(work.flops, work.bytes, work.scale, calls, whole.c_str());
  IndexRun run(c, in);
  ASSERT_TRUE(run.Accepted(plugin));
  run.Poison(nullptr);
  sm70ops_bench::BeginTimed();
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << plugin.api().last_error();
  sm70ops_bench::EndTimed();
  Outputs out = run.Download(c, in);
  // The sampled rows as a batch of their own (one row a request, the same cache) for the
  // reference, and the GPU's rows of them.
  const auto rows = sm70ops::ref::varlen_rows(in.meta);
  const int64_t width = c.topk + c.ratio - 1, pages = in.meta.max_pages;
  sm70ops::ref::IndexInputs sampled = in.index;
  sampled.q.clear();
  sampled.meta.query_start_loc = {0}, sampled.meta.seq_lens.clear();
  sampled.meta.block_table.clear();
  std::vector<int32_t> gpu_rows;
  for (int i = 0; i < kSampledRows; ++i) {
    const int t = int(int64_t(i) * in.rows / kSampledRows);
    sampled.meta.query_start_loc.push_back(i + 1);
    sampled.meta.seq_lens.push_back(rows[t].len);
    const auto table = in.meta.block_table.begin() + rows[t].request * pages;
    sampled.meta.block_table.insert(sampled.meta.block_table.end(), table, table + pages);
    const auto q = in.index.q.begin() + int64_t(t) * kHeads * kDim;
    sampled.q.insert(sampled.q.end(), q, q + kHeads * kDim);
    const auto set = out.topk_idx.begin() + t * width;
    gpu_rows.insert(gpu_rows.end(), set, set + width);
  }
  const auto verdict =
      sm70ops::ref::judge_topk(gpu_rows, c.topk, sampled, sm70ops::ref::qsa_index_scores(sampled));
  EXPECT_TRUE(verdict.ok()) << verdict.failed_rows.size()
                            << " sampled rows differ beyond near ties";
  ExpectExpansionOfOwnSet(c, in, out);
  char detail[96];
  std::snprintf(detail, sizeof(detail), "%zu near-tie rows excused", verdict.excused_rows.size());
  sm70ops_bench::ReportCheck(kSampledRows, !HasFailure(), detail);
}

INSTANTIATE_TEST_SUITE_P(
    SimBench, SM70_QsaIndexBench,
    ::testing::Values(
        Case{"iid_128k", {{128, 131072}}, 2048, 4, 64, false},
        Case{"pages_128k",
             {{128, 131072}},
             2048,
             4,
             64,
             false,
             0,
             false,
             0,
             Misjudge::kNone,
             0,
             true},
        Case{"iid_8k", {{512, 8192}}, 2048, 4, 64, false},
        Case{"pages_8k", {{512, 8192}}, 2048, 4, 64, false, 0, false, 0, Misjudge::kNone, 0, true}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

}  // namespace
}  // namespace sm70ops_gpu
