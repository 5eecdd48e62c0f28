/*
 * vLLM's tool-call parsers (see tool_parser.h), in four parts:
 *
 *  - pj: an incremental JSON reader that accepts what Python's json module accepts and reports
 *    events (object/array begin and end, keys, string fragments, numbers and literals already in
 *    json.dumps form). It is fed one byte at a time, so a stream can stop anywhere.
 *  - pv: a tree built from pj's events, with Python's dict rules for repeated keys, written back
 *    as json.dumps writes it. tool_parse_complete uses it to follow vLLM's extract_tool_calls
 *    step by step (find the markers, json.loads / raw_decode, pick "name" and "arguments").
 *  - the stream: one state machine per parser over the same pj events, which writes the
 *    arguments in json.dumps form as they arrive instead of building a tree. It is a second,
 *    independent reading of the same rules; the fuzz target checks that both agree.
 *  - ids, deltas and the JSON writers.
 */
#include "engine/server/tool_parser.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "engine/server/openai.h"
#include "lib/common.h"

#define HERMES_START   "<tool_call>"
#define HERMES_END     "</tool_call>"
#define LLAMA_TAG      "<|python_tag|>"
#define MISTRAL_BOT    "[TOOL_CALLS]"
#define MISTRAL_ARGS   "[ARGS]"
#define LIT_LEN(s)     (sizeof(s) - 1)
#define PY_INT_DIGITS  4300 /* Python's int_max_str_digits: json.loads refuses longer integers */
#define MARKER_MAX     16
#define JSON_WS(c)     ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r')
#define REPLACEMENT    "\xef\xbf\xbd" /* U+FFFD */
#define NOT_TOOL_CALLS 1              /* internal: vLLM would return the text as content */

/* -EINVAL: not JSON as Python reads it; -EBADMSG: JSON, but not tool calls. Both send the text
 * back as content; other negative codes are real failures. */
static int is_reject(int rc)
{
    return rc == -EINVAL || rc == -EBADMSG;
}

static void set_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen) {
        snprintf(err, errlen, "%s", msg);
    }
}

/* ---- text helpers ---- */

/* Python's str.isspace() for one code point (what str.strip() removes). */
static int py_isspace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* Bytes of leading Python whitespace in s. */
static size_t py_space_prefix(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = tandem_utf8_seq_len(p + i, n - i);
        if (l == 0 || !py_isspace(tandem_utf8_cp(p + i, l))) {
            break;
        }
        i += l;
    }
    return i;
}

/* content.strip() == "" in Python (invalid UTF-8 would have been U+FFFD there: not space). */
static int py_blank(const char *s, size_t n)
{
    return py_space_prefix(s, n) == n;
}

/* Length of the UTF-8 sequence a lead byte starts, 0 when it cannot start one. */
static int utf8_lead_len(unsigned char c)
{
    if (c >= 0xc2 && c <= 0xdf) {
        return 2;
    }
    if (c >= 0xe0 && c <= 0xef) {
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        return 4;
    }
    return 0;
}

/* Whether c may follow the have (>= 1) bytes of seq in a well-formed sequence. */
static int utf8_next_ok(const unsigned char *seq, int have, unsigned char c)
{
    unsigned char lo = 0x80, hi = 0xbf;
    if (have == 1) {
        if (seq[0] == 0xe0) {
            lo = 0xa0;
        } else if (seq[0] == 0xed) {
            hi = 0x9f;
        } else if (seq[0] == 0xf0) {
            lo = 0x90;
        } else if (seq[0] == 0xf4) {
            hi = 0x8f;
        }
    }
    return c >= lo && c <= hi;
}

static const char *last_occurrence(const char *s, size_t n, const char *needle, size_t m)
{
    if (m > n) {
        return NULL;
    }
    for (size_t i = n - m + 1; i-- > 0;) {
        if (memcmp(s + i, needle, m) == 0) {
            return s + i;
        }
    }
    return NULL;
}

static char *dup_bytes(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        if (n) {
            memcpy(d, s, n);
        }
        d[n] = '\0';
    }
    return d;
}

/*
 * A marker being looked for in a stream: pend bytes of it are matched and held back. Each byte
 * fed releases the bytes that can no longer be part of the marker (in order) or completes it.
 */
struct marker {
    const char *text;
    size_t len;
    size_t pend;
};

static void marker_init(struct marker *m, const char *text)
{
    m->text = text;
    m->len = strlen(text);
    m->pend = 0;
}

/* 1 when c completes the marker; rel[0..*nrel) are the bytes released (at most the marker's
 * length). */
static int marker_byte(struct marker *m, unsigned char c, char *rel, size_t *nrel)
{
    char cand[MARKER_MAX + 1];
    size_t n = m->pend;
    memcpy(cand, m->text, n);
    cand[n++] = (char)c;
    size_t start = 0;
    while (start < n && memcmp(cand + start, m->text, n - start) != 0) {
        start++;
    }
    memcpy(rel, cand, start);
    *nrel = start;
    m->pend = n - start;
    if (m->pend == m->len) {
        m->pend = 0;
        return 1;
    }
    return 0;
}

/* ---- Python's json.dumps, the writing half ---- */

/* A string's body as json.dumps(..., ensure_ascii=False) writes it. s is valid UTF-8 except for
 * lone surrogates in the 3-byte form ("\xed\xa0\x80" for U+D800), written back as escapes. */
static void py_escape(struct buf *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0, i = 0;
    while (i < n) {
        unsigned char c = p[i];
        char esc[8];
        size_t adv = 1;
        const char *e = NULL;
        if (c == '"') {
            e = "\\\"";
        } else if (c == '\\') {
            e = "\\\\";
        } else if (c == '\n') {
            e = "\\n";
        } else if (c == '\r') {
            e = "\\r";
        } else if (c == '\t') {
            e = "\\t";
        } else if (c == '\b') {
            e = "\\b";
        } else if (c == '\f') {
            e = "\\f";
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            e = esc;
        } else if (c == 0xed && i + 2 < n && p[i + 1] >= 0xa0) {
            uint32_t cp = tandem_utf8_cp(p + i, 3);
            esc[0] = '\\';
            esc[1] = 'u';
            for (int k = 0; k < 4; k++) {
                esc[2 + k] = hex[(cp >> (12 - 4 * k)) & 15];
            }
            esc[6] = '\0';
            e = esc;
            adv = 3;
        }
        if (e) {
            buf_append(out, p + run, i - run);
            buf_appends(out, e);
            run = i + adv;
        }
        i += adv;
    }
    buf_append(out, p + run, n - run);
}

/* The shortest digits that read back as x (> 0, finite), as repr() finds them: digits (no dot,
 * no trailing zeros) and the decimal exponent decpt (x = 0.d1d2... * 10^decpt). */
static void shortest_digits(double x, char *digits, int *ndig, int *decpt)
{
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, x);
        char d[24] = {0};
        int nd = 0;
        for (const char *q = tmp; *q && *q != 'e'; q++) {
            if (*q >= '0' && *q <= '9') {
                d[nd++] = *q;
            }
        }
        int exp10 = (int)strtol(strchr(tmp, 'e') + 1, NULL, 10);
        double back = strtod(tmp, NULL);
        if (back != x && prec < 17) {
            /* the nearest prec-digit decimal misses; its other neighbour may not (x next to a
             * power of two, where the interval that reads back as x is lopsided) */
            int up = back < x;
            int k = nd - 1;
            while (k >= 0 && d[k] == (up ? '9' : '0')) {
                d[k] = up ? '0' : '9';
                k--;
            }
            if (k < 0 || (!up && k == 0 && d[0] == '1')) {
                continue; /* a carry or borrow out of the first digit: shorter ones were tried */
            }
            d[k] = (char)(d[k] + (up ? 1 : -1));
            char alt[48];
            int w = snprintf(alt, sizeof(alt), "%c.", d[0]);
            for (int j = 1; j < nd; j++) {
                alt[w++] = d[j];
            }
            snprintf(alt + w, sizeof(alt) - (size_t)w, "e%d", exp10);
            if (strtod(alt, NULL) != x) {
                continue;
            }
        } else if (back != x) {
            continue; /* cannot happen: 17 digits always read back */
        }
        while (nd > 1 && d[nd - 1] == '0') {
            nd--;
        }
        memcpy(digits, d, (size_t)nd);
        *ndig = nd;
        *decpt = exp10 + 1;
        return;
    }
    digits[0] = '0';
    *ndig = 1;
    *decpt = 1;
}

/* repr(x) for a Python float, as json.dumps writes it ("1e+16", "0.0001", "1e-05", "3.0",
 * "NaN", "Infinity", "-Infinity", "-0.0"). out holds at least 32 bytes. */
