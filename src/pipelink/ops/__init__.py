"""The standard operator library: built-in descriptors with their CPU (NumPy) reference kernels.

CUDA variants are attached elsewhere (``registry.add_variant``); this package never imports CUDA.
"""

from __future__ import annotations

from ..descriptor import OperatorDescriptor
from ..modules.registry import OperatorRegistry
from . import attention, conv, elementwise, linalg, normalization, pool, quantize, reduce, resize, shape

__all__ = ["BUILTIN_OPERATORS", "register_builtins", "builtin_descriptors"]

FAMILIES = (shape, reduce, conv, pool, resize, attention, quantize)
"""Operator families, one package each (descriptors, CPU reference, later their CUDA variants)."""


def builtin_descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of every built-in operator, each with its ``cpu:numpy`` variant."""
    return elementwise.descriptors() + normalization.descriptors() + linalg.descriptors() + [
        d for family in FAMILIES for d in family.descriptors()]


BUILTIN_OPERATORS: tuple[str, ...] = tuple(d.name for d in builtin_descriptors())
"""Names of the built-in operators, in registration order."""


def register_builtins(registry: OperatorRegistry | None = None) -> list[OperatorDescriptor]:
    """Register the built-in operators on ``registry`` (the global one by default).

    Idempotent: an operator whose built-in version is already registered there is left as it is, so a
    second call neither duplicates it nor drops the variants (CUDA kernels) attached to it since.

    Parameters
    ----------
    registry : OperatorRegistry, optional

    Returns
    -------
    list of OperatorDescriptor
        The descriptors this call added (empty on a repeated call).
    """
    if registry is None:
        from ..modules.registry import registry as global_registry

        registry = global_registry
    added = []
    for desc in builtin_descriptors():
        versions = registry.versions(desc.name)
        if not any(d.source == "builtin" and d.version == desc.version for d in versions):
            added.append(registry.register(desc))
    return added
