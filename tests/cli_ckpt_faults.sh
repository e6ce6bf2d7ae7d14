#!/usr/bin/env bash
# Checkpoints survive crashes, unreadable paths, damaged values and failing disks
# (issue #16):
#  1. a save killed (SIGKILL) before any one of its file operations -- each
#     directory-level one (mkdir, rename, remove, fsync of a directory) of a
#     first save, a save of a new iteration and a re-save of the latest one (a
#     requeued job), seeded random ones (inside files too: a half-written file),
#     and rank 0's publishing steps in a two-rank (TP=2) re-save -- leaves a
#     checkpoint that --load resumes from with the losses of an uninterrupted
#     run, and the next save removes the leftovers;
#  2. a --load path that exists but cannot be read (or whose latest file cannot)
#     is an error naming it and the system's reason, also as root (an injected
#     open failure); only a missing path starts from scratch;
#  3. out-of-range or mistyped numbers in metadata.json, rng_dp000.json and the
#     latest file are refused, naming the file and the field (table-driven);
#  4. leftovers of interrupted saves are removed at the next save, with one line;
#  5. a write that fails (injected ENOSPC) names the path and the reason, exits 1
#     and leaves the previous checkpoint and latest file as they were.
# The kill points come from the binary's own trace of its file operations
# (TRIDENT_TEST_TRACE_FILE_OPS); the random trials print their seed, and
# TRIDENT_TEST_SEED=<n> replays them (TRIDENT_TEST_TRIALS=<n>: how many, 24).
# Arguments: the trident binary and the source directory.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'chmod -R u+rwX "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok    $*"; }
export OMP_NUM_THREADS=1
mpirun=$(command -v mpirun) || { echo "FAIL: mpirun not found"; exit 1; }

# A tiny model with dropout; a constant learning rate, so the losses of an
# iteration do not depend on --train-iters (runs of 1, 2 and 4 iterations agree).
model=(--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16
  --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3
  --lr-decay-style constant --hidden-dropout 0.1 --attention-dropout 0.1 --mock-data
  --tokenizer-type NullTokenizer --vocab-size 64 --log-interval 1 --eval-interval 1000
  --eval-iters 0 --seed 7 --save-interval 1000)
train() { timeout -k 5 60 "$bin" train "${model[@]}" "$@"; }
train_tp2() { # the same on two ranks, tensor-parallel
  timeout -k 5 60 "$mpirun" --oversubscribe --allow-run-as-root -np 2 "$bin" train "${model[@]}" \
    --tensor-model-parallel-size 2 "$@"
}
# "ITERATION LOSS" for every training iteration a log prints
losses() { grep -oE 'iteration +[0-9]+/ +[0-9]+ .*lm loss: [^ ]+' "$1" | sed -E 's/^iteration +([0-9]+).*lm loss: ([^ ]+)/\1 \2/'; }
# the files and directories a save leaves behind when interrupted
leftovers() { ls "$1" | grep -E '^iter_[0-9]+\.(tmp|old)$|\.tmp$'; }

# ---- the uninterrupted runs every trial is compared with
train --train-iters 4 >"$tmp/ref.log" 2>&1 || fail "reference run: $(tail -3 "$tmp/ref.log")"
losses "$tmp/ref.log" >"$tmp/ref"
[ "$(wc -l <"$tmp/ref")" -eq 4 ] || { fail "reference run printed $(wc -l <"$tmp/ref") losses, not 4"; exit 1; }
train --train-iters 1 --save "$tmp/base" >"$tmp/base.log" 2>&1 || fail "base save: $(tail -3 "$tmp/base.log")"
[ "$(losses "$tmp/base.log")" = "$(head -1 "$tmp/ref")" ] && [ -d "$tmp/base/iter_0000001" ] ||
  { fail "base checkpoint: $(losses "$tmp/base.log") vs $(head -1 "$tmp/ref")"; exit 1; }

