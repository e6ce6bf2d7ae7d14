#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (issue #11): build trident with
# the CUDA backend in build-cuda/, run the GPU tests, benchmark, print a summary.
#   1. build: cmake -DTRIDENT_CUDA=ON (sm_80, sm_90 and PTX), warnings as errors,
#      with cuDNN's attention when the frontend's headers are in third_party/
#      (fetched here if missing and PyPI is reachable; else carry them over);
#   2. tests: test_device_cuda (every op against the CPU backend, odd sizes,
#      determinism, cuDNN's attention when it loads), test_rng_hostdev, cli_train_cuda.sh (CPU vs GPU training on
#      the demo model, checkpoints across devices, two ranks sharing the GPU,
#      generate; NCCL at one rank inside test_device_cuda),
#      cli_train_sealed.sh (the device-clean proof the GPU path rests on),
#      mpi_device_comm (device_comm on every path, the GPU's included), the
#      kernel tests on the CPU and on the GPU (their _cuda variants: the CPU's
#      double references and finite differences, TRIDENT_TEST_DEVICE=cuda) and
#      the model's gradient and PyTorch-parity tests on the GPU;
#   3. benchmarks: `trident bench kernels --device cuda` next to PyTorch's
#      matmul and SDPA at the same shapes (bench/gpu/peer_torch_kernels.py,
#      compare_kernels.py), and `trident bench train --device cuda` on GPT-2
#      124M, seq 1024, micro-batch 16, bf16 (also with TRIDENT_CUDA_FUSE=0, the
#      step without cuBLASLt's epilogues; with dropout 0.1; GPT-2 350M and
#      760M, Megatron's GPT-3 Medium and Large shapes; with 2+ GPUs,
#      bench/gpu/scaling.sh's DP equality and scaling), next to PyTorch on the
#      same GPU (bench/gpu/peer_torch_gpu.py), when a CUDA PyTorch is importable.
# JOBS=N runs N tests at a time (default 4; the GPU tests share the card);
# PEERS="1 0" names the PyTorch peers to run (torch.compile on, off; compiling
# costs about a minute).
# PREBUILT=1 skips the build and tests $BUILD as it is (built on another machine
# with the same toolkit: its ctest files name absolute paths, so the checkout
# must sit at the path it was built at, or a symbolic link must lead there).
# Logs go to $OUT (default out/gpu-check/); the summary is printed last. Exit 0
# when every test passed, 1 when one failed, 2 when there is no GPU to check.
# Needs what `make build` needs (scripts/install-deps.sh) plus the CUDA toolkit; on
# a GPU node without a package mirror, the libraries come from
# scripts/offline-deps.sh (unpack, then `. DIR/env.sh` before this script).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu-check}
build=${BUILD:-build-cuda}
mkdir -p "$out"
summary=()
note() { summary+=("$*"); echo "gpu-check: $*"; }

gpus=$(nvidia-smi -L 2>&1) || { echo "gpu-check: no NVIDIA GPU visible (nvidia-smi -L: $gpus)"; exit 2; }
note "GPU: $(echo "$gpus" | head -1)"
command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
# cuBLASLt is dlopened: the toolkit's folder where the loader's cache lacks it
if ! ldconfig -p | grep -q 'libcublasLt\.so\.' && [ -d /usr/local/cuda/lib64 ]; then
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# 1. build
if [ "${PREBUILT:-0}" = 1 ]; then
  [ -x "$build/trident" ] || { echo "gpu-check: PREBUILT=1 but no $build/trident"; exit 1; }
  note "build: $build/trident as built elsewhere (PREBUILT=1)"
else
  python3 scripts/fetch-cudnn-frontend.py --if-cuda || note "no cuDNN frontend headers: attention on trident's kernels only"
  if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_CUDA=ON &&
    cmake --build "$build" -j "$(nproc)"; } >"$out/build.log" 2>&1; then
    tail -30 "$out/build.log"
    note "build FAILED (see $out/build.log)"
    printf '%s\n' "" "== gpu-check summary ==" "${summary[@]}"
    exit 1
  fi
  note "build: $build/trident with the CUDA backend"
