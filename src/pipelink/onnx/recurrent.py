"""ONNX LSTM, GRU and RNN lowered at import onto PipeLink's existing operators, unrolled over the time
steps: one gemm projects every step's input at once (``X @ W^T + bias``), then per step one gemm adds the
recurrent product (``h @ R^T``, the step's projection as its bias), and slice, split, the activations
(sigmoid, tanh, relu, softsign, softplus), mul, add and sub make the gates and the new state; Y is the
concat of the steps' h.

Variable sequence lengths (a constant ``sequence_lens``, some entry below seq_length) mask each step:
a batch row past its length keeps its state (``where``) and gives zeros in Y, so Y_h (Y_c) is the state
after its last step; a reverse direction starts, per row, at its own last step (the rows still before it
keep their initial state until then), as the spec has it.

It adds no kernel and computes nothing at run time itself; what those operators cannot express exactly
(computed weights or sequence lengths, an unknown sequence length, activations with parameters, LSTM's
input_forget) is refused with :class:`RecurrentError`, naming the input or the attribute; the converter
reports it with the node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from ..ops.shape import MAX_PARTS

__all__ = ["MAX_STEPS", "RECURRENT_OPS", "RecurrentError", "lower_recurrent"]

#: The most time steps a recurrence is unrolled over. Measured on the 2-core development machine, a
#: bidirectional LSTM (hidden 4) of 256 steps is 6,150 stages: import 0.1 s, load 1.5 s; of 1,024 steps,
#: 24,606 stages: import 0.4 s, load 12 s (the memory plan's best fit among many small free blocks
#: grows faster than the stage count). A hostile seq_length of 10**5 would take hours.
MAX_STEPS = 1024

#: The ONNX op types lowered here: (gate count, default activations per direction).
RECURRENT_OPS: dict[str, tuple[int, tuple[str, ...]]] = {
    "LSTM": (4, ("Sigmoid", "Tanh", "Tanh")),
    "GRU": (3, ("Sigmoid", "Tanh")),
    "RNN": (1, ("Tanh",)),
}
#: The activations without parameters (names as the spec writes them, matched without regard to case,
#: as onnxruntime does) -> the PipeLink operator computing each.
_ACTIVATIONS = {
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Relu": "relu",
    "Softsign": "softsign",
    "Softplus": "softplus",
}
_BY_LOWER = {name.lower(): op for name, op in _ACTIVATIONS.items()}
_DIRECTIONS = ("forward", "reverse", "bidirectional")


@dataclass
class _Cell:
    """What one node's lowering reads: sizes, layout, the activations of each direction and clip."""

    g: Any  # the converter's Graph
    node: Any  # the converter's Node
    base: str  # the prefix of every internal tensor name
    dtype: np.dtype
    seq: int
    hidden: int
    time_axis: int  # 0 (layout 0: [seq, batch, ...]) or 1 (layout 1: [batch, seq, ...])
    acts: list[list[str]]  # per direction, the PipeLink operators of the spec's f, g (, h)
    clip: float | None
    lengths: np.ndarray | None = None  # sequence_lens when some row is shorter than seq, else None

    def active(self, t: int) -> str:
        """A bool constant, true for the batch rows whose sequence reaches step ``t``, shaped as a
        step's slice (time axis of size 1, hidden axis of size 1) so that it broadcasts over h."""
        assert self.lengths is not None
        rows = (self.lengths > t).reshape((1, -1, 1) if self.time_axis == 0 else (-1, 1, 1))
        name = f"{self.base}__active_t{t}"
        self.g.constants[name] = rows
        self.g.dtypes[name] = "bool"
        return name

    def constant(self, tag: str, value: np.ndarray) -> str:
        name = f"{self.base}__{tag}"
        self.g.constants[name] = np.ascontiguousarray(value, dtype=self.dtype)
        self.g.dtypes[name] = get_dtype(self.dtype).name
        return name

    def op(self, operator: str, inputs: list[str], tag: str, **attrs: Any) -> str:
        out = f"{self.base}__{tag}"
        self.g.stage(self.node, operator, inputs, [out], **attrs)
        return out

    def columns(self, proj: str, t: int, start: int, stop: int, tag: str) -> str:
        """Step ``t``'s columns ``start:stop`` of the projection (the time axis kept, of size 1)."""
        return self.op("slice", [proj], tag, starts=[t, start], ends=[t + 1, stop], axes=[self.time_axis, 2])

    def split(self, x: str, parts: int, tag: str) -> list[str]:
        outs = [f"{self.base}__{tag}{k}" for k in range(parts)]
        self.g.stage(self.node, "split", [x], outs, axis=2, split=[self.hidden] * parts)
        return outs

    def activate(self, operator: str, x: str, tag: str, clipped: bool = True) -> str:
        """``operator(x)``, x first clipped to ``[-clip, clip]`` (max, then min) when the node clips and
        ``clipped`` (the gates' inputs; LSTM's cell state goes to h unclipped, as onnxruntime runs it)."""
        if self.clip is not None and clipped:
            low = self.constant("clip_low", np.array(-self.clip))  # the same two constants every time
            high = self.constant("clip_high", np.array(self.clip))
            x = self.op("min", [self.op("max", [x, low], f"{tag}_clip_low"), high], f"{tag}_clipped")
        return self.op(operator, [x], tag)


