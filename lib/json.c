/*
 * JSON (see json.h): a strict recursive-descent parser that builds json-c objects (json-c's own
 * tokener accepts duplicate keys silently and reports errors by offset only), typed path getters,
 * and a serializer into struct buf with shortest round-trip doubles.
 */
#include "lib/json.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/err.h"

#define JSON_MAX_OUT_DEPTH 1000 /* nesting limit of json_to_buf */
#define JSON_KEY_STACK     128  /* path keys shorter than this are copied on the stack */

/* ---- parser ---- */

struct json_parser {
    const char *s;
    size_t len;
    size_t pos;
    int depth;
    int failed;
    size_t cost;        /* estimated heap of the tree built so far */
    size_t budget;      /* JSON_PARSE_FACTOR * len + JSON_PARSE_SLACK */
    struct buf scratch; /* decoded string / number text */
    char *err;
    size_t errlen;
};

static void parse_fail(struct json_parser *p, const char *fmt, ...) TANDEM_PRINTF(2, 3);

/* Records the first error, prefixed with the line and column (1-based, in bytes) of p->pos. */
static void parse_fail(struct json_parser *p, const char *fmt, ...)
{
    if (p->failed) {
        return;
    }
    p->failed = 1;
    if (!p->err || p->errlen == 0) {
        return;
    }
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p->pos && i < p->len; i++) {
        if (p->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    int n = snprintf(p->err, p->errlen, "line %zu column %zu: ", line, col);
    if (n < 0 || (size_t)n >= p->errlen) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static void skip_ws(struct json_parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            break;
        }
        p->pos++;
    }
}

/* Describes the byte at pos for a message: 'x', "end of input", "NUL byte", "byte 0x80". */
static const char *describe_at(const struct json_parser *p, char *tmp, size_t tmplen)
{
    if (p->pos >= p->len) {
        return "end of input";
    }
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == 0) {
        return "NUL byte";
    }
    if (c >= 0x21 && c < 0x7f) {
        snprintf(tmp, tmplen, "character '%c'", c);
    } else {
        snprintf(tmp, tmplen, "byte 0x%02x", c);
    }
    return tmp;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= (unsigned)(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            v |= (unsigned)(c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            v |= (unsigned)(c - 'A' + 10);
        } else {
            return -1;
        }
    }
    *out = v;
    return 0;
}

static int put_utf8(struct buf *b, unsigned cp)
{
    char u[4];
    return buf_append(b, u, tandem_utf8_put(u, cp));
}

