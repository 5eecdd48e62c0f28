/*
 * The controller manager (see manager.h): the controllers' work queues, fed by the informer cache
 * (cache.h) through the watch table (watches.h); workers with controller-runtime's reconcile
 * accounting and metrics; leader election; the HTTP endpoints; the shutdown sequence.
 *
 * Threads: the caller of manager_run runs the libuv loop (HTTP servers, signals, stop requests);
 * each informer has its own thread (event handlers only enqueue keys); the elector has its own
 * thread; each controller has --workers worker threads, started when this candidate leads.
 */
#include "operator/controller/manager.h"

#include <dirent.h>
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/http_server.h"
#include "lib/json.h"
#include "lib/kube/events.h"
#include "lib/kube/leader.h"
#include "lib/kube/workqueue.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/shutdown.h"
#include "operator/controller/reconcile_model.h"
#include "operator/controller/poolmetrics.h"
#include "operator/controller/reconcile_pool.h"
#include "operator/controller/watches.h"

#define KEY_MAX 512 /* "namespace/name" */

/* ---- bind addresses ---- */

int manager_parse_bind_address(const char *addr, char *host, size_t hostlen, int *port)
{
    if (!addr || !addr[0] || strcmp(addr, "0") == 0) {
        return 1;
    }
    const char *colon = strrchr(addr, ':');
    const char *port_s = colon ? colon + 1 : addr;
    size_t hlen = colon ? (size_t)(colon - addr) : 0;
    const char *h = addr;
    if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']') {
        h = addr + 1;
        hlen -= 2;
    } else if (colon && memchr(addr, ':', hlen)) {
        return -EINVAL; /* IPv6 literals need brackets */
    }
    char *end = NULL;
    errno = 0;
    long p = strtol(port_s, &end, 10);
    if (!port_s[0] || *end || errno || p < 0 || p > 65535 || hlen >= hostlen) {
        return -EINVAL;
    }
    if (hlen == 0) {
        snprintf(host, hostlen, "%s", "0.0.0.0");
    } else {
        snprintf(host, hostlen, "%.*s", (int)hlen, h);
    }
    *port = (int)p;
    return 0;
}

int manager_parse_duration(const char *s, long *ms)
{
    static const struct {
        const char *unit;
        double ms;
    } units[] = {{"ns", 1e-6}, {"us", 1e-3}, {"\u00b5s", 1e-3}, {"\u03bcs", 1e-3},
                 {"ms", 1},    {"s", 1000},  {"m", 60000},      {"h", 3600000}};
    double total = 0;
    if (!s || !s[0]) {
        return -EINVAL;
    }
    if (strcmp(s, "0") == 0) {
        *ms = 0;
        return 0;
    }
    const char *p = s;
    while (*p) {
        char *end = NULL;
        if (!((*p >= '0' && *p <= '9') || *p == '.')) {
            return -EINVAL;
        }
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno) {
            return -EINVAL;
        }
        p = end;
        size_t best = 0;
        double mult = 0;
        for (size_t i = 0; i < ARRAY_SIZE(units); i++) {
            size_t len = strlen(units[i].unit);
            if (strncmp(p, units[i].unit, len) == 0 && len > best) {
                best = len;
                mult = units[i].ms;
            }
        }
        if (best == 0) {
            return -EINVAL;
        }
        p += best;
        total += v * mult;
    }
    if (total > 9.2e15) {
        return -EINVAL;
    }
    *ms = (long)total;
    return 0;
}

/* ---- the manager ---- */

enum { RESULT_SUCCESS, RESULT_ERROR, RESULT_REQUEUE, RESULT_REQUEUE_AFTER, RESULT_N };
static const char *const result_names[RESULT_N] = {"success", "error", "requeue", "requeue_after"};

struct manager;

struct controller {
    struct manager *m;
    const char *name;
    reconcile_fn reconcile;
    struct kube_workqueue *q;
    pthread_t *threads;
    int nthreads;
    atomic_int active;
    struct metric *total[RESULT_N];
    struct metric *errors, *terminal, *panics, *time, *active_m, *max_m;
};

/* The controllers, by enum opctl_controller (watches.h says what wakes each). */
static const struct {
    const char *name; /* work queue name, controller label of the metrics */
    reconcile_fn reconcile;
} controllers[OPCTL_NCONTROLLERS] = {
    [OPCTL_CTL_POOL] = {CONTROLLER_POOL, reconcile_pool},
    [OPCTL_CTL_MODEL] = {CONTROLLER_MODEL, reconcile_model},
};

