// SM70_QsaAttnTokenIds: qsa_attn given the engines' selection as token ids (ABI 1.2) in place of
// the sel_* triple. Each row's set is op 1's token set (B/c groups of c tokens and the tail,
// ops.md) written as vLLM's packed buffer (ids first in a shuffled order, -1 padding, a count
// column) or as SGLang's ids (shuffled, -1 padding anywhere), over several requests whose pages
// are scattered. The token-id call must equal the triple call on the same set bit for bit (out
// and lse, both poisoned before each run, the workspace too), and that call the CPU reference
// within ops.md's gates. Bad ids (out of range, past the row's position, repeated, a count past
// the row) are skipped, so that the call equals the triple of the valid ids, and checked mode
// names them. The Sim cases (tools/sim_tests.sh) cover c 1/2/4, P 16/64 and rows shorter than B.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

enum class Layout {
  kPacked,           // vLLM: ids first, then -1, then the count column
  kPackedJunkAfter,  // the same with unselected ids in place of the -1s: the count bounds a row
  kLoose,            // SGLang: ids and -1s interleaved, no count column
};

struct Case {
  std::string name;
  std::vector<std::pair<int, int>> requests;  // (query_len, seq_len)
  int ratio;                                  // c
  int page;                                   // P
  int budget;                                 // B, tokens
  Layout layout;
  int q_heads = 6, kv_heads = 1, head_dim = 256;  // the model's TP4 rank
  bool gated = true;
  int id_pad = 0;  // token_ids rows this many columns apart beyond W: a strided view
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

bool Counted(const Case &c) { return c.layout != Layout::kLoose; }

// W: op 1's set width B + c - 1, plus vLLM's count column.
int Width(const Case &c) { return c.budget + c.ratio - 1 + (Counted(c) ? 1 : 0); }

struct Inputs : sm70ops::ref::ScatteredBatch {
  std::vector<uint16_t> q, gate;
  sm70ops::ref::KvCache kv;
  std::vector<std::vector<int32_t>> sets;  // each row's token set, ascending
  std::vector<int32_t> ids;                // [T, W + id_pad]: the call's token_ids buffer
};

// Op 1's token set of a row of `len` tokens: min(B / c, G) random complete groups, the tail.
std::vector<int32_t> TokenSet(const Case &c, int len, std::mt19937 &rng) {
  const int groups = len / c.ratio;
  std::vector<int32_t> all(groups);
  for (int g = 0; g < groups; ++g) all[g] = g;
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min(groups, c.budget / c.ratio));
  std::sort(all.begin(), all.end());
  return sm70ops::ref::qsa_index_token_set(all, c.ratio, len);
}

// Positions of 0 .. len-1 that `set` lacks, cycled to `count` entries (-1 when it lacks none): what
// a kernel reading past the ids it was given would turn into extra keys.
std::vector<int32_t> Unselected(const std::vector<int32_t> &set, int len, size_t count) {
  std::vector<int32_t> out;
  for (int p = 0, i = 0; p < len && out.size() < count; ++p) {
    while (i < int(set.size()) && set[i] < p) ++i;
    if (i == int(set.size()) || set[i] != p) out.push_back(p);
  }
  if (out.empty()) out.push_back(-1);
  for (size_t i = 0; out.size() < count; ++i) out.push_back(out[i]);
  return out;
}

// One row of token_ids for `set` in the case's layout, with its stride padding.
std::vector<int32_t> IdRow(const Case &c, const std::vector<int32_t> &set, int len,
                           std::mt19937 &rng) {
  const int width = Width(c), slots = width - (Counted(c) ? 1 : 0);
  std::vector<int32_t> row(set);
  std::shuffle(row.begin(), row.end(), rng);
  const std::vector<int32_t> junk = Unselected(set, len, size_t(slots + c.id_pad));
  for (int i = int(row.size()); i < slots; ++i) {
    row.push_back(c.layout == Layout::kPackedJunkAfter ? junk[i] : -1);
  }
  if (c.layout == Layout::kLoose) std::shuffle(row.begin(), row.end(), rng);
  if (Counted(c)) row.push_back(int32_t(set.size()));
  row.insert(row.end(), junk.end() - c.id_pad, junk.end());
  return row;
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
  for (const auto &row : sm70ops::ref::varlen_rows(in.meta)) {
    in.sets.push_back(TokenSet(c, row.len, rng));
    const std::vector<int32_t> ids = IdRow(c, in.sets.back(), row.len, rng);
    in.ids.insert(in.ids.end(), ids.begin(), ids.end());
  }
  return in;
}

