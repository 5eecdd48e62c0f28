/*
 * Unit tests for operator/controller/status: meta.SetStatusCondition semantics (lastTransitionTime
 * moves only when the status changes), the semantic comparison that decides whether status is
 * written, what is read from Deployments and pods, and the computed pool and model statuses
 * (Ready / Progressing / Degraded with reasons, pod counts, deploymentStatus, rollout messages).
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
#include "operator/controller/status.h"

static struct json_object *parse(const char *fmt, ...) TANDEM_PRINTF(1, 2);
static struct json_object *parse(const char *fmt, ...)
{
    char text[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    char err[256];
    struct json_object *o = json_parse(text, strlen(text), err, sizeof(err));
    if (!o) {
        fail_msg("bad JSON in test: %s: %s", err, text);
    }
    return o;
}

static const char *cond_field(struct json_object *status, const char *type, const char *field)
{
    struct json_object *c = status_find_condition(json_get(status, "conditions"), type);
    const char *s = NULL;
    if (!c || json_get_string(c, field, &s, NULL, 0) != 0) {
        return NULL;
    }
    return s;
}

static int64_t cond_gen(struct json_object *status, const char *type)
{
    int64_t g = -1;
    json_get_int64(status_find_condition(json_get(status, "conditions"), type),
                   "observedGeneration", &g, NULL, 0);
    return g;
}

static int64_t int_at(struct json_object *o, const char *path)
{
    int64_t v = -1;
    if (json_get_int64(o, path, &v, NULL, 0) != 0) {
        return -1;
    }
    return v;
}

/* ---- time ---- */

static void test_format_time(void **state)
{
    (void)state;
    char out[STATUS_TIME_LEN];
    assert_string_equal(status_format_time(0, out, sizeof(out)), "1970-01-01T00:00:00Z");
    assert_string_equal(status_format_time(1700000000, out, sizeof(out)), "2023-11-14T22:13:20Z");
    char tiny[5] = "xxxx";
    assert_string_equal(status_format_time(0, tiny, sizeof(tiny)), "");
}

/* ---- SetStatusCondition ---- */

static void test_set_condition_semantics(void **state)
{
    (void)state;
    struct json_object *st = json_object_new_object();
    struct status_condition c = {.type = "Ready",
                                 .status = "False",
                                 .reason = "Starting",
                                 .message = "m1",
                                 .observed_generation = 1};
    /* insert: lastTransitionTime = now */
    assert_int_equal(status_set_condition(st, &c, "2024-01-01T00:00:00Z"), 1);
    assert_string_equal(cond_field(st, "Ready", "lastTransitionTime"), "2024-01-01T00:00:00Z");
    assert_string_equal(cond_field(st, "Ready", "status"), "False");
    /* same again: nothing changes, not even the time */
    assert_int_equal(status_set_condition(st, &c, "2024-01-01T00:00:05Z"), 0);
    assert_string_equal(cond_field(st, "Ready", "lastTransitionTime"), "2024-01-01T00:00:00Z");
    /* reason/message/generation change: changed, time kept */
    c.reason = "StillStarting";
    c.message = "m2";
    c.observed_generation = 2;
    assert_int_equal(status_set_condition(st, &c, "2024-01-01T00:00:10Z"), 1);
    assert_string_equal(cond_field(st, "Ready", "lastTransitionTime"), "2024-01-01T00:00:00Z");
    assert_string_equal(cond_field(st, "Ready", "reason"), "StillStarting");
    assert_string_equal(cond_field(st, "Ready", "message"), "m2");
    assert_int_equal(cond_gen(st, "Ready"), 2);
    /* status change: time moves */
    c.status = "True";
    assert_int_equal(status_set_condition(st, &c, "2024-01-01T00:00:20Z"), 1);
    assert_string_equal(cond_field(st, "Ready", "lastTransitionTime"), "2024-01-01T00:00:20Z");
    /* a second type is appended; the first is untouched */
    struct status_condition d = {.type = "Degraded",
                                 .status = "False",
                                 .reason = "AsExpected",
                                 .message = "",
                                 .observed_generation = 2};
    assert_int_equal(status_set_condition(st, &d, "2024-01-01T00:00:30Z"), 1);
    assert_int_equal(json_object_array_length(json_get(st, "conditions")), 2);
    assert_string_equal(cond_field(st, "Ready", "lastTransitionTime"), "2024-01-01T00:00:20Z");
    assert_true(status_condition_is(json_get(st, "conditions"), "Ready", "True"));
    assert_false(status_condition_is(json_get(st, "conditions"), "Degraded", "True"));
    assert_null(status_find_condition(json_get(st, "conditions"), "Nope"));
    /* bad arguments */
    c.reason = NULL;
    assert_int_equal(status_set_condition(st, &c, "x"), -EINVAL);
    struct json_object *arr = json_object_new_array();
    c.reason = "R";
    assert_int_equal(status_set_condition(arr, &c, "x"), -EINVAL);
    json_object_put(arr);
    json_object_put(st);
}

