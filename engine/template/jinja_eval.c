/*
 * Jinja evaluator: walks the syntax tree of jinja_parse.c against a json-c context.
 *
 * Values are json-c objects (one owned reference each; NULL is none) plus three kinds json
 * cannot hold: Undefined (a missing variable or attribute: prints as "", is falsy, iterates as
 * empty, and is an error to take an attribute of or to add to), namespace() objects (the only
 * mutable values, as in the sandbox) and macros. Tuples are json arrays.
 *
 * Filters and tests are the tables of jinja_filters.c; methods and globals those of
 * jinja_methods.c. This file is the core: values, scopes, expressions, statements, the API.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template/jinja_internal.h"
#include "lib/err.h"
#include "lib/buf.h"

const struct jinja_limits jinja_default_limits = {
    .max_output = 8u << 20,
    .max_iterations = 1000000,
    .max_depth = 64,
};

struct var {
    const char *name;
    struct jv val;
    struct var *next;
};

struct frame {
    struct var *vars;
    struct frame *parent;
};

/* ---- errors --------------------------------------------------------------------------------- */

/* Writes "line L column C: message" into the caller's error buffer. */
void jinja__fail_msg(struct rs *rs, const struct jnode *at, const char *fmt, ...)
{
    if (!rs->err || rs->errlen == 0) {
        return;
    }
    size_t n = 0;
    if (at) {
        tandem_set_err(rs->err, rs->errlen, "line %d column %d: ", at->line, at->col);
        n = strlen(rs->err);
    }
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(rs->err + n, rs->errlen - n, fmt, ap);
    va_end(ap);
}

int jinja__oom(struct rs *rs)
{
    tandem_set_err(rs->err, rs->errlen, "out of memory");
    return -ENOMEM;
}

/* ---- values --------------------------------------------------------------------------------- */

/* Tuples are json arrays carrying this marker as userdata: they print as (a, b). */
static char TUPLE_MARK;

/* The `loop` objects of for loops carry this marker: they have the method cycle(). */
static char LOOP_MARK;

int jinja__dict_key(struct rs *rs, const struct jnode *at, const struct jv *key, char buf[32],
                    const char **out)
{
    if (jv_type(key) == VT_STR) {
        *out = json_object_get_string(key->j);
        return 0;
    }
    if (jv_is_int(key)) {
        snprintf(buf, 32, "%c%lld", JINJA_INT_KEY, (long long)jv_int(key));
        *out = buf;
        return 0;
    }
    return jinja__fail(rs, at, -EINVAL, "dict keys must be strings or integers, got %s",
                       jv_type_name(key));
}

bool jinja__int_key(const char *k, int64_t *value)
{
    if (k[0] != JINJA_INT_KEY || k[1] == '\0') {
        return false;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(k + 1, &end, 10);
    if (errno || *end != '\0') {
        return false;
    }
    *value = v;
    return true;
}

int jinja__key_value(struct rs *rs, const char *k, struct jv *out)
{
    int64_t v;
    if (jinja__int_key(k, &v)) {
        return jinja__new_int(rs, v, out);
    }
    struct json_object *j = json_object_new_string(k);
    if (!j) {
        return jinja__oom(rs);
    }
    *out = jv_own(j);
    return 0;
}

/* cycler and joiner objects carry one of these (see jinja__mark_obj). */
static char OBJ_MARKS[2];

void jinja__mark_obj(struct json_object *obj, int kind)
{
    json_object_set_userdata(obj, &OBJ_MARKS[kind - 1], NULL);
}

int jinja__obj_kind(const struct jv *v)
{
    if (v->kind != JV_NS) {
        return 0;
    }
    void *u = json_object_get_userdata(v->j);
    return u == &OBJ_MARKS[0] ? JO_CYCLER : u == &OBJ_MARKS[1] ? JO_JOINER : 0;
}

/* groupby's tuples carry this marker (see jinja__mark_group). */
static char GROUP_MARK;

void jinja__mark_group(struct json_object *arr)
{
    json_object_set_userdata(arr, &GROUP_MARK, NULL);
}

/* Markup strings carry this marker (see jinja__mark_safe). */
static char SAFE_MARK;

void jinja__mark_safe(struct json_object *str)
{
    json_object_set_userdata(str, &SAFE_MARK, NULL);
}

bool jinja__is_safe(const struct jv *v)
{
    return jv_type(v) == VT_STR && json_object_get_userdata(v->j) == &SAFE_MARK;
}

int jinja__append_escaped(struct rs *rs, const struct jnode *at, const struct jv *v, struct buf *b)
{
    if (jinja__is_safe(v)) {
        return jinja__append_str(rs, at, v, b);
    }
    struct jv sv = {0};
    int rc = jinja__to_str(rs, at, v, &sv);
    if (rc) {
        return rc;
    }
    size_t n;
    const char *s = jv_str(&sv, &n);
    size_t from = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        const char *rep = s[i] == '&'    ? "&amp;"
                          : s[i] == '<'  ? "&lt;"
                          : s[i] == '>'  ? "&gt;"
                          : s[i] == '"'  ? "&#34;"
                          : s[i] == '\'' ? "&#39;"
                                         : NULL;
        if (rep) {
            rc = jinja__buf_add(rs, at, b, s + from, i - from);
            if (!rc) {
                rc = jinja__buf_adds(rs, at, b, rep);
            }
            from = i + 1;
        }
    }
    if (!rc) {
        rc = jinja__buf_add(rs, at, b, s + from, n - from);
    }
    jv_put(&sv);
    return rc;
}

void jinja__mark_tuple(struct json_object *arr)
{
    json_object_set_userdata(arr, &TUPLE_MARK, NULL);
}

bool jinja__is_tuple(struct json_object *arr)
{
    return json_object_get_userdata(arr) == &TUPLE_MARK;
}

int jinja__new_str(struct rs *rs, const struct jnode *at, const char *s, size_t len, struct jv *out)
{
    if (len > rs->lim.max_output) {
        return jinja__fail(rs, at, -E2BIG, "string of %zu bytes exceeds the output limit", len);
    }
    struct json_object *j = json_object_new_string_len(s, (int)len);
    if (!j) {
        return jinja__oom(rs);
    }
    *out = jv_own(j);
    return 0;
}

int jinja__new_buf_str(struct rs *rs, const struct jnode *at, struct buf *b, struct jv *out)
{
    int rc = jinja__new_str(rs, at, b->data ? b->data : "", b->len, out);
    buf_free(b);
    return rc;
}

int jinja__buf_add(struct rs *rs, const struct jnode *at, struct buf *b, const char *s, size_t n)
{
    int rc = buf_append(b, s, n);
    if (rc == -ENOSPC) {
        return jinja__fail(rs, at, -E2BIG, "output exceeds the limit of %zu bytes",
                           rs->lim.max_output);
    }
    return rc ? jinja__oom(rs) : 0;
}

int jinja__buf_adds(struct rs *rs, const struct jnode *at, struct buf *b, const char *s)
{
    return jinja__buf_add(rs, at, b, s, strlen(s));
}

/* ---- UTF-8 helpers (strings count code points, as Python's do) ---------------------------- */

size_t jinja__u8_len(const unsigned char *s, size_t n, size_t i)
{
    size_t l = tandem_utf8_seq_len(s + i, n - i);
    return l ? l : 1; /* an invalid byte counts as one character */
}

size_t jinja__u8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i += jinja__u8_len((const unsigned char *)s, n, i)) {
        c++;
    }
    return c;
}

unsigned long jinja__u8_decode(const unsigned char *s, size_t l)
{
    if (l == 1) {
        return s[0];
    }
    unsigned long cp = s[0] & (0xFF >> (l + 1));
    for (size_t k = 1; k < l; k++) {
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    return cp;
}

/* Python's str.isspace() code points. */
bool jinja__isspace(unsigned long cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Does the character at s[0..l) belong to chars (NULL → whitespace)? */
static bool in_strip_set(const char *s, size_t l, const char *chars, size_t clen)
{
    if (!chars) {
        return jinja__isspace(jinja__u8_decode((const unsigned char *)s, l));
    }
    for (size_t i = 0; i < clen;) {
        size_t cl = jinja__u8_len((const unsigned char *)chars, clen, i);
        if (cl == l && memcmp(chars + i, s, l) == 0) {
            return true;
        }
        i += cl;
    }
    return false;
}

/* Python str.strip, lstrip and rstrip: [*start, *end) delimits the kept bytes. */
void jinja__strip_range(const char *s, size_t n, const char *chars, size_t clen, bool left,
                        bool right, size_t *start, size_t *end)
{
    size_t a = 0, b = n;
    if (left) {
        while (a < b) {
            size_t l = jinja__u8_len((const unsigned char *)s, n, a);
            if (!in_strip_set(s + a, l, chars, clen)) {
                break;
            }
            a += l;
        }
    }
    if (right) {
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80 && b - k < 4) {
                k--;
            }
            size_t l = jinja__u8_len((const unsigned char *)s, n, k);
            if (k + l != b) { /* not a whole sequence: treat the last byte alone */
                k = b - 1;
                l = 1;
            }
            if (!in_strip_set(s + k, l, chars, clen)) {
                break;
            }
            b = k;
        }
    }
    *start = a;
    *end = b;
}

/* Byte offsets of every character start, plus n at the end. Caller frees. */
static size_t *char_offsets(const char *s, size_t n, size_t *count)
{
    size_t c = jinja__u8_count(s, n);
    size_t *off = malloc((c + 1) * sizeof(*off));
    if (!off) {
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i += jinja__u8_len((const unsigned char *)s, n, i)) {
        off[k++] = i;
    }
    off[k] = n;
    *count = c;
    return off;
}

/* ---- string conversion ---------------------------------------------------------------------- */

/* Python repr() of a float. */
void jinja__fmt_float(double d, char out[40])
{
    if (isnan(d)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(d)) {
        strcpy(out, d < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, 40, "%.*g", prec, d);
        if (strtod(out, NULL) == d) {
            break;
        }
    }
    /* Python switches to exponent notation at 1e16, %g at 10^prec: redo positional */
    char *e = strchr(out, 'e');
    if (e) {
        int exp = (int)strtol(e + 1, NULL, 10);
        if (exp >= -5 && exp < 16) {
            int digits = 0;
            for (const char *q = out; q < e; q++) {
                digits += (*q >= '0' && *q <= '9');
            }
            int decimals = digits - 1 - exp;
            snprintf(out, 40, "%.*f", decimals > 0 ? decimals : 0, d);
        } else {
            /* Python writes 1e+16 as 1e+16 and 1e-07 as 1e-07: %g matches */
            return;
        }
    }
    if (!strchr(out, '.') && !strchr(out, 'e') && !strchr(out, 'n') && !strchr(out, 'i')) {
        strcat(out, ".0");
    }
}

