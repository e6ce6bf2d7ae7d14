#!/usr/bin/env bash
# bench/gpu/scaling.sh (issue #12 item 5's DP equality and scaling report) run on
# the CPU and on the sealed device with its tiny model: every layout reports,
# DP=N matches DP=1 (with the gradients sent in bf16 too), ZeRO-1 with the
# overlapped parameter gather matches DP=N bit for bit, a run whose DP losses
# are off is caught (a wrapper that changes rank 0's printed losses under
# mpirun), and bad arguments exit 2.
# Arguments: the trident binary and the source directory.
set -u
bin=$1
src=$2
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
source "$(dirname "$0")/script_common.sh" # $tmp, fail, ok
script="$src/bench/gpu/scaling.sh"

if "$script" --trident "$bin" --device cpu --model tiny --dtype fp32 >"$tmp/cpu.out" 2>&1 &&
  grep -q '^DP=2 == DP=1: 8 losses' "$tmp/cpu.out" &&
  grep -q '^DP=2 ZeRO-1 with --overlap-param-gather == DP=2: 8 losses, worst relative difference 0 ' "$tmp/cpu.out" &&
  [ "$(grep -cE '^(dp1|dpN|dpNwire|dpNz1ovl|tp2|pp2) ' "$tmp/cpu.out")" = 6 ]; then
  ok "CPU fp32: six layouts timed, $(grep '^DP=' "$tmp/cpu.out" | tr '\n' ' ')"
else
  fail "CPU fp32 run: $(tail -5 "$tmp/cpu.out")"
fi

if "$script" --trident "$bin" --device sealed --model tiny --dtype bf16 --gpus 3 \
  --layouts "dp1 dpN dpNwire" >"$tmp/sealed.out" 2>&1 && grep -q '^DP=3 == DP=1' "$tmp/sealed.out" &&
  grep -q '^DP=3, gradients sent in bf16 (--grad-reduce-in-bf16) == DP=1' "$tmp/sealed.out"; then
  ok "sealed device bf16, 3 ranks: $(grep '^DP=' "$tmp/sealed.out" | tr '\n' ' ')"
else
  fail "sealed bf16 run: $(tail -5 "$tmp/sealed.out")"
fi

# A trident whose losses move under mpirun: the check must fail the run.
cat >"$tmp/off.sh" <<EOF
#!/usr/bin/env bash
if [ -n "\${OMPI_COMM_WORLD_SIZE:-}" ]; then
  "$bin" "\$@" | sed -E 's/lm loss: ([0-9])\.([0-9])/lm loss: \1.9/'
else
  exec "$bin" "\$@"
fi
EOF
chmod +x "$tmp/off.sh"
"$script" --trident "$tmp/off.sh" --device cpu --model tiny --dtype fp32 --layouts "dp1 dpN" \
  >"$tmp/off.out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q 'DP check FAILED' "$tmp/off.out"; then
  ok "DP losses off by a digit: caught (exit 1)"
else
  fail "DP losses off: exit $rc, $(tail -3 "$tmp/off.out")"
fi

for bad in "--dtype fp16" "--model huge" "--gpus 1" "--layouts dp9"; do
  # shellcheck disable=SC2086
  "$script" --trident "$bin" --device cpu $bad >"$tmp/bad.out" 2>&1
  rc=$?
  [ $rc = 2 ] && ok "$bad: exit 2 ($(head -1 "$tmp/bad.out" | cut -c1-90))" ||
    fail "$bad: exit $rc, expected 2: $(tail -2 "$tmp/bad.out")"
done
exit $failed
