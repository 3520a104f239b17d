#!/usr/bin/env bash
# shm.sh N [REPS] - issue 15, points 2 and 5: hora's allreduce between N ranks
# of one host over shared memory (--shm auto) against the same over TCP
# loopback (--shm off) and the anchors (../shared/anchors/run.sh --setup lo):
# Open MPI over its shared-memory BTL (openmpi_sm, the figure to beat), Gloo
# and Open MPI over TCP. REPS (default 3) interleaved repetitions, the order
# reversed every other one (hora shm, hora tcp, anchors; then anchors, hora
# tcp, hora shm); medians per size.
#
# Prints per size the medians of busbw GB/s (time us), hora shm / openmpi_sm
# (busbw; time at 8 B, where lower is better), and busbw / memcpy: memcpy of
# the same bytes with all N ranks copying at once (`hora bench allreduce
# --with-memcpy`, measured in every shm run). Then the acceptance lines: 8 B
# time ratio (need <= 2, goal <= 1) and busbw ratios at 1, 4, 16, 64 MiB
# (need >= 1.0; goal 1.3 at 16 and 64 MiB with N = 2), and one core's
# memcpy and f32-sum reduce GB/s at the largest size (`hora bench reduce`).
# The path each size took (hora_comm_describe) comes from the JSON rows: a
# shm run whose path never says shared memory is flagged.
#
# Raw files in bench/results/allreduce-lo-n<N>-shm/ (hora-shm-R.json,
# hora-tcp-R.json, anchors-R.json, reduce.txt, the medians in
# *-median.json, summary.txt), the plot in bench/results/allreduce-lo-n<N>-shm.png
# (busbw vs size: hora shm, hora TCP, openmpi_sm, Gloo, Open MPI TCP and
# memcpy on the same axes, gnuplot).
#
# Environment: MAX=64M (largest size; e.g. MAX=64K for a smoke run),
# OUT=DIR (raw files; the plot is DIR.png), ANCHORS=DIR (run.sh's folder,
# default ../shared/anchors; ANCHORS=none skips them), ONLY=openmpi_sm,gloo,openmpi
# (run.sh --only), GLOO_ALGOS=allreduce (run.sh --gloo-algos), BIND=none
# (hora's --bind; run.sh runs mpirun --bind-to none), ITERS= (hora --iters),
# SUMMARY_ONLY=1 (re-read an earlier run's raw files, measure nothing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-2}" REPS="${2:-3}"
MAX="${MAX:-64M}" ANCH="${ANCHORS:-$ROOT/../shared/anchors}"
ONLY="${ONLY:-openmpi_sm,gloo,openmpi}" GLOO_ALGOS="${GLOO_ALGOS:-allreduce}"
OUT="${OUT:-$ROOT/bench/results/allreduce-lo-n$N-shm}"
HORA="$ROOT/build/hora"
[[ -x $HORA ]] || { echo "build hora first (cmake -B build && cmake --build build)" >&2; exit 1; }
if [[ $ANCH != none && ! -x $ANCH/build/mpi_bench ]]; then
  echo "build the anchors first ($ANCH/install.sh && $ANCH/build.sh), or ANCHORS=none" >&2; exit 1
fi
mkdir -p "$OUT"
HARGS=(--ranks "$N" --setup lo --bind "${BIND:-none}" --sizes "8:$MAX")
[[ -n ${ITERS:-} ]] && HARGS+=(--iters "$ITERS")

hora_run() { # shm|tcp rep
  local mode=$1 r=$2 extra=(--shm off)
  [[ $mode == shm ]] && extra=(--shm auto --with-memcpy)
  "$HORA" bench allreduce "${HARGS[@]}" "${extra[@]}" --json "$OUT/hora-$mode-$r.json" >"$OUT/hora-$mode-$r.txt"
}
anchors_run() { # rep
  local r=$1
  [[ $ANCH == none ]] && return 0
  rm -f "$OUT/anchors-$r.json"
  if ! bash "$ANCH/run.sh" --setup lo --ranks "$N" --only "$ONLY" --gloo-algos "$GLOO_ALGOS" \
       --max-size "$MAX" --out "$OUT/anchors-$r.json" >"$OUT/anchors-$r.log" 2>&1; then
    echo "anchors: $(grep -m1 'failed steps' "$OUT/anchors-$r.log" || echo 'run.sh failed') in repetition $r" \
         "(log: $OUT/anchors-$r.log)" >&2
    [[ -s $OUT/anchors-$r.json ]] || exit 1
  else
    rm -f "$OUT/anchors-$r.log"
  fi
}
if [[ -z ${SUMMARY_ONLY:-} ]]; then
  for r in $(seq 1 "$REPS"); do
    if (( r % 2 )); then hora_run shm "$r"; hora_run tcp "$r"; anchors_run "$r"
    else anchors_run "$r"; hora_run tcp "$r"; hora_run shm "$r"; fi
  done
  # one core's memcpy and reduce at the largest size (hora bench reduce wants >= 4 KiB)
  "$HORA" bench reduce --bytes "$MAX" --reps 5 >"$OUT/reduce.txt" 2>/dev/null || rm -f "$OUT/reduce.txt"