static int append_repr(struct rs *rs, const struct jnode *at, struct json_object *j, struct buf *b,
                       int depth);

static int append_str_repr(struct rs *rs, const struct jnode *at, const char *s, size_t n,
                           struct buf *b)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    int rc = jinja__buf_add(rs, at, b, &q, 1);
    for (size_t i = 0; !rc && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '\\' || c == (unsigned char)q) {
            esc[0] = '\\';
            esc[1] = (char)c;
            rc = jinja__buf_add(rs, at, b, esc, 2);
        } else if (c == '\n') {
            rc = jinja__buf_adds(rs, at, b, "\\n");
        } else if (c == '\r') {
            rc = jinja__buf_adds(rs, at, b, "\\r");
        } else if (c == '\t') {
            rc = jinja__buf_adds(rs, at, b, "\\t");
        } else if (c < 0x20 || c == 0x7F) {
            snprintf(esc, sizeof(esc), "\\x%02x", c);
            rc = jinja__buf_adds(rs, at, b, esc);
        } else {
            rc = jinja__buf_add(rs, at, b, (const char *)&c, 1);
        }
    }
    return rc ? rc : jinja__buf_add(rs, at, b, &q, 1);
}

static int append_repr(struct rs *rs, const struct jnode *at, struct json_object *j, struct buf *b,
                       int depth)
{
    char num[40];
    if (depth > 64) {
        return jinja__fail(rs, at, -E2BIG, "value nested too deeply to print");
    }
    switch (j ? json_object_get_type(j) : json_type_null) {
    case json_type_null:
        return jinja__buf_adds(rs, at, b, "None");
    case json_type_boolean:
        return jinja__buf_adds(rs, at, b, json_object_get_boolean(j) ? "True" : "False");
    case json_type_int:
        snprintf(num, sizeof(num), "%lld", (long long)json_object_get_int64(j));
        return jinja__buf_adds(rs, at, b, num);
    case json_type_double:
        jinja__fmt_float(json_object_get_double(j), num);
        return jinja__buf_adds(rs, at, b, num);
    case json_type_string:
        return append_str_repr(rs, at, json_object_get_string(j),
                               (size_t)json_object_get_string_len(j), b);
    case json_type_array: {
        bool tuple = jinja__is_tuple(j);
        int rc = jinja__buf_adds(rs, at, b, tuple ? "(" : "[");
        size_t n = json_object_array_length(j);
        for (size_t i = 0; !rc && i < n; i++) {
            if (i) {
                rc = jinja__buf_adds(rs, at, b, ", ");
            }
            if (!rc) {
                rc = append_repr(rs, at, json_object_array_get_idx(j, i), b, depth + 1);
            }
        }
        if (!rc && tuple && n == 1) {
            rc = jinja__buf_adds(rs, at, b, ",");
        }
        return rc ? rc : jinja__buf_adds(rs, at, b, tuple ? ")" : "]");
    }
    case json_type_object: {
        int rc = jinja__buf_adds(rs, at, b, "{");
        bool first = true;
        json_object_object_foreach(j, key, val)
        {
            if (rc) {
                break;
            }
            if (!first) {
                rc = jinja__buf_adds(rs, at, b, ", ");
            }
            first = false;
            int64_t ik;
            if (!rc && jinja__int_key(key, &ik)) {
                char digits[24];
                snprintf(digits, sizeof(digits), "%lld", (long long)ik);
                rc = jinja__buf_adds(rs, at, b, digits);
            } else if (!rc) {
                rc = append_str_repr(rs, at, key, strlen(key), b);
            }
            if (!rc) {
                rc = jinja__buf_adds(rs, at, b, ": ");
            }
            if (!rc) {
                rc = append_repr(rs, at, val, b, depth + 1);
            }
        }
        return rc ? rc : jinja__buf_adds(rs, at, b, "}");
    }
    }
    return 0;
}

/* str(v) appended to b. */
int jinja__append_str(struct rs *rs, const struct jnode *at, const struct jv *v, struct buf *b)
{
    switch (jv_type(v)) {
    case VT_UNDEF:
        return 0;
    case VT_STR: {
        size_t n;
        const char *s = jv_str(v, &n);
        return jinja__buf_add(rs, at, b, s, n);
    }
    case VT_NS: { /* Jinja2 3.1: <Namespace {'a': 1}> */
        int rc = jinja__buf_adds(rs, at, b, "<Namespace ");
        if (!rc) {
            rc = append_repr(rs, at, v->j, b, 0);
        }
        return rc ? rc : jinja__buf_adds(rs, at, b, ">");
    }
    case VT_MACRO:
        return jinja__buf_adds(rs, at, b, v->kind == JV_FUNC ? "<function>" : "<Macro>");
    default:
        return append_repr(rs, at, v->j, b, 0);
    }
}

int jinja__to_str(struct rs *rs, const struct jnode *at, const struct jv *v, struct jv *out)
{
    if (jv_type(v) == VT_STR) {
        *out = jv_copy(v);
        return 0;
    }
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    int rc = jinja__append_str(rs, at, v, &b);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

/* ---- comparison ----------------------------------------------------------------------------- */

static bool json_equal(struct json_object *a, struct json_object *b, int depth);

bool jinja__equal(const struct jv *a, const struct jv *b)
{
    enum vtype ta = jv_type(a), tb = jv_type(b);
    if (ta == VT_UNDEF || tb == VT_UNDEF) {
        return ta == tb;
    }
    if (ta == VT_NS || tb == VT_NS || ta == VT_MACRO || tb == VT_MACRO) {
        return a->kind == b->kind && a->j == b->j && a->node == b->node && a->name == b->name;
    }
    return json_equal(a->j, b->j, 0);
}

static bool json_equal(struct json_object *a, struct json_object *b, int depth)
{
    struct jv va = jv_own(a), vb = jv_own(b);
    enum vtype ta = jv_type(&va), tb = jv_type(&vb);
    if (depth > 64) {
        return false;
    }
    if (jv_is_num(&va) && jv_is_num(&vb)) {
        if (jv_is_int(&va) && jv_is_int(&vb)) {
            return jv_int(&va) == jv_int(&vb);
        }
        return jv_num(&va) == jv_num(&vb);
    }
    if (ta != tb) {
        return false;
    }
    switch (ta) {
    case VT_NONE:
        return true;
    case VT_STR:
        return json_object_get_string_len(a) == json_object_get_string_len(b) &&
               memcmp(json_object_get_string(a), json_object_get_string(b),
                      (size_t)json_object_get_string_len(a)) == 0;
    case VT_LIST: {
        size_t n = json_object_array_length(a);
        if (n != json_object_array_length(b)) {
            return false;
        }
        for (size_t i = 0; i < n; i++) {
            if (!json_equal(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i),
                            depth + 1)) {
                return false;
            }
        }
        return true;
    }
    case VT_DICT: {
        if (json_object_object_length(a) != json_object_object_length(b)) {
            return false;
        }
        json_object_object_foreach(a, key, val)
        {
            struct json_object *other = NULL;
            if (!json_object_object_get_ex(b, key, &other) || !json_equal(val, other, depth + 1)) {
                return false;
            }
        }
        return true;
    }
    default:
        return false;
    }
}

/* Ordering of numbers, strings (bytewise = code point order) and lists. -EINVAL if unordered. */
int jinja__order(struct rs *rs, const struct jnode *at, const struct jv *a, const struct jv *b,
                 int *out)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (jv_is_int(a) && jv_is_int(b)) {
            int64_t x = jv_int(a), y = jv_int(b);
            *out = (x > y) - (x < y);
        } else {
            double x = jv_num(a), y = jv_num(b);
            *out = (x > y) - (x < y);
        }
        return 0;
    }
    if (jv_type(a) == VT_STR && jv_type(b) == VT_STR) {
        size_t na, nb;
        const char *sa = jv_str(a, &na), *sb = jv_str(b, &nb);
        int c = memcmp(sa, sb, na < nb ? na : nb);
        *out = c ? (c > 0 ? 1 : -1) : (na > nb) - (na < nb);
        return 0;
    }
    if (jv_type(a) == VT_LIST && jv_type(b) == VT_LIST) {
        size_t na = json_object_array_length(a->j), nb = json_object_array_length(b->j);
        for (size_t i = 0; i < na && i < nb; i++) {
            struct jv ea = jv_own(json_object_array_get_idx(a->j, i));
            struct jv eb = jv_own(json_object_array_get_idx(b->j, i));
            if (!jinja__equal(&ea, &eb)) {
                return jinja__order(rs, at, &ea, &eb, out);
            }
        }
        *out = (na > nb) - (na < nb);
        return 0;
    }
    return jinja__fail(rs, at, -EINVAL, "cannot compare %s with %s", jv_type_name(a),
                       jv_type_name(b));
}

/* ---- tables ------------------------------------------------------------------------------- */

static int cmp_entry_name(const void *key, const void *entry)
{
    /* every table entry starts with its name (C11 6.7.2.1: a struct's address is its first
     * member's) */
    return strcmp((const char *)key, *(const char *const *)entry);
}

const void *jinja__lookup(const void *table, size_t n, size_t size, const char *name)
{
    return bsearch(name, table, n, size, cmp_entry_name);
}

/* ---- scopes --------------------------------------------------------------------------------- */

static struct var *frame_find(struct frame *f, const char *name)
{
    for (struct var *v = f->vars; v; v = v->next) {
        if (strcmp(v->name, name) == 0) {
            return v;
        }
    }
    return NULL;
}

/* Binds name in f to val (taking ownership of val). */
static int frame_set(struct rs *rs, struct frame *f, const char *name, struct jv val)
{
    struct var *v = frame_find(f, name);
    if (v) {
        jv_put(&v->val);
        v->val = val;
        return 0;
    }
    v = malloc(sizeof(*v));
    if (!v) {
        jv_put(&val);
        return jinja__oom(rs);
    }
    v->name = name;
    v->val = val;
    v->next = f->vars;
    f->vars = v;
    return 0;
}

static void frame_clear(struct frame *f)
{
    struct var *v = f->vars;
    while (v) {
        struct var *next = v->next;
        jv_put(&v->val);
        free(v);
        v = next;
    }
    f->vars = NULL;
}

static struct jv lookup(struct rs *rs, struct frame *f, const char *name, const struct jnode *at)
{
    for (; f; f = f->parent) {
        struct var *v = frame_find(f, name);
        if (v) {
            return jv_copy(&v->val);
        }
    }
    struct json_object *j = NULL;
    if (rs->ctx && json_object_object_get_ex(rs->ctx, name, &j)) {
        return jv_ref(j);
    }
    const struct jinja__global *g = jinja__global_find(name);
    if (g) {
        struct jv fn = {.kind = JV_FUNC, .name = g->name};
        return fn;
    }
    return jv_undef(name, at);
}

