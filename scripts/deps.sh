#!/usr/bin/env bash
# Installs the Debian packages tensorfold needs, only when one is missing
# (idempotent; DEPENDENCIES.md says why each is needed).
#   scripts/deps.sh          build + run dependencies
#   scripts/deps.sh --test   also what the tests need (node/npm, python3-jinja2, clang, promtool, rsync)
#   scripts/deps.sh --worker also what serving with ranks on other machines needs (ssh, rsync)
set -euo pipefail

BUILD_PKGS=(
  build-essential cmake ninja-build ccache pkg-config
  nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev libspdlog-dev libfmt-dev libcli11-dev
  libgloo-dev
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev   # video decoding (src/media)
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev   # image decoding (src/media)
  libcurl4-openssl-dev   # media from https:// URLs when VISION_URLS allows it (src/media/url_fetch)
  zlib1g-dev   # CRC-32 of the prompt store's files (src/engine/prompt_store)
  libssl-dev   # SHA-256 names of the prompt store's blocks (src/engine/prompt_state_files)
  libgtest-dev libgmock-dev   # every configuration configures the test targets
)
# prometheus ships promtool: `promtool check metrics` validates /metrics (server_promtool_metrics).
# rsync: serve_workers copies a worker's folder as scripts/sync_workers.sh does.
# openssl: serve_vision_urls makes a certificate authority and an HTTPS server's certificate.
TEST_PKGS=(libbenchmark-dev clang libclang-rt-14-dev nodejs npm prometheus rsync openssl)
WORKER_PKGS=(openssh-client rsync)

want=("${BUILD_PKGS[@]}")
for arg in "$@"; do
  case "$arg" in
    --test)
      want+=("${TEST_PKGS[@]}")
      # Python's jinja2 is the reference for template tests; Debian's package if python3 lacks it.
      python3 -c 'import jinja2' 2>/dev/null || want+=(python3-jinja2)
      ;;
    --worker) want+=("${WORKER_PKGS[@]}") ;;
    *) echo "deps.sh: unknown argument '$arg' (--test, --worker)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  # npm/node may come from elsewhere (e.g. nvm); accept a working command too.
  if [[ "$p" == nodejs ]] && command -v node >/dev/null; then continue; fi
  if [[ "$p" == npm ]] && command -v npm >/dev/null; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "deps: all Debian packages present"
fi
