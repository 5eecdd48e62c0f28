/*
 * Module-internal interface of the Jinja interpreter: the syntax tree jinja_parse.c builds and
 * jinja_eval.c walks, and the render-time values and helpers the evaluator shares with the
 * filters and methods. Nothing here is part of the public API (see jinja.h).
 *
 * Ownership: every node and string of a template lives in the template's arena and is freed with
 * it; nodes hold no json-c references (literals are materialised when evaluated).
 *
 * Names: jv_* are the inline accessors of struct jv below; jinja__* are functions defined in one
 * file of the module and used from another.
 */
#ifndef TANDEM_ENGINE_TEMPLATE_JINJA_INTERNAL_H
#define TANDEM_ENGINE_TEMPLATE_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "engine/template/jinja.h"
#include "lib/arena.h"
#include "lib/buf.h"
#include "lib/common.h"

enum jnode_kind {
    /* statements */
    JN_BODY,         /* items: statements */
    JN_TEXT,         /* str/len: literal output */
    JN_OUTPUT,       /* a: expression to print */
    JN_IF,           /* a: condition, b: body, c: else body or JN_IF (elif) or NULL */
    JN_FOR,          /* a: target, b: iterable, c: body, d: else body or NULL, e: filter or NULL */
    JN_SET,          /* a: target (JN_NAME, JN_TUPLE of names, JN_ATTR of a name), b: value */
    JN_SET_BLOCK,    /* a: target name, c: body */
    JN_MACRO,        /* str: name, items: params (JN_NAME or JN_KWARG with default), c: body,
                        ival: JM_* flags (the special names the body reads) */
    JN_CALL_BLOCK,   /* a: the JN_CALL, b: the caller (a JN_MACRO named "caller") */
    JN_FILTER_BLOCK, /* items: the filters in order (JN_FILTER without operand), c: body */
    JN_WITH,         /* items: name, value, name, value..., c: body */
    JN_BLOCK,        /* str: name, ival: 1 when scoped, c: body */
    JN_BREAK,
    JN_CONTINUE,
    /* expressions */
    JN_CONST,     /* ival: 0 none, 1 true, 2 false */
    JN_INT,       /* ival */
    JN_FLOAT,     /* fval */
    JN_STR,       /* str/len */
    JN_NAME,      /* str: variable name */
    JN_LIST,      /* items */
    JN_TUPLE,     /* items */
    JN_DICT,      /* items: key, value, key, value... */
    JN_ATTR,      /* a: object, str: attribute name */
    JN_SUBSCRIPT, /* a: object, b: index or JN_SLICE */
    JN_SLICE,     /* a: start, b: stop, c: step (each may be NULL) */
    JN_CALL,      /* a: callee, items: arguments (JN_KWARG for keyword ones) */
    JN_KWARG,     /* str: name, a: value */
    JN_FILTER,    /* a: operand, str: filter name, items: arguments */
    JN_TEST,      /* a: operand, str: test name, items: arguments, ival: 1 when negated */
    JN_UNARY,     /* str: "-", "+" or "not", a: operand */
    JN_BINARY,    /* str: operator (+ - * / // % ** ~ and or), a, b */
    JN_COMPARE,   /* a: first operand, items: JN_CMP_OP nodes */
    JN_CMP_OP,    /* str: operator (== != < > <= >= in notin), a: right operand */
    JN_COND,      /* a: value when true, b: condition, c: value when false or NULL */
};

/* JN_MACRO ival: which of the special names Jinja2 binds on a call the body reads (anywhere,
 * nested macros and call blocks included, as Jinja2's find_undeclared looks). */
enum {
    JM_CALLER = 1,  /* accepts `caller` (the body of a {% call %} block) */
    JM_KWARGS = 2,  /* collects unknown keyword arguments in `kwargs` */
    JM_VARARGS = 4, /* collects extra positional arguments in `varargs` */
};

