"""What the dynamic loader trusts blindly in an ELF file, checked from its bytes before anyone dlopens it.

``dlopen`` reads program headers, the dynamic table, symbol and hash tables, version tables and
relocations as the file gives them, and dereferences what they say without bounds checks. A damaged value
makes it read or write outside the library: a crash inside ``dlopen``, or worse, a silent write into
someone else's memory whose effect depends on the process's layout (so a probe in a child process could
not be trusted to see it). These checks keep every address the loader uses at load inside the library's
own image; what remains is deterministic and is left to the probe. Reads bytes only; never runs anything.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModuleLoadError

__all__ = ["check_loadable"]

_READ_SEGMENTS = ("PT_DYNAMIC", "PT_TLS", "PT_GNU_RELRO", "PT_NOTE", "PT_PHDR", "PT_GNU_EH_FRAME",
                  "PT_GNU_PROPERTY")  # fmt: skip
# Dynamic tags (ELF gABI numbers): address tags the loader dereferences, and (address, size) pairs.
DT_NULL, DT_NEEDED, DT_PLTRELSZ, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_RELA, DT_RELASZ = 0, 1, 2, 4, 5, 6, 7, 8
DT_RELAENT, DT_STRSZ, DT_SYMENT, DT_INIT, DT_FINI, DT_SONAME, DT_RPATH = 9, 10, 11, 12, 13, 14, 15
DT_REL, DT_RELSZ, DT_RELENT, DT_PLTREL, DT_JMPREL = 17, 18, 19, 20, 23
DT_INIT_ARRAY, DT_FINI_ARRAY, DT_INIT_ARRAYSZ, DT_FINI_ARRAYSZ, DT_RUNPATH = 25, 26, 27, 28, 29
DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ = 32, 33
DT_GNU_HASH, DT_VERSYM, DT_VERDEF, DT_VERNEED = 0x6FFFFEF5, 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFE
_STRING_TAGS = (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)
_ARRAYS = ((DT_INIT_ARRAY, DT_INIT_ARRAYSZ), (DT_FINI_ARRAY, DT_FINI_ARRAYSZ),
           (DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ))  # fmt: skip
# Relocations whose addend is an address in the library: RELATIVE, and IRELATIVE (a resolver it calls).
_SELF_RELOCS = {"EM_X86_64": (8, 37), "EM_AARCH64": (1027, 1032), "EM_386": (8, 42), "EM_ARM": (23, 160)}
# COPY relocations belong in executables only: in a library they copy another object's bytes into it,
# as many as the symbols' sizes say, past any bound we could check.
_COPY_RELOCS = {"EM_X86_64": 5, "EM_AARCH64": 1024, "EM_386": 5, "EM_ARM": 20}
_MAX_ENTRIES = 1 << 22  # far beyond any real module; bounds the work a hostile count can ask for
_MAX_VERSIONS = 4096
_STT_TLS, _SHN_UNDEF, _SHN_ABS = 6, 0, 0xFFF1


class _Damaged(Exception):
    pass


@dataclass
class _Image:
    """The library as the loader maps it: PT_LOAD ranges over the file's bytes (zero beyond p_filesz)."""

    data: bytes
    loads: list[tuple[int, int, int, int]]  # (vaddr, memsz, offset, filesz)
    is64: bool
    endian: str

    def mapped(self, addr: int, size: int = 1) -> bool:
        return size >= 0 and any(v <= addr and addr + size <= v + m for v, m, _, _ in self.loads)

    def read(self, addr: int, size: int) -> bytes:
        for vaddr, memsz, offset, filesz in self.loads:
            if vaddr <= addr and addr + size <= vaddr + memsz:
                start = addr - vaddr
                end = offset + min(start + size, filesz)
                chunk = self.data[offset + start : end] if start < filesz else b""
                return chunk + bytes(size - len(chunk))
        raise _Damaged(f"address {addr:#x} (+{size}) lies outside the loaded image")

    def unpack(self, fmt: str, addr: int) -> tuple:
        fmt = self.endian + fmt
        return struct.unpack(fmt, self.read(addr, struct.calcsize(fmt)))


def check_loadable(elf, data: bytes, path: Path) -> None:
    """Refuse an ELF file whose loader-trusted structures point outside its own image.

    Parameters
    ----------
    elf : elftools.elf.elffile.ELFFile
        The parsed headers of ``data``.

    Raises
    ------
    ModuleLoadError
        Naming what is damaged.
    """
    try:
        _check(elf, data)
    except _Damaged as e:
        raise ModuleLoadError(
            f"native module {path}: the ELF file is damaged ({e}); the dynamic loader would read or write "
            f"outside the library: rebuild it",
            module=str(path),
        ) from None


