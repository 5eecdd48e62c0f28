/* Unit tests for lib/err (one error table), lib/list (intrusive list) and tandem_grow. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/clock.h"
#include "lib/err.h"
#include "lib/list.h"

static void test_names_and_messages(void **state)
{
    (void)state;
    assert_string_equal(tandem_strerror(0), "success");
    assert_string_equal(tandem_err_name(0), "OK");
    assert_string_equal(tandem_err_name(-ENOMEM), "ENOMEM");
    assert_string_equal(tandem_strerror(-ENOMEM), strerror(ENOMEM));
    assert_string_equal(tandem_err_name(KUBE_ENOTFOUND), "KUBE_ENOTFOUND");
    assert_string_equal(tandem_strerror(KUBE_ENOTFOUND), "not found");
    assert_int_equal(KUBE_ENOTFOUND, -2001);
    assert_int_equal(KUBE_EOTHER, -2099);
    /* the operator's ownership conflict has a name (it used to log "Unknown error 3001") */
    assert_string_equal(tandem_err_name(APPLY_EOWNED), "APPLY_EOWNED");
    assert_string_equal(tandem_strerror(APPLY_EOWNED), "object is owned by another controller");
    assert_string_equal(tandem_err_name(JINJA_ERAISED), "JINJA_ERAISED");
    /* an errno outside the name table still reads as the C library says */
    assert_null(tandem_err_name(-EROFS));
    assert_string_equal(tandem_strerror(-EROFS), strerror(EROFS));
    assert_string_equal(tandem_strerror(-4242), "unknown error -4242");
    assert_string_equal(tandem_strerror(7), "unknown error 7");
}

/* Every code in the table is negative, outside errno's range and unique. */
static void test_table_is_consistent(void **state)
{
    (void)state;
    static const int codes[] = {
#define XX(name, value, msg) name,
        TANDEM_ERROR_MAP(XX)
#undef XX
    };
    for (size_t i = 0; i < ARRAY_SIZE(codes); i++) {
        assert_true(codes[i] <= -2000);
        assert_non_null(tandem_err_name(codes[i]));
        for (size_t j = i + 1; j < ARRAY_SIZE(codes); j++) {
            assert_int_not_equal(codes[i], codes[j]);
        }
    }
}

static void test_set_err_and_fail(void **state)
{
    (void)state;
    char err[16];
    tandem_set_err(err, sizeof(err), "field %s is bad", "x");
    assert_string_equal(err, "field x is bad");
    tandem_set_err(err, sizeof(err), "%s", "a message longer than the buffer");
    assert_int_equal(strlen(err), sizeof(err) - 1);
    tandem_set_err(NULL, 0, "ignored %d", 1);
    assert_int_equal(tandem_fail(err, sizeof(err), -EINVAL, "n=%d", 3), -EINVAL);
    assert_string_equal(err, "n=3");
    assert_int_equal(tandem_fail(NULL, 0, KUBE_ECONFLICT, "x"), KUBE_ECONFLICT);
}

struct item {
    int v;
    struct list_node link;
};

static void test_list(void **state)
{
    (void)state;
    struct list_node head;
    list_init(&head);
    assert_true(list_empty(&head));
    assert_null(list_first(&head));
    struct item it[4];
    for (int i = 0; i < 4; i++) {
        it[i].v = i;
        list_node_init(&it[i].link);
        assert_false(list_linked(&it[i].link));
    }
    list_push_back(&head, &it[1].link);
    list_push_back(&head, &it[2].link);
    list_push_front(&head, &it[0].link);
    list_insert_after(&it[2].link, &it[3].link);
    int want = 0;
    struct list_node *n, *tmp;
    list_for_each_safe(&head, n, tmp)
    {
        assert_int_equal(list_entry(n, struct item, link)->v, want++);
    }
    assert_int_equal(want, 4);
    list_unlink(&it[2].link);
    assert_false(list_linked(&it[2].link));
    list_unlink(&it[2].link); /* a second unlink is harmless */
    list_for_each_safe(&head, n, tmp)
    {
        list_unlink(n);
    }
    assert_true(list_empty(&head));
    assert_null(list_last(&head));
}

static void test_grow(void **state)
{
    (void)state;
    int *v = NULL;
    size_t cap = 0;
    int *n = tandem_grow(v, &cap, 1, sizeof(*v), 16);
    assert_non_null(n);
    assert_int_equal(cap, 16);
    v = n;
    v = tandem_grow(v, &cap, 16, sizeof(*v), 16); /* enough already */
    assert_int_equal(cap, 16);
    n = tandem_grow(v, &cap, 40, sizeof(*v), 16);
    assert_non_null(n);
    assert_int_equal(cap, 64);
    v = n;
    v[63] = 1;
    /* an impossible size fails and leaves the array and cap as they were */
    assert_null(tandem_grow(v, &cap, SIZE_MAX / 2, sizeof(*v), 16));
    assert_int_equal(cap, 64);
    free(v);
}

static void test_clock(void **state)
{
    (void)state;
    int64_t a = tandem_now_ns();
    int64_t b = tandem_now_ns();
    assert_true(a > 0 && b >= a);
    assert_true(tandem_now_ms() >= a / 1000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_messages),
        cmocka_unit_test(test_table_is_consistent),
        cmocka_unit_test(test_set_err_and_fail),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
