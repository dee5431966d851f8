// --llmc-quantize-weights: weight-only quantization. Every matrix product with a constant
// float32 weight (llm.fused_matmul, llm.gated_mlp, nn.matmul) becomes llm.quant_matmul, and a
// Gather of a constant float32 table (the embedding) llm.quant_gather, with the weight quantized
// at compile time by the runtime's LlmQuantizeWeight kernel (so `llmc refit` repeats it from new
// weights); weights whose K does not fit the format stay float32 and are logged with the
// reason, as are those --keep-float names.
#include <cmath>
#include <functional>
#include <optional>

#include "core/quant.h"
#include "core/sparse.h"
#include "core/thread_pool.h"
#include "cpu/gemm.h"
#include "pipeline/Calibration.h"
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_QUANTIZEWEIGHTS
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "quantize";

// Activation-aware scales (AWQ): s_j = absmax_j^alpha per input channel j, normalized to a
// geometric mean of 1, for the alpha in {0, 0.1, ..., 1} whose quantized product, x / s times
// the quantized (W with rows scaled by s), is nearest x W on the calibration rows; each
// candidate's clip search weighs the weights by the mean square of the activations they
// multiply. Returns the choice (alpha 0: no scaling, only the activation-aware clipping).
struct AwqChoice {
  Tensor scales;      // float32 [K]
  Tensor importance;  // float32 [K]: mean square of x / s per channel, for the clip search
  double alpha = 0;
  double error = 0, rtn_error = 0;
};
// SmoothQuant's factors: s_j = max|x_j|^alpha / max|W_j|^(1 - alpha) per input channel j
// (W_j: the weight's row j along K), which move the activations' outliers into the weight.
// SmoothQuant's s_j = max|x_j|^alpha / max|W_j|^(1 - alpha); max|x_j| is the absmax over every
// calibration row, or with percentile < 1 that percentile of |x_j| over the row sample (an
// outlier-robust choice).
Tensor smoothingScales(const Tensor& w, bool trans_b, const ActivationStats& stats, double alpha, double percentile) {
  const int64_t k = trans_b ? w.dim(1) : w.dim(0), n = trans_b ? w.dim(0) : w.dim(1);
  const Tensor x_stat = percentile < 1 ? channelPercentile(stats, percentile) : stats.absmax;
  Tensor s = Tensor::allocate(DType::kFloat32, {k});
  for (int64_t j = 0; j < k; ++j) {
    float w_max = 0;
    for (int64_t c = 0; c < n; ++c)
      w_max = std::max(w_max, std::fabs(trans_b ? w.data<float>()[c * k + j] : w.data<float>()[j * n + c]));
    const double x_max = std::max(x_stat.data<float>()[j], 1e-5f);
    const double value = std::pow(x_max, alpha) / std::pow(std::max(w_max, 1e-5f), 1 - alpha);
    s.data<float>()[j] = static_cast<float>(std::clamp(value, 1e-5, 1e5));
  }
  return s;
}

