"""Tuning a native module's operator (issue #7, item 2): on the CPU or a GPU, two ways.

- ``library``: the module declares ``tunables`` in its manifest; each variant binds the operator with
  the parameters passed as attributes (no rebuild).
- ``sources``: each variant is rebuilt from the sources with its parameters as ``-D`` macros (what
  ``pipelink build -D`` does), then loaded into a private registry.

Every variant is checked against a reference before it is timed: the ``reference`` operator, else the
built-in operator of the same name, else the module built with its default parameters.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..backends import get_backend
from ..descriptor import KernelContext, infer_outputs
from ..dtypes import get_dtype
from ..errors import InvalidArgumentError
from ..modules.build import build_module
from ..modules.native import load_library
from ..modules.registry import OperatorRegistry
from ..ops import register_builtins
from .cache import TuneCache, key_digest
from .target import TuneTarget, defines, source_hash

__all__ = ["NativeModuleTarget", "native_key_fields", "lookup_native"]


def native_key_fields(operator: str, version, files, info, shapes: Mapping, dtypes: Mapping) -> dict:
    """The tuning-cache key of a native module's operator (shared by the tuner and ``pl.load``)."""
    return {
        "operator": operator,
        "operator_version": str(version),
        "source_hash": source_hash(*(Path(f).read_bytes() for f in files)),
        "device_name": info.name,
        "compute_capability": ".".join(map(str, info.compute_capability or ())) or "cpu",
        "driver_version": str(info.driver_version or "none"),
        "shapes": {k: list(v) for k, v in shapes.items()},
        "dtypes": dict(dtypes),
    }


def lookup_native(desc, info, in_shapes: tuple, in_dtypes: tuple) -> tuple[dict, str, str] | None:
    """Tuned attribute values of a native module's stage (``library`` mode), or None without tunables."""
    variant = next((v for v in desc.variants if v.device == info.kind and v.tunables), None)
    if variant is None or desc.source in ("builtin", "python"):
        return None

    shapes = {p.name: s for p, s in zip(desc.inputs, in_shapes, strict=False) if s is not None}
    dtypes = {p.name: d for p, d in zip(desc.inputs, in_dtypes, strict=False) if d is not None}
    defaults = {k: v[0] for k, v in variant.tunables.items() if v}
    try:
        key = native_key_fields(desc.name, desc.version, [desc.source], info, shapes, dtypes)
        cache = TuneCache()
        tuned = cache.lookup(key)
    except Exception as e:  # noqa: BLE001 - the cache is an optimisation: run with the defaults
        return defaults, "default", f"tuning cache unusable ({type(e).__name__}: {e})"
    if tuned is None:
        return defaults, "default", f"no tuned entry in {cache.path}"
    params = {k: v for k, v in tuned.items() if k in variant.tunables}
    return {**defaults, **params}, "tuned", f"tuned entry {key_digest(key)[:12]} in {cache.path}"


