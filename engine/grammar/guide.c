/*
 * Token masks from a grammar (guide.h). The vocabulary trie is laid out in depth-first order:
 * node i's children follow it, each child's subtree ends at sub_end[child], so skipping a refused
 * prefix is one index jump. Token ids are sorted by piece, so the ids whose piece ends at a node
 * are one run of `toks`.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_internal.h"
#include "engine/grammar/guide.h"
#include "lib/err.h"

struct tnode {
    uint32_t sub_end; /* index past this node's subtree */
    uint32_t tok0;    /* toks[tok0 .. tok0 + n_tok): ids whose piece ends here */
    uint32_t n_tok;
    uint8_t byte; /* the byte that leads here from the parent (root: unused) */
};

struct guide_vocab {
    struct tnode *nodes;
    uint32_t n_nodes;
    int32_t *toks;
    int32_t n_vocab; /* logits entries */
    uint32_t words;  /* (n_vocab + 63) / 64 */
    uint64_t *eog;   /* bitset of end-of-generation ids */
    const tokenizer *tok;
    uint32_t max_depth; /* longest piece */
};

struct mask_entry {
    uint64_t *key; /* sorted stack hashes */
    uint32_t n_key;
    uint64_t hash;
    uint64_t *bits;
    int32_t n_allowed;
    struct mask_entry *next;
};

struct guide_grammar {
    atomic_int refs;
    grammar *g;
    const guide_vocab *v;
    pthread_mutex_t mu; /* the cache */
    struct mask_entry **buckets;
    uint32_t n_buckets; /* power of two */
    size_t bytes;       /* held by the cache */
    uint64_t hits, misses;
};

/* One transition of a mask walk: from the set whose hash is `from`, byte `byte` leads to
 * sets[off .. off + n) (n = 0: refused), whose hash is `to`. */
struct memo_ent {
    uint64_t from;
    uint64_t to;
    uint32_t off, n;
    uint32_t gen; /* the walk it belongs to; older entries count as empty */
    uint8_t byte;
};

struct guide {
    guide_grammar *gg;
    grammar_matcher *m;
    uint64_t *bits; /* the last mask */
    int32_t n_allowed;
    uint64_t *key; /* scratch: the current state's key */
    uint32_t cap_key;
    uint32_t *sets; /* the stack sets the trie walk met, one after the other */
    uint32_t n_sets, cap_sets;
    struct memo_ent *memo; /* the walk's transitions: (set, byte) -> set */
    uint32_t cap_memo, n_memo, memo_gen;
    uint64_t *hashes; /* scratch for set hashes */
    uint32_t cap_hashes;
};

/* ---- vocabulary ---- */

struct piece_ref {
    const char *p;
    size_t len;
    int32_t id;
};

static int cmp_piece(const void *a, const void *b)
{
    const struct piece_ref *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c != 0) {
        return c;
    }
    return x->len < y->len ? -1 : x->len > y->len;
}

