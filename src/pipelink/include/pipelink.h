/*
 * pipelink.h - the C ABI of PipeLink native operator modules (ABI version 1).
 *
 * A module is a shared library built from C, C++ or CUDA with nothing but this header: it never links
 * against PipeLink. It exports
 *   - one compute entry point per operator (PipeLinkComputeFn),
 *   - `const char* pipelink_manifest(void)`: the module's operators as JSON (PIPELINK_MANIFEST), also
 *     placed in the ELF section ".pipelink_manifest" so tools read it without executing the library,
 *   - one version symbol per operator, pipeLinkVersion_<name>_<major>_<minor>_<patch> (PIPELINK_VERSION).
 *
 * Contracts (docs/native-modules.md): PipeLink allocates every input and output; the entry point writes the
 * outputs in place, uses only the stream it is given (never the default stream), keeps no hidden global
 * state (per-stage state goes through the context hooks) and reports failure by returning a status code.
 *
 * Minimal module:
 *
 *   #include <pipelink.h>
 *   PIPELINK_COMPUTE(scale_compute) {
 *       const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
 *       double alpha = pipelink_attr_float(attrs, n_attrs, "alpha", 1.0);
 *       for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) y[i] = (float)(alpha * x[i]);
 *       return PIPELINK_SUCCESS;
 *   }
 *   PIPELINK_VERSION(scale, 1, 0, 0)
 *   PIPELINK_MANIFEST(
 *     {"name": "scale", "version": "1.0.0", "entry": "scale_compute", "devices": ["cpu"],
 *      "inputs": [{"name": "x", "shape": ["..."], "dtype": "float32"}],
 *      "outputs": [{"name": "y", "shape": "x", "dtype": "float32"}],
 *      "attrs": [{"name": "alpha", "type": "float", "default": 1.0}]}
 *   )
 */
#ifndef PIPELINK_H_
#define PIPELINK_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PIPELINK_ABI_VERSION 1

