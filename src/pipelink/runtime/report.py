"""Run and load reports: what happened to every stage (status, error, times, chosen variant)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import PipeLinkError

__all__ = ["StageReport", "RunReport", "LoadReport"]


@dataclass
class StageReport:
    """One stage in one run.

    ``status`` is ``"ok"``, ``"degraded"`` (it failed and its ``on_error`` policy replaced its outputs),
    ``"skipped"`` (it failed under ``skip``, or an input it needs is missing) or ``"failed"``.
    """

    stage: str
    operator: str
    status: str = "ok"
    error: PipeLinkError | None = None
    time_s: float | None = 0.0  # host time around the stage; None where not measured (runs of the core)
    device_time_s: float | None = None  # filled with profile=True on a device backend
    # profile=True on a device backend: when the stage's work started on its stream, in seconds after the
    # run's first event on the main stream (stages on several streams overlap where these intervals do)
    device_start_s: float | None = None
    variant: str = ""
    action: str = ""  # what the policy did: "identity", "fallback:<op>", "skip"

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "operator": self.operator,
            "status": self.status,
            "error": self.error.to_dict() if self.error else None,
            "time_s": self.time_s,
            "device_time_s": self.device_time_s,
            "device_start_s": self.device_start_s,
            "variant": self.variant,
            "action": self.action,
        }


class RunReport:
    """``pipe.last_report``: per-stage reports in execution order, and outputs that could not be made.

    A run in which every stage succeeded records only its clock readings; ``stages`` builds the stage
    reports from them when first read, so a run pays nothing for reports nobody looks at.

    ``executor`` is ``"native"`` for a run the native core made (one C call; ``signature`` names the plan's
    input signature) or ``"python"`` for the Python executor, with ``executor_reason`` saying why the core
    did not make it. A native run lists every stage with the variant its plan runs, status ``"ok"`` (the
    core runs every stage or fails the run; with ``native=True`` a stage whose ``on_error`` policy the core
    applied is reported ``"ok"`` too) and ``time_s`` None: the core does not time stages (run with
    ``profile=True``, which goes through the Python executor, for per-stage times).
    """

    __slots__ = (
        "_stages",
        "_lazy",
        "missing_outputs",
        "total_time_s",
        "new_signature",
        "graph_replay",
        "executor",
        "executor_reason",
        "signature",
    )

    def __init__(self) -> None:
        self._stages: dict[str, StageReport] | None = None
        self._lazy: tuple | None = None  # (steps, clock readings: one before the first step, one after each)
        self.missing_outputs: list[str] = []
        self.total_time_s = 0.0
        self.new_signature = False
        self.graph_replay = False
        self.executor = "python"
        self.executor_reason: str | None = None
        self.signature: str | None = None

    def record_native(self, stages) -> None:
        """The stages a run of the native core ran, ``(stage id, operator, variant)`` in plan order: each
        ``"ok"``, with no time (the core does not time stages)."""
        self._lazy = None
        self._stages = {
            sid: StageReport(sid, op, variant=variant, time_s=None) for sid, op, variant in stages
        }

    def record_ok(self, steps, clock: list[float]) -> None:
        """Stages ``steps[i]`` ran from ``clock[i]`` to ``clock[i + 1]`` and succeeded."""
        self._stages, self._lazy = None, (steps, clock)

    @property
    def stages(self) -> dict[str, StageReport]:
        stages = self._stages
        if stages is None:
            stages = self._stages = {}
            if self._lazy is not None:
                steps, clock = self._lazy
                self._lazy = None
                for i in range(len(clock) - 1):
                    step = steps[i]
                    stages[step.stage.id] = StageReport(
                        step.stage.id,
                        step.stage.desc.name,
                        variant=step.variant,
                        time_s=clock[i + 1] - clock[i],
                    )
        return stages

    def __repr__(self) -> str:
        return (
            f"RunReport(stages={list(self.stages)}, missing_outputs={self.missing_outputs}, "
            f"graph_replay={self.graph_replay}, executor={self.executor!r})"
        )

    @property
    def ok(self) -> bool:
        return all(s.status == "ok" for s in self.stages.values()) and not self.missing_outputs

    @property
    def degraded(self) -> list[StageReport]:
        return [s for s in self.stages.values() if s.status != "ok"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": [s.to_dict() for s in self.stages.values()],
            "missing_outputs": self.missing_outputs,
            "total_time_s": self.total_time_s,
            "graph_replay": self.graph_replay,
            "executor": self.executor,
            "executor_reason": self.executor_reason,
        }


@dataclass
class LoadReport:
    """What ``pl.load`` decided: the device, each stage's operator version and variant, warnings, and the
    hot path: ``hot_path`` is ``"native"`` (``load(native=True)``), ``"python"`` (``native=False``, or AUTO
    with ``hot_path_reason`` saying why the core can run no signature) or ``"auto"``; ``executors`` maps each
    input signature met so far (``"x=8x1024:float32, ..."``) to ``"native"`` or the reason the Python
    executor runs it."""

    device: str
    variants: dict[str, str] = field(default_factory=dict)
    skipped_variants: dict[str, list[str]] = field(default_factory=dict)  # stage -> "variant: why"
    staged: list[str] = field(default_factory=list)  # stages running a host variant on staged copies
    versions: dict[str, str] = field(default_factory=dict)
    tuned: dict[str, dict] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    hot_path: str = "python"
    hot_path_reason: str | None = None
    executors: dict[str, str] = field(default_factory=dict)
