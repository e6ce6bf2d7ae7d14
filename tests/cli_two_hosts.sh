#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces (each with its own hostname)
# joined by a veth pair, mpirun in the first launching the second rank through an
# rsh agent that enters the namespace owning the address, TCP only on the veth
# subnet (the recipe of docs/distributed.md, "Several hosts"). Checks:
#   - DP=2 and TP=2 across the two hosts print one host's losses;
#   - the veth link brought down mid-run ends the job within 30 s with a message
#     (Open MPI's daemons notice the lost host by TCP keepalive; trident's watchdog,
#     --distributed-timeout-minutes, would end a rank blocked in a call otherwise).
# Needs root and iproute2 (ip netns) and unshare: otherwise reported skipped (exit 77).
# Arguments: the trident binary and the source directory.
set -u
bin=$(readlink -f "$1")
src=$2
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
  echo "SKIP: needs root, ip (iproute2) and unshare to make network namespaces"
  exit 77
fi
. "$src/tests/train_common.sh"

tag=td$$
nsa=${tag}a nsb=${tag}b
net=10.$((100 + $$ % 100)).$(($$ % 250)).0
ipa=${net%.0}.1 ipb=${net%.0}.2
cleanup() {
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! { ip netns add "$nsa" && ip netns add "$nsb" &&
  ip link add "${tag}va" type veth peer name "${tag}vb" &&
  ip link set "${tag}va" netns "$nsa" && ip link set "${tag}vb" netns "$nsb" &&
  ip -n "$nsa" addr add "$ipa/24" dev "${tag}va" && ip -n "$nsb" addr add "$ipb/24" dev "${tag}vb" &&
  ip -n "$nsa" link set "${tag}va" up && ip -n "$nsb" link set "${tag}vb" up &&
  ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up; } 2>"$tmp/netns.err"; then
  echo "SKIP: cannot make network namespaces here: $(head -2 "$tmp/netns.err")"
  exit 77
fi

# The rsh agent Open MPI calls as `agent HOST COMMAND...`.
cat >"$tmp/rsh" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in
  $ipa) ns=$nsa; name=hostA ;;
  $ipb) ns=$nsb; name=hostB ;;
  *) echo "rsh agent: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec \$ns unshare --uts sh -c "hostname \$name; exec sh -c \"\\\$0\"" "\$*"
EOF
chmod +x "$tmp/rsh"

model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
  --log-interval 1 --eval-iters 0 --mock-data --tokenizer-type NullTokenizer --vocab-size 200
  --hidden-dropout 0.1 --attention-dropout 0.1)

# two_hosts LOG TIMEOUT ARGS...: trident train with one rank on each host.
two_hosts() {
  local log=$1 limit=$2
  shift 2
  ip netns exec "$nsa" unshare --uts sh -c 'hostname hostA; exec "$@"' sh \
    env OMP_NUM_THREADS=1 timeout -k 5 "$limit" "$mpirun" --allow-run-as-root -np 2 -H "$ipa:1,$ipb:1" \
    --mca plm_rsh_agent "$tmp/rsh" --mca oob_tcp_if_include "$net/24" \
    --mca btl_tcp_if_include "$net/24" --mca btl tcp,self -x OMP_NUM_THREADS \
    --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 \
    "$bin" train "${model[@]}" "$@" >"$log" 2>&1
}

run 1 "$tmp/one.log" --train-iters 20
for par in "" "--tensor-model-parallel-size 2"; do
  what="${par:-DP=2}"
  # shellcheck disable=SC2086
  two_hosts "$tmp/two.log" 120 --train-iters 20 $par || fail "$what across two hosts: exit $?: $(tail -3 "$tmp/two.log")"
  same "$tmp/two.log" "$tmp/one.log" 1e-6 "$what across hostA and hostB"
done

# The link goes down mid-run: no process dies, no TCP reset; the watchdog ends it.
t0=$SECONDS
two_hosts "$tmp/down.log" 120 --train-iters 100000000 --log-interval 50 --distributed-timeout-minutes 0.2 &
job=$!
for _ in $(seq 200); do grep -q "iteration *50/" "$tmp/down.log" 2>/dev/null && break; sleep 0.1; done
ip -n "$nsb" link set "${tag}vb" down
t1=$SECONDS
wait $job
rc=$?
took=$((SECONDS - t1))
# Open MPI's daemons notice the lost host by TCP keepalive (the oob_tcp_keepalive_*
# settings above, ~5 s) and end the job; trident's watchdog (12 s) is the backstop.
said=$(grep -m1 -oE "ORTE has lost communication with a remote daemon|rank [01] of 2 \(host host[AB]\): MPI_[A-Za-z]+ has not completed after [0-9]+ s" "$tmp/down.log")
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 30 ] && [ -n "$said" ]; then
  ok "link down: the job ended in $took s (exit $rc): $said"
else
  fail "link down: exit $rc after $took s (whole run $((SECONDS - t0)) s): $(grep -E 'error|iteration' "$tmp/down.log" | tail -3)"
fi
exit $failed
