"""PipeLink as an ONNX backend (``onnx.backend.base.Backend``): what onnx's own backend test runner, and
the tools built on that interface, call.

``PipeLinkBackend.prepare(model, device="CPU")`` imports the model and returns a rep whose ``run(inputs)``
gives the outputs in graph order. A node may need a value at import that the model feeds as an input (a
Reshape's shape, a TopK's k, a Resize's scales) or computes from inputs (a Range's bounds, a Loop's trip
count); the import's refusal names those graph inputs (``graph_inputs``). The rep then takes their values
from the run and imports the model specialised on them (``import_model(constants=...)``), the way a user
fixes them with ``pipelink import --constant``. Likewise, when the refusal comes from dims known only at
run time (the error's ``run_time_dims``: shape arithmetic on a dynamic sequence PipeLink cannot keep
symbolic), the rep imports the model for the shapes of the inputs given (``import_model(shapes=...)``,
``pipelink import --shape``). It keeps the pipeline for the next run with the same values and shapes
(the last :data:`MAX_SPECIALISED` of them). The import evaluates what those values decide (shape
arithmetic, a Range, at most ``fold.MAX_FOLD_ELEMENTS`` elements); every other input stays an input of
the pipeline, and the data a node's output size depends on (NonZero, Unique, NonMaxSuppression) is never
specialised on.

Devices are onnx's names: ``CPU``, ``CUDA``, ``CUDA:N``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep

from ..backends import get_backend
from ..errors import InvalidArgumentError, PipeLinkError
from . import _onnx, _read_model, from_onnx

__all__ = [
    "PipeLinkBackend",
    "PipeLinkBackendRep",
    "MAX_SPECIALISED",
    "pipelink_device",
    "prepare",
    "run_model",
    "run_node",
    "supports_device",
]

#: Pipelines a rep keeps, one per set of values of the inputs it specialises on (least recent dropped).
MAX_SPECIALISED = 8


def pipelink_device(device: str) -> str:
    """onnx's device name (``CPU``, ``CUDA``, ``CUDA:1``) as PipeLink's (``cpu``, ``cuda``, ``cuda:1``).

    Raises
    ------
    InvalidArgumentError
        For any other name.
    """
    text = str(device).strip()
    kind, sep, index = text.partition(":")
    if kind.upper() in ("CPU", "CUDA") and (not sep or index.isdigit()):
        return kind.lower() + (f":{index}" if sep else "")
    raise InvalidArgumentError(f"ONNX backend device {text!r}: give CPU, CUDA or CUDA:N")


class PipeLinkBackendRep(BackendRep):
    """A prepared model: ``run(inputs)`` imports (once per set of values PipeLink needs at import), loads
    and runs it. Close it (or use it as a context manager) to release its pipelines."""

    def __init__(self, model: Any, device: str, **options: Any):
        self.model = model
        self.device = device
        self.options = options
        weights = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in weights]
        self.output_names = [o.name for o in model.graph.output]
        self._needed: tuple[str, ...] = ()  # inputs the import needs the values of, learned on first run
        self._sized: tuple[str, ...] = ()  # inputs whose dims the import needs fixed, learned likewise
        self._pipelines: OrderedDict[tuple, Any] = OrderedDict()

    # -- onnx's interface ------------------------------------------------------------------------------
    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """The model's outputs (graph order) for ``inputs``: a sequence in the graph inputs' order, a
        mapping by name, or one array for a one-input model.

        Raises
        ------
        PipeLinkError
            What the import, the load or the run refuses (an op PipeLink lacks, a wrong shape...).
        """
        if kwargs:
            raise InvalidArgumentError(f"PipeLinkBackendRep.run takes no options (got {', '.join(kwargs)})")
        feeds = self._feeds(inputs)
        pipe = self._pipeline(feeds)
        given = {n: v for n, v in feeds.items() if n in pipe.inputs}
        got = pipe.run(given)
        return tuple(np.asarray(got[name].numpy()) for name in self.output_names)

    def close(self) -> None:
        """Close every pipeline the rep holds."""
        while self._pipelines:
            _, pipe = self._pipelines.popitem()
            pipe.close()

    def __enter__(self) -> PipeLinkBackendRep:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------------------
    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, Mapping):
            unknown = [n for n in inputs if n not in self.input_names]
            if unknown:
                raise InvalidArgumentError(
                    f"{unknown[0]!r} is not an input of the model (its inputs: {', '.join(self.input_names)})"
                )
            return {n: np.asarray(v) for n, v in inputs.items()}
        if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
            inputs = [inputs]
        if len(inputs) > len(self.input_names):
            raise InvalidArgumentError(
                f"{len(inputs)} inputs given; the model has {len(self.input_names)} "
                f"({', '.join(self.input_names)})"
            )
        return {n: np.asarray(v) for n, v in zip(self.input_names, inputs, strict=False)}

    def _pipeline(self, feeds: dict[str, np.ndarray]) -> Any:
        """The pipeline for the values of the inputs PipeLink needs at import (imported when new)."""
        while True:
            for names, what in ((self._needed, "value"), (self._sized, "shape")):
                missing = [n for n in names if n not in feeds]
                if missing:
                    raise InvalidArgumentError(
                        f"input {missing[0]!r} is needed at import (its {what} specialises the model) and "
                        "was not given"
                    )
            key = tuple((n, feeds[n].dtype.str, feeds[n].shape, feeds[n].tobytes()) for n in self._needed)
            key += tuple((n, feeds[n].shape) for n in self._sized)
            pipe = self._pipelines.get(key)
            if pipe is not None:
                self._pipelines.move_to_end(key)
                return pipe
            constants = {n: feeds[n] for n in self._needed}
            shapes = {n: list(feeds[n].shape) for n in self._sized}
            try:
                pipe = from_onnx(
                    self.model, device=self.device, constants=constants, shapes=shapes, **self.options
                )
            except PipeLinkError as e:
                more = self._more_needed(e, feeds)
                sized = [n for n in e.run_time_dims or () if n in feeds and n not in self._sized]
                if not more and not sized:
                    raise
                self._needed = tuple(dict.fromkeys([*self._needed, *more]))
                grown = dict.fromkeys([*self._sized, *sized])
                self._sized = tuple(n for n in grown if n not in self._needed)  # a constant has its shape
                continue
            self._pipelines[key] = pipe
            if len(self._pipelines) > MAX_SPECIALISED:
                _, oldest = self._pipelines.popitem(last=False)
                oldest.close()
            return pipe

    def _more_needed(self, error: PipeLinkError, feeds: dict[str, np.ndarray]) -> list[str]:
        """The graph inputs an import refusal asks the values of and that are not specialised on yet, when
        each is given (else none: the refusal stands). A refusal of other nodes beside them does not
        stop the retry: a node that reads what those values fold (a shape computed from them) may
        import once they are constants, and a retry still refused reports what is left."""
        entries = getattr(error, "unsupported", None) or []
        names = list(dict.fromkeys(n for entry in entries for n in entry.get("graph_inputs") or []))
        if any(n not in feeds for n in names):
            return []
        return [n for n in names if n not in self._needed]


class PipeLinkBackend(Backend):
    """onnx's backend interface over :func:`pipelink.from_onnx` (see the module's docstring)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> PipeLinkBackendRep:
        """A rep of ``model`` (a ModelProto or the path of an .onnx file) on ``device``; ``kwargs`` are
        :func:`pipelink.from_onnx`'s options (``fuse``) and :func:`pipelink.load`'s."""
        onnx = _onnx()
        return PipeLinkBackendRep(_read_model(onnx, model), pipelink_device(device), **kwargs)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        """``prepare(model, device, **kwargs).run(inputs)``, the rep closed after."""
        with cls.prepare(model, device, **kwargs) as rep:
            return rep.run(inputs)

    @classmethod
    def run_node(
        cls,
        node: Any,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Any = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """One node run as a one-node model: its inputs typed by the arrays given (in the node's input
        order), at ``opset_version`` (default: the newest the installed onnx knows). ``outputs_info`` is
        not needed (the import infers the outputs) and, when given, must match the outputs' count."""
        onnx = _onnx()
        opset = int(kwargs.pop("opset_version", onnx.defs.onnx_opset_version()))
        arrays = [np.asarray(v) for v in (inputs if isinstance(inputs, Sequence) else [inputs])]
        names = [n for n in node.input if n]
        if len(arrays) != len(names):
            raise InvalidArgumentError(
                f"run_node: {len(arrays)} inputs given, the node names {len(names)} ({', '.join(names)})"
            )
        if outputs_info is not None and len(outputs_info) != len(node.output):
            raise InvalidArgumentError(
                f"run_node: outputs_info describes {len(outputs_info)} outputs, the node has "
                f"{len(node.output)}"
            )
        helper = onnx.helper
        graph = helper.make_graph(
            [node],
            "run_node",
            [
                helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
                for n, a in zip(names, arrays, strict=True)
            ],
            [helper.make_tensor_value_info(o, 0, None) for o in node.output if o],
        )
        domain = node.domain if node.domain not in ("", "ai.onnx") else ""
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
        return cls.run_model(model, arrays, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether ``device`` (onnx's name) is one this host can run PipeLink on."""
        try:
            get_backend(pipelink_device(device))
        except PipeLinkError:
            return False
        return True


prepare = PipeLinkBackend.prepare
run_model = PipeLinkBackend.run_model
run_node = PipeLinkBackend.run_node
supports_device = PipeLinkBackend.supports_device
