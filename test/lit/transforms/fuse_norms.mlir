// RUN: llmc-opt --split-input-file --llmc-fuse-norms %s | FileCheck %s

// Tests that a decomposed RMSNorm (Pow, ReduceMean, Add eps, Sqrt, 1/x, Mul, Mul gamma)
// becomes one llm.norm.
// CHECK-LABEL: func @rms
// CHECK-SAME: (%[[X:.+]]: tensor<2x3x8xf32>)
func.func @rms(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %axes = nn.constant dense<[-1]> : tensor<1xi64>
  %gamma = nn.constant dense<0.5> : tensor<8xf32>
  // CHECK: %[[Y:.+]] = llm.norm(%[[X]], %{{.+}}, %{{.+}}, %{{.+}}) {epsilon = 9.99999997E-7 : f32, kind = "rms"}
  // CHECK-NOT: nn.reduce_mean
  %sq = nn.pow(%x, %two) : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<2x3x8xf32>
  %ms = nn.reduce_mean(%sq, %axes) {keepdims = 1 : i64} : (tensor<2x3x8xf32>, tensor<1xi64>) -> tensor<2x3x1xf32>
  %v = nn.add(%ms, %eps) : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %s = nn.sqrt(%v) : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %inv = nn.div(%one, %s) : (tensor<f32>, tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %n = nn.mul(%x, %inv) : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %y = nn.mul(%gamma, %n) : (tensor<8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x3x8xf32>
}

// -----

// Tests that a decomposed LayerNorm with scale and shift becomes llm.norm kind "layer".
// CHECK-LABEL: func @layer
func.func @layer(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-5> : tensor<f32>
  %axes = nn.constant dense<[1]> : tensor<1xi64>
  %gamma = nn.constant dense<2.0> : tensor<8xf32>
  %beta = nn.constant dense<0.25> : tensor<8xf32>
  // CHECK: llm.norm({{.+}}) {epsilon = 9.99999974E-6 : f32, kind = "layer"}
  // CHECK-NOT: nn.sub
  %mean = nn.reduce_mean(%x, %axes) : (tensor<2x8xf32>, tensor<1xi64>) -> tensor<2x1xf32>
  %d = nn.sub(%x, %mean) : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %sq = nn.pow(%d, %two) : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %var = nn.reduce_mean(%sq, %axes) : (tensor<2x8xf32>, tensor<1xi64>) -> tensor<2x1xf32>
  %v = nn.add(%var, %eps) : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = nn.sqrt(%v) : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = nn.div(%d, %s) : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %g = nn.mul(%n, %gamma) : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %y = nn.add(%g, %beta) : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a residual add feeding LayerNormalization moves into the norm, which also
// returns the sum for the add's other user.
// CHECK-LABEL: func @residual
// CHECK-SAME: (%[[A:.+]]: tensor<2x8xf32>, %[[B:.+]]: tensor<2x8xf32>)
func.func @residual(%a: tensor<2x8xf32>, %b: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %gamma = nn.constant dense<2.0> : tensor<8xf32>
  %beta = nn.constant dense<0.25> : tensor<8xf32>
  // CHECK: %[[N:.+]]:2 = llm.norm(%[[A]], %[[B]], %{{.+}}, %{{.+}}) {epsilon = 9.99999974E-6 : f32, kind = "layer"}
  // CHECK-NOT: nn.add
  %sum = nn.add(%a, %b) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = nn.layer_normalization(%sum, %gamma, %beta) {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK: return %[[N]]#0, %[[N]]#1
  return %y, %sum : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Tests that x² with another consumer does not fuse.
// CHECK-LABEL: func @extra_consumer
func.func @extra_consumer(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %two = nn.constant dense<2.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %axes = nn.constant dense<[-1]> : tensor<1xi64>
  // CHECK-NOT: llm.norm
  %sq = nn.pow(%x, %two) : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = nn.reduce_mean(%sq, %axes) : (tensor<2x8xf32>, tensor<1xi64>) -> tensor<2x1xf32>
  %v = nn.add(%ms, %eps) : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = nn.sqrt(%v) : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = nn.div(%x, %s) : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %n, %sq : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Tests that a mean over another axis than the last does not fuse.
// CHECK-LABEL: func @wrong_axis
func.func @wrong_axis(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %axes = nn.constant dense<[1]> : tensor<1xi64>
  // CHECK-NOT: llm.norm
  %sq = nn.pow(%x, %two) : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<2x3x8xf32>
  %ms = nn.reduce_mean(%sq, %axes) : (tensor<2x3x8xf32>, tensor<1xi64>) -> tensor<2x1x8xf32>
  %v = nn.add(%ms, %eps) : (tensor<2x1x8xf32>, tensor<f32>) -> tensor<2x1x8xf32>
  %s = nn.sqrt(%v) : (tensor<2x1x8xf32>) -> tensor<2x1x8xf32>
  %n = nn.div(%x, %s) : (tensor<2x3x8xf32>, tensor<2x1x8xf32>) -> tensor<2x3x8xf32>
  return %n : tensor<2x3x8xf32>
}

// -----

// Tests that an epsilon that is not a constant, or one added after the square root (another
// formula), does not fuse.
// CHECK-LABEL: func @epsilon
func.func @epsilon(%x: tensor<2x8xf32>, %eps: tensor<f32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %two = nn.constant dense<2.0> : tensor<f32>
  %c = nn.constant dense<1.0e-6> : tensor<f32>
  %axes = nn.constant dense<[-1]> : tensor<1xi64>
  // CHECK-NOT: llm.norm
  %sq = nn.pow(%x, %two) : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = nn.reduce_mean(%sq, %axes) : (tensor<2x8xf32>, tensor<1xi64>) -> tensor<2x1xf32>
  %v = nn.add(%ms, %eps) : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = nn.sqrt(%v) : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = nn.div(%x, %s) : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %sq2 = nn.mul(%x, %x) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %ms2 = nn.reduce_mean(%sq2, %axes) : (tensor<2x8xf32>, tensor<1xi64>) -> tensor<2x1xf32>
  %r2 = nn.sqrt(%ms2) : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %s2 = nn.add(%r2, %c) : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %n2 = nn.div(%x, %s2) : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  return %n, %n2 : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Tests that a non-constant weight stays a separate Mul after the fused norm.
// CHECK-LABEL: func @weight_not_constant
func.func @weight_not_constant(%x: tensor<2x8xf32>, %gamma: tensor<8xf32>) -> tensor<2x8xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %axes = nn.constant dense<[-1]> : tensor<1xi64>
  // CHECK: %[[N:.+]] = llm.norm
  // CHECK: nn.mul(%{{.+}}, %[[N]])
  %sq = nn.pow(%x, %two) : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ms = nn.reduce_mean(%sq, %axes) : (tensor<2x8xf32>, tensor<1xi64>) -> tensor<2x1xf32>
  %v = nn.add(%ms, %eps) : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  %s = nn.sqrt(%v) : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %inv = nn.reciprocal(%s) : (tensor<2x1xf32>) -> tensor<2x1xf32>
  %n = nn.mul(%x, %inv) : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %y = nn.mul(%gamma, %n) : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
