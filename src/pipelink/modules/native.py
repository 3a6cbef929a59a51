"""Loading native operator modules (.so) through the C ABI of ``pipelink.h`` and registering their operators.

Order of checks in :func:`load_library`: the file exists; its SHA-256 matches (before anything opens it);
it is an ELF shared library; it carries a manifest (or a legacy sidecar); only then is it opened, the
manifest validated, every named symbol and version symbol checked, and the operators registered.
Never lets a bad library crash the process at load: every problem is a ``ModuleLoadError`` naming the file.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..descriptor import KernelContext, OperatorDescriptor, Variant
from ..errors import (
    ErrorCode,
    ModuleCrashError,
    ModuleLoadError,
    PipeLinkError,
    VersionMismatchError,
    error_for_code,
)
from ..versioning import check_compatible, parse_specifier, version_symbol
from .elfinfo import ELFInfo, check_sha256, read_elf, resolve_path
from .manifest import OpSpec, parse_manifest
from .registry import OperatorRegistry
from .registry import registry as default_registry
from .services import (
    COMPUTE_FN,
    CONTEXT_CREATE_FN,
    CONTEXT_DESTROY_FN,
    WORKSPACE_SIZE_FN,
    AttrArray,
    TensorArray,
    data_ptr,
    device_of,
    make_services,
    stream_handle,
)

__all__ = ["NativeModule", "load_library", "load_operator", "status_error", "sidecar_path"]

_LOCK = threading.RLock()
_UNSET = object()
# registry -> library path -> (file stamp, module); weak so a dropped registry drops its modules.
_CACHE: weakref.WeakKeyDictionary[OperatorRegistry, dict[str, tuple[tuple, NativeModule]]] = (
    weakref.WeakKeyDictionary()
)


@dataclass
class NativeModule:
    """A loaded native module: its file, manifest, ELF facts and the operators it registered."""

    path: Path
    sha256: str | None
    elf: ELFInfo
    specs: list[OpSpec]
    operators: list[OperatorDescriptor] = field(default_factory=list)
    manifest_source: str = "function"  # "function" | "section" | "sidecar"
    library: Any = None  # the ctypes.CDLL; kept alive as long as the module is
    _registry: Any = field(default=None, repr=False)  # weakref: the load cache is keyed by the registry

    @property
    def registry(self) -> OperatorRegistry | None:
        """The registry the operators went into (None once it is gone)."""
        return self._registry() if self._registry is not None else None

    def operator(
        self, name: str, version: str | None = None, *, stage: str | None = None
    ) -> OperatorDescriptor:
        """The operator ``name`` of this module satisfying the ``version`` specifier.

        A newer minor than asked for is logged as a warning; a patch difference is silent.

        Raises
        ------
        ModuleLoadError
            The module does not provide ``name``.
        VersionMismatchError
            It does, but no version satisfies ``version`` (both versions are named).
        """
        candidates = [d for d in self.operators if d.name == name]
        where = f" (stage {stage!r}, module {self.path})" if stage else f" (module {self.path})"
        if not candidates:
            have = ", ".join(f"{d.name} {d.version}" for d in self.operators)
            raise ModuleLoadError(
                f"native module {self.path} does not provide operator {name!r} (it provides: "
                f"{have}); check the stage's 'name' or 'library'",
                module=str(self.path),
                operator=name,
                stage=stage,
            )
        fitting = (
            candidates
            if version is None
            else [d for d in candidates if d.version in parse_specifier(version)]
        )
        if not fitting:
            have = ", ".join(str(d.version) for d in candidates)
            raise VersionMismatchError(
                f"operator {name!r}: the stage asks for version {version!r}, but {self.path.name} provides "
                f"{have}{where}; a different major version is incompatible: load the module built for "
                f"{version!r} or change the stage's 'version'",
                stage=stage,
                operator=name,
                requested=version,
                available=have,
                module=str(self.path),
            )
        best = max(fitting, key=lambda d: d.version)
        check_compatible(name, version, best.version, stage=stage, where=where)
        return best

    def unload(self) -> None:
        """Remove this module's operators from its registry (the library stays mapped)."""
        reg = self.registry
        if reg is not None:
            reg.unregister_source(str(self.path))
            with _LOCK:
                _CACHE.get(reg, {}).pop(str(self.path), None)


def sidecar_path(path: Path) -> Path:
    """Where a legacy library's sidecar descriptor lives by default: ``libfoo.so.pipelink.json``."""
    return path.with_name(path.name + ".pipelink.json")


