#!/usr/bin/env bash
# The wheel as a user gets it: tools/wheel.sh builds it, with a platform tag no newer than
# manylinux_2_28 (V100 clusters run RHEL 8, glibc 2.28; PyTorch's wheels ask the same), pip
# installs it into a fresh virtual environment, and from there, outside the source tree:
#   sm70ops info                 the bundled plugin that fits this machine loads
#   sm70ops check --cc 70        every op of the model's plan accepted for a V100 (48 of 48)
#   the Python suite (integration/python/tests) against the installed package and its bundled
#   plugin (SM70OPS_TEST_INSTALLED=1): the tests that need torch or a GPU skip where these are
#   missing, and run where they are (the environment sees the system's site packages)
# Ends with "wheel: N passed, N failed, N skipped" (tools/test.sh adds it to its total): the
# suite's cases and one case each for the build, the tag, the install, info and check. Logs under
# /tmp/sm70ops-wheel-test/.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=/tmp/sm70ops-wheel-test
rm -rf "$out" && mkdir -p "$out/xml/wheel" && touch "$out/stamp"
passed=0 failed=0 skipped=0
pass() { echo "wheel: $1: ok"; passed=$((passed + 1)); }
fail() { echo "wheel: $1: FAILED (see $2)"; failed=$((failed + 1)); }
finish() {
  echo "wheel: $passed passed, $failed failed, $skipped skipped"
  exit $((failed > 0))
}
# A tag newer than manylinux_2_28 means a plugin calls glibc at a version above 2.28: the
# build log's auditwheel report names the symbols, tools/glibc_compat.bzl binds such calls.
check_tag() { # WHEEL
  local platform major minor
  platform=$(grep -oE 'manylinux_[0-9]+_[0-9]+' <<<"$1")
  IFS=_ read -r _ major minor <<<"$platform"
  if [ -n "$platform" ] && ((major < 2 || (major == 2 && minor <= 28))); then
    pass "platform tag $platform, no newer than manylinux_2_28"
  else
    fail "platform tag ${platform:-none} is newer than manylinux_2_28 (RHEL 8, glibc 2.28)" \
      "auditwheel's report in $out/build.log for the symbols"
  fi
}

if bash tools/wheel.sh >"$out/build.log" 2>&1; then
  wheel=$(tail -n 1 "$out/build.log")
  pass "built $wheel ($(stat -c %s "$wheel") bytes)"
else
  fail "tools/wheel.sh" "$out/build.log"
  finish
fi
check_tag "$wheel"
venv=$out/venv
if python3 -m venv --system-site-packages "$venv" >"$out/install.log" 2>&1 &&
  "$venv/bin/python" -m pip install --no-deps "$repo/$wheel" >>"$out/install.log" 2>&1; then
  pass "pip install into a fresh virtual environment"
else
  fail "pip install" "$out/install.log"
  finish
fi

cd "$out"  # nothing of the source tree on the path from here
unset SM70OPS_LIBRARY
if "$venv/bin/sm70ops" info >"$out/info.log" 2>&1; then
  pass "sm70ops info: $(grep -E '^(plugin|SASS):' "$out/info.log" | tr -s ' ' | paste -sd';')"
else
  fail "sm70ops info" "$out/info.log"
fi
"$venv/bin/sm70ops" check --cc 70 >"$out/check.log" 2>&1
summary=$(grep -E '^[0-9]+ of [0-9]+ accepted' "$out/check.log")
if [ "$summary" = "48 of 48 accepted" ]; then
  pass "sm70ops check --cc 70: $summary"
else
  fail "sm70ops check --cc 70: ${summary:-no summary}" "$out/check.log"
fi

SM70OPS_TEST_INSTALLED=1 "$venv/bin/python" -m pytest "$repo/integration/python/tests" -q \
  -c "$repo/integration/python/pytest.ini" --rootdir "$repo/integration/python" \
  --junitxml="$out/xml/wheel/test.xml" >"$out/pytest.log" 2>&1
rc=$?
grep -E "^(FAILED|ERROR)|passed|failed" "$out/pytest.log" | tail -n 15
line=$(python3 "$repo/tools/count_tests.py" "installed package" "$out/xml" "$out/stamp" | tail -n 1)
echo "$line"
read -r p f s < <(grep -oE '[0-9]+ (passed|failed|skipped)' <<<"$line" | cut -d' ' -f1 | paste -sd' ')
passed=$((passed + ${p:-0})) failed=$((failed + ${f:-0})) skipped=$((skipped + ${s:-0}))
if [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then fail "pytest exited $rc with no failing case" "$out/pytest.log"; fi
finish
