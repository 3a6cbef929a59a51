"""The shared ground of lowering If, Loop and Scan (``control.py``): the bounds, the error, one copy of a
subgraph's scope of names, and the small readers of graph attributes and types. It makes no node.
"""

from __future__ import annotations

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from .graph import ONNX_DOMAINS, NameSet
from .recurrent import MAX_STEPS

__all__ = ["CONTROL_OPS", "FLEX_ATTENTION", "MAX_DEPTH", "MAX_INLINED", "MAX_RELEARN", "ControlError"]

#: The ONNX op types lowered here.
CONTROL_OPS = frozenset({"If", "Loop", "Scan"})
#: (domain, op type) of the one operator of another domain lowered here too (``flex_attention.py``).
FLEX_ATTENTION = ("ai.onnx.preview", "FlexAttention")
#: The deepest nesting of If, Loop and Scan lowered (a model's own nesting; protobuf stops near 30).
MAX_DEPTH = 16
#: The most nodes the lowering makes for one model, every branch and iteration together (a body of 16
#: nodes unrolled MAX_STEPS times). Each iteration costs a fold of its nodes and a shape inference, so
#: nested loops, which multiply their trip counts, are bounded by this rather than by MAX_STEPS alone.
MAX_INLINED = 16 * MAX_STEPS

#: Rounds of shape inference on what was lowered so far, for one model, when a trip count, a condition or a
#: scan length is not known after folding (as the import's own rounds after folding, ``_REFOLDS``).
MAX_RELEARN = 16


class ControlError(ValueError):
    """Why an If, Loop or Scan node cannot be lowered into plain nodes; ``needs``: the tensors computed
    at run time whose values would let it (a Loop's trip count, its condition)."""

    def __init__(self, why: str, *, needs: tuple[str, ...] = ()):
        super().__init__(why)
        self.needs = tuple(needs)


def _is_control(node) -> bool:
    if (node.domain, node.op_type) == FLEX_ATTENTION:
        return True
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
