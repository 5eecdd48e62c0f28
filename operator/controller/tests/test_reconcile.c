/*
 * Reconcile tests against localkube's API server emulator (started by lib/kube's lk_harness.h,
 * with the CRDs of crds/ applied): the example disaggregated pool and model become the expected
 * objects; a second reconcile makes zero write requests (kube_client_stats); an invalid spec, a
 * missing pool or ConfigMap and MultiNode set conditions and touch no workload; spec changes
 * update Deployments, Disaggregated → Unified deletes the role Deployments no longer wanted,
 * Unified ↔ DaemonSet swaps the Deployment for a DaemonSet and back; an
 * HPA's replicas are left alone; rollout and pod state show in status; an object controlled by
 * another owner is not taken over; Events are recorded.
 *
 * No controllers run in this emulator (no Deployment controller, no kubelet): the tests write
 * Deployment and Pod status themselves where they need it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/json.h"
#include "lib/kube/events.h"
#include "lib/kube/tests/lk_harness.h"
#include "lib/log.h"
#include "lib/yaml.h"
#include "operator/controller/apply.h"
#include "operator/controller/eppconfig.h"
#include "operator/controller/cache.h"
#include "operator/controller/reconcile_model.h"
#include "operator/controller/reconcile_pool.h"
#include "operator/controller/status.h"

#define NS "default"

static struct lk g_lk;
static struct kube_client *g_client;   /* the test's own writes */
static struct kube_client *g_opclient; /* the reconcilers' client: its stats are checked */
static struct opctl_cache *g_cache;
static struct reconcile_ctx g_ctx;

static time_t fixed_now(void)
{
    return 1700000000;
}

/* ---- helpers ---- */

static struct json_object *parse(const char *fmt, ...) TANDEM_PRINTF(1, 2);
static struct json_object *parse(const char *fmt, ...)
{
    char text[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    char err[256];
    struct json_object *o = yaml_parse(text, strlen(text), err, sizeof(err));
    if (!o) {
        fail_msg("bad YAML/JSON in test: %s: %s", err, text);
    }
    return o;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail_msg("cannot open %s", path);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)n + 1);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
    data[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return data;
}

static const char *str(struct json_object *o, const char *path)
{
    const char *s = NULL;
    return json_get_string(o, path, &s, NULL, 0) == 0 ? s : NULL;
}

static int64_t num(struct json_object *o, const char *path)
{
    int64_t v = -1;
    return json_get_int64(o, path, &v, NULL, 0) == 0 ? v : -1;
}

static const struct kube_resource *resource_of(struct json_object *obj)
{
    const char *kind = str(obj, "kind");
    if (kind && strcmp(kind, "CustomResourceDefinition") == 0) {
        return &KUBE_CRDS;
    }
    enum opctl_kind k;
    if (opctl_kind_of(obj, &k) != 0) {
        fail_msg("unexpected kind %s", kind ? kind : "?");
    }
    return opctl_resource(k);
}

static void create(struct json_object *obj)
{
    struct kube_error err = {0};
    const struct kube_resource *r = resource_of(obj);
    int rc = kube_create(g_client, r, r->namespaced ? NS : NULL, obj, NULL, &err);
    if (rc != 0) {
        fail_msg("create %s %s: %s %s", str(obj, "kind"), str(obj, "metadata.name"),
                 tandem_strerror(rc), err.message);
    }
}

/* Creates every document of a YAML file (path relative to the repository root). */
static void create_file(const char *rel)
{
    char path[512];
    size_t len;
    snprintf(path, sizeof(path), "../../../%s", rel);
    char *text = slurp(path, &len);
    struct json_object *docs = NULL;
    char err[256];
    if (yaml_parse_all(text, len, &docs, err, sizeof(err)) != 0) {
        fail_msg("%s: %s", path, err);
    }
    free(text);
    for (size_t i = 0; i < json_object_array_length(docs); i++) {
        create(json_object_array_get_idx(docs, i));
    }
    json_object_put(docs);
}

static struct json_object *get(const struct kube_resource *r, const char *name)
{
    struct json_object *out = NULL;
    int rc = kube_get(g_client, r, NS, name, &out, NULL);
    return rc == 0 ? out : NULL;
}

static int exists(const struct kube_resource *r, const char *name)
{
    struct json_object *o = get(r, name);
    json_object_put(o);
    return o != NULL;
}

static void patch(const struct kube_resource *r, const char *name, const char *body)
{
    struct kube_error err = {0};
    int rc =
        kube_patch(g_client, r, NS, name, KUBE_PATCH_MERGE, body, strlen(body), NULL, NULL, &err);
    if (rc != 0) {
        fail_msg("patch %s %s: %s %s", r->plural, name, tandem_strerror(rc), err.message);
    }
}

static void patch_status(const struct kube_resource *r, const char *name, const char *body)
{
    struct kube_error err = {0};
    struct kube_patch_options o = {.subresource = "status"};
    int rc =
        kube_patch(g_client, r, NS, name, KUBE_PATCH_MERGE, body, strlen(body), &o, NULL, &err);
    if (rc != 0) {
        fail_msg("patch status %s %s: %s %s", r->plural, name, tandem_strerror(rc), err.message);
    }
}

