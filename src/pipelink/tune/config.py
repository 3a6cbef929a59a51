"""Loading and validating ``tune_config.json`` (seed section 3.7), reporting every problem at once.

Never raises on the first problem: schema and semantic checks all run, and the caller gets one
:class:`~pipelink.errors.ConfigError` listing each problem with its JSON Pointer.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from ..config.reader import loads_relaxed, read_config_bytes
from ..dtypes import get_dtype
from ..errors import ConfigError, ErrorCode, InvalidArgumentError, PipeLinkError, Problem
from .space import ParameterSpace

__all__ = [
    "TuneConfig",
    "load_tune_config",
    "validate_tune_config",
    "tune_schema",
    "parse_shapes",
    "parse_dtypes",
]

_INVALID = ErrorCode.PIPELINK_ERR_INVALID_CONFIG


@dataclass(frozen=True)
class TuneConfig:
    """A validated tune config; field meanings as in ``tune_schema.json``."""

    tuning_space: dict[str, tuple[Any, ...]]
    benchmark_criteria: str
    warmup_iters: int = 10
    measure_iters: int = 50
    statistic: str = "p95"
    strategy: str = "grid"
    max_trials: int | None = None
    seed: int = 0
    operator: str | None = None
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    library: str | None = None  # a native module whose tunables arrive as attributes
    sources: tuple[str, ...] = ()  # or the module's sources, rebuilt per variant with -D macros
    device: str | None = None
    reference: str | None = None
    base_dir: str | None = None  # where relative library/sources paths start (the config's folder)

    @property
    def space(self) -> ParameterSpace:
        """The tuning space as a :class:`ParameterSpace`."""
        return ParameterSpace(self.tuning_space)

    def to_dict(self) -> dict[str, Any]:
        """A JSON document that loads back into an equal config."""
        out: dict[str, Any] = {
            "tuning_space": {k: list(v) for k, v in self.tuning_space.items()},
            "benchmark_criteria": self.benchmark_criteria,
            "warmup_iters": self.warmup_iters,
            "measure_iters": self.measure_iters,
            "statistic": self.statistic,
            "strategy": self.strategy,
            "seed": self.seed,
        }
        if self.max_trials is not None:
            out["max_trials"] = self.max_trials
        if self.operator is not None:
            out["operator"] = self.operator
        if self.shapes:
            out["shapes"] = {k: list(v) for k, v in self.shapes.items()}
        if self.dtypes:
            out["dtypes"] = dict(self.dtypes)
        for key in ("library", "device", "reference"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.sources:
            out["sources"] = list(self.sources)
        return out

    def resolve(self, path: str) -> Path:
        """A library or source path, relative to the tune config's folder."""
        p = Path(path).expanduser()
        return p if p.is_absolute() or self.base_dir is None else Path(self.base_dir) / p


