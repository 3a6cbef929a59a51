"""Fuzzing: generated configs and inputs must load and run, or raise a PipeLinkError; nothing else.

CI runs a few hundred cases; ``PIPELINK_LONG=1`` runs 10,000 of each.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pipelink as pl
from pipelink.dtypes import get_dtype

LONG = os.environ.get("PIPELINK_LONG") == "1"
CASES = 10_000 if LONG else 250
FUZZ = settings(
    max_examples=CASES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=not LONG
)

OPS = [
    "identity",
    "relu",
    "silu",
    "gelu",
    "scale",
    "add",
    "mul",
    "bias_add",
    "cast",
    "layer_norm",
    "rms_norm",
    "softmax",
    "gemm",
    "transpose",
    "batch_norm",
    "silu_activation",
    "layer_norm_v1",
    "not_an_op",
]
DTYPES = ["float32", "float16", "bfloat16", "float64", "int32", "int8", "bool"]
ATTR_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-5, 5),
    st.booleans(),
    st.sampled_from(DTYPES + ["tanh", "none", "gelu", "x"]),
    st.lists(st.integers(-3, 3), max_size=4),
)
ATTR_NAMES = st.sampled_from(
    ["eps", "factor", "approximate", "axis", "dtype", "perm", "activation", "trans_b", "alpha", "bogus"]
)


STATS = {"load_error": 0, "run_error": 0, "ran": 0}


def teardown_module(module):
    print(f"\nfuzz outcomes: {STATS}")


# Operators by how they can be wired on matrices x [R, C], weights w [C, C] and vectors v [C].
UNARY = [
    "identity",
    "relu",
    "silu",
    "gelu",
    "scale",
    "softmax",
    "rms_norm",
    "layer_norm",
    "silu_activation",
    "transpose",
    "cast",
]
BINARY = ["add", "mul"]


@st.composite
def configs(draw):
    """Mostly valid pipelines (so they run), with a mutation one time in four."""
    mats, stages = ["x"], []
    for i in range(draw(st.integers(1, 7))):
        out = f"t{i}"
        kind = draw(st.sampled_from(["unary", "binary", "gemm", "bias_add"]))
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            stage = {"name": op, "inputs": [draw(st.sampled_from(mats))], "outputs": [out]}
            if op == "cast":
                stage["attrs"] = {"dtype": "float32"}
        elif kind == "binary":
            stage = {
                "name": draw(st.sampled_from(BINARY)),
                "inputs": [draw(st.sampled_from(mats)), draw(st.sampled_from([*mats, "v"]))],
                "outputs": [out],
            }
        elif kind == "gemm":
            bias = ["v"] if draw(st.booleans()) else []
            stage = {
                "name": "gemm",
                "inputs": [draw(st.sampled_from(mats)), "w", *bias],
                "outputs": [out],
                "attrs": {"activation": draw(st.sampled_from(["none", "relu", "gelu"]))},
            }
        else:
            stage = {"name": "bias_add", "inputs": [draw(st.sampled_from(mats)), "v"], "outputs": [out]}
        if draw(st.integers(0, 5)) == 0:
            stage["on_error"] = draw(st.sampled_from(["identity", "skip", {"fallback": "relu"}]))
            stage["constraints"] = {"check_finite": True}
        stages.append(stage)
        mats.append(out)
    doc = {"pipeline": stages}
    if draw(st.booleans()):
        c = draw(st.integers(1, 6))
        doc["inputs"] = {
            "x": {"shape": [c, c], "dtype": "float32"},
            "w": {"shape": [c, c], "dtype": "float32"},
            "v": {"shape": [c], "dtype": "float32"},
        }
    if draw(st.integers(0, 3)) == 0:
        mutate(draw, doc)
    return doc


def mutate(draw, doc):
    stage = draw(st.sampled_from(doc["pipeline"]))
    what = draw(st.sampled_from(["ghost", "arity", "attr", "op", "id", "align", "order", "dtype", "hostile"]))
    if what == "hostile":
        hostile(draw, doc, stage)
        return
    if what == "ghost":
        stage["inputs"] = [*stage["inputs"][:-1], "ghost"]
    elif what == "arity":
        stage["inputs"] = stage["inputs"] * draw(st.integers(0, 3))
    elif what == "attr":
        stage["attrs"] = draw(st.dictionaries(ATTR_NAMES, ATTR_VALUES, min_size=1, max_size=2))
    elif what == "op":
        stage["name"] = draw(st.sampled_from(OPS))
    elif what == "id":
        for s in doc["pipeline"]:
            s["id"] = "same"
    elif what == "align":
        stage["constraints"] = {"memory_alignment": draw(st.sampled_from([16, 48, 96]))}
    elif what == "order":
        doc["pipeline"].reverse()
    elif "inputs" in doc:
        doc["inputs"]["x"]["dtype"] = draw(st.sampled_from(DTYPES))


def _nested(depth: int):
    node: list = []
    for _ in range(depth):
        node = [node]
    return node


def hostile(draw, doc, stage):
    """What an adversary writes (issue 12): deep nesting, numbers past float range, names ending in a
    newline, absurd bounds and shapes, impossible library paths."""
    what = draw(st.sampled_from(["deep", "number", "newline", "align", "timeout", "dims", "library"]))
    if what == "deep":
        stage["attrs"] = {"eps": _nested(draw(st.sampled_from([10, 63, 64, 65, 1000, 5000])))}
    elif what == "number":
        stage["attrs"] = {"factor": draw(st.sampled_from([float("inf"), -float("inf"), 10**400, 1e308]))}
    elif what == "newline":
        key = draw(st.sampled_from(["name", "id", "inputs", "outputs"]))
        stage[key] = [n + "\n" for n in stage[key]] if key in ("inputs", "outputs") else "relu\n"
    elif what == "align":
        stage["constraints"] = {"memory_alignment": draw(st.sampled_from([2**20, 2**21, 2**62, 2**64]))}
    elif what == "timeout":
        stage["constraints"] = {"timeout_ms": draw(st.sampled_from([1e308, 86400000, 0.001]))}
    elif what == "dims":
        dims = draw(st.sampled_from([[2**64, 1], [2**53, 2**53], [2**40, 2**12], [2**31, 2**31]]))
        doc["inputs"] = {"x": {"shape": dims, "dtype": "float32"}}
    else:
        stage["library"] = draw(
            st.sampled_from(["a" * 5000, "d/" + "b" * 300 + ".so", "x\x00.so", "/nonexistent/lib.so", "."])
        )


@st.composite
def feeds(draw, names, declared):
    """Inputs matching the declarations most of the time; wrong shapes, dtypes and names otherwise."""
    c = declared["x"]["shape"][0] if declared and declared["x"]["shape"] else draw(st.integers(1, 6))
    r = c if declared or draw(st.booleans()) else draw(st.integers(1, 6))
    shapes = {"x": (r, c), "w": (c, c), "v": (c,)}
    out = {}
    for name in names:
        shape = shapes.get(name, (c,))
        dtype = "float32"
        if draw(st.integers(0, 7)) == 0:
            shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
        if draw(st.integers(0, 7)) == 0:
            dtype = draw(st.sampled_from(DTYPES))
        data = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(shape) * 3
        out[name] = data.astype(get_dtype(dtype).numpy)
    if draw(st.integers(0, 9)) == 0:
        out["unexpected"] = np.zeros(2, np.float32)
    if out and draw(st.integers(0, 9)) == 0:
        out.pop(next(iter(out)))
    return out


@FUZZ
@given(configs(), st.data())
def test_generated_configs_load_and_run_or_raise_pipelink_errors(doc, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            pipe = pl.load(doc, device="cpu")
        except pl.PipeLinkError:
            STATS["load_error"] += 1
            return
        feed = data.draw(feeds(pipe.inputs, doc.get("inputs")))
        try:
            out = pipe.run(feed)
        except pl.PipeLinkError:
            STATS["run_error"] += 1
            return
        STATS["ran"] += 1
        assert set(out) | set(pipe.last_report.missing_outputs) == set(pipe.outputs)


JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(
    st.one_of(
        JSON,
        st.fixed_dictionaries({"pipeline": JSON}),
        st.fixed_dictionaries(
            {
                "pipeline": st.lists(
                    st.dictionaries(
                        st.sampled_from(["name", "inputs", "outputs", "attrs", "id"]), JSON, max_size=5
                    ),
                    max_size=3,
                )
            }
        ),
    )
)
def test_arbitrary_json_never_escapes_as_another_exception(doc):
    if not isinstance(doc, dict):
        with contextlib.suppress(pl.PipeLinkError):
            pl.validate(doc)
        return
    problems = pl.validate(doc)
    assert all(isinstance(p, pl.Problem) and p.path.startswith(("/", "")) for p in problems)


def _text_of(doc) -> bytes:
    try:
        text = json.dumps(doc, indent=1)
    except RecursionError:  # the "deep" hostile mutation is deeper than json.dumps goes: write it by hand
        text = (
            '{"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"], "attrs": {"eps": '
            + "[" * 5000
            + "]" * 5000
            + "}}]}"
        )
    # Sprinkle the relaxed syntax users write: comments and trailing commas.
    return (("// generated\n" + text.replace("]", ",]", 1)).replace("{", "{ /* c */", 1)).encode()


MUTATION_BYTES = st.sampled_from(list(b'{}[]",:/*\\\n 0123456789eE+-.trufalsn') + [0, 0x80, 0xC3, 0xFF])


@FUZZ
@given(
    configs(),
    st.lists(
        st.tuples(
            st.sampled_from(["insert", "delete", "replace", "repeat"]), st.floats(0, 1), MUTATION_BYTES
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_mutated_config_text_never_escapes_as_another_exception(tmp_path_factory, doc, edits):
    """Random byte edits of a config file: every outcome is a valid load or a PipeLinkError."""
    data = bytearray(_text_of(doc))
    for op, where, byte in edits:
        i = int(where * (len(data) - 1))
        if op == "insert":
            data.insert(i, byte)
        elif op == "delete" and len(data) > 1:
            del data[i]
        elif op == "replace":
            data[i] = byte
        elif op == "repeat":  # deep nesting or long runs from one character
            data[i:i] = bytes([byte]) * 3000
    path = tmp_path_factory.mktemp("fuzz") / "config.json"
    path.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problems = pl.validate(path)
        assert all(isinstance(p, pl.Problem) for p in problems)
        try:
            pl.load(path, device="cpu")
        except pl.PipeLinkError:
            STATS["load_error"] += 1
