"""The core's CUDA path run on a stand-in driver and cuBLASLt (fake_cuda.c: "device" memory is host memory,
kernels and products are computed on the host), so its mechanics are tested on every machine: loading,
execution contexts, pointer marshalling into launches and products, runtime-allocated device outputs and
pipeLinkFree, the argument checks, ExecuteAsync inside a capture, threads. Each scenario runs in a child
process whose LD_LIBRARY_PATH puts the fake libcuda.so.1 first (the real driver, if any, is never loaded).
"""

from __future__ import annotations

import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipelink.native.build import find_compiler
from pipelink.runtime.planfile import DEVICE_CPU, DEVICE_CUDA, FLAG_CUDA_GRAPH

from .conftest import graph_cache_size, host_env
from .test_cuda_plans import _kernel, _matmul, cuda_plan

HERE = Path(__file__).parent
FAKE_CUBIN = b"FAKECUBIN: fake_scale and fake_add, run on the host by fake_cuda.c"

CHILD = r"""
import ctypes, sys, threading
import numpy as np
from pipelink.modules.services import PipeLinkTensor

runtime_path, plan_path = sys.argv[1], sys.argv[2]
fake = ctypes.CDLL("libcuda.so.1")  # the stand-in: the core dlopens this very library
fake.fake_mem_alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
rt = ctypes.CDLL(runtime_path)
rt.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
args = [ctypes.c_void_p, ctypes.POINTER(PipeLinkTensor), ctypes.c_int32]
rt.pipeLinkExecute.argtypes = args + args[1:]
rt.pipeLinkExecuteAsync.argtypes = args + args[1:] + [ctypes.c_void_p]
rt.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
rt.pipeLinkFree.argtypes = [ctypes.c_void_p]
rt.pipeLinkGetCublasHandle.argtypes = [ctypes.c_void_p]
rt.pipeLinkGetCublasHandle.restype = ctypes.c_void_p
rt.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
msg = lambda: rt.pipeLinkGetLastErrorMessage().decode()
assert rt.pipeLinkInitialize() == 0
h = ctypes.c_void_p()
assert rt.pipeLinkLoadPipeline(plan_path.encode(), ctypes.byref(h)) == 0, msg()

M, N, K = 8, 16, 32
rng = np.random.default_rng(0)
host = {"x": rng.standard_normal((M, K)), "w": rng.standard_normal((K, N)), "bias": rng.standard_normal(N)}
host = {k: v.astype(np.float32) for k, v in host.items()}
want_y = (0.5 * host["x"]) @ host["w"] + host["bias"]

def device(shape):
    ptr = ctypes.c_uint64()
    assert fake.fake_mem_alloc(ctypes.byref(ptr), int(np.prod(shape)) * 4) == 0
    return ptr.value

keep = []
def tensors(items, device_type=2, device_id=0):
    out = (PipeLinkTensor * len(items))()
    for t, (ptr, shape) in zip(out, items):
        dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        keep.append(dims)
        t.data, t.ndim, t.shape = ptr, len(shape), dims
        t.device.device_type, t.device.device_id = device_type, device_id
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
    return out

def read(ptr, shape):
    return np.frombuffer(ctypes.string_at(ptr, int(np.prod(shape)) * 4), np.float32).reshape(shape)

inputs = {k: device(v.shape) for k, v in host.items()}
for k, v in host.items():
    ctypes.memmove(inputs[k], v.ctypes.data, v.nbytes)
ins = tensors([(inputs[k], host[k].shape) for k in ("x", "w", "bias")])

def outputs():
    y, x_out = device((M, N)), device((M, K))
    return y, x_out, tensors([(y, (M, N)), (x_out, (M, K))])

def check(y, x_out, what):
    assert np.allclose(read(y, (M, N)), want_y, rtol=1e-4, atol=1e-4), what
    assert np.array_equal(read(x_out, (M, K)), host["x"]), what

# Execute and ExecuteAsync: the kernel's pointers and scalars, the product's operands, bias and layouts.
y, x_out, outs = outputs()
assert rt.pipeLinkExecute(h, ins, 3, outs, 2) == 0, msg()
check(y, x_out, "Execute")
y, x_out, outs = outputs()
assert rt.pipeLinkExecuteAsync(h, ins, 3, outs, 2, ctypes.c_void_p(0x5000)) == 0, msg()
check(y, x_out, "ExecuteAsync")

# Outputs the runtime allocates: device blocks pipeLinkFree takes back, counted in the pool stats.
outs = tensors([(None, (M, N)), (None, (M, K))])
assert rt.pipeLinkExecute(h, ins, 3, outs, 2) == 0, msg()
assert outs[0].device.device_type == 2 and outs[0].shape[1] == N
check(outs[0].data, outs[1].data, "runtime-allocated outputs")
stats = (ctypes.c_uint64 * 6)()
assert rt.pipeLinkGetMemoryPoolStats(stats) == 0 and stats[0] >= (M * N + M * K) * 4 and stats[3] >= 2
for o in outs:
    assert rt.pipeLinkFree(o.data) == 0, msg()
assert rt.pipeLinkFree(outs[0].data) == 2

# The caller's tensors are checked before anything runs.
y, x_out, outs = outputs()
bad = tensors([(host["x"].ctypes.data, (M, K)), (inputs["w"], (K, N)), (inputs["bias"], (N,))])
assert rt.pipeLinkExecute(h, bad, 3, outs, 2) == 2 and "not memory of cuda:0" in msg(), msg()
bad = tensors([(inputs[k], host[k].shape) for k in ("x", "w", "bias")])
bad[0].byte_offset = 4
assert rt.pipeLinkExecute(h, bad, 3, outs, 2) == 2 and "aligned" in msg(), msg()
bad = tensors([(inputs[k], host[k].shape) for k in ("x", "w", "bias")], device_id=1)
assert rt.pipeLinkExecute(h, bad, 3, outs, 2) == 2 and "cuda:1" in msg(), msg()
bad = tensors([(inputs[k], host[k].shape) for k in ("x", "w", "bias")], device_type=1)
assert rt.pipeLinkExecute(h, bad, 3, outs, 2) == 2 and "device memory" in msg(), msg()
assert rt.pipeLinkExecute(h, ins, 3, tensors([(inputs["x"], (M, N)), (x_out, (M, K))]), 2) == 2  # overlaps x

# Inside a capture: no allocation (preallocated outputs), one idle context taken for good.
fake.fake_set_capturing(1)
assert rt.pipeLinkExecuteAsync(h, ins, 3, tensors([(None, (M, N)), (x_out, (M, K))]), 2, None) == 2
assert "preallocated" in msg(), msg()
captured = 0
while rt.pipeLinkExecuteAsync(h, ins, 3, outs, 2, None) == 0:
    captured += 1
assert captured >= 1 and "no idle execution context" in msg(), (captured, msg())
fake.fake_set_capturing(0)
y, x_out, outs = outputs()
assert rt.pipeLinkExecuteAsync(h, ins, 3, outs, 2, None) == 0, msg()  # a new context, outside the capture
check(y, x_out, "after a capture")

# Threads: each its own outputs, each result right.
failures = []
def worker(k):
    y, x_out, outs = outputs()
    for _ in range(30):
        if rt.pipeLinkExecuteAsync(h, ins, 3, outs, 2, ctypes.c_void_p(0x6000 + k)) != 0:
            failures.append(msg()); return
        try:
            check(y, x_out, f"thread {k}")
        except AssertionError as e:
            failures.append(str(e)); return
threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert not failures, failures[:3]

# No libcublas.so.13 beside the (fake) cuBLASLt: no cuBLAS handle, and the message says why.
assert rt.pipeLinkGetCublasHandle(None) is None and "libcublas.so.13" in msg(), msg()
assert rt.pipeLinkDestroyPipeline(h) == 0
assert rt.pipeLinkExecute(h, ins, 3, outs, 2) == 2 and "not live" in msg()
assert rt.pipeLinkFinalize() == 0
print("OK", fake.fake_launches())
"""


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory) -> Path:
    cc = find_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("fake_cuda")
    src = str(HERE / "fake_cuda.c")
    flags = ["-std=c11", "-O1", "-shared", "-fPIC", "-fvisibility=hidden"]
    subprocess.run(
        [*cc, *flags, "-DFAKE_DRIVER", src, "-o", str(out / "libcuda.so.1"), "-lpthread"], check=True
    )
    subprocess.run(
        [*cc, *flags, "-DFAKE_CUBLASLT", src, "-o", str(out / "libfakecublaslt.so"), "-ldl"], check=True
    )
    return out