class RecurrentError(ValueError):
    """Why an LSTM, GRU or RNN node cannot be lowered onto PipeLink's operators."""


def _attr(node, name: str, default: Any = None) -> Any:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _input(node, index: int) -> str:
    return node.inputs[index] if index < len(node.inputs) and node.inputs[index] else ""


def lower_recurrent(g, node) -> None:
    """Add the stages of an ONNX LSTM, GRU or RNN ``node`` to ``g`` (see the module docstring).

    Parameters
    ----------
    g, node
        The converter's Graph and Node (``convert.py``); every check is made before the first stage.

    Raises
    ------
    RecurrentError
        W, R, B, P or sequence_lens computed; seq_length or the input's rank unknown;
        an activation other than Sigmoid, Tanh, Relu, Softsign or Softplus, activation_alpha or
        activation_beta; LSTM's input_forget = 1; weights that are not floats; sizes that disagree.
    """
    cell, weights = _read(g, node)
    {"LSTM": _lstm, "GRU": _gru, "RNN": _rnn}[node.op_type](cell, *weights)


def _read(g, node) -> tuple[_Cell, tuple]:
    """The node's sizes, attributes and constant weights, checked; ``(cell, weights)``."""
    op = node.op_type
    gates, default_acts = RECURRENT_OPS[op]
    direction = _attr(node, "direction", "forward")
    if direction not in _DIRECTIONS:
        raise RecurrentError(f"direction {direction!r}; the spec has {', '.join(_DIRECTIONS)}")
    dirs = 2 if direction == "bidirectional" else 1
    for name in ("activation_alpha", "activation_beta"):
        if name in node.attrs:
            raise RecurrentError(
                f"attribute {name} is not supported (only the activations {', '.join(_ACTIVATIONS)}, which "
                "take no parameters)"
            )
    if op == "LSTM" and int(_attr(node, "input_forget", 0)):
        raise RecurrentError("attribute input_forget=1 (coupled input and forget gates) is not supported")
    acts = [str(a.decode() if isinstance(a, bytes) else a) for a in _attr(node, "activations", [])]
    acts = acts or list(default_acts) * dirs
    if len(acts) != len(default_acts) * dirs:
        raise RecurrentError(
            f"attribute activations has {len(acts)} names; {op} with direction {direction!r} takes "
            f"{len(default_acts) * dirs} ({', '.join(default_acts)} per direction)"
        )
    for name in acts:
        if name.lower() not in _BY_LOWER:
            raise RecurrentError(
                f"attribute activations: {name!r} is not supported (PipeLink lowers "
                f"{', '.join(_ACTIVATIONS)}; those with alpha or beta are not)"
            )
    per_dir = [
        [_BY_LOWER[a.lower()] for a in acts[d * len(default_acts) : (d + 1) * len(default_acts)]]
        for d in range(dirs)
    ]

    def weight(index: int, what: str) -> np.ndarray | None:  # the Graph's refusal names a graph input
        value = g.const(node, index, what)
        return None if value is None else np.asarray(value)

    w, r, b = weight(1, "W"), weight(2, "R"), weight(3, "B")
    peep = weight(7, "P") if op == "LSTM" else None
    if w is None or r is None:
        raise RecurrentError(f"{op} needs its W and R inputs")
    if w.ndim != 3 or r.ndim != 3 or r.shape[1] % gates or w.shape[:2] != r.shape[:2]:
        rows = f"[num_directions, {gates}*hidden_size"
        raise RecurrentError(
            f"W {list(w.shape)} and R {list(r.shape)} must be {rows}, input_size] and {rows}, hidden_size]"
        )
    hidden = r.shape[2]
    if r.shape[1] != gates * hidden or w.shape[0] != dirs:
        raise RecurrentError(
            f"R {list(r.shape)} and W {list(w.shape)} do not fit direction {direction!r} "
            f"(num_directions {dirs}) and {gates} gates of hidden_size {hidden}"
        )
    if "hidden_size" in node.attrs and int(node.attrs["hidden_size"]) != hidden:
        raise RecurrentError(f"attribute hidden_size={node.attrs['hidden_size']} but R gives {hidden}")
    if b is not None and b.shape != (dirs, 2 * gates * hidden):
        raise RecurrentError(f"B {list(b.shape)} must be [{dirs}, {2 * gates * hidden}]")
    if peep is not None and peep.shape != (dirs, 3 * hidden):
        raise RecurrentError(f"P {list(peep.shape)} must be [{dirs}, {3 * hidden}]")
    layout = int(_attr(node, "layout", 0))
    if layout not in (0, 1):
        raise RecurrentError(f"attribute layout={layout}; the spec has 0 and 1")
    x = node.inputs[0] if node.inputs else ""
    shape = g.shapes.get(x)
    if shape is None or len(shape) != 3 or not isinstance(shape[layout], int):
        raise RecurrentError(
            f"{op} needs its input X {x!r} of rank 3 with seq_length (dim {layout}, layout {layout}) known "
            f"at import (got shape {None if shape is None else list(shape)})"
        )
    seq = int(shape[layout])
    if seq < 1:
        raise RecurrentError(f"X {x!r} has seq_length {seq}; at least one step is needed")
    if seq > MAX_STEPS:
        raise RecurrentError(
            f"X {x!r} has seq_length {seq}; the import unrolls a recurrence step by step (some ten stages a "
            f"step and direction), at most {MAX_STEPS} steps: export with shorter sequences, or run the "
            "recurrence as a native module"
        )
    lengths = g.const(node, 4, "sequence_lens")  # the Graph's refusal names a graph input
    if lengths is not None:
        lengths = np.asarray(lengths)
        batch = shape[1 - layout]
        if lengths.dtype.kind not in "iu" or lengths.ndim != 1:
            raise RecurrentError(
                f"sequence_lens must be a 1-d int32 tensor (got {lengths.dtype} {lengths.shape})"
            )
        if isinstance(batch, int) and lengths.shape[0] != batch:
            raise RecurrentError(f"sequence_lens has {lengths.shape[0]} entries for a batch of {batch}")
        if lengths.size and (lengths.min() < 0 or lengths.max() > seq):
            raise RecurrentError(
                f"sequence_lens {lengths.tolist()} must lie in [0, {seq}]: X {x!r} has seq_length {seq}"
            )
        lengths = None if np.all(lengths == seq) else lengths.astype(np.int64)
    clip = _attr(node, "clip")
    if clip is not None:
        clip = float(clip)
        if not clip > 0:
            raise RecurrentError(f"attribute clip={clip}; the threshold must be positive")
    dtype = np.dtype(w.dtype)
    if dtype.kind != "f" or any(np.dtype(v.dtype) != dtype for v in (r, b, peep) if v is not None):
        got = ", ".join(
            f"{k} {v.dtype}" for k, v in zip("WRBP", (w, r, b, peep), strict=True) if v is not None
        )
        raise RecurrentError(f"W, R, B and P must be floats of one dtype (got {got})")
    try:
        dtype_name = get_dtype(dtype).name
    except PipeLinkError:
        raise RecurrentError(f"W has dtype {dtype}, which PipeLink lacks") from None
    if g.dtypes.get(x) not in (None, dtype_name):
        raise RecurrentError(f"X {x!r} is {g.dtypes[x]} but W is {dtype}; they must have one type")
    base = next((o for o in node.outputs if o), node.name or op)
    cell = _Cell(g, node, base, dtype, seq, hidden, layout, per_dir, clip, lengths)
    if b is None:
        b = np.zeros((dirs, 2 * gates * hidden), dtype)
    return cell, (w, r, b, peep)


