/*
 * A scripted HTTP server for the lib/kube client and watch tests: lib/http_server.h on a libuv
 * loop in its own thread, bound to 127.0.0.1 on an ephemeral port. Every request (any method, any
 * path) takes the next reply of the script (the last one repeats) and is recorded: method, target,
 * headers of interest, body, arrival time and the number of connections accepted so far. A reply
 * is a status + body (+ Retry-After), a delayed answer, a request that is never answered, or a
 * chunked stream sent piece by piece (optionally left open).
 *
 * Included by the tests (static functions only); not a library.
 */
#ifndef TANDEM_KUBE_TEST_CLIENT_SERVER_H
#define TANDEM_KUBE_TEST_CLIENT_SERVER_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "lib/clock.h"
#include "lib/http_server.h"

#define TS_MAX_SCRIPT  32
#define TS_MAX_RECORDS 256
#define TS_MAX_CHUNKS  16

struct ts_reply {
    int status;                        /* 0 → 200 */
    const char *body;                  /* NULL → "" */
    const char *content_type;          /* NULL → application/json */
    const char *retry_after;           /* Retry-After header value, or NULL */
    int hang;                          /* never answer (until the client goes away) */
    int delay_ms;                      /* answer after this long */
    const char *chunks[TS_MAX_CHUNKS]; /* non-NULL chunks[0]: stream these pieces */
    int chunk_interval_ms;             /* between pieces */
    int keep_open;                     /* after the last piece, leave the stream open */
    const char *require_token;         /* answer 401 unless "Bearer <this>" is sent */
};

struct ts_record {
    char method[16];
    char target[1024];
    char auth[256];
    char accept[128];
    char content_type[128];
    char user_agent[128];
    char label_selector[256]; /* decoded query parameter */
    char body[2048];
    size_t body_len;
    uint64_t at_ms;
    uint64_t connections; /* connections accepted when this request arrived */
};

struct ts_server {
    pthread_t thread;
    uv_loop_t loop;
    uv_async_t stop_async;
    struct http_server *srv;
    int port;
    char base[64];

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;
    int done; /* the loop has ended; the thread is parked */
    struct ts_reply script[TS_MAX_SCRIPT];
    int nscript;
    int next;
    struct ts_record records[TS_MAX_RECORDS];
    int nrecords;
    int aborts;
};

static uint64_t ts_now_ms(void)
{
    return (uint64_t)tandem_now_ms();
}

/* ---- on the server thread ---- */

struct ts_pending {
    uv_timer_t timer;
    struct http_request *req;
    struct ts_server *ts;
    struct ts_reply reply;
    int next_chunk;
    int closing;
};

static void ts_pending_closed(uv_handle_t *h)
{
    free(h->data);
}

static void ts_pending_close(struct ts_pending *p)
{
    if (!p->closing) {
        p->closing = 1;
        uv_timer_stop(&p->timer);
        uv_close((uv_handle_t *)&p->timer, ts_pending_closed);
    }
}

static void ts_respond(struct http_request *req, const struct ts_reply *r)
{
    if (r->retry_after) {
        http_add_header(req, "Retry-After", r->retry_after);
    }
    const char *body = r->body ? r->body : "";
    http_respond(req, r->status ? r->status : 200,
                 r->content_type ? r->content_type : "application/json", body, strlen(body));
}

static void ts_on_abort(struct http_request *req, void *ud, const char *reason)
{
    (void)req;
    (void)reason;
    struct ts_pending *p = ud;
    pthread_mutex_lock(&p->ts->mu);
    p->ts->aborts++;
    pthread_mutex_unlock(&p->ts->mu);
    p->req = NULL;
    ts_pending_close(p);
}

static void ts_tick(uv_timer_t *t)
{
    struct ts_pending *p = t->data;
    if (!p->req) {
        ts_pending_close(p);
        return;
    }
    if (!p->reply.chunks[0]) { /* a delayed plain answer */
        ts_respond(p->req, &p->reply);
        p->req = NULL;
        ts_pending_close(p);
        return;
    }
    const char *chunk = p->next_chunk < TS_MAX_CHUNKS ? p->reply.chunks[p->next_chunk] : NULL;
    if (chunk) {
        http_stream_send(p->req, chunk, strlen(chunk));
        p->next_chunk++;
        return;
    }
    uv_timer_stop(&p->timer);
    if (!p->reply.keep_open) {
        http_stream_end(p->req);
        p->req = NULL;
        ts_pending_close(p);
    }
    /* keep_open: the request stays open until the client goes away (on_abort closes p) */
}

