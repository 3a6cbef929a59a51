"""run()'s common case in C on a GPU (runtime/_hotpath.c): PyTorch or pl.Tensor inputs of a compiled
signature go from Pipeline.run to the core with no Python in between; results equal the Python executor's,
on PyTorch's current stream; outputs are fresh pool blocks; what C does not take (mixed inputs, a capture)
goes to the Python side. The CPU side: tests/native_core/test_hotpath.py.

Run on the H200: ``python -m pytest -q -p no:cacheprovider tests/native_core/test_hotpath_gpu.py``.
"""

from __future__ import annotations

import pytest

import pipelink as pl
from pipelink.runtime.native_path import NativeRunner
from tests.conftest import assert_close, run_in_threads

from .test_native_path_gpu import MLP, _mlp_feed

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.fixture
def python_runs(monkeypatch):
    calls = []
    original = NativeRunner.run

    def counted(self, given, stream, out, **kwargs):
        calls.append(1)
        return original(self, given, stream, out, **kwargs)

    monkeypatch.setattr(NativeRunner, "run", counted)
    return calls


def _host(outs: dict) -> dict:
    return {k: torch.from_dlpack(v).float().cpu().numpy() for k, v in outs.items()}


def test_torch_inputs_run_from_c_on_torchs_stream(python_runs):
    gen = torch.Generator(device="cuda").manual_seed(3)
    with pl.load(MLP, device="cuda", native=False) as ref, pl.load(MLP, device="cuda") as pipe:
        pipe.run(_mlp_feed(gen))
        assert pipe._native.fast is not None, pipe.load_report.hot_path_reason
        python_runs.clear()
        side = torch.cuda.Stream()
        for _ in range(3):
            feed = _mlp_feed(gen)
            want = _host(ref.run(feed))
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # the run goes to PyTorch's current stream: this one
                got = pipe.run(feed)
                first = torch.from_dlpack(got["y"])  # DLPack orders the consumer after the run
                copy = first.clone()
            side.synchronize()
            assert pipe.last_report.executor == "native"
            for k in want:
                assert_close(_host(got)[k], want[k], "float32", what=k)
            assert_close(copy.cpu().numpy(), want["y"], "float32", what="consumed on the run's stream")
        assert not python_runs, "a compiled signature with PyTorch inputs must run from C"


def test_pl_tensor_inputs_run_from_c_and_outputs_are_fresh(python_runs):
    gen = torch.Generator(device="cuda").manual_seed(4)
    with pl.load(MLP, device="cuda", native=False) as ref, pl.load(MLP, device="cuda") as pipe:
        feed = {k: pl.Tensor.from_dlpack(v) for k, v in _mlp_feed(gen).items()}
        want = _host(ref.run(feed))
        a = pipe.run(feed)
        python_runs.clear()
        b = pipe.run(feed)
        assert not python_runs, "pl.Tensor inputs of a compiled signature must run from C"
        assert a["y"].ptr != b["y"].ptr, "a later run must not overwrite a returned output"
        for outs in (a, b):
            for k in want:
                assert_close(outs[k].numpy().astype("float32"), want[k], "float32", what=k)


def test_mixed_inputs_and_captures_go_to_the_python_side(python_runs):
    gen = torch.Generator(device="cuda").manual_seed(5)
    with pl.load(MLP, device="cuda") as pipe:
        feed = _mlp_feed(gen)
        pipe.run(feed)
        python_runs.clear()
        mixed = dict(feed, x=pl.Tensor.from_dlpack(feed["x"]))
        pipe.run(mixed)
        assert python_runs, "mixed PyTorch and pl.Tensor inputs are the Python side's (it orders both)"
        python_runs.clear()
        specs = pipe.output_specs({n: (tuple(t.shape), "float32") for n, t in feed.items()})
        outs = {n: torch.empty(s, device="cuda") for n, (s, _) in specs.items()}
        pipe.run(feed, out=outs)  # warm for the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            pipe.run(feed, out=outs)
        graph.replay()
        torch.cuda.synchronize()
        assert python_runs, "runs inside a capture are the Python side's"


def test_sixteen_threads_run_from_c():
    gen = torch.Generator(device="cuda").manual_seed(6)
    with pl.load(MLP, device="cuda", native=False) as ref, pl.load(MLP, device="cuda") as pipe:
        feeds = [_mlp_feed(gen) for _ in range(16)]
        wants = [_host(ref.run(f)) for f in feeds]
        pipe.run(feeds[0])

        def work(k):
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(20):
                    got = pipe.run(feeds[k])
                stream.synchronize()
                assert_close(_host(got)["y"], wants[k]["y"], "float32", what=f"thread {k}")

        run_in_threads(work, 16)
