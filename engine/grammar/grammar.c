/*
 * The matcher: a set of automaton stacks advanced one byte at a time (grammar_internal.h has the
 * representation). Advancing reads the byte with every stack whose top set holds it and then
 * expands the result until every stack's top is a byte set again:
 *   - a call pushes the caller's continuation and starts each alternative of the callee; a call
 *     that ends its alternative pushes nothing (its continuation is the caller's own return), so
 *     right recursion and expanded repetitions do not deepen stacks;
 *   - the end of an alternative returns to the node below; at the bottom the stack becomes the
 *     empty stack, "may end here".
 * Equal stacks are merged (hash of the chain, then a walk), so an ambiguous grammar costs at
 * most its number of distinct stacks, capped at GRAMMAR_MAX_STACKS.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_internal.h"

struct gwork {
    uint32_t pos;    /* element to expand */
    uint32_t parent; /* its return node */
    uint32_t node;   /* the node itself when it exists already, else GSTACK_NIL */
};

struct gvisit {
    uint32_t gen; /* the step it belongs to; older entries count as empty */
    uint32_t pos;
    uint32_t parent;
};

#define NIL_HASH 0x9E3779B97F4A7C15ull

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t node_hash(const grammar_matcher *m, uint32_t idx)
{
    return idx == GSTACK_NIL ? NIL_HASH : m->nodes[idx].hash;
}

static int grow_u32(uint32_t **p, uint32_t *cap, uint32_t need)
{
    if (need <= *cap) {
        return 0;
    }
    uint32_t c = *cap ? *cap : 16;
    while (c < need) {
        c *= 2;
    }
    uint32_t *q = realloc(*p, (size_t)c * sizeof *q);
    if (!q) {
        return -ENOMEM;
    }
    *p = q;
    *cap = c;
    return 0;
}

static int new_node(grammar_matcher *m, uint32_t pos, uint32_t parent, uint32_t *out)
{
    if (m->n_nodes == m->cap_nodes) {
        if (m->cap_nodes >= (UINT32_MAX - 1) / 2) {
            return -E2BIG;
        }
        uint32_t cap = m->cap_nodes ? m->cap_nodes * 2 : 256;
        struct gnode *n = realloc(m->nodes, (size_t)cap * sizeof *n);
        if (!n) {
            return -ENOMEM;
        }
        m->nodes = n;
        m->cap_nodes = cap;
    }
    struct gnode *n = &m->nodes[m->n_nodes];
    n->pos = pos;
    n->parent = parent;
    n->hash = mix(node_hash(m, parent) * 31 + pos + 1);
    *out = m->n_nodes++;
    return 0;
}

static bool stack_eq(const grammar_matcher *m, uint32_t a, uint32_t b)
{
    while (a != b) {
        if (a == GSTACK_NIL || b == GSTACK_NIL || m->nodes[a].pos != m->nodes[b].pos ||
            m->nodes[a].hash != m->nodes[b].hash) {
            return false;
        }
        a = m->nodes[a].parent;
        b = m->nodes[b].parent;
    }
    return true;
}

/* Adds stack s to out unless an equal one is there. The table holds the indices of this step's
 * output; a generation counter clears it without a memset. */
static int add_stack(grammar_matcher *m, uint32_t s, uint32_t *out, uint32_t cap, uint32_t *n_out)
{
    uint32_t mask = m->cap_seen - 1;
    uint32_t j = (uint32_t)node_hash(m, s) & mask;
    for (; m->seen_gen[j] == m->gen; j = (j + 1) & mask) {
        if (stack_eq(m, out[m->seen[j]], s)) {
            return 0;
        }
    }
    if (*n_out >= cap) {
        return -E2BIG;
    }
    m->seen_gen[j] = m->gen;
    m->seen[j] = *n_out;
    out[(*n_out)++] = s;
    return 0;
}

