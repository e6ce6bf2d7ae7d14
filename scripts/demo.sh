#!/usr/bin/env bash
# The main job on the bundled default (run by `make demo`), as Megatron's README
# does it: preprocess the bundled corpus (King James Bible, data/corpus/) with the
# GPT-2 tokenizer into Megatron's .bin/.idx, then pretrain a small GPT on it for a
# few minutes with validation, save a checkpoint, and sample a few lines from the
# model it trained (trident generate). Outputs go to out/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/trident
out=out/demo
mkdir -p "$out"
vocab=(--vocab-file data/gpt2/vocab.json --merge-file data/gpt2/merges.txt)
tok=(--tokenizer-type GPT2BPETokenizer "${vocab[@]}")

if [ ! -f "$out/kjv_text_document.idx" ]; then
  "$bin" preprocess --input data/corpus/kjv.jsonl --output-prefix "$out/kjv" "${tok[@]}" \
    --append-eod --workers "$(nproc)"
fi

"$bin" train "${tok[@]}" \
  --data-path "$out/kjv_text_document" --split 949,50,1 --data-cache-path "$out/cache" \
  --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256 \
  --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 16 \
  --train-iters 150 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 15 \
  --weight-decay 0.1 --clip-grad 1.0 --bf16 \
  --log-interval 10 --eval-interval 50 --eval-iters 5 \
  --save "$out/ckpt" --save-interval 50 | tee "$out/train.log"
echo
echo "demo: the trained model continues \"And God said\" (3 samples, top-p 0.9):"
"$bin" generate --load "$out/ckpt" "${vocab[@]}" --prompt "And God said" \
  --out-seq-length 30 --top_p 0.9 --num-samples 3 --seed 1234 | tee "$out/samples.txt"
echo
echo "demo: log in $out/train.log, checkpoint in $out/ckpt, samples in $out/samples.txt"
