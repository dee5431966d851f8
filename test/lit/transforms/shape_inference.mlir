// RUN: llmc-opt --split-input-file --verify-diagnostics --llmc-shape-inference %s | FileCheck %s

// Tests that dtypes and static shapes come out of broadcasting and matmul.
// CHECK-LABEL: func @static_shapes
// CHECK-SAME: -> tensor<2x5xf32>
func.func @static_shapes(%x: tensor<2x3xf32> {llmc.dims = ["", ""], llmc.name = "x"}) -> tensor<*xf32>
    attributes {llmc.symbols = []} {
  %w = nn.constant dense<1.0> : tensor<3x5xf32>
  // CHECK: nn.matmul({{.*}}) : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  %y = nn.matmul(%x, %w) : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<*xf32>
  // CHECK: nn.less({{.*}}) -> tensor<2x5xi1>
  %z = nn.less(%y, %y) : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  return %y : tensor<*xf32>
}

// -----

// Tests that symbolic dimensions propagate by name.
// CHECK-LABEL: func @symbolic
// CHECK-SAME: -> tensor<?x?x4xf32>
func.func @symbolic(%x: tensor<?x?x4xf32> {llmc.dims = ["batch", "seq", ""], llmc.name = "x"}) -> tensor<*xf32>
    attributes {llmc.symbols = ["batch", "seq"]} {
  // CHECK: nn.softmax
  // CHECK-SAME: llmc.dims = {{\[}}["batch", "seq", ""]]
  // CHECK-SAME: -> tensor<?x?x4xf32>
  %y = nn.softmax(%x) : (tensor<?x?x4xf32>) -> tensor<*xf32>
  return %y : tensor<*xf32>
}

// -----

// Tests that an exporter's Shape/Gather/Concat chain folds where it is static and resolves
// the Reshape to symbolic dims where it is not.
// CHECK-LABEL: func @shape_chain
func.func @shape_chain(%x: tensor<?x?x8xf32> {llmc.dims = ["batch", "seq", ""], llmc.name = "x"}) -> tensor<*xf32>
    attributes {llmc.symbols = ["batch", "seq"]} {
  %shape = nn.shape(%x) : (tensor<?x?x8xf32>) -> tensor<*xi64>
  %i2 = nn.constant dense<2> : tensor<i64>
  // The last dim (8) is static under every binding: it folds to a constant, and so does
  // what is computed from it alone.
  // CHECK: nn.constant dense<8> : tensor<1xi64>
  %d2 = nn.gather(%shape, %i2) {axis = 0 : i64} : (tensor<*xi64>, tensor<i64>) -> tensor<*xi64>
  %axes = nn.constant dense<0> : tensor<1xi64>
  %d2v = nn.unsqueeze(%d2, %axes) : (tensor<*xi64>, tensor<1xi64>) -> tensor<*xi64>
  %lead = nn.constant dense<[0, 1]> : tensor<2xi64>
  %first = nn.gather(%shape, %lead) {axis = 0 : i64} : (tensor<*xi64>, tensor<2xi64>) -> tensor<*xi64>
  %two = nn.constant dense<[2, -1]> : tensor<2xi64>
  // CHECK: nn.concat
  %new_shape = nn.concat(%first, %two) {axis = 0 : i64} : (tensor<*xi64>, tensor<2xi64>) -> tensor<*xi64>
  // The Reshape's target becomes a constant ("copy" for the symbols), leaving the chain dead.
  // CHECK: %[[TARGET:.+]] = nn.constant dense<[0, 0, 2, 4]> : tensor<4xi64>
  // CHECK: nn.reshape(%{{.+}}, %[[TARGET]])
  // CHECK-SAME: llmc.dims = {{\[}}["batch", "seq", "", ""]]
  // CHECK-SAME: -> tensor<?x?x2x4xf32>
  %y = nn.reshape(%x, %new_shape) : (tensor<?x?x8xf32>, tensor<*xi64>) -> tensor<*xf32>
  return %y : tensor<*xf32>
}

// -----

