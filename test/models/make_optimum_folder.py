#!/usr/bin/env python3
"""Writes optimum_llama/: a model folder exactly as `optimum-cli export onnx` writes it, and the
text transformers' greedy generation writes from it (expected.json), for e2e.optimum_folder.

The model is a tiny LlamaForCausalLM (seeded random weights, initializer_range 0.3 so that
greedy choices are far from ties) with the demo model's tokenizer (demo/tokenizer.json, its
tokenizer_config.json) and a generation_config.json ending at <|endoftext|> (id 0), saved with
save_pretrained (model and tokenizer) and exported by the real command line:

    optimum-cli export onnx --task text-generation-with-past --model HF_DIR OUT_DIR

Everything the exporter writes is committed as it wrote it (model.onnx, config.json,
generation_config.json, tokenizer.json, tokenizer_config.json, special_tokens_map.json).
expected.json holds, per prompt, transformers' generate(do_sample=False) on the saved torch
model: its new tokens and their text decoded with skip_special_tokens=True, which is what
`llmc generate ENGINE --prompt TEXT` must print after the prompt. Also checked here: ONNX
Runtime on the exported model, replaying the greedy loop over its cache, gives the same tokens.

Run with the generation venv (test/models/README.md):
    .venv-gen/bin/python test/models/make_optimum_folder.py
Deterministic: fixed seed, one torch thread.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
import torch
import transformers

MODELS_DIR = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(MODELS_DIR, "optimum_llama")
PROMPTS = ["In the beginning God created", "And the LORD said unto Moses,",
           "Blessed are the meek: for"]
MAX_NEW_TOKENS = 24


def build(hf_dir: str) -> None:
    torch.manual_seed(11)
    config = transformers.LlamaConfig(
        vocab_size=2048, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        initializer_range=0.3, rope_theta=10000.0, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=0, pad_token_id=None)
    model = transformers.LlamaForCausalLM(config)
    model.generation_config = transformers.GenerationConfig(eos_token_id=0)
    model.save_pretrained(hf_dir)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(MODELS_DIR, "demo", "tokenizer.json"),
        eos_token="<|endoftext|>")
    demo_config = json.load(open(os.path.join(MODELS_DIR, "demo", "tokenizer_config.json")))
    tokenizer.chat_template = demo_config["chat_template"]
    tokenizer.save_pretrained(hf_dir)


def greedy_reference(hf_dir: str) -> list:
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    model.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    out = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            generated = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                       num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
        new = generated[0, ids.shape[1]:].tolist()
        out.append({"prompt": prompt, "prompt_ids": ids[0].tolist(),
                    "max_new_tokens": MAX_NEW_TOKENS, "new_tokens": new,
                    "text": tokenizer.decode(new, skip_special_tokens=True)})
    return out


def replay_on_ort(model_path: str, config: dict, reference: list) -> None:
    """Greedy over the exported cache on ONNX Runtime: the same tokens as transformers."""
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    layers, kv = config["num_hidden_layers"], config["num_key_value_heads"]
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    for entry in reference:
        ids = list(entry["prompt_ids"])
        past = {f"past_key_values.{i}.{kind}": np.zeros((1, kv, 0, head_dim), np.float32)
                for i in range(layers) for kind in ("key", "value")}
        step_ids, new = ids, []
        for _ in range(entry["max_new_tokens"]):
            start = len(ids) - len(step_ids)
            feeds = {"input_ids": np.array([step_ids], np.int64),
                     "attention_mask": np.ones((1, len(ids)), np.int64)}
            if "position_ids" in names:
                feeds["position_ids"] = np.arange(start, len(ids), dtype=np.int64)[None]
            feeds.update(past)
            outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
            token = int(np.argmax(outputs["logits"][0, -1]))
            new.append(token)
            past = {k: outputs[k.replace("past_key_values", "present")] for k in past}
            if token == 0:
                break
            ids.append(token)
            step_ids = [token]
        if new != entry["new_tokens"]:
            raise RuntimeError(f"ONNX Runtime's greedy tokens {new} differ from transformers' "
                               f"{entry['new_tokens']} for {entry['prompt']!r}")


def main() -> None:
    torch.set_num_threads(1)
    import optimum.version
    with tempfile.TemporaryDirectory(prefix="llmc-optimum-") as tmp:
        hf_dir, onnx_dir = os.path.join(tmp, "hf"), os.path.join(tmp, "onnx")
        build(hf_dir)
        cli = os.path.join(os.path.dirname(sys.executable), "optimum-cli")
        subprocess.run([cli, "export", "onnx", "--task", "text-generation-with-past",
                        "--model", hf_dir, onnx_dir], check=True)
        reference = greedy_reference(hf_dir)
        config = json.load(open(os.path.join(onnx_dir, "config.json")))
        replay_on_ort(os.path.join(onnx_dir, "model.onnx"), config, reference)
        if os.path.isdir(OUT_DIR):
            shutil.rmtree(OUT_DIR)
        shutil.copytree(onnx_dir, OUT_DIR)
    size = os.path.getsize(os.path.join(OUT_DIR, "model.onnx"))
    if size > 1 << 20:
        raise RuntimeError(f"model.onnx is {size} bytes, over the 1 MB a test model may have")
    expected = {
        "description": "transformers generate(do_sample=False) on the torch model optimum-cli "
                       "exported (make_optimum_folder.py); text decoded with "
                       "skip_special_tokens=True",
        "exporter": f"optimum-cli {optimum.version.__version__} export onnx --task "
                    f"text-generation-with-past, torch {torch.__version__}, transformers "
                    f"{transformers.__version__}",
        "greedy": reference,
    }
    with open(os.path.join(OUT_DIR, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")
    print(f"wrote {OUT_DIR}: {sorted(os.listdir(OUT_DIR))}, model.onnx {size} bytes")


if __name__ == "__main__":
    main()
