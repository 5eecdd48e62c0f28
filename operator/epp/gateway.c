/*
 * Gateway mode (see gateway.h).
 */
#include "operator/epp/gateway.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/http_client.h"
#include "lib/json.h"
#include "lib/log.h"
#include "lib/trace.h"

#define MAX_UP_HEADERS 16

/* Client headers that travel to the model server; everything else (x-prefiller-host-port above
 * all: only the EPP decides where a prefill goes) stays here. */
static const char *const passed_headers[] = {
    "authorization", "accept",     "x-request-timeout",   "traceparent",
    "tracestate",    "user-agent", "openai-organization", "openai-project",
};

/* Response headers of the model server (its sidecar) that reach the client. */
static const char *const returned_headers[] = {
    "x-kv-transfer-time-ms", "x-prefill-time-ms",    "x-decode-time-ms",
    "x-tandem-prefill-host", "x-tandem-decode-host", "x-tandem-pd-fallback",
};

struct epp_gateway {
    uv_loop_t *loop;
    struct epp_router *router;
    struct epp_ds *ds;
    struct epp_gateway_config c;
    struct http_server *srv;
    struct http_client *http;
    void (*done)(void *ud);
    void *done_ud;
    struct metric *retries; /* tandem_epp_gateway_retries_total */
};

struct gw_req {
    struct epp_gateway *g;
    struct http_request *req;
    struct epp_decision d;
    int attempt;    /* index into d.targets of the endpoint being tried */
    uint64_t ep_id; /* that endpoint */
    struct http_client_req *up;
    bool counted; /* epp_route_started ran for ep_id */
    bool started; /* the answer to the client started */
    int status;
    double sched_ms;
    const char *path;
    struct span *span;   /* the request's SERVER span (ends in server_span_done), or NULL */
    struct span *proxy;  /* the attempt's CLIENT span */
    struct trace_ctx in; /* the client's traceparent, passed on when nothing is recorded */
};

/* Ends the attempt's CLIENT span; error NULL: it went through. */
static void end_proxy(struct gw_req *r, const char *error)
{
    if (error) {
        span_set_status(r->proxy, SPAN_STATUS_ERROR, error);
    }
    span_end(r->proxy);
    r->proxy = NULL;
}

static void server_span_done(void *ud, int status, double seconds)
{
    struct span *s = ud;
    (void)seconds;
    span_set_int(s, "http.response.status_code", status);
    if (status >= 500 || status == 499) {
        span_set_status(s, SPAN_STATUS_ERROR, status == 499 ? "client disconnected" : NULL);
    }
    span_end(s);
}

static void gw_free(struct gw_req *r)
{
    end_proxy(r, "abandoned");
    epp_decision_free(&r->d);
    free(r);
}

static void finish_attempt(struct gw_req *r, bool ok)
{
    if (r->counted) {
        epp_route_finished(r->g->router, &r->d, r->ep_id, ok);
        r->counted = false;
    }
}

static const char *req_header(void *ud, const char *name)
{
    return http_request_header(ud, name);
}

static void respond_error(struct gw_req *r, int status, const char *msg)
{
    if (r->d.request_id[0]) {
        http_add_header(r->req, "x-request-id", r->d.request_id);
    }
    http_respond_error(r->req, status, epp_error_type(status), msg, NULL);
}

static void on_client_abort(struct http_request *req, void *ud, const char *reason)
{
    struct gw_req *r = ud;
    (void)req;
    log_debug("gateway: request %s: %s", r->d.request_id, reason);
    if (r->up) {
        http_client_cancel(r->up);
        r->up = NULL;
    }
    end_proxy(r, reason);
    finish_attempt(r, false);
    gw_free(r);
}

