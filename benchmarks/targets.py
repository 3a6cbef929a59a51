"""The issue's performance targets, judged from the result records: one MET / MISSED / N/A line each.

Speed targets use PipeLink's faster mode (named in the line) as measured around ``run()`` (which
includes its per-run synchronisation); the kernel-only figure from ``run(profile=True)`` is shown too.
"""

from __future__ import annotations

from typing import Any

__all__ = ["evaluate_targets"]


def _line(name: str, met: bool | None, figure: str) -> dict[str, Any]:
    return {
        "target": name,
        "status": "N/A" if met is None else ("MET" if met else "MISSED"),
        "figure": figure,
    }


def _ok(results: list[dict[str, Any]], role: str, *, timed: bool = False) -> list[dict[str, Any]]:
    """Cases judged by ``role`` that ran (and, with ``timed``, have a PipeLink time)."""
    return [
        r
        for r in results
        if role in r.get("roles", ()) and r.get("status") == "ok" and (not timed or r.get("pipelink_best"))
    ]


def _tbs(bps: float) -> str:
    return f"{bps / 1e12:.2f} TB/s"


def _bw_figure(r: dict[str, Any], bw: float) -> tuple[float, str]:
    best = r["pipelink_best"]
    t = best["time_s"]
    pct = 100.0 * r["bytes"] / t / bw
    text = f"{_tbs(r['bytes'] / t)} = {pct:.0f}% of copy bw ({best['mode']})"
    k = r["times_s"].get("pipelink_kernels")
    if k:
        text += f"; kernel alone {100.0 * r['bytes'] / k / bw:.0f}%"
    return pct, text


def _speed_vs_torch(results: list[dict[str, Any]], role: str, ratio: float, torch_name: str) -> list:
    """One line per case of ``role``: PipeLink's best mode at least ``ratio`` x PyTorch eager's speed."""
    lines = []
    for r in _ok(results, role, timed=True):
        t = r["times_s"]
        name = f"{r['case']} >= {ratio:.2f}x {torch_name}"
        if "torch_eager" not in t:
            lines.append(_line(name, None, f"{torch_name} not measured"))
            continue
        speed = t["torch_eager"] / r["pipelink_best"]["time_s"]
        text = f"{speed:.3f}x {torch_name} ({r['pipelink_best']['mode']})"
        if t.get("pipelink_kernels"):
            text += f"; kernel alone {t['torch_eager'] / t['pipelink_kernels']:.3f}x"
        lines.append(_line(name, speed >= ratio, text))
    return lines


