#!/usr/bin/env bash
# Set up llamay in ./.venv on a fresh machine, then run one thing:
#   ./setup.sh serve [ARGS...]   install, then `llamay serve ARGS...` (default model, fetched on first use)
#   ./setup.sh test [ARGS...]    install with test tools, then lint, type-check and run the whole test suite
#   ./setup.sh                   install only
#
# llama-cpp-python ships as source and is compiled here. This hardware advertises AMX, and
# llama.cpp's AMX matmul crashes on multi-token batches, so it is always built with AMX off.
# pip's wheel cache does not key on CMAKE_ARGS, so the wheel is built into a folder keyed by
# version, flags and native/'s patches, and installed from there, never from pip's cache.
set -euo pipefail
cd "$(dirname "$0")"

LLAMA_CPP_VERSION=0.3.36
# The source tarball's sha256: native/'s patches are written against exactly this source.
LLAMA_CPP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
AMX_OFF='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'
CMAKE_FLAGS="-DCMAKE_C_FLAGS='${AMX_OFF}' -DCMAKE_CXX_FLAGS='${AMX_OFF}'"
# native/ holds a series of patches to the vendored llama.cpp, applied in name order by
# native/series.py, strictly (native/README.md: what each changes and why, and how to add one).
# The build key covers every patch's name and text and the tool that applies them.
PATCHES=(native/[0-9][0-9][0-9][0-9]-*.patch)
[ -f "${PATCHES[0]}" ] || { printf 'setup: no NNNN-*.patch files in native/\n' >&2; exit 1; }
BUILD_KEY="${LLAMA_CPP_VERSION}-$( (printf '%s\n' "$CMAKE_FLAGS" "$LLAMA_CPP_SHA256"
  for f in "${PATCHES[@]}" native/series.py; do printf '%s\n' "$f"; cat "$f"; done) | sha256sum | cut -c1-12)"
WHEELS="${LLAMAY_WHEEL_CACHE:-$HOME/.cache/llamay/wheels}/llama-cpp-python-${BUILD_KEY}"
PY="${PYTHON:-python3}"

say() { printf 'setup: %s\n' "$*" >&2; }

