#!/usr/bin/env bash
# Sets up, builds and runs every test: unit, lit, ONNX conformance, end-to-end models, CLI,
# fuzz replays. The suite runs twice: on an ASan/UBSan build (build/asan, clang) and on the
# Release build users get (build/, gcc). A third build, the runtime alone without MLIR/LLVM/
# protobuf (build-runtime-only/), is checked for its dependencies; a fourth (build/tsan) runs
# the API tests (test/api: threads, exceptions) and the thread tests (test/threads: the CPU
# backend's pool and threaded kernels) under ThreadSanitizer. The last lines are
# ctest's summary with the number of tests run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="$(nproc)"
# As scripts/build.sh: ccache hits across clones at different paths (the sanitizer and TSan
# trees carry debug info, hence hash_dir off).
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=true

./scripts/setup.sh

start=$(date +%s)
echo "== build: Release (build/) =="
./scripts/build.sh

# The Python package (pyproject.toml) into .venv, built in the Release tree itself (its module
# and nothing else is new there), as `pip install .` builds it for users; test/python runs it.
echo "== build: the Python package into .venv (pip install ., in build/) =="
.venv/bin/python -m pip install -q --no-build-isolation --no-deps --disable-pip-version-check \
  --config-settings=build-dir=build --config-settings=cmake.define.LLMC_BUILD_TESTS=ON .

# The ASan tree is clang's: under ASan and UBSan it compiles this code two to three times as fast
# as gcc (docs/testing.md), and it was most of a cold run's building; the Release tree stays
# gcc's, so both compilers build every file. A tree configured with another compiler is made again.
ASAN_CC=$(command -v clang || command -v clang-14) || { echo "test.sh: no clang; run scripts/setup.sh" >&2; exit 1; }
ASAN_CXX=$(command -v clang++ || command -v clang++-14) || { echo "test.sh: no clang++; run scripts/setup.sh" >&2; exit 1; }
if [[ -f build/asan/CMakeCache.txt ]] &&
  ! grep -qx "CMAKE_CXX_COMPILER:FILEPATH=$ASAN_CXX" build/asan/CMakeCache.txt; then
  echo "build/asan was configured with another compiler than $ASAN_CXX: configuring it again"
  rm -rf build/asan
fi

echo "== build: ASan + UBSan (build/asan) =="
if [[ ! -f build/asan/build.ninja ]]; then
  # -g1 (line tables, no variables): the sanitizers' reports name files and lines; full debug
  # info made this, the longest build, about a third slower cold (docs/testing.md).
  CC=$ASAN_CC CXX=$ASAN_CXX cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    -DLLMC_SANITIZE=address,undefined -DLLMC_ENABLE_CUDA=OFF \
    -DLLMC_PYTHON="$ROOT/.venv/bin/python" >/dev/null
fi
ninja -C build/asan -j "$JOBS"

# Beside build/, not in it: at the same depth its runtime's compile commands are build/'s, paths
# relative to the clone and all, so ccache gives it build/'s objects (about 5 minutes of a cold
# run's compiling otherwise).
echo "== build: the runtime alone, without the compiler (build-runtime-only) =="
if [[ ! -f build-runtime-only/build.ninja ]]; then
  cmake -S . -B build-runtime-only -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLLMC_BUILD_COMPILER=OFF -DLLMC_BUILD_TESTS=OFF >/dev/null
fi
ninja -C build-runtime-only -j "$JOBS" llmc

# The API and thread tests under ThreadSanitizer: the runtime and those two binaries, no
# compiler: a cold build is 2.5 min (the runtime alone) to 5 min (with the tests, on a loaded
# machine) on 2 cores; ccache makes a rebuild after a change take seconds. gcc's: with clang's
# static TSan runtime, operator new is defined twice (fail_allocation.cpp replaces it), and
# clang saved little here (276 s cold against about 375).
echo "== build: API and thread tests under ThreadSanitizer (build/tsan) =="
if [[ ! -f build/tsan/build.ninja ]]; then
  cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLLMC_SANITIZE=thread -DLLMC_ENABLE_CUDA=OFF -DLLMC_BUILD_COMPILER=OFF \
    -DLLMC_PYTHON="$ROOT/.venv/bin/python" >/dev/null
fi
ninja -C build/tsan -j "$JOBS" llmc_api_tests llmc_thread_tests
echo "builds took $(( $(date +%s) - start )) s"