struct manager {
    struct kube_client *client;
    struct manager_options o; /* copy; strings and arrays borrowed */
    struct metrics_registry *reg;
    struct opctl_cache *cache;
    struct controller ctl[OPCTL_NCONTROLLERS]; /* by enum opctl_controller */
    struct kube_leader *le;
    struct kube_event_recorder *events;
    struct reconcile_ctx rctx;
    char identity[320];

    uv_loop_t loop;
    uv_async_t stop_async;
    struct shutdown *signals;
    struct http_server *metrics_srv, *health_srv;
    int servers_open;
    int async_open; /* stop_async not closed yet */
    int ran;        /* manager_run was called */
    int leaked;     /* workers outlived the shutdown timeout: never free */

    pthread_mutex_t lock; /* workers_started */
    int workers_started;
    atomic_int stopping;
    atomic_int lost;
    atomic_int untrimmed; /* reconciles since the last malloc_trim */

    struct metric *leader_status;
    struct metric *kube_requests[3], *kube_retries, *kube_errors, *cached_objects;
    struct metric *rss, *vsize, *cpu, *start_time, *open_fds;
};

static void enqueue(void *ud, enum opctl_controller ctl, const char *key)
{
    struct manager *m = ud;
    kube_workqueue_add(m->ctl[ctl].q, key);
}

/* Informer events: the watch table says which keys of which controller they wake. */
static void on_event(void *ud, enum opctl_kind kind, enum opctl_event ev,
                     struct json_object *old_obj, struct json_object *obj)
{
    struct manager *m = ud;
    watches_dispatch(m->cache, kind, ev, old_obj, obj, enqueue, m);
}

static void process(struct controller *ctl, const char *key)
{
    char ns[KEY_MAX];
    const char *slash = strchr(key, '/');
    if (!slash || (size_t)(slash - key) >= sizeof(ns)) {
        log_error("%s: malformed key %s", ctl->name, key);
        kube_workqueue_forget(ctl->q, key);
        return;
    }
    snprintf(ns, sizeof(ns), "%.*s", (int)(slash - key), key);
    struct reconcile_result res;
    atomic_fetch_add(&ctl->active, 1);
    metric_set(ctl->active_m, atomic_load(&ctl->active));
    double t0 = tandem_now_s();
    int rc = ctl->reconcile(&ctl->m->rctx, ns, slash + 1, &res);
    metric_observe(ctl->time, tandem_now_s() - t0);
    atomic_fetch_sub(&ctl->active, 1);
    metric_set(ctl->active_m, atomic_load(&ctl->active));
    if (rc != 0) {
        metric_inc(ctl->errors, 1);
        metric_inc(ctl->total[RESULT_ERROR], 1);
        log_error("%s %s: reconcile failed: %s (retry in the rate limiter's time)", ctl->name, key,
                  tandem_strerror(rc));
        kube_workqueue_add_rate_limited(ctl->q, key);
    } else if (res.requeue_after_ms > 0) {
        metric_inc(ctl->total[RESULT_REQUEUE_AFTER], 1);
        kube_workqueue_forget(ctl->q, key);
        kube_workqueue_add_after(ctl->q, key, res.requeue_after_ms);
    } else if (res.requeue) {
        metric_inc(ctl->total[RESULT_REQUEUE], 1);
        kube_workqueue_add_rate_limited(ctl->q, key);
    } else {
        metric_inc(ctl->total[RESULT_SUCCESS], 1);
        kube_workqueue_forget(ctl->q, key);
    }
}

/* Once every queue is empty after a burst of reconciles (each parses many cached objects and
 * frees them), gives glibc's free pages back so that the resident size reflects the cache. At
 * most once per burst; cheap next to the reconciles themselves. */
