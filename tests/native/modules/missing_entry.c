/* The manifest names an entry symbol the library does not define. */
#include <pipelink.h>
PIPELINK_COMPUTE(present_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(ghost, 1, 0, 0)
PIPELINK_MANIFEST({"name": "ghost", "version": "1.0.0", "entry": "ghost_compute_missing", "devices": ["cpu"],
                   "inputs": [{"name": "x"}], "outputs": [{"name": "y", "shape": "x"}]})
