"""The standard operator library: one package per operator family, each holding its descriptors, its
NumPy reference (``reference.py``) and its CUDA kernels (``cuda.py`` and ``.cu`` sources).

``FAMILIES`` is the list of families: adding a family is one line there. Nothing here imports a CUDA
package (a family's CUDA binds import what they need when a stage binds).
"""

from __future__ import annotations

from ..descriptor import OperatorDescriptor
from ..modules.registry import OperatorRegistry
from ..modules.registry import registry as global_registry
from . import (
    attention,
    batch_norm,
    collective,
    compare,
    conv,
    elementwise,
    gemm,
    indexing,
    normalization,
    pool,
    quantize,
    reduce,
    resize,
    roi,
    rotary,
    shape,
    softmax,
    transpose,
)
from .kernel import KernelSource

__all__ = [
    "FAMILIES",
    "BUILTIN_OPERATORS",
    "register_builtins",
    "builtin_descriptors",
    "cuda_kernel",
    "cuda_kernels",
]

FAMILIES = (
    elementwise,
    normalization,
    softmax,
    batch_norm,
    transpose,
    gemm,
    shape,
    indexing,
    reduce,
    conv,
    pool,
    resize,
    roi,
    attention,
    rotary,
    quantize,
    compare,
    collective,
)
"""The built-in operator families, one package each, in registration order."""


def builtin_descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of every built-in operator, each with its ``cpu:numpy`` variant and, where its
    family has kernels (a ``cuda`` module), its ``cuda:nvrtc`` variant."""
    return [desc for family in FAMILIES for desc in family.descriptors()]


BUILTIN_OPERATORS: tuple[str, ...] = tuple(d.name for d in builtin_descriptors())
"""Names of the built-in operators, in registration order."""


def cuda_kernels() -> dict[str, KernelSource]:
    """Every built-in CUDA kernel with tunables or a source of its own, by the op name its plans use."""
    return {op: ks for family in _cuda_families() for op, ks in family.cuda.KERNELS.items()}


def _cuda_families() -> list:
    """The families with CUDA kernels of their own (a ``cuda`` module beside their reference)."""
    return [family for family in FAMILIES if hasattr(family, "cuda")]


def cuda_kernel(operator: str) -> KernelSource | None:
    """The CUDA kernel a built-in operator runs and is tuned as (None when it has none): its tunables,
    tuning aliases and source hash, as its family's ``cuda.py`` declares them."""
    for family in _cuda_families():
        name = family.cuda.TUNED_AS.get(operator, operator)
        if name in family.cuda.KERNELS:
            return family.cuda.KERNELS[name]
    return None


def register_builtins(registry: OperatorRegistry | None = None) -> list[OperatorDescriptor]:
    """Register the built-in operators, with their CPU and CUDA variants, on ``registry`` (the global one
    by default).

    Idempotent: an operator whose built-in version is already registered there is left as it is, so a
    second call neither duplicates it nor drops variants attached to it since.

    Parameters
    ----------
    registry : OperatorRegistry, optional

    Returns
    -------
    list of OperatorDescriptor
        The descriptors this call added (empty on a repeated call).
    """
    if registry is None:
        registry = global_registry
    added = []
    for desc in builtin_descriptors():
        versions = registry.versions(desc.name)
        if not any(d.source == "builtin" and d.version == desc.version for d in versions):
            added.append(registry.register(desc))
    return added
