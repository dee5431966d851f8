// The llm dialect: what the recognition pass turns a decoder language model's attention
// into. Attributes live in the attribute dictionary, as in nn, so that shape inference and
// lowering read them uniformly; each op is computed by the runtime kernel named in its
// summary.
#ifndef LLMC_LLM_OPS
#define LLMC_LLM_OPS

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def LLM_Dialect : Dialect {
  let name = "llm";
  let summary = "Decoder language model operations over an engine-managed paged KV cache";
  let description = [{
    Written by `--llmc-recognize-llm`. The ops read the step's ragged-batch context (the
    sequence, position and KV-cache slot of every token) that the runtime passes to the
    engine; without one (`llmc run`) every batch row is one fresh sequence starting at
    position 0, which is what the ONNX model computed.
  }];
  let cppNamespace = "::llmc::llm";
  let usePropertiesForAttributes = 0;
}

class LLM_Op<string mnemonic, list<Trait> traits = []> : Op<LLM_Dialect, mnemonic, traits>;

def LLM_AttentionOp : LLM_Op<"attention"> {
  let summary = "Causal attention over the paged KV cache (runtime kernel `LlmAttention`)";
  let description = [{
    `q` is `[batch, heads, tokens, head_dim]`, `k` and `v` are
    `[batch, kv_heads, tokens, head_dim]` (`heads` a multiple of `kv_heads`: multi-head,
    grouped-query or multi-query attention), all for the step's new tokens only. The op
    stores `k` and `v` into layer `layer` of the KV cache at each token's slot, then returns
    `softmax(scale * q·kᵀ)·v` over each token's own sequence up to and including its
    position. Not `Pure`: it writes the cache. With `window = W`, each token sees only its
    own and the `W - 1` positions before it (sliding-window attention, as Mistral's masks
    allow); without it, every position up to its own. With `softcap = c` (c > 0), each
    scaled score `s` becomes `c * tanh(s / c)` before the softmax (Gemma-2's logit
    soft-capping; the causal or window mask still hides what the token must not see).
    With `alibi_slopes` (one per head), head `h` adds `alibi_slopes[h] * j` to the scaled
    score of the key at position `j` of its sequence (ALiBi, as Bloom computes it: a bias
    linear in the key's position; the softmax makes it the same as one linear in the
    distance `j - i`).

    Token-major form (written by `--llmc-fuse-qkv`): `q`, `k` and `v` are
    `[batch, tokens, width]` rows, head `h` of q being columns
    `q_column + h * head_dim ...` (likewise k and v), so one packed QKV projection feeds
    the op without a split or transposes; the result is `[batch, tokens, heads * head_dim]`.
    ```mlir
    %p = llm.attention(%qkv, %qkv, %qkv) {layer = 0 : i64, scale = 2.500000e-01 : f32,
        num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64,
        q_column = 0 : i64, k_column = 64 : i64, v_column = 96 : i64}
        : (tensor<?x?x128xf32>, tensor<?x?x128xf32>, tensor<?x?x128xf32>) -> tensor<?x?x64xf32>
    ```
    ```mlir
    %o = llm.attention(%q, %k, %v) {layer = 0 : i64, scale = 2.500000e-01 : f32}
        : (tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>) -> tensor<?x4x?x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$q, AnyRankedTensor:$k, AnyRankedTensor:$v,
                   I64Attr:$layer, F32Attr:$scale, OptionalAttr<I64Attr>:$num_heads,
                   OptionalAttr<I64Attr>:$num_kv_heads, OptionalAttr<I64Attr>:$head_dim,
                   OptionalAttr<I64Attr>:$q_column, OptionalAttr<I64Attr>:$k_column,
                   OptionalAttr<I64Attr>:$v_column, OptionalAttr<I64Attr>:$window,
                   OptionalAttr<F32Attr>:$softcap,
                   OptionalAttr<DenseF32ArrayAttr>:$alibi_slopes);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $q `,` $k `,` $v `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::LogicalResult verifyTokenMajor();
  }];
}

