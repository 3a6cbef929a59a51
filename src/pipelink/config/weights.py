"""Bound constants: the ``weights`` file of a config, an ``.npz`` whose arrays bind external inputs by
name once at load (``pl.load`` uploads them to the device once; ``run()`` no longer takes them)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import ConfigError, ErrorCode, PipeLinkError, Problem
from .schema import TENSOR_NAME_PATTERN

__all__ = ["read_weights", "weights_path"]

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
        At ``/weights``: the file is missing or unreadable, is not an ``.npz`` archive, holds pickled
        objects (never unpickled), an array name that is not a tensor name, or a dtype PipeLink lacks.
    """
    path = weights_path(doc, base_dir)
    if path is None:
        return {}
    try:
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


def _read_archive(path: Path, f: Any) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    try:
        with np.load(f, allow_pickle=False) as archive:
            for name in archive.files:
                arrays[name] = np.asarray(archive[name], order="C")  # 0-d stays 0-d
    except ValueError as e:
        raise _fail(
            f"weights file {str(path)!r} holds pickled objects, which are never loaded ({e}); save "
            "plain numeric arrays"
        ) from None
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
