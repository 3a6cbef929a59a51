"""Tuning the built-in CUDA kernels: the tune target, and the tuned-parameter lookup used by ``pl.load``.

A variant is the operator's catalogue plan with some tunables changed (compile-time macros and launch
geometry). The cache key holds everything that makes a result valid (operator and version, a hash of the
kernel sources, device name, compute capability, driver, shapes, dtypes), computed here for both the
tuner and the loader, so they can never disagree.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import InvalidArgumentError
from ..tune.target import TuneTarget

__all__ = ["ALIASES", "key_fields", "tunables_of", "lookup_tuned", "BuiltinKernelTarget", "make_tune_target"]

#: The seed's parameter names -> the catalogue's tunables.
ALIASES = {"block_size": "block", "unroll_factor": "unroll", "vector_width": "vec", "vec_width": "vec"}
_SAMPLE_S = 100e-6  # each timing sample spans at least this much device time (launch gaps amortised)


def _catalogue():
    from ..ops import cuda as catalogue

    return catalogue


def tunables_of(op: str) -> dict[str, tuple[Any, tuple]]:
    """name -> (default, allowed values) of a built-in operator's CUDA kernel ({} when it has none)."""
    kernels = _catalogue().KERNELS
    name = "silu" if op == "silu_activation" else op
    return dict(kernels[name].tunables) if name in kernels else {}


def source_hash(op: str) -> str:
    cat = _catalogue()
    name = "silu" if op == "silu_activation" else op
    ks = cat.KERNELS[name]
    digest = hashlib.sha256()
    for text in (cat.source_text(ks.file), cat.source_text("common.cuh"), repr(sorted(ks.macros.items()))):
        digest.update(text.encode())
    return digest.hexdigest()


def key_fields(op: str, version: str, info, shapes: Mapping[str, Any], dtypes: Mapping[str, str]) -> dict:
    """The cache key of a tuned result (see the module docstring)."""
    return {
        "operator": op,
        "operator_version": str(version),
        "source_hash": source_hash(op),
        "device_name": info.name,
        "compute_capability": ".".join(map(str, info.compute_capability or ())),
        "driver_version": str(info.driver_version),
        "shapes": {k: list(v) for k, v in shapes.items()},
        "dtypes": dict(dtypes),
    }


def lookup_tuned(desc, info, in_shapes: tuple, in_dtypes: tuple) -> tuple[dict, str, str] | None:
    """``(params, source, reason)`` for a built-in stage, or None when its kernel has no tunables."""
    tunables = tunables_of(desc.name)
    if desc.source != "builtin" or not tunables:
        return None
    from ..tune.cache import TuneCache, key_digest, validate_tuned

    shapes = {p.name: s for p, s in zip(desc.inputs, in_shapes, strict=False) if s is not None}
    dtypes = {p.name: d for p, d in zip(desc.inputs, in_dtypes, strict=False) if d is not None}
    defaults = {k: v[0] for k, v in tunables.items()}
    key = key_fields(desc.name, desc.version, info, shapes, dtypes)
    try:  # the cache is an optimisation: any failure means "run with the defaults"
        cache = TuneCache()
        tuned = cache.lookup(key)
    except Exception as e:  # noqa: BLE001
        return defaults, "default", f"tuning cache unusable ({type(e).__name__}: {e})"
    if tuned is None:
        return defaults, "default", f"no tuned entry in {cache.path}"
    # Entries are stored under the tuning space's names (the seed's block_size...): map them. Names the
    # kernel does not use (the seed's shared_mem_per_block) are kept in the cache but not applied.
    named = {ALIASES.get(k, k): v for k, v in tuned.items() if ALIASES.get(k, k) in tunables}
    params, problems = validate_tuned(named, tunables)
    if problems:
        reason = f"tuned entry {key_digest(key)[:12]} in {cache.path} ignored: {'; '.join(problems)}"
        warnings.warn(f"{desc.name}: {reason}; re-run pipelink tune", RuntimeWarning, stacklevel=2)
        return defaults, "default", reason
    return {**defaults, **params}, "tuned", f"tuned entry {key_digest(key)[:12]} in {cache.path}"


