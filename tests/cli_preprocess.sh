#!/usr/bin/env bash
# trident preprocess: Megatron's reference input gives Megatron's .bin/.idx byte for
# byte with 1 and 2 workers; the KJV corpus gives its README's 1,009,497 tokens (read
# back by trident dataset) and the same files with 1 and 2 workers; several
# --json-keys write one dataset each; bad lines stop the run with their line number
# and leave no file behind, or are skipped and counted with --skip-bad-lines; flags
# of preprocess_data.py that are not implemented are refused (--partitions N:
# cli_preprocess_partitions.sh).
# Usage: cli_preprocess.sh TRIDENT_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
if ! "$bin" preprocess --help >/dev/null 2>&1; then
  echo "SKIP: 'trident preprocess' is not in this binary"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ref="$src/tests/data/megatron_ref"
pre=("$bin" preprocess --tokenizer-type GPT2BPETokenizer --vocab-file "$src/data/gpt2/vocab.json"
  --merge-file "$src/data/gpt2/merges.txt")
failed=0

report() { # report DESCRIPTION STATUS
  if [ "$2" -eq 0 ]; then echo "  ok    $1"; else echo "  FAIL  $1"; failed=1; fi
}

# same_dataset A B: the .bin and .idx of prefixes A and B are identical.
same_dataset() { cmp -s "$1.bin" "$2.bin" && cmp -s "$1.idx" "$2.idx"; }

# expect_error DESCRIPTION PATTERN FLAGS...: exit code 1, PATTERN on stderr, no output left.
expect_error() {
  local what=$1 pattern=$2
  shift 2
  "${pre[@]}" "$@" --output-prefix "$tmp/bad" >/dev/null 2>"$tmp/err"
  local rc=$?
  grep -q -- "$pattern" "$tmp/err"
  local found=$?
  local left
  left=$(find "$tmp" -maxdepth 1 -name 'bad*' | wc -l)
  report "$what: exit $rc, $(head -c 200 "$tmp/err")" $((rc != 1 || found != 0 || left != 0))
}

if [ -f "$ref/input.jsonl" ]; then
  for w in 1 2; do
    "${pre[@]}" --input "$ref/input.jsonl" --output-prefix "$tmp/ref$w" --append-eod --workers "$w" \
      --log-interval 100 >"$tmp/out" 2>"$tmp/log"
    same_dataset "$tmp/ref${w}_text_document" "$ref/ref_text_document"
    report "Megatron's reference, --workers $w: .bin and .idx byte-identical" $?
  done
  grep -Eq '^Processed 300 documents \([0-9.]+ docs/s, [0-9.]+ MB/s\)\.$' "$tmp/log"
  report "progress as Megatron prints it: $(tail -n 1 "$tmp/log")" $?
  grep -q "^Done: 312 documents, 25452 tokens" "$tmp/out"
  report "summary: $(head -n 1 "$tmp/out")" $?
else
  report "fixture $ref/input.jsonl is missing" 1
fi

kjv="$src/data/corpus/kjv.jsonl"
for w in 1 2; do
  "${pre[@]}" --input "$kjv" --output-prefix "$tmp/kjv$w" --append-eod --workers "$w" \
    --log-interval 0 >"$tmp/out$w"
  report "KJV, --workers $w: $(head -n 1 "$tmp/out$w")" $?
done
same_dataset "$tmp/kjv1_text_document" "$tmp/kjv2_text_document"
report "KJV: the same files with 1 and 2 workers" $?
"$bin" dataset --data-path "$tmp/kjv1_text_document" --split 100,0,0 --seq-length 1024 \
  --train-samples 1 --eval-iters 0 --data-cache-path "$tmp/cache" --summary 2>/dev/null |
  tr -d ' \t\n' >"$tmp/summary"
grep -q '"documents":1107,"sequences":1107,"tokens":1009497' "$tmp/summary"
report "KJV read back by trident dataset: 1107 documents, 1009497 tokens with EOD (README)" $?
"${pre[@]}" --input "$kjv" --output-prefix "$tmp/noeod" --log-interval 0 >"$tmp/out"
grep -q "^Done: 1107 documents, 1008390 tokens" "$tmp/out"
report "KJV without --append-eod: 1008390 tokens (README)" $?

# Several keys: one dataset per key; "text" is the same as on its own; stdin works.
printf '%s\n' '{"title": "One", "text": "first text"}' '{"text": "", "title": "Two"}' \
  '{"title": "", "text": "third"}' >"$tmp/keys.jsonl"
"${pre[@]}" --input - --json-keys text title --output-prefix "$tmp/both" --append-eod \
  <"$tmp/keys.jsonl" >/dev/null