int guide_vocab_new(const tokenizer *t, int32_t n_vocab, const int32_t *eog_ids, size_t n_eog,
                    guide_vocab **out)
{
    *out = NULL;
    if (n_vocab < 1) {
        return -EINVAL;
    }
    guide_vocab *v = calloc(1, sizeof *v);
    int32_t n_tok = tokenizer_n_vocab(t);
    if (n_tok > n_vocab) {
        n_tok = n_vocab;
    }
    struct piece_ref *refs = malloc(((size_t)n_tok + 1) * sizeof *refs);
    if (!v || !refs) {
        goto oom;
    }
    v->n_vocab = n_vocab;
    v->words = (uint32_t)((n_vocab + 63) / 64);
    v->tok = t;
    v->eog = calloc(v->words, sizeof *v->eog);
    if (!v->eog) {
        goto oom;
    }
    for (size_t i = 0; i < n_eog; i++) {
        if (eog_ids[i] >= 0 && eog_ids[i] < n_vocab) {
            v->eog[eog_ids[i] / 64] |= (uint64_t)1 << (eog_ids[i] % 64);
        }
    }
    size_t n = 0, total = 1;
    for (int32_t id = 0; id < n_tok; id++) {
        size_t len = 0;
        const char *p = tokenizer_piece(t, id, &len);
        if (!p || len == 0 || tokenizer_is_special(t, id)) {
            continue;
        }
        refs[n++] = (struct piece_ref){p, len, id};
        total += len;
    }
    qsort(refs, n, sizeof *refs, cmp_piece);
    v->nodes = malloc(total * sizeof *v->nodes);
    v->toks = malloc((n + 1) * sizeof *v->toks);
    uint32_t *path = malloc((total + 1) * sizeof *path); /* node index per depth */
    if (!v->nodes || !v->toks || !path) {
        free(path);
        goto oom;
    }
    /* root */
    v->nodes[0] = (struct tnode){0, 0, 0, 0};
    v->n_nodes = 1;
    path[0] = 0;
    size_t depth = 0; /* depth of the last inserted piece's node */
    const struct piece_ref *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct piece_ref *r = &refs[i];
        size_t common = 0;
        if (prev) {
            while (common < prev->len && common < r->len && prev->p[common] == r->p[common]) {
                common++;
            }
        }
        /* close the nodes of the previous piece below the common prefix */
        for (size_t d = depth; d > common; d--) {
            v->nodes[path[d]].sub_end = v->n_nodes;
        }
        depth = common;
        for (size_t d = common; d < r->len; d++) {
            uint32_t idx = v->n_nodes++;
            v->nodes[idx] = (struct tnode){0, 0, 0, (uint8_t)r->p[d]};
            path[++depth] = idx;
        }
        struct tnode *end = &v->nodes[path[depth]];
        if (end->n_tok == 0) {
            end->tok0 = (uint32_t)i;
        }
        end->n_tok++;
        v->toks[i] = r->id;
        if (r->len > v->max_depth) {
            v->max_depth = (uint32_t)r->len;
        }
        prev = r;
    }
    for (size_t d = depth; d > 0; d--) {
        v->nodes[path[d]].sub_end = v->n_nodes;
    }
    v->nodes[0].sub_end = v->n_nodes;
    free(path);
    free(refs);
    *out = v;
    return 0;
oom:
    free(refs);
    guide_vocab_free(v);
    return -ENOMEM;
}

void guide_vocab_free(guide_vocab *v)
{
    if (!v) {
        return;
    }
    free(v->nodes);
    free(v->toks);
    free(v->eog);
    free(v);
}

/* ---- grammar + cache ---- */

int guide_grammar_new(grammar *g, const guide_vocab *v, guide_grammar **out)
{
    *out = NULL;
    guide_grammar *gg = calloc(1, sizeof *gg);
    if (gg) {
        gg->buckets = calloc(256, sizeof(struct mask_entry *));
    }
    if (!gg || !gg->buckets) {
        free(gg);
        grammar_free(g);
        return -ENOMEM;
    }
    gg->n_buckets = 256;
    atomic_init(&gg->refs, 1);
    gg->g = g;
    gg->v = v;
    pthread_mutex_init(&gg->mu, NULL);
    *out = gg;
    return 0;
}

guide_grammar *guide_grammar_ref(guide_grammar *gg)
{
    atomic_fetch_add(&gg->refs, 1);
    return gg;
}

static void cache_clear(guide_grammar *gg)
{
    for (uint32_t i = 0; i < gg->n_buckets; i++) {
        struct mask_entry *e = gg->buckets[i];
        while (e) {
            struct mask_entry *next = e->next;
            free(e->key);
            free(e->bits);
            free(e);
            e = next;
        }
        gg->buckets[i] = NULL;
    }
    gg->bytes = 0;
}

void guide_grammar_unref(guide_grammar *gg)
{
    if (!gg || atomic_fetch_sub(&gg->refs, 1) != 1) {
        return;
    }
    cache_clear(gg);
    free(gg->buckets);
    pthread_mutex_destroy(&gg->mu);
    grammar_free(gg->g);
    free(gg);
}

const grammar *guide_grammar_get(const guide_grammar *gg)
{
    return gg->g;
}