fi
python3 - "$OUT" "$REPS" "$N" "$ANCH" <<'PY' | tee "$OUT/summary.txt"
import json, os, re, sys, statistics as st
out, reps, n, anch_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
med = st.median
def load(p): return json.load(open(p))
hora = {"shm": {}, "tcp": {}}   # mode -> size -> [(busbw, time, memcpy)]
paths = {"shm": {}, "tcp": {}}  # mode -> size -> path of the first rep
anch = {}                        # variant -> size -> [(busbw, time)]
for r in range(1, reps + 1):
    for mode in hora:
        for row in load(f"{out}/hora-{mode}-{r}.json"):
            z = row["size_bytes"]
            hora[mode].setdefault(z, []).append((row["busbw_gbps"], row["time_us"], row.get("memcpy_gbps")))
            paths[mode].setdefault(z, row.get("path", "?"))
            if row["wrong"]:
                print(f"# WRONG: hora {mode} rep {r} size {z}: {row['wrong']:.0f} wrong elements")
    p = f"{out}/anchors-{r}.json"
    if anch_dir != "none" and os.path.exists(p):
        for k, rows in load(p)["results"].items():
            for row in rows:
                if not row.get("ok", True):
                    print(f"# WRONG: {k} rep {r} size {row['size_bytes']}")
                anch.setdefault(k, {}).setdefault(row["size_bytes"], []).append((row["busbw_gbps"], row["time_us"]))
def medrow(v, i): return med(x[i] for x in v)
for mode in hora:
    json.dump([{"size_bytes": z, "time_us": medrow(v, 1), "busbw_gbps": medrow(v, 0),
                **({"memcpy_gbps": med(x[2] for x in v)} if v[0][2] is not None else {}),
                "path": paths[mode][z]} for z, v in sorted(hora[mode].items())],
              open(f"{out}/hora-{mode}-median.json", "w"), indent=1)
json.dump({"results": {k: [{"size_bytes": z, "time_us": medrow(v, 1), "busbw_gbps": medrow(v, 0)}
                           for z, v in sorted(rows.items())] for k, rows in anch.items()}},
          open(f"{out}/anchors-median.json", "w"), indent=1)
red = open(f"{out}/reduce.txt").read() if os.path.exists(f"{out}/reduce.txt") else ""
mc1 = re.search(r"# memcpy ([0-9.]+) GB/s", red)
sum1 = re.search(r"^\s*f32\s+sum\s+([0-9.]+)", red, re.M)
sizes = sorted(hora["shm"])
print(f"# hora allreduce, {n} ranks on one host (lo), f32 sum, {reps} interleaved reps, medians: busbw GB/s (time us)")
for z in (sizes[0], sizes[-1]):
    print(f"# path, shm auto: {paths['shm'][z]}")
    print(f"# path, shm off:  {paths['tcp'][z]}")
if not any(re.search(r"shared.memory|shm", p, re.I) for p in paths["shm"].values()):
    print("# NOTE: no size of the --shm auto runs took a shared-memory path (hora_comm_describe): "
          "this build has no shared-memory link, or it did not apply")
if mc1:
    print(f"# one core (hora bench reduce, {sizes[-1]} bytes): memcpy {mc1.group(1)} GB/s"
          + (f", f32 sum reduce {sum1.group(1)} GB/s" if sum1 else ""))
names = [k for k in ("openmpi_sm", "gloo", "openmpi", "openmpi_ring", "gloo_ring_chunked", "gloo_halving_doubling")
         if k in anch]
def cell(v):
    return f"{medrow(v, 0):>9.4f} ({medrow(v, 1):>8.1f})" if v else f"{'-':>20}"
print(f"{'size':>10} {'hora shm':>20} {'hora tcp':>20} " + " ".join(f"{k:>20}" for k in names)
      + f" {'shm/openmpi_sm':>14} {'memcpy':>9} {'shm/memcpy':>10}")
