#!/usr/bin/env bash
# The values of --log-optimizer-states-to-tensorboard (Megatron-DeepSpeed's 12
# optimizer/ scalars), computed again from the checkpoint of the same iteration:
#  - one rank, fp32: every scalar at iterations 4 and 8 equals the statistic of
#    the checkpoint's Adam state (exp_avg, exp_avg_sq) and fp32 weights, computed
#    here in double (Python, standard library only), within float32 rounding
#    (TensorBoard stores simple_value as a float):
#    variance_l2 = ||v||_2, variance_sqrt_l2 = ||sqrt v||_2, momentum_l2 = ||m||_2,
#    weight_l2 = ||w||_2, the same four as L1 norms, and the four max-abs values;
#  - the "vs tokens" copies carry the same values at step = consumed tokens;
#  - DP 2 with ZeRO-1 (the state sharded), TP 2 with sequence parallelism and
#    PP 2 give the one-rank values within 1e-4 relative: each element is counted
#    once (the replicated LayerNorm and bias tensors on TP rank 0 only, the tied
#    embedding copy on the first stage only; Megatron-DeepSpeed counts replicated
#    tensors once per TP rank, which makes the figures depend on the layout).
# Arguments: the trident binary and the source directory.
set -u
bin=$1
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 3 --weight-decay 0.1 --clip-grad 1.0
  --mock-data --tokenizer-type NullTokenizer --vocab-size 500 --log-interval 4
  --eval-interval 100 --eval-iters 1 --seed 7 --train-iters 8 --log-optimizer-states-to-tensorboard
  --tensorboard-log-interval 4 --save-interval 4)
source "$(dirname "$0")/train_common.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 not found (scripts/install-deps.sh installs it)"; exit 1; }

# stats.py tb DIR: "STEP TAG VALUE" for every optimizer/ scalar of the event file
# stats.py ckpt DIR ITER: "ITER TAG VALUE" computed from the checkpoint
cat >"$tmp/stats.py" <<'PY'
import glob, json, math, struct, sys

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7F) << s; s += 7
        if c < 0x80: return v, i

def fields(b):  # (field, wire type, value) of a protobuf message
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, t = key >> 3, key & 7
        if t == 0: v, i = varint(b, i)
        elif t == 1: v = b[i:i + 8]; i += 8
        elif t == 5: v = b[i:i + 4]; i += 4
        elif t == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else: raise ValueError("wire type %d" % t)
        yield f, t, v

def tb(d):
    for path in glob.glob(d + "/events.out.tfevents.*"):
        raw = open(path, "rb").read()
        i = 0
        while i < len(raw):
            n = struct.unpack("<Q", raw[i:i + 8])[0]
            ev = raw[i + 12:i + 12 + n]
            i += 12 + n + 4
            step, values = 0, []
            for f, t, v in fields(ev):
                if f == 2: step = v
                if f == 5:
                    for f2, t2, v2 in fields(v):
                        if f2 != 1: continue
                        tag = val = None
                        for f3, t3, v3 in fields(v2):
                            if f3 == 1: tag = v3.decode()
                            if f3 == 2 and t3 == 5: val = struct.unpack("<f", v3)[0]
                        if tag and tag.startswith("optimizer/") and val is not None:
                            values.append((tag, val))
            for tag, val in values:
                print(step, tag.replace(" ", "_"), repr(val))

