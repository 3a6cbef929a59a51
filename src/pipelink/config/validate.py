"""Validate a pipeline config: the JSON Schema first, then the semantic rules (README.md, "What is checked
where").

Reports every problem at once, each at an RFC 6901 pointer. Knows nothing of shapes, dtypes or devices:
what needs operator descriptors or hardware belongs to the linker and the loader.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ..dtypes import get_dtype
from ..errors import ErrorCode, PipeLinkError, Problem
from .model import assign_stage_ids
from .schema import SCHEMA, TENSOR_NAME_PATTERN
from .schema_errors import closest, did_you_mean, json_pointer, schema_problems, short_repr
from .specifiers import parse_capability_specifier, parse_specifier

__all__ = ["check_document", "check_warnings"]

_CODE = ErrorCode.PIPELINK_ERR_INVALID_CONFIG
_TENSOR_RULE = SCHEMA["$defs"]["tensorName"]["description"]
_MIN_ALIGNMENT = 32
_NAME_MAX = 255  # bytes in one file or folder name (Linux NAME_MAX)
_NAME_CUTOFF = 0.75  # tensor names share suffixes ("_tensor"): a lower cutoff suggests unrelated names
_WARN_CUTOFF = 0.8
_HINT_COMPARISONS = 200_000  # name comparisons check_warnings may spend on typo hints (~0.3 s)


@dataclass
class _Stage:
    """What the rules need of one stage, read leniently from a possibly invalid document."""

    index: int
    id: str
    raw: dict[str, Any]
    inputs: list[tuple[int, str]]  # (position, name) for each string entry
    outputs: list[tuple[int, str]]
    has_ports: bool  # both inputs and outputs are arrays

    @functools.cached_property
    def ptr(self) -> str:
        return f"/pipeline/{self.index}"

    def describe(self) -> str:
        return f"stage {self.id!r} ({self.ptr})"


def _strings(value: Any) -> list[tuple[int, str]]:
    return [(j, v) for j, v in enumerate(value) if isinstance(v, str)] if isinstance(value, list) else []


def _read_stages(doc: dict[str, Any]) -> list[_Stage]:
    raw_stages = doc.get("pipeline")
    if not isinstance(raw_stages, list):
        return []
    ids = assign_stage_ids(raw_stages)
    stages = []
    for index, (raw, stage_id) in enumerate(zip(raw_stages, ids, strict=True)):
        if not isinstance(raw, dict):
            continue
        has_ports = isinstance(raw.get("inputs"), list) and isinstance(raw.get("outputs"), list)
        stages.append(
            _Stage(
                index,
                stage_id or f"#{index}",
                raw,
                _strings(raw.get("inputs")),
                _strings(raw.get("outputs")),
                has_ports,
            )
        )
    return stages


class _Checker:
    """Semantic rules over the parts of a document the schema found well-formed."""

    def __init__(self, doc: dict[str, Any], schema_found: list[Problem], bound: Mapping[str, tuple]):
        self.doc = doc
        self.bound = bound
        self.bad = {p.path for p in schema_found}
        self._bad_sorted = sorted(self.bad)  # for clean(): what lies inside a pointer sorts right after it
        self.problems: list[Problem] = []
        self._found: set[Problem] = set()  # the problems, for add()'s duplicate check in constant time
        self.stages = _read_stages(doc)
        raw_inputs = doc.get("inputs")
        self.declared: dict[str, Any] | None = raw_inputs if isinstance(raw_inputs, dict) else None
        # Whether every producer and external input is known, so "unknown tensor" cannot be a cascade.
        pipeline = doc.get("pipeline")
        self.complete = (
            isinstance(pipeline, list)
            and len(self.stages) == len(pipeline)
            and all(s.has_ports for s in self.stages)
            and ("inputs" not in doc or self.declared is not None)
        )
        self.producers: dict[str, list[tuple[_Stage, int]]] = {}
        for stage in self.stages:
            for j, name in stage.outputs:
                self.producers.setdefault(name, []).append((stage, j))

    def clean(self, ptr: str) -> bool:
        """No schema problem at ``ptr`` or inside it."""
        if ptr in self.bad:
            return False
        inside = bisect.bisect_left(self._bad_sorted, ptr + "/")
        return inside == len(self._bad_sorted) or not self._bad_sorted[inside].startswith(ptr + "/")

    def add(self, ptr: str, message: str) -> None:
        problem = Problem(_CODE, ptr, message)
        if problem not in self._found:
            self._found.add(problem)
            self.problems.append(problem)

    def check_declared_names(self) -> None:
        for name in self.declared or {}:
            if not re.fullmatch(TENSOR_NAME_PATTERN, name):
                self.add(
                    json_pointer(["inputs", name]),
                    f"input name {name!r} is not a valid tensor name: {_TENSOR_RULE}",
                )

    def check_ids(self) -> None:
        first: dict[str, _Stage] = {}
        for stage in self.stages:
            explicit = stage.raw.get("id")
            ptr = stage.ptr + "/id"
            if not isinstance(explicit, str) or not self.clean(ptr):
                continue
            if explicit in first:
                self.add(
                    ptr,
                    f"duplicate stage id {explicit!r}: already used by {first[explicit].describe()}; "
                    "give each stage a unique id",
                )
            else:
                first[explicit] = stage

    def check_operators(self, known: Collection[str]) -> None:
        names = sorted(known)
        listing = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "") if names else "none"

        def unknown(ptr: str, op: str, role: str) -> None:
            match = closest(op, names)
            hint = f"; did you mean {match!r}? Otherwise" if match else f" (known operators: {listing});"
            self.add(
                ptr,
                f"unknown {role} {op!r}{hint} register it (pl.operator, pl.load_library) or give "
                "the stage a 'library' that provides it",
            )

        for stage in self.stages:
            if "library" in stage.raw:
                continue
            op = stage.raw.get("name")
            if isinstance(op, str) and self.clean(stage.ptr + "/name") and op not in known:
                unknown(stage.ptr + "/name", op, "operator")
            policy = stage.raw.get("on_error")
            ptr = stage.ptr + "/on_error/fallback"
            fallback = policy.get("fallback") if isinstance(policy, dict) else None
            if isinstance(fallback, str) and self.clean(ptr) and fallback not in known:
                unknown(ptr, fallback, "fallback operator")

    def check_specifiers(self) -> None:
        checks: list[tuple[str, Any, Any]] = []
        for stage in self.stages:
            checks.append((stage.ptr + "/version", stage.raw.get("version"), parse_specifier))
            policy = stage.raw.get("on_error")
            if isinstance(policy, dict):
                checks.append((stage.ptr + "/on_error/version", policy.get("version"), parse_specifier))
        requires = self.doc.get("requires")
        if isinstance(requires, dict):
            checks.append(
                (
                    "/requires/compute_capability",
                    requires.get("compute_capability"),
                    parse_capability_specifier,
                )
            )
        for ptr, text, parse in checks:
            if isinstance(text, str) and self.clean(ptr):
                try:
                    parse(text)
                except ValueError as e:
                    self.add(ptr, str(e))

    def check_alignment(self) -> None:
        for stage in self.stages:
            constraints = stage.raw.get("constraints")
            ptr = stage.ptr + "/constraints/memory_alignment"
            value = constraints.get("memory_alignment") if isinstance(constraints, dict) else None
            if not isinstance(value, int) or isinstance(value, bool) or not self.clean(ptr):
                continue
            if value < _MIN_ALIGNMENT or value & (value - 1):
                suggestion = max(_MIN_ALIGNMENT, 1 << max(value - 1, 0).bit_length())
                self.add(
                    ptr,
                    f"memory_alignment must be a power of two >= {_MIN_ALIGNMENT} (got {value}); "
                    f"use {suggestion}",
                )

    def check_library_paths(self) -> None:
        for stage in self.stages:
            path = stage.raw.get("library")
            ptr = stage.ptr + "/library"
            if not isinstance(path, str) or not self.clean(ptr):
                continue
            # The schema bounds the whole path (PATH_MAX); the system also bounds each folder or file name.
            sizes = [(len(part.encode("utf-8", "replace")), part) for part in path.split("/")]
            size, long = max(sizes)
            if size > _NAME_MAX:
                self.add(
                    ptr,
                    f"library path has a name of {size} bytes "
                    f"({short_repr(long)}); file and folder names are at most {_NAME_MAX} bytes",
                )
            elif "\0" in path:
                self.add(ptr, "library path contains a NUL character; give the path of the .so file")

    def check_producers(self) -> None:
        for name, produced in self.producers.items():
            first_stage = produced[0][0]
            for stage, j in produced:
                ptr = f"{stage.ptr}/outputs/{j}"
                if not self.clean(ptr):
                    continue
                if name in self.bound:
                    self.add(
                        ptr,
                        f"tensor {name!r} is bound by the weights file (/weights) and also produced by "
                        f"{stage.describe()}; rename the output or remove the array from the weights file",
                    )
                elif self.declared is not None and name in self.declared:
                    self.add(
                        ptr,
                        f"tensor {name!r} is declared as an external input "
                        f"({json_pointer(['inputs', name])}) and also produced by {stage.describe()}; "
                        "rename the output or remove the declaration",
                    )
                elif stage is not first_stage:
                    self.add(
                        ptr,
                        f"tensor {name!r} is already produced by {first_stage.describe()}; each "
                        "tensor needs exactly one producer: rename this output",
                    )

    def check_consumers(self) -> None:
        produced_before: set[str] = set()
        for stage in self.stages:
            for j, name in stage.inputs:
                ptr = f"{stage.ptr}/inputs/{j}"
                if (
                    name in produced_before
                    or name in self.bound
                    or (self.declared is not None and name in self.declared)
                ):
                    continue
                if not self.clean(ptr):
                    continue
                later = self.producers.get(name)
                if later and later[0][0] is stage:
                    self.add(
                        ptr,
                        f"{stage.describe()} reads tensor {name!r}, which it produces itself; a stage "
                        "cannot read its own output",
                    )
                elif later:
                    self.add(
                        ptr,
                        f"tensor {name!r} is produced by stage {later[0][0].id!r} ({later[0][0].ptr}), "
                        "which runs after this stage; list stages in dependency order",
                    )
                elif self.declared is not None and self.complete:
                    known = [*self.declared, *self.bound, *sorted(produced_before)]
                    hint = did_you_mean(name, known, cutoff=_NAME_CUTOFF) or (
                        f"; known here: {_few(known)}" if known else ""
                    )
                    self.add(
                        ptr,
                        f"unknown tensor {name!r}: it is neither a declared input nor produced by an "
                        f"earlier stage{hint}; declare it in inputs or produce it earlier",
                    )
            produced_before.update(name for _, name in stage.outputs)

    def check_bound(self) -> None:
        """A declared input that the weights file binds must have the array's shape and dtype."""
        for name, (shape, dtype) in self.bound.items():
            decl = (self.declared or {}).get(name)
            ptr = json_pointer(["inputs", name])
            if not isinstance(decl, dict) or not self.clean(ptr):
                continue
            want = decl.get("shape")
            if isinstance(want, list) and (
                len(want) != len(shape)
                or any(isinstance(w, int) and w != d for w, d in zip(want, shape, strict=False))
            ):
                self.add(
                    ptr + "/shape",
                    f"input {name!r} is declared with shape {want}, but the weights file binds it to an "
                    f"array of shape {list(shape)}; fix the declaration or the array",
                )
            if isinstance(decl.get("dtype"), str) and _dtype_name(decl["dtype"]) != dtype:
                self.add(
                    ptr + "/dtype",
                    f"input {name!r} is declared as {decl['dtype']}, but the weights file binds it to a "
                    f"{dtype} array; fix the declaration or the array",
                )

    def check_cycles(self) -> None:
        # Edge k -> i when stage k produces a tensor that stage i reads.
        edges: dict[int, dict[int, str]] = {s.index: {} for s in self.stages}
        for stage in self.stages:
            for _, name in stage.inputs:
                for producer, _ in self.producers.get(name, []):
                    edges[producer.index].setdefault(stage.index, name)
        by_index = {s.index: s for s in self.stages}
        reported: set[frozenset[int]] = set()
        state: dict[int, int] = {}  # 1 = on the DFS stack, 2 = finished
        for root in edges:
            if root in state:
                continue
            path, iters = [root], [iter(sorted(edges[root]))]
            state[root] = 1
            while path:
                nxt = next(iters[-1], None)
                if nxt is None:
                    state[path.pop()] = 2
                    iters.pop()
                elif state.get(nxt) == 1:
                    cycle = path[path.index(nxt) :]
                    if frozenset(cycle) not in reported:
                        reported.add(frozenset(cycle))
                        self._report_cycle(cycle, edges, by_index)
                elif nxt not in state:
                    state[nxt] = 1
                    path.append(nxt)
                    iters.append(iter(sorted(edges[nxt])))

    def _report_cycle(self, cycle: list[int], edges: dict[int, dict[int, str]], by_index: dict[int, _Stage]):
        start = cycle.index(min(cycle))
        cycle = cycle[start:] + cycle[:start]
        ring = [*cycle, cycle[0]]
        chain = " -> ".join(by_index[i].id for i in ring)
        via = "; ".join(
            f"{by_index[a].id!r} produces {edges[a][b]!r} read by {by_index[b].id!r}"
            for a, b in zip(ring, ring[1:], strict=False)
        )
        self.add(
            by_index[cycle[0]].ptr,
            f"cycle: {chain} ({via}); a pipeline must be acyclic: remove one of these dependencies",
        )

    def check_outputs(self) -> None:
        outputs = self.doc.get("outputs")
        if not isinstance(outputs, list) or not self.complete:
            return
        known = [*self.producers, *(self.declared or {})]
        for k, name in enumerate(outputs):
            ptr = f"/outputs/{k}"
            if isinstance(name, str) and self.clean(ptr) and name not in known:
                nor = " nor a declared input" if self.declared is not None else ""
                hint = did_you_mean(name, known, cutoff=_NAME_CUTOFF) or (
                    f"; list a tensor some stage produces ({_few(known)})"
                )
                self.add(ptr, f"output {name!r} is not produced by any stage{nor}{hint}")


