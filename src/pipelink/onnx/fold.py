"""Import-time evaluation of what a model computes from constants and shapes (before the fusions).

A model exported with a dynamic batch computes its Reshape targets at run time: ``Shape(x)``, then
``Gather``, ``Unsqueeze``, ``Concat``... of the dims. PipeLink's reshape and expand take their targets as
attributes, so the import evaluates that arithmetic here:

- a ``Shape`` of a tensor whose shape inference knows every dim is a constant, and so is any small node
  of :data:`FOLDABLE` whose inputs are all constants (evaluated by onnx's reference implementation, at most
  :data:`MAX_FOLD_ELEMENTS` elements in and out): the scale ``1 / sqrt(head_dim)`` an export computes from
  a shape becomes a constant the fusions see;
- a ``Shape`` with symbolic dims is a *shape value*: a list whose entries are ints or :class:`Dim` (a dim
  of some tensor, by its ``dim_param`` name where shape inference has one). Gather, Unsqueeze, Squeeze,
  Concat, Slice, Cast and Identity follow it; arithmetic on a symbolic entry gives an unknown Dim, which
  a dim times an int stays known as a multiple of (``batch * heads``).
- Reshape and Expand read a shape value through :func:`reshape_target` and :func:`expand_target`: an
  entry that is the input's own dim at that place becomes 0 (Reshape: copy it) or 1 (Expand: keep it), one
  unknown entry of a Reshape becomes -1 (with a -1 beside a multiple, the element count resolves the
  -1), and anything else is refused with the reason.

Folded nodes leave the graph; a node reading a shape value it cannot use is refused by its converter (its
input "must be a constant"), so nothing is half-imported.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from ..ops.indexing.reference import scatter_elements
from ..ops.shape.rules import slice_plan

if TYPE_CHECKING:  # convert.py imports this module: the types only
    from .graph import Graph, Node

__all__ = [
    "Dim",
    "FOLDABLE",
    "FOLD_ONLY",
    "unfolded_needs",
    "MAX_FOLD_ELEMENTS",
    "MAX_TABLE_ELEMENTS",
    "fold_limit",
    "Unfoldable",
    "fold",
    "reshape_target",
    "expand_target",
    "resolved_target",
    "unfolded_reason",
    "describe_value",
    "multiple_name",
    "offset_name",
    "product_name",
    "split_offset",
    "split_multiple",
    "split_product",
]

#: Nodes evaluated at import when every input is a constant (deterministic, small). Not Identity: an
#: Identity of a weight becomes another name of the same array (:func:`_fold_identity`), not a copy. Not Slice
#: here: onnx's reference follows NumPy's clamping for negative steps, not the spec's, so a Slice of
#: constants is evaluated by the slice operator's own rule (:func:`_fold_slice`).
FOLDABLE = frozenset(
    {
        "Cast",
        "Gather",
        "Unsqueeze",
        "Squeeze",
        "Concat",
        "Reshape",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Sqrt",
        "Pow",
        "Neg",
        "Abs",
        "Equal",
        "Less",
        "Greater",
        "Not",
        "Where",
        "Min",
        "Max",
        "ConstantOfShape",
        "Range",
        "ReduceProd",
        "Floor",
        "Ceil",
        "Round",
        "Relu",
        "Clip",
        "Mod",
        "Sign",
        "GreaterOrEqual",
        "LessOrEqual",
        "And",
        "Or",
        "Xor",
        "IsNaN",
        "IsInf",
        "Expand",
        "Tile",
        "Transpose",
        "Trilu",
        "CumSum",
        "CumProd",
        "ScatterND",
        "ScatterElements",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitwiseNot",
        "BitShift",
        "HannWindow",
        "HammingWindow",
        "BlackmanWindow",
        "MelWeightMatrix",
        "EyeLike",
        "OneHot",
        "NonZero",
        "Unique",
        "NonMaxSuppression",
        "Split",
    }
)
#: Op types PipeLink runs only as folded constants (no converter): :func:`unfolded_reason` says why one
#: stayed. NonZero, Unique and NonMaxSuppression have an output size that depends on their input's values.
FOLD_ONLY = frozenset(
    {"HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix", "Size", "ConstantOfShape", "Range"}
    | {"NonZero", "Unique", "NonMaxSuppression"}
)
_DATA_DEPENDENT = frozenset({"NonZero", "Unique", "NonMaxSuppression"})
_MULTI_OUTPUT = frozenset({"Unique", "Split"})  # folded whole: every output it names
MAX_FOLD_ELEMENTS = 4096  # shape arithmetic, not weights: bigger constant nodes stay stages
#: A table an op of :data:`FOLD_ONLY` makes (a ConstantOfShape or Range of constants, a window): folding is
#: its only way in, so it may be larger (WavLM's [frames, frames] position buckets). NonMaxSuppression
#: keeps :data:`MAX_FOLD_ELEMENTS`: onnx's reference runs it box by box.
MAX_TABLE_ELEMENTS = 1 << 20


def fold_limit(op_type: str) -> int:
    """The most elements a node of ``op_type`` may read and make to be folded at import."""
    table = op_type in FOLD_ONLY and op_type != "NonMaxSuppression"
    return MAX_TABLE_ELEMENTS if table else MAX_FOLD_ELEMENTS


class Unfoldable(Exception):
    """A shape value a Reshape or Expand cannot take (the converter turns it into its refusal)."""


@dataclass(frozen=True)
class Dim:
    """One entry of a shape value known only when the model runs: the dim ``axis`` of ``tensor`` (its
    ``dim_param`` ``name`` where shape inference has one), or an unknown (all None: arithmetic on dims).
    An unknown may still be known as ``factor`` times the dim ``base`` (``batch * heads``): only a
    Reshape's element count reads that (:func:`reshape_target`); everywhere else it is unknown."""

    name: str | None = None
    tensor: str | None = None
    axis: int | None = None
    base: Dim | None = None
    factor: int = 1

    def product(self) -> tuple[int, str] | None:
        """``(factor, name)``: this dim as a multiple of a named dim; None when it is none."""
        if self.base is not None:
            if self.base.name is None:
                return None
            factor, name = split_multiple(self.base.name)
            return factor * self.factor, name
        return split_multiple(self.name) if self.name is not None else None

    def same_as(self, tensor: str, axis: int, dim: Any) -> bool:
        """Whether this is dim ``axis`` of ``tensor``, whose shape inference says ``dim`` there."""
        if self.tensor == tensor and self.axis == axis:
            return True
        if self.name is not None and self.name == dim:
            return True
        product = self.product()  # a multiple of a named dim, and the tensor's dim named as that multiple
        return product is not None and isinstance(dim, str) and split_multiple(dim) == product


