#!/usr/bin/env bash
# Starts tensorfold: prepares (packages, build), launches the server in the background,
# follows its log while it loads, smoke-tests it and prints "... is now LIVE! on port N".
#   ./start.sh [restart|reload] [--help] [extra `tensorfold serve` arguments...]
#   ./start.sh check [CHECK...] [`tensorfold check` options]
# restart builds first, then stops the running server and starts the new one; reload makes
# the running server read API_KEY_FILE again (SIGHUP); check runs the live checks (needle,
# toolcheck, end_of_turn, prompt_reuse, pool_pressure) against the running server.
# Settings: environment > scripts/local.sh > .env > defaults (scripts/config.sh, README "Configuration").
# With no MODEL_DIR the built-in demo checkpoint is served (random weights).
# PREPARE=1|0 forces or skips preparation (default: run it; it is incremental).
# FOREGROUND=1 stays attached (for systemd): the script exits when the server does.
# DRY_RUN=1 checks the settings and prints what would be done, changing nothing.
set -euo pipefail
source "$(dirname "$0")/scripts/config.sh"
cd "$TF_ROOT"

mode=start
if [[ "${1:-}" == "restart" || "${1:-}" == "reload" || "${1:-}" == "check" ]]; then mode=$1; shift; fi
if [[ "$mode" != check && ( "${1:-}" == "-h" || "${1:-}" == "--help" ) ]]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  echo
  echo "Settings (current values):"
  for k in "${TF_SETTINGS[@]}"; do printf '  %-20s %s\n' "$k" "${!k:-}"; done
  exit 0
fi

tf_validate_settings
tf_serve_args
bin="$BUILD_DIR/apps/tensorfold"
running=$(tf_running_pid) || running=

if [[ "$mode" == check ]]; then
  [[ -n "$running" ]] || tf_fail "tensorfold is not running (nothing to check); start it with ./start.sh"
  [[ -x "$bin" ]] || tf_fail "$bin is missing; run scripts/prepare.sh"
  # The key goes to the checker in its environment, not on its command line (ps shows that).
  API_KEY="$(tf_api_key)" exec "$bin" check --url "http://127.0.0.1:$PORT" "$@"
fi

if [[ "$mode" == reload ]]; then
  [[ -n "$running" ]] || tf_fail "tensorfold is not running (nothing to reload)"
  [[ -n "${API_KEY_FILE:-}" ]] || echo "note: API_KEY_FILE is not set here; the server reads the file it was started with"
  log="$LOG_DIR/tensorfold.log"
  sighup_lines() {
    local n
    n=$(grep -c "SIGHUP" "$log" 2>/dev/null) || true
    echo "${n:-0}"
  }
  before=$(sighup_lines)
  kill -HUP "$running"
  # The server logs the outcome: the number of keys in force, or why the old ones stay (within 30 s: a loaded
  # machine may take seconds to schedule the signal's handler).
  for ((i = 0; i < 300; i++)); do
    if (($(sighup_lines) > ${before:-0})); then
      grep "SIGHUP" "$log" | tail -n 1
      grep "SIGHUP" "$log" | tail -n 1 | grep -q "keys in force stay" && exit 1
      exit 0
    fi
    sleep 0.1
  done
  echo "sent SIGHUP to pid $running; see $log"
  exit 0
fi

prepare=0
[[ "$PREPARE" != 0 || ! -x "$bin" ]] && prepare=1

