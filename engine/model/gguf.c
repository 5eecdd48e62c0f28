/*
 * GGUF reader (see gguf.h). A bounded cursor walks the header; every read checks the remaining
 * bytes first, so a truncated or corrupt file ends in an error message, never out of bounds.
 * Counts are checked against the bytes left before anything is allocated for them.
 */
#include "engine/model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/common.h"
#include "lib/err.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

#define GGUF_MAX_TYPE_ID 64u

typedef struct gguf_priv {
    void *map; /* mmap base, or NULL for a borrowed buffer */
    size_t map_size;
    size_t *sorted; /* tensor indexes sorted by name */
} gguf_priv;

typedef struct gguf_cursor {
    const uint8_t *p;
    size_t size;
    size_t pos;
    const char *label;
    char *err;
    size_t errlen;
} gguf_cursor;

/* Sets the cursor's error to "<label>: offset <pos>: " and the message. */
#define gc_fail(c, fmt, ...)                                                                       \
    tandem_set_err((c)->err, (c)->errlen, "%s: offset %zu: " fmt, (c)->label, (c)->pos,            \
                   ##__VA_ARGS__)

static size_t gc_left(const gguf_cursor *c)
{
    return c->size - c->pos;
}

static int gc_read(gguf_cursor *c, void *out, size_t n, const char *what)
{
    if (gc_left(c) < n) {
        gc_fail(c, "file truncated reading %s (%zu bytes needed, %zu left)", what, n, gc_left(c));
        return -EINVAL;
    }
    memcpy(out, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int gc_u32(gguf_cursor *c, uint32_t *v, const char *what)
{
    return gc_read(c, v, sizeof(*v), what);
}

static int gc_u64(gguf_cursor *c, uint64_t *v, const char *what)
{
    return gc_read(c, v, sizeof(*v), what);
}

/* A string (uint64 length + bytes) as a view into the buffer. */
static int gc_str(gguf_cursor *c, model_str *out, const char *what)
{
    uint64_t len;
    if (gc_u64(c, &len, what) != 0) {
        return -EINVAL;
    }
    if (len > gc_left(c)) {
        c->pos -= sizeof(len);
        gc_fail(c, "%s: string length %llu runs past the end of the file", what,
                (unsigned long long)len);
        return -EINVAL;
    }
    if (len > UINT32_MAX) {
        gc_fail(c, "%s: string length %llu too large", what, (unsigned long long)len);
        return -EINVAL;
    }
    out->s = (const char *)(c->p + c->pos);
    out->len = (uint32_t)len;
    c->pos += (size_t)len;
    return 0;
}

static size_t gguf_scalar_size(uint32_t t)
{
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL:
        return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
        return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32:
        return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *gguf_type_name(uint32_t t)
{
    static const char *const names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return t < ARRAY_SIZE(names) ? names[t] : "?";
}

/* Skips one value of type t (used for elements of nested arrays). */
static int gc_skip_value(gguf_cursor *c, uint32_t t, int depth, const char *key);

/* Reads an array body (element type, count, elements). With strs non-NULL and string elements,
 * builds the view index. */
static int gc_array(gguf_cursor *c, int depth, const char *key, gguf_kv *kv)
{
    uint32_t et;
    uint64_t n;
    if (depth > GGUF_MAX_ARRAY_DEPTH) {
        gc_fail(c, "key '%s': arrays nested deeper than %d", key, GGUF_MAX_ARRAY_DEPTH);
        return -EINVAL;
    }
    if (gc_u32(c, &et, "array element type") != 0 || gc_u64(c, &n, "array length") != 0) {
        return -EINVAL;
    }
    if (et >= GGUF_TYPE_COUNT) {
        gc_fail(c, "key '%s': invalid array element type %u", key, et);
        return -EINVAL;
    }
    size_t min_elem = gguf_scalar_size(et);
    if (et == GGUF_TYPE_STRING) {
        min_elem = 8;
    } else if (et == GGUF_TYPE_ARRAY) {
        min_elem = 12;
    }
    if (n > gc_left(c) / min_elem) {
        gc_fail(c, "key '%s': array of %llu %s elements does not fit in the file", key,
                (unsigned long long)n, gguf_type_name(et));
        return -EINVAL;
    }
    if (kv) {
        kv->arr_type = (gguf_type)et;
        kv->n = n;
        kv->data = c->p + c->pos;
    }
    if (et != GGUF_TYPE_STRING && et != GGUF_TYPE_ARRAY) {
        c->pos += (size_t)n * min_elem;
        return 0;
    }
    model_str *strs = NULL;
    if (kv && et == GGUF_TYPE_STRING) {
        strs = calloc(n ? (size_t)n : 1, sizeof(*strs));
        if (!strs) {
            gc_fail(c, "key '%s': out of memory", key);
            return -ENOMEM;
        }
        kv->strs = strs;
    }
    for (uint64_t i = 0; i < n; i++) {
        int rc;
        if (et == GGUF_TYPE_STRING) {
            model_str s;
            rc = gc_str(c, &s, key);
            if (strs && rc == 0) {
                strs[i] = s;
            }
        } else {
            rc = gc_skip_value(c, et, depth + 1, key);
        }
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static int gc_skip_value(gguf_cursor *c, uint32_t t, int depth, const char *key)
{
    if (t == GGUF_TYPE_STRING) {
        model_str s;
        return gc_str(c, &s, key);
    }
    if (t == GGUF_TYPE_ARRAY) {
        return gc_array(c, depth, key, NULL);
    }
    size_t n = gguf_scalar_size(t);
    if (gc_left(c) < n) {
        gc_fail(c, "key '%s': file truncated in a %s value", key, gguf_type_name(t));
        return -EINVAL;
    }
    c->pos += n;
    return 0;
}

/* One key/value into kv (kv->strs may be allocated even on failure). */
static int gc_kv(gguf_cursor *c, gguf_kv *kv)
{
    char key[128];
    if (gc_str(c, &kv->key, "key") != 0) {
        return -EINVAL;
    }
    snprintf(key, sizeof(key), "%.*s", (int)(kv->key.len < 100 ? kv->key.len : 100), kv->key.s);
    if (kv->key.len == 0) {
        gc_fail(c, "empty key");
        return -EINVAL;
    }
    uint32_t t;
    if (gc_u32(c, &t, "value type") != 0) {
        return -EINVAL;
    }
    if (t >= GGUF_TYPE_COUNT) {
        gc_fail(c, "key '%s': invalid value type %u", key, t);
        return -EINVAL;
    }
    kv->type = (gguf_type)t;
    kv->arr_type = GGUF_TYPE_COUNT;
    if (t == GGUF_TYPE_ARRAY) {
        return gc_array(c, 1, key, kv);
    }
    if (t == GGUF_TYPE_STRING) {
        model_str s;
        if (gc_str(c, &s, key) != 0) {
            return -EINVAL;
        }
        kv->data = (const uint8_t *)s.s;
        kv->n = s.len;
        return 0;
    }
    kv->data = c->p + c->pos;
    kv->n = 1;
    if (gc_skip_value(c, t, 1, key) != 0) {
        return -EINVAL;
    }
    if (t == GGUF_TYPE_BOOL && kv->data[0] > 1) {
        c->pos -= 1;
        gc_fail(c, "key '%s': invalid bool value %u", key, kv->data[0]);
        return -EINVAL;
    }
    return 0;
}

size_t gguf_tensor_nbytes(uint32_t ggml_type, int64_t ne0, int64_t n_elems)
{
    /* {elements per block, bytes per block} for the ggml types whose layout is fixed. */
    static const struct {
        uint32_t type;
        int64_t blck;
        size_t bytes;
    } sizes[] = {
        {0, 1, 4},      {1, 1, 2},      {2, 32, 18},    {3, 32, 20},    {6, 32, 22},
        {7, 32, 24},    {8, 32, 34},    {9, 32, 36},    {10, 256, 84},  {11, 256, 110},
        {12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {15, 256, 292}, {24, 1, 1},
        {25, 1, 2},     {26, 1, 4},     {27, 1, 8},     {28, 1, 8},     {30, 1, 2},
        {16, 256, 66},  {17, 256, 74},  {18, 256, 98},  {19, 256, 50},  {20, 32, 18},
        {21, 256, 110}, {22, 256, 82},  {23, 256, 136}, {29, 256, 56},  {34, 256, 54},
        {35, 256, 66},  {39, 32, 17},
    };
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
        if (sizes[i].type != ggml_type) {
            continue;
        }
        if (ne0 <= 0 || n_elems <= 0 || ne0 % sizes[i].blck != 0) {
            return 0;
        }
        size_t out;
        if (__builtin_mul_overflow((size_t)(n_elems / sizes[i].blck), sizes[i].bytes, &out)) {
            return 0;
        }
        return out;
    }
    return 0;
}

static int gc_tensor_info(gguf_cursor *c, gguf_tensor_info *t)
{
    model_str name;
    if (gc_str(c, &name, "tensor name") != 0) {
        return -EINVAL;
    }
    if (name.len == 0 || name.len > GGUF_MAX_NAME) {
        gc_fail(c, "tensor name of %u bytes (must be 1..%u)", name.len, GGUF_MAX_NAME);
        return -EINVAL;
    }
    if (memchr(name.s, '\0', name.len)) {
        gc_fail(c, "tensor name contains a NUL byte");
        return -EINVAL;
    }
    t->name = malloc((size_t)name.len + 1);
    if (t->name) {
        memcpy(t->name, name.s, name.len);
        t->name[name.len] = '\0';
    }
    if (!t->name) {
        gc_fail(c, "out of memory");
        return -ENOMEM;
    }
    uint32_t n_dims;
    if (gc_u32(c, &n_dims, "tensor n_dims") != 0) {
        return -EINVAL;
    }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        gc_fail(c, "tensor '%s': n_dims %u (must be 1..%d)", t->name, n_dims, GGUF_MAX_DIMS);
        return -EINVAL;
    }
    t->n_dims = (int)n_dims;
    t->n_elems = 1;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        t->ne[i] = 1;
    }
    for (uint32_t i = 0; i < n_dims; i++) {
        uint64_t d;
        if (gc_u64(c, &d, "tensor dimension") != 0) {
            return -EINVAL;
        }
        if (d == 0 || d > INT64_MAX ||
            __builtin_mul_overflow(t->n_elems, (int64_t)d, &t->n_elems)) {
            gc_fail(c, "tensor '%s': invalid dimension %u = %llu", t->name, i,
                    (unsigned long long)d);
            return -EINVAL;
        }
        t->ne[i] = (int64_t)d;
    }
    if (gc_u32(c, &t->type, "tensor type") != 0 || gc_u64(c, &t->offset, "tensor offset") != 0) {
        return -EINVAL;
    }
    if (t->type >= GGUF_MAX_TYPE_ID) {
        gc_fail(c, "tensor '%s': invalid type id %u", t->name, t->type);
        return -EINVAL;
    }
    t->nbytes = gguf_tensor_nbytes(t->type, t->ne[0], t->n_elems);
    if (t->nbytes == 0 && td_supported(t->type)) {
        gc_fail(c,
                "tensor '%s': %s rows of %lld elements are not whole blocks of %d (or the "
                "tensor is too large)",
                t->name, td_name(t->type), (long long)t->ne[0],
                (int)td_block_elems((tdtype)t->type));
        return -EINVAL;
    }
    return 0;
}

/* qsort_r comparator of key/value indexes by key bytes. */
static int gguf_cmp_keys(const void *a, const void *b, void *arg)
{
    const gguf_ctx *g = arg;
    const model_str *x = &g->kv[*(const size_t *)a].key, *y = &g->kv[*(const size_t *)b].key;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/* Rejects duplicate keys in O(n log n) (a file may hold millions of tiny keys). */
static int gguf_check_dup_keys(const gguf_ctx *g, gguf_cursor *c)
{
    if (g->n_kv < 2) {
        return 0;
    }
    size_t *order = calloc(g->n_kv, sizeof(*order));
    if (!order) {
        gc_fail(c, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < g->n_kv; i++) {
        order[i] = i;
    }
    qsort_r(order, g->n_kv, sizeof(*order), gguf_cmp_keys, (void *)g);
    int rc = 0;
    for (size_t i = 1; i < g->n_kv; i++) {
        if (gguf_cmp_keys(&order[i - 1], &order[i], (void *)g) == 0) {
            const model_str *k = &g->kv[order[i]].key;
            gc_fail(c, "duplicate key '%.*s'", (int)(k->len < 200 ? k->len : 200), k->s);
            rc = -EINVAL;
            break;
        }
    }
    free(order);
    return rc;
}

static int gguf_cmp_names(const void *a, const void *b, void *arg)
{
    const gguf_ctx *g = arg;
    return strcmp(g->tensors[*(const size_t *)a].name, g->tensors[*(const size_t *)b].name);
}

/* The end of the furthest tensor's data, as the header describes it (saturating). */
static uint64_t gguf_data_end(const gguf_ctx *g)
{
    uint64_t need = g->data_offset;
    for (size_t i = 0; i < g->n_tensors; i++) {
        uint64_t end;
        if (__builtin_add_overflow((uint64_t)g->data_offset, g->tensors[i].offset, &end) ||
            __builtin_add_overflow(end, (uint64_t)g->tensors[i].nbytes, &end)) {
            return UINT64_MAX;
        }
        need = end > need ? end : need;
    }
    return need;
}

static int gguf_parse(gguf_ctx *g, const char *label, char *err, size_t errlen)
{
    gguf_priv *priv = g->priv;
    gguf_cursor c = {.p = g->base, .size = g->size, .label = label, .err = err, .errlen = errlen};
    uint32_t magic, version;
    uint64_t n_tensors, n_kv;
    if (gc_u32(&c, &magic, "magic") != 0) {
        return -EINVAL;
    }
    if (magic != GGUF_MAGIC) {
        c.pos = 0;
        gc_fail(&c, "not a GGUF file (bad magic 0x%08x, want \"GGUF\")", magic);
        return -EINVAL;
    }
    if (gc_u32(&c, &version, "version") != 0) {
        return -EINVAL;
    }
    c.pos -= sizeof(version);
    if (version == 1) {
        gc_fail(&c, "GGUF version 1 is not supported (only versions 2 and 3)");
        return -EINVAL;
    }
    if (version != 2 && version != 3) {
        gc_fail(&c, "unsupported GGUF version %u%s (only versions 2 and 3)", version,
                (version & 0xffffu) == 0 ? " (big-endian file?)" : "");
        return -EINVAL;
    }
    c.pos += sizeof(version);
    g->version = version;
    if (gc_u64(&c, &n_tensors, "tensor count") != 0 || gc_u64(&c, &n_kv, "metadata count") != 0) {
        return -EINVAL;
    }
    /* Smallest possible tensor info: 8 + 1 name + 4 + 8 + 4 + 8 bytes; key/value: 8 + 1 + 4 + 1. */
    if (n_tensors > gc_left(&c) / 33) {
        gc_fail(&c, "tensor count %llu does not fit in the file", (unsigned long long)n_tensors);
        return -EINVAL;
    }
    if (n_kv > gc_left(&c) / 14) {
        gc_fail(&c, "metadata count %llu does not fit in the file", (unsigned long long)n_kv);
        return -EINVAL;
    }
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof(*g->kv));
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof(*g->tensors));
    priv->sorted = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof(*priv->sorted));
    if (!g->kv || !g->tensors || !priv->sorted) {
        gc_fail(&c, "out of memory");
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv++;
        int rc = gc_kv(&c, &g->kv[i]);
        if (rc != 0) {
            return rc;
        }
    }
    int dup_rc = gguf_check_dup_keys(g, &c);
    if (dup_rc != 0) {
        return dup_rc;
    }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *akv = gguf_find_kv(g, "general.alignment");
    if (akv) {
        uint32_t a = 0;
        char aerr[128];
        if (gguf_get_u32(g, "general.alignment", &a, aerr, sizeof(aerr)) != 0 || a == 0 ||
            a % 8 != 0 || a > (1u << 24)) {
            gc_fail(&c, "general.alignment: must be a non-zero multiple of 8 (u32)");
            return -EINVAL;
        }
        g->alignment = a;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        g->n_tensors++;
        int rc = gc_tensor_info(&c, &g->tensors[i]);
        if (rc != 0) {
            return rc;
        }
        priv->sorted[i] = (size_t)i;
    }
    size_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_offset = c.pos + pad;
    if (n_tensors > 0 && g->data_offset > g->size) {
        gc_fail(&c, "file truncated before the tensor data section");
        return -EINVAL;
    }
    for (size_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor_info *t = &g->tensors[i];
        uint64_t end;
        if (t->offset % g->alignment != 0) {
            gc_fail(&c, "tensor '%s': data offset %llu is not a multiple of the alignment %u",
                    t->name, (unsigned long long)t->offset, g->alignment);
            return -EINVAL;
        }
        if (__builtin_add_overflow((uint64_t)g->data_offset, t->offset, &end) ||
            __builtin_add_overflow(end, (uint64_t)t->nbytes, &end)) {
            gc_fail(&c, "tensor '%s': data [%llu, +%zu) lies outside the file (%zu bytes)", t->name,
                    (unsigned long long)t->offset, t->nbytes, g->size);
            return -EINVAL;
        }
        if (end > g->size) {
            uint64_t need = gguf_data_end(g);
            gc_fail(&c,
                    "tensor '%s': data [%llu, +%zu) lies outside the file: the file looks "
                    "truncated (%zu bytes; its header needs %llu, %.1f%% present)",
                    t->name, (unsigned long long)t->offset, t->nbytes, g->size,
                    (unsigned long long)need, 100.0 * (double)g->size / (double)need);
            return -EINVAL;
        }
        t->data = g->base + g->data_offset + t->offset;
    }
    qsort_r(priv->sorted, g->n_tensors, sizeof(size_t), gguf_cmp_names, g);
    for (size_t i = 1; i < g->n_tensors; i++) {
        if (strcmp(g->tensors[priv->sorted[i]].name, g->tensors[priv->sorted[i - 1]].name) == 0) {
            gc_fail(&c, "duplicate tensor name '%s'", g->tensors[priv->sorted[i]].name);
            return -EINVAL;
        }
    }
    return 0;
}

static gguf_ctx *gguf_new(const void *data, size_t size)
{
    gguf_ctx *g = calloc(1, sizeof(*g));
    gguf_priv *priv = calloc(1, sizeof(*priv));
    if (!g || !priv) {
        free(g);
        free(priv);
        return NULL;
    }
    g->priv = priv;
    g->base = data;
    g->size = size;
    return g;
}

gguf_ctx *gguf_open_buffer(const void *data, size_t size, const char *label, char *err,
                           size_t errlen)
{
    if (err && errlen) {
        err[0] = '\0';
    }
    if (!label) {
        label = "<buffer>";
    }
    if (!data && size > 0) {
        tandem_set_err(err, errlen, "%s: no data", label);
        return NULL;
    }
    gguf_ctx *g = gguf_new(data ? data : "", size);
    if (!g) {
        tandem_set_err(err, errlen, "%s: out of memory", label);
        return NULL;
    }
    if (gguf_parse(g, label, err, errlen) != 0) {
        gguf_close(g);
        return NULL;
    }
    return g;
}

gguf_ctx *gguf_open(const char *path, char *err, size_t errlen)
{
    if (err && errlen) {
        err[0] = '\0';
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tandem_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        tandem_set_err(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            tandem_set_err(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
            close(fd);
            return NULL;
        }
    }
    close(fd);
    gguf_ctx *g = gguf_new(map ? map : "", size);
    if (!g) {
        if (map) {
            munmap(map, size);
        }
        tandem_set_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    gguf_priv *priv = g->priv;
    priv->map = map;
    priv->map_size = size;
    if (gguf_parse(g, path, err, errlen) != 0) {
        gguf_close(g);
        return NULL;
    }
    return g;
}

void gguf_close(gguf_ctx *g)
{
    if (!g) {
        return;
    }
    gguf_priv *priv = g->priv;
    for (size_t i = 0; i < g->n_kv; i++) {
        free((void *)g->kv[i].strs);
    }
    for (size_t i = 0; i < g->n_tensors; i++) {
        free(g->tensors[i].name);
    }
    free(g->kv);
    free(g->tensors);
    if (priv) {
        if (priv->map) {
            munmap(priv->map, priv->map_size);
        }
        free(priv->sorted);
        free(priv);
    }
    free(g);
}

const gguf_kv *gguf_find_kv(const gguf_ctx *g, const char *key)
{
    size_t len = strlen(key);
    for (size_t i = 0; i < g->n_kv; i++) {
        if (g->kv[i].key.len == len && memcmp(g->kv[i].key.s, key, len) == 0) {
            return &g->kv[i];
        }
    }
    return NULL;
}

const gguf_tensor_info *gguf_find_tensor(const gguf_ctx *g, const char *name)
{
    const gguf_priv *priv = g->priv;
    size_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const gguf_tensor_info *t = &g->tensors[priv->sorted[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) {
            return t;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

/* Looks up key; -ENOENT with a message when absent. */
static int gguf_lookup(const gguf_ctx *g, const char *key, const gguf_kv **out, char *err,
                       size_t errlen)
{
    *out = gguf_find_kv(g, key);
    if (!*out) {
        tandem_set_err(err, errlen, "%s: missing", key);
        return -ENOENT;
    }
    return 0;
}

/* Integer value of an integer-typed scalar at p; false for other types. */
static bool gguf_read_int(uint32_t type, const uint8_t *p, int64_t *s, uint64_t *u, bool *is_u)
{
    *is_u = false;
    switch (type) {
    case GGUF_TYPE_UINT8:
        *u = p[0];
        *is_u = true;
        return true;
    case GGUF_TYPE_INT8:
        *s = (int64_t)p[0] - (p[0] >= 128 ? 256 : 0);
        return true;
    case GGUF_TYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *u = v;
        *is_u = true;
        return true;
    }
    case GGUF_TYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        *s = v;
        return true;
    }
    case GGUF_TYPE_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        *u = v;
        *is_u = true;
        return true;
    }
    case GGUF_TYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        *s = v;
        return true;
    }
    case GGUF_TYPE_UINT64:
        memcpy(u, p, 8);
        *is_u = true;
        return true;
    case GGUF_TYPE_INT64:
        memcpy(s, p, 8);
        return true;
    default:
        return false;
    }
}

int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i)
{
    size_t es = gguf_scalar_size(kv->arr_type);
    int64_t s = 0;
    uint64_t u = 0;
    bool is_u;
    if (es == 0 || i >= kv->n || !gguf_read_int(kv->arr_type, kv->data + i * es, &s, &u, &is_u)) {
        return 0;
    }
    return is_u ? (int64_t)u : s;
}

/* Integer in [lo, hi] (compared as signed when lo < 0). */
static int gguf_get_int(const gguf_ctx *g, const char *key, int64_t lo, uint64_t hi, uint64_t *out,
                        const char *want, char *err, size_t errlen)
{
    const gguf_kv *kv;
    int rc = gguf_lookup(g, key, &kv, err, errlen);
    if (rc != 0) {
        return rc;
    }
    int64_t s = 0;
    uint64_t u = 0;
    bool is_u;
    if (!gguf_read_int(kv->type, kv->data, &s, &u, &is_u)) {
        tandem_set_err(err, errlen, "%s: expected %s, got %s", key, want, gguf_type_name(kv->type));
        return -EINVAL;
    }
    bool ok;
    if (is_u) {
        ok = u <= hi;
    } else {
        ok = s >= lo && (s < 0 || (uint64_t)s <= hi);
        u = (uint64_t)s;
    }
    if (!ok) {
        tandem_set_err(err, errlen, "%s: value out of range for %s", key, want);
        return -EINVAL;
    }
    *out = u;
    return 0;
}

int gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out, char *err, size_t errlen)
{
    uint64_t v;
    int rc = gguf_get_int(g, key, 0, UINT32_MAX, &v, "u32", err, errlen);
    if (rc == 0) {
        *out = (uint32_t)v;
    }
    return rc;
}

int gguf_get_u64(const gguf_ctx *g, const char *key, uint64_t *out, char *err, size_t errlen)
{
    return gguf_get_int(g, key, 0, UINT64_MAX, out, "u64", err, errlen);
}

int gguf_get_i32(const gguf_ctx *g, const char *key, int32_t *out, char *err, size_t errlen)
{
    uint64_t v;
    int rc = gguf_get_int(g, key, INT32_MIN, INT32_MAX, &v, "i32", err, errlen);
    if (rc == 0) {
        *out = (int32_t)(int64_t)v;
    }
    return rc;
}

int gguf_get_f32(const gguf_ctx *g, const char *key, float *out, char *err, size_t errlen)
{
    const gguf_kv *kv;
    int rc = gguf_lookup(g, key, &kv, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (kv->type == GGUF_TYPE_FLOAT32) {
        memcpy(out, kv->data, sizeof(*out));
        return 0;
    }
    if (kv->type == GGUF_TYPE_FLOAT64) {
        double d;
        memcpy(&d, kv->data, sizeof(d));
        *out = (float)d;
        return 0;
    }
    tandem_set_err(err, errlen, "%s: expected f32, got %s", key, gguf_type_name(kv->type));
    return -EINVAL;
}

int gguf_get_bool(const gguf_ctx *g, const char *key, bool *out, char *err, size_t errlen)
{
    const gguf_kv *kv;
    int rc = gguf_lookup(g, key, &kv, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (kv->type != GGUF_TYPE_BOOL) {
        tandem_set_err(err, errlen, "%s: expected bool, got %s", key, gguf_type_name(kv->type));
        return -EINVAL;
    }
    *out = kv->data[0] != 0;
    return 0;
}

int gguf_get_str(const gguf_ctx *g, const char *key, model_str *out, char *err, size_t errlen)
{
    const gguf_kv *kv;
    int rc = gguf_lookup(g, key, &kv, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (kv->type != GGUF_TYPE_STRING) {
        tandem_set_err(err, errlen, "%s: expected string, got %s", key, gguf_type_name(kv->type));
        return -EINVAL;
    }
    out->s = (const char *)kv->data;
    out->len = (uint32_t)kv->n;
    return 0;
}

int gguf_get_arr(const gguf_ctx *g, const char *key, gguf_type elem, const gguf_kv **out, char *err,
                 size_t errlen)
{
    const gguf_kv *kv;
    int rc = gguf_lookup(g, key, &kv, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (kv->type != GGUF_TYPE_ARRAY) {
        tandem_set_err(err, errlen, "%s: expected array, got %s", key, gguf_type_name(kv->type));
        return -EINVAL;
    }
    if (elem != GGUF_TYPE_COUNT && kv->arr_type != elem) {
        tandem_set_err(err, errlen, "%s: expected array of %s, got array of %s", key,
                       gguf_type_name(elem), gguf_type_name(kv->arr_type));
        return -EINVAL;
    }
    *out = kv;
    return 0;
}
