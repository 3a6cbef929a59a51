"""The model race's verdicts and reports: MET / MISSED per model and batch, the side-by-side table, and the
per-model breakdown (stages on staged host copies, kernel variants, the slowest stages and operators).

Pure functions of the result records written by ``benchmarks/models.py``: no device, no torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .report import fmt_time, jsonable

__all__ = ["COLUMNS", "RIVALS", "judge", "table_rows", "breakdown_lines", "markdown", "write_model_results"]

# Result keys and their column titles, in table order. PipeLink's two modes race the rivals.
PIPELINK = {"pipelink_eager": "PipeLink eager", "pipelink_graph": "PipeLink graph"}
RIVALS = {"onnxruntime": "onnxruntime", "torch_eager": "PyTorch eager", "torch_compile": "torch.compile"}
COLUMNS = ("model", "batch", *PIPELINK.values(), *RIVALS.values(), "speed vs fastest", "target")
TOP_STAGES = 8
_SETUP = (("import_s", "import"), ("load_s", "load"), ("torch_compile_s", "torch.compile's first call"))


def _best_pipelink(rec: dict[str, Any]) -> tuple[str, float] | None:
    """PipeLink's faster mode among those measured whose output was right: (key, seconds)."""
    t, chk = rec.get("times_s", {}), rec.get("correctness", {})
    modes = {k: t[k] for k in PIPELINK if k in t and chk.get(k, {}).get("ok", False)}
    if not modes:
        return None
    key = min(modes, key=modes.get)
    return key, modes[key]


def judge(rec: dict[str, Any], *, judged: bool) -> dict[str, Any]:
    """The target "PipeLink at least as fast as the fastest of onnxruntime, PyTorch eager and
    torch.compile" for one record: ``{"status": MET|MISSED|N/A, "figure": text}``.

    ``judged`` is False off the GPU host: the figure is kept, the status is N/A. A PipeLink output that
    differs from the reference is MISSED whatever its speed.
    """
    if rec.get("status") != "ok":
        return {"status": "N/A", "figure": f"{rec.get('status')}: {rec.get('error') or rec.get('reason')}"}
    t = rec.get("times_s", {})
    wrong = [k for k in PIPELINK if not rec.get("correctness", {}).get(k, {}).get("ok", True)]
    best = _best_pipelink(rec)
    rivals = {k: t[k] for k in RIVALS if k in t}
    missing = [RIVALS[k] for k in RIVALS if k not in t]
    if best is None:
        failed = rec.get("errors", {}).get("pipelink")
        figure = (
            f"PipeLink failed: {failed}" if failed else f"no correct PipeLink time (wrong: {wrong or 'none'})"
        )
        status = "MISSED" if (wrong or failed) and judged else "N/A"
        return {"status": status, "figure": figure}
    if not rivals:
        return {"status": "N/A", "figure": f"{PIPELINK[best[0]]} {fmt_time(best[1])}; no rival measured"}
    fastest = min(rivals, key=rivals.get)
    ratio = rivals[fastest] / best[1]  # > 1: PipeLink is faster
    figure = (
        f"{PIPELINK[best[0]]} {fmt_time(best[1])} vs {RIVALS[fastest]} {fmt_time(rivals[fastest])}: "
        f"{ratio:.2f}x as fast as the fastest rival ("
        + ", ".join(f"vs {RIVALS[k]} {rivals[k] / best[1]:.2f}x" for k in rivals)
        + ")"
    )
    if missing:
        figure += f"; not measured: {', '.join(missing)}"
    if wrong:
        figure += f"; wrong output in {', '.join(PIPELINK[k] for k in wrong)}"
    met = best[1] <= rivals[fastest] and not wrong
    if not judged:
        return {"status": "N/A", "figure": f"not judged off the GPU host; {figure}"}
    return {"status": "MET" if met else "MISSED", "figure": figure}


def table_rows(records: list[dict[str, Any]]) -> list[list[str]]:
    """One row per record in COLUMNS order; a wrong output is marked next to its time."""
    rows = []
    for rec in records:
        head = [rec["model"], str(rec["batch"])]
        if rec.get("status") != "ok":
            why = (rec.get("error") or rec.get("reason") or "").splitlines()
            rows.append(head + [f"{rec['status'].upper()}: {why[0][:80] if why else ''}"] + ["-"] * 6)
            continue
        t, chk = rec.get("times_s", {}), rec.get("correctness", {})
        cells = []
        for key in (*PIPELINK, *RIVALS):
            mark = "" if chk.get(key, {}).get("ok", True) else " (WRONG)"
            cells.append(fmt_time(t.get(key)) + mark if key in t else "-")
        verdict = rec.get("verdict", {})
        best = _best_pipelink(rec)
        rivals = [t[k] for k in RIVALS if k in t]
        ratio = f"{min(rivals) / best[1]:.2f}x" if best and rivals else "-"
        rows.append(head + cells + [ratio, verdict.get("status", "-")])
    return rows


