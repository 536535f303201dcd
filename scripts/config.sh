#!/usr/bin/env bash
# Settings for start.sh / stop.sh / prepare.sh, highest first:
#   environment variables > scripts/local.sh (sourced; environment values are restored after it)
#   > .env beside start.sh (KEY=value lines, quotes and # comments; never executed) > defaults here.
# Sourced, not run. Every setting is listed in README.md ("Configuration").
TF_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

TF_SETTINGS=(MODEL_DIR SERVED_NAME DEVICE HOST PORT PARALLEL CONTEXT KV DENSE LM_HEAD EXACT_ROWS BATCH_INVARIANT GRAPHS COPY COPY_MAX COPY_MATCH DRAFTER MTP_MAX LOOP_GUARD MEMORY_RESERVE_GIB KV_POOL_GIB MAX_TOKENS
  SHARED_PREFIX KEPT_PROMPTS PROMPT_STORE PROMPT_STORE_GIB PROMPT_STORE_BLOCK VISION VISION_URLS VISION_URLS_CA
  MAX_QUEUED TP API_KEY API_KEY_FILE TF_CACHE_DIR BUILD_DIR LOG_DIR STATE_DIR WAIT_TIMEOUT STOP_TIMEOUT FOREGROUND
  PREPARE DRY_RUN LOG_KEEP MEMORY_GUARD_MIB WATCHDOG_S REASONING_EFFORT THINKING_BUDGET STREAM_SMOOTH STREAM_SMOOTH_MS
  REASONING_MEMORY_MIB REPLY_WARMUP PROMPT_BUDGET_MIB CORS_ORIGINS
  WORKER FABRIC_PEER WORKER_DIR WORKER_MODEL_DIR TF_SSH TF_CUDA)

# The environment as the user gave it (these win over everything).
declare -A tf_env_given=()
for k in "${TF_SETTINGS[@]}"; do
  if [[ -n "${!k+x}" ]]; then tf_env_given[$k]="${!k}"; fi
done

