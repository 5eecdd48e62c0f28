/* Unit tests for engine/cache: LRU free queue, tail-first eviction, prefix hits (touch, ref
 * counts, max_cache_hit_length), chained hashes, KV events, counters, and a randomized sequence
 * of operations checked against a simple model of the expected state. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/cache/kvcache.h"

#define MAX_EV     64
#define MAX_EV_TOK 256

/* Records events for inspection. */
typedef struct ev_stored {
    kvc_hash hashes[16];
    int32_t n_blocks;
    bool has_parent;
    kvc_hash parent;
    int32_t tokens[MAX_EV_TOK];
    int32_t n_tokens;
    int32_t block_size;
    int32_t block_ids[16];
    bool has_lora;
    char lora[32];
} ev_stored;

typedef struct ev_log {
    int n_stored;
    int n_removed;
    int n_cleared;
    ev_stored stored[MAX_EV];
    kvc_hash removed[MAX_EV];
} ev_log;

static void on_stored(void *user, const kvc_stored_event *ev)
{
    ev_log *l = user;
    assert_true(l->n_stored < MAX_EV);
    assert_true(ev->n_blocks >= 1 && ev->n_blocks <= 16);
    int32_t n_tok = ev->n_blocks * ev->block_size;
    assert_true(n_tok <= MAX_EV_TOK);
    ev_stored *s = &l->stored[l->n_stored++];
    memcpy(s->hashes, ev->block_hashes, sizeof(kvc_hash) * (size_t)ev->n_blocks);
    memcpy(s->block_ids, ev->block_ids, sizeof(int32_t) * (size_t)ev->n_blocks);
    memcpy(s->tokens, ev->token_ids, sizeof(int32_t) * (size_t)n_tok);
    s->n_blocks = ev->n_blocks;
    s->has_parent = ev->has_parent;
    s->parent = ev->parent_hash;
    s->n_tokens = n_tok;
    s->block_size = ev->block_size;
    s->has_lora = ev->lora_name != NULL;
    if (ev->lora_name) {
        snprintf(s->lora, sizeof(s->lora), "%s", ev->lora_name);
    }
}

static void on_removed(void *user, const kvc_hash *hashes, int32_t n)
{
    ev_log *l = user;
    assert_int_equal(n, 1);
    assert_true(l->n_removed < MAX_EV);
    l->removed[l->n_removed++] = hashes[0];
}

static void on_cleared(void *user)
{
    ev_log *l = user;
    l->n_cleared++;
}

static kvc *new_logged(int32_t num_blocks, int32_t bs, ev_log *l)
{
    memset(l, 0, sizeof(*l));
    kvc_event_sink sink = {l, on_stored, on_removed, on_cleared, NULL};
    kvc *c = kvc_new(num_blocks, bs, true, 42, &sink);
    assert_non_null(c);
    return c;
}

static void seq_tokens(int32_t *t, int32_t n, int32_t base)
{
    for (int32_t i = 0; i < n; i++) {
        t[i] = base + i;
    }
}

static void test_new_bad_args(void **state)
{
    (void)state;
    assert_null(kvc_new(1, 16, true, 0, NULL));
    assert_null(kvc_new(10, 0, true, 0, NULL));
    assert_null(kvc_new(10, KVC_MAX_BLOCK_SIZE + 1, true, 0, NULL));
    kvc *c = kvc_new(10, 16, false, 0, NULL);
    assert_non_null(c);
    assert_int_equal(kvc_num_free_blocks(c), 9);
    assert_int_equal(kvc_block_size(c), 16);
    assert_int_equal(kvc_num_blocks(c), 10);
    assert_true(kvc_usage(c) == 0.0);
    kvc_seq s;
    assert_int_equal(kvc_seq_init(&s, c, 0, NULL, NULL), -EINVAL);
    kvc_free(c);
    kvc_free(NULL);
}

static void test_lru_and_tail_first_eviction(void **state)
{
    (void)state;
    kvc *c = kvc_new(9, 4, true, 1, NULL);
    assert_non_null(c);
    int32_t q[16];
    assert_int_equal(kvc_free_queue(c, q, 16), 8);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(q[i], i + 1); /* block 0 is never handed out */
    }
    kvc_seq a, b;
    assert_int_equal(kvc_seq_init(&a, c, 64, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&b, c, 64, NULL, NULL), 0);
    assert_int_equal(kvc_allocate(c, &a, 10, NULL), 0); /* 3 blocks */
    assert_int_equal(a.n_blocks, 3);
    assert_int_equal(a.blocks[0], 1);
    assert_int_equal(a.blocks[1], 2);
    assert_int_equal(a.blocks[2], 3);
    assert_int_equal(kvc_num_free_blocks(c), 5);
    assert_true(kvc_usage(c) == 3.0 / 8.0);
    /* Growing within the last block takes nothing; crossing a boundary takes one. */
    assert_int_equal(kvc_allocate(c, &a, 12, NULL), 0);
    assert_int_equal(a.n_blocks, 3);
    kvc_release(c, &a);
    assert_int_equal(a.n_blocks, 0);
    assert_int_equal(kvc_free_queue(c, q, 16), 8);
    int32_t want[] = {4, 5, 6, 7, 8, 3, 2, 1}; /* reverse order: chain tail first */
    for (int i = 0; i < 8; i++) {
        assert_int_equal(q[i], want[i]);
    }
    assert_int_equal(kvc_allocate(c, &b, 24, NULL), 0); /* 6 blocks: 4..8 then 3 */
    assert_int_equal(b.blocks[5], 3);
    /* All or nothing. */
    assert_int_equal(kvc_allocate(c, &a, 13, NULL), -ENOSPC);
    assert_int_equal(a.n_blocks, 0);
    assert_int_equal(kvc_num_free_blocks(c), 2);
    assert_int_equal(kvc_allocate(c, &a, 8, NULL), 0);
    assert_int_equal(kvc_num_free_blocks(c), 0);
    assert_int_equal(kvc_allocate(c, &a, 65, NULL), -EINVAL); /* past the sequence's max tokens */
    assert_int_equal(kvc_check(c), 0);
    kvc_seq_deinit(c, &a);
    kvc_seq_deinit(c, &b);
    assert_int_equal(kvc_num_free_blocks(c), 8);
    kvc_free(c);
}

