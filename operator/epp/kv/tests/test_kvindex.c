/*
 * Unit tests for operator/epp/kv/kvindex: ingest and removal, the LRU bound on keys and the cap
 * on entries per key, purging through the reverse index, tier weights, LongestPrefix scoring
 * against hand-computed figures, the queries, and one writer with two scoring readers at once
 * (bounded by a count of rounds, checked for consistency; the ASan build checks memory).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "operator/epp/kv/kvindex.h"

#define A "10.0.0.1:8000"
#define B "10.0.0.2:8000"
#define C "10.0.0.3:8000"

static struct kvidx *new_index(uint64_t size, uint32_t pcs)
{
    char err[256] = "";
    struct kvidx *idx =
        kvidx_new(&(struct kvidx_config){.size = size, .pod_cache_size = pcs}, err, sizeof(err));
    if (!idx) {
        fail_msg("kvidx_new: %s", err);
    }
    return idx;
}

static size_t holders(struct kvidx *idx, uint64_t key, struct kvidx_holder *h)
{
    return kvidx_lookup(idx, key, h, 16);
}

static void test_add_remove(void **state)
{
    (void)state;
    struct kvidx *idx = new_index(1000, 0);
    const uint64_t k[3] = {10, 11, 12};
    assert_int_equal(kvidx_add(idx, A, "gpu", k, 3), 0);
    assert_int_equal(kvidx_add(idx, B, NULL, k, 2), 0);
    assert_int_equal(kvidx_add(idx, A, "cpu", k, 1), 0);
    struct kvidx_stats st;
    kvidx_stats(idx, &st);
    assert_int_equal(st.keys, 3);
    assert_int_equal(st.entries, 6);
    assert_int_equal(st.pods, 2);
    struct kvidx_holder h[16];
    assert_int_equal(holders(idx, 10, h), 3);
    assert_string_equal(h[0].pod, A);
    assert_string_equal(h[0].tier, "gpu");
    assert_string_equal(h[1].pod, B);
    assert_string_equal(h[2].tier, "cpu");
    /* re-adding an entry does not duplicate it */
    assert_int_equal(kvidx_add(idx, A, "gpu", k, 3), 0);
    kvidx_stats(idx, &st);
    assert_int_equal(st.entries, 6);

    assert_int_equal(kvidx_remove(idx, A, "gpu", k, 3), 0);
    assert_int_equal(holders(idx, 12, h), 0); /* only A/gpu held it: the key is gone */
    assert_int_equal(holders(idx, 10, h), 2);
    kvidx_stats(idx, &st);
    assert_int_equal(st.keys, 2);
    assert_int_equal(st.entries, 3);
    /* unknown pod, tier or key: nothing happens */
    assert_int_equal(kvidx_remove(idx, C, "gpu", k, 3), 0);
    assert_int_equal(kvidx_remove(idx, B, "disk", k, 3), 0);
    const uint64_t none = 99;
    assert_int_equal(kvidx_remove(idx, B, "gpu", &none, 1), 0);
    kvidx_stats(idx, &st);
    assert_int_equal(st.entries, 3);

    struct kvidx_pod_info pi;
    assert_int_equal(kvidx_pod(idx, A, &pi), 1);
    assert_int_equal(pi.entries, 1);
    assert_int_equal(pi.n_tiers, 1);
    assert_string_equal(pi.tier[0], "cpu");
    assert_int_equal(kvidx_pod(idx, C, &pi), 0);
    struct kvidx_pod_info all[4];
    assert_int_equal(kvidx_pods(idx, all, 4), 2);
    assert_int_equal(kvidx_pods(idx, all, 1), 2);

    /* bad names */
    char longname[200];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(kvidx_add(idx, "", "gpu", k, 1), -EINVAL);
    assert_int_equal(kvidx_add(idx, longname, "gpu", k, 1), -EINVAL);
    assert_int_equal(kvidx_add(idx, A, longname, k, 1), -EINVAL);
    assert_int_equal(kvidx_add(idx, A, "gpu", NULL, 1), -EINVAL);
    kvidx_free(idx);
}

