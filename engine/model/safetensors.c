/*
 * Safetensors reader (see safetensors.h). The JSON header is parsed by lib/json.h; all offsets
 * are checked with overflow-safe arithmetic before any pointer into the file is formed.
 */
#include "engine/model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/err.h"
#include "lib/json.h"

typedef struct st_priv {
    void *map;
    size_t map_size;
} st_priv;

static int st_dtype(const char *s, tdtype *out)
{
    if (strcmp(s, "F32") == 0) {
        *out = TD_F32;
    } else if (strcmp(s, "F16") == 0) {
        *out = TD_F16;
    } else if (strcmp(s, "BF16") == 0) {
        *out = TD_BF16;
    } else {
        return -EINVAL;
    }
    return 0;
}

/* Fills t from the JSON object o describing tensor `name`. */
static int st_parse_tensor(safetensors_file *f, const char *label, const char *name,
                           struct json_object *o, safetensors_tensor *t, char *err, size_t errlen)
{
    char jerr[256];
    const char *dtype;
    struct json_object *shape, *offs;
    if (!json_object_is_type(o, json_type_object)) {
        tandem_set_err(err, errlen, "%s: tensor '%s': expected object, got %s", label, name,
                       json_type_label(o));
        return -EINVAL;
    }
    if (json_get_string(o, "dtype", &dtype, jerr, sizeof(jerr)) != 0 ||
        json_get_array(o, "shape", &shape, jerr, sizeof(jerr)) != 0 ||
        json_get_array(o, "data_offsets", &offs, jerr, sizeof(jerr)) != 0) {
        tandem_set_err(err, errlen, "%s: tensor '%s': %s", label, name, jerr);
        return -EINVAL;
    }
    if (st_dtype(dtype, &t->type) != 0) {
        tandem_set_err(
            err, errlen,
            "%s: tensor '%s' has dtype %.32s, which is not supported (supported: F32, F16, "
            "BF16)",
            label, name, dtype);
        return -EINVAL;
    }
    size_t nd = json_object_array_length(shape);
    if (nd > SAFETENSORS_MAX_DIMS) {
        tandem_set_err(err, errlen, "%s: tensor '%s': shape has %zu dimensions (at most %d)", label,
                       name, nd, SAFETENSORS_MAX_DIMS);
        return -EINVAL;
    }
    t->n_dims = (int)nd;
    t->n_elems = 1;
    for (int i = 0; i < SAFETENSORS_MAX_DIMS; i++) {
        t->shape[i] = 1;
    }
    for (size_t i = 0; i < nd; i++) {
        char path[16];
        int64_t d;
        snprintf(path, sizeof(path), "[%zu]", i);
        if (json_get_int64(shape, path, &d, jerr, sizeof(jerr)) != 0 || d < 0 ||
            __builtin_mul_overflow(t->n_elems, d, &t->n_elems)) {
            tandem_set_err(err, errlen, "%s: tensor '%s': shape[%zu] is not a valid dimension",
                           label, name, i);
            return -EINVAL;
        }
        t->shape[i] = d;
    }
    int64_t begin, end;
    if (json_object_array_length(offs) != 2 ||
        json_get_int64(offs, "[0]", &begin, jerr, sizeof(jerr)) != 0 ||
        json_get_int64(offs, "[1]", &end, jerr, sizeof(jerr)) != 0) {
        tandem_set_err(err, errlen, "%s: tensor '%s': data_offsets must be [begin, end] integers",
                       label, name);
        return -EINVAL;
    }
    size_t data_size = f->size - f->data_offset;
    if (begin < 0 || end < begin || (uint64_t)end > data_size) {
        tandem_set_err(
            err, errlen,
            "%s: tensor '%s': data_offsets [%lld, %lld] lie outside the data section (%zu "
            "bytes)",
            label, name, (long long)begin, (long long)end, data_size);
        return -EINVAL;
    }
    size_t want;
    if (__builtin_mul_overflow((size_t)t->n_elems, td_block_bytes(t->type), &want) ||
        want != (size_t)(end - begin)) {
        tandem_set_err(
            err, errlen,
            "%s: tensor '%s': data_offsets span %lld bytes but shape x %s needs %lld elements "
            "x %zu bytes",
            label, name, (long long)(end - begin), dtype, (long long)t->n_elems,
            td_block_bytes(t->type));
        return -EINVAL;
    }
    t->nbytes = want;
    t->data = f->base + f->data_offset + begin;
    t->name = strdup(name);
    if (!t->name) {
        tandem_set_err(err, errlen, "%s: out of memory", label);
        return -ENOMEM;
    }
    return 0;
}

static int st_cmp_name(const void *a, const void *b)
{
    return strcmp(((const safetensors_tensor *)a)->name, ((const safetensors_tensor *)b)->name);
}

/* qsort_r comparator of indexes into the tensor array arg, by data address. */
static int st_cmp_data(const void *a, const void *b, void *arg)
{
    const safetensors_tensor *t = arg;
    uintptr_t px = (uintptr_t)t[*(const size_t *)a].data;
    uintptr_t py = (uintptr_t)t[*(const size_t *)b].data;
    return (px > py) - (px < py);
}

