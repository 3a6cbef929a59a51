"""Bound constants: the ``weights`` file of a config, an ``.npz`` whose arrays bind external inputs by
name once at load (``pl.load`` uploads them to the device once; ``run()`` no longer takes them)."""

from __future__ import annotations

import re
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import ConfigError, ErrorCode, InvalidArgumentError, PipeLinkError, Problem
from ..limits import check_fits, shape_nbytes
from .schema import TENSOR_NAME_PATTERN

__all__ = ["read_weights", "weights_path", "npz_array"]

_ZIP_MAGIC = b"PK\x03\x04"
_PTR = "/weights"


def weights_path(doc: dict[str, Any], base_dir: Path) -> Path | None:
    """The config's weights file: absolute as given, otherwise relative to the config's directory."""
    ref = doc.get("weights")
    if not isinstance(ref, str):
        return None
    path = Path(ref).expanduser()
    return path if path.is_absolute() else Path(base_dir) / path


def _fail(message: str) -> ConfigError:
    return ConfigError(message, errors=[Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, _PTR, message)])


def read_weights(doc: dict[str, Any], base_dir: Path) -> dict[str, np.ndarray]:
    """The arrays of the config's ``weights`` file by name (empty when the config names none).

    Raises
    ------
    ConfigError
        At ``/weights``: the file is missing, unreadable or not a regular file, is not an ``.npz``
        archive, holds pickled objects (never unpickled) or a damaged array, an array name that is not
        a tensor name, or a dtype PipeLink lacks.
    OutOfMemoryError
        An array whose header describes more bytes than the host has available.
    """
    path = weights_path(doc, base_dir)
    if path is None:
        return {}
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # opening a FIFO would wait for a writer
            raise _fail(f"weights file {str(path)!r} is not a regular file; give the path of an .npz file")
        with open(path, "rb") as f:  # our handle, closed whatever the archive holds
            if f.read(len(_ZIP_MAGIC)) != _ZIP_MAGIC:
                raise _fail(f"weights file {str(path)!r} is not an .npz archive; write it with numpy.savez")
            f.seek(0)
            return _check_arrays(path, _read_archive(path, f))
    except OSError as e:
        raise _fail(
            f"weights file {str(path)!r} cannot be read ({e.strerror or e}); give the path of an .npz "
            "file, relative to the config file"
        ) from None


def npz_array(archive: Any, name: str, what: str) -> np.ndarray:
    """One array of an open ``.npz`` (``np.load(..., allow_pickle=False)``), its header read and checked
    before its data: a header may claim any shape (a few bytes that would allocate terabytes), and an
    object array would need pickle.

    Parameters
    ----------
    archive : numpy.lib.npyio.NpzFile
    name : str
        The array's name in ``archive.files``.
    what : str
        How messages name the array (``"weights array 'w' of 'model.npz'"``).

    Raises
    ------
    InvalidArgumentError
        An object array, or a member that is not a readable ``.npy`` (damaged, cut short).
    OutOfMemoryError
        The array the header describes does not fit the host's available memory.
    """
    member = f"{name}.npy" if f"{name}.npy" in archive.zip.namelist() else name
    try:
        with archive.zip.open(member) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise InvalidArgumentError(f"{what} is not a readable .npy array ({e})", array=name) from None
    if dtype.hasobject:
        raise InvalidArgumentError(
            f"{what} holds pickled objects, which are never loaded (an array of dtype {dtype}); save plain "
            "numeric arrays",
            array=name,
        )
    check_fits(shape_nbytes(shape, dtype.itemsize), f"{what} (shape {list(shape)}, {dtype})")
    try:
        return archive[name]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InvalidArgumentError(f"{what} is damaged: its data cannot be read ({e})", array=name) from None


def _read_archive(path: Path, f: Any) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    try:
        with np.load(f, allow_pickle=False) as archive:
            for name in archive.files:
                array = npz_array(archive, name, f"weights array {name!r} of {str(path)!r}")
                arrays[name] = np.asarray(array, order="C")  # 0-d stays 0-d
    except InvalidArgumentError as e:
        raise _fail(e.message) from None
    except PipeLinkError:
        raise  # OutOfMemoryError: the size it would need, before any allocation
    except Exception as e:  # a damaged archive: zipfile.BadZipFile, EOFError, OSError
        raise _fail(
            f"weights file {str(path)!r} is not a readable .npz archive ({e}); write it with numpy.savez"
        ) from None
    return arrays


def _check_arrays(path: Path, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for name, array in arrays.items():
        if not re.fullmatch(TENSOR_NAME_PATTERN, name):
            raise _fail(
                f"weights file {str(path)!r} has an array named {name!r}, which is not a tensor "
                "name; rename it"
            )
        try:
            get_dtype(array.dtype)
        except PipeLinkError:
            raise _fail(
                f"weights array {name!r} has dtype {array.dtype}, which PipeLink has no dtype for; "
                "convert it (float32, float16, int64, ...)"
            ) from None
    return arrays
