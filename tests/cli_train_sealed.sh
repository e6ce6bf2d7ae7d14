#!/usr/bin/env bash
# Everything above the device interface is device-clean (issue #11, item 4): on
# the sealed test device (the CPU's kernels on memory that faults when the host
# touches it between ops, docs/device.md) training runs through every layout,
# precision and optimizer path, and gives the CPU's losses bit for bit:
#  - one rank with dropout; fp16 (the loss scaler) and bf16;
#  - data parallelism with ZeRO-1, ZeRO-2 and ZeRO-3 (gradient accumulation on),
#    with gradients sent in bf16 (--grad-reduce-in-bf16), and with ZeRO-1's
#    parameter gather overlapped with the next forward (--overlap-param-gather),
#    tensor parallelism with sequence parallelism (the vocabulary-parallel
#    cross-entropy), pipeline parallelism (1F1B's sends and receives; 2 and 4
#    stages), TP x DP, PP x DP;
#  - Adam's state offloaded to NVMe (the staged path a GPU takes), and to host
#    memory with the update on the host (--cpu-optimizer, offload_optimizer cpu);
#  - a checkpoint saved on the sealed device resumes on the CPU and the reverse,
#    with the uninterrupted run's losses;
#  - generate on the sealed device gives the CPU's greedy tokens.
# Multi-rank collectives on such memory take the device collective library's
# path (comm/device_comm.h: NCCL's on a GPU, here the sealed device's MPI
# stand-in with the same calls, streams and events), and with
# --distributed-backend gloo are staged through host buffers: both give the
# CPU's bits, so these runs prove that either path moves the right bytes.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
src=$2

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 3 --weight-decay 0.1 --clip-grad 1.0
  --hidden-dropout 0.1 --attention-dropout 0.1 --mock-data --tokenizer-type NullTokenizer
  --vocab-size 500 --log-interval 1 --eval-interval 5 --eval-iters 2 --seed 7 --train-iters 20)
source "$(dirname "$0")/train_common.sh"
# The device's peak MB from Megatron's memory report (after the first logged iteration).
maxalloc() { grep -oE 'max allocated: [0-9.]+' "$1" | head -1 | awk '{ print $3 }'; }
# Between ops the sealed device's mprotect calls are cheaper with idle threads asleep.
export OMP_WAIT_POLICY=PASSIVE

# both NAME NP ARGS...: the same run on the CPU and on the sealed device, losses equal
both() {
  local name=$1 np=$2
  shift 2
  run "$np" "$tmp/$name.cpu.log" --device cpu "$@"
  run "$np" "$tmp/$name.sealed.log" --device sealed "$@"
  grep -q "device sealed" "$tmp/$name.sealed.log" ||
    fail "$name: the sealed run does not name its device: $(grep ' > layout' "$tmp/$name.sealed.log")"
  same "$tmp/$name.cpu.log" "$tmp/$name.sealed.log" 0 "$name: sealed device == CPU, bit for bit"
}

both "one rank, dropout" 1
both "one rank, fp16" 1 --fp16 --hidden-dropout 0 --attention-dropout 0 --train-iters 30
both "one rank, bf16" 1 --bf16
both "DP=2 ZeRO-1" 2 --use-distributed-optimizer
both "DP=2 ZeRO-2" 2 --zero-stage 2
both "DP=2 ZeRO-3" 2 --zero-stage 3
both "DP=2 ZeRO-2, bf16 gradients on the wire" 2 --zero-stage 2 --bf16 --grad-reduce-in-bf16
both "DP=2 ZeRO-1, parameter gather overlapped" 2 --use-distributed-optimizer --bf16 --overlap-param-gather
both "TP=2 sequence parallel" 2 --tensor-model-parallel-size 2 --sequence-parallel
both "PP=2 bf16" 2 --pipeline-model-parallel-size 2 --bf16
both "TP=2 x DP=2 ZeRO-1" 4 --tensor-model-parallel-size 2 --use-distributed-optimizer
both "PP=4 (channels between odd and even neighbours)" 4 --pipeline-model-parallel-size 4 --num-layers 4
both "PP=2 x DP=2 ZeRO-1" 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer
both "PP=2 x DP=2 ZeRO-1, parameter gather overlapped" 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-param-gather
same "$tmp/PP=2 x DP=2 ZeRO-1.cpu.log" "$tmp/PP=2 x DP=2 ZeRO-1, parameter gather overlapped.sealed.log" 0 \
  "PP=2 x DP=2 ZeRO-1: the overlapped parameter gather on the sealed device == the plain one on the CPU"
