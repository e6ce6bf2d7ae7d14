# Shared by the multi-rank training tests (sourced after bin is set): a scratch
# directory, fail / ok, running trident train on N ranks, and comparing the losses
# two runs print. The caller sets model (an array of flags every run gets) before
# calling run, and exits with $failed.
source "$(dirname "${BASH_SOURCE[0]}")/script_common.sh" # $tmp, fail, ok
mpirun=$(command -v mpirun) || { echo "FAIL: mpirun not found"; exit 1; }

# run NP LOG ARGS...: trident train on NP ranks (NP = 1: no launcher), one thread each
run() {
  local np=$1 log=$2
  shift 2
  if [ "$np" = 1 ]; then
    OMP_NUM_THREADS=1 timeout -k 5 120 "$bin" train "${model[@]}" "$@" >"$log" 2>&1
  else
    OMP_NUM_THREADS=1 timeout -k 5 120 "$mpirun" --oversubscribe --allow-run-as-root -np "$np" \
      "$bin" train "${model[@]}" "$@" >"$log" 2>&1
  fi || fail "np $np $*: exit $?: $(tail -3 "$log")"
}

# The training and validation losses of a log, one per line.
losses() { grep -oE '(lm loss|lm loss value): [^ ]+' "$1" | sed -E 's/.*: //'; }

# same A B TOL WHAT: the two logs' losses agree within TOL relative, line for line
same() {
  losses "$1" >"$1.l"
  losses "$2" >"$2.l"
  local n
  n=$(wc -l <"$1.l")
  if [ "$n" -lt 20 ] || [ "$n" -ne "$(wc -l <"$2.l")" ]; then
    fail "$4: $n losses against $(wc -l <"$2.l")"
    return
  fi
  local worst
  worst=$(paste "$1.l" "$2.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
    if (r > w) w = r } END { printf "%.3g", w }')
  awk -v w="$worst" -v t="$3" 'BEGIN { exit !(w <= t) }' &&
    ok "$4: $n losses agree (worst relative difference $worst <= $3)" ||
    { fail "$4: relative difference $worst > $3"; paste "$1.l" "$2.l" | head -5; }
}
