"""One copy of a subgraph inlined (the machinery of ``control.py``): its inputs bound, its tensors renamed,
its types inferred; and what the lowering reads (values once folded, dtypes, shapes) and makes (constants,
glue nodes), within its node budget. It evaluates nothing itself (``fold.py`` does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from .control_scope import (
    MAX_DEPTH,
    MAX_INLINED,
    MAX_RELEARN,
    ControlError,
    _all_names,
    _describe,
    _elem_type,
    _is_control,
    _known,
    _Scope,
    _subgraphs,
)
from .fold import MAX_FOLD_ELEMENTS, fold
from .graph import Graph, Node, Rejected, unique_name
from .infer import infer_shapes, inferable, known_dtypes, known_shapes, reinfer

__all__: list[str] = []


class _Inlining:
    """The state of one model's lowering and the copying of subgraphs into it; ``lower`` (an If, Loop or
    Scan nested in a subgraph, called by ``_emit``) is ``control.py``'s ``_Lowering``'s."""

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
                    raise ControlError(f"{node.op_type} {name!r}: {e}", needs=e.needs) from None
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
                "condition must fold to a constant in every iteration",
                needs=(name,),
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