/* Waits until every informer holds exactly what the server has (names and resourceVersions). */
static void sync_cache(void)
{
    for (int attempt = 0; attempt < 400; attempt++) { /* up to 20 s */
        int ok = 1;
        for (int k = 0; k < OPCTL_NKINDS && ok; k++) {
            struct kube_list_options lo = {.label_selector = k == OPCTL_POOL || k == OPCTL_MODEL
                                                                 ? NULL
                                                                 : LABEL_MANAGED_BY
                                                                 "=" MANAGED_BY_OPERATOR};
            struct json_object *list = NULL, **items = NULL;
            size_t n = 0;
            if (kube_list_all(g_client, opctl_resource((enum opctl_kind)k), NULL, &lo, &list,
                              NULL) != 0 ||
                opctl_cache_list(g_cache, (enum opctl_kind)k, NULL, NULL, &items, &n) != 0) {
                fail_msg("sync_cache: list failed");
            }
            struct json_object *sitems = json_get(list, "items");
            size_t sn = sitems ? json_object_array_length(sitems) : 0;
            ok = sn == n;
            for (size_t i = 0; i < sn && ok; i++) {
                struct json_object *s = json_object_array_get_idx(sitems, i);
                int found = 0;
                for (size_t j = 0; j < n && !found; j++) {
                    found = strcmp(str(s, "metadata.uid"), str(items[j], "metadata.uid")) == 0 &&
                            strcmp(str(s, "metadata.resourceVersion"),
                                   str(items[j], "metadata.resourceVersion")) == 0;
                }
                ok = found;
            }
            json_object_put(list);
            opctl_items_free(items, n);
        }
        if (ok) {
            return;
        }
        lk_sleep_ms(50);
    }
    fail_msg("the informer cache did not catch up with the server in 20 s");
}

static unsigned long writes(void)
{
    struct kube_client_stats st;
    kube_client_stats(g_opclient, &st);
    return st.writes;
}

static void pool_ok(const char *name, struct reconcile_result *res)
{
    int rc = reconcile_pool(&g_ctx, NS, name, res);
    if (rc != 0) {
        fail_msg("reconcile_pool %s: %s", name, tandem_strerror(rc));
    }
}

static void model_ok(const char *name, struct reconcile_result *res)
{
    int rc = reconcile_model(&g_ctx, NS, name, res);
    if (rc != 0) {
        fail_msg("reconcile_model %s: %s", name, tandem_strerror(rc));
    }
}

/* Reconciles pool and models until a round needs no requeue, syncing the cache in between. */
static void converge(const char *pool, const char *const *models, size_t nmodels)
{
    for (int round = 0; round < 5; round++) {
        struct reconcile_result res;
        int again = 0;
        if (pool) {
            pool_ok(pool, &res);
            again |= res.requeue;
        }
        for (size_t i = 0; i < nmodels; i++) {
            model_ok(models[i], &res);
            again |= res.requeue;
        }
        sync_cache();
        if (!again) {
            return;
        }
    }
    fail_msg("no convergence in 5 rounds");
}

/* Asserts that reconciling again sends no write request at all. */
static void assert_steady(const char *pool, const char *const *models, size_t nmodels)
{
    unsigned long before = writes();
    unsigned long c = g_ctx.created, u = g_ctx.updated, d = g_ctx.deleted, s = g_ctx.status_writes;
    for (int round = 0; round < 2; round++) {
        struct reconcile_result res;
        if (pool) {
            pool_ok(pool, &res);
            assert_int_equal(res.requeue, 0);
        }
        for (size_t i = 0; i < nmodels; i++) {
            model_ok(models[i], &res);
            assert_int_equal(res.requeue, 0);
        }
    }
    assert_int_equal(writes(), before);
    assert_int_equal(g_ctx.created, c);
    assert_int_equal(g_ctx.updated, u);
    assert_int_equal(g_ctx.deleted, d);
    assert_int_equal(g_ctx.status_writes, s);
}

static const char *cond(struct json_object *obj, const char *type, const char *field)
{
    struct json_object *c = status_find_condition(json_get(obj, "status.conditions"), type);
    return c ? str(c, field) : NULL;
}

/* Number of Deployments labelled with the pool (or model) name. */
static size_t count_deployments(const char *label, const char *value)
{
    char sel[256];
    snprintf(sel, sizeof(sel), "%s=%s", label, value);
    struct kube_list_options lo = {.label_selector = sel};
    struct json_object *list = NULL;
    assert_int_equal(kube_list_all(g_client, &KUBE_DEPLOYMENTS, NS, &lo, &list, NULL), 0);
    size_t n = json_object_array_length(json_get(list, "items"));
    json_object_put(list);
    return n;
}

/* ---- setup ---- */

static int group_setup(void **state)
{
    (void)state;
    log_init("test_reconcile", getenv("LK_DEBUG") ? LOGL_DEBUG : LOGL_ERROR, LOG_FORMAT_TEXT);
    if (lk_start(&g_lk) != 0) {
        return -1;
    }
    g_client = lk_client(&g_lk, NULL);
    g_opclient = lk_client(&g_lk, NULL);
    if (!g_client || !g_opclient) {
        return -1;
    }
    create_file("crds/inferencepools.yaml");
    create_file("crds/inferencemodels.yaml");
    /* wait until the new resources are served */
    int served = 0;
    for (int i = 0; i < 200 && !served; i++) {
        struct json_object *l1 = NULL, *l2 = NULL;
        served = kube_list(g_client, &OPCTL_INFERENCEPOOLS, NULL, NULL, &l1, NULL) == 0 &&
                 kube_list(g_client, &OPCTL_INFERENCEMODELS, NULL, NULL, &l2, NULL) == 0;
        json_object_put(l1);
        json_object_put(l2);
        if (!served) {
            lk_sleep_ms(50);
        }
    }
    if (!served) {
        return -1;
    }
    g_cache = opctl_cache_new(g_opclient, NULL, 0, 0, NULL, NULL);
    if (!g_cache || opctl_cache_start(g_cache) != 0 ||
        opctl_cache_wait_synced(g_cache, 20000) != 0) {
        return -1;
    }
    g_ctx = (struct reconcile_ctx){.client = g_opclient, .cache = g_cache, .now = fixed_now};
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    opctl_cache_free(g_cache);
    kube_client_free(g_opclient);
    kube_client_free(g_client);
    lk_stop(&g_lk);
    return 0;
}

/* ---- tests ---- */

