/*
 * The P/D sidecar (sidecar.h): llm-d's pd-sidecar protocol over lib/http_server (the client side)
 * and lib/http_client (both legs). Each client request is one struct fwd that lives until the
 * response is complete or the client went away; at most one upstream request runs for it at a
 * time (the prefill leg, then the decode leg).
 */
#include "agent/sidecar.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/http_client.h"
#include "lib/json.h"
#include "lib/list.h"
#include "lib/log.h"
#include "lib/trace.h"
#include "lib/uuid.h"

#define SIDECAR_MAX_BODY        (64u << 20) /* a leg's request or buffered response */
#define SIDECAR_PREFILL_DEFAULT 60000       /* ms */
#define SIDECAR_MAX_HEADERS     16
#define SIDECAR_HOST_MAX        256

enum fwd_kind {
    FWD_PROXY, /* any other route: the request as is */
    FWD_LOCAL, /* a generation request without a prefiller */
    FWD_PD,    /* prefill leg, then decode leg */
};

struct sidecar {
    uv_loop_t *loop;
    struct http_server *srv;
    struct http_server *engine_srv; /* in-process engine legs; NULL: over HTTP to engine_url */
    struct http_client *client;
    char *engine_url;
    char *self_host;
    sidecar_allow_fn allow;
    void *allow_ud;
    bool prefiller_tls, prefiller_insecure;
    long prefill_timeout_ms;
    struct tracer *tracer;
    struct list_node fwds; /* struct fwd.link */
    int in_flight;

    struct metric *m_success, *m_failure, *m_duration, *m_prefill, *m_decode, *m_active,
        *m_conn_errors, *m_ssrf_blocked, *m_allowlist;
    struct metric_family *f_fallbacks;
};

struct fwd {
    struct sidecar *s;
    struct http_request *req;
    struct http_client_req *up;
    struct list_node link;
    enum fwd_kind kind;
    char rid[80];
    char prefiller[SIDECAR_HOST_MAX]; /* host:port of the prefill target */
    const char *fallback;             /* why the decode leg did its own prefill, or NULL */
    struct json_object *root;         /* the parsed body (FWD_PD) */
    struct json_object *kv_params;    /* the prefiller's kv_transfer_params (owned) */
    double t0;
    double deadline;     /* tandem_now_s() bound from x-request-timeout, 0 = none */
    int started;         /* the response to the client has started */
    int status;          /* the status sent to the client */
    int inproc;          /* handed to the engine's handlers in-process; ends in inproc_done */
    uv_timer_t *timer;   /* x-request-timeout of an in-process leg */
    double prefill_s;    /* how long the prefill leg took (P/D) */
    struct span *span;   /* the request's SERVER span (generation requests), or NULL */
    struct span *leg;    /* the running leg's CLIENT span (prefill, decode or engine) */
    struct trace_ctx in; /* the client's traceparent, passed on when nothing is recorded */
};

/* ---- helpers ---- */

/* The P/D response headers: which pods served it and how long the prefill leg took. */
static void add_pd_headers(struct fwd *f, struct http_request *req)
{
    char ms[32];
    http_add_header(req, "x-tandem-prefill-host", f->prefiller);
    snprintf(ms, sizeof ms, "%.1f", f->prefill_s * 1e3);
    http_add_header(req, "x-prefill-time-ms", ms);
}

/* A request id we pass on: printable ASCII without spaces, at most 64 bytes. */
static int valid_request_id(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > 64) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isgraph((unsigned char)v[i])) {
            return 0;
        }
    }
    return 1;
}

int sidecar_parse_timeout(const char *v, long *ms_out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || errno || !(d > 0)) {
        return -EINVAL;
    }
    double mult = 1000.0;
    if (strcmp(end, "ms") == 0) {
        mult = 1.0;
    } else if (strcmp(end, "m") == 0) {
        mult = 60000.0;
    } else if (*end && strcmp(end, "s") != 0) {
        return -EINVAL;
    }
    double ms = d * mult;
    if (ms < 1 || ms > 86400000.0) {
        return -EINVAL;
    }
    *ms_out = (long)ms;
    return 0;
}

