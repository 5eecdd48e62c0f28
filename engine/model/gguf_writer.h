/*
 * GGUF v3 writer: collects metadata key/values and tensors in memory, then writes one
 * little-endian GGUF file. Used by the test-model generator and by tests; the reader is gguf.h.
 *
 * Keys and tensors are written in insertion order; setting a key a second time replaces its value
 * in place (keeping its first position). Tensor data is copied at gguf_writer_add_tensor, so the
 * caller's buffers may be freed right after the call. All functions return 0 or a negative errno
 * (-EINVAL for bad arguments, -ENOMEM, -EEXIST for a duplicate tensor name, -EIO when writing
 * fails). A writer is not thread-safe.
 */
#ifndef TANDEM_ENGINE_MODEL_GGUF_WRITER_H
#define TANDEM_ENGINE_MODEL_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

typedef struct gguf_writer gguf_writer;

/* A new, empty writer. alignment: data alignment in bytes (0 means the GGUF default 32; else a
 * multiple of 8, at most 1 MiB). When alignment != 32 the key general.alignment is written first.
 * Returns NULL on a bad alignment or out of memory. Release with gguf_writer_free. */
gguf_writer *gguf_writer_new(uint32_t alignment);

/* Frees the writer and every copy it holds. NULL is a no-op. */
void gguf_writer_free(gguf_writer *w);

/* Scalar keys. key and val are copied. Keys must be non-empty and at most 65535 bytes. Setting
 * general.alignment (u32, a non-zero multiple of 8 up to 1 MiB, else -EINVAL) also changes the
 * alignment the data is padded to. */
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *val);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);

/* Array keys. vals[i] has lens[i] bytes (any bytes, NUL included), or strlen(vals[i]) when lens
 * is NULL. n may be 0. Everything is copied. */
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *vals,
                            const uint32_t *lens, size_t n);
int gguf_writer_set_arr_f32(gguf_writer *w, const char *key, const float *vals, size_t n);
int gguf_writer_set_arr_i32(gguf_writer *w, const char *key, const int32_t *vals, size_t n);
int gguf_writer_set_arr_u8(gguf_writer *w, const char *key, const uint8_t *vals, size_t n);

/*
 * Adds a tensor (GGUF dims: ne[0] innermost). name: 1..64 bytes, unique. type: any ggml type id
 * this build knows the size of (td_supported). n_dims 1..4, every ne[i] > 0. data (nbytes bytes)
 * is copied; nbytes must equal td_row_bytes(type, ne[0]) * (ne[1] * ... * ne[n_dims-1]), else
 * -EINVAL (also when ne[0] is not a whole number of quantized blocks).
 */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, tdtype type, int n_dims,
                           const int64_t *ne, const void *data, size_t nbytes);

/* Writes the file (created or truncated, mode 0644 before umask). On failure returns a negative
 * errno, writes a message naming the path into err (errlen bytes; err may be NULL) and removes
 * the partial file. The writer stays usable. */
int gguf_writer_write_file(gguf_writer *w, const char *path, char *err, size_t errlen);

#endif
