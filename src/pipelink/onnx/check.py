"""What the ONNX import checks of a model before anything else reads it: the opsets it imports, every node
(of the graph and of its subgraphs) against its operator's ONNX schema, every tensor's data against its
dims, and how deep subgraphs nest.

A malformed or hostile file is refused here with the reason, so the folds, the fusions, the converters
and onnx's shape inference only ever see nodes their schemas allow (an attribute of the type the spec
gives it, the inputs and outputs the operator has). Nothing here evaluates a node, reads a file or
allocates by a file's dims.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .graph import ONNX_DOMAINS, Rejected, Unsupported

__all__ = ["MAX_NESTING", "check_model", "read_tensor"]

#: The deepest nesting of subgraphs (If, Loop and Scan bodies) a model may have. protobuf's parser stops a
#: file near 30 levels; a ModelProto built in memory has no limit, and every walk of it would recurse.
MAX_NESTING = 64

# AttributeProto.type -> the one field that holds its value
_FIELDS = {
    1: "f",
    2: "i",
    3: "s",
    4: "t",
    5: "g",
    6: "floats",
    7: "ints",
    8: "strings",
    9: "tensors",
    10: "graphs",
    11: "sparse_tensor",
    12: "sparse_tensors",
    13: "tp",
    14: "type_protos",
}
_SCALAR_FIELDS = ("f", "i", "s", "t", "g", "sparse_tensor", "tp")
_TYPE_NAMES = {
    0: "UNDEFINED",
    1: "FLOAT",
    2: "INT",
    3: "STRING",
    4: "TENSOR",
    5: "GRAPH",
    6: "FLOATS",
    7: "INTS",
    8: "STRINGS",
    9: "TENSORS",
    10: "GRAPHS",
    11: "SPARSE_TENSOR",
    12: "SPARSE_TENSORS",
    13: "TYPE_PROTO",
    14: "TYPE_PROTOS",
}
_CORRUPT = "the file is truncated or corrupt (export it again)"
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def _text_problem(onnx, model) -> str | None:
    """The first text field of ``model`` (a name, an op type, a domain) that is not UTF-8, which protobuf
    hands over as bytes (a corrupt file), or None. A tensor's data is not looked at, only its name."""
    stack: list[tuple[str, Any]] = [("model", model)]
    while stack:
        path, message = stack.pop()
        if isinstance(message, onnx.TensorProto):
            if not isinstance(message.name, str):
                return f"{path}.name"
            continue
        for field, value in message.ListFields():
            values = list(value) if field.is_repeated else [value]
            index = (lambda k: f"[{k}]") if field.is_repeated else (lambda k: "")
            names = [f"{path}.{field.name}{index(k)}" for k in range(len(values))]
            bad = [name for name, v in zip(names, values, strict=True) if not isinstance(v, str)]
            if field.type == field.TYPE_STRING and bad:
                return bad[0]
            if field.type == field.TYPE_MESSAGE:
                stack += list(zip(names, values, strict=True))
    return None


def _onnx_opset(onnx, model) -> int:
    """The opset of the ONNX domain ``model`` imports (InvalidArgumentError: none, two, or one this onnx
    package does not know)."""
    versions = sorted({int(entry.version) for entry in model.opset_import if entry.domain in ONNX_DOMAINS})
    newest = int(onnx.defs.onnx_opset_version())
    if not versions and not any(node.domain in ONNX_DOMAINS for node in _all_nodes(model)):
        return newest  # no node of the ONNX domain (ai.onnx.ml's only): no opset of it to read
    if not versions:
        raise InvalidArgumentError(
            "the ONNX model imports no opset of the ONNX domain (its opset_import has no entry for domain "
            "''), so its operators' semantics are unknown; export it again with an opset"
        )
    if len(versions) > 1:
        raise InvalidArgumentError(
            f"the ONNX model imports opsets {versions} of the ONNX domain; a model imports one (export it "
            "again, or fix its opset_import)"
        )
    if not 1 <= versions[0] <= newest:
        raise InvalidArgumentError(
            f"the ONNX model imports opset {versions[0]} of the ONNX domain; the onnx package here knows "
            f"opsets 1 to {newest} (export with an opset in that range, or upgrade onnx)"
        )
    return versions[0]