static void py_float_repr(double x, char *out, size_t size)
{
    if (isnan(x)) {
        snprintf(out, size, "NaN");
        return;
    }
    if (isinf(x)) {
        snprintf(out, size, x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (x == 0) {
        snprintf(out, size, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char d[24] = {0};
    int nd, decpt;
    shortest_digits(fabs(x), d, &nd, &decpt);
    size_t w = 0;
    char tmp[64];
    if (x < 0) {
        tmp[w++] = '-';
    }
    if (decpt <= -4 || decpt > 16) {
        tmp[w++] = d[0];
        if (nd > 1) {
            tmp[w++] = '.';
            memcpy(tmp + w, d + 1, (size_t)nd - 1);
            w += (size_t)nd - 1;
        }
        int e = decpt - 1;
        snprintf(tmp + w, sizeof(tmp) - w, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (decpt <= 0) {
        tmp[w++] = '0';
        tmp[w++] = '.';
        for (int k = 0; k < -decpt; k++) {
            tmp[w++] = '0';
        }
        memcpy(tmp + w, d, (size_t)nd);
        tmp[w + (size_t)nd] = '\0';
    } else if (decpt < nd) {
        memcpy(tmp + w, d, (size_t)decpt);
        w += (size_t)decpt;
        tmp[w++] = '.';
        memcpy(tmp + w, d + decpt, (size_t)(nd - decpt));
        tmp[w + (size_t)(nd - decpt)] = '\0';
    } else {
        memcpy(tmp + w, d, (size_t)nd);
        w += (size_t)nd;
        for (int k = nd; k < decpt; k++) {
            tmp[w++] = '0';
        }
        snprintf(tmp + w, sizeof(tmp) - w, ".0");
    }
    snprintf(out, size, "%s", tmp);
}

/* ---- pj: JSON as Python's json module reads it, one byte at a time ---- */

enum pj_event_type {
    PJ_OBJ_BEGIN,
    PJ_OBJ_END,
    PJ_ARR_BEGIN,
    PJ_ARR_END,
    PJ_KEY,       /* s, n: the whole key, decoded */
    PJ_STR_BEGIN, /* a string value opens */
    PJ_STR_PART,  /* s, n: decoded bytes of it (UTF-8; lone surrogates in 3-byte form) */
    PJ_STR_END,
    PJ_ATOM, /* s, n: a number or literal in json.dumps form */
};

struct pj_event {
    enum pj_event_type type;
    int depth;   /* the value's nesting, 0 for the top value; a key's is its value's */
    char parent; /* 'o', 'a', or 0 at the top: the container of the value or key */
    int first;   /* the first key of its object, or the first item of its array */
    const char *s;
    size_t n;
};

/* An event consumer: 0, or a negative code that stops the reader (and that it returns). */
typedef int (*pj_sink)(void *ctx, const struct pj_event *ev);

/* Hashes of the keys of one object (for noticing a repeated key); 0 marks a free slot. */
struct keyset {
    uint64_t *slots;
    size_t cap, n;
};

struct pj_frame {
    char kind;    /* 'o' or 'a' */
    size_t items; /* keys (objects) or items (arrays) begun */
    struct keyset keys;
};

enum pj_state {
    PJS_VALUE,     /* a value must come */
    PJS_ARR_FIRST, /* after '[': ']' or a value */
    PJS_OBJ_FIRST, /* after '{': '}' or a key */
    PJS_KEY,       /* after ',' in an object */
    PJS_COLON,     /* after a key */
    PJS_AFTER,     /* after a value in a container: ',' or the closer */
    PJS_DONE,      /* the top value is complete */
    PJS_ERROR,
};

enum pj_tok { PJT_NONE, PJT_STR, PJT_KEY, PJT_NUM, PJT_LIT };

enum pj_num { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

enum pj_esc { ESC_NONE, ESC_BS, ESC_HEX };

/* What pj_byte says of a byte: taken, the value goes on; taken, it completed the top value; or
 * not taken, the top value (a number) ended before it. */
#define PJ_CONT       0
#define PJ_END        1
#define PJ_END_BEFORE 2

struct pj {
    pj_sink sink;
    void *ctx;
    int track_dups; /* keep the keys of open objects */
    int dups;       /* an object repeated a key */
    int err;
    struct pj_frame *frames;
    size_t depth, cap;
    enum pj_state state;
    enum pj_tok tok;
    /* the value being started: where it sits (for its events) */
    int slot_depth;
    char slot_parent;
    int slot_first;
    /* strings */
    enum pj_esc esc;
    int esc_n;
    uint32_t esc_val;
    uint32_t hi; /* a high surrogate waiting for its low half, 0 when none */
    unsigned char u8[4];
    int u8_have, u8_need;
    /* numbers and literals */
    enum pj_num num;
    size_t num_mark; /* length before a '.' or 'e' not yet known to belong to the number */
    const char *lit;
    size_t lit_pos;
    struct buf text; /* key, string bytes not yet handed out, number or literal so far */
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    }
    return h ? h : 1;
}

/* Adds h; *dup = 1 when it was there. 0 or -ENOMEM. */
static int keyset_add(struct keyset *k, uint64_t h, int *dup)
{
    if ((k->n + 1) * 2 > k->cap) {
        size_t ncap = k->cap ? k->cap * 2 : 16;
        uint64_t *slots = calloc(ncap, sizeof(*slots));
        if (!slots) {
            return -ENOMEM;
        }
        for (size_t i = 0; i < k->cap; i++) {
            if (k->slots[i]) {
                size_t j = k->slots[i] & (ncap - 1);
                while (slots[j]) {
                    j = (j + 1) & (ncap - 1);
                }
                slots[j] = k->slots[i];
            }
        }
        free(k->slots);
        k->slots = slots;
        k->cap = ncap;
    }
    size_t j = h & (k->cap - 1);
    while (k->slots[j]) {
        if (k->slots[j] == h) {
            *dup = 1;
            return 0;
        }
        j = (j + 1) & (k->cap - 1);
    }
    k->slots[j] = h;
    k->n++;
    return 0;
}

static void pj_init(struct pj *p, pj_sink sink, void *ctx, int track_dups)
{
    memset(p, 0, sizeof(*p));
    p->sink = sink;
    p->ctx = ctx;
    p->track_dups = track_dups;
    buf_init(&p->text, TOOL_TEXT_MAX);
}

static void pj_drop_frames(struct pj *p)
{
    for (size_t i = 0; i < p->depth; i++) {
        free(p->frames[i].keys.slots);
    }
    p->depth = 0;
}

/* Ready for a new value, keeping the memory (and the dups flag). */
static void pj_reset(struct pj *p)
{
    pj_drop_frames(p);
    p->err = 0;
    p->state = PJS_VALUE;
    p->tok = PJT_NONE;
    p->esc = ESC_NONE;
    p->hi = 0;
    p->u8_need = 0;
    buf_reset(&p->text);
}

static void pj_deinit(struct pj *p)
{
    pj_drop_frames(p);
    free(p->frames);
    buf_free(&p->text);
    p->frames = NULL;
    p->cap = 0;
}

static int pj_emit(struct pj *p, enum pj_event_type t, int depth, char parent, int first,
                   const char *s, size_t n)
{
    struct pj_event ev = {t, depth, parent, first, s, n};
    return p->sink ? p->sink(p->ctx, &ev) : 0;
}

static char pj_parent(const struct pj *p)
{
    return p->depth ? p->frames[p->depth - 1].kind : 0;
}

/* Records where a value starting now sits, counting it as its array's item. */
static void pj_slot(struct pj *p)
{
    p->slot_depth = (int)p->depth;
    p->slot_parent = pj_parent(p);
    p->slot_first = 1;
    if (p->depth && p->frames[p->depth - 1].kind == 'a') {
        struct pj_frame *f = &p->frames[p->depth - 1];
        p->slot_first = f->items == 0;
        f->items++;
    }
}

static int pj_value_done(struct pj *p)
{
    if (p->depth == 0) {
        p->state = PJS_DONE;
        return PJ_END;
    }
    p->state = PJS_AFTER;
    return PJ_CONT;
}

static int pj_open(struct pj *p, char kind)
{
    if (p->depth >= TOOL_JSON_MAX_DEPTH) {
        return -EINVAL;
    }
    if (p->depth == p->cap) {
        struct pj_frame *f = tandem_grow(p->frames, &p->cap, p->depth + 1, sizeof(*p->frames), 8);
        if (!f) {
            return -ENOMEM;
        }
        p->frames = f;
    }
    struct pj_frame *f = &p->frames[p->depth++];
    memset(f, 0, sizeof(*f));
    f->kind = kind;
    p->state = kind == 'o' ? PJS_OBJ_FIRST : PJS_ARR_FIRST;
    return pj_emit(p, kind == 'o' ? PJ_OBJ_BEGIN : PJ_ARR_BEGIN, p->slot_depth, p->slot_parent,
                   p->slot_first, NULL, 0);
}

static int pj_close(struct pj *p)
{
    struct pj_frame *f = &p->frames[p->depth - 1];
    enum pj_event_type t = f->kind == 'o' ? PJ_OBJ_END : PJ_ARR_END;
    free(f->keys.slots);
    p->depth--;
    int rc = pj_emit(p, t, (int)p->depth, pj_parent(p), 0, NULL, 0);
    return rc ? rc : pj_value_done(p);
}

/* Hands out the string bytes read so far (a stream calls it at the end of each delta). */
static int pj_flush(struct pj *p)
{
    if (p->err) {
        return p->err;
    }
    if (p->tok != PJT_STR || p->text.len == 0) {
        return 0;
    }
    int rc = pj_emit(p, PJ_STR_PART, (int)p->depth, pj_parent(p), 0, p->text.data, p->text.len);
    buf_reset(&p->text);
    if (rc) {
        p->err = rc;
        p->state = PJS_ERROR;
    }
    return rc;
}

/* After an error: hands out the string bytes decoded before it, so that what a failed value gave
 * does not depend on where the text was cut into deltas. */
static int pj_salvage(struct pj *p)
{
    if (p->tok != PJT_STR || p->text.len == 0) {
        return 0;
    }
    int rc = pj_emit(p, PJ_STR_PART, (int)p->depth, pj_parent(p), 0, p->text.data, p->text.len);
    buf_reset(&p->text);
    return is_reject(rc) ? 0 : rc;
}

static int pj_put_cp(struct pj *p, uint32_t cp)
{
    char tmp[4];
    size_t n = tandem_utf8_put(tmp, cp); /* surrogates come out in their 3-byte form */
    return buf_append(&p->text, tmp, n);
}

static int pj_str_end(struct pj *p)
{
    if (p->tok == PJT_KEY) {
        struct pj_frame *f = &p->frames[p->depth - 1];
        int first = f->items == 0;
        f->items++;
        if (p->track_dups) {
            int rc = keyset_add(&f->keys, hash_bytes(p->text.data, p->text.len), &p->dups);
            if (rc) {
                return rc;
            }
        }
        p->tok = PJT_NONE;
        p->state = PJS_COLON;
        int rc = pj_emit(p, PJ_KEY, (int)p->depth, 'o', first, p->text.data ? p->text.data : "",
                         p->text.len);
        buf_reset(&p->text);
        return rc;
    }
    int rc = pj_flush(p);
    if (rc) {
        return rc;
    }
    p->tok = PJT_NONE;
    rc = pj_emit(p, PJ_STR_END, (int)p->depth, pj_parent(p), 0, NULL, 0);
    return rc ? rc : pj_value_done(p);
}

static int hex_digit(unsigned char c)
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

/* After a backslash, or inside a \uXXXX (Python pairs a high surrogate with a following
 * low-surrogate escape, and keeps either alone otherwise). */
static int pj_esc_byte(struct pj *p, unsigned char c)
{
    int rc;
    if (p->esc == ESC_BS) {
        if (c == 'u') {
            p->esc = ESC_HEX;
            p->esc_n = 0;
            p->esc_val = 0;
            return PJ_CONT;
        }
        if (p->hi && (rc = pj_put_cp(p, p->hi)) != 0) {
            return rc;
        }
        p->hi = 0;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = c ? strchr(from, c) : NULL;
        if (!k) {
            return -EINVAL;
        }
        p->esc = ESC_NONE;
        return buf_append(&p->text, &to[k - from], 1);
    }
    int v = hex_digit(c);
    if (v < 0) {
        return -EINVAL;
    }
    p->esc_val = p->esc_val * 16 + (uint32_t)v;
    if (++p->esc_n < 4) {
        return PJ_CONT;
    }
    p->esc = ESC_NONE;
    uint32_t u = p->esc_val;
    if (p->hi) {
        uint32_t hi = p->hi;
        p->hi = 0;
        if (u >= 0xdc00 && u <= 0xdfff) {
            return pj_put_cp(p, 0x10000 + ((hi - 0xd800) << 10) + (u - 0xdc00));
        }
        if ((rc = pj_put_cp(p, hi)) != 0) {
            return rc;
        }
    }
    if (u >= 0xd800 && u <= 0xdbff) {
        p->hi = u;
        return PJ_CONT;
    }
    return pj_put_cp(p, u);
}

static int pj_str_byte(struct pj *p, unsigned char c)
{
    int rc;
    if (p->u8_need) {
        if (utf8_next_ok(p->u8, p->u8_have, c)) {
            p->u8[p->u8_have++] = c;
            if (p->u8_have < p->u8_need) {
                return PJ_CONT;
            }
            p->u8_need = 0;
            return buf_append(&p->text, p->u8, (size_t)p->u8_have);
        }
        p->u8_need = 0; /* a truncated sequence: one U+FFFD, as Python's decoder writes */
        if ((rc = buf_append(&p->text, REPLACEMENT, 3)) != 0) {
            return rc;
        }
    }
    if (p->esc != ESC_NONE) {
        return pj_esc_byte(p, c);
    }
    if (p->hi) {
        if (c == '\\') {
            p->esc = ESC_BS;
            return PJ_CONT;
        }
        rc = pj_put_cp(p, p->hi);
        p->hi = 0;
        if (rc) {
            return rc;
        }
    }
    if (c == '"') {
        return pj_str_end(p);
    }
    if (c == '\\') {
        p->esc = ESC_BS;
        return PJ_CONT;
    }
    if (c < 0x20) {
        return -EINVAL; /* json.loads is strict: no raw control characters */
    }
    if (c < 0x80) {
        return buf_append(&p->text, &c, 1);
    }
    int need = utf8_lead_len(c);
    if (need == 0) {
        return buf_append(&p->text, REPLACEMENT, 3);
    }
    p->u8[0] = c;
    p->u8_have = 1;
    p->u8_need = need;
    return PJ_CONT;
}

/* The number in p->text is complete (the byte after it is not part of it). */
static int pj_num_end(struct pj *p)
{
    if (p->num == N_MINUS) {
        return -EINVAL;
    }
    if (p->num == N_DOT || p->num == N_E || p->num == N_ESIGN) {
        /* "1." or "1e+": Python takes "1" and the rest is not a delimiter in a container */
        if (p->depth > 0) {
            return -EINVAL;
        }
        p->text.len = p->num_mark;
        p->text.data[p->text.len] = '\0';
    }
    const char *t = p->text.data;
    size_t n = p->text.len;
    char fl[64];
    if (strpbrk(t, ".eE")) {
        py_float_repr(strtod(t, NULL), fl, sizeof(fl));
        t = fl;
        n = strlen(fl);
    } else if (n - (t[0] == '-') > PY_INT_DIGITS) {
        return -EINVAL;
    } else if (n == 2 && t[0] == '-' && t[1] == '0') {
        t = "0";
        n = 1;
    }
    p->tok = PJT_NONE;
    int rc = pj_emit(p, PJ_ATOM, p->slot_depth, p->slot_parent, p->slot_first, t, n);
    buf_reset(&p->text);
    if (rc) {
        return rc;
    }
    pj_value_done(p);
    return 0;
}

/* 1 when c belongs to the number, 0 when the number ended before c, or an error. */
static int pj_num_byte(struct pj *p, unsigned char c)
{
    int digit = c >= '0' && c <= '9';
    int expo = c == 'e' || c == 'E';
    enum pj_num next;
    switch (p->num) {
    case N_MINUS:
        if (c == 'I') {
            p->tok = PJT_LIT;
            p->lit = "-Infinity";
            p->lit_pos = 2;
            return 1;
        }
        if (!digit) {
            return -EINVAL;
        }
        next = c == '0' ? N_ZERO : N_INT;
        break;
    case N_ZERO:
    case N_INT:
    case N_FRAC:
        if (digit && p->num != N_ZERO) {
            next = p->num;
        } else if (c == '.' && p->num != N_FRAC) {
            next = N_DOT;
            p->num_mark = p->text.len;
        } else if (expo) {
            next = N_E;
            p->num_mark = p->text.len;
        } else {
            return pj_num_end(p);
        }
        break;
    case N_DOT:
        if (!digit) {
            return pj_num_end(p);
        }
        next = N_FRAC;
        break;
    case N_E:
        if (c == '+' || c == '-') {
            next = N_ESIGN;
        } else if (digit) {
            next = N_EXP;
        } else {
            return pj_num_end(p);
        }
        break;
    case N_ESIGN:
    case N_EXP:
        if (!digit) {
            return pj_num_end(p);
        }
        next = N_EXP;
        break;
    default:
        return -EINVAL;
    }
    p->num = next;
    int rc = buf_append(&p->text, &c, 1);
    return rc ? rc : 1;
}

static int pj_lit_byte(struct pj *p, unsigned char c)
{
    if (c != (unsigned char)p->lit[p->lit_pos]) {
        return -EINVAL;
    }
    if (p->lit[++p->lit_pos] != '\0') {
        return PJ_CONT;
    }
    p->tok = PJT_NONE;
    int rc =
        pj_emit(p, PJ_ATOM, p->slot_depth, p->slot_parent, p->slot_first, p->lit, strlen(p->lit));
    return rc ? rc : pj_value_done(p);
}

static int pj_value_start(struct pj *p, unsigned char c)
{
    pj_slot(p);
    switch (c) {
    case '{':
        return pj_open(p, 'o');
    case '[':
        return pj_open(p, 'a');
    case '"':
        p->tok = PJT_STR;
        buf_reset(&p->text);
        return pj_emit(p, PJ_STR_BEGIN, p->slot_depth, p->slot_parent, p->slot_first, NULL, 0);
    case 't':
        p->lit = "true";
        break;
    case 'f':
        p->lit = "false";
        break;
    case 'n':
        p->lit = "null";
        break;
    case 'N':
        p->lit = "NaN";
        break;
    case 'I':
        p->lit = "Infinity";
        break;
    default:
        if (c != '-' && (c < '0' || c > '9')) {
            return -EINVAL;
        }
        p->tok = PJT_NUM;
        p->num = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        buf_reset(&p->text);
        return buf_append(&p->text, &c, 1);
    }
    p->tok = PJT_LIT;
    p->lit_pos = 1;
    return PJ_CONT;
}

static int pj_struct_byte(struct pj *p, unsigned char c)
{
    if (p->state == PJS_DONE) {
        return -EINVAL; /* nothing more belongs to the value */
    }
    if (JSON_WS(c)) {
        return PJ_CONT;
    }
    switch (p->state) {
    case PJS_VALUE:
        return pj_value_start(p, c);
    case PJS_ARR_FIRST:
        return c == ']' ? pj_close(p) : pj_value_start(p, c);
    case PJS_OBJ_FIRST:
    case PJS_KEY:
        if (c == '}' && p->state == PJS_OBJ_FIRST) {
            return pj_close(p);
        }
        if (c != '"') {
            return -EINVAL;
        }
        p->tok = PJT_KEY;
        buf_reset(&p->text);
        return PJ_CONT;
    case PJS_COLON:
        if (c != ':') {
            return -EINVAL;
        }
        p->state = PJS_VALUE;
        return PJ_CONT;
    case PJS_AFTER: {
        char k = p->frames[p->depth - 1].kind;
        if (c == ',') {
            p->state = k == 'o' ? PJS_KEY : PJS_VALUE;
            return PJ_CONT;
        }
        if ((c == '}' && k == 'o') || (c == ']' && k == 'a')) {
            return pj_close(p);
        }
        return -EINVAL;
    }
    default:
        return -EINVAL;
    }
}

static int pj_byte_inner(struct pj *p, unsigned char c)
{
    switch (p->tok) {
    case PJT_STR:
    case PJT_KEY:
        return pj_str_byte(p, c);
    case PJT_LIT:
        return pj_lit_byte(p, c);
    case PJT_NUM: {
        int rc = pj_num_byte(p, c);
        if (rc != 0) {
            return rc < 0 ? rc : PJ_CONT;
        }
        if (p->state == PJS_DONE) {
            return PJ_END_BEFORE;
        }
        break;
    }
    default:
        break;
    }
    return pj_struct_byte(p, c);
}

/* Feeds one byte: PJ_CONT, PJ_END, PJ_END_BEFORE, -EINVAL (not JSON as Python reads it), or a
 * sink's or the memory's error. Errors stick. */
static int pj_byte(struct pj *p, unsigned char c)
{
    if (p->err) {
        return p->err;
    }
    int rc = pj_byte_inner(p, c);
    if (rc < 0) {
        p->err = rc;
        p->state = PJS_ERROR;
    }
    return rc;
}

/* The end of the text: 0 when the top value is complete (a number ends here), else -EINVAL or
 * a sink's error. */
static int pj_finish(struct pj *p)
{
    if (p->err) {
        return p->err;
    }
    int rc = 0;
    if (p->tok == PJT_NUM) {
        rc = pj_num_end(p);
    } else if (p->tok != PJT_NONE || p->state != PJS_DONE) {
        rc = -EINVAL;
    }
    if (rc == 0 && p->state != PJS_DONE) {
        rc = -EINVAL;
    }
    if (rc) {
        p->err = rc;
        p->state = PJS_ERROR;
    }
    return rc;
}

/* Appends one event in json.dumps form; base is the depth of the value being written (no
 * separator before it). */
static void dumps_event(struct buf *out, const struct pj_event *ev, int base)
{
    int sep = ev->depth > base && ev->parent == 'a' && !ev->first;
    switch (ev->type) {
    case PJ_KEY:
        buf_appends(out, ev->first ? "\"" : ", \"");
        py_escape(out, ev->s, ev->n);
        buf_appends(out, "\": ");
        return;
    case PJ_OBJ_END:
        buf_appends(out, "}");
        return;
    case PJ_ARR_END:
        buf_appends(out, "]");
        return;
    case PJ_STR_PART:
        py_escape(out, ev->s, ev->n);
        return;
    case PJ_STR_END:
        buf_appends(out, "\"");
        return;
    default:
        break;
    }
    if (sep) {
        buf_appends(out, ", ");
    }
    if (ev->type == PJ_OBJ_BEGIN) {
        buf_appends(out, "{");
    } else if (ev->type == PJ_ARR_BEGIN) {
        buf_appends(out, "[");
    } else if (ev->type == PJ_STR_BEGIN) {
        buf_appends(out, "\"");
    } else {
        buf_append(out, ev->s, ev->n);
    }
}

/* ---- pv: a parsed value, for whole outputs ---- */

enum pv_type { PV_OBJ, PV_ARR, PV_STR, PV_ATOM };

struct pv_member {
    char *key; /* objects: NUL-terminated, klen bytes; NULL in arrays */
    size_t klen;
    struct pv *v;
};

struct pv {
    enum pv_type type;
    struct buf text;     /* string bytes, or the atom in json.dumps form */
    struct pv_member *m; /* members or items, in order */
    size_t n, cap;
};

/* An open container of the builder. */
struct pv_open {
    struct pv *v; /* borrowed from the root */
};

struct pv_builder {
    struct pv *root;
    struct pv_open *stack;
    size_t depth, cap;
    struct pv *str; /* the string being read */
    struct buf key;
};

static void pv_free(struct pv *v)
{
    if (!v) {
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        pv_free(v->m[i].v);
        free(v->m[i].key);
    }
    free(v->m);
    buf_free(&v->text);
    free(v);
}

static struct pv *pv_new(enum pv_type type)
{
    struct pv *v = calloc(1, sizeof(*v));
    if (v) {
        v->type = type;
        buf_init(&v->text, TOOL_TEXT_MAX);
    }
    return v;
}

/* Adds v to the open container (or makes it the root); frees v on failure. */
static int pv_attach(struct pv_builder *b, struct pv *v)
{
    if (b->depth == 0) {
        b->root = v;
        return 0;
    }
    struct pv *o = b->stack[b->depth - 1].v;
    struct pv_member *m = tandem_grow(o->m, &o->cap, o->n + 1, sizeof(*m), 4);
    char *key = NULL;
    if (m) {
        o->m = m;
        if (o->type == PV_OBJ) {
            key = dup_bytes(b->key.data ? b->key.data : "", b->key.len);
        }
    }
    if (!m || (o->type == PV_OBJ && !key)) {
        pv_free(v);
        return -ENOMEM;
    }
    o->m[o->n++] = (struct pv_member){key, b->key.len, v};
    return 0;
}

struct kref {
    const struct pv_member *m;
    size_t i;
};

static int kref_cmp(const void *pa, const void *pb)
{
    const struct kref *a = pa, *b = pb;
    size_t n = a->m->klen < b->m->klen ? a->m->klen : b->m->klen;
    int c = memcmp(a->m->key, b->m->key, n);
    if (c == 0 && a->m->klen != b->m->klen) {
        c = a->m->klen < b->m->klen ? -1 : 1;
    }
    if (c == 0) {
        c = a->i < b->i ? -1 : a->i > b->i;
    }
    return c;
}

static int same_key(const struct pv_member *a, const struct pv_member *b)
{
    return a->klen == b->klen && memcmp(a->key, b->key, a->klen) == 0;
}

/* A Python dict from the members: a repeated key keeps its first place and its last value. */
static int pv_dedupe(struct pv *o)
{
    if (o->n < 2) {
        return 0;
    }
    struct kref *r = malloc(o->n * sizeof(*r));
    unsigned char *drop = calloc(o->n, 1);
    if (!r || !drop) {
        free(r);
        free(drop);
        return -ENOMEM;
    }
    for (size_t i = 0; i < o->n; i++) {
        r[i] = (struct kref){&o->m[i], i};
    }
    qsort(r, o->n, sizeof(*r), kref_cmp);
    for (size_t a = 0; a < o->n;) {
        size_t b = a + 1;
        while (b < o->n && same_key(r[b].m, r[a].m)) {
            b++;
        }
        if (b - a > 1) { /* the first place takes the last value, the rest go */
            struct pv *t = o->m[r[a].i].v;
            o->m[r[a].i].v = o->m[r[b - 1].i].v;
            o->m[r[b - 1].i].v = t;
            for (size_t j = a + 1; j < b; j++) {
                drop[r[j].i] = 1;
            }
        }
        a = b;
    }
    size_t w = 0;
    for (size_t i = 0; i < o->n; i++) {
        if (drop[i]) {
            pv_free(o->m[i].v);
            free(o->m[i].key);
        } else {
            o->m[w++] = o->m[i];
        }
    }
    o->n = w;
    free(r);
    free(drop);
    return 0;
}

static int pv_sink(void *ctx, const struct pj_event *ev)
{
    struct pv_builder *b = ctx;
    struct pv *v;
    switch (ev->type) {
    case PJ_KEY:
        buf_reset(&b->key);
        return buf_append(&b->key, ev->s, ev->n);
    case PJ_STR_PART:
        return buf_append(&b->str->text, ev->s, ev->n);
    case PJ_STR_END:
        b->str = NULL;
        return 0;
    case PJ_OBJ_END:
    case PJ_ARR_END:
        v = b->stack[--b->depth].v;
        return v->type == PV_OBJ ? pv_dedupe(v) : 0;
    case PJ_OBJ_BEGIN:
        v = pv_new(PV_OBJ);
        break;
    case PJ_ARR_BEGIN:
        v = pv_new(PV_ARR);
        break;
    case PJ_STR_BEGIN:
        v = pv_new(PV_STR);
        break;
    default:
        v = pv_new(PV_ATOM);
        if (v && buf_append(&v->text, ev->s, ev->n) != 0) {
            pv_free(v);
            return -ENOMEM;
        }
        break;
    }
    if (!v) {
        return -ENOMEM;
    }
    int rc = pv_attach(b, v);
    if (rc) {
        return rc;
    }
    if (v->type == PV_STR) {
        b->str = v;
    } else if (v->type != PV_ATOM) {
        struct pv_open *st = tandem_grow(b->stack, &b->cap, b->depth + 1, sizeof(*st), 8);
        if (!st) {
            return -ENOMEM;
        }
        b->stack = st;
        b->stack[b->depth++].v = v;
    }
    return 0;
}

/* One JSON value read as Python reads it: whole != 0 is json.loads (JSON whitespace around it,
 * nothing else), whole == 0 is JSONDecoder.raw_decode (the value at the start; *end is where it
 * stops). 0 with *out set, -EINVAL when it is not that, or -ENOMEM. */
static int pv_parse(const char *s, size_t n, int whole, struct pv **out, size_t *end)
{
    struct pv_builder b;
    memset(&b, 0, sizeof(b));
    buf_init(&b.key, TOOL_TEXT_MAX);
    struct pj p;
    pj_init(&p, pv_sink, &b, 0);
    size_t stop = n, i;
    int rc = 0;
    *out = NULL;
    for (i = 0; i < n; i++) {
        rc = pj_byte(&p, (unsigned char)s[i]);
        if (rc < 0) {
            goto out;
        }
        if (rc != PJ_CONT) {
            stop = rc == PJ_END ? i + 1 : i;
            break;
        }
    }
    if (i == n && (rc = pj_finish(&p)) != 0) {
        goto out;
    }
    for (size_t j = stop; whole && j < n; j++) {
        if (!JSON_WS(s[j])) {
            rc = -EINVAL;
            goto out;
        }
    }
    *out = b.root;
    b.root = NULL;
    if (end) {
        *end = stop;
    }
    rc = 0;
out:
    pj_deinit(&p);
    pv_free(b.root);
    free(b.stack);
    buf_free(&b.key);
    return rc;
}

static struct pv *pv_get(const struct pv *o, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; o->type == PV_OBJ && i < o->n; i++) {
        if (o->m[i].klen == n && memcmp(o->m[i].key, key, n) == 0) {
            return o->m[i].v;
        }
    }
    return NULL;
}

/* json.dumps(v, ensure_ascii=False). */
static void pv_dumps(const struct pv *v, struct buf *out)
{
    switch (v->type) {
    case PV_OBJ:
    case PV_ARR:
        buf_appends(out, v->type == PV_OBJ ? "{" : "[");
        for (size_t i = 0; i < v->n; i++) {
            if (i) {
                buf_appends(out, ", ");
            }
            if (v->type == PV_OBJ) {
                buf_appends(out, "\"");
                py_escape(out, v->m[i].key, v->m[i].klen);
                buf_appends(out, "\": ");
            }
            pv_dumps(v->m[i].v, out);
        }
        buf_appends(out, v->type == PV_OBJ ? "}" : "]");
        return;
    case PV_STR:
        buf_appends(out, "\"");
        py_escape(out, v->text.data ? v->text.data : "", v->text.len);
        buf_appends(out, "\"");
        return;
    case PV_ATOM:
        buf_append(out, v->text.data, v->text.len);
        return;
    }
}

/* ---- whole outputs: vLLM's extract_tool_calls ---- */

struct call_list {
    struct tool_call *v;
    size_t n, cap;
};

static void call_list_free(struct call_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].arguments);
    }
    free(l->v);
    memset(l, 0, sizeof(*l));
}

static int call_list_add(struct call_list *l, const char *name, size_t nn, const char *args,
                         size_t na)
{
    struct tool_call *v = tandem_grow(l->v, &l->cap, l->n + 1, sizeof(*v), 4);
    if (!v) {
        return -ENOMEM;
    }
    l->v = v;
    struct tool_call *c = &l->v[l->n];
    memset(c, 0, sizeof(*c));
    c->name = dup_bytes(name, nn);
    c->arguments = dup_bytes(args, na);
    if (!c->name || !c->arguments) {
        free(c->name);
        free(c->arguments);
        return -ENOMEM;
    }
    c->name_len = nn;
    c->arguments_len = na;
    l->n++;
    return 0;
}

/* Adds {name, json.dumps(args)} (args NULL: "{}"); NOT_TOOL_CALLS when name is not a string
 * (pydantic's FunctionCall.name: str). */
static int add_pv_call(struct call_list *l, const struct pv *name, const struct pv *args)
{
    if (!name || name->type != PV_STR) {
        return NOT_TOOL_CALLS;
    }
    struct buf a;
    buf_init(&a, TOOL_TEXT_MAX);
    if (args) {
        pv_dumps(args, &a);
    } else {
        buf_appends(&a, "{}");
    }
    int rc = buf_error(&a);
    if (rc == 0) {
        rc = call_list_add(l, name->text.data ? name->text.data : "", name->text.len, buf_cstr(&a),
                           a.len);
    }
    buf_free(&a);
    return rc;
}

/* hermes: json.loads of one block; a dict with "name" (str) and "arguments". */
static int hermes_block(const char *s, size_t n, struct call_list *calls)
{
    struct pv *v;
    int rc = pv_parse(s, n, 1, &v, NULL);
    if (rc) {
        return is_reject(rc) ? NOT_TOOL_CALLS : rc;
    }
    rc = NOT_TOOL_CALLS;
    const struct pv *args = v->type == PV_OBJ ? pv_get(v, "arguments") : NULL;
    if (args) {
        rc = add_pv_call(calls, pv_get(v, "name"), args);
    }
    pv_free(v);
    return rc;
}

/* Hermes2ProToolParser.extract_tool_calls: the blocks that
 * <tool_call>(.*?)</tool_call>|<tool_call>(.*) finds; *content_len: text before the first. */
static int hermes_calls(const char *t, size_t n, struct call_list *calls, size_t *content_len)
{
    const size_t sl = LIT_LEN(HERMES_START), el = LIT_LEN(HERMES_END);
    const char *first = memmem(t, n, HERMES_START, sl);
    if (!first) {
        return NOT_TOOL_CALLS;
    }
    *content_len = (size_t)(first - t);
    size_t pos = *content_len;
    const char *st;
    while ((st = memmem(t + pos, n - pos, HERMES_START, sl)) != NULL) {
        size_t body = (size_t)(st - t) + sl;
        const char *en = memmem(t + body, n - body, HERMES_END, el);
        size_t body_end = en ? (size_t)(en - t) : n;
        pos = en ? body_end + el : n;
        int rc = hermes_block(t + body, body_end - body, calls);
        if (rc) {
            return rc;
        }
    }
    return 0;
}

/* Llama3JsonToolParser.extract_tool_calls: raw_decode at every '{' not inside (or right after)
 * the last object decoded; each must be a call, with "arguments" or else "parameters". */
static int llama_calls(const char *t, size_t n, struct call_list *calls)
{
    if (!memmem(t, n, LLAMA_TAG, LIT_LEN(LLAMA_TAG)) && !memchr(t, '{', n)) {
        return NOT_TOOL_CALLS;
    }
    int have_end = 0;
    size_t end_index = 0;
    for (const char *q = memchr(t, '{', n); q; q = memchr(q + 1, '{', n - (size_t)(q + 1 - t))) {
        size_t i = (size_t)(q - t), used;
        if (have_end && i <= end_index) {
            continue;
        }
        struct pv *v;
        int rc = pv_parse(q, n - i, 0, &v, &used);
        if (rc) {
            return is_reject(rc) ? NOT_TOOL_CALLS : rc;
        }
        end_index = i + used;
        have_end = 1;
        const struct pv *args = pv_get(v, "arguments");
        if (!args) {
            args = pv_get(v, "parameters");
        }
        rc = args ? add_pv_call(calls, pv_get(v, "name"), args) : NOT_TOOL_CALLS;
        pv_free(v);
        if (rc) {
            return rc;
        }
    }
    return calls->n ? 0 : NOT_TOOL_CALLS;
}

/* Mistral, name{args} form: each [TOOL_CALLS] segment with a '{' is a call named by the text
 * before it ("[ARGS]" removed) with the raw rest as arguments. s starts at the first marker. */
static int mistral_v11_calls(const char *s, size_t n, struct call_list *calls)
{
    const size_t bl = LIT_LEN(MISTRAL_BOT), al = LIT_LEN(MISTRAL_ARGS);
    size_t pos = bl;
    struct buf name;
    buf_init(&name, TOOL_TEXT_MAX);
    int rc = 0;
    while (rc == 0 && pos <= n) {
        const char *next = memmem(s + pos, n - pos, MISTRAL_BOT, bl);
        size_t end = next ? (size_t)(next - s) : n;
        const char *brace = memchr(s + pos, '{', end - pos);
        if (brace) {
            buf_reset(&name);
            for (size_t i = pos; i < (size_t)(brace - s);) {
                if ((size_t)(brace - s) - i >= al && memcmp(s + i, MISTRAL_ARGS, al) == 0) {
                    i += al;
                    continue;
                }
                buf_append(&name, s + i, 1);
                i++;
            }
            rc = buf_error(&name);
            if (rc == 0) {
                rc = call_list_add(calls, buf_cstr(&name), name.len, brace,
                                   end - (size_t)(brace - s));
            }
        }
        if (!next) {
            break;
        }
        pos = end + bl;
    }
    buf_free(&name);
    return rc;
}

/* Mistral, JSON-array form: what the stripped text after the one marker raw-decodes to must be
 * a list of calls ("arguments" defaults to {}); if it is not JSON, the first "[{" to the last
 * "}]" must be (vLLM's regex fallback). */
static int mistral_pre_calls(const char *s, size_t n, struct call_list *calls)
{
    if (memmem(s, n, MISTRAL_BOT, LIT_LEN(MISTRAL_BOT))) {
        return NOT_TOOL_CALLS; /* vLLM raises "Only one BOT token should have been outputted" */
    }
    size_t lead = py_space_prefix(s, n);
    s += lead;
    n -= lead;
    struct pv *v;
    int rc = pv_parse(s, n, 0, &v, NULL);
    if (rc == -EINVAL) {
        const char *f = memmem(s, n, "[{", 2);
        const char *l = last_occurrence(s, n, "}]", 2);
        if (!f || !l || l < f + 2) {
            return NOT_TOOL_CALLS;
        }
        rc = pv_parse(f, (size_t)(l + 2 - f), 1, &v, NULL);
    }
    if (rc) {
        return is_reject(rc) ? NOT_TOOL_CALLS : rc;
    }
    rc = 0;
    if (v->type == PV_ARR) {
        for (size_t i = 0; rc == 0 && i < v->n; i++) {
            const struct pv *c = v->m[i].v;
            rc = c->type == PV_OBJ ? add_pv_call(calls, pv_get(c, "name"), pv_get(c, "arguments"))
                                   : NOT_TOOL_CALLS;
        }
    } else if ((v->type != PV_OBJ && v->type != PV_STR) || v->n || v->text.len) {
        rc = NOT_TOOL_CALLS; /* iterating anything else than [], {} or "" fails in Python */
    }
    pv_free(v);
    return rc;
}

static int mistral_calls(const struct tool_parser *p, const char *t, size_t n,
                         struct call_list *calls, size_t *content_len)
{
    const size_t bl = LIT_LEN(MISTRAL_BOT);
    const char *bot = memmem(t, n, MISTRAL_BOT, bl);
    if (!bot) {
        return NOT_TOOL_CALLS;
    }
    *content_len = (size_t)(bot - t);
    size_t rest = n - *content_len;
    if (p->mistral_args_token) {
        return mistral_v11_calls(bot, rest, calls);
    }
    return mistral_pre_calls(bot + bl, rest - bl, calls);
}

/* ---- ids ---- */

static void random_bytes(unsigned char *out, size_t n)
{
    if (getrandom(out, n, GRND_NONBLOCK) == (ssize_t)n) {
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ULL ^ (uint64_t)ts.tv_sec;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        out[i] = (unsigned char)(x >> 56);
    }
}

static void make_id(const struct tool_parser *p, char *out)
{
    memset(out, 0, TOOL_CALL_ID_MAX + 1);
    if (p->make_id) {
        p->make_id(p->make_id_ctx, p->kind, out);
        out[TOOL_CALL_ID_MAX] = '\0';
        return;
    }
    if (p->kind != TOOL_PARSER_MISTRAL) {
        openai_make_id(out, TOOL_CALL_ID_MAX + 1, "chatcmpl-tool-");
        return;
    }
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    size_t w = 0;
    while (w < 9) {
        unsigned char r[16];
        random_bytes(r, sizeof(r));
        for (size_t i = 0; i < sizeof(r) && w < 9; i++) {
            if (r[i] < 248) { /* 248 = 4 * 62: no bias */
                out[w++] = alnum[r[i] % 62];
            }
        }
    }
}

/* ---- the public whole-output API ---- */

int tool_parser_kind_from_name(const char *name, enum tool_parser_kind *out)
{
    static const struct {
        const char *name;
        enum tool_parser_kind kind;
    } names[] = {{"hermes", TOOL_PARSER_HERMES},
                 {"llama3_json", TOOL_PARSER_LLAMA3_JSON},
                 {"llama4_json", TOOL_PARSER_LLAMA3_JSON},
                 {"mistral", TOOL_PARSER_MISTRAL}};
    for (size_t i = 0; name && i < ARRAY_SIZE(names); i++) {
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].kind;
            return 0;
        }
    }
    return -EINVAL;
}

