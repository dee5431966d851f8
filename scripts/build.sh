#!/usr/bin/env bash
# Configures and builds llmc into build/ (Release, ninja, ccache, lld). Used by demo.sh and
# test.sh; run it directly to rebuild after a change.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-$(nproc)}"

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLLMC_PYTHON="$ROOT/.venv/bin/python" >/dev/null
fi
ninja -C "$BUILD_DIR" -j "$JOBS" "$@"
