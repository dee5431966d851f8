// RUN: llmc-opt --llmc-plan-memory %s | FileCheck %s

// Tests liveness-based reuse: %b reuses %a's slot... only once %a is dead; results that
// are live at the same time never share a slot; returned values stay live to the end.
// CHECK-LABEL: func @chain
// CHECK-SAME: exec.arena_bytes = 128 : i64, exec.slot_sizes = array<i64: 64, 64>
func.func @chain(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK: exec.call "Relu"{{.*}}slots = array<i64: 0>
  %a = exec.call "Relu"(%x) {params = {}} : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK: exec.call "Neg"{{.*}}slots = array<i64: 1>
  %b = exec.call "Neg"(%a) {params = {}} : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK: exec.call "Abs"{{.*}}slots = array<i64: 0>
  %c = exec.call "Abs"(%b) {params = {}} : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK: exec.call "Exp"{{.*}}slots = array<i64: 1>
  %d = exec.call "Exp"(%c) {params = {}} : (tensor<4xf32>) -> tensor<4xf32>
  return %d : tensor<4xf32>
}

// -----

// Tests symbolic sizes: planned at the symbol's max when a range is given.
// RUN: llmc-opt --split-input-file --llmc-plan-memory %s | FileCheck %s --check-prefix=SYM
// SYM-LABEL: func @symbolic
// SYM-SAME: exec.arena_bytes = 4096 : i64
func.func @symbolic(%x: tensor<?x8xf32>) -> tensor<?x8xf32>
    attributes {llmc.symbol_ranges = {batch = array<i64: 1, 128>}} {
  %a = exec.call "Relu"(%x) {llmc.dims = [["batch", ""]], params = {}} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}
