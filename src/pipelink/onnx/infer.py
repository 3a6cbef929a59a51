"""onnx's shape inference, run in a child process: its C++ code crashes the process it runs in on some
malformed models (a LayerNormalization axis of 2**31 segfaults it, a Split with more outputs than
``num_outputs`` aborts it), and a file a user imports must never take their process down.

The child is started on first use and reused. One that dies, or takes longer than :data:`TIMEOUT_S`, is
replaced, and that model is imported without inference (as when inference raises). The weights do not
travel: an initializer of more than :data:`SENT_ELEMENTS` elements goes as a typed graph input of its
shape, and is put back into the result.

What inference gives is read here too (:func:`known_shapes`, :func:`known_dtypes`), and so is a round
of it after folding (:func:`reinfer`: the nodes left, the folded values as initializers).
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

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from .einsum import dots_are_ellipses
from .fold import MAX_FOLD_ELEMENTS, resolved_target, split_offset, split_product
from .graph import Graph, Node
from .runtime_dims import named_output_shape

__all__ = [
    "SENT_ELEMENTS",
    "TIMEOUT_S",
    "infer_shapes",
    "inferable",
    "known_dtypes",
    "known_shapes",
    "reinfer",
]

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


# -- what inference knows, and its rounds after folding -------------------------------------------
def known_dtypes(onnx, graph) -> dict[str, str]:
    """ONNX tensor name -> PipeLink dtype name, for every typed value shape inference knows."""
    out: dict[str, str] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        elem = info.type.tensor_type.elem_type
        if elem:
            try:
                out[info.name] = get_dtype(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))).name
            except (KeyError, TypeError, ValueError, PipeLinkError):
                continue
    return out


def known_shapes(graph) -> dict[str, tuple]:
    """ONNX tensor name -> shape (ints, ``dim_param`` names, None for an unknown dim), for every value
    shape inference gave a shape."""
    out: dict[str, tuple] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        ttype = info.type.tensor_type
        if info.type.HasField("tensor_type") and ttype.HasField("shape"):
            out[info.name] = tuple(
                int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
                for d in ttype.shape.dim
            )
    return out


def _unknown(shape: tuple | None) -> bool:
    return shape is None or any(not isinstance(d, int) for d in shape)


def inferable(model) -> bool:
    """False when onnx's shape inference would never return on ``model``: an Einsum (in the graph, a
    subgraph or a function) whose equation has a stray ``.`` (the converter then refuses that node)."""

    def graphs(graph):
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    yield from graphs(sub)

    nodes = [n for graph in graphs(model.graph) for n in graph.node]
    nodes += [n for function in model.functions for n in function.node]
    for node in nodes:
        if node.op_type == "Einsum":
            equation = next((a.s for a in node.attribute if a.name == "equation"), b"")
            if not dots_are_ellipses(equation.decode("utf-8", "replace")):
                return False
    return True


def reinfer(onnx, model, g: Graph, nodes: list[Node], protos: dict[int, Any]) -> bool:
    """Run ONNX shape inference again on the nodes left after folding, the folded values as
    initializers (shape values still symbolic as int64 inputs), and merge what it learned into
    ``g.shapes`` and ``g.dtypes``. True when a shape became better known; False when every output of a
    remaining node was already fully known, or inference fails (the import goes on without it)."""
    outputs = [o for n in nodes for o in n.outputs if o]
    if not any(_unknown(g.shapes.get(o)) for o in outputs):
        return False
    helper = onnx.helper
    # A Reshape or Expand whose target is a shape value goes in with the target the import resolved for it
    # (0 or 1: the input's own dim, -1: the one inferred), so inference keeps the dims it copies; the
    # symbolic target would give every output dim a fresh name (heads merged back at a dynamic batch).
    inits, extra, trial_nodes = [], [], []
    for n in nodes:
        proto, target = protos[id(n)], resolved_target(g, n)
        if target is not None and not all(-(2**63) <= int(d) < 2**63 for d in target):
            target = None  # past int64 (a hostile dim's product): the converter refuses it
        if target is not None:
            name = f"{n.inputs[1]}::pipelink_target_{len(inits)}"
            inits.append(onnx.numpy_helper.from_array(np.asarray(target, dtype=np.int64), name))
            proto = _with_input(onnx, proto, 1, name)
            if n.op_type == "Reshape":  # the resolved target's 0s copy dims, as the stage runs it
                kept = [a for a in proto.attribute if a.name != "allowzero"]
                del proto.attribute[:]
                proto.attribute.extend(kept)
        trial_nodes.append(proto)
    needed = {i for proto in trial_nodes for i in proto.input if i}
    # Small constants go in with their values (a Reshape's target, a Pad's pads); the weights only as
    # typed inputs of their shape, so a round costs no copy of them. No data propagation: on a hostile
    # file (a Tile by 2**40) onnx's would try to make the data.
    for name in sorted(needed & g.constants.keys()):
        value = np.asarray(g.constants[name])
        if value.size <= MAX_FOLD_ELEMENTS:
            inits.append(onnx.numpy_helper.from_array(value, name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            extra.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
    extra += [
        helper.make_tensor_value_info(name, onnx.TensorProto.INT64, [len(v) if isinstance(v, list) else None])
        for name, v in g.symbolic.items()
        if name in needed
    ]
    inputs = [i for i in model.graph.input if i.name not in g.constants] + extra
    # the output of an Expand or ConstantOfShape to a run-time dim its input lacks, of a Range to one, and
    # of a Reshape to one (runtime_dims.py) has that dim: typed here by the graph input's name for it
    # (``batch``), onnx would give it a fresh one
    params = {d.dim_param for i in inputs for d in i.type.tensor_type.shape.dim if d.dim_param}
    typed = []
    for n in nodes:
        plain = resolved_target(g, n) is not None and n.op_type != "Reshape"  # an Expand inference follows
        shape = None if plain else named_output_shape(g, n, params)
        dtype = g.dtypes.get(n.outputs[0]) if n.outputs else None
        if shape is not None and dtype is not None:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(get_dtype(dtype).numpy))
            typed.append(helper.make_tensor_value_info(n.outputs[0], elem, list(shape)))
    graph = helper.make_graph(
        trial_nodes, model.graph.name or "g", inputs, list(model.graph.output), inits, value_info=typed
    )
    trial = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    if not inferable(trial):
        return False
    inferred = infer_shapes(onnx, trial)  # a help, never a requirement: None when it fails
    if inferred is None:
        return False
    # onnx names the dims it cannot relate unk__0, unk__1... afresh on every run: this round's get its tag,
    # so two tensors share a dim's name only when one run of inference related them (a Reshape copying
    # a dim of one tensor never copies a dim of another that an earlier round happened to name alike)
    declared = {
        d.dim_param
        for info in [*trial.graph.input, *trial.graph.output]
        for d in info.type.tensor_type.shape.dim
        if d.dim_param
    }

    g.inferences += 1

    def ours(d: Any) -> bool:  # a declared dim, or a product of them, or one less an int, the import named
        return isinstance(d, str) and all(split_offset(n)[0] in declared for n in split_product(d)[1])

    def tagged(shape: tuple) -> tuple:
        return tuple(f"{d}~{g.inferences}" if isinstance(d, str) and not ours(d) else d for d in shape)

    def known(shape: tuple | None) -> tuple[int, int]:  # the dims known, then those named as declared
        shape = shape or ()
        named = sum(ours(d) for d in shape)
        return sum(isinstance(d, int) for d in shape), named

    # a round that learns a dim replaces every shape it knows as well as before, so that the dims a
    # later Reshape relates come from one run
    better = {}
    for name, shape in known_shapes(inferred.graph).items():
        old = g.shapes.get(name)
        if _unknown(old) and (old is None or len(old) == len(shape)) and known(shape) >= known(old):
            better[name] = tagged(shape)
    # learning: a dim known, or named as a graph input's (each round adds to the total: the rounds end)
    learned = any(known(shape) > known(g.shapes.get(name)) for name, shape in better.items())
    if learned:
        g.shapes.update(better)
    for name, dtype in known_dtypes(onnx, inferred.graph).items():
        g.dtypes.setdefault(name, dtype)
    return learned


def _with_input(onnx, proto, index: int, name: str):
    """A copy of the NodeProto ``proto`` whose input ``index`` is ``name``."""
    copy = onnx.NodeProto()
    copy.CopyFrom(proto)
    copy.input[index] = name
    return copy
