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
