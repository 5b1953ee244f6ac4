#!/usr/bin/env bash
# The simulated V100 the bench runs (tools/sim_bench.sh): ../shared/tools/v100sim's simulator, the
# same source tarball and patches built the same way as its setup.sh does, plus this folder's
# patches (sample-waves.patch: -v100sim_sample_waves; speed.patch: the same simulation in less CPU
# time; each patch's header says what it changes and why). With no sampling option set it prints
# what the shared build prints, statistic for statistic (tools/sim_bench.sh --same-answers checks
# it).
#   bash tools/v100sim/build.sh    once per source, patch and script version (about 2.5 minutes
#                                  on two cores); prints "v100sim (sm70ops) ready: PREFIX=..."
# Needs the shared build first (its setup.sh): its fake CUDA directory and config are reused.
# PREFIX: $SM70OPS_V100SIM_PREFIX, default ~/.cache/v100sim-sm70ops.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sim=$(cd "$here/../../../shared/tools/v100sim" && pwd)
shared=${V100SIM_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/v100sim}
prefix=${SM70OPS_V100SIM_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/v100sim-sm70ops}
log() { echo "v100sim (sm70ops): $*" >&2; }

[ -f "$shared/lib/libcudart.so" ] || { log "no shared simulator in $shared: run $sim/setup.sh"; exit 2; }
stamp=$(cat "$sim"/gpgpu-sim-*.tar.gz "$sim"/patches/*.patch "$here"/*.patch "$0" | sha256sum |
  cut -c1-16)
if [ -f "$prefix/stamp" ] && [ "$(cat "$prefix/stamp")" = "$stamp" ]; then
  echo "v100sim (sm70ops) ready: PREFIX=$prefix (stamp $stamp)"
  exit 0
fi

# Built beside the prefix and moved into place at the end: a simulator running from the old
# build (a bench's case) keeps it, and a failed build leaves the old one as it was.
next=$prefix.next
src=$next/build
rm -rf "$next" && mkdir -p "$src" "$next/lib"
tar -xzf "$sim"/gpgpu-sim-*.tar.gz -C "$src"
for p in "$sim"/patches/*.patch "$here"/*.patch; do
  patch -d "$src" -p1 -s --no-backup-if-mismatch <"$p"
done
# As the shared setup.sh: a git tree for the build string, nvcc 11.8's g++ first on PATH.
(cd "$src" && git init -q && git add -A &&
  git -c user.email=v100sim@localhost -c user.name=v100sim commit -qm "gpgpu-sim $stamp")
log "building (make -j$(nproc), log: $next/build.log)"
(cd "$src" && export CUDA_INSTALL_PATH=$shared/cuda PATH=/usr/lib/nvidia-cuda-toolkit/bin:/usr/bin:/bin &&
  set +eu && source ./setup_environment release >/dev/null && set -eu &&
  nice -n 10 make -j"$(nproc)" >"$next/build.log" 2>&1) ||
  { tail -n 30 "$next/build.log" >&2; log "build failed: $next/build.log"; exit 1; }
cp "$(ls "$src"/lib/*/*/release/libcudart.so)" "$next/lib/libcudart.so"
for v in 11.0 10.0 10.1 9.0 9.1 9.2; do ln -sfn libcudart.so "$next/lib/libcudart.so.$v"; done
ln -sfn "$shared/cuda" "$next/cuda"
ln -sfn "$shared/config" "$next/config"
rm -rf "$src"
echo "$stamp" >"$next/stamp"
rm -rf "$prefix.old"
if [ -e "$prefix" ]; then mv "$prefix" "$prefix.old"; fi
mv "$next" "$prefix" && rm -rf "$prefix.old"
echo "v100sim (sm70ops) ready: PREFIX=$prefix (stamp $stamp)"
