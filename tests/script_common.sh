# Shared by the CLI tests, tests/cli_*.sh (sourced): a scratch directory $tmp, removed at exit
# unless TRIDENT_KEEP_TEST_TMP=1 (a post-mortem of its logs and files), and fail /
# ok, which print a check's line; the caller exits with $failed.
tmp=$(mktemp -d)
trap '[ "${TRIDENT_KEEP_TEST_TMP:-0}" = 1 ] || rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok    $*"; }
