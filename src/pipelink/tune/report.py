"""Presenting a tuning run: a rich table of every trial, a PNG of the space, and the export file.

Plotting is optional (matplotlib); nothing here changes a result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from .target import defines

if TYPE_CHECKING:
    from .tuner import Trial, TuneResult

__all__ = ["trials_table", "summary_line", "plot_space", "export", "MATPLOTLIB_MISSING"]

MATPLOTLIB_MISSING = (
    "cannot write the plot: matplotlib is not installed; install it with "
    "`pip install matplotlib`, or leave out --plot"
)

_STATUS_STYLE = {"ok": "green", "wrong": "bold red", "failed": "red", "pruned": "dim"}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _params_text(params: dict[str, Any], names: Iterable[str]) -> str:
    return " ".join(f"{n}={_fmt(params[n])}" for n in names if n in params)


def summary_line(result: TuneResult) -> str:
    """One line: the best variant, its metric, the defaults' metric and the gain."""
    if result.from_cache:
        return f"cached: {_params_text(result.best_params or {}, result.space_names)} (nothing measured)"
    if result.best is None:
        return "no variant passed; the defaults stay in use"
    best = result.best
    text = (
        f"best: {_params_text(best.params, result.space_names)} -> {best.metric:.4g} {result.unit} "
        f"({result.statistic})"
    )
    if result.default is not None and result.default.metric is not None:
        text += f"; defaults {result.default.metric:.4g} {result.unit}"
    if result.gain is not None:
        text += f"; gain x{result.gain:.3f}"
    elif result.default is not None and result.default.status != "ok":
        text += f"; defaults {result.default.status}"
    return text


def trials_table(result: TuneResult, *, limit: int | None = None) -> Table:
    """A rich table with one row per trial: parameters, status, time, metric, % of roofline, verified.

    Parameters
    ----------
    result : TuneResult
    limit : int, optional
        Show only the best ``limit`` verified trials plus every failure (all rows by default).
    """
    unit = result.unit
    table = Table(
        title=f"{result.operator or 'operator'}: {len(result.trials)} variants, "
        f"{result.criteria} from the {result.statistic} launch time"
    )
    table.add_column("#", justify="right")
    for name in result.space_names:
        table.add_column(name, justify="right")
    table.add_column("status")
    table.add_column(f"{result.statistic} time (us)", justify="right")
    table.add_column(unit, justify="right")
    table.add_column("% roofline", justify="right")
    table.add_column("verified")
    table.add_column("note", overflow="fold")
    rows: list[Trial] = list(result.trials)
    if limit is not None:
        ok = sorted(
            (t for t in rows if t.status == "ok"),
            key=lambda t: t.metric or 0.0,
            reverse=result.criteria != "latency_us",
        )[:limit]
        keep = {id(t) for t in ok} | {id(t) for t in rows if t.status != "ok" or t.is_default}
        rows = [t for t in rows if id(t) in keep]
    for t in rows:
        marks = ("* best " if t is result.best else "") + ("default" if t.is_default else "")
        note = " ".join(x for x in (marks.strip(), t.error or "") if x)
        table.add_row(
            str(t.index),
            *(_fmt(t.params.get(n, "")) for n in result.space_names),
            f"[{_STATUS_STYLE[t.status]}]{t.status}[/]",
            f"{t.statistic_s * 1e6:.2f}" if math.isfinite(t.statistic_s) else "inf",
            f"{t.metric:.4g}" if t.metric is not None else "-",
            f"{t.roofline_pct:.1f}" if t.roofline_pct is not None else "-",
            {"ok": "yes", "wrong": "NO"}.get(t.status, "-"),
            note,
            style="bold" if t is result.best else None,
        )
    return table


