"""Decides whether an ONNX node test is in llmc's scope, from its model alone.

A test is in scope when every node is a default-domain op that llmc promises to support, the
default-domain opset is one llmc imports, and every dtype the model touches is one llmc has
kernels for. Anything else is out of scope, with the reasons spelled out for the report.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

import onnx
from onnx import TensorProto

# Default-domain ops llmc supports. A test whose nodes are all in this set is in scope.
IN_SCOPE_OPS = frozenset(
    """
    Add Sub Mul Div Pow Sqrt Reciprocal Neg Abs Exp Log Erf Tanh Sigmoid Relu LeakyRelu Elu
    Gelu HardSigmoid HardSwish Softplus Clip Min Max Sum Mean Sin Cos Floor Ceil Round Sign
    Where Equal Less Greater LessOrEqual GreaterOrEqual And Or Not Xor IsNaN IsInf Cast
    CastLike MatMul Gemm Softmax LogSoftmax ReduceMean ReduceSum ReduceMax ReduceMin
    ReduceProd ReduceL2 ReduceSumSquare ArgMax ArgMin TopK CumSum Transpose Reshape Flatten
    Squeeze Unsqueeze Concat Split Slice Gather GatherElements GatherND ScatterND
    ScatterElements NonZero Expand Tile Pad Shape Size Constant ConstantOfShape Range Identity Dropout
    Trilu OneHot LayerNormalization RMSNormalization Einsum Attention
    QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger
    """.split()
)

MIN_OPSET = 13
MAX_OPSET = 23

# Names used in the report; the ONNX enum names are shouty and "FLOAT" is ambiguous.
_DTYPE_NAMES = {
    TensorProto.FLOAT: "float32",
    TensorProto.FLOAT16: "float16",
    TensorProto.BFLOAT16: "bfloat16",
    TensorProto.DOUBLE: "float64",
    TensorProto.INT64: "int64",
    TensorProto.INT32: "int32",
    TensorProto.INT16: "int16",
    TensorProto.INT8: "int8",
    TensorProto.UINT64: "uint64",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT16: "uint16",
    TensorProto.UINT8: "uint8",
    TensorProto.BOOL: "bool",
    TensorProto.STRING: "string",
    TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
}

IN_SCOPE_DTYPES = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.BFLOAT16,
        TensorProto.INT64,
        TensorProto.INT32,
        TensorProto.INT8,
        TensorProto.UINT8,
        TensorProto.BOOL,
    }
)

_DEFAULT_DOMAINS = ("", "ai.onnx")


def dtype_name(elem_type: int) -> str:
    if elem_type in _DTYPE_NAMES:
        return _DTYPE_NAMES[elem_type]
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"dtype#{elem_type}"


def op_name(domain: str, op_type: str) -> str:
    """The op as the report shows it: bare for the default domain, `domain:Op` otherwise."""
    return op_type if domain in _DEFAULT_DOMAINS else f"{domain}:{op_type}"


@dataclasses.dataclass(frozen=True)
class Scope:
    ops: tuple[str, ...]  # sorted, as op_name() shows them
    opset: int | None  # default-domain opset import, None when the model has none
    reasons: tuple[str, ...]  # empty when in scope

    @property
    def in_scope(self) -> bool:
        return not self.reasons

    def label(self) -> str:
        return "in" if self.in_scope else "out: " + "; ".join(self.reasons)


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph held in a node attribute (If/Loop/Scan bodies)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub)


def _type_kinds(type_proto: onnx.TypeProto) -> Iterator[tuple[str, int]]:
    """(kind, elem_type) for a value's type; kind is "tensor" or the container's name."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        yield "tensor", type_proto.tensor_type.elem_type
    elif which == "sparse_tensor_type":
        yield "sparse tensor", type_proto.sparse_tensor_type.elem_type
    elif which == "sequence_type":
        yield "sequence", 0
        yield from ((k, t) for k, t in _type_kinds(type_proto.sequence_type.elem_type)
                    if k == "tensor")
    elif which == "optional_type":
        yield "optional", 0
        yield from ((k, t) for k, t in _type_kinds(type_proto.optional_type.elem_type)
                    if k == "tensor")
    elif which == "map_type":
        yield "map", 0
    # An unset type (possible on value_info in hand-written tests) tells us nothing.


def _node_dtypes(node: onnx.NodeProto) -> Iterator[int]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR:
            yield attr.t.data_type
        elif attr.type == onnx.AttributeProto.TENSORS:
            yield from (t.data_type for t in attr.tensors)
        elif attr.type == onnx.AttributeProto.SPARSE_TENSOR:
            yield attr.sparse_tensor.values.data_type
        elif attr.type == onnx.AttributeProto.INT and (
            (node.op_type == "Cast" and attr.name == "to") or attr.name == "dtype"
        ):
            yield attr.i


def classify(model: onnx.ModelProto) -> Scope:
    ops: set[tuple[str, str]] = set()
    dtypes: set[int] = set()
    containers: set[str] = set()

    for graph in _graphs(model.graph):
        for node in graph.node:
            ops.add((node.domain, node.op_type))
            dtypes.update(_node_dtypes(node))
        for value in [*graph.input, *graph.output, *graph.value_info]:
            for kind, elem_type in _type_kinds(value.type):
                if kind == "tensor":
                    dtypes.add(elem_type)
                else:
                    containers.add(kind)
        dtypes.update(t.data_type for t in graph.initializer)
        if graph.sparse_initializer:
            containers.add("sparse tensor")
            dtypes.update(t.values.data_type for t in graph.sparse_initializer)
    dtypes.discard(TensorProto.UNDEFINED)

    opset = next(
        (imp.version for imp in model.opset_import if imp.domain in _DEFAULT_DOMAINS), None
    )

    reasons: list[str] = []
    outside = sorted(
        op_name(domain, op_type)
        for domain, op_type in ops
        if domain not in _DEFAULT_DOMAINS or op_type not in IN_SCOPE_OPS
    )
    if outside:
        reasons.append("ops " + ", ".join(outside))
    if opset is None:
        reasons.append("opset none (no default-domain import)")
    elif not MIN_OPSET <= opset <= MAX_OPSET:
        reasons.append(f"opset {opset}")
    for kind in sorted(containers):
        reasons.append(f"type {kind}")
    for bad in sorted({dtype_name(t) for t in dtypes if t not in IN_SCOPE_DTYPES}):
        reasons.append(f"dtype {bad}")

    return Scope(
        ops=tuple(sorted(op_name(d, o) for d, o in ops)),
        opset=opset,
        reasons=tuple(reasons),
    )


def reason_kind(reason: str) -> str:
    """The category of one reason ("ops", "opset", "dtype", "type", ...) for counting."""
    return reason.split(" ", 1)[0]


def covered_ops(scopes: Iterable[Scope]) -> dict[str, tuple[int, int]]:
    """Per in-scope op: (in-scope tests using it, out-of-scope tests using only in-scope ops).

    The second count is the near misses: tests that the op set covers but that are out for
    their opset or dtypes alone.
    """
    in_counts = dict.fromkeys(IN_SCOPE_OPS, 0)
    near_counts = dict.fromkeys(IN_SCOPE_OPS, 0)
    for scope in scopes:
        if scope.in_scope:
            target = in_counts
        elif all(reason_kind(r) != "ops" for r in scope.reasons):
            target = near_counts
        else:
            continue
        for op in scope.ops:
            target[op] += 1
    return {op: (in_counts[op], near_counts[op]) for op in sorted(IN_SCOPE_OPS)}
