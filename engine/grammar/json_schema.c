/*
 * JSON schema front end (see json_schema.h). The schema is parsed with lib/json.h and walked
 * once; every subschema becomes a GBNF expression, and every expression that is more than a rule
 * name becomes a rule named after the subschema's place ("root-address-street"). $ref targets
 * become rules of their own ("def-Node"), queued and converted after the root so that recursion
 * and sharing cost nothing. The shared rules (space, string, value, ...) are written at the end,
 * only those in use.
 *
 * Objects use the chained-optional construction: for properties p0..pn-1 of which the first
 * required is pr, the members are "one of p0..pr comes first, then each later one with a
 * leading comma", and the tail after property k is a rule of its own (so the grammar stays
 * linear in the number of properties); the language is unambiguous and every combination of
 * optional members has its commas right. Extra members (additionalProperties) follow the
 * declared ones; their keys are any canonically escaped string except the declared names, a trie
 * over the names written as nested alternatives ("a key that leaves the trie somewhere").
 *
 * Integer and bounded number ranges are written digit by digit: for a fixed digit count, the
 * numbers between two digit strings x and y are "same first digit, then recurse", or "x's first
 * digit then anything at least x's rest | a digit strictly between then anything | y's first
 * digit then anything at most y's rest". A bounded number is the union over fraction lengths
 * k = 0..6 of scaled-integer ranges with the '.' written k digits from the end; bounds are
 * compared in decimal, from the shortest round-trip form of a double, and generated numbers keep
 * at most 15 significant digits, so that no generated number rounds onto an exclusive bound.
 */
#include "engine/grammar/json_schema.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/regex.h"
#include "lib/common.h"
#include "lib/json.h"

#define JS_MAX_TEXT     GRAMMAR_MAX_TEXT  /* cap of every buffer built here */
#define JS_NAME_MAX     80                /* rule names, before a "-N" suffix */
#define JS_PATH_MAX     512               /* JSON pointers in messages */
#define JS_MAX_FRACTION 6                 /* fraction digits of bounded numbers */
#define JS_MAX_NAME_CPS 128               /* declared names excluded from extra keys */
#define JS_MAX_OPTIONAL 64                /* optional prefixItems (nested groups) */
#define JS_INT_CAP      999999999999999LL /* 15 digits: bounded integers and k = 0 */

/* ---- shared rules ---- */

enum prim {
    P_SPACE,
    P_VALUE,
    P_OBJECT,
    P_ARRAY,
    P_STRING,
    P_CHAR,
    P_NUMBER,
    P_INTEGER,
    P_INTEGRAL,
    P_DECIMAL,
    P_BOOLEAN,
    P_NULL,
    P_KEY,
    P_KEYCHAR,
    P_COUNT
};

#define BIT(p) (1u << (p))

static const struct {
    const char *name;
    const char *body; /* NULL: written by prim_body */
    unsigned deps;
} prims[P_COUNT] = {
    [P_SPACE] = {"space", "(\" \" | \"\\n\" [ \\t]{0,20})?", 0},
    [P_VALUE] = {"value", "object | array | string | number | boolean | null",
                 BIT(P_OBJECT) | BIT(P_ARRAY) | BIT(P_STRING) | BIT(P_NUMBER) | BIT(P_BOOLEAN) |
                     BIT(P_NULL)},
    [P_OBJECT] = {"object",
                  "\"{\" space (key \":\" space value (\",\" space key \":\" space value)*)? \"}\" "
                  "space",
                  BIT(P_SPACE) | BIT(P_KEY) | BIT(P_VALUE)},
    [P_ARRAY] = {"array", "\"[\" space (value (\",\" space value)*)? \"]\" space",
                 BIT(P_SPACE) | BIT(P_VALUE)},
    [P_STRING] = {"string", "\"\\\"\" char* \"\\\"\" space", BIT(P_CHAR) | BIT(P_SPACE)},
    [P_CHAR] = {"char",
                "[\\x20!#-\\[\\]-~\\u0080-\\uD7FF\\uE000-\\U0010FFFF] | \"\\\\\" ([\\\"\\\\/bfnrt] "
                "| \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))",
                0},
    [P_NUMBER] = {"number",
                  "\"-\"? integral-part (\".\" decimal-part)? ([eE] [-+]? [0-9]{1,2})? space",
                  BIT(P_INTEGRAL) | BIT(P_DECIMAL) | BIT(P_SPACE)},
    [P_INTEGER] = {"integer", "\"-\"? integral-part space", BIT(P_INTEGRAL) | BIT(P_SPACE)},
    [P_INTEGRAL] = {"integral-part", "\"0\" | [1-9] [0-9]{0,15}", 0},
    [P_DECIMAL] = {"decimal-part", "[0-9]{1,16}", 0},
    [P_BOOLEAN] = {"boolean", "(\"true\" | \"false\") space", BIT(P_SPACE)},
    [P_NULL] = {"null", "\"null\" space", BIT(P_SPACE)},
    [P_KEY] = {"key", "\"\\\"\" key-char* \"\\\"\" space", BIT(P_KEYCHAR) | BIT(P_SPACE)},
    [P_KEYCHAR] = {"key-char", NULL, 0}, /* any character but U+0000, canonically escaped */
};

/* ---- keywords ---- */

enum kw_kind {
    KW_ANNOT,
    KW_DEFS,
    KW_TYPE,
    KW_ENUM,
    KW_OBJ,
    KW_ARR,
    KW_STR,
    KW_NUM,
    KW_REF,
    KW_COMB
};

static const struct {
    const char *name;
    enum kw_kind kind;
} keywords[] = {
    {"title", KW_ANNOT},
    {"description", KW_ANNOT},
    {"default", KW_ANNOT},
    {"examples", KW_ANNOT},
    {"$schema", KW_ANNOT},
    {"$id", KW_ANNOT},
    {"$comment", KW_ANNOT},
    {"deprecated", KW_ANNOT},
    {"readOnly", KW_ANNOT},
    {"writeOnly", KW_ANNOT},
    {"$defs", KW_DEFS},
    {"definitions", KW_DEFS},
    {"type", KW_TYPE},
    {"enum", KW_ENUM},
    {"const", KW_ENUM},
    {"properties", KW_OBJ},
    {"required", KW_OBJ},
    {"additionalProperties", KW_OBJ},
    {"minProperties", KW_OBJ},
    {"maxProperties", KW_OBJ},
    {"items", KW_ARR},
    {"prefixItems", KW_ARR},
    {"additionalItems", KW_ARR},
    {"minItems", KW_ARR},
    {"maxItems", KW_ARR},
    {"uniqueItems", KW_ARR},
    {"minLength", KW_STR},
    {"maxLength", KW_STR},
    {"pattern", KW_STR},
    {"format", KW_STR},
    {"minimum", KW_NUM},
    {"maximum", KW_NUM},
    {"exclusiveMinimum", KW_NUM},
    {"exclusiveMaximum", KW_NUM},
    {"$ref", KW_REF},
    {"anyOf", KW_COMB},
    {"oneOf", KW_COMB},
    {"allOf", KW_COMB},
};

/* JSON types as a bit set. */
enum {
    T_NULL = 1,
    T_BOOL = 2,
    T_OBJ = 4,
    T_ARR = 8,
    T_STR = 16,
    T_NUM = 32,
    T_INT = 64,
    T_ALL = 127
};

static const struct {
    const char *name;
    unsigned bit;
} type_names[] = {{"null", T_NULL},  {"boolean", T_BOOL}, {"object", T_OBJ}, {"array", T_ARR},
                  {"string", T_STR}, {"number", T_NUM},   {"integer", T_INT}};

/* ---- converter state ---- */

struct js_ref {
    char *ref;                  /* the $ref text */
    const char *rule;           /* its rule's name (owned by names) */
    struct json_object *target; /* borrowed from the schema */
};

/* "Rule from may begin with rule to" (nodes: 0 the root, i + 1 refs[i]): a cycle of these is left
 * recursion, which the GBNF compiler refuses, so it is refused here with a schema-level message. */
struct js_edge {
    size_t from, to;
};

struct js {
    struct json_object *root;
    struct buf rules; /* finished rules, "name ::= body\n" each */
    char **names;     /* open-addressing set of every rule name in use (owned) */
    size_t names_cap;
    size_t names_len;
    struct js_ref *refs;
    size_t n_refs, cap_refs;
    unsigned used;          /* shared rules referenced (BIT(P_*)) */
    char path[JS_PATH_MAX]; /* JSON pointer of the schema being converted */
    size_t path_len;
    int depth;
    size_t cur;   /* node being converted (see struct js_edge) */
    bool leading; /* nothing has been read yet in cur's rule at this point */
    struct js_edge *edges;
    size_t n_edges, cap_edges;
    char *err;
    size_t errlen;
};

static int js_fail(struct js *js, int rc, const char *fmt, ...) TANDEM_PRINTF(3, 4);

