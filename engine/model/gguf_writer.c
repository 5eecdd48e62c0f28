/*
 * GGUF v3 writer (see gguf_writer.h). Each key's value is serialized when it is set (type id and
 * payload, little-endian), so writing the file is a straight copy of the pieces plus padding.
 */
#include "engine/model/gguf_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/buf.h"
#include "lib/common.h"
#include "lib/err.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF writer assumes a little-endian host"
#endif

#define GGUF_W_MAGIC     0x46554747u
#define GGUF_W_VERSION   3u
#define GGUF_W_MAX_KEY   65535u
#define GGUF_W_MAX_NAME  64u
#define GGUF_W_MAX_VALUE ((size_t)1 << 34) /* cap on one serialized value */

enum {
    GW_T_U8 = 0,
    GW_T_U32 = 4,
    GW_T_I32 = 5,
    GW_T_F32 = 6,
    GW_T_BOOL = 7,
    GW_T_STRING = 8,
    GW_T_ARRAY = 9,
};

typedef struct gw_kv {
    char *key;
    struct buf value; /* uint32 type id + payload */
} gw_kv;

typedef struct gw_tensor {
    char *name;
    tdtype type;
    int n_dims;
    int64_t ne[4];
    void *data;
    size_t nbytes;
} gw_tensor;

struct gguf_writer {
    uint32_t alignment;
    gw_kv *kvs;
    size_t n_kvs, cap_kvs;
    gw_tensor *tensors;
    size_t n_tensors, cap_tensors;
};

gguf_writer *gguf_writer_new(uint32_t alignment)
{
    if (alignment == 0) {
        alignment = 32;
    }
    if (alignment % 8 != 0 || alignment > (1u << 20)) {
        return NULL;
    }
    gguf_writer *w = calloc(1, sizeof(*w));
    if (!w) {
        return NULL;
    }
    w->alignment = alignment;
    if (alignment != 32 && gguf_writer_set_u32(w, "general.alignment", alignment) != 0) {
        gguf_writer_free(w);
        return NULL;
    }
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) {
        return;
    }
    for (size_t i = 0; i < w->n_kvs; i++) {
        free(w->kvs[i].key);
        buf_free(&w->kvs[i].value);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->kvs);
    free(w->tensors);
    free(w);
}

static int gw_put_u32(struct buf *b, uint32_t v)
{
    return buf_append(b, &v, sizeof(v));
}

static int gw_put_u64(struct buf *b, uint64_t v)
{
    return buf_append(b, &v, sizeof(v));
}

static int gw_put_str(struct buf *b, const char *s, size_t len)
{
    int rc = gw_put_u64(b, (uint64_t)len);
    return rc != 0 ? rc : buf_append(b, s, len);
}

/* Stores value (ownership moves to the writer) under key, replacing an existing value. */
static int gw_set(gguf_writer *w, const char *key, struct buf *value)
{
    for (size_t i = 0; i < w->n_kvs; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            buf_free(&w->kvs[i].value);
            w->kvs[i].value = *value;
            return 0;
        }
    }
    gw_kv *kvs = tandem_grow(w->kvs, &w->cap_kvs, w->n_kvs + 1, sizeof(*kvs), 16);
    if (!kvs) {
        return -ENOMEM;
    }
    w->kvs = kvs;
    char *k = strdup(key);
    if (!k) {
        return -ENOMEM;
    }
    w->kvs[w->n_kvs].key = k;
    w->kvs[w->n_kvs].value = *value;
    w->n_kvs++;
    return 0;
}

static int gw_check_key(const gguf_writer *w, const char *key)
{
    if (!w || !key) {
        return -EINVAL;
    }
    size_t len = strlen(key);
    return (len == 0 || len > GGUF_W_MAX_KEY) ? -EINVAL : 0;
}

/* Serializes a type id and n bytes of payload and stores them under key. */
static int gw_set_raw(gguf_writer *w, const char *key, uint32_t type, const void *payload, size_t n)
{
    int rc = gw_check_key(w, key);
    if (rc != 0) {
        return rc;
    }
    struct buf b;
    buf_init(&b, GGUF_W_MAX_VALUE);
    rc = gw_put_u32(&b, type);
    if (rc == 0) {
        rc = buf_append(&b, payload, n);
    }
    if (rc == 0) {
        rc = gw_set(w, key, &b);
    }
    if (rc != 0) {
        buf_free(&b);
    }
    return rc;
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v)
{
    bool is_alignment = key && strcmp(key, "general.alignment") == 0;
    if (is_alignment && (v == 0 || v % 8 != 0 || v > (1u << 20))) {
        return -EINVAL;
    }
    int rc = gw_set_raw(w, key, GW_T_U32, &v, sizeof(v));
    if (rc == 0 && is_alignment) {
        w->alignment = v; /* the data is padded to what the file says */
    }
    return rc;
}

