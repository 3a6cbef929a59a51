"""Choosing a product's cuBLASLt algorithm by timing the heuristic's candidates at bind, without a GPU.

The choice itself is a pure function (``ops/gemm/algos.py``: fake timings in, a rank out). The bind
(``LtMatmul``, ops/gemm/lt.py) runs on a stand-in for nvmath's cuBLASLt whose heuristic offers several
candidates and whose
``matmul`` advances a fake device clock by a cost per algorithm, and on a backend whose timing events read
that clock: so the test knows which candidate is fastest and checks that the bind keeps it, passes it on
every call and writes it into the plan (``NativeMatmul.algo_rank``). What the native core does with the rank
is tests/native_core/test_cuda_fake.py; the real timings are scripts/gemm_algos.py on the H200.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np
import pytest

from pipelink.descriptor import KernelContext
from pipelink.ops.gemm import algos
from pipelink.ops.gemm.cuda import bind_gemm
from pipelink.ops.gemm.lt import WORKSPACE_BYTES, operand_bytes
from tests.unit.test_conv_gemm_route import FakeLt, lt  # noqa: F401 - the fixture installing the stand-in


# -- the pure choice ----------------------------------------------------------------------------------
def _measure(times: dict[int, list]):
    """measure(rank) answering from a table of samples per rank, warm-up first (the last one repeats);
    an exception in the table is raised."""
    calls: list[int] = []

    def measure(rank: int) -> float:
        calls.append(rank)
        spec = times[rank]
        sample = spec[min(calls.count(rank) - 1, len(spec) - 1)]
        if isinstance(sample, Exception):
            raise sample
        return sample

    return measure, calls


def test_the_fastest_candidate_wins_and_every_one_is_warmed_up_then_timed_in_turn():
    measure, calls = _measure({0: [9.0, 5.0], 1: [9.0, 4.0], 2: [9.0, 2.0], 3: [9.0, 3.0]})
    rank, times = algos.choose_fastest(4, measure, rounds=3)
    assert rank == 2 and times == [5.0, 4.0, 2.0, 3.0]
    # the warm-up (not counted: its 9.0 is nobody's time), then rounds interleaving the candidates
    assert calls == [0, 1, 2, 3] + [0, 1, 2, 3] * 3


def test_a_candidate_that_fails_scores_inf_and_is_not_called_again():
    # 1 fails its warm-up; 2 is the fastest until its second sample fails (an illegal address, say)
    late = RuntimeError("illegal address")
    measure, calls = _measure(
        {0: [5.0], 1: [RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED")], 2: [1.0, 1.0, late], 3: [3.0]}
    )
    rank, times = algos.choose_fastest(4, measure, rounds=3)
    assert times == [5.0, math.inf, math.inf, 3.0]
    assert rank == 3  # the fastest of those that never failed
    assert calls.count(1) == 1 and calls.count(2) == 3  # neither called after its failure


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_a_meaningless_time_counts_as_a_failure(bad):
    measure, _ = _measure({0: [1.0, bad], 1: [2.0]})
    rank, times = algos.choose_fastest(2, measure, rounds=2)
    assert (rank, times) == (1, [math.inf, 2.0])


def test_when_every_candidate_fails_the_heuristics_first_is_kept():
    measure, _ = _measure({r: RuntimeError("no") for r in range(3)})
    assert algos.choose_fastest(3, measure) == (0, [math.inf] * 3)
    assert algos.choose_fastest(0, measure) == (0, [])


def test_the_median_of_the_samples_is_a_candidates_time():
    # one slow sample (another process's kernel, a clock change) does not decide the race
    measure, _ = _measure({0: [1.0, 1.0, 9.0, 1.0], 1: [1.0, 1.2, 1.2, 1.2]})
    assert algos.choose_fastest(2, measure, rounds=3) == (0, [1.0, 1.2])


def test_near_ties_go_to_the_heuristics_order():
    # rank 3 is 1% faster than rank 1: within NEAR_TIE (2%), so the lower rank is kept
    measure, _ = _measure({0: [2.0], 1: [1.01], 2: [1.5], 3: [1.0]})
    assert algos.choose_fastest(4, measure, near_tie=0.02)[0] == 1
    assert algos.choose_fastest(4, measure, near_tie=0.0)[0] == 3


def test_only_large_products_with_a_choice_are_timed(monkeypatch):
    monkeypatch.delenv("PIPELINK_GEMM_TIMING", raising=False)
    big = float(algos.TIMING_MIN_FLOPS)
    assert algos.worth_timing(big, 8) and algos.worth_timing(2 * 4096 * 768 * 768, 8)  # attn c_proj
    assert not algos.worth_timing(big - 1, 8)
    assert not algos.worth_timing(big, 1)  # nothing to choose
    # a few rows against a large weight: few FLOPs, bound by reading the weight (the T=8 MLP's fp32 fc1)
    decode = operand_bytes(8, 4096, 1024, 1, 4)
    assert algos.worth_timing(2 * 8 * 4096 * 1024, 8, decode) and decode >= algos.TIMING_MIN_BYTES
    assert not algos.worth_timing(2 * 8 * 1024 * 1024, 8, operand_bytes(8, 1024, 1024, 1, 4))
    # on the tensor cores the bytes do not count (bf16's split-K picks lost 16 streams' throughput)
    assert not algos.worth_timing(
        2 * 8 * 4096 * 2048, 8, operand_bytes(8, 4096, 2048, 1, 2), on_tensor_cores=True
    )
    monkeypatch.setenv("PIPELINK_GEMM_TIMING", "0")
    assert not algos.worth_timing(big, 8)
    assert not algos.worth_timing(1, 8, decode)


def test_each_sample_spans_enough_work():
    assert algos.calls_per_sample(2 * 4096 * 768 * 3072) == 1  # c_fc: ~0.45 ms a call on an H200
    assert algos.calls_per_sample(2 * 4096 * 768 * 768) == 4
    assert algos.calls_per_sample(algos.TIMING_MIN_FLOPS) == 16
    assert algos.calls_per_sample(1) == algos.calls_per_sample(0) == 32


# -- the bind, on stand-ins -----------------------------------------------------------------------------
@dataclass
class _Event:
    t: float


class _Stream:
    def __init__(self, handle: int):
        self.handle = handle


class _Allocation:
    def __init__(self, nbytes: int):
        self.array = np.zeros(nbytes, np.uint8)
        self.ptr = self.array.ctypes.data
        self.nbytes = nbytes


class TimingBackend:
    """What the bind asks of the CUDA backend, with a clock the fake cuBLASLt advances."""

    device = "cuda:0"

    def __init__(self, *, fail_allocation: bool = False):
        self.clock = 0.0
        self.log: list[str] = []
        self.allocations: list[_Allocation] = []
        self.fail_allocation = fail_allocation
        self.is_capture_active = False
        self.main = _Stream(7)

    def default_stream(self):
        return self.main

    def new_stream(self):
        self.log.append("new_stream")
        return _Stream(8)

    def record_event(self, stream, timing=False):
        return _Event(self.clock)

    def wait_event(self, stream, event):
        self.log.append("wait")

    def elapsed(self, start, end):
        return end.t - start.t

    def synchronize(self, stream=None):
        self.log.append("synchronize")

    def allocate(self, nbytes, *, tag="", **_):
        if self.fail_allocation:
            raise MemoryError("out of device memory")
        self.log.append("allocate")
        alloc = _Allocation(nbytes)
        self.allocations.append(alloc)
        return alloc

    def free(self, alloc):
        self.log.append("free")

    def memcpy(self, dst, src, nbytes, *, stream=None):
        ctypes.memmove(dst, src, nbytes)

    def workspace(self, size, *, stream):
        self.log.append(f"workspace {size}")
        return _Allocation(max(size, 1))


class TimedLt(FakeLt):
    """A cuBLASLt whose heuristic offers ``len(costs)`` candidates (algorithm 100 + i, i * 256 bytes of
    workspace) and whose matmul costs ``costs[i]`` seconds on the backend's clock (None: it fails)."""

    def __init__(self, costs: list[float | None], backend: TimingBackend):
        super().__init__()
        self.costs, self.backend = costs, backend
        self.ran: list[tuple[int, int, int]] = []  # (algorithm, workspace size, stream)

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, pref, n, result, found):
        dtype = self.matmul_heuristic_result_dtype
        count = min(n, len(self.costs))
        out = np.ndarray(n, dtype, buffer=(ctypes.c_char * (n * dtype.itemsize)).from_address(result))
        for i in range(count):
            out[i]["algo"][0] = 100 + i
            out[i]["workspace_size"] = 256 * i
        ctypes.c_int32.from_address(found).value = count

    def matmul(self, handle, desc, alpha, a, la, b, lb, beta, c, lc, d, ld_, algo, ws, ws_size, stream):
        which = ctypes.c_uint64.from_address(algo).value - 100
        self.ran.append((which, ws_size, stream))
        cost = self.costs[which]
        if cost is None:
            raise self.cuBLASLtError("CUBLAS_STATUS_NOT_SUPPORTED")
        self.backend.clock += cost


