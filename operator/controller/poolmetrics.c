/*
 * Pool health gauges (poolmetrics.h): a registry built for one scrape from the cached objects,
 * rendered and thrown away, so series of deleted pools or workloads disappear with them.
 */
#include "operator/controller/poolmetrics.h"

#include <errno.h>
#include <string.h>

#include "lib/json.h"
#include "lib/metrics.h"
#include "operator/controller/spec.h"
#include "operator/controller/status.h"

struct families {
    struct metric_family *condition, *pods, *replicas;
};

static const char *str_at(struct json_object *o, const char *path)
{
    const char *s = NULL;
    return json_get_string(o, path, &s, NULL, 0) == 0 ? s : NULL;
}

/* A label's value (keys contain dots, so not through json_get's paths), or NULL. */
static const char *label_of(struct json_object *labels, const char *key)
{
    struct json_object *v = NULL;
    if (!json_object_object_get_ex(labels, key, &v) || !json_object_is_type(v, json_type_string)) {
        return NULL;
    }
    return json_object_get_string(v);
}

/* One sample; label values must not be NULL. */
static int set_sample(struct metric_family *f, const char *const *values, double v)
{
    struct metric *m = metrics_child(f, values);
    if (!m) {
        return -ENOMEM;
    }
    metric_set(m, v);
    return 0;
}

static int add_pool(const struct families *fam, struct json_object *pool)
{
    const char *ns = str_at(pool, "metadata.namespace"), *name = str_at(pool, "metadata.name");
    struct json_object *status = json_get(pool, "status");
    if (!ns || !name || !status) {
        return 0;
    }
    struct json_object *conds = json_get(status, "conditions");
    size_t n = json_object_is_type(conds, json_type_array) ? json_object_array_length(conds) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        const char *type = str_at(c, "type"), *st = str_at(c, "status");
        if (!type || !st) {
            continue;
        }
        const char *values[] = {ns, name, type};
        if (set_sample(fam->condition, values, strcmp(st, "True") == 0 ? 1 : 0) != 0) {
            return -ENOMEM;
        }
    }
    static const struct {
        const char *field, *state;
    } counts[] = {
        {"totalPods", "total"}, {"availablePods", "available"}, {"unhealthyPods", "unhealthy"}};
    for (size_t i = 0; i < ARRAY_SIZE(counts); i++) {
        int64_t v = 0;
        if (json_get_int64(status, counts[i].field, &v, NULL, 0) != 0) {
            continue;
        }
        const char *values[] = {ns, name, counts[i].state};
        if (set_sample(fam->pods, values, (double)v) != 0) {
            return -ENOMEM;
        }
    }
    return 0;
}

static int add_workload(const struct families *fam, struct json_object *obj)
{
    const char *kind = str_at(obj, "kind");
    struct json_object *labels = json_get(obj, "metadata.labels");
    const char *app = label_of(labels, LABEL_NAME), *pool = label_of(labels, LABEL_POOL);
    const char *ns = str_at(obj, "metadata.namespace"), *name = str_at(obj, "metadata.name");
    if (!kind || !app || strcmp(app, "tandem-agent") != 0 || !pool || !ns || !name) {
        return 0;
    }
    struct status_workload w;
    if (strcmp(kind, "Deployment") == 0) {
        status_workload_from_deployment(obj, name, &w);
    } else if (strcmp(kind, "DaemonSet") == 0) {
        status_workload_from_daemonset(obj, name, &w);
    } else {
        return 0;
    }
    const char *model = label_of(labels, LABEL_MODEL), *role = label_of(labels, LABEL_ROLE);
    const struct {
        const char *state;
        int value;
    } states[] = {{"desired", w.replicas}, {"ready", w.ready}, {"available", w.available}};
    for (size_t i = 0; i < ARRAY_SIZE(states); i++) {
        const char *values[] = {ns, pool, model ? model : "", role ? role : "", states[i].state};
        if (set_sample(fam->replicas, values, states[i].value) != 0) {
            return -ENOMEM;
        }
    }
    return 0;
}

int poolmetrics_render(struct json_object *const *pools, size_t npools,
                       struct json_object *const *workloads, size_t nworkloads, struct buf *out)
{
    static const char *const cond_labels[] = {"namespace", "pool", "condition"};
    static const char *const pod_labels[] = {"namespace", "pool", "state"};
    static const char *const rep_labels[] = {"namespace", "pool", "model", "role", "state"};
    int rc = -ENOMEM;
    struct metrics_registry *r = metrics_registry_new();
    if (!r) {
        return -ENOMEM;
    }
    struct families fam = {
        .condition = metrics_gauge_new(
            r, "tandem_operator_pool_status_condition",
            "1 while the InferencePool status condition is True, else 0 (from the pool's status).",
            ARRAY_SIZE(cond_labels), cond_labels),
        .pods = metrics_gauge_new(r, "tandem_operator_pool_pods",
                                  "Pods of the InferencePool by state (status.totalPods, "
                                  "availablePods, unhealthyPods).",
                                  ARRAY_SIZE(pod_labels), pod_labels),
        .replicas = metrics_gauge_new(r, "tandem_operator_workload_replicas",
                                      "Replicas of the agent Deployments/DaemonSets the operator "
                                      "owns, by pool, model, role and state.",
                                      ARRAY_SIZE(rep_labels), rep_labels),
    };
    if (!fam.condition || !fam.pods || !fam.replicas) {
        goto out_free;
    }
    for (size_t i = 0; i < npools; i++) {
        if (add_pool(&fam, pools[i]) != 0) {
            goto out_free;
        }
    }
    for (size_t i = 0; i < nworkloads; i++) {
        if (add_workload(&fam, workloads[i]) != 0) {
            goto out_free;
        }
    }
    rc = metrics_render(r, out);
out_free:
    metrics_registry_free(r);
    return rc;
}