def product_name(factor: int, names: list[str]) -> str:
    """The name the import gives ``factor`` times the product of the dims ``names`` in shape inference
    (``4*batch``, ``batch*seq``): the factor first (left out when 1), then the names in order."""
    return "*".join([str(factor)] * (factor != 1) + sorted(names))


def split_product(name: str) -> tuple[int, list[str]]:
    """:func:`product_name` undone: ``(4, ["batch"])`` of ``4*batch``, ``(1, ["batch", "seq"])`` of
    ``batch*seq``; ``(1, [name])`` of any other name."""
    parts = name.split("*")
    factor = int(parts[0]) if len(parts) > 1 and parts[0].isdigit() else 1
    names = parts[1:] if len(parts) > 1 and parts[0].isdigit() else parts
    if not names or any(not n or n.isdigit() for n in names):
        return 1, [name]
    return factor, sorted(names)


def offset_name(name: str, taken: int) -> str:
    """The name the import gives the dim ``name`` less ``taken`` (``seq-1``: a slice's output)."""
    return name if taken == 0 else f"{name}-{taken}"


def split_offset(name: str) -> tuple[str, int]:
    """:func:`offset_name` undone: ``("seq", 1)`` of ``seq-1``; ``(name, 0)`` of any other name."""
    base, dash, count = name.rpartition("-")
    return (base, int(count)) if dash and base and count.isdigit() else (name, 0)


def multiple_name(factor: int, name: str) -> str:
    """:func:`product_name` of one dim: ``4*batch``."""
    return product_name(factor, [name])


def split_multiple(name: str) -> tuple[int, str]:
    """:func:`split_product` of a multiple of one dim: ``(4, "batch")`` of ``4*batch``; ``(1, name)`` of
    any other name (a product of several dims too)."""
    factor, names = split_product(name)
    return (factor, names[0]) if len(names) == 1 else (1, name)


ShapeValue = list  # of int | Dim (1-d), or a bare int | Dim (0-d)


def fold(g: Graph, nodes: list[Node], outputs: set[str]) -> list[Node]:
    """The nodes left after evaluating what can be (see the module docstring). Folded constants go to
    ``g.constants``; shape values to ``g.symbolic``. A node making a graph output folds only into
    constants (the import copies a constant graph output out with an ``identity`` stage); one whose
    output would be a shape value stays a node."""
    kept = []
    for node in nodes:
        made = [out for out in node.outputs if out in outputs]
        if not made and (
            _fold_identity(g, node, alias=True)
            or _fold_optional(g, node)
            or _fold_shape(g, node)
            or _fold_constant(g, node)
            or _fold_cast_like(g, node)
            or _fold_slice(g, node)
            or _follow_symbolic(g, node)
        ):
            continue
        if made and (
            _fold_identity(g, node, alias=False)
            or _fold_optional(g, node)
            or _fold_shape(g, node)
            or _fold_constant(g, node)
            or _fold_cast_like(g, node)
            or _fold_slice(g, node)
        ):
            if all(out in g.constants for out in made):
                continue
            for out in made:  # a shape value known only at run time: the node computes it
                g.symbolic.pop(out, None)
        kept.append(node)
    return kept


