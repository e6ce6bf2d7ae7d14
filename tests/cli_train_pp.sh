#!/usr/bin/env bash
# Pipeline parallelism is the same training: PP=2 and PP=4 (Megatron's 1F1B
# schedule, several micro-batches in flight per stage) print the losses of PP=1 for
# 20 iterations with dropout on, fp32 within 1e-5 relative, bf16 within 1e-3;
# with one micro-batch and with four, tied and untied embeddings, PP x DP,
# PP x TP (with sequence parallelism) and PP x TP x DP on 8 ranks; ZeRO-1 and
# full recomputation change no bit of PP=2; logits in chunks of tokens change
# none beyond fp32 rounding. Checkpoints saved at PP=2 (and
# PP=2 x TP=2) resume at PP=1, and one saved at PP=1 resumes at PP=2, with the
# straight run's losses. Arguments: the trident binary and the source directory.
set -u
bin=$1

# 4 layers, so 1, 2 and 4 stages hold whole layers.
model=(--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 3 --weight-decay 0.1 --clip-grad 1.0
  --hidden-dropout 0.1 --attention-dropout 0.1 --mock-data --tokenizer-type NullTokenizer
  --vocab-size 500 --log-interval 1 --eval-interval 5 --eval-iters 2 --seed 7 --train-iters 20)
source "$(dirname "$0")/train_common.sh"
pp=(--pipeline-model-parallel-size)

run 1 "$tmp/pp1.log"
run 2 "$tmp/pp2.log" "${pp[@]}" 2
run 4 "$tmp/pp4.log" "${pp[@]}" 4
same "$tmp/pp1.log" "$tmp/pp2.log" 1e-5 "fp32 PP=2 (4 micro-batches) == PP=1 (dropout on)"
same "$tmp/pp1.log" "$tmp/pp4.log" 1e-5 "fp32 PP=4 (one layer per stage) == PP=1"
grep -q "world size 4 = tensor-parallel 1 x pipeline-parallel 4 x data-parallel 1" "$tmp/pp4.log" &&
  ok "PP=4 prints its layout" || fail "PP=4 layout line: $(head -3 "$tmp/pp4.log")"
run 1 "$tmp/pp1_mb8.log" --micro-batch-size 8
run 2 "$tmp/pp2_mb8.log" --micro-batch-size 8 "${pp[@]}" 2
same "$tmp/pp1_mb8.log" "$tmp/pp2_mb8.log" 1e-5 "fp32 PP=2 with one micro-batch == PP=1"
run 1 "$tmp/bf16_pp1.log" --bf16
run 2 "$tmp/bf16_pp2.log" --bf16 "${pp[@]}" 2
same "$tmp/bf16_pp1.log" "$tmp/bf16_pp2.log" 1e-3 "bf16 PP=2 == PP=1"
run 1 "$tmp/untied_pp1.log" --untie-embeddings-and-output-weights
run 2 "$tmp/untied_pp2.log" --untie-embeddings-and-output-weights "${pp[@]}" 2
same "$tmp/untied_pp1.log" "$tmp/untied_pp2.log" 1e-5 "untied embeddings: PP=2 == PP=1"

run 4 "$tmp/pp2dp2.log" "${pp[@]}" 2
run 4 "$tmp/pp2tp2.log" "${pp[@]}" 2 --tensor-model-parallel-size 2
run 4 "$tmp/pp2tp2sp.log" "${pp[@]}" 2 --tensor-model-parallel-size 2 --sequence-parallel
run 8 "$tmp/pp2tp2dp2.log" "${pp[@]}" 2 --tensor-model-parallel-size 2
same "$tmp/pp1.log" "$tmp/pp2dp2.log" 1e-5 "PP=2 x DP=2 (4 ranks) == one rank"
same "$tmp/pp1.log" "$tmp/pp2tp2.log" 1e-5 "PP=2 x TP=2 (4 ranks) == one rank"
same "$tmp/pp1.log" "$tmp/pp2tp2sp.log" 1e-5 "PP=2 x TP=2 + sequence parallel == one rank"
same "$tmp/pp1.log" "$tmp/pp2tp2dp2.log" 1e-5 "PP=2 x TP=2 x DP=2 (8 ranks) == one rank"

