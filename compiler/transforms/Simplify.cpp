// --llmc-simplify: canonicalization patterns for nn ops that inference makes trivial.
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_SIMPLIFY
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

/// Identity(x) -> x; Dropout(x, ...) -> x when its mask is unused (inference: Dropout is
/// the identity whatever ratio and training_mode say... except training_mode = true, which
/// only a training graph sets, and which we keep).
struct ForwardIdentity : public OpRewritePattern<nn::IdentityOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::IdentityOp op, PatternRewriter& rewriter) const override {
    Value input = op->getOperand(0);
    if (input.getType() != op->getResult(0).getType())
      return rewriter.notifyMatchFailure(op, "type changes");
    rewriter.replaceOp(op, input);
    return success();
  }
};

struct ForwardInferenceDropout : public OpRewritePattern<nn::DropoutOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::DropoutOp op, PatternRewriter& rewriter) const override {
    if (op->getNumResults() > 1 && !op->getResult(1).use_empty())
      return rewriter.notifyMatchFailure(op, "the mask is used");
    if (op->getNumOperands() > 2 && !isa<NoneType>(op->getOperand(2).getType())) {
      // training_mode given: only a constant false makes this the identity.
      auto constant = op->getOperand(2).getDefiningOp<nn::ConstantOp>();
      if (!constant) return rewriter.notifyMatchFailure(op, "training_mode is not a constant");
      auto value = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!value || value.getNumElements() != 1 || value.getValues<bool>()[0])
        return rewriter.notifyMatchFailure(op, "training mode");
    }
    Value input = op->getOperand(0);
    if (input.getType() != op->getResult(0).getType())
      return rewriter.notifyMatchFailure(op, "type changes");
    SmallVector<Value> replacements{input};
    if (op->getNumResults() > 1) replacements.push_back(Value());
    rewriter.replaceAllUsesWith(op->getResult(0), input);
    rewriter.eraseOp(op);
    return success();
  }
};

/// op(x) -> x for shape ops whose static result type equals x's: Reshape, Expand, Squeeze,
/// Unsqueeze, Flatten, Cast, CastLike, Transpose with the identity permutation.
template <typename Op>
struct ForwardNoOpReshape : public OpRewritePattern<Op> {
  using OpRewritePattern<Op>::OpRewritePattern;
  LogicalResult matchAndRewrite(Op op, PatternRewriter& rewriter) const override {
    Value input = op->getOperand(0);
    auto type = dyn_cast<RankedTensorType>(input.getType());
    if (!type || !type.hasStaticShape() || type != op->getResult(0).getType())
      return rewriter.notifyMatchFailure(op, "not statically the same type");
    if constexpr (std::is_same_v<Op, nn::TransposeOp>) {
      if (auto perm = op->template getAttrOfType<DenseI64ArrayAttr>("perm")) {
        for (int64_t i = 0; i < perm.size(); ++i)
          if (perm[i] != i) return rewriter.notifyMatchFailure(op, "not the identity permutation");
      } else if (type.getRank() > 1) {
        return rewriter.notifyMatchFailure(op, "default permutation reverses");
      }
    }
    rewriter.replaceOp(op, input);
    return success();
  }
};

/// Reshape(x, shape) -> x, any dynamic dimensions included, when the constant shape keeps
/// every dimension: each entry is 0 (copy the input's; allowzero = 0) or the input's static
/// size, and the result has x's type. Exports write these where they computed the shape from
/// the tensor itself: torch's SDPA decomposition reshapes its result to the [batch, heads,
/// tokens, head_dim] it already is, which hid the attention's layout from fuse-qkv. -1 is not
/// taken: with a dimension of size 0 at run time, what it stands for is not x's dimension.
struct ForwardCopyingReshape : public OpRewritePattern<nn::ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::ReshapeOp op, PatternRewriter& rewriter) const override {
    Value input = op->getOperand(0);
    auto type = dyn_cast<RankedTensorType>(input.getType());
    if (!type || type != op->getResult(0).getType())
      return rewriter.notifyMatchFailure(op, "not the same type");
    auto allowzero = op->getAttrOfType<IntegerAttr>("allowzero");
    auto constant = op->getOperand(1).getDefiningOp<nn::ConstantOp>();
    auto shape = constant ? dyn_cast<DenseIntElementsAttr>(constant.getValue()) : DenseIntElementsAttr();
    if (!shape || shape.getNumElements() != type.getRank())
      return rewriter.notifyMatchFailure(op, "not a constant shape of the input's rank");
    int64_t d = 0;
    for (const APInt& entry : shape.getValues<APInt>()) {
      const int64_t size = entry.getSExtValue();
      const bool copies = size == 0 && (!allowzero || allowzero.getInt() == 0);
      if (!copies && (type.isDynamicDim(d) || size != type.getDimSize(d)))
        return rewriter.notifyMatchFailure(op, "changes a dimension");
      ++d;
    }
    rewriter.replaceOp(op, input);
    return success();
  }
};