static void trim_when_idle(struct manager *m)
{
    for (size_t i = 0; i < ARRAY_SIZE(m->ctl); i++) {
        if (kube_workqueue_len(m->ctl[i].q) != 0) {
            return;
        }
    }
    if (atomic_exchange(&m->untrimmed, 0) == 0) {
        return;
    }
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

static void *worker_main(void *arg)
{
    struct controller *ctl = arg;
    struct manager *m = ctl->m;
    /* Like controller-runtime: no reconcile before the caches have synced. */
    while (!atomic_load(&m->stopping) && opctl_cache_wait_synced(m->cache, 200) == -ETIMEDOUT) {
    }
    for (;;) {
        char *key = NULL;
        int rc = kube_workqueue_get(ctl->q, &key, -1);
        if (rc == -ESHUTDOWN) {
            break;
        }
        if (rc != 0) {
            continue;
        }
        if (!atomic_load(&m->stopping)) {
            process(ctl, key); /* after a shutdown, queued keys are dropped: the next leader
                                * lists everything anyway */
        }
        kube_workqueue_done(ctl->q, key);
        free(key);
        atomic_fetch_add(&m->untrimmed, 1);
        trim_when_idle(m);
    }
    return NULL;
}

static void start_workers(struct manager *m)
{
    pthread_mutex_lock(&m->lock);
    if (m->workers_started || atomic_load(&m->stopping)) {
        pthread_mutex_unlock(&m->lock);
        return;
    }
    m->workers_started = 1;
    for (size_t i = 0; i < ARRAY_SIZE(m->ctl); i++) {
        struct controller *ctl = &m->ctl[i];
        for (int w = 0; w < m->o.workers; w++) {
            if (pthread_create(&ctl->threads[ctl->nthreads], NULL, worker_main, ctl) == 0) {
                ctl->nthreads++;
            } else {
                log_error("%s: cannot start worker %d", ctl->name, w);
            }
        }
    }
    pthread_mutex_unlock(&m->lock);
    log_info("starting workers (%d per controller)", m->o.workers);
}

static void request_stop(struct manager *m)
{
    uv_async_send(&m->stop_async);
}

static void on_started_leading(void *ud)
{
    struct manager *m = ud;
    log_info("became the leader (%s)", m->identity);
    metric_set(m->leader_status, 1);
    start_workers(m);
}

static void on_stopped_leading(void *ud)
{
    struct manager *m = ud;
    metric_set(m->leader_status, 0);
    if (kube_leader_was_leading(m->le) && !atomic_load(&m->stopping)) {
        log_error("leader election lost");
        atomic_store(&m->lost, 1);
        request_stop(m);
    }
}

static void on_new_leader(void *ud, const char *identity)
{
    struct manager *m = ud;
    if (identity[0] && strcmp(identity, m->identity) != 0) {
        log_info("the leader is %s", identity);
    }
}

/* ---- HTTP ---- */

static void h_healthz(struct http_request *req, void *ud)
{
    (void)ud;
    http_respond(req, 200, "text/plain; charset=utf-8", "ok", 2);
}

static void h_readyz(struct http_request *req, void *ud)
{
    struct manager *m = ud;
    if (opctl_cache_synced(m->cache)) {
        http_respond(req, 200, "text/plain; charset=utf-8", "ok", 2);
        return;
    }
    char waiting[512], body[600];
    opctl_cache_unsynced(m->cache, waiting, sizeof(waiting));
    int n = snprintf(body, sizeof(body), "informers not synced: %s", waiting);
    http_respond(req, 500, "text/plain; charset=utf-8", body,
                 n > 0 && (size_t)n < sizeof(body) ? (size_t)n : strlen(body));
}

/* Field n (1-based, as in proc(5)) of /proc/self/stat, counting from after the command name
 * (which may contain spaces), as an unsigned number; 0 when absent. */
static unsigned long long stat_field(const char *stat, int n)
{
    const char *p = strrchr(stat, ')');
    if (!p) {
        return 0;
    }
    p++;
    for (int field = 3; *p; field++) { /* field 3 (state) follows ") " */
        while (*p == ' ') {
            p++;
        }
        if (field == n) {
            return strtoull(p, NULL, 10);
        }
        while (*p && *p != ' ') {
            p++;
        }
    }
    return 0;
}

/* Process metrics from /proc (the names of client_golang's process collector). */
static void refresh_process_metrics(struct manager *m)
{
    char stat[1024] = "", uptime[64] = "";
    FILE *f = fopen("/proc/self/stat", "r");
    if (f) {
        size_t n = fread(stat, 1, sizeof(stat) - 1, f);
        stat[n] = '\0';
        fclose(f);
    }
    f = fopen("/proc/uptime", "r");
    if (f) {
        size_t n = fread(uptime, 1, sizeof(uptime) - 1, f);
        uptime[n] = '\0';
        fclose(f);
    }
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (stat[0] && tick > 0 && page > 0) {
        double utime = (double)stat_field(stat, 14), stime = (double)stat_field(stat, 15);
        metric_set(m->cpu, (utime + stime) / (double)tick);
        metric_set(m->vsize, (double)stat_field(stat, 23));
        metric_set(m->rss, (double)stat_field(stat, 24) * (double)page);
        double up = uptime[0] ? strtod(uptime, NULL) : 0;
        if (up > 0) {
            double boot = (double)time(NULL) - up;
            metric_set(m->start_time, boot + (double)stat_field(stat, 22) / (double)tick);
        }
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long n = 0;
        while (readdir(d)) {
            n++;
        }
        closedir(d);
        metric_set(m->open_fds, (double)(n > 3 ? n - 3 : 0)); /* ".", "..", the DIR's own fd */
    }
}

/* Appends the objects of one kind in every watched namespace to *all (grown as needed). */
static int list_all(struct manager *m, enum opctl_kind kind, struct json_object ***all, size_t *n)
{
    size_t nns = m->o.n_namespaces ? m->o.n_namespaces : 1;
    for (size_t i = 0; i < nns; i++) {
        struct json_object **items = NULL;
        size_t k = 0;
        const char *ns = m->o.n_namespaces ? m->o.namespaces[i] : NULL;
        int rc = opctl_cache_list(m->cache, kind, ns, NULL, &items, &k);
        if (rc != 0) {
            return rc;
        }
        if (k == 0) {
            continue;
        }
        struct json_object **grown = realloc(*all, (*n + k) * sizeof(struct json_object *));
        if (!grown) {
            opctl_items_free(items, k);
            return -ENOMEM;
        }
        memcpy(grown + *n, items, k * sizeof(struct json_object *));
        free(items);
        *all = grown;
        *n += k;
    }
    return 0;
}

/* The pool health gauges (poolmetrics.h) from the informer cache, appended to out. */
static int render_pool_metrics(struct manager *m, struct buf *out)
{
    struct json_object **pools = NULL, **workloads = NULL;
    size_t np = 0, nw = 0;
    int rc = list_all(m, OPCTL_POOL, &pools, &np);
    if (rc == 0) {
        rc = list_all(m, OPCTL_DEPLOYMENT, &workloads, &nw);
    }
    if (rc == 0) {
        rc = list_all(m, OPCTL_DAEMONSET, &workloads, &nw);
    }
    if (rc == 0) {
        rc = poolmetrics_render(pools, np, workloads, nw, out);
    }
    opctl_items_free(pools, np);
    opctl_items_free(workloads, nw);
    return rc;
}

static void h_metrics(struct http_request *req, void *ud)
{
    struct manager *m = ud;
    struct kube_client_stats st;
    kube_client_stats(m->client, &st);
    metric_set(m->kube_requests[0], (double)st.reads);
    metric_set(m->kube_requests[1], (double)st.writes);
    metric_set(m->kube_requests[2], (double)st.watches);
    metric_set(m->kube_retries, (double)st.retries);
    metric_set(m->kube_errors, (double)st.errors);
    metric_set(m->cached_objects, (double)opctl_cache_count(m->cache));
    refresh_process_metrics(m);
    struct buf out;
    buf_init(&out, 16u << 20);
    if (metrics_render(m->reg, &out) != 0 || render_pool_metrics(m, &out) != 0) {
        buf_free(&out);
        http_respond_error(req, 500, NULL, "cannot render metrics", NULL);
        return;
    }
    http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", out.data ? out.data : "",
                 out.len);
    buf_free(&out);
}

