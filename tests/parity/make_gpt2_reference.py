#!/usr/bin/env python3
"""Reference numbers for tests/test_gpt_parity.c from a plain PyTorch GPT-2.

The model is trident's (Megatron's GPT with --transformer-impl local): learned
position embeddings, pre-LayerNorm blocks, a fused QKV linear whose output per
token is [heads, 3, head_dim] (Megatron's per-head [q|k|v] interleave), exact erf
GELU, final LayerNorm, output layer tied to the word embeddings, no dropout.
Weights are stored as PyTorch's Linear, [out_features, in_features].

The script draws random weights (seeded numpy, larger than the training init so
every path carries signal), tokens, targets and a loss mask, then computes in
float64:
  - the masked mean loss sum(loss * mask) / sum(mask) and every parameter gradient,
  - the losses after each of 3 AdamW steps (torch.optim.AdamW, lr 1e-3, betas
    0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D tensors only, as Megatron; no
    clipping) on the same batch.
It also runs the loss and gradients in float32 and prints how far they are from
float64: the accuracy a float32 implementation can be held to.

For the Hugging Face interchange (tests/test_hf_convert.c) it also writes the same
weights in transformers' GPT-2 names and layouts (Conv1D weights [in, out],
c_attn's outputs [q | k | v] over all heads), re-laid out with numpy reshapes,
and checks that a GPT-2 forward written as transformers' modeling_gpt2 computes it
(x @ W + b, qkv.split, heads split from each part) gives the same float64 loss.

Output: tests/parity/gpt2_tiny_ref.safetensors (written without the safetensors
package: 8-byte little-endian header length, JSON header, raw data)
  <trident name>        F32  the weights, in trident's naming and layout
  hf.<HF name>          F32  the same weights in Hugging Face GPT-2's names and layouts
                             (no "transformer." prefix; tied: no lm_head)
  grad.<trident name>   F32  float64 gradient of the masked mean loss, rounded
  tokens, targets       I32  [batch, seq]
  loss_mask             F32  [batch, seq]
  __metadata__          config (num_layers, hidden, heads, ffn_hidden, seq_len,
                        max_positions, vocab_size, layernorm_eps), loss, step_losses
                        (comma separated), lr, beta1, beta2, eps, weight_decay;
                        numbers printed with 17 significant digits.

Run: /usr/bin/python3 tests/parity/make_gpt2_reference.py  (Debian's python3-torch)
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

CFG = dict(num_layers=2, hidden=24, heads=3, ffn_hidden=96, seq_len=12, max_positions=16,
           vocab_size=64, layernorm_eps=1e-5)
BATCH = 2
ADAM = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
STEPS = 3


def param_shapes(cfg):
    """Trident's tensors in its order: (name, shape)."""
    h, f, v, p = cfg["hidden"], cfg["ffn_hidden"], cfg["vocab_size"], cfg["max_positions"]
    out = [("embedding.word_embeddings.weight", (v, h)),
           ("embedding.position_embeddings.weight", (p, h))]
    for i in range(cfg["num_layers"]):
        pre = f"decoder.layers.{i}."
        out += [(pre + "input_layernorm.weight", (h,)), (pre + "input_layernorm.bias", (h,)),
                (pre + "self_attention.linear_qkv.weight", (3 * h, h)),
                (pre + "self_attention.linear_qkv.bias", (3 * h,)),
                (pre + "self_attention.linear_proj.weight", (h, h)),
                (pre + "self_attention.linear_proj.bias", (h,)),
                (pre + "pre_mlp_layernorm.weight", (h,)), (pre + "pre_mlp_layernorm.bias", (h,)),
                (pre + "mlp.linear_fc1.weight", (f, h)), (pre + "mlp.linear_fc1.bias", (f,)),
                (pre + "mlp.linear_fc2.weight", (h, f)), (pre + "mlp.linear_fc2.bias", (h,))]
    out += [("decoder.final_layernorm.weight", (h,)), ("decoder.final_layernorm.bias", (h,))]
    return out


def random_weights(cfg, rng):
    w = {}
    for name, shape in param_shapes(cfg):
        if "layernorm.weight" in name:
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("bias"):
            a = 0.1 * rng.standard_normal(shape)
        elif "embeddings" in name:
            a = 0.5 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / math.sqrt(shape[1])
        w[name] = a.astype(np.float32)  # the weights both sides start from
    return w