static int visit_grow(grammar_matcher *m)
{
    uint32_t cap = m->cap_visit ? m->cap_visit * 2 : 256;
    struct gvisit *t = calloc(cap, sizeof *t);
    if (!t) {
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < m->cap_visit; i++) {
        const struct gvisit *v = &m->visit[i];
        if (v->gen == m->visit_gen) {
            uint32_t j =
                (uint32_t)mix(v->pos * 0x9E3779B1ull ^ node_hash(m, v->parent)) & (cap - 1);
            while (t[j].gen == m->visit_gen) {
                j = (j + 1) & (cap - 1);
            }
            t[j] = *v;
        }
    }
    free(m->visit);
    m->visit = t;
    m->cap_visit = cap;
    return 0;
}

/* 1 when element pos over return stack parent was expanded already in this step (equal stacks
 * expand alike, so once is enough), else records it and returns 0; -ENOMEM. */
static int visited(grammar_matcher *m, uint32_t pos, uint32_t parent)
{
    if (2 * (m->n_visit + 1) > m->cap_visit && visit_grow(m) != 0) {
        return -ENOMEM;
    }
    uint32_t mask = m->cap_visit - 1;
    uint32_t j = (uint32_t)mix(pos * 0x9E3779B1ull ^ node_hash(m, parent)) & mask;
    for (; m->visit[j].gen == m->visit_gen; j = (j + 1) & mask) {
        if (m->visit[j].pos == pos && stack_eq(m, m->visit[j].parent, parent)) {
            return 1;
        }
    }
    m->visit[j] = (struct gvisit){m->visit_gen, pos, parent};
    m->n_visit++;
    return 0;
}

static void visit_clear(grammar_matcher *m)
{
    m->n_visit = 0;
    if (++m->visit_gen == 0) {
        for (uint32_t i = 0; i < m->cap_visit; i++) {
            m->visit[i].gen = 0;
        }
        m->visit_gen = 1;
    }
}

static int push_work(grammar_matcher *m, uint32_t *n_work, uint32_t pos, uint32_t parent,
                     uint32_t node)
{
    if (*n_work == m->cap_work) {
        uint32_t cap = m->cap_work ? m->cap_work * 2 : 64;
        struct gwork *w = realloc(m->work, (size_t)cap * sizeof *w);
        if (!w) {
            return -ENOMEM;
        }
        m->work = w;
        m->cap_work = cap;
    }
    m->work[(*n_work)++] = (struct gwork){pos, parent, node};
    return 0;
}

/* Expands the stack "element pos over return node parent" into stacks whose tops are byte sets
 * (or the empty stack), adding them to out. */
static int expand(grammar_matcher *m, uint32_t pos, uint32_t parent, uint32_t node, uint32_t *out,
                  uint32_t cap, uint32_t *n_out)
{
    const grammar *g = m->g;
    uint32_t n_work = 0;
    int rc = push_work(m, &n_work, pos, parent, node);
    while (rc == 0 && n_work > 0) {
        if (++m->budget > GRAMMAR_MAX_EXPANSION) {
            return -E2BIG; /* an ambiguous grammar whose paths multiply */
        }
        struct gwork w = m->work[--n_work];
        const struct gel *e = &g->elems[w.pos];
        if (e->kind != GEL_SET) {
            int seen = visited(m, w.pos, w.parent);
            if (seen != 0) {
                rc = seen < 0 ? seen : 0;
                continue;
            }
        }
        if (e->kind == GEL_END) {
            if (w.parent == GSTACK_NIL) {
                rc = add_stack(m, GSTACK_NIL, out, cap, n_out);
            } else {
                const struct gnode *p = &m->nodes[w.parent];
                rc = push_work(m, &n_work, p->pos, p->parent, w.parent);
            }
        } else if (e->kind == GEL_SET) {
            uint32_t idx = w.node;
            if (idx == GSTACK_NIL) {
                rc = new_node(m, w.pos, w.parent, &idx);
            }
            if (rc == 0) {
                rc = add_stack(m, idx, out, cap, n_out);
            }
        } else {
            /* a call: its continuation, unless the caller's alternative ends right after it */
            uint32_t cont = w.parent;
            if (g->elems[w.pos + 1].kind != GEL_END) {
                rc = new_node(m, w.pos + 1, w.parent, &cont);
            }
            uint32_t a0 = g->rule_alt0[e->arg], na = g->rule_nalts[e->arg];
            for (uint32_t k = na; rc == 0 && k > 0; k--) {
                rc = push_work(m, &n_work, g->alts[a0 + k - 1], cont, GSTACK_NIL);
            }
        }
    }
    return rc;
}

