/* A module built for an ABI version this runtime does not know. */
#include <pipelink.h>
PIPELINK_COMPUTE(future_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(future, 1, 0, 0)
PIPELINK_MANIFEST_TEXT("{\"abi_version\": 99, \"operators\": [{\"name\": \"future\", \"version\": \"1.0.0\", "
                       "\"entry\": \"future_compute\", \"inputs\": [], \"outputs\": [{\"name\": \"y\"}]}]}")
