"""Multi-GPU proof of issue 15, in one command: ``python -m benchmarks.distributed`` on a GPU host.

Run without a launcher, it starts itself under torchrun with one process per visible GPU (NVLink
multicast stays off: NCCL_NVLS_ENABLE=0 and the other switches). Each rank then:

1. times a 256 MiB ``all_reduce`` through a PipeLink pipeline and through ``torch.distributed`` (NCCL),
   and prints both bus bandwidths (NCCL-tests' definition: bytes * 2(n-1)/n / time);
2. runs the tensor-parallel transformer MLP (T=8192, d=8192, bf16) from one config: column-parallel
   gemm with GELU, row-parallel gemm, all_reduce; rank 0 also runs the same block on one GPU, checks the
   parallel result against it and prints the speedup;
3. runs the seed's AllReduce + LayerNorm composition in chunks on two streams (the all_reduce of one chunk
   beside the layer_norm of the previous) and prints how much of the communication time the overlap
   hid, from device timestamps: a profiled run (``run(profile=True)``) reports when each stage started
   and ended on its stream, and the hidden share is the time the all_reduce stages ran while a
   layer_norm stage ran, over the time the all_reduce stages ran (:func:`hidden_fraction`). The whole-run
   times of the overlapped run and of its two halves alone are printed beside it.

Lines starting with ``RESULT`` are the summary (rank 0). With one GPU, the all_reduce has nobody to talk
to (bus bandwidth is not defined) and the MLP speedup is 1 by construction: both are still run and
checked, so the one-GPU run proves the code path.
"""

from __future__ import annotations

import os
import subprocess
import sys

MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
ALL_REDUCE_BYTES = 256 * 2**20
T, D = 8192, 8192
WARMUP, ITERS = 3, 20


def _launch() -> int:
    import torch

    nproc = torch.cuda.device_count()
    if nproc == 0:
        print("RESULT distributed: no GPU visible; nothing to measure")
        return 1
    env = {**os.environ, **MULTICAST_OFF}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    return subprocess.call([*cmd, "-m", "benchmarks.distributed"], env=env)


def _time_ms(torch, fn, *, together: bool = True) -> float:
    """Median milliseconds of ``fn()``, from a device-wide synchronize to the next (PipeLink queues on
    its own streams, so events on PyTorch's stream would not see its work); ``together``: every rank
    starts each iteration after a barrier."""
    import time

    import torch.distributed as dist

    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(ITERS):
        if together:
            dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def _bus_gbps(nbytes: int, ms: float, n: int) -> float:
    return nbytes * 2 * (n - 1) / n / (ms / 1e3) / 1e9 if n > 1 else float("nan")


def _all_reduce(torch, pl, rank: int, world: int) -> None:
    import torch.distributed as dist

    count = ALL_REDUCE_BYTES // 4
    x = torch.randn(count, device="cuda")
    pipe = pl.load(
        {
            "name": "all_reduce_256MiB",
            "inputs": {"x": {"shape": [count], "dtype": "float32"}},
            "pipeline": [{"name": "all_reduce", "inputs": ["x"], "outputs": ["y"]}],
        },
        device="cuda",
        cuda_graph=True,
    )
    y = torch.from_dlpack(pipe.run(x=x)["y"])
    expected = x.clone()
    dist.all_reduce(expected)
    torch.cuda.synchronize()
    exact = torch.allclose(y, expected, rtol=1e-5, atol=1e-5)
    ms_pl = _time_ms(torch, lambda: pipe.run(x=x))
    t = x.clone()
    ms_torch = _time_ms(torch, lambda: dist.all_reduce(t))
    if rank == 0:
        bw_pl, bw_torch = (
            _bus_gbps(ALL_REDUCE_BYTES, ms_pl, world),
            _bus_gbps(ALL_REDUCE_BYTES, ms_torch, world),
        )
        ratio = bw_pl / bw_torch * 100 if world > 1 else float("nan")
        print(
            f"RESULT all_reduce 256MiB float32 on {world} GPU(s): pipelink {ms_pl:.3f} ms = {bw_pl:.1f} GB/s "
            f"bus, torch.distributed {ms_torch:.3f} ms = {bw_torch:.1f} GB/s bus, ratio {ratio:.1f}% "
            f"(target >= 95%); matches torch: {exact}"
        )


