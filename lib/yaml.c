/*
 * YAML → json-c (see yaml.h). libyaml's event parser drives a builder with an explicit stack of
 * open collections, so nesting costs no C recursion. Plain scalars are resolved the way go-yaml v2
 * (and so sigs.k8s.io/yaml and kubectl) resolves them into interface{} values. Aliases are deep
 * copies, charged against a per-call node budget before copying, so an alias bomb fails fast.
 */
#include "lib/yaml.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "lib/err.h"

#define TAG_PREFIX "tag:yaml.org,2002:"

struct anchor {
    char *name;
    struct json_object *value; /* owned reference (NULL for a null node) */
    size_t nodes;              /* nodes in the subtree, aliases expanded */
    int is_scalar;             /* usable as a map key */
};

struct frame {
    int is_map;
    struct json_object *obj;    /* the collection being built (owned) */
    char *anchor;               /* anchor to register when the collection ends, or NULL */
    size_t count_at_start;      /* ctx->count when the collection started */
    char *key;                  /* map: key waiting for its value, NULL when a key is expected */
    int key_is_merge;           /* map: the pending key is "<<" */
    yaml_mark_t key_mark;       /* map: where the pending key is */
    struct json_object *merges; /* map: json array of mappings to merge at the end, or NULL */
};

struct builder {
    struct frame stack[YAML_MAX_DEPTH];
    int depth;
    struct anchor *anchors;
    size_t nanchors, cap_anchors;
    size_t count;       /* nodes built in this document, aliases expanded */
    size_t alias_nodes; /* nodes produced by alias expansion in this call */
    struct json_object *root;
    int have_root;
    char *err;
    size_t errlen;
    int rc; /* first error: -EINVAL or -ENOMEM */
};

static void fail_at(struct builder *b, int rc, yaml_mark_t mark, const char *fmt, ...)
    TANDEM_PRINTF(4, 5);

static void fail_at(struct builder *b, int rc, yaml_mark_t mark, const char *fmt, ...)
{
    if (b->rc) {
        return;
    }
    b->rc = rc;
    if (!b->err || b->errlen == 0) {
        return;
    }
    int n = snprintf(b->err, b->errlen, "line %zu column %zu: ", mark.line + 1, mark.column + 1);
    if (n < 0 || (size_t)n >= b->errlen) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(b->err + n, b->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static void fail_oom(struct builder *b, yaml_mark_t mark)
{
    fail_at(b, -ENOMEM, mark, "out of memory");
}

/* ---- scalar resolution (go-yaml v2 resolve.go) ---- */

enum scalar_kind { SK_NULL, SK_BOOL, SK_INT, SK_UINT, SK_FLOAT, SK_STRING, SK_MERGE };

struct scalar {
    enum scalar_kind kind;
    int b;
    int64_t i;
    uint64_t u;
    double d;
};

static const struct {
    const char *text;
    enum scalar_kind kind;
    int b;
    double d;
} resolve_map[] = {
    {"y", SK_BOOL, 1, 0},
    {"Y", SK_BOOL, 1, 0},
    {"yes", SK_BOOL, 1, 0},
    {"Yes", SK_BOOL, 1, 0},
    {"YES", SK_BOOL, 1, 0},
    {"true", SK_BOOL, 1, 0},
    {"True", SK_BOOL, 1, 0},
    {"TRUE", SK_BOOL, 1, 0},
    {"on", SK_BOOL, 1, 0},
    {"On", SK_BOOL, 1, 0},
    {"ON", SK_BOOL, 1, 0},
    {"n", SK_BOOL, 0, 0},
    {"N", SK_BOOL, 0, 0},
    {"no", SK_BOOL, 0, 0},
    {"No", SK_BOOL, 0, 0},
    {"NO", SK_BOOL, 0, 0},
    {"false", SK_BOOL, 0, 0},
    {"False", SK_BOOL, 0, 0},
    {"FALSE", SK_BOOL, 0, 0},
    {"off", SK_BOOL, 0, 0},
    {"Off", SK_BOOL, 0, 0},
    {"OFF", SK_BOOL, 0, 0},
    {"", SK_NULL, 0, 0},
    {"~", SK_NULL, 0, 0},
    {"null", SK_NULL, 0, 0},
    {"Null", SK_NULL, 0, 0},
    {"NULL", SK_NULL, 0, 0},
    {".nan", SK_FLOAT, 0, NAN},
    {".NaN", SK_FLOAT, 0, NAN},
    {".NAN", SK_FLOAT, 0, NAN},
    {".inf", SK_FLOAT, 0, INFINITY},
    {".Inf", SK_FLOAT, 0, INFINITY},
    {".INF", SK_FLOAT, 0, INFINITY},
    {"+.inf", SK_FLOAT, 0, INFINITY},
    {"+.Inf", SK_FLOAT, 0, INFINITY},
    {"+.INF", SK_FLOAT, 0, INFINITY},
    {"-.inf", SK_FLOAT, 0, -INFINITY},
    {"-.Inf", SK_FLOAT, 0, -INFINITY},
    {"-.INF", SK_FLOAT, 0, -INFINITY},
    {"<<", SK_MERGE, 0, 0},
};

static int digit_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'Z') {
        return c - 'A' + 10;
    }
    return 99;
}

