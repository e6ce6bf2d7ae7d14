#!/usr/bin/env bash
# Data parallelism is the same training (issue 5, equivalence): mpirun -np 2 and
# -np 4 with global batch G print the losses (training and validation) that one
# process prints with G, for 20 iterations with dropout on: fp32 within 1e-6
# relative, bf16 within 1e-3; with gradient accumulation (G = 8, micro-batch 2:
# 4, 2 and 1 micro-batches per rank) and without (micro-batch 4 at DP=2), with
# one gradient bucket and with many (--ddp-bucket-size). A checkpoint saved at
# DP=2 resumes at DP=1 and at DP=4 with the losses of the straight run. ZeRO-1
# (--use-distributed-optimizer) is bit for bit DP without it, keeps 1/DP of the
# Adam state, and its checkpoints resume with and without it at other DP sizes;
# its parameter all-gather overlapped with the next forward
# (--overlap-param-gather) changes no bit either.
# ZeRO-2 and ZeRO-3 (--zero-stage) train to the same bits as plain DP when each
# rank runs one micro-batch per step (the checkpoints they save are byte for
# byte plain DP's), within fp32 rounding with gradient accumulation, and their
# checkpoints reshard: ZeRO-3 at DP=4 -> ZeRO-2 at DP=2 -> no ZeRO at DP=1, and
# back. Gradients sent in bf16 (--grad-reduce-in-bf16) keep every stage's bits
# the same, stay within bf16 rounding of DP=1, and DeepSpeed's
# communication_data_type bf16 is the same run; its fp16 (with fp16 training)
# stays within fp16 rounding of the fp32 reduction.
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
  grep -q "data-parallel gradient reduction not hidden behind backward" "$tmp/fp32/np4.log" &&
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
# --overlap-param-gather: the all-gather after the update lands unit by unit in
# the next forward, the same bits (fp32 and bf16, ZeRO-1 and ZeRO-2, evaluation
# and a checkpoint between), and the summary says so.
run 2 "$tmp/zero2_overlap.log" --micro-batch-size 2 "${zero[@]}" --overlap-param-gather
run 2 "$tmp/zero2_bf16_overlap.log" --micro-batch-size 2 --bf16 "${zero[@]}" --overlap-param-gather
same "$tmp/zero2.log" "$tmp/zero2_overlap.log" 0 "ZeRO-1 at DP=2 with --overlap-param-gather == without, bit for bit"
same "$tmp/zero2_bf16.log" "$tmp/zero2_bf16_overlap.log" 0 "bf16 ZeRO-1 at DP=2 with --overlap-param-gather == without, bit for bit"
grep -q "parameter all-gather after the update overlapped with the next forward" "$tmp/zero2_overlap.log" &&
  ok "--overlap-param-gather says so" || fail "--overlap-param-gather: $(grep -i overlap "$tmp/zero2_overlap.log")"
c="$tmp/ckpt_overlap"
run 2 "$tmp/osave.log" --micro-batch-size 2 --exit-interval 10 --save "$c" --save-interval 5 --zero-stage 2 --overlap-param-gather
run 2 "$tmp/oresume.log" --micro-batch-size 2 --load "$c" --zero-stage 2 --overlap-param-gather
cat "$tmp/osave.log" "$tmp/oresume.log" >"$tmp/ojoined.log"
same "$tmp/fp32/np1.log" "$tmp/ojoined.log" 1e-6 "ZeRO-2 with --overlap-param-gather: saved at 5 and 10, resumed to 20 == DP=1 straight"

c="$tmp/ckpt_zero"
run 2 "$tmp/zsave.log" --micro-batch-size 2 --exit-interval 10 --save "$c" --save-interval 100 "${zero[@]}"
run 1 "$tmp/zresume1.log" --micro-batch-size 2 --load "$c"
run 4 "$tmp/zresume4.log" --micro-batch-size 2 --load "$c" "${zero[@]}"
for np in 1 4; do
  cat "$tmp/zsave.log" "$tmp/zresume$np.log" >"$tmp/zjoined$np.log"
  same "$tmp/fp32/np1.log" "$tmp/zjoined$np.log" 1e-6 "ZeRO-1 DP=2 checkpoint at 10, resumed at DP=$np to 20 == DP=1 straight"
