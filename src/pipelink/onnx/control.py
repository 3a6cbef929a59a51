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

A subgraph reads the enclosing graphs' tensors by name; every tensor and node it makes gets a new name,
unique in the model (``<node>/<then|else|iterT>/<name>``). Each copy of a subgraph is typed by ONNX shape
inference with the values it is given (not the types the subgraph declares, which a loop's later
iterations may not have). This module evaluates nothing itself (``fold.py`` does) and makes no stage; what
it cannot unroll exactly is refused with :class:`ControlError`, naming the input, attribute or value. The
unrolling is bounded (:data:`MAX_DEPTH` levels of nesting, :data:`MAX_INLINED` nodes made in all), so a
hostile file costs bounded time and memory.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from ..ops.shape import MAX_PARTS
from .fold import MAX_FOLD_ELEMENTS, fold
from .graph import ONNX_DOMAINS, Graph, NameSet, Node, Rejected, unique_name
from .infer import infer_shapes, inferable, known_dtypes, known_shapes, reinfer
from .recurrent import MAX_STEPS

__all__ = ["CONTROL_OPS", "MAX_DEPTH", "MAX_INLINED", "ControlError", "lower_control"]

#: The ONNX op types lowered here.
CONTROL_OPS = frozenset({"If", "Loop", "Scan"})
#: The deepest nesting of If, Loop and Scan lowered (a model's own nesting; protobuf stops near 30).
MAX_DEPTH = 16
#: The most nodes the lowering makes for one model, every branch and iteration together (a body of 16
#: nodes unrolled MAX_STEPS times). Each iteration costs a fold of its nodes and a shape inference, so
#: nested loops, which multiply their trip counts, are bounded by this rather than by MAX_STEPS alone.
MAX_INLINED = 16 * MAX_STEPS

#: Rounds of shape inference on what was lowered so far, for one model, when a trip count, a condition or a
#: scan length is not known after folding (as the import's own rounds after folding, ``_REFOLDS``).
MAX_RELEARN = 16

_NOT_TENSORS = {
    "sequence_type": "a sequence",
    "optional_type": "an optional",
    "map_type": "a map",
    "sparse_tensor_type": "a sparse tensor",
}


class ControlError(ValueError):
    """Why an If, Loop or Scan node cannot be lowered into plain nodes."""


def lower_control(onnx, model, g: Graph, nodes: list[Node], rejected: list[Rejected]) -> Iterator[Any]:
    """The NodeProtos of ``model``'s graph, each If, Loop and Scan replaced by the nodes it runs.

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


def _is_control(node) -> bool:
    return node.op_type in CONTROL_OPS and node.domain in ONNX_DOMAINS


def _subgraphs(node) -> list:
    return [sub for attr in node.attribute for sub in ([attr.g] if attr.HasField("g") else list(attr.graphs))]


def _all_names(graph) -> NameSet:
    """Every tensor name in ``graph`` and its subgraphs (the names a new one must not take)."""
    names, stack = NameSet(), [graph]
    while stack:
        sub = stack.pop()
        names.update(v.name for v in [*sub.input, *sub.output, *sub.value_info])
        names.update(t.name for t in sub.initializer)
        for node in sub.node:
            names.update(node.input)
            names.update(node.output)
            stack.extend(_subgraphs(node))
    return names


class _Scope:
    """The names of one copy of a subgraph (its name -> the name it is inlined as) inside the scope around
    it. The model's graph is the outermost: there a name stands for itself once something defines it."""

    def __init__(self, parent: _Scope | None, defined: set[str] | None = None) -> None:
        self.parent = parent
        self.names: dict[str, str] = {}
        self.ready: set[str] = set()  # made so far: a subgraph's nodes are in topological order
        self.defined = defined  # the outermost scope only: the model's names defined so far

    def lookup(self, name: str) -> str:
        """The inlined name of ``name`` (made or not yet)."""
        scope: _Scope | None = self
        while scope is not None:
            if scope.defined is not None:
                if name in scope.defined:
                    return name
                break
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        raise ControlError(
            f"a subgraph reads {name!r}, which neither it nor an enclosing graph defines before this node"
        )

    def resolve(self, name: str) -> str:
        """The inlined name of ``name``, which must already be made (a value read before its node runs
        is a cycle, or nodes out of order)."""
        scope: _Scope | None = self
        while scope is not None and scope.defined is None:
            if name in scope.names:
                if name not in scope.ready:
                    raise ControlError(
                        f"subgraph value {name!r} is read before the node making it (a cycle, or nodes out "
                        "of topological order)"
                    )
                return scope.names[name]
            scope = scope.parent
        return self.lookup(name)