def _run(
    fake_dir: Path, runtime_lib: Path, plan: Path, script: str = CHILD, *more: Path, env_extra=None
) -> subprocess.CompletedProcess:
    env = dict(
        host_env(),
        LD_LIBRARY_PATH=str(fake_dir),
        PIPELINK_CUBLASLT=str(fake_dir / "libfakecublaslt.so"),
        **(env_extra or {}),
    )
    run = [sys.executable, "-c", script, str(runtime_lib), str(plan), *map(str, more)]
    return subprocess.run(run, capture_output=True, text=True, env=env, timeout=300)


def test_the_cuda_path_runs_a_plan_on_the_fake_driver(fake_dir, runtime_lib, tmp_path):
    plan = tmp_path / "fake.plk"
    plan.write_bytes(cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90))
    proc = _run(fake_dir, runtime_lib, plan)
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr


LOAD_ONLY = r"""
import ctypes, sys
rt = ctypes.CDLL(sys.argv[1])
rt.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
rt.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
rt.pipeLinkInitialize()
h = ctypes.c_void_p()
status = rt.pipeLinkLoadPipeline(sys.argv[2].encode(), ctypes.byref(h))
print(status, rt.pipeLinkGetLastErrorMessage().decode())
"""


@pytest.mark.parametrize(
    "plan, status, words",
    [
        (dict(cc=80), 8, "compute capability 8.0, but cuda:0 is 9.0"),
        (dict(cubin=b"not a cubin at all"), 3, "cannot be loaded on cuda:0"),
        (dict(kernel=_kernel(name="no_such_kernel")), 3, "kernel no_such_kernel is not in its cubin"),
    ],
    ids=["other compute capability", "a cubin the driver refuses", "a kernel missing from its cubin"],
)
def test_loading_a_cuda_plan_the_device_cannot_run_is_a_status(
    fake_dir, runtime_lib, tmp_path, plan, status, words
):
    kwargs = dict(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90) | plan
    path = tmp_path / "refused.plk"
    path.write_bytes(cuda_plan(**kwargs))
    proc = _run(fake_dir, runtime_lib, path, LOAD_ONLY)
    code, _, message = proc.stdout.partition(" ")
    assert proc.returncode == 0 and int(code) == status and words in message, proc.stdout + proc.stderr


