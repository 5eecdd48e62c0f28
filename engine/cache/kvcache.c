/*
 * Paged KV block manager (see kvcache.h): block array with an intrusive free queue, an open
 * addressing hash -> block map with backward-shift deletion, and SHA-256 chained block hashes.
 */
#include "engine/cache/kvcache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "lib/common.h"

#define KVC_NONE (-1)

typedef struct kvc_block {
    int32_t prev; /* free queue links (block ids; the sentinel is num_blocks) */
    int32_t next;
    int32_t ref_cnt; /* sequences holding the block */
    bool in_free;    /* in the free queue (ref_cnt == 0) */
    bool hashed;     /* registered in the hash map under hash */
    bool group0;     /* hashed for group 0 (kvc_seq_set_group): eviction is an event */
    kvc_hash hash;   /* the map key: the block hash, mixed with the group's key */
} kvc_block;

struct kvc {
    int32_t num_blocks;
    int32_t block_size;
    bool prefix_caching;
    kvc_hash seed;     /* parent hash of every chain's first block */
    kvc_block *blocks; /* [num_blocks + 1]; the last one is the free queue sentinel */
    int32_t n_free;
    kvc_hash *map_keys; /* [map_cap] */
    int32_t *map_vals;  /* [map_cap] block id, KVC_NONE when the slot is empty */
    uint32_t map_mask;  /* map_cap - 1 (power of two, >= 2 * num_blocks) */
    int32_t map_count;
    kvc_event_sink sink;
    uint64_t queries;
    uint64_t hits;
};

/* ---- hashing ---------------------------------------------------------------------------- */

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static kvc_hash digest_to_hash(const unsigned char *md, unsigned int len)
{
    kvc_hash h = 0;
    for (unsigned int i = len - 8; i < len; i++) {
        h = (h << 8) | md[i];
    }
    return h;
}

/* SHA-256 over the given parts, truncated like vLLM's int block hashes. */
static kvc_hash sha_parts(const void *const *parts, const size_t *lens, int n)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    TANDEM_ASSERT(ctx != NULL);
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (int i = 0; ok && i < n; i++) {
        ok = EVP_DigestUpdate(ctx, parts[i], lens[i]);
    }
    ok = ok && EVP_DigestFinal_ex(ctx, md, &md_len);
    EVP_MD_CTX_free(ctx);
    TANDEM_ASSERT(ok && md_len >= 8);
    return digest_to_hash(md, md_len);
}

kvc_hash kvc_hash_string(const char *s)
{
    static const char tag[] = "tandem-kvc-extra:";
    const void *parts[2] = {tag, s ? s : ""};
    size_t lens[2] = {sizeof(tag) - 1, s ? strlen(s) : 0};
    return sha_parts(parts, lens, 2);
}

kvc_hash kvc_hash_block(const kvc *c, const kvc_hash *parent, const int32_t *tokens,
                        int32_t n_tokens, const kvc_hash *lora_hash, const kvc_hash *salt_hash)
{
    /* parent (8, big-endian) | flags (1) | lora (8)? | salt (8)? | tokens (4 each, LE) */
    unsigned char head[8 + 1 + 8 + 8];
    size_t head_len = 0;
    put_be64(head, parent ? *parent : c->seed);
    head[8] = (unsigned char)((lora_hash ? 1 : 0) | (salt_hash ? 2 : 0));
    head_len = 9;
    if (lora_hash) {
        put_be64(head + head_len, *lora_hash);
        head_len += 8;
    }
    if (salt_hash) {
        put_be64(head + head_len, *salt_hash);
        head_len += 8;
    }
    unsigned char tok[256 * 4];
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    TANDEM_ASSERT(ctx != NULL);
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && EVP_DigestUpdate(ctx, head, head_len);
    for (int32_t i = 0; ok && i < n_tokens;) {
        size_t k = 0;
        for (; i < n_tokens && k < sizeof(tok); i++, k += 4) {
            uint32_t t = (uint32_t)tokens[i];
            tok[k] = (unsigned char)(t & 0xff);
            tok[k + 1] = (unsigned char)((t >> 8) & 0xff);
            tok[k + 2] = (unsigned char)((t >> 16) & 0xff);
            tok[k + 3] = (unsigned char)(t >> 24);
        }
        ok = EVP_DigestUpdate(ctx, tok, k);
    }
    ok = ok && EVP_DigestFinal_ex(ctx, md, &md_len);
    EVP_MD_CTX_free(ctx);
    TANDEM_ASSERT(ok && md_len >= 8);
    return digest_to_hash(md, md_len);
}