static void add_debug_headers(struct gw_req *r, const struct http_response *resp)
{
    struct http_request *req = r->req;
    struct epp_endpoint *ep = epp_router_endpoint(r->g->router, r->ep_id);
    char v[160];
    http_add_header(req, "x-request-id", r->d.request_id);
    if (ep) {
        http_add_header(req, "x-selected-pod", ep->name);
        http_add_header(req, "x-decode-pod", ep->name);
        if (epp_router_session_token(ep, v, sizeof v) == 0) {
            http_add_header(req, "x-session-token", v);
        }
    }
    struct epp_endpoint *pf =
        r->d.prefill ? epp_router_endpoint(r->g->router, r->d.prefill_id) : NULL;
    if (pf) {
        http_add_header(req, "x-prefill-pod", pf->name);
    }
    http_add_header(req, "x-cache-hit",
                    r->attempt == 0 && r->d.cached_blocks > 0 ? "true" : "false");
    int64_t cached =
        r->d.total_blocks > 0 ? (int64_t)(r->d.hit_ratio * (double)r->d.prompt_tokens + 0.5) : 0;
    snprintf(v, sizeof v, "%lld", (long long)(r->attempt == 0 ? cached : 0));
    http_add_header(req, "x-cache-prefix-length", v);
    snprintf(v, sizeof v, "%.3f", r->sched_ms);
    http_add_header(req, "x-scheduling-time-ms", v);
    for (size_t i = 0; resp && i < ARRAY_SIZE(returned_headers); i++) {
        if (http_response_header(resp, returned_headers[i], v, sizeof v)) {
            http_add_header(req, returned_headers[i], v);
        }
    }
}

static void up_head(void *ud, const struct http_response *resp)
{
    struct gw_req *r = ud;
    char ct[128];
    r->started = true;
    r->status = resp->status;
    span_set_int(r->proxy, "http.response.status_code", resp->status);
    add_debug_headers(r, resp);
    if (!http_response_header(resp, "content-type", ct, sizeof ct)) {
        snprintf(ct, sizeof ct, "application/json");
    }
    http_stream_start(r->req, resp->status, ct);
}

static int up_data(void *ud, const char *data, size_t len)
{
    struct gw_req *r = ud;
    if (http_stream_send(r->req, data, len) != 0) {
        log_warn("gateway: request %s: the client does not keep up; cutting the stream",
                 r->d.request_id);
        return -1;
    }
    return 0;
}

static void try_next(struct gw_req *r);

static void up_done(void *ud, struct http_response *resp)
{
    struct gw_req *r = ud;
    r->up = NULL;
    if (!r->started) {
        /* nothing came back: the endpoint is unreachable; the next one may serve */
        struct epp_endpoint *ep = epp_router_endpoint(r->g->router, r->ep_id);
        log_warn("gateway: request %s: %s did not answer: %s", r->d.request_id,
                 ep ? ep->addr : "the endpoint", resp->error ? resp->error : "no response");
        end_proxy(r, resp->error ? resp->error : "no response");
        epp_route_failed(r->g->router, r->ep_id);
        finish_attempt(r, false);
        r->attempt++;
        if (r->g->retries) {
            metric_inc(r->g->retries, 1);
        }
        try_next(r);
        return;
    }
    if (resp->error) {
        log_warn("gateway: request %s: the answer broke off: %s", r->d.request_id, resp->error);
    }
    end_proxy(r, resp->error ? resp->error : r->status >= 500 ? "the model server failed" : NULL);
    finish_attempt(r, !resp->error && r->status >= 200 && r->status < 300);
    http_request_on_abort(r->req, NULL, NULL);
    if (resp->error) {
        http_request_abort(r->req, 502, "the model server's answer broke off");
    } else {
        http_stream_end(r->req);
    }
    gw_free(r);
}

