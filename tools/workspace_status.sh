#!/usr/bin/env bash
# Bazel stamping: the git revision the plugin reports in its identity.
rev=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && rev="$rev-dirty"
echo "STABLE_GIT_REVISION $rev"
