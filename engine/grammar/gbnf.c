/*
 * GBNF → byte-level automaton (grammar_compile; the notation is described in grammar.h).
 *
 * The parser reads rules into a builder: a list of rules, each a list of alternatives, each a
 * list of elements. Groups and postfix operators become anonymous rules, as llama.cpp does:
 *   x*      R ::= x R | ""          x+      x R, with R as for x*
 *   x?      R ::= x | ""            x{m,n}  x ... x (m times) then (x (x ...)?)? (n - m deep)
 * A right-recursive tail like R is cheap for the matcher: a call whose continuation is the end of
 * the caller's alternative pushes no return node (grammar.c), so long repetitions keep stacks
 * shallow.
 *
 * Code-point classes are lowered to UTF-8: the class's code-point ranges (complemented for [^..],
 * surrogates excluded) are split at encoding-length and continuation-byte boundaries until each
 * piece is one sequence of byte ranges (the construction RE2 and Rust's utf8-ranges use). ASCII
 * pieces fold into one byte set; each longer piece becomes an alternative of an anonymous rule.
 *
 * After parsing: every referenced rule must be defined, and no rule may reach itself without
 * reading a byte (left recursion, or a repetition of something that can match nothing), which
 * would make the matcher's stack set infinite.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_internal.h"
#include "lib/common.h"
#include "lib/err.h"

#define GBNF_MAX_DEPTH  256    /* nesting of parentheses */
#define GBNF_MAX_REPEAT 100000 /* largest count in {m,n} */
#define GBNF_MAX_RULES  (1 << 20)

struct balt {
    struct gel *e;
    uint32_t n, cap;
};

struct brule {
    const char *name; /* into the source, or NULL for anonymous rules */
    uint32_t name_len;
    bool defined;
    const char *at; /* where it was first referenced or defined */
    struct balt *alts;
    uint32_t n_alts, cap_alts;
};

struct builder {
    const char *src, *p, *end;
    struct brule *rules;
    uint32_t n_rules, cap_rules;
    uint64_t (*sets)[4];
    uint32_t n_sets, cap_sets;
    uint32_t n_elems; /* total elements, for the size cap */
    uint32_t *names;  /* open addressing over named rules: rule index + 1, 0 = empty */
    uint32_t cap_names, n_names;
    int depth;
    char *err;
    size_t errlen;
};

/* ---- errors and positions ---- */

static int line_of(const struct builder *b, const char *at)
{
    int line = 1;
    for (const char *q = b->src; q < at && q < b->end; q++) {
        line += *q == '\n';
    }
    return line;
}

static int TANDEM_PRINTF(3, 4) fail_at(struct builder *b, const char *at, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int col = 1;
    for (const char *q = at; q > b->src && q[-1] != '\n'; q--) {
        col++;
    }
    tandem_set_err(b->err, b->errlen, "grammar: line %d column %d: %s", line_of(b, at), col, msg);
    return -EINVAL;
}

/* ---- builder storage ---- */

static int grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap) {
        return 0;
    }
    uint32_t c = *cap ? *cap : 8;
    while (c < need) {
        if (c > UINT32_MAX / 2) {
            return -ENOMEM;
        }
        c *= 2;
    }
    void *q = realloc(*p, (size_t)c * size);
    if (!q) {
        return -ENOMEM;
    }
    *p = q;
    *cap = c;
    return 0;
}

static int new_rule(struct builder *b, const char *name, uint32_t name_len, uint32_t *out)
{
    if (b->n_rules >= GBNF_MAX_RULES) {
        return tandem_fail(b->err, b->errlen, -E2BIG, "grammar: more than %d rules after expansion",
                           GBNF_MAX_RULES);
    }
    if (grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules) != 0) {
        return -ENOMEM;
    }
    struct brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->name_len = name_len;
    *out = b->n_rules++;
    return 0;
}

static uint32_t name_hash(const char *name, uint32_t len)
{
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < len; i++) {
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    }
    return h;
}

static int names_grow(struct builder *b)
{
    uint32_t cap = b->cap_names ? b->cap_names * 2 : 64;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) {
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < b->cap_names; i++) {
        if (b->names[i]) {
            const struct brule *r = &b->rules[b->names[i] - 1];
            uint32_t j = name_hash(r->name, r->name_len) & (cap - 1);
            while (t[j]) {
                j = (j + 1) & (cap - 1);
            }
            t[j] = b->names[i];
        }
    }
    free(b->names);
    b->names = t;
    b->cap_names = cap;
    return 0;
}

