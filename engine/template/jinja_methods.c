/*
 * What a template can call: the methods of strings and dicts (`s.strip()`, `d.items()`) and the
 * global functions (`range(3)`, `raise_exception(msg)`), as sorted name tables after git's
 * commands[] (git.c): one entry per name, holding the small function that implements it, found
 * by binary search. The tables are the one list of what exists; a name not in them is an error
 * ("string has no method 'x'"). The string helpers behind the methods (Python's case mapping,
 * split, replace) live here too; the case mapping and join also serve the filters.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/template/jinja_internal.h"
#include "lib/err.h"

/* ---- string helpers ------------------------------------------------------------------------- */

/* Simple (one-to-one) case mapping of Latin-1, Latin Extended-A, Greek and Cyrillic, as
 * Python's str.lower/str.upper do there; other scripts are left unchanged. */
static unsigned long cp_lower(unsigned long c)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
        (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x410 && c <= 0x42F)) {
        return c + 32;
    }
    if ((c >= 0x100 && c <= 0x137 && c != 0x130 && c % 2 == 0) ||
        (c >= 0x139 && c <= 0x148 && c % 2 == 1) || (c >= 0x14A && c <= 0x177 && c % 2 == 0) ||
        (c >= 0x179 && c <= 0x17E && c % 2 == 1)) {
        return c + 1;
    }
    if (c >= 0x400 && c <= 0x40F) {
        return c + 80;
    }
    switch (c) {
    case 0x178:
        return 0xFF;
    case 0x386:
        return 0x3AC;
    case 0x388:
    case 0x389:
    case 0x38A:
        return c + 37;
    case 0x38C:
        return 0x3CC;
    case 0x38E:
    case 0x38F:
        return c + 63;
    default:
        return c;
    }
}

static unsigned long cp_upper(unsigned long c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) ||
        (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) || (c >= 0x430 && c <= 0x44F)) {
        return c - 32;
    }
    if ((c >= 0x101 && c <= 0x137 && c != 0x131 && c % 2 == 1) ||
        (c >= 0x13A && c <= 0x148 && c % 2 == 0) || (c >= 0x14B && c <= 0x177 && c % 2 == 1) ||
        (c >= 0x17A && c <= 0x17E && c % 2 == 0)) {
        return c - 1;
    }
    if (c >= 0x450 && c <= 0x45F) {
        return c - 80;
    }
    switch (c) {
    case 0xB5:
        return 0x39C;
    case 0xFF:
        return 0x178;
    case 0x131:
        return 'I';
    case 0x17F:
        return 'S';
    case 0x3C2:
        return 0x3A3;
    case 0x3AC:
        return 0x386;
    case 0x3AD:
    case 0x3AE:
    case 0x3AF:
        return c - 37;
    case 0x3CC:
        return 0x38C;
    case 0x3CD:
    case 0x3CE:
        return c - 63;
    default:
        return c;
    }
}

