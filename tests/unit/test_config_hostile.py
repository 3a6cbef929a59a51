"""Configs written by an adversary (or a broken generator): each ends as a PipeLinkError with a message
that says what to fix, in ``load`` and in ``validate`` alike, never as RecursionError, OSError,
MemoryError or a silently accepted value."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest

import pipelink as pl

GOOD = {
    "inputs": {"x": {"shape": [4, 8], "dtype": "float32"}},
    "pipeline": [{"name": "relu", "id": "a", "inputs": ["x"], "outputs": ["y"]}],
}


def with_stage(**changes):
    doc = copy.deepcopy(GOOD)
    doc["pipeline"][0].update(changes)
    return doc


def refused(source, code=pl.ErrorCode.PIPELINK_ERR_INVALID_CONFIG) -> str:
    """The load error's message, after checking validate reports the same code."""
    problems = pl.validate(source)
    assert problems and {p.code for p in problems} == {code}, problems
    with pytest.raises(pl.PipeLinkError) as info:
        pl.load(source, device="cpu")
    assert info.value.code == code
    return str(info.value)


def deep_dict(depth: int) -> dict:
    node: dict = {}
    root = node
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return root


@pytest.mark.parametrize("depth", [65, 5000, 200_000])
def test_deeply_nested_dict_is_a_config_error(depth):
    message = refused(with_stage(attrs={"deep": deep_dict(depth)}))
    assert "nested more than 64 levels" in message and "/pipeline/0/attrs/deep/a/a" in message


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_file_is_a_config_error(tmp_path, depth):
    path = tmp_path / "deep.json"
    path.write_text(
        '{"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"], "attrs": {"a": '
        + "[" * depth
        + "]" * depth
        + "}}]}"
    )
    assert "nested" in refused(path)


def test_duplicate_keys_are_an_error_naming_both_places(tmp_path):
    # Before: the last key silently won, so this ran silu.
    path = tmp_path / "dup.json"
    path.write_text(
        '{"pipeline": [\n  {"name": "relu",\n   "inputs": ["x"], "outputs": ["y"],\n   "name": "silu"}\n]}'
    )
    message = refused(path)
    assert "duplicate key 'name' in /pipeline/0" in message
    assert "first at line 2, column 4" in message and "line 4, column 4" in message


