"""ONNX nodes to PipeLink stages: one converter per ONNX op type, in one table (``CONVERTERS``).

A converter reads one node through a :class:`Graph` and adds the stages that compute it. It raises
:class:`Unsupported` with the reason when PipeLink cannot express the node (an attribute value it lacks, an
input that must be a constant but is computed); :func:`convert` collects every such node before failing,
so a model is imported whole or not at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from ..ops.rotary.reference import rotary_geometry
from ..ops.shape import MAX_PARTS
from .attention import AttentionError, lower_attention
from .einsum import EinsumError
from .einsum import plan as einsum_plan
from .fold import FOLD_ONLY, Unfoldable, expand_target, reshape_target, unfolded_reason
from .graph import (
    FUSED_DOMAIN,
    ONNX_DOMAINS,
    Graph,
    Node,
    Rejected,
    Unsupported,
    float32_attr,
    onnx_dtype,
)
from .losses import LossError, negative_log_likelihood_loss, softmax_cross_entropy_loss
from .lowerings import (
    dynamic_quantize_linear,
    max_pool_with_indices,
    max_unpool,
    swiglu,
    table_problem,
    tensor_scatter,
)
from .recurrent import RECURRENT_OPS, RecurrentError, lower_recurrent
from .runtime_dims import RuntimeDimsError, broadcast_to_value

__all__ = [
    "CONVERTERS",
    "FUSED_DOMAIN",
    "ONNX_DOMAINS",
    "Graph",
    "Node",
    "Unsupported",
    "Rejected",
    "convert",
    "conv2d_stage",
    "gemm_attrs",
    "onnx_dtype",
    "float32_attr",
]

_MAX_PORTS = MAX_PARTS  # the most tensors concat takes and split makes


# -- converters ---------------------------------------------------------------------------------------
Converter = Callable[[Graph, Node], None]


def _attr(node: Node, name: str, default: Any = None) -> Any:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _only(node: Node, **allowed: Any) -> None:
    """Refuse attributes set to a value PipeLink does not implement (``name=default`` each)."""
    for name, default in allowed.items():
        value = _attr(node, name, default)
        if value != default:
            raise Unsupported(f"attribute {name}={value!r} is not supported (only {default!r})")


def _inputs(node: Node, count: int) -> list[str]:
    """The first ``count`` inputs, trailing absent ones dropped; an absent one in the middle is refused."""
    names = list(node.inputs[:count])
    while names and not names[-1]:
        names.pop()
    if "" in names:
        raise Unsupported(
            f"an absent optional input before a present one (inputs {node.inputs}) is not supported"
        )
    return names


def _one_to_one(operator: str, arity: int) -> Converter:
    def convert_node(g: Graph, node: Node) -> None:
        g.stage(node, operator, _inputs(node, arity), node.outputs[:1])

    return convert_node


def _with_alpha(operator: str, default: float) -> Converter:
    """A unary op whose ONNX ``alpha`` attribute is the PipeLink operator's (LeakyRelu, Elu, Celu,
    ThresholdedRelu)."""

    def convert_node(g: Graph, node: Node) -> None:
        alpha = float32_attr(_attr(node, "alpha", default))
        g.stage(node, operator, node.inputs[:1], node.outputs[:1], alpha=alpha)

    return convert_node


# Selu's defaults, the float32 values the spec gives
_SELU_ALPHA, _SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def _selu(g: Graph, node: Node) -> None:
    """ONNX Selu as ``gamma * elu(x, alpha)``: elu, then scale."""
    y = node.outputs[0]
    alpha = float32_attr(_attr(node, "alpha", _SELU_ALPHA))
    g.stage(node, "elu", node.inputs[:1], [f"{y}__elu"], alpha=alpha)
    g.stage(node, "scale", [f"{y}__elu"], [y], factor=float32_attr(_attr(node, "gamma", _SELU_GAMMA)))


def _variadic_sum(mean: bool) -> Converter:
    """ONNX Sum / Mean of any number of inputs (broadcast together): a chain of ``add``, left to right,
    then for Mean a ``scale`` by 1/n (one input: a copy, or the input itself scaled by 1)."""

    def convert_node(g: Graph, node: Node) -> None:
        inputs = [n for n in node.inputs if n]
        if not inputs:
            raise Unsupported(f"{node.op_type} needs at least one input")
        y = node.outputs[0]
        total = y if not mean else f"{y}__sum"
        if len(inputs) == 1:
            g.stage(node, "identity", inputs, [total])
        acc = inputs[0]
        for k, other in enumerate(inputs[1:], start=1):
            out = total if k == len(inputs) - 1 else f"{y}__add{k}"
            g.stage(node, "add", [acc, other], [out])
            acc = out
        if mean:
            dtype = g.dtypes.get(inputs[0])
            if dtype is not None and not get_dtype(dtype).is_floating:
                raise Unsupported(f"Mean of {dtype} inputs (PipeLink's mean is a float scale)")
            g.stage(node, "scale", [total], [y], factor=1.0 / len(inputs))

    return convert_node


def _dropout(g: Graph, node: Node) -> None:
    """ONNX Dropout at inference: the output is the input (a copy); the optional mask is all true, made
    by expanding a constant to the input's shape (which must then be known). Training mode (a constant
    true ``training_mode``) is refused, and so is one the graph computes."""
    if len(node.inputs) > 2 and node.inputs[2]:
        training = g.const(node, 2, "training_mode")
        if bool(np.asarray(training).reshape(-1)[0]):
            raise Unsupported("training_mode is true: PipeLink runs inference only (dropout is a copy there)")
    x = node.inputs[0]
    g.stage(node, "identity", [x], node.outputs[:1])
    if len(node.outputs) > 1 and node.outputs[1]:
        shape = g.shapes.get(x)
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise Unsupported("the mask output needs the input's shape, every dim known")
        true = f"{node.outputs[1]}__true"
        g.constants[true] = np.array(True)
        g.dtypes[true] = "bool"
        g.stage(node, "expand", [true], node.outputs[1:2], shape=[int(d) for d in shape])


def _static_shape(g: Graph, name: str, op_type: str, what: str) -> list[int]:
    """The shape of ``name``, every dim known (else Unsupported naming the op and why it needs it)."""
    shape = g.shapes.get(name)
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise Unsupported(f"{op_type} needs its input's shape, every dim known ({what})")
    return [int(d) for d in shape]


def _tile(g: Graph, node: Node) -> None:
    """ONNX Tile: x viewed with a unit axis before each repeated one, expanded to the repeats, viewed
    back (reshape, expand, reshape: one copy). The repeats must be constant, the input's shape known."""
    x, y = node.inputs[0], node.outputs[0]
    repeats = g.ints(node, 1, "repeats", "the repeats")
    shape = _static_shape(g, x, "Tile", "to place the repeats")
    if repeats is None or len(repeats) != len(shape):
        raise Unsupported(f"Tile needs one constant repeat per input dim ({len(shape)}), got {repeats}")
    if any(r < 0 for r in repeats):
        raise Unsupported(f"Tile repeats must not be negative (got {repeats})")
    if all(r == 1 for r in repeats):
        g.stage(node, "identity", [x], [y])
        return
    spread, target, final = [], [], []
    for d, r in zip(shape, repeats, strict=True):
        if r != 1:
            spread.append(1)
            target.append(r)
        spread.append(d)
        target.append(d)
        final.append(d * r)
    g.stage(node, "reshape", [x], [f"{y}__spread"], shape=spread, allowzero=True)
    g.stage(node, "expand", [f"{y}__spread"], [f"{y}__tiled"], shape=target)
    g.stage(node, "reshape", [f"{y}__tiled"], [y], shape=final, allowzero=True)


