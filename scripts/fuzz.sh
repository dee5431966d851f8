#!/usr/bin/env bash
# Builds the coverage-guided fuzz targets (build/fuzz: clang, libFuzzer, ASan + UBSan, every
# llmc library coverage-instrumented) and runs each one in turn, for a set time or number of
# executions, starting from its seed corpus in test/fuzz/corpus. What libFuzzer finds stays
# under build/fuzz/work/<target>/ (corpus/, crashes in artifacts/, the log), out of git. Ends
# with executions, exec/s and coverage (cov, ft) per target; exits 1 when a target crashed,
# leaked, hung or tripped a sanitizer.
#
#   scripts/fuzz.sh [--time SECONDS] [--runs N] [--build-only | --no-build] [TARGET...]
#
# --time: seconds per target (default 60; 0: no limit); --runs: executions per target (with
# --time, whichever comes first); no TARGET: all of them (build/fuzz/fuzz_targets.txt lists
# them). A crash is reproduced with build/fuzz/test/fuzz/TARGET_fuzzer FILE; see
# test/fuzz/README.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build/fuzz"
WORK_DIR="$BUILD_DIR/work"

usage() {
  sed -n 's/^#   //p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

seconds=60
runs=""
build=1
run=1
targets=()
while (($#)); do
  case "$1" in
    --time) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || usage; seconds=$2; shift 2 ;;
    --runs) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || usage; runs=$2; shift 2 ;;
    --build-only) run=0; shift ;;
    --no-build) build=0; shift ;;
    -h | --help) usage ;;
    -*) echo "fuzz.sh: unknown option '$1'" >&2; usage ;;
    *) targets+=("$1"); shift ;;
  esac
done

if ((build)); then
  # Debian's clang-14 package installs clang-14/clang++-14; the clang package adds clang/clang++.
  clang_c=$(command -v clang || command -v clang-14 || true)
  clang_cxx=$(command -v clang++ || command -v clang++-14 || true)
  if [[ -z $clang_c || -z $clang_cxx ]] ||
    ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
    echo "fuzz.sh: needs clang and libFuzzer (clang-14, libclang-rt-14-dev): run scripts/setup.sh" >&2
    exit 1
  fi
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    # The whole tree under ASan + UBSan with coverage instrumentation (fuzzer-no-link), so that
    # libFuzzer sees the parsers' branches, not just the target files'. No CUDA: nvcc would not
    # take the flags, and no parser runs on the GPU.
    CC=$clang_c CXX=$clang_cxx cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMC_ENABLE_CUDA=OFF \
      -DLLMC_SANITIZE=fuzzer-no-link,address,undefined >/dev/null
  fi
  if ((${#targets[@]})); then
    ninja -C "$BUILD_DIR" "${targets[@]/%/_fuzzer}"
  else
    ninja -C "$BUILD_DIR" llmc_fuzzers
  fi
fi
((run)) || exit 0

manifest="$BUILD_DIR/fuzz_targets.txt"
if [[ ! -f $manifest ]]; then
  echo "fuzz.sh: $manifest is missing: build first (scripts/fuzz.sh --build-only)" >&2
  exit 1
fi
declare -A binary_of corpus_of options_of
all_targets=()
while IFS=$'\t' read -r name binary corpus target_options; do
  [[ -n $name ]] || continue
  binary_of[$name]=$binary
  corpus_of[$name]=$corpus
  options_of[$name]=$target_options
  all_targets+=("$name")
done <"$manifest"
((${#targets[@]})) || targets=("${all_targets[@]}")
for name in "${targets[@]}"; do
  if [[ -z ${binary_of[$name]:-} ]]; then
    echo "fuzz.sh: no fuzz target '$name' (there are: ${all_targets[*]})" >&2
    exit 2
  fi
done

# "stat::number_of_executed_units: 123" from -print_final_stats, or the last status line's value.
final_stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1; }
last_status() { grep -oE "$1: *[0-9]+" "$2" | tail -n 1 | grep -oE '[0-9]+$' || true; }

summary=()
failed=0
for name in "${targets[@]}"; do
  dir="$WORK_DIR/$name"
  mkdir -p "$dir/corpus" "$dir/artifacts" "$dir/tmp"
  log="$dir/fuzz.log"
  # -malloc_limit_mb: one allocation over 1 GiB is a finding (no seed needs it; a parser that
  # trusts a declared size shows up here before it shows up as memory).
  options=(-print_final_stats=1 -timeout=30 -rss_limit_mb=4096 -malloc_limit_mb=1024
           -artifact_prefix="$dir/artifacts/")
  read -r -a target_options <<<"${options_of[$name]}"  # the target's own, from its CMake
  options+=("${target_options[@]}")
  ((seconds > 0)) && options+=(-max_total_time="$seconds")
  [[ -n $runs ]] && options+=(-runs="$runs")
  echo "== $name: ${binary_of[$name]#"$ROOT/"} ${options[*]:5} =="
  start=$(date +%s)
  status=0
  # New inputs go to the first directory (the work corpus); the seeds are only read. Scratch
  # files of the targets go to the work directory too.
  (cd "$dir" && TMPDIR="$dir/tmp" "${binary_of[$name]}" "${options[@]}" "$dir/corpus" \
    "${corpus_of[$name]}") >"$log" 2>&1 || status=$?
  elapsed=$(($(date +%s) - start))
  grep -E '^#[0-9]+.*(INITED|DONE)|ERROR|SUMMARY|^stat::' "$log" | tail -n 12 || true
  executions=$(final_stat number_of_executed_units "$log")
  rate=$(final_stat average_exec_per_sec "$log")
  rss=$(final_stat peak_rss_mb "$log")
  cov=$(last_status cov "$log")
  ft=$(last_status ft "$log")
  corpus_size=$(find "$dir/corpus" -type f | wc -l)  # inputs libFuzzer kept, in all runs
  result=ok
  if ((status != 0)); then
    result="FAILED (exit $status; $log)"
    failed=1
  fi
  summary+=("$(printf '%-15s %12s %9s %7s %7s %7s %7s %8s  %s' "$name" "${executions:-?}" \
    "${rate:-?}" "${cov:-?}" "${ft:-?}" "$corpus_size" "${elapsed}s" "${rss:-?}" "$result")")
done

echo "== fuzzing summary =="
printf '%-15s %12s %9s %7s %7s %7s %7s %8s  %s\n' target executions exec/s cov ft new time \
  rss_mb result
printf '%s\n' "${summary[@]}"
exit $failed
