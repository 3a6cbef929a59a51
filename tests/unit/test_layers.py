"""The package's layers import in one direction (docs: config -> graph -> runtime -> backends/ops/modules).

The import graph of ``src/pipelink`` is built from the source with ``ast``: module-level imports and
imports inside functions alike, so a cycle cannot hide in a function body. Each top-level module or
package has a layer; a module may import its own layer and the layers below it, never one above.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pipelink

SRC = Path(pipelink.__file__).parent

# Lowest first. The processing order config -> graph -> runtime reads upward here: the linker (graph)
# consumes configs, the runtime consumes linked graphs, and both drive the backends, operators and
# modules at the bottom, which know nothing of configs, graphs or plans.
LAYERS: list[set[str]] = [
    {"errors", "dtypes", "dlpack", "tensor", "hardware", "shapes", "limits"},  # foundation: plain data
    {"versioning", "config", "descriptor"},  # what a config and an operator contract are
    # devices, operators, operator sources, the native core, the processes of a run
    {"backends", "ops", "modules", "native", "distributed"},
    {"graph"},  # the linker
    {"runtime"},  # plans and their execution
    {"pipeline", "memory", "torch", "tune", "cli", "cli_inputs", "onnx", "__init__", "__main__"},  # API
]

# Third-party packages a function may import lazily: optional extras, or costly ones only some paths use.
OPTIONAL = {"cuda", "cudnn", "torch", "nvmath", "matplotlib", "nvtx", "benchmarks", "onnx", "nccl"}

# Files whose function-local imports are kept on purpose, each with why (the rules hold for the rest).
PENDING = {
    "cli.py": "the command line imports each verb's machinery when it runs, so `pipelink --help` and a "
    "usage error answer without loading NumPy, the registry or the backends",
    "tune/cli.py": "rich's live progress is imported when a tuning run starts",
    "tune/cache.py": "fcntl exists on POSIX only: the cache locks where it can",
    "modules/native.py": "modules.legacy builds on modules.native; native binds legacy signatures through it",
}

# Single function-local imports kept on purpose: (importer, imported module) -> why.
PENDING_IMPORTS = {
    ("native/__init__.py", "pipelink.native.build"): "build.py also runs as `python -m "
    "pipelink.native.build` and is loaded by path from setup.py: importing it with the package "
    "makes runpy warn",
}


def _excused(importer: str, imported: str) -> bool:
    return importer in PENDING or (importer, imported) in PENDING_IMPORTS


def _layer_of(parts: tuple[str, ...]) -> int:
    top = parts[0] if parts else "__init__"
    top = top[:-3] if top.endswith(".py") else top
    for rank, names in enumerate(LAYERS):
        if top in names:
            return rank
    raise AssertionError(f"module {'/'.join(parts)} has no layer: add it to LAYERS in {__file__}")


def import_edges(root: Path) -> list[tuple[str, str, bool, int]]:
    """``(importer, imported, inside a function, line)`` for every import of a ``pipelink`` module (as a
    path relative to ``root``) and every function-local import of anything."""
    edges = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        package = rel.parent.parts
        tree = ast.parse(path.read_text())
        local = {
            id(node)
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(fn)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    if node.module:
                        names = [".".join((*base, node.module))]
                    else:  # "from .. import tensor": the names are modules
                        names = [".".join((*base, a.name)) for a in node.names]
                else:
                    names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                internal = node.level > 0 if isinstance(node, ast.ImportFrom) else False
                if not internal and name.split(".")[0] == "pipelink":
                    internal, name = True, name.partition(".")[2]
                edges.append(
                    (str(rel), ("pipelink." if internal else "") + name, id(node) in local, node.lineno)
                )
    return edges


def layer_violations(edges: list[tuple[str, str, bool, int]]) -> list[str]:
    """Imports of a pipelink module from a higher layer than the importer's."""
    bad = []
    for importer, imported, _, line in edges:
        if not imported.startswith("pipelink") or _excused(importer, imported):
            continue
        target = tuple(p for p in imported.removeprefix("pipelink").split(".") if p)
        if _layer_of(Path(importer).parts) < _layer_of(target):
            bad.append(f"{importer}:{line} imports {imported} (a higher layer)")
    return bad


def local_import_violations(edges: list[tuple[str, str, bool, int]]) -> list[str]:
    """Function-local imports of anything but an optional dependency."""
    return [
        f"{importer}:{line} imports {imported} inside a function"
        for importer, imported, local, line in edges
        if local and not _excused(importer, imported) and imported.split(".")[0] not in OPTIONAL
    ]


def test_every_module_imports_only_its_own_layer_and_below():
    assert layer_violations(import_edges(SRC)) == []


def test_function_local_imports_are_only_for_optional_dependencies():
    assert local_import_violations(import_edges(SRC)) == []


def test_every_pending_exception_still_names_a_file():
    # An excuse outlives its file only by mistake: the rules must then apply to whatever replaced it.
    files = list(PENDING) + [importer for importer, _ in PENDING_IMPORTS]
    assert [f for f in files if not (SRC / f).exists()] == []


def test_the_checks_flag_a_reverse_import_and_a_hidden_cycle(tmp_path):
    # A synthetic package: backends importing the runtime (upward), at module level and in a function.
    root = tmp_path / "pkg"
    (root / "backends").mkdir(parents=True)
    (root / "runtime").mkdir()
    (root / "backends" / "up.py").write_text("from ..runtime import executor\n")
    (root / "backends" / "hidden.py").write_text("def f():\n    from ..runtime.executor import run\n")
    (root / "runtime" / "executor.py").write_text("from ..backends import up\nimport torch\n")
    edges = import_edges(root)
    assert sorted(layer_violations(edges)) == [
        "backends/hidden.py:2 imports pipelink.runtime.executor (a higher layer)",
        "backends/up.py:1 imports pipelink.runtime (a higher layer)",
    ]
    assert local_import_violations(edges) == [
        "backends/hidden.py:2 imports pipelink.runtime.executor inside a function"
    ]
