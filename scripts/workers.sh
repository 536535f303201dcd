# Helpers for the worker machines (WORKER=user@host[,...]), sourced after config.sh.
# Each runs a POSIX sh script on a worker over TF_SSH (key-based logins only), the script on standard
# input so that nothing in it meets a second round of shell quoting.

# 'word' for a POSIX shell.
tf_sh_quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# tf_on_worker DEST SCRIPT: runs SCRIPT with sh on DEST; its exit code.
tf_on_worker() {
  local dest=$1 script=$2
  local -a ssh
  read -r -a ssh <<<"$TF_SSH"
  "${ssh[@]}" "$dest" sh -s <<<"$script"
}

# tf_worker_reachable DEST: fails with what to do when a key-based login does not work.
tf_worker_reachable() {
  local dest=$1 out
  if ! out=$(tf_on_worker "$dest" 'echo ok' 2>&1) || [[ "$out" != *ok* ]]; then
    tf_fail "cannot reach the worker $dest over SSH without a password ($TF_SSH): ${out:-no answer}
  (set up a key: ssh-keygen; ssh-copy-id $dest; a changed host key needs ssh-keygen -R HOST)"
  fi
}

# tf_stop_worker_ranks DEST: ends the ranks left on DEST (their pid files in WORKER_DIR): SIGTERM,
# STOP_TIMEOUT seconds, then SIGKILL. Prints what it did.
tf_stop_worker_ranks() {
  local dest=$1
  tf_on_worker "$dest" "dir=$(tf_sh_quote "$WORKER_DIR"); wait_s=$STOP_TIMEOUT"'
cd "$dir" 2>/dev/null || exit 0
# Running: not gone and not a zombie (its parent may not have reaped it yet).
alive() { kill -0 "$1" 2>/dev/null && [ "$(sed "s/.*) //" "/proc/$1/stat" 2>/dev/null | cut -d" " -f1)" != Z ]; }
for f in rank*.pid; do
  [ -f "$f" ] || continue
  p=$(cat "$f"); rm -f "$f"
  case "$p" in ""|*[!0-9]*) continue ;; esac
  # Only a tensorfold process (a pid may have been reused since).
  grep -q tensorfold "/proc/$p/cmdline" 2>/dev/null || continue
  kill -TERM "$p" 2>/dev/null || continue
  i=0
  while alive "$p" && [ $i -lt $((wait_s * 10)) ]; do sleep 0.1; i=$((i + 1)); done
  if alive "$p"; then kill -KILL "$p" 2>/dev/null; echo "$(hostname): ${f%.pid} (pid $p) killed"
  else echo "$(hostname): ${f%.pid} (pid $p) stopped"; fi
done'
}
