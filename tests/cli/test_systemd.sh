#!/usr/bin/env bash
# test_systemd.sh HORA_BIN - deploy/systemd's units (issue 18, point 3):
#   1. `systemd-analyze verify` passes on hora-seed.service and
#      hora-worker@.service (an instance of it too) with no message at all
#      (it exits 0 on unknown keys and bad values, only printing them), the
#      units as committed except /usr/bin/hora -> HORA_BIN, which verify
#      wants to exist;
#   2. a unit with a bad key or value is caught by the same check (so the
#      check can fail);
#   3. the units' ExecStart lines, taken from the files, run for real: the
#      seed's and two workers' (%i -> 0, 1; %d -> a credentials directory
#      holding the secret, as LoadCredential= makes; /etc/hora/cluster.yaml ->
#      a 2-worker file naming the seed; ${HORA_SEED_LISTEN} -> a free port),
#      with --until-full-view appended to the workers': both see the full
#      view of 2 and exit 0. Everything it started is stopped by PID.
set -uo pipefail
HORA="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
UNITS="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../deploy/systemd" && pwd)"
T="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; fi; }
command -v systemd-analyze >/dev/null ||
  { echo "FAIL systemd-analyze not found (Debian package systemd; deploy/install-deps.sh installs it)"; exit 1; }

verify() { # unit file: 0 when verify exits 0 and says nothing
  (cd "$(dirname "$1")" && systemd-analyze verify --man=no "./$(basename "$1")") >"$T/verify.out" 2>&1
  local rc=$?
  [[ $rc == 0 && ! -s $T/verify.out ]] && return 0
  echo "  systemd-analyze verify $(basename "$1"): rc=$rc"; sed 's/^/  | /' "$T/verify.out"
  return 1
}
mkdir -p "$T/u"
for u in hora-seed.service hora-worker@.service; do
  [[ -f $UNITS/$u ]] || { check "$u exists" 1; continue; }
  sed "s#/usr/bin/hora #$HORA #" "$UNITS/$u" >"$T/u/$u"
  verify "$T/u/$u"; check "systemd-analyze verify $u" $?
done
cp "$T/u/hora-worker@.service" "$T/u/hora-worker@3.service"
verify "$T/u/hora-worker@3.service"; check "systemd-analyze verify hora-worker@3.service (an instance)" $?
sed 's/^Restart=on-failure/Restart=sometimes/' "$T/u/hora-worker@.service" >"$T/u/bad@.service"
! verify "$T/u/bad@.service" >/dev/null; check "a bad value is caught (Restart=sometimes)" $?
sed 's/^NoNewPrivileges=yes/NoNewPrivilege=yes/' "$T/u/hora-seed.service" >"$T/u/bad2.service"
! verify "$T/u/bad2.service" >/dev/null; check "a misspelt key is caught (NoNewPrivilege)" $?

# 3. the ExecStart lines, for real
execstart() { sed -n 's/^ExecStart=//p' "$UNITS/$1"; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
SP=$(free_port) BASE=$((12000 + RANDOM % 15000)) # below the ephemeral range (32768-60999)
mkdir -m 0700 "$T/cred" && head -c 32 /dev/urandom | base64 >"$T/cred/secret" && chmod 0400 "$T/cred/secret"
cat >"$T/cluster.yaml" <<EOF
cluster:
  name: systemd-test
  port_base: $BASE
  seeds: ["127.0.0.1:$SP"]
  nodes:
    - {host: 127.0.0.1, workers: 2}
EOF
subst() { # line index
  local l="${1//\/usr\/bin\/hora/$HORA}"
  l="${l//%d/$T/cred}"; l="${l//%i/$2}"; l="${l//\/etc\/hora\/cluster.yaml/$T/cluster.yaml}"
  printf '%s' "${l//\$\{HORA_SEED_LISTEN\}/127.0.0.1:$SP}"
}
seed_cmd=$(subst "$(execstart hora-seed.service)" 0)
read -ra argv <<<"$seed_cmd"
"${argv[@]}" >"$T/seed.out" 2>&1 &
PIDS+=($!)
for i in 0 1; do
  read -ra argv <<<"$(subst "$(execstart hora-worker@.service)" "$i")"
  timeout 20 "${argv[@]}" --until-full-view >"$T/w$i.out" 2>&1 &
  PIDS+=($!)
  WP[$i]=$!
done
for i in 0 1; do
  wait "${WP[$i]}"; rc=$?
  [[ $rc == 0 ]] && grep -q "rank $i of 2 in view" "$T/w$i.out"
  check "worker $i from hora-worker@.service's ExecStart joins the seed's job (rank $i of 2)" $?
  [[ $rc == 0 ]] || { echo "  rc=$rc"; sed 's/^/  | /' "$T/w$i.out" | tail -5; }
done
grep -q "seed 127.0.0.1:$SP: up" "$T/seed.out"; check "the seed from hora-seed.service's ExecStart is up" $?
echo "$pass passed, $fail failed"
[[ $fail == 0 ]]