static int find_or_add_rule(struct builder *b, const char *name, uint32_t len, uint32_t *out)
{
    if (2 * (b->n_names + 1) > b->cap_names && names_grow(b) != 0) {
        return -ENOMEM;
    }
    uint32_t j = name_hash(name, len) & (b->cap_names - 1);
    for (; b->names[j]; j = (j + 1) & (b->cap_names - 1)) {
        const struct brule *r = &b->rules[b->names[j] - 1];
        if (r->name_len == len && memcmp(r->name, name, len) == 0) {
            *out = b->names[j] - 1;
            return 0;
        }
    }
    int rc = new_rule(b, name, len, out);
    if (rc == 0) {
        b->rules[*out].at = name;
        b->names[j] = *out + 1;
        b->n_names++;
    }
    return rc;
}

static int add_alt(struct builder *b, uint32_t rule, uint32_t *out)
{
    struct brule *r = &b->rules[rule];
    if (grow((void **)&r->alts, &r->cap_alts, r->n_alts + 1, sizeof *r->alts) != 0) {
        return -ENOMEM;
    }
    memset(&r->alts[r->n_alts], 0, sizeof r->alts[0]);
    *out = r->n_alts++;
    return 0;
}

static int push_el(struct builder *b, struct balt *a, uint32_t kind, uint32_t arg)
{
    if (b->n_elems >= GRAMMAR_MAX_ELEMENTS) {
        return tandem_fail(b->err, b->errlen, -E2BIG,
                           "grammar: more than %d elements after expanding repetitions",
                           GRAMMAR_MAX_ELEMENTS);
    }
    if (grow((void **)&a->e, &a->cap, a->n + 1, sizeof *a->e) != 0) {
        return -ENOMEM;
    }
    a->e[a->n].kind = kind;
    a->e[a->n].arg = arg;
    a->n++;
    b->n_elems++;
    return 0;
}

