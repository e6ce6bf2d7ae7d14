#!/usr/bin/env bash
# Sizes at the edge of 64 bits (issue 16, items 2 and 3): every integer flag of
# `trident train` (read from --help, so a flag added later is covered too), the
# counts of `trident dataset`, `trident generate --out-seq-length` and the sizes
# of a Hugging Face config.json, at 2^31, 2^53, 2^58, 2^62 and INT64_MAX. Each
# is either a clear error naming the flag (exit 1), or, where the value is
# harmless (an interval, iterations cut short by --exit-interval), a normal run
# (exit 0); never a signal, an internal error or a hang. The memory check: a
# model or batch too large for TRIDENT_MEMORY_LIMIT is refused at once with the
# bytes it needs and the limit.
# Usage: cli_size_limits.sh TRIDENT_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok
export OMP_NUM_THREADS=1 TRIDENT_MEMORY_LIMIT=1G

two62=$((1 << 62))
values=($((1 << 31)) $((1 << 53)) $((1 << 58)) $two62 $((two62 - 1 + two62)))
ref="$src/tests/data/megatron_ref/ref_text_document"
[ -f "$ref.idx" ] || { echo "FAIL: fixture $ref.idx is missing"; exit 1; }

model=(--num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 8
  --max-position-embeddings 8 --micro-batch-size 1 --lr 1e-3 --mock-data
  --tokenizer-type NullTokenizer --vocab-size 16 --eval-iters 1 --log-interval 1)

# judge WHAT EXPECT FLAG RC OUT ERR: EXPECT err (exit 1, an error naming FLAG),
# ok (exit 0 and a loss printed), any (either); never a signal or a hang.
judge() {
  local what=$1 expect=$2 flag=$3 rc=$4 out=$5 err=$6
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    fail "$what: still running after the timeout"
  elif [ "$rc" -gt 128 ]; then
    fail "$what: killed by signal $((rc - 128)): $(tail -c 300 "$err")"
  elif grep -q "internal error" "$err"; then
    fail "$what: $(grep -m1 'internal error' "$err")"
  elif [ "$rc" -eq 1 ] && [ "$expect" != ok ] && grep -q -- "trident: error: .*$flag" "$err"; then
    ok "$what: $(grep -m1 'trident: error' "$err" | cut -c1-160)"
  elif [ "$rc" -eq 0 ] && [ "$expect" != err ] && grep -q "lm loss" "$out"; then
    ok "$what: trains"
  else
    fail "$what: expected ${expect/any/an error naming $flag or a run}, got exit $rc: $(tail -c 300 "$err")"
  fi
}

# The table: FLAG EXPECT LENGTH EXTRA..., LENGTH iters (--train-iters 2) or
# samples (--train-samples 2). Values that only count or compare train: the
# iterations end at --exit-interval 1.
table="
num-layers err iters
hidden-size err iters
ffn-hidden-size err iters
num-attention-heads err iters
kv-channels err iters
seq-length err iters
max-position-embeddings err iters
micro-batch-size err iters
global-batch-size err iters
vocab-size err iters
make-vocab-size-divisible-by err iters
train-iters ok iters --exit-interval 1
train-samples ok none --exit-interval 1
exit-interval ok iters
seed ok iters
lr-warmup-iters err iters
lr-warmup-samples err samples
lr-decay-iters ok iters
lr-decay-samples ok samples
lr-wsd-decay-iters ok iters --lr-decay-style WSD
lr-wsd-decay-samples ok samples --lr-decay-style WSD
loss-scale-window err iters --fp16
hysteresis err iters --fp16
num-workers ok iters
eval-interval ok iters
eval-iters ok iters --exit-interval 1
save-interval ok iters --save @TMP@/save
log-interval ok iters
tensorboard-log-interval ok iters
tensor-model-parallel-size err iters
pipeline-model-parallel-size err iters
ddp-bucket-size ok iters
recompute-num-layers err iters --recompute-granularity full --recompute-method uniform
checkpoint-num-layers err iters --checkpoint-activations
tensorboard-queue-size ok iters
num-dataset-builder-threads ok iters
manual-gc-interval ok iters
num-query-groups err iters
num-layers-per-virtual-pipeline-stage err iters
num-experts err iters
"

# Every flag --help lists with an integer value (meta N, not a choice).
"$bin" train --help >"$tmp/help" || fail "train --help"
int_flags=$(awk '/^  --/ { if (f != "") print f; f = ""; name = $1; sub(/,$/, "", name)
    for (i = 1; i <= NF && $i ~ /^--/; i++) {}
    if ($i == "N") f = substr(name, 3) }
  /^      one of:/ { f = "" } END { if (f != "") print f }' "$tmp/help")