/* ---- evaluation ----------------------------------------------------------------------------- */

static int eval(struct rs *rs, struct frame *f, const struct jnode *n, struct jv *out);
static int exec_body(struct rs *rs, struct frame *f, const struct jnode *body, struct buf *out);

static void args_free(struct args *a)
{
    for (int i = 0; i < a->n_pos; i++) {
        jv_put(&a->pos[i]);
    }
    for (int i = 0; i < a->n_kw; i++) {
        jv_put(&a->kw[i]);
    }
    a->n_pos = a->n_kw = 0;
}

static int eval_args(struct rs *rs, struct frame *f, const struct jnode *owner, struct args *a)
{
    memset(a, 0, sizeof(*a));
    for (size_t i = 0; i < owner->n_items; i++) {
        const struct jnode *arg = owner->items[i];
        bool kw = arg->kind == JN_KWARG;
        if ((kw ? a->n_kw : a->n_pos) >= JINJA_MAX_ARGS) {
            args_free(a);
            return jinja__fail(rs, arg, -EINVAL, "too many arguments (at most %d)", JINJA_MAX_ARGS);
        }
        struct jv v = {0};
        int rc = eval(rs, f, kw ? arg->a : arg, &v);
        if (rc) {
            args_free(a);
            return rc;
        }
        if (kw) {
            a->kw_name[a->n_kw] = arg->str;
            a->kw[a->n_kw++] = v;
        } else {
            a->pos[a->n_pos++] = v;
        }
    }
    return 0;
}

/* Argument idx (positional) or name (keyword); NULL when not given. */
const struct jv *jinja__arg(const struct args *a, int idx, const char *name)
{
    if (idx >= 0 && idx < a->n_pos) {
        return &a->pos[idx];
    }
    for (int i = 0; name && i < a->n_kw; i++) {
        if (strcmp(a->kw_name[i], name) == 0) {
            return &a->kw[i];
        }
    }
    return NULL;
}

int jinja__want_str(struct rs *rs, const struct jnode *at, const struct jv *v, const char *what,
                    const char **s, size_t *n)
{
    *s = NULL;
    *n = 0;
    if (!v || jv_type(v) != VT_STR) {
        return jinja__fail(rs, at, -EINVAL, "%s must be a string, got %s", what,
                           v ? jv_type_name(v) : "nothing");
    }
    *s = jv_str(v, n);
    return 0;
}

int jinja__want_int(struct rs *rs, const struct jnode *at, const struct jv *v, const char *what,
                    int64_t *out)
{
    if (!v || !jv_is_int(v)) {
        return jinja__fail(rs, at, -EINVAL, "%s must be an integer, got %s", what,
                           v ? jv_type_name(v) : "nothing");
    }
    *out = jv_int(v);
    return 0;
}

int jinja__count_iterations(struct rs *rs, const struct jnode *at, uint64_t n)
{
    rs->iterations += n;
    if (rs->iterations > rs->lim.max_iterations) {
        return jinja__fail(rs, at, -E2BIG, "more than %llu loop iterations",
                           (unsigned long long)rs->lim.max_iterations);
    }
    return 0;
}

/* The items of an iterable as a json array (new reference): lists themselves, dict keys,
 * string characters; undefined iterates as empty. */
int jinja__iter_items(struct rs *rs, const struct jnode *at, const struct jv *v,
                      struct json_object **out)
{
    switch (jv_type(v)) {
    case VT_LIST:
        *out = json_object_get(v->j);
        return 0;
    case VT_UNDEF:
        *out = json_object_new_array();
        return *out ? 0 : jinja__oom(rs);
    case VT_DICT:
    case VT_NS: {
        struct json_object *arr = json_object_new_array();
        if (!arr) {
            return jinja__oom(rs);
        }
        json_object_object_foreach(v->j, key, val)
        {
            (void)val;
            struct jv k = {0};
            int rc = jinja__key_value(rs, key, &k);
            if (rc || json_object_array_add(arr, k.j) != 0) {
                jv_put(&k);
                json_object_put(arr);
                return rc ? rc : jinja__oom(rs);
            }
        }
        *out = arr;
        return 0;
    }
    case VT_STR: {
        size_t n;
        const char *s = jv_str(v, &n);
        struct json_object *arr = json_object_new_array();
        if (!arr) {
            return jinja__oom(rs);
        }
        for (size_t i = 0; i < n;) {
            size_t l = jinja__u8_len((const unsigned char *)s, n, i);
            struct json_object *c = json_object_new_string_len(s + i, (int)l);
            if (!c || json_object_array_add(arr, c) != 0) {
                json_object_put(c);
                json_object_put(arr);
                return jinja__oom(rs);
            }
            i += l;
        }
        *out = arr;
        return 0;
    }
    default:
        return jinja__fail(rs, at, -EINVAL, "%s is not iterable", jv_type_name(v));
    }
}

/* The error for an operation on the undefined value v, as Jinja2's Undefined words it. */
static int undefined_error(struct rs *rs, const struct jnode *at, const struct jv *v)
{
    if (v->why == JU_CALLER) {
        return jinja__fail(rs, at, -EINVAL, "No caller defined");
    }
    if (v->name) {
        return jinja__fail(
            rs, at, -EINVAL,
            v->why == JU_PARAM ? "parameter '%s' was not provided" : "'%s' is undefined", v->name);
    }
    return jinja__fail(rs, at, -EINVAL, "operation on an undefined value");
}

/* The attributes Jinja2's Macro objects have: name, arguments, catch_kwargs, catch_varargs,
 * caller; JV_FUNC globals have none. */
static int macro_member(struct rs *rs, const struct jv *m, const char *name, struct jv *out)
{
    *out = jv_undef(NULL, NULL);
    if (m->kind != JV_MACRO) {
        return 0;
    }
    const struct jnode *node = m->node;
    if (strcmp(name, "name") == 0) {
        return jinja__new_str(rs, node, node->str, node->len, out);
    }
    if (strcmp(name, "arguments") == 0) {
        struct json_object *arr = json_object_new_array();
        if (!arr) {
            return jinja__oom(rs);
        }
        for (size_t i = 0; i < node->n_items; i++) {
            struct json_object *s = json_object_new_string(node->items[i]->str);
            if (!s || json_object_array_add(arr, s) != 0) {
                json_object_put(s);
                json_object_put(arr);
                return jinja__oom(rs);
            }
        }
        jinja__mark_tuple(arr);
        *out = jv_own(arr);
        return 0;
    }
    int64_t flag = strcmp(name, "catch_kwargs") == 0    ? JM_KWARGS
                   : strcmp(name, "catch_varargs") == 0 ? JM_VARARGS
                   : strcmp(name, "caller") == 0        ? JM_CALLER
                                                        : 0;
    return flag ? jinja__new_bool(rs, (node->ival & flag) != 0, out) : 0;
}

/* Attribute or item `name` of obj (the value of `obj.name` / `obj['name']`). */
int jinja__get_member(struct rs *rs, const struct jnode *at, const struct jv *obj, const char *name,
                      struct jv *out)
{
    switch (jv_type(obj)) {
    case VT_UNDEF:
        if (obj->name) {
            return undefined_error(rs, at, obj);
        }
        return jinja__fail(rs, at, -EINVAL, "undefined value has no attribute '%s'", name);
    case VT_MACRO:
        return macro_member(rs, obj, name, out);
    case VT_LIST: /* groupby's tuples: grouper and list */
        *out = jv_undef(NULL, at);
        if (json_object_get_userdata(obj->j) == &GROUP_MARK &&
            (strcmp(name, "grouper") == 0 || strcmp(name, "list") == 0)) {
            *out = jv_ref(json_object_array_get_idx(obj->j, name[0] == 'l'));
        }
        return 0;
    case VT_DICT:
    case VT_NS: {
        struct json_object *j = NULL;
        if (json_object_object_get_ex(obj->j, name, &j)) {
            *out = jv_ref(j);
        } else {
            *out = jv_undef(NULL, at);
        }
        return 0;
    }
    default:
        *out = jv_undef(NULL, at);
        return 0;
    }
}

static int resolve_index(int64_t i, size_t n, size_t *out)
{
    if (i < 0) {
        i += (int64_t)n;
    }
    if (i < 0 || (uint64_t)i >= n) {
        return -1;
    }
    *out = (size_t)i;
    return 0;
}

static int get_item(struct rs *rs, const struct jnode *at, const struct jv *obj,
                    const struct jv *key, struct jv *out)
{
    enum vtype t = jv_type(obj);
    if (t == VT_UNDEF) {
        return jinja__get_member(rs, at, obj, "[]", out);
    }
    if ((t == VT_DICT || t == VT_NS) && (jv_type(key) == VT_STR || jv_is_int(key))) {
        char buf[32];
        const char *k = NULL;
        int rc = jinja__dict_key(rs, at, key, buf, &k);
        return rc ? rc : jinja__get_member(rs, at, obj, k, out);
    }
    if ((t == VT_LIST || t == VT_STR) && jv_is_int(key)) {
        size_t idx;
        if (t == VT_LIST) {
            if (resolve_index(jv_int(key), json_object_array_length(obj->j), &idx) != 0) {
                *out = jv_undef(NULL, at);
                return 0;
            }
            *out = jv_ref(json_object_array_get_idx(obj->j, idx));
            return 0;
        }
        size_t n, count;
        const char *s = jv_str(obj, &n);
        size_t *off = char_offsets(s, n, &count);
        if (!off) {
            return jinja__oom(rs);
        }
        int rc = 0;
        if (resolve_index(jv_int(key), count, &idx) != 0) {
            *out = jv_undef(NULL, at);
        } else {
            rc = jinja__new_str(rs, at, s + off[idx], off[idx + 1] - off[idx], out);
        }
        free(off);
        return rc;
    }
    *out = jv_undef(NULL, at);
    return 0;
}

/* Python slice index normalisation. */
static void slice_bounds(const struct jv *start, const struct jv *stop, int64_t step, int64_t n,
                         int64_t *lo, int64_t *hi)
{
    if (step > 0) {
        *lo = start ? jv_int(start) : 0;
        *hi = stop ? jv_int(stop) : n;
        if (*lo < 0) {
            *lo = *lo + n < 0 ? 0 : *lo + n;
        } else if (*lo > n) {
            *lo = n;
        }
        if (*hi < 0) {
            *hi = *hi + n < 0 ? 0 : *hi + n;
        } else if (*hi > n) {
            *hi = n;
        }
    } else {
        *lo = start ? jv_int(start) : n - 1;
        *hi = stop ? jv_int(stop) : -1;
        if (start && *lo < 0) {
            *lo = *lo + n < -1 ? -1 : *lo + n;
        } else if (*lo >= n) {
            *lo = n - 1;
        }
        if (stop && *hi < 0) {
            *hi = *hi + n < -1 ? -1 : *hi + n;
        } else if (*hi >= n) {
            *hi = n - 1;
        }
    }
}

