/*
 * Unit tests of lib/http_client.h against lib/http_server.h servers on 127.0.0.1: buffered
 * requests (methods, headers, header lookup), streaming reads per chunk, SSE parsing (and error
 * bodies of non-2xx streams), aborting from callbacks, cancellation, connection refused, many
 * concurrent requests, freeing with requests in flight, and http_fetch_sync called from another
 * thread. Also raw-socket checks that errors h2o produces itself are JSON.
 * Every wait is bounded; every handle is closed (uv_loop_close must succeed).
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/http_client.h"
#include "lib/http_server.h"

static uv_loop_t *handler_loop;
static int server_aborts;

static void on_guard(uv_timer_t *t)
{
    *(int *)t->data = 1;
}

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

/* ---- server side ---- */

static void h_headers(struct http_request *req, void *ud)
{
    (void)ud;
    char body[512];
    const char *h = http_request_header(req, "X-One");
    size_t len = 0;
    http_request_body(req, &len);
    snprintf(body, sizeof(body), "%s %s x-one=%s body=%zu", http_request_method(req),
             http_request_target(req), h ? h : "-", len);
    http_add_header(req, "X-Reply", "yes");
    http_add_header(req, "X-Multi", "first");
    http_add_header(req, "X-Multi", "second");
    http_respond(req, 200, "text/plain", body, strlen(body));
}

struct chunker {
    uv_timer_t timer;
    struct http_request *req;
    int left;
    int stopped;
};

static void chunker_closed(uv_handle_t *h)
{
    free(h);
}

static void chunker_tick(uv_timer_t *t)
{
    struct chunker *c = t->data;
    char piece[32];
    snprintf(piece, sizeof(piece), "piece-%d;", c->left);
    http_stream_send(c->req, piece, strlen(piece));
    if (--c->left == 0) {
        http_stream_end(c->req);
        uv_timer_stop(&c->timer);
        uv_close((uv_handle_t *)&c->timer, chunker_closed);
    }
}

static void chunker_abort(struct http_request *req, void *ud, const char *reason)
{
    struct chunker *c = ud;
    (void)req;
    (void)reason;
    server_aborts++;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, chunker_closed);
}

/* n chunks ("piece-n;" ... "piece-1;") 20 ms apart; ?sse=1 sends them as SSE events */
static void h_chunks(struct http_request *req, void *ud)
{
    (void)ud;
    const char *n = http_request_query_param(req, "n");
    struct chunker *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->req = req;
    c->left = n ? (int)strtol(n, NULL, 10) : 3;
    uv_timer_init(handler_loop, &c->timer);
    c->timer.data = c;
    http_request_on_abort(req, chunker_abort, c);
    http_stream_start(req, 200, "text/plain");
    uv_timer_start(&c->timer, chunker_tick, 20, 20);
}

static void h_sse(struct http_request *req, void *ud)
{
    (void)ud;
    static const char body[] = "event: a\ndata: one\n\n: comment\ndata: two\ndata: lines\n\n"
                               "data: [DONE]\n\n";
    http_stream_start(req, 200, "text/event-stream");
    http_stream_send(req, body, sizeof(body) - 1);
    http_stream_end(req);
}

static void never_abort(struct http_request *req, void *ud, const char *reason)
{
    (void)req;
    (void)ud;
    (void)reason;
    server_aborts++;
}

static void h_never(struct http_request *req, void *ud)
{
    (void)ud;
    http_request_on_abort(req, never_abort, NULL);
}

static void add_routes(struct http_server *srv)
{
    assert_int_equal(http_server_route(srv, NULL, "/headers", 0, h_headers, NULL), 0);
    assert_int_equal(http_server_route(srv, "GET", "/chunks", 0, h_chunks, NULL), 0);
    assert_int_equal(http_server_route(srv, "GET", "/sse", 0, h_sse, NULL), 0);
    assert_int_equal(http_server_route(srv, "GET", "/never", 0, h_never, NULL), 0);
}

/* ---- fixture: server and client on one loop ---- */