def _fold_identity(g: Graph, node: Node, *, alias: bool) -> bool:
    """An Identity of a constant (PyTorch's exporter writes one per shared weight) is that constant, not
    a copy: with ``alias`` its output is also another name of the same bound weight (a graph output keeps
    its own name)."""
    if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return False
    if len(node.inputs) != 1 or node.inputs[0] not in g.constants:
        return False
    source, out = node.inputs[0], node.outputs[0]
    g.constants[out] = g.constants[source]
    if source in g.dtypes:
        g.dtypes[out] = g.dtypes[source]
    if alias:
        g.names[out] = g.name(source)
    return True


def _fold_optional(g: Graph, node: Node) -> bool:
    """OptionalHasElement, known at import: PipeLink's values are tensors, never optionals (an optional
    graph input is refused), so a present input has an element and an absent one (no input, or "") has
    none: a constant bool scalar."""
    if node.op_type != "OptionalHasElement" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return False
    g.constants[node.outputs[0]] = np.array(bool(node.inputs and node.inputs[0]))
    g.dtypes[node.outputs[0]] = "bool"
    return True


def _set(g: Graph, name: str, value: ShapeValue) -> None:
    """Store a shape value: a constant when every entry is an int."""
    entries = value if isinstance(value, list) else [value]
    if all(isinstance(v, int) for v in entries):
        g.constants[name] = np.asarray(value, dtype=np.int64)
        g.dtypes[name] = "int64"
    else:
        g.symbolic[name] = value


def _value(g: Graph, name: str) -> ShapeValue | None:
    """A shape value, from a symbolic entry or a small 0-d / 1-d integer constant."""
    if name in g.symbolic:
        return g.symbolic[name]
    array = g.constants.get(name)
    if array is None or array.dtype.kind not in "iu" or array.ndim > 1 or array.size > MAX_FOLD_ELEMENTS:
        return None
    return [int(v) for v in array] if array.ndim == 1 else int(array)


def _fold_shape(g: Graph, node: Node) -> bool:
    if node.op_type not in ("Shape", "Size") or node.domain not in ("", "ai.onnx"):
        return False
    source = node.inputs[0]
    # a constant's shape is its array's (a folded tensor may have no shape from inference)
    shape = tuple(np.shape(g.constants[source])) if source in g.constants else g.shapes.get(source)
    if shape is None:
        return False
    if node.op_type == "Size":  # the element count, when every dim is known
        if not all(isinstance(d, int) for d in shape):
            return False
        _set(g, node.outputs[0], math.prod(shape))
        return True
    rank = len(shape)
    start, end = int(node.attrs.get("start", 0)), node.attrs.get("end")
    start = min(max(start + rank if start < 0 else start, 0), rank)
    stop = rank if end is None else min(max(int(end) + rank if int(end) < 0 else int(end), 0), rank)
    value = [
        d if isinstance(d, int) else Dim(d if isinstance(d, str) else None, node.inputs[0], axis)
        for axis, d in enumerate(shape)
    ][start:stop]
    _set(g, node.outputs[0], value)
    return True


def _foldable(g: Graph, node: Node) -> bool:
    """Whether ``node`` is one :func:`_fold_constant` evaluates: of :data:`FOLDABLE`, every input a
    constant, at most :data:`MAX_FOLD_ELEMENTS` elements in and (bounded before evaluating) out."""
    if node.op_type not in FOLDABLE or node.domain not in ("", "ai.onnx"):
        return False
    if len(node.outputs) != 1 and node.op_type not in _MULTI_OUTPUT:
        return False
    names = [n for n in node.inputs if n]
    if not names or any(n not in g.constants for n in names):
        return False
    arrays, limit = [g.constants[n] for n in names], fold_limit(node.op_type)
    return sum(a.size for a in arrays) <= limit and _output_elements(node, g) <= limit


