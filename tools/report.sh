#!/usr/bin/env bash
# The main job: set up, build the plugin and its CLI, and report what the plugin accepts on this
# machine and why; on a machine with a CUDA GPU, also run the GPU tests (every op against its CPU
# reference) and the benchmarks. SM70OPS_CONFIG=sm70 builds the V100 release build (the default
# on a V100).
#   bash tools/report.sh             this machine's device (or "no CUDA device")
#   bash tools/report.sh --cc 70     also plan for a V100 (compute capability 7.0)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
source tools/build_config.sh
bazel build "${build_config[@]}" //:sm70ops //integration/cli:sm70ops 2>&1 | grep -E "ERROR|error:" || true
cli=bazel-bin/integration/cli/sm70ops
"$cli" info
"$cli" check
if [ "${1:-}" = --cc ]; then "$cli" check --cc "$2"; fi
if [ -n "$gpu_cc" ]; then
  bash tools/gpu_tests.sh pack
  bash tools/gpu_tests.sh run
  # A bench exits 2 when it cannot run here (no torch): it says so; go on.
  bash tools/gpu_tests.sh bench || [ $? -eq 2 ]
else
  echo "report: no CUDA GPU here: the GPU tests and benchmarks (tools/gpu_tests.sh) need one"
fi
