#!/usr/bin/env bash
# Tensor parallelism is the same training (issue 6, equivalence): TP=2 and TP=4
# print the training and validation losses of TP=1 for 20 iterations, fp32 within
# 1e-5 relative with hidden and attention dropout on (the streams match: hidden
# dropout is the same on every TP rank, attention dropout numbers its masks by
# global head), bf16 within 1e-3; and TP x DP on 4 and 8 ranks (2x2, 2x4, 4x2);
# all again with sequence parallelism (whose hidden dropout draws each token's
# counters from its place in the micro-batch), which also keeps fewer activation
# bytes per layer; full activation recomputation (uniform and block) changes no
# bit of the losses and keeps fewer activation bytes; so do logits computed in
# chunks of tokens (within fp32 rounding). ZeRO-1, 2 and 3 under
# TP x DP: bit for bit plain DP at one micro-batch per rank.
# Checkpoints saved at TP=2 (and TP=2 x DP=2) resume at TP=1 and TP=4 with the
# unsplit run's losses, and export to one Hugging Face file. A TP size that does
# not divide the heads or the FFN is refused with the reason.
# Arguments: the trident binary and the source directory.
set -u
bin=$1

# 4 heads, FFN 128, vocabulary 501 padded to 512 at TP = 1, 2 and 4 alike.
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 3 --weight-decay 0.1 --clip-grad 1.0
  --hidden-dropout 0.1 --attention-dropout 0.1 --mock-data --tokenizer-type NullTokenizer
  --vocab-size 500 --log-interval 1 --eval-interval 5 --eval-iters 2 --seed 7 --train-iters 20)
source "$(dirname "$0")/train_common.sh"

run 1 "$tmp/tp1.log"
run 2 "$tmp/tp2.log" --tensor-model-parallel-size 2
run 4 "$tmp/tp4.log" --tensor-model-parallel-size 4
same "$tmp/tp1.log" "$tmp/tp2.log" 1e-5 "fp32 TP=2 == TP=1 (dropout on)"
same "$tmp/tp1.log" "$tmp/tp4.log" 1e-5 "fp32 TP=4 == TP=1 (dropout on)"
grep -q "world size 4 = tensor-parallel 4 x pipeline-parallel 1 x data-parallel 1" "$tmp/tp4.log" &&
  ok "TP=4 prints its layout" || fail "TP=4 layout line: $(head -3 "$tmp/tp4.log")"

run 1 "$tmp/bf16_tp1.log" --bf16
run 2 "$tmp/bf16_tp2.log" --bf16 --tensor-model-parallel-size 2
same "$tmp/bf16_tp1.log" "$tmp/bf16_tp2.log" 1e-3 "bf16 TP=2 == TP=1"

# Sequence parallelism: the same losses again, with less activation memory per rank.
run 2 "$tmp/sp2.log" --tensor-model-parallel-size 2 --sequence-parallel
run 4 "$tmp/sp4.log" --tensor-model-parallel-size 4 --sequence-parallel
run 2 "$tmp/bf16_sp2.log" --bf16 --tensor-model-parallel-size 2 --sequence-parallel
run 4 "$tmp/sp2dp2.log" --tensor-model-parallel-size 2 --sequence-parallel
run 8 "$tmp/sp4dp2.log" --tensor-model-parallel-size 4 --sequence-parallel
same "$tmp/tp1.log" "$tmp/sp2.log" 1e-5 "fp32 TP=2 + sequence parallel == TP=1 (dropout on)"
same "$tmp/tp1.log" "$tmp/sp4.log" 1e-5 "fp32 TP=4 + sequence parallel == TP=1 (dropout on)"
same "$tmp/bf16_tp1.log" "$tmp/bf16_sp2.log" 1e-3 "bf16 TP=2 + sequence parallel == TP=1"
same "$tmp/tp1.log" "$tmp/sp2dp2.log" 1e-5 "fp32 TP=2 + SP x DP=2 (4 ranks) == one rank"
same "$tmp/tp1.log" "$tmp/sp4dp2.log" 1e-5 "fp32 TP=4 + SP x DP=2 (8 ranks) == one rank"
layer_mib() { grep -oE '[0-9.]+ per layer' "$1" | cut -d' ' -f1; }
act_mib() { grep -oE 'activations [0-9.]+' "$1" | cut -d' ' -f2; }
# shrinks WHAT MEASURE BASE LOG: MEASURE (layer_mib, act_mib) of LOG is below BASE's, above 0
shrinks() {
  local a b
  a=$($2 "$3") b=$($2 "$4")
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > 0 && b < a) }' && ok "$1: $a MiB -> $b MiB" ||
    fail "$1: $a MiB -> $b MiB, expected fewer"
}
shrinks "activations per layer, TP=2 -> with sequence parallelism" layer_mib "$tmp/tp2.log" "$tmp/sp2.log"