/// Cast(x) -> x when x already has the target type (any shape: a cast is elementwise).
struct ForwardIdentityCast : public OpRewritePattern<nn::CastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::CastOp op, PatternRewriter& rewriter) const override {
    Value input = op->getOperand(0);
    if (!isa<RankedTensorType>(input.getType()) || input.getType() != op->getResult(0).getType())
      return rewriter.notifyMatchFailure(op, "changes the type");
    rewriter.replaceOp(op, input);
    return success();
  }
};

/// x * 1 -> x (either order) for float x when the product has x's type: exact, NaN and
/// infinities included (models scale rotary tables by an `attention_scaling` of 1). Not for
/// initializers (weights), whose values refit may change.
struct ForwardMulByOne : public OpRewritePattern<nn::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::MulOp op, PatternRewriter& rewriter) const override {
    for (int i = 0; i < 2; ++i) {
      auto constant = op->getOperand(1 - i).getDefiningOp<nn::ConstantOp>();
      // A weight's value is not the model's structure: `llmc refit` may give it other values.
      if (constant && constant->getAttr("llmc.recipe")) continue;
      Value x = op->getOperand(i);
      auto type = dyn_cast<RankedTensorType>(x.getType());
      if (!constant || !type || !isa<FloatType>(type.getElementType()) ||
          x.getType() != op->getResult(0).getType())
        continue;
      auto value = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!value || !value.isSplat() || !isa<FloatType>(value.getElementType()) ||
          !value.getSplatValue<APFloat>().isExactlyValue(1.0))
        continue;
      rewriter.replaceOp(op, x);
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not a product with a constant 1");
  }
};

/// Concat(empty, x) -> x where every other operand is an empty past (a ConstantOfShape with a
/// static 0 along the axis, as --llmc-strip-kv-io writes them) and x has the result's type:
/// GPT-BigCode's packed key_value, whose Concat does not feed the attention directly. Other
/// empty operands stay: Phi-3's partial rotary concatenates an empty pass-through slice, which
/// --llmc-fuse-rope reads as part of the pattern.
struct ForwardConcatOfEmpty : public OpRewritePattern<nn::ConcatOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::ConcatOp op, PatternRewriter& rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    auto axis_attr = op->getAttrOfType<IntegerAttr>("axis");
    if (!type || !axis_attr) return rewriter.notifyMatchFailure(op, "unranked or no axis");
    const int64_t axis =
        axis_attr.getInt() < 0 ? axis_attr.getInt() + type.getRank() : axis_attr.getInt();
    Value kept;
    for (Value operand : op->getOperands()) {
      auto t = dyn_cast<RankedTensorType>(operand.getType());
      if (t && t.getRank() == type.getRank() && axis >= 0 && axis < t.getRank() &&
          t.getDimSize(axis) == 0 && isOp(operand.getDefiningOp(), "nn.constant_of_shape"))
        continue;
      if (kept) return rewriter.notifyMatchFailure(op, "two operands that may not be empty");
      kept = operand;
    }
    if (!kept || kept.getType() != type)
      return rewriter.notifyMatchFailure(op, "the kept operand's type is not the result's");
    rewriter.replaceOp(op, kept);
    return success();
  }
};

}  // namespace

void populateSimplifyPatterns(RewritePatternSet& patterns) {
  MLIRContext* context = patterns.getContext();
  patterns.add<ForwardIdentity, ForwardInferenceDropout, ForwardNoOpReshape<nn::ReshapeOp>,
               ForwardCopyingReshape, ForwardNoOpReshape<nn::ExpandOp>,
               ForwardNoOpReshape<nn::SqueezeOp>, ForwardNoOpReshape<nn::UnsqueezeOp>,
               ForwardNoOpReshape<nn::FlattenOp>, ForwardNoOpReshape<nn::CastOp>,
               ForwardNoOpReshape<nn::CastLikeOp>, ForwardNoOpReshape<nn::TransposeOp>,
               ForwardIdentityCast, ForwardMulByOne, ForwardConcatOfEmpty>(context);
}

namespace {
class SimplifyPass : public impl::SimplifyBase<SimplifyPass> {
 public:
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateSimplifyPatterns(patterns);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
}  // namespace

}  // namespace llmc
