#!/usr/bin/env bash
# Resume is exact: 20 iterations straight and 10 + save + load + 10 print the same
# losses to the last digit (fp32 and bf16, dropout on), also with the model flags
# from the checkpoint (--use-checkpoint-args); --skip-train evaluates a checkpoint
# as the training run's end did; --save-retain-interval prunes the checkpoints
# between its multiples; the checkpoint has Megatron's layout; a damaged checkpoint is refused with a message and exit 1.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 3 --weight-decay 0.1 --clip-grad 1.0
  --hidden-dropout 0.1 --attention-dropout 0.1 --mock-data --tokenizer-type NullTokenizer
  --vocab-size 200 --log-interval 1 --eval-interval 1000 --eval-iters 0 --seed 7)

losses() { grep -oE 'iteration +[0-9]+/ +[0-9]+ .*lm loss: [^ ]+' "$1" | sed -E 's/^iteration +([0-9]+).*lm loss: ([^ ]+)/\1 \2/'; }

for prec in fp32 bf16 fp16; do
  extra=()
  [ "$prec" = bf16 ] && extra=(--bf16)
  [ "$prec" = fp16 ] && extra=(--fp16 --initial-loss-scale 65536 --loss-scale-window 4)
  d="$tmp/$prec"
  mkdir -p "$d"
  "$bin" train "${model[@]}" "${extra[@]}" --train-iters 20 >"$d/straight.log" 2>&1 ||
    fail "$prec straight run failed: $(tail -3 "$d/straight.log")"
  "$bin" train "${model[@]}" "${extra[@]}" --train-iters 20 --exit-interval 10 --save "$d/ckpt" \
    --save-interval 100 >"$d/first.log" 2>&1 || fail "$prec first half failed: $(tail -3 "$d/first.log")"
  "$bin" train "${model[@]}" "${extra[@]}" --train-iters 20 --load "$d/ckpt" --save "$d/ckpt" \
    --save-interval 100 >"$d/second.log" 2>&1 || fail "$prec second half failed: $(tail -3 "$d/second.log")"
  losses "$d/straight.log" >"$d/a"
  { losses "$d/first.log"; losses "$d/second.log"; } >"$d/b"
  if [ "$(wc -l <"$d/a")" -eq 20 ] && cmp -s "$d/a" "$d/b"; then
    ok "$prec: 20 straight == 10 + save + load + 10, bit for bit"
  else
    fail "$prec resume differs:"; diff "$d/a" "$d/b" | head -5
  fi
  first=$(head -1 "$d/a" | cut -d' ' -f2); last=$(tail -1 "$d/a" | cut -d' ' -f2)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' && ok "$prec: loss falls ($first -> $last)" ||
    fail "$prec: loss did not fall ($first -> $last)"
done

c="$tmp/fp32/ckpt"
[ "$(cat "$c/latest_checkpointed_iteration.txt")" = 20 ] && [ -f "$c/iter_0000010/mp_rank_00/model.safetensors" ] &&
  [ -f "$c/iter_0000020/mp_rank_00/optim_dp000.safetensors" ] && [ -f "$c/iter_0000020/metadata.json" ] &&
  ok "Megatron layout: latest=20, iter_0000010/ and iter_0000020/ with mp_rank_00/" || fail "checkpoint layout"

# The RNG state is read from rng_dp000.json unless --no-load-rng: a checkpoint
# whose saved seed is changed resumes with other dropout masks; with
# --no-load-rng it resumes from --seed, bit for bit; a missing file is refused.
r="$tmp/rng"
cp -r "$c" "$r" && rm -rf "$r/iter_0000020" && echo 10 >"$r/latest_checkpointed_iteration.txt"
rngf="$r/iter_0000010/mp_rank_00/rng_dp000.json"
grep -q '"seed": *7' "$rngf" && ok "rng_dp000.json holds the seed: $(cat "$rngf")" || fail "rng file: $(cat "$rngf")"
sed -i 's/"seed": *7/"seed": 99/' "$rngf"
tail -10 "$tmp/fp32/a" >"$tmp/rng_expect"
"$bin" train "${model[@]}" --train-iters 20 --load "$r" >"$tmp/out" 2>&1 || fail "rng resume: $(tail -3 "$tmp/out")"
losses "$tmp/out" >"$tmp/rng_got"
[ "$(wc -l <"$tmp/rng_got")" -eq 10 ] && ! cmp -s "$tmp/rng_expect" "$tmp/rng_got" &&
  ok "the saved seed is loaded: seed 99 in rng_dp000.json changes the dropout masks" ||
  fail "rng file not read: $(head -2 "$tmp/rng_got")"
