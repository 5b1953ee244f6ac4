#!/usr/bin/env bash
# Installs CUTLASS's C++ headers for //tests/sim_bench:cutlass_peers (the library peers of the
# simulated-V100 bench): the PyPI wheel nvidia-cutlass, pinned by version and hash, unpacked with
# pip into third_party/cutlass/pip (git-ignored), where WORKSPACE's @cutlass repository
# (third_party/cutlass/cutlass.BUILD) finds its source/include. Nothing else in the tree needs
# it: the one target that does is tagged manual, so `bazel test //...` never reaches @cutlass.
# Idempotent: an install of this version is kept. Needs python3 -m pip and PyPI (6.4 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.2.0.0
sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
dest=third_party/cutlass/pip
stamp=$dest/.sm70ops-nvidia-cutlass-$version
if [ -f "$stamp" ]; then
  echo "cutlass: nvidia-cutlass $version already in $dest"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "nvidia-cutlass==$version --hash=sha256:$sha256" >"$tmp/requirements.txt"
rm -rf "$dest"
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --no-compile --require-hashes \
  --target "$dest" -r "$tmp/requirements.txt"
[ -f "$dest/cutlass_library/source/include/cutlass/gemm/device/gemm_grouped.h" ] ||
  { echo "cutlass: the wheel has no cutlass_library/source/include" >&2; exit 1; }
touch "$stamp"
echo "cutlass: nvidia-cutlass $version installed in $dest"
