// --llmc-shape-inference: dtypes and symbolic shapes by running the runtime's kernels in
// shape-only mode under two probe bindings of the dimension symbols; folds shape arithmetic.
#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "core/kernel.h"
#include "core/symbols.h"
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

// The value of "a + b + 3" (symbols and integers, core/symbols.h) under each probe; nothing
// when a term names no symbol.
std::optional<std::array<int64_t, kProbes>> evaluateSum(const std::string& expression,
                                                        const std::vector<std::string>& symbols,
                                                        const std::vector<int64_t> probe[kProbes]) {
  std::vector<SymbolTerm> terms;
  if (!parseSymbolExpression(expression, &terms)) return std::nullopt;
  std::array<int64_t, kProbes> sums{};
  for (const SymbolTerm& term : terms) {
    auto it = std::find(symbols.begin(), symbols.end(), term.symbol);
    if (term.symbol.empty()) {
      for (int p = 0; p < kProbes; ++p) sums[p] += term.constant;
    } else if (it != symbols.end()) {
      for (int p = 0; p < kProbes; ++p)
        sums[p] += probe[p][static_cast<size_t>(it - symbols.begin())];
    } else {
      return std::nullopt;
    }
  }
  return sums;
}

// A symbol named as a sum ("past_sequence_length + sequence_length", "n + 1") is probed as
// the sum of its terms (other symbols and integers), so exporters that name a total length
// after its parts get consistent shapes. Terms that are neither keep the symbol independent.
void applyExpressionSymbols(const std::vector<std::string>& symbols, std::vector<int64_t>* probe) {
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i].find('+') == std::string::npos) continue;
    if (auto sums = evaluateSum(symbols[i], symbols, probe))
      for (int p = 0; p < kProbes; ++p) probe[p][i] = (*sums)[p];
  }
}

// A relation between dimension symbols that the graph forces where the export's names do not
// say it: torch.onnx with its own dynamic_axes names the new, past and total lengths apart
// ("seq", "past_seq", "total_seq"), and the mask over "total_seq" is added to scores over the
// concatenation of past and new keys. `symbol` is then probed as `expression` (evaluateSum's
// syntax) in this and every later run of the pass (the function's llmc.symbol_relations).
struct SymbolRelation {
  std::string symbol;
  std::string expression;
  bool operator==(const SymbolRelation& other) const {
    return symbol == other.symbol && expression == other.expression;
  }
};

// `values` (a dimension's size under each probe) as a sum of at most three symbols other than
// `excluded` plus a non-negative constant below 64; empty when it is not one.
std::string sumExpression(const std::array<int64_t, kProbes>& values,
                          const std::vector<std::string>& symbols,
                          const std::vector<int64_t> probe[kProbes], size_t excluded) {
  std::vector<size_t> plain;
  for (size_t i = 0; i < symbols.size(); ++i)
    if (i != excluded && symbols[i].find('+') == std::string::npos) plain.push_back(i);
  std::vector<size_t> chosen;
  std::string found;
  // Every choice of exactly `left` more symbols from plain[from..], until one fits.
  std::function<bool(size_t, size_t)> pick = [&](size_t from, size_t left) {
    if (left == 0) {
      std::array<int64_t, kProbes> rest = values;
      for (size_t i : chosen)
        for (int p = 0; p < kProbes; ++p) rest[p] -= probe[p][i];
      for (int p = 1; p < kProbes; ++p)
        if (rest[p] != rest[0]) return false;
      if (rest[0] < 0 || rest[0] >= 64) return false;
      for (size_t i : chosen) found += (found.empty() ? "" : " + ") + symbols[i];
      if (rest[0] > 0) found += " + " + std::to_string(rest[0]);
      return true;
    }
    for (size_t k = from; k < plain.size(); ++k) {
      chosen.push_back(plain[k]);
      if (pick(k + 1, left - 1)) return true;
      chosen.pop_back();
    }
    return false;
  };
  for (size_t terms = 1; terms <= 3; ++terms)  // fewest terms first
    if (pick(0, terms)) break;
  return found;
}

// Relations tried per run of the pass before an op failing under every probe is an error.
constexpr int kMaxRelations = 4;

