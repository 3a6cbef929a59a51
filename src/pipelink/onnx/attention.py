"""ONNX Attention (opsets 23-25) lowered at import onto PipeLink's operators: one ``attention`` stage
where the node asks only what that operator computes, with the key/value cache (``concat``) and the masks
ONNX derives around it (a bottom-right causal frontier, sliding windows, the padding of nonpad_kv_seqlen,
a short attn_mask padded) as constant tables, compares and ``logical_and``; softcap, qk_matmul_output and
a softmax_precision other than float32 through an explicit lowering (matmul, scale, tanh, add, softmax,
where, matmul).

It adds no kernel and computes nothing at run time itself; what those operators cannot express exactly is
refused with :class:`AttentionError`, naming the input or the attribute; the converter reports it with
the node. The constant tables it builds from declared sizes are bounded before they are allocated
(``lowerings.table_problem``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from .graph import shape_of as _shape
from .lowerings import table_problem

__all__ = ["AttentionError", "lower_attention"]

#: softmax_precision (an ONNX element type) -> the dtype the explicit lowering's softmax reads.
_PRECISIONS = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


class AttentionError(Exception):
    """Why one Attention node cannot be imported (the converter reports it with the node)."""


@dataclass
class _Plan:
    """What one node asks, read and checked once: tensors (ONNX names, "" when absent), sizes (None where
    unknown) and attributes."""

    g: Any  # the converter's Graph
    node: Any  # the converter's Node
    rank: int
    dtype: str | None
    heads: int | None
    kv_heads: int | None
    q_len: Any
    total: Any  # past + new keys: the keys attention runs over
    past: Any
    head_size: Any
    v_head_size: Any
    mask: str
    past_key: str
    past_value: str
    nonpad: str
    is_causal: bool
    scale: float | None
    softcap: float
    mode: int
    precision: str | None
    left: int
    right: int

    @property
    def y(self) -> str:
        return self.node.outputs[0]

    def output(self, k: int) -> str:
        return _output(self.node, k)

    @property
    def explicit(self) -> bool:
        """Whether the node needs the explicit lowering (the attention operator cannot compute it)."""
        return bool(
            self.softcap
            or self.output(3)
            or self.precision not in (None, "float32")
            or self.dtype == "float64"  # the attention operator takes float32 and the half types
        )

    @property
    def offset(self) -> Any:
        """The causal frontier's offset without nonpad_kv_seqlen: the past length (0 without a cache;
        None when unknown)."""
        return self.past if self.past_key else 0

    @property
    def windowed(self) -> bool:
        return self.left >= 0 or self.right >= 0

    def op(self, operator: str, inputs: list[str], tag: str, out: str = "", **attrs: Any) -> str:
        """One stage of ``operator``; its output ``out`` or ``y__tag``."""
        out = out or f"{self.y}__{tag}"
        self.g.stage(self.node, operator, inputs, [out], **attrs)
        return out

    def constant(self, tag: str, value: np.ndarray, dtype: str) -> str:
        name = f"{self.y}__{tag}"
        self.g.constants[name] = np.ascontiguousarray(value, dtype=get_dtype(dtype).numpy)
        self.g.dtypes[name] = dtype
        return name


def _attr(node, name: str, default: Any = None) -> Any:
    return node.attrs.get(name, default)


def _float32(value: Any) -> float:
    """An ONNX float attribute as the shortest decimal that reads back to its float32 (0.01, not
    0.009999999776482582)."""
    return float(str(np.float32(value)))


def _dtype(g, name: str) -> str | None:
    if name not in g.constants:
        return g.dtypes.get(name)
    try:
        return get_dtype(g.constants[name].dtype).name
    except PipeLinkError:
        return str(g.constants[name].dtype)


def _input(node, k: int) -> str:
    return node.inputs[k] if len(node.inputs) > k else ""


def _output(node, k: int) -> str:
    return node.outputs[k] if len(node.outputs) > k else ""


def _known(*dims: Any) -> bool:
    return all(isinstance(d, int) for d in dims)


def _check_table(what: str, shape: tuple, dtype: str) -> None:
    """Refuse a constant table too large to build (before it is allocated)."""
    why = table_problem(what, shape, dtype)
    if why:
        raise AttentionError(why)


def _read(g, node) -> _Plan:
    """The node's plan, after refusing what the spec forbids or PipeLink cannot compute."""
    q, k, v = node.inputs[:3]
    shapes = [_shape(g, t) for t in (q, k, v)]
    ranks = {len(s) if s is not None else None for s in shapes}
    if len(ranks) != 1 or ranks & {None} or not ranks <= {3, 4}:
        raise AttentionError(
            f"Q, K and V must all be known 3-d or 4-d tensors (ranks {sorted(ranks, key=str)})"
        )
    rank = ranks.pop()
    heads, kv_heads = _heads(node, rank, shapes)
    seq, last = (1, 2) if rank == 3 else (2, 3)  # [B, S, heads * D] or [B, heads, S, D]
    q_len, kv_len = shapes[0][seq], shapes[1][seq]
    head_size, v_head_size = shapes[0][last], shapes[2][last]
    if rank == 3:  # (a hidden size the heads do not divide is the reshape's to refuse, at load)
        head_size = head_size // heads if _known(head_size) and head_size % heads == 0 else None
        v_head_size = v_head_size // kv_heads if _known(v_head_size) and v_head_size % kv_heads == 0 else None
    past_key, past_value, nonpad = _input(node, 4), _input(node, 5), _input(node, 6)
    if bool(past_key) != bool(past_value):
        raise AttentionError("past_key and past_value must be given together (inputs 4 and 5)")
    past = _past_length(g, past_key, past_value, kv_heads, head_size, v_head_size) if past_key else 0
    if nonpad and (past_key or _output(node, 1) or _output(node, 2)):
        raise AttentionError(
            "input 6 (nonpad_kv_seqlen) is for an external cache: the spec forbids it with past_key/"
            "past_value or present_key/present_value"
        )
    if nonpad and _dtype(g, nonpad) not in (None, "int64"):
        raise AttentionError(f"input 6 (nonpad_kv_seqlen) must be int64 (got {_dtype(g, nonpad)})")
    softcap = _float32(_attr(node, "softcap", 0.0))
    if softcap < 0:
        raise AttentionError(f"attribute softcap={softcap} must be >= 0 (0: no soft cap)")
    mode = int(_attr(node, "qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise AttentionError(f"attribute qk_matmul_output_mode={mode} must be 0, 1, 2 or 3")
    if mode == 0 and softcap and _output(node, 3):
        raise AttentionError(
            "output 3 (qk_matmul_output) with qk_matmul_output_mode=0 and a softcap is not supported: the "
            "spec and its function body give the raw product, onnx's reference evaluator the softcapped one "
            "(mode 1 is the softcapped product, without ambiguity)"
        )
    precision = _attr(node, "softmax_precision")
    if precision is not None and int(precision) not in _PRECISIONS:
        raise AttentionError(
            f"attribute softmax_precision={precision} is not one the spec allows "
            f"({', '.join(f'{k} ({n})' for k, n in _PRECISIONS.items())})"
        )
    windows = [int(_attr(node, name, -1)) for name in ("left_window_size", "right_window_size")]
    for name, size in zip(("left_window_size", "right_window_size"), windows, strict=True):
        if size < -1:
            raise AttentionError(f"attribute {name}={size} must be -1 (unbounded) or >= 0")
    scale = _attr(node, "scale")
    plan = _Plan(
        g=g,
        node=node,
        rank=rank,
        dtype=_dtype(g, q),
        heads=heads,
        kv_heads=kv_heads,
        q_len=q_len,
        total=kv_len if not past_key else past + kv_len if _known(past, kv_len) else None,
        past=past,
        head_size=head_size,
        v_head_size=v_head_size,
        mask=_input(node, 3),
        past_key=past_key,
        past_value=past_value,
        nonpad=nonpad,
        is_causal=bool(_attr(node, "is_causal", 0)),
        scale=None if scale is None else _float32(scale),
        softcap=softcap,
        mode=mode,
        precision=None if precision is None else _PRECISIONS[int(precision)],
        left=windows[0],
        right=windows[1],
    )
    if plan.mask and _dtype(g, plan.mask) not in (None, "bool", plan.dtype):
        raise AttentionError(
            f"attn_mask is {_dtype(g, plan.mask)}: it must be bool (True: attend) or Q's {plan.dtype}"
        )
    return plan


def _heads(node, rank: int, shapes: list) -> tuple[int | None, int | None]:
    """(q_num_heads, kv_num_heads): the attributes of 3-d inputs, the 4-d inputs' head dims (checked
    against the attributes where given)."""
    given = [_attr(node, "q_num_heads"), _attr(node, "kv_num_heads")]
    if rank == 3:
        if None in given or min(given) < 1:
            raise AttentionError(f"3-d Q, K, V need q_num_heads and kv_num_heads >= 1 (got {given})")
        return int(given[0]), int(given[1])
    have = [shapes[0][1], shapes[1][1]]
    for attr, want, dim in zip(("q_num_heads", "kv_num_heads"), given, have, strict=True):
        if want is not None and want != dim:
            raise AttentionError(f"attribute {attr}={want} differs from the 4-d input's heads ({dim})")
    return tuple(d if _known(d) else None for d in have)  # type: ignore[return-value]


def _past_length(g, past_key: str, past_value: str, kv_heads, head_size, v_head_size) -> Any:
    """The cache's length, after checking that past_key is ``[B, kv_num_heads, past, head_size]`` and
    past_value ``[B, kv_num_heads, past, v_head_size]`` (4-d for 3-d Q, K, V too, as the spec says)."""
    shapes = {"past_key": _shape(g, past_key), "past_value": _shape(g, past_value)}
    for name, shape in shapes.items():
        if shape is None or len(shape) != 4:
            raise AttentionError(
                f"{name} must be a 4-d [batch, kv_num_heads, past_sequence_length, head_size] tensor (got "
                f"{'an unknown shape' if shape is None else f'rank {len(shape)}'})"
            )
    (_, hk, pk, dk), (_, hv, pv, dv) = shapes["past_key"], shapes["past_value"]
    for what, got, want in (
        ("past_key's heads", hk, kv_heads),
        ("past_value's heads", hv, kv_heads),
        ("past_key's head size", dk, head_size),
        ("past_value's head size", dv, v_head_size),
        ("past_value's length", pv, pk),
    ):
        if _known(got, want) and got != want:
            raise AttentionError(f"{what} is {got}, but {want} in K and V (or past_key)")
    return pk


# -- the lowering ---------------------------------------------------------------------------------------
def lower_attention(g, node) -> None:
    """Add the stages of one Attention node to ``g``.

    Raises
    ------
    AttentionError
        The node asks what the spec forbids, or what PipeLink's operators cannot compute exactly.
    """
    plan = _read(g, node)
    q, k, v = _head_views(plan)
    k, v = _cache(plan, k, v)
    # attention's own causal mask is top-left: ONNX's when nothing shifts the frontier
    causal_attr = plan.is_causal and plan.offset == 0 and not (plan.explicit or plan.nonpad or plan.windowed)
    mask = _mask(plan, plan.is_causal and not causal_attr)
    heads_out = plan.y if plan.rank == 4 else f"{plan.y}__heads"
    if plan.explicit:
        _explicit(plan, q, k, v, mask, heads_out)
    else:
        attrs: dict[str, Any] = {"is_causal": causal_attr}
        if plan.scale is not None:
            attrs["scale"] = plan.scale
        if mask is not None:
            attrs["masked_rows"] = "zero"
        plan.op("attention", [q, k, v] + ([mask] if mask else []), "", out=heads_out, **attrs)
    if plan.rank == 3:
        tokens = plan.op("transpose", [heads_out], "tokens", perm=[0, 2, 1, 3])
        plan.op("reshape", [tokens], "", out=plan.y, shape=[0, 0, -1], allowzero=False)


def _head_views(plan: _Plan) -> list[str]:
    """Q, K, V as ``[B, heads, S, D]``: 4-d inputs as they are, 3-d ones reshaped and transposed."""
    q, k, v = plan.node.inputs[:3]
    if plan.rank == 4:
        return [q, k, v]
    viewed = []  # by role, not by name: self-attention may pass one tensor as Q, K and V
    for role, name, count in (("q", q, plan.heads), ("k", k, plan.kv_heads), ("v", v, plan.kv_heads)):
        split = plan.op("reshape", [name], f"{role}_split", shape=[0, 0, count, -1], allowzero=False)
        viewed.append(plan.op("transpose", [split], f"{role}_heads", perm=[0, 2, 1, 3]))
    return viewed


def _cache(plan: _Plan, k: str, v: str) -> tuple[str, str]:
    """present_key/present_value: past concatenated with K/V along the sequence axis (a copy of K/V
    without a cache); the tensors attention runs over."""
    present = []
    for role, new, past, out in (
        ("key", k, plan.past_key, plan.output(1)),
        ("value", v, plan.past_value, plan.output(2)),
    ):
        if past:
            present.append(plan.op("concat", [past, new], f"present_{role}", out=out, axis=2))
        elif out:
            present.append(plan.op("identity", [new], "", out=out))
        else:
            present.append(new)
    return present[0], present[1]


def _sizes(plan: _Plan, what: str) -> tuple[int, int]:
    if not _known(plan.q_len, plan.total):
        raise AttentionError(
            f"{what} needs the query length and the total key length known at import (it is built as a "
            f"constant table; got S={plan.q_len}, T={plan.total}): export with fixed sequence lengths"
        )
    if plan.q_len < 0 or plan.total < 0:
        raise AttentionError(f"{what} got a negative query or key length (S={plan.q_len}, T={plan.total})")
    return plan.q_len, plan.total


def _static_table(plan: _Plan, causal: bool, dtype: str = "bool") -> np.ndarray | None:
    """The keys each query may see by the causal frontier (when ``causal``) and the windows at a fixed
    offset (the past length, or 0): a bool [S, T] constant (bounded as ``dtype``, the widest form it is
    bound in); None when it hides nothing."""
    if plan.nonpad or not (causal or plan.windowed):
        return None
    s, t = _sizes(plan, "is_causal with a key/value cache, or a sliding window,")
    _check_table("the [S, T] mask of is_causal with a key/value cache or of a sliding window", (s, t), dtype)
    i, j = np.arange(s)[:, None], np.arange(t)[None, :]
    position = i + plan.offset  # query i's absolute position
    allowed = np.ones((s, t), bool)
    if causal:
        allowed &= j <= position
    if plan.left >= 0:
        allowed &= j >= position - plan.left
    if plan.right >= 0:
        allowed &= j <= position + plan.right
    return None if allowed.all() else allowed


def _nonpad_allowed(plan: _Plan) -> str:
    """The keys each query may see with nonpad_kv_seqlen n (per batch): key j < n[b], and with is_causal
    or a window the frontier at position i + n[b] - S. Each bound is ``table <= n`` or ``table >= n`` for a
    constant int64 table, so this is one or two compares (and a logical_and): bool [B, 1, S, T]."""
    s, t = _sizes(plan, "nonpad_kv_seqlen")
    rows = s if plan.is_causal or plan.windowed else 1  # padding alone: the same for every query
    _check_table("nonpad_kv_seqlen's key bounds", (rows, t), "int64")
    i, j = np.arange(rows)[:, None], np.arange(t)[None, :]
    d = j - i + s  # j <= i + n - S + r  <=>  d - r <= n
    upper = np.broadcast_to(j + 1, (rows, t))  # j < n
    if plan.is_causal:
        upper = np.maximum(upper, d)
    if plan.right >= 0:
        upper = np.maximum(upper, d - plan.right)
    n = plan.op("reshape", [plan.nonpad], "nonpad", shape=[-1, 1, 1, 1], allowzero=False)
    allowed = plan.op("less_equal", [plan.constant("nonpad_upper", upper, "int64"), n], "nonpad_upper_ok")
    if plan.left >= 0:  # j >= i + n - S - left  <=>  n <= d + left
        lower = plan.constant("nonpad_lower", d + plan.left, "int64")
        lower_ok = plan.op("greater_equal", [lower, n], "nonpad_lower_ok")
        allowed = plan.op("logical_and", [allowed, lower_ok], "nonpad_ok")
    return allowed


def _padded_mask(plan: _Plan) -> str | None:
    """attn_mask, its last dim padded to the keys' with False (-inf when additive), as ONNX pads it."""
    mask = plan.mask
    if not mask:
        return None
    shape = _shape(plan.g, mask)
    if shape is not None and any(_known(d) and d < 0 for d in shape):
        raise AttentionError(f"attn_mask's shape {list(shape)} has a negative dim (a dim is 0 or more)")
    last = shape[-1] if shape else None
    if last == plan.total or not (_known(last) or _known(plan.total)):
        return mask  # equal, or two unknown dims left to the load's broadcast check
    if shape is None or not (_known(last, plan.total, *shape) and last < plan.total):
        shown = None if shape is None else ", ".join("?" if d is None else str(d) for d in shape)
        got = "a shape of unknown rank" if shown is None else f"[{shown}]"
        raise AttentionError(
            f"attn_mask's last dim ({'?' if last is None else last}) must be the keys' {plan.total}, or "
            f"shorter with the mask's shape known (got {got}): ONNX pads it with -inf (False), here a concat "
            "of a constant"
        )
    dtype = _dtype(plan.g, mask)
    if dtype is None:
        raise AttentionError("attn_mask shorter than the keys needs its dtype (the graph does not give it)")
    block = shape[:-1] + (plan.total - last,)
    _check_table("the padding of attn_mask to the keys' length", block, dtype)
    fill = False if dtype == "bool" else -np.inf
    pad = plan.constant("mask_pad", np.full(block, fill), dtype)
    return plan.op("concat", [mask, pad], "mask_padded", axis=len(shape) - 1)


def _mask(plan: _Plan, causal: bool) -> str | None:
    """The one mask the attention (or the explicit lowering) reads: attn_mask (padded), the static table
    (with the causal frontier when ``causal``) and nonpad's per-batch bounds, combined: bool ones by
    logical_and; with an additive attn_mask, or for the explicit lowering, added as 0 / -inf in Q's dtype
    (a constant where every part is)."""
    mask = _padded_mask(plan)
    mask_is_bool = mask is not None and _dtype(plan.g, plan.mask) == "bool"
    parts = [p for p in (mask if mask_is_bool else None, _nonpad_allowed(plan) if plan.nonpad else None) if p]
    additive = plan.explicit or not (mask is None or mask_is_bool)
    # the table alone is bound as its additive form, in Q's dtype
    table = _static_table(plan, causal, plan.dtype if additive and not parts and plan.dtype else "bool")
    if not additive:
        if table is not None:
            parts.append(plan.constant("allowed", table, "bool"))
        return _and_all(plan, parts)
    if plan.dtype is None:
        raise AttentionError("the mask's additive form needs Q's dtype (the graph does not give it)")
    bias = None
    if table is not None and not parts:  # the table alone: its additive form is a constant too
        bias = plan.constant("bias", np.where(table, 0.0, -np.inf), plan.dtype)
    elif table is not None or parts:
        if table is not None:
            parts.append(plan.constant("allowed", table, "bool"))
        zero = plan.constant("zero", np.zeros(()), plan.dtype)
        hidden = plan.constant("neg_inf", np.full((), -np.inf), plan.dtype)
        bias = plan.op("where", [_and_all(plan, parts), zero, hidden], "bias")
    if mask is not None and not mask_is_bool:
        bias = mask if bias is None else plan.op("add", [mask, bias], "mask_bias")
    return bias


def _and_all(plan: _Plan, parts: list[str]) -> str | None:
    if not parts:
        return None
    acc = parts[0]
    for k, part in enumerate(parts[1:]):
        acc = plan.op("logical_and", [acc, part], f"allowed_and{k}")
    return acc


def _hidden_rows(plan: _Plan, bias: str | None) -> str | None:
    """The rows the bias hides entirely (every key -inf), which ONNX sets to 0: a bool [..., S, 1]
    constant for a constant bias (None when no row is), else reduce_max and is_inf at run time."""
    if bias is None:
        return None
    if bias in plan.g.constants:
        rows = np.isneginf(np.asarray(plan.g.constants[bias], np.float64).max(axis=-1, keepdims=True))
        return plan.constant("hidden_rows", rows, "bool") if rows.any() else None
    row_max = plan.op("reduce_max", [bias], "bias_row_max", axes=[-1], keepdims=True)
    return plan.op("is_inf", [row_max], "hidden_rows", detect_positive=False)


def _explicit(plan: _Plan, q: str, k: str, v: str, bias: str | None, out: str) -> None:
    """ONNX's own pattern, stage by stage: ``scale * q k^T``, softcap (``c * tanh(x / c)``), + bias,
    softmax (in softmax_precision), the rows the bias hides entirely set to 0, ``@ v``; qk_matmul_output
    is the step its mode names. Grouped-query heads through a [B, H_kv, H / H_kv, ...] view of q and of
    the probabilities (k and v are not copied)."""
    h, hk, d, t, dv = plan.heads, plan.kv_heads, plan.head_size, plan.total, plan.v_head_size
    what = "softcap, qk_matmul_output, softmax_precision or float64 (lowered stage by stage)"
    if plan.dtype is None or not _known(h, hk):
        raise AttentionError(f"{what} need Q's dtype and the head counts (got {plan.dtype}, {h}, {hk})")
    group = h // hk
    if group > 1 and not (h % hk == 0 and _known(d, t, dv)):
        raise AttentionError(
            f"{what} with grouped-query heads need H ({h}) a multiple of H_kv ({hk}) and the head sizes "
            f"and the key length known at import (got D={d}, Dv={dv}, T={t})"
        )
    scale = plan.scale
    if scale is None:
        if not _known(d):
            raise AttentionError(f"{what} with the default scale 1/sqrt(head_size) need the head size")
        scale = float(1.0 / np.sqrt(d))
    kt = plan.op("transpose", [k], "k_t", perm=[0, 1, 3, 2])
    if group > 1:
        q5 = plan.op("reshape", [q], "q_groups", shape=[0, hk, group, -1, d], allowzero=False)
        kt5 = plan.op("unsqueeze", [kt], "k_t_groups", axes=[2])
        grouped = plan.op("matmul", [q5, kt5], "qk_groups")
        product = plan.op("reshape", [grouped], "qk", shape=[0, h, -1, t], allowzero=False)
    else:
        product = plan.op("matmul", [q, kt], "qk")
    qk = plan.output(3)
    # qk_matmul_output is the last step at or before its mode's: 0 scaled, 1 softcapped, 2 biased
    steps = ["scaled", "capped" if plan.softcap else "", "biased" if bias else ""]
    taken = next((s for s in reversed(steps[: plan.mode + 1]) if s), "") if qk and plan.mode < 3 else ""
    cast_to = plan.precision
    if cast_to in (None, plan.dtype) or (cast_to == "float32" and plan.dtype in ("float16", "bfloat16")):
        cast_to = None  # the softmax stage computes a half type in float32 (and rounds once)
    rows = _hidden_rows(plan, bias)
    last = qk if qk and plan.mode == 3 and rows is None else ""  # mode 3 is the last probability step
    # the scale and the bias fold into the softmax where no step between is an output or a cast
    if not (plan.softcap or taken or cast_to):
        probs = plan.op("softmax", [product] + ([bias] if bias else []), "probs", out=last, scale=scale)
    else:
        scores = plan.op("scale", [product], "qk_scaled", out=qk if taken == "scaled" else "", factor=scale)
        if plan.softcap:
            cap = plan.constant("softcap", np.full((), plan.softcap), plan.dtype)
            capped = plan.op("tanh", [plan.op("div", [scores, cap], "qk_over_cap")], "qk_tanh")
            scores = plan.op(
                "scale", [capped], "qk_capped", out=qk if taken == "capped" else "", factor=plan.softcap
            )
        if bias:
            scores = plan.op("add", [scores, bias], "qk_biased", out=qk if taken == "biased" else "")
        if cast_to:
            wide = plan.op("cast", [scores], "qk_precision", dtype=cast_to)
            probs = plan.op("softmax", [wide], "probs_precision")
            probs = plan.op("cast", [probs], "probs", out=last, dtype=plan.dtype)
        else:
            probs = plan.op("softmax", [scores], "probs", out=last)
    if rows is not None:
        zero = plan.constant("zero", np.zeros(()), plan.dtype)  # the bias's 0 too, where it has one
        probs = plan.op("where", [rows, zero, probs], "probs_kept", out=qk if plan.mode == 3 else "")
    if group > 1:
        p5 = plan.op("reshape", [probs], "probs_groups", shape=[0, hk, group, -1, t], allowzero=False)
        v5 = plan.op("unsqueeze", [v], "v_groups", axes=[2])
        y5 = plan.op("matmul", [p5, v5], "y_groups")
        plan.op("reshape", [y5], "", out=out, shape=[0, h, -1, dv], allowzero=False)
    else:
        plan.op("matmul", [probs, v], "", out=out)
