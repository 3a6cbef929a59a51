"""Python operators from outside the package: ``--import module_or_file.py`` and the ``pipelink.operators``
entry-point group, through which installed packages register their operators.

Only imports code the user named or installed; never imports anything on its own initiative beyond that group.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from importlib import metadata
from pathlib import Path
from types import ModuleType

from ..errors import ModuleLoadError

__all__ = ["ENTRY_POINT_GROUP", "import_operator_module", "load_entry_points"]

ENTRY_POINT_GROUP = "pipelink.operators"
_entry_points_loaded = False


def import_operator_module(spec: str) -> ModuleType:
    """Import a module whose import registers operators (``@pl.operator``).

    Parameters
    ----------
    spec : str
        A dotted module name (``my_pkg.ops``) or the path of a ``.py`` file.

    Returns
    -------
    module
        The imported module.

    Raises
    ------
    ModuleLoadError
        When the file or module is not found, or its import raises; the message names it and the cause.
    """
    path = Path(spec).expanduser()
    try:
        if spec.endswith(".py") or path.is_file():
            if not path.is_file():
                raise ModuleLoadError(f"--import {spec}: no such file; give a .py file or a module name")
            name = f"pipelink_user_ops_{path.resolve().stem}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise ModuleLoadError(f"--import {spec}: not an importable Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
            return module
        return importlib.import_module(spec)
    except ModuleLoadError:
        raise
    except ModuleNotFoundError as e:
        raise ModuleLoadError(
            f"--import {spec}: module {e.name!r} not found; give a .py file or an importable module name "
            "(is the package installed, or its folder on PYTHONPATH?)",
            module=spec,
        ) from e
    except Exception as e:  # the user's module raised while importing: report it, do not crash the caller
        raise ModuleLoadError(
            f"--import {spec}: importing it raised {type(e).__name__}: {e}; fix the module", module=spec
        ) from e


def load_entry_points() -> list[str]:
    """Import every installed ``pipelink.operators`` entry point once per process.

    An entry point names a module (its import registers operators) or a function called with no arguments
    that registers them. A broken plugin is skipped with a warning: it must not stop every pipeline loading.

    Returns
    -------
    list of str
        The names of the entry points loaded by this call (empty after the first call).
    """
    global _entry_points_loaded
    if _entry_points_loaded:
        return []
    _entry_points_loaded = True
    loaded = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = ep.load()
            if callable(target) and not isinstance(target, ModuleType):
                target()
        except Exception as e:  # a third-party plugin: warn, keep going
            warnings.warn(
                f"pipelink: operator plugin {ep.name!r} ({ep.value}) failed to load: "
                f"{type(e).__name__}: {e}; uninstall or fix it",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        loaded.append(ep.name)
    return loaded