# -- the pieces every cell shares ---------------------------------------------------------------------
def _project(cell: _Cell, w: np.ndarray, b: np.ndarray) -> str:
    """One gemm: every step's input projection, ``X @ W'^T + b'``, for every direction (columns side by
    side). ``w`` [dirs, cols, input] and ``b`` [dirs, cols] are already in the cells' column order."""
    weight = cell.constant("w_t", np.concatenate(list(w), axis=0).T)
    bias = cell.constant("w_bias", b.reshape(-1))
    x = cell.node.inputs[0]
    return cell.op("gemm", [x, weight, bias], "projection")


def _initial(cell: _Cell, index: int, d: int, dirs: int) -> str | None:
    """Direction ``d``'s slice of the initial state input ``index`` (None when absent: zeros)."""
    name = _input(cell.node, index)
    if not name or dirs == 1:
        return name or None
    axis = cell.time_axis  # [num_directions, batch, hidden], or [batch, num_directions, hidden]
    return cell.op("slice", [name], f"init{index}_d{d}", starts=[d], ends=[d + 1], axes=[axis])


def _collect(cell: _Cell, outputs: list[list[str]], finals: list[list[str]]) -> None:
    """Y from each direction's per-step h (in time order), Y_h (Y_c) from each direction's last state."""
    node, axis = cell.node, cell.time_axis
    y = node.outputs[0] if node.outputs and node.outputs[0] else ""
    if y:
        per_dir = []
        for d, steps in enumerate(outputs):
            joined = _concat(cell, steps, axis, f"y_d{d}")
            if len(outputs) == 1:
                cell.g.stage(node, "unsqueeze", [joined], [y], axes=[axis + 1])
            else:
                per_dir.append(cell.op("unsqueeze", [joined], f"y_d{d}_dir", axes=[axis + 1]))
        if per_dir:
            cell.g.stage(node, "concat", per_dir, [y], axis=axis + 1)
    for k, states in enumerate(finals, start=1):
        out = node.outputs[k] if len(node.outputs) > k else ""
        if out and len(states) == 1:
            cell.g.stage(node, "identity", states, [out])
        elif out:
            cell.g.stage(node, "concat", states, [out], axis=axis)