int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v)
{
    return gw_set_raw(w, key, GW_T_I32, &v, sizeof(v));
}

int gguf_writer_set_f32(gguf_writer *w, const char *key, float v)
{
    return gw_set_raw(w, key, GW_T_F32, &v, sizeof(v));
}

int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return gw_set_raw(w, key, GW_T_BOOL, &b, sizeof(b));
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *val)
{
    int rc = gw_check_key(w, key);
    if (rc != 0 || !val) {
        return rc != 0 ? rc : -EINVAL;
    }
    struct buf b;
    buf_init(&b, GGUF_W_MAX_VALUE);
    rc = gw_put_u32(&b, GW_T_STRING);
    if (rc == 0) {
        rc = gw_put_str(&b, val, strlen(val));
    }
    if (rc == 0) {
        rc = gw_set(w, key, &b);
    }
    if (rc != 0) {
        buf_free(&b);
    }
    return rc;
}

/* Array header (type ARRAY, element type, count) followed by n fixed-size elements. */
static int gw_set_arr_fixed(gguf_writer *w, const char *key, uint32_t elem_type, const void *vals,
                            size_t elem_size, size_t n)
{
    int rc = gw_check_key(w, key);
    if (rc != 0) {
        return rc;
    }
    if ((n > 0 && !vals) || n > GGUF_W_MAX_VALUE / elem_size) {
        return -EINVAL;
    }
    struct buf b;
    buf_init(&b, GGUF_W_MAX_VALUE);
    rc = gw_put_u32(&b, GW_T_ARRAY);
    if (rc == 0) {
        rc = gw_put_u32(&b, elem_type);
    }
    if (rc == 0) {
        rc = gw_put_u64(&b, (uint64_t)n);
    }
    if (rc == 0 && n > 0) {
        rc = buf_append(&b, vals, n * elem_size);
    }
    if (rc == 0) {
        rc = gw_set(w, key, &b);
    }
    if (rc != 0) {
        buf_free(&b);
    }
    return rc;
}

int gguf_writer_set_arr_f32(gguf_writer *w, const char *key, const float *vals, size_t n)
{
    return gw_set_arr_fixed(w, key, GW_T_F32, vals, sizeof(float), n);
}

int gguf_writer_set_arr_u8(gguf_writer *w, const char *key, const uint8_t *vals, size_t n)
{
    return gw_set_arr_fixed(w, key, GW_T_U8, vals, 1, n);
}

int gguf_writer_set_arr_i32(gguf_writer *w, const char *key, const int32_t *vals, size_t n)
{
    return gw_set_arr_fixed(w, key, GW_T_I32, vals, sizeof(int32_t), n);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *vals,
                            const uint32_t *lens, size_t n)
{
    int rc = gw_check_key(w, key);
    if (rc != 0) {
        return rc;
    }
    if (n > 0 && !vals) {
        return -EINVAL;
    }
    struct buf b;
    buf_init(&b, GGUF_W_MAX_VALUE);
    rc = gw_put_u32(&b, GW_T_ARRAY);
    if (rc == 0) {
        rc = gw_put_u32(&b, GW_T_STRING);
    }
    if (rc == 0) {
        rc = gw_put_u64(&b, (uint64_t)n);
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!vals[i]) {
            rc = -EINVAL;
            break;
        }
        rc = gw_put_str(&b, vals[i], lens ? lens[i] : strlen(vals[i]));
    }
    if (rc == 0) {
        rc = gw_set(w, key, &b);
    }
    if (rc != 0) {
        buf_free(&b);
    }
    return rc;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, tdtype type, int n_dims,
                           const int64_t *ne, const void *data, size_t nbytes)
{
    if (!w || !name || !ne || (nbytes > 0 && !data) || !td_supported((uint32_t)type) ||
        n_dims < 1 || n_dims > 4) {
        return -EINVAL;
    }
    size_t name_len = strlen(name);
    if (name_len == 0 || name_len > GGUF_W_MAX_NAME) {
        return -EINVAL;
    }
    size_t rows = 1;
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] <= 0) {
            return -EINVAL;
        }
        if (i > 0 && __builtin_mul_overflow(rows, (size_t)ne[i], &rows)) {
            return -EINVAL;
        }
    }
    size_t row_bytes = td_row_bytes(type, ne[0]);
    size_t want;
    if (row_bytes == 0 || __builtin_mul_overflow(row_bytes, rows, &want) || want != nbytes) {
        return -EINVAL;
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        if (strcmp(w->tensors[i].name, name) == 0) {
            return -EEXIST;
        }
    }
    gw_tensor *ts = tandem_grow(w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof(*ts), 16);
    if (!ts) {
        return -ENOMEM;
    }
    w->tensors = ts;
    gw_tensor t = {.type = type, .n_dims = n_dims, .nbytes = nbytes, .ne = {1, 1, 1, 1}};
    for (int i = 0; i < n_dims; i++) {
        t.ne[i] = ne[i];
    }
    t.name = strdup(name);
    t.data = malloc(nbytes ? nbytes : 1);
    if (!t.name || !t.data) {
        free(t.name);
        free(t.data);
        return -ENOMEM;
    }
    if (nbytes > 0) {
        memcpy(t.data, data, nbytes);
    }
    w->tensors[w->n_tensors++] = t;
    return 0;
}