done

# ZeRO-2 / ZeRO-3. DP=4 with micro-batch 2 (one per rank): bit for bit, the
# saved model and Adam state byte for byte; DP=2 (two per rank) within rounding.
ck() { echo "$1/iter_0000010/mp_rank_00"; }
for prec in fp32 bf16; do
  extra=()
  [ "$prec" = bf16 ] && extra=(--bf16)
  run 4 "$tmp/z0_$prec.log" --micro-batch-size 2 --save-interval 10 --save "$tmp/cz0_$prec" "${extra[@]}"
  for z in 2 3; do
    run 4 "$tmp/z${z}_$prec.log" --micro-batch-size 2 --zero-stage $z --save-interval 10 \
      --save "$tmp/cz${z}_$prec" "${extra[@]}"
    same "$tmp/z0_$prec.log" "$tmp/z${z}_$prec.log" 0 "$prec ZeRO-$z at DP=4 == DP=4 without it, bit for bit"
    if cmp -s "$(ck "$tmp/cz0_$prec")/model.safetensors" "$(ck "$tmp/cz${z}_$prec")/model.safetensors" &&
      cmp -s "$(ck "$tmp/cz0_$prec")/optim_dp000.safetensors" "$(ck "$tmp/cz${z}_$prec")/optim_dp000.safetensors"; then
      ok "$prec ZeRO-$z at DP=4: the model and Adam state at iteration 10 are plain DP's, byte for byte"
    else
      fail "$prec ZeRO-$z at DP=4: its checkpoint differs from plain DP's"
    fi
  done
done
# Gradients cross between ranks in bf16 (Megatron's --grad-reduce-in-bf16 under
# --bf16, DeepSpeed's communication_data_type bf16): each rank's rounded, the
# sum in fp32 in rank order, rounded once, so every stage trains to the same
# bits; near the fp32 reduction; the DeepSpeed key runs the same as the flag.
w=(--micro-batch-size 2 --bf16)
for z in 0 1 2 3; do
  run 4 "$tmp/w$z.log" "${w[@]}" --grad-reduce-in-bf16 --zero-stage $z
done
for z in 1 2 3; do
  same "$tmp/w0.log" "$tmp/w$z.log" 0 "bf16 gradients on the wire: ZeRO-$z at DP=4 == DP=4 without it, bit for bit"
done
same "$tmp/bf16/np1.log" "$tmp/w0.log" 1e-3 "bf16 gradients on the wire at DP=4 == DP=1 within bf16 rounding"
grep -q "summed in rank order; sent in bf16, summed in fp32" "$tmp/w0.log" && ! cmp -s "$tmp/w0.log.l" "$tmp/z0_bf16.log.l" &&
  ok "--grad-reduce-in-bf16 says so and changes the losses (the reduction rounds)" ||
  fail "--grad-reduce-in-bf16: $(grep 'data-parallel gradient' "$tmp/w0.log")"
run 4 "$tmp/wds.log" "${w[@]}" --deepspeed --deepspeed_config_dict \
  '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, "gradient_clipping": 1.0, "communication_data_type": "bf16"}'
same "$tmp/w0.log" "$tmp/wds.log" 0 "DeepSpeed's communication_data_type bf16 == --grad-reduce-in-bf16, bit for bit"
for c in fp32 fp16; do # fp16 training: its loss scale keeps the sums inside fp16's range
  run 4 "$tmp/wfp16_$c.log" --micro-batch-size 2 --fp16 --deepspeed --deepspeed_config_dict \
    '{"train_batch_size": 8, "fp16": {"enabled": true}, "gradient_clipping": 1.0, "communication_data_type": "'$c'"}'