/* The disaggregated example → every object, with owners; a second reconcile writes nothing. */
static void test_example_disaggregated(void **state)
{
    (void)state;
    create_file("manifests/examples/disaggregated.yaml");
    sync_cache();
    unsigned long created0 = g_ctx.created;
    struct reconcile_result res;
    pool_ok("llama-pd", &res);
    assert_int_equal(res.requeue, 0);
    assert_int_equal(res.requeue_after_ms, 0);
    model_ok("llama-1b", &res);
    assert_int_equal(g_ctx.created - created0, 11); /* 9 for the pool, 2 for the model */

    struct json_object *pool = get(&OPCTL_INFERENCEPOOLS, "llama-pd");
    struct json_object *model = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_non_null(pool);
    assert_non_null(model);
    static const struct {
        const struct kube_resource *r;
        const char *name;
        int model_owned;
    } want[] = {
        {&KUBE_SERVICEACCOUNTS, "llama-pd-epp", 0},
        {&KUBE_SERVICEACCOUNTS, "llama-pd-agent", 0},
        {&KUBE_ROLES, "llama-pd-epp", 0},
        {&KUBE_ROLEBINDINGS, "llama-pd-epp", 0},
        {&KUBE_CONFIGMAPS, "llama-pd-epp-config", 0},
        {&KUBE_DEPLOYMENTS, "llama-pd-epp", 0},
        {&KUBE_SERVICES, "llama-pd-epp", 0},
        {&KUBE_DEPLOYMENTS, "llama-1b-prefill", 1},
        {&KUBE_DEPLOYMENTS, "llama-1b-decode", 1},
    };
    for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
        struct json_object *o = get(want[i].r, want[i].name);
        if (!o) {
            fail_msg("%s %s missing", want[i].r->kind, want[i].name);
        }
        struct json_object *owner = want[i].model_owned ? model : pool;
        assert_string_equal(str(o, "metadata.ownerReferences[0].uid"), str(owner, "metadata.uid"));
        assert_true(json_object_get_boolean(json_get(o, "metadata.ownerReferences[0].controller")));
        json_object_put(o);
    }
    struct json_object *d = get(&KUBE_DEPLOYMENTS, "llama-1b-prefill");
    assert_int_equal(num(d, "spec.replicas"), 2);
    json_object_put(d);
    d = get(&KUBE_DEPLOYMENTS, "llama-1b-decode");
    assert_int_equal(num(d, "spec.replicas"), 3);
    json_object_put(d);
    json_object_put(pool);
    json_object_put(model);

    /* status written once, through /status */
    pool = get(&OPCTL_INFERENCEPOOLS, "llama-pd");
    assert_int_equal(num(pool, "status.observedGeneration"), 1);
    assert_string_equal(cond(pool, COND_READY, "status"), "False");
    assert_string_equal(cond(pool, COND_READY, "reason"), REASON_EPP_UNAVAILABLE);
    assert_string_equal(cond(pool, COND_PROGRESSING, "status"), "True");
    assert_string_equal(cond(pool, COND_READY, "lastTransitionTime"), "2023-11-14T22:13:20Z");
    json_object_put(pool);
    model = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_int_equal(num(model, "status.deploymentStatus.desiredPods"), 5);
    assert_string_equal(cond(model, COND_READY, "reason"), REASON_UNAVAILABLE);
    assert_string_equal(cond(model, COND_DEGRADED, "status"), "False");
    json_object_put(model);

    sync_cache();
    static const char *const models[] = {"llama-1b"};
    assert_steady("llama-pd", models, 1);
}

/* Deployment and pod state show in the model's and the pool's status. */
static void test_rollout_status(void **state)
{
    (void)state;
    static const char *const models[] = {"llama-1b"};
    struct json_object *d = get(&KUBE_DEPLOYMENTS, "llama-1b-decode");
    int64_t gen = num(d, "metadata.generation");
    json_object_put(d);
    char body[512];
    snprintf(body, sizeof(body),
             "{\"status\":{\"observedGeneration\":%lld,\"replicas\":3,\"updatedReplicas\":2,"
             "\"readyReplicas\":2,\"availableReplicas\":2}}",
             (long long)gen);
    patch_status(&KUBE_DEPLOYMENTS, "llama-1b-decode", body);
    d = get(&KUBE_DEPLOYMENTS, "llama-1b-prefill");
    snprintf(body, sizeof(body),
             "{\"status\":{\"observedGeneration\":%lld,\"replicas\":2,\"updatedReplicas\":2,"
             "\"readyReplicas\":2,\"availableReplicas\":2}}",
             (long long)num(d, "metadata.generation"));
    json_object_put(d);
    patch_status(&KUBE_DEPLOYMENTS, "llama-1b-prefill", body);
    sync_cache();
    converge(NULL, models, 1);
    struct json_object *m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_string_equal(cond(m, COND_PROGRESSING, "status"), "True");
    assert_string_equal(cond(m, COND_PROGRESSING, "message"), "decode: 2/3 updated");
    assert_string_equal(cond(m, COND_READY, "message"), "prefill 2/2 ready, decode 2/3 ready");
    assert_int_equal(num(m, "status.deploymentStatus.prefillWorkersReady"), 2);
    assert_int_equal(num(m, "status.deploymentStatus.decodeWorkersReady"), 2);
    assert_int_equal(num(m, "status.deploymentStatus.updatedPods"), 4);
    json_object_put(m);

    /* a crash-looping decode pod of the model: Degraded, and counted by the pool */
    struct json_object *pod = parse(
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"llama-1b-decode-x\","
        "\"labels\":{\"app\":\"llama-pd\",\"llm-d.ai/role\":\"decode\",\"tandem.dev/pool\":"
        "\"llama-pd\",\"tandem.dev/model\":\"llama-1b\",\"app.kubernetes.io/managed-by\":"
        "\"tandem-operator\"}},\"spec\":{\"containers\":[{\"name\":\"agent\",\"image\":\"a\"}]}}");
    create(pod);
    json_object_put(pod);
    patch_status(&KUBE_PODS, "llama-1b-decode-x",
                 "{\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\","
                 "\"status\":\"False\"}],\"containerStatuses\":[{\"name\":\"agent\",\"ready\":"
                 "false,\"restartCount\":4,\"image\":\"a\",\"imageID\":\"\",\"state\":{\"waiting\":"
                 "{\"reason\":\"CrashLoopBackOff\"}}}]}}");
    sync_cache();
    converge("llama-pd", models, 1);
    m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_string_equal(cond(m, COND_DEGRADED, "status"), "True");
    assert_string_equal(cond(m, COND_DEGRADED, "reason"), REASON_PODS_FAILING);
    assert_non_null(strstr(cond(m, COND_DEGRADED, "message"), "llama-1b-decode-x"));
    assert_int_equal(num(m, "status.deploymentStatus.totalPods"), 1);
    json_object_put(m);
    struct json_object *p = get(&OPCTL_INFERENCEPOOLS, "llama-pd");
    assert_int_equal(num(p, "status.totalPods"), 1);
    assert_int_equal(num(p, "status.availablePods"), 0);
    assert_int_equal(num(p, "status.unhealthyPods"), 1);
    json_object_put(p);

    /* recovered: ready, rollout done */
    patch_status(&KUBE_PODS, "llama-1b-decode-x",
                 "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}],"
                 "\"containerStatuses\":[{\"name\":\"agent\",\"ready\":true,\"restartCount\":4,"
                 "\"image\":\"a\",\"imageID\":\"\",\"state\":{\"running\":{}}}]}}");
    snprintf(body, sizeof(body),
             "{\"status\":{\"observedGeneration\":%lld,\"replicas\":3,\"updatedReplicas\":3,"
             "\"readyReplicas\":3,\"availableReplicas\":3}}",
             (long long)gen);
    patch_status(&KUBE_DEPLOYMENTS, "llama-1b-decode", body);
    sync_cache();
    converge("llama-pd", models, 1);
    m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_string_equal(cond(m, COND_READY, "status"), "True");
    assert_string_equal(cond(m, COND_PROGRESSING, "status"), "False");
    assert_string_equal(cond(m, COND_DEGRADED, "status"), "False");
    json_object_put(m);
    p = get(&OPCTL_INFERENCEPOOLS, "llama-pd");
    assert_int_equal(num(p, "status.availablePods"), 1);
    json_object_put(p);
    assert_steady("llama-pd", models, 1);
    struct kube_error err = {0};
    assert_int_equal(kube_delete(g_client, &KUBE_PODS, NS, "llama-1b-decode-x", NULL, NULL, &err),
                     0);
    sync_cache();
    converge("llama-pd", models, 1);
}

