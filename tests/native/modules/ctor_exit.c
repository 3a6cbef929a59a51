/* Calls exit(3) in its constructor: opened in the caller, it would end the caller without a word. */
#include <pipelink.h>
#include <stdlib.h>
__attribute__((constructor)) static void leave(void) { exit(3); }
PIPELINK_COMPUTE(ctor_exit_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(ctor_exit, 1, 0, 0)
PIPELINK_MANIFEST({"name": "ctor_exit", "version": "1.0.0", "entry": "ctor_exit_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x"}], "outputs": [{"name": "y", "shape": "x"}]})
