/*
 * Jinja lexer and parser: template source → syntax tree (jinja_internal.h).
 *
 * The lexer applies Jinja's whitespace rules as Hugging Face configures them: newlines are
 * normalised to "\n", one trailing newline of the template is dropped, `{%-`/`-%}` (and the same
 * for {{ }} and {# #}) strip all whitespace on that side, lstrip_blocks removes the blanks between
 * the start of a line and a block or comment tag, trim_blocks removes the first newline after
 * one, and `+` after the opening / before the closing delimiter disables those two. The parser is
 * a recursive descent over Jinja's expression grammar with its precedences.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template/jinja_internal.h"
#include "lib/common.h"
#include "lib/err.h"

enum tok_type {
    T_EOF,
    T_TEXT,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
};

struct tok {
    enum tok_type type;
    int line, col;
    const char *str; /* TEXT/NAME/STRING bytes, OP spelling (arena, NUL-terminated) */
    size_t len;
    int64_t ival;
    double fval;
};

struct parser {
    struct arena *ar;
    const char *src; /* normalised source (arena) */
    size_t len;
    size_t pos;
    size_t lc_off; /* line/column tracking: offset, line and line start reached so far */
    int lc_line;
    size_t lc_line_start;
    struct tok *toks; /* malloc'd */
    size_t n_toks, cap_toks;
    size_t cur;                              /* parser position in toks */
    int depth;                               /* parser recursion depth */
    struct jnode *macros[JINJA_MAX_NESTING]; /* macros and call blocks whose body is being parsed */
    int n_macros;
    bool storing;         /* parsing an assignment target (its names are not reads) */
    int loop_depth;       /* for bodies around the statement being parsed, within its macro */
    struct nlist *blocks; /* the {% block %}s so far (names must be unique) */
    char *err;
    size_t errlen;
};

static void pos_of(struct parser *p, size_t off, int *line, int *col)
{
    if (off < p->lc_off) { /* tokens come in order; rescan from the start otherwise */
        p->lc_off = 0;
        p->lc_line = 1;
        p->lc_line_start = 0;
    }
    for (; p->lc_off < off && p->lc_off < p->len; p->lc_off++) {
        if (p->src[p->lc_off] == '\n') {
            p->lc_line++;
            p->lc_line_start = p->lc_off + 1;
        }
    }
    *line = p->lc_line;
    *col = (int)(off - p->lc_line_start) + 1;
}

static void fail_msg_at(struct parser *p, int line, int col, const char *fmt, ...)
    TANDEM_PRINTF(4, 5);

/* Writes "line L column C: message" into the caller's error buffer. */
static void fail_msg_at(struct parser *p, int line, int col, const char *fmt, ...)
{
    if (!p->err || p->errlen == 0) {
        return;
    }
    tandem_set_err(p->err, p->errlen, "line %d column %d: ", line, col);
    size_t n = strlen(p->err);
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(p->err + n, p->errlen - n, fmt, ap);
    va_end(ap);
}

/* Records the message and evaluates to rc (a macro, so the value is visible at the call). */
#define fail_at(p, line, col, rc, ...) (fail_msg_at((p), (line), (col), __VA_ARGS__), (rc))

static int fail_off(struct parser *p, size_t off, const char *msg)
{
    int line, col;
    pos_of(p, off, &line, &col);
    return fail_at(p, line, col, -EINVAL, "%s", msg);
}

static int oom(struct parser *p)
{
    tandem_set_err(p->err, p->errlen, "out of memory");
    return -ENOMEM;
}

/* ---- lexer ---------------------------------------------------------------------------------- */

static int push_tok(struct parser *p, enum tok_type type, size_t off, const char *str, size_t len)
{
    struct tok *nt = tandem_grow(p->toks, &p->cap_toks, p->n_toks + 1, sizeof(*nt), 256);
    if (!nt) {
        return oom(p);
    }
    p->toks = nt;
    struct tok *t = &p->toks[p->n_toks++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    pos_of(p, off, &t->line, &t->col);
    t->str = str;
    t->len = len;
    return 0;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* A string literal starting at p->pos (the quote); Python escape rules. */
static int lex_string(struct parser *p)
{
    size_t start = p->pos;
    char q = p->src[p->pos++];
    size_t end = p->pos;
    while (end < p->len && p->src[end] != q) {
        end += (p->src[end] == '\\' && end + 1 < p->len) ? 2 : 1;
    }
    if (end >= p->len) {
        return fail_off(p, start, "unterminated string literal");
    }
    char *o = arena_alloc(p->ar, end - p->pos + 1);
    if (!o) {
        return oom(p);
    }
    size_t n = 0;
    for (size_t i = p->pos; i < end;) {
        char c = p->src[i];
        if (c != '\\') {
            o[n++] = c;
            i++;
            continue;
        }
        char e = p->src[i + 1];
        i += 2;
        int digits = 0;
        switch (e) {
        case 'n':
            o[n++] = '\n';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case 'v':
            o[n++] = '\v';
            break;
        case 'a':
            o[n++] = '\a';
            break;
        case '0':
            o[n++] = '\0';
            break;
        case '\\':
            o[n++] = '\\';
            break;
        case '\'':
            o[n++] = '\'';
            break;
        case '"':
            o[n++] = '"';
            break;
        case '\n':
            break;
        case 'x':
            digits = 2;
            break;
        case 'u':
            digits = 4;
            break;
        case 'U':
            digits = 8;
            break;
        default:
            o[n++] = '\\';
            o[n++] = e;
            break;
        }
        if (digits) {
            unsigned long cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + (size_t)k < end ? tandem_hex_digit(p->src[i + (size_t)k]) : -1;
                if (h < 0) {
                    return fail_off(p, i - 2, "truncated \\x, \\u or \\U escape in string");
                }
                cp = cp * 16 + (unsigned long)h;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                return fail_off(p, i - 2, "escape is not a valid Unicode scalar value");
            }
            /* a \u escape needs at most 4 output bytes for at least 6 input bytes */
            n += tandem_utf8_put(o + n, cp);
            i += (size_t)digits;
        }
    }
    o[n] = '\0';
    int rc = push_tok(p, T_STRING, start, o, n);
    p->pos = end + 1;
    return rc;
}

static int lex_number(struct parser *p)
{
    size_t start = p->pos;
    size_t i = p->pos;
    bool is_float = false;
    while (i < p->len && (is_digit(p->src[i]) || p->src[i] == '_')) {
        i++;
    }
    if (i + 1 < p->len && p->src[i] == '.' && is_digit(p->src[i + 1])) {
        is_float = true;
        i++;
        while (i < p->len && (is_digit(p->src[i]) || p->src[i] == '_')) {
            i++;
        }
    }
    if (i < p->len && (p->src[i] == 'e' || p->src[i] == 'E')) {
        size_t j = i + 1;
        if (j < p->len && (p->src[j] == '+' || p->src[j] == '-')) {
            j++;
        }
        if (j < p->len && is_digit(p->src[j])) {
            is_float = true;
            i = j;
            while (i < p->len && is_digit(p->src[i])) {
                i++;
            }
        }
    }
    char buf[64];
    size_t n = 0;
    for (size_t k = start; k < i; k++) {
        if (p->src[k] == '_') {
            continue;
        }
        if (n + 1 >= sizeof(buf)) {
            return fail_off(p, start, "numeric literal too long");
        }
        buf[n++] = p->src[k];
    }
    buf[n] = '\0';
    int rc = push_tok(p, is_float ? T_FLOAT : T_INT, start, NULL, 0);
    if (rc) {
        return rc;
    }
    struct tok *t = &p->toks[p->n_toks - 1];
    errno = 0;
    if (is_float) {
        t->fval = strtod(buf, NULL);
    } else {
        t->ival = strtoll(buf, NULL, 10);
        if (errno == ERANGE) {
            return fail_off(p, start, "integer literal out of range");
        }
    }
    p->pos = i;
    return 0;
}

static const char *const OPS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                  "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                  "]",  "{",  "}",  ",",  ".",  ":",  "|"};

