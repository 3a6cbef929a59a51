"""The library trust boundary: a module is the bytes that were read and hashed, opened from a sealed copy.

``read_image`` reads a file once and hashes those bytes; ``open_image`` writes them into a sealed memfd and
dlopens that, so nothing done to the path afterwards (a swap after the hash, a rebuild, an overwrite in
place) changes the code that runs or can fault the caller. ``probe_image`` opens an image in a child
process first. Nothing here ever dlopens a path the user named.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import signal
import stat
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import IntegrityError, ModuleLoadError
from .elfinfo import resolve_path, sha256_hex

__all__ = [
    "ModuleImage",
    "read_image",
    "open_image",
    "is_opened",
    "probe_image",
    "probe_default",
    "PROBE_ENV",
    "PROBE_TIMEOUT_S",
    "MAX_IMAGE_BYTES",
]

PROBE_ENV = "PIPELINK_PROBE_LIBRARIES"
PROBE_TIMEOUT_S = 60.0
MAX_IMAGE_BYTES = 1 << 31
_MFD_EXEC = 0x0010  # Linux >= 6.3: an executable memfd even under vm.memfd_noexec=1 (EINVAL before 6.3)
_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")
_CHILD = Path(__file__).with_name("_probe_child.py")
_LOCK = threading.RLock()
# sha256 -> (memfd, CDLL). The memfd stays open for the life of the process: "/proc/self/fd/N" is the
# library's name in the dynamic loader, which would hand back the old library for a reused fd number.
_OPENED: dict[str, tuple[int, ctypes.CDLL]] = {}
# sha256 -> the manifest text pipelink_manifest() returned in the probe ("" when it was not asked for).
_PROBED: dict[str, str | None] = {}
_WARNED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class ModuleImage:
    """The bytes of a module file as read once, with their SHA-256: what is checked is what runs.

    Picklable, so a worker process opens the very bytes its caller verified.
    """

    path: Path
    data: bytes = field(repr=False)
    sha256: str


def read_image(path: str | Path, expected_sha256: str | None = None) -> ModuleImage:
    """Read a module file once, hash those bytes and compare them with ``expected_sha256``.

    A file that is itself group/world-writable, or lies in a world-writable folder, is read with a
    ``UserWarning`` (anyone could have planted it) unless ``expected_sha256`` pins it; it is not refused.

    Raises
    ------
    ModuleLoadError
        The path does not exist, is not a regular file, cannot be read or is larger than 2 GiB.
    IntegrityError
        ``expected_sha256`` is given and the bytes hash differently.
    """
    p = resolve_path(path)
    try:
        # O_NONBLOCK: a FIFO named like a library must not block the open; fstat then refuses it.
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise ModuleLoadError(
            f"native module {p}: cannot be read ({e.strerror}); check its permissions", module=str(p)
        ) from e
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ModuleLoadError(
                f"native module {p}: not a regular file; point 'library' at a built .so", module=str(p)
            )
        if st.st_size > MAX_IMAGE_BYTES:
            raise ModuleLoadError(
                f"native module {p}: {st.st_size} bytes, more than the {MAX_IMAGE_BYTES} a module may have",
                module=str(p),
            )
        try:
            data = f.read(MAX_IMAGE_BYTES + 1)
        except OSError as e:
            raise ModuleLoadError(f"native module {p}: reading failed ({e.strerror})", module=str(p)) from e
    digest = sha256_hex(data)
    if expected_sha256 is not None:
        expected = str(expected_sha256).strip().lower()
        if digest != expected:
            raise IntegrityError(
                f"native module {p}: SHA-256 is {digest}, but {expected} was expected; the file changed "
                f"since the digest was recorded: rebuild it or update 'sha256' if the change is intended",
                module=str(p),
                expected=expected,
                got=digest,
            )
    else:  # a pinned digest already proves the bytes are the intended ones, whoever could write the file
        _warn_if_writable_by_others(p, st, digest)
    return ModuleImage(p, data, digest)


def _warn_if_writable_by_others(p: Path, st: os.stat_result, digest: str) -> None:
    try:
        folder_mode = os.stat(p.parent).st_mode
    except OSError:
        folder_mode = 0
    why = []
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why.append(f"the file is writable by others (mode {stat.S_IMODE(st.st_mode):o})")
    if folder_mode & stat.S_IWOTH:
        why.append(f"its folder {p.parent} is world-writable (mode {stat.S_IMODE(folder_mode):o})")
    if not why or (str(p), digest) in _WARNED:
        return
    _WARNED.add((str(p), digest))
    warnings.warn(
        f"native module {p}: {' and '.join(why)}, so another user may have replaced it; loading the "
        f"bytes read now (sha256 {digest[:16]}...). Move it to a folder only you can write, or pin its "
        f"'sha256'",
        UserWarning,
        stacklevel=4,
    )


def _sealed_copy(image: ModuleImage) -> int:
    """A memfd holding the image's bytes, sealed so that nobody (us included) can change them again."""
    create = getattr(os, "memfd_create", None)
    if create is None:
        raise ModuleLoadError(
            f"native module {image.path}: this platform has no memfd_create, which PipeLink needs to open "
            f"a module from the bytes it verified (Linux 3.17 or newer)",
            module=str(image.path),
        )
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    name = f"pipelink-{image.sha256[:16]}"
    try:
        try:
            fd = create(name, flags | _MFD_EXEC)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            fd = create(name, flags)
        try:
            view = memoryview(image.data)
            while view:
                view = view[os.write(fd, view) :]
            seals = 0
            for seal in _SEALS:
                seals |= getattr(fcntl, seal, 0)
            fcntl.fcntl(fd, getattr(fcntl, "F_ADD_SEALS", 1033), seals)
        except BaseException:
            os.close(fd)
            raise
    except OSError as e:
        raise ModuleLoadError(
            f"native module {image.path}: cannot make the private sealed copy it is opened from "
            f"({e.strerror}); check the memory limits of this process",
            module=str(image.path),
        ) from e
    return fd


