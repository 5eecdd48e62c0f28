/*
 * Request-scoped memory (nginx pools, h2o's mem pools): many small allocations, freed together by
 * arena_reset or arena_free. Allocations are 16-byte aligned and never freed one by one. Requests
 * larger than a quarter of the block size get a block of their own. An optional limit bounds the
 * total bytes an arena hands out, so one request cannot take the whole heap.
 *
 * Not thread-safe: an arena belongs to one request on one thread.
 */
#ifndef TANDEM_LIB_ARENA_H
#define TANDEM_LIB_ARENA_H

#include <stddef.h>

#include "lib/common.h"

struct arena;

/* A new arena whose blocks are block_size bytes (0 → 4096; at least 256). NULL on OOM. */
struct arena *arena_new(size_t block_size);

/* Frees the arena and everything allocated from it. NULL is allowed. */
void arena_free(struct arena *a);

/* size bytes, 16-byte aligned, uninitialised; size 0 gives a valid unique pointer. NULL on OOM or
 * past the limit. The memory lives until arena_reset/arena_free. */
void *arena_alloc(struct arena *a, size_t size);

/* Copies of s (NULL → NULL), and of at most n bytes of s, NUL-terminated. */
char *arena_strdup(struct arena *a, const char *s);
char *arena_strndup(struct arena *a, const char *s, size_t n);

/* printf into arena memory. NULL on OOM/limit. */
char *arena_sprintf(struct arena *a, const char *fmt, ...) TANDEM_PRINTF(2, 3);

/* Forgets every allocation (pointers from before become invalid); keeps the first block. */
void arena_reset(struct arena *a);

/* Bytes handed out since creation or the last reset (including alignment padding). */
size_t arena_used(const struct arena *a);

/* Caps arena_used at max_bytes (0 = no limit, the default). */
void arena_set_limit(struct arena *a, size_t max_bytes);

#endif /* TANDEM_LIB_ARENA_H */