"$bin" train "${model[@]}" --train-iters 20 --load "$r" --no-load-rng >"$tmp/out" 2>&1 || fail "--no-load-rng: $(tail -3 "$tmp/out")"
losses "$tmp/out" >"$tmp/rng_got"
cmp -s "$tmp/rng_expect" "$tmp/rng_got" && ok "--no-load-rng resumes from --seed, bit for bit" ||
  fail "--no-load-rng differs: $(diff "$tmp/rng_expect" "$tmp/rng_got" | head -3)"
rm "$rngf"
"$bin" train "${model[@]}" --train-iters 20 --load "$r" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "trident: error: .*rng_dp000.json.*--no-load-rng" "$tmp/err" &&
  ok "a missing RNG state is refused: $(head -c 200 "$tmp/err")" || fail "missing rng: rc $rc $(cat "$tmp/err")"

# --use-checkpoint-args (Megatron's): the model flags not given come from the
# checkpoint (sizes, sequence length, tokenizer type, vocabulary), so a resume
# that names only the training flags is the resume with every flag, bit for bit;
# a flag given is kept (and --load names the difference); no --load is refused.
u="$tmp/useargs"
cp -r "$c" "$u" && rm -rf "$u/iter_0000020" && echo 10 >"$u/latest_checkpointed_iteration.txt"
train_only=(--micro-batch-size 2 --global-batch-size 8 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
  --lr-warmup-iters 3 --weight-decay 0.1 --clip-grad 1.0 --mock-data --log-interval 1
  --eval-interval 1000 --eval-iters 0 --seed 7)
"$bin" train "${train_only[@]}" --train-iters 20 --load "$u" --use-checkpoint-args >"$tmp/out" 2>"$tmp/err" ||
  fail "--use-checkpoint-args resume: $(tail -3 "$tmp/out") $(cat "$tmp/err")"
losses "$tmp/out" >"$tmp/useargs_got"
tail -10 "$tmp/fp32/a" >"$tmp/useargs_expect"
cmp -s "$tmp/useargs_expect" "$tmp/useargs_got" &&
  grep -q "note: --use-checkpoint-args: from the checkpoint of iteration 10 in $u: --num-layers 2, --hidden-size 32,.* --seq-length 32,.* --tokenizer-type NullTokenizer,.* --vocab-size 200" "$tmp/err" &&
  ok "--use-checkpoint-args: the model flags from the checkpoint resume bit for bit ($(grep -o 'use-checkpoint-args: .*' "$tmp/err" | head -c 300))" ||
  fail "--use-checkpoint-args: $(diff "$tmp/useargs_expect" "$tmp/useargs_got" | head -3) $(cat "$tmp/err")"
"$bin" train "${train_only[@]}" --num-attention-heads 8 --train-iters 20 --load "$u" --use-checkpoint-args \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "trident: error: .*--num-attention-heads: 4 in the checkpoint, 8 in this run" "$tmp/err" &&
  ok "--use-checkpoint-args keeps a flag that is given: $(head -c 160 "$tmp/err")" ||
  fail "--use-checkpoint-args with a given flag: rc $rc $(cat "$tmp/err")"
"$bin" train "${train_only[@]}" --train-iters 20 --use-checkpoint-args >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "trident: error: --use-checkpoint-args needs --load" "$tmp/err" &&
  ok "--use-checkpoint-args without --load is refused" || fail "--use-checkpoint-args without --load: rc $rc $(cat "$tmp/err")"

