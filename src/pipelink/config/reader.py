"""Read a pipeline config: a path to JSON (with comments and trailing commas allowed) or a parsed dict.

Only reads and parses; never validates beyond "the top level is an object".
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ErrorCode, InvalidArgumentError, Problem

__all__ = ["read_config", "loads_relaxed", "strip_json_extras"]


class _RelaxedJSONError(ValueError):
    """A lexical problem found before the JSON parser runs (an unterminated comment or string)."""

    def __init__(self, reason: str, pos: int):
        super().__init__(reason)
        self.reason = reason
        self.pos = pos


def strip_json_extras(text: str) -> str:
    """Blank out ``//`` and ``/* */`` comments and trailing commas, keeping every character's position.

    Comments and removed commas become spaces (newlines are kept), so line and column numbers the JSON
    parser reports still point into the original text. ``//`` inside a string (a URL, a path) is kept.

    Raises
    ------
    _RelaxedJSONError
        For an unterminated ``/*`` comment.
    """
    out = list(text)
    i, n = 0, len(text)
    last_comma = -1  # index of a comma after a value, with only blanks/comments after it so far
    prev = ""  # the previous significant character outside strings and comments
    while i < n:
        c = text[i]
        if c == '"':
            last_comma, prev = -1, '"'
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1  # past the closing quote; an unterminated string is left for json to report
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            for k in range(i, end):
                out[k] = " "
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise _RelaxedJSONError("unterminated /* comment (add the closing */)", i)
            for k in range(i, end + 2):
                if out[k] not in "\r\n":
                    out[k] = " "
            i = end + 2
        else:
            if c in "]}" and last_comma >= 0:
                out[last_comma] = " "
            if c == ",":
                last_comma = i if prev not in ("", "[", "{", ",") else -1
            elif not c.isspace():
                last_comma = -1
            if not c.isspace():
                prev = c
            i += 1
    return "".join(out)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (use a finite number)")


def loads_relaxed(text: str) -> Any:
    """Parse JSON that may contain ``//`` and ``/* */`` comments and trailing commas.

    Raises
    ------
    json.JSONDecodeError
        With the line and column in the original text.
    """
    try:
        stripped = strip_json_extras(text)
    except _RelaxedJSONError as e:
        raise json.JSONDecodeError(e.reason, text, e.pos) from None
    return json.loads(stripped, parse_constant=_reject_constant)


def _parse_error(label: str, text: str, err: json.JSONDecodeError) -> ConfigError:
    lines = text.splitlines()
    excerpt = ""
    if 0 < err.lineno <= len(lines):
        line = lines[err.lineno - 1].expandtabs(1)
        if len(line) <= 200:
            excerpt = f"\n    {line}\n    {' ' * (err.colno - 1)}^"
    message = f"{label}: line {err.lineno}, column {err.colno}: invalid JSON: {err.msg}{excerpt}"
    return ConfigError(
        message,
        errors=[Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, "", message)],
        file=label,
        line=err.lineno,
        column=err.colno,
    )


def _fail(message: str, **context: Any) -> ConfigError:
    return ConfigError(
        message, errors=[Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, "", message)], **context
    )


def read_config(source: str | Path | dict[str, Any]) -> tuple[dict[str, Any], Path, Path | None]:
    """Read a config from a file or take an already-parsed one.

    Parameters
    ----------
    source : str, Path or dict
        A path to a JSON file (``//`` and ``/* */`` comments and trailing commas are accepted), or a
        parsed document (deep-copied, so later edits to it do not change what was read).

    Returns
    -------
    doc : dict
        The document.
    base_dir : Path
        The file's directory (absolute), or the current directory for a dict; relative ``library``
        paths start here.
    source_path : Path or None
        The absolute path of the file, None for a dict.

    Raises
    ------
    ConfigError
        When the file is missing or unreadable, is not UTF-8, is not valid JSON (the message gives the
        file, line, column and the parser's reason, and ``.errors`` holds one problem at ``""``), or
        its top level is not an object.
    InvalidArgumentError
        When ``source`` is neither a path nor a dict.
    """
    if isinstance(source, dict):
        return copy.deepcopy(source), Path.cwd(), None
    if not isinstance(source, str | Path):
        raise InvalidArgumentError(
            f"a config must be a path (str or pathlib.Path) or a dict (got {type(source).__name__})"
        )
    path = Path(source).expanduser()
    label = str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        hint = (
            " (to load JSON text, parse it with json.loads first)" if str(source).lstrip()[:1] in "{[" else ""
        )
        raise _fail(f"config file not found: {label}{hint}", file=label) from None
    except IsADirectoryError:
        raise _fail(f"config path is a directory, not a file: {label}", file=label) from None
    except OSError as e:
        raise _fail(f"cannot read config file {label}: {e.strerror or e}", file=label) from e
    except ValueError as e:  # e.g. a NUL byte in the path
        raise _fail(f"not a usable config path {label!r}: {e}", file=label) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _fail(
            f"{label}: not UTF-8 text (byte {e.start}: {e.reason}); save the config as UTF-8", file=label
        ) from e
    try:
        doc = loads_relaxed(text)
    except json.JSONDecodeError as e:
        raise _parse_error(label, text, e) from e
    except ValueError as e:  # NaN / Infinity
        raise _fail(f"{label}: invalid JSON: {e}", file=label) from e
    if not isinstance(doc, dict):
        kind = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(
            type(doc), "null"
        )
        raise _fail(
            f"{label}: the top level of a config must be an object {{...}} with a 'pipeline' "
            f"(got a JSON {kind})",
            file=label,
        )
    resolved = path.resolve()
    return doc, resolved.parent, resolved
