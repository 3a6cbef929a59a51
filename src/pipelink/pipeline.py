"""``pl.load`` / ``pl.validate`` and the ``Pipeline`` object (docs/architecture.md, "From JSON to kernel").

Load does all the checking (schema, names, versions, hardware, declared shapes, policies); ``run`` binds
inputs, finds or compiles the plan of their signature, and replays it.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .backends import get_backend
from .config import build_config, check_document, check_warnings, read_config, read_weights
from .dtypes import get_dtype
from .errors import (
    ConfigError,
    ErrorCode,
    InvalidArgumentError,
    PipeLinkError,
    Problem,
    VersionMismatchError,
    error_for_code,
)
from .graph.linker import LinkedGraph, infer_signature, link
from .graph.planner import MemoryPlan
from .modules.libraries import load_stage_libraries
from .modules.plugins import load_entry_points
from .modules.registry import OperatorRegistry
from .modules.registry import registry as default_registry
from .ops import register_builtins
from .runtime import errorlog
from .runtime.checked import is_checked
from .runtime.declared import check_declared_dtype, check_declared_shapes
from .runtime.executor import (
    check_inputs,
    compile_plan,
    ensure_arena,
    execute,
    preload_inputs,
    signature_of,
)
from .runtime.external import check_capturable, check_outputs, import_outputs, plan_capturable, run_stream
from .runtime.graphs import capture_bound, graph_blockers, graph_outputs, replay
from .runtime.native_path import NativeRunner, keeps_inputs, native_blockers, native_report
from .runtime.plan import ExecutionPlan
from .runtime.planfile import MAX_CONSTANT_BYTES, write_plan
from .runtime.report import LoadReport, RunReport
from .tune.kernels import lookup_tuned
from .tune.native import lookup_native

__all__ = ["Pipeline", "load", "validate"]

log = logging.getLogger("pipelink")


def _registry(registry: OperatorRegistry | None) -> OperatorRegistry:
    """The registry a load resolves against, with every built-in operator and all its variants (a custom
    ``registry=`` on a GPU resolves the built-in CUDA kernels too, not only their CPU references)."""
    if registry is not None and not isinstance(registry, OperatorRegistry):
        raise InvalidArgumentError(
            f"registry= must be a pipelink OperatorRegistry or None (got {type(registry).__name__})"
        )
    reg = registry or default_registry
    register_builtins(reg)  # each family declares its CUDA variant too (no CUDA import); idempotent
    load_entry_points()  # operators of installed packages (the pipelink.operators entry points)
    return reg


def _check(
    config,
    registry: OperatorRegistry,
    device: str | None,
    *,
    libraries: bool = True,
    weights: Mapping[str, Any] | None = None,
):
    """Read, validate and link. Returns (PipelineConfig, LinkedGraph | None, problems, backend)."""
    doc, base_dir, source_path = read_config(config)
    arrays = _bound_arrays(doc, base_dir, weights)
    bound = {n: (a.shape, get_dtype(a.dtype).name) for n, a in arrays.items()}
    problems = check_document(doc, known_operators=registry.names(), bound=bound)
    if problems:
        return None, None, problems, None
    cfg = build_config(doc, base_dir, source_path, weights=arrays)
    backend = get_backend(device)
    if not libraries and any(s.library for s in cfg.stages):
        # Schema and semantic rules only: stages of native modules cannot be linked without the modules.
        return cfg, None, [], backend
    libraries, library_problems = load_stage_libraries(cfg, registry)
    graph, link_problems = link(cfg, registry, backend.info, libraries=libraries)
    link_problems = library_problems + link_problems
    for warning in check_warnings(doc):
        log.warning("pipelink: %s", warning)
    return cfg, graph, link_problems, backend


def _bound_arrays(doc: Any, base_dir: Path, weights: Mapping[str, Any] | None) -> dict[str, Any]:
    """The bound constants: the config's ``weights`` file, or the arrays passed to ``load(weights=...)``."""
    if weights is None:
        return read_weights(doc, base_dir) if isinstance(doc, dict) else {}
    if isinstance(doc, dict) and "weights" in doc:
        raise InvalidArgumentError(
            "the config names a weights file and load() was given weights= too; pass one of them"
        )
    if not isinstance(weights, Mapping):
        raise InvalidArgumentError(
            f"weights= must be a mapping of input name -> array (got {type(weights).__name__})"
        )
    arrays = {}
    for name, value in weights.items():
        array = np.asarray(value, order="C")  # C order; unlike ascontiguousarray, 0-d stays 0-d
        if array.dtype.hasobject:
            raise InvalidArgumentError(f"weights[{name!r}] holds Python objects; pass a numeric array")
        get_dtype(array.dtype)  # InvalidArgumentError for a dtype PipeLink lacks
        arrays[str(name)] = array
    return arrays


