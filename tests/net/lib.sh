# A cluster of hosts on one machine, for the multi-host tests (sourced, after
# nothing else: it sources tests/e2e/lib.sh itself). Needs root, iproute2
# (ip, tc), util-linux (nsenter, unshare) and nftables; without them the test
# is skipped (77), except under CI=true, where that is a failure.
#
# A host is a network namespace with its own hostname (UTS namespace) and
# mount namespace, held open by one sleeping "anchor" process; its eth0 is a
# veth whose other end is a port of a bridge in a switch namespace of its
# own. Addresses are NET_SUBNET.(10+i)/24 for host hI, names h0, h1, ... in
# every host's /etc/hosts. Nothing is added to the machine's own network
# namespace: two tests' clusters never see each other (each has its own
# switch), and net_down (on EXIT) removes everything, killing whatever still
# runs in the namespaces.
#
#     source tests/net/lib.sh
#     net_up 2                       # hosts h0 and h1
#     net_up 2 /tmp/ct-private       # ... each with its own empty tmpfs there
#     net_exec h1 hostname           # any command inside a host
#     net_mpirun h0:1,h1:1 2 "$CT_BINARY" --config ...    # Open MPI or hydra (CT_MPI)
#     net_rate 1gbit                 # every link shaped, both ways (tc tbf)
#     net_loss h1 1                  # 1 % of h1's incoming TCP packets dropped (nftables)
#     net_cut h1 / net_mend h1       # h1's cable out / back in
#     net_bytes h1                   # bytes through h1's eth0 (rx + tx)
#     net_pids h1                    # processes in h1 other than its anchor
#
# MPI across the hosts: Open MPI's mpirun runs in h0 and starts its daemons
# (orted) through an rsh agent ($NET_DIR/rsh HOST COMMAND...) that enters the
# host's namespaces, as ssh would on real nodes (like ssh without keepalives:
# a cut link is not noticed by the agent); the ranks use the TCP transport
# (btl tcp,self; pml ob1: no shared memory between hosts) on the test subnet
# only. MPICH's hydra uses the same agent (-launcher rsh), and UCX_TLS=tcp,self
# (its UCX would otherwise see one machine and use shared memory).
source "$(dirname "${BASH_SOURCE[0]}")/../e2e/lib.sh"

if [ "$(id -u)" != 0 ] || ! command -v nsenter >/dev/null || ! command -v tc >/dev/null ||
   ! command -v nft >/dev/null; then
  skip "network tests need root, iproute2, util-linux and nftables (launch/setup.sh)"
fi

NET_SUBNET=10.231.57
NET_ID=ctn$(($$ % 100000))
NET_DIR=$WORK/net
NET_HOSTS=()
NET_PRIVATE=
trap 'net_down; rm -rf "$WORK"' EXIT

# _net_detached CMD...: CMD in the background, its own session, holding none
# of this shell's files (a held ctest pipe or lock would keep waiting on it).
_net_detached() {
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null
    done
    exec setsid "$@" </dev/null >/dev/null 2>&1
  ) &
  disown
}

_net_pid() { cat "$NET_DIR/$1.pid"; }

# net_up K [PRIVATE_DIR]: hosts h0..h(K-1) on one bridge, unshaped.
net_up() {
  local k=$1 i h ns
  NET_PRIVATE=${2:-}
  mkdir -p "$NET_DIR"
  {
    echo "127.0.0.1 localhost"
    for ((i = 0; i < k; i++)); do echo "$NET_SUBNET.$((10 + i)) h$i"; done
  } >"$NET_DIR/hosts"
  ip netns add "${NET_ID}s"
  ip -n "${NET_ID}s" link add br0 type bridge
  ip -n "${NET_ID}s" link set br0 up
  [ -z "$NET_PRIVATE" ] || mkdir -p "$NET_PRIVATE"
  for ((i = 0; i < k; i++)); do
    h=h$i ns=$NET_ID$h
    ip netns add "$ns"
    NET_HOSTS+=("$h")
    ip link add eth0 netns "$ns" type veth peer name "p$i" netns "${NET_ID}s"
    ip -n "${NET_ID}s" link set "p$i" master br0
    ip -n "${NET_ID}s" link set "p$i" up
    ip -n "$ns" addr add "$NET_SUBNET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # The anchor: the host's own hostname, /etc/hosts and (optionally) an
    # empty private directory, in a mount namespace of its own.
    _net_detached ip netns exec "$ns" unshare --uts --mount --propagation private sh -c \
      'hostname "$1" && mount --bind "$2" /etc/hosts && { [ -z "$3" ] || mount -t tmpfs -o size=256m ct-private "$3"; } &&
       echo $$ >"$4.tmp" && mv "$4.tmp" "$4" && exec sleep 100000' _ "$h" "$NET_DIR/hosts" "$NET_PRIVATE" "$NET_DIR/$h.pid"
  done
  for h in "${NET_HOSTS[@]}"; do
    for ((i = 0; i < 100; i++)); do [ -s "$NET_DIR/$h.pid" ] && break; sleep 0.05; done
    [ -s "$NET_DIR/$h.pid" ] || { echo "net_up: host $h did not start"; return 1; }
    [ "$(net_exec "$h" hostname)" = "$h" ] || { echo "net_up: host $h has no hostname of its own"; return 1; }
  done
  # The rsh agent MPI starts its daemons with: "AGENT HOST COMMAND...".
  cat >"$NET_DIR/rsh" <<EOF
#!/bin/sh
host=\$1
shift
exec nsenter -t "\$(cat "$NET_DIR/\$host.pid")" -n -u -m -- /bin/sh -c "\$*"
EOF
  chmod +x "$NET_DIR/rsh"
}