/* Go's strconv.ParseInt(s, 0, 64), then ParseUint(s, 0, 64), on s without underscores. */
static int parse_go_int(const char *s, struct scalar *out)
{
    int neg = 0, has_sign = 0;
    if (*s == '+' || *s == '-') {
        neg = *s == '-';
        has_sign = 1;
        s++;
    }
    unsigned base = 10;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    } else if (s[0] == '0' && (s[1] == 'o' || s[1] == 'O')) {
        base = 8;
        s += 2;
    } else if (s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) {
        base = 2;
        s += 2;
    } else if (s[0] == '0' && s[1] != '\0') {
        base = 8;
        s++;
    }
    if (*s == '\0') {
        return -1;
    }
    uint64_t v = 0;
    for (; *s; s++) {
        unsigned dv = (unsigned)digit_value(*s);
        if (dv >= base) {
            return -1;
        }
        if (v > (UINT64_MAX - dv) / base) {
            return -1; /* overflows uint64 */
        }
        v = v * base + dv;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) {
            return -1;
        }
        out->kind = SK_INT;
        out->i = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
        return 0;
    }
    if (v <= (uint64_t)INT64_MAX) {
        out->kind = SK_INT;
        out->i = (int64_t)v;
        return 0;
    }
    if (has_sign) {
        return -1; /* ParseUint takes no sign */
    }
    out->kind = SK_UINT;
    out->u = v;
    return 0;
}

/* ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$ */
static int is_yaml_float(const char *s)
{
    if (*s == '+' || *s == '-') {
        s++;
    }
    if (*s == '.') {
        s++;
        if (!(*s >= '0' && *s <= '9')) {
            return 0;
        }
        while (*s >= '0' && *s <= '9') {
            s++;
        }
    } else {
        if (!(*s >= '0' && *s <= '9')) {
            return 0;
        }
        while (*s >= '0' && *s <= '9') {
            s++;
        }
        if (*s == '.') {
            s++;
            while (*s >= '0' && *s <= '9') {
                s++;
            }
        }
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') {
            s++;
        }
        if (!(*s >= '0' && *s <= '9')) {
            return 0;
        }
        while (*s >= '0' && *s <= '9') {
            s++;
        }
    }
    return *s == '\0';
}

