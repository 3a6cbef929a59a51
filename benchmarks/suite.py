"""The benchmark suite's driver: arguments, ceilings, the case loop (each case isolated), targets, files.

PYTHONPATH=src python -m benchmarks [--quick] [--cases a,b] [--out DIR] [--device cuda|cpu] [--tiny]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fnmatch
import importlib.metadata
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cases import op_cases
from .chain import run_chain
from .env import Env
from .native import native_sizes, run_native
from .report import COLUMNS, fmt_time, table_rows, text_table, write_results
from .runner import run_op_case, short_error
from .targets import evaluate_targets
from .timing import load_torch, measure_ceilings

__all__ = ["main", "parse_args", "plan_cases"]

ROOT = Path(__file__).resolve().parent.parent
TIME_LIMIT = {
    "default": 420.0,
    "quick": 55.0,
    "tiny": 0.0,
}  # soft: later cases are skipped, files still written


@dataclass
class Entry:
    """A case (or a group measured together, like the native sizes) and how to run it."""

    names: list[str]
    group: str
    run: Callable[[Env], list[dict[str, Any]]]
    order: int  # execution order; the table keeps the listing order


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks", description="PipeLink vs PyTorch vs the roofline."
    )
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="output folder")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer iterations (< 60 s)")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (the CPU smoke run)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--cases", default="", help="comma-separated case names, groups or globs (default: all)")
    p.add_argument("--commit", default=None, help="commit to record when git is not available")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (always off in --quick)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="soft limit in seconds: later cases are skipped (default 420, quick 55, tiny none)",
    )
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    return p.parse_args(argv)


def plan_cases(size: str) -> list[Entry]:
    """Every case at ``size``; the MLP cases run first so their peak-memory deltas are not hidden."""
    entries = []
    cases = op_cases(size)
    # Smallest memory case first: PipeLink's peak only rises, so a larger earlier peak would hide a delta.
    first = sorted((c for c in cases if c.memory), key=lambda c: c.set_bytes)
    for i, case in enumerate(cases):
        order = first.index(case) if case.memory else 1000 + i
        entries.append(Entry([case.name], case.group, lambda env, c=case: [run_op_case(env, c)], order))
    length = 64 if size == "tiny" else 4096
    entries.append(
        Entry([f"chain_20x{length}_fp32"], "chain", lambda env: [run_chain(env, 20, length)], 2000)
    )
    entries.append(
        Entry([f"native_layer_norm_{r}x{c}_fp32" for r, c in native_sizes(size)], "native", run_native, 2001)
    )
    return entries


def select(entries: list[Entry], spec: str) -> list[Entry]:
    """Entries matching any token (a case name, a group, or a glob over names). Raises on unknown tokens."""
    tokens = [t.strip() for t in spec.split(",") if t.strip()]
    if not tokens:
        return entries
    chosen, unknown = [], []
    for token in tokens:
        hits = [e for e in entries if token == e.group or any(fnmatch.fnmatchcase(n, token) for n in e.names)]
        if not hits:
            unknown.append(token)
        chosen += [e for e in hits if e not in chosen]
    if unknown:
        groups = sorted({e.group for e in entries})
        raise SystemExit(
            f"error: unknown case {unknown[0]!r}; groups: {', '.join(groups)} "
            f"(or a case name / glob, see --list)"
        )
    return [e for e in entries if e in chosen]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _versions(torch: Any) -> dict[str, str]:
    import numpy

    import pipelink

    out = {"python": platform.python_version(), "numpy": numpy.__version__, "pipelink": pipelink.__version__}
    for dist in (
        "torch",
        "triton",
        "cupy-cuda12x",
        "cupy-cuda13x",
        "cuda-core",
        "cuda-bindings",
        "nvmath-python",
        "matplotlib",
    ):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[dist] = importlib.metadata.version(dist)
    return out


def _device_name(env: Env) -> str:
    if env.is_cuda:
        return str(env.torch.cuda.get_device_name(0))
    return f"CPU {platform.processor() or platform.machine()}"


def _make_env(args: argparse.Namespace) -> Env:
    torch, why = load_torch()
    device = args.device
    if device == "auto":
        device = "cuda" if torch is not None and torch.cuda.is_available() else "cpu"
    if device == "cuda" and (torch is None or not torch.cuda.is_available()):
        raise SystemExit(
            f"error: --device cuda needs torch with CUDA for inputs and timing "
            f"({why or 'torch.cuda.is_available() is False'})"
        )
    size = "tiny" if args.tiny or device == "cpu" else ("quick" if args.quick else "default")
    note = why if torch is None else ("CPU run: PipeLink timed alone" if device == "cpu" else None)
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % (2**31)
    env = Env(
        device=device,
        size=size,
        torch=torch if device == "cuda" else None,
        torch_note=note,
        compile=device == "cuda" and not args.no_compile and size == "default",
        seed=seed,
    )
    if env.compile:
        try:
            import torch._dynamo

            dyn = torch._dynamo.config
            for knob in ("recompile_limit", "cache_size_limit"):  # one compiled function per case and shape
                if hasattr(dyn, knob):
                    setattr(dyn, knob, 64)
        except Exception as e:  # noqa: BLE001 - only raises a limit
            print(f"note: could not raise torch._dynamo's recompile limit ({e})", flush=True)
    return env


def _summary(res: dict[str, Any]) -> str:
    if res.get("status") != "ok":
        why = (res.get("error") or res.get("reason") or "").strip()
        return f"{res.get('status', '?').upper()}: {why.splitlines()[0][:160] if why else ''}"
    t = res.get("times_s", {})
    parts = [f"{k}={fmt_time(v)}" for k, v in t.items()]
    errs = [f"{c}:{v['rel_err']:.1e}{'' if v['ok'] else '!'}" for c, v in res.get("correctness", {}).items()]
    return " ".join(parts) + (f" | err {' '.join(errs)}" if errs else "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; returns the exit status (0 when every case ran, 1 when any errored)."""
    args = parse_args(argv)
    env = _make_env(args)
    entries = plan_cases(env.size)
    if args.list:
        for e in entries:
            print(f"{e.group:16s} {', '.join(e.names)}")
        return 0
    chosen = select(entries, args.cases)
    limit = args.time_limit if args.time_limit is not None else TIME_LIMIT[env.size]
    env.log(
        f"PipeLink benchmarks: device {env.device}, {env.size} sizes, seed {env.seed}, "
        f"{sum(len(e.names) for e in chosen)} cases, torch.compile {'on' if env.compile else 'off'}"
    )
    if env.torch_note:
        env.log(f"note: {env.torch_note}")
    meta: dict[str, Any] = {
        "device": env.device,
        "size": env.size,
        "seed": env.seed,
        "argv": list(argv or sys.argv[1:]),
        "commit": _git("rev-parse", "HEAD") or args.commit or "unknown",
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": _versions(env.torch),
        "notes": [],
        "torch_compile": env.compile,
    }
    if env.torch_note:
        meta["notes"].append(env.torch_note)
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        meta["device_name"] = _device_name(env)
        env.log(f"device: {meta['device_name']}; measuring the ceilings")
        try:
            env.ceilings = measure_ceilings(env)
            env.log(
                f"  copy {env.ceilings['copy_bandwidth_Bps'] / 1e12:.2f} TB/s, "
                f"mm {env.ceilings['mm_flops_per_s'] / 1e12:.1f} TFLOP/s"
            )
        except Exception as e:  # noqa: BLE001 - without ceilings there is no roofline, but timings still count
            meta["notes"].append(f"ceilings not measured: {short_error(e)}")
            env.log(f"  ceilings failed: {short_error(e)}")
        meta["ceilings"] = env.ceilings
        for entry in sorted(chosen, key=lambda e: e.order):
            results[entry.group + "/" + entry.names[0]] = _run_entry(env, entry, limit)
    except KeyboardInterrupt:
        meta["notes"].append("interrupted: partial results")
    finally:
        ordered = [r for e in chosen for r in results.get(e.group + "/" + e.names[0], [])]
        meta["elapsed_s"] = time.perf_counter() - env.started
        meta.setdefault("device_name", env.device)
        meta.setdefault("ceilings", env.ceilings)
        try:
            targets = evaluate_targets(ordered, env.ceilings)
            if env.device != "cuda":  # the targets are H200 figures: a CPU run measures, it does not judge
                targets = [
                    {
                        **t,
                        "status": "N/A",
                        "figure": f"not judged on {env.device} (targets are for the H200); {t['figure']}",
                    }
                    for t in targets
                ]
        except Exception as e:  # noqa: BLE001 - the files must be written whatever happens
            meta["notes"].append(f"targets not evaluated: {short_error(e)}")
            targets = []
        written = write_results(args.out, meta, ordered, targets)
        _print_final(env, ordered, targets, written)
    return 1 if any(r.get("status") == "error" for r in ordered) else 0


