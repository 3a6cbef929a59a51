"""ONNX If, Loop and Scan lowered at import into the plain nodes they run: a PipeLink pipeline is a static
graph, so a branch is inlined and a loop unrolled before folding, and the nodes made are folded, fused and
converted like the model's own (shape arithmetic inside a branch folds).

- ``If`` whose condition folds to a constant: the taken branch's nodes. With a condition computed at run
  time: both branches' nodes and a ``Where`` per output, which needs both branches' outputs of one dtype
  and one shape known at import.
- ``Loop`` with a trip count and a condition that fold to constants (the body's condition too, iteration
  by iteration): the body once per iteration, at most :data:`~pipelink.onnx.recurrent.MAX_STEPS`; the
  loop-carried values flow from one copy to the next, the scan outputs are stacked along a new axis 0.
- ``Scan`` (opset 9+): the body once per element of the scan axis (its length known at import), each scan
  input's element a ``Gather`` (scan_input_axes, scan_input_directions), the state variables carried, the
  scan outputs stacked along scan_output_axes in scan_output_directions' order.
- ``FlexAttention`` (``ai.onnx.preview``): its function body's plain nodes, score_mod and prob_mod
  inlined like a branch (``flex_attention.py``).

A subgraph reads the enclosing graphs' tensors by name; every tensor and node it makes gets a new name,
unique in the model (``<node>/<then|else|iterT>/<name>``). Each copy of a subgraph is typed by ONNX shape
inference with the values it is given (not the types the subgraph declares, which a loop's later
iterations may not have). This module evaluates nothing itself (``fold.py`` does) and makes no stage; what
it cannot unroll exactly is refused with :class:`ControlError`, naming the input, attribute or value. The
unrolling is bounded (:data:`MAX_DEPTH` levels of nesting, :data:`MAX_INLINED` nodes made in all), so a
hostile file costs bounded time and memory.

The If lowering and the driver are here; Loop and Scan are ``control_unroll.py``, the copy of a subgraph
(its scope, renaming, typing and node budget) ``control_inline.py``, bounds and names ``control_scope.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from .control_scope import (
    CONTROL_OPS,
    MAX_DEPTH,
    MAX_INLINED,
    ControlError,
    _describe,
    _describe_type,
    _graph_attr,
    _is_control,
    _known,
    _same_type,
    _Scope,
)
from .control_unroll import _Unrolling
from .flex_attention import _FlexAttention
from .graph import Graph, Node, Rejected

__all__ = ["CONTROL_OPS", "MAX_DEPTH", "MAX_INLINED", "ControlError", "lower_control"]

_NOT_TENSORS = {
    "sequence_type": "a sequence",
    "optional_type": "an optional",
    "map_type": "a map",
    "sparse_tensor_type": "a sparse tensor",
}


def lower_control(onnx, model, g: Graph, nodes: list[Node], rejected: list[Rejected]) -> Iterator[Any]:
    """The NodeProtos of ``model``'s graph, each If, Loop, Scan and FlexAttention replaced by the nodes it
    runs.

    Parameters
    ----------
    onnx
        The onnx module.
    model : onnx.ModelProto
        The model (after shape inference).
    g : Graph
        The import's graph: constants made here (iteration numbers, a subgraph's initializers) go to
        ``g.constants``, the types of the tensors made to ``g.dtypes`` and ``g.shapes``.
    nodes : list of Node
        The list the caller appends each yielded node to, as it takes it: what was yielded so far is
        folded (``fold.py``) when a condition or a trip count must be known.
    rejected : list of Rejected
        Where a control node that cannot be lowered is listed (and nothing is yielded for it).

    Yields
    ------
    onnx.NodeProto
        The model's own nodes, and for each control node the renamed nodes of what it runs, in order.
    """
    if not any(_is_control(node) for node in model.graph.node):
        yield from model.graph.node
        return
    lowering = _Lowering(onnx, model, g, nodes, rejected)
    for proto in lowering.run():
        before = len(nodes)
        yield proto
        if len(nodes) > before:  # taken as a node (a Constant is taken as a constant)
            lowering.protos[id(nodes[-1])] = proto


class _Lowering(_Unrolling, _FlexAttention):
    """One model's lowering: the names taken, the node budget left, the constants and inference made."""

    def run(self) -> Iterator[Any]:
        graph = self.model.graph
        defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        top = _Scope(None, defined)
        for k, proto in enumerate(graph.node):
            if _is_control(proto):
                label = proto.name or f"{proto.op_type.lower()}{k}"
                try:
                    yield from self.lower(proto, list(proto.input), list(proto.output), label, top, 1)
                except ControlError as e:
                    self.rejected.append(
                        Rejected(proto.op_type, proto.name or f"#{k}", str(e), needs=e.needs)
                    )
            else:
                yield proto
            defined.update(o for o in proto.output if o)

    # -- one control node ------------------------------------------------------------------------------
    def lower(self, proto, inputs: list[str], outputs: list[str], label: str, scope: _Scope, depth: int):
        """The nodes computing ``proto`` (an If, Loop, Scan or FlexAttention) on ``inputs`` into
        ``outputs`` (inlined names), each named under ``label``; its subgraphs read names through
        ``scope``."""
        if depth > MAX_DEPTH:
            raise ControlError(f"control flow nested more than {MAX_DEPTH} deep is not lowered")
        lowering = {
            "If": self._if,
            "Loop": self._loop,
            "Scan": self._scan,
            "FlexAttention": self._flex_attention,
        }[proto.op_type]
        return lowering(proto, inputs, outputs, label, scope, depth)

    def _if(self, proto, inputs, outputs, label, scope, depth):
        branches = {name: _graph_attr(proto, name) for name in ("then_branch", "else_branch")}
        for name, branch in branches.items():
            if len(branch.output) != len(outputs):
                raise ControlError(f"{name} has {len(branch.output)} outputs, the node {len(outputs)}")
            if len(branch.input):
                raise ControlError(f"{name} declares inputs; an If branch takes none")
        cond = inputs[0] if inputs else ""
        if not cond:
            raise ControlError("If needs its condition (input 0)")
        value = self.constant(cond)
        if value is not None:
            if value.size != 1:
                raise ControlError(f"the condition {cond!r} has {value.size} elements; If takes one")
            what = "then" if bool(value.reshape(-1)[0]) else "else"
            yield from self._inline_taken(
                branches[f"{what}_branch"], outputs, f"{label}/{what}", scope, depth
            )
            return
        dtype, shape = self.dtype(cond), self.known_shape(cond)
        if dtype != "bool" or shape is None or not _known(shape) or math.prod(shape) != 1:
            raise ControlError(
                f"the condition {cond!r} is computed at run time, so both branches run and `where` selects; "
                f"that needs a bool of one element known at import (got {dtype or 'an unknown dtype'}, shape "
                f"{_describe(shape)})"
            )
        for name, branch in branches.items():
            for k, out in enumerate(branch.output):
                kind = _NOT_TENSORS.get(out.type.WhichOneof("value"))
                if kind:
                    raise ControlError(
                        f"{name}'s output {k} ({out.name!r}) is {kind}; PipeLink selects tensors only"
                    )
        made = {}
        for what, branch in (("then", branches["then_branch"]), ("else", branches["else_branch"])):
            made[what] = self._instance(branch, scope, {}, f"{label}/{what}")
        picks = []
        for k, (t_out, e_out, y) in enumerate(
            zip(branches["then_branch"].output, branches["else_branch"].output, outputs, strict=True)
        ):
            then_name, else_name = made["then"].lookup(t_out.name), made["else"].lookup(e_out.name)
            then_type = (self.dtype(then_name), self.shape(then_name))
            else_type = (self.dtype(else_name), self.shape(else_name))
            if not _same_type(then_type, else_type):
                raise ControlError(
                    f"output {k} ({y or t_out.name!r}): then_branch makes {_describe_type(then_type)}, "
                    f"else_branch {_describe_type(else_type)}; with a condition computed at run time both "
                    "branches run and `where` selects, so they must agree in dtype and shape known at import "
                    "(a condition that folds to a constant inlines only the taken branch)"
                )
            picks.append((then_name, else_name, y, then_type))
        for what in ("then", "else"):
            yield from self._emit(branches[f"{what}_branch"], made[what], f"{label}/{what}", depth)
        if shape:  # a [1] (or [1, 1]) condition: where would broadcast it into the outputs
            scalar = self._fresh(label, "cond")
            yield self._glue("Squeeze", [cond], [scalar], f"{label}/cond")
            self._record(scalar, "bool", ())
            cond = scalar
        for then_name, else_name, y, (out_dtype, out_shape) in picks:
            if not y:
                continue
            if then_name == else_name:
                yield self._glue("Identity", [then_name], [y], f"{label}/out")
            else:
                yield self._glue("Where", [cond, then_name, else_name], [y], f"{label}/select")
            self._record(y, out_dtype, out_shape)

    def _inline_taken(self, branch, outputs, prefix, scope, depth):
        """The branch an If takes: its nodes make the If's outputs directly where they can."""
        made_here = {o for node in branch.node for o in node.output if o}
        direct: dict[str, str] = {}
        for out, y in zip(branch.output, outputs, strict=True):
            if y and out.name in made_here and out.name not in direct:
                direct[out.name] = y
        inner = self._instance(branch, scope, {}, prefix, direct)
        yield from self._emit(branch, inner, prefix, depth)
        for out, y in zip(branch.output, outputs, strict=True):
            if y and direct.get(out.name) != y:
                source = inner.resolve(out.name)
                yield self._glue("Identity", [source], [y], f"{prefix}/out")
                self._record(y, self.dtype(source), self.shape(source))
