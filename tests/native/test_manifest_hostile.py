"""A manifest is text from an untrusted file: every malformed field is a ModuleLoadError naming it.

Each case would otherwise escape as a TypeError, AttributeError, ValueError or RecursionError (at load,
or later when the linker reads the field).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelink.errors import ErrorCode, ModuleLoadError
from pipelink.modules.manifest import parse_manifest

BASE = {"name": "op", "version": "1.0.0", "entry": "op_compute", "inputs": [{"name": "x"}],
        "outputs": [{"name": "y", "shape": "x"}]}  # fmt: skip


def manifest(**fields) -> str:
    return json.dumps({"abi_version": 1, "operators": [{**BASE, **fields}]})


CASES = {
    "devices is a number": (manifest(devices=5), "devices 5"),
    "devices repeat": (manifest(devices=["cpu", "cpu"]), "distinct"),
    "entry is empty": (manifest(entry=""), "names no symbol"),
    "tunables is a list": (manifest(tunables=[1, 2]), "'tunables' must be an object"),
    "a tunable is not a list": (manifest(tunables={"block": {"a": 1}}), "tunable 'block'"),
    "dtype_vars is a list": (manifest(dtype_vars=["float32"]), "'dtype_vars' must be an object"),
    "minimum is text": (
        manifest(required_features=[{"feature": "tensor_core", "minimum": "x"}]),
        "minimum 'x'",
    ),
    "a hook is a number": (manifest(context_create=5), "'context_create' must name a symbol"),
    "a dim is an object": (manifest(inputs=[{"name": "x", "shape": [{"a": 1}]}]), "is not a pattern"),
    "a negative dim": (manifest(inputs=[{"name": "x", "shape": [-1]}]), "is not a pattern"),
    "broadcast of no input": (
        manifest(outputs=[{"name": "y", "shape": {"broadcast": ["z"]}}]),
        "not a pattern",
    ),
    "nested too deeply": ("[" * 100_000 + "]" * 100_000, "RecursionError"),
    "a number too long": ('{"abi_version": ' + "1" * 5000 + "}", "cannot be read"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_manifest_fields_are_load_errors(case):
    text, fragment = CASES[case]
    with pytest.raises(ModuleLoadError) as info:
        parse_manifest(text, Path("/lib/libop.so"))
    assert info.value.code == ErrorCode.PIPELINK_ERR_MODULE_LOAD_FAILED
    assert fragment in info.value.message and "/lib/libop.so" in info.value.message


def test_the_base_manifest_is_valid():
    (spec,) = parse_manifest(manifest(), Path("/lib/libop.so"))
    assert spec.name == "op" and spec.devices == ("cpu",)
