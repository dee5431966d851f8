#!/usr/bin/env python3
"""Where llmc stands on each decoder family, tried as a new user tries it (issue 16).

For every family: a tiny random model of transformers' own class (seeded), saved with
save_pretrained and exported by Optimum's `main_export(task="text-generation-with-past")`, as
`optimum-cli export onnx --task text-generation-with-past` does; then `llmc compile` on the
export. Prints, per family: whether Optimum exports it, whether llmc recognizes it as a decoder
onto the paged KV cache (an engine with LlmAttention steps), the steps per decoder layer (those one more layer adds), and
llmc's message when it does not. Exports are kept under --work (reused when present).

Run with the generation venv (test/models/README.md):
    .venv-gen/bin/python test/models/survey_families.py --llmc build/tools/llmc/llmc [FAMILY ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import families


def _trace_length(family: str) -> int:
    """Tokens of the traced example: 7, or more than Gemma-2's window (generate.py says why)."""
    import generate

    return generate.GEMMA2_TRACE_LENGTH if family == "gemma2" else 7


def export(family: str, work: str, layers: int = families.LAYERS) -> tuple[str | None, str]:
    """Optimum's cache export of the family's tiny model: (model.onnx or None, message)."""
    from optimum.exporters.onnx import main_export

    onnx_dir = os.path.join(work, family if layers == families.LAYERS else f"{family}-{layers}")
    model_path = os.path.join(onnx_dir, "model.onnx")
    if os.path.exists(model_path):
        return model_path, "exported (kept)"
    model = families.build(family, layers=layers)
    with tempfile.TemporaryDirectory(prefix="llmc-survey-") as tmp:
        model.save_pretrained(tmp)
        try:
            main_export(tmp, onnx_dir, task="text-generation-with-past", opset=18, device="cpu",
                        no_post_process=True, do_validation=False)
        except Exception as error:  # noqa: BLE001 - the message is the result
            refused = f"Optimum: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
            return export_full_sequence(family, onnx_dir, layers, refused)
    return model_path, "exported"


def export_full_sequence(family: str, onnx_dir: str, layers: int, refused: str) -> tuple[str | None, str]:
    """What a user does where Optimum refuses: torch.onnx.export of the model without a cache
    (logits of input_ids and attention_mask, batch and seq dynamic), as generate.py's models."""
    import onnx

    import generate
    from export_util import _export_to_proto

    model = families.build(family, layers=layers).eval()
    example = generate._lm_input_sets(model.config.vocab_size, [(1, _trace_length(family))],
                                      with_mask=True)[0]
    try:
        proto = _export_to_proto(generate.CausalLmLogits(model), example, ["logits"],
                                 {**generate.LM_AXES, **generate.LOGITS_AXES}, opset=18)
    except Exception as error:  # noqa: BLE001
        return None, f"{refused}; torch.onnx: {type(error).__name__}: {str(error)[:120]}"
    os.makedirs(onnx_dir, exist_ok=True)
    model_path = os.path.join(onnx_dir, "model.onnx")
    onnx.save_model(proto, model_path)
    return model_path, "torch.onnx, no cache (Optimum refuses it)"


def count_steps(llmc: str, model_path: str, engine: str) -> int | None:
    if subprocess.run([llmc, "compile", model_path, "-o", engine], capture_output=True).returncode:
        return None
    inspect = subprocess.run([llmc, "inspect", engine, "--json"], capture_output=True, text=True,
                             check=True)
    return len(json.loads(inspect.stdout).get("steps", []))


def compile_and_count(llmc: str, model_path: str, work: str, family: str) -> dict:
    engine = os.path.join(work, family + ".engine")
    run = subprocess.run([llmc, "compile", model_path, "-o", engine], capture_output=True,
                         text=True)
    result = {"compiled": run.returncode == 0}
    message = (run.stderr or run.stdout).strip().splitlines()
    if run.returncode != 0:
        result["message"] = message[-1] if message else f"exit {run.returncode}"
        return result
    warning = [i for i, line in enumerate(message) if "not recognized" in line]
    if warning:  # the reasons follow the warning line
        result["message"] = " | ".join(message[warning[0] + 1:warning[0] + 3]).strip()
    inspect = subprocess.run([llmc, "inspect", engine, "--json"], capture_output=True, text=True,
                             check=True)
    info = json.loads(inspect.stdout)
    counts = {}
    for step in info.get("steps", []):
        counts[step["kernel"]] = counts.get(step["kernel"], 0) + 1
    result["steps"] = sum(counts.values())
    result["recognized"] = bool(info.get("llm")) and counts.get("LlmAttention", 0) > 0
    # Steps per decoder layer: the same family with one more layer, compiled the same way.
    deeper, _ = export(family, work, families.LAYERS + 1)
    deeper_steps = count_steps(llmc, deeper, engine + ".deeper") if deeper else None
    result["per_layer"] = deeper_steps - result["steps"] if deeper_steps is not None else None
    result["ops"] = counts
    # The engine against the graph as exported, at every length up to 20 (past the windows).
    verify = subprocess.run([llmc, "verify", model_path, "--engine", engine, "--length", "20"],
                            capture_output=True, text=True)
    lines = (verify.stdout + verify.stderr).strip().splitlines()
    result["verified"] = verify.returncode == 0
    result["verify"] = lines[-1] if lines else f"exit {verify.returncode}"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "llmc-survey"))
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("families", nargs="*")
    args = parser.parse_args()
    names = args.families or list(families.configs())
    os.makedirs(args.work, exist_ok=True)
    results = {}
    for family in names:
        model_path, exported = export(family, args.work)
        row = {"export": exported}
        if model_path:
            row.update(compile_and_count(args.llmc, model_path, args.work, family))
        results[family] = row
        recognized = "yes" if row.get("recognized") else "no"
        steps = (f"{row['per_layer']} steps per layer ({row['steps']} in all)"
                 if row.get("per_layer") is not None else "-")
        print(f"{family:12} export: {exported[:60]:60} recognized: {recognized:3} {steps}",
              flush=True)
        if "verify" in row:
            print(f"{'':12} verify: {row['verify'][:200]}", flush=True)
        if row.get("message"):
            print(f"{'':12} {row['message'][:300]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