static void test_lru_bound(void **state)
{
    (void)state;
    struct kvidx *idx = new_index(4, 0);
    const uint64_t k[6] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(kvidx_add(idx, A, "gpu", k, 4), 0);
    /* touch key 1: key 2 is now the least recently stored */
    assert_int_equal(kvidx_add(idx, B, "gpu", k, 1), 0);
    assert_int_equal(kvidx_add(idx, A, "gpu", &k[4], 1), 0);
    struct kvidx_holder h[16];
    assert_int_equal(holders(idx, 2, h), 0);
    assert_int_equal(holders(idx, 1, h), 2);
    assert_int_equal(kvidx_add(idx, A, "gpu", &k[5], 1), 0);
    assert_int_equal(holders(idx, 3, h), 0);
    struct kvidx_stats st;
    kvidx_stats(idx, &st);
    assert_int_equal(st.keys, 4);
    assert_int_equal(st.evicted_keys, 2);
    assert_int_equal(st.entries, 5); /* 1:A,B 4:A 5:A 6:A */
    struct kvidx_pod_info pi;
    kvidx_pod(idx, A, &pi);
    assert_int_equal(pi.entries, 4); /* the reverse index followed the evictions */
    /* a lookup does not refresh: key 4 stays the oldest */
    assert_int_equal(holders(idx, 4, h), 1);
    const uint64_t k7 = 7;
    assert_int_equal(kvidx_add(idx, A, "gpu", &k7, 1), 0);
    assert_int_equal(holders(idx, 4, h), 0);
    kvidx_free(idx);
}

static void test_pod_cap(void **state)
{
    (void)state;
    struct kvidx *idx = new_index(100, 3);
    const uint64_t k = 42;
    const char *pods[5] = {"p0:1", "p1:1", "p2:1", "p3:1", "p4:1"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(kvidx_add(idx, pods[i], "gpu", &k, 1), 0);
    }
    struct kvidx_holder h[16];
    assert_int_equal(holders(idx, 42, h), 3);
    assert_string_equal(h[0].pod, "p1:1"); /* p0, the oldest, went */
    /* refreshing p1 makes p2 the oldest */
    assert_int_equal(kvidx_add(idx, pods[1], "gpu", &k, 1), 0);
    assert_int_equal(kvidx_add(idx, pods[4], "gpu", &k, 1), 0);
    assert_int_equal(holders(idx, 42, h), 3);
    assert_string_equal(h[0].pod, "p3:1");
    assert_string_equal(h[1].pod, "p1:1");
    assert_string_equal(h[2].pod, "p4:1");
    struct kvidx_stats st;
    kvidx_stats(idx, &st);
    assert_int_equal(st.evicted_entries, 2);
    assert_int_equal(st.entries, 3);
    struct kvidx_pod_info pi;
    assert_int_equal(kvidx_pod(idx, "p0:1", &pi), 1);
    assert_int_equal(pi.entries, 0);
    kvidx_free(idx);
}

static void test_purge(void **state)
{
    (void)state;
    struct kvidx *idx = new_index(100000, 0);
    uint64_t keys[5000];
    for (int i = 0; i < 5000; i++) {
        keys[i] = (uint64_t)i * 7919 + 1;
    }
    assert_int_equal(kvidx_add(idx, A, "gpu", keys, 5000), 0);
    assert_int_equal(kvidx_add(idx, A, "cpu", keys, 100), 0);
    assert_int_equal(kvidx_add(idx, B, "gpu", keys + 2500, 2500), 0);
    /* removing in the middle exercises the swaps of the reverse index */
    assert_int_equal(kvidx_remove(idx, A, "gpu", keys + 1000, 500), 0);
    assert_int_equal(kvidx_purge_pod(idx, A), 0);
    struct kvidx_stats st;
    kvidx_stats(idx, &st);
    assert_int_equal(st.pods, 1);
    assert_int_equal(st.keys, 2500);
    assert_int_equal(st.entries, 2500);
    struct kvidx_holder h[16];
    assert_int_equal(holders(idx, keys[0], h), 0);
    assert_int_equal(holders(idx, keys[4999], h), 1);
    assert_string_equal(h[0].pod, B);
    assert_int_equal(kvidx_purge_pod(idx, A), 0); /* unknown now: fine */
    assert_int_equal(kvidx_purge_pod(idx, B), 0);
    kvidx_stats(idx, &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.pods, 0);
    /* the id is reused and starts empty */
    assert_int_equal(kvidx_add(idx, C, "gpu", keys, 3), 0);
    struct kvidx_pod_info pi;
    kvidx_pod(idx, C, &pi);
    assert_int_equal(pi.entries, 3);
    kvidx_free(idx);
}

