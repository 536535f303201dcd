#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan + libFuzzer) in their own
# build folder and runs them side by side, one process each, for the same time.
# Exit status 0 = no crash, no sanitizer report, no leak, no timeout in any of them.
#   scripts/fuzz.sh [SECONDS=60] [TARGET...]   targets: safetensors jinja grammar media (default: all)
#   environment: FUZZ_BUILD_DIR (build-fuzz), FUZZ_JOBS (2)
# Seed corpora are copied, never written to: tests/fuzz/corpus for safetensors,
# tests/data/chat-templates/*.jinja for jinja, tests/fuzz/grammar_corpus for grammar; for media (whose first
# input byte picks the mode: 0 data: URL, 1 image, 2 video) tests/data/model/tiny-vision/images/* prefixed with
# the byte 1, tests/data/media/*.mp4 prefixed with 2, a few tiny WebP/GIF/data: URL seeds written here, and
# tests/fuzz/media_corpus/* (inputs that once crashed, mode byte included) as they are. A crashing input is kept in
# $FUZZ_BUILD_DIR/artifacts/<target>-crash-*; each fuzzer's log in $FUZZ_BUILD_DIR/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(safetensors jinja grammar media)
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
    safetensors|jinja|grammar|media) build_targets+=("${t}_fuzz") ;;
    *) echo "fuzz: unknown target '$t' (safetensors, jinja, grammar, media)" >&2; exit 2 ;;
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
    media)
      # The mode byte first (\001 image, \002 video, \000 data: URL), then the real file.
      for f in tests/data/model/tiny-vision/images/*; do
        { printf '\001'; cat "$f"; } >"$work/$t/image-$(basename "$f")"
      done
      for f in tests/data/media/*.mp4; do
        { printf '\002'; cat "$f"; } >"$work/$t/video-$(basename "$f")"
      done
      # Formats the fixtures lack, made once with libwebp/giflib (6x4 lossless WebP, 6x4 lossy WebP with
      # alpha (VP8X + ALPH), 6x4 interlaced GIF with a transparent index and an offset frame).
      tiny_webp_lossless=UklGRjYAAABXRUJQVlA4TCkAAAAvBcAAAJmM6H9sIgre/4CaAEiY/r3IxAtuI8y/QCBJZn+jWWICFFXhBwA=
      tiny_webp_alpha=UklGRoAAAABXRUJQVlA4WAoAAAAQAAAABQAAAwAAQUxQSBkAAAABmYzof0BR2zZQ38VU/sSuDULEBEwAkssDAFZQOCBAAAAAsAEAnQEqBgAEAALATCWwAnQBDvim0ADMiKLBMls13Uv5jxR8M5s4TNzfmU77/b7A5n+sV57/ZyZZv+Pgp2KAAA==
      tiny_gif=R0lGODlhBgAEAJEAAAAAAP8AAAD/AAAA/yH5BAEAAAIALAEAAQAEAAMAQAIFRDQ3gFYAOw==
      { printf '\001'; base64 -d <<<"$tiny_webp_lossless"; } >"$work/$t/image-lossless.webp"
      { printf '\001'; base64 -d <<<"$tiny_webp_alpha"; } >"$work/$t/image-alpha.webp"
      { printf '\001'; base64 -d <<<"$tiny_gif"; } >"$work/$t/image-tiny.gif"
      { printf '\000'; printf 'data:image/gif;base64,%s' "$tiny_gif"; } >"$work/$t/url-gif-base64"
      { printf '\000'; printf 'data:image/webp;base64,%s' "$(tr '+/' '-_' <<<"$tiny_webp_lossless" | tr -d '=')"; } \
        >"$work/$t/url-webp-urlsafe"
      { printf '\000'; printf 'data:text/plain;charset=utf-8,caf%%C3%%A9%%20ok'; } >"$work/$t/url-percent"
      if compgen -G 'tests/fuzz/media_corpus/*' >/dev/null; then cp tests/fuzz/media_corpus/* "$work/$t/"; fi
      # The fixture images are up to ~330 KB (cut here, which still tries the truncated-file paths).
      args=(-dict=tests/fuzz/media.dict -max_len=65536) ;;
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
