#!/usr/bin/env bash
# allreduce-compare.sh N [REPS] - hora's allreduce vs the anchors on loopback,
# interleaved (hora, anchors, hora, anchors, ...), REPS times (default 3).
# Prints medians of busbw (GB/s) and time (us) per size for hora and for each
# anchor variant, and hora / best anchor. Raw JSON under bench/results/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-2}" REPS="${2:-3}"
ANCH="${ANCHORS:-$ROOT/../shared/anchors}"
OUT="$ROOT/bench/results/allreduce-lo-n$N"
mkdir -p "$OUT"
for r in $(seq 1 "$REPS"); do
  "$ROOT/build/hora" bench allreduce --ranks "$N" --json "$OUT/hora-$r.json" >/dev/null
  bash "$ANCH/run.sh" --setup lo --ranks "$N" --only gloo,openmpi,openmpi_ring --out "$OUT/anchors-$r.json" >/dev/null 2>&1
done
python3 - "$OUT" "$REPS" "$N" <<'PY'
import json, sys, statistics as st
out, reps, n = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(p): return json.load(open(p))
hora = {}
anch = {}
for r in range(1, reps + 1):
    for row in load(f"{out}/hora-{r}.json"):
        hora.setdefault(row["size_bytes"], []).append((row["busbw_gbps"], row["time_us"]))
    for k, rows in load(f"{out}/anchors-{r}.json")["results"].items():
        for row in rows:
            anch.setdefault(k, {}).setdefault(row["size_bytes"], []).append((row["busbw_gbps"], row["time_us"]))
print(f"# N={n}, loopback, {reps} interleaved reps, medians; busbw GB/s (time us)")
print(f"{'size':>10} {'hora':>18} " + " ".join(f"{k:>22}" for k in anch) + f" {'hora/best':>10} {'best time':>10}")
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
    print(f"{size:>10} {hb:>8.4f} ({ht:>7.1f}) " + " ".join(cols) + f" {ratio:>10.2f} {best_t:>10.1f}")
PY