static void test_set_condition_keeps_foreign_and_fills_missing_time(void **state)
{
    (void)state;
    struct json_object *st = parse("{\"conditions\":[{\"type\":\"example.com/Other\","
                                   "\"status\":\"True\",\"reason\":\"X\",\"message\":\"\","
                                   "\"lastTransitionTime\":\"2020-01-01T00:00:00Z\"},"
                                   "{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"A\","
                                   "\"message\":\"m\",\"observedGeneration\":3}]}");
    struct status_condition c = {
        .type = "Ready", .status = "True", .reason = "A", .message = "m", .observed_generation = 3};
    /* the existing Ready lacks lastTransitionTime: it is filled even though status is the same */
    assert_int_equal(status_set_condition(st, &c, "2024-05-05T05:05:05Z"), 1);
    assert_string_equal(cond_field(st, "Ready", "lastTransitionTime"), "2024-05-05T05:05:05Z");
    assert_string_equal(cond_field(st, "example.com/Other", "lastTransitionTime"),
                        "2020-01-01T00:00:00Z");
    assert_int_equal(status_set_condition(st, &c, "2024-05-05T05:05:06Z"), 0);
    json_object_put(st);
}

/* ---- comparison ---- */

static void test_differs(void **state)
{
    (void)state;
    struct json_object *a = parse("{\"x\":3,\"y\":{\"b\":[1,\"s\",true],\"a\":null}}");
    struct json_object *b = parse("{\"y\":{\"a\":null,\"b\":[1.0,\"s\",true]},\"x\":3.0}");
    struct json_object *c = parse("{\"y\":{\"a\":null,\"b\":[1,\"s\",false]},\"x\":3}");
    struct json_object *d = parse("{\"y\":{\"a\":null,\"b\":[1,\"s\",true]}}");
    struct json_object *e = parse("{\"x\":\"3\",\"y\":{\"a\":null,\"b\":[1,\"s\",true]}}");
    struct json_object *empty = parse("{}");
    assert_false(status_differs(a, b)); /* member order and 3 vs 3.0 do not matter */
    assert_true(status_differs(a, c));
    assert_true(status_differs(a, d));
    assert_true(status_differs(d, a));
    assert_true(status_differs(a, e));
    assert_true(status_differs(NULL, empty));
    assert_false(status_differs(NULL, NULL));
    json_object_put(a);
    json_object_put(b);
    json_object_put(c);
    json_object_put(d);
    json_object_put(e);
    json_object_put(empty);
}

/* ---- observations ---- */

