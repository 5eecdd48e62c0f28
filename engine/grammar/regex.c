/*
 * Regex front end (see regex.h). A recursive-descent parser builds a small syntax tree over code
 * points: literals, classes (sorted, merged code point ranges without surrogates), concatenation,
 * alternation and bounded or unbounded repetition. The tree is simplified while it is built:
 * empty pieces vanish, an alternation with an empty branch becomes an optional, and the body of
 * a repetition is rewritten so that it never matches the empty string ((a*)* becomes (a+)*),
 * because a nullable repetition body would be left recursion once the GBNF compiler expands the
 * repetition into rules. Nodes form a DAG (that rewrite shares subtrees); each node carries a
 * weight, the size of its printed form plus its repetition counts (the compiler turns x{n} into
 * about n elements that share x's rule), so that a regex whose grammar would be too large is
 * refused here first, with a message.
 *
 * Printing writes plain-ASCII GBNF: runs of literal characters become one "literal", classes
 * become [ranges], and in json_string mode each character is written as its canonical escaped
 * form inside a JSON string (a class becomes an alternation of a [class] for the characters
 * written as themselves and "literals" for the escaped ones).
 */
#include "engine/grammar/regex.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "lib/common.h"

#define RX_MAX_CP     0x10FFFFu
#define RX_MAX_LEN    ((size_t)1 << 16)              /* longest regex accepted, bytes */
#define RX_MAX_WEIGHT ((size_t)GRAMMAR_MAX_ELEMENTS) /* expanded size refused beyond this */
#define RX_MAX_KIDS   ((size_t)1 << 22)              /* child references in the tree */

enum rx_kind { RX_EMPTY, RX_CHAR, RX_CLASS, RX_CAT, RX_ALT, RX_REPEAT };

struct rx_range {
    uint32_t lo, hi; /* inclusive */
};

struct rx_node {
    enum rx_kind kind;
    uint32_t cp;    /* RX_CHAR: the code point */
    size_t first;   /* RX_CLASS: first range; RX_CAT/RX_ALT: first entry in kids */
    size_t count;   /* RX_CLASS: ranges; RX_CAT/RX_ALT: children (at least 2) */
    uint32_t child; /* RX_REPEAT: the repeated node (never nullable) */
    int min, max;   /* RX_REPEAT: bounds; max < 0 is unbounded */
    size_t weight;  /* printed size plus repetition counts (saturating) */
    bool nullable;  /* matches the empty string */
};

struct rx {
    const unsigned char *s;
    size_t len;
    size_t pos;
    bool json;
    struct rx_node *nodes;
    size_t n_nodes, cap_nodes;
    struct rx_range *ranges;
    size_t n_ranges, cap_ranges;
    uint32_t *kids;
    size_t n_kids, cap_kids;
    int depth; /* group nesting at pos */
    char *err;
    size_t errlen;
};

/* A growable list of node indices, local to one parse step. */
struct rx_list {
    uint32_t *v;
    size_t n, cap;
};

static int rx_fail(struct rx *rx, int rc, size_t offset, const char *fmt, ...) TANDEM_PRINTF(4, 5);

