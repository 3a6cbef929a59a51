"""The ``pipelink`` command (DESIGN.md section 7).

Every failure prints ``error[PIPELINK_ERR_...]: message`` and exits 1 (runtime) or 2 (invalid config or
usage); no traceback ever reaches the user (``PIPELINK_DEBUG=1`` shows it).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from .errors import ConfigError, ErrorCode, PipeLinkError

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="PipeLink: link GPU operators into checked pipelines from JSON.",
)
console = Console()
err_console = Console(stderr=True)


class UsageFailure(Exception):
    """A PipeLinkError raised while loading or validating (exit code 2)."""

    def __init__(self, error: PipeLinkError):
        self.error = error


def _load(config: Path, device: str, graph: bool = False, checked: bool | None = None):
    import pipelink as pl

    try:
        return pl.load(config, device=device, cuda_graph=graph, checked=checked)
    except PipeLinkError as e:
        raise UsageFailure(e) from e


@app.command()
def validate(
    config: Annotated[Path, typer.Argument(help="pipeline JSON")],
    device: Annotated[str, typer.Option(help="device whose features to assume")] = "cpu",
    skip_libraries: Annotated[
        bool, typer.Option("--skip-libraries", help="check the config without opening its native modules")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print problems as JSON")] = False,
) -> None:
    """Check a config: schema, names, versions, hardware, declared shapes. Lists every problem."""
    import pipelink as pl

    problems = pl.validate(config, device=device, libraries=not skip_libraries)
    if as_json:
        console.print_json(json.dumps([p.to_dict() for p in problems]))
    elif not problems:
        console.print(f"[green]ok[/green]: {config} is valid")
    for p in problems if not as_json else ():
        err_console.print(
            f"error[{p.code.name}]: {p.path or '/'}: {p.message}", markup=False, highlight=False
        )
    if problems:
        raise typer.Exit(2)


def _parse_kv(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageFailure(PipeLinkError(f"--{what} takes NAME=VALUE (got {item!r})"))
        out[name] = value
    return out


def _random_inputs(pipe, shapes: dict[str, str], dtypes: dict[str, str], seed: int) -> dict[str, np.ndarray]:
    from .dtypes import get_dtype

    rng = np.random.default_rng(seed)
    decls = pipe.graph.config.inputs or {}
    out = {}
    for name in pipe.inputs:
        decl = decls.get(name)
        if name in shapes:
            shape = tuple(int(d) for d in shapes[name].lower().replace(",", "x").split("x") if d)
        elif decl is not None and decl.shape is not None and all(isinstance(d, int) for d in decl.shape):
            shape = tuple(decl.shape)
        else:
            raise UsageFailure(
                PipeLinkError(
                    f"--random needs the shape of input {name!r}: declare it in the config's "
                    f"'inputs' or pass "
                    f"--shape {name}=DIMxDIM"
                )
            )
        dtype = get_dtype(dtypes.get(name) or (decl.dtype if decl and decl.dtype else "float32"))
        if dtype.is_floating:
            out[name] = rng.standard_normal(shape).astype(dtype.numpy)
        else:
            out[name] = rng.integers(0, 8, size=shape).astype(dtype.numpy)
    return out


def _read_inputs(pipe, path: Path) -> dict[str, np.ndarray]:
    from .dtypes import get_dtype

    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UsageFailure(PipeLinkError(f"cannot read inputs {path}: {e}")) from e
    decls = pipe.graph.config.inputs or {}
    out = {}
    for name in data.files:
        arr = data[name]
        decl = decls.get(name)
        # npz cannot store bfloat16: cast to the declared dtype (documented CLI convenience).
        if decl is not None and decl.dtype and arr.dtype != get_dtype(decl.dtype).numpy:
            arr = arr.astype(get_dtype(decl.dtype).numpy)
        out[name] = arr
    return out


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="pipeline JSON")],
    inputs: Annotated[Path | None, typer.Option("--inputs", help="inputs as .npz")] = None,
    random: Annotated[bool, typer.Option("--random", help="random inputs of the declared shapes")] = False,
    shape: Annotated[list[str], typer.Option("--shape", help="NAME=DxD for --random")] = [],  # noqa: B006
    dtype: Annotated[list[str], typer.Option("--dtype", help="NAME=DTYPE for --random")] = [],  # noqa: B006
    value: Annotated[list[str], typer.Option("--value", help="NAME=NUMBER for a scalar input")] = [],  # noqa: B006
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write outputs to .npz")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
    graph: Annotated[bool, typer.Option("--graph", help="CUDA graph mode")] = False,
    repeat: Annotated[int, typer.Option(help="run N times (times are the last run's)")] = 1,
    profile: Annotated[bool, typer.Option("--profile", help="per-stage device times")] = False,
    trace: Annotated[Path | None, typer.Option("--trace", help="write a Chrome/Perfetto trace")] = None,
    error_log: Annotated[Path | None, typer.Option("--error-log", help="JSON-lines error log")] = None,
    checked: Annotated[
        bool, typer.Option("--checked", help="checked mode: catch stages that skip or overrun outputs (slow)")
    ] = False,
) -> None:
    """Run a pipeline on inputs from a file or random ones, print a summary, optionally save outputs."""
    import pipelink as pl

    if error_log is not None:
        pl.configure_error_log(error_log)
    pipe = _load(config, device, graph, checked=True if checked else None)  # None: PIPELINK_CHECKED
    scalars = _parse_kv(value, "value")
    if (inputs is None) and not random and scalars and set(scalars) >= set(pipe.inputs):
        feed = {}
    else:
        if (inputs is None) == (not random):
            raise UsageFailure(PipeLinkError("give exactly one of --inputs FILE.npz or --random"))
        kv_shapes = _parse_kv(shape, "shape")
        kv_shapes.update({n: "" for n in scalars})
        feed = (
            _read_inputs(pipe, inputs)
            if inputs
            else _random_inputs(pipe, kv_shapes, _parse_kv(dtype, "dtype"), seed)
        )
    for name, text in scalars.items():
        try:
            feed[name] = float(text)
        except ValueError:
            raise UsageFailure(PipeLinkError(f"--value {name}={text!r}: not a number")) from None
    for _ in range(max(1, repeat)):
        outs = pipe.run(feed, profile=profile or trace is not None)
    report = pipe.last_report
    _print_report(pipe, report, outs)
    if trace is not None:
        from .runtime.trace import write_trace

        write_trace(trace, pipe, report)
        console.print(f"trace written to {trace}")
    if output is not None:
        arrays = {}
        for name, t in outs.items():
            arr = t.numpy()
            arrays[name] = arr.astype(np.float32) if arr.dtype.name == "bfloat16" else arr
        np.savez(output, **arrays)
        console.print(f"outputs written to {output}")
    if not report.ok:
        raise typer.Exit(1)


def _print_report(pipe, report, outs) -> None:
    table = Table(title=f"{pipe.name} on {pipe.device}")
    for col in ("stage", "operator", "variant", "status", "host ms", "device ms"):
        table.add_column(col)
    for s in report.stages.values():
        colour = {"ok": "green", "degraded": "yellow", "skipped": "yellow"}.get(s.status, "red")
        table.add_row(
            s.stage,
            s.operator,
            s.variant,
            f"[{colour}]{s.status}[/{colour}]" + (f" ({s.action})" if s.action else ""),
            f"{s.time_s * 1e3:.3f}",
            f"{s.device_time_s * 1e3:.3f}" if s.device_time_s is not None else "-",
        )
    console.print(table)
    for s in report.degraded:
        if s.error is not None:
            err_console.print(
                f"warning[{s.error.code.name}]: {s.error.message}", markup=False, highlight=False
            )
    out_table = Table(title="outputs")
    for col in ("name", "shape", "dtype", "mean", "std", "min", "max"):
        out_table.add_column(col)
    for name, t in outs.items():
        arr = t.numpy().astype(np.float64)
        stats = [f"{f(arr):.5g}" if arr.size else "-" for f in (np.mean, np.std, np.min, np.max)]
        out_table.add_row(name, str(list(t.shape)), t.dtype.name, *stats)
    for name in report.missing_outputs:
        out_table.add_row(name, "-", "-", "[red]missing[/red]", "", "", "")
    console.print(out_table)
    plan = pipe.memory_plan
    if plan is not None:
        console.print(
            f"memory plan: {plan.peak_bytes} bytes arena (no reuse: {plan.naive_bytes}); "
            f"total {report.total_time_s * 1e3:.3f} ms"
        )


@app.command()
def ops(name: Annotated[str | None, typer.Argument(help="show one operator in full")] = None) -> None:
    """List the registered operators (or describe one as JSON)."""
    import pipelink as pl

    if name is not None:
        try:
            desc = pl.get_operator_info(name)
        except PipeLinkError as e:
            raise UsageFailure(e) from e
        console.print_json(json.dumps(desc.to_dict(), default=str))
        return
    pl.list_operators()
    from .modules.registry import registry

    table = Table(title="operators")
    for col in ("name", "version", "devices", "inputs", "outputs", "attrs"):
        table.add_column(col)
    for d in registry.all():
        table.add_row(
            d.name,
            str(d.version),
            ",".join(d.devices),
            ", ".join(p.name + ("?" if p.optional else "") for p in d.inputs),
            ", ".join(p.name for p in d.outputs),
            ", ".join(a.name for a in d.attrs),
        )
    console.print(table)


@app.command()
def schema() -> None:
    """Print the pipeline config's JSON Schema (point your editor's "$schema" at it)."""
    from .config import schema_text

    sys.stdout.write(schema_text() + "\n")


@app.command()
def graph(
    config: Annotated[Path, typer.Argument(help="pipeline JSON")],
    out: Annotated[Path | None, typer.Option("-o", "--output", help=".dot, .svg or .png")] = None,
    device: Annotated[str, typer.Option(help="device to link for")] = "cpu",
) -> None:
    """Draw the pipeline's DAG (DOT always; SVG/PNG when Graphviz's `dot` is installed)."""
    from .graph.render import render

    pipe = _load(config, device)
    dot = render(pipe)
    if out is None:
        sys.stdout.write(dot)
        return
    from .graph.render import write

    try:
        write(dot, out)
    except PipeLinkError as e:  # a usage problem: wrong suffix, Graphviz missing
        raise UsageFailure(e) from e
    console.print(f"graph written to {out}")


@app.command("include-dir")
def include_dir_cmd() -> None:
    """Print the folder holding pipelink.h (for -I when building a native module)."""
    from .modules.build import include_dir

    sys.stdout.write(f"{include_dir()}\n")


@app.command("cmake-dir")
def cmake_dir_cmd() -> None:
    """Print the folder holding PipeLinkConfig.cmake (for -DPipeLink_DIR=...)."""
    from .modules.build import cmake_dir

    sys.stdout.write(f"{cmake_dir()}\n")


@app.command("lib-dir")
def lib_dir_cmd() -> None:
    """Print the folder holding libpipelink_runtime.so (for -L and the rpath of C/C++ hosts)."""
    from .native import lib_dir

    sys.stdout.write(f"{lib_dir()}\n")


@app.command()
def compile(
    config: Annotated[Path, typer.Argument(help="pipeline JSON")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the plan file to write (.plk)")],
    device: Annotated[str, typer.Option(help="device of the plan (cpu)")] = "cpu",
    shape: Annotated[
        list[str] | None,
        typer.Option(help="an input's shape and dtype: NAME=AxB[:dtype] (NAME=:dtype for a 0-d input)"),
    ] = None,
) -> None:
    """Compile a config into a plan the native core runs (pipeLinkLoadPipeline)."""
    from .runtime.planfile import parse_shape

    shapes = dict(parse_shape(s) for s in shape or [])
    pipe = _load(config, device)
    with pipe:
        try:
            pipe.save(output, shapes=shapes)
        except ConfigError as e:
            raise UsageFailure(e) from e
    console.print(f"plan written to {output}")


@app.command()
def build(
    sources: Annotated[list[Path], typer.Argument(help=".c/.cpp/.cu sources and an optional *.desc.h")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the shared library to write")],
    define: Annotated[list[str], typer.Option("-D", help="NAME=VALUE compile-time macro")] = [],  # noqa: B006
    arch: Annotated[str | None, typer.Option(help="CUDA architecture, e.g. sm_90")] = None,
) -> None:
    """Compile a native operator module (C/C++ with the system compiler, .cu with nvcc)."""
    from .modules.build import build_module

    try:
        path = build_module(sources, output, defines=define, arch=arch)
    except PipeLinkError as e:
        raise UsageFailure(e) from e
    console.print(f"built {path}")


@app.command()
def inspect(
    library: Annotated[Path, typer.Argument(help="a native module (.so)")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Show a module's ABI version, operators, version symbols and sha256 (without running it)."""
    from .modules.inspect import format_inspect, inspect_library

    try:
        info = inspect_library(library)
    except PipeLinkError as e:
        raise UsageFailure(e) from e
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(format_inspect(info) + "\n")


