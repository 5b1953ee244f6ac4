// SM70_QsaAttn: the plugin's QSA selected attention against the CPU reference (tests/ref) on fresh
// random inputs, out and lse poisoned before each run. Gates of ops.md: rel-L2 <= 2e-3 against
// the fp64 reference, max-abs error <= 2x that of the same-precision (fp32 math, fp16 out)
// reference, no NaN or Inf the reference does not have; an empty selection gives 0 and -inf;
// selecting everything equals dense causal attention. Cases at the model's shapes (ops.md v2:
// 6 query heads per KV head at TP4, 24/2 at TP1, D 256, 16-, 32- and 64-token pages, op 1's
// token sets of 4-token groups, the sigmoid gate) and at odd ones; batches cut the kernel's row
// tiles (48 or 96 MMA rows: 8 or 16 rows at G 6) at request boundaries and leave partial tiles.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
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
#include "tests/sim_bench/report.h"

namespace sm70ops_gpu {
namespace {

using sm70ops::ref::Expansion;
using sm70ops::ref::Selection;

constexpr int kRatio = 4;  // op 1's compress ratio c for the model: tokens a selected group holds

enum class Pick {
  kAll,     // all-ones masks over every page 0..pos: must equal dense causal attention
  kModel,   // op 1's token set: B/c groups of c tokens and the tail, ~80% kept from the neighbour
  kSparse,  // B single tokens spread uniformly
  kEmptyRows,  // kModel, with every third row selecting nothing
  kRuns,       // bench_attn's: runs of 16 tokens whose scores drift slowly row to row (RunSelector)
};

struct Case {
  std::string name;
  std::vector<std::pair<int, int>> requests;  // (query_len, seq_len)
  int q_heads, kv_heads, head_dim, page;
  int budget;  // B, tokens a row selects (kModel: B / c groups plus the tail)
  Pick pick;
  bool gated = false;
  int row_pad = 0;        // strided q, gate and out: rows this many elements apart beyond Hq x D
  bool fused_kv = false;  // k and v as views of one [2, pages, P, Hkv, D] buffer
  float sharpness = 1.f;  // sm_scale x this: logits wide enough that row maxima keep jumping
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

// The batch (requests' pages scattered over a shuffled cache with 2 spare pages) and its data.
struct Inputs : sm70ops::ref::ScatteredBatch {
  std::vector<uint16_t> q, gate;  // gate empty: ungated
  sm70ops::ref::KvCache kv;
  Selection sel;
  double overlap = 0;  // mean Jaccard of adjacent rows' page sets
};

// Op 1's token set for a row of `len` keys (ops.md): budget / c of its complete groups, then the
// tail tokens no complete group holds. The row keeps each of `groups` (its neighbour's, on entry)
// with probability 0.8 and draws fresh groups for the rest; `groups` returns the row's own.
std::vector<int32_t> ModelTokens(int len, int budget, std::set<int> &groups, std::mt19937 &rng) {
  const int complete = len / kRatio, want = std::min(budget / kRatio, complete);
  std::set<int> kept;
  std::bernoulli_distribution keep(0.8);
  for (int g : groups) {
    if (g < complete && keep(rng)) kept.insert(g);
  }
  std::uniform_int_distribution<int> any(0, std::max(0, complete - 1));
  while (int(kept.size()) < want) kept.insert(any(rng));
  groups = kept;
  return sm70ops::ref::qsa_index_token_set({kept.begin(), kept.end()}, kRatio, len);
}

// The token sets of python -m sm70ops bench qsa_attn (integration/python/sm70ops/bench_attn.py,
// Selector), for the consecutive rows of one request: a row takes the B/16 best complete runs of
// 16 tokens (whole groups) and the tail, run j scoring base[j] + the mean of the last 32 rows'
// N(0, 1) draws (times sqrt(32): unit variance), so that scores drift slowly along the rows as
// the indexer's do; neighbouring rows share about 70% of their pages at 128K. A row with at most
// B/c complete groups takes every token.
class RunSelector {
 public:
  static constexpr int kRun = 16, kWindow = 32;

  RunSelector(int seq_len, std::mt19937 &rng)
      : rng_(rng), base_(seq_len / kRun), sum_(base_.size()) {
    for (double &b : base_) b = normal_(rng_);
    for (int i = 0; i + 1 < kWindow; ++i) Draw();
  }

