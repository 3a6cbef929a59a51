"""Other people's streams and graphs on the GPU (docs/interop.md, issue 17): run(stream=...) with every kind
of stream, run(out=...) into PyTorch buffers, runs captured inside torch.cuda.graph with both allocators,
the features a capture refuses (with the capture left intact), and pl.torch.as_op on CUDA. Every result is
compared with PyTorch on freshly drawn inputs; output buffers are poisoned (NaN) first."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("PyTorch has no CUDA device here", allow_module_level=True)

F = torch.nn.functional
_names = itertools.count()

CHAIN = {
    "inputs": {"x": {"shape": ["R", "C"], "dtype": "float32"}},
    "outputs": ["y"],
    "pipeline": [
        {"name": "relu", "id": "a", "inputs": ["x"], "outputs": ["h"]},
        {"name": "gelu", "id": "b", "inputs": ["h"], "outputs": ["y"]},
    ],
}
# A side stream (stream_affinity "new"): it must fork from the run's stream and join back into it.
FORKED = {
    "inputs": {"x": {"shape": ["R", "C"], "dtype": "float32"}},
    "outputs": ["y", "z"],
    "pipeline": [
        {"name": "relu", "id": "a", "inputs": ["x"], "outputs": ["h"]},
        {
            "name": "gelu",
            "id": "b",
            "inputs": ["x"],
            "outputs": ["z"],
            "constraints": {"stream_affinity": "new"},
        },
        {"name": "add", "id": "c", "inputs": ["h", "z"], "outputs": ["y"]},
    ],
}
# cuBLASLt: a handle and a workspace per stream, made on the first call on a stream.
MLP = {
    "inputs": {
        "x": {"shape": ["T", 64], "dtype": "float32"},
        "w1": {"shape": [64, 256], "dtype": "float32"},
        "b1": {"shape": [256], "dtype": "float32"},
        "w2": {"shape": [256, 64], "dtype": "float32"},
        "b2": {"shape": [64], "dtype": "float32"},
    },
    "outputs": ["y"],
    "pipeline": [
        {
            "name": "gemm",
            "id": "fc1",
            "inputs": ["x", "w1", "b1"],
            "outputs": ["u"],
            "attrs": {"activation": "gelu"},
        },
        {"name": "gemm", "id": "fc2", "inputs": ["u", "w2", "b2", "x"], "outputs": ["y"]},
    ],
}


def chain_ref(x):
    return F.gelu(x.relu())


def forked_ref(x):
    z = F.gelu(x)
    return x.relu() + z, z


def mlp_ref(x, w1, b1, w2, b2):
    return F.gelu(x @ w1 + b1) @ w2 + b2 + x


def nan_like(t):
    return torch.full_like(t, float("nan"))


def close(got, want, tol=1e-5):
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def as_torch(t):
    return torch.from_dlpack(t)


@pytest.fixture(params=["async", "legacy"])
def allocator(request):
    before = pl.memory.get_allocator()
    pl.memory.set_allocator(request.param)
    yield request.param
    pl.memory.set_allocator(before)


class _ProtocolStream:
    """A stream of another library, seen only through the CUDA stream protocol."""

    def __init__(self, stream):
        self.stream = stream

    def __cuda_stream__(self):
        return (0, self.stream.cuda_stream)


def _streams():
    yield "torch.cuda.Stream", lambda s: s
    yield "raw handle", lambda s: s.cuda_stream
    yield "__cuda_stream__", _ProtocolStream
    try:
        import cupy
    except ImportError:
        return
    if hasattr(cupy.cuda.ExternalStream, "__cuda_stream__"):
        yield "cupy", lambda s: cupy.cuda.ExternalStream(s.cuda_stream)


# -- run(stream=...) ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "make"), list(_streams()), ids=[k for k, _ in _streams()])
def test_a_callers_stream_of_every_kind_orders_the_run_after_its_work(kind, make):
    """x is written on s after a long sleep: a run on any other stream without ordering reads it stale."""
    s = torch.cuda.Stream()
    src = torch.randn(512, 1024, device="cuda")
    x = torch.zeros_like(src)
    torch.cuda.synchronize()
    with pl.load(CHAIN, device="cuda:0") as pipe:
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)
            x.copy_(src)
        y = pipe.run(x=x, stream=make(s))["y"]
        s.synchronize()
        close(as_torch(y), chain_ref(src))


def test_a_cuda_core_stream_is_used_as_it_is():
    from cuda.core import Device

    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    x = torch.randn(64, 256, device="cuda")
    torch.cuda.synchronize()
    with pl.load(CHAIN, device="cuda:0") as pipe:
        y = pipe.run(x=x, stream=stream)["y"]
        stream.sync()
        close(as_torch(y), chain_ref(x))


def test_by_default_a_run_with_torch_inputs_goes_to_torchs_current_stream():
    """Proof by capture: only work queued on the capturing stream itself is recorded into the graph."""
    x = torch.randn(32, 128, device="cuda")
    y = torch.empty_like(x)
    with pl.load(CHAIN, device="cuda:0") as pipe:
        pipe.run(x=x, out={"y": y})  # warm-up
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            pipe.run(x=x, out={"y": y})  # no stream=: PyTorch's current stream is the capture stream
        x.copy_(torch.randn_like(x))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        close(y, chain_ref(x))


def test_side_streams_fork_from_the_callers_stream_and_join_back():
    s = torch.cuda.Stream()
    src = torch.randn(256, 1024, device="cuda")
    x = torch.zeros_like(src)
    torch.cuda.synchronize()
    with pl.load(FORKED, device="cuda:0") as pipe, torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)
        x.copy_(src)
        outs = pipe.run(x=x)
        y, z = as_torch(outs["y"]), as_torch(outs["z"])
        keep = y.clone(), z.clone()  # on s: correct only if the side stream joined back into s
    s.synchronize()
    want_y, want_z = forked_ref(src)
    close(keep[0], want_y)
    close(keep[1], want_z)


@pytest.mark.parametrize("stream", ["s", -1, 1.5, object()])
def test_a_stream_that_is_no_cuda_stream_is_refused(stream):
    with (
        pl.load(CHAIN, device="cuda:0") as pipe,
        pytest.raises(pl.InvalidArgumentError, match="stream= must be"),
    ):
        pipe.run(x=torch.randn(4, 4, device="cuda"), stream=stream)


def test_a_stream_protocol_of_another_version_is_refused():
    class Future:
        def __cuda_stream__(self):
            return (1, 0)

    with pl.load(CHAIN, device="cuda:0") as pipe, pytest.raises(pl.InvalidArgumentError, match="version 1"):
        pipe.run(x=torch.randn(4, 4, device="cuda"), stream=Future())


def test_runs_of_one_plan_on_two_streams_are_ordered_through_the_arena():
    """Run 1 on a slow stream, run 2 on another: run 2 must not overwrite the shared intermediates early."""
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    x1, x2 = torch.randn(1024, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    with pl.load(CHAIN, device="cuda:0") as pipe:
        with torch.cuda.stream(s1):
            torch.cuda._sleep(50_000_000)
            y1 = pipe.run(x=x1)["y"]
        with torch.cuda.stream(s2):
            y2 = pipe.run(x=x2)["y"]
        torch.cuda.synchronize()
        close(as_torch(y1), chain_ref(x1))
        close(as_torch(y2), chain_ref(x2))


# -- run(out=...) ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_out_buffers_are_written_in_place(cuda_graph):
    with pl.load(FORKED, device="cuda:0", cuda_graph=cuda_graph) as pipe:
        for _ in range(3):  # eager, capture, replay
            x = torch.randn(96, 300, device="cuda")
            y, z = nan_like(x), nan_like(x)
            outs = pipe.run(x=x, out={"y": y, "z": z})
            torch.cuda.synchronize()
            want_y, want_z = forked_ref(x)
            close(y, want_y)
            close(z, want_z)
            assert outs["y"].ptr == y.data_ptr() and outs["z"].ptr == z.data_ptr()


def test_nothing_is_allocated_for_outputs_in_out(monkeypatch):
    x = torch.randn(64, 64, device="cuda")
    y = nan_like(x)
    with pl.load(CHAIN, device="cuda:0") as pipe:
        pipe.run(x=x, out={"y": y})
        backend = get_backend("cuda:0")

        def no_allocation(*args, **kwargs):
            raise AssertionError("run(out=...) allocated an output")

        monkeypatch.setattr(backend, "empty", no_allocation)
        x2 = torch.randn_like(x)
        pipe.run(x=x2, out={"y": y})
        monkeypatch.undo()
        torch.cuda.synchronize()
        close(y, chain_ref(x2))


def test_out_accepts_pl_tensors():
    x = torch.randn(16, 32, device="cuda")
    y = pl.empty((16, 32), "float32", device="cuda:0")
    as_torch(y).fill_(float("nan"))
    with pl.load(CHAIN, device="cuda:0") as pipe:
        pipe.run(x=x, out={"y": y})
        torch.cuda.synchronize()
        close(as_torch(y), chain_ref(x))


@pytest.mark.parametrize(
    ("make", "error", "text"),
    [
        (lambda x: torch.empty(16, 32), pl.InvalidArgumentError, "out['y'] is host memory"),
        (lambda x: torch.empty(16, 33, device="cuda"), pl.ShapeMismatchError, "has shape [16, 33]"),
        (lambda x: torch.empty(16, 32, device="cuda", dtype=torch.float16), pl.DTypeMismatchError, "float16"),
        (lambda x: torch.empty(32, 16, device="cuda").T, pl.InvalidArgumentError, "not contiguous"),
        (lambda x: x, pl.InvalidArgumentError, "overlaps input 'x'"),
    ],
    ids=["host", "shape", "dtype", "strided", "overlap"],
)
def test_a_wrong_out_buffer_is_refused(make, error, text):
    x = torch.randn(16, 32, device="cuda")
    keep = x.clone()
    with pl.load(CHAIN, device="cuda:0") as pipe, pytest.raises(error) as e:
        pipe.run(x=x, out={"y": make(x)})
    assert text in e.value.message
    close(x, keep)


# -- runs inside someone else's CUDA graph -----------------------------------------------------------


def _warm_then_capture(pipe, feed, out):
    """PyTorch's recipe: warm up on a side stream, then capture; returns the graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        pipe.run(feed, out=out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pipe.run(feed, out=out)
    return g


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager-pipeline", "graph-pipeline"])
@pytest.mark.parametrize("config", ["chain", "forked", "mlp"])
def test_a_run_captured_in_torch_cuda_graph_replays_correctly(allocator, cuda_graph, config):
    """The issue's repro (relu -> gelu inside torch.cuda.graph), a side stream and cuBLASLt, with both
    allocators; the replay after new inputs must give the new result."""
    doc = {"chain": CHAIN, "forked": FORKED, "mlp": MLP}[config]
    with pl.load(doc, device="cuda:0", cuda_graph=cuda_graph) as pipe:
        if config == "mlp":
            feed = dict(zip(("x", "w1", "b1", "w2", "b2"), _mlp_feed(), strict=True))
            out = {"y": torch.empty(48, 64, device="cuda")}
        else:
            feed = {"x": torch.randn(80, 200, device="cuda")}
            out = {n: torch.empty(80, 200, device="cuda") for n in pipe.outputs}
        g = _warm_then_capture(pipe, feed, out)
        for _ in range(2):
            for name, t in feed.items():
                t.copy_(torch.randn_like(t) / (1 if name == "x" else 8))
            for t in out.values():
                t.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            if config == "chain":
                close(out["y"], chain_ref(feed["x"]))
            elif config == "forked":
                want_y, want_z = forked_ref(feed["x"])
                close(out["y"], want_y)
                close(out["z"], want_z)
            else:
                close(out["y"], mlp_ref(**feed), tol=3e-3)  # tf32 GEMMs