/* Index of byte set s, added when new (sets are few: deduplicated by a linear scan). */
static int set_index(struct builder *b, const uint64_t s[4], uint32_t *out)
{
    for (uint32_t i = 0; i < b->n_sets; i++) {
        if (memcmp(b->sets[i], s, sizeof b->sets[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    if (grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets) != 0) {
        return -ENOMEM;
    }
    memcpy(b->sets[b->n_sets], s, sizeof b->sets[0]);
    *out = b->n_sets++;
    return 0;
}

static int push_byte_range(struct builder *b, struct balt *a, unsigned lo, unsigned hi)
{
    uint64_t s[4] = {0, 0, 0, 0};
    for (unsigned c = lo; c <= hi; c++) {
        s[c >> 6] |= (uint64_t)1 << (c & 63);
    }
    uint32_t idx;
    int rc = set_index(b, s, &idx);
    return rc ? rc : push_el(b, a, GEL_SET, idx);
}

static void builder_free(struct builder *b)
{
    for (uint32_t i = 0; i < b->n_rules; i++) {
        for (uint32_t j = 0; j < b->rules[i].n_alts; j++) {
            free(b->rules[i].alts[j].e);
        }
        free(b->rules[i].alts);
    }
    free(b->rules);
    free(b->sets);
    free(b->names);
}

/* ---- lexing ---- */

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skips blanks and comments; newlines too when newline_ok. */
static void skip_space(struct builder *b, bool newline_ok)
{
    while (b->p < b->end) {
        char c = *b->p;
        if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
            b->p++;
        } else if (c == '#') {
            while (b->p < b->end && *b->p != '\n') {
                b->p++;
            }
        } else {
            break;
        }
    }
}

/* Decodes one UTF-8 code point at b->p. */
static int read_utf8(struct builder *b, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)b->p;
    size_t n = tandem_utf8_seq_len(s, (size_t)(b->end - b->p));
    if (n == 0) {
        return fail_at(b, b->p, "invalid or truncated UTF-8 sequence (byte 0x%02X)", s[0]);
    }
    *cp = tandem_utf8_cp(s, n);
    b->p += n;
    return 0;
}

/* One character of a literal or class: an escape or a UTF-8 code point. */
static int read_char(struct builder *b, uint32_t *cp)
{
    if (b->p >= b->end) {
        return fail_at(b, b->p, "unexpected end of grammar");
    }
    if (*b->p != '\\') {
        return read_utf8(b, cp);
    }
    const char *at = b->p++;
    if (b->p >= b->end) {
        return fail_at(b, at, "unexpected end of grammar after '\\'");
    }
    char c = *b->p++;
    int digits = 0;
    switch (c) {
    case 'x':
        digits = 2;
        break;
    case 'u':
        digits = 4;
        break;
    case 'U':
        digits = 8;
        break;
    case 'n':
        *cp = '\n';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case '\\':
    case '"':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/':
        *cp = (unsigned char)c;
        return 0;
    default:
        return fail_at(b, at, "unknown escape '\\%c'", c);
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = b->p < b->end ? tandem_hex_digit(*b->p) : -1;
        if (h < 0) {
            return fail_at(b, at, "'\\%c' needs %d hex digits", c, digits);
        }
        v = v * 16 + (uint32_t)h;
        b->p++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        return fail_at(b, at, "escape names no Unicode scalar value (U+%X)", (unsigned)v);
    }
    *cp = v;
    return 0;
}

/* ---- UTF-8 lowering ---- */

struct cp_range {
    uint32_t lo, hi;
};

/* Lowers one code-point class into the rule `rule`: ASCII bytes into one set alternative (or
 * ascii[] when the caller folds it), longer sequences as alternatives of byte sets. */
struct lower {
    struct builder *b;
    uint32_t rule;
    uint64_t ascii[4];
};

static int lower_range(struct lower *l, uint32_t lo, uint32_t hi, int depth)
{
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    if (lo > hi || depth > 16) {
        return 0;
    }
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        if (lo <= bounds[i] && hi > bounds[i]) {
            int rc = lower_range(l, lo, bounds[i], depth + 1);
            return rc ? rc : lower_range(l, bounds[i] + 1, hi, depth + 1);
        }
    }
    if (hi <= 0x7F) {
        for (uint32_t c = lo; c <= hi; c++) {
            l->ascii[c >> 6] |= (uint64_t)1 << (c & 63);
        }
        return 0;
    }
    char a[4] = {0, 0, 0, 0}, z[4] = {0, 0, 0, 0};
    int n = (int)tandem_utf8_put(a, lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = ((uint32_t)1 << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                int rc = lower_range(l, lo, lo | m, depth + 1);
                return rc ? rc : lower_range(l, (lo | m) + 1, hi, depth + 1);
            }
            if ((hi & m) != m) {
                int rc = lower_range(l, lo, (hi & ~m) - 1, depth + 1);
                return rc ? rc : lower_range(l, hi & ~m, hi, depth + 1);
            }
        }
    }
    tandem_utf8_put(z, hi);
    uint32_t alt;
    int rc = 0;
    if (l->rule == GSTACK_NIL) {
        rc = new_rule(l->b, NULL, 0, &l->rule);
    }
    if (rc == 0) {
        rc = add_alt(l->b, l->rule, &alt);
    }
    for (int i = 0; i < n && rc == 0; i++) {
        rc = push_byte_range(l->b, &l->b->rules[l->rule].alts[alt], (unsigned char)a[i],
                             (unsigned char)z[i]);
    }
    return rc;
}