@pytest.fixture
def timed(lt, monkeypatch):  # noqa: F811 - lt installs the stand-in nvmath; we replace its cuBLASLt
    """Install a TimedLt over a TimingBackend; ``timed(costs)`` -> (lt, backend)."""
    monkeypatch.setattr(algos, "TIMING_MIN_FLOPS", 1)  # the test's small products are timed too
    monkeypatch.delenv("PIPELINK_GEMM_TIMING", raising=False)
    algos.CHOICES.clear()
    made = []

    def make(costs, **backend_kw):
        backend = TimingBackend(**backend_kw)
        fake = TimedLt(costs, backend)
        monkeypatch.setattr(lt, "matmul_algo_get_heuristic", fake.matmul_algo_get_heuristic)
        monkeypatch.setattr(lt, "matmul", fake.matmul)
        fake.objects = lt.objects  # descriptors and layouts live in the installed stand-in
        made.append(fake)
        return fake, backend

    yield make
    algos.CHOICES.clear()


M, K, N = 8, 16, 32


def _gemm_ctx(backend, *, bias: bool = False, shapes=(M, K, N)) -> KernelContext:
    m, k, n = shapes
    return KernelContext(
        stage="fc",
        attrs={"alpha": 1.0, "beta": 1.0, "activation": "none", "trans_a": False, "trans_b": False},
        in_shapes=((m, k), (k, n), (n,) if bias else None, None),
        in_dtypes=("float32", "float32", "float32" if bias else None, None),
        out_shapes=((m, n),),
        out_dtypes=("float32",),
        backend=backend,
    )


