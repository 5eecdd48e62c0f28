/*
 * Bounded growable byte buffer (see buf.h). Growth doubles the allocation, clamped to max + 1 so
 * that a buffer never allocates more than its cap allows.
 */
#include "lib/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_MIN_ALLOC 64

void buf_init(struct buf *b, size_t max)
{
    TANDEM_ASSERT(b != NULL);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
    b->error = 0;
}

/* Records the first failure; every later append returns it (see buf.h). */
static int buf_fail(struct buf *b, int rc)
{
    b->error = rc;
    return rc;
}

/* Makes room for extra more bytes plus the NUL. The caller has checked extra against max. */
static int buf_reserve(struct buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : BUF_MIN_ALLOC;
    while (cap < need) {
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    }
    if (b->max < SIZE_MAX && cap > b->max + 1) {
        cap = b->max + 1;
    }
    char *data = realloc(b->data, cap);
    if (!data) {
        return -ENOMEM;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
    TANDEM_ASSERT(b != NULL);
    if (b->error) {
        return b->error;
    }
    if (len == 0) {
        return 0;
    }
    TANDEM_ASSERT(data != NULL);
    if (len > b->max - b->len) {
        return buf_fail(b, -ENOSPC);
    }
    int rc = buf_reserve(b, len);
    if (rc < 0) {
        return buf_fail(b, rc);
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int buf_appends(struct buf *b, const char *s)
{
    TANDEM_ASSERT(s != NULL);
    return buf_append(b, s, strlen(s));
}

int buf_appendf(struct buf *b, const char *fmt, ...)
{
    TANDEM_ASSERT(b != NULL && fmt != NULL);
    if (b->error) {
        return b->error;
    }
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->data ? b->cap - b->len : 0;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, ap2);
    va_end(ap2);
    int rc = 0;
    if (n < 0) {
        rc = -EINVAL;
        goto out;
    }
    if ((size_t)n > b->max - b->len) {
        rc = -ENOSPC;
        goto out_restore;
    }
    if ((size_t)n >= room) {
        rc = buf_reserve(b, (size_t)n);
        if (rc < 0) {
            goto out_restore;
        }
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    }
    b->len += (size_t)n;
    goto out;
out_restore:
    /* vsnprintf may have written a truncated tail past len: put the terminator back. */
    if (b->data) {
        b->data[b->len] = '\0';
    }
out:
    if (rc < 0) {
        buf_fail(b, rc);
    }
    va_end(ap);
    return rc;
}

void buf_reset(struct buf *b)
{
    TANDEM_ASSERT(b != NULL);
    b->len = 0;
    b->error = 0;
    if (b->data) {
        b->data[0] = '\0';
    }
}

void buf_free(struct buf *b)
{
    TANDEM_ASSERT(b != NULL);
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->error = 0;
}

char *buf_detach(struct buf *b, size_t *len)
{
    TANDEM_ASSERT(b != NULL);
    char *data = b->data;
    size_t n = b->len;
    if (!data) {
        data = strdup("");
        if (!data) {
            return NULL;
        }
        n = 0;
    }
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->error = 0;
    if (len) {
        *len = n;
    }
    return data;
}

const char *buf_cstr(const struct buf *b)
{
    TANDEM_ASSERT(b != NULL);
    return b->data ? b->data : "";
}
