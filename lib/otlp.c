/*
 * OTLP/HTTP JSON span exporter (otlp.h).
 */
#include "lib/otlp.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "lib/clock.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/trace_internal.h"
#include "lib/version.h"

#define OTLP_MAX_URL        2048
#define OTLP_MAX_HEADERS    32
#define OTLP_ERROR_EVERY_NS (10LL * 1000000000)

struct otlp_exporter {
    char url[OTLP_MAX_URL];
    struct curl_slist *headers;
    size_t max_queue, max_batch;
    int flush_ms;
    long timeout_ms;
    struct trace_sampler sampler;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct span **q;     /* ring of max_queue */
    struct span **batch; /* the thread's batch (max_batch) */
    size_t head, n;
    bool stopping, started;
    pthread_t th;
    struct tracer tracers[OTLP_MAX_TRACERS];
    int n_tracers;

    _Atomic uint64_t queued, dropped, exported, failed, batches_failed;
    struct metric *m_exported, *m_dropped, *m_failures;

    /* the thread's own */
    CURL *curl;
    int64_t last_error_log;
    uint64_t errors_unlogged;
};

/* ---- encoding ---- */

static struct json_object *hex_str(const uint8_t *p, size_t n)
{
    char h[33];
    trace_hex(p, n, h);
    return json_object_new_string(h);
}

static struct json_object *nanos(int64_t t)
{
    char v[32];
    snprintf(v, sizeof v, "%" PRId64, t < 0 ? 0 : t);
    return json_object_new_string(v);
}

static struct json_object *any_value(const struct span_attr *a)
{
    struct json_object *v = json_object_new_object();
    char num[32];
    switch (a->type) {
    case SPAN_ATTR_STR:
        json_object_object_add(v, "stringValue", json_object_new_string(a->v.s));
        break;
    case SPAN_ATTR_INT:
        snprintf(num, sizeof num, "%" PRId64, a->v.i);
        json_object_object_add(v, "intValue", json_object_new_string(num));
        break;
    case SPAN_ATTR_DOUBLE:
        json_object_object_add(v, "doubleValue", json_object_new_double(a->v.d));
        break;
    case SPAN_ATTR_BOOL:
        json_object_object_add(v, "boolValue", json_object_new_boolean(a->v.b));
        break;
    }
    return v;
}

static struct json_object *key_value(const char *key, struct json_object *value)
{
    struct json_object *kv = json_object_new_object();
    json_object_object_add(kv, "key", json_object_new_string(key));
    json_object_object_add(kv, "value", value);
    return kv;
}

static struct json_object *attributes(const struct span_attr *a, int n)
{
    struct json_object *arr = json_object_new_array();
    for (int i = 0; i < n; i++) {
        json_object_array_add(arr, key_value(a[i].key, any_value(&a[i])));
    }
    return arr;
}

static struct json_object *string_kv(const char *key, const char *value)
{
    struct json_object *v = json_object_new_object();
    json_object_object_add(v, "stringValue", json_object_new_string(value));
    return key_value(key, v);
}

static struct json_object *span_json(const struct span *s)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "traceId", hex_str(s->ctx.trace_id, 16));
    json_object_object_add(o, "spanId", hex_str(s->ctx.span_id, 8));
    if (s->has_parent) {
        json_object_object_add(o, "parentSpanId", hex_str(s->parent_id, 8));
    }
    json_object_object_add(o, "flags", json_object_new_int(0x100 | s->ctx.flags));
    json_object_object_add(o, "name", json_object_new_string(s->name));
    json_object_object_add(o, "kind", json_object_new_int((int)s->kind));
    json_object_object_add(o, "startTimeUnixNano", nanos(s->start));
    json_object_object_add(o, "endTimeUnixNano", nanos(s->end));
    json_object_object_add(o, "attributes", attributes(s->attrs, s->n_attrs));
    if (s->dropped_attrs) {
        json_object_object_add(o, "droppedAttributesCount",
                               json_object_new_int64(s->dropped_attrs));
    }
    struct json_object *evs = json_object_new_array();
    for (int i = 0; i < s->n_events; i++) {
        const struct span_event *e = &s->events[i];
        struct json_object *eo = json_object_new_object();
        json_object_object_add(eo, "timeUnixNano", nanos(e->t));
        json_object_object_add(eo, "name", json_object_new_string(e->name));
        json_object_object_add(eo, "attributes", attributes(e->attrs, e->n_attrs));
        json_object_array_add(evs, eo);
    }
    json_object_object_add(o, "events", evs);
    if (s->dropped_events) {
        json_object_object_add(o, "droppedEventsCount", json_object_new_int64(s->dropped_events));
    }
    struct json_object *st = json_object_new_object();
    json_object_object_add(st, "code", json_object_new_int((int)s->status));
    if (s->status_msg) {
        json_object_object_add(st, "message", json_object_new_string(s->status_msg));
    }
    json_object_object_add(o, "status", st);
    return o;
}