static int cmp_range(const void *x, const void *y)
{
    const struct cp_range *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Appends to alternative (rule, alt) what matches one code point of the class r[0..n) (negated
 * when neg): one byte set when the class is ASCII only, else a call of an anonymous rule. */
static int emit_class(struct builder *b, uint32_t rule, uint32_t alt, struct cp_range *r, size_t n,
                      bool neg)
{
    if (n > 1) {
        qsort(r, n, sizeof *r, cmp_range);
    }
    /* merge, then complement when negated, then remove surrogates */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) {
                r[m - 1].hi = r[i].hi;
            }
        } else {
            r[m++] = r[i];
        }
    }
    struct cp_range *todo = r;
    size_t n_todo = m;
    struct cp_range *heap = NULL;
    if (neg) {
        heap = malloc((m + 1) * sizeof *heap);
        if (!heap) {
            return -ENOMEM;
        }
        size_t k = 0;
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (r[i].lo > next) {
                heap[k++] = (struct cp_range){next, r[i].lo - 1};
            }
            next = r[i].hi + 1;
        }
        if (next <= 0x10FFFF) {
            heap[k++] = (struct cp_range){next, 0x10FFFF};
        }
        todo = heap;
        n_todo = k;
    }
    struct lower l = {.b = b, .rule = GSTACK_NIL, .ascii = {0, 0, 0, 0}};
    int rc = 0;
    for (size_t i = 0; i < n_todo && rc == 0; i++) {
        /* surrogates (U+D800..U+DFFF) have no UTF-8 form */
        uint32_t lo = todo[i].lo, hi = todo[i].hi > 0x10FFFF ? 0x10FFFF : todo[i].hi;
        if (lo < 0xD800) {
            rc = lower_range(&l, lo, hi < 0xD800 ? hi : 0xD7FF, 0);
        }
        if (rc == 0 && hi > 0xDFFF) {
            rc = lower_range(&l, lo > 0xE000 ? lo : 0xE000, hi, 0);
        }
    }
    free(heap);
    if (rc != 0) {
        return rc;
    }
    bool has_ascii = (l.ascii[0] | l.ascii[1]) != 0;
    if (l.rule == GSTACK_NIL) {
        /* ASCII only (or empty): one set element, no rule */
        uint32_t idx;
        rc = set_index(b, l.ascii, &idx);
        return rc ? rc : push_el(b, &b->rules[rule].alts[alt], GEL_SET, idx);
    }
    if (has_ascii) {
        uint32_t a2, idx;
        rc = add_alt(b, l.rule, &a2);
        if (rc == 0) {
            rc = set_index(b, l.ascii, &idx);
        }
        if (rc == 0) {
            rc = push_el(b, &b->rules[l.rule].alts[a2], GEL_SET, idx);
        }
        if (rc != 0) {
            return rc;
        }
    }
    b->rules[l.rule].defined = true;
    return push_el(b, &b->rules[rule].alts[alt], GEL_REF, l.rule);
}

/* ---- parsing ---- */

static int parse_alternatives(struct builder *b, uint32_t rule, bool nested);

static int parse_literal(struct builder *b, uint32_t rule, uint32_t alt)
{
    const char *at = b->p++;
    while (b->p < b->end && *b->p != '"') {
        if (*b->p == '\n') {
            return fail_at(b, at, "unterminated string literal");
        }
        uint32_t cp;
        int rc = read_char(b, &cp);
        if (rc != 0) {
            return rc;
        }
        char u[4];
        size_t n = tandem_utf8_put(u, cp);
        for (size_t i = 0; i < n; i++) {
            const unsigned char byte = (unsigned char)u[i];
            rc = push_byte_range(b, &b->rules[rule].alts[alt], byte, byte);
            if (rc != 0) {
                return rc;
            }
        }
    }
    if (b->p >= b->end) {
        return fail_at(b, at, "unterminated string literal");
    }
    b->p++;
    return 0;
}

static int parse_class(struct builder *b, uint32_t rule, uint32_t alt)
{
    const char *at = b->p++;
    bool neg = false;
    if (b->p < b->end && *b->p == '^') {
        neg = true;
        b->p++;
    }
    struct cp_range *r = NULL;
    uint32_t n = 0, cap = 0;
    int rc = 0;
    while (rc == 0 && b->p < b->end && *b->p != ']') {
        uint32_t lo, hi;
        rc = read_char(b, &lo);
        if (rc != 0) {
            break;
        }
        hi = lo;
        if (b->p + 1 < b->end && b->p[0] == '-' && b->p[1] != ']') {
            b->p++;
            rc = read_char(b, &hi);
            if (rc == 0 && hi < lo) {
                rc = fail_at(b, at, "character range out of order (U+%X-U+%X)", (unsigned)lo,
                             (unsigned)hi);
            }
            if (rc != 0) {
                break;
            }
        }
        if (grow((void **)&r, &cap, n + 1, sizeof *r) != 0) {
            rc = -ENOMEM;
            break;
        }
        r[n++] = (struct cp_range){lo, hi};
    }
    if (rc == 0 && b->p >= b->end) {
        rc = fail_at(b, at, "unterminated character class");
    }
    if (rc == 0) {
        b->p++;
        rc = emit_class(b, rule, alt, r, n, neg);
    }
    free(r);
    return rc;
}

/* Makes elements [from, n) of alternative (rule, alt) the body of a new anonymous rule and
 * replaces them with a call of it (unless they already are one element). *item gets that single
 * element. */
