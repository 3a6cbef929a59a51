"""The model race (issue 14): GPT-2 block, ResNet-18, ESPCN and R3D-18 imported with ``pl.from_onnx`` and
timed side by side with onnxruntime, PyTorch eager and torch.compile, after a correctness check in the same
run.

python -m benchmarks.models [--out DIR] [--models a,b] [--batches 1,32] [--quick] [--no-compile] [--tiny]

On a host with torch and a GPU the models are exported from PyTorch (``benchmarks/model_zoo.py``) and
PyTorch in float32 with TF32 off is the reference. Elsewhere (or with ``--tiny``) their tiny ``onnx.helper``
twins run on the CPU against onnxruntime, and nothing is judged. Writes ``models.json`` and ``models.md``.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import pipelink as pl
from pipelink.runtime.trace import write_trace

from .env import Env
from .model_report import COLUMNS, breakdown_lines, judge, table_rows, write_model_results
from .model_zoo import MODELS, export_onnx, onnx_op_counts, tiny_model
from .report import text_table
from .runner import _timed, short_error
from .suite import ROOT, _device_name, _git, _make_env, _versions
from .timing import Budget, measure, tolerance

__all__ = ["main", "parse_args", "race"]

DTYPE = "float32"
INPUT_SETS = 2  # rotated per call; a model's weights, not its input, decide what stays in the L2
# A contestant whose warm call takes longer than this (a staged convolution at batch 32, onnxruntime on the
# CPU) is timed with SLOW_BUDGET: a few single calls instead of loops of ``repeat_s`` seconds.
SLOW_CALL_S = 0.25
SLOW_BUDGET = Budget(repeat_s=0.0, repeats=3, warmup=1, max_iters=1)
TIME_LIMIT = 480.0  # soft, seconds: later records are skipped, the files are still written


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.models",
        description="PipeLink (ONNX import) vs onnxruntime vs PyTorch on real models.",
    )
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="output folder")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--batches", default="1,32", help="comma-separated batch sizes (default 1,32)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--quick", action="store_true", help="fewer iterations, no torch.compile")
    p.add_argument("--tiny", action="store_true", help="the onnx.helper twins (the CPU smoke run)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--trace", action="store_true", help="also write trace_MODEL_bBATCH.json per record")
    p.add_argument(
        "--no-fuse", action="store_true", help="import every ONNX node as its own stage (no import fusions)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=TIME_LIMIT, help="soft limit in seconds (0: none)")
    args = p.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        p.error(f"unknown model {unknown[0]!r}; the models are {', '.join(MODELS)}")
    try:
        args.batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        p.error(f"--batches must be comma-separated integers (got {args.batches!r})")
    if any(b < 1 for b in args.batches):
        p.error(f"--batches must be positive (got {args.batches})")
    return args


@dataclass
class Contestant:
    """One model at one batch, ready to race: the ONNX model, inputs, the reference and PyTorch's callable."""

    model: Any  # onnx.ModelProto
    sets: list[dict[str, Any]]  # PipeLink's and PyTorch's inputs (CUDA tensors, or NumPy on the CPU)
    host_sets: list[dict[str, np.ndarray]]  # onnxruntime's inputs
    reference: Any  # the expected output for sets[0]
    reference_name: str
    torch_fn: Callable[..., Any] | None  # None for the onnx.helper twins
    source: str


def _from_pytorch(env: Env, name: str, batch: int) -> Contestant:
    torch = env.torch
    torch.manual_seed(env.seed)
    spec = MODELS[name]
    module = spec.build(torch).eval()
    xs = [torch.randn(spec.input_shape(batch)) for _ in range(INPUT_SETS)]
    import onnx

    model = onnx.load_from_string(export_onnx(module, xs[0]))
    module = module.to("cuda")
    sets = [{"x": x.to("cuda")} for x in xs]
    return Contestant(
        model=model,
        sets=sets,
        host_sets=[{"x": x.numpy()} for x in xs],
        reference=module(sets[0]["x"]).float(),
        reference_name="PyTorch float32 (TF32 off)",
        torch_fn=module,
        source="exported from PyTorch (torch.onnx.export, opset 18, fixed shapes)",
    )


