// --llmc-prune-weights: structured pruning of MLP channels, then unstructured and N:M pruning
// of the products' constant weights (docs/pruning.md). Magnitude and Wanda prune with the runtime's
// LlmPruneWeight kernel, so the pruned weight carries its recipe; SparseGPT's updated weight is a
// literal. Runs after the fusions (the products and their calibration statistics are the
// quantizer's) and before quantization, which then quantizes the pruned weights.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/prune.h"
#include "pipeline/Calibration.h"
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_PRUNEWEIGHTS
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "prune";

// Whether a product's weight is [N, K] (gated_mlp's never is).
int64_t transB(Operation* op) {
  auto t = op->getAttrOfType<IntegerAttr>("trans_b");
  return t ? t.getInt() : 0;
}

class PruneWeightsPass : public impl::PruneWeightsBase<PruneWeightsPass> {
 public:
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    const bool unstructured = !method.empty();
    if (unstructured && !parsePruneMethod(method, &method_)) {
      func.emitError() << "unknown pruning method '" << method
                       << "' (methods: magnitude, wanda, sparsegpt)";
      return signalPassFailure();
    }
    if (Status parsed = unstructured ? parsePrunePattern(pattern, &pattern_) : okStatus();
        !parsed.ok()) {
      func.emitError() << parsed.message();
      return signalPassFailure();
    }
    if (!(mlp >= 0 && mlp < 1) || channelAlign < 1) {
      func.emitError() << "mlp must be in [0, 1) and channel-align positive";
      return signalPassFailure();
    }
    if (!calibStats.empty()) {
      if (Status read = readCalibrationStats(calibStats, "", &stats_); !read.ok()) {
        func.emitError() << read.message();
        return signalPassFailure();
      }
    }
    if (((unstructured && method_ != PruneMethod::kMagnitude) || mlp > 0) && stats_.empty()) {
      func.emitError() << (mlp > 0 ? std::string("mlp") : method.getValue())
                       << " pruning needs calibration statistics (calib-stats)";
      return signalPassFailure();
    }
    std::vector<Operation*> producers, products;
    for (Operation& op : func.getBody().front()) {
      if (isOp(&op, "llm.gated_mlp") || isOp(&op, "llm.fused_matmul")) producers.push_back(&op);
      if (isOp(&op, "llm.fused_matmul") || isOp(&op, "llm.gated_mlp") || isOp(&op, "nn.matmul"))
        products.push_back(&op);
    }
    if (mlp > 0)
      for (Operation* op : producers) pruneChannels(func, op);
    if (unstructured) {
      llvm::DenseSet<Operation*> returned;
      for (Value v : func.getBody().front().getTerminator()->getOperands())
        if (Operation* def = v.getDefiningOp()) returned.insert(def);
      for (Operation* op : products) {
        if (returned.count(op)) {
          if (float32Constant(op->getOperand(1)))
            logFusion(func, {false, kPass, name(op), nodeNames({op}),
                             "its result is a model output (an LM head, a pooler): stays dense"});
          continue;
        }
        prune(func, op);
      }
    }
    eraseDeadOps(func.getBody().front());
  }

 private:
  PruneMethod method_ = PruneMethod::kMagnitude;
  PrunePattern pattern_;
  CalibrationStats stats_;

  // Structured: an MLP `up` (gated_mlp, or fused_matmul with any activation, both per
  // channel) whose only user is the down projection loses its lowest-scoring channels.
  void pruneChannels(func::FuncOp func, Operation* up) {
    Value h = up->getResult(0);
    if (!h.hasOneUse()) return;
    Operation* down = *h.getUsers().begin();
    if (!(isOp(down, "llm.fused_matmul") || isOp(down, "nn.matmul")) || down->getOperand(0) != h)
      return;
    const bool gated = isOp(up, "llm.gated_mlp");
    auto h_type = dyn_cast<RankedTensorType>(h.getType());
    auto up_w = dyn_cast<RankedTensorType>(up->getOperand(1).getType());
    auto down_w = dyn_cast<RankedTensorType>(down->getOperand(1).getType());
    if (!h_type || !up_w || !down_w || h_type.getRank() < 1 ||
        h_type.isDynamicDim(h_type.getRank() - 1) || up_w.getRank() != 2 || down_w.getRank() != 2 ||
        !float32Constant(up->getOperand(1)))
      return;
    std::optional<Tensor> down_weight = float32Constant(down->getOperand(1));
    if (!down_weight) return;
    const int64_t up_trans = transB(up), down_trans = transB(down);
    const int64_t f = h_type.getDimSize(h_type.getRank() - 1);
    if ((down_trans ? down_w.getDimSize(1) : down_w.getDimSize(0)) != f) return;
    const std::string nodes = nodeNames({up, down});
    PrunePattern fraction;
    fraction.sparsity = mlp;
    const std::string label = "mlp " + fraction.text() + (gated ? " gated-mlp" : " matmul");
    auto skip = [&](const std::string& why) { logFusion(func, {false, kPass, label, nodes, why}); };
    Value bias = gated || isa<NoneType>(up->getOperand(2).getType()) ? Value() : up->getOperand(2);
    if (bias && !float32Constant(bias)) return skip("its bias is not a constant; stays whole");
    auto stats = stats_.find(nodeNameOf(down));
    if (stats == stats_.end() || stats->second.mean_sq.numElements() != f)
      return skip("the calibration did not see the down projection; stays whole");
    const int64_t align = channelAlign;
    const int64_t kept = std::clamp<int64_t>(
        std::llround((1 - mlp) * static_cast<double>(f) / static_cast<double>(align)) * align,
        align, f);
    if (kept >= f)
      return skip("rounding the kept channels to a multiple of " + std::to_string(align) +
                  " removes none");
    const std::vector<int64_t> keep =
        keptMlpChannels(*down_weight, down_trans != 0, stats->second.mean_sq.data<float>(), kept);
    std::vector<int64_t> removed;
    for (int64_t c = 0, i = 0; c < f; ++c)
      if (i < kept && keep[i] == c)
        ++i;
      else
        removed.push_back(c);
    std::vector<int64_t> up_columns = keep;
    if (gated)  // the gate's columns, then the same channels of the up half
      for (int64_t c : keep) up_columns.push_back(f + c);
    OpBuilder b(up);
    Location loc = up->getLoc();
    auto gather = [&](Value v, int64_t axis, const std::vector<int64_t>& indices) {
      return kernelConstant(b, loc, "Gather", {b.getNamedAttr("axis", b.getI64IntegerAttr(axis))},
                            {v, int64Constant(b, loc, indices)});
    };
    Value new_up = gather(up->getOperand(1), up_trans ? 0 : 1, up_columns);
    Value new_bias = bias ? gather(bias, 0, keep) : Value();
    Value new_down = gather(down->getOperand(1), down_trans ? 1 : 0, keep);
    if (!new_up || !new_down || (bias && !new_bias))
      return skip("the Gather of its weights failed; stays whole");
    up->setOperand(1, new_up);
    if (new_bias) up->setOperand(2, new_bias);
    SmallVector<int64_t> shape(h_type.getShape());
    shape.back() = kept;
    h.setType(RankedTensorType::get(shape, h_type.getElementType()));
    down->setOperand(1, new_down);
    // Which input channels the down projection kept: the quantizer slices its statistics too.
    down->setAttr("llmc.kept_inputs", b.getDenseI64ArrayAttr(keep));
    sliceChannels(&stats->second, keep);
    std::string detail =
        "kept " + std::to_string(kept) + " of " + std::to_string(f) + " channels; removed";
    for (int64_t c : removed) detail += " " + std::to_string(c);
    logFusion(func, {true, kPass, label, nodes, detail});
  }

  std::string name(Operation* op) const {
    return std::string(pruneMethodName(method_)) + " " + pattern_.text() +
           (isOp(op, "llm.gated_mlp") ? " gated-mlp" : " matmul");
  }

  void prune(func::FuncOp func, Operation* op) {
    Value w = op->getOperand(1);
    auto w_type = dyn_cast<RankedTensorType>(w.getType());
    std::optional<Tensor> weight =
        w_type && w_type.getRank() == 2 ? float32Constant(w) : std::nullopt;
    if (!weight) return;  // not a product with a float32 weight
    const std::string nodes = nodeNames({op});
    auto skip = [&](const std::string& why) {
      logFusion(func, {false, kPass, name(op), nodes, why});
    };
    const int64_t trans_b = transB(op);
    const int64_t k = w_type.getDimSize(trans_b ? 1 : 0);
    if (Status fits = checkPrunePattern(pattern_, k); !fits.ok())
      return skip(fits.message() + "; stays dense");
    auto stats = stats_.find(nodeNameOf(op));
    const ActivationStats* seen =
        stats != stats_.end() && stats->second.absmax.numElements() == k ? &stats->second : nullptr;
    if (method_ != PruneMethod::kMagnitude && !seen)
      return skip("the calibration did not see this product; stays dense");
    OpBuilder b(op);
    Location loc = op->getLoc();
    Value pruned;
    if (method_ == PruneMethod::kSparseGpt) {
      if (seen->gram.dtype() != DType::kFloat32 || seen->gram.numElements() != k * k)
        return skip("the calibration holds no XᵀX for it; stays dense");
      SparseGptOptions options;
      options.damping = damping;
      Tensor result;
      if (Status s = sparseGptPrune(*weight, trans_b != 0, pattern_, seen->gram, options, &result);
          !s.ok())
        return skip(s.message() + "; stays dense");
      pruned = float32ConstantOp(b, loc, result, "");
    } else {
      SmallVector<NamedAttribute> params{
          b.getNamedAttr("method", b.getStringAttr(pruneMethodName(method_))),
          b.getNamedAttr("trans_b", b.getI64IntegerAttr(trans_b))};
      if (pattern_.nm()) {
        params.push_back(b.getNamedAttr("n", b.getI64IntegerAttr(pattern_.n)));
        params.push_back(b.getNamedAttr("m", b.getI64IntegerAttr(pattern_.m)));
      } else {
        params.push_back(b.getNamedAttr("sparsity", b.getF64FloatAttr(pattern_.sparsity)));
      }
      SmallVector<Value> inputs{w};
      if (method_ == PruneMethod::kWanda) {
        // ||x_j||2 up to a factor common to every channel, which no ranking sees.
        Tensor norms = Tensor::allocate(DType::kFloat32, {k});
        for (int64_t j = 0; j < k; ++j)
          norms.data<float>()[j] = std::sqrt(seen->mean_sq.data<float>()[j]);
        inputs.push_back(float32ConstantOp(b, loc, norms, ""));
      }
      pruned = kernelConstant(b, loc, "LlmPruneWeight", params, inputs);
      if (!pruned) return skip("the pruning kernel refused the weight; stays dense");
    }
    std::optional<Tensor> result = float32Constant(pruned);
    char detail[160];
    const int n =
        std::snprintf(detail, sizeof(detail), "%.1f%% of %lld weights zero",
                      100 * zeroFraction(*result), static_cast<long long>(weight->numElements()));
    if (seen && seen->samples.rank() == 2 && seen->samples.dim(0) > 0)
      std::snprintf(detail + n, sizeof(detail) - n,
                    "; relative output error %.4f on %lld calibration rows",
                    relativeOutputError(seen->samples, *weight, *result, trans_b != 0),
                    static_cast<long long>(std::min<int64_t>(seen->samples.dim(0), 128)));
    op->setOperand(1, pruned);
    // What sparse storage (--llmc-quantize-weights) takes as its stride: no row keeps more.
    op->setAttr("llmc.kept_per_row", b.getI64IntegerAttr(pattern_.keptPerRow(k)));
    logFusion(func, {true, kPass, name(op), nodes, detail});
  }
};

}  // namespace
}  // namespace llmc
