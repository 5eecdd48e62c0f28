/*
 * Module-internal interface of the Jinja interpreter: the syntax tree jinja_parse.c builds and
 * jinja_eval.c walks. Nothing here is part of the public API (see jinja.h).
 *
 * Ownership: every node and string of a template lives in the template's arena and is freed with
 * it; nodes hold no json-c references (literals are materialised when evaluated).
 */
#ifndef TANDEM_ENGINE_TEMPLATE_JINJA_INTERNAL_H
#define TANDEM_ENGINE_TEMPLATE_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/template/jinja.h"
#include "lib/arena.h"

enum jnode_kind {
    /* statements */
    JN_BODY,      /* items: statements */
    JN_TEXT,      /* str/len: literal output */
    JN_OUTPUT,    /* a: expression to print */
    JN_IF,        /* a: condition, b: body, c: else body or JN_IF (elif) or NULL */
    JN_FOR,       /* a: target, b: iterable, c: body, d: else body or NULL, e: filter or NULL */
    JN_SET,       /* a: target (JN_NAME, JN_TUPLE of names, JN_ATTR of a name), b: value */
    JN_SET_BLOCK, /* a: target name, c: body */
    JN_MACRO,     /* str: name, items: params (JN_NAME or JN_KWARG with default), c: body */
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

struct jnode {
    enum jnode_kind kind;
    int line, col;   /* position in the template source, 1-based */
    const char *str; /* names, operators, string literal bytes (NUL-terminated) */
    size_t len;      /* bytes of str */
    int64_t ival;    /* JN_INT value, JN_CONST kind, JN_TEST negation */
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

#endif /* TANDEM_ENGINE_TEMPLATE_JINJA_INTERNAL_H */
