"""The compiled form of a pipeline for one input signature: its steps and everything a run replays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..graph.linker import LinkedStage
from ..graph.planner import MemoryPlan

__all__ = ["Step", "ExecutionPlan"]


@dataclass
class Step:
    """One stage of a plan with its bound kernel and argument lists."""

    stage: LinkedStage
    kernel: Any
    variant: str
    in_names: tuple[str | None, ...]
    out_names: tuple[str, ...]
    stream_id: int = 0
    relayouts: list[tuple[str, str]] = field(default_factory=list)  # (source input, its contiguous buffer)
    waits: list[int] = field(default_factory=list)  # producer step indices on other streams
    fallback_kernel: Any = None
    fallback_variant: str = ""
    isolated: bool = False
    reads_preloaded: bool = False  # waits for the async_preload copy stream before running
    skipped_variants: tuple[str, ...] = ()  # variants not chosen, each with why (the load report)
    staged: bool = False  # a host variant on copies staged to host memory and back (runtime.staging)
    view: bool = False  # runs as a view: no kernel, its output aliases its input (executor.plan_views)
    empty: bool = False  # every output has no element: nothing to compute, no kernel bound or run


@dataclass
class ExecutionPlan:
    """Everything ``run()`` needs for one input signature."""

    signature: tuple
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    memory: MemoryPlan
    arena: Any  # None: no buffer, or compiled with allocate=False (executor.ensure_arena allocates it)
    static: dict[str, Any]  # tensor name -> kernel argument living in the arena
    steps: list[Step]
    outputs: list[tuple[str, tuple[int, ...], str]]  # returned tensors allocated per run
    streams: dict[int, Any]
    lean: bool = False  # no policies, checks, workers, relayouts or side streams: the executor's fast loop
    uncapturable: list[str] = field(default_factory=list)  # stages a CUDA graph cannot replay (eager)
    passthrough: tuple[str, ...] = ()  # outputs that are external inputs (returned as fresh copies)
    checks: Any = None  # runtime.checked.CheckedPlan in checked mode: poison and guards around each stage
    input_views: tuple[tuple[str, str], ...] = ()  # (view stage output, the input it views): made per run
    warm: bool = False  # it has run once outside a capture (kernels compiled, per-stream resources made)
    last_stream: Any = None  # the stream of its last run: a run on another stream waits for it (one arena)
    last_fence: Any = None  # the event marking the end of its last run (None: done when run() returned)
    # Graph mode. One graph per place of the inputs, reading them where they are (no copies), up to
    # runtime.graphs.MAX_BOUND_GRAPHS places; past that, one graph that copies the inputs that move.
    bound_graphs: dict[tuple, Any] = field(default_factory=dict)  # input places -> captured graph
    graph: Any = None  # the copying graph
    graph_io: dict[str, Any] = field(default_factory=dict)  # static input and output buffers
    graph_bound: set[str] = field(default_factory=set)  # inputs the copying graph reads in place
    graph_key: tuple = ()

    @property
    def captured(self) -> bool:
        """Whether a graph of this plan exists (graph mode replays from then on)."""
        return bool(self.bound_graphs) or self.graph is not None

    def release(self) -> None:
        graphs, self.bound_graphs = list(self.bound_graphs.values()), {}
        if self.graph is not None:
            graphs.append(self.graph)
            self.graph = None
        for g in graphs:
            g.close()
        for step in self.steps:
            if step.isolated:
                step.kernel.close()
        if self.arena is not None:
            self.arena.free()
            self.arena = None
