/* Aborts the process as soon as it is opened: tests prove the sha256 check and inspection never open it. */
#include <pipelink.h>
#include <stdlib.h>
__attribute__((constructor)) static void explode(void) { abort(); }
PIPELINK_COMPUTE(bomb_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(bomb, 1, 0, 0)
PIPELINK_MANIFEST({"name": "bomb", "version": "1.0.0", "entry": "bomb_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x"}], "outputs": [{"name": "y", "shape": "x"}]})
