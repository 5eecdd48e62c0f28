/*
 * Bounded growable byte buffer (like curl's dynbuf, git's strbuf). Every buffer has a hard cap so
 * that input from the network can never grow memory without bound.
 *
 * Ownership: the struct is the caller's (usually on the stack or embedded); data is owned by the
 * buffer until buf_free or buf_detach. data is NULL until the first append and, when non-NULL, is
 * always NUL-terminated (the NUL is not counted in len and not in max). Not thread-safe: one owner
 * at a time.
 *
 * Failure is sticky, after git's strbuf: the first append that fails (-ENOSPC past max, -ENOMEM)
 * leaves the contents as they were and is remembered; every later append is refused with the same
 * code until buf_reset or buf_free. So a builder may append without checking each call and ask
 * buf_error once before it uses the result: a failure can never leave a hole in the middle of a
 * document, only a document that is known to be incomplete.
 */
#ifndef TANDEM_LIB_BUF_H
#define TANDEM_LIB_BUF_H

#include <stddef.h>

#include "lib/common.h"

struct buf {
    char *data; /* NULL or NUL-terminated contents */
    size_t len; /* bytes used, excluding the NUL */
    size_t cap; /* bytes allocated, including room for the NUL */
    size_t max; /* hard cap on len */
    int error;  /* first failed append's code, 0 when none; cleared by buf_reset/buf_free */
};

/* Initialises an empty buffer that may hold up to max bytes. Allocates nothing. */
void buf_init(struct buf *b, size_t max);

/* Appends len bytes (which may contain NULs). -ENOSPC when len would pass max, -ENOMEM, or the
 * sticky code of an earlier failure (nothing appended). */
int buf_append(struct buf *b, const void *data, size_t len);

/* Appends a C string. */
int buf_appends(struct buf *b, const char *s);

/* Appends printf-formatted text. -ENOSPC (nothing appended) when it would pass max. */
int buf_appendf(struct buf *b, const char *fmt, ...) TANDEM_PRINTF(2, 3);

/* The sticky failure: 0 when every append since the last reset succeeded, else the first failure's
 * code. Check it once before using what a sequence of appends built. */
static inline int buf_error(const struct buf *b)
{
    return b->error;
}

/* Marks the buffer failed with rc (negative) unless it failed already: for a builder whose own
 * checks fail half-way (a value JSON cannot represent), so that its partial output is refused
 * like an append failure. */
static inline void buf_set_error(struct buf *b, int rc)
{
    if (b->error == 0) {
        b->error = rc;
    }
}

/* len = 0 and the sticky failure cleared; keeps the memory for reuse. */
void buf_reset(struct buf *b);

/* Frees the memory; the buffer is empty, without failure, and reusable with the same max. */
void buf_free(struct buf *b);

/* Hands the contents to the caller (free() it); *len (may be NULL) receives the length. Returns a
 * NUL-terminated string, "" allocated when the buffer was empty, or NULL on OOM. The buffer is
 * left empty (same max, failure cleared); check buf_error first when the contents must be whole. */
char *buf_detach(struct buf *b, size_t *len);

/* The contents as a C string; "" when empty. Valid until the next change to the buffer. */
const char *buf_cstr(const struct buf *b);

#endif /* TANDEM_LIB_BUF_H */
