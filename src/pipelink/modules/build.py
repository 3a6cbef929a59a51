"""Building native modules: C/C++ with the system compiler, CUDA with nvcc, seed descriptor headers turned
into generated manifest sources; and where the header and the CMake package live.

Never installs anything or touches files outside the output's folder (objects go to a hidden build folder
next to the output).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import InvalidArgumentError, ModuleLoadError
from . import descheader

__all__ = ["build_module", "include_dir", "cmake_dir", "detect_cuda_arch", "DEFAULT_CUDA_ARCH"]

log = logging.getLogger("pipelink")
DEFAULT_CUDA_ARCH = "sm_90"
_C = (".c",)
_CXX = (".cc", ".cpp", ".cxx", ".c++")
_CU = (".cu",)


def include_dir() -> Path:
    """The folder holding ``pipelink.h`` (``pipelink include-dir``)."""
    return Path(__file__).resolve().parent.parent / "include"


def cmake_dir() -> Path:
    """The folder holding ``PipeLinkConfig.cmake`` (pass it as ``-DPipeLink_DIR=...``)."""
    return Path(__file__).resolve().parent.parent / "cmake"


def detect_cuda_arch() -> str | None:
    """``sm_XY`` of the first local GPU (via ``nvidia-smi``), or None when there is none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"sm_{out[0].replace('.', '')}" if out else None


def _run(cmd: list[str], what: str, output: Path) -> None:
    log.debug("pipelink build: %s", shlex.join(cmd))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise ModuleLoadError(
            f"building {output}: cannot run {cmd[0]!r} ({e}); install it or pass compiler=...",
            module=str(output),
        ) from e
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-30:])
        raise ModuleLoadError(
            f"building {output}: {what} failed (exit {done.returncode}):\n{tail}\ncommand: {shlex.join(cmd)}",
            module=str(output),
        )


def _tool(names: Sequence[str], kind: str) -> str:
    for name in names:
        if name and shutil.which(name):
            return name
    raise ModuleLoadError(
        f"no {kind} found (looked for {', '.join(n for n in names if n)}); install one or pass compiler=..."
    )