int sidecar_parse_prefiller(const char *v, char *host_port, size_t hplen, char *host, size_t hlen)
{
    /* "ip:port[,ip:port...]" (the first is used) or the legacy x-prefiller-url "http://ip:port" */
    const char *p = v;
    if (strncasecmp(p, "http://", 7) == 0) {
        p += 7;
    } else if (strncasecmp(p, "https://", 8) == 0) {
        p += 8;
    }
    size_t n = strcspn(p, ",/ \t");
    if (n == 0 || n >= hplen || n >= SIDECAR_HOST_MAX) {
        return -EINVAL;
    }
    memcpy(host_port, p, n);
    host_port[n] = '\0';
    /* host: "[v6]:port", "v4:port" or "name:port" */
    const char *colon;
    if (host_port[0] == '[') {
        const char *rb = strchr(host_port, ']');
        if (!rb || rb[1] != ':') {
            return -EINVAL;
        }
        colon = rb + 1;
        size_t hl = (size_t)(rb - host_port - 1);
        if (hl == 0 || hl >= hlen) {
            return -EINVAL;
        }
        memcpy(host, host_port + 1, hl);
        host[hl] = '\0';
    } else {
        colon = strrchr(host_port, ':');
        if (!colon || colon == host_port || memchr(host_port, ':', (size_t)(colon - host_port))) {
            return -EINVAL;
        }
        size_t hl = (size_t)(colon - host_port);
        if (hl >= hlen) {
            return -EINVAL;
        }
        memcpy(host, host_port, hl);
        host[hl] = '\0';
        for (size_t i = 0; i < hl; i++) {
            if (!(isalnum((unsigned char)host[i]) || host[i] == '.' || host[i] == '-')) {
                return -EINVAL;
            }
        }
    }
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (*end || errno || port < 1 || port > 65535 || !isdigit((unsigned char)colon[1])) {
        return -EINVAL;
    }
    return 0;
}

static long remaining_ms(const struct fwd *f, long fallback_ms)
{
    if (f->deadline <= 0) {
        return fallback_ms;
    }
    double left = (f->deadline - tandem_now_s()) * 1000.0;
    return left < 1 ? 1 : (long)left;
}

/* The request headers passed to an upstream, plus ours. */
static void build_headers(struct fwd *f, char hdrs[][512], const char **out)
{
    static const char *const pass[] = {"content-type",    "accept",     "authorization",
                                       "traceparent",     "tracestate", "user-agent",
                                       "x-session-token", "baggage"};
    size_t n = 0;
    char tp[TRACEPARENT_LEN + 1];
    int own_tp = f->span && span_traceparent(f->leg ? f->leg : f->span, &f->in, tp) == 0;
    if (own_tp) { /* the leg's span is the upstream's parent */
        snprintf(hdrs[n], 512, "traceparent: %s", tp);
        out[n] = hdrs[n];
        n++;
    }
    for (size_t i = 0; i < ARRAY_SIZE(pass) && n + 3 < SIDECAR_MAX_HEADERS; i++) {
        if (own_tp && strcmp(pass[i], "traceparent") == 0) {
            continue;
        }
        const char *v = http_request_header(f->req, pass[i]);
        if (v && strlen(v) < 400) {
            snprintf(hdrs[n], 512, "%s: %s", pass[i], v);
            out[n] = hdrs[n];
            n++;
        }
    }
    snprintf(hdrs[n], 512, "x-request-id: %s", f->rid);
    out[n] = hdrs[n];
    n++;
    snprintf(hdrs[n], 512, "%s", "Expect:"); /* no 100-continue round trip */
    out[n] = hdrs[n];
    n++;
    out[n] = NULL;
}

static void free_timer(uv_handle_t *h)
{
    free(h);
}

static void fwd_free(struct fwd *f)
{
    if (f->up) {
        http_client_cancel(f->up);
        f->up = NULL;
    }
    if (f->timer) {
        uv_close((uv_handle_t *)f->timer, free_timer);
        f->timer = NULL;
    }
    if (list_linked(&f->link)) {
        list_unlink(&f->link);
        f->s->in_flight--;
        metric_set(f->s->m_active, f->s->in_flight);
    }
    json_object_put(f->root);
    json_object_put(f->kv_params);
    span_end(f->leg);
    span_end(f->span);
    free(f);
}

