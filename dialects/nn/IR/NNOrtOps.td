// ONNX Runtime's contrib operators that decoder exports from onnxruntime-genai's model builder
// use. Hand-written (ONNX's schemas do not have them); like the generated ops they mirror the
// operator: positional operands, `none` for an absent optional input, attributes as ONNX
// Runtime names them (kept in the attribute dictionary, so no attribute is declared here).
// The name after the mnemonic is the runtime kernel's and the importer's key.
#ifndef LLMC_NN_ORT_OPS
#define LLMC_NN_ORT_OPS

include "NNBase.td"

// (ai.onnx domain in ONNX Runtime's registry, since 1) RMS normalization over axes >= axis.
def NN_SimplifiedLayerNormalizationOp : NN_OnnxOp<"simplified_layer_normalization",
    "SimplifiedLayerNormalization", 1, 2, 3, 1, 2, (ins)>;
// (com.microsoft) Residual add then RMS normalization; output 3 is the sum.
def NN_SkipSimplifiedLayerNormalizationOp : NN_OnnxOp<"ms_skip_simplified_layer_normalization",
    "com.microsoft.SkipSimplifiedLayerNormalization", 1, 3, 4, 1, 4, (ins)>;
// (com.microsoft) Grouped-query attention with its own KV cache tensors and rotary embedding.
def NN_GroupQueryAttentionOp : NN_OnnxOp<"ms_group_query_attention",
    "com.microsoft.GroupQueryAttention", 1, 1, 12, 1, 4, (ins)>;

// (com.microsoft) Rotary position embedding from cos/sin caches, 3-D or 4-D input.
def NN_MsRotaryEmbeddingOp : NN_OnnxOp<"ms_rotary_embedding",
    "com.microsoft.RotaryEmbedding", 1, 4, 4, 1, 1, (ins)>;

// (com.microsoft) A product with a block-wise 2-8-bit quantized weight (A, B, scales,
// zero_points, g_idx, bias), as ONNX Runtime's MatMul4BitsQuantizer writes it.
def NN_MatMulNBitsOp : NN_OnnxOp<"ms_matmul_nbits",
    "com.microsoft.MatMulNBits", 1, 3, 6, 1, 1, (ins)>;

#endif // LLMC_NN_ORT_OPS