/* ExportTraceServiceRequest of spans[0..n), one resourceSpans entry per tracer. */
static int encode(struct span *const *spans, size_t n, struct buf *out)
{
    struct json_object *root = json_object_new_object();
    struct json_object *rss = json_object_new_array();
    json_object_object_add(root, "resourceSpans", rss);
    bool *done = calloc(n ? n : 1, sizeof *done);
    if (!root || !rss || !done) {
        json_object_put(root);
        free(done);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (done[i]) {
            continue;
        }
        const struct tracer *t = spans[i]->t;
        struct json_object *rs = json_object_new_object();
        struct json_object *res = json_object_new_object();
        struct json_object *rattrs = json_object_new_array();
        json_object_array_add(rattrs, string_kv("service.name", t->service));
        json_object_array_add(rattrs, string_kv("service.version", t->version));
        json_object_array_add(rattrs, string_kv("telemetry.sdk.name", "tandem"));
        json_object_array_add(rattrs, string_kv("telemetry.sdk.language", "c"));
        json_object_object_add(res, "attributes", rattrs);
        json_object_object_add(rs, "resource", res);
        struct json_object *sss = json_object_new_array();
        struct json_object *ss = json_object_new_object();
        struct json_object *scope = json_object_new_object();
        json_object_object_add(scope, "name", json_object_new_string("tandem"));
        json_object_object_add(scope, "version", json_object_new_string(TANDEM_VERSION));
        json_object_object_add(ss, "scope", scope);
        struct json_object *arr = json_object_new_array();
        for (size_t k = i; k < n; k++) {
            if (!done[k] && spans[k]->t == t) {
                json_object_array_add(arr, span_json(spans[k]));
                done[k] = true;
            }
        }
        json_object_object_add(ss, "spans", arr);
        json_object_array_add(sss, ss);
        json_object_object_add(rs, "scopeSpans", sss);
        json_object_array_add(rss, rs);
    }
    free(done);
    int rc = json_to_buf(root, 0, out);
    json_object_put(root);
    return rc;
}

/* ---- the queue ---- */

void otlp_exporter_submit(struct otlp_exporter *x, struct span *s)
{
    pthread_mutex_lock(&x->mu);
    if (x->n >= x->max_queue || x->stopping) {
        pthread_mutex_unlock(&x->mu);
        atomic_fetch_add(&x->dropped, 1);
        if (x->m_dropped) {
            metric_inc(x->m_dropped, 1);
        }
        trace_span_free(s);
        return;
    }
    x->q[(x->head + x->n) % x->max_queue] = s;
    x->n++;
    bool wake = x->n == x->max_batch;
    pthread_mutex_unlock(&x->mu);
    atomic_fetch_add(&x->queued, 1);
    if (wake) {
        pthread_cond_signal(&x->cv);
    }
}

/* Up to max spans off the queue into out (locked by the caller). */
static size_t take_locked(struct otlp_exporter *x, struct span **out, size_t max)
{
    size_t k = 0;
    while (k < max && x->n > 0) {
        out[k++] = x->q[x->head];
        x->head = (x->head + 1) % x->max_queue;
        x->n--;
    }
    return k;
}

