#!/usr/bin/env bash
# Opt-in check of the Hugging Face interchange against transformers itself (not
# part of `make test`: it installs transformers from PyPI into a venv once).
#
#   1. trains a small GPT on the bundled corpus, exports it with `trident convert
#      --to hf`, loads it with transformers' GPT2LMHeadModel and compares its loss
#      on the run's validation samples (`trident dataset --which valid`) with the
#      validation loss trident printed;
#   2. makes a random GPT-2 with transformers (save_pretrained), imports it with
#      `trident convert --from hf` and compares trident's loss on the same samples
#      with transformers'; with Megatron's vocabulary padding as well, where the
#      padded rows may raise the loss by at most log(1 + padding / vocab);
#   3. exports that import back and checks every tensor is bit-identical to the
#      file transformers wrote.
# trident's loss of a loaded model: `trident train --load CKPT --finetune
# --train-iters 1 --lr 0` (one step at learning rate 0 leaves the weights as they
# are), then the end-of-run validation over --eval-iters batches.
#
# usage: scripts/check_hf_interop.sh [BUILD_DIR]     (default: build; TRIDENT=path/to/trident
#        overrides the binary)
# Outputs in out/hf_interop/ (the venv too: HF_INTEROP_VENV overrides).
# Uses /usr/bin/python3 (Debian's python3-torch) with transformers < 4.47, the
# last releases that run on torch 1.13.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRIDENT:-$root/${1:-build}/trident}
out=$root/out/hf_interop
venv=${HF_INTEROP_VENV:-$out/venv}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
[ -x "$bin" ] || { echo "no $bin: build first (make build)" >&2; exit 1; }
mkdir -p "$out"

# ------------------------------------------------------------------ python
if ! "$venv/bin/python" -c "import transformers, torch, safetensors" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q "transformers>=4.30,<4.47" safetensors
  "$venv/bin/python" -c "import torch" 2>/dev/null || "$venv/bin/pip" install -q "torch<2.6"
fi
py=$venv/bin/python

# ------------------------------------------------------------------ data and flags
tok=(--tokenizer-type GPT2BPETokenizer --vocab-file "$root/data/gpt2/vocab.json"
     --merge-file "$root/data/gpt2/merges.txt")
if [ ! -f "$out/kjv_text_document.idx" ]; then
  head -n 3000 "$root/data/corpus/kjv.jsonl" > "$out/corpus.jsonl"
  "$bin" preprocess --input "$out/corpus.jsonl" --output-prefix "$out/kjv" "${tok[@]}" \
    --append-eod --log-interval 0
fi
data=(--data-path "$out/kjv_text_document" --split 90,10,0 --data-cache-path "$out/cache"
      --seq-length 64 --seed 1234 --micro-batch-size 4 --global-batch-size 8
      --eval-iters 4 --eval-interval 1000)
# --make-vocab-size-divisible-by 1: the model has GPT-2's 50257 rows, as transformers
model=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 64
       --openai-gelu --make-vocab-size-divisible-by 1)
samples=32 # eval-iters x global batch: the validation samples the end-of-run evaluation reads

# The validation lm loss a trident train log printed.
valid_loss() { sed -n 's/.*on validation set | lm loss value: \([^ ]*\) .*/\1/p' "$1" | tail -n 1; }

# trident's loss of checkpoint $1 (extra flags after it).
trident_loss() {
  local ck=$1 log=$out/eval_$(basename "$1").log
  shift
  "$bin" train "${tok[@]}" "${data[@]}" "$@" --load "$ck" --finetune --train-iters 1 --lr 0 \
    --log-interval 1 > "$log"
  valid_loss "$log"
}

"$bin" dataset "${tok[@]}" "${data[@]}" --train-iters 1 --which valid --first "$samples" \
  > "$out/valid_samples.jsonl"

