// LlmPruneWeight (core/prune.h): magnitude or Wanda pruning of a float32 weight, the recipe
// step `llmc compile --prune` records so that `llmc refit` prunes new weights the same way.
// Inputs: the weight and, for Wanda, the input channels' norms (float32 [K]); parameters
// method ("magnitude" or "wanda"), sparsity (unstructured) or n and m (N:M), trans_b.
// LlmSparsifyWeight (core/sparse.h): an int8 weight [N, K] (a quantizer's data) as its packed
// values [N, stride] and mask [N, ceil(K / 8)], the recipe step of sparse storage.
#include <cstring>

#include "core/kernel.h"
#include "core/prune.h"
#include "core/sparse.h"

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

Status sparsifyWeightKernel(KernelContext& ctx) {
  const Tensor* w = ctx.input(0);
  if (!w || w->rank() != 2 || w->dtype() != DType::kInt8)
    return kernelError(ctx, "LlmSparsifyWeight needs a 2-D int8 weight [N, K]");
  const int64_t n = w->dim(0), k = w->dim(1), stride = ctx.params().getInt("stride", -1);
  if (stride < 0 || stride > k)
    return kernelError(ctx, "LlmSparsifyWeight: stride " + std::to_string(stride) +
                                " is not in [0, K = " + std::to_string(k) + "]");
  Tensor* packed = nullptr;
  Tensor* mask = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kInt8, {n, stride}, &packed));
  if (ctx.numOutputs() > 1)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, DType::kUInt8, {n, (k + 7) / 8}, &mask));
  if (ctx.shapeOnly()) return okStatus();
  // `llmc refit` replays one output at a time: both are computed, the asked ones kept.
  Tensor mask_bits = Tensor::allocate(DType::kUInt8, {n, (k + 7) / 8});
  if (Status s = packSparseInt8Rows(w->data<int8_t>(), n, k, stride, packed->data<int8_t>(),
                                    mask_bits.data<uint8_t>());
      !s.ok())
    return kernelError(ctx, s.message());
  if (mask) std::memcpy(mask->data(), mask_bits.data(), mask_bits.sizeBytes());
  return okStatus();
}

}  // namespace

void registerPruneKernels(KernelRegistry& registry) {
  registry.add({"LlmPruneWeight", 1, 2, 1, 1, pruneWeightKernel});
  registry.add({"LlmSparsifyWeight", 1, 1, 1, 2, sparsifyWeightKernel});
}

}  // namespace llmc
