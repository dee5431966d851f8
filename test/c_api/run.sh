#!/bin/sh
# Compiles the demo decoder with its tokenizer, asks `llmc generate` for 12 greedy ids after a
# prompt, and runs the C API test (c_api_test.c) on the same engine and prompt.
#   run.sh LLMC C_API_TEST DEMO_DIR WORK_DIR
set -eu
llmc=$1 test_binary=$2 demo=$3 work=$4
mkdir -p "$work"
engine="$work/c_api.engine"
"$llmc" compile "$demo/model.onnx" -o "$engine" --tokenizer "$demo/tokenizer.json" >/dev/null
prompt=5,6,7,8
expected=$("$llmc" generate "$engine" --prompt-ids "$prompt" --max-new-tokens 12 --print-ids 2>/dev/null |
  tr -s ' ' ',' | tr -d '\n')
[ -n "$expected" ] || { echo "FAIL: llmc generate printed no ids"; exit 1; }
echo "llmc generate: $expected"
exec "$test_binary" "$engine" "$demo/tokenizer.json" "$prompt" "$expected"
