#!/usr/bin/env bash
# test_bench_coll.sh HORA_BIN - the flags of `hora bench allreduce` that issue
# 15's benches use, at tiny sizes (no timing is checked): --shm/--hier reach
# the header, the path (hora_comm_describe) is named in the header and in
# every JSON row, --with-memcpy adds its columns and JSON keys, bad values
# exit 2 naming the flag; as root, --setup netns --hosts 2 (2+2) and
# --hosts 3,1 place the ranks of one namespace host on its address (a rank
# in the wrong namespace cannot bind it, so the run fails) and remove the
# namespaces they made.
set -uo pipefail
HORA="$1"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; sed 's/^/  | /' "$T/out" | tail -15; fi; }

timeout 60 "$HORA" bench allreduce --ranks 3 --sizes 8:1K --iters 5 --shm off --hier off --with-memcpy \
  --json "$T/rows.json" >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -q '^# hora bench allreduce: 3 ranks (lo), .*, shm off, hierarchical off$' "$T/out" \
  && [[ $(grep -c '^# path: 3 ranks' "$T/out") == 2 ]] && grep -q 'allreduce of 8 bytes' "$T/out" \
  && grep -q 'allreduce of 1024 bytes' "$T/out" && grep -qE '^ +size .* wrong +memcpy_GBps +bus/memcpy$' "$T/out" \
  && python3 - "$T/rows.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["size_bytes"] for r in rows] == [8, 16, 64, 256, 1024], rows
for r in rows:
    assert r["wrong"] == 0 and r["memcpy_gbps"] > 0 and r["busbw_per_memcpy"] > 0, r
    assert r["path"].startswith("3 ranks") and f"allreduce of {r['size_bytes']} bytes" in r["path"], r
PY
check "--shm off --hier off --with-memcpy: header, 2 path lines, memcpy columns, path and memcpy in every JSON row (rc=$rc)" $?

timeout 60 "$HORA" bench allreduce --ranks 2 --sizes 8:64 --iters 5 >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -q ', shm auto, hierarchical auto$' "$T/out" && ! grep -q memcpy "$T/out"
check "defaults: shm auto, hierarchical auto, no memcpy columns (rc=$rc)" $?

timeout 60 "$HORA" bench allreduce --ranks 2 --sizes 4K:64K --iters 5 --in-place --mem shared --dirty \
  --op avg >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -q '^# --dirty: each rank rewrites its buffer' "$T/out" \
  && [[ $(grep -cE '^ +[0-9]+ +[0-9]+ +f32 +avg .* 0$' "$T/out") == 3 ]]
check "--in-place --mem shared --dirty: the header says so, 3 sizes, none wrong (rc=$rc)" $?

refuse() { # name, expected text, args...
  local name="$1" want="$2"; shift 2
  "$HORA" bench allreduce "$@" >"$T/out" 2>&1; local rc=$?
  [[ $rc == 2 ]] && grep -qF -- "$want" "$T/out"
  check "$name (rc=$rc)" $?
}
refuse "--shm on refused" "--shm is auto or off" --shm on
refuse "--dirty without --in-place refused" "--dirty is for --in-place allreduce" --dirty
refuse "--hier yes refused" "--hier auto, on or off" --hier yes
refuse "--bind sometimes refused" "--bind is core or none" --bind sometimes
refuse "--hosts without netns refused" "--hosts needs --setup netns" --hosts 2
refuse "--hosts 3,1 with --ranks 3 refused" "--hosts 3,1 is 4 ranks, --ranks says 3" --setup netns --hosts 3,1 --ranks 3
refuse "--hosts 5 with 4 ranks refused" "--hosts 5: more hosts than the 4 ranks" --setup netns --hosts 5 --ranks 4
refuse "--hosts 2,x refused" "--hosts wants H or ranks per host" --setup netns --hosts 2,x