def _concat(cell: _Cell, parts: list[str], axis: int, tag: str) -> str:
    """``parts`` joined along ``axis`` (a tree of concats of at most MAX_PARTS inputs each)."""
    level = 0
    while len(parts) > 1:
        parts = [
            cell.op("concat", parts[k : k + MAX_PARTS], f"{tag}_join{level}_{k // MAX_PARTS}", axis=axis)
            if len(parts[k : k + MAX_PARTS]) > 1
            else parts[k]
            for k in range(0, len(parts), MAX_PARTS)
        ]
        level += 1
    return parts[0]


def _unroll(
    cell: _Cell, dirs: int, step: Callable[[int, int, str], None], state: list[list], hs: list[list[str]]
) -> None:
    """Call ``step(d, t, tag)`` for each direction d at each time index t in the order it runs
    (backwards for direction 1 and for direction 'reverse'); ``step`` sets ``state[d]`` and appends the
    step's h to ``hs[d]``. With variable sequence lengths the rows past their length are masked after
    each step: their state stays what it was (the initial state, zeros when absent, until a reverse
    direction reaches the row's last step) and their h in Y is zero."""
    reverse = _attr(cell.node, "direction", "forward") == "reverse"
    for d in range(dirs):
        for s in range(cell.seq):
            t = cell.seq - 1 - s if (d == 1 or reverse) else s
            before = list(state[d])
            step(d, t, f"d{d}_t{t}")
            if cell.lengths is None or np.all(cell.lengths > t):
                continue
            active, tag = cell.active(t), f"d{d}_t{t}"
            zero = cell.constant("zero", np.zeros(()))
            state[d] = [
                cell.op("where", [active, new, old if old is not None else zero], f"{tag}_kept{k}")
                for k, (new, old) in enumerate(zip(state[d], before, strict=True))
            ]
            hs[d][-1] = cell.op("where", [active, hs[d][-1], zero], f"{tag}_y")


