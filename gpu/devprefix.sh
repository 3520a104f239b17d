#!/usr/bin/env bash
# gpu/devprefix.sh - unpack the .debs of gpu/devdeps.sh into a prefix that
# CMake, pkg-config and the dynamic loader can use, on a machine where none
# of them is installed (the GPU machine) or where they must not be used (the
# dry run of gpu/device-check.sh).
#
#   gpu/devprefix.sh DEBDIR PREFIX     writes PREFIX/env.sh; source it
#
# Unpacked .debs are not usable as they are: their .pc files say /usr, some
# link symlinks are absolute (/lib/x86_64-linux-gnu/libz.so.1.2.13) and
# OpenBLAS reaches libopenblas.so.0 through /etc/alternatives, which dpkg -x
# does not make. This script rewrites each of those into PREFIX. Its loader
# path, PREFIX/ld, links only the runtime libraries the machine does not
# already have under the same soname: the system copy wins, so that cmake,
# python and the CUDA tools keep their own libssl, libkrb5, ...
#
# Not the download (gpu/devdeps.sh) nor the build (gpu/device-check.sh).
set -euo pipefail
DEBS=$1
P=$2
ML=x86_64-linux-gnu
rm -rf "$P"
mkdir -p "$P"
# dpkg -x, or where there is no dpkg, the .deb's data member by hand
unpack() {
	if command -v dpkg >/dev/null; then
		dpkg -x "$1" "$P"
		return
	fi
	local m
	m=$(ar t "$1" | grep '^data\.tar')
	case $m in
	*.xz) ar p "$1" "$m" | tar -xJ -C "$P" ;;
	*.zst) ar p "$1" "$m" | tar --zstd -x -C "$P" ;;
	*.gz) ar p "$1" "$m" | tar -xz -C "$P" ;;
	*) ar p "$1" "$m" | tar -x -C "$P" ;;
	esac
}
for f in "$DEBS"/*.deb; do
	unpack "$f"
done

# /lib/<ml> (usrmerge'd packages) next to /usr/lib/<ml>, as one directory
mkdir -p "$P/usr/lib/$ML"
if [ -d "$P/lib/$ML" ]; then
	for f in "$P/lib/$ML"/*; do
		[ -e "$P/usr/lib/$ML/$(basename "$f")" ] || ln -s "$f" "$P/usr/lib/$ML/"
	done
fi

# OpenBLAS: what update-alternatives would have made
OB="$P/usr/lib/$ML/openblas-pthread"
for n in libopenblas.so libopenblas.so.0 libblas.so libblas.so.3 liblapack.so liblapack.so.3; do
	[ -e "$OB/$n" ] && ln -sfn "openblas-pthread/$n" "$P/usr/lib/$ML/$n"
done
for pc in "$OB"/pkgconfig/*.pc; do
	[ -e "$pc" ] && ln -sfn "../openblas-pthread/pkgconfig/$(basename "$pc")" \
		"$P/usr/lib/$ML/pkgconfig/$(basename "$pc")"
done

# absolute symlinks -> the same path inside the prefix
find "$P" -type l | while read -r l; do
	t=$(readlink "$l")
	case $t in
	/etc/alternatives/*) ;;
	/*) ln -sfn "$P$t" "$l" ;;
	esac
done

# .pc files: /usr -> PREFIX/usr (prefix=, libdir=, includedir=, Libs.private paths)
find "$P" -name '*.pc' -type f | while read -r pc; do
	sed -i -E "s#(^|[=[:space:]])/usr#\1$P/usr#g" "$pc"
done

# the loader path, PREFIX/ld: a link to each runtime library the machine
# lacks; one it has under the same soname is left out (see the header).
# The link step still sees every library through pkg-config's -L.
mkdir -p "$P/ld"
SYS=$(/sbin/ldconfig -p 2>/dev/null | awk '/=>/ {print $NF}' || true)
nsh=0
for f in "$P/usr/lib/$ML"/*.so.* "$OB"/*.so.*; do
	[ -e "$f" ] || continue
	n=$(basename "$f")
	have=0
	for s in $(printf '%s\n' $SYS | grep -F "/$n" | grep "/$n\$" || true); do
		# a real file: the dry run hides hora's deps as empty character devices
		if [ -f "$s" ] && [ -s "$s" ]; then
			have=1
			break
		fi
	done
	if [ $have = 1 ]; then
		nsh=$((nsh + 1))
	else
		ln -sfn "$f" "$P/ld/$n"
	fi
done

# pkg-config: ours, run with our loader path (libpkgconf3 may be missing)
mkdir -p "$P/bin"
cat >"$P/bin/pkg-config" <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$P/ld\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $P/usr/bin/pkgconf "\$@"
EOF
chmod +x "$P/bin/pkg-config"

cat >"$P/env.sh" <<EOF
# written by gpu/devprefix.sh: hora's C dependencies from $P
export PKG_CONFIG_LIBDIR=$P/usr/lib/$ML/pkgconfig:$P/usr/share/pkgconfig
export PKG_CONFIG=$P/bin/pkg-config
export LD_LIBRARY_PATH=$P/ld\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export CMAKE_PREFIX_PATH=$P/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}
export HORA_DEVPREFIX=$P
EOF
echo "devprefix: $(ls "$DEBS"/*.deb | wc -l) packages in $P, $(ls "$P/ld" | wc -l) libraries on its loader path, $nsh left to the system's"
