/*
 * Safetensors reader: maps a .safetensors file read-only (or borrows a caller's buffer, for
 * fuzzing), parses its header (8-byte little-endian length + JSON object, lib/json.h) and locates
 * every tensor's bytes. "__metadata__" is ignored.
 *
 * Validation (messages name the file and the tensor): header length inside the file and at most
 * 100 MB, the header a JSON object of objects, dtype one of F32/F16/BF16 (any other dtype is an
 * error naming the tensor and the dtype), shape an array of 0..4 non-negative integers,
 * data_offsets [begin, end] with begin <= end inside the data section, end - begin equal to the
 * element count times the dtype size, and no two tensors' byte ranges overlapping.
 *
 * Shapes are kept in safetensors (row-major, outermost first) order; the model loader reverses
 * them into ggml's ne[] order. Lifetimes: every pointer lives until safetensors_close.
 */
#ifndef TANDEM_ENGINE_MODEL_SAFETENSORS_H
#define TANDEM_ENGINE_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#define SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)
#define SAFETENSORS_MAX_DIMS   4

typedef struct safetensors_tensor {
    char *name;                          /* NUL-terminated copy of the JSON key */
    tdtype type;                         /* TD_F32, TD_F16 or TD_BF16 */
    int n_dims;                          /* 0..4 (0: a scalar) */
    int64_t shape[SAFETENSORS_MAX_DIMS]; /* shape[0] outermost; unused dims 1 */
    int64_t n_elems;
    size_t nbytes;    /* end - begin */
    const void *data; /* inside the file: base + data_offset + begin */
} safetensors_tensor;

typedef struct safetensors_file {
    size_t n_tensors;
    safetensors_tensor *tensors; /* [n_tensors] sorted by name */
    const uint8_t *base;         /* file bytes */
    size_t size;
    size_t data_offset; /* 8 + header length */
    void *priv;         /* mapping */
} safetensors_file;

/* Maps and parses path. NULL on failure with "path: ..." in err (err may be NULL). */
safetensors_file *safetensors_open(const char *path, char *err, size_t errlen);

/* Parses size bytes at data (borrowed; must outlive the result). label names the input in
 * messages (NULL: "<buffer>"). */
safetensors_file *safetensors_open_buffer(const void *data, size_t size, const char *label,
                                          char *err, size_t errlen);

/* Unmaps and frees. NULL is a no-op. */
void safetensors_close(safetensors_file *f);

/* Tensor by exact name, or NULL (binary search). */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

#endif
