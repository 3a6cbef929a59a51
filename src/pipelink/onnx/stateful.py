"""ONNX's stateful sequence operators of linear-attention and state-space models (opset 27), lowered at
import onto PipeLink's existing operators: CausalConvWithState (a depthwise conv2d over the past state and
the input) and LinearAttention (its recurrence unrolled over the time steps, as onnx's reference runs it).

It adds no kernel and computes nothing at run time itself; what those operators cannot express exactly (a
sequence length unknown at import, an attribute value outside the spec, sizes that disagree) is refused
with the converter's ``Unsupported``, which the import reports with the node.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ops.shape import MAX_PARTS
from .convert_common import _attr
from .convert_window import _conv
from .graph import Node, Unsupported
from .graph import shape_of as _shape
from .lowerings import _constant, _dtype, _show, table_problem
from .recurrent import MAX_STEPS

__all__ = ["causal_conv_with_state", "linear_attention"]

#: CausalConvWithState's activations (``swish`` is the spec's other name for ``silu``).
_CONV_ACTIVATIONS = ("none", "silu", "swish")
#: LinearAttention's update rules: whether each decays the state (``decay``) and corrects by delta
#: (``beta``).
_UPDATE_RULES = {
    "linear": (False, False),
    "gated": (True, False),
    "delta": (False, True),
    "gated_delta": (True, True),
}
#: The float types both ops take.
_FLOATS = ("float32", "float16", "bfloat16")
#: A slice end past any axis (slice clamps it to the axis's size).
_END = 2**62


def _input(node: Node, index: int) -> str:
    return node.inputs[index] if index < len(node.inputs) and node.inputs[index] else ""


def _fits(shape: tuple, want: tuple) -> bool:
    """Whether ``shape`` can be ``want`` (one rank; each dim equal where both are known)."""
    return len(shape) == len(want) and all(
        not isinstance(d, int) or not isinstance(w, int) or d == w for d, w in zip(shape, want, strict=True)
    )


def _float_dtype(g: Any, node: Node, name: str, what: str) -> str:
    dtype = _dtype(g, name)
    if dtype not in _FLOATS:
        raise Unsupported(
            f"{node.op_type} input {what} ({name!r}) is {dtype or 'of unknown dtype'}; the spec's are "
            f"{', '.join(_FLOATS)}"
        )
    return dtype


# -- CausalConvWithState --------------------------------------------------------------------------------
def causal_conv_with_state(g: Any, node: Node) -> None:
    """CausalConvWithState: ``padded = concat(past_state, input)`` along the length (zeros of ``k - 1``
    steps without past_state: the conv's left pads), a depthwise ``conv2d`` (group = channels, the 1-d
    window over a unit height, as the Conv converter runs it) with the bias, ``silu`` for activation
    silu or swish; present_state is the last ``k - 1`` steps of ``padded`` (a ``slice``; without
    past_state and an input shorter than ``k - 1``, a zero block joined before it).

    Needs the weight's shape ``(channels, 1, k)`` at import; without past_state, the input's length too
    (and its batch where it is shorter than ``k - 1``)."""
    x, weight, bias, past = node.inputs[0], _input(node, 1), _input(node, 2), _input(node, 3)
    outs = list(node.outputs) + ["", ""]
    base = next((o for o in outs if o), node.name or node.op_type)
    activation = str(_attr(node, "activation", "none"))
    if activation not in _CONV_ACTIVATIONS:
        raise Unsupported(
            f"CausalConvWithState activation {activation!r}; the spec has {', '.join(_CONV_ACTIVATIONS)}"
        )
    dtype = _float_dtype(g, node, x, "input")
    shape, w_shape = _shape(g, x), _shape(g, weight) if weight else None
    if shape is None or len(shape) != 3:
        raise Unsupported(
            "CausalConvWithState needs its input of rank 3 (batch_size, channels, length), got "
            f"{_show(shape)}"
        )
    if w_shape is None or len(w_shape) != 3 or not all(isinstance(d, int) for d in w_shape):
        raise Unsupported(
            "CausalConvWithState needs its weight's shape (channels, 1, k) known at import, got "
            f"{_show(w_shape)}"
        )
    channels, one, k = w_shape
    if one != 1 or k < 1 or channels < 1 or not _fits(shape, (shape[0], channels, shape[2])):
        raise Unsupported(
            f"CausalConvWithState weight {_show(w_shape)} must be (channels, 1, k) for the input "
            f"{_show(shape)} (depthwise: one kernel per channel)"
        )
    for name, what in ((weight, "weight"), (bias, "bias"), (past, "past_state")):
        if name and _float_dtype(g, node, name, what) != dtype:
            raise Unsupported(f"CausalConvWithState {what} is {_dtype(g, name)} but the input is {dtype}")
    if bias and _shape(g, bias) not in (None, (channels,)):
        raise Unsupported(f"CausalConvWithState bias {_show(_shape(g, bias))} must be ({channels},)")
    past_shape = _shape(g, past) if past else None
    if past_shape is not None and not _fits(past_shape, (shape[0], channels, k - 1)):
        raise Unsupported(
            f"CausalConvWithState past_state {_show(past_shape)} must be (batch_size, {channels}, {k - 1}) "
            f"for the input {_show(shape)} and a kernel of {k}"
        )
    out, present = outs[:2]  # output is required (the import checks)
    if past:
        padded = f"{base}__padded"
        g.stage(node, "concat", [past, x], [padded], axis=2)
        window, pads = padded, [0, 0]
    else:
        window, pads = x, [k - 1, 0]
    if present:
        # the last k - 1 steps of padded (an empty one for k = 1)
        if past:
            g.stage(
                node,
                "slice",
                [padded],
                [present],
                starts=[-(k - 1) if k > 1 else _END],
                ends=[_END],
                axes=[2],
            )
        else:
            _present_without_past(g, node, present, (shape, channels, k, dtype), base)
    conv_out = out if activation == "none" else f"{base}__conv"
    attrs = {"kernel_shape": [k], "group": channels, "pads": pads}
    _conv(
        g,
        Node("Conv", node.name, node.domain, [window, weight] + ([bias] if bias else []), [conv_out], attrs),
    )
    if activation != "none":
        g.stage(node, "silu", [conv_out], [out])


def _present_without_past(g: Any, node: Node, present: str, sizes: tuple, base: str) -> None:
    """present_state without past_state: the last ``k - 1`` steps of ``concat(zeros, input)``."""
    x = node.inputs[0]
    shape, channels, k, dtype = sizes
    length = shape[2]
    if not isinstance(length, int):
        raise Unsupported(
            "CausalConvWithState without past_state needs the input's length known at import for its "
            f"present_state (the last {k - 1} steps of the zero-padded input), got {_show(shape)}"
        )
    if length >= k - 1:
        g.stage(node, "slice", [x], [present], starts=[length - (k - 1)], ends=[length], axes=[2])
        return
    batch = shape[0]
    if not isinstance(batch, int):
        raise Unsupported(
            f"CausalConvWithState without past_state, an input of {length} steps shorter than the kernel's "
            f"{k - 1} of state: its present_state starts with zeros, which need the batch size known at "
            f"import (got {_show(shape)})"
        )
    block = (batch, channels, k - 1 - length)
    why = table_problem("CausalConvWithState's zero state", block, dtype)
    if why:
        raise Unsupported(why)
    zeros = _constant(g, f"{base}__zero_state", np.zeros(block), dtype)
    g.stage(node, "concat", [zeros, x], [present], axis=2)


# -- LinearAttention --------------------------------------------------------------------------------------
def linear_attention(g: Any, node: Node) -> None:
    """LinearAttention as onnx's reference runs it: in float32 (other types cast there and back), the
    recurrence unrolled over the T steps, per step (``S`` the state ``[B, H_kv, d_k, d_v]``, absent =
    zeros when there is no past_state)::

        S = exp(g_t) * S                      (gated, gated_delta; one exp of the whole decay first)
        u = beta_t * (v_t - k_t^T S)          (delta, gated_delta; else u = v_t)
        S = S + k_t u^T                       (mul of a column and a row)
        o_t = q_t S                           (matmul, the group of query heads sharing the KV head)

    then the steps' outputs joined (``concat``), laid out ``[B, T, H_q * d_v]`` and multiplied by the
    scale; present_state is the last S. The inputs are laid out once (``reshape``, ``transpose``) so
    each step takes its rows with a ``slice``.

    Needs T (at most :data:`~pipelink.onnx.recurrent.MAX_STEPS`) and the last dims known at import.
    chunk_size is a tuning hint of chunked kernels; the result does not depend on it (the spec's words).
    """
    la = _read(g, node)
    q, k_rows, k_cols, v, decay, beta = _layout(la)
    state = _cast(la, la.past, "float32", "past_f32") if la.past else None
    steps = []
    for t in range(la.t):
        tag = f"t{t}"
        k_col = la.op("slice", [k_cols], f"{tag}_kcol", starts=[t], ends=[t + 1], axes=[3])
        u = la.op("slice", [v], f"{tag}_v", starts=[t], ends=[t + 1], axes=[2])
        if decay and state is not None:
            e_t = la.op("slice", [decay], f"{tag}_decay", starts=[t], ends=[t + 1], axes=[3])
            state = la.op("mul", [state, e_t], f"{tag}_decayed")
        if beta:
            if state is not None:
                k_row = la.op("slice", [k_rows], f"{tag}_krow", starts=[t], ends=[t + 1], axes=[2])
                read = la.op("matmul", [k_row, state], f"{tag}_retrieved")
                u = la.op("sub", [u, read], f"{tag}_delta")
            b_t = la.op("slice", [beta], f"{tag}_beta", starts=[t], ends=[t + 1], axes=[2])
            u = la.op("mul", [b_t, u], f"{tag}_update")
        write = la.op("mul", [k_col, u], f"{tag}_write")
        state = write if state is None else la.op("add", [state, write], f"{tag}_state")
        q_t = la.op("slice", [q], f"{tag}_q", starts=[t * la.group], ends=[(t + 1) * la.group], axes=[2])
        steps.append(la.op("matmul", [q_t, state], f"{tag}_out"))
    _finish(la, steps, state)


class _Plan:
    """What one LinearAttention node's lowering reads: its inputs, sizes and types, checked."""

    def __init__(self, g: Any, node: Node, **fields: Any) -> None:
        self.g, self.node = g, node
        self.base = next((o for o in node.outputs if o), node.name or node.op_type)
        self.__dict__.update(fields)

    def op(self, operator: str, inputs: list[str], tag: str, out: str = "", **attrs: Any) -> str:
        out = out or f"{self.base}__{tag}"
        self.g.stage(self.node, operator, inputs, [out], **attrs)
        return out


def _read(g: Any, node: Node) -> _Plan:
    """The node's attributes, inputs and sizes, each checked before the first stage."""
    rule = str(_attr(node, "update_rule", "gated_delta"))
    if rule not in _UPDATE_RULES:
        raise Unsupported(f"LinearAttention update_rule {rule!r}; the spec has {', '.join(_UPDATE_RULES)}")
    gating, delta = _UPDATE_RULES[rule]
    heads = {name: _attr(node, name) for name in ("q_num_heads", "kv_num_heads")}
    if any(v is None for v in heads.values()):
        raise Unsupported("LinearAttention needs its attributes q_num_heads and kv_num_heads")
    h_q, h_kv = int(heads["q_num_heads"]), int(heads["kv_num_heads"])
    if h_q <= 0 or h_kv <= 0 or h_q % h_kv:
        raise Unsupported(
            f"LinearAttention q_num_heads={h_q} must be a positive multiple of kv_num_heads={h_kv}"
        )
    q, k, v = node.inputs[:3]
    past, decay, beta = _input(node, 3), _input(node, 4), _input(node, 5)
    for name, needed, what in ((decay, gating, "decay"), (beta, delta, "beta")):
        if needed and not name:
            raise Unsupported(f"LinearAttention update_rule {rule!r} needs its {what} input")
        if name and not needed:
            raise Unsupported(
                f"LinearAttention update_rule {rule!r} takes no {what} input (the spec forbids it)"
            )
    dtype = _float_dtype(g, node, q, "query")
    for name, what in ((k, "key"), (v, "value"), (decay, "decay"), (beta, "beta")):
        if name and _float_dtype(g, node, name, what) != dtype:
            raise Unsupported(f"LinearAttention {what} is {_dtype(g, name)} but the query is {dtype}")
    state_dtype = _float_dtype(g, node, past, "past_state") if past else dtype
    shapes = {what: _shape(g, name) for what, name in (("query", q), ("key", k), ("value", v))}
    for what, shape in shapes.items():
        if shape is None or len(shape) != 3 or not all(isinstance(d, int) for d in shape[1:]):
            raise Unsupported(
                f"LinearAttention needs its {what} of rank 3 (B, T, H*D) with T and H*D known at import "
                f"(got {_show(shape)})"
            )
    t = shapes["query"][1]
    if t < 1 or t > MAX_STEPS:
        raise Unsupported(
            f"LinearAttention over {t} steps: the import unrolls the recurrence step by step, at least 1 and "
            f"at most {MAX_STEPS} (MAX_STEPS) steps: export with shorter sequences"
        )
    d_k, d_v = shapes["query"][2] // h_q, shapes["value"][2] // h_kv
    wanted = {"query": (t, h_q * d_k), "key": (t, h_kv * d_k), "value": (t, h_kv * d_v)}
    if (
        d_k < 1
        or d_v < 1
        or any(shapes[w][1:] != wanted[w] for w in wanted)
        or not _one_batch(shapes.values())
    ):
        raise Unsupported(
            f"LinearAttention query {_show(shapes['query'])}, key {_show(shapes['key'])} and value "
            f"{_show(shapes['value'])} do not fit q_num_heads={h_q}, kv_num_heads={h_kv} (query (B, T, "
            "q_num_heads*d_k), key (B, T, kv_num_heads*d_k), value (B, T, kv_num_heads*d_v))"
        )
    batch = shapes["query"][0]
    decay_width = _side_input(g, decay, "decay", (h_kv, h_kv * d_k), (batch, t)) if decay else 0
    beta_width = _side_input(g, beta, "beta", (h_kv, 1), (batch, t)) if beta else 0
    past_shape = _shape(g, past) if past else None
    if past_shape is not None and not _fits(past_shape, (batch, h_kv, d_k, d_v)):
        raise Unsupported(
            f"LinearAttention past_state {_show(past_shape)} must be (B, kv_num_heads, d_k, d_v) = "
            f"{_show((batch, h_kv, d_k, d_v))}"
        )
    scale = float(_attr(node, "scale", 0.0))
    return _Plan(
        g,
        node,
        q=q,
        k=k,
        v=v,
        past=past,
        decay=decay,
        beta=beta,
        t=t,
        h_kv=h_kv,
        group=h_q // h_kv,
        d_k=d_k,
        d_v=d_v,
        decay_width=decay_width,
        beta_width=beta_width,
        dtype=dtype,
        state_dtype=state_dtype,
        scale=scale if scale != 0.0 else 1.0 / math.sqrt(d_k),
    )


def _one_batch(shapes: Any) -> bool:
    known = {s[0] for s in shapes if isinstance(s[0], int)}
    return len(known) <= 1


def _side_input(g: Any, name: str, what: str, widths: tuple, leading: tuple) -> int:
    """The last dim of decay or beta (one of ``widths``), its shape checked against (B, T, ...)."""
    shape = _shape(g, name)
    batch, t = leading
    if shape is None or not _fits(shape, (batch, t, shape[-1])) or shape[1] != t or shape[2] not in widths:
        choices = " or ".join(str(w) for w in widths)
        raise Unsupported(
            f"LinearAttention {what} {_show(shape)} must be (B, T, {choices}) with T = {t} and its last dim "
            "known at import"
        )
    return int(shape[2])


def _cast(la: _Plan, name: str, dtype: str, tag: str, out: str = "") -> str:
    """``name`` as ``dtype``: itself where it has that type already (or into ``out`` by identity)."""
    if _dtype(la.g, name) != dtype:
        return la.op("cast", [name], tag, out, dtype=dtype)
    return la.op("identity", [name], tag, out) if out else name


def _layout(la: _Plan) -> tuple[str, str, str, str, str, str]:
    """The inputs in float32, laid out for the steps' slices: q ``[B, H_kv, T*G, d_k]`` (rows t*G..),
    k as rows ``[B, H_kv, T, d_k]`` and as columns ``[B, H_kv, d_k, T]``, v ``[B, H_kv, T, d_v]``,
    exp(decay) ``[B, H_kv, d_k or 1, T]``, beta ``[B, H_kv or 1, T, 1]`` ("" where absent)."""
    t, h, grp, d_k, d_v = la.t, la.h_kv, la.group, la.d_k, la.d_v
    q32, k32, v32 = (_cast(la, n, "float32", f"{w}_f32") for n, w in ((la.q, "q"), (la.k, "k"), (la.v, "v")))
    q = la.op("reshape", [q32], "q_heads", shape=[-1, t, h, grp, d_k])
    q = la.op("transpose", [q], "q_by_head", perm=[0, 2, 1, 3, 4])
    q = la.op("reshape", [q], "q_rows", shape=[-1, h, t * grp, d_k])
    k = la.op("reshape", [k32], "k_heads", shape=[-1, t, h, d_k])
    k_rows = la.op("transpose", [k], "k_rows", perm=[0, 2, 1, 3]) if la.beta else ""
    k_cols = la.op("transpose", [k], "k_cols", perm=[0, 2, 3, 1])
    v = la.op("reshape", [v32], "v_heads", shape=[-1, t, h, d_v])
    v = la.op("transpose", [v], "v_rows", perm=[0, 2, 1, 3])
    decay = beta = ""
    if la.decay:
        per_key = d_k if la.decay_width == h * d_k else 1
        e = la.op("exp", [_cast(la, la.decay, "float32", "decay_f32")], "decay_exp")
        e = la.op("reshape", [e], "decay_heads", shape=[-1, t, h, per_key])
        decay = la.op("transpose", [e], "decay_cols", perm=[0, 2, 3, 1])
    if la.beta:
        b = la.op(
            "reshape",
            [_cast(la, la.beta, "float32", "beta_f32")],
            "beta_heads",
            shape=[-1, t, la.beta_width, 1],
        )
        beta = la.op("transpose", [b], "beta_rows", perm=[0, 2, 1, 3])
    return q, k_rows, k_cols, v, decay, beta


def _finish(la: _Plan, steps: list[str], state: str) -> None:
    """output: the steps' ``[B, H_kv, G, d_v]`` joined, laid out ``[B, T, H_q*d_v]``, scaled, cast back;
    present_state: the last state in past_state's type (the query's without one)."""
    t, h, grp, d_v = la.t, la.h_kv, la.group, la.d_v
    output, present = (list(la.node.outputs) + [""])[:2]  # output is required (the import checks)
    y = la.op("reshape", [_join(la, steps)], "out_heads", shape=[-1, h, t, grp, d_v])
    y = la.op("transpose", [y], "out_by_step", perm=[0, 2, 1, 3, 4])
    y = la.op("reshape", [y], "out_rows", shape=[-1, t, h * grp * d_v])
    scale = _constant(la.g, f"{la.base}__scale", la.scale, "float32")
    if la.dtype == "float32":
        la.op("mul", [y, scale], "", output)
    else:
        la.op("cast", [la.op("mul", [y, scale], "out_scaled")], "", output, dtype=la.dtype)
    if present:
        _cast(la, state, la.state_dtype, "", present)


def _join(la: _Plan, parts: list[str]) -> str:
    """``parts`` joined along axis 2 (a tree of concats of at most MAX_PARTS inputs each)."""
    level = 0
    while len(parts) > 1:
        parts = [
            la.op("concat", parts[k : k + MAX_PARTS], f"join{level}_{k // MAX_PARTS}", axis=2)
            if len(parts[k : k + MAX_PARTS]) > 1
            else parts[k]
            for k in range(0, len(parts), MAX_PARTS)
        ]
        level += 1
    return parts[0]