def _mlp_config(name: str, hidden: int, *, reduce: bool) -> dict:
    stages = [
        {
            "name": "gemm",
            "id": "up",
            "inputs": ["x", "w1"],
            "outputs": ["h"],
            "attrs": {"activation": "gelu"},
        },
        {"name": "gemm", "id": "down", "inputs": ["h", "w2"], "outputs": ["partial" if reduce else "y"]},
    ]
    if reduce:
        stages.append({"name": "all_reduce", "inputs": ["partial"], "outputs": ["y"]})
    return {
        "name": name,
        "inputs": {
            "x": {"shape": [T, D], "dtype": "bfloat16"},
            "w1": {"shape": [D, hidden], "dtype": "bfloat16"},
            "w2": {"shape": [hidden, D], "dtype": "bfloat16"},
        },
        "pipeline": stages,
    }


def _tensor_parallel_mlp(torch, pl, rank: int, world: int) -> None:
    import torch.distributed as dist

    hidden = 4 * D
    if hidden % world:
        raise SystemExit(f"hidden size {hidden} does not split over {world} GPUs")
    gen = torch.Generator(device="cuda").manual_seed(0)  # the same full weights on every rank
    x = torch.randn(T, D, device="cuda", generator=gen, dtype=torch.bfloat16)
    w1 = (torch.randn(D, hidden, device="cuda", generator=gen) / D**0.5).to(torch.bfloat16)
    w2 = (torch.randn(hidden, D, device="cuda", generator=gen) / hidden**0.5).to(torch.bfloat16)
    part = hidden // world
    w1s = w1[:, rank * part : (rank + 1) * part].contiguous()  # column-parallel
    w2s = w2[rank * part : (rank + 1) * part, :].contiguous()  # row-parallel
    tp = pl.load(_mlp_config("tp_mlp", part, reduce=True), device="cuda", cuda_graph=True)
    y_tp = torch.from_dlpack(tp.run(x=x, w1=w1s, w2=w2s)["y"]).clone()
    ms_tp = _time_ms(torch, lambda: tp.run(x=x, w1=w1s, w2=w2s))
    dist.barrier()
    if rank == 0:
        one = pl.load(_mlp_config("mlp_one_gpu", hidden, reduce=False), device="cuda", cuda_graph=True)
        y_one = torch.from_dlpack(one.run(x=x, w1=w1, w2=w2)["y"]).float()
        err = ((y_tp.float() - y_one).norm() / y_one.norm()).item()
        ms_one = _time_ms(torch, lambda: one.run(x=x, w1=w1, w2=w2), together=False)
        print(
            f"RESULT tp_mlp T={T} d={D} bf16 on {world} GPU(s): one GPU {ms_one:.2f} ms, tensor-parallel "
            f"{ms_tp:.2f} ms, speedup {ms_one / ms_tp:.2f}x (target >= 1.8 on 2 GPUs); rel err vs one GPU "
            f"{err:.2e} (bf16 tolerance 1e-2): {'ok' if err <= 1e-2 else 'MISMATCH'}"
        )
    dist.barrier()


def overlap_config(chunks: int, rows: int, cols: int, *, streams: bool = True, parts: str = "both") -> dict:
    """The seed's AllReduce + LayerNorm composition, chunked so that the all_reduce of chunk i+1 (stream 1)
    runs while the layer_norm of chunk i (stream 2) computes; ``streams=False`` puts every stage on one
    stream (nothing overlaps). ``parts``: "both", "comm" (the all_reduces only) or "compute" (the
    layer_norms only, on the unreduced chunks) -- the two halves timed alone."""

    def on(stream_id: int) -> dict:
        return {"constraints": {"stream_affinity": {"stream_id": stream_id}}} if streams else {}

    stages = [
        {
            "name": "split",
            "inputs": ["x"],
            "outputs": [f"x{i}" for i in range(chunks)],
            "attrs": {"num_outputs": chunks},
        }
    ]
    for i in range(chunks):
        reduced = f"x{i}"
        if parts in ("both", "comm"):
            reduced = f"r{i}"
            stages.append(
                {"name": "all_reduce", "id": f"ar{i}", "inputs": [f"x{i}"], "outputs": [reduced], **on(1)}
            )
        if parts in ("both", "compute"):
            stages.append(
                {
                    "name": "layer_norm",
                    "id": f"ln{i}",
                    "inputs": [reduced, "gamma", "beta"],
                    "outputs": [f"y{i}"],
                    **on(2),
                }
            )
    last = "y" if parts != "comm" else "r"
    stages.append(
        {
            "name": "concat",
            "inputs": [f"{last}{i}" for i in range(chunks)],
            "outputs": ["y"],
            "attrs": {"axis": 0},
        }
    )
    return {
        "name": f"allreduce_layernorm_{parts}",
        "inputs": {
            "x": {"shape": [rows, cols], "dtype": "bfloat16"},
            "gamma": {"shape": [cols], "dtype": "bfloat16"},
            "beta": {"shape": [cols], "dtype": "bfloat16"},
        },
        "pipeline": stages,
        "outputs": ["y"],
    }


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The disjoint, sorted intervals covering ``spans`` (start, end)."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def hidden_fraction(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> float:
    """The share of the communication time that ran while computation ran: the length of (union of
    ``comm``) intersected with (union of ``compute``) over the length of the union of ``comm`` (device
    intervals, start and end in seconds from one origin). NaN without communication time."""
    a, b = _union(comm), _union(compute)
    total = sum(end - start for start, end in a)
    both, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            both += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return both / total if total > 0 else float("nan")


