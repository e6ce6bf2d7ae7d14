#!/usr/bin/env bash
# Megatron-DeepSpeed's launch (`--deepspeed --deepspeed_config ds_config.json`)
# under mpirun -np 2, with a config written the way its examples_deepspeed GPT
# scripts write theirs: the losses, training and validation, are those of the
# same run given as plain Megatron flags (both runs made here), for an fp16 and
# a bf16 block, with and without the Megatron flags Megatron-DeepSpeed's scripts
# pass alongside. Bad configs: an unknown key (exit 1, the closest key named),
# a batch that breaks DeepSpeed's identity or disagrees with --global-batch-size
# (exit 1, both named), a conflicting flag. DeepSpeed's OneCycle schedule, its
# rates and its momentum, end to end. Arguments: the trident binary and the
# source directory.
set -u
bin=$1

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
  --lr-warmup-iters 3 --weight-decay 0.1 --hidden-dropout 0.1 --attention-dropout 0.1
  --mock-data --tokenizer-type NullTokenizer --vocab-size 200 --log-interval 1
  --eval-interval 5 --eval-iters 2 --seed 7 --train-iters 20)
source "$(dirname "$0")/train_common.sh"

GLOBAL_BATCH_SIZE=8 MICRO_BATCH_SIZE=2 LOG_INTERVAL=1 ZERO_STAGE=1 PRESCALE_GRAD=false

# ds_config PRECISION_BLOCK: the examples' config (their heredoc), precision block given.
ds_config() {
  cat <<EOT
{
  "train_batch_size" : $GLOBAL_BATCH_SIZE,
  "train_micro_batch_size_per_gpu": $MICRO_BATCH_SIZE,
  "steps_per_print": $LOG_INTERVAL,

  "zero_optimization": {
    "stage": $ZERO_STAGE
  },

  "gradient_clipping": 1.0,
  "prescale_gradients": $PRESCALE_GRAD,

  $1,

  "wall_clock_breakdown" : false
}
EOT
}
ds_config '"fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2,
    "min_loss_scale": 1, "initial_scale_power": 11}' >"$tmp/ds_fp16.json"
ds_config '"bf16": {"enabled": true}' >"$tmp/ds_bf16.json"

# The Megatron flags that mean what the configs say (DeepSpeed's dynamic scale
# starts at 2^11 with window 500; no growth happens in 20 iterations, so both
# scalers hold the same scale unless an fp16 step overflows, where they agree).
plain=(--micro-batch-size 2 --global-batch-size 8 --use-distributed-optimizer --clip-grad 1.0)
declare -A prec=([fp16]="--fp16 --initial-loss-scale 2048 --loss-scale-window 500 --hysteresis 2
  --min-loss-scale 1" [bf16]="--bf16")

for p in fp16 bf16; do
  read -ra pflags <<<"${prec[$p]}"
  run 2 "$tmp/$p.plain.log" "${plain[@]}" "${pflags[@]}"
  # as the examples launch it: the config plus the Megatron flags that agree with it
  run 2 "$tmp/$p.ds.log" --micro-batch-size 2 --global-batch-size 8 --zero-stage 1 --"$p" \
    --deepspeed --deepspeed_config "$tmp/ds_$p.json"
  # the config alone sets the batch, precision, ZeRO stage and clipping
  run 2 "$tmp/$p.dsonly.log" --deepspeed --deepspeed_config "$tmp/ds_$p.json"
  same "$tmp/$p.plain.log" "$tmp/$p.ds.log" 0 "$p: ds_config.json + Megatron-DeepSpeed's flags == plain Megatron flags"
  same "$tmp/$p.plain.log" "$tmp/$p.dsonly.log" 0 "$p: ds_config.json alone == plain Megatron flags"
done

log="$tmp/fp16.ds.log"
grep -q "ZeRO stage 1: Adam state sharded over 2 data-parallel ranks" "$log" &&
  grep -q "global batch 8 = micro batch 2 x 2 micro-batches x data-parallel 2" "$log" &&
  grep -q "loss scale: 2048.0" "$log" &&
  [ "$(grep -c "note: --deepspeed_config .*steps_per_print" "$log")" = 1 ] &&
  ok "the config's ZeRO-1, batch and 2^11 loss scale are the run's; one note (steps_per_print)" ||
  fail "ZeRO / batch / loss scale / note lines of $log: $(grep -E 'note|global batch|ZeRO' "$log")"

# DeepSpeed's OneCycle end to end (one rank, its schedule instead of Megatron's):
# the log line's rates are the schedule's (12 steps up, 8 down, then the decay),
# and its momentum reaches Adam: cycle_momentum with cycle_min_mom = cycle_max_mom
# = 0.9 trains to the bits of betas [0.9, 0.99] without it (DeepSpeed's pair
# puts 0.99 in beta2), and not to those of the optimizer's [0.9, 0.999].
saved=("${model[@]}")
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --lr 3e-3 --weight-decay 0.1 --mock-data
  --tokenizer-type NullTokenizer --vocab-size 200 --log-interval 1 --eval-iters 0 --seed 7
  --train-iters 24 --micro-batch-size 2 --global-batch-size 8)