static bool cp_cased(unsigned long c)
{
    return cp_lower(c) != c || cp_upper(c) != c || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' str.title, 'T' Jinja's title filter */
int jinja__case_map(struct rs *rs, const struct jnode *at, const struct jv *v, char mode,
                    struct jv *out)
{
    struct jv sv = {0};
    int rc = jinja__to_str(rs, at, v, &sv);
    if (rc) {
        return rc;
    }
    size_t n;
    const char *s = jv_str(&sv, &n);
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    bool word_start = true;
    for (size_t i = 0; !rc && i < n;) {
        size_t l = tandem_utf8_seq_len((const unsigned char *)s + i, n - i);
        if (l == 0) { /* invalid byte: copied, and ends a word */
            rc = jinja__buf_add(rs, at, &b, s + i, 1);
            word_start = mode == 't';
            i++;
            continue;
        }
        unsigned long c = jinja__u8_decode((const unsigned char *)s + i, l), m;
        switch (mode) {
        case 'u':
            m = cp_upper(c);
            break;
        case 'l':
            m = cp_lower(c);
            break;
        case 'c':
            m = i == 0 ? cp_upper(c) : cp_lower(c);
            break;
        case 't':
            m = word_start ? cp_upper(c) : cp_lower(c);
            word_start = !cp_cased(c);
            break;
        default: /* 'T': words start after whitespace, '-', '(', '{', '[' or '<' */
            m = word_start ? cp_upper(c) : cp_lower(c);
            word_start = c < 0x80 && c != 0 && strchr(" \t\n\r\v\f-({[<", (int)c) != NULL;
            break;
        }
        char enc[4];
        if (mode == 'u' && c == 0xDF) { /* the two length-changing mappings Python applies */
            rc = jinja__buf_adds(rs, at, &b, "SS");
        } else if (mode == 'l' && c == 0x130) {
            rc = jinja__buf_adds(rs, at, &b, "i\xCC\x87");
        } else {
            rc = jinja__buf_add(rs, at, &b, enc, tandem_utf8_put(enc, m));
        }
        i += l;
    }
    jv_put(&sv);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

static int str_replace(struct rs *rs, const struct jnode *at, const char *s, size_t n,
                       const char *from, size_t fn, const char *to, size_t tn, int64_t count,
                       struct jv *out)
{
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    int rc = 0;
    int64_t done = 0;
    size_t i = 0;
    if (fn == 0) { /* Python inserts `to` between characters */
        while (!rc && (count < 0 || done < count) && i <= n) {
            rc = jinja__buf_add(rs, at, &b, to, tn);
            done++;
            if (!rc && i < n) {
                size_t l = jinja__u8_len((const unsigned char *)s, n, i);
                rc = jinja__buf_add(rs, at, &b, s + i, l);
                i += l;
            } else {
                i++;
            }
        }
        if (!rc && i < n) {
            rc = jinja__buf_add(rs, at, &b, s + i, n - i);
        }
    } else {
        while (!rc && i < n) {
            const char *hit = (count < 0 || done < count) ? memmem(s + i, n - i, from, fn) : NULL;
            if (!hit) {
                rc = jinja__buf_add(rs, at, &b, s + i, n - i);
                break;
            }
            size_t k = (size_t)(hit - s);
            rc = jinja__buf_add(rs, at, &b, s + i, k - i);
            if (!rc) {
                rc = jinja__buf_add(rs, at, &b, to, tn);
            }
            done++;
            i = k + fn;
        }
    }
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

static int push_str(struct rs *rs, struct json_object *arr, const char *s, size_t n)
{
    struct json_object *e = json_object_new_string_len(s, (int)n);
    if (!e || json_object_array_add(arr, e) != 0) {
        json_object_put(e);
        return jinja__oom(rs);
    }
    return 0;
}

/* Python str.split(sep=None, maxsplit=-1). */
static int str_split(struct rs *rs, const struct jnode *at, const char *s, size_t n,
                     const char *sep, size_t sn, int64_t maxsplit, struct jv *out)
{
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        return jinja__oom(rs);
    }
    int rc = 0;
    int64_t splits = 0;
    if (sep && sn == 0) {
        json_object_put(arr);
        return jinja__fail(rs, at, -EINVAL, "split: empty separator");
    }
    size_t i = 0;
    if (sep) {
        for (;;) {
            const char *hit =
                (maxsplit < 0 || splits < maxsplit) ? memmem(s + i, n - i, sep, sn) : NULL;
            size_t end = hit ? (size_t)(hit - s) : n;
            rc = push_str(rs, arr, s + i, end - i);
            if (rc || !hit) {
                break;
            }
            splits++;
            i = end + sn;
        }
    } else {
        for (;;) {
            while (i < n) {
                size_t l = jinja__u8_len((const unsigned char *)s, n, i);
                if (!jinja__isspace(jinja__u8_decode((const unsigned char *)s + i, l))) {
                    break;
                }
                i += l;
            }
            if (i >= n) {
                break;
            }
            if (maxsplit >= 0 && splits >= maxsplit) {
                size_t a, e;
                jinja__strip_range(s + i, n - i, NULL, 0, false, true, &a, &e);
                rc = push_str(rs, arr, s + i, e);
                break;
            }
            size_t start = i;
            while (i < n) {
                size_t l = jinja__u8_len((const unsigned char *)s, n, i);
                if (jinja__isspace(jinja__u8_decode((const unsigned char *)s + i, l))) {
                    break;
                }
                i += l;
            }
            rc = push_str(rs, arr, s + start, i - start);
            if (rc) {
                break;
            }
            splits++;
        }
    }
    if (!rc) {
        rc = jinja__count_iterations(rs, at, json_object_array_length(arr));
    }
    if (rc) {
        json_object_put(arr);
        return rc;
    }
    *out = jv_own(arr);
    return 0;
}

/* `prefix` is a string or a tuple/list of strings. */
static int str_affix(struct rs *rs, const struct jnode *at, const char *s, size_t n,
                     const struct jv *affix, bool suffix, bool *out)
{
    *out = false;
    if (affix && jv_type(affix) == VT_LIST) {
        size_t m = json_object_array_length(affix->j);
        for (size_t i = 0; i < m && !*out; i++) {
            struct jv e = jv_own(json_object_array_get_idx(affix->j, i));
            int rc = str_affix(rs, at, s, n, &e, suffix, out);
            if (rc) {
                return rc;
            }
        }
        return 0;
    }
    const char *p;
    size_t pn;
    int rc = jinja__want_str(rs, at, affix, suffix ? "endswith argument" : "startswith argument",
                             &p, &pn);
    if (rc) {
        return rc;
    }
    *out = pn <= n && memcmp(suffix ? s + n - pn : s, p, pn) == 0;
    return 0;
}

int jinja__join_values(struct rs *rs, const struct jnode *at, struct json_object *items,
                       const char *sep, size_t sn, const char *attr, struct jv *out)
{
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    size_t n = json_object_array_length(items);
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        if (i) {
            rc = jinja__buf_add(rs, at, &b, sep, sn);
        }
        struct jv e = jv_own(json_object_array_get_idx(items, i));
        struct jv m = {0};
        if (!rc && attr) {
            rc = jinja__get_member(rs, at, &e, attr, &m);
            if (!rc) {
                rc = jinja__append_str(rs, at, &m, &b);
            }
            jv_put(&m);
        } else if (!rc) {
            rc = jinja__append_str(rs, at, &e, &b);
        }
    }
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

/* ---- string methods ------------------------------------------------------------------------- */

/* Each method gets its object (a string for these, a dict or namespace for the dict methods) and
 * the arguments; it sets *out (owned) and returns 0, or returns an error. */

/* strip, lstrip, rstrip (chars=None) */
static int str_strip(struct rs *rs, const struct jnode *at, const struct jv *obj,
                     const struct args *a, bool left, bool right, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    const struct jv *a0 = jinja__arg(a, 0, NULL);
    const char *chars = NULL;
    size_t cn = 0;
    if (a0 && jv_type(a0) != VT_NONE) {
        int rc = jinja__want_str(rs, at, a0, "strip argument", &chars, &cn);
        if (rc) {
            return rc;
        }
    }
    size_t lo, hi;
    jinja__strip_range(s, n, chars, cn, left, right, &lo, &hi);
    return jinja__new_str(rs, at, s + lo, hi - lo, out);
}

static int method_strip(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, struct jv *out)
{
    return str_strip(rs, at, obj, a, true, true, out);
}

static int method_lstrip(struct rs *rs, const struct jnode *at, const struct jv *obj,
                         const struct args *a, struct jv *out)
{
    return str_strip(rs, at, obj, a, true, false, out);
}

static int method_rstrip(struct rs *rs, const struct jnode *at, const struct jv *obj,
                         const struct args *a, struct jv *out)
{
    return str_strip(rs, at, obj, a, false, true, out);
}

static int method_startswith(struct rs *rs, const struct jnode *at, const struct jv *obj,
                             const struct args *a, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    bool r;
    int rc = str_affix(rs, at, s, n, jinja__arg(a, 0, NULL), false, &r);
    return rc ? rc : jinja__new_bool(rs, r, out);
}

static int method_endswith(struct rs *rs, const struct jnode *at, const struct jv *obj,
                           const struct args *a, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    bool r;
    int rc = str_affix(rs, at, s, n, jinja__arg(a, 0, NULL), true, &r);
    return rc ? rc : jinja__new_bool(rs, r, out);
}

static const char *last_hit(const char *s, size_t n, const char *sub, size_t sn);

/* The start of the character that ends at byte i of s (i > 0). */
static size_t char_before(const char *s, size_t i)
{
    size_t k = i - 1;
    while (k > 0 && i - k < 4 && ((unsigned char)s[k] & 0xC0) == 0x80) {
        k--;
    }
    return jinja__u8_len((const unsigned char *)s, i, k) == i - k ? k : i - 1;
}

static bool space_before(const char *s, size_t i, size_t *start)
{
    *start = char_before(s, i);
    return jinja__isspace(jinja__u8_decode((const unsigned char *)s + *start, i - *start));
}

/* Python str.rsplit(sep, maxsplit) with maxsplit >= 0: splits from the right. */
static int str_rsplit(struct rs *rs, const struct jnode *at, const char *s, size_t n,
                      const char *sep, size_t sn, int64_t maxsplit, struct jv *out)
{
    if (sep && sn == 0) {
        return jinja__fail(rs, at, -EINVAL, "split: empty separator");
    }
    struct json_object *rev = json_object_new_array(); /* pieces, rightmost first */
    if (!rev) {
        return jinja__oom(rs);
    }
    int rc = 0;
    size_t end = n, k;
    for (int64_t splits = 0; !rc; splits++) {
        if (!sep) { /* skip trailing whitespace, then take a word */
            while (end > 0 && space_before(s, end, &k)) {
                end = k;
            }
            if (end == 0) {
                break;
            }
            if (splits >= maxsplit) {
                rc = push_str(rs, rev, s, end);
                break;
            }
            size_t start = end;
            while (start > 0 && !space_before(s, start, &k)) {
                start = k;
            }
            rc = push_str(rs, rev, s + start, end - start);
            end = start;
            continue;
        }
        const char *hit = splits < maxsplit ? last_hit(s, end, sep, sn) : NULL;
        if (!hit) {
            rc = push_str(rs, rev, s, end);
            break;
        }
        size_t h = (size_t)(hit - s);
        rc = push_str(rs, rev, s + h + sn, end - h - sn);
        end = h;
    }
    struct json_object *arr = rc ? NULL : json_object_new_array();
    size_t m = json_object_array_length(rev);
    if (!rc && !arr) {
        rc = jinja__oom(rs);
    }
    for (size_t i = m; !rc && i-- > 0;) {
        struct json_object *e = json_object_array_get_idx(rev, i);
        if (json_object_array_add(arr, json_object_get(e)) != 0) {
            json_object_put(e);
            rc = jinja__oom(rs);
        }
    }
    json_object_put(rev);
    if (!rc) {
        rc = jinja__count_iterations(rs, at, m);
    }
    if (rc) {
        json_object_put(arr);
        return rc;
    }
    *out = jv_own(arr);
    return 0;
}

/* split(sep=None, maxsplit=-1) and rsplit. */
static int split_method(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, bool from_right, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    const char *sep = NULL;
    size_t sn = 0;
    int64_t maxsplit = -1;
    const struct jv *sv = jinja__arg(a, 0, "sep"), *mv = jinja__arg(a, 1, "maxsplit");
    if (sv && jv_type(sv) != VT_NONE) {
        int rc = jinja__want_str(rs, at, sv, "split separator", &sep, &sn);
        if (rc) {
            return rc;
        }
    }
    if (mv) {
        int rc = jinja__want_int(rs, at, mv, "maxsplit", &maxsplit);
        if (rc) {
            return rc;
        }
    }
    if (from_right && maxsplit >= 0) {
        return str_rsplit(rs, at, s, n, sep, sn, maxsplit, out);
    }
    return str_split(rs, at, s, n, sep, sn, maxsplit, out);
}

static int method_split(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, struct jv *out)
{
    return split_method(rs, at, obj, a, false, out);
}

static int method_rsplit(struct rs *rs, const struct jnode *at, const struct jv *obj,
                         const struct args *a, struct jv *out)
{
    return split_method(rs, at, obj, a, true, out);
}

/* splitlines(keepends=False): Python's line boundaries (\n, \r, \r\n, \v, \f, \x1c-\x1e,
 * \x85, U+2028, U+2029). */
static int method_splitlines(struct rs *rs, const struct jnode *at, const struct jv *obj,
                             const struct args *a, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    const struct jv *kv = jinja__arg(a, 0, "keepends");
    bool keep = kv && jv_truthy(kv);
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        return jinja__oom(rs);
    }
    int rc = 0;
    size_t start = 0;
    for (size_t i = 0; !rc && i < n;) {
        size_t l = jinja__u8_len((const unsigned char *)s, n, i);
        unsigned long c = jinja__u8_decode((const unsigned char *)s + i, l);
        bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                   (c == 0x85 && l == 2) || c == 0x2028 || c == 0x2029;
        if (!brk) {
            i += l;
            continue;
        }
        size_t eol = i + l;
        if (c == '\r' && eol < n && s[eol] == '\n') {
            eol++;
        }
        rc = push_str(rs, arr, s + start, (keep ? eol : i) - start);
        start = i = eol;
    }
    if (!rc && start < n) {
        rc = push_str(rs, arr, s + start, n - start);
    }
    if (!rc) {
        rc = jinja__count_iterations(rs, at, json_object_array_length(arr));
    }
    if (rc) {
        json_object_put(arr);
        return rc;
    }
    *out = jv_own(arr);
    return 0;
}

static int method_upper(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, struct jv *out)
{
    (void)a;
    return jinja__case_map(rs, at, obj, 'u', out);
}

static int method_lower(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, struct jv *out)
{
    (void)a;
    return jinja__case_map(rs, at, obj, 'l', out);
}

static int method_title(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, struct jv *out)
{
    (void)a;
    return jinja__case_map(rs, at, obj, 't', out);
}

static int method_capitalize(struct rs *rs, const struct jnode *at, const struct jv *obj,
                             const struct args *a, struct jv *out)
{
    (void)a;
    return jinja__case_map(rs, at, obj, 'c', out);
}

/* replace(old, new, count=-1) */
static int method_replace(struct rs *rs, const struct jnode *at, const struct jv *obj,
                          const struct args *a, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    const char *from = NULL, *to = NULL;
    size_t fn = 0, tn = 0;
    int64_t count = -1;
    int rc = jinja__want_str(rs, at, jinja__arg(a, 0, NULL), "replace argument", &from, &fn);
    if (!rc) {
        rc = jinja__want_str(rs, at, jinja__arg(a, 1, NULL), "replace argument", &to, &tn);
    }
    if (!rc && jinja__arg(a, 2, "count")) {
        rc = jinja__want_int(rs, at, jinja__arg(a, 2, "count"), "replace count", &count);
    }
    return rc ? rc : str_replace(rs, at, s, n, from, fn, to, tn, count, out);
}

/* count(sub): non-overlapping occurrences (characters + 1 for ""). */
static int method_count(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, struct jv *out)
{
    size_t n, sn;
    const char *s = jv_str(obj, &n), *sub;
    int rc = jinja__want_str(rs, at, jinja__arg(a, 0, NULL), "argument", &sub, &sn);
    if (rc) {
        return rc;
    }
    int64_t c = 0;
    if (sn == 0) {
        c = (int64_t)jinja__u8_count(s, n) + 1;
    } else {
        for (const char *h = s; (h = memmem(h, n - (size_t)(h - s), sub, sn)); h += sn) {
            c++;
        }
    }
    return jinja__new_int(rs, c, out);
}

/* sep.join(iterable) */
static int method_join(struct rs *rs, const struct jnode *at, const struct jv *obj,
                       const struct args *a, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    const struct jv *a0 = jinja__arg(a, 0, NULL);
    struct json_object *items = NULL;
    if (!a0) {
        return jinja__fail(rs, at, -EINVAL, "join needs an argument");
    }
    int rc = jinja__iter_items(rs, at, a0, &items);
    if (rc) {
        return rc;
    }
    rc = jinja__join_values(rs, at, items, s, n, NULL, out);
    json_object_put(items);
    return rc;
}

/* ---- more str methods: predicates, padding, searching, affixes ---------------------------- */

/* Python's str.isalpha etc., approximated: letters are the cased letters of the case tables,
 * any ASCII letter, and the CJK, kana and Hangul blocks; digits are ASCII digits. */
static bool cp_alpha(unsigned long c)
{
    return (c < 0x80 && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) || (c >= 0x80 && cp_cased(c)) ||
           (c >= 0x3040 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x9FFF) ||
           (c >= 0xAC00 && c <= 0xD7A3);
}

static bool cp_digit(unsigned long c)
{
    return c >= '0' && c <= '9';
}

/* kind: 'd' isdigit/isdecimal/isnumeric, 'a' isalpha, 'n' isalnum, 's' isspace, 'u' isupper,
 * 'l' islower. */
static int str_is(struct rs *rs, const struct jv *obj, char kind, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    bool all = n > 0, cased = false;
    for (size_t i = 0; i < n && all;) {
        size_t l = jinja__u8_len((const unsigned char *)s, n, i);
        unsigned long c = jinja__u8_decode((const unsigned char *)s + i, l);
        i += l;
        switch (kind) {
        case 'd':
            all = cp_digit(c);
            break;
        case 'a':
            all = cp_alpha(c);
            break;
        case 'n':
            all = cp_alpha(c) || cp_digit(c);
            break;
        case 's':
            all = jinja__isspace(c);
            break;
        default: /* upper / lower: no cased character of the other case, at least one cased */
            if (cp_lower(c) != c || cp_upper(c) != c) {
                bool upper = cp_lower(c) != c;
                all = (kind == 'u') == upper;
                cased = true;
            }
            break;
        }
    }
    return jinja__new_bool(rs, all && (kind != 'u' && kind != 'l' ? true : cased), out);
}

#define STR_IS(fn, kind)                                                                           \
    static int fn(struct rs *rs, const struct jnode *at, const struct jv *obj,                     \
                  const struct args *a, struct jv *out)                                            \
    {                                                                                              \
        (void)at, (void)a;                                                                         \
        return str_is(rs, obj, kind, out);                                                         \
    }
STR_IS(method_isdigit, 'd')
STR_IS(method_isalpha, 'a')
STR_IS(method_isalnum, 'n')
STR_IS(method_isspace, 's')
STR_IS(method_isupper, 'u')
STR_IS(method_islower, 'l')

/* center/ljust/rjust(width, fillchar=' ') and zfill(width); widths count code points. */
static int str_pad(struct rs *rs, const struct jnode *at, const struct jv *obj,
                   const struct args *a, char how, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    int64_t width = 0;
    int rc = jinja__want_int(rs, at, jinja__arg(a, 0, "width"), "width", &width);
    if (rc) {
        return rc;
    }
    const char *fill = how == 'z' ? "0" : " ";
    size_t fn = 1;
    const struct jv *fv = how == 'z' ? NULL : jinja__arg(a, 1, "fillchar");
    if (fv) {
        rc = jinja__want_str(rs, at, fv, "fillchar", &fill, &fn);
        if (rc) {
            return rc;
        }
        if (fn == 0 || jinja__u8_len((const unsigned char *)fill, fn, 0) != fn) {
            return jinja__fail(rs, at, -EINVAL, "the fill character must be one character");
        }
    }
    size_t chars = jinja__u8_count(s, n);
    if (width <= (int64_t)chars) {
        *out = jv_copy(obj);
        return 0;
    }
    if ((uint64_t)width > rs->lim.max_output) {
        return jinja__fail(rs, at, -E2BIG, "padding exceeds the output limit");
    }
    size_t pad = (size_t)width - chars, left = 0;
    if (how == 'r' || how == 'z') {
        left = pad;
    } else if (how == 'c') { /* Python: the extra space goes left when the width is odd */
        left = pad / 2 + (pad & (size_t)width & 1);
    }
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    size_t skip = 0;
    if (how == 'z' && n > 0 && (s[0] == '+' || s[0] == '-')) { /* the sign stays in front */
        rc = jinja__buf_add(rs, at, &b, s, 1);
        skip = 1;
    }
    for (size_t k = 0; !rc && k < left; k++) {
        rc = jinja__buf_add(rs, at, &b, fill, fn);
    }
    if (!rc) {
        rc = jinja__buf_add(rs, at, &b, s + skip, n - skip);
    }
    for (size_t k = left; !rc && k < pad; k++) {
        rc = jinja__buf_add(rs, at, &b, fill, fn);
    }
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

#define STR_PAD(fn, how)                                                                           \
    static int fn(struct rs *rs, const struct jnode *at, const struct jv *obj,                     \
                  const struct args *a, struct jv *out)                                            \
    {                                                                                              \
        return str_pad(rs, at, obj, a, how, out);                                                  \
    }
STR_PAD(method_center, 'c')
STR_PAD(method_ljust, 'l')
STR_PAD(method_rjust, 'r')
STR_PAD(method_zfill, 'z')

/* The byte offset of the last occurrence of sub in s (sub non-empty), or NULL. */
static const char *last_hit(const char *s, size_t n, const char *sub, size_t sn)
{
    if (sn == 0) {
        return s + n;
    }
    for (size_t i = n >= sn ? n - sn + 1 : 0; i-- > 0;) {
        if (memcmp(s + i, sub, sn) == 0) {
            return s + i;
        }
    }
    return NULL;
}

/* find/rfind/index/rindex(sub): the code-point index, -1 (find) or an error (index). */
static int str_search(struct rs *rs, const struct jnode *at, const struct jv *obj,
                      const struct args *a, bool right, bool must, struct jv *out)
{
    size_t n, sn;
    const char *s = jv_str(obj, &n), *sub;
    int rc = jinja__want_str(rs, at, jinja__arg(a, 0, NULL), "argument", &sub, &sn);
    if (rc) {
        return rc;
    }
    const char *hit = right ? last_hit(s, n, sub, sn) : sn == 0 ? s : memmem(s, n, sub, sn);
    if (!hit && must) {
        return jinja__fail(rs, at, -EINVAL, "substring not found");
    }
    return jinja__new_int(rs, hit ? (int64_t)jinja__u8_count(s, (size_t)(hit - s)) : -1, out);
}

static int method_find(struct rs *rs, const struct jnode *at, const struct jv *obj,
                       const struct args *a, struct jv *out)
{
    return str_search(rs, at, obj, a, false, false, out);
}

static int method_rfind(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, struct jv *out)
{
    return str_search(rs, at, obj, a, true, false, out);
}

static int method_index(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, struct jv *out)
{
    return str_search(rs, at, obj, a, false, true, out);
}

static int method_rindex(struct rs *rs, const struct jnode *at, const struct jv *obj,
                         const struct args *a, struct jv *out)
{
    return str_search(rs, at, obj, a, true, true, out);
}

/* partition/rpartition(sep): a 3-tuple. */
static int str_partition(struct rs *rs, const struct jnode *at, const struct jv *obj,
                         const struct args *a, bool right, struct jv *out)
{
    size_t n, sn;
    const char *s = jv_str(obj, &n), *sep;
    int rc = jinja__want_str(rs, at, jinja__arg(a, 0, NULL), "separator", &sep, &sn);
    if (rc) {
        return rc;
    }
    if (sn == 0) {
        return jinja__fail(rs, at, -EINVAL, "empty separator");
    }
    const char *hit = right ? last_hit(s, n, sep, sn) : memmem(s, n, sep, sn);
    struct json_object *t = json_object_new_array();
    if (!t) {
        return jinja__oom(rs);
    }
    size_t h = hit ? (size_t)(hit - s) : (right ? 0 : n);
    rc = push_str(rs, t, s, hit ? h : (right ? 0 : n));
    if (!rc) {
        rc = push_str(rs, t, sep, hit ? sn : 0);
    }
    if (!rc) {
        rc = hit ? push_str(rs, t, s + h + sn, n - h - sn) : push_str(rs, t, s, right ? n : 0);
    }
    if (rc) {
        json_object_put(t);
        return rc;
    }
    jinja__mark_tuple(t);
    *out = jv_own(t);
    return 0;
}

static int method_partition(struct rs *rs, const struct jnode *at, const struct jv *obj,
                            const struct args *a, struct jv *out)
{
    return str_partition(rs, at, obj, a, false, out);
}

static int method_rpartition(struct rs *rs, const struct jnode *at, const struct jv *obj,
                             const struct args *a, struct jv *out)
{
    return str_partition(rs, at, obj, a, true, out);
}

/* removeprefix/removesuffix(affix) */
static int str_remove_affix(struct rs *rs, const struct jnode *at, const struct jv *obj,
                            const struct args *a, bool suffix, struct jv *out)
{
    size_t n, fn;
    const char *s = jv_str(obj, &n), *affix;
    int rc = jinja__want_str(rs, at, jinja__arg(a, 0, NULL), "argument", &affix, &fn);
    if (rc) {
        return rc;
    }
    if (fn > n || memcmp(suffix ? s + n - fn : s, affix, fn) != 0) {
        *out = jv_copy(obj);
        return 0;
    }
    return jinja__new_str(rs, at, suffix ? s : s + fn, n - fn, out);
}

static int method_removeprefix(struct rs *rs, const struct jnode *at, const struct jv *obj,
                               const struct args *a, struct jv *out)
{
    return str_remove_affix(rs, at, obj, a, false, out);
}

static int method_removesuffix(struct rs *rs, const struct jnode *at, const struct jv *obj,
                               const struct args *a, struct jv *out)
{
    return str_remove_affix(rs, at, obj, a, true, out);
}

/* swapcase(), with the case tables of upper/lower */
static int method_swapcase(struct rs *rs, const struct jnode *at, const struct jv *obj,
                           const struct args *a, struct jv *out)
{
    (void)a;
    size_t n;
    const char *s = jv_str(obj, &n);
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    int rc = 0;
    for (size_t i = 0; !rc && i < n;) {
        size_t l = jinja__u8_len((const unsigned char *)s, n, i);
        unsigned long c = jinja__u8_decode((const unsigned char *)s + i, l);
        unsigned long m = cp_lower(c) != c ? cp_lower(c) : cp_upper(c);
        if (m == c || (l == 1 && c >= 0x80)) { /* unchanged, or an invalid byte */
            rc = jinja__buf_add(rs, at, &b, s + i, l);
        } else {
            char u[4];
            rc = jinja__buf_add(rs, at, &b, u, tandem_utf8_put(u, m));
        }
        i += l;
    }
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

/* ---- str.format ----------------------------------------------------------------------------- */

/* The parts of a format spec [[fill]align][sign][#][0][width][,|_][.precision][type]. */
struct fmt_spec {
    char fill[5]; /* one UTF-8 character */
    char align;   /* < > ^ = or 0 (the type's default) */
    char sign;    /* + - space */
    bool alt, zero;
    int64_t width, prec; /* prec -1: none */
    char group;          /* , _ or 0 */
    char type;           /* 0 when absent */
};

static int parse_spec(struct rs *rs, const struct jnode *at, const char *s, size_t n,
                      struct fmt_spec *sp)
{
    memset(sp, 0, sizeof(*sp));
    strcpy(sp->fill, " ");
    sp->sign = '-';
    sp->prec = -1;
    size_t i = 0;
    size_t l = n ? jinja__u8_len((const unsigned char *)s, n, 0) : 0;
    if (n > l && s[l] && strchr("<>^=", s[l])) {
        memcpy(sp->fill, s, l < 4 ? l : 4);
        sp->fill[l < 4 ? l : 4] = '\0';
        sp->align = s[l];
        i = l + 1;
    } else if (n > 0 && s[0] && strchr("<>^=", s[0])) {
        sp->align = s[0];
        i = 1;
    }
    if (i < n && s[i] && strchr("+- ", s[i])) {
        sp->sign = s[i++];
    }
    if (i < n && s[i] == '#') {
        sp->alt = true;
        i++;
    }
    if (i < n && s[i] == '0') {
        sp->zero = true;
        i++;
    }
    for (; i < n && s[i] >= '0' && s[i] <= '9' && sp->width < 100000; i++) {
        sp->width = sp->width * 10 + (s[i] - '0');
    }
    if (i < n && (s[i] == ',' || s[i] == '_')) {
        sp->group = s[i++];
    }
    if (i < n && s[i] == '.') {
        sp->prec = 0;
        for (i++; i < n && s[i] >= '0' && s[i] <= '9' && sp->prec < 1000; i++) {
            sp->prec = sp->prec * 10 + (s[i] - '0');
        }
    }
    if (i < n) {
        sp->type = s[i++];
    }
    if (i < n || (sp->type && !strchr("sdbcoxXeEfFgGn%", sp->type))) {
        return jinja__fail(rs, at, -EINVAL, "invalid format specifier");
    }
    return 0;
}

/* Digits with a separator every three from the right (the integer part only). */
static void group_digits(char *num, size_t cap, char sep)
{
    char *start = num + (num[0] == '-' || num[0] == '+' || num[0] == ' ');
    size_t len = strcspn(start, ".eE%");
    size_t seps = len > 3 ? (len - 1) / 3 : 0;
    size_t total = strlen(num);
    if (seps == 0 || total + seps + 1 > cap) {
        return;
    }
    memmove(start + len + seps, start + len, strlen(start + len) + 1);
    for (size_t k = len, out = len + seps, done = 0; k > 0; done++) {
        if (done > 0 && done % 3 == 0) {
            start[--out] = sep;
        }
        start[--out] = start[--k];
    }
}

/* format(v, spec) appended to b, for strings, numbers and (with an empty spec) anything. */
static int format_value(struct rs *rs, const struct jnode *at, const struct jv *v, const char *spec,
                        size_t sn, struct buf *b)
{
    struct fmt_spec sp;
    int rc = parse_spec(rs, at, spec, sn, &sp);
    if (rc) {
        return rc;
    }
    enum vtype t = jv_type(v);
    bool number = jv_is_num(v) && !(t == VT_BOOL && sn == 0); /* a bool formats as an int */
    char num[512];
    struct buf body;
    buf_init(&body, rs->lim.max_output);
    if (!number) {
        if (sp.type && sp.type != 's') {
            return jinja__fail(rs, at, -EINVAL, "format code '%c' for %s", sp.type,
                               jv_type_name(v));
        }
        if (sn > 0 && t != VT_STR && t != VT_BOOL) {
            return jinja__fail(rs, at, -EINVAL, "unsupported format string for %s",
                               jv_type_name(v));
        }
        rc = jinja__append_str(rs, at, v, &body);
        if (!rc && sp.prec >= 0) { /* precision truncates, in code points */
            size_t k = 0;
            for (int64_t c = 0; k < body.len && c < sp.prec; c++) {
                k += jinja__u8_len((const unsigned char *)body.data, body.len, k);
            }
            body.len = k;
        }
    } else {
        bool integral = jv_is_int(v) && (sp.type == 0 || strchr("dbcoxXn", sp.type));
        /* the float branch below only sees e E f F g G n % (or no type) */
        if (sp.type == 's' || (!integral && sp.type && strchr("bcdoxX", sp.type))) {
            return jinja__fail(rs, at, -EINVAL, "format code '%c' for %s", sp.type,
                               jv_type_name(v));
        }
        if (integral && sp.type == 'c') {
            char u[4];
            rc = jinja__buf_add(rs, at, &body, u, tandem_utf8_put(u, (unsigned long)jv_int(v)));
        } else if (integral) {
            long long x = (long long)jv_int(v);
            unsigned long long ux = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
            char digits[80];
            if (sp.type == 'b') {
                size_t k = sizeof(digits) - 1;
                digits[k] = '\0';
                do {
                    digits[--k] = (char)('0' + (ux & 1));
                    ux >>= 1;
                } while (ux);
                memmove(digits, digits + k, sizeof(digits) - k);
            } else {
                snprintf(digits, sizeof(digits),
                         sp.type == 'o'   ? "%llo"
                         : sp.type == 'x' ? "%llx"
                         : sp.type == 'X' ? "%llX"
                                          : "%llu",
                         ux);
            }
            const char *prefix = !sp.alt          ? ""
                                 : sp.type == 'b' ? "0b"
                                 : sp.type == 'o' ? "0o"
                                 : sp.type == 'x' ? "0x"
                                 : sp.type == 'X' ? "0X"
                                                  : "";
            snprintf(num, sizeof(num), "%s%s%s",
                     x < 0            ? "-"
                     : sp.sign == '+' ? "+"
                     : sp.sign == ' ' ? " "
                                      : "",
                     prefix, digits);
        } else {
            double d = jv_num(v);
            char ty = sp.type ? sp.type : 'g';
            int prec = sp.prec < 0 ? 6 : (int)(sp.prec > 300 ? 300 : sp.prec);
            if (!sp.type && sp.prec < 0) {
                jinja__fmt_float(d, num); /* repr */
            } else if (ty == '%') {
                snprintf(num, sizeof(num), "%.*f%%", prec, d * 100.0);
            } else {
                char f[8] = {'%', '.', '*', ty == 'n' ? 'g' : ty, '\0'};
                snprintf(num, sizeof(num), f, prec, d);
                if (!sp.type && !strpbrk(num, ".eEn")) { /* general format keeps a decimal */
                    strcat(num, ".0");
                }
            }
            if (d >= 0 && num[0] != '-' && (sp.sign == '+' || sp.sign == ' ')) {
                memmove(num + 1, num, strlen(num) + 1);
                num[0] = sp.sign;
            }
        }
        if (!rc && !(integral && sp.type == 'c')) {
            if (sp.group) {
                group_digits(num, sizeof(num), sp.group);
            }
            rc = jinja__buf_adds(rs, at, &body, num);
        }
    }
    if (rc) {
        buf_free(&body);
        return rc;
    }
    /* pad to the width */
    const char *bd = body.data ? body.data : "";
    size_t chars = jinja__u8_count(bd, body.len);
    size_t pad = sp.width > (int64_t)chars ? (size_t)sp.width - chars : 0;
    char align = sp.align ? sp.align : sp.zero && number ? '=' : number ? '>' : '<';
    const char *fill = sp.zero && !sp.align ? "0" : sp.fill;
    size_t left = align == '>' || align == '=' ? pad : align == '^' ? pad / 2 : 0;
    size_t sign_len = align == '=' && body.len > 0 && bd[0] && strchr("+- ", bd[0]) ? 1 : 0;
    if (pad > rs->lim.max_output) {
        rc = jinja__fail(rs, at, -E2BIG, "format width exceeds the output limit");
    }
    if (!rc && sign_len) {
        rc = jinja__buf_add(rs, at, b, bd, 1);
    }
    for (size_t k = 0; !rc && k < left; k++) {
        rc = jinja__buf_adds(rs, at, b, fill);
    }
    if (!rc && body.len > sign_len) {
        rc = jinja__buf_add(rs, at, b, bd + sign_len, body.len - sign_len);
    }
    for (size_t k = left; !rc && k < pad; k++) {
        rc = jinja__buf_adds(rs, at, b, fill);
    }
    buf_free(&body);
    return rc;
}

/* str.format(*args, **kwargs): {} {0} {name} with .attr and [key] lookups, !r/!s, and a format
 * spec (no nested fields). */
static int method_format(struct rs *rs, const struct jnode *at, const struct jv *obj,
                         const struct args *a, struct jv *out)
{
    size_t n;
    const char *s = jv_str(obj, &n);
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    int rc = 0, auto_idx = 0;
    bool manual = false;
    for (size_t i = 0; !rc && i < n;) {
        if ((s[i] == '{' || s[i] == '}') && i + 1 < n && s[i + 1] == s[i]) {
            rc = jinja__buf_add(rs, at, &b, s + i, 1);
            i += 2;
            continue;
        }
        if (s[i] == '}') {
            rc = jinja__fail(rs, at, -EINVAL, "single '}' encountered in format string");
            break;
        }
        if (s[i] != '{') {
            size_t j = i;
            while (j < n && s[j] != '{' && s[j] != '}') {
                j++;
            }
            rc = jinja__buf_add(rs, at, &b, s + i, j - i);
            i = j;
            continue;
        }
        const char *close = memchr(s + i, '}', n - i);
        const char *inner = memchr(s + i + 1, '{', close ? (size_t)(close - s) - i - 1 : 0);
        if (!close || inner) {
            rc = jinja__fail(rs, at, -EINVAL,
                             close ? "nested format fields are not supported"
                                   : "single '{' encountered in format string");
            break;
        }
        const char *f = s + i + 1;
        size_t fl = (size_t)(close - f);
        i = (size_t)(close - s) + 1;
        size_t name_len = strcspn(f, "!:.[");
        name_len = name_len < fl ? name_len : fl;
        size_t rest = name_len; /* .attr / [key] chain up to ! or : */
        while (rest < fl && f[rest] != '!' && f[rest] != ':') {
            rest++;
        }
        struct jv v = {0};
        char key[128];
        if (name_len >= sizeof(key) || rest - name_len >= sizeof(key)) {
            rc = jinja__fail(rs, at, -EINVAL, "format field name too long");
            break;
        }
        memcpy(key, f, name_len);
        key[name_len] = '\0';
        const struct jv *src = NULL;
        if (name_len == 0 || (key[0] >= '0' && key[0] <= '9')) {
            bool is_auto = name_len == 0;
            if ((is_auto && manual) || (!is_auto && auto_idx > 0)) {
                rc = jinja__fail(rs, at, -EINVAL,
                                 "cannot switch between automatic and manual field numbering");
                break;
            }
            manual = !is_auto;
            long idx = is_auto ? auto_idx++ : strtol(key, NULL, 10);
            src = idx < a->n_pos ? &a->pos[idx] : NULL;
            if (!src) {
                rc =
                    jinja__fail(rs, at, -EINVAL, "format: replacement index %ld out of range", idx);
                break;
            }
        } else {
            src = jinja__arg(a, -1, key);
            if (!src) {
                rc = jinja__fail(rs, at, -EINVAL, "format: no argument named '%s'", key);
                break;
            }
        }
        v = jv_copy(src);
        for (size_t k = name_len; !rc && k < rest;) { /* .attr and [key] */
            bool dot = f[k] == '.';
            size_t e = k + 1;
            while (e < rest && (dot ? f[e] != '.' && f[e] != '[' : f[e] != ']')) {
                e++;
            }
            memcpy(key, f + k + 1, e - k - 1);
            key[e - k - 1] = '\0';
            struct jv next = {0};
            if (!dot && jv_type(&v) == VT_LIST && key[0] >= '0' && key[0] <= '9') {
                long idx = strtol(key, NULL, 10);
                next = jv_ref(json_object_array_get_idx(v.j, (size_t)idx));
                if ((size_t)idx >= json_object_array_length(v.j)) {
                    rc = jinja__fail(rs, at, -EINVAL, "format: list index out of range");
                }
            } else {
                rc = jinja__get_member(rs, at, &v, key, &next);
            }
            jv_put(&v);
            v = next;
            k = dot ? e : e + 1;
        }
        if (!rc && rest < fl && f[rest] == '!') { /* conversion */
            char conv = rest + 1 < fl ? f[rest + 1] : 0;
            struct buf cb;
            buf_init(&cb, rs->lim.max_output);
            if (conv == 's') {
                rc = jinja__append_str(rs, at, &v, &cb);
            } else if (conv == 'r' || conv == 'a') {
                struct json_object *one = json_object_new_array();
                rc = one ? 0 : jinja__oom(rs);
                if (!rc) { /* repr of a one-element list, without its brackets */
                    json_object_array_add(one, jv_to_json(&v));
                    struct jv lv = jv_own(one);
                    rc = jinja__append_str(rs, at, &lv, &cb);
                    json_object_put(one);
                    if (!rc && cb.len >= 2) {
                        memmove(cb.data, cb.data + 1, cb.len - 2);
                        cb.len -= 2;
                    }
                }
            } else {
                rc = jinja__fail(rs, at, -EINVAL, "format: unknown conversion");
            }
            jv_put(&v);
            if (!rc) {
                rc = jinja__new_buf_str(rs, at, &cb, &v);
            } else {
                buf_free(&cb);
            }
            rest += 2;
        }
        if (!rc && rest < fl && f[rest] != ':') {
            rc = jinja__fail(rs, at, -EINVAL, "expected ':' after conversion specifier");
        }
        if (!rc) {
            bool has_spec = rest < fl;
            rc = format_value(rs, at, &v, has_spec ? f + rest + 1 : "",
                              has_spec ? fl - rest - 1 : 0, &b);
        }
        jv_put(&v);
    }
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

/* Sorted by strcmp. */
const struct jinja__method jinja__str_methods[] = {
    {"capitalize", method_capitalize},
    {"casefold", method_lower},
    {"center", method_center},
    {"count", method_count},
    {"endswith", method_endswith},
    {"find", method_find},
    {"format", method_format},
    {"index", method_index},
    {"isalnum", method_isalnum},
    {"isalpha", method_isalpha},
    {"isdecimal", method_isdigit},
    {"isdigit", method_isdigit},
    {"islower", method_islower},
    {"isnumeric", method_isdigit},
    {"isspace", method_isspace},
    {"isupper", method_isupper},
    {"join", method_join},
    {"ljust", method_ljust},
    {"lower", method_lower},
    {"lstrip", method_lstrip},
    {"partition", method_partition},
    {"removeprefix", method_removeprefix},
    {"removesuffix", method_removesuffix},
    {"replace", method_replace},
    {"rfind", method_rfind},
    {"rindex", method_rindex},
    {"rjust", method_rjust},
    {"rpartition", method_rpartition},
    {"rsplit", method_rsplit},
    {"rstrip", method_rstrip},
    {"split", method_split},
    {"splitlines", method_splitlines},
    {"startswith", method_startswith},
    {"strip", method_strip},
    {"swapcase", method_swapcase},
    {"title", method_title},
    {"upper", method_upper},
    {"zfill", method_zfill},
};
const size_t jinja__n_str_methods = ARRAY_SIZE(jinja__str_methods);

/* ---- dict methods --------------------------------------------------------------------------- */

/* get(key, default=None) */
static int method_get(struct rs *rs, const struct jnode *at, const struct jv *obj,
                      const struct args *a, struct jv *out)
{
    const struct jv *k = jinja__arg(a, 0, NULL), *def = jinja__arg(a, 1, "default");
    if (!k) {
        return jinja__fail(rs, at, -EINVAL, "get needs a key");
    }
    struct json_object *j = NULL;
    char buf[32];
    const char *key = NULL;
    if ((jv_type(k) == VT_STR || jv_is_int(k)) && jinja__dict_key(rs, at, k, buf, &key) == 0 &&
        json_object_object_get_ex(obj->j, key, &j)) {
        *out = jv_ref(j);
    } else {
        *out = def ? jv_copy(def) : jv_ref(NULL);
    }
    return 0;
}

/* The list of a dict's keys ('k'), values ('v') or (key, value) tuples ('i'). */
static int dict_list(struct rs *rs, const struct jv *obj, char what, struct jv *out)
{
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        return jinja__oom(rs);
    }
    json_object_object_foreach(obj->j, key, val)
    {
        struct json_object *e = NULL, *k = NULL;
        if (what == 'v') {
            e = val ? json_object_get(val) : NULL;
        } else {
            struct jv kv = {0};
            if (jinja__key_value(rs, key, &kv) != 0) {
                json_object_put(arr);
                return -ENOMEM;
            }
            k = kv.j;
            e = k;
            if (k && what == 'i') {
                e = json_object_new_array();
                if (e) {
                    jinja__mark_tuple(e);
                }
                if (!e || json_object_array_add(e, k) != 0 ||
                    json_object_array_add(e, val ? json_object_get(val) : NULL) != 0) {
                    json_object_put(e ? e : k);
                    e = NULL;
                    k = NULL;
                }
            }
            if (!k) {
                json_object_put(arr);
                return jinja__oom(rs);
            }
        }
        if (json_object_array_add(arr, e) != 0) {
            json_object_put(e);
            json_object_put(arr);
            return jinja__oom(rs);
        }
    }
    *out = jv_own(arr);
    return 0;
}

static int method_items(struct rs *rs, const struct jnode *at, const struct jv *obj,
                        const struct args *a, struct jv *out)
{
    (void)at, (void)a;
    return dict_list(rs, obj, 'i', out);
}

static int method_keys(struct rs *rs, const struct jnode *at, const struct jv *obj,
                       const struct args *a, struct jv *out)
{
    (void)at, (void)a;
    return dict_list(rs, obj, 'k', out);
}

static int method_values(struct rs *rs, const struct jnode *at, const struct jv *obj,
                         const struct args *a, struct jv *out)
{
    (void)at, (void)a;
    return dict_list(rs, obj, 'v', out);
}

/* Sorted by strcmp. Namespaces have them too. */
const struct jinja__method jinja__dict_methods[] = {
    {"get", method_get},
    {"items", method_items},
    {"keys", method_keys},
    {"values", method_values},
};
const size_t jinja__n_dict_methods = ARRAY_SIZE(jinja__dict_methods);

/* ---- list methods (the sandbox allows only those that do not modify) ---------------------- */

/* count(x) and index(x): how often x occurs, where it first does (an error when it does not). */
static int list_find(struct rs *rs, const struct jnode *at, const struct jv *obj,
                     const struct args *a, bool count, struct jv *out)
{
    const struct jv *x = jinja__arg(a, 0, NULL);
    if (!x) {
        return jinja__fail(rs, at, -EINVAL, "%s needs an argument", count ? "count" : "index");
    }
    size_t n = json_object_array_length(obj->j);
    int64_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        struct jv e = jv_own(json_object_array_get_idx(obj->j, i)); /* borrowed view */
        if (jinja__equal(&e, x)) {
            if (!count) {
                return jinja__new_int(rs, (int64_t)i, out);
            }
            hits++;
        }
    }
    if (!count) {
        return jinja__fail(rs, at, -EINVAL, "value is not in the list");
    }
    return jinja__new_int(rs, hits, out);
}

static int method_list_count(struct rs *rs, const struct jnode *at, const struct jv *obj,
                             const struct args *a, struct jv *out)
{
    return list_find(rs, at, obj, a, true, out);
}

static int method_list_index(struct rs *rs, const struct jnode *at, const struct jv *obj,
                             const struct args *a, struct jv *out)
{
    return list_find(rs, at, obj, a, false, out);
}

/* Sorted by strcmp. */
const struct jinja__method jinja__list_methods[] = {
    {"count", method_list_count},
    {"index", method_list_index},
};
const size_t jinja__n_list_methods = ARRAY_SIZE(jinja__list_methods);

int jinja__call_method(struct rs *rs, const struct jnode *at, const struct jv *obj,
                       const char *name, const struct args *a, struct jv *out)
{
    const struct jinja__method *m = NULL;
    switch (jv_type(obj)) {
    case VT_STR:
        m = jinja__lookup(jinja__str_methods, jinja__n_str_methods, sizeof(*m), name);
        if (!m) {
            return jinja__fail(rs, at, -EINVAL, "string has no method '%s'", name);
        }
        return m->fn(rs, at, obj, a, out);
    case VT_DICT:
    case VT_NS:
        m = jinja__lookup(jinja__dict_methods, jinja__n_dict_methods, sizeof(*m), name);
        if (!m) {
            return jinja__fail(rs, at, -EINVAL, "dict has no method '%s'", name);
        }
        return m->fn(rs, at, obj, a, out);
    case VT_LIST:
        m = jinja__lookup(jinja__list_methods, jinja__n_list_methods, sizeof(*m), name);
        if (!m) {
            return jinja__fail(rs, at, -EINVAL, "list has no method '%s'", name);
        }
        return m->fn(rs, at, obj, a, out);
    case VT_UNDEF:
        return jinja__get_member(rs, at, obj, name, out);
    default:
        return jinja__fail(rs, at, -EINVAL, "%s has no method '%s'", jv_type_name(obj), name);
    }
}

/* ---- globals -------------------------------------------------------------------------------- */

/* Each global gets the call's arguments; it sets *out (owned) and returns 0, or an error. */

/* raise_exception(msg): ends the render with JINJA_ERAISED and msg, verbatim, as the error. */
static int global_raise_exception(struct rs *rs, const struct jnode *at, const struct args *a,
                                  struct jv *out)
{
    (void)out;
    struct jv msg = {0};
    const struct jv *m = jinja__arg(a, 0, NULL);
    int rc = m ? jinja__to_str(rs, at, m, &msg) : jinja__new_str(rs, at, "", 0, &msg);
    if (rc) {
        return rc;
    }
    tandem_set_err(rs->err, rs->errlen, "%s", json_object_get_string(msg.j));
    jv_put(&msg);
    return JINJA_ERAISED;
}

/* range(stop), range(start, stop[, step]) as a list. */
static int global_range(struct rs *rs, const struct jnode *at, const struct args *a, struct jv *out)
{
    int64_t start = 0, stop = 0, step = 1;
    int rc = 0;
    if (a->n_pos == 1) {
        rc = jinja__want_int(rs, at, &a->pos[0], "range argument", &stop);
    } else if (a->n_pos == 2 || a->n_pos == 3) {
        rc = jinja__want_int(rs, at, &a->pos[0], "range argument", &start);
        if (!rc) {
            rc = jinja__want_int(rs, at, &a->pos[1], "range argument", &stop);
        }
        if (!rc && a->n_pos == 3) {
            rc = jinja__want_int(rs, at, &a->pos[2], "range argument", &step);
        }
    } else {
        rc = jinja__fail(rs, at, -EINVAL, "range takes 1 to 3 arguments");
    }
    if (!rc && step == 0) {
        rc = jinja__fail(rs, at, -EINVAL, "range step cannot be zero");
    }
    if (rc) {
        return rc;
    }
    double count = ceil(((double)stop - (double)start) / (double)step);
    if (count < 0) {
        count = 0;
    }
    rc = jinja__count_iterations(rs, at, (uint64_t)count);
    struct json_object *arr = rc ? NULL : json_object_new_array();
    if (!rc && !arr) {
        rc = jinja__oom(rs);
    }
    for (int64_t i = 0; !rc && i < (int64_t)count; i++) {
        struct json_object *e = json_object_new_int64(start + i * step);
        if (!e || json_object_array_add(arr, e) != 0) {
            json_object_put(e);
            rc = jinja__oom(rs);
        }
    }
    if (rc) {
        json_object_put(arr);
        return rc;
    }
    *out = jv_own(arr);
    return 0;
}

/* dict(...) and namespace(...): the members of the positional mappings, then the keywords. */
static int make_mapping(struct rs *rs, const struct jnode *at, const char *name,
                        const struct args *a, struct jv *out)
{
    struct json_object *obj = json_object_new_object();
    if (!obj) {
        return jinja__oom(rs);
    }
    int rc = 0;
    for (int i = 0; !rc && i < a->n_pos; i++) {
        if (jv_type(&a->pos[i]) != VT_DICT && jv_type(&a->pos[i]) != VT_NS) {
            rc = jinja__fail(rs, at, -EINVAL, "%s() positional argument must be a mapping", name);
            break;
        }
        json_object_object_foreach(a->pos[i].j, key, val)
        {
            if (json_object_object_add(obj, key, val ? json_object_get(val) : NULL) != 0) {
                rc = jinja__oom(rs);
                break;
            }
        }
    }
    for (int i = 0; !rc && i < a->n_kw; i++) {
        struct json_object *j = jv_to_json(&a->kw[i]);
        if (json_object_object_add(obj, a->kw_name[i], j) != 0) {
            json_object_put(j);
            rc = jinja__oom(rs);
        }
    }
    if (rc) {
        json_object_put(obj);
        return rc;
    }
    *out = jv_own(obj);
    return 0;
}

static int global_dict(struct rs *rs, const struct jnode *at, const struct args *a, struct jv *out)
{
    return make_mapping(rs, at, "dict", a, out);
}

/* namespace(...): the one mutable value ({% set ns.x = ... %}). */
/* cycler(*items): an object whose next() returns the items in turn; current, reset(). */
static int global_cycler(struct rs *rs, const struct jnode *at, const struct args *a,
                         struct jv *out)
{
    if (a->n_pos == 0) {
        return jinja__fail(rs, at, -EINVAL, "cycler needs at least one item");
    }
    struct json_object *c = json_object_new_object(), *items = json_object_new_array();
    int rc = c && items ? 0 : jinja__oom(rs);
    for (int i = 0; !rc && i < a->n_pos; i++) {
        struct json_object *j = jv_to_json(&a->pos[i]);
        if (json_object_array_add(items, j) != 0) {
            json_object_put(j);
            rc = jinja__oom(rs);
        }
    }
    if (!rc) {
        jinja__mark_tuple(items);
        struct json_object *first = json_object_array_get_idx(items, 0);
        if (json_object_object_add(c, "items", items) != 0) {
            rc = jinja__oom(rs);
        } else {
            items = NULL; /* c owns it */
            if (json_object_object_add(c, "pos", json_object_new_int64(0)) != 0 ||
                json_object_object_add(c, "current", first ? json_object_get(first) : NULL)) {
                rc = jinja__oom(rs);
            }
        }
    }
    json_object_put(items);
    if (rc) {
        json_object_put(c);
        return rc;
    }
    jinja__mark_obj(c, JO_CYCLER);
    *out = (struct jv){.kind = JV_NS, .j = c};
    return 0;
}

/* joiner(sep=', '): a callable that returns "" the first time and sep after. */
static int global_joiner(struct rs *rs, const struct jnode *at, const struct args *a,
                         struct jv *out)
{
    const char *sep = ", ";
    size_t sn = 2;
    const struct jv *sv = jinja__arg(a, 0, "sep");
    int rc = sv ? jinja__want_str(rs, at, sv, "joiner separator", &sep, &sn) : 0;
    if (rc) {
        return rc;
    }
    struct json_object *j = json_object_new_object();
    if (!j || json_object_object_add(j, "sep", json_object_new_string_len(sep, (int)sn)) != 0 ||
        json_object_object_add(j, "used", json_object_new_boolean(0)) != 0) {
        json_object_put(j);
        return jinja__oom(rs);
    }
    jinja__mark_obj(j, JO_JOINER);
    *out = (struct jv){.kind = JV_NS, .j = j};
    return 0;
}

static int global_namespace(struct rs *rs, const struct jnode *at, const struct args *a,
                            struct jv *out)
{
    int rc = make_mapping(rs, at, "namespace", a, out);
    if (!rc) {
        out->kind = JV_NS;
    }
    return rc;
}

/* strftime_now(format): the time now, or the one JINJA_NOW_VAR pins (in UTC). */
static int global_strftime_now(struct rs *rs, const struct jnode *at, const struct args *a,
                               struct jv *out)
{
    const char *fmt;
    size_t fn;
    int rc = jinja__want_str(rs, at, jinja__arg(a, 0, NULL), "strftime_now format", &fmt, &fn);
    if (rc) {
        return rc;
    }
    struct json_object *pin = NULL;
    struct tm tm;
    time_t now;
    if (rs->ctx && json_object_object_get_ex(rs->ctx, JINJA_NOW_VAR, &pin) &&
        json_object_get_type(pin) == json_type_int) {
        now = (time_t)json_object_get_int64(pin);
        if (!gmtime_r(&now, &tm)) {
            return jinja__fail(rs, at, -EINVAL, "%s out of range", JINJA_NOW_VAR);
        }
    } else {
        now = time(NULL);
        if (!localtime_r(&now, &tm)) {
            return jinja__fail(rs, at, -EINVAL, "strftime_now: no local time");
        }
    }
    char tb[256];
    size_t n = fn > 0 && fn < 128 ? strftime(tb, sizeof(tb), fmt, &tm) : 0;
    return jinja__new_str(rs, at, tb, n, out);
}

/* Sorted by strcmp. A variable of the same name shadows a global. */
const struct jinja__global jinja__globals[] = {
    {"cycler", global_cycler},
    {"dict", global_dict},
    {"joiner", global_joiner},
    {"namespace", global_namespace},
    {"raise_exception", global_raise_exception},
    {"range", global_range},
    {"strftime_now", global_strftime_now},
};
const size_t jinja__n_globals = ARRAY_SIZE(jinja__globals);

const struct jinja__global *jinja__global_find(const char *name)
{
    return jinja__lookup(jinja__globals, jinja__n_globals, sizeof(jinja__globals[0]), name);
}