/* Sliding windows: the blocks before a position go back to the pool (last first), their
 * entries become the null block, cached ones stay findable, and the sequence still grows and
 * releases normally. */
static void test_release_before(void **state)
{
    (void)state;
    kvc *c = kvc_new(9, 4, true, 1, NULL);
    assert_non_null(c);
    kvc_seq a, b;
    int32_t toks[24], q[16];
    seq_tokens(toks, 24, 100);
    assert_int_equal(kvc_seq_init(&a, c, 64, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&b, c, 64, NULL, NULL), 0);
    assert_int_equal(kvc_allocate(c, &a, 20, NULL), 0); /* blocks 1..5 */
    kvc_cache_blocks(c, &a, toks, 20);
    assert_int_equal(kvc_num_free_blocks(c), 3);
    assert_int_equal(kvc_release_before(c, &a, 3), 0); /* no whole block before position 3 */
    assert_int_equal(kvc_release_before(c, &a, -7), 0);
    assert_int_equal(kvc_release_before(c, &a, 9), 2); /* blocks of positions 0..7 */
    assert_int_equal(a.blocks[0], 0);
    assert_int_equal(a.blocks[1], 0);
    assert_int_equal(a.blocks[2], 3);
    assert_int_equal(a.n_blocks, 5);
    assert_int_equal(kvc_num_free_blocks(c), 5);
    assert_int_equal(kvc_free_queue(c, q, 16), 5);
    assert_int_equal(q[3], 2); /* last first: the later block is evicted before the earlier */
    assert_int_equal(q[4], 1);
    assert_int_equal(kvc_release_before(c, &a, 9), 0); /* idempotent */
    assert_int_equal(kvc_release_before(c, &a, 13), 1);
    assert_int_equal(kvc_release_before(c, &a, 1000), 2); /* clamped to the blocks held */
    assert_int_equal(kvc_check(c), 0);
    /* the dropped blocks are still cached: another sequence with the same tokens finds them */
    int32_t hb[16];
    kvc_hits hits = {.blocks = hb, .cap = 16};
    assert_int_equal(kvc_lookup(c, &b, toks, 20, &hits), 16);
    assert_int_equal(hits.n_blocks, 4);
    assert_int_equal(hb[0], 1);
    assert_int_equal(kvc_allocate(c, &b, 20, &hits), 0);
    /* a grows past its null entries and releases what it still holds */
    assert_int_equal(kvc_allocate(c, &a, 24, NULL), 0);
    assert_int_equal(a.n_blocks, 6);
    assert_true(a.blocks[5] > 0);
    kvc_release(c, &a);
    kvc_release(c, &b);
    assert_int_equal(kvc_num_free_blocks(c), 8);
    assert_int_equal(kvc_check(c), 0);
    kvc_seq_deinit(c, &a);
    kvc_seq_deinit(c, &b);
    kvc_free(c);
}

/* KV cache groups: two groups of one sequence share the block hashes but never a block; only
 * group 0 counts queries and hits and reports events. */
static void test_groups(void **state)
{
    (void)state;
    ev_log l;
    kvc *c = new_logged(17, 4, &l);
    int32_t toks[16];
    seq_tokens(toks, 16, 7);
    kvc_seq g0, g1, h0, h1;
    assert_int_equal(kvc_seq_init(&g0, c, 16, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&g1, c, 16, NULL, NULL), 0);
    kvc_seq_set_group(&g1, 1);
    assert_int_equal(kvc_allocate(c, &g0, 16, NULL), 0);
    assert_int_equal(kvc_allocate(c, &g1, 16, NULL), 0);
    kvc_cache_blocks(c, &g0, toks, 16);
    kvc_cache_blocks(c, &g1, toks, 16);
    assert_int_equal(kvc_num_cached_blocks(c), 8); /* 4 per group, the same hashes */
    assert_int_equal(l.n_stored, 1);               /* group 0's run only */
    assert_int_equal(l.stored[0].n_blocks, 4);
    for (int i = 0; i < 4; i++) {
        assert_true(g0.hashes[i] == g1.hashes[i]);
        assert_true(g0.blocks[i] != g1.blocks[i]);
    }
    kvc_release(c, &g1);
    kvc_release(c, &g0);
    /* each group finds its own blocks back */
    assert_int_equal(kvc_seq_init(&h0, c, 16, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&h1, c, 16, NULL, NULL), 0);
    kvc_seq_set_group(&h1, 1);
    int32_t b0[4], b1[4];
    kvc_hits k0 = {.blocks = b0, .cap = 4}, k1 = {.blocks = b1, .cap = 4};
    assert_int_equal(kvc_lookup(c, &h0, toks, 16, &k0), 12);
    assert_int_equal(kvc_lookup(c, &h1, toks, 16, &k1), 12);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(b0[i], g0.blocks[i]);
        assert_int_equal(b1[i], g1.blocks[i]);
    }
    /* all or nothing over the groups: 12 free blocks, each group takes its 3 hits + 1 fresh */
    assert_int_equal(kvc_num_free_blocks(c), 16);
    assert_int_equal(kvc_blocks_needed(c, &h0, 16, &k0), 4);
    assert_int_equal(kvc_blocks_needed(c, &h1, 16, &k1), 4);
    assert_int_equal(kvc_blocks_needed(c, &h1, 20, &k1), -EINVAL); /* beyond max_tokens */
    assert_int_equal(kvc_allocate(c, &h0, 12, &k0), 0);
    assert_int_equal(kvc_allocate(c, &h1, 12, &k1), 0);
    assert_int_equal(kvc_allocate(c, &h0, 16, NULL), 0);
    assert_int_equal(kvc_allocate(c, &h1, 16, NULL), 0);
    assert_int_equal(kvc_num_free_blocks(c), 8);
    /* the counters saw group 0's lookup only */
    assert_int_equal((int)kvc_prefix_queries(c), 16);
    assert_int_equal((int)kvc_prefix_hits(c), 12);
    kvc_release(c, &h0);
    kvc_release(c, &h1);
    /* evicting every cached block: removed events for group 0's four blocks only */
    kvc_seq big;
    assert_int_equal(kvc_seq_init(&big, c, 64, NULL, NULL), 0);
    assert_int_equal(kvc_allocate(c, &big, 64, NULL), 0);
    assert_int_equal(l.n_removed, 4);
    assert_int_equal(kvc_num_cached_blocks(c), 0);
    assert_int_equal(kvc_check(c), 0);
    kvc_seq_deinit(c, &big);
    kvc_seq_deinit(c, &g0);
    kvc_seq_deinit(c, &g1);
    kvc_seq_deinit(c, &h0);
    kvc_seq_deinit(c, &h1);
    kvc_free(c);
}

