#!/usr/bin/env bash
# check_includes.sh ROOT - the layering rule of hora, read from the #include
# lines of every .c/.h/.cu file under ROOT (core net gpu model).
# Includes go one way down:
#   core/ (library)  -> net/, model/, gpu/         never core/cli/ (the executable)
#   net/coll/        -> net/transport/, net/util/  never net/membership/
#   net/membership/  -> net/transport/, net/util/  never net/coll/
#   net/transport/   -> net/util/                  never net/membership/, net/coll/
#   net/util/        -> nothing of hora
#   net/             -> never core/, model/, gpu/
#   model/           -> never net/, core/, gpu/
#   gpu/             -> model/ only: never core/, net/
# A quoted include is resolved as the compiler would: beside the including
# file, then from the repository root, then core/ and model/ (the public
# include dirs); one that resolves nowhere (generated hora_config.h, system
# headers) is not hora's and is skipped. Prints every violation as
# "file:line: includes X (resolved to Y): <rule>" and exits 1 if there is any.
set -euo pipefail
ROOT="$(cd "${1:?usage: check_includes.sh ROOT}" && pwd)"

# forbidden TARGET prefixes for a SOURCE prefix; the first matching source
# prefix in this list that forbids the target wins (most specific first)
rule_for() { # src target -> prints the rule text if forbidden
	local s=$1 t=$2
	case $s in
	net/util/*) case $t in net/util/*) ;; *) echo "net/util includes nothing of hora" ;; esac ;;
	net/transport/*) case $t in net/membership/* | net/coll/*) echo "net/transport knows nothing of membership or collectives" ;; core/* | model/* | gpu/*) echo "net/ knows nothing of core/, model/ or gpu/" ;; esac ;;
	net/membership/*) case $t in net/coll/*) echo "net/membership knows nothing of collectives" ;; core/* | model/* | gpu/*) echo "net/ knows nothing of core/, model/ or gpu/" ;; esac ;;
	net/coll/*) case $t in net/membership/*) echo "net/coll reaches peers through the link interface, not membership" ;; core/* | model/* | gpu/*) echo "net/ knows nothing of core/, model/ or gpu/" ;; esac ;;
	net/*) case $t in core/* | model/* | gpu/*) echo "net/ knows nothing of core/, model/ or gpu/" ;; esac ;;
	model/*) case $t in net/* | core/* | gpu/*) echo "model/ knows nothing of net/, core/ or gpu/" ;; esac ;;
	gpu/*) case $t in core/* | net/*) echo "gpu/ knows nothing of core/ or net/" ;; esac ;;
	core/cli/*) ;;
	core/*) case $t in core/cli/*) echo "libhora (core/) does not include the CLI (core/cli/)" ;; esac ;;
	esac
}

resolve() { # dir-of-includer include -> repo-relative path or empty
	local d=$1 inc=$2 c
	for c in "$ROOT/$d/$inc" "$ROOT/$inc" "$ROOT/core/$inc" "$ROOT/model/$inc"; do
		if [[ -f $c ]]; then
			realpath -m --relative-to="$ROOT" "$c"
			return
		fi
	done
}

bad=0 files=0
while IFS= read -r -d '' f; do
	rel=${f#"$ROOT"/}
	files=$((files + 1))
	while IFS=: read -r line inc; do
		tgt=$(resolve "$(dirname "$rel")" "$inc")
		[[ -n $tgt ]] || continue
		why=$(rule_for "$rel" "$tgt")
		if [[ -n $why ]]; then
			echo "$rel:$line: includes \"$inc\" (resolved to $tgt): $why"
			bad=$((bad + 1))
		fi
	done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
		sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1:\2/')
done < <(find "$ROOT/core" "$ROOT/net" "$ROOT/gpu" "$ROOT/model" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print0 2>/dev/null)

if ((files == 0)); then
	echo "check_includes: no sources under $ROOT/{core,net,gpu,model}" >&2
	exit 2
fi
if ((bad)); then
	echo "check_includes: $bad include(s) break the layering ($files files read)" >&2
	exit 1
fi
echo "check_includes: $files files, layering holds"
