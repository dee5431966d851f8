// cuBLASLt's entry points, loaded with dlopen when the first CUDA executor is created instead
// of linked: the library (540 MB in CUDA 13) cost every process 60-80 ms and 25,000 page faults
// at start-up, GPU or not, and a host without it could not start llmc at all.
#pragma once

#include <cublasLt.h>

#include "llmc/status.h"

namespace llmc::cuda {

// The functions the CUDA backend calls, with cuBLASLt's own signatures.
struct CublasLt {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtDestroy) destroy;
  decltype(&::cublasLtGetStatusName) statusName;
  decltype(&::cublasLtGetStatusString) statusString;
  decltype(&::cublasLtMatmulDescCreate) matmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) matmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) matmulDescSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) matrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) matrixLayoutDestroy;
  decltype(&::cublasLtMatmulPreferenceCreate) preferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) preferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algoGetHeuristic;
  decltype(&::cublasLtMatmul) matmul;
};

// Loads libcublasLt.so.<the major version llmc was built against> once per process (later calls
// return the first call's result): the entry points, or an error naming the library and the
// loader's reason, or the first function it lacks.
Status loadCublasLt(const CublasLt** out);

// The entry points after loadCublasLt succeeded (every cuBLASLt call follows an executor's
// creation, which loads them).
const CublasLt& cublasLt();

}  // namespace llmc::cuda