def _all_nodes(model):
    """Every node of the graph and of its subgraphs, to :data:`MAX_NESTING` levels."""
    stack = [(model.graph, 0)]
    while stack:
        graph, depth = stack.pop()
        for node in graph.node:
            yield node
            for attr in node.attribute if depth < MAX_NESTING else ():
                stack += [(sub, depth + 1) for sub in ([attr.g] if attr.HasField("g") else list(attr.graphs))]


def check_model(onnx, model) -> tuple[int, list[Rejected]]:
    """The opset of the ONNX domain ``model`` imports, and every problem that makes it malformed ONNX,
    each with the node or tensor and why.

    Checked, in the graph and in every subgraph: each ONNX-domain node against its schema at that opset
    (:func:`_node_problem`), each initializer's and each tensor attribute's data against its dims
    (:func:`_tensor_problem`), sparse initializers (not supported), the wiring (:func:`_wiring`), and
    declared shapes with a negative dim.

    Raises
    ------
    InvalidArgumentError
        A name that is not UTF-8 text, a graph with no outputs, no opset of the ONNX domain (while a node
        is of it), two, or one this onnx package does not know, or subgraphs nested deeper than
        :data:`MAX_NESTING`: nothing else is looked at then.
    """
    field = _text_problem(onnx, model)
    if field:
        raise InvalidArgumentError(
            f"the ONNX model's {field} is not UTF-8 text: the file is corrupt (export it again)"
        )
    if not len(model.graph.output):  # an empty file parses as an empty model
        raise InvalidArgumentError(
            "the ONNX model's graph has no outputs, so it computes nothing (an empty or cut-short file?); "
            "export it again"
        )
    opset = _onnx_opset(onnx, model)
    problems: list[Rejected] = []
    stack: list[tuple[Any, int, str, tuple[dict, ...]]] = [(model.graph, 0, "", ())]
    while stack:
        graph, depth, where, outer = stack.pop()
        if depth > MAX_NESTING:
            raise InvalidArgumentError(
                f"the ONNX model's subgraphs (If, Loop and Scan bodies) nest more than {MAX_NESTING} deep; "
                "PipeLink reads at most that many levels"
            )
        for tensor in graph.initializer:
            why = _tensor_problem(onnx, tensor)
            if why:
                problems.append(Rejected("initializer", where + tensor.name, why))
        for tensor in graph.sparse_initializer:
            problems.append(
                Rejected(
                    "initializer",
                    where + (tensor.values.name or "?"),
                    "a sparse initializer is not supported (store it dense)",
                )
            )
        wiring, made = _wiring(graph, where, outer)
        problems += wiring + _negative_dims(graph, where)
        for k, node in enumerate(graph.node):
            label = where + (node.name or f"#{k}")
            why = _node_problem(onnx, node, opset)
            if why:
                problems.append(Rejected(node.op_type or "(no op type)", label, why))
            for attr in node.attribute:
                subgraphs = [attr.g] if attr.type == 5 and attr.HasField("g") else list(attr.graphs)
                stack += [(sub, depth + 1, f"{label}/{attr.name}/", (*outer, made)) for sub in subgraphs]
    return opset, problems


def _wiring(graph, where: str, outer: tuple[dict, ...]) -> tuple[list[Rejected], dict[str, str]]:
    """The graph's wiring problems (ONNX graphs are single-assignment and topologically sorted): a tensor
    made twice (by two nodes, or by a node and also a graph input or initializer), a node input nothing
    makes, or one only a later node makes (a cycle, or nodes out of order), a graph output nothing makes.
    Also the names this graph makes (what its subgraphs see, with ``outer``: the enclosing graphs')."""
    made = {info.name: "a graph input" for info in graph.input}
    made.update({t.name: "an initializer" for t in graph.initializer})
    later = {out: (k, node) for k, node in enumerate(graph.node) for out in node.output if out}
    problems = []

    def known(name: str) -> bool:
        return name in made or any(name in scope for scope in outer)

    for k, node in enumerate(graph.node):
        label, op = where + (node.name or f"#{k}"), node.op_type or "(no op type)"
        for name in node.input:
            if not name or known(name):
                continue
            if name in later:
                j, maker = later[name]
                problems.append(
                    Rejected(
                        op,
                        label,
                        f"input {name!r} is made by a later node ({maker.name or f'#{j}'!r}): the nodes "
                        "are out of order or form a cycle (ONNX nodes are topologically sorted)",
                    )
                )
            else:
                problems.append(
                    Rejected(op, label, f"input {name!r} is no graph input, initializer or node output")
                )
        for out in node.output:
            if not out:
                continue
            if out in made:
                problems.append(
                    Rejected(
                        op,
                        label,
                        f"output {out!r} is already {made[out]}; each tensor is made once (ONNX graphs "
                        "are single-assignment)",
                    )
                )
            else:
                made[out] = f"made by node {node.name or f'#{k}'!r}"
    for info in graph.output:
        if not known(info.name):
            problems.append(
                Rejected("output", where + info.name, "no node, graph input or initializer makes it")
            )
    return problems, made


