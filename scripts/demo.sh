#!/usr/bin/env bash
# The main job on the bundled example model: set up, build, compile a small Llama-style
# decoder (random weights, exported by torch.onnx) into an engine, inspect it, run it on a
# bundled prompt, check the logits against the exporter's own, and print the time taken.
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
echo "== llmc compile (ONNX -> engine) =="
"$LLMC" compile "$MODEL/model.onnx" -o "$WORK/demo.engine" --dim batch=1:4 --dim seq=1:256

echo
echo "== llmc inspect =="
"$LLMC" inspect "$WORK/demo.engine"

echo
echo "== llmc run (prompt of 16 tokens, 10 runs) =="
"$LLMC" run "$WORK/demo.engine" --input "input_ids=$MODEL/input_ids.npy" --output-dir "$WORK/out" --repeat 10

echo
echo "== llmc generate (greedy, 32 new tokens after the prompt; full recomputation) =="
PROMPT_IDS=$("$ROOT/.venv/bin/python" -c "import numpy as np, sys; print(','.join(map(str, np.load(sys.argv[1])[0])))" "$MODEL/input_ids.npy")
"$LLMC" generate "$WORK/demo.engine" --prompt-ids "$PROMPT_IDS" --max-new-tokens 32 --print-ids

echo
echo "== check against the exporter's outputs (torch) =="
"$ROOT/.venv/bin/python" - "$WORK/out/logits.npy" "$MODEL/b1_s16/logits.npy" "$MODEL/input_ids.npy" "$MODEL/b1_s16/input_ids.npy" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
prompt, reference_prompt = np.load(sys.argv[3]), np.load(sys.argv[4])
if not np.array_equal(prompt, reference_prompt):
    print("the demo prompt differs from the reference input set; skipping the comparison")
    sys.exit(0)
err = np.abs(got - want).max()
print(f"logits {got.shape}: max abs difference from torch {err:.2e}")
print("next-token argmax per position:", got[0].argmax(-1).tolist())
sys.exit(0 if np.allclose(got, want, rtol=1e-4, atol=1e-5) else 1)
PY