static void free_spans(struct span **s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        trace_span_free(s[i]);
    }
}

int otlp_exporter_take_json(struct otlp_exporter *x, size_t max, struct buf *out)
{
    struct span **batch = malloc((max ? max : 1) * sizeof(struct span *));
    if (!batch) {
        return -ENOMEM;
    }
    pthread_mutex_lock(&x->mu);
    size_t k = take_locked(x, batch, max);
    pthread_mutex_unlock(&x->mu);
    int rc = k > 0 ? encode(batch, k, out) : 0;
    free_spans(batch, k);
    free(batch);
    return rc < 0 ? rc : (int)k;
}

/* ---- the thread ---- */

static size_t discard_body(char *p, size_t size, size_t n, void *ud)
{
    struct buf *b = ud;
    size_t len = size * n;
    if (b->len + len < 512) {
        buf_append(b, p, len);
    }
    return len;
}

/* POSTs body; 0, or -EIO with why set. */
static int post(struct otlp_exporter *x, const struct buf *body, char *why, size_t whylen)
{
    if (!x->curl) {
        x->curl = curl_easy_init();
        if (!x->curl) {
            return tandem_fail(why, whylen, -EIO, "curl_easy_init failed");
        }
    }
    CURL *c = x->curl;
    struct buf resp;
    buf_init(&resp, 4096);
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, x->url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->data);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, x->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, x->timeout_ms < 5000 ? x->timeout_ms : 5000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
    int rc = 0;
    if (cc != CURLE_OK) {
        rc = tandem_fail(why, whylen, -EIO, "%s", cerr[0] ? cerr : curl_easy_strerror(cc));
    } else if (status < 200 || status >= 300) {
        rc = tandem_fail(why, whylen, -EIO, "the collector answered %ld: %.200s", status,
                         resp.data ? resp.data : "");
    }
    buf_free(&resp);
    return rc;
}

static void export_batch(struct otlp_exporter *x, struct span **batch, size_t k, bool *failed)
{
    struct buf body;
    buf_init(&body, 64u << 20);
    char why[320] = "";
    int rc = encode(batch, k, &body);
    if (rc != 0) {
        tandem_set_err(why, sizeof why, "cannot build the request body (%s)", tandem_strerror(rc));
    } else {
        rc = post(x, &body, why, sizeof why);
    }
    buf_free(&body);
    free_spans(batch, k);
    *failed = rc != 0;
    if (rc == 0) {
        atomic_fetch_add(&x->exported, k);
        if (x->m_exported) {
            metric_inc(x->m_exported, (double)k);
        }
        return;
    }
    atomic_fetch_add(&x->failed, k);
    atomic_fetch_add(&x->batches_failed, 1);
    if (x->m_failures) {
        metric_inc(x->m_failures, 1);
    }
    int64_t now = tandem_now_ns();
    if (x->last_error_log == 0 || now - x->last_error_log >= OTLP_ERROR_EVERY_NS) {
        log_warn("tracing: exporting %zu spans to %s failed: %s (%" PRIu64
                 " more failed batches since the last report)",
                 k, x->url, why, x->errors_unlogged);
        x->last_error_log = now;
        x->errors_unlogged = 0;
    } else {
        x->errors_unlogged++;
    }
}

static void *run(void *arg)
{
    struct otlp_exporter *x = arg;
    struct span **batch = x->batch;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += x->flush_ms / 1000;
        dl.tv_nsec += (long)(x->flush_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        while (!x->stopping && x->n < x->max_batch) {
            if (pthread_cond_timedwait(&x->cv, &x->mu, &dl) == ETIMEDOUT) {
                break;
            }
        }
        bool stopping = x->stopping;
        while (x->n > 0) {
            size_t k = take_locked(x, batch, x->max_batch);
            pthread_mutex_unlock(&x->mu);
            bool failed = false;
            export_batch(x, batch, k, &failed);
            pthread_mutex_lock(&x->mu);
            if (stopping && failed) {
                /* shutting down and the collector fails: do not wait on it batch after batch */
                size_t rest = take_locked(x, batch, x->max_batch);
                while (rest > 0) {
                    atomic_fetch_add(&x->failed, rest);
                    free_spans(batch, rest);
                    rest = take_locked(x, batch, x->max_batch);
                }
            }
            if (!stopping && x->n < x->max_batch) {
                break; /* a partial batch waits for the next flush */
            }
        }
        if (stopping) {
            break;
        }
    }
    pthread_mutex_unlock(&x->mu);
    if (x->curl) {
        curl_easy_cleanup(x->curl);
        x->curl = NULL;
    }
    return NULL;
}

