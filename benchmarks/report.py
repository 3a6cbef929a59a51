"""Writes the suite's results: ``results.json`` (everything), ``results.md`` (the table and the targets)
and ``results.png`` (a bar chart, when matplotlib is installed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["write_results", "table_rows", "text_table", "fmt_time", "jsonable"]

COLUMNS = (
    "case",
    "PipeLink eager",
    "PipeLink graph",
    "PyTorch eager",
    "torch.compile",
    "roofline",
    "% of roofline",
    "x vs PyTorch",
)
BARS = (
    ("pipelink_eager", "PipeLink eager"),
    ("pipelink_graph", "PipeLink graph"),
    ("torch_eager", "PyTorch eager"),
    ("torch_compile", "torch.compile"),
)


def fmt_time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def _baseline(r: dict[str, Any]) -> str | None:
    """What "x vs PyTorch" compares with: torch eager, or the direct call / torch graph for special cases."""
    t = r.get("times_s", {})
    for key in ("torch_eager", "direct"):
        if key in t:
            return key
    return None


def table_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """One row per case, in the COLUMNS order; errors and skips say so in the first timing column."""
    rows = []
    for r in results:
        if r.get("status") != "ok":
            why = r.get("error") or r.get("reason") or ""
            rows.append(
                [r["case"], f"{r.get('status', '?').upper()}: {why.splitlines()[0][:90] if why else ''}"]
                + ["-"] * (len(COLUMNS) - 2)
            )
            continue
        t = r.get("times_s", {})
        best = r.get("pipelink_best", {}).get("time_s") or t.get("pipelink_eager")
        roof = r.get("roofline_s")
        pct = f"{100.0 * roof / best:.0f}%" if roof and best else "-"
        base = _baseline(r)
        ratio = "-"
        if base and best:
            ratio = f"{t[base] / best:.2f}x" + ("" if base == "torch_eager" else f" ({base})")
        name = r["case"] + ("" if r.get("correct", True) else " (WRONG)")
        rows.append(
            [
                name,
                fmt_time(t.get("pipelink_eager")),
                fmt_time(t.get("pipelink_graph")),
                fmt_time(t.get("torch_eager") if "torch_eager" in t else t.get("direct")),
                fmt_time(t.get("torch_compile") if "torch_compile" in t else t.get("torch_graph")),
                fmt_time(roof),
                pct,
                ratio,
            ]
        )
    return rows


def text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """``rows`` under ``header`` as aligned plain-text lines: the first column left, the others right."""
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    ]


def _markdown(meta: dict[str, Any], results: list[dict[str, Any]], targets: list[dict[str, Any]]) -> str:
    c = meta.get("ceilings", {})
    lines = [
        f"# PipeLink benchmarks ({meta['size']} sizes, {meta['device_name']})",
        "",
        f"- commit `{meta['commit']}`{' (dirty tree)' if meta.get('dirty') else ''}, {meta['date']}, "
        f"seed {meta['seed']}, {meta['elapsed_s']:.0f} s",
        f"- ceilings measured in this run: copy {c.get('copy_bandwidth_Bps', 0) / 1e12:.2f} TB/s "
        f"(read + write), bf16 mm {c.get('mm_flops_per_s', 0) / 1e12:.1f} TFLOP/s",
        f"- versions: {', '.join(f'{k} {v}' for k, v in meta.get('versions', {}).items())}",
    ]
    lines += [f"- note: {n}" for n in meta.get("notes", [])]
    lines += [
        "",
        "Times are per call (medians over repeats, CUDA events closed after a device-wide join, so every "
        "stream's work is inside the interval). PipeLink times are around whole `run()` calls (graph mode "
        'with static outputs); "% of roofline" and "x vs PyTorch" use PipeLink\'s faster mode. '
        "For the chain case the torch.compile column holds the torch CUDA graph; for native cases the "
        "PyTorch column holds the direct ctypes call.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(COLUMNS) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(results)]
    lines += [
        "",
        "## Correctness",
        "",
        "| case | check | rel err | tolerance | ok |",
        "|---|---|---:|---:|---|",
    ]
    for r in results:
        for key, chk in r.get("correctness", {}).items():
            lines.append(
                f"| {r['case']} | {key} | {chk['rel_err']:.2e} | {chk['tolerance']:.0e} | "
                f"{'yes' if chk['ok'] else '**NO**'} |"
            )
    lines += ["", "## Targets", ""]
    lines += [f"- **{t['status']}** {t['target']}: {t['figure']}" for t in targets]
    special = [r for r in results if r.get("status") == "ok" and r.get("group") in ("chain", "native", "mlp")]
    if special:
        lines += ["", "## Details", ""]
        for r in special:
            comp = {
                k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.get("comparisons", {}).items()
            }
            lines.append(f"- `{r['case']}`: {json.dumps(comp)}")
            if r.get("memory"):
                mem = {k: v for k, v in r["memory"].items() if k != "pipelink_stats"}
                lines.append(f"  - memory (bytes): {json.dumps(mem)}")
    errors = [(r["case"], k, v) for r in results for k, v in r.get("errors", {}).items()]
    if errors:
        lines += ["", "## Columns not measured", ""]
        lines += [f"- `{case}` {key}: {msg.splitlines()[0][:200]}" for case, key, msg in errors]
    return "\n".join(lines) + "\n"


def _png(path: Path, results: list[dict[str, Any]]) -> str | None:
    """A bar chart of every mode's time relative to PyTorch eager (or PipeLink eager); None when written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return f"results.png skipped: matplotlib is not available ({type(e).__name__}: {e})"
    ok = [r for r in results if r.get("status") == "ok" and r.get("times_s")]
    if not ok:
        return "results.png skipped: no case has timings"
    fig, ax = plt.subplots(figsize=(max(8.0, 0.7 * len(ok) + 2), 5.5))
    width = 0.8 / (len(BARS) + 1)
    for i, (key, label) in enumerate(BARS + (("roofline_s", "roofline"),)):
        values = []
        for r in ok:
            t = r["times_s"]
            ref = t.get("torch_eager") or t.get("direct") or t.get("pipelink_eager")
            v = r.get("roofline_s") if key == "roofline_s" else t.get(key)
            values.append(v / ref if v and ref else 0.0)
        ax.bar([x + i * width for x in range(len(ok))], values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("time relative to PyTorch eager (lower is better)")
    ax.set_xticks([x + width * len(BARS) / 2 for x in range(len(ok))])
    ax.set_xticklabels([r["case"] for r in ok], rotation=60, ha="right", fontsize=7)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it: non-finite floats and unknown objects become strings."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def write_results(
    out_dir: Path, meta: dict[str, Any], results: list[dict[str, Any]], targets: list[dict[str, Any]]
) -> dict[str, Path]:
    """Write results.json, results.md and (when possible) results.png; returns what was written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    try:
        note = _png(out_dir / "results.png", results)
    except Exception as e:  # noqa: BLE001 - the chart must never cost the numbers
        note = f"results.png failed: {type(e).__name__}: {e}"
    if note is not None:
        meta.setdefault("notes", []).append(note)
    else:
        written["png"] = out_dir / "results.png"
    doc = {"meta": meta, "ceilings": meta.get("ceilings", {}), "cases": results, "targets": targets}
    (out_dir / "results.json").write_text(json.dumps(jsonable(doc), indent=2) + "\n")
    written["json"] = out_dir / "results.json"
    (out_dir / "results.md").write_text(_markdown(meta, results, targets))
    written["md"] = out_dir / "results.md"
    return written
