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

from collections.abc import Sequence
from typing import Any

from ..descriptor import KernelContext, VariantDeclined
from .kernel import PlanLaunch, Slot, contiguous_strides

__all__ = ["IO_TYPES", "import_cudnn", "new_graph", "tensor", "build_graph", "CuDNNKernel", "write_nothing"]

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


def new_graph(cudnn: Any, dtype: str) -> Any:
    """An empty graph with ``dtype`` inputs and outputs, float32 intermediates and float32 compute."""
    io = getattr(cudnn.data_type, IO_TYPES[dtype])
    return cudnn.pygraph(
        io_data_type=io,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )


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
        self.handles: dict[int, Any] = {}  # stream handle -> (cuDNN handle, workspace address)
        self.pack: dict[int, int] = {uid: 0 for uid, _ in self.operands}  # uid -> pointer, reused

    def _handle_for(self, stream: Any) -> tuple[Any, int]:
        """The cuDNN handle bound to ``stream`` and the stream's workspace (made on first use)."""
        key = int(stream.handle)
        entry = self.handles.get(key)
        if entry is None:
            handle = self.cudnn.create_handle()
            self.cudnn.set_stream(handle, key)
            workspace = self.backend.workspace(self.workspace_size, stream=stream).ptr
            entry = self.handles[key] = (handle, workspace)
        return entry

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        handle, workspace = self._handle_for(stream)
        pack = self.pack
        for uid, (kind, pos) in self.operands:
            pack[uid] = (outs if kind == "out" else ins)[pos].ptr
        try:
            self.graph.execute(pack, workspace, handle=handle)
        except Exception as e:  # noqa: BLE001 - a launch failure of cuDNN: PipeLink's CUDAError
            raise self.backend.raise_cuda(e, "cuDNN graph execute", self.stage) from e
        for launch in self.post:
            launch(ins, outs, stream)

    def __del__(self):
        try:
            for handle, _ in self.handles.values():
                self.cudnn.destroy_handle(handle)
        except Exception:  # noqa: BLE001 - at interpreter exit
            pass
