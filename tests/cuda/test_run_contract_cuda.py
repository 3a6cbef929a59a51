"""The run-time contract on the CUDA backend: outputs that are inputs come back as fresh device tensors
(eager and graph mode), declared symbols hold across inputs, and checked mode (outputs poisoned on the
stage's stream, guard bytes read back after each stage) catches faulty stages while a correct pipeline
gives the eager result bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.runtime.checked import GUARD_BYTES

pytestmark = pytest.mark.gpu


def _chain() -> dict:
    return {
        "name": "chain",
        "outputs": ["y", "mean"],
        "pipeline": [
            {"name": "layer_norm", "id": "ln", "inputs": ["x", "gamma", "beta"], "outputs": ["h", "mean"]},
            {
                "name": "gelu",
                "id": "act",
                "inputs": ["h"],
                "outputs": ["a"],
                "constraints": {"stream_affinity": "new"},
            },
            {"name": "softmax", "id": "sm", "inputs": ["a"], "outputs": ["y"]},
        ],
    }


def _feed(rng, rows=67, cols=515):
    return {
        "x": rng.standard_normal((rows, cols)).astype(np.float32),
        "gamma": rng.standard_normal(cols).astype(np.float32),
        "beta": rng.standard_normal(cols).astype(np.float32),
    }


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_an_output_that_is_a_device_input_is_a_fresh_tensor(graph):
    cfg = {
        "inputs": {"x": {"shape": ["R", "C"], "dtype": "float32"}},
        "outputs": ["x", "y"],
        "pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}],
    }
    backend = get_backend("cuda")
    rng = np.random.default_rng(3)
    with pl.load(cfg, device="cuda", cuda_graph=graph) as pipe:
        for _ in range(3):  # eager, then (graph mode) capture and replay
            host = rng.standard_normal((5, 9)).astype(np.float32)
            x = backend.import_input(host)
            out = pipe.run(x=x)
            assert out["x"].is_cuda and out["x"].ptr != x.ptr, "returned the caller's own device tensor"
            np.testing.assert_array_equal(out["x"].numpy(), host)
            np.testing.assert_array_equal(out["y"].numpy(), np.maximum(host, 0))


def test_declared_symbols_hold_across_device_inputs():
    decl = {"shape": ["N", 4], "dtype": "float32"}
    stage = {"name": "add", "inputs": ["a", "b"], "outputs": ["y"]}
    cfg = {"inputs": {"a": decl, "b": decl}, "pipeline": [stage]}
    pipe = pl.load(cfg, device="cuda")
    with pipe, pytest.raises(pl.ShapeMismatchError, match="dimension N is 5, but 1 bound by input 'a'"):
        pipe.run(a=np.ones((1, 4), np.float32), b=np.ones((5, 4), np.float32))


def test_a_correct_pipeline_passes_checked_mode_with_the_eager_result():
    rng = np.random.default_rng(0)
    with pl.load(_chain(), device="cuda") as plain, pl.load(_chain(), device="cuda", checked=True) as checked:
        for _ in range(3):
            feed = _feed(rng)
            want = {k: v.numpy() for k, v in plain.run(feed).items()}
            got = {k: v.numpy() for k, v in checked.run(feed).items()}
            assert checked.last_report.ok
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        assert all(b.guard == GUARD_BYTES for b in checked.memory_plan.buffers.values())


def test_graph_mode_runs_eagerly_in_checked_mode():
    with pl.load(_chain(), device="cuda", cuda_graph=True, checked=True) as pipe:
        assert not pipe.graph_mode
        assert any("checked mode" in w for w in pipe.load_report.warnings)
        pipe.run(_feed(np.random.default_rng(1)))
        assert pipe.last_report.ok and not pipe.last_report.graph_replay


@pytest.fixture(scope="module")
def faulty_ops() -> None:
    """Two CUDA Python operators with the faults checked mode exists for (registered once, on a GPU)."""

    @pl.operator("test_checked_cuda_writes_nothing", inputs=["x"], outputs=["y"], device="cuda")
    def writes_nothing(x, y, *, stream=None):
        return None

    @pl.operator("test_checked_cuda_overruns", inputs=["x"], outputs=["y"], device="cuda")
    def overruns(x, y, *, stream=None):
        """Copies x into y and 4 more elements past y's end: a kernel with an off-by-4 bound."""
        backend = get_backend("cuda")
        wide = pl.Tensor(y.ptr, (y.size + 4,), y.dtype, y.device)
        ones = backend.import_input(np.ones(y.size + 4, y.dtype.numpy), stream=stream)
        backend.copy(wide, ones, stream=stream)


@pytest.mark.parametrize("returned", [False, True], ids=["arena buffer", "returned output"])
@pytest.mark.parametrize(
    "op, message",
    [
        ("test_checked_cuda_writes_nothing", "did not write output 't'"),
        ("test_checked_cuda_overruns", "wrote 16 bytes past output 't'"),
    ],
)
def test_checked_mode_catches_a_cuda_stage(faulty_ops, op, message, returned):
    stages = [{"name": op, "id": "bad", "inputs": ["x"], "outputs": ["t"]}]
    if not returned:
        stages.append({"name": "relu", "id": "r", "inputs": ["t"], "outputs": ["y"]})
    cfg = {"outputs": ["t"] if returned else ["y"], "pipeline": stages}
    with pl.load(cfg, device="cuda", checked=True) as pipe:
        with pytest.raises(pl.ModuleCrashError, match=message) as info:
            pipe.run(x=np.ones((3, 8), np.float32))
        assert info.value.context["stage"] == "bad"
        assert pipe.last_report.stages["bad"].status == "failed"
