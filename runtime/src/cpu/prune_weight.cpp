// LlmPruneWeight (core/prune.h): magnitude or Wanda pruning of a float32 weight, the recipe
// step `llmc compile --prune` records so that `llmc refit` prunes new weights the same way.
// Inputs: the weight and, for Wanda, the input channels' norms (float32 [K]); parameters
// method ("magnitude" or "wanda"), sparsity (unstructured) or n and m (N:M), trans_b.
#include <cstring>

#include "core/kernel.h"
#include "core/prune.h"

namespace llmc {

namespace {

Status pruneWeightKernel(KernelContext& ctx) {
  const Tensor* w = ctx.input(0);
  if (!w || w->rank() != 2 || w->dtype() != DType::kFloat32)
    return kernelError(ctx, "LlmPruneWeight needs a 2-D float32 weight");
  PruneMethod method = PruneMethod::kMagnitude;
  const std::string name = ctx.params().getString("method", "");
  if (!parsePruneMethod(name, &method) || method == PruneMethod::kSparseGpt)
    return kernelError(ctx, "LlmPruneWeight prunes by magnitude or wanda, not '" + name + "'");
  PrunePattern pattern;
  pattern.n = static_cast<int>(ctx.params().getInt("n", 0));
  pattern.m = static_cast<int>(ctx.params().getInt("m", 0));
  pattern.sparsity = pattern.nm() ? 1.0 - static_cast<double>(pattern.n) / pattern.m
                                  : ctx.params().getFloat("sparsity", 0);
  if (pattern.nm() ? (pattern.n < 1 || pattern.n >= pattern.m || pattern.m > 64)
                   : !(pattern.sparsity >= 0 && pattern.sparsity < 1))
    return kernelError(ctx,
                       "LlmPruneWeight: no such pattern (sparsity in [0, 1), or 1 <= n < m <= 64)");
  const bool transposed = ctx.params().getInt("trans_b", 0) != 0;
  const int64_t k = transposed ? w->dim(1) : w->dim(0);
  const Tensor* norms = ctx.input(1);
  if ((method == PruneMethod::kWanda) != (norms != nullptr))
    return kernelError(
        ctx,
        "LlmPruneWeight: wanda takes the channel norms as its second input, magnitude nothing");
  if (norms && (norms->dtype() != DType::kFloat32 || norms->numElements() != k))
    return kernelError(ctx, "channel norms must be float32 [K = " + std::to_string(k) + "]");
  if (Status fits = checkPrunePattern(pattern, k); !fits.ok())
    return kernelError(ctx, fits.message());
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, w->shape(), &out));
  if (ctx.shapeOnly()) return okStatus();
  Tensor pruned;
  LLMC_RETURN_IF_ERROR(
      pruneWeight(*w, transposed, pattern, norms ? norms->data<float>() : nullptr, &pruned));
  std::memcpy(out->data(), pruned.data(), pruned.sizeBytes());
  return okStatus();
}

}  // namespace

void registerPruneKernels(KernelRegistry& registry) {
  registry.add({"LlmPruneWeight", 1, 2, 1, 1, pruneWeightKernel});
}

}  // namespace llmc