def _from_onnx_helper(env: Env, name: str, batch: int) -> Contestant:
    from tests.backend.onnx_models import run_reference

    model, feeds = tiny_model(name, batch)
    ref = run_reference(model, feeds)[0]
    sets = [feeds]
    if env.is_cuda:
        sets = [{k: env.torch.from_numpy(v).to("cuda") for k, v in feeds.items()}]
        ref = env.torch.from_numpy(ref).to("cuda")
    try:  # run_reference's own choice: onnxruntime when installed, else ONNX's ReferenceEvaluator
        import onnxruntime  # noqa: F401

        ref_name = "onnxruntime (CPU)"
    except ImportError:
        ref_name = "onnx ReferenceEvaluator"
    return Contestant(model, sets, [feeds], ref, ref_name, None, "onnx.helper twin (tiny)")


def _check(env: Env, rec: dict[str, Any], key: str, out: Any) -> None:
    """Record ``out``'s error against the reference; a shape that differs is wrong (never broadcast)."""
    env.synchronize()
    ref = rec["_reference"]
    tol = tolerance(DTYPE)
    if tuple(out.shape) != tuple(ref.shape):
        rec["correctness"][key] = {"rel_err": math.inf, "tolerance": tol, "ok": False}
        rec["errors"][f"{key}_shape"] = f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
        return
    err = env.rel_err(out, ref)
    rec["correctness"][key] = {"rel_err": err, "tolerance": tol, "ok": err <= tol}


def _calls(fn: Callable[[dict[str, Any]], Any], sets: list[dict[str, Any]]) -> list[Callable[[], Any]]:
    return [lambda s=s: fn(s) for s in sets]


def _budget(env: Env, rec: dict[str, Any], key: str, warm_call: Callable[[], Any]) -> Budget:
    """The timing budget for column ``key``, from one warm call (which it makes): the run's budget, or
    SLOW_BUDGET when that call took longer than SLOW_CALL_S (recorded under ``slow_columns``)."""
    t0 = time.perf_counter()
    warm_call()
    env.synchronize()
    took = time.perf_counter() - t0
    if took <= SLOW_CALL_S:
        return env.budget
    rec.setdefault("slow_columns", {})[key] = took
    return SLOW_BUDGET


def _kernels(config: dict[str, Any], report: Any) -> dict[str, dict[str, int]]:
    """How many stages of each operator run each variant (``{"conv2d": {"cuda": 20}}``)."""
    out: dict[str, dict[str, int]] = {}
    for stage in config["pipeline"]:
        variant = report.variants.get(stage["id"], "?")
        per_op = out.setdefault(stage["name"], {})
        per_op[variant] = per_op.get(variant, 0) + 1
    return out


