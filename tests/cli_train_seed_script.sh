#!/usr/bin/env bash
# Megatron's single-node pretrain_gpt.py script runs unchanged apart from the
# launcher: the flags below are the script's, word for word, on the bundled
# corpus (KJV, GPT-2 BPE); only the sizes are shrunk (layers, hidden, heads,
# sequence, positions, micro/global batch, iterations, log/save/eval intervals)
# so it runs in seconds. --fp16, --transformer-impl local, --distributed-backend
# nccl and --ckpt-format torch stay. The output must hold Megatron's iteration
# log line and validation line in Megatron's exact format, one note per GPU-only
# flag that changes nothing here (--distributed-backend acts: none for it), and
# a checkpoint in Megatron's layout. Flags appended to the script
# override the script's (argparse: the last one wins).
# Arguments: the trident binary and the source directory.
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok

"$bin" preprocess --input "$src/data/corpus/kjv.jsonl" --output-prefix "$tmp/my-gpt2" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$src/data/gpt2/vocab.json" \
  --merge-file "$src/data/gpt2/merges.txt" --append-eod --workers 2 >"$tmp/pre.log" 2>&1 ||
  { fail "preprocess: $(tail -3 "$tmp/pre.log")"; exit 1; }

# The script (Megatron-LM's examples/pretrain_gpt.sh style, single node).
script="--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024
  --max-position-embeddings 1024 --micro-batch-size 8 --global-batch-size 64 --lr 0.00015
  --train-iters 1000 --lr-decay-iters 320000 --lr-decay-style cosine --min-lr 1.0e-5
  --weight-decay 1e-2 --lr-warmup-fraction .01 --clip-grad 1.0 --fp16 --transformer-impl local
  --data-path DATA --vocab-file VOCAB --merge-file MERGES --split 949,50,1 --log-interval 100
  --save-interval 100 --eval-interval 1000 --eval-iters 10 --distributed-backend nccl
  --save ./ckpt --ckpt-format torch"
read -ra flags <<<"$(echo $script)"

# Shrink the sizes in place (every one must be found, so nothing is added or lost).
# 30 iterations: fp16 starts at a loss scale of 2^32 and, as in Megatron, skips
# the iterations that overflow while the scale halves; the last ten train.
declare -A size=([--num-layers]=2 [--hidden-size]=32 [--num-attention-heads]=4 [--seq-length]=32
  [--max-position-embeddings]=32 [--micro-batch-size]=2 [--global-batch-size]=8
  [--train-iters]=30 [--log-interval]=10 [--save-interval]=15 [--eval-interval]=15
  [DATA]="$tmp/my-gpt2_text_document" [VOCAB]="$src/data/gpt2/vocab.json"
  [MERGES]="$src/data/gpt2/merges.txt")
