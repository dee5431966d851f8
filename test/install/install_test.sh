#!/usr/bin/env bash
# The SDK as users get it (docs/c-api.md): installs BUILD into a fresh prefix and checks
#  - the layout: the CLI, libllmc.so with its versioned SONAME and links, the static runtime,
#    the headers, the CMake package and the pkg-config file;
#  - libllmc.so needs no library beyond the C/C++ system ones and exports the C API and the
#    public C++ API only (every function c_api.h declares, nothing of the kernels, FlatBuffers
#    or nlohmann_json);
#  - examples/generate, configured and built out of tree with find_package(llmc) against the
#    shared and then the static runtime, serves its two requests;
#  - examples/c/generate.c, built with `cc ... $(pkg-config --cflags --libs llmc)`, prints what
#    the installed `llmc generate` prints;
#  - libllmc_compiler.so (llmc::compiler) exports llmc/compiler.h's API only, and
#    examples/compile, built out of tree with find_package(llmc COMPONENTS compiler), writes the
#    same engine bytes as the installed `llmc compile`.
#   install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 source=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "cmake --install (see $work/install.log)"
libdir=$(cd "$prefix" && ls -d lib*/ | head -n 1)
libdir="$prefix/${libdir%/}"
for f in bin/llmc include/llmc/c_api.h include/llmc/engine.h include/llmc/generator.h include/llmc/compiler.h; do
  [[ -f "$prefix/$f" ]] || fail "$f not installed"
done
for f in libllmc.so libllmc.so.0 libllmc_runtime.a cmake/llmc/llmcConfig.cmake cmake/llmc/llmcConfigVersion.cmake \
         cmake/llmc/llmcTargets.cmake cmake/llmc/llmcStaticTargets.cmake pkgconfig/llmc.pc \
         libllmc_compiler.so libllmc_compiler.so.0 cmake/llmc/llmcCompilerTargets.cmake; do
  [[ -e "$libdir/$f" ]] || fail "$libdir/$f not installed"
done
echo "PASS the layout: CLI, libllmc.so, static runtime, libllmc_compiler.so, headers, CMake package, pkg-config"
[[ -z "$(ls "$prefix/include/llmc" | grep -v '\.h$')" ]] || fail "non-header files under include/llmc"

lib="$libdir/libllmc.so"
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ "$soname" == libllmc.so.0 ]] || fail "SONAME '$soname', want libllmc.so.0"
needed=$(readelf -d "$lib" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')
for n in $needed; do
  case "$n" in
    libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|ld-linux*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
    # cuBLASLt is loaded when the first CUDA session is created (dlopen), never linked.
    *) fail "libllmc.so needs $n (only C/C++ system libraries expected): $needed" ;;
  esac
done
echo "PASS SONAME libllmc.so.0; needs only: $needed"

exports="$work/exports.txt"
nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | c++filt > "$exports"
for fn in $(grep -oE '\bllmc_[a-z_]+\(' "$source/runtime/include/llmc/c_api.h" | tr -d '(' | sort -u); do
  grep -qx "$fn" "$exports" || fail "$fn (declared in c_api.h) is not exported"
done
unexpected=$(grep -vE '^(llmc_[a-z_]+|llmc::(Status|Tensor|Engine|Session|Generator|BatchGenerator|Tokenizer|Drift[A-Za-z]+)::.*|llmc::[a-z][A-Za-z]*(\[abi:cxx11\])?\(.*|LLMC_0)$' "$exports" || true)
[[ -z "$unexpected" ]] || fail "libllmc.so exports more than the public API: $(echo "$unexpected" | head -n 5)"
grep -qE 'llmc::Engine::load\(' "$exports" || fail "the C++ API (llmc::Engine::load) is not exported"
echo "PASS exports: $(grep -c '^llmc_' "$exports") C functions, $(grep -c '^llmc::' "$exports") C++ symbols, nothing else"

# An engine from the installed CLI.
engine="$work/gpt2.engine"
"$prefix/bin/llmc" compile "$source/test/models/gpt2_tiny/model.onnx" -o "$engine" >/dev/null

