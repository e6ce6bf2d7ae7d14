#!/usr/bin/env bash
# The main job on the bundled default: train a small GPT for a few minutes on this
# machine's cores, evaluate, and save a checkpoint (out/demo/ckpt). Run by `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/trident
out=out/demo
mkdir -p "$out"

"$bin" train \
  --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256 \
  --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 16 \
  --train-iters 200 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 \
  --weight-decay 0.1 --clip-grad 1.0 --bf16 \
  --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 \
  --log-interval 10 --eval-interval 100 --eval-iters 5 \
  --save "$out/ckpt" --save-interval 100 | tee "$out/train.log"
echo "demo: log in $out/train.log, checkpoint in $out/ckpt"
