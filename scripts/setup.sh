#!/usr/bin/env bash
# Installs every system and Python package that building and testing llmc needs.
# Idempotent and quiet when everything is already present; never asks questions.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# One pinned LLVM/MLIR major version (see docs/building.md for why 19).
LLVM_MAJOR=19

APT_PACKAGES=(
  build-essential cmake ninja-build ccache lld
  "llvm-${LLVM_MAJOR}-dev" "llvm-${LLVM_MAJOR}-tools" "libmlir-${LLVM_MAJOR}-dev" "mlir-${LLVM_MAJOR}-tools"
  libflatbuffers-dev flatbuffers-compiler
  libprotobuf-dev protobuf-compiler libonnx-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev
  libboost-dev  # serve/: Boost.Beast and Asio (header-only)
  libonnx-testdata
  bible-kjv
  python3 python3-venv
  clang-14 libclang-rt-14-dev  # the ASan build (test.sh) and fuzz.sh: clang, its sanitizers and libFuzzer
  qemu-user  # test/isa/emulated_host.py: tests on an emulated AVX2-only CPU
  pkgconf  # test/install: a C program built against the installed SDK through llmc.pc
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python packages for tests and fixtures only, in a project virtual environment.
VENV="$ROOT/.venv"
PY_REQUIREMENTS="$ROOT/scripts/requirements.txt"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "setup: creating $VENV"
  /usr/bin/python3 -m venv "$VENV"
fi
stamp="$VENV/.requirements.stamp"
if [[ ! -f "$stamp" ]] || ! cmp -s "$PY_REQUIREMENTS" "$stamp"; then
  echo "setup: installing Python packages into .venv"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$PY_REQUIREMENTS"
  cp "$PY_REQUIREMENTS" "$stamp"
fi

# Real chat templates for test/serve/chat_templates.py (not committed: other projects' files).
"$ROOT/scripts/fetch_chat_templates.sh"