def gpt_loss(p, tokens, targets, mask, cfg):
    """Masked mean cross-entropy of the GPT over tokens [B, T]."""
    B, T = tokens.shape
    C, H, L, eps = cfg["hidden"], cfg["heads"], cfg["num_layers"], cfg["layernorm_eps"]
    D = C // H
    x = p["embedding.word_embeddings.weight"][tokens] + p["embedding.position_embeddings.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        q_ = lambda s: p[f"decoder.layers.{i}.{s}"]
        h = F.layer_norm(x, (C,), q_("input_layernorm.weight"), q_("input_layernorm.bias"), eps)
        qkv = h @ q_("self_attention.linear_qkv.weight").T + q_("self_attention.linear_qkv.bias")
        q, k, v = qkv.view(B, T, H, 3, D).unbind(3)  # per head [q | k | v]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)
        o = (a @ v).transpose(1, 2).reshape(B, T, C)
        x = x + o @ q_("self_attention.linear_proj.weight").T + q_("self_attention.linear_proj.bias")
        h = F.layer_norm(x, (C,), q_("pre_mlp_layernorm.weight"), q_("pre_mlp_layernorm.bias"), eps)
        h = F.gelu(h @ q_("mlp.linear_fc1.weight").T + q_("mlp.linear_fc1.bias"))  # exact erf
        x = x + h @ q_("mlp.linear_fc2.weight").T + q_("mlp.linear_fc2.bias")
    x = F.layer_norm(x, (C,), p["decoder.final_layernorm.weight"], p["decoder.final_layernorm.bias"], eps)
    logits = x @ p["embedding.word_embeddings.weight"].T  # tied output layer
    losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    m = mask.reshape(-1)
    return (losses * m).sum() / m.sum()


def to_hf(w, cfg):
    """trident (Megatron) weights -> Hugging Face GPT-2 names and layouts."""
    C, H = cfg["hidden"], cfg["heads"]
    D = C // H
    hf = {"wte.weight": w["embedding.word_embeddings.weight"],
          "wpe.weight": w["embedding.position_embeddings.weight"],
          "ln_f.weight": w["decoder.final_layernorm.weight"],
          "ln_f.bias": w["decoder.final_layernorm.bias"]}
    for i in range(cfg["num_layers"]):
        t = lambda s: w[f"decoder.layers.{i}.{s}"]
        qkv_w = t("self_attention.linear_qkv.weight").reshape(H, 3, D, C)  # rows [H, 3, D]
        qkv_b = t("self_attention.linear_qkv.bias").reshape(H, 3, D)
        layer = {"ln_1.weight": t("input_layernorm.weight"), "ln_1.bias": t("input_layernorm.bias"),
                 # rows [3, H, D] = [q | k | v], then Conv1D's [in, out]
                 "attn.c_attn.weight": qkv_w.transpose(1, 0, 2, 3).reshape(3 * C, C).T,
                 "attn.c_attn.bias": qkv_b.transpose(1, 0, 2).reshape(3 * C),
                 "attn.c_proj.weight": t("self_attention.linear_proj.weight").T,
                 "attn.c_proj.bias": t("self_attention.linear_proj.bias"),
                 "ln_2.weight": t("pre_mlp_layernorm.weight"), "ln_2.bias": t("pre_mlp_layernorm.bias"),
                 "mlp.c_fc.weight": t("mlp.linear_fc1.weight").T, "mlp.c_fc.bias": t("mlp.linear_fc1.bias"),
                 "mlp.c_proj.weight": t("mlp.linear_fc2.weight").T,
                 "mlp.c_proj.bias": t("mlp.linear_fc2.bias")}
        hf.update({f"h.{i}.{k}": np.ascontiguousarray(v) for k, v in layer.items()})
    return hf


def hf_gpt2_loss(p, tokens, targets, mask, cfg):
    """Masked mean loss of GPT-2 computed as transformers' modeling_gpt2 does."""
    B, T = tokens.shape
    C, H, eps = cfg["hidden"], cfg["heads"], cfg["layernorm_eps"]
    conv1d = lambda x, name: x @ p[name + ".weight"] + p[name + ".bias"]
    heads = lambda x: x.view(B, T, H, C // H).transpose(1, 2)
    x = p["wte.weight"][tokens] + p["wpe.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg["num_layers"]):
        ln = lambda x, n: F.layer_norm(x, (C,), p[f"h.{i}.{n}.weight"], p[f"h.{i}.{n}.bias"], eps)
        q, k, v = conv1d(ln(x, "ln_1"), f"h.{i}.attn.c_attn").split(C, dim=2)
        q, k, v = heads(q), heads(k), heads(v)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)
        x = x + conv1d((a @ v).transpose(1, 2).reshape(B, T, C), f"h.{i}.attn.c_proj")
        x = x + conv1d(F.gelu(conv1d(ln(x, "ln_2"), f"h.{i}.mlp.c_fc")), f"h.{i}.mlp.c_proj")
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps)
    logits = x @ p["wte.weight"].T  # tied lm_head
    losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    m = mask.reshape(-1)
    return (losses * m).sum() / m.sum()


def loss_and_grads(weights, batch, dtype):
    p = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in weights.items()}
    tokens, targets, mask = batch
    loss = gpt_loss(p, tokens, targets, mask.to(dtype), CFG)
    loss.backward()
    return loss.item(), {k: t.grad.detach().numpy() for k, t in p.items()}