static int seen_ready(grammar_matcher *m, uint32_t cap)
{
    uint32_t want = 64;
    while (want < 2 * cap) {
        want *= 2;
    }
    if (want > m->cap_seen) {
        uint32_t *s = realloc(m->seen, (size_t)want * sizeof *s);
        if (!s) {
            return -ENOMEM;
        }
        m->seen = s;
        uint32_t *gen = calloc(want, sizeof *gen);
        if (!gen) {
            return -ENOMEM;
        }
        free(m->seen_gen);
        m->seen_gen = gen;
        m->cap_seen = want;
        m->gen = 0;
    }
    if (++m->gen == 0) {
        memset(m->seen_gen, 0, (size_t)m->cap_seen * sizeof *m->seen_gen);
        m->gen = 1;
    }
    return 0;
}

int grammar__step(grammar_matcher *m, const uint32_t *in, uint32_t n_in, uint8_t b, uint32_t *out,
                  uint32_t cap, uint32_t *n_out)
{
    *n_out = 0;
    m->budget = 0;
    visit_clear(m);
    int rc = seen_ready(m, cap);
    for (uint32_t i = 0; rc == 0 && i < n_in; i++) {
        if (in[i] == GSTACK_NIL) {
            continue;
        }
        const struct gnode *top = &m->nodes[in[i]];
        if (!grammar__set_has(m->g->sets[m->g->elems[top->pos].arg], b)) {
            continue;
        }
        uint32_t pos = top->pos + 1, parent = top->parent;
        rc = expand(m, pos, parent, GSTACK_NIL, out, cap, n_out);
    }
    return rc;
}

void grammar__first_bytes(const grammar_matcher *m, const uint32_t *in, uint32_t n,
                          uint64_t bits[4])
{
    bits[0] = bits[1] = bits[2] = bits[3] = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (in[i] != GSTACK_NIL) {
            const uint64_t *s = m->g->sets[m->g->elems[m->nodes[in[i]].pos].arg];
            bits[0] |= s[0];
            bits[1] |= s[1];
            bits[2] |= s[2];
            bits[3] |= s[3];
        }
    }
}

int grammar__compact(grammar_matcher *m)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < m->n_cur; i++) {
        for (uint32_t s = m->cur[i]; s != GSTACK_NIL; s = m->nodes[s].parent) {
            live++;
        }
    }
    if (m->n_nodes < 65536 || m->n_nodes < 4 * live) {
        return 0;
    }
    uint32_t *map = malloc((size_t)m->n_nodes * sizeof *map);
    if (!map) {
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < m->n_nodes; i++) {
        map[i] = 0;
    }
    for (uint32_t i = 0; i < m->n_cur; i++) {
        for (uint32_t s = m->cur[i]; s != GSTACK_NIL && !map[s]; s = m->nodes[s].parent) {
            map[s] = 1;
        }
    }
    /* parents have smaller indices than their children: one ascending pass renumbers */
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->n_nodes; i++) {
        if (map[i]) {
            struct gnode nd = m->nodes[i];
            if (nd.parent != GSTACK_NIL) {
                nd.parent = map[nd.parent] - 1;
            }
            m->nodes[n] = nd;
            map[i] = ++n;
        }
    }
    for (uint32_t i = 0; i < m->n_cur; i++) {
        if (m->cur[i] != GSTACK_NIL) {
            m->cur[i] = map[m->cur[i]] - 1;
        }
    }
    m->n_nodes = n;
    free(map);
    return 0;
}