def _refusals():
    x = lambda: torch.randn(8, 16, device="cuda")  # noqa: E731
    yield "no out", CHAIN, {}, lambda p: p.run(x=x()), "has no out= buffer"
    yield "host input", CHAIN, {}, lambda p: p.run(x=np.ones((8, 16), np.float32), out=_y()), "is host data"
    yield "profile", CHAIN, {}, lambda p: p.run(x=x(), out=_y(), profile=True), "profile=True"
    yield "checked", CHAIN, {"checked": True}, lambda p: p.run(x=x(), out=_y()), "checked mode"
    yield (
        "first run",
        CHAIN,
        {},
        lambda p: p.run(x=torch.randn(9, 16, device="cuda"), out=_y(9)),
        "run it once",
    )
    skip = {**CHAIN, "pipeline": [{**CHAIN["pipeline"][0], "on_error": "skip"}, CHAIN["pipeline"][1]]}
    yield "policy", skip, {}, lambda p: p.run(x=x(), out=_y()), "on_error 'skip'"
    finite = {**CHAIN, "pipeline": [{**CHAIN["pipeline"][0], "constraints": {"check_finite": True}}]}
    finite["pipeline"].append(CHAIN["pipeline"][1])
    yield "check_finite", finite, {}, lambda p: p.run(x=x(), out=_y()), "check_finite"


