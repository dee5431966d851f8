"""Shared steps of generate.py: export one torch model to ONNX, check it, and write references.

Every model directory ends up holding model.onnx, one sub-folder of .npy files per input set
(the inputs and torch's own eager outputs for them) and manifest.json describing it all.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import torch

# The tolerance every e2e comparison uses; fp32 end to end, so tight.
RTOL = 1e-4
ATOL = 1e-5


@dataclass
class InputSet:
    """One set of inputs for a model; its name (e.g. "b2_s13") names its folder."""

    name: str
    inputs: dict[str, np.ndarray]


def _export_to_proto(
    module: torch.nn.Module,
    example: InputSet,
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int,
) -> onnx.ModelProto:
    buffer = io.BytesIO()
    args = tuple(torch.from_numpy(value) for value in example.inputs.values())
    torch.onnx.export(
        module,
        args,
        buffer,
        input_names=list(example.inputs),
        output_names=output_names,
        dynamic_axes=dynamic_axes,
        opset_version=opset,
        do_constant_folding=True,
        dynamo=False,
    )
    return onnx.load_from_string(buffer.getvalue())


def _check_model(model: onnx.ModelProto, opset: int, max_bytes: int) -> None:
    onnx.checker.check_model(model, full_check=True)
    foreign = sorted({n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    if foreign:
        raise RuntimeError(f"model uses non-default op domains {foreign}")
    imported = {o.domain: o.version for o in model.opset_import}
    if imported.get("", imported.get("ai.onnx")) != opset:
        raise RuntimeError(f"model imports opset {imported}, expected {opset}")
    size = model.ByteSize()
    if size > max_bytes:
        raise RuntimeError(f"model is {size} bytes, over the {max_bytes}-byte limit")


def _torch_outputs(module: torch.nn.Module, inputs: InputSet) -> list[np.ndarray]:
    with torch.no_grad():
        results = module(*(torch.from_numpy(value) for value in inputs.inputs.values()))
    if isinstance(results, torch.Tensor):
        results = (results,)
    return [r.detach().numpy().copy() for r in results]


def _ort_session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def write_input_set(out_dir: str, set_name: str, inputs: dict[str, np.ndarray],
                    references: dict[str, np.ndarray], ort_outputs: dict[str, np.ndarray]) -> dict:
    """Saves one input set (its inputs and the torch references, in the references' order) under
    out_dir/set_name, checks ONNX Runtime's outputs against the references within the e2e
    tolerance, and returns the set's manifest entry."""
    os.makedirs(os.path.join(out_dir, set_name), exist_ok=True)
    input_files = {}
    for name, value in inputs.items():
        input_files[name] = f"{set_name}/{name}.npy"
        np.save(os.path.join(out_dir, input_files[name]), value)
    output_files, ort_diffs = {}, {}
    for name, reference in references.items():
        value = ort_outputs[name]
        output_files[name] = f"{set_name}/{name}.npy"
        np.save(os.path.join(out_dir, output_files[name]), reference)
        if value.shape != reference.shape:
            raise RuntimeError(f"{set_name}/{name}: ORT shape {value.shape}, torch {reference.shape}")
        ort_diffs[name] = float(np.max(np.abs(value.astype(np.float64) - reference)))
        if not np.allclose(value, reference, rtol=RTOL, atol=ATOL):
            raise RuntimeError(f"{set_name}/{name}: ORT differs from torch by {ort_diffs[name]}")
    return {"name": set_name, "inputs": input_files, "outputs": output_files, "ort_max_abs_diff": ort_diffs}


def export_model(
    out_dir: str,
    module: torch.nn.Module,
    input_sets: list[InputSet],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int,
    description: str,
    max_bytes: int = 1 << 20,
    compile_flags: list = None,
    *,
    expect_llm: bool,
    expect_refusal: str | None = None,
) -> dict:
    """Exports `module` (traced on the first input set) and writes everything `out_dir` holds.

    Returns the manifest it wrote. Raises if the model fails onnx.checker, uses another op
    domain, is too big, or if ONNX Runtime disagrees with torch beyond the e2e tolerance on
    any input set (which catches sizes that tracing froze into the graph).
    """
    module.eval()
    os.makedirs(out_dir, exist_ok=True)
    model = _export_to_proto(module, input_sets[0], output_names, dynamic_axes, opset)
    _check_model(model, opset, max_bytes)
    model_path = os.path.join(out_dir, "model.onnx")
    onnx.save_model(model, model_path)
    session = _ort_session(model_path)

    manifest_sets = []
    for input_set in input_sets:
        expected = dict(zip(output_names, _torch_outputs(module, input_set)))
        got = dict(zip(output_names, session.run(output_names, input_set.inputs)))
        manifest_sets.append(write_input_set(out_dir, input_set.name, input_set.inputs, expected, got))

    manifest = {
        "description": description,
        "model": "model.onnx",
        "opset": opset,
        "model_bytes": os.path.getsize(model_path),
        "exporter": f"torch {torch.__version__} torch.onnx.export(dynamo=False)",
        "tolerance": {"rtol": RTOL, "atol": ATOL},
        # Whether llmc recognizes the model as a decoder language model (run_models.py and
        # run_generation.py fail when recognition differs from this).
        "expect_llm": expect_llm,
        "input_sets": manifest_sets,
    }
    if expect_refusal:
        # What llmc's warning must say when it refuses to recognize the model (run_models.py).
        manifest["expect_refusal"] = expect_refusal
    if compile_flags:
        # Flags every compile of this model takes (e.g. a dimension's true bound).
        manifest["compile_flags"] = compile_flags
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return manifest