void tool_parser_init(struct tool_parser *p, enum tool_parser_kind kind)
{
    memset(p, 0, sizeof(*p));
    p->kind = kind;
}

void tool_result_free(struct tool_result *r)
{
    for (size_t i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    free(r->content);
    memset(r, 0, sizeof(*r));
}

int tool_parse_complete(const struct tool_parser *p, const char *text, size_t len,
                        struct tool_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!p || (!text && len)) {
        set_err(err, errlen, "tool parser: no text");
        return -EINVAL;
    }
    if (len > TOOL_TEXT_MAX) {
        set_err(err, errlen, "tool parser: text longer than TOOL_TEXT_MAX");
        return -E2BIG;
    }
    if (!text) {
        text = "";
    }
    struct call_list calls = {0};
    size_t clen = 0;
    int rc = NOT_TOOL_CALLS;
    if (p->kind == TOOL_PARSER_HERMES) {
        rc = hermes_calls(text, len, &calls, &clen);
    } else if (p->kind == TOOL_PARSER_LLAMA3_JSON) {
        rc = llama_calls(text, len, &calls);
    } else if (p->kind == TOOL_PARSER_MISTRAL) {
        rc = mistral_calls(p, text, len, &calls, &clen);
    }
    if (rc < 0) {
        goto err_free;
    }
    if (rc == NOT_TOOL_CALLS) {
        call_list_free(&calls);
        out->content = dup_bytes(text, len);
        out->content_len = len;
        rc = out->content ? 0 : -ENOMEM;
        if (rc) {
            goto err_free;
        }
        return 0;
    }
    out->tools_called = 1;
    for (size_t i = 0; i < calls.n; i++) {
        make_id(p, calls.v[i].id);
    }
    if (clen && !py_blank(text, clen)) {
        out->content = dup_bytes(text, clen);
        out->content_len = clen;
        if (!out->content) {
            rc = -ENOMEM;
            goto err_free;
        }
    }
    out->calls = calls.n ? calls.v : NULL;
    out->n_calls = calls.n;
    if (!calls.n) {
        free(calls.v);
    }
    return 0;
err_free:
    call_list_free(&calls);
    tool_result_free(out);
    set_err(err, errlen,
            rc == -ENOMEM ? "tool parser: out of memory" : "tool parser: too much text");
    return rc;
}