def _fold_constant(g: Graph, node: Node) -> bool:
    if not _foldable(g, node):
        return False
    try:
        values = _evaluate(g, node)
    except Exception:  # noqa: BLE001 - the reference cannot evaluate it: the node stays, its converter decides
        return False
    if any(value.size > fold_limit(node.op_type) for value in values):
        return False
    for name, value in zip(node.outputs, values, strict=False):
        if not name:
            continue
        g.constants[name] = value
        g.shapes[name] = tuple(value.shape)  # the value's own: shape inference may have had no dims for it
        with contextlib.suppress(PipeLinkError):  # a dtype PipeLink lacks: whoever reads it says so
            g.dtypes[name] = get_dtype(value.dtype).name
    return True


def _fold_cast_like(g: Graph, node: Node) -> bool:
    """A CastLike of a constant needs only its target's dtype, not its values: a constant cast to the
    dtype of a computed tensor (exporters write ``CastLike(-inf, scores)`` for a mask's fill) is the
    Cast of that constant, evaluated like one (saturate too)."""
    if node.op_type != "CastLike" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
        return False
    source, like = node.inputs[:2]
    target = g.dtypes.get(like)
    if source not in g.constants or target is None or g.constants[source].size > MAX_FOLD_ELEMENTS:
        return False
    from onnx import helper

    attrs = {k: v for k, v in node.attrs.items() if k in ("saturate", "round_mode")}
    attrs["to"] = helper.np_dtype_to_tensor_dtype(np.dtype(get_dtype(target).numpy))
    cast = type(node)("Cast", node.name, node.domain, [source], node.outputs[:1], attrs)
    try:
        (value,) = _evaluate(g, cast)
    except Exception:  # noqa: BLE001 - the node stays, its converter decides
        return False
    g.constants[node.outputs[0]] = value
    g.dtypes[node.outputs[0]] = target
    return True


def unfolded_needs(g: Graph, node: Node) -> tuple[str, ...]:
    """The computed inputs a node of :data:`FOLD_ONLY` needs the values of to fold (none for the
    data-dependent ops: their input is the data, which specialising would evaluate whole at import)."""
    if node.op_type in _DATA_DEPENDENT or node.op_type == "Size":
        return ()
    return tuple(n for n in node.inputs if n and n not in g.constants)


def unfolded_reason(g: Graph, node: Node) -> str:
    """Why a node of :data:`FOLD_ONLY` (PipeLink runs it only as a constant evaluated at import) was not
    folded: a computed input, a graph output, too many elements, or the reference's own error."""
    op = node.op_type
    computed = [n for n in node.inputs if n and n not in g.constants]
    if op in _DATA_DEPENDENT and computed:
        return (
            f"{op}'s output size depends on the values of its input, which the graph computes "
            f"({computed[0]!r}); PipeLink's stages have sizes known before they run, so {op} is imported "
            "only when its inputs are constants (evaluated at import)"
        )
    if op == "Size" and computed:
        return (
            f"Size needs its input's shape, every dim known at import ({computed[0]!r} has "
            f"{g.shapes.get(computed[0])}); PipeLink evaluates Size at import only"
        )
    if computed:
        return (
            f"{op} is evaluated at import only, of constant inputs; input {computed[0]!r} is computed by "
            "the graph (make it an initializer or a Constant node)"
        )
    try:
        _bound(node, g)
    except (ValueError, TypeError, OverflowError, IndexError) as e:
        return f"{op}'s output size cannot be computed from these constants ({type(e).__name__}: {e})"
    size, bound = sum(g.constants[n].size for n in node.inputs if n), _output_elements(node, g)
    limit = fold_limit(op)
    if size > limit or not bound <= limit:  # a NaN bound too
        made = max(size, bound) if bound == bound else bound
        count = f"more than {limit}" if made == math.inf else f"{made:.0f}"
        return (
            f"{op} of constants would read or make {count} elements; the import evaluates at most "
            f"{limit} (give a larger table as an initializer)"
        )
    try:
        values = _evaluate(g, node)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"{op} of these constants cannot be evaluated ({type(e).__name__}: {e})"
    made = max(v.size for v in values)
    if made > limit:
        return f"{op} of constants makes {made} elements; the import keeps at most {limit}"
    return f"{op} of these constants did not fold (its value is known only when the model runs)"


