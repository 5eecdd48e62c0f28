/*
 * Small macros shared by every Tandem C file: an always-on assert for programming errors
 * (bad input never asserts; it gets an error value), array sizes, and compiler attributes.
 */
#ifndef TANDEM_LIB_COMMON_H
#define TANDEM_LIB_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Always on (also in release builds): logs "file:line: assertion failed: cond" to stderr and
 * aborts. For invariants of our own code only, never for checking input. */
#define TANDEM_ASSERT(cond)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);           \
            fflush(stderr);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Number of elements of a true array (not a pointer). */
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* printf-style format checking: fmt_idx is the 1-based index of the format argument, args_idx
 * the index of the first variadic argument. */
#define TANDEM_PRINTF(fmt_idx, args_idx) __attribute__((format(printf, fmt_idx, args_idx)))

#define TANDEM_UNUSED __attribute__((unused))

/* The one growth rule for arrays: returns items (elem bytes each, *cap allocated) grown to hold at
 * least need, doubling from min_cap, with *cap updated; or NULL on overflow or OOM, when items and
 * *cap are unchanged and still the caller's. Typical use:
 *     struct x *n = tandem_grow(v->items, &v->cap, v->len + 1, sizeof(*n), 16);
 *     if (!n) return -ENOMEM;
 *     v->items = n; */
static inline void *tandem_grow(void *items, size_t *cap, size_t need, size_t elem, size_t min_cap)
{
    if (need <= *cap) {
        return items;
    }
    size_t ncap = *cap ? *cap : (min_cap ? min_cap : 1);
    while (ncap < need) {
        if (ncap > ((size_t)-1) / 2) {
            ncap = need;
            break;
        }
        ncap *= 2;
    }
    if (elem != 0 && ncap > ((size_t)-1) / elem) {
        return NULL;
    }
    void *n = realloc(items, ncap * elem);
    if (!n) {
        return NULL;
    }
    *cap = ncap;
    return n;
}

/* Length (1-4) of the well-formed UTF-8 sequence at p (n bytes available), or 0 when the bytes
 * there are not valid UTF-8 (overlong forms, surrogates and code points past U+10FFFF included).
 * A NUL byte is a valid one-byte sequence. */
static inline size_t tandem_utf8_seq_len(const unsigned char *p, size_t n)
{
    if (n == 0) {
        return 0;
    }
    unsigned char c = p[0];
    if (c < 0x80) {
        return 1;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) {
            lo = 0xA0;
        } else if (c == 0xED) {
            hi = 0x9F;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) {
            lo = 0x90;
        } else if (c == 0xF4) {
            hi = 0x8F;
        }
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi) {
        return 0;
    }
    for (size_t i = 2; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            return 0;
        }
    }
    return len;
}

/* The code point of the well-formed UTF-8 sequence of len bytes at p (len as
 * tandem_utf8_seq_len returned it). */
static inline uint32_t tandem_utf8_cp(const unsigned char *p, size_t len)
{
    if (len == 1) {
        return p[0];
    }
    uint32_t cp = p[0] & (0xffu >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        cp = (cp << 6) | (p[i] & 0x3fu);
    }
    return cp;
}

/* The value of hex digit c (either case), or -1. */
static inline int tandem_hex_digit(int c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* Writes code point cp (at most U+10FFFF; the caller has checked it) as UTF-8 into out, which has
 * room for 4 bytes; returns the number of bytes written (1-4). */
static inline size_t tandem_utf8_put(char *out, unsigned long cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

#endif /* TANDEM_LIB_COMMON_H */
