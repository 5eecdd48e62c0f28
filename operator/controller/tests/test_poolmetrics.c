/*
 * Unit tests for operator/controller/poolmetrics: the pool health gauges rendered from cached
 * InferencePools and agent Deployments/DaemonSets (conditions as 1/0, pod counts, replicas per
 * role), what is skipped (objects without status, workloads that are not the agent's), and that
 * the output parses as the exposition format.
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
#include "lib/metrics.h"
#include "operator/controller/poolmetrics.h"

static struct json_object *parse(const char *text)
{
    char err[256];
    struct json_object *o = json_parse(text, strlen(text), err, sizeof(err));
    if (!o) {
        fail_msg("bad JSON in test: %s: %s", err, text);
    }
    return o;
}

static const char POOL_DEGRADED[] =
    "{\"apiVersion\":\"tandem.dev/v1alpha1\",\"kind\":\"InferencePool\","
    "\"metadata\":{\"name\":\"p1\",\"namespace\":\"ns-a\"},"
    "\"status\":{\"totalPods\":3,\"availablePods\":1,\"unhealthyPods\":2,\"conditions\":["
    "{\"type\":\"Ready\",\"status\":\"False\",\"reason\":\"PodsNotReady\"},"
    "{\"type\":\"Progressing\",\"status\":\"True\",\"reason\":\"RollingOut\"},"
    "{\"type\":\"Degraded\",\"status\":\"True\",\"reason\":\"PodsFailing\"}]}}";

static const char POOL_NO_STATUS[] =
    "{\"kind\":\"InferencePool\",\"metadata\":{\"name\":\"fresh\",\"namespace\":\"ns-a\"}}";

static const char DEPLOY_DECODE[] =
    "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"m-decode\","
    "\"namespace\":\"ns-a\",\"labels\":{\"app.kubernetes.io/name\":\"tandem-agent\","
    "\"tandem.dev/pool\":\"p1\",\"tandem.dev/model\":\"m\",\"llm-d.ai/role\":\"decode\"}},"
    "\"spec\":{\"replicas\":3},\"status\":{\"readyReplicas\":1,\"availableReplicas\":1}}";

static const char DAEMONSET_BOTH[] =
    "{\"apiVersion\":\"apps/v1\",\"kind\":\"DaemonSet\",\"metadata\":{\"name\":\"d-worker\","
    "\"namespace\":\"ns-b\",\"labels\":{\"app.kubernetes.io/name\":\"tandem-agent\","
    "\"tandem.dev/pool\":\"p2\",\"tandem.dev/model\":\"d\",\"llm-d.ai/role\":\"both\"}},"
    "\"status\":{\"desiredNumberScheduled\":2,\"numberReady\":2,\"numberAvailable\":2}}";

/* The EPP's Deployment: not an agent workload, so not counted. */
static const char DEPLOY_EPP[] =
    "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"p1-epp\","
    "\"namespace\":\"ns-a\",\"labels\":{\"app.kubernetes.io/name\":\"tandem-epp\","
    "\"tandem.dev/pool\":\"p1\"}},\"spec\":{\"replicas\":1},\"status\":{\"readyReplicas\":1}}";

struct found {
    const char *name;
    const char *want_labels; /* "k=v,k=v" in label order */
    double value;
    int hits;
};

static int on_sample(void *ud, const char *name, size_t nlabels, const char *const *label_names,
                     const char *const *label_values, double value)
{
    struct found *f = ud;
    if (strcmp(name, f->name) != 0) {
        return 0;
    }
    char labels[512] = "";
    size_t len = 0;
    for (size_t i = 0; i < nlabels; i++) {
        len += (size_t)snprintf(labels + len, sizeof(labels) - len, "%s%s=%s", i ? "," : "",
                                label_names[i], label_values[i]);
    }
    if (strcmp(labels, f->want_labels) == 0) {
        f->value = value;
        f->hits++;
    }
    return 0;
}

/* The value of the one sample name{labels}; fails when it is absent or repeated. */
static double sample(const struct buf *out, const char *name, const char *labels)
{
    struct found f = {.name = name, .want_labels = labels};
    char err[256];
    assert_int_equal(metrics_parse_text(out->data, out->len, on_sample, &f, err, sizeof(err)), 0);
    if (f.hits != 1) {
        fail_msg("%s{%s}: %d samples in\n%s", name, labels, f.hits, out->data);
    }
    return f.value;
}

static int has_series(const struct buf *out, const char *name)
{
    char needle[128];
    snprintf(needle, sizeof(needle), "\n%s{", name);
    return strstr(out->data, needle) != NULL;
}

static void render(struct json_object **pools, size_t np, struct json_object **wl, size_t nw,
                   struct buf *out)
{
    buf_init(out, 1u << 20);
    assert_int_equal(poolmetrics_render(pools, np, wl, nw, out), 0);
    assert_non_null(out->data);
}

