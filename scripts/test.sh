#!/usr/bin/env bash
# Sets up, builds and runs every test: unit, lit, ONNX conformance, end-to-end models, CLI,
# fuzz replays, and the runtime alone under ASan/UBSan (built without MLIR/LLVM/protobuf).
# The last lines are ctest's summary with the number of tests run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

./scripts/setup.sh

start=$(date +%s)
echo "== build (Release) =="
./scripts/build.sh

echo "== build the runtime alone with ASan/UBSan (no compiler) =="
RUNTIME_BUILD="$ROOT/build/runtime-asan"
if [[ ! -f "$RUNTIME_BUILD/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$RUNTIME_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLLMC_BUILD_COMPILER=OFF -DLLMC_SANITIZE=address,undefined >/dev/null
fi
ninja -C "$RUNTIME_BUILD" -j "$(nproc)"
echo "builds took $(( $(date +%s) - start )) s"

echo "== tests =="
cd build
ctest -j "$(nproc)" --output-on-failure --timeout 1800
