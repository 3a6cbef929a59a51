"""The child side of the module mutation fuzz: load and inspect a batch of mutated module files.

Runs in a spawned process (one per batch), so the libraries that do load stay in that process only; the
parent learns of a death from the pool. Every outcome is either a load, a PipeLinkError (counted by code)
or a failure (any other exception, recorded with its traceback).
"""

from __future__ import annotations

import traceback
from collections import Counter
from pathlib import Path

import numpy as np

__all__ = ["interesting_ranges", "mutate", "run_batch"]


def interesting_ranges(data: bytes) -> list[tuple[int, int]]:
    """Byte ranges the dynamic loader and the manifest reader trust: headers and dynamic tables."""
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    h = elf.header
    ranges = [(0, h["e_ehsize"]), (h["e_phoff"], h["e_phoff"] + h["e_phnum"] * h["e_phentsize"]),
              (h["e_shoff"], h["e_shoff"] + h["e_shnum"] * h["e_shentsize"])]  # fmt: skip
    for name in (".dynamic", ".dynsym", ".dynstr", ".gnu.hash", ".rela.dyn", ".rela.plt", ".gnu.version",
                 ".gnu.version_r", ".init_array", ".pipelink_manifest"):  # fmt: skip
        section = elf.get_section_by_name(name)
        if section is not None and section["sh_type"] != "SHT_NOBITS":
            ranges.append((section["sh_offset"], section["sh_offset"] + section["sh_size"]))
    return [(lo, min(hi, len(data))) for lo, hi in ranges if lo < min(hi, len(data))]


def mutate(data: bytes, ranges: list[tuple[int, int]], seed: int, index: int) -> bytes:
    """One to eight random edits (bytes, bit flips, 0x00/0xFF, 8-byte words), mostly where it matters."""
    rng = np.random.default_rng([seed, index])
    raw = bytearray(data)
    for _ in range(int(rng.integers(1, 9))):
        if rng.random() < 0.75:
            lo, hi = ranges[int(rng.integers(len(ranges)))]
        else:
            lo, hi = 0, len(raw)
        pos = int(rng.integers(lo, hi))
        kind = int(rng.integers(4))
        if kind == 0:
            raw[pos] = int(rng.integers(256))
        elif kind == 1:
            raw[pos] ^= 1 << int(rng.integers(8))
        elif kind == 2:
            raw[pos] = 0xFF if rng.random() < 0.5 else 0
        else:
            word = int(rng.integers(0, 1 << 63)).to_bytes(8, "little")
            raw[pos : pos + 8] = word[: len(raw) - pos]
    return bytes(raw)


def run_batch(data: bytes, seed: int, start: int, count: int, folder: str) -> tuple[Counter, list[str]]:
    """Mutate, then load (probing on) and inspect each of ``count`` files; returns outcomes and failures."""
    import warnings

    from pipelink.errors import PipeLinkError
    from pipelink.modules import image
    from pipelink.modules.inspect import inspect_library
    from pipelink.modules.native import load_library
    from pipelink.modules.registry import OperatorRegistry

    image.PROBE_TIMEOUT_S = 10.0  # a mutated constructor that spins is reported after 10 s, not 60
    warnings.simplefilter("ignore")
    ranges = interesting_ranges(data)
    outcomes: Counter = Counter()
    failures: list[str] = []
    for index in range(start, start + count):
        path = Path(folder) / f"libmut{index}.so"
        path.write_bytes(mutate(data, ranges, seed, index))
        for what, call in (
            ("load", lambda p=path: load_library(p, registry=OperatorRegistry(), probe=True)),
            ("inspect", lambda p=path: inspect_library(p)),
        ):
            try:
                call()
                outcomes[f"{what}: ok"] += 1
            except PipeLinkError as e:
                outcomes[f"{what}: {e.code.name}"] += 1
            except BaseException:  # noqa: BLE001 - exactly what the fuzz is looking for
                failures.append(f"mutation {index} ({what}):\n{traceback.format_exc()}")
        path.unlink()
    return outcomes, failures