def plot_space(result: TuneResult, path: str | Path) -> Path:
    """Write a PNG: the metric of every trial in evaluation order, and the space's best-metric map.

    The right panel is a line over the only parameter, or a heat map over the first two parameters
    (each cell shows the best verified metric over the other parameters; blank where none passed).

    Raises
    ------
    ModuleNotFoundError
        With :data:`MATPLOTLIB_MISSING` when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ModuleNotFoundError(MATPLOTLIB_MISSING, name="matplotlib") from e
    path = Path(path)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    ok = [t for t in result.trials if t.metric is not None]
    bad = [t for t in result.trials if t.metric is None]
    left.scatter([t.index for t in ok], [t.metric for t in ok], c="tab:blue", s=14, label="verified")
    floor = min((t.metric for t in ok), default=0.0)
    for status, colour in (("wrong", "tab:red"), ("failed", "black"), ("pruned", "lightgray")):
        xs = [t.index for t in bad if t.status == status]
        if xs:
            left.scatter(xs, [floor] * len(xs), marker="x", c=colour, s=18, label=status)
    if result.best is not None:
        left.scatter(
            [result.best.index],
            [result.best.metric],
            marker="*",
            s=160,
            c="gold",
            edgecolors="black",
            label="best",
            zorder=3,
        )
    left.set_xlabel("trial")
    left.set_ylabel(f"{result.criteria} [{result.unit}]")
    left.set_title("every variant, in evaluation order")
    left.legend(fontsize=8)
    _plot_map(right, result, ok)
    fig.suptitle(f"{result.operator or 'operator'}: {result.criteria} ({result.statistic})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path


def _axis(values: Iterable[Any]) -> list[Any]:
    vals = list(dict.fromkeys(values))
    try:
        return sorted(vals)
    except TypeError:
        return vals


def _plot_map(ax: Any, result: TuneResult, ok: list[Trial]) -> None:
    higher = result.criteria != "latency_us"
    pick = max if higher else min
    names = result.space_names
    if not ok:
        ax.set_title("no verified variant")
        return
    if len(names) == 1:
        xs = _axis(t.params[names[0]] for t in ok)
        ys = [pick(t.metric for t in ok if t.params[names[0]] == x) for x in xs]
        ax.plot([str(x) for x in xs], ys, marker="o")
        ax.set_xlabel(names[0])
        ax.set_ylabel(result.unit)
        ax.set_title(f"best {result.criteria} per value")
        return
    a, b = names[0], names[1]
    xs, ys = _axis(t.params[a] for t in ok), _axis(t.params[b] for t in ok)
    grid = [[math.nan] * len(xs) for _ in ys]
    for t in ok:
        i, j = ys.index(t.params[b]), xs.index(t.params[a])
        cur = grid[i][j]
        grid[i][j] = t.metric if math.isnan(cur) else pick(cur, t.metric)
    image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis" if higher else "viridis_r")
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set_xlabel(a)
    ax.set_ylabel(b)
    others = f" (best over {', '.join(names[2:])})" if len(names) > 2 else ""
    ax.set_title(f"{result.criteria} map{others}")
    ax.figure.colorbar(image, ax=ax, label=result.unit)


def export(result: TuneResult, path: str | Path) -> Path:
    """Write the chosen parameters for ``pipelink build``.

    A ``.json`` path gets ``{"operator", "params", "defines", "key", "criteria", "metric", "gain"}``;
    any other suffix gets the ``-D`` flags alone, space-separated on one line
    (``pipelink build SRC -o LIB.so $(cat tuned.flags)``).

    Raises
    ------
    ValueError
        When the result holds no chosen parameters.
    """
    params = result.best_params
    if params is None:
        raise ValueError("nothing to export: no variant passed verification")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = defines(params)
    if path.suffix.lower() == ".json":
        doc = {
            "operator": result.operator,
            "params": params,
            "defines": flags,
            "key": result.key_fields,
            "criteria": result.criteria,
            "statistic": result.statistic,
            "metric": result.best.metric if result.best is not None else None,
            "gain": result.gain,
        }
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    else:
        path.write_text(" ".join(flags) + "\n", encoding="utf-8")
    return path
