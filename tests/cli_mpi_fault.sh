#!/usr/bin/env bash
# A failing rank aborts the whole MPI job within seconds, with a message naming
# the rank and the reason (issue 5, faults): run tests/mpi_fault under
# mpirun -np 4, where rank 1 calls td_fail / trips a TD_CHECK while the others
# wait in an all-reduce. Usage: cli_mpi_fault.sh <trident binary> <source dir>
# (the test binary sits in tests/ beside the trident binary).
set -u
bin="$(dirname "$1")/tests/mpi_fault"
mpirun=$(command -v mpirun) || { echo "cli_mpi_fault: mpirun not found"; exit 1; }
[ -x "$bin" ] || { echo "cli_mpi_fault: $bin not built"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for mode in fail check; do
  start=$(date +%s%N)
  OMP_NUM_THREADS=1 timeout -k 5 60 "$mpirun" --oversubscribe --allow-run-as-root -np 4 \
    "$bin" "$mode" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  want="rank 1 fails on purpose"; [ "$mode" = check ] && want="rank 1 trips a check on purpose"
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "FAIL $mode: exit code $rc (0: nobody failed; 124/137: hung until the timeout)"; fail=1
  elif [ "$ms" -ge 10000 ]; then
    echo "FAIL $mode: took $ms ms to abort (want < 10 s)"; fail=1
  elif ! grep -q "$want" "$tmp/err" || ! grep -q "rank 1 of 4 failed" "$tmp/err"; then
    echo "FAIL $mode: stderr does not name the reason and the rank:"; cat "$tmp/err"; fail=1
  else
    echo "ok    $mode: mpirun exited $rc after $ms ms; stderr names rank 1 and the reason"
  fi
done
exit $fail