struct jnode {
    enum jnode_kind kind;
    int line, col;   /* position in the template source, 1-based */
    const char *str; /* names, operators, string literal bytes (NUL-terminated) */
    size_t len;      /* bytes of str */
    int64_t ival;    /* JN_INT value, JN_CONST kind, JN_TEST negation, JN_MACRO flags */
    double fval;     /* JN_FLOAT value */
    struct jnode *a, *b, *c, *d, *e;
    struct jnode **items; /* arena array of n_items nodes */
    size_t n_items;
};

struct jinja_template {
    struct arena *arena; /* owns every node and string */
    struct jnode *root;  /* JN_BODY */
};

/* Parses the source into t->root (allocating from t->arena). 0, or -EINVAL / -ENOMEM / -E2BIG
 * with a "line L column C: ..." message in err. */
int jinja__parse(struct jinja_template *t, const char *src, size_t len, char *err, size_t errlen);

/* ---- render-time values ------------------------------------------------------------------- */

enum jv_kind { JV_UNDEF, JV_VAL, JV_NS, JV_MACRO, JV_FUNC };

/* A value while rendering: a json-c object (one owned reference; NULL is none) or one of the
 * kinds json cannot hold. Owners release it with jv_put; a borrowed view (jv_own of a reference
 * someone else holds) must not be put. */
struct jv {
    enum jv_kind kind;
    struct json_object *j;    /* owned reference (JV_VAL: NULL is none; JV_NS: the object) */
    const struct jnode *node; /* JV_MACRO: the macro; JV_UNDEF: where it came from (or NULL) */
    const char *name;  /* JV_UNDEF: the missing name, for messages (or NULL); JV_FUNC: the global */
    struct frame *env; /* JV_MACRO: the scope it was defined in, which its body sees (a macro
                        * value never outlives that scope: containers store macros as none) */
    int why;           /* JV_UNDEF: JU_* (what an error on it says) */
};

/* Why a value is undefined, for the message of an error on it. */
enum {
    JU_MISSING = 0, /* "'name' is undefined" (no name: the operation's own message) */
    JU_PARAM,       /* a macro parameter not passed: "parameter 'name' was not provided" */
    JU_CALLER,      /* `caller` in a macro not called from a call block: "No caller defined" */
};

/* The Jinja-level type of a value, as tests and messages see it. */
enum vtype {
    VT_UNDEF,
    VT_NONE,
    VT_BOOL,
    VT_INT,
    VT_FLOAT,
    VT_STR,
    VT_LIST,
    VT_DICT,
    VT_NS,
    VT_MACRO
};

struct frame; /* a scope of variables (jinja_eval.c) */

/* The state of one render. */
struct rs {
    struct json_object *ctx; /* the render context (borrowed), or NULL */
    struct jinja_limits lim;
    uint64_t iterations; /* counted against lim.max_iterations */
    int depth;           /* nesting of macro calls, bounded by lim.max_depth */
    int loop_ctl;        /* 1 after {% break %}, 2 after {% continue %} */
    int eval_depth; /* nesting of eval() and exec_body() calls, bounded by JINJA_MAX_EVAL_DEPTH */
    struct frame *root;
    char *err; /* the caller's error buffer (may be NULL) */
    size_t errlen;
};

/* Most positional, and most keyword, arguments of one call, filter or test. */
#define JINJA_MAX_ARGS 8

/* The evaluated arguments of a call, filter or test (owned; released by the evaluator). */
struct args {
    struct jv pos[JINJA_MAX_ARGS];
    int n_pos;
    const char *kw_name[JINJA_MAX_ARGS];
    struct jv kw[JINJA_MAX_ARGS];
    int n_kw;
};

/* Undefined: name is the missing variable (or NULL), at where it came from (or NULL). */
static inline struct jv jv_undef(const char *name, const struct jnode *at)
{
    struct jv v = {.kind = JV_UNDEF, .name = name, .node = at};
    return v;
}