def _negative_dims(graph, where: str) -> list[Rejected]:
    """A graph input, output or value_info declaring a negative dim (a dim is a size, or a name)."""
    problems = []
    for kind, infos in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
        for info in infos:
            dims = info.type.tensor_type.shape.dim if info.type.HasField("tensor_type") else ()
            bad = [(k, d.dim_value) for k, d in enumerate(dims) if d.dim_value < 0]
            if bad:
                k, value = bad[0]
                problems.append(
                    Rejected(
                        kind,
                        where + info.name,
                        f"dim {k} is {value}; a dim is a size (0 or more) or a name (dim_param)",
                    )
                )
    return problems


def _node_problem(onnx, node, opset: int) -> str | None:
    """Why ``node`` breaks its ONNX schema, or None (nodes of other domains: their converter decides)."""
    if node.domain not in ONNX_DOMAINS:
        return None
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return _missing_schema(onnx, node.op_type, opset)
    op = node.op_type
    seen: set[str] = set()
    for attr in node.attribute:
        if attr.name in seen:
            return f"attribute {attr.name!r} is given twice"
        seen.add(attr.name)
        spec = schema.attributes.get(attr.name)
        if spec is None:
            known = ", ".join(sorted(schema.attributes)) or "none"
            return f"{op} (opset {opset}) has no attribute {attr.name!r} (its attributes: {known})"
        why = _attribute_problem(onnx, attr, int(spec.type.value), nan_ok=op == "Constant")
        if why:
            return f"attribute {attr.name!r} {why}"
    missing = [name for name, spec in schema.attributes.items() if spec.required and name not in seen]
    if missing:
        return f"required attribute {missing[0]!r} is missing"
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    inputs = (schema.inputs, schema.min_input, schema.max_input)
    outputs = (schema.outputs, schema.min_output, schema.max_output)
    why = _arity_problem("input", list(node.input), *inputs, optional)
    return why or _arity_problem("output", list(node.output), *outputs, optional)


def _missing_schema(onnx, op: str, opset: int) -> str | None:
    """Why an ONNX op type has no schema at ``opset`` (None for an op type ONNX does not define: the
    converters say they have none)."""
    if not onnx.defs.has(op):
        return None
    newest = int(onnx.defs.onnx_opset_version())
    added = next((v for v in range(opset + 1, newest + 1) if onnx.defs.has(op, v)), None)
    since = f" (it was added in opset {added})" if added else ""
    return f"{op} is not an operator of opset {opset} of the ONNX domain{since}"


def _attribute_problem(onnx, attr, expected: int, nan_ok: bool) -> str | None:
    """Why an attribute's value does not match the type its schema gives it (or holds no value). A NaN
    float is refused unless ``nan_ok`` (a Constant's value)."""
    field = _FIELDS.get(attr.type)
    want = _TYPE_NAMES.get(expected, str(expected))
    if attr.ref_attr_name:
        return "refers to a function's attribute, which only a node inside a function may"
    if field is None:
        return f"has type {_TYPE_NAMES.get(attr.type, attr.type)}; its schema gives it type {want}"
    others = [f for f in _FIELDS.values() if f != field and _has(attr, f)]
    if field in _SCALAR_FIELDS and not attr.HasField(field):
        return f"of type {_TYPE_NAMES[attr.type]} holds no value"
    if others:
        return f"of type {_TYPE_NAMES[attr.type]} also holds a value in field {others[0]!r}"
    if attr.type != expected:
        return f"must be of type {want} (got {_TYPE_NAMES[attr.type]})"
    if attr.type in (3, 8):  # the spec's string attributes are names and equations: text
        for text in [attr.s] if attr.type == 3 else list(attr.strings):
            try:
                text.decode("utf-8")
            except UnicodeDecodeError:
                return f"is not UTF-8 text ({text[:20]!r})"
    if attr.type in (1, 6) and not nan_ok:  # NaN is no epsilon, alpha or scale (infinities can be)
        values = [attr.f] if attr.type == 1 else list(attr.floats)
        if any(math.isnan(v) for v in values):
            return "is NaN"
    for tensor in [attr.t] if attr.type == 4 else list(attr.tensors) if attr.type == 9 else []:
        why = _tensor_problem(onnx, tensor)
        if why:
            return f"holds a tensor that {why}"
    return None