static int eval_slice(struct rs *rs, struct frame *f, const struct jnode *at, const struct jv *obj,
                      const struct jnode *sl, struct jv *out)
{
    struct jv parts[3] = {{0}, {0}, {0}};
    const struct jnode *pn[3] = {sl->a, sl->b, sl->c};
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        if (pn[k]) {
            rc = eval(rs, f, pn[k], &parts[k]);
            if (!rc && jv_type(&parts[k]) != VT_NONE && !jv_is_int(&parts[k])) {
                rc = jinja__fail(rs, pn[k], -EINVAL, "slice indices must be integers, got %s",
                                 jv_type_name(&parts[k]));
            }
        }
    }
    const struct jv *start = pn[0] && jv_type(&parts[0]) != VT_NONE ? &parts[0] : NULL;
    const struct jv *stop = pn[1] && jv_type(&parts[1]) != VT_NONE ? &parts[1] : NULL;
    int64_t step = pn[2] && jv_type(&parts[2]) != VT_NONE ? jv_int(&parts[2]) : 1;
    if (!rc && step == 0) {
        rc = jinja__fail(rs, at, -EINVAL, "slice step cannot be zero");
    }
    enum vtype t = jv_type(obj);
    if (!rc && t != VT_LIST && t != VT_STR) {
        rc = t == VT_UNDEF ? jinja__get_member(rs, at, obj, "[:]", out)
                           : jinja__fail(rs, at, -EINVAL, "cannot slice %s", jv_type_name(obj));
    }
    if (!rc) {
        size_t n = 0, count = 0;
        const char *s = NULL;
        size_t *off = NULL;
        if (t == VT_STR) {
            s = jv_str(obj, &n);
            off = char_offsets(s, n, &count);
            if (!off) {
                rc = jinja__oom(rs);
            }
        } else {
            count = json_object_array_length(obj->j);
        }
        int64_t lo, hi;
        slice_bounds(start, stop, step, (int64_t)count, &lo, &hi);
        struct buf b;
        buf_init(&b, rs->lim.max_output);
        struct json_object *arr = NULL;
        if (!rc && t == VT_LIST) {
            arr = json_object_new_array();
            if (!arr) {
                rc = jinja__oom(rs);
            }
        }
        for (int64_t i = lo; !rc && (step > 0 ? i < hi : i > hi); i += step) {
            if (t == VT_STR) {
                rc = jinja__buf_add(rs, at, &b, s + off[i], off[i + 1] - off[i]);
            } else {
                struct json_object *e = json_object_array_get_idx(obj->j, (size_t)i);
                if (json_object_array_add(arr, e ? json_object_get(e) : NULL) != 0) {
                    json_object_put(e);
                    rc = jinja__oom(rs);
                }
            }
        }
        free(off);
        if (t == VT_STR) {
            if (rc) {
                buf_free(&b);
            } else {
                rc = jinja__new_buf_str(rs, at, &b, out);
            }
        } else if (rc) {
            json_object_put(arr);
        } else {
            *out = jv_own(arr);
        }
    }
    for (int k = 0; k < 3; k++) {
        jv_put(&parts[k]);
    }
    return rc;
}

int jinja__contains(struct rs *rs, const struct jnode *at, const struct jv *needle,
                    const struct jv *hay, bool *out)
{
    switch (jv_type(hay)) {
    case VT_UNDEF:
        *out = false;
        return 0;
    case VT_STR: {
        if (jv_type(needle) != VT_STR) {
            return jinja__fail(rs, at, -EINVAL, "'in <string>' requires a string, got %s",
                               jv_type_name(needle));
        }
        size_t hn, nn;
        const char *h = jv_str(hay, &hn), *nd = jv_str(needle, &nn);
        *out = nn == 0 || memmem(h, hn, nd, nn) != NULL;
        return 0;
    }
    case VT_LIST: {
        size_t n = json_object_array_length(hay->j);
        *out = false;
        for (size_t i = 0; i < n && !*out; i++) {
            struct jv e = jv_own(json_object_array_get_idx(hay->j, i));
            *out = jinja__equal(&e, needle);
        }
        return 0;
    }
    case VT_DICT:
    case VT_NS: {
        char buf[32];
        const char *k = NULL;
        *out = (jv_type(needle) == VT_STR || jv_is_int(needle)) &&
               jinja__dict_key(rs, at, needle, buf, &k) == 0 &&
               json_object_object_get_ex(hay->j, k, NULL);
        return 0;
    }
    default:
        return jinja__fail(rs, at, -EINVAL, "argument of 'in' is %s, not a container",
                           jv_type_name(hay));
    }
}

int jinja__new_int(struct rs *rs, int64_t i, struct jv *out)
{
    struct json_object *j = json_object_new_int64(i);
    if (!j) {
        return jinja__oom(rs);
    }
    *out = jv_own(j);
    return 0;
}

int jinja__new_float(struct rs *rs, double d, struct jv *out)
{
    struct json_object *j = json_object_new_double(d);
    if (!j) {
        return jinja__oom(rs);
    }
    *out = jv_own(j);
    return 0;
}

int jinja__new_bool(struct rs *rs, bool b, struct jv *out)
{
    struct json_object *j = json_object_new_boolean(b);
    if (!j) {
        return jinja__oom(rs);
    }
    *out = jv_own(j);
    return 0;
}

/* list + list, list * n: a new array. */
static int list_concat(struct rs *rs, const struct jnode *at, struct json_object *a,
                       struct json_object *b, int64_t times, struct jv *out)
{
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        return jinja__oom(rs);
    }
    size_t na = json_object_array_length(a), nb = b ? json_object_array_length(b) : 0;
    if (times > 0 && (uint64_t)times * (na + 1) > rs->lim.max_iterations) {
        json_object_put(arr);
        return jinja__fail(rs, at, -E2BIG, "list repetition too large");
    }
    for (int64_t t = 0; t < (b ? 1 : times); t++) {
        for (size_t i = 0; i < na + nb; i++) {
            struct json_object *e =
                i < na ? json_object_array_get_idx(a, i) : json_object_array_get_idx(b, i - na);
            if (json_object_array_add(arr, e ? json_object_get(e) : NULL) != 0) {
                json_object_put(e);
                json_object_put(arr);
                return jinja__oom(rs);
            }
        }
    }
    *out = jv_own(arr);
    return 0;
}

/* ---- printf-style formatting (str % args, the format filter) ------------------------------ */

/* Appends s (n bytes) padded with spaces to width code points (left-aligned when left). */
static int append_padded(struct rs *rs, const struct jnode *at, struct buf *b, const char *s,
                         size_t n, int64_t width, bool left)
{
    size_t chars = jinja__u8_count(s, n);
    size_t pad = width > (int64_t)chars ? (size_t)width - chars : 0;
    if (pad > rs->lim.max_output) {
        return jinja__fail(rs, at, -E2BIG, "format width exceeds the output limit");
    }
    int rc = 0;
    for (size_t i = 0; !rc && !left && i < pad; i++) {
        rc = jinja__buf_add(rs, at, b, " ", 1);
    }
    if (!rc) {
        rc = jinja__buf_add(rs, at, b, s, n);
    }
    for (size_t i = 0; !rc && left && i < pad; i++) {
        rc = jinja__buf_add(rs, at, b, " ", 1);
    }
    return rc;
}