[ "$(echo "$int_flags" | wc -w)" -ge 30 ] || fail "found only $(echo "$int_flags" | wc -w) integer flags in --help"
for f in $(echo "$table" | awk 'NF { print $1 }'); do
  echo "$int_flags" | grep -qx -- "$f" || fail "the table's --$f is not an integer flag of train --help"
done

start=$(date +%s)
for flag in $int_flags; do
  row=$(echo "$table" | awk -v f="$flag" '$1 == f')
  read -r _ expect length extra <<<"${row:-$flag any iters}"
  case $length in iters) len=(--train-iters 2) ;; samples) len=(--train-samples 2) ;; *) len=() ;; esac
  for v in "${values[@]}"; do # the five values at once (each run is mostly start-up)
    read -r -a more <<<"${extra//@TMP@/$tmp/$flag$v}"
    { timeout -k 2 30 "$bin" train "${model[@]}" "${len[@]}" "${more[@]}" "--$flag" "$v" \
      >"$tmp/out$v" 2>"$tmp/err$v"; echo $? >"$tmp/rc$v"; } &
  done
  wait
  for v in "${values[@]}"; do
    judge "train --$flag $v" "$expect" "--$flag" "$(cat "$tmp/rc$v")" "$tmp/out$v" "$tmp/err$v"
  done
done
echo "   (train: $(echo "$int_flags" | wc -w) flags x ${#values[@]} values in $(($(date +%s) - start)) s)"

# trident dataset: sample counts of the reference data at the same values.
ds=("$bin" dataset --data-path "$ref" --split 949,50,1 --seq-length 32 --data-cache-path "$tmp/cache")
for v in "${values[@]}"; do
  for row in "train-iters:--first 1" "train-samples:--first 1" \
    "global-batch-size:--train-iters 1 --first 1" "eval-iters:--train-iters 1 --which valid --first 1" \
    "seq-length:--train-iters 1 --first 1"; do
    flag=${row%%:*}
    read -r -a more <<<"${row#*:}"
    timeout -k 2 30 "${ds[@]}" "${more[@]}" "--$flag" "$v" >"$tmp/out" 2>"$tmp/err"
    judge "dataset --$flag $v" err "--$flag" $? "$tmp/out" "$tmp/err"
  done
  # --summary keeps the count asked (it used to wrap to 0) and says why it cannot be built
  timeout -k 2 30 "${ds[@]}" --train-iters "$v" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  asked=$(grep -m1 '"samples_asked"' "$tmp/out" | sed -E 's/.*:[[:space:]]*//; s/,$//')
  if [ $rc -eq 0 ] && awk -v a="$asked" -v v="$v" 'BEGIN { exit !(a / v > 0.999 && a / v < 1.001) }' &&
    grep -q '"error":.*--train-iters' "$tmp/out"; then
    ok "dataset --summary --train-iters $v: $asked samples asked, an error naming --train-iters"
  else
    fail "dataset --summary --train-iters $v: exit $rc, samples_asked '$asked': $(head -c 600 "$tmp/out")"
  fi
done

# trident generate: --out-seq-length at most the model's positions (8 here).
OMP_NUM_THREADS=2 "$bin" train "${model[@]}" --vocab-size 50256 --train-iters 1 --save "$tmp/ck" \
  --save-interval 1 >"$tmp/train.log" 2>&1 || fail "the model for generate: $(tail -3 "$tmp/train.log")"
gen=("$bin" generate --load "$tmp/ck" --vocab-file "$src/data/gpt2/vocab.json"
  --merge-file "$src/data/gpt2/merges.txt" --prompt "a b")
for v in 9 "${values[@]}"; do
  timeout -k 2 30 "${gen[@]}" --out-seq-length "$v" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  # beyond 10^15 the flag's own range check refuses it first
  if [ $rc -eq 1 ] && { grep -q "trident: error: --out-seq-length $v: at most the model's 8 positions" "$tmp/err" ||
    { [ "$v" -gt 1000000000000000 ] && grep -q "trident: error: --out-seq-length expects" "$tmp/err"; }; }; then
    ok "generate --out-seq-length $v: $(head -c 120 "$tmp/err")"
  else
    fail "generate --out-seq-length $v: exit $rc: $(tail -c 300 "$tmp/err")"
  fi
done
timeout -k 2 30 "${gen[@]}" --out-seq-length 8 --json >"$tmp/out" 2>"$tmp/err" &&
  grep -q '"tokens"' "$tmp/out" && ok "generate --out-seq-length 8 (the positions): runs" ||
  fail "generate --out-seq-length 8: $(tail -c 300 "$tmp/err")"