def LLM_PositionsOp : LLM_Op<"positions", [Pure]> {
  let summary = "Each new token's position in its sequence (runtime kernel `LlmPositions`)";
  let description = [{
    A 1-D tensor with one position per token of `input_ids` (`[batch, tokens]`): from the
    step's context when there is one, else `0 .. tokens-1`. Replaces the `Range(0, seq)`
    that full-sequence exports compute position ids from.

    ```mlir
    %p = llm.positions(%ids) : (tensor<?x?xi64>) -> tensor<?xi64>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input_ids);
  let results = (outs 1DTensorOf<[I64, I32]>:$output);
  let assemblyFormat = "`(` $input_ids `)` attr-dict `:` functional-type(operands, results)";
}

def LLM_RopeOp : LLM_Op<"rope", [Pure]> {
  let summary = "Rotary position embedding (runtime kernel `LlmRope`)";
  let description = [{
    Rotates each token's head vectors by its position: halves
    `(x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)`, or adjacent pairs when `interleaved`
    is 1. Two sources of the angles:
    - `positions` `[tokens]` (from `llm.positions`) with `cos`/`sin` caches
      `[max_positions, head_dim / 2]`;
    - `positions` absent (`none`) with per-token tables `cos`/`sin` of rank 4
      `[batch | 1, 1, tokens, R]`, as models compute them (`--llmc-fuse-rope`
      writes this form for `x * cos + rotate_half(x) * sin`, and with `interleaved = 1`
      for GPT-J's `x * cos + rotate_every_two(x) * sin`): the first R values of each head
      (R even, at most head_dim; R < head_dim is partial rotary) rotate, in halves of
      R / 2 or in adjacent pairs, each value by its own table entry; the rest pass through.
      With `token_axis = 1`, `x` is `[batch, tokens, heads, head_dim]` (heads before their
      transpose, as GPT-J rotates them) and the tables `[batch | 1, tokens, 1, R]`; the
      token-major form takes tables in either layout.
    `x` is `[batch, heads, tokens, head_dim]`, or token-major `[batch, tokens, width]`
    with `num_heads` and `head_dim` set: the first `num_heads` heads of each row are
    rotated and the other columns pass through (a packed QKV's q and k, not its v).
    ```mlir
    %r = llm.rope(%q, %pos, %cos, %sin) {interleaved = 0 : i64}
        : (tensor<?x4x?x16xf32>, tensor<?xi64>, tensor<64x8xf32>, tensor<64x8xf32>) -> tensor<?x4x?x16xf32>
    %t = llm.rope(%qkv, %none, %cos_t, %sin_t) {num_heads = 6 : i64, head_dim = 16 : i64}
        : (tensor<?x?x128xf32>, none, tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>) -> tensor<?x?x128xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyType:$positions, AnyRankedTensor:$cos,
                   AnyRankedTensor:$sin, OptionalAttr<I64Attr>:$interleaved,
                   OptionalAttr<I64Attr>:$num_heads, OptionalAttr<I64Attr>:$head_dim,
                   OptionalAttr<I64Attr>:$token_axis);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $x `,` $positions `,` $cos `,` $sin `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def LLM_LastTokensOp : LLM_Op<"last_tokens", [Pure]> {
  let summary = "The rows that need logits (runtime kernel `LlmLastTokens`)";
  let description = [{
    `input` is `[batch, tokens, features]`. In a ragged step the result is
    `[1, sequences, features]`: the row of each sequence's last token of the step, so the
    LM head computes only the logits that get sampled. Without a step context it is `input`.

    ```mlir
    %h = llm.last_tokens(%x) : (tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $input `)` attr-dict `:` functional-type(operands, results)";
}

def LLM_FusedMatMulOp : LLM_Op<"fused_matmul", [Pure]> {
  let summary = "Matrix product with bias and activation epilogue (runtime kernel `LlmFusedMatMul`)";
  let description = [{
    `y = activation(alpha * a·op(b) + bias)`: `a` is `[..., K]`, `b` the 2-D weight
    `[K, N]` (or `[N, K]` with `trans_b = 1`, a folded transpose), `bias` `[N]` or
    absent (`none`). `activation` is one of `none`, `relu`, `gelu_erf`, `gelu_tanh`,
    `silu`, `sigmoid`, `tanh`. Written by `--llmc-fuse-matmul` for MatMul/Gemm + Add + activation.
    ```mlir
    %y = llm.fused_matmul(%x, %w, %b) {activation = "gelu_erf", trans_b = 0 : i64}
        : (tensor<?x?x64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<?x?x256xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$a, AnyRankedTensor:$b, AnyType:$bias,
                   OptionalAttr<StrAttr>:$activation, OptionalAttr<I64Attr>:$trans_b,
                   OptionalAttr<F32Attr>:$alpha);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $a `,` $b `,` $bias `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def LLM_QuantMatMulOp : LLM_Op<"quant_matmul", [Pure]> {
  let summary = "Matrix product with a quantized weight (runtime kernel `LlmQuantMatMul`)";
  let description = [{
    `y = activation(alpha * a·Wᵀ + bias)` with `W` the quantized `[N, K]` weight (row n is
    output channel n): `data` (`i8` `[N, K]` for `int8`, `ui8` `[N, K/2]` packed 4-bit for
    `int4` and `int4_zp`), `scales` `[N, ceil(K/group)]` (f32 for `int8`, whose group is K;
    f16 for the 4-bit formats), `zeros` `ui8` of the scales' shape for `int4_zp` (else
    `none`). With
    `gated = 1`, `N = 2F` and `y = activation(h[:, :F]) * h[:, F:]` (a quantized
    `llm.gated_mlp`; no bias). Up to two trailing operands (`extra`): `input_scales` `[K]` (or
    `none`), which multiplies `a` per channel first (activation-aware quantization: the weight's
    rows were scaled by their inverse), then `mask` `ui8` `[N, ceil(K/8)]`, which makes an
    `int8` or `w8a8` weight sparse: `data` is then `[N, stride]`, each row's stored values in
    column order (core/sparse.h, docs/pruning.md). Written by `--llmc-quantize-weights`;
    docs/quantization.md.
    ```mlir
    %y = llm.quant_matmul(%x, %q, %s, %none, %none) {activation = "gelu_erf", format = "int8", group = 64 : i64}
        : (tensor<?x64xf32>, tensor<256x64xi8>, tensor<256x1xf32>, none, none) -> tensor<?x256xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$a, AnyRankedTensor:$data, AnyRankedTensor:$scales,
                   AnyType:$zeros, AnyType:$bias, Variadic<AnyType>:$extra,
                   StrAttr:$format, I64Attr:$group,
                   OptionalAttr<StrAttr>:$activation, OptionalAttr<F32Attr>:$alpha,
                   OptionalAttr<I64Attr>:$gated);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = "`(` $a `,` $data `,` $scales `,` $zeros `,` $bias (`,` $extra^)? `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def LLM_QuantGatherOp : LLM_Op<"quant_gather", [Pure]> {
  let summary = "Rows of a quantized embedding table (runtime kernel `LlmQuantGather`)";
  let description = [{
    The table `[V, K]` quantized as for `llm.quant_matmul` (row v is token v); the result is
    `ids.shape + [K]`, float32, each row dequantized. Written by `--llmc-quantize-weights` for
    a `Gather` of a constant float32 table along axis 0.
    ```mlir
    %e = llm.quant_gather(%ids, %q, %s, %none) {format = "int8", group = 64 : i64}
        : (tensor<?x?xi64>, tensor<512x64xi8>, tensor<512x1xf32>, none) -> tensor<?x?x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$ids, AnyRankedTensor:$data, AnyRankedTensor:$scales,
                   AnyType:$zeros, StrAttr:$format, I64Attr:$group);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $ids `,` $data `,` $scales `,` $zeros `)` attr-dict `:` functional-type(operands, results)";
}

def LLM_NormOp : LLM_Op<"norm", [Pure]> {
  let summary = "RMS or layer normalization over the last axis, optionally after a residual add (runtime kernel `LlmNorm`)";
  let description = [{
    `s = x + residual` (just `x` when `residual` is `none`), then over the last axis
    `kind = "rms"`: `s / sqrt(mean(s²) + epsilon) * scale (+ bias)`, or
    `kind = "layer"`: `(s - mean(s)) / sqrt(var(s) + epsilon) * scale (+ bias)`.
    With a residual the op has a second result, the sum `s`, which the residual stream
    continues with. Written by `--llmc-fuse-norms`.

    Grouped form (`group = G`, no residual; written by `--llmc-fuse-qkv` for per-head q/k
    norms, as Qwen3's, on a packed QKV): `scale` (and `bias`) has C values, C a multiple of
    G and at most the last axis; the first C values of each row are normalized in segments
    of G, each with its own statistics, times `scale` (+ `bias`), and the rest of the row
    (a packed V) is copied.
    ```mlir
    %y, %s = llm.norm(%x, %r, %gamma, %none) {kind = "rms", epsilon = 1.0e-06 : f32}
        : (tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<64xf32>, none) -> (tensor<?x?x64xf32>, tensor<?x?x64xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyType:$residual, AnyRankedTensor:$scale,
                   AnyType:$bias, StrAttr:$kind, F32Attr:$epsilon,
                   OptionalAttr<I64Attr>:$group);
  let results = (outs Variadic<AnyRankedTensor>:$outputs);
  let assemblyFormat = "`(` $x `,` $residual `,` $scale `,` $bias `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def LLM_GatedMlpOp : LLM_Op<"gated_mlp", [Pure]> {
  let summary = "Gated MLP up-projection: act(x·Wg) ⊙ (x·Wu) with one weight (runtime kernel `LlmGatedMlp`)";
  let description = [{
    `w` is `[K, 2F]`, the gate weight's `F` columns then the up weight's (concatenated at
    compile time by `--llmc-fuse-gated-mlp`); `y = activation(x·w[:, :F]) * (x·w[:, F:])`
    is `[..., F]`. `activation`: `silu`, `gelu_erf`, `gelu_tanh`, `relu`, `sigmoid` or `tanh`.
    ```mlir
    %h = llm.gated_mlp(%x, %w) {activation = "silu"}
        : (tensor<?x?x64xf32>, tensor<64x256xf32>) -> tensor<?x?x128xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$w, StrAttr:$activation);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $x `,` $w `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def LLM_MoeOp : LLM_Op<"moe", [Pure]> {
  let summary = "Mixture-of-experts MLP with top-k routing (runtime kernel `LlmMoe`)";
  let description = [{
    Each row of `x` `[..., H]` is routed by `softmax(x·router)` (`router` `[H, E]`) to its
    `top_k` experts (ties to the lower index), weighted by those probabilities, renormalized
    to sum 1 when `normalize` is 1 (Mixtral); the row's result is the sum, in expert order,
    of `weight * (activation(x·w_gate[e]) * (x·w_up[e]))·w_down[e]` over its experts
    (`w_gate`, `w_up` `[E, H, F]`, `w_down` `[E, F, H]`). Only the selected experts are
    computed, each on the rows that chose it. Written by `--llmc-recognize-llm` from the
    routing a transformers export spells out with TopK, OneHot, NonZero and ScatterElements.
    ```mlir
    %y = llm.moe(%x, %router, %w1, %w3, %w2) {top_k = 2 : i64, activation = "silu", normalize = 1 : i64}
        : (tensor<?x64xf32>, tensor<64x4xf32>, tensor<4x64x48xf32>, tensor<4x64x48xf32>, tensor<4x48x64xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$router, AnyRankedTensor:$w_gate,
                   AnyRankedTensor:$w_up, AnyRankedTensor:$w_down, I64Attr:$top_k,
                   StrAttr:$activation, I64Attr:$normalize);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $x `,` $router `,` $w_gate `,` $w_up `,` $w_down `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def LLM_ElementwiseOp : LLM_Op<"elementwise", [Pure]> {
  let summary = "A fused chain of elementwise ops evaluated in one pass (runtime kernel `LlmElementwise`)";
  let description = [{
    The float32 inputs broadcast (numpy rules) to the result's shape. `program` is a flat
    list of instructions `[opcode, a, b]`: registers `0 .. inputs-1` hold the inputs,
    instruction `i` writes register `inputs + i`, the last register is the result; an
    operand `-1 - j` is the immediate `constants[j]`. Opcodes: 0 add, 1 sub, 2 mul, 3 div,
    4 pow, 5 max, 6 min, 16 neg, 17 exp, 18 log, 19 sqrt, 20 reciprocal, 21 tanh, 22 erf,
    23 sigmoid, 24 relu, 25 abs, 26 sin, 27 cos (unary ops ignore `b`). Written by
    `--llmc-fuse-elementwise`.
    ```mlir
    %y = llm.elementwise(%x, %g) {program = array<i64: 23, 0, 0, 2, 0, 2, 2, 3, 1>, constants = array<f32>}
        : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, DenseI64ArrayAttr:$program,
                   DenseF32ArrayAttr:$constants);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $inputs `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def LLM_SdpaOp : LLM_Op<"sdpa", [Pure]> {
  let summary = "Scaled dot-product attention without a KV cache (runtime kernel `LlmSdpa`)";
  let description = [{
    `softmax(scale * q·kᵀ + mask)·v` over `[batch, heads, tokens, head_dim]` operands
    (`heads` a multiple of k's and v's heads), `mask` an optional float additive bias that
    broadcasts to `[batch, heads, tokens, keys]` (`none` when absent). Not causal unless
    the mask says so. Written by `--llmc-fuse-attention` for attention cores left as ops
    (encoders, `--as-graph` decoders). `--llmc-fuse-qkv` moves it to the token-major form
    of `llm.attention` (`num_heads`, `num_kv_heads`, `head_dim`, `*_column` set; q, k, v
    `[batch, tokens, width]`, the result `[batch, tokens, heads * head_dim]`).
    ```mlir
    %o = llm.sdpa(%q, %k, %v, %mask) {scale = 2.500000e-01 : f32}
        : (tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x1x1x?xf32>) -> tensor<?x4x?x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$q, AnyRankedTensor:$k, AnyRankedTensor:$v, AnyType:$mask,
                   F32Attr:$scale, OptionalAttr<I64Attr>:$num_heads,
                   OptionalAttr<I64Attr>:$num_kv_heads, OptionalAttr<I64Attr>:$head_dim,
                   OptionalAttr<I64Attr>:$q_column, OptionalAttr<I64Attr>:$k_column,
                   OptionalAttr<I64Attr>:$v_column);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $q `,` $k `,` $v `,` $mask `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // LLMC_LLM_OPS