@app.command()
def tune(
    config: Annotated[Path, typer.Argument(help="tune_config.json")],
    operator: Annotated[str | None, typer.Option(help="operator to tune (if not in the file)")] = None,
    shapes: Annotated[str | None, typer.Option(help="e.g. x=4096x4096,gamma=4096")] = None,
    dtypes: Annotated[str | None, typer.Option(help="e.g. bf16 or x=bf16")] = None,
    device: Annotated[str, typer.Option(help="cuda | cuda:N")] = "auto",
    export: Annotated[
        Path | None, typer.Option(help="write the chosen parameters (.json or -D flags)")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="PNG plot of the space")] = None,
) -> None:
    """Search launch/compile parameters of an operator, verified against the CPU and cached."""
    from .tune.cli import run_tune

    run_tune(
        config,
        operator=operator,
        shapes=shapes,
        dtypes=dtypes,
        device=device,
        export=export,
        plot=plot,
        console=console,
    )


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(ctx: typer.Context) -> None:
    """Run the benchmark suite of a PipeLink checkout (``python -m benchmarks``; arguments pass through,
    e.g. ``pipelink bench --quick --out results``)."""
    root = Path.cwd()
    if not (root / "benchmarks" / "suite.py").is_file():
        raise UsageFailure(PipeLinkError(
            "pipelink bench runs the suite in benchmarks/ of a PipeLink source checkout: run it from the "
            "repository root"))
    sys.path.insert(0, str(root))
    from benchmarks.suite import main as bench_main

    code = bench_main(list(ctx.args))
    if code:
        raise typer.Exit(code)


