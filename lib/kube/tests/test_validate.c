/*
 * Unit tests of lib/kube/validate.h: DNS-1123 and DNS-1035 labels, DNS-1123 subdomains, label
 * keys and values at and around their limits, and quantities (suffixes, exponents, signs, and
 * what the API server rejects).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "lib/common.h"
#include "lib/kube/validate.h"

/* n copies of ch into out (which has room for n + 1). */
static const char *repeat(char *out, char ch, size_t n)
{
    memset(out, ch, n);
    out[n] = '\0';
    return out;
}

static void test_dns_names(void **state)
{
    (void)state;
    char s[300];
    assert_true(kube_valid_dns_label("pod-1"));
    assert_true(kube_valid_dns_label("1pod"));
    assert_true(kube_valid_dns_label(repeat(s, 'a', 63)));
    assert_false(kube_valid_dns_label(repeat(s, 'a', 64)));
    assert_false(kube_valid_dns_label(""));
    assert_false(kube_valid_dns_label("pod.1"));
    assert_false(kube_valid_dns_label("Pod"));
    assert_false(kube_valid_dns_label("-pod"));
    assert_false(kube_valid_dns_label("pod-"));
    assert_false(kube_valid_dns_label("pod_1"));

    assert_true(kube_valid_dns1035_label("pool-1"));
    assert_false(kube_valid_dns1035_label("1pool"));
    assert_false(kube_valid_dns1035_label(""));

    assert_true(kube_valid_dns_subdomain("a.b-c.d"));
    assert_true(kube_valid_dns_subdomain("qwen2.5-0.5b"));
    assert_false(kube_valid_dns_subdomain("a..b"));
    assert_false(kube_valid_dns_subdomain(".a"));
    assert_false(kube_valid_dns_subdomain("a."));
    assert_false(kube_valid_dns_subdomain("A"));
    assert_false(kube_valid_dns_subdomain(""));
    /* 253 characters in four labels of at most 63 */
    repeat(s, 'a', 253);
    s[63] = s[127] = s[191] = '.';
    assert_true(kube_valid_dns_subdomain(s));
    repeat(s, 'a', 254);
    s[63] = s[127] = s[191] = '.';
    assert_false(kube_valid_dns_subdomain(s));
    assert_false(kube_valid_dns_subdomain(repeat(s, 'a', 64))); /* one label over 63 */
}

static void test_labels(void **state)
{
    (void)state;
    char s[300], key[400];
    assert_true(kube_valid_label_key("app"));
    assert_true(kube_valid_label_key("llm-d.ai/role"));
    assert_true(kube_valid_label_key("a.b-c_d"));
    assert_true(kube_valid_label_key("Upper_Case.ok"));
    assert_false(kube_valid_label_key(""));
    assert_false(kube_valid_label_key("/x"));
    assert_false(kube_valid_label_key("x/"));
    assert_false(kube_valid_label_key("Bad.Domain/x"));
    assert_false(kube_valid_label_key("-x"));
    assert_false(kube_valid_label_key("a/b/c"));
    assert_true(kube_valid_label_key(repeat(s, 'k', 63)));
    assert_false(kube_valid_label_key(repeat(s, 'k', 64)));
    snprintf(key, sizeof(key), "%s/x", repeat(s, 'p', 63));
    assert_true(kube_valid_label_key(key));

    assert_true(kube_valid_label_value(""));
    assert_true(kube_valid_label_value("v1.2_3-x"));
    assert_true(kube_valid_label_value(repeat(s, 'v', 63)));
    assert_false(kube_valid_label_value(repeat(s, 'v', 64)));
    assert_false(kube_valid_label_value("a b"));
    assert_false(kube_valid_label_value("x-"));
    assert_false(kube_valid_label_value("a/b"));
}

static void test_quantities(void **state)
{
    (void)state;
    struct {
        const char *q;
        long double want;
    } ok[] = {
        {"1", 1},
        {"500m", 0.5},
        {"0.5", 0.5},
        {"1Gi", 1073741824.0L},
        {"1024Mi", 1073741824.0L},
        {"2k", 2000},
        {"1e3", 1000},
        {"1E", 1e18L},
        {"+.5", 0.5},
        {"-1", -1},
        {"100u", 1e-4L},
        {"3Ki", 3072},
        {"5n", 5e-9L},
        {"2e-3", 0.002},
    };
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
        long double v = -99;
        if (kube_parse_quantity(ok[i].q, &v) != 0) {
            fail_msg("quantity %s rejected", ok[i].q);
        }
        long double d = v - ok[i].want;
        if (d < 0) {
            d = -d;
        }
        assert_true(d <= 1e-9L * (ok[i].want < 0 ? -ok[i].want : ok[i].want) + 1e-12L);
    }
    static const char *const bad[] = {"",   "m",  "1.2.3", "1Gb",  "1 Gi", "0x10",
                                      "1e", "e3", "Gi",    "1e3m", "1Kii"};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        long double v;
        if (kube_parse_quantity(bad[i], &v) != -EINVAL) {
            fail_msg("quantity \"%s\" accepted", bad[i]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dns_names),
        cmocka_unit_test(test_labels),
        cmocka_unit_test(test_quantities),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
