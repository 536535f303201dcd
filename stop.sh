#!/usr/bin/env bash
# Stops the tensorfold server started by start.sh: warns about requests in flight, sends
# SIGTERM, waits up to STOP_TIMEOUT seconds, then SIGKILL. With WORKER set, then ends
# whatever rank is left on the workers (their GPU memory is free when this returns).
set -euo pipefail
source "$(dirname "$0")/scripts/config.sh"
source "$TF_ROOT/scripts/workers.sh"

# The workers in parallel (each may wait STOP_TIMEOUT for its rank).
stop_workers() {
  local w
  tf_workers
  for w in "${TF_WORKERS[@]}"; do
    (tf_stop_worker_ranks "$w" || echo "warning: could not reach the worker $w to end its ranks") &
  done
  wait
}

if ! pid=$(tf_running_pid); then
  echo "tensorfold is not running"
  rm -f "$(tf_pid_file)"
  stop_workers
  exit 0
fi
running=$(tf_curl -sf --max-time 2 "http://127.0.0.1:$PORT/health" |
  python3 -c 'import json,sys; print(json.load(sys.stdin).get("requests_running", 0))' 2>/dev/null || echo 0)
if [[ "$running" != 0 ]]; then echo "warning: $running request(s) still running; they end now"; fi
kill -TERM "$pid" 2>/dev/null || true
for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "no exit after ${STOP_TIMEOUT}s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -f "$(tf_pid_file)"
echo "tensorfold stopped (pid $pid)"
stop_workers