# run_scenario NAME DIR [FLAGS...]: the save a trial interrupts, from a fresh DIR:
#   first  -- the first save into an empty directory (iteration 1)
#   next   -- iteration 1 there, train and save iteration 2
#   resave -- iteration 1 there, --train-iters 1: save iteration 1 again
setup() { rm -rf "$2"; [ "$1" = first ] || cp -r "$tmp/base" "$2"; }
run_scenario() {
  local name=$1 d=$2
  shift 2
  case $name in
    first) train --train-iters 1 --save "$d" "$@" ;;
    next) train --train-iters 2 --load "$d" --save "$d" "$@" ;;
    resave) train --train-iters 1 --load "$d" --save "$d" "$@" ;;
  esac
}
allowed() { case $1 in first) echo "0 1" ;; next) echo "1 2" ;; resave) echo 1 ;; esac; }

# resumes NAME DIR WHAT [RUN] [REF]: after an interrupted save, --load DIR --save
# DIR runs to iteration 4 from an iteration NAME allows (0: no checkpoint yet),
# printing the reference losses of the iterations after it; its save leaves no
# leftovers and names iteration 4. Prints nothing when all holds.
resumes() {
  local name=$1 d=$2 what=$3 run=${4:-train} ref=${5:-$tmp/ref}
  $run --train-iters 4 --load "$d" --save "$d" >"$d.log" 2>&1 ||
    { fail "$what: the resumed run failed: $(grep -v '^ *>' "$d.log" | tail -3)"; return; }
  local it
  it=$(sed -n 's/.*successfully loaded checkpoint from .* at iteration \([0-9]*\)$/\1/p' "$d.log" | head -1)
  [ -z "$it" ] && grep -q "will start from random" "$d.log" && it=0
  case " $(allowed "$name") " in
    *" $it "*) ;;
    *) fail "$what: resumed from iteration '${it}', expected one of $(allowed "$name")"; return ;;
  esac
  if ! diff <(awk -v it="$it" '$1 > it' "$ref") <(losses "$d.log") >/dev/null; then
    fail "$what: resumed at $it, losses differ: $(diff <(awk -v it="$it" '$1 > it' "$ref") <(losses "$d.log") | head -4 | tr '\n' ' ')"
    return
  fi
  [ -z "$(leftovers "$d")" ] || fail "$what: leftovers after the next save: $(leftovers "$d" | tr '\n' ' ')"
  [ "$(cat "$d/latest_checkpointed_iteration.txt")" = 4 ] || fail "$what: latest is not 4 after the resumed run"
}

# kill_trial NAME K WHAT: SIGKILL the scenario's run before its K-th file operation.
kill_trial() {
  local name=$1 k=$2 d="$tmp/trial"
  setup "$name" "$d"
  (TRIDENT_TEST_KILL_AT_FILE_OP=$k run_scenario "$name" "$d" >"$d.kill.log" 2>&1)
  local rc=$?
  [ $rc -eq 137 ] || { fail "$3: the run was not killed at file operation $k (exit $rc)"; return; }
  resumes "$name" "$d" "$3"
}

# ---- 1. killed saves: every file operation that changes a directory, per scenario
declare -A total
for name in first next resave; do
  setup "$name" "$tmp/trace"
  TRIDENT_TEST_TRACE_FILE_OPS=1 run_scenario "$name" "$tmp/trace" >/dev/null 2>"$tmp/trace.$name" ||
    fail "$name: traced run failed: $(grep -v 'file op' "$tmp/trace.$name" | tail -3)"
  total[$name]=$(grep -c 'trident: test: file op' "$tmp/trace.$name")
  # every operation on a directory (mkdir, rename, remove, fsync); those inside
  # single files (create, write, fsync) are left to the random trials below, to
  # keep the test quick
  skip='\): (write|create|fsync .*\.(json|safetensors|tmp)$)'
  points=$(grep 'trident: test: file op' "$tmp/trace.$name" | grep -vE "$skip" |
    sed -E 's/.*file op ([0-9]+) .*/\1/')
  n=0
  before=$failed
  t0=$SECONDS
  for k in $points; do
    kill_trial "$name" "$k" "$name save killed before op $k ($(grep "file op $k " "$tmp/trace.$name" | sed 's/.*): //'))"
    n=$((n + 1))
  done
  [ "$n" -ge 8 ] || fail "$name: only $n kill points in the trace"
  [ $failed -eq $before ] && ok "$name save: killed before each of $n of its ${total[$name]} file operations: --load resumes with the uninterrupted losses, no leftovers ($((SECONDS - t0)) s)"
