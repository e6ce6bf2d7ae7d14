#!/usr/bin/env bash
# The published example scripts of Megatron-DeepSpeed and Megatron-LM, with their
# flags as published (tests/scripts/*.sh: each header names its source commit
# and every line changed, only sizes, paths and the launcher), run end to end at
# tiny sizes on a dataset preprocessed here from data/corpus/kjv.jsonl:
#  - Megatron-DeepSpeed rebase/ds_pretrain_gpt_125M.sh (TP 2 x PP 2, ZeRO-1, fp16,
#    DeepSpeed config from its template): exit 0, Megatron-DeepSpeed's log lines,
#    validation every eval_interval and at the end, its checkpoint directory.
#  - Megatron-DeepSpeed MoE/ds_pretrain_gpt_125M_dense_cl.sh: seqlen curriculum
#    learning (ds_config curriculum_learning) on 2 ranks with fp16 and full
#    recomputation: 60 iterations on the curriculum's 8-token samples, the
#    curriculum fields in Megatron-DeepSpeed's log line, validation.
#  - Megatron-LM gpt3/train_gpt3_175b_distributed.sh: --rampup-batch-size with
#    --train-iters, which Megatron-LM's own validate_args refuses ("expected no
#    batch-size rampup for iteration-based training"); trident refuses it too.
#  - Megatron-DeepSpeed rebase/ds_pretrain_gpt_1.3B.sh at ZeRO stage 2 on 2 ranks
#    (DP 2, fp16, the same template): exit 0, the ZeRO stage 2 start-up lines,
#    the lm loss lower at the last log line than at the first, its checkpoint.
#  - Megatron-DeepSpeed universal_checkpointing/run_bf16.sh (TP 2 x PP 2 x DP 2,
#    bf16, ZeRO-1) with --loss-scale and --clip-grad that DeepSpeed does not read:
#    trains to --exit-interval, noting the two flags, and saves.
# Arguments: the trident binary and the source directory.
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok
command -v mpirun >/dev/null || { echo "FAIL: mpirun not found"; exit 1; }
export TRIDENT=$bin OMP_NUM_THREADS=1
scripts=$src/tests/scripts

# The tiny dataset (all 1107 chapters: --split 949,50,1 needs a test document).
"$bin" preprocess --input "$src/data/corpus/kjv.jsonl" --output-prefix "$tmp/kjv" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$src/data/gpt2/vocab.json" \
  --merge-file "$src/data/gpt2/merges.txt" --append-eod --workers 2 >"$tmp/pre.log" 2>&1 ||
  { fail "preprocess: $(tail -3 "$tmp/pre.log")"; exit 1; }

# stage DIR TEMPLATE DATA_NAME: a run directory holding what the script expects
# beside it (dataset under its published name, GPT-2 files, its ds_config template)
stage() {
  mkdir -p "$1"
  local x
  for x in bin idx; do ln -s "$tmp/kjv_text_document.$x" "$1/$3.$x"; done
  cp "$src/data/gpt2/vocab.json" "$1/gpt2-vocab.json"
  cp "$src/data/gpt2/merges.txt" "$1/gpt2-merges.txt"
  [ -z "$2" ] || cp "$scripts/$2" "$1/ds_config_gpt_TEMPLATE.json"
}
date='^ \[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\]'
e='[0-9]\.[0-9]{6}E[-+][0-9]{2}'
# logline IT OF SAMPLES GBS: Megatron's training log line for iteration IT of OF
logline() {
  printf '%s iteration +%s/ +%s \\| consumed samples: +%s \\| elapsed time per iteration \\(ms\\): [0-9.]+ \\| learning rate: %s \\| global batch size: +%s \\|( lm loss: %s \\|)? loss scale: [0-9.]+ \\|( grad norm: [0-9.]+ \\|)? number of skipped iterations: +[0-9]+ \\| number of nan iterations: +[0-9]+ \\|$' \
    "$date" "$1" "$2" "$3" "$e" "$4" "$e"
}
# mdsline IT OF SAMPLES GBS SEQ: Megatron-DeepSpeed's line (run with --deepspeed)
mdsline() {
  printf '^ iteration +%s/ +%s \\| consumed samples: +%s \\| consumed tokens: +%s \\| elapsed time per iteration \\(ms\\): [0-9.]+ \\| learning rate: [0-9]\\.[0-9]{3}E[-+][0-9]{2} \\| global batch size: +%s \\|( lm loss: %s \\|)? loss scale: [0-9.]+ \\|( grad norm: [0-9.]+ \\|)? actual seqlen: +%s \\| number of skipped iterations: +[0-9]+ \\| number of nan iterations: +[0-9]+ \\| samples per second: [0-9.]+ \\| TFLOPs: [0-9.]+ \\|$' \
    "$1" "$2" "$3" "$(($3 * $5))" "$4" "$e" "$5"
}

