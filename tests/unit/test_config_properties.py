"""Property tests: random valid configs validate and round-trip; targeted mutations are caught where made."""

from __future__ import annotations

import copy
import json

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipelink.config import build_config, check_document, check_warnings
from pipelink.config.reader import loads_relaxed

OPS = ["relu", "add", "matmul", "layer_norm", "scale_v1"]
DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "int32", "int64", "uint8", "bool"]


@st.composite
def valid_configs(draw, declare_inputs=None):
    """A random valid config: linear or branching (each stage reads any earlier tensors)."""
    externals = [f"in_{k}" for k in range(draw(st.integers(1, 3)))]
    available = list(externals)
    produced: list[str] = []
    stages = []
    for i in range(draw(st.integers(1, 8))):
        outputs = [f"t{i}_{k}" for k in range(draw(st.integers(1, 3)))]
        stage = {
            "name": draw(st.sampled_from(OPS)),
            "inputs": draw(st.lists(st.sampled_from(available), max_size=3)),
            "outputs": outputs,
        }
        if draw(st.booleans()):
            stage["id"] = f"s{i}"
        if draw(st.booleans()):
            stage["constraints"] = {
                "memory_alignment": 1 << draw(st.integers(5, 12)),
                "stream_affinity": draw(
                    st.sampled_from(["same_as_previous", "async_preload", "new"])
                    | st.builds(lambda n: {"stream_id": n}, st.integers(0, 7))
                ),
            }
        if draw(st.booleans()):
            stage["on_error"] = draw(
                st.sampled_from(["fail", "identity", "skip"])
                | st.builds(lambda op: {"fallback": op}, st.sampled_from(OPS))
            )
        stages.append(stage)
        available += outputs
        produced += outputs
    doc = {"pipeline": stages}
    declare = draw(st.booleans()) if declare_inputs is None else declare_inputs
    if declare:
        dims = st.integers(0, 64) | st.sampled_from(["B", "N", "C", "_k"])
        doc["inputs"] = {
            name: {"shape": draw(st.lists(dims, max_size=4)), "dtype": draw(st.sampled_from(DTYPES))}
            for name in externals
        }
    if draw(st.booleans()):
        doc["outputs"] = draw(st.lists(st.sampled_from(produced), min_size=1, unique=True))
    return doc


@settings(max_examples=150)
@given(doc=valid_configs())
def test_random_valid_configs_validate_and_round_trip(doc):
    assert check_document(doc, known_operators=OPS) == []
    assert loads_relaxed(json.dumps(doc, indent=1)) == doc
    cfg = build_config(doc, ".", None)
    assert len(cfg.stages) == len(doc["pipeline"])
    assert len({s.id for s in cfg.stages}) == len(cfg.stages)
    for index, (raw, built) in enumerate(zip(doc["pipeline"], cfg.stages, strict=True)):
        assert (built.index, built.path, built.operator) == (index, f"/pipeline/{index}", raw["name"])
        assert built.inputs == tuple(raw["inputs"]) and built.outputs == tuple(raw["outputs"])
        assert built.id == raw.get("id", built.id) and built.id.startswith(raw.get("id", raw["name"]))
        expected_alignment = raw.get("constraints", {}).get("memory_alignment", 256)
        assert built.constraints.memory_alignment == expected_alignment
        policy = raw.get("on_error", "fail")
        assert built.on_error.kind == (policy if isinstance(policy, str) else "fallback")
    if "inputs" in doc:
        assert {k: (v.shape, v.dtype) for k, v in cfg.inputs.items()} == {
            k: (tuple(v["shape"]), v["dtype"]) for k, v in doc["inputs"].items()
        }
    else:
        assert cfg.inputs is None
    assert cfg.outputs == (tuple(doc["outputs"]) if "outputs" in doc else None)


@settings(max_examples=150)
@given(doc=valid_configs(), data=st.data())
def test_moving_a_consumer_before_its_producer_is_caught_at_its_input(doc, data):
    stages = doc["pipeline"]
    pairs = [
        (i, j, k)
        for j, s in enumerate(stages)
        for k, name in enumerate(s["inputs"])
        for i in range(j)
        if name in stages[i]["outputs"]
    ]
    assume(pairs)
    i, j, k = data.draw(st.sampled_from(pairs))
    moved = copy.deepcopy(doc)
    moved["pipeline"].insert(i, moved["pipeline"].pop(j))
    problems = check_document(moved, known_operators=OPS)
    at_input = [p for p in problems if p.path == f"/pipeline/{i}/inputs/{k}"]
    assert len(at_input) == 1 and "runs after this stage" in at_input[0].message


@settings(max_examples=150)
@given(doc=valid_configs(declare_inputs=True), data=st.data())
def test_a_misspelt_input_is_the_only_problem_when_inputs_are_declared(doc, data):
    reads = [(j, k) for j, s in enumerate(doc["pipeline"]) for k in range(len(s["inputs"]))]
    assume(reads)
    j, k = data.draw(st.sampled_from(reads))
    broken = copy.deepcopy(doc)
    broken["pipeline"][j]["inputs"][k] += "_typo"
    problems = check_document(broken, known_operators=OPS)
    assert [p.path for p in problems] == [f"/pipeline/{j}/inputs/{k}"]
    assert "unknown tensor" in problems[0].message


@settings(max_examples=100)
@given(doc=valid_configs(), data=st.data())
def test_a_bad_alignment_is_the_only_problem(doc, data):
    j = data.draw(st.integers(0, len(doc["pipeline"]) - 1))
    value = data.draw(st.integers(-4096, 4096).filter(lambda v: v < 32 or v & (v - 1)))
    broken = copy.deepcopy(doc)
    broken["pipeline"][j].setdefault("constraints", {})["memory_alignment"] = value
    problems = check_document(broken, known_operators=OPS)
    assert [p.path for p in problems] == [f"/pipeline/{j}/constraints/memory_alignment"]
    assert f"(got {value})" in problems[0].message


_any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)


def _places(value, path=()):
    """Every path inside a JSON value (the root included)."""
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from _places(child, (*path, key))


@settings(max_examples=200)
@given(doc=valid_configs(), data=st.data())
def test_any_corruption_is_reported_not_raised(doc, data):
    # Replace one random place with random JSON: validation must report problems as data, never crash.
    path = data.draw(st.sampled_from(list(_places(doc))))
    replacement = data.draw(_any_json)
    if path:
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = replacement
    else:
        doc = replacement
    problems = check_document(doc, known_operators=OPS)
    check_warnings(doc)
    assert all(p.path == "" or p.path.startswith("/") for p in problems)
    if not problems:
        build_config(doc, ".", None)  # whatever validates must also build
