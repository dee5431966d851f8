// RUN: llmc-opt --split-input-file --llmc-fold-constants %s | FileCheck %s

// Tests that ops on constants are computed at compile time by the runtime kernels.
// CHECK-LABEL: func @fold_transpose
func.func @fold_transpose() -> tensor<3x2xf32> {
  %w = nn.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  // CHECK-NOT: nn.transpose
  // CHECK: nn.constant {name = "wt"} dense<{{\[}}[1.000000e+00, 4.000000e+00], [2.000000e+00, 5.000000e+00], [3.000000e+00, 6.000000e+00]]>
  %t = nn.transpose(%w) {llmc.names = ["wt"]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %t : tensor<3x2xf32>
}

// -----

// Tests that chains fold in order and that ops reading inputs stay.
// CHECK-LABEL: func @fold_chain
func.func @fold_chain(%x: tensor<2xf32>) -> tensor<2xf32> {
  %a = nn.constant dense<[1.0, 4.0]> : tensor<2xf32>
  %s = nn.sqrt(%a) : (tensor<2xf32>) -> tensor<2xf32>
  // CHECK: nn.constant dense<[2.000000e+00, 3.000000e+00]>
  %one = nn.constant dense<1.0> : tensor<f32>
  %b = nn.add(%s, %one) : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  // CHECK: nn.mul
  %y = nn.mul(%x, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

// Tests weight-side folding: a reshape and a scaling of an initializer feeding a MatMul are
// computed at compile time, so the product reads one prepared weight.
// CHECK-LABEL: func @fold_weight
func.func @fold_weight(%x: tensor<2x4xf32>) -> tensor<2x2xf32> {
  %w = nn.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>
  %shape = nn.constant dense<[4, 2]> : tensor<2xi64>
  %half = nn.constant dense<0.5> : tensor<f32>
  // CHECK-NOT: nn.reshape
  // CHECK: %[[W:.+]] = nn.constant dense<{{\[}}[5.000000e-01, 1.000000e+00], [1.500000e+00, 2.000000e+00], [2.500000e+00, 3.000000e+00], [3.500000e+00, 4.000000e+00]]>
  // CHECK: nn.matmul(%{{.+}}, %[[W]])
  %r = nn.reshape(%w, %shape) : (tensor<8xf32>, tensor<2xi64>) -> tensor<4x2xf32>
  %s = nn.mul(%r, %half) : (tensor<4x2xf32>, tensor<f32>) -> tensor<4x2xf32>
  %y = nn.matmul(%x, %s) : (tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}

// -----

// Tests the size limit: results larger than max-elements stay as ops.
// RUN: llmc-opt --llmc-fold-constants=max-elements=4 --split-input-file %s | FileCheck %s --check-prefix=LIMIT
// LIMIT-LABEL: func @too_big
func.func @too_big() -> tensor<16xf32> {
  %shape = nn.constant dense<[16]> : tensor<1xi64>
  // LIMIT: nn.constant_of_shape
  %c = nn.constant_of_shape(%shape) : (tensor<1xi64>) -> tensor<16xf32>
  return %c : tensor<16xf32>
}