// Tests that an Expand whose target repeats the input's symbols gets a constant target.
// CHECK-LABEL: func @expand_target
func.func @expand_target(%x: tensor<?x1x?xf32> {llmc.dims = ["batch", "", "seq"], llmc.name = "x"}) -> tensor<*xf32>
    attributes {llmc.symbols = ["batch", "seq"]} {
  %shape = nn.shape(%x) : (tensor<?x1x?xf32>) -> tensor<*xi64>
  %i0 = nn.constant dense<[0]> : tensor<1xi64>
  %b = nn.gather(%shape, %i0) {axis = 0 : i64} : (tensor<*xi64>, tensor<1xi64>) -> tensor<*xi64>
  %i2 = nn.constant dense<[2]> : tensor<1xi64>
  %s = nn.gather(%shape, %i2) {axis = 0 : i64} : (tensor<*xi64>, tensor<1xi64>) -> tensor<*xi64>
  %four = nn.constant dense<[4]> : tensor<1xi64>
  %target = nn.concat(%b, %four, %s) {axis = 0 : i64} : (tensor<*xi64>, tensor<1xi64>, tensor<*xi64>) -> tensor<*xi64>
  // CHECK: %[[T:.+]] = nn.constant dense<[1, 4, 1]> : tensor<3xi64>
  // CHECK: nn.expand(%{{.+}}, %[[T]]) {{.*}}-> tensor<?x4x?xf32>
  %y = nn.expand(%x, %target) : (tensor<?x1x?xf32>, tensor<*xi64>) -> tensor<*xf32>
  return %y : tensor<*xf32>
}

// -----

// Tests that a shape known only from run-time data leaves the result unranked.
// CHECK-LABEL: func @data_dependent
func.func @data_dependent(%x: tensor<6xf32> {llmc.dims = [""], llmc.name = "x"},
                          %s: tensor<2xi64> {llmc.dims = [""], llmc.name = "s"}) -> tensor<*xf32>
    attributes {llmc.symbols = []} {
  // CHECK: nn.reshape({{.*}}) {{.*}}-> tensor<*xf32>
  %y = nn.reshape(%x, %s) {llmc.untyped = array<i64: 0>} : (tensor<6xf32>, tensor<2xi64>) -> tensor<*xf32>
  return %y : tensor<*xf32>
}

// -----

// Tests that incompatible static shapes are a compile error at the node.
func.func @mismatch(%x: tensor<2x3xf32> {llmc.dims = ["", ""], llmc.name = "x"}) -> tensor<*xf32>
    attributes {llmc.symbols = []} {
  %w = nn.constant dense<1.0> : tensor<4x5xf32>
  // expected-error @+1 {{}}
  %y = nn.matmul(%x, %w) : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<*xf32>
  return %y : tensor<*xf32>
}

// -----

