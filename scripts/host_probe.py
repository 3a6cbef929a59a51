"""Host-side costs on a GPU machine: where a ``run()``'s microseconds go, and what each primitive costs.

python scripts/host_probe.py [--runs 3000] [--profile]

Prints per-call host times (median of 5 loops) of the CUDA primitives a run uses (launch through cuda.core,
through cuda.bindings with a prebuilt parameter array, through ctypes; graph launch; event record; PyTorch
accessors) and of whole ``run()`` calls, eager and graph mode; with ``--profile``, a cProfile of each run.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import pstats
import statistics
import time

import numpy as np

import pipelink as pl


def per_call(fn, n: int) -> float:
    for _ in range(min(n, 200)):
        fn()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--profile", action="store_true")
    a = parser.parse_args()
    n = a.runs

    import torch
    from cuda.bindings import driver

    from pipelink.backends import get_backend

    backend = get_backend("cuda")
    stream = backend.default_stream()
    rows = []

    def row(what, us):
        rows.append((what, us))
        print(f"{what:<60}{us:9.2f} us", flush=True)

    # -- PyTorch accessors and its own launch ------------------------------------------------------------
    x = torch.randn(1, 1024, device="cuda")
    g = torch.randn(1024, device="cuda")
    b = torch.randn(1024, device="cuda")
    row(
        "torch layer_norm 1x1024 (host per call)",
        per_call(lambda: torch.nn.functional.layer_norm(x, (1024,), g, b), n),
    )
    row("torch relu 1024 (host per call)", per_call(lambda: torch.relu(g), n))
    row("torch x.data_ptr()", per_call(x.data_ptr, n))
    row("torch tuple(x.shape)", per_call(lambda: tuple(x.shape), n))
    row("torch x.stride()", per_call(x.stride, n))
    row("torch x.device.index", per_call(lambda: x.device.index, n))
    row("torch x.dtype", per_call(lambda: x.dtype, n))
    row("torch _cuda_getCurrentRawStream", per_call(lambda: torch._C._cuda_getCurrentRawStream(0), n))
    row(
        "torch.cuda.current_stream().cuda_stream",
        per_call(lambda: torch.cuda.current_stream().cuda_stream, n),
    )

    # -- our kernel launch paths ---------------------------------------------------------------------
    pipe = pl.load({"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}, device="cuda")
    xin = backend.import_input(np.random.rand(1024).astype(np.float32))
    yout = backend.empty((1024,), "float32")
    pipe.run(x=xin)
    step = pipe._last_plan.steps[0]  # noqa: SLF001 - a probe
    kernel = step.kernel
    row(
        "PlanLaunch __call__ (bind pointers, cuLaunchKernel)",
        per_call(lambda: kernel([xin], [yout], stream), n),
    )
    from cuda.core import LaunchConfig, launch

    plan = kernel.plan
    args = plan.args(x=xin.ptr, y=yout.ptr)
    config = LaunchConfig(grid=plan.grid, block=plan.block, shmem_size=plan.shared_mem)
    row("cuda.core launch, args prebuilt", per_call(lambda: launch(stream, config, kernel.kernel, *args), n))
    fn, dims, paddr = kernel._function, kernel._dims, kernel._params_address  # noqa: SLF001
    hs = driver.CUstream(int(stream.handle))
    row(
        "driver.cuLaunchKernel, param array prebuilt",
        per_call(lambda: driver.cuLaunchKernel(fn, *dims, hs, paddr, 0), n),
    )
    libcuda = ctypes.CDLL("libcuda.so.1")
    cl = libcuda.cuLaunchKernel
    cl.restype = ctypes.c_int
    cl.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    sh, handle = int(stream.handle), int(kernel.kernel.handle)
    row(
        "ctypes cuLaunchKernel, param array prebuilt", per_call(lambda: cl(handle, *dims, sh, paddr, None), n)
    )
    backend.synchronize()

    # -- events and graphs ---------------------------------------------------------------------------
    from cuda.core import EventOptions

    opts = EventOptions(timing_enabled=False)
    row("cuda.core stream.record(options)", per_call(lambda: stream.record(options=opts), n))
    ev = stream.record(options=opts)
    eh = ev.handle
    row("driver.cuEventRecord (reused event)", per_call(lambda: driver.cuEventRecord(eh, hs), n))
    cer = libcuda.cuEventRecord
    cer.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    eint = int(eh)
    row("ctypes cuEventRecord (reused event)", per_call(lambda: cer(eint, sh), n))
    row("cuda.core event.is_done", per_call(lambda: ev.is_done, n))
    cq = libcuda.cuEventQuery
    cq.argtypes = [ctypes.c_void_p]
    row("ctypes cuEventQuery", per_call(lambda: cq(eint), n))
    gpipe = pl.load(
        {"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]},
        device="cuda",
        cuda_graph=True,
        static_outputs=True,
    )
    for _ in range(3):
        gpipe.run(x=xin)
    gplan = gpipe._last_plan  # noqa: SLF001
    gexec = next(iter(gplan.bound_graphs.values())).exec
    row("driver.cuGraphLaunch", per_call(lambda: driver.cuGraphLaunch(gexec, hs), n))
    cg = libcuda.cuGraphLaunch
    cg.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    gint = int(gexec)
    row("ctypes cuGraphLaunch", per_call(lambda: cg(gint, sh), n))
    backend.synchronize()

    # -- Python objects of a run -------------------------------------------------------------------------
    from pipelink.runtime.report import RunReport, StageReport

    row(
        "pl.Tensor(ptr, shape, dtype, device, strides)",
        per_call(lambda: pl.Tensor(x.data_ptr(), (1, 1024), "float32", "cuda:0", (1024, 1)), n),
    )
    row("RunReport()", per_call(RunReport, n))
    row("StageReport(...)", per_call(lambda: StageReport("s", "relu", variant="v"), n))

    # -- whole runs ----------------------------------------------------------------------------------
    sets = [
        {
            "x": torch.randn(1, 1024, device="cuda"),
            "gamma": torch.randn(1024, device="cuda"),
            "beta": torch.randn(1024, device="cuda"),
        }
        for _ in range(3)
    ]
    doc = {
        "inputs": {
            "x": {"shape": [1, 1024], "dtype": "float32"},
            "gamma": {"shape": [1024], "dtype": "float32"},
            "beta": {"shape": [1024], "dtype": "float32"},
        },
        "pipeline": [{"name": "layer_norm", "inputs": ["x", "gamma", "beta"], "outputs": ["y"]}],
    }
    chain = {
        "inputs": {"x": {"shape": [4096], "dtype": "float32"}},
        "pipeline": [
            {
                "name": "relu",
                "id": f"s{i}",
                "inputs": ["x" if i == 0 else f"t{i}"],
                "outputs": ["y" if i == 19 else f"t{i + 1}"],
            }
            for i in range(20)
        ],
    }
    cx = [{"x": torch.randn(4096, device="cuda")} for _ in range(3)]
    d, h = 1024, 4096
    mlp = {
        "pipeline": [
            {"name": "layer_norm", "id": "ln", "inputs": ["x", "gamma", "beta"], "outputs": ["h"]},
            {
                "name": "gemm",
                "id": "fc1",
                "inputs": ["h", "w1", "b1"],
                "outputs": ["u"],
                "attrs": {"activation": "gelu"},
            },
            {"name": "gemm", "id": "fc2", "inputs": ["u", "w2", "b2", "x"], "outputs": ["y"]},
        ]
    }
    bf = torch.bfloat16
    mx = [
        {
            "x": torch.randn(8, d, device="cuda", dtype=bf),
            "gamma": torch.randn(d, device="cuda", dtype=bf),
            "beta": torch.randn(d, device="cuda", dtype=bf),
            "w1": torch.randn(d, h, device="cuda", dtype=bf),
            "b1": torch.randn(h, device="cuda", dtype=bf),
            "w2": torch.randn(h, d, device="cuda", dtype=bf),
            "b2": torch.randn(d, device="cuda", dtype=bf),
        }
        for _ in range(3)
    ]

    def torch_mlp(s):
        hh = torch.nn.functional.layer_norm(s["x"], (d,), s["gamma"], s["beta"])
        u = torch.nn.functional.gelu(torch.addmm(s["b1"], hh, s["w1"]))
        return s["x"] + torch.addmm(s["b2"], u, s["w2"])

    row("torch MLP T=8 d=1024 bf16 eager (host per call)", per_call(lambda: torch_mlp(mx[0]), n))
    cases = (
        ("layer_norm 1x1024, 3 torch inputs", doc, sets),
        ("relu chain x20", chain, cx),
        ("mlp T=8 d=1024 bf16, 7 inputs", mlp, mx),
    )
    for label, d, ins in cases:
        for mode in ("eager", "graph"):
            p = pl.load(d, device="cuda", cuda_graph=mode == "graph", static_outputs=mode == "graph")
            k = [0]

            def call(p=p, ins=ins, k=k):
                k[0] += 1
                return p.run(**ins[k[0] % 3])

            row(f"run() {label}, {mode}, rotating 3 sets", per_call(call, n))
            row(f"run() {label}, {mode}, same inputs", per_call(lambda p=p, ins=ins: p.run(**ins[0]), n))
            if a.profile:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(n):
                    call()
                prof.disable()
                print(f"--- profile: {label}, {mode}")
                pstats.Stats(prof).sort_stats("tottime").print_stats(22)
            backend.synchronize()
            p.close()


if __name__ == "__main__":
    main()
