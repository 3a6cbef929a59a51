/* Never returns from its constructor: a probe must give up after its timeout rather than wait forever. */
#include <pipelink.h>
#include <unistd.h>
__attribute__((constructor)) static void hang(void) { for (;;) pause(); }
PIPELINK_COMPUTE(ctor_hang_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(ctor_hang, 1, 0, 0)
PIPELINK_MANIFEST({"name": "ctor_hang", "version": "1.0.0", "entry": "ctor_hang_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x"}], "outputs": [{"name": "y", "shape": "x"}]})