# --skip-train (Megatron's): no training, the final evaluation of the loaded
# model: the validation and test lines the training run printed at its end,
# to the last digit (the validation samples continue from the checkpoint's
# count), and no checkpoint written.
e="$tmp/evalonly"
"$bin" train "${model[@]}" --train-iters 4 --eval-interval 2 --eval-iters 2 --save "$e" --save-interval 4 \
  >"$tmp/train4.log" 2>&1 || fail "--skip-train's training run: $(tail -3 "$tmp/train4.log")"
"$bin" train "${model[@]}" --train-iters 4 --eval-interval 2 --eval-iters 2 --load "$e" --skip-train \
  >"$tmp/skip.log" 2>&1 || fail "--skip-train: $(tail -3 "$tmp/skip.log")"
grep -E "on (validation|test) set" "$tmp/train4.log" >"$tmp/want_eval"
grep -E "on (validation|test) set" "$tmp/skip.log" >"$tmp/got_eval"
[ "$(wc -l <"$tmp/want_eval")" = 2 ] && cmp -s "$tmp/want_eval" "$tmp/got_eval" &&
  grep -q "skipping training (--skip-train is on)" "$tmp/skip.log" && ! grep -q "iteration *[0-9]*/" "$tmp/skip.log" &&
  [ "$(cat "$e/latest_checkpointed_iteration.txt")" = 4 ] && [ "$(ls "$e" | grep -c iter_)" = 1 ] &&
  ok "--skip-train: the end-of-training evaluation of the checkpoint, the same lines ($(grep -o 'lm loss value: [^ ]*' "$tmp/got_eval" | tr '\n' ' '))" ||
  fail "--skip-train: want $(cat "$tmp/want_eval") got $(grep -v note "$tmp/skip.log" | tail -4)"

# --save-retain-interval (Megatron's): saves every 2 iterations keeping those
# divisible by 4 and the latest: 2 and 6 are deleted once the next is written,
# the resume reads the latest; not a multiple of --save-interval is refused.
k="$tmp/retain"
"$bin" train "${model[@]}" --train-iters 10 --save "$k" --save-interval 2 --save-retain-interval 4 \
  >"$tmp/retain.log" 2>&1 || fail "--save-retain-interval run: $(tail -3 "$tmp/retain.log")"
kept=$(cd "$k" && ls -d iter_* | tr '\n' ' ')
[ "$kept" = "iter_0000004 iter_0000008 iter_0000010 " ] &&
  [ "$(grep -c 'successfully deleted checkpoint from iteration' "$tmp/retain.log")" = 2 ] &&
  grep -q "successfully deleted checkpoint from iteration       6 at $k" "$tmp/retain.log" &&
  [ "$(cat "$k/latest_checkpointed_iteration.txt")" = 10 ] &&
  ok "--save-retain-interval 4: kept $kept(2 and 6 deleted after the next save)" ||
  fail "--save-retain-interval: kept '$kept': $(grep -E 'saved|deleted' "$tmp/retain.log")"
"$bin" train "${model[@]}" --train-iters 12 --load "$k" >"$tmp/out" 2>&1 &&
  grep -q "iteration       12/" "$tmp/out" && ok "the pruned directory resumes from its latest" ||
  fail "resume after pruning: $(tail -2 "$tmp/out")"
"$bin" train "${model[@]}" --train-iters 10 --save "$k" --save-interval 2 --save-retain-interval 3 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 1 ] && grep -q "trident: error: --save-retain-interval 3 is not a multiple of --save-interval 2" "$tmp/err" &&
  ok "--save-retain-interval 3 with --save-interval 2 is refused" || fail "rc $rc: $(cat "$tmp/err")"

# Leaving early with a checkpoint, as Megatron does: --exit-duration-in-mins
# (a fraction here, to be quick) and --exit-signal-handler (SIGTERM, e.g. a
# scheduler's notice) finish the iteration, save with --save, exit 0.
long=(--train-iters 100000000 --save-interval 100000000)
"$bin" train "${model[@]}" "${long[@]}" --exit-duration-in-mins 0.005 --save "$tmp/exd" >"$tmp/out" 2>"$tmp/err"
rc=$?
it=$(sed -n 's/^exiting program after [0-9.]* minutes, at iteration \([0-9]*\)$/\1/p' "$tmp/out")
[ $rc -eq 0 ] && [ -n "$it" ] && [ "$(cat "$tmp/exd/latest_checkpointed_iteration.txt" 2>/dev/null)" = "$it" ] &&
  ok "--exit-duration-in-mins: saved iteration $it and exited 0" || fail "exit duration: rc $rc $(tail -2 "$tmp/out") $(cat "$tmp/err")"