std::optional<AwqChoice> searchAwq(const Tensor& w, bool trans_b, const ActivationStats& stats,
                                   const QuantTraits& traits, int64_t group) {
  const int64_t k = trans_b ? w.dim(1) : w.dim(0), n = trans_b ? w.dim(0) : w.dim(1);
  const Tensor& x = stats.samples;
  const int64_t rows = x.dim(0);
  if (rows == 0 || x.dim(1) != k) return std::nullopt;
  ThreadPool* pool = sharedThreadPool();
  // W as [N, K].
  std::vector<float> wt(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) wt[r * k + j] = trans_b ? w.data<float>()[r * k + j] : w.data<float>()[j * n + r];
  const float* xs = x.data<float>();
  std::vector<float> energy(static_cast<size_t>(k), 0.0f), importance(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j)
      energy[j] += xs[r * k + j] * xs[r * k + j] / static_cast<float>(rows);
  std::optional<AwqChoice> best;
  double best_error = INFINITY, rtn_error = 0;
  std::vector<float> s(static_cast<size_t>(k)), scaled(static_cast<size_t>(n * k)), xd(static_cast<size_t>(rows * k));
  std::vector<float> deviation(static_cast<size_t>(k * n)), y(static_cast<size_t>(rows * n));
  for (int step = 0; step <= 10; ++step) {
    const double alpha = step / 10.0;
    double log_sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      s[j] = static_cast<float>(std::pow(std::max(stats.absmax.data<float>()[j], 1e-5f), alpha));
      log_sum += std::log(s[j]);
    }
    const float norm = static_cast<float>(std::exp(log_sum / static_cast<double>(k)));
    for (int64_t j = 0; j < k; ++j) s[j] /= norm;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) scaled[r * k + j] = wt[r * k + j] * s[j];
    for (int64_t j = 0; j < k; ++j) importance[j] = energy[j] / (s[j] * s[j]) + 1e-12f;
    Tensor data, qscales, zeros;
    Tensor view = Tensor::view(DType::kFloat32, {n, k}, scaled.data());
    if (!quantizeWeight(view, /*transposed=*/true, traits, group, &data, &qscales, &zeros,
                        importance.data(), pool)
             .ok())
      return std::nullopt;
    QuantWeight q;
    if (!makeQuantWeight(traits, k, group, data, qscales, traits.zero_points ? &zeros : nullptr, &q).ok())
      return std::nullopt;
    // The error of the quantized product, (x / s) Q - x W = (x / s)(Q - W s) with Q the
    // dequantized weight: one product by the quantization's deviation, [K, N].
    constexpr int64_t kRowsPerTask = 64;
    parallelFor(pool, (n + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
      std::vector<float> dequantized(static_cast<size_t>(k));
      for (int64_t r = task * kRowsPerTask; r < std::min(n, (task + 1) * kRowsPerTask); ++r) {
        dequantizeRow(q, r, dequantized.data());
        for (int64_t j = 0; j < k; ++j) deviation[j * n + r] = dequantized[j] - scaled[r * k + j];
      }
    });
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j) xd[r * k + j] = xs[r * k + j] / s[j];
    floatGemm(xd.data(), rows, k, deviation.data(), n, y.data(), pool);
    double error = 0;
    for (float e : y) error += static_cast<double>(e) * e;
    if (step == 0) rtn_error = error;
    if (error < best_error) {
      best_error = error;
      AwqChoice choice;
      choice.scales = Tensor::allocate(DType::kFloat32, {k});
      std::copy(s.begin(), s.end(), choice.scales.data<float>());
      choice.importance = Tensor::allocate(DType::kFloat32, {k});
      std::copy(importance.begin(), importance.end(), choice.importance.data<float>());
      choice.alpha = alpha;
      best = std::move(choice);
    }
  }
  if (best) best->error = best_error, best->rtn_error = rtn_error;
  return best;
}

