"""conv2d, conv3d, conv_transpose2d and conv_transpose3d on CUDA: cuBLASLt for a pointwise convolution,
else cuDNN graphs through nvidia-cudnn-frontend (``ops/cudnn_graph.py``). One bind per kind serves both
ranks: cuDNN takes the 5-d NCDHW tensors of the 3-d operators with the same calls, and the pads, strides
and dilations as lists of one entry per spatial axis.

- A *pointwise* ``conv2d`` or ``conv3d`` (kernel 1x1 / 1x1x1, strides 1, no pads, one group; dilations do
  not matter for one tap) is a batched GEMM: ``y[n] = w[M, C] @ x[n][C, H*W] (+ b[M] over H*W)`` (D*H*W
  for conv3d), w shared by the batch (batch stride 0). It runs the gemm family's cuBLASLt product
  (``gemm/lt.py``: ``lt_product``, ``plan_batches``), the variant ``cuda:cublaslt``, ranked before cuDNN
  (whose NCHW plans transpose to NHWC: 91-98 us on the H200 for N=32, 256->64 channels at 56x56 in
  float16, where PyTorch's conv2d took 40 us and the bare batched product 22 us). cuBLASLt's BIAS epilogue
  adds a vector per row of column-major D, and y[n] row-major ``[M, HW]`` is column-major ``[HW, M]``: b
  over M is per column there. So the bias is first broadcast into y (``plan_bias_expand``) and the product
  accumulates onto it (beta = 1, C = D = y): one rounding, as the reference. Other geometries decline this
  variant (:func:`pointwise_gemm` says why) and run cuDNN.
- ``conv2d`` / ``conv3d`` is cuDNN's ``conv_fprop`` (cross-correlation, as ONNX Conv) over x
  ``[N, C, (D,) H, W]`` and w ``[M, C/group, (kD,) kH, kW]`` described with their dims and dense strides,
  as ONNX has them; cuDNN reads the group count from w. Begin and end pads are passed apart (asymmetric
  pads, auto_pad resolved by ``window_nd``). The bias is added in the same graph (a pointwise add of b
  seen as ``[1, M, 1, 1]``, ``[1, M, 1, 1, 1]`` for conv3d) when cuDNN has a fused plan, else by the
  elementwise family's add kernel right after, on the stream. So are the ``residual`` (a second pointwise
  add, of a full output-shaped tensor) and the relu ``activation`` after both: the most fused graph cuDNN
  has a plan for runs, and the parts it cannot fuse follow as kernels, in the reference's order (bias,
  residual, relu). In the pointwise GEMM form the bias and the residual are put in y before the product
  accumulates onto it, and the relu is cuBLASLt's RELU epilogue.
- ``conv_transpose2d`` / ``conv_transpose3d`` is ``conv_dgrad``: the transposed convolution of x by w
  ``[C, M/group, (kD,) kH, kW]`` is the data gradient of the convolution of y by w whose output is x; the
  pads are that convolution's pads and output_padding only lengthens y (the output dims are given to
  cuDNN). Its bias is the add kernel after.

Precision: float16/bfloat16 in and out with float32 accumulation (plans that down-convert inputs or
reduce in reduced precision are dropped). float32 is computed in float32: plans using tensor cores
(TF32), Winograd or FFT are dropped, unless the stage's precision policy is ``"tf32"`` (tensor cores then
allowed, as the gemm family does). float64 has no cuDNN engine: it runs the reference on staged copies.
Every choice is made at bind; a configuration cuDNN cannot plan declines to the staged reference, named
in ``load_report.skipped_variants``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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
from ..elementwise.cuda import plan_binary, plan_unary
from ..gemm.cuda import CUBLASLT_VARIANT, plan_bias_expand
from ..gemm.lt import lt_product, plan_batches
from ..kernel import FLOATS, PlanLaunch, contiguous_strides
from .col2im import KERNELS as COL2IM_KERNELS
from .deform_sampling import KERNELS as DEFORM_KERNELS
from .reference import conv_name
from .window import window_nd

__all__ = [
    "KERNELS",
    "TUNED_AS",
    "CONV_DTYPES",
    "CONV_ACTIVATIONS",
    "GEMM_DTYPES",
    "CUBLASLT_VARIANT",
    "PointwiseGemm",
    "pointwise_gemm",
    "numeric_notes_off",
    "bind_conv",
    "bind_conv_gemm",
    "bind_conv_transpose",
    "bind_conv2d",
    "bind_conv2d_gemm",
    "bind_conv_transpose2d",
]

KERNELS: dict = {**COL2IM_KERNELS, **DEFORM_KERNELS}  # their own kernels; cuDNN chooses conv's
TUNED_AS: dict[str, str] = {}
CONV_DTYPES = frozenset(IO_TYPES)
CONV_ACTIVATIONS = ("none", "relu")  # conv2d's / conv3d's activation: applied after bias and residual
GEMM_DTYPES = frozenset(FLOATS)  # cuBLASLt's: float64 too, which cuDNN lacks

# Graph tensor uids.
X, W, B, Y, R = 1, 2, 3, 4, 5
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


def _per_channel(out_shape: tuple) -> tuple[int, ...]:
    """How a bias of ``M`` entries broadcasts over ``[N, M, *spatial]``: ``[M, 1, ..., 1]``."""
    return (out_shape[1],) + (1,) * (len(out_shape) - 2)


def _add_into_y(ctx: KernelContext, port: int) -> PlanLaunch:
    """``y += b`` (``port`` 2, read as ``[M, 1, ..., 1]``) or ``y += residual`` (``port`` 3, y's shape):
    the elementwise family's add, in place."""
    dtype, out_shape = ctx.in_dtypes[0], tuple(ctx.out_shapes[0])
    other = _per_channel(out_shape) if port == 2 else out_shape
    return PlanLaunch(
        ctx.backend,
        lambda al: plan_binary("add", dtype, out_shape, other, alignment=al),
        {"a": ("out", 0), "b": ("in", port), "y": ("out", 0)},
        ctx.stage,
    )


def _bias_add(ctx: KernelContext) -> PlanLaunch:
    return _add_into_y(ctx, 2)


def _residual_add(ctx: KernelContext) -> PlanLaunch:
    return _add_into_y(ctx, 3)


def _relu(ctx: KernelContext) -> PlanLaunch:
    """``y = relu(y)`` in place (the elementwise family's kernel): the activation when cuDNN has no plan
    with it fused."""
    dtype, out_shape = ctx.in_dtypes[0], tuple(ctx.out_shapes[0])
    return PlanLaunch(
        ctx.backend,
        lambda al: plan_unary("relu", dtype, out_shape, alignment=al),
        {"x": ("out", 0), "y": ("out", 0)},
        ctx.stage,
    )


def _output(t: Any, shape: tuple, io: Any) -> None:
    """Mark ``t`` as the stage's output ``y``: dense (NCHW / NCDHW), io dtype."""
    t.set_output(True).set_uid(Y).set_dim(list(shape)).set_stride(list(contiguous_strides(shape)))
    t.set_data_type(io)


def _conv_graph(
    cudnn: Any,
    ctx: KernelContext,
    geometry: dict,
    *,
    fuse_bias: bool,
    fuse_residual: bool = False,
    fuse_relu: bool = False,
) -> tuple[Any, int]:
    dtype, out_shape = ctx.in_dtypes[0], tuple(ctx.out_shapes[0])
    graph = new_graph(cudnn, ctx)
    x = tensor(graph, "x", ctx.in_shapes[0], X)
    w = tensor(graph, "w", ctx.in_shapes[1], W)
    y = graph.conv_fprop(image=x, weight=w, name="conv", **geometry)
    if fuse_bias:
        b = tensor(graph, "b", (1, *_per_channel(out_shape)), B)
        y = graph.add(a=y, b=b, name="bias")
    if fuse_residual:
        r = tensor(graph, "residual", out_shape, R)
        y = graph.add(a=y, b=r, name="residual")
    if fuse_relu:
        y = graph.relu(input=y, name="relu")
    _output(y, out_shape, getattr(cudnn.data_type, IO_TYPES[dtype]))
    policy = dict(ctx.params or {}).get("math")
    return graph, build_graph(cudnn, graph, numeric_notes_off=numeric_notes_off(dtype, policy))


@dataclass(frozen=True)
class PointwiseGemm:
    """A pointwise convolution as ``batch`` products ``[m, k] @ [k, n]``: m output channels, k input
    channels, n = H * W (D * H * W) positions."""

    batch: int
    m: int
    k: int
    n: int


def pointwise_gemm(x_shape: tuple, w_shape: tuple, attrs: Any) -> PointwiseGemm:
    """The GEMM of a conv2d or conv3d stage that is pointwise (kernel of ones, strides 1, no pads, group 1).

    Raises
    ------
    VariantDeclined
        Any other stage, with the reason (it then runs cuDNN).
    """
    n, c, *sizes = (int(d) for d in x_shape)
    m, kernel = int(w_shape[0]), tuple(int(d) for d in w_shape[2:])
    rank = len(sizes)
    win = window_nd(tuple(sizes), kernel, attrs, op=conv_name(rank))
    ones, why = "x".join("1" * rank), []
    if kernel != (1,) * rank:
        why.append(f"kernel {'x'.join(str(k) for k in kernel)}")
    if tuple(win.strides) != (1,) * rank:
        why.append(f"strides {list(win.strides)}")
    if any(win.pads_begin) or any(win.pads_end):
        why.append(f"pads {list(win.pads_begin) + list(win.pads_end)}")
    if int(attrs["group"]) != 1:
        why.append(f"group {attrs['group']}")
    if c == 0:
        why.append("no input channels")
    if why:
        raise VariantDeclined(
            f"not a pointwise convolution ({', '.join(why)}); the GEMM form needs kernel {ones}, strides 1, "
            "no pads, group 1"
        )
    return PointwiseGemm(batch=n, m=m, k=c, n=math.prod(sizes))


def bind_conv_gemm(ctx: KernelContext) -> Any:
    """A pointwise conv2d or conv3d stage as one cuBLASLt strided-batched product (see the module
    docstring).

    Raises
    ------
    VariantDeclined
        Not a pointwise stage, or cuBLASLt unavailable (nvmath-python missing, no algorithm).
    """
    out_shape = tuple(ctx.out_shapes[0])
    if math.prod(out_shape) == 0:
        return write_nothing
    geo = pointwise_gemm(tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1]), ctx.attrs)
    # a = w [M, C] shared by the batch, b = x[n] [C, HW], c = y[n] [M, HW] (HW: every spatial position)
    batch = plan_batches((), (geo.batch,), (geo.batch,), geo.m, geo.k, geo.n)
    dtype, pre = ctx.in_dtypes[0], []
    bias, residual = ctx.in_shapes[2] is not None, len(ctx.in_shapes) > 3 and ctx.in_shapes[3] is not None
    if bias or residual:  # y = b broadcast, or the residual, then (both) += the residual
        source, shape = (2, _per_channel(out_shape)) if bias else (3, out_shape)
        pre.append(
            PlanLaunch(
                ctx.backend,
                lambda _a: plan_bias_expand(dtype, shape, out_shape),
                {"x": ("in", source), "y": ("out", 0)},
                ctx.stage,
            )
        )
    if bias and residual:
        pre.append(_residual_add(ctx))
    try:
        return lt_product(
            ctx,
            m=batch.m,
            n=geo.n,
            k=geo.k,
            batch=batch,
            a_input=1,
            b_input=0,
            beta=1.0 if pre else 0.0,
            pre=pre,
            epilogue="RELU" if ctx.attrs["activation"] == "relu" else "DEFAULT",  # relu(w x + b)
        )
    except Exception as e:  # noqa: BLE001 - nvmath missing, libcublasLt not loadable, no algorithm
        raise VariantDeclined(f"cuBLASLt unavailable for this pointwise convolution ({e})") from e


