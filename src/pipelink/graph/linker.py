"""The linker: stages -> a checked DAG of operators with symbolic shapes and dtypes (seed section 3.5).

It resolves every stage's operator, maps tensors to ports, checks attributes, versions, hardware and
error policies, and infers shapes and dtypes as far as the declared inputs allow. Every problem is
collected with its JSON Pointer; nothing runs here, and no file is opened: native modules are loaded
before (``modules.libraries.load_stage_libraries``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..backends.cuda import device_count
from ..config import PipelineConfig, StageConfig
from ..descriptor import OperatorDescriptor, infer_outputs
from ..errors import ErrorCode, PipeLinkError, Problem, error_for_code
from ..hardware import HardwareInfo, missing_requirement, requirements_from, unmet_message
from ..modules.registry import OperatorRegistry, UnknownOperatorError
from ..versioning import check_compatible
from .placement import placement_problems
from .precision import apply_precision
from .stages import LinkedGraph, LinkedStage, TensorInfo

__all__ = ["LinkedStage", "TensorInfo", "LinkedGraph", "link", "infer_signature", "check_policies"]

log = logging.getLogger("pipelink")


def link(
    config: PipelineConfig,
    registry: OperatorRegistry,
    info: HardwareInfo,
    *,
    libraries: Mapping[str, str | None] | None = None,
) -> tuple[LinkedGraph | None, list[Problem]]:
    """Link a validated config. Returns the graph (None when a stage could not be resolved) and problems.

    ``libraries``: stage id -> source of the native module already loaded for each stage that names a
    ``library`` (None for a module whose failure was reported when loading it); see
    :func:`pipelink.modules.libraries.load_stage_libraries`.
    """
    problems: list[Problem] = []
    problems += _check_requires(config, info)
    stages: list[LinkedStage] = []
    for stage in config.stages:
        linked = _link_stage(stage, registry, info, problems, libraries or {})
        if linked is not None:
            stages.append(linked)
    if len(stages) != len(config.stages):
        return None, problems
    stages = apply_precision(stages, registry, info, problems)
    if problems and any(p.path.endswith("/precision_policy") for p in problems):
        return None, problems
    graph = _build_graph(config, stages, info)
    problems += placement_problems(graph, device_count)
    if not problems:
        declared = {n: (d.shape, d.dtype) for n, d in (config.inputs or {}).items()}
        try:
            infer_signature(graph, declared, partial=True)
        except PipeLinkError as e:
            problems.append(Problem(e.code, _problem_path(graph, e), e.message))
        problems += _check_policies(graph, registry)
        problems += device_problems(graph, registry)
    return graph, problems


def _check_requires(config: PipelineConfig, info: HardwareInfo) -> list[Problem]:
    req = config.requires or {}
    if not req:
        return []
    try:
        reqs = requirements_from(req.get("compute_capability"), req.get("features", ()))
    except ValueError as e:
        return [Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, "/requires", str(e))]
    unmet = missing_requirement(info, reqs)
    if unmet is None:
        return []
    return [
        Problem(
            ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED, "/requires", f"pipeline {unmet_message(info, unmet)}"
        )
    ]


def _resolve(
    name: str,
    spec: str | None,
    registry: OperatorRegistry,
    source: str | None,
    stage: StageConfig,
    problems: list[Problem],
    name_path: str,
) -> OperatorDescriptor | None:
    try:
        desc = registry.get(name, spec, source=source, stage=stage.id)
    except UnknownOperatorError as e:
        where = f" in module {source}" if source else ""
        problems.append(Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, name_path, f"{e}{where}"))
        return None
    except PipeLinkError as e:
        problems.append(Problem(e.code, f"{stage.path}/version", e.message))
        return None
    try:
        check_compatible(name, spec, desc.version, stage=stage.id, where=f" (stage {stage.id!r})")
    except PipeLinkError as e:
        problems.append(Problem(e.code, f"{stage.path}/version", e.message))
        return None
    return desc


def _link_stage(
    stage: StageConfig,
    registry: OperatorRegistry,
    info: HardwareInfo,
    problems: list[Problem],
    libraries: Mapping[str, str | None],
) -> LinkedStage | None:
    source = None
    if stage.library:
        if stage.id not in libraries:
            problems.append(
                Problem(
                    ErrorCode.PIPELINK_ERR_MODULE_LOAD_FAILED,
                    f"{stage.path}/library",
                    f"stage {stage.id!r}: module {stage.library!r} was not loaded before linking; "
                    "load it with modules.libraries.load_stage_libraries first",
                )
            )
            return None
        source = libraries[stage.id]
        if source is None:  # its loading failed and was reported then
            return None
    desc = _resolve(stage.operator, stage.version, registry, source, stage, problems, f"{stage.path}/name")
    if desc is None:
        return None
    n_required = sum(1 for p in desc.inputs if not p.optional)
    if not n_required <= len(stage.inputs) <= len(desc.inputs):
        ports = ", ".join(p.name + ("?" if p.optional else "") for p in desc.inputs)
        problems.append(
            Problem(
                ErrorCode.PIPELINK_ERR_INVALID_CONFIG,
                f"{stage.path}/inputs",
                f"stage {stage.id!r}: operator {desc.name!r} takes inputs ({ports}), got {len(stage.inputs)}",
            )
        )
        return None
    if len(stage.outputs) > len(desc.outputs):
        problems.append(
            Problem(
                ErrorCode.PIPELINK_ERR_INVALID_CONFIG,
                f"{stage.path}/outputs",
                f"stage {stage.id!r}: operator {desc.name!r} has outputs "
                f"({', '.join(p.name for p in desc.outputs)}), got {len(stage.outputs)}",
            )
        )
        return None
    try:
        attrs = desc.resolve_attrs(stage.attrs, where=f"stage {stage.id!r}")
    except PipeLinkError as e:
        attr = e.context.get("attr")
        problems.append(
            Problem(e.code, f"{stage.path}/attrs" + (f"/{attr}" if attr in stage.attrs else ""), e.message)
        )
        return None
    made = desc.output_count(attrs) if desc.output_count is not None else len(desc.outputs)
    if len(stage.outputs) > made:
        problems.append(
            Problem(
                ErrorCode.PIPELINK_ERR_INVALID_CONFIG,
                f"{stage.path}/outputs/{made}",
                f"stage {stage.id!r}: operator {desc.name!r} makes {made} output(s) with these attributes, "
                f"but the stage names {len(stage.outputs)}: remove "
                + ", ".join(map(repr, stage.outputs[made:])),
            )
        )
        return None
    inputs = tuple(stage.inputs) + (None,) * (len(desc.inputs) - len(stage.inputs))
    # Outputs the config leaves unnamed still need memory: name them after the stage.
    outputs = tuple(stage.outputs) + tuple(f"{stage.id}.{p.name}" for p in desc.outputs[len(stage.outputs) :])
    linked = LinkedStage(stage.index, stage.id, stage, desc, attrs, inputs, outputs)
    if stage.on_error.kind == "fallback":
        fb = _resolve(
            stage.on_error.fallback,
            stage.on_error.fallback_version,
            registry,
            None,
            stage,
            problems,
            f"{stage.path}/on_error/fallback",
        )
        if fb is None:
            return None
        try:
            linked.fallback_attrs = fb.resolve_attrs(
                {k: v for k, v in stage.attrs.items() if fb.attr(k) is not None}, where=f"stage {stage.id!r}"
            )
        except PipeLinkError as e:
            problems.append(Problem(e.code, f"{stage.path}/on_error", e.message))
            return None
        linked.fallback = fb
    return linked


def _build_graph(config: PipelineConfig, stages: list[LinkedStage], info: HardwareInfo) -> LinkedGraph:
    tensors: dict[str, TensorInfo] = {}
    external: list[str] = []
    for name, decl in (config.inputs or {}).items():
        tensors[name] = TensorInfo(name, tuple(decl.shape) if decl.shape is not None else None, decl.dtype)
        external.append(name)
    for st in stages:
        for name in st.inputs:
            if name is None:
                continue
            if name not in tensors:
                tensors[name] = TensorInfo(name)
                external.append(name)
            tensors[name].consumers.append(st.index)
        for j, name in enumerate(st.outputs):
            tensors[name] = TensorInfo(name, producer=st.index, is_scratch=j >= len(st.config.outputs))
    if config.outputs is not None:
        outputs = list(config.outputs)
    else:
        outputs = [n for n, t in tensors.items() if t.producer >= 0 and not t.consumers and not t.is_scratch]
    for name in outputs:
        tensors[name].is_output = True
    return LinkedGraph(config, stages, tensors, external, outputs, info)


def infer_signature(
    graph: LinkedGraph, inputs: Mapping[str, tuple], *, partial: bool = False
) -> dict[str, tuple[tuple, str]]:
    """Shapes and dtypes of every tensor for one input signature ``{name: (shape, dtype)}``.

    With ``partial``, unknown inputs propagate as unknown (load-time checking of what is declared).

    Raises
    ------
    ShapeMismatchError, DTypeMismatchError
        Naming the stage, the port, the symbol and both values.
    """
    known: dict[str, tuple[tuple, str]] = {}
    for name, (shape, dtype) in inputs.items():
        if shape is not None and dtype is not None:
            known[name] = (tuple(shape), dtype)
    for st in graph.stages:
        present = [n for n in st.inputs if n is not None]
        if any(n not in known for n in present):
            if partial:
                continue
            missing = next(n for n in present if n not in known)
            raise KeyError(missing)
        shapes = tuple(known[n][0] if n is not None else None for n in st.inputs)
        dtypes = tuple(known[n][1] if n is not None else None for n in st.inputs)
        out_shapes, out_dtypes = infer_outputs(
            st.desc, shapes, dtypes, st.attrs, stage=st.id, tensors=tuple(n or "" for n in st.inputs)
        )
        for name, shape, dtype in zip(st.outputs, out_shapes, out_dtypes, strict=True):
            known[name] = (tuple(shape), dtype)
            if partial:
                graph.tensors[name].shape, graph.tensors[name].dtype = tuple(shape), dtype
    return known


def _problem_path(graph: LinkedGraph, err: PipeLinkError) -> str:
    stage_id = err.context.get("stage")
    port = err.context.get("port")
    for st in graph.stages:
        if st.id != stage_id:
            continue
        names = [p.name for p in st.desc.inputs]
        if port in names and names.index(port) < len(st.config.inputs):
            return f"{st.path}/inputs/{names.index(port)}"
        return st.path
    return ""


def _check_policies(graph: LinkedGraph, registry: OperatorRegistry) -> list[Problem]:
    """``identity`` needs matching input/output shapes and dtypes; ``fallback`` matching outputs."""
    return [p for st in graph.stages for p in _policy_problems(graph, st)]


def check_policies(graph: LinkedGraph, known: Mapping[str, tuple[tuple, str]]) -> None:
    """Check the ``identity`` and ``fallback`` policies against one input signature's concrete shapes
    (``infer_signature``): at load a policy whose shapes were still symbolic was let through.

    Raises
    ------
    ShapeMismatchError, DTypeMismatchError, ConfigError
        Naming the stage, both tensors and what to use instead, before anything runs.
    """
    for st in graph.stages:
        problems = _policy_problems(graph, st, known)
        if problems:
            raise error_for_code(problems[0].code)(problems[0].message, stage=st.id, path=problems[0].path)


def _policy_problems(
    graph: LinkedGraph, st: LinkedStage, known: Mapping[str, tuple[tuple, str]] | None = None
) -> list[Problem]:
    policy = st.config.on_error.kind
    if policy == "identity":
        return _check_identity(graph, st, known)
    if policy == "fallback" and st.fallback is not None:
        return _check_fallback(graph, st, known)
    return []


def _typed(graph: LinkedGraph, known: Mapping[str, tuple[tuple, str]] | None, name: str) -> tuple:
    """A tensor's (shape, dtype): a signature's concrete ones when given, else the linked graph's."""
    if known is not None and name in known:
        return known[name]
    t = graph.tensors[name]
    return t.shape, t.dtype