/* Resolves a plain scalar (NUL-terminated text of length len). Never fails: unknown → string. */
static void resolve_plain(const char *text, size_t len, struct scalar *out)
{
    memset(out, 0, sizeof(*out));
    out->kind = SK_STRING;
    if (strlen(text) != len) {
        return; /* contains NUL: cannot be anything but a string */
    }
    for (size_t i = 0; i < ARRAY_SIZE(resolve_map); i++) {
        if (strcmp(text, resolve_map[i].text) == 0) {
            out->kind = resolve_map[i].kind;
            out->b = resolve_map[i].b;
            out->d = resolve_map[i].d;
            return;
        }
    }
    char c = text[0];
    if (c == '.') {
        if (is_yaml_float(text)) {
            double d = strtod(text, NULL);
            if (isfinite(d)) {
                out->kind = SK_FLOAT;
                out->d = d;
            }
        }
        return;
    }
    if (!((c >= '0' && c <= '9') || c == '+' || c == '-')) {
        return;
    }
    char stack_plain[128];
    char *plain = len < sizeof(stack_plain) ? stack_plain : malloc(len + 1);
    if (!plain) {
        return; /* out of memory: leave it a string */
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '_') {
            plain[n++] = text[i];
        }
    }
    plain[n] = '\0';
    struct scalar tmp = {0};
    if (parse_go_int(plain, &tmp) == 0) {
        *out = tmp;
    } else if (is_yaml_float(plain)) {
        double d = strtod(plain, NULL);
        if (isfinite(d)) { /* Go's ParseFloat fails on overflow: the scalar stays a string */
            out->kind = SK_FLOAT;
            out->d = d;
        }
    }
    if (plain != stack_plain) {
        free(plain);
    }
}

static struct json_object *scalar_to_json(const struct scalar *s, const char *text, size_t len)
{
    switch (s->kind) {
    case SK_NULL:
        return NULL;
    case SK_BOOL:
        return json_object_new_boolean(s->b);
    case SK_INT:
        return json_object_new_int64(s->i);
    case SK_UINT:
        return json_object_new_uint64(s->u);
    case SK_FLOAT:
        return json_object_new_double(s->d);
    case SK_STRING:
    case SK_MERGE:
        break;
    }
    return json_object_new_string_len(text, (int)len);
}

/*
 * Resolves a scalar event into *s honouring tags. Returns 0, or -1 with the error recorded.
 */
static int resolve_scalar(struct builder *b, const yaml_event_t *ev, struct scalar *s)
{
    const char *text = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    const char *tag = (const char *)ev->data.scalar.tag;
    int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    memset(s, 0, sizeof(*s));
    s->kind = SK_STRING;
    if (!tag || strncmp(tag, TAG_PREFIX, strlen(TAG_PREFIX)) != 0) {
        /* No tag, or a local tag we do not know: "!" alone forces a string. */
        if (plain && !(tag && strcmp(tag, "!") == 0)) {
            resolve_plain(text, len, s);
        }
        return 0;
    }
    const char *name = tag + strlen(TAG_PREFIX);
    if (strcmp(name, "str") == 0 || strcmp(name, "binary") == 0 || strcmp(name, "timestamp") == 0) {
        return 0;
    }
    struct scalar r;
    resolve_plain(text, len, &r);
    if (strcmp(name, "int") == 0) {
        if (r.kind != SK_INT && r.kind != SK_UINT) {
            goto err_tag;
        }
    } else if (strcmp(name, "float") == 0) {
        if (r.kind == SK_INT) {
            r.kind = SK_FLOAT;
            r.d = (double)r.i;
        } else if (r.kind == SK_UINT) {
            r.kind = SK_FLOAT;
            r.d = (double)r.u;
        } else if (r.kind != SK_FLOAT) {
            goto err_tag;
        }
    } else if (strcmp(name, "bool") == 0) {
        if (r.kind != SK_BOOL) {
            goto err_tag;
        }
    } else if (strcmp(name, "null") == 0) {
        if (r.kind != SK_NULL) {
            goto err_tag;
        }
    } else if (strcmp(name, "merge") == 0) {
        if (r.kind != SK_MERGE) {
            goto err_tag;
        }
    } else {
        /* !!map, !!seq, !!set, ... on a scalar: resolve as if untagged. */
        if (!plain) {
            return 0;
        }
    }
    *s = r;
    return 0;
err_tag:
    fail_at(b, -EINVAL, ev->start_mark, "cannot decode \"%.60s\" as !!%s", text, name);
    return -1;
}

/* ---- anchors ---- */

static const struct anchor *anchor_find(const struct builder *b, const char *name)
{
    for (size_t i = b->nanchors; i > 0; i--) {
        if (strcmp(b->anchors[i - 1].name, name) == 0) {
            return &b->anchors[i - 1];
        }
    }
    return NULL;
}