class _T:
    def __init__(self, shape):
        self.array = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        self.ptr = self.array.ctypes.data


def test_the_bind_keeps_the_fastest_candidate_and_every_call_runs_it(timed):
    fake, backend = timed([5e-6, 3e-6, 1e-6, 2e-6])
    kernel = bind_gemm(_gemm_ctx(backend))
    assert kernel.algo.rank == 2 and kernel.algo.source == "timed"
    assert kernel.algo.times_s == pytest.approx((5e-6, 3e-6, 1e-6, 2e-6))
    # what the core is told: that rank of the same query, and the workspace that candidate needs
    assert (kernel.native.algo_rank, kernel.native.algo_workspace) == (2, 512)
    assert {w for _, w, s in fake.ran} <= {0, 256, 512, 768} and {s for *_, s in fake.ran} == {8}
    # timed on a stream of its own, ordered after the scratch block's allocation, waited on before the
    # block is freed
    assert backend.log[:3] == ["allocate", "new_stream", "wait"]
    assert backend.log[-2:] == ["synchronize", "free"]
    fake.ran.clear()
    kernel([_T((M, K)), _T((K, N)), None, None], [_T((M, N))], _Stream(9))
    assert fake.ran == [(2, 512, 9)]  # the chosen algorithm, its workspace, the run's stream


def test_the_scratch_operands_hold_values_not_zeros(timed):
    fake, backend = timed([2e-6, 1e-6])
    bind_gemm(_gemm_ctx(backend, bias=True))
    block = backend.allocations[0].array
    as_floats = block[:-256].view(np.float32)  # a, b, d in one span, the bias padded to 256 bytes, workspace
    assert np.isfinite(as_floats).all() and np.count_nonzero(as_floats) > 0.99 * as_floats.size
    assert np.abs(as_floats).max() <= 1.0


