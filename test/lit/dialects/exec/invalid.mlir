// RUN: llmc-opt --split-input-file --verify-diagnostics %s

func.func @empty_kernel(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{needs a kernel name}}
  %y = exec.call ""(%x) {params = {}} : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

func.func @slot_count(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{has 2 slots for 1 results}}
  %y = exec.call "Relu"(%x) {params = {}, slots = array<i64: 0, 1>} : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

func.func @negative_slot(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{has a negative arena slot -1}}
  %y = exec.call "Relu"(%x) {params = {}, slots = array<i64: -1>} : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

func.func @bad_param(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{parameter 'axis' has an unsupported kind}}
  %y = exec.call "Softmax"(%x) {params = {axis = [1, 2]}} : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}
