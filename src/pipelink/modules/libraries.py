"""Opening the native modules a pipeline's stages name, before the linker runs (the linker opens no files).

Every failure is collected as a :class:`~pipelink.errors.Problem` at the stage's ``/library`` pointer, so
a load reports all bad modules at once.
"""

from __future__ import annotations

from ..config import PipelineConfig
from ..errors import PipeLinkError, Problem
from .native import load_library
from .registry import OperatorRegistry

__all__ = ["load_stage_libraries"]


def load_stage_libraries(
    config: PipelineConfig, registry: OperatorRegistry
) -> tuple[dict[str, str | None], list[Problem]]:
    """Load (or re-check, when already loaded) the module of every stage that names a ``library``.

    Returns
    -------
    sources : dict
        Stage id -> the module's source (its path, as the registry knows it), or None for a stage whose
        module failed (its problem is in ``problems``). Stages without ``library`` are absent.
    problems : list of Problem
        One per module that could not be loaded (missing file, integrity, manifest, version).
    """
    sources: dict[str, str | None] = {}
    problems: list[Problem] = []
    for stage in config.stages:
        if not stage.library:
            continue
        path = config.resolve_library(stage)
        try:
            # An isolated stage's module is opened only by its worker, never in this process.
            module = load_library(
                path, sha256=stage.sha256, registry=registry, open=stage.isolation != "process"
            )
        except PipeLinkError as e:
            problems.append(Problem(e.code, f"{stage.path}/library", e.message))
            sources[stage.id] = None
            continue
        sources[stage.id] = str(getattr(module, "path", path))
    return sources, problems