def with_flags(plan: bytes, flags: int) -> bytes:
    """A plan with header flags set (the high half of the device-id word; the checksum covers the payload)."""
    device_id = struct.unpack_from("<I", plan, 20)[0] & 0xFFFF
    return plan[:20] + struct.pack("<I", device_id | flags << 16) + plan[24:]


RANK = (
    CHILD.split("# Execute and ExecuteAsync")[0]
    + r"""
import os
lt = ctypes.CDLL(os.environ["PIPELINK_CUBLASLT"])  # the core's cuBLASLt: the same loaded library
y, x_out, outs = outputs()
assert rt.pipeLinkExecute(h, ins, 3, outs, 2) == 0, msg()
check(y, x_out, "the product with the plan's algorithm")
last = (ctypes.c_uint64 * 2)()
lt.fake_lt_last(last)
assert rt.pipeLinkDestroyPipeline(h) == 0 and rt.pipeLinkFinalize() == 0
print("ALGO", last[0] - 42, "ASKED", last[1])
"""
)


@pytest.mark.parametrize(
    "rank, workspace, version, algos, taken",
    [
        (0, 0, 4, "4", 0),
        (2, 2 * 4096, 4, "4", 2),  # the plan's rank, its workspace as recorded: that candidate
        (3, 3 * 4096, 4, "", 3),  # the last of the fake's default four
        (2, 2 * 4096, 4, "2", 0),  # this cuBLASLt answers fewer: the heuristic's first
        (2, 12345, 4, "4", 0),  # the candidate at that rank needs another workspace: another list, the first
        (2, 2 * 4096, 3, "4", 0),  # a format 3 plan has no rank: the first, as before
    ],
    ids=["rank 0", "rank 2", "rank 3", "fewer results", "another workspace", "format 3"],
)
def test_the_core_runs_the_algorithm_the_plan_names(
    fake_dir, runtime_lib, tmp_path, rank, workspace, version, algos, taken
):
    # The fake heuristic's candidate i is algorithm 42 + i (needing i * 4096 workspace bytes) and its
    # cublasLtMatmul records which one it ran; the product's result is right with any of them.
    plan = tmp_path / "rank.plk"
    product = replace(_matmul(), algo_rank=rank, algo_workspace=workspace)
    plan.write_bytes(
        cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90, matmul=product, version=version)
    )
    proc = _run(fake_dir, runtime_lib, plan, RANK, env_extra={"FAKE_LT_ALGOS": algos})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    asked = product.algo_asked if version >= 4 else 1  # the bind's count: not rank + 1 (not always a prefix)
    assert proc.stdout.split() == ["ALGO", str(taken), "ASKED", str(asked)], proc.stdout + proc.stderr