def bind_conv(ctx: KernelContext) -> Any:
    """The cuDNN kernel of one conv2d or conv3d stage (graph and plan chosen here, once).

    Raises
    ------
    VariantDeclined
        cuDNN is not installed or has no plan for this geometry and dtype.
    """
    if math.prod(ctx.out_shapes[0]) == 0:
        return write_nothing
    cudnn = import_cudnn()
    x_shape, w_shape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    win = window_nd(x_shape[2:], w_shape[2:], ctx.attrs, op=conv_name(len(x_shape) - 2))
    geometry = _geometry(win.pads_begin, win.pads_end, win.strides, win.dilations)
    operands = [(X, ("in", 0)), (W, ("in", 1)), (Y, ("out", 0))]
    relu = ctx.attrs["activation"] == "relu"
    bias = ctx.in_shapes[2] is not None
    residual = len(ctx.in_shapes) > 3 and ctx.in_shapes[3] is not None
    # The most fused graph cuDNN has a plan for: conv (+ bias) (+ residual) (+ relu), each part fused only
    # if the parts before it are; what it cannot fuse runs after it on the stream, in place, in order.
    parts = [p for p, wanted in (("bias", bias), ("residual", residual), ("relu", relu)) if wanted]
    for k in range(len(parts), -1, -1):
        fused = parts[:k]
        try:
            graph, workspace = _conv_graph(
                cudnn,
                ctx,
                geometry,
                fuse_bias="bias" in fused,
                fuse_residual="residual" in fused,
                fuse_relu="relu" in fused,
            )
        except VariantDeclined:
            if k == 0:
                raise
            continue
        later = {"bias": _bias_add, "residual": _residual_add, "relu": _relu}
        post = [later[p](ctx) for p in parts[k:]]
        extra = [(B, ("in", 2))] * ("bias" in fused) + [(R, ("in", 3))] * ("residual" in fused)
        return CuDNNKernel(ctx, graph, operands + extra, workspace, post=post)
    raise AssertionError("unreachable: the last try raises")