grep -q "collectives on device memory: mpi-staged" "$tmp/DP=2 ZeRO-2.sealed.log" &&
  ok "multi-rank sealed runs use the collective library (the default --distributed-backend nccl)" ||
  fail "collectives line: $(grep 'collectives on' "$tmp/DP=2 ZeRO-2.sealed.log")"

# gloo NAME NP ARGS...: the host-staged path of a run "both" made, same losses
gloo() {
  local name=$1 np=$2
  shift 2
  run "$np" "$tmp/$name.gloo.log" --device sealed --distributed-backend gloo "$@"
  grep -q "collectives on device memory: MPI through host copies" "$tmp/$name.gloo.log" ||
    fail "$name: gloo's collectives line: $(grep 'collectives on' "$tmp/$name.gloo.log")"
  same "$tmp/$name.cpu.log" "$tmp/$name.gloo.log" 0 "$name: sealed, staged through the host (gloo) == CPU, bit for bit"
}
gloo "DP=2 ZeRO-2" 2 --zero-stage 2
gloo "DP=2 ZeRO-2, bf16 gradients on the wire" 2 --zero-stage 2 --bf16 --grad-reduce-in-bf16
gloo "DP=2 ZeRO-1, parameter gather overlapped" 2 --use-distributed-optimizer --bf16 --overlap-param-gather
gloo "TP=2 sequence parallel" 2 --tensor-model-parallel-size 2 --sequence-parallel
gloo "PP=2 bf16" 2 --pipeline-model-parallel-size 2 --bf16

mkdir -p "$tmp/nvme"
cat >"$tmp/ds.json" <<EOF
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/nvme"}}}
EOF
both "DP=2 NVMe offload" 2 --deepspeed --deepspeed_config "$tmp/ds.json"

# Adam offloaded to host memory (--cpu-optimizer, offload_optimizer.device cpu):
# on the sealed device the state and the update move to the host (the path a GPU
# takes); on the CPU it is there already. The same bits either way.
both "one rank, --cpu-optimizer" 1 --cpu-optimizer
grep -q "optimizer offloaded to host memory" "$tmp/one rank, --cpu-optimizer.sealed.log" &&
  grep -q "Adam runs on the host already" "$tmp/one rank, --cpu-optimizer.cpu.log" &&
  ok "--cpu-optimizer: offloaded on the sealed device, the identity on the CPU" ||
  fail "--cpu-optimizer summary lines: $(grep -h 'offload\|host already' "$tmp/one rank, --cpu-optimizer."*.log)"
cat >"$tmp/ds_cpu.json" <<EOF
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}}}
EOF
both "DP=2 ZeRO-2 offload_optimizer cpu" 2 --deepspeed --deepspeed_config "$tmp/ds_cpu.json"
both "DP=2 ZeRO-3 --cpu-optimizer" 2 --zero-stage 3 --cpu-optimizer