/* ---- lifecycle ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_init_rc;

static void curl_init_once(void)
{
    curl_init_rc = (int)curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int hexdig(int c)
{
    return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

/* OTEL_EXPORTER_OTLP_HEADERS: "k=v,k2=v2" (W3C Baggage's form; values percent-decoded) into
 * curl header lines. */
static int parse_headers(const char *s, struct curl_slist **list, char *err, size_t errlen)
{
    size_t count = 0;
    while (s && *s) {
        size_t n = strcspn(s, ",");
        const char *eq = memchr(s, '=', n);
        if (!eq) {
            return tandem_fail(err, errlen, -EINVAL, "headers: \"%.*s\" is not key=value", (int)n,
                               s);
        }
        char line[1024];
        size_t o = 0;
        const char *k = s, *ke = eq;
        while (k < ke && isspace((unsigned char)*k)) {
            k++;
        }
        while (ke > k && isspace((unsigned char)ke[-1])) {
            ke--;
        }
        if (ke == k || (size_t)(ke - k) > 200) {
            return tandem_fail(err, errlen, -EINVAL, "headers: an empty or too long key");
        }
        for (const char *p = k; p < ke; p++) {
            if (!(isalnum((unsigned char)*p) || strchr("!#$%&'*+-.^_`|~", *p))) {
                return tandem_fail(err, errlen, -EINVAL, "headers: \"%.*s\" is not a header name",
                                   (int)(ke - k), k);
            }
            line[o++] = *p;
        }
        line[o++] = ':';
        line[o++] = ' ';
        const char *v = eq + 1, *ve = s + n;
        while (v < ve && isspace((unsigned char)*v)) {
            v++;
        }
        while (ve > v && isspace((unsigned char)ve[-1])) {
            ve--;
        }
        for (const char *p = v; p < ve; p++) {
            int c = (unsigned char)*p;
            if (c == '%' && ve - p >= 3 && hexdig(p[1]) >= 0 && hexdig(p[2]) >= 0) {
                c = hexdig(p[1]) * 16 + hexdig(p[2]);
                p += 2;
            }
            if (c < 0x20 || c == 0x7f || o + 2 >= sizeof line) {
                return tandem_fail(err, errlen, -EINVAL,
                                   "headers: the value of %.*s is too long or has control bytes",
                                   (int)(ke - k), k);
            }
            line[o++] = (char)c;
        }
        line[o] = '\0';
        if (++count > OTLP_MAX_HEADERS) {
            return tandem_fail(err, errlen, -EINVAL, "headers: more than %d", OTLP_MAX_HEADERS);
        }
        struct curl_slist *nl = curl_slist_append(*list, line);
        if (!nl) {
            return tandem_fail(err, errlen, -ENOMEM, "out of memory");
        }
        *list = nl;
        s += n;
        if (*s == ',') {
            s++;
        }
    }
    return 0;
}

static int url_ok(const char *u)
{
    return strncasecmp(u, "http://", 7) == 0 || strncasecmp(u, "https://", 8) == 0;
}

struct otlp_exporter *otlp_exporter_new(const struct otlp_config *c, char *err, size_t errlen)
{
    if (!c->url || !url_ok(c->url) || strlen(c->url) >= OTLP_MAX_URL) {
        tandem_set_err(err, errlen, "the traces URL must be http:// or https:// (got \"%s\")",
                       c->url ? c->url : "");
        return NULL;
    }
    struct otlp_exporter *x = calloc(1, sizeof *x);
    if (!x) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(x->url, sizeof x->url, "%s", c->url);
    x->max_queue = c->max_queue ? c->max_queue : OTLP_DEFAULT_MAX_QUEUE;
    x->max_batch = c->max_batch ? c->max_batch : OTLP_DEFAULT_MAX_BATCH;
    if (x->max_batch > x->max_queue) {
        x->max_batch = x->max_queue;
    }
    x->flush_ms = c->flush_ms > 0 ? c->flush_ms : OTLP_DEFAULT_FLUSH_MS;
    x->timeout_ms = c->timeout_ms > 0 ? c->timeout_ms : OTLP_DEFAULT_TIMEOUT_MS;
    x->sampler = c->sampler;
    x->q = calloc(x->max_queue, sizeof(struct span *));
    x->batch = calloc(x->max_batch, sizeof(struct span *));
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    x->headers = h;
    if (!x->q || !x->batch || !h) {
        tandem_set_err(err, errlen, "out of memory");
        goto fail;
    }
    h = curl_slist_append(x->headers, "Expect:");
    if (!h) {
        tandem_set_err(err, errlen, "out of memory");
        goto fail;
    }
    if (parse_headers(c->headers, &x->headers, err, errlen) != 0) {
        goto fail;
    }
    pthread_mutex_init(&x->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&x->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (c->metrics) {
        struct metric_family *f;
        f = metrics_counter_new(c->metrics, "tandem_trace_spans_exported_total",
                                "Spans the OTLP collector accepted", 0, NULL);
        x->m_exported = f ? metrics_child(f, NULL) : NULL;
        f = metrics_counter_new(c->metrics, "tandem_trace_spans_dropped_total",
                                "Spans dropped because the export queue was full", 0, NULL);
        x->m_dropped = f ? metrics_child(f, NULL) : NULL;
        f = metrics_counter_new(c->metrics, "tandem_trace_export_failures_total",
                                "OTLP export requests that failed (their spans are lost)", 0, NULL);
        x->m_failures = f ? metrics_child(f, NULL) : NULL;
    }
    return x;
fail:
    curl_slist_free_all(x->headers);
    free(x->q);
    free(x->batch);
    free(x);
    return NULL;
}

int otlp_exporter_start(struct otlp_exporter *x, char *err, size_t errlen)
{
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != 0) {
        return tandem_fail(err, errlen, -EIO, "curl_global_init failed");
    }
    int rc = pthread_create(&x->th, NULL, run, x);
    if (rc != 0) {
        return tandem_fail(err, errlen, -rc, "cannot start the trace exporter thread: %s",
                           strerror(rc));
    }
    x->started = true;
    return 0;
}

struct tracer *otlp_tracer(struct otlp_exporter *x, const char *service, const char *version)
{
    if (!x) {
        return NULL;
    }
    struct tracer *t = NULL;
    pthread_mutex_lock(&x->mu);
    for (int i = 0; i < x->n_tracers; i++) {
        if (strcmp(x->tracers[i].service, service) == 0) {
            t = &x->tracers[i];
        }
    }
    if (!t && x->n_tracers < OTLP_MAX_TRACERS) {
        t = &x->tracers[x->n_tracers++];
        t->x = x;
        snprintf(t->service, sizeof t->service, "%s", service);
        snprintf(t->version, sizeof t->version, "%s", version ? version : TANDEM_VERSION);
        t->sampler = x->sampler;
    }
    pthread_mutex_unlock(&x->mu);
    return t;
}

void otlp_exporter_free(struct otlp_exporter *x)
{
    if (!x) {
        return;
    }
    pthread_mutex_lock(&x->mu);
    x->stopping = true;
    pthread_mutex_unlock(&x->mu);
    pthread_cond_signal(&x->cv);
    if (x->started) {
        pthread_join(x->th, NULL);
    }
    struct span *s[64];
    size_t k;
    while ((k = take_locked(x, s, ARRAY_SIZE(s))) > 0) { /* not started: dropped */
        free_spans(s, k);
    }
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    curl_slist_free_all(x->headers);
    free(x->q);
    free(x->batch);
    free(x);
}

