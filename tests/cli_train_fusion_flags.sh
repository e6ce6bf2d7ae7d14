#!/usr/bin/env bash
# Megatron's --no-bias-gelu-fusion and --no-bias-dropout-fusion act: on the sealed
# test device offering the fused GEMM forms (TRIDENT_SEALED_FUSE=1, composed of
# the CPU's ops), bf16 training takes the fused GELU-gradient path, whose fc1 bias
# gradient sums the bf16 dY (the losses move off the CPU's in their last digits,
# within 1e-3); with --no-bias-gelu-fusion the separate ops run and the losses
# are the CPU's bit for bit, with both flags too.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --mock-data --tokenizer-type NullTokenizer --vocab-size 500 --log-interval 1 --eval-iters 0
  --seed 7 --train-iters 20 --hidden-dropout 0 --attention-dropout 0 --bf16)
source "$(dirname "$0")/train_common.sh"

run 1 "$tmp/cpu.log" --device cpu
TRIDENT_SEALED_FUSE=1 run 1 "$tmp/fused.log" --device sealed
TRIDENT_SEALED_FUSE=1 run 1 "$tmp/nogelu.log" --device sealed --no-bias-gelu-fusion
TRIDENT_SEALED_FUSE=1 run 1 "$tmp/none.log" --device sealed --no-bias-gelu-fusion \
  --no-bias-dropout-fusion
same "$tmp/cpu.log" "$tmp/nogelu.log" 0 "--no-bias-gelu-fusion: the separate ops, the CPU's losses"
same "$tmp/cpu.log" "$tmp/none.log" 0 "both flags: the CPU's losses"
same "$tmp/cpu.log" "$tmp/fused.log" 1e-3 "fused GELU gradient: within 1e-3 of the CPU's"
if cmp -s "$tmp/cpu.log.l" "$tmp/fused.log.l"; then
  fail "the fused run gave the CPU's losses exactly: the fused GELU-gradient path did not run"
else
  ok "the fused run's losses differ from the CPU's in their last digits: the fused path ran"
fi
exit $failed
