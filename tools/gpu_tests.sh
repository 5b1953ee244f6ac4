#!/usr/bin/env bash
# GPU tests and benchmarks on a machine with a CUDA GPU but no Bazel (the device machine).
#   bash tools/gpu_tests.sh pack   here: build (default config, or SM70OPS_CONFIG=sm70 for a
#                                  V100 device machine; the default when packing on a V100) and
#                                  copy the plugin, the C tool and the GPU tests to .device/
#   bash tools/gpu_tests.sh run    there: run every GPU test, then print one summary line
#   bash tools/gpu_tests.sh sanitize [TOOL...]  there: the GPU tests under compute-sanitizer's
#                                  memcheck, racecheck, initcheck and synccheck (or the TOOLs
#                                  named); a table of errors found
#   bash tools/gpu_tests.sh bench [ARGS]  there: python3 -m sm70ops bench OP [ARGS] for each op
#                                  on .device/'s plugin (needs torch); e.g. ARGS --shapes v1
# On a GPU other than a V100 the plugin declines by design; the run sets SM70OPS_ALLOW_ARCH to
# the device's compute capability, for validation only.
set -uo pipefail
cd "$(dirname "$0")/.."
tests=(//tests/gpu:qsa_index_test //tests/gpu:qsa_attn_test //tests/gpu:qsa_attn_token_ids_test
  //tests/gpu:lifecycle_gpu_test //tests/gpu:nvfp4_moe_test)

label_path() { local l=${1#//}; echo "${l/://}"; }  # //a/b:c -> a/b/c

pack() {
  source tools/build_config.sh
  bazel build "${build_config[@]}" //:sm70ops //integration/cli:sm70ops "${tests[@]}" >/dev/null 2>&1 ||
    { echo "gpu_tests: build failed"; exit 1; }
  rm -rf .device && mkdir -p .device
  cp bazel-bin/libsm70ops.so bazel-bin/integration/cli/sm70ops .device/
  for t in "${tests[@]}"; do cp "bazel-bin/$(label_path "$t")" .device/; done
  echo "gpu_tests: packed $(ls .device | wc -l) files into .device/"
}

use_device() {
  local cc
  source tools/gpu_cc.sh
  cc=$(gpu_compute_capability)
  export SM70OPS_LIBRARY=$PWD/.device/libsm70ops.so SM70OPS_CLI=$PWD/.device/sm70ops
  if [ -n "$cc" ] && [ "$cc" != 70 ]; then
    export SM70OPS_ALLOW_ARCH=$cc
    echo "gpu_tests: compute capability $cc: SM70OPS_ALLOW_ARCH=$cc (validation only)"
  fi
}

# passed failed skipped of a JUnit XML file (GoogleTest's or pytest's).
junit_counts() {
  python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
fail = sum(1 for c in cases if c.find("failure") is not None or c.find("error") is not None)
skip = sum(1 for c in cases if c.get("result") == "skipped" or c.find("skipped") is not None)
print(len(cases) - fail - skip, fail, skip)
PY
}

run() {
  use_device
  local passed=0 failed=0 skipped=0 p f s
  for t in "${tests[@]}"; do
    local name xml
    name=$(basename "$(label_path "$t")")
    xml=${OUT:-/tmp}/$name.xml
    ".device/$name" --gtest_output="xml:$xml" | grep -vE '^\[ +(RUN|OK) +\]'
    read -r p f s < <(junit_counts "$xml")
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  done
  # The Python binding's suite: its GPU tests (plugin vs generic through torch, the demo) run
  # only here. pytest comes from the machine, or from wheels in .whl/ (pip download pytest).
  if python3 -c "import torch, pytest" 2>/dev/null; then
    local xml=${OUT:-/tmp}/python.xml
    python3 -m pytest -q integration/python/tests --junitxml="$xml" | tail -n 25
    read -r p f s < <(junit_counts "$xml")
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  else
    echo "gpu_tests: Python suite skipped: torch or pytest is not importable"
    skipped=$((skipped + 1))
  fi
  echo "gpu: $passed passed, $failed failed, $skipped skipped"
}

# The named tools (default: all four) over every test binary, but the cases whose CPU reference or cycle count would take
# minutes under instrumentation (131072-token contexts, the 1000 load cycles): kernels and
# launch shapes are the same in the cases that remain.
sanitize() {
  use_device
  local filter='-*131072*:*Thousand*'
  local errors=0
  printf '%-12s %-22s %s\n' tool test result
  local tools=("$@")
  [ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck initcheck synccheck)
  for tool in "${tools[@]}"; do
    for t in "${tests[@]}"; do
      local name log summary
      name=$(basename "$(label_path "$t")")
      log=${OUT:-/tmp}/sanitize-$tool-$name.log
      compute-sanitizer --tool "$tool" --print-limit 10 ".device/$name" --gtest_filter="$filter" >"$log" 2>&1
      summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -n 1 | sed 's/=* *//')
      grep -q "FAILED TEST" "$log" && summary="$summary; test failures"
      printf '%-12s %-22s %s\n' "$tool" "$name" "${summary:-no summary: see $log}"
      grep -qE "SUMMARY: 0 (errors|hazards)" <<<"$summary" || errors=$((errors + 1))
      grep -q "FAILED TEST" "$log" && errors=$((errors + 1))
    done
  done
  echo "sanitize: $errors tool runs with errors"
}

# Every op's bench (integration/python/sm70ops/bench*.py): the plugin against the host's paths,
# with roofline floors. Exits with the last failing bench's code (2: no torch or no GPU).
bench() {
  use_device
  local op code=0
  for op in qsa_index qsa_attn nvfp4_moe; do
    PYTHONPATH=integration/python python3 -m sm70ops bench "$op" "$@" || code=$?
  done
  return "$code"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  sanitize) shift; sanitize "$@" ;;
  bench) shift; bench "$@" ;;
  *) echo "usage: $0 pack|run|sanitize [TOOL...]|bench [ARGS]" >&2; exit 64 ;;
esac