def _in_time_order(hs: list[str], reversed_steps: bool) -> list[str]:
    return hs[::-1] if reversed_steps else hs


# -- the three cells ----------------------------------------------------------------------------------
def _lstm(cell: _Cell, w, r, b, peep) -> None:
    """ONNX LSTM: gates i, o, f, c; ``C = f*C' + i*g(c)``, ``h = o*h(C)``; peepholes p_i, p_o, p_f."""
    n, dirs = cell.hidden, len(cell.acts)
    proj = _project(cell, w, b[:, : 4 * n] + b[:, 4 * n :])
    r_t = [cell.constant(f"r_t_d{d}", r[d].T) for d in range(dirs)]
    peeps = None
    if peep is not None:
        peeps = [
            [cell.constant(f"p{g}_d{d}", peep[d, k * n : (k + 1) * n]) for k, g in enumerate("iof")]
            for d in range(dirs)
        ]
    hs: list[list[str]] = [[] for _ in range(dirs)]
    state = [[_initial(cell, 5, d, dirs), _initial(cell, 6, d, dirs)] for d in range(dirs)]

    def step(d: int, t: int, tag: str) -> None:
        h, c = state[d]
        f_act, g_act, h_act = cell.acts[d]
        pre = cell.columns(proj, t, d * 4 * n, (d + 1) * 4 * n, f"{tag}_x")
        if h is not None:
            pre = cell.op("gemm", [h, r_t[d], pre], f"{tag}_gates")
        i, o, f, g = cell.split(pre, 4, f"{tag}_gate")
        if peeps is not None and c is not None:
            i = cell.op("add", [i, cell.op("mul", [c, peeps[d][0]], f"{tag}_pi")], f"{tag}_i_peep")
            f = cell.op("add", [f, cell.op("mul", [c, peeps[d][2]], f"{tag}_pf")], f"{tag}_f_peep")
        i = cell.activate(f_act, i, f"{tag}_i")
        g = cell.activate(g_act, g, f"{tag}_g")
        new_c = cell.op("mul", [i, g], f"{tag}_ig")
        if c is not None:
            kept = cell.op("mul", [cell.activate(f_act, f, f"{tag}_f"), c], f"{tag}_fc")
            new_c = cell.op("add", [kept, new_c], f"{tag}_c")
        if peeps is not None:
            o = cell.op("add", [o, cell.op("mul", [new_c, peeps[d][1]], f"{tag}_po")], f"{tag}_o_peep")
        o = cell.activate(f_act, o, f"{tag}_o")
        new_h = cell.op("mul", [o, cell.activate(h_act, new_c, f"{tag}_hc", clipped=False)], f"{tag}_h")
        state[d] = [new_h, new_c]
        hs[d].append(new_h)

    _unroll(cell, dirs, step, state, hs)
    _finish(cell, hs, state, with_c=True)