void otlp_exporter_stats(struct otlp_exporter *x, struct otlp_stats *out)
{
    memset(out, 0, sizeof *out);
    out->queued = atomic_load(&x->queued);
    out->dropped = atomic_load(&x->dropped);
    out->exported = atomic_load(&x->exported);
    out->failed = atomic_load(&x->failed);
    out->batches_failed = atomic_load(&x->batches_failed);
    pthread_mutex_lock(&x->mu);
    out->queue_len = x->n;
    pthread_mutex_unlock(&x->mu);
}

/* ---- configuration ---- */

static int set_url(char *url, size_t urllen, const char *what, const char *v, bool append,
                   char *err, size_t errlen)
{
    if (!url_ok(v)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s: \"%s\" is not an http:// or https:// URL (OTLP/HTTP, e.g. "
                           "http://collector:4318)",
                           what, v);
    }
    size_t n = strlen(v);
    while (append && n > 0 && v[n - 1] == '/') {
        n--;
    }
    int w = snprintf(url, urllen, "%.*s%s", (int)n, v, append ? "/v1/traces" : "");
    if (w < 0 || (size_t)w >= urllen) {
        return tandem_fail(err, errlen, -EINVAL, "%s: the URL is too long", what);
    }
    return 1;
}

/* A URL with no path after host[:port]. */
static bool no_path(const char *u)
{
    const char *p = strstr(u, "://");
    p = p ? p + 3 : u;
    p = strchr(p, '/');
    return !p || strcmp(p, "/") == 0;
}

int otlp_endpoint_resolve(const char *flag, char *url, size_t urllen, char *err, size_t errlen)
{
    url[0] = '\0';
    const char *dis = getenv("OTEL_SDK_DISABLED");
    if (dis && strcasecmp(dis, "true") == 0) {
        return 0;
    }
    if (flag && *flag) {
        return set_url(url, urllen, "--otlp-traces-endpoint", flag, no_path(flag), err, errlen);
    }
    const char *v = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    if (v && *v) {
        return set_url(url, urllen, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", v, false, err, errlen);
    }
    v = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    if (v && *v) {
        return set_url(url, urllen, "OTEL_EXPORTER_OTLP_ENDPOINT", v, true, err, errlen);
    }
    return 0;
}

const char *otlp_service_name(const char *dflt)
{
    const char *v = getenv("OTEL_SERVICE_NAME");
    return v && *v ? v : dflt;
}

int otlp_setup(const char *flag, struct metrics_registry *metrics, struct otlp_exporter **out,
               char *err, size_t errlen)
{
    *out = NULL;
    char url[OTLP_MAX_URL];
    int on = otlp_endpoint_resolve(flag, url, sizeof url, err, errlen);
    if (on <= 0) {
        return on;
    }
    struct otlp_config c = {.url = url, .metrics = metrics};
    if (trace_sampler_from_env(&c.sampler, err, errlen) != 0) {
        return -EINVAL;
    }
    const char *proto = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
    if (!proto || !*proto) {
        proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL");
    }
    if (proto && *proto && strcmp(proto, "http/json") != 0) {
        log_warn("tracing: OTLP protocol \"%s\" asked for; Tandem sends http/json (collectors "
                 "take it on the same :4318 port as http/protobuf)",
                 proto);
    }
    c.headers = getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS");
    if (!c.headers || !*c.headers) {
        c.headers = getenv("OTEL_EXPORTER_OTLP_HEADERS");
    }
    struct otlp_exporter *x = otlp_exporter_new(&c, err, errlen);
    if (!x) {
        return -EINVAL;
    }
    int rc = otlp_exporter_start(x, err, errlen);
    if (rc != 0) {
        otlp_exporter_free(x);
        return rc;
    }
    log_info("tracing: spans go to %s (OTLP/HTTP JSON; sampler %s, ratio %g)", url,
             c.sampler.parent_based ? "parent-based" : "trace-id ratio", c.sampler.ratio);
    *out = x;
    return 0;
}
