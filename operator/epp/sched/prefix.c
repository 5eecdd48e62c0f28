/*
 * prefix-cache-scorer: GIE's approximate prefix index. The request text is cut into blocks of
 * blockSizeTokens×4 characters (at most maxPrefixBlocksToMatch), chained with xxhash64 from a
 * seed hash of the model name; each server keeps an LRU of the block hashes of requests sent to
 * it (lruCapacityPerServer). Score = matched blocks / request blocks, where matching walks the
 * chain and stops at the first hash no server holds (GIE's matchLongestPrefix).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "operator/epp/sched/plugins.h"

#define CHARS_PER_TOKEN 4 /* GIE's averageCharactersPerToken */

struct lru_node {
    uint64_t key;
    int32_t prev, next, hnext;
};

/* One server's LRU of block hashes: a chained hash table over a node array. */
struct lru {
    uint64_t id;
    int32_t cap, n, n_alloc, head, tail;
    uint32_t mask;
    int32_t *buckets;
    struct lru_node *nodes;
    struct lru *next;
};

struct prefix {
    int64_t block_tokens;
    int64_t max_blocks;
    int64_t lru_cap;
    bool auto_tune;
    struct lru *servers;
    /* This cycle's hashes and matches (index = endpoint index of the cycle). */
    uint64_t seq;
    int32_t n_hashes, hashes_cap, match_cap, cycle_block_tokens;
    uint64_t *hashes;
    int32_t *match;
    struct lru **srv; /* each endpoint's LRU this cycle (NULL: nothing recorded) */
    XXH64_state_t *xxh;
};

static uint32_t bucket_of(const struct lru *l, uint64_t key)
{
    return (uint32_t)(key ^ (key >> 32)) & l->mask;
}

static struct lru *lru_new(uint64_t id, int32_t cap)
{
    struct lru *l = calloc(1, sizeof(*l));
    uint32_t nb = 16;
    while (nb < (uint32_t)cap && nb < (1u << 30)) {
        nb <<= 1;
    }
    if (!l || !(l->buckets = malloc(nb * sizeof(int32_t)))) {
        free(l);
        return NULL;
    }
    memset(l->buckets, 0xff, nb * sizeof(int32_t));
    l->id = id;
    l->cap = cap;
    l->mask = nb - 1;
    l->head = l->tail = -1;
    return l;
}

static void lru_free(struct lru *l)
{
    if (l) {
        free(l->buckets);
        free(l->nodes);
        free(l);
    }
}

static int32_t lru_find(const struct lru *l, uint64_t key)
{
    if (!l->nodes) {
        return -1;
    }
    for (int32_t i = l->buckets[bucket_of(l, key)]; i >= 0; i = l->nodes[i].hnext) {
        if (l->nodes[i].key == key) {
            return i;
        }
    }
    return -1;
}

static void lru_unlink(struct lru *l, int32_t i)
{
    struct lru_node *nd = &l->nodes[i];
    if (nd->prev >= 0) {
        l->nodes[nd->prev].next = nd->next;
    } else {
        l->head = nd->next;
    }
    if (nd->next >= 0) {
        l->nodes[nd->next].prev = nd->prev;
    } else {
        l->tail = nd->prev;
    }
}

static void lru_push_front(struct lru *l, int32_t i)
{
    l->nodes[i].prev = -1;
    l->nodes[i].next = l->head;
    if (l->head >= 0) {
        l->nodes[l->head].prev = i;
    }
    l->head = i;
    if (l->tail < 0) {
        l->tail = i;
    }
}

static void lru_unhash(struct lru *l, int32_t i)
{
    int32_t *pp = &l->buckets[bucket_of(l, l->nodes[i].key)];
    while (*pp != i) {
        pp = &l->nodes[*pp].hnext;
    }
    *pp = l->nodes[i].hnext;
}

/* A free node: a new one while under capacity, else the least recently used one. */
static int32_t lru_slot(struct lru *l)
{
    if (l->n < l->cap) {
        if (l->n == l->n_alloc) {
            int32_t na = l->n_alloc ? l->n_alloc * 2 : 64;
            na = na > l->cap ? l->cap : na;
            struct lru_node *nn = realloc(l->nodes, (size_t)na * sizeof(*nn));
            if (!nn) {
                return -1;
            }
            l->nodes = nn;
            l->n_alloc = na;
        }
        return l->n++;
    }
    int32_t i = l->tail;
    if (i < 0 || !l->nodes) {
        return -1;
    }
    lru_unlink(l, i);
    lru_unhash(l, i);
    return i;
}

