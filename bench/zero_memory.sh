#!/usr/bin/env bash
# ZeRO stages 0-3 at DP=4 on GPT-2 124M (12 layers, hidden 768, 12 heads, GPT-2's
# vocabulary padded to 50304): per rank, the model states the start-up summary
# counts against the ZeRO paper's fp32 formula, the device bytes at their peak
# (Megatron's "max allocated": activations and transient buffers included),
# and the median step time of iterations 2..N.
# Usage: bench/zero_memory.sh [TRIDENT] [ITERS]   (default build/trident, 5)
set -eu
bin=${1:-build/trident}
iters=${2:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 128
  --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 4 --lr 1e-4
  --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --log-interval 1 --eval-iters 0
  --train-iters "$iters")
printf '| stage | model states MiB/rank | ZeRO formula (fp32) MiB | difference | max allocated MiB/rank | ms/step (median) |\n'
printf '|---|---|---|---|---|---|\n'
for z in 0 1 2 3; do
  OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 4 "$bin" train "${model[@]}" \
    --zero-stage $z >"$tmp/z$z.log" 2>&1 || { echo "stage $z failed:"; tail -5 "$tmp/z$z.log"; exit 1; }
  states=$(grep -oE 'model states per rank \(MiB\): [0-9.]+' "$tmp/z$z.log" | awk '{ print $NF }')
  formula=$(grep -oE "stage $z in fp32: [0-9.]+ \([-0-9.]+%\)" "$tmp/z$z.log")
  peak=$(grep -oE 'max allocated: [0-9.]+' "$tmp/z$z.log" | head -1 | awk '{ print $NF }')
  ms=$(grep -oE 'elapsed time per iteration \(ms\): [0-9.]+' "$tmp/z$z.log" | awk 'NR > 1 { print $NF }' |
    sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
  printf '| %d | %s | %s | %s | %s | %s |\n' $z "$states" "$(echo "$formula" | awk '{ print $5 }')" \
    "$(echo "$formula" | grep -oE '\([-0-9.]+%\)' | tr -d '()')" "$peak" "$ms"
done
