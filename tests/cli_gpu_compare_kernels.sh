#!/usr/bin/env bash
# bench/gpu/compare_kernels.py (issue #12 item 4: trident's GEMMs and attention
# against PyTorch's at the same shapes): on hand-made measurement lines it pairs
# each GEMM by dtype, m, k, n and transposes, each attention kernel with the
# fastest SDPA backend, flags GEMMs under 90% and attention under 80%, reports a
# shape without a peer, and exits 1 then; 0 when every line holds; 2 on a
# missing file; then the peer script's own GEMM list is trident's (the shapes
# tools/bench_kernels.c times). Arguments: the trident binary and the source
# directory.
set -u
src=$2
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok
cmp=$src/bench/gpu/compare_kernels.py
g() { # KERNEL-FIELDS GFLOPS
  echo "{\"kernel\": \"matmul\", \"dtype\": \"bf16\", $1, \"gflops\": $2}"
}
a() { # KERNEL BACKEND GFLOPS
  echo "{\"kernel\": \"$1\", ${2:+\"backend\": \"$2\", }\"dtype\": \"bf16\", \"batch\": 4, \"seq\": 1024, \"heads\": 12, \"head_dim\": 64, \"gflops\": $3}"
}
s1='"m": 4096, "k": 768, "n": 2304, "trans_a": 0, "trans_b": 1'
s2='"m": 2304, "k": 4096, "n": 768, "trans_a": 1, "trans_b": 0'
{ g "$s1" 500; g "$s2" 440; a attention_forward "" 160; a attention_fwd_bwd "" 150; } >"$tmp/ours"
# the peer: s1 at 550 (500/550 = 91%: holds), s2 at 500 (88%: flagged), a GEMM of
# the same m, k, n with the other transposes (must not pair), attention from two
# backends (the faster one counts: 160/190 = 84% holds, 150/200 = 75% flagged)
{ g "$s1" 550; g "$s2" 500; g '"m": 2304, "k": 4096, "n": 768, "trans_a": 0, "trans_b": 0' 100
  a attention_forward math 20; a attention_forward cudnn 190
  a attention_fwd_bwd cudnn 200; a attention_fwd_bwd flash_attention 120; } >"$tmp/peer"
python3 "$cmp" "$tmp/ours" "$tmp/peer" >"$tmp/out" 2>&1
rc=$?
summary=$(tail -1 "$tmp/out")
if [ $rc = 1 ] && grep -q '4 compared, 2 below their floor' <<<"$summary" &&
  grep -q 'm=4096 k=768 n=2304 ta=0 tb=1 .* 91%$' "$tmp/out" &&
  grep -q 'm=2304 k=4096 n=768 ta=1 tb=0 .* 88%  BELOW 90%' "$tmp/out" &&
  grep -q 'attention_forward .* 84%  (sdpa cudnn)' "$tmp/out" &&
  grep -q 'attention_fwd_bwd .* 75%  BELOW 80%  (sdpa cudnn)' "$tmp/out"; then
  ok "ratios, floors and pairing: $summary"
else
  fail "rc $rc: $(cat "$tmp/out")"
fi
{ g "$s1" 500; a attention_forward "" 160; } >"$tmp/ours2"
{ g "$s1" 520; a attention_forward cudnn 170; } >"$tmp/peer2"
python3 "$cmp" "$tmp/ours2" "$tmp/peer2" >"$tmp/out2" 2>&1 && grep -q '2 compared, 0 below' "$tmp/out2" &&
  ok "every line holds: exit 0" || fail "all within: $(cat "$tmp/out2")"
g '"m": 1, "k": 2, "n": 3, "trans_a": 0, "trans_b": 0' 5 >"$tmp/ours3"
python3 "$cmp" "$tmp/ours3" "$tmp/peer2" >"$tmp/out3" 2>&1
[ $? = 1 ] && grep -q '1 without a peer figure' "$tmp/out3" && ok "a shape without a peer: exit 1" ||
  fail "missing peer: $(cat "$tmp/out3")"
python3 "$cmp" "$tmp/none" "$tmp/peer2" >"$tmp/out4" 2>&1
[ $? = 2 ] && grep -q 'compare_kernels: .*none' "$tmp/out4" && ok "a missing file: exit 2, named" ||
  fail "missing file: $(cat "$tmp/out4")"
# the peer's GEMM list is the one trident times: the names and shapes of tools/bench_kernels.c
python3 - "$src" <<'PY' >"$tmp/shapes" 2>&1 && ok "peer's GEMM shapes: $(cat "$tmp/shapes")" || fail "peer's GEMM shapes: $(cat "$tmp/shapes")"
import re, sys, types
src = sys.argv[1]
text = open(f"{src}/bench/gpu/peer_torch_kernels.py").read()
# the shape list without importing torch (the CI machine need not have it)
mod = types.ModuleType("peer")
code = text.split("def median_seconds")[0].replace("import torch\n", "")
exec(code, mod.__dict__)
peer = [(m, k, n, ta, tb) for _, m, k, n, ta, tb in mod.gemm_shapes()]
c = open(f"{src}/tools/bench_kernels.c").read()
layers = re.findall(r'\{"(\w+)", (\d+), (\d+)\}', c.split("layers[] = {")[1].split("};")[0])
tokens = int(re.search(r"const int64_t tokens = (\d+);", c).group(1))
ours = []
for _, i, o in layers:
    i, o = int(i), int(o)
    ours += [(tokens, i, o, 0, 1), (tokens, o, i, 0, 0), (o, tokens, i, 1, 0)]
assert peer == ours, f"peer {peer} != trident {ours}"
print(f"{len(peer)} shapes, as tools/bench_kernels.c")
PY
exit $failed