def _y(rows=8):
    return {"y": torch.empty(rows, 16, device="cuda")}


@pytest.mark.parametrize(
    ("what", "doc", "load", "call", "text"), list(_refusals()), ids=[r[0] for r in _refusals()]
)
def test_what_would_break_a_capture_is_refused_and_the_capture_stays_intact(what, doc, load, call, text):
    with pl.load(doc, device="cuda:0", **load) as pipe:
        if what != "checked" and what != "policy" and what != "check_finite":
            pipe.run(x=torch.randn(8, 16, device="cuda"), out=_y())  # warmed: only the named feature is wrong
        else:
            pipe.run(x=torch.randn(8, 16, device="cuda"))
        torch.cuda.synchronize()
        a = torch.randn(8, 16, device="cuda")
        b = torch.empty_like(a)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            with pytest.raises(pl.InvalidArgumentError) as e:
                call(pipe)
            b.copy_(a * 2)  # the capture goes on after the refusal
        assert text in e.value.message and "the capture is intact" in e.value.message
        a.copy_(torch.randn_like(a))
        g.replay()
        torch.cuda.synchronize()
        close(b, a * 2)


# -- pin_memory inputs: host-mapped, read in place -----------------------------------------------------

PINNED = {
    "inputs": {"x": {"shape": ["N"], "dtype": "float32", "pin_memory": True}},
    "pipeline": [{"name": "scale", "inputs": ["x"], "outputs": ["y"], "attrs": {"factor": 3.0}}],
}