int tool_parse_required(const struct tool_parser *p, const char *text, size_t len,
                        struct tool_result *out)
{
    memset(out, 0, sizeof(*out));
    if (len > TOOL_TEXT_MAX) {
        return -E2BIG;
    }
    struct pv *v = NULL;
    int rc = pv_parse(text ? text : "", len, 1, &v, NULL);
    struct call_list calls = {0};
    if (rc == 0 && v->type != PV_ARR) {
        rc = NOT_TOOL_CALLS;
    }
    for (size_t i = 0; rc == 0 && i < v->n; i++) {
        const struct pv *item = v->m[i].v;
        if (item->type != PV_OBJ || !pv_get(item, "parameters")) {
            rc = NOT_TOOL_CALLS;
            break;
        }
        rc = add_pv_call(&calls, pv_get(item, "name"), pv_get(item, "parameters"));
    }
    pv_free(v);
    if (rc == -EINVAL || rc == NOT_TOOL_CALLS) {
        /* not the grammar's array (cut off by max_tokens): the text as content */
        call_list_free(&calls);
        out->content = dup_bytes(text ? text : "", len);
        out->content_len = len;
        return out->content ? 0 : -ENOMEM;
    }
    if (rc != 0) {
        call_list_free(&calls);
        return rc;
    }
    out->tools_called = 1;
    for (size_t i = 0; i < calls.n; i++) {
        make_id(p, calls.v[i].id);
    }
    out->calls = calls.n ? calls.v : NULL;
    out->n_calls = calls.n;
    if (!calls.n) {
        free(calls.v);
    }
    out->content = dup_bytes("", 0); /* vLLM answers content "" with required tool calls */
    return out->content ? 0 : -ENOMEM;
}

