/* Unit tests for the kc_pool thread pool: every ith runs once per run, barriers order phases,
 * many back-to-back runs, sleeping workers wake up. */
#include <setjmp.h>
#include <stdarg.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_features),
        cmocka_unit_test(test_pool_runs),
        cmocka_unit_test(test_pool_wakes_sleepers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
