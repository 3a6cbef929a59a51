"""The native core's CUDA path against issue 18's targets, side by side, in one command (GPU host):

    python3 -m benchmarks.native_core [--seconds 3] [--iterations 20000]

1. host time of ``pipeLinkExecuteAsync`` per stage over the bare launches it makes (target <= 1 us/stage):
   20-stage and 1-stage relu chains; a C harness (``native_core_harness.c``, built here) times the core and
   the same launches made directly with ``cuLaunchKernel`` from the plan's own cubins;
2. the seed's service shape: 16 threads each running the T=8 MLP block (bf16, and fp32) on its own stream
   through the core, from C threads (``native_core_service.c``) and from Python threads, aggregate runs/s
   against 1 thread (target >= 4x) and against PyTorch from 16 threads (target >= 1x); Python threads also
   at 4, and calling the bare core through ctypes (the control: the interpreter's own limit);
3. loading the MLP plan (target <= 5 ms); 4. the library's size (target <= 1 MB);
5. Python's eager ``run()`` on PyTorch CUDA tensors, through the core (``native=True``, and the default
   AUTO) and through the Python executor (``native=False``), against PyTorch's eager ops: a 1-stage
   relu (target <= 1x PyTorch) and the 20-stage chain (target <= 0.5x PyTorch) — wall time per call over
   many back-to-back calls, one sync at the end.
Every line starting with ``TARGET`` is one target: measured value, limit, PASS or FAIL.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pipelink as pl
from pipelink.modules.build import include_dir
from pipelink.modules.services import PipeLinkTensor
from pipelink.native import lib_dir, library_path, open_runtime
from pipelink.native.build import find_compiler
from pipelink.runtime.executor import compile_plan
from pipelink.runtime.planfile import _launches, _signature

from . import cases

HARNESS = Path(__file__).resolve().parent / "native_core_harness.c"
T, D = 8, 1024


def _chain(stages: int) -> dict:
    names = ["x"] + [f"t{i}" for i in range(1, stages)] + ["y"]
    return {
        "name": f"relu_chain_{stages}",
        "inputs": {"x": {"shape": [1024], "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [
            {"name": "relu", "id": f"r{i}", "inputs": [names[i]], "outputs": [names[i + 1]]}
            for i in range(stages)
        ],
    }


def _compile(doc: dict, tmp: Path, *, cuda_graph: bool = False):
    config = tmp / f"{doc['name']}.json"
    config.write_text(json.dumps(doc))
    pipe = pl.load(config, device="cuda")
    suffix = "_graph" if cuda_graph else ""
    return pipe, pipe.save(tmp / f"{doc['name']}{suffix}.plk", cuda_graph=cuda_graph)


def _launch_lines(pipe, tmp: Path) -> Path:
    """The harness's description of the plan's launches, from the same compiled steps as the plan."""
    signature = _signature(pipe, None, contiguous=True)
    plan = compile_plan(pipe.graph, pipe._registry, pipe._backend, {}, signature, allocate=False)
    lines = []
    try:
        for step in plan.steps:
            for launch in _launches(step):
                cubin = tmp / f"{launch.name}.{hashlib.sha256(launch.cubin).hexdigest()[:16]}.cubin"
                cubin.write_bytes(launch.cubin)
                params = [
                    ("p" if p[1] is not None else "n") if p[0] == "ptr" else f"{p[0]}:{p[1]!r}"
                    for p in launch.params
                ]
                lines.append(
                    " ".join([str(cubin), launch.name, *map(str, launch.dims), str(len(params)), *params])
                )
    finally:
        plan.release()
    path = tmp / f"{pipe.name}.launches"
    path.write_text("\n".join(lines) + "\n")
    return path


def host_overhead(tmp: Path, iterations: int) -> dict[int, tuple[float, float]]:
    """stages -> (core us/run, bare us/run) from the C harness."""
    exe = tmp / "native_core_harness"
    cc = find_compiler()
    lib = str(lib_dir())
    build = [*cc, "-std=c11", "-O2", f"-I{include_dir()}", str(HARNESS), "-o", str(exe)]
    subprocess.run([*build, f"-L{lib}", "-lpipelink_runtime", "-ldl", f"-Wl,-rpath,{lib}"], check=True)
    out = {}
    for stages in (1, 20):
        pipe, plan = _compile(_chain(stages), tmp)
        with pipe:
            launches = _launch_lines(pipe, tmp)
        proc = subprocess.run(
            [str(exe), str(plan), str(launches), str(iterations)], capture_output=True, text=True, check=True
        )
        fields = proc.stdout.split()
        out[stages] = (
            float(fields[fields.index("execute_async_us") + 1]),
            float(fields[fields.index("bare_launches_us") + 1]),
        )
        print(f"relu chain of {stages:2d}: {proc.stdout.strip()}")
    return out


def _tensor_array(tensors) -> tuple:
    keep, arr = [], (PipeLinkTensor * len(tensors))()
    for t, x in zip(arr, tensors, strict=True):
        dims = (ctypes.c_int64 * x.dim())(*x.shape)
        keep.append(dims)
        dt = pl.get_dtype(str(x.dtype).removeprefix("torch."))
        t.data, t.ndim, t.shape = x.data_ptr(), x.dim(), dims
        t.device.device_type, t.device.device_id = 2, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = dt.dl_code, dt.bits, 1
    return arr, keep


SERVICE_C = Path(__file__).resolve().parent / "native_core_service.c"
SERVICE_DTYPES = ("bfloat16", "float32")  # the suite's MLP block is bf16; fp32's products are device-bound


def _service_exe(tmp: Path) -> Path:
    exe = tmp / "native_core_service"
    lib = str(lib_dir())
    build = [*find_compiler(), "-std=c11", "-O2", f"-I{include_dir()}", str(SERVICE_C), "-o", str(exe)]
    subprocess.run(
        [*build, f"-L{lib}", "-lpipelink_runtime", "-ldl", "-lpthread", f"-Wl,-rpath,{lib}"], check=True
    )
    return exe


def service(tmp: Path, seconds: float) -> dict[str, float]:
    """Aggregate runs/s of the T=8 MLP block, per dtype: Python's ``run()`` from 1 and 16 threads (the
    core through the C hot path, the GIL released in the call), the core from 1 and 16 C threads
    (``native_core_service.c``: eager and cuda_graph plans, no Python in the loop), and PyTorch from 1 and
    16 threads (each its own stream)."""
    import torch

    exe = _service_exe(tmp)
    rates = {}
    for dtype in SERVICE_DTYPES:
        case = cases.mlp(T, D, dtype)
        case.doc["name"] = f"mlp_{dtype}"
        pipe, graph_plan = _compile(case.doc, tmp, cuda_graph=True)
        pipe.close()
        pipe, plan = _compile(case.doc, tmp)  # kept open: Python's run() from threads, the default path
        mlp = case.torch_fn(torch)
        tdtype = getattr(torch, dtype)

        def inputs(case=case, tdtype=tdtype):
            return [
                (torch.randn(s, device="cuda") * sc + off).to(tdtype) for s, sc, off in case.inputs.values()
            ]

        def run_worker(stop, counts, k, pipe=pipe, inputs=inputs, case=case):
            # Python's run(): the C hot path (runtime/_hotpath.c), the GIL released inside the core.
            feed, stream = dict(zip(case.inputs, inputs(), strict=True)), torch.cuda.Stream()
            torch.cuda.synchronize()
            with torch.cuda.stream(stream):
                while not stop.is_set():
                    pipe.run(feed)
                    stream.synchronize()
                    counts[k] += 1

        def ctypes_worker(stop, counts, k, plan=plan, inputs=inputs, mlp=mlp):
            # The control: Python threads calling pipeLinkExecuteAsync straight through ctypes (which
            # releases the GIL around the call) with outputs made once - no PipeLink Python or C-API code
            # in the loop, so what it cannot reach is the interpreter's own limit on threads.
            rt, h, ins = _service_runtime(plan), ctypes.c_void_p(), inputs()
            assert rt.pipeLinkLoadPipeline(str(plan).encode(), ctypes.byref(h)) == 0
            outs = [torch.empty_like(mlp(*ins))]
            (in_arr, keep_in), (out_arr, keep_out) = _tensor_array(ins), _tensor_array(outs)
            stream = torch.cuda.Stream()
            handle = ctypes.c_void_p(stream.cuda_stream)
            torch.cuda.synchronize()
            while not stop.is_set():
                rt.pipeLinkExecuteAsync(h, in_arr, len(ins), out_arr, 1, handle)
                stream.synchronize()
                counts[k] += 1
            rt.pipeLinkDestroyPipeline(h)
            del keep_in, keep_out

        def torch_worker(stop, counts, k, inputs=inputs, mlp=mlp):
            ins, stream = inputs(), torch.cuda.Stream()
            torch.cuda.synchronize()
            with torch.cuda.stream(stream), torch.inference_mode():
                while not stop.is_set():
                    mlp(*ins)
                    stream.synchronize()
                    counts[k] += 1

        def c_threads(path: Path, threads: int) -> float:
            proc = subprocess.run(
                [str(exe), str(path), str(threads), str(seconds)], capture_output=True, text=True, check=True
            )
            fields = proc.stdout.split()
            return float(fields[fields.index("runs_per_s") + 1])

        for threads in (1, 4, 16):
            rates[f"{dtype}_core_py_{threads}"] = _rate(run_worker, threads, seconds)
            rates[f"{dtype}_core_ctypes_{threads}"] = _rate(ctypes_worker, threads, seconds)
            if threads != 4:
                rates[f"{dtype}_core_c_{threads}"] = c_threads(plan, threads)
                rates[f"{dtype}_core_c_graph_{threads}"] = c_threads(graph_plan, threads)
                rates[f"{dtype}_torch_{threads}"] = _rate(torch_worker, threads, seconds)
        pipe.close()
    return rates


def _service_runtime(plan: Path) -> ctypes.CDLL:
    rt = open_runtime()
    rt.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    rt.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
    assert rt.pipeLinkInitialize() == 0, plan
    return rt


def _rate(worker, threads: int, seconds: float) -> float:
    """Runs/s of ``threads`` threads of ``worker(stop, counts, k)`` over ``seconds``, after a warm-up."""
    stop, counts = threading.Event(), [0] * threads
    pool = [threading.Thread(target=worker, args=(stop, counts, k)) for k in range(threads)]
    for t in pool:
        t.start()
    time.sleep(0.5)  # contexts, streams and handles made: then count
    first, begin = sum(counts), time.perf_counter()
    time.sleep(seconds)
    last, end = sum(counts), time.perf_counter()
    stop.set()
    for t in pool:
        t.join()
    return (last - first) / (end - begin)


def load_ms(tmp: Path) -> float:
    """Median time to load (and destroy) the T=8 MLP plan, in ms."""
    pipe, plan = _compile(cases.mlp(T, D, "float32").doc, tmp)
    pipe.close()
    core = open_runtime()
    core.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    core.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
    assert core.pipeLinkInitialize() == 0
    samples = []
    for _ in range(21):
        handle = ctypes.c_void_p()
        t0 = time.perf_counter()
        assert core.pipeLinkLoadPipeline(str(plan).encode(), ctypes.byref(handle)) == 0
        samples.append((time.perf_counter() - t0) * 1e3)
        core.pipeLinkDestroyPipeline(handle)
    return statistics.median(samples[1:])  # the first also opens the driver and cuBLASLt


def wall_us_per_call(fns: dict, iterations: int, rounds: int = 7) -> dict:
    """Microseconds per call of each of ``fns`` (name -> callable) over back-to-back calls with one device
    sync at the end of a loop of ``iterations // 10`` calls, after 200 warm-up calls each. The callables
    take turns, one loop each per round, so a drift of the host's speed (this host's driver calls vary by
    1.5x between minutes) falls on all of them alike: {name: [us per call in each round]}."""
    import torch

    for fn in fns.values():
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    times: dict = {name: [] for name in fns}
    n = iterations // 10
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / n * 1e6)
    return times


def ratio(times: dict, a: str, b: str) -> float:
    """The median over rounds of ``a``'s time over ``b``'s in the same round (:func:`wall_us_per_call`)."""
    return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))


def python_runs(tmp: Path, iterations: int) -> dict[int, dict[str, list[float]]]:
    """Microseconds per eager call, per round: {stages: {"native" | "auto" | "python" | "torch": [us]}}."""
    import torch

    out = {}
    x = torch.randn(1024, device="cuda")
    for stages in (1, 20):
        config = tmp / f"run_chain_{stages}.json"
        config.write_text(json.dumps(_chain(stages)))
        calls = {
            "native": pl.load(config, device="cuda", native=True),
            "auto": pl.load(config, device="cuda"),  # the default: these runs go through the core
            "python": pl.load(config, device="cuda", native=False),
        }
        want = torch.relu(x)
        for mode, pipe in calls.items():
            got = torch.from_dlpack(pipe.run(x=x)["y"])
            assert torch.equal(got, want), f"{mode} run of the {stages}-stage chain differs from torch.relu"
        runs = {mode: (lambda p=pipe: p.run(x=x)) for mode, pipe in calls.items()}

        def torch_chain(n=stages):
            y = x
            for _ in range(n):
                y = torch.relu(y)
            return y

        runs["torch"] = torch_chain
        out[stages] = wall_us_per_call(runs, iterations)
        for pipe in calls.values():
            pipe.close()
    return out


def _target(name: str, value: float, limit: float, unit: str, higher_is_better: bool = False) -> None:
    ok = value >= limit if higher_is_better else value <= limit
    sign = ">=" if higher_is_better else "<="
    print(f"TARGET {name}: {value:.3f} {unit} ({sign} {limit:g}) {'PASS' if ok else 'FAIL'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--iterations", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        overhead = host_overhead(tmp, args.iterations)
        rates = service(tmp, args.seconds)
        load = load_ms(tmp)
        python = python_runs(tmp, args.iterations)
    (c20, b20), (c1, b1) = overhead[20], overhead[1]
    print(f"service (T={T} MLP block, runs/s): " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()))
    _target(
        "pipeLinkExecuteAsync host time over bare launches, per stage (20 stages)",
        (c20 - b20) / 20,
        1.0,
        "us",
    )
    _target("the same for a 1-stage plan", c1 - b1, 1.0, "us")
    for dtype in SERVICE_DTYPES:
        r = {k.removeprefix(f"{dtype}_"): v for k, v in rates.items() if k.startswith(dtype)}
        _target(
            f"{dtype}: 16 threads vs 1 thread (core, C threads)",
            r["core_c_16"] / r["core_c_1"],
            4.0,
            "x",
            True,
        )
        _target(
            f"{dtype}: 16 threads vs 1 thread (core, C threads, cuda_graph plan)",
            r["core_c_graph_16"] / r["core_c_graph_1"],
            4.0,
            "x",
            True,
        )
        _target(
            f"{dtype}: 16 threads vs 1 thread (Python run())",
            r["core_py_16"] / r["core_py_1"],
            4.0,
            "x",
            True,
        )
        _target(
            f"{dtype}: 16 threads, Python run() vs PyTorch",
            r["core_py_16"] / r["torch_16"],
            1.0,
            "x",
            True,
        )
        print(f"{dtype}: PyTorch 16 threads vs 1 thread: {r['torch_16'] / r['torch_1']:.2f}x")
        py, bare = (r["core_py_4"], r["core_py_16"]), (r["core_ctypes_4"], r["core_ctypes_16"])
        print(
            f"{dtype}: Python threads, 4 and 16 vs 1: run() {py[0] / r['core_py_1']:.2f}x, "
            f"{py[1] / r['core_py_1']:.2f}x; the bare core through ctypes (the interpreter's limit) "
            f"{bare[0] / r['core_ctypes_1']:.2f}x, {bare[1] / r['core_ctypes_1']:.2f}x"
        )
    _target("MLP plan load time", load, 5.0, "ms")
    _target("libpipelink_runtime.so size", library_path().stat().st_size / 2**20, 1.0, "MiB")
    for stages, limit in ((1, 1.0), (20, 0.5)):
        times = python[stages]
        print(
            f"python eager run, {stages}-stage relu chain (us/call, median of {len(times['torch'])} "
            "interleaved rounds): " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in times.items())
        )
        rounds = zip(times["native"], times["torch"], strict=True)
        print("  native / torch in each round: " + " ".join(f"{x / y:.3f}" for x, y in rounds))
        _target(
            f"Python eager run() through the core vs PyTorch eager, {stages} stage(s)",
            ratio(times, "native", "torch"),
            limit,
            "x",
        )


if __name__ == "__main__":
    main()
