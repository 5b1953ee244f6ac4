#!/usr/bin/env bash
# The test command of the README and of CI: every test that needs no GPU, on both builds.
#   default build (CUDA 13, sm_75 + sm_90): conformance, host loader, CLI
#   V100 build (--config=sm70, CUDA 11.8): the same, plus the SASS audit of the sm_70 binary
# Tests that need a GPU skip with a printed reason here. Ends with "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."

passed=0 failed=0 skipped=0
run_config() { # LABEL BAZEL_FLAGS...
  local label=$1; shift
  local stamp; stamp=$(mktemp)
  sleep 1  # test.xml mtimes are compared against the stamp at one-second resolution
  bazel test --nocache_test_results "$@" //... >"/tmp/sm70ops-test-$label.log" 2>&1
  local rc=$?
  tail -n 25 "/tmp/sm70ops-test-$label.log" | grep -E "PASSED|FAILED|SKIPPED|NO STATUS|ERROR|Executed" || true
  local line; line=$(python3 tools/count_tests.py "$label" "$(bazel info "$@" bazel-testlogs 2>/dev/null)" "$stamp")
  echo "$line"
  local counts; counts=$(tail -n 1 <<<"$line" | grep -oE '[0-9]+ (passed|failed|skipped)' | cut -d' ' -f1 | paste -sd' ')
  read -r p f s <<<"$counts"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  # A build or harness failure with no test case to show for it still counts as a failure.
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "$label: bazel test exited $rc with no failing case: see /tmp/sm70ops-test-$label.log"
    failed=$((failed + 1))
  fi
  rm -f "$stamp"
}

run_config default --test_tag_filters=-sm70_only
run_config sm70 --config=sm70

if python3 tools/format_check.py; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
