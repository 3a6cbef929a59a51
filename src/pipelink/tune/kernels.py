"""Tuning the built-in CUDA kernels: what can be tuned and the tuned-parameter lookup used by ``pl.load``
(the tune target is :mod:`pipelink.tune.kernel_target`).

A variant is the operator's launch plan with some tunables changed (compile-time macros and launch
geometry). Tunables, tuning-space aliases and the kernel-source hash come from the operator's own unit
(:func:`pipelink.ops.cuda_kernel`: its family's ``cuda.py``). The cache key holds everything that makes a
result valid (operator and version, the kernel-source hash, device name, compute capability, driver,
shapes, dtypes), computed here for both the tuner and the loader, so they can never disagree.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidArgumentError
from ..ops import cuda_kernel
from ..ops.kernel import CUDA_VARIANT
from .cache import TuneCache, key_digest, validate_tuned

__all__ = ["aliases_of", "key_fields", "tunables_of", "source_hash", "lookup_tuned"]


def tunables_of(op: str) -> dict[str, tuple[Any, tuple]]:
    """name -> (default, allowed values) of a built-in operator's CUDA kernel ({} when it has none)."""
    kernel = cuda_kernel(op)
    return dict(kernel.tunables) if kernel is not None else {}


def aliases_of(op: str) -> dict[str, str]:
    """Tuning-space name -> kernel tunable of a built-in operator's CUDA kernel ({} when it has none)."""
    kernel = cuda_kernel(op)
    return dict(kernel.aliases) if kernel is not None else {}


def source_hash(op: str) -> str:
    """The kernel-source hash of a built-in operator's CUDA kernel."""
    kernel = cuda_kernel(op)
    if kernel is None:
        raise InvalidArgumentError(f"operator {op!r} has no built-in CUDA kernel", op=op)
    return kernel.source_hash()


def key_fields(op: str, version: str, info, shapes: Mapping[str, Any], dtypes: Mapping[str, str]) -> dict:
    """The cache key of a tuned result (see the module docstring)."""
    return {
        "operator": op,
        "operator_version": str(version),
        "source_hash": source_hash(op),
        "device_name": info.name,
        "compute_capability": ".".join(map(str, info.compute_capability or ())),
        "driver_version": str(info.driver_version),
        "shapes": {k: list(v) for k, v in shapes.items()},
        "dtypes": dict(dtypes),
    }


def lookup_tuned(desc, info, in_shapes: tuple, in_dtypes: tuple) -> tuple[dict, str, str] | None:
    """``(params, source, reason)`` for a built-in stage, or None when it runs no tunable compiled kernel
    on this device (no tunables, or no such variant for the device's kind)."""
    tunables = tunables_of(desc.name)
    if desc.source != "builtin" or not tunables:
        return None
    if not any(v.name == CUDA_VARIANT and v.device == info.kind for v in desc.variants):
        return None  # the stage runs its reference variant here: nothing of the kernel's applies
    shapes = {p.name: s for p, s in zip(desc.inputs, in_shapes, strict=False) if s is not None}
    dtypes = {p.name: d for p, d in zip(desc.inputs, in_dtypes, strict=False) if d is not None}
    defaults = {k: v[0] for k, v in tunables.items()}
    key = key_fields(desc.name, desc.version, info, shapes, dtypes)
    try:  # the cache is an optimisation: any failure means "run with the defaults"
        cache = TuneCache()
        tuned = cache.lookup(key)
    except Exception as e:  # noqa: BLE001
        return defaults, "default", f"tuning cache unusable ({type(e).__name__}: {e})"
    if tuned is None:
        return defaults, "default", f"no tuned entry in {cache.path}"
    # Entries are stored under the tuning space's names (the seed's block_size...): map them. Names the
    # kernel does not use (the seed's shared_mem_per_block) are kept in the cache but not applied.
    aliases = aliases_of(desc.name)
    named = {aliases.get(k, k): v for k, v in tuned.items() if aliases.get(k, k) in tunables}
    params, problems = validate_tuned(named, tunables)
    if problems:
        reason = f"tuned entry {key_digest(key)[:12]} in {cache.path} ignored: {'; '.join(problems)}"
        warnings.warn(f"{desc.name}: {reason}; re-run pipelink tune", RuntimeWarning, stacklevel=2)
        return defaults, "default", reason
    return {**defaults, **params}, "tuned", f"tuned entry {key_digest(key)[:12]} in {cache.path}"