/* ---- hash map --------------------------------------------------------------------------- */

static uint32_t map_slot(const kvc *c, kvc_hash h)
{
    return (uint32_t)(h ^ (h >> 32)) & c->map_mask;
}

static int32_t map_find(const kvc *c, kvc_hash h)
{
    for (uint32_t i = map_slot(c, h);; i = (i + 1) & c->map_mask) {
        if (c->map_vals[i] == KVC_NONE) {
            return KVC_NONE;
        }
        if (c->map_keys[i] == h) {
            return c->map_vals[i];
        }
    }
}

static void map_insert(kvc *c, kvc_hash h, int32_t block)
{
    uint32_t i = map_slot(c, h);
    while (c->map_vals[i] != KVC_NONE) {
        TANDEM_ASSERT(c->map_keys[i] != h);
        i = (i + 1) & c->map_mask;
    }
    c->map_keys[i] = h;
    c->map_vals[i] = block;
    c->map_count++;
}

static void map_remove(kvc *c, kvc_hash h)
{
    uint32_t i = map_slot(c, h);
    while (c->map_keys[i] != h || c->map_vals[i] == KVC_NONE) {
        TANDEM_ASSERT(c->map_vals[i] != KVC_NONE);
        i = (i + 1) & c->map_mask;
    }
    c->map_vals[i] = KVC_NONE;
    c->map_count--;
    /* Backward-shift: move later entries of the probe run into the hole when allowed. */
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & c->map_mask; c->map_vals[j] != KVC_NONE;
         j = (j + 1) & c->map_mask) {
        uint32_t home = map_slot(c, c->map_keys[j]);
        /* j may move to hole when home is not cyclically in (hole, j]. */
        bool in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            c->map_keys[hole] = c->map_keys[j];
            c->map_vals[hole] = c->map_vals[j];
            c->map_vals[j] = KVC_NONE;
            hole = j;
        }
    }
}

/* ---- free queue ------------------------------------------------------------------------- */

static void queue_remove(kvc *c, int32_t id)
{
    kvc_block *b = &c->blocks[id];
    TANDEM_ASSERT(b->in_free);
    c->blocks[b->prev].next = b->next;
    c->blocks[b->next].prev = b->prev;
    b->prev = b->next = KVC_NONE;
    b->in_free = false;
    c->n_free--;
}

static void queue_append(kvc *c, int32_t id)
{
    int32_t sentinel = c->num_blocks;
    kvc_block *b = &c->blocks[id];
    TANDEM_ASSERT(!b->in_free && b->ref_cnt == 0);
    b->prev = c->blocks[sentinel].prev;
    b->next = sentinel;
    c->blocks[b->prev].next = id;
    c->blocks[sentinel].prev = id;
    b->in_free = true;
    c->n_free++;
}

/* Pops the LRU head, evicting it from the prefix cache if it is cached. */
static int32_t queue_pop(kvc *c)
{
    int32_t id = c->blocks[c->num_blocks].next;
    TANDEM_ASSERT(id != c->num_blocks);
    queue_remove(c, id);
    kvc_block *b = &c->blocks[id];
    if (b->hashed) {
        kvc_hash h = b->hash;
        map_remove(c, h);
        b->hashed = false;
        b->hash = 0;
        if (b->group0 && c->sink.removed) {
            c->sink.removed(c->sink.user, &h, 1);
        }
    }
    return id;
}

/* ---- pool ------------------------------------------------------------------------------- */