def _check_identity(
    graph: LinkedGraph, st: LinkedStage, known: Mapping[str, tuple[tuple, str]] | None = None
) -> list[Problem]:
    path = f"{st.path}/on_error"
    present = [n for n in st.inputs if n is not None]
    named = st.config.outputs  # unnamed outputs are scratch nobody reads
    if len(present) < len(named):
        return [
            Problem(
                ErrorCode.PIPELINK_ERR_INVALID_CONFIG,
                path,
                f"stage {st.id!r}: on_error 'identity' needs an input for each of its "
                f"{len(named)} outputs (operator {st.desc.name!r} has {len(present)} inputs); "
                "use 'skip' or a fallback operator",
            )
        ]
    for src, dst in zip(present, named, strict=False):
        (a_shape, a_dtype), (b_shape, b_dtype) = _typed(graph, known, src), _typed(graph, known, dst)
        if a_shape is None or b_shape is None:
            continue  # checked when a signature's plan is compiled (check_policies)
        if tuple(a_shape) != tuple(b_shape) or a_dtype != b_dtype:
            return [
                Problem(
                    ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH
                    if tuple(a_shape) != tuple(b_shape)
                    else ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH,
                    path,
                    f"stage {st.id!r}: on_error 'identity' passes input {src!r} "
                    f"({list(a_shape)}, {a_dtype}) as output {dst!r} ({list(b_shape)}, {b_dtype}); "
                    "they must match: use 'skip' or a fallback operator",
                )
            ]
    return []


