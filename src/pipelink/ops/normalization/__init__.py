"""The normalization family: layer_norm and rms_norm over the trailing axes from ``axis`` (ONNX
LayerNormalization, RMSNormalization), and the seed's layer_norm_v1 (last axis of [N, C]).

This file declares each operator with its two variants: the NumPy reference of ``reference.py`` and the
CUDA kernels of ``cuda.py`` (``norm.cu``). Each operator's default ``eps`` is its ``eps`` attribute here,
and nowhere else: the reference, the CUDA plan and the tuner read the stage's resolved attribute.
"""

from __future__ import annotations

from functools import partial

from ...descriptor import Attr, OperatorDescriptor, Port
from .._common import FLOATS, builtin_operator
from ..kernel import cuda_variant
from . import cuda
from .reference import infer_layer_norm, infer_norm_stats, infer_rms_norm, layer_norm_bind, rms_norm_bind

__all__ = ["descriptors", "STATS"]

STATS = frozenset({"float32", "float64"})
_STATS_DOC = "float32 (float64 for a float64 input)"


def _eps() -> Attr:
    """The eps attribute of layer_norm and rms_norm: 1e-5, ONNX LayerNormalization's and
    RMSNormalization's default epsilon."""
    return Attr("eps", "float", 1e-5, doc="added to the variance (mean square) before the square root")


def _axis() -> Attr:
    """The axis attribute of layer_norm and rms_norm: -1, ONNX's default (normalise the last axis)."""
    return Attr(
        "axis",
        "int",
        -1,
        doc="first normalised axis: axes axis..rank-1 are normalised (negative counts from the end)",
    )


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of ``layer_norm``, ``rms_norm`` and ``layer_norm_v1`` (one set per registry)."""
    floats = {"T": FLOATS}
    return [
        builtin_operator(
            "layer_norm",
            doc="Layer normalisation over the axes from axis on; also returns mean and 1/std.",
            inputs=[
                Port("x", shape=None, dtype="T"),
                Port(
                    "gamma",
                    shape=None,
                    dtype="T",
                    optional=True,
                    doc="scale of shape x.shape[axis:] (default 1)",
                ),
                Port(
                    "beta",
                    shape=None,
                    dtype="T",
                    optional=True,
                    doc="shift of shape x.shape[axis:] (default 0)",
                ),
            ],
            outputs=[
                Port("output", shape="x", dtype="T"),
                Port(
                    "mean",
                    shape=None,
                    dtype=STATS,
                    doc="x.shape[:axis] + [1] * (rank - axis) (ONNX Mean); " + _STATS_DOC,
                ),
                Port(
                    "rstd",
                    shape=None,
                    dtype=STATS,
                    doc="1/sqrt(var + eps), var biased; shaped as mean (ONNX InvStdDev); " + _STATS_DOC,
                ),
            ],
            attrs=[_axis(), _eps()],
            dtype_vars=floats,
            variant_dtypes=FLOATS,
            infer=infer_layer_norm,
            bind=partial(layer_norm_bind, eps_input=False),
            cuda=cuda_variant(cuda.layer_norm_bind, FLOATS),
            onnx="LayerNormalization",
        ),
        builtin_operator(
            "rms_norm",
            doc="RMS normalisation over the axes from axis on: x / sqrt(mean(x^2) + eps) * gamma.",
            inputs=[
                Port("x", shape=None, dtype="T"),
                Port(
                    "gamma",
                    shape=None,
                    dtype="T",
                    optional=True,
                    doc="scale of shape x.shape[axis:] (default 1)",
                ),
            ],
            outputs=[Port("output", shape="x", dtype="T")],
            attrs=[_axis(), _eps()],
            dtype_vars=floats,
            variant_dtypes=FLOATS,
            infer=infer_rms_norm,
            bind=rms_norm_bind,
            cuda=cuda_variant(cuda.rms_norm_bind, FLOATS),
            onnx="RMSNormalization",
        ),
        builtin_operator(
            "layer_norm_v1",
            doc="The seed's LayerNorm module: layer_norm of [N, C] with eps as a 0-d tensor.",
            inputs=[
                Port("input", shape=["N", "C"], dtype="T"),
                Port("gamma", shape=["C"], dtype="T"),
                Port("beta", shape=["C"], dtype="T"),
                Port("eps", shape=[], dtype="float32", doc="0-d float32 tensor"),
            ],
            outputs=[
                Port("output", shape="input", dtype="T"),
                Port("mean", shape=["N"], dtype=STATS, doc=_STATS_DOC),
                Port("rstd", shape=["N"], dtype=STATS, doc="1/sqrt(var + eps); " + _STATS_DOC),
            ],
            dtype_vars=floats,
            variant_dtypes=FLOATS,
            infer=infer_norm_stats,
            bind=partial(layer_norm_bind, eps_input=True),
            cuda=cuda_variant(partial(cuda.layer_norm_bind, eps_input=True), FLOATS, supports_graphs=False),
        ),
    ]