/* Takes ownership of j. */
static inline struct jv jv_own(struct json_object *j)
{
    struct jv v = {.kind = JV_VAL, .j = j};
    return v;
}

/* Takes a new reference to j. */
static inline struct jv jv_ref(struct json_object *j)
{
    return jv_own(j ? json_object_get(j) : NULL);
}

/* Drops v's reference; v becomes undefined. */
static inline void jv_put(struct jv *v)
{
    if (v->j) {
        json_object_put(v->j);
    }
    v->j = NULL;
    v->kind = JV_UNDEF;
}

/* Another owned reference to the same value. */
static inline struct jv jv_copy(const struct jv *v)
{
    struct jv c = *v;
    if (c.j) {
        json_object_get(c.j);
    }
    return c;
}

/* The Jinja type of v. */
static inline enum vtype jv_type(const struct jv *v)
{
    switch (v->kind) {
    case JV_UNDEF:
        return VT_UNDEF;
    case JV_NS:
        return VT_NS;
    case JV_MACRO:
    case JV_FUNC:
        return VT_MACRO;
    case JV_VAL:
        break;
    }
    if (!v->j) {
        return VT_NONE;
    }
    switch (json_object_get_type(v->j)) {
    case json_type_null:
        return VT_NONE;
    case json_type_boolean:
        return VT_BOOL;
    case json_type_int:
        return VT_INT;
    case json_type_double:
        return VT_FLOAT;
    case json_type_string:
        return VT_STR;
    case json_type_array:
        return VT_LIST;
    case json_type_object:
        return VT_DICT;
    }
    return VT_NONE;
}

/* The type's name for messages ("integer", "list", ...). */
static inline const char *jv_type_name(const struct jv *v)
{
    static const char *const names[] = {"undefined", "none", "boolean", "integer",   "float",
                                        "string",    "list", "dict",    "namespace", "callable"};
    return names[jv_type(v)];
}

/* Numbers are integers, floats and booleans (as Python's bool is an int). */
static inline bool jv_is_num(const struct jv *v)
{
    enum vtype t = jv_type(v);
    return t == VT_INT || t == VT_FLOAT || t == VT_BOOL;
}

static inline bool jv_is_int(const struct jv *v)
{
    enum vtype t = jv_type(v);
    return t == VT_INT || t == VT_BOOL;
}

/* The value of a jv_is_int / jv_is_num value; jv_str needs a string. */
static inline int64_t jv_int(const struct jv *v)
{
    return jv_type(v) == VT_BOOL ? (int64_t)json_object_get_boolean(v->j)
                                 : json_object_get_int64(v->j);
}

static inline double jv_num(const struct jv *v)
{
    return jv_type(v) == VT_FLOAT ? json_object_get_double(v->j) : (double)jv_int(v);
}

static inline const char *jv_str(const struct jv *v, size_t *len)
{
    *len = (size_t)json_object_get_string_len(v->j);
    return json_object_get_string(v->j);
}

/* Python truthiness. */
static inline bool jv_truthy(const struct jv *v)
{
    switch (jv_type(v)) {
    case VT_UNDEF:
    case VT_NONE:
        return false;
    case VT_BOOL:
        return json_object_get_boolean(v->j);
    case VT_INT:
        return json_object_get_int64(v->j) != 0;
    case VT_FLOAT:
        return json_object_get_double(v->j) != 0.0;
    case VT_STR:
        return json_object_get_string_len(v->j) > 0;
    case VT_LIST:
        return json_object_array_length(v->j) > 0;
    case VT_DICT:
        return json_object_object_length(v->j) > 0;
    case VT_NS:
    case VT_MACRO:
        return true;
    }
    return false;
}

/* A plain json value to store in a container: namespaces are copied (no cycles), the rest of
 * the non-json kinds become none. Returns a new reference (NULL is none). */