/* Tokens of one {{ }} or {% %} tag, up to and including its closing delimiter. */
static int lex_tag(struct parser *p, bool block, size_t open_off, bool *strip_after,
                   bool *plus_after)
{
    int nest = 0;
    const char *close = block ? "%}" : "}}";
    for (;;) {
        while (p->pos < p->len && is_blank(p->src[p->pos])) {
            p->pos++;
        }
        if (p->pos >= p->len) {
            return fail_off(p, open_off, block ? "unterminated '{%' tag" : "unterminated '{{' tag");
        }
        const char *s = p->src + p->pos;
        size_t left = p->len - p->pos;
        if (nest == 0) {
            bool minus = left >= 3 && (s[0] == '-' || s[0] == '+') && memcmp(s + 1, close, 2) == 0;
            if (minus || (left >= 2 && memcmp(s, close, 2) == 0)) {
                *strip_after = minus && s[0] == '-';
                *plus_after = minus && s[0] == '+';
                int rc = push_tok(p, block ? T_BLOCK_END : T_VAR_END, p->pos, NULL, 0);
                p->pos += minus ? 3 : 2;
                return rc;
            }
        }
        char c = s[0];
        int rc;
        if (c == '"' || c == '\'') {
            rc = lex_string(p);
        } else if (is_digit(c)) {
            rc = lex_number(p);
        } else if (is_name_start(c)) {
            size_t e = p->pos;
            while (e < p->len && (is_name_start(p->src[e]) || is_digit(p->src[e]))) {
                e++;
            }
            char *name = arena_strndup(p->ar, s, e - p->pos);
            if (!name) {
                return oom(p);
            }
            rc = push_tok(p, T_NAME, p->pos, name, e - p->pos);
            p->pos = e;
        } else {
            const char *op = NULL;
            for (size_t k = 0; k < ARRAY_SIZE(OPS); k++) {
                size_t ol = strlen(OPS[k]);
                if (left >= ol && memcmp(s, OPS[k], ol) == 0) {
                    op = OPS[k];
                    break;
                }
            }
            if (!op) {
                return fail_off(p, p->pos, "unexpected character in tag");
            }
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') {
                nest++;
            } else if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && nest > 0) {
                nest--;
            }
            rc = push_tok(p, T_OP, p->pos, op, strlen(op));
            p->pos += strlen(op);
        }
        if (rc) {
            return rc;
        }
    }
}

/* After a closing delimiter: `-` strips all whitespace, trim_blocks one newline after blocks. */
static void after_close(struct parser *p, bool block_or_comment, bool strip, bool plus)
{
    if (strip) {
        while (p->pos < p->len && is_blank(p->src[p->pos])) {
            p->pos++;
        }
    } else if (block_or_comment && !plus && p->pos < p->len && p->src[p->pos] == '\n') {
        p->pos++;
    }
}

/* Finds the next "{{", "{%" or "{#" at or after from; p->len when none. */
static size_t next_open(const struct parser *p, size_t from)
{
    for (size_t i = from; i + 1 < p->len; i++) {
        if (p->src[i] == '{' &&
            (p->src[i + 1] == '{' || p->src[i + 1] == '%' || p->src[i + 1] == '#')) {
            return i;
        }
    }
    return p->len;
}

/* {% raw %} ... {% endraw %}: the body is text. p->pos is after the raw tag's "%}". */
static int lex_raw(struct parser *p, size_t open_off, bool strip, bool plus)
{
    after_close(p, true, strip, plus);
    for (size_t i = p->pos; i + 1 < p->len; i++) {
        if (p->src[i] != '{' || p->src[i + 1] != '%') {
            continue;
        }
        size_t j = i + 2;
        bool strip_before = j < p->len && p->src[j] == '-';
        if (j < p->len && (p->src[j] == '-' || p->src[j] == '+')) {
            j++;
        }
        while (j < p->len && is_blank(p->src[j])) {
            j++;
        }
        if (p->len - j < 6 || memcmp(p->src + j, "endraw", 6) != 0) {
            continue;
        }
        j += 6;
        while (j < p->len && is_blank(p->src[j])) {
            j++;
        }
        bool strip_after = false, plus_after = false;
        if (j < p->len && (p->src[j] == '-' || p->src[j] == '+')) {
            strip_after = p->src[j] == '-';
            plus_after = p->src[j] == '+';
            j++;
        }
        if (p->len - j < 2 || memcmp(p->src + j, "%}", 2) != 0) {
            continue;
        }
        size_t text_end = i;
        if (strip_before) {
            while (text_end > p->pos && is_blank(p->src[text_end - 1])) {
                text_end--;
            }
        }
        if (text_end > p->pos) {
            int rc = push_tok(p, T_TEXT, p->pos, p->src + p->pos, text_end - p->pos);
            if (rc) {
                return rc;
            }
        }
        p->pos = j + 2;
        after_close(p, true, strip_after, plus_after);
        return 0;
    }
    return fail_off(p, open_off, "'raw' block without 'endraw'");
}

static int lex_all(struct parser *p)
{
    while (p->pos < p->len) {
        size_t data_start = p->pos;
        size_t q = next_open(p, p->pos);
        size_t data_end = q;
        char kind = q < p->len ? p->src[q + 1] : 0;
        bool strip_before = false, plus_before = false;
        if (q < p->len && q + 2 < p->len) {
            strip_before = p->src[q + 2] == '-';
            plus_before = p->src[q + 2] == '+';
        }
        if (q < p->len) {
            if (strip_before) {
                while (data_end > data_start && is_blank(p->src[data_end - 1])) {
                    data_end--;
                }
            } else if ((kind == '%' || kind == '#') && !plus_before) {
                /* lstrip_blocks: blanks between the line start and the tag */
                size_t l = data_end;
                while (l > data_start && p->src[l - 1] != '\n' && is_blank(p->src[l - 1])) {
                    l--;
                }
                bool line_start =
                    l > data_start ? p->src[l - 1] == '\n' : (l == 0 || p->src[l - 1] == '\n');
                if (line_start) {
                    data_end = l;
                }
            }
        }
        if (data_end > data_start) {
            int rc = push_tok(p, T_TEXT, data_start, p->src + data_start, data_end - data_start);
            if (rc) {
                return rc;
            }
        }
        if (q >= p->len) {
            p->pos = p->len;
            break;
        }
        p->pos = q + 2 + ((strip_before || plus_before) ? 1 : 0);
        bool strip_after = false, plus_after = false;
        if (kind == '#') {
            size_t e = p->pos;
            while (e + 1 < p->len && !(p->src[e] == '#' && p->src[e + 1] == '}')) {
                e++;
            }
            if (e + 1 >= p->len) {
                return fail_off(p, q, "unterminated comment");
            }
            strip_after = e > p->pos && p->src[e - 1] == '-';
            plus_after = e > p->pos && p->src[e - 1] == '+';
            p->pos = e + 2;
            after_close(p, true, strip_after, plus_after);
            continue;
        }
        bool block = kind == '%';
        size_t first_tok = p->n_toks;
        int rc = push_tok(p, block ? T_BLOCK_BEGIN : T_VAR_BEGIN, q, NULL, 0);
        if (!rc) {
            rc = lex_tag(p, block, q, &strip_after, &plus_after);
        }
        if (rc) {
            return rc;
        }
        if (block && p->n_toks == first_tok + 3 && p->toks[first_tok + 1].type == T_NAME &&
            strcmp(p->toks[first_tok + 1].str, "raw") == 0) {
            p->n_toks = first_tok;
            rc = lex_raw(p, q, strip_after, plus_after);
            if (rc) {
                return rc;
            }
            continue;
        }
        after_close(p, block, strip_after, plus_after);
    }
    return push_tok(p, T_EOF, p->len, NULL, 0);
}

