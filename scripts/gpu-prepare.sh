#!/usr/bin/env bash
# Prepares gpu-prep/ (git-ignored) for scripts/gpu-check.sh on the GPU machine, which has nvcc,
# CMake and ninja but no Debian packages, no MLIR and no network. Run it here, after a build
# (it takes the generated engine header from build/), then carry gpu-prep/ with the device call.
# It holds: GoogleTest's sources, FlatBuffers' and nlohmann/json's headers with minimal CMake
# package files, the engine schema's generated header and a stand-in `flatc` that installs
# that header (refusing when runtime/schema/engine.fbs changed since); the test models compiled
# for sm_90 with their references (models/); the benchmark's stripped 1.2 B engine (bench/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREP="$ROOT/gpu-prep"
GENERATED="$ROOT/build/runtime/generated/llmc/engine_generated.h"
if [[ ! -f "$GENERATED" ]]; then
  echo "gpu-prepare: $GENERATED is missing: build first (./scripts/build.sh)" >&2
  exit 2
fi
rm -rf "$PREP"
mkdir -p "$PREP/include" "$PREP/cmake/FlatBuffers" "$PREP/cmake/nlohmann_json" "$PREP/schema"
cp -r /usr/src/googletest "$PREP/googletest"
rm -rf "$PREP"/googletest/{docs,googletest/test,googlemock/test}  # only the library is built there
cp -r /usr/include/flatbuffers "$PREP/include/"
cp -r /usr/include/nlohmann "$PREP/include/"
cp "$GENERATED" "$PREP/schema/engine_generated.h"
sha256sum "$ROOT/runtime/schema/engine.fbs" | cut -d' ' -f1 > "$PREP/schema/engine.fbs.sha256"

# flatc stand-in: `flatc --cpp --scoped-enums -o DIR SCHEMA` copies the header generated here.
cat > "$PREP/flatc" <<'FLATC'
#!/usr/bin/env bash
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="" schema=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    -*) shift ;;
    *) schema="$1"; shift ;;
  esac
done
if [[ "$(sha256sum "$schema" | cut -d' ' -f1)" != "$(cat "$here/schema/engine.fbs.sha256")" ]]; then
  echo "flatc (gpu-prep stand-in): $schema changed since scripts/gpu-prepare.sh ran; run it again" >&2
  exit 1
fi
mkdir -p "$out"
cp "$here/schema/engine_generated.h" "$out/engine_generated.h"
FLATC
chmod +x "$PREP/flatc"

