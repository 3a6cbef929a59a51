"""Reading a native module's file without executing it: existence, sha256, ELF checks, symbols, manifest.

Everything here reads bytes only (pyelftools); nothing is ever loaded or run, so it is safe on a file the
user has not yet trusted. ``read_elf`` parses the bytes that were hashed, never the path again.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ..errors import ModuleLoadError, PipeLinkError
from .elfcheck import check_loadable

__all__ = [
    "ELFInfo",
    "sha256_hex",
    "read_elf",
    "resolve_path",
    "MANIFEST_SECTION",
    "VERSION_PREFIX",
]

MANIFEST_SECTION = ".pipelink_manifest"
VERSION_PREFIX = "pipeLinkVersion_"
_ELF_MAGIC = b"\x7fELF"


@dataclass
class ELFInfo:
    """What the ELF file says about a module: exported symbols, needed libraries, the manifest section."""

    path: Path
    machine: str
    elf_type: str
    exports: set[str] = field(default_factory=set)
    needed: list[str] = field(default_factory=list)
    manifest_text: str | None = None

    @property
    def version_symbols(self) -> list[str]:
        return sorted(s for s in self.exports if s.startswith(VERSION_PREFIX))


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of some bytes, as 64 lowercase hex digits (a module's identity)."""
    return hashlib.sha256(data).hexdigest()


def resolve_path(path: str | Path) -> Path:
    """The absolute path of an existing file; a clear ModuleLoadError otherwise."""
    try:
        p = Path(path).expanduser()
        p = p.resolve() if p.exists() else p.absolute()
        is_file, is_dir, exists = p.is_file(), p.is_dir(), p.exists()
    except (OSError, ValueError, RuntimeError) as e:  # too long, a NUL byte, a symlink loop
        shown = str(path) if len(str(path)) <= 200 else str(path)[:200] + "..."
        raise ModuleLoadError(
            f"native module {shown}: the path cannot be used ({e}); check the stage's 'library' path",
            module=shown,
        ) from e
    if not is_file:
        what = "is a directory" if is_dir else "is not a regular file" if exists else "does not exist"
        raise ModuleLoadError(
            f"native module {p}: the file {what}; check the stage's 'library' path (relative to the config "
            f"file) or build the module first ('pipelink build')",
            module=str(p),
        )
    return p


def read_elf(data: bytes, path: Path) -> ELFInfo:
    """Parse the ELF headers, the dynamic symbol table and the manifest section of a module's bytes.

    ``path`` only names the file in messages: what is parsed is ``data``, the bytes that were hashed.
    Also checks what the dynamic loader trusts blindly (program headers, dynamic addresses), so that a
    damaged file is refused here rather than faulting inside ``dlopen``.

    Raises
    ------
    ModuleLoadError
        The bytes are not an ELF shared library, or are truncated or damaged.
    """
    if data[:4] != _ELF_MAGIC:
        raise ModuleLoadError(
            f"native module {path}: not an ELF shared library (the file starts with {data[:4]!r}); "
            f"point 'library' at a .so built with 'pipelink build' or a C/C++/CUDA compiler",
            module=str(path),
        )
    try:
        elf = ELFFile(io.BytesIO(data))
        elf_type = elf.header["e_type"]
        if elf_type != "ET_DYN":
            raise ModuleLoadError(
                f"native module {path}: an ELF file of type {elf_type}, not a shared library; "
                f"link it with -shared (pipelink build does)",
                module=str(path),
            )
        info = ELFInfo(path=path, machine=str(elf.header["e_machine"]), elf_type=str(elf_type))
        check_loadable(elf, data, path)
        _read_sections(elf, info)
    except PipeLinkError:
        raise
    except Exception as e:  # noqa: BLE001 - pyelftools on untrusted bytes fails in many ways; all mean "damaged"
        raise ModuleLoadError(
            f"native module {path}: the ELF file is damaged ({type(e).__name__}: {e}); rebuild it",
            module=str(path),
        ) from e
    return info


def _read_sections(elf, info: ELFInfo) -> None:
    for section in elf.iter_sections():
        if isinstance(section, SymbolTableSection) and section.name == ".dynsym":
            for sym in section.iter_symbols():
                if (
                    sym.name
                    and sym["st_shndx"] != "SHN_UNDEF"
                    and sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
                ):
                    info.exports.add(sym.name)
        elif isinstance(section, DynamicSection):
            info.needed += [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        elif section.name == MANIFEST_SECTION:
            raw = section.data().split(b"\0", 1)[0]
            info.manifest_text = raw.decode("utf-8", errors="replace")
