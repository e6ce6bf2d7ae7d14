#!/usr/bin/env bash
# ZeRO-Infinity's optimizer offload (ds_config zero_optimization.offload_optimizer
# device nvme): Adam's state lives in files under nvme_path and streams through
# each step.
#  - The same training, bit for bit, as the state in memory: one rank, and ZeRO-1
#    and ZeRO-3 at DP=2; checkpoints saved with the state on NVMe equal the
#    in-memory run's byte for byte and resume either way.
#  - A model whose fp32 Adam state does not fit under an address-space limit
#    (ulimit -v, set between the two runs' measured peaks) trains with the
#    offload, and without it is refused at start-up, naming the limit.
#  - A missing nvme_path directory is an error naming it.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --global-batch-size 4 --micro-batch-size 2 --lr 3e-3
  --weight-decay 0.1 --clip-grad 1.0 --mock-data --tokenizer-type NullTokenizer --vocab-size 200
  --log-interval 1 --eval-interval 5 --eval-iters 2 --seed 7 --train-iters 20)
source "$(dirname "$0")/train_common.sh"

# ds_config STAGE NVME_DIR: the config for --global-batch-size 4 --micro-batch-size 2
ds_config() {
  local offload=""
  [ -n "$2" ] && offload=", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$2\"}"
  echo "{\"train_batch_size\": 4, \"train_micro_batch_size_per_gpu\": 2, \"gradient_clipping\": 1.0,
    \"zero_optimization\": {\"stage\": $1$offload}}"
}
mkdir -p "$tmp/nvme"
for np in 1 2; do
  for z in 0 1 3; do
    [ "$np" = 1 ] && [ "$z" != 0 ] && continue
    ds_config $z "" >"$tmp/mem$z.json"
    ds_config $z "$tmp/nvme" >"$tmp/nvme$z.json"
    run $np "$tmp/mem$np.$z.log" --deepspeed --deepspeed_config "$tmp/mem$z.json" \
      --save "$tmp/cmem$np.$z" --save-interval 10
    run $np "$tmp/nvme$np.$z.log" --deepspeed --deepspeed_config "$tmp/nvme$z.json" \
      --save "$tmp/cnvme$np.$z" --save-interval 10
    same "$tmp/mem$np.$z.log" "$tmp/nvme$np.$z.log" 0 "DP=$np ZeRO-$z: Adam state on NVMe == in memory, bit for bit"
    d=iter_0000010/mp_rank_00
    cmp -s "$tmp/cmem$np.$z/$d/optim_dp000.safetensors" "$tmp/cnvme$np.$z/$d/optim_dp000.safetensors" &&
      cmp -s "$tmp/cmem$np.$z/$d/model.safetensors" "$tmp/cnvme$np.$z/$d/model.safetensors" &&
      ok "DP=$np ZeRO-$z: the checkpoint saved from NVMe is the in-memory run's, byte for byte" ||
      fail "DP=$np ZeRO-$z: checkpoints differ"
  done
done
grep -q "optimizer state offloaded to NVMe (ZeRO-Infinity): $tmp/nvme/trident_adam_rank\*.adam" \
  "$tmp/nvme2.3.log" && ok "the summary names the NVMe files" ||
  fail "NVMe summary: $(grep -i nvme "$tmp/nvme2.3.log")"
[ -z "$(ls -A "$tmp/nvme")" ] && ok "the state files are removed at exit" ||
  fail "left in nvme_path: $(ls "$tmp/nvme")"

# Resume: in memory to 10 -> NVMe to 15 -> in memory to 20.
run 2 "$tmp/r0.log" --deepspeed --deepspeed_config "$tmp/mem1.json" --save "$tmp/r0" \
  --save-interval 100 --exit-interval 10
run 2 "$tmp/r1.log" --deepspeed --deepspeed_config "$tmp/nvme1.json" --load "$tmp/r0" \
  --save "$tmp/r1" --save-interval 100 --exit-interval 15
run 2 "$tmp/r2.log" --deepspeed --deepspeed_config "$tmp/mem1.json" --load "$tmp/r1"
cat "$tmp/r0.log" "$tmp/r1.log" "$tmp/r2.log" >"$tmp/rj.log"
same "$tmp/mem2.1.log" "$tmp/rj.log" 0 "ZeRO-1 DP=2: memory -> NVMe at 10 -> memory at 15 == straight"