// The triple of `sets` at the case's page size, as op 1 would pass it.
Selection TripleOf(const Case &c, const Inputs &in, const std::vector<std::vector<int32_t>> &sets) {
  std::vector<sm70ops::ref::Expansion> rows;
  for (const auto &set : sets) rows.push_back(sm70ops::ref::qsa_index_expand(set, c.page));
  return sm70ops::ref::pack_selection(
      rows, int(sm70ops_desc_selection_width(c.budget, c.ratio, in.meta.max_pages)));
}

// The op on the device, given the selection as token ids (`ids` non-empty) or as `triple`.
class AttnRun {
 public:
  AttnRun(const Case &c, const Inputs &in, const std::vector<int32_t> &ids, const Selection &triple)
      : T_(in.rows), Hq_(c.q_heads), D_(c.head_dim) {
    q_ = Uploaded(in.q), k_ = Uploaded(in.kv.k), v_ = Uploaded(in.kv.v);
    qsl_ = Uploaded(in.meta.query_start_loc), lens_ = Uploaded(in.meta.seq_lens);
    table_ = Uploaded(in.meta.block_table);
    o_ = DeviceBuffer(T_ * Hq_ * D_ * 2), lse_ = DeviceBuffer(T_ * Hq_ * 4);
    sm70ops_desc_qsa_attn_sizes s{};
    s.batch = DescBatch(in, triple.nb);
    s.q_heads = Hq_, s.kv_heads = c.kv_heads, s.head_dim = D_;
    s.sm_scale = 1.f / std::sqrt(float(D_));
    s.with_lse = 1, s.with_gate = c.gated;
    s.token_ids_width = ids.empty() ? 0 : Width(c);
    s.token_ids_count_column = Counted(c);
    sm70ops_desc_qsa_attn(&call_, &s, 0);
    Bind(call_, "q", q_), Bind(call_, "k_cache", k_), Bind(call_, "v_cache", v_);
    Bind(call_, "query_start_loc", qsl_), Bind(call_, "seq_lens", lens_);
    Bind(call_, "block_table", table_), Bind(call_, "out", o_), Bind(call_, "lse", lse_);
    if (c.gated) gate_ = Uploaded(in.gate), Bind(call_, "gate", gate_);
    if (ids.empty()) {
      blocks_ = Uploaded(triple.blocks), masks_ = Uploaded(triple.masks);
      count_ = Uploaded(triple.count);
      Bind(call_, "sel_blocks", blocks_), Bind(call_, "sel_mask", masks_);
      Bind(call_, "sel_count", count_);
    } else {
      ids_ = Uploaded(ids);
      sm70ops_desc_stride(Bind(call_, "token_ids", ids_), 0, Width(c) + c.id_pad);
    }
  }
  AttnRun(const AttnRun &) = delete;  // call_ points into itself
  AttnRun &operator=(const AttnRun &) = delete;

  // check() accepts (a test failure otherwise) and the workspace it asks for is allocated.
  bool Accepted(const Plugin &plugin) {
    const sm70ops_decision d = Decide(plugin, call_.op, &call_.args);
    workspace_ = DeviceBuffer(d.workspace_bytes);
    return d.accepted;
  }

  // out, lse and the workspace: the expansion must write every entry the attention reads.
  void Poison(void *stream) {
    o_.PoisonAsync(0x7f, stream), lse_.PoisonAsync(0x7f, stream);
    workspace_.PoisonAsync(0x5a, stream);
  }