for flag in top_k seed; do
  for v in "${values[@]}"; do
    timeout -k 2 30 "${gen[@]}" --out-seq-length 2 "--$flag" "$v" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 0 ] || { [ $rc -eq 1 ] && grep -q -- "trident: error: --$flag" "$tmp/err"; }; then
      ok "generate --$flag $v: exit $rc"
    else
      fail "generate --$flag $v: exit $rc: $(tail -c 300 "$tmp/err")"
    fi
  done
done

# trident convert: config.json sizes, and the memory of a billion layers.
hf_config() { # hf_config KEY VALUE: a small GPT-2 config.json with KEY set to VALUE
  mkdir -p "$tmp/hf"
  local line='{"model_type": "gpt2"' k v
  for k in n_layer n_head n_embd n_inner vocab_size n_positions; do
    case $k in n_layer) v=2 ;; n_head) v=16 ;; n_embd) v=64 ;; n_inner) v=256 ;; vocab_size) v=100 ;; *) v=32 ;; esac
    [ "$k" = "$1" ] && v=$2
    line="$line, \"$k\": $v"
  done
  echo "$line}" >"$tmp/hf/config.json"
}
for key in n_layer n_embd n_head n_inner n_positions vocab_size; do
  for v in "${values[@]}" 1000000000; do
    hf_config "$key" "$v"
    timeout -k 2 30 "$bin" convert --from hf --to trident --input "$tmp/hf" --output "$tmp/hfout" \
      >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 1 ] && grep -q "trident: error: .*$key" "$tmp/err"; then
      ok "convert $key $v: $(grep -m1 'trident: error' "$tmp/err" | cut -c1-150)"
    else
      fail "convert $key $v: exit $rc: $(tail -c 300 "$tmp/err")"
    fi
  done
done

# The memory check before allocating (issue 16, item B): the bytes and the limit.
t0=$(date +%s%N)
"$bin" train "${model[@]}" --train-iters 2 --num-layers 1000000000 >"$tmp/out" 2>"$tmp/err"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
if [ $rc -eq 1 ] && [ $ms -lt 5000 ] &&
  grep -q "trident: error: each rank of this run needs [0-9.]* TiB (parameters .*--num-layers 1000000000.*more than the 1.00 GiB available (TRIDENT_MEMORY_LIMIT=1G" "$tmp/err"; then
  ok "--num-layers 1000000000 refused in $ms ms: $(cut -c1-200 "$tmp/err")"
else
  fail "--num-layers 1000000000: exit $rc after $ms ms: $(cat "$tmp/err")"
fi
hf_config n_layer 1000000000
TRIDENT_MEMORY_LIMIT=8GiB "$bin" convert --from hf --to trident --input "$tmp/hf" --output "$tmp/hfout" 2>"$tmp/err"
grep -q "importing this model needs [0-9.]* [PT]iB .*more than the 8.00 GiB available (TRIDENT_MEMORY_LIMIT=8GiB" "$tmp/err" &&
  ok "convert n_layer 1000000000 under TRIDENT_MEMORY_LIMIT=8GiB: $(cut -c1-160 "$tmp/err")" ||
  fail "convert n_layer 1000000000: $(cat "$tmp/err")"
# the limit decides: the same small run fits 1G and not 16K
TRIDENT_MEMORY_LIMIT=16K "$bin" train "${model[@]}" --train-iters 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "more than the 16.0 KiB available (TRIDENT_MEMORY_LIMIT=16K" "$tmp/err" &&
  ok "TRIDENT_MEMORY_LIMIT=16K refuses the small model: $(cut -c1-120 "$tmp/err")" ||
  fail "TRIDENT_MEMORY_LIMIT=16K: exit $rc: $(cat "$tmp/err")"
TRIDENT_MEMORY_LIMIT=lots "$bin" train "${model[@]}" --train-iters 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "trident: error: TRIDENT_MEMORY_LIMIT='lots': expected" "$tmp/err" &&
  ok "a malformed TRIDENT_MEMORY_LIMIT is refused" || fail "TRIDENT_MEMORY_LIMIT=lots: exit $rc: $(cat "$tmp/err")"
TRIDENT_MEMORY_LIMIT=unlimited "$bin" train "${model[@]}" --train-iters 2 >"$tmp/out" 2>"$tmp/err" &&
  ok "TRIDENT_MEMORY_LIMIT=unlimited runs" || fail "TRIDENT_MEMORY_LIMIT=unlimited: $(tail -3 "$tmp/err")"

[ $failed -eq 0 ] && echo "all size-limit checks passed"
exit $failed
