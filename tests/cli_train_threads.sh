#!/usr/bin/env bash
# Results do not depend on the number of threads (docs/device.md, "Conventions"):
# for each GEMM library, forced, and each kernel ISA, training on 1, 2, 3 and 5
# threads saves the same parameters and Adam state, byte for byte. Odd counts
# split the kernels' pieces, the GEMMs' blocks and the attention's heads unevenly;
# dropout on, clipping and weight decay on, every activation above the size
# where the elementwise kernels go parallel. The measured GEMM choice (the
# default) is made per thread count, so only a forced library is held to this.
# A library that itself rounds differently on two thread counts on this CPU
# (probe_gemm_threads, $TD_PROBE_GEMM_THREADS, says so and names the products:
# OpenBLAS's Haswell / Zen kernels and oneDNN's AVX2 ones on an AMD Zen 3) is
# held instead to the losses of every iteration within 1e-4 relative.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok
export TRIDENT_GEMM_CACHE="$tmp/gemm.json"
model=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 128
  --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3
  --mock-data --tokenizer-type NullTokenizer --vocab-size 1000 --log-interval 1
  --eval-iters 0 --seed 5 --train-iters 4 --hidden-dropout 0.1 --attention-dropout 0.1
  --clip-grad 1.0 --weight-decay 0.1 --save-interval 4)

probe=${TD_PROBE_GEMM_THREADS:-}
[ -x "$probe" ] || { echo "FAIL: no probe_gemm_threads at '$probe' (TD_PROBE_GEMM_THREADS)"; exit 1; }

# The training losses of a log, one per line.
losses() { grep -oE 'lm loss: [^ ]+' "$1" | sed -E 's/.*: //'; }

# close A B: the two logs' losses (4 of them) agree within 1e-4 relative
close() {
  losses "$1" >"$1.l"
  losses "$2" >"$2.l"
  [ "$(wc -l <"$1.l")" -eq 4 ] && [ "$(wc -l <"$2.l")" -eq 4 ] &&
    paste "$1.l" "$2.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * ($1 < 0 ? -$1 : $1)) bad = 1 }
      END { exit bad }'
}

# same_state NAME THREADS LIBRARY DTYPE ENV... -- FLAGS...: train on each thread
# count and compare the saved tensors with the first count's
same_state() {
  local name=$1 counts=$2 lib=$3 dt=$4
  shift 4
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local first="" t
  for t in $counts; do
    local dir="$tmp/${name}_t$t"
    env "${envs[@]}" OMP_NUM_THREADS=$t timeout -k 5 120 "$bin" train "${model[@]}" "$@" \
      --save "$dir" >"$dir.log" 2>&1 ||
      { fail "$name, $t threads: exit $?: $(tail -3 "$dir.log")"; return; }
    [ -z "$first" ] && { first=$t; continue; }
    local f bad=""
    for f in model.safetensors optim_dp000.safetensors; do
      cmp -s "$tmp/${name}_t$first/iter_0000004/mp_rank_00/$f" "$dir/iter_0000004/mp_rank_00/$f" ||
        bad+=" $f"
    done
    if [ -z "$bad" ]; then
      ok "$name: $t threads save the bytes of $first"
      continue
    fi
    local said rc
    said=$(env "${envs[@]}" "$probe" "$lib" "$dt" "$first" "$t" 2>&1)
    rc=$?
    if [ $rc != 1 ]; then
      fail "$name: $t threads differ from $first in$bad, and $lib keeps its bits on both ($said)"
    elif close "$tmp/${name}_t$first.log" "$dir.log"; then
      ok "$name: $t threads: $lib itself rounds differently on $first and $t threads on this CPU ($(head -1 <<<"$said") ...); the losses agree within 1e-4"
    else
      fail "$name: $t threads: losses differ from $first's by more than 1e-4: $(paste "$tmp/${name}_t$first.log.l" "$dir.log.l" | tr '\n' ' ')"
    fi
  done
}

same_state fp32_openblas "1 2 3 5" openblas fp32 TRIDENT_GEMM_FP32=openblas --
same_state fp32_onednn "1 3 5" onednn fp32 TRIDENT_GEMM_FP32=onednn --
same_state bf16_onednn "1 3 5" onednn bf16 TRIDENT_GEMM_BF16=onednn -- --bf16
if grep -qw avx512_bf16 /proc/cpuinfo; then
  same_state bf16_avx512bf16 "1 3 5" avx512bf16 bf16 TRIDENT_GEMM_BF16=avx512bf16 -- --bf16
fi
if grep -qw amx_bf16 /proc/cpuinfo; then
  same_state bf16_amx "1 3 5" amx bf16 TRIDENT_GEMM_BF16=amx -- --bf16
fi
if grep -qw avx512f /proc/cpuinfo; then # the narrower kernel tables, where they are not the default
  same_state fp32_avx2 "1 3" openblas fp32 TRIDENT_CPU_ISA=avx2 TRIDENT_GEMM_FP32=openblas --
fi
same_state fp32_generic "1 3" openblas fp32 TRIDENT_CPU_ISA=generic TRIDENT_GEMM_FP32=openblas --
exit $failed
