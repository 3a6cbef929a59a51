"""The auto-tuner (seed section 3.7): search launch and compile parameters, verify every variant
against the CPU reference before timing it, and cache the best per device and shape.

Importing this package needs neither a GPU nor matplotlib; backends provide :class:`TuneTarget`.
"""

from __future__ import annotations

from .cache import (
    KEY_FIELDS,
    ParamChoice,
    TuneCache,
    default_cache_dir,
    key_digest,
    resolve_params,
    validate_tuned,
)
from .cli import default_target_factory, run_tune
from .config import (
    TuneConfig,
    load_tune_config,
    parse_dtypes,
    parse_shapes,
    tune_schema,
    validate_tune_config,
)
from .report import export, plot_space, summary_line, trials_table
from .space import (
    BudgetedSearch,
    GridSearch,
    ParameterSpace,
    ResourceLimit,
    Search,
    first_violation,
    make_search,
)
from .target import CRITERIA, TuneTarget, defines, source_hash
from .tuner import Trial, Tuner, TuneResult, time_statistic, tune

__all__ = [
    "BudgetedSearch",
    "CRITERIA",
    "GridSearch",
    "KEY_FIELDS",
    "ParamChoice",
    "ParameterSpace",
    "ResourceLimit",
    "Search",
    "Trial",
    "TuneCache",
    "TuneConfig",
    "TuneResult",
    "TuneTarget",
    "Tuner",
    "default_cache_dir",
    "default_target_factory",
    "defines",
    "export",
    "first_violation",
    "key_digest",
    "load_tune_config",
    "make_search",
    "parse_dtypes",
    "parse_shapes",
    "plot_space",
    "resolve_params",
    "validate_tuned",
    "run_tune",
    "source_hash",
    "summary_line",
    "time_statistic",
    "trials_table",
    "tune",
    "tune_schema",
    "validate_tune_config",
]
