"""The persistent tuning cache: best parameters per (operator, version, source, device, shapes, dtypes).

Safe under concurrent tuners (exclusive lock, read-merge-write, atomic replace). A damaged cache is a
warning and an empty cache, never a crash; :func:`resolve_params` never raises at all.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from .tuner import TuneResult

__all__ = [
    "KEY_FIELDS",
    "TuneCache",
    "ParamChoice",
    "key_digest",
    "default_cache_dir",
    "resolve_params",
    "validate_tuned",
]

#: The fields every cache key must have (a target may add more; all of them are hashed).
KEY_FIELDS = (
    "operator",
    "operator_version",
    "source_hash",
    "device_name",
    "compute_capability",
    "driver_version",
    "shapes",
    "dtypes",
)
_FORMAT = 1


def default_cache_dir() -> Path:
    """``$PIPELINK_CACHE_DIR``, else ``$XDG_CACHE_HOME/pipelink``, else ``~/.cache/pipelink``."""
    if os.environ.get("PIPELINK_CACHE_DIR"):
        return Path(os.environ["PIPELINK_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "pipelink"
    return Path.home() / ".cache" / "pipelink"


def _canonical(key_fields: Mapping[str, Any]) -> str:
    missing = [f for f in KEY_FIELDS if key_fields.get(f) in (None, "")]
    if missing:
        raise InvalidArgumentError(
            f"cache key lacks {', '.join(missing)} (got fields: {', '.join(key_fields)})"
        )
    try:
        return json.dumps(
            dict(key_fields), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
        )
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"cache key fields must be plain JSON values ({e})") from e


def key_digest(key_fields: Mapping[str, Any]) -> str:
    """The sha256 of the canonical JSON of the key fields (key order and tuple/list do not matter).

    Raises
    ------
    InvalidArgumentError
        When a field of :data:`KEY_FIELDS` is missing or a value is not JSON.
    """
    return hashlib.sha256(_canonical(key_fields).encode()).hexdigest()


def _entry_problem(entry: Any) -> str | None:
    """Why a stored entry cannot be used (None when it can): params must map names to scalars."""
    if not isinstance(entry, dict):
        return f"an entry must be an object (got {type(entry).__name__})"
    params = entry.get("params")
    if not isinstance(params, dict):
        return f"'params' must be an object (got {type(params).__name__})"
    odd = [k for k, v in params.items() if not isinstance(v, int | float | str | bool)]
    return f"parameters {odd} are not numbers or strings" if odd else None


def validate_tuned(
    params: Mapping[str, Any], tunables: Mapping[str, tuple[Any, Collection[Any] | None]]
) -> tuple[dict[str, Any], list[str]]:
    """Tuned values that a kernel declares, each checked against its tunable's allowed values.

    Parameters
    ----------
    params : mapping
        Parameter name -> value, as read from the cache (any JSON value).
    tunables : mapping
        Parameter name -> (default, allowed values) of the kernel; allowed values None checks the type only.

    Returns
    -------
    valid : dict
        The parameters that are declared, of the default's type (``True`` is not ``1``, ``"128"`` is
        not ``128``) and among the allowed values.
    warnings : list of str
        One line per parameter left out, saying what was wrong.
    """
    valid, problems = {}, []
    for name, value in params.items():
        if name not in tunables:
            problems.append(f"{name!r} is not a tunable of this kernel (it has {sorted(tunables)})")
            continue
        default, allowed = tunables[name]
        if type(value) is not type(default) and not (type(default) is float and type(value) is int):
            problems.append(f"{name}={value!r} is a {type(value).__name__}, not a {type(default).__name__}")
        elif allowed is not None and value not in allowed:
            problems.append(f"{name}={value!r} is not one of the allowed values {list(allowed)}")
        else:
            valid[name] = value
    return valid, problems


class TuneCache:
    """Tuned parameters in one JSON file, ``tune_cache.json`` under :func:`default_cache_dir`.

    Parameters
    ----------
    path : str or Path, optional
        The cache file (its folder is created on first store).

    Notes
    -----
    * ``store`` takes an exclusive ``flock`` on ``<file>.lock``, re-reads the file, merges its entry and
      writes a temporary file that replaces the cache with ``os.replace``; so concurrent tuners keep each
      other's entries and a reader never sees a half-written file.
    * A file that is not a valid cache is set aside as ``<file>.corrupt`` on the next store.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_cache_dir() / "tune_cache.json"

    def __repr__(self) -> str:
        return f"TuneCache({str(self.path)!r})"

    def _read(self) -> tuple[dict[str, Any], bool]:
        """The usable entries, and whether the file needs rewriting (damaged, or holding bad entries)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}, False
        except OSError as e:
            warnings.warn(f"tuning cache {self.path} cannot be read ({e}); ignoring it", stacklevel=3)
            return {}, False
        try:
            doc = json.loads(data.decode("utf-8"))
            entries = doc["entries"]
            if doc.get("format") != _FORMAT or not isinstance(entries, dict):
                raise ValueError(f"unknown format {doc.get('format')!r}")
        except (ValueError, KeyError, TypeError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            reason = "nested too deeply" if isinstance(e, RecursionError) else f"{type(e).__name__}: {e}"
            warnings.warn(
                f"tuning cache {self.path} is damaged ({reason}); treating it as empty, it will "
                "be set aside as .corrupt and rewritten on the next store",
                stacklevel=3,
            )
            return {}, True
        good = {k: v for k, v in entries.items() if _entry_problem(v) is None}
        if len(good) != len(entries):
            bad = {k[:12]: _entry_problem(v) for k, v in entries.items() if k not in good}
            warnings.warn(
                f"tuning cache {self.path}: ignoring {len(bad)} malformed entr"
                f"{'y' if len(bad) == 1 else 'ies'} ({bad}); they are dropped on the next store",
                stacklevel=3,
            )
        return good, len(good) != len(entries)

    def entries(self) -> dict[str, dict[str, Any]]:
        """Every entry, by key digest."""
        return self._read()[0]

    def entry(self, key_fields: Mapping[str, Any]) -> dict[str, Any] | None:
        """The full stored entry (params, metric, gain, key, time) for a key, or ``None``."""
        return self.entries().get(key_digest(key_fields))

    def lookup(self, key_fields: Mapping[str, Any]) -> dict[str, Any] | None:
        """The tuned parameters for a key, or ``None`` on a miss."""
        found = self.entry(key_fields)
        return dict(found["params"]) if found is not None else None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a+b") as lock:
            try:
                import fcntl
            except ImportError:  # Windows: no flock; writes stay atomic, concurrent merges may race
                yield
                return
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def store(self, key_fields: Mapping[str, Any], result: TuneResult | Mapping[str, Any]) -> str:
        """Store the best parameters of ``result`` (a :class:`TuneResult` or a mapping with ``params``).

        Returns
        -------
        str
            The key digest.
        """
        digest = key_digest(key_fields)
        entry = dict(result) if isinstance(result, Mapping) else result.cache_entry()
        if not isinstance(entry.get("params"), Mapping):
            raise InvalidArgumentError(
                f"a cache entry needs a 'params' mapping (got {entry.get('params')!r})"
            )
        entry["key"] = json.loads(_canonical(key_fields))
        entry["stored_at"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        with self._locked():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # already reported by lookups; we set it aside below
                entries, damaged = self._read()
            if damaged:
                shutil.copyfile(self.path, self.path.with_name(self.path.name + ".corrupt"))
            entries[digest] = entry
            self._write({"format": _FORMAT, "entries": entries})
        return digest

    def remove(self, key_fields: Mapping[str, Any]) -> bool:
        """Forget one key; whether it was present."""
        digest = key_digest(key_fields)
        with self._locked():
            entries, _ = self._read()
            if entries.pop(digest, None) is None:
                return False
            self._write({"format": _FORMAT, "entries": entries})
        return True

    def _write(self, doc: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1, sort_keys=True, allow_nan=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


@dataclass(frozen=True)
class ParamChoice:
    """The parameters a stage runs with, and where they came from (for the load/run report)."""

    params: dict[str, Any]
    source: str  # "tuned" | "default"
    reason: str

    @property
    def is_tuned(self) -> bool:
        return self.source == "tuned"


def resolve_params(
    key_fields: Mapping[str, Any], defaults: Mapping[str, Any], *, cache: TuneCache | None = None
) -> ParamChoice:
    """Tuned parameters when the cache has this exact key, else the defaults. Never raises.

    Tuned values are overlaid on the defaults; an entry naming a parameter the defaults do not have
    (a kernel changed without its source hash changing) is ignored.
    """
    try:
        cache = cache if cache is not None else TuneCache()
        tuned = cache.lookup(key_fields)
    except Exception as e:  # the cache is an optimisation: any failure means "run with the defaults"
        return ParamChoice(dict(defaults), "default", f"tuning cache unusable ({type(e).__name__}: {e})")
    if tuned is None:
        return ParamChoice(dict(defaults), "default", f"no tuned entry in {cache.path}")
    unknown = sorted(set(tuned) - set(defaults))
    if unknown:
        return ParamChoice(
            dict(defaults), "default", f"tuned entry names unknown parameters {unknown}; re-run pipelink tune"
        )
    _, problems = validate_tuned(tuned, {k: (v, None) for k, v in defaults.items()})
    if problems:
        return ParamChoice(
            dict(defaults), "default", f"tuned entry ignored: {'; '.join(problems)}; re-run pipelink tune"
        )
    where = f"tuned entry {key_digest(key_fields)[:12]} in {cache.path}"
    return ParamChoice({**defaults, **tuned}, "tuned", where)