static int wrap_item(struct builder *b, uint32_t rule, uint32_t alt, uint32_t from,
                     struct gel *item)
{
    struct balt *a = &b->rules[rule].alts[alt];
    if (a->n - from == 1) {
        *item = a->e[from];
        a->n--;
        b->n_elems--;
        return 0;
    }
    uint32_t r, ra;
    int rc = new_rule(b, NULL, 0, &r);
    if (rc == 0) {
        rc = add_alt(b, r, &ra);
    }
    if (rc != 0) {
        return rc;
    }
    a = &b->rules[rule].alts[alt];
    struct balt *body = &b->rules[r].alts[ra];
    for (uint32_t i = from; i < a->n; i++) {
        if (grow((void **)&body->e, &body->cap, body->n + 1, sizeof *body->e) != 0) {
            return -ENOMEM;
        }
        body->e[body->n++] = a->e[i];
    }
    a->n = from;
    b->rules[r].defined = true;
    *item = (struct gel){GEL_REF, r};
    return 0;
}

/* A new rule: R ::= item R | "" (item*). */
static int star_rule(struct builder *b, struct gel item, uint32_t *out)
{
    uint32_t r, a1, a2;
    int rc = new_rule(b, NULL, 0, &r);
    if (rc != 0) {
        return rc;
    }
    rc = add_alt(b, r, &a1);
    if (rc == 0) {
        rc = push_el(b, &b->rules[r].alts[a1], item.kind, item.arg);
    }
    if (rc == 0) {
        rc = push_el(b, &b->rules[r].alts[a1], GEL_REF, r);
    }
    if (rc == 0) {
        rc = add_alt(b, r, &a2);
    }
    b->rules[r].defined = true;
    *out = r;
    return rc;
}

/* Applies x{min,max} (max < 0: unbounded) to the item that starts at element `from`. */
static int repeat(struct builder *b, uint32_t rule, uint32_t alt, uint32_t from, long min, long max)
{
    struct gel item = {GEL_END, 0};
    int rc = wrap_item(b, rule, alt, from, &item);
    for (long i = 0; rc == 0 && i < min; i++) {
        rc = push_el(b, &b->rules[rule].alts[alt], item.kind, item.arg);
    }
    if (rc != 0) {
        return rc;
    }
    if (max < 0) {
        uint32_t r;
        rc = star_rule(b, item, &r);
        return rc ? rc : push_el(b, &b->rules[rule].alts[alt], GEL_REF, r);
    }
    /* (x (x (x)?)?)? built from the inside out */
    uint32_t inner = GSTACK_NIL;
    for (long k = 0; k < max - min; k++) {
        uint32_t r, a1, a2;
        rc = new_rule(b, NULL, 0, &r);
        if (rc == 0) {
            rc = add_alt(b, r, &a1);
        }
        if (rc == 0) {
            rc = push_el(b, &b->rules[r].alts[a1], item.kind, item.arg);
        }
        if (rc == 0 && inner != GSTACK_NIL) {
            rc = push_el(b, &b->rules[r].alts[a1], GEL_REF, inner);
        }
        if (rc == 0) {
            rc = add_alt(b, r, &a2);
        }
        if (rc != 0) {
            return rc;
        }
        b->rules[r].defined = true;
        inner = r;
    }
    return inner == GSTACK_NIL ? 0 : push_el(b, &b->rules[rule].alts[alt], GEL_REF, inner);
}

static int parse_count(struct builder *b, long *out)
{
    if (b->p >= b->end || *b->p < '0' || *b->p > '9') {
        return fail_at(b, b->p, "expected a number in {m,n}");
    }
    long v = 0;
    while (b->p < b->end && *b->p >= '0' && *b->p <= '9') {
        v = v * 10 + (*b->p++ - '0');
        if (v > GBNF_MAX_REPEAT) {
            return fail_at(b, b->p, "repetition count above %d", GBNF_MAX_REPEAT);
        }
    }
    *out = v;
    return 0;
}

static int parse_braces(struct builder *b, long *min, long *max)
{
    const char *at = b->p++;
    skip_space(b, true);
    int rc = parse_count(b, min);
    if (rc != 0) {
        return rc;
    }
    skip_space(b, true);
    *max = *min;
    if (b->p < b->end && *b->p == ',') {
        b->p++;
        skip_space(b, true);
        *max = -1;
        if (b->p < b->end && *b->p != '}') {
            rc = parse_count(b, max);
            if (rc != 0) {
                return rc;
            }
            skip_space(b, true);
        }
    }
    if (b->p >= b->end || *b->p != '}') {
        return fail_at(b, at, "expected '}' to close the repetition");
    }
    b->p++;
    if (*max >= 0 && *max < *min) {
        return fail_at(b, at, "repetition {%ld,%ld}: maximum below minimum", *min, *max);
    }
    return 0;
}