def load_library(
    path: str | Path,
    *,
    sha256: str | None = None,
    registry: OperatorRegistry | None = None,
    sidecar: str | Path | None = None,
) -> NativeModule:
    """Load a native module and register every operator it declares.

    Parameters
    ----------
    path : str or Path
        The shared library (the caller resolves config-relative paths).
    sha256 : str, optional
        Expected SHA-256 (hex); checked before the library is opened.
    registry : OperatorRegistry, optional
        Where to register (default: the global registry).
    sidecar : str or Path, optional
        A legacy sidecar descriptor; by default ``<path>.pipelink.json`` is used when it exists.

    Returns
    -------
    NativeModule
        Loading the same unchanged file into the same registry again returns the same module.

    Raises
    ------
    IntegrityError
        The SHA-256 differs.
    ModuleLoadError
        Missing file, not an ELF shared library, no or malformed manifest, unknown ABI version, a missing
        symbol, version symbols that disagree with the manifest, or a name and version another module has.
    """
    reg = registry if registry is not None else default_registry
    p = resolve_path(path)
    digest = check_sha256(p, sha256)
    st = p.stat()
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino, str(sidecar) if sidecar else None)
    with _LOCK:
        hit = _CACHE.get(reg, {}).get(str(p))
        if hit is not None and hit[0] == stamp:
            return hit[1]
        if hit is not None:
            hit[1].unload()  # the file changed: drop the old operators before registering the new ones
        # A changed file at a path the dynamic loader already mapped would come back as the old mapping:
        # open a private copy instead (hot reload). Old kernels keep their own mapping alive.
        module = _load(p, digest, reg, Path(sidecar) if sidecar else None, fresh=hit is not None)
        _CACHE.setdefault(reg, {})[str(p)] = (stamp, module)
        return module


def load_operator(
    path: str | Path,
    name: str,
    version: str | None = None,
    *,
    sha256: str | None = None,
    registry: OperatorRegistry | None = None,
    stage: str | None = None,
) -> OperatorDescriptor:
    """``load_library(path)`` then the module's operator ``name`` matching ``version`` (a stage's fields)."""
    return load_library(path, sha256=sha256, registry=registry).operator(name, version, stage=stage)


def _load(p: Path, digest: str | None, reg: OperatorRegistry, sidecar: Path | None, *,
          fresh: bool = False) -> NativeModule:
    from . import legacy

    elf = read_elf(p)
    side = sidecar if sidecar is not None else sidecar_path(p)
    has_side = side.is_file()
    if sidecar is not None and not has_side:
        raise ModuleLoadError(f"native module {p}: the sidecar {side} does not exist", module=str(p))
    has_function = "pipelink_manifest" in elf.exports
    if not (has_function or elf.manifest_text is not None or has_side):
        raise ModuleLoadError(
            f"native module {p}: the library has no PipeLink manifest (no pipelink_manifest() export, no "
            f"{'.pipelink_manifest'} section) and no sidecar {side.name}; build it with PIPELINK_MANIFEST "
            f"from pipelink.h, or describe a legacy kernel in a sidecar file",
            module=str(p),
        )
    lib = _open(_private_copy(p) if fresh else p)
    specs: list[OpSpec] = []
    source = "sidecar"
    if has_function or elf.manifest_text is not None:
        text = elf.manifest_text
        source = "section"
        if has_function:
            fn = lib.pipelink_manifest
            fn.restype, fn.argtypes = ctypes.c_char_p, []
            raw = fn()
            if raw is None:
                raise ModuleLoadError(
                    f"native module {p}: pipelink_manifest() returned NULL; return the "
                    f"manifest text (use PIPELINK_MANIFEST)",
                    module=str(p),
                )
            text, source = raw.decode("utf-8", errors="replace"), "function"
        specs += parse_manifest(text, p)
    if has_side:
        specs += parse_manifest(side.read_text(encoding="utf-8"), side, what="sidecar", legacy=True)
    check_symbols(p, elf, specs)
    module = NativeModule(
        p, digest, elf, specs, manifest_source=source, library=lib, _registry=weakref.ref(reg)
    )
    module.operators = [_descriptor(module, spec, legacy) for spec in specs]
    try:
        for desc in module.operators:
            reg.register(desc)
    except PipeLinkError:
        reg.unregister_source(str(p))
        raise
    return module


def _private_copy(p: Path) -> Path:
    """A content-addressed copy of a library, so dlopen maps the new file rather than the old one."""
    import hashlib
    import shutil
    import tempfile

    digest = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"pipelink-reload-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    target = folder / f"{p.stem}.{digest}{p.suffix}"
    if not target.exists():
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        shutil.copy2(p, tmp)
        os.replace(tmp, target)
    return target


