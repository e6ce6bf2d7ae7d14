#!/usr/bin/env bash
# A rank that crashes (an invalid memory access, a stack overflow) brings the
# whole MPI job down within seconds, and stderr names the rank twice: trident's
# own line, written by the crashing rank's signal handler before it dies, and
# mpirun's notice of the signal. Runs tests/mpi_crash under mpirun -np 4.
# Usage: cli_mpi_crash.sh <trident binary> <source dir> (the test binary sits in
# tests/ beside the trident binary).
set -u
bin="$(dirname "$1")/tests/mpi_crash"
mpirun=$(command -v mpirun) || { echo "cli_mpi_crash: mpirun not found"; exit 1; }
[ -x "$bin" ] || { echo "cli_mpi_crash: $bin not built"; exit 1; }
if ldd "$bin" 2>/dev/null | grep -q libasan; then
  # AddressSanitizer takes the crash first (its report, its exit code): not the
  # signal path this test is about
  echo "SKIP: sanitizer build: AddressSanitizer handles the crash itself"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for mode in segv stack; do
  start=$(date +%s%N)
  OMP_NUM_THREADS=1 timeout -k 5 60 "$mpirun" --oversubscribe --allow-run-as-root -np 4 \
    "$bin" "$mode" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "FAIL $mode: exit code $rc (0: nobody crashed; 124/137: hung until the timeout)"; fail=1
  elif [ "$ms" -ge 10000 ]; then
    echo "FAIL $mode: took $ms ms to end the job (want < 10 s)"; fail=1
  elif ! grep -q "trident: error: rank 1 of 4: killed by SIGSEGV" "$tmp/err"; then
    echo "FAIL $mode: no trident line naming rank 1 and the signal:"; cat "$tmp/err"; fail=1
  elif ! grep -q "rank 1 .*signal 11" "$tmp/err"; then
    echo "FAIL $mode: mpirun does not name rank 1 and signal 11:"; cat "$tmp/err"; fail=1
  else
    echo "ok    $mode: mpirun exited $rc after $ms ms; '$(grep -m1 'trident: error' "$tmp/err")'"
  fi
done
exit $fail
