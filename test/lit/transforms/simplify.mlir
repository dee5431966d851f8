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

// -----

// Tests that a reshape whose constant shape keeps every dimension (0 copies one; a static
// size repeats it) vanishes with dynamic dimensions, as torch's SDPA export writes after the
// attention; a -1, a changed size or allowzero = 1 with a 0 keep it.
// CHECK-LABEL: func @copying_reshape
func.func @copying_reshape(%x: tensor<?x12x?x32xf32>) -> (tensor<?x12x?x32xf32>, tensor<?x12x?x32xf32>, tensor<?x12x?x32xf32>) {
  %copy = nn.constant dense<[0, 12, 0, 32]> : tensor<4xi64>
  %minus = nn.constant dense<[0, 12, -1, 32]> : tensor<4xi64>
  // CHECK-NOT: nn.reshape(%arg0, %{{.*}}) {allowzero = 0
  %a = nn.reshape(%x, %copy) {allowzero = 0 : i64} : (tensor<?x12x?x32xf32>, tensor<4xi64>) -> tensor<?x12x?x32xf32>
  // CHECK: %[[B:.*]] = nn.reshape(%arg0, %{{.*}}) {allowzero = 1
  %b = nn.reshape(%a, %copy) {allowzero = 1 : i64} : (tensor<?x12x?x32xf32>, tensor<4xi64>) -> tensor<?x12x?x32xf32>
  // CHECK: %[[C:.*]] = nn.reshape(%arg0, %{{.*}}) :
  %c = nn.reshape(%a, %minus) : (tensor<?x12x?x32xf32>, tensor<4xi64>) -> tensor<?x12x?x32xf32>
  // CHECK: return %arg0, %[[B]], %[[C]]
  return %a, %b, %c : tensor<?x12x?x32xf32>, tensor<?x12x?x32xf32>, tensor<?x12x?x32xf32>
}

// -----

// Tests that a Concat of an empty past (a ConstantOfShape with 0 rows, as strip-kv-io writes
// it) and the new rows is the new rows, while an empty operand of another kind (Phi-3's
// pass-through slice, which fuse-rope reads) and two parts that may hold data stay.
// CHECK-LABEL: func @concat_of_empty_past
// CHECK-NOT: nn.concat
// CHECK: return %arg1
func.func @concat_of_empty_past(%shape: tensor<3xi64> {llmc.name = "shape"}, %new: tensor<?x?x8xf32> {llmc.name = "new"}) -> tensor<?x?x8xf32> {
  %past = nn.constant_of_shape(%shape) {value = dense<0.0> : tensor<1xf32>} : (tensor<3xi64>) -> tensor<?x0x8xf32>
  %y = nn.concat(%past, %new) {axis = -2 : i64} : (tensor<?x0x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

// CHECK-LABEL: func @concat_of_empty_argument
// CHECK: nn.concat
func.func @concat_of_empty_argument(%past: tensor<?x0x8xf32> {llmc.name = "past"}, %new: tensor<?x?x8xf32> {llmc.name = "new"}) -> tensor<?x?x8xf32> {
  %y = nn.concat(%past, %new) {axis = -2 : i64} : (tensor<?x0x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

// CHECK-LABEL: func @concat_of_two
// CHECK: nn.concat
func.func @concat_of_two(%a: tensor<?x?x8xf32> {llmc.name = "a"}, %b: tensor<?x?x8xf32> {llmc.name = "b"}) -> tensor<?x?x8xf32> {
  %y = nn.concat(%a, %b) {axis = 1 : i64} : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}
