"""The import's model of an ONNX graph being converted: :class:`Node` (a node as plain data), :class:`Graph`
(the constants, shapes, dtypes and names known so far, and the stages made), and the refusals
(:class:`Unsupported` raised for one node, :class:`Rejected` collected for the report). The converters
(``convert.py``) and the lowerings beside them build on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError

__all__ = [
    "FUSED_DOMAIN",
    "ONNX_DOMAINS",
    "Graph",
    "NameSet",
    "Node",
    "Rejected",
    "Unsupported",
    "dim_symbol",
    "dtype_of",
    "shape_of",
    "show_shape",
    "float32_attr",
    "inputs_behind",
    "onnx_dtype",
    "unique_name",
]

_NAME_BAD = re.compile(r"[^A-Za-z0-9_.:-]")
_SYMBOL_BAD = re.compile(r"[^A-Za-z0-9_]")

#: The domains of ONNX's standard operators.
ONNX_DOMAINS = ("", "ai.onnx")
#: The domain of a node the fusion pass made (``fuse.py``): its op type is a PipeLink operator, its
#: attributes that operator's.
FUSED_DOMAIN = "pipelink.fused"


class Unsupported(Exception):
    """Why one node cannot be imported (raised by a converter, collected by :func:`convert`).
    ``graph_input`` names the graph input whose value the node needs at import, when that is why;
    ``needs`` the tensors the graph computes whose values the node needs at import (the import traces
    them back to the graph inputs they come from: :func:`inputs_behind`)."""

    def __init__(self, why: str, *, graph_input: str = "", needs: tuple[str, ...] = ()):
        super().__init__(why)
        self.graph_input = graph_input
        self.needs = tuple(needs)


@dataclass(frozen=True)
class Rejected:
    """One node PipeLink cannot import: its op type, its name and why. ``graph_input`` is the graph input
    whose value it needs at import, when that is why; ``needs`` the computed tensors whose values it needs
    at import; ``graph_inputs`` the graph inputs those values come from, once traced (giving their values,
    ``import_model(constants=...)``, lets the import evaluate what the node needs)."""

    op_type: str
    node: str
    why: str
    graph_input: str = ""
    needs: tuple[str, ...] = ()
    graph_inputs: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The entry of ``PipeLinkError.unsupported``: ``graph_input`` when the node needs a graph input's
        value directly, ``graph_inputs`` (a list) whenever the values it needs come from graph inputs."""
        entry: dict[str, Any] = {"op_type": self.op_type, "node": self.node, "why": self.why}
        if self.graph_input:
            entry["graph_input"] = self.graph_input
        behind = self.graph_inputs or ((self.graph_input,) if self.graph_input else ())
        if behind:
            entry["graph_inputs"] = list(behind)
        return entry

    def __str__(self) -> str:
        return f"{self.op_type} node {self.node!r}: {self.why}"


def inputs_behind(nodes: Any, needed: tuple[str, ...], inputs: frozenset[str]) -> tuple[str, ...]:
    """The graph ``inputs`` the tensors ``needed`` are computed from: the producers of each (ONNX
    NodeProtos ``nodes``) followed back to graph inputs, initializers and constants (in first-met order;
    a node with subgraphs counts its explicit inputs only). A Shape or Size reads only its input's shape,
    not its values: the walk stops there."""
    producer = {out: node for node in nodes for out in node.output if out}
    found: dict[str, None] = {}
    seen: set[str] = set()
    stack = list(reversed(needed))
    while stack:
        name = stack.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        if name in inputs:
            found[name] = None
            continue
        node = producer.get(name)
        if node is not None and node.op_type not in ("Shape", "Size"):
            stack.extend(reversed(list(node.input)))
    return tuple(found)


@dataclass
class Node:
    """An ONNX node as plain data: attributes decoded (``onnx.helper.get_attribute_value``)."""

    op_type: str
    name: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]