# .env: parsed, never executed.
tf_load_dotenv() {
  local file=$1 line key value
  [[ -f "$file" ]] || return 0
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line#"${line%%[![:space:]]*}"}"
    [[ -z "$line" || "$line" == \#* ]] && continue
    line="${line#export }"
    [[ "$line" =~ ^([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]] || { echo "warning: $file: ignoring line: $line" >&2; continue; }
    key=${BASH_REMATCH[1]}
    value=${BASH_REMATCH[2]}
    if [[ "$value" =~ ^\"(.*)\"[[:space:]]*(#.*)?$ ]]; then
      value=${BASH_REMATCH[1]}
    elif [[ "$value" =~ ^\'(.*)\'[[:space:]]*(#.*)?$ ]]; then
      value=${BASH_REMATCH[1]}
    else
      value="${value%%[[:space:]]#*}"
      value="${value%"${value##*[![:space:]]}"}"
    fi
    printf -v "$key" '%s' "$value"
    export "${key?}"
  done <"$file"
}
tf_load_dotenv "$TF_ROOT/.env"

if [[ -f "$TF_ROOT/scripts/local.sh" ]]; then
  # shellcheck source=/dev/null
  source "$TF_ROOT/scripts/local.sh"
fi

# The environment wins over local.sh and .env.
for k in "${!tf_env_given[@]}"; do
  printf -v "$k" '%s' "${tf_env_given[$k]}"
done

# Defaults.
: "${HOST:=0.0.0.0}"
: "${PORT:=8888}"
: "${PARALLEL:=4}"
: "${CONTEXT:=1048576}"
: "${KV:=fp8}"
: "${MEMORY_RESERVE_GIB:=4}"
: "${KV_POOL_GIB:=0}"
: "${MAX_TOKENS:=32768}"
: "${MAX_QUEUED:=64}"
: "${SHARED_PREFIX:=1}"
: "${KEPT_PROMPTS:=16}"
: "${VISION:=1}"
: "${VISION_URLS:=0}"
: "${TP:=1}"
: "${DEVICE:=auto}"
: "${BUILD_DIR:=$TF_ROOT/build}"
: "${LOG_DIR:=$TF_ROOT/logs}"
: "${LOG_KEEP:=10}"
: "${STATE_DIR:=$TF_ROOT/.run}"
: "${WAIT_TIMEOUT:=1800}"
: "${STOP_TIMEOUT:=30}"
: "${FOREGROUND:=0}"
: "${PREPARE:=auto}"
: "${DRY_RUN:=0}"
# Ranks on other machines (WORKER=user@host[,user@host...]): the tensorfold folder there, relative to
# the SSH login's home unless absolute, and the SSH client (key-based logins only).
: "${WORKER_DIR:=.cache/tensorfold}"
: "${TF_SSH:=ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o ServerAliveInterval=10 -o ServerAliveCountMax=3 -T}"
export TF_SSH

# WORKER as a list (comma- or space-separated).
tf_workers() {
  local w
  TF_WORKERS=()
  local list=${WORKER:-}
  for w in ${list//,/ }; do TF_WORKERS+=("$w"); done
}

# Where the workers' copy of the checkpoint lives: WORKER_MODEL_DIR when given (the user keeps it
# there, e.g. a shared filesystem: nothing is copied), else a copy in WORKER_DIR/models/ that
# prepare.sh keeps in step with MODEL_DIR; empty for the demo (each worker makes its own).
tf_worker_model_dir() {
  if [[ -n "${WORKER_MODEL_DIR:-}" ]]; then
    echo "$WORKER_MODEL_DIR"
  elif [[ -n "${MODEL_DIR:-}" ]]; then
    echo "$WORKER_DIR/models/$(basename "$(cd "$MODEL_DIR" && pwd)")"
  fi
}

tf_fail() { echo "error: $*" >&2; exit 1; }

# Validates every setting before anything is stopped or started.
tf_validate_settings() {
  [[ "$PORT" =~ ^[0-9]+$ ]] && ((PORT >= 1 && PORT <= 65535)) || tf_fail "PORT must be 1..65535, got '$PORT'"
  [[ "$PARALLEL" =~ ^[0-9]+$ ]] && ((PARALLEL >= 1 && PARALLEL <= 256)) || tf_fail "PARALLEL must be 1..256, got '$PARALLEL'"
  [[ "$CONTEXT" =~ ^[0-9]+$ ]] || tf_fail "CONTEXT must be a number of tokens (0: largest that fits), got '$CONTEXT'"
  [[ "$KV" =~ ^(fp8|bf16|f32)$ ]] || tf_fail "KV must be fp8, bf16 or f32, got '$KV'"
  [[ -z "${EXACT_ROWS:-}" || ("$EXACT_ROWS" =~ ^[0-9]+$ && "$EXACT_ROWS" -le 64) ]] ||
    tf_fail "EXACT_ROWS must be a number in 0..64, got '$EXACT_ROWS'"
  [[ -z "${BATCH_INVARIANT:-}" || "$BATCH_INVARIANT" == 0 || "$BATCH_INVARIANT" == 1 ]] ||
    tf_fail "BATCH_INVARIANT must be 0 or 1, got '$BATCH_INVARIANT'"
  [[ -z "${GRAPHS:-}" || "$GRAPHS" =~ ^[01]$ ]] || tf_fail "GRAPHS must be 0 or 1, got '$GRAPHS'"
  [[ -z "${COPY:-}" || "$COPY" =~ ^[01]$ ]] || tf_fail "COPY must be 0 or 1, got '$COPY'"
  [[ -z "${COPY_MAX:-}" || ("$COPY_MAX" =~ ^[0-9]+$ && "$COPY_MAX" -ge 1 && "$COPY_MAX" -le 63) ]] ||
    tf_fail "COPY_MAX must be a number in 1..63, got '$COPY_MAX'"
  [[ -z "${COPY_MATCH:-}" || ("$COPY_MATCH" =~ ^[0-9]+$ && "$COPY_MATCH" -ge 2 && "$COPY_MATCH" -le 64) ]] ||
    tf_fail "COPY_MATCH must be a number in 2..64, got '$COPY_MATCH'"
  [[ -z "${LOOP_GUARD:-}" || ("$LOOP_GUARD" =~ ^[0-9]+$ && ${#LOOP_GUARD} -le 10 && "$LOOP_GUARD" -le 1073741824) ]] ||
    tf_fail "LOOP_GUARD must be a number of tokens in 0..1073741824 (0: off), got '$LOOP_GUARD'"
  [[ -z "${DRAFTER:-}" || "$DRAFTER" =~ ^(mtp|none|dflash2)$ ]] ||
    tf_fail "DRAFTER must be mtp or none, got '$DRAFTER'"
  [[ -z "${MTP_MAX:-}" || ("$MTP_MAX" =~ ^[0-9]+$ && "$MTP_MAX" -ge 1 && "$MTP_MAX" -le 63) ]] ||
    tf_fail "MTP_MAX must be a number in 1..63, got '$MTP_MAX'"
  [[ -z "${DENSE:-}" || "$DENSE" =~ ^(q4|fp8|bf16|f32)$ ]] ||
    tf_fail "DENSE must be q4, fp8, bf16 or f32, got '$DENSE'"
  [[ -z "${LM_HEAD:-}" || "$LM_HEAD" =~ ^(dense|q4|fp8)$ ]] ||
    tf_fail "LM_HEAD must be dense, q4 or fp8, got '$LM_HEAD'"
  [[ "$MEMORY_RESERVE_GIB" =~ ^[0-9]+([.][0-9]+)?$ ]] || tf_fail "MEMORY_RESERVE_GIB must be a number, got '$MEMORY_RESERVE_GIB'"
  [[ "$KV_POOL_GIB" =~ ^[0-9]+([.][0-9]+)?$ ]] || tf_fail "KV_POOL_GIB must be a number, got '$KV_POOL_GIB'"
  [[ "$MAX_TOKENS" =~ ^[0-9]+$ ]] || tf_fail "MAX_TOKENS must be a number, got '$MAX_TOKENS'"
  [[ "$SHARED_PREFIX" =~ ^[01]$ ]] || tf_fail "SHARED_PREFIX must be 0 or 1, got '$SHARED_PREFIX'"
  [[ "$VISION" =~ ^[01]$ ]] || tf_fail "VISION must be 0 or 1, got '$VISION'"
  [[ "$VISION_URLS" =~ ^(0|1|lan)$ ]] || tf_fail "VISION_URLS must be 0, 1 or lan, got '$VISION_URLS'"
  [[ -z "${VISION_URLS_CA:-}" || -f "$VISION_URLS_CA" ]] || tf_fail "VISION_URLS_CA=$VISION_URLS_CA is not a file"
  [[ "$KEPT_PROMPTS" =~ ^[0-9]+$ ]] && ((KEPT_PROMPTS <= 4096)) ||
    tf_fail "KEPT_PROMPTS must be a number in 0..4096, got '$KEPT_PROMPTS'"
  [[ -z "${PROMPT_STORE_GIB:-}" || "$PROMPT_STORE_GIB" =~ ^[0-9]*[.]?[0-9]+$ ]] ||
    tf_fail "PROMPT_STORE_GIB must be a number, got '$PROMPT_STORE_GIB'"
  [[ -z "${PROMPT_STORE_BLOCK:-}" || "$PROMPT_STORE_BLOCK" =~ ^[0-9]+$ ]] ||
    tf_fail "PROMPT_STORE_BLOCK must be a whole number of tokens, got '$PROMPT_STORE_BLOCK'"
  [[ "$TP" =~ ^[0-9]+$ ]] && ((TP >= 1)) || tf_fail "TP must be >= 1, got '$TP'"
  [[ "$DEVICE" =~ ^(auto|cpu|cuda)$ ]] || tf_fail "DEVICE must be auto, cpu or cuda, got '$DEVICE'"
  [[ "$FOREGROUND" =~ ^[01]$ ]] || tf_fail "FOREGROUND must be 0 or 1, got '$FOREGROUND'"
  [[ "$PREPARE" =~ ^(auto|0|1)$ ]] || tf_fail "PREPARE must be auto, 0 or 1, got '$PREPARE'"
  [[ "$DRY_RUN" =~ ^[01]$ ]] || tf_fail "DRY_RUN must be 0 or 1, got '$DRY_RUN'"
  [[ -z "${MEMORY_GUARD_MIB:-}" || ("$MEMORY_GUARD_MIB" =~ ^[0-9]+$ && ${#MEMORY_GUARD_MIB} -le 9) ]] ||
    tf_fail "MEMORY_GUARD_MIB must be a number of MiB (0: off), got '$MEMORY_GUARD_MIB'"
  [[ -z "${WATCHDOG_S:-}" || ("$WATCHDOG_S" =~ ^[0-9]+$ && ${#WATCHDOG_S} -le 9) ]] ||
    tf_fail "WATCHDOG_S must be a number of seconds (0: off), got '$WATCHDOG_S'"
  [[ -z "${REASONING_EFFORT:-}" || "$REASONING_EFFORT" =~ ^(none|low|high|max)$ ]] ||
    tf_fail "REASONING_EFFORT must be none, low, high or max, got '$REASONING_EFFORT'"
  [[ -z "${THINKING_BUDGET:-}" || "$THINKING_BUDGET" == -1 || ("$THINKING_BUDGET" =~ ^[0-9]+$ && ${#THINKING_BUDGET} -le 12) ]] ||
    tf_fail "THINKING_BUDGET must be a number of tokens (-1: no limit), got '$THINKING_BUDGET'"
  [[ -z "${STREAM_SMOOTH:-}" || "$STREAM_SMOOTH" =~ ^[01]$ ]] || tf_fail "STREAM_SMOOTH must be 0 or 1, got '$STREAM_SMOOTH'"
  [[ -z "${STREAM_SMOOTH_MS:-}" || ("$STREAM_SMOOTH_MS" =~ ^[0-9]+$ && ${#STREAM_SMOOTH_MS} -le 4 && STREAM_SMOOTH_MS -le 5000) ]] ||
    tf_fail "STREAM_SMOOTH_MS must be 0..5000 milliseconds, got '$STREAM_SMOOTH_MS'"
  [[ -z "${REASONING_MEMORY_MIB:-}" || ("$REASONING_MEMORY_MIB" =~ ^[0-9]+$ && ${#REASONING_MEMORY_MIB} -le 7 && REASONING_MEMORY_MIB -le 1048576) ]] ||
    tf_fail "REASONING_MEMORY_MIB must be 0..1048576 MiB (0: off), got '$REASONING_MEMORY_MIB'"
  [[ -z "${REPLY_WARMUP:-}" || "$REPLY_WARMUP" =~ ^[01]$ ]] || tf_fail "REPLY_WARMUP must be 0 or 1, got '$REPLY_WARMUP'"
  [[ -z "${PROMPT_BUDGET_MIB:-}" || ("$PROMPT_BUDGET_MIB" =~ ^[0-9]+$ && ${#PROMPT_BUDGET_MIB} -le 7 && PROMPT_BUDGET_MIB -le 1048576) ]] ||
    tf_fail "PROMPT_BUDGET_MIB must be 0..1048576 MiB (0: no budget), got '$PROMPT_BUDGET_MIB'"
  [[ "$LOG_KEEP" =~ ^[0-9]+$ ]] && ((${#LOG_KEEP} <= 5 && LOG_KEEP >= 1)) ||
    tf_fail "LOG_KEEP must be a number of logs, at least 1, got '$LOG_KEEP'"
  if [[ -n "${API_KEY_FILE:-}" ]]; then
    [[ -f "$API_KEY_FILE" && -r "$API_KEY_FILE" ]] || tf_fail "API_KEY_FILE=$API_KEY_FILE is not a readable file"
    [[ -n "$(tf_api_key)" ]] || tf_fail "API_KEY_FILE=$API_KEY_FILE lists no key (one key per line, # comments)"
  fi
  if [[ -n "${MODEL_DIR:-}" && ! -f "$MODEL_DIR/config.json" ]]; then
    tf_fail "MODEL_DIR=$MODEL_DIR has no config.json"
  fi
  tf_workers
  local w
  for w in "${TF_WORKERS[@]}"; do
    case "$w" in
      -* | *[[:space:]\'\"\;\`\$\|\&\<\>\(\)\\]*) tf_fail "WORKER: '$w' is not an SSH destination (user@host or host)" ;;
    esac
  done
  if ((${#TF_WORKERS[@]} > 0 && TP != 1 && TP < ${#TF_WORKERS[@]} + 1)); then
    tf_fail "TP=$TP with ${#TF_WORKERS[@]} worker(s): rank 0 stays here, so TP must be at least $((${#TF_WORKERS[@]} + 1)) (or unset)"
  fi
}

# The serve arguments the settings stand for (extra start.sh arguments come after and win).
tf_serve_args() {
  TF_SERVE_ARGS=(--host "$HOST" --port "$PORT" --parallel "$PARALLEL" --context "$CONTEXT" --kv "$KV"
    --memory-reserve-gib "$MEMORY_RESERVE_GIB" --kv-pool-gib "$KV_POOL_GIB" --max-tokens "$MAX_TOKENS"
    --max-waiting "$MAX_QUEUED" --tp "$TP" --device "$DEVICE" --vision "$VISION" --vision-urls "$VISION_URLS")
  # SHARED_PREFIX=0 turns prompt reuse off; KEPT_PROMPTS is how many prompt states it keeps.
  if [[ "$SHARED_PREFIX" == 0 ]]; then TF_SERVE_ARGS+=(--kept-prompts 0); else TF_SERVE_ARGS+=(--kept-prompts "$KEPT_PROMPTS"); fi
  [[ -n "${PROMPT_STORE:-}" ]] && TF_SERVE_ARGS+=(--prompt-store "$PROMPT_STORE")
  [[ -n "${PROMPT_STORE_GIB:-}" ]] && TF_SERVE_ARGS+=(--prompt-store-gib "$PROMPT_STORE_GIB")
  [[ -n "${PROMPT_STORE_BLOCK:-}" ]] && TF_SERVE_ARGS+=(--prompt-store-block "$PROMPT_STORE_BLOCK")
  [[ -n "${MODEL_DIR:-}" ]] && TF_SERVE_ARGS+=(--model "$MODEL_DIR")
  [[ -n "${SERVED_NAME:-}" ]] && TF_SERVE_ARGS+=(--served-name "$SERVED_NAME")
  [[ -n "${DENSE:-}" ]] && TF_SERVE_ARGS+=(--dense "$DENSE")
  [[ -n "${LM_HEAD:-}" ]] && TF_SERVE_ARGS+=(--lm-head "$LM_HEAD")
  [[ -n "${VISION_URLS_CA:-}" ]] && TF_SERVE_ARGS+=(--vision-urls-ca "$VISION_URLS_CA")
  [[ -n "${EXACT_ROWS:-}" ]] && TF_SERVE_ARGS+=(--exact-rows "$EXACT_ROWS")
  [[ -n "${BATCH_INVARIANT:-}" ]] && TF_SERVE_ARGS+=(--batch-invariant "$BATCH_INVARIANT")
  [[ -n "${COPY:-}" ]] && TF_SERVE_ARGS+=(--copy "$COPY")
  [[ -n "${COPY_MAX:-}" ]] && TF_SERVE_ARGS+=(--copy-max "$COPY_MAX")
  [[ -n "${COPY_MATCH:-}" ]] && TF_SERVE_ARGS+=(--copy-match "$COPY_MATCH")
  [[ -n "${LOOP_GUARD:-}" ]] && TF_SERVE_ARGS+=(--loop-guard "$LOOP_GUARD")
  [[ -n "${DRAFTER:-}" ]] && TF_SERVE_ARGS+=(--drafter "$DRAFTER")
  [[ -n "${MTP_MAX:-}" ]] && TF_SERVE_ARGS+=(--mtp-max "$MTP_MAX")
  [[ -n "${MEMORY_GUARD_MIB:-}" ]] && TF_SERVE_ARGS+=(--memory-guard-mib "$MEMORY_GUARD_MIB")
  [[ -n "${WATCHDOG_S:-}" ]] && TF_SERVE_ARGS+=(--watchdog-s "$WATCHDOG_S")
  [[ -n "${REASONING_EFFORT:-}" ]] && TF_SERVE_ARGS+=(--reasoning-effort "$REASONING_EFFORT")
  [[ -n "${THINKING_BUDGET:-}" ]] && TF_SERVE_ARGS+=(--thinking-budget "$THINKING_BUDGET")
  # STREAM_SMOOTH=0 sends streamed tokens as they come; STREAM_SMOOTH_MS is the playout limit.
  if [[ "${STREAM_SMOOTH:-1}" == 0 ]]; then
    TF_SERVE_ARGS+=(--stream-smooth-ms 0)
  elif [[ -n "${STREAM_SMOOTH_MS:-}" ]]; then
    TF_SERVE_ARGS+=(--stream-smooth-ms "$STREAM_SMOOTH_MS")
  fi
  [[ -n "${REASONING_MEMORY_MIB:-}" ]] && TF_SERVE_ARGS+=(--reasoning-memory-mib "$REASONING_MEMORY_MIB")
  [[ -n "${REPLY_WARMUP:-}" ]] && TF_SERVE_ARGS+=(--reply-warmup "$REPLY_WARMUP")
  [[ -n "${PROMPT_BUDGET_MIB:-}" ]] && TF_SERVE_ARGS+=(--prompt-budget-mib "$PROMPT_BUDGET_MIB")
  # CORS_ORIGINS set but empty turns CORS off, so it is passed whenever it is set.
  [[ -n "${CORS_ORIGINS+x}" ]] && TF_SERVE_ARGS+=(--cors-origins "$CORS_ORIGINS")
  # GRAPHS reaches the model as the environment variable TF_GRAPHS (src/model/glm5/step_graphs.h).
  [[ -n "${GRAPHS:-}" ]] && export TF_GRAPHS="$GRAPHS"
  [[ -n "${TF_CACHE_DIR:-}" ]] && TF_SERVE_ARGS+=(--cache-dir "$TF_CACHE_DIR")
  # Ranks on other machines, one per worker (TP defaults to 1 + workers).
  tf_workers
  if ((${#TF_WORKERS[@]} > 0)); then
    local w wm
    for w in "${TF_WORKERS[@]}"; do TF_SERVE_ARGS+=(--worker "$w"); done
    TF_SERVE_ARGS+=(--worker-dir "$WORKER_DIR")
    wm=$(tf_worker_model_dir)
    [[ -n "$wm" ]] && TF_SERVE_ARGS+=(--worker-model "$wm")
    [[ -n "${FABRIC_PEER:-}" ]] && TF_SERVE_ARGS+=(--fabric-peer "$FABRIC_PEER")
  fi
  return 0
}

# The first API key (API_KEY's, else API_KEY_FILE's): what this machine's own requests to the
# server present (start.sh's smoke test, stop.sh). Empty when none is set.
tf_api_key() {
  local k keys=()
  IFS=$', \t' read -r -a keys <<<"${API_KEY:-}"
  for k in "${keys[@]}"; do [[ -n "$k" ]] && { echo "$k"; return 0; }; done
  if [[ -n "${API_KEY_FILE:-}" && -r "$API_KEY_FILE" ]]; then
    sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$API_KEY_FILE" | grep -v -m1 -e '^#' -e '^$' || true
  fi
}

# curl against this machine's server, with the API key when one is set. The key goes in through
# a file descriptor, not the command line, which every user of the machine can read in ps.
tf_curl() {
  local key
  key=$(tf_api_key)
  if [[ -n "$key" ]]; then
    curl -H @<(printf 'Authorization: Bearer %s\n' "$key") "$@"
  else
    curl "$@"
  fi
}

tf_pid_file() { echo "$STATE_DIR/tensorfold.pid"; }
tf_running_pid() {
  local f pid
  f=$(tf_pid_file)
  [[ -f "$f" ]] || return 1
  pid=$(cat "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# The server's logs (tensorfold-YYYYmmdd-HHMMSS.log, one per start): the newest LOG_KEEP are kept,
# every one but CURRENT gzipped (zless reads them), the older ones deleted.
tf_rotate_logs() {
  local current=$1 f n=0
  local -a logs
  mapfile -t logs < <(find "$LOG_DIR" -maxdepth 1 -type f -regextype posix-extended \
    -regex '.*/tensorfold-[0-9]{8}-[0-9]{6}\.log(\.gz)?' -printf '%f\n' | sort -r)
  for f in "${logs[@]}"; do
    n=$((n + 1))
    if ((n > LOG_KEEP)); then
      rm -f -- "$LOG_DIR/$f"
    elif [[ "$LOG_DIR/$f" != "$current" && "$f" == *.log ]]; then
      gzip -9f -- "$LOG_DIR/$f" 2>/dev/null || true
    fi
  done
}