/* ---- parser --------------------------------------------------------------------------------- */

static struct tok *peek(struct parser *p)
{
    return &p->toks[p->cur];
}

static struct tok *peek_at(struct parser *p, size_t k)
{
    size_t i = p->cur + k;
    return i < p->n_toks ? &p->toks[i] : &p->toks[p->n_toks - 1];
}

static struct tok *advance(struct parser *p)
{
    struct tok *t = &p->toks[p->cur];
    if (t->type != T_EOF) {
        p->cur++;
    }
    return t;
}

static bool is_op(const struct tok *t, const char *op)
{
    return t->type == T_OP && strcmp(t->str, op) == 0;
}

static bool is_name(const struct tok *t, const char *name)
{
    return t->type == T_NAME && strcmp(t->str, name) == 0;
}

static const char *tok_desc(const struct tok *t)
{
    switch (t->type) {
    case T_EOF:
        return "end of template";
    case T_TEXT:
        return "template text";
    case T_VAR_BEGIN:
        return "'{{'";
    case T_VAR_END:
        return "'}}'";
    case T_BLOCK_BEGIN:
        return "'{%'";
    case T_BLOCK_END:
        return "'%}'";
    case T_NAME:
        return t->str;
    case T_STRING:
        return "string literal";
    case T_INT:
    case T_FLOAT:
        return "number";
    case T_OP:
        return t->str;
    }
    return "token";
}

static int fail_tok(struct parser *p, const struct tok *t, const char *what)
{
    /* names and operators are quoted; the descriptions of the others are words or quoted */
    bool quote = t->type == T_NAME || t->type == T_OP;
    return fail_at(p, t->line, t->col, -EINVAL, "expected %s, got %s%s%s", what, quote ? "'" : "",
                   tok_desc(t), quote ? "'" : "");
}

static int expect_op(struct parser *p, const char *op)
{
    if (!is_op(peek(p), op)) {
        char what[16];
        snprintf(what, sizeof(what), "'%s'", op);
        return fail_tok(p, peek(p), what);
    }
    advance(p);
    return 0;
}

static int expect_type(struct parser *p, enum tok_type type, const char *what)
{
    if (peek(p)->type != type) {
        return fail_tok(p, peek(p), what);
    }
    advance(p);
    return 0;
}

static struct jnode *new_node(struct parser *p, enum jnode_kind kind, const struct tok *at)
{
    struct jnode *n = arena_alloc(p->ar, sizeof(*n));
    if (!n) {
        return NULL;
    }
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* A growable node list, copied into the arena when complete. */
struct nlist {
    struct jnode **v;
    size_t n, cap;
};

static int nlist_push(struct parser *p, struct nlist *l, struct jnode *n)
{
    struct jnode **nv = tandem_grow(l->v, &l->cap, l->n + 1, sizeof(struct jnode *), 8);
    if (!nv) {
        return oom(p);
    }
    l->v = nv;
    l->v[l->n++] = n;
    return 0;
}

static int nlist_finish(struct parser *p, struct nlist *l, struct jnode *owner)
{
    owner->n_items = l->n;
    owner->items = NULL;
    if (l->n > 0) {
        owner->items = arena_alloc(p->ar, l->n * sizeof(struct jnode *));
        if (!owner->items) {
            free(l->v);
            l->v = NULL;
            return oom(p);
        }
        memcpy(owner->items, l->v, l->n * sizeof(struct jnode *));
    }
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
    return 0;
}

static int enter(struct parser *p)
{
    if (++p->depth > JINJA_MAX_NESTING) {
        const struct tok *t = peek(p);
        return fail_at(p, t->line, t->col, -E2BIG, "template nested deeper than %d",
                       JINJA_MAX_NESTING);
    }
    return 0;
}

static int parse_expr(struct parser *p, struct jnode **out);
static int parse_or(struct parser *p, struct jnode **out);
static int parse_unary(struct parser *p, struct jnode **out, bool with_filter);
static int parse_primary(struct parser *p, struct jnode **out);
static int parse_postfix(struct parser *p, struct jnode **io);

/* Call arguments after '(' up to ')': positional and name=value. */
static int parse_args(struct parser *p, struct jnode *owner)
{
    struct nlist l = {0};
    int rc = expect_op(p, "(");
    while (!rc && !is_op(peek(p), ")")) {
        if (l.n > 0) {
            rc = expect_op(p, ",");
            if (rc || is_op(peek(p), ")")) {
                break;
            }
        }
        struct jnode *arg = NULL;
        if (peek(p)->type == T_NAME && is_op(peek_at(p, 1), "=")) {
            struct tok *nt = advance(p);
            advance(p);
            arg = new_node(p, JN_KWARG, nt);
            if (!arg) {
                rc = oom(p);
                break;
            }
            arg->str = nt->str;
            arg->len = nt->len;
            rc = parse_expr(p, &arg->a);
        } else {
            rc = parse_expr(p, &arg);
        }
        if (!rc) {
            rc = nlist_push(p, &l, arg);
        }
    }
    if (!rc) {
        rc = expect_op(p, ")");
    }
    if (!rc) {
        return nlist_finish(p, &l, owner);
    }
    free(l.v);
    return rc;
}

/* A subscript after '[': an expression or a slice [a:b:c]. */
static int parse_subscript(struct parser *p, struct jnode **out)
{
    struct tok *at = peek(p);
    struct jnode *parts[3] = {NULL, NULL, NULL};
    int n_colons = 0;
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        if (!is_op(peek(p), ":") && !is_op(peek(p), "]")) {
            rc = parse_expr(p, &parts[k]);
            if (rc) {
                return rc;
            }
        }
        if (k < 2 && is_op(peek(p), ":")) {
            advance(p);
            n_colons++;
        } else {
            break;
        }
    }
    if (n_colons == 0) {
        if (!parts[0]) {
            return fail_tok(p, peek(p), "subscript");
        }
        *out = parts[0];
        return 0;
    }
    struct jnode *s = new_node(p, JN_SLICE, at);
    if (!s) {
        return oom(p);
    }
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    *out = s;
    return 0;
}

