/*
 * Jinja filters (`x|name(args)`) and tests (`x is name(args)`), as tables after git's commands[]
 * (git.c): one sorted entry per name, holding the small function that implements it, found by
 * binary search. The tables are the one list of what exists: a name that is not in them is an
 * "unknown filter" / "unknown test" error. Add one by writing its function and its line.
 *
 * Filters follow Jinja2's built-ins (jinja2/filters.py) as Hugging Face's sandbox runs them;
 * every size they build is bounded by the render's limits (jinja.h).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

/* ---- tojson --------------------------------------------------------------------------------- */

/* Python json.dumps(ensure_ascii=False, indent=indent, sort_keys=sort) of j. */
static int append_json(struct rs *rs, const struct jnode *at, struct json_object *j, int indent,
                       bool sort, int level, struct buf *b);

static int append_json_str(struct rs *rs, const struct jnode *at, const char *s, size_t n,
                           struct buf *b)
{
    int rc = jinja__buf_adds(rs, at, b, "\"");
    size_t run = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char hex[8];
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            if (c < 0x20) {
                snprintf(hex, sizeof(hex), "\\u%04x", c);
                esc = hex;
            }
        }
        if (esc) {
            rc = jinja__buf_add(rs, at, b, s + run, i - run);
            if (!rc) {
                rc = jinja__buf_adds(rs, at, b, esc);
            }
            run = i + 1;
        }
    }
    if (!rc) {
        rc = jinja__buf_add(rs, at, b, s + run, n - run);
    }
    return rc ? rc : jinja__buf_adds(rs, at, b, "\"");
}

static int json_newline(struct rs *rs, const struct jnode *at, int indent, int level, struct buf *b)
{
    int rc = jinja__buf_adds(rs, at, b, "\n");
    for (int i = 0; !rc && i < indent * level; i++) {
        rc = jinja__buf_adds(rs, at, b, " ");
    }
    return rc;
}

static int cmp_keys(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int append_json(struct rs *rs, const struct jnode *at, struct json_object *j, int indent,
                       bool sort, int level, struct buf *b)
{
    char num[40];
    if (level > 64) {
        return jinja__fail(rs, at, -E2BIG, "tojson: value nested too deeply");
    }
    switch (j ? json_object_get_type(j) : json_type_null) {
    case json_type_null:
        return jinja__buf_adds(rs, at, b, "null");
    case json_type_boolean:
        return jinja__buf_adds(rs, at, b, json_object_get_boolean(j) ? "true" : "false");
    case json_type_int:
        snprintf(num, sizeof(num), "%lld", (long long)json_object_get_int64(j));
        return jinja__buf_adds(rs, at, b, num);
    case json_type_double: {
        double d = json_object_get_double(j);
        if (isnan(d)) {
            return jinja__buf_adds(rs, at, b, "NaN");
        }
        if (isinf(d)) {
            return jinja__buf_adds(rs, at, b, d < 0 ? "-Infinity" : "Infinity");
        }
        jinja__fmt_float(d, num);
        return jinja__buf_adds(rs, at, b, num);
    }
    case json_type_string:
        return append_json_str(rs, at, json_object_get_string(j),
                               (size_t)json_object_get_string_len(j), b);
    case json_type_array: {
        size_t n = json_object_array_length(j);
        if (n == 0) {
            return jinja__buf_adds(rs, at, b, "[]");
        }
        int rc = jinja__buf_adds(rs, at, b, "[");
        for (size_t i = 0; !rc && i < n; i++) {
            if (i) {
                rc = jinja__buf_adds(rs, at, b, indent >= 0 ? "," : ", ");
            }
            if (!rc && indent >= 0) {
                rc = json_newline(rs, at, indent, level + 1, b);
            }
            if (!rc) {
                rc = append_json(rs, at, json_object_array_get_idx(j, i), indent, sort, level + 1,
                                 b);
            }
        }
        if (!rc && indent >= 0) {
            rc = json_newline(rs, at, indent, level, b);
        }
        return rc ? rc : jinja__buf_adds(rs, at, b, "]");
    }
    case json_type_object: {
        size_t n = (size_t)json_object_object_length(j);
        if (n == 0) {
            return jinja__buf_adds(rs, at, b, "{}");
        }
        const char **keys = malloc(n * sizeof(*keys));
        if (!keys) {
            return jinja__oom(rs);
        }
        size_t k = 0;
        json_object_object_foreach(j, key, val)
        {
            (void)val;
            keys[k++] = key;
        }
        if (sort) {
            qsort(keys, k, sizeof(*keys), cmp_keys);
        }
        int rc = jinja__buf_adds(rs, at, b, "{");
        for (size_t i = 0; !rc && i < k; i++) {
            if (i) {
                rc = jinja__buf_adds(rs, at, b, indent >= 0 ? "," : ", ");
            }
            if (!rc && indent >= 0) {
                rc = json_newline(rs, at, indent, level + 1, b);
            }
            int64_t ik;
            if (!rc && jinja__int_key(keys[i], &ik)) { /* json.dumps writes int keys as strings */
                char digits[24];
                snprintf(digits, sizeof(digits), "\"%lld\"", (long long)ik);
                rc = jinja__buf_adds(rs, at, b, digits);
            } else if (!rc) {
                rc = append_json_str(rs, at, keys[i], strlen(keys[i]), b);
            }
            if (!rc) {
                rc = jinja__buf_adds(rs, at, b, ": ");
            }
            if (!rc) {
                struct json_object *member = NULL;
                json_object_object_get_ex(j, keys[i], &member);
                rc = append_json(rs, at, member, indent, sort, level + 1, b);
            }
        }
        free(keys);
        if (!rc && indent >= 0) {
            rc = json_newline(rs, at, indent, level, b);
        }
        return rc ? rc : jinja__buf_adds(rs, at, b, "}");
    }
    }
    return 0;
}

/* ---- tests ---------------------------------------------------------------------------------- */

/* A comparison test (`x is eq(y)`, `x is lt(y)`...): y is required. */
static int test_compare(struct rs *rs, const struct jnode *at, const char *name, const char *op,
                        const struct jv *v, const struct jv *arg, bool *out)
{
    if (!arg) {
        return jinja__fail(rs, at, -EINVAL, "test '%s' needs an argument", name);
    }
    return jinja__compare(rs, at, op, v, arg, out);
}

/* The comparison tests, by the operator they apply. */
#define COMPARE_TEST(fn, op)                                                                       \
    static int fn(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,     \
                  const struct jv *arg, bool *out)                                                 \
    {                                                                                              \
        return test_compare(rs, at, name, op, v, arg, out);                                        \
    }

COMPARE_TEST(test_eq, "==")
COMPARE_TEST(test_ne, "!=")
COMPARE_TEST(test_lt, "<")
COMPARE_TEST(test_le, "<=")
COMPARE_TEST(test_gt, ">")
COMPARE_TEST(test_ge, ">=")
COMPARE_TEST(test_in, "in")

/* The tests that only look at the operand's type: one line each. */
#define TYPE_TEST(fn, expr)                                                                        \
    static int fn(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,     \
                  const struct jv *arg, bool *out)                                                 \
    {                                                                                              \
        (void)rs, (void)at, (void)name, (void)arg;                                                 \
        enum vtype t = jv_type(v);                                                                 \
        *out = (expr);                                                                             \
        return 0;                                                                                  \
    }

TYPE_TEST(test_defined, t != VT_UNDEF)
TYPE_TEST(test_undefined, t == VT_UNDEF)
TYPE_TEST(test_none, t == VT_NONE)
TYPE_TEST(test_string, t == VT_STR)
TYPE_TEST(test_number, t == VT_INT || t == VT_FLOAT || t == VT_BOOL)
TYPE_TEST(test_integer, t == VT_INT)
TYPE_TEST(test_float, t == VT_FLOAT)
TYPE_TEST(test_boolean, t == VT_BOOL)
TYPE_TEST(test_true, t == VT_BOOL && json_object_get_boolean(v->j))
TYPE_TEST(test_false, t == VT_BOOL && !json_object_get_boolean(v->j))
TYPE_TEST(test_mapping, t == VT_DICT)
TYPE_TEST(test_iterable, t == VT_LIST || t == VT_DICT || t == VT_STR || t == VT_UNDEF)
TYPE_TEST(test_sequence, t == VT_LIST || t == VT_DICT || t == VT_STR)
TYPE_TEST(test_callable, t == VT_MACRO)
TYPE_TEST(test_escaped, t == VT_STR && jinja__is_safe(v))

/* `name is filter` / `name is test`: whether a filter or test of that name exists. */
static int test_filter(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                       const struct jv *arg, bool *out)
{
    (void)rs, (void)at, (void)arg;
    size_t n;
    *out = jv_type(v) == VT_STR &&
           (strcmp(name, "filter") == 0 ? jinja__filter_find(jv_str(v, &n)) != NULL
                                        : jinja__test_find(jv_str(v, &n)) != NULL);
    return 0;
}

static int test_sameas(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                       const struct jv *arg, bool *out)
{
    (void)name;
    if (!arg) {
        return jinja__fail(rs, at, -EINVAL, "test 'sameas' needs an argument");
    }
    enum vtype t = jv_type(v), ta = jv_type(arg);
    *out = (t == ta && (t == VT_NONE || t == VT_UNDEF)) ||
           (t == VT_BOOL && ta == VT_BOOL && jinja__equal(v, arg)) ||
           (v->j != NULL && v->j == arg->j);
    return 0;
}

/* lower/upper: a string with ASCII letters, all of that case. */
static bool ascii_cased_as(const struct jv *v, bool upper)
{
    if (jv_type(v) != VT_STR) {
        return false;
    }
    size_t n;
    const char *s = jv_str(v, &n);
    bool cased = false, ok = true;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            cased = true;
            ok = ok && (upper ? !(c >= 'a' && c <= 'z') : !(c >= 'A' && c <= 'Z'));
        }
    }
    return cased && ok;
}