#if defined(_WIN32) || defined(__CYGWIN__)
#define PIPELINK_EXPORT __declspec(dllexport)
#else
#define PIPELINK_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
#define PIPELINK_EXTERN_C extern "C"
extern "C" {
#else
#define PIPELINK_EXTERN_C
#endif

/* ---- Status codes: the same numbers as pipelink.errors.ErrorCode. ---- */
typedef enum PipeLinkStatus {
    PIPELINK_SUCCESS = 0,
    PIPELINK_ERR_INVALID_CONFIG = 1,
    PIPELINK_ERR_INVALID_ARGUMENT = 2,
    PIPELINK_ERR_MODULE_LOAD_FAILED = 3,
    PIPELINK_ERR_VERSION_MISMATCH = 4,
    PIPELINK_ERR_INTEGRITY = 5,
    PIPELINK_ERR_SHAPE_MISMATCH = 6,
    PIPELINK_ERR_DTYPE_MISMATCH = 7,
    PIPELINK_ERR_HARDWARE_UNSUPPORTED = 8,
    PIPELINK_ERR_MODULE_CRASH = 9,
    PIPELINK_ERR_TIMEOUT = 10,
    PIPELINK_ERR_OUT_OF_MEMORY = 11,
    PIPELINK_ERR_CUDA = 12,
    PIPELINK_ERR_TUNING_FAILED = 13
} PipeLinkStatus;

/* ---- Element types: PIPELINK_DTYPE_* equal pipelink.dtypes.DType.c_enum. ---- */
typedef enum PipeLinkDTypeId {
    PIPELINK_DTYPE_FLOAT32 = 0,
    PIPELINK_DTYPE_FLOAT16 = 1,
    PIPELINK_DTYPE_BFLOAT16 = 2,
    PIPELINK_DTYPE_FLOAT64 = 3,
    PIPELINK_DTYPE_INT8 = 4,
    PIPELINK_DTYPE_INT32 = 5,
    PIPELINK_DTYPE_INT64 = 6,
    PIPELINK_DTYPE_UINT8 = 7,
    PIPELINK_DTYPE_BOOL = 8,
    PIPELINK_DTYPE_FLOAT8_E4M3FN = 9,
    PIPELINK_DTYPE_FLOAT8_E5M2 = 10,
    PIPELINK_DTYPE_INT16 = 11,
    PIPELINK_DTYPE_UINT16 = 12,
    PIPELINK_DTYPE_UINT32 = 13,
    PIPELINK_DTYPE_UINT64 = 14,
    PIPELINK_DTYPE_FLOAT8_E4M3FNUZ = 15,
    PIPELINK_DTYPE_FLOAT8_E5M2FNUZ = 16,
    PIPELINK_DTYPE_FLOAT8_E8M0FNU = 17,
    /* the sub-byte types, one value per byte in its low bits (two's complement for the signed ones), the
     * high bits zero; a tensor of them has code PIPELINK_DL_UNPACKED_* and bits 8 */
    PIPELINK_DTYPE_INT4 = 18,
    PIPELINK_DTYPE_UINT4 = 19,
    PIPELINK_DTYPE_INT2 = 20,
    PIPELINK_DTYPE_UINT2 = 21,
    PIPELINK_DTYPE_FLOAT4_E2M1FN = 22,
    PIPELINK_DTYPE_UNKNOWN = -1
} PipeLinkDTypeId;

/* DLPack type codes (DLDataTypeCode) used in PipeLinkDataType.code, and PipeLink's own codes (from 128)
 * of the sub-byte types held one value per byte: DLPack's int4, uint4, int2, uint2 and float4_e2m1fn are
 * packed, several values to a byte, so no DLPack code describes these (pipelink.dtypes says the same). */
enum { PIPELINK_DL_INT = 0, PIPELINK_DL_UINT = 1, PIPELINK_DL_FLOAT = 2, PIPELINK_DL_BFLOAT = 4,
       PIPELINK_DL_BOOL = 6, PIPELINK_DL_FLOAT8_E4M3FN = 10, PIPELINK_DL_FLOAT8_E4M3FNUZ = 11,
       PIPELINK_DL_FLOAT8_E5M2 = 12, PIPELINK_DL_FLOAT8_E5M2FNUZ = 13, PIPELINK_DL_FLOAT8_E8M0FNU = 14,
       PIPELINK_DL_UNPACKED_INT4 = 128, PIPELINK_DL_UNPACKED_UINT4 = 129, PIPELINK_DL_UNPACKED_INT2 = 130,
       PIPELINK_DL_UNPACKED_UINT2 = 131, PIPELINK_DL_UNPACKED_FLOAT4_E2M1FN = 132 };

/* Device types: DLPack's DLDeviceType values. */
enum { PIPELINK_DEVICE_CPU = 1, PIPELINK_DEVICE_CUDA = 2, PIPELINK_DEVICE_CUDA_HOST = 3 };

/* ---- Tensors: the exact memory layout of DLPack's DLTensor. ---- */
typedef struct PipeLinkDevice {
    int32_t device_type; /* PIPELINK_DEVICE_* */
    int32_t device_id;
} PipeLinkDevice;

typedef struct PipeLinkDataType {
    uint8_t code;   /* PIPELINK_DL_* */
    uint8_t bits;
    uint16_t lanes; /* always 1 */
} PipeLinkDataType;

typedef struct PipeLinkTensor {
    void* data;             /* NULL (and ndim 0) for an absent optional input */
    PipeLinkDevice device;
    int32_t ndim;
    PipeLinkDataType dtype;
    int64_t* shape;
    int64_t* strides;       /* in elements, never NULL when passed by PipeLink */
    uint64_t byte_offset;   /* always 0 when passed by PipeLink */
} PipeLinkTensor;

/* ---- Attributes: the stage's attrs (and tuned parameters), by name. ---- */
typedef enum PipeLinkAttrType {
    PIPELINK_ATTR_FLOAT = 0,  /* value.f */
    PIPELINK_ATTR_INT = 1,    /* value.i */
    PIPELINK_ATTR_BOOL = 2,   /* value.i (0 or 1) */
    PIPELINK_ATTR_STR = 3,    /* value.s, NUL-terminated; count = strlen */
    PIPELINK_ATTR_FLOATS = 4, /* value.floats[count] */
    PIPELINK_ATTR_INTS = 5    /* value.ints[count] */
} PipeLinkAttrType;

typedef struct PipeLinkAttr {
    const char* name;
    int32_t type;  /* PipeLinkAttrType */
    int32_t count; /* 1 for scalars */
    union {
        double f;
        int64_t i;
        const char* s;
        const double* floats;
        const int64_t* ints;
    } value;
} PipeLinkAttr;

/* ---- Host services: what `context` points to in every call. ----
 * log(level, msg)       write to Python logging (logger "pipelink.native"); levels PIPELINK_LOG_*.
 * workspace(size)       scratch memory of at least `size` bytes from the runtime's allocator, kept per
 *                       stage and valid until the next call of the same stage (host memory on the CPU).
 *                       Declare "workspace_size" in the manifest so it is reserved before the first run;
 *                       a larger request grows it (an allocation on the hot path). NULL on failure.
 * cublas_handle(stream) a cuBLAS handle bound to `stream`; NULL on the CPU.
 * user                  the state returned by the operator's context_create hook (NULL without one). */
enum { PIPELINK_LOG_DEBUG = 0, PIPELINK_LOG_INFO = 1, PIPELINK_LOG_WARNING = 2, PIPELINK_LOG_ERROR = 3 };

typedef struct PipeLinkServices {
    int32_t abi_version; /* PIPELINK_ABI_VERSION of the runtime */
    int32_t device_type; /* PIPELINK_DEVICE_* of the stage */
    void (*log)(int32_t level, const char* msg);
    void* (*workspace)(uint64_t size);
    void* (*cublas_handle)(void* stream);
    void* user;
} PipeLinkServices;

#define PIPELINK_SERVICES(context) ((const PipeLinkServices*)(context))

/* ---- Function types. ---- */
/* Compute one operator. `in`/`out` follow the manifest's port order; `stream` is a cudaStream_t (NULL on the CPU). */
typedef int (*PipeLinkComputeFn)(const PipeLinkTensor* in, int32_t n_in, PipeLinkTensor* out, int32_t n_out,
                                 const PipeLinkAttr* attrs, int32_t n_attrs, void* context, void* stream);
/* Optional, once per stage when it is bound: create per-stage state, stored in services->user. */
typedef int (*PipeLinkContextCreateFn)(const PipeLinkAttr* attrs, int32_t n_attrs,
                                       const PipeLinkServices* services, void** state);
/* Optional: free what context_create made, when the stage is released. */
typedef void (*PipeLinkContextDestroyFn)(void* state);
/* Optional, once per stage and input signature: workspace bytes the compute will ask for. */
typedef int64_t (*PipeLinkWorkspaceSizeFn)(const PipeLinkTensor* in, int32_t n_in, const PipeLinkTensor* out,
                                           int32_t n_out, const PipeLinkAttr* attrs, int32_t n_attrs);

/* Define a compute entry point with the ABI's signature (exported, C linkage). */
#define PIPELINK_COMPUTE(fn)                                                                             \
    PIPELINK_EXTERN_C PIPELINK_EXPORT int fn(const PipeLinkTensor* in, int32_t n_in, PipeLinkTensor* out,  \
                                             int32_t n_out, const PipeLinkAttr* attrs, int32_t n_attrs,    \
                                             void* context, void* stream)

/* ---- Version symbols (seed section 3.6): one exported function per operator. ---- */
#define PIPELINK_VERSION(name, major, minor, patch)                                                      \
    PIPELINK_EXTERN_C PIPELINK_EXPORT int32_t pipeLinkVersion_##name##_##major##_##minor##_##patch(void) { \
        return (int32_t)((major) * 1000000 + (minor) * 1000 + (patch));                                    \
    }