static void test_workload_from_deployment(void **state)
{
    (void)state;
    struct status_workload w;
    status_workload_from_deployment(NULL, "decode", &w);
    assert_false(w.exists);
    assert_true(status_workload_rolling(&w));

    struct json_object *d = parse(
        "{\"metadata\":{\"name\":\"m-decode\",\"generation\":4},\"spec\":{\"replicas\":3},"
        "\"status\":{\"observedGeneration\":4,\"replicas\":4,\"updatedReplicas\":2,"
        "\"readyReplicas\":3,\"availableReplicas\":3,\"conditions\":[{\"type\":\"Progressing\","
        "\"status\":\"True\",\"reason\":\"ReplicaSetUpdated\"}]}}");
    status_workload_from_deployment(d, "decode", &w);
    assert_true(w.exists);
    assert_string_equal(w.name, "decode");
    assert_int_equal(w.replicas, 3);
    assert_int_equal(w.status_replicas, 4);
    assert_int_equal(w.updated, 2);
    assert_int_equal(w.ready, 3);
    assert_int_equal(w.available, 3);
    assert_int_equal(w.generation, 4);
    assert_int_equal(w.observed_generation, 4);
    assert_false(w.deadline_exceeded);
    assert_true(status_workload_rolling(&w));
    json_object_put(d);

    /* finished rollout; the spec.replicas default is 1 */
    d = parse("{\"metadata\":{\"generation\":2},\"spec\":{},\"status\":{\"observedGeneration\":2,"
              "\"replicas\":1,\"updatedReplicas\":1,\"readyReplicas\":1,\"availableReplicas\":1,"
              "\"conditions\":[{\"type\":\"Progressing\",\"status\":\"False\","
              "\"reason\":\"ProgressDeadlineExceeded\"}]}}");
    status_workload_from_deployment(d, "epp", &w);
    assert_int_equal(w.replicas, 1);
    assert_false(status_workload_rolling(&w));
    assert_true(w.deadline_exceeded);
    json_object_put(d);

    /* not observed yet */
    d = parse("{\"metadata\":{\"generation\":3},\"spec\":{\"replicas\":1},\"status\":{"
              "\"observedGeneration\":2,\"replicas\":1,\"updatedReplicas\":1}}");
    status_workload_from_deployment(d, "epp", &w);
    assert_true(status_workload_rolling(&w));
    json_object_put(d);
}

/* A DaemonSet's status: per-node counts; 0 nodes picked or an unobserved generation is not ready.
 */