JOINED = (
    CHILD.split("# Execute and ExecuteAsync")[0]
    + r"""
# plk_execute_joined, the entry of Python's run() (runtime/_hotpath.c): pipeLinkExecuteAsync, then the joining
# stream waits for the run; a stream being captured runs nothing and says so.
fn = rt.plk_execute_joined
flag = ctypes.POINTER(ctypes.c_int32)
fn.argtypes = args + args[1:] + [ctypes.c_void_p, ctypes.c_void_p, flag, flag]
fake.fake_last_wait.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
last = (ctypes.c_void_p * 3)()
capturing = ctypes.c_int32(7)
run, side = ctypes.c_void_p(0x5000), ctypes.c_void_p(0x7000)
def waits():
    fake.fake_last_wait(last)
    return last[2] or 0
y, x_out, outs = outputs()
n = waits()
assert fn(h, ins, 3, outs, 2, run, side, ctypes.byref(capturing), None) == 0, msg()
check(y, x_out, "joined run")
assert capturing.value == 0, "a stream not being captured runs"
assert waits() > n and last[0] == 0x7000, "the joining stream waits for the run"
n = waits()
y, x_out, outs = outputs()
assert fn(h, ins, 3, outs, 2, run, side, None, None) == 0, msg()
assert waits() == n + 1, ("the same stream again: its context needs no wait, only the join", waits() - n)
n = waits()
y, x_out, outs = outputs()
assert fn(h, ins, 3, outs, 2, side, None, None, None) == 0, msg()
assert waits() == n + 1 and last[0] == 0x7000, "another stream waits for the context's last run"
n = waits()
y, x_out, outs = outputs()
assert fn(h, ins, 3, outs, 2, run, run, None, None) == 0, msg()
assert waits() == n + 1, "a run's own stream is not joined to itself (its context last ran on another)"
check(y, x_out, "joined to its own stream")

fake.fake_set_capturing(1)
before = fake.fake_launches()
poison = np.full((M, N), np.nan, np.float32)
y, x_out, outs = outputs()
ctypes.memmove(y, poison.ctypes.data, poison.nbytes)
assert fn(h, ins, 3, outs, 2, run, side, ctypes.byref(capturing), None) == 0, msg()
assert capturing.value == 1 and fake.fake_launches() == before, "a captured stream must run nothing"
assert np.isnan(read(y, (M, N))).all(), "nothing may be written when the run is refused for a capture"
fake.fake_set_capturing(0)

assert fn(h, ins, 3, outs, 2, run, None, None, None) == 0, msg()  # no join, no capture check: ExecuteAsync
check(y, x_out, "as pipeLinkExecuteAsync")
assert rt.pipeLinkDestroyPipeline(h) == 0
assert fn(h, ins, 3, outs, 2, None, None, ctypes.byref(capturing), None) == 2 and "not live" in msg(), msg()
print("JOINED OK")
"""
)


def test_the_joined_entry_waits_on_the_run_and_refuses_captured_streams(fake_dir, runtime_lib, tmp_path):
    plan = tmp_path / "joined.plk"
    plan.write_bytes(cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90))
    proc = _run(fake_dir, runtime_lib, plan, JOINED)
    assert proc.returncode == 0 and "JOINED OK" in proc.stdout, proc.stdout + proc.stderr


def test_a_product_cublaslt_has_no_algorithm_for_is_refused_at_load(fake_dir, runtime_lib, tmp_path):
    plan = tmp_path / "none.plk"
    plan.write_bytes(cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90))
    proc = _run(fake_dir, runtime_lib, plan, LOAD_ONLY, env_extra={"FAKE_LT_ALGOS": "0"})
    code, _, message = proc.stdout.partition(" ")
    assert int(code) == 8 and "has no algorithm for this product" in message, proc.stdout + proc.stderr


