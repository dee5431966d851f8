// RUN: llmc-opt --llmc-lower-to-exec %s | FileCheck %s

// Tests that nn ops become kernel calls carrying their attributes as parameters.
// CHECK-LABEL: func @lower
func.func @lower(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // CHECK: %[[W:.+]] = exec.weight {name = "scale"} dense<2.000000e+00> : tensor<4xf32>
  %w = nn.constant {name = "scale"} dense<2.0> : tensor<4xf32>
  // CHECK: %[[NONE:.+]] = exec.none
  %none = nn.none
  // CHECK: %[[M:.+]] = exec.call "Mul"(%{{.+}}, %[[W]]) {llmc.names = ["m"], params = {}}
  %m = nn.mul(%x, %w) {llmc.names = ["m"]} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  // CHECK: exec.call "LayerNormalization"(%[[M]], %[[W]], %[[NONE]]) {params = {axis = -1 : i64, epsilon = 9.99999974E-6 : f32}}
  %y = nn.layer_normalization(%m, %w, %none) {axis = -1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x4xf32>, tensor<4xf32>, none) -> tensor<2x4xf32>
  // CHECK-NOT: nn.
  return %y : tensor<2x4xf32>
}
