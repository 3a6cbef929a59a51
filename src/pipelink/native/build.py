"""Compiling ``libpipelink_runtime.so`` from the C sources beside this file with the system C compiler, and
run()'s two CPython extensions (``runtime/_hotpath.c``, ``backends/cuda/_pool.c``).

Used by ``setup.py`` at ``pip install`` (loaded by path: it must import nothing from PipeLink) and by
``python -m pipelink.native.build`` to rebuild a checkout in place. The runtime never needs Python.h; the
extensions do (without them run() takes its Python path).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

__all__ = [
    "LIBRARY_NAME",
    "SOURCE_DIR",
    "EXTENSIONS",
    "sources",
    "default_output",
    "find_compiler",
    "compile_runtime",
    "compile_extension",
]

LIBRARY_NAME = "libpipelink_runtime.so"
SOURCE_DIR = Path(__file__).resolve().parent
FLAGS = [
    "-std=c11",
    "-O2",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
]
LIBS = ["-ldl", "-lpthread", "-lm"]
EXTENSION_FLAGS = ["-std=c11", "-O2", "-fPIC", "-shared", "-Wall", "-Wno-unused-parameter"]
PACKAGE_DIR = SOURCE_DIR.parent
# module name -> its C source, relative to the package folder
EXTENSIONS = {
    "pipelink.runtime._hotpath": "runtime/_hotpath.c",
    "pipelink.backends.cuda._pool": "backends/cuda/_pool.c",
}


def sources() -> list[Path]:
    return sorted(SOURCE_DIR.glob("*.c"))


def default_output() -> Path:
    """Where the package looks for the library: ``pipelink/lib/``."""
    return SOURCE_DIR.parent / "lib" / LIBRARY_NAME


def find_compiler() -> list[str] | None:
    """``$CC``, else the compiler Python was built with, else ``cc``/``gcc``/``clang``; None if none runs."""
    candidates = [os.environ.get("CC", ""), (sysconfig.get_config_var("CC") or "")]
    candidates += ["cc", "gcc", "clang"]
    for cand in candidates:
        argv = shlex.split(cand)
        if argv and shutil.which(argv[0]):
            return argv
    return None


def compile_runtime(output: str | os.PathLike | None = None, *, compiler: list[str] | None = None) -> Path:
    """Build the library into ``output`` (default: :func:`default_output`).

    Raises
    ------
    RuntimeError
        No C compiler, or the compiler failed (its output is in the message).
    """
    out = Path(output) if output is not None else default_output()
    cc = compiler or find_compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc or clang)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    argv = [*cc, *FLAGS, "-o", str(tmp), *map(str, sources()), *LIBS]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stderr or proc.stdout}")
    os.replace(tmp, out)  # atomic: a process loading the old library keeps its mapping
    return out


def compile_extension(
    name: str, output: str | os.PathLike | None = None, *, compiler: list[str] | None = None
) -> Path:
    """Build the CPython extension ``name`` (a key of :data:`EXTENSIONS`) into ``output`` (default: beside its
    source, with this interpreter's suffix).

    Raises
    ------
    RuntimeError
        No C compiler, no Python.h, or the compiler failed (its output is in the message).
    """
    source = PACKAGE_DIR / EXTENSIONS[name]
    out = Path(output) if output is not None else source.with_name(name.rsplit(".", 1)[1] + _ext_suffix())
    cc = compiler or find_compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc or clang)")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        raise RuntimeError(f"Python.h is not in {include} (install this Python's development headers)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    includes = [f"-I{include}", f"-I{PACKAGE_DIR / 'include'}"]
    argv = [*cc, *EXTENSION_FLAGS, *includes, "-o", str(tmp), str(source)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stderr or proc.stdout}")
    os.replace(tmp, out)
    return out


def _ext_suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def main(argv: list[str]) -> int:
    """``python -m pipelink.native.build [OUTPUT]``: exit 0 with the library's path, 2 on a usage error."""
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: python -m pipelink.native.build [OUTPUT]  (default: {default_output()})")
            return 0
        print(f"error: expected at most one output path, got {argv}", file=sys.stderr)
        return 2
    try:
        print(compile_runtime(argv[0] if argv else None))
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not argv:  # an in-place build of a checkout: run()'s extensions too
        for name in EXTENSIONS:
            try:
                print(compile_extension(name))
            except RuntimeError as e:
                print(f"warning: {name} not built ({e}); run() takes its Python path", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