GRAPHS = (
    CHILD.split("# Execute and ExecuteAsync")[0]
    + r"""
eager_path = sys.argv[3]
counts = (ctypes.c_int * 5)()
def graph_counts():  # captures, instantiations, updates, graph launches, live executable graphs
    fake.fake_graph_counts(counts)
    return dict(zip(("captures", "instantiated", "updated", "launched", "live"), counts))

def poison(ptr, shape):
    nan = np.full(shape, np.nan, np.float32)
    ctypes.memmove(ptr, nan.ctypes.data, nan.nbytes)

def run_and_check(outs, what, async_stream=None):
    for o, shape in zip(outs, ((M, N), (M, K))):
        if o.data:
            poison(o.data, shape)
    status = (rt.pipeLinkExecuteAsync(h, ins, 3, outs, 2, async_stream) if async_stream
              else rt.pipeLinkExecute(h, ins, 3, outs, 2))
    assert status == 0, (what, msg())
    check(outs[0].data, outs[1].data, what)
    return msg()

# The eager plan's results, for comparison: the same bytes with and without graphs.
he = ctypes.c_void_p()
assert rt.pipeLinkLoadPipeline(eager_path.encode(), ctypes.byref(he)) == 0, msg()
y0, x0, eager_outs = outputs()
assert rt.pipeLinkExecute(he, ins, 3, eager_outs, 2) == 0, msg()
eager_y = read(y0, (M, N)).copy()
assert graph_counts()["captures"] == 0

# First run of a context: eager (the warm-up); the second captures; the third replays.
y, x_out, outs = outputs()
assert run_and_check(outs, "warm-up") == ""
assert graph_counts()["captures"] == 0 and graph_counts()["launched"] == 0
assert run_and_check(outs, "captured") == ""
c = graph_counts()
assert (c["captures"], c["instantiated"], c["launched"], c["live"]) == (1, 1, 1, 1), c
launches = fake.fake_launches()
assert run_and_check(outs, "replayed") == ""
c = graph_counts()
assert (c["captures"], c["launched"]) == (1, 2), c
assert fake.fake_launches() == launches  # replayed from the graph: no cuLaunchKernel
assert np.array_equal(read(y, (M, N)), eager_y)  # the same bytes as the eager plan's run

# New data at the same pointers: the graph reads memory when it runs.
host["x"][:] *= 2
ctypes.memmove(inputs["x"], host["x"].ctypes.data, host["x"].nbytes)
want_y = (0.5 * host["x"]) @ host["w"] + host["bias"]
assert run_and_check(outs, "new input data") == "" and graph_counts()["captures"] == 1

# ExecuteAsync on another stream launches the same graph there.
assert run_and_check(outs, "async", ctypes.c_void_p(0x5000)) == ""
assert graph_counts()["captures"] == 1 and graph_counts()["launched"] == 4

# A new output pointer is a miss: captured again, into a free slot of the cache.
CACHE = int(sys.argv[4])  # PLK_GRAPH_CACHE, read from core.h by the test
sets = [outs] + [outputs()[2] for _ in range(CACHE + 1)]
run_and_check(sets[1], "second pointer set")
c = graph_counts()
assert (c["captures"], c["instantiated"], c["live"]) == (2, 2, 2), c
# CACHE + 2 pointer sets: at most CACHE graphs live; the least recently used is updated in place.
for k in range(2, CACHE + 2):
    run_and_check(sets[k], f"pointer set {k}")
c = graph_counts()
assert (c["captures"], c["live"], c["instantiated"], c["updated"]) == (CACHE + 2, CACHE, CACHE, 2), c
run_and_check(sets[CACHE + 1], "most recent")  # a hit
assert graph_counts()["captures"] == CACHE + 2
run_and_check(sets[0], "evicted")  # the least recently used two were evicted: a miss
assert graph_counts()["captures"] == CACHE + 3 and graph_counts()["live"] == CACHE

# plk_execute_joined says whether a run launched a captured graph (run()'s last_report.graph_replay).
joined, flag = rt.plk_execute_joined, ctypes.POINTER(ctypes.c_int32)
joined.argtypes = args + args[1:] + [ctypes.c_void_p, ctypes.c_void_p, flag, flag]
replayed = ctypes.c_int32(7)
assert joined(h, ins, 3, sets[0], 2, None, None, None, ctypes.byref(replayed)) == 0, msg()
assert replayed.value == 1 and graph_counts()["captures"] == CACHE + 3, "a hit replays"
assert joined(he, ins, 3, sets[0], 2, None, None, None, ctypes.byref(replayed)) == 0, msg()
assert replayed.value == 0, "an eager plan replays nothing"

# Runtime-allocated outputs: fresh pointers, each a miss, results right, freed by pipeLinkFree.
before = graph_counts()["captures"]
for k in range(3):
    fresh = tensors([(None, (M, N)), (None, (M, K))])
    assert rt.pipeLinkExecute(h, ins, 3, fresh, 2) == 0, msg()
    check(fresh[0].data, fresh[1].data, "runtime-allocated")
    for o in fresh:
        assert rt.pipeLinkFree(o.data) == 0, msg()
assert graph_counts()["captures"] > before

# Inside the caller's capture: launches go into the caller's graph, the core captures nothing.
fake.fake_set_capturing(1)
before = graph_counts()
y2, x2, outs2 = outputs()
assert rt.pipeLinkExecuteAsync(h, ins, 3, outs2, 2, None) == 0, msg()
check(y2, x2, "foreign capture")
assert graph_counts()["captures"] == before["captures"] and graph_counts()["launched"] == before["launched"]
fake.fake_set_capturing(0)

# Threads: each its own outputs and results; the cache stays bounded per context.
failures = []
def worker(k):
    y, x_out, outs = outputs()
    for i in range(30):
        try:
            run_and_check(outs, f"thread {k}", ctypes.c_void_p(0x6000 + k))
        except AssertionError as e:
            failures.append(str(e)); return
threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert not failures, failures[:3]
assert graph_counts()["live"] <= 8 * 64

# A capture that fails (a module that synchronized, say): that run is eager and says so on a success
# status; every later run of the pipeline is eager, with a clean message.
assert rt.pipeLinkDestroyPipeline(h) == 0
assert graph_counts()["live"] == 0  # destroying the pipeline frees its graphs
assert rt.pipeLinkLoadPipeline(plan_path.encode(), ctypes.byref(h)) == 0, msg()
y, x_out, outs = outputs()
run_and_check(outs, "warm-up")
fake.fake_fail_capture(1)
before = graph_counts()
message = run_and_check(outs, "capture failed")
assert "run degraded: cuda_graph: capturing" in message and "CUDA_ERROR_FAKE" in message, message
assert graph_counts()["captures"] == before["captures"]
assert run_and_check(outs, "eager after the failure") == ""
assert graph_counts()["captures"] == before["captures"] and graph_counts()["launched"] == before["launched"]

assert rt.pipeLinkDestroyPipeline(h) == 0 and rt.pipeLinkDestroyPipeline(he) == 0
assert rt.pipeLinkFinalize() == 0
print("OK")
"""
)


