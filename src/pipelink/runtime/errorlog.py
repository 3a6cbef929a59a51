"""The error log (seed section 5.3): one JSON line per stage failure, to a file the user chooses.

Writing never raises into a run: a log that cannot be written is reported once through logging.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["configure_error_log", "record", "error_log_path"]

log = logging.getLogger("pipelink")
_path: Path | None = None
_lock = threading.Lock()
_warned = False


def configure_error_log(path: str | os.PathLike | None) -> None:
    """Append a JSON line for every stage failure to ``path`` (None turns the log off).

    Each line has: time, code, stage, operator, module path and version, device name and UUID, CUDA error
    code and name (when there is one), and the message. ``PIPELINK_ERROR_LOG`` sets it from the
    environment.
    """
    global _path
    if path is not None and not isinstance(path, str | os.PathLike):
        raise InvalidArgumentError(f"the error log is a file path or None (got {type(path).__name__})")
    with _lock:
        _path = Path(path) if path is not None else None
        if _path is not None:
            _path.parent.mkdir(parents=True, exist_ok=True)


def error_log_path() -> Path | None:
    return _path


def record(error, stage, graph) -> None:
    """Append one failure (called by the executor for every failed stage, whatever its policy)."""
    global _warned
    path = _path
    if path is None:
        return
    ctx: dict[str, Any] = error.context
    info = graph.info
    entry = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z",
        "code": error.code.name,
        "stage": stage.id,
        "operator": stage.desc.name,
        "module": stage.desc.source,
        "version": str(stage.desc.version),
        "policy": stage.config.on_error.kind,
        "device": info.name,
        "device_uuid": info.uuid,
        "cuda_error_code": ctx.get("cuda_code", ctx.get("cuda_error_code")),
        "cuda_error_name": ctx.get("cuda_error"),
        "message": error.message,
    }
    line = json.dumps(entry, default=str) + "\n"
    try:
        with _lock, open(path, "a", encoding="utf-8") as f:
            f.write(line)
    except OSError as e:
        if not _warned:
            _warned = True
            log.warning("pipelink: cannot write the error log %s: %s", path, e)


if os.environ.get("PIPELINK_ERROR_LOG"):
    configure_error_log(os.environ["PIPELINK_ERROR_LOG"])
