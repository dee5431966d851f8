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
    type equals their input's, of a Reshape whose constant shape keeps every dimension (0,
    or the input's static size; dynamic dimensions included), of a Cast to the type its input
    already has, and of a float product with a constant 1. Patterns: `populateSimplifyPatterns`.
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

    Masks are proven for every length up to the context, not sampled (MaskProof.cpp): a
    pass over the mask's subgraph shows that the mask at any length is the corner of the
    mask at the context, then one evaluation at the context must be causal or causal within
    a window of W keys (`window = W` on `llm.attention`). Any other mask is refused, naming
    the node.
  }];
  let options = [
    Option<"maxContext", "max-context", "int64_t", "0",
           "the context masks are proven for (0: the sequence dimension's maximum, else 2048)">,
    ListOption<"dimMax", "dim-max", "std::string",
               "name=max: the largest size of a symbolic dimension (--dim name=min:max)">,
  ];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def FuseNorms : Pass<"llmc-fuse-norms", "mlir::func::FuncOp"> {
  let summary = "RMSNorm / LayerNorm (decomposed or as ops) and the residual add before them -> llm.norm";
  let description = [{
    Matches `x / sqrt(mean(x²) + eps)` (Pow or Mul for the square; Div, Reciprocal or
    `1 / s` then Mul for the division) with an optional constant scale, and
    `(x - mean(x)) / sqrt(mean((x - mean(x))²) + eps)` with optional scale and shift, both
    reducing the last axis only; ONNX LayerNormalization / RMSNormalization and ONNX
    Runtime's (Skip)SimplifiedLayerNormalization over the last axis. Then a same-shape
    `a + b` feeding a norm moves into it: `llm.norm(a, b)` also returns the sum for the
    residual stream. Near misses (an extra consumer, another axis, a non-constant epsilon
    or scale) are logged with their reason.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def FuseMatMul : Pass<"llmc-fuse-matmul", "mlir::func::FuncOp"> {
  let summary = "MatMul/Gemm + bias + activation -> llm.fused_matmul";
  let description = [{
    A MatMul or Gemm (no transposed A) with a constant 2-D weight; Gemm's transB becomes
    `trans_b`, its alpha/beta are folded; a following Add of a constant `[N]` becomes the
    bias; the elementwise ops after that become the activation epilogue when they compute
    relu, gelu (erf or tanh form), silu or sigmoid — recognized by evaluating them with the
    runtime's kernels on probe values, so any spelling of the formula matches. First, a
    packed product that the model slices apart itself (optionally through a constant bias, a
    Reshape of the last axis into groups and a Transpose keeping it last; Slices of the last
    axis, or of the groups axis and one-element Gathers of it) becomes one product per part,
    its weight and bias columns gathered at compile time, unless a Concat joins the parts
    again.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def FuseGatedMlp : Pass<"llmc-fuse-gated-mlp", "mlir::func::FuncOp"> {
  let summary = "act(x·Wg) * (x·Wu) -> llm.gated_mlp with the weights concatenated";
  let description = [{
    Runs after `--llmc-fuse-matmul`: the product of an activated and a plain
    `llm.fused_matmul` of the same input, both without bias and with constant weights,
    becomes one `llm.gated_mlp` whose weight is `[Wg | Wu]`.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def QuantizeWeights : Pass<"llmc-quantize-weights", "mlir::func::FuncOp"> {
  let summary = "Weight-only quantization: products with constant weights -> llm.quant_matmul";
  let description = [{
    `llm.fused_matmul`, `llm.gated_mlp` and `nn.matmul` with a constant 2-D float32 weight
    become `llm.quant_matmul` with the weight quantized at compile time (round to nearest) by
    the runtime's `LlmQuantizeWeight` kernel, recorded as the weight's recipe. A product whose
    K is not a multiple of 32 (or of the group) stays float32, logged with the reason; so do
    products whose ONNX node names contain a `keep-float` pattern. The product the function
    returns (the LM head) uses `head-format` when given. With `awq` and calibration
    statistics, each product's weight rows are scaled by s = absmax(x)^alpha per input
    channel, alpha in {0, 0.1, ..., 1} chosen for the least output error on the calibration
    rows (alpha 0 is round to nearest), and the product takes x / s (`input_scales`). `w8a8`
    (int8 weights, activations quantized per token) uses SmoothQuant's s_j = max|x_j|^a /
    max|W_j|^(1-a) the same way, with a = `smooth-alpha`. `fp8` stores E4M3 weights with a
    float32 scale per output channel; its products quantize their activations to E4M3 with one
    scale per call.
  }];
  let options = [
    Option<"format", "format", "std::string", "\"int8\"", "int8, int4, int4_zp, w8a8 or fp8">,
    Option<"group", "group", "int64_t", "128", "4-bit group size along K (a multiple of 32)">,
    Option<"headFormat", "head-format", "std::string", "\"\"",
           "format of the product whose result is returned (empty: `format`)">,
    ListOption<"keepFloat", "keep-float", "std::string",
               "ONNX node name substrings whose products stay float32">,
    Option<"calibStats", "calib-stats", "std::string", "\"\"",
           "calibration statistics (safetensors written by the compiler's calibration)">,
    Option<"awq", "awq", "bool", "false",
           "activation-aware scales for 4-bit weights, searched on the calibration rows">,
    Option<"smoothAlpha", "smooth-alpha", "double", "0.5",
           "w8a8: SmoothQuant's migration strength (0: none, 1: all to the weights)">,
    Option<"sparse", "sparse", "bool", "false",
           "store pruned int8 and w8a8 weights sparse (mask + packed values) where that saves bytes">,
    Option<"smoothPercentile", "smooth-percentile", "double", "1.0",
           "w8a8: the percentile of |x| per channel (over the calibration's row sample) that "
           "SmoothQuant takes as the channel's max; 1: the absmax over every row">,
  ];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def PruneWeights : Pass<"llmc-prune-weights", "mlir::func::FuncOp"> {
  let summary = "Structured (layers, MLP channels, attention heads), unstructured and N:M pruning";
  let description = [{
    Every `llm.fused_matmul`, `llm.gated_mlp` and `nn.matmul` with a constant 2-D float32
    weight, except the product the function returns (the LM head), has the same share of each
    output row zeroed (docs/pruning.md): `magnitude` by |w|, `wanda` by |w| times the input
    channel's L2 norm over the calibration rows (both as the runtime's `LlmPruneWeight`,
    recorded as the weight's recipe), `sparsegpt` by the optimal-brain-surgeon rule with the
    kept weights updated from the calibration's XᵀX (a literal: refit refuses such engines).
    `pattern` is a fraction ("0.5") or N:M ("2:4", N kept of every M along K). Each pruned
    product is logged with its relative output error on the calibration rows; products the
    calibration did not see, or whose K the N:M pattern does not divide, stay dense and are
    logged with the reason. With `mlp`, first, every MLP (an `llm.gated_mlp` or
    `llm.fused_matmul` whose only user is a product with a constant weight, the down
    projection) loses that fraction of its channels (the kept count rounded to a multiple of
    `channel-align`), scored by ||x_f||2 * ||W_down[f, :]||2 with x the down projection's input
    on the calibration rows: the columns of the up (gate and up) weight and bias and the rows of
    the down weight go, by the runtime's `Gather` (recorded as recipes). With `heads` or
    `kv-heads`, every token-major `llm.attention` and `llm.sdpa` loses that fraction of its KV
    groups (with their query heads) and of each group's query heads, scored by the summed
    channel scores of the output projection's input: the q, k and v columns of their products
    (through ropes and per-head norms) and the output projection's rows go, the attention's
    head counts and the function's `llm.config` follow (one count for every KV-cache layer).
    With `layers`, first, that fraction of a decoder's sequential pre-norm layers goes, those
    with the lowest block influence (1 - the mean cosine between the residual stream entering
    and leaving the layer on the calibration rows, ShortGPT's score): the norm after a removed
    layer reads the stream its input norm read, the KV-cache layers are renumbered.
    What comes from an ONNX node whose name contains a `keep-dense` pattern stays whole (logged):
    a product stays dense, an MLP keeps its channels (either product named), an attention its
    heads, a decoder layer (its attention named) is not among those removed.
  }];
  let options = [
    Option<"method", "method", "std::string", "\"magnitude\"", "magnitude, wanda, sparsegpt or empty (none)">,
    Option<"mlp", "mlp", "double", "0", "the fraction of each MLP's channels to remove (structured; needs calib-stats)">,
    Option<"heads", "heads", "double", "0", "the fraction of each KV group's query heads to remove (structured; with one query head per group, whole heads)">,
    Option<"kvHeads", "kv-heads", "double", "0", "the fraction of KV groups to remove, with their query heads (structured)">,
    Option<"layers", "layers", "double", "0", "the fraction of decoder layers to remove (structured; ShortGPT's block influence)">,
    Option<"channelAlign", "channel-align", "int64_t", "32", "kept MLP channels are a multiple of this">,
    Option<"pattern", "pattern", "std::string", "\"0.5\"", "a sparsity in [0, 1) or N:M">,
    Option<"overall", "overall", "bool", "false", "the sparsity is the model's: each product's share from one score threshold over all">,
    Option<"calibStats", "calib-stats", "std::string", "\"\"",
           "calibration statistics (wanda: channel norms; sparsegpt: XᵀX)">,
    Option<"damping", "damping", "double", "0.01", "sparsegpt: damping as a fraction of mean(diag XᵀX)">,
    ListOption<"keepDense", "keep-dense", "std::string",
               "ONNX node name substrings whose products, MLPs, attentions and layers stay whole">,
  ];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def LowerMatMulNBits : Pass<"llmc-lower-matmul-nbits", "mlir::func::FuncOp"> {
  let summary = "ONNX Runtime's MatMulNBits with a constant 4-bit weight -> llm.quant_matmul";
  let description = [{
    A com.microsoft.MatMulNBits (bits 4, K and block_size multiples of 32, float32 scales,
    no or packed uint8 zero points, no g_idx) whose weight is constant becomes llm.quant_matmul
    in `int4` (no zero points: MatMulNBits' default zero point 8 is int4's) or `int4_zp`, its
    weight repacked by the runtime's `LlmRepackNBits` kernel (recorded as the recipe). The int4
    kernels quantize activations to int8 blocks: done for accuracy_level 4 (which allows it) or
    with `int8-activations`; other products keep the float reference kernel.
  }];
  let options = [
    Option<"int8Activations", "int8-activations", "bool", "false",
           "lower every eligible MatMulNBits, whatever its accuracy_level">,
  ];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def FuseRope : Pass<"llmc-fuse-rope", "mlir::func::FuncOp"> {
  let summary = "x * cos + rotate_half(x) * sin (or rotate_every_two) -> llm.rope";
  let description = [{
    `rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])` on `[batch, heads, tokens, D]`
    with `[batch | 1, 1, tokens, D]` cos/sin tables becomes `llm.rope` in its per-token
    table form; GPT-J's `rotate_every_two(x)` (interleaved pairs) becomes one with
    `interleaved = 1`, also on `[batch, tokens, heads, D]` with `[batch | 1, tokens, 1, D]`
    tables (`token_axis = 1`). Then partial rotary, `concat(llm.rope(x[..., :R]),
    x[..., R:])`, becomes one rope of x with the `[.., R]` tables.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def FuseAttention : Pass<"llmc-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "softmax(Q·Kᵀ * scale + mask)·V left as ops -> llm.sdpa";
  let description = [{
    For attention the language-model recognition did not take (encoders, `--as-graph`):
    4-D float32 Q, Kᵀ, V with equal heads, an optional scalar scale (Mul or Div) and an
    optional float additive mask become `llm.sdpa`; Kᵀ's transpose is composed with the
    swap into K's layout.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def FuseQkv : Pass<"llmc-fuse-qkv", "mlir::func::FuncOp"> {
  let summary = "Token-major llm.attention / llm.sdpa on one packed Q/K/V projection";
  let description = [{
    When q, k and v of an `llm.attention` or `llm.sdpa` are `[b, s, H * D]` rows reshaped to heads and
    transposed (optionally rotated by `llm.rope`, before or after the transpose, and q and k
    optionally normalized per head by `llm.norm`), and its result is transposed and merged
    back, the attention and its ropes read the rows directly (token-major form). When the
    three rows are products of one input with constant weights (or the parts of one Split),
    they become one `llm.fused_matmul` with the weights concatenated at compile time, and
    the attention reads column ranges of it; q and k sharing their rope tables are rotated
    by one `llm.rope`, and per-head norms become one grouped `llm.norm` of q's and k's
    columns.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def FuseElementwise : Pass<"llmc-fuse-elementwise", "mlir::func::FuncOp"> {
  let summary = "Chains of float32 elementwise ops -> one llm.elementwise";
  let description = [{
    Groups unary and broadcasting binary ops whose intermediate results each have one use
    into a tree, and writes it as one `llm.elementwise` program (scalar constants become
    immediates) evaluated in a single pass over memory.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect", "::llmc::llm::LLMDialect"];
}

def ShareShapes : Pass<"llmc-share-shapes", "mlir::func::FuncOp"> {
  let summary = "One Shape per proven-equal shape, so that per-layer shape arithmetic merges";
  let description = [{
    A `nn.shape` of a value whose shape is proven equal to that of an earlier `nn.shape`'s
    input (the same static sizes and the same symbols) is replaced by the earlier result;
    the pipeline's CSE then merges the arithmetic computed from it, so the shapes every layer
    computes from its own activations are computed once per step.
  }];
  let dependentDialects = ["::llmc::nn::NNDialect"];
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