run 4 "$tmp/pp2dp2_zero.log" "${pp[@]}" 2 --use-distributed-optimizer
same "$tmp/pp2dp2.log" "$tmp/pp2dp2_zero.log" 0 "PP=2 x DP=2 with ZeRO-1 == without, bit for bit"
run 2 "$tmp/pp2_rc.log" "${pp[@]}" 2 --recompute-granularity full --recompute-method uniform \
  --recompute-num-layers 1
same "$tmp/pp2.log" "$tmp/pp2_rc.log" 0 "PP=2 with full recomputation == without, bit for bit"

# The last stage computes its logits 24 tokens at a time, each chunk's backward
# with its forward, with micro-batches in flight (1F1B), bf16 too, and with
# ZeRO-1 over DP=2 and an untied output layer.
run 2 "$tmp/pp2_chunk.log" "${pp[@]}" 2 --logits-chunk-tokens 24
same "$tmp/pp1.log" "$tmp/pp2_chunk.log" 1e-5 "PP=2, logits in chunks of 24 tokens == PP=1 whole"
run 2 "$tmp/bf16_pp2_chunk.log" --bf16 "${pp[@]}" 2 --logits-chunk-tokens 24
same "$tmp/bf16_pp1.log" "$tmp/bf16_pp2_chunk.log" 1e-3 "bf16 PP=2, logits in chunks of 24 == PP=1 whole"
run 4 "$tmp/pp2dp2_z1_chunk.log" "${pp[@]}" 2 --use-distributed-optimizer --logits-chunk-tokens 24 \
  --untie-embeddings-and-output-weights
same "$tmp/untied_pp1.log" "$tmp/pp2dp2_z1_chunk.log" 1e-5 "PP=2 x DP=2, ZeRO-1, untied, logits in chunks of 24 == one rank"

# Checkpoints across pipeline sizes.
c="$tmp/ck_pp2"
run 2 "$tmp/save_pp2.log" "${pp[@]}" 2 --exit-interval 10 --save "$c" --save-interval 100
[ -f "$c/iter_0000010/mp_rank_00_000/model.safetensors" ] && [ -f "$c/iter_0000010/mp_rank_00_001/model.safetensors" ] &&
  ok "PP=2 saves mp_rank_00_000 and mp_rank_00_001 (Megatron's names)" || fail "PP=2 checkpoint: $(ls -R "$c" | head)"
run 1 "$tmp/resume_pp1.log" --load "$c"
cat "$tmp/save_pp2.log" "$tmp/resume_pp1.log" >"$tmp/joined_pp1.log"
same "$tmp/pp1.log" "$tmp/joined_pp1.log" 1e-5 "PP=2 checkpoint at 10, resumed at PP=1 to 20 == straight"
c="$tmp/ck_pp1"
run 1 "$tmp/save_pp1.log" --exit-interval 10 --save "$c" --save-interval 100
run 2 "$tmp/resume_pp2.log" "${pp[@]}" 2 --load "$c"
cat "$tmp/save_pp1.log" "$tmp/resume_pp2.log" >"$tmp/joined_pp2.log"
same "$tmp/pp1.log" "$tmp/joined_pp2.log" 1e-5 "PP=1 checkpoint at 10, resumed at PP=2 to 20 == straight"
c="$tmp/ck_pp2tp2"
run 4 "$tmp/save_pp2tp2.log" "${pp[@]}" 2 --tensor-model-parallel-size 2 --exit-interval 10 --save "$c" \
  --save-interval 100
run 1 "$tmp/resume_pp2tp2.log" --load "$c"
cat "$tmp/save_pp2tp2.log" "$tmp/resume_pp2tp2.log" >"$tmp/joined_pp2tp2.log"
same "$tmp/pp1.log" "$tmp/joined_pp2tp2.log" 1e-5 "PP=2 x TP=2 checkpoint at 10, resumed at PP=1 x TP=1 == straight"

# A pipeline that does not split the layers evenly is refused.
"$bin" train "${model[@]}" --num-layers 3 "${pp[@]}" 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "trident: error: --num-layers 3 is not divisible by --pipeline-model-parallel-size 2" "$tmp/err" &&
  ok "3 layers on 2 stages refused: $(head -c 160 "$tmp/err")" || fail "uneven stages: rc $rc $(cat "$tmp/err")"

[ $failed -eq 0 ] && echo "all pipeline-parallel checks passed"
exit $failed
