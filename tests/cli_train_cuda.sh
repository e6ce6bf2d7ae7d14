#!/usr/bin/env bash
# Training on an NVIDIA GPU is the CPU's training (issue #11, item 6), on the demo
# model (scripts/demo.sh: 4 layers, hidden 256, 4 heads, seq 256, GPT-2's
# vocabulary) and the bundled corpus, 20 iterations:
#  - fp32 losses within 1e-5 relative of the CPU's, with hidden and attention
#    dropout on (the masks are the CPU's Philox draws: other masks would move the
#    losses by far more); bf16 within 1e-2;
#  - resume on the GPU is bit-exact; a checkpoint saved on the GPU continues on
#    the CPU and one saved on the CPU continues on the GPU, both within the fp32
#    tolerance of the uninterrupted run;
#  - TP=2, DP=2 and PP=2 with two ranks sharing the GPU give one rank's losses
#    (collectives staged through host memory);
#  - generate on the GPU gives the CPU's greedy tokens.
# Reported skipped (exit 77) when this trident has no CUDA backend or no GPU is
# visible: never passed without one. Arguments: the trident binary and the
# source directory.
set -u
bin=$1
src=$2
probe=$("$bin" bench kernels --device cuda --only add --seconds 0.01 2>&1 | head -5)
case "$probe" in
*"without the CUDA backend"* | *"no CUDA device"* | *"CUDA"*"not usable"*)
  echo "SKIP: no GPU here: $probe"
  exit 77
  ;;
esac
# tmp, fail, ok, losses and same (the logs' losses within a tolerance)
source "$(dirname "$0")/train_common.sh"

vocab=(--vocab-file "$src/data/gpt2/vocab.json" --merge-file "$src/data/gpt2/merges.txt")
tok=(--tokenizer-type GPT2BPETokenizer "${vocab[@]}")
"$bin" preprocess --input "$src/data/corpus/kjv.jsonl" --output-prefix "$tmp/kjv" "${tok[@]}" \
  --append-eod --workers 4 --log-interval 0 >/dev/null || { echo "FAIL: preprocess"; exit 1; }
model=("${tok[@]}" --data-path "$tmp/kjv_text_document" --split 949,50,1
  --data-cache-path "$tmp/cache" --num-layers 4 --hidden-size 256 --num-attention-heads 4
  --seq-length 256 --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 16
  --train-iters 20 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 5
  --weight-decay 0.1 --clip-grad 1.0 --hidden-dropout 0.1 --attention-dropout 0.1
  --log-interval 1 --eval-interval 10 --eval-iters 2 --seed 1234
  --make-vocab-size-divisible-by 64) # 50304 at TP=1 and TP=2 alike
cores=$(nproc)

# trun NP DEVICE LOG ARGS...: trident train on NP ranks (all cores shared among them)
trun() {
  local np=$1 dev=$2 log=$3
  shift 3
  local threads=$((cores / np > 0 ? cores / np : 1))
  if [ "$np" = 1 ]; then
    OMP_NUM_THREADS=$threads timeout -k 5 900 "$bin" train "${model[@]}" --device "$dev" "$@" >"$log" 2>&1
  else
    OMP_NUM_THREADS=$threads timeout -k 5 900 "$mpirun" --oversubscribe --allow-run-as-root -np "$np" \
      "$bin" train "${model[@]}" --device "$dev" "$@" >"$log" 2>&1
  fi || fail "np $np --device $dev $*: exit $?: $(tail -3 "$log")"
}

trun 1 cpu "$tmp/cpu.log"
trun 1 cuda "$tmp/gpu.log"
grep -q "device cuda:" "$tmp/gpu.log" && ok "the GPU run names its device: $(grep -o 'device cuda:[^,]*' "$tmp/gpu.log" | head -1)" ||
  fail "the GPU run does not name a cuda device: $(grep ' > layout' "$tmp/gpu.log")"
same "$tmp/cpu.log" "$tmp/gpu.log" 1e-5 "fp32 with dropout: GPU == CPU"

trun 1 cpu "$tmp/cpu_bf16.log" --bf16
trun 1 cuda "$tmp/gpu_bf16.log" --bf16
same "$tmp/cpu_bf16.log" "$tmp/gpu_bf16.log" 1e-2 "bf16: GPU == CPU"

