// --llmc-shape-inference: dtypes and symbolic shapes by running the runtime's kernels in
// shape-only mode under two probe bindings of the dimension symbols; folds shape arithmetic.
#include <algorithm>
#include <set>
#include <string>

#include "core/kernel.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_SHAPEINFERENCE
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

// Probe bindings: two with large sizes (which tell symbols apart) and one with tiny sizes
// (which exposes clamps such as min(seq, max_positions) that large sizes alone would
// mistake for constants).
constexpr int kProbes = 3;
// Integer tensors up to this size are evaluated with data (shape arithmetic).
constexpr int64_t kMaxEvaluatedElements = 4096;
// Constants up to this size are given to kernels with their data.
constexpr int64_t kMaxConstantDataElements = 1 << 16;

bool isPrime(int64_t n) {
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return n > 1;
}

// Distinct primes per probe: probe 0 starts at 7919, probe 1 at 9973, probe 2 at 2. A
// dimension is a symbol only when it follows that symbol's value under every probe. A model
// that only computes up to some size (BERT slices a 512-row position table to the sequence
// length, and the add with the token embeddings fails past it) fails under the large probes
// where every real size works: the pass then tries the smaller levels below, keeping the
// first under which no op fails for some probes only.
constexpr int kProbeLevels = 3;
constexpr int64_t kProbeStarts[kProbeLevels][kProbes] = {{7919, 9973, 2}, {257, 331, 2}, {37, 53, 2}};
std::vector<int64_t> probeValues(int level, int probe, size_t count) {
  std::vector<int64_t> values;
  for (int64_t n = kProbeStarts[level][probe]; values.size() < count; ++n)
    if (isPrime(n)) values.push_back(n);
  return values;
}