done
same "$tmp/wfp16_fp32.log" "$tmp/wfp16_fp16.log" 1e-3 "fp16 training: communication_data_type fp16 == fp32 within fp16 rounding"
grep -q "sent in fp16, summed in fp32" "$tmp/wfp16_fp16.log" && ! cmp -s "$tmp/wfp16_fp32.log.l" "$tmp/wfp16_fp16.log.l" &&
  ok "communication_data_type fp16 says so and changes the losses" ||
  fail "communication_data_type fp16: $(grep 'data-parallel gradient' "$tmp/wfp16_fp16.log")"

for z in 2 3; do
  run 2 "$tmp/z${z}_dp2.log" --micro-batch-size 2 --zero-stage $z
  same "$tmp/fp32/np1.log" "$tmp/z${z}_dp2.log" 1e-6 "ZeRO-$z at DP=2 (2 micro-batches per rank) == DP=1"
done
# Model states per rank against the ZeRO paper's formulas (fp32 terms), and the
# peak device bytes (activations included) falling stage by stage.
for z in 0 2 3; do
  d=$(grep -oE "stage $z in fp32: [0-9.]+ \([-0-9.]+%\)" "$tmp/z${z}_fp32.log" | grep -oE '[-0-9.]+%' | tr -d %)
  awk -v d="$d" 'BEGIN { exit !(d != "" && d < 10 && d > -10) }' &&
    ok "ZeRO-$z at DP=4: model states within 10% of the ZeRO paper's formula ($d%)" ||
    fail "ZeRO-$z model states: $(grep 'model states' "$tmp/z${z}_fp32.log")"
done
peak() { grep -oE 'max allocated: [0-9.]+' "$1" | head -1 | awk '{ print $3 }'; }
awk -v a="$(peak "$tmp/z0_fp32.log")" -v b="$(peak "$tmp/z2_fp32.log")" -v c="$(peak "$tmp/z3_fp32.log")" \
  'BEGIN { exit !(a >= b && b >= c && a > c && c > 0) }' &&
  ok "peak device MiB per rank at DP=4: $(peak "$tmp/z0_fp32.log") plain, $(peak "$tmp/z2_fp32.log") ZeRO-2, $(peak "$tmp/z3_fp32.log") ZeRO-3" ||
  fail "peaks not falling: $(peak "$tmp/z0_fp32.log") $(peak "$tmp/z2_fp32.log") $(peak "$tmp/z3_fp32.log")"
grep -q "ZeRO stage 3: Adam state, gradients and parameters sharded over 4 data-parallel ranks" \
  "$tmp/z3_fp32.log" && grep -q "gradient reduce-scatter" "$tmp/z3_fp32.log" &&
  ok "ZeRO-3 at DP=4 says what it shards" || fail "ZeRO-3 summary: $(grep ZeRO "$tmp/z3_fp32.log")"

# Resharding: ZeRO-3 DP=4 saves at 10 -> ZeRO-2 DP=2 resumes, saves at 15 ->
# DP=1 without ZeRO resumes to 20; and the reverse chain.
chain() { # name np1 z1 np2 z2 np3 z3
  local c="$tmp/chain_$1"
  run "$2" "$tmp/$1.a.log" --micro-batch-size 2 --zero-stage "$3" --exit-interval 10 --save "$c" --save-interval 100
  run "$4" "$tmp/$1.b.log" --micro-batch-size 2 --zero-stage "$5" --exit-interval 15 --save "$c" --save-interval 100 --load "$c"
  run "$6" "$tmp/$1.c.log" --micro-batch-size 2 --zero-stage "$7" --load "$c"
  cat "$tmp/$1.a.log" "$tmp/$1.b.log" "$tmp/$1.c.log" >"$tmp/$1.log"
  same "$tmp/fp32/np1.log" "$tmp/$1.log" 1e-6 \
    "checkpoints reshard: ZeRO-$3 DP=$2 -> ZeRO-$5 DP=$4 -> ZeRO-$7 DP=$6 == DP=1 straight"
}
chain down 4 3 2 2 1 0
chain up 1 0 2 2 4 3
exit $failed
