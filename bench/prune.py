#!/usr/bin/env python3
"""CPU decode speed of pruned engines against dense ones (docs/pruning.md).

The random ~110M Llama of bench/quant.py (not committed), compiled dense and with
`--prune mlp:0.25` (a quarter of every MLP's channels removed, calibrated on random token ids)
in float32, int8 and int4 (group 128), run with `llmc bench --kv-only` in alternated rounds.
Prints decode tokens/s as median [min, max], each engine's size (decode reads every weight
once per token, so the size is the bytes per token) and the speed-up over dense int8.
Unstructured and N:M pruning store their zeros dense so far: they change neither the size
nor the speed, and are not benchmarked here.

    .venv/bin/python bench/prune.py --llmc build/tools/llmc/llmc [--rounds 5]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from quant import CALIB_DIR, arguments, bench_modes  # noqa: E402

MLP = ["--prune", "mlp:0.25", "--calib-dir", CALIB_DIR]
MODES = [("float32", []), ("float32 mlp:0.25", MLP),
         ("int8", ["--quantize", "int8"]), ("int8 mlp:0.25", ["--quantize", "int8", *MLP]),
         ("int4 g128", ["--quantize", "int4", "--quant-group", "128"]),
         ("int4 g128 mlp:0.25", ["--quantize", "int4", "--quant-group", "128", *MLP])]

if __name__ == "__main__":
    sys.exit(bench_modes(arguments(__doc__.splitlines()[0]), MODES, baseline="int8"))