/* A spec change updates the Deployments; Disaggregated → Unified deletes prefill/decode. */
static void test_spec_change(void **state)
{
    (void)state;
    static const char *const models[] = {"llama-1b"};
    unsigned long u0 = g_ctx.updated;
    patch(&OPCTL_INFERENCEMODELS, "llama-1b",
          "{\"spec\":{\"runtime\":{\"config\":{"
          "\"maxNumSeqs\":64}}}}");
    sync_cache();
    converge(NULL, models, 1);
    assert_int_equal(g_ctx.updated - u0, 2);
    struct json_object *d = get(&KUBE_DEPLOYMENTS, "llama-1b-decode");
    struct json_object *args = json_get(d, "spec.template.spec.containers[0].args");
    int found = 0;
    for (size_t i = 0; i + 1 < json_object_array_length(args); i++) {
        const char *a = json_object_get_string(json_object_array_get_idx(args, i));
        const char *v = json_object_get_string(json_object_array_get_idx(args, i + 1));
        found |= strcmp(a, "--max-num-seqs") == 0 && strcmp(v, "64") == 0;
    }
    assert_true(found);
    assert_int_equal(num(d, "spec.replicas"), 3);
    json_object_put(d);
    struct json_object *m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_int_equal(num(m, "status.observedGeneration"), num(m, "metadata.generation"));
    /* the Deployments' generations moved past what their status observed: rolling out */
    assert_string_equal(cond(m, COND_PROGRESSING, "status"), "True");
    json_object_put(m);
    assert_steady(NULL, models, 1);

    unsigned long d0 = g_ctx.deleted;
    patch(&OPCTL_INFERENCEMODELS, "llama-1b",
          "{\"spec\":{\"deployment\":{\"type\":\"Unified\",\"prefillWorkers\":null,"
          "\"decodeWorkers\":null,\"unifiedWorkers\":{\"replicas\":1}}}}");
    sync_cache();
    converge(NULL, models, 1);
    m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    if (strcmp(cond(m, COND_READY, "reason"), REASON_INVALID_SPEC) == 0) {
        fail_msg("Unified in a disaggregated pool refused: %s", cond(m, COND_READY, "message"));
    }
    assert_int_equal(g_ctx.deleted - d0, 2);
    assert_false(exists(&KUBE_DEPLOYMENTS, "llama-1b-prefill"));
    assert_false(exists(&KUBE_DEPLOYMENTS, "llama-1b-decode"));
    assert_true(exists(&KUBE_DEPLOYMENTS, "llama-1b-worker"));
    assert_non_null(json_get(m, "status.deploymentStatus"));
    assert_null(json_get(m, "status.deploymentStatus.prefillWorkersReady"));
    json_object_put(m);
    assert_steady(NULL, models, 1);
}

/* Unified → DaemonSet → Unified: the DaemonSet replaces the Deployment (same pod template and
 * labels) and back; its status feeds the model's; replicas with a DaemonSet are refused. */