// A kernel's message without its "node 'X': " prefix (the diagnostic names the node).
std::string withoutNodePrefix(const std::string& message, const std::string& node) {
  const std::string prefix = "node '" + node + "': ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
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
  std::set<std::string> partial_nodes;  // all of them, by node name
  int64_t largest_probe = 0;  // the largest size a symbol took
  // When `failed` before the error was emitted: the op that fails under every probe, its
  // message, and relations between symbols that may make it hold (tried by the caller).
  Operation* failed_op = nullptr;
  std::string error;
  std::vector<SymbolRelation> candidates;
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
    // An op that fails under every probe is an error unless a relation between the symbols
    // (SymbolRelation) makes it hold: each relation that lets inference past that op is kept
    // and inference starts over with it.
    std::vector<int64_t> probe[kProbes];
    Outcome first_outcome;
    for (int attempt = 0;; ++attempt) {
      makeProbes(func, symbols, 0, probe);
      first_outcome = inferFunction(func, symbols, probe);
      if (!first_outcome.failed) break;
      if (!first_outcome.failed_op) return signalPassFailure();  // already reported
      std::vector<SymbolRelation> found;
      if (attempt < kMaxRelations) found = findRelations(func, symbols, first_outcome);
      if (found.empty()) {
        first_outcome.failed_op->emitError() << first_outcome.error;
        return signalPassFailure();
      }
      for (const SymbolRelation& relation : found)
        logFusion(func, {true, "shape-inference", "relation", nodeNameOf(first_outcome.failed_op),
                         "dimension '" + relation.symbol + "' taken as " + relation.expression +
                             ": node '" + nodeNameOf(first_outcome.failed_op) +
                             "' holds only then (the engine refuses inputs that break it)"});
    }
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
    // Relations found by earlier runs (a relation may name a related symbol: twice settles it).
    const std::vector<SymbolRelation> relations = relationsOf(func);
    for (int round = 0; round < 2; ++round)
      for (const SymbolRelation& relation : relations) {
        auto it = std::find(symbols.begin(), symbols.end(), relation.symbol);
        auto sums = evaluateSum(relation.expression, symbols, probe);
        if (it == symbols.end() || !sums) continue;
        for (int p = 0; p < kProbes; ++p)
          probe[p][static_cast<size_t>(it - symbols.begin())] = (*sums)[p];
      }
  }

  static void setRelations(func::FuncOp func, const std::vector<SymbolRelation>& relations) {
    Builder b(func.getContext());
    SmallVector<NamedAttribute> attrs;
    for (const SymbolRelation& r : relations)
      attrs.push_back(b.getNamedAttr(r.symbol, b.getStringAttr(r.expression)));
    if (attrs.empty())
      func->removeAttr("llmc.symbol_relations");
    else
      func->setAttr("llmc.symbol_relations", b.getDictionaryAttr(attrs));
  }

  static std::vector<SymbolRelation> relationsOf(func::FuncOp func) {
    std::vector<SymbolRelation> out;
    if (auto relations = func->getAttrOfType<DictionaryAttr>("llmc.symbol_relations"))
      for (NamedAttribute r : relations)
        out.push_back(
            {r.getName().getValue().str(), cast<StringAttr>(r.getValue()).getValue().str()});
    return out;
  }

  // The first of `failed.candidates`, or else the first pair of them (two symbols: the mask's
  // length and the batch), under which inference gets past the op that failed (on a copy,
  // quietly); they are kept in the function's relations. Nothing when none does.
  std::vector<SymbolRelation> findRelations(func::FuncOp func,
                                            const std::vector<std::string>& symbols,
                                            const Outcome& failed) {
    const std::vector<SymbolRelation> known = relationsOf(func);
    const std::string failed_node = nodeNameOf(failed.failed_op);
    std::vector<std::vector<SymbolRelation>> choices;
    const std::vector<SymbolRelation>& c = failed.candidates;
    for (const SymbolRelation& one : c) choices.push_back({one});
    for (size_t i = 0; i < c.size(); ++i)
      for (size_t j = i + 1; j < c.size(); ++j)
        if (c[i].symbol != c[j].symbol) choices.push_back({c[i], c[j]});
    for (const std::vector<SymbolRelation>& choice : choices) {
      std::vector<SymbolRelation> trial_relations = known;
      trial_relations.insert(trial_relations.end(), choice.begin(), choice.end());
      setRelations(func, trial_relations);
      std::vector<int64_t> probe[kProbes];
      makeProbes(func, symbols, 0, probe);
      func::FuncOp trial = func.clone();
      Outcome outcome;
      {
        ScopedDiagnosticHandler quiet(&getContext(), [](Diagnostic&) { return success(); });
        outcome = inferFunction(trial, symbols, probe);
      }
      // Past it: the op holds under every probe (it neither fails nor fails for some sizes).
      const bool past = (!outcome.failed ||
                         (outcome.failed_op && nodeNameOf(outcome.failed_op) != failed_node)) &&
                        !outcome.partial_nodes.count(failed_node);
      trial.erase();
      if (past) return choice;
    }
    setRelations(func, known);
    return {};
  }

  // Relations that may make `op`, failing under every probe, hold. The op's operands' dimensions
  // are paired as the op matches them (aligned from the right, as broadcasting and Concat do;
  // a MatMul's K as well); where one of a pair is exactly a symbol S and the other a sum of
  // other symbols, S = that sum, or a fixed size above 1, S = that size. S must not be related
  // already.
  static std::vector<SymbolRelation> relationCandidates(
      func::FuncOp func, Operation* op, const std::vector<std::string>& symbols,
      const std::vector<int64_t> probe[kProbes], llvm::DenseMap<Value, ProbeTensors>& known) {
    using Sizes = std::array<int64_t, kProbes>;
    std::vector<std::vector<Sizes>> shapes;  // per operand with a known rank
    for (Value operand : op->getOperands()) {
      auto it = known.find(operand);
      if (isa<NoneType>(operand.getType()) || it == known.end() || !it->second.known) {
        shapes.emplace_back();
        continue;
      }
      const size_t rank = it->second.tensor[0].shape().size();
      bool same_rank = true;
      for (int p = 1; p < kProbes; ++p)
        same_rank = same_rank && it->second.tensor[p].shape().size() == rank;
      std::vector<Sizes> dims;
      for (size_t d = 0; same_rank && d < rank; ++d) {
        Sizes sizes;
        for (int p = 0; p < kProbes; ++p) sizes[p] = it->second.tensor[p].shape()[d];
        dims.push_back(sizes);
      }
      shapes.push_back(std::move(dims));
    }
    std::vector<std::pair<Sizes, Sizes>> pairs;
    for (size_t a = 0; a < shapes.size(); ++a)
      for (size_t b = a + 1; b < shapes.size(); ++b) {
        const size_t n = std::min(shapes[a].size(), shapes[b].size());
        for (size_t k = 1; k <= n; ++k)
          pairs.push_back({shapes[a][shapes[a].size() - k], shapes[b][shapes[b].size() - k]});
      }
    if (isOp(op, "nn.matmul") && shapes.size() == 2 && !shapes[0].empty() && shapes[1].size() >= 2)
      pairs.push_back({shapes[0].back(), shapes[1][shapes[1].size() - 2]});

    std::set<std::string> related;
    for (const SymbolRelation& r : relationsOf(func)) related.insert(r.symbol);
    std::vector<SymbolRelation> out;
    auto consider = [&](const Sizes& mine, const Sizes& other) {
      if (mine == other) return;
      for (size_t sym = 0; sym < symbols.size(); ++sym) {
        bool follows = true;
        for (int p = 0; p < kProbes; ++p) follows = follows && mine[p] == probe[p][sym];
        // A sum of other symbols is probed as such already (applyExpressionSymbols).
        if (!follows || related.count(symbols[sym]) ||
            (symbols[sym].find('+') != std::string::npos &&
             evaluateSum(symbols[sym], symbols, probe)))
          continue;
        const bool fixed =
            std::all_of(other.begin(), other.end(), [&](int64_t v) { return v == other[0]; });
        if (fixed && other[0] < 2) continue;  // 1 broadcasts
        std::string expression =
            fixed ? std::to_string(other[0]) : sumExpression(other, symbols, probe, sym);
        SymbolRelation relation{symbols[sym], expression};
        if (!expression.empty() && std::find(out.begin(), out.end(), relation) == out.end())
          out.push_back(relation);
      }
    };
    for (const auto& [a, b] : pairs) {
      consider(a, b);
      consider(b, a);
    }
    return out;
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
        if (!symbolic_inputs)
          return op->emitError() << withoutNodePrefix(runs[p].status.message(), node);
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
      // Reported by the caller, unless a relation between the symbols makes it hold.
      std::string bindings;
      for (size_t sym = 0; sym < symbols.size(); ++sym)
        bindings +=
            (sym ? ", " : "") + symbols[sym] + "=" + std::to_string(probe[kProbes - 1][sym]);
      outcome.failed_op = op;
      outcome.error = withoutNodePrefix(runs[kProbes - 1].status.message(), node) +
                      " (for every size tried of the dimension symbols, e.g. " + bindings + ")";
      outcome.candidates =
          relationCandidates(op->getParentOfType<func::FuncOp>(), op, symbols, probe, known);
      return failure();
    }
    if (!failures.empty()) {
      unavailable = true;
      outcome.partial_nodes.insert(node);
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