# Logits in chunks (--logits-chunk-tokens 24: the 64 tokens of a micro-batch as
# 24 + 24 + 16, each chunk's backward run with its forward): the losses of the
# whole-logits run, at TP=1, under TP=2 with sequence parallelism (the
# vocabulary-parallel loss combined chunk by chunk), and under DP=2 with ZeRO-2
# and TP=2 x DP=2 with ZeRO-3 (the tied output layer's gradients bound and
# filled during the forward); the logits' share of the activations shrinks.
run 1 "$tmp/chunk1.log" --logits-chunk-tokens 24
run 2 "$tmp/chunk_sp2.log" --logits-chunk-tokens 24 --tensor-model-parallel-size 2 --sequence-parallel
run 2 "$tmp/chunk_dp2_z2.log" --logits-chunk-tokens 24 --zero-stage 2
run 4 "$tmp/chunk_tp2dp2_z3.log" --logits-chunk-tokens 24 --tensor-model-parallel-size 2 --zero-stage 3
same "$tmp/tp1.log" "$tmp/chunk1.log" 1e-5 "fp32 logits in chunks of 24 tokens == whole (dropout on)"
same "$tmp/tp1.log" "$tmp/chunk_sp2.log" 1e-5 "fp32 TP=2 + SP, logits in chunks of 24 == TP=1 whole"
same "$tmp/tp1.log" "$tmp/chunk_dp2_z2.log" 1e-5 "fp32 DP=2, ZeRO-2, logits in chunks of 24 == one rank"
same "$tmp/tp1.log" "$tmp/chunk_tp2dp2_z3.log" 1e-5 "fp32 TP=2 x DP=2, ZeRO-3, logits in chunks of 24 == one rank"
shrinks "activations at TP=1, whole logits -> logits in chunks of 24" act_mib "$tmp/tp1.log" "$tmp/chunk1.log"

# Full activation recomputation reruns each chunk's forward (collectives and
# dropout masks included) in backward: the same losses, bit for bit, with fewer
# activation bytes.
recompute=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
run 2 "$tmp/sp2_rc.log" --tensor-model-parallel-size 2 --sequence-parallel "${recompute[@]}"
same "$tmp/sp2.log" "$tmp/sp2_rc.log" 0 "TP=2 + SP with full recomputation == without, bit for bit"
run 4 "$tmp/sp2dp2_rc.log" --tensor-model-parallel-size 2 --sequence-parallel --recompute-granularity full \
  --recompute-method block --recompute-num-layers 1
same "$tmp/sp2dp2.log" "$tmp/sp2dp2_rc.log" 0 "TP=2 + SP x DP=2 with block recomputation == without, bit for bit"
shrinks "activations at TP=2 + SP -> with full recomputation" act_mib "$tmp/sp2.log" "$tmp/sp2_rc.log"

run 4 "$tmp/tp2dp2.log" --tensor-model-parallel-size 2
run 8 "$tmp/tp2dp4.log" --tensor-model-parallel-size 2
run 8 "$tmp/tp4dp2.log" --tensor-model-parallel-size 4
same "$tmp/tp1.log" "$tmp/tp2dp2.log" 1e-5 "fp32 TP=2 x DP=2 (4 ranks) == one rank"
# The model statistics count each element once under TP: TP=2 prints TP=1's params
# norm (within 1e-3) and zero count (the 8 unused position rows x 32, plus up to
# the 2 x 32 key-bias elements whose gradient is 0 in exact arithmetic).
stats=(--log-params-norm --log-num-zeros-in-grad --max-position-embeddings 40 --hidden-dropout 0
  --attention-dropout 0)
