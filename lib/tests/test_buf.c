/* Unit tests for lib/buf: growth, the hard cap, formatting, detach, sticky failure. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/buf.h"

static void test_empty(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 100);
    assert_null(b.data);
    assert_string_equal(buf_cstr(&b), "");
    assert_int_equal(buf_append(&b, NULL, 0), 0);
    assert_null(b.data);
    size_t len = 99;
    char *s = buf_detach(&b, &len);
    assert_non_null(s);
    assert_string_equal(s, "");
    assert_int_equal(len, 0);
    free(s);
    buf_free(&b);
}

static void test_append_grows_and_terminates(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(buf_appends(&b, "abc"), 0);
    }
    assert_int_equal(b.len, 3000);
    assert_true(b.cap > b.len);
    assert_int_equal(b.data[b.len], '\0');
    assert_int_equal(strlen(buf_cstr(&b)), 3000);
    assert_memory_equal(b.data + 2997, "abc", 3);
    /* Binary data with NULs. */
    assert_int_equal(buf_append(&b, "x\0y", 3), 0);
    assert_int_equal(b.len, 3003);
    assert_memory_equal(b.data + 3000, "x\0y", 3);
    buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
}

static void test_cap_enforced(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 10);
    assert_int_equal(buf_appends(&b, "0123456789"), 0);
    assert_int_equal(b.len, 10);
    assert_true(b.cap <= 11); /* never allocates past max + NUL */
    assert_int_equal(buf_appends(&b, "x"), -ENOSPC);
    assert_int_equal(b.len, 10);
    assert_string_equal(buf_cstr(&b), "0123456789");
    buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(buf_cstr(&b), "");
    assert_int_equal(buf_append(&b, "0123456789A", 11), -ENOSPC);
    assert_int_equal(b.len, 0);
    /* SIZE_MAX length must not wrap around. */
    assert_int_equal(buf_append(&b, "x", SIZE_MAX), -ENOSPC);
    buf_free(&b);
}

/* After one failed append every later one is refused, so a builder that checks once at the end
 * can never send a document with a hole in it. */
static void test_failure_is_sticky(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 8);
    assert_int_equal(buf_error(&b), 0);
    assert_int_equal(buf_appends(&b, "{\"a\":"), 0);
    assert_int_equal(buf_appends(&b, "\"too long\""), -ENOSPC); /* dropped */
    assert_int_equal(buf_error(&b), -ENOSPC);
    assert_int_equal(buf_appends(&b, "}"), -ENOSPC); /* would fit, but is refused */
    assert_int_equal(buf_appendf(&b, "%d", 1), -ENOSPC);
    assert_string_equal(buf_cstr(&b), "{\"a\":");
    buf_reset(&b);
    assert_int_equal(buf_error(&b), 0);
    assert_int_equal(buf_appendf(&b, "%s", "123456789"), -ENOSPC);
    assert_int_equal(buf_error(&b), -ENOSPC);
    assert_string_equal(buf_cstr(&b), "");
    buf_free(&b);
    assert_int_equal(buf_error(&b), 0);
    assert_int_equal(buf_appends(&b, "ok"), 0);
    buf_free(&b);
}

static void test_appendf(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 64);
    assert_int_equal(buf_appendf(&b, "%s=%d", "n", 42), 0);
    assert_int_equal(buf_appendf(&b, ",%05.1f", 3.14159), 0);
    assert_string_equal(buf_cstr(&b), "n=42,003.1");
    assert_int_equal(b.len, 10);
    /* Too long: nothing appended, contents intact and terminated. */
    assert_int_equal(buf_appendf(&b, "%060d", 1), -ENOSPC);
    assert_string_equal(buf_cstr(&b), "n=42,003.1");
    assert_int_equal(b.len, 10);
    /* The failure is sticky until a reset (test_failure_is_sticky). */
    assert_int_equal(buf_appendf(&b, "%d", 1), -ENOSPC);
    buf_reset(&b);
    assert_int_equal(buf_appendf(&b, "%s=%d", "n", 42), 0);
    assert_int_equal(buf_appendf(&b, ",%05.1f", 3.14159), 0);
    /* Exactly up to the cap. */
    assert_int_equal(buf_appendf(&b, "%054d", 7), 0);
    assert_int_equal(b.len, 64);
    assert_int_equal(buf_appendf(&b, "%s", ""), 0);
    assert_int_equal(buf_appendf(&b, "x"), -ENOSPC);
    buf_free(&b);

    /* Growth through appendf from nothing. */
    buf_init(&b, 100000);
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(buf_appendf(&b, "%d,", i % 10), 0);
    }
    assert_int_equal(b.len, 2000);
    assert_int_equal(strncmp(buf_cstr(&b), "0,1,2,", 6), 0);
    buf_free(&b);
}

static void test_detach(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 100);
    assert_int_equal(buf_appends(&b, "hello"), 0);
    size_t len = 0;
    char *s = buf_detach(&b, &len);
    assert_string_equal(s, "hello");
    assert_int_equal(len, 5);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.max, 100);
    free(s);
    /* Reusable after detach. */
    assert_int_equal(buf_appends(&b, "again"), 0);
    assert_string_equal(buf_cstr(&b), "again");
    buf_free(&b);
    buf_free(&b); /* double free is harmless */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),        cmocka_unit_test(test_append_grows_and_terminates),
        cmocka_unit_test(test_cap_enforced), cmocka_unit_test(test_appendf),
        cmocka_unit_test(test_detach),       cmocka_unit_test(test_failure_is_sticky),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
