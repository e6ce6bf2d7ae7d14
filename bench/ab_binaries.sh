#!/usr/bin/env bash
# Two builds of trident side by side on data parallelism: DP=2 (two ranks, one
# thread each) at each ZeRO stage, the builds alternated within each round;
# per run the medians of the last iterations: step time and the data-parallel
# communication not hidden behind backward.
# Usage: bench/ab_binaries.sh OLD NEW [--model small|124m] [--stages "0 2 3"] [--rounds 2]
#   small: 4 layers, hidden 768, vocabulary 50257, seq 128, micro-batch 2,
#          global batch 4, --bf16, 12 iterations (bench/dp_ab.sh's)
#   124m:  GPT-2 124M, seq 128, micro-batch 1, global batch 2, fp32, 7 iterations
set -u
old=${1:?old binary} new=${2:?new binary}
shift 2
size=small stages="0 2 3" rounds=2
while [ $# -gt 0 ]; do
  case $1 in
    --model) size=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
case $size in
  small) model=(--num-layers 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 2
    --global-batch-size 4 --vocab-size 50257 --train-iters 12 --bf16) last=8 ;;
  124m) model=(--num-layers 12 --seq-length 128 --max-position-embeddings 1024 --micro-batch-size 1
    --global-batch-size 2 --vocab-size 50256 --train-iters 7) last=5 ;;
  *) echo "--model small or 124m" >&2; exit 2 ;;
esac
model+=(--hidden-size 768 --num-attention-heads 12 --lr 1e-4 --mock-data --tokenizer-type NullTokenizer
  --log-interval 1 --eval-iters 0 --seed 7)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
med() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
for z in $stages; do
  for r in $(seq "$rounds"); do
    for b in "$old" "$new"; do
      mpirun --oversubscribe --allow-run-as-root -np 2 --bind-to core "$b" train "${model[@]}" \
        --zero-stage "$z" >"$tmp/m.log" 2>&1 || { echo "$b failed: $(tail -3 "$tmp/m.log")"; exit 1; }
      t=$(grep -oE 'elapsed time per iteration \(ms\): [0-9.]+' "$tmp/m.log" | tail -"$last" | awk '{ print $NF }' | med)
      h=$(grep -oE 'not hidden behind backward: [0-9.]+' "$tmp/m.log" | tail -"$last" | awk '{ print $NF }' | med)
      echo "ZeRO-$z round $r $b: step $t ms, DP communication not hidden $h ms"
    done
  done
done
