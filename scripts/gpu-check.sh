#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (issue #11): build trident with
# the CUDA backend in build-cuda/, run the GPU tests, benchmark, print a summary.
#   1. build: cmake -DTRIDENT_CUDA=ON (sm_80, sm_90 and PTX), warnings as errors,
#      with cuDNN's attention when the frontend's headers are in third_party/
#      (fetched here if missing and PyPI is reachable; else carry them over);
#   2. tests: test_device_cuda (every op against the CPU backend, odd sizes,
#      determinism, cuDNN's attention when it loads), cli_train_cuda.sh (CPU vs GPU training on
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
#      124M, seq 1024, micro-batch 16, bf16 (also op by op with --breakdown 1,
#      with TRIDENT_CUDA_FUSE=0, the
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
# BUDGET_S=N (default 540: a lent machine runs one command for at most 600 s) is
# the time the script may take: the stages run in order of what they decide (the
# tests, the step next to PyTorch compiled, then the rest), each only when its
# estimate fits in what is left, and the summary names every stage skipped for
# time. The tests run under a timeout of what is left less the step's minute.
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
budget=${BUDGET_S:-540}
left() { echo $((budget - SECONDS)); }
# fits EST NAME: 0 when a stage estimated at EST seconds fits in what is left, else
# a note that NAME was skipped
fits() {
  [ "$(left)" -ge "$1" ] && return 0
  note "SKIPPED for time: $2 (needs ~$1 s, $(left) s left of BUDGET_S=$budget)"
  return 1
}

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

# 2. tests: the GPU's own first, then the CPU kernel tests on this machine's CPU
# (two runs: ctest orders a run by the costs it recorded, and a build carried from
# a machine without a GPU recorded the GPU tests as instant skips), both within
# what is left less ~90 s for the step and its PyTorch peer
t_tests=$(($(left) - 90))
[ "$t_tests" -ge 60 ] || t_tests=60
t_end=$((SECONDS + t_tests))
run_tests() { # REGEX [CTEST ARGS]: ctest on the tests REGEX matches, until t_end (appends to tests.log)
  local t=$((t_end - SECONDS))
  [ "$t" -ge 10 ] || { echo "not run (time budget): $1" >>"$out/tests.log"; return 124; }
  (cd "$build" && timeout -k 10 "$t" ctest -j "${JOBS:-4}" --output-on-failure --timeout "$t" -R "$@") \
    >>"$out/tests.log" 2>&1
}
: >"$out/tests.log"
run_tests '^(test_device_cuda|cli_train_cuda|cli_train_sealed|mpi_device_comm_np.|test_kernel_.*_cuda|test_gpt_(parity|grad|forward_rows)_cuda)$'
rc_gpu=$?
run_tests '^test_kernel_.*$' -E _cuda
rc_tests=$?
[ $rc_gpu = 0 ] || rc_tests=$rc_gpu
[ $rc_tests = 124 ] || [ $rc_tests = 137 ] && note "tests STOPPED at the time budget ($t_tests s): the list below is what finished"
tests_line=$(grep -E 'tests passed|tests failed' "$out/tests.log" | tr '\n' ';')
[ -n "$tests_line" ] || tests_line="$(grep -cE 'Test +#[0-9]+: .* Passed' "$out/tests.log") passed, $(grep -cE 'Test +#[0-9]+: .*(Failed|Timeout)' "$out/tests.log") failed of those that finished"
note "tests: $tests_line"
grep -E '^ *[0-9]+/[0-9]+ Test' "$out/tests.log" | sed 's/^/  /'
grep -E '^(ok|FAIL|SKIP)' "$out/tests.log" >"$out/checks.txt" || true
[ $rc_tests = 0 ] || note "FAILED checks: $(grep -c '^FAIL\|  FAIL' "$out/tests.log") (see $out/tests.log)"
if grep -qE '(test_device_cuda|cli_train_cuda|_cuda) .*Skipped' "$out/tests.log"; then
  note "the GPU tests were SKIPPED: trident saw no usable GPU (see $out/tests.log)"
  rc_tests=1
fi

