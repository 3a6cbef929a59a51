"""Builds libpipelink_runtime.so (the native core, plain C: no Python.h) into pipelink/lib/ at install, and
the two CPython extensions of run()'s hot path (runtime/_hotpath.c, backends/cuda/_pool.c).

Everything else is in pyproject.toml. Without a C compiler the install still succeeds; the library is
then missing and `pipelink lib-dir` says how to build it, and run() takes its Python path.
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


RUNTIME = "pipelink.lib.libpipelink_runtime"


class BuildRuntime(build_ext):
    """Compiles the runtime with the system compiler under its own name (no Python ABI suffix), and the
    extensions as setuptools does; a failure leaves that part out with a warning."""

    def run(self):
        # Editable installs copy the library back into the source tree: its folder must exist there.
        (Path(__file__).parent / "src" / "pipelink" / "lib").mkdir(exist_ok=True)
        super().run()

    def get_ext_filename(self, fullname):
        # Called with the full dotted name, and (get_ext_fullpath) with its last part alone.
        if fullname.rsplit(".", 1)[-1] != RUNTIME.rsplit(".", 1)[-1]:
            return super().get_ext_filename(fullname)
        return str(Path(*fullname.split(".")[:-1]) / native.LIBRARY_NAME)

    def build_extension(self, ext):
        output = Path(self.get_ext_fullpath(ext.name))
        if ext.name != RUNTIME:
            try:
                native.compile_extension(ext.name, output)
            except (RuntimeError, OSError) as e:  # no compiler or no Python.h: run() keeps its Python path
                self.warn(f"PipeLink: {ext.name} was not built ({e}); run() will take its Python path")
            return
        try:
            native.compile_runtime(output)
        except (RuntimeError, OSError) as e:
            self.warn(f"PipeLink: {native.LIBRARY_NAME} was not built ({e}); the C API will be unavailable")


setup(
    ext_modules=[
        Extension(RUNTIME, sources=[str(p.relative_to(Path(__file__).parent)) for p in native.sources()]),
        *(Extension(name, sources=[f"src/pipelink/{source}"]) for name, source in native.EXTENSIONS.items()),
    ],
    cmdclass={"build_ext": BuildRuntime},
)