def _check(elf, data: bytes) -> None:
    image = _Image(data, [], elf.elfclass == 64, "<" if elf.little_endian else ">")
    others = []
    for seg in elf.iter_segments():
        h = seg.header
        if h["p_type"] == "PT_LOAD":
            fits = h["p_offset"] + h["p_filesz"] <= len(data) and h["p_filesz"] <= h["p_memsz"] <= 1 << 40
            if not fits:
                raise _Damaged(f"a loadable segment at offset {h['p_offset']} does not fit the file")
            align = h["p_align"]
            if align & (align - 1) or (align > 1 and (h["p_vaddr"] - h["p_offset"]) % align):
                raise _Damaged(f"a loadable segment has an invalid alignment {align}")
            image.loads.append((h["p_vaddr"], h["p_memsz"], h["p_offset"], h["p_filesz"]))
        elif h["p_type"] in _READ_SEGMENTS:
            others.append(h)
    if not image.loads:
        raise _Damaged("no loadable segment")
    dynamic = None
    for h in others:  # what the loader (or an unwinder, through dl_iterate_phdr) reads from memory
        size = h["p_filesz"] if h["p_type"] == "PT_TLS" else h["p_memsz"]
        if not image.mapped(h["p_vaddr"], size) or h["p_offset"] + h["p_filesz"] > len(data):
            raise _Damaged(f"the {h['p_type']} segment lies outside the loaded image")
        if h["p_type"] == "PT_TLS" and h["p_memsz"] > 1 << 30:
            raise _Damaged("the thread-local block is too large")
        if h["p_type"] == "PT_DYNAMIC" and dynamic is None:
            dynamic = h["p_vaddr"]
    if dynamic is None:
        raise _Damaged("no dynamic segment")
    tags = _dynamic_tags(image, dynamic)
    _check_dynamic(image, tags, str(elf.header["e_machine"]))


def _dynamic_tags(image: _Image, addr: int) -> dict[int, list[int]]:
    """The dynamic table as the loader walks it: entries up to DT_NULL, which must be inside the image."""
    fmt = "qQ" if image.is64 else "iI"
    step = 16 if image.is64 else 8
    tags: dict[int, list[int]] = {}
    for i in range(_MAX_ENTRIES):
        tag, value = image.unpack(fmt, addr + i * step)
        if tag == DT_NULL:
            return tags
        tags.setdefault(tag, []).append(value)
    raise _Damaged("the dynamic table has no end")