static void test_daemonset(void **state)
{
    (void)state;
    static const char *const models[] = {"llama-1b"};
    struct json_object *dep = get(&KUBE_DEPLOYMENTS, "llama-1b-worker");
    assert_non_null(dep);
    unsigned long d0 = g_ctx.deleted, c0 = g_ctx.created;
    patch(&OPCTL_INFERENCEMODELS, "llama-1b",
          "{\"spec\":{\"deployment\":{\"type\":\"DaemonSet\",\"unifiedWorkers\":null,"
          "\"daemonSet\":{\"nodeSelector\":{\"gpu\":\"l4\"}}}}}");
    sync_cache();
    converge(NULL, models, 1);
    struct json_object *m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    if (strcmp(cond(m, COND_READY, "reason"), REASON_INVALID_SPEC) == 0) {
        fail_msg("DaemonSet refused: %s", cond(m, COND_READY, "message"));
    }
    json_object_put(m);
    assert_int_equal(g_ctx.created - c0, 1);
    assert_int_equal(g_ctx.deleted - d0, 1);
    assert_false(exists(&KUBE_DEPLOYMENTS, "llama-1b-worker"));
    struct json_object *ds = get(&KUBE_DAEMONSETS, "llama-1b-worker");
    assert_non_null(ds);
    struct json_object *model = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_string_equal(str(ds, "metadata.ownerReferences[0].uid"), str(model, "metadata.uid"));
    json_object_put(model);
    /* the pods join the pool as the Deployment's did: the same labels and selector */
    assert_true(json_object_equal(json_get(ds, "spec.template.metadata.labels"),
                                  json_get(dep, "spec.template.metadata.labels")));
    assert_true(json_object_equal(json_get(ds, "spec.selector"), json_get(dep, "spec.selector")));
    assert_true(json_object_equal(json_get(ds, "spec.template.spec.containers[0].args"),
                                  json_get(dep, "spec.template.spec.containers[0].args")));
    assert_string_equal(str(ds, "spec.template.spec.nodeSelector.gpu"), "l4");
    assert_string_equal(str(ds, "spec.template.spec.volumes[1].emptyDir.medium"), "Memory");
    json_object_put(dep);
    /* not observed by a DaemonSet controller yet: not ready */
    m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_string_equal(cond(m, COND_READY, "status"), "False");
    assert_string_equal(cond(m, COND_PROGRESSING, "status"), "True");
    json_object_put(m);
    assert_steady(NULL, models, 1);

    /* the DaemonSet's status (numberReady / desiredNumberScheduled) is the model's */
    char body[512];
    snprintf(body, sizeof(body),
             "{\"status\":{\"observedGeneration\":%lld,\"desiredNumberScheduled\":2,"
             "\"currentNumberScheduled\":2,\"updatedNumberScheduled\":2,\"numberReady\":1,"
             "\"numberAvailable\":1,\"numberMisscheduled\":0}}",
             (long long)num(ds, "metadata.generation"));
    patch_status(&KUBE_DAEMONSETS, "llama-1b-worker", body);
    sync_cache();
    converge(NULL, models, 1);
    m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_int_equal(num(m, "status.deploymentStatus.unifiedWorkersReady"), 1);
    assert_int_equal(num(m, "status.deploymentStatus.desiredPods"), 2);
    assert_string_equal(str(m, "status.deploymentStatus.workers"), "1/2");
    assert_string_equal(cond(m, COND_READY, "status"), "False");
    assert_string_equal(cond(m, COND_READY, "message"), "worker 1/2 ready");
    json_object_put(m);
    snprintf(body, sizeof(body),
             "{\"status\":{\"numberReady\":2,\"numberAvailable\":2,\"observedGeneration\":%lld}}",
             (long long)num(ds, "metadata.generation"));
    patch_status(&KUBE_DAEMONSETS, "llama-1b-worker", body);
    sync_cache();
    converge(NULL, models, 1);
    m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_string_equal(cond(m, COND_READY, "status"), "True");
    assert_string_equal(cond(m, COND_PROGRESSING, "status"), "False");
    assert_string_equal(str(m, "status.deploymentStatus.workers"), "2/2");
    json_object_put(m);
    assert_steady(NULL, models, 1);

    /* replicas (unifiedWorkers) with a DaemonSet: refused, naming the field; no workload change */
    char rv_before[64];
    json_object_put(ds);
    ds = get(&KUBE_DAEMONSETS, "llama-1b-worker");
    snprintf(rv_before, sizeof(rv_before), "%s", str(ds, "metadata.resourceVersion"));
    json_object_put(ds);
    patch(&OPCTL_INFERENCEMODELS, "llama-1b",
          "{\"spec\":{\"deployment\":{\"unifiedWorkers\":{\"replicas\":3}}}}");
    sync_cache();
    converge(NULL, models, 1);
    m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_string_equal(cond(m, COND_READY, "reason"), REASON_INVALID_SPEC);
    assert_non_null(strstr(cond(m, COND_READY, "message"), "spec.deployment.unifiedWorkers"));
    json_object_put(m);
    ds = get(&KUBE_DAEMONSETS, "llama-1b-worker");
    assert_string_equal(str(ds, "metadata.resourceVersion"), rv_before);
    json_object_put(ds);

    /* back to Unified: the DaemonSet goes, the Deployment comes back */
    d0 = g_ctx.deleted;
    patch(&OPCTL_INFERENCEMODELS, "llama-1b",
          "{\"spec\":{\"deployment\":{\"type\":\"Unified\",\"daemonSet\":null,"
          "\"unifiedWorkers\":{\"replicas\":1}}}}");
    sync_cache();
    converge(NULL, models, 1);
    assert_int_equal(g_ctx.deleted - d0, 1);
    assert_false(exists(&KUBE_DAEMONSETS, "llama-1b-worker"));
    assert_true(exists(&KUBE_DEPLOYMENTS, "llama-1b-worker"));
    m = get(&OPCTL_INFERENCEMODELS, "llama-1b");
    assert_string_equal(cond(m, COND_READY, "reason"), REASON_UNAVAILABLE);
    json_object_put(m);
    assert_steady(NULL, models, 1);
}