static int test_lower(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                      const struct jv *arg, bool *out)
{
    (void)rs, (void)at, (void)name, (void)arg;
    *out = ascii_cased_as(v, false);
    return 0;
}

static int test_upper(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                      const struct jv *arg, bool *out)
{
    (void)rs, (void)at, (void)name, (void)arg;
    *out = ascii_cased_as(v, true);
    return 0;
}

/* odd, even, divisibleby(d): the remainder of an integer operand by d (2 for odd and even). */
static int int_remainder(struct rs *rs, const struct jnode *at, const char *name,
                         const struct jv *v, const struct jv *arg, bool divisor_arg, int64_t *r)
{
    if (!jv_is_int(v)) {
        return jinja__fail(rs, at, -EINVAL, "test '%s' needs an integer, got %s", name,
                           jv_type_name(v));
    }
    int64_t x = jv_int(v), d = 2;
    if (divisor_arg) {
        int rc = jinja__want_int(rs, at, arg, "divisibleby argument", &d);
        if (rc) {
            return rc;
        }
        if (d == 0) {
            return jinja__fail(rs, at, -EINVAL, "divisibleby 0");
        }
    }
    *r = (d == -1) ? 0 : x % d;
    return 0;
}

static int test_odd(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                    const struct jv *arg, bool *out)
{
    int64_t r = 0;
    int rc = int_remainder(rs, at, name, v, arg, false, &r);
    *out = r != 0;
    return rc;
}

static int test_even(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                     const struct jv *arg, bool *out)
{
    int64_t r = 0;
    int rc = int_remainder(rs, at, name, v, arg, false, &r);
    *out = r == 0;
    return rc;
}

static int test_divisibleby(struct rs *rs, const struct jnode *at, const char *name,
                            const struct jv *v, const struct jv *arg, bool *out)
{
    int64_t r = 0;
    int rc = int_remainder(rs, at, name, v, arg, true, &r);
    *out = r == 0;
    return rc;
}

/* Sorted by strcmp (the operator spellings sort before the letters). */
const struct jinja__test jinja__tests[] = {
    {"!=", test_ne},
    {"<", test_lt},
    {"<=", test_le},
    {"==", test_eq},
    {">", test_gt},
    {">=", test_ge},
    {"boolean", test_boolean},
    {"callable", test_callable},
    {"defined", test_defined},
    {"divisibleby", test_divisibleby},
    {"eq", test_eq},
    {"equalto", test_eq},
    {"escaped", test_escaped},
    {"even", test_even},
    {"false", test_false},
    {"filter", test_filter},
    {"float", test_float},
    {"ge", test_ge},
    {"greaterthan", test_gt},
    {"gt", test_gt},
    {"in", test_in},
    {"integer", test_integer},
    {"iterable", test_iterable},
    {"le", test_le},
    {"lessthan", test_lt},
    {"lower", test_lower},
    {"lt", test_lt},
    {"mapping", test_mapping},
    {"ne", test_ne},
    {"none", test_none},
    {"number", test_number},
    {"odd", test_odd},
    {"sameas", test_sameas},
    {"sequence", test_sequence},
    {"string", test_string},
    {"test", test_filter},
    {"true", test_true},
    {"undefined", test_undefined},
    {"upper", test_upper},
};
const size_t jinja__n_tests = ARRAY_SIZE(jinja__tests);

const struct jinja__test *jinja__test_find(const char *name)
{
    return jinja__lookup(jinja__tests, jinja__n_tests, sizeof(jinja__tests[0]), name);
}

int jinja__apply_test(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                      const struct args *a, bool *out)
{
    const struct jinja__test *t = jinja__test_find(name);
    if (!t) {
        return jinja__fail(rs, at, -EINVAL, "unknown test '%s'", name);
    }
    return t->fn(rs, at, name, v, jinja__arg(a, 0, NULL), out);
}

/* ---- sort, dictsort ------------------------------------------------------------------------- */

static char ascii_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
}

struct sort_ctx {
    struct rs *rs;
    const struct jnode *at;
    const char *attr;
    bool reverse;
    bool case_sensitive; /* compare strings as they are (else ASCII-lowercased, Jinja's default) */
    int elem;            /* >= 0: compare that element of each item (dictsort's key or value) */
    int rc;
};

/* Borrowed views of two items compared for sorting; errors are left in sc->rc. */
static int sort_cmp(struct sort_ctx *sc, struct json_object *x, struct json_object *y)
{
    struct jv a = jv_own(x);
    struct jv b = jv_own(y);
    struct jv ma = {0}, mb = {0};
    int c = 0;
    if (sc->rc) {
        return 0;
    }
    if (sc->attr) {
        sc->rc = jinja__get_member(sc->rs, sc->at, &a, sc->attr, &ma);
        if (!sc->rc) {
            sc->rc = jinja__get_member(sc->rs, sc->at, &b, sc->attr, &mb);
        }
    } else if (sc->elem >= 0) { /* borrowed views of the pairs' elements */
        ma = jv_own(json_object_array_get_idx(x, (size_t)sc->elem));
        mb = jv_own(json_object_array_get_idx(y, (size_t)sc->elem));
    } else {
        ma = a;
        mb = b;
    }
    if (!sc->rc) {
        /* case-insensitive for strings, as Jinja's sort(case_sensitive=False) */
        if (!sc->case_sensitive && jv_type(&ma) == VT_STR && jv_type(&mb) == VT_STR) {
            size_t na, nb;
            const char *sa = jv_str(&ma, &na), *sb = jv_str(&mb, &nb);
            for (size_t i = 0; i < na && i < nb && c == 0; i++) {
                c = (unsigned char)ascii_lower(sa[i]) - (unsigned char)ascii_lower(sb[i]);
            }
            if (c == 0) {
                c = (na > nb) - (na < nb);
            }
        } else {
            sc->rc = jinja__order(sc->rs, sc->at, &ma, &mb, &c);
        }
    }
    if (sc->attr) {
        jv_put(&ma);
        jv_put(&mb);
    }
    return sc->reverse ? -c : c;
}