# 1. Megatron-DeepSpeed rebase/ds_pretrain_gpt_125M.sh on 4 ranks (TP 2 x PP 2).
d=$tmp/ds125m
stage "$d" rebase_ds_config_gpt_TEMPLATE.json BookCorpusDataset_text_document
(cd "$d" && timeout -k 5 120 bash "$scripts/ds_pretrain_gpt_125M.sh" >"$d/script.out" 2>&1)
rc=$?
log=$(ls "$d"/output/log/*.log 2>/dev/null | head -1)
[ $rc -eq 0 ] && [ -n "$log" ] && ok "ds_pretrain_gpt_125M.sh: exit 0" ||
  fail "ds_pretrain_gpt_125M.sh: exit $rc: $(tail -5 "${log:-$d/script.out}")"
log=${log:-/dev/null}
# --train-tokens 10240 = 20 iterations of 8 x 64 tokens; --train-samples 320 sets
# the 40 in the line (Megatron-DeepSpeed: train_iters from train_samples).
grep -qE "$(mdsline 10 40 80 8 64)" "$log" && grep -qE "$(mdsline 20 40 160 8 64)" "$log" &&
  [ "$(grep -c '^ iteration ' "$log")" -eq 2 ] &&
  ok "ds_pretrain_gpt_125M.sh: Megatron-DeepSpeed's log lines at iterations 10 and 20 (--train-tokens stops at 20)" ||
  fail "ds_pretrain_gpt_125M.sh: log lines: $(grep ' iteration ' "$log")"
for it in 10 20; do
  grep -qE "^ validation loss at iteration $it \| lm loss value: $e \| lm loss PPL: $e \| \$" "$log" ||
    fail "ds_pretrain_gpt_125M.sh: no validation at iteration $it: $(grep validation "$log")"
done
grep -qE "^ validation loss at iteration 20 on validation set \| lm loss value: $e" "$log" &&
  grep -qE "^ validation loss at iteration 20 on test set \| lm loss value: $e" "$log" &&
  ok "ds_pretrain_gpt_125M.sh: validation at 10, 20 and on the validation and test sets at the end" ||
  fail "ds_pretrain_gpt_125M.sh: end-of-training evaluation: $(grep validation "$log")"
c=$(ls -d "$d"/output/checkpoint/*/ 2>/dev/null | head -1)
[ -n "$c" ] && [ "$(cat "$c/latest_checkpointed_iteration.txt" 2>/dev/null)" = 20 ] &&
  [ -f "$c/iter_0000020/mp_rank_01_001/model.safetensors" ] &&
  ok "ds_pretrain_gpt_125M.sh: checkpoint at iteration 20 in output/checkpoint/<jobname>/ (4 model-parallel ranks)" ||
  fail "ds_pretrain_gpt_125M.sh: checkpoint: $(find "$d/output/checkpoint" | head)"
ls "$d"/output/tensorboard/*/events.out.tfevents.* >/dev/null 2>&1 &&
  ok "ds_pretrain_gpt_125M.sh: TensorBoard events under output/tensorboard/" ||
  fail "ds_pretrain_gpt_125M.sh: no TensorBoard event file"
# --log-optimizer-states-to-tensorboard: Megatron-DeepSpeed's 12 optimizer/ tags,
# each at every iteration and "vs tokens" (substring counts: 20 + 20).
f=$(ls "$d"/output/tensorboard/*/events.out.tfevents.* 2>/dev/null | head -1)
got=""
for k in variance_l2 variance_sqrt_l2 momentum_l2 weight_l2 variance_l1 variance_sqrt_l1 momentum_l1 \
  weight_l1 variance_abs_max variance_sqrt_abs_max momentum_abs_max weight_abs_max; do
  got="$got $(grep -a -o -- "optimizer/$k vs tokens" "${f:-/dev/null}" | wc -l)/$(grep -a -o -- "optimizer/$k" "${f:-/dev/null}" | wc -l)"
done
[ "$(echo $got | tr ' ' '\n' | sort -u)" = "20/40" ] &&
  ok "ds_pretrain_gpt_125M.sh: the 12 optimizer/ tags at every iteration and vs tokens" ||
  fail "ds_pretrain_gpt_125M.sh: optimizer/ tag counts:$got"