done
grep -q "rename .*iter_0000001 -> .*iter_0000001.old" "$tmp/trace.resave" &&
  grep -q "remove .*iter_0000001.old/mp_rank_00/optim_dp000.safetensors" "$tmp/trace.resave" &&
  ok "a re-save moves the published iteration aside and deletes it only after publishing (the reported kill window is among the points)" ||
  fail "re-save protocol: $(grep -E 'rename|remove' "$tmp/trace.resave" | sed 's/.*): //' | tr '\n' ' ')"

# seeded random trials: any scenario, any file operation (writes included)
seed=${TRIDENT_TEST_SEED:-$(( $(date +%s%N) / 1000 % 1000000 ))}
trials=${TRIDENT_TEST_TRIALS:-24}
echo "random kill trials: seed $seed (TRIDENT_TEST_SEED=$seed replays them), $trials trials"
RANDOM=$seed
names=(first next resave)
before=$failed
t0=$SECONDS
for ((i = 0; i < trials; i++)); do
  name=${names[RANDOM % 3]}
  k=$((1 + RANDOM % ${total[$name]}))
  kill_trial "$name" "$k" "seed $seed trial $i: $name save killed before op $k of ${total[$name]}"
done
[ $failed -eq $before ] && ok "$trials random kill trials (seed $seed) resume with the uninterrupted losses ($((SECONDS - t0)) s)"

# two ranks (TP=2): rank 0 publishes after a barrier; kill it during a re-save
# just before it renames the new copy in (both ranks then find the iteration
# missing and race to put it back) and just before it deletes the copy aside
t0=$SECONDS
train_tp2 --train-iters 4 >"$tmp/ref2.log" 2>&1 || fail "TP=2 reference: $(tail -3 "$tmp/ref2.log")"
losses "$tmp/ref2.log" >"$tmp/ref2"
train_tp2 --train-iters 1 --save "$tmp/base2" >"$tmp/base2.log" 2>&1 || fail "TP=2 base: $(tail -3 "$tmp/base2.log")"
rm -rf "$tmp/t2" && cp -r "$tmp/base2" "$tmp/t2"
TRIDENT_TEST_TRACE_FILE_OPS=1 train_tp2 --train-iters 1 --load "$tmp/t2" --save "$tmp/t2" >/dev/null 2>"$tmp/trace2" ||
  fail "TP=2 traced re-save failed"
points=$(grep -E '\): rename .*iter_0000001\.tmp -> |\): remove .*\.old/mp_rank_00/model' "$tmp/trace2" |
  sed -E 's/.*file op ([0-9]+) .*/\1/')
n=0
before=$failed
for k in $points; do
  rm -rf "$tmp/t2" && cp -r "$tmp/base2" "$tmp/t2"
  (TRIDENT_TEST_KILL_AT_FILE_OP=$k train_tp2 --train-iters 1 --load "$tmp/t2" --save "$tmp/t2" >"$tmp/t2.kill.log" 2>&1)
  rc=$?
  [ $rc -ne 0 ] || fail "TP=2 re-save: not killed at op $k"
  resumes resave "$tmp/t2" "TP=2 re-save killed before op $k" train_tp2 "$tmp/ref2"
  n=$((n + 1))
done
[ "$n" -eq 2 ] && [ "$(wc -l <"$tmp/ref2")" -eq 4 ] && [ $failed -eq $before ] &&
  ok "TP=2 re-save with rank 0 killed before publishing and before deleting the copy aside: resumes with the TP=2 losses ($((SECONDS - t0)) s)" ||
  fail "TP=2 kill points: $n"

