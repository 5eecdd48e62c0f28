/* Unit tests for lib/otlp: the OTLP JSON of a span tree (read back with json-c), the queue's bound,
 * sampling through a tracer, attribute limits, a real export to a collector on loopback (headers
 * included), a failing collector, and endpoint resolution from the flag and the environment. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>
#include <uv.h>

#include "lib/buf.h"
#include "lib/http_server.h"
#include "lib/json.h"
#include "lib/otlp.h"
#include "lib/trace.h"

#define DEAD_URL "http://127.0.0.1:1/v1/traces"

static struct otlp_exporter *new_exporter(const char *url, size_t max_queue, const char *headers)
{
    struct otlp_config c = {.url = url, .max_queue = max_queue, .headers = headers};
    c.sampler.parent_based = true;
    c.sampler.ratio = 1;
    char err[256] = "";
    struct otlp_exporter *x = otlp_exporter_new(&c, err, sizeof err);
    if (!x) {
        fail_msg("otlp_exporter_new: %s", err);
    }
    return x;
}

static struct json_object *take(struct otlp_exporter *x, int want)
{
    struct buf b;
    buf_init(&b, 16 << 20);
    assert_int_equal(otlp_exporter_take_json(x, 100, &b), want);
    char err[256] = "";
    struct json_object *o = json_parse(b.data, b.len, err, sizeof err);
    if (!o) {
        fail_msg("not JSON: %s: %s", err, b.data);
    }
    buf_free(&b);
    return o;
}

/* The span named name in the request (any resource), and its service. */
static struct json_object *find_span(struct json_object *req, const char *name,
                                     const char **service)
{
    struct json_object *rss = json_get(req, "resourceSpans");
    for (size_t i = 0; i < json_object_array_length(rss); i++) {
        struct json_object *rs = json_object_array_get_idx(rss, i);
        struct json_object *spans = json_get(rs, "scopeSpans[0].spans");
        for (size_t k = 0; spans && k < json_object_array_length(spans); k++) {
            struct json_object *s = json_object_array_get_idx(spans, k);
            if (strcmp(json_object_get_string(json_get(s, "name")), name) == 0) {
                if (service) {
                    struct json_object *a0 = json_get(rs, "resource.attributes[0]");
                    assert_string_equal(json_object_get_string(json_get(a0, "key")),
                                        "service.name");
                    *service = json_object_get_string(json_get(a0, "value.stringValue"));
                }
                return s;
            }
        }
    }
    fail_msg("no span %s", name);
    return NULL;
}

/* The value object of attribute key of a span or event. */
static struct json_object *attr(struct json_object *s, const char *key)
{
    struct json_object *a = json_get(s, "attributes");
    for (size_t i = 0; a && i < json_object_array_length(a); i++) {
        struct json_object *kv = json_object_array_get_idx(a, i);
        if (strcmp(json_object_get_string(json_get(kv, "key")), key) == 0) {
            return json_get(kv, "value");
        }
    }
    return NULL;
}

static int64_t nanos_of(struct json_object *s, const char *field)
{
    struct json_object *v = json_get(s, field);
    assert_true(json_object_is_type(v, json_type_string)); /* decimal strings */
    return strtoll(json_object_get_string(v), NULL, 10);
}