static int sort_list(struct rs *rs, const struct jnode *at, struct json_object *items,
                     const char *attr, int elem, bool reverse, bool case_sensitive, struct jv *out)
{
    size_t n = json_object_array_length(items);
    struct json_object **v = malloc((n ? n : 1) * sizeof(struct json_object *));
    if (!v) {
        return jinja__oom(rs);
    }
    for (size_t i = 0; i < n; i++) {
        v[i] = json_object_array_get_idx(items, i);
    }
    struct sort_ctx sc = {.rs = rs,
                          .at = at,
                          .attr = attr,
                          .reverse = reverse,
                          .case_sensitive = case_sensitive,
                          .elem = elem};
    /* stable, like Python's sort; the iteration budget bounds the quadratic cost */
    int rc = jinja__count_iterations(rs, at, n * n / 8 + n);
    for (size_t i = 1; !rc && i < n && !sc.rc; i++) {
        struct json_object *x = v[i];
        size_t k = i;
        while (k > 0 && sort_cmp(&sc, v[k - 1], x) > 0) {
            v[k] = v[k - 1];
            k--;
        }
        v[k] = x;
    }
    if (!rc) {
        rc = sc.rc;
    }
    struct json_object *arr = rc ? NULL : json_object_new_array();
    if (!rc && !arr) {
        rc = jinja__oom(rs);
    }
    for (size_t i = 0; !rc && i < n; i++) {
        if (json_object_array_add(arr, v[i] ? json_object_get(v[i]) : NULL) != 0) {
            json_object_put(v[i]);
            rc = jinja__oom(rs);
        }
    }
    free(v);
    if (rc) {
        json_object_put(arr);
        return rc;
    }
    *out = jv_own(arr);
    return 0;
}

/* ---- filters -------------------------------------------------------------------------------- */

/* Each filter gets the operand v, its items when the table says JF_ITEMS (borrowed; NULL
 * otherwise) and the arguments; it sets *out (owned) and returns 0, or returns an error. */

static int filter_default(struct rs *rs, const struct jnode *at, const struct jv *v,
                          struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    const struct jv *def = jinja__arg(a, 0, "default_value"),
                    *boolean = jinja__arg(a, 1, "boolean");
    bool use_default = jv_type(v) == VT_UNDEF || (boolean && jv_truthy(boolean) && !jv_truthy(v));
    if (use_default && !def) {
        return jinja__new_str(rs, at, "", 0, out);
    }
    *out = jv_copy(use_default ? def : v);
    return 0;
}

/* Markup of v: v itself when it is Markup already, else a new string object (the operand may
 * be the context's) of what append writes (str(v), or it escaped). */
static int markup_of(struct rs *rs, const struct jnode *at, const struct jv *v,
                     int (*append)(struct rs *, const struct jnode *, const struct jv *,
                                   struct buf *),
                     struct jv *out)
{
    if (jinja__is_safe(v)) {
        *out = jv_copy(v);
        return 0;
    }
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    int rc = append(rs, at, v, &b);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    rc = jinja__new_buf_str(rs, at, &b, out);
    if (!rc) {
        jinja__mark_safe(out->j);
    }
    return rc;
}

/* safe: Markup(str(v)). */
static int filter_safe(struct rs *rs, const struct jnode *at, const struct jv *v,
                       struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    return markup_of(rs, at, v, jinja__append_str, out);
}

static int filter_string(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    return jinja__to_str(rs, at, v, out);
}

