// RUN: llmc-opt --split-input-file --verify-diagnostics %s

// Tests that query heads must be a multiple of the KV heads.
func.func @heads(%q: tensor<1x6x?x16xf32>, %k: tensor<1x4x?x16xf32>) -> tensor<1x6x?x16xf32> {
  // expected-error @+1 {{heads (6) must be a multiple of kv_heads (4)}}
  %o = llm.attention(%q, %k, %k) {layer = 0 : i64, scale = 1.0 : f32} : (tensor<1x6x?x16xf32>, tensor<1x4x?x16xf32>, tensor<1x4x?x16xf32>) -> tensor<1x6x?x16xf32>
  return %o : tensor<1x6x?x16xf32>
}

// -----

// Tests that q and k must agree on the head size.
func.func @head_dim(%q: tensor<1x4x?x16xf32>, %k: tensor<1x4x?x8xf32>) -> tensor<1x4x?x16xf32> {
  // expected-error @+1 {{q and k head_dim differ (16 vs 8)}}
  %o = llm.attention(%q, %k, %k) {layer = 0 : i64, scale = 1.0 : f32} : (tensor<1x4x?x16xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// Tests that the operands must be rank 4.
func.func @rank(%q: tensor<4x?x16xf32>) -> tensor<4x?x16xf32> {
  // expected-error @+1 {{must be [batch, heads, tokens, head_dim]}}
  %o = llm.attention(%q, %q, %q) {layer = 0 : i64, scale = 1.0 : f32} : (tensor<4x?x16xf32>, tensor<4x?x16xf32>, tensor<4x?x16xf32>) -> tensor<4x?x16xf32>
  return %o : tensor<4x?x16xf32>
}

// -----

// Tests that a negative layer is refused.
func.func @layer(%q: tensor<1x4x?x16xf32>) -> tensor<1x4x?x16xf32> {
  // expected-error @+1 {{layer must not be negative}}
  %o = llm.attention(%q, %q, %q) {layer = -1 : i64, scale = 1.0 : f32} : (tensor<1x4x?x16xf32>, tensor<1x4x?x16xf32>, tensor<1x4x?x16xf32>) -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// Tests that token-major attention must fit its heads in the rows.
func.func @token_major_width(%qkv: tensor<1x?x32xf32>) -> tensor<1x?x16xf32> {
  // expected-error @+1 {{v's heads (columns 24 .. 40) exceed its width 32}}
  %o = llm.attention(%qkv, %qkv, %qkv) {layer = 0 : i64, scale = 1.0 : f32, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, q_column = 0 : i64, k_column = 16 : i64, v_column = 24 : i64} : (tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?x32xf32>) -> tensor<1x?x16xf32>
  return %o : tensor<1x?x16xf32>
}

// -----

// Tests that a norm with a residual must return the sum too.
func.func @norm_results(%x: tensor<2x8xf32>, %g: tensor<8xf32>) -> tensor<2x8xf32> {
  %none = nn.none
  // expected-error @+1 {{has 1 results; expected 2 (the normalized value and the sum)}}
  %y = llm.norm(%x, %x, %g, %none) {kind = "rms", epsilon = 1.0e-6 : f32} : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32>, none) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that unknown norm kinds and activations are refused.
func.func @unknown_kind(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %w: tensor<8x8xf32>) -> tensor<2x8xf32> {
  %none = nn.none
  // expected-error @+1 {{kind must be "rms" or "layer", got "batch"}}
  %y = llm.norm(%x, %none, %g, %none) {kind = "batch", epsilon = 1.0e-6 : f32} : (tensor<2x8xf32>, none, tensor<8xf32>, none) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @unknown_activation(%x: tensor<2x8xf32>, %w: tensor<8x8xf32>) -> tensor<2x8xf32> {
  %none = nn.none
  // expected-error @+1 {{unknown activation 'swish2'}}
  %y = llm.fused_matmul(%x, %w, %none) {activation = "swish2"} : (tensor<2x8xf32>, tensor<8x8xf32>, none) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that an elementwise program may only read earlier registers and given constants.
func.func @elementwise_operand(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0 reads operand 1 (registers 0..0, 0 constants)}}
  %y = llm.elementwise(%x) {program = array<i64: 0, 0, 1>, constants = array<f32>} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that the gated MLP weight holds gate and up halves.
func.func @gated_odd(%x: tensor<2x8xf32>, %w: tensor<8x7xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{w must be [K, 2F]}}
  %y = llm.gated_mlp(%x, %w) {activation = "silu"} : (tensor<2x8xf32>, tensor<8x7xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Tests that a quantized product's scales must match its format (float16 for int4).
func.func @quant_scale_dtype(%x: tensor<2x64xf32>, %q: tensor<16x32xui8>, %s: tensor<16x1xf32>) -> tensor<2x16xf32> {
  %none = nn.none
  // expected-error @+1 {{scales must be f16 for int4}}
  %y = llm.quant_matmul(%x, %q, %s, %none, %none) {format = "int4", group = 64 : i64} : (tensor<2x64xf32>, tensor<16x32xui8>, tensor<16x1xf32>, none, none) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// Tests that int4_zp needs its zero points and that the data must hold K.
func.func @quant_zero_points(%x: tensor<2x64xf32>, %q: tensor<16x32xui8>, %s: tensor<16x1xf16>) -> tensor<2x16xf32> {
  %none = nn.none
  // expected-error @+1 {{zeros must be given exactly for int4_zp}}
  %y = llm.quant_matmul(%x, %q, %s, %none, %none) {format = "int4_zp", group = 64 : i64} : (tensor<2x64xf32>, tensor<16x32xui8>, tensor<16x1xf16>, none, none) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @quant_k(%x: tensor<2x96xf32>, %q: tensor<16x64xi8>, %s: tensor<16x1xf32>) -> tensor<2x16xf32> {
  %none = nn.none
  // expected-error @+1 {{data 64 columns do not hold K = 96}}
  %y = llm.quant_matmul(%x, %q, %s, %none, %none) {format = "int8", group = 96 : i64} : (tensor<2x96xf32>, tensor<16x64xi8>, tensor<16x1xf32>, none, none) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// Tests that a soft-cap must be positive.
func.func @attention_softcap(%q: tensor<1x2x3x8xf32>, %kv: tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32> {
  // expected-error @+1 {{softcap must be positive and finite}}
  %y = llm.attention(%q, %kv, %kv) {layer = 0 : i64, scale = 1.0 : f32, softcap = -5.0 : f32} : (tensor<1x2x3x8xf32>, tensor<1x2x3x8xf32>, tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32>
  return %y : tensor<1x2x3x8xf32>
}

// -----

// Tests that ALiBi gives one slope per head.
func.func @attention_alibi_slopes(%q: tensor<1x2x3x8xf32>, %kv: tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32> {
  // expected-error @+1 {{alibi_slopes holds 3 slopes for 2 heads}}
  %y = llm.attention(%q, %kv, %kv) {layer = 0 : i64, scale = 1.0 : f32, alibi_slopes = array<f32: 0.5, 0.25, 0.125>} : (tensor<1x2x3x8xf32>, tensor<1x2x3x8xf32>, tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32>
  return %y : tensor<1x2x3x8xf32>
}

// -----

// Tests that a grouped norm takes no residual.
func.func @grouped_norm_residual(%x: tensor<2x16xf32>, %g: tensor<16xf32>) -> tensor<2x16xf32> {
  %none = nn.none
  // expected-error @+1 {{a grouped norm takes no residual}}
  %y, %s = llm.norm(%x, %x, %g, %none) {kind = "rms", epsilon = 1.0e-06 : f32, group = 8 : i64} : (tensor<2x16xf32>, tensor<2x16xf32>, tensor<16xf32>, none) -> (tensor<2x16xf32>, tensor<2x16xf32>)
  return %y : tensor<2x16xf32>
}

// -----

// Tests that a grouped norm's scale holds whole groups within the row.
func.func @grouped_norm_scale(%x: tensor<2x16xf32>, %g: tensor<12xf32>) -> tensor<2x16xf32> {
  %none = nn.none
  // expected-error @+1 {{a grouped norm's scale must hold a whole number of groups of 8, at most the last axis}}
  %y = llm.norm(%x, %none, %g, %none) {kind = "rms", epsilon = 1.0e-06 : f32, group = 8 : i64} : (tensor<2x16xf32>, none, tensor<12xf32>, none) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// Tests that token_axis is 1 or 2.
func.func @rope_token_axis(%x: tensor<1x3x2x8xf32>, %t: tensor<1x3x1x8xf32>) -> tensor<1x3x2x8xf32> {
  %none = nn.none
  // expected-error @+1 {{token_axis is 1 or 2, and only for 4-D x}}
  %y = llm.rope(%x, %none, %t, %t) {token_axis = 3 : i64} : (tensor<1x3x2x8xf32>, none, tensor<1x3x1x8xf32>, tensor<1x3x1x8xf32>) -> tensor<1x3x2x8xf32>
  return %y : tensor<1x3x2x8xf32>
}

// -----

// Tests that llm.moe's top_k is at most the number of experts.
func.func @moe_top_k(%x: tensor<3x8xf32>, %r: tensor<8x4xf32>, %g: tensor<4x8x6xf32>, %d: tensor<4x6x8xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{top_k 5 is not in [1, 4]}}
  %y = llm.moe(%x, %r, %g, %g, %d) {top_k = 5 : i64, activation = "silu", normalize = 1 : i64} : (tensor<3x8xf32>, tensor<8x4xf32>, tensor<4x8x6xf32>, tensor<4x8x6xf32>, tensor<4x6x8xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// Tests that llm.moe's down projection maps the experts' width back to the hidden size.
func.func @moe_down_shape(%x: tensor<3x8xf32>, %r: tensor<8x4xf32>, %g: tensor<4x8x6xf32>, %d: tensor<4x8x6xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{do not fit}}
  %y = llm.moe(%x, %r, %g, %g, %d) {top_k = 2 : i64, activation = "silu", normalize = 1 : i64} : (tensor<3x8xf32>, tensor<8x4xf32>, tensor<4x8x6xf32>, tensor<4x8x6xf32>, tensor<4x8x6xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
