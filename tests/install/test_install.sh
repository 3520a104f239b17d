#!/usr/bin/env bash
# test_install.sh BUILD SRC [SANFLAGS] - hora as an installed library
# (deploy/package/), from the build tree BUILD of the sources SRC:
#   1. `cmake --install BUILD --prefix T/prefix`: the headers under
#      include/hora/, libhora.so.MAJOR with its SONAME and the links,
#      libhora.a, bin/hora, lib/pkgconfig/hora.pc, lib/cmake/hora/;
#   2. `nm -D --defined-only` of the installed libhora.so: exactly the
#      functions declared HORA_API in the installed headers, each under the
#      version node HORA_<SOVERSION> (and that node), nothing else;
#   3. the headers alone compile (C11, -Wall -Wextra -Wpedantic -Werror);
#   4. tests/install/consumer/ (a 2-rank allreduce in two processes) built
#      against T/prefix four ways and run, its result checked each time:
#      pkg-config dynamic and static (the `cc` lines of deploy/README.md),
#      find_package dynamic (hora::hora) and static (hora::hora_static); the
#      executables' dynamic sections say which library each one uses;
#   5. `cpack -G DEB` (into T, not BUILD): `dpkg-deb --info` (name, version,
#      architecture, Depends covering what dpkg-shlibdeps computes for
#      libhora.so and `hora`, the shlibs file) and `dpkg-deb --contents`
#      (the files of 1., under /usr).
# SANFLAGS: the sanitizer flags of a sanitizer build, given to the
# consumer's compiler (its libhora needs their runtime); the fully static
# variant is then skipped (sanitizers have no static runtime), said so.
# Exit 0 all passed, 1 a check failed, 77 a tool is missing (skip).
set -uo pipefail
BUILD=$(cd "${1:?usage: test_install.sh BUILD SRC [SANFLAGS]}" && pwd)
SRC=$(cd "${2:?usage: test_install.sh BUILD SRC [SANFLAGS]}" && pwd)
SANFLAGS=${3:-}
# file: CPackDeb runs it to find the ELF files for the shlibs control file
# ("CPackDeb: file utility is not available" without it); Debian's minbase
# lacks it, deploy/install-deps.sh installs it
for tool in cmake pkg-config nm readelf dpkg-deb cpack file cc; do
	command -v "$tool" >/dev/null || { echo "SKIP: $tool not found (deploy/install-deps.sh installs it)"; exit 77; }
