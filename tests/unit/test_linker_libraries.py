"""Native modules are loaded before linking: the linker resolves operators it is given and opens no file."""

from __future__ import annotations

from pipelink.config import build_config
from pipelink.errors import ErrorCode
from pipelink.graph.linker import link
from pipelink.hardware import cpu_info
from pipelink.modules.libraries import load_stage_libraries
from pipelink.modules.registry import OperatorRegistry
from pipelink.ops import register_builtins


def _registry() -> OperatorRegistry:
    registry = OperatorRegistry()
    register_builtins(registry)
    return registry


DOC = {
    "pipeline": [
        {"name": "relu", "inputs": ["x"], "outputs": ["y"]},
        {"name": "deform_v1", "id": "d", "library": "lib/libmissing.so", "inputs": ["y"], "outputs": ["z"]},
    ]
}


def test_the_linker_refuses_a_library_stage_whose_module_was_not_loaded(tmp_path):
    # Wrong if the linker opened the file itself (the message would be about a missing file).
    cfg = build_config(DOC, tmp_path, None)
    graph, problems = link(cfg, _registry(), cpu_info())
    assert graph is None
    (problem,) = problems
    assert problem.code == ErrorCode.PIPELINK_ERR_MODULE_LOAD_FAILED
    assert problem.path == "/pipeline/1/library"
    assert "was not loaded before linking" in problem.message


def test_a_module_that_fails_to_load_is_reported_once_at_its_stage(tmp_path):
    cfg = build_config(DOC, tmp_path, None)
    registry = _registry()
    libraries, problems = load_stage_libraries(cfg, registry)
    assert libraries == {"d": None}
    (problem,) = problems
    assert problem.code == ErrorCode.PIPELINK_ERR_MODULE_LOAD_FAILED and problem.path == "/pipeline/1/library"
    graph, link_problems = link(cfg, registry, cpu_info(), libraries=libraries)
    assert graph is None and link_problems == []  # not reported twice