/* Sliding-window lookups (vLLM's SlidingWindowManager.find_longest_cache_hit): the rightmost run
 * of ceil((window - 1) / block_size) cached blocks ends the hit, the blocks before it are null. */
static void test_lookup_window(void **state)
{
    (void)state;
    kvc *c = kvc_new(33, 4, true, 3, NULL);
    assert_non_null(c);
    int32_t toks[40];
    seq_tokens(toks, 40, 500);
    kvc_seq a;
    assert_int_equal(kvc_seq_init(&a, c, 40, NULL, NULL), 0);
    kvc_seq_set_group(&a, 2);
    assert_int_equal(kvc_allocate(c, &a, 40, NULL), 0);
    kvc_cache_blocks(c, &a, toks, 40); /* 10 cached blocks */
    int32_t held[10];
    memcpy(held, a.blocks, sizeof held);
    kvc_release(c, &a);
    kvc_seq e;
    assert_int_equal(kvc_seq_init(&e, c, 128, NULL, NULL), 0);
    int32_t hb[16];
    kvc_hits hits = {.blocks = hb, .cap = 16};
    kvc_seq b;
    assert_int_equal(kvc_seq_init(&b, c, 40, NULL, NULL), 0);
    kvc_seq_set_group(&b, 2);
    /* window 9: 2 blocks; the whole 40-token prompt can hit 39 tokens: blocks 0..8 */
    assert_int_equal(kvc_lookup_window(c, &b, toks, 40, 1 << 30, 9, &hits), 36);
    assert_int_equal(hits.n_blocks, 9);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(hb[i], 0);
    }
    assert_int_equal(hb[7], held[7]);
    assert_int_equal(hb[8], held[8]);
    /* capped by a full-attention group's shorter hit */
    assert_int_equal(kvc_lookup_window(c, &b, toks, 40, 22, 9, &hits), 20);
    assert_int_equal(hb[3], held[3]);
    assert_int_equal(hb[4], held[4]);
    assert_int_equal(hb[2], 0);
    /* another group's keys are different: nothing */
    kvc_seq other;
    assert_int_equal(kvc_seq_init(&other, c, 40, NULL, NULL), 0);
    kvc_seq_set_group(&other, 1);
    assert_int_equal(kvc_lookup_window(c, &other, toks, 40, 1 << 30, 9, &hits), 0);
    assert_int_equal(kvc_lookup_window(c, &other, toks, 40, 1 << 30, 0, &hits), -EINVAL);
    /* evict blocks 9 and 8: the free queue holds the 22 never-used blocks, then held[9],
     * held[8], ... (released last first) */
    assert_int_equal(kvc_allocate(c, &e, 4 * (22 + 2), NULL), 0);
    assert_int_equal(kvc_ref_cnt(c, held[9]), 1);
    assert_int_equal(kvc_ref_cnt(c, held[8]), 1);
    /* blocks 0..7 cached, window 9: the run 6, 7 ends the hit at 32 tokens */
    assert_int_equal(kvc_lookup_window(c, &b, toks, 40, 1 << 30, 9, &hits), 32);
    assert_int_equal(hb[7], held[7]);
    assert_int_equal(hb[5], 0);
    /* a window of 17 tokens needs 4 cached blocks: 4..7 */
    assert_int_equal(kvc_lookup_window(c, &b, toks, 40, 1 << 30, 17, &hits), 32);
    assert_int_equal(hb[4], held[4]);
    assert_int_equal(hb[3], 0);
    /* taking window hits: null entries stay null, the others are touched */
    assert_int_equal(kvc_lookup_window(c, &b, toks, 40, 1 << 30, 9, &hits), 32);
    assert_int_equal(kvc_blocks_needed(c, &b, 40, &hits), 2 + 2); /* hits 6, 7 + 2 fresh */
    assert_int_equal(kvc_allocate(c, &b, 40, &hits), 0);
    assert_int_equal(b.blocks[0], 0);
    assert_int_equal(b.blocks[6], held[6]);
    assert_int_equal(kvc_ref_cnt(c, held[6]), 1);
    assert_int_equal(kvc_ref_cnt(c, held[3]), 0); /* held[5], held[4] were the fresh ones */
    assert_int_equal(b.n_cached, 8);
    /* nothing queried or hit: group 2 */
    assert_int_equal((int)kvc_prefix_queries(c), 0);
    kvc_cache_blocks(c, &b, toks, 40); /* registers blocks 8, 9 anew; skips nothing cached */
    assert_int_equal(kvc_check(c), 0);
    kvc_seq_deinit(c, &b);
    kvc_seq_deinit(c, &e);
    kvc_seq_deinit(c, &other);
    kvc_seq_deinit(c, &a);
    /* without a full run from the right, the cached blocks from position 0 are still a hit */
    kvc_seq f, g;
    assert_int_equal(kvc_seq_init(&f, c, 40, NULL, NULL), 0);
    assert_int_equal(kvc_allocate(c, &f, 4, NULL), 0);
    kvc_cache_blocks(c, &f, toks + 20, 4); /* one cached block of other tokens */
    kvc_release(c, &f);
    assert_int_equal(kvc_seq_init(&g, c, 40, NULL, NULL), 0);
    assert_int_equal(kvc_lookup_window(c, &g, toks + 20, 20, 1 << 30, 9, &hits), 4);
    assert_int_equal(hits.n_blocks, 1);
    assert_true(hb[0] > 0);
    kvc_seq_deinit(c, &f);
    kvc_seq_deinit(c, &g);
    kvc_free(c);
}