static void ts_handler(struct http_request *req, void *ud)
{
    struct ts_server *ts = ud;
    struct http_server_stats st;
    http_server_get_stats(ts->srv, &st);
    struct ts_reply reply;
    pthread_mutex_lock(&ts->mu);
    if (ts->nrecords < TS_MAX_RECORDS) {
        struct ts_record *rec = &ts->records[ts->nrecords];
        const char *h;
        memset(rec, 0, sizeof(*rec));
        snprintf(rec->method, sizeof(rec->method), "%s", http_request_method(req));
        snprintf(rec->target, sizeof(rec->target), "%s", http_request_target(req));
        h = http_request_header(req, "Authorization");
        snprintf(rec->auth, sizeof(rec->auth), "%s", h ? h : "");
        h = http_request_header(req, "Accept");
        snprintf(rec->accept, sizeof(rec->accept), "%s", h ? h : "");
        h = http_request_header(req, "Content-Type");
        snprintf(rec->content_type, sizeof(rec->content_type), "%s", h ? h : "");
        h = http_request_header(req, "User-Agent");
        snprintf(rec->user_agent, sizeof(rec->user_agent), "%s", h ? h : "");
        h = http_request_query_param(req, "labelSelector");
        snprintf(rec->label_selector, sizeof(rec->label_selector), "%s", h ? h : "");
        size_t blen = 0;
        const void *b = http_request_body(req, &blen);
        rec->body_len = blen;
        if (b) {
            memcpy(rec->body, b, blen < sizeof(rec->body) - 1 ? blen : sizeof(rec->body) - 1);
        }
        rec->at_ms = ts_now_ms();
        rec->connections = st.connections_accepted;
        ts->nrecords++;
    }
    if (ts->nscript == 0) {
        memset(&reply, 0, sizeof(reply));
        reply.body = "{}";
    } else {
        int i = ts->next < ts->nscript ? ts->next : ts->nscript - 1;
        reply = ts->script[i];
        ts->next++;
    }
    pthread_mutex_unlock(&ts->mu);

    if (reply.require_token) {
        char want[300];
        const char *auth = http_request_header(req, "Authorization");
        snprintf(want, sizeof(want), "Bearer %s", reply.require_token);
        if (!auth || strcmp(auth, want) != 0) {
            const char *body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                               "\"reason\":\"Unauthorized\",\"message\":\"Unauthorized\","
                               "\"code\":401}";
            http_respond(req, 401, "application/json", body, strlen(body));
            return;
        }
    }
    if (!reply.hang && !reply.delay_ms && !reply.chunks[0]) {
        ts_respond(req, &reply);
        return;
    }
    struct ts_pending *p = calloc(1, sizeof(*p));
    if (!p) {
        http_respond(req, 500, "text/plain", "oom", 3);
        return;
    }
    p->req = req;
    p->ts = ts;
    p->reply = reply;
    uv_timer_init(&ts->loop, &p->timer);
    p->timer.data = p;
    http_request_on_abort(req, ts_on_abort, p);
    if (reply.hang) {
        return; /* the timer stays idle; closed on abort */
    }
    if (reply.chunks[0]) {
        http_stream_start(req, reply.status ? reply.status : 200, "application/json");
        uv_timer_start(&p->timer, ts_tick, 0,
                       (uint64_t)(reply.chunk_interval_ms > 0 ? reply.chunk_interval_ms : 1));
    } else {
        uv_timer_start(&p->timer, ts_tick, (uint64_t)reply.delay_ms, 0);
    }
}

static void ts_drained(struct http_server *srv, void *ud)
{
    struct ts_server *ts = ud;
    http_server_free(srv);
    ts->srv = NULL;
    uv_close((uv_handle_t *)&ts->stop_async, NULL);
}

static void ts_on_stop(uv_async_t *a)
{
    struct ts_server *ts = a->data;
    http_server_drain(ts->srv, 0, ts_drained, ts);
}

