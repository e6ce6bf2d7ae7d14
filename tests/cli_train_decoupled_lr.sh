#!/usr/bin/env bash
# --decoupled-lr / --decoupled-min-lr (Megatron's): the word embeddings and the
# output layer train at a rate of their own, on the learning-rate schedule's
# steps with their own peak and floor.
# - At the same peak and floor the run is the run without the flags, bit for
#   bit (checkpoint files byte for byte), on one rank and with ZeRO-2 at DP=2.
# - The log line prints Megatron's "decoupled learning rate: X |" after the
#   learning rate, X on the schedule's shape: in the warmup lr x peak ratio,
#   after it the same fraction of the way from the floor to the peak.
# - At rate 0 those tensors do not move (tied and untied, ZeRO-2 at DP=2, Adam on
#   the host, its state on NVMe) while the position embeddings and the layers do.
# - --decoupled-min-lr without --decoupled-lr is refused.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
  --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --lr 2e-3
  --min-lr 2e-4 --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --mock-data
  --tokenizer-type NullTokenizer --vocab-size 96 --log-interval 1 --eval-iters 0 --seed 3
  --train-iters 6 --save-interval 3)
source "$(dirname "$0")/train_common.sh" # $tmp, fail, ok, run

# same_files A B WHAT: the checkpoints' tensor files of iteration 6, byte for byte
same_files() {
  local f ok_all=1
  for f in model.safetensors optim_dp000.safetensors; do
    cmp -s "$1/iter_0000006/mp_rank_00/$f" "$2/iter_0000006/mp_rank_00/$f" || ok_all=0
  done
  [ $ok_all = 1 ] && ok "$3: the same checkpoint, byte for byte" || fail "$3: checkpoints differ"
}

run 1 "$tmp/base.log" --save "$tmp/base"
run 1 "$tmp/same.log" --save "$tmp/same" --decoupled-lr 2e-3 --decoupled-min-lr 2e-4
same_files "$tmp/base" "$tmp/same" "--decoupled-lr = --lr, --decoupled-min-lr = --min-lr"
run 2 "$tmp/z2base.log" --save "$tmp/z2base" --micro-batch-size 1 --zero-stage 2
run 2 "$tmp/z2same.log" --save "$tmp/z2same" --micro-batch-size 1 --zero-stage 2 \
  --decoupled-lr 2e-3 --decoupled-min-lr 2e-4
same_files "$tmp/z2base" "$tmp/z2same" "ZeRO-2 at DP=2, --decoupled-lr = --lr"

# the printed rates: (lr, decoupled) per iteration against the schedule's shape
run 1 "$tmp/rates.log" --decoupled-lr 5e-3 --decoupled-min-lr 1e-5
sed -nE 's/.*iteration +([0-9]+)\/.* learning rate: ([^ ]+) \| decoupled learning rate: ([^ ]+) \| global.*/\1 \2 \3/p' \
  "$tmp/rates.log" >"$tmp/rates"
bad=$(awk '{ it = $1; lr = $2 + 0; d = $3 + 0
  if (it <= 2) want = lr * 5e-3 / 2e-3                            # warmup: lr x peak ratio
  else want = 1e-5 + (5e-3 - 1e-5) * (lr - 2e-4) / (2e-3 - 2e-4)  # the same fraction of the way
  r = (d - want) / want; if (r < 0) r = -r; if (r > 2e-5) print it, lr, d, want }' "$tmp/rates")
[ "$(wc -l <"$tmp/rates")" = 6 ] && [ -z "$bad" ] &&
  ok "the log line's decoupled learning rate follows the schedule: $(tr '\n' ';' <"$tmp/rates")" ||
  fail "decoupled rates ($(wc -l <"$tmp/rates") lines): $bad $(grep -m1 'iteration' "$tmp/rates.log")"

# rate 0: the word embeddings and the output layer stay as initialised
frozen() { # DIR WHAT: iteration 3's and 6's tensors compared
  python3 - "$1" "$2" <<'EOF'
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + hl])
    return {k: raw[8 + hl + v["data_offsets"][0]:8 + hl + v["data_offsets"][1]]
            for k, v in head.items() if k != "__metadata__"}
d, what = sys.argv[1], sys.argv[2]
a = tensors(d + "/iter_0000003/mp_rank_00/model.safetensors")
b = tensors(d + "/iter_0000006/mp_rank_00/model.safetensors")
group = ["embedding.word_embeddings.weight", "output_layer.weight"]
still = [k for k in group if k in a and a[k] == b[k]]
moved = [k for k in a if k not in group and a[k] != b[k]]
want = [k for k in group if k in a]
ok = still == want and "embedding.position_embeddings.weight" in moved and len(moved) == len(a) - len(want)
print(("ok    " if ok else "FAIL: ") + "%s: at --decoupled-lr 0 %s stay, %d other tensors move"
      % (what, ", ".join(still) or "nothing", len(moved)))
sys.exit(0 if ok else 1)
EOF
  [ $? = 0 ] || failed=1
}
run 1 "$tmp/zero.log" --save "$tmp/zero" --decoupled-lr 0 --decoupled-min-lr 0
frozen "$tmp/zero" "tied embeddings"
run 1 "$tmp/untied.log" --save "$tmp/untied" --decoupled-lr 0 --decoupled-min-lr 0 \
  --untie-embeddings-and-output-weights
frozen "$tmp/untied" "untied output layer"
run 2 "$tmp/z2zero.log" --save "$tmp/z2zero" --micro-batch-size 1 --zero-stage 2 \
  --decoupled-lr 0 --decoupled-min-lr 0
frozen "$tmp/z2zero" "ZeRO-2 at DP=2"

# the optimizer's other homes: Adam on the host (the sealed device's
# --cpu-optimizer) and its state streamed from files (ZeRO-Infinity's nvme)
run 1 "$tmp/host.log" --save "$tmp/host" --device sealed --cpu-optimizer --decoupled-lr 0 \
  --decoupled-min-lr 0
frozen "$tmp/host" "Adam on the host (sealed device, --cpu-optimizer)"
mkdir -p "$tmp/nvme"
echo "{\"train_batch_size\": 4, \"train_micro_batch_size_per_gpu\": 2, \"zero_optimization\":
  {\"stage\": 0, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"}}}" >"$tmp/ds.json"
run 1 "$tmp/nvme.log" --save "$tmp/nvmeck" --deepspeed --deepspeed_config "$tmp/ds.json" \
  --decoupled-lr 0 --decoupled-min-lr 0
frozen "$tmp/nvmeck" "Adam state on NVMe"

"$bin" train "${model[@]}" --decoupled-min-lr 1e-5 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 1 ] && grep -q "trident: error: --decoupled-min-lr needs --decoupled-lr" "$tmp/err" &&
  ok "--decoupled-min-lr without --decoupled-lr is refused" || fail "rc $rc: $(cat "$tmp/err")"

[ $failed -eq 0 ] && echo "all decoupled learning rate checks passed"
exit $failed
