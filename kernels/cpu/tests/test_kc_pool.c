/* Unit tests for the kc_pool thread pool: every ith runs once per run, barriers order phases,
 * many back-to-back runs, sleeping workers wake up. */
#include <setjmp.h>
#include <stdarg.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/cpu/kc_cpu.h"
#include "kernels/cpu/kc_pool.h"

typedef struct run_state {
    kc_pool *pool;
    _Atomic int hits[8];
    int phase1[8];
    int ok;
    _Atomic int bad;
} run_state;

static void count_fn(void *arg, int ith, int nth)
{
    run_state *s = arg;
    if (ith < 0 || ith >= nth || nth > 8) {
        atomic_fetch_add(&s->bad, 1);
        return;
    }
    atomic_fetch_add(&s->hits[ith], 1);
}

static void barrier_fn(void *arg, int ith, int nth)
{
    run_state *s = arg;
    for (int round = 0; round < 50; round++) {
        s->phase1[ith] = round;
        kc_pool_barrier(s->pool);
        for (int j = 0; j < nth; j++) {
            if (s->phase1[j] != round) {
                atomic_fetch_add(&s->bad, 1);
            }
        }
        kc_pool_barrier(s->pool);
    }
}

static void test_pool_runs(void **state)
{
    (void)state;
    for (int n = 1; n <= 3; n++) {
        run_state s;
        memset(&s, 0, sizeof(s));
        s.pool = kc_pool_new(n, n == 2);
        assert_non_null(s.pool);
        assert_int_equal(kc_pool_size(s.pool), n);
        for (int r = 0; r < 500; r++) {
            kc_pool_run(s.pool, count_fn, &s);
        }
        for (int i = 0; i < n; i++) {
            assert_int_equal(atomic_load(&s.hits[i]), 500);
        }
        kc_pool_run(s.pool, barrier_fn, &s);
        assert_int_equal(atomic_load(&s.bad), 0);
        kc_pool_free(s.pool);
    }
}

static void test_pool_wakes_sleepers(void **state)
{
    (void)state;
    run_state s;
    memset(&s, 0, sizeof(s));
    s.pool = kc_pool_new(2, false);
    assert_non_null(s.pool);
    kc_pool_run(s.pool, count_fn, &s);
    usleep(100 * 1000); /* long enough for the worker to stop spinning and sleep */
    kc_pool_run(s.pool, count_fn, &s);
    assert_int_equal(atomic_load(&s.hits[0]), 2);
    assert_int_equal(atomic_load(&s.hits[1]), 2);
    kc_pool_free(s.pool);
    kc_pool_free(NULL);
    kc_pool *dflt = kc_pool_new(0, false);
    assert_non_null(dflt);
    assert_true(kc_pool_size(dflt) >= 1);
    kc_pool_free(dflt);
}

static void test_cpu_features(void **state)
{
    (void)state;
    const kc_cpu_features *f = kc_cpu_features_get();
    kc_isa best = kc_isa_best();
    if (best >= KC_ISA_AVX2) {
        assert_true(f->avx2 && f->fma && f->f16c);
    }
    if (best == KC_ISA_AVX512) {
        assert_true(f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni);
    }
    assert_true(kc_isa_active() <= best);
    assert_string_equal(kc_isa_name(KC_ISA_AVX2), "avx2");
    assert_int_equal(kc_isa_set(KC_ISA_SCALAR), 0);
    assert_int_equal(kc_isa_active(), KC_ISA_SCALAR);
    assert_int_equal(kc_isa_set(best), 0);
}

/* TANDEM_CPU_TUNE's syntax: known keys, decimal values within [0, KC_TUNE_PF_MAX], "N" for
 * both thread counts or "N/M", all or nothing. */
static void test_tune_parse(void **state)
{
    (void)state;
    const kc_tune *cur = kc_tune_get();
    assert_true(cur->uarch[0] != '\0');
    kc_tune t = {.uarch = "x", .pf_quant = {1, 2}, .pf_half = {3, 4}, .pf_f32 = {5, 6}};
    assert_int_equal(kc_tune_parse("pf_quant=4096,pf_f32=0/8192", &t), 0);
    assert_int_equal(t.pf_quant[KC_TUNE_ONE], 4096);
    assert_int_equal(t.pf_quant[KC_TUNE_MANY], 4096);
    assert_int_equal(t.pf_half[KC_TUNE_ONE], 3);
    assert_int_equal(t.pf_half[KC_TUNE_MANY], 4);
    assert_int_equal(t.pf_f32[KC_TUNE_ONE], 0);
    assert_int_equal(t.pf_f32[KC_TUNE_MANY], 8192);
    assert_true(t.from_env);
    assert_string_equal(t.uarch, "x");
    assert_int_equal(kc_tune_parse("", &t), 0);
    const kc_tune before = t;
    static const char *const bad[] = {
        "pf_quant",   "pf_quant=",        "pf_quant=-1",   "pf_quant=1x",
        "pf_half=1/", "pf_half=/1",       "pf_half=1/2/3", "pf_half=2097152",
        "pf_hal=1",   "pf_f32=1,bogus=2", "pf_f32=1,",     "pf_f32=99999999999999999999",
        "pf_f32=1/2x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (kc_tune_parse(bad[i], &t) != -EINVAL) {
            fail_msg("TANDEM_CPU_TUNE=%s was accepted", bad[i]);
        }
        assert_memory_equal(&t, &before, sizeof(t));
    }
    const kc_tune saved = *kc_tune_get();
    kc_tune big = saved;
    big.pf_half[KC_TUNE_MANY] = KC_TUNE_PF_MAX + 1;
    assert_int_equal(kc_tune_set(&big), -EINVAL);
    assert_int_equal(kc_tune_get()->pf_half[KC_TUNE_MANY], saved.pf_half[KC_TUNE_MANY]);
    big.pf_half[KC_TUNE_MANY] = 0;
    assert_int_equal(kc_tune_set(&big), 0);
    assert_int_equal(kc_tune_get()->pf_half[KC_TUNE_MANY], 0);
    assert_int_equal(kc_tune_set(&saved), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_features),
        cmocka_unit_test(test_tune_parse),
        cmocka_unit_test(test_pool_runs),
        cmocka_unit_test(test_pool_wakes_sleepers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