# ZeRO-3 with the parameters offloaded too (DeepSpeed's offload_param.device cpu):
# the fp32 shard in host memory, a unit's piece copied up when it is gathered,
# Adam writing it in place; the CPU's bits (the parameters' norm logged: its
# statistics read the shard through the device), less device memory, and a
# checkpoint that resumes without the offload.
cat >"$tmp/ds_param.json" <<EOF
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                       "offload_param": {"device": "cpu", "pin_memory": true}}}
EOF
name="DP=2 ZeRO-3 offload_param cpu"
both "$name" 2 --deepspeed --deepspeed_config "$tmp/ds_param.json" --log-params-norm
grep -q "parameters offloaded to host memory" "$tmp/$name.sealed.log" &&
  grep -q "offload_param.device cpu: the cpu device's memory is host memory" "$tmp/$name.cpu.log" &&
  ok "offload_param: the shard in host memory on the sealed device, the identity on the CPU" ||
  fail "offload_param summary lines: $(grep -h 'offload' "$tmp/$name."*.log)"
with=$(maxalloc "$tmp/$name.sealed.log") without=$(maxalloc "$tmp/DP=2 ZeRO-3 --cpu-optimizer.sealed.log")
awk -v a="$with" -v b="$without" 'BEGIN { exit !(a > 0 && a < b) }' &&
  ok "offload_param: peak device MB $with < $without without it" ||
  fail "offload_param peak device MB: $with vs $without without it"
run 2 "$tmp/param_save.log" --device sealed --deepspeed --deepspeed_config "$tmp/ds_param.json" \
  --exit-interval 10 --save "$tmp/ck_param" --save-interval 10
run 2 "$tmp/param_resume.log" --device sealed --zero-stage 3 --load "$tmp/ck_param"
cat "$tmp/param_save.log" "$tmp/param_resume.log" >"$tmp/param_both.log"
same "$tmp/DP=2 ZeRO-3 --cpu-optimizer.cpu.log" "$tmp/param_both.log" 0 \
  "offload_param: saved at 10, resumed without any offload: the straight run's losses"
cat >"$tmp/ds_param_only.json" <<EOF
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
 "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
EOF
if OMP_NUM_THREADS=1 "$bin" train "${model[@]}" --device sealed --deepspeed \
  --deepspeed_config "$tmp/ds_param_only.json" >"$tmp/param_only.log" 2>&1; then
  fail "offload_param without offload_optimizer was accepted on the sealed device"
else
  grep -q "offload_param.device cpu needs offload_optimizer.device cpu too" "$tmp/param_only.log" &&
    ok "offload_param without the optimizer on the host: refused, saying why" ||
    fail "offload_param alone: $(tail -2 "$tmp/param_only.log")"
fi
run 2 "$tmp/off_save.log" --device sealed --cpu-optimizer --zero-stage 2 --exit-interval 10 \
  --save "$tmp/ck_off" --save-interval 10
run 2 "$tmp/on_save.log" --device cpu --zero-stage 2 --exit-interval 10 --save "$tmp/ck_on" \
  --save-interval 10
d=iter_0000010/mp_rank_00
cmp -s "$tmp/ck_off/$d/optim_dp000.safetensors" "$tmp/ck_on/$d/optim_dp000.safetensors" &&
  cmp -s "$tmp/ck_off/$d/model.safetensors" "$tmp/ck_on/$d/model.safetensors" &&
  ok "a checkpoint with Adam offloaded to the host is the in-device one, byte for byte" ||
  fail "offloaded and in-device checkpoints at iteration 10 differ"

# Checkpoints cross devices: save at 10 on one, resume to 20 on the other; both
# resumes give the uninterrupted run's training losses for iterations 11..20.
both "DP=2" 2
run 2 "$tmp/save.sealed.log" --device sealed --exit-interval 10 --save "$tmp/ck_s" --save-interval 10
run 2 "$tmp/resume.cpu.log" --device cpu --load "$tmp/ck_s"
run 2 "$tmp/save.cpu.log" --device cpu --exit-interval 10 --save "$tmp/ck_c" --save-interval 10
run 2 "$tmp/resume.sealed.log" --device sealed --load "$tmp/ck_c"
d=iter_0000010/mp_rank_00
cmp -s "$tmp/ck_s/$d/model.safetensors" "$tmp/ck_c/$d/model.safetensors" &&
  cmp -s "$tmp/ck_s/$d/optim_dp000.safetensors" "$tmp/ck_c/$d/optim_dp000.safetensors" &&
  ok "a checkpoint saved on the sealed device is the CPU's, byte for byte" ||
  fail "the sealed and CPU checkpoints at iteration 10 differ"
