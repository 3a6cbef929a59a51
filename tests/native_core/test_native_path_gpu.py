"""The default hot path on a GPU host (runtime/native_path.py): AUTO hands CUDA plans of built-in kernels to
the native core and keeps the rest on the Python executor, with the reason. Outputs are poisoned (NaN)
first and compared with the Python executor's (``native=False``).

Run on the H200: ``python -m pytest -q -p no:cacheprovider tests/native_core/test_native_path_gpu.py``.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pipelink as pl
from benchmarks import cases
from pipelink.backends import get_backend
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

CHAIN = {
    "name": "chain",
    "outputs": ["y"],
    "pipeline": [
        {"name": "relu", "id": "a", "inputs": ["x"], "outputs": ["h"]},
        {"name": "gelu", "id": "b", "inputs": ["h"], "outputs": ["y"]},
    ],
}
MLP_CASE = cases.mlp(8, 256, "float32")  # the transformer MLP block: layer_norm, cuBLASLt products, gelu
MLP = MLP_CASE.doc


def _mlp_feed(gen) -> dict:
    return {
        name: torch.randn(shape, device="cuda", generator=gen) * scale + offset
        for name, (shape, scale, offset) in MLP_CASE.inputs.items()
    }


def _poisoned(pipe, feed) -> dict:
    specs = pipe.output_specs(
        {n: (tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in feed.items()}
    )
    return {
        n: torch.full(s, float("nan"), device="cuda", dtype=getattr(torch, d)) for n, (s, d) in specs.items()
    }


@pytest.mark.parametrize("doc", [CHAIN, MLP], ids=["chain", "mlp"])
def test_auto_runs_cuda_builtins_in_the_core_like_the_python_executor(doc):
    gen = torch.Generator(device="cuda").manual_seed(1)
    with pl.load(doc, device="cuda", native=False) as ref, pl.load(doc, device="cuda") as auto:
        assert auto.hot_path == "auto"
        for _ in range(3):
            feed = (
                _mlp_feed(gen) if doc is MLP else {"x": torch.randn(64, 1024, device="cuda", generator=gen)}
            )
            want = {k: torch.from_dlpack(v).float().cpu().numpy() for k, v in ref.run(feed).items()}
            got = {k: torch.from_dlpack(v).float().cpu().numpy() for k, v in auto.run(feed).items()}
            assert auto.last_report.executor == "native", auto.last_report.executor_reason
            outs = _poisoned(auto, feed)
            auto.run(feed, out=outs)  # into the caller's poisoned buffers, on PyTorch's current stream
            assert auto.last_report.executor == "native"
            torch.cuda.current_stream().synchronize()
            for k in want:
                assert_close(got[k], want[k], "float32", what=k)
                assert_close(outs[k].cpu().numpy(), want[k], "float32", what=f"out= {k}")
        assert list(auto.load_report.executors.values()) == ["native"]


def test_auto_leaves_host_inputs_profile_graphs_and_python_ops_to_the_python_executor():
    x = np.random.default_rng(2).standard_normal((64, 1024)).astype(np.float32)
    with pl.load(CHAIN, device="cuda") as pipe:
        y = pipe.run(x=x)["y"].numpy()  # NumPy into a CUDA pipeline: the Python executor imports it
        assert pipe.last_report.executor == "python"
        assert "'x' is not a contiguous tensor of cuda" in pipe.last_report.executor_reason
        xt = torch.from_numpy(x).cuda()
        pipe.run(x=xt, profile=True)
        assert "profile=True" in pipe.last_report.executor_reason
        assert set(pipe.last_report.stages) == {"a", "b"}
        strided = torch.from_numpy(np.ascontiguousarray(x.T)).cuda().T  # x's values, column-major
        assert_close(pipe.run(x=strided)["y"].numpy(), y, "float32", "strided")
        assert "not a contiguous tensor" in pipe.last_report.executor_reason
        assert_close(pipe.run(x=xt)["y"].numpy(), y, "float32", "device input")
        assert pipe.last_report.executor == "native"
    with pl.load(CHAIN, device="cuda", cuda_graph=True) as pipe:
        assert pipe.hot_path == "python" and "without static_outputs" in pipe.load_report.hot_path_reason

    @pl.operator("test_hot_path_cuda_copy", inputs=["x"], outputs=["y"], device="cuda")
    def copy(x, y, *, stream=None):
        get_backend("cuda").copy(y, x, stream=stream)

    doc = {"pipeline": [{"name": "test_hot_path_cuda_copy", "id": "dbl", "inputs": ["x"], "outputs": ["y"]}]}
    with pl.load(doc, device="cuda") as pipe:
        xt = torch.randn(32, device="cuda")
        got = torch.from_dlpack(pipe.run(x=xt)["y"])
        torch.testing.assert_close(got, xt)
        assert "stage 'dbl'" in pipe.last_report.executor_reason
        assert "Python operator" in pipe.last_report.executor_reason


@pytest.mark.parametrize("doc", [CHAIN, MLP], ids=["chain", "mlp"])
def test_graph_mode_with_static_outputs_replays_in_the_core(doc, monkeypatch):
    # AUTO + cuda_graph + static_outputs: the core captures and replays; every run writes and returns the
    # plan's own output buffers (the same tensors), from C after the first run, for rotating input sets.
    from pipelink.runtime.native_path import NativeRunner

    calls = []
    original = NativeRunner.run
    monkeypatch.setattr(NativeRunner, "run", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    gen = torch.Generator(device="cuda").manual_seed(11)
    feeds = [_mlp_feed(gen) if doc is MLP else {"x": torch.randn(64, 1024, device="cuda", generator=gen)}]
    feeds += [{k: torch.randn_like(v) * v.std() + v.mean() for k, v in feeds[0].items()} for _ in range(2)]
    with (
        pl.load(doc, device="cuda", native=False) as ref,
        pl.load(doc, device="cuda", cuda_graph=True, static_outputs=True) as pipe,
    ):
        assert pipe.hot_path == "auto", pipe.load_report.hot_path_reason
        wants = [{k: v.numpy() for k, v in ref.run(f).items()} for f in feeds]
        first = pipe.run(feeds[0])
        assert pipe.last_report.executor == "native", pipe.last_report.executor_reason
        for rounds in range(3):  # eager warm-up, capture, then replays of one graph per input set
            for feed, want in zip(feeds, wants, strict=True):
                for v in first.values():
                    torch.from_dlpack(v).fill_(float("nan"))
                got = pipe.run(feed)
                assert all(got[k] is first[k] for k in first), "static outputs: the same buffers every run"
                for k in want:
                    assert_close(got[k].numpy(), want[k], "float32", what=f"{k} (round {rounds})")
        assert len(calls) == 1, "after the first run of the signature, graph runs go from C to the core"


def test_auto_inside_a_torch_cuda_graph_records_the_warm_plan_of_the_core():
    x = torch.randn(80, 200, device="cuda")
    out = {"y": torch.empty(80, 200, device="cuda")}
    with pl.load(CHAIN, device="cuda") as pipe, pl.load(CHAIN, device="cuda", native=False) as ref:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            pipe.run(x=x, out=out)  # warm: the signature's plan is in the core
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            pipe.run(x=x, out=out)
        assert pipe.last_report.executor == "native"
        for _ in range(2):
            x.copy_(torch.randn_like(x))
            out["y"].fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            want = torch.from_dlpack(ref.run(x=x)["y"])
            torch.testing.assert_close(out["y"], want, rtol=1e-5, atol=1e-5)
        # Without out= inside a capture: the Python executor's refusal, and the capture goes on.
        a = torch.randn(8, 8, device="cuda")
        b = torch.empty_like(a)
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            with pytest.raises(pl.InvalidArgumentError, match="has no out= buffer"):
                pipe.run(x=x)
            b.copy_(a * 2)
        g2.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(b, a * 2)


def test_16_threads_on_their_own_streams_through_the_core():
    gen = torch.Generator(device="cuda").manual_seed(3)
    feeds = [_mlp_feed(gen) for _ in range(16)]
    with pl.load(MLP, device="cuda", native=False) as ref:
        wants = [torch.from_dlpack(ref.run(f)["y"]).clone() for f in feeds]
    torch.cuda.synchronize()
    errors: list = []
    with pl.load(MLP, device="cuda") as pipe:
        pipe.run(feeds[0])  # compiles the signature once
        barrier = threading.Barrier(16)

        def work(i: int) -> None:
            try:
                stream = torch.cuda.Stream()
                barrier.wait()
                with torch.cuda.stream(stream):
                    for _ in range(20):
                        out = _poisoned(pipe, feeds[i])
                        pipe.run(feeds[i], out=out)
                        stream.synchronize()
                        torch.testing.assert_close(out["y"], wants[i], rtol=3e-3, atol=3e-3)  # tf32
            except BaseException as e:  # noqa: BLE001 (reported by the main thread)
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert pipe.last_report.executor == "native"
    assert not errors, errors[:3]


def test_close_while_cuda_runs_go_through_the_core():
    x = torch.randn(64, 1024, device="cuda")
    pipe = pl.load(CHAIN, device="cuda")
    want = torch.from_dlpack(pipe.run(x=x)["y"]).clone()
    stop = threading.Event()
    unexpected: list = []

    def work() -> None:
        try:
            while not stop.is_set():
                y = torch.from_dlpack(pipe.run(x=x)["y"])
                torch.testing.assert_close(y, want)
        except pl.InvalidArgumentError as e:
            if "is closed" not in e.message:
                unexpected.append(e)
        except BaseException as e:  # noqa: BLE001
            unexpected.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    threading.Event().wait(0.2)
    pipe.close()
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not unexpected, unexpected[:3]
