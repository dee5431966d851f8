// RUN: llmc-opt --split-input-file --llmc-fuse-matmul %s | FileCheck %s

// Tests that MatMul + bias + GELU written with Erf (as torch exports it) becomes one
// llm.fused_matmul with a gelu_erf epilogue.
// CHECK-LABEL: func @gelu_erf
// CHECK-SAME: (%[[X:.+]]: tensor<2x4xf32>)
func.func @gelu_erf(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
  %w = nn.constant dense<0.5> : tensor<4x3xf32>
  %b = nn.constant dense<[0.1, 0.2, 0.3]> : tensor<3xf32>
  %sqrt2 = nn.constant dense<1.41421354> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  // CHECK: %[[Y:.+]] = llm.fused_matmul(%[[X]], %{{.+}}, %{{.+}}) {activation = "gelu_erf", trans_b = 0 : i64}
  // CHECK-NOT: nn.erf
  %p = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %h = nn.add(%b, %p) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %d = nn.div(%h, %sqrt2) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %e = nn.erf(%d) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %a = nn.add(%e, %one) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %m = nn.mul(%h, %a) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %y = nn.mul(%m, %half) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x3xf32>
}

// -----

// Tests that Gemm's transB, alpha/beta and C fold into the fused op, with a Relu epilogue.
// CHECK-LABEL: func @gemm_relu
func.func @gemm_relu(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
  %w = nn.constant dense<0.5> : tensor<3x4xf32>
  %c = nn.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  // CHECK: nn.constant dense<[2.000000e+00, 4.000000e+00, 6.000000e+00]> : tensor<3xf32>
  // CHECK: llm.fused_matmul({{.+}}) {activation = "relu", alpha = 5.000000e-01 : f32, trans_b = 1 : i64}
  %p = nn.gemm(%x, %w, %c) {alpha = 0.5 : f32, beta = 2.0 : f32, transB = 1 : i64} : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %y = nn.relu(%p) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Tests that x * sigmoid(x) is recognized as SiLU, and GELU's tanh form as gelu_tanh.
// CHECK-LABEL: func @silu_gelu_tanh
func.func @silu_gelu_tanh(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %w = nn.constant dense<0.25> : tensor<4x4xf32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %three = nn.constant dense<3.0> : tensor<f32>
  %k = nn.constant dense<0.044715> : tensor<f32>
  %s = nn.constant dense<0.797884583> : tensor<f32>
  // CHECK: llm.fused_matmul({{.+}}) {activation = "silu", trans_b = 0 : i64}
  %p = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %sg = nn.sigmoid(%p) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %y = nn.mul(%p, %sg) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  // CHECK: llm.fused_matmul({{.+}}) {activation = "gelu_tanh", trans_b = 0 : i64}
  %q = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %c = nn.pow(%q, %three) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %kc = nn.mul(%c, %k) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %in = nn.add(%q, %kc) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %sc = nn.mul(%in, %s) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %t = nn.tanh(%sc) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %t1 = nn.add(%t, %one) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %hq = nn.mul(%q, %half) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  %z = nn.mul(%hq, %t1) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %y, %z : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Tests that a weight that is not a constant does not fuse.
// CHECK-LABEL: func @weight_not_constant
func.func @weight_not_constant(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>) -> tensor<2x3xf32> {
  // CHECK-NOT: llm.fused_matmul
  // CHECK: nn.matmul
  %p = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %y = nn.relu(%p) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Tests that a product with another consumer keeps its bias add and activation apart, and
// that elementwise ops computing no known activation stay.
// CHECK-LABEL: func @extra_consumer
func.func @extra_consumer(%x: tensor<2x4xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %w = nn.constant dense<0.5> : tensor<4x3xf32>
  %b = nn.constant dense<[0.1, 0.2, 0.3]> : tensor<3xf32>
  %c = nn.constant dense<3.0> : tensor<f32>
  // CHECK: %[[P:.+]] = llm.fused_matmul({{.+}}) {activation = "none", trans_b = 0 : i64}
  // CHECK: nn.add(%[[P]]
  // CHECK: nn.relu(%[[P]]
  %p = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %h = nn.add(%p, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %r = nn.relu(%p) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[Q:.+]] = llm.fused_matmul({{.+}}) {activation = "none", trans_b = 0 : i64}
  // CHECK: nn.mul(%[[Q]]
  %q = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %s = nn.mul(%q, %c) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  return %h, %r, %s : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// Tests that a packed product the model slices itself (Phi-3's gate_up_proj) becomes one product
// per slice with the weight's columns sliced at compile time, and the gate part fuses its SiLU:
// columns 0-1 of W are 1 and 2, columns 2-3 are 3 and 4.
// CHECK-LABEL: func @split_sliced_product
func.func @split_sliced_product(%x: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) {
  %w = nn.constant dense<[[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]]> : tensor<2x4xf32>
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %two = nn.constant dense<[2]> : tensor<1xi64>
  %four = nn.constant dense<[4]> : tensor<1xi64>
  %last = nn.constant dense<[-1]> : tensor<1xi64>
  // CHECK-DAG: %[[WG:.+]] = nn.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00], [1.000000e+00, 2.000000e+00]]>
  // CHECK-DAG: %[[WU:.+]] = nn.constant dense<{{\[\[}}3.000000e+00, 4.000000e+00], [3.000000e+00, 4.000000e+00]]>
  // CHECK-NOT: nn.slice
  // CHECK-DAG: llm.fused_matmul(%{{.+}}, %[[WG]], %{{.+}}) {activation = "silu", trans_b = 0 : i64}
  // CHECK-DAG: llm.fused_matmul(%{{.+}}, %[[WU]], %{{.+}}) {activation = "none", trans_b = 0 : i64}
  %p = nn.matmul(%x, %w) : (tensor<2x2xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %gate = nn.slice(%p, %zero, %two, %last) : (tensor<2x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x2xf32>
  %up = nn.slice(%p, %two, %four, %last) : (tensor<2x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x2xf32>
  %sg = nn.sigmoid(%gate) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %act = nn.mul(%gate, %sg) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %act, %up : tensor<2x2xf32>, tensor<2x2xf32>
}

// -----

// Tests the per-group form (GPT-NeoX's query_key_value): product + bias reshaped to [.., 2, 2]
// and sliced along the last axis, so that part [0, 1) is columns 0 and 2 (weights 1 and 3,
// bias 10 and 30) and part [1, 2) columns 1 and 3.
// CHECK-LABEL: func @split_grouped_product
func.func @split_grouped_product(%x: tensor<3x2xf32>) -> (tensor<3x2x1xf32>, tensor<3x2x1xf32>) {
  %w = nn.constant dense<[[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]]> : tensor<2x4xf32>
  %b = nn.constant dense<[10.0, 20.0, 30.0, 40.0]> : tensor<4xf32>
  %shape = nn.constant dense<[0, 2, 2]> : tensor<3xi64>
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %one = nn.constant dense<[1]> : tensor<1xi64>
  %two = nn.constant dense<[2]> : tensor<1xi64>
  %last = nn.constant dense<[-1]> : tensor<1xi64>
  // CHECK-DAG: nn.constant dense<{{\[\[}}1.000000e+00, 3.000000e+00], [1.000000e+00, 3.000000e+00]]>
  // CHECK-DAG: nn.constant dense<[1.000000e+01, 3.000000e+01]>
  // CHECK-DAG: nn.constant dense<{{\[\[}}2.000000e+00, 4.000000e+00], [2.000000e+00, 4.000000e+00]]>
  // CHECK-DAG: nn.constant dense<[2.000000e+01, 4.000000e+01]>
  // CHECK-NOT: nn.slice
  %p = nn.matmul(%x, %w) : (tensor<3x2xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
  %h = nn.add(%p, %b) : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %g = nn.reshape(%h, %shape) : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<3x2x2xf32>
  %q = nn.slice(%g, %zero, %one, %last) : (tensor<3x2x2xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3x2x1xf32>
  %k = nn.slice(%g, %one, %two, %last) : (tensor<3x2x2xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3x2x1xf32>
  return %q, %k : tensor<3x2x1xf32>, tensor<3x2x1xf32>
}

// -----

// Tests a near miss: a packed product that something other than a Slice also reads stays whole.
// CHECK-LABEL: func @sliced_product_with_other_user
func.func @sliced_product_with_other_user(%x: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x4xf32>) {
  %w = nn.constant dense<1.0> : tensor<2x4xf32>
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %two = nn.constant dense<[2]> : tensor<1xi64>
  %last = nn.constant dense<[-1]> : tensor<1xi64>
  // CHECK: llm.fused_matmul({{.+}}) {{.*}} -> tensor<2x4xf32>
  // CHECK: nn.slice
  %p = nn.matmul(%x, %w) : (tensor<2x2xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %part = nn.slice(%p, %zero, %two, %last) : (tensor<2x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x2xf32>
  %r = nn.relu(%p) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %part, %r : tensor<2x2xf32>, tensor<2x4xf32>
}

// -----

// Tests the groups-axis form (Falcon's multi-query query_key_value): [.., 4 groups, 2] split into
// groups 0-1 by a Slice and group 3 by a one-element Gather, each its contiguous columns
// (0-3 and 6-7) reshaped back to groups.
// CHECK-LABEL: func @split_whole_groups
func.func @split_whole_groups(%x: tensor<3x2xf32>) -> (tensor<3x2x2xf32>, tensor<3x1x2xf32>) {
  %w = nn.constant dense<[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]]> : tensor<2x8xf32>
  %shape = nn.constant dense<[0, 4, 2]> : tensor<3xi64>
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %two = nn.constant dense<[2]> : tensor<1xi64>
  %axis = nn.constant dense<[1]> : tensor<1xi64>
  %last = nn.constant dense<[-1]> : tensor<1xi64>
  // CHECK-DAG: nn.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00], [1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]]>
  // CHECK-DAG: nn.constant dense<{{\[\[}}7.000000e+00, 8.000000e+00], [7.000000e+00, 8.000000e+00]]>
  // CHECK-NOT: nn.slice
  // CHECK-NOT: nn.gather
  %p = nn.matmul(%x, %w) : (tensor<3x2xf32>, tensor<2x8xf32>) -> tensor<3x8xf32>
  %g = nn.reshape(%p, %shape) : (tensor<3x8xf32>, tensor<3xi64>) -> tensor<3x4x2xf32>
  %q = nn.slice(%g, %zero, %two, %axis) : (tensor<3x4x2xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3x2x2xf32>
  %v = nn.gather(%g, %last) {axis = 1 : i64} : (tensor<3x4x2xf32>, tensor<1xi64>) -> tensor<3x1x2xf32>
  return %q, %v : tensor<3x2x2xf32>, tensor<3x1x2xf32>
}

// -----

// Tests a near miss: parts joined again by a Concat (GPT-J's partial rotary splits each head
// and concatenates the parts) leave the product whole.
// CHECK-LABEL: func @sliced_parts_rejoin
func.func @sliced_parts_rejoin(%x: tensor<2x2xf32>) -> tensor<2x4xf32> {
  %w = nn.constant dense<1.0> : tensor<2x4xf32>
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %two = nn.constant dense<[2]> : tensor<1xi64>
  %four = nn.constant dense<[4]> : tensor<1xi64>
  %last = nn.constant dense<[-1]> : tensor<1xi64>
  // CHECK: llm.fused_matmul({{.+}}) {{.*}} -> tensor<2x4xf32>
  // CHECK-COUNT-2: nn.slice
  %p = nn.matmul(%x, %w) : (tensor<2x2xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %a = nn.slice(%p, %zero, %two, %last) : (tensor<2x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x2xf32>
  %b = nn.slice(%p, %two, %four, %last) : (tensor<2x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x2xf32>
  %n = nn.neg(%a) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = nn.concat(%n, %b) {axis = -1 : i64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// Tests that a constant factor after the product and its bias (OPT's q_proj(x) * scaling)
// scales the weight and the bias at compile time, leaving one fused op.
// CHECK-LABEL: func @scaled_product
func.func @scaled_product(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
  %w = nn.constant dense<0.5> : tensor<4x3xf32>
  %b = nn.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %s = nn.constant dense<0.25> : tensor<f32>
  // CHECK-DAG: nn.constant dense<1.250000e-01> : tensor<4x3xf32>
  // CHECK-DAG: nn.constant dense<[2.500000e-01, 5.000000e-01, 7.500000e-01]> : tensor<3xf32>
  // CHECK: %[[Y:.+]] = llm.fused_matmul({{.+}}) {activation = "none", trans_b = 0 : i64}
  // CHECK-NOT: nn.mul
  %p = nn.matmul(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %h = nn.add(%p, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %y = nn.mul(%h, %s) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x3xf32>
}