cat > "$PREP/cmake/FlatBuffers/FlatBuffersConfig.cmake" <<'CFG'
# Minimal package file (gpu-prep): the header-only library and the flatc stand-in.
get_filename_component(_prep "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(NOT TARGET flatbuffers::flatbuffers)
  add_library(flatbuffers::flatbuffers INTERFACE IMPORTED)
  set_target_properties(flatbuffers::flatbuffers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_prep}/include")
  add_executable(flatbuffers::flatc IMPORTED)
  set_target_properties(flatbuffers::flatc PROPERTIES IMPORTED_LOCATION "${_prep}/flatc")
endif()
set(FlatBuffers_FOUND TRUE)
CFG
cat > "$PREP/cmake/nlohmann_json/nlohmann_jsonConfig.cmake" <<'CFG'
# Minimal package file (gpu-prep): the header-only library.
get_filename_component(_prep "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_prep}/include")
endif()
set(nlohmann_json_FOUND TRUE)
CFG
cat > "$PREP/cmake/nlohmann_json/nlohmann_jsonConfigVersion.cmake" <<'CFG'
set(PACKAGE_VERSION "3.11.2")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
if(PACKAGE_FIND_VERSION_MAJOR AND NOT PACKAGE_FIND_VERSION_MAJOR EQUAL 3)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
CFG
# The test models, compiled here for sm_90 (the GPU machine has no compiler), for
# test/cuda/engine_test.cpp: graph.engine with the manifest's input sets and exporter outputs,
# and lm.engine with generation.json (transformers' greedy tokens). The device call carries the
# tracked tree (about 37 MiB) and gpu-prep/ within 64 MiB, so not every test model fits: these
# cover each attention and MLP form the CUDA backend runs (encoder, ONNX Attention, learned and
# rotary positions, partial and interleaved rotary, GQA, parallel blocks, QKV biases, Granite's
# multipliers), and llama_tiny also carries the quantized graph engines. The forms the backend
# refuses (sliding windows, soft-capping, ALiBi; docs/cuda.md) are left out.
# LLMC_GPU_TEST_MODELS="a b c" picks others.
GPU_TEST_MODELS="${LLMC_GPU_TEST_MODELS:-mlp bert_tiny attention23_tiny llama_tiny llama_tiny_past gpt2_tiny_past \
  gptj_tiny_past gpt_neox_tiny_past falcon_tiny_past phi3_tiny_past qwen2_tiny_past mistral_tiny_past granite_tiny_past}"
LLMC="$ROOT/build/tools/llmc/llmc"
"$ROOT/.venv/bin/python" - "$ROOT/test/models" "$PREP/models" "$LLMC" $GPU_TEST_MODELS <<'PY'
import json, os, shutil, subprocess, sys
models, out, llmc, *names = sys.argv[1:]
for name in names:
    src = os.path.join(models, name)
    if not os.path.exists(os.path.join(src, "manifest.json")):
        sys.exit(f"gpu-prepare: {src} has no manifest.json")
    if any("../" in path for input_set in json.load(open(os.path.join(src, "manifest.json")))["input_sets"]
           for path in list(input_set["inputs"].values()) + list(input_set["outputs"].values())):
        sys.exit(f"gpu-prepare: {name}'s manifest reads another model's files: pick it with that model")
    manifest = json.load(open(os.path.join(src, "manifest.json")))
    dst = os.path.join(out, name)
    os.makedirs(dst)
    common = manifest.get("compile_flags", [])
    kinds = {"graph": ["--as-graph"] + manifest.get("as_graph_flags", []) + common}
    if os.path.exists(os.path.join(src, "generation.json")):
        kinds["lm"] = common
        shutil.copy(os.path.join(src, "generation.json"), dst)
    for kind, flags in kinds.items():
        command = [llmc, "compile", os.path.join(src, manifest["model"]), "-o",
                   os.path.join(dst, kind + ".engine"), "--target", "cuda-sm90", *flags]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"gpu-prepare: {' '.join(command)} failed:\n{proc.stderr}")
    plain_inputs = all(set(i["inputs"]) <= {"input_ids", "attention_mask", "position_ids"}
                       for i in manifest["input_sets"])
    if "lm" in kinds and plain_inputs:  # calibration feeds no past K/V
        # The graph engine quantized (test/cuda/engine_test.cpp compares it with the CPU backend);
        # w8a8 calibrates on the single-sequence input sets' ids.
        calib = os.path.join(out, name + ".calib")
        os.makedirs(calib)
        import numpy as np
        for input_set in manifest["input_sets"]:
            inputs = input_set["inputs"]
            if "input_ids" not in inputs:
                continue
            ids = np.load(os.path.join(src, inputs["input_ids"]))
            mask = np.load(os.path.join(src, inputs["attention_mask"])) if "attention_mask" in inputs else None
            for row in range(ids.shape[0]):  # each sequence without its padding
                kept = ids[row] if mask is None or mask.shape != ids.shape else ids[row][mask[row] != 0]
                if kept.size:
                    np.save(os.path.join(calib, f"{input_set['name']}_{row}.npy"), kept.reshape(1, -1))
        for mode in ("int8", "int4", "int4_zp", "w8a8", "fp8"):
            command = [llmc, "compile", os.path.join(src, manifest["model"]), "-o",
                       os.path.join(dst, f"graph-{mode}.engine"), "--target", "cuda-sm90",
                       *kinds["graph"], "--quantize", mode, "--quant-group", "32"]
            if mode == "w8a8":
                command += ["--calib-dir", calib]
            proc = subprocess.run(command, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"gpu-prepare: {' '.join(command)} failed:\n{proc.stderr}")
        shutil.rmtree(calib)
        for cached in os.listdir(dst):
            if cached.endswith(".calib.safetensors"):
                os.remove(os.path.join(dst, cached))  # the calibration cache: not needed there
    shutil.copy(os.path.join(src, "manifest.json"), dst)
    for input_set in manifest["input_sets"]:
        for path in list(input_set["inputs"].values()) + list(input_set["outputs"].values()):
            os.makedirs(os.path.dirname(os.path.join(dst, path)), exist_ok=True)
            shutil.copy(os.path.join(src, path), os.path.join(dst, path))
    print(f"gpu-prepare: {name}: {', '.join(k + '.engine' for k in kinds)}")
PY
# The GPU benchmark's 1.2 B-parameter model (bench/gpu/make_llama.py), compiled here without its
# weights (64 KB; the GPU machine refits it from PyTorch's). Takes about 2 minutes, 4.8 GB of
# disk for the ONNX file while it lasts and 19 GB of memory in the compiler. LLMC_GPU_BENCH=0
# leaves it out.
if [[ "${LLMC_GPU_BENCH:-1}" != 0 ]]; then
  BENCH_TMP="$(mktemp -d)"
  trap 'rm -rf "$BENCH_TMP"' EXIT
  mkdir -p "$PREP/bench"
  "$ROOT/.venv/bin/python" "$ROOT/bench/gpu/make_llama.py" --out "$BENCH_TMP" --size 1b
  "$LLMC" compile "$BENCH_TMP/model.onnx" -o "$PREP/bench/llama1b.engine" --target cuda-sm90 --strip-weights
  cp "$BENCH_TMP/config.json" "$PREP/bench/config.json"
  rm -rf "$BENCH_TMP"
fi
# What the device call carries: the tracked files and gpu-prep/, at most 64 MiB together.
TRACKED=$(git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 du -cb 2> /dev/null) | tail -n 1 | cut -f1)
PREPARED=$(du -sb "$PREP" | cut -f1)
echo "gpu-prepare: tracked files $((TRACKED >> 20)) MiB + gpu-prep $((PREPARED >> 20)) MiB (the device call carries at most 64)"
if ((TRACKED + PREPARED > 62 << 20)); then
  echo "gpu-prepare: too large to carry: pick fewer models with LLMC_GPU_TEST_MODELS" >&2
  exit 1
fi
echo "gpu-prepare: wrote $PREP; carry it: run(carry=[\"gpu-prep\"], command=\"bash scripts/gpu-check.sh\")"