/* ---- The manifest. ----
 * PIPELINK_MANIFEST(op, op, ...)  operator objects written as JSON tokens; the macro adds
 *                                 {"abi_version": 1, "operators": [...]} around them.
 * PIPELINK_MANIFEST_TEXT(literal) the whole manifest as one string literal (generated sources).
 * Both define pipelink_manifest() and, on ELF platforms, a copy in the section ".pipelink_manifest". */
#define PIPELINK__STR(x) #x
#define PIPELINK__XSTR(x) PIPELINK__STR(x)
#if defined(__ELF__)
#define PIPELINK__SECTION __attribute__((section(".pipelink_manifest"), used, aligned(1)))
#else
#define PIPELINK__SECTION
#endif
#define PIPELINK_MANIFEST_TEXT(text)                                                                     \
    PIPELINK__SECTION static const char pipelink__manifest_text[] = text;                                \
    PIPELINK_EXTERN_C PIPELINK_EXPORT const char* pipelink_manifest(void) { return pipelink__manifest_text; }
#define PIPELINK_MANIFEST(...)                                                                           \
    PIPELINK_MANIFEST_TEXT("{\"abi_version\": " PIPELINK__XSTR(PIPELINK_ABI_VERSION) ", \"operators\": [" \
                           #__VA_ARGS__ "]}")

/* ---- Helpers (header-only). ---- */
static inline int64_t pipelink_numel(const PipeLinkTensor* t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
    return n;
}

static inline PipeLinkDTypeId pipelink_dtype_id(const PipeLinkTensor* t) {
    switch (t->dtype.code) {
    case PIPELINK_DL_FLOAT:
        return t->dtype.bits == 32 ? PIPELINK_DTYPE_FLOAT32 : t->dtype.bits == 16 ? PIPELINK_DTYPE_FLOAT16
             : t->dtype.bits == 64 ? PIPELINK_DTYPE_FLOAT64 : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_BFLOAT: return t->dtype.bits == 16 ? PIPELINK_DTYPE_BFLOAT16 : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_INT:
        return t->dtype.bits == 8 ? PIPELINK_DTYPE_INT8 : t->dtype.bits == 16 ? PIPELINK_DTYPE_INT16
             : t->dtype.bits == 32 ? PIPELINK_DTYPE_INT32 : t->dtype.bits == 64 ? PIPELINK_DTYPE_INT64
             : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_UINT:
        return t->dtype.bits == 8 ? PIPELINK_DTYPE_UINT8 : t->dtype.bits == 16 ? PIPELINK_DTYPE_UINT16
             : t->dtype.bits == 32 ? PIPELINK_DTYPE_UINT32 : t->dtype.bits == 64 ? PIPELINK_DTYPE_UINT64
             : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_BOOL: return PIPELINK_DTYPE_BOOL;
    case PIPELINK_DL_FLOAT8_E4M3FN:
        return t->dtype.bits == 8 ? PIPELINK_DTYPE_FLOAT8_E4M3FN : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_FLOAT8_E5M2: return t->dtype.bits == 8 ? PIPELINK_DTYPE_FLOAT8_E5M2 : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_FLOAT8_E4M3FNUZ:
        return t->dtype.bits == 8 ? PIPELINK_DTYPE_FLOAT8_E4M3FNUZ : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_FLOAT8_E5M2FNUZ:
        return t->dtype.bits == 8 ? PIPELINK_DTYPE_FLOAT8_E5M2FNUZ : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_FLOAT8_E8M0FNU:
        return t->dtype.bits == 8 ? PIPELINK_DTYPE_FLOAT8_E8M0FNU : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_UNPACKED_INT4: return t->dtype.bits == 8 ? PIPELINK_DTYPE_INT4 : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_UNPACKED_UINT4: return t->dtype.bits == 8 ? PIPELINK_DTYPE_UINT4 : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_UNPACKED_INT2: return t->dtype.bits == 8 ? PIPELINK_DTYPE_INT2 : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_UNPACKED_UINT2: return t->dtype.bits == 8 ? PIPELINK_DTYPE_UINT2 : PIPELINK_DTYPE_UNKNOWN;
    case PIPELINK_DL_UNPACKED_FLOAT4_E2M1FN:
        return t->dtype.bits == 8 ? PIPELINK_DTYPE_FLOAT4_E2M1FN : PIPELINK_DTYPE_UNKNOWN;
    default: return PIPELINK_DTYPE_UNKNOWN;
    }
}

static inline const PipeLinkAttr* pipelink_find_attr(const PipeLinkAttr* attrs, int32_t n, const char* name) {
    for (int32_t i = 0; i < n; ++i)
        if (strcmp(attrs[i].name, name) == 0) return &attrs[i];
    return NULL;
}

static inline double pipelink_attr_float(const PipeLinkAttr* attrs, int32_t n, const char* name, double dflt) {
    const PipeLinkAttr* a = pipelink_find_attr(attrs, n, name);
    if (a == NULL) return dflt;
    return a->type == PIPELINK_ATTR_FLOAT ? a->value.f
         : (a->type == PIPELINK_ATTR_INT || a->type == PIPELINK_ATTR_BOOL) ? (double)a->value.i : dflt;
}

static inline int64_t pipelink_attr_int(const PipeLinkAttr* attrs, int32_t n, const char* name, int64_t dflt) {
    const PipeLinkAttr* a = pipelink_find_attr(attrs, n, name);
    if (a == NULL) return dflt;
    return (a->type == PIPELINK_ATTR_INT || a->type == PIPELINK_ATTR_BOOL) ? a->value.i
         : a->type == PIPELINK_ATTR_FLOAT ? (int64_t)a->value.f : dflt;
}

static inline void pipelink_log(void* context, int32_t level, const char* msg) {
    const PipeLinkServices* s = PIPELINK_SERVICES(context);
    if (s != NULL && s->log != NULL) s->log(level, msg);
}

#ifdef __cplusplus
} /* extern "C" */

/* The seed's descriptor headers (*.desc.h) compile against these; `pipelink build` reads them as text. */
enum HardwareFeatureId {
    HW_FEATURE_COMPUTE_CAPABILITY, HW_FEATURE_TENSOR_CORE, HW_FEATURE_FP16_SUPPORT, HW_FEATURE_BF16_SUPPORT,
    HW_FEATURE_TF32_SUPPORT, HW_FEATURE_FP8_SUPPORT, HW_FEATURE_FP32_SUPPORT, HW_FEATURE_FP64_SUPPORT,
    HW_FEATURE_ATOMIC_DOUBLE
};
struct HardwareFeature {
    HardwareFeatureId feature;
    int32_t minimum;
};
#endif

#endif /* PIPELINK_H_ */
