// RUN: llmc-opt --split-input-file %s | llmc-opt --split-input-file | FileCheck %s

// Tests that grouped-query attention and positions round-trip.
// CHECK-LABEL: func @round_trip
func.func @round_trip(%ids: tensor<1x?xi64>, %q: tensor<1x8x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>) -> (tensor<?xi64>, tensor<1x8x?x16xf32>) {
  // CHECK: llm.positions(%{{.+}}) : (tensor<1x?xi64>) -> tensor<?xi64>
  %p = llm.positions(%ids) : (tensor<1x?xi64>) -> tensor<?xi64>
  // CHECK: llm.attention(%{{.+}}, %{{.+}}, %{{.+}}) {layer = 3 : i64, scale = 2.500000e-01 : f32}
  %o = llm.attention(%q, %k, %v) {layer = 3 : i64, scale = 0.25 : f32} : (tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>) -> tensor<1x8x?x16xf32>
  return %p, %o : tensor<?xi64>, tensor<1x8x?x16xf32>
}
