#!/usr/bin/env bash
# A rank of a data-parallel `trident train` that fails brings the whole job down
# within seconds, with a message naming the rank and the reason; no rank hangs
# in a collective (issue 5, faults):
#   - rank 1 is killed (SIGKILL) mid-training in DP, TP and PP runs: mpirun names
#     rank 1 and the signal within 5 s;
#   - rank 1 is given a data path that does not exist (an MPMD launch, the other
#     rank's data is fine): trident names the path and rank 1;
#   - rank 1 is frozen (SIGSTOP): rank 0's communication watchdog
#     (--distributed-timeout-minutes) ends the job, naming the blocked MPI call.
# Arguments: the trident binary and the source directory.
set -u
bin=$1 src=$2
mpirun=$(command -v mpirun) || { echo "FAIL: mpirun not found"; exit 1; }
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok    $*"; }
launch=("$mpirun" --oversubscribe --allow-run-as-root)
export OMP_NUM_THREADS=1

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --log-interval 1 --eval-iters 0)
mock=(--mock-data --tokenizer-type NullTokenizer --vocab-size 200)

# The process of world rank R among this test's trident processes (marked by --seed).
rank_pid() {
  for p in $(pgrep -f "trident train .*--seed $2"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$p"
  done
}

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# 1. Kill rank 1 of 2 once training runs, in a DP, a TP and a PP run (rank 1 is
#    then mid-collective: the gradient all-reduce, a TP all-reduce, a stage's
#    send/recv): the job ends within 5 s and mpirun names rank 1 and the signal.
kill_rank1() { # kill_rank1 WHAT FLAGS...
  local what=$1
  shift
  local seed=$((RANDOM + 10000))
  timeout -k 5 120 "${launch[@]}" -np 2 "$bin" train "${model[@]}" "${mock[@]}" --seed $seed \
    --train-iters 10000000 "$@" >"$tmp/kill.out" 2>"$tmp/kill.err" &
  pid=$!
  for _ in $(seq 100); do grep -q "iteration *5/" "$tmp/kill.out" 2>/dev/null && break; sleep 0.1; done
  local victim
  victim=$(rank_pid 1 $seed)
  if [ -z "$victim" ]; then
    fail "$what kill: rank 1 not found ($(tail -2 "$tmp/kill.err"))"
    return
  fi
  local start rc ms
  start=$(date +%s%N)
  kill -9 "$victim"
  wait $pid
  rc=$?
  pid=
  ms=$(ms_since "$start")
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$ms" -ge 5000 ]; then
    fail "$what kill: mpirun exit $rc after $ms ms (want non-zero, < 5 s, not the timeout)"
  elif ! grep -q "rank 1 .*signal 9" "$tmp/kill.err"; then
    fail "$what kill: stderr does not name rank 1 and the signal: $(cat "$tmp/kill.err")"
  elif [ -n "$(rank_pid 0 $seed)" ]; then
    fail "$what kill: rank 0 is still running"
  else
    ok "$what: kill -9 of rank 1 mid-training: job down after $ms ms, exit $rc, '$(grep -o 'process rank 1.*' "$tmp/kill.err")'"
  fi
}
kill_rank1 "DP=2"
kill_rank1 "TP=2" --tensor-model-parallel-size 2
kill_rank1 "PP=2" --pipeline-model-parallel-size 2

# 2. Rank 1's data path does not exist; rank 0's data is good.
head -200 "$src/data/corpus/kjv.jsonl" >"$tmp/small.jsonl"
tok=(--tokenizer-type GPT2BPETokenizer --vocab-file "$src/data/gpt2/vocab.json"
  --merge-file "$src/data/gpt2/merges.txt")
"$bin" preprocess --input "$tmp/small.jsonl" --output-prefix "$tmp/kjv" "${tok[@]}" --append-eod \
  >"$tmp/pre.log" 2>&1 || fail "preprocess: $(tail -3 "$tmp/pre.log")"
common=("$bin" train "${model[@]}" "${tok[@]}" --split 98,2,0 --train-iters 1000 --seed 5)
start=$(date +%s%N)
timeout -k 5 120 "${launch[@]}" -np 1 "${common[@]}" --data-path "$tmp/kjv_text_document" \
  : -np 1 "${common[@]}" --data-path "$tmp/missing/kjv_text_document" >"$tmp/data.out" 2>"$tmp/data.err"
rc=$?
ms=$(ms_since "$start")
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$ms" -ge 20000 ]; then
  fail "bad data path: exit $rc after $ms ms (want non-zero, not the timeout)"
elif ! grep -q "missing/kjv_text_document" "$tmp/data.err" || ! grep -q "rank 1 of 2 failed" "$tmp/data.err"; then
  fail "bad data path: stderr does not name the path and rank 1: $(cat "$tmp/data.err")"
else
  ok "rank 1 with a missing --data-path: job down after $ms ms, exit $rc, '$(grep -m1 'error' "$tmp/data.err")'"
fi
# 3. Rank 1 freezes (SIGSTOP: no exit, no closed socket, MPI cannot tell): rank 0's
#    watchdog ends it after --distributed-timeout-minutes, naming the blocked call.
seed=$((RANDOM + 40000))
timeout -k 5 120 "${launch[@]}" -np 2 "$bin" train "${model[@]}" "${mock[@]}" --seed $seed \
  --train-iters 10000000 --distributed-timeout-minutes 0.05 >"$tmp/stop.out" 2>"$tmp/stop.err" &
pid=$!
for _ in $(seq 100); do grep -q "iteration *5/" "$tmp/stop.out" 2>/dev/null && break; sleep 0.1; done
victim=$(rank_pid 1 $seed)
if [ -z "$victim" ]; then
  fail "stop: rank 1 not found ($(tail -2 "$tmp/stop.err"))"
else
  start=$(date +%s%N)
  kill -STOP "$victim"
  wait $pid
  rc=$?
  pid=
  ms=$(ms_since "$start")
  kill -9 "$victim" 2>/dev/null
  said=$(grep -m1 -oE "rank 0 of 2 \(host [^)]*\): MPI_[A-Za-z]+ has not completed after [0-9]+ s" "$tmp/stop.err")
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$ms" -ge 15000 ] || [ -z "$said" ]; then
    fail "stop: mpirun exit $rc after $ms ms (want non-zero within 15 s and the watchdog's message): $(tail -3 "$tmp/stop.err")"
  else
    ok "rank 1 stopped (SIGSTOP): job down after $ms ms (timeout 3 s), exit $rc, '$said'"
  fi
fi
exit $failed
