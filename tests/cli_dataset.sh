#!/usr/bin/env bash
# trident dataset: with the training flags for data only, it prints the samples that
# Megatron's GPTDataset gives for the shared reference (train with 50 samples asked,
# the validation split, and three multi-epoch variants), the same whether the train
# samples are asked by --train-samples or by --train-iters x --global-batch-size;
# --summary gives the counts; a split that cannot be built is an error.
# Usage: cli_dataset.sh TRIDENT_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
if ! "$bin" dataset --help >/dev/null 2>&1; then
  echo "SKIP: 'trident dataset' is not in this binary"
  exit 0
fi
ref="$src/tests/data/megatron_ref"
if [ ! -f "$ref/ref_gpt_samples.json" ]; then
  echo "FAIL: fixture $ref/ref_gpt_samples.json is missing"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The index caches go to $tmp, never beside the shared data.
ds=("$bin" dataset --data-path "$ref/ref_text_document" --split 949,50,1 --seq-length 32
  --seed 1234 --data-cache-path "$tmp/cache")
failed=0

report() { # report DESCRIPTION STATUS
  if [ "$2" -eq 0 ]; then echo "  ok    $1"; else echo "  FAIL  $1"; failed=1; fi
}

# expect_error DESCRIPTION PATTERN COMMAND...: exit code 1, PATTERN on stderr.
expect_error() {
  local what=$1 pattern=$2
  shift 2
  "$@" >/dev/null 2>"$tmp/err"
  local rc=$?
  grep -q -- "$pattern" "$tmp/err"
  local found=$?
  report "$what: exit $rc, $(head -c 200 "$tmp/err")" $((rc != 1 || found != 0))
}

# The "text" arrays of one config of ref_gpt_samples.json (json.dump with indent=1:
# configs at two spaces, one number per line), one "[a, b, ...]" line per sample.
ref_samples() {
  awk -v want="$1" '
    /^  "[A-Za-z0-9_]+": \{$/ { cfg = $1; gsub(/[":]/, "", cfg) }
    /"text": \[/ { inside = cfg == want; row = ""; next }
    inside && /\]/ { print "[" row "]"; inside = 0; next }
    inside { gsub(/[ ,]/, ""); row = row (row == "" ? "" : ", ") $0 }
  ' "$ref/ref_gpt_samples.json"
}

# same_samples DESCRIPTION CONFIG COUNT FLAGS...: --first COUNT equals the config's samples.
same_samples() {
  local what=$1 config=$2 count=$3
  shift 3
  ref_samples "$config" >"$tmp/want"
  "${ds[@]}" "$@" --first "$count" >"$tmp/got" 2>"$tmp/err"
  local rc=$?
  [ "$(wc -l <"$tmp/want")" -eq "$count" ] && [ $rc -eq 0 ] && cmp -s "$tmp/got" "$tmp/want"
  local st=$?
  report "$what: $count samples equal Megatron's ($config)" $st
  [ $st -eq 0 ] || head -c 500 "$tmp/err"
}

same_samples "train, --train-samples 50" train_n50 50 --train-samples 50 --eval-iters 0
same_samples "train, --train-iters 25 --global-batch-size 2 (cache reused)" train_n50 50 \
  --train-iters 25 --global-batch-size 2 --micro-batch-size 1 --eval-iters 0
grep -q "Load the GPTDataset train indices" "$tmp/err"
report "the second run loads the index cache" $?
same_samples "valid (eval-iters 10: one epoch)" valid_none 12 --which valid --train-samples 50 \
  --eval-iters 10
same_samples "2 epochs, the last shuffled apart" train_2ep_separate 50 --train-samples 793 --eval-iters 0
same_samples "2 epochs shuffled together" train_2ep_joint 50 --train-samples 1561 --eval-iters 0
same_samples "3 epochs" train_3ep_separate 50 --train-samples 1573 --eval-iters 0

# Model flags of a launch script are accepted and change nothing.
"${ds[@]}" --train-samples 50 --eval-iters 0 --num-layers 12 --hidden-size 768 \
  --num-attention-heads 12 --max-position-embeddings 1024 --lr 6e-4 --bf16 \
  --tensor-model-parallel-size 2 --first 50 >"$tmp/got" 2>/dev/null
ref_samples train_n50 | cmp -s - "$tmp/got"
report "model and parallel flags change nothing" $?

"${ds[@]}" --train-samples 50 --eval-iters 10 --summary >"$tmp/summary" 2>/dev/null
report "--summary runs" $?
tr -d ' \t\n' <"$tmp/summary" >"$tmp/flat"
grep -q '"documents":312,"sequences":310,"tokens":25452' "$tmp/flat" &&
  grep -q '"train":{"samples_asked":50,"samples":783,' "$tmp/flat" &&
  grep -q '"sequences":\[0,294\],"samples_asked":50,"tokens_per_epoch":25058,"epochs":1,' "$tmp/flat" &&
  grep -q '"valid":{"samples_asked":10,"samples":12,' "$tmp/flat" &&
  grep -q '"test":{"samples_asked":10,"error":"[^"]*coversnosequences' "$tmp/flat"
report "--summary: 312 documents, 310 sequences, 25452 tokens; train 783 samples in 1 epoch; valid 12; test cannot be built" $?

expect_error "--which test over an empty test split" "covers no sequences" \
  "${ds[@]}" --train-samples 50 --eval-iters 10 --which test --first 1
expect_error "--which valid with --eval-iters 0" "no valid samples are asked" \
  "${ds[@]}" --train-samples 50 --eval-iters 0 --which valid --first 1
expect_error "no --seq-length" "--seq-length is required" \
  "$bin" dataset --data-path "$ref/ref_text_document" --train-samples 50 --first 1
expect_error "--mock-data" "no files to inspect" \
  "$bin" dataset --mock-data --seq-length 32 --train-samples 50
expect_error "--which other" "--which expects train, valid or test" "${ds[@]}" --which other

[ $failed -eq 0 ] && echo "all passed"
exit $failed