# "N loss" for each training iteration after 10 of a log
after10() { sed -nE 's/.* iteration +([0-9]+)\/.*\| lm loss: ([^ ]+) .*/\1 \2/p' "$1" | awk '$1 > 10'; }
after10 "$tmp/DP=2.cpu.log" >"$tmp/want"
for d in cpu sealed; do
  after10 "$tmp/resume.$d.log" >"$tmp/got.$d"
  if [ "$(wc -l <"$tmp/want")" = 10 ] && cmp -s "$tmp/want" "$tmp/got.$d"; then
    ok "resumed on $d from the other device's checkpoint: iterations 11-20 as uninterrupted"
  else
    fail "resume on $d: $(paste "$tmp/want" "$tmp/got.$d" | head -3)"
  fi
done

# A ZeRO checkpoint is gathered a unit at a time through host memory: saving
# (twice, before the memory report at iteration 5) and loading add nothing to
# the device's peak (Megatron's "max allocated"), where whole-model buffers on
# the device would have (a ZeRO-3 model need not fit one device).
# A model whose parameters outweigh its activations (hidden 128, 8 tokens), so
# whole-model buffers would show in the peak.
z3=(--device sealed --zero-stage 3 --log-interval 5 --hidden-size 128 --seq-length 8
  --max-position-embeddings 8 --micro-batch-size 1 --global-batch-size 2)
run 2 "$tmp/z3_nosave.log" "${z3[@]}" --train-iters 5
run 2 "$tmp/z3_save.log" "${z3[@]}" --train-iters 5 --save "$tmp/ck_z3" --save-interval 2
run 2 "$tmp/z3_load.log" "${z3[@]}" --train-iters 10 --load "$tmp/ck_z3"
a=$(maxalloc "$tmp/z3_nosave.log") b=$(maxalloc "$tmp/z3_save.log") c=$(maxalloc "$tmp/z3_load.log")
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && grep -q "successfully saved checkpoint at iteration       4" "$tmp/z3_save.log" &&
  grep -q "successfully loaded checkpoint" "$tmp/z3_load.log" &&
  ok "ZeRO-3 DP=2: saving and loading leave the device's peak as it was ($a MB)" ||
  fail "ZeRO-3 peak device MB without a save $a, with saves $b, after a load $c"

# generate: the same greedy tokens on both devices (a GPT-2 vocabulary model).
tok=(--tokenizer-type GPT2BPETokenizer --vocab-file "$src/data/gpt2/vocab.json"
  --merge-file "$src/data/gpt2/merges.txt")
OMP_NUM_THREADS=1 "$bin" train "${model[@]}" "${tok[@]}" --train-iters 3 --lr-warmup-iters 0 --eval-iters 0 \
  --save "$tmp/ck_g" --save-interval 3 >"$tmp/g_train.log" 2>&1 || fail "train for generate: $(tail -3 "$tmp/g_train.log")"
for d in cpu sealed; do
  OMP_NUM_THREADS=1 "$bin" generate --load "$tmp/ck_g" "${tok[@]:2}" --prompt "In the beginning" \
    --out-seq-length 12 --greedy --json --device $d >"$tmp/gen.$d" 2>"$tmp/gen.$d.err" ||
    fail "generate --device $d: $(tail -3 "$tmp/gen.$d.err")"
done
if grep -q '"tokens"' "$tmp/gen.cpu" && cmp -s "$tmp/gen.cpu" "$tmp/gen.sealed"; then
  ok "generate: the sealed device's greedy tokens are the CPU's"
else
  fail "generate differs: cpu '$(head -c 200 "$tmp/gen.cpu")' sealed '$(head -c 200 "$tmp/gen.sealed")'"
fi
exit $failed
