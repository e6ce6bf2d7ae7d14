#!/usr/bin/env bash
# trident vs PyTorch side by side on the same GPT (default GPT-2 124M, seq 256,
# micro-batch 4): `trident bench train` and bench/run_peer_torch.sh (plain
# PyTorch GPT-2 in its fastest setting here), alternated for several rounds in one
# session; prints each run's median step time and tokens/s and the round's ratio,
# then the medians over the rounds, the ratio trident / PyTorch in tokens/s, and
# the median of the rounds' ratios.
#
# Usage: bench/compare_torch.sh [--trident BIN] [--rounds R] [--dtype fp32|bf16]
#          [--seq-len T] [--micro-batch B] [--threads P] [--steps N] [--warmup W]
#          [--peer debian|pypi|pypi-compile] [--wait-idle] [--as-avx2]
#   --peer        which PyTorch (default debian): Debian's torch 1.13 in its fastest setting
#                 here (bench/run_peer_torch.sh), or the newest torch from PyPI in a venv
#                 ($TORCH_VENV, default ~/.cache/trident/torch-pypi; made with `pip install
#                 torch numpy` on first use; plain, as a user runs it), eager or under
#                 torch.compile (its warm-up steps hold the compilation)
#   --wait-idle   before each run, wait until the machine has been idle (less than 15% of
#                 one CPU busy) for 3 s (shared machines: a neighbour's job skews a run)
#   --as-avx2     both sides as on a CPU without AVX-512 (AMD Zen 2/3): trident's AVX2
#                 kernels (TRIDENT_CPU_ISA=avx2), oneDNN capped at AVX2 for both
#                 (ONEDNN_MAX_CPU_ISA), OpenBLAS's Haswell kernels, MKL and ATen at AVX2
#                 (MKL_ENABLE_INSTRUCTIONS, ATEN_CPU_CAPABILITY); trident's GEMM choices
#                 then go to their own cache file
set -eu
here=$(cd "$(dirname "$0")" && pwd)
trident=$here/../build/trident
peer=$here/run_peer_torch.sh
rounds=3 dtype=fp32 seq=256 mb=4 threads=2 steps=6 warmup=2 wait_idle=0 peer_kind=debian
while [ $# -gt 0 ]; do
  case $1 in
    --trident) trident=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --seq-len) seq=$2; shift 2 ;;
    --micro-batch) mb=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --wait-idle) wait_idle=1; shift ;;
    --peer) peer_kind=$2; shift 2 ;;
    --as-avx2)
      export TRIDENT_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell
      export MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2
      shift ;;
    *) echo "compare_torch.sh: unknown flag '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -x "$trident" ] || { echo "compare_torch.sh: no trident binary at $trident (--trident BIN)" >&2; exit 2; }
peer_args=()
case $peer_kind in
  debian) ;;
  pypi | pypi-compile)
    venv=${TORCH_VENV:-$HOME/.cache/trident/torch-pypi}
    if ! "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; then
      echo "compare_torch.sh: installing torch and numpy from PyPI into $venv" >&2
      python3 -m venv "$venv" && "$venv/bin/pip" install -q torch numpy ||
        { echo "compare_torch.sh: could not install torch from PyPI into $venv" >&2; exit 1; }
    fi
    peer=$venv/bin/python
    peer_args=("$here/peer_torch.py")
    [ "$peer_kind" = pypi-compile ] && peer_args+=(--compile)
    ;;
  *) echo "compare_torch.sh: --peer '$peer_kind': want debian, pypi or pypi-compile" >&2; exit 2 ;;
esac

# CPU time (all CPUs, in clock ticks) spent busy and in total, from /proc/stat
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat; }

wait_for_idle() {
  local quiet=0 b0 t0 b1 t1 ncpu
  ncpu=$(nproc)
  while [ $quiet -lt 3 ]; do
    read -r b0 t0 < <(cpu_ticks)
    sleep 1
    read -r b1 t1 < <(cpu_ticks)
    if awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) -v n="$ncpu" 'BEGIN {exit !(t > 0 && b / t * n < 0.15)}'; then
      quiet=$((quiet + 1))
    else
      quiet=0
    fi
  done
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
tps() { awk -v n="$tokens" -v ms="$1" 'BEGIN {printf "%.1f", n / ms * 1000}'; }

tokens=$((seq * mb))
echo "GPT-2 124M (12 x 768, 12 heads, vocab 50257), seq $seq, micro-batch $mb, $dtype, $threads threads, $rounds rounds, peer: $peer_kind${TRIDENT_CPU_ISA:+, TRIDENT_CPU_ISA=$TRIDENT_CPU_ISA}"
t_ms=() p_ms=() r_x=()
for r in $(seq 1 "$rounds"); do
  [ $wait_idle = 1 ] && wait_for_idle
  p=$("$peer" "${peer_args[@]}" --n-layer 12 --n-head 12 --n-embd 768 --seq-len "$seq" --micro-batch "$mb" \
        --vocab 50257 --steps $((steps + warmup)) --warmup "$warmup" --dtype "$dtype" \
        --threads "$threads" | sed -n 's/^RESULT median over [0-9]* steps.*: \([0-9.]*\) ms\/step.*/\1/p')
  [ $wait_idle = 1 ] && wait_for_idle
  t=$("$trident" bench train --device cpu --dtype "$dtype" --seq-len "$seq" --micro-batch "$mb" \
        --threads "$threads" --steps "$steps" --warmup "$warmup" --json |
      sed -n 's/.*"event": "summary".*"median_step_ms": \([0-9.]*\),.*/\1/p')
  [ -n "$p" ] && [ -n "$t" ] || { echo "compare_torch.sh: a run printed no result" >&2; exit 1; }
  p_ms+=("$p") t_ms+=("$t")
  r_x+=("$(awk -v p="$p" -v t="$t" 'BEGIN {printf "%.3f", p / t}')")
  printf "round %d: PyTorch %8.1f ms/step (%6s tokens/s) | trident %8.1f ms/step (%6s tokens/s) | %sx\n" \
    "$r" "$p" "$(tps "$p")" "$t" "$(tps "$t")" "${r_x[-1]}"
done
pm=$(printf '%s\n' "${p_ms[@]}" | median)
tm=$(printf '%s\n' "${t_ms[@]}" | median)
printf "median: PyTorch %.1f ms/step (%s tokens/s) | trident %.1f ms/step (%s tokens/s) | trident / PyTorch = %sx\n" \
  "$pm" "$(tps "$pm")" "$tm" "$(tps "$tm")" "$(awk -v p="$pm" -v t="$tm" 'BEGIN {printf "%.2f", p / t}')"
# Each round's ratio pairs two runs minutes apart: on a shared machine whose speed
# drifts, their median is the steadier figure.
printf "median of the rounds' ratios: %.2fx (rounds: %s)\n" "$(printf '%s\n' "${r_x[@]}" | median)" "${r_x[*]}"
