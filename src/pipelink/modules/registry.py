"""The operator registry: every known operator version, where it came from, and variant selection.

Sources are ``"builtin"``, ``"python"`` or a native module's path. Two native modules claiming one name
and version is an error. When a name and version exist in several sources, a stage without ``library``
gets, in order: a Python registration (``@pl.operator`` is an explicit choice), the built-in, then a
native module. So a module loaded for one pipeline's stage never changes what another pipeline's
built-in stage runs; a stage that wants the module's version names its ``library``.
"""

from __future__ import annotations

import difflib
import threading
from dataclasses import dataclass

from packaging.version import Version

from ..descriptor import KernelContext, OperatorDescriptor, Variant, VariantDeclined
from ..errors import HardwareUnsupportedError, ModuleLoadError, VersionMismatchError
from ..hardware import HardwareInfo, Requirement, missing_requirement, unmet_message
from ..versioning import parse_specifier

__all__ = ["HOST", "OperatorRegistry", "VariantChoice", "registry", "UnknownOperatorError"]


class UnknownOperatorError(LookupError):
    """Raised by :meth:`OperatorRegistry.get` for a name nobody registered (carries a suggestion)."""

    def __init__(self, name: str, suggestion: str | None):
        self.name = name
        self.suggestion = suggestion
        hint = f"; did you mean {suggestion!r}?" if suggestion else "; run 'pipelink ops' to list operators"
        super().__init__(f"unknown operator {name!r}{hint}")


HOST = "cpu"  # the device of variants whose kernels take host memory (NumPy arrays)


@dataclass(frozen=True)
class VariantChoice:
    """The variant chosen for a stage, why the others were skipped (the load report), and whether it
    is a host variant run on a device through staged copies (``Variant.host_ok``)."""

    variant: Variant
    skipped: tuple[str, ...]
    staged: bool = False


