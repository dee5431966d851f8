// cuBLASLt errors as Status values naming the call (STYLE.md §14).
#pragma once

#include <cublasLt.h>

#include <string>

#include "cuda/cublaslt_api.h"
#include "llmc/status.h"

namespace llmc::cuda {

inline Status cublasStatus(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return okStatus();
  // A status comes from a call into the loaded library, so its names are there to read.
  const CublasLt& api = cublasLt();
  const std::string message =
      what + ": " +
      (api.statusName ? std::string(api.statusName(status)) + " (" + api.statusString(status) + ")"
                      : "cuBLAS status " + std::to_string(static_cast<int>(status)));
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH)
    return unimplemented(message);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return resourceExhausted(message);
  if (status == CUBLAS_STATUS_INVALID_VALUE) return invalidArgument(message);
  return internalError(message);
}

}  // namespace llmc::cuda

#define LLMC_CUBLAS_RETURN_IF_ERROR(expr, what) \
  LLMC_RETURN_IF_ERROR(::llmc::cuda::cublasStatus((expr), (what)))
