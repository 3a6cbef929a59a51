"""Loop and Scan unrolled at import (for ``control.py``): the body copied once per iteration or step, the
loop-carried values flowing from one copy to the next, the scan outputs stacked along their axis.
"""

from __future__ import annotations

import numpy as np

from ..ops.shape import MAX_PARTS
from .control_inline import _Inlining
from .control_scope import ControlError, _describe, _graph_attr, _ints, _known
from .recurrent import MAX_STEPS

__all__: list[str] = []


class _Unrolling(_Inlining):
    """The Loop and Scan lowerings of one model's lowering."""

    def _loop(self, proto, inputs, outputs, label, scope, depth):
        body = _graph_attr(proto, "body")
        trip_name = inputs[0] if inputs else ""
        cond_name = inputs[1] if len(inputs) > 1 else ""
        states = list(inputs[2:])
        n = len(states)
        if len(body.input) != n + 2:
            raise ControlError(
                f"the body has {len(body.input)} inputs; a Loop with {n} loop-carried values needs {n + 2} "
                "(iteration number, condition, the values)"
            )
        k = len(body.output) - 1 - n
        if k < 0 or len(outputs) > n + k:
            raise ControlError(
                f"the body has {len(body.output)} outputs and the node {len(outputs)}; the body makes the "
                f"condition, the {n} loop-carried values and then the scan outputs"
            )
        if "" in states:
            raise ControlError("an absent loop-carried input is not supported")
        trips = None
        if trip_name:
            value = self.constant(trip_name)
            if value is None:
                raise ControlError(
                    f"the trip count M ({trip_name!r}) is computed at run time; PipeLink unrolls a Loop at "
                    "import, so M must be a constant (an initializer, a Constant, or shape arithmetic that "
                    "folds)",
                    needs=(trip_name,),
                )
            if value.size != 1 or value.dtype.kind not in "iu":
                raise ControlError(
                    f"the trip count M ({trip_name!r}) must be one integer (got {value.dtype})"
                )
            trips = max(int(value.reshape(-1)[0]), 0)
            if trips > MAX_STEPS:
                raise ControlError(
                    f"trip count {trips}; the import unrolls a Loop iteration by iteration, at most "
                    f"{MAX_STEPS} iterations (export with fewer, or run the loop as a native module)"
                )
        running = True
        if cond_name:
            running = self._truth(cond_name, "the condition input (input 1)")
        elif trips is None:
            raise ControlError("a Loop with neither a trip count nor a condition never ends")
        limit = MAX_STEPS if trips is None else trips
        if trips is not None:
            self._afford(trips * (self._size(body) + 1 + k), f"{trips} iterations of a body")
        scans: list[list[str]] = [[] for _ in range(k)]
        t = 0
        while running and t < limit:
            bound = {
                body.input[0].name: self._scalar(np.int64(t)),
                body.input[1].name: self._scalar(np.True_),
            }
            bound.update({info.name: value for info, value in zip(body.input[2:], states, strict=True)})
            bound.pop("", None)
            prefix = f"{label}/iter{t}"
            inner = self._instance(body, scope, bound, prefix, counter=body.input[0].name)
            yield from self._emit(body, inner, prefix, depth)
            made = [inner.resolve(out.name) for out in body.output]
            if cond_name:  # without a condition input the body's condition is ignored (the spec's table)
                running = self._truth(made[0], f"the body's condition (output 0, {body.output[0].name!r})", t)
            states = made[1 : 1 + n]
            for j in range(k):
                scans[j].append(made[1 + n + j])
            t += 1
        if running and trips is None:
            raise ControlError(
                f"the Loop has no trip count and its condition is still true after {MAX_STEPS} iterations, "
                "the most the import unrolls"
            )
        yield from self._finish(states, scans, [0] * k, outputs, label, "the loop runs no iteration")

    def _scan(self, proto, inputs, outputs, label, scope, depth):
        body = _graph_attr(proto, "body")
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in proto.attribute if a.name != "body"}
        if "num_scan_inputs" not in attrs:
            raise ControlError("attribute num_scan_inputs is missing")
        m = int(attrs["num_scan_inputs"])
        if self.g.opset < 9:
            yield from self._scan8(body, attrs, m, inputs, outputs, label, scope, depth)
            return
        n = len(inputs) - m
        k = self._scan_arity(body, m, n, inputs, outputs)
        in_axes = _ints(attrs, "scan_input_axes", m)
        in_dirs = _ints(attrs, "scan_input_directions", m, directions=True)
        out_axes = _ints(attrs, "scan_output_axes", k)
        out_dirs = _ints(attrs, "scan_output_directions", k, directions=True)
        states, scans = yield from self._scan_steps(
            body, list(inputs[:n]), inputs[n:], in_axes, in_dirs, label, scope, depth
        )
        for j in range(k):
            if out_dirs[j]:  # prepended each iteration: the last iteration's element first
                scans[j].reverse()
        yield from self._finish(states, scans, out_axes, outputs, label, "the scan axis is empty")

    def _scan_arity(self, body, m: int, n: int, inputs, outputs) -> int:
        """The number of scan outputs, the node's and the body's inputs and outputs checked."""
        if m < 1 or n < 0 or len(body.input) != n + m:
            raise ControlError(
                f"num_scan_inputs={m} with {len(inputs)} inputs and a body of {len(body.input)} inputs; the "
                "body takes the state variables, then one element of each scan input"
            )
        k = len(body.output) - n
        if k < 0 or len(outputs) > n + k:
            raise ControlError(
                f"the body has {len(body.output)} outputs and the node {len(outputs)}; the body makes the "
                f"{n} state variables, then the scan outputs' elements"
            )
        if "" in inputs:
            raise ControlError("an absent input is not supported (every state and scan input is needed)")
        return k

    def _scan_steps(self, body, states, xs, in_axes, in_dirs, label, scope, depth):
        """The body's nodes, once per element along the scan inputs' axes (a generator; its value is the
        final states and, per scan output, the elements in iteration order)."""
        m, n = len(xs), len(states)
        k = len(body.output) - n
        length, axes = None, []
        for j, x in enumerate(xs):
            shape = self.known_shape(x, axis=in_axes[j])
            if shape is None:
                raise ControlError(f"scan input {j} ({x!r}) has a shape unknown at import")
            rank = len(shape)
            if not -rank <= in_axes[j] < rank:
                raise ControlError(f"scan_input_axes[{j}]={in_axes[j]} is out of range for rank {rank}")
            axis = in_axes[j] % rank
            size = shape[axis]
            if not isinstance(size, int):
                raise ControlError(
                    f"scan input {j} ({x!r}) has its scan axis {axis} of size {size or 'unknown'}, known "
                    "only when the model runs; PipeLink unrolls a Scan at import (export with a fixed "
                    "sequence length)"
                )
            if length is not None and size != length:
                raise ControlError(
                    f"scan input {j} ({x!r}) has {size} elements along its scan axis, input 0 {length}"
                )
            length = size
            axes.append(axis)
        if length > MAX_STEPS:
            raise ControlError(
                f"sequence length {length}; the import unrolls a Scan step by step, at most {MAX_STEPS} "
                "steps (export with shorter sequences, or run the scan as a native module)"
            )
        self._afford(length * (self._size(body) + m + k), f"{length} steps of a body")
        scans: list[list[str]] = [[] for _ in range(k)]
        for t in range(length):
            prefix = f"{label}/iter{t}"
            elements = []
            for j, x in enumerate(xs):
                index = t if in_dirs[j] == 0 else length - 1 - t
                element = self._fresh(prefix, f"in{j}")
                yield self._glue(
                    "Gather", [x, self._scalar(np.int64(index))], [element], f"{prefix}/in{j}", axis=axes[j]
                )
                shape = self.shape(x)
                self._record(element, self.dtype(x), shape[: axes[j]] + shape[axes[j] + 1 :])
                elements.append(element)
            bound = {info.name: v for info, v in zip(body.input, states + elements, strict=True)}
            inner = self._instance(body, scope, bound, prefix)
            yield from self._emit(body, inner, prefix, depth)
            made = [inner.resolve(out.name) for out in body.output]
            states = made[:n]
            for j in range(k):
                scans[j].append(made[n + j])
        return states, scans

    def _scan8(self, body, attrs, m, inputs, outputs, label, scope, depth):
        """Scan of opset 8: a batch axis first on every state and scan input (the scan axis second), and
        sequence_lens first among the inputs. Each batch entry is scanned on its own (the inputs gathered
        at that entry), and the states and scan outputs stacked along the batch axis again. sequence_lens
        must be absent or a constant of the full length (a shorter sequence's outputs past its end are
        left undefined by the spec)."""
        lens, inputs = (inputs[0] if inputs else ""), list(inputs[1:])
        n = len(inputs) - m
        k = self._scan_arity(body, m, n, inputs, outputs)
        dirs = _ints(attrs, "directions", m, directions=True)
        batch = None
        for name in inputs:
            shape = self.known_shape(name, axis=0)
            size = shape[0] if shape else None
            if not isinstance(size, int):
                raise ControlError(f"Scan-8 input {name!r} has its batch axis unknown at import")
            if batch is not None and size != batch:
                raise ControlError(f"Scan-8 inputs disagree on the batch: {batch} and {size} ({name!r})")
            batch = size
        if lens:
            value = self.constant(lens)
            full = [self.known_shape(x, axis=1)[1] for x in inputs[n:]]
            if value is None or not np.all(np.asarray(value) == full[0]):
                raise ControlError(
                    f"sequence_lens ({lens!r}) must be absent or a constant of the full sequence length "
                    f"{full[0]}: PipeLink unrolls every entry over the whole sequence"
                )
        per_states: list[list[str]] = [[] for _ in range(n)]
        per_scans: list[list[str]] = [[] for _ in range(k)]
        for b in range(batch or 0):
            prefix = f"{label}/batch{b}"
            entries = []
            for j, name in enumerate(inputs):
                entry = self._fresh(prefix, f"entry{j}")
                yield self._glue(
                    "Gather", [name, self._scalar(np.int64(b))], [entry], f"{prefix}/entry{j}", axis=0
                )
                self._record(entry, self.dtype(name), self.shape(name)[1:])
                entries.append(entry)
            states, scans = yield from self._scan_steps(
                body, entries[:n], entries[n:], [0] * m, dirs, prefix, scope, depth
            )
            for j, state in enumerate(states):
                per_states[j].append(state)
            for j, parts in enumerate(scans):
                if not parts:
                    raise ControlError("the scan axis is empty, so the scan outputs would be empty")
                stacked = self._fresh(prefix, f"scan{j}")
                yield from self._stack(parts, 0, stacked, f"{prefix}/scan{j}")
                per_scans[j].append(stacked)
        if not batch:
            raise ControlError("Scan-8 with a batch of 0 entries: PipeLink has no empty tensors")
        for j, parts in enumerate(per_states + per_scans):
            y = outputs[j] if j < len(outputs) else ""
            if y:
                yield from self._stack(parts, 0, y, f"{label}/out{j}")

    def _finish(self, states, scans, axes, outputs, label, why_empty):
        """The final loop-carried values (copied into the node's outputs) and the scan outputs stacked."""
        for j, state in enumerate(states):
            y = outputs[j] if j < len(outputs) else ""
            if y:
                yield self._glue("Identity", [state], [y], f"{label}/final{j}")
                self._record(y, self.dtype(state), self.shape(state))
        for j, parts in enumerate(scans):
            y = outputs[len(states) + j] if len(states) + j < len(outputs) else ""
            if not y:
                continue
            if not parts:
                raise ControlError(
                    f"{why_empty}, so scan output {y!r} would be empty; PipeLink has no empty tensors"
                )
            yield from self._stack(parts, axes[j], y, f"{label}/scan{j}")

    def _stack(self, parts: list[str], axis: int, y: str, prefix: str):
        """``parts`` (one shape) stacked along a new ``axis`` of ``y``: an unsqueeze each, then a tree of
        concats of at most MAX_PARTS inputs."""
        shapes = [self.shape(p) for p in parts]
        known = [s for s in shapes if s is not None and _known(s)]
        if any(s != known[0] for s in known):
            first = next(t for t, s in enumerate(shapes) if s == known[0])
            other = next(t for t, s in enumerate(shapes) if s in known and s != known[0])
            raise ControlError(
                f"scan output {y!r} changes shape across iterations ({_describe(shapes[first])} in iteration "
                f"{first}, {_describe(shapes[other])} in iteration {other}); the spec requires one shape"
            )
        element = shapes[0]
        if axis < 0:
            if element is None:
                raise ControlError(
                    f"scan output {y!r} has a negative axis {axis} and an element of unknown rank"
                )
            axis += len(element) + 1
        if element is not None and not 0 <= axis <= len(element):
            raise ControlError(
                f"scan_output_axes {axis} is out of range for an element of rank {len(element)}"
            )
        dtype = self.dtype(parts[0])
        unsqueezed = []
        for t, part in enumerate(parts):
            out = y if len(parts) == 1 else self._fresh(prefix, f"elem{t}")
            yield self._unsqueeze(part, out, axis, f"{prefix}/elem{t}")
            if element is not None:
                self._record(out, dtype, element[:axis] + (1,) + element[axis:])
            unsqueezed.append(out)
        level = 0
        while len(unsqueezed) > 1:
            joined = []
            for start in range(0, len(unsqueezed), MAX_PARTS):
                group = unsqueezed[start : start + MAX_PARTS]
                last = len(unsqueezed) <= MAX_PARTS
                out = y if last else self._fresh(prefix, f"join{level}_{start // MAX_PARTS}")
                if len(group) == 1:
                    joined.append(group[0])
                    continue
                yield self._glue("Concat", group, [out], f"{prefix}/join{level}", axis=axis)
                joined.append(out)
            unsqueezed, level = joined, level + 1
        if element is not None:
            self._record(y, dtype, element[:axis] + (len(parts),) + element[axis:])
