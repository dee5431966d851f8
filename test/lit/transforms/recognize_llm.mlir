// RUN: llmc-opt --split-input-file --llmc-shape-inference --llmc-recognize-llm %s | FileCheck %s

// Tests a causal grouped-query decoder layer: the attention core becomes llm.attention on the
// un-repeated K/V, Range(0, seq) becomes llm.positions, the unused attention_mask input goes.
// CHECK-LABEL: func @causal_gqa
// CHECK-SAME: (%[[IDS:.+]]: tensor<?x?xi64> {llmc.dims = ["batch", "seq"], llmc.name = "input_ids"})
// CHECK-SAME: llm.config = {head_dim = 4 : i64, max_positions = 32 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, num_layers = 1 : i64
// CHECK: %[[POS:.+]] = llm.positions(%[[IDS]])
// CHECK: nn.gather(%{{.+}}, %[[POS]])
// CHECK-NOT: nn.softmax
// CHECK-NOT: nn.expand
// CHECK: llm.attention(%{{.+}}, %{{.+}}, %{{.+}}) {{.*}}layer = 0 : i64{{.*}}scale = 5.000000e-01 : f32
// CHECK-SAME: (tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32>, tensor<?x1x?x4xf32>) -> tensor<?x2x?x4xf32>
// CHECK-NOT: nn.range
// CHECK-NOT: nn.trilu
// CHECK: %[[LAST:.+]] = llm.last_tokens(%{{.+}}) {{.*}}: (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
// CHECK: nn.matmul(%[[LAST]], %{{.+}})
func.func @causal_gqa(%ids: tensor<?x?xi64> {llmc.name = "input_ids", llmc.dims = ["batch", "seq"]}, %mask_in: tensor<?x?xi64> {llmc.name = "attention_mask", llmc.dims = ["batch", "seq"]}) -> tensor<?x?x8xf32> attributes {llmc.symbols = ["batch", "seq"], llmc.output_names = ["logits"]} {
  %E = nn.constant dense<0.5> : tensor<16x8xf32>
  %P = nn.constant dense<0.25> : tensor<32x8xf32>
  %Wq = nn.constant dense<0.1> : tensor<8x8xf32>
  %Wk = nn.constant dense<0.2> : tensor<8x4xf32>
  %Wv = nn.constant dense<0.3> : tensor<8x4xf32>
  %Wo = nn.constant dense<0.4> : tensor<8x8xf32>
  %q_shape = nn.constant dense<[0, 0, 2, 4]> : tensor<4xi64>
  %kv_shape = nn.constant dense<[0, 0, 1, 4]> : tensor<4xi64>
  %axis2 = nn.constant dense<[2]> : tensor<1xi64>
  %rep = nn.constant dense<[1, 1, 2, 1, 1]> : tensor<5xi64>
  %heads_shape = nn.constant dense<[0, 2, -1, 4]> : tensor<4xi64>
  %out_shape = nn.constant dense<[0, 0, 8]> : tensor<3xi64>
  %half = nn.constant dense<0.5> : tensor<f32>
  %zero = nn.constant dense<0> : tensor<i64>
  %one = nn.constant dense<1> : tensor<i64>
  %axis0 = nn.constant dense<[0]> : tensor<1xi64>
  // Positions: Range(0, seq) -> learned position embeddings.
  %shape = nn.shape(%ids) : (tensor<?x?xi64>) -> tensor<2xi64>
  %seq = nn.gather(%shape, %one) {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %pos = nn.range(%zero, %seq, %one) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %tok = nn.gather(%E, %ids) : (tensor<16x8xf32>, tensor<?x?xi64>) -> tensor<?x?x8xf32>
  %pe = nn.gather(%P, %pos) : (tensor<32x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %x = nn.add(%tok, %pe) : (tensor<?x?x8xf32>, tensor<?x8xf32>) -> tensor<?x?x8xf32>
  // Q [b, 2, s, 4]; K and V [b, 1, s, 4] repeated to 2 heads as transformers' repeat_kv.
  %q0 = nn.matmul(%x, %Wq) : (tensor<?x?x8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  %q1 = nn.reshape(%q0, %q_shape) : (tensor<?x?x8xf32>, tensor<4xi64>) -> tensor<?x?x2x4xf32>
  %q = nn.transpose(%q1) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x2x4xf32>) -> tensor<?x2x?x4xf32>
  %k0 = nn.matmul(%x, %Wk) : (tensor<?x?x8xf32>, tensor<8x4xf32>) -> tensor<?x?x4xf32>
  %k1 = nn.reshape(%k0, %kv_shape) : (tensor<?x?x4xf32>, tensor<4xi64>) -> tensor<?x?x1x4xf32>
  %k = nn.transpose(%k1) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x1x4xf32>) -> tensor<?x1x?x4xf32>
  %ku = nn.unsqueeze(%k, %axis2) : (tensor<?x1x?x4xf32>, tensor<1xi64>) -> tensor<?x1x1x?x4xf32>
  %ke = nn.expand(%ku, %rep) : (tensor<?x1x1x?x4xf32>, tensor<5xi64>) -> tensor<?x1x2x?x4xf32>
  %kr = nn.reshape(%ke, %heads_shape) : (tensor<?x1x2x?x4xf32>, tensor<4xi64>) -> tensor<?x2x?x4xf32>
  %v0 = nn.matmul(%x, %Wv) : (tensor<?x?x8xf32>, tensor<8x4xf32>) -> tensor<?x?x4xf32>
  %v1 = nn.reshape(%v0, %kv_shape) : (tensor<?x?x4xf32>, tensor<4xi64>) -> tensor<?x?x1x4xf32>
  %v = nn.transpose(%v1) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x1x4xf32>) -> tensor<?x1x?x4xf32>
  %vu = nn.unsqueeze(%v, %axis2) : (tensor<?x1x?x4xf32>, tensor<1xi64>) -> tensor<?x1x1x?x4xf32>
  %ve = nn.expand(%vu, %rep) : (tensor<?x1x1x?x4xf32>, tensor<5xi64>) -> tensor<?x1x2x?x4xf32>
  %vr = nn.reshape(%ve, %heads_shape) : (tensor<?x1x2x?x4xf32>, tensor<4xi64>) -> tensor<?x2x?x4xf32>
  // The mask: -inf above (or below) the diagonal, built from the sequence length.
  %n = nn.unsqueeze(%seq, %axis0) : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %nn = nn.concat(%n, %n) {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %full = nn.constant_of_shape(%nn) {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x?xf32>
  %mask = nn.trilu(%full, %one) {upper = 1 : i64} : (tensor<?x?xf32>, tensor<i64>) -> tensor<?x?xf32>
  %kt = nn.transpose(%kr) {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x2x?x4xf32>) -> tensor<?x2x4x?xf32>
  %s0 = nn.matmul(%q, %kt) : (tensor<?x2x?x4xf32>, tensor<?x2x4x?xf32>) -> tensor<?x2x?x?xf32>
  %s1 = nn.mul(%s0, %half) : (tensor<?x2x?x?xf32>, tensor<f32>) -> tensor<?x2x?x?xf32>
  %s2 = nn.add(%s1, %mask) : (tensor<?x2x?x?xf32>, tensor<?x?xf32>) -> tensor<?x2x?x?xf32>
  %p = nn.softmax(%s2) {axis = -1 : i64} : (tensor<?x2x?x?xf32>) -> tensor<?x2x?x?xf32>
  %o0 = nn.matmul(%p, %vr) : (tensor<?x2x?x?xf32>, tensor<?x2x?x4xf32>) -> tensor<?x2x?x4xf32>
  %o1 = nn.transpose(%o0) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x2x?x4xf32>) -> tensor<?x?x2x4xf32>
  %o2 = nn.reshape(%o1, %out_shape) : (tensor<?x?x2x4xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %logits = nn.matmul(%o2, %Wo) : (tensor<?x?x8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %logits : tensor<?x?x8xf32>
}

// -----

// Tests that a mask that is not causal (here: the lower triangle masked) is refused, naming
// the failure, and leaves the function as it was.
// CHECK-LABEL: func @anti_causal
// CHECK-SAME: llmc.recognition_failures = ["attention at an unnamed nn.softmax node: query 0 cannot see key 0 at length 2048: the mask is neither causal nor a sliding window"]
// CHECK: nn.range
// CHECK: nn.softmax
// CHECK-NOT: llm.attention
func.func @anti_causal(%ids: tensor<?x?xi64> {llmc.name = "input_ids", llmc.dims = ["batch", "seq"]}, %mask_in: tensor<?x?xi64> {llmc.name = "attention_mask", llmc.dims = ["batch", "seq"]}) -> tensor<?x?x8xf32> attributes {llmc.symbols = ["batch", "seq"], llmc.output_names = ["logits"]} {
  %E = nn.constant dense<0.5> : tensor<16x8xf32>
  %P = nn.constant dense<0.25> : tensor<32x8xf32>
  %Wq = nn.constant dense<0.1> : tensor<8x8xf32>
  %Wk = nn.constant dense<0.2> : tensor<8x4xf32>
  %Wv = nn.constant dense<0.3> : tensor<8x4xf32>
  %Wo = nn.constant dense<0.4> : tensor<8x8xf32>
  %q_shape = nn.constant dense<[0, 0, 2, 4]> : tensor<4xi64>
  %kv_shape = nn.constant dense<[0, 0, 1, 4]> : tensor<4xi64>
  %axis2 = nn.constant dense<[2]> : tensor<1xi64>
  %rep = nn.constant dense<[1, 1, 2, 1, 1]> : tensor<5xi64>
  %heads_shape = nn.constant dense<[0, 2, -1, 4]> : tensor<4xi64>
  %out_shape = nn.constant dense<[0, 0, 8]> : tensor<3xi64>
  %half = nn.constant dense<0.5> : tensor<f32>
  %zero = nn.constant dense<0> : tensor<i64>
  %one = nn.constant dense<1> : tensor<i64>
  %axis0 = nn.constant dense<[0]> : tensor<1xi64>
  // Positions: Range(0, seq) -> learned position embeddings.
  %shape = nn.shape(%ids) : (tensor<?x?xi64>) -> tensor<2xi64>
  %seq = nn.gather(%shape, %one) {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %pos = nn.range(%zero, %seq, %one) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %tok = nn.gather(%E, %ids) : (tensor<16x8xf32>, tensor<?x?xi64>) -> tensor<?x?x8xf32>
  %pe = nn.gather(%P, %pos) : (tensor<32x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %x = nn.add(%tok, %pe) : (tensor<?x?x8xf32>, tensor<?x8xf32>) -> tensor<?x?x8xf32>
  // Q [b, 2, s, 4]; K and V [b, 1, s, 4] repeated to 2 heads as transformers' repeat_kv.
  %q0 = nn.matmul(%x, %Wq) : (tensor<?x?x8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  %q1 = nn.reshape(%q0, %q_shape) : (tensor<?x?x8xf32>, tensor<4xi64>) -> tensor<?x?x2x4xf32>
  %q = nn.transpose(%q1) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x2x4xf32>) -> tensor<?x2x?x4xf32>
  %k0 = nn.matmul(%x, %Wk) : (tensor<?x?x8xf32>, tensor<8x4xf32>) -> tensor<?x?x4xf32>
  %k1 = nn.reshape(%k0, %kv_shape) : (tensor<?x?x4xf32>, tensor<4xi64>) -> tensor<?x?x1x4xf32>
  %k = nn.transpose(%k1) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x1x4xf32>) -> tensor<?x1x?x4xf32>
  %ku = nn.unsqueeze(%k, %axis2) : (tensor<?x1x?x4xf32>, tensor<1xi64>) -> tensor<?x1x1x?x4xf32>
  %ke = nn.expand(%ku, %rep) : (tensor<?x1x1x?x4xf32>, tensor<5xi64>) -> tensor<?x1x2x?x4xf32>
  %kr = nn.reshape(%ke, %heads_shape) : (tensor<?x1x2x?x4xf32>, tensor<4xi64>) -> tensor<?x2x?x4xf32>
  %v0 = nn.matmul(%x, %Wv) : (tensor<?x?x8xf32>, tensor<8x4xf32>) -> tensor<?x?x4xf32>
  %v1 = nn.reshape(%v0, %kv_shape) : (tensor<?x?x4xf32>, tensor<4xi64>) -> tensor<?x?x1x4xf32>
  %v = nn.transpose(%v1) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x1x4xf32>) -> tensor<?x1x?x4xf32>
  %vu = nn.unsqueeze(%v, %axis2) : (tensor<?x1x?x4xf32>, tensor<1xi64>) -> tensor<?x1x1x?x4xf32>
  %ve = nn.expand(%vu, %rep) : (tensor<?x1x1x?x4xf32>, tensor<5xi64>) -> tensor<?x1x2x?x4xf32>
  %vr = nn.reshape(%ve, %heads_shape) : (tensor<?x1x2x?x4xf32>, tensor<4xi64>) -> tensor<?x2x?x4xf32>
  // The mask: -inf above (or below) the diagonal, built from the sequence length.
  %n = nn.unsqueeze(%seq, %axis0) : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %nn = nn.concat(%n, %n) {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %full = nn.constant_of_shape(%nn) {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x?xf32>
  %mask = nn.trilu(%full, %one) {upper = 0 : i64} : (tensor<?x?xf32>, tensor<i64>) -> tensor<?x?xf32>
  %kt = nn.transpose(%kr) {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x2x?x4xf32>) -> tensor<?x2x4x?xf32>
  %s0 = nn.matmul(%q, %kt) : (tensor<?x2x?x4xf32>, tensor<?x2x4x?xf32>) -> tensor<?x2x?x?xf32>
  %s1 = nn.mul(%s0, %half) : (tensor<?x2x?x?xf32>, tensor<f32>) -> tensor<?x2x?x?xf32>
  %s2 = nn.add(%s1, %mask) : (tensor<?x2x?x?xf32>, tensor<?x?xf32>) -> tensor<?x2x?x?xf32>
  %p = nn.softmax(%s2) {axis = -1 : i64} : (tensor<?x2x?x?xf32>) -> tensor<?x2x?x?xf32>
  %o0 = nn.matmul(%p, %vr) : (tensor<?x2x?x?xf32>, tensor<?x2x?x4xf32>) -> tensor<?x2x?x4xf32>
  %o1 = nn.transpose(%o0) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x2x?x4xf32>) -> tensor<?x?x2x4xf32>
  %o2 = nn.reshape(%o1, %out_shape) : (tensor<?x?x2x4xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %logits = nn.matmul(%o2, %Wo) : (tensor<?x?x8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %logits : tensor<?x?x8xf32>
}

// -----

// Tests that a causal model whose later layers mix tokens outside attention (a mean over the
// sequence) is refused by the tokenwise proof, and left as it was.
// CHECK-LABEL: func @pooled
// CHECK-SAME: llmc.recognition_failures = ["an unnamed nn.reduce_mean node (nn.reduce_mean) combines or selects tokens along the sequence"]
// CHECK: nn.softmax
// CHECK-NOT: llm.attention
func.func @pooled(%ids: tensor<?x?xi64> {llmc.name = "input_ids", llmc.dims = ["batch", "seq"]}, %mask_in: tensor<?x?xi64> {llmc.name = "attention_mask", llmc.dims = ["batch", "seq"]}) -> tensor<?x?x8xf32> attributes {llmc.symbols = ["batch", "seq"], llmc.output_names = ["logits"]} {
  %E = nn.constant dense<0.5> : tensor<16x8xf32>
  %P = nn.constant dense<0.25> : tensor<32x8xf32>
  %Wq = nn.constant dense<0.1> : tensor<8x8xf32>
  %Wk = nn.constant dense<0.2> : tensor<8x4xf32>
  %Wv = nn.constant dense<0.3> : tensor<8x4xf32>
  %Wo = nn.constant dense<0.4> : tensor<8x8xf32>
  %q_shape = nn.constant dense<[0, 0, 2, 4]> : tensor<4xi64>
  %kv_shape = nn.constant dense<[0, 0, 1, 4]> : tensor<4xi64>
  %axis2 = nn.constant dense<[2]> : tensor<1xi64>
  %rep = nn.constant dense<[1, 1, 2, 1, 1]> : tensor<5xi64>
  %heads_shape = nn.constant dense<[0, 2, -1, 4]> : tensor<4xi64>
  %out_shape = nn.constant dense<[0, 0, 8]> : tensor<3xi64>
  %half = nn.constant dense<0.5> : tensor<f32>
  %zero = nn.constant dense<0> : tensor<i64>
  %one = nn.constant dense<1> : tensor<i64>
  %axis0 = nn.constant dense<[0]> : tensor<1xi64>
  // Positions: Range(0, seq) -> learned position embeddings.
  %shape = nn.shape(%ids) : (tensor<?x?xi64>) -> tensor<2xi64>
  %seq = nn.gather(%shape, %one) {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %pos = nn.range(%zero, %seq, %one) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %tok = nn.gather(%E, %ids) : (tensor<16x8xf32>, tensor<?x?xi64>) -> tensor<?x?x8xf32>
  %pe = nn.gather(%P, %pos) : (tensor<32x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %x = nn.add(%tok, %pe) : (tensor<?x?x8xf32>, tensor<?x8xf32>) -> tensor<?x?x8xf32>
  // Q [b, 2, s, 4]; K and V [b, 1, s, 4] repeated to 2 heads as transformers' repeat_kv.
  %q0 = nn.matmul(%x, %Wq) : (tensor<?x?x8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  %q1 = nn.reshape(%q0, %q_shape) : (tensor<?x?x8xf32>, tensor<4xi64>) -> tensor<?x?x2x4xf32>
  %q = nn.transpose(%q1) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x2x4xf32>) -> tensor<?x2x?x4xf32>
  %k0 = nn.matmul(%x, %Wk) : (tensor<?x?x8xf32>, tensor<8x4xf32>) -> tensor<?x?x4xf32>
  %k1 = nn.reshape(%k0, %kv_shape) : (tensor<?x?x4xf32>, tensor<4xi64>) -> tensor<?x?x1x4xf32>
  %k = nn.transpose(%k1) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x1x4xf32>) -> tensor<?x1x?x4xf32>
  %ku = nn.unsqueeze(%k, %axis2) : (tensor<?x1x?x4xf32>, tensor<1xi64>) -> tensor<?x1x1x?x4xf32>
  %ke = nn.expand(%ku, %rep) : (tensor<?x1x1x?x4xf32>, tensor<5xi64>) -> tensor<?x1x2x?x4xf32>
  %kr = nn.reshape(%ke, %heads_shape) : (tensor<?x1x2x?x4xf32>, tensor<4xi64>) -> tensor<?x2x?x4xf32>
  %v0 = nn.matmul(%x, %Wv) : (tensor<?x?x8xf32>, tensor<8x4xf32>) -> tensor<?x?x4xf32>
  %v1 = nn.reshape(%v0, %kv_shape) : (tensor<?x?x4xf32>, tensor<4xi64>) -> tensor<?x?x1x4xf32>
  %v = nn.transpose(%v1) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x1x4xf32>) -> tensor<?x1x?x4xf32>
  %vu = nn.unsqueeze(%v, %axis2) : (tensor<?x1x?x4xf32>, tensor<1xi64>) -> tensor<?x1x1x?x4xf32>
  %ve = nn.expand(%vu, %rep) : (tensor<?x1x1x?x4xf32>, tensor<5xi64>) -> tensor<?x1x2x?x4xf32>
  %vr = nn.reshape(%ve, %heads_shape) : (tensor<?x1x2x?x4xf32>, tensor<4xi64>) -> tensor<?x2x?x4xf32>
  // The mask: -inf above (or below) the diagonal, built from the sequence length.
  %n = nn.unsqueeze(%seq, %axis0) : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %nn = nn.concat(%n, %n) {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %full = nn.constant_of_shape(%nn) {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x?xf32>
  %mask = nn.trilu(%full, %one) {upper = 1 : i64} : (tensor<?x?xf32>, tensor<i64>) -> tensor<?x?xf32>
  %kt = nn.transpose(%kr) {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x2x?x4xf32>) -> tensor<?x2x4x?xf32>
  %s0 = nn.matmul(%q, %kt) : (tensor<?x2x?x4xf32>, tensor<?x2x4x?xf32>) -> tensor<?x2x?x?xf32>
  %s1 = nn.mul(%s0, %half) : (tensor<?x2x?x?xf32>, tensor<f32>) -> tensor<?x2x?x?xf32>
  %s2 = nn.add(%s1, %mask) : (tensor<?x2x?x?xf32>, tensor<?x?xf32>) -> tensor<?x2x?x?xf32>
  %p = nn.softmax(%s2) {axis = -1 : i64} : (tensor<?x2x?x?xf32>) -> tensor<?x2x?x?xf32>
  %o0 = nn.matmul(%p, %vr) : (tensor<?x2x?x?xf32>, tensor<?x2x?x4xf32>) -> tensor<?x2x?x4xf32>
  %o1 = nn.transpose(%o0) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x2x?x4xf32>) -> tensor<?x?x2x4xf32>
  %o2 = nn.reshape(%o1, %out_shape) : (tensor<?x?x2x4xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %axis1 = nn.constant dense<[1]> : tensor<1xi64>
  %mean = nn.reduce_mean(%o2, %axis1) {keepdims = 1 : i64} : (tensor<?x?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %pooled = nn.add(%o2, %mean) : (tensor<?x?x8xf32>, tensor<?x1x8xf32>) -> tensor<?x?x8xf32>
  %logits = nn.matmul(%pooled, %Wo) : (tensor<?x?x8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %logits : tensor<?x?x8xf32>
}

