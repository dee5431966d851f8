#!/usr/bin/env python3
"""CPU decode speed of pruned engines against dense ones (docs/pruning.md).

The random ~110M Llama of bench/quant.py (not committed), compiled dense and with
`--prune mlp:0.25` (a quarter of every MLP's channels removed, calibrated on random token ids),
`--prune heads:0.25` (3 of the 12 heads of every layer) and both, in float32, int8 and int4
(group 128), and `--prune layers:0.25` (3 of the 12 layers) in int8, run with `llmc bench --kv-only` in alternated rounds.
Also unstructured and 2:4 magnitude pruning under int8 and w8a8 with `--sparse-storage` (the
engine stores a bitmask and the kept values, core/sparse.h), and the same 50% engine without
it (the zeros stored): an A/B of the two formats on the same weights.
Prints decode tokens/s as median [min, max], each engine's size (decode reads every weight
once per token, so the size is the bytes per token) and the speed-up over dense int8.

    .venv/bin/python bench/prune.py --llmc build/tools/llmc/llmc [--rounds 5] [--only MODE ...]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from quant import CALIB_DIR, arguments, bench_modes  # noqa: E402

MLP = ["--prune", "mlp:0.25", "--calib-dir", CALIB_DIR]
HEADS = ["--prune", "heads:0.25", "--calib-dir", CALIB_DIR]
BOTH = ["--prune", "mlp:0.25,heads:0.25", "--calib-dir", CALIB_DIR]
LAYERS = ["--prune", "layers:0.25", "--calib-dir", CALIB_DIR]
SPARSE = ["--sparse-storage"]
INT4 = ["--quantize", "int4", "--quant-group", "128"]
MODES = [("float32", []), ("float32 mlp:0.25", MLP), ("float32 heads:0.25", HEADS), ("float32 mlp+heads", BOTH),
         ("int8", ["--quantize", "int8"]), ("int8 mlp:0.25", ["--quantize", "int8", *MLP]),
         ("int8 heads:0.25", ["--quantize", "int8", *HEADS]), ("int8 mlp+heads", ["--quantize", "int8", *BOTH]),
         ("int8 layers:0.25", ["--quantize", "int8", *LAYERS]),
         ("int4 g128", INT4), ("int4 g128 mlp:0.25", [*INT4, *MLP]), ("int4 g128 heads:0.25", [*INT4, *HEADS]),
         ("int4 g128 mlp+heads", [*INT4, *BOTH]),
         ("int8 50%", ["--quantize", "int8", "--prune", "magnitude:0.5", *SPARSE]),
         ("int8 50% dense", ["--quantize", "int8", "--prune", "magnitude:0.5"]),
         ("int8 2:4", ["--quantize", "int8", "--prune", "magnitude:2:4", *SPARSE]),
         ("int8 70%", ["--quantize", "int8", "--prune", "magnitude:0.7", *SPARSE]),
         ("int8 40%", ["--quantize", "int8", "--prune", "magnitude:0.4", *SPARSE]),
         ("w8a8", ["--quantize", "w8a8", "--calib-dir", CALIB_DIR]),
         ("w8a8 50%", ["--quantize", "w8a8", "--calib-dir", CALIB_DIR, "--prune", "magnitude:0.5", *SPARSE])]

if __name__ == "__main__":
    sys.exit(bench_modes(arguments(__doc__.splitlines()[0]), MODES, baseline="int8"))
