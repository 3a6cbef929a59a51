/* The manifest is not valid JSON (a trailing comma). */
#include <pipelink.h>
PIPELINK_COMPUTE(bad_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(bad, 1, 0, 0)
PIPELINK_MANIFEST_TEXT("{\"abi_version\": 1, \"operators\": [{\"name\": \"bad\", \"version\": \"1.0.0\",}]}")