def tensors(path):
    raw = open(path, "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + hl])
    for name, t in head.items():
        if name == "__metadata__": continue
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32", name
        yield name, struct.unpack("<%df" % ((b - a) // 4), raw[8 + hl + a:8 + hl + b])

def ckpt(d, it):
    rank = "%s/iter_%07d/mp_rank_00" % (d, it)
    w = dict(tensors(rank + "/model.safetensors"))
    o = dict(tensors(rank + "/optim_dp000.safetensors"))
    s = [0.0] * 8
    mx = [0.0] * 4
    for name, wt in w.items():
        m, v = o[name + ".exp_avg"], o[name + ".exp_avg_sq"]
        for k in range(len(wt)):
            x = (abs(v[k]), math.sqrt(abs(v[k])), abs(m[k]), abs(wt[k]))
            for j in range(4):
                s[j] += x[j] * x[j]; s[4 + j] += x[j]
                if x[j] > mx[j]: mx[j] = x[j]
    names = ["variance_l2", "variance_sqrt_l2", "momentum_l2", "weight_l2", "variance_l1",
             "variance_sqrt_l1", "momentum_l1", "weight_l1", "variance_abs_max",
             "variance_sqrt_abs_max", "momentum_abs_max", "weight_abs_max"]
    for k, n in enumerate(names):
        val = math.sqrt(s[k]) if k < 4 else s[k] if k < 8 else mx[k - 8]
        print(it, "optimizer/" + n, repr(val))

if sys.argv[1] == "tb": tb(sys.argv[2])
else: ckpt(sys.argv[2], int(sys.argv[3]))
PY

# A checkpoint's iteration directory needs model and optimizer files of one
# model-parallel rank: the one-rank run.
run 1 "$tmp/one.log" --save "$tmp/ck1" --tensorboard-dir "$tmp/tb1"
python3 "$tmp/stats.py" tb "$tmp/tb1" | sort >"$tmp/tb1.txt" ||
  fail "reading the one-rank TensorBoard events"
for it in 4 8; do
  python3 "$tmp/stats.py" ckpt "$tmp/ck1" $it >>"$tmp/ck1.txt" || fail "reading checkpoint $it"
done
# the iteration-stepped tags against the checkpoint: 12 tags x 2 iterations
worst=$(awk 'NR == FNR { want[$1 " " $2] = $3; next }
  ($1 " " $2) in want { n++; d = $3 - want[$1 " " $2]; if (d < 0) d = -d
    r = d / (want[$1 " " $2] > 0 ? want[$1 " " $2] : 1); if (r > w) w = r }
  END { printf "%d %.3g", n, w }' "$tmp/ck1.txt" "$tmp/tb1.txt")
[ "${worst%% *}" = 24 ] && awk -v w="${worst#* }" 'BEGIN { exit !(w < 1e-6) }' &&
  ok "one rank: the 12 scalars at iterations 4 and 8 equal the checkpoint's statistics (worst relative difference ${worst#* }; e.g. $(grep '^8 optimizer/weight_l2 ' "$tmp/ck1.txt" | cut -d' ' -f2-))" ||
  fail "one rank: matched/worst '$worst'; TensorBoard: $(head -3 "$tmp/tb1.txt"); checkpoint: $(head -3 "$tmp/ck1.txt")"
# the "vs tokens" copies: the same values at step = consumed tokens (8 x 32 per iteration)
vs=$(awk '$2 ~ /_vs_tokens$/ { t = $2; sub(/_vs_tokens$/, "", t); key = ($1 / 256) " " t; v[key] = $3; next }
  { plain[$1 " " $2] = $3 } END { for (k in v) { n++; if (!(k in plain) || plain[k] != v[k]) bad++ }
    printf "%d %d", n, bad }' "$tmp/tb1.txt")
[ "$vs" = "24 0" ] && ok "the 'vs tokens' copies: the same 24 values at step = consumed tokens" ||
  fail "'vs tokens' copies: count/mismatches '$vs'"

# compare LABEL LOG-ARGS...: another layout's scalars against the one-rank run's
compare() {
  local label=$1 np=$2
  shift 2
  run "$np" "$tmp/$label.log" --tensorboard-dir "$tmp/tb_$label" "$@"
  python3 "$tmp/stats.py" tb "$tmp/tb_$label" | sort >"$tmp/tb_$label.txt"
  local w
  w=$(awk 'NR == FNR { want[$1 " " $2] = $3; next } ($1 " " $2) in want { n++; d = $3 - want[$1 " " $2]
    if (d < 0) d = -d; r = d / (want[$1 " " $2] > 0 ? want[$1 " " $2] : 1); if (r > w) w = r }
    END { printf "%d %.3g", n, w }' "$tmp/tb1.txt" "$tmp/tb_$label.txt")
  [ "${w%% *}" = 48 ] && awk -v w="${w#* }" 'BEGIN { exit !(w < 1e-4) }' &&
    ok "$label: the 48 scalars equal the one-rank run's (worst relative difference ${w#* })" ||
    fail "$label: matched/worst '$w'"
}
compare dp2_zero1 2 --use-distributed-optimizer
compare tp2_sp 2 --tensor-model-parallel-size 2 --sequence-parallel
compare pp2 2 --pipeline-model-parallel-size 2
compare tp2_pp2 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2

exit $failed
