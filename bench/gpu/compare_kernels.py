#!/usr/bin/env python3
"""trident's kernel rates next to PyTorch's at the same shapes (issue #12, item 4).

    trident bench kernels --device cuda --json > trident.jsonl
    python3 peer_torch_kernels.py > torch.jsonl
    python3 compare_kernels.py trident.jsonl torch.jsonl

Each GEMM of trident's list against torch.matmul (cuBLAS's own pick) at the same
m, k, n and transposes, flagged below 90%; attention forward and forward +
backward against the fastest SDPA backend PyTorch ran, flagged below 80%. The
last line sums it up; the exit status is 1 when a line is flagged or a shape has
no peer (so a script can tell), 2 on unreadable input.
"""
import json
import sys

GEMM_MIN, ATTENTION_MIN = 0.90, 0.80


def read_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        sys.exit(f"compare_kernels: {path}:{n}: not JSON ({e})")
    except OSError as e:
        print(f"compare_kernels: {e}", file=sys.stderr)
        sys.exit(2)
    return rows


def gemm_key(r):
    return (r["dtype"], r["m"], r["k"], r["n"], r["trans_a"], r["trans_b"])


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    ours, peer = read_jsonl(sys.argv[1]), read_jsonl(sys.argv[2])
    torch_gemm = {gemm_key(r): r for r in peer if r.get("kernel") == "matmul" and "gflops" in r}
    best_attention = {}
    for r in peer:
        if r.get("kernel", "").startswith("attention") and "gflops" in r:
            key = (r["kernel"], r["dtype"])
            if key not in best_attention or r["gflops"] > best_attention[key]["gflops"]:
                best_attention[key] = r
    flagged, missing, lines = 0, 0, 0
    print(f"{'kernel':<20} {'dtype':<5} {'shape':<34} {'trident':>10} {'torch':>10} {'ratio':>7}")
    for r in ours:
        kernel = r.get("kernel", "")
        if kernel == "matmul":
            p = torch_gemm.get(gemm_key(r))
            shape = f"m={r['m']} k={r['k']} n={r['n']} ta={r['trans_a']} tb={r['trans_b']}"
            floor, peer_name = GEMM_MIN, "matmul"
        elif kernel in ("attention_forward", "attention_fwd_bwd"):
            p = best_attention.get((kernel, r["dtype"]))
            shape = f"B={r['batch']} T={r['seq']} H={r['heads']} D={r['head_dim']}"
            floor = ATTENTION_MIN
            peer_name = f"sdpa {p['backend']}" if p else "sdpa"
        else:
            continue
        lines += 1
        if p is None:
            missing += 1
            print(f"{kernel:<20} {r['dtype']:<5} {shape:<34} {r['gflops']:>10.1f} {'-':>10}   "
                  f"no {peer_name} measurement")
            continue
        ratio = r["gflops"] / p["gflops"]
        low = ratio < floor
        flagged += low
        print(f"{kernel:<20} {r['dtype']:<5} {shape:<34} {r['gflops']:>10.1f} {p['gflops']:>10.1f} "
              f"{ratio:>6.0%}{'  BELOW ' + format(floor, '.0%') if low else ''}"
              f"{'  (' + peer_name + ')' if kernel != 'matmul' else ''}")
    print(f"kernels vs PyTorch: {lines} compared, {flagged} below their floor (GEMMs {GEMM_MIN:.0%}, "
          f"attention {ATTENTION_MIN:.0%} of the fastest SDPA), {missing} without a peer figure")
    sys.exit(1 if flagged or missing or lines == 0 else 0)


if __name__ == "__main__":
    main()
