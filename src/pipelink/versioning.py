"""Semantic versions of operators and the compatibility rules (seed section 3.6; docs/native-modules.md,
"Versions").

A different major is refused, a newer minor loads with a warning, a patch difference is silent.
"""

from __future__ import annotations

import logging
import re

from packaging.version import InvalidVersion, Version

from .config.specifiers import parse_specifier
from .errors import VersionMismatchError

__all__ = [
    "Version",
    "parse_version",
    "parse_specifier",
    "version_symbol",
    "parse_version_symbol",
    "check_compatible",
]

log = logging.getLogger("pipelink")

_SYMBOL_RE = re.compile(r"^pipeLinkVersion_(?P<name>.+)_(?P<major>\d+)_(?P<minor>\d+)_(?P<patch>\d+)$")


def parse_version(value: str | int | Version) -> Version:
    """A version from ``"1.2.3"``, ``"1.2"``, ``2`` (the seed's integer versions) or a Version."""
    if isinstance(value, Version):
        return value
    text = str(value).strip()
    try:
        version = Version(text)
    except InvalidVersion as e:
        raise ValueError(f"invalid version {value!r}: expected MAJOR.MINOR.PATCH such as '1.2.0'") from e
    return Version(f"{version.major}.{version.minor}.{version.micro}")


def version_symbol(name: str, version: Version | str) -> str:
    """The exported symbol a native module defines for one operator version (seed section 3.6)."""
    v = parse_version(version)
    return f"pipeLinkVersion_{name}_{v.major}_{v.minor}_{v.micro}"


def parse_version_symbol(symbol: str) -> tuple[str, Version] | None:
    """``pipeLinkVersion_deform_conv2d_v2_1_2_0`` -> ``("deform_conv2d_v2", Version("1.2.0"))``."""
    m = _SYMBOL_RE.match(symbol)
    if m is None:
        return None
    return m["name"], Version(f"{m['major']}.{m['minor']}.{m['patch']}")


def check_compatible(
    operator: str, requested: str | None, available: Version, *, stage: str | None = None, where: str = ""
) -> None:
    """Apply the version rules to one resolved operator.

    Raises
    ------
    VersionMismatchError
        When ``available`` is outside ``requested`` (a different major, or older than asked).
    """
    if requested is None:
        return
    spec = parse_specifier(requested)
    if available in spec:
        base = _base_version(requested)
        if base is not None and available.major == base.major and available.minor > base.minor:
            log.warning(
                "operator %r: loaded version %s is a newer minor than the %s asked for%s",
                operator,
                available,
                base,
                where,
            )
        return
    raise VersionMismatchError(
        f"operator {operator!r}: version {available} does not satisfy {requested!r}"
        f"{where}; install a matching module or change the stage's 'version'",
        stage=stage,
        operator=operator,
        requested=requested,
        available=str(available),
    )


def _base_version(requested: str) -> Version | None:
    text = requested.strip().lstrip("^~=>")
    m = re.match(r"\d+(\.\d+){0,2}", text)
    return parse_version(m.group(0)) if m else None