# The memory limit. GPT-2's vocabulary at hidden 512: 32M parameters, 244 MiB of
# Adam state. Each run's peak address space is measured without a limit, then
# ulimit -v is set halfway between them.
if ldd "$bin" 2>/dev/null | grep -q libasan; then
  echo "skip  the ulimit -v part: AddressSanitizer reserves terabytes of address space"
else
  big=(--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 64
    --max-position-embeddings 64 --global-batch-size 1 --micro-batch-size 1 --lr 1e-4 --clip-grad 1.0
    --mock-data --tokenizer-type NullTokenizer --vocab-size 50000 --log-interval 1 --eval-iters 0
    --seed 7 --train-iters 3)
  echo "{\"train_batch_size\": 1, \"gradient_clipping\": 1.0, \"zero_optimization\": {\"stage\": 0,
    \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"}}}" >"$tmp/big_nvme.json"
  export MALLOC_ARENA_MAX=1 OMP_NUM_THREADS=1
  peak() { grep -oE 'max virtual: [0-9.]+' "$1" | awk '{ print int($3) }'; }
  timeout -k 5 120 "$bin" train "${big[@]}" >"$tmp/big_mem.log" 2>&1 || fail "big, in memory: $(tail -2 "$tmp/big_mem.log")"
  timeout -k 5 120 "$bin" train "${big[@]}" --deepspeed --deepspeed_config "$tmp/big_nvme.json" \
    >"$tmp/big_nvme.log" 2>&1 || fail "big, NVMe: $(tail -2 "$tmp/big_nvme.log")"
  vm=$(peak "$tmp/big_mem.log") vn=$(peak "$tmp/big_nvme.log")
  if [ -n "$vm" ] && [ -n "$vn" ] && [ $((vm - vn)) -gt 100 ]; then
    limit=$(((vm + vn) / 2))
    (ulimit -v $((limit * 1024)) && timeout -k 5 120 "$bin" train "${big[@]}" --deepspeed \
      --deepspeed_config "$tmp/big_nvme.json" >"$tmp/big_nvme_lim.log" 2>&1)
    rc_n=$?
    (ulimit -v $((limit * 1024)) && timeout -k 5 120 "$bin" train "${big[@]}" >"$tmp/big_mem_lim.log" 2>&1)
    rc_m=$?
    same3() { [ "$(losses "$1")" = "$(losses "$2")" ]; }
    [ $rc_n = 0 ] && same3 "$tmp/big_nvme.log" "$tmp/big_nvme_lim.log" &&
      ok "under ulimit -v $limit MiB (peaks: $vm MiB in memory, $vn with NVMe) the offloaded run trains 3 iterations" ||
      fail "NVMe under ulimit -v $limit MiB: exit $rc_n: $(tail -2 "$tmp/big_nvme_lim.log")"
    [ $rc_m != 0 ] && grep -q "RLIMIT_AS (ulimit -v)" "$tmp/big_mem_lim.log" &&
      ok "without the offload it is refused at start: $(grep -o 'needs [^;]*' "$tmp/big_mem_lim.log" | head -1)" ||
      fail "in memory under ulimit -v $limit MiB: exit $rc_m: $(tail -2 "$tmp/big_mem_lim.log")"
  else
    fail "peak address space: in memory '$vm' MiB, with NVMe '$vn' MiB (want the offload to save > 100)"
  fi
fi

# A missing directory.
ds_config 1 "$tmp/no/such/dir" >"$tmp/bad.json"
OMP_NUM_THREADS=1 timeout -k 5 60 "$bin" train "${model[@]}" --deepspeed --deepspeed_config "$tmp/bad.json" \
  >"$tmp/bad.log" 2>&1 && fail "a missing nvme_path trained" ||
  { grep -q "$tmp/no/such/dir" "$tmp/bad.log" && ok "a missing nvme_path is named: $(grep -m1 error "$tmp/bad.log")" ||
    fail "missing nvme_path: $(tail -2 "$tmp/bad.log")"; }
exit $failed
