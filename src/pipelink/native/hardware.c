/* hardware.c - pipeLinkValidateHardware and the CUDA driver, opened at run time (dlopen), so the library
 * builds with a plain C compiler and its CPU path runs where there is no GPU. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

/* The compute capability of CUDA device 0 through the driver, opened at run time. 0 when unknown. */
static PipeLinkStatus cuda_capability(int* major, int* minor) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "no NVIDIA driver on this machine (libcuda.so.1 cannot be "
                        "opened), so no CUDA requirement can be met");
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*count)(int*) = (int (*)(int*))dlsym(lib, "cuDeviceGetCount");
    int (*attr)(int*, int, int) = (int (*)(int*, int, int))dlsym(lib, "cuDeviceGetAttribute");
    int n = 0;
    PipeLinkStatus st = PIPELINK_SUCCESS;
    if (!init || !count || !attr || init(0) != 0 || count(&n) != 0 || n < 1)
        st = plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "the NVIDIA driver reports no usable GPU");
    else if (attr(major, 75, 0) != 0 || attr(minor, 76, 0) != 0) /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_* */
        st = plk_fail(PIPELINK_ERR_CUDA, "cuDeviceGetAttribute failed for device 0");
    dlclose(lib);
    return st;
}

static int compare(double have, const char* op, double want) {
    if (strcmp(op, ">=") == 0) return have >= want;
    if (strcmp(op, ">") == 0) return have > want;
    if (strcmp(op, "<=") == 0) return have <= want;
    if (strcmp(op, "<") == 0) return have < want;
    if (strcmp(op, "==") == 0) return have == want;
    return have != want; /* "!=" */
}

PipeLinkStatus pipeLinkValidateHardware(const char* requirements) {
    if (requirements == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkValidateHardware: requirements is NULL");
    char buf[1024];
    if (strlen(requirements) >= sizeof buf) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkValidateHardware: requirements longer than 1023 bytes");
    snprintf(buf, sizeof buf, "%s", requirements);
    char* save = NULL;
    for (char* tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
        if (strcmp(tok, "device=cpu") == 0) continue; /* every machine has one */
        int major = 0, minor = 0;
        if (strcmp(tok, "device=cuda") == 0) {
            PipeLinkStatus st = cuda_capability(&major, &minor);
            if (st) return st;
            continue;
        }
        const char* key = "compute_capability";
        size_t k = strlen(key);
        char op[3] = "";
        double want = 0;
        int used = 0;
        if (strncmp(tok, key, k) != 0) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkValidateHardware: unknown requirement '%s'; use compute_capability>=X.Y, device=cuda or device=cpu", tok);
        const char* rest = tok + k;
        size_t oplen = strspn(rest, "<>=!");
        if (oplen < 1 || oplen > 2) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkValidateHardware: '%s' needs one of >= > <= < == !=", tok);
        memcpy(op, rest, oplen), op[oplen] = '\0';
        if (strcmp(op, "=") == 0 || strcmp(op, "=>") == 0 || strcmp(op, "=<") == 0 || strcmp(op, "!") == 0 ||
            strcmp(op, "<>") == 0 || strcmp(op, "><") == 0 || strcmp(op, "!!") == 0 || strcmp(op, "=!") == 0 ||
            strcmp(op, ">>") == 0 || strcmp(op, "<<") == 0 || strcmp(op, "!<") == 0 || strcmp(op, "!>") == 0)
            return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkValidateHardware: '%s' needs one of >= > <= < == !=", tok);
        if (sscanf(rest + oplen, "%lf%n", &want, &used) != 1 || rest[oplen + (size_t)used] != '\0' || want < 0)
            return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkValidateHardware: '%s' needs a version such as 8.0", tok);
        PipeLinkStatus st = cuda_capability(&major, &minor);
        if (st) {
            char why[512];
            snprintf(why, sizeof why, "%s", pipeLinkGetLastErrorMessage() + strlen(plk_status_name(st)) + 2);
            return plk_fail(st, "requirement '%s' cannot be met: %s", tok, why);
        }
        double have = major + minor / 10.0;
        if (!compare(have, op, want))
            return plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "requirement '%s' is not met: device 0 has compute "
                            "capability %d.%d", tok, major, minor);
    }
    return plk_ok();
}
