"""The collective family: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``, ``send`` and
``recv`` between the processes of a run (docs/distributed.md).

Each stage calls its device's communicator (``pipelink.distributed``): gloo through torch.distributed on
the CPU, NCCL on the stage's stream on a GPU, exact copies in a one-process world. ``all_gather`` and
``reduce_scatter`` work on the first axis; the world size comes from the launch environment.
"""

from __future__ import annotations

from ...descriptor import Attr, OperatorDescriptor, Port, Variant
from ...distributed import REDUCE_OPS
from ...distributed.gloo import GLOO_DTYPES
from ...distributed.nccl import NCCL_DTYPES
from .._common import builtin_operator
from .bind import (
    bind_all_gather,
    bind_all_reduce,
    bind_broadcast,
    bind_recv,
    bind_reduce_scatter,
    bind_send,
    infer_all_gather,
    infer_all_reduce,
    infer_broadcast,
    infer_recv,
    infer_reduce_scatter,
    infer_send,
)

__all__ = ["OPERATORS", "descriptors"]

OPERATORS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv")
"""The collective operators: they run in the process that holds the communicator (never isolated)."""

_CPU_DTYPES = GLOO_DTYPES
_OP = Attr("op", "str", "sum", choices=REDUCE_OPS, doc="the reduction: sum, max, min or avg (the mean)")


def _nccl(bind) -> Variant:
    """The GPU variant: the same bind, on the device's NCCL communicator (capturable without timeout_ms)."""
    return Variant(device="cuda", bind=bind, name="cuda:nccl", dtypes=NCCL_DTYPES, source="builtin")


def _collective(name, *, doc, bind, inputs=None, outputs=None, attrs=(), infer=None, onnx=""):
    return builtin_operator(
        name,
        doc=doc,
        inputs=inputs if inputs is not None else [Port("x", dtype="T", contiguous=True)],
        outputs=outputs or [Port("y", dtype="T")],
        attrs=attrs,
        dtype_vars={"T": NCCL_DTYPES},
        variant_dtypes=_CPU_DTYPES,
        infer=infer,
        bind=bind,
        cuda=_nccl(bind),
        onnx=onnx,
    )


def descriptors() -> list[OperatorDescriptor]:
    """Fresh collective descriptors (one set per registry)."""
    return [
        _collective(
            "all_reduce",
            doc="Every rank gets the reduction (sum, max, min, avg) of x over all ranks.",
            attrs=[_OP],
            infer=infer_all_reduce,
            bind=bind_all_reduce,
        ),
        _collective(
            "all_gather",
            doc="Every rank gets the ranks' x concatenated along the first axis, rank order.",
            infer=infer_all_gather,
            bind=bind_all_gather,
        ),
        _collective(
            "reduce_scatter",
            doc="Rank r gets block r (first axis, world size blocks) of the reduction of x over all ranks.",
            attrs=[_OP],
            infer=infer_reduce_scatter,
            bind=bind_reduce_scatter,
        ),
        _collective(
            "broadcast",
            doc="Every rank gets the root rank's x.",
            attrs=[Attr("root", "int", 0, doc="the rank whose x is sent")],
            infer=infer_broadcast,
            bind=bind_broadcast,
        ),
        _collective(
            "send",
            doc="Send x to rank peer (which runs a matching recv); y is x, passed on.",
            attrs=[Attr("peer", "int", doc="the receiving rank")],
            infer=infer_send,
            bind=bind_send,
        ),
        _collective(
            "recv",
            doc="Receive y (of the given shape and dtype) from rank peer, which runs a matching send.",
            inputs=[],
            outputs=[Port("y", dtype="attr:dtype")],
            attrs=[
                Attr("peer", "int", doc="the sending rank"),
                Attr("shape", "ints", doc="the shape of the tensor received"),
                Attr("dtype", "dtype", "float32", doc="its dtype"),
            ],
            infer=infer_recv,
            bind=bind_recv,
        ),
    ]
