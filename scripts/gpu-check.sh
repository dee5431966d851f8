#!/usr/bin/env bash
# The GPU check, run on the lent GPU machine (the `device` tool) from the repository root with
# gpu-prep/ carried along (scripts/gpu-prepare.sh makes it here):
#   run(carry=["gpu-prep"], command="bash scripts/gpu-check.sh", timeout_s=590)
# Builds the runtime with CUDA for sm_90 and without the compiler, runs every GPU test, then the
# GPU benchmark (bench/gpu/llama_bench.py), then the kernel tests and greedy generation under
# compute-sanitizer memcheck (the other whole-engine tests would outlast the lease under it),
# and prints one table
# last: tests, benchmark, memcheck. Each phase has its own time limit, so the script ends
# within about 9.5 minutes whatever hangs, and a phase that runs out still leaves its log.
# Logs go under $OUT (at most 8 files come back from a device call; this writes 8).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/build-gpu/out}"
mkdir -p "$OUT"
START=$(date +%s)
PREP="$ROOT/gpu-prep"
fail() {
  echo "gpu-check: $1 (see $OUT/$2)"
  tail -n 40 "$OUT/$2"
  exit 1
}
if [[ ! -x "$PREP/flatc" ]]; then
  echo "gpu-check: gpu-prep/ is missing: run scripts/gpu-prepare.sh on the build machine and carry gpu-prep"
  exit 2
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvidia-smi; nvcc --version
  cmake --version; } > "$OUT/machine.txt" 2>&1

if ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
echo "== configure and build (runtime + GPU tests, sm_90)"
timeout 60 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLMC_BUILD_COMPILER=OFF -DLLMC_BUILD_SERVE=OFF \
  -DLLMC_WARNINGS_AS_ERRORS=OFF \
  -DLLMC_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DFlatBuffers_DIR="$PREP/cmake/FlatBuffers" -Dnlohmann_json_DIR="$PREP/cmake/nlohmann_json" \
  -DLLMC_GTEST_SOURCE_DIR="$PREP/googletest" > "$OUT/configure.log" 2>&1 || fail "configure failed" configure.log
timeout 200 ninja -C build-gpu llmc_cuda_tests llmc > "$OUT/build.log" 2>&1 || fail "build failed" build.log
TESTS=build-gpu/test/llmc_cuda_tests
export LLMC_GPU_MODELS="$PREP/models"  # engines compiled by gpu-prepare.sh (test/cuda/engine_test.cpp)
BUILT=$(date +%s)

echo "== GPU tests"
timeout 120 "$TESTS" --gtest_output="json:$OUT/tests.json" > "$OUT/tests.log" 2>&1
TESTS_RC=$?

echo "== GPU benchmark (bench/gpu/llama_bench.py)"
if [[ ! -f "$PREP/bench/llama1b.engine" ]]; then
  echo "skipped: gpu-prep/bench/llama1b.engine is missing (gpu-prepare.sh without LLMC_GPU_BENCH=0)" > "$OUT/bench.log"
  BENCH_RC=125
elif ! python3 -c "import torch" 2> /dev/null; then
  echo "skipped: PyTorch is not importable on this machine" > "$OUT/bench.log"
  BENCH_RC=125
else
  PYTHONUNBUFFERED=1 timeout 170 python3 bench/gpu/llama_bench.py --engine "$PREP/bench/llama1b.engine" \
    --config "$PREP/bench/config.json" --llmc build-gpu/tools/llmc/llmc --work build-gpu/bench \
    --out "$OUT" > "$OUT/bench.log" 2>&1
  BENCH_RC=$?
fi

echo "== GPU kernel tests under compute-sanitizer memcheck"
if command -v compute-sanitizer > /dev/null; then
  # Of the engine tests, greedy generation only (under a second normally).
  timeout 80 compute-sanitizer --tool memcheck --error-exitcode 3 "$TESTS" \
    --gtest_filter='*:-EngineGpuTest.GraphEngines*:EngineGpuTest.HalfPrecision*:EngineGpuTest.Quantized*:EngineGpuTest.LanguageModelSteps*:EngineGpuTest.DeviceSampling*' \
    > "$OUT/memcheck.log" 2>&1
  MEMCHECK_RC=$?
else
  echo "compute-sanitizer is not on PATH" > "$OUT/memcheck.log"
  MEMCHECK_RC=127
fi
END=$(date +%s)

python3 - "$OUT" "$TESTS_RC" "$MEMCHECK_RC" "$((BUILT - START))" "$((END - START))" "$BENCH_RC" <<'PY'
import json, os, re, sys
out, tests_rc, memcheck_rc, build_s, total_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
bench_rc = int(sys.argv[6])
rows, failures = [], []
try:
    report = json.load(open(os.path.join(out, "tests.json")))
    for suite in report.get("testsuites", []):
        for case in suite.get("testsuite", []):
            result = "FAILED" if case.get("failures") else ("skipped" if case.get("result") == "SKIPPED" else "ok")
            rows.append((f"{suite['name']}.{case['name']}", result, case.get("time", "")))
            for failure in case.get("failures", [])[:4]:  # the first lines of the first few
                failures.append(f"{suite['name']}.{case['name']}: " + " | ".join(failure.get("failure", "").splitlines()[:3])[:400])
except (OSError, ValueError) as error:
    rows.append(("(no test report)", str(error), ""))
memcheck = open(os.path.join(out, "memcheck.log")).read()
summary = re.findall(r"ERROR SUMMARY: .*", memcheck)
gpu = open(os.path.join(out, "machine.txt")).read().strip().splitlines()
print(f"\n{'GPU test':60} {'result':8} time")
for test, result, time in rows:
    print(f"{test:60} {result:8} {time}")
if failures:
    print("\nfirst failures:\n" + "\n".join(failures[:20]))
print(f"\ntests exit {tests_rc}; memcheck exit {memcheck_rc}: {summary[-1] if summary else 'no summary'}")
bench = open(os.path.join(out, "bench.log")).read().strip().splitlines()
table = [i for i, line in enumerate(bench) if line.startswith("GPU benchmark:")]
print(f"\nbenchmark exit {bench_rc}:")
print("\n".join(bench[table[-1]:] if table else bench[-15:]))
print(f"gpu: {gpu[0] if gpu else 'unknown'}; build {build_s} s, total {total_s} s; logs in {out}")
PY
[[ $TESTS_RC -eq 0 && $MEMCHECK_RC -eq 0 ]]