/* The outcome on the running leg's span and the request's. */
static void trace_outcome(struct fwd *f, int ok)
{
    if (!f->span) {
        return;
    }
    const char *why =
        f->status ? "the answer failed" : "no answer (the client left or the leg failed)";
    if (f->status) {
        span_set_int(f->span, "http.response.status_code", f->status);
        span_set_int(f->leg, "http.response.status_code", f->status);
    }
    if (!ok && (f->status == 0 || f->status >= 500)) {
        span_set_status(f->leg, SPAN_STATUS_ERROR, why);
        span_set_status(f->span, SPAN_STATUS_ERROR, why);
    }
}

/* Starts the CLIENT span of a leg (the previous one must have ended). */
static void start_leg(struct fwd *f, const char *name, const char *addr)
{
    if (!f->span) {
        return;
    }
    f->leg = span_child(f->span, name, SPAN_KIND_CLIENT);
    span_set_str(f->leg, "x-request-id", f->rid);
    span_set_str(f->leg, "server.address", addr);
}

/* The request is complete (answered or gone): metrics, then free. */
static void fwd_done(struct fwd *f, int ok)
{
    struct sidecar *s = f->s;
    if (f->kind != FWD_PROXY) {
        metric_inc(ok ? s->m_success : s->m_failure, 1);
        metric_observe(s->m_duration, tandem_now_s() - f->t0);
    }
    trace_outcome(f, ok);
    f->req = NULL;
    fwd_free(f);
}

static void respond_error(struct fwd *f, int status, const char *type, const char *msg)
{
    f->status = status;
    if (status >= 500) {
        span_set_status(f->span, SPAN_STATUS_ERROR, msg);
    }
    http_add_header(f->req, "x-request-id", f->rid);
    http_respond_error(f->req, status, type, msg, NULL);
    fwd_done(f, 0);
}

static void on_client_abort(struct http_request *req, void *ud, const char *reason)
{
    struct fwd *f = ud;
    (void)req;
    log_debug("sidecar: request %s ended early: %s", f->rid, reason);
    fwd_done(f, 0);
}

/* ---- streaming an upstream answer back ---- */

static void stream_head(void *ud, const struct http_response *resp)
{
    struct fwd *f = ud;
    char ct[256], ra[64];
    if (!http_response_header(resp, "content-type", ct, sizeof ct)) {
        snprintf(ct, sizeof ct, "%s", "application/json");
    }
    http_add_header(f->req, "x-request-id", f->rid);
    if (http_response_header(resp, "retry-after", ra, sizeof ra)) {
        http_add_header(f->req, "retry-after", ra);
    }
    if (f->kind == FWD_PD) {
        add_pd_headers(f, f->req);
        http_add_header(f->req, "x-tandem-decode-host", f->s->self_host);
        if (f->fallback) {
            http_add_header(f->req, "x-tandem-pd-fallback", f->fallback);
        }
    }
    f->status = resp->status;
    if (http_stream_start(f->req, resp->status, ct) == 0) {
        f->started = 1;
    }
}

static int stream_data(void *ud, const char *data, size_t len)
{
    struct fwd *f = ud;
    if (!f->started) {
        return 1;
    }
    int rc = http_stream_send(f->req, data, len);
    if (rc != 0) {
        log_warn("sidecar: request %s: the client does not keep up (%s); ending the stream", f->rid,
                 rc == -ENOSPC ? "send buffer full" : "stream closed");
        return 1;
    }
    return 0;
}

static void stream_done(void *ud, struct http_response *resp)
{
    struct fwd *f = ud;
    f->up = NULL;
    if (!f->started) {
        /* no answer from the own engine at all */
        metric_inc(f->s->m_conn_errors, 1);
        log_warn("sidecar: request %s: the engine at %s did not answer: %s", f->rid,
                 f->s->engine_url, resp->error ? resp->error : "no response");
        respond_error(f, 502, "BadGateway", "the inference engine of this pod did not answer");
        return;
    }
    if (resp->error) {
        log_warn("sidecar: request %s: the engine's answer broke off: %s", f->rid, resp->error);
    }
    int ok = !resp->error && f->status >= 200 && f->status < 300;
    http_stream_end(f->req);
    fwd_done(f, ok);
}

