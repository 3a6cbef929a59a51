"""The inputs of ``pipelink run``: read from ``--inputs FILE.npz`` or drawn for ``--random`` (with
``--shape``, ``--dtype`` and ``--value``), every name and size checked before anything runs or is allocated.

Raises PipeLinkErrors only; the CLI reports each as a usage error. Never casts an array behind run()'s back.
"""

from __future__ import annotations

import stat
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from .config.schema_errors import did_you_mean
from .config.weights import npz_array
from .dtypes import get_dtype
from .errors import InvalidArgumentError
from .limits import check_fits, shape_nbytes
from .runtime.executor import check_inputs

__all__ = ["build_feed", "parse_shape", "parse_shapes", "parse_constants"]


def _parse_kv(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidArgumentError(f"--{what} takes NAME=VALUE (got {item!r})")
        out[name] = value
    return out


def _regular_file(path: Path, cannot: str) -> None:
    """Refuse a path that is not a regular file before anything opens it (opening a FIFO waits for a
    writer; a device never ends); ``cannot`` starts the message ("cannot read inputs")."""
    try:
        regular = stat.S_ISREG(path.stat().st_mode)
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or e
        raise InvalidArgumentError(f"{cannot} {str(path)!r}: {why}") from None
    if not regular:
        raise InvalidArgumentError(f"{cannot} {str(path)!r}: not a regular file (a folder, pipe or device)")


def parse_constants(items: list[str]) -> dict[str, np.ndarray]:
    """``pipelink import --constant NAME=VALUE``: VALUE a ``.npy`` file, a number (a 0-d array) or numbers
    joined by commas (1-d); integers as int64, others float64 (the import converts them to the input's
    declared type).

    Raises
    ------
    InvalidArgumentError
        For a malformed option, an unreadable file, or text that is not numbers.
    """
    out = {}
    for name, text in _parse_kv(items, "constant").items():
        if text.lower().endswith(".npy"):
            path = Path(text).expanduser()
            _regular_file(path, f"--constant {name}: cannot read the array")
            try:
                out[name] = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as e:
                raise InvalidArgumentError(
                    f"--constant {name}={text!r}: cannot read the array: {e}"
                ) from None
            continue
        parts = [p.strip() for p in text.split(",")]
        try:
            values = [int(p) for p in parts]
            dtype = np.int64
        except ValueError:
            try:
                values, dtype = [float(p) for p in parts], np.float64
            except ValueError:
                raise InvalidArgumentError(
                    f"--constant {name}={text!r}: give a .npy file, a number or numbers joined by commas "
                    f"(e.g. --constant {name}=1,1,2,2)"
                ) from None
        try:
            out[name] = np.array(values[0] if len(parts) == 1 else values, dtype=dtype)
        except OverflowError:
            raise InvalidArgumentError(f"--constant {name}={text!r}: a value does not fit int64") from None
    return out


def parse_shape(name: str, text: str) -> tuple[int, ...]:
    """``8x1024`` (or ``8,1024``; empty for a 0-d input) as a tuple of non-negative ints.

    Raises
    ------
    InvalidArgumentError
        For anything else, with an example of the form.
    """
    parts = [d for d in text.lower().replace(",", "x").split("x") if d.strip()]
    try:
        dims = tuple(int(d) for d in parts)
    except ValueError:
        dims, parts = (), []
    if len(parts) != len(dims) or any(d < 0 for d in dims) or (text.strip() and not parts):
        raise InvalidArgumentError(
            f"--shape {name}={text!r}: give the dimensions as non-negative integers joined by 'x', "
            f"e.g. --shape {name}=8x1024"
        )
    return dims


def parse_shapes(items: list[str]) -> dict[str, list[int]]:
    """``pipelink import --shape NAME=AxB``: each input's dims, by name (checked against the model by
    ``import_model(shapes=...)``)."""
    return {name: list(parse_shape(name, text)) for name, text in _parse_kv(items, "shape").items()}


def _check_names(pipe, given: Collection[str], what: str) -> None:
    """Names given on the command line must be inputs of the pipeline (with a suggestion if not)."""
    unknown = [n for n in given if n not in pipe.inputs]
    if unknown:
        hint = did_you_mean(unknown[0], pipe.inputs)
        raise InvalidArgumentError(
            f"{what} names {', '.join(map(repr, unknown))}, not an input of the pipeline{hint}; "
            f"its inputs are {', '.join(pipe.inputs)}"
        )


def _random_inputs(pipe, shapes: dict[str, str], dtypes: dict[str, str], seed: int) -> dict[str, np.ndarray]:
    _check_names(pipe, shapes, "--shape")
    _check_names(pipe, dtypes, "--dtype")
    decls = pipe.graph.config.inputs or {}
    resolved: dict[str, tuple[int, ...]] = {}
    missing = []
    for name in pipe.inputs:
        decl = decls.get(name)
        if name in shapes:
            resolved[name] = parse_shape(name, shapes[name])
        elif decl is not None and decl.shape is not None and all(isinstance(d, int) for d in decl.shape):
            resolved[name] = tuple(decl.shape)
        else:
            missing.append(name)
    if missing:  # every missing shape at once, with a command line that supplies them
        flags = " ".join(f"--shape {n}=DIMxDIM" for n in missing)
        raise InvalidArgumentError(
            f"--random needs the shapes of input{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(repr, missing))}: declare them in the config's 'inputs' or pass {flags}"
        )
    out = {}
    rng = np.random.default_rng(seed)
    for name, shape in resolved.items():
        decl = decls.get(name)
        dtype = get_dtype(dtypes.get(name) or (decl.dtype if decl and decl.dtype else "float32"))
        # The inputs are drawn on the host, whatever the device: refuse what its memory cannot hold.
        check_fits(shape_nbytes(shape, dtype.itemsize), f"random input {name!r} of shape {shape}")
        if dtype.is_floating:
            out[name] = rng.standard_normal(shape).astype(dtype.numpy)
        else:
            out[name] = rng.integers(0, 8, size=shape).astype(dtype.numpy)
    return out


def _read_inputs(pipe, path: Path) -> dict[str, np.ndarray]:
    _regular_file(path, "--inputs: cannot read inputs")
    try:
        data = np.load(path, allow_pickle=False)
        files = data.files
    except (OSError, ValueError, AttributeError, EOFError, zipfile.BadZipFile) as e:
        raise InvalidArgumentError(
            f"cannot read inputs {path}: {e}; give a .npz written by numpy.savez"
        ) from e
    decls = pipe.graph.config.inputs or {}
    out = {}
    for name in files:
        arr = npz_array(data, name, f"input {name!r} of {path}")
        decl = decls.get(name)
        # The one exception to run()'s dtype rule: .npz cannot store bfloat16, so float32 stands in for it.
        if (
            decl is not None
            and decl.dtype
            and get_dtype(decl.dtype).name == "bfloat16"
            and arr.dtype == np.float32
        ):
            arr = arr.astype(get_dtype("bfloat16").numpy)
        out[name] = arr
    return out


def build_feed(
    pipe,
    *,
    inputs: Path | None,
    random: bool,
    shapes: list[str],
    dtypes: list[str],
    values: list[str],
    seed: int,
) -> dict[str, Any]:
    """The inputs of one ``pipelink run``, checked against the pipeline's inputs.

    Parameters
    ----------
    pipe : Pipeline
    inputs : Path or None
        ``--inputs``: a ``.npz`` with one array per input.
    random, shapes, dtypes, seed
        ``--random``, ``--shape NAME=DxD``, ``--dtype NAME=DTYPE``, ``--seed``.
    values : list of str
        ``--value NAME=NUMBER`` for scalar inputs (enough alone when they are all the inputs).

    Raises
    ------
    InvalidArgumentError
        For a malformed option, a name that is not an input, a missing shape (all named at once), an
        unreadable file, or a missing or misspelled input (with a suggestion).
    OutOfMemoryError
        For a random input larger than the host's available memory.
    """
    scalars = _parse_kv(values, "value")
    _check_names(pipe, scalars, "--value")
    if inputs is None and not random and scalars and set(scalars) >= set(pipe.inputs):
        feed: dict[str, Any] = {}
    else:
        if (inputs is None) == (not random):
            raise InvalidArgumentError("give exactly one of --inputs FILE.npz or --random")
        if inputs is not None:
            feed = _read_inputs(pipe, inputs)
        else:
            kv_shapes = {**_parse_kv(shapes, "shape"), **{n: "" for n in scalars}}
            feed = _random_inputs(pipe, kv_shapes, _parse_kv(dtypes, "dtype"), seed)
    for name, text in scalars.items():
        try:
            feed[name] = float(text)
        except ValueError:
            raise InvalidArgumentError(f"--value {name}={text!r}: not a number") from None
    check_inputs(pipe.graph, feed, pipe.weights)
    return feed
