"""View stages on CUDA (runtime/executor.plan_views): reshape-family and identity stages launch nothing,
their outputs alias their sources in the arena or the caller's input, eagerly and in CUDA graphs. Every
output is compared with the CPU pipeline on fresh random inputs, across runs whose inputs move."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.runtime.executor import VIEW_VARIANT
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

DOC = {
    "name": "views_cuda",
    "inputs": {"x": {"dtype": "float32"}},
    "outputs": ["y", "flat_out"],
    "pipeline": [
        {"name": "relu", "id": "act", "inputs": ["x"], "outputs": ["a"]},
        {"name": "reshape", "id": "flat", "inputs": ["a"], "outputs": ["b"], "attrs": {"shape": [0, -1]}},
        {"name": "unsqueeze", "id": "row", "inputs": ["b"], "outputs": ["c"], "attrs": {"axes": [0]}},
        {"name": "identity", "id": "same", "inputs": ["c"], "outputs": ["d"]},
        {"name": "silu", "id": "left", "inputs": ["d"], "outputs": ["l"]},
        {"name": "flatten", "id": "of_input", "inputs": ["x"], "outputs": ["xf"], "attrs": {"axis": 1}},
        {"name": "squeeze", "id": "sq", "inputs": ["c"], "outputs": ["s"], "attrs": {"axes": [0]}},
        {"name": "mul", "id": "right", "inputs": ["s", "xf"], "outputs": ["r"]},
        {"name": "add", "id": "join", "inputs": ["l", "r"], "outputs": ["y"]},
        {"name": "reshape", "id": "ret", "inputs": ["a"], "outputs": ["flat_out"], "attrs": {"shape": [-1]}},
    ],
}


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_views_match_the_cpu_and_share_memory(cuda_graph):
    cpu = pl.load(DOC, device="cpu")
    # native=False: the test inspects the Python executor's plan (its views); AUTO would hand eager runs
    # of these device tensors to the native core, whose runs have no such plan.
    pipe = pl.load(DOC, device="cuda", cuda_graph=cuda_graph, native=False)
    gen = torch.Generator(device="cuda").manual_seed(3)
    for i in range(6):  # new input memory each run: graphs per input place, then the copying graph
        x = torch.randn(8, 4, 32, device="cuda", generator=gen)
        y = torch.full((1, 8, 128), float("nan"), device="cuda")  # poisoned: a stage that wrote nothing fails
        got = pipe.run(x=x, out={"y": y})
        torch.cuda.synchronize()
        want = cpu.run(x=x.cpu().numpy())
        assert_close(y.cpu().numpy(), want["y"].numpy(), "float32", f"y, run {i}")
        np.testing.assert_array_equal(got["flat_out"].numpy(), want["flat_out"].numpy(), err_msg=f"run {i}")
        assert got["flat_out"].ptr != pipe._last_plan.static["a"].ptr  # noqa: SLF001 - fresh output
    plan = pipe._last_plan  # noqa: SLF001 - inspecting the compiled plan
    views = {s.stage.id for s in plan.steps if s.view}
    assert views == {"flat", "row", "same", "of_input", "sq"}
    assert all(pipe.load_report.variants[v] == VIEW_VARIANT for v in views)
    assert pipe.load_report.variants["ret"] != VIEW_VARIANT
    a = plan.static["a"].ptr
    assert plan.static["b"].ptr == plan.static["c"].ptr == plan.static["d"].ptr == plan.static["s"].ptr == a
    assert plan.input_views == (("xf", "x"),)
    assert plan.memory.view_bytes == 4 * 8 * 4 * 32 * 4
    if cuda_graph:
        assert pipe.last_report.graph_replay


def test_profile_shows_views_cost_nothing():
    pipe = pl.load(DOC, device="cuda")
    pipe.run(x=torch.randn(8, 4, 32, device="cuda"), profile=True)
    stages = pipe.last_report.stages
    assert stages["flat"].device_time_s == 0.0 and stages["flat"].time_s == 0.0
    assert stages["ret"].device_time_s is not None and stages["ret"].device_time_s > 0.0