def build_module(
    sources: str | Path | Iterable[str | Path],
    output: str | Path,
    *,
    defines: Iterable[str] = (),
    arch: str | None = None,
    include_dirs: Iterable[str | Path] = (),
    compiler: str | None = None,
    extra_flags: Iterable[str] = (),
) -> Path:
    """Compile sources into a native module (``-fPIC -shared -O2``, with ``include_dir()`` on the path).

    Parameters
    ----------
    sources : path or iterable of paths
        ``.c`` (``cc``), ``.cc/.cpp/.cxx`` (``c++``), ``.cu`` (``nvcc``) and seed descriptor headers
        ``*.desc.h``, from which the manifest and version-symbol source is generated and compiled in.
    output : path
        The shared library to write (its folder is created).
    defines : iterable of str
        ``NAME`` or ``NAME=VALUE`` preprocessor definitions.
    arch : str, optional
        CUDA architecture (``sm_90`` or ``90``); default: the local GPU's, else ``sm_90`` (with a note).
    include_dirs : iterable of paths
        Extra include folders.
    compiler : str, optional
        The C/C++ compiler to use instead of ``cc``/``c++`` (nvcc is found as ``$CUDACXX`` or ``nvcc``).
    extra_flags : iterable of str
        Appended to every compile command.

    Returns
    -------
    Path
        The absolute path of the built library.

    Raises
    ------
    InvalidArgumentError
        No sources, an unknown extension, a missing file or a malformed descriptor header.
    ModuleLoadError
        A compiler is missing or fails (its last output lines are in the message).
    """
    srcs = [Path(sources)] if isinstance(sources, str | Path) else [Path(s) for s in sources]
    if not srcs:
        raise InvalidArgumentError("build_module needs at least one source file")
    out = Path(output).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.parent / f".{out.name}.build"
    work.mkdir(exist_ok=True)
    for src in srcs:
        if not src.is_file():
            raise InvalidArgumentError(f"build_module: source {src} does not exist")
        if not (src.name.endswith(".desc.h") or src.suffix.lower() in _C + _CXX + _CU):
            raise InvalidArgumentError(
                f"build_module: cannot build {src} (use .c, .cc/.cpp/.cxx, .cu or "
                f"a seed descriptor header *.desc.h)"
            )
    has_cu = any(s.suffix.lower() in _CU for s in srcs)
    compiled = [s for s in srcs if not s.name.endswith(".desc.h")]
    for i, desc in enumerate(s for s in srcs if s.name.endswith(".desc.h")):
        devices = ["cuda"] if has_cu else ["cpu"]
        try:
            text = descheader.generate_source(desc, devices=devices)
        except descheader.DescriptorError as e:
            raise InvalidArgumentError(f"build_module: {e}") from e
        generated = work / f"pipelink_manifest_{i}_{desc.name.removesuffix('.desc.h')}.c"
        generated.write_text(text, encoding="utf-8")
        compiled.append(generated)
    flags = ["-I", str(include_dir())]
    for d in include_dirs:
        flags += ["-I", str(Path(d).absolute())]
    # "NAME=VALUE", or "-DNAME=VALUE" as `pipelink tune --export` writes them.
    flags += [f"-D{d[2:] if d.startswith('-D') else d}" for d in defines]
    extra = list(extra_flags)
    cuda_arch = None
    if has_cu:
        cuda_arch = arch or detect_cuda_arch()
        if cuda_arch is None:
            cuda_arch = DEFAULT_CUDA_ARCH
            log.info(
                "pipelink build: no GPU detected and no arch given; compiling CUDA for %s "
                "(pass arch='sm_XY' to choose)",
                DEFAULT_CUDA_ARCH,
            )
        cuda_arch = cuda_arch if cuda_arch.startswith(("sm_", "compute_")) else f"sm_{cuda_arch}"
    cc = compiler or _tool([os.environ.get("CC", ""), "cc", "gcc", "clang"], "C compiler")
    cxx = (
        compiler or _tool([os.environ.get("CXX", ""), "c++", "g++", "clang++"], "C++ compiler")
        if any(s.suffix.lower() in _CXX for s in compiled) or has_cu
        else cc
    )
    nvcc = _tool([os.environ.get("CUDACXX", ""), "nvcc"], "CUDA compiler (nvcc)") if has_cu else ""
    objects = []
    for i, src in enumerate(compiled):
        obj = work / f"{i}_{src.name}.o"
        suffix = src.suffix.lower()
        if suffix in _CU:
            cmd = [
                nvcc,
                f"-arch={cuda_arch}",
                "-O2",
                "-std=c++17",
                "-Xcompiler",
                "-fPIC",
                "-c",
                str(src),
                "-o",
                str(obj),
            ]
        elif suffix in _CXX:
            cmd = [cxx, "-O2", "-fPIC", "-std=c++17", "-c", str(src), "-o", str(obj)]
        else:
            cmd = [cc, "-O2", "-fPIC", "-std=c11", "-c", str(src), "-o", str(obj)]
        _run(cmd[:1] + flags + cmd[1:] + extra, f"compiling {src.name}", out)
        objects.append(str(obj))
    if has_cu:
        link = [nvcc, f"-arch={cuda_arch}", "-shared", "-Xcompiler", "-fPIC"]
    else:
        link = [cxx if any(s.suffix.lower() in _CXX for s in compiled) else cc, "-shared", "-fPIC"]
    tmp = out.with_name(f".{out.name}.tmp")
    _run(link + objects + ["-o", str(tmp), "-lm"], "linking", out)
    # Replace atomically: a process that has the old library mapped keeps its copy intact.
    os.replace(tmp, out)
    return out
