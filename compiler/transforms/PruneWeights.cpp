// --llmc-prune-weights: structured pruning of MLP channels, then unstructured and N:M pruning
// of the products' constant weights (docs/pruning.md). Magnitude and Wanda prune with the runtime's
// LlmPruneWeight kernel, so the pruned weight carries its recipe; SparseGPT's updated weight is a
// literal. Runs after the fusions (the products and their calibration statistics are the
// quantizer's) and before quantization, which then quantizes the pruned weights.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
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

// The runtime's Gather of `indices` along `axis` of a constant, recorded as its recipe (null
// when the kernel refuses).
Value gatherConstant(OpBuilder& b, Location loc, Value v, int64_t axis,
                     const std::vector<int64_t>& indices) {
  return kernelConstant(b, loc, "Gather", {b.getNamedAttr("axis", b.getI64IntegerAttr(axis))},
                        {v, int64Constant(b, loc, indices)});
}

// `value` with its last dimension now `width`.
void setLastDim(Value value, int64_t width) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = width;
  value.setType(RankedTensorType::get(shape, type.getElementType()));
}

// The function's llm.config (the engine's model table) with `entries` replaced.
void updateConfig(func::FuncOp func, ArrayRef<std::pair<StringRef, int64_t>> entries) {
  auto config = func->getAttrOfType<DictionaryAttr>("llm.config");
  if (!config) return;
  OpBuilder b(func.getContext());
  SmallVector<NamedAttribute> updated;
  for (NamedAttribute entry : config) {
    for (const auto& [name, value] : entries)
      if (entry.getName() == name) entry = b.getNamedAttr(name, b.getI64IntegerAttr(value));
    updated.push_back(entry);
  }
  func->setAttr("llm.config", b.getDictionaryAttr(updated));
}

// For the report: "; removed WHAT (score) 3 (0.0123), 7 (0.0456), ...; the lowest kept 0.0789"
// over the indices of `scores` not in `kept` (ascending).
std::string scoredRemoval(const std::string& what, const std::vector<int64_t>& kept,
                          const std::vector<double>& scores) {
  std::string text = "; removed " + what + " (score)";
  double lowest_kept = std::numeric_limits<double>::infinity();
  bool first = true;
  for (int64_t c = 0, i = 0; c < static_cast<int64_t>(scores.size()); ++c) {
    if (i < static_cast<int64_t>(kept.size()) && kept[i] == c) {
      lowest_kept = std::min(lowest_kept, scores[c]);
      ++i;
      continue;
    }
    char item[64];
    std::snprintf(item, sizeof(item), "%s %lld (%.4g)", first ? "" : ",", static_cast<long long>(c),
                  scores[c]);
    text += item;
    first = false;
  }
  char tail[64];
  std::snprintf(tail, sizeof(tail), "; the lowest kept %.4g", lowest_kept);
  return text + tail;
}

