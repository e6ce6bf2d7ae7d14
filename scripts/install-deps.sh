#!/usr/bin/env bash
# Install the Debian packages trident needs to build and test (Debian 12).
# Idempotent: does nothing (and needs no root) when every package is present.
set -eu
pkgs=(
  build-essential cmake pkg-config   # compiler, build system
  libdnnl-dev                        # oneDNN: fp32/bf16 GEMM (AMX / AVX512-BF16 for bf16)
  libopenblas-openmp-dev             # OpenBLAS (OpenMP build): fp32 GEMM
  libcjson-dev                       # cJSON: checkpoint metadata, safetensors headers, configs
  openmpi-bin libopenmpi-dev         # MPI: the distributed engine (mpirun, collectives)
  libpcre2-dev                       # PCRE2 (UTF + UCP, JIT): GPT-2 BPE pre-tokenizer regex
  python3                            # tests only: reading checkpoints and TensorBoard files (stdlib)
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