  sm70ops_status Execute(const Plugin &plugin, void *stream) {
    return plugin.api().execute(plugin.ctx(), call_.op, &call_.args, stream, workspace_.data(),
                                workspace_.bytes());
  }

  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> bytes(o_.bytes() + lse_.bytes());
    o_.Download(bytes.data(), o_.bytes());
    lse_.Download(bytes.data() + o_.bytes(), lse_.bytes());
    return bytes;
  }

 private:
  int64_t T_, Hq_, D_;
  DeviceBuffer q_{0}, gate_{0}, k_{0}, v_{0}, qsl_{0}, lens_{0}, table_{0}, ids_{0};
  DeviceBuffer blocks_{0}, masks_{0}, count_{0}, o_{0}, lse_{0}, workspace_{0};
  sm70ops_desc_call call_;
};

// One eager run's out and lse bytes; empty when check declined or execute failed.
std::vector<uint8_t> RunOnce(const Plugin &plugin, AttnRun &run) {
  if (!run.Accepted(plugin)) return {};
  run.Poison(nullptr);
  const sm70ops_status status = run.Execute(plugin, nullptr);
  EXPECT_EQ(status, SM70OPS_OK) << plugin.api().last_error();
  Synchronize();
  return status == SM70OPS_OK ? run.Bytes() : std::vector<uint8_t>{};
}

// ops.md's gates for the bytes of a run against the fp64 reference over `triple`.
void ExpectMatchesReference(const Case &c, const Inputs &in, const Selection &triple,
                            const std::vector<uint8_t> &bytes) {
  using sm70ops::ref::AttnPrecision;
  const float scale = 1.f / std::sqrt(float(c.head_dim));
  const auto ref =
      sm70ops::ref::qsa_attn_ref(in.q, c.q_heads, in.kv, in.meta, triple, scale, in.gate);
  const auto same = sm70ops::ref::qsa_attn_ref(in.q, c.q_heads, in.kv, in.meta, triple, scale,
                                               in.gate, AttnPrecision::kFp32Fp16Out);
  std::vector<uint16_t> halves(ref.o.size());
  std::memcpy(halves.data(), bytes.data(), halves.size() * 2);
  std::vector<double> got(halves.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = sm70ops::ref::half_to_float(halves[i]);
  const auto gpu = sm70ops::ref::compare(got, ref.o);
  const auto fp16_ref = sm70ops::ref::compare(same.o, ref.o);
  EXPECT_EQ(gpu.non_finite, 0);
  EXPECT_LE(gpu.rel_l2, 2e-3);
  EXPECT_LE(gpu.max_abs, 2 * fp16_ref.max_abs) << "same-precision reference: " << fp16_ref.max_abs;
  std::vector<float> lse(ref.lse.size());
  std::memcpy(lse.data(), bytes.data() + halves.size() * 2, lse.size() * 4);
  int bad = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    const bool empty = std::isinf(ref.lse[i]) && ref.lse[i] < 0;
    bad += empty ? !(std::isinf(lse[i]) && lse[i] < 0) : !(std::abs(lse[i] - ref.lse[i]) <= 1e-3);
  }
  EXPECT_EQ(bad, 0) << "lse entries off by more than 1e-3 (or not -inf for an empty set)";
  std::printf("  rel-L2 %.3g, max-abs %.3g (same-precision reference %.3g)\n", gpu.rel_l2,
              gpu.max_abs, fp16_ref.max_abs);
}

// The token-id call against the triple call on `sets` (bit for bit) and the triple call against
// the reference.
void ExpectTokenIdsEqualTheTriple(const Case &c, const Inputs &in,
                                  const std::vector<std::vector<int32_t>> &sets) {
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Selection triple = TripleOf(c, in, sets);
  AttnRun from_triple(c, in, {}, triple), from_ids(c, in, in.ids, triple);
  const std::vector<uint8_t> want = RunOnce(plugin, from_triple);
  const std::vector<uint8_t> got = RunOnce(plugin, from_ids);
  if (::testing::Test::HasFailure()) return;
  EXPECT_TRUE(got == want) << "token ids and the triple of the same set differ";
  ExpectMatchesReference(c, in, triple, want);
}

class SM70_QsaAttnTokenIds : public ::testing::TestWithParam<Case> {};

