#!/usr/bin/env bash
# The V100 model's bench: every op at the model's shapes on the simulated V100 in timing mode,
# beside CUTLASS on the same model (tools/sim_bench.py says what each column means).
#   bash tools/sim_bench.sh [OP...] [--cases OP/NAME,...] [--report] [--scaling-check] [--jobs N]
# OP: nvfp4_moe, qsa_attn, qsa_index, cutlass_gemm, cutlass_grouped (default: all; an op brings
# its peers). Sets up the simulator (../shared/tools/v100sim) and CUTLASS's headers, builds the
# --config=sim plugin, GPU tests and peers, then runs the cases two at a time with a progress line
# a minute: about two hours for all on two cores (each attention case about 27 minutes, the
# 128K index cases 30-40); --cases runs some, --report reads the logs they left. Prints the
# table, a `sim_bench: OP CASE floor_share=F v100_ms=M` line a case, draws
# docs/sim_bench_roofline.png and ends with "N passed, N failed". Logs under
# /tmp/sm70ops-sim-bench/.
set -uo pipefail
cd "$(dirname "$0")/.."
sim=../shared/tools/v100sim
fail() { echo "sim_bench: $*"; echo "0 passed, 1 failed"; exit 1; }

[ -d "$sim" ] || fail "no $sim (the simulated V100; clone main with ../shared beside it)"
bash tools/setup.sh >/dev/null || fail "tools/setup.sh failed"
bash "$sim/setup.sh" >/tmp/sm70ops-sim-setup.log 2>&1 ||
  fail "simulator setup failed: see /tmp/sm70ops-sim-setup.log"
bash tools/cutlass.sh >/dev/null || fail "tools/cutlass.sh (CUTLASS's headers) failed"
python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install -q matplotlib >/dev/null 2>&1 ||
  echo "sim_bench: matplotlib could not be installed: no roofline"
# --symlink_prefix=/: leaves bazel-bin to the other builds.
bazel build --config=sim --symlink_prefix=/ //:sm70ops //tests/gpu:nvfp4_moe_test \
  //tests/gpu:qsa_attn_test //tests/gpu:qsa_index_test //tests/sim_bench:cutlass_peers \
  >/tmp/sm70ops-sim-bench-build.log 2>&1 ||
  { tail -n 20 /tmp/sm70ops-sim-bench-build.log; fail "build failed"; }
exec python3 tools/sim_bench.py --bin "$(bazel info --config=sim bazel-bin 2>/dev/null)" "$@"
