/*
 * Shared plumbing of the test-file generators (genfile.h).
 */
#include "engine/tools/genfile.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/err.h"

uint64_t genf_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

int genf_write_bytes(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        tandem_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -EIO;
    }
    bool bad = fwrite(data, 1, len, f) != len;
    bad |= fclose(f) != 0;
    if (bad) {
        tandem_set_err(err, errlen, "%s: write failed", path);
        return -EIO;
    }
    return 0;
}

int genf_write_safetensors(const char *path, const struct buf *header,
                           int (*write_tensor)(void *ud, size_t i, FILE *f), void *ud, size_t n,
                           char *err, size_t errlen)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        tandem_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -EIO;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) {
        len8[i] = (uint8_t)((uint64_t)header->len >> (8 * i));
    }
    int rc = fwrite(len8, 1, 8, f) != 8 || fwrite(header->data, 1, header->len, f) != header->len
                 ? -EIO
                 : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = write_tensor(ud, i, f);
    }
    if (fclose(f) != 0 && rc == 0) {
        rc = -EIO;
    }
    if (rc == -EIO) {
        tandem_set_err(err, errlen, "%s: write failed", path);
    } else if (rc == -ENOMEM) {
        tandem_set_err(err, errlen, "%s: out of memory", path);
    }
    return rc;
}

int genf_parse_i64(const char *prog, const char *flag, const char *s, int64_t lo, int64_t hi,
                   int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "%s: %s: expected an integer in %lld..%lld, got '%s'\n", prog, flag,
                (long long)lo, (long long)hi, s);
        return -EINVAL;
    }
    *out = v;
    return 0;
}

int genf_parse_positive(const char *prog, const char *flag, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v > 0.0) || !isfinite(v) || v > 1e30) {
        fprintf(stderr, "%s: %s: expected a positive number, got '%s'\n", prog, flag, s);
        return -EINVAL;
    }
    *out = v;
    return 0;
}

int genf_pick(const char *prog, const char *flag, const char *s, const char *const *names, int n,
              int *out)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    fprintf(stderr, "%s: %s: unknown value '%s'\n", prog, flag, s);
    return -EINVAL;
}