static int anchor_add(struct builder *b, const char *name, struct json_object *value, size_t nodes,
                      int is_scalar, yaml_mark_t mark)
{
    if (b->nanchors == b->cap_anchors) {
        size_t cap = b->cap_anchors ? b->cap_anchors * 2 : 16;
        struct anchor *a = realloc(b->anchors, cap * sizeof(*a));
        if (!a) {
            fail_oom(b, mark);
            return -1;
        }
        b->anchors = a;
        b->cap_anchors = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        fail_oom(b, mark);
        return -1;
    }
    struct anchor *a = &b->anchors[b->nanchors++];
    a->name = copy;
    a->value = json_object_get(value);
    a->nodes = nodes;
    a->is_scalar = is_scalar;
    return 0;
}

static void anchors_clear(struct builder *b)
{
    for (size_t i = 0; i < b->nanchors; i++) {
        free(b->anchors[i].name);
        json_object_put(b->anchors[i].value);
    }
    b->nanchors = 0;
}

/* ---- building ---- */

/* Canonical key text for a resolved scalar used as a map key; NULL (error recorded) if none. */
static char *key_text(struct builder *b, const struct scalar *s, const char *text, size_t len,
                      yaml_mark_t mark)
{
    char tmp[32];
    const char *k = NULL;
    switch (s->kind) {
    case SK_NULL:
        fail_at(b, -EINVAL, mark, "null map key is not supported");
        return NULL;
    case SK_BOOL:
        k = s->b ? "true" : "false";
        break;
    case SK_INT:
        snprintf(tmp, sizeof(tmp), "%" PRId64, s->i);
        k = tmp;
        break;
    case SK_UINT:
        snprintf(tmp, sizeof(tmp), "%" PRIu64, s->u);
        k = tmp;
        break;
    case SK_FLOAT:
    case SK_STRING:
    case SK_MERGE:
        if (memchr(text, '\0', len)) {
            fail_at(b, -EINVAL, mark, "map key contains a NUL character");
            return NULL;
        }
        k = text;
        break;
    }
    char *key = strdup(k);
    if (!key) {
        fail_oom(b, mark);
    }
    return key;
}

/* Key text for an alias used as a map key. */
static char *alias_key_text(struct builder *b, const struct anchor *a, yaml_mark_t mark)
{
    struct scalar s = {0};
    const char *text = "";
    size_t len = 0;
    char tmp[40];
    switch (json_object_get_type(a->value)) {
    case json_type_null:
        s.kind = SK_NULL;
        break;
    case json_type_boolean:
        s.kind = SK_BOOL;
        s.b = json_object_get_boolean(a->value);
        break;
    case json_type_int:
        s.kind = SK_INT;
        s.i = json_object_get_int64(a->value);
        if (s.i == INT64_MAX && json_object_get_uint64(a->value) > (uint64_t)INT64_MAX) {
            s.kind = SK_UINT;
            s.u = json_object_get_uint64(a->value);
        }
        break;
    case json_type_double:
        s.kind = SK_FLOAT;
        snprintf(tmp, sizeof(tmp), "%.17g", json_object_get_double(a->value));
        text = tmp;
        len = strlen(tmp);
        break;
    case json_type_string:
        s.kind = SK_STRING;
        text = json_object_get_string(a->value);
        len = (size_t)json_object_get_string_len(a->value);
        break;
    case json_type_object:
    case json_type_array:
        fail_at(b, -EINVAL, mark, "map keys must be scalars (alias *%s is a collection)", a->name);
        return NULL;
    }
    return key_text(b, &s, text, len, mark);
}

static int is_mapping(struct json_object *o)
{
    return json_object_is_type(o, json_type_object);
}

/*
 * Hands a finished node (a new reference, NULL for null) to its parent or makes it the document
 * root. Always consumes the reference.
 */
