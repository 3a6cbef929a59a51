"""The gemm family's cuBLASLt product (nvmath-python's low-level bindings): the batch plan of a product,
its descriptors and layouts, the algorithm chosen at bind (``algos.py``: timed among the heuristic's
candidates), the calls of a run, and what the native core replays (:class:`NativeMatmul`). ``cuda.py``
routes gemm, matmul and the 1x1 convolution onto it; nvmath is imported when a product binds.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ..kernel import NativeKernel, PlanLaunch, contiguous_strides
from . import algos

__all__ = [
    "WORKSPACE_BYTES",
    "BatchPlan",
    "NativeMatmul",
    "LtMatmul",
    "lt_product",
    "offset_alignment",
    "plan_batches",
    "operand_bytes",
    "workspace_limit",
]

log = logging.getLogger("pipelink")

WORKSPACE_BYTES = 32 << 20


def operand_bytes(m: int, n: int, k: int, batch: int, itemsize: int) -> int:
    """The bytes a product's A, B and D span (each batch's own: an upper bound when an operand is
    broadcast), what :func:`algos.is_large` weighs beside its FLOPs off the tensor cores (fp32, fp64:
    ``itemsize`` 4 and 8)."""
    return (m * k + k * n + m * n) * max(batch, 1) * itemsize


def workspace_limit(m: int, n: int, batch: int, itemsize: int, k: int = 0) -> int:
    """The most workspace a product may ask cuBLASLt for: 32 MiB. A product too small to be timed at bind
    (:func:`algos.is_large`) asks for no more than its own output (its split-K scratch would otherwise
    outweigh the whole plan); a larger one gets all 32 MiB, since the cap changes which algorithms the
    heuristic offers (H200, scripts/gemm_algos.py: GPT-2's 4096x3072 -> 768 fp32 product with bias and
    residual ran 447.6 us at its output's 12 MiB, 416.7 us with more). A run allocates only what the
    chosen algorithm needs."""
    flops = 2 * m * n * k * max(batch, 1)
    if algos.is_large(flops, operand_bytes(m, n, k, batch, itemsize), on_tensor_cores=itemsize < 4):
        return WORKSPACE_BYTES
    return min(WORKSPACE_BYTES, m * n * max(batch, 1) * itemsize)


# dtype -> (cudaDataType of A/B/C/D, cublasComputeType, cudaDataType of alpha/beta, NumPy scale type)
_TYPES = {
    "float32": (0, 68, 0, np.float32),
    "float64": (1, 70, 1, np.float64),
    "float16": (2, 68, 0, np.float32),
    "bfloat16": (14, 68, 0, np.float32),
}


@dataclass(frozen=True)
class BatchPlan:
    """How one matmul stage maps onto cuBLASLt calls (all counts and offsets in elements).

    ``count`` matrices per call (strided batched when > 1), ``m`` rows of a per matrix (M times the
    folded batch when a's batch folds into M), ``strides`` between the matrices of a, b, c within a call
    (0: that operand is broadcast over the call's batch), ``offsets`` the (a, b, c) start of each call.
    """

    count: int
    m: int
    strides: tuple[int, int, int]
    offsets: tuple[tuple[int, int, int], ...]


def plan_batches(a_batch: tuple, b_batch: tuple, out_batch: tuple, m: int, k: int, n: int) -> BatchPlan:
    """Map broadcast batch dims onto cuBLASLt: the longest trailing run of (non-1) batch dims over which
    each operand is either complete or all 1 becomes one strided-batched call; the leading dims left
    become one call each, at computed offsets. ``a_batch``/``b_batch`` broadcast to ``out_batch``."""
    nd = len(out_batch)
    pad_a = (1,) * (nd - len(a_batch)) + tuple(a_batch)
    pad_b = (1,) * (nd - len(b_batch)) + tuple(b_batch)
    mats = (m * k, k * n, m * n)
    strides_a = [0 if d == 1 else s * mats[0] for d, s in zip(pad_a, contiguous_strides(pad_a), strict=True)]
    strides_b = [0 if d == 1 else s * mats[1] for d, s in zip(pad_b, contiguous_strides(pad_b), strict=True)]
    keep = [i for i in range(nd) if out_batch[i] != 1]
    dims = [out_batch[i] for i in keep]
    ops = [[pad_a[i] for i in keep], [pad_b[i] for i in keep]]

    def uniform(split: int) -> bool:
        return all(
            all(x[i] == dims[i] for i in range(split, len(dims)))
            or all(x[i] == 1 for i in range(split, len(dims)))
            for x in ops
        )

    split = len(dims)
    while split > 0 and uniform(split - 1):
        split -= 1
    count = math.prod(dims[split:])
    full = [count > 1 and all(x[i] == dims[i] for i in range(split, len(dims))) for x in ops]
    strides = (mats[0] if full[0] else 0, mats[1] if full[1] else 0, mats[2])
    rows = m
    if count > 1 and full[0] and not full[1]:  # b shared by the whole call: a's batch is more rows of M
        rows, count, strides = m * count, 1, (0, 0, 0)
    lead = dims[:split]
    offsets = []
    for linear, idx in enumerate(np.ndindex(*lead)):
        oa = sum(j * strides_a[keep[d]] for d, j in enumerate(idx))
        ob = sum(j * strides_b[keep[d]] for d, j in enumerate(idx))
        offsets.append((oa, ob, linear * math.prod(dims[split:]) * mats[2]))
    return BatchPlan(count, rows, strides, tuple(offsets))


def offset_alignment(offsets_bytes: list[int]) -> int:
    """The alignment in bytes (a power of two, at most cuBLASLt's default 256) that every pointer
    ``base + offset`` keeps when ``base`` is 256-byte aligned."""
    align = 256
    for offset in offsets_bytes:
        while offset % align:
            align //= 2
    return align


@dataclass(frozen=True)
class NativeMatmul:
    """One stage's cuBLASLt calls as the native core replays them (``runtime/planfile.py`` writes it).

    In cuBLASLt's order (its "A" is our b): ``layouts`` are (rows, cols, ld, batch count, batch stride)
    of A, B and C = D; ``operands`` the slots of A, B, C and D (``("in" | "out", position)``), ``bias``
    the BIAS epilogue's slot or None; ``offsets`` the (A, B, C/D) element offsets of each call;
    ``min_alignment`` the alignments (bytes) the heuristic may assume for A, B, C, D; ``algo_rank`` the
    chosen algorithm's place in the heuristic's list for this product (its query, with this workspace
    limit and these alignments, gives the core the same list), ``algo_asked`` how many results that query
    asked for (cuBLASLt's shorter answers are not always prefixes of its longer ones: measured on the H200,
    scripts/gemm_algos.py) and ``algo_workspace`` the workspace bytes that candidate needs (the core checks
    it to see that its list is the same).
    """

    data_type: int
    compute_type: int
    scale_type: int
    trans: tuple[int, int]
    epilogue: int
    layouts: tuple[tuple[int, int, int, int, int], ...]
    alpha: float
    beta: float
    operands: tuple[tuple[str, int], ...]
    bias: tuple[str, int] | None
    offsets: tuple[tuple[int, int, int], ...]
    itemsize: int
    max_workspace: int
    min_alignment: tuple[int, int, int, int]
    algo_rank: int = 0
    algo_asked: int = 1
    algo_workspace: int = 0


class LtMatmul:
    """One stage's cuBLASLt matmul: descriptors, layouts and algorithm chosen at bind.

    Row-major ``c[M, N] = op(a) @ op(b)`` is column-major ``c^T = op(b)^T op(a)^T``: cuBLASLt's "A" is
    our b and its "B" our a. ``c_source`` is the input read as C (None: C = D = c), scaled by ``beta``;
    ``bias_input`` the input the BIAS epilogue reads; ``pre`` / ``post`` launches run around each call;
    ``a_input`` / ``b_input`` the stage inputs read as a and b (another family's stage may order them
    otherwise: conv2d's x is b).

    The algorithm: up to :data:`algos.CANDIDATES` heuristic results; a large product
    (:func:`algos.is_large`: FLOPs or operand bytes) with several candidates times each on scratch
    operands of the stage's shapes (:meth:`_time_candidates`) and keeps the fastest (``self.algo``, an
    :class:`algos.AlgoChoice`; remembered per process in :data:`algos.CHOICES`),
    else takes the heuristic's first.
    """

    def __init__(
        self,
        ctx: KernelContext,
        *,
        m: int,
        n: int,
        k: int,
        batch: BatchPlan,
        alpha: float,
        trans_a: bool = False,
        trans_b: bool = False,
        epilogue: str = "DEFAULT",
        bias_input: int | None = None,
        c_source: int | None = None,
        beta: float = 0.0,
        pre: list[PlanLaunch] | None = None,
        post: list[PlanLaunch] | None = None,
        a_input: int = 0,
        b_input: int = 1,
    ):
        import nvmath.bindings.cublasLt as lt

        self.lt = lt
        self.backend = backend = ctx.backend
        self.stage = ctx.stage
        self.handles: dict[int, int] = {}
        self.layouts: list[int] = []
        self.desc = None
        dtype = ctx.in_dtypes[0]
        data_type, compute, scale_type, scalar = _TYPES[dtype]
        if dtype == "float32" and dict(ctx.params or {}).get("math") == "tf32":
            compute = 77  # CUBLAS_COMPUTE_32F_FAST_TF32: precision_policy "tf32"
        self.handle_for(backend.default_stream())  # loads libcublasLt now: a failure falls back at bind
        self.desc = lt.matmul_desc_create(compute, scale_type)
        self._set(lt.MatmulDescAttribute.TRANSA, np.array([int(trans_b)], np.int32))
        self._set(lt.MatmulDescAttribute.TRANSB, np.array([int(trans_a)], np.int32))
        self._set(lt.MatmulDescAttribute.EPILOGUE, np.array([int(lt.Epilogue[epilogue])], np.uint32))
        self.layout_specs: list[tuple[int, int, int, int, int]] = []  # what _layout made, for the core
        self.bias_input = bias_input
        self.a_input, self.b_input = a_input, b_input
        self.bias_ptr = np.zeros(1, np.int64)
        self.c_source = c_source
        self.offsets = batch.offsets
        self.a_layout = self._layout(data_type, (k, n, k) if trans_b else (n, k, n), batch, 1)
        self.b_layout = self._layout(data_type, (m, k, m) if trans_a else (k, m, k), batch, 0)
        self.c_layout = self._layout(data_type, (n, m, n), batch, 2)
        self.alpha = np.array([alpha], scalar)
        self.beta = np.array([beta], scalar)
        self.itemsize = size = get_dtype(dtype).itemsize
        self.max_workspace = workspace_limit(m, n, batch.count, size, k)
        # Calls at offsets into the operands: only algorithms that accept those pointers' alignment
        # (cuBLASLt assumes 256 bytes unless told). "A" is our b, "B" our a; C and D are c.
        self.min_alignment = tuple(
            offset_alignment([o[which] * size for o in batch.offsets]) for which in (1, 0, 2, 2)
        )
        results = self.candidates(algos.CANDIDATES)
        if len(results) < 1:
            raise RuntimeError(
                f"cuBLASLt has no algorithm for {dtype} {m}x{n}x{k} (batch {batch.count}) "
                f"with epilogue {epilogue}"
            )
        self.workspaces: dict[int, int] = {}  # stream handle -> the backend's workspace of that stream
        self.pre = pre or []
        self.post = post or []
        out = ("out", 0)
        self.native = NativeMatmul(
            data_type,
            compute,
            scale_type,
            (int(trans_b), int(trans_a)),
            int(lt.Epilogue[epilogue]),
            tuple(self.layout_specs),
            float(alpha),
            float(beta),
            (("in", b_input), ("in", a_input), out if c_source is None else ("in", c_source), out),
            None if bias_input is None else ("in", bias_input),
            tuple((ob, oa, oc) for oa, ob, oc in batch.offsets),
            size,
            int(self.max_workspace),
            self.min_alignment,  # type: ignore[arg-type]
        )
        calls = batch.count * len(batch.offsets)
        flops = 2.0 * m * n * k * calls
        self.algo = self._choose(ctx, results, flops, operand_bytes(m, n, k, calls, size), size < 4)
        self.heuristic = results[self.algo.rank : self.algo.rank + 1].copy()  # what every call passes
        self.workspace_size = min(self.algo.workspace, WORKSPACE_BYTES)
        self.native = replace(
            self.native, algo_rank=self.algo.rank, algo_asked=len(results), algo_workspace=self.algo.workspace
        )

    def _layout(
        self, data_type: int, rows_cols_ld: tuple[int, int, int], batch: BatchPlan, which: int
    ) -> int:
        """A column-major layout; with its batch count and stride when the call is strided batched."""
        lt = self.lt
        layout = lt.matrix_layout_create(data_type, *rows_cols_ld)
        self.layouts.append(layout)
        self.layout_specs.append((*rows_cols_ld, batch.count, batch.strides[which] if batch.count > 1 else 0))
        if batch.count > 1:
            count = np.array([batch.count], np.int32)
            stride = np.array([batch.strides[which]], np.int64)
            lt.matrix_layout_set_attribute(
                layout, lt.MatrixLayoutAttribute.BATCH_COUNT, count.ctypes.data, count.itemsize
            )
            lt.matrix_layout_set_attribute(
                layout, lt.MatrixLayoutAttribute.STRIDED_BATCH_OFFSET, stride.ctypes.data, stride.itemsize
            )
        return layout

    def candidates(self, count: int, *, max_workspace: int | None = None) -> np.ndarray:
        """Up to ``count`` heuristic results for this product, cuBLASLt's best guess first (an array of
        ``matmul_heuristic_result_dtype``). The query is the one the native core repeats at load (the same
        descriptor attributes, layouts, workspace limit and alignments), so a rank names the same
        candidate there. ``max_workspace`` overrides the limit (experiments only: the core uses the
        plan's)."""
        lt = self.lt
        pref = lt.matmul_preference_create()
        try:
            ws = np.array([self.max_workspace if max_workspace is None else max_workspace], np.uint64)
            lt.matmul_preference_set_attribute(
                pref, lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, ws.ctypes.data, ws.itemsize
            )
            for name, value in zip("ABCD", self.min_alignment, strict=True):
                align = np.array([value], np.uint32)
                attr = lt.MatmulPreferenceAttribute[f"MIN_ALIGNMENT_{name}_BYTES"]
                lt.matmul_preference_set_attribute(pref, attr, align.ctypes.data, align.itemsize)
            results = np.zeros(max(int(count), 1), dtype=lt.matmul_heuristic_result_dtype)
            found = np.zeros(1, np.int32)
            lt.matmul_algo_get_heuristic(
                self.handle_for(self.backend.default_stream()),
                self.desc,
                self.a_layout,
                self.b_layout,
                self.c_layout,
                self.c_layout,
                pref,
                len(results),
                results.ctypes.data,
                found.ctypes.data,
            )
        finally:
            lt.matmul_preference_destroy(pref)
        return results[: max(0, min(int(found[0]), len(results)))]

    def _choose(
        self, ctx: KernelContext, results: np.ndarray, flops: float, nbytes: int, on_tensor_cores: bool
    ) -> algos.AlgoChoice:
        """The candidate this product runs: the memo's, else the fastest when worth timing, else the
        heuristic's first. Timing never fails the bind: whatever goes wrong keeps the first."""
        first = algos.AlgoChoice(0, int(results[0]["workspace_size"]))
        if not algos.worth_timing(flops, len(results), nbytes, on_tensor_cores=on_tensor_cores):
            return first
        unranked = replace(self.native, algo_rank=0, algo_asked=1, algo_workspace=0)
        key = (getattr(self.backend, "device", None), unranked)
        known = algos.CHOICES.get(key)
        if known is not None and known.rank < len(results):
            return replace(known, source="memo")
        try:
            rank, times = self._time_candidates(ctx, results, flops)
        except Exception as e:  # noqa: BLE001 - no scratch memory, a capture in progress, ...: keep the first
            log.info("pipelink: stage %r: cuBLASLt candidates not timed (%s); using the heuristic's first",
                     self.stage, e)  # fmt: skip
            return replace(first, why=f"not timed: {e}")
        choice = algos.AlgoChoice(
            rank,
            int(results[rank]["workspace_size"]),
            "timed",
            tuple(times),
            f"rank {rank} of {len(results)}: {times[rank] * 1e6:.1f} us"
            + (f" vs {times[0] * 1e6:.1f} us for the first" if rank else ""),
        )
        algos.CHOICES.put(key, choice)
        log.debug("pipelink: stage %r: cuBLASLt algorithm %s", self.stage, choice.why)
        return choice

    def _time_candidates(
        self, ctx: KernelContext, results: np.ndarray, flops: float
    ) -> tuple[int, list[float]]:
        """Time each candidate on scratch operands of the stage's shapes (random values, freed after) on
        a stream of its own, and pick with :func:`algos.choose_fastest`. Only the cuBLASLt calls are
        timed: the launches around them do not depend on the algorithm. A, B, C and D share one block (the
        largest of them: what the products compute is thrown away, only their time counts), so timing
        costs the device no more than its largest operand beside the plan (the 4096x4096 -> 16384 MLP's
        first product took 320 MiB of scratch with four blocks, above PyTorch's whole peak)."""
        backend = self.backend
        if backend.is_capture_active:  # timing waits on the device: never inside a capture
            raise RuntimeError("a CUDA graph capture is in progress")
        main = backend.default_stream()
        size = self.itemsize
        sizes = {"a": _numel(ctx.in_shapes[self.a_input]), "b": _numel(ctx.in_shapes[self.b_input])}
        sizes["d"] = _numel(ctx.out_shapes[0])
        if self.c_source is not None:
            sizes["c"] = _numel(ctx.in_shapes[self.c_source])
        if self.bias_input is not None:
            sizes["bias"] = _numel(ctx.in_shapes[self.bias_input])
        spans = {name: -(-max(n, 1) * size // 256) * 256 for name, n in sizes.items()}  # 256-byte aligned
        shared = max(span for name, span in spans.items() if name != "bias")
        workspace = max([min(int(r["workspace_size"]), WORKSPACE_BYTES) for r in results] + [256])
        total = shared + spans.get("bias", 0) + workspace
        scratch = backend.allocate(total, tag="cuBLASLt timing")
        try:
            at = dict.fromkeys(("a", "b", "d") + (("c",) if "c" in sizes else ()), scratch.ptr)
            if "bias" in spans:
                at["bias"] = scratch.ptr + shared
            at["workspace"] = scratch.ptr + shared + spans.get("bias", 0)  # the tail
            stream = backend.new_stream()
            backend.wait_event(stream, backend.record_event(main))  # the block is ordered on main
            pattern = _fill_random(backend, scratch.ptr, total - workspace, ctx.in_dtypes[0], stream)
            if self.bias_input is not None:
                self.bias_ptr[0] = at["bias"]
                self._set(self.lt.MatmulDescAttribute.BIAS_POINTER, self.bias_ptr)
            handle, raw = self.handle_for(main), int(stream.handle)
            reps = algos.calls_per_sample(flops)
            c_ptr = at.get("c", at["d"])

            def measure(rank: int) -> float:
                algo = results[rank : rank + 1]
                if int(algo["state"][0]) != 0:
                    raise RuntimeError(f"candidate {rank} has status {int(algo['state'][0])}")
                ws = min(int(algo["workspace_size"][0]), WORKSPACE_BYTES)
                start = backend.record_event(stream, timing=True)
                for _ in range(reps):
                    self._launch(handle, algo, at["a"], at["b"], c_ptr, at["d"], at["workspace"], ws, raw)
                end = backend.record_event(stream, timing=True)
                return backend.elapsed(start, end) / reps

            try:
                return algos.choose_fastest(len(results), measure)
            finally:
                backend.synchronize(stream)  # all of it done before the block goes back
                del pattern
        finally:
            backend.free(scratch)

    def native_launches(self) -> list[NativeKernel | NativeMatmul]:
        """The launches around the product and the product itself, for the native core."""
        pre = [x for launch in self.pre for x in launch.native_launches()]
        return pre + [self.native] + [x for launch in self.post for x in launch.native_launches()]

    def _set(self, attr: Any, value: np.ndarray) -> None:
        self.lt.matmul_desc_set_attribute(self.desc, attr, value.ctypes.data, value.itemsize)

    def handle_for(self, stream: Any) -> int:
        key = int(stream.handle)
        handle = self.handles.get(key)
        if handle is None:
            handle = self.handles[key] = self.lt.create()
        return handle

    def workspace_for(self, stream: Any) -> int:
        """The address of ``stream``'s cuBLASLt workspace (the backend's per-stream scratch buffer)."""
        ptr = self.backend.workspace(max(self.workspace_size, 1), stream=stream).ptr
        self.workspaces[int(stream.handle)] = ptr
        return ptr

    def _launch(
        self,
        handle: int,
        algo: np.ndarray,
        a: int,
        b: int,
        c_in: int,
        c: int,
        workspace: int,
        workspace_size: int,
        stream: int,
    ) -> None:
        """The product's cuBLASLt calls with ``algo`` (one heuristic result) on raw addresses: a and b
        as read by the stage, C read (c_in) and D written (c)."""
        size = self.itemsize
        for oa, ob, oc in self.offsets:
            self.lt.matmul(
                handle,
                self.desc,
                self.alpha.ctypes.data,
                b + ob * size,
                self.a_layout,
                a + oa * size,
                self.b_layout,
                self.beta.ctypes.data,
                c_in + oc * size,
                self.c_layout,
                c + oc * size,
                self.c_layout,
                algo.ctypes.data,
                workspace,
                workspace_size,
                stream,
            )

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        a, b = ins[self.a_input], ins[self.b_input]
        c = outs[0]
        lt = self.lt
        if self.bias_input is not None and self.bias_ptr[0] != ins[self.bias_input].ptr:
            self.bias_ptr[0] = ins[self.bias_input].ptr  # the descriptor keeps it between calls
            self._set(lt.MatmulDescAttribute.BIAS_POINTER, self.bias_ptr)
        for launch in self.pre:
            launch(ins, outs, stream)
        c_in = c.ptr if self.c_source is None else ins[self.c_source].ptr
        handle = self.handle_for(stream)
        workspace = self.workspaces.get(int(stream.handle))
        if workspace is None:  # one per stream, shared by every kernel on it (not one per stage)
            workspace = self.workspace_for(stream)
        try:
            self._launch(
                handle, self.heuristic, a.ptr, b.ptr, c_in, c.ptr, workspace, self.workspace_size,
                int(stream.handle),
            )  # fmt: skip
        except lt.cuBLASLtError as e:
            raise self.backend.raise_cuda(e, "cublasLtMatmul", self.stage) from e
        for launch in self.post:
            launch(ins, outs, stream)

    def __del__(self):
        try:
            lt = self.lt
            if self.desc is not None:
                lt.matmul_desc_destroy(self.desc)
            for layout in self.layouts:
                lt.matrix_layout_destroy(layout)
            for handle in self.handles.values():
                lt.destroy(handle)
        except Exception:  # noqa: BLE001 - partially built, or at interpreter exit
            pass


def _numel(shape: Any) -> int:
    return math.prod(shape) if shape is not None else 0


def _fill_random(backend: Any, ptr: int, nbytes: int, dtype: str, stream: Any) -> np.ndarray:
    """Fill ``nbytes`` at ``ptr`` with uniform values in [-1, 1) of ``dtype`` on ``stream``: one 64 KiB
    random block uploaded, then copied onto itself doubling (a few device copies, whatever the size).
    Returns the host block, to be kept until the stream is done with it."""
    pattern = np.random.default_rng(0).uniform(-1.0, 1.0, 1 << 14).astype(get_dtype(dtype).numpy)
    block = pattern.reshape(-1).view(np.uint8)
    first = min(nbytes, block.nbytes)
    backend.memcpy(ptr, block.ctypes.data, first, stream=stream)
    filled = first
    while filled < nbytes:
        step = min(filled, nbytes - filled)
        backend.memcpy(ptr + filled, ptr, step, stream=stream)
        filled += step
    return block


def lt_product(
    ctx: KernelContext,
    *,
    m: int,
    n: int,
    k: int,
    batch: BatchPlan,
    a_input: int,
    b_input: int,
    beta: float = 0.0,
    pre: list[PlanLaunch] | None = None,
    epilogue: str = "DEFAULT",
) -> Any:
    """One cuBLASLt product ``c = a @ b (+ beta * c)`` (then ``epilogue``, e.g. ``"RELU"``: cuBLASLt's
    epilogue after the beta term) for another family's stage, a and b read from its
    inputs ``a_input`` and ``b_input`` (row-major, ``batch`` from :func:`plan_batches`), C = D = the
    stage's output (``pre`` launches fill it first when beta is not 0). The kernel replays in the native
    core (``native_launches``) and follows the stage's math policy (``"tf32"``) as gemm does.

    Raises
    ------
    Exception
        Whatever stops cuBLASLt (nvmath-python missing, libcublasLt not loadable, no algorithm): the
        caller decides what falls back.
    """
    return LtMatmul(
        ctx,
        m=m,
        n=n,
        k=k,
        batch=batch,
        alpha=1.0,
        beta=beta,
        pre=pre,
        a_input=a_input,
        b_input=b_input,
        epilogue=epilogue,
    )