static void test_shared_prefix_refcounts_and_touch(void **state)
{
    (void)state;
    ev_log *l = calloc(1, sizeof(*l));
    kvc *c = new_logged(16, 4, l);
    int32_t t[13];
    seq_tokens(t, 13, 100);
    kvc_seq a, b, d;
    int32_t hb[8];
    kvc_hits h = {hb, 8, 0, 0};
    assert_int_equal(kvc_seq_init(&a, c, 32, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&b, c, 32, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&d, c, 32, NULL, NULL), 0);

    assert_int_equal(kvc_lookup(c, &a, t, 13, &h), 0);
    assert_int_equal(kvc_allocate(c, &a, 13, &h), 0);
    assert_int_equal(kvc_prefix_queries(c), 13);
    assert_int_equal(kvc_prefix_hits(c), 0);
    kvc_cache_blocks(c, &a, t, 13);
    assert_int_equal(kvc_num_cached_blocks(c), 3);
    assert_int_equal(l->n_stored, 1);
    assert_int_equal(l->stored[0].n_blocks, 3);
    assert_false(l->stored[0].has_parent);
    assert_int_equal(l->stored[0].block_size, 4);
    assert_int_equal(l->stored[0].n_tokens, 12);
    assert_memory_equal(l->stored[0].tokens, t, 12 * sizeof(int32_t));
    assert_memory_equal(l->stored[0].hashes, a.hashes, 3 * sizeof(kvc_hash));
    assert_memory_equal(l->stored[0].block_ids, a.blocks, 3 * sizeof(int32_t));
    /* Caching again is a no-op. */
    kvc_cache_blocks(c, &a, t, 13);
    assert_int_equal(l->n_stored, 1);

    /* B shares the prefix: 3 blocks hit, references shared. */
    assert_int_equal(kvc_lookup(c, &b, t, 13, &h), 12);
    assert_int_equal(kvc_allocate(c, &b, 13, &h), 0);
    assert_int_equal(kvc_prefix_queries(c), 26);
    assert_int_equal(kvc_prefix_hits(c), 12);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(b.blocks[i], a.blocks[i]);
        assert_int_equal(kvc_ref_cnt(c, a.blocks[i]), 2);
    }
    assert_int_not_equal(b.blocks[3], a.blocks[3]);
    assert_int_equal(kvc_num_free_blocks(c), 15 - 5);
    kvc_cache_blocks(c, &b, t, 13); /* nothing new: hits are already cached */
    assert_int_equal(l->n_stored, 1);

    kvc_release(c, &a);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kvc_ref_cnt(c, b.blocks[i]), 1);
    }
    assert_int_equal(kvc_num_free_blocks(c), 15 - 4);
    kvc_release(c, &b);
    assert_int_equal(kvc_num_free_blocks(c), 15);
    assert_int_equal(kvc_num_cached_blocks(c), 3); /* free but still cached */

    /* D hits blocks sitting in the free queue: they are touched (out of the queue). */
    int32_t cached0 = b.blocks[0];
    assert_int_equal(kvc_lookup(c, &d, t, 13, &h), 12);
    assert_int_equal(kvc_num_free_blocks(c), 15); /* lookup alone takes nothing */
    assert_int_equal(kvc_allocate(c, &d, 13, &h), 0);
    assert_int_equal(d.blocks[0], cached0);
    assert_int_equal(kvc_ref_cnt(c, cached0), 1);
    assert_int_equal(kvc_num_free_blocks(c), 11);
    int32_t q[16];
    int32_t nq = kvc_free_queue(c, q, 16);
    for (int i = 0; i < nq; i++) {
        for (int j = 0; j < 4; j++) {
            assert_int_not_equal(q[i], d.blocks[j]);
        }
    }
    assert_int_equal(kvc_check(c), 0);
    kvc_seq_deinit(c, &a);
    kvc_seq_deinit(c, &b);
    kvc_seq_deinit(c, &d);
    assert_int_equal(l->n_removed, 0);
    kvc_free(c);
    free(l);
}

static void test_events_removed_and_cleared(void **state)
{
    (void)state;
    ev_log *l = calloc(1, sizeof(*l));
    kvc *c = new_logged(5, 2, l); /* 4 usable blocks of 2 tokens */
    int32_t t[8];
    seq_tokens(t, 8, 7);
    kvc_seq a, b;
    int32_t hb[4];
    kvc_hits h = {hb, 4, 0, 0};
    assert_int_equal(kvc_seq_init(&a, c, 8, NULL, "lora-x"), 0);
    assert_int_equal(kvc_seq_init(&b, c, 8, NULL, NULL), 0);
    assert_int_equal(kvc_lookup(c, &a, t, 5, &h), 0);
    assert_int_equal(kvc_allocate(c, &a, 5, &h), 0);
    kvc_cache_blocks(c, &a, t, 2); /* first step computed 2 tokens */
    kvc_cache_blocks(c, &a, t, 5); /* then 3 more: one event per step */
    assert_int_equal(l->n_stored, 2);
    assert_int_equal(l->stored[0].n_blocks, 1);
    assert_false(l->stored[0].has_parent);
    assert_int_equal(l->stored[1].n_blocks, 1);
    assert_true(l->stored[1].has_parent);
    assert_true(l->stored[1].parent == l->stored[0].hashes[0]); /* parent hashes chain */
    assert_int_equal(l->stored[1].tokens[0], 9);
    assert_int_equal(l->stored[1].tokens[1], 10);
    assert_true(l->stored[1].has_lora);
    assert_string_equal(l->stored[1].lora, "lora-x");

    /* Reset is refused while blocks are held. */
    assert_int_equal(kvc_reset_prefix_cache(c), -EBUSY);
    assert_int_equal(l->n_cleared, 0);
    kvc_release(c, &a);
    /* Queue now: 4, then a's blocks reversed: 3, 2, 1. B takes 4 blocks: evicts 2 and 1. */
    assert_int_equal(kvc_allocate(c, &b, 8, NULL), 0);
    assert_int_equal(l->n_removed, 2);
    assert_true(l->removed[0] == l->stored[1].hashes[0]); /* chain tail evicted first */
    assert_true(l->removed[1] == l->stored[0].hashes[0]);
    assert_int_equal(kvc_num_cached_blocks(c), 0);
    kvc_release(c, &b);

    /* Cache something again, then clear. */
    assert_int_equal(kvc_lookup(c, &b, t, 8, &h), 0);
    assert_int_equal(kvc_allocate(c, &b, 8, &h), 0);
    kvc_cache_blocks(c, &b, t, 8);
    assert_int_equal(l->n_stored, 3);
    assert_int_equal(l->stored[2].n_blocks, 4);
    assert_false(l->stored[2].has_lora);
    assert_false(l->stored[2].has_parent);
    assert_memory_equal(l->stored[2].tokens, t, 8 * sizeof(int32_t));
    kvc_release(c, &b);
    assert_int_equal(kvc_reset_prefix_cache(c), 0);
    assert_int_equal(l->n_cleared, 1);
    assert_int_equal(kvc_num_cached_blocks(c), 0);
    assert_int_equal(kvc_lookup(c, &b, t, 8, &h), 0);
    assert_int_equal(kvc_check(c), 0);
    kvc_seq_deinit(c, &a);
    kvc_seq_deinit(c, &b);
    kvc_free(c);
    free(l);
}

