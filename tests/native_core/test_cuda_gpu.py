"""The native core's CUDA path on a GPU host: CUDA plans compiled from configs, executed through the C API
(ctypes), compared with Python's run() of the same pipeline. Outputs are poisoned (NaN) first.

Run on the H200: ``python -m pytest -q -p no:cacheprovider tests/native_core/test_cuda_gpu.py``.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

import pipelink as pl
from benchmarks import cases
from pipelink.errors import ErrorCode
from pipelink.modules.build import build_module
from pipelink.modules.registry import OperatorRegistry
from pipelink.modules.services import PipeLinkTensor
from pipelink.native import open_runtime
from tests.conftest import assert_close

from .conftest import graph_cache_size

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

DEVICE_CPU, DEVICE_CUDA = 1, 2
DL_CODE = {"float32": 2, "bfloat16": 4}
T = 8  # tokens of the MLP block (the seed's service shape)
D = 1024


def _relu_gelu(dtype: str) -> dict:
    return {
        "name": "relu_gelu",
        "inputs": {"x": {"shape": [64, 1024], "dtype": dtype}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "relu", "id": "r", "inputs": ["x"], "outputs": ["h"]},
            {"name": "gelu", "id": "g", "inputs": ["h"], "outputs": ["y"]},
        ],
    }


def _views(dtype: str) -> dict:
    """A reshape the Python plan runs as a view of an intermediate (an arena tensor at its source's offset
    in the .plk, no stage) and one of the input (a copying stage in the .plk)."""
    return {
        "name": "views",
        "inputs": {"x": {"shape": [64, 1024], "dtype": dtype}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "relu", "id": "r", "inputs": ["x"], "outputs": ["h"]},
            {
                "name": "reshape",
                "id": "v",
                "inputs": ["h"],
                "outputs": ["hv"],
                "attrs": {"shape": [64, 16, 64]},
            },
            {"name": "gelu", "id": "g", "inputs": ["hv"], "outputs": ["gv"]},
            {
                "name": "reshape",
                "id": "xv",
                "inputs": ["x"],
                "outputs": ["xr"],
                "attrs": {"shape": [0, 16, -1]},
            },
            {"name": "add", "id": "a", "inputs": ["gv", "xr"], "outputs": ["y"]},
        ],
    }


def _bitcasts(dtype: str) -> dict:
    """An intermediate reinterpreted as an integer type of its width and back (two copies of its bytes
    between tensors of different dtypes in the .plk)."""
    ints = "int32" if dtype == "float32" else "int16"
    return {
        "name": "bitcasts",
        "inputs": {"x": {"shape": [64, 1024], "dtype": dtype}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "relu", "id": "r", "inputs": ["x"], "outputs": ["h"]},
            {"name": "bitcast", "id": "b", "inputs": ["h"], "outputs": ["hi"], "attrs": {"dtype": ints}},
            {"name": "bitcast", "id": "f", "inputs": ["hi"], "outputs": ["hf"], "attrs": {"dtype": dtype}},
            {"name": "gelu", "id": "g", "inputs": ["hf"], "outputs": ["y"]},
        ],
    }


_SMALL = {"relu_gelu": _relu_gelu, "views": _views, "bitcasts": _bitcasts}


def _case(name: str, dtype: str) -> tuple[dict, dict]:
    """(config, inputs: name -> (shape, scale, offset))."""
    if name in _SMALL:
        return _SMALL[name](dtype), {"x": ((64, 1024), 1.0, 0.0)}
    case = cases.layer_norm(64, D, dtype) if name == "layer_norm" else cases.mlp(T, D, dtype)
    return case.doc, case.inputs


def _inputs(spec: dict, dtype: str, seed: int) -> list:
    g = torch.Generator(device="cuda").manual_seed(seed)
    tdt = getattr(torch, dtype)
    return [
        (torch.randn(shape, generator=g, device="cuda") * scale + offset).to(tdt)
        for shape, scale, offset in spec.values()
    ]


class Core:
    """The C API through ctypes (which releases the GIL for each call)."""

    def __init__(self):
        self.lib = lib = open_runtime()  # sets PIPELINK_CUBLASLT to the wheel's cuBLASLt
        lib.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        args = [ctypes.c_void_p, ctypes.POINTER(PipeLinkTensor), ctypes.c_int32]
        lib.pipeLinkExecute.argtypes = args + args[1:]
        lib.pipeLinkExecuteAsync.argtypes = args + args[1:] + [ctypes.c_void_p]
        lib.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
        lib.pipeLinkFree.argtypes = [ctypes.c_void_p]
        lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
        assert lib.pipeLinkInitialize() == 0

    def load(self, path) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        assert self.lib.pipeLinkLoadPipeline(str(path).encode(), ctypes.byref(h)) == 0, self.message()
        return h

    def message(self) -> str:
        return self.lib.pipeLinkGetLastErrorMessage().decode()

    @staticmethod
    def tensors(items: list, keep: list, device_type: int = DEVICE_CUDA):
        """torch tensors (or (shape, dtype) for a NULL output) -> a PipeLinkTensor array."""
        out = (PipeLinkTensor * max(len(items), 1))()
        for t, item in zip(out, items, strict=False):
            is_tensor = torch.is_tensor(item)
            shape, dtype = (item.shape, str(item.dtype).removeprefix("torch.")) if is_tensor else item
            dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
            keep.append(dims)
            t.data = item.data_ptr() if is_tensor else None
            t.device.device_type, t.device.device_id = device_type, 0
            t.ndim, t.shape = len(shape), dims
            t.dtype.code, t.dtype.bits, t.dtype.lanes = DL_CODE[dtype], 32 if dtype == "float32" else 16, 1
        return out

    def execute(self, h, ins: list, outs: list, stream=None) -> int:
        keep: list = []
        i, o = self.tensors(ins, keep), self.tensors(outs, keep)
        if stream is None:
            return self.lib.pipeLinkExecute(h, i, len(ins), o, len(outs))
        return self.lib.pipeLinkExecuteAsync(h, i, len(ins), o, len(outs), stream)


@pytest.fixture(scope="module")
def core(runtime_lib):
    c = Core()
    yield c
    assert c.lib.pipeLinkFinalize() == 0


def _compiled(tmp_path, name: str, dtype: str):
    """(Python pipeline on cuda, plan path, input spec) of one case."""
    doc, spec = _case(name, dtype)
    config = tmp_path / f"{name}_{dtype}.json"
    config.write_text(json.dumps(doc))
    pipe = pl.load(config, device="cuda", native=False)  # the Python executor is the core's reference
    plan = pipe.save(tmp_path / f"{name}_{dtype}.plk")
    return pipe, plan, spec


def _python_run(pipe, spec: dict, ins: list) -> np.ndarray:
    (out,) = pipe.run(dict(zip(spec, ins, strict=True))).values()
    torch.cuda.synchronize()
    return np.asarray(out.numpy(), dtype=np.float32)


def _poisoned(ref: np.ndarray, dtype: str):
    return torch.full(ref.shape, float("nan"), dtype=getattr(torch, dtype), device="cuda")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["relu_gelu", "layer_norm", "mlp", "views", "bitcasts"])
def test_core_matches_python_run(core, tmp_path, name, dtype):
    pipe, plan, spec = _compiled(tmp_path, name, dtype)
    h = core.load(plan)
    try:
        ins = _inputs(spec, dtype, seed=1)
        ref = _python_run(pipe, spec, ins)
        # pipeLinkExecute: on the context's stream, returns when the output is ready.
        y = _poisoned(ref, dtype)
        torch.cuda.synchronize()
        assert core.execute(h, ins, [y]) == 0, core.message()
        assert_close(y.float().cpu().numpy(), ref, dtype, f"{name} Execute")
        # pipeLinkExecuteAsync on a PyTorch stream: ordered there, nothing waited for.
        y = _poisoned(ref, dtype)
        stream = torch.cuda.Stream()
        torch.cuda.synchronize()
        assert core.execute(h, ins, [y], stream=stream.cuda_stream) == 0, core.message()
        stream.synchronize()
        assert_close(y.float().cpu().numpy(), ref, dtype, f"{name} ExecuteAsync")
        # A NULL output: allocated on the device by the runtime, released by pipeLinkFree.
        keep: list = []
        outs = core.tensors([(ref.shape, dtype)], keep)
        i = core.tensors(ins, keep)
        assert core.lib.pipeLinkExecute(h, i, len(ins), outs, 1) == 0, core.message()
        assert outs[0].data and outs[0].device.device_type == DEVICE_CUDA
        view = torch.empty(ref.shape, dtype=getattr(torch, dtype), device="cuda")
        nbytes = view.numel() * view.element_size()
        torch.cuda.synchronize()
        _copy_device(view.data_ptr(), outs[0].data, nbytes)
        assert_close(view.float().cpu().numpy(), ref, dtype, f"{name} runtime-allocated output")
        assert core.lib.pipeLinkFree(outs[0].data) == 0, core.message()
        assert core.lib.pipeLinkFree(outs[0].data) == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    finally:
        assert core.lib.pipeLinkDestroyPipeline(h) == 0


def _copy_device(dst: int, src: int, nbytes: int) -> None:
    from cuda.bindings import driver

    (err,) = driver.cuMemcpyDtoD(dst, src, nbytes)
    assert int(err) == 0, err


def test_sixteen_threads_run_one_pipeline_each_on_its_stream(core, tmp_path):
    pipe, plan, spec = _compiled(tmp_path, "mlp", "float32")
    h = core.load(plan)
    work = []
    for k in range(16):
        ins = _inputs(spec, "float32", seed=100 + k)
        work.append((ins, _python_run(pipe, spec, ins)))
    torch.cuda.synchronize()
    failures: list[str] = []

    def worker(k: int) -> None:
        ins, ref = work[k]
        stream = torch.cuda.Stream()
        for run in range(20):
            y = _poisoned(ref, "float32")
            torch.cuda.current_stream().synchronize()  # the poison is written before the core reads
            rc = core.execute(h, ins, [y], stream=stream.cuda_stream)
            stream.synchronize()
            got = y.cpu().numpy()
            if rc != 0 or not np.allclose(got, ref, rtol=1e-4, atol=1e-4):
                failures.append(f"thread {k} run {run}: rc {rc} {core.message()}")
                return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert core.lib.pipeLinkDestroyPipeline(h) == 0
    assert not failures, failures[:4]


def test_bad_device_arguments_are_statuses(core, tmp_path):
    pipe, plan, spec = _compiled(tmp_path, "relu_gelu", "float32")
    h = core.load(plan)
    x = _inputs(spec, "float32", seed=3)[0]
    y = torch.empty_like(x)
    keep: list = []

    def run(ins, outs) -> int:
        return core.lib.pipeLinkExecute(h, ins, 1, outs, 1)

    host = torch.zeros(x.shape)
    assert run(core.tensors([host], keep, DEVICE_CPU), core.tensors([y], keep)) == 2
    assert "device memory" in core.message()
    assert run(core.tensors([host], keep), core.tensors([y], keep)) == 2  # a host pointer called CUDA
    assert "not memory of cuda:0" in core.message()
    ins = core.tensors([x], keep)
    ins[0].byte_offset = 4
    assert run(ins, core.tensors([y], keep)) == 2
    assert "aligned" in core.message()
    assert run(core.tensors([x[:32]], keep), core.tensors([y], keep)) == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH
    ins = core.tensors([x], keep)
    ins[0].device.device_id = 1
    assert run(ins, core.tensors([y], keep)) == 2
    assert run(core.tensors([x], keep), core.tensors([x], keep)) == 2  # the output overlaps the input
    assert core.lib.pipeLinkDestroyPipeline(h) == 0
    assert run(core.tensors([x], keep), core.tensors([y], keep)) == 2
    assert "not live" in core.message()


def test_execute_async_is_captured_in_a_torch_cuda_graph(core, tmp_path):
    pipe, plan, spec = _compiled(tmp_path, "mlp", "bfloat16")
    h = core.load(plan)
    ins = _inputs(spec, "bfloat16", seed=5)
    y = torch.empty((T, D), dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    # The warm-up every capture needs: an execution context exists, idle.
    assert core.execute(h, ins, [y], stream=side.cuda_stream) == 0, core.message()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assert core.execute(h, ins, [y], stream=torch.cuda.current_stream().cuda_stream) == 0, core.message()
    fresh = _inputs(spec, "bfloat16", seed=6)
    for t, v in zip(ins, fresh, strict=True):
        t.copy_(v)
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(y.float().cpu().numpy(), _python_run(pipe, spec, fresh), "bfloat16", "graph replay")
    assert core.lib.pipeLinkDestroyPipeline(h) == 0


def test_the_walkthroughs_cuda_module_runs_in_a_cuda_plan(core, tmp_path):
    # The seed's LayerNorm module (its CUDA entry point, built with nvcc) then a built-in relu: a native
    # call on the run's stream followed by an embedded kernel.
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    src = Path(__file__).resolve().parents[2] / "examples" / "layernorm_module" / "src"
    lib = build_module([src / "layernorm_kernel.cu", src / "layernorm.desc.h"], tmp_path / "lib" / "libln.so")
    rows, cols = 64, 1024
    doc = {
        "name": "ln_cuda_module",
        "inputs": {
            "input_tensor": {"shape": [rows, cols], "dtype": "float32"},
            "gamma_tensor": {"shape": [cols], "dtype": "float32"},
            "beta_tensor": {"shape": [cols], "dtype": "float32"},
            "eps_scalar": {"shape": [], "dtype": "float32"},
        },
        "outputs": ["norm_output", "mean_tensor", "rstd_tensor", "act"],
        "pipeline": [
            {
                "name": "layer_norm_v1",
                "library": str(lib),
                "inputs": ["input_tensor", "gamma_tensor", "beta_tensor", "eps_scalar"],
                "outputs": ["norm_output", "mean_tensor", "rstd_tensor"],
            },
            {"name": "relu", "inputs": ["norm_output"], "outputs": ["act"]},
        ],
    }
    config = tmp_path / "ln_cuda_module.json"
    config.write_text(json.dumps(doc))
    # A registry of its own: another test of this process may have loaded the example's module already.
    # native=False: the Python executor is the reference the core is compared with.
    pipe = pl.load(config, device="cuda", registry=OperatorRegistry(), native=False)
    h = core.load(pipe.save(tmp_path / "ln_cuda_module.plk"))
    g = torch.Generator(device="cuda").manual_seed(9)
    ins = [
        torch.randn((rows, cols), generator=g, device="cuda"),
        torch.randn((cols,), generator=g, device="cuda"),
        torch.randn((cols,), generator=g, device="cuda"),
        torch.tensor(1e-5, device="cuda"),
    ]
    ran = pipe.run(dict(zip(doc["inputs"], ins, strict=True)))
    refs = {k: np.asarray(v.numpy(), np.float32) for k, v in ran.items()}
    outs = [torch.full(refs[k].shape, float("nan"), device="cuda") for k in doc["outputs"]]
    torch.cuda.synchronize()
    assert core.execute(h, ins, outs) == 0, core.message()
    for name, out in zip(doc["outputs"], outs, strict=True):
        assert_close(out.cpu().numpy(), refs[name], "float32", f"core vs Python: {name}")
    assert core.lib.pipeLinkDestroyPipeline(h) == 0


@pytest.mark.parametrize("allocator", [0, 1], ids=["async", "legacy"])
def test_runtime_allocated_outputs_follow_the_allocator_choice(core, tmp_path, allocator):
    pipe, plan, spec = _compiled(tmp_path, "relu_gelu", "float32")
    h = core.load(plan)
    ins = _inputs(spec, "float32", seed=11)
    ref = _python_run(pipe, spec, ins)
    assert core.lib.pipeLinkSetMemoryAllocator(allocator) == 0
    try:
        keep: list = []
        outs = core.tensors([(ref.shape, "float32")], keep)
        assert core.lib.pipeLinkExecute(h, core.tensors(ins, keep), 1, outs, 1) == 0, core.message()
        view = torch.empty(ref.shape, device="cuda")
        _copy_device(view.data_ptr(), outs[0].data, view.numel() * 4)
        assert_close(view.cpu().numpy(), ref, "float32", f"allocator {allocator}")
        assert core.lib.pipeLinkFree(outs[0].data) == 0, core.message()
    finally:
        assert core.lib.pipeLinkSetMemoryAllocator(0) == 0
        assert core.lib.pipeLinkDestroyPipeline(h) == 0


@pytest.mark.parametrize("name", ["relu_gelu", "layer_norm", "mlp"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_run_through_the_core_matches_the_python_executor(runtime_lib, name, dtype):
    # pl.load(native=True): run() hands each signature's plan to the core (runtime/native_path.py).
    doc, spec = _case(name, dtype)
    with pl.load(doc, device="cuda", native=False) as ref, pl.load(doc, device="cuda", native=True) as nat:
        for seed in (1, 2):
            feed = dict(zip(spec, _inputs(spec, dtype, seed), strict=True))
            want = {k: torch.from_dlpack(v).float() for k, v in ref.run(feed).items()}
            got = {k: torch.from_dlpack(v).float() for k, v in nat.run(feed).items()}
            for k in want:
                assert_close(got[k].cpu().numpy(), want[k].cpu().numpy(), dtype, what=k)
            outs = {k: torch.full_like(v, float("nan")).to(getattr(torch, dtype)) for k, v in want.items()}
            nat.run(feed, out=outs)  # into the caller's buffers, on PyTorch's current stream
            torch.cuda.current_stream().synchronize()
            for k in want:
                assert_close(outs[k].float().cpu().numpy(), want[k].cpu().numpy(), dtype, what=k)


def _relu_chain(n: int = 20) -> dict:
    names = ["x"] + [f"h{i}" for i in range(1, n)] + ["y"]
    return {
        "name": "relu_chain",
        "inputs": {"x": {"shape": [64, 1024], "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "relu", "id": f"r{i}", "inputs": [names[i]], "outputs": [names[i + 1]]} for i in range(n)
        ],
    }


@pytest.mark.parametrize("name", ["mlp", "relu_chain"])
def test_cuda_graph_plans_replay_what_eager_plans_compute(core, tmp_path, name):
    # The plan's cuda_graph flag: each context runs eagerly once, then captures, then replays; a new
    # pointer set is a miss (re-captured), more than PLK_GRAPH_CACHE evict the least recently used. Same
    # results as the eager plan of the same pipeline, for every input set, through Execute and ExecuteAsync.
    if name == "mlp":
        doc, spec = _case("mlp", "float32")
    else:
        doc, spec = _relu_chain(), {"x": ((64, 1024), 1.0, 0.0)}
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps(doc))
    pipe = pl.load(config, device="cuda")
    eager = core.load(pipe.save(tmp_path / f"{name}_eager.plk", cuda_graph=False))
    graph = core.load(pipe.save(tmp_path / f"{name}_graph.plk", cuda_graph=True))
    stream = torch.cuda.Stream()
    try:
        cache = graph_cache_size()
        sets = [_inputs(spec, "float32", seed=20 + k) for k in range(cache + 3)]
        # Fill the cache (misses), run the same sets again (hits), go past it (evictions), then back to the
        # first sets (evicted: misses again).
        order = [*range(cache), *range(cache), *range(cache, cache + 3), 0, 1, 2]
        for step, k in enumerate(order):
            ins = sets[k]
            ref = _python_run(pipe, spec, ins)
            want = _poisoned(ref, "float32")
            y = _poisoned(ref, "float32")
            torch.cuda.synchronize()
            assert core.execute(eager, ins, [want]) == 0, core.message()
            async_run = step % 2 == 1
            rc = core.execute(graph, ins, [y], stream=stream.cuda_stream if async_run else None)
            assert rc == 0 and core.message() == "", core.message()  # captured, not degraded
            stream.synchronize()
            got = y.cpu().numpy()
            assert np.array_equal(got, want.cpu().numpy()), f"{name} set {k} (step {step}): graph != eager"
            assert_close(got, ref, "float32", f"{name} set {k} (step {step})")
    finally:
        assert core.lib.pipeLinkDestroyPipeline(graph) == 0
        assert core.lib.pipeLinkDestroyPipeline(eager) == 0


def test_cuda_graph_plan_from_eight_threads(core, tmp_path):
    pipe, _, spec = _compiled(tmp_path, "mlp", "float32")
    h = core.load(pipe.save(tmp_path / "mlp_graph.plk", cuda_graph=True))
    work = []
    for k in range(8):
        ins = _inputs(spec, "float32", seed=200 + k)
        work.append((ins, _python_run(pipe, spec, ins)))
    torch.cuda.synchronize()
    failures: list[str] = []

    def worker(k: int) -> None:
        ins, ref = work[k]
        stream = torch.cuda.Stream()
        outs = [_poisoned(ref, "float32") for _ in range(3)]  # three output pointers, reused
        for run in range(30):
            y = outs[run % 3]
            y.fill_(float("nan"))
            torch.cuda.current_stream().synchronize()
            rc = core.execute(h, ins, [y], stream=stream.cuda_stream)
            message = core.message()
            stream.synchronize()
            if rc != 0 or message or not np.allclose(y.cpu().numpy(), ref, rtol=1e-4, atol=1e-4):
                failures.append(f"thread {k} run {run}: rc {rc} {message}")
                return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert core.lib.pipeLinkDestroyPipeline(h) == 0
    assert not failures, failures[:4]


class _PoolStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("allocated", "peak", "cached", "live", "reused")] + [
        ("allocator", ctypes.c_int32)
    ]


@pytest.mark.parametrize("allocator", [0, 1], ids=["async", "legacy"])
def test_pipelinkmalloc_device_blocks_feed_a_cuda_plan(core, tmp_path, allocator):
    # pipeLinkMalloc serves device memory (the default on a GPU host is ASYNC): a block used as a plan's
    # input and output, cached when freed, reused, released by pipeLinkClearMemoryPool.
    lib = core.lib
    lib.pipeLinkMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    pipe, plan, spec = _compiled(tmp_path, "relu_gelu", "float32")
    h = core.load(plan)
    stats = _PoolStats()
    try:
        assert lib.pipeLinkSetMemoryAllocator(allocator) == 0, core.message()
        (x,) = _inputs(spec, "float32", seed=13)
        ref = _python_run(pipe, spec, [x])
        nbytes = x.numel() * 4
        bx, by = ctypes.c_void_p(), ctypes.c_void_p()
        assert lib.pipeLinkMalloc(ctypes.byref(bx), nbytes) == 0, core.message()
        assert lib.pipeLinkMalloc(ctypes.byref(by), nbytes) == 0, core.message()
        assert lib.pipeLinkGetMemoryPoolStats(ctypes.byref(stats)) == 0 and stats.allocator == allocator
        torch.cuda.synchronize()
        _copy_device(bx.value, x.data_ptr(), nbytes)
        poison = torch.full_like(x, float("nan"))
        _copy_device(by.value, poison.data_ptr(), nbytes)
        keep: list = []
        ins, outs = core.tensors([x], keep), core.tensors([x], keep)
        ins[0].data, outs[0].data = bx.value, by.value
        assert lib.pipeLinkExecute(h, ins, 1, outs, 1) == 0, core.message()
        got = torch.empty_like(x)
        _copy_device(got.data_ptr(), by.value, nbytes)
        assert_close(got.cpu().numpy(), ref, "float32", f"pipeLinkMalloc blocks, allocator {allocator}")
        assert lib.pipeLinkFree(by) == 0 and lib.pipeLinkFree(bx) == 0
        again = ctypes.c_void_p()
        assert lib.pipeLinkMalloc(ctypes.byref(again), nbytes) == 0
        assert again.value in (bx.value, by.value)  # the cached block of that size class, on this device
        assert lib.pipeLinkFree(again) == 0
        assert lib.pipeLinkClearMemoryPool() == 0
        assert lib.pipeLinkGetMemoryPoolStats(ctypes.byref(stats)) == 0 and stats.cached == 0
        # HOST: pipeLinkMalloc's memory is host memory, which a CUDA plan refuses.
        assert lib.pipeLinkSetMemoryAllocator(2) == 0
        hx = ctypes.c_void_p()
        assert lib.pipeLinkMalloc(ctypes.byref(hx), nbytes) == 0
        ins[0].data = hx.value
        assert lib.pipeLinkExecute(h, ins, 1, outs, 1) == 2 and "not memory of cuda:0" in core.message()
        assert lib.pipeLinkFree(hx) == 0
    finally:
        assert lib.pipeLinkSetMemoryAllocator(0) == 0
        assert lib.pipeLinkDestroyPipeline(h) == 0


def test_a_module_that_synchronizes_turns_graph_mode_off_with_a_message(core, tmp_path):
    # Its capture is invalidated: that run is eager and says so on a success status, every later run is
    # eager with a clean message, and every result is right.
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    here = Path(__file__).parent / "modules"
    lib = build_module([here / "sync_scale.cu", here / "sync_scale.desc.h"], tmp_path / "lib" / "libsync.so")
    doc = {
        "name": "sync_then_relu",
        "inputs": {"x": {"shape": [64, 1024], "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "sync_scale", "library": str(lib), "inputs": ["x"], "outputs": ["h"]},
            {"name": "relu", "inputs": ["h"], "outputs": ["y"]},
        ],
    }
    config = tmp_path / "sync_then_relu.json"
    config.write_text(json.dumps(doc))
    pipe = pl.load(config, device="cuda", registry=OperatorRegistry())
    h = core.load(pipe.save(tmp_path / "sync_then_relu.plk", cuda_graph=True))
    try:
        messages = []
        for seed in range(4):
            x = torch.randn((64, 1024), device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
            y = torch.full_like(x, float("nan"))
            torch.cuda.synchronize()
            assert core.execute(h, [x], [y]) == 0, core.message()
            messages.append(core.message())
            assert torch.equal(y, torch.relu(2 * x)), f"run {seed}"
        assert messages[0] == ""  # the warm-up, eager
        assert "run degraded: cuda_graph: capturing pipeline 'sync_then_relu' failed" in messages[1], messages
        assert messages[2:] == ["", ""], messages
    finally:
        assert core.lib.pipeLinkDestroyPipeline(h) == 0


def _policy_doc(lib: Path) -> dict:
    def stage(op, sid, src, dst, **extra):
        return {"name": op, "id": sid, "library": str(lib), "inputs": [src], "outputs": [dst], **extra}

    return {
        "name": "policies_cuda",
        "inputs": {"x": {"shape": [64, 256], "dtype": "float32"}},
        "outputs": ["y", "a", "c", "d"],
        "pipeline": [
            stage("pol_scale", "double", "x", "h", attrs={"alpha": 2.0}),
            stage("pol_scale", "halve", "h", "y", attrs={"alpha": 0.5}),
            stage("pol_flaky", "ident", "h", "a", attrs={"alpha": 1.0}, on_error="identity"),
            stage("pol_flaky", "fb", "h", "c", attrs={"alpha": 3.0}, on_error={"fallback": "pol_scale"}),
            stage("pol_nanify", "finite", "h", "d", constraints={"check_finite": True}, on_error="identity"),
        ],
    }


def test_native_modules_on_error_and_check_finite_apply_in_the_core_on_the_device(core, tmp_path):
    # The CUDA twins of the CPU policy plan: clean runs, then runs where every policy rescues its stage
    # (identity, a fallback, check_finite catching a NaN), each equal to the Python executor's outputs; a
    # skip leaves its outputs and its readers' (a built-in kernel's too) missing, which fails the run.
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    lib = build_module([Path(__file__).parent / "modules" / "policy_ops.cu"], tmp_path / "lib" / "libpol.so")
    doc = _policy_doc(lib)
    config = tmp_path / "policies_cuda.json"
    config.write_text(json.dumps(doc))
    pipe = pl.load(config, device="cuda", registry=OperatorRegistry())
    ref = pl.load(config, device="cuda", native=False, registry=OperatorRegistry())
    with pytest.raises(pl.ConfigError, match="a CUDA graph cannot replay"):
        pipe.save(tmp_path / "graph.plk", cuda_graph=True)
    h = core.load(pipe.save(tmp_path / "policies_cuda.plk"))
    try:
        for sign, degraded in ((1.0, False), (-1.0, True)):
            x = torch.rand((64, 256), device="cuda") + 0.5
            x[0, 0] *= sign
            outs = [torch.full_like(x, float("nan")) for _ in doc["outputs"]]
            torch.cuda.synchronize()
            assert core.execute(h, [x], outs) == 0, core.message()
            message = core.message()
            want = ref.run(x=x)
            for name, got in zip(doc["outputs"], outs, strict=True):
                torch.testing.assert_close(got, torch.from_dlpack(want[name]), rtol=0, atol=0, equal_nan=True)
            if degraded:
                assert message.startswith("PIPELINK_SUCCESS: run degraded:"), message
                assert "'ident' identity" in message and "'fb' fallback:pol_scale" in message, message
                assert "'finite' identity (produced 1 non-finite values" in message, message
                torch.testing.assert_close(outs[1], 2 * x)  # identity: its input, h
            else:
                assert message == "", message
                torch.testing.assert_close(outs[1], 2 * x + 1)
        # Inside a capture the policies cannot decide: a clear refusal, and the capture goes on.
        x = torch.rand((64, 256), device="cuda")
        outs = [torch.empty_like(x) for _ in doc["outputs"]]
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            stream = torch.cuda.current_stream().cuda_stream
            assert core.execute(h, [x], outs, ctypes.c_void_p(stream)) == 2
            assert "cannot run inside a stream capture" in core.message(), core.message()
            outs[0].copy_(x)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(outs[0], x)
    finally:
        assert core.lib.pipeLinkDestroyPipeline(h) == 0
        pipe.close()
        ref.close()

    skip = {
        "name": "skip_cuda",
        "inputs": doc["inputs"],
        "outputs": ["h", "r"],
        "pipeline": [
            doc["pipeline"][0],
            {**doc["pipeline"][2], "id": "skipped", "on_error": "skip"},
            {"name": "relu", "id": "after", "inputs": ["a"], "outputs": ["r"]},
        ],
    }
    config = tmp_path / "skip_cuda.json"
    config.write_text(json.dumps(skip))
    with pl.load(config, device="cuda", registry=OperatorRegistry()) as pipe:
        h = core.load(pipe.save(tmp_path / "skip_cuda.plk"))
    try:
        x = torch.rand((64, 256), device="cuda") + 0.5
        outs = [torch.empty_like(x), torch.empty_like(x)]
        assert core.execute(h, [x], outs) == 0, core.message()
        torch.testing.assert_close(outs[1], torch.relu(2 * x + 1))
        x[0, 0] = -1.0
        assert core.execute(h, [x], outs) == 9  # PIPELINK_ERR_MODULE_CRASH
        message = core.message()
        assert "outputs 'r' are missing" in message and "'skipped' skipped" in message, message
        assert "'after' skipped (input 'a' missing)" in message, message
    finally:
        assert core.lib.pipeLinkDestroyPipeline(h) == 0


@pytest.mark.parametrize("policy", ["fail", "identity", "skip"])
def test_a_builtin_stages_check_finite_applies_in_the_core_on_the_device(core, tmp_path, policy):
    # Format 5's check record after a built-in kernel, written from a config: a NaN in the scale's output is
    # caught after its launch and its on_error applied; a clean input runs with no message.
    doc = {
        "name": f"checked_{policy}",
        "inputs": {"x": {"shape": [64, 256], "dtype": "float32"}},
        "outputs": ["y", "z"],
        "pipeline": [
            {
                "name": "scale",
                "id": "s",
                "inputs": ["x"],
                "outputs": ["y"],
                "attrs": {"factor": 2.0},
                "on_error": policy,
                "constraints": {"check_finite": True},
            },
            {"name": "relu", "id": "r", "inputs": ["x"], "outputs": ["z"]},
        ],
    }
    with pl.load(doc, device="cuda", native=False) as pipe:
        h = core.load(pipe.save(tmp_path / "checked.plk"))
    try:
        x = torch.rand((64, 256), device="cuda") - 0.5
        outs = [torch.full_like(x, 7.0), torch.full_like(x, 7.0)]
        assert core.execute(h, [x], outs) == 0 and core.message() == "", core.message()
        torch.testing.assert_close(outs[0], 2 * x)
        x[3, 5] = float("nan")
        outs = [torch.full_like(x, 7.0), torch.full_like(x, 7.0)]
        status = core.execute(h, [x], outs)
        message = core.message()
        why = "stage 's' (a built-in kernel) produced 1 non-finite values (NaN/Inf) in output 'y'"
        if policy == "fail":
            assert status == 9 and why in message, message
        elif policy == "identity":
            assert status == 0 and "run degraded: 's' identity" in message, message
            torch.testing.assert_close(outs[0], x, equal_nan=True)  # its input
        else:
            assert status == 9 and "outputs 'y' are missing" in message, message
        if status == 0 or policy == "skip":  # the other stage ran
            torch.testing.assert_close(outs[1], torch.relu(x), equal_nan=True)
    finally:
        assert core.lib.pipeLinkDestroyPipeline(h) == 0