def stage_spans(report, prefix: str) -> list[tuple[float, float]]:
    """The device intervals of a profiled run's stages whose ids start with ``prefix``."""
    return [
        (s.device_start_s, s.device_start_s + s.device_time_s)
        for s in report.stages.values()
        if s.stage.startswith(prefix) and s.device_start_s is not None
    ]


def _overlap(torch, pl, rank: int, world: int) -> None:
    """The overlapped composition: the communication hidden from its profiled run's device timestamps,
    with the whole-run times of it and of its halves alone beside it."""
    import torch.distributed as dist

    chunks, rows, cols = 8, 65536, 4096
    gen = torch.Generator(device="cuda").manual_seed(1 + rank)
    feed = {
        "x": torch.randn(rows, cols, device="cuda", generator=gen).to(torch.bfloat16),
        "gamma": torch.randn(cols, device="cuda", generator=gen).to(torch.bfloat16),
        "beta": torch.randn(cols, device="cuda", generator=gen).to(torch.bfloat16),
    }
    times = {}
    for label, kwargs in (
        ("overlapped", {}),
        ("one stream", {"streams": False}),
        ("comm", {"parts": "comm"}),
        ("compute", {"parts": "compute"}),
    ):
        pipe = pl.load(overlap_config(chunks, rows, cols, **kwargs), device="cuda", cuda_graph=True)
        times[label] = _time_ms(torch, lambda pipe=pipe: pipe.run(feed))
    x = feed["x"].float()
    dist.all_reduce(x)
    ref = torch.nn.functional.layer_norm(x, (cols,), feed["gamma"].float(), feed["beta"].float(), 1e-5)
    pipe = pl.load(overlap_config(chunks, rows, cols), device="cuda")
    got = torch.from_dlpack(pipe.run(feed)["y"]).float()
    err = ((got - ref).norm() / ref.norm()).item()
    shares = []
    for _ in range(5):  # profiled runs: every stage between two device events, read after the run
        dist.barrier()
        pipe.run(feed, profile=True)
        report = pipe.last_report
        shares.append(hidden_fraction(stage_spans(report, "ar"), stage_spans(report, "ln")))
    hidden = sorted(shares)[len(shares) // 2] if world > 1 else float("nan")
    comm, compute, both = times["comm"], times["compute"], times["overlapped"]
    if rank == 0:
        print(
            f"RESULT allreduce+layernorm {rows}x{cols} bf16 in {chunks} chunks on {world} GPU(s): "
            f"communication hidden {hidden * 100:.1f}% from device timestamps (median of 5 profiled runs; "
            "target >= 85%); "
            f"whole runs: all_reduce alone {comm:.3f} ms, layer_norm alone {compute:.3f} ms, overlapped "
            f"{both:.3f} ms, one stream {times['one stream']:.3f} ms; rel err {err:.2e}: "
            f"{'ok' if err <= 1e-2 else 'MISMATCH'}"
        )


def main() -> int:
    if "RANK" not in os.environ:
        return _launch()
    import torch
    import torch.distributed as dist

    import pipelink as pl

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    try:
        _all_reduce(torch, pl, rank, world)
        _tensor_parallel_mlp(torch, pl, rank, world)
        _overlap(torch, pl, rank, world)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
