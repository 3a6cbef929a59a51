"""Version specifiers: bare, caret and tilde forms map to the documented ranges; PEP 440 passes through."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from pipelink.config.specifiers import parse_capability_specifier, parse_specifier


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.2.3", ">=1.2.3,<2"),
        ("1.2", ">=1.2,<2"),
        ("1", ">=1,<2"),
        ("^1.2.3", ">=1.2.3,<2"),
        ("^0.3", ">=0.3,<0.4"),
        ("^0.3.1", ">=0.3.1,<0.4"),
        ("^0.0.3", ">=0.0.3,<0.0.4"),
        ("^0.0", ">=0.0,<0.1"),
        ("^0", ">=0,<1"),
        ("~1.2", ">=1.2,<1.3"),
        ("~1.2.3", ">=1.2.3,<1.3"),
        ("~1", ">=1,<2"),
        ("  ^ 2.1 ", ">=2.1,<3"),
        (">=1.2,<2", ">=1.2,<2"),
        ("~=1.4", "~=1.4"),
        ("==1.4.*", "==1.4.*"),
    ],
)
def test_forms_map_to_documented_ranges(text, expected):
    assert parse_specifier(text) == SpecifierSet(expected)


@pytest.mark.parametrize(
    "text", ["", "   ", "^", "~", "^x", "~1.2.3.4", "^1.2.3rc1", "latest", "1..2", ">>1", "v1.2 or later"]
)
def test_invalid_specifiers_raise_value_error_echoing_the_text(text):
    with pytest.raises(ValueError) as info:
        parse_specifier(text)
    message = str(info.value)
    assert (repr(text) in message or "empty" in message) and "'^1.2'" in message


def test_space_separated_clauses_get_a_comma_hint():
    with pytest.raises(ValueError, match="separate clauses with a comma"):
        parse_specifier(">=1.2 <2")


def test_non_string_is_rejected():
    with pytest.raises(ValueError, match="must be a string"):
        parse_specifier(1.2)  # type: ignore[arg-type]


def _expected_member(op: str, parts: list[int], version: tuple[int, int, int]) -> bool:
    """The rule, stated independently: at least the given version, and the components up to the fixed
    one equal (bare and '~1': the major; '~1.x': major and minor; '^': up to the first non-zero)."""
    lower = tuple(parts + [0] * (3 - len(parts)))
    if op == "^":
        fixed = next((i for i, p in enumerate(parts) if p), len(parts) - 1)
    elif op == "~":
        fixed = min(1, len(parts) - 1)
    else:
        fixed = 0
    return version >= lower and version[: fixed + 1] == lower[: fixed + 1]


@given(
    op=st.sampled_from(["", "^", "~"]),
    parts=st.lists(st.integers(0, 3), min_size=1, max_size=3),
    version=st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)),
)
def test_membership_agrees_with_the_rule(op, parts, version):
    spec = parse_specifier(op + ".".join(map(str, parts)))
    assert (Version(".".join(map(str, version))) in spec) == _expected_member(op, parts, version)


@given(
    op=st.sampled_from([">=", "<=", "==", "!=", ">", "<", "~="]),
    parts=st.lists(st.integers(0, 20), min_size=1, max_size=3),
    version=st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20)),
)
def test_pep440_specifiers_pass_through(op, parts, version):
    text = op + ".".join(map(str, parts))
    try:
        reference = SpecifierSet(text)
    except InvalidSpecifier:
        with pytest.raises(ValueError):
            parse_specifier(text)
        return
    v = Version(".".join(map(str, version)))
    assert parse_specifier(text) == reference and (v in parse_specifier(text)) == (v in reference)


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [(">=8.0", "9.0", "7.5"), ("8.0", "12.0", "7.5"), (">=7.0,<9.0", "8.6", "9.0")],
)
def test_capability_specifier(text, inside, outside):
    spec = parse_capability_specifier(text)
    assert Version(inside) in spec and Version(outside) not in spec


@pytest.mark.parametrize("text", ["^8.0", "~8.0", "sm_80", "", ">= eight"])
def test_capability_specifier_rejects_other_forms(text):
    with pytest.raises(ValueError, match="compute_capability"):
        parse_capability_specifier(text)