done
T=$(mktemp -d /tmp/hora-install.XXXXXX)
trap 'rm -rf "$T"' EXIT
P=$T/prefix
fails=0
check() { # name status
	if [[ $2 == 0 ]]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
has() { grep -qF -- "$2" "$1"; }
VERSION=$(sed -n 's/^#define HORA_VERSION_STRING "\(.*\)"$/\1/p' "$BUILD/generated/hora_config.h")
MAJOR=${VERSION%%.*}
echo "hora $VERSION, build $BUILD"

# ---- 1. the installed tree ----------------------------------------------
cmake --install "$BUILD" --prefix "$P" >"$T/install.log" 2>&1
check "cmake --install --prefix" $?
LIBDIR=$(find "$P" -name "libhora.so.$VERSION" -printf '%h\n' | head -1)
[[ -n $LIBDIR ]]; check "libhora.so.$VERSION installed" $?
for h in hora.h hora_model.h hora_config.h; do
	[[ -f $P/include/hora/$h ]]; check "include/hora/$h" $?
done
[[ $(readlink "$LIBDIR/libhora.so.$MAJOR") == "libhora.so.$VERSION" &&
	$(readlink "$LIBDIR/libhora.so") == "libhora.so.$MAJOR" ]]
check "libhora.so -> libhora.so.$MAJOR -> libhora.so.$VERSION" $?
readelf -d "$LIBDIR/libhora.so.$VERSION" >"$T/dyn" 2>&1
has "$T/dyn" "Library soname: [libhora.so.$MAJOR]"; check "SONAME libhora.so.$MAJOR" $?
[[ -f $LIBDIR/libhora.a ]]; check "libhora.a" $?
[[ -f $LIBDIR/pkgconfig/hora.pc ]]; check "pkgconfig/hora.pc" $?
for f in hora-config.cmake hora-config-version.cmake hora-targets.cmake hora-static-targets.cmake; do
	[[ -f $LIBDIR/cmake/hora/$f ]]; check "cmake/hora/$f" $?
done
"$P/bin/hora" --version >"$T/v" 2>&1
check "bin/hora --version exits 0" $?
sed 's/^/  | /' "$T/v"
[[ $(head -1 "$T/v") == "hora $VERSION" ]]; check "first line: hora $VERSION" $?
grep -qE '^features: io_uring \(liburing [0-9.]+\) (yes|no: .+); cuda: .+; shared memory: (yes|no: .+); python: .+$' "$T/v"
check "features: io_uring, cuda, shared memory, python" $?

# ---- 2. exported symbols: the public API and nothing else ---------------
# declared: every HORA_API function name of the installed headers
# (comments and preprocessor lines out, then one declaration per line)
cat "$P/include/hora/hora.h" "$P/include/hora/hora_model.h" | grep -v '^[[:space:]]*#' | tr '\n' ' ' |
	sed 's:/\*\([^*]\|\*[^/]\)*\*/: :g' | tr ';{}' '\n' |
	sed -n 's/^ *HORA_API[^(]*[ *]\(hora_[a-z0-9_]*\) *(.*/\1/p' | sort -u >"$T/declared"
nm -D --defined-only "$LIBDIR/libhora.so.$VERSION" >"$T/nm"
awk '{print $3}' "$T/nm" | sed 's/@.*//' | grep -vx "HORA_$MAJOR" | sort -u >"$T/exported"
echo "  $(wc -l <"$T/declared") declared HORA_API, $(wc -l <"$T/exported") exported"
[[ $(wc -l <"$T/declared") -gt 50 ]]; check "the header scan finds the API (> 50 functions)" $?
diff "$T/declared" "$T/exported" >"$T/symdiff"
check "nm -D --defined-only: exactly the HORA_API functions" $?
sed 's/^/  | /' "$T/symdiff" | head -20
[[ -z $(grep -v "@@HORA_$MAJOR\$" "$T/nm" | grep -v " A HORA_$MAJOR\$") ]]
check "every exported symbol under the version node HORA_$MAJOR" $?
# and the script does hide what visibility would let through: a scratch
# library with one default-visibility non-hora function, linked with it
printf '__attribute__((visibility("default"))) int leaked(void) { return 1; }\n' >"$T/leak.c"
printf '__attribute__((visibility("default"))) int hora_kept(void) { return 2; }\n' >>"$T/leak.c"
cc -shared -fPIC -o "$T/libleak.so" "$T/leak.c" -Wl,--version-script="$SRC/deploy/package/libhora.map"
leak_syms=$(nm -D --defined-only "$T/libleak.so")
grep -q '^hora_kept@@HORA_0$' <<<"$(awk '{print $3}' <<<"$leak_syms")" &&
	! grep -q leaked <<<"$leak_syms"
check "libhora.map keeps hora_* and hides any other name" $?

# ---- 3. the headers alone ------------------------------------------------
printf '#include <hora/hora.h>\n#include <hora/hora_model.h>\n#include <hora/hora_config.h>\nint main(void) { return HORA_ERR_CONFIG < 0 ? 0 : 1; }\n' >"$T/hdr.c"
cc -std=c11 -Wall -Wextra -Wpedantic -Werror -I"$P/include" -c "$T/hdr.c" -o "$T/hdr.o" 2>"$T/hdr.log"
check "the installed headers compile alone (C11, -Wpedantic -Werror)" $?
sed 's/^/  | /' "$T/hdr.log" | head

# ---- 4. the consumer, four ways -----------------------------------------
CONSUMER=$SRC/tests/install/consumer
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
[[ $(pkg-config --modversion hora) == "$VERSION" ]]; check "pkg-config --modversion hora: $VERSION" $?
pkg-config --static --libs hora >"$T/static-libs"
sed 's/^/  | /' "$T/static-libs"
for l in -lhora -luring -lyaml -lz -lopenblas -lsodium -ldl -lm -pthread; do
	grep -qw -- "$l" "$T/static-libs" || { echo "  missing $l"; false; }
done
check "pkg-config --static --libs hora names every dependency" $?
[[ $(pkg-config --libs hora | sed 's/ *$//') == "-L$LIBDIR -lhora" ]]; check "pkg-config --libs hora: -L$LIBDIR -lhora alone" $?

run_consumer() { # name executable
	local name=$1 exe=$2
	"$exe" >"$T/$name.out" 2>&1
	local rc=$?
	sed 's/^/  | /' "$T/$name.out"
	[[ $rc == 0 ]] && grep -qE "^hora $VERSION: allreduce of [0-9]+ floats over 2 ranks ok" "$T/$name.out"
	check "$name: the 2-rank allreduce runs and is right" $?
}
needs() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' '; }
cc_flags=(-std=c11 -O2 -Wall -Wextra -Werror)
# pkg-config, dynamic: libhora.so alone (its dependencies are its own NEEDED)
# shellcheck disable=SC2046,SC2086 # SANFLAGS and pkg-config's output are word lists
cc "${cc_flags[@]}" $SANFLAGS -o "$T/pc-shared" "$CONSUMER/main.c" $(pkg-config --cflags --libs hora) \
	>"$T/pc-shared.log" 2>&1