# bf16 without attention dropout runs cuDNN's fused attention (when it loads):
# forced, so a fallback to trident's kernels fails instead of passing unseen.
case "$probe" in
*"attention on cuDNN"*)
  trun 1 cpu "$tmp/cpu_bf16_nodrop.log" --bf16 --attention-dropout 0
  export TRIDENT_CUDA_ATTENTION=cudnn
  trun 1 cuda "$tmp/gpu_bf16_cudnn.log" --bf16 --attention-dropout 0
  trun 1 cuda "$tmp/gpu_bf16_cudnn2.log" --bf16 --attention-dropout 0
  unset TRIDENT_CUDA_ATTENTION
  grep -q "kernels: attention on cuDNN" "$tmp/gpu_bf16_cudnn.log" ||
    fail "the cuDNN run does not say so: $(grep ' > kernels' "$tmp/gpu_bf16_cudnn.log")"
  same "$tmp/cpu_bf16_nodrop.log" "$tmp/gpu_bf16_cudnn.log" 1e-2 "bf16 on cuDNN's attention: GPU == CPU"
  same "$tmp/gpu_bf16_cudnn.log" "$tmp/gpu_bf16_cudnn2.log" 0 "cuDNN's attention repeats bit for bit"
  ;;
*) echo "SKIP cuDNN's attention: $(echo "$probe" | grep 'kernels:')" ;;
esac

trun 1 cuda "$tmp/gpu_again.log"
same "$tmp/gpu.log" "$tmp/gpu_again.log" 0 "a second GPU run repeats the first bit for bit"

# Checkpoints: resume on the GPU bit-exact; cross the devices both ways.
trun 1 cuda "$tmp/gsave.log" --exit-interval 10 --save "$tmp/ck_g" --save-interval 10
trun 1 cuda "$tmp/gresume.log" --load "$tmp/ck_g"
trun 1 cpu "$tmp/csave.log" --exit-interval 10 --save "$tmp/ck_c" --save-interval 10
trun 1 cpu "$tmp/g2c.log" --load "$tmp/ck_g"
trun 1 cuda "$tmp/c2g.log" --load "$tmp/ck_c"
after10() { sed -nE 's/.* iteration +([0-9]+)\/.*\| lm loss: ([^ ]+) .*/\1 \2/p' "$1" | awk '$1 > 10'; }
after10 "$tmp/gpu.log" >"$tmp/want_g"
after10 "$tmp/gresume.log" >"$tmp/got_g"
[ "$(wc -l <"$tmp/want_g")" = 10 ] && cmp -s "$tmp/want_g" "$tmp/got_g" &&
  ok "resume on the GPU: iterations 11-20 bit for bit as uninterrupted" ||
  fail "GPU resume: $(paste "$tmp/want_g" "$tmp/got_g" | head -3)"
after10 "$tmp/cpu.log" >"$tmp/want_c"
for x in g2c c2g; do
  after10 "$tmp/$x.log" >"$tmp/got_$x"
  worst=$(paste "$tmp/want_c" "$tmp/got_$x" | awk 'NF == 4 { n++; d = $2 - $4; if (d < 0) d = -d;
    r = d / $2; if (r > w) w = r } END { if (n != 10) print "missing"; else printf "%.3g", w }')
  awk -v w="$worst" 'BEGIN { exit !(w != "missing" && w <= 1e-5) }' &&
    ok "$x: the checkpoint continues on the other device (worst relative difference $worst)" ||
    fail "$x: $worst"
done

# Two ranks sharing the GPU: TP, DP, PP each give the one-rank GPU run's losses.
trun 2 cuda "$tmp/tp2.log" --tensor-model-parallel-size 2
same "$tmp/gpu.log" "$tmp/tp2.log" 1e-5 "TP=2 on one GPU == one rank"
trun 2 cuda "$tmp/dp2.log"
same "$tmp/gpu.log" "$tmp/dp2.log" 1e-5 "DP=2 on one GPU == one rank"
trun 2 cuda "$tmp/pp2.log" --pipeline-model-parallel-size 2
same "$tmp/gpu.log" "$tmp/pp2.log" 1e-5 "PP=2 on one GPU == one rank"
trun 2 cuda "$tmp/z3.log" --zero-stage 3
same "$tmp/gpu.log" "$tmp/z3.log" 1e-5 "ZeRO-3 DP=2 on one GPU == one rank"

# generate: the CPU's greedy tokens from the GPU-trained checkpoint.
for d in cpu cuda; do
  OMP_NUM_THREADS=$cores "$bin" generate --load "$tmp/ck_g" "${vocab[@]}" --prompt "And God said" \
    --out-seq-length 24 --greedy --json --device $d >"$tmp/gen.$d" 2>"$tmp/gen.$d.err" ||
    fail "generate --device $d: $(tail -3 "$tmp/gen.$d.err")"
done
grep -q '"tokens"' "$tmp/gen.cpu" && cmp -s "$tmp/gen.cpu" "$tmp/gen.cuda" &&
  ok "generate on the GPU: the CPU's greedy tokens ($(grep -oE '"text": *"[^"]*"' "$tmp/gen.cuda" | head -1))" ||
  fail "generate differs: cpu '$(head -c 300 "$tmp/gen.cpu")' cuda '$(head -c 300 "$tmp/gen.cuda")'"
exit $failed