# 3. benchmarks, in order of what they decide (each only when it fits the budget)
train_json() { # NAME [ENV=VALUE...] -- [bench train flags]: GPT-2 124M bf16 seq 1024 mbs 16
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$bin" bench train --device cuda --dtype bf16 --seq-len 1024 --micro-batch 16 \
    --steps 10 --warmup 3 --json "$@" >"$out/$name.jsonl" 2>"$out/$name.err"
}
summary_field() { # FILE FIELD: the summary event's number
  sed -n "s/.*\"event\": \"summary\".*\"$2\": \([-0-9.]*\)[,}].*/\1/p" "$1"
}
step_ms() { # FILE: the median step time, or FAILED with the error's last line
  local ms
  ms=$(summary_field "$1" median_step_ms)
  [ -n "$ms" ] && echo "$ms ms/step" || echo "FAILED: $(tail -1 "${1%.jsonl}.err")"
}
peer_python() { # PyTorch with the loader's own path: trident's unpacked libraries
  env -u LD_LIBRARY_PATH python3 "$@" # (offline-deps.sh's env.sh) are not for it
}
has_peer=0
peer_python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && has_peer=1
[ $has_peer = 1 ] || note "PyTorch with CUDA not importable: no peer numbers"
run_peer() { # COMPILE: PyTorch's step at the same shapes, next to trident's
  local c=$1
  peer_python bench/gpu/peer_torch_gpu.py --mbs 16 --seq 1024 --compile "$c" >"$out/peer_compile$c.json" \
    2>"$out/peer_compile$c.err" || true
  local p_ms p_tok p_mem ratio=""
  p_ms=$(sed -n 's/.*"median_ms": \([0-9.]*\),.*/\1/p' "$out/peer_compile$c.json")
  p_tok=$(sed -n 's/.*"tokens_per_s": \([0-9]*\),.*/\1/p' "$out/peer_compile$c.json")
  p_mem=$(sed -n 's/.*"max_mem_gib": \([0-9.]*\).*/\1/p' "$out/peer_compile$c.json")
  if [ -n "$p_ms" ]; then
    [ -n "$t_ms" ] && ratio=$(awk -v t="$t_ms" -v p="$p_ms" 'BEGIN { printf "; trident/PyTorch time %.2fx", t / p }')
    note "PyTorch (torch.compile=$c), same shapes: $p_ms ms/step, $p_tok tokens/s, peak memory $p_mem GiB$ratio"
  else
    note "PyTorch (torch.compile=$c) FAILED: $(tail -2 "$out/peer_compile$c.err")"
  fi
}

# the step (issue #12's target) and PyTorch compiled's in the same call
t_ms=""
if fits 40 "trident bench train"; then
  train_json bench_train --
  t_ms=$(summary_field "$out/bench_train.jsonl" median_step_ms)
  if [ -n "$t_ms" ]; then
    note "trident bench train, GPT-2 124M bf16 seq 1024 mbs 16: $t_ms ms/step, $(summary_field "$out/bench_train.jsonl" tokens_per_s) tokens/s, peak memory $(summary_field "$out/bench_train.jsonl" max_mem_gib) GiB"
  else
    note "trident bench train FAILED: $(tail -3 "$out/bench_train.err")"
  fi
fi
peers=" ${PEERS-1 0} "
if [ $has_peer = 1 ] && [[ $peers == *" 1 "* ]] && fits 150 "PyTorch torch.compile peer"; then run_peer 1; fi
# where the step's time goes, op by op (issue #12's profile; --breakdown waits for the
# GPU after each op, so its sum is above the step's time)
if fits 40 "the step's kernel-by-kernel breakdown"; then
  "$bin" bench train --device cuda --dtype bf16 --seq-len 1024 --micro-batch 16 --steps 2 --warmup 1 \
    --breakdown 1 --top 30 >"$out/bench_breakdown.txt" 2>&1
  phases=$(sed -n '/^where a step.s time goes/,/^ *region optimizer/p' "$out/bench_breakdown.txt" |
    grep -E '^ +(matmul|attention|other_kernels|optimizer) ' | awk '{ printf "%s %s ms, ", $1, $2 }')
  note "breakdown (synchronised per op): ${phases:-FAILED: $(tail -1 "$out/bench_breakdown.txt")} (kernels: $out/bench_breakdown.txt)"
fi
# with Megatron's default dropout (0.1, attention and hidden): attention on cuDNN with
# trident's masks
if fits 40 "the step with dropout 0.1"; then
  train_json bench_train_dropout -- --dropout 0.1
  note "the same with dropout 0.1 (attention and hidden): $(step_ms "$out/bench_train_dropout.jsonl")"
fi
# with the GEMM epilogues off (the separate elementwise ops): what the fused forms are worth
if fits 40 "the step with TRIDENT_CUDA_FUSE=0"; then
  train_json bench_train_unfused TRIDENT_CUDA_FUSE=0 --
  note "the same with TRIDENT_CUDA_FUSE=0 (no GEMM epilogues): $(step_ms "$out/bench_train_unfused.jsonl")"
