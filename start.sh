#!/usr/bin/env bash
# Starts tensorfold: prepares (packages, build), launches the server in the background,
# follows its log while it loads, smoke-tests it and prints "... is now LIVE! on port N".
#   ./start.sh [restart] [--help] [extra `tensorfold serve` arguments...]
# Settings: environment > scripts/local.sh > .env > defaults (scripts/config.sh, README "Configuration").
# With no MODEL_DIR the built-in demo checkpoint is served (random weights).
# PREPARE=1|0 forces or skips preparation (default: run it; it is incremental).
# FOREGROUND=1 stays attached (for systemd): the script exits when the server does.
set -euo pipefail
source "$(dirname "$0")/scripts/config.sh"
cd "$TF_ROOT"

mode=start
if [[ "${1:-}" == "restart" ]]; then mode=restart; shift; fi
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  echo
  echo "Settings (current values):"
  for k in "${TF_SETTINGS[@]}"; do printf '  %-20s %s\n' "$k" "${!k:-}"; done
  exit 0
fi

tf_validate_settings
tf_serve_args

# One start.sh (or restart) at a time.
mkdir -p "$STATE_DIR"
exec 9>"$STATE_DIR/start.lock"
flock -n 9 || tf_fail "another ./start.sh is running (lock $STATE_DIR/start.lock)"

if pid=$(tf_running_pid); then
  if [[ "$mode" != restart ]]; then
    echo "tensorfold is already running (pid $pid, port $PORT); use ./start.sh restart or ./stop.sh"
    exit 0
  fi
  ./stop.sh
fi

if [[ "$PREPARE" != 0 || ! -x "$BUILD_DIR/apps/tensorfold" ]]; then
  scripts/prepare.sh
fi
bin="$BUILD_DIR/apps/tensorfold"
# The serve arguments are checked by the binary itself before anything starts.
"$bin" serve --help >/dev/null

if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  tf_fail "port $PORT is already in use (PORT=... picks another)"
fi

# What else holds memory here: the server plans its memory from what is free when it starts.
echo "memory: $(awk '/MemAvailable/ {printf "%.1f GiB available", $2 / 1048576}' /proc/meminfo)"
if [[ "$DEVICE" == cuda ]] && command -v nvidia-smi >/dev/null; then
  gpu_users=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null || true)
  if [[ -n "$gpu_users" ]]; then
    echo "note: processes already on the GPU (their memory is not available to tensorfold; stop them if it does not fit):"
    echo "$gpu_users"
  fi
fi

mkdir -p "$LOG_DIR" "$STATE_DIR"
log="$LOG_DIR/tensorfold-$(date +%Y%m%d-%H%M%S).log"
ln -sfn "$(basename "$log")" "$LOG_DIR/tensorfold.log"
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
auth=()
[[ -n "${API_KEY:-}" ]] && auth=(-H "Authorization: Bearer $API_KEY")
model=$(curl -sf "${auth[@]}" "$url/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])') ||
  tf_fail "smoke test: GET /v1/models failed; see $log"
reply=$(curl -sf "${auth[@]}" -H 'Content-Type: application/json' "$url/v1/chat/completions" -d "{\"model\": \"$model\",
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
echo "  log:     $log"
echo "  restart: ./start.sh restart    stop: ./stop.sh"
if [[ "$FOREGROUND" == 1 ]]; then
  wait "$pid"
fi
