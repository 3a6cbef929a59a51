/* The manifest says 1.0.0, the exported version symbol says 1.1.0. */
#include <pipelink.h>
PIPELINK_COMPUTE(skew_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(skew, 1, 1, 0)
PIPELINK_MANIFEST({"name": "skew", "version": "1.0.0", "entry": "skew_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x"}], "outputs": [{"name": "y", "shape": "x"}]})