static int js_fail(struct js *js, int rc, const char *fmt, ...)
{
    if (js->err && js->errlen > 0 && js->err[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(js->err, js->errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static const char *js_where(const struct js *js)
{
    return js->path_len ? js->path : "the root";
}

/* A refused or malformed keyword at the current schema. */
static int js_bad(struct js *js, const char *kw, const char *why)
{
    return js_fail(js, -EINVAL, "JSON schema keyword '%s' at %s: %s", kw, js_where(js), why);
}

static int js_oom(struct js *js)
{
    return js_fail(js, -ENOMEM, "out of memory converting the JSON schema");
}

/* 0, or the error of a buffer whose appends failed (-E2BIG for a full one). */
static int js_check_buf(struct js *js, const struct buf *b)
{
    int rc = buf_error(b);
    if (rc == 0) {
        return 0;
    }
    if (rc == -ENOMEM) {
        return js_oom(js);
    }
    return js_fail(js, -E2BIG, "JSON schema grammar larger than %zu bytes", b->max);
}

/* Appends "/token" (escaped as a JSON pointer) to the path; returns the length to restore. */
static size_t path_push(struct js *js, const char *token)
{
    size_t saved = js->path_len;
    size_t n = js->path_len;
    const size_t room = sizeof(js->path) - 1;
    if (n < room) {
        js->path[n++] = '/';
    }
    for (const char *p = token; *p && n < room; p++) {
        if (*p == '~' || *p == '/') {
            js->path[n++] = '~';
            if (n < room) {
                js->path[n++] = *p == '~' ? '0' : '1';
            }
        } else {
            js->path[n++] = *p;
        }
    }
    js->path[n] = '\0';
    js->path_len = n;
    return saved;
}

static size_t path_push_index(struct js *js, const char *kw, size_t i)
{
    size_t saved = path_push(js, kw);
    char idx[24];
    snprintf(idx, sizeof(idx), "%zu", i);
    path_push(js, idx);
    return saved;
}

static void path_pop(struct js *js, size_t saved)
{
    js->path_len = saved;
    js->path[saved] = '\0';
}

/* ---- rule names ---- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    }
    return h;
}

static size_t names_slot(const struct js *js, const char *name)
{
    size_t i = (size_t)name_hash(name) & (js->names_cap - 1);
    while (js->names[i] && strcmp(js->names[i], name) != 0) {
        i = (i + 1) & (js->names_cap - 1);
    }
    return i;
}

static bool names_has(const struct js *js, const char *name)
{
    return js->names_cap > 0 && js->names[names_slot(js, name)] != NULL;
}

/* Adds name (not present) to the set; returns the stored copy or NULL on OOM. */
static char *names_add(struct js *js, const char *name)
{
    if ((js->names_len + 1) * 2 > js->names_cap) {
        size_t ncap = js->names_cap ? js->names_cap * 2 : 64;
        char **old = js->names;
        size_t old_cap = js->names_cap;
        js->names = calloc(ncap, sizeof(*js->names));
        if (!js->names) {
            js->names = old;
            return NULL;
        }
        js->names_cap = ncap;
        for (size_t i = 0; i < old_cap; i++) {
            if (old[i]) {
                js->names[names_slot(js, old[i])] = old[i];
            }
        }
        free(old);
    }
    char *copy = strdup(name);
    if (!copy) {
        return NULL;
    }
    js->names[names_slot(js, name)] = copy;
    js->names_len++;
    return copy;
}

/* Appends to a rule-name hint: "-" and the word with every run of characters outside
 * [A-Za-z0-9] turned into one '-', cut at JS_NAME_MAX in all. */
static void hint_join(char *dst, const char *base, const char *word)
{
    size_t n = strlen(base);
    if (n > JS_NAME_MAX) {
        n = JS_NAME_MAX;
    }
    memmove(dst, base, n);
    bool dash = false;
    if (n < JS_NAME_MAX) {
        dst[n++] = '-';
        dash = true;
    }
    for (const char *p = word; *p && n < JS_NAME_MAX; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (ok) {
            dst[n++] = c;
            dash = false;
        } else if (!dash) {
            dst[n++] = '-';
            dash = true;
        }
    }
    while (n > 1 && dst[n - 1] == '-') {
        n--;
    }
    dst[n] = '\0';
}

static void hint_join_index(char *dst, const char *base, const char *word, size_t i)
{
    char w[48];
    snprintf(w, sizeof(w), "%s%zu", word, i);
    hint_join(dst, base, w);
}

/* A fresh rule name from hint (hint, hint-2, hint-3, ...), registered; NULL on OOM. */
static const char *unique_name(struct js *js, const char *hint)
{
    char name[JS_NAME_MAX + 24];
    snprintf(name, sizeof(name), "%s", hint);
    for (unsigned long i = 2; names_has(js, name); i++) {
        snprintf(name, sizeof(name), "%s-%lu", hint, i);
    }
    return names_add(js, name);
}

static void add_rule(struct js *js, const char *name, const struct buf *body)
{
    buf_appendf(&js->rules, "%s ::= %s\n", name, buf_cstr(body));
}

/* The shared rule p, marked used. */
static const char *use(struct js *js, enum prim p)
{
    js->used |= BIT(p);
    return prims[p].name;
}

/* ---- GBNF literals ---- */

static void put_lit_cp(struct buf *out, uint32_t cp)
{
    char c = (char)cp;
    if (cp == '"' || cp == '\\') {
        char e[2] = {'\\', c};
        buf_append(out, e, 2);
    } else if (cp >= 0x20 && cp < 0x7F) {
        buf_append(out, &c, 1);
    } else if (cp < 0x80) {
        buf_appendf(out, "\\x%02X", (unsigned)cp);
    } else if (cp <= 0xFFFF) {
        buf_appendf(out, "\\u%04X", (unsigned)cp);
    } else {
        buf_appendf(out, "\\U%08X", (unsigned)cp);
    }
}

/* Decodes one code point of valid UTF-8 at s (n bytes left); returns its length (1 for a
 * byte that is not valid UTF-8, decoded as U+FFFD). */
static size_t utf8_next(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = tandem_utf8_seq_len(p, n);
    if (len == 0) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = tandem_utf8_cp(p, len);
    return len;
}

/* text[0..len) (UTF-8) as one GBNF "literal". */
static void put_literal(struct buf *out, const char *text, size_t len)
{
    buf_appends(out, "\"");
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_next(text + i, len - i, &cp);
        put_lit_cp(out, cp);
    }
    buf_appends(out, "\"");
}

/* The compact JSON text of o (lib/json.h's canonical escaping) as one GBNF "literal". */
static int put_json_literal(struct js *js, struct json_object *o, struct buf *out)
{
    struct buf text;
    buf_init(&text, JS_MAX_TEXT);
    int rc = json_to_buf(o, 0, &text);
    if (rc == -EINVAL) {
        rc = js_fail(js, -EINVAL, "JSON schema at %s: a value cannot be written as JSON",
                     js_where(js));
    } else if (rc != 0) {
        rc = js_check_buf(js, &text);
    } else {
        put_literal(out, text.data, text.len);
    }
    buf_free(&text);
    return rc;
}

/* Appends a GBNF postfix for {min,max} (max < 0: unbounded) to a term already written. */
static void put_repeat(struct buf *out, long min, long max)
{
    if (min == 1 && max == 1) {
        return;
    }
    if (min == 0 && max == 1) {
        buf_appends(out, "?");
    } else if (max < 0 && min <= 1) {
        buf_appends(out, min ? "+" : "*");
    } else if (max < 0) {
        buf_appendf(out, "{%ld,}", min);
    } else if (min == max) {
        buf_appendf(out, "{%ld}", min);
    } else {
        buf_appendf(out, "{%ld,%ld}", min, max);
    }
}

/* Whether the GBNF expression s is one "literal", [class] or ( group ) already. */
static bool is_one_term(const char *s)
{
    size_t n = strlen(s);
    if (n < 2 || !strchr("\"[(", s[0])) {
        return false;
    }
    int depth = 0;
    char in = 0; /* '"' or ']' while inside a literal or class */
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in) {
            if (c == '\\') {
                i++;
            } else if (c == in) {
                in = 0;
            }
        } else if (c == '"' || c == '[') {
            in = c == '"' ? '"' : ']';
        } else if (c == '(' || c == ')') {
            depth += c == '(' ? 1 : -1;
        }
        if (!in && depth == 0 && i + 1 < n) {
            return false; /* something follows the first term */
        }
    }
    return true;
}

/* regex_to_gbnf in json_string mode into out, as one term. */
static int put_regex(struct js *js, const char *re, size_t len, const char *kw, struct buf *out)
{
    char msg[200];
    struct buf expr;
    buf_init(&expr, JS_MAX_TEXT);
    int rc = regex_to_gbnf(re, len, true, &expr, msg, sizeof(msg));
    if (rc == 0) {
        bool wrap = !is_one_term(buf_cstr(&expr));
        buf_appendf(out, wrap ? "(%s)" : "%s", buf_cstr(&expr));
    } else if (rc == -ENOMEM) {
        rc = js_oom(js);
    } else {
        rc = js_fail(js, rc, "JSON schema keyword '%s' at %s: %s", kw, js_where(js), msg);
    }
    buf_free(&expr);
    return rc;
}

/* ---- small readers ---- */

static bool is_integral(struct json_object *o)
{
    if (json_object_is_type(o, json_type_int)) {
        return true;
    }
    if (!json_object_is_type(o, json_type_double)) {
        return false;
    }
    double d = json_object_get_double(o);
    return isfinite(d) && floor(d) == d;
}

/* A count keyword (minLength, maxItems, ...): a non-negative integer; -E2BIG above
 * JSON_SCHEMA_MAX_COUNT. *out = def when absent. */
static int get_count(struct js *js, struct json_object *schema, const char *kw, long def, long *out)
{
    struct json_object *v;
    *out = def;
    if (!json_object_object_get_ex(schema, kw, &v)) {
        return 0;
    }
    if (!is_integral(v) || json_object_get_double(v) < 0) {
        return js_bad(js, kw, "expected a non-negative integer");
    }
    if (json_object_get_double(v) > JSON_SCHEMA_MAX_COUNT) {
        return js_fail(js, -E2BIG, "JSON schema keyword '%s' at %s: above the limit of %d", kw,
                       js_where(js), JSON_SCHEMA_MAX_COUNT);
    }
    *out = (long)json_object_get_int64(v);
    return 0;
}

/* The JSON types value has (T_INT and T_NUM for integers). */
static unsigned value_types(struct json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null:
        return T_NULL;
    case json_type_boolean:
        return T_BOOL;
    case json_type_int:
        return T_INT | T_NUM;
    case json_type_double:
        return is_integral(v) ? T_INT | T_NUM : T_NUM;
    case json_type_string:
        return T_STR;
    case json_type_array:
        return T_ARR;
    case json_type_object:
        return T_OBJ;
    }
    return 0;
}