void guide_grammar_stats(guide_grammar *gg, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&gg->mu);
    *hits = gg->hits;
    *misses = gg->misses;
    pthread_mutex_unlock(&gg->mu);
}

/* ---- one sequence ---- */

int guide_new(guide_grammar *gg, guide **out)
{
    *out = NULL;
    guide *gd = calloc(1, sizeof *gd);
    if (!gd) {
        return -ENOMEM;
    }
    gd->bits = calloc(gg->v->words, sizeof *gd->bits);
    int rc = gd->bits ? grammar_matcher_new(gg->g, &gd->m) : -ENOMEM;
    if (rc != 0) {
        free(gd->bits);
        free(gd);
        return rc;
    }
    gd->gg = guide_grammar_ref(gg);
    *out = gd;
    return 0;
}

void guide_free(guide *gd)
{
    if (!gd) {
        return;
    }
    grammar_matcher_free(gd->m);
    guide_grammar_unref(gd->gg);
    free(gd->bits);
    free(gd->key);
    free(gd->sets);
    free(gd->memo);
    free(gd->hashes);
    free(gd);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The current state's key: its stacks' hashes, sorted (the set's order carries no meaning). */
static int state_key(guide *gd, uint64_t *hash)
{
    const grammar_matcher *m = gd->m;
    if (m->n_cur > gd->cap_key) {
        uint64_t *k = realloc(gd->key, (size_t)m->n_cur * sizeof *k);
        if (!k) {
            return -ENOMEM;
        }
        gd->key = k;
        gd->cap_key = m->n_cur;
    }
    for (uint32_t i = 0; i < m->n_cur; i++) {
        gd->key[i] = m->cur[i] == GSTACK_NIL ? 0 : m->nodes[m->cur[i]].hash;
    }
    qsort(gd->key, m->n_cur, sizeof *gd->key, cmp_u64);
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < m->n_cur; i++) {
        h = (h ^ gd->key[i]) * 1099511628211ull;
    }
    *hash = h;
    return 0;
}

static int sets_reserve(guide *gd, uint32_t need)
{
    if (need <= gd->cap_sets) {
        return 0;
    }
    uint32_t cap = gd->cap_sets ? gd->cap_sets : 1024;
    while (cap < need) {
        cap *= 2;
    }
    uint32_t *s = realloc(gd->sets, (size_t)cap * sizeof *s);
    if (!s) {
        return -ENOMEM;
    }
    gd->sets = s;
    gd->cap_sets = cap;
    return 0;
}

struct walk_frame {
    uint32_t node;  /* trie node whose children are being visited */
    uint32_t child; /* next child to visit */
    uint32_t off;   /* this level's stack set: sets[off .. off + n) */
    uint32_t n;
    uint64_t hash;     /* of the set */
    uint64_t first[4]; /* bytes the set may read */
};

/* Hash of the stack set sets[off .. off + n): its stacks' hashes, sorted, combined. Two sets with
 * the same hash are taken to be the same set (64-bit hashes of whole stack chains). */
static int set_hash(guide *gd, uint32_t off, uint32_t n, uint64_t *out)
{
    const grammar_matcher *m = gd->m;
    if (n > gd->cap_hashes) {
        uint64_t *h = realloc(gd->hashes, (size_t)n * sizeof *h);
        if (!h) {
            return -ENOMEM;
        }
        gd->hashes = h;
        gd->cap_hashes = n;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = gd->sets[off + i];
        gd->hashes[i] = s == GSTACK_NIL ? 0 : m->nodes[s].hash;
    }
    if (n > 1) {
        qsort(gd->hashes, n, sizeof *gd->hashes, cmp_u64);
    }
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++) {
        h = (h ^ gd->hashes[i]) * 1099511628211ull;
        h ^= h >> 29;
    }
    *out = h;
    return 0;
}

static uint32_t memo_slot(uint64_t from, uint8_t byte, uint32_t mask)
{
    uint64_t x = from ^ ((uint64_t)byte + 1) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    return (uint32_t)(x >> 32) & mask;
}