def _profile(pipe: Any, sets: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """Median per-stage time over ``runs`` runs of ``run(profile=True)``: device time (CUDA events around
    each stage) where the backend records it, else the host clock."""
    times: dict[str, list[float]] = {}
    info: dict[str, tuple[str, str]] = {}
    device = True
    for i in range(runs):
        pipe.run(**sets[i % len(sets)], profile=True)
        for s in pipe.last_report.stages.values():
            device = device and s.device_time_s is not None
            times.setdefault(s.stage, []).append(s.device_time_s if s.device_time_s is not None else s.time_s)
            info[s.stage] = (s.operator, s.variant)
    stages = sorted(
        (
            {"stage": k, "operator": info[k][0], "variant": info[k][1], "time_s": statistics.median(v)}
            for k, v in times.items()
        ),
        key=lambda s: -s["time_s"],
    )
    by_op: dict[str, dict[str, Any]] = {}
    for s in stages:
        op = by_op.setdefault(s["operator"], {"operator": s["operator"], "count": 0, "time_s": 0.0})
        op["count"] += 1
        op["time_s"] += s["time_s"]
    return {
        "basis": "device time per stage (CUDA events)" if device else "host clock per stage",
        "total_s": sum(s["time_s"] for s in stages),
        "stages": stages,
        "by_operator": sorted(by_op.values(), key=lambda o: -o["time_s"]),
    }


def _race_pipelink(
    env: Env, rec: dict[str, Any], c: Contestant, trace_dir: Path | None, fuse: bool = True
) -> None:
    t0 = time.perf_counter()
    config, weights = pl.onnx.import_model(c.model, fuse=fuse)
    rec["import_s"] = time.perf_counter() - t0
    # The stages PipeLink runs, with and without the import fusions (pipelink.onnx.fuse).
    unfused = len(pl.onnx.import_model(c.model, fuse=False)[0]["pipeline"]) if fuse else None
    rec["stages"] = {"pipeline": len(config["pipeline"]), "fused": fuse, "unfused": unfused}
    pipes = {}
    try:
        t0 = time.perf_counter()
        pipes["pipelink_eager"] = eager = pl.load(
            config, device=env.pl_device, weights=weights, cuda_graph=False
        )
        rec["load_s"] = time.perf_counter() - t0
        if eager.inputs != list(c.sets[0]):
            raise RuntimeError(
                f"the imported pipeline's inputs {eager.inputs} are not the model's {list(c.sets[0])}"
            )
        out_name = eager.outputs[0]
        _check(env, rec, "pipelink_eager", env.from_pl(eager.run(**c.sets[0])[out_name]))
        # Variants are chosen when the first run plans the input signature.
        report = eager.load_report
        rec["staged"] = list(report.staged)
        rec["kernels"] = _kernels(config, report)
        rec["skipped_variants"] = {
            sid: report.skipped_variants[sid] for sid in report.staged if sid in report.skipped_variants
        }
        if env.is_cuda:
            try:
                graph = pl.load(
                    config, device=env.pl_device, weights=weights, cuda_graph=True, static_outputs=True
                )
                pipes["pipelink_graph"] = graph
                rec["graph_mode"] = graph.cuda_graph
                for _ in range(2):  # the first run is eager and captures; the second replays
                    out = graph.run(**c.sets[0])[out_name]
                rec["graph_replay"] = bool(graph.last_report and graph.last_report.graph_replay)
                _check(env, rec, "pipelink_graph", env.from_pl(out))
            except Exception as e:  # noqa: BLE001 - graph mode failing must not lose the eager numbers
                rec["errors"]["pipelink_graph"] = short_error(e)
        for key, pipe in pipes.items():
            calls = _calls(lambda s, p=pipe: p.run(**s), c.sets)
            budget = _budget(env, rec, key, calls[-1])
            _timed(rec, key, lambda b=budget, k=calls: measure(k, b, torch=env.torch, use_events=env.is_cuda))
        try:
            rec["profile"] = _profile(
                eager, c.sets, 1 if "pipelink_eager" in rec.get("slow_columns", {}) else 3
            )
            if trace_dir is not None:  # the last profiled run, for chrome://tracing or ui.perfetto.dev
                trace_dir.mkdir(parents=True, exist_ok=True)
                path = trace_dir / f"trace_{rec['model']}_b{rec['batch']}.json"
                write_trace(path, eager, eager.last_report)
                rec["trace"] = str(path)
        except Exception as e:  # noqa: BLE001
            rec["errors"]["profile"] = short_error(e)
    finally:
        for pipe in pipes.values():
            pipe.close()


def _race_onnxruntime(env: Env, rec: dict[str, Any], c: Contestant) -> None:
    try:
        import onnxruntime as ort
    except ImportError as e:
        rec["errors"]["onnxruntime"] = f"skipped: onnxruntime is not installed ({e})"
        return
    available = ort.get_available_providers()
    provider = (
        "CUDAExecutionProvider"
        if env.is_cuda and "CUDAExecutionProvider" in available
        else "CPUExecutionProvider"
    )
    rec["onnxruntime"] = {"available_providers": available, "provider": provider}
    session = ort.InferenceSession(c.model.SerializeToString(), providers=[provider])
    if c.torch_fn is not None:  # the onnx.helper twins' reference is onnxruntime itself
        out = session.run(None, c.host_sets[0])[0]
        _check(env, rec, "onnxruntime", env.torch.from_numpy(out).to("cuda") if env.is_cuda else out)
    calls = _calls(lambda s: session.run(None, s), c.host_sets)
    budget = _budget(env, rec, "onnxruntime", calls[-1])
    _timed(rec, "onnxruntime", lambda: measure(calls, budget))


def _race_torch(env: Env, rec: dict[str, Any], c: Contestant) -> None:
    if c.torch_fn is None or not env.has_torch:
        why = env.torch_note or "the onnx.helper twins have no PyTorch module"
        rec["errors"]["torch_eager"] = rec["errors"]["torch_compile"] = f"skipped: {why}"
        return
    torch, fn = env.torch, c.torch_fn
    _timed(
        rec,
        "torch_eager",
        lambda: measure(_calls(lambda s: fn(*s.values()), c.sets), env.budget, torch=torch, use_events=True),
    )
    if not env.compile:
        rec["errors"]["torch_compile"] = "skipped (--quick or --no-compile)"
        return
    try:
        compiled = torch.compile(fn, dynamic=False)
        t0 = time.perf_counter()
        out = compiled(*c.sets[0].values())
        torch.cuda.synchronize()
        rec["torch_compile_s"] = time.perf_counter() - t0
        _check(env, rec, "torch_compile", out)
    except Exception as e:  # noqa: BLE001
        rec["errors"]["torch_compile"] = short_error(e)
        return
    _timed(
        rec,
        "torch_compile",
        lambda: measure(
            _calls(lambda s: compiled(*s.values()), c.sets), env.budget, torch=torch, use_events=True
        ),
    )


def race(
    env: Env, name: str, batch: int, *, trace_dir: Path | None = None, fuse: bool = True
) -> dict[str, Any]:
    """Check, then time, model ``name`` at ``batch``; returns its result record (``model_report.py``).
    With ``trace_dir``, PipeLink's last profiled run is also written there as a Chrome trace; ``fuse``
    is ``import_model``'s (False: one stage per ONNX node)."""
    spec = MODELS[name]
    rec: dict[str, Any] = {
        "model": name,
        "batch": batch,
        "dtype": DTYPE,
        "status": "ok",
        "times_s": {},
        "host_s": {},
        "timings": {},
        "correctness": {},
        "errors": {},
    }
    use_torch = env.has_torch and not env.tiny
    c = _from_pytorch(env, name, batch) if use_torch else _from_onnx_helper(env, name, batch)
    rec.update(
        title=spec.title if use_torch else f"the tiny onnx.helper twin of the {spec.title}",
        source=c.source,
        reference=c.reference_name,
        input_shape=[int(d) for d in next(iter(c.host_sets[0].values())).shape],
        onnx_ops=onnx_op_counts(c.model),
        _reference=c.reference,
    )
    try:
        # Each side is isolated: PipeLink failing to import or run the model still leaves the rivals' times.
        for side, run_side in (
            ("pipelink", lambda e, r, c: _race_pipelink(e, r, c, trace_dir, fuse)),
            ("onnxruntime", _race_onnxruntime),
            ("torch", _race_torch),
        ):
            try:
                run_side(env, rec, c)
            except Exception as e:  # noqa: BLE001
                rec["errors"][side] = short_error(e)
                rec.setdefault("tracebacks", {})[side] = traceback.format_exc(limit=8)
    finally:
        del rec["_reference"]
    rec["verdict"] = judge(rec, judged=env.is_cuda and use_torch)
    return rec


def _setup_torch(env: Env, notes: list[str]) -> None:
    """Strict float32 on the PyTorch side (PipeLink's float32 products do not use TF32), no autograd."""
    torch = env.torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.set_grad_enabled(False)
    notes.append(
        "dtype float32 everywhere: the exported models are float32, onnxruntime's CPU kernels are "
        "float32, and PipeLink's float32 products do not use TF32, so PyTorch runs with TF32 off "
        "(matmul and cuDNN)"
    )


def _print(records: list[dict[str, Any]]) -> None:
    print("", flush=True)
    print("\n".join(text_table(list(COLUMNS), table_rows(records))))
    print("")
    for rec in records:
        if "verdict" in rec:
            verdict = rec["verdict"]
            print(f"{verdict['status']:6s} {rec['model']} batch {rec['batch']}: {verdict['figure']}")
    print("")
    for rec in records:
        for line in breakdown_lines(rec):
            print(line)
    counts = {status: 0 for status in ("MET", "MISSED", "N/A")}
    for rec in records:
        counts[rec.get("verdict", {}).get("status", "N/A")] += 1
    wrong = [f"{r['model']}/{r['batch']}" for r in records if not _pipelink_ok(r)]
    print(
        f"\nSUMMARY model race: {counts['MET']} MET, {counts['MISSED']} MISSED, {counts['N/A']} N/A of "
        f"{len(records)}; PipeLink wrong or failed: {', '.join(wrong) or 'none'}",
        flush=True,
    )


def _pipelink_ok(rec: dict[str, Any]) -> bool:
    """Whether the record ran and PipeLink imported, ran and matched the reference in every mode it ran."""
    if rec.get("status") == "skipped":
        return True
    checks = [ok["ok"] for key, ok in rec.get("correctness", {}).items() if key.startswith("pipelink")]
    return rec.get("status") == "ok" and "pipelink" not in rec.get("errors", {}) and all(checks)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the race; returns 0 when every record ran with a correct PipeLink output, else 1."""
    args = parse_args(argv)
    env = _make_env(args)
    notes: list[str] = []
    if env.has_torch and not args.tiny:
        _setup_torch(env, notes)
    else:
        notes.append(f"onnx.helper twins ({'--tiny' if args.tiny else 'no torch on this host'}): not judged")
    env.log(
        f"model race: device {env.device}, models {args.models}, batches {args.batches}, "
        f"torch.compile {'on' if env.compile else 'off'}"
    )
    meta: dict[str, Any] = {
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "commit": _git("rev-parse", "HEAD") or "unknown",
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device_name": _device_name(env),
        "seed": env.seed,
        "versions": _versions(env.torch),
        "notes": notes,
    }
    records: list[dict[str, Any]] = []
    try:
        for batch in args.batches:
            for name in args.models.split(","):
                if args.time_limit and time.perf_counter() - env.started > args.time_limit:
                    records.append(
                        {
                            "model": name,
                            "batch": batch,
                            "status": "skipped",
                            "reason": f"time limit of {args.time_limit:.0f} s reached",
                        }
                    )
                    continue
                env.log(f"{name} batch {batch}")
                try:
                    rec = race(
                        env, name, batch, trace_dir=args.out if args.trace else None, fuse=not args.no_fuse
                    )
                except Exception as e:  # noqa: BLE001 - every record is isolated
                    rec = {
                        "model": name,
                        "batch": batch,
                        "status": "error",
                        "error": short_error(e),
                        "traceback": traceback.format_exc(limit=12),
                    }
                finally:
                    env.free()
                records.append(rec)
                summary = rec.get("verdict", {}).get("figure") or rec.get("error")
                env.log(f"  {name} batch {batch}: {summary}")
                # Written after every record: a run killed by an outer timeout keeps what it measured.
                meta["elapsed_s"] = time.perf_counter() - env.started
                write_model_results(args.out, meta, records)
    except KeyboardInterrupt:
        notes.append("interrupted: partial results")
    finally:
        providers = {p for r in records for p in r.get("onnxruntime", {}).get("available_providers", [])}
        if providers and "CUDAExecutionProvider" not in providers:
            notes.append(
                f"onnxruntime has only {sorted(providers)} on this host (no CUDA execution provider; "
                "its GPU wheel is too large to carry): the onnxruntime column is its CPU execution provider, "
                f"on {os.cpu_count()} host cores"
            )
        meta["elapsed_s"] = time.perf_counter() - env.started
        written = write_model_results(args.out, meta, records)
        _print(records)
        print(f"\nwrote {', '.join(str(p) for p in written)} ({meta['elapsed_s']:.0f} s)", flush=True)
    return 0 if all(_pipelink_ok(r) for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
