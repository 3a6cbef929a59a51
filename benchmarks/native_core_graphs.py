"""The native core's CUDA-graph mode (a plan's ``cuda_graph`` flag) vs eager plans and PyTorch (GPU host):

    python3 -m benchmarks.native_core_graphs [--iterations 20000]

1. host time of one ``pipeLinkExecuteAsync`` of a 1- and a 20-stage relu chain, eager plan against
   cuda_graph plan (one ``cuGraphLaunch`` once captured), from the C harness of ``benchmarks.native_core``;
2. wall time per run, many runs back to back on one stream and one sync at the end, of the same chains on
   1,024 floats: the core's eager and cuda_graph plans (``pipeLinkExecuteAsync`` through ctypes on
   PyTorch's current stream), PyTorch eager and PyTorch's CUDA graph of the same ops (``graph.replay()``).
Every line starting with ``TARGET`` is one target (issue 18: graph mode <= PyTorch's CUDA graph).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

import pipelink as pl
from pipelink.modules.build import include_dir
from pipelink.native import lib_dir, open_runtime
from pipelink.native.build import find_compiler

from .native_core import HARNESS, _chain, _launch_lines, _target, _tensor_array, ratio, wall_us_per_call


def _plans(stages: int, tmp: Path) -> tuple:
    config = tmp / f"chain_{stages}.json"
    config.write_text(json.dumps(_chain(stages)))
    pipe = pl.load(config, device="cuda")
    eager = pipe.save(tmp / f"chain_{stages}_eager.plk", cuda_graph=False)
    graph = pipe.save(tmp / f"chain_{stages}_graph.plk", cuda_graph=True)
    return pipe, eager, graph


def host_times(tmp: Path, iterations: int) -> dict[tuple[int, str], float]:
    """{(stages, "eager" | "graph" | "bare"): host us per ExecuteAsync (bare: the launches themselves)}."""
    exe = tmp / "native_core_harness"
    lib = str(lib_dir())
    build = [*find_compiler(), "-std=c11", "-O2", f"-I{include_dir()}", str(HARNESS), "-o", str(exe)]
    subprocess.run([*build, f"-L{lib}", "-lpipelink_runtime", "-ldl", f"-Wl,-rpath,{lib}"], check=True)
    out = {}
    for stages in (1, 20):
        pipe, eager, graph = _plans(stages, tmp)
        with pipe:
            launches = _launch_lines(pipe, tmp)
        for mode, plan in (("eager", eager), ("graph", graph)):
            argv = [str(exe), str(plan), str(launches), str(iterations)]
            proc = subprocess.run(argv, capture_output=True, text=True, check=True)
            fields = proc.stdout.split()
            out[(stages, mode)] = float(fields[fields.index("execute_async_us") + 1])
            out[(stages, "bare")] = float(fields[fields.index("bare_launches_us") + 1])
    return out


def wall_times(tmp: Path, iterations: int) -> dict[int, dict[str, list[float]]]:
    """{stages: {"core_eager" | "core_graph" | "torch" | "torch_graph": [wall us per run, per round]}}."""
    import torch

    rt = open_runtime()
    rt.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    rt.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
    rt.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
    assert rt.pipeLinkInitialize() == 0
    out = {}
    x = torch.randn(1024, device="cuda")
    for stages in (1, 20):
        pipe, eager, graph = _plans(stages, tmp)
        pipe.close()
        y = torch.empty_like(x)
        ins, keep_in = _tensor_array([x])
        outs, keep_out = _tensor_array([y])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        runs, handles = {}, []
        for mode, plan in (("core_eager", eager), ("core_graph", graph)):
            h = ctypes.c_void_p()
            status = rt.pipeLinkLoadPipeline(str(plan).encode(), ctypes.byref(h))
            assert status == 0, rt.pipeLinkGetLastErrorMessage()
            handles.append(h)
            runs[mode] = lambda h=h, i=ins, o=outs, s=stream: rt.pipeLinkExecuteAsync(h, i, 1, o, 1, s)

        def chain(n=stages):
            t = x
            for _ in range(n):
                t = torch.relu(t)
            return t

        static_y = chain()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = chain()
        runs["torch"], runs["torch_graph"] = chain, g.replay
        for mode, fn in runs.items():
            for _ in range(3):  # a cuda_graph plan runs eagerly once, captures on the second: check a replay
                fn()
            torch.cuda.synchronize()
            if mode.startswith("core"):
                assert torch.equal(y, torch.relu(x)), mode
                assert rt.pipeLinkGetLastErrorMessage() == b"", rt.pipeLinkGetLastErrorMessage()
        out[stages] = wall_us_per_call(runs, iterations)
        assert torch.equal(static_y, torch.relu(x))
        for h in handles:
            rt.pipeLinkDestroyPipeline(h)
        del keep_in, keep_out
    rt.pipeLinkFinalize()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        host = host_times(tmp, args.iterations)
        wall = wall_times(tmp, args.iterations)
    for stages in (1, 20):
        print(
            f"{stages:2d}-stage relu chain, host us per ExecuteAsync: "
            + ", ".join(f"{m} {host[(stages, m)]:.2f}" for m in ("eager", "graph", "bare"))
        )
        modes = ("core_eager", "core_graph", "torch", "torch_graph")
        print(
            f"{stages:2d}-stage relu chain, wall us per run: "
            + ", ".join(f"{m} {statistics.median(wall[stages][m]):.2f}" for m in modes)
        )
        _target(
            f"core cuda_graph plan vs PyTorch's CUDA graph, {stages}-stage chain (wall time per run)",
            ratio(wall[stages], "core_graph", "torch_graph"),
            1.0,
            "x",
        )


if __name__ == "__main__":
    main()