int jinja__format_percent(struct rs *rs, const struct jnode *at, const char *f, size_t fn,
                          const struct jv *args, struct jv *out)
{
    /* a tuple supplies the arguments in order, a dict the %(name)s ones, anything else is
     * the single argument */
    bool tuple = jv_type(args) == VT_LIST && jinja__is_tuple(args->j);
    bool mapping = jv_type(args) == VT_DICT || jv_type(args) == VT_NS;
    size_t n_args = tuple ? json_object_array_length(args->j) : 1, next = 0;
    bool used_mapping = false;
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    int rc = 0;
    size_t i = 0;
    while (!rc && i < fn) {
        const char *pct = memchr(f + i, '%', fn - i);
        size_t lit = pct ? (size_t)(pct - f) : fn;
        rc = jinja__buf_add(rs, at, &b, f + i, lit - i);
        if (rc || !pct) {
            break;
        }
        i = lit + 1;
        struct jv named = {0}, arg = {0};
        const struct jv *v = NULL;
        if (i < fn && f[i] == '(') { /* %(name)s */
            const char *close = memchr(f + i, ')', fn - i);
            if (!close || !mapping) {
                rc = jinja__fail(rs, at, -EINVAL,
                                 close ? "format requires a mapping" : "incomplete format key");
                break;
            }
            char key[128];
            size_t kn = (size_t)(close - f) - i - 1;
            if (kn >= sizeof(key)) {
                rc = jinja__fail(rs, at, -EINVAL, "format key too long");
                break;
            }
            memcpy(key, f + i + 1, kn);
            key[kn] = '\0';
            rc = jinja__get_member(rs, at, args, key, &named);
            if (!rc && jv_type(&named) == VT_UNDEF) {
                rc = jinja__fail(rs, at, -EINVAL, "format key '%s' not found", key);
            }
            v = &named;
            used_mapping = true;
            i = (size_t)(close - f) + 1;
        }
        bool left = false, plus = false, space = false, zero = false, alt = false;
        for (; !rc && i < fn && f[i] && strchr("-+ 0#", f[i]); i++) {
            left |= f[i] == '-';
            plus |= f[i] == '+';
            space |= f[i] == ' ';
            zero |= f[i] == '0';
            alt |= f[i] == '#';
        }
        int64_t width = 0, prec = -1;
        for (; !rc && i < fn && f[i] >= '0' && f[i] <= '9' && width < 100000; i++) {
            width = width * 10 + (f[i] - '0');
        }
        if (!rc && i < fn && f[i] == '.') {
            prec = 0;
            for (i++; i < fn && f[i] >= '0' && f[i] <= '9' && prec < 1000; i++) {
                prec = prec * 10 + (f[i] - '0');
            }
        }
        while (!rc && i < fn && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) {
            i++;
        }
        if (rc) {
            jv_put(&named);
            break;
        }
        if (i >= fn) {
            rc = jinja__fail(rs, at, -EINVAL, "incomplete format");
            jv_put(&named);
            break;
        }
        char conv = f[i++];
        if (conv == '%') {
            rc = jinja__buf_add(rs, at, &b, "%", 1);
            jv_put(&named);
            continue;
        }
        if (!v) {
            if (next >= n_args) {
                rc = jinja__fail(rs, at, -EINVAL, "not enough arguments for format string");
                break;
            }
            arg = tuple ? jv_own(json_object_array_get_idx(args->j, next)) : *args;
            next++;
            v = &arg; /* borrowed */
        }
        char spec[32], num[400];
        if (conv == 's' || conv == 'r' || conv == 'a') {
            struct buf sb;
            buf_init(&sb, rs->lim.max_output);
            rc = conv == 's'                       ? jinja__append_str(rs, at, v, &sb)
                 : jv_type(v) == VT_UNDEF || !v->j ? jinja__buf_adds(rs, at, &sb, "None")
                 : jv_type(v) == VT_NS || jv_type(v) == VT_MACRO
                     ? jinja__append_str(rs, at, v, &sb)
                     : append_repr(rs, at, v->j, &sb, 0);
            size_t sl = sb.len;
            if (!rc && prec >= 0) { /* precision truncates, in code points */
                size_t k = 0;
                for (int64_t c = 0; k < sb.len && c < prec; c++) {
                    k += jinja__u8_len((const unsigned char *)sb.data, sb.len, k);
                }
                sl = k;
            }
            if (!rc) {
                rc = append_padded(rs, at, &b, sb.data ? sb.data : "", sl, width, left);
            }
            buf_free(&sb);
        } else if (conv && strchr("diuoxXeEfFgGc", conv)) {
            if (!jv_is_num(v) && !(conv == 'c' && jv_type(v) == VT_STR)) {
                rc = jinja__fail(rs, at, -EINVAL, "%%%c format: a number is required, not %s", conv,
                                 jv_type_name(v));
            } else if (conv == 'c') {
                char u[4];
                size_t ul = 0;
                if (jv_type(v) == VT_STR) {
                    const char *cs = jv_str(v, &ul);
                    if (jinja__u8_count(cs, ul) != 1) {
                        rc = jinja__fail(rs, at, -EINVAL, "%%c requires a single character");
                    }
                    memcpy(u, cs, ul < 4 ? ul : 4);
                } else if (jv_int(v) < 0 || jv_int(v) > 0x10FFFF) {
                    rc = jinja__fail(rs, at, -EINVAL, "%%c arg not in range(0x110000)");
                } else {
                    ul = tandem_utf8_put(u, (unsigned long)jv_int(v));
                }
                if (!rc) {
                    rc = append_padded(rs, at, &b, u, ul, width, left);
                }
            } else {
                bool integral = strchr("diuoxX", conv) != NULL;
                if (integral && !jv_is_int(v) && (conv != 'd' && conv != 'i' && conv != 'u')) {
                    rc = jinja__fail(rs, at, -EINVAL, "%%%c format: an integer is required", conv);
                } else {
                    snprintf(spec, sizeof(spec), "%%%s%s%s%s%s*.*%s%c", left ? "-" : "",
                             plus ? "+" : "", space ? " " : "", zero ? "0" : "", alt ? "#" : "",
                             integral ? "ll" : "", conv == 'u' || conv == 'i' ? 'd' : conv);
                    int w = width > 300 ? 300 : (int)width;
                    int pr = prec < 0 ? (integral ? -1 : 6) : (int)(prec > 300 ? 300 : prec);
                    if (integral) {
                        long long x = jv_is_int(v) ? (long long)jv_int(v) : (long long)jv_num(v);
                        snprintf(num, sizeof(num), spec, w, pr, x);
                    } else {
                        snprintf(num, sizeof(num), spec, w, pr, jv_num(v));
                    }
                    rc = jinja__buf_adds(rs, at, &b, num);
                }
            }
        } else {
            rc = jinja__fail(rs, at, -EINVAL, "unsupported format character '%c'", conv);
        }
        jv_put(&named);
    }
    if (!rc && tuple && next < n_args) {
        rc = jinja__fail(rs, at, -EINVAL, "not all arguments converted during string formatting");
    }
    if (!rc && !tuple && !mapping && next == 0 && !used_mapping) {
        rc = jinja__fail(rs, at, -EINVAL, "not all arguments converted during string formatting");
    }
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

int jinja__arith(struct rs *rs, const struct jnode *at, const char *op, const struct jv *a,
                 const struct jv *b, struct jv *out)
{
    enum vtype ta = jv_type(a), tb = jv_type(b);
    if (ta == VT_UNDEF) {
        return undefined_error(rs, at, a);
    }
    if (tb == VT_UNDEF) {
        return undefined_error(rs, at, b);
    }
    if (strcmp(op, "+") == 0 && ta == VT_STR && tb == VT_STR) {
        /* Markup + str (or str + Markup) escapes the plain side and stays Markup */
        bool safe = jinja__is_safe(a) || jinja__is_safe(b);
        struct buf sb;
        buf_init(&sb, rs->lim.max_output);
        int rc = safe ? jinja__append_escaped(rs, at, a, &sb) : jinja__append_str(rs, at, a, &sb);
        if (!rc) {
            rc = safe ? jinja__append_escaped(rs, at, b, &sb) : jinja__append_str(rs, at, b, &sb);
        }
        if (rc) {
            buf_free(&sb);
            return rc;
        }
        rc = jinja__new_buf_str(rs, at, &sb, out);
        if (!rc && safe) {
            jinja__mark_safe(out->j);
        }
        return rc;
    }
    if (strcmp(op, "%") == 0 && ta == VT_STR) { /* Python's printf-style str % args */
        size_t fn;
        const char *fs = jv_str(a, &fn);
        return jinja__format_percent(rs, at, fs, fn, b, out);
    }
    if (strcmp(op, "+") == 0 && ta == VT_LIST && tb == VT_LIST) {
        return list_concat(rs, at, a->j, b->j, 1, out);
    }
    if (strcmp(op, "*") == 0 && (ta == VT_STR || ta == VT_LIST || tb == VT_STR || tb == VT_LIST)) {
        const struct jv *seq = (ta == VT_STR || ta == VT_LIST) ? a : b;
        const struct jv *cnt = seq == a ? b : a;
        if (!jv_is_int(cnt)) {
            return jinja__fail(rs, at, -EINVAL, "can't multiply sequence by %s", jv_type_name(cnt));
        }
        int64_t times = jv_int(cnt);
        if (jv_type(seq) == VT_LIST) {
            return list_concat(rs, at, seq->j, NULL, times < 0 ? 0 : times, out);
        }
        size_t n;
        const char *s = jv_str(seq, &n);
        if (times <= 0 || n == 0) {
            return jinja__new_str(rs, at, "", 0, out);
        }
        if ((uint64_t)times > rs->lim.max_output / n) {
            return jinja__fail(rs, at, -E2BIG, "string repetition exceeds the output limit");
        }
        struct buf sb;
        buf_init(&sb, rs->lim.max_output);
        for (int64_t i = 0; i < times; i++) {
            int rc = jinja__buf_add(rs, at, &sb, s, n);
            if (rc) {
                buf_free(&sb);
                return rc;
            }
        }
        return jinja__new_buf_str(rs, at, &sb, out);
    }
    if (!jv_is_num(a) || !jv_is_num(b)) {
        return jinja__fail(rs, at, -EINVAL, "unsupported operand types for %s: %s and %s", op,
                           jv_type_name(a), jv_type_name(b));
    }
    bool ints = jv_is_int(a) && jv_is_int(b);
    if (ints && strcmp(op, "/") != 0) {
        int64_t x = jv_int(a), y = jv_int(b), r = 0;
        bool ovf = false;
        switch (op[0]) {
        case '+':
            ovf = __builtin_add_overflow(x, y, &r);
            break;
        case '-':
            ovf = __builtin_sub_overflow(x, y, &r);
            break;
        case '*':
            if (op[1] == '*') {
                if (y < 0) {
                    return jinja__new_float(rs, pow((double)x, (double)y), out);
                }
                r = 1;
                for (int64_t k = 0; k < y && !ovf; k++) {
                    ovf = __builtin_mul_overflow(r, x, &r);
                    if (r == 0 || r == 1) {
                        break;
                    }
                }
                if (!ovf && x == -1) {
                    r = (y % 2) ? -1 : 1;
                }
            } else {
                ovf = __builtin_mul_overflow(x, y, &r);
            }
            break;
        case '/':
        case '%':
            if (y == 0) {
                return jinja__fail(rs, at, -EINVAL, "integer division or modulo by zero");
            }
            if (x == INT64_MIN && y == -1) {
                ovf = true;
                break;
            }
            if (op[0] == '%') {
                r = x % y;
                if (r != 0 && ((r < 0) != (y < 0))) {
                    r += y;
                }
            } else {
                r = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) {
                    r--;
                }
            }
            break;
        default:
            break;
        }
        if (ovf) {
            return jinja__fail(rs, at, -EINVAL, "integer overflow in %s", op);
        }
        return jinja__new_int(rs, r, out);
    }
    double x = jv_num(a), y = jv_num(b), r = 0;
    switch (op[0]) {
    case '+':
        r = x + y;
        break;
    case '-':
        r = x - y;
        break;
    case '*':
        r = op[1] == '*' ? pow(x, y) : x * y;
        break;
    case '/':
    case '%':
        if (y == 0) {
            return jinja__fail(rs, at, -EINVAL, "float division by zero");
        }
        if (op[0] == '%') {
            r = fmod(x, y);
            if (r != 0 && ((r < 0) != (y < 0))) {
                r += y;
            }
        } else {
            r = op[1] == '/' ? floor(x / y) : x / y;
        }
        break;
    default:
        break;
    }
    return jinja__new_float(rs, r, out);
}

int jinja__compare(struct rs *rs, const struct jnode *at, const char *op, const struct jv *a,
                   const struct jv *b, bool *out)
{
    if (strcmp(op, "==") == 0 || strcmp(op, "!=") == 0) {
        *out = jinja__equal(a, b) == (op[0] == '=');
        return 0;
    }
    if (strcmp(op, "in") == 0 || strcmp(op, "notin") == 0) {
        int rc = jinja__contains(rs, at, a, b, out);
        if (!rc && op[0] == 'n') {
            *out = !*out;
        }
        return rc;
    }
    int c;
    int rc = jinja__order(rs, at, a, b, &c);
    if (rc) {
        return rc;
    }
    if (strcmp(op, "<") == 0) {
        *out = c < 0;
    } else if (strcmp(op, "<=") == 0) {
        *out = c <= 0;
    } else if (strcmp(op, ">") == 0) {
        *out = c > 0;
    } else {
        *out = c >= 0;
    }
    return 0;
}

