/*
 * Request-scoped arena (see arena.h): a list of blocks carved front to back. Large requests get
 * a dedicated block so they do not waste the tail of the current one. arena_reset keeps the first
 * block, which is enough for most requests, and frees the rest.
 */
#include "lib/arena.h"

#include <stdalign.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN         16
#define ARENA_DEFAULT_BLOCK 4096
#define ARENA_MIN_BLOCK     256

struct arena_block {
    struct arena_block *next;
    size_t size; /* usable bytes in data */
    size_t used; /* bytes carved from data */
    alignas(ARENA_ALIGN) unsigned char data[];
};

struct arena {
    struct arena_block *head;  /* current block first, then older and dedicated blocks */
    struct arena_block *first; /* the block made by arena_new, kept by arena_reset */
    size_t block_size;         /* usable bytes of a regular block */
    size_t used;               /* bytes handed out since the last reset */
    size_t limit;              /* cap on used; 0 = none */
};

static struct arena_block *arena_block_new(size_t size)
{
    if (size > SIZE_MAX - sizeof(struct arena_block)) {
        return NULL;
    }
    struct arena_block *b = malloc(sizeof(*b) + size);
    if (!b) {
        return NULL;
    }
    b->next = NULL;
    b->size = size;
    b->used = 0;
    return b;
}

struct arena *arena_new(size_t block_size)
{
    if (block_size == 0) {
        block_size = ARENA_DEFAULT_BLOCK;
    }
    if (block_size < ARENA_MIN_BLOCK) {
        block_size = ARENA_MIN_BLOCK;
    }
    block_size = (block_size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    struct arena *a = calloc(1, sizeof(*a));
    if (!a) {
        return NULL;
    }
    a->block_size = block_size;
    a->head = arena_block_new(block_size);
    if (!a->head) {
        free(a);
        return NULL;
    }
    a->first = a->head;
    return a;
}

/* Frees every block of the list except keep (which may be NULL). */
static void arena_free_blocks(struct arena_block *b, const struct arena_block *keep)
{
    while (b) {
        struct arena_block *next = b->next;
        if (b != keep) {
            free(b);
        }
        b = next;
    }
}

void arena_free(struct arena *a)
{
    if (!a) {
        return;
    }
    arena_free_blocks(a->head, NULL);
    free(a);
}

void *arena_alloc(struct arena *a, size_t size)
{
    TANDEM_ASSERT(a != NULL);
    if (size > SIZE_MAX - 2 * ARENA_ALIGN) {
        return NULL;
    }
    size_t need = size ? (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1) : ARENA_ALIGN;
    if (a->limit && (need > a->limit || a->used > a->limit - need)) {
        return NULL;
    }
    struct arena_block *b = a->head;
    if (b->size - b->used < need) {
        if (need > a->block_size / 4) {
            /* Dedicated block, linked behind the current one so the current keeps serving. */
            struct arena_block *big = arena_block_new(need);
            if (!big) {
                return NULL;
            }
            big->used = need;
            big->next = b->next;
            b->next = big;
            a->used += need;
            return big->data;
        }
        b = arena_block_new(a->block_size);
        if (!b) {
            return NULL;
        }
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += need;
    a->used += need;
    return p;
}

char *arena_strndup(struct arena *a, const char *s, size_t n)
{
    if (!s) {
        return NULL;
    }
    size_t len = strnlen(s, n);
    char *p = arena_alloc(a, len + 1);
    if (!p) {
        return NULL;
    }
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *arena_strdup(struct arena *a, const char *s)
{
    return s ? arena_strndup(a, s, strlen(s)) : NULL;
}

char *arena_sprintf(struct arena *a, const char *fmt, ...)
{
    TANDEM_ASSERT(a != NULL && fmt != NULL);
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    char *p = NULL;
    if (n >= 0) {
        p = arena_alloc(a, (size_t)n + 1);
        if (p) {
            vsnprintf(p, (size_t)n + 1, fmt, ap);
        }
    }
    va_end(ap);
    return p;
}

void arena_reset(struct arena *a)
{
    TANDEM_ASSERT(a != NULL);
    arena_free_blocks(a->head, a->first);
    a->first->next = NULL;
    a->first->used = 0;
    a->head = a->first;
    a->used = 0;
}

size_t arena_used(const struct arena *a)
{
    TANDEM_ASSERT(a != NULL);
    return a->used;
}

void arena_set_limit(struct arena *a, size_t max_bytes)
{
    TANDEM_ASSERT(a != NULL);
    a->limit = max_bytes;
}