# a copy aside alone (killed between the two renames, the new copy lost too) is put back
d="$tmp/aside" && rm -rf "$d" && cp -r "$tmp/base" "$d" && mv "$d/iter_0000001" "$d/iter_0000001.old"
train --train-iters 2 --load "$d" >"$tmp/out" 2>&1
grep -q "iter_0000001 was missing .*restored it from $d/iter_0000001.old" "$tmp/out" &&
  [ "$(losses "$tmp/out")" = "$(sed -n 2p "$tmp/ref")" ] &&
  ok "iter_0000001 missing, iter_0000001.old complete: restored and resumed ($(grep restored "$tmp/out" | head -c 160))" ||
  fail "restore from .old: $(tail -3 "$tmp/out")"

# ---- 2. unreadable --load paths are errors; a missing one starts from scratch
# expect_error WANT [ENV=VALUE...] -- ARGS...: trident train ARGS exits 1 with WANT
expect_error() {
  local want=$1 envs=()
  shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 60 "$bin" train "${model[@]}" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq 1 ] && grep -q "^trident: error: " "$tmp/err" && grep -qF -- "$want" "$tmp/err"; then
    ok "refused: $(grep '^trident: error: ' "$tmp/err" | head -c 220)"
  else
    fail "want '$want' and exit 1; got exit $rc: $(head -c 400 "$tmp/err") $(grep -i warning "$tmp/out")"
  fi
}
c="$tmp/base"
expect_error "--load $c: cannot open directory '$c': Permission denied" TRIDENT_TEST_FAIL_OPEN="$c" -- \
  --train-iters 2 --load "$c"
expect_error "cannot open '$c/latest_checkpointed_iteration.txt': Permission denied" \
  TRIDENT_TEST_FAIL_OPEN=latest_checkpointed_iteration.txt -- --train-iters 2 --load "$c"
expect_error "cannot open '$c/iter_0000001/metadata.json': Permission denied" \
  TRIDENT_TEST_FAIL_OPEN=metadata.json -- --train-iters 2 --load "$c"
expect_error "'$tmp/ref.log' is not a directory" -- --train-iters 2 --load "$tmp/ref.log"
if [ "$(id -u)" -ne 0 ]; then
  cp -r "$c" "$tmp/locked" && chmod 000 "$tmp/locked"
  expect_error "'$tmp/locked': Permission denied" -- --train-iters 2 --load "$tmp/locked"
  chmod 755 "$tmp/locked" && chmod 000 "$tmp/locked/latest_checkpointed_iteration.txt"
  expect_error "cannot open '$tmp/locked/latest_checkpointed_iteration.txt': Permission denied" -- \
    --train-iters 2 --load "$tmp/locked"
else
  ok "running as root: chmod 000 does not stop reads, the injected open failures above stand in"
fi
train --train-iters 2 --load "$tmp/nowhere" >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "could not find the metadata file $tmp/nowhere/latest_checkpointed_iteration.txt" "$tmp/out" &&
  [ "$(losses "$tmp/out")" = "$(head -2 "$tmp/ref")" ] &&
  ok "a --load path that does not exist starts from scratch, as Megatron" || fail "missing path: rc $rc $(tail -2 "$tmp/out")"
expect_error "--exit-on-missing-checkpoint" -- --train-iters 2 --load "$tmp/nowhere" --exit-on-missing-checkpoint

# ---- 3. numbers in the checkpoint: integral, in range, of the right JSON type
train --train-iters 1 --fp16 --initial-loss-scale 65536 --save "$tmp/base16" >"$tmp/out" 2>&1 ||
  fail "fp16 base: $(tail -2 "$tmp/out")"
