// llm.fused_matmul through cuBLASLt (kernels.h). Row-major y = a·b is computed as the
// column-major yᵀ = bᵀ·aᵀ, so no operand is copied or transposed.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "cuda/cublas_status.h"
#include "cuda/cuda_status.h"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

enum class EpilogueSplit { kInLt, kAfter };

bool knownActivation(const char* name) {
  for (const char* known : {"none", "relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid", "tanh"})
    if (std::strcmp(name, known) == 0) return true;
  return false;
}

// RAII owners of cuBLASLt descriptors, so every early return releases them.
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLt().matmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { cublasLt().matrixLayoutDestroy(d); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const { cublasLt().preferenceDestroy(d); }
};

}  // namespace

const cublasLtMatmulAlgo_t* MatMulAlgoCache::find(const Key& key) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const auto& entry, const Key& k) { return entry.first < k; });
  return it != entries_.end() && !(key < it->first) ? &it->second : nullptr;
}

void MatMulAlgoCache::insert(const Key& key, const cublasLtMatmulAlgo_t& algo) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const auto& entry, const Key& k) { return entry.first < k; });
  if (it != entries_.end() && !(key < it->first)) it->second = algo;
  else entries_.insert(it, {key, algo});
}

size_t MatMulAlgoCache::size() const { return entries_.size(); }

Status MatMulParams::check() const {
  if (!handle) return invalidArgument("LlmFusedMatMul (CUDA): no cuBLASLt handle");
  if (!a || !b || !y) return invalidArgument("LlmFusedMatMul (CUDA): a, b and y are required");
  if (m < 0 || n < 1 || k < 1) return invalidArgument("LlmFusedMatMul (CUDA): needs n, k >= 1");
  if (!activation || !knownActivation(activation))
    return invalidArgument(std::string("LlmFusedMatMul (CUDA): unknown activation '") +
                           (activation ? activation : "(null)") + "'");
  if (ldy != 0 && ldy < n) return invalidArgument("LlmFusedMatMul (CUDA): ldy below n");
  if (ldy != 0 && ldy != n && activation && std::strcmp(activation, "none") != 0 &&
      std::strcmp(activation, "relu") != 0 && std::strcmp(activation, "gelu_tanh") != 0)
    return invalidArgument("LlmFusedMatMul (CUDA): a second-pass activation needs ldy = n");
  if (e4m3) {
    if (!trans_b || bias || !a_scale || std::strcmp(activation, "none") != 0 || alpha != 1.0f)
      return invalidArgument("LlmFusedMatMul (CUDA): FP8 products take a transposed b, an a_scale, and no bias, "
                             "alpha or activation");
  } else if (input_dtype != DType::kFloat32 && input_dtype != DType::kBFloat16 && input_dtype != DType::kFloat16) {
    return invalidArgument("LlmFusedMatMul (CUDA): inputs must be float32, bfloat16 or float16");
  }
  if (workspace_bytes > 0 && !workspace) return invalidArgument("LlmFusedMatMul (CUDA): workspace size without a workspace");
  return okStatus();
}