@cache
def tune_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of tune configs, as shipped in the package."""
    text = resources.files(__package__).joinpath("tune_schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@cache
def _validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(tune_schema())


def _pointer(parts: Sequence[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _schema_problems(doc: Any) -> list[Problem]:
    problems = []
    errors = sorted(_validator().iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    for err in errors:
        path = list(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, Mapping):
            allowed = list(err.schema.get("properties", {}))
            for extra in sorted(set(err.instance) - set(allowed)):
                hint = difflib.get_close_matches(extra, allowed, n=1)
                tip = f"; did you mean {hint[0]!r}?" if hint else f"; allowed: {', '.join(allowed)}"
                problems.append(Problem(_INVALID, _pointer([*path, extra]), f"unknown key {extra!r}{tip}"))
        elif "propertyNames" in err.schema_path:
            problems.append(
                Problem(
                    _INVALID,
                    _pointer([*path, err.instance]),
                    f"parameter name {err.instance!r} is not a C identifier "
                    "(letters, digits, _; not starting with a digit), "
                    "so it cannot be a -D macro",
                )
            )
        elif err.validator == "required":
            # Point at where the missing member belongs.
            missing = err.message.split("'")[1] if "'" in err.message else ""
            problems.append(Problem(_INVALID, _pointer([*path, missing]), err.message))
        else:
            problems.append(Problem(_INVALID, _pointer(path), err.message))
    return problems


def _semantic_problems(doc: Mapping[str, Any], require_target: bool) -> list[Problem]:
    problems = []
    space = doc.get("tuning_space")
    size = 1
    if isinstance(space, Mapping):
        for values in space.values():
            size *= len(values) if isinstance(values, list) else 1
    if doc.get("strategy") == "grid" and isinstance(doc.get("max_trials"), int) and doc["max_trials"] < size:
        problems.append(
            Problem(
                _INVALID,
                "/max_trials",
                f"strategy 'grid' evaluates all {size} variants, so max_trials={doc['max_trials']} would cut "
                "the grid arbitrarily; use strategy 'budgeted' (or drop max_trials)",
            )
        )
    shapes = doc.get("shapes") if isinstance(doc.get("shapes"), Mapping) else {}
    dtypes = doc.get("dtypes")
    if isinstance(dtypes, str):
        dtypes = {"": dtypes}
    for name, dt in (dtypes or {}).items() if isinstance(dtypes, Mapping) else ():
        where = "/dtypes" if name == "" else _pointer(["dtypes", name])
        if isinstance(dt, str):
            try:
                get_dtype(dt)
            except PipeLinkError as e:
                problems.append(Problem(_INVALID, where, str(e)))
        if name and shapes and name not in shapes:
            hint = difflib.get_close_matches(name, list(shapes), n=1)
            tip = f"; did you mean {hint[0]!r}?" if hint else ""
            problems.append(Problem(_INVALID, where, f"dtype given for {name!r}, which has no shape{tip}"))
    if require_target:
        if not doc.get("operator"):
            problems.append(
                Problem(
                    _INVALID,
                    "/operator",
                    'no operator to tune: set "operator" in the file or pass --operator',
                )
            )
        if not shapes:
            problems.append(
                Problem(
                    _INVALID, "/shapes", 'no shapes to tune for: set "shapes" in the file or pass --shapes'
                )
            )
    return problems


def validate_tune_config(config: Mapping[str, Any] | Any, *, require_target: bool = False) -> list[Problem]:
    """Every problem of a tune config document (empty when valid).

    Parameters
    ----------
    config : mapping
        The parsed JSON document.
    require_target : bool
        Also require ``operator`` and ``shapes`` (the CLI supplies them when the file does not).
    """
    problems = _schema_problems(config)
    if isinstance(config, Mapping):
        problems += _semantic_problems(config, require_target)
    return problems


def _read(source: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    if isinstance(source, Mapping):
        return dict(source), "<dict>"
    path = Path(source)
    try:
        text = read_config_bytes(path, str(path)).decode("utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read tune config {str(path)!r}: {e.strerror or e}", file=str(path)) from e
    except UnicodeDecodeError as e:
        problem = Problem(_INVALID, "", f"not UTF-8 text (byte {e.start}: {e.reason})")
        raise ConfigError(f"{path}: not UTF-8:", [problem], file=str(path)) from e
    try:  # the same relaxed JSON as pipeline configs: comments, trailing commas, no duplicate keys
        doc = loads_relaxed(text)
    except json.JSONDecodeError as e:
        problem = Problem(_INVALID, "", f"line {e.lineno} column {e.colno}: {e.msg}")
        raise ConfigError(f"{path}: not valid JSON:", [problem], file=str(path)) from e
    except ValueError as e:  # NaN / Infinity
        problem = Problem(_INVALID, "", str(e))
        raise ConfigError(f"{path}: not valid JSON:", [problem], file=str(path)) from e
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{path}: invalid tune config:",
            [Problem(_INVALID, "", f"must be a JSON object (got {type(doc).__name__})")],
            file=str(path),
        )
    return doc, str(path)


def load_tune_config(
    source: str | Path | Mapping[str, Any],
    *,
    operator: str | None = None,
    shapes: Mapping[str, Sequence[int]] | str | None = None,
    dtypes: Mapping[str, str] | str | None = None,
    require_target: bool = True,
) -> TuneConfig:
    """Read, merge and validate a tune config.

    Parameters
    ----------
    source : str, Path or mapping
        A ``tune_config.json`` path (``//`` comments allowed) or the parsed document.
    operator, shapes, dtypes : optional
        Override the file's values (the CLI's ``--operator``/``--shapes``/``--dtypes``); ``shapes`` and
        ``dtypes`` may be given as text, see :func:`parse_shapes` and :func:`parse_dtypes`.
    require_target : bool
        Require an operator and shapes after merging (default). ``False`` loads a bare search space.

    Returns
    -------
    TuneConfig

    Raises
    ------
    ConfigError
        With ``.errors`` listing every problem, each with a JSON Pointer into the merged document.
    """
    doc, where = _read(source)
    try:
        if operator is not None:
            doc["operator"] = operator
        if shapes is not None:
            doc["shapes"] = (
                parse_shapes(shapes) if isinstance(shapes, str) else {k: list(v) for k, v in shapes.items()}
            )
        if dtypes is not None:
            doc["dtypes"] = parse_dtypes(dtypes) if isinstance(dtypes, str) else dict(dtypes)
    except InvalidArgumentError as e:
        problem = Problem(_INVALID, "", str(e))
        raise ConfigError(f"{where}: invalid tune config:", [problem], file=where) from e
    if "max_trials" in doc and "strategy" not in doc:
        doc["strategy"] = "budgeted"  # a budget without a strategy means a budgeted search
    problems = validate_tune_config(doc, require_target=require_target)
    if problems:
        raise ConfigError(f"{where}: invalid tune config:", problems, file=where)
    shape_map = {k: tuple(v) for k, v in doc.get("shapes", {}).items()}
    raw_dtypes = doc.get("dtypes", "float32")
    dtype_map = (
        {k: get_dtype(raw_dtypes).name for k in shape_map}
        if isinstance(raw_dtypes, str)
        else {k: get_dtype(raw_dtypes.get(k, "float32")).name for k in shape_map}
    )
    return TuneConfig(
        tuning_space={k: tuple(v) for k, v in doc["tuning_space"].items()},
        benchmark_criteria=doc["benchmark_criteria"],
        warmup_iters=doc.get("warmup_iters", 10),
        measure_iters=doc.get("measure_iters", 50),
        statistic=doc.get("statistic", "p95"),
        strategy=doc.get("strategy", "grid"),
        max_trials=doc.get("max_trials"),
        seed=doc.get("seed", 0),
        operator=doc.get("operator"),
        shapes=shape_map,
        dtypes=dtype_map,
        library=doc.get("library"),
        sources=tuple(doc.get("sources", ())),
        device=doc.get("device"),
        reference=doc.get("reference"),
        base_dir=str(Path(where).resolve().parent) if isinstance(source, str | Path) else None,
    )


def parse_shapes(text: str) -> dict[str, list[int]]:
    """``"x=4096x4096,gamma=4096"`` -> ``{"x": [4096, 4096], "gamma": [4096]}`` (``scalar=`` is 0-d).

    Raises
    ------
    InvalidArgumentError
        On anything else, echoing the offending part.
    """
    out: dict[str, list[int]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, dims = part.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            out[name.strip()] = [int(d) for d in dims.lower().split("x") if d.strip()]
        except ValueError:
            raise InvalidArgumentError(
                f"shapes must read NAME=D0xD1x...,NAME=... (got {part!r} in {text!r})"
            ) from None
    if not out:
        raise InvalidArgumentError(f"shapes must read NAME=D0xD1x...,NAME=... (got {text!r})")
    return out


def parse_dtypes(text: str) -> str | dict[str, str]:
    """``"bfloat16"`` (every input) or ``"x=bfloat16,gamma=float32"`` (per input)."""
    if "=" not in text:
        return text.strip()
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, dt = part.partition("=")
        if not sep or not name.strip() or not dt.strip():
            raise InvalidArgumentError(f"dtypes must read DTYPE or NAME=DTYPE,... (got {part!r} in {text!r})")
        out[name.strip()] = dt.strip()
    return out
