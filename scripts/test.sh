#!/usr/bin/env bash
# Installs what the tests need, builds the CPU configuration and runs every test.
# Ends with CTest's summary line. Environment:
#   BUILD_DIR (build-test), CTEST_ARGS (extra ctest arguments), TF_WERROR (ON)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
# Test-only npm tools (openai client, transformers.js tokenizers), pinned by tests/package-lock.json.
if [[ -f tests/package-lock.json ]]; then
  (cd tests && { [[ -d node_modules && node_modules/.package-lock.json -nt package-lock.json ]] || npm ci --no-audit --no-fund --loglevel=error; })
fi
dir=${BUILD_DIR:-build-test}
TF_CUDA=OFF scripts/build.sh "$dir" -DTF_WERROR="${TF_WERROR:-ON}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cd "$dir"
ctest --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-}
