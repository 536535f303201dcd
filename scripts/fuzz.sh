#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan + libFuzzer) in their own
# build folder and runs them side by side, one process each, for the same time.
# Exit status 0 = no crash, no sanitizer report, no leak, no timeout in any of them.
#   scripts/fuzz.sh [SECONDS=60] [TARGET...]   targets: safetensors jinja grammar (default: all)
#   environment: FUZZ_BUILD_DIR (build-fuzz), FUZZ_JOBS (2)
# Seed corpora are copied, never written to: tests/fuzz/corpus for safetensors,
# tests/data/chat-templates/*.jinja for jinja, tests/fuzz/grammar_corpus for grammar. A crashing input is kept in
# $FUZZ_BUILD_DIR/artifacts/<target>-crash-*; each fuzzer's log in $FUZZ_BUILD_DIR/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(safetensors jinja grammar)
dir=${FUZZ_BUILD_DIR:-build-fuzz}
CXX_BIN=$(command -v clang++ || command -v clang++-14 || true)
CC_BIN=$(command -v clang || command -v clang-14 || true)
if [[ -z "$CXX_BIN" || -z "$CC_BIN" ]]; then
  echo "fuzz: clang not found (scripts/deps.sh --test installs it)" >&2
  exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f "$dir/CMakeCache.txt" ]]; then
  # tests/fuzz is its own small clang project: only the sources under test.
  cmake -S tests/fuzz -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" "${launcher[@]}"
fi
build_targets=()
for t in "${targets[@]}"; do
  case "$t" in
    safetensors|jinja|grammar) build_targets+=("${t}_fuzz") ;;
    *) echo "fuzz: unknown target '$t' (safetensors, jinja, grammar)" >&2; exit 2 ;;
  esac
done
cmake --build "$dir" -j "${FUZZ_JOBS:-2}" --target "${build_targets[@]}"
work=$(mktemp -d "${TMPDIR:-/tmp}/tf_fuzz_corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$dir/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
pids=()
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  case "$t" in
    safetensors)
      cp tests/fuzz/corpus/* "$work/$t/"
      args=(-dict=tests/fuzz/safetensors.dict -max_len=65536) ;;
    jinja)
      cp tests/data/chat-templates/*.jinja "$work/$t/"
      # Real templates are up to ~20 KB; -timeout catches a template that renders forever.
      args=(-dict=tests/fuzz/jinja.dict -max_len=24576) ;;
    grammar)
      cp tests/fuzz/grammar_corpus/* "$work/$t/"
      args=(-max_len=4096) ;;
  esac
  "$dir/${t}_fuzz" "$work/$t" "${args[@]}" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" >"$dir/$t.log" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  if wait "${pids[$i]}"; then
    echo "fuzz $t: ok ($(grep -E '^stat::number_of_executed_units' "$dir/$t.log" | tail -1))"
  else
    status=1
    echo "fuzz $t: FAILED; last lines of $dir/$t.log:" >&2
    tail -n 60 "$dir/$t.log" >&2
  fi
done
exit $status
