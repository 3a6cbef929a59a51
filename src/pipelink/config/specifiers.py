"""Version specifiers as written in configs: PEP 440, npm-style caret and tilde, and bare versions.

Pure parsing into a ``packaging`` ``SpecifierSet``; never decides whether a loaded module is acceptable
(that, and the "newer minor" warning, belong to the loader).
"""

from __future__ import annotations

import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet

__all__ = ["parse_specifier", "parse_capability_specifier"]

_RELEASE = re.compile(r"\d+(?:\.\d+){0,2}")
_FORMS = "'>=1.2,<2' (PEP 440), '^1.2' (caret), '~1.2' (tilde) or '1.2.3' (bare version)"


def _bump(parts: list[int], index: int) -> str:
    """The upper bound that increments ``parts[index]`` and drops what follows (``[1, 2, 3], 1 -> '1.3'``)."""
    return ".".join(str(p) for p in [*parts[:index], parts[index] + 1])


def parse_specifier(text: str) -> SpecifierSet:
    """Parse a version specifier into a :class:`packaging.specifiers.SpecifierSet`.

    Forms (``MAJOR[.MINOR[.PATCH]]`` digits only for the first three):

    - bare ``"1.2.3"`` / ``"1.2"`` / ``"1"``: at least that version, same major (``">=1.2.3,<2"``);
      the loader warns separately when it picks a newer minor;
    - caret ``"^1.2.3"``: npm semantics, the left-most non-zero component is fixed
      (``"^1.2.3" -> ">=1.2.3,<2"``, ``"^0.3" -> ">=0.3,<0.4"``, ``"^0.0.3" -> ">=0.0.3,<0.0.4"``;
      when every given component is zero the last one is fixed: ``"^0.0" -> ">=0.0,<0.1"``);
    - tilde ``"~1.2.3"`` / ``"~1.2"``: same minor (``">=1.2,<1.3"``); ``"~1"``: same major;
    - anything else is passed to ``SpecifierSet`` (``">=1.2,<2"``, ``"==1.4.*"``, ``"~=1.2"``).

    Parameters
    ----------
    text : str
        The specifier as written in the config.

    Returns
    -------
    SpecifierSet
        The equivalent PEP 440 specifier set.

    Raises
    ------
    ValueError
        When the text is none of the forms above; the message echoes the text and lists the forms.
    """
    if not isinstance(text, str):
        raise ValueError(f"a version specifier must be a string such as {_FORMS} (got {text!r})")
    spec = text.strip()
    if not spec:
        raise ValueError(f"empty version specifier; use {_FORMS}")
    op = ""
    if spec[0] in "^~" and not spec.startswith("~="):
        op, spec = spec[0], spec[1:].strip()
    if op or _RELEASE.fullmatch(spec):
        if not _RELEASE.fullmatch(spec):
            raise ValueError(
                f"invalid version specifier {text!r}: after {op!r} expected MAJOR[.MINOR[.PATCH]] digits; "
                f"use {_FORMS}"
            )
        parts = [int(p) for p in spec.split(".")]
        if op == "^":
            nonzero = [i for i, p in enumerate(parts) if p != 0]
            upper = _bump(parts, nonzero[0] if nonzero else len(parts) - 1)
        elif op == "~":
            upper = _bump(parts, min(1, len(parts) - 1))
        else:
            upper = _bump(parts, 0)
        return SpecifierSet(f">={spec},<{upper}")
    try:
        return SpecifierSet(spec)
    except InvalidSpecifier as e:
        hint = " (separate clauses with a comma)" if " " in spec else ""
        raise ValueError(f"invalid version specifier {text!r}{hint}; use {_FORMS}") from e


def parse_capability_specifier(text: str) -> SpecifierSet:
    """Parse ``requires.compute_capability``: a PEP 440 specifier, or a bare version meaning "at least".

    Parameters
    ----------
    text : str
        ``">=8.0"``, ``">=8.0,<9.0"`` or ``"8.0"`` (same as ``">=8.0"``).

    Returns
    -------
    SpecifierSet

    Raises
    ------
    ValueError
        When the text is neither form (caret and tilde are not accepted here).
    """
    forms = "'>=8.0', '>=7.0,<9.0' or '8.0' (meaning at least 8.0)"
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"compute_capability must be a version specifier such as {forms} (got {text!r})")
    spec = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", spec):
        return SpecifierSet(f">={spec}")
    try:
        return SpecifierSet(spec)
    except InvalidSpecifier as e:
        raise ValueError(f"invalid compute_capability specifier {text!r}; use {forms}") from e
