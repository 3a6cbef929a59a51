"""The optimizers of ONNX's training domain (``ai.onnx.preview.training``, opset 1) lowered at import onto
PipeLink's elementwise operators: Adagrad, Momentum (standard and Nesterov) and Adam, each over one or
more tensors sharing the learning rate R and the update count T, as the spec defines them:

- every optimizer first adds the regularisation's gradient, ``g' = norm_coefficient * X + G``;
- Adagrad: ``r = R / (1 + T * decay_factor)``, ``H' = H + g'^2``, ``X' = X - r * g' / (sqrt(H') + epsilon)``;
- Momentum: ``V' = alpha * V + b * g'`` with ``b = beta`` from the second update on (T > 0), 1 at the first;
  ``X' = X - R * V'`` (standard) or ``X - R * (g' + alpha * V')`` (nesterov);
- Adam: ``V' = alpha * V + (1 - alpha) * g'``, ``H' = beta * H + (1 - beta) * g'^2``,
  ``r = R * sqrt(1 - beta^T) / (1 - alpha^T)`` for T > 0 (else R), ``X' = (1 - norm_coefficient_post) *
  (X - r * V' / (sqrt(H') + epsilon))``.

R and T are tensors of the run (scalars): the choices on T are ``where`` stages, so one pipeline serves
every update. The arithmetic runs in X's dtype (R and T cast to it), where onnx's reference mixes float64
into its scalar terms: the results agree to the dtype's rounding. Nothing here computes at run time
itself; what the operators cannot express (a tensor count that does not divide the inputs, an X that is
not a float, a mode the spec lacks) is refused with the converter's ``Unsupported``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import get_dtype
from .graph import Graph, Node, Unsupported, dtype_of

__all__ = ["TRAINING_CONVERTERS", "TRAINING_DOMAIN"]

TRAINING_DOMAIN = "ai.onnx.preview.training"
_FLOATS = ("float16", "bfloat16", "float32", "float64")


class _Update:
    """One optimizer node's stages: every internal tensor named after the node's first output."""

    def __init__(self, g: Graph, node: Node, states: int) -> None:
        """Check the inputs (R, T, then ``states + 2`` groups: X, G and the ``states`` state tensors per
        updated tensor) and cast R and T to X's dtype."""
        self.g, self.node = g, node
        self.base = next((o for o in node.outputs if o), node.name or node.op_type)
        groups = states + 2
        count, extra = divmod(len(node.inputs) - 2, groups)
        if len(node.inputs) < 2 + groups or extra or any(not name for name in node.inputs):
            raise Unsupported(
                f"{node.op_type} takes R, T and then {groups} groups of tensors of one length (X, G"
                f"{', and the states' if states else ''}); got {len(node.inputs)} inputs"
            )
        if len(node.outputs) > states * count + count:
            raise Unsupported(
                f"{node.op_type} of {count} tensors makes at most {(states + 1) * count} outputs"
            )
        self.count = count
        xs = node.inputs[2 : 2 + count]
        dtypes = {dtype_of(g, x) for x in xs}
        if len(dtypes) != 1 or next(iter(dtypes)) not in _FLOATS:
            raise Unsupported(
                f"{node.op_type} updates float tensors of one dtype known at import (got "
                f"{', '.join(str(d) for d in dtypes)})"
            )
        self.dtype = next(iter(dtypes))
        self.r = self.as_dtype(node.inputs[0], "r")
        self.t_int = node.inputs[1]
        self.t = self.as_dtype(node.inputs[1], "t")

    def group(self, k: int) -> list[str]:
        """The k-th group of updated tensors' inputs (X, G, states...), one name per updated tensor."""
        return self.node.inputs[2 + k * self.count : 2 + (k + 1) * self.count]

    def output(self, k: int, i: int) -> str:
        """The name of output ``k`` (0: X's, then the states') of tensor ``i``, "" when not asked for."""
        index = k * self.count + i
        return self.node.outputs[index] if index < len(self.node.outputs) else ""

    def constant(self, tag: str, value: float) -> str:
        name = f"{self.base}__{tag}"
        self.g.constants[name] = np.array(value, dtype=get_dtype(self.dtype).numpy)
        self.g.dtypes[name] = self.dtype
        return name

    def op(self, operator: str, inputs: list[str], tag: str, out: str = "", **attrs: Any) -> str:
        name = out or f"{self.base}__{tag}"
        self.g.stage(self.node, operator, inputs, [name], **attrs)
        return name

    def as_dtype(self, name: str, tag: str) -> str:
        if dtype_of(self.g, name) == self.dtype:
            return name
        return self.op("cast", [name], f"{tag}_{self.dtype}", dtype=self.dtype)

    def scaled(self, x: str, factor: float, tag: str) -> str:
        return x if factor == 1.0 else self.op("scale", [x], tag, factor=factor)

    def first_update(self) -> str:
        """A bool scalar: T == 0 (the first update), where the spec drops its T-dependent terms."""
        zero = f"{self.base}__t_zero"
        self.g.constants[zero] = np.array(0, dtype=get_dtype(dtype_of(self.g, self.t_int) or "int64").numpy)
        self.g.dtypes[zero] = dtype_of(self.g, self.t_int) or "int64"
        return self.op("greater", [self.t_int, zero], "t_positive")

    def regularised(self, x: str, grad: str, norm: float, i: int) -> str:
        """``norm * X + G``."""
        if norm == 0.0:
            return grad
        return self.op("add", [self.scaled(x, norm, f"x{i}_norm"), grad], f"g{i}_regularised")