def _check_fallback(
    graph: LinkedGraph, st: LinkedStage, known: Mapping[str, tuple[tuple, str]] | None = None
) -> list[Problem]:
    path = f"{st.path}/on_error/fallback"
    fb = st.fallback
    if len(fb.outputs) < len(st.config.outputs) or sum(not p.optional for p in fb.inputs) > len(
        [n for n in st.inputs if n is not None]
    ):
        return [
            Problem(
                ErrorCode.PIPELINK_ERR_INVALID_CONFIG,
                path,
                f"stage {st.id!r}: fallback operator {fb.name!r} does not have compatible ports "
                f"(inputs {[p.name for p in fb.inputs]}, outputs {[p.name for p in fb.outputs]})",
            )
        ]
    shapes = [_typed(graph, known, n)[0] if n else None for n in st.inputs][: len(fb.inputs)]
    dtypes = [_typed(graph, known, n)[1] if n else None for n in st.inputs][: len(fb.inputs)]
    shapes += [None] * (len(fb.inputs) - len(shapes))
    dtypes += [None] * (len(fb.inputs) - len(dtypes))
    if any(s is None for s, p in zip(shapes, fb.inputs, strict=True) if not p.optional):
        return []
    try:
        out_shapes, out_dtypes = infer_outputs(
            fb, tuple(shapes), tuple(dtypes), st.fallback_attrs, stage=st.id
        )
    except PipeLinkError as e:
        return [Problem(e.code, path, f"fallback operator {fb.name!r}: {e.message}")]
    for name, shape, dtype in zip(st.config.outputs, out_shapes, out_dtypes, strict=False):
        t_shape, t_dtype = _typed(graph, known, name)
        if t_shape is not None and (tuple(t_shape) != tuple(shape) or t_dtype != dtype):
            return [
                Problem(
                    ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH,
                    path,
                    f"stage {st.id!r}: fallback {fb.name!r} produces {list(shape)} {dtype} for "
                    f"{name!r}, but the stage produces {list(t_shape)} {t_dtype}",
                )
            ]
    return []


def device_problems(graph: LinkedGraph, registry: OperatorRegistry) -> list[Problem]:
    """Stages that cannot run on the graph's device at all (no variant of its kind, or an unmet feature),
    found at validate/load time rather than at the first run; a stage with a fallback policy is left to it.
    """
    problems = []
    for st in graph.stages:
        if st.config.on_error.kind != "fail":
            continue
        try:
            registry.select_variant(st.desc, graph.info, (), stage=st.id)
        except PipeLinkError as e:
            problems.append(Problem(e.code, f"{st.path}/name", e.message))
    return problems