int tool_calls_json(const struct tool_call *calls, size_t n, struct buf *out)
{
    buf_appends(out, "[");
    for (size_t i = 0; i < n; i++) {
        buf_appends(out, i ? ",{\"id\":" : "{\"id\":");
        openai_json_string(out, calls[i].id, strlen(calls[i].id));
        buf_appends(out, ",\"type\":\"function\",\"function\":{\"name\":");
        openai_json_string(out, calls[i].name, calls[i].name_len);
        buf_appends(out, ",\"arguments\":");
        openai_json_string(out, calls[i].arguments, calls[i].arguments_len);
        buf_appends(out, "}}");
    }
    buf_appends(out, "]");
    return buf_error(out);
}

/* ---- deltas ---- */

void tool_delta_init(struct tool_delta *d)
{
    memset(d, 0, sizeof(*d));
    buf_init(&d->content, TOOL_TEXT_MAX);
}

void tool_delta_reset(struct tool_delta *d)
{
    buf_reset(&d->content);
    for (size_t i = 0; i < d->n_calls; i++) {
        free(d->calls[i].name);
        buf_free(&d->calls[i].arguments);
    }
    d->n_calls = 0;
}

void tool_delta_free(struct tool_delta *d)
{
    tool_delta_reset(d);
    free(d->calls);
    buf_free(&d->content);
    memset(d, 0, sizeof(*d));
}