static inline struct json_object *jv_to_json(const struct jv *v)
{
    if (v->kind == JV_VAL) {
        return v->j ? json_object_get(v->j) : NULL;
    }
    if (v->kind == JV_NS) {
        struct json_object *copy = NULL;
        if (json_object_deep_copy(v->j, &copy, NULL) != 0) {
            return NULL;
        }
        return copy;
    }
    return NULL;
}

/* ---- shared helpers (jinja_eval.c) ---------------------------------------------------------- */

/* Writes "line L column C: message" (at NULL: the message alone) into the caller's buffer. */
void jinja__fail_msg(struct rs *rs, const struct jnode *at, const char *fmt, ...)
    TANDEM_PRINTF(3, 4);

/* Records the message and evaluates to rc (a macro, so the value is visible at the call). */
#define jinja__fail(rs, at, rc, ...) (jinja__fail_msg((rs), (at), __VA_ARGS__), (rc))

/* "out of memory" into the caller's buffer; returns -ENOMEM. */
int jinja__oom(struct rs *rs);

/* Tuples are json arrays with a mark: they print as (a, b). */
void jinja__mark_tuple(struct json_object *arr);
bool jinja__is_tuple(struct json_object *arr);

/* Dict keys: json objects hold string keys, so an integer key (a boolean counts as 0 or 1, as in
 * Python) is stored as JINJA_INT_KEY followed by its decimal digits: Seed-OSS indexes a table
 * {0: 0, 512: 128, ...} by numbers. jinja__dict_key gives the stored key of a key value (a
 * string's own bytes, or the encoding written into buf) or -EINVAL for another type;
 * jinja__int_key tells whether a stored key is an encoded integer (and which); jinja__key_value
 * gives the value of a stored key (a new string or integer). */
#define JINJA_INT_KEY '\x01'
int jinja__dict_key(struct rs *rs, const struct jnode *at, const struct jv *key, char buf[32],
                    const char **out);
bool jinja__int_key(const char *k, int64_t *value);
int jinja__key_value(struct rs *rs, const char *k, struct jv *out);

/* cycler() and joiner() objects: namespaces whose json (cycler: items, pos, current; joiner:
 * sep, used) their methods update; jinja__obj_kind tells them apart (0 for other objects). */
enum { JO_CYCLER = 1, JO_JOINER = 2 };
void jinja__mark_obj(struct json_object *obj, int kind);
int jinja__obj_kind(const struct jv *v);

/* groupby's (grouper, list) tuples: also have the attributes grouper and list. */
void jinja__mark_group(struct json_object *arr);

/* Markup (markupsafe) strings: what the safe and escape filters return. Python's Markup + str
 * HTML-escapes the str, which templates relying on `'text'|safe + value` see even without
 * autoescape. Mark only a string object the renderer created (never one of the context). */
void jinja__mark_safe(struct json_object *str);
bool jinja__is_safe(const struct jv *v);

/* markupsafe.escape(str(v)) appended to b: & < > " ' as entities (a Markup string as is). */
int jinja__append_escaped(struct rs *rs, const struct jnode *at, const struct jv *v, struct buf *b);

/* New values into *out: 0, -ENOMEM, or -E2BIG for a string over the output limit.
 * jinja__new_buf_str takes b's bytes and frees b either way. */
int jinja__new_str(struct rs *rs, const struct jnode *at, const char *s, size_t len,
                   struct jv *out);
int jinja__new_buf_str(struct rs *rs, const struct jnode *at, struct buf *b, struct jv *out);
int jinja__new_int(struct rs *rs, int64_t i, struct jv *out);
int jinja__new_float(struct rs *rs, double d, struct jv *out);
int jinja__new_bool(struct rs *rs, bool b, struct jv *out);

/* Appends to b (capped at the output limit): 0, -E2BIG or -ENOMEM with the message set. */
int jinja__buf_add(struct rs *rs, const struct jnode *at, struct buf *b, const char *s, size_t n);
int jinja__buf_adds(struct rs *rs, const struct jnode *at, struct buf *b, const char *s);