def validate(
    config: str | Path | Mapping[str, Any],
    *,
    device: str = "cpu",
    registry: OperatorRegistry | None = None,
    libraries: bool = True,
) -> list[Problem]:
    """Every problem of a config, each with its code and JSON Pointer; empty when it is valid.

    Parameters
    ----------
    config : path or dict
    device : str
        The device whose features and variants the check assumes (default ``"cpu"``).
    libraries : bool
        Open the native modules the config names (checking their integrity, versions and ports). With
        False, a config with native stages is checked against the schema and semantic rules only.
    """
    try:
        _, _, problems, _ = _check(config, _registry(registry), device, libraries=libraries)
    except ConfigError as e:
        return list(e.errors) or [Problem(e.code, "", e.message)]
    except PipeLinkError as e:
        return [Problem(e.code, "", e.message)]
    return problems


#: The most problems a load error's message lists (its ``.errors`` holds every one).
MAX_LISTED_PROBLEMS = 50


def _raise_problems(problems: list[Problem], source: str) -> None:
    codes = {p.code for p in problems}
    listing = "\n".join(f"  {p}" for p in problems[:MAX_LISTED_PROBLEMS])
    if len(problems) > MAX_LISTED_PROBLEMS:
        more = len(problems) - MAX_LISTED_PROBLEMS
        listing += f"\n  ... and {more} more (the error's .errors lists them all)"
    noun = "problem" if len(problems) == 1 else "problems"
    message = f"invalid pipeline {source}: {len(problems)} {noun}:\n{listing}"
    if len(codes) == 1 and ErrorCode.PIPELINK_ERR_INVALID_CONFIG not in codes:
        cls = error_for_code(next(iter(codes)))
        raise cls(message, errors=problems)
    raise ConfigError(message, errors=problems)


def load(
    config: str | Path | Mapping[str, Any],
    *,
    device: str = "auto",
    cuda_graph: bool = False,
    registry: OperatorRegistry | None = None,
    tuned: bool = True,
    static_outputs: bool = False,
    checked: bool | None = None,
    graph: bool | None = None,
    weights: Mapping[str, Any] | None = None,
    native: bool | None = None,
) -> Pipeline:
    """Load, check and link a pipeline.

    Parameters
    ----------
    config : path or dict
        A JSON config (comments allowed) or the parsed document.
    device : str
        ``"auto"`` (GPU if one works, else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    cuda_graph : bool
        Capture the plan into a CUDA graph per input signature and replay it (on a backend whose
        ``capabilities.cuda_graphs`` holds; elsewhere, and for a pipeline with per-stage policies or
        checks, it runs eagerly and ``load_report.warnings`` says why).
    static_outputs : bool
        CUDA-graph mode only: return the graph's own output buffers instead of fresh copies. They are
        overwritten by the next ``run()``, from any thread: runs from several threads at once all write
        the same buffers, so load without it for that. With it, AUTO replays the native core's graphs
        (``cuda_graph`` without it stays on the Python executor's, which copy each output out).
    checked : bool, optional
        Checked mode (a debugging mode, slow): outputs are poisoned before each stage and guard bytes
        follow every buffer; a stage that leaves an output unwritten or writes past it fails with
        ``ModuleCrashError``. None (default) reads the ``PIPELINK_CHECKED`` environment variable.
    graph : bool, optional
        Deprecated spelling of ``cuda_graph`` (``Pipeline.graph`` is the DAG); warns.
    weights : dict of name -> array, optional
        Bound constants, as a config's ``weights`` file gives them (not both): each binds the external
        input of its name once, here, and ``run()`` no longer takes it.
    native : bool, optional
        The hot path (``runtime/native_path.py``; docs/run-time-contract.md, "Which executor runs").
        None (default, AUTO): each input signature the native core can run is compiled once into a plan
        that ``libpipelink_runtime`` runs with one C call per ``run()``; the rest runs on the Python
        executor, and ``last_report.executor_reason`` says why (``cuda_graph=True`` stays on the Python
        executor's graphs). True: every run goes through the core (contiguous tensors of the pipeline's
        device; bound weights are constants inside the plans; with ``cuda_graph=True`` the core captures
        and replays CUDA graphs; not with checked mode; a stage the core cannot run fails the first run,
        naming the stage). False: the Python executor runs everything.

    Raises
    ------
    ConfigError
        With ``.errors``, every problem found (or the specific error class when all problems share one
        code, e.g. ShapeMismatchError for a declared shape that does not fit).
    """
    for name, value, optional in (
        ("cuda_graph", cuda_graph, False),
        ("tuned", tuned, False),
        ("static_outputs", static_outputs, False),
        ("checked", checked, True),
        ("graph", graph, True),
        ("native", native, True),
    ):
        if not (isinstance(value, bool | np.bool_) or optional and value is None):
            raise InvalidArgumentError(
                f"load({name}=...) is True or False{' (or None)' if optional else ''}, got {value!r}",
                option=name,
            )
    if not isinstance(device, str):
        raise InvalidArgumentError(f"load(device=...) is a string such as 'cpu' or 'cuda:0', got {device!r}")
    if graph is not None:
        warnings.warn(
            "pl.load(graph=...) is deprecated: use cuda_graph=... (Pipeline.graph is the pipeline's DAG)",
            DeprecationWarning,
            stacklevel=2,
        )
        cuda_graph = cuda_graph or bool(graph)
    reg = _registry(registry)
    cfg, linked, problems, backend = _check(config, reg, device, weights=weights)
    source = (
        str(cfg.source_path)
        if cfg is not None and cfg.source_path
        else (str(config) if isinstance(config, str | Path) else "(dict)")
    )
    if problems:
        _raise_problems(problems, source)
    return Pipeline(
        linked,
        backend,
        reg,
        cuda_graph=cuda_graph,
        use_tuned=tuned,
        static_outputs=static_outputs,
        checked=is_checked(checked),
        native=native,
    )


