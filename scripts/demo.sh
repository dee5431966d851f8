#!/usr/bin/env bash
# The main job on the bundled example model: set up, build, compile the demo decoder (a small
# Llama-style model trained on the King James Bible, exported by torch.onnx; see
# test/models/README.md) with its tokenizer into an engine, inspect it, check its logits
# against the exporter's own, generate a paragraph from a prompt over the paged KV cache, and
# measure decode speed against full recomputation.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

./scripts/setup.sh
./scripts/build.sh llmc

LLMC="$ROOT/build/tools/llmc/llmc"
MODEL="$ROOT/test/models/demo"
WORK="$ROOT/build/demo"
mkdir -p "$WORK"

echo
echo "== llmc compile (ONNX -> engine, with the model's BPE tokenizer) =="
"$LLMC" compile "$MODEL/model.onnx" -o "$WORK/demo.engine" --tokenizer "$MODEL/tokenizer.json" \
  --max-context 256 --eos-id 0

echo
echo "== llmc inspect =="
"$LLMC" inspect "$WORK/demo.engine"

echo
echo "== llmc run (a 16-token prompt, 10 runs) and a check against the exporter's logits =="
"$LLMC" run "$WORK/demo.engine" --input "input_ids=$MODEL/input_ids.npy" --output-dir "$WORK/out" --repeat 10
"$ROOT/.venv/bin/python" - "$WORK/out/logits.npy" "$MODEL/b1_s16/logits.npy" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
err = np.abs(got - want).max()
print(f"logits {got.shape}: max abs difference from torch {err:.2e}")
sys.exit(0 if np.allclose(got, want, rtol=1e-4, atol=1e-5) else 1)
PY

echo
echo "== llmc generate (greedy, over the paged KV cache) =="
"$LLMC" generate "$WORK/demo.engine" --prompt "And God said unto Moses," --max-new-tokens 80
echo
"$LLMC" generate "$WORK/demo.engine" --prompt "The LORD is my shepherd;" --max-new-tokens 60 \
  --temperature 0.8 --top-p 0.9 --seed 7

echo
echo "== llmc bench (a 224-token prompt + 32 new tokens: KV cache vs full recomputation; 8 requests batched) =="
"$LLMC" bench "$WORK/demo.engine" --context 224 --new-tokens 32 --repeat 3 --batch 8