/* ---- the engine leg in-process: the request goes to the engine server's handlers ---- */

static void inproc_done(void *ud, int status, double seconds)
{
    struct fwd *f = ud;
    (void)seconds;
    f->req = NULL; /* gone */
    f->status = status;
    fwd_done(f, status >= 200 && status < 300);
}

static void inproc_deadline(uv_timer_t *t)
{
    struct fwd *f = t->data;
    log_warn("sidecar: request %s: x-request-timeout passed; ending it", f->rid);
    http_request_abort(f->req, 504, "the request timed out (x-request-timeout)");
}

/* Hands the client's request (with body, when it is not the client's own) to the engine's
 * handlers: no second HTTP exchange, the same answers as the engine port. */
static int start_inproc_leg(struct fwd *f, const void *body, size_t len)
{
    struct http_request *req = f->req;
    size_t own_len = 0;
    const void *own = http_request_body(req, &own_len);
    if ((body != own || len != own_len) && http_request_set_body(req, body, len) != 0) {
        respond_error(f, 500, NULL, "cannot hand the request to the engine");
        return -EINVAL;
    }
    if (f->deadline > 0) {
        f->timer = malloc(sizeof *f->timer);
        if (!f->timer) {
            respond_error(f, 500, NULL, "out of memory");
            return -ENOMEM;
        }
        uv_timer_init(f->s->loop, f->timer);
        f->timer->data = f;
        uv_timer_start(f->timer, inproc_deadline, (uint64_t)remaining_ms(f, 0), 0);
    }
    http_request_set_header(req, "x-request-id", f->rid);
    char tp[TRACEPARENT_LEN + 1];
    if (f->span && span_traceparent(f->leg ? f->leg : f->span, &f->in, tp) == 0) {
        http_request_set_header(req, "traceparent", tp); /* the engine continues the leg */
    }
    http_add_header(req, "x-request-id", f->rid);
    if (f->kind == FWD_PD) {
        add_pd_headers(f, req);
        http_add_header(req, "x-tandem-decode-host", f->s->self_host);
        if (f->fallback) {
            http_add_header(req, "x-tandem-pd-fallback", f->fallback);
        }
    }
    f->inproc = 1;
    http_request_on_abort(req, NULL, NULL); /* the engine's handler takes the abort over */
    http_request_on_done(req, inproc_done, f);
    http_server_dispatch(f->s->engine_srv, req); /* f may be gone after this */
    return 0;
}

/* Sends body (or the client's own) to the own engine and streams the answer back. */
static int start_engine_leg(struct fwd *f, const char *method, const void *body, size_t len)
{
    struct sidecar *s = f->s;
    start_leg(f, f->kind == FWD_PD ? "decode" : "engine", s->self_host);
    span_set_bool(f->leg, "tandem.in_process", s->engine_srv != NULL);
    if (s->engine_srv) {
        return start_inproc_leg(f, body, len);
    }
    char url[2048], hbuf[SIDECAR_MAX_HEADERS][512], err[256] = "";
    const char *hdrs[SIDECAR_MAX_HEADERS + 1];
    int n = snprintf(url, sizeof url, "%s%s", s->engine_url, http_request_target(f->req));
    if (n < 0 || (size_t)n >= sizeof url) {
        respond_error(f, 414, NULL, "request target too long");
        return -EINVAL;
    }
    build_headers(f, hbuf, hdrs);
    struct http_client_opts o = {
        .method = method,
        .url = url,
        .headers = hdrs,
        .body = body,
        .body_len = len,
        .timeout_ms = f->deadline > 0 ? remaining_ms(f, 0) : 0,
        .on_head = stream_head,
        .on_data = stream_data,
        .on_done = stream_done,
        .ud = f,
    };
    f->up = http_client_start(s->client, &o, err, sizeof err);
    if (!f->up) {
        log_error("sidecar: request %s: %s", f->rid, err);
        respond_error(f, 500, NULL, "cannot reach the inference engine");
        return -EIO;
    }
    return 0;
}

/* ---- P/D ---- */