static void test_pool_conditions_and_pods(void **state)
{
    (void)state;
    struct json_object *pools[] = {parse(POOL_DEGRADED), parse(POOL_NO_STATUS)};
    struct buf out;
    render(pools, 2, NULL, 0, &out);
    const char *name = "tandem_operator_pool_status_condition";
    assert_true(sample(&out, name, "namespace=ns-a,pool=p1,condition=Ready") == 0);
    assert_true(sample(&out, name, "namespace=ns-a,pool=p1,condition=Progressing") == 1);
    assert_true(sample(&out, name, "namespace=ns-a,pool=p1,condition=Degraded") == 1);
    assert_true(sample(&out, "tandem_operator_pool_pods", "namespace=ns-a,pool=p1,state=total") ==
                3);
    assert_true(
        sample(&out, "tandem_operator_pool_pods", "namespace=ns-a,pool=p1,state=available") == 1);
    assert_true(
        sample(&out, "tandem_operator_pool_pods", "namespace=ns-a,pool=p1,state=unhealthy") == 2);
    /* a pool the reconciler has not written a status for has no series */
    assert_null(strstr(out.data, "pool=\"fresh\""));
    /* the workload family is declared even without series */
    assert_non_null(strstr(out.data, "# TYPE tandem_operator_workload_replicas gauge"));
    assert_false(has_series(&out, "tandem_operator_workload_replicas"));
    buf_free(&out);
    json_object_put(pools[0]);
    json_object_put(pools[1]);
}

static void test_workload_replicas(void **state)
{
    (void)state;
    struct json_object *wl[] = {parse(DEPLOY_DECODE), parse(DAEMONSET_BOTH), parse(DEPLOY_EPP)};
    struct buf out;
    render(NULL, 0, wl, 3, &out);
    const char *name = "tandem_operator_workload_replicas";
    assert_true(sample(&out, name, "namespace=ns-a,pool=p1,model=m,role=decode,state=desired") ==
                3);
    assert_true(sample(&out, name, "namespace=ns-a,pool=p1,model=m,role=decode,state=ready") == 1);
    assert_true(sample(&out, name, "namespace=ns-a,pool=p1,model=m,role=decode,state=available") ==
                1);
    assert_true(sample(&out, name, "namespace=ns-b,pool=p2,model=d,role=both,state=desired") == 2);
    assert_true(sample(&out, name, "namespace=ns-b,pool=p2,model=d,role=both,state=ready") == 2);
    assert_null(strstr(out.data, "p1-epp"));
    assert_null(strstr(out.data, "role=\"\""));
    assert_false(has_series(&out, "tandem_operator_pool_status_condition"));
    buf_free(&out);
    for (size_t i = 0; i < 3; i++) {
        json_object_put(wl[i]);
    }
}

static void test_deployment_defaults_and_bad_fields(void **state)
{
    (void)state;
    /* no spec.replicas: the API server's default 1; no status: 0 ready; a condition without a
     * status and a count of the wrong type are skipped, not reported as 0 */
    struct json_object *wl[] = {
        parse("{\"kind\":\"Deployment\",\"metadata\":{\"name\":\"x-prefill\",\"namespace\":\"n\","
              "\"labels\":{\"app.kubernetes.io/name\":\"tandem-agent\",\"tandem.dev/pool\":\"q\","
              "\"tandem.dev/model\":\"x\",\"llm-d.ai/role\":\"prefill\"}}}")};
    struct json_object *pools[] = {
        parse("{\"kind\":\"InferencePool\",\"metadata\":{\"name\":\"q\",\"namespace\":\"n\"},"
              "\"status\":{\"totalPods\":\"many\",\"availablePods\":0,\"conditions\":["
              "{\"type\":\"Ready\"},{\"type\":\"Degraded\",\"status\":\"Unknown\"}]}}")};
    struct buf out;
    render(pools, 1, wl, 1, &out);
    const char *name = "tandem_operator_workload_replicas";
    assert_true(sample(&out, name, "namespace=n,pool=q,model=x,role=prefill,state=desired") == 1);
    assert_true(sample(&out, name, "namespace=n,pool=q,model=x,role=prefill,state=ready") == 0);
    assert_true(sample(&out, "tandem_operator_pool_status_condition",
                       "namespace=n,pool=q,condition=Degraded") == 0);
    assert_null(strstr(out.data, "condition=\"Ready\""));
    assert_null(strstr(out.data, "state=\"total\""));
    assert_true(sample(&out, "tandem_operator_pool_pods", "namespace=n,pool=q,state=available") ==
                0);
    buf_free(&out);
    json_object_put(pools[0]);
    json_object_put(wl[0]);
}

static void test_output_full(void **state)
{
    (void)state;
    struct json_object *pools[] = {parse(POOL_DEGRADED)};
    struct buf out;
    buf_init(&out, 64); /* too small for the HELP lines */
    assert_int_equal(poolmetrics_render(pools, 1, NULL, 0, &out), -ENOSPC);
    buf_free(&out);
    json_object_put(pools[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_conditions_and_pods),
        cmocka_unit_test(test_workload_replicas),
        cmocka_unit_test(test_deployment_defaults_and_bad_fields),
        cmocka_unit_test(test_output_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
