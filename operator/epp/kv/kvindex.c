/*
 * The KV-block index (kvindex.h).
 *
 * Layout: shards, each an open-addressing table (linear probing, backward-shift deletion) of
 * node numbers into a pool of fixed-size nodes: key, LRU links, and up to pod_cache_size entries
 * oldest first. Pods are numbered (ids reused after a purge); each pod keeps a reverse array of
 * its (key, tier) entries and every entry remembers its place there, so removing one is a swap.
 *
 * Locks: `wmu` serialises writers, so the reverse arrays, the pool growth and the tier table are
 * the writer's alone. A shard's rwlock covers its table, pool and LRU. `pods_lock` covers the pod
 * table's names; a score holds it (read) throughout, so a pod id cannot be reused under it. A
 * writer never takes pods_lock while it holds a shard lock.
 */
#include "operator/epp/kv/kvindex.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common.h"
#include "lib/err.h"

#define NIL            UINT32_MAX
#define SHARD_MIN_KEYS 1024
#define MAX_SHARDS     64
#define TABLE_MIN      16
#define DEFAULT_GPU    1.0
#define DEFAULT_CPU    0.8
#define UNKNOWN_TIER_W 1.0

struct entry {
    uint16_t pod;
    uint8_t tier;
    uint32_t pos; /* index in pods[pod].rev */
};

struct node {
    uint64_t key;
    uint32_t prev, next; /* LRU: prev towards the most recent */
    uint32_t n;
    struct entry e[]; /* [pod_cache_size] */
};

struct shard {
    pthread_rwlock_t lock;
    uint64_t *table; /* slots: see the shard table below */
    uint32_t mask;
    uint64_t count, cap;
    unsigned char *pool;
    uint32_t used, alloc, free_head;
    uint32_t mru, lru;
};

struct rev {
    uint64_t key;
    uint8_t tier;
};

struct pod {
    char *name; /* NULL: free id */
    struct rev *rev;
    uint32_t n_rev, rev_alloc;
    _Atomic uint64_t tier_n[KVIDX_MAX_TIERS];
};

struct kvidx {
    pthread_mutex_t wmu;
    uint32_t pod_cache_size;
    size_t stride;
    struct shard *shards;
    uint32_t n_shards;

    char tier_name[KVIDX_MAX_TIERS][KVIDX_MAX_NAME];
    double tier_w[KVIDX_MAX_TIERS];
    int n_tiers;

    pthread_rwlock_t pods_lock;
    struct pod *pods;
    uint32_t pods_alloc, n_pods;
    uint32_t *pod_table; /* id + 1; 0 empty; size pod_mask + 1 */
    uint32_t pod_mask;

    _Atomic uint64_t keys, entries, evicted_keys, evicted_entries;
};

static uint64_t mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    return k ^ (k >> 33);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    }
    return h;
}

static struct node *node_at(const struct kvidx *idx, const struct shard *s, uint32_t i)
{
    return (struct node *)(s->pool + (size_t)i * idx->stride);
}

static struct shard *shard_of(struct kvidx *idx, uint64_t h)
{
    return &idx->shards[h & (idx->n_shards - 1)];
}

/* ---- shard table ----
 * A slot is (fingerprint << 32 | node + 1), 0 empty; the fingerprint is the key's hash bits from
 * bit 20 on, whose low bits are also its home slot. So probing and moving slots compare and place
 * without touching the nodes (a cache miss each); only a fingerprint match reads the node. */

#define SLOT_NODE(v) ((uint32_t)(v)-1)
#define SLOT_FP(v)   ((uint32_t)((v) >> 32))

static uint32_t fingerprint(uint64_t h)
{
    return (uint32_t)(h >> 20);
}

static uint32_t find(const struct kvidx *idx, const struct shard *s, uint64_t key, uint64_t h)
{
    if (!s->table) {
        return NIL;
    }
    uint32_t fp = fingerprint(h);
    for (uint32_t i = fp & s->mask;; i = (i + 1) & s->mask) {
        uint64_t v = s->table[i];
        if (v == 0) {
            return NIL;
        }
        if (SLOT_FP(v) == fp && node_at(idx, s, SLOT_NODE(v))->key == key) {
            return SLOT_NODE(v);
        }
    }
}

