#!/usr/bin/env bash
# trident generate: a model trained (a minute's worth) on one repeated sentence
# continues its start greedily with the rest of it and stops at the end of the
# document (a token at a time against the cached keys and values; and with a
# prompt longer than the context, which slides); sampling is reproducible by
# --seed and varies with it; --json gives the tokens; bad flags and a checkpoint
# of another vocabulary are refused with exit code 1. Arguments: the trident
# binary and the source directory.
set -u
bin=$1
src=$2
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok

tok=(--vocab-file "$src/data/gpt2/vocab.json" --merge-file "$src/data/gpt2/merges.txt")
for _ in $(seq 300); do echo '{"text": "the quick brown fox jumps over the lazy dog."}'; done >"$tmp/c.jsonl"
"$bin" preprocess --input "$tmp/c.jsonl" --output-prefix "$tmp/c" --tokenizer-type GPT2BPETokenizer \
  "${tok[@]}" --append-eod --log-interval 0 >/dev/null || fail "preprocess"
OMP_NUM_THREADS=2 "$bin" train --tokenizer-type GPT2BPETokenizer "${tok[@]}" --data-path "$tmp/c_text_document" \
  --split 100,0,0 --data-cache-path "$tmp/cache" --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --seq-length 32 --max-position-embeddings 32 --micro-batch-size 4 --global-batch-size 8 --lr 5e-3 \
  --lr-warmup-iters 5 --train-iters 60 --eval-iters 0 --log-interval 60 --save "$tmp/ck" --save-interval 60 \
  >"$tmp/train.log" 2>&1 || fail "training: $(tail -3 "$tmp/train.log")"

gen() { "$bin" generate --load "$tmp/ck" "${tok[@]}" "$@"; }
out=$(gen --prompt "the quick brown" --out-seq-length 12 --greedy 2>&1)
case "$out" in
"the quick brown fox jumps over the lazy dog."*) ok "greedy: '$out'" ;;
*) fail "greedy continuation: '$out' ($(grep -o 'lm loss: [^ ]*' "$tmp/train.log"))" ;;
esac
# a prompt longer than the model's 32 positions: the context slides with every token
long="the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog. the quick brown"
out=$(gen --prompt "$long" --out-seq-length 12 --greedy 2>&1)
case "$out" in
"$long fox jumps over the lazy dog."*) ok "greedy past the context's 32 tokens: '${out:${#long}}'" ;;
*) fail "greedy continuation of a prompt longer than the context: '$out'" ;;
esac
json=$(gen --prompt "the quick brown" --out-seq-length 12 --greedy --json)
case "$json" in
*'"prompt":"the quick brown"'*'"text":" fox jumps over the lazy dog.<|endoftext|>"'*) ok "--json: $json" ;;
*'"tokens":['*',50256]'*) ok "--json ends at the end-of-document token: $json" ;;
*) fail "--json: $json" ;;
esac
a=$(gen --prompt "the" --out-seq-length 20 --temperature 3 --seed 5 --num-samples 2)
b=$(gen --prompt "the" --out-seq-length 20 --temperature 3 --seed 5 --num-samples 2)
c=$(gen --prompt "the" --out-seq-length 20 --temperature 3 --seed 6 --num-samples 2)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ] && [ "$(echo "$a" | wc -l)" -ge 2 ] &&
  ok "sampling: the same --seed gives the same samples, another seed others" ||
  fail "sampling reproducibility: '$a' / '$b' / '$c'"

# expect_error MESSAGE ARGS...: exit 1 and "trident: error: MESSAGE" on stderr
expect_error() {
  local msg=$1
  shift
  "$bin" generate "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc -eq 1 ] && grep -qF -- "trident: error: $msg" "$tmp/err" && ok "refused: $msg" ||
    fail "expected '$msg', got rc $rc: $(cat "$tmp/err")"
}
expect_error "--load $tmp/none" --load "$tmp/none" "${tok[@]}" --prompt x
expect_error "--top_p expects a number in [0, 1]; got '2'" --load "$tmp/ck" "${tok[@]}" --prompt x --top_p 2
expect_error "--temperature expects a number in (0, 1e+06]; got '0'" --load "$tmp/ck" "${tok[@]}" --prompt x --temperature 0
expect_error "unknown argument '--topk'" --load "$tmp/ck" "${tok[@]}" --prompt x --topk 3
expect_error "trident generate needs --load, --vocab-file, --merge-file and --prompt" --load "$tmp/ck" "${tok[@]}"
"$bin" train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --max-position-embeddings 8 \
  --micro-batch-size 1 --lr 1e-3 --mock-data --vocab-size 64 --train-iters 1 --eval-iters 0 \
  --save "$tmp/small" --save-interval 1 >/dev/null 2>&1 || fail "small model"
expect_error "--vocab-file has 50257 entries; the model in $tmp/small has 65 vocabulary rows" \
  --load "$tmp/small" "${tok[@]}" --prompt x

[ $failed -eq 0 ] && echo "all generate checks passed"
exit $failed
