"""The compiled schema check may only say "valid" when jsonschema agrees; otherwise a schema violation would
pass unreported. Mutated configs probe every keyword it implements."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelink.config.fastcheck import compile_check
from pipelink.config.schema import IS_VALID, SCHEMA, VALIDATOR, _python_regex

from .test_config_properties import valid_configs

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [
            "",
            "x",
            "x\n",
            "relu",
            "1bad",
            "a" * 5000,
            "same_as_previous",
            "float32",
            "fp16",
            ">=1.0",
            "ab" * 32,
            "cpu",
            "cuda:0",
            "gpu:x",
            "process",
        ]
    ),
    st.lists(st.integers(-3, 3) | st.text(max_size=3), max_size=3),
    st.dictionaries(
        st.sampled_from(["stream_id", "fallback", "version", "x", "shape", "dtype"]),
        st.integers(-1, 3) | st.text(max_size=3),
        max_size=2,
    ),
)
KEYS = st.sampled_from(
    [
        "name",
        "id",
        "inputs",
        "outputs",
        "attrs",
        "constraints",
        "on_error",
        "library",
        "sha256",
        "version",
        "isolation",
        "memory_alignment",
        "timeout_ms",
        "stream_affinity",
        "shape",
        "dtype",
        "requires",
        "outputs",
        "bogus",
        0,
        1,
        2,
    ]
)


def _mutate(doc, path, value):
    """Set the value at a random place along ``path`` (list indices clipped)."""
    node = doc
    for key in path[:-1]:
        if isinstance(node, dict) and isinstance(key, str) and isinstance(node.get(key), dict | list):
            node = node[key]
        elif isinstance(node, list) and node and isinstance(key, int):
            node = node[key % len(node)]
    last = path[-1]
    if isinstance(node, dict) and isinstance(last, str):
        node[last] = value
    elif isinstance(node, list) and node and isinstance(last, int):
        node[last % len(node)] = value


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    doc=valid_configs(), edits=st.lists(st.tuples(st.lists(KEYS, min_size=1, max_size=4), VALUES), max_size=3)
)
def test_fast_check_never_accepts_what_jsonschema_rejects(doc, edits):
    doc = copy.deepcopy(doc)
    for path, value in edits:
        _mutate(doc, ["pipeline", *path] if path[0] in (0, 1, 2) else path, value)
    if IS_VALID(doc):
        assert VALIDATOR.is_valid(doc), list(VALIDATOR.iter_errors(doc))[:1]


@settings(max_examples=100, deadline=None)
@given(doc=valid_configs())
def test_fast_check_accepts_valid_configs(doc):
    # If it answered False here, every load would fall back to the slow jsonschema walk.
    assert VALIDATOR.is_valid(doc)
    assert IS_VALID(doc)


def test_unknown_schema_keyword_is_refused_at_compile_time():
    with pytest.raises(ValueError, match="unsupported schema keyword"):
        compile_check({"type": "object", "propertyNames": {"maxLength": 3}}, _python_regex)


def test_the_shipped_schema_compiles():
    check = compile_check(SCHEMA, _python_regex)
    assert check({"pipeline": [{"name": "a", "inputs": [], "outputs": ["y"]}]})
    assert not check({"pipeline": [{"name": "a", "inputs": [], "outputs": []}]})  # outputs: minItems 1
