"""Helpers shared by the built-in operator families' descriptors and NumPy reference kernels.

Kept free of any CUDA import: the CPU reference must load on a machine without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..descriptor import KernelContext, OperatorDescriptor, Variant
from ..dtypes import FLOAT_DTYPES, get_dtype
from ..limits import check_fits, shape_nbytes

__all__ = [
    "VERSION",
    "CPU_VARIANT",
    "FLOATS",
    "INTS",
    "NUMERIC",
    "HALF_DTYPES",
    "numpy_dtype",
    "compute_dtype",
    "stats_dtype",
    "host_scratch",
    "builtin_operator",
    "Bind",
]

VERSION = "1.0.0"
CPU_VARIANT = "cpu:numpy"
FLOATS = frozenset(FLOAT_DTYPES)
INTS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
NUMERIC = FLOATS | INTS
HALF_DTYPES = frozenset({"float16", "bfloat16"})

Bind = Callable[[KernelContext], Callable[[list, list, Any], None]]


def host_scratch(ctx: KernelContext, shape: tuple, dtype: Any, what: str) -> np.ndarray:
    """A host buffer a CPU kernel allocates once at bind (widened half inputs, wrapped indices, a mask),
    sized from the stage's shapes: declared shapes may be huge, so it is refused with the numbers
    (``OutOfMemoryError``) before NumPy is asked for it.

    Raises
    ------
    OutOfMemoryError
        More bytes than the host has available, or a shape NumPy cannot index even with no elements.
    """
    dtype = np.dtype(dtype)
    tag = f"stage {ctx.stage!r}: {what} (shape {list(shape)}, {dtype})"
    check_fits(shape_nbytes(shape, dtype.itemsize), tag)
    # NumPy refuses any shape whose non-zero dims multiply past its index type, empty or not.
    check_fits(shape_nbytes([d for d in shape if d], dtype.itemsize), tag, limit=np.iinfo(np.intp).max)
    return np.empty(shape, dtype)


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a PipeLink dtype name (``ml_dtypes.bfloat16`` for ``"bfloat16"``)."""
    return get_dtype(name).numpy


def compute_dtype(name: str) -> np.dtype:
    """The dtype a float kernel computes in: float64 for float64, float32 for everything else."""
    return np.dtype(np.float64) if name == "float64" else np.dtype(np.float32)


def stats_dtype(name: str) -> str:
    """The dtype of normalisation statistics (mean, rstd) for an input dtype."""
    return "float64" if name == "float64" else "float32"


def builtin_operator(
    name: str,
    *,
    doc: str,
    inputs,
    outputs,
    bind: Bind,
    attrs=(),
    dtype_vars: Mapping[str, frozenset[str]] | None = None,
    variant_dtypes: frozenset[str] | None = None,
    infer=None,
    cuda: Variant | None = None,
    staged_fallback: bool = False,
    onnx: str = "",
    output_count=None,
    view: bool = False,
) -> OperatorDescriptor:
    """A fresh built-in descriptor with its NumPy variant and, when the family has one, its CUDA variant
    (one descriptor per registry: descriptors are mutable).

    Parameters
    ----------
    name, doc : str
        Operator name and its one-line description.
    inputs, outputs : sequence of Port
    bind : callable
        ``bind(ctx) -> kernel(inputs, outputs, stream)``.
    attrs : sequence of Attr
    dtype_vars : mapping, optional
        Type variables of the ports.
    variant_dtypes : frozenset, optional
        Input dtypes the CPU variant accepts (None: any).
    infer : callable, optional
        Output shape/dtype rule when the port rules cannot express it.
    cuda : Variant, optional
        The family's CUDA variant (:func:`pipelink.ops.kernel.cuda_variant`); its bind imports nothing
        CUDA until it runs.
    staged_fallback : bool, optional
        With a CUDA variant: the reference still runs on staged host copies where that variant refuses
        the dtypes or its bind declines the stage (cuDNN missing, or no cuDNN plan for the geometry).
    onnx : str, optional
        The ONNX operator with these semantics (``"Reshape"``), empty when there is none.
    output_count : callable, optional
        ``output_count(attrs) -> int``: how many outputs the operator makes, when fewer than its ports.
    view : bool, optional
        Its output is its input under another shape: a plan may alias them (``OperatorDescriptor.view``).
    """
    # An operator without a kernel of its own on a device may run its reference there on staged host
    # copies (the load report says so); one with a kernel falls back to the reference only when it says
    # so (staged_fallback: its kernel is a library's, which may decline a configuration).
    variants = [
        Variant(
            device="cpu",
            bind=bind,
            name=CPU_VARIANT,
            dtypes=variant_dtypes,
            source="builtin",
            host_ok=cuda is None or staged_fallback,
        )
    ]
    if cuda is not None:
        variants.append(cuda)
    return OperatorDescriptor(
        name=name,
        version=VERSION,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        attrs=tuple(attrs),
        dtype_vars=dict(dtype_vars or {}),
        variants=variants,
        infer=infer,
        doc=doc,
        source="builtin",
        onnx=onnx,
        output_count=output_count,
        view=view,
    )
