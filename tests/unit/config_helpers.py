"""Helpers shared by the config tests (not a test module): stage builders and problem lookups."""

from __future__ import annotations

from pipelink.config import check_document
from pipelink.errors import ErrorCode

KNOWN = {"relu", "add", "matmul", "layer_norm"}


def stage(name="relu", inputs=("x",), outputs=("y",), **extra):
    return {"name": name, "inputs": list(inputs), "outputs": list(outputs), **extra}


def check(doc, **kwargs):
    kwargs.setdefault("known_operators", KNOWN)
    return check_document(doc, **kwargs)


def paths(problems):
    return [p.path for p in problems]


def only(problems, path):
    """The single problem at ``path`` (fails if there is none or several)."""
    found = [p for p in problems if p.path == path]
    assert len(found) == 1, f"expected one problem at {path!r}, got {problems}"
    assert found[0].code is ErrorCode.PIPELINK_ERR_INVALID_CONFIG
    return found[0].message