@dataclass
class Graph:
    """What the converters share: the constants (initializers and folded Constant nodes), the dtypes
    shape inference found, the PipeLink name of every ONNX tensor, and the stages made so far."""

    opset: int
    constants: dict[str, np.ndarray]
    dtypes: dict[str, str]  # ONNX tensor name -> PipeLink dtype name, where known
    operators: Callable[[str], Any]  # PipeLink operator name -> its descriptor (the registry's get)
    shapes: dict[str, tuple] = field(default_factory=dict)  # ONNX tensor name -> shape (None: unknown dim)
    names: dict[str, str] = field(default_factory=dict)  # ONNX tensor name -> PipeLink tensor name
    taken: NameSet = field(default_factory=lambda: NameSet())
    stages: list[dict[str, Any]] = field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # PipeLink name -> constant read
    stage_ids: NameSet = field(default_factory=lambda: NameSet())
    # ONNX tensor name -> a shape value the model computes from symbolic dims (onnx/fold.py)
    symbolic: dict[str, Any] = field(default_factory=dict)
    # a shape value read as data -> the ONNX name of the tensor stages made holding it, made by
    # ``shape_values(graph, reader_node, name)`` (runtime_dims.read_as_data; it raises Unsupported)
    values: dict[str, str] = field(default_factory=dict)
    shape_values: Callable[[Any, Any, str], str] | None = None
    inputs: frozenset[str] = frozenset()  # the graph's input tensors (they exist before any stage runs)
    inferences: int = 0  # rounds of shape inference after folding so far (their dims' names are tagged)

    # -- names ---------------------------------------------------------------------------------------
    def name(self, onnx_name: str) -> str:
        """The PipeLink tensor name of an ONNX tensor (a valid, unique name; the same one every time)."""
        found = self.names.get(onnx_name)
        if found is None:
            found = unique_name(_valid_name(onnx_name, "t"), self.taken)
            self.names[onnx_name] = found
        return found

    def fresh(self, base: str) -> str:
        """A PipeLink tensor name no other tensor has: ``base`` (a valid name), or ``base_1``..."""
        return unique_name(base, self.taken)

    def tensor(self, onnx_name: str, node: Node | None = None) -> str:
        """The PipeLink name of an input a stage reads; a constant becomes a bound weight; a shape value the
        import evaluated (onnx/fold.py) read as data by ``node``'s stage, a tensor stages before it count
        (``shape_values``), once per value.

        Raises
        ------
        Unsupported
            The input is a shape value with a dim no earlier tensor has.
        """
        if onnx_name in self.symbolic:
            made = self.values.get(onnx_name)
            if made is None and node is not None and self.shape_values is not None:
                made = self.values[onnx_name] = self.shape_values(self, node, onnx_name)
            if made is None:
                raise Unsupported(
                    f"input {onnx_name!r} is a shape the model computes from dims known only when it runs; "
                    "PipeLink takes such shapes only as a Reshape's or an Expand's target (export with "
                    "fixed shapes, or constant-fold the model)"
                )
            return self.name(made) if made not in self.constants else self.tensor(made)
        name = self.name(onnx_name)
        if onnx_name in self.constants and name not in self.weights:
            array = self.constants[onnx_name]
            try:
                get_dtype(array.dtype)
            except PipeLinkError:
                raise Unsupported(
                    f"constant {onnx_name!r} has dtype {array.dtype}, which PipeLink lacks"
                ) from None
            self.weights[name] = array
        return name

    # -- reading a node ------------------------------------------------------------------------------
    def const(self, node: Node, index: int, what: str) -> np.ndarray | None:
        """The value of input ``index`` of ``node`` (None when absent); it must be a constant."""
        if index >= len(node.inputs) or not node.inputs[index]:
            return None
        onnx_name = node.inputs[index]
        if onnx_name not in self.constants and onnx_name in self.inputs:
            raise Unsupported(
                f"input {index} ({what}, {onnx_name!r}) must be a constant at import, and it is a graph "
                "input, known only when the model runs: give its value (import_model(..., "
                f"constants={{{onnx_name!r}: value}}), pipelink import --constant {onnx_name}=VALUE)",
                graph_input=onnx_name,
            )
        if onnx_name not in self.constants:
            raise Unsupported(
                f"input {index} ({what}, {onnx_name!r}) must be a constant (an initializer or a Constant "
                "node), but the graph computes it",
                needs=(onnx_name,),
            )
        return self.constants[onnx_name]

    def ints(self, node: Node, index: int, attr: str, what: str) -> list[int] | None:
        """Integers from a constant input (newer opsets) or, failing that, the attribute (older ones)."""
        value = self.const(node, index, what)
        if value is not None:
            value = np.asarray(value).reshape(-1)
            if value.dtype.kind not in "iub":  # the spec types these int64: a float one is malformed
                raise Unsupported(
                    f"input {index} ({what}, {node.inputs[index]!r}) must be integers (got {value.dtype})"
                )
            return [int(v) for v in value]
        if attr in node.attrs:
            return [int(v) for v in node.attrs[attr]]
        return None

    def stage(
        self, node: Node, operator: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any
    ) -> None:
        """Add one stage computing ``node`` (its outputs by default; absent optional ones get names).

        The attributes are checked against the operator's descriptor here, so a value PipeLink does
        not implement (Resize's mode 'cubic', say) is listed with the node, not found at load.
        """
        try:
            self.operators(operator).resolve_attrs(attrs, where=f"{node.op_type} as {operator}")
        except PipeLinkError as e:
            raise Unsupported(e.message) from None
        ins = [self.tensor(n, node) for n in inputs]
        outs = outputs if outputs is not None else node.outputs
        stage_id = unique_name(_valid_name(node.name or node.op_type, "node"), self.stage_ids)
        names = []
        for k, out in enumerate(outs):
            names.append(self.name(out) if out else unique_name(f"{stage_id}.out{k}", self.taken))
        while names and outs and not outs[-1]:  # trailing absent outputs: scratch the stage keeps
            names.pop()
            outs = outs[:-1]
        entry: dict[str, Any] = {"id": stage_id, "name": operator, "inputs": ins, "outputs": names}
        if attrs:
            entry["attrs"] = attrs
        self.stages.append(entry)