/* UTF-8, counted in code points as Python counts characters: the length of the character at
 * s[i] (an invalid byte is one character), the number of characters, a character's code point,
 * Python's str.isspace. */
size_t jinja__u8_len(const unsigned char *s, size_t n, size_t i);
size_t jinja__u8_count(const char *s, size_t n);
unsigned long jinja__u8_decode(const unsigned char *s, size_t l);
bool jinja__isspace(unsigned long cp);

/* Python str.strip/lstrip/rstrip of the characters of chars (NULL: whitespace): [*start, *end)
 * delimits the kept bytes of s. */
void jinja__strip_range(const char *s, size_t n, const char *chars, size_t clen, bool left,
                        bool right, size_t *start, size_t *end);

/* Python repr() of a float into out. */
void jinja__fmt_float(double d, char out[40]);

/* str(v): appended to b, or as a new string value. */
int jinja__append_str(struct rs *rs, const struct jnode *at, const struct jv *v, struct buf *b);
int jinja__to_str(struct rs *rs, const struct jnode *at, const struct jv *v, struct jv *out);

/* Python ==, and ordering (-1/0/1 into *out; -EINVAL for unorderable types). */
bool jinja__equal(const struct jv *a, const struct jv *b);
int jinja__order(struct rs *rs, const struct jnode *at, const struct jv *a, const struct jv *b,
                 int *out);

/* Argument idx (positional) or name (keyword); NULL when not given. */
const struct jv *jinja__arg(const struct args *a, int idx, const char *name);

/* The bytes (s, n) of an argument that must be a string, or the value (out) of one that must be
 * an integer; v may be NULL (not given). -EINVAL naming `what` otherwise. */
int jinja__want_str(struct rs *rs, const struct jnode *at, const struct jv *v, const char *what,
                    const char **s, size_t *n);
int jinja__want_int(struct rs *rs, const struct jnode *at, const struct jv *v, const char *what,
                    int64_t *out);

/* Counts n iterations against the limit: 0 or -E2BIG. */
int jinja__count_iterations(struct rs *rs, const struct jnode *at, uint64_t n);

/* The items of an iterable as a json array (a new reference): a list itself, dict keys, string
 * characters; undefined iterates as empty; -EINVAL for anything else. */
int jinja__iter_items(struct rs *rs, const struct jnode *at, const struct jv *v,
                      struct json_object **out);

/* `obj.name`: the member, or undefined; an error on an undefined obj. */
int jinja__get_member(struct rs *rs, const struct jnode *at, const struct jv *obj, const char *name,
                      struct jv *out);

/* `needle in hay`. */
int jinja__contains(struct rs *rs, const struct jnode *at, const struct jv *needle,
                    const struct jv *hay, bool *out);

/* Python's printf-style `fmt % args` (fn bytes of fmt): args a tuple of the arguments, a dict
 * for %(name)s, or the single argument; conversions s r a d i u o x X e E f F g G c %, with
 * flags, width and precision. */
int jinja__format_percent(struct rs *rs, const struct jnode *at, const char *fmt, size_t fn,
                          const struct jv *args, struct jv *out);

/* Binary arithmetic (op: + - * / // % ** and str % args) and comparison (== != < <= > >= in
 * notin). */
int jinja__arith(struct rs *rs, const struct jnode *at, const char *op, const struct jv *a,
                 const struct jv *b, struct jv *out);
int jinja__compare(struct rs *rs, const struct jnode *at, const char *op, const struct jv *a,
                   const struct jv *b, bool *out);

/* The entry named name in a table of n entries of size bytes each, every entry starting with its
 * `const char *name` and the table sorted by strcmp of the names (binary search); NULL when
 * there is none. */
const void *jinja__lookup(const void *table, size_t n, size_t size, const char *name);

/* ---- filters and tests (jinja_filters.c) ---------------------------------------------------- */