static void test_hash_chain(void **state)
{
    (void)state;
    kvc *c1 = kvc_new(8, 4, true, 7, NULL);
    kvc *c2 = kvc_new(8, 4, true, 7, NULL);
    kvc *c3 = kvc_new(8, 4, true, 8, NULL);
    int32_t t[12];
    seq_tokens(t, 12, 0);
    kvc_hash h1 = kvc_hash_block(c1, NULL, t, 4, NULL, NULL);
    assert_true(h1 == kvc_hash_block(c2, NULL, t, 4, NULL, NULL)); /* deterministic */
    assert_true(h1 != kvc_hash_block(c3, NULL, t, 4, NULL, NULL)); /* seeded */
    kvc_hash salt = kvc_hash_string("tenant-a");
    kvc_hash salt2 = kvc_hash_string("tenant-b");
    assert_true(salt != salt2);
    assert_true(h1 != kvc_hash_block(c1, NULL, t, 4, NULL, &salt));
    assert_true(h1 != kvc_hash_block(c1, NULL, t, 4, &salt, NULL));
    assert_true(kvc_hash_block(c1, NULL, t, 4, &salt, NULL) !=
                kvc_hash_block(c1, NULL, t, 4, NULL, &salt)); /* lora and salt differ */
    kvc_hash p = 5;
    assert_true(h1 != kvc_hash_block(c1, &p, t, 4, NULL, NULL));
    t[3]++;
    assert_true(h1 != kvc_hash_block(c1, NULL, t, 4, NULL, NULL));
    t[3]--;

    /* Sequence hashes chain: h_i = H(h_{i-1}, block i); the salt only enters block 0. */
    kvc_seq s, s2, s3;
    int32_t hb[3];
    kvc_hits h = {hb, 3, 0, 0};
    assert_int_equal(kvc_seq_init(&s, c1, 12, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&s2, c1, 12, "tenant-a", NULL), 0);
    assert_int_equal(kvc_seq_init(&s3, c1, 12, "tenant-a", NULL), 0);
    assert_int_equal(kvc_lookup(c1, &s, t, 12, &h), 0);
    assert_int_equal(s.n_hashes, 3);
    assert_true(s.hashes[0] == h1);
    assert_true(s.hashes[1] == kvc_hash_block(c1, &s.hashes[0], t + 4, 4, NULL, NULL));
    assert_true(s.hashes[2] == kvc_hash_block(c1, &s.hashes[1], t + 8, 4, NULL, NULL));
    assert_int_equal(kvc_lookup(c1, &s2, t, 12, &h), 0);
    assert_true(s2.hashes[0] == kvc_hash_block(c1, NULL, t, 4, NULL, &salt));
    assert_true(s2.hashes[1] == kvc_hash_block(c1, &s2.hashes[0], t + 4, 4, NULL, NULL));
    for (int i = 0; i < 3; i++) {
        assert_true(s.hashes[i] != s2.hashes[i]);
    }
    /* A salted request does not hit an unsalted one's blocks, but hits the same salt. */
    assert_int_equal(kvc_allocate(c1, &s, 12, &h), 0);
    kvc_cache_blocks(c1, &s, t, 12);
    assert_int_equal(kvc_lookup(c1, &s2, t, 12, &h), 0);
    assert_int_equal(kvc_allocate(c1, &s2, 12, &h), 0);
    kvc_cache_blocks(c1, &s2, t, 12);
    assert_int_equal(kvc_lookup(c1, &s3, t, 12, &h), 8);
    kvc_seq_deinit(c1, &s);
    kvc_seq_deinit(c1, &s2);
    kvc_seq_deinit(c1, &s3);
    kvc_free(c1);
    kvc_free(c2);
    kvc_free(c3);
}

/* Block hashes are a wire contract: KV events carry them to every consumer's prefix index, so
 * they must not change between builds. The expected values were computed independently with
 * Python's hashlib from the encoding kvcache.h documents (seed, extra keys, flags byte, big-endian
 * parents, little-endian tokens), not by printing what this code returns:
 *   T = lambda b: int.from_bytes(hashlib.sha256(b).digest()[-8:], "big")
 *   seed = T(b"tandem-kvc-seed:" + (42).to_bytes(8, "big"))
 *   h0 = T(seed.to_bytes(8, "big") + b"\0" + b"".join(t.to_bytes(4, "little") for t in ...)) */
