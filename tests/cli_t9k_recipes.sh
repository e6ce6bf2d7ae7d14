#!/usr/bin/env bash
# The t9k Megatron-DeepSpeed GPT recipes (tests/scripts/t9k/*.yaml: DeepSpeedJob
# argument lists for 125M, 1.3B and 13B, with only sizes changed; each header
# names its source commit), launched as the job would be with trident in place of
# pretrain_gpt.py: `mpirun -np <slotsPerWorker x replicas> trident train <its
# run.python list>`, in a directory holding the tiny dataset, the GPT-2 tokenizer
# and the recipe's DeepSpeed config under their published paths.
#  - gpt-125m (1 rank, fp16, ZeRO 0), gpt-1-3b-4xdp (DP 2, ZeRO-2, full
#    recomputation), gpt-13b-4xdp-4xpp-4xtp (TP 2 x PP 2, ZeRO-1): exit 0;
#    --train-tokens stops after 10 iterations of 8 x 64 tokens; Megatron-
#    DeepSpeed's log line at 5 and 10 with consumed tokens; the learning rate
#    warms up over --lr-warmup-tokens and decays by tokens; validation at 5 and
#    10 and on the validation and test sets at the end; the checkpoint at 10
#    under output/<name>/model; TensorBoard events under output/<name>/tensorboard.
#  - gpt-1-3b-4xdp: its --zero-stage=2 agrees with the config; gpt-13b's
#    --zero-stage=1 too.
#  - gpt-1-3b-4xdp-4xpp: its DeepSpeed config asks for ZeRO stage 2 with
#    pipeline parallelism, which DeepSpeed's pipeline engine refuses: exit 1 with
#    that reason, and the note that the file's stage 2 runs over --zero-stage=1.
# Arguments: the trident binary and the source directory.
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)
source "$src/tests/train_common.sh" # tmp, fail, ok, $mpirun
export OMP_NUM_THREADS=1
recipes=$src/tests/scripts/t9k
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$bin" preprocess --input "$src/data/corpus/kjv.jsonl" --output-prefix "$tmp/kjv" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$src/data/gpt2/vocab.json" \
  --merge-file "$src/data/gpt2/merges.txt" --append-eod --workers 2 >"$tmp/pre.log" 2>&1 ||
  { fail "preprocess: $(tail -3 "$tmp/pre.log")"; exit 1; }

# args YAML: the run.python list after the script, commented entries skipped,
# one per line (the values hold no spaces or quotes).
args() { sed -nE 's/^ +- "(--[^"]*)".*/\1/p' "$1"; }
world() {
  local s r
  s=$(sed -nE 's/^  slotsPerWorker: ([0-9]+)$/\1/p' "$1")
  r=$(sed -nE 's/^  replicas: ([0-9]+)$/\1/p' "$1")
  echo $((s * r))
}

# run NAME CONFIG: stage the directory, launch the recipe; sets d, log, rc.
run() {
  d=$tmp/$1
  local m=$d/examples/deepspeed/megatron-gpt
  mkdir -p "$m/training" "$m/tokenizer/wiki-en-tokenizer" "$m/dataset/wiki-en"
  cp "$recipes/$2" "$m/training/$2"
  cp "$src/data/gpt2/vocab.json" "$src/data/gpt2/merges.txt" "$m/tokenizer/wiki-en-tokenizer/"
  for x in bin idx; do ln -s "$tmp/kjv_text_document.$x" "$m/dataset/wiki-en/gpt_text_document.$x"; done
  local y=$recipes/$1.yaml
  mapfile -t a < <(args "$y")
  log=$d/train.log
  (cd "$d" && timeout -k 5 180 "$mpirun" --oversubscribe -np "$(world "$y")" "$bin" train "${a[@]}" \
    >"$log" 2>&1)
  rc=$?
}

e='[0-9]\.[0-9]{6}E[-+][0-9]{2}'
# mdsline IT TOTAL: Megatron-DeepSpeed's line at iteration IT of a recipe (8 x 64
# tokens an iteration; --train-samples sets TOTAL; %8d leaves no space before a
# total of 8 digits)
mdsline() {
  printf '^ iteration +%s/ *%s \\| consumed samples: +%s \\| consumed tokens: +%s \\| elapsed time per iteration \\(ms\\): [0-9.]+ \\| learning rate: ([0-9]\\.[0-9]{3}E[-+][0-9]{2}) \\| global batch size: +8 \\|( lm loss: %s \\|)? loss scale: [0-9.]+ \\|( grad norm: [0-9.]+ \\|)? actual seqlen: +64 \\| number of skipped iterations: +[0-9]+ \\| number of nan iterations: +[0-9]+ \\| samples per second: [0-9.]+ \\| TFLOPs: [0-9.]+ \\|$' \
    "$1" "$2" "$(($1 * 8))" "$(($1 * 512))" "$e"
}