def _fold_slice(g: Graph, node: Node) -> bool:
    """A Slice of a constant (any rank, at most MAX_FOLD_ELEMENTS) with constant starts, ends, axes and
    steps (inputs from opset 10, attributes before), by the slice operator's rule (the spec's clamping)."""
    if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return False
    names = [n for n in node.inputs if n]
    if not names or any(n not in g.constants for n in names):
        return False
    data = np.asarray(g.constants[node.inputs[0]])
    if data.size > MAX_FOLD_ELEMENTS:
        return False

    def ints(index: int, attr: str) -> list[int]:
        if index < len(node.inputs) and node.inputs[index]:
            return [int(v) for v in np.asarray(g.constants[node.inputs[index]]).reshape(-1)]
        return [int(v) for v in node.attrs.get(attr, [])]

    attrs = {
        "starts": ints(1, "starts"),
        "ends": ints(2, "ends"),
        "axes": ints(3, "axes"),
        "steps": ints(4, ""),
    }
    try:
        index, _ = slice_plan(tuple(data.shape), attrs)
    except PipeLinkError:  # a malformed Slice: the node stays, its converter refuses it with the reason
        return False
    g.constants[node.outputs[0]] = np.ascontiguousarray(data[index])
    with contextlib.suppress(PipeLinkError):
        g.dtypes[node.outputs[0]] = get_dtype(data.dtype).name
    return True


_BROADCASTING = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "Equal",
        "Less",
        "Greater",
        "GreaterOrEqual",
        "LessOrEqual",
        "And",
        "Or",
        "Xor",
        "Where",
        "Min",
        "Max",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitShift",
    }
)


def _output_elements(node: Node, g: Graph) -> float:
    """The output size of a node on constants, or a bound of it, known before evaluating it (a hostile
    file's ConstantOfShape of 2**40 elements, or a Where broadcasting three vectors, is never made). A
    bound that cannot be computed (a Range of strings, a window size of NaN) is infinite: never made."""
    try:
        return _bound(node, g)
    except (ValueError, TypeError, OverflowError, IndexError):
        return math.inf


