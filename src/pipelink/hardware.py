"""Hardware features of a device and requirement checks (seed sections 3.1 and 5.3).

Feature values are numbers (1/0 for flags, counts for tensor cores); a requirement holds when the
device's value is at least the required one. Never imports a CUDA package: backends fill ``HardwareInfo``.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .errors import HardwareUnsupportedError, InvalidArgumentError

__all__ = ["FEATURES", "HardwareInfo", "Requirement", "cpu_info", "check_requirements"]

# Known feature names, with the seed's HW_FEATURE_* spelling in comments.
FEATURES = {
    "compute_capability": "compute capability as major.minor (HW_FEATURE_COMPUTE_CAPABILITY)",
    "tensor_core": "number of tensor cores (HW_FEATURE_TENSOR_CORE)",
    "fp16": "native half precision arithmetic (HW_FEATURE_FP16_SUPPORT)",
    "bf16": "native bfloat16 arithmetic (HW_FEATURE_BF16_SUPPORT)",
    "tf32": "tensor-float-32 matrix math (HW_FEATURE_TF32_SUPPORT)",
    "fp8": "8-bit floating point tensor cores (HW_FEATURE_FP8_SUPPORT)",
    "fp32": "single precision (HW_FEATURE_FP32_SUPPORT)",
    "fp64": "double precision (HW_FEATURE_FP64_SUPPORT)",
    "atomic_double": "atomicAdd on doubles (HW_FEATURE_ATOMIC_DOUBLE)",
    "sm_count": "number of streaming multiprocessors",
    "memory_bytes": "device memory in bytes",
}


@dataclass(frozen=True)
class Requirement:
    """One required feature: ``Requirement("tensor_core", 8)``, ``Requirement("compute_capability", 8.0)``."""

    feature: str
    minimum: float = 1

    def __str__(self) -> str:
        if self.feature == "compute_capability":
            return f"compute capability {_cc_text(self.minimum)}"
        if self.minimum == 1:
            return self.feature
        return f"{self.feature} >= {self.minimum:g}"


@dataclass(frozen=True)
class HardwareInfo:
    """What a device offers. ``features`` maps feature names to numbers."""

    kind: str  # "cpu" | "cuda"
    name: str
    index: int = 0
    uuid: str | None = None
    compute_capability: tuple[int, int] | None = None
    features: dict[str, float] = field(default_factory=dict)
    driver_version: str | None = None
    runtime_version: str | None = None
    # Features the device only emulates (the CPU's fp16/bf16 through NumPy/ml_dtypes, tf32 as fp32): usable,
    # but never a reason to prefer a narrower type (precision_policy "*_if_supported_else_fp32").
    emulated: frozenset[str] = frozenset()

    def value(self, feature: str) -> float:
        if feature == "compute_capability":
            cc = self.compute_capability
            return cc[0] + cc[1] / 10 if cc else 0.0
        return float(self.features.get(feature, 0))

    def satisfies(self, req: Requirement) -> bool:
        return self.value(req.feature) >= req.minimum

    def describe(self, feature: str) -> str:
        if feature == "compute_capability":
            return _cc_text(self.value(feature)) if self.compute_capability else "none (not a GPU)"
        return f"{self.value(feature):g}"


def _cc_text(value: float) -> str:
    major = int(value)
    return f"{major}.{round((value - major) * 10)}"


def cpu_info() -> HardwareInfo:
    """The CPU backend's device: fp16/bf16 are emulated through NumPy and ml_dtypes."""
    return HardwareInfo(
        kind="cpu",
        name=platform.processor() or platform.machine() or "cpu",
        features={"fp32": 1, "fp64": 1, "fp16": 1, "bf16": 1, "atomic_double": 1},
        emulated=frozenset({"fp16", "bf16", "tf32"}),
    )


def missing_requirement(info: HardwareInfo, requirements: tuple[Requirement, ...]) -> Requirement | None:
    """The first requirement the device does not meet, or None."""
    for req in requirements:
        if not info.satisfies(req):
            return req
    return None


def unmet_message(info: HardwareInfo, req: Requirement) -> str:
    """``"requires compute capability 8.0, got 7.5"`` / ``"requires tensor_core >= 8, got 0"``."""
    if req.feature == "compute_capability":
        return f"requires compute capability {_cc_text(req.minimum)}, got {info.describe(req.feature)}"
    want = "present" if req.minimum == 1 else f">= {req.minimum:g}"
    return f"requires {req.feature} {want}, got {info.describe(req.feature)} on {info.name}"


def check_requirements(info: HardwareInfo, requirements: tuple[Requirement, ...], *, what: str) -> None:
    """Raise :class:`HardwareUnsupportedError` naming the first unmet requirement."""
    req = missing_requirement(info, requirements)
    if req is not None:
        raise HardwareUnsupportedError(
            f"{what} {unmet_message(info, req)}",
            feature=req.feature,
            required=req.minimum,
            got=info.value(req.feature),
            device=info.name,
            device_uuid=info.uuid,
        )


def requirements_from(compute_capability: str | None = None, features=()) -> tuple[Requirement, ...]:
    """Requirements from the config's ``requires`` block (a capability specifier and feature names)."""
    reqs: list[Requirement] = []
    if compute_capability:
        if not isinstance(compute_capability, str):
            raise InvalidArgumentError(
                f"compute_capability must be a version specifier such as '>=8.0' "
                f"(got {type(compute_capability).__name__})"
            )
        text = compute_capability if compute_capability[0] in "<>=!~" else f">={compute_capability}"
        try:
            spec = SpecifierSet(text)
            lows = [Version(s.version) for s in spec if s.operator in (">=", ">", "==", "~=")]
        except (InvalidSpecifier, InvalidVersion) as e:
            raise InvalidArgumentError(
                f"compute_capability {compute_capability!r} is not a version specifier ({e}); write "
                "e.g. '>=8.0' or '8.0'"
            ) from None
        if lows:
            low = max(lows)
            reqs.append(Requirement("compute_capability", low.major + low.minor / 10))
    for feat in features or ():
        if isinstance(feat, dict) and "feature" in feat:
            try:
                minimum = float(feat.get("minimum", 1))
            except (TypeError, ValueError):
                minimum = None
            if minimum is None or minimum != minimum:
                raise InvalidArgumentError(f"feature {feat!r}: 'minimum' must be a number")
            reqs.append(Requirement(str(feat["feature"]), minimum))
        elif isinstance(feat, str):
            reqs.append(Requirement(feat))
        else:
            raise InvalidArgumentError(
                f"a required feature is a name or {{'feature': name, 'minimum': N}} (got {feat!r})"
            )
    return tuple(reqs)
