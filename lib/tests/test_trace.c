/* Unit tests for lib/trace: traceparent parsing (every rejection path) and formatting, id
 * generation, the samplers, and the span API's NULL (tracing off) behaviour. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/trace.h"

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define SID "00f067aa0ba902b7"

static void expect_reject(const char *tp, const char *why)
{
    struct trace_ctx c;
    char err[200] = "";
    memset(&c, 0xaa, sizeof c);
    int rc = trace_parse_traceparent(tp, &c, err, sizeof err);
    if (rc != -EINVAL || strstr(err, why) == NULL || c.valid) {
        fail_msg("traceparent \"%s\": rc %d, err \"%s\", want \"%s\"", tp ? tp : "(null)", rc, err,
                 why);
    }
}

static void test_parse_valid(void **state)
{
    (void)state;
    struct trace_ctx c;
    char err[200] = "";
    assert_int_equal(trace_parse_traceparent("00-" TID "-" SID "-01", &c, err, sizeof err), 0);
    assert_true(c.valid);
    assert_int_equal(c.flags, TRACE_FLAG_SAMPLED);
    assert_int_equal(c.trace_id[0], 0x4b);
    assert_int_equal(c.trace_id[15], 0x36);
    assert_int_equal(c.span_id[0], 0x00);
    assert_int_equal(c.span_id[7], 0xb7);
    char out[TRACEPARENT_LEN + 1];
    trace_format_traceparent(&c, out);
    assert_string_equal(out, "00-" TID "-" SID "-01");

    /* not sampled; unknown flag bits are not passed on */
    assert_int_equal(trace_parse_traceparent("00-" TID "-" SID "-00", &c, err, sizeof err), 0);
    assert_int_equal(c.flags, 0);
    assert_int_equal(trace_parse_traceparent("00-" TID "-" SID "-fe", &c, err, sizeof err), 0);
    assert_int_equal(c.flags, 0);
    trace_format_traceparent(&c, out);
    assert_string_equal(out, "00-" TID "-" SID "-00");
    assert_int_equal(trace_parse_traceparent("00-" TID "-" SID "-03", &c, err, sizeof err), 0);
    assert_int_equal(c.flags, TRACE_FLAG_SAMPLED);

    /* surrounding optional whitespace of a header value */
    assert_int_equal(trace_parse_traceparent(" \t00-" TID "-" SID "-01\t ", &c, err, sizeof err),
                     0);
    assert_true(c.valid);

    /* a future version: read as 00, with or without more fields after a '-' */
    assert_int_equal(trace_parse_traceparent("cc-" TID "-" SID "-01", &c, err, sizeof err), 0);
    assert_true(c.valid);
    assert_int_equal(
        trace_parse_traceparent("cc-" TID "-" SID "-01-what-the-future-holds", &c, err, sizeof err),
        0);
    trace_format_traceparent(&c, out);
    assert_string_equal(out, "00-" TID "-" SID "-01"); /* we speak 00 */
}

static void test_parse_reject(void **state)
{
    (void)state;
    expect_reject(NULL, "missing");
    expect_reject("", "empty");
    expect_reject("   ", "empty");
    expect_reject("0", "version is not two lower-case hex");
    expect_reject("zz-" TID "-" SID "-01", "version is not two lower-case hex");
    expect_reject("0A-" TID "-" SID "-01", "version is not two lower-case hex");
    expect_reject("ff-" TID "-" SID "-01", "version ff is invalid");
    expect_reject("00-" TID "-" SID "-01-", "version 00 is 55 characters, got 56");
    expect_reject("00-" TID "-" SID "-1", "version 00 is 55 characters, got 54");
    expect_reject("01-" TID "-" SID, "too short");
    expect_reject("01-" TID "-" SID "-01x", "extra fields must follow a '-'");
    expect_reject("00_" TID "-" SID "-01", "separated by '-'");
    expect_reject("00-" TID "_" SID "-01", "separated by '-'");
    expect_reject("00-" TID "-" SID "_01", "separated by '-'");
    expect_reject("00-4BF92F3577B34DA6A3CE929D0E0E4736-" SID "-01", "trace-id is not 32");
    expect_reject("00-4bf92f3577b34da6a3ce929d0e0e473g-" SID "-01", "trace-id is not 32");
    expect_reject("00-00000000000000000000000000000000-" SID "-01", "trace-id is all zeros");
    expect_reject("00-" TID "-00F067AA0BA902B7-01", "parent-id is not 16");
    expect_reject("00-" TID "-00f067aa0ba902 7-01", "parent-id is not 16");
    expect_reject("00-" TID "-0000000000000000-01", "parent-id is all zeros");
    expect_reject("00-" TID "-" SID "-0g", "trace-flags is not two");
    expect_reject("00-" TID "-" SID "-A1", "trace-flags is not two");
    /* a too-long trace-id shifts the separators */
    expect_reject("00-" TID "0-" SID "-1", "separated by '-'");
    /* err may be NULL */
    struct trace_ctx c;
    assert_int_equal(trace_parse_traceparent("garbage", &c, NULL, 0), -EINVAL);
}

