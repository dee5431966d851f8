#!/usr/bin/env bash
# Proves the runtime stands alone: in a build configured with -DLLMC_BUILD_COMPILER=OFF,
# neither the runtime library nor `llmc` links MLIR, LLVM or protobuf.
# Usage: check_no_compiler_deps.sh RUNTIME_BUILD_DIR   (exit 77 = skipped: no such build)
set -euo pipefail
build="$1"
llmc="$build/tools/llmc/llmc"
lib="$build/runtime/libllmc_runtime.a"
if [[ ! -x "$llmc" || ! -f "$lib" ]]; then
  echo "skipped: no runtime-only build at $build (scripts/test.sh makes one)"
  exit 77
fi
if grep -q "LLMC_BUILD_COMPILER:BOOL=ON" "$build/CMakeCache.txt"; then
  echo "FAIL: $build was configured with the compiler"
  exit 1
fi
status=0
if ldd "$llmc" | grep -Ei "libMLIR|libLLVM|libprotobuf|libonnx"; then
  echo "FAIL: llmc (runtime-only) links a compiler library"
  status=1
fi
# No symbol of MLIR, LLVM, protobuf or ONNX, defined or undefined, in the runtime archive.
if nm -C "$lib" 2>/dev/null | grep -E " (mlir|llvm|google::protobuf|onnx)::" | head -5 | grep .; then
  echo "FAIL: libllmc_runtime.a references compiler symbols"
  status=1
fi
# The runtime's sources include no compiler headers.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if grep -rEn '#include [<"](mlir|llvm|google/protobuf|onnx)/' "$root/runtime"; then
  echo "FAIL: runtime/ includes compiler headers"
  status=1
fi
[[ $status -eq 0 ]] && echo "ok: the runtime and llmc run link no MLIR, LLVM, protobuf or ONNX"
exit $status
