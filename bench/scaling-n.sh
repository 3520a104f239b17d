#!/usr/bin/env bash
# scaling-n.sh [ROUNDS] [-- BENCH ARGS...] - issue 5 point 5: allreduce busbw
# at 64 MiB on loopback for N = 2, 4, 8 ranks, interleaved (2, 4, 8, 2, 4,
# 8, ...), ROUNDS times (default 5), each run `hora bench allreduce --ranks N
# --sizes 64M --bind none --iters 20` plus BENCH ARGS. AB="--rcvlowat off"
# (any bench options) also runs every N with those options, right after the
# plain run, and reports both. Prints every run, the medians and each median
# against the CPU-share prediction: with all ranks on the same CPUs, each of
# N ranks gets ncpu/N of them, so busbw(N) = busbw(2) * 2/N if a copied or
# reduced byte costs the same at every N.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-5}"; shift || true
[[ ${1:-} == -- ]] && shift
EXTRA=("$@")
[[ -x $ROOT/build/hora ]] || { echo "build hora first (cmake -B build && cmake --build build)" >&2; exit 1; }
read -r -a AB <<<"${AB:-}"
VARIANTS=(plain)
[[ ${#AB[@]} -gt 0 ]] && VARIANTS+=(ab)
TMP="$(mktemp)"
trap 'rm -f "$TMP"' EXIT
echo "# hora bench allreduce --ranks N --sizes 64M --bind none --iters 20 ${EXTRA[*]}; ab: ${AB[*]:-none}; busbw GB/s"
for r in $(seq 1 "$ROUNDS"); do
  for n in 2 4 8; do
    for v in "${VARIANTS[@]}"; do
      args=("${EXTRA[@]}")
      [[ $v == ab ]] && args+=("${AB[@]}")
      bw=$("$ROOT/build/hora" bench allreduce --ranks "$n" --sizes 64M --bind none --iters 20 "${args[@]}" \
           | awk '$1 == 67108864 {print $7}')
      echo "round $r N=$n $v ${bw:-failed}" | tee -a "$TMP"
    done
  done
done
python3 - "$TMP" <<'PY'
import sys, statistics as st
runs = {}
for line in open(sys.argv[1]):
    _, _, n, v, bw = line.split()
    if bw != "failed":
        runs.setdefault(v, {}).setdefault(int(n[2:]), []).append(float(bw))
for v, by_n in runs.items():
    base = st.median(by_n[2])
    print(f"# {v}: median busbw (runs)  |  vs the CPU-share prediction busbw(2) * 2/N")
    for n in sorted(by_n):
        m = st.median(by_n[n])
        pred = base * 2 / n
        print(f"N={n}: {m:.3f} GB/s ({len(by_n[n])} runs, {min(by_n[n]):.2f}-{max(by_n[n]):.2f})"
              + ("" if n == 2 else f"  prediction {pred:.3f}  measured/prediction {m / pred * 100:.0f} %"))
PY
