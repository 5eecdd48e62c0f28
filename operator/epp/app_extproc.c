/*
 * Envoy ext-proc on --grpc-port (see app_internal.h): the ext-proc thread's decide() hands each
 * request to the main loop, which routes it as the gateway would, and waits for the answer; the
 * decision's debug headers are made there too, so the ext-proc thread never reads the datastore.
 * The end of each exchange goes back to the loop for the in-flight accounting.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/list.h"
#include "lib/log.h"
#include "lib/http_server.h"
#include "lib/otlp.h"
#include "lib/trace.h"
#include "operator/epp/gateway.h"
#include "operator/epp/app_internal.h"
#include "operator/epp/extproc/extproc.h"

/* One exchange: what the loop decided, kept until on_done. */
struct exchange {
    struct epp_decision d; /* body freed once sent */
    uint64_t ep_id;
    char served_addr[80];
    struct extproc_headers response_headers; /* added to the response */
};

enum job_kind { JOB_DECIDE, JOB_DONE };

struct job {
    struct list_node link;
    enum job_kind kind;
    /* JOB_DECIDE: the caller waits on cv until done */
    const struct extproc_request *req;
    struct extproc_decision *dec;
    bool done;
    /* JOB_DONE */
    struct exchange *x;
    struct extproc_outcome outcome;
    char served[80];
};

struct app_extproc {
    struct epp_app *a;
    struct extproc_server *srv;
    uv_async_t async;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    struct list_node jobs; /* guarded by lock */
    bool stopping;         /* guarded by lock */
};

static const char *header_of(void *ud, const char *name)
{
    const struct extproc_request *req = ud;
    for (size_t i = 0; i < req->n_headers; i++) {
        if (strcmp(req->headers[i].name, name) == 0) {
            return req->headers[i].value;
        }
    }
    return NULL;
}

static void reject(struct extproc_decision *dec, int status, const char *message,
                   const char *request_id)
{
    struct buf b;
    buf_init(&b, 4096);
    http_error_body(&b, status, epp_error_type(status), message, NULL);
    extproc_decision_reject(dec, status, buf_cstr(&b));
    extproc_headers_add(&dec->immediate_headers, "content-type", "application/json");
    if (request_id && *request_id) {
        extproc_headers_add(&dec->immediate_headers, "x-request-id", request_id);
    }
    buf_free(&b);
}

/* Loop thread: routes one request into dec. */
static void decide_on_loop(struct app_extproc *xp, const struct extproc_request *req,
                           struct extproc_decision *dec)
{
    struct epp_router *r = &xp->a->router;
    struct exchange *x = calloc(1, sizeof(*x));
    if (!x) {
        reject(dec, 500, "out of memory", NULL);
        return;
    }
    struct epp_route_in in = {
        .path = req->path,
        .body = (const char *)req->body,
        .body_len = req->body_len,
        .header = header_of,
        .header_ud = (void *)req,
        .subset = req->subset,
        .n_subset = (int)req->n_subset,
    };
    if (req->has_subset && req->n_subset == 0) {
        free(x);
        reject(dec, 503, "no endpoint of the proxy's subset hint is available", NULL);
        return;
    }
    struct trace_ctx tin;
    struct span *sp =
        xp->a->otlp
            ? trace_server_span(otlp_tracer(xp->a->otlp, otlp_service_name("tandem-epp"), NULL),
                                "ext_proc schedule", header_of((void *)req, "traceparent"), &tin)
            : NULL;
    int rrc = epp_route(r, &in, &x->d);
    epp_trace_decision(sp, &x->d);
    char tp[TRACEPARENT_LEN + 1];
    if (rrc == 0 && x->d.status == 0 && span_traceparent(sp, NULL, tp) == 0) {
        /* the model server continues this span (unless Envoy's own tracing replaces it) */
        extproc_headers_add(&dec->set_headers, "traceparent", tp);
    }
    span_end(sp);
    if (rrc != 0 || x->d.status != 0) {
        reject(dec, x->d.status ? x->d.status : 500, x->d.message[0] ? x->d.message : "failed",
               x->d.request_id);
        epp_decision_free(&x->d);
        free(x);
        return;
    }
    struct buf dest;
    buf_init(&dest, 4096);
    for (int i = 0; i < x->d.n_targets; i++) {
        buf_appendf(&dest, "%s%s", i ? "," : "", x->d.targets[i]->addr);
    }
    extproc_decision_route(dec, buf_cstr(&dest));
    buf_free(&dest);
    struct epp_endpoint *ep = x->d.targets[0];
    x->ep_id = ep->id;
    extproc_headers_add(&dec->remove_headers, "x-prefiller-host-port", NULL);
    extproc_headers_add(&dec->set_headers, "x-request-id", x->d.request_id);
    if (x->d.prefill) {
        extproc_headers_add(&dec->set_headers, "x-prefiller-host-port", x->d.prefill->addr);
        extproc_headers_add(&x->response_headers, "x-prefill-pod", x->d.prefill->name);
    }
    if (x->d.body) {
        extproc_decision_set_body(dec, x->d.body, x->d.body_len);
    }
    char tok[512];
    extproc_headers_add(&x->response_headers, "x-selected-pod", ep->name);
    extproc_headers_add(&x->response_headers, "x-cache-hit",
                        x->d.cached_blocks > 0 ? "true" : "false");
    if (epp_router_session_token(ep, tok, sizeof tok) == 0) {
        extproc_headers_add(&x->response_headers, "x-session-token", tok);
    }
    epp_decision_free(&x->d); /* the body went into dec */
    epp_route_started(r, &x->d, ep);
    dec->exchange = x;
}

