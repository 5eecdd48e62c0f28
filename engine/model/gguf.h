/*
 * GGUF reader: parses and validates the header, metadata key/values and tensor infos of a GGUF
 * v2/v3 little-endian file, memory-mapped read-only (or of a caller's buffer, for fuzzing), and
 * locates every tensor's data. Nothing is copied except tensor names and small indexes; strings
 * and arrays point into the mapping and are NOT aligned (read multi-byte array elements with
 * memcpy or copy them out).
 *
 * Validation (every failure is an error message naming the file, the byte offset and the key or
 * tensor): magic, version 2 or 3 (1 is rejected), counts bounded by what the file could hold,
 * strings inside the file and at most 4 GiB - 1, the 13 value types with nested arrays (depth <=
 * 8), duplicate keys or tensor names, tensor names 1..256 bytes, n_dims 1..4, dims > 0 with an
 * element count that fits int64, type id < 64, offsets multiple of general.alignment (default 32,
 * any non-zero multiple of 8), and every tensor's [offset, offset + nbytes) inside the file for
 * every type whose size is known. Tensor types the engine cannot compute with (td_supported false)
 * are not a parse error: the model loader rejects them by name.
 *
 * Lifetimes: a gguf_ctx owns its mapping (gguf_open) or borrows the caller's buffer
 * (gguf_open_buffer: the buffer must outlive the context). Every pointer handed out (keys, strings,
 * arrays, tensor infos, tensor data) lives until gguf_close. A context is immutable after opening
 * and may be read from several threads.
 */
#ifndef TANDEM_ENGINE_MODEL_GGUF_H
#define TANDEM_ENGINE_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"

#define GGUF_MAGIC             0x46554747u /* "GGUF" read as a little-endian uint32 */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS          4
#define GGUF_MAX_NAME          256u /* tensor name bytes (the spec says 64; we are lenient) */
#define GGUF_MAX_ARRAY_DEPTH   8    /* nested arrays */

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

/* One metadata key/value. */
typedef struct gguf_kv {
    model_str key; /* not NUL-terminated */
    gguf_type type;
    const uint8_t *data;   /* scalar: its bytes; string: its bytes; array: the first element */
    uint64_t n;            /* string: length; array: element count; scalar: 1 */
    gguf_type arr_type;    /* array element type (GGUF_TYPE_COUNT when not an array) */
    const model_str *strs; /* array of strings: [n] views into the file, else NULL */
} gguf_kv;

/* One tensor info. */
typedef struct gguf_tensor_info {
    char *name;       /* NUL-terminated copy */
    uint32_t type;    /* ggml type id (may be unsupported: check td_supported) */
    int n_dims;       /* 1..4 */
    int64_t ne[4];    /* ne[0] innermost; unused dims 1 */
    int64_t n_elems;  /* product of ne */
    uint64_t offset;  /* from the start of the data section */
    size_t nbytes;    /* data size, 0 when the type's size is unknown */
    const void *data; /* inside the file (aligned to `alignment` from the file start) */
} gguf_tensor_info;

typedef struct gguf_ctx {
    uint32_t version;   /* 2 or 3 */
    uint32_t alignment; /* general.alignment or 32 */
    size_t n_kv;
    gguf_kv *kv; /* [n_kv] in file order */
    size_t n_tensors;
    gguf_tensor_info *tensors; /* [n_tensors] in file order */
    const uint8_t *base;       /* file bytes */
    size_t size;               /* file size */
    size_t data_offset;        /* start of the data section */
    void *priv;                /* mapping and indexes */
} gguf_ctx;

/* Maps and parses path. NULL on failure with a message ("path: ...") in err (may be NULL). */
gguf_ctx *gguf_open(const char *path, char *err, size_t errlen);

/* Parses size bytes at data, borrowed. label names the input in messages (NULL: "<buffer>").
 * Tensor data pointers are only 32-byte aligned when data is. */
gguf_ctx *gguf_open_buffer(const void *data, size_t size, const char *label, char *err,
                           size_t errlen);

/* Releases the context (unmaps the file). NULL is a no-op. */
void gguf_close(gguf_ctx *g);

/* Key/value by exact key, or NULL. */
const gguf_kv *gguf_find_kv(const gguf_ctx *g, const char *key);

/* Tensor info by exact name, or NULL (binary search, O(log n)). */
const gguf_tensor_info *gguf_find_tensor(const gguf_ctx *g, const char *name);

/*
 * Typed lookups. 0 with *out set; -ENOENT when the key is absent (err "<key>: missing");
 * -EINVAL when it has another type or its value does not fit (err "<key>: expected ..., got ...").
 * Integer getters accept any integer type whose value fits (so u32 and u64 counts both work);
 * gguf_get_f32 accepts f32 and f64. err may be NULL.
 */
int gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out, char *err, size_t errlen);
int gguf_get_u64(const gguf_ctx *g, const char *key, uint64_t *out, char *err, size_t errlen);
int gguf_get_i32(const gguf_ctx *g, const char *key, int32_t *out, char *err, size_t errlen);
int gguf_get_f32(const gguf_ctx *g, const char *key, float *out, char *err, size_t errlen);
int gguf_get_bool(const gguf_ctx *g, const char *key, bool *out, char *err, size_t errlen);
/* String value as a view into the file (not NUL-terminated). */
int gguf_get_str(const gguf_ctx *g, const char *key, model_str *out, char *err, size_t errlen);
/* Array whose elements have type elem (GGUF_TYPE_COUNT: any). */
int gguf_get_arr(const gguf_ctx *g, const char *key, gguf_type elem, const gguf_kv **out, char *err,
                 size_t errlen);

/* Integer array element i of kv as int64 (any integer element type; i < kv->n). */
int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i);

/* "u8", "i8", ..., "string", "array", "f64"; "?" for unknown ids. */
const char *gguf_type_name(uint32_t t);

/* Bytes of a tensor of type ggml_type with n_elems elements and ne0 innermost, or 0 when the size
 * of that type is unknown or ne0 is not a whole number of its blocks. */
size_t gguf_tensor_nbytes(uint32_t ggml_type, int64_t ne0, int64_t n_elems);

#endif