static size_t gw_pad(size_t n, size_t align)
{
    return (align - n % align) % align;
}

static int gw_fwrite(FILE *f, const void *p, size_t n)
{
    return (n == 0 || fwrite(p, 1, n, f) == n) ? 0 : -EIO;
}

static int gw_write_zeros(FILE *f, size_t n)
{
    static const uint8_t zeros[64];
    while (n > 0) {
        size_t k = n < sizeof(zeros) ? n : sizeof(zeros);
        if (gw_fwrite(f, zeros, k) != 0) {
            return -EIO;
        }
        n -= k;
    }
    return 0;
}

/* Header, KVs and tensor infos, serialized into b. */
static int gw_build_header(const gguf_writer *w, struct buf *b)
{
    int rc = gw_put_u32(b, GGUF_W_MAGIC);
    rc = rc ? rc : gw_put_u32(b, GGUF_W_VERSION);
    rc = rc ? rc : gw_put_u64(b, (uint64_t)w->n_tensors);
    rc = rc ? rc : gw_put_u64(b, (uint64_t)w->n_kvs);
    for (size_t i = 0; rc == 0 && i < w->n_kvs; i++) {
        rc = gw_put_str(b, w->kvs[i].key, strlen(w->kvs[i].key));
        rc = rc ? rc : buf_append(b, w->kvs[i].value.data, w->kvs[i].value.len);
    }
    uint64_t offset = 0;
    for (size_t i = 0; rc == 0 && i < w->n_tensors; i++) {
        const gw_tensor *t = &w->tensors[i];
        rc = gw_put_str(b, t->name, strlen(t->name));
        rc = rc ? rc : gw_put_u32(b, (uint32_t)t->n_dims);
        for (int d = 0; rc == 0 && d < t->n_dims; d++) {
            rc = gw_put_u64(b, (uint64_t)t->ne[d]);
        }
        rc = rc ? rc : gw_put_u32(b, (uint32_t)t->type);
        rc = rc ? rc : gw_put_u64(b, offset);
        offset += t->nbytes + gw_pad(t->nbytes, w->alignment);
    }
    return rc;
}

int gguf_writer_write_file(gguf_writer *w, const char *path, char *err, size_t errlen)
{
    if (err && errlen) {
        err[0] = '\0';
    }
    if (!w || !path) {
        tandem_set_err(err, errlen, "gguf writer: invalid argument");
        return -EINVAL;
    }
    struct buf hdr;
    buf_init(&hdr, GGUF_W_MAX_VALUE);
    int rc = gw_build_header(w, &hdr);
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: cannot build GGUF header: %s", path, tandem_strerror(rc));
        buf_free(&hdr);
        return rc;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        rc = -errno;
        tandem_set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        buf_free(&hdr);
        return rc;
    }
    rc = gw_fwrite(f, hdr.data, hdr.len);
    rc = rc ? rc : gw_write_zeros(f, gw_pad(hdr.len, w->alignment));
    for (size_t i = 0; rc == 0 && i < w->n_tensors; i++) {
        rc = gw_fwrite(f, w->tensors[i].data, w->tensors[i].nbytes);
        rc = rc ? rc : gw_write_zeros(f, gw_pad(w->tensors[i].nbytes, w->alignment));
    }
    if (fclose(f) != 0 && rc == 0) {
        rc = -EIO;
    }
    buf_free(&hdr);
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: write failed: %s", path, tandem_strerror(rc));
        unlink(path);
    }
    return rc;
}
