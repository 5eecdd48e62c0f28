/*
 * Tests of tandem-epp's command line (operator/epp/flags.h): Go durations, --endpoints entries,
 * defaults, Go-style bool flags, and the errors that name the flag.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "operator/epp/flags.h"

static void test_durations(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t ms;
    } ok[] = {{"50ms", 50}, {"2s", 2000}, {"1m30s", 90000}, {"1.5s", 1500},
              {"250us", 1}, {"0", 0},     {"1h", 3600000},  {"100ns", 1}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t v = -1;
        assert_int_equal(epp_parse_duration_ms(ok[i].s, &v), 0);
        assert_int_equal(v, ok[i].ms);
    }
    const char *bad[] = {"", "5", "ms", "-1s", "1x", "1s2", "nan s", "1e400s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v;
        assert_int_equal(epp_parse_duration_ms(bad[i], &v), -EINVAL);
    }
}

static void test_endpoints(void **state)
{
    (void)state;
    struct epp_static_endpoint e[4];
    char err[256];
    int n = epp_parse_endpoints("127.0.0.2:8000/decode@m1,[::1]:8001/prefill,10.0.0.1:80", e, 4,
                                err, sizeof err);
    assert_int_equal(n, 3);
    assert_string_equal(e[0].ip, "127.0.0.2");
    assert_int_equal(e[0].port, 8000);
    assert_string_equal(e[0].role, "decode");
    assert_string_equal(e[0].model, "m1");
    assert_string_equal(e[1].ip, "::1");
    assert_string_equal(e[1].role, "prefill");
    assert_string_equal(e[2].role, "");
    const char *bad[] = {"",
                         "127.0.0.1",
                         "127.0.0.1:0",
                         "host:80",
                         "127.0.0.1:80/chef",
                         "127.0.0.1:80,,127.0.0.2:80",
                         "127.0.0.1:99999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_true(epp_parse_endpoints(bad[i], e, 4, err, sizeof err) < 0);
        assert_non_null(strstr(err, "--endpoints"));
    }
    assert_true(epp_parse_endpoints("1.1.1.1:1,1.1.1.1:2,1.1.1.1:3,1.1.1.1:4,1.1.1.1:5", e, 4, err,
                                    sizeof err) < 0);
}

static int parse(struct epp_flags *f, const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"tandem-epp";
    while (*args) {
        argv[argc++] = (char *)*args++;
    }
    return epp_flags_parse(argc, argv, f);
}

static void test_flags(void **state)
{
    (void)state;
    struct epp_flags f;
    const char *a1[] = {"--pool-name",   "p",       "--pool-namespace=ns",
                        "--config-file", "/c.yaml", NULL};
    assert_int_equal(parse(&f, a1), 0);
    assert_string_equal(f.pool_name, "p");
    assert_string_equal(f.pool_ns, "ns");
    assert_int_equal(f.grpc_port, 9002);
    assert_int_equal(f.metrics_port, 9090);
    assert_int_equal(f.gateway_port, 8080);
    assert_int_equal(f.refresh_ms, 50);
    assert_int_equal(f.stale_ms, 2000);
    assert_string_equal(f.pool_group, "tandem.dev");
    /* Go bools never take the next argument */
    const char *a2[] = {"--endpoints",
                        "127.0.0.1:8000",
                        "--ha-enable-leader-election",
                        "--gateway-port",
                        "18080",
                        "--secure-serving=false",
                        "--refresh-metrics-interval=100ms",
                        NULL};
    assert_int_equal(parse(&f, a2), 0);
    assert_true(f.leader_election);
    assert_int_equal(f.gateway_port, 18080);
    assert_false(f.secure_serving);
    assert_int_equal(f.refresh_ms, 100);
    const char *bad[][4] = {
        {"--config-file", "a", NULL},                               /* no pool */
        {"--pool-name", "p", "--grpc-port", "x"},                   /* not a port */
        {"--pool-name", "p", "--secure-serving", NULL},             /* TLS not yet */
        {"--pool-name", "p", "--metrics-staleness-threshold", "2"}, /* no unit */
        {"--pool-name", "p", "--no-such-flag", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(&f, bad[i]), 2);
    }
    const char *help[] = {"--help", NULL};
    assert_int_equal(parse(&f, help), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