static void on_server_drained(struct http_server *srv, void *ud)
{
    (void)srv;
    struct manager *m = ud;
    m->servers_open--;
}

static void begin_stop(struct manager *m, const char *why)
{
    if (atomic_exchange(&m->stopping, 1)) {
        return;
    }
    log_info("shutting down (%s)", why);
    /* The blocking part (draining workers, releasing the Lease, stopping informers) runs after
     * the loop returns; here the loop's own handles are closed so that it does. */
    if (m->signals) {
        shutdown_free(m->signals);
        m->signals = NULL;
    }
    if (m->async_open) {
        uv_close((uv_handle_t *)&m->stop_async, NULL);
        m->async_open = 0;
    }
    if (m->metrics_srv) {
        http_server_drain(m->metrics_srv, 1000, on_server_drained, m);
    }
    if (m->health_srv) {
        http_server_drain(m->health_srv, 1000, on_server_drained, m);
    }
}

static void on_stop_async(uv_async_t *h)
{
    struct manager *m = h->data;
    begin_stop(m, atomic_load(&m->lost) ? "leadership lost" : "stop requested");
}

static void on_signal(void *ud, int signum, int immediate)
{
    struct manager *m = ud;
    (void)immediate;
    begin_stop(m, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

/* ---- metrics registration ---- */

/* controller-runtime's reconcile time buckets (pkg/internal/controller/metrics). */
static const double reconcile_buckets[] = {
    0.005, 0.01, 0.025, 0.05, 0.1,  0.15, 0.2,  0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6,
    0.7,   0.8,  0.9,   1.0,  1.25, 1.5,  1.75, 2.0,  2.5, 3.0,  3.5, 4.0,  4.5, 5,
    6,     7,    8,     9,    10,   15,   20,   25,   30,  40,   50,  60};

static int register_metrics(struct manager *m)
{
    static const char *const ctl_label[] = {"controller"};
    static const char *const total_labels[] = {"controller", "result"};
    static const char *const name_label[] = {"name"};
    static const char *const verb_label[] = {"verb"};
    struct metrics_registry *r = m->reg;
    struct metric_family *total =
        metrics_counter_new(r, "controller_runtime_reconcile_total",
                            "Total number of reconciliations per controller", 2, total_labels);
    struct metric_family *errors =
        metrics_counter_new(r, "controller_runtime_reconcile_errors_total",
                            "Total number of reconciliation errors per controller", 1, ctl_label);
    struct metric_family *terminal = metrics_counter_new(
        r, "controller_runtime_terminal_reconcile_errors_total",
        "Total number of terminal reconciliation errors per controller", 1, ctl_label);
    struct metric_family *panics =
        metrics_counter_new(r, "controller_runtime_reconcile_panics_total",
                            "Total number of reconciliation panics per controller", 1, ctl_label);
    struct metric_family *time_f =
        metrics_histogram_new(r, "controller_runtime_reconcile_time_seconds",
                              "Length of time per reconciliation per controller", 1, ctl_label,
                              reconcile_buckets, ARRAY_SIZE(reconcile_buckets));
    struct metric_family *maxc =
        metrics_gauge_new(r, "controller_runtime_max_concurrent_reconciles",
                          "Maximum number of concurrent reconciles per controller", 1, ctl_label);
    struct metric_family *active =
        metrics_gauge_new(r, "controller_runtime_active_workers",
                          "Number of currently used workers per controller", 1, ctl_label);
    struct metric_family *leader = metrics_gauge_new(
        r, "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 "
        "indicates master. 'name' is the string used to identify the lease. Please make sure to "
        "group by name.",
        1, name_label);
    struct metric_family *kreq = metrics_counter_new(
        r, "tandem_operator_kube_requests_total",
        "Kubernetes API calls by kind of call: read (GET, list), write (POST, PUT, PATCH, "
        "DELETE), watch (streams opened)",
        1, verb_label);
    struct metric_family *kretry = metrics_counter_new(
        r, "tandem_operator_kube_request_retries_total",
        "Kubernetes API attempts repeated after 429, 5xx or a transport error", 0, NULL);
    struct metric_family *kerr =
        metrics_counter_new(r, "tandem_operator_kube_request_errors_total",
                            "Kubernetes API calls that failed (after retries)", 0, NULL);
    struct metric_family *cached = metrics_gauge_new(
        r, "tandem_operator_cached_objects", "Objects held by the informer caches", 0, NULL);
    struct metric_family *rss = metrics_gauge_new(r, "process_resident_memory_bytes",
                                                  "Resident memory size in bytes.", 0, NULL);
    struct metric_family *vsize = metrics_gauge_new(r, "process_virtual_memory_bytes",
                                                    "Virtual memory size in bytes.", 0, NULL);
    struct metric_family *cpu =
        metrics_counter_new(r, "process_cpu_seconds_total",
                            "Total user and system CPU time spent in seconds.", 0, NULL);
    struct metric_family *start =
        metrics_gauge_new(r, "process_start_time_seconds",
                          "Start time of the process since unix epoch in seconds.", 0, NULL);
    struct metric_family *fds =
        metrics_gauge_new(r, "process_open_fds", "Number of open file descriptors.", 0, NULL);
    if (!total || !errors || !terminal || !panics || !time_f || !maxc || !active || !leader ||
        !kreq || !kretry || !kerr || !cached || !rss || !vsize || !cpu || !start || !fds) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < ARRAY_SIZE(m->ctl); i++) {
        struct controller *ctl = &m->ctl[i];
        const char *cl[] = {ctl->name};
        for (int k = 0; k < RESULT_N; k++) {
            const char *tl[] = {ctl->name, result_names[k]};
            if (!(ctl->total[k] = metrics_child(total, tl))) {
                return -ENOMEM;
            }
        }
        ctl->errors = metrics_child(errors, cl);
        ctl->terminal = metrics_child(terminal, cl);
        ctl->panics = metrics_child(panics, cl);
        ctl->time = metrics_child(time_f, cl);
        ctl->max_m = metrics_child(maxc, cl);
        ctl->active_m = metrics_child(active, cl);
        if (!ctl->errors || !ctl->terminal || !ctl->panics || !ctl->time || !ctl->max_m ||
            !ctl->active_m) {
            return -ENOMEM;
        }
        metric_set(ctl->max_m, m->o.workers);
    }
    static const char *const verbs[] = {"read", "write", "watch"};
    for (int i = 0; i < 3; i++) {
        const char *vl[] = {verbs[i]};
        if (!(m->kube_requests[i] = metrics_child(kreq, vl))) {
            return -ENOMEM;
        }
    }
    const char *ll[] = {m->o.leader_election_id ? m->o.leader_election_id : ""};
    m->leader_status = metrics_child(leader, ll);
    m->kube_retries = metrics_child(kretry, NULL);
    m->kube_errors = metrics_child(kerr, NULL);
    m->cached_objects = metrics_child(cached, NULL);
    m->rss = metrics_child(rss, NULL);
    m->vsize = metrics_child(vsize, NULL);
    m->cpu = metrics_child(cpu, NULL);
    m->start_time = metrics_child(start, NULL);
    m->open_fds = metrics_child(fds, NULL);
    if (!m->leader_status || !m->kube_retries || !m->kube_errors || !m->cached_objects || !m->rss ||
        !m->vsize || !m->cpu || !m->start_time || !m->open_fds) {
        return -ENOMEM;
    }
    return 0;
}

/* ---- start-up ---- */

/* client-go's "<hostname>_<uuid>", with $POD_NAME preferred to the hostname: two replicas never
 * share an identity, even on one host or after a restart with the same name. */
static void make_identity(struct manager *m)
{
    char host[256] = "tandem-operator";
    unsigned char r[16] = {0};
    const char *pod = getenv("POD_NAME"); /* the downward API's metadata.name */
    if (pod && pod[0]) {
        snprintf(host, sizeof(host), "%s", pod);
    } else if (gethostname(host, sizeof(host)) != 0) {
        snprintf(host, sizeof(host), "tandem-operator");
    }
    host[sizeof(host) - 1] = '\0';
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        memcpy(r, &ts, sizeof(ts) < sizeof(r) ? sizeof(ts) : sizeof(r));
    }
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* version 4 */
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
    snprintf(m->identity, sizeof(m->identity),
             "%s_%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", host, r[0],
             r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
             r[14], r[15]);
}