static void test_encode_tree(void **state)
{
    (void)state;
    struct otlp_exporter *x = new_exporter(DEAD_URL, 64, NULL);
    struct tracer *ta = otlp_tracer(x, "svc-a", "1.2.3"), *tb = otlp_tracer(x, "svc-b", NULL);
    assert_non_null(ta);
    assert_ptr_equal(otlp_tracer(x, "svc-a", "9"), ta);
    struct trace_ctx in;
    struct span *root = trace_server_span(
        ta, "POST /v1/completions", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &in);
    assert_non_null(root);
    span_set_str(root, "s", "text \"quoted\"\n");
    span_set_int(root, "i", -42);
    span_set_double(root, "d", 0.5);
    span_set_bool(root, "b", true);
    span_set_double(root, "nan", NAN);
    span_set_int(root, "i", 43); /* replaces */
    struct span *child = span_child(root, "schedule", SPAN_KIND_INTERNAL);
    int ev = span_add_event(child, "first_token");
    span_event_set_int(child, ev, "n", 7);
    span_event_set_double(child, ev, "ttft", 0.25);
    span_end(child);
    struct trace_ctx rc;
    span_context(root, &rc);
    struct span *other = span_start(tb, "prefill", SPAN_KIND_CLIENT, &rc);
    span_set_status(other, SPAN_STATUS_ERROR, "prefill-unreachable");
    span_set_status(other, SPAN_STATUS_OK, NULL); /* does not undo the error */
    span_end(other);
    char tid[33];
    span_trace_id_hex(root, tid);
    assert_string_equal(tid, "4bf92f3577b34da6a3ce929d0e0e4736");
    span_end(root);

    struct json_object *req = take(x, 3);
    assert_int_equal(json_object_array_length(json_get(req, "resourceSpans")), 2);
    const char *svc = NULL;
    struct json_object *r = find_span(req, "POST /v1/completions", &svc);
    assert_string_equal(svc, "svc-a");
    struct json_object *c = find_span(req, "schedule", &svc);
    assert_string_equal(svc, "svc-a");
    struct json_object *o = find_span(req, "prefill", &svc);
    assert_string_equal(svc, "svc-b");
    /* the resource and the scope */
    struct json_object *rs0 = json_get(req, "resourceSpans[0]");
    assert_string_equal(
        json_object_get_string(json_get(rs0, "resource.attributes[1].value.stringValue")),
        strcmp(json_object_get_string(json_get(rs0, "resource.attributes[0].value.stringValue")),
               "svc-a") == 0
            ? "1.2.3"
            : TANDEM_VERSION);
    assert_string_equal(json_object_get_string(json_get(rs0, "scopeSpans[0].scope.name")),
                        "tandem");
    /* ids, parents, kinds */
    const char *trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    assert_string_equal(json_object_get_string(json_get(r, "traceId")), trace);
    assert_string_equal(json_object_get_string(json_get(c, "traceId")), trace);
    assert_string_equal(json_object_get_string(json_get(o, "traceId")), trace);
    assert_string_equal(json_object_get_string(json_get(r, "parentSpanId")), "00f067aa0ba902b7");
    const char *rid = json_object_get_string(json_get(r, "spanId"));
    assert_int_equal(strlen(rid), 16);
    assert_string_equal(json_object_get_string(json_get(c, "parentSpanId")), rid);
    assert_string_equal(json_object_get_string(json_get(o, "parentSpanId")), rid);
    assert_int_equal(json_object_get_int(json_get(r, "kind")), 2);
    assert_int_equal(json_object_get_int(json_get(c, "kind")), 1);
    assert_int_equal(json_object_get_int(json_get(o, "kind")), 3);
    /* times: decimal strings, ordered and nested */
    int64_t rs = nanos_of(r, "startTimeUnixNano"), re = nanos_of(r, "endTimeUnixNano");
    int64_t cs = nanos_of(c, "startTimeUnixNano"), ce = nanos_of(c, "endTimeUnixNano");
    assert_true(rs > 1600000000LL * 1000000000LL);
    assert_true(rs <= cs && cs <= ce && ce <= re);
    /* typed attribute values */
    assert_string_equal(json_object_get_string(json_get(attr(r, "s"), "stringValue")),
                        "text \"quoted\"\n");
    struct json_object *iv = json_get(attr(r, "i"), "intValue");
    assert_true(json_object_is_type(iv, json_type_string));
    assert_string_equal(json_object_get_string(iv), "43");
    assert_true(json_object_get_double(json_get(attr(r, "d"), "doubleValue")) == 0.5);
    assert_true(json_object_get_boolean(json_get(attr(r, "b"), "boolValue")));
    assert_string_equal(json_object_get_string(json_get(attr(r, "nan"), "stringValue")), "NaN");
    assert_int_equal(json_object_array_length(json_get(r, "attributes")), 5);
    /* the event */
    struct json_object *e = json_get(c, "events[0]");
    assert_string_equal(json_object_get_string(json_get(e, "name")), "first_token");
    int64_t et = nanos_of(e, "timeUnixNano");
    assert_true(cs <= et && et <= ce);
    assert_string_equal(json_object_get_string(json_get(attr(e, "n"), "intValue")), "7");
    assert_true(json_object_get_double(json_get(attr(e, "ttft"), "doubleValue")) == 0.25);
    /* status */
    assert_int_equal(json_object_get_int(json_get(o, "status.code")), 2);
    assert_string_equal(json_object_get_string(json_get(o, "status.message")),
                        "prefill-unreachable");
    assert_int_equal(json_object_get_int(json_get(r, "status.code")), 0);
    json_object_put(req);
    otlp_exporter_free(x);
}

