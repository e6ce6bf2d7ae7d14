#!/usr/bin/env bash
# trident preprocess --partitions N, as Megatron's preprocess_data.py: the input is
# split by line into INPUT_i.jsonl files (round-robin, or runs of ceil(lines / N)
# with --keep-sequential-samples), each partition gets its own P_i_text_document,
# and the merged P_text_document is byte for byte the dataset of the partitions'
# lines concatenated (checked against a one-partition run over that reordered
# input, itself Megatron's bytes: cli_preprocess.sh); existing partition files are
# reused; a glob pattern names several inputs, "\r\n" lines among them; --workers
# not a multiple of N, stdin and a pattern that matches
# nothing are refused. Usage: cli_preprocess_partitions.sh TRIDENT_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
source "$(dirname "$0")/train_common.sh" # $tmp, ok, fail
pre=("$bin" preprocess --tokenizer-type GPT2BPETokenizer --vocab-file "$src/data/gpt2/vocab.json"
  --merge-file "$src/data/gpt2/merges.txt" --append-eod --log-interval 0)
same_dataset() { cmp -s "$1.bin" "$2.bin" && cmp -s "$1.idx" "$2.idx"; }
cd "$tmp" || exit 1
# 301 documents: a count no partition count below divides, and one empty text
head -300 "$src/data/corpus/kjv.jsonl" >in.jsonl
echo '{"text": ""}' >>in.jsonl

# Round-robin: line j goes to partition j mod 3.
"${pre[@]}" --input in.jsonl --output-prefix p3 --partitions 3 --workers 3 >p3.log 2>&1 ||
  fail "--partitions 3: exit $?: $(tail -2 p3.log)"
for r in 1 2 0; do awk -v r=$r 'NR % 3 == r' in.jsonl; done >rr.jsonl
"${pre[@]}" --input rr.jsonl --output-prefix rr >rr.log 2>&1 || fail "the reordered input: $(tail -2 rr.log)"
same_dataset p3_text_document rr_text_document &&
  ok "--partitions 3: the merged dataset is the round-robin order's, byte for byte" ||
  fail "--partitions 3: merged dataset differs from the round-robin order's"
cat in_0.jsonl in_1.jsonl in_2.jsonl | cmp -s - rr.jsonl &&
  ok "partition files in_0.jsonl .. in_2.jsonl hold lines j mod 3" || fail "partition files"
# documents in a .idx: its header's document count (magic 9, version 8, dtype 1,
# sequences 8, then document indices = documents + 1)
docs() { python3 -c 'import struct, sys; print(struct.unpack_from("<Q", open(sys.argv[1], "rb").read(), 26)[0] - 1)' "$1"; }
n0=$(docs p3_0_text_document.idx) n1=$(docs p3_1_text_document.idx) n2=$(docs p3_2_text_document.idx)
[ "$n0 $n1 $n2" = "101 100 100" ] && ok "each partition's own dataset is kept: 101, 100, 100 documents" ||
  fail "partition datasets hold $n0, $n1, $n2 documents, want 101, 100, 100"

# --keep-sequential-samples: runs of ceil(301 / 4) = 76 lines, the input's order.
"${pre[@]}" --input in.jsonl --output-prefix s4 --partitions 4 --workers 4 --keep-sequential-samples \
  >s4.log 2>&1 || fail "--keep-sequential-samples: exit $?: $(tail -2 s4.log)"
"${pre[@]}" --input in.jsonl --output-prefix one >one.log 2>&1 || fail "one partition: $(tail -2 one.log)"
# the 3-way split above left in_0..2 behind; a 4-way split writes in_0..3 afresh
[ "$(wc -l <in_0.jsonl)" = 76 ] && [ "$(wc -l <in_3.jsonl)" = 73 ] &&
  same_dataset s4_text_document one_text_document &&
  ok "--keep-sequential-samples --partitions 4: 76 + 76 + 76 + 73 lines, the one-partition dataset" ||
  fail "--keep-sequential-samples: $(wc -l in_?.jsonl | tr '\n' ' ')"

# Existing partition files are reused (Megatron does): edited, the output follows.
head -5 in_3.jsonl >in_3.edit && mv in_3.edit in_3.jsonl
"${pre[@]}" --input in.jsonl --output-prefix r4 --partitions 4 --workers 4 --keep-sequential-samples \
  >r4.log 2>&1 || fail "reuse: exit $?"
head -233 in.jsonl >cut.jsonl
"${pre[@]}" --input cut.jsonl --output-prefix cut >cut.log 2>&1
grep -q "exist: using them" r4.log && same_dataset r4_text_document cut_text_document &&
  ok "existing partition files are used as they are, with a note" ||
  fail "reuse: $(grep note r4.log)"

# A glob pattern: its files in sorted order; "\r\n" lines give the datasets of "\n" ones.
mkdir g && head -40 in.jsonl >g/b.jsonl && sed -n '41,90p' in.jsonl | sed 's/$/\r/' >g/a.jsonl
"${pre[@]}" --input 'g/*.jsonl' --output-prefix g2 --partitions 2 --workers 2 >g2.log 2>&1 ||
  fail "glob: exit $?: $(tail -2 g2.log)"
{ sed -n '41,90p' in.jsonl; head -40 in.jsonl; } >ab.jsonl
for r in 1 0; do awk -v r=$r 'NR % 2 == r' ab.jsonl; done >ab_rr.jsonl
"${pre[@]}" --input ab_rr.jsonl --output-prefix abrr >abrr.log 2>&1
[ -f 'g/*_0.jsonl' ] && same_dataset g2_text_document abrr_text_document &&
  ok "--input 'g/*.jsonl': a.jsonl (CRLF) then b.jsonl, partitions named g/*_i.jsonl as Megatron names them" ||
  fail "glob input: $(ls g)"

# Refusals: a non-zero exit naming the problem, no merged dataset.
expect_refusal() { # WHAT PATTERN ARGS...
  local what=$1 pat=$2
  shift 2
  "${pre[@]}" "$@" >bad.log 2>&1 && { fail "$what: exit 0"; return; }
  grep -q -- "$pat" bad.log && [ ! -e bad_text_document.idx ] && ok "$what: $(grep -m1 error bad.log)" ||
    fail "$what: $(cat bad.log)"
}
expect_refusal "--workers 2 --partitions 3" "not a multiple of --partitions 3" \
  --input in.jsonl --output-prefix bad --partitions 3 --workers 2
expect_refusal "stdin" "not stdin" --input - --output-prefix bad --partitions 2 --workers 2
expect_refusal "no match" "no file matches" --input 'nothing/*.jsonl' --output-prefix bad --partitions 2 --workers 2
exit $failed
