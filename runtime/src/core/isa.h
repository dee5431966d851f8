// Building a loop once per ISA level and choosing at run time by cpuIsa() (core/cpu_features.h),
// so that LLMC_CPU_ISA and the tests' cap reach every kernel (an ifunc or target_clones choice
// is made by the loader and cannot be capped; it also crashed ThreadSanitizer at startup).
//
// The loop is written once as an LLMC_ISA_INLINE function; LLMC_TARGET_AVX2 wrappers inline it
// into code built for AVX2/FMA/F16C (GCC and clang inline a baseline function into a wider
// target), plain wrappers into the baseline.
#pragma once

#include "core/cpu_features.h"

#define LLMC_ISA_INLINE __attribute__((always_inline)) inline
#define LLMC_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
// AVX-512 F/BW/VL/DQ, with the compiler's vectorizer asked for 512-bit vectors whatever the
// tuning (GCC and clang prefer 256 bits under Intel AVX-512 tunings such as -mtune=skylake-avx512,
// where 512-bit code can lower the clock; the default tuning already picks 512). clang ignores a
// whole target string that names prefer-vector-width and has min_vector_width instead.
// clang-format off
#if defined(__clang__)
#define LLMC_TARGET_AVX512_WIDE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"), min_vector_width(512)))
#else
#define LLMC_TARGET_AVX512_WIDE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512")))
#endif
// clang-format on

// A region of functions built for `features` (a string literal, e.g. "avx512f,avx512bw"), for
// files whose kernels are written with intrinsics of a wider set throughout:
//   LLMC_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
//   ... functions ...
//   LLMC_TARGET_END
// (GCC: push_options + target; clang: an attribute pushed onto every function.)
#define LLMC_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define LLMC_TARGET_BEGIN(features) \
  LLMC_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define LLMC_TARGET_END LLMC_PRAGMA(clang attribute pop)
#else
#define LLMC_TARGET_BEGIN(features) _Pragma("GCC push_options") LLMC_PRAGMA(GCC target(features))
#define LLMC_TARGET_END _Pragma("GCC pop_options")
#endif

// GCC 12's AVX-512 conversions and reductions start from _mm512_undefined_*(), which
// -Wuninitialized and -Wmaybe-uninitialized report at every inlined use: files of such kernels
// say LLMC_ALLOW_UNDEFINED_VECTORS once at the top.
#if defined(__GNUC__) && !defined(__clang__)
#define LLMC_ALLOW_UNDEFINED_VECTORS                    \
  _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#else
#define LLMC_ALLOW_UNDEFINED_VECTORS
#endif
