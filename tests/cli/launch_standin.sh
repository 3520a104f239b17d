#!/usr/bin/env bash
# launch_standin.sh worker --config F --proc G [...] - a stand-in for `hora
# worker` that `hora launch` runs under HORA_LAUNCH_WORKER (the launcher's
# test hook, core/env.c), so that its supervision can be tested without
# training. It does what the plan says, nothing else:
#   $STANDIN_DIR/plan.G  line n: bash run by the n-th start of worker G (the
#                        last line again when there are fewer lines)
#   $STANDIN_DIR/runs.G  how many times worker G was started (this one too)
#   $STANDIN_DIR/pid.G   the PID of its latest start
#   $STANDIN_DIR/inplan.G.N  the N-th start of worker G runs its plan
# Helpers for the plans: `mark NAME` creates $STANDIN_DIR/NAME; `waitfor
# NAME` waits for it; `waitgone G` waits until worker G's latest process is
# gone (reaped by the launcher); `waitstopped G` until it is stopped; a wait
# gives up after 60 s with exit 99 (a launcher that never got there).
set -u
# SIGINT (forwarded by the launcher; its group's Ctrl-C reaches only the
# launcher: each worker leads a process group of its own) kills the
# stand-in whatever it is doing: bash alone ignores it when it arrives while
# a command substitution's child exits normally, which left a stand-in
# running (then killed by the launcher's SIGKILL, not SIGINT) once in a
# loaded run. The trap re-raises it with the default action.
trap 'trap - INT; kill -INT $$' INT
G=""
while (($#)); do
  [[ $1 == --proc ]] && G="$2"
  shift
done
D="${STANDIN_DIR:?STANDIN_DIR is not set}"
[[ -n $G ]] || { echo "standin: no --proc"; exit 98; }
n=$(($(cat "$D/runs.$G" 2>/dev/null || echo 0) + 1))
echo "$n" >"$D/runs.$G"
echo "$$" >"$D/pid.$G"
mark() { : >"$D/$1"; }
# the polls' pause: a read that times out on a FIFO nobody writes, not an
# external sleep, so that a signal never finds bash waiting for a child
# (then bash decides from how the child ended whether to act on SIGINT,
# and a SIGINT that met a sleep just ending normally left the stand-in
# running, SIGKILLed by the launcher later: seen in a loaded run)
mkfifo "$D/pause.$G.$$" && exec {PAUSE}<>"$D/pause.$G.$$" && rm -f "$D/pause.$G.$$"
_wait() { # _wait TEST...: poll until TEST holds, 60 s at most
  for ((i = 0; i < 1200; i++)); do "$@" && return 0; read -r -t 0.05 -u "$PAUSE" _; done
  echo "standin $G: gave up waiting for: $*"; exit 99
}
waitfor() { _wait test -e "$D/$1"; }
_gone() { [[ -e $D/pid.$1 ]] && ! kill -0 "$(cat "$D/pid.$1")" 2>/dev/null; }
waitgone() { _wait _gone "$1"; }
_stopped() { [[ $(sed 's/.*) //' "/proc/$(cat "$D/pid.$1")/stat" 2>/dev/null | cut -c1) == T ]]; }
waitstopped() { _wait _stopped "$1"; }
plan=$(sed -n "${n}p" "$D/plan.$G")
[[ -n $plan ]] || plan=$(tail -n 1 "$D/plan.$G")
echo "standin $G run $n: $plan"
# past its start (the command substitutions above, during which a signal
# waits for their child): a test that signals every worker waits for this
mark "inplan.$G.$n"
eval "$plan"
