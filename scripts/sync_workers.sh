#!/usr/bin/env bash
# Prepares each worker (WORKER=user@host[,...]) for start.sh: checks the SSH login, the folder
# WORKER_DIR and its free space, then copies the tensorfold binary, the shared libraries it needs
# that the worker lacks (never the GPU driver's, which must be the worker's own) and the checkpoint
# (MODEL_DIR -> WORKER_DIR/models/NAME; nothing when WORKER_MODEL_DIR names the worker's own copy).
# rsync over TF_SSH: only what changed moves. Shows each worker's free memory and what else uses
# its GPU. Run by scripts/prepare.sh.
set -euo pipefail
source "$(dirname "$0")/config.sh"
source "$TF_ROOT/scripts/workers.sh"
tf_validate_settings
tf_workers
((${#TF_WORKERS[@]})) || exit 0
bin="$BUILD_DIR/apps/tensorfold"
[[ -x "$bin" ]] || tf_fail "no $bin to copy to the workers (scripts/prepare.sh builds it)"
command -v rsync >/dev/null || tf_fail "rsync is missing here (scripts/deps.sh --worker installs it)"
rsync_to=(rsync -a --copy-links --protect-args -e "$TF_SSH")

# The link to the workers: the route to FABRIC_PEER, and an RDMA device for NCCL (else TCP sockets).
if [[ -n "${FABRIC_PEER:-}" ]] && command -v ip >/dev/null; then
  for peer in ${FABRIC_PEER//,/ }; do
    route=$(ip route get "$peer" 2>&1) || tf_fail "FABRIC_PEER=$peer: no route from this machine ($route)"
    echo "workers: to $peer: ${route%%$'\n'*}"
  done
fi
if [[ "$DEVICE" != cpu ]] && command -v nvidia-smi >/dev/null && ! ls /sys/class/infiniband/* >/dev/null 2>&1; then
  echo "workers: warning: no RDMA (RoCE) device here (/sys/class/infiniband is empty): NCCL will use TCP sockets"
fi

# Where this machine has each shared library the binary needs (ldd lists them all, transitively).
declare -A lib_path=()
while read -r name path; do lib_path[$name]=$path; done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')

# copy_missing_libs DEST: copies the libraries the worker's dynamic loader does not find (with
# WORKER_DIR/lib on its path) until it finds them all; never the GPU driver's, which must be its own.
copy_missing_libs() {
  local w=$1 round missing name
  local -a files
  for round in 1 2 3 4; do
    missing=$(tf_on_worker "$w" "dir=$(tf_sh_quote "$WORKER_DIR")"'
cd "$dir" && LD_LIBRARY_PATH="$PWD/lib" ldd ./tensorfold | awk "/not found/ {print \$1}"') ||
      tf_fail "worker $w: ldd failed on $WORKER_DIR/tensorfold"
    [[ -z "$missing" ]] && { echo "workers: $w: every library found ($round)"; return 0; }
    files=()
    for name in $missing; do
      case "$name" in
        libcuda.so* | libnvidia-*) tf_fail "worker $w has no NVIDIA driver library $name (install the driver there)" ;;
      esac
      [[ -n "${lib_path[$name]:-}" ]] || tf_fail "worker $w lacks $name, which this machine does not have either"
      files+=("${lib_path[$name]}")
    done
    echo "workers: $w: copying ${#files[@]} libraries it lacks: $missing" | tr '\n' ' '
    echo
    "${rsync_to[@]}" "${files[@]}" "$w:$WORKER_DIR/lib/"
  done
  tf_fail "worker $w still lacks: $missing"
}

worker_model=$(tf_worker_model_dir)
need_kib=0
if [[ -n "${MODEL_DIR:-}" && -z "${WORKER_MODEL_DIR:-}" ]]; then
  need_kib=$(du -sk --apparent-size "$MODEL_DIR" | awk '{print $1}')
fi

for w in "${TF_WORKERS[@]}"; do
  tf_worker_reachable "$w"
  # Folder, rsync, free space (what the checkpoint copy still needs), memory, GPU users.
  report=$(tf_on_worker "$w" "dir=$(tf_sh_quote "$WORKER_DIR"); model=$(tf_sh_quote "$worker_model"); need=$need_kib; given=${WORKER_MODEL_DIR:+1}"'
host=$(hostname)
mkdir -p "$dir/lib" 2>/dev/null && [ -w "$dir" ] || { echo "error: cannot write the folder $dir on $host (WORKER_DIR)"; exit 3; }
command -v rsync >/dev/null || { echo "error: rsync is missing on $host (sudo apt-get install rsync)"; exit 4; }
if [ -n "$given" ]; then
  [ -f "$model/config.json" ] || { echo "error: WORKER_MODEL_DIR=$model has no config.json on $host"; exit 5; }
elif [ "$need" -gt 0 ]; then
  mkdir -p "$model" 2>/dev/null || { echo "error: cannot make $model on $host"; exit 3; }
  have=$(du -sk --apparent-size "$model" 2>/dev/null | awk "{print \$1}"); have=${have:-0}
  free=$(df -Pk "$dir" | awk "NR == 2 {print \$4}")
  if [ $((need - have)) -gt "$free" ]; then
    echo "error: the checkpoint needs $(((need - have) / 1048576 + 1)) GiB more in $dir on $host; $((free / 1048576)) GiB are free"; exit 6
  fi
fi
echo "$host: $(awk "/MemAvailable/ {printf \"%.1f GiB of memory available\", \$2 / 1048576}" /proc/meminfo)"
if command -v nvidia-smi >/dev/null 2>&1; then
  users=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null)
  [ -n "$users" ] && echo "$host: processes on the GPU (stop them to free its memory):" && echo "$users"
fi
exit 0' 2>&1) || tf_fail "worker $w: ${report:-no answer}"
  echo "workers: $report"
  echo "workers: $w: copying tensorfold to $WORKER_DIR"
  "${rsync_to[@]}" "$bin" "$w:$WORKER_DIR/tensorfold"
  copy_missing_libs "$w"
  if [[ -n "${MODEL_DIR:-}" && -z "${WORKER_MODEL_DIR:-}" ]]; then
    echo "workers: $w: checkpoint $MODEL_DIR -> $worker_model"
    progress=(--info=stats1)
    [[ -t 1 ]] && progress=(--info=progress2)
    "${rsync_to[@]}" --partial "${progress[@]}" "$MODEL_DIR/" "$w:$worker_model/"
  fi
done
echo "workers: ${#TF_WORKERS[@]} ready"