/* ---- calls ---------------------------------------------------------------------------------- */

/* The keyword argument named name that binding has not used yet: its index, or -1. */
static int unused_kw(const struct args *a, const bool *used, const char *name)
{
    for (int k = 0; k < a->n_kw; k++) {
        if (!used[k] && strcmp(a->kw_name[k], name) == 0) {
            return k;
        }
    }
    return -1;
}

/* Binds a call's arguments to macro's parameters in mf as Jinja2's Macro.__call__ does: the
 * positional ones in order; keyword arguments only for the parameters left after them; `caller`
 * (from a call block), when the body reads it, from the keyword argument of that name; unknown
 * keywords into `kwargs` and extra positional arguments into `varargs` when the body reads those
 * names, and errors otherwise. Defaults are evaluated in mf, after the earlier parameters, so a
 * default may name them; a parameter with neither stays undefined. */
static int bind_params(struct rs *rs, const struct jnode *at, const struct jnode *macro,
                       const struct args *a, struct frame *mf)
{
    size_t n_params = macro->n_items;
    size_t n_pos = (size_t)a->n_pos;
    bool used[JINJA_MAX_ARGS] = {false};
    bool explicit_caller = false;
    /* which keyword arguments bind to parameters, then the errors Jinja2 raises before running
     * any default */
    for (size_t i = 0; i < n_params; i++) {
        const char *pname = macro->items[i]->str;
        explicit_caller = explicit_caller || strcmp(pname, "caller") == 0;
        int k = i >= n_pos ? unused_kw(a, used, pname) : -1;
        if (k >= 0) {
            used[k] = true;
        }
    }
    int caller_kw = -1;
    if ((macro->ival & JM_CALLER) && !explicit_caller) {
        caller_kw = unused_kw(a, used, "caller");
        if (caller_kw >= 0) {
            used[caller_kw] = true;
        }
    }
    if (!(macro->ival & JM_KWARGS)) {
        for (int k = 0; k < a->n_kw; k++) {
            if (used[k]) {
                continue;
            }
            if (unused_kw(a, used, "caller") >= 0) {
                return jinja__fail(rs, at, -EINVAL,
                                   "macro '%s' was called from a call block but never calls "
                                   "caller()",
                                   macro->str);
            }
            return jinja__fail(rs, at, -EINVAL, "macro '%s' takes no keyword argument '%s'",
                               macro->str, a->kw_name[k]);
        }
    }
    if (!(macro->ival & JM_VARARGS) && n_pos > n_params) {
        return jinja__fail(rs, at, -EINVAL, "macro '%s' takes not more than %zu argument(s)",
                           macro->str, n_params);
    }
    /* bind */
    bool bound[JINJA_MAX_ARGS] = {false};
    int rc = 0;
    for (size_t i = 0; !rc && i < n_params; i++) {
        const struct jnode *param = macro->items[i];
        struct jv val = {0};
        int k = i >= n_pos ? unused_kw(a, bound, param->str) : -1;
        if (i < n_pos) {
            val = jv_copy(&a->pos[i]);
        } else if (k >= 0) {
            bound[k] = true;
            val = jv_copy(&a->kw[k]);
        } else if (param->kind == JN_KWARG) {
            rc = eval(rs, mf, param->a, &val);
        } else {
            val = jv_undef(param->str, at);
            val.why = JU_PARAM;
        }
        if (!rc) {
            rc = frame_set(rs, mf, param->str, val);
        }
    }
    if (!rc && (macro->ival & JM_CALLER) && !explicit_caller) {
        struct jv caller = jv_undef("caller", at);
        if (caller_kw >= 0) {
            caller = jv_copy(&a->kw[caller_kw]);
        } else {
            caller.why = JU_CALLER;
        }
        rc = frame_set(rs, mf, "caller", caller);
    }
    if (!rc && (macro->ival & JM_KWARGS)) {
        struct json_object *kw = json_object_new_object();
        rc = kw ? 0 : jinja__oom(rs);
        for (int k = 0; !rc && k < a->n_kw; k++) {
            if (used[k]) {
                continue;
            }
            struct json_object *j = jv_to_json(&a->kw[k]);
            if (json_object_object_add(kw, a->kw_name[k], j) != 0) {
                json_object_put(j);
                rc = jinja__oom(rs);
            }
        }
        rc = rc ? (json_object_put(kw), rc) : frame_set(rs, mf, "kwargs", jv_own(kw));
    }
    if (!rc && (macro->ival & JM_VARARGS)) {
        struct json_object *extra = json_object_new_array();
        rc = extra ? 0 : jinja__oom(rs);
        for (size_t i = n_params; !rc && i < n_pos; i++) {
            struct json_object *j = jv_to_json(&a->pos[i]);
            if (json_object_array_add(extra, j) != 0) {
                json_object_put(j);
                rc = jinja__oom(rs);
            }
        }
        if (!rc) {
            jinja__mark_tuple(extra);
        }
        rc = rc ? (json_object_put(extra), rc) : frame_set(rs, mf, "varargs", jv_own(extra));
    }
    return rc;
}

/* Calls the macro value m (its body runs in a new scope inside the one it was defined in). */
static int call_macro(struct rs *rs, const struct jnode *at, const struct jv *m,
                      const struct args *a, struct jv *out)
{
    const struct jnode *macro = m->node;
    if (rs->depth >= rs->lim.max_depth) {
        return jinja__fail(rs, at, -E2BIG, "macro calls nested deeper than %d", rs->lim.max_depth);
    }
    struct frame mf = {.vars = NULL, .parent = m->env};
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    rs->depth++;
    int rc = bind_params(rs, at, macro, a, &mf);
    if (!rc) {
        rc = exec_body(rs, &mf, macro->c, &b);
    }
    rs->depth--;
    frame_clear(&mf);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    return jinja__new_buf_str(rs, at, &b, out);
}

/* loop.cycle(a, b, ...): the argument at loop.index0 modulo their number. */
static int loop_cycle(struct rs *rs, const struct jnode *at, const struct jv *loop,
                      const struct args *a, struct jv *out)
{
    if (a->n_pos == 0) {
        return jinja__fail(rs, at, -EINVAL, "no items for cycling given");
    }
    struct json_object *idx = NULL;
    json_object_object_get_ex(loop->j, "index0", &idx);
    *out = jv_copy(&a->pos[json_object_get_int64(idx) % a->n_pos]);
    return 0;
}

/* cycler.next() (the current item, then advance) and cycler.reset(). */
static int cycler_call(struct rs *rs, const struct jnode *at, const struct jv *c, const char *name,
                       struct jv *out)
{
    struct json_object *items = NULL, *pos = NULL;
    json_object_object_get_ex(c->j, "items", &items);
    json_object_object_get_ex(c->j, "pos", &pos);
    size_t n = json_object_array_length(items);
    int64_t p = json_object_get_int64(pos);
    if (strcmp(name, "reset") == 0) {
        p = 0;
        *out = jv_ref(NULL);
    } else if (strcmp(name, "next") == 0) {
        *out = jv_ref(json_object_array_get_idx(items, (size_t)p));
        p = (p + 1) % (int64_t)n;
    } else {
        return jinja__fail(rs, at, -EINVAL, "cycler has no method '%s'", name);
    }
    struct json_object *cur = json_object_array_get_idx(items, (size_t)p);
    if (json_object_object_add(c->j, "pos", json_object_new_int64(p)) != 0 ||
        json_object_object_add(c->j, "current", cur ? json_object_get(cur) : NULL) != 0) {
        jv_put(out);
        return jinja__oom(rs);
    }
    return 0;
}

/* Calling a joiner: "" the first time, its separator after. */
static int joiner_call(struct rs *rs, const struct jv *j, struct jv *out)
{
    struct json_object *used = NULL, *sep = NULL;
    json_object_object_get_ex(j->j, "used", &used);
    json_object_object_get_ex(j->j, "sep", &sep);
    if (!json_object_get_boolean(used)) {
        if (json_object_object_add(j->j, "used", json_object_new_boolean(1)) != 0) {
            return jinja__oom(rs);
        }
        return jinja__new_str(rs, NULL, "", 0, out);
    }
    *out = jv_ref(sep);
    return 0;
}

static int eval_call(struct rs *rs, struct frame *f, const struct jnode *n, struct jv *out)
{
    const struct jnode *callee = n->a;
    struct args a;
    int rc;
    if (callee->kind == JN_ATTR) { /* obj.method(args) */
        struct jv obj = {0};
        rc = eval(rs, f, callee->a, &obj);
        if (rc) {
            return rc;
        }
        rc = eval_args(rs, f, n, &a);
        if (!rc && jv_type(&obj) == VT_DICT && json_object_get_userdata(obj.j) == &LOOP_MARK &&
            strcmp(callee->str, "cycle") == 0) {
            rc = loop_cycle(rs, n, &obj, &a, out);
            args_free(&a);
        } else if (!rc && jinja__obj_kind(&obj) == JO_CYCLER) {
            rc = cycler_call(rs, n, &obj, callee->str, out);
            args_free(&a);
        } else if (!rc) {
            rc = jinja__call_method(rs, n, &obj, callee->str, &a, out);
            args_free(&a);
        }
        jv_put(&obj);
        return rc;
    }
    rc = eval_args(rs, f, n, &a);
    if (rc) {
        return rc;
    }
    struct jv fn = {0};
    rc = eval(rs, f, callee, &fn);
    if (!rc) {
        if (fn.kind == JV_MACRO) {
            rc = call_macro(rs, n, &fn, &a, out);
        } else if (jinja__obj_kind(&fn) == JO_JOINER) {
            rc = joiner_call(rs, &fn, out);
        } else if (fn.kind == JV_FUNC) {
            const struct jinja__global *g = jinja__global_find(fn.name);
            TANDEM_ASSERT(g != NULL);
            rc = g->fn(rs, n, &a, out);
        } else if (fn.kind == JV_UNDEF && (fn.name || fn.why != JU_MISSING)) {
            rc = undefined_error(rs, callee, &fn);
        } else {
            rc = jinja__fail(rs, n, -EINVAL, "%s is not callable", jv_type_name(&fn));
        }
    }
    jv_put(&fn);
    args_free(&a);
    return rc;
}

/* ---- expressions ---------------------------------------------------------------------------- */