/* Parses the string starting at the opening quote into p->scratch. 0 or -1 (error recorded). */
static int parse_string(struct json_parser *p)
{
    buf_reset(&p->scratch);
    p->pos++; /* opening quote */
    for (;;) {
        if (p->pos >= p->len) {
            parse_fail(p, "unterminated string");
            return -1;
        }
        /* Copy the run of plain bytes at once. */
        size_t start = p->pos;
        while (p->pos < p->len) {
            unsigned char c = (unsigned char)p->s[p->pos];
            if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) {
                break;
            }
            p->pos++;
        }
        if (p->pos > start && buf_append(&p->scratch, p->s + start, p->pos - start) < 0) {
            parse_fail(p, "out of memory");
            return -1;
        }
        if (p->pos >= p->len) {
            continue;
        }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            return 0;
        }
        if (c < 0x20) {
            parse_fail(
                p, c == 0 ? "NUL byte in string" : "unescaped control character 0x%02x in string",
                c);
            return -1;
        }
        if (c >= 0x80) {
            size_t n = tandem_utf8_seq_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
            if (n == 0) {
                parse_fail(p, "invalid UTF-8 in string");
                return -1;
            }
            if (buf_append(&p->scratch, p->s + p->pos, n) < 0) {
                parse_fail(p, "out of memory");
                return -1;
            }
            p->pos += n;
            continue;
        }
        /* Backslash escape. */
        if (p->pos + 1 >= p->len) {
            p->pos = p->len;
            parse_fail(p, "unterminated string");
            return -1;
        }
        char e = p->s[p->pos + 1];
        const char *simple = NULL;
        switch (e) {
        case '"':
            simple = "\"";
            break;
        case '\\':
            simple = "\\";
            break;
        case '/':
            simple = "/";
            break;
        case 'b':
            simple = "\b";
            break;
        case 'f':
            simple = "\f";
            break;
        case 'n':
            simple = "\n";
            break;
        case 'r':
            simple = "\r";
            break;
        case 't':
            simple = "\t";
            break;
        case 'u':
            break;
        default:
            p->pos++;
            parse_fail(p, "invalid escape in string");
            return -1;
        }
        if (simple) {
            if (buf_append(&p->scratch, simple, 1) < 0) {
                parse_fail(p, "out of memory");
                return -1;
            }
            p->pos += 2;
            continue;
        }
        unsigned cp;
        if (p->len - p->pos < 6 || hex4(p->s + p->pos + 2, &cp) < 0) {
            parse_fail(p, "invalid \\u escape in string");
            return -1;
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            parse_fail(p, "lone low surrogate \\u%04x in string", cp);
            return -1;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (p->len - p->pos < 12 || p->s[p->pos + 6] != '\\' || p->s[p->pos + 7] != 'u' ||
                hex4(p->s + p->pos + 8, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF) {
                parse_fail(p, "lone high surrogate \\u%04x in string", cp);
                return -1;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p->pos += 6;
        }
        if (put_utf8(&p->scratch, cp) < 0) {
            parse_fail(p, "out of memory");
            return -1;
        }
        p->pos += 6;
    }
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* What json-c allocates, rounded up (json-c 0.16, 64-bit): an object with its 16-entry hash
 * table, an array (made at its exact size), a scalar, and per member or element. */
enum {
    JSON_COST_OBJECT = 768,
    JSON_COST_ARRAY = 128,
    JSON_COST_SCALAR = 64,
    JSON_COST_MEMBER = 64, /* hash entry and key copy overhead, plus the key's bytes */
    JSON_COST_ELEMENT = 16 /* a slot, and one in the parser's list while the array is read */
};

/* Charges bytes to the parse; fails it once the tree would outgrow its bound. */
static int charge(struct json_parser *p, size_t bytes)
{
    p->cost += bytes;
    if (p->cost <= p->budget) {
        return 0;
    }
    parse_fail(p,
               "JSON too dense: holding it would take more than %zu bytes (%d times its %zu bytes "
               "plus %zu KiB)",
               p->budget, JSON_PARSE_FACTOR, p->len, JSON_PARSE_SLACK >> 10);
    return -1;
}

static int parse_number(struct json_parser *p, struct json_object **out)
{
    size_t start = p->pos;
    int is_float = 0;
    if (charge(p, JSON_COST_SCALAR) < 0) {
        return -1;
    }
    if (p->pos < p->len && p->s[p->pos] == '-') {
        p->pos++;
    }
    if (p->pos >= p->len || !is_digit(p->s[p->pos])) {
        parse_fail(p, "invalid number: expected a digit");
        return -1;
    }
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->len && is_digit(p->s[p->pos])) {
            parse_fail(p, "invalid number: leading zero");
            return -1;
        }
    } else {
        while (p->pos < p->len && is_digit(p->s[p->pos])) {
            p->pos++;
        }
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        is_float = 1;
        p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) {
            parse_fail(p, "invalid number: expected a digit after '.'");
            return -1;
        }
        while (p->pos < p->len && is_digit(p->s[p->pos])) {
            p->pos++;
        }
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        is_float = 1;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) {
            p->pos++;
        }
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) {
            parse_fail(p, "invalid number: expected a digit in the exponent");
            return -1;
        }
        while (p->pos < p->len && is_digit(p->s[p->pos])) {
            p->pos++;
        }
    }
    buf_reset(&p->scratch);
    if (buf_append(&p->scratch, p->s + start, p->pos - start) < 0) {
        parse_fail(p, "out of memory");
        return -1;
    }
    const char *text = buf_cstr(&p->scratch);
    if (!is_float) {
        errno = 0;
        long long v = strtoll(text, NULL, 10);
        if (errno == 0) {
            *out = json_object_new_int64((int64_t)v);
            goto done;
        }
    }
    errno = 0;
    double d = strtod(text, NULL);
    if (isinf(d)) {
        p->pos = start;
        parse_fail(p, "number %.40s out of range", text);
        return -1;
    }
    *out = json_object_new_double(d);
