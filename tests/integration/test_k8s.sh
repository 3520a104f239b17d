#!/usr/bin/env bash
# test_k8s.sh HORA DATA_DIR - deploy/k8s/hora.yaml without a cluster (issue
# 18, point 2): k8s_check.py checks the manifests (Service, ConfigMap,
# Indexed Job, the GPU patch) and writes each pod as Kubernetes would start
# it; then every pod runs in a network namespace of its own (its address
# 10.213.8.<i+1>), with the manifest's command (hora -> HORA) and
# environment plus what Kubernetes adds (JOB_COMPLETION_INDEX, HOSTNAME), and
# the names of the headless Service in an /etc/hosts per namespace
# (/etc/netns/<ns>/hosts, which `ip netns exec` mounts over /etc/hosts):
# the workers find each other as hora-<i>.hora, form the job and train it,
# running as the manifest's user and group (setpriv), reading the secret
# through fsGroup as the kubelet would mount it (root:fsGroup, 0440).
# The only changes: paths the pod sees live under a temp dir in /tmp (the
# pod's root: HORA copied to its usr/bin/hora, where the image's .deb puts
# it, as HORA's build may be where that user cannot go, e.g. a clone under
# /root, mode 0700; the pod's working directory; the mounts), and the data
# is a 2000/500 subset of DATA_DIR. Checks: every worker exits 0, rank 0
# prints 20 epoch lines and val_acc >= 0.85; the file names the hosts by
# the Service's names only (no address). Needs root (exit 77 otherwise:
# skipped).
set -uo pipefail
HORA="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
DATA="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOTDIR="$(cd "$HERE/../.." && pwd)"
PY=/usr/bin/python3
[[ $(id -u) == 0 ]] || { echo "SKIP test_k8s: needs root (network namespaces)"; exit 77; }
"$PY" -c "import yaml" 2>/dev/null || { echo "FAIL test_k8s: $PY has no PyYAML (python3-yaml)"; exit 1; }
T="$(mktemp -d /tmp/hora-k8s.XXXXXX)" TAG="hk$$"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  for i in $(seq 0 7); do rm -rf "/etc/netns/$TAG-$i"; done
  bash "$ROOTDIR/deploy/netns-cluster.sh" down --tag "$TAG" >/dev/null 2>&1
  rm -rf "$T"
}
trap cleanup EXIT
fail=0
check() { if [[ $2 == 0 ]]; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

mkdir -p "$T/plan" "$T/root"
N=$("$PY" "$HERE/k8s_check.py" "$ROOTDIR/deploy/k8s" "$T/root" "$T/plan")
check "the manifests: headless Service, Indexed Job, ConfigMap, Secret as a file, GPU patch (k8s_check.py)" $?
[[ $N =~ ^[0-9]+$ ]] || exit 1
"$PY" "$HERE/idx_subset.py" "$DATA" "$T/root/data/mnist" 2000 500 || exit 1
! grep -Eq '[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+' "$T/root/etc/hora/cluster.yaml"
check "the pods' cluster file names hosts by the Service's names only (no address)" $?
# the image's hora (k8s/Dockerfile: the .deb's /usr/bin/hora)
install -D -m 0755 "$HORA" "$T/root/usr/bin/hora" || exit 1
# as the kubelet writes it (root:fsGroup 0440); the pods run as the manifest's
# user (setpriv), which must read it through fsGroup, and everything else
read -r PUID PGID FSG <"$T/plan/user"
head -c 32 /dev/urandom | base64 >"$T/root/etc/hora/secret/secret"
chown "0:$FSG" "$T/root/etc/hora/secret/secret" && chmod 0440 "$T/root/etc/hora/secret/secret"
chmod 0755 "$T" && chmod -R a+rX "$T/root" && chmod 0750 "$T/root/etc/hora/secret" &&
  chgrp "$FSG" "$T/root/etc/hora/secret"
command -v setpriv >/dev/null || { echo "FAIL test_k8s: no setpriv (util-linux)"; exit 1; }
AS=(setpriv --reuid="$PUID" --regid="$PGID" --groups="$FSG")
# what a pod needs, as its user: a directory above $T it cannot search
# would fail every pod with "Permission denied" and no more
"${AS[@]}" test -x "$T/root/usr/bin/hora" -a -r "$T/root/etc/hora/cluster.yaml" \
  -a -r "$T/root/etc/hora/secret/secret" -a -r "$T/root/data/mnist/train-images-idx3-ubyte"
rc=$?
check "the pods' user ($PUID:$PGID, group $FSG) runs $T/root/usr/bin/hora and reads its mounts" $rc
[[ $rc == 0 ]] || { namei -m "$T/root/usr/bin/hora" 2>&1 | sed 's/^/  | /'; exit 1; }

bash "$ROOTDIR/deploy/netns-cluster.sh" up "$N" --tag "$TAG" >/dev/null || { echo "FAIL netns up"; exit 1; }
for i in $(seq 0 $((N - 1))); do # host i+1 of netns-cluster.sh is pod i
  mkdir -p "/etc/netns/$TAG-$((i + 1))"
  { echo "127.0.0.1 localhost"
    k=1; while read -r names; do echo "10.213.8.$k $names"; k=$((k + 1)); done <"$T/plan/hosts"
  } >"/etc/netns/$TAG-$((i + 1))/hosts"
done
for i in $(seq 0 $((N - 1))); do
  mapfile -t cmd <"$T/plan/pod-$i.cmd"
  [[ ${cmd[0]} == hora ]] && cmd[0]="$T/root/usr/bin/hora"
  mapfile -t envs <"$T/plan/pod-$i.env"
  # the image's PATH and working directory (debian:12-slim: /, here $T/root)
  (cd "$T/root" && exec ip netns exec "$TAG-$((i + 1))" "${AS[@]}" \
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${envs[@]}" \
    timeout 120 "${cmd[@]}") >"$T/out$i" 2>&1 &
  PIDS+=($!)
done
for i in $(seq 0 $((N - 1))); do
  wait "${PIDS[$i]}"; rc=$?
  check "pod $i (hora-$i.hora) exits 0" $rc
  [[ $rc == 0 ]] || tail -5 "$T/out$i" | sed 's/^/  | /'
done
grep -c "^epoch [0-9]*/20 " "$T/out0" | grep -qx 20; check "rank 0 prints 20 epoch lines" $?
acc=$(sed -n 's/^epoch 20\/20 .* val_acc \([0-9.]*\) .*/\1/p' "$T/out0")
"$PY" -c "import sys; sys.exit(0 if float('${acc:-0}') >= 0.85 else 1)"
check "val_acc after 20 epochs >= 0.85 (got ${acc:-none})" $?
exit $fail