grep -q '^trident: error' "$log" && fail "ds_pretrain_gpt_125M.sh: errors: $(grep error "$log")"

# 2. Megatron-DeepSpeed MoE/ds_pretrain_gpt_125M_dense_cl.sh: seqlen curriculum
# learning on 2 ranks, fp16, full recomputation. The script ends with `set +x`, so
# its own exit status is always 0; the run's log says what happened. Its
# curriculum (fixed_linear from 8 to 64 tokens over 60e9 / (8 x 36) steps) stays
# at 8 tokens for the 60 iterations --train-iters allows (3 x --train-tokens
# worth at full length): 8 x 8 = 64 tokens an iteration.
d=$tmp/dscl
stage "$d" moe_ds_config_gpt_TEMPLATE.json pile_text_document
(cd "$d" && timeout -k 5 120 bash "$scripts/ds_pretrain_gpt_125M_dense_cl.sh" >"$d/script.out" 2>&1)
log=$(ls "$d"/log/*.log 2>/dev/null | head -1)
log=${log:-/dev/null}
errs=$(grep '^trident: error: ' "$log" | sort -u)
cl_line() {
  printf '^ iteration +%s/ +60 \\| consumed samples: +%s \\| consumed tokens: +%s \\| .* curriculum seqlen: +8 \\| actual seqlen: +8 \\| number of skipped' \
    "$1" "$(($1 * 8))" "$(($1 * 64))"
}
[ -z "$errs" ] && grep -qE "$(cl_line 10)" "$log" && grep -qE "$(cl_line 60)" "$log" &&
  [ "$(grep -c '^ iteration ' "$log")" -eq 6 ] &&
  grep -q ' > curriculum learning (DeepSpeed.s, seqlen, fixed_linear): tokens per sample from 8 to 64' "$log" &&
  ok "ds_pretrain_gpt_125M_dense_cl.sh: trains 60 iterations on 8-token curriculum samples ($(grep -oE 'consumed tokens: +[0-9]+' "$log" | tail -1))" ||
  fail "ds_pretrain_gpt_125M_dense_cl.sh: errors: $errs; $(grep ' iteration ' "$log" | head -2)"
[ "$(grep -c 'validation loss at iteration' "$log")" -ge 6 ] &&
  ok "ds_pretrain_gpt_125M_dense_cl.sh: validation every 10 iterations (on whole 64-token samples)" ||
  fail "ds_pretrain_gpt_125M_dense_cl.sh: validation lines: $(grep -c 'validation loss' "$log")"

# 3. Megatron-LM gpt3/train_gpt3_175b_distributed.sh on 2 ranks (TP 2).
d=$tmp/gpt175b
stage "$d" "" text_document
(cd "$d" && timeout -k 5 120 bash "$scripts/train_gpt3_175b_distributed.sh" ckpt tb gpt2-vocab.json \
  gpt2-merges.txt text_document >"$d/out" 2>&1)
rc=$?
errs=$(grep '^trident: error: ' "$d/out" | grep -v 'failed (exit code' | sort -u)
[ $rc -eq 1 ] && [ "$(echo "$errs" | grep -c .)" -eq 1 ] &&
  echo "$errs" | grep -q -- '--rampup-batch-size needs --train-samples' && ! grep -q ' iteration ' "$d/out" &&
  ok "train_gpt3_175b_distributed.sh: exit 1, --rampup-batch-size with --train-iters refused as in Megatron-LM" ||
  fail "train_gpt3_175b_distributed.sh: exit $rc: $errs"

# 4. Megatron-DeepSpeed rebase/ds_pretrain_gpt_1.3B.sh on 2 ranks (DP 2, ZeRO-2).
d=$tmp/ds13b
stage "$d" rebase_ds_config_gpt_TEMPLATE.json pile_text_document
(cd "$d" && timeout -k 5 120 bash "$scripts/ds_pretrain_gpt_1.3B.sh" >"$d/script.out" 2>&1)
rc=$?
log=$(ls "$d"/output/log/*.log 2>/dev/null | head -1)
[ $rc -eq 0 ] && [ -n "$log" ] && ok "ds_pretrain_gpt_1.3B.sh (ZeRO-2): exit 0" ||
  fail "ds_pretrain_gpt_1.3B.sh: exit $rc: $(tail -5 "${log:-$d/script.out}")"
log=${log:-/dev/null}
# (not anchored: another rank's stderr may share the line's start in the log)
grep -q ' > ZeRO stage 2: Adam state and gradients sharded over 2 data-parallel ranks, ' "$log" &&
  grep -q ' > data-parallel gradient reduce-scatter: ' "$log" &&
  ok "ds_pretrain_gpt_1.3B.sh: $(grep -o ' > ZeRO stage 2:.*' "$log" | sed 's/^ > //')" ||
  fail "ds_pretrain_gpt_1.3B.sh: no ZeRO stage 2 summary: $(grep '^ > ' "$log")"
grep -qE "$(mdsline 10 40 80 8 64)" "$log" && grep -qE "$(mdsline 20 40 160 8 64)" "$log" &&
  [ "$(grep -c '^ iteration ' "$log")" -eq 2 ] &&
  ok "ds_pretrain_gpt_1.3B.sh: Megatron-DeepSpeed's log lines at iterations 10 and 20" ||
  fail "ds_pretrain_gpt_1.3B.sh: log lines: $(grep ' iteration ' "$log")"
losses=$(sed -nE 's/^ iteration .*\| lm loss: ([0-9.E+-]+) \|.*/\1/p' "$log" | tr '\n' ' ')
echo "$losses" | awk '{ exit !(NF >= 2 && $NF + 0 < $1 + 0) }' &&
  ok "ds_pretrain_gpt_1.3B.sh: lm loss falls ($(echo $losses | sed 's/ / -> /g'))" ||
  fail "ds_pretrain_gpt_1.3B.sh: lm loss does not fall: '$losses'"
c=$(ls -d "$d"/output/checkpoint/*/ 2>/dev/null | head -1)
[ -n "$c" ] && [ "$(cat "$c/latest_checkpointed_iteration.txt" 2>/dev/null)" = 20 ] &&
  [ -f "$c/iter_0000020/mp_rank_00/model.safetensors" ] &&
  [ -f "$c/iter_0000020/mp_rank_00/optim_dp000.safetensors" ] &&
  ok "ds_pretrain_gpt_1.3B.sh: checkpoint at iteration 20 (the ZeRO-2 shards gathered whole)" ||
  fail "ds_pretrain_gpt_1.3B.sh: checkpoint: $(find "$d/output/checkpoint" | head)"
grep -q '^trident: error' "$log" && fail "ds_pretrain_gpt_1.3B.sh: errors: $(grep error "$log")"

# 5. Megatron-DeepSpeed universal_checkpointing/run_bf16.sh on 8 ranks (TP 2 x PP 2
# x DP 2, bf16, ZeRO-1): it passes --loss-scale 12 and --clip-grad 1.0 beside a
# bf16 config without gradient_clipping, which DeepSpeed's engine does not read.
# It writes ds_config.json beside itself, so it runs from a copy; its `set +x`
# makes its exit status 0 whatever happened, so the output says.
d=$tmp/uc
stage "$d" "" meg-gpt2_text_document
cp "$scripts/uc_run_bf16.sh" "$d/"
(cd "$d" && HL_DATA_DIR_ROOT=$d timeout -k 5 120 bash "$d/uc_run_bf16.sh" >"$d/out" 2>&1)
errs=$(grep '^trident: error: ' "$d/out" | sort -u)
c=$d/z1_uni_ckpt/checkpoints/gpt2/z1/bf16/tp2_pp2_dp2_sp1_toy
[ -z "$errs" ] && [ "$(grep -cE '^ iteration +[1-4]/ +100000 \| consumed samples: +[0-9]+ \| consumed tokens: ' "$d/out")" -eq 4 ] &&
  [ "$(cat "$c/latest_checkpointed_iteration.txt" 2>/dev/null)" = 4 ] &&
  [ -n "$(ls "$c"/iter_0000004/mp_rank_01_001/model.safetensors 2>/dev/null)" ] &&
  ok "uc_run_bf16.sh: 4 iterations on TP 2 x PP 2 x DP 2 and the checkpoint at --exit-interval 4" ||
  fail "uc_run_bf16.sh: errors: $errs; $(grep ' iteration ' "$d/out" | head -2); $(find "$d/z1_uni_ckpt" -maxdepth 6 | head -3)"
grep -q 'note: --loss-scale 12 is not read under DeepSpeed: bf16.enabled true' "$d/out" &&
  grep -q "note: --clip-grad 1 is not read under DeepSpeed: gradient_clipping (not in the file: DeepSpeed's default 0" "$d/out" &&
  ok "uc_run_bf16.sh: --loss-scale and --clip-grad noted as not read, the config's values run" ||
  fail "uc_run_bf16.sh: notes: $(grep 'note: --' "$d/out" | sort -u)"

[ $failed -eq 0 ] && echo "cli_example_scripts: all passed"
exit $failed