class NativeModuleTarget(TuneTarget):
    """One operator of a native module at fixed shapes and dtypes (see the module docstring)."""

    def __init__(self, config, device: str = "cpu"):

        if not (config.library or config.sources):
            raise InvalidArgumentError("a native tune config needs 'library' or 'sources'")
        self.config = config
        self.operator = config.operator
        self.backend = get_backend(device)
        self.shapes = dict(config.shapes)
        self.dtypes = dict(config.dtypes)
        self._workdir = Path(tempfile.mkdtemp(prefix="pipelink-tune-"))
        self._sources = [config.resolve(s) for s in config.sources]
        self._rng = np.random.default_rng(config.seed)
        space = config.tuning_space
        first = self._load({k: tuple(v)[0] for k, v in space.items()})
        self.desc = first
        manifest_tunables = dict(first.variants[0].tunables) if first.variants else {}
        self._defaults = {
            k: (manifest_tunables[k][0] if k in manifest_tunables and manifest_tunables[k] else tuple(v)[0])
            for k, v in space.items()
        }
        self._reference_registry = OperatorRegistry()
        register_builtins(self._reference_registry)
        self._reference_desc = self._reference()

    # -- building ----------------------------------------------------------------------------------
    def _load(self, params: Mapping[str, Any]):
        """The module's descriptor of the operator for these parameters (rebuilt when tuning sources)."""
        registry = OperatorRegistry()
        if self._sources:
            flags = defines(params)
            tag = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:12]
            lib = build_module(self._sources, self._workdir / tag / "libtuned.so", defines=flags)
        else:
            lib = self.config.resolve(self.config.library)
        module = load_library(lib, registry=registry)
        return module.operator(self.operator)

    def _reference(self):
        name = self.config.reference or self.operator
        try:
            return self._reference_registry.get(name, source="builtin")
        except LookupError:
            if self.config.reference:
                raise InvalidArgumentError(
                    f"reference operator {name!r} is not a built-in operator"
                ) from None
            return None  # verified against the module built with its default parameters instead

    def _bind(self, desc, params: Mapping[str, Any], backend):

        ports = [p.name for p in desc.inputs]
        in_shapes = tuple(self.shapes.get(p) for p in ports)
        in_dtypes = tuple(self.dtypes.get(p) for p in ports)
        attrs = desc.resolve_attrs({}, where="tune")
        out_shapes, out_dtypes = infer_outputs(desc, in_shapes, in_dtypes, attrs, stage="tune")
        variant = next(v for v in desc.variants if v.device == backend.info.kind)
        use_attrs = bool(self.config.library)  # a library receives its tunables as attributes
        ctx = KernelContext(
            stage="tune",
            attrs=attrs,
            in_shapes=in_shapes,
            in_dtypes=in_dtypes,
            out_shapes=out_shapes,
            out_dtypes=out_dtypes,
            backend=backend,
            params=dict(params) if use_attrs else {},
        )
        return variant.bind(ctx), in_shapes, in_dtypes, out_shapes, out_dtypes

    def default_params(self) -> dict[str, Any]:
        return dict(self._defaults)

    def build(self, params: Mapping[str, Any]):
        desc = self._load(params) if self._sources else self.desc
        kernel, in_shapes, in_dtypes, out_shapes, out_dtypes = self._bind(desc, params, self.backend)
        return {
            "kernel": kernel,
            "params": dict(params),
            "in": (in_shapes, in_dtypes),
            "out": (out_shapes, out_dtypes),
        }

    # -- checking and timing -----------------------------------------------------------------------
    def _host_inputs(self, in_shapes, in_dtypes) -> list[np.ndarray | None]:
        return [
            None if s is None else self._rng.standard_normal(s).astype(get_dtype(d).numpy)
            for s, d in zip(in_shapes, in_dtypes, strict=True)
        ]

    def _run(self, kernel, backend, host_inputs, out_shapes, out_dtypes) -> list[np.ndarray]:
        ins = [None if x is None else backend.import_input(x) for x in host_inputs]
        outs = [backend.empty(tuple(s), get_dtype(d)) for s, d in zip(out_shapes, out_dtypes, strict=True)]
        for out in outs:  # poisoned: an output the kernel does not write cannot pass
            host = np.full(out.shape, np.nan) if get_dtype(out.dtype).is_floating else np.zeros(out.shape)
            backend.copy(out, backend.import_input(host.astype(get_dtype(out.dtype).numpy)))
        kernel(ins, outs, backend.default_stream())
        backend.synchronize()
        return [np.asarray(backend.wrap(o).numpy()) for o in outs]

    def verify(self, candidate) -> tuple[bool, str]:

        in_shapes, in_dtypes = candidate["in"]
        out_shapes, out_dtypes = candidate["out"]
        host = self._host_inputs(in_shapes, in_dtypes)
        got = self._run(candidate["kernel"], self.backend, host, out_shapes, out_dtypes)
        cpu = get_backend("cpu")
        if self._reference_desc is not None:
            ref_kernel = self._bind(self._reference_desc, {}, cpu)[0]
        else:
            ref_kernel = self._bind(
                self._load(self._defaults) if self._sources else self.desc, self._defaults, cpu
            )[0]
        ref = self._run(ref_kernel, cpu, host, out_shapes, out_dtypes)
        tol = {"float32": 1e-5, "float64": 1e-12}.get(out_dtypes[0], 1e-2)
        worst = 0.0
        for i, (g, r) in enumerate(zip(got, ref, strict=True)):
            g64, r64 = g.astype(np.float64), r.astype(np.float64)
            if np.isnan(g64).any():
                return False, f"output {i} has NaN (unwritten or wrong)"
            err = float(np.linalg.norm(g64 - r64) / max(np.linalg.norm(r64), 1e-30))
            worst = max(worst, err)
            if err > tol:
                return False, f"output {i}: relative error {err:.2e} > {tol:g}"
        return True, f"max relative error {worst:.1e}"

    def measure(self, candidate, warmup: int, iters: int) -> list[float]:
        in_shapes, in_dtypes = candidate["in"]
        out_shapes, out_dtypes = candidate["out"]
        backend = self.backend
        ins = [
            None if x is None else backend.import_input(x) for x in self._host_inputs(in_shapes, in_dtypes)
        ]
        outs = [backend.empty(tuple(s), get_dtype(d)) for s, d in zip(out_shapes, out_dtypes, strict=True)]
        stream = backend.default_stream()
        kernel = candidate["kernel"]
        for _ in range(max(1, warmup)):
            kernel(ins, outs, stream)
        samples = []
        for _ in range(iters):
            if not backend.capabilities.asynchronous:
                t0 = time.perf_counter()
                kernel(ins, outs, stream)
                samples.append(time.perf_counter() - t0)
            else:
                start = backend.record_event(stream, timing=True)
                kernel(ins, outs, stream)
                end = backend.record_event(stream, timing=True)
                samples.append(backend.elapsed(start, end))
        return samples

    def work(self, params: Mapping[str, Any]) -> tuple[float, float]:
        ports = [p.name for p in self.desc.inputs]
        nbytes = sum(
            math.prod(self.shapes[p]) * get_dtype(self.dtypes[p]).itemsize for p in ports if p in self.shapes
        )
        first = next(p for p in ports if p in self.shapes)
        out = math.prod(self.shapes[first]) * get_dtype(self.dtypes[first]).itemsize * len(self.desc.outputs)
        return float(nbytes + out), 0.0

    def cache_key_fields(self) -> dict[str, Any]:
        files = self._sources or [self.config.resolve(self.config.library)]
        return native_key_fields(
            self.operator, self.desc.version, files, self.backend.info, self.shapes, self.dtypes
        )
