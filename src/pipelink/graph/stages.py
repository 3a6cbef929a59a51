"""What the linker produces: stages bound to operator versions, the tensors between them, the DAG."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import PipelineConfig, StageConfig
from ..descriptor import OperatorDescriptor
from ..hardware import HardwareInfo

__all__ = ["LinkedStage", "TensorInfo", "LinkedGraph"]


@dataclass
class LinkedStage:
    """One stage bound to an operator version; ``inputs[i]`` is None for an absent optional port."""

    index: int
    id: str
    config: StageConfig
    desc: OperatorDescriptor
    attrs: dict[str, Any]
    inputs: tuple[str | None, ...]
    outputs: tuple[str, ...]
    fallback: OperatorDescriptor | None = None
    fallback_attrs: dict[str, Any] = field(default_factory=dict)
    math: str | None = None  # "tf32" under precision_policy tf32
    precision: str | None = None  # the compute dtype precision_policy resolved to

    @property
    def path(self) -> str:
        return self.config.path


@dataclass
class TensorInfo:
    name: str
    shape: tuple | None = None  # symbolic or concrete; None when unknown until run()
    dtype: str | None = None
    producer: int = -1  # stage index, -1 for an external input
    consumers: list[int] = field(default_factory=list)
    is_output: bool = False
    is_scratch: bool = False  # an operator output the config did not name


@dataclass
class LinkedGraph:
    config: PipelineConfig
    stages: list[LinkedStage]
    tensors: dict[str, TensorInfo]
    external_inputs: list[str]
    outputs: list[str]
    info: HardwareInfo

    def stage(self, stage_id: str) -> LinkedStage:
        return next(s for s in self.stages if s.id == stage_id)
