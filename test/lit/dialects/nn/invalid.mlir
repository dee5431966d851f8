// RUN: llmc-opt --split-input-file --verify-diagnostics %s

func.func @too_few_inputs(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{takes 2 inputs, got 1}}
  %y = nn.add(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

func.func @too_many_outputs(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{has 1 outputs, got 2}}
  %y, %z = nn.relu(%x) : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
  return %y : tensor<2xf32>
}

// -----

func.func @required_input_absent() -> tensor<2xf32> {
  %none = nn.none
  // expected-error @+1 {{required input 0 is absent}}
  %y = nn.relu(%none) : (none) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

func.func @wrong_attribute_kind(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{attribute 'axis' failed to satisfy constraint}}
  %y = nn.softmax(%x) {axis = "last"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @constant_type_mismatch() -> tensor<3xf32> {
  // expected-error @+1 {{failed to verify that all of {value, output} have same type}}
  %c = "nn.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<3xf32>
  return %c : tensor<3xf32>
}