fi
# every kernel, and each GEMM and attention against PyTorch at the same shapes (issue
# #12's ratios)
if fits 90 "trident bench kernels"; then
  "$bin" bench kernels --device cuda --json >"$out/bench_kernels.jsonl" 2>"$out/bench_kernels.err" ||
    note "bench kernels FAILED (see $out/bench_kernels.err)"
  if [ $has_peer = 1 ] && fits 90 "PyTorch's kernels at the same shapes"; then
    : >"$out/peer_kernels.jsonl"
    for dt in bf16 fp32; do
      peer_python bench/gpu/peer_torch_kernels.py --dtype $dt >>"$out/peer_kernels.jsonl" \
        2>"$out/peer_kernels_$dt.err" || true
    done
    python3 bench/gpu/compare_kernels.py "$out/bench_kernels.jsonl" "$out/peer_kernels.jsonl" \
      >"$out/compare_kernels.txt" 2>&1
    note "$(tail -1 "$out/compare_kernels.txt") (table: $out/compare_kernels.txt)"
  fi
fi
# Megatron's GPT-3 Medium and Large shapes (GPT-2 350M and 760M): ms/step and MFU
for size in "350M 24 1024 16" "760M 24 1536 16"; do
  read -r name layers hidden heads <<<"$size"
  fits 60 "GPT-2 $name" || continue
  "$bin" bench train --device cuda --dtype bf16 --seq-len 1024 --micro-batch 8 --steps 6 \
    --warmup 2 --num-layers "$layers" --hidden-size "$hidden" --num-heads "$heads" \
    >"$out/bench_train_$name.txt" 2>&1
  result=$(grep -E '^RESULT' "$out/bench_train_$name.txt" | sed 's/^RESULT //' | cut -c1-160)
  note "GPT-2 $name bf16 seq 1024 mbs 8: ${result:-FAILED: $(tail -1 "$out/bench_train_$name.txt")}"
done
if [ $has_peer = 1 ] && [[ $peers == *" 0 "* ]] && fits 60 "PyTorch eager peer"; then run_peer 0; fi
# generation with the key/value cache (attention_forward_rows on CUDA): GPT-2 124M
# of one training step, seconds per token from 1 and 129 generated tokens
if fits 60 "generation with the key/value cache"; then
  gck=$(mktemp -d) # the checkpoint stays out of the returned logs
  gen() { # N: seconds to generate N tokens (greedy), loading included
    local t0
    t0=$(date +%s.%N)
    "$bin" generate --device cuda --load "$gck" --vocab-file data/gpt2/vocab.json \
      --merge-file data/gpt2/merges.txt --prompt "In the beginning" --greedy --out-seq-length "$1" \
      >>"$out/generate.txt" 2>&1 || { echo FAILED; return; }
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'
  }
  if "$bin" train --device cuda --num-layers 12 --hidden-size 768 --num-attention-heads 12 \
    --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 1 \
    --lr 1e-4 --train-iters 1 --eval-iters 0 --mock-data --tokenizer-type GPT2BPETokenizer \
    --vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt --save "$gck" \
    --save-interval 1 --no-save-optim >"$out/generate_train.log" 2>&1; then
    g1=$(gen 1) g129=$(gen 129)
    note "generate, GPT-2 124M fp32 on CUDA: 1 token $g1 s, 129 tokens $g129 s ($(awk -v a="$g1" \
      -v b="$g129" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.1f ms a token", (b - a) * 1000 / 128; else print "FAILED" }'); $out/generate.txt)"
  else
    note "generate's checkpoint FAILED: $(tail -1 "$out/generate_train.log")"
  fi
  rm -rf "$gck"
fi
# two or more GPUs: data-parallel equality and scaling over them (issue #12 item 5)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -ge 2 ] && fits 240 "bench/gpu/scaling.sh over $ngpu GPUs"; then
  bench/gpu/scaling.sh --trident "$bin" --dtype bf16 >"$out/scaling.txt" 2>&1 ||
    note "bench/gpu/scaling.sh FAILED (see $out/scaling.txt)"
  note "$ngpu GPUs: $(grep -E '^DP=' "$out/scaling.txt" | tr '\n' ';'); $(grep -E '^(dpN|dpNwire|dpNz1ovl|tp2|pp2) ' "$out/scaling.txt" | awk '{ printf "%s %s ms %s, ", $1, $3, $5 }')"
fi
note "took $SECONDS s (BUDGET_S=$budget)"

printf '%s\n' "" "== gpu-check summary ==" "${summary[@]}"
[ $rc_tests = 0 ]