class OperatorRegistry:
    """Operators by name, each with one or more versions from one or more sources."""

    def __init__(self):
        self._ops: dict[str, list[OperatorDescriptor]] = {}
        self._lock = threading.RLock()

    def register(self, desc: OperatorDescriptor, *, replace: bool = False) -> OperatorDescriptor:
        """Add an operator version; see the module docstring for conflicts."""
        with self._lock:
            versions = self._ops.setdefault(desc.name, [])
            for i, other in enumerate(versions):
                if other.version != desc.version:
                    continue
                if other.source == desc.source or replace:
                    versions[i] = desc
                    return desc
                if other.source not in ("builtin", "python") and desc.source not in ("builtin", "python"):
                    if _same_content(other, desc):
                        continue  # two copies of one module (same bytes): each stays reachable by path
                    raise ModuleLoadError(
                        f"operator {desc.name!r} version {desc.version} is provided by two modules: "
                        f"{other.source} and {desc.source}; load only one of them",
                        operator=desc.name,
                        module=desc.source,
                        other_module=other.source,
                    )
            versions.append(desc)
            return desc

    def add_variant(self, name: str, variant: Variant, version: str | Version | None = None) -> None:
        """Attach another implementation (e.g. the CUDA kernel) to a registered built-in operator."""
        desc = self.get(name, None if version is None else f"=={version}", source="builtin")
        desc.variants.append(variant)

    def unregister_source(self, source: str) -> list[OperatorDescriptor]:
        """Remove every operator a source registered (hot reload); returns them."""
        removed = []
        with self._lock:
            for name in list(self._ops):
                keep = [d for d in self._ops[name] if d.source != source]
                removed += [d for d in self._ops[name] if d.source == source]
                if keep:
                    self._ops[name] = keep
                else:
                    del self._ops[name]
        return removed

    def names(self) -> list[str]:
        return sorted(self._ops)

    def all(self) -> list[OperatorDescriptor]:
        return [d for name in self.names() for d in sorted(self._ops[name], key=lambda d: d.version)]

    def versions(self, name: str) -> list[OperatorDescriptor]:
        return list(self._ops.get(name, ()))

    def suggest(self, name: str) -> str | None:
        if not isinstance(name, str):
            return None  # an operator name that is not text resembles none
        hit = difflib.get_close_matches(name, self.names(), n=1, cutoff=0.6)
        return hit[0] if hit else None

    def get(
        self, name: str, spec: str | None = None, *, source: str | None = None, stage: str | None = None
    ) -> OperatorDescriptor:
        """The highest version of ``name`` satisfying ``spec`` (from ``source`` only, when given).

        Raises
        ------
        UnknownOperatorError
            No such operator.
        VersionMismatchError
            The operator exists, but no version satisfies ``spec``; names both.
        """
        candidates = [d for d in self._ops.get(name, ()) if source is None or d.source == source]
        if not candidates:
            raise UnknownOperatorError(name, self.suggest(name))
        if spec:
            specifier = parse_specifier(spec)
            fitting = [d for d in candidates if d.version in specifier]
            if not fitting:
                have = ", ".join(sorted(str(d.version) for d in candidates))
                raise VersionMismatchError(
                    f"operator {name!r}: no loaded version satisfies {spec!r} (available: {have})"
                    + (f" in stage {stage!r}" if stage else "")
                    + "; a different major version is incompatible (install the matching module)",
                    stage=stage,
                    operator=name,
                    requested=spec,
                    available=have,
                )
            candidates = fitting
        best = max(d.version for d in candidates)
        top = [d for d in candidates if d.version == best]
        rank = {"python": 0, "builtin": 1}
        return min(top, key=lambda d: rank.get(d.source, 2))

    def select_variant(
        self,
        desc: OperatorDescriptor,
        info: HardwareInfo,
        in_dtypes: tuple = (),
        *,
        stage: str = "",
        declined: tuple[tuple[Variant, str], ...] = (),
    ) -> VariantChoice:
        """The variant a stage runs on the device ``info`` describes, for its input dtypes.

        Variants of the device come first (highest priority first). On a device that is not the host, a
        host variant is chosen only when it allows host execution (``Variant.host_ok``): the stage then
        runs on copies staged to host memory and back (``VariantChoice.staged``). A device tensor is never
        handed to host code. ``declined`` lists variants whose bind already declined this stage, each
        with its reason: they are passed over (see :meth:`bind_variant`).

        Raises
        ------
        HardwareUnsupportedError
            When no variant fits: the message names each variant skipped and why (an unmet feature, an
            unsupported dtype, a host variant that does not allow host execution).
        """
        unmet_op = missing_requirement(info, desc.required_features)
        if unmet_op is not None and info.kind != HOST:
            raise HardwareUnsupportedError(
                f"stage {stage!r}: operator {desc.name!r} {unmet_message(info, unmet_op)}",
                stage=stage,
                operator=desc.name,
                feature=unmet_op.feature,
                required=unmet_op.minimum,
                got=info.value(unmet_op.feature),
                device=info.name,
                device_uuid=info.uuid,
            )
        skipped: list[str] = []
        first_unmet: Requirement | None = None
        by_priority = sorted(desc.variants, key=lambda v: -v.priority)
        for v in by_priority:
            if v.device != info.kind:
                continue
            if _was_declined(v, declined, skipped):
                continue
            unmet = missing_requirement(info, v.required_features)
            if unmet is not None:
                skipped.append(f"{_label(v)}: {unmet_message(info, unmet)}")
                first_unmet = first_unmet or unmet
                continue
            if _dtype_refused(v, in_dtypes, skipped):
                continue
            return VariantChoice(v, tuple(skipped))
        for v in by_priority:
            if v.device == info.kind:
                continue
            if _was_declined(v, declined, skipped):
                continue
            if v.device != HOST:
                skipped.append(f"{_label(v)}: runs on {v.device}, not on {info.kind}")
                continue
            if not v.host_ok:
                skipped.append(
                    f"{_label(v)}: a host (cpu) variant, and the operator does not allow host execution on "
                    f"{info.kind} (declare host_ok=True to run it on staged copies)"
                )
                continue
            if _dtype_refused(v, in_dtypes, skipped):
                continue
            return VariantChoice(v, tuple(skipped), staged=True)
        listing = "; ".join(skipped) if skipped else "none"
        context = {"stage": stage, "operator": desc.name, "device": info.name, "skipped": list(skipped)}
        if first_unmet is not None:
            context.update(
                feature=first_unmet.feature,
                required=first_unmet.minimum,
                got=info.value(first_unmet.feature),
                device_uuid=info.uuid,
            )
        devices = ", ".join(sorted({v.device for v in desc.variants})) or "none"
        raise HardwareUnsupportedError(
            f"stage {stage!r}: no variant of operator {desc.name!r} runs on {info.kind} ({info.name}); "
            f"variants: {devices}; skipped: {listing}",
            **context,
        )

    def bind_variant(
        self,
        choice: VariantChoice,
        desc: OperatorDescriptor,
        info: HardwareInfo,
        in_dtypes: tuple,
        ctx: KernelContext,
    ) -> tuple[VariantChoice, object]:
        """Bind the chosen variant for one stage: ``(choice, kernel)``.

        A bind that raises :class:`~pipelink.descriptor.VariantDeclined` (a cuDNN variant without cuDNN,
        or with a geometry cuDNN has no plan for) is passed over and the next variant that fits is bound
        (often the host reference on staged copies); the returned choice's ``skipped`` says why.

        Raises
        ------
        HardwareUnsupportedError
            When every variant that fits declined.
        """
        declined: list[tuple[Variant, str]] = []
        while True:
            try:
                return choice, choice.variant.bind(ctx)
            except VariantDeclined as e:
                declined.append((choice.variant, str(e)))
                choice = self.select_variant(desc, info, in_dtypes, stage=ctx.stage, declined=tuple(declined))


def _label(v: Variant) -> str:
    return v.name or f"{v.device} variant"


def _was_declined(v: Variant, declined: tuple[tuple[Variant, str], ...], skipped: list[str]) -> bool:
    reason = next((why for d, why in declined if d is v), None)
    if reason is not None:
        skipped.append(f"{_label(v)}: {reason}")
    return reason is not None


def _dtype_refused(v: Variant, in_dtypes: tuple, skipped: list[str]) -> bool:
    bad = [d for d in in_dtypes if d is not None and v.dtypes is not None and d not in v.dtypes]
    if bad:
        skipped.append(f"{_label(v)}: dtype {bad[0]} not supported (has {sorted(v.dtypes or ())})")
    return bool(bad)


def _same_content(a: OperatorDescriptor, b: OperatorDescriptor) -> bool:
    """Whether two native modules are the same bytes: the sha256 they were loaded from, never the disk now."""

    def digest(d: OperatorDescriptor) -> str | None:
        return next((getattr(v.origin, "sha256", None) for v in d.variants), None)

    return digest(a) is not None and digest(a) == digest(b)


registry = OperatorRegistry()