fi
bin=$build/trident
note "$("$bin" bench kernels --device cuda --only add --seconds 0.01 2>&1 | grep '^kernels:')"

# 2. tests
(cd "$build" && ctest -j "${JOBS:-4}" --output-on-failure --timeout 1800 \
  -R '^(test_device_cuda|test_rng_hostdev|cli_train_cuda|cli_train_sealed|mpi_device_comm_np.|test_kernel_.*|test_gpt_(parity|grad)_cuda)$') \
  >"$out/tests.log" 2>&1
rc_tests=$?
note "tests: $(grep -E 'tests passed|tests failed' "$out/tests.log" | tail -1)"
grep -E '^ *[0-9]+/[0-9]+ Test' "$out/tests.log" | sed 's/^/  /'
grep -E '^(ok|FAIL|SKIP)' "$out/tests.log" >"$out/checks.txt" || true
[ $rc_tests = 0 ] || note "FAILED checks: $(grep -c '^FAIL\|  FAIL' "$out/tests.log") (see $out/tests.log)"
if grep -qE '(test_device_cuda|cli_train_cuda|_cuda) .*Skipped' "$out/tests.log"; then
  note "the GPU tests were SKIPPED: trident saw no usable GPU (see $out/tests.log)"
  rc_tests=1
fi

# 3. benchmarks
"$bin" bench kernels --device cuda --json >"$out/bench_kernels.jsonl" 2>"$out/bench_kernels.err" ||
  note "bench kernels FAILED (see $out/bench_kernels.err)"
"$bin" bench train --device cuda --dtype bf16 --seq-len 1024 --micro-batch 16 --steps 10 \
  --warmup 3 --json >"$out/bench_train.jsonl" 2>"$out/bench_train.err"
t_ms=$(sed -n 's/.*"event": "summary".*"median_step_ms": \([0-9.]*\),.*/\1/p' "$out/bench_train.jsonl")
t_tok=$(sed -n 's/.*"event": "summary".*"tokens_per_s": \([0-9.]*\),.*/\1/p' "$out/bench_train.jsonl")
t_mem=$(sed -n 's/.*"event": "summary".*"max_mem_gib": \([-0-9.]*\)}.*/\1/p' "$out/bench_train.jsonl")
if [ -n "$t_ms" ]; then
  note "trident bench train, GPT-2 124M bf16 seq 1024 mbs 16: $t_ms ms/step, $t_tok tokens/s, peak memory $t_mem GiB"
else
  note "trident bench train FAILED: $(tail -3 "$out/bench_train.err")"
fi
# the same step with the GEMM epilogues off (the separate elementwise ops): what the
# fused forms are worth
TRIDENT_CUDA_FUSE=0 "$bin" bench train --device cuda --dtype bf16 --seq-len 1024 --micro-batch 16 \
  --steps 10 --warmup 3 --json >"$out/bench_train_unfused.jsonl" 2>"$out/bench_train_unfused.err"
u_ms=$(sed -n 's/.*"event": "summary".*"median_step_ms": \([0-9.]*\),.*/\1/p' "$out/bench_train_unfused.jsonl")
note "the same with TRIDENT_CUDA_FUSE=0 (no GEMM epilogues): ${u_ms:-FAILED} ms/step"
# with Megatron's default dropout (0.1, attention and hidden): attention on cuDNN with
# trident's masks
"$bin" bench train --device cuda --dtype bf16 --seq-len 1024 --micro-batch 16 --steps 10 \
  --warmup 3 --dropout 0.1 --json >"$out/bench_train_dropout.jsonl" 2>"$out/bench_train_dropout.err"
