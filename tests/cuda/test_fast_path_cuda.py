"""The fast path of ``run()`` on CUDA: device inputs matched against the last plan, one graph per place
of the inputs, the copying graph past the limit, and ordering after PyTorch's stream. Every output is
compared with the CPU reference (or the eager run) on fresh random inputs."""

from __future__ import annotations

import pytest

import pipelink as pl
import pipelink.pipeline as pipeline_module
from pipelink.runtime import graphs

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

CHAIN = {
    "name": "fast_chain",
    "outputs": ["y"],
    "pipeline": [
        {"name": "layer_norm", "id": "ln", "inputs": ["x", "gamma", "beta"], "outputs": ["h"]},
        {"name": "gelu", "id": "act", "inputs": ["h"], "outputs": ["a"]},
        {"name": "add", "id": "res", "inputs": ["a", "x"], "outputs": ["y"]},
    ],
}


def feed(gen: torch.Generator, rows: int = 64, cols: int = 1024) -> dict:
    return {
        "x": torch.randn(rows, cols, device="cuda", generator=gen),
        "gamma": torch.randn(cols, device="cuda", generator=gen),
        "beta": torch.randn(cols, device="cuda", generator=gen),
    }


def reference(f: dict) -> torch.Tensor:
    x = f["x"].double()
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), f["gamma"].double(), f["beta"].double(), 1e-5)
    return torch.nn.functional.gelu(h) + x


def check(out, f, what: str) -> None:
    got = torch.from_dlpack(out).double()
    torch.testing.assert_close(got, reference(f), rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_device_inputs_take_the_fast_path_and_stay_correct(monkeypatch, graph):
    general = []
    original = pipeline_module.signature_of
    monkeypatch.setattr(pipeline_module, "signature_of", lambda *a: general.append(1) or original(*a))
    gen = torch.Generator(device="cuda").manual_seed(1)
    sets = [feed(gen) for _ in range(3)]
    # native=False: the Python executor's own fast path is under test (AUTO runs these eagerly in the core).
    with pl.load(CHAIN, device="cuda", cuda_graph=graph, native=False) as pipe:
        for i in range(9):
            f = sets[i % 3]
            f["x"].normal_(generator=gen)  # fresh data at the same place, written on torch's stream
            out = pipe.run(f)["y"]
            check(out, f, f"run {i}")
        assert len(general) == 1, "only the first run needs the general import"
        plan = pipe._last_plan  # noqa: SLF001 - the test checks what was captured
        if graph:
            assert pipe.last_report.graph_replay
            assert len(plan.bound_graphs) == 3 and plan.graph is None, "one graph per place, no copies"
        assert list(pipe.last_report.stages) == ([] if graph else ["ln", "act", "res"])


def test_past_the_limit_moving_inputs_are_copied_and_weights_read_in_place(monkeypatch):
    monkeypatch.setattr(graphs, "MAX_BOUND_GRAPHS", 2)
    gen = torch.Generator(device="cuda").manual_seed(2)
    weights = feed(gen)
    xs = [torch.randn(64, 1024, device="cuda", generator=gen) for _ in range(6)]  # all alive: 6 places
    # native=False: the Python executor's graphs are under test (AUTO replays the core's graphs here,
    # one per place: tests/native_core/test_native_path_gpu.py).
    with pl.load(CHAIN, device="cuda", cuda_graph=True, static_outputs=True, native=False) as pipe:
        for i, x in enumerate(xs):
            f = dict(weights, x=x)
            out = pipe.run(f)["y"]
            check(out, f, f"run {i}")
        plan = pipe._last_plan  # noqa: SLF001
        assert len(plan.bound_graphs) == 2
        assert plan.graph is not None and plan.graph_bound == {"gamma", "beta"}


def test_static_outputs_are_the_graphs_own_buffers():
    gen = torch.Generator(device="cuda").manual_seed(3)
    f = feed(gen)
    with pl.load(CHAIN, device="cuda", cuda_graph=True, static_outputs=True) as pipe:
        pipe.run(f)
        first = pipe.run(f)["y"]
        second = pipe.run(f)["y"]
        assert first.ptr == second.ptr
        check(second, f, "static output")
    with pl.load(CHAIN, device="cuda", cuda_graph=True) as pipe:
        pipe.run(f)
        first = pipe.run(f)["y"]
        second = pipe.run(f)["y"]
        assert first.ptr != second.ptr, "without static_outputs every run returns fresh tensors"
        check(first, f, "fresh output")


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_runs_wait_for_work_pytorch_queued_on_the_input(graph):
    """Torch writes the input with a long kernel on its stream just before each run: the run must read the
    finished values, not the old ones."""
    gen = torch.Generator(device="cuda").manual_seed(4)
    f = feed(gen, rows=2048, cols=1024)
    big = torch.randn(4096, 4096, device="cuda", generator=gen)
    with pl.load(CHAIN, device="cuda", cuda_graph=graph) as pipe:
        pipe.run(f)
        for i in range(4):
            slow = big @ big  # keeps torch's stream busy
            f["x"].copy_(slow[:2048, :1024] * 1e-3 + i)
            out = pipe.run(f)["y"]
            check(out, f, f"run {i}")


def test_a_pl_tensor_output_feeds_the_next_run_on_the_fast_path():
    gen = torch.Generator(device="cuda").manual_seed(5)
    f = feed(gen)
    with pl.load(CHAIN, device="cuda", cuda_graph=True) as pipe:
        y = pipe.run(f)["y"]
        for i in range(4):
            x_ref = torch.from_dlpack(y).clone()  # ordered after our stream by the DLPack protocol
            out = pipe.run(dict(f, x=y))["y"]
            check(out, dict(f, x=x_ref), f"chained run {i}")
            y = out


def test_a_kernel_reading_device_values_on_the_host_keeps_graph_mode_eager():
    """layer_norm_v1 reads its eps tensor on the host before each launch: a graph would replay the eps
    of its capture, so the pipeline runs eagerly, says so, and follows every new eps."""
    doc = {
        "outputs": ["y"],
        "pipeline": [
            {
                "name": "layer_norm_v1",
                "inputs": ["x", "gamma", "beta", "eps"],
                "outputs": ["y", "mean", "rstd"],
            }
        ],
    }
    gen = torch.Generator(device="cuda").manual_seed(6)
    f = feed(gen)
    with pl.load(doc, device="cuda", cuda_graph=True) as pipe:
        for eps in (1e-5, 1.0, 10.0):
            e = torch.full((), eps, device="cuda")
            out = torch.from_dlpack(pipe.run(x=f["x"], gamma=f["gamma"], beta=f["beta"], eps=e)["y"])
            want = torch.nn.functional.layer_norm(f["x"], (1024,), f["gamma"], f["beta"], eps)
            torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
            assert not pipe.last_report.graph_replay
        assert any("layer_norm_v1" in w or "read device values" in w for w in pipe.load_report.warnings)