static void test_limits(void **state)
{
    (void)state;
    struct otlp_exporter *x = new_exporter(DEAD_URL, 64, NULL);
    struct tracer *t = otlp_tracer(x, "svc", NULL);
    struct span *s = span_start(t, "limits", SPAN_KIND_INTERNAL, NULL);
    char key[32];
    for (int i = 0; i < SPAN_MAX_ATTRS + 8; i++) {
        snprintf(key, sizeof key, "k%d", i);
        span_set_int(s, key, i);
    }
    span_set_int(s, "k0", 100); /* an existing key is still updated */
    char *big = malloc(5000);
    memset(big, 'x', 4999);
    big[4999] = '\0';
    span_set_str(s, "k1", big);
    free(big);
    for (int i = 0; i < SPAN_MAX_EVENTS + 3; i++) {
        assert_int_equal(span_add_event(s, "e"), i < SPAN_MAX_EVENTS ? i : -1);
    }
    span_end_at(s, 1); /* before its start: clamped */
    struct json_object *req = take(x, 1);
    struct json_object *sp = find_span(req, "limits", NULL);
    assert_int_equal(json_object_array_length(json_get(sp, "attributes")), SPAN_MAX_ATTRS);
    assert_int_equal(json_object_get_int(json_get(sp, "droppedAttributesCount")), 8);
    assert_string_equal(json_object_get_string(json_get(attr(sp, "k0"), "intValue")), "100");
    assert_int_equal(strlen(json_object_get_string(json_get(attr(sp, "k1"), "stringValue"))),
                     SPAN_MAX_VALUE);
    assert_int_equal(json_object_array_length(json_get(sp, "events")), SPAN_MAX_EVENTS);
    assert_int_equal(json_object_get_int(json_get(sp, "droppedEventsCount")), 3);
    assert_true(nanos_of(sp, "endTimeUnixNano") == nanos_of(sp, "startTimeUnixNano"));
    json_object_put(req);
    otlp_exporter_free(x);
}

static void test_queue_bound(void **state)
{
    (void)state;
    struct otlp_exporter *x = new_exporter(DEAD_URL, 4, NULL);
    struct tracer *t = otlp_tracer(x, "svc", NULL);
    for (int i = 0; i < 10; i++) {
        span_end(span_start(t, "s", SPAN_KIND_INTERNAL, NULL));
    }
    struct otlp_stats st;
    otlp_exporter_stats(x, &st);
    assert_int_equal(st.queued, 4);
    assert_int_equal(st.dropped, 6);
    assert_int_equal(st.queue_len, 4);
    struct json_object *req = take(x, 4);
    json_object_put(req);
    otlp_exporter_stats(x, &st);
    assert_int_equal(st.queue_len, 0);
    span_end(span_start(t, "s", SPAN_KIND_INTERNAL, NULL)); /* room again */
    otlp_exporter_stats(x, &st);
    assert_int_equal(st.queued, 5);
    otlp_exporter_free(x); /* frees what is still queued (ASan checks) */
}

