"""Semantic versions of operators and the compatibility rules (seed section 3.6, DESIGN.md section 5).

A different major is refused, a newer minor loads with a warning, a patch difference is silent.
"""

from __future__ import annotations

import logging
import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .errors import VersionMismatchError

__all__ = ["Version", "parse_version", "parse_specifier", "version_symbol", "parse_version_symbol",
           "check_compatible"]

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


def parse_specifier(text: str) -> SpecifierSet:
    """A version specifier: PEP 440 (``">=1.2,<2"``), caret ``"^1.2"``, tilde ``"~1.2"`` or bare ``"1.2.3"``.

    A bare version means "this major, at least this version": ``"1.2.3"`` is ``">=1.2.3,<2"``. A newer
    minor than the one asked for is accepted and logged as a warning by :func:`check_compatible`.

    Raises
    ------
    ValueError
        When the text is none of these forms.
    """
    text = str(text).strip()
    if not text:
        raise ValueError("empty version specifier")
    op = ""
    if text[0] in "^~" and not text.startswith("~="):
        op, text = text[0], text[1:].strip()
    if op or re.fullmatch(r"\d+(\.\d+){0,2}", text):
        try:
            parts = [int(p) for p in text.split(".")]
        except ValueError as e:
            raise ValueError(f"invalid version specifier {op + text!r}") from e
        while len(parts) < 3:
            parts.append(0)
        major, minor, _ = parts
        low = ".".join(map(str, parts))
        if op == "~":
            high = f"{major}.{minor + 1}"
        elif op == "^" and major == 0:
            high = f"0.{minor + 1}"
        else:
            high = f"{major + 1}"
        return SpecifierSet(f">={low},<{high}")
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as e:
        raise ValueError(
            f"invalid version specifier {text!r}: use '>=1.2,<2', '^1.2', '~1.2' or '1.2.3'"
        ) from e


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


def check_compatible(operator: str, requested: str | None, available: Version, *, stage: str | None = None,
                     where: str = "") -> None:
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
            log.warning("operator %r: loaded version %s is a newer minor than the %s asked for%s",
                        operator, available, base, where)
        return
    raise VersionMismatchError(
        f"operator {operator!r}: version {available} does not satisfy {requested!r}"
        f"{where}; install a matching module or change the stage's 'version'",
        stage=stage, operator=operator, requested=requested, available=str(available),
    )


def _base_version(requested: str) -> Version | None:
    text = requested.strip().lstrip("^~=>")
    m = re.match(r"\d+(\.\d+){0,2}", text)
    return parse_version(m.group(0)) if m else None
