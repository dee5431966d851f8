#!/usr/bin/env python3
"""Writes llama_dims_past/: llama_tiny_past's cache export with its dimension names replaced by
the independent names torch.onnx users give in their own dynamic_axes (`batch`, `seq`,
`past_seq`, `total_seq`), so that no name says that the attention mask's length is the past's
plus the new tokens'. ONNX Runtime runs it (any sizes that agree); llmc must infer the relation
from the graph (the mask is added to scores over the concatenated keys) instead of refusing it.

The graph, weights and reference sets are llama_tiny_past's: only the names of the graph's
input and output dimensions change, and the manifest points at llama_tiny_past's .npy files.
Checked here: ONNX Runtime on the renamed model gives llama_tiny_past's stored outputs.

Run with the project's .venv (onnx, onnxruntime, numpy):
    .venv/bin/python test/models/make_dims_past.py
Deterministic: rewriting gives byte-identical files.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort

MODELS_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE = "llama_tiny_past"
OUT = "llama_dims_past"
RENAMED = {
    "batch_size": "batch",
    "sequence_length": "seq",
    "past_sequence_length": "past_seq",
    "past_sequence_length + 1": "total_seq",
}


def main() -> None:
    source_dir = os.path.join(MODELS_DIR, SOURCE)
    out_dir = os.path.join(MODELS_DIR, OUT)
    os.makedirs(out_dir, exist_ok=True)
    model = onnx.load(os.path.join(source_dir, "model.onnx"))
    seen = set()
    for value in list(model.graph.input) + list(model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                if dim.dim_param not in RENAMED:
                    raise SystemExit(f"{value.name}: unexpected dimension name '{dim.dim_param}'")
                seen.add(dim.dim_param)
                dim.dim_param = RENAMED[dim.dim_param]
    if seen != set(RENAMED):
        raise SystemExit(f"dimension names {sorted(seen)}, expected {sorted(RENAMED)}")
    onnx.checker.check_model(model, full_check=True)
    model_path = os.path.join(out_dir, "model.onnx")
    onnx.save(model, model_path)

    with open(os.path.join(source_dir, "manifest.json")) as f:
        manifest = json.load(f)
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    rtol, atol = manifest["tolerance"]["rtol"], manifest["tolerance"]["atol"]
    for input_set in manifest["input_sets"]:
        for group in ("inputs", "outputs"):
            input_set[group] = {k: f"../{SOURCE}/{v}" for k, v in input_set[group].items()}
        input_set["full_input_ids"] = f"../{SOURCE}/{input_set['full_input_ids']}"
        feeds = {k: np.load(os.path.join(out_dir, v)) for k, v in input_set["inputs"].items()}
        names = [o.name for o in session.get_outputs()]
        for name, got in zip(names, session.run(names, feeds)):
            want = np.load(os.path.join(out_dir, input_set["outputs"][name]))
            if not np.allclose(got, want, rtol=rtol, atol=atol):
                raise SystemExit(f"{input_set['name']}/{name}: ONNX Runtime differs from {SOURCE}'s")
    manifest["description"] = (
        f"{SOURCE}'s cache export with independent dimension names (batch, seq, past_seq, "
        "total_seq), as torch.onnx users name them in dynamic_axes: nothing says total_seq = "
        "past_seq + seq, which the graph forces (the mask is added to scores over the "
        f"concatenated keys). Same graph, weights and sets as {SOURCE} (make_dims_past.py).")
    manifest["model_bytes"] = os.path.getsize(model_path)
    manifest["derived_from"] = SOURCE
    manifest["as_graph_flags"] = ["--dim", "past_seq=0:-1"]
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"wrote {OUT}/model.onnx and manifest.json (ONNX Runtime equals {SOURCE}'s outputs)")


if __name__ == "__main__":
    main()