mode="${1:-}"
[ $# -gt 0 ] && shift

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python

if [ "$(cat .venv/.llama-cpp-build 2>/dev/null)" != "$BUILD_KEY" ] || ! "$VPY" -c 'import llama_cpp' 2>/dev/null; then
  if ! ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    say "building llama-cpp-python ${LLAMA_CPP_VERSION} with AMX off and the ${#PATCHES[@]} patches in native/ (takes ~6 minutes on 2 cores)"
    rm -rf "$WHEELS.tmp" && mkdir -p "$WHEELS.tmp/src"
    "$VPY" -m pip download -q --no-deps --no-binary :all: --no-cache-dir \
      "llama-cpp-python==${LLAMA_CPP_VERSION}" -d "$WHEELS.tmp/src"
    SDIST="$WHEELS.tmp/src/llama_cpp_python-${LLAMA_CPP_VERSION}.tar.gz"
    if ! "$VPY" native/series.py verify "$SDIST" "$LLAMA_CPP_SHA256"; then
      say "the downloaded source is not the one pinned in setup.sh (above); nothing was built"
      rm -rf "$WHEELS.tmp"
      exit 1
    fi
    tar xzf "$SDIST" -C "$WHEELS.tmp/src"
    if ! "$VPY" native/series.py apply "$WHEELS.tmp/src/llama_cpp_python-${LLAMA_CPP_VERSION}" "${PATCHES[@]}"; then
      say "the patch series does not apply exactly (above); nothing was built"
      rm -rf "$WHEELS.tmp"
      exit 1
    fi
    CMAKE_ARGS="$CMAKE_FLAGS" "$VPY" -m pip wheel -q --no-deps --no-cache-dir \
      "$WHEELS.tmp/src/llama_cpp_python-${LLAMA_CPP_VERSION}" -w "$WHEELS.tmp"
    rm -rf "$WHEELS.tmp/src"
    mv "$WHEELS.tmp" "$WHEELS"
  fi
  say "installing llama-cpp-python from $WHEELS"
  "$VPY" -m pip install -q --force-reinstall --no-cache-dir "$WHEELS"/llama_cpp_python-*.whl
  printf '%s' "$BUILD_KEY" > .venv/.llama-cpp-build
fi

# The test suite's model families (tests/model/test_families*.py) read llama.cpp's real chat
# templates and tokenizer vocabularies from the same source package. A copy sits next to the
# wheel cache, so a cached wheel needs no rebuild: only the source is fetched again (seconds).
MODELS="$(dirname "$WHEELS")/llama.cpp-${LLAMA_CPP_VERSION}-models"
if [ ! -f "$MODELS/.complete" ]; then
  say "keeping llama.cpp's chat templates and vocabularies in $MODELS"
  rm -rf "$MODELS.tmp" && mkdir -p "$MODELS.tmp"
  "$VPY" -m pip download -q --no-deps --no-binary :all: --no-cache-dir \
    "llama-cpp-python==${LLAMA_CPP_VERSION}" -d "$MODELS.tmp"
  tar xzf "$MODELS.tmp/llama_cpp_python-${LLAMA_CPP_VERSION}.tar.gz" -C "$MODELS.tmp" --wildcards \
    "llama_cpp_python-${LLAMA_CPP_VERSION}/vendor/llama.cpp/models/templates/*.jinja" \
    "llama_cpp_python-${LLAMA_CPP_VERSION}/vendor/llama.cpp/models/ggml-vocab-*.gguf"
  mv "$MODELS.tmp/llama_cpp_python-${LLAMA_CPP_VERSION}/vendor/llama.cpp/models" "$MODELS.tmp/models"
  rm -rf "$MODELS.tmp/llama_cpp_python-${LLAMA_CPP_VERSION}" "$MODELS.tmp"/*.tar.gz
  touch "$MODELS.tmp/models/.complete"
  rm -rf "$MODELS" && mv "$MODELS.tmp/models" "$MODELS" && rm -rf "$MODELS.tmp"
fi

if [ "$mode" = test ] && [ "$(id -u)" = 0 ] && ! command -v chromium >/dev/null 2>&1 \
    && command -v apt-get >/dev/null 2>&1; then
  # The browser tests (tests/web) drive Debian's Chromium; without it they are skipped.
  say "installing chromium for the browser tests"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1; then
    say "chromium could not be installed: the browser tests will be skipped"
  fi
fi

if [ "$mode" = test ]; then
  # The Node client suite (tests/slow/test_node_clients.py) runs the official Node SDKs, pinned in
  # tests/node/package-lock.json. Without node and npm it fails rather than skips, so they come
  # from apt where setup can install them; elsewhere this stops with the reason.
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing node and npm for the Node client tests"
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; } >/dev/null 2>&1 \
        || { say "nodejs and npm could not be installed with apt: install Node.js 20 or newer and npm"; exit 1; }
    else
      say "the Node client tests need node (20 or newer) and npm: install them, then run ./setup.sh test again"
      exit 1
    fi
  fi
  if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
    say "node $(node --version) is too old for the Node client tests: install Node.js 20 or newer"
    exit 1
  fi
  # npm ci wipes node_modules and reinstalls; skip it while the installed tree matches the lock file.
  if ! cmp -s tests/node/package-lock.json tests/node/node_modules/.llamay-lock 2>/dev/null; then
    say "installing the Node client packages (tests/node)"
    npm ci --prefix tests/node --no-audit --no-fund --loglevel=error >/dev/null
    cp tests/node/package-lock.json tests/node/node_modules/.llamay-lock
  fi
  "$VPY" -m pip install -q -e '.[test,fleet]'
  # instructor (tests/slow/test_clients_instructor.py) pins jiter<0.15, which current openai
  # clients outgrew; it runs with the newer one, so it comes without its pins (see pyproject).
  "$VPY" -m pip install -q --no-deps 'instructor>=1.17'
else
  "$VPY" -m pip install -q -e .
fi

case "$mode" in
  serve) exec .venv/bin/llamay serve "$@" ;;
  test)
    say "ruff"; .venv/bin/ruff check llamay tests bench
    say "mypy"; .venv/bin/mypy
    exec "$VPY" -m pytest "$@" ;;
  "") say "installed; run .venv/bin/llamay" ;;
  *) say "unknown mode '$mode' (use: serve, test)"; exit 2 ;;
esac
