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

// Tests the size limit: results larger than max-elements stay as ops.
// RUN: llmc-opt --llmc-fold-constants=max-elements=4 --split-input-file %s | FileCheck %s --check-prefix=LIMIT
// LIMIT-LABEL: func @too_big
func.func @too_big() -> tensor<16xf32> {
  %shape = nn.constant dense<[16]> : tensor<1xi64>
  // LIMIT: nn.constant_of_shape
  %c = nn.constant_of_shape(%shape) : (tensor<1xi64>) -> tensor<16xf32>
  return %c : tensor<16xf32>
}
