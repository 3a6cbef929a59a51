/* Crashes (SIGSEGV) in its constructor, i.e. inside dlopen: only a probe in a child process survives it. */
#include <pipelink.h>
#include <signal.h>
__attribute__((constructor)) static void crash(void) { raise(SIGSEGV); }
PIPELINK_COMPUTE(ctor_segv_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(ctor_segv, 1, 0, 0)
PIPELINK_MANIFEST({"name": "ctor_segv", "version": "1.0.0", "entry": "ctor_segv_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x"}], "outputs": [{"name": "y", "shape": "x"}]})