static void test_workload_from_daemonset(void **state)
{
    (void)state;
    struct status_workload w;
    status_workload_from_daemonset(NULL, "worker", &w);
    assert_false(w.exists);
    assert_true(w.daemon);
    assert_false(status_workload_ready(&w));
    assert_true(status_workload_rolling(&w));

    /* rolling: one of two nodes runs the new template */
    struct json_object *d =
        parse("{\"metadata\":{\"name\":\"m-worker\",\"generation\":3},\"spec\":{},\"status\":{"
              "\"observedGeneration\":3,\"desiredNumberScheduled\":2,\"currentNumberScheduled\":2,"
              "\"updatedNumberScheduled\":1,\"numberReady\":1,\"numberAvailable\":1}}");
    status_workload_from_daemonset(d, "worker", &w);
    assert_true(w.exists);
    assert_int_equal(w.replicas, 2);
    assert_int_equal(w.status_replicas, 2);
    assert_int_equal(w.updated, 1);
    assert_int_equal(w.ready, 1);
    assert_int_equal(w.available, 1);
    assert_int_equal(w.generation, 3);
    assert_int_equal(w.observed_generation, 3);
    assert_false(status_workload_ready(&w));
    assert_true(status_workload_rolling(&w));
    json_object_put(d);

    /* done */
    d = parse("{\"metadata\":{\"generation\":3},\"status\":{\"observedGeneration\":3,"
              "\"desiredNumberScheduled\":2,\"currentNumberScheduled\":2,"
              "\"updatedNumberScheduled\":2,\"numberReady\":2,\"numberAvailable\":2}}");
    status_workload_from_daemonset(d, "worker", &w);
    assert_true(status_workload_ready(&w));
    assert_false(status_workload_rolling(&w));
    json_object_put(d);

    /* not observed yet (0/0 so far): not ready */
    d = parse("{\"metadata\":{\"generation\":1},\"spec\":{}}");
    status_workload_from_daemonset(d, "worker", &w);
    assert_int_equal(w.replicas, 0);
    assert_false(status_workload_ready(&w));
    assert_true(status_workload_rolling(&w));
    json_object_put(d);

    /* no node matches the nodeSelector: not ready, and the model's Ready message says why */
    d = parse("{\"metadata\":{\"generation\":1},\"status\":{\"observedGeneration\":1,"
              "\"desiredNumberScheduled\":0}}");
    status_workload_from_daemonset(d, "worker", &w);
    assert_false(status_workload_ready(&w));
    assert_false(status_workload_rolling(&w));
    struct json_object *st = json_object_new_object();
    struct status_model_input in = {.generation = 1, .type = DEPLOY_DAEMONSET, .n = 1};
    in.roles[0] = ROLE_BOTH;
    in.w[0] = w;
    assert_int_equal(status_model_compute(st, &in, "2024-01-01T00:00:00Z"), 1);
    assert_string_equal(cond_field(st, "Ready", "status"), "False");
    assert_string_equal(cond_field(st, "Ready", "message"),
                        "worker 0/0 ready (no node matches deployment.daemonSet.nodeSelector)");
    assert_string_equal(json_object_get_string(json_get(st, "deploymentStatus.workers")), "0/0");
    json_object_put(d);

    /* two nodes, both ready: unifiedWorkersReady, desiredPods from desiredNumberScheduled */
    d = parse("{\"metadata\":{\"generation\":2},\"status\":{\"observedGeneration\":2,"
              "\"desiredNumberScheduled\":2,\"currentNumberScheduled\":2,"
              "\"updatedNumberScheduled\":2,\"numberReady\":2,\"numberAvailable\":2}}");
    status_workload_from_daemonset(d, "worker", &in.w[0]);
    in.generation = 2;
    assert_int_equal(status_model_compute(st, &in, "2024-01-01T00:00:00Z"), 1);
    assert_string_equal(cond_field(st, "Ready", "status"), "True");
    assert_string_equal(cond_field(st, "Ready", "message"), "worker 2/2 ready");
    assert_string_equal(cond_field(st, "Progressing", "status"), "False");
    assert_int_equal(int_at(st, "deploymentStatus.unifiedWorkersReady"), 2);
    assert_int_equal(int_at(st, "deploymentStatus.desiredPods"), 2);
    assert_int_equal(int_at(st, "deploymentStatus.updatedPods"), 2);
    assert_string_equal(json_object_get_string(json_get(st, "deploymentStatus.workers")), "2/2");
    json_object_put(d);
    json_object_put(st);
}

static struct json_object *pod(const char *name, const char *phase, int ready, const char *waiting,
                               int init, int deleting)
{
    char cs[256] = "";
    if (waiting) {
        snprintf(cs, sizeof(cs),
                 ",\"%s\":[{\"name\":\"c\",\"state\":{\"waiting\":{\"reason\":\"%s\"}}}]",
                 init ? "initContainerStatuses" : "containerStatuses", waiting);
    }
    return parse("{\"metadata\":{\"name\":\"%s\"%s},\"status\":{\"phase\":\"%s\","
                 "\"conditions\":[{\"type\":\"Ready\",\"status\":\"%s\"}]%s}}",
                 name, deleting ? ",\"deletionTimestamp\":\"2024-01-01T00:00:00Z\"" : "", phase,
                 ready ? "True" : "False", cs);
}

static void test_count_pods(void **state)
{
    (void)state;
    struct status_pods p;
    memset(&p, 0, sizeof(p));
    struct json_object *pods[] = {
        pod("a", "Running", 1, NULL, 0, 0),
        pod("b", "Running", 0, NULL, 0, 0),               /* running, not ready */
        pod("c", "Running", 0, "CrashLoopBackOff", 0, 0), /* failing and unready */
        pod("d", "Pending", 0, "ErrImagePull", 1, 0),     /* init container failing */
        pod("e", "Pending", 0, "ContainerCreating", 0, 0),
        pod("f", "Running", 1, NULL, 0, 1), /* terminating: not counted */
        pod("g", "Failed", 0, NULL, 0, 0),
    };
    for (size_t i = 0; i < ARRAY_SIZE(pods); i++) {
        status_count_pod(&p, pods[i]);
        json_object_put(pods[i]);
    }
    status_count_pod(&p, NULL);
    assert_int_equal(p.total, 6);
    assert_int_equal(p.ready, 1);
    assert_int_equal(p.running_unready, 2);
    assert_int_equal(p.failing, 3);
    assert_string_equal(p.failing_detail, "pod c: CrashLoopBackOff");
}

