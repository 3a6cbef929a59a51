"""Shape rules and kernels of the collective operators.

A kernel is one call into its device's communicator with the stage's buffers and stream, and the stage's
``timeout_ms``; the communicator is made (collectively, on every rank) when the stage binds, never on the
hot path. A kernel with a timeout waits on the host, so it is marked unsafe for CUDA graph capture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...descriptor import KernelContext
from ...distributed import communicator_for, launch_env
from ...distributed.reference import check_reduce_op
from ...errors import InvalidArgumentError, ShapeMismatchError
from .._dims import check_ints, derived, is_known

__all__ = [
    "bind_all_gather",
    "bind_all_reduce",
    "bind_broadcast",
    "bind_recv",
    "bind_reduce_scatter",
    "bind_send",
    "infer_all_gather",
    "infer_all_reduce",
    "infer_broadcast",
    "infer_recv",
    "infer_reduce_scatter",
    "infer_send",
]


def _world_size() -> int:
    return launch_env().world_size


def _first_axis(op: str, shape: tuple) -> Any:
    if not shape:
        raise ShapeMismatchError(
            f"{op}: x is a scalar; it works on the first axis of a tensor of at least 1 dimension",
            port="x",
            symbol="rank",
            expected=1,
            got=0,
        )
    return shape[0]


def _check_rank(op: str, attr: str, rank: int, *, peer: bool = False) -> None:
    """``rank`` must be a rank of this world; a ``peer`` must also be another process than this one."""
    env = launch_env()
    if not 0 <= rank < env.world_size:
        raise InvalidArgumentError(
            f"{op}: {attr}={rank} is not a rank of this world of {env.world_size} process(es); ranks are 0 "
            f"to {env.world_size - 1}",
            attr=attr,
        )
    if peer and rank == env.rank:
        raise InvalidArgumentError(
            f"{op}: {attr}={rank} is this process's own rank; a peer is another rank (start several "
            "processes: pipelink run --nproc N)",
            attr=attr,
        )


def infer_all_reduce(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """x's shape and dtype (``avg`` only for floats)."""
    check_reduce_op("all_reduce", attrs["op"], in_dtypes[0])
    return (tuple(in_shapes[0]),), (in_dtypes[0],)


def infer_all_gather(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """The world size's blocks of x, stacked along the first axis."""
    shape = tuple(in_shapes[0])
    dim, size = _first_axis("all_gather", shape), _world_size()
    first = dim * size if is_known(dim) else derived("all_gather", f"{dim}*{size}")
    return ((first,) + shape[1:],), (in_dtypes[0],)


def infer_reduce_scatter(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """One of the world size's blocks of x along the first axis, which the world size must divide."""
    check_reduce_op("reduce_scatter", attrs["op"], in_dtypes[0])
    shape = tuple(in_shapes[0])
    dim, size = _first_axis("reduce_scatter", shape), _world_size()
    if is_known(dim) and dim % size:
        raise ShapeMismatchError(
            f"reduce_scatter: the first axis of x ({dim}) must split into {size} equal blocks, one per rank; "
            f"pad it to a multiple of {size}",
            port="x",
            symbol="axis 0",
            expected=f"a multiple of {size}",
            got=dim,
        )
    first = dim // size if is_known(dim) else derived("reduce_scatter", f"{dim}/{size}")
    return ((first,) + shape[1:],), (in_dtypes[0],)


def infer_broadcast(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """x's shape and dtype, once ``root`` is checked against the world."""
    _check_rank("broadcast", "root", int(attrs["root"]))
    return (tuple(in_shapes[0]),), (in_dtypes[0],)


def infer_send(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """x's shape and dtype, once ``peer`` is checked against the world."""
    _check_rank("send", "peer", int(attrs["peer"]), peer=True)
    return (tuple(in_shapes[0]),), (in_dtypes[0],)


def infer_recv(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """The declared ``shape`` and ``dtype``, once ``peer`` is checked against the world."""
    _check_rank("recv", "peer", int(attrs["peer"]), peer=True)
    check_ints(attrs["shape"], len(attrs["shape"]), op="recv", attr="shape", minimum=0)
    return (tuple(attrs["shape"]),), (attrs["dtype"],)


def _bind(ctx: KernelContext, call):
    """The kernel of a collective stage: ``call(comm, inputs, outputs, stream, timeout_ms)`` on the device's
    communicator, made now (collectively, on every rank), never on the hot path."""
    comm, timeout = communicator_for(ctx.backend), ctx.timeout_ms

    def kernel(inputs, outputs, stream):
        call(comm, inputs, outputs, stream, timeout)

    # A kernel that waits on the host for its own completion cannot be replayed from a CUDA graph.
    kernel.graph_safe = timeout is None
    return kernel


def bind_all_reduce(ctx: KernelContext):
    op = ctx.attrs["op"]
    return _bind(ctx, lambda comm, i, o, s, t: comm.all_reduce(i[0], o[0], op, stream=s, timeout_ms=t))


def bind_all_gather(ctx: KernelContext):
    return _bind(ctx, lambda comm, i, o, s, t: comm.all_gather(i[0], o[0], stream=s, timeout_ms=t))


def bind_reduce_scatter(ctx: KernelContext):
    op = ctx.attrs["op"]
    return _bind(ctx, lambda comm, i, o, s, t: comm.reduce_scatter(i[0], o[0], op, stream=s, timeout_ms=t))


def bind_broadcast(ctx: KernelContext):
    root = int(ctx.attrs["root"])
    return _bind(ctx, lambda comm, i, o, s, t: comm.broadcast(i[0], o[0], root, stream=s, timeout_ms=t))


def bind_send(ctx: KernelContext):
    peer, backend = int(ctx.attrs["peer"]), ctx.backend

    def send(comm, inputs, outputs, stream, timeout):
        comm.send(inputs[0], peer, stream=stream, timeout_ms=timeout)
        backend.copy(outputs[0], inputs[0], stream=stream)  # y passes x on

    return _bind(ctx, send)


def bind_recv(ctx: KernelContext):
    peer = int(ctx.attrs["peer"])
    return _bind(ctx, lambda comm, i, o, s, t: comm.recv(o[0], peer, stream=s, timeout_ms=t))
