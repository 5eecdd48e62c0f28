/*
 * Unit tests for the Jinja interpreter's name tables (filters and tests in jinja_filters.c,
 * methods and globals in jinja_methods.c): each is sorted by strcmp with no name twice, which the
 * binary search of jinja__lookup relies on; every entry is found under its own name and has a
 * function; names that are not in a table are not found; and the renderer knows every name the
 * tables list.
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

/* Renders src against {"x": "a"} into *out (NULL on failure, err set); returns rc. */
static int render(const char *src, char **out, char *err, size_t errlen)
{
    jinja_template *t = jinja_compile(src, strlen(src), err, errlen);
    if (!t) {
        fail_msg("%s: %s", src, err);
    }
    struct json_object *ctx = json_object_new_object();
    json_object_object_add(ctx, "x", json_object_new_string("a"));
    int rc = jinja_render(t, ctx, out, NULL, err, errlen);
    json_object_put(ctx);
    jinja_free(t);
    return rc;
}

/* Renders src; fails when it fails with an error containing `unknown` (a name not found). */
static void expect_known(const char *src, const char *unknown)
{
    char err[256] = "";
    char *out = NULL;
    if (render(src, &out, err, sizeof(err)) != 0 && strstr(err, unknown)) {
        fail_msg("%s: %s", src, err);
    }
    free(out);
}

static void expect_output(const char *src, const char *want)
{
    char err[256] = "";
    char *out = NULL;
    if (render(src, &out, err, sizeof(err)) != 0) {
        fail_msg("%s: %s", src, err);
    }
    assert_string_equal(out, want);
    free(out);
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
        assert_int_equal(f->flags & ~(unsigned)(JF_ITEMS | JF_FALSY_EMPTY), 0);
        if (f->flags & JF_FALSY_EMPTY) { /* only meaningful for filters given the items */
            assert_true(f->flags & JF_ITEMS);
        }
        snprintf(src, sizeof(src), "{{ x|%s }}", f->name);
        expect_known(src, "unknown filter");
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
        expect_known(src, "unknown test");
    }
    assert_null(jinja__test_find("nope"));
}

static void test_methods_tables(void **state)
{
    (void)state;
    check_sorted_unique("string methods", jinja__str_methods, jinja__n_str_methods,
                        sizeof(jinja__str_methods[0]));
    check_sorted_unique("dict methods", jinja__dict_methods, jinja__n_dict_methods,
                        sizeof(jinja__dict_methods[0]));
    char src[128];
    for (size_t i = 0; i < jinja__n_str_methods; i++) {
        assert_non_null(jinja__str_methods[i].fn);
        snprintf(src, sizeof(src), "{{ x.%s() }}", jinja__str_methods[i].name);
        expect_known(src, "string has no method");
    }
    check_sorted_unique("list methods", jinja__list_methods, jinja__n_list_methods,
                        sizeof(jinja__list_methods[0]));
    for (size_t i = 0; i < jinja__n_list_methods; i++) {
        assert_non_null(jinja__list_methods[i].fn);
        snprintf(src, sizeof(src), "{{ [1].%s(1) }}", jinja__list_methods[i].name);
        expect_known(src, "list has no method");
    }
    for (size_t i = 0; i < jinja__n_dict_methods; i++) {
        assert_non_null(jinja__dict_methods[i].fn);
        snprintf(src, sizeof(src), "{{ {'a': 1}.%s() }}", jinja__dict_methods[i].name);
        expect_known(src, "dict has no method");
    }
}

static void test_globals_table(void **state)
{
    (void)state;
    check_sorted_unique("globals", jinja__globals, jinja__n_globals, sizeof(jinja__globals[0]));
    char src[128];
    for (size_t i = 0; i < jinja__n_globals; i++) {
        const struct jinja__global *g = &jinja__globals[i];
        assert_non_null(g->fn);
        assert_ptr_equal(jinja__global_find(g->name), g);
        snprintf(src, sizeof(src), "{{ %s is callable }}", g->name);
        expect_output(src, "True");
    }
    assert_null(jinja__global_find("nope"));
    expect_output("{% set range = 'shadowed' %}{{ range }}", "shadowed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filters_table),
        cmocka_unit_test(test_tests_table),
        cmocka_unit_test(test_methods_tables),
        cmocka_unit_test(test_globals_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