def test_a_pin_memory_input_is_a_host_mapped_buffer_read_in_place():
    """No device block is taken for the input: the kernel reads the mapped host buffer."""
    from cuda.bindings import driver

    rng = np.random.default_rng()
    with pl.load(PINNED, device="cuda:0") as pipe:
        memory = get_backend("cuda:0").memory
        for _ in range(4):
            x = rng.standard_normal(1000).astype(np.float32)
            got = pipe.run(x=x)["y"].numpy()
            np.testing.assert_allclose(got, 3 * x, rtol=1e-6)
        buffers = memory._pinned_inputs["x"]
        assert buffers, "the mapped buffers of 'x' came back to its free list"
        kind = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
        err, memtype = driver.cuPointerGetAttribute(kind, buffers[0].device)
        assert int(err) == 0 and int(memtype) == int(driver.CUmemorytype.CU_MEMORYTYPE_HOST)


def test_a_later_run_never_overwrites_the_mapped_input_an_earlier_run_still_reads():
    """Run 1 waits behind a long sleep on s; run 2's host copy must go to another buffer."""
    rng = np.random.default_rng()
    s = torch.cuda.Stream()
    with pl.load(PINNED, device="cuda:0") as pipe:
        pipe.run(x=np.ones(1 << 20, np.float32))
        torch.cuda.synchronize()
        x1 = rng.standard_normal(1 << 20).astype(np.float32)
        x2 = rng.standard_normal(1 << 20).astype(np.float32)
        with torch.cuda.stream(s):
            torch.cuda._sleep(100_000_000)
            y1 = pipe.run(x=x1, stream=s)["y"]
        y2 = pipe.run(x=x2, stream=s)["y"]
        s.synchronize()
        np.testing.assert_allclose(y1.numpy(), 3 * x1, rtol=1e-6)
        np.testing.assert_allclose(y2.numpy(), 3 * x2, rtol=1e-6)


