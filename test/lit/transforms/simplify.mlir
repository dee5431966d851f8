// RUN: llmc-opt --split-input-file --llmc-simplify %s | FileCheck %s

// Tests that Identity and inference Dropout forward their input.
// CHECK-LABEL: func @identity_dropout
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
func.func @identity_dropout(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NOT: nn.identity
  // CHECK-NOT: nn.dropout
  %a = nn.identity(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %b = nn.dropout(%a) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK: return %[[X]]
  return %b : tensor<4xf32>
}

// -----

// Tests that Dropout in training mode, or whose mask is used, stays.
// CHECK-LABEL: func @dropout_kept
func.func @dropout_kept(%x: tensor<4xf32>, %ratio: tensor<f32>) -> (tensor<4xf32>, tensor<4xi1>) {
  %t = nn.constant dense<true> : tensor<i1>
  // CHECK: nn.dropout
  %a = nn.dropout(%x, %ratio, %t) : (tensor<4xf32>, tensor<f32>, tensor<i1>) -> tensor<4xf32>
  // CHECK: nn.dropout
  %b, %mask = nn.dropout(%a) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>)
  return %b, %mask : tensor<4xf32>, tensor<4xi1>
}

// -----

// Tests that shape ops to the same static type vanish and real ones stay.
// CHECK-LABEL: func @no_op_shapes
func.func @no_op_shapes(%x: tensor<2x3xf32>, %s: tensor<2xi64>) -> tensor<3x2xf32> {
  // CHECK-NOT: nn.reshape
  %a = nn.reshape(%x, %s) : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<2x3xf32>
  // CHECK-NOT: nn.cast(
  %b = nn.cast(%a) {to = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.transpose
  %c = nn.transpose(%b) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %c : tensor<3x2xf32>
}
