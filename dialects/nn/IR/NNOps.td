// nn dialect operations: the hand-written ones, then the ONNX operators (generated).
#ifndef LLMC_NN_OPS
#define LLMC_NN_OPS

include "NNBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def NN_ConstantOp : NN_Op<"constant", [Pure, AllTypesMatch<["value", "output"]>]> {
  let summary = "A constant tensor (an ONNX initializer or Constant node)";
  let description = [{
    Holds the bytes of an initializer or of a folded subgraph. `name` keeps the ONNX
    initializer name when there is one, for engine inspection and error messages;
    `llmc.recipe` says how it derives from initializers (for `llmc refit`). Deliberately not
    `ConstantLike`: MLIR's folder would merge constants of equal value, and two initializers
    that happen to be equal (norm weights of ones) must stay two weights that refit can fill
    differently.

    ```mlir
    %w = nn.constant {name = "fc.weight"} dense<[[1.0, 2.0]]> : tensor<1x2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value, OptionalAttr<StrAttr>:$name);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def NN_NoneOp : NN_Op<"none", [Pure]> {
  let summary = "Marks an absent optional input";
  let description = [{
    ONNX skips optional inputs with an empty name; nn passes this value in their place so
    that operand positions stay those of ONNX.

    ```mlir
    %none = nn.none
    %y = nn.clip(%x, %none, %max) : (tensor<4xf32>, none, tensor<f32>) -> tensor<4xf32>
    ```
  }];
  let results = (outs NoneType:$output);
  let assemblyFormat = "attr-dict";
}

include "NNOnnxOps.td"
include "NNOrtOps.td"

#endif // LLMC_NN_OPS
