"""Read a pipeline config: a path to JSON (with comments and trailing commas allowed) or a parsed dict.

Only reads and parses, refusing what no later step could handle safely (a key repeated in one object,
nesting deeper than MAX_DEPTH, numbers past the float range) and a top level that is not an object; the
schema and semantic rules are ``validate``'s.
"""

from __future__ import annotations

import bisect
import copy
import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ErrorCode, InvalidArgumentError, Problem
from ..limits import format_bytes
from .schema_errors import json_pointer

__all__ = [
    "read_config",
    "read_config_bytes",
    "loads_relaxed",
    "strip_json_extras",
    "check_tree",
    "MAX_DEPTH",
    "MAX_CONFIG_BYTES",
]


MAX_DEPTH = 64  # a pipeline config is a few levels deep; this bounds every recursive consumer of it
# Weights live in .npz files, so a config is text about stages: an imported ONNX model of ten thousand
# nodes is a few MiB. The bound keeps a path such as /dev/zero from being read until memory runs out.
MAX_CONFIG_BYTES = 64 << 20

# A JSON string, unrolled so long strings are matched in one step. Strings come first in every scan, so
# comment markers and commas inside them are never touched.
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRINGS = re.compile(_STRING)
_NOT_NEWLINE = re.compile(r"[^\r\n]")
_BLANKS = " \t\r\n"
_TOKENS = re.compile(_STRING + r"|[{}\[\]:,]")


class _RelaxedJSONError(ValueError):
    """A lexical problem found before the JSON parser runs (an unterminated comment or string)."""

    def __init__(self, reason: str, pos: int):
        super().__init__(reason)
        self.reason = reason
        self.pos = pos


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _blank_comments(text: str) -> tuple[str, list[tuple[int, int]]]:
    """The text with comments blanked (newlines kept), and the spans of its strings.

    Jumps between quotes and slashes with ``str.find`` (a regular expression tried at every offset is
    several times slower on large files); each string is skipped with one compiled match.
    """
    pieces, spans, last = [], [], 0
    i, n = 0, len(text)
    next_quote, next_slash = text.find('"'), text.find("/")
    while next_slash >= 0:
        if 0 <= next_quote < next_slash:
            m = _STRINGS.match(text, next_quote)
            if m is None:
                break  # an unterminated string: the parser reports it
            spans.append(m.span())
            i = m.end()
        else:
            i = next_slash
            end = -1
            if text.startswith("//", i):
                end = text.find("\n", i)
                end = n if end < 0 else end
            elif text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise _RelaxedJSONError("unterminated /* comment (add the closing */)", i)
                end += 2
            if end < 0:
                i += 1  # a lone '/': the parser reports it
            else:
                pieces += (text[last:i], _NOT_NEWLINE.sub(" ", text[i:end]))
                last = i = end
        if next_quote < i:
            next_quote = text.find('"', i)
        if next_slash < i:
            next_slash = text.find("/", i)
    pieces.append(text[last:])
    if next_slash < 0:  # the strings after the last comment are needed too
        spans += (m.span() for m in _STRINGS.finditer(text, i))
    return "".join(pieces), spans


def _trailing_commas(text: str, spans: list[tuple[int, int]] | None) -> list[int]:
    """Offsets of commas after a value with only blanks before a ']' or '}', outside strings."""
    candidates = []
    for close in "]}":  # str.find is far faster than a regular expression tried at every offset
        i = text.find(close)
        while i >= 0:
            j = i - 1
            while j >= 0 and text[j] in _BLANKS:
                j -= 1
            if j >= 0 and text[j] == ",":
                candidates.append(j)
            i = text.find(close, i + 1)
    if not candidates:
        return []
    if spans is None:
        spans = [m.span() for m in _STRINGS.finditer(text)]
    starts = [start for start, _ in spans]
    commas = []
    for pos in sorted(candidates):
        k = bisect.bisect_right(starts, pos) - 1
        if k >= 0 and spans[k][1] > pos:
            continue  # inside a string
        j = pos - 1
        while j >= 0 and text[j] in _BLANKS:
            j -= 1
        if j >= 0 and text[j] not in "[{,":  # '[,]' and '[1,,]' stay errors for the parser
            commas.append(pos)
    return commas


