"""Loading native operator modules (.so) through the C ABI of ``pipelink.h`` and registering their operators.

A module is the bytes read once from its file (``image.py``): they are hashed, checked against ``sha256``,
parsed as ELF and for the manifest, optionally opened first in a child process (the probe), and only then
dlopened, from a sealed private copy of those same bytes, never from the path. Its identity is their
SHA-256. Never lets a bad library crash the process at load: every problem is a ``ModuleLoadError``.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..descriptor import KernelContext, OperatorDescriptor, Variant
from ..errors import (
    ErrorCode,
    InvalidArgumentError,
    ModuleCrashError,
    ModuleLoadError,
    PipeLinkError,
    VersionMismatchError,
    error_for_code,
)
from ..versioning import check_compatible, parse_specifier, version_symbol
from .elfinfo import ELFInfo, read_elf
from .image import ModuleImage, open_image, probe_default, probe_image, read_image
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

__all__ = ["NativeModule", "load_library", "load_image", "load_operator", "status_error", "sidecar_path"]

_LOCK = threading.RLock()
_UNSET = object()
# registry -> library path -> ((sha256, sidecar), module); weak so a dropped registry drops its modules.
_CACHE: weakref.WeakKeyDictionary[OperatorRegistry, dict[str, tuple[tuple, NativeModule]]] = (
    weakref.WeakKeyDictionary()
)


@dataclass
class NativeModule:
    """A loaded native module: its bytes (identity: their sha256), manifest, ELF facts and its operators."""

    path: Path
    sha256: str
    elf: ELFInfo
    specs: list[OpSpec]
    image: ModuleImage = field(repr=False)
    operators: list[OperatorDescriptor] = field(default_factory=list)
    manifest_source: str = "section"  # "section" | "function" | "sidecar" (or "section+sidecar", ...)
    _registry: Any = field(default=None, repr=False)  # weakref: the load cache is keyed by the registry

    @property
    def library(self) -> ctypes.CDLL:
        """The ctypes handle of the module's bytes, opened (from the sealed copy) on first use."""
        return open_image(self.image)

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
    probe: bool | None = None,
    open: bool = True,  # noqa: A002 - reads as the question it is: open it in this process?
) -> NativeModule:
    """Load a native module and register every operator it declares.

    Parameters
    ----------
    path : str or Path
        The shared library (the caller resolves config-relative paths). It is read once; what is hashed,
        checked and opened are those bytes, so changing the file afterwards changes nothing loaded.
    sha256 : str, optional
        Expected SHA-256 (hex) of the bytes; checked before anything else reads them.
    registry : OperatorRegistry, optional
        Where to register (default: the global registry).
    sidecar : str or Path, optional
        A legacy sidecar descriptor; by default ``<path>.pipelink.json`` is used when it exists.
    probe : bool, optional
        Open the bytes in a child process first (once per content per process), so a constructor that
        crashes or exits, or a file the loader chokes on, is a ``ModuleLoadError`` rather than the end of
        this process. Default: ``PIPELINK_PROBE_LIBRARIES`` (on unless set to 0).
    open : bool
        Open the library in this process now. False for a module only isolated stages run: the manifest
        comes from its ELF section (or the probe) and only the worker process opens it.

    Returns
    -------
    NativeModule
        Loading the same bytes into the same registry again returns the same module; new bytes at the
        same path are a new module (its old operators are unregistered first).

    Raises
    ------
    IntegrityError
        The SHA-256 differs.
    ModuleLoadError
        Missing file, not an ELF shared library or a damaged one, no or malformed manifest, unknown ABI
        version, a missing symbol, version symbols that disagree with the manifest, a name and version
        another module has, or (probed) a library that crashes, exits or hangs when opened.
    """
    if not isinstance(path, str | Path):
        raise InvalidArgumentError(
            f"load_library takes the path of a shared library (str or Path), got {type(path).__name__}"
        )
    return load_image(read_image(path, sha256), registry=registry, sidecar=sidecar, probe=probe, open=open)