def test_cuda_graph_plans_capture_once_replay_and_recapture_on_new_pointers(fake_dir, runtime_lib, tmp_path):
    plan = cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90)
    graph_path, eager_path = tmp_path / "graph.plk", tmp_path / "eager.plk"
    graph_path.write_bytes(with_flags(plan, FLAG_CUDA_GRAPH))
    eager_path.write_bytes(plan)
    proc = _run(fake_dir, runtime_lib, graph_path, GRAPHS, eager_path, graph_cache_size())
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "device, flags, status, words",
    [
        (DEVICE_CPU, FLAG_CUDA_GRAPH, 5, "cuda_graph flag is set on a CPU plan"),
        (DEVICE_CUDA, 0x8000, 4, "header flags 0x8000 this runtime does not know"),
    ],
    ids=["graph flag on a CPU plan", "an unknown flag"],
)
def test_header_flags_are_checked(fake_dir, runtime_lib, tmp_path, device, flags, status, words):
    path = tmp_path / "flags.plk"
    plan = cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90, device=device)
    path.write_bytes(with_flags(plan, flags))
    proc = _run(fake_dir, runtime_lib, path, LOAD_ONLY)
    code, _, message = proc.stdout.partition(" ")
    assert proc.returncode == 0 and int(code) == status and words in message, proc.stdout + proc.stderr


