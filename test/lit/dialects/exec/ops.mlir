// RUN: llmc-opt --split-input-file %s | llmc-opt --split-input-file | FileCheck %s

// Tests that kernel calls with parameters, slots and absent operands round-trip.
// CHECK-LABEL: func @round_trip
func.func @round_trip(%x: tensor<2x8xf32>) -> tensor<2x8xf32> attributes {exec.arena_bytes = 128 : i64} {
  // CHECK: %[[W:.+]] = exec.weight {name = "bias"} dense<5.000000e-01> : tensor<8xf32>
  %w = exec.weight {name = "bias"} dense<0.5> : tensor<8xf32>
  // CHECK: %[[NONE:.+]] = exec.none
  %none = exec.none
  // CHECK: exec.call "Add"(%{{.+}}, %[[W]]) {node = "add_0", params = {}, slots = array<i64: 0>}
  %a = exec.call "Add"(%x, %w) {node = "add_0", params = {}, slots = array<i64: 0>} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK: exec.call "Clip"(%{{.+}}, %[[NONE]], %[[NONE]]) {params = {}}
  %c = exec.call "Clip"(%a, %none, %none) {params = {}} : (tensor<2x8xf32>, none, none) -> tensor<2x8xf32>
  // CHECK: exec.call "Softmax"(%{{.+}}) {params = {axis = -1 : i64}, slots = array<i64: 1>}
  %s = exec.call "Softmax"(%c) {params = {axis = -1 : i64}, slots = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %s : tensor<2x8xf32>
}