def breakdown_lines(rec: dict[str, Any], top: int = TOP_STAGES) -> list[str]:
    """What the lead can act on for one record: staged stages, kernel variants, the slowest stages and
    the time per operator (from ``run(profile=True)``)."""
    if rec.get("status") != "ok":
        return []
    lines = [f"{rec['model']} batch {rec['batch']}:"]
    setup = [f"{what} {rec[key]:.1f} s" for key, what in _SETUP if key in rec]
    if "graph_mode" in rec:
        setup.append(
            f"CUDA graph {'captured' if rec['graph_mode'] else 'off'}, replayed {rec.get('graph_replay')}"
        )
    slow = rec.get("slow_columns", {})
    if slow:
        setup.append("timed in single calls (slow): " + ", ".join(f"{k} {v:.2f} s" for k, v in slow.items()))
    lines.append(f"  {'; '.join(setup)}")
    stages = rec.get("stages")
    if stages:
        how = (
            f"{stages['unfused']} without the import fusions"
            if stages["fused"]
            else "import fusions off: --no-fuse"
        )
        lines.append(f"  PipeLink stages: {stages['pipeline']} ({how})")
    staged = rec.get("staged", [])
    lines.append(f"  staged on host copies: {', '.join(staged) if staged else 'none'}")
    # Why the device variants were passed over, once per distinct reason.
    for why in dict.fromkeys(w for ws in rec.get("skipped_variants", {}).values() for w in ws):
        lines.append(f"    device variant skipped: {why}")
    kernels = rec.get("kernels", {})
    lines.append(
        "  variants: "
        + "; ".join(f"{op} " + ", ".join(f"{v} x{n}" for v, n in vs.items()) for op, vs in kernels.items())
    )
    prof = rec.get("profile")
    if not prof:
        lines.append(f"  profile: not measured ({rec.get('errors', {}).get('profile', 'no profile')})")
        return lines
    total = prof["total_s"]
    lines.append(f"  profile ({prof['basis']}), sum over stages {fmt_time(total)}; slowest stages:")
    for s in prof["stages"][:top]:
        share = 100.0 * s["time_s"] / total if total else 0.0
        mark = " [staged]" if s["stage"] in staged else ""
        where = f"{s['operator']}, {s['variant']}"
        lines.append(f"    {fmt_time(s['time_s']):>10} {share:5.1f}%  {s['stage']} ({where}){mark}")
    lines.append("  by operator:")
    for op in prof["by_operator"]:
        share = 100.0 * op["time_s"] / total if total else 0.0
        lines.append(f"    {fmt_time(op['time_s']):>10} {share:5.1f}%  {op['operator']} x{op['count']}")
    return lines


def markdown(meta: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """The race as Markdown: how it ran, the table, correctness, verdicts, breakdowns, unmeasured columns."""
    lines = [
        f"# PipeLink model race ({meta['device_name']})",
        "",
        f"- commit `{meta['commit']}`{' (dirty tree)' if meta.get('dirty') else ''}, {meta['date']}, "
        f"seed {meta['seed']}, {meta['elapsed_s']:.0f} s",
        f"- versions: {', '.join(f'{k} {v}' for k, v in meta.get('versions', {}).items())}",
    ]
    lines += [f"- {n}" for n in meta.get("notes", [])]
    seen: dict[str, dict[str, Any]] = {}
    for rec in records:
        if "source" in rec:
            seen.setdefault(rec["model"], rec)
    lines += ["", "Models:", ""]
    lines += [f"- `{m}`: {r['title']}; {r['source']}; reference {r['reference']}" for m, r in seen.items()]
    lines += [
        "",
        "Times are per call, medians over repeats (CUDA events closed after a device-wide join for PipeLink "
        "and PyTorch; the host clock for onnxruntime, whose inputs and outputs are host arrays). "
        "\"speed vs fastest\" is the fastest rival's time over the time of PipeLink's faster correct mode: "
        "1.00x or more meets the target.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(["---", "---:"] + ["---:"] * (len(COLUMNS) - 3) + ["---"]) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(records)]
    lines += [
        "",
        "## Correctness",
        "",
        "| model | batch | check | rel err | tolerance | ok |",
        "|---|---:|---|---:|---:|---|",
    ]
    for rec in records:
        for key, chk in rec.get("correctness", {}).items():
            lines.append(
                f"| {rec['model']} | {rec['batch']} | {key} vs {rec.get('reference', '?')} | "
                f"{chk['rel_err']:.2e} | {chk['tolerance']:.0e} | {'yes' if chk['ok'] else '**NO**'} |"
            )
    lines += ["", "## Targets", ""]
    lines += [
        f"- **{r['verdict']['status']}** {r['model']} batch {r['batch']}: {r['verdict']['figure']}"
        for r in records
        if "verdict" in r
    ]
    lines += ["", "## Where the time goes", ""]
    for rec in records:
        body = breakdown_lines(rec)
        if body:
            ops = ", ".join(f"{k} x{v}" for k, v in rec.get("onnx_ops", {}).items())
            lines += ["```", *body, f"  ONNX nodes: {ops}", "```", ""]
    errors = [(r["model"], r["batch"], k, v) for r in records for k, v in r.get("errors", {}).items()]
    if errors:
        lines += ["## Columns not measured", ""]
        lines += [f"- `{m}` batch {b} {key}: {msg.splitlines()[0][:240]}" for m, b, key, msg in errors]
    return "\n".join(lines) + "\n"


def write_model_results(out_dir: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> list[Path]:
    """Write ``models.json`` (everything) and ``models.md`` into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "models.json", out_dir / "models.md"
    js.write_text(json.dumps(jsonable({"meta": meta, "records": records}), indent=2) + "\n")
    md.write_text(markdown(meta, records))
    return [js, md]