/* The upstream request's headers into hdrs (NULL-terminated), backed by hbuf. */
static void build_headers(struct gw_req *r, const struct epp_endpoint *ep,
                          char hbuf[MAX_UP_HEADERS][512], const char **hdrs)
{
    int n = 0;
    snprintf(hbuf[n++], 512, "Content-Type: application/json");
    snprintf(hbuf[n++], 512, "x-request-id: %s", r->d.request_id);
    snprintf(hbuf[n++], 512, "x-gateway-destination-endpoint: %s", ep->addr);
    struct epp_endpoint *pf =
        r->d.prefill ? epp_router_endpoint(r->g->router, r->d.prefill_id) : NULL;
    if (pf) {
        snprintf(hbuf[n++], 512, "x-prefiller-host-port: %s", pf->addr);
    }
    char tp[TRACEPARENT_LEN + 1];
    bool own_tp = r->span && span_traceparent(r->proxy, &r->in, tp) == 0;
    if (own_tp) { /* the attempt's span is the upstream's parent */
        snprintf(hbuf[n++], 512, "traceparent: %s", tp);
    }
    for (size_t i = 0; i < ARRAY_SIZE(passed_headers) && n < MAX_UP_HEADERS; i++) {
        if (own_tp && strcmp(passed_headers[i], "traceparent") == 0) {
            continue;
        }
        const char *v = http_request_header(r->req, passed_headers[i]);
        if (v && strlen(v) < 400) {
            snprintf(hbuf[n++], 512, "%s: %s", passed_headers[i], v);
        }
    }
    for (int i = 0; i < n; i++) {
        hdrs[i] = hbuf[i];
    }
    hdrs[n] = NULL;
}

/* Sends the request to the next ranked endpoint still in the pool, or gives up. */
static void try_next(struct gw_req *r)
{
    struct epp_gateway *g = r->g;
    for (; r->attempt < r->d.n_targets; r->attempt++) {
        struct epp_endpoint *ep = epp_router_endpoint(g->router, r->d.target_ids[r->attempt]);
        if (!ep || ep->ejected_until_ms > tandem_now_ms()) {
            continue;
        }
        char url[2048], hbuf[MAX_UP_HEADERS][512], err[256] = "";
        const char *hdrs[MAX_UP_HEADERS + 1];
        snprintf(url, sizeof url, "http://%s%s", ep->addr, http_request_target(r->req));
        r->proxy = span_child(r->span, "proxy", SPAN_KIND_CLIENT);
        span_set_str(r->proxy, "x-request-id", r->d.request_id);
        span_set_str(r->proxy, "server.address", ep->addr);
        span_set_str(r->proxy, "tandem.pod", ep->name);
        span_set_int(r->proxy, "tandem.attempt", r->attempt);
        build_headers(r, ep, hbuf, hdrs);
        size_t len = 0;
        const void *body = r->d.body ? r->d.body : http_request_body(r->req, &len);
        if (r->d.body) {
            len = r->d.body_len;
        }
        struct http_client_opts o = {
            .method = http_request_method(r->req),
            .url = url,
            .headers = hdrs,
            .body = body,
            .body_len = len,
            .timeout_ms = g->c.upstream_timeout_ms,
            .connect_timeout_ms = 2000,
            .on_head = up_head,
            .on_data = up_data,
            .on_done = up_done,
            .ud = r,
        };
        r->ep_id = ep->id;
        r->up = http_client_start(g->http, &o, err, sizeof err);
        if (!r->up) {
            log_error("gateway: request %s: %s", r->d.request_id, err);
            end_proxy(r, err);
            continue;
        }
        epp_route_started(g->router, &r->d, ep);
        r->counted = true;
        return;
    }
    http_request_on_abort(r->req, NULL, NULL);
    respond_error(r, 503, "no model server could be reached for this request");
    gw_free(r);
}