static int parse_sequence(struct builder *b, uint32_t rule, uint32_t alt, bool nested)
{
    uint32_t last = GSTACK_NIL; /* first element of the last item */
    while (b->p < b->end) {
        char c = *b->p;
        struct balt *a = &b->rules[rule].alts[alt];
        uint32_t start = a->n;
        int rc = 0;
        if (c == '"') {
            rc = parse_literal(b, rule, alt);
        } else if (c == '[') {
            rc = parse_class(b, rule, alt);
        } else if (c == '.') {
            b->p++;
            struct cp_range none = {0, 0};
            rc = emit_class(b, rule, alt, &none, 0, true);
        } else if (c == '(') {
            const char *at = b->p++;
            if (++b->depth > GBNF_MAX_DEPTH) {
                return fail_at(b, at, "parentheses nested deeper than %d", GBNF_MAX_DEPTH);
            }
            uint32_t sub;
            rc = new_rule(b, NULL, 0, &sub);
            if (rc == 0) {
                skip_space(b, true);
                rc = parse_alternatives(b, sub, true);
            }
            if (rc == 0 && (b->p >= b->end || *b->p != ')')) {
                rc = fail_at(b, at, "expected ')'");
            }
            if (rc == 0) {
                b->p++;
                b->depth--;
                b->rules[sub].defined = true;
                rc = push_el(b, &b->rules[rule].alts[alt], GEL_REF, sub);
            }
        } else if (is_name_char(c)) {
            const char *name = b->p;
            while (b->p < b->end && is_name_char(*b->p)) {
                b->p++;
            }
            const char *save = b->p;
            skip_space(b, false);
            if (b->end - b->p >= 3 && memcmp(b->p, "::=", 3) == 0) {
                /* the next rule starts: this sequence ended at a line break */
                b->p = name;
                return nested ? fail_at(b, name, "expected ')' before rule '%.*s'",
                                        (int)(save - name), name)
                              : 0;
            }
            b->p = save;
            uint32_t ref;
            rc = find_or_add_rule(b, name, (uint32_t)(save - name), &ref);
            if (rc == 0) {
                rc = push_el(b, &b->rules[rule].alts[alt], GEL_REF, ref);
            }
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == GSTACK_NIL) {
                return fail_at(b, b->p, "'%c' follows nothing", c);
            }
            long min, max;
            if (c == '{') {
                rc = parse_braces(b, &min, &max);
            } else {
                b->p++;
                min = c == '+';
                max = c == '?' ? 1 : -1;
            }
            if (rc == 0) {
                rc = repeat(b, rule, alt, last, min, max);
            }
            if (rc != 0) {
                return rc;
            }
            last = GSTACK_NIL; /* x** is refused, as in llama.cpp */
            skip_space(b, nested);
            continue;
        } else {
            break;
        }
        if (rc != 0) {
            return rc;
        }
        last = start;
        skip_space(b, nested);
    }
    return 0;
}

static int parse_alternatives(struct builder *b, uint32_t rule, bool nested)
{
    for (;;) {
        uint32_t alt;
        int rc = add_alt(b, rule, &alt);
        if (rc == 0) {
            rc = parse_sequence(b, rule, alt, nested);
        }
        if (rc != 0) {
            return rc;
        }
        const char *save = b->p;
        skip_space(b, true); /* an alternative may start on the next line with '|' */
        if (b->p < b->end && *b->p == '|') {
            b->p++;
            skip_space(b, true);
            continue;
        }
        b->p = save;
        return 0;
    }
}

