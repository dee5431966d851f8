// RUN: llmc-opt --split-input-file --llmc-fuse-attention %s | FileCheck %s

// Tests that BERT's attention core (Kᵀ by a transpose of the reshaped keys, Div by
// sqrt(head_dim), Add of the padding mask, Softmax, MatMul by V) becomes llm.sdpa with
// the transposes composed into K's layout.
// CHECK-LABEL: func @encoder
// CHECK-SAME: (%[[Q:.+]]: tensor<2x4x5x16xf32>, %[[K:.+]]: tensor<2x5x4x16xf32>, %[[V:.+]]: tensor<2x4x5x16xf32>, %[[M:.+]]: tensor<2x1x1x5xf32>)
func.func @encoder(%q: tensor<2x4x5x16xf32>, %k: tensor<2x5x4x16xf32>, %v: tensor<2x4x5x16xf32>, %mask: tensor<2x1x1x5xf32>) -> tensor<2x4x5x16xf32> {
  %d = nn.constant dense<4.0> : tensor<f32>
  // CHECK: %[[KT:.+]] = nn.transpose(%[[K]]) {perm = array<i64: 0, 2, 1, 3>}
  // CHECK: %[[Y:.+]] = llm.sdpa(%[[Q]], %[[KT]], %[[V]], %[[M]]) {scale = 2.500000e-01 : f32}
  // CHECK-NOT: nn.softmax
  %kt = nn.transpose(%k) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x5x4x16xf32>) -> tensor<2x4x16x5xf32>
  %s = nn.matmul(%q, %kt) : (tensor<2x4x5x16xf32>, tensor<2x4x16x5xf32>) -> tensor<2x4x5x5xf32>
  %sd = nn.div(%s, %d) : (tensor<2x4x5x5xf32>, tensor<f32>) -> tensor<2x4x5x5xf32>
  %sm = nn.add(%sd, %mask) : (tensor<2x4x5x5xf32>, tensor<2x1x1x5xf32>) -> tensor<2x4x5x5xf32>
  %p = nn.softmax(%sm) {axis = -1 : i64} : (tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
  %y = nn.matmul(%p, %v) : (tensor<2x4x5x5xf32>, tensor<2x4x5x16xf32>) -> tensor<2x4x5x16xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x4x5x16xf32>
}

// -----

// Tests that probabilities with another consumer (returned attention weights) do not fuse.
// CHECK-LABEL: func @probs_used
func.func @probs_used(%q: tensor<1x2x3x8xf32>, %kt: tensor<1x2x8x3xf32>, %v: tensor<1x2x3x8xf32>) -> (tensor<1x2x3x8xf32>, tensor<1x2x3x3xf32>) {
  // CHECK-NOT: llm.sdpa
  %s = nn.matmul(%q, %kt) : (tensor<1x2x3x8xf32>, tensor<1x2x8x3xf32>) -> tensor<1x2x3x3xf32>
  %p = nn.softmax(%s) {axis = -1 : i64} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %y = nn.matmul(%p, %v) : (tensor<1x2x3x3xf32>, tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32>
  return %y, %p : tensor<1x2x3x8xf32>, tensor<1x2x3x3xf32>
}

// -----

// Tests torch's exported scaled_dot_product_attention: Q and Kᵀ each scaled by √scale, and
// fully masked rows zeroed with where(isnan(p), 0, p) before the product by V. It fuses with
// the product of the two constants as the scale (llm.sdpa gives masked rows zeros itself).
// CHECK-LABEL: func @torch_sdpa
// CHECK-SAME: (%[[Q:.+]]: tensor<1x2x3x8xf32>, %[[KT:.+]]: tensor<1x2x8x3xf32>, %[[V:.+]]: tensor<1x2x3x8xf32>, %[[M:.+]]: tensor<1x1x1x3xf32>)
func.func @torch_sdpa(%q: tensor<1x2x3x8xf32>, %kt: tensor<1x2x8x3xf32>, %v: tensor<1x2x3x8xf32>, %mask: tensor<1x1x1x3xf32>) -> tensor<1x2x3x8xf32> {
  // CHECK: %[[K:.+]] = nn.transpose(%[[KT]]) {perm = array<i64: 0, 1, 3, 2>}
  // CHECK: %[[Y:.+]] = llm.sdpa(%[[Q]], %[[K]], %[[V]], %[[M]]) {scale = 2.500000e-01 : f32}
  // CHECK-NOT: nn.is_nan
  // CHECK-NOT: nn.where
  // CHECK-NOT: nn.mul
  // CHECK: return %[[Y]]
  %c = nn.constant dense<0.5> : tensor<f32>
  %qs = nn.mul(%q, %c) : (tensor<1x2x3x8xf32>, tensor<f32>) -> tensor<1x2x3x8xf32>
  %ks = nn.mul(%kt, %c) : (tensor<1x2x8x3xf32>, tensor<f32>) -> tensor<1x2x8x3xf32>
  %s = nn.matmul(%qs, %ks) : (tensor<1x2x3x8xf32>, tensor<1x2x8x3xf32>) -> tensor<1x2x3x3xf32>
  %sm = nn.add(%s, %mask) : (tensor<1x2x3x3xf32>, tensor<1x1x1x3xf32>) -> tensor<1x2x3x3xf32>
  %p = nn.softmax(%sm) {axis = -1 : i64} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %nan = nn.is_nan(%p) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xi1>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %guarded = nn.where(%nan, %zero, %p) : (tensor<1x2x3x3xi1>, tensor<f32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %y = nn.matmul(%guarded, %v) : (tensor<1x2x3x3xf32>, tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32>
  return %y : tensor<1x2x3x8xf32>
}

// -----

// Tests that a where over the NaNs that does not put zeros there is not taken for the guard.
// CHECK-LABEL: func @nan_to_one
func.func @nan_to_one(%q: tensor<1x2x3x8xf32>, %kt: tensor<1x2x8x3xf32>, %v: tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32> {
  // CHECK-NOT: llm.sdpa
  %s = nn.matmul(%q, %kt) : (tensor<1x2x3x8xf32>, tensor<1x2x8x3xf32>) -> tensor<1x2x3x3xf32>
  %p = nn.softmax(%s) {axis = -1 : i64} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %nan = nn.is_nan(%p) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xi1>
  %one = nn.constant dense<1.0> : tensor<f32>
  %guarded = nn.where(%nan, %one, %p) : (tensor<1x2x3x3xi1>, tensor<f32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %y = nn.matmul(%guarded, %v) : (tensor<1x2x3x3xf32>, tensor<1x2x3x8xf32>) -> tensor<1x2x3x8xf32>
  return %y : tensor<1x2x3x8xf32>
}
