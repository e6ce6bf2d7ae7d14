# Shared by the bench scripts (sourced): GPT-2 124M as `trident train --mock-data`
# flags, and the median of numbers on stdin.

# 12 layers, 768 hidden, 12 heads, vocabulary 50257 (NullTokenizer 50256 + end of
# document) padded to 50304, seq 256, micro-batch 4; the caller adds the global
# batch, dropout and iteration flags.
gpt2_124m=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 256
  --max-position-embeddings 1024 --micro-batch-size 4 --lr 1e-4 --mock-data
  --tokenizer-type NullTokenizer --vocab-size 50256 --log-interval 1 --eval-iters 0)

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