// A symbol named as a sum ("past_sequence_length + sequence_length", "n + 1") is probed as
// the sum of its terms (other symbols and integers), so exporters that name a total length
// after its parts get consistent shapes. Terms that are neither keep the symbol independent.
void applyExpressionSymbols(const std::vector<std::string>& symbols, std::vector<int64_t>* probe) {
  for (size_t i = 0; i < symbols.size(); ++i) {
    const std::string& name = symbols[i];
    if (name.find('+') == std::string::npos) continue;
    std::vector<int64_t> sums(kProbes, 0);
    bool ok = true;
    size_t start = 0;
    while (ok && start <= name.size()) {
      size_t plus = name.find('+', start);
      std::string term = name.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
      term.erase(0, term.find_first_not_of(' '));
      term.erase(term.find_last_not_of(' ') + 1);
      auto it = std::find(symbols.begin(), symbols.end(), term);
      if (!term.empty() && term.find_first_not_of("0123456789") == std::string::npos) {
        for (int p = 0; p < kProbes; ++p) sums[p] += std::stoll(term);
      } else if (it != symbols.end() && term.find('+') == std::string::npos) {
        for (int p = 0; p < kProbes; ++p) sums[p] += probe[p][static_cast<size_t>(it - symbols.begin())];
      } else {
        ok = false;
      }
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
    if (ok)
      for (int p = 0; p < kProbes; ++p) probe[p][i] = sums[p];
  }
}

struct ProbeTensors {
  bool known = false;
  Tensor tensor[kProbes];
};

// What inferring a function under one probe level found.
struct Outcome {
  bool failed = false;        // an op fails under every probe: an error (emitted)
  int partial_failures = 0;   // ops that fail under some probes only (results left unranked)
  std::string first_partial;  // the first of them: "node 'X': message (with NAME=SIZE, ...)"
  int64_t largest_probe = 0;  // the largest size a symbol took
};

class ShapeInferencePass : public impl::ShapeInferenceBase<ShapeInferencePass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    MLIRContext* context = &getContext();
    std::vector<std::string> symbols;
    if (auto attr = func->getAttrOfType<ArrayAttr>("llmc.symbols"))
      for (Attribute a : attr) symbols.push_back(cast<StringAttr>(a).getValue().str());

    // The first level runs in place. Only when some op failed under some of its probes are
    // the smaller levels tried, each on a copy of the function as the first level left it
    // (constants' data is shared, not copied); a better copy's operations then replace the
    // function's, in the same block with the same arguments (a caller may hold the block).
    // Errors are reported from the first level only: a smaller level that fails outright is
    // skipped.
    std::vector<int64_t> probe[kProbes];
    makeProbes(func, symbols, 0, probe);
    const Outcome first_outcome = inferFunction(func, symbols, probe);
    if (first_outcome.failed) return signalPassFailure();
    Outcome chosen_outcome = first_outcome;
    int chosen_level = 0;
    for (int level = 1; level < kProbeLevels && chosen_outcome.partial_failures > 0; ++level) {
      makeProbes(func, symbols, level, probe);
      func::FuncOp trial = func.clone();
      Outcome outcome;
      {
        ScopedDiagnosticHandler quiet(context, [](Diagnostic&) { return success(); });
        outcome = inferFunction(trial, symbols, probe);
      }
      if (!outcome.failed && outcome.partial_failures < chosen_outcome.partial_failures) {
        adoptOperations(func, trial);
        chosen_outcome = outcome;
        chosen_level = level;
      }
      trial.erase();
    }
    // The signature follows the returned values' refined types.
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    func.setType(FunctionType::get(context, func.getArgumentTypes(), ret.getOperandTypes()));

    // The pass runs several times in a pipeline: the first run's words stand.
    if (chosen_level > 0 && !hasFusionRecord(func, true, "shape-inference", "smaller sizes"))
      logFusion(func, {true, "shape-inference", "smaller sizes", "",
                       first_outcome.first_partial + "; shapes were inferred with sizes up to " +
                           std::to_string(chosen_outcome.largest_probe) +
                           " instead; --dim NAME=MIN:MAX states a symbol's range"});
    if (chosen_outcome.partial_failures > 0 && !hasFusionRecord(func, false, "shape-inference", "shapes"))
      logFusion(func, {false, "shape-inference", "shapes", "",
                       "shapes left to run time (" +
                           std::to_string(chosen_outcome.partial_failures) + " ops) from " +
                           chosen_outcome.first_partial +
                           "; --dim NAME=MIN:MAX states a symbol's range"});
  }

 private:
  // Replaces the operations of `func`'s body by those of `from` (its copy), keeping the block
  // and its arguments.
  static void adoptOperations(func::FuncOp func, func::FuncOp from) {
    Block& body = func.getBody().front();
    Block& source = from.getBody().front();
    for (auto [mine, theirs] : llvm::zip(body.getArguments(), source.getArguments()))
      theirs.replaceAllUsesWith(mine);
    body.clear();
    body.getOperations().splice(body.end(), source.getOperations());
  }

  // The probe bindings of `level`. A symbol bounded by --dim is probed inside its range at
  // every level: a model may only compute for sizes up to a table's length (BERT's position
  // embeddings), and probing past it would fail where every real size succeeds.
  static void makeProbes(func::FuncOp func, const std::vector<std::string>& symbols, int level,
                         std::vector<int64_t> probe[kProbes]) {
    for (int p = 0; p < kProbes; ++p) probe[p] = probeValues(level, p, symbols.size());
    if (auto ranges = func->getAttrOfType<DictionaryAttr>("llmc.symbol_ranges")) {
      for (size_t i = 0; i < symbols.size(); ++i) {
        auto range = ranges.getAs<DenseI64ArrayAttr>(symbols[i]);
        if (!range || range.size() != 2 || range[1] < 0) continue;
        const int64_t lo = std::max<int64_t>(range[0], 1), hi = range[1];
        if (hi < lo) continue;
        for (int p = 0; p < kProbes; ++p) {
          int64_t offset = static_cast<int64_t>(kProbes * i) + p;
          int64_t v = hi - offset;
          if (v < lo) v = lo + offset % (hi - lo + 1);
          probe[p][i] = v;
        }
      }
    }
    applyExpressionSymbols(symbols, probe);
  }

  Outcome inferFunction(func::FuncOp func, const std::vector<std::string>& symbols,
                        const std::vector<int64_t> probe[kProbes]) {
    MLIRContext* context = &getContext();
    Outcome outcome;
    for (int p = 0; p < kProbes; ++p)
      for (int64_t v : probe[p]) outcome.largest_probe = std::max(outcome.largest_probe, v);
    llvm::DenseMap<Value, ProbeTensors> known;
    Block& body = func.getBody().front();
    for (BlockArgument arg : body.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type) continue;
      auto dims = func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(), "llmc.dims");
      ProbeTensors pt;
      pt.known = true;
      for (int p = 0; p < kProbes; ++p) {
        Shape shape;
        for (int64_t d = 0; d < type.getRank(); ++d) {
          int64_t size = type.getDimSize(d);
          if (ShapedType::isDynamic(size)) {
            std::string name = dims && d < static_cast<int64_t>(dims.size())
                                   ? cast<StringAttr>(dims[d]).getValue().str()
                                   : "";
            auto it = std::find(symbols.begin(), symbols.end(), name);
            if (it == symbols.end()) {
              pt.known = false;
              break;
            }
            size = probe[p][static_cast<size_t>(it - symbols.begin())];
          }
          shape.push_back(size);
        }
        pt.tensor[p] =
            Tensor::view(dtypeFromMlir(type.getElementType()), shape, static_cast<void*>(nullptr));
      }
      if (pt.known) known[arg] = std::move(pt);
    }

    std::vector<Operation*> ops;
    for (Operation& op : body.without_terminator()) ops.push_back(&op);
    for (Operation* op : ops) {
      if (isa<nn::NoneOp>(op)) continue;
      if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
        auto type = cast<ShapedType>(constant.getType());
        ProbeTensors pt;
        pt.known = true;
        Tensor t = type.getNumElements() <= kMaxConstantDataElements
                       ? tensorFromElements(constant.getValue())
                       : Tensor::view(dtypeFromMlir(type.getElementType()), Shape(type.getShape()),
                                      static_cast<void*>(nullptr));
        for (int p = 0; p < kProbes; ++p) pt.tensor[p] = t;
        known[constant.getResult()] = std::move(pt);
        continue;
      }
      if (op->getDialect() != context->getLoadedDialect<nn::NNDialect>() &&
          op->getDialect() != context->getLoadedDialect<llm::LLMDialect>())
        continue;
      if (failed(inferOp(op, symbols, probe, known, outcome))) {
        outcome.failed = true;
        return outcome;
      }
    }
    return outcome;
  }

  LogicalResult inferOp(Operation* op, const std::vector<std::string>& symbols,
                        const std::vector<int64_t> probe[kProbes],
                        llvm::DenseMap<Value, ProbeTensors>& known, Outcome& outcome) {
    std::string kernel_name = kernelNameOf(op);
    const KernelDef* kernel = KernelRegistry::cpuReference().find(kernel_name);
    std::string node = nodeNameOf(op);
    if (!kernel) return op->emitError() << "no runtime kernel '" << kernel_name << "'";
    KernelParams params;
    Status status = paramsFromAttributes(op->getAttrs(), &params);
    if (!status.ok()) return op->emitError() << status.message();

    bool inputs_known = true;
    bool symbolic_inputs = false;
    for (Value operand : op->getOperands()) {
      if (isa<NoneType>(operand.getType())) continue;
      auto it = known.find(operand);
      if (it == known.end() || !it->second.known) {
        inputs_known = false;
        break;
      }
      if (it->second.tensor[0].shape() != it->second.tensor[1].shape()) symbolic_inputs = true;
    }

    KernelRun runs[kProbes];
    std::vector<int> failures;
    bool have_data[kProbes] = {};
    bool unavailable = !inputs_known;
    for (int p = 0; p < kProbes && !unavailable; ++p) {
      std::vector<const Tensor*> inputs;
      bool all_data = true;
      for (Value operand : op->getOperands()) {
        if (isa<NoneType>(operand.getType())) {
          inputs.push_back(nullptr);
          continue;
        }
        const Tensor& t = known[operand].tensor[p];
        all_data = all_data && t.hasData();
        inputs.push_back(&t);
      }
      runs[p] =
          evaluateKernel(*kernel, params, inputs, op->getNumResults(), node, /*shape_only=*/true);
      if (runs[p].status.code() == StatusCode::kUnavailable) {
        unavailable = true;
        break;
      }
      if (!runs[p].status.ok()) {
        if (!symbolic_inputs) return op->emitError() << runs[p].status.message();
        // Symbolic sizes: an op that fails under every probe binding fails for sizes in
        // general (e.g. a static mismatch); one that fails under some only may hold for
        // the real sizes, and is left to the runtime's checks.
        failures.push_back(p);
        continue;
      }
      int64_t total = 0;
      for (const Tensor& t : runs[p].outputs) total += t.numElements();
      // Shape and Size read only their input's shape, so they evaluate without its data.
      bool reads_shapes_only = kernel_name == "Shape" || kernel_name == "Size";
      if ((all_data || reads_shapes_only) && total <= kMaxEvaluatedElements) {
        KernelRun full = evaluateKernel(*kernel, params, inputs, op->getNumResults(), node,
                                        /*shape_only=*/false);
        if (full.status.ok()) {
          runs[p] = std::move(full);
          have_data[p] = true;
        }
      }
    }

    if (!unavailable && failures.size() == kProbes) {
      std::string bindings;
      for (size_t sym = 0; sym < symbols.size(); ++sym)
        bindings +=
            (sym ? ", " : "") + symbols[sym] + "=" + std::to_string(probe[kProbes - 1][sym]);
      return op->emitError() << runs[kProbes - 1].status.message()
                             << " (for every size tried of the dimension symbols, e.g. " << bindings
                             << ")";
    }
    if (!failures.empty()) {
      unavailable = true;
      if (outcome.partial_failures++ == 0) {
        std::string bindings;
        for (size_t sym = 0; sym < symbols.size(); ++sym)
          bindings += (sym ? ", " : "") + symbols[sym] + "=" + std::to_string(probe[failures[0]][sym]);
        outcome.first_partial = runs[failures[0]].status.message() + " (with " + bindings + ")";
      }
    }
    OpBuilder builder(op);
    auto untyped = op->getAttrOfType<DenseI64ArrayAttr>("llmc.untyped");
    op->removeAttr("llmc.untyped");
    if (unavailable) {
      for (unsigned i = 0; i < op->getNumResults(); ++i) {
        bool declared =
            !untyped || !llvm::is_contained(untyped.asArrayRef(), static_cast<int64_t>(i));
        if (!declared)
          op->getResult(i).setType(UnrankedTensorType::get(fallbackElementType(op, i)));
      }
      return success();
    }

    // Fold: every result computed, identical under both probes.
    bool foldable = true;
    for (int p = 0; p < kProbes; ++p) foldable = foldable && have_data[p];
    for (unsigned i = 0; foldable && i < op->getNumResults(); ++i) {
      const Tensor& a = runs[0].outputs[i];
      for (int p = 1; p < kProbes; ++p) {
        const Tensor& b = runs[p].outputs[i];
        foldable = foldable && a.shape() == b.shape() && a.dtype() == b.dtype() &&
                   (a.sizeBytes() == 0 || std::memcmp(a.data(), b.data(), a.sizeBytes()) == 0);
      }
    }
    if (foldable) {
      std::vector<Tensor> values = runs[0].outputs;
      std::vector<Value> constants = replaceWithConstants(op, values);
      for (size_t i = 0; i < constants.size(); ++i) {  // known values for later ops
        ProbeTensors pt;
        pt.known = true;
        for (int p = 0; p < kProbes; ++p) pt.tensor[p] = values[i];
        known[constants[i]] = std::move(pt);
      }
      return success();
    }

    SmallVector<Attribute> dims_per_result;
    bool any_symbolic = false;
    for (unsigned i = 0; i < op->getNumResults(); ++i) {
      const Tensor& a = runs[0].outputs[i];
      Type element = mlirFromDType(a.dtype(), op->getContext());
      bool same_rank = true;
      for (int p = 1; p < kProbes; ++p)
        same_rank = same_rank && runs[p].outputs[i].shape().size() == a.shape().size();
      if (!same_rank) {
        op->getResult(i).setType(UnrankedTensorType::get(element));
        dims_per_result.push_back(builder.getArrayAttr({}));
        continue;
      }
      SmallVector<int64_t> shape;
      SmallVector<Attribute> names;
      for (size_t d = 0; d < a.shape().size(); ++d) {
        bool is_static = true;
        for (int p = 1; p < kProbes; ++p)
          is_static = is_static && runs[p].outputs[i].shape()[d] == a.shape()[d];
        std::string name;
        if (is_static) {
          shape.push_back(a.shape()[d]);
        } else {
          shape.push_back(ShapedType::kDynamic);
          for (size_t sym = 0; sym < symbols.size() && name.empty(); ++sym) {
            bool follows = true;
            for (int p = 0; p < kProbes; ++p)
              follows = follows && runs[p].outputs[i].shape()[d] == probe[p][sym];
            if (follows) name = symbols[sym];
          }
          any_symbolic = any_symbolic || !name.empty();
        }
        names.push_back(builder.getStringAttr(name));
      }
      op->getResult(i).setType(RankedTensorType::get(shape, element));
      dims_per_result.push_back(builder.getArrayAttr(names));
      ProbeTensors pt;
      pt.known = true;
      for (int p = 0; p < kProbes; ++p) pt.tensor[p] = runs[p].outputs[i];
      known[op->getResult(i)] = std::move(pt);
    }
    if (any_symbolic)
      op->setAttr("llmc.dims", builder.getArrayAttr(dims_per_result));
    else
      op->removeAttr("llmc.dims");
    if (kernel_name == "Reshape") foldReshapeTarget(op, known);
    if (kernel_name == "Expand") foldExpandTarget(op, known);
    return success();
  }

  /// Expand(x, computed shape) whose result dims are static or symbols that x already has
  /// in the aligned position -> Expand(x, constant) with 1 ("keep x's dim") for those.
  static void foldExpandTarget(Operation* op, llvm::DenseMap<Value, ProbeTensors>& known) {
    if (isa_and_nonnull<nn::ConstantOp>(op->getOperand(1).getDefiningOp())) return;
    auto result_type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    auto input_type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    if (!result_type || !input_type || input_type.getRank() > result_type.getRank()) return;
    std::vector<std::string> in_names = dimNamesOf(op->getOperand(0));
    std::vector<std::string> out_names = dimNamesOf(op->getResult(0));
    int64_t offset = result_type.getRank() - input_type.getRank();
    SmallVector<int64_t> target;
    for (int64_t d = 0; d < result_type.getRank(); ++d) {
      int64_t size = result_type.getDimSize(d);
      if (!ShapedType::isDynamic(size)) {
        target.push_back(size);
      } else if (!out_names[d].empty() && d >= offset && in_names[d - offset] == out_names[d]) {
        target.push_back(1);
      } else {
        return;
      }
    }
    replaceShapeOperand(op, target, known);
  }

  static void replaceShapeOperand(Operation* op, ArrayRef<int64_t> target,
                                  llvm::DenseMap<Value, ProbeTensors>& known) {
    OpBuilder builder(op);
    auto type = RankedTensorType::get({static_cast<int64_t>(target.size())}, builder.getI64Type());
    auto constant = builder.create<nn::ConstantOp>(
        op->getLoc(), DenseElementsAttr::get(type, target), StringAttr());
    op->setOperand(1, constant.getResult());
    ProbeTensors pt;
    pt.known = true;
    Tensor t = tensorFromElements(constant.getValue());
    for (int p = 0; p < kProbes; ++p) pt.tensor[p] = t;
    known[constant.getResult()] = std::move(pt);
  }


  /// Reshape(x, computed shape) whose result dims are all static or named symbols ->
  /// Reshape(x, constant): a symbol in the same position as in x becomes 0 ("copy that
  /// dimension"), at most one other dim becomes -1. The exporter's Shape/Gather/Concat
  /// chain that computed the shape is then dead.
  static void foldReshapeTarget(Operation* op, llvm::DenseMap<Value, ProbeTensors>& known) {
    Value shape_operand = op->getOperand(1);
    if (isa_and_nonnull<nn::ConstantOp>(shape_operand.getDefiningOp())) return;
    if (auto allowzero = op->getAttrOfType<IntegerAttr>("allowzero");
        allowzero && allowzero.getInt() != 0)
      return;
    auto result_type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    auto input_type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    if (!result_type || !input_type) return;
    std::vector<std::string> in_names = dimNamesOf(op->getOperand(0));
    std::vector<std::string> out_names = dimNamesOf(op->getResult(0));
    SmallVector<int64_t> target;
    int inferred = 0;
    for (int64_t d = 0; d < result_type.getRank(); ++d) {
      int64_t size = result_type.getDimSize(d);
      if (!ShapedType::isDynamic(size)) {
        if (size == 0) return;  // 0 would mean "copy" in the target
        target.push_back(size);
      } else if (!out_names[d].empty() && d < input_type.getRank() && in_names[d] == out_names[d]) {
        target.push_back(0);
      } else {
        target.push_back(-1);
        ++inferred;
      }
    }
    if (inferred > 1) return;
    replaceShapeOperand(op, target, known);
  }

  // The element type of result `i` when its shape cannot be inferred at compile time.
  static Type fallbackElementType(Operation* op, unsigned i) {
    Builder b(op->getContext());
    std::string name = kernelNameOf(op);
    if (name == "ConstantOfShape") {
      if (auto value = op->getAttrOfType<ElementsAttr>("value")) return value.getElementType();
      return b.getF32Type();
    }
    if (name == "TopK" && i == 1) return b.getI64Type();
    if (name == "Shape" || name == "Size" || name == "ArgMax" || name == "ArgMin" ||
        name == "NonZero")
      return b.getI64Type();
    if (name == "OneHot" && op->getNumOperands() > 2)
      return cast<ShapedType>(op->getOperand(2).getType()).getElementType();
    if (name == "Cast") {
      if (auto to = op->getAttrOfType<IntegerAttr>("to"))
        if (Type t = mlirFromDType(static_cast<DType>(to.getInt()), op->getContext())) return t;
    }
    if (name == "CastLike" && op->getNumOperands() > 1)
      return cast<ShapedType>(op->getOperand(1).getType()).getElementType();
    if (name == "Equal" || name == "Less" || name == "Greater" || name == "LessOrEqual" ||
        name == "GreaterOrEqual" || name == "Not" || name == "And" || name == "Or" ||
        name == "Xor" || name == "IsNaN" || name == "IsInf")
      return b.getI1Type();
    if (name == "Where" && op->getNumOperands() > 1)
      return cast<ShapedType>(op->getOperand(1).getType()).getElementType();
    for (Value operand : op->getOperands())
      if (auto shaped = dyn_cast<ShapedType>(operand.getType())) return shaped.getElementType();
    return b.getF32Type();
  }
};

}  // namespace
}  // namespace llmc