static int deliver(struct builder *b, struct json_object *node, yaml_mark_t mark)
{
    if (b->depth == 0) {
        b->root = node;
        b->have_root = 1;
        return 0;
    }
    struct frame *f = &b->stack[b->depth - 1];
    if (!f->is_map) {
        if (json_object_array_add(f->obj, node) != 0) {
            json_object_put(node);
            fail_oom(b, mark);
            return -1;
        }
        return 0;
    }
    TANDEM_ASSERT(f->key != NULL);
    int rc = 0;
    if (f->key_is_merge) {
        int ok = is_mapping(node);
        if (json_object_is_type(node, json_type_array)) {
            ok = 1;
            for (size_t i = 0; i < json_object_array_length(node); i++) {
                ok = ok && is_mapping(json_object_array_get_idx(node, i));
            }
        }
        if (!ok) {
            json_object_put(node);
            fail_at(b, -EINVAL, f->key_mark,
                    "merge key \"<<\" needs a mapping or a sequence of mappings");
            rc = -1;
            goto out;
        }
        if (!f->merges && !(f->merges = json_object_new_array())) {
            json_object_put(node);
            fail_oom(b, mark);
            rc = -1;
            goto out;
        }
        if (json_object_array_add(f->merges, node) != 0) {
            json_object_put(node);
            fail_oom(b, mark);
            rc = -1;
        }
        goto out;
    }
    if (json_object_object_get_ex(f->obj, f->key, NULL)) {
        json_object_put(node);
        fail_at(b, -EINVAL, f->key_mark, "duplicate key \"%.100s\"", f->key);
        rc = -1;
        goto out;
    }
    if (json_object_object_add(f->obj, f->key, node) != 0) {
        json_object_put(node);
        fail_oom(b, mark);
        rc = -1;
    }
out:
    free(f->key);
    f->key = NULL;
    f->key_is_merge = 0;
    return rc;
}

/* In a map waiting for a key? */
static int expecting_key(const struct builder *b)
{
    if (b->depth == 0) {
        return 0;
    }
    const struct frame *f = &b->stack[b->depth - 1];
    return f->is_map && f->key == NULL;
}

static void set_key(struct builder *b, char *key, int is_merge, yaml_mark_t mark)
{
    struct frame *f = &b->stack[b->depth - 1];
    f->key = key;
    f->key_is_merge = is_merge;
    f->key_mark = mark;
}

static int on_scalar(struct builder *b, const yaml_event_t *ev)
{
    struct scalar s;
    const char *text = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (resolve_scalar(b, ev, &s) < 0) {
        return -1;
    }
    b->count++;
    if (expecting_key(b)) {
        char *key = key_text(b, &s, text, len, ev->start_mark);
        if (!key) {
            return -1;
        }
        if (ev->data.scalar.anchor) {
            struct json_object *kv = json_object_new_string(key);
            int rc =
                kv ? anchor_add(b, (const char *)ev->data.scalar.anchor, kv, 1, 1, ev->start_mark)
                   : -1;
            json_object_put(kv);
            if (rc < 0) {
                free(key);
                if (!b->rc) {
                    fail_oom(b, ev->start_mark);
                }
                return -1;
            }
        }
        set_key(b, key, s.kind == SK_MERGE, ev->start_mark);
        return 0;
    }
    if (s.kind == SK_MERGE) {
        s.kind = SK_STRING; /* "<<" as a value is just text */
    }
    struct json_object *node = scalar_to_json(&s, text, len);
    if (!node && s.kind != SK_NULL) {
        fail_oom(b, ev->start_mark);
        return -1;
    }
    if (ev->data.scalar.anchor &&
        anchor_add(b, (const char *)ev->data.scalar.anchor, node, 1, 1, ev->start_mark) < 0) {
        json_object_put(node);
        return -1;
    }
    return deliver(b, node, ev->start_mark);
}

static int on_alias(struct builder *b, const yaml_event_t *ev)
{
    const char *name = (const char *)ev->data.alias.anchor;
    const struct anchor *a = anchor_find(b, name);
    if (!a) {
        fail_at(b, -EINVAL, ev->start_mark, "unknown anchor \"%.60s\"", name);
        return -1;
    }
    if (a->nodes > YAML_MAX_ALIAS_NODES - b->alias_nodes) {
        fail_at(b, -EINVAL, ev->start_mark, "alias expansion exceeds %d nodes (alias bomb?)",
                YAML_MAX_ALIAS_NODES);
        return -1;
    }
    b->alias_nodes += a->nodes;
    b->count += a->nodes;
    if (expecting_key(b)) {
        char *key = alias_key_text(b, a, ev->start_mark);
        if (!key) {
            return -1;
        }
        set_key(b, key, 0, ev->start_mark);
        return 0;
    }
    struct json_object *copy = NULL;
    if (a->value && json_object_deep_copy(a->value, &copy, NULL) != 0) {
        fail_oom(b, ev->start_mark);
        return -1;
    }
    return deliver(b, copy, ev->start_mark);
}

