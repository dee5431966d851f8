// RUN: llmc-opt --split-input-file --llmc-fuse-elementwise %s | FileCheck %s

// Tests that a chain of elementwise ops with broadcasting becomes one llm.elementwise whose
// program reads the inputs and the scalar constant as an immediate.
// CHECK-LABEL: func @chain
// CHECK-SAME: (%[[A:.+]]: tensor<2x8xf32>, %[[B:.+]]: tensor<8xf32>)
func.func @chain(%a: tensor<2x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  %c = nn.constant dense<3.0> : tensor<f32>
  // CHECK: %[[Y:.+]] = llm.elementwise(%[[A]], %[[B]]) {constants = array<f32: 3.000000e+00>, program = array<i64: 2, 0, 1, 0, 2, -1, 21, 3, 0>}
  // CHECK-NOT: nn.tanh
  %m = nn.mul(%a, %b) : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %s = nn.add(%m, %c) : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %y = nn.tanh(%s) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x8xf32>
}

// -----

// Tests that an intermediate result with two consumers ends a chain, and that non-float ops
// do not join.
// CHECK-LABEL: func @shared
func.func @shared(%a: tensor<4xf32>, %i: tensor<4xi64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xi64>) {
  // CHECK: nn.exp
  // CHECK: nn.neg
  // CHECK: nn.sqrt
  // CHECK: nn.add(%{{.+}}, %{{.+}}) : (tensor<4xi64>
  %e = nn.exp(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %n = nn.neg(%e) : (tensor<4xf32>) -> tensor<4xf32>
  %s = nn.sqrt(%e) : (tensor<4xf32>) -> tensor<4xf32>
  %j = nn.add(%i, %i) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return %n, %s, %j : tensor<4xf32>, tensor<4xf32>, tensor<4xi64>
}