static void test_random_ids(void **state)
{
    (void)state;
    uint8_t a[16], b[16];
    trace_random_bytes(a, sizeof a);
    trace_random_bytes(b, sizeof b);
    assert_memory_not_equal(a, b, sizeof a);
    char h[33];
    trace_hex(a, sizeof a, h);
    assert_int_equal(strlen(h), 32);
    assert_int_equal(strspn(h, "0123456789abcdef"), 32);
    assert_true(trace_now_unix_ns() > 1600000000LL * 1000000000LL);
}

static void test_sampler(void **state)
{
    (void)state;
    struct trace_sampler s;
    char err[256] = "";
    unsetenv("OTEL_TRACES_SAMPLER");
    unsetenv("OTEL_TRACES_SAMPLER_ARG");
    assert_int_equal(trace_sampler_from_env(&s, err, sizeof err), 0);
    assert_true(s.parent_based);
    assert_true(s.ratio == 1.0);

    setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio", 1);
    setenv("OTEL_TRACES_SAMPLER_ARG", "0.25", 1);
    assert_int_equal(trace_sampler_from_env(&s, err, sizeof err), 0);
    assert_true(s.parent_based);
    assert_true(s.ratio == 0.25);
    /* about a quarter of random trace ids */
    int kept = 0;
    for (int i = 0; i < 4000; i++) {
        uint8_t id[16];
        trace_random_bytes(id, sizeof id);
        kept += trace_sampler_keep(&s, id);
    }
    assert_in_range(kept, 800, 1200);

    setenv("OTEL_TRACES_SAMPLER_ARG", "1.5", 1);
    assert_int_equal(trace_sampler_from_env(&s, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "OTEL_TRACES_SAMPLER_ARG"));
    setenv("OTEL_TRACES_SAMPLER_ARG", "abc", 1);
    assert_int_equal(trace_sampler_from_env(&s, err, sizeof err), -EINVAL);

    setenv("OTEL_TRACES_SAMPLER", "always_off", 1);
    assert_int_equal(trace_sampler_from_env(&s, err, sizeof err), 0);
    assert_false(s.parent_based);
    assert_true(s.ratio == 0);
    setenv("OTEL_TRACES_SAMPLER", "sometimes", 1);
    assert_int_equal(trace_sampler_from_env(&s, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "OTEL_TRACES_SAMPLER"));
    unsetenv("OTEL_TRACES_SAMPLER");
    unsetenv("OTEL_TRACES_SAMPLER_ARG");
}

/* Tracing off (no tracer): nothing is recorded, everything accepts NULL, and an incoming context
 * still travels on. */
static void test_off(void **state)
{
    (void)state;
    struct trace_ctx in;
    struct span *s = trace_server_span(NULL, "x", "00-" TID "-" SID "-01", &in);
    assert_null(s);
    assert_true(in.valid);
    span_set_str(s, "k", "v");
    span_set_int(s, "k", 1);
    span_set_double(s, "k", 1.5);
    span_set_bool(s, "k", true);
    assert_int_equal(span_add_event(s, "e"), -1);
    span_event_set_int(s, 0, "k", 1);
    span_set_status(s, SPAN_STATUS_ERROR, "x");
    assert_null(span_child(s, "c", SPAN_KIND_CLIENT));
    char tp[TRACEPARENT_LEN + 1], tid[33];
    assert_int_equal(span_traceparent(s, &in, tp), 0);
    assert_string_equal(tp, "00-" TID "-" SID "-01");
    span_trace_id_hex(s, tid);
    assert_string_equal(tid, "");
    struct span *r = trace_server_span(NULL, "x", "not a traceparent", &in);
    assert_null(r);
    assert_false(in.valid);
    assert_int_equal(span_traceparent(NULL, &in, tp), -ENOENT);
    assert_int_equal(span_traceparent(NULL, NULL, tp), -ENOENT);
    span_end(s);
    span_discard(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid), cmocka_unit_test(test_parse_reject),
        cmocka_unit_test(test_random_ids),  cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