done:
    if (!*out) {
        parse_fail(p, "out of memory");
        return -1;
    }
    return 0;
}

static int parse_value(struct json_parser *p, struct json_object **out);

static int parse_object(struct json_parser *p, struct json_object **out)
{
    if (charge(p, JSON_COST_OBJECT) < 0) {
        return -1;
    }
    struct json_object *obj = json_object_new_object();
    char *key = NULL;
    if (!obj) {
        parse_fail(p, "out of memory");
        return -1;
    }
    p->pos++; /* '{' */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        *out = obj;
        return 0;
    }
    for (;;) {
        char tmp[32];
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != '"') {
            parse_fail(p, "expected a string key, got %s", describe_at(p, tmp, sizeof(tmp)));
            goto err_put;
        }
        size_t key_pos = p->pos;
        if (parse_string(p) < 0) {
            goto err_put;
        }
        if (memchr(p->scratch.data ? p->scratch.data : "", '\0', p->scratch.len)) {
            p->pos = key_pos;
            parse_fail(p, "object key contains \\u0000");
            goto err_put;
        }
        key = buf_detach(&p->scratch, NULL);
        if (!key) {
            parse_fail(p, "out of memory");
            goto err_put;
        }
        if (json_object_object_get_ex(obj, key, NULL)) {
            p->pos = key_pos;
            parse_fail(p, "duplicate key \"%.100s\"", key);
            goto err_put;
        }
        if (charge(p, JSON_COST_MEMBER + strlen(key)) < 0) {
            goto err_put;
        }
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':') {
            parse_fail(p, "expected ':' after key \"%.100s\", got %s", key,
                       describe_at(p, tmp, sizeof(tmp)));
            goto err_put;
        }
        p->pos++;
        struct json_object *child = NULL;
        if (parse_value(p, &child) < 0) {
            goto err_put;
        }
        if (json_object_object_add(obj, key, child) != 0) {
            json_object_put(child);
            parse_fail(p, "out of memory");
            goto err_put;
        }
        free(key);
        key = NULL;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == '}') {
            p->pos++;
            *out = obj;
            return 0;
        }
        parse_fail(p, "expected ',' or '}' in object, got %s", describe_at(p, tmp, sizeof(tmp)));
        goto err_put;
    }
err_put:
    free(key);
    json_object_put(obj);
    return -1;
}

/* Children are collected first so that the array is made at its exact size: json-c's default
 * of 32 slots would make every small array (a merge pair, a token list) cost 300 bytes. */
static int parse_array(struct json_parser *p, struct json_object **out)
{
    struct json_object **items = NULL, *arr = NULL;
    size_t n = 0, cap = 0;
    if (charge(p, JSON_COST_ARRAY) < 0) {
        return -1;
    }
    p->pos++; /* '[' */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        goto make;
    }
    for (;;) {
        struct json_object *child = NULL;
        if (charge(p, JSON_COST_ELEMENT) < 0 || parse_value(p, &child) < 0) {
            goto err_put;
        }
        struct json_object **grown =
            tandem_grow(items, &cap, n + 1, sizeof(struct json_object *), 8);
        if (!grown) {
            json_object_put(child);
            parse_fail(p, "out of memory");
            goto err_put;
        }
        items = grown;
        items[n++] = child;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == ']') {
            p->pos++;
            goto make;
        }
        char tmp[32];
        parse_fail(p, "expected ',' or ']' in array, got %s", describe_at(p, tmp, sizeof(tmp)));
        goto err_put;
    }
make:
    if (n > INT_MAX || !(arr = json_object_new_array_ext(n ? (int)n : 1))) {
        parse_fail(p, "out of memory");
        goto err_put;
    }
    for (size_t i = 0; i < n; i++) {
        if (json_object_array_add(arr, items[i]) != 0) {
            parse_fail(p, "out of memory");
            goto err_put;
        }
        items[i] = NULL; /* owned by arr */
    }
    free(items);
    *out = arr;
    return 0;