static void test_hash_pinned(void **state)
{
    (void)state;
    ev_log *l = calloc(1, sizeof(*l));
    kvc *c = new_logged(16, 4, l); /* hash_seed 42 */
    int32_t t[12];
    seq_tokens(t, 12, 1000);
    const kvc_hash chain[3] = {0xa1b2141b48f0f300ULL, 0x7050a6c47c9400c1ULL, 0x07c70b2b1e55338fULL};
    const kvc_hash salt = 0x81539b4685e6da6bULL; /* extra("tenant-a") */
    const kvc_hash lora = 0x6bf49038829e5829ULL; /* extra("lora-x") */
    const kvc_hash salted[2] = {0x0fdf8429ff65fd33ULL, 0xd1b4b1e9797be364ULL};
    const kvc_hash both[2] = {0xeae28d3898d15e98ULL, 0xcf5b489661b4194aULL}; /* lora + salt */

    assert_true(kvc_hash_block(c, NULL, t, 4, NULL, NULL) == chain[0]);
    assert_true(kvc_hash_block(c, &chain[0], t + 4, 4, NULL, NULL) == chain[1]);
    assert_true(kvc_hash_string("tenant-a") == salt);
    assert_true(kvc_hash_string("lora-x") == lora);
    int32_t wide[4] = {0x7fffffff, 65536, 255, 0}; /* token bytes are little-endian */
    assert_true(kvc_hash_block(c, NULL, wide, 4, NULL, NULL) == 0x920ab30cdd3d9b46ULL);
    kvc *c0 = kvc_new(4, 4, true, 0, NULL);
    assert_non_null(c0);
    int32_t first[4] = {0, 1, 2, 3};
    assert_true(kvc_hash_block(c0, NULL, first, 4, NULL, NULL) == 0x9b35ab6b441fba78ULL);
    kvc_free(c0);

    /* What leaves the process: the stored event of a plain sequence... */
    kvc_seq a, b, d;
    int32_t hb[3];
    kvc_hits h = {hb, 3, 0, 0};
    assert_int_equal(kvc_seq_init(&a, c, 12, NULL, NULL), 0);
    assert_int_equal(kvc_allocate(c, &a, 12, NULL), 0);
    kvc_cache_blocks(c, &a, t, 12);
    assert_int_equal(l->n_stored, 1);
    assert_int_equal(l->stored[0].n_blocks, 3);
    assert_false(l->stored[0].has_parent);
    for (int i = 0; i < 3; i++) {
        assert_true(l->stored[0].hashes[i] == chain[i]);
    }
    /* ... a salted one (the salt enters block 0 only) ... */
    assert_int_equal(kvc_seq_init(&b, c, 8, "tenant-a", NULL), 0);
    assert_int_equal(kvc_lookup(c, &b, t, 8, &h), 0);
    assert_true(b.hashes[0] == salted[0] && b.hashes[1] == salted[1]);
    /* ... and one with a LoRA (in every block) and a salt, whose event names the LoRA. */
    assert_int_equal(kvc_seq_init(&d, c, 8, "tenant-a", "lora-x"), 0);
    assert_int_equal(kvc_allocate(c, &d, 8, NULL), 0);
    kvc_cache_blocks(c, &d, t, 8);
    assert_int_equal(l->n_stored, 2);
    assert_true(l->stored[1].hashes[0] == both[0] && l->stored[1].hashes[1] == both[1]);
    assert_string_equal(l->stored[1].lora, "lora-x");
    kvc_seq_deinit(c, &a);
    kvc_seq_deinit(c, &b);
    kvc_seq_deinit(c, &d);
    kvc_free(c);
    free(l);
}

static void test_max_cache_hit_length(void **state)
{
    (void)state;
    kvc *c = kvc_new(32, 4, true, 3, NULL);
    int32_t t[16];
    seq_tokens(t, 16, 50);
    kvc_seq a, b;
    int32_t hb[4];
    kvc_hits h = {hb, 4, 0, 0};
    assert_int_equal(kvc_seq_init(&a, c, 16, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&b, c, 16, NULL, NULL), 0);
    assert_int_equal(kvc_lookup(c, &a, t, 16, &h), 0);
    assert_int_equal(kvc_allocate(c, &a, 16, &h), 0);
    kvc_cache_blocks(c, &a, t, 16); /* 4 full blocks cached */
    assert_int_equal(kvc_num_cached_blocks(c), 4);
    /* Fully cached 16-token prompt: at most 15 tokens may hit -> 3 whole blocks (12). */
    assert_int_equal(kvc_lookup(c, &b, t, 16, &h), 12);
    assert_int_equal(kvc_lookup(c, &b, t, 9, &h), 8); /* (9-1)/4 = 2 blocks */
    assert_int_equal(kvc_lookup(c, &b, t, 8, &h), 4); /* exactly 2 blocks: only 1 may hit */
    assert_int_equal(kvc_lookup(c, &b, t, 4, &h), 0); /* one block: recompute it */
    assert_int_equal(kvc_lookup(c, &b, t, 1, &h), 0);
    assert_int_equal(kvc_lookup(c, &b, t, 0, &h), -EINVAL);
    /* First miss stops the walk even when later blocks would match. */
    int32_t u[16];
    memcpy(u, t, sizeof(u));
    u[5] = 9999;
    kvc_seq e;
    assert_int_equal(kvc_seq_init(&e, c, 16, NULL, NULL), 0);
    assert_int_equal(kvc_lookup(c, &e, u, 16, &h), 4);
    /* Only a committed lookup counts, once. */
    uint64_t q0 = kvc_prefix_queries(c), h0 = kvc_prefix_hits(c);
    assert_int_equal(kvc_allocate(c, &e, 16, &h), 0);
    assert_int_equal(kvc_prefix_queries(c), q0 + 16);
    assert_int_equal(kvc_prefix_hits(c), h0 + 4);
    assert_int_equal(kvc_lookup(c, &e, u, 16, &h), -EINVAL); /* holds blocks */
    kvc_seq_deinit(c, &a);
    kvc_seq_deinit(c, &b);
    kvc_seq_deinit(c, &e);
    kvc_free(c);
}

/* Hits travel from kvc_lookup to kvc_allocate in the caller's kvc_hits: the lookup changes
 * neither the sequence nor the pool, and only the allocation that takes them counts them. */