/* ---- whole statuses ---- */

static void test_set_problem(void **state)
{
    (void)state;
    struct json_object *st = parse("{\"totalPods\":4,\"conditions\":[{\"type\":\"Ready\","
                                   "\"status\":\"True\",\"reason\":\"Available\",\"message\":\"\","
                                   "\"lastTransitionTime\":\"2020-01-01T00:00:00Z\","
                                   "\"observedGeneration\":1}]}");
    assert_int_equal(status_set_problem(st, 2, "InvalidSpec", "spec.targetPort: must not be 8200",
                                        "2024-01-01T00:00:00Z"),
                     1);
    assert_int_equal(int_at(st, "observedGeneration"), 2);
    assert_int_equal(int_at(st, "totalPods"), 4); /* left alone */
    assert_string_equal(cond_field(st, "Ready", "status"), "False");
    assert_string_equal(cond_field(st, "Ready", "reason"), "InvalidSpec");
    assert_string_equal(cond_field(st, "Ready", "lastTransitionTime"), "2024-01-01T00:00:00Z");
    assert_string_equal(cond_field(st, "Progressing", "status"), "False");
    assert_string_equal(cond_field(st, "Degraded", "status"), "True");
    assert_string_equal(cond_field(st, "Degraded", "message"), "spec.targetPort: must not be 8200");
    assert_int_equal(cond_gen(st, "Degraded"), 2);
    assert_int_equal(status_set_problem(st, 2, "InvalidSpec", "spec.targetPort: must not be 8200",
                                        "2024-01-01T00:09:00Z"),
                     0);
    assert_int_equal(status_set_problem(NULL, 1, "R", "m", "t"), -EINVAL);
    json_object_put(st);
}

static struct status_workload workload(const char *name, int replicas, int updated, int ready)
{
    struct status_workload w = {.name = name,
                                .exists = 1,
                                .replicas = replicas,
                                .status_replicas = replicas,
                                .updated = updated,
                                .ready = ready,
                                .available = ready,
                                .generation = 1,
                                .observed_generation = 1};
    return w;
}

