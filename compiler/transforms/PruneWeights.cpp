// --llmc-prune-weights: unstructured and N:M pruning of the products' constant weights
// (docs/pruning.md). Magnitude and Wanda prune with the runtime's LlmPruneWeight kernel, so
// the pruned weight carries its recipe; SparseGPT's updated weight is a literal. Runs after
// the fusions (the products and their calibration statistics are the quantizer's) and before
// quantization, which then quantizes the pruned weights.
#include <cmath>
#include <cstdio>

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

class PruneWeightsPass : public impl::PruneWeightsBase<PruneWeightsPass> {
 public:
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!parsePruneMethod(method, &method_)) {
      func.emitError() << "unknown pruning method '" << method
                       << "' (methods: magnitude, wanda, sparsegpt)";
      return signalPassFailure();
    }
    if (Status parsed = parsePrunePattern(pattern, &pattern_); !parsed.ok()) {
      func.emitError() << parsed.message();
      return signalPassFailure();
    }
    if (!calibStats.empty()) {
      if (Status read = readCalibrationStats(calibStats, "", &stats_); !read.ok()) {
        func.emitError() << read.message();
        return signalPassFailure();
      }
    }
    if (method_ != PruneMethod::kMagnitude && stats_.empty()) {
      func.emitError() << method << " pruning needs calibration statistics (calib-stats)";
      return signalPassFailure();
    }
    llvm::DenseSet<Operation*> returned;
    for (Value v : func.getBody().front().getTerminator()->getOperands())
      if (Operation* def = v.getDefiningOp()) returned.insert(def);
    std::vector<Operation*> products;
    for (Operation& op : func.getBody().front())
      if (isOp(&op, "llm.fused_matmul") || isOp(&op, "llm.gated_mlp") || isOp(&op, "nn.matmul"))
        products.push_back(&op);
    for (Operation* op : products) {
      if (returned.count(op)) {
        if (float32Constant(op->getOperand(1)))
          logFusion(func, {false, kPass, name(op), nodeNames({op}),
                           "its result is a model output (an LM head, a pooler): stays dense"});
        continue;
      }
      prune(func, op);
    }
    eraseDeadOps(func.getBody().front());
  }

 private:
  PruneMethod method_ = PruneMethod::kMagnitude;
  PrunePattern pattern_;
  CalibrationStats stats_;

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
    int64_t trans_b = 0;
    if (auto t = op->getAttrOfType<IntegerAttr>("trans_b")) trans_b = t.getInt();
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
    logFusion(func, {true, kPass, name(op), nodes, detail});
  }
};

}  // namespace
}  // namespace llmc
