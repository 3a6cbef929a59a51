"""Reshape-family and identity stages run as views (no kernel, no copy) where aliasing is invisible, and
copy where it would be visible (runtime/executor.plan_views). Every value is compared with NumPy; memory
sharing is read from the plan's arena views and from what a recording Python operator receives."""

from __future__ import annotations

from math import erf

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.backends.base import Backend
from pipelink.graph.planner import BufferRequest, plan_memory
from pipelink.runtime.executor import VIEW_VARIANT

RNG = np.random.default_rng(7)


def _plan(pipe):
    return pipe._last_plan  # noqa: SLF001 - inspecting the compiled plan


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _chain(**stage_extra) -> dict:
    """relu -> reshape -> unsqueeze -> (two readers) -> add; the reshape carries ``stage_extra``."""
    return {
        "name": "views",
        "inputs": {"x": {"dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "relu", "id": "act", "inputs": ["x"], "outputs": ["a"]},
            {
                "name": "reshape",
                "id": "flat",
                "inputs": ["a"],
                "outputs": ["b"],
                "attrs": {"shape": [-1]},
                **stage_extra,
            },
            {"name": "unsqueeze", "id": "row", "inputs": ["b"], "outputs": ["c"], "attrs": {"axes": [0]}},
            {"name": "silu", "id": "left", "inputs": ["c"], "outputs": ["l"]},
            {"name": "gelu", "id": "right", "inputs": ["c"], "outputs": ["r"]},
            {"name": "add", "id": "join", "inputs": ["l", "r"], "outputs": ["y"]},
        ],
    }


def _expected_chain(x: np.ndarray) -> np.ndarray:
    c = np.maximum(x, 0).reshape(1, -1).astype(np.float64)
    silu = c / (1 + np.exp(-c))
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))(c)
    return silu + gelu


def test_chain_of_views_shares_the_source_buffer_and_feeds_two_readers():
    pipe = pl.load(_chain(), device="cpu")
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    y = pipe.run(x=x)["y"].numpy()
    np.testing.assert_allclose(y, _expected_chain(x), rtol=1e-5, atol=1e-6)
    plan = _plan(pipe)
    assert [s.variant for s in plan.steps if s.view] == [VIEW_VARIANT, VIEW_VARIANT]
    # No copy: the intermediates b and c are the bytes of a, under their own shapes.
    a, b, c = plan.static["a"], plan.static["b"], plan.static["c"]
    assert _address(a) == _address(b) == _address(c)
    assert b.shape == (24,) and c.shape == (1, 24)
    # The source lives until the views' last reader (join reads l and r, made from c by left and right).
    mem = plan.memory
    assert mem.views == {"b": "a", "c": "a"}
    assert mem.buffers["a"].last == max(mem.buffers["c"].last, mem.buffers["b"].last) == 4
    assert mem.view_bytes == 2 * 24 * 4
    assert pipe.load_report.variants["flat"] == VIEW_VARIANT == pipe.load_report.variants["row"]
    report = pipe.last_report.stages
    assert report["flat"].variant == VIEW_VARIANT and report["flat"].status == "ok"


