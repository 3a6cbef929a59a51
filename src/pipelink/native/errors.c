/* errors.c - the per-thread message behind pipeLinkGetLastErrorMessage (SQLite's errmsg, per thread). */
#include <stdarg.h>
#include <stdio.h>

#include "core.h"

static _Thread_local char last_message[2048];

PipeLinkStatus plk_fail(PipeLinkStatus status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(last_message, sizeof last_message, "%s: ", plk_status_name(status));
    if (n > 0 && (size_t)n < sizeof last_message) vsnprintf(last_message + n, sizeof last_message - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

PipeLinkStatus plk_ok(void) {
    last_message[0] = '\0';
    return PIPELINK_SUCCESS;
}

const char* plk_status_name(int status) {
    static const char* names[] = {
        "PIPELINK_SUCCESS", "PIPELINK_ERR_INVALID_CONFIG", "PIPELINK_ERR_INVALID_ARGUMENT",
        "PIPELINK_ERR_MODULE_LOAD_FAILED", "PIPELINK_ERR_VERSION_MISMATCH", "PIPELINK_ERR_INTEGRITY",
        "PIPELINK_ERR_SHAPE_MISMATCH", "PIPELINK_ERR_DTYPE_MISMATCH", "PIPELINK_ERR_HARDWARE_UNSUPPORTED",
        "PIPELINK_ERR_MODULE_CRASH", "PIPELINK_ERR_TIMEOUT", "PIPELINK_ERR_OUT_OF_MEMORY", "PIPELINK_ERR_CUDA",
        "PIPELINK_ERR_TUNING_FAILED"};
    if (status < 0 || status >= (int)(sizeof names / sizeof names[0])) return "not a PipeLink status code";
    return names[status];
}

const char* pipeLinkGetLastErrorMessage(void) { return last_message; }
