#!/usr/bin/env python3
"""Writes test/models/genai_llama_tiny: llama_tiny's torch model exported by onnxruntime-genai's
model builder, the tool that writes ONNX Runtime's contrib operators for decoders
(com.microsoft GroupQueryAttention with packed QKV and rotary embedding from cos/sin caches,
SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization), with cache inputs and outputs.

The builder ships in the onnxruntime-genai wheel, whose runtime wants a newer ONNX Runtime than
the generation environment pins, so it is not installed: download the wheel and point
LLMC_GENAI_DIR at its unpacked contents (only the Python builder is used):

    .venv-gen/bin/pip download --no-deps -d /tmp/genai onnxruntime-genai==0.8.3
    unzip -q -d /tmp/genai/pkg /tmp/genai/onnxruntime_genai-0.8.3-*.whl
    LLMC_GENAI_DIR=/tmp/genai/pkg .venv-gen/bin/python test/models/make_genai.py

References: torch's outputs for each input set (the same sets as the *_past models: a prefill
over an empty past, a one-token decode over a 9-token past, a 4-token chunk over a 5-token
past), cross-checked with ONNX Runtime 1.22 running the contrib operators. generation.json is
llama_tiny_past's (same torch model).
"""
import json
import os
import shutil
import sys
import tempfile

import onnx
import onnxruntime as ort
import torch
import transformers

import export_util
import generate
import generate_past

NAME = "genai_llama_tiny"
OUT_DIR = os.path.join(generate_past.MODELS_DIR, NAME)
GENAI_VERSION = "0.8.3"


def export(lm, tmp: str) -> onnx.ModelProto:
    genai_dir = os.environ.get("LLMC_GENAI_DIR")
    if not genai_dir or not os.path.isdir(os.path.join(genai_dir, "onnxruntime_genai", "models")):
        sys.exit("set LLMC_GENAI_DIR to the unpacked onnxruntime-genai wheel (see this script's help)")
    sys.path.insert(0, genai_dir)
    from onnxruntime_genai.models.builder import create_model

    hf_dir, out = os.path.join(tmp, "hf"), os.path.join(tmp, "out")
    lm.save_pretrained(hf_dir)
    # The builder also writes tokenizer files; any tokenizer will do for that step.
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(generate_past.MODELS_DIR, "demo", "tokenizer.json"))
    tokenizer.save_pretrained(hf_dir)
    create_model(NAME, hf_dir, out, "fp32", "cpu", os.path.join(tmp, "cache"))
    return onnx.load(os.path.join(out, "model.onnx"))  # external data loaded, stored inline below


def main() -> None:
    lm = generate.build_llama_tiny()
    with tempfile.TemporaryDirectory(prefix="llmc-genai-") as tmp:
        model = export(lm, tmp)
    ops = sorted({(n.domain or "ai.onnx", n.op_type) for n in model.graph.node})
    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    os.makedirs(OUT_DIR)
    model_path = os.path.join(OUT_DIR, "model.onnx")
    onnx.save_model(model, model_path)
    if os.path.getsize(model_path) > 1 << 20:
        sys.exit(f"{model_path} is over 1 MB")
    symbol, layout = generate_past.past_layout(model)
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    input_names = [i.name for i in session.get_inputs()]
    output_names = [o.name for o in session.get_outputs()]
    sets = []
    for input_set, full_ids in generate_past._input_sets(lm, layout):
        expected = generate_past.torch_forward(lm, input_set.inputs)
        inputs = {n: input_set.inputs[n] for n in input_names}  # no position_ids here
        got = dict(zip(output_names, session.run(output_names, inputs)))
        references = {n: expected[n] for n in output_names}
        entry = export_util.write_input_set(OUT_DIR, input_set.name, inputs, references, got)
        sets.append(generate_past.save_full_ids(OUT_DIR, entry, full_ids))
    manifest = {
        "description": (
            "llama_tiny's torch model (same builder and weights) exported by onnxruntime-genai's model "
            "builder: ONNX Runtime contrib ops " + ", ".join(f"{d}.{o}" for d, o in ops if d != "ai.onnx")
            + ", plus SimplifiedLayerNormalization; inputs input_ids, attention_mask, "
            f"past_key_values.N.key/value [batch, kv_heads, {symbol}, head_dim]; outputs logits, "
            "present.N.key/value. References: torch; ONNX Runtime cross-check."
        ),
        "model": "model.onnx",
        "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "model_bytes": os.path.getsize(model_path),
        "exporter": f"onnxruntime-genai {GENAI_VERSION} model builder (fp32, cpu), torch {torch.__version__}, "
                    f"transformers {transformers.__version__}",
        "same_weights_as": "llama_tiny",
        "as_graph_flags": ["--dim", f"{symbol}=0:-1"],
        "tolerance": {"rtol": generate_past.RTOL, "atol": generate_past.ATOL},
        "expect_llm": True,  # recognized as a decoder LM (run_models.py, run_generation.py check it)
        "input_sets": sets,
    }
    with open(os.path.join(OUT_DIR, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    shutil.copy(os.path.join(generate_past.MODELS_DIR, "llama_tiny_past", "generation.json"),
                os.path.join(OUT_DIR, "generation.json"))
    print(f"wrote {OUT_DIR}: {manifest['model_bytes']} bytes; ops {ops}")


if __name__ == "__main__":
    main()
