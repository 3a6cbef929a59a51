"""Compiling ``libpipelink_runtime.so`` from the C sources beside this file with the system C compiler.

Used by ``setup.py`` at ``pip install`` (loaded by path: it must import nothing from PipeLink) and by
``python -m pipelink.native.build`` to rebuild a checkout in place. Never needs Python.h.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

__all__ = ["LIBRARY_NAME", "SOURCE_DIR", "sources", "default_output", "find_compiler", "compile_runtime"]

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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