static void test_score(void **state)
{
    (void)state;
    struct kvidx *idx = new_index(1000, 0);
    const uint64_t r[5] = {100, 101, 102, 103, 104};
    /* A: gpu 100..103; B: cpu 100..101 and gpu 101 (max weight counts: 0.8 + 1.0);
     * C: 101..104 but not 100 (absent at block 0: 0) */
    assert_int_equal(kvidx_add(idx, A, "gpu", r, 4), 0);
    assert_int_equal(kvidx_add(idx, B, "cpu", r, 2), 0);
    assert_int_equal(kvidx_add(idx, B, "gpu", &r[1], 1), 0);
    assert_int_equal(kvidx_add(idx, C, "gpu", &r[1], 4), 0);
    const char *pods[5] = {A, B, C, "10.9.9.9:1", A};
    struct epp_prefix_match out[5];
    assert_int_equal(kvidx_score(idx, r, 5, pods, 5, out), 4);
    assert_int_equal(out[0].precise_blocks, 4);
    assert_true(out[0].precise_score == 4.0);
    assert_int_equal(out[1].precise_blocks, 2);
    assert_true(out[1].precise_score > 1.79 && out[1].precise_score < 1.81);
    assert_int_equal(out[2].precise_blocks, 0);
    assert_true(out[2].precise_score == 0.0);
    assert_int_equal(out[3].precise_blocks, 0);
    assert_int_equal(out[4].precise_blocks, 4); /* the same pod twice */
    /* a hole in A's chain stops it there */
    assert_int_equal(kvidx_remove(idx, A, "gpu", &r[2], 1), 0);
    assert_int_equal(kvidx_score(idx, r, 5, pods, 3, out), 2);
    assert_int_equal(out[0].precise_blocks, 2);
    /* a request starting at 104: C alone holds it */
    assert_int_equal(kvidx_score(idx, &r[4], 1, pods, 3, out), 1);
    assert_int_equal(out[0].precise_blocks, 0);
    assert_int_equal(out[2].precise_blocks, 1);
    /* nothing at block 0 */
    const uint64_t unknown[2] = {555, 100};
    assert_int_equal(kvidx_score(idx, unknown, 2, pods, 3, out), 0);
    assert_int_equal(kvidx_score(idx, r, 0, pods, 3, out), 0);
    kvidx_free(idx);

    /* configured weights; a tier not configured weighs 1.0 */
    const struct kvidx_tier_weight w[2] = {{"gpu", 2.0}, {"cpu", 0.5}};
    idx = kvidx_new(&(struct kvidx_config){.size = 100, .tiers = w, .n_tiers = 2}, NULL, 0);
    assert_non_null(idx);
    assert_int_equal(kvidx_add(idx, A, "cpu", r, 3), 0);
    assert_int_equal(kvidx_add(idx, A, "gpu", r, 1), 0);
    assert_int_equal(kvidx_add(idx, B, "disk", r, 2), 0);
    assert_int_equal(kvidx_score(idx, r, 3, pods, 2, out), 3);
    assert_true(out[0].precise_score == 3.0); /* 2.0 + 0.5 + 0.5 */
    assert_true(out[1].precise_score == 2.0);
    kvidx_free(idx);
}