def test_the_operands_share_one_scratch_span(timed):
    # Wrong if timing took a block per operand (the sum of A, B and D beside the plan: the 4096x4096 ->
    # 16384 bf16 MLP's first product needed 320 MiB, above PyTorch's whole peak) instead of the largest.
    fake, backend = timed([2e-6, 1e-6])
    bind_gemm(_gemm_ctx(backend, bias=True))
    largest = max(M * K, K * N, M * N) * 4  # float32 operands, already multiples of 256 bytes here
    bias = -(-N * 4 // 256) * 256
    assert backend.allocations[0].nbytes == largest + bias + 256  # the tail: the candidates' workspace


def test_a_second_bind_of_the_same_product_reuses_the_choice_without_timing(timed):
    fake, backend = timed([5e-6, 1e-6, 3e-6])
    first = bind_gemm(_gemm_ctx(backend))
    timed_calls = len(fake.ran)
    second = bind_gemm(_gemm_ctx(backend))
    assert len(fake.ran) == timed_calls and backend.log.count("allocate") == 1
    assert (second.algo.rank, second.algo.source) == (first.algo.rank, "memo") == (1, "memo")
    assert second.native == first.native
    other = bind_gemm(_gemm_ctx(backend, shapes=(M, K, 2 * N)))  # another product: timed anew
    assert other.algo.source == "timed" and len(algos.CHOICES) == 2


def test_a_failing_candidate_is_never_chosen(timed):
    fake, backend = timed([5e-6, None, 2e-6])
    kernel = bind_gemm(_gemm_ctx(backend))
    assert kernel.algo.rank == 2 and kernel.algo.times_s[1] == math.inf
    assert [w for w, *_ in fake.ran].count(1) == 1  # its warm-up failed: never called again


def test_when_every_candidate_fails_the_first_is_kept(timed):
    fake, backend = timed([None, None])
    kernel = bind_gemm(_gemm_ctx(backend))
    assert (kernel.algo.rank, kernel.native.algo_rank, kernel.native.algo_workspace) == (0, 0, 0)


@pytest.mark.parametrize(
    "setup, why",
    [
        ("small", ""),
        ("one candidate", ""),
        ("timing off", ""),
        ("no memory", "not timed: out of device memory"),
        ("capturing", "not timed: a CUDA graph capture is in progress"),
    ],
)
def test_without_timing_the_heuristics_first_runs(timed, monkeypatch, setup, why):
    costs = [1e-6] if setup == "one candidate" else [3e-6, 1e-6]
    fake, backend = timed(costs, fail_allocation=setup == "no memory")
    if setup == "small":
        monkeypatch.setattr(algos, "TIMING_MIN_FLOPS", 2 * M * N * K + 1)
    if setup == "timing off":
        monkeypatch.setenv("PIPELINK_GEMM_TIMING", "0")
    backend.is_capture_active = setup == "capturing"
    kernel = bind_gemm(_gemm_ctx(backend))
    assert (kernel.algo.rank, kernel.algo.source, kernel.algo.why) == (0, "heuristic", why)
    assert fake.ran == [] and "allocate" not in backend.log and len(algos.CHOICES) == 0


def test_the_bias_the_runs_read_replaces_the_scratch_bias(timed):
    fake, backend = timed([2e-6, 1e-6])
    kernel = bind_gemm(_gemm_ctx(backend, bias=True))
    scratch = backend.allocations[0]
    assert scratch.ptr <= fake.objects[kernel.desc]["BIAS_POINTER"] < scratch.ptr + scratch.nbytes
    bias = _T((N,))
    kernel([_T((M, K)), _T((K, N)), bias, None], [_T((M, N))], _Stream(9))
    assert fake.objects[kernel.desc]["BIAS_POINTER"] == bias.ptr


def test_the_workspace_a_run_uses_is_the_chosen_candidates(timed):
    fake, backend = timed([3e-6, 2e-6, 1e-6])
    kernel = bind_gemm(_gemm_ctx(backend))
    assert kernel.workspace_size == 512 <= WORKSPACE_BYTES
    kernel([_T((M, K)), _T((K, N)), None, None], [_T((M, N))], _Stream(9))
    assert "workspace 512" in backend.log


def test_the_workspace_cap_opens_for_products_worth_timing():
    # Wrong if a small product (the T=8 MLP block's) could ask for more scratch than its own output, or a
    # large one stayed capped at its output (the heuristic then withholds its faster split-K algorithms).
    from pipelink.ops.gemm.lt import workspace_limit

    assert workspace_limit(8, 1024, 1, 2, k=1024) == 8 * 1024 * 2
    assert workspace_limit(4096, 768, 1, 4, k=3072) == WORKSPACE_BYTES > 4096 * 768 * 4
    assert workspace_limit(64, 64, 1, 4) == 64 * 64 * 4  # k unknown: the small product's rule
    assert workspace_limit(8, 4096, 1, 4, k=1024) == WORKSPACE_BYTES  # 16 MiB of fp32 weight: uncapped
    assert workspace_limit(8, 4096, 1, 2, k=2048) == 8 * 4096 * 2  # bf16's: the tensor cores keep the cap