def load_image(
    image: ModuleImage,
    *,
    registry: OperatorRegistry | None = None,
    sidecar: str | Path | None = None,
    probe: bool | None = None,
    open: bool = True,  # noqa: A002 - see load_library
) -> NativeModule:
    """``load_library`` for bytes already read and verified (a worker gets its caller's image this way)."""
    reg = registry if registry is not None else default_registry
    p = image.path
    key = (image.sha256, str(sidecar) if sidecar else None)
    with _LOCK:
        hit = _CACHE.get(reg, {}).get(str(p))
        if hit is not None and hit[0] == key:
            module = hit[1]
        else:
            if hit is not None:
                hit[1].unload()  # new bytes at this path: drop the old operators before registering new ones
            module = _load(
                image, reg, Path(sidecar) if sidecar else None,
                probe=probe_default() if probe is None else probe, open=open,
            )  # fmt: skip
            _CACHE.setdefault(reg, {})[str(p)] = (key, module)
    if open:
        module.library  # noqa: B018 - opened now, so a refusal is reported at load, not at the first run
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


def _load(
    image: ModuleImage,
    reg: OperatorRegistry,
    sidecar: Path | None,
    *,
    probe: bool,
    open: bool,  # noqa: A002
) -> NativeModule:
    from . import legacy

    p = image.path
    elf = read_elf(image.data, p)
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
    # Only a module without the section must run code to say what it is: ask the probe when there is one.
    by_function = elf.manifest_text is None and has_function
    function_text = None
    if probe or (by_function and not open):
        function_text = probe_image(image, manifest=by_function)
    elif by_function:
        function_text = _call_manifest(open_image(image))
    if by_function and function_text is None:
        raise ModuleLoadError(
            f"native module {p}: pipelink_manifest() returned NULL; return the manifest text "
            f"(use PIPELINK_MANIFEST)",
            module=str(p),
        )
    specs: list[OpSpec] = []
    sources = []
    text = function_text if by_function else elf.manifest_text
    if text is not None:
        specs += _parse(text, p)
        sources.append("function" if by_function else "section")
    if has_side:
        specs += _parse(_read_sidecar(side), side, what="sidecar", legacy=True)
        sources.append("sidecar")
    check_symbols(p, elf, specs)
    module = NativeModule(
        p, image.sha256, elf, specs, image, manifest_source="+".join(sources), _registry=weakref.ref(reg)
    )
    if open:
        module.library  # noqa: B018 - open before registering: a refusal leaves nothing registered
    module.operators = [_descriptor(module, spec, legacy) for spec in specs]
    try:
        for desc in module.operators:
            reg.register(desc)
    except PipeLinkError:
        reg.unregister_source(str(p))
        raise
    return module


def _call_manifest(lib: ctypes.CDLL) -> str | None:
    fn = lib.pipelink_manifest
    fn.restype, fn.argtypes = ctypes.c_char_p, []
    raw = fn()
    return None if raw is None else raw.decode("utf-8", errors="replace")


def _read_sidecar(side: Path) -> str:
    try:
        return side.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        raise ModuleLoadError(f"sidecar {side}: cannot be read ({e.strerror})", module=str(side)) from e


def _parse(text: str, path: Path, **kw: Any) -> list[OpSpec]:
    """``parse_manifest``, with anything it did not foresee in hostile text reported as a load failure."""
    try:
        return parse_manifest(text, path, **kw)
    except PipeLinkError:
        raise
    except (RecursionError, ValueError, TypeError, AttributeError, KeyError, IndexError, OverflowError) as e:
        raise ModuleLoadError(
            f"native module {path}: the {kw.get('what', 'manifest')} is malformed ({type(e).__name__}: {e}); "
            f"fix the PIPELINK_MANIFEST text and rebuild",
            module=str(path),
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
    variants = [
        Variant(
            device=device,
            bind=_lazy_bind(module, spec, device, legacy),
            name=f"{spec.name} {spec.version} ({device}, {module.path.name})",
            source=path,
            tunables=dict(spec.tunables),
            required_features=spec.required_features if device == "cuda" else (),
            origin=module,  # an isolated stage's worker opens module.image, the bytes verified here
        )
        for device in spec.devices
    ]
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


def _lazy_bind(module: NativeModule, spec: OpSpec, device: str, legacy: Any):
    """A ``Variant.bind`` that opens the module in this process only when a stage is bound here."""
    made: list[Any] = []

    def bind(ctx: KernelContext):
        if not made:
            fn = getattr(module.library, spec.entry[device])
            if spec.signature is not None:
                made.append(legacy.legacy_bind(module.path, spec, device, fn))
            else:
                fn.restype, fn.argtypes = COMPUTE_FN
                made.append(_abi_bind(module, spec, device, fn))
        return made[0](ctx)

    return bind


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
