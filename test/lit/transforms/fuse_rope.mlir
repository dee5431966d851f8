// RUN: llmc-opt --split-input-file --llmc-fuse-rope %s | FileCheck %s

// Tests that x * cos + concat(-x[..., 8:], x[..., :8]) * sin becomes llm.rope with the
// per-token tables.
// CHECK-LABEL: func @rope
// CHECK-SAME: (%[[X:.+]]: tensor<1x4x5x16xf32>, %[[COS:.+]]: tensor<1x1x5x16xf32>, %[[SIN:.+]]: tensor<1x1x5x16xf32>)
func.func @rope(%x: tensor<1x4x5x16xf32>, %cos: tensor<1x1x5x16xf32>, %sin: tensor<1x1x5x16xf32>) -> tensor<1x4x5x16xf32> {
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %half = nn.constant dense<[8]> : tensor<1xi64>
  %end = nn.constant dense<[9223372036854775807]> : tensor<1xi64>
  %axis = nn.constant dense<[3]> : tensor<1xi64>
  %one = nn.constant dense<[1]> : tensor<1xi64>
  // CHECK: %[[R:.+]] = llm.rope(%[[X]], %{{.+}}, %[[COS]], %[[SIN]])
  // CHECK-NOT: nn.concat
  %a = nn.mul(%x, %cos) : (tensor<1x4x5x16xf32>, tensor<1x1x5x16xf32>) -> tensor<1x4x5x16xf32>
  %x1 = nn.slice(%x, %zero, %half, %axis, %one) : (tensor<1x4x5x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x8xf32>
  %x2 = nn.slice(%x, %half, %end, %axis, %one) : (tensor<1x4x5x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x8xf32>
  %n = nn.neg(%x2) : (tensor<1x4x5x8xf32>) -> tensor<1x4x5x8xf32>
  %rot = nn.concat(%n, %x1) {axis = -1 : i64} : (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>) -> tensor<1x4x5x16xf32>
  %b = nn.mul(%rot, %sin) : (tensor<1x4x5x16xf32>, tensor<1x1x5x16xf32>) -> tensor<1x4x5x16xf32>
  %y = nn.add(%a, %b) : (tensor<1x4x5x16xf32>, tensor<1x4x5x16xf32>) -> tensor<1x4x5x16xf32>
  // CHECK: return %[[R]]
  return %y : tensor<1x4x5x16xf32>
}

// -----

// Tests that halves split at the wrong place (not D/2) or a concat on another axis do not fuse.
// CHECK-LABEL: func @not_rope
func.func @not_rope(%x: tensor<1x4x5x16xf32>, %cos: tensor<1x1x5x16xf32>, %sin: tensor<1x1x5x16xf32>) -> tensor<1x4x5x16xf32> {
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %cut = nn.constant dense<[4]> : tensor<1xi64>
  %end = nn.constant dense<[16]> : tensor<1xi64>
  %axis = nn.constant dense<[3]> : tensor<1xi64>
  %one = nn.constant dense<[1]> : tensor<1xi64>
  // CHECK-NOT: llm.rope
  %a = nn.mul(%x, %cos) : (tensor<1x4x5x16xf32>, tensor<1x1x5x16xf32>) -> tensor<1x4x5x16xf32>
  %x1 = nn.slice(%x, %zero, %cut, %axis, %one) : (tensor<1x4x5x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x4xf32>
  %x2 = nn.slice(%x, %cut, %end, %axis, %one) : (tensor<1x4x5x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x12xf32>
  %n = nn.neg(%x2) : (tensor<1x4x5x12xf32>) -> tensor<1x4x5x12xf32>
  %rot = nn.concat(%n, %x1) {axis = -1 : i64} : (tensor<1x4x5x12xf32>, tensor<1x4x5x4xf32>) -> tensor<1x4x5x16xf32>
  %b = nn.mul(%rot, %sin) : (tensor<1x4x5x16xf32>, tensor<1x1x5x16xf32>) -> tensor<1x4x5x16xf32>
  %y = nn.add(%a, %b) : (tensor<1x4x5x16xf32>, tensor<1x4x5x16xf32>) -> tensor<1x4x5x16xf32>
  return %y : tensor<1x4x5x16xf32>
}

// -----

// Tests that partial rotary, concat(rope(x[..., :4]), x[..., 4:]) with [.., 4] tables (GPT-NeoX),
// becomes one llm.rope of the whole head with the narrow tables.
// CHECK-LABEL: func @partial_rope
// CHECK-SAME: (%[[X:.+]]: tensor<1x4x5x16xf32>, %[[COS:.+]]: tensor<1x1x5x4xf32>, %[[SIN:.+]]: tensor<1x1x5x4xf32>)
func.func @partial_rope(%x: tensor<1x4x5x16xf32>, %cos: tensor<1x1x5x4xf32>, %sin: tensor<1x1x5x4xf32>) -> tensor<1x4x5x16xf32> {
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %two = nn.constant dense<[2]> : tensor<1xi64>
  %four = nn.constant dense<[4]> : tensor<1xi64>
  %end = nn.constant dense<[9223372036854775807]> : tensor<1xi64>
  %axis = nn.constant dense<[3]> : tensor<1xi64>
  %one = nn.constant dense<[1]> : tensor<1xi64>
  // CHECK: %[[R:.+]] = llm.rope(%[[X]], %{{.+}}, %[[COS]], %[[SIN]]) : (tensor<1x4x5x16xf32>, none, tensor<1x1x5x4xf32>, tensor<1x1x5x4xf32>) -> tensor<1x4x5x16xf32>
  // CHECK-NOT: nn.concat
  %xr = nn.slice(%x, %zero, %four, %axis, %one) : (tensor<1x4x5x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x4xf32>
  %xp = nn.slice(%x, %four, %end, %axis, %one) : (tensor<1x4x5x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x12xf32>
  %a = nn.mul(%xr, %cos) : (tensor<1x4x5x4xf32>, tensor<1x1x5x4xf32>) -> tensor<1x4x5x4xf32>
  %x1 = nn.slice(%xr, %zero, %two, %axis, %one) : (tensor<1x4x5x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x2xf32>
  %x2 = nn.slice(%xr, %two, %end, %axis, %one) : (tensor<1x4x5x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x2xf32>
  %n = nn.neg(%x2) : (tensor<1x4x5x2xf32>) -> tensor<1x4x5x2xf32>
  %rot = nn.concat(%n, %x1) {axis = -1 : i64} : (tensor<1x4x5x2xf32>, tensor<1x4x5x2xf32>) -> tensor<1x4x5x4xf32>
  %b = nn.mul(%rot, %sin) : (tensor<1x4x5x4xf32>, tensor<1x1x5x4xf32>) -> tensor<1x4x5x4xf32>
  %r = nn.add(%a, %b) : (tensor<1x4x5x4xf32>, tensor<1x4x5x4xf32>) -> tensor<1x4x5x4xf32>
  %y = nn.concat(%r, %xp) {axis = -1 : i64} : (tensor<1x4x5x4xf32>, tensor<1x4x5x12xf32>) -> tensor<1x4x5x16xf32>
  // CHECK: return %[[R]]
  return %y : tensor<1x4x5x16xf32>
}

// -----

// Tests that a pass-through part that does not start where the rotated part ends stays apart.
// CHECK-LABEL: func @not_partial_rope
func.func @not_partial_rope(%x: tensor<1x4x5x16xf32>, %cos: tensor<1x1x5x4xf32>, %sin: tensor<1x1x5x4xf32>) -> tensor<1x4x5x16xf32> {
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %two = nn.constant dense<[2]> : tensor<1xi64>
  %four = nn.constant dense<[4]> : tensor<1xi64>
  %end = nn.constant dense<[9223372036854775807]> : tensor<1xi64>
  %axis = nn.constant dense<[3]> : tensor<1xi64>
  %one = nn.constant dense<[1]> : tensor<1xi64>
  %xr = nn.slice(%x, %zero, %four, %axis, %one) : (tensor<1x4x5x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x4xf32>
  %xp = nn.slice(%x, %zero, %end, %axis, %one) : (tensor<1x4x5x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x16xf32>
  %a = nn.mul(%xr, %cos) : (tensor<1x4x5x4xf32>, tensor<1x1x5x4xf32>) -> tensor<1x4x5x4xf32>
  %x1 = nn.slice(%xr, %zero, %two, %axis, %one) : (tensor<1x4x5x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x2xf32>
  %x2 = nn.slice(%xr, %two, %end, %axis, %one) : (tensor<1x4x5x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x2xf32>
  %n = nn.neg(%x2) : (tensor<1x4x5x2xf32>) -> tensor<1x4x5x2xf32>
  %rot = nn.concat(%n, %x1) {axis = -1 : i64} : (tensor<1x4x5x2xf32>, tensor<1x4x5x2xf32>) -> tensor<1x4x5x4xf32>
  %b = nn.mul(%rot, %sin) : (tensor<1x4x5x4xf32>, tensor<1x1x5x4xf32>) -> tensor<1x4x5x4xf32>
  %r = nn.add(%a, %b) : (tensor<1x4x5x4xf32>, tensor<1x4x5x4xf32>) -> tensor<1x4x5x4xf32>
  // CHECK: %[[R:.+]] = llm.rope
  // CHECK: nn.concat(%[[R]]
  %y = nn.concat(%r, %xp) {axis = -1 : i64} : (tensor<1x4x5x4xf32>, tensor<1x4x5x16xf32>) -> tensor<1x4x5x20xf32>
  %t = nn.slice(%y, %zero, %end, %axis, %one) : (tensor<1x4x5x20xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x4x5x16xf32>
  return %t : tensor<1x4x5x16xf32>
}

// -----

// Tests GPT-J's interleaved rotary on the heads before their transpose: x [b, s, h, D] times
// cos plus rotate_every_two(x) (odd values negated and interleaved with the even ones) times
// sin, with [b, s, 1, D] tables, becomes one llm.rope {interleaved = 1, token_axis = 1}.
// CHECK-LABEL: func @interleaved_token_axis
// CHECK-SAME: (%[[X:.+]]: tensor<1x5x2x8xf32>, %[[COS:.+]]: tensor<1x5x1x8xf32>, %[[SIN:.+]]: tensor<1x5x1x8xf32>)
func.func @interleaved_token_axis(%x: tensor<1x5x2x8xf32>, %cos: tensor<1x5x1x8xf32>, %sin: tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32> {
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %one = nn.constant dense<[1]> : tensor<1xi64>
  %end = nn.constant dense<[9223372036854775807]> : tensor<1xi64>
  %axis = nn.constant dense<[3]> : tensor<1xi64>
  %two = nn.constant dense<[2]> : tensor<1xi64>
  %last = nn.constant dense<[-1]> : tensor<1xi64>
  %shape = nn.constant dense<[1, 5, 2, 8]> : tensor<4xi64>
  // CHECK: %[[R:.+]] = llm.rope(%[[X]], %{{.+}}, %[[COS]], %[[SIN]]) {interleaved = 1 : i64, token_axis = 1 : i64}
  // CHECK-NOT: nn.concat
  // CHECK: return %[[R]]
  %odd = nn.slice(%x, %one, %end, %axis, %two) : (tensor<1x5x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x5x2x4xf32>
  %even = nn.slice(%x, %zero, %end, %axis, %two) : (tensor<1x5x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x5x2x4xf32>
  %neg = nn.neg(%odd) : (tensor<1x5x2x4xf32>) -> tensor<1x5x2x4xf32>
  %u0 = nn.unsqueeze(%neg, %last) : (tensor<1x5x2x4xf32>, tensor<1xi64>) -> tensor<1x5x2x4x1xf32>
  %u1 = nn.unsqueeze(%even, %last) : (tensor<1x5x2x4xf32>, tensor<1xi64>) -> tensor<1x5x2x4x1xf32>
  %pairs = nn.concat(%u0, %u1) {axis = -1 : i64} : (tensor<1x5x2x4x1xf32>, tensor<1x5x2x4x1xf32>) -> tensor<1x5x2x4x2xf32>
  %rot = nn.reshape(%pairs, %shape) : (tensor<1x5x2x4x2xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %a = nn.mul(%x, %cos) : (tensor<1x5x2x8xf32>, tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32>
  %c = nn.mul(%rot, %sin) : (tensor<1x5x2x8xf32>, tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32>
  %y = nn.add(%a, %c) : (tensor<1x5x2x8xf32>, tensor<1x5x2x8xf32>) -> tensor<1x5x2x8xf32>
  return %y : tensor<1x5x2x8xf32>
}

// -----

// Tests a near miss: the negated odd values and the even ones concatenated along the heads'
// last axis (not stacked on a new one) are halves, not interleaved pairs: no interleaved rope.
// CHECK-LABEL: func @interleaved_wrong_axis
func.func @interleaved_wrong_axis(%x: tensor<1x5x2x8xf32>, %cos: tensor<1x5x1x8xf32>, %sin: tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32> {
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %one = nn.constant dense<[1]> : tensor<1xi64>
  %end = nn.constant dense<[9223372036854775807]> : tensor<1xi64>
  %axis = nn.constant dense<[3]> : tensor<1xi64>
  %two = nn.constant dense<[2]> : tensor<1xi64>
  %last = nn.constant dense<[-1]> : tensor<1xi64>
  %shape = nn.constant dense<[1, 5, 2, 8]> : tensor<4xi64>
  // CHECK-NOT: llm.rope
  // CHECK: nn.concat
  %odd = nn.slice(%x, %one, %end, %axis, %two) : (tensor<1x5x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x5x2x4xf32>
  %even = nn.slice(%x, %zero, %end, %axis, %two) : (tensor<1x5x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x5x2x4xf32>
  %neg = nn.neg(%odd) : (tensor<1x5x2x4xf32>) -> tensor<1x5x2x4xf32>
  %u0 = nn.unsqueeze(%neg, %last) : (tensor<1x5x2x4xf32>, tensor<1xi64>) -> tensor<1x5x2x4x1xf32>
  %u1 = nn.unsqueeze(%even, %last) : (tensor<1x5x2x4xf32>, tensor<1xi64>) -> tensor<1x5x2x4x1xf32>
  %halves = nn.concat(%u0, %u1) {axis = 3 : i64} : (tensor<1x5x2x4x1xf32>, tensor<1x5x2x4x1xf32>) -> tensor<1x5x2x8x1xf32>
  %rot = nn.reshape(%halves, %shape) : (tensor<1x5x2x8x1xf32>, tensor<4xi64>) -> tensor<1x5x2x8xf32>
  %a = nn.mul(%x, %cos) : (tensor<1x5x2x8xf32>, tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32>
  %c = nn.mul(%rot, %sin) : (tensor<1x5x2x8xf32>, tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32>
  %y = nn.add(%a, %c) : (tensor<1x5x2x8xf32>, tensor<1x5x2x8xf32>) -> tensor<1x5x2x8xf32>
  return %y : tensor<1x5x2x8xf32>
}
