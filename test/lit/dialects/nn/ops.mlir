// RUN: llmc-opt --split-input-file %s | llmc-opt --split-input-file | FileCheck %s

// Tests that ONNX-mirroring ops, constants and absent inputs round-trip.
// CHECK-LABEL: func @round_trip
func.func @round_trip(%x: tensor<2x3xf32>, %max: tensor<f32>) -> tensor<2x3xf32> {
  // CHECK: %[[W:.+]] = nn.constant {name = "w"} dense<1.000000e+00> : tensor<3xf32>
  %w = nn.constant {name = "w"} dense<1.0> : tensor<3xf32>
  // CHECK: %[[NONE:.+]] = nn.none
  %none = nn.none
  // CHECK: %[[SUM:.+]] = nn.add(%{{.+}}, %[[W]]) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %sum = nn.add(%x, %w) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: nn.clip(%[[SUM]], %[[NONE]], %{{.+}}) : (tensor<2x3xf32>, none, tensor<f32>)
  %y = nn.clip(%sum, %none, %max) : (tensor<2x3xf32>, none, tensor<f32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Tests that ONNX attributes keep their names and kinds.
// CHECK-LABEL: func @attributes
func.func @attributes(%x: tensor<2x3x4xf32>) -> tensor<4x3x2xf32> {
  // CHECK: nn.transpose(%{{.+}}) {perm = array<i64: 2, 1, 0>}
  %t = nn.transpose(%x) {perm = array<i64: 2, 1, 0>} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
  // CHECK: nn.softmax(%{{.+}}) {axis = 0 : i64}
  %s = nn.softmax(%t) {axis = 0 : i64} : (tensor<4x3x2xf32>) -> tensor<4x3x2xf32>
  return %s : tensor<4x3x2xf32>
}

// -----

// Tests ops with several results and unranked results.
// CHECK-LABEL: func @multiple_results
func.func @multiple_results(%x: tensor<6xf32>) -> (tensor<3xf32>, tensor<*xf32>) {
  // CHECK: nn.split(%{{.+}}) {axis = 0 : i64, num_outputs = 2 : i64} : (tensor<6xf32>) -> (tensor<3xf32>, tensor<*xf32>)
  %a, %b = nn.split(%x) {axis = 0 : i64, num_outputs = 2 : i64} : (tensor<6xf32>) -> (tensor<3xf32>, tensor<*xf32>)
  return %a, %b : tensor<3xf32>, tensor<*xf32>
}
