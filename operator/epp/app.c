/*
 * tandem-epp put together (see app.h).
 */
#include "operator/epp/app.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "lib/clock.h"
#include "lib/json.h"
#include "lib/kube/client.h"
#include "lib/kube/config.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/otlp.h"
#include "lib/shutdown.h"
#include "operator/epp/api.h"
#include "operator/epp/app_internal.h"
#include "operator/epp/datastore.h"
#include "operator/epp/gateway.h"
#include "operator/epp/keyring.h"
#include "operator/epp/pool.h"
#include "operator/epp/router_internal.h"
#include "operator/epp/scrape.h"
#include "operator/epp/sched/sched.h"

#define DRAIN_MS 30000

/* ---- the datastore's hooks: what follows an endpoint in and out of the pool ---- */

static void on_added(void *ud, struct epp_endpoint *ep)
{
    struct epp_app *a = ud;
    app_kv_add(a, ep);
    epp_keyring_offer(a->keyring, ep);
}

static void on_removed(void *ud, struct epp_endpoint *ep)
{
    struct epp_app *a = ud;
    app_kv_remove(a, ep);
    epp_sched_endpoint_removed(a->sched, ep);
    epp_scraper_forget(a->scraper, ep->id);
}

static bool ready(void *ud, char *why, size_t whylen);

/* ---- the periodic tick: readiness of --endpoints, tokenizers, pool gauges ---- */

int app_pool_averages(struct epp_app *a, bool fresh_only, double avg[3])
{
    int n = 0;
    avg[0] = avg[1] = avg[2] = 0;
    for (size_t i = 0; i < epp_ds_count(a->ds); i++) {
        const struct epp_endpoint *ep = epp_ds_at(a->ds, i);
        if (ep->ready && ep->m.valid && !(fresh_only && ep->stale)) {
            avg[0] += ep->m.kv_usage;
            avg[1] += ep->m.waiting;
            avg[2] += ep->m.running;
            n++;
        }
    }
    for (int k = 0; n > 0 && k < 3; k++) {
        avg[k] /= n;
    }
    return n;
}

static void on_tick(uv_timer_t *t)
{
    struct epp_app *a = t->data;
    for (size_t i = 0; i < epp_ds_count(a->ds); i++) {
        struct epp_endpoint *ep = epp_ds_at(a->ds, i);
        if (a->static_mode) {
            /* no kubelet probes: an endpoint is in rotation while it answers its scrapes */
            ep->ready = !ep->stale;
        }
        epp_keyring_offer(a->keyring, ep); /* ready ones only */
    }
    char why[128];
    double avg[3];
    app_extproc_ready(a, ready(a, why, sizeof why));
    app_kv_tick(a);
    app_pool_averages(a, false, avg);
    metric_set(a->g_ready, epp_ds_ready_count(a->ds));
    metric_set(a->g_avg_kv, avg[0]);
    metric_set(a->g_avg_queue, avg[1]);
    metric_set(a->g_avg_running, avg[2]);
}

struct metric *app_gauge(struct metrics_registry *reg, const char *name, const char *help)
{
    struct metric_family *f = metrics_gauge_new(reg, name, help, 0, NULL);
    return f ? metrics_child(f, NULL) : NULL;
}

static struct metric *counter(struct metrics_registry *reg, const char *name, const char *help)
{
    struct metric_family *f = metrics_counter_new(reg, name, help, 0, NULL);
    return f ? metrics_child(f, NULL) : NULL;
}

