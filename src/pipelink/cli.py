"""The ``pipelink`` command (README.md, "Command line").

Every failure prints ``error[PIPELINK_ERR_...]: message`` and exits 1 (runtime) or 2 (invalid config or
usage); no traceback ever reaches the user (``PIPELINK_DEBUG=1`` shows it).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from .cli_inputs import build_feed
from .errors import ConfigError, ErrorCode, InvalidArgumentError, PipeLinkError
from .limits import format_bytes

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    help="PipeLink: link GPU operators into checked pipelines from JSON.",
)
console = Console()
err_console = Console(stderr=True)


def _show_version(value: bool) -> None:
    if value:
        from . import __version__

        sys.stdout.write(f"pipelink {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", help="print the version and exit", callback=_show_version, is_eager=True),
    ] = False,
) -> None:
    """PipeLink: link GPU operators into checked pipelines from JSON."""


class UsageFailure(Exception):
    """A PipeLinkError raised while loading or validating (exit code 2)."""

    def __init__(self, error: PipeLinkError):
        self.error = error


ImportOption = Annotated[
    list[str],
    typer.Option("--import", help="module or .py file registering Python operators (repeatable)"),
]


def _load(config: Path, device: str, cuda_graph: bool = False, checked: bool | None = None):
    import pipelink as pl

    try:
        return pl.load(config, device=device, cuda_graph=cuda_graph, checked=checked)
    except PipeLinkError as e:
        raise UsageFailure(e) from e


def _import_operators(specs: list[str]) -> None:
    """Import modules (dotted names or ``.py`` files) whose import registers Python operators."""
    from .modules.plugins import import_operator_module

    for spec in specs:
        try:
            import_operator_module(spec)
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
    imports: ImportOption = [],  # noqa: B006
) -> None:
    """Check a config: schema, names, versions, hardware, declared shapes. Lists every problem."""
    import pipelink as pl

    _import_operators(imports)
    problems = pl.validate(config, device=device, libraries=not skip_libraries)
    if as_json:
        console.print_json(json.dumps([p.to_dict() for p in problems]))
    elif not problems:
        console.print(f"[green]ok[/green]: {config} is valid")
    for p in problems if not as_json else ():
        err_console.print(
            f"error[{p.code.name}]: {p.path or '/'}: {p.message}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if problems:
        raise typer.Exit(2)


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="pipeline JSON")],
    inputs: Annotated[Path | None, typer.Option("--inputs", help="inputs as .npz")] = None,
    random: Annotated[bool, typer.Option("--random", help="random inputs of the declared shapes")] = False,
    shape: Annotated[list[str], typer.Option("--shape", help="NAME=DxD for --random")] = [],  # noqa: B006
    dtype: Annotated[list[str], typer.Option("--dtype", help="NAME=DTYPE for --random")] = [],  # noqa: B006
    value: Annotated[list[str], typer.Option("--value", help="NAME=NUMBER for a scalar input")] = [],  # noqa: B006
    seed: Annotated[
        int, typer.Option(min=0, help="random seed (rank R of a launched world uses seed + R)")
    ] = 0,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write outputs to .npz")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
    cuda_graph: Annotated[bool, typer.Option("--cuda-graph", help="CUDA graph mode")] = False,
    graph_alias: Annotated[bool, typer.Option("--graph", hidden=True, help="deprecated alias")] = False,
    repeat: Annotated[int, typer.Option(min=1, help="run N times; times are the median and p95")] = 1,
    profile: Annotated[bool, typer.Option("--profile", help="per-stage device times")] = False,
    trace: Annotated[Path | None, typer.Option("--trace", help="write a Chrome/Perfetto trace")] = None,
    error_log: Annotated[Path | None, typer.Option("--error-log", help="JSON-lines error log")] = None,
    checked: Annotated[
        bool, typer.Option("--checked", help="checked mode: catch stages that skip or overrun outputs (slow)")
    ] = False,
    imports: ImportOption = [],  # noqa: B006
    nproc: Annotated[
        int | None, typer.Option("--nproc", help="run in N processes on this host (torchrun), one per GPU")
    ] = None,
) -> None:
    """Run a pipeline on inputs from a file or random ones, print a summary, optionally save outputs."""
    import pipelink as pl

    if nproc is not None:
        from .distributed.launch import run_launched, without_option

        try:
            rc = run_launched(nproc, without_option(_ARGV, "--nproc"))
        except PipeLinkError as e:
            raise UsageFailure(e) from e
        raise typer.Exit(rc)
    world = pl.distributed.launch_env()

    if error_log is not None:
        pl.configure_error_log(error_log)
    _import_operators(imports)
    if graph_alias:
        err_console.print("warning: --graph is deprecated; use --cuda-graph", markup=False, highlight=False)
    # checked=None leaves it to PIPELINK_CHECKED
    pipe = _load(config, device, cuda_graph or graph_alias, checked=True if checked else None)
    try:
        # Each rank of a launched world draws its own random inputs.
        feed = build_feed(
            pipe,
            inputs=inputs,
            random=random,
            shapes=shape,
            dtypes=dtype,
            values=value,
            seed=seed + world.rank,
        )
    except PipeLinkError as e:  # every problem with the command line's inputs is a usage error
        raise UsageFailure(e) from e
    totals = []
    with _progress(repeat) as advance:
        for _ in range(repeat):
            outs = pipe.run(feed, profile=profile or trace is not None)
            totals.append(pipe.last_report.total_time_s)
            advance()
    report = pipe.last_report
    _print_report(pipe, report, outs, totals)
    if trace is not None:
        from .runtime.trace import write_trace

        _write_file(trace, "the trace", lambda: write_trace(trace, pipe, report))
        console.print(f"trace written to {trace}")
    if output is not None:
        if world.is_distributed:  # one file per rank
            output = output.with_name(f"{output.stem}.rank{world.rank}{output.suffix}")
        arrays = {}
        for name, t in outs.items():
            arr = t.numpy()
            arrays[name] = arr.astype(np.float32) if arr.dtype.name == "bfloat16" else arr
        _write_file(output, "the outputs", lambda: np.savez(output, **arrays))
        console.print(f"outputs written to {output}")
    if not report.ok:
        raise typer.Exit(1)


def _write_file(path: Path, what: str, write) -> None:
    """Run ``write``; a path that cannot be written (no such folder, a directory, a full disk) is an
    InvalidArgumentError naming it, not an OSError."""
    try:
        write()
    except OSError as e:
        raise InvalidArgumentError(
            f"cannot write {what} to {path}: {e.strerror or e}; give a writable file path", path=str(path)
        ) from e


@contextlib.contextmanager
def _progress(total: int):
    """A progress bar for long ``--repeat`` runs (none for a few runs); yields a step function."""
    if total < 10:
        yield lambda: None
        return
    from rich.progress import Progress

    with Progress(console=err_console, transient=True) as bar:
        task = bar.add_task("running", total=total)
        yield lambda: bar.advance(task)


def _print_report(pipe, report, outs, totals: list[float]) -> None:
    from .distributed import launch_env

    world = launch_env()
    rank = f" (rank {world.rank} of {world.world_size})" if world.is_distributed else ""
    by = ", native core" if report.executor == "native" else ""
    table = Table(title=f"{pipe.name} on {pipe.device}{rank}{by}")
    for col in ("stage", "operator", "variant", "status", "host ms", "device ms"):
        table.add_column(col)
    for s in report.stages.values():
        colour = {"ok": "green", "degraded": "yellow", "skipped": "yellow"}.get(s.status, "red")
        table.add_row(
            s.stage,
            s.operator,
            s.variant,
            f"[{colour}]{s.status}[/{colour}]" + (f" ({s.action})" if s.action else ""),
            f"{s.time_s * 1e3:.3f}" if s.time_s is not None else "-",
            f"{s.device_time_s * 1e3:.3f}" if s.device_time_s is not None else "-",
        )
    console.print(table)
    if report.executor == "native":
        console.print(
            "run by the native core (libpipelink_runtime): it runs every stage or fails the run and does "
            "not time stages; --profile runs the Python executor, which times each stage",
            highlight=False,
        )
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
        out_table.add_row(name, "x".join(map(str, t.shape)) or "scalar", t.dtype.name, *stats)
    for name in report.missing_outputs:
        out_table.add_row(name, "-", "-", "[red]missing[/red]", "", "", "")
    console.print(out_table)
    plan = pipe.memory_plan
    if plan is not None:
        console.print(
            f"memory plan: {format_bytes(plan.peak_bytes)} arena (no reuse: {format_bytes(plan.naive_bytes)})"
        )
    if report.executor == "native":
        import pipelink as pl

        held = pl.memory.stats(pipe.device)["native"]
        console.print(
            f"native core: {format_bytes(held['arena_bytes'])} of arenas in {held['n_contexts']} execution "
            f"context(s), {format_bytes(held['workspace_bytes'] + held['constant_bytes'])} of workspaces "
            "and constants",
            highlight=False,
        )
    if len(totals) > 1:
        ms = np.asarray(totals) * 1e3
        console.print(
            f"{len(totals)} runs: median {np.median(ms):.3f} ms, "
            f"p95 {np.percentile(ms, 95):.3f} ms (stage times above are the last run's)"
        )
    else:
        console.print(f"total {report.total_time_s * 1e3:.3f} ms")


@app.command()
def ops(
    name: Annotated[str | None, typer.Argument(help="show one operator in full")] = None,
    imports: ImportOption = [],  # noqa: B006
) -> None:
    """List the registered operators (or describe one as JSON)."""
    import pipelink as pl

    _import_operators(imports)
    if name is not None:
        try:
            desc = pl.get_operator_info(name)
        except PipeLinkError as e:
            raise UsageFailure(e) from e
        console.print_json(json.dumps(desc.to_dict(), default=str))
        return
    pl.list_operators()
    from .modules.registry import registry

    descs = list(registry.all())
    table = Table(title="operators")
    # Names are what a config needs verbatim: never cut or wrapped; the descriptive columns wrap.
    table.add_column("name", no_wrap=True, min_width=max((len(d.name) for d in descs), default=4))
    table.add_column("version", no_wrap=True)
    for col in ("devices", "inputs", "outputs", "attrs"):
        table.add_column(col, overflow="fold")
    for d in descs:
        table.add_row(
            d.name,
            str(d.version),
            ",".join(d.devices),
            ", ".join(p.name + ("?" if p.optional else "") for p in d.inputs),
            ", ".join(p.name for p in d.outputs),
            ", ".join(a.name for a in d.attrs),
        )
    # A name longer than the terminal widens the table rather than being cut at its edge.
    from rich.measure import Measurement

    needed = Measurement.get(console, console.options.update(width=100_000), table).minimum
    console.print(table, width=max(console.width, needed), crop=False)


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
    imports: ImportOption = [],  # noqa: B006
) -> None:
    """Draw the pipeline's DAG (DOT always; SVG/PNG when Graphviz's `dot` is installed)."""
    from .graph.render import render

    _import_operators(imports)
    pipe = _load(config, device)
    dot = render(pipe)
    if out is None:
        sys.stdout.write(dot)
        return
    from .graph.render import write

    try:
        _write_file(out, "the graph", lambda: write(dot, out))
    except PipeLinkError as e:  # a usage problem: wrong suffix, Graphviz missing, a path not writable
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
    device: Annotated[str, typer.Option(help="device of the plan: cpu | cuda | cuda:N")] = "cpu",
    shape: Annotated[
        list[str] | None,
        typer.Option(
            help="an input's shape and dtype: NAME=AxB[:dtype] (NAME=:dtype for a 0-d input); an input given "
            "N times compiles N signatures into one plan file"
        ),
    ] = None,
    cuda_graph: Annotated[
        bool, typer.Option("--cuda-graph", help="the core captures and replays CUDA graphs (CUDA plans)")
    ] = False,
    max_constant_bytes: Annotated[
        int | None,
        typer.Option(help="the most bytes of bound weights (a weights file) the plan embeds; default 2 GiB"),
    ] = None,
) -> None:
    """Compile a config into a plan the native core runs (pipeLinkLoadPipeline)."""
    from .runtime.planfile import MAX_CONSTANT_BYTES, signatures_of

    try:
        shapes = signatures_of(shape or [])
    except InvalidArgumentError as e:  # a malformed --shape is a usage error
        raise UsageFailure(e) from e
    limit = MAX_CONSTANT_BYTES if max_constant_bytes is None else max_constant_bytes
    pipe = _load(config, device)
    with pipe:
        try:
            pipe.save(output, shapes=shapes, cuda_graph=cuda_graph, max_constant_bytes=limit)
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
    from .modules.inspect import inspect_library

    try:
        path = build_module(sources, output, defines=define, arch=arch)
    except PipeLinkError as e:
        raise UsageFailure(e) from e
    try:  # a library PipeLink cannot describe is no module: say so instead of "built"
        inspect_library(path)
    except PipeLinkError as e:
        raise UsageFailure(
            InvalidArgumentError(
                f"compiled {path}, but PipeLink cannot use it: {e.message}. Add the operator's descriptor "
                f"(a *.desc.h, see docs/native-modules.md) to the sources, or describe the library in a "
                f"sidecar {Path(path).name}.pipelink.json"
            )
        ) from e
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


@app.command("import")
def import_cmd(
    model: Annotated[Path, typer.Argument(help="an ONNX model (.onnx)")],
    out_dir: Annotated[
        Path, typer.Option("--output", "-o", help="directory for pipeline.json and weights.npz")
    ],
    fuse: Annotated[
        bool, typer.Option("--fuse/--no-fuse", help="fuse node chains into one stage (docs/onnx-import.md)")
    ] = True,
    constant: Annotated[
        list[str] | None,
        typer.Option(
            "--constant",
            help="NAME=VALUE: fix a graph input at import (a .npy file, a number, or numbers joined by "
            "commas; repeatable)",
        ),
    ] = None,
    shape: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            help="NAME=AxB: fix a graph input's dims at import, as an export with fixed shapes (repeatable)",
        ),
    ] = None,
) -> None:
    """Import an ONNX model: write DIR/pipeline.json and DIR/weights.npz (needs pipelink[onnx])."""
    from .cli_inputs import parse_constants, parse_shapes
    from .onnx import import_model

    try:
        constants, shapes = parse_constants(constant or []), parse_shapes(shape or [])
        config, weights = import_model(model, out_dir=out_dir, fuse=fuse, constants=constants, shapes=shapes)
    except PipeLinkError as e:
        raise UsageFailure(e) from e
    console.print(
        f"[green]ok[/green]: {len(config['pipeline'])} stages, {len(weights)} weights -> {out_dir}",
        highlight=False,
    )


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


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False
)
def bench(ctx: typer.Context) -> None:
    """Run the benchmark suite of a PipeLink checkout (python -m benchmarks); every argument passes
    through: pipelink bench --help lists them, e.g. pipelink bench --quick --out results."""
    root = Path.cwd()
    if not (root / "benchmarks" / "suite.py").is_file():
        raise UsageFailure(
            PipeLinkError(
                "pipelink bench runs the suite in benchmarks/ of a PipeLink source checkout: run it from the "
                "repository root"
            )
        )
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
        feats = ", ".join(
            f"{k}={format_bytes(v) if k.endswith('_bytes') else f'{v:g}'}"
            for k, v in sorted(info.features.items())
        )
        table.add_row(f"{name} features", feats)
    console.print(table)


# Typer vendors click in new releases and depends on it in old ones: find click's exception classes
# through typer's own exports, so the handler imports neither ``click`` nor ``typer._click``.
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _usage_line(e: Exception) -> str:
    """One line for a click usage error: what was wrong and where to look for help."""
    ctx = getattr(e, "ctx", None)
    command = ctx.command_path if ctx is not None else "pipelink"
    message = " ".join(e.format_message().split()).rstrip(".")
    return f"{command}: {message[:1].lower() + message[1:]}; see '{command} --help'"


def app_commands() -> list[str]:
    """The names of the CLI's commands."""
    return [c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands]