  std::vector<int32_t> Next(int len, int budget) {
    Draw();
    const int complete = len / kRatio;
    if (complete <= budget / kRatio) return sm70ops::ref::qsa_index_token_set({}, kRatio, len);
    std::vector<std::pair<double, int>> scores;
    for (int j = 0; j < len / kRun; ++j) {
      scores.emplace_back(-(base_[j] + sum_[j] / std::sqrt(double(kWindow))), j);
    }
    const int take = budget / kRun;
    std::nth_element(scores.begin(), scores.begin() + take, scores.end());
    std::vector<int32_t> groups;
    for (int i = 0; i < take; ++i) {
      for (int g = 0; g < kRun / kRatio; ++g)
        groups.push_back(scores[i].second * kRun / kRatio + g);
    }
    std::sort(groups.begin(), groups.end());
    return sm70ops::ref::qsa_index_token_set(groups, kRatio, len);
  }

 private:
  // One row's draws into the window's sums, the oldest row's out once the window is full.
  void Draw() {
    std::vector<double> draw(base_.size());
    for (size_t j = 0; j < draw.size(); ++j) sum_[j] += (draw[j] = normal_(rng_));
    window_.push_back(std::move(draw));
    if (window_.size() > kWindow) {
      for (size_t j = 0; j < sum_.size(); ++j) sum_[j] -= window_.front()[j];
      window_.pop_front();
    }
  }

