"""Builds libpipelink_runtime.so (the native core, plain C: no Python.h) into pipelink/lib/ at install.

Everything else is in pyproject.toml. Without a C compiler the install still succeeds; the library is
then missing and `pipelink lib-dir` says how to build it.
"""

import importlib.util
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_spec = importlib.util.spec_from_file_location(
    "_pipelink_native_build", Path(__file__).parent / "src" / "pipelink" / "native" / "build.py"
)
native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native)


class BuildRuntime(build_ext):
    """Compiles the runtime with the system compiler under its own name (no Python ABI suffix)."""

    def run(self):
        # Editable installs copy the library back into the source tree: its folder must exist there.
        (Path(__file__).parent / "src" / "pipelink" / "lib").mkdir(exist_ok=True)
        super().run()

    def get_ext_filename(self, fullname):
        return str(Path(*fullname.split(".")[:-1]) / native.LIBRARY_NAME)

    def build_extension(self, ext):
        output = Path(self.get_ext_fullpath(ext.name))
        try:
            native.compile_runtime(output)
        except (RuntimeError, OSError) as e:
            self.warn(f"PipeLink: {native.LIBRARY_NAME} was not built ({e}); the C API will be unavailable")


setup(
    ext_modules=[
        Extension(
            "pipelink.lib.libpipelink_runtime",
            sources=[str(p.relative_to(Path(__file__).parent)) for p in native.sources()],
        )
    ],
    cmdclass={"build_ext": BuildRuntime},
)