static int parse_rule(struct builder *b)
{
    const char *name = b->p;
    while (b->p < b->end && is_name_char(*b->p)) {
        b->p++;
    }
    if (b->p == name) {
        return fail_at(b, name, "expected a rule name");
    }
    uint32_t len = (uint32_t)(b->p - name);
    skip_space(b, false);
    if (b->end - b->p < 3 || memcmp(b->p, "::=", 3) != 0) {
        return fail_at(b, b->p, "expected '::=' after '%.*s'", (int)len, name);
    }
    b->p += 3;
    skip_space(b, true);
    uint32_t r = 0;
    int rc = find_or_add_rule(b, name, len, &r);
    if (rc != 0 || !b->rules || r >= b->n_rules) {
        return rc ? rc : -EINVAL;
    }
    if (b->rules[r].defined) {
        return fail_at(b, name, "rule '%.*s' is defined twice", (int)len, name);
    }
    b->rules[r].defined = true;
    rc = parse_alternatives(b, r, false);
    if (rc != 0) {
        return rc;
    }
    if (b->p < b->end && *b->p != '\n' && !is_name_char(*b->p)) {
        return fail_at(b, b->p, "unexpected '%c'", *b->p);
    }
    return 0;
}

/* ---- checks ---- */

/* nullable[r]: rule r can match the empty string. */
static void compute_nullable(const struct builder *b, bool *nullable)
{
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t r = 0; r < b->n_rules; r++) {
            if (nullable[r]) {
                continue;
            }
            for (uint32_t a = 0; a < b->rules[r].n_alts && !nullable[r]; a++) {
                const struct balt *al = &b->rules[r].alts[a];
                bool all = true;
                for (uint32_t i = 0; i < al->n && all; i++) {
                    all = al->e[i].kind == GEL_REF && nullable[al->e[i].arg];
                }
                if (all) {
                    nullable[r] = changed = true;
                }
            }
        }
    }
}

/* Depth-first search for a cycle of calls that read nothing in between. state: 0 new, 1 on the
 * path, 2 done. */
static int find_left_cycle(const struct builder *b, const bool *nullable, uint8_t *state,
                           uint32_t *path, uint32_t start, uint32_t *path_len)
{
    uint32_t depth = 0;
    uint32_t *alt_i = path + b->n_rules; /* per path entry: alternative, element */
    uint32_t *el_i = alt_i + b->n_rules;
    path[0] = start;
    alt_i[0] = el_i[0] = 0;
    state[start] = 1;
    for (;;) {
        uint32_t r = path[depth];
        const struct brule *ru = &b->rules[r];
        uint32_t next = GSTACK_NIL;
        while (alt_i[depth] < ru->n_alts) {
            const struct balt *al = &ru->alts[alt_i[depth]];
            if (el_i[depth] < al->n && al->e[el_i[depth]].kind == GEL_REF) {
                uint32_t callee = al->e[el_i[depth]].arg;
                bool go_on = nullable[callee];
                el_i[depth] = go_on ? el_i[depth] + 1 : al->n;
                if (state[callee] == 1) {
                    *path_len = depth + 1;
                    return (int)callee;
                }
                if (state[callee] == 0) {
                    next = callee;
                    break;
                }
            } else {
                alt_i[depth]++;
                el_i[depth] = 0;
            }
        }
        if (next != GSTACK_NIL) {
            depth++;
            path[depth] = next;
            alt_i[depth] = el_i[depth] = 0;
            state[next] = 1;
            continue;
        }
        state[r] = 2;
        if (depth == 0) {
            return -1;
        }
        depth--;
    }
}

static void rule_label(const struct builder *b, uint32_t r, char *out, size_t len)
{
    const struct brule *ru = &b->rules[r];
    if (ru->name) {
        snprintf(out, len, "'%.*s'", (int)ru->name_len, ru->name);
    } else {
        snprintf(out, len, "a group or repetition");
    }
}

static int check(struct builder *b)
{
    for (uint32_t r = 0; r < b->n_rules; r++) {
        if (!b->rules[r].defined) {
            return fail_at(b, b->rules[r].at, "undefined rule '%.*s'", (int)b->rules[r].name_len,
                           b->rules[r].name);
        }
    }
    bool *nullable = calloc(b->n_rules, sizeof *nullable);
    uint8_t *state = calloc(b->n_rules, 1);
    uint32_t *path = malloc((size_t)b->n_rules * 3 * sizeof *path);
    int rc = 0;
    if (!nullable || !state || !path) {
        rc = -ENOMEM;
        goto out;
    }
    compute_nullable(b, nullable);
    for (uint32_t r = 0; r < b->n_rules && rc == 0; r++) {
        uint32_t len = 0;
        int cyc = state[r] == 0 ? find_left_cycle(b, nullable, state, path, r, &len) : -1;
        if (cyc < 0) {
            continue;
        }
        /* name a named rule of the cycle (the path from cyc to its end) when there is one */
        uint32_t named = (uint32_t)cyc;
        bool on_cycle = false;
        for (uint32_t i = 0; i < len; i++) {
            on_cycle = on_cycle || path[i] == (uint32_t)cyc;
            if (on_cycle && b->rules[path[i]].name) {
                named = path[i];
                break;
            }
        }
        char label[128];
        rule_label(b, named, label, sizeof label);
        rc = tandem_fail(b->err, b->errlen, -EINVAL,
                         "grammar: %s can call itself without reading anything (left recursion, "
                         "or a repetition of something that may match nothing)",
                         label);
    }
out:
    free(nullable);
    free(state);
    free(path);
    return rc;
}

