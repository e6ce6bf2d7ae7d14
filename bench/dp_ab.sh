#!/usr/bin/env bash
# One data-parallel option on and off, side by side: DP=2 (two ranks, one thread
# each, --bf16) on a 4-layer GPT (hidden 768, vocabulary 50257, seq 128,
# micro-batch 2, global batch 4), 12 iterations each, alternated for three
# rounds; per run the medians of the last 8 iterations: step time, the
# params-all-gather timer and the data-parallel communication not hidden
# behind backward.
# Usage: bench/dp_ab.sh BINARY "BASE FLAGS" "FLAG UNDER TEST"
#   bench/dp_ab.sh build/trident "--use-distributed-optimizer" "--overlap-param-gather"
#   bench/dp_ab.sh build/trident "" "--grad-reduce-in-bf16"
set -u
bin=${1:-build/trident} base=${2:-} flag=${3:?the flag under test}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--num-layers 4 --hidden-size 768 --num-attention-heads 12 --seq-length 128
  --max-position-embeddings 128 --global-batch-size 4 --micro-batch-size 2 --lr 1e-4 --mock-data
  --tokenizer-type NullTokenizer --vocab-size 50257 --log-interval 1 --eval-iters 0 --seed 7
  --train-iters 12 --bf16 --timing-log-level 1)
med() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
last8() { tail -8 | awk '{ gsub(/[(]/, "", $NF); print $NF }' | med; }
for r in 1 2 3; do
  for f in "" "$flag"; do
    # shellcheck disable=SC2086 # base and f are flag lists
    mpirun --oversubscribe --allow-run-as-root -np 2 --bind-to core "$bin" train "${model[@]}" $base $f \
      >"$tmp/m.log" 2>&1 || { echo "run failed: $(tail -3 "$tmp/m.log")"; exit 1; }
    t=$(grep -oE 'elapsed time per iteration \(ms\): [0-9.]+' "$tmp/m.log" | last8)
    g=$(grep -oE 'params-all-gather[ .]*: \([0-9.]+' "$tmp/m.log" | last8)
    h=$(grep -oE 'not hidden behind backward: [0-9.]+' "$tmp/m.log" | last8)
    echo "round $r ${f:-without $flag}: step $t ms, params-all-gather ${g:--} ms, DP communication not hidden $h ms"
  done
done
