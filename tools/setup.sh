#!/usr/bin/env bash
# Installs what building and testing sm70ops needs on a fresh Debian 12 machine:
# Bazel (offline bootstrap build), GoogleTest, DLPack, clang-14 with its sanitizer and libFuzzer
# runtimes (libclang-rt-14-dev, tests/fuzz/), and Debian's CUDA 11.8 for the sm_70 build.
# Idempotent: packages already present are skipped.
set -euo pipefail

need=()
for pkg in bazel-bootstrap libgtest-dev libdlpack-dev clang-14 libclang-rt-14-dev nvidia-cuda-toolkit; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && { echo "setup: all packages present"; exit 0; }

# Debian's CUDA 11.8 (the last toolkit that targets sm_70) lives in non-free.
src=/etc/apt/sources.list.d/sm70ops-nonfree.sources
if [ ! -f "$src" ]; then
  cat >"$src" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
echo "setup: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
echo "setup: done"
