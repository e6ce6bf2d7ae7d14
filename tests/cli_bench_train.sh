#!/usr/bin/env bash
# `trident bench train --json` (issue #14 item 4, issue #12 item 4) on a small
# GPT, fp32 and bf16, with whole logits and with logits in chunks: one config
# event, a step event per step (warm-up marked) with a finite loss near
# ln(vocab) at initialisation, the GEMM ceiling's products, and a summary whose
# figures agree with each other: tokens/s = tokens / median step, model TFLOP/s
# = the model's FLOPs per step / median step, MFU = TFLOP/s / the ceiling, and
# the peak device memory (the peer's max_mem_gib) at least the parameters,
# gradients and Adam state; then phases whose fractions sum to 1, and the GEMM
# libraries that ran (the CPU's gemm_choice event); bench/thread_scaling.sh's
# table on 1 and 2 threads. A bad flag exits 1 naming it. Arguments: the
# trident binary and the source directory.
set -u
bin=$1
source "$(dirname "$0")/train_common.sh" # $tmp, ok, fail

small=(--num-layers 2 --hidden-size 64 --num-heads 2 --vocab 1000 --seq-len 32 --micro-batch 2
  --steps 3 --warmup 1 --json)
check() { # LOG WHAT
  python3 - "$1" <<'EOF' && ok "$2: $(tail -1 "$1.check")" || { fail "$2: $(cat "$1.check")"; }
import json, math, sys
path = sys.argv[1]
out = open(path + ".check", "w")
ev = [json.loads(l) for l in open(path)]
kinds = [e["event"] for e in ev]
cfg = next(e for e in ev if e["event"] == "config")
steps = [e for e in ev if e["event"] == "step"]
s = next(e for e in ev if e["event"] == "summary")
phases = [e for e in ev if e["event"] == "phase"]
tokens = cfg["seq_len"] * cfg["micro_batch"]
C, L, V, T = cfg["hidden"], cfg["layers"], cfg["padded_vocab"], cfg["seq_len"]
params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
problems = []
if kinds.count("config") != 1: problems.append("config events %d" % kinds.count("config"))
if [e["warmup"] for e in steps] != [True, False, False, False]: problems.append("step events %s" % steps)
if not all(math.isfinite(e["loss"]) and abs(e["loss"] - math.log(1000)) < 1.0 for e in steps):
    problems.append("losses %s" % [e["loss"] for e in steps])
if kinds.count("gemm") < 3: problems.append("gemm events %d" % kinds.count("gemm"))
med = s["median_step_ms"] / 1e3
if not (med > 0 and abs(s["tokens_per_s"] * med / tokens - 1) < 0.06):
    problems.append("tokens/s %s vs %d tokens / %s s" % (s["tokens_per_s"], tokens, med))
if not (s["model_tflops"] > 0 and abs(s["mfu"] * s["gemm_ceiling_gflops"] / 1e3 / s["model_tflops"] - 1) < 0.06):
    problems.append("mfu %s, ceiling %s, tflops %s" % (s["mfu"], s["gemm_ceiling_gflops"], s["model_tflops"]))
if not s["max_mem_bytes"] >= 16 * params:
    problems.append("peak memory %s < parameters, gradients, Adam m and v (%d bytes)" % (s["max_mem_bytes"], 16 * params))
if abs(sum(p["fraction"] for p in phases) - 1) > 0.02: problems.append("phase fractions %s" % phases)
choice = [e["gemm_choice"] for e in ev if e["event"] == "gemm_choice"]
if len(choice) != 1 or not (choice[0].startswith("fp32 ") and ", bf16 " in choice[0]):
    problems.append("gemm_choice events %s (want one naming the fp32 and bf16 libraries)" % choice)
print("; ".join(problems) if problems else
      "%d steps, %.1f ms/step, %.0f tokens/s, MFU %.2f, peak %.2f MiB (>= %.2f MiB of model state)"
      % (len(steps), s["median_step_ms"], s["tokens_per_s"], s["mfu"], s["max_mem_bytes"] / 2**20,
         16 * params / 2**20), file=out)
sys.exit(1 if problems else 0)
EOF
}

for dtype in fp32 bf16; do
  OMP_NUM_THREADS=1 "$bin" bench train "${small[@]}" --dtype $dtype >"$tmp/$dtype.log" 2>"$tmp/$dtype.err" ||
    fail "bench train --dtype $dtype: exit $?: $(tail -2 "$tmp/$dtype.err")"
  check "$tmp/$dtype.log" "bench train --dtype $dtype"
done
OMP_NUM_THREADS=1 "$bin" bench train "${small[@]}" --logits-chunk-tokens 24 >"$tmp/chunk.log" 2>"$tmp/chunk.err" ||
  fail "bench train --logits-chunk-tokens 24: exit $?"
check "$tmp/chunk.log" "bench train, logits 24 tokens at a time"
# A user's OPENBLAS_CORETYPE is theirs, even a pre-AVX family that trident would
# otherwise replace (without it, on a CPU OpenBLAS does not know, the line says so).
OPENBLAS_CORETYPE=Nehalem OMP_NUM_THREADS=1 "$bin" bench train "${small[@]}" --steps 1 --warmup 0 \
  >"$tmp/coretype.log" 2>&1 || fail "bench train with OPENBLAS_CORETYPE=Nehalem: exit $?"
grep -q '"gemm_choice"' "$tmp/coretype.log" && ! grep -q "trident set OPENBLAS_CORETYPE" "$tmp/coretype.log" &&
  ok "OPENBLAS_CORETYPE=Nehalem is left alone" ||
  fail "OPENBLAS_CORETYPE=Nehalem: $(grep gemm_choice "$tmp/coretype.log")"
# bench/thread_scaling.sh (issue #14 item 2's table) on the small model: a row per
# thread count with its step time, the 2-thread row 1.00x of itself, each phase.
src=$2
bash "$src/bench/thread_scaling.sh" --trident "$bin" --dtype fp32 --threads "1 2" --steps 2 \
  --model "--num-layers 2 --hidden-size 64 --num-heads 2 --vocab 1000 --seq-len 32 --micro-batch 2" \
  >"$tmp/scaling.txt" 2>&1 || fail "bench/thread_scaling.sh: exit $?: $(tail -2 "$tmp/scaling.txt")"
awk '$1 == 1 && $2 > 0 && $5 == "1.00x" { one = 1 }
     $1 == 2 && $2 > 0 && $4 == "1.00x" && $6 > 0 && $9 > 0 { two = 1 }
     END { exit !(one && two) }' "$tmp/scaling.txt" &&
  ok "bench/thread_scaling.sh: rows for 1 and 2 threads" ||
  { fail "bench/thread_scaling.sh's table:"; cat "$tmp/scaling.txt"; }
"$bin" bench train --steps 0 >"$tmp/bad.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "\-\-steps '0': expected an integer >= 1" "$tmp/bad.log" &&
  ok "--steps 0 is refused: $(head -1 "$tmp/bad.log")" || fail "--steps 0: exit $rc: $(head -2 "$tmp/bad.log")"
exit $failed