def _run_entry(env: Env, entry: Entry, limit: float) -> list[dict[str, Any]]:
    elapsed = time.perf_counter() - env.started
    if limit and elapsed > limit:
        env.log(f"skip {', '.join(entry.names)}: over the {limit:.0f} s time limit")
        return [
            {
                "case": n,
                "group": entry.group,
                "status": "skipped",
                "reason": f"time limit of {limit:.0f} s reached",
            }
            for n in entry.names
        ]
    env.log(f"case {', '.join(entry.names)}")
    t0 = time.perf_counter()
    try:
        out = entry.run(env)
    except Exception as e:  # noqa: BLE001 - every case is isolated
        out = [
            {
                "case": n,
                "group": entry.group,
                "status": "error",
                "error": short_error(e),
                "traceback": traceback.format_exc(limit=12),
            }
            for n in entry.names
        ]
    finally:
        env.free()
    for res in out:
        res["wall_s"] = time.perf_counter() - t0
        env.log(f"  {res['case']}: {_summary(res)}")
    return out


def _print_final(env: Env, results: list[dict[str, Any]], targets: list[dict[str, Any]], written) -> None:
    print("", flush=True)
    print("\n".join(text_table(list(COLUMNS), table_rows(results))))
    print("", flush=True)
    for t in targets:
        print(f"{t['status']:6s} {t['target']}: {t['figure']}")
    print(
        f"\nwrote {', '.join(str(p) for p in written.values())} ({time.perf_counter() - env.started:.0f} s)",
        flush=True,
    )
