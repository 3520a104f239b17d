#!/usr/bin/env bash
# p2p-compare.sh lo|netns [--reps N] [--rate 1gbit] [--anchors DIR]
# Interleaves hora's p2p bench with the anchors (iperf3 single stream, plain
# blocking-socket TCP ping-pong) on the same link, N times, and prints the
# medians and ratios (hora / anchor).
#   lo:    loopback in this namespace (anchors via ../shared/anchors/run.sh)
#   netns: two namespaces of our own joined by a veth pair, each egress shaped
#          with tbf (rate, burst max(64KiB, rate*2ms), latency 100ms, as the
#          anchors do); iperf3 and the ping-pong run on that same pair.
# Needs root for netns. Everything it creates is removed on exit.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SETUP="${1:-lo}"; shift || true
REPS=5 RATE=1gbit ANCH="${ANCHORS:-$ROOT/../shared/anchors}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --anchors) ANCH="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HORA="$ROOT/build/hora"
PP="$ANCH/build/tcp_pingpong"
[[ -x $HORA ]] || { echo "build hora first" >&2; exit 1; }
[[ -x $PP ]] || { echo "build the anchors first ($ANCH/install.sh && $ANCH/build.sh)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 missing (deploy/install-deps.sh)" >&2; exit 1; }
TMP="$(mktemp -d)"
export HORA_SECRET="p2p-compare-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
NS0="hp2p-$$-0" NS1="hp2p-$$-1"
cleanup() {
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  if [[ $SETUP == netns ]]; then ip netns del "$NS0" 2>/dev/null || true; ip netns del "$NS1" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

if [[ $SETUP == netns ]]; then
  ip netns add "$NS0"; ip netns add "$NS1"
  ip link add hp2p0 netns "$NS0" type veth peer name hp2p1 netns "$NS1"
  ip -n "$NS0" addr add 10.213.9.1/24 dev hp2p0; ip -n "$NS1" addr add 10.213.9.2/24 dev hp2p1
  for i in 0 1; do
    ns="hp2p-$$-$i"
    ip -n "$ns" link set lo up; ip -n "$ns" link set "hp2p$i" up
    bytes=$(python3 -c "import re;r='$RATE';m=re.match(r'([0-9.]+)([kmg]?)bit',r);v=float(m.group(1))*{'':1,'k':1e3,'m':1e6,'g':1e9}[m.group(2)];print(max(65536,int(v/8*0.002)))")
    ip netns exec "$ns" tc qdisc add dev "hp2p$i" root tbf rate "$RATE" burst "$bytes" latency 100ms
  done
  IN0=(ip netns exec "$NS0") IN1=(ip netns exec "$NS1") SRV=10.213.9.2
else
  IN0=() IN1=() SRV=127.0.0.1
fi

port=$((10000 + RANDOM % 20000))
hora_bw() {
  port=$((port + 1))
  "${IN1[@]}" "$HORA" bench p2p --role server --listen "$SRV:$port" >"$TMP/srv.log" 2>&1 &
  local spid=$!
  "${IN0[@]}" "$HORA" bench p2p --mode bandwidth --sizes 64M --reps 3 --role client --connect "$SRV:$port" --json "$TMP/bw.json" >/dev/null
  wait "$spid"
  python3 -c "import json;print(json.load(open('$TMP/bw.json'))[0]['gbps'])"
}
# $1 = "same" (both ends on CPU 0) or "split" (server CPU 1, client CPU 0): on a
# VM a cross-CPU wake-up costs an IPI (~10 us here), so both are reported.
cpus() { if [[ $1 == same ]]; then echo "0 0"; else echo "1 0"; fi; }
hora_lat() {
  port=$((port + 1))
  read -r cs cc < <(cpus "$1")
  "${IN1[@]}" taskset -c "$cs" "$HORA" bench p2p --role server --listen "$SRV:$port" >"$TMP/srv.log" 2>&1 &
  local spid=$!
  "${IN0[@]}" taskset -c "$cc" "$HORA" bench p2p --mode latency --sizes 8 --role client --connect "$SRV:$port" --json "$TMP/lat.json" >/dev/null
  wait "$spid"
  python3 -c "import json;print(json.load(open('$TMP/lat.json'))[0]['oneway_p50_us'])"
}
iperf() {
  port=$((port + 1))
  "${IN1[@]}" iperf3 -s -1 -B "$SRV" -p "$port" >/dev/null 2>&1 &
  local spid=$!
  sleep 0.3
  "${IN0[@]}" iperf3 -c "$SRV" -p "$port" -t 5 -J >"$TMP/iperf.json"
  wait "$spid" || true
  python3 -c "import json;d=json.load(open('$TMP/iperf.json'));print(d['end']['sum_received']['bits_per_second']/8e9)"
}
pingpong() {
  port=$((port + 1))
  read -r cs cc < <(cpus "$1")
  "${IN1[@]}" taskset -c "$cs" "$PP" server --bind "$SRV" --port "$port" >/dev/null 2>&1 &
  local spid=$!
  sleep 0.1
  "${IN0[@]}" taskset -c "$cc" "$PP" client --host "$SRV" --port "$port" --iters 20000 >"$TMP/pp.json"
  wait "$spid" || true
  python3 -c "import json;print(json.load(open('$TMP/pp.json'))['oneway_median_us'])"
}

echo "# p2p-compare: setup $SETUP$([[ $SETUP == netns ]] && echo " rate $RATE"), $REPS interleaved reps, $(nproc) cores, $(uname -r)"
printf "%4s %11s %11s %13s %13s %13s %13s\n" rep hora_gbps iperf3_gbps hora_us_same pp_us_same hora_us_split pp_us_split
for r in $(seq 1 "$REPS"); do
  hb=$(hora_bw); ib=$(iperf); hl=$(hora_lat same); pl=$(pingpong same); hs=$(hora_lat split); ps=$(pingpong split)
  printf "%4d %11.4f %11.4f %13.2f %13.2f %13.2f %13.2f\n" "$r" "$hb" "$ib" "$hl" "$pl" "$hs" "$ps" | tee -a "$TMP/rows"
done
python3 - "$TMP/rows" <<'PY'
import sys, statistics as st
rows=[list(map(float,l.split()[1:])) for l in open(sys.argv[1])]
m=[st.median(c) for c in zip(*rows)]
print(f"median: hora {m[0]:.4f} GB/s, iperf3 {m[1]:.4f} GB/s -> bandwidth ratio {m[0]/m[1]:.3f}")
print(f"median 8 B one-way, same CPU: hora {m[2]:.2f} us, ping-pong {m[3]:.2f} us -> ratio {m[2]/m[3]:.3f}")
print(f"median 8 B one-way, split CPUs: hora {m[4]:.2f} us, ping-pong {m[5]:.2f} us -> ratio {m[4]/m[5]:.3f}")
PY