/* ---- output ---- */

static int flatten(const struct builder *b, uint32_t root, grammar **out)
{
    grammar *g = calloc(1, sizeof *g);
    if (!g) {
        return -ENOMEM;
    }
    uint32_t n_alts = 0, n_elems = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n_alts;
        for (uint32_t a = 0; a < b->rules[r].n_alts; a++) {
            n_elems += b->rules[r].alts[a].n + 1;
        }
    }
    g->elems = malloc((size_t)(n_elems + 1) * sizeof *g->elems);
    g->alts = malloc((size_t)(n_alts + 1) * sizeof *g->alts);
    g->rule_alt0 = malloc((size_t)(b->n_rules + 1) * sizeof *g->rule_alt0);
    g->rule_nalts = malloc((size_t)(b->n_rules + 1) * sizeof *g->rule_nalts);
    g->sets = malloc((size_t)(b->n_sets + 1) * sizeof *g->sets);
    if (!g->elems || !g->alts || !g->rule_alt0 || !g->rule_nalts || !g->sets) {
        grammar_free(g);
        return -ENOMEM;
    }
    if (b->n_sets > 0) {
        memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    }
    g->n_sets = b->n_sets;
    uint32_t ai = 0, ei = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        g->rule_alt0[r] = ai;
        g->rule_nalts[r] = b->rules[r].n_alts;
        for (uint32_t a = 0; a < b->rules[r].n_alts; a++) {
            const struct balt *al = &b->rules[r].alts[a];
            g->alts[ai++] = ei;
            if (al->n > 0) {
                memcpy(g->elems + ei, al->e, (size_t)al->n * sizeof *al->e);
            }
            ei += al->n;
            g->elems[ei++] = (struct gel){GEL_END, 0};
        }
    }
    g->n_elems = ei;
    g->n_rules = b->n_rules;
    g->root = root;
    *out = g;
    return 0;
}

int grammar_compile(const char *text, size_t len, const char *root, grammar **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (!text || len == 0) {
        return tandem_fail(err, errlen, -EINVAL, "grammar: empty grammar");
    }
    if (len > GRAMMAR_MAX_TEXT) {
        return tandem_fail(err, errlen, -E2BIG, "grammar: longer than %zu bytes",
                           (size_t)GRAMMAR_MAX_TEXT);
    }
    struct builder b = {.src = text, .p = text, .end = text + len, .err = err, .errlen = errlen};
    int rc = 0;
    skip_space(&b, true);
    while (rc == 0 && b.p < b.end) {
        rc = parse_rule(&b);
        skip_space(&b, true);
    }
    const char *root_name = root ? root : "root";
    uint32_t root_rule = GSTACK_NIL;
    if (rc == 0) {
        for (uint32_t i = 0; i < b.n_rules; i++) {
            if (b.rules[i].name && b.rules[i].name_len == strlen(root_name) &&
                memcmp(b.rules[i].name, root_name, b.rules[i].name_len) == 0 &&
                b.rules[i].defined) {
                root_rule = i;
            }
        }
        if (root_rule == GSTACK_NIL) {
            rc = tandem_fail(err, errlen, -EINVAL, "grammar: no rule named '%s'", root_name);
        }
    }
    if (rc == 0) {
        rc = check(&b);
    }
    if (rc == 0) {
        rc = flatten(&b, root_rule, out);
    }
    if (rc == -ENOMEM) {
        tandem_set_err(err, errlen, "grammar: out of memory");
    }
    builder_free(&b);
    return rc;
}

void grammar_free(grammar *g)
{
    if (!g) {
        return;
    }
    free(g->elems);
    free(g->alts);
    free(g->rule_alt0);
    free(g->rule_nalts);
    free(g->sets);
    free(g);
}