def _attrs(node: Node, **defaults: Any) -> dict[str, Any]:
    """The node's attributes (``None``: required); a float is the float32 ONNX stores, exactly (the
    arithmetic of a float64 X then uses the value the model holds, as onnx's reference does)."""
    out = {}
    for name, default in defaults.items():
        if name not in node.attrs and default is None:
            raise Unsupported(f"attribute {name} is required")
        value = node.attrs.get(name, default)
        if isinstance(value, bytes):
            value = value.decode()
        out[name] = float(np.float32(value)) if isinstance(value, float) else value
    return out


def _adagrad(g: Graph, node: Node) -> None:
    a = _attrs(node, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0)
    u = _Update(g, node, states=1)
    decayed = u.op("add", [u.scaled(u.t, a["decay_factor"], "t_decay"), u.constant("one", 1.0)], "r_den")
    rate = u.op("div", [u.r, decayed], "rate")
    eps = u.constant("epsilon", a["epsilon"])
    for i, (x, grad, h) in enumerate(zip(u.group(0), u.group(1), u.group(2), strict=True)):
        reg = u.regularised(x, grad, a["norm_coefficient"], i)
        squared = u.op("mul", [reg, reg], f"g{i}_squared")
        h_new = u.op("add", [h, squared], f"h{i}_new", out=u.output(1, i))
        root = u.op("add", [u.op("sqrt", [h_new], f"h{i}_sqrt"), eps], f"h{i}_den")
        step = u.op("div", [u.op("mul", [rate, reg], f"x{i}_rg"), root], f"x{i}_step")
        u.op("sub", [x, step], f"x{i}_new", out=u.output(0, i))


def _momentum(g: Graph, node: Node) -> None:
    a = _attrs(node, alpha=None, beta=None, mode=None, norm_coefficient=None)
    if a["mode"] not in ("standard", "nesterov"):
        raise Unsupported(f"attribute mode={a['mode']!r}; the spec's are 'standard' and 'nesterov'")
    u = _Update(g, node, states=1)
    alpha = a["alpha"]
    later = u.first_update()
    beta = u.op("where", [later, u.constant("beta", a["beta"]), u.constant("one", 1.0)], "beta_t")
    for i, (x, grad, v) in enumerate(zip(u.group(0), u.group(1), u.group(2), strict=True)):
        reg = u.regularised(x, grad, a["norm_coefficient"], i)
        v_new = u.op(
            "add",
            [u.scaled(v, alpha, f"v{i}_kept"), u.op("mul", [beta, reg], f"g{i}_beta")],
            f"v{i}_new",
            out=u.output(1, i),
        )
        if a["mode"] == "nesterov":
            direction = u.op("add", [reg, u.scaled(v_new, alpha, f"v{i}_ahead")], f"x{i}_direction")
        else:
            direction = v_new
        u.op("sub", [x, u.op("mul", [u.r, direction], f"x{i}_step")], f"x{i}_new", out=u.output(0, i))


def _adam(g: Graph, node: Node) -> None:
    a = _attrs(node, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0, norm_coefficient_post=0.0)
    u = _Update(g, node, states=2)
    alpha, beta = a["alpha"], a["beta"]
    one = u.constant("one", 1.0)
    # r * sqrt(1 - beta^T) / (1 - alpha^T) from the second update on; R at the first (T = 0, where the
    # unselected quotient is 0 / 0)
    beta_t = u.op("sub", [one, u.op("pow", [u.constant("beta", beta), u.t], "beta_pow")], "beta_bias")
    alpha_t = u.op("sub", [one, u.op("pow", [u.constant("alpha", alpha), u.t], "alpha_pow")], "alpha_bias")
    corrected = u.op(
        "div", [u.op("mul", [u.r, u.op("sqrt", [beta_t], "beta_root")], "r_root"), alpha_t], "r_bias"
    )
    rate = u.op("where", [u.first_update(), corrected, u.r], "rate")
    eps = u.constant("epsilon", a["epsilon"])
    post = 1.0 - a["norm_coefficient_post"]
    groups = zip(u.group(0), u.group(1), u.group(2), u.group(3), strict=True)
    for i, (x, grad, v, h) in enumerate(groups):
        reg = u.regularised(x, grad, a["norm_coefficient"], i)
        v_new = u.op(
            "add",
            [u.scaled(v, alpha, f"v{i}_kept"), u.scaled(reg, 1.0 - alpha, f"g{i}_new")],
            f"v{i}_new",
            out=u.output(1, i),
        )
        squared = u.scaled(u.op("mul", [reg, reg], f"g{i}_squared"), 1.0 - beta, f"g{i}_squared_new")
        h_new = u.op("add", [u.scaled(h, beta, f"h{i}_kept"), squared], f"h{i}_new", out=u.output(2, i))
        root = u.op("add", [u.op("sqrt", [h_new], f"h{i}_sqrt"), eps], f"h{i}_den")
        step = u.op("mul", [rate, u.op("div", [v_new, root], f"x{i}_ratio")], f"x{i}_step")
        updated = u.op("sub", [x, step], f"x{i}_updated", out=u.output(0, i) if post == 1.0 else "")
        if post != 1.0:
            u.op("scale", [updated], f"x{i}_new", out=u.output(0, i), factor=post)


#: Op type (domain ai.onnx.preview.training) -> converter.
TRAINING_CONVERTERS = {"Adagrad": _adagrad, "Momentum": _momentum, "Adam": _adam}
