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
    position. Not `Pure`: it writes the cache.

    ```mlir
    %o = llm.attention(%q, %k, %v) {layer = 0 : i64, scale = 2.500000e-01 : f32}
        : (tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>) -> tensor<?x4x?x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$q, AnyRankedTensor:$k, AnyRankedTensor:$v,
                   I64Attr:$layer, F32Attr:$scale);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $q `,` $k `,` $v `)` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
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
  let summary = "Rotary position embedding from cos/sin caches (runtime kernel `LlmRope`)";
  let description = [{
    `x` is `[batch, heads, tokens, head_dim]`, `positions` `[tokens]` (from `llm.positions`),
    `cos` and `sin` `[max_positions, head_dim / 2]`. Each token's vector is rotated by its
    position: halves `(x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)`, or adjacent pairs
    when `interleaved` is 1.

    ```mlir
    %r = llm.rope(%q, %pos, %cos, %sin) {interleaved = 0 : i64}
        : (tensor<?x4x?x16xf32>, tensor<?xi64>, tensor<64x8xf32>, tensor<64x8xf32>) -> tensor<?x4x?x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$positions, AnyRankedTensor:$cos,
                   AnyRankedTensor:$sin, OptionalAttr<I64Attr>:$interleaved);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = "`(` $x `,` $positions `,` $cos `,` $sin `)` attr-dict `:` functional-type(operands, results)";
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

#endif // LLMC_LLM_OPS