POOL = r"""
import ctypes, sys
import numpy as np
from pipelink.modules.services import PipeLinkTensor

runtime_path, plan_path = sys.argv[1], sys.argv[2]
fake = ctypes.CDLL("libcuda.so.1")
fake.fake_owns.argtypes = [ctypes.c_uint64]
rt = ctypes.CDLL(runtime_path)
rt.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
args = [ctypes.c_void_p, ctypes.POINTER(PipeLinkTensor), ctypes.c_int32]
rt.pipeLinkExecute.argtypes = args + args[1:]
rt.pipeLinkMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.pipeLinkFree.argtypes = [ctypes.c_void_p]
rt.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
msg = lambda: rt.pipeLinkGetLastErrorMessage().decode()

class Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("allocated", "peak", "cached", "live", "reused")] + [
        ("allocator", ctypes.c_int32)]

def stats():
    s = Stats()
    assert rt.pipeLinkGetMemoryPoolStats(ctypes.byref(s)) == 0
    return s

def malloc(n):
    p = ctypes.c_void_p()
    assert rt.pipeLinkMalloc(ctypes.byref(p), n) == 0, msg()
    return p.value

counts = (ctypes.c_int * 2)()
def allocs():
    fake.fake_alloc_counts(counts)
    return counts[0], counts[1]  # cuMemAlloc, cuMemAllocAsync

# A usable device: the default is ASYNC, and pipeLinkMalloc serves device memory.
s0 = stats()
assert s0.allocator == 0, s0.allocator
before = allocs()
p = malloc(1000)
assert fake.fake_owns(p) and p % 256 == 0
assert allocs() == (before[0], before[1] + 1)  # cuMemAllocAsync on the runtime's stream
s1 = stats()
assert s1.allocated == s0.allocated + 1024 and s1.live == s0.live + 1 and s1.peak >= s1.allocated
# Freed: cached (still the device's), reused for the next request of its size class.
assert rt.pipeLinkFree(p) == 0, msg()
assert fake.fake_owns(p) and stats().cached == s0.cached + 1024
assert rt.pipeLinkFree(p) == 2 and "not allocated by pipeLinkMalloc" in msg()
q = malloc(900)
assert q == p and stats().reused == s0.reused + 1 and allocs()[1] == before[1] + 1
r = malloc(5000)  # another size class: a new block
assert r != p and allocs()[1] == before[1] + 2
for ptr in (q, r):
    assert rt.pipeLinkFree(ptr) == 0
# Clear: the cached device blocks go back to the driver.
assert rt.pipeLinkClearMemoryPool() == 0
assert not fake.fake_owns(p) and not fake.fake_owns(r) and stats().cached == 0

# LEGACY: cuMemAlloc.
assert rt.pipeLinkSetMemoryAllocator(1) == 0, msg()
assert stats().allocator == 1
before = allocs()
p = malloc(300)
assert fake.fake_owns(p) and allocs() == (before[0] + 1, before[1])
assert rt.pipeLinkFree(p) == 0

# HOST: the host pool (writable here), never the driver.
assert rt.pipeLinkSetMemoryAllocator(2) == 0, msg()
assert stats().allocator == 2
before = allocs()
h = malloc(4096)
assert not fake.fake_owns(h) and allocs() == before
ctypes.memset(h, 0, 4096)
assert rt.pipeLinkFree(h) == 0
assert rt.pipeLinkSetMemoryAllocator(7) == 2

# A CPU plan handed device memory labelled CPU: a status, not a crash (the driver is open here).
assert rt.pipeLinkInitialize() == 0
handle = ctypes.c_void_p()
assert rt.pipeLinkLoadPipeline(plan_path.encode(), ctypes.byref(handle)) == 0, msg()
shapes = [(8, 1024), (1024,), (1024,), ()]
keep = []
def tensors(ptrs, shapes):
    out = (PipeLinkTensor * len(ptrs))()
    for t, ptr, shape in zip(out, ptrs, shapes):
        dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        keep.append(dims)
        t.data, t.ndim, t.shape = ptr, len(shape), dims
        t.device.device_type, t.device.device_id = 1, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
    return out
host = [np.ones(s, np.float32) for s in shapes]
keep.extend(host)
host_ins = tensors([a.ctypes.data for a in host], shapes)
outs = tensors([None] * 3, [(8, 1024), (8,), (8,)])
assert rt.pipeLinkExecute(handle, host_ins, 4, outs, 3) == 0, msg()
for o in outs:
    assert rt.pipeLinkFree(o.data) == 0
assert rt.pipeLinkSetMemoryAllocator(0) == 0
device = [malloc(max(a.nbytes, 1)) for a in host]
ins = tensors([host[0].ctypes.data, device[1], host[2].ctypes.data, host[3].ctypes.data], shapes)
outs = tensors([None] * 3, [(8, 1024), (8,), (8,)])
assert rt.pipeLinkExecute(handle, ins, 4, outs, 3) == 2
assert "input 1 ('gamma_tensor')" in msg() and "CUDA device memory" in msg(), msg()
y = malloc(8 * 1024 * 4)
outs = tensors([y, None, None], [(8, 1024), (8,), (8,)])
assert rt.pipeLinkExecute(handle, host_ins, 4, outs, 3) == 2 and "output 0" in msg(), msg()
for ptr in device + [y]:
    assert rt.pipeLinkFree(ptr) == 0
assert rt.pipeLinkFinalize() == 0  # the last Finalize empties the cache: device blocks freed
assert not fake.fake_owns(y)
print("OK")
"""


def test_pipelinkmalloc_serves_device_memory_from_a_cached_pool(fake_dir, runtime_lib, plans):
    # The fake driver has a device: the default allocator is ASYNC; LEGACY and HOST on request; a CPU plan
    # refuses device memory labelled CPU.
    proc = _run(fake_dir, runtime_lib, plans / "ln.plk", POOL)
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr


