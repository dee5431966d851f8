// RUN: llmc-opt --split-input-file --llmc-fuse-qkv %s | FileCheck %s

// Tests that q/k/v projections of one input, reshaped to heads, transposed and rotated,
// become one packed product read by a token-major rope and attention (GQA: 4 query heads,
// 2 KV heads of 8).
// CHECK-LABEL: func @packed
// CHECK-SAME: (%[[X:.+]]: tensor<1x5x32xf32>, %[[COS:.+]]: tensor<1x1x5x8xf32>, %[[SIN:.+]]: tensor<1x1x5x8xf32>)
func.func @packed(%x: tensor<1x5x32xf32>, %cos: tensor<1x1x5x8xf32>, %sin: tensor<1x1x5x8xf32>) -> tensor<1x5x32xf32> {
  %none = nn.none
  %wq = nn.constant dense<0.1> : tensor<32x32xf32>
  %wk = nn.constant dense<0.2> : tensor<32x16xf32>
  %wv = nn.constant dense<0.3> : tensor<32x16xf32>
  %sq = nn.constant dense<[0, 0, 4, 8]> : tensor<4xi64>
  %skv = nn.constant dense<[0, 0, 2, 8]> : tensor<4xi64>
  %so = nn.constant dense<[0, 0, 32]> : tensor<3xi64>
  // CHECK: %[[P:.+]] = llm.fused_matmul(%[[X]], %{{.+}}, %{{.+}}) {activation = "none", trans_b = 0 : i64} : (tensor<1x5x32xf32>, tensor<32x64xf32>, none) -> tensor<1x5x64xf32>
  // CHECK: %[[R:.+]] = llm.rope(%[[P]], %{{.+}}, %[[COS]], %[[SIN]]) {head_dim = 8 : i64, num_heads = 6 : i64}
  // CHECK: %[[A:.+]] = llm.attention(%[[R]], %[[R]], %[[R]]) {head_dim = 8 : i64, k_column = 32 : i64, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, q_column = 0 : i64, scale = 0.353553385 : f32, v_column = 48 : i64} : (tensor<1x5x64xf32>, tensor<1x5x64xf32>, tensor<1x5x64xf32>) -> tensor<1x5x32xf32>
  // CHECK-NOT: nn.transpose
  %q = llm.fused_matmul(%x, %wq, %none) {activation = "none"} : (tensor<1x5x32xf32>, tensor<32x32xf32>, none) -> tensor<1x5x32xf32>
  %k = llm.fused_matmul(%x, %wk, %none) {activation = "none"} : (tensor<1x5x32xf32>, tensor<32x16xf32>, none) -> tensor<1x5x16xf32>
  %v = llm.fused_matmul(%x, %wv, %none) {activation = "none"} : (tensor<1x5x32xf32>, tensor<32x16xf32>, none) -> tensor<1x5x16xf32>
  %q4 = nn.reshape(%q, %sq) : (tensor<1x5x32xf32>, tensor<4xi64>) -> tensor<1x5x4x8xf32>
  %k4 = nn.reshape(%k, %skv) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %v4 = nn.reshape(%v, %skv) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %qt = nn.transpose(%q4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x4x8xf32>) -> tensor<1x4x5x8xf32>
  %kt = nn.transpose(%k4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %vt = nn.transpose(%v4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %qr = llm.rope(%qt, %none, %cos, %sin) : (tensor<1x4x5x8xf32>, none, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<1x4x5x8xf32>
  %kr = llm.rope(%kt, %none, %cos, %sin) : (tensor<1x2x5x8xf32>, none, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32>
  %o = llm.attention(%qr, %kr, %vt) {layer = 0 : i64, scale = 0.353553385 : f32} : (tensor<1x4x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x4x5x8xf32>
  %ot = nn.transpose(%o) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x5x8xf32>) -> tensor<1x5x4x8xf32>
  %y = nn.reshape(%ot, %so) : (tensor<1x5x4x8xf32>, tensor<3xi64>) -> tensor<1x5x32xf32>
  // CHECK: return %[[A]]
  return %y : tensor<1x5x32xf32>
}

// -----

// Tests that projections of different inputs keep separate products, which the token-major
// attention reads directly.
// CHECK-LABEL: func @not_packed
func.func @not_packed(%x: tensor<1x5x16xf32>, %z: tensor<1x5x16xf32>) -> tensor<1x5x16xf32> {
  %none = nn.none
  %w = nn.constant dense<0.1> : tensor<16x16xf32>
  %s4 = nn.constant dense<[0, 0, 2, 8]> : tensor<4xi64>
  %so = nn.constant dense<[0, 0, 16]> : tensor<3xi64>
  // CHECK-COUNT-3: llm.fused_matmul
  // CHECK: llm.attention(%{{.+}}, %{{.+}}, %{{.+}}) {head_dim = 8 : i64, k_column = 0 : i64, layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, q_column = 0 : i64
  // CHECK-NOT: nn.transpose
  %q = llm.fused_matmul(%x, %w, %none) {activation = "none"} : (tensor<1x5x16xf32>, tensor<16x16xf32>, none) -> tensor<1x5x16xf32>
  %k = llm.fused_matmul(%z, %w, %none) {activation = "none"} : (tensor<1x5x16xf32>, tensor<16x16xf32>, none) -> tensor<1x5x16xf32>
  %v = llm.fused_matmul(%x, %w, %none) {activation = "none"} : (tensor<1x5x16xf32>, tensor<16x16xf32>, none) -> tensor<1x5x16xf32>
  %q4 = nn.reshape(%q, %s4) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %k4 = nn.reshape(%k, %s4) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %v4 = nn.reshape(%v, %s4) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %qt = nn.transpose(%q4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %kt = nn.transpose(%k4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %vt = nn.transpose(%v4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %o = llm.attention(%qt, %kt, %vt) {layer = 0 : i64, scale = 1.0 : f32} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  %ot = nn.transpose(%o) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x5x8xf32>) -> tensor<1x5x2x8xf32>
  %y = nn.reshape(%ot, %so) : (tensor<1x5x2x8xf32>, tensor<3xi64>) -> tensor<1x5x16xf32>
  return %y : tensor<1x5x16xf32>
}

// -----

// Tests that an attention whose result is not merged back to rows stays head-major.
// CHECK-LABEL: func @not_merged
func.func @not_merged(%x: tensor<1x5x16xf32>) -> tensor<1x2x5x8xf32> {
  %s4 = nn.constant dense<[0, 0, 2, 8]> : tensor<4xi64>
  // CHECK: llm.attention(%{{.+}}, %{{.+}}, %{{.+}}) {layer = 0 : i64, scale = 1.000000e+00 : f32} : (tensor<1x2x5x8xf32>
  %q4 = nn.reshape(%x, %s4) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %k4 = nn.reshape(%x, %s4) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %v4 = nn.reshape(%x, %s4) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %qt = nn.transpose(%q4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %kt = nn.transpose(%k4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %vt = nn.transpose(%v4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %o = llm.attention(%qt, %kt, %vt) {layer = 0 : i64, scale = 1.0 : f32} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  return %o : tensor<1x2x5x8xf32>
}

// -----

// Tests that an encoder's llm.sdpa (BERT: products with biases, a padding mask) becomes
// token-major over one packed product with the biases concatenated.
// CHECK-LABEL: func @encoder
// CHECK-SAME: (%[[X:.+]]: tensor<2x5x16xf32>, %[[M:.+]]: tensor<2x1x1x5xf32>)
func.func @encoder(%x: tensor<2x5x16xf32>, %mask: tensor<2x1x1x5xf32>) -> tensor<2x5x16xf32> {
  %w = nn.constant dense<0.1> : tensor<16x16xf32>
  %b = nn.constant dense<0.5> : tensor<16xf32>
  %s4 = nn.constant dense<[0, 0, 2, 8]> : tensor<4xi64>
  %so = nn.constant dense<[0, 0, 16]> : tensor<3xi64>
  // CHECK: %[[P:.+]] = llm.fused_matmul(%[[X]], %{{.+}}, %{{.+}}) {activation = "none", trans_b = 0 : i64} : (tensor<2x5x16xf32>, tensor<16x48xf32>, tensor<48xf32>) -> tensor<2x5x48xf32>
  // CHECK: llm.sdpa(%[[P]], %[[P]], %[[P]], %[[M]]) {head_dim = 8 : i64, k_column = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, q_column = 0 : i64, scale = 0.353553385 : f32, v_column = 32 : i64}
  %q = llm.fused_matmul(%x, %w, %b) {activation = "none"} : (tensor<2x5x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %k = llm.fused_matmul(%x, %w, %b) {activation = "none"} : (tensor<2x5x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %v = llm.fused_matmul(%x, %w, %b) {activation = "none"} : (tensor<2x5x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %q4 = nn.reshape(%q, %s4) : (tensor<2x5x16xf32>, tensor<4xi64>) -> tensor<2x5x2x8xf32>
  %k4 = nn.reshape(%k, %s4) : (tensor<2x5x16xf32>, tensor<4xi64>) -> tensor<2x5x2x8xf32>
  %v4 = nn.reshape(%v, %s4) : (tensor<2x5x16xf32>, tensor<4xi64>) -> tensor<2x5x2x8xf32>
  %qt = nn.transpose(%q4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x8xf32>) -> tensor<2x2x5x8xf32>
  %kt = nn.transpose(%k4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x8xf32>) -> tensor<2x2x5x8xf32>
  %vt = nn.transpose(%v4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x2x8xf32>) -> tensor<2x2x5x8xf32>
  %o = llm.sdpa(%qt, %kt, %vt, %mask) {scale = 0.353553385 : f32} : (tensor<2x2x5x8xf32>, tensor<2x2x5x8xf32>, tensor<2x2x5x8xf32>, tensor<2x1x1x5xf32>) -> tensor<2x2x5x8xf32>
  %ot = nn.transpose(%o) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x5x8xf32>) -> tensor<2x5x2x8xf32>
  %y = nn.reshape(%ot, %so) : (tensor<2x5x2x8xf32>, tensor<3xi64>) -> tensor<2x5x16xf32>
  return %y : tensor<2x5x16xf32>
}

// -----

// Tests that per-head norms of q and k (Qwen3's q_norm/k_norm: llm.norm over head_dim between
// the head split and the transpose) become one grouped norm of the packed rows' first 6 heads,
// q's weight tiled over its 4 heads and k's over its 2, before the rope.
// CHECK-LABEL: func @per_head_norms
func.func @per_head_norms(%x: tensor<1x5x32xf32>, %cos: tensor<1x1x5x8xf32>, %sin: tensor<1x1x5x8xf32>) -> tensor<1x5x32xf32> {
  %none = nn.none
  %wq = nn.constant dense<0.1> : tensor<32x32xf32>
  %wk = nn.constant dense<0.2> : tensor<32x16xf32>
  %wv = nn.constant dense<0.3> : tensor<32x16xf32>
  %gq = nn.constant dense<2.0> : tensor<8xf32>
  %gk = nn.constant dense<3.0> : tensor<8xf32>
  %sq = nn.constant dense<[0, 0, 4, 8]> : tensor<4xi64>
  %skv = nn.constant dense<[0, 0, 2, 8]> : tensor<4xi64>
  %so = nn.constant dense<[0, 0, 32]> : tensor<3xi64>
  // CHECK: %[[G:.+]] = nn.constant dense<[2.000000e+00, {{.*}}, 3.000000e+00]> : tensor<48xf32>
  // CHECK: %[[P:.+]] = llm.fused_matmul
  // CHECK: %[[N:.+]] = llm.norm(%[[P]], %{{.+}}, %[[G]], %{{.+}}) {epsilon = 9.99999997E-7 : f32, group = 8 : i64, kind = "rms"} : (tensor<1x5x64xf32>, none, tensor<48xf32>, none) -> tensor<1x5x64xf32>
  // CHECK: %[[R:.+]] = llm.rope(%[[N]], %{{.+}}, %{{.+}}, %{{.+}}) {head_dim = 8 : i64, num_heads = 6 : i64}
  // CHECK: llm.attention(%[[R]], %[[R]], %[[R]])
  // CHECK-NOT: nn.transpose
  %q = llm.fused_matmul(%x, %wq, %none) {activation = "none"} : (tensor<1x5x32xf32>, tensor<32x32xf32>, none) -> tensor<1x5x32xf32>
  %k = llm.fused_matmul(%x, %wk, %none) {activation = "none"} : (tensor<1x5x32xf32>, tensor<32x16xf32>, none) -> tensor<1x5x16xf32>
  %v = llm.fused_matmul(%x, %wv, %none) {activation = "none"} : (tensor<1x5x32xf32>, tensor<32x16xf32>, none) -> tensor<1x5x16xf32>
  %q4 = nn.reshape(%q, %sq) : (tensor<1x5x32xf32>, tensor<4xi64>) -> tensor<1x5x4x8xf32>
  %k4 = nn.reshape(%k, %skv) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %v4 = nn.reshape(%v, %skv) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %qn = llm.norm(%q4, %none, %gq, %none) {kind = "rms", epsilon = 1.0e-06 : f32} : (tensor<1x5x4x8xf32>, none, tensor<8xf32>, none) -> tensor<1x5x4x8xf32>
  %kn = llm.norm(%k4, %none, %gk, %none) {kind = "rms", epsilon = 1.0e-06 : f32} : (tensor<1x5x2x8xf32>, none, tensor<8xf32>, none) -> tensor<1x5x2x8xf32>
  %qt = nn.transpose(%qn) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x4x8xf32>) -> tensor<1x4x5x8xf32>
  %kt = nn.transpose(%kn) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %vt = nn.transpose(%v4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %qr = llm.rope(%qt, %none, %cos, %sin) : (tensor<1x4x5x8xf32>, none, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<1x4x5x8xf32>
  %kr = llm.rope(%kt, %none, %cos, %sin) : (tensor<1x2x5x8xf32>, none, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32>
  %o = llm.attention(%qr, %kr, %vt) {layer = 0 : i64, scale = 0.353553385 : f32} : (tensor<1x4x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x4x5x8xf32>
  %ot = nn.transpose(%o) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x5x8xf32>) -> tensor<1x5x4x8xf32>
  %y = nn.reshape(%ot, %so) : (tensor<1x5x4x8xf32>, tensor<3xi64>) -> tensor<1x5x32xf32>
  return %y : tensor<1x5x32xf32>
}

// -----

// Tests a near miss: q's and k's per-head norms with different epsilons stay as they are.
// CHECK-LABEL: func @per_head_norms_differ
func.func @per_head_norms_differ(%x: tensor<1x5x16xf32>) -> tensor<1x5x16xf32> {
  %none = nn.none
  %w = nn.constant dense<0.1> : tensor<16x16xf32>
  %g = nn.constant dense<2.0> : tensor<8xf32>
  %s4 = nn.constant dense<[0, 0, 2, 8]> : tensor<4xi64>
  %so = nn.constant dense<[0, 0, 16]> : tensor<3xi64>
  // CHECK-COUNT-2: llm.norm
  // CHECK: llm.attention(%{{.+}}, %{{.+}}, %{{.+}}) {layer = 0 : i64, scale = 1.000000e+00 : f32}
  %q = llm.fused_matmul(%x, %w, %none) {activation = "none"} : (tensor<1x5x16xf32>, tensor<16x16xf32>, none) -> tensor<1x5x16xf32>
  %k = llm.fused_matmul(%x, %w, %none) {activation = "none"} : (tensor<1x5x16xf32>, tensor<16x16xf32>, none) -> tensor<1x5x16xf32>
  %v = llm.fused_matmul(%x, %w, %none) {activation = "none"} : (tensor<1x5x16xf32>, tensor<16x16xf32>, none) -> tensor<1x5x16xf32>
  %q4 = nn.reshape(%q, %s4) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %k4 = nn.reshape(%k, %s4) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %v4 = nn.reshape(%v, %s4) : (tensor<1x5x16xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %qn = llm.norm(%q4, %none, %g, %none) {kind = "rms", epsilon = 1.0e-06 : f32} : (tensor<1x5x2x8xf32>, none, tensor<8xf32>, none) -> tensor<1x5x2x8xf32>
  %kn = llm.norm(%k4, %none, %g, %none) {kind = "rms", epsilon = 1.0e-05 : f32} : (tensor<1x5x2x8xf32>, none, tensor<8xf32>, none) -> tensor<1x5x2x8xf32>
  %qt = nn.transpose(%qn) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %kt = nn.transpose(%kn) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %vt = nn.transpose(%v4) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x2x8xf32>) -> tensor<1x2x5x8xf32>
  %o = llm.attention(%qt, %kt, %vt) {layer = 0 : i64, scale = 1.0 : f32} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  %ot = nn.transpose(%o) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x5x8xf32>) -> tensor<1x5x2x8xf32>
  %y = nn.reshape(%ot, %so) : (tensor<1x5x2x8xf32>, tensor<3xi64>) -> tensor<1x5x16xf32>
  return %y : tensor<1x5x16xf32>
}
