/* API key checks (api_key.h): which requests need a key, the header's forms, several keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/server/api_key.h"

static void test_paths_and_forms(void **state)
{
    (void)state;
    const char *keys[] = {"sk-one", "", "second key"};
    char err[128] = "";
    struct api_keys *k = api_keys_new(keys, 3, err, sizeof err);
    assert_non_null(k);
    assert_int_equal(api_keys_count(k), 2); /* the empty key is skipped */
    /* /v1 paths need a key */
    assert_false(api_keys_allow(k, "POST", "/v1/completions", NULL));
    assert_false(api_keys_allow(k, "GET", "/v1/models", ""));
    assert_false(api_keys_allow(k, "GET", "/v1", "Bearer nope"));
    assert_false(api_keys_allow(k, "GET", "/v1/unknown", "Bearer sk-one "));
    assert_false(api_keys_allow(k, "POST", "/v1/completions", "Basic sk-one"));
    assert_false(api_keys_allow(k, "POST", "/v1/completions", "Bearer"));
    assert_false(api_keys_allow(k, "POST", "/v1/completions", "Bearersk-one"));
    assert_false(api_keys_allow(k, "POST", "/v1/completions", "Bearer  sk-one"));
    assert_false(api_keys_allow(k, "POST", "/v1/completions", "Bearer sk-on"));
    assert_true(api_keys_allow(k, "POST", "/v1/completions", "Bearer sk-one"));
    assert_true(api_keys_allow(k, "POST", "/v1/completions", "bearer sk-one"));
    assert_true(api_keys_allow(k, "POST", "/v1/chat/completions", "BEARER second key"));
    assert_false(api_keys_allow(k, "GET", "/v1x", NULL)); /* vLLM: startswith("/v1") */
    assert_true(api_keys_allow(k, "GET", "/v2/x", NULL));
    /* OPTIONS and the other paths stay open */
    assert_true(api_keys_allow(k, "OPTIONS", "/v1/completions", NULL));
    assert_true(api_keys_allow(k, "GET", "/health", NULL));
    assert_true(api_keys_allow(k, "GET", "/metrics", NULL));
    assert_true(api_keys_allow(k, "POST", "/tokenize", NULL));
    assert_true(api_keys_allow(k, "GET", "/", NULL));
    api_keys_free(k);
}

static void test_off_and_errors(void **state)
{
    (void)state;
    char err[128] = "";
    struct api_keys *k = api_keys_new(NULL, 0, err, sizeof err);
    assert_non_null(k);
    assert_int_equal(api_keys_count(k), 0);
    assert_true(api_keys_allow(k, "POST", "/v1/completions", NULL));
    api_keys_free(k);
    assert_true(api_keys_allow(NULL, "POST", "/v1/completions", NULL));
    const char *bad[] = {"a\r\nb"};
    assert_null(api_keys_new(bad, 1, err, sizeof err));
    assert_non_null(strstr(err, "line break"));
    api_keys_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_and_forms),
        cmocka_unit_test(test_off_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
