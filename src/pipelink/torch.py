"""``pl.torch``: a pipeline as a PyTorch operator (docs/interop.md, "A pipeline as a PyTorch operator").

Reached as ``pl.torch`` (imported on first use): ``import pipelink`` never imports PyTorch, which stays an
optional dependency. The operator allocates its outputs with PyTorch (so PyTorch's allocator, CUDA graph
pools included, owns them) and runs the pipeline into them on PyTorch's current stream.
"""

from __future__ import annotations

import keyword
from typing import Any

import torch

from .dtypes import get_dtype
from .errors import InvalidArgumentError
from .pipeline import Pipeline

__all__ = ["as_op"]


def as_op(pipe: Pipeline, name: str) -> Any:
    """Register ``pipe`` as the PyTorch operator ``name`` (``torch.library.custom_op``).

    The operator takes the pipeline's inputs as tensors, in ``pipe.inputs`` order, and returns its
    outputs (one tensor, or a tuple in ``pipe.outputs`` order) as fresh tensors; it mutates nothing. Its
    fake implementation gives the output shapes and dtypes from the pipeline's declared and inferred shapes
    (dimension symbols resolved from the inputs), so it traces in ``torch.compile(fullgraph=True)`` without a
    graph break, and it can be captured in a ``torch.cuda.CUDAGraph`` (run it once before capturing).
    It runs where its tensors are: CPU tensors on a CPU pipeline, CUDA tensors on a pipeline loaded on
    their device; any other combination is refused.

    Parameters
    ----------
    pipe : Pipeline
        A loaded pipeline (it is not copied: close it only after the operator's last use).
    name : str
        ``"namespace::name"`` (``"mylib::block"``); a name registered once per process.

    Returns
    -------
    torch.library.CustomOpDef
        Callable like a function; also reachable as ``torch.ops.namespace.name``.

    Raises
    ------
    InvalidArgumentError
        A pipeline without inputs or with ``skip`` stages (outputs that may be missing), or a name PyTorch
        refuses (already registered, malformed).
    """
    inputs, outputs = list(pipe.inputs), list(pipe.outputs)
    if not inputs:
        raise InvalidArgumentError(
            f"pipeline {pipe.name!r} takes no inputs: a PyTorch operator needs one tensor"
        )
    skipping = [st.id for st in pipe.graph.stages if st.config.on_error.kind == "skip"]
    if skipping:
        raise InvalidArgumentError(
            f"pipeline {pipe.name!r} has on_error 'skip' stages ({', '.join(map(repr, skipping))}), whose "
            "outputs may be missing; a PyTorch operator returns every output: use another policy",
            stages=skipping,
        )
    namespace, _, short = name.partition("::")
    if short and hasattr(getattr(torch.ops, namespace), short):
        raise InvalidArgumentError(
            f"cannot register pipeline {pipe.name!r} as {name!r}: PyTorch already has an operator of that "
            "name; choose another name",
            name=name,
        )
    args = ", ".join(f"Tensor {_arg_name(n, i)}" for i, n in enumerate(inputs))
    returns = "Tensor" if len(outputs) == 1 else "(" + ", ".join(["Tensor"] * len(outputs)) + ")"
    specs: dict[tuple, dict] = {}

    def output_specs(tensors: tuple) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        # A symbolic size under torch.compile is specialised here (a guard): one graph per shape.
        key = tuple((tuple(int(d) for d in t.shape), t.dtype) for t in tensors)
        found = specs.get(key)
        if found is None:
            given = {n: (s, _dtype_name(n, d)) for n, (s, d) in zip(inputs, key, strict=True)}
            found = {n: (s, getattr(torch, d)) for n, (s, d) in pipe.output_specs(given).items()}
            if len(specs) < 64:
                specs[key] = found
        return found

    def run(*tensors: torch.Tensor) -> Any:
        _check_device(pipe, tensors, inputs)
        device = tensors[0].device
        outs = {n: torch.empty(s, dtype=d, device=device) for n, (s, d) in output_specs(tensors).items()}
        # PyTorch tensors in: the run goes to PyTorch's current stream (recorded there in a capture).
        pipe.run(dict(zip(inputs, tensors, strict=True)), out=outs)
        return outs[outputs[0]] if len(outputs) == 1 else tuple(outs[n] for n in outputs)

    def fake(*tensors: torch.Tensor) -> Any:
        outs = [tensors[0].new_empty(s, dtype=d) for s, d in output_specs(tensors).values()]
        return outs[0] if len(outs) == 1 else tuple(outs)

    try:
        op = torch.library.custom_op(name, run, mutates_args=(), schema=f"({args}) -> {returns}")
    except (RuntimeError, ValueError) as e:
        raise InvalidArgumentError(f"cannot register pipeline {pipe.name!r} as {name!r}: {e}") from e
    op.register_fake(fake)
    return op


def _arg_name(name: str, index: int) -> str:
    """The schema's name of an input: its own when it is a plain identifier, else ``input<i>``."""
    plain = name.isidentifier() and name.isascii() and not keyword.iskeyword(name) and name != "self"
    return name if plain else f"input{index}"


def _dtype_name(name: str, dtype: torch.dtype) -> str:
    """PipeLink's name of a PyTorch dtype (the names agree: ``torch.bfloat16`` is ``"bfloat16"``)."""
    try:
        return get_dtype(str(dtype).removeprefix("torch.")).name
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"input {name!r} has dtype {dtype}, which PipeLink does not support", input=name
        ) from None


def _check_device(pipe: Pipeline, tensors: tuple, inputs: list[str]) -> None:
    """Every tensor on the pipeline's device (CPU tensors for a CPU pipeline, cuda:N for cuda:N)."""
    for name, t in zip(inputs, tensors, strict=True):
        where = "cpu" if t.device.type == "cpu" else f"{t.device.type}:{t.device.index or 0}"
        if where != pipe.device:
            raise InvalidArgumentError(
                f"input {name!r} is on {where}, but pipeline {pipe.name!r} runs on {pipe.device}: move the "
                f"tensor, or register a pipeline loaded with device={where!r} under another name",
                input=name,
                device=where,
            )