def _check_dynamic(image: _Image, tags: dict[int, list[int]], machine: str) -> None:
    def one(tag: int, default: int | None = None) -> int | None:
        return tags[tag][0] if tag in tags else default

    word = 8 if image.is64 else 4
    strtab, strsz = one(DT_STRTAB), one(DT_STRSZ, 0)
    if strtab is None or not image.mapped(strtab, strsz) or strsz > _MAX_ENTRIES * 16:
        raise _Damaged("the string table lies outside the loaded image")
    for tag in _STRING_TAGS:
        if any(v >= strsz for v in tags.get(tag, ())):
            raise _Damaged(f"dynamic tag {tag} names a string past the string table")
    for addr_tag, size_tag in _ARRAYS:
        if addr_tag in tags and not image.mapped(one(addr_tag), one(size_tag, 0)):
            raise _Damaged(f"an initialiser/finaliser array (tag {addr_tag}) lies outside the loaded image")
    for tag in (DT_INIT, DT_FINI):
        if tag in tags and not image.mapped(one(tag)):
            raise _Damaged(f"DT_INIT/DT_FINI ({tag}) points outside the loaded image")
    sym_size = 24 if image.is64 else 16
    if one(DT_SYMENT, sym_size) != sym_size or one(DT_SYMTAB) is None:
        raise _Damaged("the symbol table is missing or has the wrong entry size")
    nsyms = _symbol_count(image, tags)
    symtab = one(DT_SYMTAB)
    if not image.mapped(symtab, nsyms * sym_size):
        raise _Damaged("the symbol table lies outside the loaded image")
    for i in range(nsyms):
        if image.is64:
            name, info, _, shndx, value, _ = image.unpack("IBBHQQ", symtab + i * sym_size)
        else:
            name, value, _, info, _, shndx = image.unpack("IIIBBH", symtab + i * sym_size)
        if name >= strsz:
            raise _Damaged(f"symbol {i} has a name past the string table")
        if shndx not in (_SHN_UNDEF, _SHN_ABS) and info & 0xF != _STT_TLS and not image.mapped(value, 0):
            raise _Damaged(f"symbol {i} points outside the loaded image")
    max_version = _check_versions(image, tags, strsz)
    if DT_VERSYM in tags:
        versym = one(DT_VERSYM)
        if not image.mapped(versym, 2 * nsyms):
            raise _Damaged("the symbol version table lies outside the loaded image")
        for i in range(nsyms):
            (ndx,) = image.unpack("H", versym + 2 * i)
            if (ndx & 0x7FFF) > max(max_version, 1):
                raise _Damaged(f"symbol {i} names version {ndx & 0x7FFF}, which is not defined")
    self_relocs = _SELF_RELOCS.get(machine, ())
    copy_reloc = _COPY_RELOCS.get(machine)
    rela = (24 if image.is64 else 12), True
    rel = (16 if image.is64 else 8), False
    tables = [(DT_RELA, DT_RELASZ, *rela), (DT_REL, DT_RELSZ, *rel)]
    if DT_JMPREL in tags:
        tables.append((DT_JMPREL, DT_PLTRELSZ, *(rela if one(DT_PLTREL, DT_RELA) == DT_RELA else rel)))
    if one(DT_RELAENT, rela[0]) != rela[0] or one(DT_RELENT, rel[0]) != rel[0]:
        raise _Damaged("the relocation entry size is wrong")
    for addr_tag, size_tag, entsize, has_addend in tables:
        if addr_tag not in tags:
            continue
        start, size = one(addr_tag), one(size_tag, 0)
        if not image.mapped(start, size) or size // entsize > _MAX_ENTRIES:
            raise _Damaged(f"a relocation table (tag {addr_tag}) lies outside the loaded image")
        for i in range(size // entsize):
            kind = _check_relocation(image, start + i * entsize, has_addend, word, nsyms, self_relocs)
            if kind == copy_reloc:
                raise _Damaged("a shared library holds a COPY relocation")


def _check_relocation(image: _Image, at: int, has_addend: bool, word: int, nsyms: int, self_relocs) -> int:
    """Check one relocation's target, symbol and (for self-relative ones) address; returns its type."""
    if image.is64:
        offset, info = image.unpack("QQ", at)
        sym, kind = info >> 32, info & 0xFFFFFFFF
        addend = image.unpack("q", at + 16)[0] if has_addend else None
    else:
        offset, info = image.unpack("II", at)
        sym, kind = info >> 8, info & 0xFF
        addend = image.unpack("i", at + 8)[0] if has_addend else None
    if not image.mapped(offset, word):
        raise _Damaged(f"a relocation writes at {offset:#x}, outside the loaded image")
    if sym >= max(nsyms, 1):
        raise _Damaged(f"a relocation names symbol {sym} of {nsyms}")
    if kind in self_relocs:
        target = addend if addend is not None else int.from_bytes(image.read(offset, word), "little")
        if not image.mapped(target, 0):
            raise _Damaged(f"a relocation points at {target:#x}, outside the loaded image")
    return kind


def _symbol_count(image: _Image, tags: dict[int, list[int]]) -> int:
    """How many dynamic symbols the hash table covers (the loader never reads past them)."""
    if DT_GNU_HASH in tags:
        addr = tags[DT_GNU_HASH][0]
        nbuckets, symoffset, bloom_size, _ = image.unpack("IIII", addr)
        if not 0 < nbuckets <= _MAX_ENTRIES or bloom_size > _MAX_ENTRIES or bloom_size & (bloom_size - 1):
            raise _Damaged("the GNU hash table header is invalid")
        buckets = addr + 16 + bloom_size * (8 if image.is64 else 4)
        if not image.mapped(buckets, 4 * nbuckets):
            raise _Damaged("the GNU hash table lies outside the loaded image")
        top = max(image.unpack(f"{nbuckets}I", buckets))
        chains = buckets + 4 * nbuckets
        if top == 0:
            return symoffset
        if top < symoffset:
            raise _Damaged("a GNU hash bucket points below the first hashed symbol")
        for i in range(top, top + _MAX_ENTRIES):
            (value,) = image.unpack("I", chains + 4 * (i - symoffset))
            if value & 1:
                return i + 1
        raise _Damaged("a GNU hash chain has no end")
    if DT_HASH in tags:
        addr = tags[DT_HASH][0]
        nbucket, nchain = image.unpack("II", addr)
        total = nbucket + nchain
        if nbucket == 0 or total > _MAX_ENTRIES or not image.mapped(addr + 8, 4 * total):
            raise _Damaged("the ELF hash table lies outside the loaded image")
        if any(v >= nchain for v in image.unpack(f"{nbucket + nchain}I", addr + 8)):
            raise _Damaged("the ELF hash table names a symbol past its end")
        return nchain
    raise _Damaged("no symbol hash table")


def _check_versions(image: _Image, tags: dict[int, list[int]], strsz: int) -> int:
    """Walk the version need/definition chains as the loader does (to a zero ``next``); the highest index."""
    highest = 0
    for addr_tag, head, aux in ((DT_VERNEED, "HHIII", "IHHII"), (DT_VERDEF, "HHHHIII", "II")):
        if addr_tag not in tags:
            continue
        at = tags[addr_tag][0]
        for _ in range(_MAX_VERSIONS):
            entry = image.unpack(head, at)
            if addr_tag == DT_VERNEED:
                _, _, file_name, aux_off, next_off = entry
                if file_name >= strsz:
                    raise _Damaged("a version need names a string past the string table")
            else:
                _, _, index, _, _, aux_off, next_off = entry
                highest = max(highest, index & 0x7FFF)
            a = at + aux_off
            for _ in range(_MAX_VERSIONS):
                fields = image.unpack(aux, a)
                if addr_tag == DT_VERNEED:
                    _, _, other, name, a_next = fields
                    highest = max(highest, other & 0x7FFF)
                else:
                    name, a_next = fields
                if name >= strsz:
                    raise _Damaged("a version name lies past the string table")
                if a_next == 0:
                    break
                a += a_next
            else:
                raise _Damaged("a version entry's names have no end")
            if next_off == 0:
                break
            at += next_off
        else:
            raise _Damaged("the version table has no end")
    return highest