# net_down: everything net_up made, and every process still in it.
net_down() {
  local ns pids
  for ns in $(ip netns list 2>/dev/null | awk -v p="$NET_ID" 'index($1, p) == 1 { print $1 }'); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  NET_HOSTS=()
}

# net_exec HOST CMD...: CMD inside HOST (its network, hostname and files).
net_exec() {
  local h=$1
  shift
  nsenter -t "$(_net_pid "$h")" -n -u -m -- "$@"
}

# net_port HOST: the switch's port for HOST (p<i>).
_net_port() { echo "p${1#h}"; }

# net_rate RATE [HOST...]: shape the links of HOSTs (default all) to RATE
# (tc's units: 1gbit, 100mbit) in both directions: the host's egress on its
# eth0, its ingress as the switch port's egress. RATE "off" removes it.
net_rate() {
  local rate=$1 h
  shift
  for h in "${@:-${NET_HOSTS[@]}}"; do
    if [ "$rate" = off ]; then
      net_exec "$h" tc qdisc del dev eth0 root 2>/dev/null || true
      ip netns exec "${NET_ID}s" tc qdisc del dev "$(_net_port "$h")" root 2>/dev/null || true
    else
      # A burst of 1 ms at the rate (at least 64 KB), a queue of 20 ms.
      net_exec "$h" tc qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 20ms
      ip netns exec "${NET_ID}s" tc qdisc replace dev "$(_net_port "$h")" root tbf rate "$rate" burst 256kb latency 20ms
    fi
  done
}

# net_loss HOST PERCENT: drop PERCENT % of the TCP packets HOST receives on
# its eth0, at random (0: none).
net_loss() {
  net_exec "$1" nft delete table inet ctloss 2>/dev/null || true
  [ "$2" = 0 ] && return 0
  net_exec "$1" nft -f - <<EOF
table inet ctloss {
  chain input {
    type filter hook input priority 0; policy accept;
    iifname "eth0" meta l4proto tcp numgen random mod 100 < $2 drop
  }
}
EOF
}

# net_cut HOST / net_mend HOST: HOST's cable out of the switch, and back.
net_cut() { ip -n "${NET_ID}s" link set "$(_net_port "$1")" down; }
net_mend() { ip -n "${NET_ID}s" link set "$(_net_port "$1")" up; }

# net_bytes HOST: bytes received + sent on HOST's eth0 so far.
net_bytes() {
  net_exec "$1" sh -c 'echo $(($(cat /sys/class/net/eth0/statistics/rx_bytes) + $(cat /sys/class/net/eth0/statistics/tx_bytes)))'
}

# net_pids HOST: "PID COMMAND" of every process in HOST but its anchor.
net_pids() {
  local anchor p
  anchor=$(_net_pid "$1")
  for p in $(ip netns pids "$NET_ID$1" 2>/dev/null); do
    [ "$p" = "$anchor" ] || echo "$p $(cat /proc/"$p"/comm 2>/dev/null)"
  done
}

# net_mpirun HOSTS NP ARGS...: ARGS (a program and its arguments) on NP ranks
# over HOSTS ("h0:1,h1:1": host:slots, as both launchers take them), the
# launcher running in h0. The launcher's own flags come from NET_MPI_ARGS
# (an array, may be empty); it is ended after NET_TIMEOUT seconds (default
# 300: a hung job fails its test instead of its CI).
NET_MPI_ARGS=()
NET_TIMEOUT=300
net_mpirun() {
  local hosts=$1 np=$2
  shift 2
  if [ "$CT_MPI" = mpich ]; then
    net_exec h0 timeout -k 10 "$NET_TIMEOUT" env UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 HYDRA_IFACE=eth0 \
      "$CT_MPIEXEC" -launcher rsh -launcher-exec "$NET_DIR/rsh" -hosts "$hosts" -np "$np" \
      -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES eth0 "${NET_MPI_ARGS[@]}" "$@"
  else
    net_exec h0 timeout -k 10 "$NET_TIMEOUT" "$CT_MPIEXEC" --allow-run-as-root --host "$hosts" -np "$np" --bind-to none \
      --mca plm_rsh_agent "$NET_DIR/rsh" --mca plm_rsh_no_tree_spawn 1 \
      --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$NET_SUBNET.0/24" \
      --mca oob_tcp_if_include "$NET_SUBNET.0/24" "${NET_MPI_ARGS[@]}" "$@"
  fi
}
