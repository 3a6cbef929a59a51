"""Stage placement: what ``constraints.device_affinity`` means, checked at load (seed section 6).

One process drives one device (the pipeline's). A stage's affinity either names that device (honoured:
the stage runs there), lists several GPUs (``gpu:1,2``: the stage is replicated on each listed GPU, one
process per GPU, started by a launcher) or is refused at its JSON pointer. It never silently runs
elsewhere. A collective stage runs in this process (it holds the rank). This module decides; it allocates
and runs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ErrorCode, InvalidArgumentError, Problem
from ..hardware import HardwareInfo
from ..ops.collective import OPERATORS as COLLECTIVES
from .stages import LinkedGraph

__all__ = ["Affinity", "parse_affinity", "placement_problems"]

_AFFINITY = re.compile(r"^(cpu|cuda|gpu)(?::([0-9]+(?:,[0-9]+)*))?$")


@dataclass(frozen=True)
class Affinity:
    """A parsed ``device_affinity``: the device kind (``"cpu"`` or ``"cuda"``) and the device indices it
    lists (empty: the pipeline's own device of that kind)."""

    kind: str
    indices: tuple[int, ...] = ()

    @property
    def is_replicated(self) -> bool:
        """Several devices: the stage runs once on each, one process per device."""
        return len(self.indices) > 1

    def __str__(self) -> str:
        return self.kind + (":" + ",".join(map(str, self.indices)) if self.indices else "")


def parse_affinity(text: str) -> Affinity:
    """``"cuda:1"``, ``"gpu:1"`` (a synonym), ``"gpu:1,2"``, ``"cuda"`` or ``"cpu"`` as an :class:`Affinity`.

    Raises
    ------
    InvalidArgumentError
        The text is not of that form, a CPU affinity names an index, or a device is listed twice.
    """
    match = _AFFINITY.match(text.strip().lower())
    if match is None:
        raise InvalidArgumentError(
            f"device_affinity must be 'cpu', 'cuda:N', 'gpu:N' or a list such as 'gpu:1,2' (got {text!r})"
        )
    kind = "cpu" if match.group(1) == "cpu" else "cuda"
    indices = tuple(int(i) for i in match.group(2).split(",")) if match.group(2) else ()
    if kind == "cpu" and indices:
        raise InvalidArgumentError(f"device_affinity {text!r}: the CPU is one device; write 'cpu'")
    if len(set(indices)) != len(indices):
        raise InvalidArgumentError(f"device_affinity {text!r} lists a device twice")
    return Affinity(kind, indices)


def placement_problems(graph: LinkedGraph, device_count: Callable[[], int]) -> list[Problem]:
    """Every stage whose ``device_affinity`` this process cannot honour, and every collective stage asked
    to run in a worker process, at its JSON pointer.

    ``device_count()`` is the number of GPUs this host has (asked only when a GPU affinity names one).
    """
    problems: list[Problem] = []
    count: int | None = None
    for st in graph.stages:
        if st.config.isolation == "process" and st.desc.source == "builtin" and st.desc.name in COLLECTIVES:
            problems.append(
                Problem(
                    ErrorCode.PIPELINK_ERR_INVALID_CONFIG,
                    f"{st.path}/isolation",
                    f"stage {st.id!r}: a collective runs in the process that holds the communicator (its "
                    "rank); isolation 'process' would make a worker join the world as a second copy of this "
                    "rank: remove it (timeout_ms bounds a stuck collective)",
                )
            )
        text = st.config.constraints.device_affinity
        if text is None:
            continue
        path = f"{st.path}/constraints/device_affinity"
        try:
            aff = parse_affinity(text)
        except InvalidArgumentError as e:
            problems.append(
                Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, path, f"stage {st.id!r}: {e.message}")
            )
            continue
        if aff.indices and count is None and graph.info.kind == "cuda":
            count = device_count()
        reason = _refusal(aff, text, graph.info, count)
        if reason is not None:
            problems.append(
                Problem(ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED, path, f"stage {st.id!r}: {reason}")
            )
    return problems


def _refusal(aff: Affinity, text: str, info: HardwareInfo, count: int | None) -> str | None:
    """Why this process cannot run a stage with this affinity (None: it can)."""
    here = "cpu" if info.kind == "cpu" else f"cuda:{info.index}"
    if aff.kind == "cpu":
        if info.kind == "cpu":
            return None
        return (
            f"device_affinity 'cpu' in a pipeline loaded on {here}: a pipeline's stages run on its one "
            "device; load it with device='cpu', or remove the affinity"
        )
    if info.kind == "cpu":
        return (
            f"device_affinity {text!r} asks for a GPU, but the pipeline is loaded on the CPU: load it "
            "with device='cuda' (or 'auto' on a GPU host), or remove the affinity"
        )
    missing = [i for i in aff.indices if count is not None and i >= count]
    if missing:
        return (
            f"device_affinity {text!r} names cuda:{missing[0]}, which does not exist: this host has "
            f"{count} GPU(s), cuda:0 to cuda:{count - 1}"
        )
    if aff.indices and info.index not in aff.indices:
        return (
            f"device_affinity {text!r} does not include {here}, the device this process runs the "
            "pipeline on; one process drives one GPU: start one process per GPU "
            "(pipelink run --nproc N gives each process cuda:LOCAL_RANK) and move tensors between them "
            "with send/recv"
        )
    return None
