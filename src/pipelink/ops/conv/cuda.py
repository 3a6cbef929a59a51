"""conv2d and conv_transpose2d on CUDA: cuDNN graphs through nvidia-cudnn-frontend (``ops/cudnn_graph.py``).

- ``conv2d`` is cuDNN's ``conv_fprop`` (cross-correlation, as ONNX Conv) over x ``[N, C, H, W]`` and w
  ``[M, C/group, kH, kW]`` described with their dims and dense NCHW strides, as ONNX has them; cuDNN reads
  the group count from w. Begin and end pads are passed apart (asymmetric pads, auto_pad resolved by
  ``window_2d``). The bias is added in the same graph (a pointwise add of b seen as ``[1, M, 1, 1]``)
  when cuDNN has a fused plan, else by the elementwise family's add kernel right after, on the stream.
- ``conv_transpose2d`` is ``conv_dgrad``: the transposed convolution of x by w ``[C, M/group, kH, kW]``
  is the data gradient of the convolution of y by w whose output is x; the pads are that convolution's
  pads and output_padding only lengthens y (the output dims are given to cuDNN). Its bias is the add
  kernel after.

Precision: float16/bfloat16 in and out with float32 accumulation (plans that down-convert inputs or
reduce in reduced precision are dropped). float32 is computed in float32: plans using tensor cores
(TF32), Winograd or FFT are dropped, unless the stage's precision policy is ``"tf32"`` (tensor cores then
allowed, as the gemm family does). float64 has no cuDNN engine: it runs the reference on staged copies.
Every choice is made at bind; a configuration cuDNN cannot plan declines to the staged reference, named
in ``load_report.skipped_variants``.
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
from ..elementwise.cuda import plan_binary
from ..kernel import PlanLaunch, contiguous_strides
from .window import window_2d

__all__ = ["KERNELS", "TUNED_AS", "CONV_DTYPES", "numeric_notes_off", "bind_conv2d", "bind_conv_transpose2d"]

KERNELS: dict = {}  # cuDNN chooses its own kernels: nothing to plan or tune here
TUNED_AS: dict[str, str] = {}
CONV_DTYPES = frozenset(IO_TYPES)

# Graph tensor uids.
X, W, B, Y = 1, 2, 3, 4
_REDUCED = ("DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION")
_NOT_FP32 = (
    "TENSOR_CORE",
    "WINOGRAD",
    "WINOGRAD_TILE_4x4",
    "WINOGRAD_TILE_6x6",
    "WINOGRAD_TILE_13x13",
    "FFT",
)


def numeric_notes_off(dtype: str, math_policy: str | None) -> tuple[str, ...]:
    """The cuDNN numerical notes a stage's plan must not carry (see the module docstring)."""
    if dtype == "float32" and math_policy != "tf32":
        return _REDUCED + _NOT_FP32
    return _REDUCED


def _geometry(begin, end, strides, dilations) -> dict[str, list[int]]:
    return {
        "pre_padding": list(begin),
        "post_padding": list(end),
        "stride": list(strides),
        "dilation": list(dilations),
    }


def _bias_add(ctx: KernelContext) -> PlanLaunch:
    """``y += b`` with b read as ``[M, 1, 1]`` (the elementwise family's broadcast add, in place)."""
    dtype, out_shape = ctx.in_dtypes[0], tuple(ctx.out_shapes[0])
    bias_shape = (out_shape[1], 1, 1)
    return PlanLaunch(
        ctx.backend,
        lambda al: plan_binary("add", dtype, out_shape, bias_shape, alignment=al),
        {"a": ("out", 0), "b": ("in", 2), "y": ("out", 0)},
        ctx.stage,
    )


def _output(t: Any, shape: tuple, io: Any) -> None:
    """Mark ``t`` as the stage's output ``y``: dense NCHW, io dtype."""
    t.set_output(True).set_uid(Y).set_dim(list(shape)).set_stride(list(contiguous_strides(shape)))
    t.set_data_type(io)


