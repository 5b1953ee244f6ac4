#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ (clang-14, see clang_fuzzer.bzl) and runs each for a
# fixed budget, both at once (one core each). Prints one line per target:
#   fuzz ops_fuzzer: PASS (Done 3900000 runs in 61 second(s))
#   fuzz ops_fuzzer: FAIL (... the sanitizer's or invariant's first lines; the input is saved)
#   fuzz ops_fuzzer: SKIP (a GPU is present: the targets pass fake device pointers)
# Usage: tests/fuzz/run.sh [SECONDS_PER_TARGET (default 60)]. Exit status 1 if any target failed.
# The seed is fixed (SEED, default 1) so that a CI run can be reproduced; SEED=0 draws one.
# A saved input replays with: bazel-bin/tests/fuzz/TARGET /tmp/sm70ops-fuzz/TARGET/crash-...
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
seed=${SEED:-1}
targets=(ops_fuzzer env_fuzzer)
out=/tmp/sm70ops-fuzz
mkdir -p "$out"

if ! bazel build "${targets[@]/#/\/\/tests\/fuzz:}" >"$out/build.log" 2>&1; then
  grep -E "error|ERROR" "$out/build.log" | head -n 5
  for t in "${targets[@]}"; do echo "fuzz $t: FAIL (build failed: see $out/build.log)"; done
  exit 1
fi
bin=$(bazel info bazel-bin 2>/dev/null)

for t in "${targets[@]}"; do
  rm -rf "${out:?}/$t" && mkdir -p "$out/$t"
  # -runs bounds a very fast target; the watchdog (timeout) a hung one.
  timeout $((seconds + 120)) "$bin/tests/fuzz/$t" -max_total_time="$seconds" -runs=500000000 \
    -seed="$seed" -timeout=20 -rss_limit_mb=4096 -artifact_prefix="$out/$t/" >"$out/$t.log" 2>&1 &
done
wait

failed=0
for t in "${targets[@]}"; do
  log=$out/$t.log
  done_line=$(grep -oE "Done [0-9]+ runs in [0-9]+ second\(s\)" "$log" | tail -n 1)
  if grep -q "^SKIP $t" "$log"; then
    echo "fuzz $t: SKIP ($(grep "^SKIP $t" "$log" | head -n 1 | cut -d: -f2- | sed 's/^ //'))"
  elif [ -n "$done_line" ] && ! grep -qE "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error" "$log"; then
    echo "fuzz $t: PASS ($done_line)"
  else
    failed=1
    runs=$(grep -oE "^#[0-9]+" "$log" | tail -n 1)
    echo "fuzz $t: FAIL (after about ${runs:-#0} runs; see $log; input saved in $out/$t/)"
    grep -E "runtime error|ERROR: |fuzz invariant|^environment:|SUMMARY|Test unit written" "$log" |
      head -n 6 | sed 's/^/    /'
  fi
done
exit "$failed"
