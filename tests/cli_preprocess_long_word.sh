#!/usr/bin/env bash
# `trident preprocess` on one enormous word (issue 16, item 7): a document of
# 8 MB without a space is one pre-token, which the BPE merges as a whole (its
# ids stay GPT-2's: no splitting) in memory linear in it and time about linear.
# A run of "a" gives the known tokens ("aaaa", id 24794, one per 4 bytes); a
# word of random letters fewer tokens than bytes. Peak memory above the
# process's baseline must stay under 40 bytes per input byte (the old merge loop
# took about 55) and each run under 20 s (tests/test_bpe_merge_order.c checks
# the ids of long words against encoder.py's algorithm).
# Usage: cli_preprocess_long_word.sh TRIDENT_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok
tok=(--tokenizer-type GPT2BPETokenizer --vocab-file "$src/data/gpt2/vocab.json"
  --merge-file "$src/data/gpt2/merges.txt")
[ -f "$src/data/gpt2/merges.txt" ] || { echo "FAIL: $src/data/gpt2/merges.txt is missing"; exit 1; }
n=$((8 << 20))
timer=$(command -v /usr/bin/time || true)

# peak KB and seconds of: trident preprocess INPUT PREFIX
run() {
  if [ -n "$timer" ]; then
    "$timer" -f "%M %e" -o "$tmp/time" "$bin" preprocess --input "$1" --output-prefix "$2" "${tok[@]}" \
      --append-eod --workers 1 --log-interval 0 >"$tmp/log" 2>&1
  else
    "$bin" preprocess --input "$1" --output-prefix "$2" "${tok[@]}" --append-eod --workers 1 \
      --log-interval 0 >"$tmp/log" 2>&1
    echo "0 0" >"$tmp/time"
  fi
}

echo '{"text": "a"}' >"$tmp/tiny.jsonl"
run "$tmp/tiny.jsonl" "$tmp/tiny" || fail "tiny input: $(tail -2 "$tmp/log")"
read -r base _ <"$tmp/time"
{ printf '{"text": "'; head -c "$n" /dev/zero | tr '\0' a; printf '"}\n'; } >"$tmp/a.jsonl"
{ printf '{"text": "'; LC_ALL=C tr -dc 'a-z' </dev/urandom | head -c "$n"; printf '"}\n'; } >"$tmp/r.jsonl"
for w in a r; do
  run "$tmp/$w.jsonl" "$tmp/$w"
  rc=$?
  read -r kb secs <"$tmp/time"
  bin_bytes=$(stat -c %s "$tmp/${w}_text_document.bin" 2>/dev/null || echo 0)
  tokens=$((bin_bytes / 2 - 1)) # uint16 ids, and the end-of-document id
  per_byte=$(((kb - base) * 1024 / n))
  if [ $rc -ne 0 ]; then
    fail "$w: exit $rc: $(tail -3 "$tmp/log")"
  elif [ "$w" = a ] && [ $tokens -ne $((n / 4)) ]; then
    fail "a: $tokens tokens, want $((n / 4)) (one 'aaaa' per 4 bytes)"
  elif [ $tokens -le 0 ] || [ $tokens -gt $n ]; then
    fail "$w: $tokens tokens for $n bytes"
  elif [ -n "$timer" ] && { [ $per_byte -ge 40 ] || awk -v s="$secs" 'BEGIN { exit !(s >= 20) }'; }; then
    fail "$w: $((kb - base)) KB above the baseline ($per_byte bytes per input byte), $secs s"
  else
    ok "$w: one word of $n bytes -> $tokens tokens, $((kb - base)) KB above the baseline ($per_byte B/byte), $secs s"
  fi
done
if [ -z "$timer" ]; then echo "note: no /usr/bin/time: memory and time not measured"; fi
if cmp -s <(od -An -tu2 -v "$tmp/a_text_document.bin" | tr -s ' ' '\n' | grep -v '^$' | sort -u) \
  <(printf '24794\n50256\n'); then
  ok "a: every token is 'aaaa' (24794), then <|endoftext|>"
else
  fail "a: tokens other than 24794 and 50256: $(od -An -tu2 -v "$tmp/a_text_document.bin" | tr -s ' ' '\n' | sort -u | head -5 | tr '\n' ' ')"
fi
[ $failed -eq 0 ] && echo "all long-word checks passed"
exit $failed