  std::mt19937 &rng_;
  std::normal_distribution<double> normal_;
  std::vector<double> base_, sum_;
  std::deque<std::vector<double>> window_;
};

std::vector<int32_t> SparseTokens(int len, int budget, std::mt19937 &rng) {
  std::set<int32_t> out;
  std::uniform_int_distribution<int> any(0, len - 1);
  while (int(out.size()) < std::min(budget, len)) out.insert(any(rng));
  return {out.begin(), out.end()};
}

std::vector<Expansion> PickTokens(const Case &c, const Inputs &in, std::mt19937 &rng) {
  const auto rows = sm70ops::ref::varlen_rows(in.meta);
  std::vector<Expansion> out;
  std::set<int> groups;
  std::unique_ptr<RunSelector> runs;
  for (int t = 0; t < in.rows; ++t) {
    if (t == 0 || rows[t - 1].request != rows[t].request) {
      groups.clear();
      runs = std::make_unique<RunSelector>(in.meta.seq_lens[rows[t].request], rng);
    }
    std::vector<int32_t> tokens = c.pick == Pick::kSparse ? SparseTokens(rows[t].len, c.budget, rng)
                                  : c.pick == Pick::kRuns
                                      ? runs->Next(rows[t].len, c.budget)
                                      : ModelTokens(rows[t].len, c.budget, groups, rng);
    if (c.pick == Pick::kEmptyRows && t % 3 == 1) tokens.clear();
    out.push_back(sm70ops::ref::qsa_index_expand(tokens, c.page));
  }
  return out;
}

double MeanNeighbourJaccard(const std::vector<Expansion> &rows) {
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

// sel_blocks' width: what ops.md says always suffices (sparse picks are single tokens, c = 1);
// every page for kAll.
int SelectionWidth(const Case &c, const Inputs &in) {
  if (c.pick == Pick::kAll) return in.meta.max_pages;
  const int ratio = c.pick == Pick::kSparse ? 1 : kRatio;
  return int(sm70ops_desc_selection_width(c.budget, ratio, in.meta.max_pages));
}

Inputs MakeInputs(const Case &c) {
  std::mt19937 rng(uint32_t(std::hash<std::string>{}(c.name)));
  Inputs in;
  static_cast<sm70ops::ref::ScatteredBatch &>(in) =
      sm70ops::ref::scattered_batch(c.requests, 2, rng, c.page);
  const size_t q_elems = size_t(in.rows) * c.q_heads * c.head_dim;
  in.q = sm70ops::ref::random_halves(q_elems, rng);
  if (c.gated) in.gate = sm70ops::ref::random_halves(q_elems, rng);
  const size_t kv_elems = size_t(in.num_pages) * c.page * c.kv_heads * c.head_dim;
  in.kv = {sm70ops::ref::random_halves(kv_elems, rng), sm70ops::ref::random_halves(kv_elems, rng),
           c.kv_heads, c.head_dim};
  if (c.pick == Pick::kAll) {
    in.sel = sm70ops::ref::select_all_tokens(in.meta, SelectionWidth(c, in));
  } else {
    const auto rows = PickTokens(c, in, rng);
    in.overlap = MeanNeighbourJaccard(rows);
    in.sel = sm70ops::ref::pack_selection(rows, SelectionWidth(c, in));
  }
  return in;
}

struct Outputs {
  std::vector<uint16_t> o;  // [T, Hq, D], dense
  std::vector<float> lse;
};

// The op on the device: inputs uploaded once, outputs poisoned before each run.
class AttnRun {
 public:
  AttnRun(const Case &c, const Inputs &in, float sm_scale)
      : T_(in.rows), Hq_(c.q_heads), D_(c.head_dim), row_(Hq_ * D_ + c.row_pad) {
    q_ = Uploaded(Strided(in.q, T_, Hq_ * D_, row_, 0, kNanHalf));
    if (c.fused_kv) {  // k then v: one [2, pages, P, Hkv, D] buffer, both bound to k_
      std::vector<uint16_t> kv(in.kv.k);
      kv.insert(kv.end(), in.kv.v.begin(), in.kv.v.end());
      k_ = Uploaded(kv);
    } else {
      k_ = Uploaded(in.kv.k), v_ = Uploaded(in.kv.v);
    }
    qsl_ = Uploaded(in.meta.query_start_loc), lens_ = Uploaded(in.meta.seq_lens);
    table_ = Uploaded(in.meta.block_table);
    blocks_ = Uploaded(in.sel.blocks), masks_ = Uploaded(in.sel.masks);
    count_ = Uploaded(in.sel.count);
    o_ = DeviceBuffer(T_ * row_ * 2), lse_ = DeviceBuffer(T_ * Hq_ * 4);
    if (!in.gate.empty()) gate_ = Uploaded(Strided(in.gate, T_, Hq_ * D_, row_, 0, kNanHalf));
    Describe(c, in, sm_scale);
    Bind(call_, "k_cache", k_);
    Bind(call_, "v_cache", c.fused_kv ? k_ : v_, c.fused_kv ? in.kv.k.size() * 2 : 0);
    Bind(call_, "query_start_loc", qsl_), Bind(call_, "seq_lens", lens_);
    Bind(call_, "block_table", table_), Bind(call_, "sel_blocks", blocks_);
    Bind(call_, "sel_mask", masks_), Bind(call_, "sel_count", count_);
    Bind(call_, "lse", lse_);
    sm70ops_desc_stride(Bind(call_, "q", q_), 0, row_);
    sm70ops_desc_stride(Bind(call_, "out", o_), 0, row_);
    if (!in.gate.empty()) sm70ops_desc_stride(Bind(call_, "gate", gate_), 0, row_);
  }
  AttnRun(const AttnRun &) = delete;  // call_ points into itself
  AttnRun &operator=(const AttnRun &) = delete;

  // As an ABI 1.0 host sends it: the struct ends before `gate`, which the plugin must not read.
  void AsAbi10() { call_.args.qsa_attn.struct_size = SM70OPS_QSA_ATTN_ARGS_SIZE_1_0; }

  // check() accepts, and the (empty) workspace is allocated.
  bool Accepted(const Plugin &plugin) {
    const sm70ops_decision d = Decide(plugin, call_.op, &call_.args);
    workspace_ = DeviceBuffer(d.workspace_bytes);
    return d.accepted;
  }

  // Every byte of out's buffer (the padding between strided rows too) and of lse.
  void Poison(void *stream) { o_.PoisonAsync(0x7f, stream), lse_.PoisonAsync(0x7f, stream); }

  sm70ops_status Execute(const Plugin &plugin, void *stream) {
    return plugin.api().execute(plugin.ctx(), call_.op, &call_.args, stream, workspace_.data(),
                                workspace_.bytes());
  }

  // out's rows without their padding, which must still hold the poison.
  Outputs Download() const {
    std::vector<uint16_t> strided(T_ * row_);
    o_.Download(strided.data(), strided.size() * 2);
    Outputs out;
    for (int64_t t = 0; t < T_; ++t) {
      const auto row = strided.begin() + t * row_;
      out.o.insert(out.o.end(), row, row + Hq_ * D_);
      EXPECT_TRUE(std::all_of(row + Hq_ * D_, row + row_, [](uint16_t h) { return h == 0x7f7f; }))
          << "row " << t << ": out written past its view";
    }
    out.lse.resize(T_ * Hq_);
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
  // lse always, the gate when the case has one.
  void Describe(const Case &c, const Inputs &in, float sm_scale) {
    sm70ops_desc_qsa_attn_sizes s{};
    s.batch = DescBatch(in, in.sel.nb);
    s.q_heads = Hq_, s.kv_heads = c.kv_heads, s.head_dim = D_;
    s.sm_scale = sm_scale;
    s.with_lse = 1, s.with_gate = !in.gate.empty();
    sm70ops_desc_qsa_attn(&call_, &s, 0);
  }

  int64_t T_, Hq_, D_, row_;
  DeviceBuffer q_{0}, gate_{0}, k_{0}, v_{0}, qsl_{0}, lens_{0}, table_{0};
  DeviceBuffer blocks_{0}, masks_{0}, count_{0}, o_{0}, lse_{0}, workspace_{0};
  sm70ops_desc_call call_;
};

Outputs RunOp(const Plugin &plugin, AttnRun &run) {
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

// ops.md's gates for `out` against the fp64 and the same-precision references; `gate` is the
// one the reference applies (empty: none).
void ExpectMatchesReference(const Case &c, const Inputs &in, const std::vector<uint16_t> &gate,
                            float sm_scale, const Outputs &out) {
  using sm70ops::ref::AttnPrecision;
  const auto ref =
      sm70ops::ref::qsa_attn_ref(in.q, c.q_heads, in.kv, in.meta, in.sel, sm_scale, gate);
  const auto same = sm70ops::ref::qsa_attn_ref(in.q, c.q_heads, in.kv, in.meta, in.sel, sm_scale,
                                               gate, AttnPrecision::kFp32Fp16Out);
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
        sm70ops::ref::dense_causal_attn_ref(in.q, c.q_heads, in.kv, in.meta, sm_scale, gate);
    EXPECT_LE(sm70ops::ref::compare(got, dense.o).rel_l2, 2e-3) << "against dense causal attention";
  }
  std::printf(
      "  rel-L2 %.3g, max-abs %.3g (same-precision reference %.3g), neighbour overlap %.2f\n",
      gpu.rel_l2, gpu.max_abs, fp16_ref.max_abs, in.overlap);
}

float ScaleOf(const Case &c) { return c.sharpness / std::sqrt(float(c.head_dim)); }

class SM70_QsaAttn : public ::testing::TestWithParam<Case> {};

TEST_P(SM70_QsaAttn, MatchesReference) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Case &c = GetParam();
  const Inputs in = MakeInputs(c);
  AttnRun run(c, in, ScaleOf(c));
  const Outputs out = RunOp(plugin, run);
  if (HasFailure()) return;
  ExpectMatchesReference(c, in, in.gate, ScaleOf(c), out);
}

// The model's TP4 rank (6 query heads, 1 KV head, D 256) on 16-token pages, gated, for the checks
// every execute must pass.
const Case kRobustCase{"robust", {{24, 3000}, {9, 700}}, 6, 1, 256, 16, 512, Pick::kModel, true};

TEST(SM70_QsaAttnRobust, GraphReplayEqualsEager) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Inputs in = MakeInputs(kRobustCase);
  AttnRun run(kRobustCase, in, ScaleOf(kRobustCase));
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
        auto run = std::make_unique<AttnRun>(kRobustCase, in, ScaleOf(kRobustCase));
        EXPECT_TRUE(run->Accepted(plugin));
        return run;
      },
      8);
}

// A 1.0 host's struct ends before `gate`: whatever lies past it (here a real gate) is not read,
// and the result is the ungated one.
TEST(SM70_QsaAttnAbi, A10StructIsUngated) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Inputs in = MakeInputs(kRobustCase);
  AttnRun run(kRobustCase, in, ScaleOf(kRobustCase));
  run.AsAbi10();
  const Outputs out = RunOp(plugin, run);
  if (HasFailure()) return;
  ExpectMatchesReference(kRobustCase, in, {}, ScaleOf(kRobustCase), out);
}

