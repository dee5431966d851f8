// Loading cuBLASLt on first use (cuda/cublaslt_api.h).
#include "cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <type_traits>

namespace llmc::cuda {
namespace {

CublasLt g_api;
Status g_status = okStatus();
std::once_flag g_once;

Status load() {
  const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  // Never closed: the executors' handles and the library live as long as the process. The
  // loader's search first (LD_LIBRARY_PATH, the system's cache), then the toolkit this build
  // used, where the linked library was found before (the build tree's run path).
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string reason;  // the search's, which names what it tried
  if (!library) {
    if (const char* error = dlerror()) reason = error;
#ifdef LLMC_CUDA_LIBRARY_DIR
    library =
        dlopen((std::string(LLMC_CUDA_LIBRARY_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  }
  if (!library)
    return unavailable("the CUDA backend needs cuBLASLt (" + name +
                       "), which could not be loaded: " +
                       (reason.empty() ? "no reason given" : reason) + "; install the CUDA " +
                       std::to_string(CUBLAS_VER_MAJOR) + " libraries or use the CPU backend");
  Status missing = okStatus();
  auto resolve = [&](auto& entry, const char* symbol) {
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(dlsym(library, symbol));
    if (!entry && missing.ok())
      missing = unavailable(name + " has no " + symbol + ": not the cuBLASLt llmc was built for");
  };
  resolve(g_api.create, "cublasLtCreate");
  resolve(g_api.destroy, "cublasLtDestroy");
  resolve(g_api.statusName, "cublasLtGetStatusName");
  resolve(g_api.statusString, "cublasLtGetStatusString");
  resolve(g_api.matmulDescCreate, "cublasLtMatmulDescCreate");
  resolve(g_api.matmulDescDestroy, "cublasLtMatmulDescDestroy");
  resolve(g_api.matmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  resolve(g_api.matrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  resolve(g_api.matrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  resolve(g_api.preferenceCreate, "cublasLtMatmulPreferenceCreate");
  resolve(g_api.preferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  resolve(g_api.preferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  resolve(g_api.algoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolve(g_api.matmul, "cublasLtMatmul");
  return missing;
}

}  // namespace

Status loadCublasLt(const CublasLt** out) {
  std::call_once(g_once, [] { g_status = load(); });
  if (!g_status.ok()) return g_status;
  *out = &g_api;
  return okStatus();
}

const CublasLt& cublasLt() { return g_api; }

}  // namespace llmc::cuda
