#!/usr/bin/env bash
# trident convert: a trained checkpoint exported to Hugging Face, imported back and
# exported again gives the same files; trident train loads the import (parameters
# only, a fresh optimizer) and refuses flags of another model; every bad flag and
# directory is refused with a message and exit 1.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok

# expect_error WANT ARGS...: trident convert ARGS exits 1 with WANT in its error.
expect_error() {
  local want=$1
  shift
  "$bin" convert "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$want" "$tmp/err"; then
    ok "refused: $(head -c 160 "$tmp/err")"
  else
    fail "convert $*: rc $rc, want '$want', got: $(cat "$tmp/err")"
  fi
}

"$bin" convert --help >"$tmp/out" 2>&1 && grep -q "usage: trident convert --from hf --to trident" "$tmp/out" &&
  ok "--help" || fail "--help: $(cat "$tmp/out")"

base=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
  --mock-data --tokenizer-type NullTokenizer --vocab-size 99 --log-interval 1
  --eval-interval 1000 --eval-iters 1)
model=("${base[@]}" --openai-gelu)
"$bin" train "${model[@]}" --train-iters 4 --save "$tmp/ck" --save-interval 4 >"$tmp/train.log" 2>&1 ||
  fail "training: $(tail -3 "$tmp/train.log")"

# ---- round trip
"$bin" convert --from trident --to hf --input "$tmp/ck" --output "$tmp/hf" >"$tmp/out" 2>&1 ||
  fail "export: $(cat "$tmp/out")"
grep -q '"activation_function":.*"gelu_new"' "$tmp/hf/config.json" &&
  grep -q '"vocab_size":.*100' "$tmp/hf/config.json" &&
  ok "export: config.json with gelu_new and the unpadded vocabulary (100)" ||
  fail "config.json: $(cat "$tmp/hf/config.json")"
"$bin" convert --from hf --to trident --input "$tmp/hf" --output "$tmp/ck2" >"$tmp/out" 2>&1 ||
  fail "import: $(cat "$tmp/out")"
grep -q -- "--num-layers 2 --hidden-size 32 --num-attention-heads 4" "$tmp/out" &&
  ok "import prints the model flags" || fail "import output: $(cat "$tmp/out")"
[ "$(cat "$tmp/ck2/latest_checkpointed_iteration.txt")" = 0 ] &&
  [ ! -e "$tmp/ck2/iter_0000000/mp_rank_00/optim_dp000.safetensors" ] &&
  ok "import: iteration 0, no optimizer state" || fail "import layout: $(ls -R "$tmp/ck2")"
"$bin" convert --from trident --to hf --input "$tmp/ck2" --output "$tmp/hf2" >/dev/null 2>&1
cmp -s "$tmp/hf/model.safetensors" "$tmp/hf2/model.safetensors" &&
  cmp -s "$tmp/hf/config.json" "$tmp/hf2/config.json" &&
  ok "trident -> hf -> trident -> hf: identical files" || fail "round trip files differ"

# ---- training from the import
"$bin" train "${model[@]}" --train-iters 2 --load "$tmp/ck2" >"$tmp/load.log" 2>&1 &&
  grep -q "has no optimizer state" "$tmp/load.log" &&
  ok "train --load of an import: fresh optimizer" || fail "load: $(tail -3 "$tmp/load.log")"
"$bin" train "${base[@]}" --num-attention-heads 8 --train-iters 2 --load "$tmp/ck2" --finetune \
  >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q -- "--num-attention-heads: 4 in the checkpoint, 8 in this run" "$tmp/err" &&
  grep -q -- "--openai-gelu: on in the checkpoint, off in this run" "$tmp/err" &&
  ok "other model flags refused: $(head -c 160 "$tmp/err")" || fail "mismatch: $(cat "$tmp/err")"

# ---- refusals
expect_error "unknown argument '--bogus'" --bogus
expect_error "needs --from, --to, --input and --output" --from hf --to trident --input "$tmp/hf"
expect_error "goes from hf to trident or from trident to hf" --from hf --to hf --input a --output b
expect_error "--input needs a value" --from hf --to trident --output b --input
expect_error "--vocab-size is for --to hf" --from hf --to trident --input a --output b --vocab-size 5
expect_error "--make-vocab-size-divisible-by is for --to trident" --from trident --to hf --input a \
  --output b --make-vocab-size-divisible-by 8
expect_error "--make-vocab-size-divisible-by expects a positive integer, got '0'" --from hf \
  --to trident --input a --output b --make-vocab-size-divisible-by 0
expect_error "not a directory" --from hf --to trident --input "$tmp/none" --output "$tmp/x"
expect_error "no config.json" --from hf --to trident --input "$tmp/ck" --output "$tmp/x"
expect_error "not a trident checkpoint directory" --from trident --to hf --input "$tmp/hf" --output "$tmp/x"
expect_error "already holds a checkpoint" --from hf --to trident --input "$tmp/hf" --output "$tmp/ck2"
expect_error "already holds a model" --from trident --to hf --input "$tmp/ck" --output "$tmp/hf"
expect_error "--vocab-size 500 is larger than the checkpoint's vocabulary (128 rows)" --from trident \
  --to hf --input "$tmp/ck" --output "$tmp/hf3" --vocab-size 500
mkdir -p "$tmp/badhf" && cp "$tmp/hf/model.safetensors" "$tmp/badhf/" &&
  sed 's/"gpt2"/"llama"/' "$tmp/hf/config.json" >"$tmp/badhf/config.json"
expect_error '"model_type" is "llama", not "gpt2"' --from hf --to trident --input "$tmp/badhf" \
  --output "$tmp/x"
head -c 100 "$tmp/hf/model.safetensors" >"$tmp/badhf/model.safetensors" && cp "$tmp/hf/config.json" "$tmp/badhf/"
expect_error "truncated or not safetensors" --from hf --to trident --input "$tmp/badhf" --output "$tmp/x"

[ $failed -eq 0 ] && echo "cli_convert: all passed"
exit $failed