static int memo_grow(guide *gd)
{
    uint32_t cap = gd->cap_memo ? gd->cap_memo * 2 : 4096;
    struct memo_ent *t = calloc(cap, sizeof *t);
    if (!t) {
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < gd->cap_memo; i++) {
        const struct memo_ent *e = &gd->memo[i];
        if (e->gen == gd->memo_gen) {
            uint32_t j = memo_slot(e->from, e->byte, cap - 1);
            while (t[j].gen == gd->memo_gen) {
                j = (j + 1) & (cap - 1);
            }
            t[j] = *e;
        }
    }
    free(gd->memo);
    gd->memo = t;
    gd->cap_memo = cap;
    return 0;
}

/* Where byte b leads from the set of frame f: a memoised transition, or one step of the matcher
 * (remembered for the rest of the walk). Within a JSON string, for instance, most bytes lead
 * back to a handful of sets, so most of the trie is walked by table lookups. */
static int transition(guide *gd, const struct walk_frame *f, uint8_t b, struct memo_ent *out)
{
    if (2 * (gd->n_memo + 1) > gd->cap_memo && memo_grow(gd) != 0) {
        return -ENOMEM;
    }
    uint32_t mask = gd->cap_memo - 1;
    uint32_t j = memo_slot(f->hash, b, mask);
    for (; gd->memo[j].gen == gd->memo_gen; j = (j + 1) & mask) {
        if (gd->memo[j].from == f->hash && gd->memo[j].byte == b) {
            *out = gd->memo[j];
            return 0;
        }
    }
    int rc = sets_reserve(gd, gd->n_sets + GRAMMAR_MAX_STACKS);
    if (rc != 0) {
        return rc;
    }
    uint32_t off = gd->n_sets, n = 0;
    rc = grammar__step(gd->m, gd->sets + f->off, f->n, b, gd->sets + off, GRAMMAR_MAX_STACKS, &n);
    if (rc == -E2BIG) {
        rc = 0; /* a prefix too ambiguous to follow: treat it as refused */
        n = 0;
    }
    if (rc != 0) {
        return rc;
    }
    uint64_t to = 0;
    if (n > 0 && (rc = set_hash(gd, off, n, &to)) != 0) {
        return rc;
    }
    gd->n_sets += n;
    struct memo_ent e = {f->hash, to, off, n, gd->memo_gen, b};
    gd->memo[j] = e;
    gd->n_memo++;
    *out = e;
    return 0;
}

/* Computes the allowed ids of the current state into gd->bits by walking the trie. Nodes the
 * walk adds to the matcher's pool stay until the walk ends (memoised sets refer to them). */
static int compute_mask(guide *gd)
{
    const guide_vocab *v = gd->gg->v;
    grammar_matcher *m = gd->m;
    memset(gd->bits, 0, (size_t)v->words * sizeof *gd->bits);
    struct walk_frame *stack = malloc(((size_t)v->max_depth + 2) * sizeof *stack);
    if (!stack) {
        return -ENOMEM;
    }
    if (++gd->memo_gen == 0) {
        for (uint32_t i = 0; i < gd->cap_memo; i++) {
            gd->memo[i].gen = 0;
        }
        gd->memo_gen = 1;
    }
    gd->n_memo = 0;
    gd->n_sets = 0;
    int rc = sets_reserve(gd, m->n_cur);
    uint32_t node_mark = m->n_nodes;
    int depth = 0;
    int32_t allowed = 0;
    if (rc == 0) {
        memcpy(gd->sets, m->cur, (size_t)m->n_cur * sizeof *m->cur);
        gd->n_sets = m->n_cur;
        stack[0] = (struct walk_frame){.node = 0, .child = 1, .off = 0, .n = m->n_cur};
        rc = set_hash(gd, 0, m->n_cur, &stack[0].hash);
        grammar__first_bytes(m, gd->sets, m->n_cur, stack[0].first);
    }
    while (depth >= 0 && rc == 0) {
        struct walk_frame *f = &stack[depth];
        if (f->child >= v->nodes[f->node].sub_end) {
            depth--;
            continue;
        }
        uint32_t c = f->child;
        const struct tnode *cn = &v->nodes[c];
        f->child = cn->sub_end;
        if (!grammar__set_has(f->first, cn->byte)) {
            continue;
        }
        struct memo_ent t;
        rc = transition(gd, f, cn->byte, &t);
        if (rc != 0 || t.n == 0) {
            continue;
        }
        for (uint32_t k = 0; k < cn->n_tok; k++) {
            int32_t id = v->toks[cn->tok0 + k];
            gd->bits[id / 64] |= (uint64_t)1 << (id % 64);
            allowed++;
        }
        if (c + 1 < cn->sub_end) {
            struct walk_frame *nf = &stack[++depth];
            *nf = (struct walk_frame){
                .node = c, .child = c + 1, .off = t.off, .n = t.n, .hash = t.to};
            grammar__first_bytes(m, gd->sets + t.off, t.n, nf->first);
        }
    }
    m->n_nodes = node_mark;
    free(stack);
    if (rc != 0) {
        return rc;
    }
    if (grammar_matcher_can_end(m) || allowed == 0) {
        for (uint32_t w = 0; w < v->words; w++) {
            gd->bits[w] |= v->eog[w];
            allowed += __builtin_popcountll(v->eog[w]);
        }
    }
    gd->n_allowed = allowed;
    return 0;
}

