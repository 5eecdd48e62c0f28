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

/* split(sep=None, maxsplit=-1); rsplit only without maxsplit, where it is the same. */
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
        return jinja__fail(rs, at, -EINVAL, "rsplit with maxsplit is not supported");
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

static int method_splitlines(struct rs *rs, const struct jnode *at, const struct jv *obj,
                             const struct args *a, struct jv *out)
{
    (void)a;
    size_t n;
    const char *s = jv_str(obj, &n);
    struct jv r = {0};
    int rc = str_split(rs, at, s, n, "\n", 1, -1, &r);
    if (rc) {
        return rc;
    }
    size_t m = json_object_array_length(r.j);
    if (m > 0 && n > 0 && s[n - 1] == '\n') {
        json_object_array_del_idx(r.j, m - 1, 1);
    } else if (n == 0) {
        json_object_array_del_idx(r.j, 0, m);
    }
    *out = r;
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

/* find(sub): the character index of the first sub, or -1. */
static int method_find(struct rs *rs, const struct jnode *at, const struct jv *obj,
                       const struct args *a, struct jv *out)
{
    size_t n, sn;
    const char *s = jv_str(obj, &n), *sub;
    int rc = jinja__want_str(rs, at, jinja__arg(a, 0, NULL), "argument", &sub, &sn);
    if (rc) {
        return rc;
    }
    const char *hit = sn == 0 ? s : memmem(s, n, sub, sn);
    return jinja__new_int(rs, hit ? (int64_t)jinja__u8_count(s, (size_t)(hit - s)) : -1, out);
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

/* Sorted by strcmp. */
const struct jinja__method jinja__str_methods[] = {
    {"capitalize", method_capitalize},
    {"count", method_count},
    {"endswith", method_endswith},
    {"find", method_find},
    {"join", method_join},
    {"lower", method_lower},
    {"lstrip", method_lstrip},
    {"replace", method_replace},
    {"rsplit", method_rsplit},
    {"rstrip", method_rstrip},
    {"split", method_split},
    {"splitlines", method_splitlines},
    {"startswith", method_startswith},
    {"strip", method_strip},
    {"title", method_title},
    {"upper", method_upper},
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
    if (jv_type(k) == VT_STR &&
        json_object_object_get_ex(obj->j, json_object_get_string(k->j), &j)) {
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
            k = json_object_new_string(key);
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
    {"dict", global_dict},
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