_ARGV: list[str] = []  # the command line main() runs, for `run --nproc` to hand on to the launcher


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    debug = os.environ.get("PIPELINK_DEBUG") == "1"
    args = sys.argv[1:] if argv is None else list(argv)
    _ARGV[:] = args
    if not args:
        names = ", ".join(sorted(app_commands()))
        err_console.print(
            f"error[usage]: pipelink: no command given (one of: {names}); see 'pipelink --help'",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 2
    try:
        rc = app(args=args, standalone_mode=False, prog_name="pipelink")
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
    except typer.Abort:
        err_console.print("aborted")
        return 1
    except _USAGE_ERROR as e:
        err_console.print(f"error[usage]: {_usage_line(e)}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except _CLICK_ERROR as e:
        err_console.print(f"error: {e.format_message()}", markup=False, highlight=False, soft_wrap=True)
        return e.exit_code
    except SystemExit as e:  # click's own exit paths
        return int(e.code or 0)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except Exception as e:  # the CLI's last line of defence: never a traceback for a user
        if debug:
            raise
        err_console.print(
            f"error[internal]: {type(e).__name__}: {e} (set PIPELINK_DEBUG=1 for the traceback; "
            "please report this)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 1
    return 0


def _print_error(e: PipeLinkError) -> None:
    code = e.code.name if isinstance(e.code, ErrorCode) else str(e.code)
    err_console.print(f"error[{code}]: {e.message}", markup=False, highlight=False, soft_wrap=True)
    if os.environ.get("PIPELINK_DEBUG") == "1":
        import traceback

        traceback.print_exception(e)


def _entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    _entry()