static int cache_insert(guide_grammar *gg, const guide *gd, uint64_t hash)
{
    const guide_vocab *v = gg->v;
    size_t cost = (size_t)v->words * 8 + (size_t)gd->m->n_cur * 8 + sizeof(struct mask_entry);
    if (gg->bytes + cost > GUIDE_CACHE_BYTES) {
        cache_clear(gg);
    }
    struct mask_entry *e = calloc(1, sizeof *e);
    if (!e) {
        return -ENOMEM;
    }
    e->key = malloc((size_t)gd->m->n_cur * sizeof *e->key + 1);
    e->bits = malloc((size_t)v->words * sizeof *e->bits);
    if (!e->key || !e->bits) {
        free(e->key);
        free(e->bits);
        free(e);
        return -ENOMEM;
    }
    memcpy(e->key, gd->key, (size_t)gd->m->n_cur * sizeof *e->key);
    memcpy(e->bits, gd->bits, (size_t)v->words * sizeof *e->bits);
    e->n_key = gd->m->n_cur;
    e->hash = hash;
    e->n_allowed = gd->n_allowed;
    uint32_t b = (uint32_t)hash & (gg->n_buckets - 1);
    e->next = gg->buckets[b];
    gg->buckets[b] = e;
    gg->bytes += cost;
    return 0;
}

int guide_allowed(guide *gd, const uint64_t **bits)
{
    guide_grammar *gg = gd->gg;
    uint64_t hash;
    int rc = state_key(gd, &hash);
    if (rc != 0) {
        return rc;
    }
    pthread_mutex_lock(&gg->mu);
    uint32_t b = (uint32_t)hash & (gg->n_buckets - 1);
    for (const struct mask_entry *e = gg->buckets[b]; e; e = e->next) {
        if (e->hash == hash && e->n_key == gd->m->n_cur &&
            memcmp(e->key, gd->key, (size_t)e->n_key * sizeof *e->key) == 0) {
            memcpy(gd->bits, e->bits, (size_t)gg->v->words * sizeof *gd->bits);
            gd->n_allowed = e->n_allowed;
            gg->hits++;
            pthread_mutex_unlock(&gg->mu);
            *bits = gd->bits;
            return gd->n_allowed;
        }
    }
    gg->misses++;
    pthread_mutex_unlock(&gg->mu);
    rc = compute_mask(gd);
    if (rc != 0) {
        return rc;
    }
    pthread_mutex_lock(&gg->mu);
    (void)cache_insert(gg, gd, hash); /* a full heap only costs the next lookup a recompute */
    pthread_mutex_unlock(&gg->mu);
    *bits = gd->bits;
    return gd->n_allowed;
}