def bind_conv_transpose(ctx: KernelContext) -> Any:
    """The cuDNN kernel of one conv_transpose2d or conv_transpose3d stage: ``conv_dgrad``, then the bias
    add.

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
    pads, rank = tuple(attrs["pads"]), len(out_shape) - 2
    geometry = _geometry(pads[:rank], pads[rank:], attrs["strides"], attrs["dilations"])
    graph = new_graph(cudnn, ctx)
    x = tensor(graph, "x", ctx.in_shapes[0], X)
    w = tensor(graph, "w", ctx.in_shapes[1], W)
    y = graph.conv_dgrad(loss=x, filter=w, name="conv_transpose", **geometry)
    _output(y, out_shape, getattr(cudnn.data_type, IO_TYPES[dtype]))
    policy = dict(ctx.params or {}).get("math")
    workspace = build_graph(cudnn, graph, numeric_notes_off=numeric_notes_off(dtype, policy))
    post = [_bias_add(ctx)] if ctx.in_shapes[2] is not None else []
    return CuDNNKernel(ctx, graph, [(X, ("in", 0)), (W, ("in", 1)), (Y, ("out", 0))], workspace, post=post)


# The 2-d names the binds had before they served the 3-d operators too.
bind_conv2d = bind_conv
bind_conv2d_gemm = bind_conv_gemm
bind_conv_transpose2d = bind_conv_transpose
