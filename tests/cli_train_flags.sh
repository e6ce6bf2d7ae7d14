#!/usr/bin/env bash
# `trident train` with Megatron-LM's flags: --help lists them (and docs/flags.md
# documents each), every refusal is "trident: error: ..." on stderr with exit
# code 1, a GPU-only flag is explained once, and a tiny run prints Megatron's
# log line and, with --timing-log-level, Megatron's timer block. Arguments: the trident binary and the source directory.
set -u
bin=$1
src=$2

if ! "$bin" train --help >/dev/null 2>&1; then
  echo "SKIP: 'trident train' is not a command of this binary yet; nothing to test"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

small=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
  --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
  --mock-data --tokenizer-type NullTokenizer --vocab-size 64)

# expect_error MESSAGE FLAGS...: exit code 1 and "trident: error: MESSAGE" on stderr.
expect_error() {
  local msg=$1
  shift
  "$bin" train "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne 1 ] || ! grep -qF -- "trident: error: $msg" "$tmp/err"; then
    fail "trident train $* -> exit $rc, stderr: $(cat "$tmp/err")"
  else
    echo "ok    $msg"
  fi
}

# --help: exit 0, and every flag it lists is documented in docs/flags.md.
"$bin" train --help >"$tmp/help" 2>&1 || fail "trident train --help exits non-zero"
grep -oE '(^  |, )--[A-Za-z0-9_-]+' "$tmp/help" | sed 's/^[ ,]*//' | sort -u >"$tmp/flags"
[ "$(wc -l <"$tmp/flags")" -gt 80 ] || fail "--help lists only $(wc -l <"$tmp/flags") flags"
while read -r flag; do
  grep -qF -- "\`$flag" "$src/docs/flags.md" || fail "$flag is not in docs/flags.md"
done <"$tmp/flags"

# Bad flags and values.
expect_error "unknown flag '--hiden-size' (did you mean --hidden-size?)" "${small[@]}" --hiden-size 32
expect_error "unknown flag '--lr-decay-iter' (did you mean --lr-decay-iters?)" "${small[@]}" --lr-decay-iter 5
expect_error "unexpected argument 'extra'" "${small[@]}" extra
expect_error "--num-layers expects a positive integer; got 'two'" "${small[@]}" --num-layers two
expect_error "--hidden-size expects a positive integer; got '-32'" "${small[@]}" --hidden-size -32
expect_error "--lr expects a non-negative number; got 'fast'" "${small[@]}" --lr fast
expect_error "--lr-decay-style expects one of constant, linear, cosine, inverse-square-root, WSD; got 'step'" \
  "${small[@]}" --lr-decay-style step
expect_error "--tokenizer-type expects one of GPT2BPETokenizer, NullTokenizer; got 'Llama2Tokenizer'" \
  "${small[@]}" --tokenizer-type Llama2Tokenizer
expect_error "--fp16 is a switch and takes no value" "${small[@]}" --fp16=true
expect_error "--seed expects a value" "${small[@]}" --seed

# Impossible combinations.
expect_error "--hidden-size 32 is not divisible by --num-attention-heads 5" "${small[@]}" --train-iters 2 \
  --num-attention-heads 5
expect_error "--global-batch-size 5 is not divisible by --micro-batch-size 2 x data-parallel size 1" \
  "${small[@]}" --train-iters 2 --global-batch-size 5
expect_error "--seq-length 32 is longer than --max-position-embeddings 16" "${small[@]}" --train-iters 2 \
  --seq-length 32
expect_error "--fp16 and --bf16 are exclusive" "${small[@]}" --train-iters 2 --fp16 --bf16
expect_error "either --train-iters or --train-samples is required" "${small[@]}"
expect_error "--train-iters and --train-samples are exclusive" "${small[@]}" --train-iters 2 --train-samples 8
expect_error "--lr-warmup-fraction and --lr-warmup-iters are exclusive" "${small[@]}" --train-iters 2 \
  --lr-warmup-fraction 0.1 --lr-warmup-iters 1
expect_error "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 3" "${small[@]}" \
  --train-iters 2 --tensor-model-parallel-size 3
