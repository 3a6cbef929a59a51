"""Scaled dot-product attention (ONNX Attention, 4-d form): descriptor and NumPy reference.

``y = softmax(scale * q @ k^T + mask) @ v`` per batch and head, computed in float32 and rounded once on
the store. k and v may have fewer heads than q (grouped-query attention): query head i reads key/value
head ``i // (H / H_kv)``. The causal mask is upper-left aligned (query i sees keys 0..i). Both as in ONNX
and PyTorch. A row with every key masked gives NaN, or zeros with ``masked_rows='zero'`` (ONNX Attention's
rule: a row whose mask and causal bias hide every key is 0, decided on the mask, not on the scores). On
CUDA, float16/bfloat16 run cuDNN's fused SDPA (``cuda.py``); float32, bool masks and the other stages
cuDNN declines run this reference on staged host copies, and the load report says why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import Attr, KernelContext, OperatorDescriptor, Port
from ...errors import DTypeMismatchError, ShapeMismatchError
from ...shapes import Mismatch, broadcast_shapes, unify
from .._common import builtin_operator
from .._dims import is_known
from ..cudnn_graph import CUDNN_VARIANT
from ..kernel import cuda_variant
from . import cuda

__all__ = ["descriptors", "infer_attention", "ATTENTION_DTYPES"]

ATTENTION_DTYPES = frozenset({"float32", "float16", "bfloat16"})


def infer_attention(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of attention: ``[B, H, S, Dv]``, after checking the head counts and the optional mask.

    The mask is bool (True: attend) or q's dtype (added to the scores) and broadcasts to ``[B, H, S, T]``.

    Raises
    ------
    DTypeMismatchError
        The mask is neither bool nor q's dtype.
    ShapeMismatchError
        q's heads are not a multiple of k's and v's, or the mask does not broadcast to the scores.
    """
    (b, h, s, _), (_, hk, t, _), (_, _, _, dv) = (tuple(x) for x in in_shapes[:3])
    if is_known(h, hk) and h % hk:
        raise ShapeMismatchError(
            f"attention: q has {h} heads, not a multiple of the {hk} heads of k and v (grouped-query "
            "attention shares each key/value head among H / H_kv query heads)",
            port="k",
            symbol="H",
            expected=f"a divisor of {h}",
            got=hk,
        )
    mask_shape, mask_dtype = in_shapes[3], in_dtypes[3]
    if mask_shape is not None:
        if mask_dtype not in ("bool", in_dtypes[0]):
            raise DTypeMismatchError(
                f"attention: input 'mask' must be bool (True: attend) or {in_dtypes[0]} like q, added to the "
                f"scores (got {mask_dtype})",
                port="mask",
                expected=["bool", in_dtypes[0]],
                got=mask_dtype,
            )
        scores = (b, h, s, t)
        merged = broadcast_shapes(scores, tuple(mask_shape))
        if isinstance(merged, Mismatch) or len(mask_shape) > 4 or unify(merged, scores) is None:
            raise ShapeMismatchError(
                f"attention: input 'mask' {list(mask_shape)} does not broadcast to the scores [B, H, S, T] = "
                f"{list(scores)}",
                port="mask",
                expected=list(scores),
                got=list(mask_shape),
            )
    return ((b, h, s, dv),), (in_dtypes[0],)


