"""onnx's shape inference, run in a child process: its C++ code crashes the process it runs in on some
malformed models (a LayerNormalization axis of 2**31 segfaults it, a Split with more outputs than
``num_outputs`` aborts it), and a file a user imports must never take their process down.

The child is started on first use and reused. One that dies, or takes longer than :data:`TIMEOUT_S`, is
replaced, and that model is imported without inference (as when inference raises). The weights do not
travel: an initializer of more than :data:`SENT_ELEMENTS` elements goes as a typed graph input of its
shape, and is put back into the result.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Any

__all__ = ["SENT_ELEMENTS", "TIMEOUT_S", "infer_shapes"]

#: Seconds one inference may take before its child is killed (a real model's takes well under one).
TIMEOUT_S = 60.0
#: Initializers up to this many elements go to the child with their values (a Reshape's target, a Pad's
#: pads: inference reads them); bigger ones, the weights, only as their type and shape.
SENT_ELEMENTS = 4096

# The child: length-prefixed serialized models in on stdin, b"\0" + inferred model (or b"\1" + why) out on
# the stdout it started with; whatever onnx prints goes to stderr (the null device).
_CHILD = r"""
import os, struct, sys
sys.path[:0] = sys.argv[1:]
out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
from onnx import shape_inference
inp = sys.stdin.buffer
while True:
    head = inp.read(8)
    if len(head) < 8:
        break
    data = inp.read(struct.unpack("<Q", head)[0])
    try:
        reply = b"\0" + shape_inference.infer_shapes(data).SerializeToString()
    except Exception as e:
        reply = b"\1" + repr(e).encode("utf-8", "replace")
    out.write(struct.pack("<Q", len(reply)) + reply)
    out.flush()
"""


class _Child:
    """The inference process: one request at a time (the lock), restarted after a crash or timeout."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.owner = os.getpid()  # a forked process starts its own child, never writes to its parent's

    def _start(self) -> subprocess.Popen:
        import onnx

        onnx_root = os.path.dirname(os.path.dirname(os.path.abspath(onnx.__file__)))
        return subprocess.Popen(
            [sys.executable, "-c", _CHILD, onnx_root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def ask(self, data: bytes, timeout: float) -> bytes | None:
        """The child's reply to ``data``; None when it died or ran past ``timeout`` (it is then gone)."""
        with self.lock:
            if self.owner != os.getpid():
                self.proc, self.owner = None, os.getpid()
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()
            proc = self.proc
            try:
                proc.stdin.write(struct.pack("<Q", len(data)) + data)
                proc.stdin.flush()
                reply = _read(proc.stdout.fileno(), time.monotonic() + timeout)
            except OSError:
                reply = None
            if reply is None:
                self.stop()
            return reply

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or self.owner != os.getpid():
            return
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()


def _read(fd: int, deadline: float) -> bytes | None:
    """One length-prefixed reply from ``fd``, or None at EOF or past ``deadline``."""
    head = _read_exactly(fd, 8, deadline)
    if head is None:
        return None
    return _read_exactly(fd, struct.unpack("<Q", head)[0], deadline)


def _read_exactly(fd: int, size: int, deadline: float) -> bytes | None:
    chunks, left = [], size
    while left:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            return None
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


_child = _Child()
atexit.register(_child.stop)


def infer_shapes(onnx, model) -> Any | None:
    """``model`` with the value_info and output types onnx's shape inference gives it, as
    ``onnx.shape_inference.infer_shapes`` would return it; None when inference fails, crashes or times
    out (the import then goes on without it)."""
    slim, standins, dropped = _without_weights(onnx, model)
    try:
        data = slim.SerializeToString()
    except Exception:  # noqa: BLE001 - past protobuf's 2 GiB even without the weights
        return None
    reply = _child.ask(data, TIMEOUT_S)
    if reply is None or reply[:1] != b"\0":
        return None
    inferred = onnx.ModelProto()
    try:
        inferred.ParseFromString(reply[1:])
    except Exception:  # noqa: BLE001 - a reply cut short
        return None
    if dropped:  # the weights' stand-in inputs out, the weights back in, in their order
        del inferred.graph.input[len(inferred.graph.input) - standins :]
        del inferred.graph.initializer[:]
        inferred.graph.initializer.extend(model.graph.initializer)
    return inferred


def _without_weights(onnx, model) -> tuple[Any, int, bool]:
    """A copy of ``model`` whose initializers of more than :data:`SENT_ELEMENTS` elements are typed graph
    inputs instead; how many inputs were added for them, and whether any initializer was left out."""
    slim = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name != "graph":
            _set(slim, field, value)
    for field, value in model.graph.ListFields():
        if field.name != "initializer":
            _set(slim.graph, field, value)
    declared = {info.name for info in model.graph.input}
    standins, dropped = 0, False
    for tensor in model.graph.initializer:
        count = 1
        for d in tensor.dims:
            count *= int(d)
        if count <= SENT_ELEMENTS:
            slim.graph.initializer.append(tensor)
            continue
        dropped = True
        if tensor.name not in declared:  # IR < 4 lists initializers among the inputs: typed there
            slim.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))
            )
            standins += 1
    return slim, standins, dropped


def _set(message: Any, field: Any, value: Any) -> None:
    if field.is_repeated:
        getattr(message, field.name).extend(value)
    elif field.message_type is not None:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)