static int parse_postfix(struct parser *p, struct jnode **io)
{
    for (;;) {
        struct tok *t = peek(p);
        if (is_op(t, ".")) {
            advance(p);
            struct tok *nt = peek(p);
            struct jnode *n;
            if (nt->type == T_NAME) {
                n = new_node(p, JN_ATTR, nt);
                if (!n) {
                    return oom(p);
                }
                n->str = nt->str;
                n->len = nt->len;
            } else if (nt->type == T_INT) {
                n = new_node(p, JN_SUBSCRIPT, nt);
                struct jnode *idx = new_node(p, JN_INT, nt);
                if (!n || !idx) {
                    return oom(p);
                }
                idx->ival = nt->ival;
                n->b = idx;
            } else {
                return fail_tok(p, nt, "attribute name after '.'");
            }
            advance(p);
            n->a = *io;
            *io = n;
        } else if (is_op(t, "[")) {
            advance(p);
            struct jnode *n = new_node(p, JN_SUBSCRIPT, t);
            if (!n) {
                return oom(p);
            }
            n->a = *io;
            int rc = parse_subscript(p, &n->b);
            if (!rc) {
                rc = expect_op(p, "]");
            }
            if (rc) {
                return rc;
            }
            *io = n;
        } else if (is_op(t, "(")) {
            struct jnode *n = new_node(p, JN_CALL, t);
            if (!n) {
                return oom(p);
            }
            n->a = *io;
            int rc = parse_args(p, n);
            if (rc) {
                return rc;
            }
            *io = n;
        } else {
            return 0;
        }
    }
}

/* Filters (`| name(args)`) and tests (`is [not] name [arg]`) after a unary expression. */
static int parse_filter_test(struct parser *p, struct jnode **io)
{
    for (;;) {
        struct tok *t = peek(p);
        if (is_op(t, "|")) {
            advance(p);
            struct tok *nt = peek(p);
            if (nt->type != T_NAME) {
                return fail_tok(p, nt, "filter name after '|'");
            }
            advance(p);
            struct jnode *n = new_node(p, JN_FILTER, nt);
            if (!n) {
                return oom(p);
            }
            n->str = nt->str;
            n->len = nt->len;
            n->a = *io;
            if (is_op(peek(p), "(")) {
                int rc = parse_args(p, n);
                if (rc) {
                    return rc;
                }
            }
            *io = n;
        } else if (is_name(t, "is")) {
            advance(p);
            bool negate = false;
            if (is_name(peek(p), "not")) {
                advance(p);
                negate = true;
            }
            struct tok *nt = peek(p);
            if (nt->type != T_NAME) {
                return fail_tok(p, nt, "test name after 'is'");
            }
            advance(p);
            struct jnode *n = new_node(p, JN_TEST, nt);
            if (!n) {
                return oom(p);
            }
            n->str = nt->str;
            n->len = nt->len;
            n->ival = negate;
            n->a = *io;
            struct tok *nx = peek(p);
            if (is_op(nx, "(")) {
                int rc = parse_args(p, n);
                if (rc) {
                    return rc;
                }
            } else if ((nx->type == T_NAME || nx->type == T_STRING || nx->type == T_INT ||
                        nx->type == T_FLOAT || is_op(nx, "[") || is_op(nx, "{")) &&
                       !is_name(nx, "else") && !is_name(nx, "or") && !is_name(nx, "and") &&
                       !is_name(nx, "if") && !is_name(nx, "is") && !is_name(nx, "in") &&
                       !is_name(nx, "not")) {
                struct jnode *arg = NULL;
                int rc = parse_primary(p, &arg);
                if (!rc) {
                    rc = parse_postfix(p, &arg);
                }
                if (rc) {
                    return rc;
                }
                n->items = arena_alloc(p->ar, sizeof(struct jnode *));
                if (!n->items) {
                    return oom(p);
                }
                n->items[0] = arg;
                n->n_items = 1;
            }
            *io = n;
        } else {
            return 0;
        }
    }
}

static int parse_seq(struct parser *p, struct jnode *owner, const char *close)
{
    struct nlist l = {0};
    int rc = 0;
    bool is_dict = owner->kind == JN_DICT;
    while (!is_op(peek(p), close)) {
        if (l.n > 0) {
            rc = expect_op(p, ",");
            if (rc || is_op(peek(p), close)) {
                break;
            }
        }
        struct jnode *item = NULL;
        rc = parse_expr(p, &item);
        if (!rc) {
            rc = nlist_push(p, &l, item);
        }
        if (!rc && is_dict) {
            rc = expect_op(p, ":");
            if (!rc) {
                rc = parse_expr(p, &item);
            }
            if (!rc) {
                rc = nlist_push(p, &l, item);
            }
        }
        if (rc) {
            break;
        }
    }
    if (!rc) {
        rc = expect_op(p, close);
    }
    if (!rc) {
        return nlist_finish(p, &l, owner);
    }
    free(l.v);
    return rc;
}

/* A read of `caller`, `kwargs` or `varargs` makes every macro being parsed take it (Jinja2 looks
 * for them in the whole body, nested macros and call blocks included). */
static void note_special_name(struct parser *p, const char *name)
{
    int64_t flag = strcmp(name, "caller") == 0    ? JM_CALLER
                   : strcmp(name, "kwargs") == 0  ? JM_KWARGS
                   : strcmp(name, "varargs") == 0 ? JM_VARARGS
                                                  : 0;
    if (flag == 0 || p->storing) {
        return;
    }
    for (int i = 0; i < p->n_macros; i++) {
        p->macros[i]->ival |= flag;
    }
}

