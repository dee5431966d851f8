// exec dialect operations.
#ifndef LLMC_EXEC_OPS
#define LLMC_EXEC_OPS

include "ExecBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def Exec_WeightOp : Exec_Op<"weight", [ConstantLike, Pure, AllTypesMatch<["value", "output"]>]> {
  let summary = "A weight tensor stored in the engine's weights section";
  let description = [{
    ```mlir
    %w = exec.weight {name = "fc.weight"} dense<[[1.0, 2.0]]> : tensor<1x2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value, OptionalAttr<StrAttr>:$name);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def Exec_NoneOp : Exec_Op<"none", [Pure]> {
  let summary = "An absent optional kernel operand";
  let description = [{
    ```mlir
    %none = exec.none
    ```
  }];
  let results = (outs NoneType:$output);
  let assemblyFormat = "attr-dict";
}

def Exec_CallOp : Exec_Op<"call", [Pure]> {
  let summary = "One engine step: a kernel call";
  let description = [{
    Calls the runtime kernel `kernel` on the operands (`none` for an absent optional
    operand). `params` holds the kernel's typed parameters; `node` the ONNX node it came
    from. Memory planning adds `slots`, the arena slot of each result.

    ```mlir
    %y = exec.call "Softmax"(%x) {node = "softmax_0", params = {axis = -1 : i64}, slots = array<i64: 0>}
        : (tensor<2x8xf32>) -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<AnyTypeOf<[AnyTensor, NoneType]>>:$inputs,
                   DictionaryAttr:$params, OptionalAttr<StrAttr>:$node,
                   OptionalAttr<DenseI64ArrayAttr>:$slots);
  let results = (outs Variadic<AnyTensor>:$outputs);
  let assemblyFormat = "$kernel `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)";
  let hasVerifier = 1;
}

#endif // LLMC_EXEC_OPS
