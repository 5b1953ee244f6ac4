#!/usr/bin/env bash
# The main job: set up, build the plugin and its CLI, and report what the plugin accepts on this
# machine and why; on a machine with a CUDA GPU, also verify every op and benchmark it.
#   bash tools/report.sh             this machine's device (or "no CUDA device")
#   bash tools/report.sh --cc 70     also plan for a V100 (compute capability 7.0)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
config=()
[ "${SM70OPS_CONFIG:-}" = sm70 ] && config=(--config=sm70)
bazel build "${config[@]}" //:sm70ops //integration/cli:sm70ops 2>&1 | grep -E "ERROR|error:" || true
cli=bazel-bin/integration/cli/sm70ops
"$cli" info
"$cli" check
if [ "${1:-}" = --cc ]; then "$cli" check --cc "$2"; fi
# verify and bench exit 2 when they cannot run here (no GPU, or no op accepted): say so, go on.
"$cli" verify || [ $? -eq 2 ]
"$cli" bench || [ $? -eq 2 ]
