#!/usr/bin/env bash
# Training on a CPU without AVX-512 (AMD Zen 2/3, Intel client cores), emulated on
# this one: trident's AVX2 kernels (TRIDENT_CPU_ISA=avx2), oneDNN capped at AVX2
# (ONEDNN_MAX_CPU_ISA=AVX2: no bf16 kernels, so bf16 products run as fp32 GEMMs
# on widened inputs) and OpenBLAS's Haswell kernels. fp32 and bf16 train to the
# losses of the widest ISA here within the kernels' rounding (1e-4 fp32; 2e-3
# bf16, where the GEMM libraries differ), with dropout (the masks are the same
# bits on every ISA), and the start-up summary names what ran.
# Skipped (77) on a CPU without AVX2, or one whose best ISA is AVX2 already (the
# default run of the suite covers it there).
# Arguments: the trident binary and the source directory.
set -u
bin=$1
grep -qw avx2 /proc/cpuinfo || { echo "SKIP: this CPU has no AVX2"; exit 77; }
grep -qw avx512f /proc/cpuinfo || { echo "SKIP: AVX2 is this CPU's best ISA already"; exit 77; }
model=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
  --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3
  --mock-data --tokenizer-type NullTokenizer --vocab-size 500 --log-interval 1 --eval-iters 0
  --seed 11 --train-iters 20 --hidden-dropout 0.1 --attention-dropout 0.1)
source "$(dirname "$0")/train_common.sh"
export TRIDENT_GEMM_CACHE="$tmp/gemm.json"
avx2=(env TRIDENT_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell)

for dt in fp32 bf16; do
  flag=()
  [ $dt = bf16 ] && flag=(--bf16)
  run 1 "$tmp/best_$dt.log" "${flag[@]}"
  OMP_NUM_THREADS=1 timeout -k 5 120 "${avx2[@]}" "$bin" train "${model[@]}" "${flag[@]}" \
    >"$tmp/avx2_$dt.log" 2>&1 || fail "$dt on AVX2: exit $?: $(tail -3 "$tmp/avx2_$dt.log")"
  tol=1e-4
  [ $dt = bf16 ] && tol=2e-3
  same "$tmp/best_$dt.log" "$tmp/avx2_$dt.log" $tol "$dt, AVX2 against the widest ISA"
  grep -q "kernels: elementwise and attention on avx2" "$tmp/avx2_$dt.log" &&
    ok "$dt: the summary names the AVX2 kernels" ||
    fail "$dt: no 'kernels: ... on avx2' line: $(grep 'kernels:' "$tmp/avx2_$dt.log")"
done
grep -q "its bf16 products run as fp32 GEMMs on inputs widened to fp32" "$tmp/avx2_bf16.log" &&
  ok "bf16 on AVX2: the summary says the bf16 products run widened to fp32" ||
  fail "bf16 on AVX2: no widened-GEMM note: $(grep 'GEMM:' "$tmp/avx2_bf16.log")"
exit $failed