def _valid_name(name: str, prefix: str) -> str:
    name = _NAME_BAD.sub("_", name.strip("/")) or prefix
    return name if re.match(r"[A-Za-z_]", name) else f"{prefix}_{name}"


class NameSet(set):
    """Names in use, and per base name the next suffix worth trying: a lowering that names a thousand
    stages alike (an unrolled LSTM's) costs linear time, not quadratic (16 s of a 512-step import)."""

    def __init__(self, names: Any = ()) -> None:
        super().__init__(names)
        self.next: dict[str, int] = {}


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``... the first not in ``taken``, which it joins."""
    n = taken.next.get(name, 0) if isinstance(taken, NameSet) else 0
    candidate = f"{name}_{n}" if n else name
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    taken.add(candidate)
    if isinstance(taken, NameSet):
        taken.next[name] = n + 1
    return candidate


def dim_symbol(text: str) -> str:
    """A PipeLink dimension symbol for an ONNX ``dim_param`` ("batch_size" stays; "N+1" becomes "N_1")."""
    symbol = _SYMBOL_BAD.sub("_", text) or "d"
    return symbol if re.match(r"[A-Za-z_]", symbol) else f"d_{symbol}"


def float32_attr(value: Any) -> float:
    """An ONNX float attribute (float32) as the shortest decimal that reads back to it (1e-05, not
    9.999999747378752e-06)."""
    return float(repr(np.float32(value)).removeprefix("np.float32(").removesuffix(")"))


def onnx_dtype(elem_type: int) -> str:
    """The PipeLink dtype name of an ONNX element type."""
    from onnx import helper

    try:
        return get_dtype(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))).name
    except (KeyError, TypeError, ValueError, PipeLinkError):
        raise Unsupported(f"ONNX element type {elem_type} has no PipeLink dtype") from None


def shape_of(g: Graph, name: str) -> tuple | None:
    """A tensor's shape: a constant's own, else what shape inference found (None: unknown)."""
    return tuple(g.constants[name].shape) if name in g.constants else g.shapes.get(name)


def dtype_of(g: Graph, name: str) -> str | None:
    """A tensor's PipeLink dtype name: from the graph's types, else a constant's own (None: unknown)."""
    if name in g.dtypes:
        return g.dtypes[name]
    if name in g.constants:
        try:
            return get_dtype(g.constants[name].dtype).name
        except PipeLinkError:
            return str(g.constants[name].dtype)
    return None


def show_shape(shape: tuple | None) -> str:
    """A shape for a message: ``[?, 4]`` (None dims as ``?``), ``unknown`` for no shape."""
    return "unknown" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