static void test_pool_status(void **state)
{
    (void)state;
    const char *t0 = "2024-01-01T00:00:00Z", *t1 = "2024-01-01T00:01:00Z";
    struct json_object *st = json_object_new_object();
    struct status_pool_input in = {.generation = 3};
    in.epp.name = "epp"; /* absent */
    assert_int_equal(status_pool_compute(st, &in, t0), 1);
    assert_int_equal(int_at(st, "observedGeneration"), 3);
    assert_int_equal(int_at(st, "totalPods"), 0);
    assert_string_equal(cond_field(st, "Ready", "reason"), REASON_EPP_UNAVAILABLE);
    assert_string_equal(cond_field(st, "Progressing", "status"), "True");
    assert_string_equal(cond_field(st, "Progressing", "message"), "epp: creating");
    assert_string_equal(cond_field(st, "Degraded", "status"), "False");
    assert_string_equal(cond_field(st, "Degraded", "reason"), REASON_AS_EXPECTED);
    assert_int_equal(cond_gen(st, "Progressing"), 3);
    assert_int_equal(status_pool_compute(st, &in, t1), 0); /* same input: no change */

    /* EPP available, pods not ready yet */
    in.epp = workload("epp", 1, 1, 1);
    in.pods.total = 2;
    in.pods.running_unready = 2;
    assert_int_equal(status_pool_compute(st, &in, t1), 1);
    assert_string_equal(cond_field(st, "Ready", "reason"), REASON_UNAVAILABLE);
    assert_string_equal(cond_field(st, "Ready", "message"), "0 of 2 selected pods are ready");
    assert_string_equal(cond_field(st, "Progressing", "reason"), REASON_ROLLOUT_COMPLETE);
    assert_string_equal(cond_field(st, "Progressing", "lastTransitionTime"), t1);
    assert_int_equal(int_at(st, "unhealthyPods"), 2);

    /* ready */
    in.pods.ready = 2;
    in.pods.running_unready = 0;
    assert_int_equal(status_pool_compute(st, &in, t1), 1);
    assert_string_equal(cond_field(st, "Ready", "status"), "True");
    assert_string_equal(cond_field(st, "Ready", "reason"), REASON_AVAILABLE);
    assert_string_equal(cond_field(st, "Ready", "message"),
                        "2/2 pods ready, endpoint picker 1/1 available");
    assert_int_equal(int_at(st, "availablePods"), 2);
    assert_int_equal(int_at(st, "unhealthyPods"), 0);

    /* failing pods → Degraded */
    in.pods.total = 3;
    in.pods.failing = 1;
    snprintf(in.pods.failing_detail, sizeof(in.pods.failing_detail), "pod x: CrashLoopBackOff");
    assert_int_equal(status_pool_compute(st, &in, t1), 1);
    assert_string_equal(cond_field(st, "Degraded", "status"), "True");
    assert_string_equal(cond_field(st, "Degraded", "reason"), REASON_PODS_FAILING);
    assert_non_null(strstr(cond_field(st, "Degraded", "message"), "pod x: CrashLoopBackOff"));

    /* a stuck EPP rollout wins over failing pods; a reconcile error over both */
    in.epp.deadline_exceeded = 1;
    assert_int_equal(status_pool_compute(st, &in, t1), 1);
    assert_string_equal(cond_field(st, "Degraded", "reason"), REASON_DEADLINE_EXCEEDED);
    assert_string_equal(cond_field(st, "Progressing", "status"), "False");
    assert_string_equal(cond_field(st, "Progressing", "reason"), REASON_DEADLINE_EXCEEDED);
    in.error_reason = REASON_RECONCILE_ERROR;
    in.error_message = "writing Service p-epp: forbidden";
    assert_int_equal(status_pool_compute(st, &in, t1), 1);
    assert_string_equal(cond_field(st, "Degraded", "reason"), REASON_RECONCILE_ERROR);
    assert_string_equal(cond_field(st, "Degraded", "message"), "writing Service p-epp: forbidden");

    /* EPP rolling out */
    in.error_reason = NULL;
    in.epp = workload("epp", 2, 1, 2);
    in.epp.status_replicas = 3;
    assert_int_equal(status_pool_compute(st, &in, t1), 1);
    assert_string_equal(cond_field(st, "Progressing", "message"), "epp: 1/2 updated");
    json_object_put(st);
}