int guide_mask(guide *gd, float *logits, int32_t n_vocab)
{
    const uint64_t *bits = NULL;
    int rc = guide_allowed(gd, &bits);
    if (rc < 0 || !bits) {
        return rc < 0 ? rc : -EINVAL;
    }
    uint32_t words = (uint32_t)((n_vocab + 63) / 64);
    if (words > gd->gg->v->words) {
        words = gd->gg->v->words;
    }
    for (uint32_t w = 0; w < words; w++) {
        uint64_t off = ~bits[w];
        if (w == words - 1 && n_vocab % 64) {
            off &= ((uint64_t)1 << (n_vocab % 64)) - 1;
        }
        while (off) {
            logits[(size_t)w * 64 + (size_t)__builtin_ctzll(off)] = -INFINITY;
            off &= off - 1;
        }
    }
    for (int32_t id = (int32_t)words * 64; id < n_vocab; id++) {
        logits[id] = -INFINITY;
    }
    return rc;
}

int guide_accept(guide *gd, int32_t token)
{
    const guide_vocab *v = gd->gg->v;
    if (token < 0 || token >= v->n_vocab) {
        return -EINVAL;
    }
    if ((v->eog[token / 64] >> (token % 64)) & 1) {
        return 0;
    }
    if (tokenizer_is_special(v->tok, token)) {
        return -EINVAL;
    }
    size_t len = 0;
    const char *p = tokenizer_piece(v->tok, token, &len);
    if (!p || len == 0) {
        return -EINVAL;
    }
    return grammar_matcher_feed(gd->m, p, len);
}

bool guide_can_end(const guide *gd)
{
    return grammar_matcher_can_end(gd->m);
}

bool guide_must_end(const guide *gd)
{
    return grammar_matcher_must_end(gd->m);
}

/* ---- registry ---- */

struct reg_slot {
    char *text;
    size_t len;
    const guide_vocab *v;
    guide_grammar *gg;
    uint64_t used; /* clock of the last lookup */
};

struct guide_registry {
    pthread_mutex_t mu;
    struct reg_slot slots[GUIDE_REGISTRY_SLOTS];
    uint64_t clock;
};

guide_registry *guide_registry_new(void)
{
    guide_registry *r = calloc(1, sizeof *r);
    if (r) {
        pthread_mutex_init(&r->mu, NULL);
    }
    return r;
}

void guide_registry_free(guide_registry *r)
{
    if (!r) {
        return;
    }
    for (int i = 0; i < GUIDE_REGISTRY_SLOTS; i++) {
        free(r->slots[i].text);
        guide_grammar_unref(r->slots[i].gg);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int guide_registry_get(guide_registry *r, const guide_vocab *v, const char *gbnf, size_t len,
                       guide_grammar **out, char *err, size_t errlen)
{
    *out = NULL;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < GUIDE_REGISTRY_SLOTS; i++) {
        struct reg_slot *s = &r->slots[i];
        if (s->gg && s->v == v && s->len == len && memcmp(s->text, gbnf, len) == 0) {
            s->used = ++r->clock;
            *out = guide_grammar_ref(s->gg);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&r->mu);
    /* compile outside the lock: a large grammar must not stall other requests */
    grammar *g;
    int rc = grammar_compile(gbnf, len, NULL, &g, err, errlen);
    if (rc != 0) {
        return rc;
    }
    guide_grammar *gg;
    rc = guide_grammar_new(g, v, &gg);
    if (rc != 0) {
        return tandem_fail(err, errlen, rc, "grammar: out of memory");
    }
    char *text = malloc(len + 1);
    if (!text) {
        *out = gg; /* usable, just not cached */
        return 0;
    }
    memcpy(text, gbnf, len);
    text[len] = '\0';
    pthread_mutex_lock(&r->mu);
    struct reg_slot *victim = &r->slots[0];
    for (int i = 0; i < GUIDE_REGISTRY_SLOTS; i++) {
        if (!r->slots[i].gg) {
            victim = &r->slots[i];
            break;
        }
        if (r->slots[i].used < victim->used) {
            victim = &r->slots[i];
        }
    }
    free(victim->text);
    guide_grammar_unref(victim->gg);
    *victim = (struct reg_slot){text, len, v, guide_grammar_ref(gg), ++r->clock};
    pthread_mutex_unlock(&r->mu);
    *out = gg;
    return 0;
}