def strip_json_extras(text: str) -> str:
    """Blank out ``//`` and ``/* */`` comments and trailing commas, keeping every character's position.

    Comments and removed commas become spaces (newlines are kept), so line and column numbers the JSON
    parser reports still point into the original text. ``//`` inside a string (a URL, a path) is kept.
    Scanning is done by compiled regular expressions and ``str.find``, and is skipped when there is
    nothing to strip, so a 50 MB file takes well under a second.

    Raises
    ------
    _RelaxedJSONError
        For an unterminated ``/*`` comment.
    """
    spans = None
    if "//" in text or "/*" in text:
        text, spans = _blank_comments(text)
    commas = _trailing_commas(text, spans)
    if not commas:
        return text
    pieces, last = [], 0
    for pos in commas:
        pieces += (text[last:pos], " ")
        last = pos + 1
    pieces.append(text[last:])
    return "".join(pieces)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (use a finite number)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return obj


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _find_duplicate(text: str) -> tuple[list[str | int], str, int, int] | None:
    """The first key repeated within one object: (pointer parts of the object, key, first, second offset).

    A scan of the (comment-free) text, iterative so any nesting depth is fine; it runs only after the parser
    found a duplicate, to say where both are.
    """
    frames: list[list[Any]] = []  # [is_object, {key: offset}, current key or index, expecting a key]
    pending: tuple[str, int] | None = None
    for m in _TOKENS.finditer(text):
        tok = m.group()
        top = frames[-1] if frames else None
        if tok[0] == '"':
            if top is not None and top[0] and top[3]:
                pending = (json.loads(tok), m.start())
        elif tok in "{[":
            frames.append([tok == "{", {}, None if tok == "{" else 0, tok == "{"])
        elif tok in "}]":
            if frames:
                frames.pop()
        elif tok == "," and top is not None:
            if top[0]:
                top[3] = True
            else:
                top[2] += 1
        elif tok == ":" and top is not None and top[0] and pending is not None:
            key, pos = pending
            if key in top[1]:
                return [f[2] for f in frames[:-1]], key, top[1][key], pos
            top[1][key], top[2], top[3], pending = pos, key, False, None
    return None


_NUMBERS = frozenset({int, float, bool})
_SCALARS = frozenset({str, bool, type(None)})