Status launchMatMul(const MatMulParams& p, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(p.check());
  if (p.m == 0) return okStatus();
  const std::string act = p.activation;
  const bool lt_epilogue = act == "none" || act == "relu" || act == "gelu_tanh";
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (p.bias) {
    epilogue = act == "relu"        ? CUBLASLT_EPILOGUE_RELU_BIAS
               : act == "gelu_tanh" ? CUBLASLT_EPILOGUE_GELU_BIAS
                                    : CUBLASLT_EPILOGUE_BIAS;
  } else if (act == "relu") {
    epilogue = CUBLASLT_EPILOGUE_RELU;
  } else if (act == "gelu_tanh") {
    epilogue = CUBLASLT_EPILOGUE_GELU;
  }
  const bool half = p.e4m3 || p.input_dtype != DType::kFloat32;
  const cudaDataType_t in_type = p.e4m3                              ? CUDA_R_8F_E4M3
                                 : p.input_dtype == DType::kBFloat16 ? CUDA_R_16BF
                                 : p.input_dtype == DType::kFloat16  ? CUDA_R_16F
                                                                     : CUDA_R_32F;
  cublasLtMatmulDesc_t raw_desc = nullptr;
  LLMC_CUBLAS_RETURN_IF_ERROR(
      cublasLt().matmulDescCreate(
          &raw_desc, p.allow_tf32 && !half ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
          CUDA_R_32F),
      "cublasLtMatmulDescCreate");
  std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter> desc(raw_desc);
  // Column-major: A' = b viewed as [n, k] (transposed when b is [k, n] row-major), B' = a as [k, m].
  const cublasOperation_t op_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = CUBLAS_OP_N;
  LLMC_CUBLAS_RETURN_IF_ERROR(cublasLt().matmulDescSetAttribute(
                                  desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
                              "TRANSA");
  LLMC_CUBLAS_RETURN_IF_ERROR(cublasLt().matmulDescSetAttribute(
                                  desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
                              "TRANSB");
  LLMC_CUBLAS_RETURN_IF_ERROR(
      cublasLt().matmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                        sizeof(epilogue)),
      "EPILOGUE");
  if (p.e4m3)  // our a is cuBLAS's B (the column-major view swaps the operands)
    LLMC_CUBLAS_RETURN_IF_ERROR(
        cublasLt().matmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                          &p.a_scale, sizeof(p.a_scale)),
        "B_SCALE_POINTER");
  if (p.bias)
    LLMC_CUBLAS_RETURN_IF_ERROR(
        cublasLt().matmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias,
                                          sizeof(p.bias)),
        "BIAS_POINTER");
  cublasLtMatrixLayout_t raw_a = nullptr, raw_b = nullptr, raw_c = nullptr;
  // b row-major [k, n] is column-major [n, k] with ld n; row-major [n, k] is column-major [k, n], ld k.
  LLMC_CUBLAS_RETURN_IF_ERROR(
      cublasLt().matrixLayoutCreate(&raw_a, in_type, p.trans_b ? p.k : p.n, p.trans_b ? p.n : p.k,
                                    p.trans_b ? p.k : p.n),
      "cublasLtMatrixLayoutCreate(b)");
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter> layout_a(raw_a);
  LLMC_CUBLAS_RETURN_IF_ERROR(cublasLt().matrixLayoutCreate(&raw_b, in_type, p.k, p.m, p.k),
                              "cublasLtMatrixLayoutCreate(a)");
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter> layout_b(raw_b);
  const int64_t ldy = p.ldy != 0 ? p.ldy : p.n;
  LLMC_CUBLAS_RETURN_IF_ERROR(cublasLt().matrixLayoutCreate(&raw_c, CUDA_R_32F, p.n, p.m, ldy),
                              "cublasLtMatrixLayoutCreate(y)");
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter> layout_c(raw_c);
  // The operands' actual alignment, told to the heuristic (it assumes 256 bytes otherwise; arena
  // values and column slices may have less) and part of the cache key.
  auto alignment = [](const void* ptr) {
    uint32_t a = 256;
    while (a > 1 && reinterpret_cast<uintptr_t>(ptr) % a != 0) a /= 2;
    return a;
  };
  const uint32_t align_a = alignment(p.b), align_b = alignment(p.a), align_c = alignment(p.y);
  const MatMulAlgoCache::Key key{p.m, p.n, p.k, ldy,
                                 (p.trans_b ? 1 : 0) | (p.bias ? 2 : 0) | (p.allow_tf32 ? 4 : 0) |
                                     static_cast<int>(epilogue) << 3,
                                 (p.e4m3 ? 255 : static_cast<int>(p.input_dtype)) |
                                     static_cast<int>(std::min({align_a, align_b, align_c})) << 8};
  const cublasLtMatmulAlgo_t* cached = p.algo_cache ? p.algo_cache->find(key) : nullptr;
  cublasLtMatmulHeuristicResult_t heuristic;
  if (cached) {
    heuristic.algo = *cached;
  } else {
    cublasLtMatmulPreference_t raw_pref = nullptr;
    LLMC_CUBLAS_RETURN_IF_ERROR(cublasLt().preferenceCreate(&raw_pref),
                                "cublasLtMatmulPreferenceCreate");
    std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter> pref(raw_pref);
    LLMC_CUBLAS_RETURN_IF_ERROR(
        cublasLt().preferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &p.workspace_bytes, sizeof(p.workspace_bytes)),
        "MAX_WORKSPACE_BYTES");
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}};
    for (const auto& [attribute, bytes] : alignments)
      LLMC_CUBLAS_RETURN_IF_ERROR(
          cublasLt().preferenceSetAttribute(pref.get(), attribute, &bytes, sizeof(bytes)),
          "MIN_ALIGNMENT");
    int found = 0;
    LLMC_CUBLAS_RETURN_IF_ERROR(
        cublasLt().algoGetHeuristic(p.handle, desc.get(), layout_a.get(), layout_b.get(),
                                    layout_c.get(), layout_c.get(), pref.get(), 1, &heuristic,
                                    &found),
        "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0)
      return unimplemented("LlmFusedMatMul (CUDA): cuBLASLt has no algorithm for [" + std::to_string(p.m) +
                           ", " + std::to_string(p.k) + "] x [" + std::to_string(p.k) + ", " +
                           std::to_string(p.n) + "]");
    if (p.algo_cache) p.algo_cache->insert(key, heuristic.algo);
  }
  const float beta = 0.0f;
  LLMC_CUBLAS_RETURN_IF_ERROR(
      cublasLt().matmul(p.handle, desc.get(), &p.alpha, p.b, layout_a.get(), p.a, layout_b.get(),
                        &beta, p.y, layout_c.get(), p.y, layout_c.get(), &heuristic.algo,
                        p.workspace, p.workspace_bytes, stream),
      "cublasLtMatmul");
  if (lt_epilogue) return okStatus();
  ActivationParams activation;
  activation.y = p.y;
  activation.rows = p.m;
  activation.width = p.n;
  activation.activation = p.activation;
  return launchActivation(activation, stream);
}

}  // namespace llmc::cuda