static struct tool_delta_call *delta_new(struct tool_delta *d, size_t index)
{
    struct tool_delta_call *v = tandem_grow(d->calls, &d->cap, d->n_calls + 1, sizeof(*v), 4);
    if (!v) {
        return NULL;
    }
    d->calls = v;
    struct tool_delta_call *e = &d->calls[d->n_calls++];
    memset(e, 0, sizeof(*e));
    e->index = index;
    buf_init(&e->arguments, TOOL_TEXT_MAX);
    return e;
}

static int delta_name(struct tool_delta *d, size_t index, const char *id, const char *name,
                      size_t n)
{
    char *copy = dup_bytes(name, n);
    struct tool_delta_call *e = copy ? delta_new(d, index) : NULL;
    if (!e) {
        free(copy);
        return -ENOMEM;
    }
    snprintf(e->id, sizeof(e->id), "%s", id);
    e->name = copy;
    e->name_len = n;
    return 0;
}

static int delta_args(struct tool_delta *d, size_t index, const char *a, size_t n)
{
    if (n == 0) {
        return 0;
    }
    struct tool_delta_call *e = d->n_calls ? &d->calls[d->n_calls - 1] : NULL;
    if (!e || e->index != index || e->name) {
        e = delta_new(d, index);
        if (!e) {
            return -ENOMEM;
        }
    }
    return buf_append(&e->arguments, a, n);
}

int tool_delta_json(const struct tool_delta *d, struct buf *out)
{
    buf_appends(out, "[");
    for (size_t i = 0; i < d->n_calls; i++) {
        const struct tool_delta_call *e = &d->calls[i];
        buf_appends(out, i ? "," : "");
        if (e->name) {
            buf_appends(out, "{\"id\":");
            openai_json_string(out, e->id, strlen(e->id));
            buf_appendf(out,
                        ",\"type\":\"function\",\"index\":%zu,\"function\":{\"name\":", e->index);
            openai_json_string(out, e->name, e->name_len);
            buf_appends(out, "}}");
        } else {
            buf_appendf(out, "{\"index\":%zu,\"function\":{\"arguments\":", e->index);
            openai_json_string(out, buf_cstr(&e->arguments), e->arguments.len);
            buf_appends(out, "}}");
        }
    }
    buf_appends(out, "]");
    return buf_error(out);
}

/* ---- streaming ---- */

enum ts_mode {
    TS_START,    /* llama3_json: deciding from the first bytes */
    TS_CONTENT,  /* looking for the opening marker (hermes: also between blocks) */
    TS_PASS,     /* everything is content */
    TS_TOOLS,    /* in the tool-call text */
    TS_FALLBACK, /* mistral: holding all until the finish decides */
    TS_DROP,     /* the rest is dropped */
};

enum ts_sub {
    SUB_NONE,
    H_BLOCK, /* hermes: in a block */
    H_SKIP,  /* hermes: in a block that failed after a call went out */
    L_SCAN,  /* llama: looking for the next '{' */
    L_OBJ,   /* llama: in an object */
    V_NAME,  /* mistral name{args}: the name */
    V_ARGS,  /* mistral name{args}: the arguments */
    P_LEAD,  /* mistral array: whitespace before the JSON */
    P_JSON,  /* mistral array: the JSON */
    P_TRAIL, /* mistral array: after it */
};

enum { M_NONE, M_NAME, M_ARGS, M_SKIP };
enum { A_NONE, A_ARGUMENTS, A_PARAMETERS };

/* One call object being read from pj's events. */
struct call_track {
    int depth;         /* the call object's depth */
    int member;        /* what the member being read is (M_*) */
    int name_state;    /* 0 none, 1 reading the first string "name", 2 read */
    int last_name_str; /* the last "name" member is a string */
    int args_which;    /* the key the streamed arguments came from (A_*) */
    int emitted;       /* its first delta went out */
    int ok;            /* the object closed as a valid call */
    size_t index;
    struct buf name;
    struct buf pending; /* arguments written before the name went out */
};

struct tool_stream {
    struct tool_parser cfg;
    struct tool_delta *out; /* during a feed or the finish */
    enum ts_mode mode;
    enum ts_sub sub;
    int finished, error, exact;
    size_t n_calls;
    uint64_t pos;        /* bytes fed */
    struct marker start; /* the opening marker */
    struct marker inner; /* hermes: the end tag; mistral: the next [TOOL_CALLS] */
    struct buf held;     /* the text since the tool calls began, until one goes out */
    int holding;
    struct pj pj;
    int pj_done;
    struct call_track call;
    struct buf scratch;
    uint64_t end_index; /* llama: where the last object ended */
    int have_end;
    struct buf seg; /* mistral name{args}: the name so far */
    unsigned char lead[4];
    int lead_have, lead_need;
    char top; /* mistral array: the top value's kind ('a', 'o', 's') */
};

static int stream_sink(void *ctx, const struct pj_event *ev);

static void track_reset(struct call_track *t, int depth)
{
    buf_reset(&t->name);
    buf_reset(&t->pending);
    struct buf name = t->name, pending = t->pending;
    memset(t, 0, sizeof(*t));
    t->name = name;
    t->pending = pending;
    t->depth = depth;
}

static int ts_content(struct tool_stream *s, const void *b, size_t n)
{
    return n ? buf_append(&s->out->content, b, n) : 0;
}

/* Not tool calls after all, with none streamed: everything held is content from here on. */
static int ts_fail_open(struct tool_stream *s)
{
    int rc = ts_content(s, s->held.data, s->held.len);
    buf_free(&s->held);
    s->holding = 0;
    s->mode = TS_PASS;
    return rc;
}

static void ts_json_reset(struct tool_stream *s, int depth)
{
    pj_reset(&s->pj);
    s->pj_done = 0;
    track_reset(&s->call, depth);
}

static int ts_emit_args(struct tool_stream *s, size_t index, const char *a, size_t n)
{
    return delta_args(s->out, index, a, n);
}

/* The call's first delta: a new index, an id and the name; nothing is held any more. */
static int ts_emit_name(struct tool_stream *s, const char *name, size_t n, size_t *index)
{
    char id[TOOL_CALL_ID_MAX + 1];
    make_id(&s->cfg, id);
    *index = s->n_calls++;
    if (s->holding) {
        buf_free(&s->held);
        s->holding = 0;
    }
    return delta_name(s->out, *index, id, name ? name : "", n);
}

static int track_emit(struct tool_stream *s, struct call_track *t)
{
    int rc = ts_emit_name(s, t->name.data, t->name.len, &t->index);
    t->emitted = 1;
    if (rc == 0 && t->pending.len) {
        rc = ts_emit_args(s, t->index, t->pending.data, t->pending.len);
        buf_reset(&t->pending);
    }
    return rc;
}

/* The name goes out once it is read and the arguments' key has come (else at the close, for
 * mistral, whose arguments are optional): a call cut short earlier stays unsent. */
static int track_maybe_emit(struct tool_stream *s, struct call_track *t)
{
    if (t->emitted || t->name_state != 2 || t->args_which == A_NONE) {
        return 0;
    }
    return track_emit(s, t);
}

static int key_is(const struct pj_event *ev, const char *k)
{
    return ev->n == strlen(k) && memcmp(ev->s, k, ev->n) == 0;
}

static int track_key(struct tool_stream *s, struct call_track *t, const struct pj_event *ev)
{
    t->member = M_SKIP;
    if (key_is(ev, "name")) {
        t->member = M_NAME;
        return 0;
    }
    int which = key_is(ev, "arguments") ? A_ARGUMENTS : A_NONE;
    if (s->cfg.kind == TOOL_PARSER_LLAMA3_JSON && key_is(ev, "parameters")) {
        which = A_PARAMETERS;
    }
    if (which == A_NONE) {
        return 0;
    }
    if (t->args_which == A_NONE) {
        t->args_which = which;
        t->member = M_ARGS;
        return track_maybe_emit(s, t);
    }
    if (which == A_ARGUMENTS && t->args_which == A_PARAMETERS) {
        s->exact = 0; /* vLLM takes "arguments"; "parameters" went out */
    }
    return 0;
}

