#!/usr/bin/env bash
# Builds the sm70ops wheel: dist/sm70ops-VERSION-py3-none-PLATFORM.whl, where PLATFORM is the
# manylinux tag auditwheel confirms for the two plugins (never written by hand): manylinux_2_17
# here, the static cudart's calls bound to glibc's versions before 2.34 (tools/glibc_compat.bzl);
# tools/wheel_test.sh fails one newer than manylinux_2_28. Inside:
#   sm70ops/                    the Python package (integration/python/sm70ops), the console
#                               script `sm70ops` (info, check, ...) and the extra [torch]
#   sm70ops/lib/v100/           the V100 release plugin: bazel build --config=sm70 (CUDA 11.8,
#                               sm_70 SASS + compute_70 PTX, static cudart)
#   sm70ops/lib/validation/     the validation plugin: bazel build (CUDA 13, sm_75 + sm_90)
# The package loads the one that fits the device (sm70ops/plugin.py, bundled_library);
# SM70OPS_LIBRARY still overrides. The build tools (setuptools, wheel, auditwheel, pinned) live
# in a virtual environment under $SM70OPS_WHEEL_TOOLS (default ~/.cache/sm70ops-wheel-tools),
# installed from PyPI on first use. Prints the wheel's path last.
#   bash tools/wheel.sh            build (tools/wheel_test.sh installs and tests it)
set -euo pipefail
cd "$(dirname "$0")/.."
tools=${SM70OPS_WHEEL_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sm70ops-wheel-tools}
pins=(setuptools==84.2.1 wheel==0.48.0 auditwheel==6.8.2)
log=/tmp/sm70ops-wheel.log
: >"$log"

if ! "$tools/bin/python" -m pip freeze 2>/dev/null | grep -qx "auditwheel==6.8.2"; then
  python3 -m venv "$tools" >>"$log" 2>&1
  "$tools/bin/python" -m pip install -q "${pins[@]}" >>"$log" 2>&1 ||
    { echo "wheel: cannot install ${pins[*]}: see $log" >&2; exit 1; }
fi

# The two plugins, each from its own build (--symlink_prefix=/ leaves bazel-bin alone).
plugin() { # BAZEL_FLAGS...: the built plugin's path
  bazel build --symlink_prefix=/ "$@" //:sm70ops >>"$log" 2>&1 ||
    { echo "wheel: bazel build $* //:sm70ops failed: see $log" >&2; exit 1; }
  echo "$(bazel info "$@" bazel-bin 2>/dev/null)/libsm70ops.so"
}
v100=$(plugin --config=sm70)
validation=$(plugin)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp integration/python/pyproject.toml integration/python/README.md "$stage/"
cp -r integration/python/sm70ops "$stage/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
install -D -m 755 "$v100" "$stage/sm70ops/lib/v100/libsm70ops.so"
install -D -m 755 "$validation" "$stage/sm70ops/lib/validation/libsm70ops.so"

# setuptools sees a pure package (ctypes, no extension): its wheel says py3-none-any and
# Root-Is-Purelib. The plugins make it a platform wheel: platlib, and the tag that auditwheel
# reads from their ELF symbol versions.
"$tools/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$stage/dist" "$stage" \
  >>"$log" 2>&1 || { echo "wheel: pip wheel failed: see $log" >&2; exit 1; }
pure=$(ls "$stage"/dist/sm70ops-*-py3-none-any.whl)
"$tools/bin/python" -m wheel unpack -d "$stage/unpacked" "$pure" >>"$log"
sed -i 's/^Root-Is-Purelib: true$/Root-Is-Purelib: false/' "$stage"/unpacked/*/*.dist-info/WHEEL
rm "$pure"
"$tools/bin/python" -m wheel pack -d "$stage/dist" "$stage"/unpacked/* >>"$log"
any=$(ls "$stage"/dist/sm70ops-*-py3-none-any.whl)
shown=$("$tools/bin/auditwheel" show "$any" 2>&1) || { echo "$shown" >&2; exit 1; }
platform=$(grep -oE '"manylinux_[0-9]+_[0-9]+_x86_64"' <<<"$shown" | head -n 1 | tr -d '"')
[ -n "$platform" ] || { echo "wheel: auditwheel names no manylinux tag:" >&2; echo "$shown" >&2; exit 1; }
"$tools/bin/python" -m wheel tags --python-tag py3 --abi-tag none --platform-tag "$platform" \
  --remove "$any" >>"$log" 2>&1
mkdir -p dist
built=$(ls "$stage"/dist/sm70ops-*-py3-none-"$platform".whl)
rm -f dist/sm70ops-*.whl
mv "$built" dist/
wheel=dist/$(basename "$built")
"$tools/bin/auditwheel" show "$wheel"
echo "$wheel"
