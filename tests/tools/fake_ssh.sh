#!/bin/sh
# A stand-in for ssh in tests: runs the command on this machine, as ssh would on
# the destination. Options (-o X, -T, ...) are skipped; the destination is
# appended to $FAKE_SSH_LOG when set; the command runs in $FAKE_SSH_HOME (the
# "home" of the login) with the words joined by spaces, as ssh joins them, and
# with a login's environment (HOME, PATH, USER), not the caller's.
# FAKE_SSH_PATH is put before PATH there (stand-ins for the worker's tools);
# FAKE_SSH_REFUSE=1 answers as ssh does when no key is accepted.
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "fake_ssh: no destination" >&2; exit 255; }
dest=$1
shift
[ -n "${FAKE_SSH_LOG:-}" ] && echo "$dest" >>"$FAKE_SSH_LOG"
if [ "${FAKE_SSH_REFUSE:-0}" = 1 ]; then
  echo "$dest: Permission denied (publickey)." >&2
  exit 255
fi
home=${FAKE_SSH_HOME:-$HOME}
cd "$home" || exit 255
exec env -i HOME="$home" PATH="${FAKE_SSH_PATH:+$FAKE_SSH_PATH:}$PATH" USER="${USER:-tester}" sh -c "$*"
