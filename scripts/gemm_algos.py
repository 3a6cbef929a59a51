"""cuBLASLt's algorithms for the GPT-2 block's four GEMMs on this GPU (batch 32: 4096 rows, fp32, TF32 off),
or for the MLP block's two (``--rows 8 --d 1024 --mlp``: the service benchmark's T=8 block): the experiment
behind choosing a product's algorithm by timing at bind (ops/gemm/algos.py).

Each product is built as PipeLink issues it (``pl.load`` of a one-gemm config with the ONNX import's
epilogue: bias, GELU, the residual read as C with beta 1) and once more without bias or epilogue. For each,
the heuristic's top N results (N = 16; the bind times the first 8) are timed one by one on the same
operands with CUDA events (3 warm-up calls, then the median of ``--iters`` single calls), each checked
against a float64 reference, next to ``torch.mm`` / ``torch.addmm`` of the same operands and to the rank the
bind chose. It also checks that the heuristic's answers for 1, 2, 4 and 8 results are prefixes of its
answer for N: the native core asks for rank + 1 results and takes the last, so a rank must name the same
algorithm in a shorter list.

    python scripts/gemm_algos.py [--rows M] [--d D] [--mlp] [--top 16] [--iters 20] [--workspace-mib MIB]
                                 [--json OUT.json]

Needs a CUDA GPU, nvmath-python and PyTorch; runs in about 10-20 s on an H200.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

import pipelink as pl
from pipelink.ops.gemm import algos

M = 4096  # GPT-2 small at batch 32: 32 x 128 tokens (--rows)
D = 768  # (--d)


def cases(d: int, mlp_only: bool) -> list[tuple[str, int, int, str, bool]]:
    """name, K, N, activation, residual: the four GEMMs of one block as the ONNX import fuses them (the
    MLP's two alone with ``mlp_only``)."""
    mlp = [("mlp c_fc", d, 4 * d, "gelu_tanh", False), ("mlp c_proj", 4 * d, d, "none", True)]
    return (
        mlp
        if mlp_only
        else [("attn c_attn", d, 3 * d, "none", False), ("attn c_proj", d, d, "none", True), *mlp]
    )


CONFIG_ATTRS = ("ID", "TILE_ID", "STAGES_ID", "SPLITK_NUM", "REDUCTION_SCHEME", "CTA_SWIZZLING")


def config(k: int, n: int, activation: str, residual: bool, plain: bool) -> dict:
    """A one-gemm pipeline with declared inputs: its plan (and the bind) is made at load."""
    inputs = {"a": {"shape": [M, k], "dtype": "float32"}, "b": {"shape": [k, n], "dtype": "float32"}}
    ports = ["a", "b"]
    if not plain:
        inputs["bias"] = {"shape": [n], "dtype": "float32"}
        ports.append("bias")
        if residual:
            inputs["r"] = {"shape": [M, n], "dtype": "float32"}
            ports.append("r")
    stage = {"name": "gemm", "id": "gemm", "inputs": ports, "outputs": ["c"]}
    if not plain and activation != "none":
        stage["attrs"] = {"activation": activation}
    return {"name": "gemm_algos", "inputs": inputs, "outputs": ["c"], "pipeline": [stage]}


def event_times(fn, iters: int, warmup: int = 3) -> float:
    """Median seconds of one ``fn()`` on torch's current stream (events around each call)."""
    for _ in range(warmup):
        fn()
    pairs = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) / 1e3


def algo_config(lt, algo: np.ndarray) -> dict[str, int]:
    """The algorithm's configuration (id, tile, stages, split-K, ...), as far as this nvmath can read it."""
    out = {}
    for name in CONFIG_ATTRS:
        try:
            attr = lt.MatmulAlgoConfigAttribute[name]
            buf = np.zeros(1, np.uint64)
            size = np.dtype(lt.get_matmul_algo_config_attribute_dtype(attr)).itemsize
            written = np.zeros(1, np.uint64)
            lt.matmul_algo_config_get_attribute(
                algo.ctypes.data, attr, buf.ctypes.data, size, written.ctypes.data
            )
            out[name.lower()] = int(buf[0])
        except Exception:  # noqa: BLE001 - an older nvmath or cuBLASLt: leave it out
            pass
    return out