err_put:
    for (size_t i = 0; i < n; i++) {
        json_object_put(items[i]);
    }
    free(items);
    json_object_put(arr);
    return -1;
}

static int parse_literal(struct json_parser *p, const char *word, struct json_object **out,
                         struct json_object *value)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) {
        json_object_put(value);
        parse_fail(p, "invalid literal (expected %s)", word);
        return -1;
    }
    p->pos += n;
    *out = value;
    return 0;
}

static int parse_value(struct json_parser *p, struct json_object **out)
{
    *out = NULL;
    skip_ws(p);
    if (p->pos >= p->len) {
        parse_fail(p, "unexpected end of input");
        return -1;
    }
    char c = p->s[p->pos];
    int rc;
    switch (c) {
    case '{':
    case '[':
        if (p->depth >= JSON_MAX_DEPTH) {
            parse_fail(p, "nesting deeper than %d", JSON_MAX_DEPTH);
            return -1;
        }
        p->depth++;
        rc = c == '{' ? parse_object(p, out) : parse_array(p, out);
        p->depth--;
        return rc;
    case '"':
        if (parse_string(p) < 0 || charge(p, JSON_COST_SCALAR + p->scratch.len) < 0) {
            return -1;
        }
        *out = json_object_new_string_len(buf_cstr(&p->scratch), (int)p->scratch.len);
        if (!*out) {
            parse_fail(p, "out of memory");
            return -1;
        }
        return 0;
    case 't':
        return charge(p, JSON_COST_SCALAR) < 0
                   ? -1
                   : parse_literal(p, "true", out, json_object_new_boolean(1));
    case 'f':
        return charge(p, JSON_COST_SCALAR) < 0
                   ? -1
                   : parse_literal(p, "false", out, json_object_new_boolean(0));
    case 'n':
        return parse_literal(p, "null", out, NULL);
    default:
        if (c == '-' || is_digit(c)) {
            return parse_number(p, out);
        }
        char tmp[32];
        parse_fail(p, "unexpected %s", describe_at(p, tmp, sizeof(tmp)));
        return -1;
    }
}

int json_parse_one(const char *data, size_t len, struct json_object **out, char *err, size_t errlen)
{
    TANDEM_ASSERT(out != NULL);
    *out = NULL;
    tandem_set_err(err, errlen, "%s", "");
    if (!data && len > 0) {
        tandem_set_err(err, errlen, "no input");
        return -EINVAL;
    }
    if (len > INT_MAX) {
        tandem_set_err(err, errlen, "input larger than %d bytes", INT_MAX);
        return -EINVAL;
    }
    struct json_parser p = {.s = data ? data : "",
                            .len = len,
                            .err = err,
                            .errlen = errlen,
                            .budget = JSON_PARSE_FACTOR * len + JSON_PARSE_SLACK};
    buf_init(&p.scratch, len);
    struct json_object *root = NULL;
    int rc = parse_value(&p, &root);
    if (rc == 0) {
        skip_ws(&p);
        if (p.pos < p.len) {
            char tmp[32];
            parse_fail(&p, "trailing %s after the JSON value", describe_at(&p, tmp, sizeof(tmp)));
            json_object_put(root);
            root = NULL;
            rc = -1;
        }
    }
    buf_free(&p.scratch);
    if (rc < 0) {
        return -EINVAL;
    }
    *out = root;
    return 0;
}

struct json_object *json_parse(const char *data, size_t len, char *err, size_t errlen)
{
    struct json_object *o = NULL;
    json_parse_one(data, len, &o, err, errlen);
    return o;
}

/* ---- paths and getters ---- */

enum walk_result { WALK_FOUND, WALK_MISSING, WALK_BAD_PARENT };

/*
 * Walks path from root. WALK_FOUND: *out is the value (NULL for JSON null). WALK_MISSING: some
 * segment is absent. WALK_BAD_PARENT: a key was applied to a non-object or an index to a
 * non-array; *bad_len is the length of the path prefix naming that value, *out the value.
 */
