#!/usr/bin/env python3
"""PyTorch's rates at the shapes `trident bench kernels` measures (issue #12, item 4).

For every GEMM of GPT-2 124M at 4096 tokens (the five linear layers, forward,
input gradient and weight gradient, with trident's m, k, n and transposes) it
times torch.matmul on row-major operands, which is cuBLAS's own pick on a GPU;
for causal attention at B=4, T=1024, H=12, D=64 it times
scaled_dot_product_attention forward and forward + backward with each backend
PyTorch has (cuDNN, FlashAttention-2, memory-efficient, math). One JSON line per
measurement, the fields of trident's `bench kernels --json` lines (kernel,
dtype, m, k, n, trans_a, trans_b, gflops; attention: batch, seq, heads,
head_dim, backend). bench/gpu/compare_kernels.py puts the two side by side.

    python3 peer_torch_kernels.py [--device cuda|cpu] [--dtype bf16|fp32] [--seconds S]

Times are medians of repeated runs after a warm-up, with CUDA events on a GPU
(each run's operands differ from the last's, so no run reads the previous
one's output from cache), on random normal data.
"""
import argparse
import json
import statistics
import time

import torch

LAYERS = [("qkv", 768, 2304), ("attn_proj", 768, 768), ("fc1", 768, 3072),
          ("fc2", 3072, 768), ("lm_head", 768, 50304)]
TOKENS = 4096


def gemm_shapes():
    """(name, m, k, n, trans_a, trans_b) as tools/bench_kernels.c lists them."""
    for name, inp, out in LAYERS:
        yield f"{name} fwd", TOKENS, inp, out, 0, 1
        yield f"{name} bwd-input", TOKENS, out, inp, 0, 0
        yield f"{name} bwd-weight", out, TOKENS, inp, 1, 0


def median_seconds(fn, device, seconds):
    """Median time of fn() over runs filling about `seconds`, after a warm-up."""
    fn()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 200):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def operand(rows, cols, transposed, dtype, device):
    """A row-major rows x cols operand, or the transpose of a row-major cols x rows one."""
    if transposed:
        return torch.randn(cols, rows, dtype=dtype, device=device).t()
    return torch.randn(rows, cols, dtype=dtype, device=device)


def bench_gemms(a, dtype, name):
    for what, m, k, n, ta, tb in gemm_shapes():
        sets = [(operand(m, k, ta, dtype, a.device), operand(k, n, tb, dtype, a.device))
                for _ in range(2)]
        turn = [0]

        def run():
            x, y = sets[turn[0] % 2]
            turn[0] += 1
            torch.matmul(x, y)

        sec = median_seconds(run, a.device, a.seconds)
        print(json.dumps({"kernel": "matmul", "peer": "torch", "what": what, "dtype": name,
                          "m": m, "k": k, "n": n, "trans_a": ta, "trans_b": tb,
                          "gflops": round(2.0 * m * n * k / sec / 1e9, 1)}), flush=True)


def sdpa_backends():
    """(name, context manager factory or None for PyTorch's own pick)."""
    out = [("default", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return out
    for name in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"):
        if hasattr(SDPBackend, name):
            out.append((name.lower(), lambda b=getattr(SDPBackend, name): sdpa_kernel(b)))
    return out


def bench_attention(a, dtype, name):
    B, T, H, D = 4, 1024, 12, 64
    fwd_flops = 4.0 * B * H * T * T * D / 2  # trident's count: two GEMMs, halved by the mask
    q, k, v = (torch.randn(B, H, T, D, dtype=dtype, device=a.device, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(B, H, T, D, dtype=dtype, device=a.device)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for backend, ctx in sdpa_backends():
        if a.device == "cpu" and backend not in ("default", "math"):
            continue
        runs = {"attention_forward": (lambda: sdpa(q, k, v, is_causal=True), 1.0),
                "attention_fwd_bwd": (lambda: sdpa(q, k, v, is_causal=True).backward(dout), 3.5)}
        for kernel, (fn, mult) in runs.items():
            try:
                if ctx is None:
                    sec = median_seconds(fn, a.device, a.seconds)
                else:
                    with ctx():
                        sec = median_seconds(fn, a.device, a.seconds)
            except RuntimeError as e:  # a backend that does not take this dtype or device
                print(json.dumps({"kernel": kernel, "peer": "torch", "backend": backend,
                                  "dtype": name, "error": str(e).splitlines()[0][:160]}),
                      flush=True)
                continue
            print(json.dumps({"kernel": kernel, "peer": "torch", "backend": backend,
                              "dtype": name, "batch": B, "seq": T, "heads": H, "head_dim": D,
                              "gflops": round(mult * fwd_flops / sec / 1e9, 1)}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   choices=["cuda", "cpu"])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--seconds", type=float, default=0.3, help="time per measurement")
    p.add_argument("--only", default="", help="matmul or attention (default: both)")
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: PyTorch sees no GPU")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False  # trident's fp32 GEMMs are true fp32
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    if a.only in ("", "matmul"):
        bench_gemms(a, dtype, a.dtype)
    if a.only in ("", "attention"):
        bench_attention(a, dtype, a.dtype)


if __name__ == "__main__":
    main()
