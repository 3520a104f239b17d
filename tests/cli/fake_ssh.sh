#!/bin/sh
# fake_ssh.sh LOG HOST WORDS... - stands in for ssh in tests/cli/test_run.sh
# (cluster.ssh_command / cluster.launcher "fake_ssh.sh LOG {host} {cmd}"):
# records its arguments in LOG, one line per call, then does what ssh does
# with them on HOST: joins WORDS with spaces and runs that in a shell, with
# its stdin forwarded (here: inherited).
log=$1
shift
printf '%s\n' "$*" >>"$log"
shift
exec sh -c "$*"
