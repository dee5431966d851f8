#!/usr/bin/env bash
# Two builds of llmc (scripts/test.sh: gcc's Release tree and clang's ASan tree) must write the
# same engine bytes for the same model and options: reproducible engines whichever compiler
# built the tool. Usage: same_engine_across_builds.sh LLMC_A LLMC_B SOURCE_DIR WORK_DIR
set -euo pipefail
a=$1 b=$2 source=$3 work=$4
mkdir -p "$work"
status=0
check() {
  local name=$1 model=$2
  shift 2
  local tool side
  for side in a b; do
    tool=${!side}
    if ! "$tool" compile "$source/test/models/$model/model.onnx" "$@" -o "$work/$name.$side.engine" \
      >"$work/$name.$side.log" 2>&1; then
      echo "FAILED: $tool compile $model $*:"
      cat "$work/$name.$side.log"
      exit 1
    fi
  done
  if cmp -s "$work/$name.a.engine" "$work/$name.b.engine"; then
    echo "same engine: $model $*"
  else
    echo "DIFFERENT engines: $model $* ($(cmp "$work/$name.a.engine" "$work/$name.b.engine" | head -n 1))"
    status=1
  fi
}
# A decoder over the KV cache, a quantized one with its weights stripped (refit recipes), an
# encoder with int8 weights.
check gpt2 gpt2_tiny_past
check demo_int4 demo --quantize int4 --strip-weights
check bert_int8 bert_tiny --quantize int8
exit $status