def _conv_graph(cudnn: Any, ctx: KernelContext, geometry: dict, *, fuse_bias: bool) -> tuple[Any, int]:
    dtype, out_shape = ctx.in_dtypes[0], tuple(ctx.out_shapes[0])
    graph = new_graph(cudnn, ctx)
    x = tensor(graph, "x", ctx.in_shapes[0], X)
    w = tensor(graph, "w", ctx.in_shapes[1], W)
    y = graph.conv_fprop(image=x, weight=w, name="conv", **geometry)
    if fuse_bias:
        b = tensor(graph, "b", (1, out_shape[1], 1, 1), B)
        y = graph.add(a=y, b=b, name="bias")
    _output(y, out_shape, getattr(cudnn.data_type, IO_TYPES[dtype]))
    policy = dict(ctx.params or {}).get("math")
    return graph, build_graph(cudnn, graph, numeric_notes_off=numeric_notes_off(dtype, policy))


def bind_conv2d(ctx: KernelContext) -> Any:
    """The cuDNN kernel of one conv2d stage (graph and plan chosen here, once).

    Raises
    ------
    VariantDeclined
        cuDNN is not installed or has no plan for this geometry and dtype.
    """
    if math.prod(ctx.out_shapes[0]) == 0:
        return write_nothing
    cudnn = import_cudnn()
    w_shape = tuple(ctx.in_shapes[1])
    win = window_2d(tuple(ctx.in_shapes[0])[2:], w_shape[2:], ctx.attrs, op="conv2d")
    geometry = _geometry(win.pads_begin, win.pads_end, win.strides, win.dilations)
    operands = [(X, ("in", 0)), (W, ("in", 1)), (Y, ("out", 0))]
    if ctx.in_shapes[2] is None:
        graph, workspace = _conv_graph(cudnn, ctx, geometry, fuse_bias=False)
        return CuDNNKernel(ctx, graph, operands, workspace)
    try:
        graph, workspace = _conv_graph(cudnn, ctx, geometry, fuse_bias=True)
        return CuDNNKernel(ctx, graph, operands + [(B, ("in", 2))], workspace)
    except VariantDeclined:
        pass  # no fused conv + bias plan for this geometry: the bias is its own launch
    graph, workspace = _conv_graph(cudnn, ctx, geometry, fuse_bias=False)
    return CuDNNKernel(ctx, graph, operands, workspace, post=[_bias_add(ctx)])


def bind_conv_transpose2d(ctx: KernelContext) -> Any:
    """The cuDNN kernel of one conv_transpose2d stage: ``conv_dgrad``, then the bias add.

    Raises
    ------
    VariantDeclined
        cuDNN is not installed or has no plan for this geometry and dtype.
    """
    out_shape = tuple(ctx.out_shapes[0])
    if math.prod(out_shape) == 0:
        return write_nothing
    cudnn = import_cudnn()
    dtype, attrs = ctx.in_dtypes[0], ctx.attrs
    pads = tuple(attrs["pads"])
    geometry = _geometry(pads[:2], pads[2:], attrs["strides"], attrs["dilations"])
    graph = new_graph(cudnn, ctx)
    x = tensor(graph, "x", ctx.in_shapes[0], X)
    w = tensor(graph, "w", ctx.in_shapes[1], W)
    y = graph.conv_dgrad(loss=x, filter=w, name="conv_transpose", **geometry)
    _output(y, out_shape, getattr(cudnn.data_type, IO_TYPES[dtype]))
    policy = dict(ctx.params or {}).get("math")
    workspace = build_graph(cudnn, graph, numeric_notes_off=numeric_notes_off(dtype, policy))
    post = [_bias_add(ctx)] if ctx.in_shapes[2] is not None else []
    return CuDNNKernel(ctx, graph, [(X, ("in", 0)), (W, ("in", 1)), (Y, ("out", 0))], workspace, post=post)