// For the report on heads: "; removed head (score) 1 (1.52), 5 (1.37); the lowest kept per KV
// group 1.61, 1.7" over the KV groups kept (each group keeps the same count of its best heads),
// then "; removed KV head (score) 0 (10.5) with heads 0 1 2; the lowest kept 12.1" for the
// groups removed (by their heads' summed scores) with all their heads.
std::string headRemoval(const KeptHeads& kept, int64_t heads, int64_t kv_heads) {
  const int64_t group = heads / kv_heads;
  auto has = [](const std::vector<int64_t>& list, int64_t x) {
    return std::binary_search(list.begin(), list.end(), x);
  };
  auto scored = [](int64_t index, double score) {
    char item[64];
    std::snprintf(item, sizeof(item), "%lld (%.4g)", static_cast<long long>(index), score);
    return std::string(item);
  };
  auto number = [](double v) {
    char item[32];
    std::snprintf(item, sizeof(item), "%.4g", v);
    return std::string(item);
  };
  std::string removed, lowest;
  for (int64_t g : kept.kv_heads) {
    double low = std::numeric_limits<double>::infinity();
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      if (has(kept.heads, h))
        low = std::min(low, kept.head_scores[h]);
      else
        removed += (removed.empty() ? " " : ", ") + scored(h, kept.head_scores[h]);
    }
    lowest += (lowest.empty() ? " " : ", ") + number(low);
  }
  std::string text;
  if (!removed.empty())
    text += "; removed head (score)" + removed + "; the lowest kept per KV group" + lowest;
  if (static_cast<int64_t>(kept.kv_heads.size()) < kv_heads) {
    text += "; removed KV head (score)";
    double low = std::numeric_limits<double>::infinity();
    bool first = true;
    for (int64_t g = 0; g < kv_heads; ++g) {
      if (has(kept.kv_heads, g)) {
        low = std::min(low, kept.group_scores[g]);
        continue;
      }
      text += (first ? " " : ", ") + scored(g, kept.group_scores[g]) + " with heads";
      for (int64_t h = g * group; h < (g + 1) * group; ++h) text += " " + std::to_string(h);
      first = false;
    }
    text += "; the lowest kept " + number(low);
  }
  return text;
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
    if (!(mlp >= 0 && mlp < 1) || !(heads >= 0 && heads < 1) || !(kvHeads >= 0 && kvHeads < 1) ||
        !(layers >= 0 && layers < 1) || channelAlign < 1) {
      func.emitError()
          << "mlp, heads, kv-heads and layers must be in [0, 1) and channel-align positive";
      return signalPassFailure();
    }
    if (!calibStats.empty()) {
      if (Status read = readCalibrationStats(calibStats, "", &stats_); !read.ok()) {
        func.emitError() << read.message();
        return signalPassFailure();
      }
    }
    const bool structured = mlp > 0 || heads > 0 || kvHeads > 0 || layers > 0;
    if (((unstructured && method_ != PruneMethod::kMagnitude) || structured) && stats_.empty()) {
      func.emitError() << (structured ? std::string("structured") : method.getValue())
                       << " pruning needs calibration statistics (calib-stats)";
      return signalPassFailure();
    }
    if (layers > 0) pruneLayers(func);
    std::vector<Operation*> producers, products;
    for (Operation& op : func.getBody().front()) {
      if (isOp(&op, "llm.gated_mlp") || isOp(&op, "llm.fused_matmul")) producers.push_back(&op);
      if (isOp(&op, "llm.fused_matmul") || isOp(&op, "llm.gated_mlp") || isOp(&op, "nn.matmul"))
        products.push_back(&op);
    }
    if (mlp > 0)
      for (Operation* op : producers) pruneChannels(func, op);
    if (heads > 0 || kvHeads > 0) pruneHeads(func);
    if (unstructured) {
      llvm::DenseSet<Operation*> returned;
      for (Value v : func.getBody().front().getTerminator()->getOperands())
        if (Operation* def = v.getDefiningOp()) returned.insert(def);
      std::vector<Operation*> targets;
      for (Operation* op : products) {
        if (returned.count(op)) {
          if (float32Constant(op->getOperand(1)))
            logFusion(func, {false, kPass, name(op), nodeNames({op}),
                             "its result is a model output (an LM head, a pooler): stays dense"});
          continue;
        }
        if (const std::string dense = keptDense({op}); !dense.empty()) {
          logFusion(func, {false, kPass, name(op), nodeNames({op}),
                           "stays dense (--keep-dense " + dense + ")"});
          continue;
        }
        targets.push_back(op);
      }
      if (overall && pattern_.nm()) {
        func.emitError() << "an overall sparsity is a fraction, not N:M";
        return signalPassFailure();
      }
      llvm::DenseMap<Operation*, PrunePattern> shares;
      if (overall) allocateOverall(func, targets, &shares);
      for (size_t i = 0; i < targets.size(); ++i) {
        Operation* op = targets[i];
        reportProgress("prune: product " + std::to_string(i + 1) + "/" +
                       std::to_string(targets.size()) + " " + where(op));
        auto share = shares.find(op);
        prune(func, op, share == shares.end() ? pattern_ : share->second);
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
    if (const std::string dense = keptDense({up, down}); !dense.empty())
      return skip("keeps its channels (--keep-dense " + dense + ")");
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
    std::vector<double> scores;
    const std::vector<int64_t> keep = keptMlpChannels(
        *down_weight, down_trans != 0, stats->second.mean_sq.data<float>(), kept, &scores);
    std::vector<int64_t> up_columns = keep;
    if (gated)  // the gate's columns, then the same channels of the up half
      for (int64_t c : keep) up_columns.push_back(f + c);
    OpBuilder b(up);
    Location loc = up->getLoc();
    auto gather = [&](Value v, int64_t axis, const std::vector<int64_t>& indices) {
      return gatherConstant(b, loc, v, axis, indices);
    };
    Value new_up = gather(up->getOperand(1), up_trans ? 0 : 1, up_columns);
    Value new_bias = bias ? gather(bias, 0, keep) : Value();
    Value new_down = gather(down->getOperand(1), down_trans ? 1 : 0, keep);
    if (!new_up || !new_down || (bias && !new_bias))
      return skip("the Gather of its weights failed; stays whole");
    up->setOperand(1, new_up);
    if (new_bias) up->setOperand(2, new_bias);
    setLastDim(h, kept);
    down->setOperand(1, new_down);
    // Which input channels the down projection kept: the quantizer slices its statistics too.
    down->setAttr("llmc.kept_inputs", b.getDenseI64ArrayAttr(keep));
    sliceChannels(&stats->second, keep);
    logFusion(func, {true, kPass, label, nodes,
                     "kept " + std::to_string(kept) + " of " + std::to_string(f) + " channels" +
                         scoredRemoval("channel", keep, scores)});
  }

  // One decoder layer of a pre-norm residual stream: `input` normalizes the stream x_i (its sum
  // with its residual, or its input) for the attention; `post` adds the attention's output to
  // x_i and normalizes for the MLP; `exit` adds the MLP's output and normalizes for the next
  // layer (or the LM head): its sum is x_{i+1}.
  struct DecoderLayer {
    Operation* attention;
    Operation* input;
    Operation* post;
    Operation* exit;
    double influence;
    std::string kept_dense;  // the --keep-dense pattern that keeps it, if any
  };

  // The stream a norm reads: its sum with its residual, or its input.
  static Value streamOf(Operation* norm) {
    return isa<NoneType>(norm->getOperand(1).getType()) ? norm->getOperand(0) : norm->getResult(1);
  }
  static bool isStreamNorm(Operation* op) {
    return op && isOp(op, "llm.norm") && !op->getAttr("group");
  }
  // Whether `norm` adds something to `stream` (either operand: the sum is the same).
  static bool addsTo(Operation* norm, Value stream) {
    return !isa<NoneType>(norm->getOperand(1).getType()) &&
           (norm->getOperand(0) == stream || norm->getOperand(1) == stream);
  }

  std::optional<DecoderLayer> decoderLayer(Operation* attention, std::string* why) {
    // The attention's q back to its product, through ropes and per-head norms.
    Value v = attention->getOperand(0);
    Operation* def = v.getDefiningOp();
    while (def && (isOp(def, "llm.rope") || (isOp(def, "llm.norm") && def->getAttr("group"))))
      def = def->getOperand(0).getDefiningOp();
    if (!def || !(isOp(def, "llm.fused_matmul") || isOp(def, "nn.matmul"))) {
      *why = "its q does not come from a product";
      return std::nullopt;
    }
    Operation* input = def->getOperand(0).getDefiningOp();
    if (!isStreamNorm(input) || def->getOperand(0) != input->getResult(0)) {
      *why = "its input is not normalized by a norm of the residual stream (a pre-norm layer)";
      return std::nullopt;
    }
    Value x = streamOf(input);
    // The output projection's result is what the next norm adds to x.
    Value out = attention->getResult(0);
    Operation* o_proj = out.hasOneUse() ? *out.getUsers().begin() : nullptr;
    Operation* post = nullptr;
    if (o_proj && (isOp(o_proj, "llm.fused_matmul") || isOp(o_proj, "nn.matmul")) &&
        o_proj->getOperand(0) == out)
      for (Operation* user : x.getUsers())
        if (user != input && isStreamNorm(user) && addsTo(user, x) &&
            addsTo(user, o_proj->getResult(0)))
          post = post ? nullptr : user;
    if (!post) {
      *why =
          "its output projection is not what one norm adds to its input stream (a sequential "
          "pre-norm layer; parallel attention and MLP are not)";
      return std::nullopt;
    }
    Value h = post->getResult(1);
    Operation* exit = h.hasOneUse() ? *h.getUsers().begin() : nullptr;
    Value mlp = exit && isStreamNorm(exit) && addsTo(exit, h)
                    ? exit->getOperand(exit->getOperand(0) == h ? 1 : 0)
                    : Value();
    Operation* down = mlp ? mlp.getDefiningOp() : nullptr;
    if (!down || !(isOp(down, "llm.fused_matmul") || isOp(down, "nn.matmul"))) {
      *why = "the stream after its attention does not feed one norm that adds the MLP's output";
      return std::nullopt;
    }
    const bool input_fused = !isa<NoneType>(input->getOperand(1).getType());
    if (llvm::any_of(x.getUsers(),
                     [&](Operation* u) { return u != post && (input_fused || u != input); })) {
      *why = "its residual stream has other users";
      return std::nullopt;
    }
    return DecoderLayer{attention, input, post, exit, 0, ""};
  }

  // `norm` now normalizes x (+ residual): its operands set, or, when it gains or loses its
  // residual, a new norm in its place (a lost sum is x itself). Returns the norm.
  static Operation* rewireNorm(Operation* norm, Value x, Value residual) {
    const bool fused = !isa<NoneType>(residual.getType());
    if (fused == (norm->getNumResults() == 2)) {
      norm->setOperand(0, x);
      norm->setOperand(1, residual);
      return norm;
    }
    OpBuilder b(norm);
    SmallVector<Type> types(fused ? 2 : 1, norm->getResult(0).getType());
    OperationState state(norm->getLoc(), norm->getName());
    state.addOperands({x, residual, norm->getOperand(2), norm->getOperand(3)});
    state.addTypes(types);
    state.addAttributes(norm->getAttrs());
    Operation* replacement = b.create(state);
    norm->getResult(0).replaceAllUsesWith(replacement->getResult(0));
    if (norm->getNumResults() == 2) norm->getResult(1).replaceAllUsesWith(x);
    norm->erase();
    return replacement;
  }

  // Structured: whole decoder layers, ShortGPT's way: the layers whose output stream is most
  // like their input (the lowest block influence on the calibration rows) go; the next layer
  // (or the final norm) reads what the removed layer read.
  void pruneLayers(func::FuncOp func) {
    const std::string label =
        "layers " + std::to_string(static_cast<int>(std::lround(layers * 100))) + "%";
    auto refuse = [&](const std::string& nodes, const std::string& why) {
      logFusion(func, {false, kPass, label, nodes, why + "; every layer stays"});
    };
    auto config = func->getAttrOfType<DictionaryAttr>("llm.config");
    std::vector<DecoderLayer> stack;
    for (Operation& op : func.getBody().front()) {
      if (isOp(&op, "llm.sdpa") || (isOp(&op, "llm.attention") && !config))
        return refuse(nodeNames({&op}),
                      "not a decoder over the KV cache (an encoder's or "
                      "unrecognized attention)");
      if (!isOp(&op, "llm.attention")) continue;
      std::string why;
      std::optional<DecoderLayer> layer = decoderLayer(&op, &why);
      if (!layer) return refuse(nodeNames({&op}), why);
      if (!stack.empty() && stack.back().exit != layer->input)
        return refuse(nodeNames({&op}), "it does not read the previous layer's output stream");
      auto before = stats_.find(nodeNameOf(layer->input) + std::string(kStreamSuffix));
      auto after = stats_.find(nodeNameOf(layer->exit) + std::string(kStreamSuffix));
      layer->influence = before == stats_.end() || after == stats_.end()
                             ? std::nan("")
                             : blockInfluence(before->second.samples, after->second.samples);
      if (std::isnan(layer->influence))
        return refuse(nodeNames({&op}), "the calibration did not see its residual stream");
      layer->kept_dense = keptDense({&op});
      if (!layer->kept_dense.empty())
        logFusion(func, {false, kPass, label, nodeNames({&op}),
                         "stays (--keep-dense " + layer->kept_dense + ")"});
      stack.push_back(*layer);
    }
    if (stack.empty()) return;
    const int64_t count = static_cast<int64_t>(stack.size());
    const int64_t removed =
        std::clamp<int64_t>(std::llround(layers * static_cast<double>(count)), 0, count - 1);
    if (removed == 0)
      return refuse("", "rounding removes none of the " + std::to_string(count) + " layers");
    std::vector<int64_t> order(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return stack[a].influence < stack[b].influence; });
    std::vector<bool> gone(static_cast<size_t>(count), false);
    for (int64_t i = 0, left = removed; i < count && left > 0; ++i)
      if (stack[order[i]].kept_dense.empty()) gone[order[i]] = true, --left;
    std::string influences;
    for (int64_t i = 0; i < count; ++i) {
      char text[48];
      std::snprintf(text, sizeof(text), "%s%lld: %.4f", i ? ", " : "", static_cast<long long>(i),
                    stack[i].influence);
      influences += text;
    }
    // In order: a removed layer's exit norm reads what its input norm read (a run of removed
    // layers chains through, as each input norm is the previous layer's exit).
    std::vector<Operation*> dead_attention;
    for (int64_t i = 0; i < count; ++i) {
      if (!gone[i]) continue;
      DecoderLayer& layer = stack[i];
      const std::string nodes = nodeNames({layer.attention});
      Operation* exit =
          rewireNorm(layer.exit, layer.input->getOperand(0), layer.input->getOperand(1));
      if (i + 1 < count) stack[i + 1].input = exit;
      dead_attention.push_back(layer.attention);
      char detail[96];
      std::snprintf(detail, sizeof(detail), "removed layer %lld of %lld (block influence %.4f)",
                    static_cast<long long>(i), static_cast<long long>(count), layer.influence);
      logFusion(func, {true, kPass, label, nodes,
                       std::string(detail) + "; every layer's: " + influences});
    }
    Block& body = func.getBody().front();
    eraseDeadOps(body);  // the removed layers' products, norms and ropes
    for (Operation* attention : dead_attention) {
      // Something else reading the layer: the checks above leave nothing that could.
      if (!attention->use_empty()) {
        func.emitError() << "a removed layer's attention is still used";
        return signalPassFailure();
      }
      attention->erase();
    }
    eraseDeadOps(body);  // what fed them
    // The KV cache's layers, renumbered.
    int64_t next = 0;
    OpBuilder b(func.getContext());
    for (Operation& op : body)
      if (isOp(&op, "llm.attention")) op.setAttr("layer", b.getI64IntegerAttr(next++));
    updateConfig(func, {{"num_layers", next}});
  }

  // One attention's head pruning: what the rewrite changes.
  struct HeadPlan {
    Operation* attention = nullptr;
    Operation* o_proj = nullptr;
    int64_t heads = 0, kv_heads = 0, head_dim = 0;
    int64_t groups_removed = 0, heads_removed_per_group = 0;
    // Each distinct q/k/v operand: the product that makes it, the llm.rope / per-head llm.norm
    // ops between them (product first), and the attention's roles (0 q, 1 k, 2 v) it feeds,
    // by column offset.
    struct Source {
      Value value;
      Operation* product = nullptr;
      std::vector<Operation*> chain;
      std::vector<int> roles;
    };
    std::vector<Source> sources;
  };

  // Structured: attention heads. Every token-major llm.attention (the KV cache's) and
  // llm.sdpa whose q, k and v come from products with constant weights, through at most a
  // rope and per-head norms, and whose output feeds one product with a constant weight (the
  // output projection) loses the lowest-scoring KV groups (kv-heads) and query heads of each
  // group (heads). The KV cache and the engine's model table hold one head count for every
  // layer, so either every llm.attention loses the same count or none does.
  void pruneHeads(func::FuncOp func) {
    std::vector<HeadPlan> plans;
    bool cached_ok = true;
    std::vector<Operation*> cached;
    for (Operation& op : func.getBody().front()) {
      const bool is_cached = isOp(&op, "llm.attention");
      if (!is_cached && !isOp(&op, "llm.sdpa")) continue;
      std::string why;
      std::optional<HeadPlan> plan = planHeads(&op, &why);
      if (const std::string dense = plan ? keptDense({&op, plan->o_proj}) : ""; !dense.empty())
        why = "keeps its heads (--keep-dense " + dense + ")", plan.reset();
      if (!plan) {
        logFusion(func, {false, kPass, headsLabel(), nodeNames({&op}), why});
        if (is_cached) cached_ok = false;
        continue;
      }
      if (is_cached) cached.push_back(&op);
      plans.push_back(std::move(*plan));
    }
    if (!cached_ok)
      for (Operation* op : cached)
        logFusion(func, {false, kPass, headsLabel(), nodeNames({op}),
                         "another layer's attention keeps its heads, and the KV cache holds one "
                         "head count for every layer; stays whole"});
    int64_t new_heads = 0, new_kv_heads = 0;
    for (HeadPlan& plan : plans) {
      if (!cached_ok && isOp(plan.attention, "llm.attention")) continue;
      if (!applyHeads(func, plan)) continue;
      if (isOp(plan.attention, "llm.attention")) {
        new_heads = cast<IntegerAttr>(plan.attention->getAttr("num_heads")).getInt();
        new_kv_heads = cast<IntegerAttr>(plan.attention->getAttr("num_kv_heads")).getInt();
      }
    }
    if (new_heads > 0)
      updateConfig(func, {{"num_heads", new_heads}, {"num_kv_heads", new_kv_heads}});
  }

  std::string headsLabel() const {
    auto percent = [](double f) {
      return std::to_string(static_cast<int>(std::lround(f * 100))) + "%";
    };
    if (heads > 0 && kvHeads > 0)
      return "heads " + percent(heads) + " kv-heads " + percent(kvHeads);
    return heads > 0 ? "heads " + percent(heads) : "kv-heads " + percent(kvHeads);
  }

  std::optional<HeadPlan> planHeads(Operation* attention, std::string* why) {
    auto fail = [&](const std::string& reason) -> std::optional<HeadPlan> {
      *why = reason + "; keeps its heads";
      return std::nullopt;
    };
    auto attr = [&](StringRef name) {
      auto a = attention->getAttrOfType<IntegerAttr>(name);
      return a ? a.getInt() : int64_t{-1};
    };
    HeadPlan plan;
    plan.attention = attention;
    plan.heads = attr("num_heads"), plan.kv_heads = attr("num_kv_heads");
    plan.head_dim = attr("head_dim");
    const int64_t columns[3] = {attr("q_column"), attr("k_column"), attr("v_column")};
    if (plan.heads < 1 || plan.kv_heads < 1 || plan.head_dim < 1 || columns[0] < 0 ||
        columns[1] < 0 || columns[2] < 0 || plan.heads % plan.kv_heads != 0)
      return fail("not the token-major form (q, k and v as columns of rows)");
    if (attention->getAttr("alibi_slopes"))
      return fail("its ALiBi slopes belong to its heads, and pruning does not renumber them");
    const int64_t group = plan.heads / plan.kv_heads;
    // The count each flag removes, rounded; every group keeps a query head and one group stays.
    const int64_t removed_groups =
        std::llround(kvHeads * static_cast<double>(plan.kv_heads)) +
        (group == 1 ? std::llround(heads * static_cast<double>(plan.kv_heads)) : 0);
    plan.groups_removed = std::clamp<int64_t>(removed_groups, 0, plan.kv_heads - 1);
    plan.heads_removed_per_group =
        group == 1
            ? 0
            : std::clamp<int64_t>(std::llround(heads * static_cast<double>(group)), 0, group - 1);
    if (plan.groups_removed == 0 && plan.heads_removed_per_group == 0)
      return fail("rounding removes none of its " + std::to_string(plan.heads) + " heads (" +
                  std::to_string(plan.kv_heads) + " KV heads)");
    if (isOp(attention, "llm.sdpa") && !isa<NoneType>(attention->getOperand(3).getType())) {
      auto mask = dyn_cast<RankedTensorType>(attention->getOperand(3).getType());
      if (!mask || (mask.getRank() >= 3 && mask.getDimSize(mask.getRank() - 3) != 1))
        return fail("its mask differs per head");
    }
    // The output projection.
    Value out = attention->getResult(0);
    if (!out.hasOneUse()) return fail("its output has more than one user");
    plan.o_proj = *out.getUsers().begin();
    if (!(isOp(plan.o_proj, "llm.fused_matmul") || isOp(plan.o_proj, "nn.matmul")) ||
        plan.o_proj->getOperand(0) != out || !float32Constant(plan.o_proj->getOperand(1)))
      return fail("its output does not feed one product with a constant weight");
    auto stats = stats_.find(nodeNameOf(plan.o_proj));
    if (stats == stats_.end() || stats->second.mean_sq.numElements() != plan.heads * plan.head_dim)
      return fail("the calibration did not see the output projection");
    // The sources of q, k and v.
    const int64_t widths[3] = {plan.heads * plan.head_dim, plan.kv_heads * plan.head_dim,
                               plan.kv_heads * plan.head_dim};
    for (int role = 0; role < 3; ++role) {
      Value v = attention->getOperand(role);
      auto it = std::find_if(plan.sources.begin(), plan.sources.end(),
                             [&](const HeadPlan::Source& s) { return s.value == v; });
      if (it == plan.sources.end()) {
        plan.sources.push_back({v, nullptr, {}, {}});
        it = std::prev(plan.sources.end());
      }
      it->roles.push_back(role);
    }
    for (HeadPlan::Source& source : plan.sources) {
      std::sort(source.roles.begin(), source.roles.end(),
                [&](int a, int b) { return columns[a] < columns[b]; });
      int64_t next = 0;
      for (int role : source.roles) {
        if (columns[role] != next) return fail("its q, k and v do not tile their rows");
        next += widths[role];
      }
      auto type = dyn_cast<RankedTensorType>(source.value.getType());
      if (!type || type.getRank() < 1 || type.getShape().back() != next)
        return fail("its q, k and v rows hold other columns");
      // Walk back through ropes and per-head norms to the product; each value on the way is
      // used by the next op only.
      Operation* user = attention;
      Value v = source.value;
      while (true) {
        if (!llvm::all_of(v.getUsers(), [&](Operation* u) { return u == user; }))
          return fail("its q, k or v rows have other users");
        Operation* def = v.getDefiningOp();
        if (!def) return fail("its q, k or v rows are a function argument");
        if (isOp(def, "llm.rope")) {
          auto rotated = def->getAttrOfType<IntegerAttr>("num_heads");
          auto dim = def->getAttrOfType<IntegerAttr>("head_dim");
          if (!rotated || !dim || dim.getInt() != plan.head_dim || def->getAttr("token_axis"))
            return fail("a rope of its rows is not token-major over its heads");
        } else if (isOp(def, "llm.norm")) {
          auto norm_group = def->getAttrOfType<IntegerAttr>("group");
          if (def->getNumResults() != 1 || !isa<NoneType>(def->getOperand(1).getType()) ||
              !norm_group || norm_group.getInt() != plan.head_dim)
            return fail("a norm of its rows is not per head");
          for (unsigned i = 2; i < 4; ++i) {
            Value param = def->getOperand(i);
            if (isa<NoneType>(param.getType())) continue;
            // C values: the first C columns of the row normalized, head by head.
            std::optional<Tensor> t = float32Constant(param);
            if (!t || t->rank() != 1 || t->numElements() % plan.head_dim != 0 ||
                t->numElements() > next)
              return fail("a per-head norm's weights are not constants over whole heads");
          }
        } else if (isOp(def, "llm.fused_matmul") || isOp(def, "nn.matmul")) {
          auto w = dyn_cast<RankedTensorType>(def->getOperand(1).getType());
          if (!w || w.getRank() != 2 || !float32Constant(def->getOperand(1)))
            return fail("its q, k or v product has no constant float32 weight");
          if (isOp(def, "llm.fused_matmul") && !isa<NoneType>(def->getOperand(2).getType()) &&
              !float32Constant(def->getOperand(2)))
            return fail("its q, k or v product's bias is not a constant");
          source.product = def;
          std::reverse(source.chain.begin(), source.chain.end());
          break;
        } else {
          return fail("its q, k or v rows come from " + def->getName().getStringRef().str() +
                      ", not a product");
        }
        source.chain.push_back(def);
        user = def;
        v = def->getOperand(0);
      }
    }
    return plan;
  }

  bool applyHeads(func::FuncOp func, const HeadPlan& plan) {
    Operation* attention = plan.attention;
    const int64_t hd = plan.head_dim;
    auto stats = stats_.find(nodeNameOf(plan.o_proj));
    std::optional<Tensor> o_weight = float32Constant(plan.o_proj->getOperand(1));
    const bool o_trans = transB(plan.o_proj) != 0;
    const KeptHeads kept =
        keptAttentionHeads(*o_weight, o_trans, stats->second.mean_sq.data<float>(), plan.heads,
                           plan.kv_heads, plan.groups_removed, plan.heads_removed_per_group);
    const std::string nodes = nodeNames({attention, plan.o_proj});
    auto skip = [&](const std::string& why) {
      logFusion(func, {false, kPass, headsLabel(), nodes, why + "; keeps its heads"});
      return false;
    };
    // Head chunks (head_dim columns each) of every role, in the attention's head order.
    auto keptChunks = [&](int role) { return role == 0 ? kept.heads : kept.kv_heads; };
    const int64_t old_columns[3] = {cast<IntegerAttr>(attention->getAttr("q_column")).getInt(),
                                    cast<IntegerAttr>(attention->getAttr("k_column")).getInt(),
                                    cast<IntegerAttr>(attention->getAttr("v_column")).getInt()};
    int64_t new_columns[3] = {0, 0, 0};
    OpBuilder b(attention);
    // Build every new constant first, so a refusal leaves the graph as it was.
    struct Change {
      Operation* op;
      unsigned operand;
      Value value;
    };
    std::vector<Change> changes;
    std::vector<std::pair<Value, int64_t>> widths;
    std::vector<std::pair<Operation*, int64_t>> rotations;
    for (const HeadPlan::Source& source : plan.sources) {
      std::vector<int64_t> columns, chunk_old;  // kept columns; each kept chunk's old index
      for (int role : source.roles) {
        new_columns[role] = static_cast<int64_t>(columns.size());
        for (int64_t h : keptChunks(role)) {
          chunk_old.push_back((old_columns[role] + h * hd) / hd);
          for (int64_t d = 0; d < hd; ++d) columns.push_back(old_columns[role] + h * hd + d);
        }
      }
      const int64_t width = static_cast<int64_t>(columns.size());
      Operation* product = source.product;
      OpBuilder pb(product);
      Location loc = product->getLoc();
      Value w = gatherConstant(pb, loc, product->getOperand(1), transB(product) ? 0 : 1, columns);
      if (!w) return skip("the Gather of its q, k or v weight failed");
      changes.push_back({product, 1, w});
      if (isOp(product, "llm.fused_matmul") && !isa<NoneType>(product->getOperand(2).getType())) {
        Value bias = gatherConstant(pb, loc, product->getOperand(2), 0, columns);
        if (!bias) return skip("the Gather of its q, k or v bias failed");
        changes.push_back({product, 2, bias});
      }
      widths.push_back({product->getResult(0), width});
      for (Operation* op : source.chain) {
        widths.push_back({op->getResult(0), width});
        if (isOp(op, "llm.rope")) {
          // The first R heads of the row rotate: now those of the kept chunks that were.
          const int64_t rotated = cast<IntegerAttr>(op->getAttr("num_heads")).getInt();
          rotations.push_back({op, std::count_if(chunk_old.begin(), chunk_old.end(),
                                                 [&](int64_t c) { return c < rotated; })});
          continue;
        }
        for (unsigned i = 2; i < 4; ++i) {  // a per-head norm's weights: its first C columns
          Value param = op->getOperand(i);
          if (isa<NoneType>(param.getType())) continue;
          const int64_t normalized = float32Constant(param)->numElements();
          std::vector<int64_t> kept_normalized;
          for (int64_t c : columns)
            if (c < normalized) kept_normalized.push_back(c);
          if (kept_normalized.empty()) return skip("a per-head norm would keep none of its heads");
          OpBuilder nb(op);
          Value sliced = gatherConstant(nb, op->getLoc(), param, 0, kept_normalized);
          if (!sliced) return skip("the Gather of a per-head norm's weights failed");
          changes.push_back({op, i, sliced});
        }
      }
    }
    std::vector<int64_t> o_channels;
    for (int64_t h : kept.heads)
      for (int64_t d = 0; d < hd; ++d) o_channels.push_back(h * hd + d);
    OpBuilder ob(plan.o_proj);
    Value o_new = gatherConstant(ob, plan.o_proj->getLoc(), plan.o_proj->getOperand(1),
                                 o_trans ? 1 : 0, o_channels);
    if (!o_new) return skip("the Gather of its output projection's weight failed");
    changes.push_back({plan.o_proj, 1, o_new});
    // Commit.
    for (const Change& change : changes) change.op->setOperand(change.operand, change.value);
    for (const auto& [value, width] : widths) setLastDim(value, width);
    for (const auto& [op, rotated] : rotations)
      op->setAttr("num_heads", b.getI64IntegerAttr(rotated));
    const int64_t kept_heads = static_cast<int64_t>(kept.heads.size());
    attention->setAttr("num_heads", b.getI64IntegerAttr(kept_heads));
    attention->setAttr("num_kv_heads",
                       b.getI64IntegerAttr(static_cast<int64_t>(kept.kv_heads.size())));
    attention->setAttr("q_column", b.getI64IntegerAttr(new_columns[0]));
    attention->setAttr("k_column", b.getI64IntegerAttr(new_columns[1]));
    attention->setAttr("v_column", b.getI64IntegerAttr(new_columns[2]));
    setLastDim(attention->getResult(0), kept_heads * hd);
    plan.o_proj->setAttr("llmc.kept_inputs", b.getDenseI64ArrayAttr(o_channels));
    sliceChannels(&stats->second, o_channels);
    std::string detail =
        "kept " + std::to_string(kept_heads) + " of " + std::to_string(plan.heads) + " heads, " +
        std::to_string(kept.kv_heads.size()) + " of " + std::to_string(plan.kv_heads) +
        " KV heads" + headRemoval(kept, plan.heads, plan.kv_heads);
    logFusion(func, {true, kPass, headsLabel(), nodes, detail});
    return true;
  }

  // The first --keep-dense pattern one of `ops`' ONNX nodes contains, or "".
  std::string keptDense(ArrayRef<Operation*> ops) const {
    for (Operation* op : ops) {
      const std::string names = allNodeNames(op);
      for (const std::string& pattern : keepDense)
        if (!pattern.empty() && names.find(pattern) != std::string::npos) return pattern;
    }
    return "";
  }

  std::string name(Operation* op) const {
    return std::string(pruneMethodName(method_)) + " " + pattern_.text() +
           (overall ? " overall" : "") + (isOp(op, "llm.gated_mlp") ? " gated-mlp" : " matmul");
  }

  // A product's 2-D float32 weight and, for the calibrated methods, its input channels' norms
  // ||x_j||2 (up to a factor common to every channel); nullopt when prune() leaves it dense.
  struct Scored {
    Tensor weight;
    bool transposed = false;
    std::vector<float> norms;  // empty: magnitude
  };
  std::optional<Scored> scored(Operation* op) {
    auto w_type = dyn_cast<RankedTensorType>(op->getOperand(1).getType());
    std::optional<Tensor> weight =
        w_type && w_type.getRank() == 2 ? float32Constant(op->getOperand(1)) : std::nullopt;
    if (!weight) return std::nullopt;
    Scored out{*weight, transB(op) != 0, {}};
    const int64_t k = weight->dim(out.transposed ? 1 : 0);
    if (method_ == PruneMethod::kMagnitude) return out;
    auto stats = stats_.find(nodeNameOf(op));
    if (stats == stats_.end() || stats->second.mean_sq.numElements() != k) return std::nullopt;
    for (int64_t j = 0; j < k; ++j)
      out.norms.push_back(std::sqrt(stats->second.mean_sq.data<float>()[j]));
    return out;
  }

  // --prune METHOD:S,overall: the model's share S spread over the products (overallShares) by
  // their scores (|w|, or Wanda's |w| * ||x_j||2 for Wanda and SparseGPT), each product's
  // divided by their mean (raw scores differ by orders of magnitude between products: an output
  // projection's inputs are small), from a sample of at most 2^16 per product; each share is
  // rounded to whole weights per row (at least one kept) and the product's rows are then pruned
  // evenly at it.
  void allocateOverall(func::FuncOp func, const std::vector<Operation*>& targets,
                       llvm::DenseMap<Operation*, PrunePattern>* shares) {
    struct Item {
      Operation* op;
      int64_t size, k;
    };
    std::vector<Item> items;
    std::vector<std::vector<float>> samples;  // each product's scores divided by their mean
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (Operation* op : targets) {
      std::optional<Scored> item = scored(op);
      if (!item) continue;
      const Tensor& w = item->weight;
      const int64_t n = w.numElements(), cols = w.dim(1);
      auto score = [&](int64_t e) {
        const float a = std::fabs(w.data<float>()[e]);
        return item->norms.empty() ? a : a * item->norms[item->transposed ? e % cols : e / cols];
      };
      double mean = 0;
      for (int64_t e = 0; e < n; ++e) mean += score(e);
      mean /= static_cast<double>(n);
      std::vector<float>& sample = samples.emplace_back();
      for (int64_t e = 0, stride = std::max<int64_t>(1, n >> 16); e < n; e += stride)
        sample.push_back(mean > 0 ? static_cast<float>(score(e) / mean) : 0.0f);
      items.push_back({op, n, w.dim(item->transposed ? 1 : 0)});
      sizes.push_back(n);
      total += n;
    }
    if (items.empty()) return;
    const std::vector<double> fractions =
        overallShares(std::move(samples), sizes, pattern_.sparsity);
    int64_t zeros = 0;
    double lowest = 1, highest = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& item = items[i];
      const int64_t rows = item.size / item.k;
      const int64_t removed = std::clamp<int64_t>(
          std::llround(fractions[i] * static_cast<double>(item.k)), 0, item.k - 1);
      PrunePattern share;
      share.sparsity = static_cast<double>(removed) / static_cast<double>(item.k);
      (*shares)[item.op] = share;
      zeros += removed * rows;
      lowest = std::min(lowest, share.sparsity), highest = std::max(highest, share.sparsity);
    }
    char detail[160];
    std::snprintf(detail, sizeof(detail),
                  "%.1f%% of %lld weights zero over %zu products, each from %.1f%% to %.1f%%",
                  100.0 * static_cast<double>(zeros) / static_cast<double>(total),
                  static_cast<long long>(total), items.size(), 100 * lowest, 100 * highest);
    logFusion(func, {true, kPass,
                     std::string(pruneMethodName(method_)) + " " + pattern_.text() + " overall",
                     "the model", detail});
  }

  void prune(func::FuncOp func, Operation* op, const PrunePattern& pattern) {
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
    if (Status fits = checkPrunePattern(pattern, k); !fits.ok())
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
      if (Status s = sparseGptPrune(*weight, trans_b != 0, pattern, seen->gram, options, &result);
          !s.ok())
        return skip(s.message() + "; stays dense");
      pruned = float32ConstantOp(b, loc, result, "");
    } else {
      SmallVector<NamedAttribute> params{
          b.getNamedAttr("method", b.getStringAttr(pruneMethodName(method_))),
          b.getNamedAttr("trans_b", b.getI64IntegerAttr(trans_b))};
      if (pattern.nm()) {
        params.push_back(b.getNamedAttr("n", b.getI64IntegerAttr(pattern.n)));
        params.push_back(b.getNamedAttr("m", b.getI64IntegerAttr(pattern.m)));
      } else {
        params.push_back(b.getNamedAttr("sparsity", b.getF64FloatAttr(pattern.sparsity)));
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
    char detail[224];
    const int n =
        std::snprintf(detail, sizeof(detail), "%.1f%% of %lld weights zero (%lld of %lld per row)",
                      100 * zeroFraction(*result), static_cast<long long>(weight->numElements()),
                      static_cast<long long>(k - pattern.keptPerRow(k)), static_cast<long long>(k));
    if (seen && seen->samples.rank() == 2 && seen->samples.dim(0) > 0)
      std::snprintf(detail + n, sizeof(detail) - n,
                    "; relative output error %.4f on %lld calibration rows",
                    relativeOutputError(seen->samples, *weight, *result, trans_b != 0),
                    static_cast<long long>(std::min<int64_t>(seen->samples.dim(0), 128)));
    op->setOperand(1, pruned);
    // What sparse storage (--llmc-quantize-weights) takes as its stride: no row keeps more.
    op->setAttr("llmc.kept_per_row", b.getI64IntegerAttr(pattern.keptPerRow(k)));
    logFusion(func, {true, kPass, name(op), nodes, detail});
  }
};

}  // namespace
}  // namespace llmc