static int eval_container(struct rs *rs, struct frame *f, const struct jnode *n, struct jv *out)
{
    bool dict = n->kind == JN_DICT;
    struct json_object *c = dict ? json_object_new_object() : json_object_new_array();
    if (!c) {
        return jinja__oom(rs);
    }
    int rc = 0;
    for (size_t i = 0; !rc && i < n->n_items; i += dict ? 2 : 1) {
        struct jv k = {0}, v = {0};
        char kbuf[32];
        const char *key = NULL;
        if (dict) {
            rc = eval(rs, f, n->items[i], &k);
            if (!rc) {
                rc = jinja__dict_key(rs, n->items[i], &k, kbuf, &key);
            }
        }
        if (!rc) {
            rc = eval(rs, f, n->items[dict ? i + 1 : i], &v);
        }
        if (!rc) {
            struct json_object *j = jv_to_json(&v);
            int add = dict ? json_object_object_add(c, key, j) : json_object_array_add(c, j);
            if (add != 0) {
                json_object_put(j);
                rc = jinja__oom(rs);
            }
        }
        jv_put(&k);
        jv_put(&v);
    }
    if (rc) {
        json_object_put(c);
        return rc;
    }
    if (n->kind == JN_TUPLE) {
        jinja__mark_tuple(c);
    }
    *out = jv_own(c);
    return 0;
}

static int eval_inner(struct rs *rs, struct frame *f, const struct jnode *n, struct jv *out)
{
    int rc = 0;
    struct jv a = {0}, b = {0};
    switch (n->kind) {
    case JN_CONST:
        if (n->ival == 0) {
            *out = jv_ref(NULL);
            return 0;
        }
        return jinja__new_bool(rs, n->ival == 1, out);
    case JN_INT:
        return jinja__new_int(rs, n->ival, out);
    case JN_FLOAT:
        return jinja__new_float(rs, n->fval, out);
    case JN_STR:
        return jinja__new_str(rs, n, n->str, n->len, out);
    case JN_NAME:
        *out = lookup(rs, f, n->str, n);
        return 0;
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT:
        return eval_container(rs, f, n, out);
    case JN_ATTR:
        rc = eval(rs, f, n->a, &a);
        if (!rc) {
            rc = jinja__get_member(rs, n, &a, n->str, out);
        }
        jv_put(&a);
        return rc;
    case JN_SUBSCRIPT:
        rc = eval(rs, f, n->a, &a);
        if (!rc && n->b->kind == JN_SLICE) {
            rc = eval_slice(rs, f, n, &a, n->b, out);
        } else if (!rc) {
            rc = eval(rs, f, n->b, &b);
            if (!rc) {
                rc = get_item(rs, n, &a, &b, out);
            }
        }
        jv_put(&a);
        jv_put(&b);
        return rc;
    case JN_CALL:
        return eval_call(rs, f, n, out);
    case JN_FILTER: {
        struct args args;
        rc = eval(rs, f, n->a, &a);
        if (!rc) {
            rc = eval_args(rs, f, n, &args);
            if (!rc) {
                rc = jinja__apply_filter(rs, n, n->str, &a, &args, out);
                args_free(&args);
            }
        }
        jv_put(&a);
        return rc;
    }
    case JN_TEST: {
        struct args args;
        bool r = false;
        rc = eval(rs, f, n->a, &a);
        if (!rc) {
            rc = eval_args(rs, f, n, &args);
            if (!rc) {
                rc = jinja__apply_test(rs, n, n->str, &a, &args, &r);
                args_free(&args);
            }
        }
        jv_put(&a);
        return rc ? rc : jinja__new_bool(rs, r != (n->ival != 0), out);
    }
    case JN_UNARY:
        rc = eval(rs, f, n->a, &a);
        if (!rc && n->str[0] == 'n') {
            rc = jinja__new_bool(rs, !jv_truthy(&a), out);
        } else if (!rc) {
            if (!jv_is_num(&a)) {
                rc = jinja__fail(rs, n, -EINVAL, "bad operand type for unary %s: %s", n->str,
                                 jv_type_name(&a));
            } else if (n->str[0] == '+') {
                rc = jv_is_int(&a) ? jinja__new_int(rs, jv_int(&a), out)
                                   : jinja__new_float(rs, jv_num(&a), out);
            } else if (jv_is_int(&a)) {
                rc = jv_int(&a) == INT64_MIN ? jinja__fail(rs, n, -EINVAL, "integer overflow")
                                             : jinja__new_int(rs, -jv_int(&a), out);
            } else {
                rc = jinja__new_float(rs, -jv_num(&a), out);
            }
        }
        jv_put(&a);
        return rc;
    case JN_BINARY:
        rc = eval(rs, f, n->a, &a);
        if (rc) {
            return rc;
        }
        if (strcmp(n->str, "and") == 0 || strcmp(n->str, "or") == 0) {
            bool t = jv_truthy(&a);
            if (t == (n->str[0] == 'o')) {
                *out = a;
                return 0;
            }
            jv_put(&a);
            return eval(rs, f, n->b, out);
        }
        rc = eval(rs, f, n->b, &b);
        if (!rc && n->str[0] == '~') {
            struct buf sb;
            buf_init(&sb, rs->lim.max_output);
            rc = jinja__append_str(rs, n, &a, &sb);
            if (!rc) {
                rc = jinja__append_str(rs, n, &b, &sb);
            }
            if (rc) {
                buf_free(&sb);
            } else {
                rc = jinja__new_buf_str(rs, n, &sb, out);
            }
        } else if (!rc) {
            rc = jinja__arith(rs, n, n->str, &a, &b, out);
        }
        jv_put(&a);
        jv_put(&b);
        return rc;
    case JN_COMPARE: {
        rc = eval(rs, f, n->a, &a);
        bool r = true;
        for (size_t i = 0; !rc && r && i < n->n_items; i++) {
            const struct jnode *op = n->items[i];
            rc = eval(rs, f, op->a, &b);
            if (!rc) {
                rc = jinja__compare(rs, op, op->str, &a, &b, &r);
            }
            jv_put(&a);
            a = b;
            b = (struct jv){0};
        }
        jv_put(&a);
        return rc ? rc : jinja__new_bool(rs, r, out);
    }
    case JN_COND:
        rc = eval(rs, f, n->b, &a);
        if (rc) {
            return rc;
        }
        {
            bool t = jv_truthy(&a);
            jv_put(&a);
            if (t) {
                return eval(rs, f, n->a, out);
            }
            if (n->c) {
                return eval(rs, f, n->c, out);
            }
            *out = jv_undef(NULL, n);
            return 0;
        }
    default:
        return jinja__fail(rs, n, -EINVAL, "not an expression");
    }
}

static int eval(struct rs *rs, struct frame *f, const struct jnode *n, struct jv *out)
{
    /* Left-deep chains (a + b + c ..., x.a.b ..., x|f|g ...) are built by loops in the parser,
     * so their depth is bounded here, across macro calls too, to keep the C stack bounded. */
    *out = (struct jv){0};
    if (rs->eval_depth >= JINJA_MAX_EVAL_DEPTH) {
        return jinja__fail(rs, n, -E2BIG,
                           "template nested deeper than %d (blocks, expressions and "
                           "macro calls)",
                           JINJA_MAX_EVAL_DEPTH);
    }
    rs->eval_depth++;
    int rc = eval_inner(rs, f, n, out);
    rs->eval_depth--;
    return rc;
}

/* ---- statements ----------------------------------------------------------------------------- */

/* Binds target (a name or a tuple of names) to v in frame f. Takes ownership of v. */
static int assign(struct rs *rs, struct frame *f, const struct jnode *target, struct jv v)
{
    if (target->kind == JN_NAME) {
        return frame_set(rs, f, target->str, v);
    }
    if (target->kind == JN_ATTR) {
        struct jv ns = lookup(rs, f, target->a->str, target->a);
        int rc = 0;
        if (ns.kind != JV_NS) {
            rc = jinja__fail(rs, target, -EINVAL,
                             "cannot assign attribute on %s (only namespace())", jv_type_name(&ns));
        } else {
            struct json_object *j = jv_to_json(&v);
            if (json_object_object_add(ns.j, target->str, j) != 0) {
                json_object_put(j);
                rc = jinja__oom(rs);
            }
        }
        jv_put(&ns);
        jv_put(&v);
        return rc;
    }
    /* tuple unpacking */
    int rc = 0;
    if (jv_type(&v) != VT_LIST || json_object_array_length(v.j) != target->n_items) {
        rc = jinja__fail(rs, target, -EINVAL, "cannot unpack %s into %zu names", jv_type_name(&v),
                         target->n_items);
    }
    for (size_t i = 0; !rc && i < target->n_items; i++) {
        rc = frame_set(rs, f, target->items[i]->str, jv_ref(json_object_array_get_idx(v.j, i)));
    }
    jv_put(&v);
    return rc;
}

static int set_loop_var(struct rs *rs, struct frame *f, struct json_object *items, size_t i,
                        size_t n)
{
    struct json_object *loop = json_object_new_object();
    if (!loop) {
        return jinja__oom(rs);
    }
    struct json_object *prev = i > 0 ? json_object_array_get_idx(items, i - 1) : NULL;
    struct json_object *next = i + 1 < n ? json_object_array_get_idx(items, i + 1) : NULL;
    if (json_object_object_add(loop, "index", json_object_new_int64((int64_t)i + 1)) ||
        json_object_object_add(loop, "index0", json_object_new_int64((int64_t)i)) ||
        json_object_object_add(loop, "revindex", json_object_new_int64((int64_t)(n - i))) ||
        json_object_object_add(loop, "revindex0", json_object_new_int64((int64_t)(n - i - 1))) ||
        json_object_object_add(loop, "first", json_object_new_boolean(i == 0)) ||
        json_object_object_add(loop, "last", json_object_new_boolean(i + 1 == n)) ||
        json_object_object_add(loop, "length", json_object_new_int64((int64_t)n)) ||
        json_object_object_add(loop, "depth", json_object_new_int64(1)) ||
        json_object_object_add(loop, "depth0", json_object_new_int64(0)) ||
        (i > 0 && json_object_object_add(loop, "previtem", prev ? json_object_get(prev) : NULL)) ||
        (i + 1 < n &&
         json_object_object_add(loop, "nextitem", next ? json_object_get(next) : NULL))) {
        json_object_put(loop);
        return jinja__oom(rs);
    }
    json_object_set_userdata(loop, &LOOP_MARK, NULL);
    return frame_set(rs, f, "loop", jv_own(loop));
}