// Runs kRobustCase on `in` in checked mode or not: one execute succeeds; the next reports the
// bad index the first one saw, naming `what`, once (checked), or succeeds (not).
void ExpectReportedByTheNextCall(const Inputs &in, bool checked, const std::string &what) {
  setenv("SM70OPS_CHECKED", checked ? "1" : "0", 1);
  Plugin plugin;
  unsetenv("SM70OPS_CHECKED");
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  AttnRun run(kRobustCase, in, ScaleOf(kRobustCase));
  ASSERT_TRUE(run.Accepted(plugin));
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << plugin.api().last_error();
  Synchronize();
  const sm70ops_status next = run.Execute(plugin, nullptr);
  Synchronize();
  if (!checked) {
    EXPECT_EQ(next, SM70OPS_OK) << plugin.api().last_error();
    return;
  }
  EXPECT_EQ(next, SM70OPS_ERR_INDEX_OUT_OF_RANGE);
  EXPECT_NE(std::string(plugin.api().last_error()).find(what), std::string::npos)
      << plugin.api().last_error();
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << "the report is given once";
  Synchronize();
}

// Checked mode: a block table entry past the cache is skipped (reads as zero keys) and reported
// by the next execute on the context; without checked mode it is skipped silently.
TEST(SM70_QsaAttnChecked, BadPageIdReportedByTheNextCall) {
  SM70OPS_REQUIRE_GPU();
  Inputs in = MakeInputs(kRobustCase);
  in.meta.block_table[3] = in.num_pages + 7;  // request 0's page 3: selected by its rows
  for (const bool checked : {true, false}) {
    SCOPED_TRACE(checked ? "checked" : "unchecked");
    ExpectReportedByTheNextCall(in, checked, "block_table page id");
  }
}

