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