def _finite(value: Any) -> bool:
    """Whether a JSON number converts to a finite float (an integer past about 1.8e308 does not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _all_finite(values: Any) -> bool:
    try:
        return all(map(math.isfinite, values))
    except OverflowError:
        return False


def _first_bad(doc: Any) -> bool:
    """Whether some value is nested deeper than MAX_DEPTH or is a non-finite number (no paths: fast)."""
    stack = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if depth >= MAX_DEPTH:
            return True
        if value.__class__ is list:
            kinds = set(map(type, value))  # one C-level pass decides large homogeneous tables
            if kinds <= _NUMBERS:
                if not _all_finite(value):
                    return True
                continue
            if kinds <= _SCALARS:
                continue
        for child in value.values() if value.__class__ is dict else value:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
            elif child.__class__ in _NUMBERS and not _finite(child):
                return True
    return False


def check_tree(doc: Any) -> tuple[str, list[str | int]] | None:
    """The first value that is nested deeper than MAX_DEPTH or is a non-finite number, with its path.

    Iterative, so it cannot itself run out of stack on a hostile document.
    """
    if not isinstance(doc, dict | list) or not _first_bad(doc):
        return None
    stack: list[tuple[Any, list[str | int]]] = [(doc, [])]
    while stack:  # something is wrong: walk again, keeping paths, to say where
        value, path = stack.pop()
        if isinstance(value, dict | list):
            if len(path) >= MAX_DEPTH:
                return (
                    f"nested more than {MAX_DEPTH} levels deep; a pipeline config needs only a few "
                    "levels: flatten it",
                    path,
                )
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((v, [*path, k]) for k, v in items if isinstance(v, dict | list | float | int))
        elif isinstance(value, int | float) and not _finite(value):
            shown = value if isinstance(value, float) else f"of {len(str(abs(value)))} digits"
            return (
                f"number {shown} is out of range: JSON numbers must be finite "
                "(at most about 1.8e308 in magnitude)",
                path,
            )
    return None


def loads_relaxed(text: str) -> Any:
    """Parse JSON that may contain ``//`` and ``/* */`` comments and trailing commas.

    Raises
    ------
    json.JSONDecodeError
        With the line and column in the original text, also for a key repeated within one object
        (the message gives both places) and for nesting too deep to parse.
    """
    try:
        stripped = strip_json_extras(text)
    except _RelaxedJSONError as e:
        raise json.JSONDecodeError(e.reason, text, e.pos) from None
    try:
        return json.loads(stripped, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        found = _find_duplicate(stripped)
        if found is None:  # cannot happen for text the parser accepted; report without the places
            raise json.JSONDecodeError(f"duplicate key {e.key!r} in an object", text, 0) from None
        where, key, first, second = found
        line, col = _line_col(text, first)
        obj = f" in {json_pointer(where)}" if where else ""
        raise json.JSONDecodeError(
            f"duplicate key {key!r}{obj} (first at line {line}, column {col}); the last would silently "
            "win: keep one",
            text,
            second,
        ) from None
    except RecursionError:
        raise json.JSONDecodeError(
            f"nested too deeply to parse (a config needs at most {MAX_DEPTH} levels)", text, 0
        ) from None


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


def _raise_if_hostile(doc: Any, label: str) -> None:
    found = check_tree(doc)
    if found is not None:
        reason, path = found
        pointer = json_pointer(path) or "/"
        raise ConfigError(
            f"{label}: {pointer}: {reason}",
            errors=[Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, json_pointer(path), reason)],
            file=label,
        )


def read_config_bytes(path: Path, label: str) -> bytes:
    """The bytes of a config file: refused before opening unless it is a regular file (opening a FIFO
    waits for a writer, a device never ends) and once past MAX_CONFIG_BYTES.

    Raises
    ------
    ConfigError
        Not a regular file, or too large.
    OSError
        What opening or reading raised (FileNotFoundError, IsADirectoryError, PermissionError...).
    """
    st = path.stat()
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), label)
    if not stat.S_ISREG(mode):
        raise _fail(
            f"config path is not a regular file (a device, FIFO or socket): {label}; save the config "
            "to a file",
            file=label,
        )
    data = b""
    if st.st_size <= MAX_CONFIG_BYTES:  # the size a file reports is checked first, what it holds after
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    if st.st_size > MAX_CONFIG_BYTES or len(data) > MAX_CONFIG_BYTES:
        raise _fail(
            f"config file {label} is larger than {format_bytes(MAX_CONFIG_BYTES)}; a config describes "
            "stages (put arrays in its 'weights' .npz file)",
            file=label,
        )
    return data


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
        When the file is missing, unreadable, not a regular file or larger than MAX_CONFIG_BYTES, is
        not UTF-8, is not valid JSON (the message gives the
        file, line, column and the parser's reason, and ``.errors`` holds one problem at ``""``), or
        its top level is not an object.
    InvalidArgumentError
        When ``source`` is neither a path nor a dict.
    """
    if isinstance(source, dict):
        _raise_if_hostile(source, "<dict>")
        return copy.deepcopy(source), Path.cwd(), None
    if not isinstance(source, str | Path):
        raise InvalidArgumentError(
            f"a config must be a path (str or pathlib.Path) or a dict (got {type(source).__name__})"
        )
    path = Path(source).expanduser()
    label = str(path)
    try:
        data = read_config_bytes(path, label)
    except ConfigError:
        raise
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
    _raise_if_hostile(doc, label)
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