d_ms=$(sed -n 's/.*"event": "summary".*"median_step_ms": \([0-9.]*\),.*/\1/p' "$out/bench_train_dropout.jsonl")
note "the same with dropout 0.1 (attention and hidden): ${d_ms:-FAILED} ms/step"
# two or more GPUs: data-parallel equality and scaling over them (issue #12 item 5)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -ge 2 ]; then
  bench/gpu/scaling.sh --trident "$bin" --dtype bf16 >"$out/scaling.txt" 2>&1 ||
    note "bench/gpu/scaling.sh FAILED (see $out/scaling.txt)"
  note "$ngpu GPUs: $(grep -E '^DP=' "$out/scaling.txt" | tr '\n' ';'); $(grep -E '^(dpN|dpNwire|dpNz1ovl|tp2|pp2) ' "$out/scaling.txt" | awk '{ printf "%s %s ms %s, ", $1, $3, $5 }')"
fi
# Megatron's GPT-3 Medium and Large shapes (GPT-2 350M and 760M): ms/step and MFU
for size in "350M 24 1024 16" "760M 24 1536 16"; do
  read -r name layers hidden heads <<<"$size"
  "$bin" bench train --device cuda --dtype bf16 --seq-len 1024 --micro-batch 8 --steps 6 \
    --warmup 2 --num-layers "$layers" --hidden-size "$hidden" --num-heads "$heads" \
    >"$out/bench_train_$name.txt" 2>&1
  note "GPT-2 $name bf16 seq 1024 mbs 8: $(grep -E '^RESULT' "$out/bench_train_$name.txt" | sed 's/^RESULT //' | cut -c1-160)"
done
# PyTorch with the loader's own path: trident's unpacked libraries (offline-deps.sh's
# env.sh puts Debian's on LD_LIBRARY_PATH) are not for it
peer_python() { env -u LD_LIBRARY_PATH python3 "$@"; }
if peer_python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  # each GEMM and attention against PyTorch at the same shapes (issue #12's ratios)
  : >"$out/peer_kernels.jsonl"
  for dt in bf16 fp32; do
    peer_python bench/gpu/peer_torch_kernels.py --dtype $dt >>"$out/peer_kernels.jsonl" \
      2>"$out/peer_kernels_$dt.err" || true
  done
  python3 bench/gpu/compare_kernels.py "$out/bench_kernels.jsonl" "$out/peer_kernels.jsonl" \
    >"$out/compare_kernels.txt" 2>&1
  note "$(tail -1 "$out/compare_kernels.txt") (table: $out/compare_kernels.txt)"
  for c in ${PEERS-1 0}; do
    peer_python bench/gpu/peer_torch_gpu.py --mbs 16 --seq 1024 --compile $c >"$out/peer_compile$c.json" \
      2>"$out/peer_compile$c.err" || true
    p_ms=$(sed -n 's/.*"median_ms": \([0-9.]*\),.*/\1/p' "$out/peer_compile$c.json")
    p_tok=$(sed -n 's/.*"tokens_per_s": \([0-9]*\),.*/\1/p' "$out/peer_compile$c.json")
    p_mem=$(sed -n 's/.*"max_mem_gib": \([0-9.]*\).*/\1/p' "$out/peer_compile$c.json")
    if [ -n "$p_ms" ]; then
      ratio=$([ -n "$t_ms" ] && awk -v t="$t_ms" -v p="$p_ms" 'BEGIN { printf "; trident/PyTorch time %.2fx", t / p }')
      note "PyTorch (torch.compile=$c), same shapes: $p_ms ms/step, $p_tok tokens/s, peak memory $p_mem GiB$ratio"
    else
      note "PyTorch (torch.compile=$c) FAILED: $(tail -2 "$out/peer_compile$c.err")"
    fi
  done
else
  note "PyTorch with CUDA not importable: no peer numbers"
fi

printf '%s\n' "" "== gpu-check summary ==" "${summary[@]}"
[ $rc_tests = 0 ]
