#!/usr/bin/env bash
# test_layering.sh SRC - the layering check passes on the tree, and fails,
# naming the file, line and rule, when a forbidden include is added (each
# rule once, on a scratch copy of the sources).
set -euo pipefail
SRC="$(cd "${1:?usage: test_layering.sh SRC}" && pwd)"
CHECK="$SRC/tests/layering/check_includes.sh"
bash "$CHECK" "$SRC"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
# file-to-break (first existing .c of a module) | include to add | rule text expected
inject() {
	local dir=$1 inc=$2 want=$3 f
	rm -rf "$TMP/t" && mkdir -p "$TMP/t"
	(cd "$SRC" && find core net gpu model -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print0 |
		xargs -0 cp --parents -t "$TMP/t")
	f=$(cd "$TMP/t" && find "$dir" -maxdepth 1 -name '*.c' | sort | head -1)
	if [[ -z $f ]]; then
		echo "test_layering: no .c file in $dir to break" >&2
		fail=1
		return
	fi
	printf '#include "%s"\n' "$inc" >>"$TMP/t/$f"
	local out rc=0
	out=$(bash "$CHECK" "$TMP/t" 2>&1) || rc=$?
	if [[ $rc -ne 1 ]] || ! grep -qF "$f:" <<<"$out" || ! grep -qF "$want" <<<"$out"; then
		echo "test_layering: adding #include \"$inc\" to $f was not refused with '$want' (rc $rc):" >&2
		echo "$out" >&2
		fail=1
	else
		echo "refused as it should: $f + \"$inc\""
	fi
}
inject net/transport net/coll/coll.h "net/transport knows nothing of membership or collectives"
inject net/transport net/membership/membership.h "net/transport knows nothing of membership or collectives"
inject net/membership net/coll/coll.h "net/membership knows nothing of collectives"
inject net/coll net/membership/membership.h "net/coll reaches peers through the link interface"
inject net/coll core/hora.h "net/ knows nothing of core/"
inject model net/util/clock.h "model/ knows nothing of net/"
inject model core/hora.h "model/ knows nothing of net/, core/"
inject net/util net/transport/transport.h "net/util includes nothing of hora"
exit $fail