static void table_put(uint64_t *table, uint32_t mask, uint32_t fp, uint32_t n)
{
    uint32_t i = fp & mask;
    while (table[i] != 0) {
        i = (i + 1) & mask;
    }
    table[i] = (uint64_t)fp << 32 | (n + 1);
}

static int table_grow(struct shard *s)
{
    uint32_t size = s->table ? (s->mask + 1) * 2 : TABLE_MIN;
    if (size == 0) {
        return -ENOMEM;
    }
    uint64_t *t = calloc(size, sizeof(*t));
    if (!t) {
        return -ENOMEM;
    }
    if (s->table) {
        for (uint32_t i = 0; i <= s->mask; i++) {
            if (s->table[i]) {
                table_put(t, size - 1, SLOT_FP(s->table[i]), SLOT_NODE(s->table[i]));
            }
        }
    }
    free(s->table);
    s->table = t;
    s->mask = size - 1;
    return 0;
}

/* Backward-shift deletion of node n: no tombstones, probes stay short. */
static void table_del(struct shard *s, uint32_t n, uint64_t h)
{
    uint32_t i = fingerprint(h) & s->mask;
    while (SLOT_NODE(s->table[i]) != n) {
        i = (i + 1) & s->mask;
    }
    for (uint32_t j = (i + 1) & s->mask; s->table[j] != 0; j = (j + 1) & s->mask) {
        uint32_t home = SLOT_FP(s->table[j]) & s->mask;
        /* move j back into the hole i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            s->table[i] = s->table[j];
            i = j;
        }
    }
    s->table[i] = 0;
}

/* ---- LRU ---- */

static void lru_unlink(const struct kvidx *idx, struct shard *s, uint32_t n)
{
    struct node *x = node_at(idx, s, n);
    if (x->prev != NIL) {
        node_at(idx, s, x->prev)->next = x->next;
    } else {
        s->mru = x->next;
    }
    if (x->next != NIL) {
        node_at(idx, s, x->next)->prev = x->prev;
    } else {
        s->lru = x->prev;
    }
}

static void lru_push(const struct kvidx *idx, struct shard *s, uint32_t n)
{
    struct node *x = node_at(idx, s, n);
    x->prev = NIL;
    x->next = s->mru;
    if (s->mru != NIL) {
        node_at(idx, s, s->mru)->prev = n;
    } else {
        s->lru = n;
    }
    s->mru = n;
}

/* ---- reverse index ---- */

static struct entry *entry_of(struct kvidx *idx, struct node *x, uint16_t pod, uint8_t tier)
{
    (void)idx;
    for (uint32_t i = 0; i < x->n; i++) {
        if (x->e[i].pod == pod && x->e[i].tier == tier) {
            return &x->e[i];
        }
    }
    return NULL;
}

/* The writer's own lookup: no shard lock (only the writer changes tables and pools). */
static struct entry *find_entry(struct kvidx *idx, uint64_t key, uint16_t pod, uint8_t tier)
{
    uint64_t h = mix(key);
    struct shard *s = shard_of(idx, h);
    uint32_t n = find(idx, s, key, h);
    return n == NIL ? NULL : entry_of(idx, node_at(idx, s, n), pod, tier);
}

static int rev_push(struct kvidx *idx, uint16_t pod, uint64_t key, uint8_t tier, uint32_t *pos)
{
    struct pod *p = &idx->pods[pod];
    if (p->n_rev == p->rev_alloc) {
        uint32_t alloc = p->rev_alloc ? p->rev_alloc * 2 : 64;
        struct rev *r = alloc > p->rev_alloc ? realloc(p->rev, (size_t)alloc * sizeof(*r)) : NULL;
        if (!r) {
            return -ENOMEM;
        }
        p->rev = r;
        p->rev_alloc = alloc;
    }
    *pos = p->n_rev;
    p->rev[p->n_rev++] = (struct rev){.key = key, .tier = tier};
    atomic_fetch_add_explicit(&p->tier_n[tier], 1, memory_order_release);
    atomic_fetch_add_explicit(&idx->entries, 1, memory_order_relaxed);
    return 0;
}

static void rev_del(struct kvidx *idx, uint16_t pod, uint32_t pos)
{
    struct pod *p = &idx->pods[pod];
    atomic_fetch_sub_explicit(&p->tier_n[p->rev[pos].tier], 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&idx->entries, 1, memory_order_relaxed);
    p->n_rev--;
    if (pos != p->n_rev) {
        p->rev[pos] = p->rev[p->n_rev];
        struct entry *moved = find_entry(idx, p->rev[pos].key, pod, p->rev[pos].tier);
        TANDEM_ASSERT(moved);
        moved->pos = pos;
    }
}

/* Drops entry i of x (keeping the others oldest first). */
static void node_drop_entry(struct kvidx *idx, struct node *x, uint32_t i)
{
    rev_del(idx, x->e[i].pod, x->e[i].pos);
    memmove(&x->e[i], &x->e[i + 1], (x->n - i - 1) * sizeof(x->e[0]));
    x->n--;
}

/* ---- nodes ---- */

static void node_delete(struct kvidx *idx, struct shard *s, uint32_t n, uint64_t h)
{
    struct node *x = node_at(idx, s, n);
    while (x->n > 0) {
        node_drop_entry(idx, x, x->n - 1);
    }
    table_del(s, n, h);
    lru_unlink(idx, s, n);
    x->next = s->free_head;
    s->free_head = n;
    s->count--;
    atomic_fetch_sub_explicit(&idx->keys, 1, memory_order_relaxed);
}

static int pool_take(struct kvidx *idx, struct shard *s, uint32_t *out)
{
    if (s->free_head != NIL) {
        *out = s->free_head;
        s->free_head = node_at(idx, s, *out)->next;
        return 0;
    }
    if (s->used == s->alloc) {
        uint64_t alloc = s->alloc ? (uint64_t)s->alloc * 2 : 64;
        alloc = alloc > s->cap ? s->cap : alloc;
        unsigned char *pool = realloc(s->pool, (size_t)alloc * idx->stride);
        if (!pool) {
            return -ENOMEM;
        }
        s->pool = pool;
        s->alloc = (uint32_t)alloc;
    }
    *out = s->used++;
    return 0;
}

/* The node of key, created (most recent, evicting the least recent at the bound) if needed. */
static int node_get(struct kvidx *idx, struct shard *s, uint64_t key, uint64_t h, uint32_t *out)
{
    uint32_t n = find(idx, s, key, h);
    if (n != NIL) {
        lru_unlink(idx, s, n);
        lru_push(idx, s, n);
        *out = n;
        return 0;
    }
    if (s->count == s->cap) {
        uint32_t old = s->lru;
        node_delete(idx, s, old, mix(node_at(idx, s, old)->key));
        atomic_fetch_add_explicit(&idx->evicted_keys, 1, memory_order_relaxed);
    }
    if ((s->count + 1) * 10 > (uint64_t)(s->table ? s->mask + 1 : 0) * 7 && table_grow(s) != 0) {
        return -ENOMEM;
    }
    if (pool_take(idx, s, &n) != 0) {
        return -ENOMEM;
    }
    struct node *x = node_at(idx, s, n);
    x->key = key;
    x->n = 0;
    table_put(s->table, s->mask, fingerprint(h), n);
    lru_push(idx, s, n);
    s->count++;
    atomic_fetch_add_explicit(&idx->keys, 1, memory_order_relaxed);
    *out = n;
    return 0;
}

/* ---- pods and tiers ---- */

static bool name_ok(const char *s)
{
    return s && s[0] && strlen(s) < KVIDX_MAX_NAME;
}

static int pod_find(const struct kvidx *idx, const char *name)
{
    if (!idx->pod_table) {
        return -1;
    }
    for (uint32_t i = (uint32_t)name_hash(name) & idx->pod_mask;; i = (i + 1) & idx->pod_mask) {
        uint32_t v = idx->pod_table[i];
        if (v == 0) {
            return -1;
        }
        if (strcmp(idx->pods[v - 1].name, name) == 0) {
            return (int)(v - 1);
        }
    }
}

/* Rebuilds the name table for the current pods (under pods_lock, write). */
static int pod_table_rebuild(struct kvidx *idx, uint32_t size)
{
    uint32_t *t = calloc(size, sizeof(*t));
    if (!t) {
        return -ENOMEM;
    }
    for (uint32_t id = 0; id < idx->pods_alloc; id++) {
        if (idx->pods[id].name) {
            uint32_t i = (uint32_t)name_hash(idx->pods[id].name) & (size - 1);
            while (t[i]) {
                i = (i + 1) & (size - 1);
            }
            t[i] = id + 1;
        }
    }
    free(idx->pod_table);
    idx->pod_table = t;
    idx->pod_mask = size - 1;
    return 0;
}

static int pod_slot(struct kvidx *idx, uint32_t *out)
{
    for (uint32_t id = 0; id < idx->pods_alloc; id++) {
        if (!idx->pods[id].name) {
            *out = id;
            return 0;
        }
    }
    if (idx->pods_alloc >= KVIDX_MAX_PODS) {
        return -EINVAL;
    }
    uint32_t alloc = idx->pods_alloc ? idx->pods_alloc * 2 : 16;
    alloc = alloc > KVIDX_MAX_PODS ? KVIDX_MAX_PODS : alloc;
    struct pod *p = realloc(idx->pods, (size_t)alloc * sizeof(*p));
    if (!p) {
        return -ENOMEM;
    }
    memset(p + idx->pods_alloc, 0, (size_t)(alloc - idx->pods_alloc) * sizeof(*p));
    idx->pods = p;
    *out = idx->pods_alloc;
    idx->pods_alloc = alloc;
    return 0;
}

/* The pod's id, created if needed (writer; takes pods_lock to create). */
static int pod_get(struct kvidx *idx, const char *name)
{
    int id = pod_find(idx, name);
    if (id >= 0) {
        return id;
    }
    pthread_rwlock_wrlock(&idx->pods_lock);
    uint32_t slot = 0;
    int rc = pod_slot(idx, &slot);
    char *copy = rc == 0 ? strdup(name) : NULL;
    if (rc == 0 && !copy) {
        rc = -ENOMEM;
    }
    if (rc == 0) {
        idx->pods[slot].name = copy;
        idx->n_pods++;
        uint32_t size = idx->pod_mask + 1;
        if (!idx->pod_table || idx->n_pods * 2 > size) {
            size = idx->pod_table ? size * 2 : 32;
        }
        rc = pod_table_rebuild(idx, size);
        if (rc != 0) {
            idx->pods[slot].name = NULL;
            idx->n_pods--;
            free(copy);
        }
    }
    pthread_rwlock_unlock(&idx->pods_lock);
    return rc == 0 ? (int)slot : rc;
}

/* The tier's id, registered with weight 1.0 if new (writer). */
static int tier_get(struct kvidx *idx, const char *name)
{
    for (int i = 0; i < idx->n_tiers; i++) {
        if (strcmp(idx->tier_name[i], name) == 0) {
            return i;
        }
    }
    if (idx->n_tiers == KVIDX_MAX_TIERS) {
        return -EINVAL;
    }
    strcpy(idx->tier_name[idx->n_tiers], name);
    idx->tier_w[idx->n_tiers] = UNKNOWN_TIER_W;
    return idx->n_tiers++;
}

static int tier_find(const struct kvidx *idx, const char *name)
{
    for (int i = 0; i < idx->n_tiers; i++) {
        if (strcmp(idx->tier_name[i], name) == 0) {
            return i;
        }
    }
    return -1;
}

/* ---- lifetime ---- */

static int config_tiers(struct kvidx *idx, const struct kvidx_config *c, char *err, size_t errlen)
{
    static const struct kvidx_tier_weight defaults[] = {{"gpu", DEFAULT_GPU}, {"cpu", DEFAULT_CPU}};
    const struct kvidx_tier_weight *t = c->n_tiers ? c->tiers : defaults;
    size_t n = c->n_tiers ? c->n_tiers : ARRAY_SIZE(defaults);
    if (n > KVIDX_MAX_TIERS || !t) {
        return tandem_fail(err, errlen, -EINVAL, "kv index: tiers: at most %d, got %zu",
                           KVIDX_MAX_TIERS, n);
    }
    for (size_t i = 0; i < n; i++) {
        if (!name_ok(t[i].name) || !(t[i].weight >= 0) || tier_find(idx, t[i].name) >= 0) {
            return tandem_fail(err, errlen, -EINVAL,
                               "kv index: tiers[%zu]: want a distinct name of 1 to %d bytes and a "
                               "weight >= 0",
                               i, KVIDX_MAX_NAME - 1);
        }
        strcpy(idx->tier_name[idx->n_tiers], t[i].name);
        idx->tier_w[idx->n_tiers++] = t[i].weight;
    }
    return 0;
}

static int shards_init(struct kvidx *idx, uint64_t size)
{
    uint32_t n = 1;
    while (n < MAX_SHARDS && size / (n * 2) >= SHARD_MIN_KEYS) {
        n *= 2;
    }
    idx->shards = calloc(n, sizeof(*idx->shards));
    if (!idx->shards) {
        return -ENOMEM;
    }
    idx->n_shards = n;
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    /* a score must not starve the subscriber, nor it the score: one key per lock hold */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    for (uint32_t i = 0; i < n; i++) {
        struct shard *s = &idx->shards[i];
        pthread_rwlock_init(&s->lock, &attr);
        s->cap = size / n + (i < size % n ? 1 : 0);
        s->free_head = s->mru = s->lru = NIL;
    }
    pthread_rwlockattr_destroy(&attr);
    return 0;
}

struct kvidx *kvidx_new(const struct kvidx_config *c, char *err, size_t errlen)
{
    struct kvidx_config none = {0};
    c = c ? c : &none;
    uint64_t size = c->size ? c->size : KVIDX_DEFAULT_SIZE;
    uint32_t pcs = c->pod_cache_size ? c->pod_cache_size : KVIDX_DEFAULT_POD_CACHE_SIZE;
    if (pcs > KVIDX_MAX_POD_CACHE_SIZE || size > (uint64_t)UINT32_MAX * MAX_SHARDS / 2) {
        tandem_set_err(err, errlen,
                       "kv index: pod_cache_size %u (max %d) or size %llu (max %llu) out of range",
                       pcs, KVIDX_MAX_POD_CACHE_SIZE, (unsigned long long)size,
                       (unsigned long long)UINT32_MAX * MAX_SHARDS / 2);
        return NULL;
    }
    struct kvidx *idx = calloc(1, sizeof(*idx));
    if (!idx) {
        tandem_set_err(err, errlen, "kv index: out of memory");
        return NULL;
    }
    idx->pod_cache_size = pcs;
    idx->stride = (sizeof(struct node) + pcs * sizeof(struct entry) + 7) & ~(size_t)7;
    pthread_mutex_init(&idx->wmu, NULL);
    pthread_rwlock_init(&idx->pods_lock, NULL);
    if (config_tiers(idx, c, err, errlen) != 0) {
        kvidx_free(idx);
        return NULL;
    }
    if (shards_init(idx, size) != 0) {
        tandem_set_err(err, errlen, "kv index: out of memory");
        kvidx_free(idx);
        return NULL;
    }
    return idx;
}

void kvidx_free(struct kvidx *idx)
{
    if (!idx) {
        return;
    }
    for (uint32_t i = 0; idx->shards && i < idx->n_shards; i++) {
        free(idx->shards[i].table);
        free(idx->shards[i].pool);
        pthread_rwlock_destroy(&idx->shards[i].lock);
    }
    for (uint32_t i = 0; i < idx->pods_alloc; i++) {
        free(idx->pods[i].name);
        free(idx->pods[i].rev);
    }
    free(idx->pods);
    free(idx->pod_table);
    free(idx->shards);
    pthread_rwlock_destroy(&idx->pods_lock);
    pthread_mutex_destroy(&idx->wmu);
    free(idx);
}

/* ---- writers ---- */

static int add_one(struct kvidx *idx, uint16_t pod, uint8_t tier, uint64_t key)
{
    uint64_t h = mix(key);
    struct shard *s = shard_of(idx, h);
    pthread_rwlock_wrlock(&s->lock);
    uint32_t n;
    int rc = node_get(idx, s, key, h, &n);
    if (rc == 0) {
        struct node *x = node_at(idx, s, n);
        struct entry *e = entry_of(idx, x, pod, tier);
        if (e) {
            /* most recent last: move it to the end */
            struct entry keep = *e;
            uint32_t i = (uint32_t)(e - x->e);
            memmove(&x->e[i], &x->e[i + 1], (x->n - i - 1) * sizeof(x->e[0]));
            x->e[x->n - 1] = keep;
        } else {
            if (x->n == idx->pod_cache_size) {
                node_drop_entry(idx, x, 0);
                atomic_fetch_add_explicit(&idx->evicted_entries, 1, memory_order_relaxed);
            }
            uint32_t pos;
            rc = rev_push(idx, pod, key, tier, &pos);
            if (rc == 0) {
                x->e[x->n++] = (struct entry){.pod = pod, .tier = tier, .pos = pos};
            } else if (x->n == 0) {
                node_delete(idx, s, n, h);
            }
        }
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

int kvidx_add(struct kvidx *idx, const char *pod, const char *tier, const uint64_t *keys, size_t n)
{
    tier = tier ? tier : "gpu";
    if (!name_ok(pod) || !name_ok(tier) || (n > 0 && !keys)) {
        return -EINVAL;
    }
    pthread_mutex_lock(&idx->wmu);
    int pid = pod_get(idx, pod);
    int tid = pid >= 0 ? tier_get(idx, tier) : pid;
    int rc = tid < 0 ? tid : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = add_one(idx, (uint16_t)pid, (uint8_t)tid, keys[i]);
    }
    pthread_mutex_unlock(&idx->wmu);
    return rc;
}

int kvidx_remove(struct kvidx *idx, const char *pod, const char *tier, const uint64_t *keys,
                 size_t n)
{
    tier = tier ? tier : "gpu";
    if (!name_ok(pod) || !name_ok(tier) || (n > 0 && !keys)) {
        return -EINVAL;
    }
    pthread_mutex_lock(&idx->wmu);
    int pid = pod_find(idx, pod), tid = tier_find(idx, tier);
    for (size_t i = 0; pid >= 0 && tid >= 0 && i < n; i++) {
        uint64_t h = mix(keys[i]);
        struct shard *s = shard_of(idx, h);
        pthread_rwlock_wrlock(&s->lock);
        uint32_t nd = find(idx, s, keys[i], h);
        struct node *x = nd == NIL ? NULL : node_at(idx, s, nd);
        struct entry *e = x ? entry_of(idx, x, (uint16_t)pid, (uint8_t)tid) : NULL;
        if (e) {
            node_drop_entry(idx, x, (uint32_t)(e - x->e));
            if (x->n == 0) {
                node_delete(idx, s, nd, h);
            }
        }
        pthread_rwlock_unlock(&s->lock);
    }
    pthread_mutex_unlock(&idx->wmu);
    return 0;
}

int kvidx_purge_pod(struct kvidx *idx, const char *pod)
{
    if (!name_ok(pod)) {
        return 0;
    }
    pthread_mutex_lock(&idx->wmu);
    int pid = pod_find(idx, pod);
    if (pid < 0) {
        pthread_mutex_unlock(&idx->wmu);
        return 0;
    }
    struct pod *p = &idx->pods[pid];
    while (p->n_rev > 0) {
        struct rev r = p->rev[p->n_rev - 1];
        uint64_t h = mix(r.key);
        struct shard *s = shard_of(idx, h);
        pthread_rwlock_wrlock(&s->lock);
        uint32_t nd = find(idx, s, r.key, h);
        TANDEM_ASSERT(nd != NIL);
        struct node *x = node_at(idx, s, nd);
        struct entry *e = entry_of(idx, x, (uint16_t)pid, r.tier);
        TANDEM_ASSERT(e);
        node_drop_entry(idx, x, (uint32_t)(e - x->e));
        if (x->n == 0) {
            node_delete(idx, s, nd, h);
        }
        pthread_rwlock_unlock(&s->lock);
    }
    pthread_rwlock_wrlock(&idx->pods_lock);
    free(p->name);
    free(p->rev);
    memset(p, 0, sizeof(*p));
    idx->n_pods--;
    int rc = pod_table_rebuild(idx, idx->pod_mask + 1);
    pthread_rwlock_unlock(&idx->pods_lock);
    pthread_mutex_unlock(&idx->wmu);
    return rc;
}

/* ---- readers ---- */

/* Scoring state: candidate slots of pod ids, per-candidate best weight for the current key. */
struct scoring {
    int32_t *cand_of; /* [pods_alloc] pod id → first candidate with it, or -1 */
    double *best;     /* [n_pods] weight of the current key, < 0: not held */
    uint32_t *active; /* candidates still matching */
    uint32_t n_active;
};

/* Walks one key; false when the walk is over. */
static bool score_key(struct kvidx *idx, struct scoring *sc, uint64_t key,
                      struct epp_prefix_match *out)
{
    uint64_t h = mix(key);
    struct shard *s = shard_of(idx, h);
    pthread_rwlock_rdlock(&s->lock);
    uint32_t n = find(idx, s, key, h);
    if (n != NIL) {
        const struct node *x = node_at(idx, s, n);
        for (uint32_t i = 0; i < x->n; i++) {
            uint16_t pod = x->e[i].pod;
            int32_t c = pod < idx->pods_alloc ? sc->cand_of[pod] : -1;
            double w = idx->tier_w[x->e[i].tier];
            if (c >= 0 && w > sc->best[c]) {
                sc->best[c] = w;
            }
        }
    }
    pthread_rwlock_unlock(&s->lock);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < sc->n_active; i++) {
        uint32_t c = sc->active[i];
        if (sc->best[c] >= 0) {
            out[c].precise_blocks++;
            out[c].precise_score += sc->best[c];
            sc->best[c] = -1;
            sc->active[kept++] = c;
        }
    }
    sc->n_active = kept;
    return n != NIL && kept > 0;
}

static int32_t score_locked(struct kvidx *idx, struct scoring *sc, const uint64_t *keys,
                            size_t n_keys, const char *const *pods, size_t n_pods,
                            struct epp_prefix_match *out)
{
    int32_t *first = (int32_t *)sc->active + n_pods; /* candidate → pod id, or -1 */
    for (size_t i = 0; i < n_pods; i++) {
        int id = pods[i] ? pod_find(idx, pods[i]) : -1;
        first[i] = id;
        if (id >= 0 && sc->cand_of[id] < 0) {
            sc->cand_of[id] = (int32_t)i;
            sc->active[sc->n_active++] = (uint32_t)i;
        }
        sc->best[i] = -1;
    }
    for (size_t k = 0; k < n_keys && sc->n_active > 0; k++) {
        if (!score_key(idx, sc, keys[k], out)) {
            break;
        }
    }
    int32_t longest = 0;
    for (size_t i = 0; i < n_pods; i++) {
        if (first[i] >= 0 && sc->cand_of[first[i]] != (int32_t)i) {
            out[i] = out[sc->cand_of[first[i]]]; /* the same pod named twice */
        }
        longest = out[i].precise_blocks > longest ? out[i].precise_blocks : longest;
    }
    return longest;
}

int32_t kvidx_score(struct kvidx *idx, const uint64_t *keys, size_t n_keys, const char *const *pods,
                    size_t n_pods, struct epp_prefix_match *out)
{
    for (size_t i = 0; i < n_pods; i++) {
        out[i] = (struct epp_prefix_match){0};
    }
    if (n_pods == 0 || n_keys == 0 || !keys || !pods || n_pods > UINT32_MAX / 2) {
        return 0;
    }
    pthread_rwlock_rdlock(&idx->pods_lock);
    struct scoring sc = {0};
    sc.cand_of = malloc(((size_t)idx->pods_alloc + 1) * sizeof(*sc.cand_of));
    sc.best = malloc(n_pods * sizeof(*sc.best));
    sc.active = malloc(n_pods * 2 * sizeof(*sc.active));
    int32_t longest = 0;
    if (sc.cand_of && sc.best && sc.active) {
        memset(sc.cand_of, 0xff, ((size_t)idx->pods_alloc + 1) * sizeof(*sc.cand_of));
        longest = score_locked(idx, &sc, keys, n_keys, pods, n_pods, out);
    }
    pthread_rwlock_unlock(&idx->pods_lock);
    free(sc.cand_of);
    free(sc.best);
    free(sc.active);
    return longest;
}

void kvidx_stats(struct kvidx *idx, struct kvidx_stats *out)
{
    out->keys = atomic_load_explicit(&idx->keys, memory_order_relaxed);
    out->entries = atomic_load_explicit(&idx->entries, memory_order_relaxed);
    out->evicted_keys = atomic_load_explicit(&idx->evicted_keys, memory_order_relaxed);
    out->evicted_entries = atomic_load_explicit(&idx->evicted_entries, memory_order_relaxed);
    pthread_rwlock_rdlock(&idx->pods_lock);
    out->pods = idx->n_pods;
    pthread_rwlock_unlock(&idx->pods_lock);
}

/* Under pods_lock (read). A tier's name is written before its first count is released, so a
 * count read (acquire) above zero comes with the name. */
static void pod_info(struct kvidx *idx, const struct pod *p, struct kvidx_pod_info *out)
{
    memset(out, 0, sizeof(*out));
    strcpy(out->pod, p->name);
    for (int t = 0; t < KVIDX_MAX_TIERS; t++) {
        uint64_t n = atomic_load_explicit(&p->tier_n[t], memory_order_acquire);
        if (n > 0) {
            strcpy(out->tier[out->n_tiers], idx->tier_name[t]);
            out->tier_entries[out->n_tiers++] = n;
            out->entries += n;
        }
    }
}

size_t kvidx_pods(struct kvidx *idx, struct kvidx_pod_info *out, size_t cap)
{
    size_t n = 0;
    pthread_rwlock_rdlock(&idx->pods_lock);
    for (uint32_t id = 0; id < idx->pods_alloc; id++) {
        if (idx->pods[id].name) {
            if (n < cap) {
                pod_info(idx, &idx->pods[id], &out[n]);
            }
            n++;
        }
    }
    pthread_rwlock_unlock(&idx->pods_lock);
    return n;
}

int kvidx_pod(struct kvidx *idx, const char *pod, struct kvidx_pod_info *out)
{
    memset(out, 0, sizeof(*out));
    if (!name_ok(pod)) {
        return 0;
    }
    pthread_rwlock_rdlock(&idx->pods_lock);
    int id = pod_find(idx, pod);
    if (id >= 0) {
        pod_info(idx, &idx->pods[id], out);
    }
    pthread_rwlock_unlock(&idx->pods_lock);
    return id >= 0;
}

size_t kvidx_lookup(struct kvidx *idx, uint64_t key, struct kvidx_holder *out, size_t cap)
{
    uint64_t h = mix(key);
    struct shard *s = shard_of(idx, h);
    size_t n = 0;
    pthread_rwlock_rdlock(&idx->pods_lock);
    pthread_rwlock_rdlock(&s->lock);
    uint32_t nd = find(idx, s, key, h);
    if (nd != NIL) {
        const struct node *x = node_at(idx, s, nd);
        for (uint32_t i = 0; i < x->n && n < cap; i++, n++) {
            strcpy(out[n].pod, idx->pods[x->e[i].pod].name);
            strcpy(out[n].tier, idx->tier_name[x->e[i].tier]);
        }
    }
    pthread_rwlock_unlock(&s->lock);
    pthread_rwlock_unlock(&idx->pods_lock);
    return n;
}