T=$'\t'
# ROW: WHERE|VALUE|MESSAGE. WHERE: meta:LEVEL:KEY (KEY at that indentation of
# metadata.json), meta16:... (the fp16 checkpoint's), rng or latest (the file's text).
rows=(
  'meta:2:iteration|-1|metadata.json: state.iteration must be an integer from 0 to 9007199254740992, got -1'
  'meta:2:iteration|0.5|metadata.json: state.iteration must be an integer from 0 to 9007199254740992, got 0.5'
  'meta:2:iteration|3|metadata.json: state.iteration is 3 but this is iteration 1'
  'meta:1:iteration|7|metadata.json: iteration is 7 but the directory is iteration 1'
  'meta:1:iteration|"1"|metadata.json: iteration must be an integer from 0 to 9007199254740992, got "1"'
  'meta:2:consumed_train_samples|1e300|state.consumed_train_samples must be an integer from 0 to 9007199254740992, got 1e+300'
  'meta:2:consumed_train_samples|-4|state.consumed_train_samples must be an integer from 0 to 9007199254740992, got -4'
  'meta:2:consumed_valid_samples|"x"|state.consumed_valid_samples must be an integer from 0 to 9007199254740992, got "x"'
  'meta:2:lr_scheduler_num_steps|1e300|state.lr_scheduler_num_steps must be an integer'
  'meta:2:optimizer_step|-1|state.optimizer_step must be an integer'
  'meta:2:optimizer_step|null|state.optimizer_step must be an integer from 0 to 9007199254740992, got null'
  'meta:2:tensor_model_parallel_size|0|layout.tensor_model_parallel_size must be an integer from 1'
  'meta16:3:scale|0|state.loss_scaler.scale must be a number from'
  'meta16:3:scale|"big"|state.loss_scaler.scale must be a number from'
  'meta16:3:growth_tracker|-1|state.loss_scaler.growth_tracker must be an integer from 0'
  'meta16:3:hysteresis_tracker|1.5|state.loss_scaler.hysteresis_tracker must be an integer'
  'rng|{"seed": "x", "iteration": 1}|rng_dp000.json: seed must be an integer from 0 to 9007199254740992, got "x"'
  'rng|{"seed": -5, "iteration": 1}|rng_dp000.json: seed must be an integer from 0 to 9007199254740992, got -5'
  'rng|{"seed": 1e30, "iteration": 1}|rng_dp000.json: seed must be an integer from 0 to 9007199254740992, got 1e+30'
  'rng|{"seed": 7.5, "iteration": 1}|rng_dp000.json: seed must be an integer'
  'rng|{"iteration": 1}|rng_dp000.json: seed must be an integer from 0 to 9007199254740992, but it is missing'
  'rng|{"seed": 7, "iteration": -1}|rng_dp000.json: iteration must be an integer'
  'latest|-1|latest_checkpointed_iteration.txt: expected an iteration number (an integer from 0 to 9007199254740992, e.g. 100), got "-1"'
  'latest|+1|latest_checkpointed_iteration.txt: expected an iteration number'
  'latest|1e3|latest_checkpointed_iteration.txt: expected an iteration number'
  'latest| 1|latest_checkpointed_iteration.txt: expected an iteration number'
  'latest|99999999999999999999|latest_checkpointed_iteration.txt: expected an iteration number'
  'latest|9007199254740993|latest_checkpointed_iteration.txt: expected an iteration number'
)
for row in "${rows[@]}"; do
  IFS='|' read -r where value want <<<"$row"
  d="$tmp/bad"
  rm -rf "$d"
  extra=()
  case $where in
    meta16:*) cp -r "$tmp/base16" "$d"; extra=(--fp16 --initial-loss-scale 65536) ;;
    *) cp -r "$tmp/base" "$d" ;;
  esac
  case $where in
    meta*)
      IFS=: read -r _ level key <<<"$where"
      f="$d/iter_0000001/metadata.json"
      tabs=$(printf "%${level}s" "" | tr ' ' '\t')
      sed -E "s/^(${tabs}\"${key}\":${T})[^,]*(,?)\$/\1${value}\2/" "$f" >"$f.new"
      [ "$(diff "$f" "$f.new" | grep -c '^>')" -eq 1 ] || { fail "$row: the edit did not change exactly one line"; continue; }
      mv "$f.new" "$f" ;;
    rng) f="$d/iter_0000001/mp_rank_00/rng_dp000.json"; printf '%s' "$value" >"$f" ;;
    latest) f="$d/latest_checkpointed_iteration.txt"; printf '%s\n' "$value" >"$f" ;;
  esac
  expect_error "$f" -- --train-iters 2 --load "$d" "${extra[@]}"
  grep -qF -- "$want" "$tmp/err" || fail "$row: message lacks '$want': $(head -c 300 "$tmp/err")"