// Tests that a model that only computes up to a table's length (positions sliced to the
// sequence length and added to the tokens, as BERT's embeddings do) is probed again with
// smaller sizes: the sum keeps its symbol, and the function's log says why.
// CHECK-LABEL: func @bounded_table
// CHECK-SAME: shape-inference\09smaller sizes\09\09node 'add': shapes [7919, 8] and [512, 8] do not broadcast (with seq=7919)
// CHECK-SAME: shapes were inferred with sizes up to 331 instead
// CHECK: nn.add({{.*}}) {{.*}}llmc.dims = {{\[}}["seq", ""]]{{.*}} -> tensor<?x8xf32>
func.func @bounded_table(%x: tensor<?x8xf32> {llmc.dims = ["seq", ""], llmc.name = "x"}) -> tensor<*xf32>
    attributes {llmc.symbols = ["seq"]} {
  %table = nn.constant dense<1.0> : tensor<512x8xf32>
  %shape = nn.shape(%x) : (tensor<?x8xf32>) -> tensor<*xi64>
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %length = nn.gather(%shape, %zero) {axis = 0 : i64} : (tensor<*xi64>, tensor<1xi64>) -> tensor<*xi64>
  %one = nn.constant dense<[1]> : tensor<1xi64>
  %positions = nn.slice(%table, %zero, %length, %zero, %one) : (tensor<512x8xf32>, tensor<1xi64>, tensor<*xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<*xf32>
  %y = nn.add(%x, %positions) : (tensor<?x8xf32>, tensor<*xf32>) -> tensor<*xf32> loc("add")
  return %y : tensor<*xf32>
}

// -----

// Tests that when every probe level has sizes the model fails for, the results stay unranked
// (checked at run time) and the log says from which node.
// CHECK-LABEL: func @tiny_table
// CHECK-SAME: missed\09shape-inference\09shapes\09\09shapes left to run time (1 ops) from node 'add': shapes [7919, 8] and [10, 8] do not broadcast (with seq=7919)
// CHECK: nn.add({{.*}}) {{.*}}-> tensor<*xf32>
func.func @tiny_table(%x: tensor<?x8xf32> {llmc.dims = ["seq", ""], llmc.name = "x"}) -> tensor<*xf32>
    attributes {llmc.symbols = ["seq"]} {
  %table = nn.constant dense<1.0> : tensor<10x8xf32>
  %shape = nn.shape(%x) : (tensor<?x8xf32>) -> tensor<*xi64>
  %zero = nn.constant dense<[0]> : tensor<1xi64>
  %length = nn.gather(%shape, %zero) {axis = 0 : i64} : (tensor<*xi64>, tensor<1xi64>) -> tensor<*xi64>
  %one = nn.constant dense<[1]> : tensor<1xi64>
  %positions = nn.slice(%table, %zero, %length, %zero, %one) : (tensor<10x8xf32>, tensor<1xi64>, tensor<*xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<*xf32>
  %y = nn.add(%x, %positions) : (tensor<?x8xf32>, tensor<*xf32>) -> tensor<*xf32> loc("add")
  return %y : tensor<*xf32>
}

// -----

// Tests that a relation the graph forces between symbols that the export names apart (torch.onnx
// with its own dynamic_axes: "seq", "past", "total") is found, not refused: the mask over
// "total" is added to scores over the concatenation of past and new keys, which holds only when
// total = past + seq. The relation is kept on the function and logged.
// CHECK-LABEL: func @related_lengths
// CHECK-SAME: shape-inference\09relation\09add\09dimension 'total' taken as past + seq: node 'add' holds only then
// CHECK-SAME: llmc.symbol_relations = {total = "past + seq"}
// CHECK: nn.add({{.*}}) {{.*}}llmc.dims = {{\[}}["batch", "total"]]{{.*}} -> tensor<?x?xf32>
func.func @related_lengths(%past: tensor<?x?xf32> {llmc.dims = ["batch", "past"], llmc.name = "past"},
                           %new: tensor<?x?xf32> {llmc.dims = ["batch", "seq"], llmc.name = "new"},
                           %mask: tensor<?x?xf32> {llmc.dims = ["batch", "total"], llmc.name = "mask"}) -> tensor<*xf32>
    attributes {llmc.symbols = ["batch", "past", "seq", "total"]} {
  %all = nn.concat(%past, %new) {axis = 1 : i64} : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<*xf32>
  %y = nn.add(%all, %mask) : (tensor<*xf32>, tensor<?x?xf32>) -> tensor<*xf32> loc("add")
  return %y : tensor<*xf32>
}

// -----

// Tests that an op failing for every size, whatever the symbols' relation, is still an error
// at its node: a static mismatch beside a symbolic one.
func.func @no_relation(%x: tensor<?x3xf32> {llmc.dims = ["seq", ""], llmc.name = "x"},
                       %m: tensor<?x4xf32> {llmc.dims = ["total", ""], llmc.name = "m"}) -> tensor<*xf32>
    attributes {llmc.symbols = ["seq", "total"]} {
  // expected-error @+1 {{shapes [2, 3] and [3, 4] do not broadcast (for every size tried of the dimension symbols, e.g. seq=2, total=3)}}
  %y = nn.add(%x, %m) : (tensor<?x3xf32>, tensor<?x4xf32>) -> tensor<*xf32>
  return %y : tensor<*xf32>
}