for kind in shared static; do
  example="$work/example-$kind"
  cmake -S "$source/examples/generate" -B "$example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DLLMC_STATIC=$([[ $kind == static ]] && echo ON || echo OFF) \
    >"$work/example-$kind.log" 2>&1 || { cat "$work/example-$kind.log"; fail "configure the example ($kind)"; }
  cmake --build "$example" >>"$work/example-$kind.log" 2>&1 || { tail -n 30 "$work/example-$kind.log"; fail "build the example ($kind)"; }
  if [[ $kind == shared ]]; then
    readelf -d "$example/llmc_example_generate" | grep -q 'Shared library: \[libllmc.so.0\]' ||
      fail "the shared example does not link libllmc.so.0"
  else
    ! readelf -d "$example/llmc_example_generate" | grep -q 'libllmc.so' || fail "the static example links libllmc.so"
  fi
  out=$("$example/llmc_example_generate" "$engine" 5,6,7 12 4 2>&1) || fail "the example ($kind) failed: $out"
  grep -q "request 1 cancelled after 4 tokens" <<<"$out" && grep -q "request 2 done: 12 tokens" <<<"$out" ||
    fail "the example ($kind) printed: $out"
  target=llmc::runtime
  [[ $kind == static ]] && target=llmc::runtime_static
  echo "PASS examples/generate built out of tree against $target serves both requests"
done

# C through pkg-config.
demo_engine="$work/demo.engine"
"$prefix/bin/llmc" compile "$source/test/models/demo/model.onnx" -o "$demo_engine" \
  --tokenizer "$source/test/models/demo/tokenizer.json" >/dev/null
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[[ "$(pkg-config --modversion llmc)" == "$(sed -n 's/^project(llmc VERSION \([0-9.]*\).*/\1/p' "$source/CMakeLists.txt")" ]] ||
  fail "pkg-config --modversion llmc: $(pkg-config --modversion llmc)"
cc -std=c11 -Wall -Wextra -Werror "$source/examples/c/generate.c" $(pkg-config --cflags --libs llmc) \
  -Wl,-rpath,"$libdir" -o "$work/c_generate" || fail "cc with pkg-config's flags"
prompt="And God said"
want=$("$prefix/bin/llmc" generate "$demo_engine" --prompt "$prompt" --max-new-tokens 16 2>/dev/null)
got=$("$work/c_generate" "$demo_engine" "$prompt" 16 2>/dev/null) || fail "the C program failed"
[[ "$got" == "$want" && -n "$got" ]] || fail "the C program printed '$got', llmc generate '$want'"
echo "PASS a C program built through pkg-config prints what llmc generate prints: $got"
# The compiler's C++ API.
clib="$libdir/libllmc_compiler.so"
soname=$(readelf -d "$clib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ "$soname" == libllmc_compiler.so.0 ]] || fail "SONAME '$soname', want libllmc_compiler.so.0"
nm -D --defined-only "$clib" | awk '{print $3}' | sed 's/@.*//' | c++filt > "$work/compiler-exports.txt"
for fn in compileModel compileModelBytes floatCompileOptions fusionPassNames; do
  grep -qE "^llmc::$fn(\[abi:cxx11\])?\(" "$work/compiler-exports.txt" || fail "llmc::$fn is not exported by libllmc_compiler.so"
done
unexpected=$(grep -vE '^(llmc::(compileModel|compileModelBytes|floatCompileOptions|fusionPassNames)(\[abi:cxx11\])?\(.*|LLMC_COMPILER_0)$' \
  "$work/compiler-exports.txt" || true)
[[ -z "$unexpected" ]] || fail "libllmc_compiler.so exports more than llmc/compiler.h: $(echo "$unexpected" | head -n 5)"
echo "PASS libllmc_compiler.so: SONAME $soname, exports llmc/compiler.h's $(wc -l < "$work/compiler-exports.txt") symbols only"
example="$work/example-compile"
cmake -S "$source/examples/compile" -B "$example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/example-compile.log" 2>&1 ||
  { cat "$work/example-compile.log"; fail "configure the compile example"; }
cmake --build "$example" >>"$work/example-compile.log" 2>&1 ||
  { tail -n 30 "$work/example-compile.log"; fail "build the compile example"; }
readelf -d "$example/llmc_example_compile" | grep -q 'Shared library: \[libllmc_compiler.so.0\]' ||
  fail "the compile example does not link libllmc_compiler.so.0"
out=$("$example/llmc_example_compile" "$source/test/models/gpt2_tiny/model.onnx" "$work/gpt2-api.engine" 2>&1) ||
  fail "the compile example failed: $out"
grep -q "decoder language model: 2 layers" <<<"$out" && grep -q "input input_ids int64" <<<"$out" ||
  fail "the compile example printed: $out"
cmp -s "$work/gpt2-api.engine" "$engine" || fail "llmc::compileModel and llmc compile wrote different engines"
out=$("$example/llmc_example_compile" "$source/test/models/gpt2_tiny/model.onnx" "$work/bad.engine" int3 2>&1) &&
  fail "the compile example accepted --quantize int3"
grep -q "compile failed: .*int3" <<<"$out" || fail "a bad option through llmc::compileModel said: $out"
echo "PASS examples/compile built out of tree against llmc::compiler writes llmc compile's engine, byte for byte"
echo "all install checks passed"