one_cycle() { # MOMENTUM_PARAMS BETA2: a OneCycle config
  echo "{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 2, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-3,
    \"betas\": [0.9, $2], \"weight_decay\": 0.1}}, \"scheduler\": {\"type\": \"OneCycle\", \"params\":
    {\"cycle_min_lr\": 1e-4, \"cycle_max_lr\": 2e-3, \"cycle_first_step_size\": 12,
    \"cycle_second_step_size\": 8, \"decay_step_size\": 2, \"decay_lr_rate\": 0.5, $1}}}"
}
one_cycle '"cycle_min_mom": 0.9, "cycle_max_mom": 0.9' 0.999 >"$tmp/oc.json"
one_cycle '"cycle_momentum": false' 0.99 >"$tmp/oc_b99.json"
one_cycle '"cycle_momentum": false' 0.999 >"$tmp/oc_b999.json"
run 1 "$tmp/oc.log" --deepspeed --deepspeed_config "$tmp/oc.json"
run 1 "$tmp/oc_b99.log" --deepspeed --deepspeed_config "$tmp/oc_b99.json"
run 1 "$tmp/oc_b999.log" --deepspeed --deepspeed_config "$tmp/oc_b999.json"
sed -nE 's/.* iteration +([0-9]+)\/.* learning rate: ([^ ]+) \|.*/\1 \2/p' "$tmp/oc.log" >"$tmp/oc.rates"
# the rate logged after j steps is the next step's: DeepSpeed's iteration i = j - 1,
# n = i + 1 = j; past the 20-step cycle, d = i - 20 + 1 steps of decay
bad=$(awk '{ i = $1 - 1; n = i + 1; lo = 1e-4; hi = 2e-3
  if (i < 20) { f = n / 20 + 1 - int(1 + n / 20); q = 12 / 20
    h = f <= q ? f / q : (f - 1) / (q - 1); want = lo + (hi - lo) * h }
  else want = lo / (1 + 0.5 * (i - 20 + 1) / 2)
  r = ($2 - want) / want; if (r < 0) r = -r; if (r > 1e-3) print $1, $2, want }' "$tmp/oc.rates")
[ "$(wc -l <"$tmp/oc.rates")" = 24 ] && [ -z "$bad" ] &&
  ok "OneCycle: the logged rates climb 12 steps, fall 8, then decay ($(sed -n '1p;12p;20p;24p' "$tmp/oc.rates" | tr '\n' ';'))" ||
  fail "OneCycle rates ($(wc -l <"$tmp/oc.rates") lines): $bad"
grep -q "note: .*OneCycle: cycle_momentum" "$tmp/oc.log" && ok "OneCycle's momentum is noted" ||
  fail "no cycle_momentum note: $(grep note "$tmp/oc.log")"
same "$tmp/oc.log" "$tmp/oc_b99.log" 0 "OneCycle's momentum 0.9 == betas [0.9, 0.99], bit for bit"
losses "$tmp/oc.log" >"$tmp/a.l" && losses "$tmp/oc_b999.log" >"$tmp/b.l"
! cmp -s "$tmp/a.l" "$tmp/b.l" && ok "and differs from the optimizer's betas [0.9, 0.999] (beta2 0.99 reaches Adam)" ||
  fail "OneCycle's beta2 did not reach Adam"
model=("${saved[@]}")

# expect_error MESSAGE ARGS...: exit 1 with "trident: error: ...MESSAGE" (under mpirun -np 2).
expect_error() {
  local msg=$1
  shift
  OMP_NUM_THREADS=1 timeout -k 5 60 "$mpirun" --oversubscribe --allow-run-as-root -np 2 \
    "$bin" train "${model[@]}" "$@" >"$tmp/err.log" 2>&1
  local rc=$?
  if [ "$rc" -ne 1 ] || ! grep -qF -- "$msg" "$tmp/err.log"; then
    fail "exit $rc, want 1 and '$msg': $(head -5 "$tmp/err.log")"
  else
    ok "refused: $msg"
  fi
}

sed 's/"stage": 1/"stage4": 1/' "$tmp/ds_bf16.json" >"$tmp/unknown.json"
expect_error "trident: error: --deepspeed_config $tmp/unknown.json: zero_optimization.stage4: unknown key (did you mean zero_optimization.stage?)" \
  --deepspeed --deepspeed_config "$tmp/unknown.json"
# 10 // 4 // 2 ranks = 1 accumulation step (DeepSpeed divides down): 4 x 1 x 2 = 8, not 10
sed -e 's/"train_batch_size" : 8/"train_batch_size" : 10/' \
  -e 's/"train_micro_batch_size_per_gpu": 2/"train_micro_batch_size_per_gpu": 4/' \
  "$tmp/ds_bf16.json" >"$tmp/identity.json"
expect_error "train_batch_size 10 is not train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 1 x data-parallel size 2 (= 8)" \
  --deepspeed --deepspeed_config "$tmp/identity.json"
expect_error "--global-batch-size 16 vs train_batch_size 8 in the file" \
  --global-batch-size 16 --deepspeed --deepspeed_config "$tmp/ds_bf16.json"
expect_error "--fp16 vs bf16.enabled true in the file" --fp16 --deepspeed --deepspeed_config "$tmp/ds_bf16.json"
# two errors of one file in one message
sed -e 's/"stage": 1/"stage": 1, "stage4": 1/' -e 's/"gradient_clipping": 1.0/"gradient_clipping": "1.0"/' \
  "$tmp/ds_bf16.json" >"$tmp/two.json"
expect_error "2 errors:" --deepspeed --deepspeed_config "$tmp/two.json"
grep -qF 'gradient_clipping: expects a non-negative number; got "1.0"' "$tmp/err.log" &&
  ok "both errors of the file are listed" || fail "two errors: $(cat "$tmp/err.log")"

exit $failed
