#!/usr/bin/env bash
# A divergent run (learning rate 1e4) as Megatron handles it:
#   - fp32 and bf16, --check-for-nan-in-loss-and-grad (the default): the first NaN
#     loss stops the run with exit 1, naming the rank and the iteration; the
#     checkpoints saved before it are intact and load;
#   - the same under DP=2 and PP=2: the job ends (no rank left waiting);
#   - --no-check-for-nan-in-loss-and-grad: the NaN steps are skipped and counted as
#     "number of nan iterations", and the checkpoint written holds finite numbers;
#   - weights that an update made Inf are never saved (the save is refused);
#   - fp16: every overflowed step is skipped and the loss scale follows Megatron's
#     DynamicGradScaler (initial 2^32, hysteresis 2, backoff 0.5), recomputed here.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
src=$2
. "$src/tests/train_common.sh"

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e4
  --log-interval 1 --eval-iters 0 --mock-data --tokenizer-type NullTokenizer --vocab-size 200)

# stops WHAT NP LOG ARGS...: exit non-zero within 60 s with the NaN message.
stops() {
  local what=$1 np=$2 log=$3
  shift 3
  local t0=$SECONDS rc
  if [ "$np" = 1 ]; then
    OMP_NUM_THREADS=1 timeout -k 5 60 "$bin" train "${model[@]}" "$@" >"$log" 2>&1
  else
    OMP_NUM_THREADS=1 timeout -k 5 60 "$mpirun" --oversubscribe --allow-run-as-root -np "$np" \
      "$bin" train "${model[@]}" "$@" >"$log" 2>&1
  fi
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] &&
    grep -qE "error: rank [0-9]+, iteration [0-9]+: found (NaN|Inf) in local forward loss calculation" "$log"; then
    ok "$what: stops with exit $rc in $((SECONDS - t0)) s: $(grep -m1 -oE 'rank [0-9]+, iteration [0-9]+: found [A-Za-z]+' "$log")"
  else
    fail "$what: exit $rc, expected the NaN error: $(tail -3 "$log")"
  fi
}

# finite_checkpoint DIR: every F32 tensor of the latest checkpoint's model files is finite.
finite_checkpoint() {
  python3 - "$1" <<'EOF'
import glob, json, math, struct, sys
d = sys.argv[1]
it = int(open(d + "/latest_checkpointed_iteration.txt").read())
files = glob.glob("%s/iter_%07d/*/model.safetensors" % (d, it))
assert files, "no model.safetensors under " + d
n = 0
for f in files:
    raw = open(f, "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + hl])
    for name, t in head.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        vals = struct.unpack("<%df" % ((b - a) // 4), raw[8 + hl + a:8 + hl + b])
        bad = [v for v in vals if not math.isfinite(v)]
        assert not bad, "%s: %s holds %d non-finite values" % (f, name, len(bad))
        n += len(vals)
print(n)
EOF
}

for dt in fp32 bf16; do
  flag=()
  [ $dt = bf16 ] && flag=(--bf16)
  ck="$tmp/ck_$dt"
  stops "$dt" 1 "$tmp/$dt.log" "${flag[@]}" --train-iters 8 --save "$ck" --save-interval 1
  latest=$(cat "$ck/latest_checkpointed_iteration.txt" 2>/dev/null)
  stopped=$(grep -m1 -oE 'iteration [0-9]+: found' "$tmp/$dt.log" | grep -oE '[0-9]+')
  [ -n "$stopped" ] && [ "$latest" = $((stopped - 1)) ] &&
    ok "$dt: the last checkpoint is the iteration before the NaN ($latest)" ||
    fail "$dt: latest checkpoint '$latest', the run stopped at iteration '$stopped'"
  OMP_NUM_THREADS=1 timeout 60 "$bin" train "${model[@]}" "${flag[@]}" --train-iters "$latest" \
    --load "$ck" >"$tmp/$dt.load.log" 2>&1 &&
    ok "$dt: that checkpoint loads" || fail "$dt: the checkpoint does not load: $(tail -2 "$tmp/$dt.load.log")"
done

stops "fp32, DP=2" 2 "$tmp/dp2.log" --train-iters 8
stops "fp32, PP=2" 2 "$tmp/pp2.log" --train-iters 8 --pipeline-model-parallel-size 2

# Skip and count instead of stopping; the skipped steps leave the weights finite.
ck="$tmp/ck_nocheck"
run 1 "$tmp/nocheck.log" --train-iters 6 --no-check-for-nan-in-loss-and-grad --save "$ck" --save-interval 3
nan=$(grep -c "number of nan iterations:   1 |" "$tmp/nocheck.log")
[ "$nan" -ge 1 ] && ! grep -q "error" "$tmp/nocheck.log" &&
  ok "--no-check-for-nan-in-loss-and-grad: $nan of 6 iterations counted as nan and skipped" ||
  fail "--no-check-for-nan-in-loss-and-grad: $nan nan iterations: $(tail -2 "$tmp/nocheck.log")"
values=$(finite_checkpoint "$ck" 2>&1) && ok "its checkpoint holds $values finite values" ||
  fail "checkpoint after nan iterations: $values"

# An update that overflows the weights themselves (lr 1e39 is Inf in fp32): the save
# is refused and the earlier checkpoint stays the latest.
ck="$tmp/ck_inf"
run 1 "$tmp/inf0.log" --lr 1e-3 --train-iters 1 --save "$ck" --save-interval 1
OMP_NUM_THREADS=1 timeout 60 "$bin" train "${model[@]}" --lr 1e39 --train-iters 2 --load "$ck" \
  --save "$ck" --save-interval 1 --no-check-for-nan-in-loss-and-grad >"$tmp/inf.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "iteration 2: the parameters hold NaN or Inf values" "$tmp/inf.log" &&
  [ "$(cat "$ck/latest_checkpointed_iteration.txt")" = 1 ] && [ ! -e "$ck/iter_0000002" ] &&
  ok "non-finite weights: the save is refused (exit 1), latest stays 1" ||
  fail "non-finite weights: exit $rc, latest $(cat "$ck/latest_checkpointed_iteration.txt"): $(tail -2 "$tmp/inf.log")"

# fp16: every step overflows at these scales; the printed scale after each is the
# DynamicGradScaler's (hysteresis 2: the first overflow keeps the scale).
run 1 "$tmp/fp16.log" --fp16 --train-iters 6
grep -oE 'loss scale: [0-9.]+' "$tmp/fp16.log" | sed 's/.*: //' >"$tmp/fp16.scales"
awk 'BEGIN { s = 2^32; h = 2; for (i = 1; i <= 6; i++) { h--; if (h <= 0) s /= 2; printf "%.1f\n", s } }' \
  >"$tmp/fp16.want"
skipped=$(grep -c "number of skipped iterations:   1 | number of nan iterations:   0 |" "$tmp/fp16.log")
cmp -s "$tmp/fp16.scales" "$tmp/fp16.want" && [ "$skipped" = 6 ] &&
  ok "fp16: 6 overflowed steps skipped, scales $(paste -sd' ' "$tmp/fp16.scales")" ||
  fail "fp16: skipped $skipped, scales $(paste -sd' ' "$tmp/fp16.scales") against $(paste -sd' ' "$tmp/fp16.want")"

exit $failed