static int matcher_start(grammar_matcher *m)
{
    m->n_nodes = 0;
    m->n_cur = 0;
    const grammar *g = m->g;
    m->budget = 0;
    visit_clear(m);
    int rc = grow_u32(&m->cur, &m->cap_cur, GRAMMAR_MAX_STACKS);
    if (rc == 0) {
        rc = seen_ready(m, GRAMMAR_MAX_STACKS);
    }
    uint32_t a0 = g->rule_alt0[g->root];
    for (uint32_t k = 0; rc == 0 && k < g->rule_nalts[g->root]; k++) {
        rc = expand(m, g->alts[a0 + k], GSTACK_NIL, GSTACK_NIL, m->cur, GRAMMAR_MAX_STACKS,
                    &m->n_cur);
    }
    return rc;
}

int grammar_matcher_new(const grammar *g, grammar_matcher **out)
{
    *out = NULL;
    grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) {
        return -ENOMEM;
    }
    m->g = g;
    int rc = matcher_start(m);
    if (rc != 0) {
        grammar_matcher_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void grammar_matcher_free(grammar_matcher *m)
{
    if (!m) {
        return;
    }
    free(m->nodes);
    free(m->cur);
    free(m->tmp);
    free(m->save);
    free(m->work);
    free(m->seen);
    free(m->seen_gen);
    free(m->visit);
    free(m);
}

void grammar_matcher_reset(grammar_matcher *m)
{
    /* the buffers exist already: matcher_start cannot fail for want of memory here except
     * through a pathological grammar, which grammar_matcher_new already started once */
    (void)matcher_start(m);
}

int grammar_matcher_feed(grammar_matcher *m, const void *bytes, size_t n)
{
    const uint8_t *p = bytes;
    if (n == 0) {
        return 0;
    }
    int rc = grow_u32(&m->tmp, &m->cap_tmp, GRAMMAR_MAX_STACKS);
    if (rc == 0) {
        rc = grow_u32(&m->save, &m->cap_save, GRAMMAR_MAX_STACKS);
    }
    if (rc != 0) {
        return rc;
    }
    uint32_t mark = m->n_nodes, n_save = m->n_cur;
    memcpy(m->save, m->cur, (size_t)m->n_cur * sizeof *m->cur);
    for (size_t i = 0; i < n; i++) {
        uint32_t n_next;
        rc = grammar__step(m, m->cur, m->n_cur, p[i], m->tmp, GRAMMAR_MAX_STACKS, &n_next);
        if (rc == 0 && n_next == 0) {
            rc = -EINVAL;
        }
        if (rc != 0) {
            m->n_nodes = mark;
            memcpy(m->cur, m->save, (size_t)n_save * sizeof *m->cur);
            m->n_cur = n_save;
            return rc;
        }
        uint32_t *t = m->cur;
        uint32_t tc = m->cap_cur;
        m->cur = m->tmp;
        m->cap_cur = m->cap_tmp;
        m->tmp = t;
        m->cap_tmp = tc;
        m->n_cur = n_next;
    }
    (void)grammar__compact(m); /* an optimisation only: on failure the pool just stays larger */
    return 0;
}

bool grammar_matcher_can_end(const grammar_matcher *m)
{
    for (uint32_t i = 0; i < m->n_cur; i++) {
        if (m->cur[i] == GSTACK_NIL) {
            return true;
        }
    }
    return false;
}

bool grammar_matcher_must_end(const grammar_matcher *m)
{
    return m->n_cur == 1 && m->cur[0] == GSTACK_NIL;
}

int grammar_match(const grammar *g, const void *s, size_t n)
{
    grammar_matcher *m;
    int rc = grammar_matcher_new(g, &m);
    if (rc != 0) {
        return rc;
    }
    rc = grammar_matcher_feed(m, s, n);
    int ok = rc == 0 ? grammar_matcher_can_end(m) : 0;
    grammar_matcher_free(m);
    return rc == -EINVAL ? 0 : rc < 0 ? rc : ok;
}