def _has(attr, field: str) -> bool:
    return attr.HasField(field) if field in _SCALAR_FIELDS else len(getattr(attr, field)) > 0


def _arity_problem(kind: str, names: list[str], formals, least: int, most: int, optional) -> str | None:
    """Why a node's inputs (or outputs) do not fit its schema's count, or leave a required one unnamed."""
    if not least <= len(names) <= most:
        span = f"{least} to {most}" if most < 2**31 - 1 else f"{least} or more"
        span = f"{least}" if least == most else span
        return f"takes {span} {kind}s (got {len(names)})"
    for k, name in enumerate(names):
        if not formals:
            break
        formal = formals[min(k, len(formals) - 1)]
        if not name and formal.option != optional:
            return f"{kind} {k} ({formal.name}) is required, but its name is empty"
    return None


def _tensor_problem(onnx, tensor) -> str | None:
    """Why a TensorProto's data cannot be read as its dims say, or None. Counts, never allocates."""
    elem = int(tensor.data_type)
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    except (KeyError, TypeError, ValueError):
        return f"has element type {elem}, which is no ONNX type (or is UNDEFINED)"
    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        return f"has a negative dim ({dims})"
    if tensor.HasField("segment"):
        return "is a segment of a tensor split over several TensorProtos, which is not supported"
    if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data):
        where = next((e.value for e in tensor.external_data if e.key == "location"), "")
        return (
            f"keeps its data in an external file ({where!r}) that was not loaded: give the import the "
            ".onnx file's path (its external data is read from beside it), or load the model with "
            "onnx.load(path) first"
        )
    count = math.prod(dims)
    bits = _element_bits(onnx, elem, dtype)
    typed = [f for f in _TYPED_FIELDS if len(getattr(tensor, f))]
    shape = f"dims {dims} ({count} elements)"
    if tensor.HasField("raw_data"):
        if typed:
            return f"holds its data twice (raw_data and {typed[0]})"
        if elem == onnx.TensorProto.STRING:
            return "is a string tensor with raw_data (strings are stored in string_data)"
        want, got = -(-count * bits // 8), len(tensor.raw_data)
        if got != want:
            return f"declares {shape} but holds {got} bytes of data, not {want}: {_CORRUPT}"
        return None
    if elem == onnx.TensorProto.STRING:
        for text in tensor.string_data:
            try:
                text.decode("utf-8")
            except UnicodeDecodeError:
                return f"holds a string that is not UTF-8 ({text[:20]!r})"
    if len(typed) > 1:
        return f"holds its data in two fields ({typed[0]} and {typed[1]})"
    field = onnx.helper.tensor_dtype_to_field(elem)
    got = len(getattr(tensor, field))
    if typed and typed[0] != field:
        return f"of element type {dtype} holds its data in {typed[0]}, not {field}"
    per_entry = {4: 2, 2: 4}.get(bits, 1)  # 4- and 2-bit types: packed bytes, one per entry
    want = 2 * count if dtype.kind == "c" else -(-count // per_entry)
    if got != want:
        return f"declares {shape} but holds {got} values in {field}, not {want}: {_CORRUPT}"
    return None


def _element_bits(onnx, elem: int, dtype: np.dtype) -> int:
    """Bits per element in raw_data (the sub-byte types are packed)."""
    tp = onnx.TensorProto
    packed = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2, "FLOAT6E2M3": 6, "FLOAT6E3M2": 6}
    for name, bits in packed.items():
        if getattr(tp, name, None) == elem:
            return bits
    return 8 * dtype.itemsize


def read_tensor(onnx, tensor) -> np.ndarray:
    """A TensorProto's value (an initializer's, a Constant's).

    Raises
    ------
    Unsupported
        Its data does not match its dims or its element type (see :func:`_tensor_problem`).
    """
    why = _tensor_problem(onnx, tensor)
    if why:
        raise Unsupported(why)
    try:
        array: Any = onnx.numpy_helper.to_array(tensor)
    except Exception as e:  # noqa: BLE001 - onnx's reader on data the counts above let through
        raise Unsupported(f"cannot be read ({type(e).__name__}: {e})") from None
    return np.asarray(array)