static int track_name(struct tool_stream *s, struct call_track *t, const struct pj_event *ev)
{
    switch (ev->type) {
    case PJ_STR_BEGIN:
        t->last_name_str = 1;
        if (t->name_state == 0) {
            t->name_state = 1;
        }
        return 0;
    case PJ_STR_PART:
        return t->name_state == 1 ? buf_append(&t->name, ev->s, ev->n) : 0;
    case PJ_STR_END:
        if (t->name_state != 1) {
            return 0;
        }
        t->name_state = 2;
        return track_maybe_emit(s, t);
    case PJ_OBJ_BEGIN:
    case PJ_ARR_BEGIN:
    case PJ_ATOM:
        t->last_name_str = 0;
        return 0;
    default:
        return 0;
    }
}

static int track_args(struct tool_stream *s, struct call_track *t, const struct pj_event *ev)
{
    buf_reset(&s->scratch);
    dumps_event(&s->scratch, ev, t->depth + 1);
    int rc = buf_error(&s->scratch);
    if (rc == 0) {
        rc = t->emitted ? ts_emit_args(s, t->index, s->scratch.data, s->scratch.len)
                        : buf_append(&t->pending, s->scratch.data, s->scratch.len);
    }
    if (ev->depth == t->depth + 1 && (ev->type == PJ_ATOM || ev->type == PJ_STR_END ||
                                      ev->type == PJ_OBJ_END || ev->type == PJ_ARR_END)) {
        t->member = M_NONE;
    }
    return rc;
}

static int track_close(struct tool_stream *s, struct call_track *t)
{
    if (t->name_state != 2 || !t->last_name_str) {
        return -EBADMSG;
    }
    if (t->args_which == A_NONE && s->cfg.kind != TOOL_PARSER_MISTRAL) {
        return -EBADMSG;
    }
    int rc = t->emitted ? 0 : track_emit(s, t);
    if (rc == 0 && t->args_which == A_NONE) {
        rc = ts_emit_args(s, t->index, "{}", 2); /* mistral: tool_call.get("arguments", {}) */
    }
    t->ok = rc == 0;
    return rc;
}

/* One event of the JSON that holds a call object at t->depth. */
static int track_event(struct tool_stream *s, struct call_track *t, const struct pj_event *ev)
{
    if (ev->depth < t->depth) {
        return 0;
    }
    if (ev->depth == t->depth) {
        if (ev->type == PJ_OBJ_BEGIN) {
            return 0;
        }
        return ev->type == PJ_OBJ_END ? track_close(s, t) : -EBADMSG;
    }
    if (ev->depth == t->depth + 1) {
        if (ev->type == PJ_KEY) {
            return track_key(s, t, ev);
        }
        if (t->member == M_NAME) {
            return track_name(s, t, ev);
        }
    }
    return t->member == M_ARGS ? track_args(s, t, ev) : 0;
}

/* Mistral's JSON-array form: the top value must be a list of call objects ([], {} and "" are
 * lists of none to Python's for loop). */
static int mistral_event(struct tool_stream *s, const struct pj_event *ev)
{
    if (ev->depth == 0) {
        switch (ev->type) {
        case PJ_ARR_BEGIN:
            s->top = 'a';
            return 0;
        case PJ_OBJ_BEGIN:
            s->top = 'o';
            return 0;
        case PJ_STR_BEGIN:
            s->top = 's';
            return 0;
        case PJ_STR_PART:
            return ev->n ? -EBADMSG : 0;
        case PJ_ARR_END:
        case PJ_OBJ_END:
        case PJ_STR_END:
            return 0;
        default:
            return -EBADMSG;
        }
    }
    if (s->top != 'a') {
        return -EBADMSG;
    }
    if (ev->depth == 1 && ev->type == PJ_OBJ_BEGIN) {
        track_reset(&s->call, 1);
    }
    return track_event(s, &s->call, ev);
}

static int stream_sink(void *ctx, const struct pj_event *ev)
{
    struct tool_stream *s = ctx;
    if (s->pj.dups) {
        s->exact = 0;
    }
    if (s->cfg.kind == TOOL_PARSER_MISTRAL) {
        return mistral_event(s, ev);
    }
    return track_event(s, &s->call, ev);
}

/* The JSON being read is not a (valid) call: what that means depends on the parser and on
 * whether a call went out already. */
static int ts_json_fail(struct tool_stream *s)
{
    if (s->n_calls == 0) {
        if (s->cfg.kind == TOOL_PARSER_MISTRAL) {
            s->mode = TS_FALLBACK; /* vLLM's regex fallback may still find the calls */
            return 0;
        }
        return ts_fail_open(s);
    }
    if (s->cfg.kind == TOOL_PARSER_HERMES) {
        s->sub = H_SKIP; /* this block is lost; the next may be a call */
        return 0;
    }
    if (s->cfg.kind == TOOL_PARSER_MISTRAL) {
        s->exact = 0; /* the fallback could have found other calls */
    }
    s->mode = TS_DROP;
    return 0;
}

/* Feeds the JSON reader; failures of the JSON become ts_json_fail. *done: PJ_END or
 * PJ_END_BEFORE when the value ended, else 0. */
static int ts_json_byte(struct tool_stream *s, unsigned char c, int *done)
{
    int rc = pj_byte(&s->pj, c);
    *done = rc > 0 ? rc : 0;
    if (is_reject(rc)) {
        rc = pj_salvage(&s->pj);
        return rc ? rc : ts_json_fail(s);
    }
    if (rc < 0) {
        return rc;
    }
    if (*done) {
        s->pj_done = 1;
    }
    return 0;
}

static int ts_json_finish(struct tool_stream *s)
{
    if (s->pj_done) {
        return 0;
    }
    int rc = pj_finish(&s->pj);
    if (is_reject(rc)) {
        rc = pj_salvage(&s->pj);
        return rc ? rc : ts_json_fail(s);
    }
    s->pj_done = rc == 0;
    return rc;
}

/* ---- hermes ---- */

static int hermes_block_byte(struct tool_stream *s, unsigned char c)
{
    if (s->sub == H_SKIP) {
        return 0;
    }
    if (s->pj_done) {
        return JSON_WS(c) ? 0 : ts_json_fail(s); /* json.loads: only whitespace after */
    }
    int done;
    int rc = ts_json_byte(s, c, &done);
    if (rc == 0 && done == PJ_END_BEFORE && !JSON_WS(c)) {
        rc = ts_json_fail(s);
    }
    return rc;
}

static int hermes_block_end(struct tool_stream *s)
{
    int rc = 0;
    if (s->sub == H_BLOCK) {
        rc = ts_json_finish(s);
        if (rc == 0 && s->mode == TS_TOOLS && s->sub == H_BLOCK && !s->call.ok) {
            rc = ts_json_fail(s);
        }
    }
    if (rc == 0 && s->mode == TS_TOOLS) {
        s->mode = TS_CONTENT;
        s->sub = SUB_NONE;
    }
    return rc;
}

static int hermes_byte(struct tool_stream *s, unsigned char c)
{
    char rel[MARKER_MAX];
    size_t nrel;
    int rc = 0;
    if (s->mode == TS_CONTENT) {
        int hit = marker_byte(&s->start, c, rel, &nrel);
        if (s->n_calls == 0) {
            rc = ts_content(s, rel, nrel); /* between blocks, text is dropped */
        }
        if (rc || !hit) {
            return rc;
        }
        if (s->n_calls == 0 && !s->holding) {
            s->holding = 1;
            rc = buf_append(&s->held, HERMES_START, LIT_LEN(HERMES_START));
        }
        s->mode = TS_TOOLS;
        s->sub = H_BLOCK;
        ts_json_reset(s, 0);
        return rc;
    }
    int hit = marker_byte(&s->inner, c, rel, &nrel);
    for (size_t i = 0; i < nrel && rc == 0 && s->mode == TS_TOOLS; i++) {
        rc = hermes_block_byte(s, (unsigned char)rel[i]);
    }
    if (rc == 0 && hit && s->mode == TS_TOOLS) {
        rc = hermes_block_end(s);
    }
    return rc;
}

static int hermes_finish(struct tool_stream *s)
{
    int rc = 0;
    if (s->mode == TS_CONTENT) {
        return s->n_calls ? 0 : ts_content(s, s->start.text, s->start.pend);
    }
    if (s->mode == TS_TOOLS) {
        for (size_t i = 0; i < s->inner.pend && rc == 0 && s->mode == TS_TOOLS; i++) {
            rc = hermes_block_byte(s, (unsigned char)s->inner.text[i]);
        }
        if (rc == 0 && s->mode == TS_TOOLS) {
            rc = hermes_block_end(s);
        }
    }
    return rc;
}

/* ---- llama3_json ---- */

static int llama_tools_byte(struct tool_stream *s, unsigned char c)
{
    uint64_t at = s->pos - 1;
    if (s->sub == L_SCAN) {
        if (c != '{' || (s->have_end && at == s->end_index)) {
            return 0;
        }
        ts_json_reset(s, 0);
        s->sub = L_OBJ;
    }
    int done;
    int rc = ts_json_byte(s, c, &done);
    if (rc == 0 && done && s->mode == TS_TOOLS) {
        s->end_index = at + 1;
        s->have_end = 1;
        s->sub = L_SCAN;
    }
    return rc;
}

static int llama_byte(struct tool_stream *s, unsigned char c)
{
    if (s->mode == TS_START) {
        /* vLLM streams calls only when the text starts with the tag or '{' */
        const size_t tl = LIT_LEN(LLAMA_TAG);
        if (s->held.len == 1 && c == '{') {
            s->mode = TS_TOOLS;
            s->sub = L_SCAN;
            return llama_tools_byte(s, c);
        }
        if (s->held.len <= tl && memcmp(s->held.data, LLAMA_TAG, s->held.len) == 0) {
            if (s->held.len == tl) {
                s->mode = TS_TOOLS;
                s->sub = L_SCAN;
            }
            return 0;
        }
        return ts_fail_open(s);
    }
    return llama_tools_byte(s, c);
}

static int llama_finish(struct tool_stream *s)
{
    if (s->mode == TS_START) {
        return ts_fail_open(s);
    }
    if (s->mode != TS_TOOLS) {
        return 0;
    }
    if (s->sub == L_OBJ) {
        int rc = ts_json_finish(s);
        if (rc || s->mode != TS_TOOLS) {
            return rc;
        }
    }
    return s->n_calls ? 0 : ts_fail_open(s);
}