void epp_trace_decision(struct span *sched, const struct epp_decision *d)
{
    span_set_str(sched, "x-request-id", d->request_id);
    if (d->status != 0) {
        span_set_int(sched, "tandem.decision.status", d->status);
        span_set_status(sched, SPAN_STATUS_ERROR, d->message);
        return;
    }
    span_set_str(sched, "tandem.target_model", d->model);
    if (d->n_targets > 0 && d->targets[0]) {
        span_set_str(sched, "tandem.decode_pod", d->targets[0]->name);
        span_set_str(sched, "tandem.decode_address", d->targets[0]->addr);
    }
    span_set_int(sched, "tandem.candidates", d->n_targets);
    if (d->prefill) {
        span_set_str(sched, "tandem.prefill_pod", d->prefill->name);
        span_set_str(sched, "tandem.prefill_address", d->prefill->addr);
    }
    span_set_bool(sched, "tandem.pd", d->prefill != NULL);
    span_set_bool(sched, "tandem.cache_hit", d->cached_blocks > 0);
    int64_t cached =
        d->total_blocks > 0 ? (int64_t)(d->hit_ratio * (double)d->prompt_tokens + 0.5) : 0;
    span_set_int(sched, "tandem.cache_prefix_length", cached);
    span_set_int(sched, "tandem.prompt_tokens", d->prompt_tokens);
    span_set_bool(sched, "tandem.sheddable", d->sheddable);
}

/* The schedule span's attributes (the decision), then its end. */
static void trace_decision(struct gw_req *r, struct span *sched)
{
    span_set_str(r->span, "x-request-id", r->d.request_id);
    if (r->d.status == 0) {
        span_set_str(r->span, "gen_ai.request.model", r->d.model);
    }
    epp_trace_decision(sched, &r->d);
    span_end(sched);
}

static void h_infer(struct http_request *req, void *ud)
{
    struct epp_gateway *g = ud;
    struct gw_req *r = calloc(1, sizeof(*r));
    if (!r) {
        http_respond_error(req, 500, NULL, "out of memory", NULL);
        return;
    }
    r->g = g;
    r->req = req;
    if (g->c.tracer) {
        char name[96];
        snprintf(name, sizeof name, "%s %.64s", http_request_method(req), http_request_path(req));
        r->span =
            trace_server_span(g->c.tracer, name, http_request_header(req, "traceparent"), &r->in);
        if (r->span) {
            span_set_str(r->span, "http.request.method", http_request_method(req));
            span_set_str(r->span, "url.path", http_request_path(req));
            span_set_str(r->span, "client.address", http_request_peer(req));
            http_request_on_done(req, server_span_done, r->span);
        }
    }
    size_t len = 0;
    const char *body = http_request_body(req, &len);
    struct epp_route_in in = {
        .path = http_request_path(req),
        .body = body,
        .body_len = len,
        .header = req_header,
        .header_ud = req,
    };
    struct span *sched = span_child(r->span, "schedule", SPAN_KIND_INTERNAL);
    int64_t t0 = tandem_now_ns();
    if (epp_route(g->router, &in, &r->d) != 0) {
        span_set_status(sched, SPAN_STATUS_ERROR, "out of memory");
        span_end(sched);
        http_respond_error(req, 500, NULL, "out of memory", NULL);
        gw_free(r);
        return;
    }
    r->sched_ms = (double)(tandem_now_ns() - t0) / 1e6;
    if (r->span) {
        trace_decision(r, sched);
    }
    if (r->d.status != 0) {
        respond_error(r, r->d.status, r->d.message);
        gw_free(r);
        return;
    }
    http_request_on_abort(req, on_client_abort, r);
    try_next(r);
}

/* GET /v1/models: the pool's InferenceModels (and their targets), as vLLM lists models. */
static void h_models(struct http_request *req, void *ud)
{
    struct epp_gateway *g = ud;
    struct json_object *list = json_object_new_object(), *data = json_object_new_array();
    json_object_object_add(list, "object", json_object_new_string("list"));
    json_object_object_add(list, "data", data);
    for (size_t i = 0; i < epp_ds_model_count(g->ds); i++) {
        const struct epp_model *m = epp_ds_model_at(g->ds, i);
        if (epp_ds_model_for(g->ds, m->model_name) != m) {
            continue; /* a younger model claiming the same name does not serve it */
        }
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "id", json_object_new_string(m->model_name));
        json_object_object_add(o, "object", json_object_new_string("model"));
        json_object_object_add(o, "created", json_object_new_int64(m->created));
        json_object_object_add(o, "owned_by", json_object_new_string("tandem"));
        json_object_object_add(o, "root", json_object_new_string(m->model_name));
        json_object_array_add(data, o);
    }
    struct buf b;
    buf_init(&b, 1u << 20);
    if (json_to_buf(list, 0, &b) == 0) {
        http_respond(req, 200, "application/json", b.data, b.len);
    } else {
        http_respond_error(req, 500, NULL, "cannot list the models", NULL);
    }
    buf_free(&b);
    json_object_put(list);
}

static void h_health(struct http_request *req, void *ud)
{
    struct epp_gateway *g = ud;
    if (epp_ds_ready_count(g->ds) > 0) {
        http_respond(req, 200, NULL, NULL, 0);
    } else {
        http_respond_error(req, 503, NULL, "no model server of the pool is ready", NULL);
    }
}

struct epp_gateway *epp_gateway_new(uv_loop_t *loop, struct epp_router *r, struct epp_ds *ds,
                                    const struct epp_gateway_config *c, char *err, size_t errlen)
{
    struct epp_gateway *g = calloc(1, sizeof(*g));
    if (!g) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    g->loop = loop;
    g->router = r;
    g->ds = ds;
    g->c = *c;
    struct http_server_config hc;
    http_server_config_init(&hc);
    hc.host = c->host;
    hc.port = c->port;
    hc.max_body = c->max_body ? c->max_body : 64u << 20;
    hc.server_name = "tandem-epp";
    hc.metrics = c->reg;
    hc.metrics_prefix = "tandem_epp_gateway_";
    hc.idle_timeout_ms = 300000;
    g->srv = http_server_new(loop, &hc, err, errlen);
    g->http = g->srv ? http_client_new(loop, err, errlen) : NULL;
    if (!g->http || http_server_route(g->srv, "POST", "/v1", 1, h_infer, g) != 0 ||
        http_server_route(g->srv, "POST", "/tokenize", 0, h_infer, g) != 0 ||
        http_server_route(g->srv, "POST", "/detokenize", 0, h_infer, g) != 0 ||
        /* vLLM's pooling endpoints outside /v1 (/v2/rerank by prefix) */
        http_server_route(g->srv, "POST", "/score", 0, h_infer, g) != 0 ||
        http_server_route(g->srv, "POST", "/rerank", 0, h_infer, g) != 0 ||
        http_server_route(g->srv, "POST", "/pooling", 0, h_infer, g) != 0 ||
        http_server_route(g->srv, "POST", "/v2", 1, h_infer, g) != 0 ||
        http_server_route(g->srv, "GET", "/v1/models", 0, h_models, g) != 0 ||
        http_server_route(g->srv, "GET", "/health", 0, h_health, g) != 0) {
        if (g->srv) {
            http_server_free(g->srv);
        }
        free(g);
        return NULL;
    }
    if (c->reg) {
        struct metric_family *f = metrics_counter_new(
            c->reg, "tandem_epp_gateway_retries_total",
            "Requests the gateway sent to the next ranked endpoint after a connection failure", 0,
            NULL);
        g->retries = f ? metrics_child(f, NULL) : NULL;
    }
    return g;
}

int epp_gateway_start(struct epp_gateway *g, char *err, size_t errlen)
{
    return http_server_start(g->srv, err, errlen);
}

int epp_gateway_port(const struct epp_gateway *g)
{
    return http_server_port(g->srv);
}

static void on_drained(struct http_server *srv, void *ud)
{
    struct epp_gateway *g = ud;
    http_server_free(srv);
    http_client_free(g->http);
    if (g->done) {
        g->done(g->done_ud);
    }
    free(g);
}

void epp_gateway_shutdown(struct epp_gateway *g, uint64_t deadline_ms, void (*done)(void *ud),
                          void *ud)
{
    g->done = done;
    g->done_ud = ud;
    http_server_drain(g->srv, deadline_ms, on_drained, g);
}
