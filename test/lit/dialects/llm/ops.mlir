// RUN: llmc-opt --split-input-file %s | llmc-opt --split-input-file | FileCheck %s

// Tests that grouped-query attention and positions round-trip.
// CHECK-LABEL: func @round_trip
func.func @round_trip(%ids: tensor<1x?xi64>, %q: tensor<1x8x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>) -> (tensor<?xi64>, tensor<1x8x?x16xf32>) {
  // CHECK: llm.positions(%{{.+}}) : (tensor<1x?xi64>) -> tensor<?xi64>
  %p = llm.positions(%ids) : (tensor<1x?xi64>) -> tensor<?xi64>
  // CHECK: llm.attention(%{{.+}}, %{{.+}}, %{{.+}}) {layer = 3 : i64, scale = 2.500000e-01 : f32}
  %o = llm.attention(%q, %k, %v) {layer = 3 : i64, scale = 0.25 : f32} : (tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>) -> tensor<1x8x?x16xf32>
  return %p, %o : tensor<?xi64>, tensor<1x8x?x16xf32>
}

// -----

// Tests that the fused ops round-trip: fused_matmul, norm (with and without the residual
// sum), gated_mlp, elementwise, token-major rope and attention.
// CHECK-LABEL: func @fused
func.func @fused(%x: tensor<2x5x16xf32>, %r: tensor<2x5x16xf32>, %w: tensor<16x32xf32>, %g: tensor<16xf32>, %cos: tensor<1x1x5x8xf32>) -> (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x5x32xf32>, tensor<2x5x16xf32>) {
  %none = nn.none
  // CHECK: llm.fused_matmul(%{{.+}}, %{{.+}}, %{{.+}}) {activation = "gelu_tanh", trans_b = 0 : i64}
  %a = llm.fused_matmul(%x, %w, %none) {activation = "gelu_tanh", trans_b = 0 : i64} : (tensor<2x5x16xf32>, tensor<16x32xf32>, none) -> tensor<2x5x32xf32>
  // CHECK: llm.norm(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) {epsilon = 9.99999997E-7 : f32, kind = "rms"} : (tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<16xf32>, none) -> (tensor<2x5x16xf32>, tensor<2x5x16xf32>)
  %n:2 = llm.norm(%x, %r, %g, %none) {kind = "rms", epsilon = 1.0e-6 : f32} : (tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<16xf32>, none) -> (tensor<2x5x16xf32>, tensor<2x5x16xf32>)
  // CHECK: llm.gated_mlp(%{{.+}}, %{{.+}}) {activation = "silu"}
  %m = llm.gated_mlp(%x, %w) {activation = "silu"} : (tensor<2x5x16xf32>, tensor<16x32xf32>) -> tensor<2x5x16xf32>
  // CHECK: llm.elementwise(%{{.+}}, %{{.+}}) {constants = array<f32: 5.000000e-01>, program = array<i64: 2, 0, 1, 2, 2, -1>}
  %e = llm.elementwise(%x, %r) {program = array<i64: 2, 0, 1, 2, 2, -1>, constants = array<f32: 0.5>} : (tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x16xf32>
  // CHECK: llm.rope(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) {head_dim = 8 : i64, num_heads = 3 : i64}
  %t = llm.rope(%a, %none, %cos, %cos) {num_heads = 3 : i64, head_dim = 8 : i64} : (tensor<2x5x32xf32>, none, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<2x5x32xf32>
  // CHECK: llm.attention(%{{.+}}, %{{.+}}, %{{.+}}) {head_dim = 8 : i64, k_column = 16 : i64, layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, q_column = 0 : i64, scale = 1.000000e+00 : f32, v_column = 24 : i64}
  %o = llm.attention(%t, %t, %t) {layer = 0 : i64, scale = 1.0 : f32, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 8 : i64, q_column = 0 : i64, k_column = 16 : i64, v_column = 24 : i64} : (tensor<2x5x32xf32>, tensor<2x5x32xf32>, tensor<2x5x32xf32>) -> tensor<2x5x16xf32>
  return %a, %n#0, %m, %e, %t, %o : tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x5x32xf32>, tensor<2x5x16xf32>
}

// -----

// Tests that the quantized ops round-trip: quant_matmul (int8 with bias, gated int4) and
// quant_gather (int4 with zero points).
// CHECK-LABEL: func @quantized
func.func @quantized(%x: tensor<2x64xf32>, %ids: tensor<3xi64>, %q8: tensor<16x64xi8>, %s8: tensor<16x1xf32>, %b: tensor<16xf32>, %q4: tensor<16x32xui8>, %s4: tensor<16x1xf16>, %z: tensor<16x1xui8>) -> (tensor<2x16xf32>, tensor<2x8xf32>, tensor<3x64xf32>) {
  %none = nn.none
  // CHECK: llm.quant_matmul(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) {activation = "relu", format = "int8", group = 64 : i64}
  %y = llm.quant_matmul(%x, %q8, %s8, %none, %b) {format = "int8", group = 64 : i64, activation = "relu"} : (tensor<2x64xf32>, tensor<16x64xi8>, tensor<16x1xf32>, none, tensor<16xf32>) -> tensor<2x16xf32>
  // CHECK: llm.quant_matmul({{.*}}) {activation = "silu", format = "int4", gated = 1 : i64, group = 64 : i64}
  %h = llm.quant_matmul(%x, %q4, %s4, %none, %none) {format = "int4", group = 64 : i64, activation = "silu", gated = 1 : i64} : (tensor<2x64xf32>, tensor<16x32xui8>, tensor<16x1xf16>, none, none) -> tensor<2x8xf32>
  // CHECK: llm.quant_gather({{.*}}) {format = "int4_zp", group = 64 : i64}
  %e = llm.quant_gather(%ids, %q4, %s4, %z) {format = "int4_zp", group = 64 : i64} : (tensor<3xi64>, tensor<16x32xui8>, tensor<16x1xf16>, tensor<16x1xui8>) -> tensor<3x64xf32>
  return %y, %h, %e : tensor<2x16xf32>, tensor<2x8xf32>, tensor<3x64xf32>
}

// -----

// Tests that llm.moe and ALiBi slopes on llm.attention round-trip.
// CHECK-LABEL: func @moe
// CHECK: llm.moe(%{{.+}}) {activation = "silu", normalize = 1 : i64, top_k = 2 : i64}
func.func @moe(%x: tensor<?x8xf32>, %r: tensor<8x4xf32>, %g: tensor<4x8x6xf32>, %d: tensor<4x6x8xf32>) -> tensor<?x8xf32> {
  %y = llm.moe(%x, %r, %g, %g, %d) {top_k = 2 : i64, activation = "silu", normalize = 1 : i64} : (tensor<?x8xf32>, tensor<8x4xf32>, tensor<4x8x6xf32>, tensor<4x8x6xf32>, tensor<4x6x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// CHECK-LABEL: func @alibi
// CHECK: llm.attention(%{{.+}}) {alibi_slopes = array<f32: 5.000000e-01, 2.500000e-01>, layer = 0 : i64, scale = 1.000000e+00 : f32}
func.func @alibi(%q: tensor<1x2x3x8xf32>, %kv: tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32> {
  %y = llm.attention(%q, %kv, %kv) {layer = 0 : i64, scale = 1.0 : f32, alibi_slopes = array<f32: 0.5, 0.25>} : (tensor<1x2x3x8xf32>, tensor<1x2x3x8xf32>, tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32>
  return %y : tensor<1x2x3x8xf32>
}