static enum walk_result walk(struct json_object *root, const char *path, struct json_object **out,
                             size_t *bad_len)
{
    struct json_object *cur = root;
    const char *p = path ? path : "";
    *out = NULL;
    *bad_len = 0;
    if (*p == '\0') {
        *out = root;
        return WALK_FOUND;
    }
    int first = 1;
    while (*p) {
        if (*p == '[') {
            const char *q = p + 1;
            size_t idx = 0;
            if (!is_digit(*q)) {
                return WALK_MISSING;
            }
            while (is_digit(*q)) {
                if (idx > ((size_t)INT_MAX - 9) / 10) {
                    return WALK_MISSING;
                }
                idx = idx * 10 + (size_t)(*q - '0');
                q++;
            }
            if (*q != ']') {
                return WALK_MISSING;
            }
            if (!cur) {
                return WALK_MISSING;
            }
            if (!json_object_is_type(cur, json_type_array)) {
                *bad_len = (size_t)(p - path);
                *out = cur;
                return WALK_BAD_PARENT;
            }
            if (idx >= json_object_array_length(cur)) {
                return WALK_MISSING;
            }
            cur = json_object_array_get_idx(cur, idx);
            p = q + 1;
        } else {
            if (!first) {
                if (*p != '.') {
                    return WALK_MISSING;
                }
                p++;
            }
            size_t n = strcspn(p, ".[]");
            if (n == 0) {
                return WALK_MISSING;
            }
            if (!cur) {
                return WALK_MISSING;
            }
            if (!json_object_is_type(cur, json_type_object)) {
                *bad_len = first ? 0 : (size_t)(p - 1 - path);
                *out = cur;
                return WALK_BAD_PARENT;
            }
            char stack_key[JSON_KEY_STACK];
            char *key = n < sizeof(stack_key) ? stack_key : malloc(n + 1);
            if (!key) {
                return WALK_MISSING;
            }
            memcpy(key, p, n);
            key[n] = '\0';
            struct json_object *next = NULL;
            int found = json_object_object_get_ex(cur, key, &next);
            if (key != stack_key) {
                free(key);
            }
            if (!found) {
                return WALK_MISSING;
            }
            cur = next;
            p += n;
        }
        first = 0;
    }
    *out = cur;
    return WALK_FOUND;
}

struct json_object *json_get(struct json_object *root, const char *path)
{
    struct json_object *o;
    size_t bad_len;
    return walk(root, path, &o, &bad_len) == WALK_FOUND ? o : NULL;
}

const char *json_type_label(struct json_object *o)
{
    switch (json_object_get_type(o)) {
    case json_type_null:
        return "null";
    case json_type_boolean:
        return "boolean";
    case json_type_int:
        return "integer";
    case json_type_double:
        return "number";
    case json_type_string:
        return "string";
    case json_type_object:
        return "object";
    case json_type_array:
        return "array";
    }
    return "unknown";
}

/*
 * Shared front half of the getters: finds the value or explains why not. Returns 0 with *out set
 * (non-NULL), -ENOENT (missing or null; err set only when required), or -EINVAL (a parent of the
 * wrong type; err set).
 */
static int lookup(struct json_object *root, const char *path, int required,
                  struct json_object **out, char *err, size_t errlen)
{
    size_t bad_len;
    struct json_object *o;
    enum walk_result r = walk(root, path, &o, &bad_len);
    const char *shown = path && *path ? path : "(root)";
    if (r == WALK_BAD_PARENT) {
        int want_array = path && path[bad_len] == '[';
        if (bad_len == 0) {
            tandem_set_err(err, errlen, "%s: expected %s at the top level, got %s", shown,
                           want_array ? "array" : "object", json_type_label(o));
        } else {
            tandem_set_err(err, errlen, "%.*s: expected %s, got %s", (int)bad_len, path,
                           want_array ? "array" : "object", json_type_label(o));
        }
        return -EINVAL;
    }
    if (r == WALK_MISSING || !o) {
        if (required) {
            tandem_set_err(err, errlen, "%s: required field is missing", shown);
        }
        return -ENOENT;
    }
    *out = o;
    return 0;
}

static int wrong_type(const char *path, const char *want, struct json_object *o, char *err,
                      size_t errlen)
{
    tandem_set_err(err, errlen, "%s: expected %s, got %s", path && *path ? path : "(root)", want,
                   json_type_label(o));
    return -EINVAL;
}

