#!/usr/bin/env bash
# The V100 model's bench: every op at the model's shapes on the simulated V100 in timing mode,
# beside CUTLASS on the same model (tools/sim_bench.py says what each column means).
#   bash tools/sim_bench.sh [OP...] [--cases OP/NAME,...] [--report] [--jobs N]
#   bash tools/sim_bench.sh --validate [--cases ...]      each case against its full run (hours)
#   bash tools/sim_bench.sh --same-answers --cases ...    this project's simulator build against
#                                                          the shared one, statistic by statistic
# OP: nvfp4_moe, qsa_attn, qsa_index, cutlass_gemm, cutlass_grouped (default: all; an op brings
# its peers). Sets up the simulator (../shared/tools/v100sim and this project's build of it,
# tools/v100sim) and CUTLASS's headers, builds the --config=sim plugin, GPU tests and peers, then
# runs the cases two at a time with a progress line a minute, each sampled as its Case says:
# about two hours for every case on two cores, measured (docs/performance.md, "The instrument");
# --cases runs some, --report reads the logs they left.
# Prints the table, a `sim_bench: OP CASE floor_share=F v100_ms=M` line a case, the prefill table,
# the wall time, draws docs/sim_bench_roofline.png and ends with "N passed, N failed". Logs under
# /tmp/sm70ops-sim-bench/.
set -uo pipefail
cd "$(dirname "$0")/.."
sim=../shared/tools/v100sim
fail() { echo "sim_bench: $*"; echo "0 passed, 1 failed"; exit 1; }

[ -d "$sim" ] || fail "no $sim (the simulated V100; clone main with ../shared beside it)"
bash tools/setup.sh >/dev/null || fail "tools/setup.sh failed"
bash "$sim/setup.sh" >/tmp/sm70ops-sim-setup.log 2>&1 ||
  fail "simulator setup failed: see /tmp/sm70ops-sim-setup.log"
ours=$(bash tools/v100sim/build.sh 2>>/tmp/sm70ops-sim-setup.log | sed -n 's/.*PREFIX=\([^ ]*\).*/\1/p')
[ -n "$ours" ] || fail "tools/v100sim/build.sh failed: see /tmp/sm70ops-sim-setup.log"
shared=$(sed -n 's/.*PREFIX=\([^ ]*\) .*/\1/p' /tmp/sm70ops-sim-setup.log | tail -n 1)
bash tools/cutlass.sh >/dev/null || fail "tools/cutlass.sh (CUTLASS's headers) failed"
python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install -q matplotlib >/dev/null 2>&1 ||
  echo "sim_bench: matplotlib could not be installed: no roofline"
# --symlink_prefix=/: leaves bazel-bin to the other builds.
bazel build --config=sim --symlink_prefix=/ //:sm70ops //tests/gpu:nvfp4_moe_test \
  //tests/gpu:qsa_attn_test //tests/gpu:qsa_index_test //tests/sim_bench:cutlass_peers \
  >/tmp/sm70ops-sim-bench-build.log 2>&1 ||
  { tail -n 20 /tmp/sm70ops-sim-bench-build.log; fail "build failed"; }
# The binaries this run uses, copied out of bazel-bin: a build while the bench runs (hours, with
# --validate) must not change them between its cases.
bin=$(mktemp -d /tmp/sm70ops-sim-bench-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
mkdir -p "$bin/tests/gpu" "$bin/tests/sim_bench"
built=$(bazel info --config=sim bazel-bin 2>/dev/null)
cp "$built/libsm70ops.so" "$bin/"
for t in nvfp4_moe_test qsa_attn_test qsa_index_test; do cp "$built/tests/gpu/$t" "$bin/tests/gpu/"; done
cp "$built/tests/sim_bench/cutlass_peers" "$bin/tests/sim_bench/"
python3 tools/sim_bench.py --bin "$bin" --prefix "$ours" --shared-prefix "$shared" "$@"