# Any data race fails the run (TSan exits 66 after a report).
echo "== API and thread tests under ThreadSanitizer (build/tsan) =="
tsan_status=0
for binary in api thread; do
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build/tsan/test/llmc_${binary}_tests \
    > build/tsan/${binary}-tests.log 2>&1 || tsan_status=$?
  tail -n 3 build/tsan/${binary}-tests.log
done

# Each run's output is kept so that the very last lines can repeat both of ctest's counts
# (ctest ends with the list of skipped GPU tests, which would otherwise bury them).
echo "== tests under ASan + UBSan (build/asan) =="
asan_status=0
(cd build/asan && ctest -j "$JOBS" --output-on-failure --timeout 1800) 2>&1 \
  | tee build/asan/ctest-summary.log || asan_status=$?

echo "== tests (build/) =="
release_status=0
(cd build && ctest -j "$JOBS" --output-on-failure --timeout 1800) 2>&1 \
  | tee build/ctest-summary.log || release_status=$?

# gcc's llmc and clang's must write the same engine bytes (the serializer once laid the buffer
# out in the order a compiler chose to evaluate a call's arguments).
echo "== the same engines from gcc's llmc (build/) and clang's (build/asan) =="
same_engine_status=0
test/cli/same_engine_across_builds.sh build/tools/llmc/llmc build/asan/tools/llmc/llmc "$ROOT" \
  build/same-engine || same_engine_status=$?

# The same binaries on an emulated CPU without AVX-512 (qemu-user, -cpu Haswell: AVX2, FMA,
# F16C): the kernels' dispatch and the references that depend on the host's ISA (ONNX
# Runtime's and numpy's kernels, in the Python harnesses' own process) as an AVX2-only host
# sees them. The whole suite runs this way in 30 minutes (test/isa/emulated_host.py); CI runs
# the part that depends on the ISA, in about a minute. Left out: the sweeps of attendChunk's
# exponential over its whole domain (3.4 minutes under the emulator) and of the activations over
# float32, which the native run makes at the AVX2 level as well as at AVX-512
# (test/unit/cpu/isa_test.cpp).
echo "== ISA-dependent tests on an emulated AVX2-only CPU (build/) =="
emulated_status=0
.venv/bin/python test/isa/emulated_host.py --build build --cpu Haswell \
  -R '^(threads\.|e2e\.(prequantized|ort_contrib_ops)$|.*(Quant|Fused|Gemm|Dot|Isa|CpuFeatures|Panel|W8A8))' \
  -E '^cuda\.|ChunkExponentialWithinTwoUlp|ActivationsGiveTheScalarBits' \
  > build/emulated-host.log 2>&1 || emulated_status=$?
grep -v "TCG doesn't support" build/emulated-host.log | tail -n 4

echo "== summary =="
for binary in api thread; do
  echo "ThreadSanitizer, ${binary} tests (build/tsan): $(grep -E '^\[  (PASSED|FAILED)  \]' build/tsan/${binary}-tests.log | head -n 1 || echo "no result")"
done
echo "Emulated AVX2-only CPU (build/): $(grep -E '^emulated Haswell:' build/emulated-host.log || echo "no result")"
echo "Same engines from gcc's and clang's llmc: $([[ $same_engine_status -eq 0 ]] && echo yes || echo NO)"
# ctest's counts last.
echo "ASan + UBSan (build/asan): $(grep -E 'tests passed|tests failed out of' build/asan/ctest-summary.log | tail -n 1)"
echo "Release (build/):          $(grep -E 'tests passed|tests failed out of' build/ctest-summary.log | tail -n 1)"
if [[ $tsan_status -ne 0 ]]; then
  echo "FAILED: tests under ThreadSanitizer (build/tsan) failed (exit $tsan_status); see build/tsan/api-tests.log and build/tsan/thread-tests.log"
  exit 1
fi
if [[ $same_engine_status -ne 0 ]]; then
  echo "FAILED: gcc's and clang's llmc wrote different engines; see the lines under 'the same engines'"
  exit 1
fi
if [[ $emulated_status -ne 0 ]]; then
  echo "FAILED: tests on the emulated AVX2-only CPU failed; see build/emulated-host.log"
  exit 1
fi
if [[ $asan_status -ne 0 ]]; then
  echo "FAILED: the ASan/UBSan run (build/asan) failed; see its output above"
  exit 1
fi
exit $release_status
