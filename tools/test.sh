#!/usr/bin/env bash
# The test command of the README and of CI: every test that needs no GPU, on both builds.
#   default build (CUDA 13, sm_75 + sm_90): every Bazel test (conformance, host loader, CLI,
#     CPU references, shared helpers, plugin internals; GPU tests skip)
#   V100 build (--config=sm70, CUDA 11.8): the same, plus the SASS audit of the sm_70 binary
#   then the Python binding's pytest suite, the wheel (built, installed into a fresh virtual
#   environment, checked and tested from there: tools/wheel_test.sh), the ASan + UBSan run, the
#   fuzzers, the GPU tests' simulator cases on a simulated V100 (tools/sim_tests.sh) and the
#   source checks (clang-format, pyflakes)
# Tests that need a real GPU skip with a printed reason here. Ends with "N passed, N failed,
# N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."

passed=0 failed=0 skipped=0
# Adds a step's summary line ("...: N passed, N failed[, N skipped]") to the totals and sets
# step_failed; a line with neither count is one failure.
count_of() { grep -oE "[0-9]+ $1" <<<"$2" | tail -n 1 | cut -d' ' -f1; } # WORD LINE
add_counts() { # STEP LINE
  local p f s
  p=$(count_of passed "$2") f=$(count_of failed "$2") s=$(count_of skipped "$2")
  [ -z "$p$f" ] && { echo "$1: no result"; f=1; }
  passed=$((passed + ${p:-0})) failed=$((failed + ${f:-0})) skipped=$((skipped + ${s:-0}))
  step_failed=${f:-0}
}

run_config() { # LABEL BAZEL_FLAGS...   (TARGETS="..." run_config ...: other targets than //...)
  local label=$1; shift
  local stamp; stamp=$(mktemp)
  sleep 1  # test.xml mtimes are compared against the stamp at one-second resolution
  bazel test --nocache_test_results "$@" ${TARGETS:-//...} >"/tmp/sm70ops-test-$label.log" 2>&1
  local rc=$?
  tail -n 25 "/tmp/sm70ops-test-$label.log" | grep -E "PASSED|FAILED|SKIPPED|NO STATUS|ERROR|Executed" || true
  local line; line=$(python3 tools/count_tests.py "$label" "$(bazel info "$@" bazel-testlogs 2>/dev/null)" "$stamp")
  echo "$line"
  add_counts "$label" "$(tail -n 1 <<<"$line")"
  # A build or harness failure with no test case to show for it still counts as a failure.
  if [ "$rc" -ne 0 ] && [ "$step_failed" -eq 0 ]; then
    echo "$label: bazel test exited $rc with no failing case: see /tmp/sm70ops-test-$label.log"
    failed=$((failed + 1))
  fi
  rm -f "$stamp"
}

run_config default
run_config sm70 --config=sm70

# --- Python host integration (integration/python): pytest against the default build's plugin.
# Its JUnit XML is counted by count_tests.py like Bazel's; a pytest that cannot run, or fails
# with no failing case to show for it, still counts as a failure.
run_pytest() {
  local dir; dir=$(mktemp -d)
  local xml=/tmp/sm70ops-pytest.xml log=/tmp/sm70ops-test-python.log
  rm -f "$xml"
  : >"$log"
  touch "$dir/stamp"
  python3 -m pytest --version >/dev/null 2>&1 || python3 -m pip install -q pytest >>"$log" 2>&1
  SM70OPS_LIBRARY="$(bazel info bazel-bin 2>/dev/null)/libsm70ops.so" \
    python3 -m pytest integration/python/tests -q --junitxml="$xml" >>"$log" 2>&1
  local rc=$?
  grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed|error" "$log" | tail -n 30 || true
  mkdir -p "$dir/integration/python"
  [ -f "$xml" ] && cp "$xml" "$dir/integration/python/test.xml"
  local line; line=$(python3 tools/count_tests.py python "$dir" "$dir/stamp" | tail -n 1)
  echo "$line"
  add_counts python "$line"
  if [ "$rc" -ne 0 ] && [ "$step_failed" -eq 0 ]; then
    echo "python: pytest exited $rc with no failing case: see $log"
    failed=$((failed + 1))
  fi
  rm -rf "$dir"
}
run_pytest
# --- end of the Python host integration step.

# --- The wheel (tools/wheel_test.sh): its last line, "wheel: N passed, N failed, N skipped" (the
# installed package's suite and its build, install, info and check --cc 70), joins the total.
run_wheel() {
  local log=/tmp/sm70ops-test-wheel.log
  bash tools/wheel_test.sh >"$log" 2>&1
  grep -E "^wheel: |^(FAILED|ERROR)|^installed package" "$log" | tail -n 12
  add_counts "wheel (see $log)" "$(tail -n 1 "$log")"
}
run_wheel
# --- end of the wheel step.

# --- Sanitizers and fuzzing (tests/fuzz/, README "Tests"). The conformance suite and the host
# loader test under ASan + UBSan (--config=asan), counted from their JUnit XML like the steps
# above; then each libFuzzer target for a fixed budget (both at once, about 80 s with the build),
# one case each: PASS with "Done N runs", FAIL on a finding or no result, SKIP where a GPU is
# present.
TARGETS="//tests/abi/... //integration/host/..." run_config asan --config=asan
run_fuzzers() {
  local log=/tmp/sm70ops-test-fuzz.log
  bash tests/fuzz/run.sh 60 >"$log" 2>&1
  grep -E "^fuzz |^    " "$log" || true
  local p f s line=""
  p=$(grep -c "^fuzz .*: PASS" "$log") f=$(grep -c "^fuzz .*: FAIL" "$log")
  s=$(grep -c "^fuzz .*: SKIP" "$log")
  [ $((p + f + s)) -gt 0 ] && line="fuzz: $p passed, $f failed, $s skipped" && echo "$line"
  add_counts "fuzz (see $log)" "$line"
}
run_fuzzers
# --- end of the sanitizers and fuzzing step.

# --- GPU tests on a simulated V100 (tools/sim_tests.sh): its last line, "sim: N passed, N failed,
# N skipped", joins the total; a run that ends without it counts as a failure.
run_sim() {
  local log=/tmp/sm70ops-test-sim.log
  bash tools/sim_tests.sh 2>&1 | tee "$log"
  add_counts "sim (see $log)" "$(tail -n 1 "$log")"
}
run_sim
# --- end of the simulated V100 step.

# --- Source checks (tools/source_check.py): clang-format and pyflakes, a case each.
source_checks=$(python3 tools/source_check.py)
echo "$source_checks"
add_counts "source checks" "$(tail -n 1 <<<"$source_checks")"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
