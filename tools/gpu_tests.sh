#!/usr/bin/env bash
# GPU tests and benchmarks on a machine with a CUDA GPU but no Bazel (the device machine).
#   bash tools/gpu_tests.sh pack   here: build (default config, or SM70OPS_CONFIG=sm70: the V100
#                                  build, the default when packing on a V100) and copy the
#                                  plugin, the C tool and the GPU tests to $SM70OPS_DEVICE_DIR
#                                  (default .device/; e.g. .device-sm70 to carry both builds)
#   bash tools/gpu_tests.sh run    there: run every GPU test, then print one summary line
#   bash tools/gpu_tests.sh sanitize [TOOL...]  there: the GPU tests under compute-sanitizer's
#                                  memcheck, racecheck, initcheck and synccheck (or the TOOLs
#                                  named); a table of errors found
#   bash tools/gpu_tests.sh bench [ARGS]  there: python3 -m sm70ops bench OP [ARGS] for each op
#                                  on the packed plugin (needs torch); e.g. ARGS --shapes v1
# run, sanitize and bench use the build in $SM70OPS_DEVICE_DIR. On a GPU other than a V100 the
# plugin declines by design; they set SM70OPS_ALLOW_ARCH to the device's compute capability and
# SM70OPS_ALLOW_PTX=1 (the V100 build's compute_70 PTX, JIT-compiled by the driver), for
# validation only.
set -uo pipefail
cd "$(dirname "$0")/.."
tests=(//tests/gpu:qsa_index_test //tests/gpu:qsa_attn_test //tests/gpu:qsa_attn_token_ids_test
  //tests/gpu:lifecycle_gpu_test //tests/gpu:nvfp4_moe_test)

dir=${SM70OPS_DEVICE_DIR:-.device}

label_path() { local l=${1#//}; echo "${l/://}"; }  # //a/b:c -> a/b/c

pack() {
  source tools/build_config.sh
  bazel build "${build_config[@]}" //:sm70ops //integration/cli:sm70ops "${tests[@]}" >/dev/null 2>&1 ||
    { echo "gpu_tests: build failed"; exit 1; }
  rm -rf "$dir" && mkdir -p "$dir"
  cp bazel-bin/libsm70ops.so bazel-bin/integration/cli/sm70ops "$dir/"
  for t in "${tests[@]}"; do cp "bazel-bin/$(label_path "$t")" "$dir/"; done
  echo "gpu_tests: packed $(ls "$dir" | wc -l) files (${SM70OPS_CONFIG:-default} build) into $dir/"
}

use_device() {
  local cc
  source tools/gpu_cc.sh
  cc=$(gpu_compute_capability)
  export SM70OPS_LIBRARY=$PWD/$dir/libsm70ops.so SM70OPS_CLI=$PWD/$dir/sm70ops
  if [ -n "$cc" ] && [ "$cc" != 70 ]; then
    export SM70OPS_ALLOW_ARCH=$cc SM70OPS_ALLOW_PTX=1
    echo "gpu_tests: compute capability $cc: SM70OPS_ALLOW_ARCH=$cc SM70OPS_ALLOW_PTX=1 (validation only)"
  fi
  echo "gpu_tests: $dir/: $("$SM70OPS_CLI" info 2>/dev/null | grep -m1 SASS)"
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
    "$dir/$name" --gtest_output="xml:$xml" | grep -vE '^\[ +(RUN|OK) +\]'
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

# Under the sanitizers each suite leaves out the cases whose instrumented kernels or CPU reference
# take minutes: contexts of 131072 tokens and more, the 1000-cycle lifecycle loops, the SimBench
# cases (whole model chunks) and the MoE's two cases of 1000 tokens at H 2560. Every kernel and
# launch shape they run is run by a case that stays: the index's select over long contexts by
# c4_p16_k512_ctx65539 and c4_p16_ctx20003 (the same blocks per row, fewer rows), the attention's
# D 256 and D 128 tiles and every GQA group by the g* and tp* cases, the MoE's GEMMs at H 2560 and
# I 80..640 by tp*_t*_e512 and tp4_t64_skewed_strided, its many-token routing by two_passes and
# t8192_quantized_floats; the capture, stream and checked-mode cases all run.
sanitize_filter='-*131072*:*262144*:*Thousand*:SimBench/*:*tp4_t1000_skewed*:*tp1_t999*'

# One tool over one suite: a line "TOOL SUITE SECONDS SUMMARY" (run by sanitize in parallel).
sanitize_one() {
  local tool=$1 name=$2 log start summary
  log=${OUT:-/tmp}/sanitize-$tool-$name.log
  start=$(date +%s)
  compute-sanitizer --tool "$tool" --print-limit 10 "$dir/$name" --gtest_filter="$sanitize_filter" \
    >"$log" 2>&1
  summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -n 1 | sed 's/=* *//')
  grep -q "FAILED TEST" "$log" && summary="${summary:-no summary}; test failures"
  echo "$tool $name $(($(date +%s) - start)) ${summary:-no summary: see $log}"
}

# The named tools (default: all four) over every suite, SM70OPS_SANITIZE_JOBS (default: half the
# CPUs) processes at once; a table of each run's wall time and summary, and each tool's total.
sanitize() {
  use_device
  local tools=("$@") jobs=${SM70OPS_SANITIZE_JOBS:-$(($(nproc) / 2))} start errors=0
  [ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck initcheck synccheck)
  start=$(date +%s)
  export -f sanitize_one
  export dir sanitize_filter
  local results
  results=$(for tool in "${tools[@]}"; do
    for t in "${tests[@]}"; do echo "$tool $(basename "$(label_path "$t")")"; done
  done | xargs -P "$((jobs > 0 ? jobs : 1))" -L 1 bash -c 'sanitize_one "$0" "$1"' | sort)
  printf '%-10s %-24s %8s  %s\n' tool suite seconds result
  while read -r tool name seconds summary; do
    printf '%-10s %-24s %8s  %s\n' "$tool" "$name" "$seconds" "$summary"
    if ! grep -qE "SUMMARY: 0 (errors|hazards)" <<<"$summary" || grep -q "test failures" <<<"$summary"; then
      errors=$((errors + 1))
    fi
  done <<<"$results"
  for tool in "${tools[@]}"; do
    echo "sanitize: $tool: $(awk -v t="$tool" '$1 == t { s += $3 } END { print s + 0 }' \
      <<<"$results") s over the suites (run $jobs at a time)"
  done
  echo "sanitize: $(($(date +%s) - start)) s in all; $errors tool runs with errors"
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
