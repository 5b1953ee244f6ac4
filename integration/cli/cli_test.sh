#!/bin/bash
# The sm70ops tool against the built plugin: output shape and exit codes, on any machine.
set -euo pipefail

runfiles="${TEST_SRCDIR}/sm70ops"
cli="${runfiles}/integration/cli/sm70ops"
plugin="${runfiles}/libsm70ops.so"
out="${TEST_TMPDIR}/out"
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_exit CODE ARGS...: runs the tool into $out and checks its exit code.
expect_exit() {
  local want="$1" got=0
  shift
  "${cli}" "$@" >"${out}" 2>&1 || got=$?
  [[ "${got}" == "${want}" ]] || fail "sm70ops $* exited ${got}, expected ${want}: $(cat "${out}")"
}

expect_line() {
  grep -Eq -- "$1" "${out}" || fail "no line matching '$1' in: $(cat "${out}")"
}

# The plan: the index per page size (any TP), the attention per TP and page size, the MoE per TP.
expect_table() {
  expect_line '^op +TP +page +prefill +rows x keys +decision +route +workspace +reason +message$'
  expect_line '^shapes: +Qwen3\.8-Flash-Next per rank at TP 1, 2, 4, 8; 16- and 64-token pages;'
  for prefill in 8K 32K 128K 256K; do
    for page in 16 64; do
      expect_line "^qsa_index +all +${page} +${prefill} +8192 x "
      for tp in 1 2 4 8; do expect_line "^qsa_attn +${tp} +${page} +${prefill} +8192 x 2051 "; done
    done
  done
  for tp in 1 2 4 8; do
    expect_line "^nvfp4_moe +${tp} +all +all +8192 x 10 experts "
    expect_line "^nvfp4_moe_prepare +${tp} +all +all +512 experts "
  done
  expect_line '^[0-9]+ of 48 accepted'
}

# Without --library the tool finds the plugin from its own location (bazel-bin layout).
expect_exit 0 info
expect_line '^name: +sm70ops [0-9]+\.[0-9]+\.[0-9]+$'
expect_line '^ABI: +plugin 1\.[0-9]+, host 1\.[0-9]+, negotiated 1\.[0-9]+$'
expect_line '^devices: '
gpu_present=1
grep -q 'no CUDA device' "${out}" && gpu_present=0

# A plan for a GPU this build has no code for shows the plugin's warning about it.
expect_exit 0 --library "${plugin}" info
has_sm70=0
grep -Eq '^SASS: +(.*,)?sm_70(,|$)' "${out}" && has_sm70=1
expect_exit 0 --library "${plugin}" check --cc 70
expect_table
expect_line 'compute capability 7\.0 \(--cc'
if [[ "${has_sm70}" == 1 ]]; then
  grep -q 'this build carries' "${out}" && fail "a warning for a build with sm_70: $(cat "${out}")"
else
  expect_line '^\[warn\] sm70ops: this build carries code for sm_[0-9,sm_]+ only, none for compute'
  expect_line 'capability 7\.0: a V100 needs the sm70 build \(--config=sm70\); checks answer from'
fi

expect_exit 0 --library "${plugin}" check --tp 4 --page 16
expect_line '^shapes: +Qwen3\.8-Flash-Next per rank at TP 4; 16-token pages;'
expect_line '^[0-9]+ of 10 accepted'
expect_exit 0 --library "${plugin}" check
expect_table
if [[ "${gpu_present}" == 0 ]]; then
  expect_line '^qsa_attn +4 +64 +32K +8192 x 2051 +decline +- +- +NO_DEVICE +no CUDA device$'
  expect_line '^0 of 48 accepted: 48 declined \(NO_DEVICE 48\)$'
  expect_line '^\[warn\] sm70ops: no CUDA device: every op will decline$'
fi

expect_exit 0 --help
expect_line '^exit codes:$'
expect_line 'python3 -m sm70ops bench\|demo'
expect_exit 64 frobnicate
expect_line "unknown command 'frobnicate'"
expect_exit 64 check --tp 3
expect_exit 64 check --page 32
expect_exit 64 bench qsa_index
expect_line "unknown command 'bench'"
expect_exit 1 --library /nonexistent/libsm70ops.so info
expect_line "cannot load the sm70ops plugin '/nonexistent/libsm70ops.so'"

if [[ "${failures}" != 0 ]]; then
  echo "${failures} check(s) failed"
  exit 1
fi
echo "PASS"