static void count_fallback(struct fwd *f, const char *reason)
{
    const char *labels[] = {reason};
    struct metric *m = metrics_child(f->s->f_fallbacks, labels);
    if (m) {
        metric_inc(m, 1);
    }
    f->fallback = reason;
    span_set_str(f->span, "tandem.pd.fallback", reason);
    span_set_status(f->leg, SPAN_STATUS_ERROR, reason);
    span_end(f->leg); /* the prefill leg, if it ran */
    f->leg = NULL;
}

/* The decode leg: the original body plus the prefiller's kv_transfer_params (none after a
 * fallback: the engine then prefills itself). */
static void start_decode_leg(struct fwd *f)
{
    struct buf b;
    buf_init(&b, SIDECAR_MAX_BODY);
    if (f->kv_params) {
        json_object_object_add(f->root, "kv_transfer_params", json_object_get(f->kv_params));
    } else {
        json_object_object_del(f->root, "kv_transfer_params");
    }
    if (json_to_buf(f->root, 0, &b) != 0) {
        buf_free(&b);
        respond_error(f, 500, NULL, "cannot build the decode request");
        return;
    }
    metric_inc(f->s->m_decode, 1);
    start_engine_leg(f, "POST", b.data, b.len);
    buf_free(&b);
}

static void prefill_done(void *ud, struct http_response *resp)
{
    struct fwd *f = ud;
    f->up = NULL;
    f->prefill_s = resp->total_s;
    if (resp->status) {
        span_set_int(f->leg, "http.response.status_code", resp->status);
    }
    if (resp->status == 0 || resp->error) {
        metric_inc(f->s->m_conn_errors, 1);
        int timeout = resp->curl_code == 28; /* CURLE_OPERATION_TIMEDOUT */
        log_warn("sidecar: request %s: prefill leg to %s failed (%s); prefilling locally", f->rid,
                 f->prefiller, resp->error ? resp->error : "no response");
        count_fallback(f, timeout ? "prefill-timeout" : "prefill-unreachable");
        start_decode_leg(f);
        return;
    }
    if (resp->status >= 400 && resp->status <= 451) {
        /* the client's error: the prefiller judged the request, the decoder would too */
        char ct[128];
        if (!http_response_header(resp, "content-type", ct, sizeof ct)) {
            snprintf(ct, sizeof ct, "%s", "application/json");
        }
        http_add_header(f->req, "x-request-id", f->rid);
        add_pd_headers(f, f->req);
        http_respond(f->req, resp->status, ct, resp->body.data, resp->body.len);
        f->status = resp->status;
        fwd_done(f, 0);
        return;
    }
    if (resp->status < 200 || resp->status >= 300) {
        log_warn("sidecar: request %s: prefill leg to %s answered %d; prefilling locally", f->rid,
                 f->prefiller, resp->status);
        count_fallback(f, "prefill-error");
        start_decode_leg(f);
        return;
    }
    char err[256] = "";
    struct json_object *pr =
        json_parse(resp->body.data ? resp->body.data : "", resp->body.len, err, sizeof err);
    struct json_object *kv = pr ? json_get(pr, "kv_transfer_params") : NULL;
    if (kv && json_object_is_type(kv, json_type_object)) {
        f->kv_params = json_object_get(kv);
    } else {
        log_warn("sidecar: request %s: the prefiller %s answered %d without kv_transfer_params%s%s;"
                 " prefilling locally",
                 f->rid, f->prefiller, resp->status, pr ? "" : ": ", pr ? "" : err);
        count_fallback(f, "no-kv-transfer-params");
    }
    json_object_put(pr);
    span_end(f->leg); /* the prefill leg (a fallback has ended it already) */
    f->leg = NULL;
    start_decode_leg(f);
}

/* The prefill request body: stream false, no stream_options, one token, and the producer's
 * kv_transfer_params. */
