/* Unit tests for lib/base64: RFC 4648's vectors, optional padding, bad characters. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/base64.h"

static void check(const char *in, const char *want)
{
    uint8_t *out = NULL;
    size_t len = 0;
    assert_int_equal(tandem_base64_decode(in, strlen(in), &out, &len), 0);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(out, want, len);
    free(out);
}

static void test_vectors(void **state)
{
    (void)state;
    check("", "");
    check("Zg==", "f");
    check("Zm8=", "fo");
    check("Zm9v", "foo");
    check("Zm9vYg==", "foob");
    check("Zm9vYmE=", "fooba");
    check("Zm9vYmFy", "foobar");
    check("Zm9vYg", "foob"); /* unpadded */
    check("+/+/", "\xfb\xff\xbf");
}

static void test_bad(void **state)
{
    (void)state;
    uint8_t *out = (uint8_t *)&out;
    size_t len = 7;
    static const char *const bad[] = {"Zm9v YmFy", "Zm9v\n", "Zm-v", "Zg==Zg", "Zg=a"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(tandem_base64_decode(bad[i], strlen(bad[i]), &out, &len), -EINVAL);
    }
    assert_int_equal(tandem_base64_decode("Zm\0v", 4, &out, &len), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
