/*
 * Unit tests for the Jinja interpreter's name tables (filters and tests in jinja_filters.c):
 * each is sorted by strcmp with no name twice, which the binary search of jinja__lookup relies
 * on; every entry is found under its own name and has a function; names that are not in a table
 * are not found; and the renderer knows every name the tables list.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/template/jinja_internal.h"

/* The name of entry i of a table whose entries are size bytes and start with their name. */
static const char *name_at(const void *table, size_t size, size_t i)
{
    return *(const char *const *)(const void *)((const char *)table + i * size);
}

static void check_sorted_unique(const char *what, const void *table, size_t n, size_t size)
{
    assert_true(n > 0);
    const char *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *name = name_at(table, size, i);
        if (!name || !name[0]) {
            fail_msg("%s[%zu]: empty name", what, i);
            return;
        }
        if (prev && strcmp(prev, name) >= 0) {
            fail_msg("%s: '%s' must sort after '%s' (sorted by strcmp, no duplicates)", what, name,
                     prev);
        }
        prev = name;
        if (jinja__lookup(table, n, size, name) != (const char *)table + i * size) {
            fail_msg("%s: '%s' is not found under its own name", what, name);
        }
    }
    const char *absent[] = {"", "A", "zzzz", "~"};
    for (size_t i = 0; i < ARRAY_SIZE(absent); i++) {
        assert_null(jinja__lookup(table, n, size, absent[i]));
    }
}

/* Renders src against {"x": "a"}; fails when the error names an unknown `kind`. */
static void expect_known(const char *src, const char *kind)
{
    char err[256] = "";
    jinja_template *t = jinja_compile(src, strlen(src), err, sizeof(err));
    if (!t) {
        fail_msg("%s: %s", src, err);
    }
    struct json_object *ctx = json_object_new_object();
    json_object_object_add(ctx, "x", json_object_new_string("a"));
    char *out = NULL;
    int rc = jinja_render(t, ctx, &out, NULL, err, sizeof(err));
    char unknown[64];
    snprintf(unknown, sizeof(unknown), "unknown %s", kind);
    if (rc != 0 && strstr(err, unknown)) {
        fail_msg("%s: %s", src, err);
    }
    free(out);
    json_object_put(ctx);
    jinja_free(t);
}

static void test_filters_table(void **state)
{
    (void)state;
    check_sorted_unique("filters", jinja__filters, jinja__n_filters, sizeof(jinja__filters[0]));
    char src[128];
    for (size_t i = 0; i < jinja__n_filters; i++) {
        const struct jinja__filter *f = &jinja__filters[i];
        assert_non_null(f->fn);
        assert_ptr_equal(jinja__filter_find(f->name), f);
        assert_int_equal(f->flags & ~(unsigned)JF_ITEMS, 0);
        snprintf(src, sizeof(src), "{{ x|%s }}", f->name);
        expect_known(src, "filter");
    }
    assert_null(jinja__filter_find("nope"));
    assert_null(jinja__filter_find("uppe"));
    assert_null(jinja__filter_find("upperr"));
}

static void test_tests_table(void **state)
{
    (void)state;
    check_sorted_unique("tests", jinja__tests, jinja__n_tests, sizeof(jinja__tests[0]));
    char src[128];
    for (size_t i = 0; i < jinja__n_tests; i++) {
        const struct jinja__test *t = &jinja__tests[i];
        assert_non_null(t->fn);
        assert_ptr_equal(jinja__test_find(t->name), t);
        /* select reaches the operator spellings too, which `is` does not parse */
        snprintf(src, sizeof(src), "{{ [x]|select('%s', 'a')|list }}", t->name);
        expect_known(src, "test");
    }
    assert_null(jinja__test_find("nope"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filters_table),
        cmocka_unit_test(test_tests_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
