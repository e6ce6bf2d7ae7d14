#!/usr/bin/env bash
# Opt-in check of --tensorboard-dir against TensorBoard itself (not part of `make
# test`: it installs tensorboard from PyPI into a venv once). Trains a tiny model
# with --tensorboard-dir, reads the event file with tensorboard's
# EventAccumulator and checks that
#   - Megatron's tags are there (learning-rate, batch-size, lm loss, loss-scale,
#     grad-norm, each with its "vs samples" twin; lm loss validation and its ppl;
#     iteration-time and the timers),
#   - the per-iteration lm loss, averaged over each log interval, is the lm loss
#     the log line printed, and every validation loss is the one printed.
# usage: scripts/check_tensorboard_interop.sh [BUILD_DIR]   (TRIDENT=path overrides
#        the binary; TB_INTEROP_VENV the venv, default out/tb_interop/venv)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRIDENT:-$root/${1:-build}/trident}
out=$root/out/tb_interop
venv=${TB_INTEROP_VENV:-$out/venv}
[ -x "$bin" ] || { echo "no $bin: build first (make build)" >&2; exit 1; }
mkdir -p "$out"
if ! "$venv/bin/python" -c "import tensorboard" 2>/dev/null; then
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q tensorboard
fi
rm -rf "$out/run"
"$bin" train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 \
  --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --mock-data \
  --vocab-size 64 --train-iters 6 --log-interval 3 --eval-interval 3 --eval-iters 2 --clip-grad 1 \
  --tensorboard-dir "$out/run" --log-validation-ppl-to-tensorboard --log-timers-to-tensorboard \
  --timing-log-level 1 >"$out/train.log"
"$venv/bin/python" - "$out/run" "$out/train.log" <<'PY'
import math, re, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run, log = sys.argv[1], open(sys.argv[2]).read()
ea = EventAccumulator(run, size_guidance={"scalars": 0})
ea.Reload()
tags = set(ea.Tags()["scalars"])
want = {t + s for t in ["learning-rate", "batch-size", "lm loss", "loss-scale", "grad-norm",
                        "lm loss validation", "lm loss validation ppl"] for s in ["", " vs samples"]}
want |= {"iteration-time", "forward-backward-time", "optimizer-time"}
missing = want - tags
assert not missing, f"missing tags: {sorted(missing)}"
loss = [e.value for e in ea.Scalars("lm loss")]
printed = [float(x) for x in re.findall(r"\| lm loss: (\S+) \|", log)]
means = [sum(loss[i:i + 3]) / 3 for i in range(0, len(loss), 3)]
assert len(loss) == 6 and len(printed) == 2, (loss, printed)
for m, p in zip(means, printed):
    assert abs(m - p) <= 1e-6 * abs(p), f"interval mean {m} vs printed {p}"
valid = [e.value for e in ea.Scalars("lm loss validation")]
# the validation lines in order: iterations 3 and 6, then the end-of-run one (the test
# split's line comes last and is not written to TensorBoard)
pvalid = [float(x) for x in re.findall(r"lm loss value: (\S+)", log)][:len(valid)]
assert len(valid) == 3 and all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(valid, pvalid)), (valid, pvalid)
ppl = [e.value for e in ea.Scalars("lm loss validation ppl")]
assert all(abs(p - math.exp(v)) <= 1e-5 * p for p, v in zip(ppl, valid)), (ppl, valid)
print(f"ok: {len(tags)} tags; lm loss interval means {means} == printed {printed}; "
      f"validation {valid} == printed")
PY
