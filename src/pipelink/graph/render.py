"""Drawing a pipeline: Graphviz DOT text, rendered to SVG/PNG when the ``dot`` program is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..errors import InvalidArgumentError

__all__ = ["render", "write"]


def _q(*lines: object) -> str:
    """A DOT string of one or more label lines: quotes and backslashes escaped, lines joined by DOT's
    own line break (an escaped user text never produces one)."""
    escaped = (str(line).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") for line in lines)
    return '"' + "\\n".join(escaped) + '"'


def _shape(shape) -> str:
    """``8x1024`` (``scalar`` for 0-d), as the CLI prints shapes."""
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


def render(pipe) -> str:
    """DOT text: stages as boxes, external inputs and outputs as ellipses, tensors as edge labels."""
    graph = pipe.graph
    lines = [f"digraph {_q(pipe.name)} {{", "  rankdir=LR;", '  node [fontname="Helvetica"];']
    for name in graph.external_inputs:
        t = graph.tensors[name]
        label = _q(name, f"{_shape(t.shape)} {t.dtype}") if t.shape is not None else _q(name)
        lines.append(f"  {_q('in:' + name)} [shape=ellipse, label={label}];")
    for st in graph.stages:
        policy = st.config.on_error.kind
        extra = ", style=dashed" if policy != "fail" else ""
        label = _q(st.id, f"{st.desc.name}@{st.desc.version}")
        lines.append(f"  {_q('stage:' + st.id)} [shape=box{extra}, label={label}];")
    producer = {}
    for st in graph.stages:
        for name in st.outputs:
            producer[name] = "stage:" + st.id
    for st in graph.stages:
        for name in st.inputs:
            if name is None:
                continue
            src = producer.get(name, "in:" + name)
            t = graph.tensors[name]
            label = _q(name, _shape(t.shape)) if t.shape is not None and name in producer else _q(name)
            lines.append(f"  {_q(src)} -> {_q('stage:' + st.id)} [label={label}];")
    for name in graph.outputs:
        lines.append(f"  {_q('out:' + name)} [shape=ellipse, style=bold, label={_q(name)}];")
        lines.append(f"  {_q(producer.get(name, 'in:' + name))} -> {_q('out:' + name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write(dot: str, path: Path) -> None:
    """Write DOT text, or render it to ``.svg``/``.png`` with Graphviz."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in ("", ".dot", ".gv"):
        path.write_text(dot)
        return
    if suffix not in (".svg", ".png", ".pdf"):
        raise InvalidArgumentError(f"graph output must end in .dot, .svg, .png or .pdf (got {path.name!r})")
    exe = shutil.which("dot")
    if exe is None:
        raise InvalidArgumentError(
            f"rendering {suffix} needs Graphviz's 'dot' program (apt-get install graphviz); "
            f"use -o {path.with_suffix('.dot').name} for DOT text"
        )
    result = subprocess.run(
        [exe, f"-T{suffix[1:]}", "-o", str(path)], input=dot, text=True, capture_output=True, check=False
    )
    if result.returncode != 0:
        raise InvalidArgumentError(f"graphviz failed: {result.stderr.strip()}")
