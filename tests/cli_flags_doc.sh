#!/usr/bin/env bash
# docs/flags.md holds the output of `trident train --help-flags-markdown` (the
# compatibility table generated from the flag table) between its markers; this
# regenerates it and fails when the two differ, so the page cannot drift.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
src=$2
begin='<!-- BEGIN trident train --help-flags-markdown -->'
end='<!-- END trident train --help-flags-markdown -->'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" train --help-flags-markdown >"$tmp/want" || { echo "FAIL: --help-flags-markdown exits $?"; exit 1; }
awk -v b="$begin" -v e="$end" '$0 == e { on = 0 } on { print } $0 == b { on = 1 }' \
  "$src/docs/flags.md" >"$tmp/have"
if ! diff -u "$tmp/have" "$tmp/want" >"$tmp/diff"; then
  echo "FAIL: docs/flags.md's generated table is stale; regenerate it between the markers with"
  echo "      trident train --help-flags-markdown"
  head -40 "$tmp/diff"
  exit 1
fi
echo "ok    docs/flags.md's table is what --help-flags-markdown prints ($(wc -l <"$tmp/want") lines)"
