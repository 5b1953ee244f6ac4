#!/usr/bin/env bash
# The GPU tests (tests/gpu/) on a simulated V100, for CI, which has no GPU: the simulator is
# ../shared/tools/v100sim (GPGPU-Sim with a V100 config; its README lists what it cannot run).
#   1. its setup.sh: builds the simulator under ~/.cache/v100sim once (about 2.5 min)
#   2. bazel build --config=sim: the plugin and the GPU test binaries (compute_70 PTX and the
#      shared cudart, which the simulator replaces)
#   3. each binary's simulator cases (FILTERS) in functional mode, counted from its JUnit XML
#   4. one case per op in timing mode (TIMING): a table of simulated cycles, a model for comparing
#      commits, not a V100 time; each counts as one case (exit status 0 and a cycle count)
# Without ../shared/tools/v100sim it skips with the reason. Logs under /tmp/sm70ops-sim/. Ends
# with "sim: N passed, N failed, N skipped" (tools/test.sh adds it to its total).
set -uo pipefail
cd "$(dirname "$0")/.."
sim=../shared/tools/v100sim
out=/tmp/sm70ops-sim

# The cases each GPU test binary runs on the simulator, as gtest filters: the one place they are
# chosen. Convention: cases sized for the simulator (seconds each in functional mode) are
# instantiated as Sim, INSTANTIATE_TEST_SUITE_P(Sim, SUITE, ...), and run with no edit here.
# Kept out, whatever their name:
#   *GraphReplay*  stream capture and CUDA graphs: the simulator's cudart has neither (nor may a
#                  Sim case of nvfp4_moe_test set Case::graph)
#   *Checked*      checked mode reports bad indices through mapped host memory; the simulator's
#                  cudaHostGetDevicePointer gives the kernels a device copy that it never copies
#                  back (libcuda/cuda_runtime_api.cc, cudaHostGetDevicePointerInternal), so the
#                  host never sees the report
declare -A FILTERS=(
  [lifecycle_gpu_test]='Sim/*:SM70_Lifecycle.*'
  [qsa_index_test]='Sim/*'
  [qsa_attn_test]='Sim/*'
  [qsa_attn_token_ids_test]='Sim/*:SM70_QsaAttnTokenIdsBadIds.*'
  [nvfp4_moe_test]='Sim/*'
)
EXCLUDED='*GraphReplay*:*Checked*'
# Each op's timing case (binary, filter): the smallest there is; timing mode is 20-50x slower.
# qsa_attn_token_ids runs the attention from the triple, then from token ids (ABI 1.2): its log
# gives each kernel's cycles, the expansion's beside the attention's.
declare -A TIMING=(
  [qsa_index]='qsa_index_test Sim/*/c4_p16_tails'
  [qsa_attn]='qsa_attn_test Sim/*/g1_d128_p64'
  [qsa_attn_token_ids]='qsa_attn_token_ids_test Sim/*/c4_p16_packed'
  [nvfp4_moe]='nvfp4_moe_test Sim/*/i160_duplicates'
)

passed=0 failed=0 skipped=0
fail() { echo "sim: $*"; failed=$((failed + 1)); }
finish() {
  echo "sim: $passed passed, $failed failed, $skipped skipped"
  exit $((failed > 0))
}

if [ ! -d "$sim" ]; then
  echo "sim: skipped: no $sim (the simulated V100; CI clones main with ../shared beside it)"
  skipped=1
  finish