done

# ---- 4. leftovers of interrupted saves are removed at the next save, nothing else
d="$tmp/left" && rm -rf "$d" && cp -r "$tmp/base" "$d"
mkdir -p "$d/iter_0000005.tmp/mp_rank_00" "$d/iter_0000003.old" "$d/iter_5.tmp" &&
  echo junk >"$d/iter_0000005.tmp/mp_rank_00/model.safetensors" && echo 9 >"$d/latest_checkpointed_iteration.txt.tmp" &&
  echo mine >"$d/notes.tmp"
train --train-iters 2 --load "$d" --save "$d" >"$tmp/out" 2>&1 || fail "leftovers run: $(tail -3 "$tmp/out")"
line=$(grep "leftover" "$tmp/out")
[ "$(grep -c leftover "$tmp/out")" -eq 1 ] && [[ $line == *"removed 3 leftovers of interrupted saves from $d: "* ]] &&
  [[ $line == *iter_0000005.tmp* ]] && [[ $line == *iter_0000003.old* ]] &&
  [[ $line == *latest_checkpointed_iteration.txt.tmp* ]] &&
  [ ! -e "$d/iter_0000005.tmp" ] && [ ! -e "$d/iter_0000003.old" ] && [ -d "$d/iter_5.tmp" ] &&
  [ -f "$d/notes.tmp" ] && [ "$(cat "$d/latest_checkpointed_iteration.txt")" = 2 ] &&
  ok "leftovers removed at the next save, one line: '$(echo "$line" | sed 's/^ *//' | head -c 200)'; other names untouched" ||
  fail "leftovers: '$line' $(ls "$d" | tr '\n' ' ')"

# ---- 5. a failing write (disk full) changes nothing that was published
before=$failed
n=0
for pat in model.safetensors optim_dp000.safetensors rng_dp000.json slices.json metadata.json.tmp \
  latest_checkpointed_iteration.txt.tmp; do
  for name in next resave; do
    d="$tmp/full"
    setup "$name" "$d"
    sums=$(cd "$d" && find . -type f | sort | xargs cksum)
    TRIDENT_TEST_FAIL_WRITE=$pat run_scenario "$name" "$d" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    it=$([ $name = next ] && echo 2 || echo 1)
    grep -qE "^trident: error: saving checkpoint at iteration $it: cannot write '$d/[^']*$pat': No space left on device" "$tmp/err" &&
      [ $rc -eq 1 ] || fail "$name, writing $pat fails: exit $rc, $(head -c 300 "$tmp/err")"
    [ "$(cd "$d" && find . -type f | sort | xargs cksum)" = "$sums" ] && [ -z "$(leftovers "$d")" ] &&
      [ ! -e "$d/iter_0000002" ] ||
      fail "$name, writing $pat fails: the directory changed: $(ls -R "$d" | head -20 | tr '\n' ' ')"
    resumes "$name" "$d" "$name after a failed write of $pat"
    n=$((n + 1))
  done
done
[ $failed -eq $before ] &&
  ok "$n failing writes (ENOSPC in each file of a save and a re-save): error names the path and reason, exit 1, previous checkpoint and latest file byte-identical, nothing half-published, resumes"

echo "checkpoint fault tests took $SECONDS s"
[ $failed -eq 0 ] && echo "all checkpoint fault checks passed"
exit $failed