/* json-c keeps integers past INT64_MAX as uint64; get_int64 saturates them. */
static int int_is_big_unsigned(struct json_object *o)
{
    return json_object_get_int64(o) == INT64_MAX && json_object_get_uint64(o) > (uint64_t)INT64_MAX;
}

static int to_int64(const char *path, struct json_object *o, int64_t *out, char *err, size_t errlen)
{
    if (json_object_is_type(o, json_type_int)) {
        if (int_is_big_unsigned(o)) {
            tandem_set_err(err, errlen, "%s: %llu is out of range", path,
                           (unsigned long long)json_object_get_uint64(o));
            return -EINVAL;
        }
        *out = json_object_get_int64(o);
        return 0;
    }
    if (json_object_is_type(o, json_type_double)) {
        double d = json_object_get_double(o);
        if (d != floor(d) || !isfinite(d)) {
            return wrong_type(path, "integer", o, err, errlen);
        }
        if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) {
            tandem_set_err(err, errlen, "%s: %g is out of range", path, d);
            return -EINVAL;
        }
        *out = (int64_t)d;
        return 0;
    }
    return wrong_type(path, "integer", o, err, errlen);
}

int json_opt_int64(struct json_object *root, const char *path, int64_t def, int64_t *out, char *err,
                   size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 0, &o, err, errlen);
    if (rc == -ENOENT) {
        *out = def;
        return 0;
    }
    return rc < 0 ? rc : to_int64(path, o, out, err, errlen);
}

int json_get_int64(struct json_object *root, const char *path, int64_t *out, char *err,
                   size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 1, &o, err, errlen);
    return rc < 0 ? rc : to_int64(path, o, out, err, errlen);
}

static int to_int(const char *path, struct json_object *o, int *out, char *err, size_t errlen)
{
    int64_t v;
    int rc = to_int64(path, o, &v, err, errlen);
    if (rc < 0) {
        return rc;
    }
    if (v < INT_MIN || v > INT_MAX) {
        tandem_set_err(err, errlen, "%s: %lld is out of range for a 32-bit integer", path,
                       (long long)v);
        return -EINVAL;
    }
    *out = (int)v;
    return 0;
}

int json_get_int(struct json_object *root, const char *path, int *out, char *err, size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 1, &o, err, errlen);
    return rc < 0 ? rc : to_int(path, o, out, err, errlen);
}

int json_opt_int(struct json_object *root, const char *path, int def, int *out, char *err,
                 size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 0, &o, err, errlen);
    if (rc == -ENOENT) {
        *out = def;
        return 0;
    }
    return rc < 0 ? rc : to_int(path, o, out, err, errlen);
}

static int to_double(const char *path, struct json_object *o, double *out, char *err, size_t errlen)
{
    if (json_object_is_type(o, json_type_double)) {
        *out = json_object_get_double(o);
        return 0;
    }
    if (json_object_is_type(o, json_type_int)) {
        *out = int_is_big_unsigned(o) ? (double)json_object_get_uint64(o)
                                      : (double)json_object_get_int64(o);
        return 0;
    }
    return wrong_type(path, "number", o, err, errlen);
}

int json_get_double(struct json_object *root, const char *path, double *out, char *err,
                    size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 1, &o, err, errlen);
    return rc < 0 ? rc : to_double(path, o, out, err, errlen);
}

int json_opt_double(struct json_object *root, const char *path, double def, double *out, char *err,
                    size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 0, &o, err, errlen);
    if (rc == -ENOENT) {
        *out = def;
        return 0;
    }
    return rc < 0 ? rc : to_double(path, o, out, err, errlen);
}

static int to_bool(const char *path, struct json_object *o, int *out, char *err, size_t errlen)
{
    if (!json_object_is_type(o, json_type_boolean)) {
        return wrong_type(path, "boolean", o, err, errlen);
    }
    *out = json_object_get_boolean(o) ? 1 : 0;
    return 0;
}

int json_get_bool(struct json_object *root, const char *path, int *out, char *err, size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 1, &o, err, errlen);
    return rc < 0 ? rc : to_bool(path, o, out, err, errlen);
}