/* ---- decimals for bounds ---- */

/* +-mant * 10^exp, exactly; mant < 10^18. */
struct dec {
    bool neg;
    uint64_t mant;
    int exp;
};

static int digit_count(uint64_t v)
{
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static uint64_t pow10u(int e)
{
    uint64_t p = 1;
    while (e-- > 0) {
        p *= 10;
    }
    return p;
}

/* A JSON number as a decimal: integers exactly, doubles by their shortest round-trip form (the
 * text a validator would print and read back as the same double). */
static struct dec dec_from_json(struct json_object *v)
{
    struct dec d = {0};
    if (json_object_is_type(v, json_type_int)) {
        int64_t i = json_object_get_int64(v);
        d.neg = i < 0;
        d.mant = i < 0 ? (uint64_t)0 - (uint64_t)i : (uint64_t)i;
        if (d.mant >= 1000000000000000000ULL) {
            /* keep mant < 10^18; the value moves by less than 10, far past every cap */
            d.mant /= 10;
            d.exp = 1;
        }
        return d;
    }
    double x = json_object_get_double(v);
    char text[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(text, sizeof(text), "%.*e", p - 1, x);
        if (strtod(text, NULL) == x) {
            break;
        }
    }
    /* text is "-d.ddde+-XX" */
    const char *s = text;
    if (*s == '-') {
        d.neg = true;
        s++;
    }
    int ndig = 0;
    for (; *s && *s != 'e'; s++) {
        if (*s >= '0' && *s <= '9') {
            d.mant = d.mant * 10 + (uint64_t)(*s - '0');
            ndig++;
        }
    }
    d.exp = (*s == 'e' ? (int)strtol(s + 1, NULL, 10) : 0) - (ndig - 1);
    while (d.mant != 0 && d.mant % 10 == 0) {
        d.mant /= 10;
        d.exp++;
    }
    if (d.mant == 0) {
        d.neg = false;
        d.exp = 0;
    }
    return d;
}

/* Compares two decimals: <0, 0, >0. */
static int dec_cmp(struct dec a, struct dec b)
{
    if (a.mant == 0 && b.mant == 0) {
        return 0;
    }
    int sa = a.mant == 0 ? 0 : a.neg ? -1 : 1;
    int sb = b.mant == 0 ? 0 : b.neg ? -1 : 1;
    if (sa != sb) {
        return sa < sb ? -1 : 1;
    }
    int oa = digit_count(a.mant) + a.exp, ob = digit_count(b.mant) + b.exp;
    int mag;
    if (oa != ob) {
        mag = oa < ob ? -1 : 1;
    } else {
        int la = digit_count(a.mant), lb = digit_count(b.mant);
        uint64_t ma = a.mant * pow10u(lb > la ? lb - la : 0);
        uint64_t mb = b.mant * pow10u(la > lb ? la - lb : 0);
        mag = ma < mb ? -1 : ma > mb;
    }
    return sa < 0 ? -mag : mag;
}

/* floor (up = false) or ceil of d * 10^k, clamped to +-(cap + 1). */
static int64_t dec_scaled(struct dec d, int k, bool up, int64_t cap)
{
    int e = d.exp + k;
    uint64_t q, limit = (uint64_t)cap + 1;
    bool rem = false;
    if (e >= 0) {
        if (e > 18 || (d.mant != 0 && d.mant > limit / pow10u(e))) {
            q = limit;
        } else {
            q = d.mant * pow10u(e);
        }
    } else if (-e > 18) {
        q = 0;
        rem = d.mant != 0;
    } else {
        q = d.mant / pow10u(-e);
        rem = d.mant % pow10u(-e) != 0;
    }
    if (q > limit) {
        q = limit;
    }
    /* |d * 10^k| = q + (rem ? fraction : 0) */
    bool away = rem && (d.neg ? !up : up);
    if (away && q < limit) {
        q++;
    }
    return d.neg ? -(int64_t)q : (int64_t)q;
}

/* One bound: minimum/exclusiveMinimum or maximum/exclusiveMaximum, the stricter of them. */
struct bound {
    bool set;
    bool exclusive;
    struct dec v;
};

static int read_bound(struct js *js, struct json_object *schema, bool upper, struct bound *b)
{
    const char *incl_kw = upper ? "maximum" : "minimum";
    const char *excl_kw = upper ? "exclusiveMaximum" : "exclusiveMinimum";
    struct json_object *incl = NULL, *excl = NULL;
    bool has_incl = json_object_object_get_ex(schema, incl_kw, &incl);
    bool has_excl = json_object_object_get_ex(schema, excl_kw, &excl);
    memset(b, 0, sizeof(*b));
    bool draft4_excl = false;
    if (has_excl && json_object_is_type(excl, json_type_boolean)) {
        draft4_excl = json_object_get_boolean(excl);
        has_excl = false;
    }
    if (has_incl && !json_object_is_type(incl, json_type_int) &&
        !json_object_is_type(incl, json_type_double)) {
        return js_bad(js, incl_kw, "expected a number");
    }
    if (has_excl && !json_object_is_type(excl, json_type_int) &&
        !json_object_is_type(excl, json_type_double)) {
        return js_bad(js, excl_kw, "expected a number or a boolean");
    }
    if (has_incl) {
        b->set = true;
        b->exclusive = draft4_excl;
        b->v = dec_from_json(incl);
    }
    if (has_excl) {
        struct dec e = dec_from_json(excl);
        int c = b->set ? dec_cmp(e, b->v) : 0;
        if (!b->set || (upper ? c <= 0 : c >= 0)) {
            b->set = true;
            b->exclusive = true;
            b->v = e;
        }
    }
    return 0;
}

/* ---- digit ranges ---- */

/* [0-9] for digit positions [from, to), with "." before position dot. */
static void put_any_digits(struct buf *out, int from, int to, int dot)
{
    int before = (dot > from && dot < to) ? dot - from : to - from;
    if (dot == from && to > from) {
        buf_appends(out, " \".\"");
    }
    if (before > 0) {
        buf_appends(out, " [0-9]");
        put_repeat(out, before, before);
    }
    if (dot > from && dot < to) {
        buf_appends(out, " \".\" [0-9]");
        put_repeat(out, to - dot, to - dot);
    }
}

/* The digit strings from x[pos..w) to y[pos..w) (x <= y, both w long), with "." before position
 * dot; terms are written with a leading space each. */
static void put_digit_range(struct buf *out, const char *x, const char *y, int pos, int w, int dot)
{
    if (pos == w) {
        return;
    }
    if (dot == pos) {
        buf_appends(out, " \".\"");
    }
    if (x[pos] == y[pos]) {
        buf_appendf(out, " \"%c\"", x[pos]);
        put_digit_range(out, x, y, pos + 1, w, dot);
        return;
    }
    bool low_zero = true, high_nine = true;
    for (int i = pos + 1; i < w; i++) {
        low_zero = low_zero && x[i] == '0';
        high_nine = high_nine && y[i] == '9';
    }
    char a = x[pos], b = y[pos];
    char nines[24], zeros[24];
    memcpy(nines, x, (size_t)w);
    memcpy(zeros, y, (size_t)w);
    for (int i = pos + 1; i < w; i++) {
        nines[i] = '9';
        zeros[i] = '0';
    }
    char last = high_nine ? b : (char)(b - 1);
    int alts = !low_zero + !high_nine + ((low_zero ? a : a + 1) <= last);
    buf_appends(out, alts > 1 ? " (" : "");
    const char *sep = "";
    if (!low_zero) {
        buf_appendf(out, " \"%c\"", a);
        put_digit_range(out, x, nines, pos + 1, w, dot);
        a++;
        sep = " |";
    }
    if (a <= last) {
        buf_appends(out, sep);
        if (a == last) {
            buf_appendf(out, " \"%c\"", a);
        } else {
            buf_appendf(out, " [%c-%c]", a, last);
        }
        put_any_digits(out, pos + 1, w, dot);
        sep = " |";
    }
    if (!high_nine) {
        buf_appends(out, sep);
        buf_appendf(out, " \"%c\"", b);
        put_digit_range(out, zeros, y, pos + 1, w, dot);
    }
    buf_appends(out, alts > 1 ? " )" : "");
}

/* Alternatives (each prefixed by *sep) for the numbers n/10^k, a <= n <= b, 0 <= a, written
 * without leading zeros and with exactly k fraction digits. */
static void put_scaled_range(struct buf *out, int64_t a, int64_t b, int k, const char *prefix,
                             const char **sep)
{
    for (int m = 1; m <= 18 - k; m++) {
        int64_t lo = m == 1 ? 0 : (int64_t)pow10u(m - 1 + k);
        int64_t hi = (int64_t)pow10u(m + k) - 1;
        lo = lo > a ? lo : a;
        hi = hi < b ? hi : b;
        if (lo > hi) {
            continue;
        }
        int w = m + k;
        char x[32], y[32];
        snprintf(x, sizeof(x), "%0*" PRId64, w, lo);
        snprintf(y, sizeof(y), "%0*" PRId64, w, hi);
        buf_appends(out, *sep);
        buf_appends(out, prefix);
        put_digit_range(out, x, y, 0, w, k > 0 ? m : -1);
        *sep = " |";
    }
}

/* Alternatives for the numbers n/10^k with lo <= n <= hi (any signs). */
static void put_signed_range(struct buf *out, int64_t lo, int64_t hi, int k, const char **sep)
{
    if (lo < 0) {
        int64_t top = hi < -1 ? hi : -1;
        put_scaled_range(out, -top, -lo, k, " \"-\"", sep);
    }
    if (hi >= 0) {
        put_scaled_range(out, lo > 0 ? lo : 0, hi, k, "", sep);
    }
}

/* integer (integer_only) or number with minimum/maximum bounds. */
static int gen_number(struct js *js, struct json_object *schema, bool integer_only, struct buf *out)
{
    struct bound lo, hi;
    int rc = read_bound(js, schema, false, &lo);
    if (rc == 0) {
        rc = read_bound(js, schema, true, &hi);
    }
    if (rc != 0) {
        return rc;
    }
    if (!lo.set && !hi.set) {
        buf_appends(out, use(js, integer_only ? P_INTEGER : P_NUMBER));
        return 0;
    }
    const char *sep = "";
    buf_appends(out, "(");
    int max_k = integer_only ? 0 : JS_MAX_FRACTION;
    for (int k = 0; k <= max_k; k++) {
        int64_t cap = k == 0 ? JS_INT_CAP : (int64_t)pow10u(9 + k) - 1;
        int64_t n_lo = -cap, n_hi = cap;
        if (lo.set) {
            n_lo =
                lo.exclusive ? dec_scaled(lo.v, k, false, cap) + 1 : dec_scaled(lo.v, k, true, cap);
        }
        if (hi.set) {
            n_hi =
                hi.exclusive ? dec_scaled(hi.v, k, true, cap) - 1 : dec_scaled(hi.v, k, false, cap);
        }
        n_lo = n_lo < -cap ? -cap : n_lo;
        n_hi = n_hi > cap ? cap : n_hi;
        if (n_lo <= n_hi) {
            put_signed_range(out, n_lo, n_hi, k, &sep);
        }
    }
    if (*sep == '\0') {
        return js_fail(js, -EINVAL,
                       "JSON schema at %s: no %s within minimum/maximum (integers of at most 15 "
                       "digits, decimals of at most %d fraction digits)",
                       js_where(js), integer_only ? "integer" : "number", JS_MAX_FRACTION);
    }
    buf_appendf(out, " ) %s", use(js, P_SPACE));
    return 0;
}

/* ---- strings ---- */

static const char re_year[] = "([0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";
static const char re_leap[] =
    "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)";
static const char re_time[] = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?"
                              "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
static const char re_uuid[] =
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
static const char re_email[] = "[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@"
                               "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
                               "(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+";
static const char re_octet[] = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

/* The regex of a supported format into re (RFC 3339 dates with real month lengths and leap
 * years); -EINVAL for another format. */
static int format_regex(struct js *js, const char *format, struct buf *re)
{
    bool date = strcmp(format, "date") == 0 || strcmp(format, "date-time") == 0;
    if (date) {
        buf_appendf(re,
                    "(%s-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|%s-(0[469]|11)-"
                    "(0[1-9]|[12][0-9]|30)|%s-02-(0[1-9]|1[0-9]|2[0-8])|%s-02-29)",
                    re_year, re_year, re_year, re_leap);
    }
    if (strcmp(format, "date-time") == 0) {
        buf_appendf(re, "T%s", re_time);
    } else if (strcmp(format, "time") == 0) {
        buf_appends(re, re_time);
    } else if (strcmp(format, "uuid") == 0) {
        buf_appends(re, re_uuid);
    } else if (strcmp(format, "email") == 0) {
        buf_appends(re, re_email);
    } else if (strcmp(format, "ipv4") == 0) {
        buf_appendf(re, "%s(\\.%s){3}", re_octet, re_octet);
    } else if (!date) {
        return js_fail(js, -EINVAL,
                       "JSON schema keyword 'format' at %s: unsupported format '%.60s' (supported: "
                       "date, time, date-time, uuid, email, ipv4)",
                       js_where(js), format);
    }
    return 0;
}

/* A JSON Schema pattern (ECMA-262, found anywhere in the string unless anchored) as a regex
 * that must match the whole string. */
static void pattern_regex(const char *pat, size_t len, struct buf *re)
{
    bool start = len > 0 && pat[0] == '^';
    bool end = false;
    if (len > (size_t)start && pat[len - 1] == '$') {
        size_t slashes = 0;
        while (slashes + 1 < len && pat[len - 2 - slashes] == '\\') {
            slashes++;
        }
        end = slashes % 2 == 0;
    }
    size_t from = start ? 1 : 0, to = end ? len - 1 : len;
    buf_appends(re, start ? "" : "[\\s\\S]*");
    buf_appends(re, "(?:");
    buf_append(re, pat + from, to - from);
    buf_appends(re, ")");
    buf_appends(re, end ? "" : "[\\s\\S]*");
}

static int gen_string(struct js *js, struct json_object *schema, struct buf *out)
{
    long min_len = 0, max_len = -1;
    int rc = get_count(js, schema, "minLength", 0, &min_len);
    if (rc == 0) {
        rc = get_count(js, schema, "maxLength", -1, &max_len);
    }
    if (rc != 0) {
        return rc;
    }
    if (max_len >= 0 && min_len > max_len) {
        return js_bad(js, "minLength", "above maxLength: no string satisfies both");
    }
    struct json_object *pattern = NULL, *format = NULL;
    bool has_pattern = json_object_object_get_ex(schema, "pattern", &pattern);
    bool has_format = json_object_object_get_ex(schema, "format", &format);
    if (has_pattern && !json_object_is_type(pattern, json_type_string)) {
        return js_bad(js, "pattern", "expected a string");
    }
    if (has_format && !json_object_is_type(format, json_type_string)) {
        return js_bad(js, "format", "expected a string");
    }
    if (has_pattern && has_format) {
        return js_bad(js, "pattern", "not supported together with 'format'");
    }
    if ((has_pattern || has_format) && (min_len > 0 || max_len >= 0)) {
        return js_bad(js, has_pattern ? "pattern" : "format",
                      "not supported together with minLength/maxLength");
    }
    if (!has_pattern && !has_format && min_len == 0 && max_len < 0) {
        buf_appends(out, use(js, P_STRING));
        return 0;
    }
    buf_appends(out, "\"\\\"\" ");
    if (has_pattern || has_format) {
        struct buf re;
        buf_init(&re, JS_MAX_TEXT);
        if (has_pattern) {
            const char *pat = json_object_get_string(pattern);
            size_t len = (size_t)json_object_get_string_len(pattern);
            rc = put_regex(js, pat, len, "pattern", &re); /* alone first: its own errors */
            buf_reset(&re);
            if (rc == 0) {
                pattern_regex(pat, len, &re);
            }
        } else {
            rc = format_regex(js, json_object_get_string(format), &re);
        }
        if (rc == 0) {
            rc = js_check_buf(js, &re);
        }
        if (rc == 0) {
            rc = put_regex(js, re.data, re.len, has_pattern ? "pattern" : "format", out);
        }
        buf_free(&re);
        if (rc != 0) {
            return rc;
        }
    } else if (max_len != 0) {
        buf_appends(out, use(js, P_CHAR));
        put_repeat(out, min_len, max_len);
    }
    buf_appendf(out, " \"\\\"\" %s", use(js, P_SPACE));
    return 0;
}

/* ---- schemas ---- */

static int gen_body(struct js *js, struct json_object *schema, const char *hint, struct buf *out);

/* Appends one term for schema: a shared rule's name, or a new rule (named from hint) holding
 * the schema's expression. */
static int gen_value(struct js *js, struct json_object *schema, const char *hint, struct buf *out)
{
    struct buf body;
    buf_init(&body, JS_MAX_TEXT);
    int rc = gen_body(js, schema, hint, &body);
    if (rc == 0) {
        rc = js_check_buf(js, &body);
    }
    if (rc == 0) {
        if (strspn(buf_cstr(&body),
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") == body.len) {
            buf_append(out, body.data, body.len); /* already one rule name */
        } else {
            const char *name = unique_name(js, hint);
            if (!name) {
                rc = js_oom(js);
            } else {
                add_rule(js, name, &body);
                buf_appends(out, name);
            }
        }
    }
    buf_free(&body);
    return rc;
}

/* Notes that the rule being converted may begin with node `to` when nothing was read yet. */
static int add_edge(struct js *js, size_t to)
{
    if (!js->leading) {
        return 0;
    }
    struct js_edge *e = tandem_grow(js->edges, &js->cap_edges, js->n_edges + 1, sizeof(*e), 8);
    if (!e) {
        return js_oom(js);
    }
    js->edges = e;
    js->edges[js->n_edges++] = (struct js_edge){js->cur, to};
    return 0;
}

/* -EINVAL when the leading edges have a cycle (iterative colouring DFS). */
static int check_left_recursion(struct js *js)
{
    size_t n = js->n_refs + 1;
    uint8_t *state = calloc(n, 1); /* 0 new, 1 on the path, 2 done */
    size_t *stack = calloc(n, sizeof(*stack));
    size_t *next = calloc(n, sizeof(*next)); /* edge cursor per node */
    int rc = 0;
    if (!state || !stack || !next) {
        rc = js_oom(js);
        goto out;
    }
    for (size_t s0 = 0; s0 < n && rc == 0; s0++) {
        if (state[s0]) {
            continue;
        }
        size_t depth = 0;
        stack[depth++] = s0;
        state[s0] = 1;
        while (depth > 0 && rc == 0) {
            size_t v = stack[depth - 1];
            while (next[v] < js->n_edges && js->edges[next[v]].from != v) {
                next[v]++;
            }
            if (next[v] == js->n_edges) {
                state[v] = 2;
                depth--;
                continue;
            }
            size_t w = js->edges[next[v]++].to;
            if (state[w] == 1) {
                rc = js_fail(js, -EINVAL,
                             "JSON schema keyword '$ref' at %s: '%.80s' can refer to itself "
                             "before any JSON is read (left recursion)",
                             w == 0 ? "the root" : js->refs[w - 1].ref + 1,
                             w == 0 ? "#" : js->refs[w - 1].ref);
            } else if (state[w] == 0) {
                state[w] = 1;
                stack[depth++] = w;
            }
        }
    }
out:
    free(state);
    free(stack);
    free(next);
    return rc;
}

/* The rule for a $ref, queued for conversion the first time it is seen. */
static int gen_ref(struct js *js, struct json_object *ref, struct buf *out)
{
    if (!json_object_is_type(ref, json_type_string)) {
        return js_bad(js, "$ref", "expected a string");
    }
    const char *text = json_object_get_string(ref);
    if (strcmp(text, "#") == 0) {
        buf_appends(out, "root");
        return add_edge(js, 0);
    }
    for (size_t i = 0; i < js->n_refs; i++) {
        if (strcmp(js->refs[i].ref, text) == 0) {
            buf_appends(out, js->refs[i].rule);
            return add_edge(js, i + 1);
        }
    }
    const char *container = NULL, *name = NULL;
    if (strncmp(text, "#/$defs/", 8) == 0) {
        container = "$defs";
        name = text + 8;
    } else if (strncmp(text, "#/definitions/", 14) == 0) {
        container = "definitions";
        name = text + 14;
    }
    if (!container || strchr(name, '/') || strchr(name, '%')) {
        return js_fail(js, -EINVAL,
                       "JSON schema keyword '$ref' at %s: unsupported reference '%.80s' (only #, "
                       "#/$defs/NAME and #/definitions/NAME)",
                       js_where(js), text);
    }
    char key[JS_PATH_MAX];
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < sizeof(key); p++) { /* JSON pointer unescaping */
        if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
            key[n++] = p[1] == '0' ? '~' : '/';
            p++;
        } else {
            key[n++] = *p;
        }
    }
    key[n] = '\0';
    struct json_object *defs, *target;
    if (!json_object_is_type(js->root, json_type_object) ||
        !json_object_object_get_ex(js->root, container, &defs) ||
        !json_object_is_type(defs, json_type_object) ||
        !json_object_object_get_ex(defs, key, &target)) {
        return js_fail(js, -EINVAL, "JSON schema keyword '$ref' at %s: '%.80s' is not defined",
                       js_where(js), text);
    }
    char hint[JS_NAME_MAX + 1];
    hint_join(hint, "def", key);
    struct js_ref *r = tandem_grow(js->refs, &js->cap_refs, js->n_refs + 1, sizeof(*r), 8);
    if (!r) {
        return js_oom(js);
    }
    js->refs = r;
    r = &js->refs[js->n_refs];
    r->ref = strdup(text);
    r->rule = unique_name(js, hint);
    r->target = target;
    if (!r->ref || !r->rule) {
        free(r->ref);
        return js_oom(js);
    }
    js->n_refs++;
    buf_appends(out, r->rule);
    return add_edge(js, js->n_refs);
}

