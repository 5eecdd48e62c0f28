/*
 * Unit tests of lib/http_server.h, driven by lib/http_client.h on the same libuv loop: routing
 * (404/405, prefixes, HEAD), request accessors, body limits (413 from h2o rewritten as JSON), big
 * bodies, keep-alive reuse, streaming SSE with a slow producer, client disconnect → producer
 * cancelled, client timeouts, late answers, graceful drain (in-flight finish, new connections
 * refused, deadline aborts), /metrics, backpressure, and in-process dispatch to another server's
 * handlers (replaced body and headers, on_done, server-side aborts). Servers bind 127.0.0.1 port 0;
 * every wait is bounded by a guard timer; every handle is closed (uv_loop_close must succeed).
 */
#include <errno.h>
#include <json-c/json.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/http_client.h"
#include "lib/http_server.h"
#include "lib/json.h"
#include "lib/sse.h"

/* ---- harness ---- */

struct fixture {
    uv_loop_t loop;
    struct http_server *srv;
    struct http_client *cli;
    char base[64];
    int drained;
};

/* what handlers observed (reset per test) */
static struct {
    int aborts;
    char abort_reason[64];
    int produced;  /* stream chunks sent by producers */
    int completed; /* streams that ended normally */
    int rc_nospc;  /* -ENOSPC seen by the backpressure handler */
    int rc_ok;
    int bad_calls_rejected;
} ts;

static void on_guard(uv_timer_t *t)
{
    *(int *)t->data = 1;
}

/* Runs the loop until *flag becomes non-zero or ms pass; returns *flag. */
static int run_until(uv_loop_t *loop, const int *flag, uint64_t ms)
{
    uv_timer_t guard;
    int expired = 0;
    uv_timer_init(loop, &guard);
    guard.data = &expired;
    uv_timer_start(&guard, on_guard, ms, 0);
    while (!*flag && !expired) {
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return *flag;
}

/* Runs the loop for ms (to let things settle or to check that nothing happens). */
static void run_for(uv_loop_t *loop, uint64_t ms)
{
    int never = 0;
    run_until(loop, &never, ms);
}

static void on_drained(struct http_server *srv, void *ud)
{
    (void)srv;
    ((struct fixture *)ud)->drained = 1;
}

static void fx_init(struct fixture *f)
{
    memset(f, 0, sizeof(*f));
    memset(&ts, 0, sizeof(ts));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    char err[256];
    f->cli = http_client_new(&f->loop, err, sizeof(err));
    assert_non_null(f->cli);
}

static void fx_start(struct fixture *f, const struct http_server_config *cfg)
{
    char err[256] = "";
    f->srv = http_server_new(&f->loop, cfg, err, sizeof(err));
    if (!f->srv) {
        fail_msg("http_server_new: %s", err);
    }
}

static void fx_listen(struct fixture *f)
{
    char err[256] = "";
    if (http_server_start(f->srv, err, sizeof(err)) != 0) {
        fail_msg("http_server_start: %s", err);
    }
    assert_true(http_server_port(f->srv) > 0);
    snprintf(f->base, sizeof(f->base), "http://127.0.0.1:%d", http_server_port(f->srv));
}

static void fx_finish(struct fixture *f)
{
    http_client_free(f->cli);
    if (f->srv) {
        if (!f->drained) {
            assert_int_equal(http_server_drain(f->srv, 0, on_drained, f), 0);
            assert_true(run_until(&f->loop, &f->drained, 3000));
        }
        http_server_free(f->srv);
    }
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

struct result {
    int done;
    int heads;
    int events;
    struct buf ev_data; /* event data joined with '|' */
    struct http_response resp;
    struct http_client_req *req;
    int cancel_after; /* cancel from the event callback after this many events */
    struct fixture *f;
    int drain_after; /* start draining the server after this many events */
};

static void result_init(struct result *r)
{
    memset(r, 0, sizeof(*r));
    buf_init(&r->ev_data, 1 << 20);
}

static void result_free(struct result *r)
{
    http_response_free(&r->resp);
    buf_free(&r->ev_data);
}

static void on_done(void *ud, struct http_response *resp)
{
    struct result *r = ud;
    http_response_move(&r->resp, resp);
    r->done = 1;
}

static void on_head(void *ud, const struct http_response *resp)
{
    struct result *r = ud;
    (void)resp;
    r->heads++;
}

static int on_event(void *ud, const struct sse_event *ev)
{
    struct result *r = ud;
    r->events++;
    buf_append(&r->ev_data, ev->data, ev->data_len);
    buf_append(&r->ev_data, "|", 1);
    if (r->cancel_after && r->events == r->cancel_after) {
        http_client_cancel(r->req);
        r->done = 1;
    }
    if (r->drain_after && r->events == r->drain_after) {
        http_server_drain(r->f->srv, 5000, on_drained, r->f);
    }
    return 0;
}

static struct http_client_req *start(struct fixture *f, struct result *r, const char *method,
                                     const char *path, const char *const *headers, const void *body,
                                     size_t len)
{
    char url[256];
    char err[256] = "";
    snprintf(url, sizeof(url), "%s%s", f->base, path);
    struct http_client_opts o = {
        .method = method,
        .url = url,
        .headers = headers,
        .body = body,
        .body_len = len,
        .timeout_ms = 5000,
        .on_head = on_head,
        .on_done = on_done,
        .ud = r,
    };
    r->req = http_client_start(f->cli, &o, err, sizeof(err));
    if (!r->req) {
        fail_msg("http_client_start: %s", err);
    }
    return r->req;
}

static void request(struct fixture *f, struct result *r, const char *method, const char *path,
                    const char *const *headers, const void *body, size_t len)
{
    start(f, r, method, path, headers, body, len);
    assert_true(run_until(&f->loop, &r->done, 5000));
}

static json_object *parse_json(const struct http_response *resp)
{
    json_object *o = json_tokener_parse(buf_cstr(&resp->body));
    if (!o) {
        fail_msg("not JSON: %s", buf_cstr(&resp->body));
    }
    return o;
}

static void assert_json_error(const struct http_response *resp, int code, const char *type,
                              const char *message_part)
{
    char ct[128];
    assert_non_null(http_response_header(resp, "content-type", ct, sizeof(ct)));
    assert_string_equal(ct, "application/json");
    json_object *o = parse_json(resp);
    json_object *e, *v;
    assert_true(json_object_object_get_ex(o, "error", &e));
    assert_true(json_object_object_get_ex(e, "code", &v));
    assert_int_equal(json_object_get_int(v), code);
    assert_true(json_object_object_get_ex(e, "type", &v));
    assert_string_equal(json_object_get_string(v), type);
    assert_true(json_object_object_get_ex(e, "param", &v));
    assert_null(v);
    assert_true(json_object_object_get_ex(e, "message", &v));
    if (!strstr(json_object_get_string(v), message_part)) {
        fail_msg("message %s lacks %s", json_object_get_string(v), message_part);
    }
    json_object_put(o);
}

/* ---- handlers ---- */

static void h_hello(struct http_request *req, void *ud)
{
    char body[64];
    snprintf(body, sizeof(body), "hello %s %s", http_request_method(req), (const char *)ud);
    http_add_header(req, "X-Handler", (const char *)ud);
    http_respond(req, 200, "text/plain", body, strlen(body));
}

static void h_nocontent(struct http_request *req, void *ud)
{
    (void)ud;
    http_respond(req, 204, NULL, NULL, 0);
}

static void h_echo(struct http_request *req, void *ud)
{
    (void)ud;
    size_t len;
    const void *body = http_request_body(req, &len);
    const char *ct = http_request_header(req, "Content-Type");
    http_respond(req, 200, ct ? ct : "application/octet-stream", body, len);
}

static void h_info(struct http_request *req, void *ud)
{
    (void)ud;
    json_object *o = json_object_new_object();
    const char *x = http_request_query_param(req, "x");
    const char *flag = http_request_query_param(req, "flag");
    const char *hdr = http_request_header(req, "x-TEST");
    json_object_object_add(o, "method", json_object_new_string(http_request_method(req)));
    json_object_object_add(o, "path", json_object_new_string(http_request_path(req)));
    json_object_object_add(o, "target", json_object_new_string(http_request_target(req)));
    json_object_object_add(o, "query", json_object_new_string(http_request_query(req)));
    json_object_object_add(o, "route", json_object_new_string(http_request_route(req)));
    json_object_object_add(o, "x", x ? json_object_new_string(x) : NULL);
    json_object_object_add(o, "flag", flag ? json_object_new_string(flag) : NULL);
    json_object_object_add(
        o, "missing", http_request_query_param(req, "nope") ? json_object_new_string("?") : NULL);
    json_object_object_add(o, "hdr", hdr ? json_object_new_string(hdr) : NULL);
    json_object_object_add(o, "peer", json_object_new_string(http_request_peer(req)));
    json_object_object_add(
        o, "arena", json_object_new_boolean(arena_strdup(http_request_arena(req), "x") != NULL));
    /* misuse is rejected, not crashed on */
    if (http_stream_send(req, "x", 1) == -EINVAL && http_stream_end(req) == -EINVAL &&
        http_add_header(req, "Content-Length", "5") == -EINVAL &&
        http_add_header(req, "X-Bad", "a\r\nb") == -EINVAL &&
        http_add_header(req, "Bad Name", "v") == -EINVAL) {
        ts.bad_calls_rejected = 1;
    }
    http_respond_json(req, 200, json_object_to_json_string(o));
    json_object_put(o);
}

/* A producer of SSE events on a timer, cancelled by on_abort. */
struct producer {
    uv_timer_t timer;
    struct http_request *req;
    int n; /* events to send before [DONE] (large: endless) */
    int sent;
};

static void producer_closed(uv_handle_t *h)
{
    free(h);
}

static void producer_stop(struct producer *p)
{
    uv_timer_stop(&p->timer);
    uv_close((uv_handle_t *)&p->timer, producer_closed);
}

static void on_tick(uv_timer_t *t)
{
    struct producer *p = t->data;
    char ev[64];
    if (p->sent < p->n) {
        snprintf(ev, sizeof(ev), "data: %d\n\n", p->sent);
        assert_int_equal(http_stream_send(p->req, ev, strlen(ev)), 0);
        p->sent++;
        ts.produced++;
        return;
    }
    assert_int_equal(http_stream_send(p->req, "data: [DONE]\n\n", 14), 0);
    assert_int_equal(http_stream_end(p->req), 0);
    ts.completed++;
    producer_stop(p);
}

static void on_stream_abort(struct http_request *req, void *ud, const char *reason)
{
    struct producer *p = ud;
    (void)req;
    ts.aborts++;
    snprintf(ts.abort_reason, sizeof(ts.abort_reason), "%s", reason);
    producer_stop(p);
}

static uv_loop_t *handler_loop; /* the loop the handlers schedule their timers on */

static void h_stream_real(struct http_request *req, void *ud)
{
    (void)ud;
    const char *n = http_request_query_param(req, "n");
    const char *iv = http_request_query_param(req, "interval_ms");
    struct producer *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    p->req = req;
    p->n = n ? (int)strtol(n, NULL, 10) : 5;
    uint64_t interval = iv ? strtoull(iv, NULL, 10) : 20;
    uv_timer_init(handler_loop, &p->timer);
    p->timer.data = p;
    http_request_on_abort(req, on_stream_abort, p);
    assert_int_equal(http_stream_start(req, 200, "text/event-stream"), 0);
    uv_timer_start(&p->timer, on_tick, interval, interval);
}

/* Never answers; only learns about the end through on_abort. */
static void on_never_abort(struct http_request *req, void *ud, const char *reason)
{
    (void)req;
    (void)ud;
    ts.aborts++;
    snprintf(ts.abort_reason, sizeof(ts.abort_reason), "%s", reason);
}

static void h_never(struct http_request *req, void *ud)
{
    (void)ud;
    http_request_on_abort(req, on_never_abort, NULL);
}

/* Answers 40 ms later from a timer. */
struct late {
    uv_timer_t timer;
    struct http_request *req;
};

static void late_fire(uv_timer_t *t)
{
    struct late *l = t->data;
    http_respond(l->req, 201, "text/plain", "late", 4);
    uv_close((uv_handle_t *)&l->timer, producer_closed);
}

static void h_late(struct http_request *req, void *ud)
{
    (void)ud;
    struct late *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->req = req;
    uv_timer_init(handler_loop, &l->timer);
    l->timer.data = l;
    uv_timer_start(&l->timer, late_fire, 40, 0);
}

/* Queues more than max_stream_buffer while the headers are still being written. */
static void h_flood(struct http_request *req, void *ud)
{
    (void)ud;
    char chunk[600];
    memset(chunk, 'x', sizeof(chunk));
    assert_int_equal(http_stream_start(req, 200, "application/octet-stream"), 0);
    for (int i = 0; i < 4; i++) {
        int rc = http_stream_send(req, chunk, sizeof(chunk));
        if (rc == 0) {
            ts.rc_ok++;
        } else if (rc == -ENOSPC) {
            ts.rc_nospc++;
        }
    }
    assert_true(http_stream_pending(req) > 0);
    http_stream_end(req);
}

static void base_config(struct http_server_config *cfg)
{
    http_server_config_init(cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 0;
    cfg->probe_ms = 20;
}

static void add_routes(struct fixture *f)
{
    handler_loop = &f->loop;
    assert_int_equal(http_server_route(f->srv, "GET", "/hello", 0, h_hello, "exact"), 0);
    assert_int_equal(http_server_route(f->srv, "POST", "/echo", 0, h_echo, NULL), 0);
    assert_int_equal(http_server_route(f->srv, "GET", "/info", 0, h_info, NULL), 0);
    assert_int_equal(http_server_route(f->srv, NULL, "/api", 1, h_hello, "api"), 0);
    assert_int_equal(http_server_route(f->srv, "GET", "/api/v2/", 1, h_hello, "v2"), 0);
    assert_int_equal(http_server_route(f->srv, "GET", "/api/special", 0, h_hello, "special"), 0);
    assert_int_equal(http_server_route(f->srv, "GET", "/stream", 0, h_stream_real, NULL), 0);
    assert_int_equal(http_server_route(f->srv, "GET", "/never", 0, h_never, NULL), 0);
    assert_int_equal(http_server_route(f->srv, "GET", "/late", 0, h_late, NULL), 0);
    assert_int_equal(http_server_route(f->srv, "GET", "/flood", 0, h_flood, NULL), 0);
    assert_int_equal(http_server_route(f->srv, "DELETE", "/hello", 0, h_hello, "delete"), 0);
    assert_int_equal(http_server_route(f->srv, "GET", "/nocontent", 0, h_nocontent, NULL), 0);
}

/* ---- tests ---- */

static void test_routing(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    add_routes(&f);
    assert_int_equal(http_server_route(f.srv, "get", "/x", 0, h_hello, NULL), -EINVAL);
    assert_int_equal(http_server_route(f.srv, "GET", "x", 0, h_hello, NULL), -EINVAL);
    fx_listen(&f);

    static const struct {
        const char *method, *path, *body;
        int status;
    } cases[] = {
        {"GET", "/hello", "hello GET exact", 200},
        {"DELETE", "/hello", "hello DELETE delete", 200},
        {"GET", "/hello?q=1", "hello GET exact", 200},
        {"GET", "/api", "hello GET api", 200},
        {"POST", "/api/anything/deeper", "hello POST api", 200},
        {"GET", "/api/special", "hello GET special", 200},
        {"GET", "/api/v2/models", "hello GET v2", 200},
        {"POST", "/api/v2/models", "hello POST api", 200}, /* v2 is GET-only: falls back */
        {"GET", "/a/../hello", "hello GET exact", 200},    /* normalized */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct result r;
        result_init(&r);
        request(&f, &r, cases[i].method, cases[i].path, NULL,
                strcmp(cases[i].method, "POST") == 0 ? "b" : NULL,
                strcmp(cases[i].method, "POST") == 0 ? 1 : 0);
        assert_null(r.resp.error);
        assert_int_equal(r.resp.status, cases[i].status);
        assert_string_equal(buf_cstr(&r.resp.body), cases[i].body);
        assert_int_equal(r.heads, 1);
        result_free(&r);
    }

    /* 204 has no body and no framing: the connection stays usable for the next request */
    struct http_server_stats before, after;
    http_server_get_stats(f.srv, &before);
    for (int i = 0; i < 2; i++) {
        struct result r;
        result_init(&r);
        request(&f, &r, "GET", i == 0 ? "/nocontent" : "/hello", NULL, NULL, 0);
        assert_null(r.resp.error);
        assert_int_equal(r.resp.status, i == 0 ? 204 : 200);
        char v[32];
        if (i == 0) {
            assert_int_equal(r.resp.body.len, 0);
            assert_null(http_response_header(&r.resp, "transfer-encoding", v, sizeof(v)));
            assert_null(http_response_header(&r.resp, "content-length", v, sizeof(v)));
        }
        result_free(&r);
    }
    http_server_get_stats(f.srv, &after);
    assert_int_equal(after.connections_accepted, before.connections_accepted);

    /* 404 for unknown paths, including ones that only look like a prefix */
    const char *missing[] = {"/nope", "/apix", "/hello/sub"};
    for (size_t i = 0; i < 3; i++) {
        struct result r;
        result_init(&r);
        request(&f, &r, "GET", missing[i], NULL, NULL, 0);
        assert_int_equal(r.resp.status, 404);
        assert_json_error(&r.resp, 404, "invalid_request_error", missing[i]);
        result_free(&r);
    }

    /* 405 with Allow */
    struct result r;
    result_init(&r);
    request(&f, &r, "PUT", "/hello", NULL, "x", 1);
    assert_int_equal(r.resp.status, 405);
    assert_json_error(&r.resp, 405, "invalid_request_error", "PUT");
    char allow[128];
    assert_non_null(http_response_header(&r.resp, "Allow", allow, sizeof(allow)));
    assert_string_equal(allow, "GET, DELETE, HEAD");
    result_free(&r);

    /* HEAD answered by the GET route, without a body but with its length */
    result_init(&r);
    request(&f, &r, "HEAD", "/hello", NULL, NULL, 0);
    assert_int_equal(r.resp.status, 200);
    assert_int_equal(r.resp.body.len, 0);
    char cl[32];
    assert_non_null(http_response_header(&r.resp, "content-length", cl, sizeof(cl)));
    assert_int_equal(strtol(cl, NULL, 10), (long)strlen("hello HEAD exact"));
    assert_non_null(http_response_header(&r.resp, "x-handler", cl, sizeof(cl)));
    assert_string_equal(cl, "exact");
    result_free(&r);

    fx_finish(&f);
}

static void test_request_accessors(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);

    struct result r;
    result_init(&r);
    const char *hdrs[] = {"X-Test: Some Value", NULL};
    request(&f, &r, "GET", "/info?x=a%20b+c&flag&y=2", hdrs, NULL, 0);
    assert_int_equal(r.resp.status, 200);
    json_object *o = parse_json(&r.resp), *v;
    assert_true(json_object_object_get_ex(o, "path", &v));
    assert_string_equal(json_object_get_string(v), "/info");
    assert_true(json_object_object_get_ex(o, "target", &v));
    assert_string_equal(json_object_get_string(v), "/info?x=a%20b+c&flag&y=2");
    assert_true(json_object_object_get_ex(o, "query", &v));
    assert_string_equal(json_object_get_string(v), "x=a%20b+c&flag&y=2");
    assert_true(json_object_object_get_ex(o, "route", &v));
    assert_string_equal(json_object_get_string(v), "/info");
    assert_true(json_object_object_get_ex(o, "x", &v));
    assert_string_equal(json_object_get_string(v), "a b c");
    assert_true(json_object_object_get_ex(o, "flag", &v));
    assert_string_equal(json_object_get_string(v), "");
    assert_true(json_object_object_get_ex(o, "missing", &v));
    assert_null(v);
    assert_true(json_object_object_get_ex(o, "hdr", &v));
    assert_string_equal(json_object_get_string(v), "Some Value");
    assert_true(json_object_object_get_ex(o, "peer", &v));
    assert_true(strncmp(json_object_get_string(v), "127.0.0.1:", 10) == 0);
    assert_true(json_object_object_get_ex(o, "arena", &v));
    assert_true(json_object_get_boolean(v));
    json_object_put(o);
    assert_int_equal(ts.bad_calls_rejected, 1);
    result_free(&r);
    fx_finish(&f);
}

static void test_body_limit_and_big_bodies(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    cfg.max_body = 1024;
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);

    char body[4096];
    memset(body, 'a', sizeof(body));
    struct result r;
    result_init(&r);
    const char *ct[] = {"Content-Type: application/x-test", NULL};
    request(&f, &r, "POST", "/echo", ct, body, 1024);
    assert_int_equal(r.resp.status, 200);
    assert_int_equal(r.resp.body.len, 1024);
    char v[64];
    assert_string_equal(http_response_header(&r.resp, "content-type", v, sizeof(v)),
                        "application/x-test");
    result_free(&r);

    result_init(&r);
    request(&f, &r, "POST", "/echo", NULL, body, sizeof(body));
    assert_int_equal(r.resp.status, 413);
    assert_json_error(&r.resp, 413, "invalid_request_error", "1024 bytes");
    result_free(&r);

    /* chunked upload past the limit */
    result_init(&r);
    const char *chunked[] = {"Transfer-Encoding: chunked", NULL};
    request(&f, &r, "POST", "/echo", chunked, body, 2048);
    assert_int_equal(r.resp.status, 413);
    assert_json_error(&r.resp, 413, "invalid_request_error", "1024 bytes");
    result_free(&r);
    fx_finish(&f);

    /* a 4 MiB body echoed back intact; the client's cap turns a too-big response into an error */
    fx_init(&f);
    base_config(&cfg);
    cfg.max_body = 8 * 1024 * 1024;
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);
    size_t big_len = 4 * 1024 * 1024;
    unsigned char *big = malloc(big_len);
    assert_non_null(big);
    for (size_t i = 0; i < big_len; i++) {
        big[i] = (unsigned char)(i * 2654435761u >> 13);
    }
    result_init(&r);
    request(&f, &r, "POST", "/echo", NULL, big, big_len);
    assert_null(r.resp.error);
    assert_int_equal(r.resp.status, 200);
    assert_int_equal(r.resp.body.len, big_len);
    assert_memory_equal(r.resp.body.data, big, big_len);
    result_free(&r);

    result_init(&r);
    char url[128], err[128];
    snprintf(url, sizeof(url), "%s/echo", f.base);
    struct http_client_opts o = {.url = url,
                                 .body = big,
                                 .body_len = big_len,
                                 .max_response = 1024 * 1024,
                                 .timeout_ms = 5000,
                                 .on_done = on_done,
                                 .ud = &r};
    assert_non_null(http_client_start(f.cli, &o, err, sizeof(err)));
    assert_true(run_until(&f.loop, &r.done, 5000));
    assert_non_null(r.resp.error);
    assert_non_null(strstr(r.resp.error, "exceeds 1048576 bytes"));
    result_free(&r);
    free(big);
    fx_finish(&f);
}

static void test_keepalive_reuse(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);
    for (int i = 0; i < 5; i++) {
        struct result r;
        result_init(&r);
        request(&f, &r, "GET", "/hello", NULL, NULL, 0);
        assert_int_equal(r.resp.status, 200);
        result_free(&r);
    }
    struct http_server_stats st;
    http_server_get_stats(f.srv, &st);
    assert_int_equal(st.connections_accepted, 1);
    assert_int_equal(st.connections_open, 1);
    assert_int_equal(st.requests_total, 5);
    assert_int_equal(st.requests_in_flight, 0);
    fx_finish(&f);
}

static void test_sse_slow_producer(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);

    struct result r;
    result_init(&r);
    char url[128], err[128];
    snprintf(url, sizeof(url), "%s/stream?n=5&interval_ms=20", f.base);
    struct http_client_opts o = {.url = url,
                                 .timeout_ms = 5000,
                                 .on_head = on_head,
                                 .on_event = on_event,
                                 .on_done = on_done,
                                 .ud = &r};
    uint64_t t0 = uv_hrtime();
    assert_non_null(http_client_start(f.cli, &o, err, sizeof(err)));
    assert_true(run_until(&f.loop, &r.done, 5000));
    uint64_t ms = (uv_hrtime() - t0) / 1000000;
    assert_null(r.resp.error);
    assert_int_equal(r.resp.status, 200);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.events, 6);
    assert_string_equal(buf_cstr(&r.ev_data), "0|1|2|3|4|[DONE]|");
    assert_true(ms >= 100); /* six ticks of 20 ms */
    char v[64];
    assert_string_equal(http_response_header(&r.resp, "content-type", v, sizeof(v)),
                        "text/event-stream");
    assert_string_equal(http_response_header(&r.resp, "cache-control", v, sizeof(v)), "no-cache");
    assert_string_equal(http_response_header(&r.resp, "transfer-encoding", v, sizeof(v)),
                        "chunked");
    assert_int_equal(ts.completed, 1);
    assert_int_equal(ts.aborts, 0);
    result_free(&r);
    fx_finish(&f);
}

static void test_client_disconnect_cancels_producer(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);

    /* the client cancels from inside its event callback after 3 events */
    struct result r;
    result_init(&r);
    r.cancel_after = 3;
    char url[128], err[128];
    snprintf(url, sizeof(url), "%s/stream?n=1000000&interval_ms=10", f.base);
    struct http_client_opts o = {
        .url = url, .timeout_ms = 5000, .on_event = on_event, .on_done = on_done, .ud = &r};
    r.req = http_client_start(f.cli, &o, err, sizeof(err));
    assert_non_null(r.req);
    assert_true(run_until(&f.loop, &r.done, 5000));
    assert_int_equal(r.events, 3);
    assert_int_equal(http_client_active(f.cli), 0);
    /* the server notices (write error or probe) and the producer stops */
    assert_true(run_until(&f.loop, &ts.aborts, 2000));
    assert_string_equal(ts.abort_reason, "client disconnected");
    int produced = ts.produced;
    run_for(&f.loop, 100);
    assert_int_equal(ts.produced, produced);
    assert_int_equal(ts.aborts, 1);
    struct http_server_stats st;
    http_server_get_stats(f.srv, &st);
    assert_int_equal(st.requests_aborted, 1);
    assert_int_equal(st.requests_in_flight, 0);
    result_free(&r);
    fx_finish(&f);
}

static void test_client_timeout_and_late_answer(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);

    struct result r;
    result_init(&r);
    char url[128], err[128];
    snprintf(url, sizeof(url), "%s/never", f.base);
    struct http_client_opts o = {.url = url, .timeout_ms = 150, .on_done = on_done, .ud = &r};
    uint64_t t0 = uv_hrtime();
    assert_non_null(http_client_start(f.cli, &o, err, sizeof(err)));
    assert_true(run_until(&f.loop, &r.done, 3000));
    uint64_t ms = (uv_hrtime() - t0) / 1000000;
    assert_non_null(r.resp.error);
    assert_int_equal(r.resp.curl_code, 28); /* CURLE_OPERATION_TIMEDOUT */
    assert_int_equal(r.resp.status, 0);
    assert_true(ms >= 140 && ms < 2000);
    /* the waiting handler is told that its client left */
    assert_true(run_until(&f.loop, &ts.aborts, 2000));
    assert_string_equal(ts.abort_reason, "client disconnected");
    result_free(&r);

    /* an answer from a timer, 40 ms after the handler returned */
    result_init(&r);
    request(&f, &r, "GET", "/late", NULL, NULL, 0);
    assert_null(r.resp.error);
    assert_int_equal(r.resp.status, 201);
    assert_string_equal(buf_cstr(&r.resp.body), "late");
    result_free(&r);
    fx_finish(&f);
}

static void test_drain_finishes_in_flight(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);

    /* an idle keep-alive connection from a second client */
    char err[128];
    struct http_client *other = http_client_new(&f.loop, err, sizeof(err));
    assert_non_null(other);
    struct result idle;
    result_init(&idle);
    char url[128];
    snprintf(url, sizeof(url), "%s/hello", f.base);
    struct http_client_opts oi = {.url = url, .timeout_ms = 5000, .on_done = on_done, .ud = &idle};
    assert_non_null(http_client_start(other, &oi, err, sizeof(err)));
    assert_true(run_until(&f.loop, &idle.done, 5000));
    assert_int_equal(idle.resp.status, 200);

    /* a slow stream; the drain starts after its first event */
    struct result r;
    result_init(&r);
    r.f = &f;
    r.drain_after = 1;
    snprintf(url, sizeof(url), "%s/stream?n=5&interval_ms=30", f.base);
    struct http_client_opts o = {
        .url = url, .timeout_ms = 5000, .on_event = on_event, .on_done = on_done, .ud = &r};
    assert_non_null(http_client_start(f.cli, &o, err, sizeof(err)));
    int draining = 0;
    while (!draining && !r.done) {
        uv_run(&f.loop, UV_RUN_ONCE);
        draining = http_server_draining(f.srv);
    }
    assert_true(draining);

    /* a new connection is refused while the stream goes on */
    struct result refused;
    result_init(&refused);
    struct http_client *third = http_client_new(&f.loop, err, sizeof(err));
    assert_non_null(third);
    struct http_client_opts on = {
        .url = url, .timeout_ms = 2000, .on_done = on_done, .ud = &refused};
    assert_non_null(http_client_start(third, &on, err, sizeof(err)));
    assert_true(run_until(&f.loop, &refused.done, 3000));
    assert_non_null(refused.resp.error);
    assert_int_equal(refused.resp.curl_code, 7); /* CURLE_COULDNT_CONNECT */
    assert_false(r.done);
    assert_false(f.drained);

    /* the idle keep-alive connection was closed: only the stream's remains */
    struct http_server_stats st;
    http_server_get_stats(f.srv, &st);
    assert_int_equal(st.connections_open, 1);

    /* the stream completes, then the server reports drained */
    assert_true(run_until(&f.loop, &f.drained, 5000));
    assert_true(run_until(&f.loop, &r.done, 1000));
    assert_null(r.resp.error);
    assert_int_equal(r.events, 6);
    assert_string_equal(buf_cstr(&r.ev_data), "0|1|2|3|4|[DONE]|");
    assert_int_equal(ts.completed, 1);
    assert_int_equal(ts.aborts, 0);

    http_client_free(other);
    http_client_free(third);
    result_free(&idle);
    result_free(&refused);
    result_free(&r);
    fx_finish(&f);
}

static void test_drain_deadline(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);

    /* an endless stream and a request that is never answered */
    struct result s, w;
    result_init(&s);
    result_init(&w);
    char url[128], err[128];
    snprintf(url, sizeof(url), "%s/stream?n=1000000&interval_ms=10", f.base);
    struct http_client_opts os = {
        .url = url, .timeout_ms = 5000, .on_event = on_event, .on_done = on_done, .ud = &s};
    assert_non_null(http_client_start(f.cli, &os, err, sizeof(err)));
    start(&f, &w, "GET", "/never", NULL, NULL, 0);
    while (s.events < 2) {
        uv_run(&f.loop, UV_RUN_ONCE);
    }
    uint64_t t0 = uv_hrtime();
    assert_int_equal(http_server_drain(f.srv, 100, on_drained, &f), 0);
    assert_true(run_until(&f.loop, &f.drained, 3000));
    uint64_t ms = (uv_hrtime() - t0) / 1000000;
    assert_true(ms >= 90 && ms < 2000);
    assert_int_equal(ts.aborts, 2);
    assert_string_equal(ts.abort_reason, "server shutting down");
    assert_true(run_until(&f.loop, &w.done, 2000));
    assert_int_equal(w.resp.status, 503);
    assert_json_error(&w.resp, 503, "server_error", "server shutting down");
    assert_true(run_until(&f.loop, &s.done, 2000));
    assert_int_equal(s.resp.status, 200);
    result_free(&s);
    result_free(&w);
    fx_finish(&f);
}

static void test_metrics_route(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    cfg.metrics_path = "/metrics";
    cfg.metrics_prefix = "t_";
    cfg.max_body = 16;
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);
    for (int i = 0; i < 3; i++) {
        struct result r;
        result_init(&r);
        request(&f, &r, "GET", "/hello", NULL, NULL, 0);
        result_free(&r);
    }
    struct result r;
    result_init(&r);
    request(&f, &r, "GET", "/missing", NULL, NULL, 0);
    result_free(&r);
    result_init(&r);
    request(&f, &r, "POST", "/echo", NULL, "0123456789abcdefXYZ", 19); /* 413 from h2o */
    assert_int_equal(r.resp.status, 413);
    result_free(&r);

    result_init(&r);
    request(&f, &r, "GET", "/metrics", NULL, NULL, 0);
    assert_int_equal(r.resp.status, 200);
    char ct[128];
    assert_string_equal(http_response_header(&r.resp, "content-type", ct, sizeof(ct)),
                        "text/plain; version=0.0.4; charset=utf-8");
    const char *body = buf_cstr(&r.resp.body);
    static const char *const want[] = {
        "# TYPE t_http_requests_total counter",
        "t_http_requests_total{route=\"/hello\",method=\"GET\",code=\"200\"} 3",
        "t_http_requests_total{route=\"none\",method=\"GET\",code=\"404\"} 1",
        "t_http_requests_total{route=\"none\",method=\"POST\",code=\"413\"} 1",
        "t_http_request_duration_seconds_count{route=\"/hello\",method=\"GET\",code=\"200\"} 3",
        "# TYPE t_http_request_duration_seconds histogram",
        "t_http_requests_in_flight 1", /* this very request */
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (!strstr(body, want[i])) {
            fail_msg("metrics lack \"%s\":\n%s", want[i], body);
        }
    }
    result_free(&r);

    /* a second server may not register the same names in the same registry */
    struct http_server_config c2;
    base_config(&c2);
    c2.metrics = http_server_metrics(f.srv);
    c2.metrics_prefix = "t_";
    char err[256] = "";
    assert_null(http_server_new(&f.loop, &c2, err, sizeof(err)));
    assert_non_null(strstr(err, "t_http_requests_total"));
    fx_finish(&f);
}

static void test_backpressure(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    cfg.max_stream_buffer = 1024;
    fx_start(&f, &cfg);
    add_routes(&f);
    fx_listen(&f);
    struct result r;
    result_init(&r);
    request(&f, &r, "GET", "/flood", NULL, NULL, 0);
    assert_int_equal(r.resp.status, 200);
    assert_int_equal(ts.rc_ok, 1);
    assert_int_equal(ts.rc_nospc, 3);
    assert_int_equal(r.resp.body.len, 600);
    result_free(&r);
    fx_finish(&f);
}

static void test_error_body_and_lifecycle(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(http_error_body(&b, 400, NULL, "bad \"model\"\n", "model"), 0);
    json_object *o = json_tokener_parse(buf_cstr(&b)), *e, *v;
    assert_non_null(o);
    assert_true(json_object_object_get_ex(o, "error", &e));
    assert_true(json_object_object_get_ex(e, "message", &v));
    assert_string_equal(json_object_get_string(v), "bad \"model\"\n");
    assert_true(json_object_object_get_ex(e, "type", &v));
    assert_string_equal(json_object_get_string(v), "invalid_request_error");
    assert_true(json_object_object_get_ex(e, "param", &v));
    assert_string_equal(json_object_get_string(v), "model");
    assert_true(json_object_object_get_ex(e, "code", &v));
    assert_int_equal(json_object_get_int(v), 400);
    json_object_put(o);
    buf_reset(&b);
    assert_int_equal(http_error_body(&b, 502, NULL, "upstream", NULL), 0);
    assert_non_null(strstr(buf_cstr(&b), "\"type\":\"server_error\""));
    /* a message quoting a client's key cut inside a UTF-8 sequence (found by
     * server_fuzz_openai_request): the body stays valid JSON, the broken byte becomes U+FFFD */
    buf_reset(&b);
    assert_int_equal(http_error_body(&b, 400, NULL, "after key \"o\xf2\x97\x97\"", NULL), 0);
    char perr[128];
    o = json_parse(buf_cstr(&b), b.len, perr, sizeof(perr));
    if (!o) {
        fail_msg("error body is not JSON (%s): %s", perr, buf_cstr(&b));
    }
    assert_true(json_object_object_get_ex(o, "error", &e));
    assert_true(json_object_object_get_ex(e, "message", &v));
    assert_string_equal(json_object_get_string(v),
                        "after key \"o\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    json_object_put(o);
    buf_free(&b);

    /* a server that was never started is freed at once; drain on it reports drained */
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    assert_int_equal(http_server_port(f.srv), -1);
    assert_int_equal(http_server_drain(f.srv, 1000, on_drained, &f), 0);
    assert_true(f.drained);
    http_server_free(f.srv);
    f.srv = NULL;

    /* the port is taken: start fails cleanly and the server can be freed right away */
    fx_start(&f, &cfg);
    fx_listen(&f);
    struct http_server_config busy;
    base_config(&busy);
    busy.port = http_server_port(f.srv);
    char err[256] = "";
    struct http_server *second = http_server_new(&f.loop, &busy, err, sizeof(err));
    assert_non_null(second);
    assert_int_equal(http_server_start(second, err, sizeof(err)), -EADDRINUSE);
    assert_non_null(strstr(err, "Address already in use"));
    http_server_free(second);
    f.drained = 0;
    fx_finish(&f);
}

static void test_ipv6(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    cfg.host = "::1";
    fx_start(&f, &cfg);
    add_routes(&f);
    char err[256] = "";
    int rc = http_server_start(f.srv, err, sizeof(err));
    if (rc == -EADDRNOTAVAIL || rc == -EAFNOSUPPORT) {
        http_server_free(f.srv);
        f.srv = NULL;
        fx_finish(&f);
        skip();
    }
    assert_int_equal(rc, 0);
    snprintf(f.base, sizeof(f.base), "http://[::1]:%d", http_server_port(f.srv));
    struct result r;
    result_init(&r);
    request(&f, &r, "GET", "/info", NULL, NULL, 0);
    assert_int_equal(r.resp.status, 200);
    json_object *o = parse_json(&r.resp), *v;
    assert_true(json_object_object_get_ex(o, "peer", &v));
    assert_true(strncmp(json_object_get_string(v), "[::1]:", 6) == 0);
    json_object_put(o);
    result_free(&r);
    fx_finish(&f);
}

/* ---- in-process dispatch (a proxy in front of another server's handlers) ---- */

static struct {
    struct http_server *back;
    int done_status[8];
    int n_done;
    uv_timer_t timer;
    struct http_request *pending;
} fw;

static void front_done(void *ud, int status, double seconds)
{
    (void)ud;
    assert_true(seconds >= 0);
    if (fw.n_done < 8) {
        fw.done_status[fw.n_done] = status;
    }
    fw.n_done++;
}

static void front_deadline(uv_timer_t *t)
{
    (void)t;
    assert_int_equal(http_request_abort(fw.pending, 504, "deadline passed"), 0);
}

static void h_front(struct http_request *req, void *ud)
{
    (void)ud;
    const char *abort_ms = http_request_query_param(req, "abort_ms");
    if (strcmp(http_request_path(req), "/echo") == 0) {
        assert_int_equal(http_request_set_body(req, "rewritten body", 14), 0);
    }
    assert_int_equal(http_request_set_header(req, "X-Test", "from the front"), 0);
    assert_int_equal(http_request_set_header(req, "Bad Name", "v"), -EINVAL);
    assert_int_equal(http_add_header(req, "X-Front", "yes"), 0);
    http_request_on_done(req, front_done, NULL);
    if (abort_ms) {
        fw.pending = req;
        uv_timer_start(&fw.timer, front_deadline, strtoull(abort_ms, NULL, 10), 0);
    }
    assert_int_equal(http_server_dispatch(fw.back, req), 0);
}

static void test_dispatch_in_process(void **state)
{
    (void)state;
    struct fixture f;
    struct http_server_config cfg;
    fx_init(&f);
    base_config(&cfg);
    fx_start(&f, &cfg);
    memset(&fw, 0, sizeof fw);
    uv_timer_init(&f.loop, &fw.timer);
    /* the back server only holds routes: it never listens */
    char err[256] = "";
    struct http_server_config bcfg;
    base_config(&bcfg);
    fw.back = http_server_new(&f.loop, &bcfg, err, sizeof err);
    assert_non_null(fw.back);
    struct fixture back = {.srv = fw.back};
    add_routes(&back);
    handler_loop = &f.loop;
    assert_int_equal(http_server_route(f.srv, NULL, "/", 1, h_front, NULL), 0);
    fx_listen(&f);

    /* the handler sees the replaced body and header; the front's response header goes out */
    struct result r;
    result_init(&r);
    const char *hdrs[] = {"Content-Type: text/plain", NULL};
    request(&f, &r, "POST", "/echo", hdrs, "original", 8);
    assert_int_equal(r.resp.status, 200);
    assert_string_equal(buf_cstr(&r.resp.body), "rewritten body");
    char v[64];
    assert_non_null(http_response_header(&r.resp, "x-front", v, sizeof v));
    assert_string_equal(v, "yes");
    result_free(&r);
    result_init(&r);
    request(&f, &r, "GET", "/info?x=1", NULL, NULL, 0);
    json_object *o = parse_json(&r.resp), *jv;
    assert_true(json_object_object_get_ex(o, "hdr", &jv));
    assert_string_equal(json_object_get_string(jv), "from the front");
    json_object_put(o);
    result_free(&r);
    /* the back server's 404 */
    result_init(&r);
    request(&f, &r, "GET", "/nothing/here", NULL, NULL, 0);
    assert_json_error(&r.resp, 404, "invalid_request_error", "Invalid URL");
    result_free(&r);
    /* a server-side abort of a waiting request: the handler's on_abort, then 504 */
    result_init(&r);
    request(&f, &r, "GET", "/never?abort_ms=30", NULL, NULL, 0);
    assert_json_error(&r.resp, 504, "server_error", "deadline passed");
    assert_int_equal(ts.aborts, 1);
    assert_string_equal(ts.abort_reason, "deadline passed");
    result_free(&r);
    /* ... and of a stream: the producer stops, the stream is cut */
    ts.aborts = 0;
    result_init(&r);
    start(&f, &r, "GET", "/stream?n=1000000&interval_ms=5&abort_ms=60", NULL, NULL, 0);
    assert_true(run_until(&f.loop, &r.done, 5000));
    assert_int_equal(r.resp.status, 200);
    assert_true(run_until(&f.loop, &ts.aborts, 2000));
    int produced = ts.produced;
    run_for(&f.loop, 50);
    assert_int_equal(ts.produced, produced);
    assert_int_equal(ts.completed, 0);
    result_free(&r);
    run_for(&f.loop, 20);
    assert_int_equal(fw.n_done, 5);
    assert_int_equal(fw.done_status[0], 200);
    assert_int_equal(fw.done_status[2], 404);
    assert_int_equal(fw.done_status[3], 504);
    assert_int_equal(fw.done_status[4], 200);
    uv_close((uv_handle_t *)&fw.timer, NULL);
    http_server_free(fw.back);
    fx_finish(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routing),
        cmocka_unit_test(test_request_accessors),
        cmocka_unit_test(test_body_limit_and_big_bodies),
        cmocka_unit_test(test_keepalive_reuse),
        cmocka_unit_test(test_sse_slow_producer),
        cmocka_unit_test(test_client_disconnect_cancels_producer),
        cmocka_unit_test(test_client_timeout_and_late_answer),
        cmocka_unit_test(test_drain_finishes_in_flight),
        cmocka_unit_test(test_drain_deadline),
        cmocka_unit_test(test_metrics_route),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_error_body_and_lifecycle),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_dispatch_in_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