check "pkg-config dynamic: builds" $?
sed 's/^/  | /' "$T/pc-shared.log" | head
n=$(needs "$T/pc-shared")
echo "  NEEDED: $n"
[[ " $n " == *" libhora.so.$MAJOR "* && " $n " != *" liburing"* ]]
check "pkg-config dynamic: needs libhora.so.$MAJOR (not its dependencies)" $?
# (the whole output first: with pipefail, grep -q quitting at its match can
# kill ldd with SIGPIPE, and the pipeline fails although it matched)
grep -q "libhora.so.$MAJOR => $LIBDIR/libhora.so.$MAJOR" <<<"$(LD_LIBRARY_PATH=$LIBDIR ldd "$T/pc-shared")"
check "pkg-config dynamic: loads the installed libhora" $?
LD_LIBRARY_PATH=$LIBDIR run_consumer "pkg-config dynamic" "$T/pc-shared"
# pkg-config, static: a static executable
if [[ -n $SANFLAGS ]]; then
	echo "skip pkg-config static (-static): a sanitizer build ($SANFLAGS) has no static runtime"
else
	# shellcheck disable=SC2046
	cc "${cc_flags[@]}" -static -o "$T/pc-static" "$CONSUMER/main.c" $(pkg-config --static --cflags --libs hora) \
		>"$T/pc-static.log" 2>&1
	rc=$?
	[[ $(cc -print-file-name=libgfortran.a) == /* ]] ||
		echo "  (no libgfortran.a, which libopenblas.a needs: deploy/install-deps.sh installs libgfortran-12-dev)"
	check "pkg-config static: builds (cc -static ... \$(pkg-config --static --cflags --libs hora))" $rc
	grep -v "statically linked applications requires at runtime" "$T/pc-static.log" |
		grep -v 'in function' | sed 's/^/  | /' | head
	grep -q 'no dynamic section' <<<"$(readelf -d "$T/pc-static" 2>&1)"
	check "pkg-config static: no dynamic section" $?
	run_consumer "pkg-config static" "$T/pc-static"
fi
# find_package: hora::hora and hora::hora_static
for link in shared static; do
	b=$T/cm-$link
	cmake -S "$CONSUMER" -B "$b" -DCMAKE_PREFIX_PATH="$P" -DHORA_LINK=$link -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_C_FLAGS="$SANFLAGS -Werror" >"$b.log" 2>&1 && cmake --build "$b" >>"$b.log" 2>&1
	rc=$?
	check "find_package $link: configures and builds" $rc
	[[ $rc == 0 ]] || sed 's/^/  | /' "$b.log" | tail -20
	grep "consumer: hora" "$b.log" | sed 's/^/  | /'
	has "$b.log" "consumer: hora $VERSION from $LIBDIR/cmake/hora"
	check "find_package $link: hora $VERSION from the prefix" $?
	n=$(needs "$b/consumer")
	echo "  NEEDED: $n"
	if [[ $link == shared ]]; then
		[[ " $n " == *" libhora.so.$MAJOR "* && " $n " != *" liburing"* ]]
		check "find_package shared: hora::hora needs libhora.so.$MAJOR (not its dependencies)" $?
	else
		# (gcc links --as-needed here: the dependencies this program uses)
		[[ " $n " != *" libhora.so"* && " $n " == *" liburing.so.2 "* ]]
		check "find_package static: hora::hora_static puts libhora.a in, liburing as NEEDED" $?
	fi
	run_consumer "find_package $link" "$b/consumer"
done
# a version this package does not satisfy is refused
! cmake -S "$CONSUMER" -B "$T/cm-v9" -DCMAKE_PREFIX_PATH="$P" -DHORA_WANT=$((MAJOR + 1)).0 >"$T/cm-v9.log" 2>&1 &&
	has "$T/cm-v9.log" "hora-config.cmake, version: $VERSION"
check "find_package(hora $((MAJOR + 1)).0) refuses $VERSION (SameMajorVersion)" $?

# ---- 5. the Debian package ----------------------------------------------
(cd "$T" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$T/deb") >"$T/cpack.log" 2>&1
check "cpack -G DEB" $?
DEB=$(find "$T/deb" -maxdepth 1 -name "hora_${VERSION}_*.deb" | head -1)
[[ -f $DEB ]]; check "hora_${VERSION}_ARCH.deb made" $?
[[ -f $DEB ]] || { tail -20 "$T/cpack.log"; echo "$fails failed"; exit 1; }
dpkg-deb --info "$DEB" >"$T/info"
sed 's/^/  | /' "$T/info"
field() { sed -n "s/^ $1: //p" "$T/info"; }
[[ $(field Package) == hora && $(field Version) == "$VERSION" &&
	$(field Architecture) == "$(dpkg --print-architecture)" ]]
check "dpkg-deb --info: Package hora, Version $VERSION, Architecture $(dpkg --print-architecture)" $?
has "$T/info" "shlibs"; check "dpkg-deb --info: a shlibs control file" $?
dpkg-deb --ctrl-tarfile "$DEB" | tar -xO ./shlibs >"$T/shlibs" 2>/dev/null
grep -qx "libhora $MAJOR hora (>= $VERSION)" "$T/shlibs"; check "shlibs: libhora $MAJOR hora (>= $VERSION)" $?
# the package's library directory: usr/ + the build's CMAKE_INSTALL_LIBDIR
# (lib; lib/x86_64-linux-gnu in a tree configured with the prefix /usr)
L=usr/$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
dpkg-deb --contents "$DEB" | awk '{print $6}' | sed 's|^\./||' >"$T/contents"
for f in usr/include/hora/hora.h usr/include/hora/hora_model.h usr/include/hora/hora_config.h \
	"$L/libhora.so.$VERSION" "$L/libhora.so.$MAJOR" "$L/libhora.so" "$L/libhora.a" \
	usr/bin/hora "$L/pkgconfig/hora.pc" "$L/cmake/hora/hora-config.cmake"; do
	grep -qx "$f" "$T/contents" || { echo "  missing $f"; false; }
done
check "dpkg-deb --contents: headers, libraries, hora, hora.pc, the CMake package under /usr" $?
! grep -qE "^(tmp|work|root|home)/|/build/" "$T/contents"
check "dpkg-deb --contents: nothing outside /usr" $?
mkdir -p "$T/x"
dpkg-deb -x "$DEB" "$T/x"
grep -q '^prefix=/usr$' "$T/x/$L/pkgconfig/hora.pc"; check "the package's hora.pc has prefix=/usr" $?
# Depends covers what dpkg-shlibdeps computes for the library and the command
mkdir -p "$T/x/debian" && : >"$T/x/debian/control"
(cd "$T/x" && dpkg-shlibdeps -O -e"$L/libhora.so.$VERSION" -eusr/bin/hora 2>/dev/null) |
	sed -n 's/^shlibs:Depends=//p' | tr ',' '\n' | sed 's/^ *//' >"$T/shlibdeps"
echo "  dpkg-shlibdeps: $(tr '\n' ',' <"$T/shlibdeps")"
depends=$(field Depends)
ok=0
[[ -s $T/shlibdeps ]] || ok=1
if [[ -n $SANFLAGS ]]; then # its libhora needs the sanitizer runtimes: not a release package
	echo "  (a sanitizer build: libasan/libubsan are not in Depends; checked without them)"
	grep -v '^lib\(asan\|ubsan\|gcc-s\|stdc++\)' "$T/shlibdeps" >"$T/shlibdeps.1"
	mv "$T/shlibdeps.1" "$T/shlibdeps"
fi
while read -r pkg rest; do
	[[ -n $pkg ]] || continue
	need=$(sed -n 's/^(>= \(.*\))$/\1/p' <<<"$rest")
	have=$(tr ',' '\n' <<<"$depends" | sed -n "s/^ *$pkg\( (>= \(.*\))\)\?\$/=\2/p" | head -1)
	if [[ -z $have ]]; then
		echo "  Depends lacks $pkg"
		ok=1
	elif [[ -n $need ]] && ! dpkg --compare-versions "${have#=}" ge "$need"; then
		echo "  Depends has $pkg ${have#=}, dpkg-shlibdeps wants >= $need"
		ok=1
	fi
done <"$T/shlibdeps"
check "Depends covers dpkg-shlibdeps (package and minimum version)" $ok

echo "$fails failed"
[[ $fails == 0 ]]