static void test_sampling(void **state)
{
    (void)state;
    struct otlp_config c = {.url = DEAD_URL, .max_queue = 16};
    c.sampler.parent_based = true;
    c.sampler.ratio = 0; /* parentbased_always_off: roots off, sampled parents on */
    char err[256] = "";
    struct otlp_exporter *x = otlp_exporter_new(&c, err, sizeof err);
    assert_non_null(x);
    struct tracer *t = otlp_tracer(x, "svc", NULL);
    struct trace_ctx in;
    assert_null(trace_server_span(t, "root", NULL, &in));
    assert_null(trace_server_span(t, "unsampled",
                                  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", &in));
    char tp[TRACEPARENT_LEN + 1];
    assert_int_equal(span_traceparent(NULL, &in, tp), 0); /* still passed on, unsampled */
    assert_string_equal(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
    struct span *s = trace_server_span(
        t, "sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &in);
    assert_non_null(s);
    assert_int_equal(span_traceparent(s, &in, tp), 0);
    assert_memory_equal(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36);
    assert_string_not_equal(tp + 36, "00f067aa0ba902b7-01");
    assert_string_equal(tp + 52, "-01");
    span_discard(s);
    otlp_exporter_free(x);
}

/* ---- a collector on loopback ---- */

struct collector {
    int posts;
    int spans;
    char api_key[64];
    char content_type[64];
    int status; /* what it answers */
};

static void h_traces(struct http_request *req, void *ud)
{
    struct collector *c = ud;
    size_t len = 0;
    const char *body = http_request_body(req, &len);
    const char *k = http_request_header(req, "x-api-key");
    const char *ct = http_request_header(req, "content-type");
    snprintf(c->api_key, sizeof c->api_key, "%s", k ? k : "");
    snprintf(c->content_type, sizeof c->content_type, "%s", ct ? ct : "");
    struct json_object *o = json_parse(body, len, NULL, 0);
    struct json_object *rss = o ? json_get(o, "resourceSpans") : NULL;
    for (size_t i = 0; rss && i < json_object_array_length(rss); i++) {
        struct json_object *spans =
            json_get(json_object_array_get_idx(rss, i), "scopeSpans[0].spans");
        c->spans += spans ? (int)json_object_array_length(spans) : 0;
    }
    json_object_put(o);
    c->posts++;
    http_respond_json(req, c->status, "{}");
}

static void on_drained(struct http_server *srv, void *ud)
{
    (void)srv;
    *(int *)ud = 1;
}

/* Runs the loop until cond(ud) or ms pass. */
static int run_until(uv_loop_t *loop, int (*cond)(void *), void *ud, int ms)
{
    for (int i = 0; i < ms && !cond(ud); i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    return cond(ud);
}

static int three_spans(void *ud)
{
    return ((struct collector *)ud)->spans >= 3;
}

static int failed_batch(void *ud)
{
    struct otlp_stats st;
    otlp_exporter_stats(ud, &st);
    return st.batches_failed >= 1;
}

static void test_export(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct http_server_config hc;
    http_server_config_init(&hc);
    char err[256] = "";
    struct http_server *srv = http_server_new(&loop, &hc, err, sizeof err);
    assert_non_null(srv);
    struct collector col = {.status = 200};
    assert_int_equal(http_server_route(srv, "POST", "/v1/traces", 0, h_traces, &col), 0);
    assert_int_equal(http_server_start(srv, err, sizeof err), 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/traces", http_server_port(srv));

    struct otlp_config c = {.url = url, .headers = " x-api-key = a%20b , other=1", .flush_ms = 50};
    c.sampler.parent_based = true;
    c.sampler.ratio = 1;
    struct otlp_exporter *x = otlp_exporter_new(&c, err, sizeof err);
    assert_non_null(x);
    assert_int_equal(otlp_exporter_start(x, err, sizeof err), 0);
    struct tracer *t = otlp_tracer(x, "svc", NULL);
    struct span *root = span_start(t, "root", SPAN_KIND_SERVER, NULL);
    span_end(span_child(root, "a", SPAN_KIND_INTERNAL));
    span_end(span_child(root, "b", SPAN_KIND_CLIENT));
    span_end(root);
    assert_true(run_until(&loop, three_spans, &col, 5000));
    assert_string_equal(col.api_key, "a b");
    assert_string_equal(col.content_type, "application/json");
    otlp_exporter_free(x);

    /* a collector that refuses: the batch fails, is counted, and shutdown does not hang */
    col.status = 503;
    x = otlp_exporter_new(&c, err, sizeof err);
    assert_non_null(x);
    assert_int_equal(otlp_exporter_start(x, err, sizeof err), 0);
    t = otlp_tracer(x, "svc", NULL);
    span_end(span_start(t, "refused", SPAN_KIND_SERVER, NULL));
    assert_true(run_until(&loop, failed_batch, x, 5000));
    struct otlp_stats st;
    otlp_exporter_stats(x, &st);
    assert_int_equal(st.failed, 1);
    assert_int_equal(st.exported, 0);
    otlp_exporter_free(x);

    int drained = 0;
    assert_int_equal(http_server_drain(srv, 0, on_drained, &drained), 0);
    for (int i = 0; i < 3000 && !drained; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    assert_true(drained);
    http_server_free(srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Nothing listens: connection refused, counted, and freeing returns promptly. */
static void test_unreachable(void **state)
{
    (void)state;
    struct otlp_config c = {.url = DEAD_URL, .flush_ms = 20, .timeout_ms = 2000};
    c.sampler.ratio = 1;
    char err[256] = "";
    struct otlp_exporter *x = otlp_exporter_new(&c, err, sizeof err);
    assert_non_null(x);
    assert_int_equal(otlp_exporter_start(x, err, sizeof err), 0);
    struct tracer *t = otlp_tracer(x, "svc", NULL);
    span_end(span_start(t, "lost", SPAN_KIND_SERVER, NULL));
    int ok = 0;
    for (int i = 0; i < 5000 && !ok; i++) {
        ok = failed_batch(x);
        usleep(1000);
    }
    assert_true(ok);
    span_end(span_start(t, "at-exit", SPAN_KIND_SERVER, NULL));
    otlp_exporter_free(x);
}

static void test_bad_config(void **state)
{
    (void)state;
    char err[256] = "";
    struct otlp_config c = {.url = "grpc://collector:4317"};
    assert_null(otlp_exporter_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "http:// or https://"));
    c.url = DEAD_URL;
    c.headers = "novalue";
    assert_null(otlp_exporter_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "key=value"));
    c.headers = "bad key=1";
    assert_null(otlp_exporter_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "not a header name"));
    c.headers = "k=a%0db";
    assert_null(otlp_exporter_new(&c, err, sizeof err));
    assert_non_null(strstr(err, "control bytes"));
}

static void test_endpoint_resolve(void **state)
{
    (void)state;
    char url[256], err[256] = "";
    unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    unsetenv("OTEL_SDK_DISABLED");
    assert_int_equal(otlp_endpoint_resolve(NULL, url, sizeof url, err, sizeof err), 0);
    assert_int_equal(otlp_endpoint_resolve("http://c:4318", url, sizeof url, err, sizeof err), 1);
    assert_string_equal(url, "http://c:4318/v1/traces");
    assert_int_equal(otlp_endpoint_resolve("http://c:4318/", url, sizeof url, err, sizeof err), 1);
    assert_string_equal(url, "http://c:4318/v1/traces");
    assert_int_equal(
        otlp_endpoint_resolve("https://c/otlp/v1/traces", url, sizeof url, err, sizeof err), 1);
    assert_string_equal(url, "https://c/otlp/v1/traces");
    assert_int_equal(otlp_endpoint_resolve("c:4317", url, sizeof url, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "--otlp-traces-endpoint"));

    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318/", 1);
    assert_int_equal(otlp_endpoint_resolve(NULL, url, sizeof url, err, sizeof err), 1);
    assert_string_equal(url, "http://base:4318/v1/traces");
    setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom", 1);
    assert_int_equal(otlp_endpoint_resolve(NULL, url, sizeof url, err, sizeof err), 1);
    assert_string_equal(url, "http://t:4318/custom"); /* as is */
    /* the flag wins */
    assert_int_equal(otlp_endpoint_resolve("http://f:1", url, sizeof url, err, sizeof err), 1);
    assert_string_equal(url, "http://f:1/v1/traces");
    setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://x", 1);
    assert_int_equal(otlp_endpoint_resolve(NULL, url, sizeof url, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
    setenv("OTEL_SDK_DISABLED", "true", 1);
    assert_int_equal(otlp_endpoint_resolve("http://f:1", url, sizeof url, err, sizeof err), 0);
    unsetenv("OTEL_SDK_DISABLED");
    unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");

    /* off: no exporter, no error */
    struct otlp_exporter *x = (struct otlp_exporter *)1;
    assert_int_equal(otlp_setup(NULL, NULL, &x, err, sizeof err), 0);
    assert_null(x);
    assert_int_equal(otlp_setup("nope", NULL, &x, err, sizeof err), -EINVAL);
    assert_null(x);

    setenv("OTEL_SERVICE_NAME", "renamed", 1);
    assert_string_equal(otlp_service_name("tandem-epp"), "renamed");
    setenv("OTEL_SERVICE_NAME", "", 1);
    assert_string_equal(otlp_service_name("tandem-epp"), "tandem-epp");
    unsetenv("OTEL_SERVICE_NAME");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_tree), cmocka_unit_test(test_limits),
        cmocka_unit_test(test_queue_bound), cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_export),      cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_bad_config),  cmocka_unit_test(test_endpoint_resolve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