def evaluate_targets(results: list[dict[str, Any]], ceilings: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of issue #5 with its figure; N/A where the case did not run (or torch was missing)."""
    bw = ceilings.get("copy_bandwidth_Bps") or 0.0
    lines: list[dict[str, Any]] = []

    if not bw:  # without the ceiling the bandwidth targets cannot be judged
        lines += [
            _line(f"{r['case']} bandwidth targets", None, "copy bandwidth not measured")
            for r in _ok(results, "ln_bw", timed=True) + _ok(results, "elementwise_bw", timed=True)
        ]
    for r in _ok(results, "ln_bw", timed=True) if bw else []:
        pct, text = _bw_figure(r, bw)
        speed = r["times_s"].get("torch_eager", 0.0) / r["pipelink_best"]["time_s"]
        has_torch = "torch_eager" in r["times_s"]
        text += f"; {speed:.2f}x PyTorch eager" if has_torch else "; PyTorch not measured"
        lines.append(
            _line(
                f"{r['case']} >= 90% copy bw and >= 1.3x PyTorch eager",
                (pct >= 90.0 and speed >= 1.3) if has_torch else None,
                text,
            )
        )
    for r in _ok(results, "elementwise_bw", timed=True) if bw else []:
        pct, text = _bw_figure(r, bw)
        lines.append(_line(f"{r['case']} >= 90% copy bw", pct >= 90.0, text))
    lines += _speed_vs_torch(results, "gemm", 0.97, "torch.mm")
    # Convolutions and attention: cuDNN on both sides (F.conv2d, F.conv_transpose2d, F.sdpa).
    lines += _speed_vs_torch(results, "cudnn", 0.95, "PyTorch")
    for r in _ok(results, "mlp_large", timed=True):
        t = r["times_s"]
        best = r["pipelink_best"]
        if "torch_eager" not in t:
            lines.append(
                _line(
                    f"{r['case']} faster than PyTorch eager, not slower than torch.compile",
                    None,
                    "PyTorch not measured",
                )
            )
            continue
        s_eager = t["torch_eager"] / best["time_s"]
        s_comp = t["torch_compile"] / best["time_s"] if "torch_compile" in t else None
        text = (
            f"{s_eager:.2f}x PyTorch eager, "
            + (f"{s_comp:.2f}x torch.compile" if s_comp is not None else "torch.compile not measured")
            + f" ({best['mode']})"
        )
        met = s_eager > 1.0 and (s_comp is None or s_comp >= 1.0)
        lines.append(
            _line(
                f"{r['case']} faster than PyTorch eager, not slower than torch.compile",
                met if s_comp is not None else (None if met else False),
                text,
            )
        )
    for r in _ok(results, "mlp_small"):
        t = r["times_s"]
        if "torch_eager" not in t or "pipelink_graph" not in t:
            lines.append(_line(f"{r['case']} graph >= 3.5x PyTorch eager", None, "not measured"))
            continue
        speed = t["torch_eager"] / t["pipelink_graph"]
        lines.append(
            _line(
                f"{r['case']} graph >= 3.5x PyTorch eager",
                speed >= 3.5,
                f"{speed:.2f}x ({t['pipelink_graph'] * 1e6:.1f} us vs {t['torch_eager'] * 1e6:.1f} us"
                f"; graph_mode={r.get('graph_mode')})",
            )
        )
    for r in results:
        if r.get("status") != "ok" or not r.get("large") or r.get("group") in ("native", "chain"):
            continue
        over = r.get("comparisons", {}).get("graph_overhead_pct")
        t = r["times_s"]
        figure = (
            f"graph run {t['pipelink_graph'] * 1e6:.1f} us vs kernels {t['pipelink_kernels'] * 1e6:.1f} us "
            f"= +{over:.1f}%"
            if over is not None
            else "not measured (CUDA only)"
        )
        lines.append(
            _line(
                f"{r['case']} graph run within 3% of summed kernel time",
                None if over is None else over <= 3.0,
                figure,
            )
        )
    for r in _ok(results, "chain"):
        c, n = r.get("comparisons", {}), r.get("stages", 20)
        slope, avg = c.get("pipelink_eager_us_per_stage_slope"), c.get("pipelink_eager_us_per_stage_avg")
        added, floor = c.get("pipelink_eager_us_per_stage_added"), c.get("launch_floor_us")
        text = "not measured"
        if slope is not None:
            text = f"{slope:.2f} us/stage (slope 1->{n} stages); run/{n} = {avg:.2f} us"
        if added is not None:
            text = (
                f"adds {added:.2f} us/stage over the kernel launch itself ({floor:.2f} us, measured in "
                f"this run); {text}"
            )
        lines.append(
            _line(
                f"{r['case']} eager adds <= 5 us host time per stage",
                None if slope is None else (added if added is not None else slope) <= 5.0,
                text,
            )
        )
        run = c.get("pipelink_graph_run_us")
        limit = 10.0 + n
        lines.append(
            _line(
                f"{r['case']} graph <= 10 us + 1 us/stage ({limit:.0f} us)",
                None if run is None or not r.get("graph_mode") else run <= limit,
                f"{run:.1f} us per run (graph_mode={r.get('graph_mode')})"
                if run is not None
                else "not measured",
            )
        )
    for r in _ok(results, "mlp_large") + _ok(results, "mlp_small"):
        m = r.get("memory", {})
        pl_peak, th = m.get("pipelink_eager_peak_delta_bytes"), m.get("torch_eager_peak_delta_bytes")
        met = None if pl_peak is None or th is None else pl_peak <= th
        lines.append(
            _line(
                f"{r['case']} peak memory <= PyTorch eager's",
                met,
                f"PipeLink {_mb(pl_peak)} (plan arena {_mb(m.get('pipelink_plan_peak_bytes'))}) vs "
                f"PyTorch {_mb(th)}",
            )
        )
    native = [r for r in _ok(results, "native") if r.get("large")]
    for r in native:
        c = r.get("comparisons", {})
        for mode in ("eager", "graph"):
            over = c.get(f"{mode}_overhead_vs_direct_sync_pct")
            raw = c.get(f"{mode}_overhead_vs_direct_pct")
            lines.append(
                _line(
                    f"{r['case']} {mode} pipeline < 3% over the direct call (seed)",
                    None if over is None else over < 3.0,
                    f"+{over:.1f}% vs direct+sync, +{raw:.1f}% vs direct async"
                    if over is not None
                    else "not measured",
                )
            )
    return lines


def _mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"