static int parse_primary(struct parser *p, struct jnode **out)
{
    struct tok *t = peek(p);
    struct jnode *n = NULL;
    int rc = enter(p);
    if (rc) {
        return rc;
    }
    switch (t->type) {
    case T_NAME:
        advance(p);
        if (strcmp(t->str, "true") == 0 || strcmp(t->str, "True") == 0 ||
            strcmp(t->str, "false") == 0 || strcmp(t->str, "False") == 0 ||
            strcmp(t->str, "none") == 0 || strcmp(t->str, "None") == 0) {
            n = new_node(p, JN_CONST, t);
            if (n) {
                n->ival = (t->str[0] == 'n' || t->str[0] == 'N')   ? 0
                          : (t->str[0] == 't' || t->str[0] == 'T') ? 1
                                                                   : 2;
            }
        } else {
            n = new_node(p, JN_NAME, t);
            if (n) {
                n->str = t->str;
                n->len = t->len;
                note_special_name(p, t->str);
            }
        }
        break;
    case T_STRING: {
        advance(p);
        n = new_node(p, JN_STR, t);
        if (!n) {
            break;
        }
        n->str = t->str;
        n->len = t->len;
        /* adjacent string literals concatenate */
        while (peek(p)->type == T_STRING) {
            struct tok *t2 = advance(p);
            char *cat = arena_alloc(p->ar, n->len + t2->len + 1);
            if (!cat) {
                return oom(p);
            }
            memcpy(cat, n->str, n->len);
            memcpy(cat + n->len, t2->str, t2->len);
            cat[n->len + t2->len] = '\0';
            n->str = cat;
            n->len += t2->len;
        }
        break;
    }
    case T_INT:
        advance(p);
        n = new_node(p, JN_INT, t);
        if (n) {
            n->ival = t->ival;
        }
        break;
    case T_FLOAT:
        advance(p);
        n = new_node(p, JN_FLOAT, t);
        if (n) {
            n->fval = t->fval;
        }
        break;
    case T_OP:
        if (is_op(t, "(")) {
            advance(p);
            if (is_op(peek(p), ")")) { /* empty tuple */
                advance(p);
                n = new_node(p, JN_TUPLE, t);
                break;
            }
            struct jnode *first = NULL;
            rc = parse_expr(p, &first);
            if (rc) {
                return rc;
            }
            if (is_op(peek(p), ",")) {
                struct nlist l = {0};
                rc = nlist_push(p, &l, first);
                while (!rc && is_op(peek(p), ",")) {
                    advance(p);
                    if (is_op(peek(p), ")")) {
                        break;
                    }
                    struct jnode *item = NULL;
                    rc = parse_expr(p, &item);
                    if (!rc) {
                        rc = nlist_push(p, &l, item);
                    }
                }
                n = rc ? NULL : new_node(p, JN_TUPLE, t);
                if (!rc && !n) {
                    rc = oom(p);
                }
                if (rc) {
                    free(l.v);
                    return rc;
                }
                rc = nlist_finish(p, &l, n);
                if (rc) {
                    return rc;
                }
            } else {
                n = first;
            }
            rc = expect_op(p, ")");
            if (rc) {
                return rc;
            }
            break;
        }
        if (is_op(t, "[") || is_op(t, "{")) {
            advance(p);
            bool list = is_op(t, "[");
            n = new_node(p, list ? JN_LIST : JN_DICT, t);
            if (!n) {
                break;
            }
            rc = parse_seq(p, n, list ? "]" : "}");
            if (rc) {
                return rc;
            }
            break;
        }
        return fail_tok(p, t, "an expression");
    default:
        return fail_tok(p, t, "an expression");
    }
    if (!n) {
        return oom(p);
    }
    p->depth--;
    *out = n;
    return 0;
}

static int parse_unary(struct parser *p, struct jnode **out, bool with_filter)
{
    struct tok *t = peek(p);
    int rc = enter(p);
    if (rc) {
        return rc;
    }
    if (is_op(t, "-") || is_op(t, "+")) {
        advance(p);
        struct jnode *n = new_node(p, JN_UNARY, t);
        if (!n) {
            return oom(p);
        }
        n->str = t->str;
        rc = parse_unary(p, &n->a, false);
        if (rc) {
            return rc;
        }
        *out = n;
    } else {
        rc = parse_primary(p, out);
        if (!rc) {
            rc = parse_postfix(p, out);
        }
        if (rc) {
            return rc;
        }
    }
    if (with_filter) {
        rc = parse_filter_test(p, out);
        if (rc) {
            return rc;
        }
    }
    p->depth--;
    return 0;
}

static int make_binary(struct parser *p, const struct tok *op, struct jnode **io,
                       struct jnode *right)
{
    struct jnode *n = new_node(p, JN_BINARY, op);
    if (!n) {
        return oom(p);
    }
    n->str = op->str;
    n->a = *io;
    n->b = right;
    *io = n;
    return 0;
}

static int parse_pow(struct parser *p, struct jnode **out)
{
    int rc = parse_unary(p, out, true);
    while (!rc && is_op(peek(p), "**")) {
        struct tok *op = advance(p);
        struct jnode *r = NULL;
        rc = parse_unary(p, &r, true);
        if (!rc) {
            rc = make_binary(p, op, out, r);
        }
    }
    return rc;
}

static int parse_mul(struct parser *p, struct jnode **out)
{
    int rc = parse_pow(p, out);
    while (!rc && (is_op(peek(p), "*") || is_op(peek(p), "/") || is_op(peek(p), "//") ||
                   is_op(peek(p), "%"))) {
        struct tok *op = advance(p);
        struct jnode *r = NULL;
        rc = parse_pow(p, &r);
        if (!rc) {
            rc = make_binary(p, op, out, r);
        }
    }
    return rc;
}

static int parse_add(struct parser *p, struct jnode **out)
{
    int rc = parse_mul(p, out);
    while (!rc && (is_op(peek(p), "+") || is_op(peek(p), "-"))) {
        struct tok *op = advance(p);
        struct jnode *r = NULL;
        rc = parse_mul(p, &r);
        if (!rc) {
            rc = make_binary(p, op, out, r);
        }
    }
    return rc;
}

static int parse_concat(struct parser *p, struct jnode **out)
{
    int rc = parse_add(p, out);
    while (!rc && is_op(peek(p), "~")) {
        struct tok *op = advance(p);
        struct jnode *r = NULL;
        rc = parse_add(p, &r);
        if (!rc) {
            rc = make_binary(p, op, out, r);
        }
    }
    return rc;
}

static int parse_compare(struct parser *p, struct jnode **out)
{
    struct jnode *first = NULL;
    int rc = parse_concat(p, &first);
    if (rc) {
        return rc;
    }
    struct nlist l = {0};
    for (;;) {
        struct tok *t = peek(p);
        const char *op = NULL;
        if (t->type == T_OP &&
            (strcmp(t->str, "==") == 0 || strcmp(t->str, "!=") == 0 || strcmp(t->str, "<") == 0 ||
             strcmp(t->str, ">") == 0 || strcmp(t->str, "<=") == 0 || strcmp(t->str, ">=") == 0)) {
            op = t->str;
            advance(p);
        } else if (is_name(t, "in")) {
            op = "in";
            advance(p);
        } else if (is_name(t, "not") && is_name(peek_at(p, 1), "in")) {
            op = "notin";
            advance(p);
            advance(p);
        } else {
            break;
        }
        struct jnode *n = new_node(p, JN_CMP_OP, t);
        if (!n) {
            rc = oom(p);
            break;
        }
        n->str = op;
        rc = parse_concat(p, &n->a);
        if (!rc) {
            rc = nlist_push(p, &l, n);
        }
        if (rc) {
            break;
        }
    }
    if (rc) {
        free(l.v);
        return rc;
    }
    if (l.n == 0) {
        *out = first;
        return 0;
    }
    struct tok at = {.line = first->line, .col = first->col};
    struct jnode *c = new_node(p, JN_COMPARE, &at);
    if (!c) {
        free(l.v);
        return oom(p);
    }
    c->a = first;
    rc = nlist_finish(p, &l, c);
    *out = c;
    return rc;
}

static int parse_not(struct parser *p, struct jnode **out)
{
    struct tok *t = peek(p);
    if (is_name(t, "not")) {
        advance(p);
        int rc = enter(p);
        if (rc) {
            return rc;
        }
        struct jnode *n = new_node(p, JN_UNARY, t);
        if (!n) {
            return oom(p);
        }
        n->str = "not";
        rc = parse_not(p, &n->a);
        p->depth--;
        *out = n;
        return rc;
    }
    return parse_compare(p, out);
}

static int parse_and(struct parser *p, struct jnode **out)
{
    int rc = parse_not(p, out);
    while (!rc && is_name(peek(p), "and")) {
        struct tok *op = advance(p);
        struct jnode *r = NULL;
        rc = parse_not(p, &r);
        if (!rc) {
            rc = make_binary(p, op, out, r);
        }
    }
    return rc;
}