kvc *kvc_new(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching, uint64_t hash_seed,
             const kvc_event_sink *sink)
{
    if (num_blocks < 2 || num_blocks > KVC_MAX_BLOCKS || block_size < 1 ||
        block_size > KVC_MAX_BLOCK_SIZE) {
        return NULL;
    }
    kvc *c = calloc(1, sizeof(*c));
    if (!c) {
        return NULL;
    }
    c->num_blocks = num_blocks;
    c->block_size = block_size;
    c->prefix_caching = enable_prefix_caching;
    if (sink) {
        c->sink = *sink;
    }
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)num_blocks) {
        cap <<= 1;
    }
    c->map_mask = cap - 1;
    c->blocks = calloc((size_t)num_blocks + 1, sizeof(*c->blocks));
    c->map_keys = calloc(cap, sizeof(*c->map_keys));
    c->map_vals = malloc(cap * sizeof(*c->map_vals));
    if (!c->blocks || !c->map_keys || !c->map_vals) {
        goto err_free;
    }
    for (uint32_t i = 0; i < cap; i++) {
        c->map_vals[i] = KVC_NONE;
    }
    static const char seed_tag[] = "tandem-kvc-seed:";
    unsigned char seed_be[8];
    put_be64(seed_be, hash_seed);
    const void *parts[2] = {seed_tag, seed_be};
    size_t lens[2] = {sizeof(seed_tag) - 1, sizeof(seed_be)};
    c->seed = sha_parts(parts, lens, 2);

    int32_t sentinel = num_blocks;
    c->blocks[sentinel].prev = c->blocks[sentinel].next = sentinel;
    c->blocks[0].prev = c->blocks[0].next = KVC_NONE;
    for (int32_t i = 1; i < num_blocks; i++) {
        queue_append(c, i);
    }
    return c;

err_free:
    kvc_free(c);
    return NULL;
}

void kvc_free(kvc *c)
{
    if (!c) {
        return;
    }
    free(c->blocks);
    free(c->map_keys);
    free(c->map_vals);
    free(c);
}

int32_t kvc_block_size(const kvc *c)
{
    return c->block_size;
}

int32_t kvc_num_blocks(const kvc *c)
{
    return c->num_blocks;
}

/* ---- sequences -------------------------------------------------------------------------- */

int kvc_seq_init(kvc_seq *s, const kvc *c, int32_t max_tokens, const char *cache_salt,
                 const char *lora_name)
{
    memset(s, 0, sizeof(*s));
    if (max_tokens < 1) {
        return -EINVAL;
    }
    int32_t max_blocks = (int32_t)(((int64_t)max_tokens + c->block_size - 1) / c->block_size);
    s->blocks = malloc((size_t)max_blocks * sizeof(*s->blocks));
    s->hashes = malloc((size_t)max_blocks * sizeof(*s->hashes));
    if (!s->blocks || !s->hashes) {
        free(s->blocks);
        free(s->hashes);
        memset(s, 0, sizeof(*s));
        return -ENOMEM;
    }
    s->max_blocks = max_blocks;
    if (cache_salt && cache_salt[0]) {
        s->has_salt = true;
        s->salt_hash = kvc_hash_string(cache_salt);
    }
    if (lora_name && lora_name[0]) {
        s->has_lora = true;
        s->lora_hash = kvc_hash_string(lora_name);
        s->lora_name = lora_name;
    }
    return 0;
}

void kvc_seq_set_group(kvc_seq *s, int32_t group)
{
    s->group = group;
    s->group_key = 0;
    if (group > 0) {
        char name[32];
        snprintf(name, sizeof name, "kv-cache-group:%d", (int)group);
        s->group_key = kvc_hash_string(name);
    }
}

/* The prefix-cache key of s's block i: its hash, mixed with the group's key. */
static kvc_hash seq_key(const kvc_seq *s, int32_t i)
{
    return s->hashes[i] ^ s->group_key;
}

void kvc_seq_deinit(kvc *c, kvc_seq *s)
{
    if (s->blocks) {
        kvc_release(c, s);
    }
    free(s->blocks);
    free(s->hashes);
    memset(s, 0, sizeof(*s));
}