// Checked mode: a query_start_loc that decreases, or does not end at T, is reported by the next
// execute (without checked mode such rows are written as another request's or not at all: the
// plugin cannot read device metadata without a synchronisation).
TEST(SM70_QsaAttnChecked, MalformedQueryStartLocReportedByTheNextCall) {
  SM70OPS_REQUIRE_GPU();
  // kRobustCase has T = 33 rows in two requests: {0, 24, 33}.
  for (const std::vector<int32_t> &starts : {std::vector<int32_t>{0, 34, 33}, {0, 24, 32}}) {
    SCOPED_TRACE(starts[1] * 100 + starts[2]);
    Inputs in = MakeInputs(kRobustCase);
    in.meta.query_start_loc = starts;
    ExpectReportedByTheNextCall(in, true, "query_start_loc");
  }
}

// Checked mode: a row whose sel_blocks descend and leave [0, max_pages) is reported by the next
// execute; its bad entries are skipped, and every other row of its tile stays exact.
TEST(SM70_QsaAttnChecked, BadSelectionReportedOtherRowsExact) {
  SM70OPS_REQUIRE_GPU();
  const Inputs in = MakeInputs(kRobustCase);
  Inputs bad = in;
  const int row = 5, nb = bad.sel.nb;
  int32_t *entries = &bad.sel.blocks[size_t(row) * nb];
  ASSERT_GE(bad.sel.count[row], 5);
  std::swap(entries[1], entries[2]);
  entries[3] = -5;
  entries[4] = bad.meta.max_pages + 3;
  setenv("SM70OPS_CHECKED", "1", 1);
  Plugin plugin;
  unsetenv("SM70OPS_CHECKED");
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  AttnRun run(kRobustCase, bad, ScaleOf(kRobustCase));
  Outputs out = RunOp(plugin, run);
  if (HasFailure()) return;
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_ERR_INDEX_OUT_OF_RANGE);
  Synchronize();
  EXPECT_NE(std::string(plugin.api().last_error()).find("sel_blocks page"), std::string::npos)
      << plugin.api().last_error();
  // The bad row compared as if it were right: it must only not spill into the others.
  const auto ref = sm70ops::ref::qsa_attn_ref(in.q, kRobustCase.q_heads, in.kv, in.meta, in.sel,
                                              ScaleOf(kRobustCase), in.gate);
  const size_t heads = kRobustCase.q_heads, width = heads * kRobustCase.head_dim;
  for (size_t i = 0; i < width; ++i) {
    out.o[row * width + i] = sm70ops::ref::float_to_half(float(ref.o[row * width + i]));
  }
  for (size_t h = 0; h < heads; ++h) out.lse[row * heads + h] = float(ref.lse[row * heads + h]);
  ExpectMatchesReference(kRobustCase, in, in.gate, ScaleOf(kRobustCase), out);
}

// Rows whose contexts L are 1, 3, 4, 5 (a fresh 5-token prompt), 63, 64, 65, 2051, 2052 (either
// side of the budget plus a tail) and 4097, in one batch of five requests.
const std::vector<std::pair<int, int>> kContextEdges = {
    {5, 5}, {3, 65}, {2, 2052}, {1, 4097}, {4, 2051}};
// Requests that cut 8- and 16-row tiles: one of 10 rows (a partial tile), 9, then 21 (the last
// tile partial again), each tile of one request only.
const std::vector<std::pair<int, int>> kTileEdges = {{10, 3000}, {9, 2500}, {21, 1000}};