def open_image(image: ModuleImage) -> ctypes.CDLL:
    """dlopen the image's bytes (never its path): one handle per content per process.

    Raises
    ------
    ModuleLoadError
        No sealed copy could be made, or the dynamic loader refused the bytes (e.g. a missing dependency).
    """
    with _LOCK:
        hit = _OPENED.get(image.sha256)
        if hit is not None:
            return hit[1]
        fd = _sealed_copy(image)
        try:
            lib = ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            os.close(fd)
            raise ModuleLoadError(
                f"native module {image.path}: the dynamic loader refused it ({_loader_message(e, fd)}); "
                f"check that the libraries it needs are installed ('pipelink inspect' lists them)",
                module=str(image.path),
            ) from e
        _OPENED[image.sha256] = (fd, lib)
        return lib


def is_opened(sha256: str) -> bool:
    """Whether this process has dlopened the bytes with this SHA-256 (isolated stages must not have)."""
    with _LOCK:
        return sha256 in _OPENED


def _loader_message(e: OSError, fd: int | None = None) -> str:
    text = str(e)
    return text.replace(f"/proc/self/fd/{fd}: ", "") if fd is not None else text


def probe_default() -> bool:
    """Whether first opens are probed in a child process: ``PIPELINK_PROBE_LIBRARIES`` (default 1)."""
    return os.environ.get(PROBE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def probe_image(image: ModuleImage, *, manifest: bool = False, timeout_s: float | None = None) -> str | None:
    """Open the image in a child process first, so a crash there is a ``ModuleLoadError``, not our death.

    Runs once per content per process (results are cached by sha256).

    Parameters
    ----------
    manifest : bool
        Also call ``pipelink_manifest()`` there and return its text (for modules without the section).
    timeout_s : float, optional
        How long opening may take (default ``PROBE_TIMEOUT_S``, 60 s).

    Returns
    -------
    str or None
        The manifest text when asked for (None when the function returned NULL).

    Raises
    ------
    ModuleLoadError
        The child crashed (signal), exited, hung past ``timeout_s`` or the loader refused the file.
    """
    with _LOCK:
        if image.sha256 in _PROBED and (not manifest or _PROBED[image.sha256] != ""):
            return _PROBED[image.sha256]
    timeout_s = PROBE_TIMEOUT_S if timeout_s is None else timeout_s
    if not sys.executable:  # an embedding application without a Python executable to start
        raise _probe_error(
            image, "there is no Python executable to run the probe in (sys.executable is empty)", b"",
            hint=f"Set {PROBE_ENV}=0 (or pass probe=False) to open trusted libraries without a probe",
        )  # fmt: skip
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", str(_CHILD), "1" if manifest else "0"],
            input=image.data,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise _probe_error(
            image,
            f"opening it did not finish within {timeout_s:g} s (a constructor that never returns?)",
            e.stderr,
        ) from None
    except OSError as e:
        raise _probe_error(image, f"the probe process could not start ({e})", b"") from e
    kind, _, body = done.stdout.partition(b"\n")
    if done.returncode < 0:
        raise _probe_error(
            image,
            f"opening it crashed the probe process ({_signal_name(-done.returncode)}: "
            f"a constructor that crashes, or a damaged ELF file)",
            done.stderr,
        )
    if kind == b"refused":
        raise _probe_error(
            image,
            f"the dynamic loader refused it ({body.decode('utf-8', 'replace')})",
            b"",
            hint="Check that the libraries it needs are installed ('pipelink inspect' lists them)",
        )
    if kind not in (b"ok", b"manifest", b"null") or done.returncode != 0:
        raise _probe_error(
            image,
            f"opening it ended the probe process with exit code {done.returncode} (a "
            f"constructor that calls exit()?)",
            done.stderr,
        )
    text = body.decode("utf-8", errors="replace") if kind == b"manifest" else None
    with _LOCK:
        _PROBED[image.sha256] = text if manifest else _PROBED.get(image.sha256, "")
    return text


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _probe_error(image: ModuleImage, what: str, stderr: bytes | None, *, hint: str = "") -> ModuleLoadError:
    tail = (stderr or b"")[-400:].decode("utf-8", errors="replace").strip()
    return ModuleLoadError(
        f"native module {image.path}: {what}; it was opened in a child process first, so this process "
        f"is unharmed. {hint or 'Fix or rebuild the library'}" + (f" (its output: {tail})" if tail else ""),
        module=str(image.path),
        sha256=image.sha256,
    )