int json_opt_bool(struct json_object *root, const char *path, int def, int *out, char *err,
                  size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 0, &o, err, errlen);
    if (rc == -ENOENT) {
        *out = def;
        return 0;
    }
    return rc < 0 ? rc : to_bool(path, o, out, err, errlen);
}

static int to_string(const char *path, struct json_object *o, const char **out, char *err,
                     size_t errlen)
{
    if (!json_object_is_type(o, json_type_string)) {
        return wrong_type(path, "string", o, err, errlen);
    }
    *out = json_object_get_string(o);
    return 0;
}

int json_get_string(struct json_object *root, const char *path, const char **out, char *err,
                    size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 1, &o, err, errlen);
    return rc < 0 ? rc : to_string(path, o, out, err, errlen);
}

int json_opt_string(struct json_object *root, const char *path, const char *def, const char **out,
                    char *err, size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 0, &o, err, errlen);
    if (rc == -ENOENT) {
        *out = def;
        return 0;
    }
    return rc < 0 ? rc : to_string(path, o, out, err, errlen);
}

static int to_typed(const char *path, struct json_object *o, enum json_type type,
                    struct json_object **out, char *err, size_t errlen)
{
    if (!json_object_is_type(o, type)) {
        return wrong_type(path, type == json_type_object ? "object" : "array", o, err, errlen);
    }
    *out = o;
    return 0;
}

int json_get_object(struct json_object *root, const char *path, struct json_object **out, char *err,
                    size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 1, &o, err, errlen);
    return rc < 0 ? rc : to_typed(path, o, json_type_object, out, err, errlen);
}

int json_opt_object(struct json_object *root, const char *path, struct json_object *def,
                    struct json_object **out, char *err, size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 0, &o, err, errlen);
    if (rc == -ENOENT) {
        *out = def;
        return 0;
    }
    return rc < 0 ? rc : to_typed(path, o, json_type_object, out, err, errlen);
}

int json_get_array(struct json_object *root, const char *path, struct json_object **out, char *err,
                   size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 1, &o, err, errlen);
    return rc < 0 ? rc : to_typed(path, o, json_type_array, out, err, errlen);
}

int json_opt_array(struct json_object *root, const char *path, struct json_object *def,
                   struct json_object **out, char *err, size_t errlen)
{
    struct json_object *o;
    int rc = lookup(root, path, 0, &o, err, errlen);
    if (rc == -ENOENT) {
        *out = def;
        return 0;
    }
    return rc < 0 ? rc : to_typed(path, o, json_type_array, out, err, errlen);
}

/* ---- serializer ---- */

static int write_string(struct buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    int rc = buf_append(out, "\"", 1);
    size_t start = 0;
    for (size_t i = 0; rc == 0 && i < len;) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        size_t n = 0;
        size_t consumed = 1;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            n = 2;
        } else if (c < 0x20) {
            const char *named = c == '\n'   ? "\\n"
                                : c == '\r' ? "\\r"
                                : c == '\t' ? "\\t"
                                : c == '\b' ? "\\b"
                                : c == '\f' ? "\\f"
                                            : NULL;
            if (named) {
                memcpy(esc, named, n = 2);
            } else {
                esc[0] = '\\';
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                n = 6;
            }
        } else if (c >= 0x80) {
            consumed = tandem_utf8_seq_len((const unsigned char *)s + i, len - i);
            if (consumed == 0) {
                memcpy(esc, "\\ufffd", n = 6); /* invalid UTF-8 from a hand-built object */
                consumed = 1;
            }
        }
        if (n > 0) {
            rc = buf_append(out, s + start, i - start);
            if (rc == 0) {
                rc = buf_append(out, esc, n);
            }
            start = i + consumed;
        }
        i += consumed;
    }
    if (rc == 0) {
        rc = buf_append(out, s + start, len - start);
    }
    return rc == 0 ? buf_append(out, "\"", 1) : rc;
}

/*
 * Shortest digits that read back as d, laid out like JavaScript (and Go's encoding/json): plain
 * decimal for 1e-7 <= |d| < 1e21, else exponent form; ".0" is added so the value stays a float.
 */
