#!/usr/bin/env bash
# gpu/devdeps.sh - bring hora's C dependencies to a machine without a package
# registry (the GPU machine, ../shared/DEVICE.md), as .deb files.
#
#   gpu/devdeps.sh [DIR]        (DIR defaults to .devdeps, git-ignored)
#
# Run here, where apt works: `apt-get download`s every package of PKGS into
# DIR (runtime libraries, their -dev packages, pkgconf), and copies the data
# sets (data/mnist, data/fashion-mnist, real files, not the data/ symlink)
# into DIR/data (gzip'ed: hora reads .gz), so that carrying the one folder DIR brings everything
# gpu/device-check.sh needs. Not the extraction: device-check.sh does that
# (gpu/devprefix.sh) into a prefix of its own, on either machine.
#
# The list was checked by `gpu/device-check.sh --dry-run`, which builds and
# runs the CPU tests from an extracted prefix with every file these
# packages installed under /usr hidden (bind-mounted /dev/null), so a
# package missing here is a build or load error there, not a silent use of
# /usr. Runtime libraries that a build machine always has (libc, libstdc++,
# libgcc) are not listed.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.devdeps}

# runtime libraries hora links (directly or through Criterion / OpenBLAS)
RUNTIME="liburing2 libyaml-0-2 libsodium23 zlib1g libopenblas0-pthread libgfortran5 libquadmath0
 libcriterion3 libffi8 libgit2-1.5 libnanomsg5 libhttp-parser2.9 libmbedcrypto7 libmbedtls14
 libmbedx509-1 libssh2-1 libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libssl3"
# headers, .pc files and link symlinks (with what their .pc files require)
# (criterion.pc requires boxfort, libffi, libgit2, nanomsg; libgit2.pc
# requires libpcre2-8 and zlib: pkg-config reads them even for --cflags)
DEV="liburing-dev libyaml-dev libsodium-dev zlib1g-dev libopenblas-dev libopenblas-pthread-dev
 libopenblas0 libcriterion-dev libboxfort-dev libffi-dev libgit2-dev libnanomsg-dev libpcre2-dev"
# pkg-config itself (the GPU machine may have none)
TOOLS="pkgconf pkgconf-bin libpkgconf3"
PKGS="$RUNTIME $DEV $TOOLS"

mkdir -p "$DIR" # .gitignore ignores /.devdeps/
rm -f "$DIR"/*.deb
(cd "$DIR" && apt-get download $PKGS)
printf '%s\n' $PKGS >"$DIR/PACKAGES"

# the data sets, as files (data/ is a git-excluded symlink here)
for d in mnist fashion-mnist; do
	if [ -d "data/$d" ]; then
		mkdir -p "$DIR/data/$d"
		for f in data/$d/*; do # gzip: the device run carries 64 MiB in all
			case $f in
			*.gz) cp -L "$f" "$DIR/data/$d/" ;;
			*) gzip -9c "$f" >"$DIR/data/$d/$(basename "$f").gz" ;;
			esac
		done
	else
		echo "devdeps: data/$d missing: the device run will skip its training" >&2
	fi
done
echo "devdeps: $(ls "$DIR"/*.deb | wc -l) packages, $(du -sh "$DIR" | cut -f1) in $DIR"