if [[ "$DRY_RUN" == 1 ]]; then
  echo "DRY_RUN=1: the settings are valid; nothing is stopped, built or started. Would:"
  if [[ -n "$running" && "$mode" != restart ]]; then
    echo "  do nothing: tensorfold is already running (pid $running, port $PORT)"
    exit 0
  fi
  ((prepare)) && echo "  prepare: scripts/prepare.sh (packages, build into $BUILD_DIR$(tf_workers; ((${#TF_WORKERS[@]})) && echo ", copies to ${TF_WORKERS[*]}"))"
  [[ -n "$running" ]] && echo "  stop:    the running server (pid $running), after the build"
  echo "  start:   $bin serve ${TF_SERVE_ARGS[*]} $*"
  echo "  model:   ${MODEL_DIR:-the built-in demo checkpoint (random weights)}"
  [[ -n "$(tf_api_key)" ]] && echo "  keys:    required ($([[ -n "${API_KEY:-}" ]] && echo "API_KEY")$([[ -n "${API_KEY:-}" && -n "${API_KEY_FILE:-}" ]] && echo " + ")$([[ -n "${API_KEY_FILE:-}" ]] && echo "API_KEY_FILE $API_KEY_FILE"))"
  if [[ -z "$running" ]] && (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "  fail:    port $PORT is already in use (PORT=... picks another)"
    exit 1
  fi
  echo "  log:     $LOG_DIR/tensorfold-<date>.log"
  exit 0
fi

# One start.sh (or restart) at a time.
mkdir -p "$STATE_DIR"
exec 9>"$STATE_DIR/start.lock"
flock -n 9 || tf_fail "another ./start.sh is running (lock $STATE_DIR/start.lock)"

if [[ -n "$running" && "$mode" != restart ]]; then
  echo "tensorfold is already running (pid $running, port $PORT); use ./start.sh restart or ./stop.sh"
  exit 0
fi

# A restart builds before it stops the running server, which answers meanwhile (and stays
# up when the build fails).
((prepare)) && scripts/prepare.sh
# The serve arguments are checked by the binary itself before anything starts.
"$bin" serve --help >/dev/null
if [[ -n "$running" ]]; then ./stop.sh; fi

if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  tf_fail "port $PORT is already in use (PORT=... picks another)"
fi

# What else holds memory here: the server plans its memory from what is free when it starts.
echo "memory: $(awk '/MemAvailable/ {printf "%.1f GiB available", $2 / 1048576}' /proc/meminfo)"
if [[ "$DEVICE" != cpu ]] && command -v nvidia-smi >/dev/null; then
  gpu_users=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null || true)
  if [[ -n "$gpu_users" ]]; then
    echo "note: processes already on the GPU (their memory is not available to tensorfold; stop them if it does not fit):"
    echo "$gpu_users"
  fi
fi

mkdir -p "$LOG_DIR" "$STATE_DIR"
log="$LOG_DIR/tensorfold-$(date +%Y%m%d-%H%M%S).log"
ln -sfn "$(basename "$log")" "$LOG_DIR/tensorfold.log"
: >"$log"
tf_rotate_logs "$log"
echo "starting: $bin serve ${TF_SERVE_ARGS[*]} $*"
nohup "$bin" serve "${TF_SERVE_ARGS[@]}" "$@" >"$log" 2>&1 </dev/null 9>&- &
pid=$!
echo "$pid" >"$(tf_pid_file)"
echo "log: $log"

# Follow the log until the server listens (or dies, or WAIT_TIMEOUT passes).
shown=0
deadline=$((SECONDS + WAIT_TIMEOUT))
while :; do
  if ! kill -0 "$pid" 2>/dev/null; then
    tail -n +$((shown + 1)) "$log" || true
    rm -f "$(tf_pid_file)"
    tf_fail "the server exited while starting; see $log"
  fi
  lines=$(wc -l <"$log")
  if ((lines > shown)); then
    sed -n "$((shown + 1)),${lines}p" "$log"
    shown=$lines
  fi
  grep -q "listening on http" "$log" && break
  ((SECONDS < deadline)) || { ./stop.sh >/dev/null 2>&1 || true; tf_fail "not listening after ${WAIT_TIMEOUT}s; see $log"; }
  sleep 0.5
done

# Smoke test: one chat completion at temperature 0 without thinking; empty text or one repeated
# character fails it.
url="http://127.0.0.1:$PORT"
model=$(tf_curl -sf "$url/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])') ||
  tf_fail "smoke test: GET /v1/models failed; see $log"
reply=$(tf_curl -sf -H 'Content-Type: application/json' "$url/v1/chat/completions" -d "{\"model\": \"$model\",
  \"messages\": [{\"role\": \"user\", \"content\": \"Say hello in five words.\"}], \"temperature\": 0,
  \"max_tokens\": 32, \"reasoning_effort\": \"none\"}") || tf_fail "smoke test: the chat completion failed; see $log"
python3 - "$reply" <<'PY' || tf_fail "smoke test: bad reply: $reply"
import json, sys
m = json.loads(sys.argv[1])["choices"][0]["message"]
text = (m.get("content") or "") + (m.get("reasoning_content") or "")
if not text.strip() or len(set(text.strip())) == 1:
    sys.exit("empty text or one repeated character")
PY

echo
echo "✔ $model is now LIVE! on port $PORT"
echo "  API:     http://$(hostname -I 2>/dev/null | awk '{print $1}' || echo 127.0.0.1):$PORT/v1  (model \"$model\")"
tf_workers
((${#TF_WORKERS[@]})) && echo "  ranks:   rank 0 here, then ${TF_WORKERS[*]} (WORKER_DIR $WORKER_DIR)"
device=$(tf_curl -sf "$url/health" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("device", "?"))' 2>/dev/null) || device="?"
echo "  device:  $device (DEVICE=$DEVICE)"
echo "  log:     $log"
echo "  restart: ./start.sh restart    stop: ./stop.sh$([[ -n "${API_KEY_FILE:-}" ]] && echo "    keys: edit $API_KEY_FILE, ./start.sh reload")"
if [[ "$FOREGROUND" == 1 ]]; then
  wait "$pid"
fi