class QuantizeWeightsPass : public impl::QuantizeWeightsBase<QuantizeWeightsPass> {
 public:
  using Base::Base;
  CalibrationStats stats_;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    const QuantTraits* traits = findQuantTraits(format);
    const QuantTraits* head = headFormat.empty() ? traits : findQuantTraits(headFormat);
    if (!traits || !head) {
      func.emitError() << "unknown quantization format '" << (traits ? headFormat : format)
                       << "' (formats: int8, int4, int4_zp, w8a8, fp8)";
      return signalPassFailure();
    }
    if (!calibStats.empty()) {
      if (Status read = readCalibrationStats(calibStats, "", &stats_); !read.ok()) {
        func.emitError() << read.message();
        return signalPassFailure();
      }
    }
    if (awq && stats_.empty()) {
      func.emitError() << "awq needs calibration statistics (calib-stats)";
      return signalPassFailure();
    }
    // The LM head: the product whose result the function returns (the logits).
    llvm::DenseSet<Operation*> returned;
    for (Value v : func.getBody().front().getTerminator()->getOperands())
      if (Operation* def = v.getDefiningOp()) returned.insert(def);
    std::vector<Operation*> products, gathers;
    for (Operation& op : func.getBody().front()) {
      if (isOp(&op, "llm.fused_matmul") || isOp(&op, "llm.gated_mlp") || isOp(&op, "nn.matmul"))
        products.push_back(&op);
      if (isOp(&op, "nn.gather")) gathers.push_back(&op);
    }
    for (size_t i = 0; i < products.size(); ++i) {
      reportProgress("quantize " + format + ": product " + std::to_string(i + 1) + "/" +
                     std::to_string(products.size()) + " " + where(products[i]));
      quantize(func, products[i], returned.count(products[i]) ? *head : *traits);
    }
    // A table has no activations: w8a8 stores it as int8.
    for (Operation* op : gathers)
      quantizeTable(func, op, head->per_token_activations ? quantTraits(QuantFormat::kInt8) : *head);
    eraseDeadOps(func.getBody().front());
  }

  bool keptFloat(Operation* op, const std::function<void(const std::string&)>& skip) {
    const std::string names = allNodeNames(op);
    for (const std::string& pattern : keepFloat)
      if (!pattern.empty() && names.find(pattern) != std::string::npos) {
        skip("kept float32 (--keep-float " + pattern + ")");
        return true;
      }
    return false;
  }

  // The group for K, or 0 (logged) when the weight does not fit the format.
  int64_t groupFor(const QuantTraits& traits, int64_t k, const std::function<void(const std::string&)>& skip) {
    const int64_t group_size = traits.bits == 8 ? k : group;
    if (Status fits = checkQuantGroup(traits, k, group_size); !fits.ok()) {
      skip(fits.message() + "; stays float32");
      return 0;
    }
    return group_size;
  }

  // The weight quantized by the runtime's LlmQuantizeWeight (with its recipe): data, scales and
  // zero points (nn.none for formats without); empty when the quantizer refuses it (why in *error).
  SmallVector<Value> quantizedWeight(OpBuilder& b, Location loc, const QuantTraits& traits,
                                     int64_t group_size, int64_t trans_b, Value weight,
                                     Value importance, std::string* error) {
    SmallVector<Value> inputs{weight};
    if (importance) inputs.push_back(importance);
    SmallVector<Value> parts =
        kernelConstants(b, loc, "LlmQuantizeWeight",
                        {b.getNamedAttr("format", b.getStringAttr(traits.name)),
                         b.getNamedAttr("group", b.getI64IntegerAttr(group_size)),
                         b.getNamedAttr("trans_b", b.getI64IntegerAttr(trans_b))},
                        inputs, traits.zero_points ? 3 : 2, error);
    if (!parts.empty() && !traits.zero_points) parts.push_back(noneValue(b, loc));
    return parts;
  }

  /// gather(T, ids) along axis 0 with T a constant float32 [V, K] ->
  /// llm.quant_gather(ids, data, scales, zeros | none){format, group}.
  void quantizeTable(func::FuncOp func, Operation* op, const QuantTraits& traits) {
    Value table = op->getOperand(0);
    auto type = dyn_cast<RankedTensorType>(table.getType());
    auto axis = op->getAttrOfType<IntegerAttr>("axis");
    if (!type || type.getRank() != 2 || (axis && axis.getInt() != 0) || !float32Constant(table)) return;
    const std::string nodes = nodeNames({op});
    auto skip = [&](const std::string& why) { logFusion(func, {false, kPass, traits.name, nodes, why}); };
    if (keptFloat(op, skip)) return;
    const int64_t k = type.getDimSize(1);
    const int64_t group_size = groupFor(traits, k, skip);
    if (group_size == 0) return;
    OpBuilder b(op);
    Location loc = op->getLoc();
    std::string refused;
    SmallVector<Value> parts =
        quantizedWeight(b, loc, traits, group_size, /*trans_b=*/1, table, Value(), &refused);
    if (parts.empty())
      return skip("the quantizer refused the table (" + refused + "); stays float32");
    Value y = createOp(b, loc, "llm.quant_gather", {op->getOperand(1), parts[0], parts[1], parts[2]},
                       op->getResult(0).getType(),
                       {b.getNamedAttr("format", b.getStringAttr(traits.name)),
                        b.getNamedAttr("group", b.getI64IntegerAttr(group_size))});
    carryNames(op, y.getDefiningOp());
    op->getResult(0).replaceAllUsesWith(y);
    logFusion(func, {true, kPass, std::string(traits.name) + " embedding", nodes, ""});
    op->erase();
  }

  // A pruned product's int8 data (*data) as sparse storage (core/sparse.h), where asked
  // (`sparse`): replaces *data with the packed values and returns the mask, where the pruning
  // left every row at most `llmc.kept_per_row` values and that stride and the mask are at most
  // kSparseMaxBytesShare of the dense bytes; a null Value (dense) otherwise. Says which in *detail.
  Value sparseStorage(OpBuilder& b, Location loc, Operation* op, const QuantTraits& traits,
                      int64_t k, Value* data, std::string* detail) {
    auto kept = op->getAttrOfType<IntegerAttr>("llmc.kept_per_row");
    if (!kept || traits.bits != 8 || traits.e4m3) return Value();
    const int64_t stride = kept.getInt(), bytes = stride + (k + 7) / 8;
    char text[128];
    std::snprintf(
        text, sizeof(text), "%s%lld of %lld values stored per row, %.1f%% of the dense bytes",
        detail->empty() ? "" : "; ", static_cast<long long>(stride), static_cast<long long>(k),
        100.0 * static_cast<double>(bytes) / static_cast<double>(k));
    *detail += text;
    if (!sparse) {
      *detail +=
          ": stored dense (--sparse-storage stores it sparse: smaller, but decode measured slower; "
          "docs/pruning.md)";
      return Value();
    }
    if (static_cast<double>(bytes) > kSparseMaxBytesShare * static_cast<double>(k)) {
      *detail += ": stored dense (sparse storage only where it takes at most " +
                 std::to_string(static_cast<int>(100 * kSparseMaxBytesShare)) + "% of the bytes)";
      return Value();
    }
    SmallVector<Value> parts =
        kernelConstants(b, loc, "LlmSparsifyWeight",
                        {b.getNamedAttr("stride", b.getI64IntegerAttr(stride))}, {*data}, 2);
    if (parts.empty()) {
      *detail += ": dense (the sparse packing refused the weight)";
      return Value();
    }
    *detail += ": sparse";
    *data = parts[0];
    return parts[1];
  }

  /// y = product(x, W) with W a constant [K, N] (or [N, K] with trans_b) ->
  /// llm.quant_matmul(x, data, scales, zeros | none, bias | none){format, activation, alpha, gated}.
  void quantize(func::FuncOp func, Operation* op, const QuantTraits& traits) {
    const bool gated = isOp(op, "llm.gated_mlp");
    const bool plain = isOp(op, "nn.matmul");
    Value x = op->getOperand(0), w = op->getOperand(1);
    // x may be unranked (shape inference did not reach it): the kernel takes any [..., K] and
    // checks K when it runs; a 1-D x gives [N] as ONNX MatMul does.
    auto x_type = dyn_cast<TensorType>(x.getType());
    auto w_type = dyn_cast<RankedTensorType>(w.getType());
    if (!x_type || !w_type || w_type.getRank() != 2 || !x_type.getElementType().isF32() ||
        (x_type.hasRank() && x_type.getRank() < 1) || !float32Constant(w))
      return;  // not a product with a float32 weight: nothing to quantize
    const std::string nodes = nodeNames({op});
    auto skip = [&](const std::string& why) { logFusion(func, {false, kPass, traits.name, nodes, why}); };
    if (keptFloat(op, skip)) return;
    int64_t trans_b = 0;
    if (auto t = op->getAttrOfType<IntegerAttr>("trans_b")) trans_b = t.getInt();
    const int64_t k = w_type.getDimSize(trans_b ? 1 : 0);
    const int64_t group_size = groupFor(traits, k, skip);
    if (group_size == 0) return;
    OpBuilder b(op);
    Location loc = op->getLoc();
    // Per-input-channel scales s from the calibration: AWQ's for 4-bit weights, SmoothQuant's
    // for w8a8. The weight's rows along K are multiplied by s, the product takes x / s.
    std::optional<Tensor> row_scales, importance;
    std::string detail;
    auto stats = stats_.find(nodeNameOf(op));
    // A down projection whose MLP lost channels (--prune mlp:): the statistics of those it kept.
    if (auto kept = op->getAttrOfType<DenseI64ArrayAttr>("llmc.kept_inputs");
        kept && stats != stats_.end() && stats->second.absmax.numElements() != k)
      sliceChannels(&stats->second,
                    std::vector<int64_t>(kept.asArrayRef().begin(), kept.asArrayRef().end()));
    if (stats != stats_.end() && awq && traits.bits == 4) {
      if (std::optional<AwqChoice> choice = searchAwq(*float32Constant(w), trans_b != 0, stats->second, traits, group_size)) {
        char text[96];
        std::snprintf(text, sizeof(text), "awq alpha %.1f: calibration error %.3g of round to nearest's", choice->alpha,
                      choice->error / std::max(choice->rtn_error, 1e-30));
        detail = text;
        if (choice->alpha > 0) row_scales = std::move(choice->scales);
        importance = std::move(choice->importance);
      }
    } else if (stats != stats_.end() && traits.per_token_activations &&
               stats->second.absmax.numElements() == k) {  // statistics of another K: not ours
      row_scales = smoothingScales(*float32Constant(w), trans_b != 0, stats->second, smoothAlpha, smoothPercentile);
      detail = "smoothed (alpha " + std::to_string(smoothAlpha).substr(0, 4) +
               (smoothPercentile < 1 ? ", percentile " + std::to_string(smoothPercentile).substr(0, 5) : std::string()) + ")";
    } else if (traits.per_token_activations) {
      detail = "not smoothed: the calibration did not see this product";
    }
    Value input_scales, weight = w;
    if (row_scales) {
      Tensor shaped = Tensor::view(DType::kFloat32, trans_b ? Shape{1, k} : Shape{k, 1}, row_scales->data());
      weight = kernelConstant(b, loc, "Mul", {}, {w, float32ConstantOp(b, loc, shaped, "")});
      if (!weight) return skip("cannot scale the weight's rows");
      Tensor inverse = Tensor::allocate(DType::kFloat32, {k});
      for (int64_t j = 0; j < k; ++j) inverse.data<float>()[j] = 1.0f / row_scales->data<float>()[j];
      input_scales = float32ConstantOp(b, loc, inverse, "");
    }
    Value importance_value = importance ? float32ConstantOp(b, loc, *importance, "") : Value();
    std::string refused;
    SmallVector<Value> parts =
        quantizedWeight(b, loc, traits, group_size, trans_b, weight, importance_value, &refused);
    if (parts.empty())
      return skip("the quantizer refused the weight (" + refused + "); stays float32");
    Value zeros = parts[2];
    Value mask = sparseStorage(b, loc, op, traits, k, &parts[0], &detail);
    Value bias = gated || plain ? noneValue(b, loc) : op->getOperand(2);
    SmallVector<NamedAttribute> attrs{b.getNamedAttr("format", b.getStringAttr(traits.name)),
                                      b.getNamedAttr("group", b.getI64IntegerAttr(group_size))};
    for (const char* name : {"activation", "alpha"})
      if (Attribute a = op->getAttr(name)) attrs.push_back(b.getNamedAttr(name, a));
    if (gated) attrs.push_back(b.getNamedAttr("gated", b.getI64IntegerAttr(1)));
    SmallVector<Value> operands{x, parts[0], parts[1], zeros, bias};
    if (input_scales || mask) operands.push_back(input_scales ? input_scales : noneValue(b, loc));
    if (mask) operands.push_back(mask);
    Value y = createOp(b, loc, "llm.quant_matmul", operands, op->getResult(0).getType(), attrs);
    carryNames(op, y.getDefiningOp());
    op->getResult(0).replaceAllUsesWith(y);
    std::string pattern = std::string(traits.name) + (gated ? " gated-mlp" : " matmul");
    if (row_scales || importance) pattern += traits.bits == 4 ? " awq" : " smoothed";
    if (mask) pattern += " sparse";
    logFusion(func, {true, kPass, pattern, nodes, detail});
    op->erase();
  }
};

}  // namespace
}  // namespace llmc