def _few(names: list[str], limit: int = 8) -> str:
    """``'a', 'b', ... (12 in all)`` for a message."""
    shown = ", ".join(short_repr(n) for n in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _dtype_name(name: str) -> str | None:
    try:
        return get_dtype(name).name
    except PipeLinkError:
        return None


def check_document(
    doc: Any,
    *,
    known_operators: Collection[str] = (),
    check_operators: bool = True,
    bound: Mapping[str, tuple] | None = None,
) -> list[Problem]:
    """Every problem of a pipeline config, schema violations first, then semantic ones.

    Parameters
    ----------
    doc : Any
        The parsed config (normally a dict from :func:`read_config`).
    known_operators : collection of str
        Operators that can be resolved without a ``library`` (built-in and registered ones).
    check_operators : bool
        Report stages (and fallbacks) without a ``library`` whose operator is not in ``known_operators``.
    bound : mapping of name -> (shape, dtype name), optional
        The arrays of the config's ``weights`` file (``config.weights.read_weights``): these names are
        external inputs, and a declaration of one must match its array.

    Returns
    -------
    list of Problem
        Empty when the config is valid. Every problem has code ``PIPELINK_ERR_INVALID_CONFIG`` and an
        RFC 6901 pointer. Semantic rules run only on the parts the schema found well-formed, so one
        mistake is not reported twice.
    """
    found = schema_problems(doc)
    if not isinstance(doc, dict):
        return found
    checker = _Checker(doc, found, bound or {})
    checker.check_declared_names()
    checker.check_ids()
    if check_operators:
        checker.check_operators(known_operators)
    checker.check_specifiers()
    checker.check_alignment()
    checker.check_library_paths()
    checker.check_producers()
    checker.check_consumers()
    checker.check_bound()
    checker.check_cycles()
    checker.check_outputs()
    return found + checker.problems


def _differs_in_core(a: str, b: str) -> bool:
    """True when two names differ in what is left after their shared prefix and suffix is removed
    entirely ("beta_tensor" vs "mean_tensor": "beta" vs "mean"), i.e. they are different words rather
    than a typo of one another."""
    prefix = len(os.path.commonprefix([a, b]))
    suffix = len(os.path.commonprefix([a[prefix:][::-1], b[prefix:][::-1]]))
    core_a, core_b = a[prefix : len(a) - suffix], b[prefix : len(b) - suffix]
    if min(len(core_a), len(core_b)) < 3:
        return False  # a few characters added, dropped or swapped: a typo
    return difflib.SequenceMatcher(None, core_a, core_b).ratio() < 0.6


def check_warnings(doc: Any) -> list[Problem]:
    """Warnings: names that are probably typos but are not errors.

    Without declared ``inputs``, a tensor no stage produces is an external input bound at ``run()``;
    when its name closely resembles a produced tensor, it is most likely a misspelling of it.

    Parameters
    ----------
    doc : Any
        The parsed config; any shape is tolerated.

    Returns
    -------
    list of Problem
        Code ``PIPELINK_ERR_INVALID_CONFIG``, pointer at the reading stage's input.
    """
    if not isinstance(doc, dict) or "inputs" in doc:
        return []
    stages = _read_stages(doc)
    producer: dict[str, _Stage] = {}
    for stage in stages:
        for _, name in stage.outputs:
            producer.setdefault(name, stage)
    warnings = []
    candidates = sorted(producer)
    # A hint costs a difflib scan of every produced name: look each unproduced name up once, and stop
    # hinting past a budget of comparisons, so a config of thousands of stages loads in linear time.
    matches: dict[str, str | None] = {}
    budget = _HINT_COMPARISONS
    for stage in stages:
        for j, name in stage.inputs:
            if name in producer:
                continue
            if name not in matches and budget >= len(candidates):
                budget -= len(candidates)
                matches[name] = closest(name, candidates, cutoff=_WARN_CUTOFF)
            match = matches.get(name)
            if match is not None and not _differs_in_core(name, match):
                warnings.append(
                    Problem(
                        _CODE,
                        f"{stage.ptr}/inputs/{j}",
                        f"tensor {short_repr(name)} is not produced by any stage, so it becomes an external "
                        f"input bound at run(); did you mean {match!r} "
                        f"(produced by {producer[match].describe()})? "
                        "Declare top-level 'inputs' to make unknown names an error",
                    )
                )
    return warnings