class BuiltinKernelTarget(TuneTarget):
    """One built-in operator at fixed input shapes and dtypes, on one CUDA device."""

    def __init__(
        self,
        operator: str,
        shapes: Mapping[str, tuple],
        dtypes: Mapping[str, str],
        device: str,
        space: Mapping[str, tuple] | None = None,
    ):
        import pipelink as pl

        from . import get_backend

        self.backend = get_backend(device)
        self.desc = pl.get_operator_info(operator)
        self.operator = operator
        self.tunables = tunables_of(operator)
        if not self.tunables:
            raise InvalidArgumentError(
                f"operator {operator!r} has no tunable CUDA kernel "
                f"(tunable: {', '.join(sorted(_catalogue().KERNELS))})"
            )
        ports = [p.name for p in self.desc.inputs]
        unknown = sorted(set(shapes) - set(ports))
        if unknown:
            raise InvalidArgumentError(f"operator {operator!r} has no input {unknown[0]!r} (inputs: {ports})")
        self.shapes = {p: tuple(shapes[p]) for p in ports if p in shapes}
        self.dtypes = {p: get_dtype(dtypes.get(p, "float32")).name for p in self.shapes}
        names = list(self.shapes)
        doc = {
            "pipeline": [
                {
                    "name": operator,
                    "id": "tuned",
                    "inputs": names,
                    "outputs": [p.name for p in self.desc.outputs],
                }
            ]
        }
        self._gpu = pl.load(doc, device=device, tuned=False)
        self._cpu = pl.load(doc, device="cpu")
        space = dict(space or {})
        self._space_names = tuple(space)
        self._unused = {n for n in space if ALIASES.get(n, n) not in self.tunables}
        # A parameter the kernel does not use (the seed's shared_mem_per_block for a kernel with static
        # shared memory) gives the same kernel for every value: only its first value is built.
        self._first_value = {n: tuple(space[n])[0] for n in self._unused}
        self._rng = np.random.default_rng(0)
        self._bandwidth = None

    # -- parameters --------------------------------------------------------------------------------
    def default_params(self) -> dict[str, Any]:
        """The kernel's defaults, named as the tuning space names them (``block_size`` for ``block``)."""
        out = {k: v[0] for k, v in self.tunables.items()}
        for name in self._space_names:
            kernel_name = ALIASES.get(name, name)
            if kernel_name in self.tunables and kernel_name != name:
                out[name] = out.pop(kernel_name)
            elif kernel_name not in self.tunables:
                out[name] = self._first_value[name]
        return out

    def _kernel_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {ALIASES.get(k, k): v for k, v in params.items() if ALIASES.get(k, k) in self.tunables}

    def prune(self, params: Mapping[str, Any]) -> str | None:
        for name in sorted(self._unused):
            if params.get(name, self._first_value[name]) != self._first_value[name]:
                return (
                    f"{name} is not a parameter of the {self.operator} kernel (same kernel as "
                    f"{name}={self._first_value[name]})"
                )
        for name, value in self._kernel_params(params).items():
            allowed = self.tunables[name][1]
            if value not in allowed:
                return f"{name}={value} is outside the kernel's allowed values {list(allowed)}"
        return None

    # -- candidates --------------------------------------------------------------------------------
    def _inputs(self) -> dict[str, np.ndarray]:
        out = {}
        for name, shape in self.shapes.items():
            data = self._rng.standard_normal(shape)
            out[name] = data.astype(get_dtype(self.dtypes[name]).numpy)
        return out

    def build(self, params: Mapping[str, Any]):
        from ..runtime.executor import compile_plan, signature_of

        pipe = self._gpu
        host = self._inputs()
        args = {n: self.backend.import_input(v) for n, v in host.items()}
        signature = signature_of(self.backend, pipe.graph, args)
        plan = compile_plan(
            pipe.graph,
            pipe._registry,
            self.backend,
            args,
            signature,  # noqa: SLF001
            tuned={"tuned": self._kernel_params(params)},
        )
        return {"plan": plan, "args": args}

    def verify(self, candidate) -> tuple[bool, str]:
        from ..runtime.executor import execute
        from ..runtime.report import RunReport

        host = self._inputs()
        args = {n: self.backend.import_input(v) for n, v in host.items()}
        got = execute(candidate["plan"], self._gpu.graph, self.backend, args, report=RunReport())
        self.backend.synchronize(candidate["plan"].streams[0])
        ref = self._cpu.run(host)
        tol = {"float32": 1e-5, "float64": 1e-12}.get(self.dtypes[next(iter(self.dtypes))], 1e-2)
        worst = 0.0
        for name, r in ref.items():
            g = self.backend.wrap(got[name]).numpy().astype(np.float64)
            r64 = np.asarray(r).astype(np.float64)
            if np.isnan(g).any():
                return False, f"output {name!r} has NaN"
            err = float(np.linalg.norm(g - r64) / max(np.linalg.norm(r64), 1e-30))
            worst = max(worst, err)
            if err > tol:
                return False, f"output {name!r}: relative error {err:.2e} > {tol:g}"
        return True, f"max relative error {worst:.1e}"

    def measure(self, candidate, warmup: int, iters: int) -> list[float]:
        plan, args = candidate["plan"], candidate["args"]
        step = plan.steps[0]
        values = dict(plan.static)
        values.update(args)
        outs = [self.backend.empty(plan.shapes[n], get_dtype(plan.dtypes[n])) for n in step.out_names]
        ins = [values[n] if n is not None else None for n in step.in_names]
        stream = plan.streams[0]
        for _ in range(max(warmup, 1)):
            step.kernel(ins, outs, stream)
        start = self.backend.record_event(stream, timing=True)
        step.kernel(ins, outs, stream)
        end = self.backend.record_event(stream, timing=True)
        once = self.backend.elapsed(start, end)
        batch = max(1, math.ceil(_SAMPLE_S / max(once, 1e-9)))
        samples = []
        for _ in range(iters):
            start = self.backend.record_event(stream, timing=True)
            for _ in range(batch):
                step.kernel(ins, outs, stream)
            end = self.backend.record_event(stream, timing=True)
            samples.append(self.backend.elapsed(start, end) / batch)
        return samples

    def release(self, candidate) -> None:
        candidate["plan"].release()

    # -- metrics -----------------------------------------------------------------------------------
    def work(self, params: Mapping[str, Any]) -> tuple[float, float]:
        plan_shapes = {n: s for n, s in self.shapes.items()}
        nbytes = sum(math.prod(s) * get_dtype(self.dtypes[n]).itemsize for n, s in plan_shapes.items())
        out_bytes = 0
        for port in self.desc.outputs:
            rule = port.shape
            if isinstance(rule, str) and rule in self.shapes:
                out_bytes += math.prod(self.shapes[rule]) * get_dtype(self.dtypes[rule]).itemsize
            elif port.shape is None:
                first = next(iter(self.shapes))
                out_bytes += math.prod(self.shapes[first]) * get_dtype(self.dtypes[first]).itemsize
        return float(nbytes + out_bytes), 0.0

    def roofline(self, criteria: str) -> float | None:
        if criteria != "throughput_gbps":
            return None
        if self._bandwidth is None:
            n = 1 << 28
            src, dst = (
                self.backend.empty((n,), get_dtype("uint8")),
                self.backend.empty((n,), get_dtype("uint8")),
            )
            stream = self.backend.default_stream()
            for _ in range(3):
                self.backend.copy(dst, src, stream=stream)
            start = self.backend.record_event(stream, timing=True)
            for _ in range(10):
                self.backend.copy(dst, src, stream=stream)
            end = self.backend.record_event(stream, timing=True)
            self._bandwidth = 2 * n * 10 / self.backend.elapsed(start, end) / 1e9
        return self._bandwidth

    def cache_key_fields(self) -> dict[str, Any]:
        return key_fields(self.operator, self.desc.version, self.backend.info, self.shapes, self.dtypes)


def make_tune_target(config, device: str) -> BuiltinKernelTarget:
    """The tune target of ``pipelink tune`` on a CUDA device (``config`` is a TuneConfig)."""
    return BuiltinKernelTarget(
        config.operator,
        config.shapes,
        config.dtypes,
        "cuda" if device == "auto" else device,
        config.tuning_space,
    )
