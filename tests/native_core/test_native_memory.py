"""Memory of runs through the native core (issue 18's regression: the MLP peak-memory targets missed once
``run()`` went through the core): compiling a plan for the core allocates no Python arena, the Python plan
made at load holds none while the core takes the runs, and what the core's execution contexts hold (their
arenas, workspaces, the plans' constants) shows in ``pl.memory.stats()`` (``pipeLinkGetArenaStats``). The
CPU path here, the CUDA path on the stand-in driver (fake_cuda.c)."""

from __future__ import annotations

import gc
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.runtime.planfile import write_plan

from .conftest import SHAPE, host_env
from .test_constants import cuda_plan_with_constants
from .test_cuda_fake import FAKE_CUBIN, fake_dir  # noqa: F401 (a fixture)
from .test_cuda_plans import K, M, N, _kernel, cuda_plan

ITEM = np.dtype(np.float32).itemsize


def _chain(plans) -> dict:
    """x -double-> h -halve-> y through core_scale (a workspace user): h is an arena buffer of the plan."""
    lib = str(plans / "lib" / "libcore_ops.so")

    def stage(sid, src, dst, alpha):
        attrs = {"alpha": alpha}
        return {
            "name": "core_scale",
            "id": sid,
            "library": lib,
            "inputs": [src],
            "outputs": [dst],
            "attrs": attrs,
        }

    return {
        "name": "chain",
        "inputs": {"x": {"shape": SHAPE, "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [stage("double", "x", "h", 2.0), stage("halve", "h", "y", 0.5)],
    }


def _arena_of(plan: bytes) -> int:
    """The arena size a plan file declares (docs/plan-format.md: the payload opens with the name, then it)."""
    name_length = struct.unpack_from("<I", plan, 64)[0]
    return struct.unpack_from("<Q", plan, 68 + name_length)[0]


@pytest.fixture
def arenas(monkeypatch):
    """The sizes of the arenas the CPU backend allocates from now on (Backend.allocate with tag "arena")."""
    backend = get_backend("cpu")
    made: list[int] = []
    real = backend.allocate

    def spy(nbytes, **options):
        if options.get("tag") == "arena":
            made.append(nbytes)
        return real(nbytes, **options)

    monkeypatch.setattr(backend, "allocate", spy)
    return made


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)


def test_compiling_a_plan_for_the_core_allocates_no_arena(runtime_lib, plans, tmp_path, arenas):
    with pl.load(_chain(plans), device="cpu", native=False) as pipe:
        assert len(arenas) == 1  # the Python executor's plan, made at load (native=False)
        held = get_backend("cpu").memory_stats().allocated_bytes
        path = write_plan(pipe, tmp_path / "chain.plk")
        # The plan has an arena (so an allocation would show), yet compiling it allocated none and left
        # nothing allocated: the core makes its own per execution context.
        assert _arena_of(path.read_bytes()) > 0
        assert len(arenas) == 1, f"compiling the plan allocated arenas of {arenas[1:]} bytes"
        assert get_backend("cpu").memory_stats().allocated_bytes == held


def test_auto_holds_no_python_arena_while_the_core_runs(runtime_lib, plans, arenas):
    x = _x(1)
    with pl.load(_chain(plans), device="cpu", native=False) as ref:
        want = np.asarray(ref.run(x=x)["y"]).copy()
    arenas.clear()
    with pl.load(_chain(plans), device="cpu") as pipe:
        assert pipe.memory_plan.peak_bytes > 0  # planned at load, for the declared inputs
        out = pipe.run(x=x)
        assert pipe.last_report.executor == "native"
        np.testing.assert_array_equal(np.asarray(out["y"]), want)
        assert arenas == [], "a Python arena was allocated, though the core made the run"
        # A run the Python executor makes (profile=True) allocates the plan's arena then, once.
        out = pipe.run(x=x, profile=True)
        assert pipe.last_report.executor == "python"
        np.testing.assert_array_equal(np.asarray(out["y"]), want)
        pipe.run(x=x, profile=True)
        assert arenas == [pipe.memory_plan.peak_bytes]


def _native(stats: dict) -> dict:
    return stats["native"]


def test_the_cores_arenas_and_workspaces_show_in_memory_stats(runtime_lib, plans, tmp_path):
    gc.collect()  # pipelines other tests dropped give their plans back now, not during this test
    before = pl.memory.stats("cpu")
    with pl.load(_chain(plans), device="cpu") as pipe:
        arena = _arena_of(write_plan(pipe, tmp_path / "chain.plk").read_bytes())
        assert arena > 0
        assert _native(pl.memory.stats("cpu")) == _native(before)  # nothing before the first run
        pipe.run(x=_x(2))
        assert pipe.last_report.executor == "native"
        after = pl.memory.stats("cpu")
        got, was = _native(after), _native(before)
        assert got["n_contexts"] == was["n_contexts"] + 1
        assert got["arena_bytes"] == was["arena_bytes"] + arena
        # core_scale stages its data through the workspace service: x's bytes per stage, two stages.
        assert got["workspace_bytes"] == was["workspace_bytes"] + 2 * int(np.prod(SHAPE)) * ITEM
        assert got["peak_bytes"] >= got["arena_bytes"] + got["workspace_bytes"] + got["constant_bytes"]
        # Counted into the device's totals (the CPU backend allocated nothing itself: no Python arena).
        held = arena + 2 * int(np.prod(SHAPE)) * ITEM
        assert after["allocated_bytes"] == before["allocated_bytes"] + held
        assert after["reserved_bytes"] == before["reserved_bytes"] + held
        assert after["peak_bytes"] >= after["allocated_bytes"]
        assert pl.memory.stats()["cpu"]["native"] == got

        # Concurrent runs take an execution context each: one arena per context.
        barrier = threading.Barrier(4)

        def worker(seed):
            barrier.wait()
            for _ in range(20):
                pipe.run(x=_x(seed))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = _native(pl.memory.stats("cpu"))
        contexts = got["n_contexts"] - was["n_contexts"]
        assert 1 <= contexts <= 5
        assert got["arena_bytes"] == was["arena_bytes"] + contexts * arena
    # close() destroys the plans: their contexts and arenas go.
    gone = _native(pl.memory.stats("cpu"))
    for field in ("n_contexts", "arena_bytes", "workspace_bytes", "constant_bytes"):
        assert gone[field] == _native(before)[field], field


def test_bound_weights_count_as_the_cores_constants(runtime_lib, plans):
    with pl.load(plans / "lnw.json", device="cpu") as pipe:
        before = _native(pl.memory.stats("cpu"))
        rng = np.random.default_rng(3)
        x = rng.standard_normal((8, 1024)).astype(np.float32)
        pipe.run(input_tensor=x, eps_scalar=np.array(1e-5, np.float32))
        assert pipe.last_report.executor == "native"
        after = _native(pl.memory.stats("cpu"))
        assert after["constant_bytes"] == before["constant_bytes"] + 2 * 1024 * ITEM  # gamma and beta


ARENA_CHILD = r"""
import ctypes, sys, threading
import numpy as np
from pipelink.modules.services import PipeLinkTensor
from pipelink.native import ArenaStats

runtime_path, plan_path, constants_path = sys.argv[1], sys.argv[2], sys.argv[3]
M, N, K = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
fake = ctypes.CDLL("libcuda.so.1")
fake.fake_mem_alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
rt = ctypes.CDLL(runtime_path)
rt.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
args = [ctypes.c_void_p, ctypes.POINTER(PipeLinkTensor), ctypes.c_int32]
rt.pipeLinkExecuteAsync.argtypes = args + args[1:] + [ctypes.c_void_p]
rt.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
rt.pipeLinkGetArenaStats.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ArenaStats)]
rt.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
msg = lambda: rt.pipeLinkGetLastErrorMessage().decode()

def held(device_type=2, device_id=0):
    s = ArenaStats(size=ctypes.sizeof(ArenaStats))
    assert rt.pipeLinkGetArenaStats(device_type, device_id, ctypes.byref(s)) == 0, msg()
    return {f: getattr(s, f) for f, _ in ArenaStats._fields_ if f != "size"}

def device(nbytes):
    ptr = ctypes.c_uint64()
    assert fake.fake_mem_alloc(ctypes.byref(ptr), nbytes) == 0
    return ptr.value

keep = []
def tensors(items):
    out = (PipeLinkTensor * len(items))()
    for t, shape in zip(out, items):
        dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        keep.append(dims)
        t.data, t.ndim, t.shape = device(int(np.prod(shape)) * 4), len(shape), dims
        t.device.device_type, t.device.device_id = 2, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
    return out

assert rt.pipeLinkInitialize() == 0
zero = held()
assert zero["n_contexts"] == zero["arena_bytes"] == zero["constant_bytes"] == 0, zero
h = ctypes.c_void_p()
assert rt.pipeLinkLoadPipeline(plan_path.encode(), ctypes.byref(h)) == 0, msg()
assert held() == zero  # a context (and its arena) is made by the first run
ins = tensors([(M, K), (K, N), (N,)])
outs = tensors([(M, N), (M, K)])
assert rt.pipeLinkExecuteAsync(h, ins, 3, outs, 2, ctypes.c_void_p(0x5000)) == 0, msg()
one = held()
assert one["n_contexts"] == 1 and one["arena_bytes"] == M * K * 4, one
assert one["workspace_bytes"] == 0  # the fake's cuBLASLt heuristic asks for no workspace
assert one["peak_bytes"] >= one["arena_bytes"]
assert held(1, 0)["arena_bytes"] == 0  # counted for cuda:0 only

# Concurrent runs: a context each, an arena each.
barrier, failures = threading.Barrier(8), []
def worker(k):
    mine = tensors([(M, N), (M, K)])
    barrier.wait()
    for _ in range(20):
        if rt.pipeLinkExecuteAsync(h, ins, 3, mine, 2, ctypes.c_void_p(0x6000 + k)) != 0:
            failures.append(msg()); return
threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert not failures, failures[:3]
many = held()
assert 1 <= many["n_contexts"] <= 9 and many["arena_bytes"] == many["n_contexts"] * M * K * 4, many
assert many["peak_bytes"] >= many["arena_bytes"]

# A plan with constants: one device block, counted from its load.
hc = ctypes.c_void_p()
assert rt.pipeLinkLoadPipeline(constants_path.encode(), ctypes.byref(hc)) == 0, msg()
block = (K * N * 4 + 255) // 256 * 256 + (N * 4 + 255) // 256 * 256
assert held()["constant_bytes"] == block, held()
assert rt.pipeLinkDestroyPipeline(hc) == 0
assert held()["constant_bytes"] == 0

assert rt.pipeLinkDestroyPipeline(h) == 0
gone = held()
assert gone["n_contexts"] == gone["arena_bytes"] == gone["workspace_bytes"] == 0, gone
assert gone["peak_bytes"] == block + M * K * 4 * many["n_contexts"], gone  # all of it at once, with hc
assert rt.pipeLinkFinalize() == 0
print("OK")
"""


def test_the_cuda_paths_arenas_are_counted_on_the_fake_driver(fake_dir, runtime_lib, tmp_path):  # noqa: F811
    plan, constants = tmp_path / "fake.plk", tmp_path / "constants.plk"
    plan.write_bytes(cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90))
    rng = np.random.default_rng(4)
    w, bias = rng.standard_normal((K, N)).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    constants.write_bytes(cuda_plan_with_constants(w=w, bias=bias))
    env = dict(
        host_env(), LD_LIBRARY_PATH=str(fake_dir), PIPELINK_CUBLASLT=str(fake_dir / "libfakecublaslt.so")
    )
    run = [
        sys.executable,
        "-c",
        ARENA_CHILD,
        str(runtime_lib),
        str(plan),
        str(constants),
        str(M),
        str(N),
        str(K),
    ]
    proc = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr


def test_memory_stats_without_the_core_loaded_report_zeros(tmp_path):
    """A process that never loaded the runtime library reports the core's memory as zeros, and does not
    load the library to find out."""
    script = (
        "import pipelink as pl, sys\n"
        "s = pl.memory.stats('cpu')\n"
        "assert set(s['native'].values()) == {0}, s\n"
        "assert not any('pipelink_runtime' in l for l in open('/proc/self/maps')), 'loaded it'\n"
        "print('OK')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=host_env())
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr


@pytest.mark.parametrize("follows", [True, False], ids=["timeline", "upper-bound"])
def test_the_peak_combines_the_core_with_the_python_side(monkeypatch, follows):
    # Wrong if a device whose backend follows the core's bytes over time (CUDA) still added the two peaks
    # (the MLP's 4096x4096 run read 480 MiB against PyTorch's 288 that way: bind-time scratch and the core's
    # arena came at different times), or if a backend that cannot follow them (the CPU) lost the core's peak.
    from types import SimpleNamespace

    from pipelink import memory
    from pipelink.backends.base import MemoryStats

    class Stub:
        info = SimpleNamespace(kind="cuda", index=0)
        told = None

        def note_native_bytes(self, held):
            self.told = held
            return follows

        def memory_stats(self):
            return MemoryStats(device="cuda:0", allocated_bytes=10, peak_bytes=500, reserved_bytes=20)

    native = dict(n_contexts=1, arena_bytes=100, workspace_bytes=20, constant_bytes=30, peak_bytes=150)
    monkeypatch.setattr(memory, "arena_stats", lambda kind, index: dict(native))
    backend = Stub()
    got = memory._with_native(backend)
    assert backend.told == 150, "the backend must hear what the core holds before its stats are read"
    assert got["allocated_bytes"] == 160 and got["reserved_bytes"] == 170
    assert got["peak_bytes"] == (500 if follows else 650)
    native["peak_bytes"] = 900  # the core alone once held more than the Python side's timeline shows
    assert memory._with_native(Stub())["peak_bytes"] == (900 if follows else 1400)