@app.command()
def doctor() -> None:
    """Device, driver, CUDA runtime, features and package versions."""
    import importlib.metadata as md
    import platform

    import pipelink as pl

    from .backends import cuda_unavailable_reason, get_backend

    table = Table(title="pipelink doctor")
    table.add_column("item")
    table.add_column("value")
    table.add_row("pipelink", pl.__version__)
    table.add_row("python", platform.python_version())
    for pkg in ("numpy", "ml_dtypes", "jsonschema", "cuda-core", "cuda-bindings", "nvmath-python", "torch"):
        try:
            table.add_row(pkg, md.version(pkg))
        except md.PackageNotFoundError:
            table.add_row(pkg, "not installed")
    reason = cuda_unavailable_reason()
    from rich.markup import escape

    table.add_row("CUDA", "usable" if reason is None else escape(f"unavailable: {reason}"))
    devices = ["cpu"] + (["cuda:0"] if reason is None else [])
    for name in devices:
        info = get_backend(name).info
        table.add_row(f"{name} name", info.name)
        if info.compute_capability:
            table.add_row(f"{name} compute capability", ".".join(map(str, info.compute_capability)))
            table.add_row(f"{name} driver / runtime", f"{info.driver_version} / {info.runtime_version}")
            table.add_row(f"{name} uuid", str(info.uuid))
        feats = ", ".join(f"{k}={v:g}" for k, v in sorted(info.features.items()))
        table.add_row(f"{name} features", feats)
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    debug = os.environ.get("PIPELINK_DEBUG") == "1"
    try:
        rc = app(args=argv, standalone_mode=False)
        if isinstance(rc, int):
            return rc
    except UsageFailure as e:
        _print_error(e.error)
        return 2
    except PipeLinkError as e:
        _print_error(e)
        return 2 if isinstance(e, ConfigError) else 1
    except typer.Exit as e:
        return e.exit_code
    except SystemExit as e:  # click's own exit paths
        return int(e.code or 0)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except Exception as e:  # the CLI's last line of defence: never a traceback for a user
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            return e.exit_code
        if isinstance(e, click.exceptions.Abort):
            return 1
        if debug:
            raise
        err_console.print(
            f"error[internal]: {type(e).__name__}: {e} (set PIPELINK_DEBUG=1 for the traceback; "
            "please report this)",
            markup=False,
            highlight=False,
        )
        return 1
    return 0


def _print_error(e: PipeLinkError) -> None:
    code = e.code.name if isinstance(e.code, ErrorCode) else str(e.code)
    err_console.print(f"error[{code}]: {e.message}", markup=False, highlight=False)
    if os.environ.get("PIPELINK_DEBUG") == "1":
        import traceback

        traceback.print_exception(e)


def _entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    _entry()
