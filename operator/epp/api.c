/*
 * The EPP's HTTP port (see api.h).
 */
#include "operator/epp/api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/log.h"
#include "operator/epp/router_internal.h"

#define MAX_SCORED 1024

struct epp_api {
    struct metric *m_scores;        /* kv_cache_manager_score_requests_total */
    struct metric *m_score_seconds; /* kv_cache_manager_score_request_duration_seconds */
    struct epp_router *router;
    struct epp_ds *ds;
    struct epp_api_config c;
    struct http_server *srv;
    void (*done)(void *ud);
    void *done_ud;
};

static void respond_json(struct http_request *req, int status, struct json_object *o)
{
    struct buf b;
    buf_init(&b, 64u << 20);
    if (json_to_buf(o, 0, &b) == 0) {
        http_respond(req, status, "application/json", b.data, b.len);
    } else {
        http_respond_error(req, 500, NULL, "cannot render the answer", NULL);
    }
    buf_free(&b);
    json_object_put(o);
}

static void h_healthz(struct http_request *req, void *ud)
{
    (void)ud;
    http_respond(req, 200, "text/plain", "ok\n", 3);
}

static void h_readyz(struct http_request *req, void *ud)
{
    struct epp_api *a = ud;
    char why[256] = "";
    if (a->c.ready && !a->c.ready(a->c.ready_ud, why, sizeof why)) {
        http_respond_error(req, 503, NULL, why[0] ? why : "not ready", NULL);
        return;
    }
    http_respond(req, 200, "text/plain", "ok\n", 3);
}

/* The endpoints a score request names (candidate_pods: addresses or pod names), or every
 * endpoint of the pool. -EINVAL with err for an unknown one. */
static int candidates(struct epp_api *a, struct json_object *root, struct epp_endpoint **eps,
                      int max, char *err, size_t errlen)
{
    struct json_object *want = json_get(root, "candidate_pods");
    int n = 0;
    if (!want) {
        for (size_t i = 0; i < epp_ds_count(a->ds) && n < max; i++) {
            eps[n++] = epp_ds_at(a->ds, i);
        }
        return n;
    }
    if (!json_object_is_type(want, json_type_array)) {
        return tandem_fail(err, errlen, -EINVAL, "candidate_pods: must be an array of strings");
    }
    for (size_t i = 0; i < json_object_array_length(want) && n < max; i++) {
        const char *id = json_object_get_string(json_object_array_get_idx(want, i));
        struct epp_endpoint *ep = NULL;
        for (size_t k = 0; id && !ep && k < epp_ds_count(a->ds); k++) {
            struct epp_endpoint *e = epp_ds_at(a->ds, k);
            if (strcmp(e->addr, id) == 0 || strcmp(e->name, id) == 0) {
                ep = e;
            }
        }
        if (!ep) {
            return tandem_fail(err, errlen, -EINVAL, "candidate_pods[%zu]: no pod \"%.100s\"", i,
                               id ? id : "(not a string)");
        }
        eps[n++] = ep;
    }
    return n;
}

static void h_score(struct http_request *req, void *ud)
{
    struct epp_api *a = ud;
    int64_t t0 = tandem_now_ns();
    if (a->m_scores) {
        metric_inc(a->m_scores, 1);
    }
    size_t len = 0;
    const char *body = http_request_body(req, &len);
    char err[256] = "";
    struct json_object *root = json_parse(body ? body : "", len, err, sizeof err);
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        http_respond_error(req, 400, NULL, err[0] ? err : "the body must be a JSON object", NULL);
        return;
    }
    static struct epp_endpoint *eps[MAX_SCORED];
    static struct epp_prefix_match pm[MAX_SCORED];
    int32_t total = 0;
    int n = candidates(a, root, eps, MAX_SCORED, err, sizeof err);
    int rc = n < 0 ? n : router_prefix_match(a->router, root, eps, n, pm, &total, err, sizeof err);
    json_object_put(root);
    if (rc != 0) {
        http_respond_error(req, rc == -ENOTSUP ? 503 : 400, NULL, err, NULL);
        return;
    }
    struct json_object *out = json_object_new_object(), *scores = json_object_new_object();
    const char *best = NULL;
    double best_score = -1;
    for (int i = 0; i < n; i++) {
        struct json_object *s = json_object_new_object();
        double ratio = total > 0 ? (double)pm[i].precise_blocks / total : 0;
        json_object_object_add(s, "cache_hit_rate", json_object_new_double(ratio));
        json_object_object_add(s, "blocks_present", json_object_new_int(pm[i].precise_blocks));
        json_object_object_add(s, "blocks_total", json_object_new_int(total));
        json_object_object_add(s, "weighted_blocks", json_object_new_double(pm[i].precise_score));
        json_object_object_add(s, "score", json_object_new_double(100.0 * ratio));
        json_object_object_add(s, "pod_name", json_object_new_string(eps[i]->name));
        json_object_object_add(scores, eps[i]->addr, s);
        if (pm[i].precise_score > best_score) {
            best_score = pm[i].precise_score;
            best = eps[i]->addr;
        }
    }
    json_object_object_add(out, "scores", scores);
    json_object_object_add(out, "blocks_total", json_object_new_int(total));
    json_object_object_add(out, "recommendation",
                           best && best_score > 0 ? json_object_new_string(best) : NULL);
    respond_json(req, 200, out);
    if (a->m_score_seconds) {
        metric_observe(a->m_score_seconds, (double)(tandem_now_ns() - t0) * 1e-9);
    }
}

