"""The probe child: opens a module's bytes (read from stdin) the way the caller will, and reports back.

Run as ``python -I -S _probe_child.py WANT_MANIFEST``; imports nothing from PipeLink, so it starts fast and
a damaged library can harm nothing but this process. The first line it writes on the report pipe is
``ok``, ``manifest`` (the text follows), ``null`` (pipelink_manifest() returned NULL) or ``refused`` (the
dynamic loader's message follows). Anything else (a signal, another exit code, no report) is the parent's
to explain.
"""

import ctypes
import os
import sys


def main() -> int:
    want_manifest = sys.argv[1:] == ["1"]
    data = sys.stdin.buffer.read()
    # The library's own prints must not mix with the report: give it stderr as stdout.
    report = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    fd = os.memfd_create("pipelink-probe", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    try:
        lib = ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        report.write(b"refused\n" + str(e).replace(f"/proc/self/fd/{fd}: ", "").encode())
        report.flush()
        return 0
    if not want_manifest:
        report.write(b"ok\n")
    else:
        try:
            fn = lib.pipelink_manifest
        except AttributeError:
            fn = None
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_char_p, []
        text = fn() if fn is not None else None
        report.write(b"null\n" if text is None else b"manifest\n" + text)
    report.flush()
    return 0


if __name__ == "__main__":
    # os._exit: the library's destructors and atexit handlers are not what is being probed.
    os._exit(main())
