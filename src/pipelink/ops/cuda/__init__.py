"""Catalogue of the built-in CUDA kernels: which source, macros, kernel, grid and arguments each op needs.

Pure Python + NumPy: it plans launches and never imports ``cuda.core``, touches a device or allocates.
The backend compiles ``plan.source()`` with ``plan.options(arch=...)`` (NVRTC or nvcc) or
``ProgramOptions(**plan.program_options(arch=...))``, takes ``plan.kernel`` from the module and runs
``launch(stream, LaunchConfig(grid=plan.grid, block=plan.block, shmem_size=plan.shared_mem), kernel,
*plan.args(x=ptr, y=ptr, ...))``. ``plan.arg_specs`` lists each kernel argument, in order, with its C type.

Alignment rule: every buffer the runtime gives is aligned to >= 256 bytes (``alignment=`` says what
may be assumed; default 16). A kernel touches ``vec`` elements per access, so a plan picks ``vec``
(at most ``16 // itemsize``) only when every address it forms is a multiple of ``vec * itemsize``:
row-wise ops need ``C % vec == 0`` (so every row start stays aligned when C is odd, vec is 1),
bias_add ``N % vec == 0``, batch_norm ``S % vec == 0`` (``C % vec == 0`` when S == 1), flat
elementwise ops only the base pointers. :meth:`LaunchPlan.args` re-checks the pointers it is given.

Tunables (``KERNELS[op].tunables``: name -> (default, allowed values); 0 means "chosen from the shape")
are passed as ``tuned={...}``; every plan records the values it used in ``plan.params``.
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgumentError
from .flat import plan_batch_norm, plan_bias_add, plan_binary, plan_cast, plan_unary
from .launch import (
    _BINARY,
    _DEFAULT_SM_COUNT,
    _UNARY,
    KERNELS,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    include_dir,
    source_text,
)
from .rows import plan_layer_norm, plan_rms_norm, plan_softmax, plan_transpose

__all__ = [
    "KERNELS",
    "ArgSpec",
    "KernelSource",
    "LaunchPlan",
    "include_dir",
    "source_text",
    "plan",
    "plan_unary",
    "plan_binary",
    "plan_bias_add",
    "plan_cast",
    "plan_layer_norm",
    "plan_rms_norm",
    "plan_softmax",
    "plan_transpose",
    "plan_batch_norm",
]


def plan(
    op: str,
    dtypes: Any,
    shapes: Any,
    attrs: dict[str, Any] | None = None,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan any built-in op from its input dtypes and shapes and its attributes.

    ``dtypes`` / ``shapes`` are the inputs' (a single dtype / shape is accepted for one-input ops).
    Attributes: ``factor`` (scale), ``eps`` (norms), ``has_gamma`` / ``has_beta``, ``perm``
    (transpose), ``dtype`` (cast output), ``a_strides`` / ``b_strides`` / ``in_strides``.

    Raises
    ------
    InvalidArgumentError
        For an unknown op, an unsupported dtype, a bad shape or a bad tunable.
    """
    attrs = dict(attrs or {})
    if op not in KERNELS:
        raise InvalidArgumentError(
            f"no built-in CUDA kernel for op {op!r}; known: {', '.join(KERNELS)}", op=op
        )
    dts = list(dtypes) if isinstance(dtypes, (list, tuple)) else [dtypes]
    shs = list(shapes) if shapes and isinstance(shapes[0], (list, tuple)) else [shapes]
    common = {"tuned": tuned, "sm_count": sm_count}
    if op in _UNARY:
        return plan_unary(op, dts[0], shs[0], factor=attrs.get("factor", 1.0), alignment=alignment, **common)
    if op in _BINARY:
        return plan_binary(
            op,
            dts[0],
            shs[0],
            shs[1],
            a_strides=attrs.get("a_strides"),
            b_strides=attrs.get("b_strides"),
            alignment=alignment,
            **common,
        )
    if op == "bias_add":
        return plan_bias_add(dts[0], shs[0], alignment=alignment, **common)
    if op == "cast":
        return plan_cast(dts[0], attrs["dtype"], shs[0], alignment=alignment, **common)
    if op == "layer_norm":
        return plan_layer_norm(
            dts[0],
            shs[0],
            eps=attrs.get("eps", 1e-5),
            has_gamma=attrs.get("has_gamma", len(shs) > 1),
            has_beta=attrs.get("has_beta", len(shs) > 2),
            alignment=alignment,
            **common,
        )
    if op == "rms_norm":
        return plan_rms_norm(
            dts[0],
            shs[0],
            eps=attrs.get("eps", 1e-6),
            has_gamma=attrs.get("has_gamma", len(shs) > 1),
            alignment=alignment,
            **common,
        )
    if op == "softmax":
        return plan_softmax(dts[0], shs[0], alignment=alignment, **common)
    if op == "transpose":
        return plan_transpose(dts[0], shs[0], attrs.get("perm"), in_strides=attrs.get("in_strides"), **common)
    return plan_batch_norm(
        dts[0],
        shs[0],
        eps=attrs.get("eps", 1e-5),
        has_gamma=attrs.get("has_gamma", True),
        has_beta=attrs.get("has_beta", True),
        alignment=alignment,
        **common,
    )
