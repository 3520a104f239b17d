#!/usr/bin/env bash
# debian-root.sh DEB [ROOT] - install hora's .deb in a bare Debian 12 root
# and run `hora --version` there (deploy/README.md "Installed library"; not
# part of CI: it needs root and Debian's apt mirror).
#
#   1. debootstrap --variant=minbase bookworm ROOT (default: a new temporary
#      directory, removed at the end; a ROOT given is kept, and reused when it
#      already holds a Debian root);
#   2. copy DEB into ROOT and `apt-get install -y ./hora_*.deb` in a chroot:
#      apt resolves the package's Depends from the mirror, nothing else is
#      installed beforehand;
#   3. `hora --version`, `ldconfig -p | grep libhora`, and a dynamic link
#      check of libhora.so.MAJOR (as ld.so.cache has it) in the chroot.
# Exits 0 when all three work. Env: HORA_DEBIAN_MIRROR (default
# http://deb.debian.org/debian). Installs debootstrap on the host if missing.
set -euo pipefail
DEB=$(realpath "${1:?usage: debian-root.sh DEB [ROOT]}")
MIRROR=${HORA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
[[ $(id -u) == 0 ]] || { echo "debian-root.sh: needs root (debootstrap, chroot)" >&2; exit 2; }
[[ -f $DEB ]] || { echo "debian-root.sh: $DEB: no such file" >&2; exit 2; }
if ! command -v debootstrap >/dev/null; then
	apt-get install -y debootstrap >/dev/null
fi
if [[ -n ${2:-} ]]; then
	ROOT=$(realpath -m "$2")
	KEEP=1
else
	ROOT=$(mktemp -d /tmp/hora-debian.XXXXXX)
	KEEP=0
fi
cleanup() {
	mountpoint -q "$ROOT/proc" && umount "$ROOT/proc"
	if [[ $KEEP == 0 ]]; then rm -rf --one-file-system "$ROOT"; fi
}
trap cleanup EXIT

step() { printf '\n=== %s\n' "$*"; }
if [[ ! -x $ROOT/usr/bin/apt-get ]]; then
	step "debootstrap --variant=minbase bookworm $ROOT $MIRROR"
	t0=$(date +%s)
	debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 ||
		{ tail -20 "$ROOT.debootstrap.log"; exit 1; }
	echo "done in $(($(date +%s) - t0)) s ($(du -sh --one-file-system "$ROOT" | cut -f1))"
	rm -f "$ROOT.debootstrap.log"
fi
mount -t proc proc "$ROOT/proc"
cp "$DEB" "$ROOT/tmp/"
name=$(basename "$DEB")

step "apt-get install ./$name (in the chroot)"
chroot "$ROOT" dpkg -l hora 2>/dev/null | grep -q '^ii' && chroot "$ROOT" apt-get remove -y hora >/dev/null
chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "/tmp/$name" |
	grep -E '^(The following NEW|  |Setting up|Unpacking)' || true
chroot "$ROOT" dpkg -s hora | grep -E '^(Status|Version|Depends):'

step "hora --version (in the chroot)"
chroot "$ROOT" hora --version
step "the library (in the chroot)"
chroot "$ROOT" ldconfig -p | grep libhora
lib=$(chroot "$ROOT" ldconfig -p | sed -n 's/^[[:space:]]*libhora\.so\.[0-9]* .*=> //p' | head -1)
[[ -n $lib ]] || { echo "debian-root.sh: no libhora.so.MAJOR in the chroot's ld.so cache" >&2; exit 1; }
chroot "$ROOT" sh -c "ldd $lib" | sed 's/^/  /'
if grep -q 'not found' <<<"$(chroot "$ROOT" sh -c "ldd $lib")"; then
	echo "debian-root.sh: $lib misses libraries in the chroot" >&2
	exit 1
fi
echo "debian-root.sh: $name installs in a bare Debian 12 root and hora --version runs"