static int parse_or(struct parser *p, struct jnode **out)
{
    int rc = parse_and(p, out);
    while (!rc && is_name(peek(p), "or")) {
        struct tok *op = advance(p);
        struct jnode *r = NULL;
        rc = parse_and(p, &r);
        if (!rc) {
            rc = make_binary(p, op, out, r);
        }
    }
    return rc;
}

/* expr: or ['if' or ['else' expr]] */
static int parse_expr(struct parser *p, struct jnode **out)
{
    int rc = enter(p);
    if (rc) {
        return rc;
    }
    rc = parse_or(p, out);
    while (!rc && is_name(peek(p), "if")) {
        struct tok *t = advance(p);
        struct jnode *n = new_node(p, JN_COND, t);
        if (!n) {
            return oom(p);
        }
        n->a = *out;
        rc = parse_or(p, &n->b);
        if (!rc && is_name(peek(p), "else")) {
            advance(p);
            rc = parse_expr(p, &n->c);
        }
        *out = n;
    }
    p->depth--;
    return rc;
}

/* An expression or an unparenthesised tuple `a, b` (set values, for iterables). */
static int parse_tuple_inner(struct parser *p, struct jnode **out, bool names_only)
{
    struct tok *at = peek(p);
    struct jnode *first = NULL;
    int rc;
    if (names_only) {
        rc = parse_primary(p, &first);
        if (!rc && first->kind != JN_NAME) {
            return fail_at(p, first->line, first->col, -EINVAL, "expected a variable name");
        }
        if (!rc && is_op(peek(p), ".")) { /* ns.attr target */
            advance(p);
            struct tok *nt = peek(p);
            if (nt->type != T_NAME) {
                return fail_tok(p, nt, "attribute name after '.'");
            }
            advance(p);
            struct jnode *n = new_node(p, JN_ATTR, nt);
            if (!n) {
                return oom(p);
            }
            n->a = first;
            n->str = nt->str;
            n->len = nt->len;
            first = n;
        }
    } else {
        rc = parse_expr(p, &first);
    }
    if (rc) {
        return rc;
    }
    if (!is_op(peek(p), ",")) {
        *out = first;
        return 0;
    }
    struct nlist l = {0};
    rc = nlist_push(p, &l, first);
    while (!rc && is_op(peek(p), ",")) {
        advance(p);
        struct jnode *item = NULL;
        if (names_only) {
            rc = parse_primary(p, &item);
            if (!rc && item->kind != JN_NAME) {
                rc = fail_at(p, item->line, item->col, -EINVAL, "expected a variable name");
            }
        } else {
            if (peek(p)->type == T_BLOCK_END) {
                break;
            }
            rc = parse_expr(p, &item);
        }
        if (!rc) {
            rc = nlist_push(p, &l, item);
        }
    }
    struct jnode *tn = rc ? NULL : new_node(p, JN_TUPLE, at);
    if (!rc && !tn) {
        rc = oom(p);
    }
    if (rc) {
        free(l.v);
        return rc;
    }
    *out = tn;
    return nlist_finish(p, &l, tn);
}

/* parse_tuple_inner; names_only parses an assignment target (names, a tuple of names, or
 * ns.attr), whose names are stores, not reads. */
static int parse_tuple_expr(struct parser *p, struct jnode **out, bool names_only)
{
    bool was_storing = p->storing;
    p->storing = names_only;
    int rc = parse_tuple_inner(p, out, names_only);
    p->storing = was_storing;
    return rc;
}

static int parse_body(struct parser *p, struct jnode **out, const char *const *ends, size_t n_ends);

static int expect_end(struct parser *p)
{
    return expect_type(p, T_BLOCK_END, "'%}'");
}

/* Is the next tag `{% name %}` with name in ends? */
static bool at_end_tag(struct parser *p, const char *const *ends, size_t n_ends)
{
    if (peek(p)->type != T_BLOCK_BEGIN || peek_at(p, 1)->type != T_NAME) {
        return false;
    }
    for (size_t i = 0; i < n_ends; i++) {
        if (strcmp(peek_at(p, 1)->str, ends[i]) == 0) {
            return true;
        }
    }
    return false;
}

static int parse_if(struct parser *p, const struct tok *at, struct jnode **out)
{
    static const char *const ends[] = {"elif", "else", "endif"};
    struct jnode *n = new_node(p, JN_IF, at);
    if (!n) {
        return oom(p);
    }
    int rc = parse_expr(p, &n->a);
    if (!rc) {
        rc = expect_end(p);
    }
    if (!rc) {
        rc = parse_body(p, &n->b, ends, ARRAY_SIZE(ends));
    }
    if (rc) {
        return rc;
    }
    *out = n;
    advance(p); /* {% */
    struct tok *kw = advance(p);
    if (strcmp(kw->str, "elif") == 0) {
        return parse_if(p, kw, &n->c);
    }
    if (strcmp(kw->str, "else") == 0) {
        static const char *const end_only[] = {"endif"};
        rc = expect_end(p);
        if (!rc) {
            rc = parse_body(p, &n->c, end_only, 1);
        }
        if (rc) {
            return rc;
        }
        advance(p);
        advance(p);
    }
    return expect_end(p);
}

static int parse_for(struct parser *p, const struct tok *at, struct jnode **out)
{
    static const char *const ends[] = {"else", "endfor"};
    struct jnode *n = new_node(p, JN_FOR, at);
    if (!n) {
        return oom(p);
    }
    int rc = parse_tuple_expr(p, &n->a, true);
    if (!rc && n->a->kind == JN_ATTR) {
        rc = fail_at(p, n->a->line, n->a->col, -EINVAL, "a loop variable cannot be an attribute");
    }
    if (!rc && !is_name(peek(p), "in")) {
        rc = fail_tok(p, peek(p), "'in'");
    }
    if (!rc) {
        advance(p);
        /* the iterable: an expression without a top-level conditional (its 'if' filters) */
        rc = parse_or(p, &n->b);
    }
    if (!rc && is_name(peek(p), "if")) {
        advance(p);
        rc = parse_expr(p, &n->e);
    }
    if (!rc && is_name(peek(p), "recursive")) {
        rc = fail_tok(p, peek(p), "'%}' (recursive loops are not supported)");
    }
    if (!rc) {
        rc = expect_end(p);
    }
    if (!rc) {
        p->loop_depth++;
        rc = parse_body(p, &n->c, ends, ARRAY_SIZE(ends));
        p->loop_depth--;
    }
    if (rc) {
        return rc;
    }
    *out = n;
    advance(p);
    struct tok *kw = advance(p);
    if (strcmp(kw->str, "else") == 0) {
        static const char *const end_only[] = {"endfor"};
        rc = expect_end(p);
        if (!rc) {
            rc = parse_body(p, &n->d, end_only, 1);
        }
        if (rc) {
            return rc;
        }
        advance(p);
        advance(p);
    }
    return expect_end(p);
}