// Sized for the simulated V100 (tools/sim_tests.sh runs every Sim case): each page size, the
// model's GQA groups at TP4 and TP1, head dim 128, the gate, and empty and full selections.
INSTANTIATE_TEST_SUITE_P(
    Sim, SM70_QsaAttn,
    ::testing::Values(Case{"tp4_p16_gated", {{9, 300}}, 6, 1, 256, 16, 256, Pick::kModel, true},
                      Case{"tp1_p64", {{5, 200}}, 24, 2, 256, 64, 128, Pick::kModel},
                      Case{"tp4_p32_all_equals_dense", {{7, 150}}, 6, 1, 256, 32, 0, Pick::kAll},
                      Case{"tp4_p64_empty_rows", {{6, 300}}, 6, 1, 256, 64, 128, Pick::kEmptyRows},
                      Case{"g1_d128_p64", {{9, 300}}, 2, 2, 128, 64, 64, Pick::kSparse}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Shapes, SM70_QsaAttn,
    ::testing::Values(
        // The model: TP4 rank (6/1) and TP1 (24/2), D 256, B 2048 in 4-token groups.
        Case{"tp4_p64", {{48, 5000}}, 6, 1, 256, 64, 2048, Pick::kModel},
        Case{"tp4_p16_gated", {{48, 5000}}, 6, 1, 256, 16, 2048, Pick::kModel, true},
        Case{"tp4_p32_gated_strided", {{33, 6000}}, 6, 1, 256, 32, 2048, Pick::kModel, true, 64},
        Case{"tp1_p64_gated", {{23, 3000}}, 24, 2, 256, 64, 2048, Pick::kModel, true},
        Case{"tp1_p16", {{23, 3000}}, 24, 2, 256, 16, 2048, Pick::kModel},
        Case{"tp4_p16_context_edges_gated", kContextEdges, 6, 1, 256, 16, 2048, Pick::kModel, true,
             8},
        Case{"tp4_p64_context_edges_fused_kv", kContextEdges, 6, 1, 256, 64, 2048, Pick::kModel,
             false, 0, true},
        Case{"tp1_p32_context_edges_gated", kContextEdges, 24, 2, 256, 32, 2048, Pick::kModel,
             true},
        Case{"tp4_p16_tile_edges_gated", kTileEdges, 6, 1, 256, 16, 2048, Pick::kModel, true},
        Case{"tp1_p64_tile_edges", kTileEdges, 24, 2, 256, 64, 2048, Pick::kModel},
        // Empty and full selections in one tile: short rows select all their tokens.
        Case{"tp4_p16_empty_and_full_rows_gated",
             {{19, 1200}, {7, 40}},
             6,
             1,
             256,
             16,
             2048,
             Pick::kEmptyRows,
             true},
        Case{"tp4_p64_empty_rows", {{19, 3000}}, 6, 1, 256, 64, 512, Pick::kEmptyRows},
        Case{"tp4_p16_all_equals_dense_gated", {{21, 700}}, 6, 1, 256, 16, 0, Pick::kAll, true},
        Case{"tp4_p64_all_equals_dense", {{21, 700}}, 6, 1, 256, 64, 0, Pick::kAll},
        Case{"tp1_p32_all_equals_dense", {{9, 300}}, 24, 2, 256, 32, 0, Pick::kAll},
        Case{"tp4_p32_sparse", {{16, 9000}}, 6, 1, 256, 32, 512, Pick::kSparse},
        // 512 of 10000 groups: a row leaves about 44% of the 64-token pages unselected.
        Case{"tp4_p64_sparse_pages_gated", {{24, 40000}}, 6, 1, 256, 64, 2048, Pick::kModel, true},
        Case{"tp4_p64_sharp",
             {{40, 6000}},
             6,
             1,
             256,
             64,
             2048,
             Pick::kModel,
             false,
             0,
             false,
             32.f},
        // Long contexts, few rows: the whole 16384-page union bitmap at P 16.
        Case{"tp4_p16_262144_gated", {{3, 262144}}, 6, 1, 256, 16, 2048, Pick::kModel, true},
        Case{"tp1_p64_131072", {{17, 131072}, {2, 900}}, 24, 2, 256, 64, 2048, Pick::kModel},
        // Other GQA groups and head dims (v1's shapes stay accepted).
        Case{"g4_d256_p64", {{30, 3000}}, 4, 1, 256, 64, 2048, Pick::kModel},
        Case{"g8_d128_p16_gated", {{20, 1500}}, 16, 2, 128, 16, 512, Pick::kModel, true},
        Case{"g1_d128_p64", {{33, 800}}, 2, 2, 128, 64, 256, Pick::kSparse},
        Case{"g1_d256_p16_batch2", {{40, 2500}, {6, 700}}, 2, 2, 256, 16, 512, Pick::kModel, true},
        Case{"g16_d256_p32_all", {{5, 400}}, 16, 1, 256, 32, 0, Pick::kAll},
        Case{"g3_d128_p64", {{11, 1000}}, 6, 2, 128, 64, 256, Pick::kSparse},
        Case{"g6_d128_p32_gated", {{17, 2500}}, 6, 1, 128, 32, 2048, Pick::kModel, true}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

// ---- The simulated V100's bench (tools/sim_bench.sh runs the SimBench cases in timing mode):
// the model's TP4 rank (6 query heads, 1 KV head, D 256, gated), the last 320 rows of a 128K and
// an 8K prompt (a wave of row tiles on a quarter V100: 20 tiles of 16 rows, one an SM; 1280 rows
// on the whole V100 for the full runs that check the quarter's projection), token sets
// as bench_attn draws them (kRuns) or growing faster (kModel). One timed execute; a sample of rows
// against the reference.
constexpr int kSampledRows = 24;

// The rows `sample` of `in` as a batch of their own (a one-row request each, the same caches):
// what the reference computes for the bench.
struct SampledRows {
  std::vector<uint16_t> q, gate;
  sm70ops::ref::Varlen meta;
  Selection sel;
};

SampledRows SampleRows(const Case &c, const Inputs &in, const std::vector<int> &sample) {
  const auto rows = sm70ops::ref::varlen_rows(in.meta);
  const size_t width = size_t(c.q_heads) * c.head_dim, nb = in.sel.nb, pages = in.meta.max_pages;
  SampledRows out;
  out.meta.page_size = in.meta.page_size, out.meta.max_pages = in.meta.max_pages;
  out.meta.query_start_loc = {0};
  out.sel.nb = in.sel.nb;
  for (const int t : sample) {
    out.meta.query_start_loc.push_back(out.meta.query_start_loc.back() + 1);
    out.meta.seq_lens.push_back(rows[t].len);
    const auto table = in.meta.block_table.begin() + rows[t].request * pages;
    out.meta.block_table.insert(out.meta.block_table.end(), table, table + pages);
    out.q.insert(out.q.end(), in.q.begin() + t * width, in.q.begin() + (t + 1) * width);
    if (!in.gate.empty()) {
      out.gate.insert(out.gate.end(), in.gate.begin() + t * width,
                      in.gate.begin() + (t + 1) * width);
    }
    out.sel.blocks.insert(out.sel.blocks.end(), in.sel.blocks.begin() + t * nb,
                          in.sel.blocks.begin() + (t + 1) * nb);
    out.sel.masks.insert(out.sel.masks.end(), in.sel.masks.begin() + t * nb,
                         in.sel.masks.begin() + (t + 1) * nb);
    out.sel.count.push_back(in.sel.count[t]);
  }
  return out;
}

// Tokens of the token set of a row with `len` keys (ops.md op 1, c 4, budget B): all of them up
// to B/c groups, else B and the tail.
int64_t SetSize(int64_t len, int budget) {
  return len / kRatio <= budget / kRatio ? len : budget + len % kRatio;
}

// Useful FLOPs (QK and PV of every query head over its row's tokens) and compulsory bytes (q,
// gate, out, the selection, and K and V of every token some row selects, once) of the case; and
// how many times its FLOPs a whole prompt of `prompt` rows takes (every row its own set).
struct Work {
  double flops, bytes, scale;
};

Work AttnWork(const Case &c, const Inputs &in, int prompt) {
  std::set<int64_t> tokens;
  double selected = 0;
  const int64_t P = in.meta.page_size;
  for (int t = 0; t < in.rows; ++t) {
    for (int e = 0; e < in.sel.count[t]; ++e) {
      const uint64_t mask = in.sel.masks[size_t(t) * in.sel.nb + e];
      const int64_t page = in.sel.blocks[size_t(t) * in.sel.nb + e];
      for (int b = 0; b < P; ++b) {
        if (mask >> b & 1) tokens.insert(page * P + b), ++selected;
      }
    }
  }
  double whole = 0;
  for (int64_t len = 1; len <= prompt; ++len) whole += double(SetSize(len, c.budget));
  const double per_token = 4.0 * c.q_heads * c.head_dim;
  const double heads = double(in.rows) * c.q_heads * c.head_dim * 2 * (c.gated ? 3 : 2);
  const double kv = double(tokens.size()) * c.kv_heads * c.head_dim * 4;
  return {per_token * selected, heads + in.rows * (in.sel.nb * 12.0 + 4) + kv, whole / selected};
}

// K and V bytes the kernel gathers when tiles of `tile_rows` rows (from each request's first row)
// walk the union of their rows' tokens once each.
double GatheredBytes(const Case &c, const Inputs &in, int tile_rows) {
  const auto rows = sm70ops::ref::varlen_rows(in.meta);
  const int64_t P = in.meta.page_size;
  double tokens = 0;
  std::set<int64_t> tile;
  for (int t = 0; t < in.rows; ++t) {
    const int first = in.meta.query_start_loc[rows[t].request];
    if (t > 0 && (rows[t - 1].request != rows[t].request || (t - first) % tile_rows == 0)) {
      tokens += double(tile.size());
      tile.clear();
    }
    for (int e = 0; e < in.sel.count[t]; ++e) {
      const uint64_t mask = in.sel.masks[size_t(t) * in.sel.nb + e];
      const int64_t page = in.sel.blocks[size_t(t) * in.sel.nb + e];
      for (int b = 0; b < P; ++b) {
        if (mask >> b & 1) tile.insert(page * P + b);
      }
    }
  }
  tokens += double(tile.size());
  return tokens * c.kv_heads * c.head_dim * 4;
}

class SM70_QsaAttnBench : public ::testing::TestWithParam<Case> {};

TEST_P(SM70_QsaAttnBench, Once) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Case &c = GetParam();
  const Inputs in = MakeInputs(c);
  const int prompt = c.requests[0].second;
  const Work work = AttnWork(c, in, prompt);
  const std::string whole =
      "the whole " + std::to_string(prompt) + "-token prompt, per layer and rank";
  // The prompt runs in chunks of sm70ops_bench::kPrefillChunk rows, a call each.
  const int calls = (prompt + sm70ops_bench::kPrefillChunk - 1) / sm70ops_bench::kPrefillChunk;
  sm70ops_bench::ReportWork(work.flops, work.bytes, work.scale, calls, whole.c_str());
  AttnRun run(c, in, ScaleOf(c));
  ASSERT_TRUE(run.Accepted(plugin));
  run.Poison(nullptr);
  sm70ops_bench::BeginTimed();
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << plugin.api().last_error();
  sm70ops_bench::EndTimed();
  const Outputs out = run.Download();
  std::vector<int> sample;
  for (int i = 0; i < kSampledRows; ++i) sample.push_back(int(int64_t(i) * in.rows / kSampledRows));
  const SampledRows ref_in = SampleRows(c, in, sample);
  const auto ref = sm70ops::ref::qsa_attn_ref(ref_in.q, c.q_heads, in.kv, ref_in.meta, ref_in.sel,
                                              ScaleOf(c), ref_in.gate);
  const size_t width = size_t(c.q_heads) * c.head_dim;
  std::vector<double> got;
  for (const int t : sample) {
    for (size_t i = 0; i < width; ++i)
      got.push_back(sm70ops::ref::half_to_float(out.o[t * width + i]));
  }
  const auto e = sm70ops::ref::compare(got, ref.o);
  EXPECT_EQ(e.non_finite, 0);
  EXPECT_LE(e.rel_l2, 2e-3);
  // The gathers at the model's tile height (16 rows at G 6) and at 8, against the compulsory
  // bytes: what the DRAM bytes moved read against.
  char detail[240];
  std::snprintf(detail, sizeof(detail),
                "rel-L2 %.3g, neighbour Jaccard %.2f, K/V gathered by tiles of 16 rows %.1f MB "
                "(8 rows %.1f MB)",
                e.rel_l2, in.overlap, GatheredBytes(c, in, 16) / 1e6,
                GatheredBytes(c, in, 8) / 1e6);
  sm70ops_bench::ReportCheck(kSampledRows, e.non_finite == 0 && e.rel_l2 <= 2e-3, detail);
}

INSTANTIATE_TEST_SUITE_P(
    SimBench, SM70_QsaAttnBench,
    ::testing::Values(
        Case{"p64_128k", {{320, 131072}}, 6, 1, 256, 64, 2048, Pick::kRuns, true},
        Case{"p16_128k", {{320, 131072}}, 6, 1, 256, 16, 2048, Pick::kRuns, true},
        Case{"p64_8k", {{320, 8192}}, 6, 1, 256, 64, 2048, Pick::kRuns, true},
        Case{"p64_128k_growing", {{320, 131072}}, 6, 1, 256, 64, 2048, Pick::kModel, true},
        // Their full runs (tools/sim_bench.py --validate): 80 tiles, one an SM of a whole V100.
        Case{"p64_128k_whole", {{1280, 131072}}, 6, 1, 256, 64, 2048, Pick::kRuns, true},
        Case{"p16_128k_whole", {{1280, 131072}}, 6, 1, 256, 16, 2048, Pick::kRuns, true},
        Case{"p64_8k_whole", {{1280, 8192}}, 6, 1, 256, 64, 2048, Pick::kRuns, true},
        Case{"p64_128k_growing_whole", {{1280, 131072}}, 6, 1, 256, 64, 2048, Pick::kModel, true}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

}  // namespace
}  // namespace sm70ops_gpu