static void *ts_main(void *arg)
{
    struct ts_server *ts = arg;
    char err[256] = "";
    int ok = uv_loop_init(&ts->loop) == 0;
    if (ok) {
        struct http_server_config cfg;
        http_server_config_init(&cfg);
        cfg.probe_ms = 20;
        cfg.max_body = 8 * 1024 * 1024;
        ts->srv = http_server_new(&ts->loop, &cfg, err, sizeof(err));
        ok = ts->srv && http_server_route(ts->srv, NULL, "/", 1, ts_handler, ts) == 0 &&
             http_server_start(ts->srv, err, sizeof(err)) == 0;
        uv_async_init(&ts->loop, &ts->stop_async, ts_on_stop);
        ts->stop_async.data = ts;
    }
    pthread_mutex_lock(&ts->mu);
    ts->port = ok ? http_server_port(ts->srv) : -1;
    ts->ready = 1;
    pthread_cond_broadcast(&ts->cv);
    pthread_mutex_unlock(&ts->mu);
    if (!ok) {
        fprintf(stderr, "test server: %s\n", err);
        return NULL;
    }
    uv_run(&ts->loop, UV_RUN_DEFAULT);
    uv_loop_close(&ts->loop);
    /* h2o keeps per-thread recycling caches that are reachable only while the thread lives
     * (docs/http.md): park the thread until the process exits instead of ending it, so that
     * LeakSanitizer does not report them. ts is not touched after done is set. */
    static pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t park_cv = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&ts->mu);
    ts->done = 1;
    pthread_cond_broadcast(&ts->cv);
    pthread_mutex_unlock(&ts->mu);
    pthread_mutex_lock(&park_mu);
    for (;;) {
        pthread_cond_wait(&park_cv, &park_mu);
    }
    return NULL;
}

/* ---- from the test thread ---- */

static struct ts_server *ts_start(void)
{
    struct ts_server *ts = calloc(1, sizeof(*ts));
    if (!ts) {
        return NULL;
    }
    pthread_mutex_init(&ts->mu, NULL);
    pthread_cond_init(&ts->cv, NULL);
    if (pthread_create(&ts->thread, NULL, ts_main, ts) != 0) {
        free(ts);
        return NULL;
    }
    pthread_mutex_lock(&ts->mu);
    while (!ts->ready) {
        pthread_cond_wait(&ts->cv, &ts->mu);
    }
    pthread_mutex_unlock(&ts->mu);
    if (ts->port <= 0) {
        pthread_join(ts->thread, NULL);
        free(ts);
        return NULL;
    }
    snprintf(ts->base, sizeof(ts->base), "http://127.0.0.1:%d", ts->port);
    return ts;
}

static void ts_stop(struct ts_server *ts)
{
    if (!ts) {
        return;
    }
    uv_async_send(&ts->stop_async);
    pthread_mutex_lock(&ts->mu);
    while (!ts->done) {
        pthread_cond_wait(&ts->cv, &ts->mu);
    }
    pthread_mutex_unlock(&ts->mu);
    pthread_detach(ts->thread);
    pthread_mutex_destroy(&ts->mu);
    pthread_cond_destroy(&ts->cv);
    free(ts);
}

/* Replaces the script and clears the records. */
static void ts_script(struct ts_server *ts, const struct ts_reply *replies, int n)
{
    pthread_mutex_lock(&ts->mu);
    memset(ts->script, 0, sizeof(ts->script));
    for (int i = 0; i < n && i < TS_MAX_SCRIPT; i++) {
        ts->script[i] = replies[i];
    }
    ts->nscript = n < TS_MAX_SCRIPT ? n : TS_MAX_SCRIPT;
    ts->next = 0;
    ts->nrecords = 0;
    pthread_mutex_unlock(&ts->mu);
}

static TANDEM_UNUSED int ts_count(struct ts_server *ts)
{
    pthread_mutex_lock(&ts->mu);
    int n = ts->nrecords;
    pthread_mutex_unlock(&ts->mu);
    return n;
}

/* A copy of record i (zeroed when absent). */
static TANDEM_UNUSED struct ts_record ts_get(struct ts_server *ts, int i)
{
    struct ts_record r;
    memset(&r, 0, sizeof(r));
    pthread_mutex_lock(&ts->mu);
    if (i >= 0 && i < ts->nrecords) {
        r = ts->records[i];
    }
    pthread_mutex_unlock(&ts->mu);
    return r;
}

#endif /* TANDEM_KUBE_TEST_CLIENT_SERVER_H */
