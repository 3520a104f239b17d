#!/usr/bin/env bash
# allreduce-compare.sh N [REPS] [lo|netns] [RATE] - hora's allreduce vs the
# anchors (../shared/anchors/run.sh) on the same setup, interleaved (hora,
# anchors, hora, anchors, ...), REPS times (default 3).
#   lo:    every rank on 127.0.0.1 (CPU-bound on this machine)
#   netns: one network namespace per rank, egress shaped with tbf at RATE
#          (default 1gbit); both hora (deploy/netns-cluster.sh) and run.sh
#          build the same recipe: bridge, veth, tbf rate/burst/latency.
# Prints medians of busbw (GB/s) and time (us) per size for hora and for each
# anchor variant, hora / best anchor, and on netns hora / iperf3. Raw JSON in
# bench/results/allreduce-<setup>-n<N>/, with the medians in hora-median.json
# and anchors-median.json, plotted to bench/results/allreduce-<setup>-n<N>.png.
# SUMMARY_ONLY=1 re-reads an earlier run's raw files without measuring. Needs root for netns. hora runs
# unbound like the anchors (run.sh: mpirun --bind-to none); BIND=core binds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-2}" REPS="${2:-3}" SETUP="${3:-lo}" RATE="${4:-1gbit}"
ANCH="${ANCHORS:-$ROOT/../shared/anchors}"
[[ -x $ROOT/build/hora ]] || { echo "build hora first (cmake -B build && cmake --build build)" >&2; exit 1; }
[[ -x $ANCH/build/gloo_bench ]] || { echo "build the anchors first ($ANCH/install.sh && $ANCH/build.sh)" >&2; exit 1; }
OUT="$ROOT/bench/results/allreduce-$SETUP-n$N"
mkdir -p "$OUT"
NET=(--setup "$SETUP")
HNET=(--bind "${BIND:-none}")
[[ $SETUP == netns ]] && NET+=(--rate "$RATE")
# The kernel frees the namespaces of the run before in a worker thread, which
# for a second or so takes CPU from the next run (an 8-byte median of 27 us
# instead of 9 in two of three repetitions once): let it finish first.
settle() { [[ $SETUP == netns ]] && sleep "${SETTLE:-5}"; return 0; }
for r in $(seq 1 "$REPS"); do
  [[ -n ${SUMMARY_ONLY:-} ]] && break # re-read the raw files of an earlier run
  settle
  "$ROOT/build/hora" bench allreduce --ranks "$N" "${NET[@]}" "${HNET[@]}" --json "$OUT/hora-$r.json" >/dev/null
  settle
  only=gloo,openmpi,openmpi_ring
  [[ $SETUP == netns ]] && only+=,iperf3
  rm -f "$OUT/anchors-$r.json"
  if ! bash "$ANCH/run.sh" "${NET[@]}" --ranks "$N" --only "$only" --out "$OUT/anchors-$r.json" >"$OUT/anchors-$r.log" 2>&1; then
    # run.sh still writes the variants that ran; one failing (Open MPI's
    # launcher now and then in namespaces) is reported, not fatal
    echo "anchors: $(grep -m1 'failed steps' "$OUT/anchors-$r.log" || echo 'run.sh failed') in repetition $r" \
         "(log: $OUT/anchors-$r.log)" >&2
    [[ -s $OUT/anchors-$r.json ]] || exit 1
  else
    rm -f "$OUT/anchors-$r.log"
  fi
done
python3 - "$OUT" "$REPS" "$N" "$SETUP" <<'PY'
import json, sys, statistics as st
out, reps, n, setup = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(p): return json.load(open(p))
hora, anch, iperf = {}, {}, []
for r in range(1, reps + 1):
    for row in load(f"{out}/hora-{r}.json"):
        hora.setdefault(row["size_bytes"], []).append((row["busbw_gbps"], row["time_us"]))
    a = load(f"{out}/anchors-{r}.json")
    if a.get("iperf3_gbps"): iperf.append(a["iperf3_gbps"])
    for k, rows in a["results"].items():
        for row in rows:
            anch.setdefault(k, {}).setdefault(row["size_bytes"], []).append((row["busbw_gbps"], row["time_us"]))
ip = st.median(iperf) if iperf else None
# medians as JSON: ours in hora's row format, the anchors' in run.sh's, for --plot
json.dump([{"size_bytes": z, "time_us": st.median(x[1] for x in hora[z]),
            "busbw_gbps": st.median(x[0] for x in hora[z])} for z in sorted(hora)],
          open(f"{out}/hora-median.json", "w"), indent=1)
json.dump({"results": {k: [{"size_bytes": z, "time_us": st.median(x[1] for x in v[z]),
                            "busbw_gbps": st.median(x[0] for x in v[z])} for z in sorted(v)]
                       for k, v in anch.items()}, "iperf3_gbps": ip},
          open(f"{out}/anchors-median.json", "w"), indent=1)
print(f"# N={n}, {setup}, {reps} interleaved reps, medians; busbw GB/s (time us)"
      + (f"; iperf3 {ip:.4f} GB/s" if ip else ""))
print(f"{'size':>10} {'hora':>18} " + " ".join(f"{k:>22}" for k in anch) + f" {'hora/best':>10} {'best time':>10}"
      + (f" {'hora/iperf3':>11}" if ip else ""))
for size in sorted(hora):
    hb = st.median(x[0] for x in hora[size]); ht = st.median(x[1] for x in hora[size])
    cols, best_bw, best_t = [], 0, 1e18
    for k in anch:
        v = anch[k].get(size)
        if not v: cols.append(f"{'-':>22}"); continue
        b = st.median(x[0] for x in v); t = st.median(x[1] for x in v)
        best_bw = max(best_bw, b); best_t = min(best_t, t)
        cols.append(f"{b:>10.4f} ({t:>9.1f})")
    ratio = hb / best_bw if best_bw else float('nan')
    print(f"{size:>10} {hb:>8.4f} ({ht:>7.1f}) " + " ".join(cols) + f" {ratio:>10.2f} {best_t:>10.1f}"
          + (f" {hb / ip:>11.3f}" if ip else ""))
PY
"$ROOT/build/hora" bench allreduce --ranks "$N" "${NET[@]}" --plot "$OUT.png" \
  --from "$OUT/hora-median.json" --anchors "$OUT/anchors-median.json" >/dev/null
