"""Frozen dataclasses for a validated pipeline config, with every default filled in.

``build_config`` assumes a document that :func:`check_document` accepted; it never validates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..dtypes import get_dtype
from .schema_errors import json_pointer

__all__ = [
    "InputDecl",
    "Constraints",
    "ErrorPolicy",
    "StageConfig",
    "PipelineConfig",
    "assign_stage_ids",
    "build_config",
    "DEFAULT_ALIGNMENT",
]

DEFAULT_ALIGNMENT = 256


@dataclass(frozen=True)
class InputDecl:
    """A declared external input: ``shape`` entries are sizes or dimension symbols; None when undeclared."""

    name: str
    shape: tuple[int | str, ...] | None = None
    dtype: str | None = None
    pin_memory: bool = False


@dataclass(frozen=True)
class Constraints:
    """Scheduling constraints of a stage.

    ``stream_affinity`` is ``"same_as_previous"`` (default), ``"async_preload"``, ``"new"`` or an ``int``
    (an explicit ``{"stream_id": N}``).
    """

    stream_affinity: str | int = "same_as_previous"
    memory_alignment: int = DEFAULT_ALIGNMENT
    precision_policy: str | None = None
    check_finite: bool = False
    timeout_ms: float | None = None
    device_affinity: str | None = None


@dataclass(frozen=True)
class ErrorPolicy:
    """What to do when a stage fails: ``kind`` is ``"fail"``, ``"identity"``, ``"skip"`` or ``"fallback"``."""

    kind: str = "fail"
    fallback: str | None = None
    fallback_version: str | None = None


@dataclass(frozen=True)
class StageConfig:
    """One stage, normalised. ``path`` is the JSON Pointer of the stage (``"/pipeline/1"``)."""

    index: int
    id: str
    operator: str
    library: str | None
    version: str | None
    sha256: str | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    constraints: Constraints
    on_error: ErrorPolicy
    isolation: str
    tuned: bool
    path: str


@dataclass(frozen=True)
class PipelineConfig:
    """A whole config, normalised.

    ``inputs`` and ``outputs`` are None when the config does not declare them (the linker then derives
    them); ``base_dir`` is where relative ``library`` paths start; ``raw`` is the document as read;
    ``weights`` are the arrays of the ``weights`` file by name (bound constants: each is also in ``inputs``
    with its shape and dtype).
    """

    name: str
    inputs: dict[str, InputDecl] | None
    outputs: tuple[str, ...] | None
    requires: dict[str, Any]
    stages: tuple[StageConfig, ...]
    base_dir: Path
    source_path: Path | None
    raw: dict[str, Any]
    weights: Mapping[str, Any] = field(default_factory=dict)

    def resolve_library(self, stage: StageConfig) -> Path | None:
        """The library file of ``stage``: absolute as given, otherwise relative to ``base_dir``.

        Parameters
        ----------
        stage : StageConfig
            A stage of this config.

        Returns
        -------
        Path or None
            None when the stage names no library (a built-in or Python operator).
        """
        if stage.library is None:
            return None
        path = Path(stage.library).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    def stage(self, stage_id: str) -> StageConfig:
        """The stage with id ``stage_id``.

        Raises
        ------
        KeyError
            When no stage has that id; the message lists the ids.
        """
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(f"no stage with id {stage_id!r}; stages: {', '.join(s.id for s in self.stages)}")


def assign_stage_ids(stages: Sequence[Any]) -> list[str | None]:
    """The id of each stage: the explicit ``id``, else the operator name made unique.

    Explicit ids are kept as written (duplicates among them are for the validator to report). A stage
    without one gets its operator name, or ``name_1``, ``name_2``... when that is already taken by an
    explicit id or an earlier defaulted one. Entries that are not objects with a string name get None.
    """
    taken = {s["id"] for s in stages if isinstance(s, dict) and isinstance(s.get("id"), str)}
    # Where each name's search for a free suffix stopped: names only get taken, so the next stage of
    # that operator resumes there (linear in the stages, not quadratic in a name used thousands of times).
    last: dict[str, int] = {}
    ids: list[str | None] = []
    for stage in stages:
        if not isinstance(stage, dict):
            ids.append(None)
        elif isinstance(stage.get("id"), str):
            ids.append(stage["id"])
        elif isinstance(stage.get("name"), str):
            base = stage["name"]
            n = last.get(base, 0)
            candidate = f"{base}_{n}" if n else base
            while candidate in taken:
                n += 1
                candidate = f"{base}_{n}"
            last[base] = n
            taken.add(candidate)
            ids.append(candidate)
        else:
            ids.append(None)
    return ids


def _constraints(raw: dict[str, Any]) -> Constraints:
    affinity = raw.get("stream_affinity", "same_as_previous")
    if isinstance(affinity, dict):
        affinity = int(affinity["stream_id"])
    timeout = raw.get("timeout_ms")
    return Constraints(
        stream_affinity=affinity,
        memory_alignment=int(raw.get("memory_alignment", DEFAULT_ALIGNMENT)),
        precision_policy=raw.get("precision_policy"),
        check_finite=bool(raw.get("check_finite", False)),
        timeout_ms=float(timeout) if timeout is not None else None,
        device_affinity=raw.get("device_affinity"),
    )


def _error_policy(raw: str | dict[str, Any]) -> ErrorPolicy:
    if isinstance(raw, dict):
        return ErrorPolicy("fallback", raw["fallback"], raw.get("version"))
    return ErrorPolicy(raw)


def build_config(
    doc: dict[str, Any],
    base_dir: Path,
    source_path: Path | None = None,
    weights: Mapping[str, Any] | None = None,
) -> PipelineConfig:
    """Normalise a valid document into a :class:`PipelineConfig`.

    Parameters
    ----------
    doc : dict
        A document for which :func:`check_document` returned no problems.
    base_dir : Path
        Directory that relative ``library`` paths start from.
    source_path : Path, optional
        The config file, when the document came from one.
    weights : mapping of name -> array, optional
        The arrays of the config's ``weights`` file (``config.weights.read_weights``), checked against
        the declarations by :func:`check_document`.

    Returns
    -------
    PipelineConfig
        Defaults: stage id = operator name (de-duplicated), ``memory_alignment`` 256, ``stream_affinity``
        ``"same_as_previous"``, ``on_error`` ``"fail"``, ``isolation`` ``"none"``, ``tuned`` True; the
        pipeline name defaults to the file's stem, else ``"pipeline"``.
    """
    raw_stages = doc["pipeline"]
    ids = assign_stage_ids(raw_stages)
    stages = []
    for index, (raw, stage_id) in enumerate(zip(raw_stages, ids, strict=True)):
        stages.append(
            StageConfig(
                index=index,
                id=str(stage_id),
                operator=raw["name"],
                library=raw.get("library"),
                version=raw.get("version"),
                sha256=raw.get("sha256"),
                inputs=tuple(raw["inputs"]),
                outputs=tuple(raw["outputs"]),
                attrs={k: list(v) if isinstance(v, list) else v for k, v in raw.get("attrs", {}).items()},
                constraints=_constraints(raw.get("constraints", {})),
                on_error=_error_policy(raw.get("on_error", "fail")),
                isolation=raw.get("isolation", "none"),
                tuned=bool(raw.get("tuned", True)),
                path=json_pointer(["pipeline", index]),
            )
        )
    inputs = None
    if "inputs" in doc:
        inputs = {
            name: InputDecl(
                name=name,
                shape=tuple(decl["shape"]) if "shape" in decl else None,
                dtype=decl.get("dtype"),
                pin_memory=bool(decl.get("pin_memory", False)),
            )
            for name, decl in doc["inputs"].items()
        }
    for name, array in (weights or {}).items():
        inputs = inputs if inputs is not None else {}
        decl = inputs.get(name)
        inputs[name] = InputDecl(
            name=name,
            shape=tuple(int(d) for d in array.shape),
            dtype=get_dtype(array.dtype).name,
            pin_memory=decl.pin_memory if decl is not None else False,
        )
    default_name = source_path.stem if source_path is not None else "pipeline"
    return PipelineConfig(
        name=doc.get("name", default_name),
        inputs=inputs,
        outputs=tuple(doc["outputs"]) if "outputs" in doc else None,
        requires=dict(doc.get("requires", {})),
        stages=tuple(stages),
        base_dir=Path(base_dir),
        source_path=Path(source_path) if source_path is not None else None,
        raw=doc,
        weights=dict(weights or {}),
    )