static int router_metrics(struct epp_app *a)
{
    static const double sched_buckets[] = {0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                           0.0025,  0.005,   0.01,   0.025,   0.05,   0.1};
    struct metrics_registry *reg = a->reg;
    struct epp_router *r = &a->router;
    const char *result = "result", *pod = "pod";
    const char *req_labels[] = {"model_name", "target_model_name"};
    r->f_decisions = metrics_counter_new(reg, "llmd_epp_scheduling_decisions_total",
                                         "Routing decisions, by result", 1, &result);
    struct metric_family *h = metrics_histogram_new(
        reg, "llmd_epp_scheduling_duration_seconds",
        "Time to route one request (parsing, block keys, index, scheduler)", 0, NULL, sched_buckets,
        sizeof sched_buckets / sizeof sched_buckets[0]);
    r->m_sched_seconds = h ? metrics_child(h, NULL) : NULL;
    h = metrics_histogram_new(reg, "tandem_epp_tokenize_duration_seconds",
                              "Time to tokenize and hash one prompt with the engine's tokenizer", 0,
                              NULL, sched_buckets, sizeof sched_buckets / sizeof sched_buckets[0]);
    r->m_keys_seconds = h ? metrics_child(h, NULL) : NULL;
    r->m_ejections = counter(reg, "tandem_epp_endpoint_ejections_total",
                             "Endpoints taken out of rotation after repeated connection failures");
    r->m_candidates = counter(reg, "llmd_epp_candidate_pods_total",
                              "Candidate endpoints handed to the scheduler, summed over requests");
    r->m_sa_hits = counter(reg, "llmd_epp_session_affinity_hits_total",
                           "Requests with x-session-token routed to the pod it names");
    r->m_sa_misses = counter(reg, "llmd_epp_session_affinity_misses_total",
                             "Requests with x-session-token routed elsewhere");
    r->f_requests =
        metrics_counter_new(reg, "inference_objective_request_total",
                            "Requests routed, by requested and served model", 2, req_labels);
    r->f_hit = metrics_gauge_new(
        reg, "llmd_epp_cache_hit_rate",
        "Prompt fraction cached on the pod of the last request routed there", 1, &pod);
    r->f_kv_hit = metrics_gauge_new(
        reg, "kv_cache_manager_hit_rate",
        "Of the prompt blocks routed to the pod, the fraction its KV cache held", 1, &pod);
    r->m_kv_global_hit =
        app_gauge(reg, "kv_cache_manager_global_hit_rate",
                  "Of the prompt blocks routed to any pod, the fraction the chosen pod held");
    a->g_ready = app_gauge(reg, "tandem_epp_ready_endpoints", "Endpoints in rotation");
    a->g_avg_kv = app_gauge(reg, "inference_pool_average_kv_cache_utilization",
                            "Mean KV-cache utilization of the ready endpoints");
    a->g_avg_queue = app_gauge(reg, "inference_pool_average_queue_size",
                               "Mean waiting requests of the ready endpoints");
    a->g_avg_running = app_gauge(reg, "inference_pool_average_running_requests",
                                 "Mean running requests of the ready endpoints");
    return r->f_decisions && r->m_sched_seconds && a->g_ready && a->g_avg_kv ? 0 : -ENOMEM;
}

/* ---- start ---- */

static char *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        return NULL;
    }
    char *data = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *d = realloc(data, cap);
            if (!d || cap > (64u << 20)) {
                free(d ? d : data);
                fclose(fp);
                return NULL;
            }
            data = d;
        }
        size_t got = fread(data + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) {
            break;
        }
    }
    fclose(fp);
    data[n] = '\0';
    *len = n;
    return data;
}

static int load_sched(struct epp_app *a)
{
    char err[512] = "";
    size_t len = 0;
    char *text = NULL;
    const struct epp_flags *f = a->f;
    if (f->config_file) {
        text = read_file(f->config_file, &len);
        if (!text) {
            log_error("--config-file %s: %s", f->config_file, strerror(errno ? errno : EIO));
            return -1;
        }
    } else if (f->config_text) {
        text = strdup(f->config_text);
        len = text ? strlen(text) : 0;
    }
    a->sched = epp_sched_new(text, len, a->reg, err, sizeof err);
    free(text);
    if (!a->sched) {
        log_error("EndpointPickerConfig: %s", err);
        return -1;
    }
    return 0;
}

