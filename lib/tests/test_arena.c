/* Unit tests for lib/arena: alignment, large allocations, reset, limits, strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lib/arena.h"

static void test_alignment_and_distinct(void **state)
{
    (void)state;
    struct arena *a = arena_new(512);
    assert_non_null(a);
    char *prev = NULL;
    for (size_t i = 0; i < 200; i++) {
        char *p = arena_alloc(a, i % 37);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 16, 0);
        assert_true(p != prev);
        if (p) { /* cmocka's asserts are not noreturn: keep the analyzer informed */
            memset(p, 0xAB, i % 37); /* ASan catches overlap or overflow */
        }
        prev = p;
    }
    assert_true(arena_used(a) >= 200 * 16);
    arena_free(a);
    arena_free(NULL);
}

static void test_large_allocations(void **state)
{
    (void)state;
    struct arena *a = arena_new(256);
    assert_non_null(a);
    char *small1 = arena_alloc(a, 16);
    char *big = arena_alloc(a, 100000);
    char *small2 = arena_alloc(a, 16);
    assert_non_null(small1);
    assert_non_null(big);
    assert_non_null(small2);
    memset(big, 1, 100000);
    /* The small ones keep coming from the regular block. */
    assert_ptr_equal(small2, small1 + 16);
    assert_int_equal(arena_used(a), 16 + 100000 + 16);
    /* Overflowing sizes fail cleanly. */
    assert_null(arena_alloc(a, SIZE_MAX));
    assert_null(arena_alloc(a, SIZE_MAX - 8));
    arena_reset(a);
    assert_int_equal(arena_used(a), 0);
    char *again = arena_alloc(a, 16);
    assert_ptr_equal(again, small1); /* the first block is reused */
    arena_free(a);
}

static void test_many_blocks_and_reset(void **state)
{
    (void)state;
    struct arena *a = arena_new(0);
    assert_non_null(a);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 1000; i++) {
            char *p = arena_alloc(a, 100);
            assert_non_null(p);
            memset(p, i & 0xff, 100);
        }
        assert_int_equal(arena_used(a), 1000 * 112);
        arena_reset(a);
        assert_int_equal(arena_used(a), 0);
    }
    arena_free(a);
}

static void test_limit(void **state)
{
    (void)state;
    struct arena *a = arena_new(1024);
    assert_non_null(a);
    arena_set_limit(a, 100);
    assert_non_null(arena_alloc(a, 64));
    assert_non_null(arena_alloc(a, 32));
    assert_int_equal(arena_used(a), 96);
    assert_null(arena_alloc(a, 16)); /* 112 > 100 */
    assert_null(arena_strdup(a, "too long for the rest"));
    assert_null(arena_sprintf(a, "%d", 12345));
    arena_reset(a);
    assert_non_null(arena_alloc(a, 96));
    arena_set_limit(a, 0);
    assert_non_null(arena_alloc(a, 5000));
    arena_free(a);
}

static void test_strings(void **state)
{
    (void)state;
    struct arena *a = arena_new(256);
    assert_non_null(a);
    char *s = arena_strdup(a, "hello");
    assert_string_equal(s, "hello");
    assert_null(arena_strdup(a, NULL));
    assert_string_equal(arena_strndup(a, "hello world", 5), "hello");
    assert_string_equal(arena_strndup(a, "hi", 100), "hi");
    char *f = arena_sprintf(a, "%s-%03d-%c", "pod", 7, 'x');
    assert_string_equal(f, "pod-007-x");
    /* A formatted string bigger than the block size. */
    char *big = arena_sprintf(a, "%0500d", 1);
    assert_int_equal(strlen(big), 500);
    assert_int_equal(big[499], '1');
    assert_string_equal(s, "hello"); /* earlier allocations untouched */
    arena_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignment_and_distinct),
        cmocka_unit_test(test_large_allocations),
        cmocka_unit_test(test_many_blocks_and_reset),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
