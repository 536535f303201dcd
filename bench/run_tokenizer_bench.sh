#!/usr/bin/env bash
# Tokenizer encode throughput, ours beside transformers.js, on one core each, back to back:
#   bench/run_tokenizer_bench.sh [BUILD_DIR=build] [MB=10] [REPEAT=1]
# Writes the deterministic ~MB-megabyte corpus once (tokenizer_encode_bench.js --make-corpus),
# then for qwen3 and llama3 runs build/bench/tokenizer_encode_bench and
# bench/tokenizer_encode_bench.js on the same file, pinned to one CPU with taskset when available,
# and prints the ratio (issue 4 target: ours >= 3x). Needs `npm ci` in tests/ and the bench target
# built (cmake --build BUILD_DIR --target tokenizer_encode_bench). Exits 1 when the token counts of
# the two sides differ (they must do the same work).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mb=${2:-10}
repeat=${3:-1}
bin="$build/bench/tokenizer_encode_bench"
[[ -x "$bin" ]] || { echo "run_tokenizer_bench: $bin missing: cmake --build $build --target tokenizer_encode_bench" >&2; exit 1; }
[[ -d tests/node_modules/@lenml/tokenizers ]] || { echo "run_tokenizer_bench: run 'npm ci' in tests/ first" >&2; exit 1; }
corpus="$build/bench/tokenizer_bench_corpus_${mb}mb.json"
[[ -f "$corpus" ]] || node bench/tokenizer_encode_bench.js --make-corpus "$corpus" "$mb"
pin=()
command -v taskset >/dev/null && pin=(taskset -c "${BENCH_CPU:-0}")
status=0
for name in qwen3 llama3; do
  dir=tests/node_modules/@lenml/tokenizer-$name/models
  ours=$("${pin[@]}" "$bin" "$dir" "$corpus" "$name" "$repeat")
  ref=$("${pin[@]}" node bench/tokenizer_encode_bench.js "$name" "$corpus" "$repeat")
  echo "$ours"
  echo "$ref"
  ours_mbs=$(sed -E 's/.* ([0-9.]+) MB\/s$/\1/' <<<"$ours")
  ref_mbs=$(sed -E 's/.* ([0-9.]+) MB\/s$/\1/' <<<"$ref")
  ours_tok=$(sed -E 's/.* ([0-9]+) tokens.*/\1/' <<<"$ours")
  ref_tok=$(sed -E 's/.* ([0-9]+) tokens.*/\1/' <<<"$ref")
  if [[ "$ours_tok" != "$ref_tok" ]]; then
    echo "  $name: token counts differ ($ours_tok vs $ref_tok)" >&2
    status=1
  fi
  awk -v a="$ours_mbs" -v b="$ref_mbs" -v n="$name" 'BEGIN { printf "  %s: ours / transformers.js = %.2fx (target >= 3x)\n", n, a / b }'
done
exit $status