/* Extends s->hashes over the full blocks of tokens[0..n_tokens). */
static void seq_hash_blocks(const kvc *c, kvc_seq *s, const int32_t *tokens, int32_t n_tokens)
{
    int32_t full = n_tokens / c->block_size;
    if (full > s->max_blocks) {
        full = s->max_blocks;
    }
    for (int32_t i = s->n_hashes; i < full; i++) {
        s->hashes[i] = kvc_hash_block(
            c, i ? &s->hashes[i - 1] : NULL, tokens + (size_t)i * c->block_size, c->block_size,
            s->has_lora ? &s->lora_hash : NULL, (i == 0 && s->has_salt) ? &s->salt_hash : NULL);
    }
    if (full > s->n_hashes) {
        s->n_hashes = full;
    }
}

int32_t kvc_lookup(kvc *c, kvc_seq *s, const int32_t *tokens, int32_t n_tokens, kvc_hits *hits)
{
    hits->n_blocks = 0;
    hits->query_tokens = 0;
    if (s->n_blocks != 0 || n_tokens < 1 || n_tokens > (int64_t)s->max_blocks * c->block_size) {
        return -EINVAL;
    }
    hits->query_tokens = n_tokens;
    if (!c->prefix_caching) {
        return 0;
    }
    seq_hash_blocks(c, s, tokens, n_tokens);
    int32_t max_hit_blocks = (n_tokens - 1) / c->block_size;
    for (int32_t i = 0; i < s->n_hashes && i < max_hit_blocks && i < hits->cap; i++) {
        int32_t id = map_find(c, seq_key(s, i));
        if (id == KVC_NONE) {
            break;
        }
        hits->blocks[i] = id;
        hits->n_blocks++;
    }
    return hits->n_blocks * c->block_size;
}

int32_t kvc_lookup_window(kvc *c, kvc_seq *s, const int32_t *tokens, int32_t n_tokens,
                          int32_t max_hit_tokens, int32_t window, kvc_hits *hits)
{
    hits->n_blocks = 0;
    hits->query_tokens = 0;
    if (s->n_blocks != 0 || n_tokens < 1 || n_tokens > (int64_t)s->max_blocks * c->block_size ||
        window < 1) {
        return -EINVAL;
    }
    hits->query_tokens = n_tokens;
    if (!c->prefix_caching) {
        return 0;
    }
    seq_hash_blocks(c, s, tokens, n_tokens);
    int32_t limit = n_tokens - 1 < max_hit_tokens ? n_tokens - 1 : max_hit_tokens;
    int32_t max_blocks = limit > 0 ? limit / c->block_size : 0;
    max_blocks = max_blocks < s->n_hashes ? max_blocks : s->n_hashes;
    max_blocks = max_blocks < hits->cap ? max_blocks : hits->cap;
    const int32_t run_needed = (window - 1 + c->block_size - 1) / c->block_size;
    int32_t run = 0;
    for (int32_t i = max_blocks - 1; i >= 0; i--) {
        int32_t id = map_find(c, seq_key(s, i));
        if (id == KVC_NONE) {
            run = 0;
            continue;
        }
        hits->blocks[i] = id;
        if (++run >= run_needed) {
            for (int32_t j = 0; j < i; j++) {
                hits->blocks[j] = 0; /* outside the window of every later query */
            }
            hits->n_blocks = i + run;
            return hits->n_blocks * c->block_size;
        }
    }
    /* no full run: the cached blocks from position 0 on still make a (shorter) hit */
    hits->n_blocks = run;
    return run * c->block_size;
}

/* Checks n_total_tokens and hits against s; the fresh blocks and the hits in the free queue
 * that taking them would use, or -EINVAL. */
static int32_t alloc_plan(const kvc *c, const kvc_seq *s, int32_t n_total_tokens,
                          const kvc_hits *hits, int32_t *fresh, int32_t *evictable_hits)
{
    int32_t n_hits = hits ? hits->n_blocks : 0;
    if (n_total_tokens < 0 || n_total_tokens > (int64_t)s->max_blocks * c->block_size ||
        (hits && s->n_blocks != 0)) {
        return -EINVAL;
    }
    int32_t need = (int32_t)(((int64_t)n_total_tokens + c->block_size - 1) / c->block_size);
    if (n_hits > need) {
        return -EINVAL;
    }
    int32_t have = s->n_blocks + n_hits;
    *fresh = need > have ? need - have : 0;
    *evictable_hits = 0;
    for (int32_t i = 0; i < n_hits; i++) {
        if (hits->blocks[i] == 0) {
            continue; /* a null entry of kvc_lookup_window */
        }
        const kvc_block *b = &c->blocks[hits->blocks[i]];
        /* a hit is valid only until the pool changes: it must still be this chain's block */
        TANDEM_ASSERT(i < s->n_hashes && b->hashed && b->hash == seq_key(s, i));
        *evictable_hits += b->ref_cnt == 0;
    }
    return 0;
}

