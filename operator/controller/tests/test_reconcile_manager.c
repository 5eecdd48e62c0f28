/*
 * Tests of operator/controller/manager: the pure parts (bind addresses, Go durations, which queue
 * keys an informer event produces) and whole manager_run instances against localkube's API server
 * emulator: informers → queues → workers → objects and status; /healthz, /readyz and /metrics
 * with the controller-runtime names; leader election (holder, release at stop, exit 1 when the
 * Lease is lost); zero writes in steady state; a namespace filter.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/http_client.h"
#include "lib/json.h"
#include "lib/kube/tests/lk_harness.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/yaml.h"
#include "operator/controller/manager.h"
#include "operator/controller/spec.h"
#include "operator/controller/status.h"
#include "operator/controller/watches.h"

static struct lk g_lk;
static struct kube_client *g_client;

/* ---- pure parts ---- */

static void test_parse_bind_address(void **state)
{
    (void)state;
    char host[64];
    int port = -1;
    assert_int_equal(manager_parse_bind_address(":8080", host, sizeof(host), &port), 0);
    assert_string_equal(host, "0.0.0.0");
    assert_int_equal(port, 8080);
    assert_int_equal(manager_parse_bind_address("127.0.0.1:0", host, sizeof(host), &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 0);
    assert_int_equal(manager_parse_bind_address("[::1]:9", host, sizeof(host), &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 9);
    assert_int_equal(manager_parse_bind_address("8081", host, sizeof(host), &port), 0);
    assert_string_equal(host, "0.0.0.0");
    assert_int_equal(port, 8081);
    assert_int_equal(manager_parse_bind_address("0", host, sizeof(host), &port), 1);
    assert_int_equal(manager_parse_bind_address("", host, sizeof(host), &port), 1);
    assert_int_equal(manager_parse_bind_address(NULL, host, sizeof(host), &port), 1);
    assert_int_equal(manager_parse_bind_address(":x", host, sizeof(host), &port), -EINVAL);
    assert_int_equal(manager_parse_bind_address("h:", host, sizeof(host), &port), -EINVAL);
    assert_int_equal(manager_parse_bind_address(":70000", host, sizeof(host), &port), -EINVAL);
    assert_int_equal(manager_parse_bind_address("::1:80", host, sizeof(host), &port), -EINVAL);
    assert_int_equal(manager_parse_bind_address("averyveryverylonghostname:1", host, 8, &port),
                     -EINVAL);
}

static void test_parse_duration(void **state)
{
    (void)state;
    long ms = -1;
    assert_int_equal(manager_parse_duration("15s", &ms), 0);
    assert_int_equal(ms, 15000);
    assert_int_equal(manager_parse_duration("10m", &ms), 0);
    assert_int_equal(ms, 600000);
    assert_int_equal(manager_parse_duration("1h30m", &ms), 0);
    assert_int_equal(ms, 5400000);
    assert_int_equal(manager_parse_duration("250ms", &ms), 0);
    assert_int_equal(ms, 250);
    assert_int_equal(manager_parse_duration("1.5s", &ms), 0);
    assert_int_equal(ms, 1500);
    assert_int_equal(manager_parse_duration("2500us", &ms), 0);
    assert_int_equal(ms, 2);
    assert_int_equal(manager_parse_duration("0", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(manager_parse_duration("15", &ms), -EINVAL);
    assert_int_equal(manager_parse_duration("-1s", &ms), -EINVAL);
    assert_int_equal(manager_parse_duration("1x", &ms), -EINVAL);
    assert_int_equal(manager_parse_duration("", &ms), -EINVAL);
    assert_int_equal(manager_parse_duration("s", &ms), -EINVAL);
    assert_int_equal(manager_parse_duration("99999999999h", &ms), -EINVAL);
}

struct keys {
    char k[8][128];
    int n;
};

static void collect(void *ud, enum opctl_controller ctl, const char *key)
{
    struct keys *ks = ud;
    if (ks->n < 8) {
        snprintf(ks->k[ks->n++], sizeof(ks->k[0]), "%s:%s",
                 ctl == OPCTL_CTL_POOL ? CONTROLLER_POOL : CONTROLLER_MODEL, key);
    }
}

static int has(const struct keys *ks, const char *want)
{
    for (int i = 0; i < ks->n; i++) {
        if (strcmp(ks->k[i], want) == 0) {
            return 1;
        }
    }
    return 0;
}

static struct json_object *obj(const char *text)
{
    char err[256];
    struct json_object *o = yaml_parse(text, strlen(text), err, sizeof(err));
    if (!o) {
        fail_msg("bad YAML in test: %s", err);
    }
    return o;
}

static void test_watches(void **state)
{
    (void)state;
    struct keys ks = {0};
    struct json_object *p1 = obj("{kind: InferencePool, metadata: {name: p, namespace: team, "
                                 "generation: 1, resourceVersion: '5'}}");
    struct json_object *p1s = obj("{kind: InferencePool, metadata: {name: p, namespace: team, "
                                  "generation: 1, resourceVersion: '6'}, status: {x: 1}}");
    struct json_object *p2 = obj("{kind: InferencePool, metadata: {name: p, namespace: team, "
                                 "generation: 2, resourceVersion: '7'}}");
    watches_dispatch(NULL, OPCTL_POOL, OPCTL_ADDED, NULL, p1, collect, &ks);
    assert_int_equal(ks.n, 1); /* no cache: no models to find */
    assert_true(has(&ks, "inferencepool:team/p"));
    ks.n = 0; /* status only: nothing */
    watches_dispatch(NULL, OPCTL_POOL, OPCTL_UPDATED, p1, p1s, collect, &ks);
    assert_int_equal(ks.n, 0);
    /* resync (same resourceVersion): the pool, not its models */
    watches_dispatch(NULL, OPCTL_POOL, OPCTL_UPDATED, p1, p1, collect, &ks);
    assert_int_equal(ks.n, 1);
    ks.n = 0; /* spec change: the pool and its models */
    watches_dispatch(NULL, OPCTL_POOL, OPCTL_UPDATED, p1s, p2, collect, &ks);
    assert_true(has(&ks, "inferencepool:team/p"));
    ks.n = 0;
    watches_dispatch(NULL, OPCTL_POOL, OPCTL_DELETED, NULL, p2, collect, &ks);
    assert_int_equal(ks.n, 1);

    struct json_object *m1 =
        obj("{kind: InferenceModel, metadata: {name: m, namespace: team, "
            "generation: 1, resourceVersion: '8'}, spec: {poolRef: {name: a}}}");
    struct json_object *m2 =
        obj("{kind: InferenceModel, metadata: {name: m, namespace: team, "
            "generation: 2, resourceVersion: '9'}, spec: {poolRef: {name: b}}}");
    ks.n = 0;
    watches_dispatch(NULL, OPCTL_MODEL, OPCTL_ADDED, NULL, m1, collect, &ks);
    assert_int_equal(ks.n, 2);
    assert_true(has(&ks, "inferencemodel:team/m"));
    assert_true(has(&ks, "inferencepool:team/a"));
    ks.n = 0; /* moved to another pool: both pools */
    watches_dispatch(NULL, OPCTL_MODEL, OPCTL_UPDATED, m1, m2, collect, &ks);
    assert_int_equal(ks.n, 3);
    assert_true(has(&ks, "inferencepool:team/a"));
    assert_true(has(&ks, "inferencepool:team/b"));

    /* owned objects map to their controller owner of our group only */
    struct json_object *d =
        obj("{kind: Deployment, metadata: {name: m-decode, namespace: team, ownerReferences: ["
            "{apiVersion: tandem.dev/v1alpha1, kind: InferenceModel, name: m, uid: u, controller: "
            "true},"
            "{apiVersion: tandem.dev/v1alpha1, kind: InferencePool, name: p, uid: v}]}}");
    struct json_object *f = obj("{kind: Deployment, metadata: {name: x, namespace: team, "
                                "ownerReferences: [{apiVersion: other.io/v1, kind: InferencePool, "
                                "name: p, uid: w, controller: true}]}}");
    struct json_object *s = obj("{kind: Service, metadata: {name: p-epp, namespace: team, "
                                "ownerReferences: [{apiVersion: tandem.dev/v1alpha1, kind: "
                                "InferencePool, name: p, uid: v, controller: true}]}}");
    ks.n = 0;
    watches_dispatch(NULL, OPCTL_DEPLOYMENT, OPCTL_UPDATED, d, d, collect, &ks);
    assert_int_equal(ks.n, 2); /* once for new, once for old: the queue de-duplicates */
    assert_true(has(&ks, "inferencemodel:team/m"));
    ks.n = 0;
    watches_dispatch(NULL, OPCTL_DEPLOYMENT, OPCTL_ADDED, NULL, f, collect, &ks);
    assert_int_equal(ks.n, 0);
    watches_dispatch(NULL, OPCTL_SERVICE, OPCTL_DELETED, NULL, s, collect, &ks);
    assert_int_equal(ks.n, 1);
    assert_true(has(&ks, "inferencepool:team/p"));
    struct json_object *h =
        obj("{kind: HorizontalPodAutoscaler, metadata: {name: m-decode, namespace: team, "
            "ownerReferences: [{apiVersion: tandem.dev/v1alpha1, kind: InferenceModel, name: m, "
            "uid: u, controller: true}]}}");
    struct json_object *cm = obj("{kind: ConfigMap, metadata: {name: p-epp-config, namespace: "
                                 "team, ownerReferences: [{apiVersion: tandem.dev/v1alpha1, kind: "
                                 "InferencePool, name: p, uid: v, controller: true}]}}");
    ks.n = 0;
    watches_dispatch(NULL, OPCTL_HPA, OPCTL_UPDATED, h, h, collect, &ks);
    watches_dispatch(NULL, OPCTL_CONFIGMAP, OPCTL_DELETED, NULL, cm, collect, &ks);
    assert_int_equal(ks.n, 3);
    assert_true(has(&ks, "inferencemodel:team/m"));
    assert_true(has(&ks, "inferencepool:team/p"));
    /* a model's DaemonSet (deployment.type DaemonSet) → the model */
    struct json_object *dset =
        obj("{apiVersion: apps/v1, kind: DaemonSet, metadata: {name: m-worker, namespace: team, "
            "ownerReferences: [{apiVersion: tandem.dev/v1alpha1, kind: InferenceModel, name: m, "
            "uid: u, controller: true}]}}");
    enum opctl_kind dk;
    assert_int_equal(opctl_kind_of(dset, &dk), 0);
    assert_int_equal(dk, OPCTL_DAEMONSET);
    ks.n = 0;
    watches_dispatch(NULL, OPCTL_DAEMONSET, OPCTL_DELETED, NULL, dset, collect, &ks);
    assert_int_equal(ks.n, 1);
    assert_true(has(&ks, "inferencemodel:team/m"));
    json_object_put(dset);

    /* pods: by their labels; an update that changes nothing counted is dropped */
    struct json_object *pod_a =
        obj("{kind: Pod, metadata: {name: x, namespace: team, labels: {tandem.dev/pool: p, "
            "tandem.dev/model: m}}, status: {phase: Running, conditions: [{type: Ready, status: "
            "'False'}]}}");
    struct json_object *pod_b =
        obj("{kind: Pod, metadata: {name: x, namespace: team, resourceVersion: '3', labels: "
            "{tandem.dev/pool: p, tandem.dev/model: m}}, status: {phase: Running, conditions: "
            "[{type: Ready, status: 'False'}], podIP: 1.2.3.4}}");
    struct json_object *pod_c =
        obj("{kind: Pod, metadata: {name: x, namespace: team, labels: {tandem.dev/pool: p, "
            "tandem.dev/model: m}}, status: {phase: Running, conditions: [{type: Ready, status: "
            "'True'}]}}");
    ks.n = 0;
    watches_dispatch(NULL, OPCTL_POD, OPCTL_ADDED, NULL, pod_a, collect, &ks);
    assert_int_equal(ks.n, 2);
    assert_true(has(&ks, "inferencemodel:team/m"));
    assert_true(has(&ks, "inferencepool:team/p"));
    ks.n = 0;
    watches_dispatch(NULL, OPCTL_POD, OPCTL_UPDATED, pod_a, pod_b, collect, &ks);
    assert_int_equal(ks.n, 0);
    watches_dispatch(NULL, OPCTL_POD, OPCTL_UPDATED, pod_b, pod_c, collect, &ks);
    assert_true(ks.n >= 2);
    int before = ks.n;
    watches_dispatch(NULL, OPCTL_POD, OPCTL_ADDED, NULL, NULL, collect, &ks);
    assert_int_equal(ks.n, before);

    struct json_object *all[] = {p1, p1s, p2, m1, m2, d, f, s, h, cm, pod_a, pod_b, pod_c};
    for (size_t i = 0; i < ARRAY_SIZE(all); i++) {
        json_object_put(all[i]);
    }
}

static void test_kinds(void **state)
{
    (void)state;
    enum opctl_kind k;
    struct json_object *o = obj("{apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler}");
    assert_int_equal(opctl_kind_of(o, &k), 0);
    assert_int_equal(k, OPCTL_HPA);
    json_object_put(o);
    o = obj("{apiVersion: v1, kind: Service}");
    assert_int_equal(opctl_kind_of(o, &k), 0);
    assert_int_equal(k, OPCTL_SERVICE);
    json_object_put(o);
    o = obj("{apiVersion: tandem.dev/v1alpha1, kind: InferenceModel}");
    assert_int_equal(opctl_kind_of(o, &k), 0);
    assert_int_equal(k, OPCTL_MODEL);
    assert_ptr_equal(opctl_resource(k), &OPCTL_INFERENCEMODELS);
    json_object_put(o);
    o = obj("{apiVersion: apps/v1, kind: StatefulSet}");
    assert_int_equal(opctl_kind_of(o, &k), -ENOENT);
    json_object_put(o);
    o = obj("{apiVersion: v2, kind: Service}");
    assert_int_equal(opctl_kind_of(o, &k), -ENOENT);
    json_object_put(o);
}

/* ---- localkube ---- */

static void create_doc(struct json_object *o, const char *ns)
{
    const char *kind = NULL;
    json_get_string(o, "kind", &kind, NULL, 0);
    const struct kube_resource *r = &KUBE_CRDS;
    enum opctl_kind k;
    if (strcmp(kind, "CustomResourceDefinition") != 0) {
        assert_int_equal(opctl_kind_of(o, &k), 0);
        r = opctl_resource(k);
    }
    struct kube_error err = {0};
    int rc = kube_create(g_client, r, r->namespaced ? ns : NULL, o, NULL, &err);
    if (rc != 0) {
        fail_msg("create %s: %s %s", kind, tandem_strerror(rc), err.message);
    }
}

static void create_file(const char *rel, const char *ns)
{
    char path[512];
    snprintf(path, sizeof(path), "../../../%s", rel);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail_msg("cannot open %s", path);
    }
    char *text = malloc(1 << 20);
    assert_non_null(text);
    size_t len = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    struct json_object *docs = NULL;
    char err[256];
    if (yaml_parse_all(text, len, &docs, err, sizeof(err)) != 0) {
        fail_msg("%s: %s", path, err);
    }
    free(text);
    for (size_t i = 0; i < json_object_array_length(docs); i++) {
        struct json_object *d = json_object_array_get_idx(docs, i);
        if (ns) {
            json_object_object_add(json_get(d, "metadata"), "namespace",
                                   json_object_new_string(ns));
        }
        create_doc(d, ns ? ns : "default");
    }
    json_object_put(docs);
}

static void runners_start(void);

static int group_setup(void **state)
{
    (void)state;
    log_init("test_manager", getenv("LK_DEBUG") ? LOGL_DEBUG : LOGL_ERROR, LOG_FORMAT_TEXT);
    if (lk_start(&g_lk) != 0) {
        return -1;
    }
    g_client = lk_client(&g_lk, NULL);
    if (!g_client) {
        return -1;
    }
    runners_start();
    create_file("crds/inferencepools.yaml", NULL);
    create_file("crds/inferencemodels.yaml", NULL);
    for (int i = 0; i < 200; i++) {
        struct json_object *l = NULL;
        int ok = kube_list(g_client, &OPCTL_INFERENCEMODELS, NULL, NULL, &l, NULL) == 0;
        json_object_put(l);
        if (ok) {
            return 0;
        }
        lk_sleep_ms(50);
    }
    return -1;
}

static int group_teardown(void **state)
{
    (void)state;
    kube_client_free(g_client);
    lk_stop(&g_lk);
    return 0;
}

struct run {
    struct manager_options o;
    struct manager *m;
    struct kube_client *client;
    int metrics_port, health_port;
    int rc;
    int done;
    struct runner *runner;
};

/*
 * Managers run on long-lived runner threads (never joined): h2o keeps per-thread memory caches
 * that live as long as the thread, so a server on a thread that exits would look like a leak to
 * LeakSanitizer (lib/http_server.h asks for long-lived threads).
 */
struct runner {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct run *job; /* to run; NULL when idle */
    int busy;
};

static struct runner g_runners[2];

static void *runner_main(void *arg)
{
    struct runner *rn = arg;
    pthread_mutex_lock(&rn->mu);
    for (;;) {
        while (!rn->job) {
            pthread_cond_wait(&rn->cv, &rn->mu);
        }
        struct run *r = rn->job;
        pthread_mutex_unlock(&rn->mu);
        int rc = manager_run(r->m);
        pthread_mutex_lock(&rn->mu);
        r->rc = rc;
        r->done = 1;
        rn->job = NULL;
        pthread_cond_broadcast(&rn->cv);
    }
    return NULL;
}

static void runners_start(void)
{
    for (size_t i = 0; i < ARRAY_SIZE(g_runners); i++) {
        pthread_mutex_init(&g_runners[i].mu, NULL);
        pthread_cond_init(&g_runners[i].cv, NULL);
        assert_int_equal(pthread_create(&g_runners[i].thread, NULL, runner_main, &g_runners[i]), 0);
    }
}

static void run_start_ns(struct run *r, const char *identity, int leader_elect,
                         const char *const *namespaces, size_t nns)
{
    memset(r, 0, sizeof(*r));
    r->client = lk_client(&g_lk, NULL);
    assert_non_null(r->client);
    r->o = (struct manager_options){.leader_elect = leader_elect,
                                    .leader_election_namespace = "default",
                                    .identity = identity,
                                    .lease_duration_ms = 2000,
                                    .renew_deadline_ms = 1500,
                                    .retry_period_ms = 300,
                                    .metrics_addr = "127.0.0.1:0",
                                    .health_addr = "127.0.0.1:0",
                                    .workers = 2,
                                    .metrics_port_out = &r->metrics_port,
                                    .health_port_out = &r->health_port,
                                    .namespaces = namespaces,
                                    .n_namespaces = nns};
    r->rc = -1;
    r->m = manager_new(r->client, &r->o);
    assert_non_null(r->m);
    for (size_t i = 0; i < ARRAY_SIZE(g_runners); i++) {
        struct runner *rn = &g_runners[i];
        pthread_mutex_lock(&rn->mu);
        if (!rn->busy) {
            rn->busy = 1;
            rn->job = r;
            r->runner = rn;
            pthread_cond_broadcast(&rn->cv);
            pthread_mutex_unlock(&rn->mu);
            return;
        }
        pthread_mutex_unlock(&rn->mu);
    }
    fail_msg("no free runner thread");
}

static void run_start(struct run *r, const char *identity, int leader_elect)
{
    run_start_ns(r, identity, leader_elect, NULL, 0);
}

/* Stops the manager (request: via manager_stop) and returns manager_run's result; it must
 * return within 15 s. */
static int run_stop(struct run *r, int request)
{
    if (request) {
        manager_stop(r->m);
    }
    struct runner *rn = r->runner;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 15;
    pthread_mutex_lock(&rn->mu);
    while (!r->done) {
        if (pthread_cond_timedwait(&rn->cv, &rn->mu, &deadline) != 0) {
            pthread_mutex_unlock(&rn->mu);
            fail_msg("manager_run did not return in 15 s");
        }
    }
    rn->busy = 0;
    pthread_mutex_unlock(&rn->mu);
    manager_free(r->m);
    kube_client_free(r->client);
    return r->rc;
}

/* GET http://127.0.0.1:port/path → status, body into out (may be NULL). */
static int fetch(int port, const char *path, char *out, size_t outlen)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    struct http_client_opts o = {.method = "GET", .url = url, .timeout_ms = 5000};
    struct http_response resp;
    memset(&resp, 0, sizeof(resp));
    int rc = http_fetch_sync(&o, &resp);
    int status = rc == 0 ? resp.status : -1;
    if (out && outlen) {
        snprintf(out, outlen, "%s", rc == 0 ? buf_cstr(&resp.body) : "");
    }
    http_response_free(&resp);
    return status;
}

static void wait_ready(struct run *r)
{
    for (int i = 0; i < 400; i++) { /* 20 s */
        int port = __atomic_load_n(&r->health_port, __ATOMIC_ACQUIRE);
        if (port > 0 && fetch(port, "/readyz", NULL, 0) == 200) {
            return;
        }
        lk_sleep_ms(50);
    }
    fail_msg("the manager did not become ready in 20 s");
}

static struct json_object *get(const struct kube_resource *res, const char *ns, const char *name)
{
    struct json_object *out = NULL;
    return kube_get(g_client, res, ns, name, &out, NULL) == 0 ? out : NULL;
}

/* Waits until ns/name of r exists and (when gen > 0) its status.observedGeneration is gen. */
static void wait_object(const struct kube_resource *res, const char *ns, const char *name,
                        int64_t gen)
{
    for (int i = 0; i < 300; i++) { /* 15 s */
        struct json_object *o = get(res, ns, name);
        int64_t og = 0;
        int ok =
            o && (gen <= 0 ||
                  (json_get_int64(o, "status.observedGeneration", &og, NULL, 0) == 0 && og == gen));
        json_object_put(o);
        if (ok) {
            return;
        }
        lk_sleep_ms(50);
    }
    fail_msg("%s %s/%s did not appear in 15 s", res->kind, ns, name);
}

struct sample_query {
    const char *name;
    const char *label_name, *label_value; /* one label to match, or NULL */
    const char *label2_name, *label2_value;
    double value;
    int found;
};

static int on_sample(void *ud, const char *name, size_t nlabels, const char *const *names,
                     const char *const *values, double value)
{
    struct sample_query *q = ud;
    if (strcmp(name, q->name) != 0) {
        return 0;
    }
    int m1 = !q->label_name, m2 = !q->label2_name;
    for (size_t i = 0; i < nlabels; i++) {
        m1 |= q->label_name && strcmp(names[i], q->label_name) == 0 &&
              strcmp(values[i], q->label_value) == 0;
        m2 |= q->label2_name && strcmp(names[i], q->label2_name) == 0 &&
              strcmp(values[i], q->label2_value) == 0;
    }
    if (m1 && m2) {
        q->value = value;
        q->found = 1;
    }
    return 0;
}

static double metric(const char *text, const char *name, const char *l1, const char *v1,
                     const char *l2, const char *v2)
{
    struct sample_query q = {name, l1, v1, l2, v2, 0, 0};
    char err[128];
    assert_int_equal(metrics_parse_text(text, strlen(text), on_sample, &q, err, sizeof(err)), 0);
    if (!q.found) {
        fail_msg("metric %s{%s=%s,%s=%s} missing", name, l1 ? l1 : "", v1 ? v1 : "", l2 ? l2 : "",
                 v2 ? v2 : "");
    }
    return q.value;
}

static const char *lease_holder(char *out, size_t outlen)
{
    struct json_object *l = get(&KUBE_LEASES, "default", "tandem-operator-leader");
    const char *h = NULL;
    snprintf(out, outlen, "%s",
             l && json_get_string(l, "spec.holderIdentity", &h, NULL, 0) == 0 ? h : "");
    json_object_put(l);
    return out;
}

/* A leader manager reconciles the unified example; endpoints and metrics; release at stop. */
static void test_manager_run(void **state)
{
    (void)state;
    create_file("manifests/examples/unified.yaml", NULL);
    struct run r;
    run_start(&r, "op-a", 1);
    wait_ready(&r);
    wait_object(&KUBE_DEPLOYMENTS, "default", "qwen-epp", 0);
    wait_object(&KUBE_DEPLOYMENTS, "default", "qwen-0-5b-worker", 0);
    wait_object(&OPCTL_INFERENCEPOOLS, "default", "qwen", 1);
    wait_object(&OPCTL_INFERENCEMODELS, "default", "qwen-0-5b", 1);
    char holder[256];
    assert_string_equal(lease_holder(holder, sizeof(holder)), "op-a");

    int hp = __atomic_load_n(&r.health_port, __ATOMIC_ACQUIRE);
    int mp = __atomic_load_n(&r.metrics_port, __ATOMIC_ACQUIRE);
    char body[256];
    assert_int_equal(fetch(hp, "/healthz", body, sizeof(body)), 200);
    assert_string_equal(body, "ok");
    assert_int_equal(fetch(hp, "/metrics", NULL, 0), 404); /* separate servers */
    static char text[1 << 20];
    assert_int_equal(fetch(mp, "/metrics", text, sizeof(text)), 200);
    assert_true(metric(text, "controller_runtime_reconcile_total", "controller", "inferencepool",
                       "result", "success") >= 1);
    assert_true(metric(text, "controller_runtime_reconcile_total", "controller", "inferencemodel",
                       "result", "success") >= 1);
    assert_true(metric(text, "controller_runtime_reconcile_errors_total", "controller",
                       "inferencepool", NULL, NULL) == 0);
    assert_true(metric(text, "controller_runtime_reconcile_time_seconds_count", "controller",
                       "inferencemodel", NULL, NULL) >= 1);
    assert_true(metric(text, "controller_runtime_reconcile_time_seconds_bucket", "controller",
                       "inferencemodel", "le", "60") >= 1);
    assert_true(metric(text, "controller_runtime_max_concurrent_reconciles", "controller",
                       "inferencepool", NULL, NULL) == 2);
    assert_true(metric(text, "controller_runtime_active_workers", "controller", "inferencepool",
                       NULL, NULL) >= 0);
    assert_true(metric(text, "workqueue_adds_total", "name", "inferencepool", "controller",
                       "inferencepool") >= 1);
    assert_true(metric(text, "workqueue_depth", "name", "inferencemodel", NULL, NULL) >= 0);
    assert_true(metric(text, "leader_election_master_status", "name", "tandem-operator-leader",
                       NULL, NULL) == 1);
    assert_true(metric(text, "tandem_operator_kube_requests_total", "verb", "write", NULL, NULL) >=
                8);
    assert_true(metric(text, "tandem_operator_kube_requests_total", "verb", "watch", NULL, NULL) >=
                10);
    assert_true(metric(text, "tandem_operator_cached_objects", NULL, NULL, NULL, NULL) >= 9);
    assert_true(metric(text, "process_resident_memory_bytes", NULL, NULL, NULL, NULL) > 1e6);

    /* a second candidate waits; the first stops and releases; the second takes over at once */
    struct run r2;
    run_start(&r2, "op-b", 1);
    wait_ready(&r2);
    assert_string_equal(lease_holder(holder, sizeof(holder)), "op-a");
    int mp2 = __atomic_load_n(&r2.metrics_port, __ATOMIC_ACQUIRE);
    assert_int_equal(fetch(mp2, "/metrics", text, sizeof(text)), 200);
    assert_true(metric(text, "leader_election_master_status", "name", "tandem-operator-leader",
                       NULL, NULL) == 0);
    assert_true(metric(text, "controller_runtime_reconcile_total", "controller", "inferencepool",
                       "result", "success") == 0); /* followers do not reconcile */
    assert_int_equal(run_stop(&r, 1), 0);
    int took_over = 0;
    for (int i = 0; i < 100 && !took_over; i++) { /* 5 s; the lease would take 2 s + retries */
        took_over = strcmp(lease_holder(holder, sizeof(holder)), "op-b") == 0;
        lk_sleep_ms(50);
    }
    assert_true(took_over);
    assert_int_equal(run_stop(&r2, 1), 0);
    assert_string_equal(lease_holder(holder, sizeof(holder)), ""); /* released */
}

/* Without --identity, candidates are "<$POD_NAME>_<uuid>": two with the same POD_NAME (or host)
 * still differ, so the second cannot mistake the first's Lease for its own. */
static void test_default_identity(void **state)
{
    (void)state;
    assert_int_equal(setenv("POD_NAME", "op-pod", 1), 0);
    struct run r, r2;
    run_start(&r, NULL, 1);
    run_start(&r2, NULL, 1);
    unsetenv("POD_NAME");
    wait_ready(&r);
    wait_ready(&r2);
    char first[256] = "", second[256] = "";
    /* (the previous test's candidate may still hold an unexpired Lease: 2 s) */
    for (int i = 0; i < 200 && strncmp(lease_holder(first, sizeof(first)), "op-pod_", 7) != 0;
         i++) {
        lk_sleep_ms(50);
    }
    assert_int_equal(strncmp(first, "op-pod_", 7), 0);
    assert_int_equal(strlen(first), 7 + 36); /* a UUID */
    assert_int_equal(first[7 + 14], '4');    /* version 4 */
    /* whichever leads stops and releases; the other takes over under its own identity */
    static char text[1 << 20];
    int r_leads = 0, r2_leads = 0;
    for (int i = 0; i < 100 && !r_leads && !r2_leads; i++) {
        int mp = __atomic_load_n(&r.metrics_port, __ATOMIC_ACQUIRE);
        int mp2 = __atomic_load_n(&r2.metrics_port, __ATOMIC_ACQUIRE);
        r_leads = fetch(mp, "/metrics", text, sizeof(text)) == 200 &&
                  metric(text, "leader_election_master_status", "name", "tandem-operator-leader",
                         NULL, NULL) == 1;
        r2_leads = !r_leads && fetch(mp2, "/metrics", text, sizeof(text)) == 200 &&
                   metric(text, "leader_election_master_status", "name", "tandem-operator-leader",
                          NULL, NULL) == 1;
        if (!r_leads && !r2_leads) {
            lk_sleep_ms(50);
        }
    }
    assert_true(r_leads || r2_leads);
    assert_int_equal(run_stop(r_leads ? &r : &r2, 1), 0);
    for (int i = 0; i < 100; i++) { /* 5 s */
        lease_holder(second, sizeof(second));
        if (second[0] && strcmp(second, first) != 0) {
            break;
        }
        lk_sleep_ms(50);
    }
    assert_int_equal(strncmp(second, "op-pod_", 7), 0);
    assert_string_not_equal(second, first);
    assert_int_equal(run_stop(r_leads ? &r2 : &r, 1), 0);
}

/* Renewals failing for longer than the renew deadline: manager_run returns 1. */
static void test_leader_lost(void **state)
{
    (void)state;
    struct run r;
    run_start(&r, "op-c", 1);
    wait_ready(&r);
    char holder[256];
    for (int i = 0; i < 100 && strcmp(lease_holder(holder, sizeof(holder)), "op-c") != 0; i++) {
        lk_sleep_ms(50);
    }
    assert_string_equal(holder, "op-c");
    assert_int_equal(lk_fault(g_client, "{\"type\":\"fail\",\"verb\":\"update\",\"resource\":"
                                        "\"leases\",\"code\":500,\"count\":0}"),
                     0);
    long long t0 = lk_now_ms();
    int rc = run_stop(&r, 0);
    assert_int_equal(lk_clear_faults(g_client), 0);
    assert_int_equal(rc, 1);
    assert_true(lk_now_ms() - t0 < 10000);
}

/* Without leader election: steady state makes zero writes; a second namespace is ignored when
 * the manager watches only one. */
static void test_steady_and_namespaces(void **state)
{
    (void)state;
    struct json_object *ns = obj("{apiVersion: v1, kind: Namespace, metadata: {name: team-a}}");
    struct kube_error err = {0};
    assert_int_equal(kube_create(g_client, &KUBE_NAMESPACES, NULL, ns, NULL, &err), 0);
    json_object_put(ns);
    create_file("manifests/examples/two-models-weighted.yaml", "team-a");
    create_file("manifests/examples/disaggregated.yaml", NULL);

    struct run r;
    static const char *const only[] = {"team-a"};
    run_start_ns(&r, "op-d", 0, only, 1);
    wait_ready(&r);
    wait_object(&KUBE_DEPLOYMENTS, "team-a", "chat-stable-worker", 0);
    wait_object(&KUBE_DEPLOYMENTS, "team-a", "chat-canary-worker", 0);
    wait_object(&OPCTL_INFERENCEMODELS, "team-a", "chat-canary", 1);
    wait_object(&OPCTL_INFERENCEPOOLS, "team-a", "chat", 1);
    /* quiet: no write for 1.5 s, then none for 3 s more */
    struct kube_client_stats st;
    unsigned long last = (unsigned long)-1;
    for (int i = 0; i < 20; i++) {
        kube_client_stats(r.client, &st);
        if (st.writes == last) {
            break;
        }
        last = st.writes;
        lk_sleep_ms(1500);
    }
    lk_sleep_ms(3000);
    kube_client_stats(r.client, &st);
    assert_int_equal(st.writes, last);
    struct json_object *o = get(&KUBE_DEPLOYMENTS, "default", "llama-1b-decode");
    assert_null(o); /* default is not watched */
    assert_int_equal(run_stop(&r, 1), 0);
}

/* The reason of condition type in obj's status, or NULL. */
static const char *condition_reason(struct json_object *o, const char *type)
{
    struct json_object *conds = json_get(o, "status.conditions");
    for (size_t i = 0; conds && i < json_object_array_length(conds); i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        const char *t = NULL, *reason = NULL;
        if (json_get_string(c, "type", &t, NULL, 0) == 0 && strcmp(t, type) == 0 &&
            json_get_string(c, "reason", &reason, NULL, 0) == 0) {
            return reason;
        }
    }
    return NULL;
}

/* The whole file at fd (from its start) into out. */
static void read_all(int fd, char *out, size_t outlen)
{
    size_t len = 0;
    ssize_t n;
    while (len + 1 < outlen && (n = pread(fd, out + len, outlen - 1 - len, (off_t)len)) > 0) {
        len += (size_t)n;
    }
    out[len] = '\0';
}

/* An ownership conflict (the EPP Service's name is taken by an object another owner controls)
 * goes through the manager's log path as a failed reconcile that names the conflict: the log
 * line says "object is owned by another controller", not "Unknown error 3001". */
static void test_ownership_conflict_logged(void **state)
{
    (void)state;
    struct kube_error err = {0};
    struct json_object *o = obj("{apiVersion: v1, kind: Namespace, metadata: {name: team-o}}");
    assert_int_equal(kube_create(g_client, &KUBE_NAMESPACES, NULL, o, NULL, &err), 0);
    json_object_put(o);
    struct json_object *anchor = NULL;
    o = obj("{apiVersion: v1, kind: ConfigMap, metadata: {name: anchor}}");
    assert_int_equal(kube_create(g_client, &KUBE_CONFIGMAPS, "team-o", o, &anchor, &err), 0);
    json_object_put(o);
    const char *uid = NULL;
    assert_int_equal(json_get_string(anchor, "metadata.uid", &uid, NULL, 0), 0);
    char text[1024];
    snprintf(text, sizeof(text),
             "{apiVersion: v1, kind: Service, metadata: {name: taken-epp, labels: "
             "{app.kubernetes.io/managed-by: tandem-operator}, ownerReferences: [{apiVersion: v1, "
             "kind: ConfigMap, name: anchor, uid: '%s', controller: true}]}, spec: {ports: "
             "[{port: 80}]}}",
             uid);
    json_object_put(anchor);
    o = obj(text);
    assert_int_equal(kube_create(g_client, &KUBE_SERVICES, "team-o", o, NULL, &err), 0);
    json_object_put(o);
    o = obj("{apiVersion: tandem.dev/v1alpha1, kind: InferencePool, metadata: {name: taken, "
            "namespace: team-o}, spec: {selector: {matchLabels: {app: taken}}}}");
    create_doc(o, "team-o");
    json_object_put(o);

    char path[] = "/tmp/test_manager_log_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    log_set_fd(fd);
    struct run r;
    static const char *const only[] = {"team-o"};
    run_start_ns(&r, "op-o", 0, only, 1);
    static char log_text[1 << 16];
    const char *want = "inferencepool team-o/taken: reconcile failed: object is owned by another "
                       "controller";
    int logged = 0, degraded = 0;
    for (int i = 0; i < 300 && !(logged && degraded); i++) { /* 15 s */
        read_all(fd, log_text, sizeof(log_text));
        logged = strstr(log_text, want) != NULL;
        struct json_object *p = get(&OPCTL_INFERENCEPOOLS, "team-o", "taken");
        const char *reason = condition_reason(p, "Degraded");
        degraded = reason && strcmp(reason, REASON_OWNERSHIP_CONFLICT) == 0;
        json_object_put(p);
        if (!(logged && degraded)) {
            lk_sleep_ms(50);
        }
    }
    assert_int_equal(run_stop(&r, 1), 0);
    log_set_fd(2);
    read_all(fd, log_text, sizeof(log_text));
    close(fd);
    if (!logged) {
        fail_msg("no \"%s\" in the log:\n%s", want, log_text);
    }
    assert_true(degraded);
    assert_null(strstr(log_text, "Unknown error"));
    assert_null(strstr(log_text, "unknown error"));
}

/* The watch table's map function that reads the cache: a pool whose spec changed (or that came or
 * went) wakes the models that name it; a status-only update or a resync does not. */
static void test_watch_models_of_pool(void **state)
{
    (void)state;
    struct json_object *ns = obj("{apiVersion: v1, kind: Namespace, metadata: {name: team-w}}");
    struct kube_error err = {0};
    assert_int_equal(kube_create(g_client, &KUBE_NAMESPACES, NULL, ns, NULL, &err), 0);
    json_object_put(ns);
    create_file("manifests/examples/two-models-weighted.yaml", "team-w");
    static const char *const only[] = {"team-w"};
    struct opctl_cache *cache = opctl_cache_new(g_client, only, 1, 0, NULL, NULL);
    assert_non_null(cache);
    assert_int_equal(opctl_cache_start(cache), 0);
    assert_int_equal(opctl_cache_wait_synced(cache, 10000), 0);
    struct json_object *p = opctl_cache_get(cache, OPCTL_POOL, "team-w", "chat");
    assert_non_null(p);
    int64_t gen = 0;
    assert_int_equal(json_get_int64(p, "metadata.generation", &gen, NULL, 0), 0);
    struct json_object *status_only = NULL, *spec = NULL;
    assert_int_equal(json_object_deep_copy(p, &status_only, NULL), 0);
    json_object_object_add(json_get(status_only, "metadata"), "resourceVersion",
                           json_object_new_string("status-only"));
    assert_int_equal(json_object_deep_copy(status_only, &spec, NULL), 0);
    json_object_object_add(json_get(spec, "metadata"), "generation",
                           json_object_new_int64(gen + 1));

    struct keys ks = {0};
    watches_dispatch(cache, OPCTL_POOL, OPCTL_UPDATED, status_only, spec, collect, &ks);
    assert_int_equal(ks.n, 3);
    assert_true(has(&ks, "inferencepool:team-w/chat"));
    assert_true(has(&ks, "inferencemodel:team-w/chat-stable"));
    assert_true(has(&ks, "inferencemodel:team-w/chat-canary"));
    ks.n = 0;
    watches_dispatch(cache, OPCTL_POOL, OPCTL_ADDED, NULL, p, collect, &ks);
    assert_int_equal(ks.n, 3);
    ks.n = 0;
    watches_dispatch(cache, OPCTL_POOL, OPCTL_DELETED, NULL, p, collect, &ks);
    assert_int_equal(ks.n, 3);
    ks.n = 0;
    watches_dispatch(cache, OPCTL_POOL, OPCTL_UPDATED, p, status_only, collect, &ks);
    assert_int_equal(ks.n, 0);
    watches_dispatch(cache, OPCTL_POOL, OPCTL_UPDATED, p, p, collect, &ks); /* resync */
    assert_int_equal(ks.n, 1);
    assert_true(has(&ks, "inferencepool:team-w/chat"));
    json_object_put(spec);
    json_object_put(status_only);
    json_object_put(p);
    opctl_cache_free(cache);
}

int main(void)
{
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(test_parse_bind_address),
        cmocka_unit_test(test_parse_duration),
        cmocka_unit_test(test_watches),
        cmocka_unit_test(test_kinds),
    };
    const struct CMUnitTest live[] = {
        cmocka_unit_test(test_manager_run),
        cmocka_unit_test(test_leader_lost),
        cmocka_unit_test(test_default_identity),
        cmocka_unit_test(test_steady_and_namespaces),
        cmocka_unit_test(test_watch_models_of_pool),
        cmocka_unit_test(test_ownership_conflict_logged),
    };
    int failed = cmocka_run_group_tests_name("pure", pure, NULL, NULL);
    failed += cmocka_run_group_tests_name("localkube", live, group_setup, group_teardown);
    return failed;
}