expect_error "--tokenizer-type NullTokenizer needs --vocab-size" --num-layers 2 --hidden-size 32 \
  --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 --micro-batch-size 2 --lr 1e-3 \
  --train-iters 2 --mock-data --tokenizer-type NullTokenizer
expect_error "no training data: give --data-path" --num-layers 2 --hidden-size 32 --num-attention-heads 4 \
  --seq-length 16 --max-position-embeddings 16 --micro-batch-size 2 --lr 1e-3 --train-iters 2 \
  --tokenizer-type NullTokenizer --vocab-size 64

# A tiny run: GPU-only flags explained once each, Megatron's line every iteration.
if "$bin" train "${small[@]}" --train-iters 2 --log-interval 1 --eval-iters 0 --transformer-impl local \
  --distributed-backend nccl --use-flash-attn >"$tmp/out" 2>"$tmp/err"; then
  for f in transformer-impl use-flash-attn; do
    n=$(grep -c -- "trident: note: --$f:" "$tmp/err")
    [ "$n" -eq 1 ] || fail "--$f is explained $n times (expected once)"
  done
  # --distributed-backend acts (docs/distributed.md): no note for it
  grep -q -- "note: --distributed-backend" "$tmp/err" && fail "--distributed-backend is noted as doing nothing"
  line='^ \[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\] iteration        2/       2 \| consumed samples:            8 \| elapsed time per iteration \(ms\): [0-9]+\.[0-9] \| learning rate: [0-9]\.[0-9]{6}E[-+][0-9]{2} \| global batch size:     4 \| lm loss: [0-9]\.[0-9]{6}E[-+][0-9]{2} \| loss scale: 1\.0 \| grad norm: [0-9]+\.[0-9]{3} \| number of skipped iterations:   0 \| number of nan iterations:   0 \|$'
  grep -qE "$line" "$tmp/out" || fail "no Megatron log line for iteration 2 in: $(cat "$tmp/out")"
else
  fail "the tiny run failed: $(cat "$tmp/err")"
fi

# --timing-log-level: Megatron's "(min, max) time across ranks (ms):" block after
# each log line, timers of level <= L only, none at level 0 (the default).
timer='^    [a-z-]+ \.+: \([0-9]+\.[0-9]{2}, [0-9]+\.[0-9]{2}\)$'
for level in 0 1 2; do
  "$bin" train "${small[@]}" --train-iters 2 --log-interval 1 --eval-iters 0 --timing-log-level $level \
    >"$tmp/out" 2>"$tmp/err" || fail "--timing-log-level $level: $(cat "$tmp/err")"
  blocks=$(grep -c '^(min, max) time across ranks (ms):$' "$tmp/out")
  names=$(grep -E "$timer" "$tmp/out" | awk '{print $1}' | sort -u | tr '\n' ' ')
  widths=$(grep -E "$timer" "$tmp/out" | awk -F: '{print length($1)}' | sort -u)
  case $level in
  0) want_blocks=0 want='' ;;
  1) want_blocks=2 want='all-grads-sync forward-backward optimizer optimizer-clip-main-grad optimizer-copy-main-to-model-params optimizer-inner-step ' ;;
  2) want_blocks=2 want='all-grads-sync backward-compute batch-generator forward-backward forward-compute optimizer optimizer-clip-main-grad optimizer-copy-main-to-model-params optimizer-inner-step ' ;;
  esac
  if [ "$blocks" -eq "$want_blocks" ] && [ "$names" = "$want" ] && { [ -z "$want" ] || [ "$widths" = 52 ]; }; then
    echo "ok    --timing-log-level $level: $blocks timer blocks, timers: ${names:-none}"
  else
    fail "--timing-log-level $level: $blocks blocks, timers '$names', label widths '$widths': $(head -20 "$tmp/out")"
  fi
done