/* Starts one HTTP server on addr with the given routes; 0, 1 (disabled) or -1. */
static int start_server(struct manager *m, const char *what, const char *addr, int metrics,
                        int health, struct http_server **out, int *port_out)
{
    char host[128];
    int port = 0;
    int rc = manager_parse_bind_address(addr, host, sizeof(host), &port);
    if (rc == 1) {
        log_info("%s endpoint disabled", what);
        return 1;
    }
    if (rc != 0) {
        log_error("%s bind address %s: expected [host]:port", what, addr);
        return -1;
    }
    struct http_server_config cfg;
    char err[256] = "";
    http_server_config_init(&cfg);
    cfg.host = host;
    cfg.port = port;
    struct http_server *srv = http_server_new(&m->loop, &cfg, err, sizeof(err));
    if (!srv) {
        log_error("%s server: %s", what, err);
        return -1;
    }
    if ((metrics && http_server_route(srv, "GET", "/metrics", 0, h_metrics, m) != 0) ||
        (health && (http_server_route(srv, "GET", "/healthz", 0, h_healthz, m) != 0 ||
                    http_server_route(srv, "GET", "/readyz", 0, h_readyz, m) != 0))) {
        log_error("%s server: cannot add routes", what);
        http_server_free(srv);
        return -1;
    }
    if (http_server_start(srv, err, sizeof(err)) != 0) {
        log_error("%s server on %s: %s", what, addr, err);
        http_server_free(srv);
        return -1;
    }
    log_info("serving %s on %s port %d", what, host, http_server_port(srv));
    if (port_out) {
        __atomic_store_n(port_out, http_server_port(srv), __ATOMIC_RELEASE);
    }
    *out = srv;
    m->servers_open++;
    return 0;
}

