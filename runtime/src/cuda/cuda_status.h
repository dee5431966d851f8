// CUDA errors as llmc Status values: every CUDA call's result goes through cudaStatus(), which
// names the call or kernel that failed (STYLE.md §10, §14).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "llmc/status.h"

namespace llmc::cuda {

// okStatus() for cudaSuccess; otherwise "<what>: <error name> (<error text>)", kUnavailable
// when there is no usable driver or device, kInternal for anything else.
// A failed call's error is also taken off the runtime's last-error slot (cudaGetLastError), so
// that a later launch check does not report it again as its own.
inline Status cudaStatus(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return okStatus();
  cudaGetLastError();
  std::string message = what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
  if (error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice ||
      error == cudaErrorNotSupported || error == cudaErrorSystemDriverMismatch)
    return unavailable(message);
  return internalError(message);
}

}  // namespace llmc::cuda

// Returns the Status of a failed CUDA call from the enclosing function.
#define LLMC_CUDA_RETURN_IF_ERROR(expr, what) \
  LLMC_RETURN_IF_ERROR(::llmc::cuda::cudaStatus((expr), (what)))