"$bin" train "${model[@]}" "${long[@]}" --exit-signal-handler --save "$tmp/exs" >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 300); do grep -q 'iteration' "$tmp/out" && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
it=$(sed -n 's/^exiting program after receiving SIGTERM, at iteration \([0-9]*\)$/\1/p' "$tmp/out")
[ $rc -eq 0 ] && [ -n "$it" ] && [ "$(cat "$tmp/exs/latest_checkpointed_iteration.txt" 2>/dev/null)" = "$it" ] &&
  ok "--exit-signal-handler: SIGTERM -> saved iteration $it and exited 0" || fail "SIGTERM: rc $rc $(tail -2 "$tmp/out") $(cat "$tmp/err")"

# --no-save-optim / --no-save-rng write neither (a load then starts a fresh
# optimizer and keeps --seed); --exit-on-missing-checkpoint refuses an empty --load.
"$bin" train "${model[@]}" --train-iters 10 --exit-interval 2 --save "$tmp/nos" --save-interval 2 --no-save-optim --no-save-rng \
  >"$tmp/out" 2>&1 || fail "--no-save-optim run: $(tail -2 "$tmp/out")"
"$bin" train "${model[@]}" --train-iters 10 --exit-interval 3 --load "$tmp/nos" >"$tmp/out" 2>&1
rc=$?
[ ! -e "$tmp/nos/iter_0000002/mp_rank_00/optim_dp000.safetensors" ] &&
  [ "$(cat "$tmp/nos/iter_0000002/mp_rank_00/rng_dp000.json")" = "{}" ] && [ $rc -eq 0 ] &&
  grep -q "has no optimizer state (saved with --no-save-optim" "$tmp/out" &&
  ok "--no-save-optim / --no-save-rng: no Adam state, empty RNG state; loads with a fresh optimizer" ||
  fail "--no-save-optim: rc $rc $(ls "$tmp/nos/iter_0000002/mp_rank_00") $(tail -3 "$tmp/out")"
mkdir -p "$tmp/empty"
"$bin" train "${model[@]}" --train-iters 10 --load "$tmp/empty" --exit-on-missing-checkpoint >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "trident: error: --load .*empty: no latest_checkpointed_iteration.txt there" "$tmp/err" &&
  ok "--exit-on-missing-checkpoint: an empty --load is refused" || fail "missing checkpoint: rc $rc $(cat "$tmp/err")"

# Refusals: other model shape, truncated tensor file, damaged latest file.
"$bin" train "${model[@]}" --hidden-size 64 --train-iters 30 --load "$c" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "trident: error: .*--hidden-size: 32 in the checkpoint, 64 in this run" "$tmp/err" &&
  ok "a checkpoint of another shape is refused: $(head -c 200 "$tmp/err")" || fail "shape mismatch: rc $rc $(cat "$tmp/err")"
f="$c/iter_0000020/mp_rank_00/model.safetensors"
head -c 1000 "$f" >"$f.cut" && mv "$f.cut" "$f"
"$bin" train "${model[@]}" --train-iters 30 --load "$c" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "trident: error: .*model.safetensors" "$tmp/err" &&
  ok "a truncated checkpoint is refused: $(head -c 200 "$tmp/err")" || fail "truncated: rc $rc $(cat "$tmp/err")"
echo "twenty" >"$c/latest_checkpointed_iteration.txt"
"$bin" train "${model[@]}" --train-iters 30 --load "$c" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "trident: error: .*latest_checkpointed_iteration.txt" "$tmp/err" &&
  ok "a damaged latest file is refused" || fail "latest: rc $rc $(cat "$tmp/err")"

[ $failed -eq 0 ] && echo "all resume checks passed"
exit $failed