static int build_prefill_body(struct json_object *root, struct buf *out)
{
    struct json_object *p = NULL;
    if (json_object_deep_copy(root, &p, NULL) != 0 || !p) {
        return -ENOMEM;
    }
    struct json_object *kv = json_object_new_object();
    if (!kv) {
        json_object_put(p);
        return -ENOMEM;
    }
    json_object_object_add(kv, "do_remote_decode", json_object_new_boolean(1));
    json_object_object_add(kv, "do_remote_prefill", json_object_new_boolean(0));
    json_object_object_add(kv, "remote_engine_id", NULL);
    json_object_object_add(kv, "remote_block_ids", NULL);
    json_object_object_add(kv, "remote_host", NULL);
    json_object_object_add(kv, "remote_port", NULL);
    json_object_object_add(p, "kv_transfer_params", kv);
    json_object_object_add(p, "stream", json_object_new_boolean(0));
    json_object_object_del(p, "stream_options");
    json_object_object_add(p, "max_tokens", json_object_new_int(1));
    json_object_object_add(p, "max_completion_tokens", json_object_new_int(1));
    int rc = json_to_buf(p, 0, out);
    json_object_put(p);
    return rc;
}

static void start_pd(struct fwd *f, const char *prefiller_hdr)
{
    struct sidecar *s = f->s;
    char host[SIDECAR_HOST_MAX], err[256] = "";
    if (sidecar_parse_prefiller(prefiller_hdr, f->prefiller, sizeof f->prefiller, host,
                                sizeof host) != 0) {
        respond_error(f, 400, NULL, "x-prefiller-host-port must be host:port");
        return;
    }
    if (s->allow && !s->allow(s->allow_ud, host)) {
        metric_inc(s->m_ssrf_blocked, 1);
        log_warn("sidecar: request %s from %s (%s %s): prefill target %s is not a pod of this "
                 "pool (SSRF protection)",
                 f->rid, http_request_peer(f->req), http_request_method(f->req),
                 http_request_path(f->req), f->prefiller);
        respond_error(f, 403, "Forbidden",
                      "Forbidden: prefill target not allowed by SSRF protection");
        return;
    }
    size_t len = 0;
    const char *body = http_request_body(f->req, &len);
    f->root = json_parse(body ? body : "", len, err, sizeof err);
    if (!f->root || !json_object_is_type(f->root, json_type_object)) {
        char msg[400];
        snprintf(msg, sizeof msg, "the request body must be a JSON object%s%s", err[0] ? ": " : "",
                 err);
        respond_error(f, 400, NULL, msg);
        return;
    }
    struct buf b;
    buf_init(&b, SIDECAR_MAX_BODY);
    if (build_prefill_body(f->root, &b) != 0) {
        buf_free(&b);
        respond_error(f, 500, NULL, "cannot build the prefill request");
        return;
    }
    char url[2048], hbuf[SIDECAR_MAX_HEADERS][512];
    const char *hdrs[SIDECAR_MAX_HEADERS + 1];
    snprintf(url, sizeof url, "%s://%s%s", s->prefiller_tls ? "https" : "http", f->prefiller,
             http_request_path(f->req));
    start_leg(f, "prefill", f->prefiller);
    build_headers(f, hbuf, hdrs);
    struct http_client_opts o = {
        .method = "POST",
        .url = url,
        .headers = hdrs,
        .body = b.data,
        .body_len = b.len,
        /* with x-request-timeout, the prefill leg gets half of what is left: a prefiller that
         * hangs must leave the local prefill fallback time to answer */
        .timeout_ms = f->deadline > 0 ? (remaining_ms(f, 0) + 1) / 2 : s->prefill_timeout_ms,
        .max_response = SIDECAR_MAX_BODY,
        .insecure_skip_verify = s->prefiller_insecure,
        .on_done = prefill_done,
        .ud = f,
    };
    metric_inc(s->m_prefill, 1);
    f->up = http_client_start(s->client, &o, err, sizeof err);
    buf_free(&b);
    if (!f->up) {
        log_warn("sidecar: request %s: cannot start the prefill leg to %s (%s); prefilling "
                 "locally",
                 f->rid, f->prefiller, err);
        count_fallback(f, "prefill-unreachable");
        start_decode_leg(f);
    }
}

/* ---- routes ---- */

static struct fwd *fwd_new(struct sidecar *s, struct http_request *req, enum fwd_kind kind)
{
    struct fwd *f = calloc(1, sizeof *f);
    if (!f) {
        http_respond_error(req, 500, NULL, "out of memory", NULL);
        return NULL;
    }
    f->s = s;
    f->req = req;
    f->kind = kind;
    f->t0 = tandem_now_s();
    const char *rid = http_request_header(req, "x-request-id");
    if (rid && valid_request_id(rid)) {
        snprintf(f->rid, sizeof f->rid, "%s", rid);
    } else {
        tandem_uuid4(f->rid);
    }
    list_push_back(&s->fwds, &f->link);
    s->in_flight++;
    metric_set(s->m_active, s->in_flight);
    http_request_on_abort(req, on_client_abort, f);
    return f;
}

