// llmc passes. Each pass: one file, one flag, one lit test (test/lit/transforms/).
#ifndef LLMC_PASSES
#define LLMC_PASSES

include "mlir/Pass/PassBase.td"

def ShapeInference : Pass<"llmc-shape-inference", "mlir::func::FuncOp"> {
  let summary = "Infer dtypes and (symbolic) shapes; fold shape computations";
  let description = [{
    Runs every nn op's runtime kernel in shape-only mode, twice, with each dimension symbol
    bound to a different probe value. A result dimension that is equal under both probes is
    static; one that follows a symbol's probe value is that symbol; anything else stays
    dynamic (`?`). Small integer tensors computed from shapes (Shape, Gather, Concat,
    Unsqueeze chains as exporters write them) are evaluated along the way; those that come
    out the same under both probes are constants and are folded into `nn.constant`.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect"];
}

def FoldConstants : Pass<"llmc-fold-constants", "mlir::func::FuncOp"> {
  let summary = "Evaluate nn ops whose operands are all constants";
  let description = [{
    Computes ops on constants (e.g. a Transpose or Cast of a weight) at compile time with
    the runtime's reference kernels, so the result is bit-identical to what the engine
    would have computed. Results larger than `max-elements` are left to run time.
  }];
  let options = [
    Option<"maxElements", "max-elements", "int64_t", "1 << 26",
           "Largest result (in elements) to fold">,
  ];
  let dependentDialects = ["::llmc::nn::NNDialect"];
}

def Simplify : Pass<"llmc-simplify", "mlir::func::FuncOp"> {
  let summary = "Remove nn ops that are no-ops for inference";
  let description = [{
    Forwards the input of Identity, of Dropout in inference mode, and of Reshape, Expand,
    Squeeze, Unsqueeze, Flatten, Cast, CastLike and identity Transposes whose static result
    type equals their input's. Patterns: `populateSimplifyPatterns`.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect"];
}

def StripKvIo : Pass<"llmc-strip-kv-io", "mlir::func::FuncOp"> {
  let summary = "Turn a decoder exported with cache inputs/outputs into one without a past";
  let description = [{
    For models with `past_key_values.N.key/value` inputs (as Optimum exports them): each
    past tensor becomes an empty `[batch, kv_heads, 0, head_dim]` tensor, `position_ids`
    comes from `llm.positions`, the attention mask takes the new tokens' length, and the
    `present.N.key/value` outputs go. The result is the full-sequence model, which
    `--llmc-recognize-llm` moves onto the runtime's KV cache. Runs before shape inference.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def RecognizeLlm : Pass<"llmc-recognize-llm", "mlir::func::FuncOp"> {
  let summary = "Rewrite a decoder language model's attention onto the paged KV cache";
  let description = [{
    Finds every attention core `softmax(scale * Q·Kᵀ + mask)·V` (grouped-query `repeat_kv`
    expansions included), proves each mask causal by evaluating its subgraph with the
    runtime's kernels for several sequence lengths, and replaces the core with
    `llm.attention` on the un-expanded K/V. `Range(0, seq)` position computations become
    `llm.positions`; inputs left unused (the attention mask) leave the signature. Then it
    checks that everything left computes each token independently (no op mixes tokens), so
    that the engine can run on new tokens only.

    All or nothing: when any part fails, the function is left exactly as it was and the
    reasons (with ONNX node names) go to `llmc.recognition_failures`; the engine then runs
    by full recomputation. On success the function gets `llm.config` (layers, heads, KV
    heads, head dim).
  }];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def LowerToExec : Pass<"llmc-lower-to-exec", "mlir::func::FuncOp"> {
  let summary = "Lower nn ops to exec kernel calls for the CPU target";
  let description = [{
    Every nn op becomes an `exec.call` of the runtime kernel of the same name with its
    attributes as typed parameters; constants become `exec.weight`.
  }];
  let dependentDialects = ["::llmc::exec::ExecDialect"];
}

def PlanMemory : Pass<"llmc-plan-memory", "mlir::func::FuncOp"> {
  let summary = "Assign every intermediate an arena slot by liveness";
  let description = [{
    Walks the calls in order; a result takes the best-fitting slot whose previous tenant is
    dead, or a new slot. Sizes are computed at the planning shapes (each symbol at its max
    when bounded, else at its min). Writes `slots` on each call, and `exec.slot_sizes` and
    `exec.arena_bytes` on the function.
  }];
}

#endif // LLMC_PASSES
