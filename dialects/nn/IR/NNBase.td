// The nn dialect: a tensor graph with ONNX semantics (broadcasting, dtypes, symbolic dims).
#ifndef LLMC_NN_BASE
#define LLMC_NN_BASE

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let summary = "Tensor graph with ONNX semantics";
  let description = [{
    What the ONNX importer writes. One op per ONNX operator in its opset-23 form (the importer
    normalizes older opsets, e.g. Reduce* `axes` attributes become operands). Operands are
    positional exactly as in ONNX; a value of type `none` (from `nn.none`) marks an absent
    optional input. Attributes keep their ONNX names and are absent when ONNX's default applies.
  }];
  let cppNamespace = "::llmc::nn";
  // Attributes live in the attribute dictionary so that generic passes (shape inference
  // through the runtime's kernels, lowering to exec) can read them uniformly.
  let usePropertiesForAttributes = 0;
}

class NN_Op<string mnemonic, list<Trait> traits = []> : Op<NN_Dialect, mnemonic, traits>;

def NN_TensorOrNone : AnyTypeOf<[AnyTensor, NoneType]>;

// An ONNX operator `onnxName` as of opset `sinceVersion`, with `minIn`..`maxIn` inputs and
// `minOut`..`maxOut` outputs (-1: variadic) and the ONNX attributes in `attrs`.
class NN_OnnxOp<string mnemonic, string onnxName, int sinceVersion, int minIn, int maxIn,
                int minOut, int maxOut, dag attrs>
    : NN_Op<mnemonic, [Pure]> {
  let summary = "ONNX `" # onnxName # "` (opset " # sinceVersion # " form)";
  let description = [{
    Mirrors the ONNX operator of the same name; see the summary for the opset whose
    semantics it has. Operands are ONNX's inputs in order; `none` marks an absent optional
    input. The runtime kernel of the same name computes it.

    ```mlir
    %r = nn.}] # mnemonic # [{(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = !con((ins Variadic<NN_TensorOrNone>:$inputs), attrs);
  let results = (outs Variadic<AnyTensor>:$outputs);
  let assemblyFormat = "`(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral getOnnxName() { return "}] # onnxName # [{"; }
  }];
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::verify() {
      return ::llmc::nn::verifyOnnxArity(getOperation(), }] # !cast<string>(minIn) # [{, }]
      # !cast<string>(maxIn) # [{, }] # !cast<string>(minOut) # [{, }] # !cast<string>(maxOut) # [{);
    }
  }];
}

#endif // LLMC_NN_BASE