struct fixture {
    uv_loop_t loop;
    struct http_server *srv;
    struct http_client *cli;
    char base[64];
    int drained;
};

static void on_drained(struct http_server *srv, void *ud)
{
    (void)srv;
    *(int *)ud = 1;
}

static void fx_init(struct fixture *f)
{
    memset(f, 0, sizeof(*f));
    server_aborts = 0;
    assert_int_equal(uv_loop_init(&f->loop), 0);
    handler_loop = &f->loop;
    struct http_server_config cfg;
    http_server_config_init(&cfg);
    cfg.probe_ms = 20;
    char err[256] = "";
    f->srv = http_server_new(&f->loop, &cfg, err, sizeof(err));
    assert_non_null(f->srv);
    add_routes(f->srv);
    assert_int_equal(http_server_start(f->srv, err, sizeof(err)), 0);
    snprintf(f->base, sizeof(f->base), "http://127.0.0.1:%d", http_server_port(f->srv));
    f->cli = http_client_new(&f->loop, err, sizeof(err));
    assert_non_null(f->cli);
}

static void fx_finish(struct fixture *f)
{
    http_client_free(f->cli);
    assert_int_equal(http_server_drain(f->srv, 0, on_drained, &f->drained), 0);
    assert_true(run_until(&f->loop, &f->drained, 3000));
    http_server_free(f->srv);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

struct result {
    int done;
    int chunks;
    int events;
    int abort_at;  /* data/event callback returns an error at this call */
    int cancel_at; /* data callback cancels at this call */
    struct buf seen;
    struct http_response resp;
    struct http_client_req *req;
};

static void result_init(struct result *r)
{
    memset(r, 0, sizeof(*r));
    buf_init(&r->seen, 1 << 20);
}

static void result_free(struct result *r)
{
    http_response_free(&r->resp);
    buf_free(&r->seen);
}

static void on_done(void *ud, struct http_response *resp)
{
    struct result *r = ud;
    http_response_move(&r->resp, resp);
    r->done++;
}

static int on_data(void *ud, const char *data, size_t len)
{
    struct result *r = ud;
    r->chunks++;
    buf_append(&r->seen, data, len);
    if (r->cancel_at && r->chunks == r->cancel_at) {
        http_client_cancel(r->req);
        return 0;
    }
    return r->abort_at && r->chunks == r->abort_at;
}

static int on_event(void *ud, const struct sse_event *ev)
{
    struct result *r = ud;
    r->events++;
    buf_appendf(&r->seen, "%s=", ev->type);
    buf_append(&r->seen, ev->data, ev->data_len);
    buf_append(&r->seen, ";", 1);
    return (r->abort_at && r->events == r->abort_at) ? -ECANCELED : 0;
}

static struct http_client_req *start(struct fixture *f, struct result *r,
                                     struct http_client_opts *o, const char *path)
{
    char url[256], err[256] = "";
    snprintf(url, sizeof(url), "%s%s", f->base, path);
    o->url = url;
    o->on_done = on_done;
    o->ud = r;
    if (!o->timeout_ms) {
        o->timeout_ms = 5000;
    }
    r->req = http_client_start(f->cli, o, err, sizeof(err));
    if (!r->req) {
        fail_msg("start: %s", err);
    }
    return r->req;
}

/* ---- tests ---- */

static void test_buffered_methods_and_headers(void **state)
{
    (void)state;
    struct fixture f;
    fx_init(&f);
    static const struct {
        const char *method;
        const char *body;
        const char *want;
    } cases[] = {
        {NULL, NULL, "GET /headers?a=1 x-one=v1 body=0"},
        {NULL, "abc", "POST /headers?a=1 x-one=v1 body=3"},
        {"PUT", "abcd", "PUT /headers?a=1 x-one=v1 body=4"},
        {"DELETE", NULL, "DELETE /headers?a=1 x-one=v1 body=0"},
        {"PATCH", "", "PATCH /headers?a=1 x-one=v1 body=0"},
        {"POST", NULL, "POST /headers?a=1 x-one=v1 body=0"},
    };
    const char *hdrs[] = {"X-One: v1", NULL};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct result r;
        result_init(&r);
        struct http_client_opts o = {.method = cases[i].method,
                                     .headers = hdrs,
                                     .body = cases[i].body,
                                     .body_len = cases[i].body ? strlen(cases[i].body) : 0};
        start(&f, &r, &o, "/headers?a=1");
        assert_true(run_until(&f.loop, &r.done, 5000));
        assert_null(r.resp.error);
        assert_int_equal(r.resp.status, 200);
        assert_string_equal(buf_cstr(&r.resp.body), cases[i].want);
        char v[64];
        assert_string_equal(http_response_header(&r.resp, "x-reply", v, sizeof(v)), "yes");
        assert_string_equal(http_response_header(&r.resp, "X-REPLY", v, sizeof(v)), "yes");
        assert_string_equal(http_response_header(&r.resp, "x-multi", v, sizeof(v)), "first");
        assert_null(http_response_header(&r.resp, "x-absent", v, sizeof(v)));
        /* truncation to the caller's buffer */
        char small[3];
        assert_string_equal(http_response_header(&r.resp, "x-multi", small, sizeof(small)), "fi");
        assert_true(r.resp.total_s > 0);
        result_free(&r);
    }
    fx_finish(&f);
}

static void test_streaming_reads(void **state)
{
    (void)state;
    struct fixture f;
    fx_init(&f);
    struct result r;
    result_init(&r);
    struct http_client_opts o = {.on_data = on_data};
    start(&f, &r, &o, "/chunks?n=4");
    assert_true(run_until(&f.loop, &r.done, 5000));
    assert_null(r.resp.error);
    assert_int_equal(r.resp.status, 200);
    assert_string_equal(buf_cstr(&r.seen), "piece-4;piece-3;piece-2;piece-1;");
    assert_true(r.chunks >= 4);           /* one callback per chunk as it arrived */
    assert_int_equal(r.resp.body.len, 0); /* not buffered */
    result_free(&r);

    /* the data callback aborts the transfer */
    result_init(&r);
    r.abort_at = 2;
    struct http_client_opts o2 = {.on_data = on_data};
    start(&f, &r, &o2, "/chunks?n=100");
    assert_true(run_until(&f.loop, &r.done, 5000));
    assert_non_null(r.resp.error);
    assert_string_equal(r.resp.error, "aborted by the data callback");
    assert_int_equal(r.chunks, 2);
    assert_true(run_until(&f.loop, &server_aborts, 2000)); /* the server's producer stops */
    result_free(&r);

    /* the data callback cancels its own request: no on_done */
    result_init(&r);
    r.cancel_at = 2;
    struct http_client_opts o3 = {.on_data = on_data};
    start(&f, &r, &o3, "/chunks?n=100");
    int never = 0;
    for (int i = 0; i < 200 && r.chunks < 2; i++) {
        run_until(&f.loop, &never, 10);
    }
    assert_int_equal(r.chunks, 2);
    run_until(&f.loop, &never, 150);
    assert_int_equal(r.done, 0);
    assert_int_equal(r.chunks, 2);
    assert_int_equal(http_client_active(f.cli), 0);
    result_free(&r);
    fx_finish(&f);
}

static void test_sse(void **state)
{
    (void)state;
    struct fixture f;
    fx_init(&f);
    struct result r;
    result_init(&r);
    struct http_client_opts o = {.on_event = on_event};
    start(&f, &r, &o, "/sse");
    assert_true(run_until(&f.loop, &r.done, 5000));
    assert_null(r.resp.error);
    assert_string_equal(buf_cstr(&r.seen), "a=one;message=two\nlines;message=[DONE];");
    assert_int_equal(r.events, 3);
    result_free(&r);

    /* a non-2xx answer to an SSE request: its body is buffered for on_done */
    result_init(&r);
    struct http_client_opts o2 = {.on_event = on_event};
    start(&f, &r, &o2, "/missing");
    assert_true(run_until(&f.loop, &r.done, 5000));
    assert_null(r.resp.error);
    assert_int_equal(r.resp.status, 404);
    assert_int_equal(r.events, 0);
    assert_non_null(strstr(buf_cstr(&r.resp.body), "\"code\":404"));
    result_free(&r);

    /* the event callback stops the stream */
    result_init(&r);
    r.abort_at = 1;
    struct http_client_opts o3 = {.on_event = on_event};
    start(&f, &r, &o3, "/sse");
    assert_true(run_until(&f.loop, &r.done, 5000));
    assert_non_null(r.resp.error);
    assert_string_equal(r.resp.error, "aborted by the event callback");
    assert_int_equal(r.events, 1);
    result_free(&r);
    fx_finish(&f);
}

static void test_cancel_and_free_in_flight(void **state)
{
    (void)state;
    struct fixture f;
    fx_init(&f);
    struct result r;
    result_init(&r);
    struct http_client_opts o = {0};
    start(&f, &r, &o, "/never");
    int never = 0;
    run_until(&f.loop, &never, 50);
    assert_int_equal(http_client_active(f.cli), 1);
    http_client_cancel(r.req);
    assert_int_equal(http_client_active(f.cli), 0);
    assert_true(run_until(&f.loop, &server_aborts, 2000)); /* server sees the client leave */
    assert_int_equal(r.done, 0);
    result_free(&r);

    /* freeing a client with requests in flight: no callbacks, handles closed */
    char err[128];
    struct http_client *c2 = http_client_new(&f.loop, err, sizeof(err));
    assert_non_null(c2);
    struct result a, b;
    result_init(&a);
    result_init(&b);
    char url[128];
    snprintf(url, sizeof(url), "%s/never", f.base);
    struct http_client_opts oa = {.url = url, .on_done = on_done, .ud = &a};
    struct http_client_opts ob = {.url = url, .on_done = on_done, .ud = &b};
    assert_non_null(http_client_start(c2, &oa, err, sizeof(err)));
    assert_non_null(http_client_start(c2, &ob, err, sizeof(err)));
    run_until(&f.loop, &never, 50);
    http_client_free(c2);
    run_until(&f.loop, &never, 100);
    assert_int_equal(a.done + b.done, 0);
    result_free(&a);
    result_free(&b);
    fx_finish(&f);
}

static void test_refused_and_invalid(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    char err[256] = "";
    struct http_client *c = http_client_new(&loop, err, sizeof(err));
    assert_non_null(c);

    /* a port nobody listens on: bind one, then close it */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    close(fd);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", ntohs(a.sin_port));

    struct result r;
    result_init(&r);
    struct http_client_opts o = {.url = url, .on_done = on_done, .ud = &r};
    assert_non_null(http_client_start(c, &o, err, sizeof(err)));
    assert_true(run_until(&loop, &r.done, 5000));
    assert_int_equal(r.done, 1);
    assert_int_equal(r.resp.status, 0);
    assert_int_equal(r.resp.curl_code, 7); /* CURLE_COULDNT_CONNECT */
    assert_non_null(r.resp.error);
    assert_true(strlen(r.resp.error) > 0);
    result_free(&r);

    /* invalid options */
    struct http_client_opts bad = {.url = "ftp://127.0.0.1/", .on_done = on_done};
    assert_null(http_client_start(c, &bad, err, sizeof(err)));
    assert_non_null(strstr(err, "unsupported URL scheme"));
    struct http_client_opts nodone = {.url = url};
    assert_null(http_client_start(c, &nodone, err, sizeof(err)));
    struct http_client_opts both = {
        .url = url, .on_done = on_done, .on_data = on_data, .on_event = on_event};
    assert_null(http_client_start(c, &both, err, sizeof(err)));

    /* fetch_sync reports the refusal */
    struct http_response resp;
    struct http_client_opts so = {.url = url, .timeout_ms = 2000};
    assert_int_equal(http_fetch_sync(&so, &resp), -ECONNREFUSED);
    assert_non_null(resp.error);
    http_response_free(&resp);

    http_client_free(c);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_many_concurrent(void **state)
{
    (void)state;
    struct fixture f;
    fx_init(&f);
    enum { N = 40 };
    static struct result rs[N];
    int all = 0;
    for (int i = 0; i < N; i++) {
        result_init(&rs[i]);
        struct http_client_opts o = {0};
        start(&f, &rs[i], &o, i % 2 ? "/headers" : "/chunks?n=2");
    }
    for (int spins = 0; spins < 100 && !all; spins++) {
        int never = 0;
        run_until(&f.loop, &never, 20);
        all = 1;
        for (int i = 0; i < N; i++) {
            all &= rs[i].done == 1;
        }
    }
    assert_true(all);
    for (int i = 0; i < N; i++) {
        assert_null(rs[i].resp.error);
        assert_int_equal(rs[i].resp.status, 200);
        assert_string_equal(buf_cstr(&rs[i].resp.body),
                            i % 2 ? "GET /headers x-one=- body=0" : "piece-2;piece-1;");
        result_free(&rs[i]);
    }
    struct http_server_stats st;
    http_server_get_stats(f.srv, &st);
    assert_int_equal(st.requests_total, N);
    fx_finish(&f);
}

/* ---- http_fetch_sync from another thread (the server stays on the main thread: h2o keeps
 * per-thread memory caches that a finished thread would leave behind) ---- */

struct sync_job {
    int port;
    int rc_ok, rc_timeout, rc_404;
    int status_ok, status_404;
    char body[256];
    int error_set;
    atomic_int done;
};

static void *sync_main(void *arg)
{
    struct sync_job *j = arg;
    char url[128];
    struct http_response resp;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/headers", j->port);
    const char *hdrs[] = {"X-One: sync", NULL};
    struct http_client_opts o = {.method = "POST",
                                 .url = url,
                                 .headers = hdrs,
                                 .body = "12345",
                                 .body_len = 5,
                                 .timeout_ms = 5000};
    j->rc_ok = http_fetch_sync(&o, &resp);
    j->status_ok = resp.status;
    snprintf(j->body, sizeof(j->body), "%s", buf_cstr(&resp.body));
    http_response_free(&resp);

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/never", j->port);
    struct http_client_opts ot = {.url = url, .timeout_ms = 100};
    j->rc_timeout = http_fetch_sync(&ot, &resp);
    j->error_set = resp.error != NULL;
    http_response_free(&resp);

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/nothing-here", j->port);
    struct http_client_opts on = {.url = url, .timeout_ms = 5000};
    j->rc_404 = http_fetch_sync(&on, &resp);
    j->status_404 = resp.status;
    http_response_free(&resp);
    atomic_store(&j->done, 1);
    return NULL;
}

static void test_fetch_sync(void **state)
{
    (void)state;
    struct fixture f;
    fx_init(&f);
    struct sync_job j;
    memset(&j, 0, sizeof(j));
    j.port = http_server_port(f.srv);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, sync_main, &j), 0);
    for (int i = 0; i < 500 && !atomic_load(&j.done); i++) {
        int never = 0;
        run_until(&f.loop, &never, 10);
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(atomic_load(&j.done));
    assert_int_equal(j.rc_ok, 0);
    assert_int_equal(j.status_ok, 200);
    assert_string_equal(j.body, "POST /headers x-one=sync body=5");
    assert_int_equal(j.rc_timeout, -ETIMEDOUT);
    assert_true(j.error_set);
    assert_int_equal(j.rc_404, 0);
    assert_int_equal(j.status_404, 404);
    fx_finish(&f);
}

/* ---- raw sockets: errors produced by h2o itself come back as JSON ---- */

struct raw_job {
    int port;
    const char *request;
    size_t request_len;
    char reply[4096];
    atomic_int done;
};

static void *raw_main(void *arg)
{
    struct raw_job *j = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)j->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        send(fd, j->request, j->request_len, MSG_NOSIGNAL);
        size_t got = 0;
        ssize_t n;
        while (got < sizeof(j->reply) - 1 &&
               (n = recv(fd, j->reply + got, sizeof(j->reply) - 1 - got, 0)) > 0) {
            got += (size_t)n;
        }
        j->reply[got] = '\0';
    }
    close(fd);
    atomic_store(&j->done, 1);
    return NULL;
}

static void raw_exchange(struct fixture *f, struct raw_job *j)
{
    pthread_t th;
    j->port = http_server_port(f->srv);
    assert_int_equal(pthread_create(&th, NULL, raw_main, j), 0);
    for (int i = 0; i < 400 && !atomic_load(&j->done); i++) {
        int never = 0;
        run_until(&f->loop, &never, 10);
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(atomic_load(&j->done));
}

static void test_h2o_errors_are_json(void **state)
{
    (void)state;
    struct fixture f;
    fx_init(&f);

    /* broken chunked encoding → 400 */
    struct raw_job j;
    memset(&j, 0, sizeof(j));
    j.request = "POST /headers HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    j.request_len = strlen(j.request);
    raw_exchange(&f, &j);
    assert_true(strncmp(j.reply, "HTTP/1.1 400", 12) == 0);
    assert_non_null(strstr(j.reply, "application/json"));
    assert_non_null(strstr(j.reply, "{\"error\":{\"message\":"));
    assert_non_null(strstr(j.reply, "\"code\":400"));

    /* a request target that is not a path → 404 JSON */
    memset(&j, 0, sizeof(j));
    j.request = "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    j.request_len = strlen(j.request);
    raw_exchange(&f, &j);
    assert_true(strncmp(j.reply, "HTTP/1.1 404", 12) == 0);
    assert_non_null(strstr(j.reply, "\"code\":404"));

    /* HTTP/1.0 streaming: no chunked encoding, the connection ends the body */
    memset(&j, 0, sizeof(j));
    j.request = "GET /chunks?n=2 HTTP/1.0\r\n\r\n";
    j.request_len = strlen(j.request);
    raw_exchange(&f, &j);
    assert_true(strncmp(j.reply, "HTTP/1.1 200", 12) == 0);
    assert_null(strstr(j.reply, "chunked"));
    assert_non_null(strstr(j.reply, "\r\n\r\npiece-2;piece-1;"));

    /* more header lines than h2o accepts (100): h2o writes a canned plain-text 400 itself, before
     * any request exists (so it cannot be made JSON), and closes */
    struct buf big;
    buf_init(&big, 1 << 20);
    buf_appends(&big, "GET /headers HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 150; i++) {
        buf_appendf(&big, "X-H%d: v\r\n", i);
    }
    buf_appends(&big, "\r\n");
    memset(&j, 0, sizeof(j));
    j.request = big.data;
    j.request_len = big.len;
    raw_exchange(&f, &j);
    assert_true(strncmp(j.reply, "HTTP/1.1 400", 12) == 0);
    assert_non_null(strstr(j.reply, "Connection: close"));

    /* a request head longer than h2o's limit (8 KiB + 4 KiB per header slot) */
    buf_reset(&big);
    buf_appends(&big, "GET /headers HTTP/1.1\r\nHost: x\r\nX-Big: ");
    for (int i = 0; i < 450 * 1024 / 8; i++) {
        buf_appends(&big, "abcdefgh");
    }
    buf_appends(&big, "\r\n\r\n");
    memset(&j, 0, sizeof(j));
    j.request = big.data;
    j.request_len = big.len;
    raw_exchange(&f, &j);
    assert_true(strncmp(j.reply, "HTTP/1.1 400", 12) == 0);
    buf_free(&big);
    fx_finish(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buffered_methods_and_headers),
        cmocka_unit_test(test_streaming_reads),
        cmocka_unit_test(test_sse),
        cmocka_unit_test(test_cancel_and_free_in_flight),
        cmocka_unit_test(test_refused_and_invalid),
        cmocka_unit_test(test_many_concurrent),
        cmocka_unit_test(test_fetch_sync),
        cmocka_unit_test(test_h2o_errors_are_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
