#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan + libFuzzer) in their own
# build folder and runs the safetensors fuzzer. Exit status 0 = no crash, no
# sanitizer report, no leak within the time given.
#   scripts/fuzz.sh [SECONDS=60]     environment: FUZZ_BUILD_DIR (build-fuzz), FUZZ_JOBS (2)
# The committed seed corpus (tests/fuzz/corpus) is copied, never written to;
# a crashing input is kept in $FUZZ_BUILD_DIR/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
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
cmake --build "$dir" -j "${FUZZ_JOBS:-2}" --target safetensors_fuzz
work=$(mktemp -d "${TMPDIR:-/tmp}/tf_fuzz_corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp tests/fuzz/corpus/* "$work/"
mkdir -p "$dir/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$dir/safetensors_fuzz" "$work" -dict=tests/fuzz/safetensors.dict -max_total_time="$seconds" \
  -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/artifacts/"