def adamw_trajectory(weights, batch):
    """Losses after each AdamW step (float64), Megatron's no-decay rule."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in weights.items()}
    decay = [t for t in p.values() if t.dim() == 2]
    no_decay = [t for t in p.values() if t.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": ADAM["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=ADAM["lr"], betas=(ADAM["beta1"], ADAM["beta2"]), eps=ADAM["eps"])
    tokens, targets, mask = batch
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        gpt_loss(p, tokens, targets, mask.to(torch.float64), CFG).backward()
        opt.step()
        with torch.no_grad():
            losses.append(gpt_loss(p, tokens, targets, mask.to(torch.float64), CFG).item())
    return losses


def write_safetensors(path, tensors, metadata):
    tags = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": tags[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(blobs))


def rel_err(got, ref):
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-300))


def main():
    torch.use_deterministic_algorithms(True)
    rng = np.random.default_rng(20240611)
    weights = random_weights(CFG, rng)
    shape = (BATCH, CFG["seq_len"])
    tokens = rng.integers(0, CFG["vocab_size"], shape).astype(np.int32)
    targets = rng.integers(0, CFG["vocab_size"], shape).astype(np.int32)
    mask = (rng.random(shape) < 0.8).astype(np.float32)
    batch = (torch.tensor(tokens, dtype=torch.long), torch.tensor(targets, dtype=torch.long),
             torch.tensor(mask))

    loss64, grads64 = loss_and_grads(weights, batch, torch.float64)
    loss32, grads32 = loss_and_grads(weights, batch, torch.float32)
    steps = adamw_trajectory(weights, batch)
    hf = to_hf(weights, CFG)
    hf_loss = hf_gpt2_loss({k: torch.tensor(v, dtype=torch.float64) for k, v in hf.items()},
                           batch[0], batch[1], batch[2].to(torch.float64), CFG).item()
    assert abs(hf_loss - loss64) <= 1e-12 * loss64, (hf_loss, loss64)
    print(f"Hugging Face layout: loss {hf_loss:.17g} (same as trident's layout)")
    worst = max(rel_err(grads32[k], grads64[k]) for k in grads64)
    print(f"loss float64 {loss64:.17g}, float32 rel err {abs(loss32 - loss64) / loss64:.3g}")
    print(f"gradients: float32 worst normwise rel err {worst:.3g}")
    print("losses after AdamW steps:", ", ".join(f"{x:.17g}" for x in steps))

    tensors = [(k, weights[k]) for k, _ in param_shapes(CFG)]
    tensors += [("hf." + k, v) for k, v in hf.items()]
    tensors += [("grad." + k, grads64[k].astype(np.float32)) for k, _ in param_shapes(CFG)]
    tensors += [("tokens", tokens), ("targets", targets), ("loss_mask", mask)]
    meta = {k: repr(v) for k, v in CFG.items()}
    meta.update({k: repr(v) for k, v in ADAM.items()})
    meta["loss"] = f"{loss64:.17g}"
    meta["step_losses"] = ",".join(f"{x:.17g}" for x in steps)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2_tiny_ref.safetensors")
    write_safetensors(out, tensors, meta)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