def run_case(name: str, k: int, n: int, activation: str, residual: bool, plain: bool, args) -> dict:
    label = f"{name} {M}x{k} -> {n}" + (
        " plain" if plain else f" as issued ({'+'.join(epilogue_words(activation, residual))})"
    )
    pipe = pl.load(config(k, n, activation, residual, plain), device="cuda", native=False)
    kernel = pipe._last_plan.steps[0].kernel
    if not hasattr(kernel, "candidates"):
        raise SystemExit(f"{label}: the gemm stage is not a cuBLASLt product here ({type(kernel).__name__})")
    lt = kernel.lt
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.rand((M, k), device="cuda", generator=g) * 2 - 1
    b = torch.rand((k, n), device="cuda", generator=g) * 2 - 1
    bias = torch.rand((n,), device="cuda", generator=g) * 2 - 1
    r = torch.rand((M, n), device="cuda", generator=g) * 2 - 1
    d = torch.empty((M, n), device="cuda")
    ref = a.double() @ b.double()
    if not plain:
        ref += bias.double()
        if activation == "gelu_tanh":
            ref = torch.nn.functional.gelu(ref, approximate="tanh")
        if residual:
            ref += r.double()
    cap = kernel.max_workspace if args.workspace_mib is None else args.workspace_mib << 20
    results = kernel.candidates(args.top, max_workspace=cap)
    workspace = torch.empty(
        max([int(x["workspace_size"]) for x in results] + [256]), dtype=torch.uint8, device="cuda"
    )
    if kernel.bias_input is not None:
        kernel.bias_ptr[0] = bias.data_ptr()
        kernel._set(lt.MatmulDescAttribute.BIAS_POINTER, kernel.bias_ptr)
    handle = kernel.handle_for(pipe._backend.default_stream())
    stream = torch.cuda.current_stream().cuda_stream
    c_in = r.data_ptr() if kernel.c_source is not None else d.data_ptr()
    flops = 2.0 * M * n * k
    chosen = kernel.algo
    why = f"{chosen.source}: {chosen.why}" if chosen.why else chosen.source
    print(
        f"\n{label}: {len(results)} candidates (workspace limit {cap / 2**20:.1f} MiB); "
        f"bind: rank {chosen.rank} ({why})"
    )
    rows = []
    for rank in range(len(results)):
        algo = results[rank : rank + 1].copy()
        ws = int(algo["workspace_size"][0])

        def call(algo=algo, ws=ws):
            kernel._launch(
                handle, algo, a.data_ptr(), b.data_ptr(), c_in, d.data_ptr(), workspace.data_ptr(), ws, stream
            )

        try:
            t = event_times(call, args.iters)
            err = float(((d.double() - ref).abs().max() / ref.abs().max()).item())
        except Exception as e:  # noqa: BLE001 - a candidate that fails is reported and skipped
            print(f"  rank {rank:2d}  failed: {e}")
            rows.append({"rank": rank, "workspace": ws, "error": str(e)})
            continue
        cfg = algo_config(lt, algo)
        mark = "  <- bind" if rank == chosen.rank else ""
        cfg_text = " ".join(f"{key} {v}" for key, v in cfg.items())
        speed = f"{t * 1e6:8.1f} us  {flops / t / 1e12:5.1f} TFLOP/s"
        print(f"  rank {rank:2d}  ws {ws / 2**20:6.2f} MiB  {speed}  rel err {err:.1e}  [{cfg_text}]{mark}")
        rows.append(
            {"rank": rank, "workspace": ws, "us": t * 1e6, "tflops": flops / t / 1e12, "rel_err": err, **cfg}
        )
    torch_rows = {
        "torch.mm": lambda: torch.mm(a, b, out=d),
        "torch.addmm(bias)": lambda: torch.addmm(bias, a, b, out=d),
    }
    if not plain and activation == "gelu_tanh":
        torch_rows["addmm + gelu(tanh)"] = lambda: torch.nn.functional.gelu(
            torch.addmm(bias, a, b), approximate="tanh"
        )
    if not plain and residual:
        torch_rows["addmm(r) + bias"] = lambda: torch.addmm(r, a, b).add_(bias)
    torch_us = {}
    for what, fn in torch_rows.items():
        t = event_times(fn, args.iters)
        torch_us[what] = t * 1e6
        print(f"  {what:<20s}      {t * 1e6:8.1f} us  {flops / t / 1e12:5.1f} TFLOP/s")
    prefix = prefix_consistent(kernel, results, cap)
    print(f"  shorter heuristic answers are prefixes of this one: {'yes' if prefix else 'NO'}")
    timed = [x for x in rows if "us" in x]
    best = min(timed, key=lambda x: x["us"]) if timed else None
    if best is not None and timed[0]["rank"] == 0:
        bind_us = next((x["us"] for x in timed if x["rank"] == chosen.rank), float("nan"))
        gain = timed[0]["us"] / best["us"]
        print(
            f"  fastest: rank {best['rank']} {best['us']:.1f} us ({gain:.2f}x rank 0); "
            f"the bind's {bind_us:.1f} us"
        )
    pipe.close()
    bind = {"rank": chosen.rank, "source": chosen.source, "times_us": [t * 1e6 for t in chosen.times_s]}
    return {
        "case": label,
        "mkn": (M, k, n),
        "candidates": rows,
        "torch_us": torch_us,
        "bind": bind,
        "prefix_consistent": prefix,
    }