static void test_config(void **state)
{
    (void)state;
    char err[256] = "";
    const struct kvidx_tier_weight neg[1] = {{"gpu", -1.0}};
    assert_null(kvidx_new(&(struct kvidx_config){.tiers = neg, .n_tiers = 1}, err, sizeof(err)));
    assert_non_null(strstr(err, "tiers[0]"));
    const struct kvidx_tier_weight dup[2] = {{"gpu", 1.0}, {"gpu", 1.0}};
    assert_null(kvidx_new(&(struct kvidx_config){.tiers = dup, .n_tiers = 2}, err, sizeof(err)));
    assert_non_null(strstr(err, "tiers[1]"));
    assert_null(kvidx_new(&(struct kvidx_config){.pod_cache_size = 1000}, err, sizeof(err)));
    assert_non_null(strstr(err, "pod_cache_size"));
    struct kvidx *idx = kvidx_new(NULL, err, sizeof(err)); /* llm-d's defaults */
    assert_non_null(idx);
    /* more tiers than fit */
    const uint64_t k = 1;
    char tier[16];
    int rc = 0;
    for (int i = 0; i < 10 && rc == 0; i++) {
        snprintf(tier, sizeof(tier), "t%d", i);
        rc = kvidx_add(idx, A, tier, &k, 1);
    }
    assert_int_equal(rc, -EINVAL);
    kvidx_free(idx);
}

/* ---- one writer, two readers ---- */

#define ROUNDS 3000
#define CHAIN  32

struct shared {
    struct kvidx *idx;
    uint64_t keys[CHAIN];
    int bad; /* readers' inconsistencies */
};

static void *reader(void *arg)
{
    struct shared *sh = arg;
    const char *pods[3] = {A, B, C};
    struct epp_prefix_match out[3];
    for (int i = 0; i < ROUNDS; i++) {
        kvidx_score(sh->idx, sh->keys, CHAIN, pods, 3, out);
        for (int p = 0; p < 3; p++) {
            /* weights are 1.0 (gpu only): the score is the block count */
            if (out[p].precise_blocks < 0 || out[p].precise_blocks > CHAIN ||
                out[p].precise_score != (double)out[p].precise_blocks) {
                __atomic_add_fetch(&sh->bad, 1, __ATOMIC_RELAXED);
            }
        }
        struct kvidx_holder h[16];
        kvidx_lookup(sh->idx, sh->keys[i % CHAIN], h, 16);
        struct kvidx_pod_info pi[4];
        kvidx_pods(sh->idx, pi, 4);
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    (void)state;
    struct shared sh = {.idx = new_index(5000, 0)};
    for (int i = 0; i < CHAIN; i++) {
        sh.keys[i] = (uint64_t)i * 0x9E3779B97F4A7C15ULL;
    }
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_create(&t[i], NULL, reader, &sh), 0);
    }
    const char *pods[3] = {A, B, C};
    uint64_t noise[64];
    for (int i = 0; i < ROUNDS; i++) {
        const char *p = pods[i % 3];
        kvidx_add(sh.idx, p, "gpu", sh.keys, (size_t)(i % CHAIN) + 1);
        for (int j = 0; j < 64; j++) {
            noise[j] = (uint64_t)i * 64 + (uint64_t)j + 1000000;
        }
        kvidx_add(sh.idx, p, "gpu", noise, 64); /* drives LRU eviction */
        if (i % 7 == 0) {
            kvidx_remove(sh.idx, p, "gpu", &sh.keys[i % CHAIN], 1);
        }
        if (i % 97 == 0) {
            kvidx_purge_pod(sh.idx, pods[(i + 1) % 3]);
        }
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
    }
    assert_int_equal(sh.bad, 0);
    struct kvidx_stats st;
    kvidx_stats(sh.idx, &st);
    assert_true(st.keys <= 5000);
    assert_true(st.evicted_keys > 0);
    /* the reverse index agrees with the forward one */
    struct kvidx_pod_info pi[4];
    size_t n = kvidx_pods(sh.idx, pi, 4);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += pi[i].entries;
    }
    assert_int_equal(sum, st.entries);
    for (int p = 0; p < 3; p++) {
        kvidx_purge_pod(sh.idx, pods[p]);
    }
    kvidx_stats(sh.idx, &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.entries, 0);
    kvidx_free(sh.idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_remove), cmocka_unit_test(test_lru_bound),
        cmocka_unit_test(test_pod_cap),    cmocka_unit_test(test_purge),
        cmocka_unit_test(test_score),      cmocka_unit_test(test_config),
        cmocka_unit_test(test_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