/* An invalid pool spec: a condition naming the field, no workload; steady afterwards. */
static void test_invalid_pool(void **state)
{
    (void)state;
    struct json_object *o = parse("apiVersion: tandem.dev/v1alpha1\nkind: InferencePool\n"
                                  "metadata: {name: bad, namespace: default}\n"
                                  "spec:\n  selector: {matchLabels: {app: bad}}\n"
                                  "  targetPort: 8200\n");
    create(o);
    json_object_put(o);
    sync_cache();
    unsigned long c0 = g_ctx.created;
    struct reconcile_result res;
    pool_ok("bad", &res);
    assert_int_equal(g_ctx.created, c0);
    struct json_object *p = get(&OPCTL_INFERENCEPOOLS, "bad");
    assert_string_equal(cond(p, COND_READY, "status"), "False");
    assert_string_equal(cond(p, COND_READY, "reason"), REASON_INVALID_SPEC);
    assert_string_equal(cond(p, COND_DEGRADED, "status"), "True");
    assert_non_null(strstr(cond(p, COND_READY, "message"), "spec.targetPort"));
    assert_int_equal(num(p, "status.observedGeneration"), 1);
    json_object_put(p);
    assert_false(exists(&KUBE_SERVICEACCOUNTS, "bad-epp"));
    assert_int_equal(count_deployments(LABEL_POOL, "bad"), 0);
    sync_cache();
    assert_steady("bad", NULL, 0);

    /* fixed: the workload appears */
    patch(&OPCTL_INFERENCEPOOLS, "bad", "{\"spec\":{\"targetPort\":8000}}");
    sync_cache();
    converge("bad", NULL, 0);
    assert_true(exists(&KUBE_DEPLOYMENTS, "bad-epp"));
    p = get(&OPCTL_INFERENCEPOOLS, "bad");
    assert_string_equal(cond(p, COND_READY, "reason"), REASON_EPP_UNAVAILABLE);
    assert_int_equal(num(p, "status.observedGeneration"), 2);
    json_object_put(p);
}

/* Model problems: pool missing (recheck in 30 s), MultiNode, invalid against the pool. */
static void test_model_problems(void **state)
{
    (void)state;
    struct json_object *o = parse("apiVersion: tandem.dev/v1alpha1\nkind: InferenceModel\n"
                                  "metadata: {name: orphan, namespace: default}\n"
                                  "spec:\n  poolRef: {name: nowhere}\n  modelName: m\n"
                                  "  modelSource: {storageUri: 'file:///models/m.gguf'}\n");
    create(o);
    json_object_put(o);
    o = parse(
        "apiVersion: tandem.dev/v1alpha1\nkind: InferenceModel\n"
        "metadata: {name: big, namespace: default}\n"
        "spec:\n  poolRef: {name: llama-pd}\n  modelName: big\n"
        "  modelSource: {storageUri: 'file:///models/big.gguf'}\n"
        "  deployment: {type: MultiNode, tensorParallelism: {size: 8, nodesPerReplica: 2}}\n");
    create(o);
    json_object_put(o);
    /* Disaggregated in a pool without disaggregation */
    create_file("manifests/examples/unified.yaml");
    o = parse("apiVersion: tandem.dev/v1alpha1\nkind: InferenceModel\n"
              "metadata: {name: split, namespace: default}\n"
              "spec:\n  poolRef: {name: qwen}\n  modelName: split\n"
              "  modelSource: {storageUri: 'file:///models/s.gguf'}\n"
              "  deployment: {type: Disaggregated, prefillWorkers: {replicas: 1},\n"
              "               decodeWorkers: {replicas: 1}}\n");
    create(o);
    json_object_put(o);
    sync_cache();
    unsigned long c0 = g_ctx.created;
    struct reconcile_result res;
    model_ok("orphan", &res);
    assert_int_equal(res.requeue_after_ms, RECONCILE_MODEL_RECHECK_MS);
    struct json_object *m = get(&OPCTL_INFERENCEMODELS, "orphan");
    assert_string_equal(cond(m, COND_READY, "reason"), REASON_POOL_NOT_FOUND);
    assert_non_null(strstr(cond(m, COND_READY, "message"), "nowhere"));
    json_object_put(m);

    model_ok("big", &res);
    assert_int_equal(res.requeue_after_ms, 0);
    m = get(&OPCTL_INFERENCEMODELS, "big");
    assert_string_equal(cond(m, COND_READY, "reason"), REASON_MULTINODE_NOT_SUPPORTED);
    assert_non_null(strstr(cond(m, COND_READY, "message"), "not supported yet"));
    assert_string_equal(cond(m, COND_DEGRADED, "status"), "True");
    json_object_put(m);

    model_ok("split", &res);
    m = get(&OPCTL_INFERENCEMODELS, "split");
    assert_string_equal(cond(m, COND_READY, "reason"), REASON_INVALID_SPEC);
    assert_non_null(strstr(cond(m, COND_READY, "message"), "spec.deployment.type"));
    json_object_put(m);

    assert_int_equal(g_ctx.created, c0);
    assert_int_equal(count_deployments(LABEL_MODEL, "orphan"), 0);
    assert_int_equal(count_deployments(LABEL_MODEL, "big"), 0);
    assert_int_equal(count_deployments(LABEL_MODEL, "split"), 0);
    sync_cache();
    static const char *const models[] = {"orphan", "big", "split"};
    assert_steady(NULL, models, 3);
}

/* An autoscaled pool: HPAs exist, the HPA's replicas are not fought over; removing autoscaling
 * deletes the HPA and puts replicas back. */
static void test_autoscaling(void **state)
{
    (void)state;
    struct json_object *o =
        parse("apiVersion: tandem.dev/v1alpha1\nkind: InferencePool\n"
              "metadata: {name: auto, namespace: default}\n"
              "spec:\n  selector: {matchLabels: {app: auto}}\n"
              "  autoscaling: {minReplicas: 1, maxReplicas: 6, targetCPUUtilization: 80}\n");
    create(o);
    json_object_put(o);
    o = parse("apiVersion: tandem.dev/v1alpha1\nkind: InferenceModel\n"
              "metadata: {name: auto-m, namespace: default}\n"
              "spec:\n  poolRef: {name: auto}\n  modelName: auto-m\n"
              "  modelSource: {storageUri: 'file:///models/a.gguf'}\n"
              "  deployment: {type: Unified, unifiedWorkers: {replicas: 2}}\n");
    create(o);
    json_object_put(o);
    sync_cache();
    static const char *const models[] = {"auto-m"};
    converge("auto", models, 1);
    assert_true(exists(&KUBE_HPAS, "auto-m-worker"));
    unsigned long u0 = g_ctx.updated;
    patch(&KUBE_DEPLOYMENTS, "auto-m-worker", "{\"spec\":{\"replicas\":5}}"); /* the HPA */
    sync_cache();
    converge("auto", models, 1); /* status follows (desiredPods 5); the Deployment is not touched */
    assert_int_equal(g_ctx.updated, u0);
    assert_steady("auto", models, 1);
    struct json_object *m = get(&OPCTL_INFERENCEMODELS, "auto-m");
    assert_int_equal(num(m, "status.deploymentStatus.desiredPods"), 5);
    json_object_put(m);
    struct json_object *d = get(&KUBE_DEPLOYMENTS, "auto-m-worker");
    assert_int_equal(num(d, "spec.replicas"), 5);
    json_object_put(d);

    patch(&OPCTL_INFERENCEPOOLS, "auto", "{\"spec\":{\"autoscaling\":null}}");
    sync_cache();
    converge("auto", models, 1);
    assert_false(exists(&KUBE_HPAS, "auto-m-worker"));
    d = get(&KUBE_DEPLOYMENTS, "auto-m-worker");
    assert_int_equal(num(d, "spec.replicas"), 2);
    json_object_put(d);
    assert_steady("auto", models, 1);
}