def epilogue_words(activation: str, residual: bool) -> list[str]:
    words = ["bias"]
    if activation != "none":
        words.append(activation)
    if residual:
        words.append("residual as C")
    return words


def prefix_consistent(kernel, results: np.ndarray, cap: int) -> bool:
    """Whether the heuristic's answer for 1, 2, 4 and 8 results is the start of its answer for N."""
    for count in (1, 2, 4, 8):
        short = kernel.candidates(count, max_workspace=cap)
        if short.tobytes() != results[: len(short)].tobytes():
            return False
    return True


def main() -> None:
    global M
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=16, help="heuristic results to time (default 16)")
    parser.add_argument(
        "--iters", type=int, default=20, help="timed calls per candidate (median; default 20)"
    )
    parser.add_argument(
        "--workspace-mib", type=int, default=None, help="heuristic workspace limit (default: PipeLink's)"
    )
    parser.add_argument("--rows", type=int, default=M, help=f"rows of a (tokens; default {M})")
    parser.add_argument("--d", type=int, default=D, help=f"model width (default {D})")
    parser.add_argument("--mlp", action="store_true", help="only the MLP block's two products")
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args()

    M = args.rows
    if args.iters < 10:
        parser.error("--iters must be at least 10")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    t0 = time.perf_counter()
    import nvmath.bindings.cublasLt as lt

    floor = algos.TIMING_MIN_FLOPS.bit_length() - 1
    print(
        f"{torch.cuda.get_device_name()}, cuBLASLt {lt.get_version()}, torch {torch.__version__}, TF32 off; "
        f"the bind times {algos.CANDIDATES} candidates of products >= 2^{floor} FLOP, or fp32 products over "
        f">= {algos.TIMING_MIN_BYTES >> 20} MiB of operands"
    )
    report = [run_case(*case, plain, args) for case in cases(args.d, args.mlp) for plain in (False, True)]
    print(f"\n{time.perf_counter() - t0:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