static void handle_generate(struct http_request *req, void *ud)
{
    struct sidecar *s = ud;
    const char *prefiller = http_request_header(req, "x-prefiller-host-port");
    if (!prefiller || !*prefiller) {
        prefiller = http_request_header(req, "x-prefiller-url");
    }
    int pd = prefiller && *prefiller;
    struct fwd *f = fwd_new(s, req, pd ? FWD_PD : FWD_LOCAL);
    if (!f) {
        return;
    }
    if (s->tracer) {
        char name[96];
        snprintf(name, sizeof name, "POST %.64s", http_request_path(req));
        f->span =
            trace_server_span(s->tracer, name, http_request_header(req, "traceparent"), &f->in);
        span_set_str(f->span, "x-request-id", f->rid);
        span_set_str(f->span, "url.path", http_request_path(req));
        span_set_bool(f->span, "tandem.pd", pd);
        if (pd) {
            span_set_str(f->span, "tandem.prefiller", prefiller);
        }
    }
    const char *to = http_request_header(req, "x-request-timeout");
    if (to) {
        long ms = 0;
        if (sidecar_parse_timeout(to, &ms) != 0) {
            respond_error(f, 400, NULL,
                          "x-request-timeout must be a duration: seconds, or 500ms, 30s, 2m");
            return;
        }
        f->deadline = f->t0 + (double)ms / 1000.0;
    }
    if (pd) {
        start_pd(f, prefiller);
        return;
    }
    size_t len = 0;
    const void *body = http_request_body(req, &len);
    metric_inc(s->m_decode, 1);
    start_engine_leg(f, "POST", body, len);
}

static void handle_proxy(struct http_request *req, void *ud)
{
    struct sidecar *s = ud;
    struct fwd *f = fwd_new(s, req, FWD_PROXY);
    if (!f) {
        return;
    }
    size_t len = 0;
    const void *body = http_request_body(req, &len);
    start_engine_leg(f, http_request_method(req), body, len);
}

/* ---- lifecycle ---- */

static struct metric *plain(struct metrics_registry *r, int counter, const char *name,
                            const char *help)
{
    struct metric_family *f = counter ? metrics_counter_new(r, name, help, 0, NULL)
                                      : metrics_gauge_new(r, name, help, 0, NULL);
    return f ? metrics_child(f, NULL) : NULL;
}

static int metrics_setup(struct sidecar *s, struct metrics_registry *r)
{
    static const char *const status_label[] = {"status"};
    static const char *const reason_label[] = {"reason"};
    static const double buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                     2.5,   5,    10,    30,   60,  120,  300};
    struct metric_family *req =
        metrics_counter_new(r, "llmd_sidecar_requests_total",
                            "Requests handled by the P/D sidecar, by outcome", 1, status_label);
    struct metric_family *dur = metrics_histogram_new(r, "llmd_sidecar_request_duration_seconds",
                                                      "Whole request duration through the sidecar",
                                                      0, NULL, buckets, ARRAY_SIZE(buckets));
    if (!req || !dur) {
        return -ENOMEM;
    }
    static const char *const ok[] = {"success"}, *const fail[] = {"failure"};
    s->m_success = metrics_child(req, ok);
    s->m_failure = metrics_child(req, fail);
    s->m_duration = metrics_child(dur, NULL);
    s->m_prefill = plain(r, 1, "llmd_sidecar_prefill_requests_total",
                         "Prefill legs sent to a remote prefiller");
    s->m_decode = plain(r, 1, "llmd_sidecar_decode_requests_total",
                        "Decode legs (and local requests) sent to this pod's engine");
    s->m_active =
        plain(r, 0, "llmd_sidecar_active_connections", "Requests in flight through the sidecar");
    s->m_conn_errors = plain(r, 1, "llmd_sidecar_connection_errors_total",
                             "Upstream requests that got no answer (transport errors, timeouts)");
    s->m_ssrf_blocked = plain(r, 1, "llmd_sidecar_ssrf_blocked_requests_total",
                              "Prefill targets refused by the SSRF allowlist");
    s->m_allowlist = plain(r, 0, "llmd_sidecar_allowlist_size",
                           "Pods of the InferencePool allowed as prefill targets");
    s->f_fallbacks = metrics_counter_new(
        r, "tandem_agent_prefill_fallbacks_total",
        "P/D requests whose prefill ran on this decode pod instead, by reason", 1, reason_label);
    if (!s->m_success || !s->m_failure || !s->m_duration || !s->m_prefill || !s->m_decode ||
        !s->m_active || !s->m_conn_errors || !s->m_ssrf_blocked || !s->m_allowlist ||
        !s->f_fallbacks) {
        return -ENOMEM;
    }
    /* Every reason's series exists from the start at 0, so rate() and alerts see a fallback
     * from its first occurrence and a misspelled name in a rule cannot pass unnoticed. */
    static const char *const reasons[] = {"prefill-timeout", "prefill-unreachable", "prefill-error",
                                          "no-kv-transfer-params"};
    for (size_t i = 0; i < ARRAY_SIZE(reasons); i++) {
        const char *labels[] = {reasons[i]};
        if (!metrics_child(s->f_fallbacks, labels)) {
            return -ENOMEM;
        }
    }
    return 0;
}

