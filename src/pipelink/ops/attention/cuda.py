"""attention on CUDA: cuDNN's fused scaled dot-product attention (``graph.sdpa``, flash-style: the scores
never reach memory) through nvidia-cudnn-frontend (``ops/cudnn_graph.py``).

Why cuDNN and not a kernel of our own: its SDPA engines are the tuned Hopper kernels PyTorch itself
dispatches to, with grouped-query heads, a causal mask and an additive bias built in; a hand-written flash
kernel would have to match them on every shape. The graph is built and its plan chosen at bind.

Mapping: q ``[B, H, S, D]``, k ``[B, Hkv, T, D]``, v ``[B, Hkv, T, Dv]`` (cuDNN shares each key/value head
among ``H / Hkv`` query heads, as the reference); ``scale`` is ``attn_scale`` (default ``1/sqrt(D)``);
``is_causal`` is cuDNN's top-left causal mask (query i sees keys 0..i, as ONNX and PyTorch); an additive
mask of q's dtype is cuDNN's bias, read as ``[1|B, 1|H, S, T]``. float16/bfloat16 only: cuDNN computes
the softmax in float32 and rounds the probabilities to the input type before the second product (as
flash attention does). Declined to the staged reference (the load report says why): float32 (cuDNN has
no float32 SDPA), a bool mask, a mask broadcast along the query or key axis, no keys (T = 0), and any
head size or shape cuDNN has no plan for. Not verified: a row that an additive mask hides entirely with
-inf (NaN in the reference); cuDNN's value for it is its own, so ``masked_rows='zero'`` (ONNX's zeros) with
a mask is declined to the reference too.
"""

from __future__ import annotations

import math
from typing import Any

from ...descriptor import KernelContext, VariantDeclined
from ..cudnn_graph import (
    IO_TYPES,
    CuDNNKernel,
    build_graph,
    import_cudnn,
    new_graph,
    tensor,
    write_nothing,
)
from ..kernel import contiguous_strides

__all__ = ["KERNELS", "TUNED_AS", "SDPA_DTYPES", "bias_shape", "bind_attention"]

KERNELS: dict = {}  # cuDNN chooses its own kernels: nothing to plan or tune here
TUNED_AS: dict[str, str] = {}
SDPA_DTYPES = frozenset({"float16", "bfloat16"})

# Graph tensor uids.
Q, K, V, MASK, OUT = 1, 2, 3, 4, 5


def bias_shape(mask_shape: tuple, scores: tuple) -> tuple[int, int, int, int] | None:
    """The mask as cuDNN's bias ``[1|B, 1|H, S, T]`` (leading 1s added), or None when it broadcasts along
    the query or key axis, which cuDNN's bias cannot."""
    padded = (1,) * (4 - len(mask_shape)) + tuple(mask_shape)
    if padded[2:] != tuple(scores[2:]):
        return None
    return padded


def bind_attention(ctx: KernelContext) -> Any:
    """The cuDNN SDPA kernel of one attention stage (graph and plan chosen here, once).

    Raises
    ------
    VariantDeclined
        cuDNN is not installed, or this stage is one the module docstring lists as declined.
    """
    (b, h, s, d), (_, _, t, _) = ctx.in_shapes[0], ctx.in_shapes[1]
    out_shape = tuple(ctx.out_shapes[0])
    if math.prod(out_shape) == 0:
        return write_nothing
    if t == 0:
        raise VariantDeclined("no keys (T = 0): every row is fully masked, NaN by definition")
    mask_shape = ctx.in_shapes[3]
    bias = None
    if mask_shape is not None and ctx.attrs.get("masked_rows") == "zero":
        raise VariantDeclined(
            "masked_rows='zero' with a mask: cuDNN's output for a row the mask hides entirely is its own "
            "(not verified to be 0)"
        )
    if mask_shape is not None and ctx.in_dtypes[3] != ctx.in_dtypes[0]:
        raise VariantDeclined(f"a {ctx.in_dtypes[3]} mask: cuDNN's bias is additive, of q's dtype")
    if mask_shape is not None:
        bias = bias_shape(tuple(mask_shape), (b, h, s, t))
        if bias is None:
            raise VariantDeclined(
                f"mask {list(mask_shape)} broadcasts along the query or key axis; cuDNN's bias must be "
                f"[1|B, 1|H, S={s}, T={t}]"
            )
    cudnn = import_cudnn()
    dtype = ctx.in_dtypes[0]
    scale = ctx.attrs["scale"]
    graph = new_graph(cudnn, ctx)
    args: dict[str, Any] = {
        "q": tensor(graph, "q", ctx.in_shapes[0], Q),
        "k": tensor(graph, "k", ctx.in_shapes[1], K),
        "v": tensor(graph, "v", ctx.in_shapes[2], V),
        "generate_stats": False,
        "attn_scale": 1.0 / math.sqrt(d) if scale is None else float(scale),
    }
    if ctx.attrs["is_causal"]:
        args["use_causal_mask"] = True
    operands = [(Q, ("in", 0)), (K, ("in", 1)), (V, ("in", 2)), (OUT, ("out", 0))]
    if bias is not None:
        args["bias"] = tensor(graph, "mask", bias, MASK)
        operands.append((MASK, ("in", 3)))
    o, _ = graph.sdpa(name="attention", **args)
    o.set_output(True).set_uid(OUT).set_dim(list(out_shape)).set_stride(list(contiguous_strides(out_shape)))
    o.set_data_type(getattr(cudnn.data_type, IO_TYPES[dtype]))
    return CuDNNKernel(ctx, graph, operands, build_graph(cudnn, graph))