/* ---- mistral ---- */

static int mistral_v11_name(struct tool_stream *s)
{
    const size_t al = LIT_LEN(MISTRAL_ARGS);
    buf_reset(&s->scratch);
    for (size_t i = 0; i < s->seg.len;) {
        if (s->seg.len - i >= al && memcmp(s->seg.data + i, MISTRAL_ARGS, al) == 0) {
            i += al;
            continue;
        }
        buf_append(&s->scratch, s->seg.data + i, 1);
        i++;
    }
    int rc = buf_error(&s->scratch);
    return rc ? rc : ts_emit_name(s, s->scratch.data, s->scratch.len, &s->call.index);
}

static int mistral_pre_json(struct tool_stream *s, const unsigned char *b, size_t n)
{
    int rc = 0, done = 0;
    s->sub = P_JSON;
    for (size_t i = 0; i < n && rc == 0 && s->mode == TS_TOOLS && s->sub == P_JSON; i++) {
        rc = ts_json_byte(s, b[i], &done);
        if (rc == 0 && done && s->mode == TS_TOOLS) {
            s->sub = P_TRAIL; /* raw_decode: what follows the value is ignored */
        }
    }
    return rc;
}

/* Python strips the text after the marker (any Unicode whitespace) before raw_decode. */
static int mistral_lead_byte(struct tool_stream *s, unsigned char c)
{
    if (s->lead_need == 0) {
        if (c < 0x80) {
            return py_isspace(c) ? 0 : mistral_pre_json(s, &c, 1);
        }
        int need = utf8_lead_len(c);
        if (need == 0) {
            return mistral_pre_json(s, &c, 1);
        }
        s->lead[0] = c;
        s->lead_have = 1;
        s->lead_need = need;
        return 0;
    }
    if (!utf8_next_ok(s->lead, s->lead_have, c)) {
        s->lead[s->lead_have++] = c;
        s->lead_need = 0;
        return mistral_pre_json(s, s->lead, (size_t)s->lead_have);
    }
    s->lead[s->lead_have++] = c;
    if (s->lead_have < s->lead_need) {
        return 0;
    }
    s->lead_need = 0;
    if (py_isspace(tandem_utf8_cp(s->lead, (size_t)s->lead_have))) {
        return 0;
    }
    return mistral_pre_json(s, s->lead, (size_t)s->lead_have);
}

static int mistral_tools_byte(struct tool_stream *s, unsigned char c)
{
    int rc;
    switch (s->sub) {
    case V_NAME:
        if (c != '{') {
            return buf_append(&s->seg, &c, 1);
        }
        rc = mistral_v11_name(s);
        s->sub = V_ARGS;
        return rc ? rc : ts_emit_args(s, s->call.index, "{", 1);
    case V_ARGS:
        return ts_emit_args(s, s->call.index, (const char *)&c, 1);
    case P_LEAD:
        return mistral_lead_byte(s, c);
    case P_JSON:
        return mistral_pre_json(s, &c, 1);
    default:
        return 0;
    }
}

static int mistral_byte(struct tool_stream *s, unsigned char c)
{
    char rel[MARKER_MAX];
    size_t nrel;
    int rc = 0;
    if (s->mode == TS_CONTENT) {
        int hit = marker_byte(&s->start, c, rel, &nrel);
        rc = ts_content(s, rel, nrel);
        if (rc || !hit) {
            return rc;
        }
        s->mode = TS_TOOLS;
        if (s->cfg.mistral_args_token) {
            s->sub = V_NAME; /* cannot fail: nothing to hold */
            return 0;
        }
        s->sub = P_LEAD;
        s->holding = 1;
        ts_json_reset(s, 1);
        return buf_append(&s->held, MISTRAL_BOT, LIT_LEN(MISTRAL_BOT));
    }
    int hit = marker_byte(&s->inner, c, rel, &nrel);
    for (size_t i = 0; i < nrel && rc == 0 && s->mode == TS_TOOLS; i++) {
        rc = mistral_tools_byte(s, (unsigned char)rel[i]);
    }
    if (rc || !hit || s->mode != TS_TOOLS) {
        return rc;
    }
    if (s->sub == V_NAME || s->sub == V_ARGS) {
        s->sub = V_NAME; /* the next call */
        buf_reset(&s->seg);
        return 0;
    }
    return ts_json_fail(s); /* a second marker: not the JSON-array form */
}

/* The finish of the array form when it could not be read as it came: vLLM's whole logic on the
 * held text. */
static int mistral_fallback(struct tool_stream *s)
{
    const size_t bl = LIT_LEN(MISTRAL_BOT);
    struct call_list calls = {0};
    int rc = mistral_pre_calls(s->held.data + bl, s->held.len - bl, &calls);
    if (rc == NOT_TOOL_CALLS) {
        rc = ts_fail_open(s);
    }
    for (size_t i = 0; rc == 0 && i < calls.n; i++) {
        size_t index;
        rc = ts_emit_name(s, calls.v[i].name, calls.v[i].name_len, &index);
        if (rc == 0) {
            rc = ts_emit_args(s, index, calls.v[i].arguments, calls.v[i].arguments_len);
        }
    }
    call_list_free(&calls);
    return rc;
}

static int mistral_finish(struct tool_stream *s)
{
    int rc = 0;
    if (s->mode == TS_CONTENT) {
        return ts_content(s, s->start.text, s->start.pend);
    }
    if (s->mode == TS_TOOLS) {
        for (size_t i = 0; i < s->inner.pend && rc == 0 && s->mode == TS_TOOLS; i++) {
            rc = mistral_tools_byte(s, (unsigned char)s->inner.text[i]);
        }
        if (rc == 0 && s->mode == TS_TOOLS && s->sub == P_LEAD) {
            rc = ts_json_fail(s); /* nothing after the marker */
        } else if (rc == 0 && s->mode == TS_TOOLS && s->sub == P_JSON) {
            rc = ts_json_finish(s);
        }
    }
    if (rc == 0 && s->mode == TS_FALLBACK) {
        rc = mistral_fallback(s);
    }
    return rc;
}

/* ---- the stream API ---- */

int tool_stream_new(const struct tool_parser *p, struct tool_stream **out)
{
    if (!p || !out) {
        return -EINVAL;
    }
    struct tool_stream *s = calloc(1, sizeof(*s));
    if (!s) {
        return -ENOMEM;
    }
    s->cfg = *p;
    s->exact = 1;
    buf_init(&s->held, TOOL_TEXT_MAX);
    buf_init(&s->scratch, TOOL_TEXT_MAX);
    buf_init(&s->seg, TOOL_TEXT_MAX);
    buf_init(&s->call.name, TOOL_TEXT_MAX);
    buf_init(&s->call.pending, TOOL_TEXT_MAX);
    pj_init(&s->pj, stream_sink, s, 1);
    s->mode = TS_CONTENT;
    switch (p->kind) {
    case TOOL_PARSER_HERMES:
        marker_init(&s->start, HERMES_START);
        marker_init(&s->inner, HERMES_END);
        break;
    case TOOL_PARSER_LLAMA3_JSON:
        s->mode = TS_START;
        s->holding = 1;
        break;
    case TOOL_PARSER_MISTRAL:
        marker_init(&s->start, MISTRAL_BOT);
        marker_init(&s->inner, MISTRAL_BOT);
        break;
    default:
        s->mode = TS_PASS;
        break;
    }
    *out = s;
    return 0;
}

void tool_stream_free(struct tool_stream *s)
{
    if (!s) {
        return;
    }
    pj_deinit(&s->pj);
    buf_free(&s->held);
    buf_free(&s->scratch);
    buf_free(&s->seg);
    buf_free(&s->call.name);
    buf_free(&s->call.pending);
    free(s);
}

static int ts_byte(struct tool_stream *s, unsigned char c)
{
    s->pos++;
    if (s->holding) {
        int rc = buf_append(&s->held, &c, 1);
        if (rc) {
            return rc;
        }
    }
    switch (s->mode) {
    case TS_PASS:
        return ts_content(s, &c, 1);
    case TS_DROP:
    case TS_FALLBACK:
        return 0;
    default:
        break;
    }
    switch (s->cfg.kind) {
    case TOOL_PARSER_HERMES:
        return hermes_byte(s, c);
    case TOOL_PARSER_LLAMA3_JSON:
        return llama_byte(s, c);
    case TOOL_PARSER_MISTRAL:
        return mistral_byte(s, c);
    default:
        return ts_content(s, &c, 1);
    }
}

/* At the end of a delta: the string bytes read so far go out as argument text. */
static int ts_flush(struct tool_stream *s)
{
    int reading = s->mode == TS_TOOLS && !s->pj_done &&
                  (s->sub == H_BLOCK || s->sub == L_OBJ || s->sub == P_JSON);
    if (!reading) {
        return 0;
    }
    int rc = pj_flush(&s->pj);
    return is_reject(rc) ? ts_json_fail(s) : rc;
}

int tool_stream_feed(struct tool_stream *s, const char *text, size_t len, struct tool_delta *d)
{
    if (s->error) {
        return s->error;
    }
    if (s->finished || !d || (!text && len)) {
        return -EINVAL;
    }
    s->out = d;
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0; i++) {
        if (s->mode == TS_PASS && !s->holding) {
            s->pos += len - i;
            rc = ts_content(s, text + i, len - i);
            break;
        }
        rc = ts_byte(s, (unsigned char)text[i]);
    }
    if (rc == 0) {
        rc = ts_flush(s);
    }
    s->out = NULL;
    if (rc < 0) {
        s->error = rc;
    }
    return rc < 0 ? rc : 0;
}

int tool_stream_finish(struct tool_stream *s, struct tool_delta *d)
{
    if (s->error) {
        return s->error;
    }
    if (s->finished || !d) {
        return -EINVAL;
    }
    s->finished = 1;
    s->out = d;
    int rc = 0;
    switch (s->cfg.kind) {
    case TOOL_PARSER_HERMES:
        rc = hermes_finish(s);
        break;
    case TOOL_PARSER_LLAMA3_JSON:
        rc = llama_finish(s);
        break;
    case TOOL_PARSER_MISTRAL:
        rc = mistral_finish(s);
        break;
    default:
        break;
    }
    s->out = NULL;
    if (rc < 0) {
        s->error = rc;
    }
    return rc < 0 ? rc : 0;
}

size_t tool_stream_calls(const struct tool_stream *s)
{
    return s->n_calls;
}

int tool_stream_exact(const struct tool_stream *s)
{
    return s->exact;
}