class Pipeline:
    """A loaded pipeline. Use ``run`` (thread-safe: runs through the native core run concurrently, runs on
    the Python executor are serialised; :attr:`hot_path` says which takes them)."""

    def __init__(
        self,
        graph: LinkedGraph,
        backend,
        registry: OperatorRegistry,
        *,
        cuda_graph: bool = False,
        use_tuned: bool = True,
        static_outputs: bool = False,
        checked: bool = False,
        native: bool | None = None,
    ):
        self._graph = graph
        self._backend = backend
        self._registry = registry
        self._plans: dict[tuple, ExecutionPlan] = {}
        self._lock = threading.RLock()
        self._closed = False
        self.checked = checked
        can_capture = backend.capabilities.cuda_graphs
        blockers = graph_blockers(graph) if cuda_graph and can_capture else []
        if cuda_graph and checked:
            blockers.append("checked mode looks at every stage's outputs")
        self.cuda_graph = bool(cuda_graph) and can_capture and not blockers
        self.static_outputs = static_outputs
        self.use_tuned = use_tuned
        self._last_report: RunReport | tuple | None = None
        self.load_report = LoadReport(device=backend.device)
        self._last_plan: ExecutionPlan | None = None
        self._keep_inputs = True  # the current run's inputs are held until its work is done (run())
        self._copy_stream = None
        # Host inputs of async_preload stages upload on a copy stream of their own (seed section 3.4).
        self._preload_inputs = preload_inputs(graph)
        # Outputs that are inputs passed through need the general replay (it returns the input).
        self._passthrough = any(n in graph.external_inputs for n in graph.outputs)
        # Bound constants (the weights file): imported to the device once, here, never per run.
        stream = backend.default_stream()
        self._bound = {n: backend.import_input(a, stream=stream) for n, a in graph.config.weights.items()}
        for st in graph.stages:
            self.load_report.versions[st.id] = f"{st.desc.name}@{st.desc.version} ({st.desc.source})"
        if cuda_graph and not can_capture:
            self.load_report.warnings.append(
                f"cuda_graph requested, but the {backend.kind} backend has no graph capture: running eagerly"
            )
        elif blockers:
            self.load_report.warnings.append(
                "cuda_graph requested, but running eagerly: " + "; ".join(blockers)
            )
        # Planned without an arena: when the native core takes the runs, the Python plan never needs one.
        self._select_variants_for_declared(allocate=False)
        self._native = self._native_runner(native, cuda_graph)
        if self._native is None and self._last_plan is not None:
            ensure_arena(self._last_plan, backend)  # the Python executor runs: nothing left for the first run

    # -- properties --------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._graph.config.name or (
            self._graph.config.source_path.stem if self._graph.config.source_path else "pipeline"
        )

    @property
    def device(self) -> str:
        return self._backend.device

    @property
    def hot_path(self) -> str:
        """``"native"`` (every run through the native core), ``"python"`` (every run on the Python executor;
        ``load_report.hot_path_reason`` says why in AUTO) or ``"auto"`` (decided per input signature, as
        ``load_report.executors`` records)."""
        return self.load_report.hot_path

    @property
    def last_report(self) -> RunReport | None:
        """The report of the last run (of any thread)."""
        report = self._last_report
        # a run of the core: (signature, seconds, graph replayed), built when read
        if report.__class__ is tuple:
            stages = self._native.stages_of(report[0]) if self._native is not None else ()
            report = self._last_report = native_report(*report, stages=stages)
        return report

    @last_report.setter
    def last_report(self, report: RunReport | None) -> None:
        self._last_report = report

    @property
    def inputs(self) -> list[str]:
        """The inputs ``run()`` takes (external inputs the weights file does not bind)."""
        return [n for n in self._graph.external_inputs if n not in self._bound]

    @property
    def weights(self) -> list[str]:
        """The external inputs bound once at load by the weights file."""
        return list(self._bound)

    @property
    def outputs(self) -> list[str]:
        return list(self._graph.outputs)

    @property
    def stages(self) -> list[str]:
        return [s.id for s in self._graph.stages]

    @property
    def graph(self) -> LinkedGraph:
        """The pipeline's DAG (stages and tensors); CUDA graph capture is :attr:`cuda_graph`."""
        return self._graph

    @property
    def graph_mode(self) -> bool:
        """Same as :attr:`cuda_graph` (the name reports and benchmarks used before it)."""
        return self.cuda_graph

    @property
    def memory_plan(self) -> MemoryPlan | None:
        """The memory plan of the last input signature (of the declared inputs before any run)."""
        if self._last_plan is None and self._declared_signature() is not None:
            self._last_plan = self._plan_for({}, self._declared_signature(), allocate=self._native is None)
        return self._last_plan.memory if self._last_plan else None

    def output_specs(self, inputs: Mapping[str, tuple[Any, str]]) -> dict[str, tuple[tuple[int, ...], str]]:
        """The shape and dtype of every output for inputs of these shapes and dtypes, without running.

        Parameters
        ----------
        inputs : dict of name -> (shape, dtype name)
            One entry per input ``run()`` takes (bound weights are added).

        Raises
        ------
        InvalidArgumentError, ShapeMismatchError
            As ``run()`` would raise for such inputs (names, declared shapes, operator port rules).
        """
        check_inputs(self._graph, inputs, self._bound)
        shapes = {n: (tuple(int(d) for d in s), str(dt)) for n, (s, dt) in inputs.items()}
        for name, arg in self._bound.items():
            shape, dtype, _ = self._backend.signature_of(arg)
            shapes[name] = (tuple(shape), dtype)
        check_declared_shapes(self._graph, tuple((n, s, d, True) for n, (s, d) in shapes.items()))
        known = infer_signature(self._graph, shapes)
        return {n: (tuple(int(d) for d in known[n][0]), known[n][1]) for n in self._graph.outputs}

    # -- running -----------------------------------------------------------------------------------
    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        stream: Any = None,
        out: Mapping[str, Any] | None = None,
        strict: bool = False,
        profile: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Run the pipeline once.

        Parameters
        ----------
        inputs : dict of name -> array, optional
            NumPy arrays, DLPack tensors (PyTorch, CuPy, JAX), ``pl.Tensor`` or Python scalars (0-d).
            Keyword arguments are merged in (an input named ``stream`` or ``out`` goes in the dict).
        stream : optional
            CUDA only: the stream the run is queued on, without waiting (``__cuda_stream__`` objects of
            cuda.core and CuPy, ``torch.cuda.Stream``, a raw handle). By default the current stream of
            the framework whose tensors came in (PyTorch's), else the backend's own. When that stream is
            being captured into a CUDA graph, the run is recorded into the capture (docs/interop.md says
            what it refuses there). On the CPU only None is accepted.
        out : dict of name -> buffer, optional
            Caller buffers the outputs are written into (NumPy arrays or pl.Tensor on the CPU; PyTorch,
            CuPy or pl tensors on CUDA): their shape, dtype and device must match, and none may overlap an
            input or another output. Nothing is allocated for those outputs.
        strict : bool
            Raise a stage's error even when its ``on_error`` policy would degrade it.
        profile : bool
            Record per-stage device times (CUDA) in ``last_report`` (the run goes to the Python executor).

        Returns
        -------
        dict of name -> pl.Tensor
            Fresh tensors (a later run never overwrites them), or views of the ``out`` buffers. Outputs
            of a failed ``skip`` stage are left out and listed in ``last_report.missing_outputs``.
            ``last_report.executor`` says whether the native core or the Python executor made the run
            (docs/run-time-contract.md, "Which executor runs").
        """
        if inputs.__class__ is not dict and inputs is not None and not isinstance(inputs, Mapping):
            raise InvalidArgumentError(
                f"run() takes its inputs as a dict of name -> array or as keyword arguments "
                f"(got {type(inputs).__name__})"
            )
        if kwargs:
            given = dict(inputs, **kwargs) if inputs else kwargs
        else:
            given = inputs if inputs.__class__ is dict else dict(inputs) if inputs else {}
        native = self._native
        if native is None:
            reason = self.load_report.hot_path_reason
        else:
            # The hot path: nothing before it but merging the inputs; no lock (the core runs concurrently).
            # Its common case is C (runtime/_hotpath.c); None means "not mine": the Python side decides.
            fast = native.fast
            if fast is not None and stream is None and out is None and not (profile or strict):
                found = fast.run(given)
                if found is not None:
                    return found
            reason = native.run(given, stream, out, profile=profile, strict=strict)
            if reason.__class__ is not str:
                return reason
        return self._run_python(dict(given), stream, out, strict=strict, profile=profile, reason=reason)

    __call__ = run

    def _run_python(
        self, given: dict[str, Any], stream: Any, out: Any, *, strict: bool, profile: bool, reason: str | None
    ) -> dict[str, Any]:
        """A run on the Python executor (``reason``: why the native core does not make it)."""
        if self._bound and not self._bound.keys().isdisjoint(given):
            check_inputs(self._graph, given, self._bound)  # raises: names the bound input
        with self._lock:
            if self._closed:
                raise InvalidArgumentError(f"pipeline {self.name!r} is closed")
            backend = self._backend
            values = [*given.values(), *out.values()] if isinstance(out, Mapping) else given.values()
            self._keep_inputs = keeps_inputs(stream, values)
            stream = run_stream(backend, stream, values)
            if backend.is_capturing(stream):
                return self._run_captured(given, out, stream, strict=strict, profile=profile, reason=reason)
            outs = import_outputs(backend, self._graph, out, stream) if out is not None else {}
            if self._bound:
                given.update(self._bound)
            plan = self._last_plan
            fast = plan is not None and not self._preload_inputs
            replayable = self.cuda_graph and not self._passthrough and not outs and not profile
            if fast and replayable and plan.captured:
                # The fastest path: device inputs where a graph of the last plan reads them.
                key = backend.match_places(plan.signature, given, stream)
                found = plan.bound_graphs.get(key) if key is not None else None
                if found is not None:
                    return self._replay_fast(plan, found, given, stream, reason)
            report = RunReport()
            report.executor_reason = reason
            preload_event = None
            # The fast path: inputs already in the form of the last plan's signature (device tensors of the
            # same shapes and dtypes, say) skip the import, the signature and the plan lookup.
            args = backend.match_inputs(plan.signature, given, stream) if fast else None
            if args is None:
                check_inputs(self._graph, given)
                preload = self._preload_stream()
                producers: list = []
                args = {
                    n: v
                    if n in self._bound
                    else self._import(n, v, preload if n in self._preload_inputs else stream, producers)
                    for n, v in given.items()
                }
                if producers:
                    backend.order_after(producers)
                preload_event = backend.record_event(preload) if preload is not None else None
                signature = signature_of(backend, self._graph, args)
                plan = self._plans.get(signature)
                if plan is None:
                    plan = self._plan_for(args, signature)
                    report.new_signature = True
                self._last_plan = plan
            if outs:
                check_outputs(backend, plan, outs, args)
            if plan.arena is None and plan.memory.buffers:
                ensure_arena(plan, backend)  # planned for the core (AUTO): allocated at its first Python run
            self._follow(plan, stream)
            t0 = time.perf_counter()
            try:
                with backend.run_context():
                    produced = self._execute(
                        plan,
                        args,
                        report,
                        stream,
                        outs,
                        strict=strict,
                        profile=profile,
                        preload_event=preload_event,
                    )
            finally:
                report.total_time_s = time.perf_counter() - t0
                self.last_report = report
            wrap = backend.wrap
            return {n: wrap(v) for n, v in produced.items()}

    def _follow(self, plan: ExecutionPlan, stream: Any) -> None:
        """Order a run after the plan's previous run when that ran on another stream: both use the plan's
        one arena (and its graphs' static buffers). It waits for that run's fence, recorded when it ended,
        never on the old stream itself (which its owner may have destroyed since)."""
        if plan.last_fence is not None and plan.last_stream is not stream:
            self._backend.wait_event(stream, plan.last_fence)
        plan.last_stream = stream

    def _run_captured(
        self, given: dict[str, Any], out: Any, stream: Any, *, strict: bool, profile: bool, reason: str | None
    ) -> dict[str, Any]:
        """A run queued into the CUDA graph being captured on the caller's ``stream``: eager kernels (never
        a graph of ours inside theirs) writing the caller's ``out`` buffers, with no allocation, no
        synchronisation and no work on streams the capture does not join. Whatever would break the
        capture is refused first (``runtime.external``)."""
        backend = self._backend
        check_capturable(
            self.name, self._graph, given, out if isinstance(out, Mapping) else None,
            checked=self.checked, profile=profile,
        )  # fmt: skip
        outs = import_outputs(backend, self._graph, out, stream)
        check_inputs(self._graph, given, self._bound)
        # Inputs are device tensors here; ordering after their producers' streams is the capture's own.
        args = {n: self._import(n, v, stream, []) for n, v in given.items()}
        args.update(self._bound)
        plan = self._plans.get(signature_of(backend, self._graph, args))
        plan_capturable(self.name, plan)
        check_outputs(backend, plan, outs, args)
        report = RunReport()
        report.executor_reason = reason
        t0 = time.perf_counter()
        try:
            with backend.foreign_capture(), backend.run_context():
                produced = execute(
                    plan,
                    self._graph,
                    backend,
                    args,
                    strict=strict,
                    report=report,
                    error_log=errorlog.record,
                    out_buffers=outs,
                    stream=stream,
                )
        finally:
            report.total_time_s = time.perf_counter() - t0
            self.last_report = report
        wrap = backend.wrap
        return {n: wrap(v) for n, v in produced.items()}

    def _replay_fast(
        self, plan: ExecutionPlan, found: Any, given: dict[str, Any], stream: Any, reason: str | None
    ) -> dict:
        """Launch a captured graph that reads the inputs where they are; outputs as ``replay`` returns
        them (the static buffers, or fresh copies)."""
        t0 = time.perf_counter()
        backend = self._backend
        report = RunReport()
        report.executor_reason = reason
        report.graph_replay = True
        self._follow(plan, stream)
        backend.launch_graph(found, stream)
        produced = graph_outputs(plan, backend, stream, static_outputs=self.static_outputs, out={})
        plan.last_fence = backend.finish_run(stream, keepalive=given if self._keep_inputs else None)
        report.total_time_s = time.perf_counter() - t0
        self.last_report = report
        wrap = backend.wrap
        return {n: wrap(v) for n, v in produced.items()}

    def _preload_stream(self) -> Any:
        """The copy stream of ``async_preload`` stages' host inputs (None when no stage asks, or on the
        CPU)."""
        if not self._preload_inputs or not self._backend.capabilities.asynchronous:
            return None
        if self._copy_stream is None:
            self._copy_stream = self._backend.new_stream()
        return self._copy_stream

    def _execute(
        self,
        plan: ExecutionPlan,
        args: dict[str, Any],
        report: RunReport,
        stream: Any,
        outs: dict[str, Any],
        *,
        strict: bool,
        profile: bool,
        preload_event: Any = None,
    ) -> dict[str, Any]:
        backend = self._backend
        if self.cuda_graph and plan.captured and not profile:
            report.graph_replay = True
            if preload_event is not None:
                backend.wait_event(stream, preload_event)
            produced = replay(
                plan, self._graph, backend, args, stream, static_outputs=self.static_outputs, out=outs
            )
        else:
            produced = execute(
                plan,
                self._graph,
                backend,
                args,
                strict=strict,
                profile=profile,
                report=report,
                error_log=errorlog.record,
                out_buffers=outs,
                preload_event=preload_event,
                stream=stream,
            )
            if self.cuda_graph and not plan.captured and not plan.uncapturable:
                # The first (eager) run compiled and warmed every kernel: capture now, reading every
                # input where it is (replay captures more graphs as inputs move, up to a limit).
                capture_bound(plan, self._graph, backend, args)
            elif self.cuda_graph and plan.uncapturable and report.new_signature:
                self.load_report.warnings.append(
                    "cuda_graph requested, but running eagerly: the kernels of "
                    f"{', '.join(map(repr, plan.uncapturable))} read device values on the host each run"
                )
        plan.warm = True
        # CUDA returns without waiting: outputs are ordered for their consumers (DLPack's stream
        # protocol, .numpy()), and the inputs are kept alive until the run's work is done.
        plan.last_fence = backend.finish_run(stream, keepalive=args if self._keep_inputs else None)
        return produced

    def _import(self, name: str, value: Any, stream: Any, producers: list | None = None) -> Any:
        decl = (self._graph.config.inputs or {}).get(name)
        dtype = get_dtype(decl.dtype) if decl is not None and decl.dtype else None
        pinned = name if decl is not None and decl.pin_memory else None
        try:
            arg = self._backend.import_input(
                value, stream=stream, dtype=dtype, pinned_key=pinned, producers=producers
            )
        except PipeLinkError:
            raise
        except Exception as e:  # the caller's object failed when asked what it holds: say which input
            raise InvalidArgumentError(
                f"input {name!r} could not be read as a tensor ({type(value).__name__}: "
                f"{type(e).__name__}: {e}); pass a NumPy array, a pl.Tensor or a DLPack tensor",
                input=name,
            ) from e
        _, got, _ = self._backend.signature_of(arg)
        check_declared_dtype(self._graph, name, got)
        # Declared shapes (and their symbols, across inputs) are checked once per signature, at plan time.
        return arg

    def _plan_for(self, args: Mapping[str, Any], signature: tuple, *, allocate: bool = True) -> ExecutionPlan:
        # Before anything reads the signature: one that breaks the declared shapes is never planned.
        check_declared_shapes(self._graph, signature)
        tuned = self._tuned_params(signature) if self.use_tuned else {}
        plan = compile_plan(
            self._graph,
            self._registry,
            self._backend,
            args,
            signature,
            tuned=tuned,
            checked=self.checked,
            allocate=allocate,
        )
        self._plans[signature] = plan
        report = self.load_report
        for step in plan.steps:
            sid = step.stage.id
            report.variants[sid] = step.variant
            if step.skipped_variants:
                report.skipped_variants[sid] = list(step.skipped_variants)
            if step.staged and sid not in report.staged:
                report.staged.append(sid)
                report.warnings.append(
                    f"stage {sid!r} runs the host variant {step.variant!r} on {self.device}: its inputs are "
                    "copied to host memory and its outputs back on every run"
                )
        return plan

    def _tuned_params(self, signature: tuple) -> dict[str, dict]:
        """Per stage, the launch parameters from the tuning cache (``pipelink tune``) when the key matches;
        what was used and why is recorded in ``load_report.tuned``."""
        known = infer_signature(self._graph, {n: (s, d) for n, s, d, _ in signature})
        out = {}
        for st in self._graph.stages:
            if not st.config.tuned:
                continue
            shapes = tuple(known[n][0] if n else None for n in st.inputs)
            dtypes = tuple(known[n][1] if n else None for n in st.inputs)
            if st.desc.source == "builtin":  # the compiled kernel's launch parameters, where it runs
                found = lookup_tuned(st.desc, self._backend.info, shapes, dtypes)
            elif st.desc.source == "python":
                found = None
            else:  # a native module's manifest tunables, tuned with `pipelink tune` (library mode)
                found = lookup_native(st.desc, self._backend.info, shapes, dtypes)
            if found is None:
                continue
            params, source, reason = found
            if source == "default" and st.desc.source == "builtin":
                # No tuned entry: the kernel's plan chooses, shape-aware (a small flat kernel spreads over the
                # SMs, ops/kernel.py:spread_small), which handing it the defaults as if tuned would prevent.
                params, reason = {}, f"{reason}; the kernel's defaults for the shape"
            else:
                out[st.id] = params
            self.load_report.tuned[st.id] = {"params": params, "source": source, "reason": reason}
        return out

    def _declared_signature(self) -> tuple | None:
        decls = self._graph.config.inputs
        if not decls:
            return None
        sig = []
        for name in self._graph.external_inputs:
            d = decls.get(name)
            if (
                d is None
                or d.shape is None
                or d.dtype is None
                or not all(isinstance(x, int) for x in d.shape)
            ):
                return None
            sig.append((name, tuple(d.shape), d.dtype, True))
        return tuple(sig)

    def _select_variants_for_declared(self, *, allocate: bool) -> None:
        """With fully declared inputs the variants (and the plan) are chosen at load, not at run; its arena
        only when ``allocate`` (no native core to run it), else at its first run on the Python executor."""
        signature = self._declared_signature()
        if signature is not None:
            self._last_plan = self._plan_for({}, signature, allocate=allocate)

    # -- hot reload --------------------------------------------------------------------------------
    def reload(self) -> list[str]:
        """Swap in changed native modules between runs (seed section 5.3: hot update).

        Every module file is re-checked (sha256 and version rules as at load); changed files are loaded
        anew and the pipeline is re-linked. A new *major* version of an operator in use is refused with
        ``VersionMismatchError`` and the pipeline keeps running the modules it had. Runs already in
        progress finish on the old modules (reload waits for them); the old kernels keep their library
        mapped until their plans are released, so nothing ever calls into an unloaded library.

        Returns
        -------
        list of str
            The ids of stages whose operator changed (version or module file).
        """
        changed = self._reload()
        if changed and self._native is not None:
            self._native.reset()  # outside the lock: a run inside the core may be compiling under it
        return changed

    def _reload(self) -> list[str]:
        with self._lock:
            old = self._graph
            libraries, problems = load_stage_libraries(old.config, self._registry)
            graph, link_problems = link(old.config, self._registry, self._backend.info, libraries=libraries)
            problems += link_problems
            if problems:
                _raise_problems(problems, str(old.config.source_path or "(dict)"))
            changed = []
            for before, after in zip(old.stages, graph.stages, strict=True):
                if after.desc is before.desc:
                    continue
                if after.desc.version.major != before.desc.version.major:
                    raise VersionMismatchError(
                        f"reload refused: stage {before.id!r} would change operator "
                        f"{before.desc.name!r} from "
                        f"{before.desc.version} to {after.desc.version}, a different major version; the "
                        "pipeline keeps running the modules it had",
                        stage=before.id,
                        operator=before.desc.name,
                        requested=str(before.desc.version),
                        available=str(after.desc.version),
                    )
                changed.append(before.id)
            if not changed:
                return []
            plans, self._plans = self._plans, {}
            self._graph, self._last_plan = graph, None
            for plan in plans.values():
                plan.release()
            for st in graph.stages:
                self.load_report.versions[st.id] = f"{st.desc.name}@{st.desc.version} ({st.desc.source})"
            self._select_variants_for_declared(allocate=self._native is None)
            return changed

    # -- compiled plans ----------------------------------------------------------------------------
    def save(
        self,
        path: str | Path,
        *,
        shapes: Mapping[str, tuple] | list[Mapping[str, tuple]] | None = None,
        cuda_graph: bool | None = None,
        max_constant_bytes: int = MAX_CONSTANT_BYTES,
    ) -> Path:
        """Write a compiled plan for the native core (``pipeLinkLoadPipeline``; docs/plan-format.md).

        Bound weights (a weights file, ``load(weights=...)``) are embedded in the plan as constants that
        the core loads once; the plan's inputs are the others (:attr:`inputs`).

        Parameters
        ----------
        path : str or Path
            The ``.plk`` file to write. Native module paths are stored relative to its folder.
        shapes : dict of name -> (shape, dtype), optional
            The input signature to compile for (default: the config's declared ``inputs``; a dtype of
            None takes the declared one). Bound weights keep their arrays' shapes. A list of signatures
            writes them all into one plan file (a bundle, at most 64); the core runs the one whose input
            shapes a call's tensors have.
        max_constant_bytes : int
            The most bytes of bound weights the plan may embed (default 2 GiB, at most 4 GiB).
        cuda_graph : bool, optional
            Set the plan's ``cuda_graph`` flag (the core replays captured CUDA graphs). Default: whether
            this pipeline runs in CUDA graph mode (:attr:`cuda_graph`). True for a pipeline not on CUDA is
            an ``InvalidArgumentError``.

        Raises
        ------
        ConfigError
            A stage the native core cannot run (a built-in or Python operator, ...), pointing at it.
        InvalidArgumentError
            Bound weights over ``max_constant_bytes``; an input without a concrete shape and dtype.
        """
        if not isinstance(path, str | Path):
            raise InvalidArgumentError(
                f"save() takes a path (str or pathlib.Path), got {type(path).__name__}"
            )
        graph = self.cuda_graph if cuda_graph is None else bool(cuda_graph)
        with self._lock:
            return write_plan(self, path, shapes, cuda_graph=graph, max_constant_bytes=max_constant_bytes)

    # -- lifetime ----------------------------------------------------------------------------------
    def _native_runner(self, native: bool | None, cuda_graph: bool) -> NativeRunner | None:
        """The native core's runner (None when the Python executor runs everything), refusing for
        ``native=True`` what the core cannot honour; the decision is recorded in ``load_report``."""
        report = self.load_report
        if native is False:
            report.hot_path, report.hot_path_reason = "python", "loaded with native=False"
            return None
        blockers = native_blockers(self, cuda_graph=cuda_graph, auto=native is None)
        if blockers and native:
            raise InvalidArgumentError(
                f"pipeline {self.name!r}: native=True cannot run with {'; '.join(blockers)}; load it without "
                "native=True (the Python executor runs it), or without what the core cannot do"
            )
        if blockers:
            report.hot_path, report.hot_path_reason = "python", "; ".join(blockers)
            return None
        report.hot_path = "native" if native else "auto"
        return NativeRunner(self, required=bool(native), cuda_graph=cuda_graph)

    def close(self) -> None:
        """Free the arenas of every plan. The pipeline refuses to run afterwards; runs in progress on other
        threads finish first."""
        if self._native is not None:
            self._native.close()  # not under the lock: a run inside the core may be compiling under it
        with self._lock:
            for plan in self._plans.values():
                plan.release()
            self._plans.clear()
            self._closed = True

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Pipeline {self.name!r} on {self.device}: {len(self._graph.stages)} stages, "
            f"inputs {self.inputs}, outputs {self.outputs}>"
        )
