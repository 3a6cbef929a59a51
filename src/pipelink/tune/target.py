"""What a backend implements so its kernels can be tuned: the :class:`TuneTarget` contract.

The tuner drives a target; a target never decides what to try, and never times a variant it has not
verified (the tuner enforces the order prune -> build -> verify -> measure).
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from .space import Constraint, first_violation

__all__ = ["TuneTarget", "CRITERIA", "source_hash", "defines"]

#: benchmark criterion -> (unit, higher is better)
CRITERIA: dict[str, tuple[str, bool]] = {
    "throughput_gbps": ("GB/s", True),
    "tflops": ("TFLOP/s", True),
    "latency_us": ("us", False),
}

_MACRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TuneTarget(ABC):
    """One operator, at fixed shapes and dtypes, on one device: the thing being tuned.

    A *candidate* is whatever :meth:`build` returns (a compiled kernel and its launch configuration, a
    rebuilt module); the tuner passes it back to :meth:`verify`, :meth:`measure` and :meth:`release`.

    Any method may raise: the tuner scores that variant ``inf`` and goes on. Parameters are the
    defaults overlaid with the tuned subset, so :meth:`build` always receives every parameter.
    """

    #: Pruning rules checked before anything is compiled (see :class:`~pipelink.tune.space.ResourceLimit`).
    constraints: tuple[Constraint, ...] = ()

    @abstractmethod
    def default_params(self) -> dict[str, Any]:
        """The parameters used without tuning; the baseline a tuned result is compared with."""

    def prune(self, params: Mapping[str, Any]) -> str | None:
        """Why ``params`` cannot work here (``None`` if it may): checked before building.

        The default applies :attr:`constraints` in order.
        """
        return first_violation(params, self.constraints)

    @abstractmethod
    def build(self, params: Mapping[str, Any]) -> Any:
        """Compile (``-D`` macros) and configure one variant; raise if it cannot be built."""

    @abstractmethod
    def verify(self, candidate: Any) -> tuple[bool, str]:
        """Run the candidate on fresh inputs and compare with the CPU reference.

        Returns
        -------
        (bool, str)
            Whether every output matched within the dtype's tolerance, and a detail for the report
            (e.g. ``"max abs err 3e-2 at (17, 4)"``).
        """

    @abstractmethod
    def measure(self, candidate: Any, warmup: int, iters: int) -> list[float]:
        """Run ``warmup`` untimed launches, then return ``iters`` per-launch times in seconds."""

    @abstractmethod
    def work(self, params: Mapping[str, Any]) -> tuple[float, float]:
        """The work of one launch: ``(bytes moved to and from memory, floating-point operations)``."""

    def roofline(self, criteria: str) -> float | None:
        """The hardware bound in the criterion's unit, or ``None`` when unknown.

        Peak GB/s for ``throughput_gbps``, peak TFLOP/s for ``tflops``, and the smallest possible
        time in microseconds for ``latency_us``.
        """
        return None

    @abstractmethod
    def cache_key_fields(self) -> dict[str, Any]:
        """What makes a tuned result valid: operator, operator_version, source_hash, device_name,
        compute_capability, driver_version, shapes, dtypes (more fields are allowed)."""

    def release(self, candidate: Any) -> None:  # noqa: B027 - optional hook, nothing to free by default
        """Free a candidate's resources (compiled module, buffers) once it has been evaluated."""


def source_hash(*sources: str | bytes) -> str:
    """The sha256 of kernel sources (and any build flags passed in), for the cache key."""
    digest = hashlib.sha256()
    for src in sources:
        data = src.encode() if isinstance(src, str) else src
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def defines(params: Mapping[str, Any]) -> list[str]:
    """Compile-time macros for a variant: ``{"block_size": 256}`` -> ``["-DBLOCK_SIZE=256"]``.

    Names are upper-cased; booleans become 1 or 0. The same list is passed to NVRTC and to
    ``pipelink build -D``.

    Raises
    ------
    ValueError
        When a name is not a C identifier or a value would not survive a command line.
    """
    out = []
    for name, value in params.items():
        if not _MACRO_NAME.match(name):
            raise ValueError(f"parameter name {name!r} is not a C identifier, so it cannot be a -D macro")
        if isinstance(value, bool):
            text = "1" if value else "0"
        elif isinstance(value, int | float | str):
            text = str(value)
        else:
            raise ValueError(f"parameter {name!r}: {value!r} is not a number, bool or token")
        if not text or any(c.isspace() or c in "\"'\\" for c in text):
            raise ValueError(f"parameter {name!r}: {text!r} cannot be passed as -D{name.upper()}=...")
        out.append(f"-D{name.upper()}={text}")
    return out
