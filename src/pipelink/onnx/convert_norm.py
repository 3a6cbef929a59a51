"""ONNX normalization converters: Layer, RMS, Group, Instance and Batch normalization, LRN,
MeanVarianceNormalization and LpNormalization.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import get_dtype
from .convert_common import _attr, _inputs, _only, _scalar
from .graph import Graph, Node, Unsupported, float32_attr
from .graph import shape_of as _shape

__all__: list[str] = []


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


def _grouped_norm(g: Graph, node: Node, groups: int | None) -> None:
    """GroupNormalization (``groups`` from its attribute) and InstanceNormalization (``groups`` None: one
    per channel) of x ``[N, C, ...]``: x viewed as ``[N, G, C/G * spatial]``, ``layer_norm`` over the last
    axis, viewed back, then the per-channel scale and bias (``mul``, ``add`` of ``[C, 1, ...]`` constants).
    C must be known, and the spatial dims but one (N may be symbolic; a spatial dim known only at run
    time, an audio length, is the view back's -1)."""
    x, y = node.inputs[0], node.outputs[0]
    shape, dtype = g.shapes.get(x), g.dtypes.get(x)
    spatial_unknown = sum(not isinstance(d, int) for d in shape[2:]) if shape is not None else 0
    if (
        shape is None
        or len(shape) < 3
        or dtype is None
        or not isinstance(shape[1], int)
        or spatial_unknown > 1
    ):
        raise Unsupported(
            f"{node.op_type} needs its input's dtype, its channels and every spatial dim but one "
            f"(got {list(shape) if shape is not None else None})"
        )
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
    back = [0, *(d if isinstance(d, int) else -1 for d in shape[1:])]
    g.stage(node, "reshape", [f"{y}__normed"], [f"{y}__back"], shape=back, allowzero=False)
    g.stage(node, "mul", [f"{y}__back", per_channel[0]], [f"{y}__scaled"])
    g.stage(node, "add", [f"{y}__scaled", per_channel[1]], [y])


def _group_norm(g: Graph, node: Node) -> None:
    if "num_groups" not in node.attrs:
        raise Unsupported("GroupNormalization needs its num_groups attribute")
    _grouped_norm(g, node, int(node.attrs["num_groups"]))


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


def _batch_norm(g: Graph, node: Node) -> None:
    """BatchNormalization with the running statistics (inference), or with ``training_mode=1``
    (opset 14 on) the batch's own: :func:`_batch_norm_training`."""
    training = _attr(node, "training_mode", 0)
    if training not in (0, 1):
        raise Unsupported(f"attribute training_mode={training!r} must be 0 or 1")
    if training:
        _batch_norm_training(g, node)
        return
    if len([o for o in node.outputs if o]) > 1:
        raise Unsupported(
            "the running mean and var outputs exist in training mode only (training_mode=1, opset 14 on)"
        )
    x, scale, bias, mean, var = node.inputs[:5]
    g.stage(
        node,
        "batch_norm",
        [x, mean, var, scale, bias],
        node.outputs[:1],
        eps=float32_attr(_attr(node, "epsilon", 1e-5)),
    )


def _batch_norm_training(g: Graph, node: Node) -> None:
    """BatchNormalization with ``training_mode=1``, as the spec's function: the batch's mean and population
    variance over every axis but the channels' (reduce_mean of x, and of its squared deviations from that
    mean) normalise x (batch_norm's formula with them), and the optional outputs are the updated running
    statistics, ``input * momentum + batch * (1 - momentum)``. Needs x's rank (the axes reduced)."""
    x, scale, bias, mean, var = node.inputs[:5]
    y = node.outputs[0]
    shape = _shape(g, x)
    if shape is None or len(shape) < 2:
        raise Unsupported("training_mode=1 reduces every axis of x but the channels': x's rank must be known")
    axes = [0, *range(2, len(shape))]
    momentum = float32_attr(_attr(node, "momentum", 0.9))
    g.stage(node, "reduce_mean", [x], [f"{y}__batch_mean"], axes=axes, keepdims=True)
    g.stage(node, "sub", [x, f"{y}__batch_mean"], [f"{y}__centered"])
    g.stage(node, "mul", [f"{y}__centered", f"{y}__centered"], [f"{y}__squared"])
    g.stage(node, "reduce_mean", [f"{y}__squared"], [f"{y}__batch_var"], axes=axes, keepdims=True)
    stats = {}
    for name in ("mean", "var"):
        stats[name] = f"{y}__batch_{name}_c"
        g.stage(node, "reshape", [f"{y}__batch_{name}"], [stats[name]], shape=[-1], allowzero=False)
    g.stage(
        node,
        "batch_norm",
        [x, stats["mean"], stats["var"], scale, bias],
        [y],
        eps=float32_attr(_attr(node, "epsilon", 1e-5)),
    )
    for running, batch, out in zip((mean, var), stats.values(), node.outputs[1:3], strict=False):
        if not out:
            continue
        g.stage(node, "scale", [running], [f"{out}__kept"], factor=momentum)
        g.stage(node, "scale", [batch], [f"{out}__new"], factor=1.0 - momentum)
        g.stage(node, "add", [f"{out}__kept", f"{out}__new"], [out])
