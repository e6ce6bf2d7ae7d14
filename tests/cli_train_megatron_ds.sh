#!/usr/bin/env bash
# Megatron-DeepSpeed's and Megatron-LM's run-length flags on a tiny run:
# --rampup-batch-size prints the global batch sizes and consumed samples of
# Megatron's rule (computed here from the rule), --train-tokens stops the run
# once that many tokens are consumed, and a script of Megatron-DeepSpeed's
# flags (one expert, --data-impl mmap, token schedule) runs to exit 0.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
small=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
  --max-position-embeddings 16 --micro-batch-size 2 --lr 1e-3 --mock-data
  --tokenizer-type NullTokenizer --vocab-size 64 --log-interval 1 --eval-iters 0)
run() { OMP_NUM_THREADS=1 timeout -k 5 60 "$bin" train "${small[@]}" "$@" >"$tmp/log" 2>&1 ||
  fail "exit $?: $* $(tail -3 "$tmp/log")"; }

# Ramp-up 2 -> 8 by 2 over 16 samples, 40 samples: Megatron's rule, step by step.
run --global-batch-size 8 --train-samples 40 --rampup-batch-size 2 2 16
awk 'BEGIN { per = 16 / ((8 - 2) / 2); c = 0; it = 0
  while (c <= 16) { b = 2 + int(c / per) * 2; c += b; it++; print b, c }
  n = int((40 - c) / 8); for (i = 0; i < n; i++) { c += 8; print 8, c } }' >"$tmp/want"
grep -oE 'consumed samples: +[0-9]+ .*global batch size: +[0-9]+' "$tmp/log" |
  awk '{ print $NF, $3 }' >"$tmp/got"
if diff -q "$tmp/want" "$tmp/got" >/dev/null; then
  echo "ok    ramp-up batch sizes and consumed samples follow Megatron's rule: $(tr '\n' ' ' <"$tmp/got")"
else
  fail "ramp-up: want $(tr '\n' ' ' <"$tmp/want") got $(tr '\n' ' ' <"$tmp/got")"
fi

# --train-tokens 200 with 4 samples x 16 tokens per iteration: 4 iterations (256 >= 200).
run --global-batch-size 4 --train-iters 50 --train-tokens 200
n=$(grep -c ' iteration ' "$tmp/log")
[ "$n" = 4 ] && echo "ok    --train-tokens 200 stops after 4 iterations" ||
  fail "--train-tokens: $n iterations, want 4"

# Megatron-DeepSpeed's flags as its examples pass them.
run --global-batch-size 4 --train-samples 64 --lr-warmup-tokens 64 --lr-decay-tokens 800 \
  --lr-decay-style cosine --min-lr 1e-5 --data-impl mmap --num-experts 1 --moe-expert-parallel-size 1 \
  --moe-loss-coeff 0.01 --moe-train-capacity-factor 1.0 --moe-eval-capacity-factor 1.0 \
  --moe-min-capacity 4 --topk 1 --mlp-type standard --create-moe-param-group \
  --disable-moe-token-dropping --checkpoint-activations --deepspeed-activation-checkpointing \
  --partition-activations --no-pipeline-parallel --use-flash-attn-v2 --log-optimizer-states-to-tensorboard \
  --tensorboard-dir "$tmp/tb"
grep -q 'iteration       16/      16' "$tmp/log" && echo "ok    Megatron-DeepSpeed's flags run to the end" ||
  fail "Megatron-DeepSpeed flags: $(tail -2 "$tmp/log")"
exit $failed