"${pre[@]}" --input "$tmp/keys.jsonl" --output-prefix "$tmp/one" --append-eod >/dev/null
same_dataset "$tmp/both_text_document" "$tmp/one_text_document" &&
  [ -f "$tmp/both_title_document.idx" ] && [ -f "$tmp/both_title_document.bin" ]
report "--json-keys text title: PREFIX_text_document and PREFIX_title_document" $?
"$bin" dataset --data-path "$tmp/both_title_document" --split 100,0,0 --seq-length 2 \
  --train-samples 1 --eval-iters 0 --data-cache-path "$tmp/cache" --summary 2>/dev/null |
  tr -d ' \t\n' | grep -q '"documents":3,"sequences":2,"tokens":4'
report "title dataset: 3 documents, the empty title without a sequence; One, Two and 2 EODs" $?

# Bad lines: an error with the line number, nothing written; or skipped and counted.
good='{"text": "fine"}'
{ for i in $(seq 1 40); do echo "$good"; done; echo '{"text": "cut'; echo "$good"; } >"$tmp/malformed.jsonl"
expect_error "malformed JSON on line 41" "malformed.jsonl line 41: malformed JSON at byte offset 9" \
  --input "$tmp/malformed.jsonl" --workers 2 --append-eod
printf '%s\n{"text": "caf\xc3"}\n' "$good" >"$tmp/utf8.jsonl"
expect_error "invalid UTF-8 on line 2" "utf8.jsonl line 2: invalid UTF-8 at byte offset 13" \
  --input "$tmp/utf8.jsonl"
printf '%s\n{"title": "x"}\n' "$good" >"$tmp/nokey.jsonl"
expect_error "no text key on line 2" 'nokey.jsonl line 2: no key "text"' --input "$tmp/nokey.jsonl"
printf '%s\n{"text": "a\\ud800b"}\n' "$good" >"$tmp/surrogate.jsonl"
expect_error "lone surrogate in the text" 'surrogate.jsonl line 2: lone surrogate' \
  --input "$tmp/surrogate.jsonl"
printf '%s\n{"text": ["a", "b"]}\n' "$good" >"$tmp/list.jsonl"
expect_error "a list of sentences" 'line 2: no string value for the key "text" (it is an array)' \
  --input "$tmp/list.jsonl"
expect_error "missing input" "cannot open the input" --input "$tmp/none.jsonl"

cat "$tmp/malformed.jsonl" "$tmp/utf8.jsonl" "$tmp/nokey.jsonl" >"$tmp/mixed.jsonl"
grep -ax "$good" "$tmp/mixed.jsonl" >"$tmp/clean.jsonl"
"${pre[@]}" --input "$tmp/mixed.jsonl" --output-prefix "$tmp/skip" --skip-bad-lines --workers 2 \
  --append-eod >"$tmp/out" 2>"$tmp/err"
rc=$?
"${pre[@]}" --input "$tmp/clean.jsonl" --output-prefix "$tmp/clean" --append-eod >/dev/null
same_dataset "$tmp/skip_text_document" "$tmp/clean_text_document" && [ $rc -eq 0 ] &&
  grep -q "^Skipped 3 bad lines" "$tmp/out" &&
  grep -q "mixed.jsonl line 41: malformed JSON .*(line skipped)" "$tmp/err"
report "--skip-bad-lines: 3 lines skipped, warned with their numbers; the rest as a clean input" $?

# Flags of preprocess_data.py.
expect_error "--split-sentences is refused" "--split-sentences is not implemented" \
  --input "$tmp/clean.jsonl" --split-sentences
expect_error "another tokenizer is refused" "--tokenizer-type BertWordPieceCase is not implemented" \
  --input "$tmp/clean.jsonl" --tokenizer-type BertWordPieceCase
expect_error "--json-keys twice the same" 'lists "text" twice' --input "$tmp/clean.jsonl" \
  --json-keys text text
"${pre[@]}" --input "$tmp/clean.jsonl" --output-prefix "$tmp/inert" --append-eod --partitions 1 \
  --keep-newlines --lang english --vocab-extra-ids 0 --workers 2 >/dev/null 2>"$tmp/err"
same_dataset "$tmp/inert_text_document" "$tmp/clean_text_document" &&
  grep -q "note: --keep-newlines: only matters with --split-sentences" "$tmp/err"
report "--partitions 1, --keep-newlines, --lang, --vocab-extra-ids: accepted, noted, no change" $?

[ $failed -eq 0 ] && echo "all passed"
exit $failed
