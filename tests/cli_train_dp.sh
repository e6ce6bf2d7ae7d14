#!/usr/bin/env bash
# Data parallelism is the same training (issue 5, equivalence): mpirun -np 2 and
# -np 4 with global batch G print the losses (training and validation) that one
# process prints with G, for 20 iterations with dropout on: fp32 within 1e-6
# relative, bf16 within 1e-3; with gradient accumulation (G = 8, micro-batch 2:
# 4, 2 and 1 micro-batches per rank) and without (micro-batch 4 at DP=2), with
# one gradient bucket and with many (--ddp-bucket-size). A checkpoint saved at
# DP=2 resumes at DP=1 and at DP=4 with the losses of the straight run. ZeRO-1
# (--use-distributed-optimizer) is bit for bit DP without it, keeps 1/DP of the
# Adam state, and its checkpoints resume with and without it at other DP sizes.
# Arguments: the trident binary and the source directory.
set -u
bin=$1

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --global-batch-size 8 --lr 3e-3 --min-lr 3e-4
  --lr-decay-style cosine --lr-warmup-iters 3 --weight-decay 0.1 --clip-grad 1.0
  --hidden-dropout 0.1 --attention-dropout 0.1 --mock-data --tokenizer-type NullTokenizer
  --vocab-size 200 --log-interval 1 --eval-interval 5 --eval-iters 2 --seed 7 --train-iters 20)
source "$(dirname "$0")/train_common.sh"

for prec in fp32 bf16; do
  extra=() tol=1e-6
  [ "$prec" = bf16 ] && extra=(--bf16) tol=1e-3
  d="$tmp/$prec"
  mkdir -p "$d"
  run 1 "$d/np1.log" --micro-batch-size 2 "${extra[@]}"
  run 2 "$d/np2.log" --micro-batch-size 2 "${extra[@]}"
  run 4 "$d/np4.log" --micro-batch-size 2 "${extra[@]}"
  run 2 "$d/np2_buckets.log" --micro-batch-size 2 --ddp-bucket-size 3000 "${extra[@]}"
  same "$d/np1.log" "$d/np2.log" $tol "$prec DP=2 (2 micro-batches per rank) == DP=1 (4)"
  same "$d/np1.log" "$d/np4.log" $tol "$prec DP=4 (1 micro-batch per rank, no accumulation) == DP=1"
  same "$d/np1.log" "$d/np2_buckets.log" $tol "$prec DP=2 with many small buckets == DP=1"
  run 1 "$d/np1_mb4.log" --micro-batch-size 4 "${extra[@]}"
  run 2 "$d/np2_mb4.log" --micro-batch-size 4 "${extra[@]}"
  same "$d/np1_mb4.log" "$d/np2_mb4.log" $tol "$prec micro-batch 4: DP=2 (no accumulation) == DP=1"
done

grep -q "world size 4 = tensor-parallel 1 x pipeline-parallel 1 x data-parallel 4" "$tmp/fp32/np4.log" &&
  grep -q "data-parallel all-reduce not hidden behind backward" "$tmp/fp32/np4.log" &&
  [ "$(grep -c 'iteration *1/' "$tmp/fp32/np4.log")" = 1 ] &&
  ok "DP=4 prints its layout and the exposed all-reduce time, once (rank 0)" ||
  fail "DP=4 layout / all-reduce lines: $(head -5 "$tmp/fp32/np4.log")"

# Checkpoints: saved at DP=2 after 10 iterations, resumed at DP=1 and DP=4.
c="$tmp/ckpt"
run 2 "$tmp/save.log" --micro-batch-size 2 --exit-interval 10 --save "$c" --save-interval 100
[ "$(cat "$c/latest_checkpointed_iteration.txt" 2>/dev/null)" = 10 ] &&
  ok "DP=2 saved iteration 10 (rank 0 writes mp_rank_00)" || fail "DP=2 checkpoint: $(ls -R "$c" | head)"
for np in 1 4; do
  run $np "$tmp/resume$np.log" --micro-batch-size 2 --load "$c"
  cat "$tmp/save.log" "$tmp/resume$np.log" >"$tmp/joined$np.log"
  same "$tmp/fp32/np1.log" "$tmp/joined$np.log" 1e-6 "DP=2 checkpoint at 10, resumed at DP=$np to 20 == DP=1 straight"
done

# ZeRO-1 (--use-distributed-optimizer): the Adam state sharded over DP changes
# no bit of the training at the same layout, holds 1/DP of the state per rank,
# and its checkpoints are whole: saved at DP=2 with ZeRO, they resume at DP=1
# without it and at DP=4 with it.
zero=(--use-distributed-optimizer)
run 2 "$tmp/zero2.log" --micro-batch-size 2 "${zero[@]}"
run 2 "$tmp/zero2_bf16.log" --micro-batch-size 2 --bf16 "${zero[@]}"
run 4 "$tmp/zero4.log" --micro-batch-size 2 "${zero[@]}" --timing-log-level 1
same "$tmp/fp32/np2.log" "$tmp/zero2.log" 0 "ZeRO-1 at DP=2 == DP=2 without it, bit for bit"
same "$tmp/bf16/np2.log" "$tmp/zero2_bf16.log" 0 "bf16 ZeRO-1 at DP=2 == DP=2 without it, bit for bit"
same "$tmp/fp32/np1.log" "$tmp/zero4.log" 1e-6 "ZeRO-1 at DP=4 == DP=1"
shard=$(grep -oE 'sharded over 4 data-parallel ranks, [0-9]+ of [0-9]+ elements' "$tmp/zero4.log")
awk -v s="$shard" 'BEGIN { split(s, w, " "); exit !(w[6] > 0 && w[6] * 4 == w[8]) }' &&
  grep -q 'params-all-gather \.*: ' "$tmp/zero4.log" &&
  ok "ZeRO-1 at DP=4: Adam state $shard; params-all-gather timed" ||
  fail "ZeRO-1 shard / timer: $(grep -E 'ZeRO|params-all-gather' "$tmp/zero4.log" | head -3)"
c="$tmp/ckpt_zero"
run 2 "$tmp/zsave.log" --micro-batch-size 2 --exit-interval 10 --save "$c" --save-interval 100 "${zero[@]}"
run 1 "$tmp/zresume1.log" --micro-batch-size 2 --load "$c"
run 4 "$tmp/zresume4.log" --micro-batch-size 2 --load "$c" "${zero[@]}"
for np in 1 4; do
  cat "$tmp/zsave.log" "$tmp/zresume$np.log" >"$tmp/zjoined$np.log"
  same "$tmp/fp32/np1.log" "$tmp/zjoined$np.log" 1e-6 "ZeRO-1 DP=2 checkpoint at 10, resumed at DP=$np to 20 == DP=1 straight"
done
exit $failed