/* anyOf / oneOf (alternatives) and allOf of one schema. */
static int gen_combinator(struct js *js, const char *kw, struct json_object *list, const char *hint,
                          struct buf *out)
{
    if (!json_object_is_type(list, json_type_array) || json_object_array_length(list) == 0) {
        return js_bad(js, kw, "expected a non-empty array of schemas");
    }
    size_t n = json_object_array_length(list);
    if (strcmp(kw, "allOf") == 0) {
        if (n > 1) {
            return js_bad(js, kw, "allOf of several schemas is not supported");
        }
        size_t saved = path_push_index(js, kw, 0);
        int rc = gen_body(js, json_object_array_get_idx(list, 0), hint, out);
        path_pop(js, saved);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        char sub[JS_NAME_MAX + 1];
        hint_join_index(sub, hint, "", i);
        size_t saved = path_push_index(js, kw, i);
        buf_appends(out, i ? " | " : "");
        int rc = gen_value(js, json_object_array_get_idx(list, i), sub, out);
        path_pop(js, saved);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* enum / const: the values of the allowed types as literals. */
static int gen_enum(struct js *js, struct json_object *schema, unsigned types, struct buf *out)
{
    struct json_object *list = NULL, *cval = NULL;
    bool has_enum = json_object_object_get_ex(schema, "enum", &list);
    bool has_const = json_object_object_get_ex(schema, "const", &cval);
    if (has_enum && has_const) {
        return js_bad(js, "const", "not supported together with 'enum'");
    }
    if (has_enum && !json_object_is_type(list, json_type_array)) {
        return js_bad(js, "enum", "expected an array");
    }
    size_t n = has_enum ? json_object_array_length(list) : 1;
    size_t written = 0;
    buf_appends(out, "(");
    for (size_t i = 0; i < n; i++) {
        struct json_object *v = has_enum ? json_object_array_get_idx(list, i) : cval;
        if (!(value_types(v) & types)) {
            continue;
        }
        buf_appends(out, written++ ? " | " : "");
        int rc = put_json_literal(js, v, out);
        if (rc != 0) {
            return rc;
        }
    }
    if (written == 0) {
        return js_bad(js, has_enum ? "enum" : "const", "no value of the allowed types");
    }
    buf_appendf(out, ") %s", use(js, P_SPACE));
    return 0;
}

/* ---- objects ---- */

struct prop {
    const char *name;           /* borrowed from the schema */
    struct json_object *schema; /* borrowed; NULL: any value */
    bool required;
    bool declared;  /* listed in properties (else required-only, additional) */
    const char *kv; /* its member rule's name */
};

/* A trie of the declared names, over code points, for keys that are none of them. */
struct trie {
    uint32_t cp;
    bool terminal;  /* a name ends here */
    size_t child;   /* first child, 0: none (node 0 is the root) */
    size_t sibling; /* next sibling, 0: none */
};

struct trie_set {
    struct trie *v;
    size_t n, cap;
};

static int trie_insert(struct trie_set *t, const char *name)
{
    size_t node = 0, len = strlen(name), cps = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_next(name + i, len - i, &cp);
        if (++cps > JS_MAX_NAME_CPS) {
            return -E2BIG;
        }
        size_t c = t->v[node].child;
        while (c && t->v[c].cp != cp) {
            c = t->v[c].sibling;
        }
        if (!c) {
            struct trie *nv = tandem_grow(t->v, &t->cap, t->n + 1, sizeof(*nv), 32);
            if (!nv) {
                return -ENOMEM;
            }
            t->v = nv;
            c = t->n++;
            t->v[c] = (struct trie){cp, false, 0, t->v[node].child};
            t->v[node].child = c;
        }
        node = c;
    }
    t->v[node].terminal = true;
    return 0;
}

/* The escaped text of a key that is not one of the names below trie node t (see the file
 * comment): ( [^children] key-char* | c1 X(c1) | ... ), optional unless a name ends at t. */
static int put_not_names(struct js *js, const struct trie_set *t, size_t node, struct buf *out)
{
    struct buf re;
    buf_init(&re, JS_MAX_TEXT);
    buf_appends(&re, "[^\\x00");
    for (size_t c = t->v[node].child; c; c = t->v[c].sibling) {
        buf_appendf(&re, "\\x{%X}", (unsigned)t->v[c].cp);
    }
    buf_appends(&re, "]");
    int rc = js_check_buf(js, &re);
    buf_appends(out, "(");
    if (rc == 0) {
        rc = put_regex(js, re.data, re.len, "properties", out);
    }
    buf_free(&re);
    buf_appendf(out, " %s*", use(js, P_KEYCHAR));
    for (size_t c = t->v[node].child; c && rc == 0; c = t->v[c].sibling) {
        char one[16];
        int n = snprintf(one, sizeof(one), "\\x{%X}", (unsigned)t->v[c].cp);
        buf_appends(out, " | ");
        rc = put_regex(js, one, (size_t)n, "properties", out);
        if (rc == 0) {
            buf_appends(out, " ");
            rc = put_not_names(js, t, c, out);
        }
    }
    buf_appends(out, t->v[node].terminal ? ")" : ")?");
    return rc;
}

/* The rule for one extra member: a key none of the declared names, and a value of add. */
static int gen_additional_kv(struct js *js, const struct prop *props, size_t n,
                             struct json_object *add, const char *hint, const char **rule)
{
    struct buf body;
    buf_init(&body, JS_MAX_TEXT);
    struct trie_set t = {0};
    int rc = 0;
    if (n == 0) {
        buf_appends(&body, use(js, P_KEY));
    } else {
        t.v = calloc(1, sizeof(*t.v));
        t.n = t.cap = t.v ? 1 : 0;
        rc = t.v ? 0 : -ENOMEM;
        for (size_t i = 0; i < n && rc == 0; i++) {
            rc = trie_insert(&t, props[i].name);
        }
        if (rc == -E2BIG) {
            rc = js_fail(js, rc,
                         "JSON schema at %s: a property name longer than %d characters "
                         "next to additionalProperties",
                         js_where(js), JS_MAX_NAME_CPS);
        } else if (rc != 0) {
            rc = js_oom(js);
        } else {
            buf_appends(&body, "\"\\\"\" ");
            rc = put_not_names(js, &t, 0, &body);
            buf_appendf(&body, " \"\\\"\" %s", use(js, P_SPACE));
        }
    }
    char sub[JS_NAME_MAX + 1];
    if (rc == 0) {
        buf_appendf(&body, " \":\" %s ", use(js, P_SPACE));
        size_t saved = path_push(js, "additionalProperties");
        hint_join(sub, hint, "additional");
        if (add) {
            rc = gen_value(js, add, sub, &body);
        } else {
            buf_appends(&body, use(js, P_VALUE));
        }
        path_pop(js, saved);
    }
    if (rc == 0) {
        rc = js_check_buf(js, &body);
    }
    if (rc == 0) {
        hint_join(sub, hint, "additional-kv");
        *rule = unique_name(js, sub);
        if (!*rule) {
            rc = js_oom(js);
        } else {
            add_rule(js, *rule, &body);
        }
    }
    free(t.v);
    buf_free(&body);
    return rc;
}

/* The member rule of a declared property: "\"name\"" space ":" space value. */
static int gen_kv(struct js *js, struct prop *p, const char *hint)
{
    struct buf body;
    buf_init(&body, JS_MAX_TEXT);
    struct json_object *name = json_object_new_string(p->name);
    int rc = name ? put_json_literal(js, name, &body) : js_oom(js);
    json_object_put(name);
    char sub[JS_NAME_MAX + 1];
    hint_join(sub, hint, p->name);
    if (rc == 0) {
        buf_appendf(&body, " %s \":\" %s ", use(js, P_SPACE), use(js, P_SPACE));
        size_t saved = p->declared ? path_push(js, "properties") : path_push(js, "required");
        if (p->declared) {
            path_push(js, p->name);
        }
        rc = p->schema ? gen_value(js, p->schema, sub, &body) : 0;
        if (!p->schema) {
            buf_appends(&body, use(js, P_VALUE));
        }
        path_pop(js, saved);
    }
    if (rc == 0) {
        rc = js_check_buf(js, &body);
    }
    if (rc == 0) {
        char kv[JS_NAME_MAX + 1];
        hint_join(kv, sub, "kv");
        p->kv = unique_name(js, kv);
        if (!p->kv) {
            rc = js_oom(js);
        } else {
            add_rule(js, p->kv, &body);
        }
    }
    buf_free(&body);
    return rc;
}

/* Collects the properties (schema order, then required names that only additionalProperties
 * describes). */
static int collect_props(struct js *js, struct json_object *schema, struct json_object *add,
                         bool add_allowed, struct prop **out, size_t *n_out)
{
    struct json_object *props = NULL, *req = NULL;
    json_object_object_get_ex(schema, "properties", &props);
    json_object_object_get_ex(schema, "required", &req);
    if (props && !json_object_is_type(props, json_type_object)) {
        return js_bad(js, "properties", "expected an object");
    }
    if (req && !json_object_is_type(req, json_type_array)) {
        return js_bad(js, "required", "expected an array of strings");
    }
    size_t n_req = req ? json_object_array_length(req) : 0;
    for (size_t i = 0; i < n_req; i++) {
        if (!json_object_is_type(json_object_array_get_idx(req, i), json_type_string)) {
            return js_bad(js, "required", "expected an array of strings");
        }
    }
    size_t cap = (props ? (size_t)json_object_object_length(props) : 0) + n_req;
    struct prop *v = calloc(cap ? cap : 1, sizeof(*v));
    if (!v) {
        return js_oom(js);
    }
    size_t n = 0;
    if (props) {
        json_object_object_foreach(props, key, val)
        {
            v[n++] = (struct prop){key, val, false, true, NULL};
        }
    }
    for (size_t i = 0; i < n_req; i++) {
        const char *name = json_object_get_string(json_object_array_get_idx(req, i));
        size_t j = 0;
        while (j < n && strcmp(v[j].name, name) != 0) {
            j++;
        }
        if (j == n) {
            if (!add_allowed) {
                free(v);
                return js_fail(js, -EINVAL,
                               "JSON schema keyword 'required' at %s: property '%.80s' is not in "
                               "properties and additionalProperties is false",
                               js_where(js), name);
            }
            v[n++] = (struct prop){name, add, false, false, NULL};
        }
        v[j].required = true;
    }
    *out = v;
    *n_out = n;
    return 0;
}

/* The members after property k: ("," space kv_k) each, optional unless required, then the
 * extra members; as the rule tails[k] when there is one. */
static void put_rest(struct js *js, const struct prop *p, size_t n, size_t k, const char *add_kv,
                     const char *const *tails, struct buf *out)
{
    if (k < n && tails && tails[k]) {
        buf_appendf(out, " %s", tails[k]);
        return;
    }
    for (; k < n; k++) {
        buf_appendf(out, p[k].required ? " \",\" %s %s" : " (\",\" %s %s)?", use(js, P_SPACE),
                    p[k].kv);
    }
    if (add_kv) {
        buf_appendf(out, " (\",\" %s %s)*", use(js, P_SPACE), add_kv);
    }
}

static int check_property_counts(struct js *js, struct json_object *schema, const struct prop *p,
                                 size_t n, bool add_allowed)
{
    long min_p = 0, max_p = -1;
    int rc = get_count(js, schema, "minProperties", 0, &min_p);
    if (rc == 0) {
        rc = get_count(js, schema, "maxProperties", -1, &max_p);
    }
    size_t required = 0;
    for (size_t i = 0; i < n; i++) {
        required += p[i].required;
    }
    if (rc == 0 && (size_t)min_p > required) {
        rc = js_bad(js, "minProperties", "supported only up to the number of required properties");
    }
    if (rc == 0 && max_p >= 0 && (add_allowed || (size_t)max_p < n)) {
        rc = js_bad(js, "maxProperties", "supported only when no generated object can exceed it");
    }
    return rc;
}

static int gen_object(struct js *js, struct json_object *schema, const char *hint, struct buf *out)
{
    struct json_object *add = NULL;
    bool has_props = json_object_object_get_ex(schema, "properties", NULL);
    bool has_add = json_object_object_get_ex(schema, "additionalProperties", &add);
    if (has_add && !json_object_is_type(add, json_type_boolean) &&
        !json_object_is_type(add, json_type_object)) {
        return js_bad(js, "additionalProperties", "expected a boolean or a schema");
    }
    /* absent: strict when properties are declared (xgrammar's strict mode), else any members */
    bool add_allowed =
        has_add ? !json_object_is_type(add, json_type_boolean) || json_object_get_boolean(add)
                : !has_props;
    struct json_object *add_schema = /* NULL: any value */
        add_allowed && has_add && !json_object_is_type(add, json_type_boolean) ? add : NULL;
    struct prop *p = NULL;
    size_t n = 0;
    const char **tails = NULL;
    const char *add_kv = NULL;
    int rc = collect_props(js, schema, add_schema, add_allowed, &p, &n);
    if (rc != 0) {
        return rc;
    }
    rc = check_property_counts(js, schema, p, n, add_allowed);
    if (rc == 0 && n == 0 && add_allowed && !add_schema) {
        buf_appends(out, use(js, P_OBJECT));
        goto done;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = gen_kv(js, &p[i], hint);
    }
    if (rc == 0 && add_allowed) {
        rc = gen_additional_kv(js, p, n, add_schema, hint, &add_kv);
    }
    size_t first_req = 0;
    while (first_req < n && !p[first_req].required) {
        first_req++;
    }
    if (rc == 0 && first_req > 0 && n > 1) {
        /* leading optional members: tails[k] ::= member k, then tails[k + 1] */
        tails = calloc(n, sizeof(*tails));
        if (!tails) {
            rc = js_oom(js);
            goto done;
        }
        for (size_t k = n - 1; k >= 1 && rc == 0; k--) {
            struct buf body;
            buf_init(&body, JS_MAX_TEXT);
            buf_appendf(&body, p[k].required ? "\",\" %s %s" : "(\",\" %s %s)?", use(js, P_SPACE),
                        p[k].kv);
            put_rest(js, p, n, k + 1, add_kv, tails, &body);
            char sub[JS_NAME_MAX + 1];
            hint_join_index(sub, hint, "rest", k);
            rc = js_check_buf(js, &body);
            tails[k] = rc == 0 ? unique_name(js, sub) : NULL;
            if (rc == 0 && !tails[k]) {
                rc = js_oom(js);
            } else if (rc == 0) {
                add_rule(js, tails[k], &body);
            }
            buf_free(&body);
        }
    }
    if (rc != 0) {
        goto done;
    }
    buf_appendf(out, "\"{\" %s ", use(js, P_SPACE));
    if (n == 0 && add_kv) {
        buf_appendf(out, "(%s (\",\" %s %s)*)? ", add_kv, use(js, P_SPACE), add_kv);
    } else if (n > 0 && first_req == 0) {
        buf_appends(out, p[0].kv);
        put_rest(js, p, n, 1, add_kv, NULL, out);
        buf_appends(out, " ");
    } else if (n > 0) {
        buf_appends(out, "(");
        for (size_t j = 0; j <= first_req && j < n; j++) {
            buf_appendf(out, "%s%s", j ? " | " : "", p[j].kv);
            put_rest(js, p, n, j + 1, add_kv, tails, out);
        }
        if (first_req == n && add_kv) {
            buf_appendf(out, " | %s (\",\" %s %s)*", add_kv, use(js, P_SPACE), add_kv);
        }
        buf_appends(out, first_req == n ? ")? " : ") ");
    }
    buf_appendf(out, "\"}\" %s", use(js, P_SPACE));
done:
    free(tails);
    free(p);
    return rc;
}

/* ---- arrays ---- */

static int gen_array(struct js *js, struct json_object *schema, const char *hint, struct buf *out)
{
    struct json_object *items = NULL, *prefix = NULL, *extra = NULL, *unique = NULL;
    bool has_items = json_object_object_get_ex(schema, "items", &items);
    bool has_prefix = json_object_object_get_ex(schema, "prefixItems", &prefix);
    bool has_extra = json_object_object_get_ex(schema, "additionalItems", &extra);
    long min_items = 0, max_items = -1;
    int rc = get_count(js, schema, "minItems", 0, &min_items);
    if (rc == 0) {
        rc = get_count(js, schema, "maxItems", -1, &max_items);
    }
    if (rc != 0) {
        return rc;
    }
    if (json_object_object_get_ex(schema, "uniqueItems", &unique) &&
        (!json_object_is_type(unique, json_type_boolean) || json_object_get_boolean(unique))) {
        return js_bad(js, "uniqueItems", "only false is supported");
    }
    const char *prefix_kw = "prefixItems", *rest_kw = "items";
    struct json_object *rest = items; /* schema of the items after the tuple, NULL: any */
    bool rest_allowed = true;
    if (has_prefix && !json_object_is_type(prefix, json_type_array)) {
        return js_bad(js, "prefixItems", "expected an array of schemas");
    }
    if (has_items && json_object_is_type(items, json_type_array)) { /* draft-04 tuple */
        if (has_prefix) {
            return js_bad(js, "items", "an array of schemas next to prefixItems");
        }
        prefix = items;
        has_prefix = true;
        prefix_kw = "items";
        rest_kw = "additionalItems";
        rest = has_extra ? extra : NULL;
        has_items = has_extra;
    }
    size_t m = has_prefix ? json_object_array_length(prefix) : 0;
    if (has_items && json_object_is_type(rest, json_type_boolean)) {
        rest_allowed = json_object_get_boolean(rest);
        rest = NULL;
    } else if (has_items && !json_object_is_type(rest, json_type_object)) {
        return js_bad(js, rest_kw, "expected a schema");
    } else if (!has_items && has_prefix) {
        rest_allowed = false; /* strict mode: nothing after the tuple */
    }
    long max_total = max_items; /* -1: unbounded */
    if (!rest_allowed && (max_total < 0 || max_total > (long)m)) {
        max_total = (long)m;
    }
    if (max_total >= 0 && min_items > max_total) {
        return js_bad(js, "minItems", "no array satisfies the item counts");
    }
    size_t n_opt = max_total < 0 || (size_t)max_total > m ? m : (size_t)max_total;
    n_opt = n_opt > (size_t)min_items ? n_opt - (size_t)min_items : 0;
    if (n_opt > JS_MAX_OPTIONAL) {
        return js_fail(js, -E2BIG, "JSON schema at %s: more than %d optional tuple items",
                       js_where(js), JS_MAX_OPTIONAL);
    }
    struct buf list;
    buf_init(&list, JS_MAX_TEXT);
    size_t opened = 0;
    for (size_t i = 0; i < m && (max_total < 0 || (long)i < max_total) && rc == 0; i++) {
        if ((long)i >= min_items) {
            buf_appends(&list, "(");
            opened++;
        }
        if (i > 0) {
            buf_appendf(&list, "\",\" %s ", use(js, P_SPACE));
        }
        char sub[JS_NAME_MAX + 1];
        hint_join_index(sub, hint, "", i);
        size_t saved = path_push_index(js, prefix_kw, i);
        rc = gen_value(js, json_object_array_get_idx(prefix, i), sub, &list);
        path_pop(js, saved);
        buf_appends(&list, " ");
    }
    long left_min = min_items > (long)m ? min_items - (long)m : 0;
    long left_max = max_total < 0 ? -1 : max_total > (long)m ? max_total - (long)m : 0;
    if (rc == 0 && rest_allowed && left_max != 0) {
        struct buf item;
        buf_init(&item, JS_MAX_TEXT);
        char sub[JS_NAME_MAX + 1];
        hint_join(sub, hint, "item");
        size_t saved = path_push(js, rest_kw);
        if (rest) {
            rc = gen_value(js, rest, sub, &item);
        } else {
            buf_appends(&item, use(js, P_VALUE));
        }
        path_pop(js, saved);
        if (rc == 0 && m > 0) {
            buf_appendf(&list, "(\",\" %s %s)", use(js, P_SPACE), buf_cstr(&item));
            put_repeat(&list, left_min, left_max);
        } else if (rc == 0) { /* the first item has no comma */
            buf_appendf(&list, "%s%s", left_min == 0 ? "(" : "", buf_cstr(&item));
            if (left_max < 0 || left_max > 1) {
                buf_appendf(&list, " (\",\" %s %s)", use(js, P_SPACE), buf_cstr(&item));
                put_repeat(&list, left_min > 0 ? left_min - 1 : 0,
                           left_max < 0 ? -1 : left_max - 1);
            }
            buf_appends(&list, left_min == 0 ? ")?" : "");
        }
        rc = rc == 0 ? js_check_buf(js, &item) : rc;
        buf_free(&item);
    }
    for (size_t i = 0; i < opened; i++) {
        buf_appends(&list, ")?");
    }
    if (rc == 0) {
        rc = js_check_buf(js, &list);
    }
    if (rc == 0) {
        buf_appendf(out, "\"[\" %s %s \"]\" %s", use(js, P_SPACE), buf_cstr(&list),
                    use(js, P_SPACE));
    }
    buf_free(&list);
    return rc;
}

/* ---- one schema ---- */

static int keyword_kind(const char *name, enum kw_kind *kind)
{
    for (size_t i = 0; i < ARRAY_SIZE(keywords); i++) {
        if (strcmp(keywords[i].name, name) == 0) {
            *kind = keywords[i].kind;
            return 0;
        }
    }
    return -ENOENT;
}

/* The types from "type"; 0 when absent. */
static int read_types(struct js *js, struct json_object *schema, unsigned *types)
{
    struct json_object *t;
    *types = 0;
    if (!json_object_object_get_ex(schema, "type", &t)) {
        return 0;
    }
    bool is_array = json_object_is_type(t, json_type_array);
    size_t n = is_array ? json_object_array_length(t) : 1;
    for (size_t i = 0; i < n; i++) {
        struct json_object *name = is_array ? json_object_array_get_idx(t, i) : t;
        unsigned bit = 0;
        for (size_t j = 0;
             json_object_is_type(name, json_type_string) && j < ARRAY_SIZE(type_names); j++) {
            if (strcmp(json_object_get_string(name), type_names[j].name) == 0) {
                bit = type_names[j].bit;
            }
        }
        if (!bit) {
            return js_bad(js, "type", "expected a type name or an array of them");
        }
        *types |= bit;
    }
    if (*types == 0) {
        return js_bad(js, "type", "an empty array allows nothing");
    }
    return 0;
}

/* Appends the alternatives for each allowed type. */
static int gen_types(struct js *js, struct json_object *schema, unsigned types, const char *hint,
                     struct buf *out)
{
    if (types & T_NUM) {
        types &= ~(unsigned)T_INT; /* numbers include the integers */
    }
    const char *sep = "";
    int rc = 0;
    for (unsigned bit = 1; bit <= T_INT && rc == 0; bit <<= 1) {
        if (!(types & bit)) {
            continue;
        }
        buf_appends(out, sep);
        sep = " | ";
        switch (bit) {
        case T_NULL:
            buf_appends(out, use(js, P_NULL));
            break;
        case T_BOOL:
            buf_appends(out, use(js, P_BOOLEAN));
            break;
        case T_OBJ:
        case T_ARR: {
            bool leading = js->leading;
            js->leading = false; /* "{" or "[" comes first */
            rc =
                bit == T_OBJ ? gen_object(js, schema, hint, out) : gen_array(js, schema, hint, out);
            js->leading = leading;
            break;
        }
        case T_STR:
            rc = gen_string(js, schema, out);
            break;
        default:
            rc = gen_number(js, schema, bit == T_INT, out);
            break;
        }
    }
    return rc;
}

/* Appends the expression of schema (may hold top-level alternatives). */
static int gen_body(struct js *js, struct json_object *schema, const char *hint, struct buf *out)
{
    if (json_object_is_type(schema, json_type_boolean)) {
        if (!json_object_get_boolean(schema)) {
            return js_fail(js, -EINVAL, "JSON schema at %s: the schema false allows nothing",
                           js_where(js));
        }
        buf_appends(out, use(js, P_VALUE));
        return 0;
    }
    if (!json_object_is_type(schema, json_type_object)) {
        return js_fail(js, -EINVAL, "JSON schema at %s: expected an object or a boolean, got %s",
                       js_where(js), json_type_label(schema));
    }
    if (js->depth >= JSON_SCHEMA_MAX_DEPTH) {
        return js_fail(js, -E2BIG, "JSON schema at %s: nested deeper than %d", js_where(js),
                       JSON_SCHEMA_MAX_DEPTH);
    }
    unsigned kinds = 0;
    const char *ref_kw = NULL, *comb_kw = NULL, *other_kw = NULL, *non_type_kw = NULL;
    json_object_object_foreach(schema, key, val)
    {
        (void)val;
        enum kw_kind kind;
        if (keyword_kind(key, &kind) != 0) {
            return js_fail(js, -EINVAL, "unsupported JSON schema keyword '%.80s' at %s", key,
                           js_where(js));
        }
        kinds |= 1u << kind;
        if (kind == KW_REF) {
            ref_kw = key;
        } else if (kind == KW_COMB && !comb_kw) {
            comb_kw = key;
        } else if (kind == KW_COMB) {
            other_kw = key; /* a second combinator */
        } else if (kind != KW_ANNOT && kind != KW_DEFS) {
            other_kw = key;
            non_type_kw = kind != KW_TYPE && kind != KW_ENUM ? key : non_type_kw;
        }
    }
    if (ref_kw && (comb_kw || other_kw)) {
        return js_bad(js, comb_kw ? comb_kw : other_kw, "not supported next to $ref");
    }
    if (comb_kw && other_kw) {
        return js_bad(js, other_kw, "not supported next to anyOf/oneOf/allOf");
    }
    js->depth++;
    int rc;
    unsigned types;
    if (ref_kw) {
        rc = gen_ref(js, json_object_object_get(schema, "$ref"), out);
    } else if (comb_kw) {
        rc = gen_combinator(js, comb_kw, json_object_object_get(schema, comb_kw), hint, out);
    } else if ((rc = read_types(js, schema, &types)) != 0) {
        /* rc set */
    } else if (kinds & (1u << KW_ENUM)) {
        rc = non_type_kw ? js_bad(js, non_type_kw, "not supported next to enum/const")
                         : gen_enum(js, schema, types ? types : T_ALL, out);
    } else {
        if (!types) { /* the kinds the keywords describe, or any value */
            types |= (kinds & (1u << KW_OBJ)) ? T_OBJ : 0;
            types |= (kinds & (1u << KW_ARR)) ? T_ARR : 0;
            types |= (kinds & (1u << KW_STR)) ? T_STR : 0;
            types |= (kinds & (1u << KW_NUM)) ? T_NUM : 0;
        }
        if (!types) {
            buf_appends(out, use(js, P_VALUE));
        } else {
            rc = gen_types(js, schema, types, hint, out);
        }
    }
    js->depth--;
    return rc;
}

/* ---- driver ---- */

static void put_prims(struct js *js, struct buf *out)
{
    unsigned used = js->used, prev = 0;
    while (used != prev) { /* close over the dependencies */
        prev = used;
        for (int p = 0; p < P_COUNT; p++) {
            used |= (used & BIT(p)) ? prims[p].deps : 0;
        }
    }
    for (int p = 0; p < P_COUNT; p++) {
        if (!(used & BIT(p))) {
            continue;
        }
        if (prims[p].body) {
            buf_appendf(out, "%s ::= %s\n", prims[p].name, prims[p].body);
            continue;
        }
        /* key-char: any character but U+0000, escaped only where JSON requires it */
        buf_appendf(out, "%s ::= ", prims[p].name);
        int rc = regex_to_gbnf("[^\\x00]", 7, true, out, NULL, 0);
        if (rc != 0) {
            buf_set_error(out, rc == -ENOMEM ? -ENOMEM : -ENOSPC);
        }
        buf_appends(out, "\n");
    }
}

static void js_deinit(struct js *js)
{
    for (size_t i = 0; i < js->names_cap; i++) {
        free(js->names[i]);
    }
    free(js->names);
    for (size_t i = 0; i < js->n_refs; i++) {
        free(js->refs[i].ref);
    }
    free(js->refs);
    free(js->edges);
    buf_free(&js->rules);
}

static int js_init(struct js *js, char *err, size_t errlen)
{
    memset(js, 0, sizeof(*js));
    js->err = err;
    js->errlen = errlen;
    if (err && errlen) {
        err[0] = '\0';
    }
    buf_init(&js->rules, JS_MAX_TEXT);
    if (!names_add(js, "root")) {
        return js_oom(js);
    }
    for (int p = 0; p < P_COUNT; p++) {
        if (!names_add(js, prims[p].name)) {
            return js_oom(js);
        }
    }
    return 0;
}

/* Converts the root and every $ref target it reaches; writes the grammar to out. */
static int js_convert(struct js *js, struct buf *out)
{
    struct buf root;
    buf_init(&root, JS_MAX_TEXT);
    js->cur = 0;
    js->leading = true;
    int rc = gen_body(js, js->root, "root", &root);
    if (rc == 0) {
        rc = js_check_buf(js, &root);
    }
    /* the queue grows (and js->refs moves) while targets are converted: index it each time */
    for (size_t i = 0; i < js->n_refs && rc == 0; i++) {
        struct buf body;
        buf_init(&body, JS_MAX_TEXT);
        snprintf(js->path, sizeof(js->path), "%s", js->refs[i].ref + 1);
        js->path_len = strlen(js->path);
        js->cur = i + 1;
        js->leading = true;
        rc = gen_body(js, js->refs[i].target, js->refs[i].rule, &body);
        if (rc == 0) {
            rc = js_check_buf(js, &body);
        }
        if (rc == 0) {
            add_rule(js, js->refs[i].rule, &body);
        }
        buf_free(&body);
    }
    if (rc == 0) {
        rc = check_left_recursion(js);
    }
    if (rc == 0) {
        rc = js_check_buf(js, &js->rules);
    }
    if (rc == 0) {
        buf_appendf(out, "root ::= %s\n", buf_cstr(&root));
        if (js->rules.len) {
            buf_append(out, js->rules.data, js->rules.len);
        }
        put_prims(js, out);
        rc = js_check_buf(js, out);
    }
    buf_free(&root);
    return rc;
}

int json_schema_to_gbnf(const char *schema, size_t len, struct buf *out, char *err, size_t errlen)
{
    struct js js;
    int rc = js_init(&js, err, errlen);
    if (rc == 0) {
        char msg[200];
        rc = json_parse_one(schema, len, &js.root, msg, sizeof(msg));
        if (rc != 0) {
            rc = js_fail(&js, rc, "JSON schema is not valid JSON: %s", msg);
        } else if (!js.root) {
            rc = js_fail(&js, -EINVAL,
                         "JSON schema at the root: expected an object or a boolean, "
                         "got null");
        }
    }
    if (rc == 0) {
        rc = js_convert(&js, out);
    }
    json_object_put(js.root);
    js_deinit(&js);
    return rc;
}

int json_object_gbnf(struct buf *out)
{
    struct js js;
    int rc = js_init(&js, NULL, 0);
    if (rc == 0) {
        buf_appendf(out, "root ::= %s\n", use(&js, P_OBJECT));
        put_prims(&js, out);
        rc = buf_error(out) == -ENOMEM ? -ENOMEM : buf_error(out) ? -E2BIG : 0;
    }
    js_deinit(&js);
    return rc;
}