def test_source_memory_is_not_reused_while_a_view_is_read():
    # a dies at its view's stage without the extension; d and e would then take its bytes while b and c
    # (views of a) are still to be read by the last stage.
    doc = {
        "inputs": {"x": {"dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "relu", "inputs": ["x"], "outputs": ["a"]},
            {"name": "reshape", "inputs": ["a"], "outputs": ["b"], "attrs": {"shape": [-1]}},
            {"name": "identity", "inputs": ["b"], "outputs": ["c"]},
            {"name": "silu", "inputs": ["x"], "outputs": ["d"]},
            {"name": "reshape", "inputs": ["d"], "outputs": ["e"], "attrs": {"shape": [-1]}},
            {"name": "sigmoid", "inputs": ["e"], "outputs": ["f"]},
            {"name": "mul", "inputs": ["c", "f"], "outputs": ["y"]},
        ],
    }
    pipe = pl.load(doc, device="cpu")
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    y = pipe.run(x=x)["y"].numpy()
    d = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
    want = np.maximum(x, 0).reshape(-1) * (1 / (1 + np.exp(-d.reshape(-1))))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    mem = _plan(pipe).memory
    assert mem.views == {"b": "a", "c": "a", "e": "d"}
    owners = [b for b in mem.buffers.values() if not b.alias_of]
    for i, p in enumerate(owners):
        for q in owners[i + 1 :]:
            assert not (p.overlaps_in_time(q) and p.overlaps_in_space(q)), (p, q)


def test_a_view_of_a_pipeline_input_reads_the_callers_memory_each_run():
    seen: list[int] = []

    @pl.operator("test_views_record_address", inputs=["x"], outputs=["y"], shapes={"y": "x"})
    def record(x, y, *, stream=None):
        seen.append(_address(x))
        np.multiply(x, 2, out=y)

    doc = {
        "inputs": {"x": {"dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "flatten", "inputs": ["x"], "outputs": ["flat"], "attrs": {"axis": 0}},
            {"name": "test_views_record_address", "inputs": ["flat"], "outputs": ["y"]},
        ],
    }
    pipe = pl.load(doc, device="cpu")
    for _ in range(2):  # a second run with new memory: the view is made per run, never stale
        x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
        y = pipe.run(x=x)["y"].numpy()
        np.testing.assert_array_equal(y, 2 * x.reshape(1, -1))
        assert seen[-1] == _address(x)
    plan = _plan(pipe)
    assert plan.input_views == (("flat", "x"),) and "flat" not in plan.memory.buffers


def test_outputs_stay_fresh_memory():
    # A reshape whose output is returned copies: run() never returns the input's or the arena's memory.
    doc = {
        "inputs": {"x": {"dtype": "float32"}},
        "outputs": ["y", "z"],
        "pipeline": [
            {"name": "reshape", "id": "ofx", "inputs": ["x"], "outputs": ["y"], "attrs": {"shape": [2, 3]}},
            {"name": "relu", "inputs": ["x"], "outputs": ["a"]},
            {"name": "identity", "id": "of_inner", "inputs": ["a"], "outputs": ["z"]},
        ],
    }
    pipe = pl.load(doc, device="cpu")
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    out = pipe.run(x=x)
    y, z = out["y"].numpy(), out["z"].numpy()
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(z, np.maximum(x, 0))
    assert not np.shares_memory(y, x)
    assert not np.shares_memory(z, _plan(pipe).static["a"])
    assert not any(s.view for s in _plan(pipe).steps)


@pytest.mark.parametrize(
    "extra",
    [
        {"on_error": "skip"},  # (identity would be refused: a flatten's output is not its input's shape)
        {"constraints": {"check_finite": True}},
        {"constraints": {"timeout_ms": 1000}},
    ],
    ids=["on_error", "check_finite", "timeout_ms"],
)
def test_a_stage_with_a_policy_copies(extra):
    pipe = pl.load(_chain(**extra), device="cpu")
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(pipe.run(x=x)["y"].numpy(), _expected_chain(x), rtol=1e-5, atol=1e-6)
    plan = _plan(pipe)
    assert pipe.load_report.variants["flat"] == "cpu:numpy"
    assert plan.memory.views == {"c": "b"}  # the next stage still views the copy
    assert _address(plan.static["b"]) != _address(plan.static["a"])


def test_checked_mode_and_several_streams_copy():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    checked = pl.load(_chain(), device="cpu", checked=True)
    np.testing.assert_allclose(checked.run(x=x)["y"].numpy(), _expected_chain(x), rtol=1e-5, atol=1e-6)
    assert not _plan(checked).memory.views
    doc = _chain()
    doc["pipeline"][3]["constraints"] = {"stream_affinity": {"stream_id": 3}}
    streams = pl.load(doc, device="cpu")
    np.testing.assert_allclose(streams.run(x=x)["y"].numpy(), _expected_chain(x), rtol=1e-5, atol=1e-6)
    assert not any(s.view for s in _plan(streams).steps)


def test_a_strided_input_is_copied_not_viewed():
    doc = {
        "inputs": {"x": {"dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "reshape", "id": "flat", "inputs": ["x"], "outputs": ["f"], "attrs": {"shape": [-1]}},
            {"name": "relu", "inputs": ["f"], "outputs": ["y"]},
        ],
    }
    pipe = pl.load(doc, device="cpu")
    x = RNG.standard_normal((4, 6)).astype(np.float32)[:, ::2]
    np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), np.maximum(x, 0).reshape(-1))
    assert not _plan(pipe).input_views and pipe.load_report.variants["flat"] == "cpu:numpy"
    contiguous = np.ascontiguousarray(x)
    np.testing.assert_array_equal(pipe.run(x=contiguous)["y"].numpy(), np.maximum(x, 0).reshape(-1))
    assert _plan(pipe).input_views == (("f", "x"),) and pipe.load_report.variants["flat"] == VIEW_VARIANT


def test_a_view_of_a_missing_tensor_is_skipped():
    doc = {
        "inputs": {"x": {"dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "sqrt", "inputs": ["x"], "outputs": ["a"], "on_error": "skip",
             "constraints": {"check_finite": True}},
            {"name": "reshape", "id": "flat", "inputs": ["a"], "outputs": ["b"], "attrs": {"shape": [-1]}},
            {"name": "relu", "inputs": ["b"], "outputs": ["y"]},
        ],
    }  # fmt: skip
    pipe = pl.load(doc, device="cpu")
    out = pipe.run(x=-np.ones((2, 2), np.float32))
    assert "y" not in out and pipe.last_report.missing_outputs == ["y"]
    assert pipe.last_report.stages["flat"].status == "skipped"


def test_profile_reports_a_view_as_costing_nothing():
    pipe = pl.load(_chain(), device="cpu")
    pipe.run(x=RNG.standard_normal((4, 6)).astype(np.float32), profile=True)
    rep = pipe.last_report.stages["flat"]
    assert rep.variant == VIEW_VARIANT and rep.time_s == 0.0


def test_planner_places_an_alias_at_its_source_and_extends_its_life():
    plan = plan_memory(
        [
            BufferRequest("a", 100, 0, 1),
            BufferRequest("v", 100, 1, 4, alias_of="a"),
            BufferRequest("b", 100, 2, 3),
        ]
    )
    a, v, b = (plan.buffers[n] for n in "avb")
    assert v.offset == a.offset and a.last == 4 and not a.overlaps_in_space(b)
    assert plan.views == {"v": "a"} and plan.view_bytes == 100
    with pytest.raises(ValueError, match="alias"):
        plan_memory([BufferRequest("a", 10, 1, 2), BufferRequest("v", 20, 1, 2, alias_of="a")])
    with pytest.raises(ValueError, match="alias"):
        plan_memory([BufferRequest("v", 20, 1, 2, alias_of="nowhere")])


def test_the_backend_contract_reshapes_a_tensor_in_place():
    # Backend.reshaped's default is what the CUDA backend uses for views of inputs: the same pointer.
    x = np.arange(6, dtype=np.float32)
    t = pl.Tensor.from_numpy(x)
    v = Backend.reshaped(get_backend("cpu"), t, (2, 3))
    assert v.ptr == t.ptr and v.shape == (2, 3) and v.strides == (3, 1) and v.dtype == t.dtype
    np.testing.assert_array_equal(v.numpy(), x.reshape(2, 3))
    a = get_backend("cpu").reshaped(x, (3, 2))
    assert np.shares_memory(a, x) and a.shape == (3, 2)