def _attention_bind(ctx: KernelContext):
    (b, h, s, d), (_, hk, t, _) = ctx.in_shapes[0], ctx.in_shapes[1]
    group = h // hk  # query heads per key/value head
    zero_rows = ctx.attrs.get("masked_rows") == "zero"
    if t == 0:
        return _no_keys_kernel(0.0 if zero_rows else np.nan)
    scale = ctx.attrs["scale"]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    has_mask = ctx.in_shapes[3] is not None
    bool_mask = has_mask and ctx.in_dtypes[3] == "bool"
    hidden = np.triu(np.ones((s, t), bool), k=1) if ctx.attrs["is_causal"] else None  # key j > query i
    scores = np.empty((b, h, s, t), np.float32)
    # masked_rows='zero': which keys each row may see (mask and causal), and its rows that see none
    visible = (
        np.empty(np.broadcast_shapes((s, t), tuple(ctx.in_shapes[3] or ())), bool) if zero_rows else None
    )
    empty_rows = np.empty(visible.shape[:-1] + (1,), bool) if zero_rows else None
    row = np.empty((b, h, s, 1), np.float32)
    acc = np.empty(ctx.out_shapes[0], np.float32)
    # Grouped views: query head hk * group + g meets key/value head hk (contiguous, no copies).
    scores_g = scores.reshape(b, hk, group, s, t)
    acc_g = acc.reshape(b, hk, group, s, ctx.out_shapes[0][3])

    def kernel(inputs, outputs, stream):
        q, k, v, mask = inputs
        keys = k[:, :, None].swapaxes(-1, -2)
        np.matmul(q.reshape(b, hk, group, s, d), keys, out=scores_g, dtype=np.float32)
        np.multiply(scores, scale, out=scores)
        if hidden is not None:
            scores[..., hidden] = -np.inf
        if bool_mask:
            np.copyto(scores, -np.inf, where=~mask)
        elif has_mask:
            np.add(scores, mask, out=scores, dtype=np.float32)
        with np.errstate(invalid="ignore"):  # a fully masked row is -inf - -inf = NaN, by definition
            np.max(scores, axis=-1, keepdims=True, out=row)
            np.subtract(scores, row, out=scores)
        np.exp(scores, out=scores)
        np.sum(scores, axis=-1, keepdims=True, out=row)
        np.divide(scores, row, out=scores)
        if zero_rows:
            _find_empty_rows(mask, hidden, bool_mask, visible, empty_rows)
            np.copyto(scores, 0.0, where=empty_rows)
        np.matmul(scores_g, v[:, :, None], out=acc_g, dtype=np.float32)
        np.copyto(outputs[0], acc, casting="unsafe")

    return kernel


def _find_empty_rows(mask, hidden, bool_mask: bool, visible: np.ndarray, empty_rows: np.ndarray) -> None:
    """``empty_rows``: the rows whose mask (False, or -inf when additive) and causal bias hide every key."""
    if mask is None:
        visible.fill(True)
    elif bool_mask:
        np.copyto(visible, mask)
    else:
        np.not_equal(mask, -np.inf, out=visible)
    if hidden is not None:
        visible[..., hidden] = False
    np.any(visible, axis=-1, keepdims=True, out=empty_rows)
    np.logical_not(empty_rows, out=empty_rows)


def _no_keys_kernel(fill: float):
    """Attention over zero keys: every row is fully masked, so NaN (or 0 with masked_rows='zero')."""

    def kernel(inputs, outputs, stream):
        outputs[0].fill(fill)

    return kernel


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptor of attention (one per registry)."""
    return [
        builtin_operator(
            "attention",
            doc="Scaled dot-product attention: softmax(scale * q k^T + mask) v, per head.",
            inputs=[
                Port("q", shape=["B", "H", "S", "D"], dtype="T"),
                Port("k", shape=["B", "Hkv", "T", "D"], dtype="T", doc="Hkv divides H"),
                Port("v", shape=["B", "Hkv", "T", "Dv"], dtype="T"),
                Port("mask", optional=True, doc="bool (True: attend) or additive, broadcast to [B, H, S, T]"),
            ],
            outputs=[Port("y", dtype="T", doc="[B, H, S, Dv]")],
            attrs=[
                Attr("is_causal", "bool", False, doc="query i attends to keys 0..i (upper-left aligned)"),
                Attr("scale", "float", None, doc="multiplies q k^T; default 1/sqrt(D)"),
                Attr(
                    "masked_rows",
                    "str",
                    "nan",
                    choices=("nan", "zero"),
                    doc="a row whose mask and causal bias hide every key: NaN, or zeros (ONNX Attention)",
                ),
            ],
            dtype_vars={"T": ATTENTION_DTYPES},
            variant_dtypes=ATTENTION_DTYPES | {"bool"},
            infer=infer_attention,
            bind=_attention_bind,
            cuda=cuda_variant(cuda.bind_attention, cuda.SDPA_DTYPES, name=CUDNN_VARIANT),
            staged_fallback=True,
            onnx="Attention",
        ),
    ]