# ------------------------------------------------------------------ 1. trident -> transformers
rm -rf "$out/ckpt" "$out/hf_trained"
"$bin" train "${tok[@]}" "${data[@]}" "${model[@]}" --train-iters 40 --lr 1e-3 \
  --lr-warmup-iters 4 --log-interval 10 --save "$out/ckpt" --save-interval 40 > "$out/train.log"
trained_loss=$(valid_loss "$out/train.log")
"$bin" convert --from trident --to hf --input "$out/ckpt" --output "$out/hf_trained" --vocab-size 50257

# ------------------------------------------------------------------ 2. transformers -> trident
rm -rf "$out/hf_random" "$out/ckpt_random" "$out/ckpt_random_padded" "$out/hf_random_back"
"$py" - "$out/hf_random" <<'EOF'
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=50257,
                 activation_function="gelu_new", initializer_range=0.2)
torch.manual_seed(0)
model = GPT2LMHeadModel(cfg)
with torch.no_grad():  # biases and LayerNorms off their 0 / 1 init, so every mapping matters
    for p in model.parameters():
        if p.dim() == 1:
            p.add_(0.1 * torch.randn_like(p))
model.save_pretrained(sys.argv[1], safe_serialization=True)
EOF
"$bin" convert --from hf --to trident --input "$out/hf_random" --output "$out/ckpt_random" \
  --make-vocab-size-divisible-by 1
"$bin" convert --from hf --to trident --input "$out/hf_random" --output "$out/ckpt_random_padded"
random_loss=$(trident_loss "$out/ckpt_random" "${model[@]}")
# Megatron's default padding (128): 50304 rows
random_padded_loss=$(trident_loss "$out/ckpt_random_padded" --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --max-position-embeddings 64 --openai-gelu)

# ------------------------------------------------------------------ 3. back to Hugging Face
"$bin" convert --from trident --to hf --input "$out/ckpt_random" --output "$out/hf_random_back"

# ------------------------------------------------------------------ compare in transformers
"$py" - "$out" "$trained_loss" "$random_loss" "$random_padded_loss" <<'EOF'
import json, math, sys
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import GPT2LMHeadModel

out, trained, random, padded = sys.argv[1], *map(float, sys.argv[2:])
samples = torch.tensor([json.loads(l) for l in open(f"{out}/valid_samples.jsonl")])
tokens, targets = samples[:, :-1], samples[:, 1:]

def hf_loss(path):
    model = GPT2LMHeadModel.from_pretrained(path).eval()
    with torch.no_grad():
        logits = model(tokens).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item()

failed = 0
def check(ok, what):
    global failed
    failed += not ok
    print(("  ok    " if ok else "  FAIL  ") + what)

a = hf_loss(f"{out}/hf_trained")
check(abs(a - trained) <= 1e-4 * trained,
      f"trained in trident, loaded in transformers: loss {a:.6f}, trident's {trained:.6f}")
b = hf_loss(f"{out}/hf_random")
check(abs(b - random) <= 1e-4 * b,
      f"random GPT-2 from transformers, imported: trident's loss {random:.6f}, transformers' {b:.6f}")
bound = math.log(1 + (50304 - 50257) / 50257)
check(-1e-4 * b <= padded - b <= bound + 1e-4 * b,
      f"imported with padding to 50304: trident's loss {padded:.6f} (+{padded - b:.2g}, bound {bound:.2g})")
orig, back = load_file(f"{out}/hf_random/model.safetensors"), load_file(f"{out}/hf_random_back/model.safetensors")
strip = lambda d: {k.removeprefix("transformer."): v for k, v in d.items() if not k.endswith(("attn.bias", "attn.masked_bias"))}
orig, back = strip(orig), strip(back)
same = orig.keys() == back.keys() and all(torch.equal(orig[k], back[k]) for k in orig)
check(same, f"transformers -> trident -> Hugging Face: all {len(orig)} tensors bit-identical")
print(f"{4 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