def _bound(node: Node, g: Graph) -> float:
    arrays = [g.constants[n] for n in node.inputs if n]
    too_big = math.inf  # no bound: never evaluated
    if node.op_type == "ConstantOfShape":
        dims = arrays[0].reshape(-1)
        return float(np.prod([max(float(d), 0.0) for d in dims])) if dims.size else 1.0
    if node.op_type == "Range":
        start, limit, delta = (float(a.reshape(-1)[0]) for a in arrays[:3])
        count = (limit - start) / delta if delta else math.inf
        return max(math.ceil(count), 0) if math.isfinite(count) else too_big
    if node.op_type in _BROADCASTING:
        try:
            return float(np.prod(np.broadcast_shapes(*(a.shape for a in arrays)), dtype=np.float64))
        except ValueError:
            return too_big
    if node.op_type == "Expand":
        try:
            shape = np.broadcast_shapes(arrays[0].shape, tuple(int(d) for d in arrays[1].reshape(-1)))
        except (ValueError, TypeError):
            return too_big
        return float(np.prod(shape, dtype=np.float64))
    if node.op_type == "Tile":
        return float(arrays[0].size) * float(np.prod([max(float(r), 0.0) for r in arrays[1].reshape(-1)]))
    if node.op_type in _WINDOWS:  # a scalar size
        return max(float(arrays[0].reshape(-1)[0]), 0.0) if arrays[0].size else too_big
    if node.op_type == "MelWeightMatrix":  # [dft_length // 2 + 1, num_mel_bins]
        if any(a.size != 1 for a in arrays[:2]):
            return too_big
        bins, dft = (float(a.reshape(-1)[0]) for a in arrays[:2])
        return (max(dft, 0.0) // 2 + 1) * max(bins, 0.0)
    if node.op_type == "OneHot":  # indices' shape with depth inserted
        if arrays[1].size != 1:
            return too_big
        return float(arrays[0].size) * max(float(arrays[1].reshape(-1)[0]), 0.0)
    if node.op_type == "NonZero":  # [rank, count]
        return float(max(arrays[0].ndim, 1) * arrays[0].size)
    if node.op_type == "NonMaxSuppression":  # [selected, 3], at most min(max_out, boxes) per batch and class
        scores = g.constants[node.inputs[1]] if len(node.inputs) > 1 and node.inputs[1] else np.zeros(0)
        keep = g.constants[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else np.zeros(1)
        kept = float(keep.reshape(-1)[0]) if keep.size else math.inf
        if scores.ndim != 3:
            return too_big
        batch, classes, boxes = scores.shape
        return 3.0 * batch * classes * min(max(kept, 0.0), boxes)
    if node.op_type == "Gather" and arrays[0].ndim:
        axis = int(node.attrs.get("axis", 0)) % arrays[0].ndim
        return arrays[0].size / max(arrays[0].shape[axis], 1) * arrays[1].size
    return 0.0  # the other ops make no more elements than they read


_WINDOWS = frozenset({"HannWindow", "HammingWindow", "BlackmanWindow"})


def _scatter_elements(node: Node, arrays: list[np.ndarray]) -> np.ndarray:
    """ScatterElements of constants by the scatter_elements operator's own reference."""
    reduction = node.attrs.get("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else str(reduction)
    return scatter_elements(*arrays[:3], axis=int(node.attrs.get("axis", 0)), reduction=reduction)


#: Op types whose fold is PipeLink's operator reference (one implementation for the fold and the stage).
_OWN_REFERENCES = {"ScatterElements": _scatter_elements}


def _evaluate(g: Graph, node: Node) -> np.ndarray:
    """``node``'s outputs on its constant inputs: by the operator's own reference where
    :data:`_OWN_REFERENCES` has it, else by onnx's reference implementation (one-node model)."""
    own = _OWN_REFERENCES.get(node.op_type)
    if own is not None:
        return [own(node, [np.asarray(g.constants[n]) for n in node.inputs if n])]
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    names = [n for n in node.inputs if n]
    inits = [numpy_helper.from_array(np.asarray(g.constants[n]), n) for n in dict.fromkeys(names)]
    one = helper.make_node(node.op_type, node.inputs, node.outputs, **node.attrs)
    outs = [helper.make_tensor_value_info(name, 0, None) for name in node.outputs]
    model = helper.make_model(
        helper.make_graph([one], "fold", [], outs, inits), opset_imports=[helper.make_opsetid("", g.opset)]
    )
    # NumPy's warnings (an integer division by zero: 0, as the div stage gives) never reach the user
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [np.asarray(value) for value in ReferenceEvaluator(model).run(None, {})]


def _follow_symbolic(g: Graph, node: Node) -> bool:
    """Gather, Unsqueeze, Squeeze, Concat, Slice, Cast, Identity, integer arithmetic, a Reshape to 1-d,
    Equal with ints and Where of shape values (and the Slice of a 1-d integer constant, by the spec's
    rules)."""
    if node.domain not in ("", "ai.onnx") or len(node.outputs) != 1 or not node.inputs:
        return False
    # a Slice of a 1-d integer constant too (see FOLDABLE); the other ops only with a shape value in
    if node.op_type != "Slice" and not any(n in g.symbolic for n in node.inputs if n):
        return False
    op, ins = node.op_type, node.inputs
    values = [_value(g, n) if n else None for n in ins]
    data = values[0]
    result: ShapeValue | None = None
    if op in ("Identity", "Cast") and data is not None:
        to = int(node.attrs.get("to", 7))
        # a dim cast to a float stays a dim only as a scalar: a Range's limit (``arange(n, dtype=float)``)
        kept = op == "Identity" or to in (6, 7) or (to in (1, 10, 11, 16) and not isinstance(data, list))
        result = data if kept else None
    elif op == "Gather" and isinstance(data, list) and values[1] is not None:
        if int(node.attrs.get("axis", 0)) == 0:
            idx = values[1]
            pick = [data[i] for i in (idx if isinstance(idx, list) else [idx]) if -len(data) <= i < len(data)]
            if len(pick) == (len(idx) if isinstance(idx, list) else 1):
                result = pick if isinstance(idx, list) else pick[0]
    elif op == "Unsqueeze" and data is not None and not isinstance(data, list):
        axes = values[1] if len(ins) > 1 else node.attrs.get("axes")
        if axes is not None and list(axes if isinstance(axes, list) else [axes]) in ([0], [-1]):
            result = [data]
    elif op == "Squeeze" and isinstance(data, list) and len(data) == 1:
        result = data[0]
    elif op == "Concat" and int(node.attrs.get("axis", 0)) in (0, -1):
        if all(isinstance(v, list) for v in values):
            result = [entry for v in values for entry in v]
    elif op == "Slice" and isinstance(data, list):
        result = _slice_value(data, values[1:])
    elif op in ("Add", "Sub", "Mul", "Div") and all(
        v is not None and not isinstance(v, list) for v in values
    ):
        result = _arithmetic(op, values)
    elif op == "Reshape" and isinstance(data, list) and values[1] in ([-1], [len(data)]):
        result = data  # the 1-d value viewed as 1-d (PyTorch's export of ``expand``)
    elif op == "Reshape" and data is not None and not isinstance(data, list) and values[1] in ([-1], [1]):
        result = [data]  # a 0-d value viewed as 1-d (torch.export's Concat of computed dims)
    elif op == "Equal" and len(values) == 2:
        return _equal_value(g, node, values)
    elif op == "Where" and len(ins) == 3:
        result = _where_value(g, ins[0], values[1:])
    if result is None:
        return False
    _set(g, node.outputs[0], result)
    return True


def _arithmetic(op: str, values: list) -> Dim:
    """Arithmetic on a dim known only at run time: unknown (at most -1 in a Reshape), but a dim times an
    int, or such a multiple divided by an int that divides its factor, stays known as a multiple."""
    dims = [v for v in values if isinstance(v, Dim)]
    ints = [v for v in values if isinstance(v, int)]
    if (
        len(dims) != 1
        or len(ints) != 1
        or op not in ("Mul", "Div")
        or (op == "Div" and values[0] is not dims[0])
    ):
        return Dim()
    dim, k = dims[0], ints[0]
    product = dim.product()
    if product is None:
        return Dim()
    factor, name = product
    # the dim itself where it is one (its tensor kept: a broadcast can read it), else the named dim
    base = dim if dim.base is None and factor == 1 else Dim(name=name)
    if op == "Mul":
        factor *= k
    elif k > 0 and factor % k == 0:
        factor //= k
    else:
        return Dim()
    if factor == 1:
        return base
    return Dim(base=base, factor=factor) if factor > 1 else Dim()


def _pairs(a: ShapeValue | None, b: ShapeValue | None) -> list[tuple] | None:
    """The entries of two 1-d values side by side (a one-entry side repeated), None when they do not
    broadcast."""
    if not isinstance(a, list) or not isinstance(b, list):
        return None
    if len(a) == 1 and len(b) != 1:
        a = a * len(b)
    if len(b) == 1 and len(a) != 1:
        b = b * len(a)
    return list(zip(a, b, strict=True)) if len(a) == len(b) else None


def _equal_value(g: Graph, node: Node, values: list) -> bool:
    """Equal of a shape value and ints: a constant where every entry decides (a dim known only at run
    time is never negative, so it differs from -1: PyTorch's export of ``expand(batch, -1, -1)`` asks)."""
    pairs = _pairs(*values)
    if pairs is None:
        return False
    out = []
    for a, b in pairs:
        if isinstance(a, int) and isinstance(b, int):
            out.append(a == b)
        elif isinstance(a, int) != isinstance(b, int) and min(v for v in (a, b) if isinstance(v, int)) < 0:
            out.append(False)
        else:
            return False
    g.constants[node.outputs[0]] = np.asarray(out, dtype=bool)
    g.dtypes[node.outputs[0]] = "bool"
    return True


def _where_value(g: Graph, condition: str, values: list) -> ShapeValue | None:
    """Where of a constant 1-d bool condition between two 1-d values, entry by entry."""
    cond = g.constants.get(condition)
    pairs = _pairs(*values)
    if cond is None or cond.dtype != np.bool_ or cond.ndim != 1 or pairs is None:
        return None
    if len(cond) != len(pairs) and not (len(cond) == 1 or len(pairs) == 1):
        return None
    width = max(len(cond), len(pairs))
    cond = [bool(c) for c in cond] * (width if len(cond) == 1 else 1)
    pairs = pairs * (width if len(pairs) == 1 else 1)
    return [a if c else b for c, (a, b) in zip(cond, pairs, strict=True)]


def _slice_value(data: list, params: list) -> list | None:
    """ONNX Slice of a 1-d shape value (starts, ends, axes [0], steps constant)."""
    starts, ends = (params + [None, None])[:2]
    axes = params[2] if len(params) > 2 else None
    steps = params[3] if len(params) > 3 else None
    if not isinstance(starts, list) or not isinstance(ends, list) or len(starts) != 1 or len(ends) != 1:
        return None
    if axes is not None and axes not in ([0], [-1]):
        return None
    step = steps[0] if isinstance(steps, list) and steps else 1
    if step == 0:
        return None
    n, s, e = len(data), starts[0], ends[0]
    s, e = s + n if s < 0 else s, e + n if e < 0 else e
    if step > 0:
        s, e = min(max(s, 0), n), min(max(e, 0), n)
    else:
        s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
    return [data[i] for i in range(s, e, step)]


def reshape_target(g: Graph, node: Node) -> list[int] | None:
    """The reshape target of ``node`` (a Reshape) when its shape input is a shape value: ints as they are,
    the input's own dim at the same place as 0 (copy), one unknown as -1. None when it is no shape value.

    Raises
    ------
    Unfoldable
        More than one entry known only when the model runs, or ``allowzero`` with a 0 entry.
    """
    value = g.symbolic.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if value is None:
        return None
    if not isinstance(value, list):
        raise Unfoldable("Reshape's shape is a scalar the model computes; it must be 1-d")
    x, x_shape = node.inputs[0], g.shapes.get(node.inputs[0]) or ()
    # allowzero=1 (torch.export writes it on every view) changes only what a 0 entry means: the target
    # made here copies a dim with 0 and is run with allowzero off, so a literal 0 cannot be in it
    if node.attrs.get("allowzero", 0) and any(isinstance(e, int) and e == 0 for e in value):
        raise Unfoldable("Reshape with allowzero=1, an entry 0 and a shape the model computes from its dims")
    target = []
    for axis, entry in enumerate(value):
        if isinstance(entry, int):
            target.append(entry)
        elif axis < len(x_shape) and entry.same_as(x, axis, x_shape[axis]):
            target.append(0)
        else:
            target.append(-1)
    unknown = sum(1 for e, t in zip(value, target, strict=True) if not isinstance(e, int) and t == -1)
    if target.count(-1) > 1:
        counted = _by_element_count(value, target, x_shape)
        if counted is not None:
            return counted
        raise Unfoldable(
            f"Reshape's shape {describe_value(value)} has {unknown} entries known only when the model runs "
            "that are not the input's own dims; at most one can be inferred (export with fixed shapes, or "
            "keep the dynamic dims where the input has them)"
        )
    return target


def _by_element_count(value: list, target: list[int], x_shape: tuple) -> list[int] | None:
    """A Reshape target with a -1 and one entry that is a multiple of the input's named dims (BLOOM's
    ``view(batch * heads, -1, head_dim)`` of ``[batch, seq, heads, head_dim]``): the -1 is what the
    element count leaves once the named dims cancel (an int), and the multiple becomes the one -1. None
    when the dims do not cancel, or more than one such entry is left."""
    if any(not isinstance(d, int | str) for d in x_shape):
        return None
    products_in = [split_product(d) for d in x_shape if isinstance(d, str)]
    coef_in = math.prod(d for d in x_shape if isinstance(d, int)) * math.prod(f for f, _ in products_in)
    names_in = sorted(n for _, names in products_in for n in names)
    coef, names, literal, multiples = 1, [], [], []
    for k, (entry, t) in enumerate(zip(value, target, strict=True)):
        if t == 0:  # the input's own dim, copied
            if k >= len(x_shape):  # past the input's rank: the reshape rule refuses it
                return None
            mine = x_shape[k]
            factor, own = (mine, []) if isinstance(mine, int) else split_product(mine)
            coef, names = coef * factor, [*names, *own]
        elif isinstance(entry, int):
            if entry == -1:
                literal.append(k)
            else:
                coef *= entry
        else:
            product = entry.product()
            if product is None:
                return None
            coef, names = coef * product[0], [*names, product[1]]
            multiples.append(k)
    if len(literal) != 1 or len(multiples) != 1 or sorted(names) != names_in or coef <= 0 or coef_in % coef:
        return None
    counted = list(target)
    counted[literal[0]], counted[multiples[0]] = coef_in // coef, -1
    return counted


def expand_target(g: Graph, node: Node) -> list[int] | None:
    """The target of ``node`` (an Expand) when its shape input is a shape value: ints as they are, the
    input's own dim (aligned from the right) as 1 (broadcasting keeps it). None when it is no shape value.

    Raises
    ------
    Unfoldable
        An entry known only when the model runs that is not the input's dim there.
    """
    value = g.symbolic.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if value is None:
        return None
    if not isinstance(value, list):
        raise Unfoldable("Expand's shape is a scalar the model computes; it must be 1-d")
    x, x_shape = node.inputs[0], g.shapes.get(node.inputs[0]) or ()
    offset = len(value) - len(x_shape)
    target = []
    for k, entry in enumerate(value):
        axis = k - offset
        if isinstance(entry, int):
            target.append(entry)
        elif 0 <= axis < len(x_shape) and entry.same_as(x, axis, x_shape[axis]):
            target.append(1)
        else:
            raise Unfoldable(
                f"Expand's shape {describe_value(value)} has an entry known only when the model runs that is "
                "not the input's own dim there (export with fixed shapes)"
            )
    return target


def resolved_target(g: Graph, node: Node) -> list[int] | None:
    """The target a Reshape or Expand of the default domain reading a shape value gets
    (:func:`reshape_target`, :func:`expand_target`); None for any other node, or one it refuses."""
    resolve = {"Reshape": reshape_target, "Expand": expand_target}.get(node.op_type)
    if resolve is None or node.domain not in ("", "ai.onnx"):
        return None
    try:
        return resolve(g, node)
    except Unfoldable:
        return None


def describe_value(value: list) -> str:
    """A shape value as a message shows it: ints, and each run-time dim by its name (a multiple of one as
    ``4*batch``, ``?`` for an unknown)."""

    def one(v: int | Dim) -> str:
        if isinstance(v, int):
            return str(v)
        product = v.product()
        return v.name or (multiple_name(*product) if product else "?")

    return "[" + ", ".join(one(v) for v in value) + "]"
