#!/usr/bin/env bash
# The SASS audit flags exactly the fixture kernels that break a rule, and passes the plugin.
# Args: CUOBJDUMP AUDIT FIXTURE_SO PLUGIN_SO
set -u
cuobjdump=$1 audit=$2 fixture=$3 plugin=$4
failed=0
expect() { grep -q -- "$1" <<<"$out" || { echo "MISSING: $1"; failed=1; }; }

out=$(python3 "$audit" --cuobjdump "$cuobjdump" "$fixture"); rc=$?
echo "$out"
[ "$rc" -eq 1 ] || { echo "audit exit $rc on the fixture, expected 1"; failed=1; }
expect "FAIL: declared tensor-core (name has 'wmma') but no HMMA"
expect "FAIL: local memory"
# The good kernel's line is followed by no FAIL line.
grep -A1 "fixture_good_wmma" <<<"$out" | grep -q FAIL && { echo "good kernel flagged"; failed=1; }
grep "fixture_good_wmma" <<<"$out" | awk '{ if ($5 == 0) exit 1 }' || { echo "no HMMA in good kernel"; failed=1; }

out=$(python3 "$audit" --cuobjdump "$cuobjdump" "$plugin"); rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "audit exit $rc on the plugin, expected 0"; failed=1; }
exit $failed
