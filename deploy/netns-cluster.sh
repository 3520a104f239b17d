#!/usr/bin/env bash
# netns-cluster.sh - test hosts as network namespaces on this machine.
#
#   netns-cluster.sh up N [--rate 1gbit] [--loss 0%] [--delay D] [--tag T]
#   netns-cluster.sh partition 1,2 3,4 [--tag T]   groups of host numbers (1..N)
#   netns-cluster.sh heal [--tag T]
#   netns-cluster.sh down [--tag T]
#   netns-cluster.sh hosts [--tag T]               "NUMBER NAMESPACE ADDRESS" per host
#
# up: N namespaces <T>-1..<T>-N (T defaults to "hn"), each with a veth into a
# bridge in the hub namespace <T>-hub, address 10.213.8.<i>/24 (host i), lo up,
# egress shaped by tbf (rate, burst max(64KiB, rate*2ms), latency 100ms).
# --loss P% drops P % of incoming packets in every host (nftables numgen
# random). --delay needs sch_netem, which this kernel lacks: it fails with a
# clear message. partition: nftables rules in each host drop traffic to and
# from hosts of the other groups (hosts not named are cut from everyone).
# heal: removes them. down: removes everything `up` made; `up` removes its
# partial work itself if it fails or is interrupted. Needs root. Only
# addresses inside 10.213.8.0/24, in namespaces made here, carry traffic.
set -euo pipefail
CMD="${1:-}"; shift || true
TAG=hn RATE="" LOSS="" DELAY="" ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --loss) LOSS="${2%\%}"; shift 2 ;;
    --delay) DELAY="$2"; shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
HUB="$TAG-hub"
die() { echo "netns-cluster: $*" >&2; exit 2; }
[[ $(id -u) == 0 ]] || die "needs root (ip netns, tc, nft)"
hosts() { ip netns list | awk '{print $1}' | grep -E "^$TAG-[0-9]+$" | sort -t- -k2 -n || true; }
count() { hosts | wc -l; }

down() {
  for ns in $(hosts); do ip netns del "$ns" 2>/dev/null || true; done
  ip netns del "$HUB" 2>/dev/null || true
}

burst_for() { # tbf burst: max(64KiB, rate * 2 ms)
  python3 -c "import re,sys;r=sys.argv[1];m=re.fullmatch(r'([0-9.]+)([kmg]?)bit',r)
if not m: sys.exit(1)
v=float(m.group(1))*{'':1,'k':1e3,'m':1e6,'g':1e9}[m.group(2)];print(max(65536,int(v/8*0.002)))" "$1"
}

up() {
  local n="${ARGS[0]:-}"
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die "up wants a host count 1..200 (got '${n}')"
  if [[ -n $DELAY ]]; then
    ip netns add "$TAG-probe"
    if ! ip netns exec "$TAG-probe" tc qdisc add dev lo root netem delay "$DELAY" 2>/dev/null; then
      ip netns del "$TAG-probe"
      die "--delay $DELAY needs the sch_netem qdisc, which this kernel does not have"
    fi
    ip netns del "$TAG-probe"
  fi
  local burst=""
  if [[ -n $RATE ]]; then burst=$(burst_for "$RATE") || die "--rate wants e.g. 1gbit or 100mbit (got '$RATE')"; fi
  if [[ -n $LOSS ]]; then [[ $LOSS =~ ^[0-9]+$ && $LOSS -le 100 ]] || die "--loss wants a percentage 0..100 (got '$LOSS%')"; fi
  [[ $(count) == 0 ]] || die "hosts $TAG-* already exist: run 'down --tag $TAG' first"
  trap 'echo "netns-cluster: up failed or interrupted, removing what it made" >&2; down; exit 1' ERR INT TERM
  ip netns add "$HUB"
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" link set br0 up
  ip -n "$HUB" link set lo up
  for i in $(seq 1 "$n"); do
    local ns="$TAG-$i"
    ip netns add "$ns"
    ip link add "h$i" netns "$ns" type veth peer name "p$i" netns "$HUB"
    ip -n "$HUB" link set "p$i" master br0
    ip -n "$HUB" link set "p$i" up
    ip -n "$ns" addr add "10.213.8.$i/24" dev "h$i"
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "h$i" up
    if [[ -n $RATE ]]; then
      ip netns exec "$ns" tc qdisc add dev "h$i" root tbf rate "$RATE" burst "$burst" latency 100ms
    fi
    if [[ -n $LOSS && $LOSS != 0 ]]; then
      ip netns exec "$ns" nft add table inet hora_loss
      ip netns exec "$ns" nft add chain inet hora_loss in '{ type filter hook input priority 0; }'
      ip netns exec "$ns" nft add rule inet hora_loss in ip saddr 10.213.8.0/24 numgen random mod 100 '<' "$LOSS" drop
    fi
  done
  trap - ERR INT TERM
  echo "netns-cluster: $n hosts up ($TAG-1..$TAG-$n, 10.213.8.1..$n${RATE:+, $RATE}${LOSS:+, $LOSS% loss})"
}

heal() {
  for ns in $(hosts); do ip netns exec "$ns" nft delete table inet hora_part 2>/dev/null || true; done
}

partition() {
  [[ ${#ARGS[@]} -ge 2 ]] || die "partition wants at least two groups, e.g. 1,2 3,4"
  local n; n=$(count)
  [[ $n -ge 2 ]] || die "no hosts: run 'up N' first"
  heal
  declare -A group
  local gi=0
  for g in "${ARGS[@]}"; do
    gi=$((gi + 1))
    IFS=, read -ra hs <<<"$g"
    for h in "${hs[@]}"; do
      [[ $h =~ ^[0-9]+$ && $h -ge 1 && $h -le $n ]] || die "host $h is not in 1..$n"
      [[ -z ${group[$h]:-} ]] || die "host $h is in two groups"
      group[$h]=$gi
    done
  done
  for i in $(seq 1 "$n"); do
    local others=()
    for j in $(seq 1 "$n"); do
      [[ $i == "$j" ]] && continue
      if [[ -z ${group[$i]:-} || -z ${group[$j]:-} || ${group[$i]} != "${group[$j]}" ]]; then others+=("10.213.8.$j"); fi
    done
    [[ ${#others[@]} -gt 0 ]] || continue
    local set; set=$(IFS=,; echo "${others[*]}")
    local ns="$TAG-$i"
    ip netns exec "$ns" nft add table inet hora_part
    ip netns exec "$ns" nft add chain inet hora_part in '{ type filter hook input priority 0; }'
    ip netns exec "$ns" nft add chain inet hora_part out '{ type filter hook output priority 0; }'
    ip netns exec "$ns" nft add rule inet hora_part in ip saddr "{ $set }" drop
    ip netns exec "$ns" nft add rule inet hora_part out ip daddr "{ $set }" drop
  done
  echo "netns-cluster: partitioned ${ARGS[*]}"
}

case "$CMD" in
  up) up ;;
  down) down; echo "netns-cluster: down ($TAG)" ;;
  heal) heal; echo "netns-cluster: healed" ;;
  partition) partition ;;
  hosts) for ns in $(hosts); do i=${ns##*-}; echo "$i $ns 10.213.8.$i"; done ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