CHECKED = (
    CHILD.split("# Execute and ExecuteAsync")[0]
    + r"""
policy = sys.argv[3]
y, x_out, outs = outputs()
assert rt.pipeLinkExecute(h, ins, 3, outs, 2) == 0 and msg() == "", msg()  # finite: nothing to say
check(y, x_out, "a clean run")
bad = host["x"].copy()
bad[0, 0] = np.nan  # h = 0.5 x has one NaN: the relu's check_finite sees it
x_bad = device(bad.shape)
ctypes.memmove(x_bad, bad.ctypes.data, bad.nbytes)
ins_bad = tensors([(x_bad, bad.shape), (inputs["w"], (K, N)), (inputs["bias"], (N,))])
y, x_out, outs = outputs()
status = rt.pipeLinkExecute(h, ins_bad, 3, outs, 2)
why = "stage 'relu' (a built-in kernel) produced 1 non-finite values (NaN/Inf) in output 'h'"
if policy == "fail":
    assert status == 9 and why in msg(), msg()
elif policy == "identity":  # h = x: the product reads x itself
    assert status == 0 and msg().startswith("PIPELINK_SUCCESS: run degraded: 'relu' identity"), msg()
    want = bad @ host["w"] + host["bias"]
    got = read(y, (M, N))
    assert np.allclose(got[1:], want[1:], rtol=1e-4, atol=1e-4) and np.isnan(got[0]).all()
else:  # skip: h is missing, so is the product's y, which fails the run; x_out is still returned
    assert status == 9 and "outputs 'y' are missing" in msg(), msg()
    assert "'gemm' skipped (input 'h' missing)" in msg(), msg()
    assert np.array_equal(read(x_out, (M, K)), bad, equal_nan=True)
assert rt.pipeLinkDestroyPipeline(h) == 0 and rt.pipeLinkFinalize() == 0
print("OK")
"""
)


@pytest.mark.parametrize("policy", ["fail", "identity", "skip"])
def test_a_builtin_stages_check_finite_and_its_on_error_run_in_the_core(
    fake_dir, runtime_lib, tmp_path, policy
):
    # Format 5's check record after a built-in kernel: its output counted on the host after the launch, then
    # its on_error (the same code as a native module's: plk_apply_policy).
    plan = tmp_path / "checked.plk"
    plan.write_bytes(cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90, check=policy))
    proc = _run(fake_dir, runtime_lib, plan, CHECKED, policy)
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr


def test_a_check_record_needs_a_cuda_plan_of_format_5(fake_dir, runtime_lib, tmp_path):
    plan = tmp_path / "old.plk"
    plan.write_bytes(
        cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90, check="skip", version=4)
    )
    proc = _run(fake_dir, runtime_lib, plan, LOAD_ONLY)
    code, _, message = proc.stdout.partition(" ")
    assert int(code) == 5 and "check stages in CUDA plans of format 5" in message, proc.stdout + proc.stderr


def test_a_cuda_graph_plan_with_a_check_record_is_refused_as_corrupt(fake_dir, runtime_lib, tmp_path):
    # The check decides on the host after the launch, which a CUDA graph cannot replay: the writer never
    # makes such a plan, and the loader refuses one.
    plan = cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90, check="identity")
    path = tmp_path / "graph_checked.plk"
    path.write_bytes(with_flags(plan, FLAG_CUDA_GRAPH))
    proc = _run(fake_dir, runtime_lib, path, LOAD_ONLY)
    code, _, message = proc.stdout.partition(" ")
    assert int(code) == 5 and "a cuda_graph plan has a stage with an on_error" in message, (
        proc.stdout + proc.stderr
    )


CAPTURED_CHECK = (
    CHILD.split("# Execute and ExecuteAsync")[0]
    + r"""
y, x_out, outs = outputs()
assert rt.pipeLinkExecute(h, ins, 3, outs, 2) == 0, msg()  # warm: an idle context exists
fake.fake_set_capturing(1)
assert rt.pipeLinkExecuteAsync(h, ins, 3, outs, 2, None) == 2, msg()
assert "cannot run inside a stream capture: stage 'relu' has check_finite" in msg(), msg()
fake.fake_set_capturing(0)
assert rt.pipeLinkDestroyPipeline(h) == 0 and rt.pipeLinkFinalize() == 0
print("OK")
"""
)


def test_a_plan_with_a_check_record_refuses_a_callers_capture(fake_dir, runtime_lib, tmp_path):
    plan = tmp_path / "checked.plk"
    plan.write_bytes(cuda_plan(kernel=_kernel(name="fake_scale"), cubin=FAKE_CUBIN, cc=90, check="skip"))
    proc = _run(fake_dir, runtime_lib, plan, CAPTURED_CHECK)
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr
