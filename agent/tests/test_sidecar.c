/* Unit tests for agent/sidecar.h: the llm-d pd-sidecar protocol against a fake engine and a fake
 * prefiller (lib/http_server on the same loop), driven by lib/http_client as the client: local
 * mode, the NIXL v2 prefill-leg rewrite, the decode leg, fallbacks, 4xx pass-through, SSRF,
 * request ids, timeouts, the reverse proxy and client disconnects. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "agent/sidecar.h"
#include "lib/http_client.h"
#include "lib/http_server.h"
#include "lib/json.h"
#include "lib/metrics.h"

/* ---- fakes ---- */

/* What a fake upstream saw and how it answers. */
struct upstream {
    struct http_server *srv;
    int port;
    int requests;
    char path[128];
    char rid[128];
    struct json_object *last; /* the last body */
    int status;               /* answer status (200) */
    const char *answer;       /* answer body (JSON) */
    int sse;                  /* answer as SSE chunks instead */
    int hang;                 /* never answer (until aborted) */
    int aborted;
};

static uv_loop_t loop;
static struct upstream engine_up, prefill_up;
static struct http_server *sidecar_srv;
static struct sidecar *sc;
static struct metrics_registry *reg;
static struct http_client *cli;
static int allow_calls;
static int allow_result;

static void up_abort(struct http_request *req, void *ud, const char *reason)
{
    (void)req;
    (void)reason;
    ((struct upstream *)ud)->aborted++;
}

static void up_handle(struct http_request *req, void *ud)
{
    struct upstream *u = ud;
    u->requests++;
    snprintf(u->path, sizeof u->path, "%s", http_request_target(req));
    const char *rid = http_request_header(req, "x-request-id");
    snprintf(u->rid, sizeof u->rid, "%s", rid ? rid : "");
    size_t len = 0;
    const char *body = http_request_body(req, &len);
    json_object_put(u->last);
    char err[128];
    u->last = len ? json_parse(body, len, err, sizeof err) : NULL;
    if (u->hang) {
        http_request_on_abort(req, up_abort, u);
        return;
    }
    if (u->sse) {
        http_stream_start(req, 200, "text/event-stream");
        http_stream_send(req, "data: {\"a\":1}\n\n", 15);
        http_stream_send(req, "data: {\"a\":2}\n\n", 15);
        http_stream_send(req, "data: [DONE]\n\n", 14);
        http_stream_end(req);
        return;
    }
    http_respond_json(req, u->status ? u->status : 200, u->answer ? u->answer : "{}");
}

static int start_server(struct http_server **out, int *port, http_handler_fn fn, void *ud)
{
    struct http_server_config c;
    char err[256];
    http_server_config_init(&c);
    c.probe_ms = 20;
    *out = http_server_new(&loop, &c, err, sizeof err);
    if (!*out || http_server_route(*out, NULL, "/", 1, fn, ud) != 0 ||
        http_server_start(*out, err, sizeof err) != 0) {
        return -1;
    }
    *port = http_server_port(*out);
    return 0;
}

static bool allow_fn(void *ud, const char *host)
{
    (void)ud;
    (void)host;
    allow_calls++;
    return allow_result;
}

static int setup(void **state)
{
    (void)state;
    memset(&engine_up, 0, sizeof engine_up);
    memset(&prefill_up, 0, sizeof prefill_up);
    allow_calls = 0;
    allow_result = 1;
    uv_loop_init(&loop);
    reg = metrics_registry_new();
    if (start_server(&engine_up.srv, &engine_up.port, up_handle, &engine_up) != 0 ||
        start_server(&prefill_up.srv, &prefill_up.port, up_handle, &prefill_up) != 0) {
        return -1;
    }
    struct http_server_config c;
    char err[256], url[64];
    http_server_config_init(&c);
    c.probe_ms = 20;
    c.metrics = reg;
    c.metrics_prefix = "tandem_agent_";
    c.metrics_path = "/metrics";
    sidecar_srv = http_server_new(&loop, &c, err, sizeof err);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", engine_up.port);
    struct sidecar_config sc_cfg = {
        .engine_url = url,
        .self_host = "127.0.0.1:8000",
        .allow = allow_fn,
        .prefill_timeout_ms = 2000,
        .metrics = reg,
    };
    sc = sidecar_srv ? sidecar_new(&loop, sidecar_srv, &sc_cfg, err, sizeof err) : NULL;
    if (!sc || http_server_start(sidecar_srv, err, sizeof err) != 0) {
        return -1;
    }
    cli = http_client_new(&loop, err, sizeof err);
    return cli ? 0 : -1;
}

static void on_drained(struct http_server *srv, void *ud)
{
    (void)srv;
    (*(int *)ud)++;
}

static int teardown(void **state)
{
    (void)state;
    int drained = 0;
    http_client_free(cli);
    http_server_drain(sidecar_srv, 0, on_drained, &drained);
    http_server_drain(engine_up.srv, 0, on_drained, &drained);
    http_server_drain(prefill_up.srv, 0, on_drained, &drained);
    for (int i = 0; i < 1000 && drained < 3; i++) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    sidecar_free(sc);
    uv_run(&loop, UV_RUN_DEFAULT);
    http_server_free(sidecar_srv);
    http_server_free(engine_up.srv);
    http_server_free(prefill_up.srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    metrics_registry_free(reg);
    json_object_put(engine_up.last);
    json_object_put(prefill_up.last);
    return 0;
}

/* ---- the client ---- */

struct call {
    int done;
    struct http_response resp;
};

static void call_done(void *ud, struct http_response *resp)
{
    struct call *c = ud;
    http_response_move(&c->resp, resp);
    c->done = 1;
}

static void on_guard(uv_timer_t *t)
{
    *(int *)t->data = 1;
}

static void run_until(const int *flag, uint64_t ms)
{
    uv_timer_t guard;
    int expired = 0;
    uv_timer_init(&loop, &guard);
    guard.data = &expired;
    uv_timer_start(&guard, on_guard, ms, 0);
    while (!*flag && !expired) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
}

/* POSTs body to the sidecar's path with extra headers (NULL-terminated); waits for the answer. */
static void post(struct call *c, const char *path, const char *body, const char *const *headers)
{
    char url[256], err[256];
    memset(c, 0, sizeof *c);
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", http_server_port(sidecar_srv), path);
    const char *h[16];
    size_t n = 0;
    h[n++] = "Content-Type: application/json";
    for (const char *const *p = headers; p && *p && n < 15; p++) {
        h[n++] = *p;
    }
    h[n] = NULL;
    struct http_client_opts o = {
        .method = body ? "POST" : "GET",
        .url = url,
        .headers = h,
        .body = body,
        .body_len = body ? strlen(body) : 0,
        .timeout_ms = 5000,
        .on_done = call_done,
        .ud = c,
    };
    assert_non_null(http_client_start(cli, &o, err, sizeof err));
    run_until(&c->done, 6000);
    assert_true(c->done);
}

static const char *hdr(struct call *c, const char *name)
{
    static char v[256];
    return http_response_header(&c->resp, name, v, sizeof v);
}

static int jbool(struct json_object *o, const char *path)
{
    struct json_object *v = json_get(o, path);
    return v && json_object_get_boolean(v);
}

static int jnull(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    return json_object_object_get_ex(o, key, &v) && v == NULL;
}

static double metric(const char *name)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    metrics_render(reg, &b);
    double v = -1;
    const char *p = b.data;
    size_t n = strlen(name);
    while (p && (p = strstr(p, name)) != NULL) {
        if ((p == b.data || p[-1] == '\n') && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
        p += n;
    }
    buf_free(&b);
    return v;
}

/* ---- tests ---- */

static void test_parse_helpers(void **state)
{
    (void)state;
    long ms = 0;
    assert_int_equal(sidecar_parse_timeout("30", &ms), 0);
    assert_int_equal(ms, 30000);
    assert_int_equal(sidecar_parse_timeout("1.5s", &ms), 0);
    assert_int_equal(ms, 1500);
    assert_int_equal(sidecar_parse_timeout("500ms", &ms), 0);
    assert_int_equal(ms, 500);
    assert_int_equal(sidecar_parse_timeout("2m", &ms), 0);
    assert_int_equal(ms, 120000);
    const char *bad_to[] = {"", "x", "-1", "0", "5h", "1e99", "10 s", "0.0001ms"};
    for (size_t i = 0; i < ARRAY_SIZE(bad_to); i++) {
        assert_int_equal(sidecar_parse_timeout(bad_to[i], &ms), -EINVAL);
    }
    char hp[256], host[256];
    assert_int_equal(sidecar_parse_prefiller("10.0.0.7:8000", hp, sizeof hp, host, sizeof host), 0);
    assert_string_equal(hp, "10.0.0.7:8000");
    assert_string_equal(host, "10.0.0.7");
    assert_int_equal(
        sidecar_parse_prefiller("10.0.0.8:8000,10.0.0.9:8000", hp, sizeof hp, host, sizeof host),
        0);
    assert_string_equal(hp, "10.0.0.8:8000");
    assert_int_equal(sidecar_parse_prefiller("[fd00::1]:8000", hp, sizeof hp, host, sizeof host),
                     0);
    assert_string_equal(host, "fd00::1");
    assert_int_equal(
        sidecar_parse_prefiller("http://pod-a.ns:8000/x", hp, sizeof hp, host, sizeof host), 0);
    assert_string_equal(hp, "pod-a.ns:8000");
    assert_string_equal(host, "pod-a.ns");
    const char *bad[] = {
        "",          "10.0.0.7", "10.0.0.7:",   ":8000", "a:b:8000",   "10.0.0.7:99999",
        "[fd00::1]", "h@x:80",   "10.0.0.7:8x", "[]:80", "fd00::1:80", "http://"};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        if (sidecar_parse_prefiller(bad[i], hp, sizeof hp, host, sizeof host) != -EINVAL) {
            fail_msg("'%s' was accepted", bad[i]);
        }
    }
}

static void test_local_mode(void **state)
{
    (void)state;
    struct call c;
    engine_up.answer = "{\"id\":\"cmpl-1\",\"choices\":[]}";
    const char *h[] = {"x-request-id: my-id-1", NULL};
    post(&c, "/v1/completions?x=1", "{\"prompt\":\"hi\",\"max_tokens\":3}", h);
    assert_int_equal(c.resp.status, 200);
    assert_int_equal(engine_up.requests, 1);
    assert_int_equal(prefill_up.requests, 0);
    assert_string_equal(engine_up.path, "/v1/completions?x=1");
    assert_string_equal(engine_up.rid, "my-id-1"); /* kept */
    assert_string_equal(hdr(&c, "x-request-id"), "my-id-1");
    assert_null(hdr(&c, "x-tandem-prefill-host"));
    assert_non_null(strstr(c.resp.body.data, "cmpl-1"));
    assert_non_null(engine_up.last);
    assert_int_equal(json_object_get_int(json_get(engine_up.last, "max_tokens")), 3);
    http_response_free(&c.resp);

    /* no id: one is created (a UUID) and sent upstream */
    post(&c, "/v1/chat/completions", "{\"messages\":[]}", NULL);
    assert_int_equal(c.resp.status, 200);
    assert_int_equal(strlen(engine_up.rid), 36);
    assert_string_equal(hdr(&c, "x-request-id"), engine_up.rid);
    http_response_free(&c.resp);
    assert_true(metric("llmd_sidecar_decode_requests_total") == 2);
    assert_true(metric("llmd_sidecar_requests_total{status=\"success\"}") == 2);
}

static void test_local_sse_passthrough(void **state)
{
    (void)state;
    struct call c;
    engine_up.sse = 1;
    post(&c, "/v1/completions", "{\"prompt\":\"hi\",\"stream\":true}", NULL);
    assert_int_equal(c.resp.status, 200);
    assert_non_null(strstr(hdr(&c, "content-type"), "text/event-stream"));
    assert_string_equal(c.resp.body.data, "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n");
    http_response_free(&c.resp);
}

static void test_pd_rewrite(void **state)
{
    (void)state;
    struct call c;
    char hp[64];
    snprintf(hp, sizeof hp, "x-prefiller-host-port: 127.0.0.1:%d", prefill_up.port);
    prefill_up.answer =
        "{\"id\":\"p\",\"kv_transfer_params\":{\"do_remote_prefill\":true,\"do_remote_decode\":"
        "false,\"remote_engine_id\":\"eng-1\",\"remote_block_ids\":[1,2,3],\"remote_request_id\":"
        "\"r1\",\"remote_host\":\"127.0.0.9\",\"remote_port\":5600,\"tp_size\":1}}";
    engine_up.sse = 1;
    const char *h[] = {hp, "x-request-id: pd-1", NULL};
    post(&c, "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
         "\"stream_options\":{\"include_usage\":true},\"max_tokens\":50,\"temperature\":0}",
         h);
    assert_int_equal(c.resp.status, 200);
    /* the prefill leg */
    assert_int_equal(prefill_up.requests, 1);
    assert_string_equal(prefill_up.path, "/v1/chat/completions");
    assert_string_equal(prefill_up.rid, "pd-1");
    struct json_object *p = prefill_up.last;
    assert_non_null(p);
    assert_false(jbool(p, "stream"));
    assert_null(json_get(p, "stream_options"));
    assert_int_equal(json_object_get_int(json_get(p, "max_tokens")), 1);
    assert_int_equal(json_object_get_int(json_get(p, "max_completion_tokens")), 1);
    struct json_object *kv = json_get(p, "kv_transfer_params");
    assert_non_null(kv);
    assert_true(jbool(kv, "do_remote_decode"));
    assert_false(jbool(kv, "do_remote_prefill"));
    assert_true(jnull(kv, "remote_engine_id") && jnull(kv, "remote_block_ids") &&
                jnull(kv, "remote_host") && jnull(kv, "remote_port"));
    assert_float_equal(json_object_get_double(json_get(p, "temperature")), 0, 0);
    /* the decode leg: the original body plus the prefiller's kv_transfer_params */
    struct json_object *d = engine_up.last;
    assert_non_null(d);
    assert_true(jbool(d, "stream"));
    assert_true(jbool(d, "stream_options.include_usage"));
    assert_int_equal(json_object_get_int(json_get(d, "max_tokens")), 50);
    assert_null(json_get(d, "max_completion_tokens"));
    assert_true(jbool(d, "kv_transfer_params.do_remote_prefill"));
    assert_string_equal(json_object_get_string(json_get(d, "kv_transfer_params.remote_engine_id")),
                        "eng-1");
    assert_int_equal(json_object_array_length(json_get(d, "kv_transfer_params.remote_block_ids")),
                     3);
    assert_string_equal(engine_up.rid, "pd-1");
    /* the answer streams back and names both pods */
    assert_non_null(strstr(c.resp.body.data, "[DONE]"));
    assert_string_equal(hdr(&c, "x-tandem-prefill-host"), hp + strlen("x-prefiller-host-port: "));
    assert_string_equal(hdr(&c, "x-tandem-decode-host"), "127.0.0.1:8000");
    assert_null(hdr(&c, "x-tandem-pd-fallback"));
    assert_int_equal(allow_calls, 1);
    assert_true(metric("llmd_sidecar_prefill_requests_total") == 1);
    http_response_free(&c.resp);
}

static void pd_post(struct call *c, int port, const char *body)
{
    char hp[64];
    snprintf(hp, sizeof hp, "x-prefiller-host-port: 127.0.0.1:%d", port);
    const char *h[] = {hp, NULL};
    post(c, "/v1/completions", body, h);
}

static void test_pd_fallbacks(void **state)
{
    (void)state;
    struct call c;
    /* 5xx from the prefiller: local prefill, named in a header */
    prefill_up.status = 503;
    prefill_up.answer = "{\"error\":{\"message\":\"busy\"}}";
    pd_post(&c, prefill_up.port, "{\"prompt\":\"hi\",\"kv_transfer_params\":{\"x\":1}}");
    assert_int_equal(c.resp.status, 200);
    assert_int_equal(prefill_up.requests, 1);
    assert_int_equal(engine_up.requests, 1);
    assert_string_equal(hdr(&c, "x-tandem-pd-fallback"), "prefill-error");
    assert_null(json_get(engine_up.last, "kv_transfer_params")); /* the engine prefills itself */
    http_response_free(&c.resp);

    /* 200 without kv_transfer_params */
    prefill_up.status = 200;
    prefill_up.answer = "{\"id\":\"p\"}";
    pd_post(&c, prefill_up.port, "{\"prompt\":\"hi\"}");
    assert_int_equal(c.resp.status, 200);
    assert_string_equal(hdr(&c, "x-tandem-pd-fallback"), "no-kv-transfer-params");
    http_response_free(&c.resp);

    /* nobody listens there */
    int dead_port = prefill_up.port;
    struct http_server *tmp = NULL;
    int tmp_port = 0;
    assert_int_equal(start_server(&tmp, &tmp_port, up_handle, &prefill_up), 0);
    int drained = 0;
    http_server_drain(tmp, 0, on_drained, &drained);
    run_until(&drained, 2000);
    http_server_free(tmp);
    pd_post(&c, tmp_port, "{\"prompt\":\"hi\"}");
    assert_int_equal(c.resp.status, 200);
    assert_string_equal(hdr(&c, "x-tandem-pd-fallback"), "prefill-unreachable");
    http_response_free(&c.resp);
    (void)dead_port;

    /* a prefiller that never answers: bounded by x-request-timeout */
    prefill_up.hang = 1;
    char hp[64];
    snprintf(hp, sizeof hp, "x-prefiller-host-port: 127.0.0.1:%d", prefill_up.port);
    const char *h[] = {hp, "x-request-timeout: 1s", NULL};
    post(&c, "/v1/completions", "{\"prompt\":\"hi\"}", h);
    /* the whole request had 1 s: the prefill leg half of it, the decode leg the rest */
    assert_non_null(hdr(&c, "x-tandem-pd-fallback"));
    assert_string_equal(hdr(&c, "x-tandem-pd-fallback"), "prefill-timeout");
    http_response_free(&c.resp);
    prefill_up.hang = 0;
    assert_true(metric("tandem_agent_prefill_fallbacks_total{reason=\"prefill-error\"}") == 1);
    assert_true(metric("llmd_sidecar_connection_errors_total") >= 2);
}

static void test_pd_client_errors(void **state)
{
    (void)state;
    struct call c;
    /* a 4xx from the prefiller is the client's answer; no decode leg */
    prefill_up.status = 400;
    prefill_up.answer = "{\"error\":{\"message\":\"'temperature' must be non-negative\"}}";
    pd_post(&c, prefill_up.port, "{\"prompt\":\"hi\",\"temperature\":-1}");
    assert_int_equal(c.resp.status, 400);
    assert_non_null(strstr(c.resp.body.data, "non-negative"));
    assert_int_equal(engine_up.requests, 0);
    http_response_free(&c.resp);

    /* a body that is not a JSON object */
    pd_post(&c, prefill_up.port, "[1,2]");
    assert_int_equal(c.resp.status, 400);
    assert_int_equal(prefill_up.requests, 1); /* nothing new sent */
    http_response_free(&c.resp);

    /* a malformed header */
    const char *h[] = {"x-prefiller-host-port: nonsense", NULL};
    post(&c, "/v1/completions", "{\"prompt\":\"hi\"}", h);
    assert_int_equal(c.resp.status, 400);
    assert_non_null(strstr(c.resp.body.data, "x-prefiller-host-port"));
    http_response_free(&c.resp);

    /* a bad x-request-timeout */
    const char *h2[] = {"x-request-timeout: soon", NULL};
    post(&c, "/v1/completions", "{\"prompt\":\"hi\"}", h2);
    assert_int_equal(c.resp.status, 400);
    http_response_free(&c.resp);
    assert_int_equal(engine_up.requests, 0);
}

static void test_ssrf_blocked(void **state)
{
    (void)state;
    struct call c;
    allow_result = 0;
    pd_post(&c, prefill_up.port, "{\"prompt\":\"hi\"}");
    assert_int_equal(c.resp.status, 403);
    assert_non_null(strstr(c.resp.body.data, "SSRF"));
    assert_int_equal(prefill_up.requests, 0); /* no connection made */
    assert_int_equal(engine_up.requests, 0);
    assert_true(metric("llmd_sidecar_ssrf_blocked_requests_total") == 1);
    http_response_free(&c.resp);
}

static void test_proxy_and_engine_down(void **state)
{
    (void)state;
    struct call c;
    engine_up.answer = "{\"object\":\"list\",\"data\":[]}";
    post(&c, "/v1/models", NULL, NULL);
    assert_int_equal(c.resp.status, 200);
    assert_string_equal(engine_up.path, "/v1/models");
    assert_non_null(strstr(c.resp.body.data, "\"list\""));
    http_response_free(&c.resp);

    /* /metrics is the agent's own */
    post(&c, "/metrics", NULL, NULL);
    assert_int_equal(c.resp.status, 200);
    assert_non_null(strstr(c.resp.body.data, "llmd_sidecar_requests_total"));
    assert_int_equal(engine_up.requests, 1);
    http_response_free(&c.resp);

    /* the engine gone: 502 with a JSON error */
    int drained = 0;
    http_server_drain(engine_up.srv, 0, on_drained, &drained);
    run_until(&drained, 2000);
    post(&c, "/v1/completions", "{\"prompt\":\"hi\"}", NULL);
    assert_int_equal(c.resp.status, 502);
    assert_non_null(strstr(c.resp.body.data, "\"error\""));
    http_response_free(&c.resp);
    /* restart a server for teardown's drain */
    http_server_free(engine_up.srv);
    assert_int_equal(start_server(&engine_up.srv, &engine_up.port, up_handle, &engine_up), 0);
}

static void on_cancel_timer(uv_timer_t *t)
{
    http_client_cancel(t->data);
}

static void test_client_disconnect_aborts_upstream(void **state)
{
    (void)state;
    engine_up.hang = 1;
    char url[128], err[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", http_server_port(sidecar_srv));
    struct call c;
    memset(&c, 0, sizeof c);
    struct http_client_opts o = {
        .url = url,
        .body = "{\"prompt\":\"hi\"}",
        .body_len = 15,
        .on_done = call_done,
        .ud = &c,
    };
    struct http_client_req *r = http_client_start(cli, &o, err, sizeof err);
    assert_non_null(r);
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    t.data = r;
    uv_timer_start(&t, on_cancel_timer, 100, 0);
    run_until(&engine_up.aborted, 3000);
    assert_int_equal(engine_up.aborted, 1); /* the engine learns the client went away */
    assert_int_equal(sidecar_in_flight(sc), 0);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT); /* t lives on this stack */
    engine_up.hang = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_helpers),
        cmocka_unit_test_setup_teardown(test_local_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_sse_passthrough, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pd_rewrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pd_fallbacks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pd_client_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ssrf_blocked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_proxy_and_engine_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_disconnect_aborts_upstream, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