/* configMapRef: missing → ConfigMapNotFound (recheck), present → workload without a generated
 * ConfigMap, invalid text → InvalidEndpointPickerConfig. */
static void test_config_map_ref(void **state)
{
    (void)state;
    struct json_object *o =
        parse("apiVersion: tandem.dev/v1alpha1\nkind: InferencePool\n"
              "metadata: {name: ref, namespace: default}\n"
              "spec:\n  selector: {matchLabels: {app: ref}}\n"
              "  routingPolicy: {endpointPickerConfig: {configMapRef: {name: ref-config}}}\n");
    create(o);
    sync_cache();
    struct reconcile_result res;
    pool_ok("ref", &res);
    assert_int_equal(res.requeue_after_ms, RECONCILE_POOL_RECHECK_MS);
    struct json_object *p = get(&OPCTL_INFERENCEPOOLS, "ref");
    assert_string_equal(cond(p, COND_READY, "reason"), REASON_CONFIGMAP_NOT_FOUND);
    assert_non_null(strstr(cond(p, COND_READY, "message"), "ref-config"));
    json_object_put(p);
    assert_false(exists(&KUBE_DEPLOYMENTS, "ref-epp"));

    /* a valid config: the generated one of the same pool */
    struct spec_pool pool;
    struct spec_errors errs;
    spec_errors_init(&errs);
    struct json_object *plain = parse("apiVersion: tandem.dev/v1alpha1\nkind: InferencePool\n"
                                      "metadata: {name: ref, namespace: default}\n"
                                      "spec:\n  selector: {matchLabels: {app: ref}}\n");
    assert_int_equal(spec_pool_parse(plain, &pool, &errs), 0);
    struct json_object *cfg = eppconfig_generate(&pool);
    struct buf text;
    buf_init(&text, 1 << 20);
    assert_int_equal(eppconfig_to_yaml(cfg, &text), 0);
    struct json_object *cm = json_object_new_object(), *meta = json_object_new_object();
    struct json_object *data = json_object_new_object();
    json_object_object_add(cm, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(cm, "kind", json_object_new_string("ConfigMap"));
    json_object_object_add(meta, "name", json_object_new_string("ref-config"));
    json_object_object_add(cm, "metadata", meta);
    json_object_object_add(data, "config.yaml", json_object_new_string(buf_cstr(&text)));
    json_object_object_add(cm, "data", data);
    struct kube_error err = {0};
    assert_int_equal(kube_create(g_client, &KUBE_CONFIGMAPS, NS, cm, NULL, &err), 0);
    json_object_put(cm);
    buf_free(&text);
    json_object_put(cfg);
    spec_pool_free(&pool);
    json_object_put(plain);
    json_object_put(o);

    sync_cache();
    converge("ref", NULL, 0);
    assert_true(exists(&KUBE_DEPLOYMENTS, "ref-epp"));
    assert_false(exists(&KUBE_CONFIGMAPS, "ref-epp-config"));
    struct json_object *d = get(&KUBE_DEPLOYMENTS, "ref-epp");
    assert_string_equal(str(d, "spec.template.spec.volumes[0].configMap.name"), "ref-config");
    json_object_put(d);
    p = get(&OPCTL_INFERENCEPOOLS, "ref");
    assert_string_equal(cond(p, COND_READY, "reason"), REASON_EPP_UNAVAILABLE);
    json_object_put(p);
    assert_steady("ref", NULL, 0);

    patch(&KUBE_CONFIGMAPS, "ref-config",
          "{\"data\":{\"config.yaml\":\"apiVersion: llm-d.ai/v1alpha1\\nkind: "
          "EndpointPickerConfig\\nplugins:\\n- type: no-such-plugin\\n\"}}");
    pool_ok("ref", &res);
    assert_int_equal(res.requeue_after_ms, RECONCILE_POOL_RECHECK_MS);
    p = get(&OPCTL_INFERENCEPOOLS, "ref");
    assert_string_equal(cond(p, COND_READY, "reason"), REASON_INVALID_EPP_CONFIG);
    assert_non_null(strstr(cond(p, COND_READY, "message"), "ConfigMap ref-config"));
    json_object_put(p);
}

/* A name taken by an object another owner controls: not touched, Degraded OwnershipConflict. */
static void test_ownership_conflict(void **state)
{
    (void)state;
    struct json_object *anchor = parse("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\","
                                       "\"metadata\":{\"name\":\"anchor\"}}");
    struct json_object *out = NULL;
    struct kube_error err = {0};
    assert_int_equal(kube_create(g_client, &KUBE_CONFIGMAPS, NS, anchor, &out, &err), 0);
    json_object_put(anchor);
    struct json_object *svc = parse(
        "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"taken-epp\","
        "\"labels\":{\"app.kubernetes.io/managed-by\":\"tandem-operator\"},"
        "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"anchor\","
        "\"uid\":\"%s\",\"controller\":true}]},\"spec\":{\"ports\":[{\"port\":80}]}}",
        str(out, "metadata.uid"));
    json_object_put(out);
    create(svc);
    json_object_put(svc);
    struct json_object *o = parse("apiVersion: tandem.dev/v1alpha1\nkind: InferencePool\n"
                                  "metadata: {name: taken, namespace: default}\n"
                                  "spec:\n  selector: {matchLabels: {app: taken}}\n");
    create(o);
    json_object_put(o);
    sync_cache();
    struct reconcile_result res;
    int rc = reconcile_pool(&g_ctx, NS, "taken", &res);
    assert_int_equal(rc, APPLY_EOWNED);
    struct json_object *p = get(&OPCTL_INFERENCEPOOLS, "taken");
    assert_string_equal(cond(p, COND_DEGRADED, "status"), "True");
    assert_string_equal(cond(p, COND_DEGRADED, "reason"), REASON_OWNERSHIP_CONFLICT);
    assert_non_null(strstr(cond(p, COND_DEGRADED, "message"), "ConfigMap anchor"));
    json_object_put(p);
    svc = get(&KUBE_SERVICES, "taken-epp");
    assert_string_equal(str(svc, "metadata.ownerReferences[0].name"), "anchor");
    assert_int_equal(json_object_array_length(json_get(svc, "metadata.ownerReferences")), 1);
    json_object_put(svc);
}

/* Events: Created for each object, recorded on the owner. */
static void test_events(void **state)
{
    (void)state;
    struct kube_client *ec = lk_client(&g_lk, NULL);
    struct kube_event_recorder_options eo = {.component = "tandem-operator", .burst = -1};
    struct kube_event_recorder *rec = kube_event_recorder_new(ec, &eo);
    assert_non_null(rec);
    struct json_object *o = parse("apiVersion: tandem.dev/v1alpha1\nkind: InferencePool\n"
                                  "metadata: {name: evt, namespace: default}\n"
                                  "spec:\n  selector: {matchLabels: {app: evt}}\n");
    create(o);
    json_object_put(o);
    sync_cache();
    g_ctx.events = rec;
    struct reconcile_result res;
    pool_ok("evt", &res);
    g_ctx.events = NULL;
    assert_int_equal(kube_event_recorder_flush(rec, 10000), 0);
    struct json_object *list = NULL;
    assert_int_equal(kube_list_all(g_client, &KUBE_EVENTS, NS, NULL, &list, NULL), 0);
    int created = 0;
    struct json_object *items = json_get(list, "items");
    for (size_t i = 0; i < json_object_array_length(items); i++) {
        struct json_object *e = json_object_array_get_idx(items, i);
        if (strcmp(str(e, "involvedObject.name"), "evt") == 0 &&
            strcmp(str(e, "reason"), "Created") == 0) {
            created++;
            assert_string_equal(str(e, "involvedObject.kind"), "InferencePool");
            assert_string_equal(str(e, "type"), "Normal");
        }
    }
    assert_int_equal(created, 9);
    json_object_put(list);
    kube_event_recorder_free(rec);
    kube_client_free(ec);
}

/* API failures: a refused write fails the reconcile (rate-limited retry) and shows in status; a
 * 409 on an update is a requeue, not an error; after the faults clear everything converges. */
static void test_faults(void **state)
{
    (void)state;
    long long t0 = lk_now_ms();
    struct json_object *o = parse("apiVersion: tandem.dev/v1alpha1\nkind: InferencePool\n"
                                  "metadata: {name: flaky, namespace: default}\n"
                                  "spec:\n  selector: {matchLabels: {app: flaky}}\n");
    create(o);
    json_object_put(o);
    sync_cache();
    assert_int_equal(lk_fault(g_client, "{\"type\":\"fail\",\"verb\":\"create\","
                                        "\"resource\":\"deployments\",\"code\":403,\"count\":1}"),
                     0);
    struct reconcile_result res;
    int rc = reconcile_pool(&g_ctx, NS, "flaky", &res);
    assert_int_equal(rc, KUBE_EFORBIDDEN);
    struct json_object *p = get(&OPCTL_INFERENCEPOOLS, "flaky");
    assert_string_equal(cond(p, COND_DEGRADED, "reason"), REASON_RECONCILE_ERROR);
    assert_non_null(strstr(cond(p, COND_DEGRADED, "message"), "Deployment flaky-epp"));
    json_object_put(p);
    sync_cache();
    converge("flaky", NULL, 0);
    p = get(&OPCTL_INFERENCEPOOLS, "flaky");
    assert_string_equal(cond(p, COND_DEGRADED, "status"), "False");
    json_object_put(p);

    /* an update conflict: requeue */
    patch(&KUBE_SERVICES, "flaky-epp", "{\"spec\":{\"ports\":[{\"name\":\"x\",\"port\":1}]}}");
    sync_cache();
    assert_int_equal(lk_fault(g_client, "{\"type\":\"fail\",\"verb\":\"update\","
                                        "\"resource\":\"services\",\"code\":409,\"count\":1}"),
                     0);
    rc = reconcile_pool(&g_ctx, NS, "flaky", &res);
    assert_int_equal(rc, 0);
    assert_int_equal(res.requeue, 1);
    assert_int_equal(lk_clear_faults(g_client), 0);
    converge("flaky", NULL, 0);
    struct json_object *svc = get(&KUBE_SERVICES, "flaky-epp");
    assert_string_equal(str(svc, "spec.ports[0].name"), "http");
    json_object_put(svc);
    assert_steady("flaky", NULL, 0);
    assert_true(lk_now_ms() - t0 < 30000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_disaggregated),
        cmocka_unit_test(test_rollout_status),
        cmocka_unit_test(test_spec_change),
        cmocka_unit_test(test_daemonset),
        cmocka_unit_test(test_invalid_pool),
        cmocka_unit_test(test_model_problems),
        cmocka_unit_test(test_autoscaling),
        cmocka_unit_test(test_config_map_ref),
        cmocka_unit_test(test_ownership_conflict),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_faults),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