/* A filter: v is the operand, items its items (jinja__iter_items, borrowed) when the entry has
 * JF_ITEMS and NULL otherwise; sets *out (owned) and returns 0, or returns an error. */
typedef int jinja__filter_fn(struct rs *rs, const struct jnode *at, const struct jv *v,
                             struct json_object *items, const struct args *a, struct jv *out);

enum {
    JF_ITEMS = 1,       /* the operand must be iterable: its items are passed */
    JF_FALSY_EMPTY = 2, /* with JF_ITEMS: a falsy operand (none, 0, '') has no items, as
                         * Jinja2's `if value: for item in value` */
};

struct jinja__filter {
    const char *name;
    jinja__filter_fn *fn;
    unsigned flags; /* JF_* */
};

/* A test: *out is whether v passes; arg is the first positional argument (NULL when none). */
typedef int jinja__test_fn(struct rs *rs, const struct jnode *at, const char *name,
                           const struct jv *v, const struct jv *arg, bool *out);

struct jinja__test {
    const char *name;
    jinja__test_fn *fn;
};

/* Every filter and test, sorted by name (see jinja__lookup). */
extern const struct jinja__filter jinja__filters[];
extern const size_t jinja__n_filters;
extern const struct jinja__test jinja__tests[];
extern const size_t jinja__n_tests;

/* The table entry of a name, or NULL. */
const struct jinja__filter *jinja__filter_find(const char *name);
const struct jinja__test *jinja__test_find(const char *name);

/* `v|name(a)` into *out, and `v is name(a)` into *out; -EINVAL for an unknown name. */
int jinja__apply_filter(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                        const struct args *a, struct jv *out);
int jinja__apply_test(struct rs *rs, const struct jnode *at, const char *name, const struct jv *v,
                      const struct args *a, bool *out);

/* ---- methods and globals (jinja_methods.c) -------------------------------------------------- */

/* A method of obj (a string, or a dict or namespace); sets *out (owned) and returns 0, or an
 * error. */
typedef int jinja__method_fn(struct rs *rs, const struct jnode *at, const struct jv *obj,
                             const struct args *a, struct jv *out);

struct jinja__method {
    const char *name;
    jinja__method_fn *fn;
};

/* A global function; sets *out (owned) and returns 0, or an error (raise_exception:
 * JINJA_ERAISED). */
typedef int jinja__global_fn(struct rs *rs, const struct jnode *at, const struct args *a,
                             struct jv *out);

struct jinja__global {
    const char *name;
    jinja__global_fn *fn;
};

/* Every string, dict and list method and global, sorted by name (see jinja__lookup). */
extern const struct jinja__method jinja__str_methods[];
extern const size_t jinja__n_str_methods;
extern const struct jinja__method jinja__dict_methods[];
extern const size_t jinja__n_dict_methods;
extern const struct jinja__method jinja__list_methods[];
extern const size_t jinja__n_list_methods;
extern const struct jinja__global jinja__globals[];
extern const size_t jinja__n_globals;

/* The global named name, or NULL. */
const struct jinja__global *jinja__global_find(const char *name);

/* `obj.name(a)` into *out: a method of a string, dict or list; on undefined, the undefined
 * error. */
int jinja__call_method(struct rs *rs, const struct jnode *at, const struct jv *obj,
                       const char *name, const struct args *a, struct jv *out);

/* str(v) case-mapped: mode 'u' upper, 'l' lower, 'c' capitalize, 't' str.title, 'T' Jinja's
 * title filter. */
int jinja__case_map(struct rs *rs, const struct jnode *at, const struct jv *v, char mode,
                    struct jv *out);

/* str() of each of items (or of its attribute attr, when not NULL) joined with sep. */
int jinja__join_values(struct rs *rs, const struct jnode *at, struct json_object *items,
                       const char *sep, size_t sn, const char *attr, struct jv *out);

#endif /* TANDEM_ENGINE_TEMPLATE_JINJA_INTERNAL_H */
