"""``pipelink tune TUNE.json``: the plain function behind the command (the typer wiring lives in
``pipelink/cli.py``). It prints; it never turns a PipeLinkError into an exit code itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import HardwareUnsupportedError, InvalidArgumentError, TuningError
from .cache import TuneCache
from .config import TuneConfig, load_tune_config
from .report import export as export_result
from .report import plot_space, summary_line, trials_table
from .target import TuneTarget
from .tuner import Trial, TuneResult, tune

__all__ = ["run_tune", "default_target_factory", "TargetFactory"]

#: ``factory(config, device) -> TuneTarget``
TargetFactory = Callable[[TuneConfig, str], TuneTarget]

#: The module and function that build a real GPU target (a built-in kernel on a CUDA device).
_BACKEND_MODULE, _BACKEND_FACTORY = "pipelink.tune.kernel_target", "make_tune_target"


def default_target_factory(config: TuneConfig, device: str) -> TuneTarget:
    """The GPU target: ``pipelink.tune.kernel_target.make_tune_target(config, device)``.

    Raises
    ------
    InvalidArgumentError
        For ``device="cpu"``: the CPU reference has no launch parameters to tune.
    HardwareUnsupportedError
        When the CUDA backend (the ``cuda`` extra, an NVIDIA GPU) is not available.
    """
    if config.library or config.sources:
        from .native import NativeModuleTarget

        chosen = config.device or device
        if chosen == "auto":
            from ..backends import resolve_device

            chosen = resolve_device("auto")
        return NativeModuleTarget(config, chosen)
    if device == "cpu":
        raise InvalidArgumentError(
            "tuning needs a GPU: the CPU backend has no launch or compile parameters "
            "(got --device cpu; use auto, cuda or cuda:N)",
            device=device,
        )
    try:
        module = importlib.import_module(_BACKEND_MODULE)
        factory = getattr(module, _BACKEND_FACTORY)
    except (ImportError, AttributeError) as e:
        raise HardwareUnsupportedError(
            f"pipelink tune needs the CUDA backend ({_BACKEND_MODULE}.{_BACKEND_FACTORY}), which is not "
            f"available here ({type(e).__name__}: {e}); install the cuda extra "
            "(pip install 'pipelink[cuda]') on a machine with an NVIDIA GPU",
            device=device,
        ) from e
    return factory(config, device)


def run_tune(
    config_path: str | Path | Mapping[str, Any],
    *,
    operator: str | None = None,
    shapes: Mapping[str, Sequence[int]] | str | None = None,
    dtypes: Mapping[str, str] | str | None = None,
    device: str = "auto",
    export: str | Path | None = None,
    plot: str | Path | None = None,
    target_factory: TargetFactory | None = None,
    console: Any = None,
    cache: TuneCache | None = None,
) -> TuneResult:
    """Load a tune config, tune with a progress bar, print the table, then export and plot.

    Parameters
    ----------
    config_path : str, Path or mapping
        ``TUNE.json`` (``//`` comments allowed) or the parsed document.
    operator, shapes, dtypes : optional
        Override the file (``--operator``, ``--shapes x=4096x4096``, ``--dtypes bfloat16``).
    device : str
        ``"auto"``, ``"cuda"`` or ``"cuda:N"``, passed to the target factory.
    export : str or Path, optional
        Write the chosen parameters (``.json``: params and ``-D`` list; otherwise the flags alone).
    plot : str or Path, optional
        Write a PNG of the space (skipped with a message when matplotlib is missing).
    target_factory : callable, optional
        ``factory(config, device) -> TuneTarget``; default :func:`default_target_factory`.
    console : rich.console.Console, optional
        Where to print (a new console on stdout by default).
    cache : TuneCache, optional
        Where to store the result (default: the user's cache file).

    Returns
    -------
    TuneResult

    Raises
    ------
    ConfigError
        Invalid config (every problem listed).
    TuningError
        No variant passed (the table is printed first), or the target could not be used.
    HardwareUnsupportedError
        No GPU backend to tune on.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = console if console is not None else Console()
    config = load_tune_config(config_path, operator=operator, shapes=shapes, dtypes=dtypes)
    target = (target_factory or default_target_factory)(config, device)
    if not isinstance(target, TuneTarget):
        raise TuningError(
            f"the target factory returned {type(target).__name__}, not a TuneTarget", operator=config.operator
        )
    cache = cache if cache is not None else TuneCache()
    space = config.space
    plan = (
        f"all {space.size} variants"
        if config.strategy == "grid"
        else f"up to {config.max_trials} of {space.size} variants"
    )
    console.print(
        f"tuning [bold]{config.operator}[/] for {config.benchmark_criteria} "
        f"({config.statistic} of {config.measure_iters} launches after {config.warmup_iters} "
        f"warm-up): {plan}"
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("tuning", total=None, last="")

        def progress(done: int, total: int, trial: Trial) -> None:
            bar.update(task, completed=done, total=total, last=f"last: {trial.status}")

        try:
            result = tune(target, config, cache=cache, progress=progress)
        except TuningError as e:
            failed = e.context.get("result")
            if isinstance(failed, TuneResult):
                bar.stop()
                console.print(trials_table(failed))
            raise
    console.print(trials_table(result))
    console.print(summary_line(result))
    console.print(f"stored in {cache.path}")
    if export is not None:
        console.print(f"exported to {export_result(result, export)}")
    if plot is not None:
        try:
            console.print(f"plot written to {plot_space(result, plot)}")
        except ModuleNotFoundError as e:
            console.print(f"[yellow]warning:[/] {e}")
    return result