static int start_http(struct manager *m)
{
    const struct manager_options *o = &m->o;
    /* One server when both addresses name the same fixed port (port 0 means two ports). */
    char host[128];
    int port0 = 0;
    int same = o->metrics_addr && o->health_addr &&
               manager_parse_bind_address(o->metrics_addr, host, sizeof(host), &port0) == 0 &&
               port0 != 0 && strcmp(o->metrics_addr, o->health_addr) == 0;
    if (same) {
        int port = 0;
        int rc =
            start_server(m, "metrics and health", o->metrics_addr, 1, 1, &m->metrics_srv, &port);
        if (o->metrics_port_out) {
            __atomic_store_n(o->metrics_port_out, port, __ATOMIC_RELEASE);
        }
        if (o->health_port_out) {
            __atomic_store_n(o->health_port_out, port, __ATOMIC_RELEASE);
        }
        return rc < 0 ? -1 : 0;
    }
    if (start_server(m, "metrics", o->metrics_addr, 1, 0, &m->metrics_srv, o->metrics_port_out) <
            0 ||
        start_server(m, "health probes", o->health_addr, 0, 1, &m->health_srv, o->health_port_out) <
            0) {
        return -1;
    }
    return 0;
}

static int start_leader(struct manager *m)
{
    const struct manager_options *o = &m->o;
    char err[256] = "";
    struct kube_leader_config cfg = {
        .lease_name = o->leader_election_id,
        .lease_namespace = o->leader_election_namespace,
        .identity = m->identity,
        .lease_duration_ms = o->lease_duration_ms,
        .renew_deadline_ms = o->renew_deadline_ms,
        .retry_period_ms = o->retry_period_ms,
        .release_on_cancel = 1,
        .cb = {.on_started_leading = on_started_leading,
               .on_stopped_leading = on_stopped_leading,
               .on_new_leader = on_new_leader,
               .ud = m},
    };
    m->le =
        kube_leader_new(o->leader_client ? o->leader_client : m->client, &cfg, err, sizeof(err));
    if (!m->le) {
        log_error("leader election: %s", err);
        return -1;
    }
    log_info("attempting to acquire leader lease %s/%s as %s", o->leader_election_namespace,
             o->leader_election_id, m->identity);
    return kube_leader_start(m->le) == 0 ? 0 : -1;
}