int32_t kvc_blocks_needed(const kvc *c, const kvc_seq *s, int32_t n_total_tokens,
                          const kvc_hits *hits)
{
    int32_t fresh, evictable_hits;
    int rc = alloc_plan(c, s, n_total_tokens, hits, &fresh, &evictable_hits);
    return rc != 0 ? rc : fresh + evictable_hits;
}

int kvc_allocate(kvc *c, kvc_seq *s, int32_t n_total_tokens, const kvc_hits *hits)
{
    int32_t n_hits = hits ? hits->n_blocks : 0;
    int32_t fresh, evictable_hits;
    int rc = alloc_plan(c, s, n_total_tokens, hits, &fresh, &evictable_hits);
    if (rc != 0) {
        return rc;
    }
    if (c->n_free - evictable_hits < fresh) {
        return -ENOSPC;
    }
    if (hits) {
        if (c->prefix_caching && s->group == 0) {
            c->queries += (uint64_t)hits->query_tokens;
            c->hits += (uint64_t)n_hits * (uint64_t)c->block_size;
        }
        for (int32_t i = 0; i < n_hits; i++) {
            int32_t id = hits->blocks[i];
            if (id == 0) {
                s->blocks[s->n_blocks++] = 0;
                continue;
            }
            kvc_block *b = &c->blocks[id];
            if (b->in_free) {
                queue_remove(c, id);
            }
            b->ref_cnt++;
            s->blocks[s->n_blocks++] = id;
        }
        s->n_cached = n_hits;
    }
    for (int32_t i = 0; i < fresh; i++) {
        int32_t id = queue_pop(c);
        c->blocks[id].ref_cnt = 1;
        s->blocks[s->n_blocks++] = id;
    }
    return 0;
}

static void emit_stored(kvc *c, const kvc_seq *s, const int32_t *tokens, int32_t first, int32_t n)
{
    if (n == 0 || !c->sink.stored || s->group != 0) {
        return;
    }
    kvc_stored_event ev = {
        .block_hashes = &s->hashes[first],
        .n_blocks = n,
        .has_parent = first > 0,
        .parent_hash = first > 0 ? s->hashes[first - 1] : 0,
        .token_ids = tokens + (size_t)first * c->block_size,
        .block_size = c->block_size,
        .block_ids = &s->blocks[first],
        .lora_name = s->lora_name,
    };
    c->sink.stored(c->sink.user, &ev);
}

void kvc_cache_blocks(kvc *c, kvc_seq *s, const int32_t *tokens, int32_t n_computed)
{
    if (!c->prefix_caching) {
        return;
    }
    int32_t full = n_computed / c->block_size;
    if (full > s->n_blocks) {
        full = s->n_blocks;
    }
    if (full <= s->n_cached) {
        return;
    }
    seq_hash_blocks(c, s, tokens, full * c->block_size);
    int32_t run_start = s->n_cached;
    for (int32_t i = s->n_cached; i < full; i++) {
        kvc_block *b = &c->blocks[s->blocks[i]];
        /* a null entry (released past a sliding window) has nothing to register */
        bool registers = s->blocks[i] != 0 && !b->hashed && map_find(c, seq_key(s, i)) == KVC_NONE;
        if (registers) {
            b->hashed = true;
            b->group0 = s->group == 0;
            b->hash = seq_key(s, i);
            map_insert(c, b->hash, s->blocks[i]);
        } else {
            emit_stored(c, s, tokens, run_start, i - run_start);
            run_start = i + 1;
        }
    }
    emit_stored(c, s, tokens, run_start, full - run_start);
    s->n_cached = full;
}