static int parse_set(struct parser *p, const struct tok *at, struct jnode **out)
{
    struct jnode *target = NULL;
    int rc = parse_tuple_expr(p, &target, true);
    if (rc || !target) {
        return rc ? rc : fail_tok(p, peek(p), "a variable name");
    }
    if (peek(p)->type == T_BLOCK_END) { /* {% set x %}...{% endset %} */
        static const char *const ends[] = {"endset"};
        if (target->kind != JN_NAME) {
            return fail_at(p, target->line, target->col, -EINVAL,
                           "a set block needs a single variable name");
        }
        struct jnode *n = new_node(p, JN_SET_BLOCK, at);
        if (!n) {
            return oom(p);
        }
        n->a = target;
        advance(p);
        rc = parse_body(p, &n->c, ends, 1);
        if (rc) {
            return rc;
        }
        advance(p);
        advance(p);
        *out = n;
        return expect_end(p);
    }
    struct jnode *n = new_node(p, JN_SET, at);
    if (!n) {
        return oom(p);
    }
    n->a = target;
    rc = expect_op(p, "=");
    if (!rc) {
        rc = parse_tuple_expr(p, &n->b, false);
    }
    if (!rc) {
        rc = expect_end(p);
    }
    *out = n;
    return rc;
}

/* The parameter list `(a, b=default, ...)` of a macro or call block into n->items. */
static int parse_params(struct parser *p, struct jnode *n)
{
    int rc = parse_args(p, n);
    for (size_t i = 0; !rc && i < n->n_items; i++) {
        const struct jnode *param = n->items[i];
        if (param->kind != JN_NAME && param->kind != JN_KWARG) {
            return fail_at(p, param->line, param->col, -EINVAL,
                           "macro parameters must be names or name=default");
        }
        for (size_t k = 0; k < i; k++) {
            if (strcmp(n->items[k]->str, param->str) == 0) {
                return fail_at(p, param->line, param->col, -EINVAL, "duplicate parameter '%s'",
                               param->str);
            }
        }
    }
    return rc;
}

/* The body of macro n up to {% end %} (consumed with its closing '%}' unless a name may follow),
 * with n on the stack of macros whose special names are being noted. */
static int parse_macro_body(struct parser *p, struct jnode *n, const char *end)
{
    const char *const ends[] = {end};
    if (p->n_macros >= JINJA_MAX_NESTING) {
        return fail_at(p, n->line, n->col, -E2BIG, "template nested deeper than %d",
                       JINJA_MAX_NESTING);
    }
    p->macros[p->n_macros++] = n;
    int loop_depth = p->loop_depth;
    p->loop_depth = 0; /* a loop around the definition is not one around the body */
    int rc = parse_body(p, &n->c, ends, 1);
    p->loop_depth = loop_depth;
    p->n_macros--;
    for (size_t i = 0; !rc && (n->ival & JM_CALLER) && i < n->n_items; i++) {
        const struct jnode *param = n->items[i];
        if (param->kind == JN_NAME && strcmp(param->str, "caller") == 0) {
            rc = fail_at(p, param->line, param->col, -EINVAL,
                         "the special 'caller' parameter must be omitted or given a default");
        }
    }
    if (!rc) {
        advance(p); /* {% */
        advance(p); /* end */
    }
    return rc;
}

static int parse_macro(struct parser *p, const struct tok *at, struct jnode **out)
{
    struct tok *nt = peek(p);
    if (nt->type != T_NAME) {
        return fail_tok(p, nt, "macro name");
    }
    advance(p);
    struct jnode *n = new_node(p, JN_MACRO, at);
    if (!n) {
        return oom(p);
    }
    n->str = nt->str;
    n->len = nt->len;
    int rc = parse_params(p, n);
    if (!rc) {
        rc = expect_end(p);
    }
    if (!rc) {
        rc = parse_macro_body(p, n, "endmacro");
    }
    if (rc) {
        return rc;
    }
    if (peek(p)->type == T_NAME && strcmp(peek(p)->str, n->str) == 0) {
        advance(p);
    }
    *out = n;
    return expect_end(p);
}

/* {% call(params) macro(args) %}body{% endcall %}: the body becomes the macro `caller`. */
static int parse_call_block(struct parser *p, const struct tok *at, struct jnode **out)
{
    struct jnode *n = new_node(p, JN_CALL_BLOCK, at);
    struct jnode *caller = new_node(p, JN_MACRO, at);
    if (!n || !caller) {
        return oom(p);
    }
    caller->str = "caller";
    caller->len = strlen(caller->str);
    n->b = caller;
    int rc = 0;
    if (is_op(peek(p), "(")) {
        rc = parse_params(p, caller);
    }
    if (!rc) {
        struct tok *ct = peek(p);
        rc = parse_expr(p, &n->a);
        if (!rc && n->a->kind != JN_CALL) {
            rc = fail_at(p, ct->line, ct->col, -EINVAL, "expected a macro call after 'call'");
        }
    }
    if (!rc) {
        rc = expect_end(p);
    }
    if (!rc) {
        rc = parse_macro_body(p, caller, "endcall");
    }
    if (!rc) {
        rc = expect_end(p);
    }
    *out = n;
    return rc;
}

/* {% filter name(args)|name2 ... %}body{% endfilter %} */
static int parse_filter_block(struct parser *p, const struct tok *at, struct jnode **out)
{
    static const char *const ends[] = {"endfilter"};
    struct jnode *n = new_node(p, JN_FILTER_BLOCK, at);
    if (!n) {
        return oom(p);
    }
    struct nlist l = {0};
    int rc = 0;
    do {
        if (l.n > 0) {
            advance(p); /* | */
        }
        struct tok *nt = peek(p);
        if (nt->type != T_NAME) {
            rc = fail_tok(p, nt, "filter name");
            break;
        }
        advance(p);
        struct jnode *f = new_node(p, JN_FILTER, nt);
        if (!f) {
            rc = oom(p);
            break;
        }
        f->str = nt->str;
        f->len = nt->len;
        if (is_op(peek(p), "(")) {
            rc = parse_args(p, f);
        }
        if (!rc) {
            rc = nlist_push(p, &l, f);
        }
    } while (!rc && is_op(peek(p), "|"));
    if (rc) {
        free(l.v);
        return rc;
    }
    rc = nlist_finish(p, &l, n);
    if (!rc) {
        rc = expect_end(p);
    }
    if (!rc) {
        rc = parse_body(p, &n->c, ends, 1);
    }
    if (rc) {
        return rc;
    }
    advance(p);
    advance(p);
    *out = n;
    return expect_end(p);
}

/* {% with a = x, b = y %}body{% endwith %}: the values are evaluated outside, the names bound
 * in a scope of the body's own. */
static int parse_with(struct parser *p, const struct tok *at, struct jnode **out)
{
    static const char *const ends[] = {"endwith"};
    struct jnode *n = new_node(p, JN_WITH, at);
    if (!n) {
        return oom(p);
    }
    struct nlist l = {0};
    int rc = 0;
    while (!rc && peek(p)->type != T_BLOCK_END) {
        if (l.n > 0) {
            rc = expect_op(p, ",");
            if (rc) {
                break;
            }
        }
        struct tok *nt = peek(p);
        if (nt->type != T_NAME) {
            rc = fail_tok(p, nt, "a variable name");
            break;
        }
        advance(p);
        struct jnode *name = new_node(p, JN_NAME, nt);
        struct jnode *value = NULL;
        if (!name) {
            rc = oom(p);
            break;
        }
        name->str = nt->str;
        name->len = nt->len;
        rc = expect_op(p, "=");
        if (!rc) {
            rc = parse_expr(p, &value);
        }
        if (!rc) {
            rc = nlist_push(p, &l, name);
        }
        if (!rc) {
            rc = nlist_push(p, &l, value);
        }
    }
    if (rc) {
        free(l.v);
        return rc;
    }
    rc = nlist_finish(p, &l, n);
    if (!rc) {
        rc = expect_end(p);
    }
    if (!rc) {
        rc = parse_body(p, &n->c, ends, 1);
    }
    if (rc) {
        return rc;
    }
    advance(p);
    advance(p);
    *out = n;
    return expect_end(p);
}