static void now_rfc3339(char *out, size_t outlen)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void h_cache_state(struct http_request *req, void *ud)
{
    struct epp_api *a = ud;
    struct router_index_stats st = {0};
    char ts[32];
    router_index_stats(a->router, &st);
    double util = 0;
    int n = 0;
    for (size_t i = 0; i < epp_ds_count(a->ds); i++) {
        struct epp_endpoint *ep = epp_ds_at(a->ds, i);
        if (ep->ready && ep->m.valid) {
            util += ep->m.kv_usage;
            n++;
        }
    }
    now_rfc3339(ts, sizeof ts);
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "total_blocks", json_object_new_int64((int64_t)st.entries));
    json_object_object_add(o, "unique_blocks", json_object_new_int64((int64_t)st.keys));
    json_object_object_add(o, "total_pods", json_object_new_int64((int64_t)st.pods));
    json_object_object_add(o, "ready_pods", json_object_new_int(epp_ds_ready_count(a->ds)));
    json_object_object_add(o, "average_cache_utilization",
                           json_object_new_double(n ? util / n : 0));
    json_object_object_add(o, "last_updated", json_object_new_string(ts));
    respond_json(req, 200, o);
}

static void h_cache_pod(struct http_request *req, void *ud)
{
    struct epp_api *a = ud;
    const char *id = http_request_path(req) + strlen("/api/v1/cache/pod/");
    struct epp_endpoint *ep = NULL;
    for (size_t i = 0; !ep && i < epp_ds_count(a->ds); i++) {
        struct epp_endpoint *e = epp_ds_at(a->ds, i);
        if (strcmp(e->addr, id) == 0 || strcmp(e->name, id) == 0) {
            ep = e;
        }
    }
    if (!ep) {
        char msg[300];
        snprintf(msg, sizeof msg, "no pod \"%.200s\" in the pool", id);
        http_respond_error(req, 404, "NotFoundError", msg, NULL);
        return;
    }
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "pod_id", json_object_new_string(ep->addr));
    json_object_object_add(o, "pod_name", json_object_new_string(ep->name));
    json_object_object_add(o, "role", json_object_new_string(epp_role_name(ep->role)));
    json_object_object_add(
        o, "blocks_cached",
        json_object_new_int64((int64_t)router_index_pod_blocks(a->router, ep->addr)));
    json_object_object_add(o, "cache_utilization", json_object_new_double(ep->m.kv_usage));
    json_object_object_add(o, "num_gpu_blocks", json_object_new_int64(ep->m.num_gpu_blocks));
    json_object_object_add(o, "block_size", json_object_new_int(ep->m.block_size));
    json_object_object_add(o, "requests_waiting", json_object_new_double(ep->m.waiting));
    json_object_object_add(o, "requests_running", json_object_new_double(ep->m.running));
    json_object_object_add(o, "active_requests", json_object_new_int(ep->active_requests));
    json_object_object_add(o, "status",
                           json_object_new_string(!ep->ready  ? "not-ready"
                                                  : ep->stale ? "stale"
                                                              : "healthy"));
    respond_json(req, 200, o);
}

struct epp_api *epp_api_new(uv_loop_t *loop, struct epp_router *r, struct epp_ds *ds,
                            const struct epp_api_config *c, char *err, size_t errlen)
{
    struct epp_api *a = calloc(1, sizeof(*a));
    if (!a) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    a->router = r;
    a->ds = ds;
    a->c = *c;
    struct http_server_config hc;
    http_server_config_init(&hc);
    hc.host = c->host;
    hc.port = c->port;
    hc.max_body = 16u << 20;
    hc.server_name = "tandem-epp";
    hc.metrics = c->reg;
    hc.metrics_prefix = "tandem_epp_api_";
    hc.metrics_path = "/metrics";
    if (c->reg) {
        static const double buckets[] = {0.0001, 0.0005, 0.001, 0.0025, 0.005,
                                         0.01,   0.025,  0.05,  0.1,    0.25};
        struct metric_family *f =
            metrics_counter_new(c->reg, "kv_cache_manager_score_requests_total",
                                "POST /api/v1/score requests", 0, NULL);
        a->m_scores = f ? metrics_child(f, NULL) : NULL;
        f = metrics_histogram_new(c->reg, "kv_cache_manager_score_request_duration_seconds",
                                  "Time to answer POST /api/v1/score (tokenizing included)", 0,
                                  NULL, buckets, sizeof buckets / sizeof buckets[0]);
        a->m_score_seconds = f ? metrics_child(f, NULL) : NULL;
    }
    a->srv = http_server_new(loop, &hc, err, errlen);
    if (!a->srv || http_server_route(a->srv, "GET", "/healthz", 0, h_healthz, a) != 0 ||
        http_server_route(a->srv, "GET", "/readyz", 0, h_readyz, a) != 0 ||
        http_server_route(a->srv, "POST", "/api/v1/score", 0, h_score, a) != 0 ||
        http_server_route(a->srv, "GET", "/api/v1/cache/state", 0, h_cache_state, a) != 0 ||
        http_server_route(a->srv, "GET", "/api/v1/cache/pod/", 1, h_cache_pod, a) != 0) {
        if (a->srv) {
            http_server_free(a->srv);
        }
        free(a);
        return NULL;
    }
    return a;
}

int epp_api_start(struct epp_api *a, char *err, size_t errlen)
{
    return http_server_start(a->srv, err, errlen);
}

static void on_drained(struct http_server *srv, void *ud)
{
    struct epp_api *a = ud;
    http_server_free(srv);
    if (a->done) {
        a->done(a->done_ud);
    }
    free(a);
}

void epp_api_shutdown(struct epp_api *a, void (*done)(void *ud), void *ud)
{
    a->done = done;
    a->done_ud = ud;
    http_server_drain(a->srv, 1000, on_drained, a);
}