int32_t kvc_release_before(kvc *c, kvc_seq *s, int32_t n_tokens)
{
    int32_t n = n_tokens > 0 ? n_tokens / c->block_size : 0;
    n = n < s->n_blocks ? n : s->n_blocks;
    int32_t dropped = 0;
    for (int32_t i = n - 1; i >= 0 && s->blocks[i] != 0; i--) {
        kvc_block *b = &c->blocks[s->blocks[i]];
        TANDEM_ASSERT(b->ref_cnt > 0);
        if (--b->ref_cnt == 0) {
            queue_append(c, s->blocks[i]);
        }
        s->blocks[i] = 0;
        dropped++;
    }
    return dropped;
}

void kvc_release(kvc *c, kvc_seq *s)
{
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) {
        if (s->blocks[i] == 0) {
            break; /* the null entries of kvc_release_before: a prefix */
        }
        kvc_block *b = &c->blocks[s->blocks[i]];
        TANDEM_ASSERT(b->ref_cnt > 0);
        if (--b->ref_cnt == 0) {
            queue_append(c, s->blocks[i]);
        }
    }
    s->n_blocks = 0;
    s->n_cached = 0;
}

int kvc_reset_prefix_cache(kvc *c)
{
    if (c->n_free != c->num_blocks - 1) {
        return -EBUSY;
    }
    if (!c->prefix_caching) {
        return 0;
    }
    for (int32_t i = 1; i < c->num_blocks; i++) {
        c->blocks[i].hashed = false;
        c->blocks[i].hash = 0;
    }
    for (uint32_t i = 0; i <= c->map_mask; i++) {
        c->map_vals[i] = KVC_NONE;
    }
    c->map_count = 0;
    if (c->sink.all_cleared) {
        c->sink.all_cleared(c->sink.user);
    }
    return 0;
}

/* ---- stats and checks ------------------------------------------------------------------- */

int32_t kvc_num_free_blocks(const kvc *c)
{
    return c->n_free;
}

int32_t kvc_num_cached_blocks(const kvc *c)
{
    return c->map_count;
}

double kvc_usage(const kvc *c)
{
    return 1.0 - (double)c->n_free / (double)(c->num_blocks - 1);
}

uint64_t kvc_prefix_queries(const kvc *c)
{
    return c->queries;
}

uint64_t kvc_prefix_hits(const kvc *c)
{
    return c->hits;
}

int32_t kvc_ref_cnt(const kvc *c, int32_t block)
{
    if (block < 0 || block >= c->num_blocks) {
        return -1;
    }
    return c->blocks[block].ref_cnt;
}

int32_t kvc_free_queue(const kvc *c, int32_t *ids, int32_t cap)
{
    int32_t n = 0;
    for (int32_t id = c->blocks[c->num_blocks].next; id != c->num_blocks && n < cap;
         id = c->blocks[id].next) {
        ids[n++] = id;
    }
    return n;
}

int kvc_check(const kvc *c)
{
    int32_t sentinel = c->num_blocks;
    int32_t n = 0;
    int32_t prev = sentinel;
    for (int32_t id = c->blocks[sentinel].next; id != sentinel; id = c->blocks[id].next) {
        if (id <= 0 || id >= c->num_blocks || n >= c->num_blocks) {
            return -EFAULT;
        }
        const kvc_block *b = &c->blocks[id];
        if (!b->in_free || b->ref_cnt != 0 || b->prev != prev) {
            return -EFAULT;
        }
        prev = id;
        n++;
    }
    if (n != c->n_free || c->blocks[sentinel].prev != prev) {
        return -EFAULT;
    }
    int32_t hashed = 0;
    for (int32_t i = 1; i < c->num_blocks; i++) {
        const kvc_block *b = &c->blocks[i];
        if (b->ref_cnt < 0 || (b->ref_cnt == 0) != b->in_free) {
            return -EFAULT;
        }
        if (b->hashed) {
            hashed++;
            if (map_find(c, b->hash) != i) {
                return -EFAULT;
            }
        }
    }
    if (c->blocks[0].in_free || c->blocks[0].hashed || hashed != c->map_count) {
        return -EFAULT;
    }
    return 0;
}
