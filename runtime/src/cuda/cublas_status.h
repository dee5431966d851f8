// cuBLASLt errors as Status values naming the call (STYLE.md §14).
#pragma once

#include <cublasLt.h>

#include <string>

#include "llmc/status.h"

namespace llmc::cuda {

inline Status cublasStatus(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return okStatus();
  std::string message = what + ": " + cublasLtGetStatusName(status) + " (" +
                        cublasLtGetStatusString(status) + ")";
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH)
    return unimplemented(message);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return resourceExhausted(message);
  if (status == CUBLAS_STATUS_INVALID_VALUE) return invalidArgument(message);
  return internalError(message);
}

}  // namespace llmc::cuda

#define LLMC_CUBLAS_RETURN_IF_ERROR(expr, what) \
  LLMC_RETURN_IF_ERROR(::llmc::cuda::cublasStatus((expr), (what)))
