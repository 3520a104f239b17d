#!/usr/bin/env bash
# hier.sh [REPS] - issue 15, point 3: the hierarchical allreduce against the
# flat ring across namespace hosts with several ranks each, links shaped by
# tbf (deploy/netns-cluster.sh, via `hora bench allreduce --setup netns
# --hosts L`). Per layout L (default "2": 2 hosts x 2 ranks; e.g. LAYOUTS="2 3,1"),
# REPS (default 3) interleaved repetitions of --hier on and --hier off (the
# order reversed every other one), medians of algbw at each size (default
# 16 and 64 MiB), the ratio on/off (need >= 1.4) and the fraction of what
# the link allows (need >= 0.95).
#
# The link bound. S = the allreduce's bytes, N ranks on H hosts, each host's
# ranks adjacent (contiguous), rate_B = the host link's rate in bytes/s per
# direction (tbf shapes each host's egress). A ring allreduce sends 2(K-1)/K
# x its bytes over each of its K links.
#   hierarchical: the inter-host stage is an allreduce of each host's S/L
#     shards among H ranks (one per host), all L shards in parallel over the
#     same host link: 2(H-1)/H x S per host link and direction
#       t >= 2(H-1)/H * S / rate_B;  H = 2: t >= S / rate_B,  algbw <= rate_B
#     (for two hosts S each way is the minimum of any allreduce: each host
#     must learn the other's S bytes of partial sums).
#   flat ring: one ring edge leaves each host, carrying 2(N-1)/N x S:
#       t >= 2(N-1)/N * S / rate_B;  N = 4: 1.5 S / rate_B, algbw <= rate_B / 1.5
#   so hierarchical / flat <= 1.5 at N = 4, H = 2.
# fraction of the link = algbw(hierarchical) / (rate_B * H / (2(H-1))), with
# rate_B both the tbf rate (RATE/8) and the practical rate: one iperf3 TCP
# stream between two hosts of the same recipe, measured here (IPERF_TIME s).
#
# Environment: RATE=1gbit, LAYOUTS="2", RANKS=4 (for a host-count layout),
# SIZES=16M:64M (hora --sizes), SHM=auto (--shm of both runs), ITERS=
# (hora --iters), BIND=none (hora --bind: none, as the anchors, or core),
# IPERF_TIME=5 (0: skip iperf3), SETTLE=5 (seconds between
# runs, the kernel frees the namespaces of the last one), OUT=DIR (default
# bench/results/allreduce-netns-hier), SUMMARY_ONLY=1. Needs root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS="${1:-3}"
[[ ${BIND:-none} == none || ${BIND:-none} == core ]] || { echo "hier.sh: BIND is none or core (got '$BIND')" >&2; exit 2; }
RATE="${RATE:-1gbit}" LAYOUTS="${LAYOUTS:-2}" RANKS="${RANKS:-4}" SIZES="${SIZES:-16M:64M}"
OUT="${OUT:-$ROOT/bench/results/allreduce-netns-hier}" IPERF_TIME="${IPERF_TIME:-5}"
HORA="$ROOT/build/hora"
[[ -x $HORA ]] || { echo "build hora first (cmake -B build && cmake --build build)" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "hier.sh needs root (network namespaces)" >&2; exit 1; }
mkdir -p "$OUT"
TAG="hier$$"
cleanup() { bash "$ROOT/deploy/netns-cluster.sh" down --tag "$TAG" >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM
settle() { sleep "${SETTLE:-5}"; }
lname() { echo "${1//,/+}"; } # "3,1" -> "3+1" in file names

iperf() { # the practical rate of one host link: iperf3 between two hosts of the same recipe
  bash "$ROOT/deploy/netns-cluster.sh" up 2 --rate "$RATE" --tag "$TAG" >/dev/null
  local port=$((20000 + $$ % 20000))
  ip netns exec "$TAG-2" timeout $((IPERF_TIME + 60)) iperf3 -s -1 -B 10.213.8.2 -p "$port" >/dev/null 2>&1 &
  local sp=$! ok=0
  for _ in $(seq 1 30); do
    sleep 0.2
    if ip netns exec "$TAG-1" timeout $((IPERF_TIME + 30)) iperf3 -c 10.213.8.2 -p "$port" -t "$IPERF_TIME" -J \
         >"$OUT/iperf3.json" 2>/dev/null; then ok=1; break; fi
    kill -0 "$sp" 2>/dev/null || break
  done
  wait "$sp" 2>/dev/null || true
  cleanup
  [[ $ok == 1 ]] || { echo "iperf3 failed: the tbf rate alone is the bound" >&2; rm -f "$OUT/iperf3.json"; }
}

hora_run() { # layout on|off rep
  local l=$1 h=$2 r=$3 args=(--setup netns --rate "$RATE" --hosts "$1" --sizes "$SIZES" --hier "$2"
                             --shm "${SHM:-auto}" --bind "${BIND:-none}")
  [[ $l == *,* ]] || args+=(--ranks "$RANKS")
  [[ -n ${ITERS:-} ]] && args+=(--iters "$ITERS")
  settle
  "$HORA" bench allreduce "${args[@]}" --json "$OUT/$(lname "$l")-$h-$r.json" >"$OUT/$(lname "$l")-$h-$r.txt"
}

if [[ -z ${SUMMARY_ONLY:-} ]]; then
  command -v iperf3 >/dev/null && [[ $IPERF_TIME != 0 ]] && iperf
  for r in $(seq 1 "$REPS"); do
    for l in $LAYOUTS; do
      if (( r % 2 )); then hora_run "$l" on "$r"; hora_run "$l" off "$r"
      else hora_run "$l" off "$r"; hora_run "$l" on "$r"; fi
    done
  done
fi
python3 - "$OUT" "$REPS" "$RATE" "$RANKS" "${BIND:-none}" $LAYOUTS <<'PY' | tee "$OUT/summary.txt"
import json, os, re, sys, statistics as st
out, reps, rate, ranks, bind, layouts = (sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
                                         sys.argv[5], sys.argv[6:])
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
rate_b = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8 if m else None
ip = None
if os.path.exists(f"{out}/iperf3.json"):
    ip = json.load(open(f"{out}/iperf3.json"))["end"]["sum_received"]["bits_per_second"] / 8
print(f"# hierarchical vs flat ring allreduce, f32 sum, netns hosts, tbf {rate} per host egress, "
      f"{reps} interleaved reps, medians of algbw GB/s, ranks bound: {bind}")
print(f"# link: tbf {rate_b / 1e9 if rate_b else float('nan'):.4f} GB/s"
      + (f", iperf3 (one TCP stream) {ip / 1e9:.4f} GB/s" if ip else ", no iperf3 figure"))
print("# bound, H hosts, N ranks, hosts' ranks adjacent, rate_B per direction:"
      " hierarchical t >= 2(H-1)/H*S/rate_B, flat ring t >= 2(N-1)/N*S/rate_B")
for lay in layouts:
    if "," in lay:
        per = [int(x) for x in lay.split(",")]
    else:  # H hosts: the ranks split contiguously, the first hosts one more (hora bench --hosts H)
        per = [ranks // int(lay) + (i < ranks % int(lay)) for i in range(int(lay))]
    h, n = len(per), sum(per)
    name = lay.replace(",", "+")
    rows = {"on": {}, "off": {}}
    paths = {"on": {}, "off": {}}
    for r in range(1, reps + 1):
        for mode in rows:
            for row in json.load(open(f"{out}/{name}-{mode}-{r}.json")):
                z = row["size_bytes"]
                rows[mode].setdefault(z, []).append(row["algbw_gbps"])
                paths[mode].setdefault(z, row.get("path", "?"))
                if row["wrong"]:
                    print(f"# WRONG: {name} hier {mode} rep {r} size {z}: {row['wrong']:.0f} wrong elements")
    hier_factor = 2 * (h - 1) / h   # bytes over each host link per byte of S
    flat_factor = 2 * (n - 1) / n
    label = "+".join(map(str, per))
    print(f"\n## {label}: {n} ranks on {h} hosts; per byte of S each host link carries "
          f"{hier_factor:.2f} (hierarchical), {flat_factor:.2f} (flat ring)")
    for z in sorted(rows["on"]):
        print(f"# path at {z} bytes, --hier on:  {paths['on'][z]}")
        print(f"# path at {z} bytes, --hier off: {paths['off'][z]}")
        if not re.search(r"allreduce of \d+ bytes: .*hierarch", paths["on"][z], re.I):
            print(f"# NOTE: --hier on did not take the hierarchical path at {z} bytes (a fallback, or a build"
                  " without it): hier/flat compares two flat runs there")
    hdr = f"{'size':>10} {'hier algbw':>11} {'flat algbw':>11} {'hier/flat':>9} {'bound hier':>10} {'bound flat':>10}"
    hdr += f" {'hier/tbf':>9}" + (f" {'hier/iperf3':>11} {'flat/iperf3':>11}" if ip else "")
    print(hdr)
    for z in sorted(rows["on"]):
        a_on, a_off = st.median(rows["on"][z]), st.median(rows["off"].get(z, [float("nan")]))
        bh = rate_b / hier_factor / 1e9 if rate_b else float("nan")
        bf = rate_b / flat_factor / 1e9 if rate_b else float("nan")
        line = f"{z:>10} {a_on:>11.4f} {a_off:>11.4f} {a_on / a_off:>9.3f} {bh:>10.4f} {bf:>10.4f} {a_on / bh:>9.3f}"
        if ip:
            line += f" {a_on / (ip / hier_factor / 1e9):>11.3f} {a_off / (ip / flat_factor / 1e9):>11.3f}"
        print(line)
    print("# acceptance (issue 15, point 3): hier/flat >= 1.4 at 16 and 64 MiB, and hier within 5 % of the link"
          " bound (hier/iperf3 >= 0.95; hier/tbf the same against the shaped rate)")
PY
