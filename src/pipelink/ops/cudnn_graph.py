"""cuDNN graphs (``nvidia-cudnn-frontend``, imported as ``cudnn``) run as stage kernels: the shared part of
the conv and attention families' CUDA variants.

A family describes its operation graph once, when a stage binds (:func:`build_graph` chooses the plan
there); a run only writes the stage's pointers into the variant pack and executes on the stage's stream,
through one cuDNN handle per stream and the backend's per-stream workspace, with no host synchronisation.
``cudnn`` is imported when a stage binds, never at import time. Without it, or when cuDNN has no plan for
a stage, the bind raises :class:`~pipelink.descriptor.VariantDeclined`: the stage runs its reference on
staged host copies and the load report says why.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from ..descriptor import KernelContext, VariantDeclined
from .kernel import PlanLaunch, Slot, contiguous_strides

__all__ = [
    "CUDNN_VARIANT",
    "IO_TYPES",
    "import_cudnn",
    "new_graph",
    "handle_for",
    "tensor",
    "build_graph",
    "CuDNNKernel",
    "raw_entry",
    "write_nothing",
]

CUDNN_VARIANT = "cuda:cudnn"  # the variant name of the operators cuDNN runs (conv, attention)

# PipeLink dtype -> cudnn.data_type member; float64 has no cuDNN convolution or attention engine.
IO_TYPES = {"float32": "FLOAT", "float16": "HALF", "bfloat16": "BFLOAT16"}


def import_cudnn() -> Any:
    """The ``cudnn`` module, or :class:`VariantDeclined` saying how to install it."""
    try:
        import cudnn
    except ImportError as e:
        raise VariantDeclined(
            f"nvidia-cudnn-frontend is not installed ({e}); install the extra for cuDNN kernels: "
            "pip install 'pipelink[cudnn]'"
        ) from e
    return cudnn


def new_graph(cudnn: Any, ctx: KernelContext) -> Any:
    """An empty graph for one stage: its input dtype in and out, float32 intermediates and compute,
    planned with the cuDNN handle of the backend's default stream (:func:`handle_for`).

    Raises
    ------
    VariantDeclined
        cuDNN itself cannot start (the frontend is installed, the library or the device is not usable).
    """
    try:
        handle = handle_for(cudnn, ctx.backend, ctx.backend.default_stream())
    except Exception as e:  # noqa: BLE001 - libcudnn missing or too old: the frontend's errors vary
        raise VariantDeclined(f"cuDNN could not create a handle: {type(e).__name__}: {e}") from e
    return cudnn.pygraph(
        io_data_type=getattr(cudnn.data_type, IO_TYPES[ctx.in_dtypes[0]]),
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )


# backend -> {stream handle: cuDNN handle}. A cuDNN handle costs milliseconds and device memory to
# create, so the stages of a backend share one per stream (cuDNN's model: one handle, one stream).
_HANDLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_HANDLES_LOCK = threading.Lock()


def handle_for(cudnn: Any, backend: Any, stream: Any) -> Any:
    """The cuDNN handle bound to ``stream`` of ``backend`` (made on first use, then shared)."""
    key = int(stream.handle)
    with _HANDLES_LOCK:
        per_stream = _HANDLES.setdefault(backend, {})
        handle = per_stream.get(key)
        if handle is None:
            handle = per_stream[key] = cudnn.create_handle()
            cudnn.set_stream(handle, key)
    return handle


def tensor(graph: Any, name: str, shape: Sequence[int], uid: int) -> Any:
    """A graph input or output of the graph's io type: dense, row-major (PipeLink's layout)."""
    return graph.tensor(name=name, dim=list(shape), stride=list(contiguous_strides(tuple(shape))), uid=uid)


def build_graph(cudnn: Any, graph: Any, *, numeric_notes_off: Sequence[str] = ()) -> int:
    """Validate the graph, rank its plans by cuDNN's heuristics (mode A, then the fallback list), drop
    the plans carrying any of ``numeric_notes_off`` (``cudnn.numerical_note`` names) and build the first
    that builds. Returns the plan's workspace size in bytes.

    Raises
    ------
    VariantDeclined
        cuDNN rejects the graph or builds none of its plans (the message is cuDNN's).
    """
    try:
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        notes = [getattr(cudnn.numerical_note, n) for n in numeric_notes_off]
        if notes:
            graph.deselect_numeric_notes(notes)
        graph.check_support()
        graph.build_plans()
        return int(graph.get_workspace_size())
    except Exception as e:  # noqa: BLE001 - cuDNN's own exception types vary by version and by engine
        raise VariantDeclined(f"cuDNN has no plan for this stage: {type(e).__name__}: {e}") from e


def write_nothing(ins: list, outs: list, stream: Any) -> None:
    """The kernel of an empty output (a dimension of 0): there is nothing to compute."""


class CuDNNKernel:
    """One stage's built cuDNN graph as a kernel ``(inputs, outputs, stream)``.

    Parameters
    ----------
    ctx : KernelContext
    graph : cudnn.pygraph
        Built (:func:`build_graph`).
    operands : sequence of (uid, slot)
        Each graph tensor's uid and the stage port it reads or writes: ``("in" | "out", position)``.
    workspace_size : int
        Bytes the plan needs (:func:`build_graph`).
    post : sequence of PlanLaunch
        Launches queued after the graph on the same stream (a bias add cuDNN could not fuse).

    Every stream the stage runs on gets the backend's cuDNN handle of that stream (:func:`handle_for`) and
    the backend's workspace of that stream, both looked up once (the main stream's at bind). A stream's
    first run goes through the frontend's public ``execute``; later runs through its raw-pointer entry
    when :func:`raw_entry` finds one (the frontend's own fast path, without its per-call Python checks).
    """

    def __init__(
        self,
        ctx: KernelContext,
        graph: Any,
        operands: Sequence[tuple[int, Slot]],
        workspace_size: int,
        post: Sequence[PlanLaunch] = (),
    ):
        self.cudnn = import_cudnn()
        self.backend = ctx.backend
        self.stage = ctx.stage
        self.graph = graph
        self.operands = tuple(operands)
        self.workspace_size = max(int(workspace_size), 1)
        self.post = tuple(post)
        # stream handle -> (cuDNN handle, workspace address, raw backend handle once warm, else None)
        self.streams: dict[int, tuple[Any, int, Any]] = {}
        self.uids = tuple(uid for uid, _ in self.operands)
        self._raw: tuple | None = None  # raw_entry's answer, asked after the first public execute
        self._stream_state(self.backend.default_stream())  # at bind, as Backend.workspace asks

    def _stream_state(self, stream: Any) -> tuple[Any, int, Any]:
        """``stream``'s cuDNN handle and workspace address (looked up on the stream's first run)."""
        key = int(stream.handle)
        state = self.streams.get(key)
        if state is None:
            workspace = self.backend.workspace(self.workspace_size, stream=stream).ptr
            state = self.streams[key] = (handle_for(self.cudnn, self.backend, stream), workspace, None)
        return state

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        handle, workspace, raw_handle = self._stream_state(stream)
        pointers = [(outs if kind == "out" else ins)[pos].ptr for _, (kind, pos) in self.operands]
        try:
            if raw_handle is not None:
                execute, order, plan_index = self._raw
                array = (ctypes.c_void_p * len(order))(*[pointers[i] for i in order])
                execute(ctypes.addressof(array), len(order), workspace, raw_handle, plan_index)
            else:
                # The frontend's ordered form (buffers in the order of tensor_uids), as its own PyTorch
                # operators call it; bare addresses take the geometry the graph declared.
                self.graph.execute(pointers, workspace, handle=handle, tensor_uids=self.uids)
                self._warm(stream, handle, workspace)
        except Exception as e:  # noqa: BLE001 - a launch failure of cuDNN: PipeLink's CUDAError
            raise self.backend.raise_cuda(e, "cuDNN graph execute", self.stage) from e
        for launch in self.post:
            launch(ins, outs, stream)

    def _warm(self, stream: Any, handle: Any, workspace: int) -> None:
        """After a stream's first public execute (the frontend builds what it builds lazily there): its later
        runs take the raw entry, when there is one."""
        if self._raw is None:
            self._raw = raw_entry(self.graph, self.uids) or ()
        raw_handle = getattr(handle, "backend_handle", None)
        if self._raw and isinstance(raw_handle, int) and raw_handle:
            self.streams[int(stream.handle)] = (handle, workspace, raw_handle)


def raw_entry(graph: Any, uids: Sequence[int]) -> tuple | None:
    """The frontend's raw-pointer entry for a built graph: ``(execute, order, plan index)``, where
    ``execute(void*[] address, count, workspace, backend handle, plan index)`` is what the frontend's own
    ``execute`` reaches after normalising its arguments, and ``order`` lists the positions in ``uids`` in
    the frontend's operand order (ascending uid). None when this frontend has no such entry, a Python engine
    of the frontend serves the plan, or the frontend's operands are not exactly ``uids``: the stage then
    keeps the public ``execute``."""
    try:
        if getattr(graph, "selected_engine", None) is not None:
            return None
        execute = graph._lowered_graph._execute_with_raw_ptrs  # noqa: SLF001 - the frontend's fast path
        expected = graph._variant_pack_uids()  # noqa: SLF001 - ascending operand uids
        plans = graph._plans  # noqa: SLF001
        config = graph._materialize_backend_plan(graph._plan_index) if plans else None  # noqa: SLF001
    except Exception:  # noqa: BLE001 - another frontend version: its public execute serves
        return None
    if not callable(execute) or expected is None or sorted(expected) != sorted(set(uids)):
        return None
    plan_index = getattr(config, "cpp_index", None) if config is not None else None
    order = tuple(list(uids).index(uid) for uid in expected)
    return execute, order, -1 if plan_index is None else int(plan_index)