def test_duplicate_keys_in_different_objects_are_fine(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text(
        json.dumps(
            {
                "pipeline": [
                    {"name": "relu", "inputs": ["x"], "outputs": ["y"]},
                    {"name": "relu", "inputs": ["y"], "outputs": ["z"]},
                ]
            }
        )
    )
    assert pl.validate(path) == []


@pytest.mark.parametrize("text", ["1e309", "-1e400", "123" + "0" * 400])
def test_out_of_range_numbers_are_refused(tmp_path, text):
    path = tmp_path / "inf.json"
    path.write_text(
        '{"pipeline": [{"name": "scale", "inputs": ["x"], "outputs": ["y"], '
        f'"attrs": {{"factor": {text}}}}}]}}'
    )
    message = refused(path)
    assert "/pipeline/0/attrs/factor" in message and "finite" in message


def test_non_finite_float_in_a_dict_config_is_refused():
    assert "finite" in refused(with_stage(name="scale", attrs={"factor": float("inf")}))


@pytest.mark.parametrize(("value", "ok"), [(2**20, True), (2**21, False), (2**62, False)])
def test_memory_alignment_has_an_upper_bound(value, ok):
    doc = with_stage(constraints={"memory_alignment": value})
    if ok:
        assert pl.validate(doc) == []
    else:
        message = refused(doc)
        assert "must be <= 1048576" in message and "wastes arena memory" in message


@pytest.mark.parametrize("where", ["id", "name", "inputs", "outputs", "declared", "fallback"])
def test_names_ending_in_a_newline_are_refused(where):
    # Python's '$' matches before a final newline; the schema's patterns are ECMA-262, where it does not.
    doc = copy.deepcopy(GOOD)
    stage = doc["pipeline"][0]
    if where in ("id", "name"):
        stage[where] = stage.get(where, "relu") + "\n"
    elif where == "inputs":
        stage["inputs"] = ["x\n"]
    elif where == "outputs":
        stage["outputs"] = ["y\n"]
    elif where == "fallback":
        stage["on_error"] = {"fallback": "silu\n"}
    else:
        doc["inputs"] = {"x\n": {"shape": [4, 8], "dtype": "float32"}}
    assert re.search("is not (a )?valid", refused(doc))


@pytest.mark.parametrize("dim", [2**64, 2**53 + 1])
def test_dimensions_past_any_memory_are_refused_by_the_schema(dim):
    doc = copy.deepcopy(GOOD)
    doc["inputs"]["x"]["shape"] = [dim, 8]
    assert f"(got {dim})" in refused(doc)


def test_a_plan_past_the_device_memory_is_out_of_memory_before_allocating():
    doc = copy.deepcopy(GOOD)
    doc["inputs"]["x"]["shape"] = [2**40, 2**12]
    doc["pipeline"].append({"name": "relu", "inputs": ["y"], "outputs": ["z"]})  # y lives in the arena
    with pytest.raises(pl.OutOfMemoryError, match=r"arena allocation needs .* PiB .* bytes\), but cpu"):
        pl.load(doc, device="cpu")


def test_broadcast_to_a_petabyte_is_out_of_memory_at_run():
    import numpy as np

    pipe = pl.load(
        {
            "pipeline": [
                {"name": "add", "inputs": ["a", "b"], "outputs": ["c"]},
                {"name": "relu", "inputs": ["c"], "outputs": ["d"]},
            ]
        },
        device="cpu",
    )
    a = np.ones((2**25, 1), np.float32)
    with pytest.raises(pl.OutOfMemoryError, match="PiB"):
        pipe.run({"a": a, "b": a.reshape(1, -1)})


@pytest.mark.parametrize(
    "stage",
    [
        {"name": "expand", "attrs": {"shape": [2**40]}},  # 4 TiB from one float
        {"name": "as_strided", "attrs": {"shape": [2**62, 4], "strides": [0, 0]}},  # past any address space
    ],
)
def test_an_output_past_the_device_memory_is_out_of_memory_before_anything_runs(stage):
    # Pipeline outputs are made per run, outside the arena: the plan (made at load, the input being
    # declared) refuses them as it does the arena, not NumPy's MemoryError or its ValueError past the
    # address space.
    doc = {
        "inputs": {"x": {"shape": [1], "dtype": "float32"}},
        "pipeline": [{**stage, "inputs": ["x"], "outputs": ["y"]}],
    }
    with pytest.raises(pl.OutOfMemoryError, match=r"output 'y' .* but cpu"):
        pl.load(doc, device="cpu")
    del doc["inputs"]  # planned at the first run instead
    with (
        pl.load(doc, device="cpu") as pipe,
        pytest.raises(pl.OutOfMemoryError, match=r"output 'y' .* but cpu"),
    ):
        pipe.run(x=np.ones(1, np.float32))


def test_an_arena_and_outputs_that_fit_apart_but_not_together_are_out_of_memory_at_load():
    # A run holds its intermediates and its outputs at once: 0.6 of the host's memory each (a hostile
    # file's broadcast of one float) fit one by one, never together; nothing is allocated.
    from pipelink.limits import total_bytes

    n = int(total_bytes("cpu") * 0.6) // 4
    doc = {
        "inputs": {"x": {"shape": [1], "dtype": "float32"}},
        "pipeline": [
            {"name": "expand", "inputs": ["x"], "outputs": ["big"], "attrs": {"shape": [n]}},
            {"name": "relu", "inputs": ["big"], "outputs": ["y"]},
        ],
    }
    with pytest.raises(pl.OutOfMemoryError, match=r"the arena and the outputs of one run .* but cpu"):
        pl.load(doc, device="cpu")


def test_the_cpu_backend_turns_numpys_allocation_errors_into_out_of_memory():
    from pipelink.backends import get_backend
    from pipelink.dtypes import get_dtype

    with pytest.raises(pl.OutOfMemoryError, match="use smaller shapes"):
        get_backend("cpu").empty((2**62, 8), get_dtype("float32"))


def test_timeout_is_bounded():
    message = refused(with_stage(constraints={"timeout_ms": 1e308}))
    assert "timeout_ms must be <= 86400000" in message


@pytest.mark.parametrize(
    ("library", "says"),
    [
        ("a" * 5000 + ".so", "at most 4096 characters"),
        ("lib/" + "b" * 300 + ".so", "name of 303 bytes"),
        ("lib\x00.so", "NUL"),
    ],
)
def test_impossible_library_paths_are_config_errors_not_os_errors(library, says):
    assert says in refused(with_stage(library=library))