static int start_static(struct epp_app *a)
{
    char err[256];
    static struct epp_static_endpoint eps[EPP_MAX_STATIC_ENDPOINTS];
    int n = epp_parse_endpoints(a->f->endpoints, eps, EPP_MAX_STATIC_ENDPOINTS, err, sizeof err);
    if (n < 0) {
        log_error("%s", err);
        return -1;
    }
    a->static_mode = true;
    for (int i = 0; i < n; i++) {
        char name[80];
        struct json_object *labels = json_object_new_object();
        if (eps[i].role[0]) {
            json_object_object_add(labels, "llm-d.ai/role", json_object_new_string(eps[i].role));
        }
        snprintf(name, sizeof name, strchr(eps[i].ip, ':') ? "[%s]:%d" : "%s:%d", eps[i].ip,
                 eps[i].port);
        struct epp_pod p = {.ns = "",
                            .name = name,
                            .ip = eps[i].ip,
                            .port = eps[i].port,
                            .labels = labels,
                            .ready = false,
                            .model = eps[i].model[0] ? eps[i].model : NULL};
        int rc = epp_ds_upsert(a->ds, &p);
        json_object_put(labels);
        if (rc != 0) {
            log_error("--endpoints: %s: cannot add it", name);
            return -1;
        }
    }
    log_info("%d endpoints from --endpoints", n);
    return 0;
}

static int start_kube(struct epp_app *a)
{
    char err[512] = "";
    struct kube_config *cfg = NULL;
    if (kube_config_load(a->f->kubeconfig, NULL, &cfg, err, sizeof err) != 0) {
        log_error("kubeconfig: %s", err);
        return -1;
    }
    a->kc = kube_client_new(cfg, NULL, err, sizeof err);
    kube_config_free(cfg);
    if (!a->kc) {
        log_error("Kubernetes client: %s", err);
        return -1;
    }
    struct epp_pool_config pc = {
        .client = a->kc,
        .ns = a->f->pool_ns,
        .name = a->f->pool_name,
        .group = a->f->pool_group,
        .default_port = 8000,
        .sync_timeout_ms = (long)a->f->sync_timeout_ms,
    };
    a->pool = epp_pool_new(&a->loop, a->ds, &pc, err, sizeof err);
    if (!a->pool) {
        log_error("pool %s/%s: %s", a->f->pool_ns, a->f->pool_name, err);
        return -1;
    }
    return 0;
}

static bool ready(void *ud, char *why, size_t whylen)
{
    struct epp_app *a = ud;
    if (a->pool && !epp_pool_synced(a->pool)) {
        snprintf(why, whylen, "the pool's watches have not synced yet");
        return false;
    }
    return app_kv_synced(a, why, whylen);
}

static int start_servers(struct epp_app *a)
{
    char err[512] = "";
    const struct epp_flags *f = a->f;
    struct epp_scraper_config sc = {
        .interval_ms = f->refresh_ms,
        .stale_ms = f->stale_ms,
        .path = f->ms_path,
        .scheme = f->ms_scheme,
        .port = f->ms_port,
        .insecure_skip_verify = f->ms_insecure,
        .reg = a->reg,
    };
    a->scraper = epp_scraper_new(&a->loop, a->ds, &sc, err, sizeof err);
    if (!a->scraper || epp_scraper_start(a->scraper) != 0) {
        log_error("metrics data source: %s", err);
        return -1;
    }
    if (f->gateway_port > 0) {
        struct epp_gateway_config gc = {
            .host = f->host,
            .port = f->gateway_port,
            .reg = a->reg,
            .tracer = otlp_tracer(a->otlp, otlp_service_name("tandem-epp"), NULL),
        };
        a->gw = epp_gateway_new(&a->loop, &a->router, a->ds, &gc, err, sizeof err);
        if (!a->gw || epp_gateway_start(a->gw, err, sizeof err) != 0) {
            log_error("gateway on %s:%d: %s", f->host, f->gateway_port, err);
            return -1;
        }
    }
    if (f->metrics_port > 0) {
        struct epp_api_config ac = {
            .host = f->host, .port = f->metrics_port, .reg = a->reg, .ready = ready, .ready_ud = a};
        a->api = epp_api_new(&a->loop, &a->router, a->ds, &ac, err, sizeof err);
        if (!a->api || epp_api_start(a->api, err, sizeof err) != 0) {
            log_error("metrics port %s:%d: %s", f->host, f->metrics_port, err);
            return -1;
        }
    }
    return app_extproc_start(a);
}

