// RUN: llmc-opt --split-input-file --llmc-fuse-matmul %s | FileCheck %s

// Tests that MatMul + bias + GELU written with Erf (as torch exports it) becomes one
// llm.fused_matmul with a gelu_erf epilogue.
// CHECK-LABEL: func @gelu_erf
// CHECK-SAME: (%[[X:.+]]: tensor<2x4xf32>)
func.func @gelu_erf(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
  %w = nn.constant dense<0.5> : tensor<4x3xf32>
  %b = nn.constant dense<[0.1, 0.2, 0.3]> : tensor<3xf32>
  %sqrt2 = nn.constant dense<1.41421354> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  // CHECK: %[[Y:.+]] = llm.fused_matmul(%[[X]], %{{.+}}, %{{.+}}) {activation = "gelu_erf", trans_b = 0 : i64}
  // CHECK-NOT: nn.erf
  %p = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %h = nn.add(%b, %p) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %d = nn.div(%h, %sqrt2) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %e = nn.erf(%d) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %a = nn.add(%e, %one) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %m = nn.mul(%h, %a) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %y = nn.mul(%m, %half) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x3xf32>
}

// -----

// Tests that Gemm's transB, alpha/beta and C fold into the fused op, with a Relu epilogue.
// CHECK-LABEL: func @gemm_relu
func.func @gemm_relu(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
  %w = nn.constant dense<0.5> : tensor<3x4xf32>
  %c = nn.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  // CHECK: nn.constant dense<[2.000000e+00, 4.000000e+00, 6.000000e+00]> : tensor<3xf32>
  // CHECK: llm.fused_matmul({{.+}}) {activation = "relu", alpha = 5.000000e-01 : f32, trans_b = 1 : i64}
  %p = nn.gemm(%x, %w, %c) {alpha = 0.5 : f32, beta = 2.0 : f32, transB = 1 : i64} : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %y = nn.relu(%p) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Tests that x * sigmoid(x) is recognized as SiLU, and GELU's tanh form as gelu_tanh.
// CHECK-LABEL: func @silu_gelu_tanh
func.func @silu_gelu_tanh(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %w = nn.constant dense<0.25> : tensor<4x4xf32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %three = nn.constant dense<3.0> : tensor<f32>
  %k = nn.constant dense<0.044715> : tensor<f32>
  %s = nn.constant dense<0.797884583> : tensor<f32>
  // CHECK: llm.fused_matmul({{.+}}) {activation = "silu", trans_b = 0 : i64}
  %p = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %sg = nn.sigmoid(%p) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %y = nn.mul(%p, %sg) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  // CHECK: llm.fused_matmul({{.+}}) {activation = "gelu_tanh", trans_b = 0 : i64}
  %q = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %c = nn.pow(%q, %three) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %kc = nn.mul(%c, %k) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %in = nn.add(%q, %kc) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %sc = nn.mul(%in, %s) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %t = nn.tanh(%sc) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %t1 = nn.add(%t, %one) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %hq = nn.mul(%q, %half) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %z = nn.mul(%hq, %t1) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %y, %z : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Tests that a weight that is not a constant does not fuse.
// CHECK-LABEL: func @weight_not_constant
func.func @weight_not_constant(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>) -> tensor<2x3xf32> {
  // CHECK-NOT: llm.fused_matmul
  // CHECK: nn.matmul
  %p = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %y = nn.relu(%p) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Tests that a product with another consumer keeps its bias add and activation apart, and
// that elementwise ops computing no known activation stay.
// CHECK-LABEL: func @extra_consumer
func.func @extra_consumer(%x: tensor<2x4xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %w = nn.constant dense<0.5> : tensor<4x3xf32>
  %b = nn.constant dense<[0.1, 0.2, 0.3]> : tensor<3xf32>
  %c = nn.constant dense<3.0> : tensor<f32>
  // CHECK: %[[P:.+]] = llm.fused_matmul({{.+}}) {activation = "none", trans_b = 0 : i64}
  // CHECK: nn.add(%[[P]]
  // CHECK: nn.relu(%[[P]]
  %p = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %h = nn.add(%p, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %r = nn.relu(%p) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[Q:.+]] = llm.fused_matmul({{.+}}) {activation = "none", trans_b = 0 : i64}
  // CHECK: nn.mul(%[[Q]]
  %q = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %s = nn.mul(%q, %c) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  return %h, %r, %s : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}