/* Joins the workers within the graceful shutdown timeout: 0, or -ETIMEDOUT (threads left). */
static int join_workers(struct manager *m)
{
    long ms = m->o.graceful_shutdown_ms > 0 ? m->o.graceful_shutdown_ms : 30000;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    for (size_t i = 0; i < ARRAY_SIZE(m->ctl); i++) {
        kube_workqueue_shutdown(m->ctl[i].q);
    }
    for (size_t i = 0; i < ARRAY_SIZE(m->ctl); i++) {
        struct controller *ctl = &m->ctl[i];
        for (int w = 0; w < ctl->nthreads; w++) {
            if (pthread_timedjoin_np(ctl->threads[w], NULL, &deadline) != 0) {
                rc = -ETIMEDOUT;
            }
        }
    }
    return rc;
}

struct manager *manager_new(struct kube_client *c, const struct manager_options *opts)
{
    struct manager *m = calloc(1, sizeof(*m));
    if (!m) {
        return NULL;
    }
    m->client = c;
    m->o = *opts;
    if (m->o.workers <= 0) {
        m->o.workers = 2;
    }
    if (!m->o.leader_election_id) {
        m->o.leader_election_id = "tandem-operator-leader";
    }
    if (!m->o.leader_election_namespace) {
        m->o.leader_election_namespace = kube_client_namespace(c);
    }
    if (m->o.identity) {
        snprintf(m->identity, sizeof(m->identity), "%s", m->o.identity);
    } else {
        make_identity(m);
    }
    pthread_mutex_init(&m->lock, NULL);
    if (uv_loop_init(&m->loop) != 0) {
        pthread_mutex_destroy(&m->lock);
        free(m);
        return NULL;
    }
    if (uv_async_init(&m->loop, &m->stop_async, on_stop_async) != 0) {
        uv_loop_close(&m->loop);
        pthread_mutex_destroy(&m->lock);
        free(m);
        return NULL;
    }
    m->stop_async.data = m;
    m->async_open = 1;
    for (size_t i = 0; i < ARRAY_SIZE(m->ctl); i++) {
        m->ctl[i] = (struct controller){
            .m = m, .name = controllers[i].name, .reconcile = controllers[i].reconcile};
    }
    return m;
}

void manager_stop(struct manager *m)
{
    request_stop(m);
}