def test_the_blocks_of_the_outputs_are_made_at_plan_time():
    """A declared pipeline plans at load: its output's pool bin is cached before the first run."""
    pl.memory.clear_pool("cuda:0")
    doc = {**CHAIN, "inputs": {"x": {"shape": [64, 256], "dtype": "float32"}}}
    with pl.load(doc, device="cuda:0") as pipe:
        assert pl.memory.stats("cuda:0")["bins"].get(64 * 256 * 4, 0) >= 1
        x = torch.randn(64, 256, device="cuda")
        close(as_torch(pipe.run(x=x)["y"]), chain_ref(x))


# -- pl.torch.as_op on CUDA --------------------------------------------------------------------------


@pytest.fixture
def mlp_op():
    with pl.load(MLP, device="cuda:0") as pipe:
        yield pl.torch.as_op(pipe, f"pltest_cuda::mlp{next(_names)}")


def _mlp_feed(tokens=48):
    """x, w1, b1, w2, b2 (the order of the pipeline's inputs and of mlp_ref)."""
    return (
        torch.randn(tokens, 64, device="cuda"),
        torch.randn(64, 256, device="cuda") / 8,
        torch.randn(256, device="cuda") / 8,
        torch.randn(256, 64, device="cuda") / 16,
        torch.randn(64, device="cuda") / 8,
    )


def test_as_op_eager_on_cuda_matches_pytorch(mlp_op):
    feed = _mlp_feed()
    close(mlp_op(*feed), mlp_ref(*feed), tol=3e-3)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_as_op_inside_torch_compile_on_cuda(mlp_op, mode):
    def model(x, *weights):
        return mlp_op(torch.tanh(x), *weights) * 0.5

    compiled = torch.compile(model, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead records a CUDA graph after warm-up runs
        feed = _mlp_feed()
        close(compiled(*feed), model(*feed), tol=3e-3)


def test_as_op_captured_whole_in_a_torch_cuda_graph(mlp_op):
    x, *weights = _mlp_feed()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        mlp_op(x, *weights)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = mlp_op(torch.tanh(x), *weights) + 1.0
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        close(y, mlp_ref(torch.tanh(x), *weights) + 1.0, tol=3e-3)


def test_as_op_refuses_a_tensor_of_another_device(mlp_op):
    feed = [t.cpu() for t in _mlp_feed()]
    with pytest.raises(pl.InvalidArgumentError, match="input 'x' is on cpu, but pipeline"):
        mlp_op(*feed)


def test_as_op_opcheck_on_cuda(mlp_op):
    results = torch.library.opcheck(mlp_op, _mlp_feed(8))
    assert set(results.values()) == {"SUCCESS"}, results


def test_host_mapped_tensors_are_read_and_written_in_place():
    # pl.empty(device="cuda_host"): kernels use the host memory in place; Tensor.host() is the host's view.
    doc = {
        "name": "mapped",
        "inputs": {"x": {"shape": [1000], "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}],
    }
    x = pl.empty((1000,), pl.float32, device="cuda_host")
    y = pl.empty((1000,), pl.float32, device="cuda_host")
    assert x.device == "cuda:0" and isinstance(x.host(), np.ndarray)
    rng = np.random.default_rng(11)
    with pl.load(doc, device="cuda") as pipe:
        for _ in range(2):
            values = rng.standard_normal(1000).astype(np.float32)
            x.host()[:] = values
            y.host()[:] = np.nan
            got = pipe.run(x=x, out={"y": y})["y"]
            assert got.ptr == y.ptr
            torch.cuda.synchronize()
            np.testing.assert_array_equal(y.host(), np.maximum(values, 0))