static void done_on_loop(struct app_extproc *xp, struct job *j)
{
    struct epp_router *r = &xp->a->router;
    struct exchange *x = j->x;
    bool ok = j->outcome.end == EXTPROC_END_COMPLETE && j->outcome.status >= 200 &&
              j->outcome.status < 300;
    epp_route_finished(r, &x->d, x->ep_id, ok);
    extproc_headers_free(&x->response_headers);
    free(x);
}

static void on_async(uv_async_t *h)
{
    struct app_extproc *xp = h->data;
    pthread_mutex_lock(&xp->lock);
    struct list_node q;
    list_init(&q);
    struct list_node *n, *tmp;
    list_for_each_safe(&xp->jobs, n, tmp)
    {
        list_unlink(n);
        list_push_back(&q, n);
    }
    pthread_mutex_unlock(&xp->lock);
    list_for_each_safe(&q, n, tmp)
    {
        struct job *j = list_entry(n, struct job, link);
        list_unlink(n);
        if (j->kind == JOB_DECIDE) {
            decide_on_loop(xp, j->req, j->dec);
            pthread_mutex_lock(&xp->lock);
            j->done = true; /* the waiting thread owns j again */
            pthread_cond_broadcast(&xp->cv);
            pthread_mutex_unlock(&xp->lock);
        } else {
            done_on_loop(xp, j);
            free(j);
        }
    }
}

/* ---- the ext-proc thread ---- */

static void x_decide(void *ctx, const struct extproc_request *req, struct extproc_decision *d)
{
    struct app_extproc *xp = ctx;
    struct job j = {.kind = JOB_DECIDE, .req = req, .dec = d};
    pthread_mutex_lock(&xp->lock);
    if (xp->stopping) {
        pthread_mutex_unlock(&xp->lock);
        reject(d, 503, "the endpoint picker is shutting down", NULL);
        return;
    }
    list_push_back(&xp->jobs, &j.link);
    uv_async_send(&xp->async);
    while (!j.done && !xp->stopping) {
        pthread_cond_wait(&xp->cv, &xp->lock);
    }
    if (!j.done) {
        list_unlink(&j.link); /* the loop will not get to it */
        pthread_mutex_unlock(&xp->lock);
        reject(d, 503, "the endpoint picker is shutting down", NULL);
        return;
    }
    pthread_mutex_unlock(&xp->lock);
}

static void x_response(void *ctx, void *exchange, const struct extproc_response *resp,
                       struct extproc_headers *add)
{
    (void)ctx;
    (void)resp;
    struct exchange *x = exchange;
    for (size_t i = 0; x && i < x->response_headers.n; i++) {
        extproc_headers_add(add, x->response_headers.v[i].name, x->response_headers.v[i].value);
    }
}

static void x_done(void *ctx, void *exchange, const struct extproc_outcome *outcome)
{
    struct app_extproc *xp = ctx;
    if (!exchange) {
        return;
    }
    struct job *j = calloc(1, sizeof(*j));
    if (!j) {
        return; /* the in-flight count of that endpoint stays one too high */
    }
    j->kind = JOB_DONE;
    j->x = exchange;
    j->outcome = *outcome;
    pthread_mutex_lock(&xp->lock);
    list_push_back(&xp->jobs, &j->link);
    pthread_mutex_unlock(&xp->lock);
    uv_async_send(&xp->async);
}

static void on_closed(uv_handle_t *h)
{
    struct app_extproc *xp = h->data;
    pthread_mutex_destroy(&xp->lock);
    pthread_cond_destroy(&xp->cv);
    free(xp);
}

int app_extproc_start(struct epp_app *a)
{
    if (a->f->grpc_port == 0) {
        return 0;
    }
    struct app_extproc *xp = calloc(1, sizeof(*xp));
    if (!xp) {
        return -1;
    }
    xp->a = a;
    pthread_mutex_init(&xp->lock, NULL);
    pthread_cond_init(&xp->cv, NULL);
    list_init(&xp->jobs);
    uv_async_init(&a->loop, &xp->async, on_async);
    xp->async.data = xp;
    a->xp = xp;
    struct extproc_config cfg = {.address = a->f->host, .port = a->f->grpc_port};
    struct extproc_callbacks cb = {
        .ctx = xp, .decide = x_decide, .on_response = x_response, .on_done = x_done};
    int rc = extproc_start(&cfg, &cb, &xp->srv);
    if (rc != 0) {
        log_error("ext-proc on %s:%d: %s", a->f->host, a->f->grpc_port, strerror(-rc));
        return -1;
    }
    return 0;
}

void app_extproc_stop(struct epp_app *a)
{
    struct app_extproc *xp = a->xp;
    if (!xp) {
        return;
    }
    pthread_mutex_lock(&xp->lock);
    xp->stopping = true;
    pthread_cond_broadcast(&xp->cv);
    pthread_mutex_unlock(&xp->lock);
    extproc_stop(xp->srv); /* joins its thread: no callback after this */
    xp->srv = NULL;
    on_async(&xp->async); /* the ends it reported */
    a->xp = NULL;
    uv_close((uv_handle_t *)&xp->async, on_closed);
}

void app_extproc_ready(struct epp_app *a, bool ready)
{
    if (a->xp && a->xp->srv) {
        extproc_set_ready(a->xp->srv, ready);
    }
}