run 1 "$tmp/stats1.log" "${stats[@]}"
run 2 "$tmp/stats2.log" "${stats[@]}" --tensor-model-parallel-size 2
stat_pairs() { grep -oE 'num zeros: [0-9.]+ \| params norm: [0-9.]+' "$1" | awk '{ print $3, $7 }'; }
if paste <(stat_pairs "$tmp/stats1.log") <(stat_pairs "$tmp/stats2.log") | awk '
    { n++; d = $2 - $4; if (d < 0) d = -d
      if ($1 < 256 || $1 > 320 || $3 < 256 || $3 > 320 || d > 1e-3 * $2) bad = 1 }
    END { exit !(n == 20 && !bad) }'; then
  ok "TP=2 prints TP=1's params norm and zero count (256 + key-bias roundings) at all 20 iterations"
else
  fail "TP=2 statistics: $(paste <(stat_pairs "$tmp/stats1.log") <(stat_pairs "$tmp/stats2.log") | head -3)"
fi
run 4 "$tmp/tp2dp2_zero.log" --tensor-model-parallel-size 2 --use-distributed-optimizer
same "$tmp/tp2dp2.log" "$tmp/tp2dp2_zero.log" 0 "TP=2 x DP=2 with ZeRO-1 == without, bit for bit"
# ZeRO-2 and ZeRO-3 under TP=2 x DP=2, with sequence parallelism and full
# recomputation: one micro-batch per DP rank, bit for bit plain DP; two, within
# fp32 rounding of one rank.
one=(--tensor-model-parallel-size 2 --global-batch-size 4 --sequence-parallel
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
run 4 "$tmp/tp2dp2_sp_z0.log" "${one[@]}"
for z in 2 3; do
  run 4 "$tmp/tp2dp2_sp_z$z.log" "${one[@]}" --zero-stage $z
  same "$tmp/tp2dp2_sp_z0.log" "$tmp/tp2dp2_sp_z$z.log" 0 \
    "TP=2 x DP=2, sequence-parallel, recomputed: ZeRO-$z == without, bit for bit"
  run 4 "$tmp/tp2dp2_z$z.log" --tensor-model-parallel-size 2 --zero-stage $z
  same "$tmp/tp1.log" "$tmp/tp2dp2_z$z.log" 1e-5 "fp32 TP=2 x DP=2 with ZeRO-$z (2 micro-batches per rank) == one rank"
done
same "$tmp/tp1.log" "$tmp/tp2dp4.log" 1e-5 "fp32 TP=2 x DP=4 (8 ranks) == one rank"
same "$tmp/tp1.log" "$tmp/tp4dp2.log" 1e-5 "fp32 TP=4 x DP=2 (8 ranks) == one rank"

# Checkpoints that reshard: saved at TP=2 (and TP=2 x DP=2) after 10 iterations,
# resumed at TP=1 and TP=4 to 20 with the losses of the straight TP=1 run.
c="$tmp/ck_tp2"
run 2 "$tmp/save_tp2.log" --tensor-model-parallel-size 2 --exit-interval 10 --save "$c" --save-interval 100
[ -f "$c/iter_0000010/mp_rank_00/model.safetensors" ] && [ -f "$c/iter_0000010/mp_rank_01/model.safetensors" ] &&
  ok "TP=2 saves mp_rank_00 and mp_rank_01" || fail "TP=2 checkpoint: $(ls -R "$c" | head -20)"
for tp in 1 4; do
  run $tp "$tmp/resume_tp$tp.log" --tensor-model-parallel-size $tp --load "$c"
  cat "$tmp/save_tp2.log" "$tmp/resume_tp$tp.log" >"$tmp/joined_tp$tp.log"
  same "$tmp/tp1.log" "$tmp/joined_tp$tp.log" 1e-5 "TP=2 checkpoint at 10, resumed at TP=$tp to 20 == TP=1 straight"
done
c="$tmp/ck_tp2dp2"
run 4 "$tmp/save_tp2dp2.log" --tensor-model-parallel-size 2 --exit-interval 10 --save "$c" --save-interval 100
for tp in 1 4; do
  run $tp "$tmp/resume_tp2dp2_tp$tp.log" --tensor-model-parallel-size $tp --load "$c"
  cat "$tmp/save_tp2dp2.log" "$tmp/resume_tp2dp2_tp$tp.log" >"$tmp/joined_tp2dp2_tp$tp.log"
  same "$tmp/tp1.log" "$tmp/joined_tp2dp2_tp$tp.log" 1e-5 "TP=2 x DP=2 checkpoint at 10, resumed at TP=$tp to 20 == straight"
done

# trident convert exports a TP-sharded checkpoint to one Hugging Face file: the
# export of the TP=2 checkpoint and of a TP=1 one at the same iteration, imported
# back, give the same first loss.
run 1 "$tmp/save_tp1.log" --exit-interval 10 --save "$tmp/ck_tp1" --save-interval 100
first_loss() { grep -m1 -oE 'lm loss: [^ ]+' "$1" | sed 's/.*: //'; }
for k in tp1 tp2; do
  "$bin" convert --from trident --to hf --input "$tmp/ck_$k" --output "$tmp/hf_$k" >"$tmp/conv.log" 2>&1 &&
    "$bin" convert --from hf --to trident --input "$tmp/hf_$k" --output "$tmp/back_$k" >>"$tmp/conv.log" 2>&1 ||
    fail "convert $k: $(tail -3 "$tmp/conv.log")"
  run 1 "$tmp/from_hf_$k.log" --load "$tmp/back_$k" --train-iters 4
done
[ -f "$tmp/hf_tp2/model.safetensors" ] && [ -f "$tmp/hf_tp2/config.json" ] &&
  awk -v a="$(first_loss "$tmp/from_hf_tp1.log")" -v b="$(first_loss "$tmp/from_hf_tp2.log")" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d / a <= 1e-5) }' &&
  ok "convert: TP=2 checkpoint -> one HF model.safetensors; its loss $(first_loss "$tmp/from_hf_tp2.log") == TP=1's $(first_loss "$tmp/from_hf_tp1.log")" ||
  fail "convert of the TP=2 checkpoint: losses $(first_loss "$tmp/from_hf_tp2.log") vs $(first_loss "$tmp/from_hf_tp1.log")"

