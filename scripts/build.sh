#!/usr/bin/env bash
# Configures and builds llmc into build/ (Release, ninja, ccache, lld). Used by demo.sh and
# test.sh; run it directly to rebuild after a change.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-$(nproc)}"
# ccache keys on paths relative to the clone, so a clone at another path (CI's) hits what this
# one compiled; hash_dir off for the same reason where objects carry debug info (their
# compilation directory is then the first clone's).
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=true

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLLMC_PYTHON="$ROOT/.venv/bin/python" >/dev/null
fi
ninja -C "$BUILD_DIR" -j "$JOBS" "$@"