static int write_double(struct buf *out, double d)
{
    if (!isfinite(d)) {
        return -EINVAL;
    }
    char e[40];
    for (int prec = 0; prec <= 16; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, d);
        if (strtod(e, NULL) == d) {
            break;
        }
    }
    /* e is "[-]d[.ddd]e[+-]XX": count the significant digits and read the exponent. */
    const char *mark = strchr(e, 'e');
    TANDEM_ASSERT(mark != NULL);
    int exp10 = (int)strtol(mark + 1, NULL, 10);
    int ndigits = 0;
    for (const char *p = e; p < mark; p++) {
        ndigits += *p >= '0' && *p <= '9';
    }
    char tmp[400];
    if (d != 0 && (exp10 < -7 || exp10 >= 21)) {
        snprintf(tmp, sizeof(tmp), "%.*se%c%d", (int)(mark - e), e, exp10 < 0 ? '-' : '+',
                 exp10 < 0 ? -exp10 : exp10);
    } else {
        int decimals = ndigits - 1 - exp10;
        snprintf(tmp, sizeof(tmp), "%.*f", decimals > 0 ? decimals : 0, d);
    }
    if (!strpbrk(tmp, ".e")) {
        strcat(tmp, ".0");
    }
    return buf_appends(out, tmp);
}

static int write_indent(struct buf *out, int pretty, int depth)
{
    if (!pretty) {
        return 0;
    }
    int rc = buf_append(out, "\n", 1);
    for (int i = 0; rc == 0 && i < depth; i++) {
        rc = buf_append(out, "  ", 2);
    }
    return rc;
}

static int write_value(struct json_object *o, int pretty, int depth, struct buf *out)
{
    if (depth > JSON_MAX_OUT_DEPTH) {
        return -EINVAL;
    }
    int rc = 0;
    switch (json_object_get_type(o)) {
    case json_type_null:
        return buf_appends(out, "null");
    case json_type_boolean:
        return buf_appends(out, json_object_get_boolean(o) ? "true" : "false");
    case json_type_int:
        if (int_is_big_unsigned(o)) {
            return buf_appendf(out, "%llu", (unsigned long long)json_object_get_uint64(o));
        }
        return buf_appendf(out, "%lld", (long long)json_object_get_int64(o));
    case json_type_double:
        return write_double(out, json_object_get_double(o));
    case json_type_string:
        return write_string(out, json_object_get_string(o), (size_t)json_object_get_string_len(o));
    case json_type_array: {
        size_t n = json_object_array_length(o);
        rc = buf_append(out, "[", 1);
        for (size_t i = 0; rc == 0 && i < n; i++) {
            if (i > 0) {
                rc = buf_append(out, ",", 1);
            }
            if (rc == 0) {
                rc = write_indent(out, pretty, depth + 1);
            }
            if (rc == 0) {
                rc = write_value(json_object_array_get_idx(o, i), pretty, depth + 1, out);
            }
        }
        if (rc == 0 && n > 0) {
            rc = write_indent(out, pretty, depth);
        }
        return rc == 0 ? buf_append(out, "]", 1) : rc;
    }
    case json_type_object: {
        int i = 0;
        rc = buf_append(out, "{", 1);
        json_object_object_foreach(o, key, val)
        {
            if (rc != 0) {
                break;
            }
            if (i++ > 0) {
                rc = buf_append(out, ",", 1);
            }
            if (rc == 0) {
                rc = write_indent(out, pretty, depth + 1);
            }
            if (rc == 0) {
                rc = write_string(out, key, strlen(key));
            }
            if (rc == 0) {
                rc = buf_appends(out, pretty ? ": " : ":");
            }
            if (rc == 0) {
                rc = write_value(val, pretty, depth + 1, out);
            }
        }
        if (rc == 0 && i > 0) {
            rc = write_indent(out, pretty, depth);
        }
        return rc == 0 ? buf_append(out, "}", 1) : rc;
    }
    }
    return -EINVAL;
}

int json_to_buf(struct json_object *o, int pretty, struct buf *out)
{
    TANDEM_ASSERT(out != NULL);
    int rc = write_value(o, pretty, 0, out);
    if (rc != 0) {
        buf_set_error(out, rc); /* a half-written document stays refused */
    }
    return rc;
}