static void lru_add(struct lru *l, uint64_t key)
{
    int32_t i = lru_find(l, key);
    if (i >= 0 && l->nodes) {
        lru_unlink(l, i);
        lru_push_front(l, i);
        return;
    }
    if ((i = lru_slot(l)) < 0 || !l->nodes) {
        return; /* out of memory: the index only loses a hint */
    }
    uint32_t b = bucket_of(l, key);
    l->nodes[i].key = key;
    l->nodes[i].hnext = l->buckets[b];
    l->buckets[b] = i;
    lru_push_front(l, i);
}

static struct lru *server_of(struct prefix *px, uint64_t id)
{
    for (struct lru *l = px->servers; l; l = l->next) {
        if (l->id == id) {
            return l;
        }
    }
    return NULL;
}

static int prefix_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    struct prefix *px = calloc(1, sizeof(*px));
    int64_t chars = 0, legacy = 0;
    if (!px) {
        return -ENOMEM;
    }
    p->state = px;
    if (!(px->xxh = XXH64_createState())) {
        return -ENOMEM;
    }
    /* v0.5.1 hashBlockSize is in characters; blockSize (a HEAD alias) and blockSizeTokens in
     * tokens. */
    if (param_int(params, "hashBlockSize", 0, 0, 1 << 20, &chars, err, errlen) != 0 ||
        param_int(params, "blockSize", 0, 0, 1 << 20, &legacy, err, errlen) != 0 ||
        param_int(params, "blockSizeTokens", legacy ? legacy : 16, 1, 1 << 20, &px->block_tokens,
                  err, errlen) != 0 ||
        param_int(params, "maxPrefixBlocksToMatch", 256, 1, 1 << 20, &px->max_blocks, err,
                  errlen) != 0 ||
        param_int(params, "lruCapacityPerServer", 31250, 1, 1 << 26, &px->lru_cap, err, errlen) !=
            0 ||
        param_bool(params, "autoTune", true, &px->auto_tune, err, errlen) != 0) {
        return -EINVAL;
    }
    if (chars > 0) {
        px->block_tokens = chars / CHARS_PER_TOKEN > 0 ? chars / CHARS_PER_TOKEN : 1;
        px->auto_tune = false;
    }
    return 0;
}

static void prefix_destroy(struct plugin *p)
{
    struct prefix *px = p->state;
    if (!px) {
        return;
    }
    while (px->servers) {
        struct lru *l = px->servers;
        px->servers = l->next;
        lru_free(l);
    }
    free(px->hashes);
    free(px->match);
    free(px->srv);
    XXH64_freeState(px->xxh);
    free(px);
}

/* Block size in tokens for a request sent to ep (autoTune: the server's own block size). */
static int32_t block_tokens_for(const struct prefix *px, const struct epp_endpoint *ep)
{
    if (px->auto_tune && ep && ep->m.block_size > 0) {
        return ep->m.block_size;
    }
    return (int32_t)px->block_tokens;
}

/* Hashes r's text into px->hashes; returns how many (0 on OOM or short text). */
static int32_t hash_request(struct prefix *px, const struct epp_request *r, int32_t block_tokens)
{
    size_t bchars = (size_t)block_tokens * CHARS_PER_TOKEN;
    size_t len = r->prefix_text ? r->prefix_len : 0;
    size_t nb = len / bchars;
    nb = nb > (size_t)px->max_blocks ? (size_t)px->max_blocks : nb;
    if (nb > 0 && (int32_t)nb > px->hashes_cap) {
        uint64_t *h = realloc(px->hashes, nb * sizeof(*h));
        if (!h) {
            return 0;
        }
        px->hashes = h;
        px->hashes_cap = (int32_t)nb;
    }
    const char *model = r->model ? r->model : "";
    uint64_t prev = XXH64(model, strlen(model), 0);
    for (size_t i = 0; i < nb; i++) {
        unsigned char le[8];
        for (int b = 0; b < 8; b++) {
            le[b] = (unsigned char)(prev >> (8 * b));
        }
        XXH64_reset(px->xxh, 0);
        XXH64_update(px->xxh, r->prefix_text + i * bchars, bchars);
        XXH64_update(px->xxh, le, sizeof(le));
        prev = XXH64_digest(px->xxh);
        px->hashes[i] = prev;
    }
    return (int32_t)nb;
}

static bool any_server_has(const struct prefix *px, uint64_t h)
{
    for (const struct lru *l = px->servers; l; l = l->next) {
        if (lru_find(l, h) >= 0) {
            return true;
        }
    }
    return false;
}