# --log-num-zeros-in-grad / --log-params-norm: Megatron's fields after grad norm.
# With 48 position rows and sequences of 16, rows 16..47 of the position
# embedding get no gradient: (48 - 16) x 32 hidden = 1024 zeros (dropout off: a
# dropped element in every sequence of the batch would zero one more). The key
# biases' gradient is zero in exact arithmetic (softmax ignores a constant
# added to a row), so up to their 2 x 32 elements may round to exactly 0 too.
if "$bin" train "${small[@]}" --max-position-embeddings 48 --train-iters 2 --log-interval 1 --eval-iters 0 \
  --hidden-dropout 0 --attention-dropout 0 --clip-grad 1 --log-num-zeros-in-grad --log-params-norm >"$tmp/out" 2>"$tmp/err"; then
  z=$(grep -oE '\| grad norm: [0-9.]+ \| num zeros: [0-9]+\.0 \| params norm: [0-9]+\.[0-9]{3} \| number of skipped' "$tmp/out" |
    sed -E 's/.*num zeros: ([0-9]+).*/\1/' | tr '\n' ' ')
  awk -v z="$z" 'BEGIN { n = split(z, v, " "); ok = n == 2; for (i = 1; i <= n; i++) ok = ok && v[i] >= 1024 && v[i] <= 1088; exit !ok }' &&
    echo "ok    num zeros $z(1024 unused position rows, + key-bias roundings <= 64) and params norm on both log lines" ||
    fail "num zeros / params norm: $(grep -o 'grad norm.*' "$tmp/out")"
else
  fail "--log-num-zeros-in-grad run: $(cat "$tmp/err")"
fi

# The weight-decay schedule reaches AdamW: linear from W to W trains as constant
# W, bit for bit; cosine from 0 to 0.5 trains differently.
wd_losses() {
  "$bin" train "${small[@]}" --train-iters 6 --log-interval 1 --eval-iters 0 --lr 1e-2 "$@" 2>/dev/null |
    grep -oE 'lm loss: [^ ]+' | tr '\n' ' '
}
w0=$(wd_losses --weight-decay 0.3)
w1=$(wd_losses --weight-decay 0.3 --weight-decay-incr-style linear --start-weight-decay 0.3 --end-weight-decay 0.3)
w2=$(wd_losses --weight-decay-incr-style cosine --start-weight-decay 0 --end-weight-decay 0.5)
[ -n "$w0" ] && [ "$w0" = "$w1" ] && [ -n "$w2" ] && [ "$w2" != "$w0" ] &&
  echo "ok    weight-decay schedule: linear W -> W == constant W; cosine 0 -> 0.5 differs" ||
  fail "weight-decay schedule: '$w0' / '$w1' / '$w2'"

# --tensorboard-dir: one event file (its format is test_tb_events'), holding
# Megatron's tags: every iteration's scalars and their "vs samples" twins, the
# validation loss (and perplexity), the timers at each log line.
tb="$tmp/tb/run"
if "$bin" train "${small[@]}" --train-iters 4 --log-interval 2 --eval-interval 2 --eval-iters 1 \
  --clip-grad 1 --tensorboard-dir "$tb" --log-validation-ppl-to-tensorboard --log-timers-to-tensorboard \
  --timing-log-level 1 >"$tmp/out" 2>"$tmp/err"; then
  files=("$tb"/events.out.tfevents.*)
  count() { grep -a -o -- "$1" "${files[0]}" | wc -l; }
  # substring counts: "lm loss" is in "lm loss vs samples" and the validation tags
  got="$(count 'lm loss vs samples') $(count 'learning-rate') $(count 'grad-norm vs samples') $(count 'lm loss validation ppl vs samples') $(count 'forward-backward-time') $(count 'iteration-time')"
  if [ "${#files[@]}" -eq 1 ] && [ "$got" = "4 8 4 3 2 2" ]; then
    echo "ok    --tensorboard-dir: ${files[0]##*/} with Megatron's tags (counts $got)"
  else
    fail "--tensorboard-dir: ${#files[@]} files, tag counts '$got' (want '4 8 4 3 2 2')"
  fi
else
  fail "--tensorboard-dir run: $(cat "$tmp/err")"
fi
: >"$tmp/not_a_dir"
expect_error "--tensorboard-dir: '$tmp/not_a_dir' exists and is not a directory" "${small[@]}" \
  --train-iters 1 --tensorboard-dir "$tmp/not_a_dir/run"

[ "$failed" -eq 0 ] && echo "all passed"
exit "$failed"
