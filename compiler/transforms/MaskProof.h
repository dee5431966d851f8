// Proves what an attention mask computed inside a model allows, for every sequence length up
// to the engine's context: causal, or causal within a sliding window. Used by
// --llmc-recognize-llm before a core moves onto the paged KV cache (docs/llm.md, "Masks").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace llmc {

// An attention core's mask as the recognizer found it.
struct MaskSpec {
  mlir::Value mask;  // additive bias (`additive`) or the boolean selecting scores
  mlir::Value fill;  // selector form: what unselected scores become (null: none)
  bool additive = true;
  bool where_scores_on_false = false;  // selector form: scores kept where the mask is false
  // Factors of the scores computed from shapes (sqrt(head_dim) through Shape/Pow): (factor,
  // divides). They must not depend on the sequence length.
  std::vector<std::pair<mlir::Value, bool>> shape_scales;
};

struct MaskProof {
  std::string error;    // empty when proven
  int64_t window = 0;   // 0: causal; W > 0: each query sees its own and the W - 1 keys before it
  double scale = 1;     // the product of the shape-computed factors
  // The mask is proven for every length up to proven_length. When the model itself caps
  // lengths below the requested context (a mask sliced from a fixed-size buffer),
  // `model_bound` is set and the engine's context must not exceed proven_length.
  int64_t proven_length = 0;
  bool model_bound = false;
  // How each ScatterND on the way was proven to write at the origin (for --verbose).
  std::vector<std::string> notes;
};

// Proves masks of `func` for every sequence length 1..context, with input_ids [batch_symbol,
// seq_symbol] (attention_mask all ones, position_ids 0..n-1). See MaskProof.cpp for the
// argument. The proofs of one MaskProver share their analysis and evaluations: what several
// masks compute in common (a model's one mask, sliced per layer) is evaluated once, and the
// lengths a model's own buffers allow, as far as its proofs so far have found them, bound the
// proofs after (a cap that can only be lower than a proof of its own would find). Valid while
// `func` is unchanged: a rewrite between proofs needs a new one.
class MaskProver {
 public:
  MaskProver(mlir::func::FuncOp func, llvm::StringRef batch_symbol, llvm::StringRef seq_symbol,
             int64_t context);
  ~MaskProver();
  // Masks to be proven later: the values they share are kept until the last of them is proven.
  void expect(llvm::ArrayRef<mlir::Value> masks);
  MaskProof prove(const MaskSpec& spec);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// An ALiBi bias as the recognizer found it: added to scores [batch, heads, q, k], or to
// [batch x heads, q, k] when the model merged the heads into the batch axis (Bloom's baddbmm).
struct AlibiSpec {
  mlir::Value bias;
  int64_t heads = 0;
  bool merged_heads = false;
};

struct AlibiProof {
  std::string error;           // empty when proven
  std::vector<double> slopes;  // per head: the bias of key position j is slopes[h] * j
};

// Proves that `spec.bias` is, at every sequence length 1..context (with the inputs of
// MaskProver), slopes[h] * j for head h and key position j, whatever the query (ALiBi).
AlibiProof proveAlibi(mlir::func::FuncOp func, llvm::StringRef batch_symbol,
                      llvm::StringRef seq_symbol, int64_t context, const AlibiSpec& spec);

// Positions a model computes from its attention mask (transformers' cumsum(mask) - 1, for left
// padding): proven, at every length up to `context`, to be j + offset at index j of the last
// axis in every row (the engine's tokens: attention_mask all ones).
struct PositionsProof {
  std::string error;  // empty when proven
  int64_t offset = 0;
};
PositionsProof provePositions(mlir::func::FuncOp func, llvm::StringRef batch_symbol,
                              llvm::StringRef seq_symbol, int64_t context, mlir::Value positions);

}  // namespace llmc
