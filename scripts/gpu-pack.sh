#!/usr/bin/env bash
# One prepared call to a GPU machine that cannot build or download (a lent
# machine: one command of at most 600 s, what travels at most 64 MiB): build
# here, carry the binaries and the libraries, run scripts/gpu-check.sh there.
#
#   scripts/gpu-pack.sh [DIR]     # here, after `make build` (nvcc present): DIR
#                                 # (default out/gpu) gets build.tar.xz and deps/
#   bash DIR/run.sh               # there, from the repository's root
#
# build.tar.xz holds what gpu-check.sh's tests and benchmarks run: trident, the
# GPU tests' binaries and ctest's files, under this checkout's absolute path
# (ctest's files name it). run.sh unpacks them at that path (a link to the
# checkout there when the path differs), unpacks Debian's oneDNN, OpenBLAS,
# cJSON and PCRE2 (scripts/offline-deps.sh) and runs
# `PREBUILT=1 scripts/gpu-check.sh` with BUDGET_S (default 540). With $OUT set (a
# lent machine's returned folder, which brings back at most 8 files), the logs
# come back as $OUT/gpu-check-logs.tar.gz, with gpu-check.log (its output, the
# summary last), tests.log, bench_breakdown.txt and compare_kernels.txt beside
# it; without, they stay in out/gpu-check/.
# Build for the machine's GPU: the default build has sm_80, sm_90 and PTX.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
dir=${1:-out/gpu}
build=${BUILD:-build}
[ -x "$build/trident" ] || { echo "gpu-pack: no $build/trident (run make build first)" >&2; exit 1; }
readelf -S "$build/trident" | grep -q nv_fatbin || # (the GPU code's section)
  { echo "gpu-pack: $build has no CUDA backend (configured without nvcc, or TRIDENT_CUDA=OFF)" >&2; exit 1; }
[ -f third_party/cudnn-frontend/include/cudnn_frontend.h ] ||
  echo "gpu-pack: warning: no cuDNN frontend headers in third_party/ (scripts/fetch-cudnn-frontend.py): attention will run on trident's kernels only" >&2
"$build/trident" bench kernels --device cpu --only add --seconds 0.01 >/dev/null ||
  { echo "gpu-pack: $build/trident does not run here" >&2; exit 1; }
mkdir -p "$dir"
# the tests gpu-check.sh runs, and the binaries they name
tests='^(test_device_cuda|cli_train_cuda|cli_train_sealed|mpi_device_comm_np.|test_kernel_.*|test_gpt_(parity|grad|forward_rows)_cuda)$'
bins=$(cd "$build" && ctest -N -V -R "$tests" | sed -n 's/.*Test command: //p' | tr ' ' '\n' | tr -d '"' |
  grep "^$root/$build/" | sort -u)
[ -n "$bins" ] || { echo "gpu-pack: ctest in $build names none of gpu-check.sh's tests" >&2; exit 1; }
files=("$build/CTestTestfile.cmake" "$build/tests/CTestTestfile.cmake")
for b in $bins; do files+=("${b#"$root/"}"); done
tar -C / -cf - "${files[@]/#/${root#/}/}" | xz -9 >"$dir/build.tar.xz"
rm -rf "$dir/deps/root" "$dir/deps/env.sh" # a trial unpack here: not to be carried
if ! ls "$dir"/deps/debs/*.deb >/dev/null 2>&1; then
  scripts/offline-deps.sh download "$dir/deps" >/dev/null
fi
cat >"$dir/run.sh" <<EOF
#!/usr/bin/env bash
# Written by scripts/gpu-pack.sh at commit $(git describe --always --dirty) on $(date -u +%F): run from the
# repository's root on the GPU machine.
set -u
here=\$(cd "\$(dirname "\$0")" && pwd)
if [ "\$(pwd)" != "$root" ]; then
  [ -e "$root" ] || { mkdir -p "$(dirname "$root")" && ln -s "\$(pwd)" "$root"; } ||
    { echo "run.sh: cannot place the checkout at $root (ctest's files name it)"; exit 1; }
  [ "\$(cd "$root" && pwd -P)" = "\$(pwd -P)" ] ||
    { echo "run.sh: $root is another folder, not this checkout (ctest's files name that path)"; exit 1; }
fi
tar -C / --keep-directory-symlink -xJf "\$here/build.tar.xz" || exit 1
scripts/offline-deps.sh unpack "\$here/deps" >/dev/null && . "\$here/deps/env.sh" || exit 1
# what the carried libraries do not cover (MPI above all) must be the machine's own
missing=\$(ldd "$root/$build/trident" | grep 'not found')
[ -z "\$missing" ] || { echo "run.sh: $build/trident needs libraries this machine lacks:"; echo "\$missing"; exit 1; }
cd "$root" || exit 1
[ -n "\${OUT:-}" ] || exec env PREBUILT=1 BUILD=$build BUDGET_S=\${BUDGET_S:-540} OUT=out/gpu-check scripts/gpu-check.sh
# A lent machine returns at most 8 files of \$OUT: the logs go to a folder of
# their own, then into one archive there, with the few read first beside it.
logs=/tmp/gpu-check # the summary names its files there: the archive's own names
rm -rf "\$logs" && mkdir -p "\$logs" || exit 1
PREBUILT=1 BUILD=$build BUDGET_S=\${BUDGET_S:-540} OUT=\$logs scripts/gpu-check.sh 2>&1 | tee "\$logs/gpu-check.log"
rc=\${PIPESTATUS[0]}
mkdir -p "\$OUT" && tar -C "\$logs" -czf "\$OUT/gpu-check-logs.tar.gz" .
for f in gpu-check.log tests.log bench_breakdown.txt compare_kernels.txt; do
  [ -f "\$logs/\$f" ] && cp "\$logs/\$f" "\$OUT/"
done
exit \$rc
EOF
chmod +x "$dir/run.sh"
echo "gpu-pack: $dir holds build.tar.xz ($(du -h "$dir/build.tar.xz" | cut -f1), ${#files[@]} files) and deps/ ($(du -sh "$dir/deps/debs" | cut -f1)); there, from the repository's root: bash $dir/run.sh"