# --plot --from --anchors with an anchors file holding only some variants
# (here openmpi_sm alone, as run.sh --only openmpi_sm writes it): each
# series is its own block of the data file (before: an index per variant,
# missing ones included, which gnuplot does not count, so it plotted nothing)
if command -v gnuplot >/dev/null; then
  cat >"$T/rows.json" <<'JSON'
[
 {"size_bytes":8,"time_us":9.0,"algbw_gbps":0.001,"busbw_gbps":0.001,"wrong":0,"path":"a [bracketed] path"},
 {"size_bytes":1024,"time_us":10.0,"algbw_gbps":0.1,"busbw_gbps":0.1,"wrong":0,"path":"x"}
]
JSON
  cat >"$T/anchors.json" <<'JSON'
{"setup": "lo", "results": {"openmpi_sm": [{"size_bytes": 8, "time_us": 0.2, "busbw_gbps": 0.04},
 {"size_bytes": 1024, "time_us": 1.0, "busbw_gbps": 1.0}]}}
JSON
  "$HORA" bench allreduce --plot "$T/p.png" --from "$T/rows.json" --anchors "$T/anchors.json" >"$T/out" 2>&1; rc=$?
  [[ $rc == 0 && -s $T/p.png ]] && ! grep -qi 'no valid points\|warning' "$T/out"
  check "--plot --anchors with openmpi_sm alone: both series plotted, no gnuplot warning (rc=$rc)" $?
else
  echo "skip --plot (no gnuplot)"
fi

# hora bench xcpu (scaling.sh's header): a round trip in ns between the two
# CPUs it names; a CPU it cannot run on is named, not waited for
if [[ $(nproc) -ge 2 ]]; then
  timeout 60 "$HORA" bench xcpu --rounds 2000 >"$T/out" 2>&1; rc=$?
  [[ $rc == 0 ]] && grep -Eq '^CPU [0-9]+ <-> CPU [0-9]+: one cache line.s round trip [0-9]+ ns' "$T/out"
  check "bench xcpu: a round trip between two CPUs (rc=$rc)" $?
fi
first=$(python3 -c "import os; print(min(os.sched_getaffinity(0)))")
timeout 10 "$HORA" bench xcpu --cpus "$first,1023" --rounds 2000 >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q 'cannot run on CPU 1023' "$T/out"
check "bench xcpu --cpus $first,1023: the CPU named, exit 2, no hang (rc=$rc)" $?
"$HORA" bench xcpu --cpus 0,1x >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q 'two different CPUs' "$T/out"
check "bench xcpu --cpus 0,1x: refused (rc=$rc)" $?
"$HORA" bench xcpu --cpus 3,3 >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q 'two different CPUs' "$T/out"
check "bench xcpu --cpus 3,3: refused (rc=$rc)" $?

if [[ $(id -u) == 0 ]] && command -v ip >/dev/null && command -v tc >/dev/null; then
  for spec in "--ranks 4 --hosts 2:2,2" "--hosts 3,1:3,1"; do
    args=${spec%%:*} per=${spec##*:}
    # shellcheck disable=SC2086
    (exec "$HORA" bench allreduce --setup netns $args --sizes 8:256 --iters 5 --json "$T/ns.json" \
      >"$T/out" 2>&1) &
    pid=$!
    wait "$pid"; rc=$?
    tag="hb$((pid % 100000))" # the bench's namespaces: <tag>-hub, <tag>-1, ...
    [[ $rc == 0 ]] && grep -q "^# netns: 2 hosts 10.213.8.1..2, egress tbf 1gbit, ranks per host $per (contiguous)$" "$T/out" \
      && grep -q '^# hora bench allreduce: 4 ranks (netns)' "$T/out" \
      && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r and all(x['wrong']==0 for x in r)" "$T/ns.json" \
      && [[ -z $(ip netns list | grep "^$tag-") ]]
    check "--setup netns $args: ranks per host $per, each host's ranks on its address, namespaces removed (rc=$rc)" $?
  done
else
  echo "skip --setup netns --hosts (needs root, ip and tc)"
fi
echo "$pass passed, $fail failed"
[[ $fail == 0 ]]