declare -A seen=()
for ((i = 0; i < ${#flags[@]}; i++)); do
  w=${flags[i]}
  if [ -n "${size[$w]+x}" ]; then
    case $w in
      --*) flags[i + 1]=${size[$w]}; i=$((i + 1)) ;;
      *) flags[i]=${size[$w]} ;;
    esac
    seen[$w]=1
  fi
done
[ ${#seen[@]} -eq ${#size[@]} ] || fail "only ${#seen[@]} of ${#size[@]} sizes were found in the script"
[ ${#flags[@]} -eq 55 ] || fail "the script has ${#flags[@]} words, expected 55"

cd "$tmp" || exit 1
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$bin" train "${flags[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok "the script runs (exit 0)" || fail "exit $rc: $(tail -5 "$tmp/err")"

# Megatron's training log line (training.py training_log), every --log-interval
# iterations. The last interval has updated steps: learning rate, lm loss and
# grad norm are printed; skipped iterations leave the lm loss and grad norm out.
date='^ \[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\]'
e='[0-9]\.[0-9]{6}E[-+][0-9]{2}'
line="$date iteration       30/      30 \| consumed samples:          240 \| elapsed time per iteration \(ms\): [0-9]+\.[0-9] \| learning rate: $e \| global batch size:     8 \| lm loss: [0-9]\.[0-9]{6}E\+[0-9]{2} \| loss scale: [0-9]+\.[0-9] \| grad norm: [0-9]+\.[0-9]{3} \| number of skipped iterations: +[0-9]+ \| number of nan iterations:   0 \|\$"
grep -qE "$line" "$tmp/out" && ok "Megatron's log line: $(grep -E "$line" "$tmp/out" | cut -c1-60)..." ||
  fail "no Megatron log line with lm loss for iteration 30 in: $(grep iteration "$tmp/out")"
any="$date iteration +[0-9]+/      30 \| consumed samples: +[0-9]+ \| elapsed time per iteration \(ms\): [0-9]+\.[0-9] \| learning rate: $e \| global batch size:     8 \|( lm loss: $e \|)? loss scale: [0-9]+\.[0-9] \|( grad norm: [0-9]+\.[0-9]{3} \|)? number of skipped iterations: +[0-9]+ \| number of nan iterations: +[0-9]+ \|\$"
[ "$(grep -cE "$any" "$tmp/out")" -eq 3 ] && [ "$(grep -c '] iteration ' "$tmp/out")" -eq 3 ] &&
  ok "three log lines (10, 20, 30), all in Megatron's format" ||
  fail "log lines: $(grep '] iteration ' "$tmp/out")"
grep -qE "^ \[[^]]*\] iteration       10/      30 \| consumed samples:           80 \|" "$tmp/out" ||
  fail "iteration 10: $(grep 'iteration  ' "$tmp/out")"

# Validation every --eval-interval, and on the validation and test sets at the end.
val=" validation loss at iteration 15 \| lm loss value: $e \| lm loss PPL: $e \| \$"
grep -qE "^$val" "$tmp/out" && ok "validation line at iteration 15" ||
  fail "no validation line at iteration 15 in: $(grep validation "$tmp/out")"
grep -qE "^ validation loss at iteration 30 on validation set \| lm loss value: $e \| lm loss PPL: $e \| \$" "$tmp/out" &&
  grep -qE "^ validation loss at iteration 30 on test set \| lm loss value: $e \| lm loss PPL: $e \| \$" "$tmp/out" &&
  ok "validation and test lines at the end" || fail "end-of-training evaluation: $(grep validation "$tmp/out")"

# GPU-only flags: one note each, nothing else noted (the script gives --split).
for f in transformer-impl ckpt-format; do
  n=$(grep -c -- "^trident: note: --$f:" "$tmp/err")
  [ "$n" -eq 1 ] || fail "--$f is explained $n times (expected once)"
done
[ "$(grep -c '^trident: note:' "$tmp/err")" -eq 2 ] && ok "one note per GPU-only flag" ||
  fail "notes: $(grep 'note:' "$tmp/err")"

# Megatron's checkpoint layout under ./ckpt.
c="$tmp/ckpt"
[ "$(cat "$c/latest_checkpointed_iteration.txt" 2>/dev/null)" = 30 ] &&
  [ -d "$c/iter_0000015/mp_rank_00" ] && [ -d "$c/iter_0000030/mp_rank_00" ] &&
  [ -f "$c/iter_0000030/mp_rank_00/model.safetensors" ] &&
  ok "checkpoint: ./ckpt/latest_checkpointed_iteration.txt = 30, iter_0000015/ and iter_0000030/mp_rank_00/" ||
  fail "checkpoint layout: $(find "$c" 2>/dev/null | head -20)"

# Appended overrides win (argparse): the script plus --train-iters 2 --log-interval 1
# --eval-iters 0 --save-interval 1 --transformer-impl local --save ./ckpt2.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$bin" train "${flags[@]}" --train-iters 2 --log-interval 1 \
  --eval-iters 0 --save-interval 1 --transformer-impl local --save ./ckpt2 >"$tmp/out2" 2>"$tmp/err2"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '] iteration ' "$tmp/out2")" -eq 2 ] &&
  grep -qE "^ \[[^]]*\] iteration        2/       2 \| consumed samples:           16 \|" "$tmp/out2" &&
  ! grep -q "validation loss" "$tmp/out2" &&
  [ "$(cat "$tmp/ckpt2/latest_checkpointed_iteration.txt" 2>/dev/null)" = 2 ] &&
  [ -d "$tmp/ckpt2/iter_0000001/mp_rank_00" ] &&
  [ "$(grep -c -- '--transformer-impl:' "$tmp/err2")" -eq 1 ] &&
  ok "appended flags override the script's (2 iterations, every one logged and saved, no validation)" ||
  fail "overrides: rc $rc, out: $(cat "$tmp/out2"), err: $(tail -3 "$tmp/err2"), ckpt2: $(ls "$tmp/ckpt2" 2>&1)"

[ $failed -eq 0 ] && echo "cli_train_seed_script: all passed"
exit $failed
