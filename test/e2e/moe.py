#!/usr/bin/env python3
"""Mixture-of-experts blocks (docs/models.md, Mixtral): what becomes llm.moe and what is refused.

The exports are variants of the committed mixtral_tiny (transformers' Mixtral exported by
torch.onnx: per layer a router, TopK, OneHot, and per expert NonZero, Gather, a SiLU-gated MLP
and ScatterElements), edited here with onnx; references come from ONNX Runtime on each variant.

- as exported: one LlmMoe step per layer and no NonZero left; logits equal ONNX Runtime's;
- routing weights not renormalized (Qwen-MoE's norm_topk_prob = false: the Div by the top-k
  sum removed): recognized with normalize 0, logits equal ONNX Runtime's, and differ from the
  renormalized model's (so a kernel that always renormalized would fail here);
- one expert's activation x * tanh(x) instead of SiLU: refused, naming the TopK and the
  expert's product; the engine runs the graph and equals ONNX Runtime.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

from checks import Checks

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "mixtral_tiny", "model.onnx")
MOE = "/model/model/layers.0/block_sparse_moe/"


def unnormalized(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every layer's routing weights straight from TopK (the Div by their sum bypassed)."""
    produced = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type == "Div" and node.name.endswith("block_sparse_moe/Div"):
            topk_values = node.input[0]
            for user in model.graph.node:
                for i, name in enumerate(user.input):
                    if name == node.output[0]:
                        user.input[i] = topk_values
            assert produced[topk_values].op_type == "TopK"
    return model


def tanh_expert(model: onnx.ModelProto) -> onnx.ModelProto:
    for node in model.graph.node:
        if node.name == MOE + "experts.0/act_fn/Sigmoid":
            node.op_type = "Tanh"
            return model
    raise RuntimeError("no Sigmoid in layer 0's expert 0")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    args = parser.parse_args()
    import onnxruntime as ort
    check = Checks()

    ids = np.random.default_rng(11).integers(0, 512, size=(2, 9), dtype=np.int64)
    logits = {}
    with tempfile.TemporaryDirectory(prefix="llmc-moe-") as tmp:
        for name, edit, want_moe in (("as exported", None, True), ("not renormalized", unnormalized, True),
                                     ("tanh expert", tanh_expert, False)):
            model = onnx.load(MODEL)
            if edit:
                model = edit(model)
            path = os.path.join(tmp, name.replace(" ", "_") + ".onnx")
            onnx.save(model, path)
            engine = path.replace(".onnx", ".engine")
            proc = subprocess.run([args.llmc, "compile", path, "-o", engine], capture_output=True, text=True)
            if proc.returncode != 0:
                check(False, f"{name}: compile", proc.stderr.strip())
                continue
            info = json.loads(subprocess.run([args.llmc, "inspect", engine, "--json"], capture_output=True,
                                             text=True, check=True).stdout)
            kernels = [s["kernel"] for s in info["steps"]]
            if want_moe:
                check(info.get("llm") is not None and kernels.count("LlmMoe") == 2 and "NonZero" not in kernels,
                      f"{name}: one LlmMoe per layer over the KV cache",
                      f"{kernels.count('LlmMoe')} LlmMoe, NonZero left: {'NonZero' in kernels}; {proc.stderr.strip()}")
            else:
                want = (f"mixture of experts at node '{MOE}TopK': expert 0: the expert's MLP at node "
                        f"'{MOE}experts.0/w")
                check(info.get("llm") is None and want in proc.stderr and "is not silu(x·W1)" in proc.stderr,
                      f"{name}: refused, naming the TopK and the expert's product", proc.stderr.strip())
            # Logits against ONNX Runtime on the same variant (the engine takes input_ids alone
            # when recognized; the graph also the mask).
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            (want_logits,) = session.run(["logits"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})
            np.save(os.path.join(tmp, "ids.npy"), ids)
            np.save(os.path.join(tmp, "mask.npy"), np.ones_like(ids))
            inputs = ["--input", f"input_ids={os.path.join(tmp, 'ids.npy')}"]
            if any(i["name"] == "attention_mask" for i in info["inputs"]):
                inputs += ["--input", f"attention_mask={os.path.join(tmp, 'mask.npy')}"]
            out = os.path.join(tmp, "out")
            run = subprocess.run([args.llmc, "run", engine, *inputs, "--output-dir", out], capture_output=True, text=True)
            if run.returncode != 0:
                check(False, f"{name}: run", run.stderr.strip())
                continue
            got = np.load(os.path.join(out, "logits.npy"))
            error = float(np.max(np.abs(got - want_logits)))
            check(got.shape == want_logits.shape and np.allclose(got, want_logits, rtol=1e-4, atol=1e-4),
                  f"{name}: logits equal ONNX Runtime's", f"max abs error {error:.3g}")
            logits[name] = want_logits
        if "as exported" in logits and "not renormalized" in logits:
            effect = float(np.max(np.abs(logits["as exported"] - logits["not renormalized"])))
            check(effect > 1e-2, "renormalizing the routing weights changes the logits", f"by up to {effect:.3g}")
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