static int filter_tojson(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    int64_t indent = -1;
    const struct jv *iv = jinja__arg(a, 0, "indent"), *sk = jinja__arg(a, -1, "sort_keys");
    if (iv && jv_type(iv) != VT_NONE) {
        int rc = jinja__want_int(rs, at, iv, "tojson indent", &indent);
        if (rc) {
            return rc;
        }
        if (indent < 0 || indent > 64) {
            return jinja__fail(rs, at, -EINVAL, "tojson indent out of range");
        }
    }
    enum vtype t = jv_type(v);
    if (t == VT_UNDEF || t == VT_MACRO) {
        return jinja__fail(rs, at, -EINVAL, "tojson: %s is not JSON serializable", jv_type_name(v));
    }
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    int rc = append_json(rs, at, v->j, (int)indent, sk && jv_truthy(sk), 0, &b);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

/* length, count */
static int filter_length(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    switch (jv_type(v)) {
    case VT_STR: {
        size_t n;
        const char *s = jv_str(v, &n);
        return jinja__new_int(rs, (int64_t)jinja__u8_count(s, n), out);
    }
    case VT_LIST:
        return jinja__new_int(rs, (int64_t)json_object_array_length(v->j), out);
    case VT_DICT:
    case VT_NS:
        return jinja__new_int(rs, json_object_object_length(v->j), out);
    case VT_UNDEF:
        return jinja__new_int(rs, 0, out);
    default:
        return jinja__fail(rs, at, -EINVAL, "object of type %s has no length", jv_type_name(v));
    }
}

static int filter_trim(struct rs *rs, const struct jnode *at, const struct jv *v,
                       struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    struct jv sv = {0};
    int rc = jinja__to_str(rs, at, v, &sv);
    if (rc) {
        return rc;
    }
    size_t n;
    const char *s = jv_str(&sv, &n);
    const struct jv *a0 = jinja__arg(a, 0, NULL);
    const char *chars = NULL;
    size_t cn = 0;
    if (a0 && jv_type(a0) != VT_NONE) {
        rc = jinja__want_str(rs, at, a0, "trim argument", &chars, &cn);
    }
    if (!rc) {
        size_t lo = 0, hi = 0;
        jinja__strip_range(s, n, chars, cn, true, true, &lo, &hi);
        rc = jinja__new_str(rs, at, s + lo, hi - lo, out);
    }
    jv_put(&sv);
    return rc;
}

/* str.replace on str(v) */
static int filter_replace(struct rs *rs, const struct jnode *at, const struct jv *v,
                          struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    struct jv sv = {0};
    int rc = jinja__to_str(rs, at, v, &sv);
    if (rc) {
        return rc;
    }
    rc = jinja__call_method(rs, at, &sv, "replace", a, out);
    jv_put(&sv);
    return rc;
}

/* escape/e: a Markup string of str(v) with & < > " ' escaped, as markupsafe does; Markup is
 * returned as is. */
static int filter_escape(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    return markup_of(rs, at, v, jinja__append_escaped, out);
}

static int filter_upper(struct rs *rs, const struct jnode *at, const struct jv *v,
                        struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    return jinja__case_map(rs, at, v, 'u', out);
}

static int filter_lower(struct rs *rs, const struct jnode *at, const struct jv *v,
                        struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    return jinja__case_map(rs, at, v, 'l', out);
}

static int filter_capitalize(struct rs *rs, const struct jnode *at, const struct jv *v,
                             struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    return jinja__case_map(rs, at, v, 'c', out);
}

/* Jinja's title: words start after whitespace and brackets, unlike str.title. */
static int filter_title(struct rs *rs, const struct jnode *at, const struct jv *v,
                        struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    return jinja__case_map(rs, at, v, 'T', out);
}

/* The int/float filters' result for a value that is not a number: the default (0). */
static int num_fallback(struct rs *rs, const struct jv *def, bool want_float, struct jv *out)
{
    if (def) {
        *out = jv_copy(def);
        return 0;
    }
    return want_float ? jinja__new_float(rs, 0.0, out) : jinja__new_int(rs, 0, out);
}

/* The operand of int, float, abs and round as a number: *is_int and *i, or *d. With parse (int
 * and float) a string is parsed and anything that is not a number gives the default instead:
 * then *out is set and 1 returned. abs and round (no parse) need a number; name is for the
 * message. */
static int number_operand(struct rs *rs, const struct jnode *at, const char *name,
                          const struct jv *v, const struct args *a, bool parse, bool want_float,
                          bool *is_int, int64_t *i, double *d, struct jv *out)
{
    const struct jv *def = jinja__arg(a, 0, NULL);
    enum vtype t = jv_type(v);
    *is_int = false;
    *i = 0;
    *d = 0;
    if (jv_is_int(v)) {
        *i = jv_int(v);
        *is_int = true;
    } else if (t == VT_FLOAT) {
        *d = json_object_get_double(v->j);
    } else if (t == VT_STR && parse) {
        size_t n;
        const char *s = jv_str(v, &n);
        char tmp[64];
        size_t lo, hi;
        jinja__strip_range(s, n, NULL, 0, true, true, &lo, &hi);
        if (hi - lo >= sizeof(tmp) || hi == lo) {
            int rc = num_fallback(rs, def, want_float, out);
            return rc ? rc : 1;
        }
        memcpy(tmp, s + lo, hi - lo);
        tmp[hi - lo] = '\0';
        char *end;
        errno = 0;
        long long ll = strtoll(tmp, &end, 10);
        if (*end == '\0' && errno == 0) {
            *i = ll;
            *is_int = true;
        } else {
            *d = strtod(tmp, &end);
            if (*end != '\0') {
                int rc = num_fallback(rs, def, want_float, out);
                return rc ? rc : 1;
            }
        }
    } else if (parse) {
        int rc = num_fallback(rs, def, want_float, out);
        return rc ? rc : 1;
    } else {
        return jinja__fail(rs, at, -EINVAL, "filter '%s' needs a number, got %s", name,
                           jv_type_name(v));
    }
    return 0;
}

static int filter_int(struct rs *rs, const struct jnode *at, const struct jv *v,
                      struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    bool is_int;
    int64_t i;
    double d;
    int rc = number_operand(rs, at, "int", v, a, true, false, &is_int, &i, &d, out);
    if (rc) {
        return rc < 0 ? rc : 0;
    }
    if (is_int) {
        return jinja__new_int(rs, i, out);
    }
    if (!(d > -9.2e18 && d < 9.2e18)) {
        return jinja__fail(rs, at, -EINVAL, "int: %g out of range", d);
    }
    return jinja__new_int(rs, (int64_t)d, out);
}

static int filter_float(struct rs *rs, const struct jnode *at, const struct jv *v,
                        struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    bool is_int;
    int64_t i;
    double d;
    int rc = number_operand(rs, at, "float", v, a, true, true, &is_int, &i, &d, out);
    if (rc) {
        return rc < 0 ? rc : 0;
    }
    return jinja__new_float(rs, is_int ? (double)i : d, out);
}

static int filter_abs(struct rs *rs, const struct jnode *at, const struct jv *v,
                      struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    bool is_int;
    int64_t i;
    double d;
    int rc = number_operand(rs, at, "abs", v, a, false, false, &is_int, &i, &d, out);
    if (rc) {
        return rc;
    }
    if (is_int) {
        if (i == INT64_MIN) {
            return jinja__fail(rs, at, -EINVAL, "abs: integer overflow");
        }
        return jinja__new_int(rs, i < 0 ? -i : i, out);
    }
    return jinja__new_float(rs, fabs(d), out);
}

/* round(precision=0, method='common') -> float */
static int filter_round(struct rs *rs, const struct jnode *at, const struct jv *v,
                        struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    bool is_int;
    int64_t i;
    double d;
    int rc = number_operand(rs, at, "round", v, a, false, false, &is_int, &i, &d, out);
    if (rc) {
        return rc;
    }
    int64_t prec = 0;
    const struct jv *pv = jinja__arg(a, 0, "precision");
    if (pv) {
        rc = jinja__want_int(rs, at, pv, "round precision", &prec);
        if (rc) {
            return rc;
        }
    }
    if (prec < 0 || prec > 15) {
        return jinja__fail(rs, at, -EINVAL, "round precision out of range");
    }
    const char *method = "common";
    size_t mlen = 6;
    const struct jv *mv = jinja__arg(a, 1, "method");
    if (mv) {
        rc = jinja__want_str(rs, at, mv, "round method", &method, &mlen);
        if (rc) {
            return rc;
        }
    }
    double x = is_int ? (double)i : d, m = pow(10.0, (double)prec);
    if (strcmp(method, "ceil") == 0) {
        return jinja__new_float(rs, ceil(x * m) / m, out);
    }
    if (strcmp(method, "floor") == 0) {
        return jinja__new_float(rs, floor(x * m) / m, out);
    }
    if (strcmp(method, "common") != 0) {
        return jinja__fail(rs, at, -EINVAL, "round method must be common, ceil or floor");
    }
    if (is_int) { /* Python's round(int, n) is the int */
        return jinja__new_int(rs, i, out);
    }
    if (!isfinite(x)) {
        return jinja__new_float(rs, x, out);
    }
    /* Python's round(): the exact binary value rounded half to even, which is what printf
     * does with the default rounding mode */
    char buf[400];
    snprintf(buf, sizeof(buf), "%.*f", (int)prec, x);
    return jinja__new_float(rs, strtod(buf, NULL), out);
}

/* A mapping's (key, value) pairs; undefined gives none. */
static int filter_items(struct rs *rs, const struct jnode *at, const struct jv *v,
                        struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    enum vtype t = jv_type(v);
    if (t == VT_UNDEF) {
        struct json_object *empty = json_object_new_array();
        if (!empty) {
            return jinja__oom(rs);
        }
        *out = jv_own(empty);
        return 0;
    }
    if (t != VT_DICT && t != VT_NS) {
        return jinja__fail(rs, at, -EINVAL, "items: expected a mapping, got %s", jv_type_name(v));
    }
    return jinja__call_method(rs, at, v, "items", a, out);
}

/* dictsort(case_sensitive, by, reverse): the pairs sorted by key. */
static int filter_dictsort(struct rs *rs, const struct jnode *at, const struct jv *v,
                           struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    enum vtype t = jv_type(v);
    if (t != VT_DICT && t != VT_NS) {
        return jinja__fail(rs, at, -EINVAL, "dictsort: expected a mapping, got %s",
                           jv_type_name(v));
    }
    struct jv pairs = {0};
    int rc = jinja__call_method(rs, at, v, "items", a, &pairs);
    if (rc) {
        return rc;
    }
    const struct jv *cv = jinja__arg(a, 0, "case_sensitive"), *bv = jinja__arg(a, 1, "by");
    const struct jv *rv = jinja__arg(a, 2, "reverse");
    int elem = 0;
    if (bv) {
        const char *by;
        size_t bn;
        rc = jinja__want_str(rs, at, bv, "dictsort by", &by, &bn);
        if (!rc && strcmp(by, "value") == 0) {
            elem = 1;
        } else if (!rc && strcmp(by, "key") != 0) {
            rc = jinja__fail(rs, at, -EINVAL, "dictsort: by must be 'key' or 'value'");
        }
    }
    if (!rc) {
        rc = sort_list(rs, at, pairs.j, NULL, elem, rv && jv_truthy(rv), cv && jv_truthy(cv), out);
    }
    jv_put(&pairs);
    return rc;
}

/* The filters below get the operand's items (JF_ITEMS). */

/* A list of the items; a tuple becomes a list. */
static int filter_list(struct rs *rs, const struct jnode *at, const struct jv *v,
                       struct json_object *items, const struct args *a, struct jv *out)
{
    (void)at, (void)v, (void)a;
    if (!jinja__is_tuple(items)) {
        *out = jv_ref(items);
        return 0;
    }
    struct json_object *copy = json_object_new_array();
    size_t n = json_object_array_length(items);
    int rc = 0;
    for (size_t i = 0; copy && !rc && i < n; i++) {
        struct json_object *e = json_object_array_get_idx(items, i);
        if (json_object_array_add(copy, e ? json_object_get(e) : NULL) != 0) {
            json_object_put(e);
            rc = jinja__oom(rs);
        }
    }
    if (!copy || rc) {
        json_object_put(copy);
        return rc ? rc : jinja__oom(rs);
    }
    *out = jv_own(copy);
    return 0;
}

static int filter_first(struct rs *rs, const struct jnode *at, const struct jv *v,
                        struct json_object *items, const struct args *a, struct jv *out)
{
    (void)rs, (void)v, (void)a;
    size_t n = json_object_array_length(items);
    *out = n == 0 ? jv_undef(NULL, at) : jv_ref(json_object_array_get_idx(items, 0));
    return 0;
}

static int filter_last(struct rs *rs, const struct jnode *at, const struct jv *v,
                       struct json_object *items, const struct args *a, struct jv *out)
{
    (void)rs, (void)v, (void)a;
    size_t n = json_object_array_length(items);
    *out = n == 0 ? jv_undef(NULL, at) : jv_ref(json_object_array_get_idx(items, n - 1));
    return 0;
}

/* A string reversed by characters, anything else as a reversed list. */
static int filter_reverse(struct rs *rs, const struct jnode *at, const struct jv *v,
                          struct json_object *items, const struct args *a, struct jv *out)
{
    (void)a;
    size_t n = json_object_array_length(items);
    int rc = 0;
    if (jv_type(v) == VT_STR) {
        struct buf b;
        buf_init(&b, rs->lim.max_output);
        for (size_t i = n; !rc && i > 0; i--) {
            struct json_object *c = json_object_array_get_idx(items, i - 1);
            rc = jinja__buf_add(rs, at, &b, json_object_get_string(c),
                                (size_t)json_object_get_string_len(c));
        }
        if (rc) {
            buf_free(&b);
            return rc;
        }
        return jinja__new_buf_str(rs, at, &b, out);
    }
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        rc = jinja__oom(rs);
    }
    for (size_t i = n; !rc && i > 0; i--) {
        struct json_object *e = json_object_array_get_idx(items, i - 1);
        if (json_object_array_add(arr, e ? json_object_get(e) : NULL) != 0) {
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

/* join(d='', attribute=None) */
static int filter_join(struct rs *rs, const struct jnode *at, const struct jv *v,
                       struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    const char *sep = "";
    size_t sn = 0;
    const struct jv *sv = jinja__arg(a, 0, "d"), *av = jinja__arg(a, 1, "attribute");
    const char *attr = NULL;
    size_t an;
    int rc = 0;
    if (sv) {
        rc = jinja__want_str(rs, at, sv, "join separator", &sep, &sn);
    }
    if (!rc && av) {
        rc = jinja__want_str(rs, at, av, "join attribute", &attr, &an);
    }
    return rc ? rc : jinja__join_values(rs, at, items, sep, sn, attr, out);
}

/* sort(reverse=False, case_sensitive=False, attribute=None) */
static int filter_sort(struct rs *rs, const struct jnode *at, const struct jv *v,
                       struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    const struct jv *rv = jinja__arg(a, 0, "reverse"), *av = jinja__arg(a, 2, "attribute");
    const struct jv *cv = jinja__arg(a, 1, "case_sensitive");
    const char *attr = NULL;
    size_t an;
    int rc = 0;
    if (av) {
        rc = jinja__want_str(rs, at, av, "sort attribute", &attr, &an);
    }
    return rc ? rc
              : sort_list(rs, at, items, attr, -1, rv && jv_truthy(rv), cv && jv_truthy(cv), out);
}

/* The items without repeats, first occurrence kept. */
static int filter_unique(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v, (void)a;
    size_t n = json_object_array_length(items);
    struct json_object *arr = json_object_new_array();
    int rc = arr ? jinja__count_iterations(rs, at, n * n / 16 + n) : jinja__oom(rs);
    for (size_t i = 0; !rc && i < n; i++) {
        struct jv e = jv_own(json_object_array_get_idx(items, i));
        bool seen = false;
        struct jv have = jv_own(arr);
        rc = jinja__contains(rs, at, &e, &have, &seen);
        if (!rc && !seen && json_object_array_add(arr, e.j ? json_object_get(e.j) : NULL)) {
            json_object_put(e.j);
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

/* min/max(case_sensitive=False, attribute=None): the smallest (want < 0) or largest (want > 0)
 * item, compared as sort compares; undefined when there is none. */
static int extreme(struct rs *rs, const struct jnode *at, struct json_object *items,
                   const struct args *a, int want, struct jv *out)
{
    *out = jv_undef(NULL, at);
    const struct jv *cv = jinja__arg(a, 0, "case_sensitive"), *av = jinja__arg(a, 1, "attribute");
    struct sort_ctx sc = {.rs = rs, .at = at, .case_sensitive = cv && jv_truthy(cv), .elem = -1};
    size_t an;
    int rc = av ? jinja__want_str(rs, at, av, "attribute", &sc.attr, &an) : 0;
    size_t n = json_object_array_length(items);
    struct json_object *best = NULL;
    for (size_t i = 0; !rc && i < n; i++) {
        struct json_object *e = json_object_array_get_idx(items, i);
        if (i == 0) {
            best = e;
            continue;
        }
        int c = sort_cmp(&sc, e, best);
        rc = sc.rc;
        if (!rc && (want < 0 ? c < 0 : c > 0)) {
            best = e;
        }
    }
    if (!rc && n > 0) {
        *out = jv_ref(best);
    }
    return rc;
}

static int filter_min(struct rs *rs, const struct jnode *at, const struct jv *v,
                      struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    return extreme(rs, at, items, a, -1, out);
}

static int filter_max(struct rs *rs, const struct jnode *at, const struct jv *v,
                      struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    return extreme(rs, at, items, a, 1, out);
}

/* sum(attribute=None, start=0) */
static int filter_sum(struct rs *rs, const struct jnode *at, const struct jv *v,
                      struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    size_t n = json_object_array_length(items);
    struct jv acc = {0};
    const struct jv *start = jinja__arg(a, 1, "start");
    int rc = start ? (acc = jv_copy(start), 0) : jinja__new_int(rs, 0, &acc);
    const struct jv *av = jinja__arg(a, 0, "attribute");
    const char *attr = NULL;
    size_t an;
    if (!rc && av) {
        rc = jinja__want_str(rs, at, av, "sum attribute", &attr, &an);
    }
    for (size_t i = 0; !rc && i < n; i++) {
        struct jv e = jv_own(json_object_array_get_idx(items, i)), m = {0}, r = {0};
        rc = attr ? jinja__get_member(rs, at, &e, attr, &m) : (m = jv_copy(&e), 0);
        if (!rc) {
            rc = jinja__arith(rs, at, "+", &acc, &m, &r);
        }
        jv_put(&m);
        if (!rc) {
            jv_put(&acc);
            acc = r;
        }
    }
    if (rc) {
        jv_put(&acc);
        return rc;
    }
    *out = acc;
    return 0;
}

/* select/reject/selectattr/rejectattr/map over items: by_attr looks at each item's attribute
 * (the first argument), reject keeps the items the test fails. */
static int filter_seq(struct rs *rs, const struct jnode *at, struct json_object *items,
                      const struct args *a, bool is_map, bool by_attr, bool reject, struct jv *out)
{
    const char *attr = NULL, *fname = NULL;
    size_t len;
    int first_extra = 0;
    int rc = 0;
    if (is_map) {
        const struct jv *av = jinja__arg(a, -1, "attribute");
        if (av) {
            rc = jinja__want_str(rs, at, av, "map attribute", &attr, &len);
        } else {
            rc = jinja__want_str(rs, at, jinja__arg(a, 0, NULL), "map filter name", &fname, &len);
            first_extra = 1;
        }
    } else if (by_attr) {
        rc = jinja__want_str(rs, at, jinja__arg(a, 0, NULL), "attribute name", &attr, &len);
        first_extra = 1;
    }
    const char *test = NULL;
    if (!rc && !is_map) {
        const struct jv *tv = jinja__arg(a, first_extra, NULL);
        if (tv) {
            rc = jinja__want_str(rs, at, tv, "test name", &test, &len);
        }
    }
    if (rc) {
        return rc;
    }
    struct args extra;
    memset(&extra, 0, sizeof(extra));
    int skip = is_map ? first_extra : first_extra + 1;
    for (int i = skip; i < a->n_pos; i++) {
        extra.pos[extra.n_pos++] = a->pos[i];
    }
    for (int i = 0; i < a->n_kw; i++) {
        if (strcmp(a->kw_name[i], "attribute") != 0 && strcmp(a->kw_name[i], "default") != 0) {
            extra.kw_name[extra.n_kw] = a->kw_name[i];
            extra.kw[extra.n_kw++] = a->kw[i];
        }
    }
    const struct jv *map_default = is_map ? jinja__arg(a, -1, "default") : NULL;
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        return jinja__oom(rs);
    }
    size_t n = json_object_array_length(items);
    rc = jinja__count_iterations(rs, at, n);
    for (size_t i = 0; !rc && i < n; i++) {
        struct jv e = jv_own(json_object_array_get_idx(items, i));
        struct jv m = {0};
        if (attr) {
            rc = jinja__get_member(rs, at, &e, attr, &m);
        } else {
            m = jv_copy(&e);
        }
        if (rc) {
            break;
        }
        if (is_map) {
            struct jv r = {0};
            if (fname) {
                rc = jinja__apply_filter(rs, at, fname, &m, &extra, &r);
            } else if (jv_type(&m) == VT_UNDEF && map_default) {
                r = jv_copy(map_default);
            } else {
                r = jv_copy(&m);
            }
            if (!rc) {
                struct json_object *j = jv_to_json(&r);
                if (json_object_array_add(arr, j) != 0) {
                    json_object_put(j);
                    rc = jinja__oom(rs);
                }
            }
            jv_put(&r);
        } else {
            bool keep = jv_truthy(&m);
            if (test) {
                rc = jinja__apply_test(rs, at, test, &m, &extra, &keep);
            }
            if (!rc && keep != reject) {
                if (json_object_array_add(arr, e.j ? json_object_get(e.j) : NULL) != 0) {
                    json_object_put(e.j);
                    rc = jinja__oom(rs);
                }
            }
        }
        jv_put(&m);
    }
    if (rc) {
        json_object_put(arr);
        return rc;
    }
    *out = jv_own(arr);
    return 0;
}

static int filter_select(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    return filter_seq(rs, at, items, a, false, false, false, out);
}

static int filter_reject(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    return filter_seq(rs, at, items, a, false, false, true, out);
}

static int filter_selectattr(struct rs *rs, const struct jnode *at, const struct jv *v,
                             struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    return filter_seq(rs, at, items, a, false, true, false, out);
}

static int filter_rejectattr(struct rs *rs, const struct jnode *at, const struct jv *v,
                             struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    return filter_seq(rs, at, items, a, false, true, true, out);
}

static int filter_map(struct rs *rs, const struct jnode *at, const struct jv *v,
                      struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    return filter_seq(rs, at, items, a, true, false, false, out);
}

/* Jinja's indent(width=4, first=False, blank=False); width may be a string. */
static int filter_indent(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    const struct jv *wv = jinja__arg(a, 0, "width"), *fv = jinja__arg(a, 1, "first"),
                    *bv = jinja__arg(a, 2, "blank");
    char spaces[257];
    const char *pad = spaces;
    size_t padn = 4;
    int rc = 0;
    if (wv && jv_type(wv) == VT_STR) {
        pad = jv_str(wv, &padn);
    } else if (wv) {
        int64_t width;
        rc = jinja__want_int(rs, at, wv, "indent width", &width);
        if (rc) {
            return rc;
        }
        if (width < 0 || width > 256) {
            return jinja__fail(rs, at, -EINVAL, "indent width out of range");
        }
        padn = (size_t)width;
    }
    memset(spaces, ' ', sizeof(spaces));
    bool first = fv && jv_truthy(fv), blank = bv && jv_truthy(bv);
    struct jv sv = {0};
    rc = jinja__to_str(rs, at, v, &sv);
    if (rc) {
        return rc;
    }
    size_t n;
    const char *s = jv_str(&sv, &n);
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    size_t i = 0;
    bool line_first = true;
    while (!rc && i < n) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - s) : n;
        if ((!line_first || first) && (e > i || blank)) {
            rc = jinja__buf_add(rs, at, &b, pad, padn);
        }
        if (!rc) {
            rc = jinja__buf_add(rs, at, &b, s + i, e - i + (nl ? 1 : 0));
        }
        line_first = false;
        i = e + (nl ? 1 : 0);
    }
    jv_put(&sv);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

/* ---- text and grouping filters -------------------------------------------------------------- */

/* forceescape: HTML-escape str(v) even when it is Markup already. */
static int filter_forceescape(struct rs *rs, const struct jnode *at, const struct jv *v,
                              struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    struct jv sv = {0};
    int rc = jinja__to_str(rs, at, v, &sv);
    if (rc) {
        return rc;
    }
    struct jv plain = sv;
    struct json_object *copy = NULL;
    if (jinja__is_safe(&sv)) { /* a plain copy, so that it is escaped */
        size_t n;
        const char *s = jv_str(&sv, &n);
        copy = json_object_new_string_len(s, (int)n);
        if (!copy) {
            jv_put(&sv);
            return jinja__oom(rs);
        }
        plain = jv_own(copy);
    }
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    rc = jinja__append_escaped(rs, at, &plain, &b);
    json_object_put(copy);
    jv_put(&sv);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    rc = jinja__new_buf_str(rs, at, &b, out);
    if (!rc) {
        jinja__mark_safe(out->j);
    }
    return rc;
}

/* truncate(length=255, killwords=False, end='...', leeway=5), as Jinja2 (lengths in code
 * points). */
static int filter_truncate(struct rs *rs, const struct jnode *at, const struct jv *v,
                           struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    int64_t length = 255, leeway = 5;
    const char *end = "...";
    size_t en = 3;
    const struct jv *lv = jinja__arg(a, 0, "length"), *kv = jinja__arg(a, 1, "killwords");
    const struct jv *ev = jinja__arg(a, 2, "end"), *wv = jinja__arg(a, 3, "leeway");
    int rc = lv ? jinja__want_int(rs, at, lv, "truncate length", &length) : 0;
    if (!rc && ev) {
        rc = jinja__want_str(rs, at, ev, "truncate end", &end, &en);
    }
    if (!rc && wv && jv_type(wv) != VT_NONE) {
        rc = jinja__want_int(rs, at, wv, "truncate leeway", &leeway);
    }
    struct jv sv = {0};
    if (!rc) {
        rc = jinja__to_str(rs, at, v, &sv);
    }
    if (rc) {
        return rc;
    }
    size_t en_chars = jinja__u8_count(end, en);
    if (length < (int64_t)en_chars || leeway < 0) {
        jv_put(&sv);
        return jinja__fail(rs, at, -EINVAL, "truncate: length must be at least the end's");
    }
    size_t n;
    const char *s = jv_str(&sv, &n);
    if ((int64_t)jinja__u8_count(s, n) <= length + leeway) {
        *out = sv;
        return 0;
    }
    size_t keep = 0; /* bytes of the first length - len(end) characters */
    for (int64_t c = 0; keep < n && c < length - (int64_t)en_chars; c++) {
        keep += jinja__u8_len((const unsigned char *)s, n, keep);
    }
    if (!(kv && jv_truthy(kv))) { /* rsplit(" ", 1)[0]: drop the last partial word */
        for (size_t k = keep; k-- > 0;) {
            if (s[k] == ' ') {
                keep = k;
                break;
            }
        }
    }
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    rc = jinja__buf_add(rs, at, &b, s, keep);
    if (!rc) {
        rc = jinja__buf_add(rs, at, &b, end, en);
    }
    jv_put(&sv);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

/* wordcount: runs of word characters (letters, digits, _ and any non-ASCII non-space). */
static int filter_wordcount(struct rs *rs, const struct jnode *at, const struct jv *v,
                            struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    struct jv sv = {0};
    int rc = jinja__to_str(rs, at, v, &sv);
    if (rc) {
        return rc;
    }
    size_t n;
    const char *s = jv_str(&sv, &n);
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < n;) {
        size_t l = jinja__u8_len((const unsigned char *)s, n, i);
        unsigned long c = jinja__u8_decode((const unsigned char *)s + i, l);
        bool w = c >= 0x80 ? !jinja__isspace(c)
                           : (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
                                 c == '_';
        words += w && !in_word;
        in_word = w;
        i += l;
    }
    jv_put(&sv);
    return jinja__new_int(rs, words, out);
}

/* center(width=80): str(v).center(width). */
static int filter_center(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    struct jv sv = {0};
    int rc = jinja__to_str(rs, at, v, &sv);
    if (rc) {
        return rc;
    }
    struct args ca = {0};
    const struct jv *wv = jinja__arg(a, 0, "width");
    struct json_object *w80 = wv ? NULL : json_object_new_int(80);
    if (!wv && !w80) {
        jv_put(&sv);
        return jinja__oom(rs);
    }
    ca.pos[0] = wv ? *wv : jv_own(w80); /* borrowed views */
    ca.n_pos = 1;
    rc = jinja__call_method(rs, at, &sv, "center", &ca, out);
    json_object_put(w80);
    jv_put(&sv);
    return rc;
}

/* batch(linecount, fill_with=None) and slice(slices, fill_with=None): lists of lists. */
static int filter_batch_slice(struct rs *rs, const struct jnode *at, struct json_object *items,
                              const struct args *a, bool slice, struct jv *out)
{
    int64_t k = 0;
    int rc = jinja__want_int(rs, at, jinja__arg(a, 0, slice ? "slices" : "linecount"),
                             slice ? "slices" : "linecount", &k);
    if (rc) {
        return rc;
    }
    if (k <= 0 || k > 1000000) {
        return jinja__fail(rs, at, -EINVAL, "%s must be positive", slice ? "slices" : "linecount");
    }
    const struct jv *fill = jinja__arg(a, 1, "fill_with");
    if (fill && jv_type(fill) == VT_NONE) {
        fill = NULL;
    }
    size_t n = json_object_array_length(items), size = (size_t)k;
    size_t groups = slice ? size : (n + size - 1) / size;
    rc = jinja__count_iterations(rs, at, n + groups);
    struct json_object *arr = rc ? NULL : json_object_new_array();
    if (!rc && !arr) {
        rc = jinja__oom(rs);
    }
    size_t per = slice ? n / size : size, extra = slice ? n % size : 0, offset = 0;
    for (size_t g = 0; !rc && g < groups; g++) {
        size_t start = slice ? offset + g * per : g * size;
        if (slice && g < extra) {
            offset++;
        }
        size_t end = slice ? offset + (g + 1) * per : (start + size < n ? start + size : n);
        struct json_object *grp = json_object_new_array();
        rc = grp && json_object_array_add(arr, grp) == 0 ? 0
                                                         : (json_object_put(grp), jinja__oom(rs));
        for (size_t i = start; !rc && i < end; i++) {
            struct json_object *e = json_object_array_get_idx(items, i);
            if (json_object_array_add(grp, e ? json_object_get(e) : NULL) != 0) {
                json_object_put(e);
                rc = jinja__oom(rs);
            }
        }
        bool pad = fill && (slice ? g >= extra : end - start < size);
        for (size_t i = slice ? 0 : end - start; !rc && pad && i < (slice ? 1 : size); i++) {
            struct json_object *j = jv_to_json(fill);
            if (json_object_array_add(grp, j) != 0) {
                json_object_put(j);
                rc = jinja__oom(rs);
            }
        }
    }
    if (rc) {
        json_object_put(arr);
        return rc;
    }
    *out = jv_own(arr);
    return 0;
}

static int filter_batch(struct rs *rs, const struct jnode *at, const struct jv *v,
                        struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    return filter_batch_slice(rs, at, items, a, false, out);
}

static int filter_slice(struct rs *rs, const struct jnode *at, const struct jv *v,
                        struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    return filter_batch_slice(rs, at, items, a, true, out);
}

/* groupby(attribute, default=None, case_sensitive=False): (grouper, list) tuples, sorted by the
 * attribute; the grouper is the first item's value (its own case), each tuple also has the
 * attributes grouper and list. */
static int filter_groupby(struct rs *rs, const struct jnode *at, const struct jv *v,
                          struct json_object *items, const struct args *a, struct jv *out)
{
    (void)v;
    const char *attr;
    size_t an;
    int rc =
        jinja__want_str(rs, at, jinja__arg(a, 0, "attribute"), "groupby attribute", &attr, &an);
    if (rc) {
        return rc;
    }
    const struct jv *dv = jinja__arg(a, 1, "default"), *cv = jinja__arg(a, 2, "case_sensitive");
    bool cs = cv && jv_truthy(cv);
    size_t n = json_object_array_length(items);
    struct json_object *pairs = json_object_new_array(); /* [key, item] */
    rc = pairs ? 0 : jinja__oom(rs);
    for (size_t i = 0; !rc && i < n; i++) {
        struct jv item = jv_own(json_object_array_get_idx(items, i)); /* borrowed view */
        struct jv key = {0};
        rc = jinja__get_member(rs, at, &item, attr, &key);
        if (!rc && jv_type(&key) == VT_UNDEF && dv) {
            key = jv_copy(dv);
        }
        struct json_object *p = rc ? NULL : json_object_new_array();
        if (!rc && (!p || json_object_array_add(pairs, p) != 0)) {
            json_object_put(p);
            rc = jinja__oom(rs);
        }
        if (!rc && jv_type(&key) == VT_UNDEF) {
            rc = jinja__fail(rs, at, -EINVAL, "groupby: an item has no attribute '%s'", attr);
        }
        if (!rc && (json_object_array_add(p, jv_to_json(&key)) != 0 ||
                    json_object_array_add(p, item.j ? json_object_get(item.j) : NULL) != 0)) {
            rc = jinja__oom(rs);
        }
        jv_put(&key);
    }
    struct jv sorted = {0};
    if (!rc) {
        rc = sort_list(rs, at, pairs, NULL, 0, false, cs, &sorted);
    }
    json_object_put(pairs);
    struct json_object *groups = rc ? NULL : json_object_new_array();
    if (!rc && !groups) {
        rc = jinja__oom(rs);
    }
    struct sort_ctx sc = {.rs = rs, .at = at, .case_sensitive = cs, .elem = 0};
    struct json_object *list = NULL;
    size_t m = rc ? 0 : json_object_array_length(sorted.j);
    for (size_t i = 0; !rc && i < m; i++) {
        struct json_object *p = json_object_array_get_idx(sorted.j, i);
        if (i == 0 || sort_cmp(&sc, json_object_array_get_idx(sorted.j, i - 1), p) != 0) {
            struct json_object *g = json_object_new_array();
            list = json_object_new_array();
            struct json_object *key = json_object_array_get_idx(p, 0);
            if (!g || !list || json_object_array_add(groups, g) != 0) {
                json_object_put(g);
                json_object_put(list);
                rc = jinja__oom(rs);
                break;
            }
            if (json_object_array_add(g, key ? json_object_get(key) : NULL) != 0 ||
                json_object_array_add(g, list) != 0) {
                rc = jinja__oom(rs);
                break;
            }
            jinja__mark_group(g);
        }
        struct json_object *item = json_object_array_get_idx(p, 1);
        if (json_object_array_add(list, item ? json_object_get(item) : NULL) != 0) {
            json_object_put(item);
            rc = jinja__oom(rs);
        }
    }
    if (!rc) {
        rc = sc.rc;
    }
    jv_put(&sorted);
    if (rc) {
        json_object_put(groups);
        return rc;
    }
    *out = jv_own(groups);
    return 0;
}

/* striptags: tags and comments removed, whitespace runs collapsed to one space, the basic
 * entities unescaped (Markup.striptags). */
static int filter_striptags(struct rs *rs, const struct jnode *at, const struct jv *v,
                            struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items, (void)a;
    struct jv sv = {0};
    int rc = jinja__to_str(rs, at, v, &sv);
    if (rc) {
        return rc;
    }
    size_t n;
    const char *s = jv_str(&sv, &n);
    static const char *const ents[][2] = {{"&amp;", "&"},        {"&lt;", "<"},    {"&gt;", ">"},
                                          {"&#34;", "\""},       {"&quot;", "\""}, {"&#39;", "'"},
                                          {"&nbsp;", "\xc2\xa0"}};
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    bool space = false;
    for (size_t i = 0; !rc && i < n;) {
        if (n - i >= 4 && memcmp(s + i, "<!--", 4) == 0) {
            const char *e = memmem(s + i + 4, n - i - 4, "-->", 3);
            if (e) {
                i = (size_t)(e - s) + 3;
                continue;
            }
        }
        if (s[i] == '<') {
            const char *e = memchr(s + i, '>', n - i);
            if (e) {
                i = (size_t)(e - s) + 1;
                continue;
            }
        }
        size_t l = jinja__u8_len((const unsigned char *)s, n, i);
        if (jinja__isspace(jinja__u8_decode((const unsigned char *)s + i, l))) {
            space = b.len > 0;
            i += l;
            continue;
        }
        if (space) {
            rc = jinja__buf_add(rs, at, &b, " ", 1);
            space = false;
        }
        const char *rep = NULL;
        size_t used = l;
        for (size_t k = 0; s[i] == '&' && k < ARRAY_SIZE(ents); k++) {
            size_t el = strlen(ents[k][0]);
            if (n - i >= el && memcmp(s + i, ents[k][0], el) == 0) {
                rep = ents[k][1];
                used = el;
                break;
            }
        }
        if (!rc) {
            rc = rep ? jinja__buf_adds(rs, at, &b, rep) : jinja__buf_add(rs, at, &b, s + i, l);
        }
        i += used;
    }
    jv_put(&sv);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

/* format(*args, **kwargs): str(v) % args (or % kwargs, as a mapping). */
static int filter_format(struct rs *rs, const struct jnode *at, const struct jv *v,
                         struct json_object *items, const struct args *a, struct jv *out)
{
    (void)items;
    if (a->n_pos > 0 && a->n_kw > 0) {
        return jinja__fail(rs, at, -EINVAL, "format: positional and keyword arguments together");
    }
    struct json_object *args = a->n_kw > 0 ? json_object_new_object() : json_object_new_array();
    int rc = args ? 0 : jinja__oom(rs);
    for (int i = 0; !rc && i < (a->n_kw > 0 ? a->n_kw : a->n_pos); i++) {
        struct json_object *j = jv_to_json(a->n_kw > 0 ? &a->kw[i] : &a->pos[i]);
        int add = a->n_kw > 0 ? json_object_object_add(args, a->kw_name[i], j)
                              : json_object_array_add(args, j);
        if (add != 0) {
            json_object_put(j);
            rc = jinja__oom(rs);
        }
    }
    struct jv sv = {0};
    if (!rc) {
        if (a->n_kw == 0) {
            jinja__mark_tuple(args);
        }
        rc = jinja__to_str(rs, at, v, &sv);
    }
    if (!rc) {
        size_t fn;
        const char *fs = jv_str(&sv, &fn);
        struct jv av = jv_own(args);
        rc = jinja__format_percent(rs, at, fs, fn, &av, out);
    }
    jv_put(&sv);
    json_object_put(args);
    return rc;
}

/* Sorted by strcmp. JF_ITEMS: the operand must be iterable (indent too, as it always was);
 * JF_FALSY_EMPTY: map and the select family treat a falsy operand as empty, as Jinja2 does. */
const struct jinja__filter jinja__filters[] = {
    {"abs", filter_abs, 0},
    {"batch", filter_batch, JF_ITEMS},
    {"capitalize", filter_capitalize, 0},
    {"center", filter_center, 0},
    {"count", filter_length, 0},
    {"d", filter_default, 0},
    {"default", filter_default, 0},
    {"dictsort", filter_dictsort, 0},
    {"e", filter_escape, 0},
    {"escape", filter_escape, 0},
    {"first", filter_first, JF_ITEMS},
    {"float", filter_float, 0},
    {"forceescape", filter_forceescape, 0},
    {"format", filter_format, 0},
    {"groupby", filter_groupby, JF_ITEMS},
    {"indent", filter_indent, JF_ITEMS},
    {"int", filter_int, 0},
    {"items", filter_items, 0},
    {"join", filter_join, JF_ITEMS},
    {"last", filter_last, JF_ITEMS},
    {"length", filter_length, 0},
    {"list", filter_list, JF_ITEMS},
    {"lower", filter_lower, 0},
    {"map", filter_map, JF_ITEMS | JF_FALSY_EMPTY},
    {"max", filter_max, JF_ITEMS},
    {"min", filter_min, JF_ITEMS},
    {"reject", filter_reject, JF_ITEMS | JF_FALSY_EMPTY},
    {"rejectattr", filter_rejectattr, JF_ITEMS | JF_FALSY_EMPTY},
    {"replace", filter_replace, 0},
    {"reverse", filter_reverse, JF_ITEMS},
    {"round", filter_round, 0},
    {"safe", filter_safe, 0},
    {"select", filter_select, JF_ITEMS | JF_FALSY_EMPTY},
    {"selectattr", filter_selectattr, JF_ITEMS | JF_FALSY_EMPTY},
    {"slice", filter_slice, JF_ITEMS},
    {"sort", filter_sort, JF_ITEMS},
    {"string", filter_string, 0},
    {"striptags", filter_striptags, 0},
    {"sum", filter_sum, JF_ITEMS},
    {"title", filter_title, 0},
    {"tojson", filter_tojson, 0},
    {"trim", filter_trim, 0},
    {"truncate", filter_truncate, 0},
    {"unique", filter_unique, JF_ITEMS},
    {"upper", filter_upper, 0},
    {"wordcount", filter_wordcount, 0},
};
const size_t jinja__n_filters = ARRAY_SIZE(jinja__filters);

const struct jinja__filter *jinja__filter_find(const char *name)
{
    return jinja__lookup(jinja__filters, jinja__n_filters, sizeof(jinja__filters[0]), name);
}

int jinja__apply_filter(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                        const struct args *a, struct jv *out)
{
    const struct jinja__filter *f = jinja__filter_find(name);
    if (!f) {
        return jinja__fail(rs, at, -EINVAL, "unknown filter '%s'", name);
    }
    if (!(f->flags & JF_ITEMS)) {
        return f->fn(rs, at, v, NULL, a, out);
    }
    struct json_object *items = NULL;
    int rc = 0;
    if ((f->flags & JF_FALSY_EMPTY) && !jv_truthy(v)) {
        items = json_object_new_array();
        rc = items ? 0 : jinja__oom(rs);
    } else {
        rc = jinja__iter_items(rs, at, v, &items);
    }
    if (rc) {
        return rc;
    }
    rc = f->fn(rs, at, v, items, a, out);
    json_object_put(items);
    return rc;
}