/* ---- stop ---- */

static void part_done(void *ud)
{
    struct epp_app *a = ud;
    if (--a->draining == 0) {
        uv_stop(&a->loop);
    }
}

static void on_signal(void *ud, int signum, int immediate)
{
    struct epp_app *a = ud;
    log_info("signal %d: %s", signum, immediate ? "stopping now" : "draining");
    if (immediate || a->draining) {
        uv_stop(&a->loop);
        return;
    }
    a->draining = 1; /* released below: no part can finish the drain before all have started */
    if (a->gw) {
        a->draining++;
        epp_gateway_shutdown(a->gw, DRAIN_MS, part_done, a);
        a->gw = NULL;
    }
    if (a->api) {
        a->draining++;
        epp_api_shutdown(a->api, part_done, a);
        a->api = NULL;
    }
    app_extproc_stop(a);
    part_done(a);
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) {
        uv_close(h, NULL);
    }
}

int epp_app_run(const struct epp_flags *f)
{
    static struct epp_app app; /* one per process: the signal handlers and timers point at it */
    struct epp_app *a = &app;
    int rc = 1;
    memset(a, 0, sizeof(*a));
    a->f = f;
    uv_loop_init(&a->loop);
    a->reg = metrics_registry_new();
    struct epp_ds_hooks hooks = {.on_added = on_added, .on_removed = on_removed, .ud = a};
    a->ds = epp_ds_new(&hooks);
    a->keyring = epp_keyring_new(&a->loop, a->reg);
    if (!a->reg || !a->ds || !a->keyring || load_sched(a) != 0 || router_metrics(a) != 0) {
        goto out;
    }
    char terr[512] = "";
    if (otlp_setup(f->otlp_endpoint, a->reg, &a->otlp, terr, sizeof terr) != 0) {
        log_error("tracing: %s", terr);
        goto out;
    }
    a->router.ds = a->ds;
    a->router.sched = a->sched;
    a->router.keyring = a->keyring;
    a->router.ignore_subset = f->disable_subset_filter;
    a->router.rng = (uint64_t)tandem_now_ns();
    if (app_kv_start(a) != 0) {
        goto out;
    }
    a->router.index = app_kv_index(a);
    if ((f->endpoints ? start_static(a) : start_kube(a)) != 0 || start_servers(a) != 0) {
        goto out;
    }
    uv_timer_init(&a->loop, &a->tick);
    a->tick.data = a;
    uv_timer_start(&a->tick, on_tick, 0, (uint64_t)f->refresh_ms);
    app_status_start(a);
    a->signals = shutdown_new(&a->loop, on_signal, a);
    if (!a->signals) {
        log_error("cannot install signal handlers");
        goto out;
    }
    log_info("serving pool %s: gateway %s:%d, metrics %s:%d, ext-proc %s:%d",
             f->endpoints ? "(--endpoints)" : f->pool_name, f->host, f->gateway_port, f->host,
             f->metrics_port, f->host, f->grpc_port);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    rc = 0;
out:
    shutdown_free(a->signals);
    app_extproc_stop(a);
    epp_pool_free(a->pool);
    app_kv_stop(a); /* before the datastore: its on_removed hooks reach the subscriber */
    if (a->gw) {
        epp_gateway_shutdown(a->gw, 0, NULL, NULL);
    }
    if (a->api) {
        epp_api_shutdown(a->api, NULL, NULL);
    }
    epp_scraper_free(a->scraper);
    a->scraper = NULL;
    epp_keyring_free(a->keyring);
    a->keyring = NULL;
    uv_run(&a->loop, UV_RUN_NOWAIT);
    uv_walk(&a->loop, close_walk, NULL);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    epp_ds_free(a->ds);
    epp_sched_free(a->sched);
    app_kv_free(a);
    if (a->kc) {
        kube_client_free(a->kc);
    }
    uv_loop_close(&a->loop);
    otlp_exporter_free(a->otlp); /* sends the last spans; its counters live in a->reg */
    a->otlp = NULL;
    metrics_registry_free(a->reg);
    return rc;
}