for z in sizes:
    s = hora["shm"][z]
    sm = anch.get("openmpi_sm", {}).get(z)
    # at 8 B the time ratio (lower is better), above it busbw
    ratio = (medrow(s, 1) / medrow(sm, 1) if z == 8 else medrow(s, 0) / medrow(sm, 0)) if sm else float("nan")
    mc = [x[2] for x in s if x[2]]
    mcm = med(mc) if mc else float("nan")
    print(f"{z:>10} {cell(s)} {cell(hora['tcp'].get(z))} "
          + " ".join(cell(anch[k].get(z)) for k in names)
          + (f" {ratio:>13.2f}{'t' if z == 8 else ' '}" if sm else f" {'-':>14}")
          + f" {mcm:>9.3f} {medrow(s, 0) / mcm:>10.3f}")
print("# shm/openmpi_sm: busbw ratio (higher is better); 't' at 8 B: time ratio (lower is better)")
print("# acceptance (issue 15, point 2):")
sm = anch.get("openmpi_sm", {})
if 8 in hora["shm"]:
    t = medrow(hora["shm"][8], 1)
    if 8 in sm:
        print(f"  8 B: hora shm {t:.2f} us, openmpi_sm {medrow(sm[8], 1):.2f} us: {t / medrow(sm[8], 1):.2f} x "
              f"(need <= 2, goal <= 1)")
    else:
        print(f"  8 B: hora shm {t:.2f} us (no openmpi_sm figure)")
for mib in (1, 4, 16, 64):
    z = mib << 20
    if z not in hora["shm"]:
        continue
    b = medrow(hora["shm"][z], 0)
    mc = [x[2] for x in hora["shm"][z] if x[2]]
    frac = f", {b / med(mc):.2f} of memcpy ({med(mc):.2f} GB/s)" if mc else ""
    goal = " (need >= 1.0" + (", goal 1.3)" if mib >= 16 and n == "2" else ")")
    if z in sm:
        print(f"  {mib} MiB: hora shm {b:.3f} GB/s, openmpi_sm {medrow(sm[z], 0):.3f} GB/s: "
              f"{b / medrow(sm[z], 0):.2f} x{goal}{frac}")
    else:
        print(f"  {mib} MiB: hora shm {b:.3f} GB/s (no openmpi_sm figure){frac}")
# gnuplot data: one block per series
series = [("hora shm", {z: medrow(v, 0) for z, v in hora["shm"].items()}),
          ("hora TCP (--shm off)", {z: medrow(v, 0) for z, v in hora["tcp"].items()})]
series += [(k if k != "openmpi" else "openmpi (TCP)", {z: medrow(v, 0) for z, v in anch[k].items()})
           for k in ("openmpi_sm", "gloo", "openmpi") if k in anch]
series.append(("memcpy, all ranks at once", {z: med(x[2] for x in v) for z, v in hora["shm"].items() if v[0][2]}))
with open(f"{out}/plot.dat", "w") as f:
    for name, pts in series:
        f.write(f"# {name}\n" + "".join(f"{z} {b:.6f}\n" for z, b in sorted(pts.items())) + "\n\n")
with open(f"{out}/plot.titles", "w") as f:
    f.write("\n".join(name for name, _ in series) + "\n")
PY
# the plot: busbw vs size, every series on the same axes
if command -v gnuplot >/dev/null; then
  plots="" i=0
  while IFS= read -r title; do
    style="with linespoints lw 1"
    [[ $title == "hora shm" ]] && style="with linespoints lw 3"
    [[ $title == memcpy* ]] && style="with lines dt 2 lw 1"
    plots+="${plots:+, }'$OUT/plot.dat' index $i $style title '$title'"
    i=$((i + 1))
  done <"$OUT/plot.titles"
  gnuplot -e "set terminal pngcairo size 900,540 font ',10' noenhanced; set output '$OUT.png';
set logscale x 2; set logscale y 10; set format y '%g'; set xtics ('8B' 8, '256B' 256, '4KiB' 4096, '64KiB' 65536, '1MiB' 1048576,
'16MiB' 16777216, '64MiB' 67108864); set xlabel 'size'; set ylabel 'busbw (GB/s = 1e9 B/s)'; set key left top; set grid;
set title 'allreduce f32 sum, $N ranks on one host: hora shared memory vs Open MPI shared memory, Gloo and Open MPI TCP';
plot $plots" && echo "# plot: ${OUT#"$ROOT"/}.png"
else
  echo "# no gnuplot: no plot (deploy/install-deps.sh installs gnuplot-nox)" >&2
fi