# check_trains NAME TOTAL LR: what a recipe that trains must show
check_trains() {
  local name=$1 total=$2 peak=$3
  [ $rc -eq 0 ] && ok "$name: exit 0" || fail "$name: exit $rc: $(grep -m3 'error' "$log")"
  grep -qE "$(mdsline 5 "$total")" "$log" && grep -qE "$(mdsline 10 "$total")" "$log" &&
    [ "$(grep -c '^ iteration ' "$log")" -eq 2 ] &&
    ok "$name: Megatron-DeepSpeed's log lines at 5 and 10, --train-tokens 5120 stops at 10" ||
    fail "$name: log lines: $(grep ' iteration ' "$log")"
  # The token schedule: past the 1024-token warm-up, cosine over 5120 tokens
  # from the peak down towards --min-lr 1e-6: below the peak, and lower at 10.
  local l5 l10
  l5=$(grep -E "^ iteration +5/" "$log" | sed -nE 's/.*learning rate: ([0-9.E+-]+) .*/\1/p')
  l10=$(grep -E "^ iteration +10/" "$log" | sed -nE 's/.*learning rate: ([0-9.E+-]+) .*/\1/p')
  awk -v a="${l5:-0}" -v b="${l10:-0}" -v p="$peak" 'BEGIN { exit !(a > 0 && a < p && b < a && b >= 1e-6) }' &&
    ok "$name: learning rate by tokens: $l5 at 5, $l10 at 10 (peak $peak)" ||
    fail "$name: learning rate '$l5' then '$l10' (peak $peak)"
  for it in 5 10; do
    grep -qE "^ validation loss at iteration $it \| lm loss value: $e \| lm loss PPL: $e \| \$" "$log" ||
      fail "$name: no validation at iteration $it: $(grep validation "$log")"
  done
  grep -qE "^ validation loss at iteration 10 on validation set \| lm loss value: $e" "$log" &&
    grep -qE "^ validation loss at iteration 10 on test set \| lm loss value: $e" "$log" &&
    ok "$name: validation at 5, 10 and on the validation and test sets" ||
    fail "$name: end-of-training evaluation: $(grep validation "$log")"
  local c=$d/output/$name/model
  [ "$(cat "$c/latest_checkpointed_iteration.txt" 2>/dev/null)" = 10 ] &&
    [ -n "$(ls "$c"/iter_0000010/mp_rank_*/model.safetensors 2>/dev/null)" ] &&
    ok "$name: checkpoint at iteration 10 in output/$name/model" ||
    fail "$name: checkpoint: $(find "$d/output" -maxdepth 4 | head)"
  ls "$d"/output/"$name"/tensorboard/events.out.tfevents.* >/dev/null 2>&1 &&
    ok "$name: TensorBoard events in output/$name/tensorboard" ||
    fail "$name: no TensorBoard event file: $(find "$d/output" -maxdepth 3 | head)"
  grep -q '^trident: error' "$log" && fail "$name: errors: $(grep error "$log")"
}

run gpt-125m gpt-125m-ds-config.json
check_trains gpt-125m 320 6.0E-04

run gpt-1-3b-4xdp gpt-1-3b-ds-config.json
check_trains gpt-1-3b 3200 2.0E-04
grep -q ' > ZeRO stage 2: ' "$log" && ok "gpt-1-3b-4xdp: $(grep -o ' > ZeRO stage 2:.*' "$log" | head -1 | sed 's/^ > //')" ||
  fail "gpt-1-3b-4xdp: no ZeRO stage 2 line: $(grep '^ > ' "$log")"
grep -q 'note: --zero-stage' "$log" && fail "gpt-1-3b-4xdp: a --zero-stage note where flag and file agree"

run gpt-13b-4xdp-4xpp-4xtp gpt-13b-ds-config.json
check_trains gpt-13b 32000 1.0E-04
grep -q 'tensor-parallel 2 x pipeline-parallel 2 x data-parallel 1' "$log" &&
  ok "gpt-13b-4xdp-4xpp-4xtp: TP 2 x PP 2 on 4 ranks" ||
  fail "gpt-13b-4xdp-4xpp-4xtp: layout: $(grep 'layout' "$log")"

# The 1.3B pipeline recipe as published pairs PP with the stage-2 config.
run gpt-1-3b-4xdp-4xpp gpt-1-3b-ds-config.json
errs=$(grep '^trident: error: ' "$log" | grep -v 'failed (exit code' | sort -u)
[ $rc -eq 1 ] && [ "$(echo "$errs" | grep -c .)" -eq 1 ] && ! grep -q '^ iteration ' "$log" &&
  echo "$errs" | grep -qi 'pipeline' && echo "$errs" | grep -q 'stage 2' &&
  grep -q 'note: --zero-stage 1 vs zero_optimization.stage 2: ZeRO stage 2 runs' "$log" &&
  ok "gpt-1-3b-4xdp-4xpp: exit 1, ZeRO-2 with pipeline parallelism refused as DeepSpeed refuses it: $errs" ||
  fail "gpt-1-3b-4xdp-4xpp: exit $rc: $errs"

[ $failed -eq 0 ] && echo "cli_t9k_recipes: all passed"
exit $failed