struct sidecar *sidecar_new(uv_loop_t *loop, struct http_server *srv,
                            const struct sidecar_config *cfg, char *err, size_t errlen)
{
    if (cfg->connector && strcmp(cfg->connector, "nixlv2") != 0) {
        snprintf(err, errlen, "--kv-connector %s: the sidecar speaks nixlv2 only", cfg->connector);
        return NULL;
    }
    struct sidecar *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "%s", "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->srv = srv;
    s->engine_srv = cfg->engine_srv;
    list_init(&s->fwds);
    s->engine_url = strdup(cfg->engine_url);
    s->self_host = strdup(cfg->self_host ? cfg->self_host : "");
    s->allow = cfg->allow;
    s->allow_ud = cfg->allow_ud;
    s->prefiller_tls = cfg->prefiller_use_tls;
    s->prefiller_insecure = cfg->prefiller_insecure_tls;
    s->prefill_timeout_ms =
        cfg->prefill_timeout_ms > 0 ? cfg->prefill_timeout_ms : SIDECAR_PREFILL_DEFAULT;
    s->tracer = cfg->tracer;
    if (!s->engine_url || !s->self_host) {
        snprintf(err, errlen, "%s", "out of memory");
        goto fail;
    }
    if (cfg->metrics && metrics_setup(s, cfg->metrics) != 0) {
        snprintf(err, errlen, "%s", "cannot register the sidecar's metrics (names taken?)");
        goto fail;
    }
    s->client = http_client_new(loop, err, errlen);
    if (!s->client) {
        goto fail;
    }
    if (http_server_route(srv, "POST", "/v1/completions", 0, handle_generate, s) != 0 ||
        http_server_route(srv, "POST", "/v1/chat/completions", 0, handle_generate, s) != 0 ||
        http_server_route(srv, NULL, "/", 1, handle_proxy, s) != 0) {
        snprintf(err, errlen, "%s", "cannot register the sidecar's routes");
        goto fail;
    }
    return s;
fail:
    sidecar_free(s);
    return NULL;
}

int sidecar_in_flight(const struct sidecar *s)
{
    return s->in_flight;
}

void sidecar_set_allowlist_size(struct sidecar *s, int n)
{
    if (s->m_allowlist) {
        metric_set(s->m_allowlist, n);
    }
}

void sidecar_free(struct sidecar *s)
{
    if (!s) {
        return;
    }
    struct list_node *n, *tmp;
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): a node is freed after its successor was read
    list_for_each_safe(&s->fwds, n, tmp)
    {
        struct fwd *f = list_entry(n, struct fwd, link);
        if (f->inproc && f->req) {
            http_request_on_done(f->req, NULL, NULL); /* the server outlives us */
        }
        fwd_free(f);
    }
    http_client_free(s->client);
    free(s->engine_url);
    free(s->self_host);
    free(s);
}