def _open(p: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(p), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        raise ModuleLoadError(
            f"native module {p}: the dynamic loader refused it ({e}); check that the "
            f"libraries it needs are installed ('pipelink inspect' lists them)",
            module=str(p),
        ) from e


def check_symbols(p: Path, elf: ELFInfo, specs: list[OpSpec]) -> list[str]:
    """Every named symbol is exported and the version symbols agree with the declared versions.

    Raises
    ------
    ModuleLoadError
        Naming the operator, the symbol and what the library exports instead.
    """
    for spec in specs:
        for sym in spec.symbols:
            if sym not in elf.exports:
                raise ModuleLoadError(
                    f"native module {p}: operator {spec.name!r} names symbol {sym!r}, which the library does "
                    f"not export; fix the manifest or export the function (PIPELINK_COMPUTE/PIPELINK_EXPORT "
                    f'with extern "C")',
                    module=str(p),
                    operator=spec.name,
                    symbol=sym,
                )
    present = set(elf.version_symbols)
    declared = {version_symbol(s.name, s.version): s for s in specs}
    for sym, spec in declared.items():
        if spec.signature is None and sym not in present:
            own = sorted(v for v in present if v.startswith(f"pipeLinkVersion_{spec.name}_"))
            raise ModuleLoadError(
                f"native module {p}: the manifest declares {spec.name!r} version {spec.version}, but the "
                f"library exports {', '.join(own) if own else 'no version symbol for it'} instead of {sym}; "
                f"make PIPELINK_VERSION and the manifest agree and rebuild",
                module=str(p),
                operator=spec.name,
                symbol=sym,
            )
    extra = sorted(present - set(declared))
    if extra:
        raise ModuleLoadError(
            f"native module {p}: the library exports {', '.join(extra)}, but its manifest declares no such "
            f"operator version; make PIPELINK_VERSION and the manifest agree and rebuild",
            module=str(p),
            symbol=extra[0],
        )
    return sorted(present)


def _descriptor(module: NativeModule, spec: OpSpec, legacy: Any) -> OperatorDescriptor:
    path = str(module.path)
    variants = []
    for device in spec.devices:
        fn = getattr(module.library, spec.entry[device])
        if spec.signature is not None:
            bind = legacy.legacy_bind(module.path, spec, device, fn)
        else:
            fn.restype, fn.argtypes = COMPUTE_FN
            bind = _abi_bind(module, spec, device, fn)
        variants.append(
            Variant(
                device=device,
                bind=bind,
                name=f"{spec.name} {spec.version} ({device}, {module.path.name})",
                source=path,
                tunables=dict(spec.tunables),
                required_features=spec.required_features if device == "cuda" else (),
            )
        )
    return OperatorDescriptor(
        name=spec.name,
        version=spec.version,
        inputs=spec.inputs,
        outputs=spec.outputs,
        attrs=spec.attrs,
        dtype_vars=dict(spec.dtype_vars),
        variants=variants,
        doc=spec.doc,
        source=path,
        required_features=spec.required_features if "cpu" not in spec.devices else (),
    )


def status_error(status: int, *, module: Path | str, operator: str, stage: str | None) -> PipeLinkError:
    """The exception for a non-zero status returned by a module (its message names all four facts)."""
    try:
        name = ErrorCode(status).name
        cls = error_for_code(status)
    except ValueError:
        name, cls = "not a PipeLink status code", ModuleCrashError
    return cls(
        f"stage {stage!r}: native module {module}: operator {operator!r} returned status {status} "
        f"({name}); see the module's log output for why",
        stage=stage,
        module=str(module),
        operator=operator,
        status=status,
    )


def _abi_bind(module: NativeModule, spec: OpSpec, device: str, fn: Any):
    path, lib = module.path, module.library

    def bind(ctx: KernelContext):
        device_type, device_id = device_of(ctx, device)
        ins = TensorArray(ctx.in_shapes, ctx.in_dtypes, device_type=device_type, device_id=device_id)
        outs = TensorArray(ctx.out_shapes, ctx.out_dtypes, device_type=device_type, device_id=device_id)
        attrs = AttrArray({**ctx.attrs, **ctx.params}, where=f"stage {ctx.stage!r}")
        services = make_services(ctx, device_type)
        args = (ins.array, ins.count, outs.array, outs.count, attrs.array, attrs.count)
        if spec.workspace_size:
            hook = getattr(lib, spec.workspace_size)
            hook.restype, hook.argtypes = WORKSPACE_SIZE_FN
            services.reserve(max(int(hook(*args)), 0))
        state = None
        if spec.context_create:
            create = getattr(lib, spec.context_create)
            create.restype, create.argtypes = CONTEXT_CREATE_FN
            out_state = ctypes.c_void_p()
            status = create(attrs.array, attrs.count, ctypes.byref(services.table), ctypes.byref(out_state))
            if status:
                raise status_error(status, module=path, operator=spec.name, stage=ctx.stage)
            state = services.table.user = out_state.value
        in_slots, out_slots = list(ins.array)[: ins.count], list(outs.array)[: outs.count]
        call_args = (*args, services.pointer)
        name, stage, ptr, ndarray = spec.name, ctx.stage, data_ptr, np.ndarray
        keep = (ins, outs, attrs, services, lib)

        slots = in_slots + out_slots
        seen: list[Any] = [_UNSET] * len(slots)  # the last object per slot: its address is still stored

        def kernel(inputs, outputs, stream, _keep=keep):
            # A NumPy array's address never changes while it lives: re-store it only for a new object.
            for i, x in enumerate((*inputs, *outputs)):
                if x is not seen[i] or type(x) is not ndarray:
                    slots[i].data = ptr(x)
                    seen[i] = x
            status = fn(*call_args, None if stream is None else stream_handle(stream))
            if status:
                raise status_error(status, module=path, operator=name, stage=stage)

        if spec.context_destroy and state is not None:
            destroy = getattr(lib, spec.context_destroy)
            destroy.restype, destroy.argtypes = CONTEXT_DESTROY_FN
            weakref.finalize(kernel, destroy, state)
        return kernel

    return bind