def _space_to_depth(g: Graph, node: Node) -> None:
    """ONNX SpaceToDepth: ``[N, C, H, W]`` viewed as ``[N, C, H/b, b, W/b, b]``, transposed to
    ``[N, b, b, C, H/b, W/b]`` (mode DCR, the default) or ``[N, C, b, b, H/b, W/b]`` (CRD, opset 28),
    viewed as ``[N, C*b*b, H/b, W/b]``. C, H and W must be known (N may be symbolic) and H, W divisible by
    the block size."""
    x, y = node.inputs[0], node.outputs[0]
    b = int(_attr(node, "blocksize"))
    mode = _attr(node, "mode", "DCR")
    perms = {"DCR": [0, 3, 5, 1, 2, 4], "CRD": [0, 1, 3, 5, 2, 4]}
    if mode not in perms:
        raise Unsupported(f"SpaceToDepth mode {mode!r}; the spec has 'DCR' and 'CRD'")
    shape = g.shapes.get(x)
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[1:]):
        raise Unsupported("SpaceToDepth needs a 4-d input with C, H and W known")
    n, c, h, w = shape
    if b < 1 or h % b or w % b:
        raise Unsupported(f"SpaceToDepth blocksize {b} must be positive and divide H={h} and W={w}")
    lead = n if isinstance(n, int) else 0  # 0: copy the batch dim, whatever it is when the model runs
    g.stage(node, "reshape", [x], [f"{y}__blocks"], shape=[lead, c, h // b, b, w // b, b], allowzero=False)
    g.stage(node, "transpose", [f"{y}__blocks"], [f"{y}__moved"], perm=perms[mode])
    g.stage(node, "reshape", [f"{y}__moved"], [y], shape=[lead, c * b * b, h // b, w // b], allowzero=False)


def _log_softmax(g: Graph, node: Node) -> None:
    """ONNX LogSoftmax as ``d - log(sum(exp(d)))`` with ``d = x - max(x)`` over the axis (from opset 13)
    or every axis from it on (before: the 2-d view of the spec), so no exp overflows and no log of an
    underflowed probability is taken: reduce_max, sub, exp, reduce_sum, log, sub."""
    x, y = node.inputs[0], node.outputs[0]
    axis = int(_attr(node, "axis", -1 if g.opset >= 13 else 1))
    if g.opset >= 13:
        axes = [axis]
    else:
        shape = g.shapes.get(x)
        if shape is None:
            raise Unsupported(
                "LogSoftmax before opset 13 normalises over every dim from the axis on; that needs the "
                "input's rank"
            )
        rank = len(shape)
        if not -rank <= axis < rank:
            raise Unsupported(f"LogSoftmax axis {axis} is out of range for a rank-{rank} input")
        axes = list(range(axis % rank, rank))
    g.stage(node, "reduce_max", [x], [f"{y}__max"], axes=axes, keepdims=True)
    g.stage(node, "sub", [x, f"{y}__max"], [f"{y}__shifted"])
    g.stage(node, "exp", [f"{y}__shifted"], [f"{y}__exp"])
    g.stage(node, "reduce_sum", [f"{y}__exp"], [f"{y}__sum"], axes=axes, keepdims=True)
    g.stage(node, "log", [f"{y}__sum"], [f"{y}__log_sum"])
    g.stage(node, "sub", [f"{y}__shifted", f"{y}__log_sum"], [y])


def _extremum(operator: str) -> Converter:
    """ONNX Max / Min of any number of inputs (broadcast together): one input is a copy, more a chain of
    the two-input ``max`` / ``min``, left to right."""

    def convert_node(g: Graph, node: Node) -> None:
        inputs = [n for n in node.inputs if n]
        if not inputs:
            raise Unsupported(f"{node.op_type} needs at least one input")
        if len(inputs) == 1:
            g.stage(node, "identity", inputs, node.outputs[:1])
            return
        acc = inputs[0]
        for k, other in enumerate(inputs[1:], start=1):
            out = node.outputs[0] if k == len(inputs) - 1 else f"{node.outputs[0]}__{operator}{k}"
            g.stage(node, operator, [acc, other], [out])
            acc = out

    return convert_node


def _clip(g: Graph, node: Node) -> None:
    """ONNX Clip as ``min(max(x, lo), hi)``: the bounds are inputs from opset 11 (either absent), the
    attributes ``min`` and ``max`` before it. ``lo > hi`` gives hi everywhere, as the spec says."""
    x = node.inputs[0]
    if g.opset >= 11:
        lo = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] else None
        hi = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    else:
        dtype = g.dtypes.get(x)
        if dtype is None:
            raise Unsupported("Clip before opset 11 needs its input's dtype (for the bounds' constants)")
        lo = hi = None
        for attr in ("min", "max"):
            if attr in node.attrs:
                name = f"{node.outputs[0]}__clip_{attr}"
                g.constants[name] = np.array(node.attrs[attr], dtype=get_dtype(dtype).numpy)
                g.dtypes[name] = dtype
                lo, hi = (name, hi) if attr == "min" else (lo, name)
    parts = [(op, bound) for op, bound in (("max", lo), ("min", hi)) if bound is not None]
    if not parts:
        g.stage(node, "identity", [x], node.outputs[:1])
        return
    acc = x
    for k, (op, bound) in enumerate(parts):
        out = node.outputs[0] if k == len(parts) - 1 else f"{node.outputs[0]}__clip_low"
        g.stage(node, op, [acc, bound], [out])
        acc = out


def _scalar(g: Graph, node: Node, like: str, key: str, value: float) -> str:
    """A bound scalar constant of ``like``'s float dtype for one of ``node``'s composed stages."""
    dtype = g.dtypes.get(like)
    if dtype is None or not get_dtype(dtype).is_floating:
        raise Unsupported(f"{node.op_type} needs a float input of known dtype (for its constants)")
    name = f"{node.outputs[0]}__{key}"
    g.constants[name] = np.array(value, dtype=get_dtype(dtype).numpy)
    g.dtypes[name] = dtype
    return name


def _hard_sigmoid(g: Graph, node: Node) -> None:
    """ONNX HardSigmoid as ``min(max(alpha * x + beta, 0), 1)``: scale, add, max, min."""
    x, y = node.inputs[0], node.outputs[0]
    beta, zero, one = (
        _scalar(g, node, x, f"hard_sigmoid_{key}", value)
        for key, value in (("beta", float(_attr(node, "beta", 0.5))), ("zero", 0.0), ("one", 1.0))
    )
    g.stage(node, "scale", [x], [f"{y}__scaled"], factor=float32_attr(_attr(node, "alpha", 0.2)))
    g.stage(node, "add", [f"{y}__scaled", beta], [f"{y}__shifted"])
    g.stage(node, "max", [f"{y}__shifted", zero], [f"{y}__low"])
    g.stage(node, "min", [f"{y}__low", one], [y])


def _global_max_pool(g: Graph, node: Node) -> None:
    """ONNX GlobalMaxPool: ``reduce_max`` over every spatial dim, kept."""
    shape = g.shapes.get(node.inputs[0])
    if shape is None or len(shape) < 3:
        raise Unsupported("GlobalMaxPool needs its input's rank (N, C and at least one spatial dim)")
    g.stage(
        node, "reduce_max", node.inputs[:1], node.outputs[:1], axes=list(range(2, len(shape))), keepdims=True
    )


def _gelu(g: Graph, node: Node) -> None:
    approximate = _attr(node, "approximate", "none")
    g.stage(node, "gelu", node.inputs[:1], node.outputs[:1], approximate=approximate)


def _pow(g: Graph, node: Node) -> None:
    """Pow: ONNX lets the exponent have its own type, and PipeLink's pow takes one. A float base's
    exponent of another type is converted to the base's: a constant at import, a computed one by a
    ``cast`` stage (an integer exponent is exact in the base's type up to its significand, 2**24 for
    float32). An integer base is left to pow's own dtype check (it computes floats only)."""
    base, exponent = node.inputs[:2]
    want, have = g.dtypes.get(base), g.dtypes.get(exponent)
    if exponent in g.constants and want is not None and str(g.constants[exponent].dtype) != want:
        folded = f"{exponent}.as_{want}"
        g.constants[folded] = g.constants[exponent].astype(get_dtype(want).numpy)
        exponent = folded
    elif want in _POW_FLOATS and have is not None and have != want:
        cast = f"{node.outputs[0]}__exponent_as_{want}"
        g.stage(node, "cast", [exponent], [cast], dtype=want)
        exponent = cast
    g.stage(node, "pow", [base, exponent], node.outputs[:1])


_POW_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def _along_axis(operator: str) -> Converter:
    """Softmax, Hardmax: along ``axis`` from opset 13; before, over the 2-d view of the spec."""

    def convert_node(g: Graph, node: Node) -> None:
        axis = int(_attr(node, "axis", -1 if g.opset >= 13 else 1))
        shape = g.shapes.get(node.inputs[0])
        rank = len(shape) if shape is not None else None
        if g.opset >= 13 or axis == -1 or (rank is not None and axis in (rank - 1, -1)):
            g.stage(node, operator, node.inputs[:1], node.outputs[:1], axis=axis)
            return
        # Before opset 13 the input is seen as 2-d, [prod(dims before axis), prod(dims from axis)], and each
        # row is taken whole: flatten at the axis, the operator over the last axis, reshape back (both
        # views, no copy).
        op = node.op_type
        if rank is None or sum(not isinstance(d, int) for d in shape) > 1:  # None or a symbol: unknown here
            raise Unsupported(
                f"{op} before opset 13 with axis={axis} works over every dim from the axis on; that needs "
                "the input's rank and at most one unknown dim (re-export at opset 13+ or with fixed shapes)"
            )
        if not -rank <= axis <= rank:
            raise Unsupported(f"{op} axis {axis} is out of range for a rank-{rank} input")
        flat, rows = f"{node.outputs[0]}__flat", f"{node.outputs[0]}__rows"
        g.stage(node, "flatten", node.inputs[:1], [flat], axis=axis)
        g.stage(node, operator, [flat], [rows], axis=-1)
        back = [int(d) if isinstance(d, int) else -1 for d in shape]
        g.stage(node, "reshape", [rows], node.outputs[:1], shape=back, allowzero=False)

    return convert_node


def _layer_norm(g: Graph, node: Node) -> None:
    _only(node, stash_type=1)
    g.stage(
        node,
        "layer_norm",
        _inputs(node, 3),
        node.outputs[:3],
        axis=int(_attr(node, "axis", -1)),
        eps=float32_attr(_attr(node, "epsilon", 1e-5)),
    )


def _shape(g: Graph, name: str) -> tuple | None:
    """The shape of an ONNX tensor: a constant's own, else what shape inference found (None: unknown)."""
    return tuple(g.constants[name].shape) if name in g.constants else g.shapes.get(name)


def _rms_norm(g: Graph, node: Node) -> None:
    """RMSNormalization (opset 23) as rms_norm. rms_norm's statistics are float32 (float64 for a float64
    x): stash_type 1, or 11 with a float64 x. Its scale has the normalised shape x.shape[axis:]; a constant
    scale that broadcasts to it (ONNX's unidirectional broadcast) is expanded to it here."""
    x, y = node.inputs[0], node.outputs[0]
    scale = node.inputs[1] if len(node.inputs) > 1 else ""
    stash, dtype = int(_attr(node, "stash_type", 1)), g.dtypes.get(x)
    if stash != 1 and not (stash == 11 and dtype == "float64"):
        raise Unsupported(
            f"attribute stash_type={stash} is not supported for a {dtype or 'float'} input: rms_norm "
            "computes in float32 (float64 for a float64 input); only stash_type=1, or 11 with a float64 input"
        )
    if not scale:
        raise Unsupported("RMSNormalization needs its scale (input 1)")
    scale_dtype = g.dtypes.get(scale) or (str(g.constants[scale].dtype) if scale in g.constants else None)
    if None not in (dtype, scale_dtype) and scale_dtype != dtype:
        raise Unsupported(
            f"scale's dtype {scale_dtype} differs from X's {dtype} (ONNX's V and T): rms_norm takes and "
            "makes one dtype"
        )
    axis = int(_attr(node, "axis", -1))
    shape, given = g.shapes.get(x), _shape(g, scale)
    if shape is not None and not -len(shape) <= axis < len(shape):
        raise Unsupported(f"axis {axis} is out of range for a rank-{len(shape)} input")
    normalized = tuple(shape[axis:]) if shape is not None else None
    if given is not None and normalized is not None and tuple(given) != normalized:
        value = g.constants.get(scale)
        if value is None or not all(isinstance(d, int) for d in normalized):
            raise Unsupported(
                f"scale {list(given)} is not the normalised shape x.shape[axis:] = {list(normalized)}; "
                "rms_norm takes no broadcast scale unless it is a constant and the normalised dims are known"
            )
        while value.ndim > len(normalized) and value.shape[0] == 1:  # leading 1s of the broadcast
            value = value[0]
        try:
            value = np.ascontiguousarray(np.broadcast_to(value, normalized))
        except ValueError:
            raise Unsupported(
                f"scale {list(given)} does not broadcast to the normalised shape x.shape[axis:] = "
                f"{list(normalized)} (a scale along the other axes is not an RMS normalisation's)"
            ) from None
        scale = f"{y}__scale"
        g.constants[scale] = value
        g.dtypes[scale] = dtype or str(value.dtype)
    g.stage(
        node,
        "rms_norm",
        [x, scale],
        node.outputs[:1],
        axis=axis,
        eps=float32_attr(_attr(node, "epsilon", 1e-5)),
    )


def _rotary_embedding(g: Graph, node: Node) -> None:
    """RotaryEmbedding (opset 23) as rotary_embedding: the same inputs and attributes (checked against x's
    shape here when it is known, so a bad head split is listed with the node)."""
    attrs = {
        "interleaved": bool(_attr(node, "interleaved", 0)),
        "rotary_embedding_dim": int(_attr(node, "rotary_embedding_dim", 0)),
        "num_heads": int(_attr(node, "num_heads", 0)),
    }
    shape = g.shapes.get(node.inputs[0])
    if shape is not None:
        try:
            rotary_geometry(shape, attrs)
        except PipeLinkError as e:
            raise Unsupported(e.message) from None
    g.stage(node, "rotary_embedding", _inputs(node, 4), node.outputs[:1], **attrs)


def _attention(g: Graph, node: Node) -> None:
    """Attention (opsets 23-25), lowered in ``attention.py``: one attention stage, with the key/value
    cache and ONNX's masks around it, or stage by stage for softcap, qk_matmul_output and
    softmax_precision; what it cannot express exactly is refused with the reason."""
    try:
        lower_attention(g, node)
    except AttentionError as e:
        raise Unsupported(str(e)) from None


def _transpose(g: Graph, node: Node) -> None:
    perm = [int(p) for p in _attr(node, "perm", [])]
    g.stage(node, "transpose", node.inputs[:1], node.outputs[:1], **({"perm": perm} if perm else {}))


def _target(g: Graph, node: Node, from_shape_value: Callable, what: str) -> list[int] | None:
    """Input 1 of a Reshape or Expand: from a shape value the model computes (onnx/fold.py), else a
    constant (None when absent)."""
    try:
        shape = from_shape_value(g, node)
    except Unfoldable as e:
        raise Unsupported(str(e)) from None
    return shape if shape is not None else g.ints(node, 1, "shape", what)


def _reshape(g: Graph, node: Node) -> None:
    shape = _target(g, node, reshape_target, "the new shape")
    if shape is None:
        raise Unsupported("Reshape needs its shape input")
    g.stage(
        node,
        "reshape",
        node.inputs[:1],
        node.outputs[:1],
        shape=shape,
        allowzero=bool(_attr(node, "allowzero", 0)),
    )


def _flatten(g: Graph, node: Node) -> None:
    g.stage(node, "flatten", node.inputs[:1], node.outputs[:1], axis=int(_attr(node, "axis", 1)))


def _squeeze(g: Graph, node: Node) -> None:
    axes = g.ints(node, 1, "axes", "the axes")
    g.stage(node, "squeeze", node.inputs[:1], node.outputs[:1], **({"axes": axes} if axes else {}))


def _unsqueeze(g: Graph, node: Node) -> None:
    axes = g.ints(node, 1, "axes", "the axes")
    if not axes:
        raise Unsupported("Unsqueeze needs its axes (an input or the attribute)")
    g.stage(node, "unsqueeze", node.inputs[:1], node.outputs[:1], axes=axes)


def _concat(g: Graph, node: Node) -> None:
    if len(node.inputs) > _MAX_PORTS:
        raise Unsupported(f"{len(node.inputs)} inputs; PipeLink's concat joins at most {_MAX_PORTS}")
    g.stage(node, "concat", _inputs(node, _MAX_PORTS), node.outputs[:1], axis=int(_attr(node, "axis")))


def _pad(g: Graph, node: Node) -> None:
    """ONNX Pad, axis by axis, from PipeLink's slice, expand and concat: a negative pad crops (slice); a
    positive one joins the borders to the tensor (concat), made by mode: ``constant`` a bound constant
    block, ``edge`` the edge slice expanded, ``reflect`` a reversed slice without the edge, ``wrap`` the
    slice of the other end. Each padded axis needs its size; ``constant`` needs every dim."""
    mode = _attr(node, "mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise Unsupported(f"Pad mode {mode!r}; PipeLink imports constant, edge, reflect and wrap")
    x, y = node.inputs[0], node.outputs[0]
    shape = g.shapes.get(x)
    if shape is None:
        raise Unsupported("Pad needs its input's shape")
    rank = len(shape)
    pads = (
        g.ints(node, 1, "pads", "the pads") if g.opset >= 11 else [int(p) for p in node.attrs.get("pads", [])]
    )
    axes = g.ints(node, 3, "axes", "the axes") if g.opset >= 18 else None
    axes = [a % rank for a in axes] if axes else list(range(rank))
    if pads is None or len(pads) != 2 * len(axes):
        raise Unsupported(f"Pad needs {2 * len(axes)} pads (begin and end per axis), got {pads}")
    value = g.const(node, 2, "the constant value") if g.opset >= 11 else node.attrs.get("value", 0.0)
    value = 0.0 if value is None else np.asarray(value).reshape(-1)[0] if np.size(value) else 0.0
    dtype = g.dtypes.get(x)
    cur, dims, step = x, list(shape), 0

    def out(tag: str) -> str:
        nonlocal step
        step += 1
        return f"{y}__pad{step}_{tag}"

    todo = [(a, b, e) for a, b, e in zip(axes, pads[: len(axes)], pads[len(axes) :], strict=True) if b or e]
    for k, (axis, begin, end) in enumerate(todo):
        size = dims[axis]
        if not isinstance(size, int):
            raise Unsupported(f"Pad of axis {axis}, whose size is known only when the model runs")
        last = k == len(todo) - 1
        if begin < 0 or end < 0:  # crop first
            stop = size + min(end, 0)
            name = y if last and begin <= 0 and end <= 0 else out("crop")
            g.stage(node, "slice", [cur], [name], starts=[max(-begin, 0)], ends=[stop], axes=[axis])
            cur, size = name, stop - max(-begin, 0)
            dims[axis] = size
            begin, end = max(begin, 0), max(end, 0)
            if not (begin or end):
                continue
        if mode == "reflect" and (begin >= size or end >= size):
            raise Unsupported(
                f"Pad mode reflect by {max(begin, end)} on an axis of {size}: at most {size - 1}"
            )
        if mode in ("edge", "wrap") and size == 0:
            raise Unsupported(f"Pad mode {mode} of an empty axis")
        if mode == "wrap" and max(begin, end) > size:
            raise Unsupported(f"Pad mode wrap by {max(begin, end)} on an axis of {size}: at most {size}")
        parts = []
        for side, width in (("begin", begin), ("end", end)):
            if not width:
                parts.append(None)
                continue
            name = out(side)
            if mode == "constant":
                if dtype is None or not all(isinstance(d, int) for d in dims):
                    raise Unsupported("Pad mode constant needs every dim of its input and its dtype")
                block = [width if i == axis else d for i, d in enumerate(dims)]
                too_large = table_problem("Pad's constant block", tuple(block), dtype)
                if too_large:
                    raise Unsupported(too_large)
                g.constants[name] = np.full(block, value, dtype=get_dtype(dtype).numpy)
                g.dtypes[name] = dtype
            elif mode == "edge":
                edge = out(f"{side}_edge")
                at = 0 if side == "begin" else size - 1
                g.stage(node, "slice", [cur], [edge], starts=[at], ends=[at + 1], axes=[axis])
                target = [width if i == axis else 1 for i in range(rank)]
                g.stage(node, "expand", [edge], [name], shape=target)
            elif mode == "reflect":
                # begin: x[width:0:-1]; end: x[size-2 : size-2-width : -1], where a stop before index 0
                # is written -(size + 1) (a negative end counts from the back)
                stop = size - 2 - width if size - 2 - width >= 0 else -(size + 1)
                starts, ends = ([width], [0]) if side == "begin" else ([size - 2], [stop])
                g.stage(node, "slice", [cur], [name], starts=starts, ends=ends, axes=[axis], steps=[-1])
            else:  # wrap: the other end
                starts, ends = ([size - width], [size]) if side == "begin" else ([0], [width])
                g.stage(node, "slice", [cur], [name], starts=starts, ends=ends, axes=[axis])
            parts.append(name)
        joined = y if last else out("joined")
        g.stage(node, "concat", [p for p in (parts[0], cur, parts[1]) if p], [joined], axis=axis)
        cur = joined
        dims[axis] = size + begin + end
    if cur == x:  # nothing to pad
        g.stage(node, "identity", [x], [y])


def _grouped_norm(g: Graph, node: Node, groups: int | None) -> None:
    """GroupNormalization (``groups`` from its attribute) and InstanceNormalization (``groups`` None: one
    per channel) of x ``[N, C, ...]``: x viewed as ``[N, G, C/G * spatial]``, ``layer_norm`` over the last
    axis, viewed back, then the per-channel scale and bias (``mul``, ``add`` of ``[C, 1, ...]`` constants).
    C and the spatial dims must be known (N may be symbolic)."""
    x, y = node.inputs[0], node.outputs[0]
    shape, dtype = g.shapes.get(x), g.dtypes.get(x)
    if shape is None or len(shape) < 3 or dtype is None or not all(isinstance(d, int) for d in shape[1:]):
        raise Unsupported(f"{node.op_type} needs its input's dtype and every dim but the batch")
    channels = shape[1]
    groups = channels if groups is None else groups
    if groups < 1 or channels % groups:
        raise Unsupported(f"{node.op_type}: {channels} channels do not split into {groups} groups")
    scale, bias = g.const(node, 1, "the scale"), g.const(node, 2, "the bias")
    per_channel = []
    for what, value in (("scale", scale), ("bias", bias)):
        value = np.asarray(value).reshape(-1)
        if value.size == groups and groups != channels:  # GroupNormalization before opset 21: per group
            value = np.repeat(value, channels // groups)
        if value.size != channels:
            raise Unsupported(f"{node.op_type}: {what} has {value.size} entries for {channels} channels")
        name = f"{y}__{what}"
        g.constants[name] = value.reshape((channels,) + (1,) * (len(shape) - 2)).astype(
            get_dtype(dtype).numpy
        )
        g.dtypes[name] = dtype
        per_channel.append(name)
    eps = float32_attr(_attr(node, "epsilon", 1e-5))
    g.stage(node, "reshape", [x], [f"{y}__groups"], shape=[0, groups, -1], allowzero=False)
    g.stage(node, "layer_norm", [f"{y}__groups"], [f"{y}__normed"], axis=-1, eps=eps)
    g.stage(node, "reshape", [f"{y}__normed"], [f"{y}__back"], shape=[0, *shape[1:]], allowzero=False)
    g.stage(node, "mul", [f"{y}__back", per_channel[0]], [f"{y}__scaled"])
    g.stage(node, "add", [f"{y}__scaled", per_channel[1]], [y])


def _group_norm(g: Graph, node: Node) -> None:
    if "num_groups" not in node.attrs:
        raise Unsupported("GroupNormalization needs its num_groups attribute")
    _grouped_norm(g, node, int(node.attrs["num_groups"]))


def _split(g: Graph, node: Node) -> None:
    if len(node.outputs) > _MAX_PORTS:
        raise Unsupported(f"{len(node.outputs)} outputs; PipeLink's split makes at most {_MAX_PORTS}")
    sizes = g.ints(node, 1, "split", "the part sizes")
    attrs: dict[str, Any] = {"axis": int(_attr(node, "axis", 0))}
    if sizes:
        attrs["split"] = sizes
    else:
        attrs["num_outputs"] = int(_attr(node, "num_outputs", len(node.outputs)))
    g.stage(node, "split", node.inputs[:1], node.outputs, **attrs)


def _slice(g: Graph, node: Node) -> None:
    starts = g.ints(node, 1, "starts", "starts")
    ends = g.ints(node, 2, "ends", "ends")
    axes = g.ints(node, 3, "axes", "axes")
    steps = g.ints(node, 4, "steps", "steps")
    if starts is None or ends is None:
        raise Unsupported("Slice needs its starts and ends")
    attrs: dict[str, Any] = {"starts": starts, "ends": ends}
    if axes:
        attrs["axes"] = axes
    if steps:
        attrs["steps"] = steps
    g.stage(node, "slice", node.inputs[:1], node.outputs[:1], **attrs)


def _gather(g: Graph, node: Node) -> None:
    g.stage(node, "gather", node.inputs[:2], node.outputs[:1], axis=int(_attr(node, "axis", 0)))


def _gather_elements(g: Graph, node: Node) -> None:
    g.stage(node, "gather_elements", node.inputs[:2], node.outputs[:1], axis=int(_attr(node, "axis", 0)))


def _gather_nd(g: Graph, node: Node) -> None:
    g.stage(
        node, "gather_nd", node.inputs[:2], node.outputs[:1], batch_dims=int(_attr(node, "batch_dims", 0))
    )


def _scatter_elements(g: Graph, node: Node) -> None:
    g.stage(
        node,
        "scatter_elements",
        node.inputs[:3],
        node.outputs[:1],
        axis=int(_attr(node, "axis", 0)),
        reduction=str(_attr(node, "reduction", "none")),
    )


def _one_hot(g: Graph, node: Node) -> None:
    """OneHot: depth a constant (a positive integer, becoming one_hot's attribute), values [off, on] a
    stage input (its dtype is the output's), integer indices. Opset 11's semantics: before it, a negative
    index meant an all-off line instead of counting from the end."""
    if g.opset < 11:
        raise Unsupported(
            f"OneHot of opset {g.opset}: a negative index means an all-off line there, but one_hot counts "
            "it from the end (opset 11); convert the model to opset 11 or later"
        )
    depth = g.const(node, 1, "the depth")
    if depth is None or np.size(depth) != 1:
        raise Unsupported("depth (input 1) must be a constant scalar")
    value = np.asarray(depth).reshape(-1)[0]
    if value.dtype.kind == "f" and (not np.isfinite(value) or value != np.floor(value)):
        raise Unsupported(f"depth must be a whole number (got {value})")
    if int(value) < 1:
        raise Unsupported(f"depth must be >= 1 (got {int(value)})")
    indices = node.inputs[0]
    dtype = g.dtypes.get(indices)
    if dtype is not None and get_dtype(dtype).is_floating:
        raise Unsupported(
            f"indices of dtype {dtype}; PipeLink's one_hot takes integer indices (cast them to int64)"
        )
    g.stage(
        node,
        "one_hot",
        [indices, node.inputs[2]],
        node.outputs[:1],
        depth=int(value),
        axis=int(_attr(node, "axis", -1)),
    )


def _eye_like(g: Graph, node: Node) -> None:
    """EyeLike: k and the optional dtype attribute (absent: the input's dtype)."""
    attrs: dict[str, Any] = {"k": int(_attr(node, "k", 0))}
    if _attr(node, "dtype") is not None:
        attrs["dtype"] = onnx_dtype(int(_attr(node, "dtype")))
    g.stage(node, "eye_like", node.inputs[:1], node.outputs[:1], **attrs)


def _trilu(g: Graph, node: Node) -> None:
    """Trilu: k an optional constant input (a scalar), upper an attribute (default 1)."""
    k = g.ints(node, 1, "", "k")
    if k is not None and len(k) != 1:
        raise Unsupported("k (input 1) must be a scalar")
    g.stage(
        node,
        "trilu",
        node.inputs[:1],
        node.outputs[:1],
        k=k[0] if k else 0,
        upper=bool(_attr(node, "upper", 1)),
    )


def _expand(g: Graph, node: Node) -> None:
    try:
        shape = _target(g, node, expand_target, "the shape")
    except Unsupported as e:  # a dim known only at run time that x lacks: taken from its tensor
        value = g.symbolic.get(node.inputs[1])
        if not isinstance(value, list):
            raise
        try:
            broadcast_to_value(g, node, node.inputs[0], value, node.outputs[0])
        except RuntimeDimsError as why:
            raise Unsupported(f"{e}; {why}") from None
        return
    g.stage(node, "expand", node.inputs[:1], node.outputs[:1], shape=shape)


def _constant_of_shape(g: Graph, node: Node) -> None:
    """ConstantOfShape of a shape the model computes from dims known only when it runs (its constant
    inputs fold at import, fold.py): the fill (``value``, default float32 0) broadcast to it."""
    value = g.symbolic.get(node.inputs[0]) if node.inputs else None
    if not isinstance(value, list):
        raise Unsupported(unfolded_reason(g, node))
    import onnx

    fill = node.attrs.get("value")
    array = np.zeros(1, np.float32) if fill is None else onnx.numpy_helper.to_array(fill)  # check.py read it
    if array.size != 1:
        raise Unsupported(f"ConstantOfShape's value must have one element (got {array.size})")
    name = f"{node.outputs[0]}__fill"
    g.constants[name] = array.reshape(())
    g.shapes[name] = ()
    g.dtypes[name] = onnx_dtype(onnx.helper.np_dtype_to_tensor_dtype(array.dtype))
    try:
        broadcast_to_value(g, node, name, value, node.outputs[0])
    except RuntimeDimsError as why:
        raise Unsupported(f"ConstantOfShape to a shape known only when the model runs: {why}") from None


def _reduce_attrs(g: Graph, node: Node, axes_input_opset: int) -> dict[str, Any]:
    """A Reduce* node's axes (an input from ``axes_input_opset``, an attribute before), keepdims and
    noop_with_empty_axes, as PipeLink's reduce operators take them."""
    axes = g.ints(node, 1, "axes", "the axes") if g.opset >= axes_input_opset else None
    if axes is None and "axes" in node.attrs:
        axes = [int(a) for a in node.attrs["axes"]]
    attrs: dict[str, Any] = {"keepdims": bool(_attr(node, "keepdims", 1))}
    if axes:
        attrs["axes"] = axes
    if _attr(node, "noop_with_empty_axes", 0):
        attrs["noop_with_empty_axes"] = True
    return attrs


def _reduce(operator: str, axes_input_opset: int) -> Converter:
    def convert_node(g: Graph, node: Node) -> None:
        g.stage(node, operator, node.inputs[:1], node.outputs[:1], **_reduce_attrs(g, node, axes_input_opset))

    return convert_node


def _arg_reduce(operator: str) -> Converter:
    """ArgMax / ArgMin: axis (default 0), keepdims (default 1), select_last_index (opset 12+, default 0)."""

    def convert_node(g: Graph, node: Node) -> None:
        g.stage(
            node,
            operator,
            node.inputs[:1],
            node.outputs[:1],
            axis=int(_attr(node, "axis", 0)),
            keepdims=bool(_attr(node, "keepdims", 1)),
            select_last_index=bool(_attr(node, "select_last_index", 0)),
        )

    return convert_node


def _scan(operator: str) -> Converter:
    """CumSum, CumProd: the axis a constant input (a scalar or one element), exclusive and reverse
    attributes."""

    def convert_node(g: Graph, node: Node) -> None:
        axis = g.ints(node, 1, "", "the axis")
        if axis is None or len(axis) != 1:
            raise Unsupported("the axis (input 1) must be a constant scalar")
        g.stage(
            node,
            operator,
            node.inputs[:1],
            node.outputs[:1],
            axis=axis[0],
            exclusive=bool(_attr(node, "exclusive", 0)),
            reverse=bool(_attr(node, "reverse", 0)),
        )

    return convert_node


def _top_k(g: Graph, node: Node) -> None:
    """TopK: K a constant input of one int64 element (opset 10+; the attribute k in opset 1), made top_k's
    ``k``; axis (default -1), largest and sorted (opset 11+, default 1) attributes."""
    if g.opset >= 10:
        k = g.const(node, 1, "K")
        if k is None or np.asarray(k).size != 1 or np.asarray(k).dtype != np.int64:
            got = "absent" if k is None else f"{np.asarray(k).dtype} of shape {list(np.asarray(k).shape)}"
            raise Unsupported(f"K (input 1) must be a constant 1-element int64 tensor (got {got})")
        k = int(np.asarray(k).reshape(-1)[0])
    else:
        k = int(_attr(node, "k", 0))
    g.stage(
        node,
        "top_k",
        node.inputs[:1],
        node.outputs[:2],
        k=k,
        axis=int(_attr(node, "axis", -1)),
        largest=bool(_attr(node, "largest", 1)),
        sorted=bool(_attr(node, "sorted", 1)),
    )


# ReduceMin = -max(-x), ReduceSumSquare = sum(x * x), ReduceL2 = sqrt(sum(x * x)), ReduceL1 = sum(|x|),
# ReduceLogSum = log(sum(x)):
# (before, the reduction, after) in PipeLink's elementwise and reduce operators.
_COMPOSED_REDUCTIONS = {
    "ReduceMin": ("neg", "reduce_max", "neg", 18),
    "ReduceSumSquare": ("square", "reduce_sum", None, 18),
    "ReduceL2": ("square", "reduce_sum", "sqrt", 18),
    "ReduceL1": ("abs", "reduce_sum", None, 18),
    "ReduceLogSum": (None, "reduce_sum", "log", 18),
}


def _reduce_log_sum_exp(g: Graph, node: Node) -> None:
    """ONNX ReduceLogSumExp as ``log(sum(exp(x - m))) + m``, m the maximum over the axes (kept for the
    subtraction, squeezed when keepdims is 0), so no exp overflows."""
    attrs = _reduce_attrs(g, node, 18)
    if attrs.get("noop_with_empty_axes") and "axes" not in attrs:
        raise Unsupported("ReduceLogSumExp with noop_with_empty_axes and no axes (the input unreduced)")
    x, y = node.inputs[0], node.outputs[0]
    keep = attrs | {"keepdims": True}
    g.stage(node, "reduce_max", [x], [f"{y}__max"], **keep)
    g.stage(node, "sub", [x, f"{y}__max"], [f"{y}__shifted"])
    g.stage(node, "exp", [f"{y}__shifted"], [f"{y}__exp"])
    g.stage(node, "reduce_sum", [f"{y}__exp"], [f"{y}__sum"], **attrs)
    g.stage(node, "log", [f"{y}__sum"], [f"{y}__log_sum"])
    m = f"{y}__max"
    if not attrs["keepdims"]:
        m = f"{y}__max_squeezed"
        g.stage(node, "squeeze", [f"{y}__max"], [m], **({"axes": attrs["axes"]} if "axes" in attrs else {}))
    g.stage(node, "add", [f"{y}__log_sum", m], [y])


def _composed_reduction(g: Graph, node: Node) -> None:
    before, reduction, after, axes_input_opset = _COMPOSED_REDUCTIONS[node.op_type]
    attrs = _reduce_attrs(g, node, axes_input_opset)
    if attrs.get("noop_with_empty_axes") and "axes" not in attrs:
        raise Unsupported(f"{node.op_type} with noop_with_empty_axes and no axes (the input unreduced)")
    x, y = node.inputs[0], node.outputs[0]
    pre = x if before is None else f"{y}__{before}"
    if before is not None:
        g.stage(node, "mul" if before == "square" else before, [x, x] if before == "square" else [x], [pre])
    reduced = y if after is None else f"{y}__{reduction}"
    g.stage(node, reduction, [pre], [reduced], **attrs)
    if after is not None:
        g.stage(node, after, [reduced], [y])


def _window(node: Node, *names: str) -> dict[str, Any]:
    """The spatial attributes a 2-d window operator takes, checked to be 2-d."""
    attrs: dict[str, Any] = {}
    for name in names:
        if name in node.attrs:
            value = _attr(node, name)
            attrs[name] = value if isinstance(value, str) else [int(v) for v in value]
    kernel = node.attrs.get("kernel_shape")
    if kernel is not None and len(kernel) != 2:
        raise Unsupported(
            f"a {len(kernel)}-d window (kernel_shape {list(kernel)}); PipeLink has 2-d ones only"
        )
    return attrs


def conv2d_stage(g: Graph, node: Node) -> tuple[list[str], dict[str, Any]]:
    """The inputs and attributes of the conv2d stage of an ONNX Conv node (also for the import's Conv +
    Relu fusion, onnx/fuse.py).

    Raises
    ------
    Unsupported
        A window other than 2-d, an absent input before a present one.
    """
    attrs = _window(node, "strides", "pads", "dilations", "auto_pad")
    weight = g.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if weight is not None and weight.ndim != 4:
        raise Unsupported(f"a {weight.ndim - 2}-d convolution; PipeLink's conv2d is 2-d")
    if int(_attr(node, "group", 1)) != 1:
        attrs["group"] = int(_attr(node, "group"))
    return _inputs(node, 3), attrs


def _conv(g: Graph, node: Node) -> None:
    if _is_1d(g, node):
        _as_2d(g, node, _conv)
        return
    inputs, attrs = conv2d_stage(g, node)
    g.stage(node, "conv2d", inputs, node.outputs[:1], **attrs)


def _is_1d(g: Graph, node: Node) -> bool:
    """Whether a Conv, ConvTranspose, MaxPool or AveragePool node slides a 1-d window (``[N, C, L]``)."""
    kernel = node.attrs.get("kernel_shape")
    if kernel is not None:
        return len(kernel) == 1
    weighted = node.op_type in _WEIGHTED_WINDOWS and len(node.inputs) > 1
    weight = g.constants.get(node.inputs[1]) if weighted else None
    if weight is not None:
        return weight.ndim == 3
    shape = g.shapes.get(node.inputs[0])
    return shape is not None and len(shape) == 3


def _as_2d(g: Graph, node: Node, convert_2d: Converter) -> None:
    """A 1-d window node run as the 2-d one over a unit height: x ``[N, C, L]`` unsqueezed to
    ``[N, C, 1, L]`` (a view), the window attributes given a leading unit axis (kernel ``[1, k]``, pads
    ``[0, p0, 0, p1]``, a ConvTranspose's output_padding ``[0, p]``), a Conv's or ConvTranspose's
    constant weight ``[A, B, k]`` reshaped to ``[A, B, 1, k]`` (else unsqueezed by a stage), and the
    result squeezed back."""
    y = node.outputs[0]
    attrs = dict(node.attrs)
    for name in ("kernel_shape", "strides", "dilations", "output_padding", "pads"):
        if name in attrs and len(attrs[name]) != (2 if name == "pads" else 1):
            raise Unsupported(f"attribute {name}={list(attrs[name])} does not fit a 1-d window")
    units = (
        ("kernel_shape", 1),
        ("strides", 1),
        ("dilations", 1),
        ("output_padding", 0),
        ("output_shape", 1),
    )
    for name, unit in units:
        if name in attrs:
            attrs[name] = [unit, *(int(v) for v in attrs[name])]
    if "pads" in attrs:
        begin, end = (int(v) for v in attrs["pads"])
        attrs["pads"] = [0, begin, 0, end]
    inputs = list(node.inputs)
    g.stage(node, "unsqueeze", [inputs[0]], [f"{y}__2d_in"], axes=[2])
    shape = g.shapes.get(inputs[0])
    if shape is not None and len(shape) == 3:  # what a 2-d converter reads of its input (pads it implies)
        g.shapes[f"{y}__2d_in"] = (shape[0], shape[1], 1, shape[2])
    inputs[0] = f"{y}__2d_in"
    if node.op_type in _WEIGHTED_WINDOWS and len(inputs) > 1 and inputs[1]:
        weight = g.constants.get(inputs[1])
        if weight is not None:
            name = f"{inputs[1]}__2d"
            g.constants[name] = weight.reshape(weight.shape[0], weight.shape[1], 1, weight.shape[2])
            g.dtypes[name] = g.dtypes.get(inputs[1]) or get_dtype(weight.dtype).name
        else:
            name = f"{y}__2d_w"
            g.stage(node, "unsqueeze", [inputs[1]], [name], axes=[2])
        inputs[1] = name
    flat = Node(node.op_type, node.name, node.domain, inputs, [f"{y}__2d_out", *node.outputs[1:]], attrs)
    convert_2d(g, flat)
    g.stage(node, "squeeze", [f"{y}__2d_out"], [y], axes=[2])


_WEIGHTED_WINDOWS = frozenset({"Conv", "ConvTranspose"})


def _conv_transpose(g: Graph, node: Node) -> None:
    if _is_1d(g, node):
        _as_2d(g, node, _conv_transpose)
        return
    attrs = _window(node, "strides", "pads", "output_padding", "dilations")
    weight = g.constants.get(node.inputs[1])
    rank = len(g.shapes[node.inputs[0]]) if g.shapes.get(node.inputs[0]) is not None else None
    if (weight is not None and weight.ndim != 4) or rank not in (None, 4):
        dims = weight.ndim - 2 if weight is not None and weight.ndim != 4 else rank - 2
        raise Unsupported(f"a {dims}-d transposed convolution; PipeLink's are 1-d and 2-d")
    weight_shape = weight.shape if weight is not None else g.shapes.get(node.inputs[1])
    for name in ("strides", "dilations", "output_padding", "kernel_shape"):
        given = attrs.get(name, node.attrs.get(name))
        if given is not None and len(given) != 2:
            raise Unsupported(f"attribute {name}={list(given)} must give the 2 spatial dims")
    _transposed_pads(g, node, attrs, None if weight_shape is None else tuple(weight_shape[2:]))
    if int(_attr(node, "group", 1)) != 1:
        attrs["group"] = int(_attr(node, "group"))
    g.stage(node, "conv_transpose2d", _inputs(node, 3), node.outputs[:1], **attrs)


def _transposed_pads(g: Graph, node: Node, attrs: dict[str, Any], kernel: tuple | None) -> None:
    """ConvTranspose's output_shape, or auto_pad SAME_UPPER / SAME_LOWER (output = input * stride), as
    the pads they imply, computed at import from the input's spatial dims: the total padding
    ``stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - out`` split as the spec says (the
    larger half at the end for SAME_UPPER, at the start otherwise, as onnxruntime); a negative end (an
    output larger than the full one) is more output_padding. VALID is no padding."""
    auto_pad = _attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(
            f"attribute auto_pad={auto_pad!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER"
        )
    wanted = node.attrs.get("output_shape")
    if auto_pad == "VALID" and wanted is None:
        attrs.pop("pads", None)
        return
    if wanted is None and auto_pad == "NOTSET":
        return
    shape = g.shapes.get(node.inputs[0])
    sizes = list(shape[2:]) if shape is not None else []
    kernel = node.attrs.get("kernel_shape", kernel)
    known = [*sizes, *(kernel or [None])]
    if len(sizes) != 2 or not all(isinstance(d, int) for d in known):
        raise Unsupported(
            f"output_shape or auto_pad={auto_pad!r} needs the input's spatial dims and the kernel known "
            f"at import (input {shape}, kernel {None if kernel is None else list(kernel)})"
        )
    strides = attrs.get("strides", [1, 1])
    dilations = attrs.get("dilations", [1, 1])
    extra = list(attrs.get("output_padding", [0, 0]))
    out = (
        [int(v) for v in wanted][-2:]
        if wanted is not None
        else [n * s for n, s in zip(sizes, strides, strict=True)]
    )
    if len(out) != 2:
        raise Unsupported(f"attribute output_shape={list(wanted)} must give the 2 spatial dims")
    begins, ends = [], []
    for axis in range(2):
        full = strides[axis] * (sizes[axis] - 1) + extra[axis] + (int(kernel[axis]) - 1) * dilations[axis] + 1
        total = full - out[axis]
        begin, end = (
            (total // 2, total - total // 2) if auto_pad == "SAME_UPPER" else (total - total // 2, total // 2)
        )
        if begin < 0:
            raise Unsupported(
                f"output_shape {out} is {-total} larger than the full output along spatial axis {axis}, "
                "which would pad the start; PipeLink pads only the end (output_padding)"
            )
        if end < 0:
            extra[axis], end = extra[axis] - end, 0
        begins.append(begin)
        ends.append(end)
    attrs["pads"] = begins + ends
    if any(extra):
        attrs["output_padding"] = extra


def _max_pool(g: Graph, node: Node) -> None:
    if len(node.outputs) > 1 and node.outputs[1]:  # Indices: lowerings.py (Y by this converter)
        max_pool_with_indices(g, node, _max_pool)
        return
    if _is_1d(g, node):
        _as_2d(g, node, _max_pool)
        return
    _only(node, storage_order=0)
    attrs = _window(node, "kernel_shape", "strides", "pads", "dilations", "auto_pad")
    if _attr(node, "ceil_mode", 0):
        attrs["ceil_mode"] = True
    g.stage(node, "max_pool2d", node.inputs[:1], node.outputs[:1], **attrs)


def _average_pool(g: Graph, node: Node) -> None:
    if _is_1d(g, node):
        _as_2d(g, node, _average_pool)
        return
    attrs = _window(node, "kernel_shape", "strides", "pads", "dilations", "auto_pad")
    if _attr(node, "ceil_mode", 0):
        attrs["ceil_mode"] = True
    if _attr(node, "count_include_pad", 0):
        attrs["count_include_pad"] = True
    g.stage(node, "avg_pool2d", node.inputs[:1], node.outputs[:1], **attrs)


def _lrn(g: Graph, node: Node) -> None:
    """ONNX LRN, ``y = x / (bias + alpha / size * s)^beta`` with s the sum of squares over a window of
    ``size`` channels: x*x viewed as ``[N, 1, C, rest]``, a zero-padded ``[size, 1]`` average pool (the
    sum / size), then scale, add, pow and div. Every dim but N must be known."""
    x, y = node.inputs[0], node.outputs[0]
    shape = g.shapes.get(x)
    if shape is None or len(shape) < 3 or not all(isinstance(d, int) for d in shape[1:]):
        raise Unsupported("LRN needs an input [N, C, ...] of rank 3 or more with every dim but N known")
    size = int(_attr(node, "size"))
    if size < 1:
        raise Unsupported(f"LRN size must be positive (got {size})")
    c, rest = int(shape[1]), int(np.prod(shape[2:]))
    back = [0, *(int(d) for d in shape[1:])]
    bias = _scalar(g, node, x, "bias", float(_attr(node, "bias", 1.0)))
    beta = _scalar(g, node, x, "beta", float(_attr(node, "beta", 0.75)))
    g.stage(node, "mul", [x, x], [f"{y}__square"])
    g.stage(node, "reshape", [f"{y}__square"], [f"{y}__rows"], shape=[0, 1, c, rest], allowzero=False)
    pads = [(size - 1) // 2, 0, size - 1 - (size - 1) // 2, 0]
    g.stage(
        node,
        "avg_pool2d",
        [f"{y}__rows"],
        [f"{y}__mean"],
        kernel_shape=[size, 1],
        pads=pads,
        count_include_pad=True,
    )
    g.stage(node, "reshape", [f"{y}__mean"], [f"{y}__window"], shape=back, allowzero=False)
    g.stage(
        node, "scale", [f"{y}__window"], [f"{y}__scaled"], factor=float32_attr(_attr(node, "alpha", 1e-4))
    )
    g.stage(node, "add", [f"{y}__scaled", bias], [f"{y}__base"])
    g.stage(node, "pow", [f"{y}__base", beta], [f"{y}__denominator"])
    g.stage(node, "div", [x, f"{y}__denominator"], [y])


def _mean_variance_normalization(g: Graph, node: Node) -> None:
    """ONNX MeanVarianceNormalization, ``(x - mean) / (std + 1e-9)`` over the axes (default [0, 2, 3]),
    the variance as the mean of the squared deviations (two passes; the spec's E[x^2] - E[x]^2 equals
    it, less the cancellation): reduce_mean, sub, mul, reduce_mean, sqrt, add, div."""
    x, y = node.inputs[0], node.outputs[0]
    axes = [int(a) for a in _attr(node, "axes", [0, 2, 3])]
    eps = _scalar(g, node, x, "eps", 1e-9)
    g.stage(node, "reduce_mean", [x], [f"{y}__mean"], axes=axes, keepdims=True)
    g.stage(node, "sub", [x, f"{y}__mean"], [f"{y}__centred"])
    g.stage(node, "mul", [f"{y}__centred", f"{y}__centred"], [f"{y}__square"])
    g.stage(node, "reduce_mean", [f"{y}__square"], [f"{y}__variance"], axes=axes, keepdims=True)
    g.stage(node, "sqrt", [f"{y}__variance"], [f"{y}__std"])
    g.stage(node, "add", [f"{y}__std", eps], [f"{y}__std_eps"])
    g.stage(node, "div", [f"{y}__centred", f"{y}__std_eps"], [y])


def _lp_normalization(g: Graph, node: Node) -> None:
    """ONNX LpNormalization, ``x / ||x||_p`` along the axis (p 2: sqrt of the sum of squares; p 1: the
    sum of |x|); where the norm is 0 the result is 0, not 0/0 (onnx's reference and its node tests)."""
    x, y = node.inputs[0], node.outputs[0]
    axis, p = int(_attr(node, "axis", -1)), int(_attr(node, "p", 2))
    if p not in (1, 2):
        raise Unsupported(f"LpNormalization p={p}; the spec has p 1 and 2")
    dtype = g.dtypes.get(x)
    if dtype is None:
        raise Unsupported("LpNormalization needs its input's dtype (the 0 a zero norm gives)")
    if p == 2:
        g.stage(node, "mul", [x, x], [f"{y}__square"])
        g.stage(node, "reduce_sum", [f"{y}__square"], [f"{y}__sum"], axes=[axis], keepdims=True)
        g.stage(node, "sqrt", [f"{y}__sum"], [f"{y}__norm"])
    else:
        g.stage(node, "abs", [x], [f"{y}__abs"])
        g.stage(node, "reduce_sum", [f"{y}__abs"], [f"{y}__norm"], axes=[axis], keepdims=True)
    zero = f"{y}__zero"
    g.constants[zero] = np.zeros((), get_dtype(dtype).numpy)
    g.dtypes[zero] = dtype
    g.stage(node, "div", [x, f"{y}__norm"], [f"{y}__quotient"])
    g.stage(node, "equal", [f"{y}__norm", zero], [f"{y}__zero_norm"])
    g.stage(node, "where", [f"{y}__zero_norm", zero, f"{y}__quotient"], [y])


def _compress(g: Graph, node: Node) -> None:
    """ONNX Compress with a constant condition: a ``gather`` of the indices where it is true along the
    axis (no axis: of the input flattened by a ``reshape``). A computed condition is refused: the output
    size would depend on its values."""
    x, y = node.inputs[0], node.outputs[0]
    if len(node.inputs) < 2 or node.inputs[1] not in g.constants:
        if len(node.inputs) > 1 and node.inputs[1] in g.inputs:
            g.const(node, 1, "the condition")  # a graph input: the refusal asks for its value
        raise Unsupported(
            "Compress with a condition the graph computes: its output size depends on the condition's "
            "values, and PipeLink's sizes are known before a stage runs (the condition must be a constant)"
        )
    condition = np.asarray(g.constants[node.inputs[1]])
    if condition.ndim != 1:
        raise Unsupported(f"Compress's condition must be 1-d (got shape {list(condition.shape)})")
    shape, axis = _shape(g, x), _attr(node, "axis")
    if shape is None:
        raise Unsupported("Compress needs its input's rank")
    if axis is not None and not -len(shape) <= int(axis) < len(shape):
        raise Unsupported(f"Compress axis {axis} is out of range for a rank-{len(shape)} input")
    dims = list(shape) if axis is None else [shape[int(axis) % len(shape)]]
    if not all(isinstance(d, int) for d in dims):
        raise Unsupported("Compress needs the size it selects from known at import (the axis, or every dim)")
    length, picked = int(np.prod(dims)), np.flatnonzero(condition).astype(np.int64)
    if picked.size and picked[-1] >= length:
        raise Unsupported(f"Compress's condition is true at {int(picked[-1])}, past the {length} entries")
    if not picked.size:
        raise Unsupported("Compress's condition selects nothing (an empty output)")
    indices = f"{y}__compress_indices"
    g.constants[indices], g.dtypes[indices] = picked, "int64"
    source = x
    if axis is None:
        source = f"{y}__flat"
        g.stage(node, "reshape", [x], [source], shape=[-1], allowzero=False)
    g.stage(node, "gather", [source, indices], [y], axis=0 if axis is None else int(axis))


def _reverse_sequence(g: Graph, node: Node) -> None:
    """ONNX ReverseSequence with constant sequence_lens: x ``[T, B, ...]`` (or ``[B, T, ...]``) viewed as
    ``[T*B, -1]``, a ``gather`` of its rows by a constant permutation (batch b's first lens[b] steps
    reversed), viewed back. T and B must be known; computed lengths are refused."""
    x, y = node.inputs[0], node.outputs[0]
    if len(node.inputs) < 2 or node.inputs[1] not in g.constants:
        if len(node.inputs) > 1 and node.inputs[1] in g.inputs:
            g.const(node, 1, "sequence_lens")  # a graph input: the refusal asks for its value
        raise Unsupported(
            "ReverseSequence with sequence_lens the graph computes; the reversal is a permutation built at "
            "import, so sequence_lens must be a constant"
        )
    lens = np.asarray(g.constants[node.inputs[1]]).reshape(-1).astype(np.int64)
    batch_axis, time_axis = int(_attr(node, "batch_axis", 1)), int(_attr(node, "time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise Unsupported(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1, one each")
    shape = _shape(g, x)
    if shape is None or len(shape) < 2 or not all(isinstance(d, int) for d in shape[:2]):
        raise Unsupported("ReverseSequence needs its input's rank (2 or more) and its batch and time sizes")
    rest = [d if isinstance(d, int) else -1 for d in shape[2:]]
    if rest.count(-1) > 1:
        raise Unsupported("ReverseSequence needs every dim after the first two known but one")
    batch, time = int(shape[batch_axis]), int(shape[time_axis])
    if lens.size != batch or (lens.size and (lens.min() < 0 or lens.max() > time)):
        raise Unsupported(
            f"sequence_lens {lens.tolist()} must have {batch} entries (the batch), each in [0, {time}]"
        )
    too_large = table_problem("ReverseSequence's row permutation", (time * batch,), "int64")
    if too_large:
        raise Unsupported(too_large)
    rows = np.arange(time * batch, dtype=np.int64).reshape(shape[0], shape[1])
    steps = rows if time_axis == 0 else rows.T  # [time, batch]
    order = steps.copy()
    for b, n in enumerate(lens.tolist()):
        order[:n, b] = steps[:n, b][::-1]
    perm = f"{y}__reverse_rows"
    g.constants[perm] = np.ascontiguousarray(order if time_axis == 0 else order.T).reshape(-1)
    g.dtypes[perm] = "int64"
    g.stage(node, "reshape", [x], [f"{y}__rows"], shape=[time * batch, -1], allowzero=False)
    g.stage(node, "gather", [f"{y}__rows", perm], [f"{y}__reversed"], axis=0)
    g.stage(node, "reshape", [f"{y}__reversed"], [y], shape=[*shape[:2], *rest], allowzero=False)


def _center_crop_pad(g: Graph, node: Node) -> None:
    """ONNX CenterCropPad with a constant shape: the Pad lowering with negative pads (crop) and positive
    ones (zeros) per axis, the odd one at the end (onnx's reference)."""
    x, y = node.inputs[0], node.outputs[0]
    target = g.ints(node, 1, "", "the shape")
    shape = g.shapes.get(x)
    if target is None or shape is None:
        raise Unsupported("CenterCropPad needs its shape input and its input's rank")
    rank = len(shape)
    axes = [int(a) for a in _attr(node, "axes", range(rank))]
    bad = any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes)
    if bad or len(target) != len(axes):
        raise Unsupported(f"CenterCropPad: shape {target} for axes {axes} of a rank-{rank} input")
    pads = [0] * (2 * rank)
    for axis, want in zip((a % rank for a in axes), target, strict=True):
        if not isinstance(shape[axis], int) or want < 0:
            raise Unsupported(f"CenterCropPad of axis {axis} (size {shape[axis]}) to {want}")
        change = abs(want - shape[axis])  # half before, the odd one after; negative pads crop
        sign = 1 if want >= shape[axis] else -1
        pads[axis], pads[rank + axis] = sign * (change // 2), sign * (change - change // 2)
    name = f"{y}__center_pads"
    g.constants[name], g.dtypes[name] = np.asarray(pads, np.int64), "int64"
    _pad(g, Node("Pad", node.name, node.domain, [x, name], [y], {"mode": "constant"}))


def _lp(g: Graph, node: Node, summed: Callable[[str, str], None]) -> None:
    """``(sum |x|^p)^(1/p)`` with ``summed(src, dst)`` the summing stages: ``abs`` (p 1), ``mul`` x x
    (p 2) or ``abs``, ``pow``; then none, ``sqrt`` or ``pow`` by 1/p."""
    x, y = node.inputs[0], node.outputs[0]
    p = int(_attr(node, "p", 2))
    if p < 1:
        raise Unsupported(f"{node.op_type} p={p}; p must be a positive integer")
    powered = f"{y}__abs" if p == 1 else f"{y}__square" if p == 2 else f"{y}__pow"
    if p == 2:
        g.stage(node, "mul", [x, x], [powered])
    else:
        g.stage(node, "abs", [x], [f"{y}__abs"])
    if p > 2:
        g.stage(node, "pow", [f"{y}__abs", _scalar(g, node, x, "p", float(p))], [powered])
    total = y if p == 1 else f"{y}__sum"
    summed(powered, total)
    if p == 2:
        g.stage(node, "sqrt", [total], [y])
    elif p > 2:
        g.stage(node, "pow", [total, _scalar(g, node, x, "inverse_p", 1.0 / p)], [y])


def _global_lp_pool(g: Graph, node: Node) -> None:
    """ONNX GlobalLpPool: the Lp norm over every spatial dim, kept (``reduce_sum``)."""
    shape = g.shapes.get(node.inputs[0])
    if shape is None or len(shape) < 3:
        raise Unsupported("GlobalLpPool needs its input's rank (N, C and at least one spatial dim)")
    axes = list(range(2, len(shape)))
    _lp(g, node, lambda src, dst: g.stage(node, "reduce_sum", [src], [dst], axes=axes, keepdims=True))


def _lp_pool(g: Graph, node: Node) -> None:
    """ONNX LpPool (2-d, and 1-d as Conv's): each window's sum as the zero-padded average
    (``avg_pool2d``, count_include_pad) times the window size (``scale``). ceil_mode is refused: its
    windows past the padding would be averaged over fewer taps."""
    if _is_1d(g, node):
        _as_2d(g, node, _lp_pool)
        return
    if _attr(node, "ceil_mode", 0):
        raise Unsupported("LpPool with ceil_mode=1 (the windows past the padding) is not supported")
    attrs = _window(node, "kernel_shape", "strides", "pads", "dilations", "auto_pad")
    if "kernel_shape" not in attrs:
        raise Unsupported("LpPool needs its kernel_shape")
    count = float(np.prod(attrs["kernel_shape"]))

    def summed(src: str, dst: str) -> None:
        mean = f"{node.outputs[0]}__mean"
        g.stage(node, "avg_pool2d", [src], [mean], count_include_pad=True, **attrs)
        g.stage(node, "scale", [mean], [dst], factor=count)

    _lp(g, node, summed)


def _resize_modes(g: Graph, node: Node) -> dict[str, Any]:
    """The mode attributes of a Resize (or Upsample) stage. Resize-10 and Upsample have no coordinate
    or nearest modes: they map an output pixel x to ``x / scale`` and take the floor for nearest (the
    ``asymmetric`` and ``floor`` modes of Resize-11, as onnxruntime runs them)."""
    old = node.op_type == "Upsample" or g.opset < 11
    return {
        "mode": _attr(node, "mode", "nearest"),
        "coordinate_transformation_mode": "asymmetric"
        if old
        else _attr(node, "coordinate_transformation_mode", "half_pixel"),
        "nearest_mode": "floor" if old else _attr(node, "nearest_mode", "round_prefer_floor"),
    }


def _upsample(g: Graph, node: Node) -> None:
    """ONNX Upsample (opsets 7-9, Resize's predecessor): ``resize`` by the scales (an attribute before
    opset 9, a constant input from it), with Resize-10's modes (:func:`_resize_modes`)."""
    scales = (
        g.const(node, 1, "scales") if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("scales")
    )
    if scales is None or not np.asarray(scales).size:
        raise Unsupported("Upsample needs its scales")
    attrs = _resize_modes(g, node)
    attrs["mode"] = "linear" if attrs["mode"] == "bilinear" else attrs["mode"]  # opset 7's spelling
    g.stage(
        node, "resize", node.inputs[:1], node.outputs[:1], scales=[float32_attr(v) for v in scales], **attrs
    )


def _resize(g: Graph, node: Node) -> None:
    _only(node, antialias=0, keep_aspect_ratio_policy="stretch")
    if "axes" in node.attrs:
        raise Unsupported("attribute axes is not supported; give scales or sizes for every axis")
    ratios = None
    if g.opset < 11:
        scales = g.const(node, 1, "scales")
        sizes = None
    elif len(node.inputs) > 3 and node.inputs[3] in g.symbolic:
        scales, sizes, ratios = None, None, _ratios_of_dims(g, node)
    else:
        scales, sizes = g.const(node, 2, "scales"), g.const(node, 3, "sizes")
    attrs = _resize_modes(g, node)
    if attrs["mode"] == "cubic":
        attrs["cubic_coeff_a"] = float32_attr(_attr(node, "cubic_coeff_a", -0.75))
        attrs["exclude_outside"] = bool(_attr(node, "exclude_outside", 0))
    if ratios is not None:
        attrs["scales"] = ratios
    elif sizes is not None and sizes.size:
        attrs["sizes"] = [int(s) for s in sizes]
    elif scales is not None and scales.size:
        attrs["scales"] = [float32_attr(s) for s in scales]
    else:
        raise Unsupported("Resize needs scales or sizes")
    g.stage(node, "resize", node.inputs[:1], node.outputs[:1], **attrs)


def _grid_sample(g: Graph, node: Node) -> None:
    """GridSample: opset 16's mode names (bilinear, nearest, bicubic) are opset 20's linear, nearest and
    cubic; the padding mode and align_corners as they are."""
    names = ("bilinear", "nearest", "bicubic") if g.opset < 20 else ("linear", "nearest", "cubic")
    mode = _attr(node, "mode", names[0])
    if mode not in names:
        raise Unsupported(f"mode {mode!r} is not one of opset {g.opset}'s {list(names)}")
    g.stage(
        node,
        "grid_sample",
        _inputs(node, 2),
        node.outputs[:1],
        mode=dict(zip(names, ("linear", "nearest", "cubic"), strict=True))[mode],
        padding_mode=str(_attr(node, "padding_mode", "zeros")),
        align_corners=bool(_attr(node, "align_corners", 0)),
    )


def _affine_grid(g: Graph, node: Node) -> None:
    """AffineGrid: its size a constant input, which becomes affine_grid's attribute."""
    size = g.ints(node, 1, "", "size")
    if size is None:
        raise Unsupported("AffineGrid needs its size input")
    g.stage(
        node,
        "affine_grid",
        node.inputs[:1],
        node.outputs[:1],
        size=size,
        align_corners=bool(_attr(node, "align_corners", 0)),
    )


def _ratios_of_dims(g: Graph, node: Node) -> list[float]:
    """Resize's sizes as a list of dims the model computes (``F.interpolate(x, size=(h, w))`` at a dynamic
    batch: x's own N and C, then sizes known at import) as the scales they imply: 1 where the entry is x's
    own dim, ``out / in`` (float64, resize's own ratio for sizes) for a size of a dim known at import,
    checked to give the size back (``floor(in * out / in) == out``), so the output and the sampling are
    those of the sizes."""
    value, x = g.symbolic[node.inputs[3]], node.inputs[0]
    shape = g.shapes.get(x)
    if not isinstance(value, list) or shape is None or len(value) != len(shape):
        raise Unsupported(
            "Resize's sizes are computed from dims known only when the model runs, and x's rank is unknown "
            "or differs from theirs"
        )
    ratios = []
    for axis, (entry, dim) in enumerate(zip(value, shape, strict=True)):
        if not isinstance(entry, int) and entry.same_as(x, axis, dim):
            ratios.append(1.0)
        elif isinstance(entry, int) and isinstance(dim, int) and entry > 0 and dim > 0:
            ratio = entry / dim
            if math.floor(dim * ratio) != entry:
                raise Unsupported(f"Resize's size {entry} of axis {axis} ({dim}) is no scale resize can give")
            ratios.append(ratio)
        else:
            raise Unsupported(
                f"Resize's size of axis {axis} is known only when the model runs and is not x's own dim "
                f"there ({dim}), or x's dim is unknown (export with fixed shapes)"
            )
    return ratios


def _depth_to_space(g: Graph, node: Node) -> None:
    g.stage(
        node,
        "pixel_shuffle",
        node.inputs[:1],
        node.outputs[:1],
        blocksize=int(_attr(node, "blocksize")),
        mode=_attr(node, "mode", "DCR"),
    )


def _batch_norm(g: Graph, node: Node) -> None:
    _only(node, training_mode=0)
    if len([o for o in node.outputs if o]) > 1:
        raise Unsupported("the running mean/var outputs (training) are not supported")
    x, scale, bias, mean, var = node.inputs[:5]
    g.stage(
        node,
        "batch_norm",
        [x, mean, var, scale, bias],
        node.outputs[:1],
        eps=float32_attr(_attr(node, "epsilon", 1e-5)),
    )


#: float8 dtypes: ONNX's Cast and CastLike saturate into them by default.
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
#: What quantize_linear (the saturating cast) reads.
_SATURATING_FROM = ("float32", "float16", "bfloat16")


def _cast_to(g: Graph, node: Node, dtype: str) -> None:
    """Cast, CastLike: ``cast`` to ``dtype``; into a float8 type with saturate (ONNX's default) a value
    beyond the finite range (or an infinity) clips to its largest finite value, as ``quantize_linear``
    by a scale of 1 computes it (round to nearest even, then clip); saturate 0 is the plain cast (NaN, or
    inf for float8_e5m2)."""
    _only(node, round_mode="up")
    saturate = bool(_attr(node, "saturate", 1))
    if dtype not in _FLOAT8 or not saturate:
        g.stage(node, "cast", node.inputs[:1], node.outputs[:1], dtype=dtype)
        return
    source = g.dtypes.get(node.inputs[0])
    if source not in _SATURATING_FROM:
        raise Unsupported(
            f"a saturating cast to {dtype} from {source or 'an unknown dtype'}: PipeLink saturates from "
            f"{', '.join(_SATURATING_FROM)} (cast to float32 first, or set saturate=0)"
        )
    one = f"{node.outputs[0]}__unit_scale"
    g.constants[one] = np.ones((), get_dtype(source).numpy)
    g.dtypes[one] = source
    g.stage(node, "quantize_linear", [node.inputs[0], one], node.outputs[:1], output_dtype=dtype)


def _cast(g: Graph, node: Node) -> None:
    _cast_to(g, node, onnx_dtype(int(_attr(node, "to"))))


def _cast_like(g: Graph, node: Node) -> None:
    """CastLike: cast to the dtype of the second input, read from the graph's types (its values are not
    needed: it is no stage input)."""
    like = node.inputs[1] if len(node.inputs) > 1 else ""
    dtype = g.dtypes.get(like)
    if dtype is None and like in g.constants:
        try:
            dtype = get_dtype(g.constants[like].dtype).name
        except PipeLinkError:
            raise Unsupported(
                f"target_type {like!r} has dtype {g.constants[like].dtype}, which PipeLink lacks"
            ) from None
    if dtype is None:
        raise Unsupported(
            f"CastLike needs the dtype of its target_type input {like!r} (the graph does not give it)"
        )
    _cast_to(g, node, dtype)


def _quantize(g: Graph, node: Node) -> None:
    _only(node, block_size=0, precision=0)
    attrs: dict[str, Any] = {"axis": int(_attr(node, "axis", 1))}
    if not _attr(node, "saturate", 1):
        attrs["saturate"] = False
    if _attr(node, "output_dtype", 0):
        attrs["output_dtype"] = onnx_dtype(int(_attr(node, "output_dtype")))
    g.stage(node, "quantize_linear", _inputs(node, 3), node.outputs[:1], **attrs)


def _dequantize(g: Graph, node: Node) -> None:
    _only(node, block_size=0, output_dtype=0)
    g.stage(node, "dequantize_linear", _inputs(node, 3), node.outputs[:1], axis=int(_attr(node, "axis", 1)))


def gemm_attrs(node: Node) -> dict[str, Any]:
    """The gemm attributes of an ONNX Gemm node (only those that differ from gemm's defaults)."""
    attrs: dict[str, Any] = {}
    for onnx_name, ours, default in (("alpha", "alpha", 1.0), ("beta", "beta", 1.0)):
        if float32_attr(_attr(node, onnx_name, default)) != default:
            attrs[ours] = float32_attr(_attr(node, onnx_name))
    for onnx_name, ours in (("transA", "trans_a"), ("transB", "trans_b")):
        if _attr(node, onnx_name, 0):
            attrs[ours] = True
    return attrs


def _loss(lower: Converter) -> Converter:
    """A loss lowering of onnx/losses.py, its LossError reported as the node's Unsupported."""

    def convert_loss(g: Graph, node: Node) -> None:
        try:
            lower(g, node)
        except LossError as e:
            raise Unsupported(str(e)) from None

    return convert_loss


def _gemm(g: Graph, node: Node) -> None:
    g.stage(node, "gemm", _inputs(node, 3), node.outputs[:1], **gemm_attrs(node))


def _einsum(g: Graph, node: Node) -> None:
    """ONNX Einsum, lowered onto existing operators (``einsum.py``: the equation's parser and the plan of
    as_strided, reduce_sum, squeeze, transpose, unsqueeze, reshape, mul and matmul stages). It needs
    each input's rank; what the plan cannot express exactly is refused with the reason."""
    equation = _attr(node, "equation")
    if not isinstance(equation, str) or not node.inputs or "" in node.inputs:
        raise Unsupported("Einsum needs its equation attribute and at least one input, none absent")
    shapes = []
    for name in node.inputs:
        shape = g.shapes.get(name)
        if shape is None and name in g.constants:
            shape = np.shape(g.constants[name])
        if shape is None:
            raise Unsupported(f"Einsum needs the rank of each input (shape inference gave none for {name!r})")
        shapes.append(shape)
    first = node.inputs[0]
    dtype = g.dtypes.get(first, str(g.constants[first].dtype) if first in g.constants else None)
    try:
        steps = einsum_plan(equation, shapes, dtype)
    except EinsumError as e:
        raise Unsupported(str(e)) from None
    y, values = node.outputs[0], list(node.inputs)
    for k, step in enumerate(steps):
        out = y if k == len(steps) - 1 else f"{y}__einsum{k}"
        g.stage(node, step.operator, [values[i] for i in step.inputs], [out], **step.attrs)
        values.append(out)


def _recurrent(g: Graph, node: Node) -> None:
    """ONNX LSTM, GRU and RNN, unrolled over the time steps onto gemm, slice, split, the activations and
    the elementwise ops (``recurrent.py``); what it cannot express exactly is refused with the reason."""
    try:
        lower_recurrent(g, node)
    except RecurrentError as e:
        raise Unsupported(str(e)) from None


#: ONNX op type (default domain) -> converter. Every operator PipeLink imports is listed here once.
CONVERTERS: dict[str, Converter] = {
    "Gemm": _gemm,
    "MatMul": _one_to_one("matmul", 2),
    "Einsum": _einsum,
    **dict.fromkeys(RECURRENT_OPS, _recurrent),
    "Add": _one_to_one("add", 2),
    "Sub": _one_to_one("sub", 2),
    "Mul": _one_to_one("mul", 2),
    "Div": _one_to_one("div", 2),
    "Pow": _pow,
    "Relu": _one_to_one("relu", 1),
    "Sigmoid": _one_to_one("sigmoid", 1),
    "Tanh": _one_to_one("tanh", 1),
    "Gelu": _gelu,
    "Erf": _one_to_one("erf", 1),
    "Exp": _one_to_one("exp", 1),
    "Sqrt": _one_to_one("sqrt", 1),
    "HardSwish": _one_to_one("hardswish", 1),
    "Neg": _one_to_one("neg", 1),
    "Abs": _one_to_one("abs", 1),
    "Log": _one_to_one("log", 1),
    "Reciprocal": _one_to_one("reciprocal", 1),
    "LeakyRelu": _with_alpha("leaky_relu", 0.01),
    "Elu": _with_alpha("elu", 1.0),
    "Celu": _with_alpha("celu", 1.0),
    "ThresholdedRelu": _with_alpha("thresholded_relu", 1.0),
    "Selu": _selu,
    "PRelu": _one_to_one("prelu", 2),
    "Sin": _one_to_one("sin", 1),
    "Cos": _one_to_one("cos", 1),
    "Tan": _one_to_one("tan", 1),
    "Asin": _one_to_one("asin", 1),
    "Acos": _one_to_one("acos", 1),
    "Atan": _one_to_one("atan", 1),
    "Sinh": _one_to_one("sinh", 1),
    "Cosh": _one_to_one("cosh", 1),
    "Asinh": _one_to_one("asinh", 1),
    "Acosh": _one_to_one("acosh", 1),
    "Atanh": _one_to_one("atanh", 1),
    "Swish": _with_alpha("silu", 1.0),  # x * sigmoid(alpha * x): silu's alpha
    "SwiGLU": swiglu,
    "Shrink": lambda g, node: g.stage(
        node,
        "shrink",
        node.inputs[:1],
        node.outputs[:1],
        lambd=float32_attr(_attr(node, "lambd", 0.5)),
        bias=float32_attr(_attr(node, "bias", 0.0)),
    ),
    "BitwiseAnd": _one_to_one("bitwise_and", 2),
    "BitwiseOr": _one_to_one("bitwise_or", 2),
    "BitwiseXor": _one_to_one("bitwise_xor", 2),
    "BitwiseNot": _one_to_one("bitwise_not", 1),
    "BitShift": lambda g, node: g.stage(
        node, "bit_shift", node.inputs[:2], node.outputs[:1], direction=str(_attr(node, "direction", ""))
    ),
    "Floor": _one_to_one("floor", 1),
    "Ceil": _one_to_one("ceil", 1),
    "Round": _one_to_one("round", 1),
    "Sign": _one_to_one("sign", 1),
    "Softplus": _one_to_one("softplus", 1),
    "Softsign": _one_to_one("softsign", 1),
    "Mish": _one_to_one("mish", 1),
    "Sum": _variadic_sum(mean=False),
    "Mean": _variadic_sum(mean=True),
    "Dropout": _dropout,
    "Tile": _tile,
    "SpaceToDepth": _space_to_depth,
    "LogSoftmax": _log_softmax,
    "NegativeLogLikelihoodLoss": _loss(negative_log_likelihood_loss),
    "SoftmaxCrossEntropyLoss": _loss(softmax_cross_entropy_loss),
    "ReduceLogSumExp": _reduce_log_sum_exp,
    "Max": _extremum("max"),
    "Min": _extremum("min"),
    "Clip": _clip,
    "Pad": _pad,
    "GroupNormalization": _group_norm,
    "InstanceNormalization": lambda g, node: _grouped_norm(g, node, None),
    "HardSigmoid": _hard_sigmoid,
    "GlobalMaxPool": _global_max_pool,
    "Softmax": _along_axis("softmax"),
    "Hardmax": _along_axis("hardmax"),
    "LayerNormalization": _layer_norm,
    "RMSNormalization": _rms_norm,
    "RotaryEmbedding": _rotary_embedding,
    "Attention": _attention,
    "Transpose": _transpose,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "ScatterND": lambda g, node: g.stage(
        node, "scatter_nd", node.inputs[:3], node.outputs[:1], reduction=str(_attr(node, "reduction", "none"))
    ),
    "GatherND": _gather_nd,
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,  # opsets 9-10: ScatterElements without reduction
    "TensorScatter": tensor_scatter,
    "OneHot": _one_hot,
    "EyeLike": _eye_like,
    "Where": _one_to_one("where", 3),
    "Equal": _one_to_one("equal", 2),
    "Less": _one_to_one("less", 2),
    "Greater": _one_to_one("greater", 2),
    "LessOrEqual": _one_to_one("less_equal", 2),
    "GreaterOrEqual": _one_to_one("greater_equal", 2),
    "And": _one_to_one("logical_and", 2),
    "Or": _one_to_one("logical_or", 2),
    "Xor": _one_to_one("logical_xor", 2),
    "Not": _one_to_one("logical_not", 1),
    "IsNaN": _one_to_one("is_nan", 1),
    "IsInf": lambda g, node: g.stage(
        node,
        "is_inf",
        node.inputs[:1],
        node.outputs[:1],
        detect_positive=bool(_attr(node, "detect_positive", 1)),
        detect_negative=bool(_attr(node, "detect_negative", 1)),
    ),
    "Expand": _expand,
    "ConstantOfShape": _constant_of_shape,
    "Mod": lambda g, node: g.stage(
        node, "fmod" if _attr(node, "fmod", 0) else "mod", node.inputs[:2], node.outputs[:1]
    ),
    "Trilu": _trilu,
    "ReduceMean": _reduce("reduce_mean", 18),
    "ReduceSum": _reduce("reduce_sum", 13),
    "ReduceMax": _reduce("reduce_max", 18),
    "ReduceProd": _reduce("reduce_prod", 18),
    "ArgMax": _arg_reduce("argmax"),
    "ArgMin": _arg_reduce("argmin"),
    "CumSum": _scan("cumsum"),
    "CumProd": _scan("cumprod"),
    "TopK": _top_k,
    **dict.fromkeys(_COMPOSED_REDUCTIONS, _composed_reduction),
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _max_pool,
    "MaxUnpool": max_unpool,
    "AveragePool": _average_pool,
    "GlobalAveragePool": _one_to_one("global_average_pool", 1),
    "Resize": _resize,
    "Upsample": _upsample,
    "GridSample": _grid_sample,
    "AffineGrid": _affine_grid,
    "LRN": _lrn,
    "MeanVarianceNormalization": _mean_variance_normalization,
    "LpNormalization": _lp_normalization,
    "Compress": _compress,
    "ReverseSequence": _reverse_sequence,
    "CenterCropPad": _center_crop_pad,
    "GlobalLpPool": _global_lp_pool,
    "LpPool": _lp_pool,
    "DepthToSpace": _depth_to_space,
    "BatchNormalization": _batch_norm,
    "Identity": _one_to_one("identity", 1),
    "Cast": _cast,
    "CastLike": _cast_like,
    "QuantizeLinear": _quantize,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
    "DequantizeLinear": _dequantize,
}


def convert(g: Graph, nodes: list[Node]) -> list[Rejected]:
    """Convert ``nodes`` (in graph order) into ``g.stages``; every node that cannot be, with why."""
    rejected: list[Rejected] = []
    for k, node in enumerate(nodes):
        label = node.name or f"#{k}"
        if node.domain == FUSED_DOMAIN:
            try:
                g.stage(node, node.op_type, node.inputs, node.outputs, **node.attrs)
            except Unsupported as e:
                rejected.append(Rejected(f"fused {node.op_type}", label, str(e)))
            continue
        if node.domain not in ONNX_DOMAINS:
            rejected.append(
                Rejected(node.op_type, label, f"operator domain {node.domain!r} is not supported")
            )
            continue
        converter = CONVERTERS.get(node.op_type)
        if converter is None:
            why = "no PipeLink operator for this op type"
            if node.op_type in FOLD_ONLY:  # evaluated at import when it can be: say why not
                why = f"{why}: {unfolded_reason(g, node)}"
            rejected.append(Rejected(node.op_type, label, why))
            continue
        try:
            converter(g, node)
        except Unsupported as e:
            rejected.append(Rejected(node.op_type, label, str(e), e.graph_input))
    return rejected