static int rx_fail(struct rx *rx, int rc, size_t offset, const char *fmt, ...)
{
    if (rx->err && rx->errlen > 0) {
        char what[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        snprintf(rx->err, rx->errlen, "regex: %s at offset %zu", what, offset);
    }
    return rc;
}

static int rx_oom(struct rx *rx)
{
    return rx_fail(rx, -ENOMEM, rx->pos, "out of memory");
}

static size_t sat_add(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static size_t sat_mul(size_t a, size_t b)
{
    return (b != 0 && a > SIZE_MAX / b) ? SIZE_MAX : a * b;
}

/* ---- lists and nodes ---- */

static int list_push(struct rx_list *l, uint32_t v)
{
    uint32_t *n = tandem_grow(l->v, &l->cap, l->n + 1, sizeof(*n), 8);
    if (!n) {
        return -ENOMEM;
    }
    l->v = n;
    l->v[l->n++] = v;
    return 0;
}

static void list_free(struct rx_list *l)
{
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* Appends a node; returns its index or a negative errno. */
static long node_add(struct rx *rx, const struct rx_node *proto)
{
    if (rx->n_nodes >= UINT32_MAX) {
        return rx_fail(rx, -E2BIG, rx->pos, "regex too large");
    }
    struct rx_node *n = tandem_grow(rx->nodes, &rx->cap_nodes, rx->n_nodes + 1, sizeof(*n), 64);
    if (!n) {
        return rx_oom(rx);
    }
    rx->nodes = n;
    rx->nodes[rx->n_nodes] = *proto;
    return (long)rx->n_nodes++;
}

static long make_empty(struct rx *rx)
{
    struct rx_node n = {.kind = RX_EMPTY, .weight = 1, .nullable = true};
    return node_add(rx, &n);
}

static long make_char(struct rx *rx, uint32_t cp)
{
    struct rx_node n = {.kind = RX_CHAR, .cp = cp, .weight = 1};
    return node_add(rx, &n);
}

/* A CAT or ALT node over items[0..n) (n >= 2), copied into rx->kids. */
static long make_list_node(struct rx *rx, enum rx_kind kind, const uint32_t *items, size_t n)
{
    if (rx->n_kids + n > RX_MAX_KIDS) {
        return rx_fail(rx, -E2BIG, rx->pos, "regex too large");
    }
    uint32_t *k = tandem_grow(rx->kids, &rx->cap_kids, rx->n_kids + n, sizeof(*k), 64);
    if (!k) {
        return rx_oom(rx);
    }
    rx->kids = k;
    struct rx_node node = {.kind = kind, .first = rx->n_kids, .count = n};
    node.nullable = kind == RX_CAT;
    for (size_t i = 0; i < n; i++) {
        const struct rx_node *c = &rx->nodes[items[i]];
        rx->kids[rx->n_kids + i] = items[i];
        node.weight = sat_add(node.weight, c->weight);
        node.nullable =
            kind == RX_CAT ? node.nullable && c->nullable : node.nullable || c->nullable;
    }
    rx->n_kids += n;
    return node_add(rx, &node);
}

/* A kind node (RX_CAT or RX_ALT) over items, flattened: the children of nested kind nodes are
 * spliced in and RX_EMPTY items dropped (*had_empty says whether there was one); no item left
 * is RX_EMPTY, one is that item. */
static long make_flat(struct rx *rx, enum rx_kind kind, const uint32_t *items, size_t n,
                      bool *had_empty)
{
    struct rx_list flat = {0};
    long rc = 0;
    *had_empty = false;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct rx_node *c = &rx->nodes[items[i]];
        if (c->kind == RX_EMPTY) {
            *had_empty = true;
        } else if (c->kind == kind) {
            for (size_t j = 0; j < c->count && rc == 0; j++) {
                rc = list_push(&flat, rx->kids[c->first + j]);
            }
        } else {
            rc = list_push(&flat, items[i]);
        }
    }
    if (rc != 0) {
        rc = rx_oom(rx);
    } else if (flat.n == 0) {
        rc = make_empty(rx);
    } else if (flat.n == 1) {
        rc = flat.v[0];
    } else {
        rc = make_list_node(rx, kind, flat.v, flat.n);
    }
    list_free(&flat);
    return rc;
}

/* Concatenation of items (flattened, empty pieces dropped). */
static long make_cat(struct rx *rx, const uint32_t *items, size_t n)
{
    bool had_empty;
    return make_flat(rx, RX_CAT, items, n, &had_empty);
}

static long make_repeat(struct rx *rx, uint32_t child, int min, int max);

/* Alternation of items (flattened); empty branches make the whole optional. */
static long make_alt(struct rx *rx, const uint32_t *items, size_t n)
{
    bool optional;
    long rc = make_flat(rx, RX_ALT, items, n, &optional);
    if (rc >= 0 && optional && !rx->nodes[rc].nullable) {
        rc = make_repeat(rx, (uint32_t)rc, 0, 1);
    }
    return rc;
}

/* A node for L(x) without the empty string; x is nullable and not RX_EMPTY, so the result is
 * never empty: REPEAT{0,m} y -> y{1,m}; ALT -> the branches without ""; CAT a1..ak (all nullable)
 * -> the alternation over i of nonnull(ai) a(i+1)..ak (the first piece that is not empty). */
static long make_nonnull(struct rx *rx, uint32_t x)
{
    struct rx_node node = rx->nodes[x];
    if (!node.nullable) {
        return x;
    }
    if (node.kind == RX_REPEAT) {
        return make_repeat(rx, node.child, node.min > 0 ? node.min : 1, node.max);
    }
    TANDEM_ASSERT(node.kind == RX_CAT || node.kind == RX_ALT);
    size_t est = 0;
    for (size_t i = 0; i < node.count; i++) {
        size_t w = rx->nodes[rx->kids[node.first + i]].weight;
        est = sat_add(est, node.kind == RX_CAT ? sat_mul(w, node.count - i) : w);
    }
    if (est > RX_MAX_WEIGHT) {
        return rx_fail(rx, -E2BIG, rx->pos, "regex too large when expanded");
    }
    struct rx_list alts = {0};
    struct rx_list seq = {0};
    long rc = 0;
    for (size_t i = 0; i < node.count && rc >= 0; i++) {
        long first = make_nonnull(rx, rx->kids[node.first + i]);
        if (first < 0) {
            rc = first;
            break;
        }
        if (node.kind == RX_ALT) {
            rc = list_push(&alts, (uint32_t)first) ? rx_oom(rx) : 0;
            continue;
        }
        seq.n = 0;
        rc = list_push(&seq, (uint32_t)first) ? rx_oom(rx) : 0;
        for (size_t j = i + 1; j < node.count && rc >= 0; j++) {
            rc = list_push(&seq, rx->kids[node.first + j]) ? rx_oom(rx) : 0;
        }
        long piece = rc >= 0 ? make_cat(rx, seq.v, seq.n) : rc;
        rc = piece < 0 ? piece : (list_push(&alts, (uint32_t)piece) ? rx_oom(rx) : 0);
    }
    if (rc >= 0) {
        rc = make_alt(rx, alts.v, alts.n);
    }
    list_free(&alts);
    list_free(&seq);
    return rc;
}

static long make_repeat(struct rx *rx, uint32_t child, int min, int max)
{
    if (rx->nodes[child].kind == RX_EMPTY || max == 0) {
        return make_empty(rx);
    }
    if (min == 1 && max == 1) {
        return child;
    }
    if (rx->nodes[child].nullable) {
        /* pieces that match "" can pad any count: x{n,m} = (x without ""){0,m} */
        long nn = make_nonnull(rx, child);
        if (nn < 0) {
            return nn;
        }
        child = (uint32_t)nn;
        min = 0;
    }
    struct rx_node n = {.kind = RX_REPEAT, .child = child, .min = min, .max = max};
    n.nullable = min == 0;
    size_t times = max >= 0 ? (size_t)max : (size_t)min + 1;
    n.weight = sat_add(rx->nodes[child].weight, times);
    return node_add(rx, &n);
}

/* ---- classes ---- */

/*
 * \d \w \s differ between the dialects: ECMAScript's \d and \w are ASCII, Python's are Unicode
 * (any decimal digit; any letter or digit), and their whitespace sets differ a little. Each set
 * has a narrow form (what both dialects include) and a wide form (what either includes): a set
 * used as is takes the narrow form, a complemented one (\D, [^\d]) the wide one, so that a
 * generated character matches the regex in both dialects.
 */
static const struct rx_range set_digit[] = {{'0', '9'}};
/* every Unicode 16 decimal digit (Nd), Python's \d */
static const struct rx_range set_digit_wide[] = {
    {0x30, 0x39},       {0x660, 0x669},     {0x6F0, 0x6F9},     {0x7C0, 0x7C9},
    {0x966, 0x96F},     {0x9E6, 0x9EF},     {0xA66, 0xA6F},     {0xAE6, 0xAEF},
    {0xB66, 0xB6F},     {0xBE6, 0xBEF},     {0xC66, 0xC6F},     {0xCE6, 0xCEF},
    {0xD66, 0xD6F},     {0xDE6, 0xDEF},     {0xE50, 0xE59},     {0xED0, 0xED9},
    {0xF20, 0xF29},     {0x1040, 0x1049},   {0x1090, 0x1099},   {0x17E0, 0x17E9},
    {0x1810, 0x1819},   {0x1946, 0x194F},   {0x19D0, 0x19D9},   {0x1A80, 0x1A89},
    {0x1A90, 0x1A99},   {0x1B50, 0x1B59},   {0x1BB0, 0x1BB9},   {0x1C40, 0x1C49},
    {0x1C50, 0x1C59},   {0xA620, 0xA629},   {0xA8D0, 0xA8D9},   {0xA900, 0xA909},
    {0xA9D0, 0xA9D9},   {0xA9F0, 0xA9F9},   {0xAA50, 0xAA59},   {0xABF0, 0xABF9},
    {0xFF10, 0xFF19},   {0x104A0, 0x104A9}, {0x10D30, 0x10D39}, {0x10D40, 0x10D49},
    {0x11066, 0x1106F}, {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9},
    {0x112F0, 0x112F9}, {0x11450, 0x11459}, {0x114D0, 0x114D9}, {0x11650, 0x11659},
    {0x116C0, 0x116C9}, {0x116D0, 0x116E3}, {0x11730, 0x11739}, {0x118E0, 0x118E9},
    {0x11950, 0x11959}, {0x11BF0, 0x11BF9}, {0x11C50, 0x11C59}, {0x11D50, 0x11D59},
    {0x11DA0, 0x11DA9}, {0x11F50, 0x11F59}, {0x16130, 0x16139}, {0x16A60, 0x16A69},
    {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9},
    {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9}, {0x1E4F0, 0x1E4F9},
    {0x1E950, 0x1E959}, {0x1FBF0, 0x1FBF9}};
static const struct rx_range set_word[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
/* Python's \w is too large a table: every non-ASCII character stands in for it */
static const struct rx_range set_word_wide[] = {
    {'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}, {0x80, RX_MAX_CP}};
static const struct rx_range set_space_narrow[] = {
    {'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
static const struct rx_range set_space_wide[] = {
    {'\t', '\r'},     {0x1C, ' '},      {0x85, 0x85},     {0xA0, 0xA0},
    {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
    {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
/* .: not a line terminator of either dialect (\n; ECMAScript's \r, U+2028, U+2029 too) */
static const struct rx_range set_dot[] = {
    {0, '\n' - 1}, {'\n' + 1, '\r' - 1}, {'\r' + 1, 0x2027}, {0x202A, RX_MAX_CP}};

static int range_add(struct rx *rx, uint32_t lo, uint32_t hi)
{
    struct rx_range *r = tandem_grow(rx->ranges, &rx->cap_ranges, rx->n_ranges + 1, sizeof(*r), 16);
    if (!r) {
        return rx_oom(rx);
    }
    rx->ranges = r;
    rx->ranges[rx->n_ranges].lo = lo;
    rx->ranges[rx->n_ranges].hi = hi;
    rx->n_ranges++;
    return 0;
}

/* Appends set (sorted, disjoint) or its complement over all code points. */
static int range_add_set(struct rx *rx, const struct rx_range *set, size_t n, bool negate)
{
    int rc = 0;
    if (!negate) {
        for (size_t i = 0; i < n && rc == 0; i++) {
            rc = range_add(rx, set[i].lo, set[i].hi);
        }
        return rc;
    }
    uint32_t next = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (set[i].lo > next) {
            rc = range_add(rx, next, set[i].lo - 1);
        }
        next = set[i].hi + 1;
    }
    return rc == 0 && next <= RX_MAX_CP ? range_add(rx, next, RX_MAX_CP) : rc;
}

static int range_cmp(const void *a, const void *b)
{
    const struct rx_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Normalizes ranges[first..n_ranges): sorted, merged, complemented when negate, without
 * surrogates. Returns the number of ranges left (0: the class matches nothing) or -errno. */
static long class_finish(struct rx *rx, size_t first, bool negate)
{
    size_t n = rx->n_ranges - first;
    struct rx_range *r = rx->ranges + first;
    qsort(r, n, sizeof(*r), range_cmp);
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
    struct rx_range *tmp = malloc((m + 2) * sizeof(*tmp));
    if (!tmp) {
        return rx_oom(rx);
    }
    size_t k = 0;
    if (negate) {
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (r[i].lo > next) {
                tmp[k++] = (struct rx_range){next, r[i].lo - 1};
            }
            next = r[i].hi + 1;
        }
        if (next <= RX_MAX_CP) {
            tmp[k++] = (struct rx_range){next, RX_MAX_CP};
        }
    } else {
        memcpy(tmp, r, m * sizeof(*tmp));
        k = m;
    }
    /* drop the surrogates U+D800-U+DFFF: they are not characters and have no UTF-8 form */
    rx->n_ranges = first;
    long rc = 0;
    for (size_t i = 0; i < k && rc == 0; i++) {
        if (tmp[i].lo < 0xD800 && tmp[i].hi >= 0xD800) {
            rc = range_add(rx, tmp[i].lo, 0xD7FF);
        } else if (tmp[i].lo < 0xD800) {
            rc = range_add(rx, tmp[i].lo, tmp[i].hi);
        }
        if (rc == 0 && tmp[i].hi > 0xDFFF) {
            rc = range_add(rx, tmp[i].lo > 0xE000 ? tmp[i].lo : 0xE000, tmp[i].hi);
        }
    }
    free(tmp);
    return rc < 0 ? rc : (long)(rx->n_ranges - first);
}

static long make_class_node(struct rx *rx, size_t first, size_t count)
{
    struct rx_node n = {.kind = RX_CLASS, .first = first, .count = count, .weight = count + 1};
    return node_add(rx, &n);
}

/* A class node for one predefined set (\d \W . ...). */
static long make_set_class(struct rx *rx, const struct rx_range *set, size_t n, bool negate)
{
    size_t first = rx->n_ranges;
    int rc = range_add_set(rx, set, n, negate);
    if (rc != 0) {
        return rc;
    }
    long count = class_finish(rx, first, false);
    return count < 0 ? count : make_class_node(rx, first, (size_t)count);
}

/* ---- lexing ---- */

static bool at_end(const struct rx *rx)
{
    return rx->pos >= rx->len;
}

static int peek(const struct rx *rx)
{
    return at_end(rx) ? -1 : rx->s[rx->pos];
}

/* Reads one UTF-8 encoded code point at pos. */
static int read_cp(struct rx *rx, uint32_t *cp)
{
    size_t n = tandem_utf8_seq_len(rx->s + rx->pos, rx->len - rx->pos);
    if (n == 0) {
        return rx_fail(rx, -EINVAL, rx->pos, "invalid UTF-8");
    }
    *cp = tandem_utf8_cp(rx->s + rx->pos, n);
    rx->pos += n;
    return 0;
}

/* Reads exactly ndigits hex digits, or "{h...}" (1-8 digits) when braces is set and one is
 * there. start is the offset of the escape, for messages. */
static int read_hex(struct rx *rx, int ndigits, bool braces, size_t start, uint32_t *out)
{
    uint32_t v = 0;
    if (braces && peek(rx) == '{') {
        rx->pos++;
        int n = 0;
        while (!at_end(rx) && peek(rx) != '}') {
            int d = tandem_hex_digit(peek(rx));
            if (d < 0 || n == 8) {
                return rx_fail(rx, -EINVAL, start, "bad hex escape");
            }
            v = v * 16 + (uint32_t)d;
            n++;
            rx->pos++;
        }
        if (at_end(rx) || n == 0) {
            return rx_fail(rx, -EINVAL, start, "bad hex escape");
        }
        rx->pos++;
    } else {
        for (int i = 0; i < ndigits; i++) {
            int d = tandem_hex_digit(peek(rx));
            if (d < 0) {
                return rx_fail(rx, -EINVAL, start, "bad hex escape");
            }
            v = v * 16 + (uint32_t)d;
            rx->pos++;
        }
    }
    if (v > RX_MAX_CP) {
        return rx_fail(rx, -EINVAL, start, "code point above U+10FFFF");
    }
    *out = v;
    return 0;
}

/* \uHHHH, joining a UTF-16 surrogate pair written as two escapes. */
static int read_u_escape(struct rx *rx, size_t start, uint32_t *cp)
{
    bool braced = peek(rx) == '{';
    int rc = read_hex(rx, 4, true, start, cp);
    if (rc != 0 || *cp < 0xD800 || *cp > 0xDFFF) {
        return rc;
    }
    if (!braced && *cp <= 0xDBFF && rx->pos + 6 <= rx->len && rx->s[rx->pos] == '\\' &&
        rx->s[rx->pos + 1] == 'u') {
        size_t save = rx->pos;
        uint32_t low = 0;
        rx->pos += 2;
        if (read_hex(rx, 4, false, start, &low) == 0 && low >= 0xDC00 && low <= 0xDFFF) {
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
            return 0;
        }
        rx->pos = save;
    }
    return rx_fail(rx, -EINVAL, start, "lone surrogate escape");
}

/*
 * Parses the escape whose backslash is at rx->pos. A single character sets *cp and *set = 0; a
 * predefined set (\d \D \w \W \s \S) sets *set to its letter. Inside a class \b is a backspace.
 */
static int parse_escape(struct rx *rx, bool in_class, uint32_t *cp, int *set)
{
    size_t start = rx->pos;
    *set = 0;
    rx->pos++;
    if (at_end(rx)) {
        return rx_fail(rx, -EINVAL, start, "trailing backslash");
    }
    int c = peek(rx);
    if (c >= 0x80) {
        return read_cp(rx, cp);
    }
    rx->pos++;
    switch (c) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S':
        *set = c;
        return 0;
    case 'n':
        *cp = '\n';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 'f':
        *cp = '\f';
        return 0;
    case 'v':
        *cp = '\v';
        return 0;
    case 'a':
        *cp = 0x07;
        return 0;
    case '0':
        if (peek(rx) >= '0' && peek(rx) <= '9') {
            return rx_fail(rx, -EINVAL, start, "unsupported octal escape");
        }
        *cp = 0;
        return 0;
    case 'x':
        return read_hex(rx, 2, true, start, cp);
    case 'u':
        return read_u_escape(rx, start, cp);
    case 'U': {
        int rc = read_hex(rx, 8, false, start, cp);
        if (rc == 0 && *cp >= 0xD800 && *cp <= 0xDFFF) {
            return rx_fail(rx, -EINVAL, start, "lone surrogate escape");
        }
        return rc;
    }
    case 'b':
        if (in_class) {
            *cp = 0x08;
            return 0;
        }
        return rx_fail(rx, -EINVAL, start, "unsupported word boundary \\b");
    case 'B':
        return rx_fail(rx, -EINVAL, start, "unsupported word boundary \\B");
    case 'A':
    case 'Z':
    case 'z':
    case 'G':
        return rx_fail(rx, -EINVAL, start, "unsupported anchor \\%c", c);
    case 'k':
        return rx_fail(rx, -EINVAL, start, "unsupported backreference \\k");
    case 'p':
    case 'P':
        return rx_fail(rx, -EINVAL, start, "unsupported Unicode property \\%c", c);
    default:
        break;
    }
    if (c >= '1' && c <= '9') {
        return rx_fail(rx, -EINVAL, start, "unsupported backreference \\%c", c);
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        return rx_fail(rx, -EINVAL, start, "unsupported escape \\%c", c);
    }
    *cp = (uint32_t)c; /* an escaped punctuation character or digit-free symbol stands for itself */
    return 0;
}

/* The ranges of \d \w \s (or their upper-case complements: the return value is 1 then).
 * in_negated: the set is part of a [^...] class. */
static int set_ranges(int letter, bool in_negated, const struct rx_range **set, size_t *n)
{
    bool upper = letter >= 'A' && letter <= 'Z';
    bool wide = upper != in_negated; /* complemented once: \D or [^\d], not [^\D] */
    switch (letter) {
    case 'd':
    case 'D':
        *set = wide ? set_digit_wide : set_digit;
        *n = wide ? ARRAY_SIZE(set_digit_wide) : ARRAY_SIZE(set_digit);
        break;
    case 'w':
    case 'W':
        *set = wide ? set_word_wide : set_word;
        *n = wide ? ARRAY_SIZE(set_word_wide) : ARRAY_SIZE(set_word);
        break;
    default:
        *set = wide ? set_space_wide : set_space_narrow;
        *n = wide ? ARRAY_SIZE(set_space_wide) : ARRAY_SIZE(set_space_narrow);
        break;
    }
    return upper;
}

/* One class item: a character (*set = 0) or a predefined set (already added to the ranges). */
static int class_item(struct rx *rx, bool negated, uint32_t *cp, int *set)
{
    *set = 0;
    if (peek(rx) != '\\') {
        return read_cp(rx, cp);
    }
    int rc = parse_escape(rx, true, cp, set);
    if (rc == 0 && *set) {
        const struct rx_range *ranges;
        size_t n;
        bool complement = set_ranges(*set, negated, &ranges, &n);
        rc = range_add_set(rx, ranges, n, complement);
    }
    return rc;
}

/* [...] at rx->pos. */
static long parse_class(struct rx *rx)
{
    size_t start = rx->pos++;
    bool negate = false;
    if (peek(rx) == '^') {
        negate = true;
        rx->pos++;
    }
    size_t first = rx->n_ranges;
    bool first_item = true;
    for (;;) {
        if (at_end(rx)) {
            return rx_fail(rx, -EINVAL, start, "missing ] for the class");
        }
        if (peek(rx) == ']' && !first_item) {
            rx->pos++;
            break;
        }
        first_item = false;
        size_t item_at = rx->pos;
        uint32_t lo, hi;
        int set;
        int rc = class_item(rx, negate, &lo, &set);
        if (rc != 0) {
            return rc;
        }
        if (peek(rx) != '-' || rx->pos + 1 >= rx->len || rx->s[rx->pos + 1] == ']') {
            if (!set && (rc = range_add(rx, lo, lo)) != 0) {
                return rc;
            }
            continue;
        }
        rx->pos++; /* '-' */
        int set_hi;
        if ((rc = class_item(rx, negate, &hi, &set_hi)) != 0) {
            return rc;
        }
        if (set || set_hi) {
            return rx_fail(rx, -EINVAL, item_at, "bad class range (a set cannot be an end)");
        }
        if (hi < lo) {
            return rx_fail(rx, -EINVAL, item_at, "reversed class range");
        }
        if ((rc = range_add(rx, lo, hi)) != 0) {
            return rc;
        }
    }
    long count = class_finish(rx, first, negate);
    if (count == 0) {
        return rx_fail(rx, -EINVAL, start, "class matches no character");
    }
    return count < 0 ? count : make_class_node(rx, first, (size_t)count);
}

/* ---- parser ---- */

static long parse_alt(struct rx *rx);

static bool is_name_char(int c, bool first)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && c >= '0' && c <= '9');
}

/* (...) at rx->pos. */
static long parse_group(struct rx *rx)
{
    size_t start = rx->pos++;
    if (peek(rx) == '?') {
        rx->pos++;
        int c = peek(rx);
        int next = rx->pos + 1 < rx->len ? rx->s[rx->pos + 1] : -1;
        if (c == ':') {
            rx->pos++;
        } else if ((c == 'P' && next == '<') || (c == '<' && next != '=' && next != '!')) {
            rx->pos += c == 'P' ? 2 : 1;
            size_t name_at = rx->pos;
            while (!at_end(rx) && is_name_char(peek(rx), rx->pos == name_at)) {
                rx->pos++;
            }
            if (rx->pos == name_at || peek(rx) != '>') {
                return rx_fail(rx, -EINVAL, start, "bad group name");
            }
            rx->pos++;
        } else if (c == '=' || c == '!' || c == '<') {
            return rx_fail(rx, -EINVAL, start, "unsupported lookaround (?%c", c);
        } else if (c == 'P' && next == '=') {
            return rx_fail(rx, -EINVAL, start, "unsupported backreference (?P=");
        } else if (c == '>') {
            return rx_fail(rx, -EINVAL, start, "unsupported atomic group (?>");
        } else if (c == '#') {
            return rx_fail(rx, -EINVAL, start, "unsupported comment group (?#");
        } else {
            return rx_fail(rx, -EINVAL, start, "unsupported inline flags or group (?");
        }
    }
    if (++rx->depth > REGEX_MAX_DEPTH) {
        return rx_fail(rx, -EINVAL, start, "groups nested deeper than %d", REGEX_MAX_DEPTH);
    }
    long node = parse_alt(rx);
    rx->depth--;
    if (node < 0) {
        return node;
    }
    if (peek(rx) != ')') {
        return rx_fail(rx, -EINVAL, start, "missing ) for the group");
    }
    rx->pos++;
    return node;
}

static int read_count(struct rx *rx, int *out)
{
    long v = 0;
    size_t start = rx->pos;
    while (peek(rx) >= '0' && peek(rx) <= '9') {
        if (v <= REGEX_MAX_REPEAT) {
            v = v * 10 + (peek(rx) - '0');
        }
        rx->pos++;
    }
    *out = (int)(v > REGEX_MAX_REPEAT ? REGEX_MAX_REPEAT + 1 : v);
    return rx->pos > start;
}

/*
 * A {n}, {n,}, {n,m} or {,m} quantifier at rx->pos: 1 with the bounds (pos after it), 0 when the
 * brace is not a quantifier (it is then a literal '{', as in Python; pos unchanged).
 */
static int parse_braces(struct rx *rx, int *min, int *max)
{
    size_t save = rx->pos;
    rx->pos++;
    int lo = 0, hi;
    int has_lo = read_count(rx, &lo);
    if (peek(rx) == '}' && has_lo) {
        rx->pos++;
        *min = *max = lo;
        return 1;
    }
    if (peek(rx) == ',') {
        rx->pos++;
        int has_hi = read_count(rx, &hi);
        if (peek(rx) == '}' && (has_lo || has_hi)) {
            rx->pos++;
            *min = has_lo ? lo : 0;
            *max = has_hi ? hi : -1;
            return 1;
        }
    }
    rx->pos = save;
    return 0;
}

/* A quantifier at rx->pos: 1 with bounds, 0 when there is none. */
static int parse_quantifier(struct rx *rx, int *min, int *max)
{
    switch (peek(rx)) {
    case '*':
        rx->pos++;
        *min = 0;
        *max = -1;
        return 1;
    case '+':
        rx->pos++;
        *min = 1;
        *max = -1;
        return 1;
    case '?':
        rx->pos++;
        *min = 0;
        *max = 1;
        return 1;
    case '{':
        return parse_braces(rx, min, max);
    default:
        return 0;
    }
}

/* The quantifiers after an atom, applied to it. */
static long parse_quantified(struct rx *rx, long atom)
{
    size_t at = rx->pos;
    int min, max;
    if (!parse_quantifier(rx, &min, &max)) {
        return atom;
    }
    if (min > REGEX_MAX_REPEAT || max > REGEX_MAX_REPEAT) {
        return rx_fail(rx, -E2BIG, at, "repetition count above %d", REGEX_MAX_REPEAT);
    }
    if (max >= 0 && min > max) {
        return rx_fail(rx, -EINVAL, at, "repetition minimum above its maximum");
    }
    if (peek(rx) == '?') {
        rx->pos++; /* lazy: the same language */
    } else if (peek(rx) == '+') {
        return rx_fail(rx, -EINVAL, rx->pos, "unsupported possessive quantifier");
    }
    size_t again = rx->pos;
    int min2, max2;
    if (parse_quantifier(rx, &min2, &max2)) {
        return rx_fail(rx, -EINVAL, again, "multiple repeat");
    }
    long node = make_repeat(rx, (uint32_t)atom, min, max);
    if (node >= 0 && rx->nodes[node].weight > RX_MAX_WEIGHT) {
        return rx_fail(rx, -E2BIG, at, "regex too large when repetitions are expanded");
    }
    return node;
}

static long parse_atom(struct rx *rx)
{
    size_t at = rx->pos;
    int c = peek(rx);
    int min, max;
    switch (c) {
    case '(':
        return parse_group(rx);
    case '[':
        return parse_class(rx);
    case '.':
        rx->pos++;
        return make_set_class(rx, set_dot, ARRAY_SIZE(set_dot), false);
    case '*':
    case '+':
    case '?':
        return rx_fail(rx, -EINVAL, at, "nothing to repeat before '%c'", c);
    case '{':
        if (parse_braces(rx, &min, &max)) {
            return rx_fail(rx, -EINVAL, at, "nothing to repeat before '{'");
        }
        rx->pos++;
        return make_char(rx, '{');
    case '\\': {
        uint32_t cp = 0;
        int set = 0;
        int rc = parse_escape(rx, false, &cp, &set);
        if (rc != 0) {
            return rc;
        }
        if (set) {
            const struct rx_range *ranges;
            size_t n;
            bool complement = set_ranges(set, false, &ranges, &n);
            return make_set_class(rx, ranges, n, complement);
        }
        return make_char(rx, cp);
    }
    default: {
        uint32_t cp = 0;
        int rc = read_cp(rx, &cp);
        return rc != 0 ? rc : make_char(rx, cp);
    }
    }
}

/* A sequence up to '|', ')' or the end. At the top level a branch may start with ^ and end
 * with $ (the match is of the whole text anyway); anywhere else they are refused. */
static long parse_seq(struct rx *rx)
{
    struct rx_list items = {0};
    long rc = 0;
    bool top = rx->depth == 0;
    while (!at_end(rx) && peek(rx) != '|' && peek(rx) != ')') {
        size_t at = rx->pos;
        if (peek(rx) == '^') {
            if (!top || items.n > 0 || (at > 0 && rx->s[at - 1] != '|')) {
                rc = rx_fail(rx, -EINVAL, at, "unsupported anchor ^ inside the regex");
                break;
            }
            rx->pos++;
            continue;
        }
        if (peek(rx) == '$') {
            if (!top || (at + 1 < rx->len && rx->s[at + 1] != '|')) {
                rc = rx_fail(rx, -EINVAL, at, "unsupported anchor $ inside the regex");
                break;
            }
            rx->pos++;
            continue;
        }
        long atom = parse_atom(rx);
        if (atom >= 0) {
            atom = parse_quantified(rx, atom);
        }
        if (atom < 0) {
            rc = atom;
            break;
        }
        if (list_push(&items, (uint32_t)atom) != 0) {
            rc = rx_oom(rx);
            break;
        }
    }
    if (rc == 0) {
        rc = make_cat(rx, items.v, items.n);
    }
    list_free(&items);
    if (rc >= 0 && rx->nodes[rc].weight > RX_MAX_WEIGHT) {
        rc = rx_fail(rx, -E2BIG, rx->pos, "regex too large when repetitions are expanded");
    }
    return rc;
}

static long parse_alt(struct rx *rx)
{
    struct rx_list branches = {0};
    long rc = 0;
    for (;;) {
        long seq = parse_seq(rx);
        if (seq < 0) {
            rc = seq;
            break;
        }
        if (list_push(&branches, (uint32_t)seq) != 0) {
            rc = rx_oom(rx);
            break;
        }
        if (peek(rx) != '|') {
            break;
        }
        rx->pos++;
    }
    if (rc == 0) {
        rc = make_alt(rx, branches.v, branches.n);
    }
    list_free(&branches);
    return rc;
}

/* ---- printing ---- */

static void put_hex_escape(struct buf *out, uint32_t cp)
{
    if (cp < 0x80) {
        buf_appendf(out, "\\x%02X", (unsigned)cp);
    } else if (cp <= 0xFFFF) {
        buf_appendf(out, "\\u%04X", (unsigned)cp);
    } else {
        buf_appendf(out, "\\U%08X", (unsigned)cp);
    }
}

/* One code point inside a GBNF "literal". */
static void put_lit_cp(struct buf *out, uint32_t cp)
{
    char c = (char)cp;
    if (cp == '"' || cp == '\\') {
        char e[2] = {'\\', c};
        buf_append(out, e, 2);
    } else if (cp == '\n') {
        buf_appends(out, "\\n");
    } else if (cp == '\t') {
        buf_appends(out, "\\t");
    } else if (cp == '\r') {
        buf_appends(out, "\\r");
    } else if (cp >= 0x20 && cp < 0x7F) {
        buf_append(out, &c, 1);
    } else {
        put_hex_escape(out, cp);
    }
}

/* One code point inside a GBNF [class]. */
static void put_class_cp(struct buf *out, uint32_t cp)
{
    char c = (char)cp;
    if (cp > 0x20 && cp < 0x7F && strchr("\\]-^[\"", c)) {
        char e[2] = {'\\', c};
        buf_append(out, e, 2);
    } else if (cp > 0x20 && cp < 0x7F) {
        buf_append(out, &c, 1);
    } else {
        put_hex_escape(out, cp);
    }
}

/* The canonical escaped form of cp inside a JSON string, into text (6 entries); returns
 * its length. Code points outside the escaped set are written as themselves (cp itself, as one
 * entry, so the caller prints it as one code point). */
static size_t json_form(uint32_t cp, uint32_t text[6])
{
    static const char hex[] = "0123456789abcdef";
    const char *named = cp == '"'    ? "\\\""
                        : cp == '\\' ? "\\\\"
                        : cp == 0x08 ? "\\b"
                        : cp == 0x09 ? "\\t"
                        : cp == 0x0A ? "\\n"
                        : cp == 0x0C ? "\\f"
                        : cp == 0x0D ? "\\r"
                                     : NULL;
    if (named) {
        text[0] = (unsigned char)named[0];
        text[1] = (unsigned char)named[1];
        return 2;
    }
    if (cp < 0x20) {
        text[0] = '\\';
        text[1] = 'u';
        text[2] = '0';
        text[3] = '0';
        text[4] = (unsigned char)hex[cp >> 4];
        text[5] = (unsigned char)hex[cp & 15];
        return 6;
    }
    text[0] = cp;
    return 1;
}

static void put_literal_cp(const struct rx *rx, struct buf *out, uint32_t cp)
{
    uint32_t text[6] = {cp};
    size_t n = rx->json ? json_form(cp, text) : 1;
    for (size_t i = 0; i < n; i++) {
        put_lit_cp(out, text[i]);
    }
}

static void put_ranges(struct buf *out, const struct rx_range *r, size_t n)
{
    if (n == 1 && r[0].lo == r[0].hi) {
        buf_appends(out, "\"");
        put_lit_cp(out, r[0].lo);
        buf_appends(out, "\"");
        return;
    }
    buf_appends(out, "[");
    for (size_t i = 0; i < n; i++) {
        put_class_cp(out, r[i].lo);
        if (r[i].hi > r[i].lo + 1) {
            buf_appends(out, "-");
        }
        if (r[i].hi > r[i].lo) {
            put_class_cp(out, r[i].hi);
        }
    }
    buf_appends(out, "]");
}

static bool class_has(const struct rx_range *r, size_t n, uint32_t cp)
{
    for (size_t i = 0; i < n; i++) {
        if (cp >= r[i].lo && cp <= r[i].hi) {
            return true;
        }
    }
    return false;
}

/* A [class] of the hex digits digits[0..n) (ascending), runs of three or more consecutive
 * characters written as ranges. */
static void put_hex_digits(struct buf *out, const char *digits, size_t n)
{
    buf_appends(out, "[");
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && digits[j + 1] == digits[j] + 1) {
            j++;
        }
        if (j >= i + 2) {
            buf_appendf(out, "%c-%c", digits[i], digits[j]);
        } else {
            buf_append(out, digits + i, j - i + 1);
        }
        i = j + 1;
    }
    buf_appends(out, "]");
}

/*
 * A class in json_string mode: the characters written as themselves as one [class], and the
 * escaped ones as literals ("\\\"", "\\n", "\\u001" [0-9a-f] ...), as one parenthesized term when
 * there is more than one alternative.
 */
static void put_json_class(struct buf *out, const struct rx_range *r, size_t n)
{
    static const struct rx_range plain[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, RX_MAX_CP}};
    static const char hex[] = "0123456789abcdef";
    struct rx_range cut[64];
    size_t n_cut = 0;
    size_t alts = 0;
    bool two_terms = false; /* an alternative of the form "\\u000" [...] */
    struct buf tmp;
    buf_init(&tmp, out->max);
    /* the plain part: r intersected with plain, at most n + 2 ranges, printed in pieces */
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < ARRAY_SIZE(plain); j++) {
            uint32_t lo = r[i].lo > plain[j].lo ? r[i].lo : plain[j].lo;
            uint32_t hi = r[i].hi < plain[j].hi ? r[i].hi : plain[j].hi;
            if (lo > hi) {
                continue;
            }
            if (n_cut == ARRAY_SIZE(cut)) { /* flush a chunk: classes may be long */
                put_ranges(&tmp, cut, n_cut);
                buf_appends(&tmp, " | ");
                alts++;
                n_cut = 0;
            }
            cut[n_cut++] = (struct rx_range){lo, hi};
        }
    }
    if (n_cut > 0) {
        put_ranges(&tmp, cut, n_cut);
        buf_appends(&tmp, " | ");
        alts++;
    }
    static const uint32_t named[] = {'"', '\\', 0x08, 0x09, 0x0A, 0x0C, 0x0D};
    for (size_t i = 0; i < ARRAY_SIZE(named); i++) {
        if (class_has(r, n, named[i])) {
            uint32_t text[6];
            size_t len = json_form(named[i], text);
            buf_appends(&tmp, "\"");
            for (size_t k = 0; k < len; k++) {
                put_lit_cp(&tmp, text[k]);
            }
            buf_appends(&tmp, "\" | ");
            alts++;
        }
    }
    for (uint32_t high = 0; high < 2; high++) {
        char digits[16];
        size_t nd = 0;
        for (uint32_t low = 0; low < 16; low++) {
            uint32_t cp = high * 16 + low;
            uint32_t text[6];
            if (class_has(r, n, cp) && json_form(cp, text) == 6) {
                digits[nd++] = hex[low];
            }
        }
        if (nd == 0) {
            continue;
        }
        if (nd == 1) {
            buf_appendf(&tmp, "\"\\\\u00%u%c\" | ", (unsigned)high, digits[0]);
        } else {
            buf_appendf(&tmp, "\"\\\\u00%u\" ", (unsigned)high);
            put_hex_digits(&tmp, digits, nd);
            buf_appends(&tmp, " | ");
            two_terms = true;
        }
        alts++;
    }
    if (buf_error(&tmp) || tmp.len < 3) { /* classes are never empty: only a full buffer */
        buf_set_error(out, buf_error(&tmp) ? buf_error(&tmp) : -ENOSPC);
        buf_free(&tmp);
        return;
    }
    bool wrap = alts > 1 || two_terms;
    buf_appends(out, wrap ? "(" : "");
    buf_append(out, tmp.data, tmp.len - 3);
    buf_appends(out, wrap ? ")" : "");
    buf_free(&tmp);
}

/* Prints node i; term: the result must be one term (parenthesized when it is not). */
static void put_node(const struct rx *rx, uint32_t i, bool term, struct buf *out)
{
    const struct rx_node *n = &rx->nodes[i];
    switch (n->kind) {
    case RX_EMPTY:
        buf_appends(out, "\"\"");
        return;
    case RX_CHAR:
        buf_appends(out, "\"");
        put_literal_cp(rx, out, n->cp);
        buf_appends(out, "\"");
        return;
    case RX_CLASS:
        if (rx->json) {
            put_json_class(out, rx->ranges + n->first, n->count);
        } else {
            put_ranges(out, rx->ranges + n->first, n->count);
        }
        return;
    case RX_ALT:
        buf_appends(out, term ? "(" : "");
        for (size_t k = 0; k < n->count; k++) {
            buf_appends(out, k ? " | " : "");
            put_node(rx, rx->kids[n->first + k], false, out);
        }
        buf_appends(out, term ? ")" : "");
        return;
    case RX_REPEAT:
        if (rx->nodes[n->child].kind == RX_REPEAT) { /* one postfix operator per term */
            buf_appends(out, "(");
            put_node(rx, n->child, true, out);
            buf_appends(out, ")");
        } else {
            put_node(rx, n->child, true, out);
        }
        if (n->min == 0 && n->max == 1) {
            buf_appends(out, "?");
        } else if (n->max < 0 && n->min <= 1) {
            buf_appends(out, n->min ? "+" : "*");
        } else if (n->max < 0) {
            buf_appendf(out, "{%d,}", n->min);
        } else if (n->min == n->max) {
            buf_appendf(out, "{%d}", n->min);
        } else {
            buf_appendf(out, "{%d,%d}", n->min, n->max);
        }
        return;
    case RX_CAT:
        break;
    }
    /* a concatenation: runs of characters become one literal */
    size_t terms = 0;
    for (size_t k = 0; k < n->count; k++) {
        bool is_char = rx->nodes[rx->kids[n->first + k]].kind == RX_CHAR;
        bool run = k > 0 && is_char && rx->nodes[rx->kids[n->first + k - 1]].kind == RX_CHAR;
        terms += !run;
    }
    buf_appends(out, term && terms > 1 ? "(" : "");
    for (size_t k = 0; k < n->count; k++) {
        const struct rx_node *c = &rx->nodes[rx->kids[n->first + k]];
        bool prev_char = k > 0 && rx->nodes[rx->kids[n->first + k - 1]].kind == RX_CHAR;
        bool next_char = k + 1 < n->count && rx->nodes[rx->kids[n->first + k + 1]].kind == RX_CHAR;
        if (c->kind != RX_CHAR) {
            buf_appends(out, k ? " " : "");
            put_node(rx, rx->kids[n->first + k], true, out);
            continue;
        }
        if (!prev_char) {
            buf_appends(out, k ? " \"" : "\"");
        }
        put_literal_cp(rx, out, c->cp);
        if (!next_char) {
            buf_appends(out, "\"");
        }
    }
    buf_appends(out, term && terms > 1 ? ")" : "");
}

int regex_to_gbnf(const char *re, size_t len, bool json_string, struct buf *out, char *err,
                  size_t errlen)
{
    struct rx rx = {.s = (const unsigned char *)re, .len = len, .json = json_string};
    rx.err = err;
    rx.errlen = errlen;
    if (err && errlen) {
        err[0] = '\0';
    }
    long rc;
    if (len > RX_MAX_LEN) {
        rc = rx_fail(&rx, -E2BIG, 0, "regex longer than %zu bytes", RX_MAX_LEN);
    } else if (len > 0 && !re) {
        rc = rx_fail(&rx, -EINVAL, 0, "no regex text");
    } else {
        rc = parse_alt(&rx);
    }
    if (rc >= 0 && !at_end(&rx)) { /* only a ')' stops the top level early */
        rc = rx_fail(&rx, -EINVAL, rx.pos, "unbalanced )");
    }
    if (rc >= 0 && rx.nodes[rc].weight > RX_MAX_WEIGHT) {
        rc = rx_fail(&rx, -E2BIG, 0, "regex too large when repetitions are expanded");
    }
    if (rc >= 0) {
        put_node(&rx, (uint32_t)rc, false, out);
        int brc = buf_error(out);
        rc = brc == -ENOMEM ? rx_fail(&rx, -ENOMEM, 0, "out of memory")
             : brc != 0     ? rx_fail(&rx, -E2BIG, 0, "grammar text too long")
                            : 0;
    }
    free(rx.nodes);
    free(rx.ranges);
    free(rx.kids);
    return (int)rc;
}
