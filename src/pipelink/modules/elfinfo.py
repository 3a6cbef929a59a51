"""Reading a native module's file without executing it: existence, sha256, ELF checks, symbols, manifest.

Everything here reads bytes only (pyelftools); nothing is ever loaded or run, so it is safe on a file the
user has not yet trusted (the sha256 check happens before the library is opened).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import IntegrityError, ModuleLoadError

__all__ = [
    "ELFInfo",
    "file_sha256",
    "check_sha256",
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


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file, as 64 lowercase hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_path(path: str | Path) -> Path:
    """The absolute path of an existing file; a clear ModuleLoadError otherwise."""
    p = Path(path).expanduser()
    p = p.resolve() if p.exists() else p.absolute()
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "does not exist"
        raise ModuleLoadError(
            f"native module {p}: the file {what}; check the stage's 'library' path (relative to the config "
            f"file) or build the module first ('pipelink build')",
            module=str(p),
        )
    return p


def check_sha256(path: Path, expected: str | None) -> str | None:
    """Compare the file's SHA-256 with ``expected`` (if given) before anything opens the library.

    Raises
    ------
    IntegrityError
        The digests differ (both are in the message).
    """
    if expected is None:
        return None
    expected = expected.strip().lower()
    actual = file_sha256(path)
    if actual != expected:
        raise IntegrityError(
            f"native module {path}: SHA-256 is {actual}, but {expected} was expected; the file changed "
            f"since the digest was recorded: rebuild it or update 'sha256' if the change is intended",
            module=str(path),
            expected=expected,
            got=actual,
        )
    return actual


def read_elf(path: Path) -> ELFInfo:
    """Parse the ELF headers, the dynamic symbol table and the manifest section of a shared library.

    Raises
    ------
    ModuleLoadError
        The file is not an ELF shared library (or is truncated).
    """
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with open(path, "rb") as f:
        magic = f.read(4)
        if magic != _ELF_MAGIC:
            raise ModuleLoadError(
                f"native module {path}: not an ELF shared library (the file starts with {magic!r}); "
                f"point 'library' at a .so built with 'pipelink build' or a C/C++/CUDA compiler",
                module=str(path),
            )
        f.seek(0)
        try:
            elf = ELFFile(f)
            elf_type = elf.header["e_type"]
            info = ELFInfo(path=path, machine=str(elf.header["e_machine"]), elf_type=str(elf_type))
            if elf_type != "ET_DYN":
                raise ModuleLoadError(
                    f"native module {path}: an ELF file of type {elf_type}, not a shared library; "
                    f"link it with -shared (pipelink build does)",
                    module=str(path),
                )
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
        except ELFError as e:
            raise ModuleLoadError(
                f"native module {path}: the ELF file is damaged ({e}); rebuild it", module=str(path)
            ) from e
    return info
