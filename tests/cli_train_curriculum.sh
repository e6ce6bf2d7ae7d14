#!/usr/bin/env bash
# Megatron-DeepSpeed's seqlen curriculum learning (the DeepSpeed config's
# curriculum_learning block, DeepSpeed's legacy CurriculumScheduler):
#  - fixed_linear from 8 to 32 tokens over 10 steps of 8: iterations 1-12 train
#    on 8 8 8 16 16 16 24 24 24 32 32 32 tokens per sample (DeepSpeed's formula at
#    steps 1..12), the log line's curriculum and actual seqlen say so, and
#    consumed tokens add up global batch x those lengths;
#  - a curriculum that starts at the full length changes no bit of the losses;
#  - resuming mid-curriculum gives the uninterrupted run's lines (losses,
#    consumed tokens, seqlen);
#  - DP=2, TP=2 with sequence parallelism and PP=2 train the one-rank run's
#    curriculum losses;
#  - --train-tokens counts the curriculum's tokens (Megatron-DeepSpeed's loop);
#  - a length sequence parallelism cannot split is refused at start, naming the
#    iteration.
# Arguments: the trident binary and the source directory.
set -u
bin=$1

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0
  --mock-data --tokenizer-type NullTokenizer --vocab-size 500 --log-interval 1 --eval-interval 4
  --eval-iters 2 --seed 7 --train-iters 20 --deepspeed)
source "$(dirname "$0")/train_common.sh"

# config MIN MAX [TOTAL STEP]: a DeepSpeed config with a fixed_linear curriculum
config() {
  cat <<EOF
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": $1,
   "max_difficulty": $2, "schedule_type": "fixed_linear",
   "schedule_config": {"total_curriculum_step": ${3:-10}, "difficulty_step": ${4:-8}}}}
EOF
}
config 8 32 >"$tmp/cl.json"
config 32 32 >"$tmp/full.json"
echo '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0}' >"$tmp/plain.json"

# "iteration curriculum-seqlen actual-seqlen consumed-tokens" of each log line
fields() {
  sed -nE 's/^ iteration +([0-9]+)\/.*consumed tokens: +([0-9]+) \|.* curriculum seqlen: +([0-9]+) \| actual seqlen: +([0-9]+) \|.*/\1 \3 \4 \2/p' "$1"
}

run 1 "$tmp/cl1.log" --deepspeed_config "$tmp/cl.json"
want=$(awk 'BEGIN { split("8 8 8 16 16 16 24 24 24 32 32 32", d, " "); t = 0
  for (i = 1; i <= 20; i++) { s = i <= 12 ? d[i] : 32; t += 8 * s; print i, s, s, t } }')
if [ "$(fields "$tmp/cl1.log")" = "$want" ]; then
  ok "fixed_linear 8..32: each iteration's curriculum seqlen, actual seqlen and consumed tokens"
else
  fail "curriculum fields: $(fields "$tmp/cl1.log" | head -5 | tr '\n' ';') want $(echo "$want" | head -5 | tr '\n' ';')"
fi
grep -q ' > curriculum learning (DeepSpeed.s, seqlen, fixed_linear): tokens per sample from 8 to 32' "$tmp/cl1.log" &&
  ok "the start-up summary names the curriculum" || fail "no curriculum summary line"

run 1 "$tmp/full.log" --deepspeed_config "$tmp/full.json"
run 1 "$tmp/plain.log" --deepspeed_config "$tmp/plain.json"
same "$tmp/plain.log" "$tmp/full.log" 0 "a curriculum at the full length from the start == no curriculum"

# Resume at iteration 6 (mid-curriculum): the uninterrupted run's lines after it.
run 1 "$tmp/save.log" --deepspeed_config "$tmp/cl.json" --exit-interval 6 --save "$tmp/ck" --save-interval 6
run 1 "$tmp/resume.log" --deepspeed_config "$tmp/cl.json" --load "$tmp/ck"
after6() { sed -nE 's/^ iteration +([0-9]+)\/ +[0-9]+ \| (consumed .*) \| elapsed.*(lm loss: [^ ]+) .*(curriculum seqlen: +[0-9]+ \| actual seqlen: +[0-9]+).*/\1 \2 \3 \4/p' "$1" | awk '$1 > 6'; }
after6 "$tmp/cl1.log" >"$tmp/want6"
after6 "$tmp/resume.log" >"$tmp/got6"
[ "$(wc -l <"$tmp/want6")" -eq 14 ] && cmp -s "$tmp/want6" "$tmp/got6" &&
  ok "resumed at 6: iterations 7-20 as uninterrupted (losses, consumed tokens, seqlen)" ||
  fail "resume: $(diff "$tmp/want6" "$tmp/got6" | head -4)"

# Parallel layouts train the same curriculum.
run 2 "$tmp/dp2.log" --deepspeed_config "$tmp/cl.json"
same "$tmp/cl1.log" "$tmp/dp2.log" 1e-5 "DP=2 with the curriculum == one rank"
run 2 "$tmp/tp2.log" --deepspeed_config "$tmp/cl.json" --tensor-model-parallel-size 2 --sequence-parallel
same "$tmp/cl1.log" "$tmp/tp2.log" 1e-5 "TP=2 with sequence parallelism and the curriculum == one rank"
run 2 "$tmp/pp2.log" --deepspeed_config "$tmp/cl.json" --pipeline-model-parallel-size 2
same "$tmp/cl1.log" "$tmp/pp2.log" 1e-5 "PP=2 with the curriculum == one rank"

# --train-tokens 1000 counts curriculum tokens: 64 128 192 320 448 576 768 960 1152.
run 1 "$tmp/tokens.log" --deepspeed_config "$tmp/cl.json" --train-tokens 1000
[ "$(grep -c '^ iteration ' "$tmp/tokens.log")" -eq 9 ] &&
  grep -qE '^ iteration +9/.*consumed tokens: +1152 \|' "$tmp/tokens.log" &&
  ok "--train-tokens 1000 stops after iteration 9 (1152 curriculum tokens)" ||
  fail "--train-tokens: $(grep -oE '^ iteration +[0-9]+/.*consumed tokens: +[0-9]+' "$tmp/tokens.log" | tail -2)"

# 9 tokens (difficulty_step 1) with sequence parallelism over 2 ranks: refused
# before training.
config 9 32 1000 1 >"$tmp/odd.json"
OMP_NUM_THREADS=1 timeout 60 "$mpirun" --oversubscribe --allow-run-as-root -np 2 "$bin" train \
  "${model[@]}" --deepspeed_config "$tmp/odd.json" --tensor-model-parallel-size 2 \
  --sequence-parallel >"$tmp/odd.log" 2>&1
rc=$?
grep -q 'curriculum_learning: iteration 1 would train on 9 tokens per sample, which is not a multiple of the tensor-parallel size' "$tmp/odd.log" &&
  [ $rc -ne 0 ] && ! grep -q '^ iteration ' "$tmp/odd.log" &&
  ok "9 tokens under sequence parallelism over 2 ranks: refused at start (exit $rc)" ||
  fail "odd curriculum length: exit $rc: $(grep -m2 error "$tmp/odd.log")"
exit $failed
