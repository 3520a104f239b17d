#!/usr/bin/env bash
# run.sh BUILD_DIR SECONDS - run each libFuzzer target for SECONDS, seeded
# from tests/fuzz/corpus/<target>; new inputs go to a scratch directory (the
# committed corpus stays small). Fails if a target finds a crash or a leak.
set -euo pipefail
BUILD="$1" SECS="${2:-30}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for t in idx config net swim; do
  work="$(mktemp -d)"
  echo "fuzz_$t: ${SECS}s"
  if ! (cd "$work" && "$OLDPWD/$BUILD/tests/fuzz_$t" -max_total_time="$SECS" -max_len=8192 \
          -rss_limit_mb=1024 -print_final_stats=1 "$work" "$HERE/corpus/$t" 2>"$work/log"); then
    tail -40 "$work/log"
    echo "fuzz_$t: FAILED (reproducer and log in $work)"
    exit 1
  fi
  grep -E "stat::number_of_executed_units|Done" "$work/log" | tail -2
  rm -rf "$work"
done