static void test_model_status(void **state)
{
    (void)state;
    const char *t0 = "2024-01-01T00:00:00Z";
    struct json_object *st = json_object_new_object();
    struct status_model_input in = {.generation = 2, .type = DEPLOY_DISAGGREGATED, .n = 2};
    in.roles[0] = ROLE_PREFILL;
    in.roles[1] = ROLE_DECODE;
    in.w[0] = workload("prefill", 2, 2, 2);
    in.w[1] = workload("decode", 3, 2, 3);
    in.w[1].status_replicas = 4;
    in.pods.total = 6;
    assert_int_equal(status_model_compute(st, &in, t0), 1);
    assert_int_equal(int_at(st, "observedGeneration"), 2);
    assert_int_equal(int_at(st, "deploymentStatus.prefillWorkersReady"), 2);
    assert_int_equal(int_at(st, "deploymentStatus.decodeWorkersReady"), 3);
    assert_null(json_get(st, "deploymentStatus.unifiedWorkersReady"));
    assert_int_equal(int_at(st, "deploymentStatus.desiredPods"), 5);
    assert_int_equal(int_at(st, "deploymentStatus.updatedPods"), 4);
    assert_int_equal(int_at(st, "deploymentStatus.totalPods"), 6);
    assert_string_equal(json_object_get_string(json_get(st, "deploymentStatus.workers")),
                        "prefill 2/2, decode 3/3");
    assert_string_equal(cond_field(st, "Ready", "status"), "True");
    assert_string_equal(cond_field(st, "Ready", "message"), "prefill 2/2 ready, decode 3/3 ready");
    assert_string_equal(cond_field(st, "Progressing", "status"), "True");
    assert_string_equal(cond_field(st, "Progressing", "reason"), REASON_ROLLING_OUT);
    assert_string_equal(cond_field(st, "Progressing", "message"), "decode: 2/3 updated");
    assert_int_equal(cond_gen(st, "Ready"), 2);
    assert_int_equal(status_model_compute(st, &in, t0), 0);

    /* old pods still terminating after every pod is updated */
    in.w[1].updated = 3;
    assert_int_equal(status_model_compute(st, &in, t0), 1);
    assert_string_equal(cond_field(st, "Progressing", "message"), "decode: 1 old pod terminating");
    in.w[1].status_replicas = 3;
    assert_int_equal(status_model_compute(st, &in, t0), 1);
    assert_string_equal(cond_field(st, "Progressing", "status"), "False");
    assert_string_equal(cond_field(st, "Progressing", "reason"), REASON_ROLLOUT_COMPLETE);

    /* a missing worker: not ready, creating */
    in.w[0].exists = 0;
    in.w[0].ready = 0;
    assert_int_equal(status_model_compute(st, &in, t0), 1);
    assert_string_equal(cond_field(st, "Ready", "status"), "False");
    assert_string_equal(cond_field(st, "Ready", "reason"), REASON_UNAVAILABLE);
    assert_string_equal(cond_field(st, "Ready", "message"), "prefill 0/0 ready, decode 3/3 ready");
    assert_string_equal(cond_field(st, "Progressing", "message"), "prefill: creating");

    /* switch to Unified: the prefill/decode counts go away */
    in.type = DEPLOY_UNIFIED;
    in.n = 1;
    in.roles[0] = ROLE_BOTH;
    in.w[0] = workload("worker", 2, 2, 1);
    assert_int_equal(status_model_compute(st, &in, t0), 1);
    assert_null(json_get(st, "deploymentStatus.prefillWorkersReady"));
    assert_null(json_get(st, "deploymentStatus.decodeWorkersReady"));
    assert_int_equal(int_at(st, "deploymentStatus.unifiedWorkersReady"), 1);
    assert_string_equal(json_object_get_string(json_get(st, "deploymentStatus.workers")), "1/2");
    assert_string_equal(cond_field(st, "Ready", "message"), "worker 1/2 ready");

    /* rollout done but a pod lost: Degraded WorkersUnavailable */
    assert_string_equal(cond_field(st, "Degraded", "status"), "True");
    assert_string_equal(cond_field(st, "Degraded", "reason"), REASON_UNAVAILABLE);
    assert_string_equal(cond_field(st, "Degraded", "message"), "worker: 1/2 ready");
    in.w[0].ready = 2;
    assert_int_equal(status_model_compute(st, &in, t0), 1);
    assert_string_equal(cond_field(st, "Degraded", "status"), "False");
    assert_string_equal(cond_field(st, "Ready", "status"), "True");

    /* a stuck rollout */
    in.w[0].deadline_exceeded = 1;
    assert_int_equal(status_model_compute(st, &in, t0), 1);
    assert_string_equal(cond_field(st, "Degraded", "status"), "True");
    assert_string_equal(cond_field(st, "Degraded", "message"),
                        "worker: rollout exceeded its progress deadline");
    in.n = 4;
    assert_int_equal(status_model_compute(st, &in, t0), -EINVAL);
    json_object_put(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_time),
        cmocka_unit_test(test_set_condition_semantics),
        cmocka_unit_test(test_set_condition_keeps_foreign_and_fills_missing_time),
        cmocka_unit_test(test_differs),
        cmocka_unit_test(test_workload_from_deployment),
        cmocka_unit_test(test_workload_from_daemonset),
        cmocka_unit_test(test_count_pods),
        cmocka_unit_test(test_set_problem),
        cmocka_unit_test(test_pool_status),
        cmocka_unit_test(test_model_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
