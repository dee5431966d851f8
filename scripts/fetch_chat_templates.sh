#!/usr/bin/env bash
# Fetches real chat templates for test/serve/chat_templates.py into .cache/chat-templates/:
# the Jinja templates that llama-cpp-python's source package (pinned below) carries from
# llama.cpp (vendor/llama.cpp/models/templates/), each taken from a model's published
# tokenizer_config.json. Not committed: they are other projects' files. SOURCE.txt records
# where they came from. Idempotent; called by scripts/setup.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=0.3.36
DEST="$ROOT/.cache/chat-templates"
if [[ -f "$DEST/SOURCE.txt" ]] && grep -q "llama-cpp-python $VERSION" "$DEST/SOURCE.txt"; then
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "setup: fetching chat templates (llama-cpp-python $VERSION source package)"
"$ROOT/.venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
  --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$work" >/dev/null
archive="$(ls "$work"/llama_cpp_python-*.tar.gz)"
rm -rf "$DEST"
mkdir -p "$DEST"
tar -xzf "$archive" -C "$work" --wildcards '*/vendor/llama.cpp/models/templates/*.jinja'
cp "$work"/llama_cpp_python-*/vendor/llama.cpp/models/templates/*.jinja "$DEST/"
{
  echo "llama-cpp-python $VERSION source package (the Python package index),"
  echo "vendor/llama.cpp/models/templates/: $(ls "$DEST"/*.jinja | wc -l) templates"
} > "$DEST/SOURCE.txt"