TEST_P(SM70_QsaAttnTokenIds, EqualsTheTripleBitwise) {
  SM70OPS_REQUIRE_GPU();
  const Case &c = GetParam();
  const Inputs in = MakeInputs(c);
  ExpectTokenIdsEqualTheTriple(c, in, in.sets);
}

// Three requests; each has rows shorter than the budget (all their tokens selected, then -1s)
// and the last has rows whose contexts leave tails of every length below c.
const std::vector<std::pair<int, int>> kSimBatch = {{6, 300}, {3, 45}, {5, 131}};

// Sized for the simulated V100: c 1, 2 and 4, pages of 16 and 64 tokens, each layout, a strided
// view; the model's TP4 heads (6 / 1, D 256, gated) and a small head dim.
INSTANTIATE_TEST_SUITE_P(
    Sim, SM70_QsaAttnTokenIds,
    ::testing::Values(
        Case{"c4_p16_packed", kSimBatch, 4, 16, 64, Layout::kPacked},
        Case{"c4_p64_loose_strided", kSimBatch, 4, 64, 64, Layout::kLoose, 6, 1, 256, true, 5},
        Case{"c2_p16_loose", kSimBatch, 2, 16, 32, Layout::kLoose, 2, 2, 128, false},
        Case{"c2_p64_junk_past_count", kSimBatch, 2, 64, 32, Layout::kPackedJunkAfter, 2, 2, 128,
             false},
        Case{"c1_p16_packed_strided", kSimBatch, 1, 16, 48, Layout::kPacked, 2, 2, 128, false, 3},
        Case{"c1_p64_loose", kSimBatch, 1, 64, 48, Layout::kLoose, 2, 2, 128, false}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

// The model's shapes: B 2048 in 4-token groups, TP4 (6 / 1) and TP1 (24 / 2), D 256.
INSTANTIATE_TEST_SUITE_P(
    Shapes, SM70_QsaAttnTokenIds,
    ::testing::Values(
        Case{"tp4_p16_packed", {{48, 5000}, {9, 700}, {20, 1500}}, 4, 16, 2048, Layout::kPacked},
        Case{"tp4_p64_loose", {{48, 5000}, {9, 700}, {20, 1500}}, 4, 64, 2048, Layout::kLoose},
        Case{"tp1_p16_junk_past_count_strided",
             {{23, 3000}, {5, 2100}},
             4,
             16,
             2048,
             Layout::kPackedJunkAfter,
             24,
             2,
             256,
             true,
             7},
        Case{"tp4_p16_131072_packed", {{17, 131072}, {2, 900}}, 4, 16, 2048, Layout::kPacked},
        Case{"tp4_p64_c1_loose", {{16, 9000}}, 1, 64, 512, Layout::kLoose},
        Case{"c4_p16_b512_packed", {{24, 3000}, {9, 700}}, 4, 16, 512, Layout::kPacked},
        Case{"tp4_p32_c2_packed", {{33, 6000}}, 2, 32, 1024, Layout::kPacked}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

// The Sim batch at c 4, P 16 in vLLM's layout, with bad ids written into some rows.
const Case kBadIdsCase{"bad_ids", kSimBatch, 4, 16, 64, Layout::kPacked, 2, 2, 128, false};

// Overwrites row t's first column (an id of its set) with `id`, whose row keeps the rest.
void Corrupt(const Case &c, Inputs &in, int t, int32_t id) {
  in.ids[size_t(t) * (Width(c) + c.id_pad)] = id;
}

// The ids of row t's set that its first column no longer holds are left out of the triple.
std::vector<std::vector<int32_t>> WithoutFirstColumn(const Case &c, const Inputs &in,
                                                     const std::vector<int> &rows) {
  std::vector<std::vector<int32_t>> sets = in.sets;
  for (int t : rows) {
    auto &set = sets[t];
    set.erase(std::find(set.begin(), set.end(), in.ids[size_t(t) * (Width(c) + c.id_pad)]));
  }
  return sets;
}

// Ids out of range (-5, 1 << 30), past the row's position (L, L + 1000) and a repeat are skipped
// (a repeat counts once), and a count past the row is clamped to it: the call equals the triple
// of the valid ids, nothing else is read (tools/gpu_tests.sh sanitize runs it under memcheck).
TEST(SM70_QsaAttnTokenIdsBadIds, SkippedAsTheTripleOfTheValidIds) {
  SM70OPS_REQUIRE_GPU();
  const Case &c = kBadIdsCase;
  Inputs in = MakeInputs(c);
  const auto rows = sm70ops::ref::varlen_rows(in.meta);
  const std::vector<int> bad = {0, 2, 7, 9};
  const auto sets = WithoutFirstColumn(c, in, bad);
  Corrupt(c, in, 0, -5);
  Corrupt(c, in, 2, 1 << 30);
  Corrupt(c, in, 7, rows[7].len);
  Corrupt(c, in, 9, rows[9].len + 1000);
  std::vector<std::vector<int32_t>> valid = sets;
  valid[11] = WithoutFirstColumn(c, in, {11})[11];
  const size_t stride = Width(c) + c.id_pad;
  in.ids[11 * stride] = in.ids[11 * stride + 1];       // a repeat in place of row 11's first id
  in.ids[12 * stride + Width(c) - 1] = Width(c) + 40;  // a count past the row's columns
  ExpectTokenIdsEqualTheTriple(c, in, valid);
}

// A row's mistake, as checked mode names it from the next execute (once), the call itself done.
void ExpectNamedByCheckedMode(const Case &c, const Inputs &in, const std::string &what) {
  setenv("SM70OPS_CHECKED", "1", 1);
  Plugin plugin;
  unsetenv("SM70OPS_CHECKED");
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  AttnRun run(c, in, in.ids, TripleOf(c, in, in.sets));
  ASSERT_TRUE(run.Accepted(plugin));
  run.Poison(nullptr);
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << plugin.api().last_error();
  Synchronize();
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_ERR_INDEX_OUT_OF_RANGE);
  Synchronize();
  EXPECT_NE(std::string(plugin.api().last_error()).find(what), std::string::npos)
      << plugin.api().last_error();
  EXPECT_EQ(run.Execute(plugin, nullptr), SM70OPS_OK) << "the report is given once";
  Synchronize();
}

TEST(SM70_QsaAttnTokenIdsChecked, BadIdsNamedByTheNextCall) {
  SM70OPS_REQUIRE_GPU();
  const Case &c = kBadIdsCase;
  const auto rows = sm70ops::ref::varlen_rows(MakeInputs(c).meta);
  const size_t stride = Width(c) + c.id_pad;
  struct Mistake {
    std::string what;
    size_t at;  // element of token_ids
    int32_t value;
  };
  const Mistake mistakes[] = {
      {"token_ids id -3, outside [0, " + std::to_string(rows[4].len) + ")", 4 * stride, -3},
      {"token_ids id " + std::to_string(rows[8].len) + ", outside", 8 * stride, rows[8].len},
      {"token_ids count column", 6 * stride + Width(c) - 1, Width(c)},
  };
  for (const Mistake &m : mistakes) {
    SCOPED_TRACE(m.what);
    Inputs in = MakeInputs(c);
    in.ids[m.at] = m.value;
    ExpectNamedByCheckedMode(c, in, m.what);
  }
  Inputs repeat = MakeInputs(c);
  repeat.ids[3 * stride + 1] = repeat.ids[3 * stride];
  ExpectNamedByCheckedMode(c, repeat, "twice in row 3");
}

// The expansion and the attention under stream capture: graph replay equals eager.
TEST(SM70_QsaAttnTokenIdsRobust, GraphReplayEqualsEager) {
  SM70OPS_REQUIRE_GPU();
  Plugin plugin;
  ASSERT_TRUE(plugin.error().empty()) << plugin.error();
  const Case c{"robust", {{24, 3000}, {9, 700}}, 4, 16, 512, Layout::kPacked};
  const Inputs in = MakeInputs(c);
  AttnRun run(c, in, in.ids, TripleOf(c, in, in.sets));
  ASSERT_TRUE(run.Accepted(plugin));
  ExpectGraphReplayEqualsEager(plugin, run);
}

}  // namespace
}  // namespace sm70ops_gpu