/* {% block name [scoped] [required] %}body{% endblock [name] %}: with no template inheritance,
 * a block renders where it stands. */
static int parse_block(struct parser *p, const struct tok *at, struct jnode **out)
{
    static const char *const ends[] = {"endblock"};
    struct tok *nt = peek(p);
    if (nt->type != T_NAME) {
        return fail_tok(p, nt, "block name");
    }
    advance(p);
    for (size_t i = 0; i < p->blocks->n; i++) {
        if (strcmp(p->blocks->v[i]->str, nt->str) == 0) {
            return fail_at(p, nt->line, nt->col, -EINVAL, "block '%s' defined twice", nt->str);
        }
    }
    struct jnode *n = new_node(p, JN_BLOCK, at);
    if (!n) {
        return oom(p);
    }
    n->str = nt->str;
    n->len = nt->len;
    int rc = nlist_push(p, p->blocks, n);
    for (;;) {
        if (!rc && is_name(peek(p), "scoped")) {
            advance(p);
            n->ival = 1;
        } else if (!rc && is_name(peek(p), "required")) {
            advance(p);
        } else {
            break;
        }
    }
    if (!rc) {
        rc = expect_end(p);
    }
    if (!rc) {
        int loop_depth = p->loop_depth;
        p->loop_depth = 0; /* a block body is a function of its own in Jinja2 */
        rc = parse_body(p, &n->c, ends, 1);
        p->loop_depth = loop_depth;
    }
    if (rc) {
        return rc;
    }
    advance(p);
    advance(p);
    if (peek(p)->type == T_NAME && strcmp(peek(p)->str, n->str) == 0) {
        advance(p);
    }
    *out = n;
    return expect_end(p);
}

static int parse_statement(struct parser *p, struct jnode **out)
{
    struct tok *open = advance(p); /* {% */
    struct tok *kw = peek(p);
    if (kw->type != T_NAME) {
        return fail_tok(p, kw, "a statement name");
    }
    advance(p);
    const char *k = kw->str;
    if (strcmp(k, "if") == 0) {
        return parse_if(p, kw, out);
    }
    if (strcmp(k, "for") == 0) {
        return parse_for(p, kw, out);
    }
    if (strcmp(k, "set") == 0) {
        return parse_set(p, kw, out);
    }
    if (strcmp(k, "macro") == 0) {
        return parse_macro(p, kw, out);
    }
    if (strcmp(k, "call") == 0) {
        return parse_call_block(p, kw, out);
    }
    if (strcmp(k, "filter") == 0) {
        return parse_filter_block(p, kw, out);
    }
    if (strcmp(k, "with") == 0) {
        return parse_with(p, kw, out);
    }
    if (strcmp(k, "block") == 0) {
        return parse_block(p, kw, out);
    }
    if (strcmp(k, "break") == 0 || strcmp(k, "continue") == 0) {
        if (p->loop_depth == 0) {
            return fail_at(p, kw->line, kw->col, -EINVAL, "'%s' outside a loop", k);
        }
        *out = new_node(p, k[0] == 'b' ? JN_BREAK : JN_CONTINUE, kw);
        if (!*out) {
            return oom(p);
        }
        return expect_end(p);
    }
    if (strcmp(k, "generation") == 0) {
        /* HF's assistant-mask marker, a call block in transformers: renders its body in a scope
         * of its own, where a loop around it is out of reach */
        static const char *const ends[] = {"endgeneration"};
        struct jnode *n = new_node(p, JN_WITH, kw);
        int rc = n ? expect_end(p) : oom(p);
        if (!rc) {
            int loop_depth = p->loop_depth;
            p->loop_depth = 0;
            rc = parse_body(p, &n->c, ends, 1);
            p->loop_depth = loop_depth;
        }
        if (rc) {
            return rc;
        }
        *out = n;
        advance(p);
        advance(p);
        return expect_end(p);
    }
    (void)open;
    return fail_at(p, kw->line, kw->col, -EINVAL, "unknown or misplaced statement '%s'", k);
}

/* Statements until EOF (ends == NULL) or a {% end %} tag of ends (left unconsumed). */
static int parse_body(struct parser *p, struct jnode **out, const char *const *ends, size_t n_ends)
{
    struct tok *at = peek(p);
    struct jnode *body = new_node(p, JN_BODY, at);
    if (!body) {
        return oom(p);
    }
    int rc = enter(p);
    if (rc) {
        return rc;
    }
    struct nlist l = {0};
    for (;;) {
        struct tok *t = peek(p);
        struct jnode *st = NULL;
        if (t->type == T_EOF) {
            if (ends) {
                rc = fail_at(p, at->line, at->col, -EINVAL,
                             "block not closed: expected '{%% %s %%}' before the end",
                             ends[n_ends - 1]);
            }
            break;
        }
        if (ends && at_end_tag(p, ends, n_ends)) {
            break;
        }
        if (t->type == T_TEXT) {
            advance(p);
            st = new_node(p, JN_TEXT, t);
            if (!st) {
                rc = oom(p);
                break;
            }
            st->str = t->str;
            st->len = t->len;
        } else if (t->type == T_VAR_BEGIN) {
            advance(p);
            st = new_node(p, JN_OUTPUT, t);
            if (!st) {
                rc = oom(p);
                break;
            }
            rc = parse_tuple_expr(p, &st->a, false);
            if (!rc) {
                rc = expect_type(p, T_VAR_END, "'}}'");
            }
        } else if (t->type == T_BLOCK_BEGIN) {
            rc = parse_statement(p, &st);
        } else {
            rc = fail_tok(p, t, "template text or a tag");
        }
        if (!rc) {
            rc = nlist_push(p, &l, st);
        }
        if (rc) {
            break;
        }
    }
    if (rc) {
        free(l.v);
        return rc;
    }
    p->depth--;
    *out = body;
    return nlist_finish(p, &l, body);
}

int jinja__parse(struct jinja_template *t, const char *src, size_t len, char *err, size_t errlen)
{
    struct parser p = {.ar = t->arena, .lc_line = 1, .err = err, .errlen = errlen};
    /* normalise newlines, drop one trailing newline (keep_trailing_newline=False) */
    char *norm = arena_alloc(t->arena, len + 1);
    if (!norm) {
        return oom(&p);
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\0') {
            p.src = norm;
            p.len = n;
            return fail_off(&p, n, "NUL byte in template");
        }
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') {
                i++;
            }
        } else {
            norm[n++] = src[i];
        }
    }
    if (n > 0 && norm[n - 1] == '\n') {
        n--;
    }
    norm[n] = '\0';
    p.src = norm;
    p.len = n;
    struct nlist blocks = {0};
    p.blocks = &blocks;
    int rc = lex_all(&p);
    if (!rc) {
        rc = parse_body(&p, &t->root, NULL, 0);
    }
    free(blocks.v);
    free(p.toks);
    return rc;
}