/* Fills px->match for every endpoint of the cycle, once per cycle. */
static void prefix_compute(struct plugin *p, struct cycle *c)
{
    struct prefix *px = p->state;
    if (px->seq == c->seq) {
        return;
    }
    px->seq = c->seq;
    px->n_hashes = 0;
    if (c->n == 0) {
        return;
    }
    if (c->n > px->match_cap) {
        int32_t *m = realloc(px->match, (size_t)c->n * sizeof(*m));
        if (m) {
            px->match = m;
        }
        struct lru **sv = realloc(px->srv, (size_t)c->n * sizeof(struct lru *));
        if (sv) {
            px->srv = sv;
        }
        if (!m || !sv) {
            px->n_hashes = 0;
            return;
        }
        px->match_cap = c->n;
    }
    for (int i = 0; i < c->n; i++) {
        px->srv[i] = server_of(px, c->eps[i]->id);
    }
    memset(px->match, 0, (size_t)c->n * sizeof(*px->match));
    px->cycle_block_tokens = block_tokens_for(px, c->n > 0 ? c->eps[0] : NULL);
    px->n_hashes = hash_request(px, c->r, px->cycle_block_tokens);
    for (int32_t h = 0; h < px->n_hashes; h++) {
        bool hit = false;
        for (int i = 0; i < c->n; i++) {
            const struct lru *l = px->srv[i];
            if (l && lru_find(l, px->hashes[h]) >= 0) {
                px->match[i]++;
                hit = true;
            }
        }
        if (!hit && !any_server_has(px, px->hashes[h])) {
            break;
        }
    }
}

int32_t prefix_matched_blocks(struct plugin *p, struct cycle *c, int i, int32_t *total,
                              int32_t *block_tokens)
{
    struct prefix *px = p->state;
    prefix_compute(p, c);
    *total = px->n_hashes;
    *block_tokens = px->cycle_block_tokens;
    return px->n_hashes > 0 ? px->match[i] : 0;
}

bool prefix_is_approx(const struct plugin *p)
{
    return p->ops == &scorer_prefix_ops;
}

static void prefix_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    struct prefix *px = p->state;
    prefix_compute(p, c);
    for (int i = 0; i < n; i++) {
        out[i] = px->n_hashes > 0 ? (double)px->match[cand[i]] / px->n_hashes : 0.0;
    }
}

static void prefix_pre_request(struct plugin *p, const struct epp_request *r,
                               const struct epp_endpoint *ep)
{
    struct prefix *px = p->state;
    int32_t nh = hash_request(px, r, block_tokens_for(px, ep));
    struct lru *l = server_of(px, ep->id);
    if (nh == 0) {
        return;
    }
    if (!l) {
        if (!(l = lru_new(ep->id, (int32_t)px->lru_cap))) {
            return;
        }
        l->next = px->servers;
        px->servers = l;
    }
    for (int32_t i = 0; i < nh; i++) {
        lru_add(l, px->hashes[i]);
    }
    px->seq = 0; /* the cached match is stale now */
}

static void prefix_removed(struct plugin *p, const struct epp_endpoint *ep)
{
    struct prefix *px = p->state;
    for (struct lru **pp = &px->servers; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == ep->id) {
            struct lru *l = *pp;
            *pp = l->next;
            lru_free(l);
            px->seq = 0;
            return;
        }
    }
}

const struct plugin_ops scorer_prefix_ops = {.type = "prefix-cache-scorer",
                                             .kind = PK_SCORER,
                                             .create = prefix_create,
                                             .destroy = prefix_destroy,
                                             .score = prefix_score,
                                             .pre_request = prefix_pre_request,
                                             .removed = prefix_removed};

/* prefix-cache-affinity-filter: when some candidates hold at least affinityThreshold of the
 * prompt, only they pass; otherwise everyone does (a cold prompt may go anywhere). */
static int affinity_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    double *thr = malloc(sizeof(*thr));
    p->state = thr;
    if (!thr) {
        return -ENOMEM;
    }
    return param_double(params, "affinityThreshold", 0.5, 0, 1, thr, err, errlen);
}

static int affinity_filter(struct plugin *p, struct cycle *c, int *cand, int n)
{
    double thr = *(double *)p->state;
    struct plugin *src = c->s->approx;
    int k = 0;
    for (int i = 0; src && i < n; i++) {
        int32_t total = 0, bt = 0;
        int32_t m = prefix_matched_blocks(src, c, cand[i], &total, &bt);
        if (total > 0 && (double)m / total >= thr) {
            cand[k++] = cand[i];
        }
    }
    return k > 0 ? k : n;
}

static void affinity_destroy(struct plugin *p)
{
    free(p->state);
}

const struct plugin_ops filter_prefix_affinity_ops = {.type = "prefix-cache-affinity-filter",
                                                      .kind = PK_FILTER,
                                                      .create = affinity_create,
                                                      .destroy = affinity_destroy,
                                                      .filter = affinity_filter};