static int on_start(struct builder *b, const yaml_event_t *ev, int is_map)
{
    if (expecting_key(b)) {
        fail_at(b, -EINVAL, ev->start_mark, "map keys must be scalars, got a %s",
                is_map ? "mapping" : "sequence");
        return -1;
    }
    if (b->depth >= YAML_MAX_DEPTH) {
        fail_at(b, -EINVAL, ev->start_mark, "nesting deeper than %d", YAML_MAX_DEPTH);
        return -1;
    }
    const yaml_char_t *anchor =
        is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
    struct frame *f = &b->stack[b->depth];
    memset(f, 0, sizeof(*f));
    f->is_map = is_map;
    f->count_at_start = b->count;
    f->obj = is_map ? json_object_new_object() : json_object_new_array();
    if (!f->obj) {
        fail_oom(b, ev->start_mark);
        return -1;
    }
    if (anchor && !(f->anchor = strdup((const char *)anchor))) {
        json_object_put(f->obj);
        fail_oom(b, ev->start_mark);
        return -1;
    }
    b->depth++;
    b->count++;
    return 0;
}

/* Adds the keys of mapping src that the map does not have yet. */
static int merge_one(struct builder *b, struct frame *f, struct json_object *src, yaml_mark_t mark)
{
    json_object_object_foreach(src, key, val)
    {
        if (json_object_object_get_ex(f->obj, key, NULL)) {
            continue;
        }
        if (json_object_object_add(f->obj, key, json_object_get(val)) != 0) {
            json_object_put(val);
            fail_oom(b, mark);
            return -1;
        }
    }
    return 0;
}