class _Lowering:
    """One model's lowering: the names taken, the node budget left, the constants and inference made."""

    def __init__(self, onnx, model, g: Graph, nodes: list[Node], rejected: list[Rejected]) -> None:
        self.onnx, self.model, self.g, self.nodes, self.rejected = onnx, model, g, nodes, rejected
        self.outputs = {info.name for info in model.graph.output}
        self.taken = _all_names(model.graph)
        self.budget = MAX_INLINED
        self.folded = 0  # nodes[:folded] went through fold already
        self.scalars: dict[tuple, str] = {}  # (dtype, value) -> the constant's name
        self.inferred: dict[tuple, dict[str, tuple]] = {}  # a subgraph copy's types, by what it is given
        self.free: dict[int, tuple[Any, set[str]]] = {}  # id(subgraph) -> (it, the outer names it reads)
        self.protos: dict[int, Any] = {}  # id(Node) -> the NodeProto yielded for it
        self.relearn = MAX_RELEARN

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
                    self.rejected.append(Rejected(proto.op_type, proto.name or f"#{k}", str(e)))
            else:
                yield proto
            defined.update(o for o in proto.output if o)

    # -- one control node ------------------------------------------------------------------------------
    def lower(self, proto, inputs: list[str], outputs: list[str], label: str, scope: _Scope, depth: int):
        """The nodes computing ``proto`` (an If, Loop or Scan) on ``inputs`` into ``outputs`` (inlined
        names), each named under ``label``; its subgraphs read names through ``scope``."""
        if depth > MAX_DEPTH:
            raise ControlError(f"control flow nested more than {MAX_DEPTH} deep is not lowered")
        lowering = {"If": self._if, "Loop": self._loop, "Scan": self._scan}[proto.op_type]
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

    def _loop(self, proto, inputs, outputs, label, scope, depth):
        body = _graph_attr(proto, "body")
        trip_name = inputs[0] if inputs else ""
        cond_name = inputs[1] if len(inputs) > 1 else ""
        states = list(inputs[2:])
        n = len(states)
        if len(body.input) != n + 2:
            raise ControlError(
                f"the body has {len(body.input)} inputs; a Loop with {n} loop-carried values needs {n + 2} "
                "(iteration number, condition, the values)"
            )
        k = len(body.output) - 1 - n
        if k < 0 or len(outputs) > n + k:
            raise ControlError(
                f"the body has {len(body.output)} outputs and the node {len(outputs)}; the body makes the "
                f"condition, the {n} loop-carried values and then the scan outputs"
            )
        if "" in states:
            raise ControlError("an absent loop-carried input is not supported")
        trips = None
        if trip_name:
            value = self.constant(trip_name)
            if value is None:
                raise ControlError(
                    f"the trip count M ({trip_name!r}) is computed at run time; PipeLink unrolls a Loop at "
                    "import, so M must be a constant (an initializer, a Constant, or shape arithmetic that "
                    "folds)"
                )
            if value.size != 1 or value.dtype.kind not in "iu":
                raise ControlError(
                    f"the trip count M ({trip_name!r}) must be one integer (got {value.dtype})"
                )
            trips = max(int(value.reshape(-1)[0]), 0)
            if trips > MAX_STEPS:
                raise ControlError(
                    f"trip count {trips}; the import unrolls a Loop iteration by iteration, at most "
                    f"{MAX_STEPS} iterations (export with fewer, or run the loop as a native module)"
                )
        running = True
        if cond_name:
            running = self._truth(cond_name, "the condition input (input 1)")
        elif trips is None:
            raise ControlError("a Loop with neither a trip count nor a condition never ends")
        limit = MAX_STEPS if trips is None else trips
        if trips is not None:
            self._afford(trips * (self._size(body) + 1 + k), f"{trips} iterations of a body")
        scans: list[list[str]] = [[] for _ in range(k)]
        t = 0
        while running and t < limit:
            bound = {
                body.input[0].name: self._scalar(np.int64(t)),
                body.input[1].name: self._scalar(np.True_),
            }
            bound.update({info.name: value for info, value in zip(body.input[2:], states, strict=True)})
            bound.pop("", None)
            prefix = f"{label}/iter{t}"
            inner = self._instance(body, scope, bound, prefix, counter=body.input[0].name)
            yield from self._emit(body, inner, prefix, depth)
            made = [inner.resolve(out.name) for out in body.output]
            if cond_name:  # without a condition input the body's condition is ignored (the spec's table)
                running = self._truth(made[0], f"the body's condition (output 0, {body.output[0].name!r})", t)
            states = made[1 : 1 + n]
            for j in range(k):
                scans[j].append(made[1 + n + j])
            t += 1
        if running and trips is None:
            raise ControlError(
                f"the Loop has no trip count and its condition is still true after {MAX_STEPS} iterations, "
                "the most the import unrolls"
            )
        yield from self._finish(states, scans, [0] * k, outputs, label, "the loop runs no iteration")

    def _scan(self, proto, inputs, outputs, label, scope, depth):
        if self.g.opset < 9:
            raise ControlError(
                f"Scan of opset {self.g.opset} (a batch axis and sequence_lens) is not supported; convert "
                "the model to opset 9 or later"
            )
        body = _graph_attr(proto, "body")
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in proto.attribute if a.name != "body"}
        if "num_scan_inputs" not in attrs:
            raise ControlError("attribute num_scan_inputs is missing")
        m = int(attrs["num_scan_inputs"])
        n = len(inputs) - m
        if m < 1 or n < 0 or len(body.input) != n + m:
            raise ControlError(
                f"num_scan_inputs={m} with {len(inputs)} inputs and a body of {len(body.input)} inputs; the "
                "body takes the state variables, then one element of each scan input"
            )
        k = len(body.output) - n
        if k < 0 or len(outputs) > n + k:
            raise ControlError(
                f"the body has {len(body.output)} outputs and the node {len(outputs)}; the body makes the "
                f"{n} state variables, then the scan outputs' elements"
            )
        in_axes = _ints(attrs, "scan_input_axes", m)
        in_dirs = _ints(attrs, "scan_input_directions", m, directions=True)
        out_axes = _ints(attrs, "scan_output_axes", k)
        out_dirs = _ints(attrs, "scan_output_directions", k, directions=True)
        xs = inputs[n:]
        if "" in inputs:
            raise ControlError("an absent input is not supported (every state and scan input is needed)")
        length, axes = None, []
        for j, x in enumerate(xs):
            shape = self.known_shape(x, axis=in_axes[j])
            if shape is None:
                raise ControlError(f"scan input {j} ({x!r}) has a shape unknown at import")
            rank = len(shape)
            if not -rank <= in_axes[j] < rank:
                raise ControlError(f"scan_input_axes[{j}]={in_axes[j]} is out of range for rank {rank}")
            axis = in_axes[j] % rank
            size = shape[axis]
            if not isinstance(size, int):
                raise ControlError(
                    f"scan input {j} ({x!r}) has its scan axis {axis} of size {size or 'unknown'}, known "
                    "only when the model runs; PipeLink unrolls a Scan at import (export with a fixed "
                    "sequence length)"
                )
            if length is not None and size != length:
                raise ControlError(
                    f"scan input {j} ({x!r}) has {size} elements along its scan axis, input 0 {length}"
                )
            length = size
            axes.append(axis)
        if length > MAX_STEPS:
            raise ControlError(
                f"sequence length {length}; the import unrolls a Scan step by step, at most {MAX_STEPS} "
                "steps (export with shorter sequences, or run the scan as a native module)"
            )
        self._afford(length * (self._size(body) + m + k), f"{length} steps of a body")
        states = list(inputs[:n])
        scans: list[list[str]] = [[] for _ in range(k)]
        for t in range(length):
            prefix = f"{label}/iter{t}"
            elements = []
            for j, x in enumerate(xs):
                index = t if in_dirs[j] == 0 else length - 1 - t
                element = self._fresh(prefix, f"in{j}")
                yield self._glue(
                    "Gather", [x, self._scalar(np.int64(index))], [element], f"{prefix}/in{j}", axis=axes[j]
                )
                shape = self.shape(x)
                self._record(element, self.dtype(x), shape[: axes[j]] + shape[axes[j] + 1 :])
                elements.append(element)
            bound = {info.name: v for info, v in zip(body.input, states + elements, strict=True)}
            inner = self._instance(body, scope, bound, prefix)
            yield from self._emit(body, inner, prefix, depth)
            made = [inner.resolve(out.name) for out in body.output]
            states = made[:n]
            for j in range(k):
                scans[j].append(made[n + j])
        for j in range(k):
            if out_dirs[j]:  # prepended each iteration: the last iteration's element first
                scans[j].reverse()
        yield from self._finish(states, scans, out_axes, outputs, label, "the scan axis is empty")

    def _finish(self, states, scans, axes, outputs, label, why_empty):
        """The final loop-carried values (copied into the node's outputs) and the scan outputs stacked."""
        for j, state in enumerate(states):
            y = outputs[j] if j < len(outputs) else ""
            if y:
                yield self._glue("Identity", [state], [y], f"{label}/final{j}")
                self._record(y, self.dtype(state), self.shape(state))
        for j, parts in enumerate(scans):
            y = outputs[len(states) + j] if len(states) + j < len(outputs) else ""
            if not y:
                continue
            if not parts:
                raise ControlError(
                    f"{why_empty}, so scan output {y!r} would be empty; PipeLink has no empty tensors"
                )
            yield from self._stack(parts, axes[j], y, f"{label}/scan{j}")

    def _stack(self, parts: list[str], axis: int, y: str, prefix: str):
        """``parts`` (one shape) stacked along a new ``axis`` of ``y``: an unsqueeze each, then a tree of
        concats of at most MAX_PARTS inputs."""
        shapes = [self.shape(p) for p in parts]
        known = [s for s in shapes if s is not None and _known(s)]
        if any(s != known[0] for s in known):
            first = next(t for t, s in enumerate(shapes) if s == known[0])
            other = next(t for t, s in enumerate(shapes) if s in known and s != known[0])
            raise ControlError(
                f"scan output {y!r} changes shape across iterations ({_describe(shapes[first])} in iteration "
                f"{first}, {_describe(shapes[other])} in iteration {other}); the spec requires one shape"
            )
        element = shapes[0]
        if axis < 0:
            if element is None:
                raise ControlError(
                    f"scan output {y!r} has a negative axis {axis} and an element of unknown rank"
                )
            axis += len(element) + 1
        if element is not None and not 0 <= axis <= len(element):
            raise ControlError(
                f"scan_output_axes {axis} is out of range for an element of rank {len(element)}"
            )
        dtype = self.dtype(parts[0])
        unsqueezed = []
        for t, part in enumerate(parts):
            out = y if len(parts) == 1 else self._fresh(prefix, f"elem{t}")
            yield self._unsqueeze(part, out, axis, f"{prefix}/elem{t}")
            if element is not None:
                self._record(out, dtype, element[:axis] + (1,) + element[axis:])
            unsqueezed.append(out)
        level = 0
        while len(unsqueezed) > 1:
            joined = []
            for start in range(0, len(unsqueezed), MAX_PARTS):
                group = unsqueezed[start : start + MAX_PARTS]
                last = len(unsqueezed) <= MAX_PARTS
                out = y if last else self._fresh(prefix, f"join{level}_{start // MAX_PARTS}")
                if len(group) == 1:
                    joined.append(group[0])
                    continue
                yield self._glue("Concat", group, [out], f"{prefix}/join{level}", axis=axis)
                joined.append(out)
            unsqueezed, level = joined, level + 1
        if element is not None:
            self._record(y, dtype, element[:axis] + (len(parts),) + element[axis:])

    # -- one copy of a subgraph ------------------------------------------------------------------------
    def _instance(
        self, sub, scope: _Scope, bound: dict[str, str], prefix: str, direct=None, counter: str = ""
    ) -> _Scope:
        """A new scope for one copy of ``sub``: its inputs ``bound`` to values, its initializers new
        constants, every tensor its nodes make a new name (``direct`` names some), typed by inference
        (``counter``, a Loop's iteration number, by its type alone: every iteration then infers alike)."""
        self._spend(self._size(sub))
        if len(sub.sparse_initializer):
            raise ControlError(f"subgraph {sub.name!r} has sparse initializers, which are not supported")
        inner = _Scope(scope)
        for name, value in bound.items():
            inner.names[name] = value
            inner.ready.add(name)
        for init in sub.initializer:
            name = self._fresh(prefix, init.name)
            self._constant(name, self.onnx.numpy_helper.to_array(init))
            inner.names[init.name] = name
            inner.ready.add(init.name)
        direct = direct or {}
        for node in sub.node:
            for out in node.output:
                if not out:
                    continue
                if out in inner.names:
                    raise ControlError(f"subgraph {sub.name!r} makes {out!r} twice (or over an input)")
                inner.names[out] = direct.get(out) or self._fresh(prefix, out)
        for name in self._free_names(sub):
            inner.lookup(name)  # a name nothing defines is refused before anything is made
        for name, (dtype, shape) in self._infer(sub, inner, counter).items():
            target = inner.names.get(name)
            if target is not None and name not in bound:
                self._record(target, dtype, shape)
        return inner

    def _emit(self, sub, inner: _Scope, prefix: str, depth: int) -> Iterator[Any]:
        """``sub``'s nodes renamed into ``inner``; a nested If, Loop or Scan lowered in turn."""
        for node in sub.node:
            inputs = [inner.resolve(name) if name else "" for name in node.input]
            outputs = [inner.names[name] if name else "" for name in node.output]
            name = f"{prefix}/{node.name or node.op_type}"
            if _is_control(node):
                try:
                    yield from self.lower(node, inputs, outputs, name, inner, depth + 1)
                except ControlError as e:
                    raise ControlError(f"{node.op_type} {name!r}: {e}") from None
            else:
                copy = self.onnx.NodeProto()
                copy.CopyFrom(node)
                del copy.input[:]
                del copy.output[:]
                copy.input.extend(inputs)
                copy.output.extend(outputs)
                copy.name = name
                yield copy
            inner.ready.update(out for out in node.output if out)

    def _free_names(self, sub, depth: int = 0) -> set[str]:
        """The names ``sub`` (and the subgraphs in it) reads from the scopes around it."""
        cached = self.free.get(id(sub))
        if cached is not None and cached[0] is sub:
            return cached[1]
        if depth > MAX_DEPTH:
            raise ControlError(f"control flow nested more than {MAX_DEPTH} deep is not lowered")
        defined = {v.name for v in sub.input} | {t.name for t in sub.initializer}
        reads: set[str] = set()
        for node in sub.node:
            reads.update(name for name in node.input if name)
            for nested in _subgraphs(node):
                reads |= self._free_names(nested, depth + 1)
            defined.update(node.output)
        free = reads - defined
        self.free[id(sub)] = (sub, free)
        return free

    def _infer(self, sub, inner: _Scope, counter: str = "") -> dict[str, tuple]:
        """ONNX shape inference of one copy of ``sub``: its inputs and the outer names it reads typed
        (small constants with their values) as the values it is given; name -> (dtype, shape)."""
        onnx, helper = self.onnx, self.onnx.helper
        inputs, inits, key = [], [], [id(sub)]
        given = [(info.name, inner.names.get(info.name, "")) for info in sub.input]
        outer = [(name, inner.lookup(name)) for name in sorted(self._free_names(sub))]
        for local, name in given + outer:
            value = self.g.constants.get(name)
            if value is not None and np.asarray(value).size <= MAX_FOLD_ELEMENTS and local != counter:
                array = np.asarray(value)
                inits.append(onnx.numpy_helper.from_array(array, local))
                key.append((local, array.dtype.str, array.shape, array.tobytes()))
                continue
            dtype, shape = self.dtype(name), self.shape(name)
            elem = _elem_type(helper, dtype)
            info = onnx.ValueInfoProto(name=local)
            if elem:
                dims = None if shape is None else [d if isinstance(d, int) else (d or None) for d in shape]
                info = helper.make_tensor_value_info(local, elem, dims)
            inputs.append(info)
            key.append((local, dtype, shape))
        key = tuple(key)
        if key in self.inferred and self.inferred[key][0] is sub:
            return self.inferred[key][1]
        graph = helper.make_graph(
            list(sub.node),
            sub.name or "subgraph",
            inputs,
            [onnx.ValueInfoProto(name=out.name) for out in sub.output],
            [*inits, *sub.initializer],
        )
        trial = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        trial.ir_version = self.model.ir_version
        found: dict[str, tuple] = {}
        if inferable(trial):
            inferred = infer_shapes(onnx, trial)  # a help: None when it fails (in a child process)
            if inferred is not None:
                dtypes, shapes = known_dtypes(onnx, inferred.graph), known_shapes(inferred.graph)
                found = {name: (dtypes.get(name), shapes.get(name)) for name in dtypes.keys() | shapes.keys()}
        self.inferred[key] = (sub, found)
        return found

    # -- what the lowering reads and makes -------------------------------------------------------------
    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name`` once what was yielded so far is folded, and, where that is not enough,
        shape inference has run on it again (None: computed at run time)."""
        fold(self.g, self.nodes[self.folded :], self.outputs)
        self.folded = len(self.nodes)
        while name not in self.g.constants and self._learn():
            pass
        value = self.g.constants.get(name)
        return None if value is None else np.asarray(value)

    def known_shape(self, name: str, axis: int | None = None) -> tuple | None:
        """The shape of ``name``; while it (its dim ``axis``, or every dim) is unknown, what was yielded
        so far is folded and inferred again."""

        def unknown(shape):
            if shape is None:
                return True
            if axis is None:
                return not _known(shape)
            return not -len(shape) <= axis < len(shape) or not isinstance(shape[axis], int)

        fold(self.g, self.nodes[self.folded :], self.outputs)
        self.folded = len(self.nodes)
        while unknown(self.shape(name)) and self._learn():
            pass
        return self.shape(name)

    def _learn(self) -> bool:
        """One round of the import's shape inference after folding (``reinfer``) on the nodes yielded so
        far, then all of them folded again (a Shape once symbolic may now be a constant); True when it
        learned a shape. At most MAX_RELEARN rounds a model: each infers the whole prefix."""
        if self.relearn <= 0:
            return False
        self.relearn -= 1
        kept = fold(self.g, self.nodes, self.outputs)
        if not reinfer(self.onnx, self.model, self.g, kept, self.protos):
            return False
        self.g.symbolic.clear()
        fold(self.g, self.nodes, self.outputs)
        self.folded = len(self.nodes)
        return True

    def _truth(self, name: str, what: str, iteration: int | None = None) -> bool:
        value = self.constant(name)
        when = "" if iteration is None else f" in iteration {iteration}"
        if value is None:
            raise ControlError(
                f"{what} ({name!r}) is computed at run time{when}; PipeLink unrolls a Loop at import, so its "
                "condition must fold to a constant in every iteration"
            )
        if value.size != 1:
            raise ControlError(f"{what} ({name!r}) has {value.size} elements{when}; a condition has one")
        return bool(value.reshape(-1)[0])

    def dtype(self, name: str) -> str | None:
        if name in self.g.constants:
            try:
                return get_dtype(np.asarray(self.g.constants[name]).dtype).name
            except PipeLinkError:
                return None
        return self.g.dtypes.get(name)

    def shape(self, name: str) -> tuple | None:
        if name in self.g.constants:
            return tuple(np.shape(self.g.constants[name]))
        return self.g.shapes.get(name)

    def _record(self, name: str, dtype: str | None, shape: tuple | None) -> None:
        """The type of a tensor the lowering makes; a node output the model's own inference typed must
        agree (a subgraph declaring input shapes its values do not have misleads that inference)."""
        if dtype:
            self.g.dtypes[name] = dtype
        if shape is None:
            return
        old = self.g.shapes.get(name)
        if old is not None and (
            len(old) != len(shape)
            or any(
                isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(old, shape, strict=True)
            )
        ):
            raise ControlError(
                f"{name!r} is {_describe(shape)} once unrolled, but the model's shape inference says "
                f"{_describe(old)} (does a subgraph declare input shapes its values do not have?)"
            )
        if old is None or sum(isinstance(d, int) for d in shape) >= sum(isinstance(d, int) for d in old):
            self.g.shapes[name] = tuple(shape)

    def _fresh(self, prefix: str, name: str) -> str:
        return unique_name(f"{prefix}/{name}", self.taken)

    def _constant(self, name: str, value: np.ndarray) -> None:
        self.g.constants[name] = value
        with contextlib.suppress(PipeLinkError):  # a dtype PipeLink lacks: whoever reads it says so
            self.g.dtypes[name] = get_dtype(value.dtype).name

    def _scalar(self, value: np.generic) -> str:
        """The name of a 0-d constant (one per value: an iteration number, an index, True)."""
        key = (np.asarray(value).dtype.str, value.item())
        if key not in self.scalars:
            name = unique_name(f"control/{value.item()}", self.taken)
            self._constant(name, np.asarray(value))
            self.scalars[key] = name
        return self.scalars[key]

    def _spend(self, count: int) -> None:
        """Take ``count`` nodes from the budget (a copy of a subgraph counts the subgraphs in it too)."""
        if count > self.budget:
            raise ControlError(
                f"unrolling makes more than {MAX_INLINED} nodes in all (nested loops multiply their "
                "iterations), the most the import makes"
            )
        self.budget -= count

    def _afford(self, count: int, what: str) -> None:
        """Refuse before anything is made when an unrolling would take more nodes than are left."""
        if count > self.budget:
            raise ControlError(
                f"{what} unrolls into some {count} nodes; the import makes at most {MAX_INLINED} in all "
                f"({self.budget} left), nested loops multiplying their iterations (export with fewer "
                "iterations, or run the loop as a native module)"
            )

    def _size(self, sub) -> int:
        """The nodes of ``sub`` and of every subgraph in it."""
        count, stack = 0, [sub]
        while stack:
            graph = stack.pop()
            count += len(graph.node)
            for node in graph.node:
                stack.extend(_subgraphs(node))
        return count

    def _glue(self, op_type: str, inputs: list[str], outputs: list[str], name: str, **attrs: Any):
        self._spend(1)
        return self.onnx.helper.make_node(op_type, inputs, outputs, name=name, **attrs)

    def _unsqueeze(self, x: str, out: str, axis: int, name: str):
        if self.g.opset >= 13:  # the axes an input from opset 13, an attribute before
            key = ("axes", axis)
            if key not in self.scalars:
                self.scalars[key] = unique_name(f"control/axes{axis}", self.taken)
                self._constant(self.scalars[key], np.array([axis], np.int64))
            return self._glue("Unsqueeze", [x, self.scalars[key]], [out], name)
        return self._glue("Unsqueeze", [x], [out], name, axes=[axis])


def _graph_attr(proto, name: str):
    for attr in proto.attribute:
        if attr.name == name and attr.HasField("g"):
            return attr.g
    raise ControlError(f"attribute {name} (a graph) is missing")


def _ints(attrs: dict, name: str, count: int, directions: bool = False) -> list[int]:
    values = [int(v) for v in attrs.get(name, [0] * count)]
    if len(values) != count:
        raise ControlError(f"attribute {name} has {len(values)} entries; it needs {count}")
    if directions and any(v not in (0, 1) for v in values):
        raise ControlError(f"attribute {name}={values}: a direction is 0 (forward) or 1 (reverse)")
    return values


def _elem_type(helper, dtype: str | None) -> int:
    if not dtype:
        return 0
    try:
        return int(helper.np_dtype_to_tensor_dtype(get_dtype(dtype).numpy))
    except (KeyError, TypeError, ValueError, PipeLinkError):
        return 0


def _known(shape: tuple) -> bool:
    return all(isinstance(d, int) for d in shape)


def _same_type(a: tuple, b: tuple) -> bool:
    """Both dtypes known and equal, and both shapes known (ints, or one dim_param name) and equal."""
    (a_dtype, a_shape), (b_dtype, b_shape) = a, b
    if not a_dtype or a_dtype != b_dtype or a_shape is None or b_shape is None:
        return False
    return len(a_shape) == len(b_shape) and all(
        x is not None and x == y for x, y in zip(a_shape, b_shape, strict=True)
    )


def _describe(shape: tuple | None) -> str:
    if shape is None:
        return "unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _describe_type(kind: tuple) -> str:
    dtype, shape = kind
    return f"{dtype or 'an unknown dtype'} {_describe(shape)}"
