// The backends built into this runtime: one registration line each (core/backend.h). A new
// backend is a folder under runtime/src plus its line here.
#include "core/backend.h"

namespace llmc {

void registerCpuBackend();   // runtime/src/cpu/executor.cpp
void registerCudaBackend();  // runtime/src/cuda/executor.cpp, or its absence below

#ifndef LLMC_HAVE_CUDA
// Known but not built: Session::create says how to get it.
void registerCudaBackend() {
  BackendInfo info;
  info.kind = Backend::kCuda;
  info.name = "cuda";
  info.target = "cuda-";
  info.unavailable =
      "this runtime was built without CUDA (configure with -DLLMC_ENABLE_CUDA=ON where nvcc is "
      "installed)";
  registerBackend(info);
}
#endif

void registerBuiltinBackends() {
  registerCpuBackend();
  registerCudaBackend();
}

}  // namespace llmc
