// RUN: llmc-opt --split-input-file --llmc-fuse-gated-mlp %s | FileCheck %s

// Tests that silu(x·Wg) * (x·Wu) becomes llm.gated_mlp with [Wg | Wu] as one weight.
// CHECK-LABEL: func @gated
// CHECK-SAME: (%[[X:.+]]: tensor<2x2xf32>)
func.func @gated(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %none = nn.none
  %wg = nn.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %wu = nn.constant dense<[[5.0, 6.0], [7.0, 8.0]]> : tensor<2x2xf32>
  // CHECK: %[[W:.+]] = nn.constant dense<{{\[}}[1.000000e+00, 2.000000e+00, 5.000000e+00, 6.000000e+00], [3.000000e+00, 4.000000e+00, 7.000000e+00, 8.000000e+00]]> : tensor<2x4xf32>
  // CHECK: llm.gated_mlp(%[[X]], %[[W]]) {activation = "silu"}
  // CHECK-NOT: llm.fused_matmul
  %g = llm.fused_matmul(%x, %wg, %none) {activation = "silu"} : (tensor<2x2xf32>, tensor<2x2xf32>, none) -> tensor<2x2xf32>
  %u = llm.fused_matmul(%x, %wu, %none) {activation = "none"} : (tensor<2x2xf32>, tensor<2x2xf32>, none) -> tensor<2x2xf32>
  %y = nn.mul(%u, %g) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}

// -----

// Tests that products of different inputs, or one with another consumer, do not fuse.
// CHECK-LABEL: func @not_gated
func.func @not_gated(%x: tensor<2x2xf32>, %z: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) {
  %none = nn.none
  %wg = nn.constant dense<1.0> : tensor<2x2xf32>
  %wu = nn.constant dense<2.0> : tensor<2x2xf32>
  // CHECK-NOT: llm.gated_mlp
  %g = llm.fused_matmul(%x, %wg, %none) {activation = "silu"} : (tensor<2x2xf32>, tensor<2x2xf32>, none) -> tensor<2x2xf32>
  %u = llm.fused_matmul(%z, %wu, %none) {activation = "none"} : (tensor<2x2xf32>, tensor<2x2xf32>, none) -> tensor<2x2xf32>
  %y = nn.mul(%g, %u) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %g2 = llm.fused_matmul(%x, %wg, %none) {activation = "silu"} : (tensor<2x2xf32>, tensor<2x2xf32>, none) -> tensor<2x2xf32>
  %u2 = llm.fused_matmul(%x, %wu, %none) {activation = "none"} : (tensor<2x2xf32>, tensor<2x2xf32>, none) -> tensor<2x2xf32>
  %y2 = nn.mul(%g2, %u2) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %y, %y2, %u2 : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
}