# Refusals at start: exit 1 and the reason.
refused() { # WHAT PATTERN NP FLAGS...
  local what=$1 pattern=$2 np=$3
  shift 3
  OMP_NUM_THREADS=1 timeout -k 5 60 "$mpirun" --oversubscribe --allow-run-as-root -np "$np" \
    "$bin" train "${model[@]}" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "$pattern" "$tmp/err" &&
    ok "$what refused (exit $rc): $(grep -m1 -- "$pattern" "$tmp/err")" ||
    fail "$what: exit $rc, $(head -3 "$tmp/err")"
}
refused "TP=3 with 4 heads" "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3" 3 \
  --tensor-model-parallel-size 3
refused "TP=4 with FFN 130" "--ffn-hidden-size 130 is not divisible by --tensor-model-parallel-size 4" 4 \
  --tensor-model-parallel-size 4 --num-attention-heads 8 --ffn-hidden-size 130
refused "TP=2 on 3 ranks" "3 ranks cannot be split into --tensor-model-parallel-size 2" 3 \
  --tensor-model-parallel-size 2
refused "a checkpoint padded to 512 loaded at TP=4 padding to 1024" \
  "padded vocabulary .*: 512 in the checkpoint, 1024 in this run .*choose --make-vocab-size-divisible-by" 4 \
  --tensor-model-parallel-size 4 --make-vocab-size-divisible-by 256 --load "$tmp/ck_tp1"
refused "sequence parallel, seq 30 at TP=4" "--seq-length 30 is not divisible by --tensor-model-parallel-size 4" 4 \
  --tensor-model-parallel-size 4 --sequence-parallel --seq-length 30
exit $failed