/* Applies the merge keys of a map in order: a mapping, or a sequence of mappings. */
static int apply_merges(struct builder *b, struct frame *f, yaml_mark_t mark)
{
    size_t n = json_object_array_length(f->merges);
    for (size_t i = 0; i < n; i++) {
        struct json_object *m = json_object_array_get_idx(f->merges, i);
        if (!json_object_is_type(m, json_type_array)) {
            if (merge_one(b, f, m, mark) < 0) {
                return -1;
            }
            continue;
        }
        size_t nsrc = json_object_array_length(m);
        for (size_t j = 0; j < nsrc; j++) {
            if (merge_one(b, f, json_object_array_get_idx(m, j), mark) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

static int on_end(struct builder *b, const yaml_event_t *ev)
{
    TANDEM_ASSERT(b->depth > 0);
    struct frame *f = &b->stack[--b->depth];
    int rc = 0;
    if (f->is_map && f->merges) {
        rc = apply_merges(b, f, ev->start_mark);
    }
    if (rc == 0 && f->anchor) {
        rc = anchor_add(b, f->anchor, f->obj, b->count - f->count_at_start, 0, ev->start_mark);
    }
    json_object_put(f->merges);
    free(f->anchor);
    free(f->key);
    struct json_object *obj = f->obj;
    memset(f, 0, sizeof(*f));
    if (rc < 0) {
        json_object_put(obj);
        return -1;
    }
    return deliver(b, obj, ev->start_mark);
}

static void builder_unwind(struct builder *b)
{
    while (b->depth > 0) {
        struct frame *f = &b->stack[--b->depth];
        json_object_put(f->obj);
        json_object_put(f->merges);
        free(f->anchor);
        free(f->key);
    }
    json_object_put(b->root);
    b->root = NULL;
    b->have_root = 0;
}

static void parser_error(struct builder *b, const yaml_parser_t *parser)
{
    if (parser->error == YAML_MEMORY_ERROR) {
        fail_oom(b, parser->problem_mark);
        return;
    }
    const char *problem = parser->problem ? parser->problem : "malformed YAML";
    yaml_mark_t mark = parser->problem_mark;
    if (parser->error == YAML_READER_ERROR) {
        /* Reader errors carry a byte offset, not a line. */
        fail_at(b, -EINVAL, parser->mark, "%s (byte offset %zu)", problem, parser->problem_offset);
    } else if (parser->context) {
        fail_at(b, -EINVAL, mark, "%s %s (line %zu column %zu)", problem, parser->context,
                parser->context_mark.line + 1, parser->context_mark.column + 1);
    } else {
        fail_at(b, -EINVAL, mark, "%s", problem);
    }
}

/*
 * Parses the stream; every non-null document is appended to docs. With single set, a second
 * non-null document is an error.
 */
static int parse_stream(const char *data, size_t len, struct json_object *docs, int single,
                        char *err, size_t errlen)
{
    if (err && errlen) {
        err[0] = '\0';
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        if (err && errlen) {
            snprintf(err, errlen, "out of memory");
        }
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(data ? data : ""),
                                 data ? len : 0);
    yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);
    struct builder *b = calloc(1, sizeof(*b));
    if (!b) {
        yaml_parser_delete(&parser);
        if (err && errlen) {
            snprintf(err, errlen, "out of memory");
        }
        return -ENOMEM;
    }
    b->err = err;
    b->errlen = errlen;
    yaml_mark_t doc_mark = {0, 0, 0};
    for (int done = 0; !done && b->rc == 0;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            parser_error(b, &parser);
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT:
            doc_mark = ev.start_mark;
            b->count = 0;
            break;
        case YAML_DOCUMENT_END_EVENT:
            anchors_clear(b);
            if (b->have_root && b->root) {
                if (single && json_object_array_length(docs) > 0) {
                    fail_at(b, -EINVAL, doc_mark,
                            "expected a single YAML document, found another one here");
                } else if (json_object_array_add(docs, b->root) != 0) {
                    fail_oom(b, ev.start_mark);
                } else {
                    b->root = NULL;
                }
            }
            json_object_put(b->root);
            b->root = NULL;
            b->have_root = 0;
            break;
        case YAML_SCALAR_EVENT:
            on_scalar(b, &ev);
            break;
        case YAML_ALIAS_EVENT:
            on_alias(b, &ev);
            break;
        case YAML_SEQUENCE_START_EVENT:
            on_start(b, &ev, 0);
            break;
        case YAML_MAPPING_START_EVENT:
            on_start(b, &ev, 1);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            on_end(b, &ev);
            break;
        case YAML_NO_EVENT:
        case YAML_STREAM_START_EVENT:
            break;
        }
        yaml_event_delete(&ev);
    }
    int rc = b->rc;
    builder_unwind(b);
    anchors_clear(b);
    free(b->anchors);
    free(b);
    yaml_parser_delete(&parser);
    return rc;
}

int yaml_parse_all(const char *data, size_t len, struct json_object **docs, char *err,
                   size_t errlen)
{
    TANDEM_ASSERT(docs != NULL);
    *docs = NULL;
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        if (err && errlen) {
            snprintf(err, errlen, "out of memory");
        }
        return -ENOMEM;
    }
    int rc = parse_stream(data, len, arr, 0, err, errlen);
    if (rc < 0) {
        json_object_put(arr);
        return rc;
    }
    *docs = arr;
    return 0;
}

int yaml_parse_one(const char *data, size_t len, struct json_object **out, char *err, size_t errlen)
{
    TANDEM_ASSERT(out != NULL);
    *out = NULL;
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        if (err && errlen) {
            snprintf(err, errlen, "out of memory");
        }
        return -ENOMEM;
    }
    int rc = parse_stream(data, len, arr, 1, err, errlen);
    if (rc == 0 && json_object_array_length(arr) == 1) {
        *out = json_object_get(json_object_array_get_idx(arr, 0));
    }
    json_object_put(arr);
    return rc;
}

struct json_object *yaml_parse(const char *data, size_t len, char *err, size_t errlen)
{
    struct json_object *o = NULL;
    yaml_parse_one(data, len, &o, err, errlen);
    return o;
}
