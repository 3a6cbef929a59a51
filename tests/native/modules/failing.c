/* Operators that write their output and then fail: a known PipeLink status and an unknown one. */
#include <pipelink.h>
PIPELINK_COMPUTE(fail_shape_compute) { return PIPELINK_ERR_SHAPE_MISMATCH; }
PIPELINK_COMPUTE(fail_odd_compute) { return 77; }
PIPELINK_VERSION(fail_shape, 1, 0, 0)
PIPELINK_VERSION(fail_odd, 1, 0, 0)
PIPELINK_MANIFEST(
  {"name": "fail_shape", "version": "1.0.0", "entry": "fail_shape_compute", "devices": ["cpu"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]},
  {"name": "fail_odd", "version": "1.0.0", "entry": "fail_odd_compute", "devices": ["cpu"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]})