def _gru(cell: _Cell, w, r, b, _peep) -> None:
    """ONNX GRU: gates z, r, h; ``H = (1-z)*h~ + z*H'`` computed as ``h~ + z*(H' - h~)``.

    linear_before_reset 0: ``h~ = g(x Wh + (r*H') Rh + Wbh + Rbh)``, a second gemm per step.
    linear_before_reset 1: ``h~ = g(x Wh + Wbh + r*(H' Rh + Rbh))``; the projection carries Rbh in extra
    columns (a zero block of W'), so one gemm per step gives ``H' [Rz Rr Rh]^T + [bz br Rbh]``.
    """
    n, dirs = cell.hidden, len(cell.acts)
    linear = int(_attr(cell.node, "linear_before_reset", 0))
    wb, rb = b[:, : 3 * n], b[:, 3 * n :]
    if linear:
        cols = 4 * n
        zeros = np.zeros_like(w[:, :n])
        w_proj = np.concatenate([w[:, : 2 * n], zeros, w[:, 2 * n :]], axis=1)
        b_proj = np.concatenate([wb[:, : 2 * n] + rb[:, : 2 * n], rb[:, 2 * n :], wb[:, 2 * n :]], axis=1)
        r_t = [[cell.constant(f"r_t_d{d}", r[d].T)] for d in range(dirs)]
    else:
        cols = 3 * n
        w_proj, b_proj = w, wb + rb
        r_t = [
            [cell.constant(f"r_zr_t_d{d}", r[d, : 2 * n].T), cell.constant(f"r_h_t_d{d}", r[d, 2 * n :].T)]
            for d in range(dirs)
        ]
    proj = _project(cell, w_proj, b_proj)
    hs: list[list[str]] = [[] for _ in range(dirs)]
    state = [[_initial(cell, 5, d, dirs)] for d in range(dirs)]

    def step(d: int, t: int, tag: str) -> None:
        (h,) = state[d]
        f_act, g_act = cell.acts[d]
        off = d * cols
        if linear:
            pre = cell.columns(proj, t, off, off + 3 * n, f"{tag}_x")
            x_h = cell.columns(proj, t, off + 3 * n, off + 4 * n, f"{tag}_xh")
            if h is not None:
                pre = cell.op("gemm", [h, r_t[d][0], pre], f"{tag}_gates")
            z, reset, h_rec = cell.split(pre, 3, f"{tag}_gate")
        else:
            pre = cell.columns(proj, t, off, off + 2 * n, f"{tag}_x")
            x_h = cell.columns(proj, t, off + 2 * n, off + 3 * n, f"{tag}_xh")
            if h is not None:
                pre = cell.op("gemm", [h, r_t[d][0], pre], f"{tag}_gates")
            z, reset = cell.split(pre, 2, f"{tag}_gate")
        z = cell.activate(f_act, z, f"{tag}_z")
        reset = cell.activate(f_act, reset, f"{tag}_r")
        if linear:
            cand = cell.op("add", [x_h, cell.op("mul", [reset, h_rec], f"{tag}_rh")], f"{tag}_cand_in")
        elif h is not None:
            cand = cell.op(
                "gemm", [cell.op("mul", [reset, h], f"{tag}_rh"), r_t[d][1], x_h], f"{tag}_cand_in"
            )
        else:
            cand = x_h  # (r * 0) Rh^T is 0
        cand = cell.activate(g_act, cand, f"{tag}_cand")
        if h is None:
            new_h = cell.op("sub", [cand, cell.op("mul", [z, cand], f"{tag}_zc")], f"{tag}_h")
        else:
            diff = cell.op("sub", [h, cand], f"{tag}_diff")
            new_h = cell.op("add", [cand, cell.op("mul", [z, diff], f"{tag}_zd")], f"{tag}_h")
        state[d] = [new_h]
        hs[d].append(new_h)

    _unroll(cell, dirs, step, state, hs)
    _finish(cell, hs, state, with_c=False)


def _rnn(cell: _Cell, w, r, b, _peep) -> None:
    """ONNX RNN: ``h = f(x W^T + h' R^T + Wb + Rb)``; a Relu without clip rides on the gemm's epilogue."""
    n, dirs = cell.hidden, len(cell.acts)
    proj = _project(cell, w, b[:, :n] + b[:, n:])
    r_t = [cell.constant(f"r_t_d{d}", r[d].T) for d in range(dirs)]
    hs: list[list[str]] = [[] for _ in range(dirs)]
    state = [[_initial(cell, 5, d, dirs)] for d in range(dirs)]

    def step(d: int, t: int, tag: str) -> None:
        (h,) = state[d]
        (f_act,) = cell.acts[d]
        pre = cell.columns(proj, t, d * n, (d + 1) * n, f"{tag}_x")
        if h is not None and f_act == "relu" and cell.clip is None:
            new_h = cell.op("gemm", [h, r_t[d], pre], f"{tag}_h", activation="relu")
        else:
            if h is not None:
                pre = cell.op("gemm", [h, r_t[d], pre], f"{tag}_pre")
            new_h = cell.activate(f_act, pre, f"{tag}_h")
        state[d] = [new_h]
        hs[d].append(new_h)

    _unroll(cell, dirs, step, state, hs)
    _finish(cell, hs, state, with_c=False)


def _finish(cell: _Cell, hs: list[list[str]], state: list[list[str]], with_c: bool) -> None:
    reverse = _attr(cell.node, "direction", "forward") == "reverse"
    in_order = [_in_time_order(steps, d == 1 or reverse) for d, steps in enumerate(hs)]
    finals = [[s[0] for s in state]]
    if with_c:
        finals.append([s[1] for s in state])
    _collect(cell, in_order, finals)