/* No two non-empty byte ranges overlap. */
static int st_check_overlap(safetensors_file *f, const char *label, char *err, size_t errlen)
{
    if (f->n_tensors < 2) {
        return 0;
    }
    size_t *order = calloc(f->n_tensors, sizeof(*order));
    if (!order) {
        tandem_set_err(err, errlen, "%s: out of memory", label);
        return -ENOMEM;
    }
    for (size_t i = 0; i < f->n_tensors; i++) {
        order[i] = i;
    }
    qsort_r(order, f->n_tensors, sizeof(*order), st_cmp_data, f->tensors);
    int rc = 0;
    const safetensors_tensor *prev = NULL;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const safetensors_tensor *t = &f->tensors[order[i]];
        if (t->nbytes == 0) {
            continue;
        }
        if (prev && (const uint8_t *)prev->data + prev->nbytes > (const uint8_t *)t->data) {
            tandem_set_err(err, errlen, "%s: tensors '%s' and '%s' overlap", label, prev->name,
                           t->name);
            rc = -EINVAL;
            break;
        }
        prev = t;
    }
    free(order);
    return rc;
}

static int st_parse(safetensors_file *f, const char *label, char *err, size_t errlen)
{
    uint64_t hlen;
    if (f->size < 8) {
        tandem_set_err(err, errlen, "%s: file truncated (%zu bytes, the header length needs 8)",
                       label, f->size);
        return -EINVAL;
    }
    memcpy(&hlen, f->base, 8);
    if (hlen > SAFETENSORS_MAX_HEADER || hlen > f->size - 8) {
        tandem_set_err(err, errlen,
                       "%s: header length %llu exceeds the file size or the %u-byte limit", label,
                       (unsigned long long)hlen, SAFETENSORS_MAX_HEADER);
        return -EINVAL;
    }
    f->data_offset = 8 + (size_t)hlen;
    char jerr[256];
    struct json_object *root =
        json_parse((const char *)f->base + 8, (size_t)hlen, jerr, sizeof(jerr));
    if (!root) {
        tandem_set_err(err, errlen, "%s: header: %s", label,
                       jerr[0] ? jerr : "null is not an object");
        return -EINVAL;
    }
    int rc = 0;
    if (!json_object_is_type(root, json_type_object)) {
        tandem_set_err(err, errlen, "%s: header: expected object, got %s", label,
                       json_type_label(root));
        rc = -EINVAL;
        goto out_put;
    }
    size_t n = (size_t)json_object_object_length(root);
    f->tensors = calloc(n ? n : 1, sizeof(*f->tensors));
    if (!f->tensors) {
        tandem_set_err(err, errlen, "%s: out of memory", label);
        rc = -ENOMEM;
        goto out_put;
    }
    json_object_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            continue;
        }
        if (key[0] == '\0') {
            tandem_set_err(err, errlen, "%s: empty tensor name", label);
            rc = -EINVAL;
            goto out_put;
        }
        rc = st_parse_tensor(f, label, key, val, &f->tensors[f->n_tensors], err, errlen);
        if (rc != 0) {
            goto out_put;
        }
        f->n_tensors++;
    }
    qsort(f->tensors, f->n_tensors, sizeof(*f->tensors), st_cmp_name);
    rc = st_check_overlap(f, label, err, errlen);
out_put:
    json_object_put(root);
    return rc;
}

safetensors_file *safetensors_open_buffer(const void *data, size_t size, const char *label,
                                          char *err, size_t errlen)
{
    if (err && errlen) {
        err[0] = '\0';
    }
    if (!label) {
        label = "<buffer>";
    }
    safetensors_file *f = calloc(1, sizeof(*f));
    st_priv *priv = calloc(1, sizeof(*priv));
    if (!f || !priv) {
        free(f);
        free(priv);
        tandem_set_err(err, errlen, "%s: out of memory", label);
        return NULL;
    }
    f->priv = priv;
    f->base = data ? data : (const void *)"";
    f->size = data ? size : 0;
    if (st_parse(f, label, err, errlen) != 0) {
        safetensors_close(f);
        return NULL;
    }
    return f;
}

safetensors_file *safetensors_open(const char *path, char *err, size_t errlen)
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
    safetensors_file *f = calloc(1, sizeof(*f));
    st_priv *priv = calloc(1, sizeof(*priv));
    if (!f || !priv) {
        free(f);
        free(priv);
        if (map) {
            munmap(map, size);
        }
        tandem_set_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    priv->map = map;
    priv->map_size = size;
    f->priv = priv;
    f->base = map ? map : (const void *)"";
    f->size = size;
    if (st_parse(f, path, err, errlen) != 0) {
        safetensors_close(f);
        return NULL;
    }
    return f;
}

void safetensors_close(safetensors_file *f)
{
    if (!f) {
        return;
    }
    st_priv *priv = f->priv;
    for (size_t i = 0; i < f->n_tensors; i++) {
        free(f->tensors[i].name);
    }
    free(f->tensors);
    if (priv) {
        if (priv->map) {
            munmap(priv->map, priv->map_size);
        }
        free(priv);
    }
    free(f);
}

const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name)
{
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0) {
            return &f->tensors[mid];
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}
