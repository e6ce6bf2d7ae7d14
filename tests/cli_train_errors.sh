#!/usr/bin/env bash
# Bad files given to `trident train` and `trident convert` are refused with
# "trident: error: ..." naming the file and what is wrong, and exit code 1 (no
# crash, no hang): datasets (--data-path), tokenizer files (--vocab-file,
# --merge-file), checkpoints (--load: other model, damaged latest file, missing
# iteration, metadata or optimizer state) and Hugging Face directories (missing
# config.json, a model.safetensors missing a tensor). The flag-level refusals are
# in cli_train_flags.sh; truncated checkpoints in cli_train_resume.sh.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'chmod -R u+rwX "$tmp"; rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok    $*"; }
export OMP_NUM_THREADS=1

# expect_error WANT COMMAND ARGS...: `trident COMMAND ARGS` exits 1 with
# "trident: error: " and WANT on stderr.
expect_error() {
  local want=$1
  shift
  timeout 120 "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq 1 ] && grep -q "^trident: error: " "$tmp/err" && grep -qF -- "$want" "$tmp/err"; then
    ok "refused: $(grep '^trident: error: ' "$tmp/err" | head -c 220)"
  else
    fail "trident $*: rc $rc, want '$want', got: $(grep -v 'info:' "$tmp/err" | head -5)"
  fi
}

v="$src/data/gpt2/vocab.json"
m="$src/data/gpt2/merges.txt"
head -120 "$src/data/corpus/kjv.jsonl" >"$tmp/kjv.jsonl"
"$bin" preprocess --input "$tmp/kjv.jsonl" --output-prefix "$tmp/kjv" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$v" --merge-file "$m" --append-eod --workers 1 >"$tmp/pre.log" 2>&1 ||
  fail "preprocess: $(tail -3 "$tmp/pre.log")"
good="$tmp/kjv_text_document"

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
  --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 2
  --log-interval 1 --eval-iters 0 --split 98,2,0 --data-cache-path "$tmp/cache")
tok=(--vocab-file "$v" --merge-file "$m")

# The run these refusals are variations of works.
timeout 120 "$bin" train "${model[@]}" "${tok[@]}" --data-path "$good" >"$tmp/out" 2>"$tmp/err" &&
  grep -q "] iteration        2/       2 |" "$tmp/out" && ok "the good run works" ||
  fail "the good run: $(tail -3 "$tmp/err")"

# ---- --data-path: missing, half missing, damaged, not a file, unreadable
d="$tmp/data"
mkdir -p "$d"
expect_error "cannot open '$d/none.idx': No such file or directory" train "${model[@]}" "${tok[@]}" \
  --data-path "$d/none"
cp "$good.idx" "$d/nobin.idx"
expect_error "cannot open '$d/nobin.bin': No such file or directory" train "${model[@]}" "${tok[@]}" \
  --data-path "$d/nobin"
echo garbage >"$d/garbage.idx" && cp "$good.bin" "$d/garbage.bin"
expect_error "'$d/garbage.idx' is truncated" train "${model[@]}" "${tok[@]}" --data-path "$d/garbage"
head -c 100 "$good.idx" >"$d/cut.idx" && cp "$good.bin" "$d/cut.bin"
expect_error "'$d/cut.idx' is truncated or corrupt" train "${model[@]}" "${tok[@]}" --data-path "$d/cut"
cp "$good.idx" "$d/short.idx" && head -c 1000 "$good.bin" >"$d/short.bin"
expect_error "'$d/short.idx' does not match '$d/short.bin'" train "${model[@]}" "${tok[@]}" \
  --data-path "$d/short"
mkdir -p "$d/dir.idx" && cp "$good.bin" "$d/dir.bin"
expect_error "'$d/dir.idx' is not a regular file" train "${model[@]}" "${tok[@]}" --data-path "$d/dir"
expect_error "cannot open '$d/none.idx'" train "${model[@]}" "${tok[@]}" --data-path 0.5 "$good" 0.5 "$d/none"
if [ "$(id -u)" -ne 0 ]; then
  cp "$good.idx" "$d/noperm.idx" && cp "$good.bin" "$d/noperm.bin" && chmod 000 "$d/noperm.idx"
  expect_error "cannot open '$d/noperm.idx': Permission denied" train "${model[@]}" "${tok[@]}" \
    --data-path "$d/noperm"
else
  echo "skip  unreadable (mode 000) --data-path: root reads it anyway"
fi

# ---- --vocab-file / --merge-file: not given, missing, not a vocabulary
expect_error "--merge-file without --vocab-file" train "${model[@]}" --merge-file "$m" --data-path "$good"
expect_error "--vocab-file without --merge-file" train "${model[@]}" --vocab-file "$v" --data-path "$good"
expect_error "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file" train "${model[@]}" \
  --tokenizer-type GPT2BPETokenizer --merge-file "$m" --data-path "$good"
expect_error "cannot open '$tmp/none.json': No such file or directory" train "${model[@]}" \
  --vocab-file "$tmp/none.json" --merge-file "$m" --data-path "$good"
expect_error "cannot open '$tmp/none.txt': No such file or directory" train "${model[@]}" \
  --vocab-file "$v" --merge-file "$tmp/none.txt" --data-path "$good"
expect_error "$m: invalid JSON" train "${model[@]}" --vocab-file "$m" --merge-file "$m" --data-path "$good"
expect_error "cannot read '$tmp'" train "${model[@]}" --vocab-file "$tmp" --merge-file "$m" --data-path "$good"