fi
rm -rf "$out" && mkdir -p "$out/xml" && touch "$out/stamp"
bash "$sim/setup.sh" >"$out/setup.log" 2>&1 || { fail "simulator setup failed: see $out/setup.log"; finish; }
targets=(//:sm70ops)
for t in "${!FILTERS[@]}"; do targets+=("//tests/gpu:$t"); done
# --symlink_prefix=/: leaves bazel-bin to the other builds.
bazel build --config=sim --symlink_prefix=/ "${targets[@]}" >"$out/build.log" 2>&1 ||
  { tail -n 20 "$out/build.log"; fail "build failed: see $out/build.log"; finish; }
bin=$(bazel info --config=sim bazel-bin 2>/dev/null)
# The tests dlopen the plugin, as an engine does. The simulator loads the PTX of one file: the
# executable, or PYTORCH_BIN (GPGPU-Sim's variable for the library that holds the kernels).
export SM70OPS_LIBRARY=$bin/libsm70ops.so PYTORCH_BIN=$bin/libsm70ops.so

# NAME MODE BINARY FILTER: one run under run.sh (15 minutes at most) in the background, two at a
# time (each simulator runs on one core); under $out/NAME its log, JUnit XML, exit status (rc)
# and wall time (seconds).
simulate() {
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  mkdir -p "$out/$1"
  (
    start=$SECONDS
    V100SIM_MODE=$2 timeout 900 "$sim/run.sh" "$bin/tests/gpu/$3" --gtest_filter="$4" \
      --gtest_output="xml:$out/$1/test.xml" >"$out/$1/log" 2>&1
    echo $? >"$out/$1/rc"
    echo $((SECONDS - start)) >"$out/$1/seconds"
  ) &
}

# The slow timing runs first, so that the functional ones fill the other core.
for op in qsa_attn qsa_attn_token_ids nvfp4_moe qsa_index; do
  read -r t filter <<<"${TIMING[$op]}"
  simulate "timing/$op" timing "$t" "$filter"
done
for t in "${!FILTERS[@]}"; do simulate "xml/$t" functional "$t" "${FILTERS[$t]}-$EXCLUDED"; done
wait

# --- Functional mode: every case from the JUnit XML; a run that shows no failing case but did
# not pass (crash, timeout, a filter matching nothing) is one failure more.
walls=
for t in "${!FILTERS[@]}"; do
  dir=$out/xml/$t
  walls+="${walls:+, }$t $(cat "$dir/seconds") s"
  if [ ! -f "$dir/test.xml" ]; then
    fail "$t exited $(cat "$dir/rc") with no JUnit XML: see $dir/log"
  elif ! grep -q "<testcase" "$dir/test.xml"; then
    fail "$t: no case matches ${FILTERS[$t]}"
  elif [ "$(cat "$dir/rc")" -ne 0 ] && ! grep -q "<failure" "$dir/test.xml"; then
    fail "$t exited $(cat "$dir/rc") with no failing case: see $dir/log"
  fi
done
echo "sim: functional mode: $walls"
line=$(python3 tools/count_tests.py sim "$out/xml" "$out/stamp")
echo "$line"
read -r p f s < <(tail -n 1 <<<"$line" | grep -oE '[0-9]+ (passed|failed|skipped)' | cut -d' ' -f1 | paste -sd' ')
passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))

# --- Timing mode: run.sh's "v100sim: cycles: N kernel launch(es), sum of gpu_sim_cycle = C, ..."
echo "sim: timing mode: cycles of GPGPU-Sim's V100 model (5000 a launch are its launch latency)"
printf '  %-18s %-30s %8s %10s %6s\n' op case launches cycles wall
for op in qsa_index qsa_attn qsa_attn_token_ids nvfp4_moe; do
  dir=$out/timing/$op
  read -r _ filter <<<"${TIMING[$op]}"
  counts=$(sed -n 's/^v100sim: cycles: \([0-9]*\) .* gpu_sim_cycle = \([0-9]*\),.*/\1 \2/p' "$dir/log")
  read -r launches cycles <<<"${counts:-0 0}"
  if [ "$(cat "$dir/rc")" -eq 0 ] && [ "$launches" -gt 0 ]; then
    printf '  %-18s %-30s %8s %10s %4s s\n' "$op" "$filter" "$launches" "$cycles" "$(cat "$dir/seconds")"
    # Each launch's cycles where they are few enough to read (the token-id case: the expansion
    # beside the attention).
    [ "$launches" -le 4 ] &&
      sed -n 's/^v100sim: kernel \([0-9]*\) cycles \(.*\)/      \1 cycles: \2/p' "$dir/log" | cut -c1-110
    passed=$((passed + 1))
  else
    printf '  %-18s %-30s FAILED (exit %s, %s launches): see %s\n' "$op" "$filter" \
      "$(cat "$dir/rc")" "$launches" "$dir/log"
    failed=$((failed + 1))
  fi
done
echo "sim: ${SECONDS} s in all"
finish
