/* Claims scale_add 1.0.0, which good.c already provides. */
#include <pipelink.h>
PIPELINK_COMPUTE(dup_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(scale_add, 1, 0, 0)
PIPELINK_MANIFEST({"name": "scale_add", "version": "1.0.0", "entry": "dup_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x"}], "outputs": [{"name": "y", "shape": "x"}]})
