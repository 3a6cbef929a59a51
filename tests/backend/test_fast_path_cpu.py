"""The fast path of ``run()`` (inputs already in the last plan's form) and the executor's lean loop, on
the CPU: same results, same reports and same errors as the general path."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.runtime import executor
from tests.conftest import assert_close

CHAIN = {
    "outputs": ["y"],
    "pipeline": [
        {"name": "scale", "id": "s0", "inputs": ["x"], "outputs": ["t"], "attrs": {"factor": 2.0}},
        {"name": "relu", "id": "s1", "inputs": ["t"], "outputs": ["u"]},
        {"name": "add", "id": "s2", "inputs": ["u", "x"], "outputs": ["y"]},
    ],
}


def reference(x):
    return np.maximum(2.0 * x, 0.0) + x


@pl.operator("test_fast_fails_on_negative_first", inputs=["x"], outputs=["y"], shapes={"y": "x"})
def fails_on_negative_first(x, y):
    if x.flat[0] < 0:
        raise RuntimeError("negative first element")
    np.copyto(y, x)


def spy_general_path(monkeypatch) -> list:
    """Count the runs that go through the general import (the fast path skips it)."""
    calls = []
    original = executor.signature_of

    def counting(backend, graph, args):
        calls.append(1)
        return original(backend, graph, args)

    monkeypatch.setattr("pipelink.pipeline.signature_of", counting)
    return calls


def test_second_run_of_the_same_signature_takes_the_fast_path(monkeypatch):
    general = spy_general_path(monkeypatch)
    rng = np.random.default_rng(1)
    with pl.load(CHAIN, device="cpu") as pipe:
        for i in range(5):
            x = rng.standard_normal((7, 33)).astype(np.float32)
            out = pipe.run(x=x)["y"]
            assert_close(np.asarray(out), reference(x.astype(np.float64)), "float32", f"run {i}")
        assert len(general) == 1, "only the first run needs the general import"
        report = pipe.last_report
        assert list(report.stages) == ["s0", "s1", "s2"]
        assert all(s.status == "ok" and s.time_s >= 0 for s in report.stages.values())
        assert report.ok and not report.new_signature


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda x: x.astype(np.float64), id="another dtype"),
        pytest.param(lambda x: x[:, :16], id="another shape"),
        pytest.param(lambda x: np.asfortranarray(x), id="not contiguous"),
        pytest.param(lambda x: x.tolist(), id="a list"),
    ],
)
def test_inputs_of_another_form_take_the_general_path(monkeypatch, make):
    general = spy_general_path(monkeypatch)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 32)).astype(np.float32)
    with pl.load(CHAIN, device="cpu") as pipe:
        pipe.run(x=x)
        other = make(rng.standard_normal((6, 32)).astype(np.float32))
        out = np.asarray(pipe.run(x=other)["y"])
        assert len(general) == 2
        assert_close(out, reference(np.asarray(other, dtype=np.float64)), str(out.dtype), "fallback")


def test_fast_path_still_names_wrong_inputs():
    x = np.ones((4, 4), np.float32)
    with pl.load(CHAIN, device="cpu") as pipe:
        pipe.run(x=x)
        with pytest.raises(pl.InvalidArgumentError, match="unexpected input 'z'"):
            pipe.run(x=x, z=x)
        with pytest.raises(pl.InvalidArgumentError, match="missing input 'x'"):
            pipe.run(z=x)


def test_a_failing_stage_of_a_lean_plan_is_reported_and_raised():
    doc = {
        "outputs": ["y"],
        "pipeline": [
            {"name": "relu", "id": "first", "inputs": ["x"], "outputs": ["a"]},
            {"name": "test_fast_fails_on_negative_first", "id": "picky", "inputs": ["x"], "outputs": ["b"]},
            {"name": "add", "id": "last", "inputs": ["a", "b"], "outputs": ["y"]},
        ],
    }
    with pl.load(doc, device="cpu", checked=False) as pipe:  # checked plans are never lean
        good = np.ones(8, np.float32)
        np.testing.assert_array_equal(np.asarray(pipe.run(x=good)["y"]), 2 * good)
        plan = pipe._last_plan  # noqa: SLF001 - the test checks which loop ran
        assert plan.lean
        bad = -good
        with pytest.raises(pl.ModuleCrashError, match="stage 'picky'.*negative first element") as info:
            pipe.run(x=bad)
        assert info.value.context["stage"] == "picky"
        stages = pipe.last_report.stages
        assert [(s.stage, s.status) for s in stages.values()] == [("first", "ok"), ("picky", "failed")]
        assert stages["picky"].error is info.value
        # The pipeline keeps working after the failure.
        np.testing.assert_array_equal(np.asarray(pipe.run(x=good)["y"]), 2 * good)


def test_plans_with_policies_are_not_lean():
    doc = {
        "outputs": ["y"],
        "pipeline": [
            {"name": "relu", "id": "a", "inputs": ["x"], "outputs": ["t"], "on_error": "identity"},
            {"name": "relu", "id": "b", "inputs": ["t"], "outputs": ["y"]},
        ],
    }
    with pl.load(doc, device="cpu", checked=False) as pipe:  # checked plans are never lean
        pipe.run(x=np.ones(3, np.float32))
        assert not pipe._last_plan.lean  # noqa: SLF001
    with pl.load(CHAIN, device="cpu", checked=False) as pipe:
        pipe.run(x=np.ones(3, np.float32))
        assert pipe._last_plan.lean  # noqa: SLF001


def test_run_report_builds_stage_reports_once():
    with pl.load(CHAIN, device="cpu") as pipe:
        pipe.run(x=np.ones(3, np.float32))
        report = pipe.last_report
        first = report.stages
        assert report.stages is first
        assert report.to_dict()["stages"][0]["stage"] == "s0"
        assert "s2" in repr(report)
