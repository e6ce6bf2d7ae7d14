#!/usr/bin/env bash
# A training step makes the host wait for the device twice (issue #12: host
# synchronisations only where the host needs a value): once to read the step's
# losses, once to read the gradient statistics that clipping and the loss
# scaler need. Not once per micro-batch (the batch goes up asynchronously
# through pinned memory), not once per layer: the count trident prints at the
# end of training ("host waits for the device per training step") is 2 to 2
# with 1 and 4 micro-batches, 2 and 4 layers (the zero count read with the
# gradient norm; the parameters' norm, read after the update, is a third), fp16
# with its loss scaler, bf16
# with logits in chunks, under DP with ZeRO-2, TP, PP, and on the sealed device
# (device memory the host cannot read: staged copies, one rank), where DP and TP
# collectives and PP's sends and receives through the device's collective
# library (NCCL's path, here its MPI stand-in) add none, and host-staged ones (--distributed-backend gloo)
# one per collective. On a GPU each
# wait idles the device until the host issues more work, so this is a speed
# property of GPU runs that the CPU can check.
# Arguments: the trident binary and the source directory.
set -u
bin=$1

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 2 --lr 3e-3
  --clip-grad 1.0 --mock-data --tokenizer-type NullTokenizer --vocab-size 500 --log-interval 1
  --eval-interval 2 --eval-iters 1 --seed 7 --train-iters 4)
source "$(dirname "$0")/train_common.sh"

# waits LOG: "MIN MAX" of the log's line
waits() { grep -oE 'host waits for the device per training step: [0-9]+ to [0-9]+' "$1" | awk '{ print $9, $11 }'; }
# expect N LOG WHAT
expect() {
  local got
  got=$(waits "$2")
  [ "$got" = "$1 $1" ] && ok "$3: $1 host waits per step" ||
    fail "$3: host waits per step (min max) '$got', expected '$1 $1': $(grep 'host waits' "$2")"
}
expect_two() { expect 2 "$@"; }

run 1 "$tmp/mb1.log"
expect_two "$tmp/mb1.log" "one micro-batch"
run 1 "$tmp/mb4.log" --global-batch-size 8
expect_two "$tmp/mb4.log" "four micro-batches"
run 1 "$tmp/l4.log" --global-batch-size 8 --num-layers 4 --log-num-zeros-in-grad
expect_two "$tmp/l4.log" "four layers, four micro-batches, zero count logged"
run 1 "$tmp/norm.log" --global-batch-size 8 --log-num-zeros-in-grad --log-params-norm
expect 3 "$tmp/norm.log" "the parameters' norm logged too"
run 1 "$tmp/fp16.log" --global-batch-size 8 --fp16 --initial-loss-scale 65536
expect_two "$tmp/fp16.log" "fp16 with the dynamic loss scaler"
run 1 "$tmp/bf16.log" --global-batch-size 8 --bf16 --logits-chunk-tokens 24
expect_two "$tmp/bf16.log" "bf16, logits in chunks of 24 tokens"
run 2 "$tmp/dp2.log" --global-batch-size 8 --zero-stage 2
expect_two "$tmp/dp2.log" "DP=2 with ZeRO-2 (rank 0)"
run 2 "$tmp/tp2.log" --global-batch-size 8 --tensor-model-parallel-size 2 --sequence-parallel
expect_two "$tmp/tp2.log" "TP=2 with sequence parallelism (rank 0)"
run 2 "$tmp/pp2.log" --global-batch-size 8 --pipeline-model-parallel-size 2
expect_two "$tmp/pp2.log" "PP=2, 1F1B over four micro-batches (rank 0)"
run 1 "$tmp/sealed.log" --global-batch-size 8 --device sealed
expect_two "$tmp/sealed.log" "the sealed device, four micro-batches"
run 2 "$tmp/sealed_dp2.log" --global-batch-size 8 --device sealed --zero-stage 2
expect_two "$tmp/sealed_dp2.log" "the sealed device, DP=2 with ZeRO-2 through the collective library"
run 2 "$tmp/sealed_tp2.log" --global-batch-size 8 --device sealed --tensor-model-parallel-size 2 --sequence-parallel
expect_two "$tmp/sealed_tp2.log" "the sealed device, TP=2 with sequence parallelism through the collective library"
run 2 "$tmp/sealed_pp2.log" --global-batch-size 8 --device sealed --pipeline-model-parallel-size 2
expect_two "$tmp/sealed_pp2.log" "the sealed device, PP=2 sending and receiving through the library's channels"
run 2 "$tmp/sealed_gloo.log" --global-batch-size 8 --device sealed --zero-stage 2 --distributed-backend gloo
read -r lo hi <<<"$(waits "$tmp/sealed_gloo.log")"
[ "${lo:-0}" -gt 2 ] && grep -q "collectives staged through the host" "$tmp/sealed_gloo.log" &&
  ok "the sealed device, DP=2 ZeRO-2 staged through the host (gloo): $lo host waits per step, said so" ||
  fail "gloo on the sealed device: $(grep 'host waits' "$tmp/sealed_gloo.log")"
exit $failed
