#!/usr/bin/env bash
# trident tokenize: the shared reference cases give their ids, the KJV corpus
# goes through --decode and back byte for byte, and bad input lines fail with
# exit code 1 and a message naming the line and byte offset.
# Usage: cli_tokenize.sh TRIDENT_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
if ! "$bin" tokenize --help >/dev/null 2>&1; then
  echo "SKIP: 'trident tokenize' is not in this binary"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tok=("$bin" tokenize --vocab-file "$src/data/gpt2/vocab.json" --merge-file "$src/data/gpt2/merges.txt")
failed=0

report() { # report DESCRIPTION STATUS
  if [ "$2" -eq 0 ]; then echo "  ok    $1"; else echo "  FAIL  $1"; failed=1; fi
}

# expect_error DESCRIPTION INPUT_FILE PATTERN [FLAGS...]: exit code 1, PATTERN on stderr.
expect_error() {
  local what=$1 input=$2 pattern=$3
  shift 3
  "${tok[@]}" "$@" --input "$input" >/dev/null 2>"$tmp/err"
  local rc=$?
  grep -q -- "$pattern" "$tmp/err"
  local found=$?
  report "$what: exit $rc, $(head -c 200 "$tmp/err")" $((rc != 1 || found != 0))
}

cases="$src/tests/data/tokenizer/gpt2_cases.jsonl"
if [ -f "$cases" ]; then
  "${tok[@]}" --input "$cases" >"$tmp/ids"
  sed -E 's/.*"ids": (\[[0-9, ]*\])\}$/\1/' "$cases" >"$tmp/want"
  cmp -s "$tmp/ids" "$tmp/want"
  report "$(wc -l <"$cases") reference cases give GPT-2's ids" $?
else
  report "fixture $cases is missing" 1
fi

kjv="$src/data/corpus/kjv.jsonl"
"${tok[@]}" --input "$kjv" >"$tmp/kjv.ids"
report "KJV encodes" $?
tokens=$(awk -F', ' '{ n += NF } END { print n }' "$tmp/kjv.ids")
[ "$tokens" = 1008390 ]
report "KJV: $tokens tokens (README: 1008390)" $?
"${tok[@]}" --decode --input - <"$tmp/kjv.ids" >"$tmp/kjv.back"
cmp -s "$tmp/kjv.back" "$kjv"
report "KJV: tokenize | tokenize --decode gives the file back byte for byte" $?

# A NUL, quotes, control characters and a repeated key (the last one counts, as in Python).
printf '%s\n' '{"id": 7, "text": "first", "meta": {"a": [1, "}"]}, "text": "a\u0000b \"q\" \\ \t\u0001"}' >"$tmp/esc.jsonl"
out=$("${tok[@]}" --input "$tmp/esc.jsonl")
[ "$out" = "[64, 188, 65, 366, 80, 1, 3467, 220, 197, 189]" ]
report "escapes, NUL and a repeated key: $out" $?
back=$(echo "$out" | "${tok[@]}" --decode --input -)
[ "$back" = '{"text": "a\u0000b \"q\" \\ \t\u0001"}' ]
report "decode writes JSON escapes: $back" $?

printf '{"text": "a"}\n{"text": "b"\n' >"$tmp/bad_json.jsonl"
expect_error "malformed JSON line" "$tmp/bad_json.jsonl" "line 2: malformed JSON at byte offset 12"
printf '{"text": "ok"}\n\n' >"$tmp/empty.jsonl"
expect_error "empty line" "$tmp/empty.jsonl" "line 2: malformed JSON at byte offset 0"
printf '{"text": "ok"}\n{"text": "ok"}\n{"text": "caf\xc3"}\n' >"$tmp/bad_utf8.jsonl"
expect_error "invalid UTF-8" "$tmp/bad_utf8.jsonl" "line 3: invalid UTF-8 at byte offset 13"
printf '{"text": "a\\u00zz"}\n' >"$tmp/bad_escape.jsonl"
expect_error "bad \\u escape (cJSON alone reads it as U+0000)" "$tmp/bad_escape.jsonl" "line 1: malformed \\\\u escape at byte offset 11"
printf '{"text": "a"}\0\n' >"$tmp/nul.jsonl"
expect_error "raw NUL byte" "$tmp/nul.jsonl" "line 1: NUL byte at byte offset 13"
printf '{"title": "x"}\n' >"$tmp/no_key.jsonl"
expect_error "missing key" "$tmp/no_key.jsonl" 'line 1: no key "text"'
printf '{"text": 5}\n' >"$tmp/not_string.jsonl"
expect_error "key that is not a string" "$tmp/not_string.jsonl" 'line 1: no string value'
printf '[1, 2]\n[50257]\n' >"$tmp/bad_id.jsonl"
expect_error "id outside the vocabulary" "$tmp/bad_id.jsonl" "line 2: token id 50257" --decode
printf '[1.5]\n' >"$tmp/frac_id.jsonl"
expect_error "fractional id" "$tmp/frac_id.jsonl" "line 1: element 0 is not an integer" --decode

"$bin" tokenize --vocab-file "$src/data/gpt2/vocab.json" --input "$kjv" >/dev/null 2>&1
[ $? -ne 0 ]
report "missing --merge-file is an error" $?

[ $failed -eq 0 ] && echo "all passed"
exit $failed