static void test_hits_are_explicit(void **state)
{
    (void)state;
    kvc *c = kvc_new(7, 4, true, 5, NULL); /* 6 usable blocks */
    int32_t t[16];
    seq_tokens(t, 16, 300);
    kvc_seq a, b, d;
    assert_int_equal(kvc_seq_init(&a, c, 16, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&b, c, 16, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&d, c, 16, NULL, NULL), 0);
    int32_t hb[4];
    kvc_hits h = {hb, 4, 0, 0};
    assert_int_equal(kvc_allocate(c, &a, 12, NULL), 0);
    kvc_cache_blocks(c, &a, t, 12); /* 3 cached blocks, held by a */
    kvc_release(c, &a);             /* ... now free but cached */

    /* The lookup finds them and takes nothing. */
    assert_int_equal(kvc_lookup(c, &b, t, 16, &h), 12);
    assert_int_equal(h.n_blocks, 3);
    assert_int_equal(h.query_tokens, 16);
    assert_int_equal(b.n_blocks, 0);
    assert_int_equal(kvc_num_free_blocks(c), 6);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kvc_ref_cnt(c, hb[i]), 0);
    }
    assert_int_equal(kvc_prefix_queries(c), 0);
    /* A lookup's cap limits its hits. */
    kvc_hits h1 = {hb, 1, 0, 0};
    assert_int_equal(kvc_lookup(c, &b, t, 16, &h1), 4);

    /* Not enough room: nothing changes, nothing is counted. d holds 3 of the 6 blocks, b needs
     * 3 hits (free, so they do not count as room) + 1 fresh. */
    assert_int_equal(kvc_allocate(c, &d, 12, NULL), 0);
    assert_int_equal(kvc_lookup(c, &b, t, 16, &h), 12);
    assert_int_equal(kvc_allocate(c, &b, 16, &h), -ENOSPC);
    assert_int_equal(b.n_blocks, 0);
    assert_int_equal(kvc_prefix_queries(c), 0);
    assert_int_equal(kvc_prefix_hits(c), 0);
    kvc_release(c, &d);

    /* Hits below the total, or for a sequence holding blocks, are refused. */
    assert_int_equal(kvc_lookup(c, &b, t, 16, &h), 12);
    assert_int_equal(kvc_allocate(c, &b, 8, &h), -EINVAL);
    /* Taking them: references, then the lookup counted once. */
    assert_int_equal(kvc_allocate(c, &b, 16, &h), 0);
    assert_int_equal(b.n_blocks, 4);
    assert_int_equal(b.n_cached, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(b.blocks[i], hb[i]);
        assert_int_equal(kvc_ref_cnt(c, hb[i]), 1);
    }
    assert_int_equal(kvc_prefix_queries(c), 16);
    assert_int_equal(kvc_prefix_hits(c), 12);
    assert_int_equal(kvc_allocate(c, &b, 16, &h), -EINVAL);
    /* Allocating without the hits ignores the cache (and counts nothing). */
    assert_int_equal(kvc_lookup(c, &d, t, 16, &h), 12);
    assert_int_equal(kvc_allocate(c, &d, 8, NULL), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_not_equal(d.blocks[i], b.blocks[i]);
    }
    assert_int_equal(kvc_prefix_queries(c), 16);
    assert_int_equal(kvc_check(c), 0);
    kvc_seq_deinit(c, &a);
    kvc_seq_deinit(c, &b);
    kvc_seq_deinit(c, &d);
    kvc_free(c);
}

static void test_no_prefix_caching(void **state)
{
    (void)state;
    int stored = 0;
    kvc_event_sink sink = {&stored, NULL, NULL, NULL, NULL};
    kvc *c = kvc_new(8, 2, false, 0, &sink);
    int32_t t[6] = {1, 2, 3, 4, 5, 6};
    kvc_seq a, b;
    int32_t hb[3];
    kvc_hits h = {hb, 3, 0, 0};
    assert_int_equal(kvc_seq_init(&a, c, 6, NULL, NULL), 0);
    assert_int_equal(kvc_seq_init(&b, c, 6, NULL, NULL), 0);
    assert_int_equal(kvc_lookup(c, &a, t, 6, &h), 0);
    assert_int_equal(kvc_allocate(c, &a, 6, NULL), 0);
    kvc_cache_blocks(c, &a, t, 6);
    assert_int_equal(kvc_num_cached_blocks(c), 0);
    assert_int_equal(kvc_lookup(c, &b, t, 6, &h), 0);
    assert_int_equal(kvc_prefix_queries(c), 0);
    assert_int_equal(kvc_reset_prefix_cache(c), -EBUSY);
    kvc_seq_deinit(c, &a);
    kvc_seq_deinit(c, &b);
    assert_int_equal(kvc_reset_prefix_cache(c), 0);
    kvc_free(c);
}

/* ---- randomized operations against a model ---------------------------------------------- */

#define R_BLOCKS 24
#define R_BS     3
#define R_SEQS   6
#define R_MAXTOK 30

typedef struct model_state {
    int32_t content[R_BLOCKS][R_BS]; /* tokens of each cached block, from stored events */
    bool cached[R_BLOCKS];
    kvc_hash hash[R_BLOCKS];
    int n_cached;
} model_state;

static void m_stored(void *user, const kvc_stored_event *ev)
{
    model_state *m = user;
    for (int32_t i = 0; i < ev->n_blocks; i++) {
        int32_t id = ev->block_ids[i];
        assert_true(id > 0 && id < R_BLOCKS);
        assert_false(m->cached[id]);
        for (int32_t j = 0; j < R_BS; j++) {
            m->content[id][j] = ev->token_ids[i * R_BS + j];
        }
        m->cached[id] = true;
        m->hash[id] = ev->block_hashes[i];
        m->n_cached++;
    }
}