static int exec_for(struct rs *rs, struct frame *f, const struct jnode *n, struct buf *out)
{
    struct jv it = {0};
    int rc = eval(rs, f, n->b, &it);
    if (rc) {
        return rc;
    }
    struct json_object *items = NULL;
    rc = jinja__iter_items(rs, n->b, &it, &items);
    jv_put(&it);
    if (rc) {
        return rc;
    }
    if (n->e) { /* {% for x in y if cond %}: filter first, so loop.length counts kept items */
        struct json_object *kept = json_object_new_array();
        rc = kept ? 0 : jinja__oom(rs);
        size_t total = json_object_array_length(items);
        for (size_t i = 0; !rc && i < total; i++) {
            struct frame ff = {.vars = NULL, .parent = f};
            struct json_object *e = json_object_array_get_idx(items, i);
            struct jv cond = {0};
            rc = jinja__count_iterations(rs, n, 1);
            if (!rc) {
                rc = assign(rs, &ff, n->a, jv_ref(e));
            }
            if (!rc) {
                rc = eval(rs, &ff, n->e, &cond);
            }
            if (!rc && jv_truthy(&cond) &&
                json_object_array_add(kept, e ? json_object_get(e) : NULL) != 0) {
                json_object_put(e);
                rc = jinja__oom(rs);
            }
            jv_put(&cond);
            frame_clear(&ff);
        }
        json_object_put(items);
        if (rc) {
            json_object_put(kept);
            return rc;
        }
        items = kept;
    }
    size_t count = json_object_array_length(items);
    for (size_t i = 0; !rc && i < count; i++) {
        struct frame lf = {.vars = NULL, .parent = f};
        rc = jinja__count_iterations(rs, n, 1);
        if (!rc) {
            rc = set_loop_var(rs, &lf, items, i, count);
        }
        if (!rc) {
            rc = assign(rs, &lf, n->a, jv_ref(json_object_array_get_idx(items, i)));
        }
        if (!rc) {
            rc = exec_body(rs, &lf, n->c, out);
        }
        frame_clear(&lf);
        if (rs->loop_ctl) {
            bool brk = rs->loop_ctl == 1;
            rs->loop_ctl = 0;
            if (brk) {
                break;
            }
        }
    }
    json_object_put(items);
    if (!rc && count == 0 && n->d) {
        rc = exec_body(rs, f, n->d, out);
    }
    return rc;
}

/* {% call(params) m(args) %}body{% endcall %}: m(args, caller=<the body as a macro>). */
static int exec_call_block(struct rs *rs, struct frame *f, const struct jnode *n, struct buf *out)
{
    const struct jnode *call = n->a;
    struct args a;
    int rc = eval_args(rs, f, call, &a);
    if (rc) {
        return rc;
    }
    if (a.n_kw >= JINJA_MAX_ARGS) {
        args_free(&a);
        return jinja__fail(rs, call, -EINVAL, "too many arguments (at most %d)", JINJA_MAX_ARGS);
    }
    a.kw_name[a.n_kw] = "caller";
    a.kw[a.n_kw++] = (struct jv){.kind = JV_MACRO, .node = n->b, .env = f};
    struct jv fn = {0}, v = {0};
    rc = eval(rs, f, call->a, &fn);
    if (!rc) {
        if (fn.kind == JV_MACRO) {
            rc = call_macro(rs, call, &fn, &a, &v);
        } else if (fn.kind == JV_UNDEF && (fn.name || fn.why != JU_MISSING)) {
            rc = undefined_error(rs, call->a, &fn);
        } else {
            rc = jinja__fail(rs, call, -EINVAL, "a call block needs a macro, got %s",
                             fn.kind == JV_FUNC ? "a global function" : jv_type_name(&fn));
        }
    }
    if (!rc) {
        rc = jinja__append_str(rs, n, &v, out);
    }
    jv_put(&v);
    jv_put(&fn);
    args_free(&a);
    return rc;
}

/* {% filter f(args)|g %}body{% endfilter %}: the body's output (rendered in its own scope)
 * through the filters in order. */
static int exec_filter_block(struct rs *rs, struct frame *f, const struct jnode *n, struct buf *out)
{
    struct frame bf = {.vars = NULL, .parent = f};
    struct buf b;
    buf_init(&b, rs->lim.max_output);
    int rc = exec_body(rs, &bf, n->c, &b);
    frame_clear(&bf);
    if (rc || rs->loop_ctl) { /* a break/continue leaves the block, dropping its output */
        buf_free(&b);
        return rc;
    }
    struct jv v = {0};
    rc = jinja__new_buf_str(rs, n, &b, &v);
    for (size_t i = 0; !rc && i < n->n_items; i++) {
        const struct jnode *flt = n->items[i];
        struct args args;
        struct jv next = {0};
        rc = eval_args(rs, f, flt, &args);
        if (!rc) {
            rc = jinja__apply_filter(rs, flt, flt->str, &v, &args, &next);
            args_free(&args);
        }
        jv_put(&v);
        v = next;
    }
    if (!rc) {
        rc = jinja__append_str(rs, n, &v, out);
    }
    jv_put(&v);
    return rc;
}

/* {% with a = x %}: x evaluated in f, a bound in the body's own scope. */
static int exec_with(struct rs *rs, struct frame *f, const struct jnode *n, struct buf *out)
{
    struct frame wf = {.vars = NULL, .parent = f};
    int rc = 0;
    for (size_t i = 0; !rc && i + 1 < n->n_items; i += 2) {
        struct jv v = {0};
        rc = eval(rs, f, n->items[i + 1], &v);
        if (!rc) {
            rc = frame_set(rs, &wf, n->items[i]->str, v);
        }
    }
    if (!rc) {
        rc = exec_body(rs, &wf, n->c, out);
    }
    frame_clear(&wf);
    return rc;
}

static int exec_stmt(struct rs *rs, struct frame *f, const struct jnode *n, struct buf *out)
{
    int rc = 0;
    struct jv v = {0};
    switch (n->kind) {
    case JN_TEXT:
        return jinja__buf_add(rs, n, out, n->str, n->len);
    case JN_OUTPUT:
        rc = eval(rs, f, n->a, &v);
        if (!rc) {
            rc = jinja__append_str(rs, n, &v, out);
        }
        jv_put(&v);
        return rc;
    case JN_IF:
        rc = eval(rs, f, n->a, &v);
        if (rc) {
            return rc;
        }
        {
            bool t = jv_truthy(&v);
            jv_put(&v);
            if (t) {
                return exec_body(rs, f, n->b, out);
            }
        }
        if (!n->c) {
            return 0;
        }
        return n->c->kind == JN_IF ? exec_stmt(rs, f, n->c, out) : exec_body(rs, f, n->c, out);
    case JN_FOR:
        return exec_for(rs, f, n, out);
    case JN_SET:
        rc = eval(rs, f, n->b, &v);
        return rc ? rc : assign(rs, f, n->a, v);
    case JN_SET_BLOCK: {
        struct buf b;
        buf_init(&b, rs->lim.max_output);
        rc = exec_body(rs, f, n->c, &b);
        if (rc || rs->loop_ctl) { /* a break/continue leaves the block: nothing assigned */
            buf_free(&b);
            return rc;
        }
        rc = jinja__new_buf_str(rs, n, &b, &v);
        return rc ? rc : assign(rs, f, n->a, v);
    }
    case JN_MACRO: {
        struct jv m = {.kind = JV_MACRO, .node = n, .env = f};
        return frame_set(rs, f, n->str, m);
    }
    case JN_CALL_BLOCK:
        return exec_call_block(rs, f, n, out);
    case JN_FILTER_BLOCK:
        return exec_filter_block(rs, f, n, out);
    case JN_WITH:
        return exec_with(rs, f, n, out);
    case JN_BLOCK: { /* a scoped block sees the enclosing scope, another the template's */
        struct frame bf = {.vars = NULL, .parent = n->ival ? f : rs->root};
        rc = exec_body(rs, &bf, n->c, out);
        frame_clear(&bf);
        return rc;
    }
    case JN_BREAK:
        rs->loop_ctl = 1;
        return 0;
    case JN_CONTINUE:
        rs->loop_ctl = 2;
        return 0;
    case JN_BODY:
        return exec_body(rs, f, n, out);
    default:
        return jinja__fail(rs, n, -EINVAL, "not a statement");
    }
}

static int exec_body(struct rs *rs, struct frame *f, const struct jnode *body, struct buf *out)
{
    if (rs->eval_depth >= JINJA_MAX_EVAL_DEPTH) {
        return jinja__fail(rs, body, -E2BIG,
                           "template nested deeper than %d (blocks, expressions and "
                           "macro calls)",
                           JINJA_MAX_EVAL_DEPTH);
    }
    rs->eval_depth++;
    int rc = 0;
    for (size_t i = 0; i < body->n_items && !rs->loop_ctl && !rc; i++) {
        rc = exec_stmt(rs, f, body->items[i], out);
    }
    rs->eval_depth--;
    return rc;
}

/* ---- public API ----------------------------------------------------------------------------- */

jinja_template *jinja_compile(const char *src, size_t len, char *err, size_t errlen)
{
    if (err && errlen > 0) {
        err[0] = '\0';
    }
    if (!src || len > JINJA_MAX_SOURCE) {
        tandem_set_err(err, errlen, "line 1 column 1: template of %zu bytes exceeds %u bytes", len,
                       (unsigned)JINJA_MAX_SOURCE);
        return NULL;
    }
    jinja_template *t = calloc(1, sizeof(*t));
    if (!t) {
        goto err_oom;
    }
    t->arena = arena_new(64 * 1024);
    if (!t->arena) {
        goto err_free_t;
    }
    if (jinja__parse(t, src, len, err, errlen) != 0) {
        jinja_free(t);
        return NULL;
    }
    return t;

err_free_t:
    free(t);
err_oom:
    tandem_set_err(err, errlen, "out of memory");
    return NULL;
}

void jinja_free(jinja_template *t)
{
    if (!t) {
        return;
    }
    arena_free(t->arena);
    free(t);
}

int jinja_render_ex(const jinja_template *t, struct json_object *ctx,
                    const struct jinja_limits *limits, char **out, size_t *out_len, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (out_len) {
        *out_len = 0;
    }
    if (err && errlen > 0) {
        err[0] = '\0';
    }
    struct frame root = {0};
    struct rs rs = {
        .ctx = (ctx && json_object_is_type(ctx, json_type_object)) ? ctx : NULL,
        .lim = limits ? *limits : jinja_default_limits,
        .root = &root,
        .err = err,
        .errlen = errlen,
    };
    if (ctx && !rs.ctx) {
        return jinja__fail(&rs, NULL, -EINVAL, "render context must be a JSON object");
    }
    struct buf b;
    buf_init(&b, rs.lim.max_output);
    int rc = exec_body(&rs, &root, t->root, &b);
    frame_clear(&root);
    if (rc) {
        buf_free(&b);
        return rc;
    }
    *out = buf_detach(&b, out_len);
    if (!*out) {
        return jinja__oom(&rs);
    }
    return 0;
}

int jinja_render(const jinja_template *t, struct json_object *ctx, char **out, size_t *out_len,
                 char *err, size_t errlen)
{
    return jinja_render_ex(t, ctx, NULL, out, out_len, err, errlen);
}