# ---- --load: a checkpoint of another model, damaged files
mock=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --mock-data
  --tokenizer-type NullTokenizer --vocab-size 99 --log-interval 1 --eval-iters 0)
timeout 120 "$bin" train "${mock[@]}" --train-iters 2 --save "$tmp/ck" --save-interval 2 >"$tmp/out" 2>&1 ||
  fail "saving a checkpoint: $(tail -3 "$tmp/out")"
expect_error "--num-attention-heads: 4 in the checkpoint, 8 in this run" train "${mock[@]}" --train-iters 4 \
  --num-attention-heads 8 --load "$tmp/ck"
expect_error "--hidden-size: 32 in the checkpoint, 64 in this run" train "${mock[@]}" --train-iters 4 \
  --hidden-size 64 --load "$tmp/ck"
expect_error "--num-layers: 2 in the checkpoint, 3 in this run" train "${mock[@]}" --train-iters 4 \
  --num-layers 3 --load "$tmp/ck"
expect_error "padded vocabulary" train "${mock[@]}" --train-iters 4 --vocab-size 300 --load "$tmp/ck"
damaged() { rm -rf "$tmp/ck2" && cp -r "$tmp/ck" "$tmp/ck2"; }
damaged && echo 7 >"$tmp/ck2/latest_checkpointed_iteration.txt"
expect_error "'$tmp/ck2/iter_0000007' does not exist (latest file names iteration 7)" train "${mock[@]}" \
  --train-iters 4 --load "$tmp/ck2"
damaged && : >"$tmp/ck2/latest_checkpointed_iteration.txt"
expect_error "latest_checkpointed_iteration.txt: expected an iteration number" train "${mock[@]}" \
  --train-iters 4 --load "$tmp/ck2"
damaged && echo '{"broken' >"$tmp/ck2/iter_0000002/metadata.json"
expect_error "iter_0000002/metadata.json" train "${mock[@]}" --train-iters 4 --load "$tmp/ck2"
damaged && rm "$tmp/ck2/iter_0000002/metadata.json"
expect_error "cannot open '$tmp/ck2/iter_0000002/metadata.json'" train "${mock[@]}" --train-iters 4 \
  --load "$tmp/ck2"
damaged && f="$tmp/ck2/iter_0000002/mp_rank_00/optim_dp000.safetensors" && head -c 2000 "$f" >"$f.cut" &&
  mv "$f.cut" "$f"
expect_error "optim_dp000.safetensors: header length" train "${mock[@]}" --train-iters 4 --load "$tmp/ck2"

# ---- trident convert: Hugging Face directories with a file or a tensor missing
"$bin" convert --from trident --to hf --input "$tmp/ck" --output "$tmp/hf" >"$tmp/out" 2>&1 ||
  fail "export: $(cat "$tmp/out")"
mkdir -p "$tmp/noconfig" && cp "$tmp/hf/model.safetensors" "$tmp/noconfig/"
expect_error "no config.json" convert --from hf --to trident --input "$tmp/noconfig" --output "$tmp/x"
# A valid safetensors file without its last tensor (transformer.ln_f.bias): the
# header entry removed (padded with spaces, as the format allows) and its 128
# bytes cut from the end of the data.
mkdir -p "$tmp/notensor" && cp "$tmp/hf/config.json" "$tmp/notensor/"
f="$tmp/hf/model.safetensors"
n=$(od -An -t u8 -N8 "$f" | tr -d ' ')
size=$(stat -c %s "$f")
hdr=$(tail -c +9 "$f" | head -c "$n")
cut=$(printf '%s' "$hdr" | sed -E 's/,"transformer\.ln_f\.bias":\{[^}]*\}//')
grep -qF '"transformer.ln_f.bias":{"dtype":"F32","shape":[32],"data_offsets":[118656,118784]}}' <<<"$hdr" ||
  fail "the exported header does not end with ln_f.bias as expected: ${hdr: -120}"
{
  head -c 8 "$f"
  printf '%-*s' "$n" "$cut"
  tail -c +$((9 + n)) "$f" | head -c $((size - 8 - n - 128))
} >"$tmp/notensor/model.safetensors"
expect_error "tensor 'ln_f.bias' (or 'transformer.ln_f.bias') is missing from $tmp/notensor/model.safetensors" \
  convert --from hf --to trident --input "$tmp/notensor" --output "$tmp/x"
# A tensor under a name GPT-2 does not have (so a weight is missing too).
mkdir -p "$tmp/renamed" && cp "$tmp/hf/config.json" "$tmp/renamed/"
{
  head -c 8 "$f"
  printf '%s' "$hdr" | sed 's/h\.1\.mlp\.c_fc\.weight"/h.1.mlp.c_fc.weighX"/'
  tail -c +$((9 + n)) "$f"
} >"$tmp/renamed/model.safetensors"
expect_error "tensor 'transformer.h.1.mlp.c_fc.weighX' is not a weight of GPT-2" convert --from hf \
  --to trident --input "$tmp/renamed" --output "$tmp/x"
[ ! -e "$tmp/x/latest_checkpointed_iteration.txt" ] && ok "no checkpoint written by the refused imports" ||
  fail "a refused import left $(ls "$tmp/x")"

[ $failed -eq 0 ] && echo "cli_train_errors: all passed"
exit $failed