static void m_removed(void *user, const kvc_hash *hashes, int32_t n)
{
    model_state *m = user;
    for (int32_t i = 0; i < n; i++) {
        int found = 0;
        for (int b = 1; b < R_BLOCKS; b++) {
            if (m->cached[b] && m->hash[b] == hashes[i]) {
                m->cached[b] = false;
                m->n_cached--;
                found++;
            }
        }
        assert_int_equal(found, 1);
    }
}

static void m_cleared(void *user)
{
    model_state *m = user;
    memset(m->cached, 0, sizeof(m->cached));
    m->n_cached = 0;
}

typedef struct r_seq {
    kvc_seq kv;
    int32_t tokens[R_MAXTOK];
    int32_t n_tokens;
    int32_t n_computed;
    bool live;
} r_seq;

static void test_randomized_against_model(void **state)
{
    (void)state;
    model_state *m = calloc(1, sizeof(*m));
    kvc_event_sink sink = {m, m_stored, m_removed, m_cleared, NULL};
    kvc *c = kvc_new(R_BLOCKS, R_BS, true, 99, &sink);
    r_seq seqs[R_SEQS];
    memset(seqs, 0, sizeof(seqs));
    uint32_t rng = 12345;
    long hits_seen = 0;
    int32_t hb[R_MAXTOK / R_BS];
    kvc_hits h = {hb, R_MAXTOK / R_BS, 0, 0};
    for (int step = 0; step < 20000; step++) {
        rng = rng * 1103515245u + 12345u;
        uint32_t r = rng >> 8;
        r_seq *s = &seqs[r % R_SEQS];
        int op = (int)((r >> 4) % 5);
        if (!s->live) {
            /* start: a prompt from a small alphabet so prefixes are shared often */
            assert_int_equal(kvc_seq_init(&s->kv, c, R_MAXTOK, (r & 64) ? "salt" : NULL, NULL), 0);
            s->n_tokens = 1 + (int32_t)((r >> 8) % 20);
            for (int32_t i = 0; i < s->n_tokens; i++) {
                s->tokens[i] = (int32_t)(((r >> 12) + (uint32_t)(i * (i < 6 ? 0 : 7))) % 3);
            }
            s->n_computed = 0;
            s->live = true;
            int32_t hit = kvc_lookup(c, &s->kv, s->tokens, s->n_tokens, &h);
            assert_true(hit >= 0 && hit % R_BS == 0 && hit <= s->n_tokens - 1);
            if (kvc_allocate(c, &s->kv, s->n_tokens, &h) == 0) {
                /* Every hit block holds exactly this prefix's tokens. */
                for (int32_t b = 0; b < hit / R_BS; b++) {
                    int32_t id = s->kv.blocks[b];
                    assert_true(m->cached[id]);
                    assert_memory_equal(m->content[id], s->tokens + b * R_BS,
                                        sizeof(int32_t) * R_BS);
                }
                hits_seen += hit > 0;
                s->n_computed = hit;
            } else {
                assert_int_equal(s->kv.n_blocks, 0);
            }
        } else if (op == 0) {
            kvc_seq_deinit(c, &s->kv);
            s->live = false;
        } else if (op == 1 && s->kv.n_blocks > 0) {
            kvc_release(c, &s->kv); /* preemption */
            s->n_computed = 0;
        } else if (op == 2 && s->kv.n_blocks == 0) {
            int32_t hit = kvc_lookup(c, &s->kv, s->tokens, s->n_tokens, &h);
            if (kvc_allocate(c, &s->kv, s->n_tokens, &h) == 0) {
                s->n_computed = hit;
            }
        } else if (s->kv.n_blocks > 0) {
            /* compute everything allocated, cache, then append a token and grow */
            s->n_computed = s->n_tokens;
            kvc_cache_blocks(c, &s->kv, s->tokens, s->n_computed);
            if (s->n_tokens < R_MAXTOK) {
                s->tokens[s->n_tokens++] = (int32_t)(r % 3);
                if (kvc_allocate(c, &s->kv, s->n_tokens, NULL) != 0) {
                    s->n_tokens--;
                }
            }
        }
        if (step % 97 == 0) {
            int busy = 0;
            for (int i = 0; i < R_SEQS; i++) {
                busy += seqs[i].live && seqs[i].kv.n_blocks > 0;
            }
            if (!busy) {
                assert_int_equal(kvc_reset_prefix_cache(c), 0);
            } else {
                assert_int_equal(kvc_reset_prefix_cache(c), -EBUSY);
            }
        }
        /* Model checks: ref counts equal holders, free count matches, cache mirrors events. */
        int32_t refs[R_BLOCKS] = {0};
        for (int i = 0; i < R_SEQS; i++) {
            for (int32_t b = 0; seqs[i].live && b < seqs[i].kv.n_blocks; b++) {
                refs[seqs[i].kv.blocks[b]]++;
            }
        }
        int32_t free_blocks = 0;
        for (int b = 1; b < R_BLOCKS; b++) {
            assert_int_equal(kvc_ref_cnt(c, b), refs[b]);
            free_blocks += refs[b] == 0;
        }
        assert_int_equal(refs[0], 0);
        assert_int_equal(kvc_num_free_blocks(c), free_blocks);
        assert_int_equal(kvc_num_cached_blocks(c), m->n_cached);
        assert_int_equal(kvc_check(c), 0);
    }
    assert_true(hits_seen > 10);
    for (int i = 0; i < R_SEQS; i++) {
        if (seqs[i].live) {
            kvc_seq_deinit(c, &seqs[i].kv);
        }
    }
    assert_int_equal(kvc_num_free_blocks(c), R_BLOCKS - 1);
    kvc_free(c);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_bad_args),
        cmocka_unit_test(test_lru_and_tail_first_eviction),
        cmocka_unit_test(test_release_before),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_lookup_window),
        cmocka_unit_test(test_shared_prefix_refcounts_and_touch),
        cmocka_unit_test(test_events_removed_and_cleared),
        cmocka_unit_test(test_hash_chain),
        cmocka_unit_test(test_hash_pinned),
        cmocka_unit_test(test_max_cache_hit_length),
        cmocka_unit_test(test_hits_are_explicit),
        cmocka_unit_test(test_no_prefix_caching),
        cmocka_unit_test(test_randomized_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