int manager_run(struct manager *m)
{
    const struct manager_options *o = &m->o;
    struct kube_client *c = m->client;
    int exit_code = 1;
    if (m->ran) {
        return 1;
    }
    m->ran = 1;
    m->reg = metrics_registry_new();
    if (!m->reg || register_metrics(m) != 0) {
        log_error("cannot register metrics");
        goto out_loop;
    }
    for (size_t i = 0; i < ARRAY_SIZE(m->ctl); i++) {
        struct controller *ctl = &m->ctl[i];
        struct kube_workqueue_options qo = {.controller = ctl->name};
        ctl->q = kube_workqueue_new_opts(ctl->name, m->reg, &qo);
        ctl->threads = calloc((size_t)o->workers, sizeof(pthread_t));
        if (!ctl->q || !ctl->threads) {
            log_error("out of memory");
            goto out_loop;
        }
    }
    struct kube_event_recorder_options eo = {.component = OPERATOR_NAME, .host = m->identity};
    m->events = kube_event_recorder_new(c, &eo);
    if (!m->events) {
        log_warn("cannot start the event recorder; continuing without Events");
    }
    m->cache = opctl_cache_new(c, o->namespaces, o->n_namespaces, o->resync_s, on_event, m);
    if (!m->cache) {
        log_error("cannot create informers");
        goto out_loop;
    }
    m->rctx = (struct reconcile_ctx){.client = c,
                                     .cache = m->cache,
                                     .events = m->events,
                                     .opts = {.agent_image = o->agent_image,
                                              .epp_image = o->epp_image,
                                              .otlp_traces_endpoint = o->otlp_traces_endpoint}};

    m->signals = shutdown_new(&m->loop, on_signal, m);
    if (!m->signals || start_http(m) != 0) {
        begin_stop(m, "start-up failed");
        uv_run(&m->loop, UV_RUN_DEFAULT);
        goto out_loop;
    }
    if (opctl_cache_start(m->cache) != 0) {
        log_error("cannot start informers");
        begin_stop(m, "start-up failed");
    } else if (o->leader_elect) {
        if (start_leader(m) != 0) {
            begin_stop(m, "start-up failed");
        }
    } else {
        log_info("leader election disabled: leading at once");
        metric_set(m->leader_status, 1);
        start_workers(m);
    }
    int startup_failed = atomic_load(&m->stopping);
    uv_run(&m->loop, UV_RUN_DEFAULT);

    /* Shutdown: workers finish what they hold, then the Lease is released (so a successor takes
     * over at once), then the informers stop. */
    pthread_mutex_lock(&m->lock);
    m->workers_started = 1; /* no late start from the elector */
    pthread_mutex_unlock(&m->lock);
    if (join_workers(m) != 0) {
        log_error("workers did not finish within the graceful shutdown timeout; exiting anyway");
        m->leaked = 1; /* threads may still use everything: leave it to process exit */
        return 1;
    }
    if (m->le) {
        kube_leader_stop(m->le);
    }
    opctl_cache_stop(m->cache);
    exit_code = startup_failed || atomic_load(&m->lost) ? 1 : 0;
    log_info("stopped (reconciles: pools %.0f, models %.0f)",
             metric_value(m->ctl[OPCTL_CTL_POOL].total[RESULT_SUCCESS]),
             metric_value(m->ctl[OPCTL_CTL_MODEL].total[RESULT_SUCCESS]));

out_loop:
    if (m->async_open) {
        begin_stop(m, "exiting"); /* closes the loop's handles if the loop never ran */
        uv_run(&m->loop, UV_RUN_DEFAULT);
    }
    return exit_code;
}

void manager_free(struct manager *m)
{
    if (!m || m->leaked) {
        return;
    }
    if (m->async_open && !m->ran) {
        uv_close((uv_handle_t *)&m->stop_async, NULL);
        m->async_open = 0;
        uv_run(&m->loop, UV_RUN_DEFAULT);
    }
    if (m->metrics_srv) {
        http_server_free(m->metrics_srv);
    }
    if (m->health_srv) {
        http_server_free(m->health_srv);
    }
    uv_run(&m->loop, UV_RUN_DEFAULT);
    uv_loop_close(&m->loop);
    kube_leader_free(m->le);
    opctl_cache_free(m->cache);
    kube_event_recorder_free(m->events);
    for (size_t i = 0; i < ARRAY_SIZE(m->ctl); i++) {
        kube_workqueue_free(m->ctl[i].q);
        free(m->ctl[i].threads);
    }
    metrics_registry_free(m->reg);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
