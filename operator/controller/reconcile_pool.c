/*
 * InferencePool reconciler (see reconcile_pool.h): spec → pool objects → status.
 */
#include "operator/controller/reconcile_pool.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lib/json.h"
#include "lib/log.h"
#include "operator/controller/apply.h"
#include "operator/controller/eppconfig.h"
#include "operator/controller/status.h"

/* Owned kinds a pool may have objects of (what apply_delete_unwanted sweeps). */
static const enum opctl_kind pool_kinds[] = {OPCTL_SERVICEACCOUNT, OPCTL_ROLE,
                                             OPCTL_ROLEBINDING,    OPCTL_CONFIGMAP,
                                             OPCTL_DEPLOYMENT,     OPCTL_SERVICE};

/* The spec problem as one message ("field: message; ..."). */
static void errors_text(const struct spec_errors *errs, char *out, size_t outlen)
{
    spec_errors_format(errs, out, outlen);
}

/*
 * Checks the ConfigMap a configMapRef names: 0 when it exists and holds a valid config; 1 when
 * a problem was reported (reason/message filled, recheck set); negative on API errors.
 */
static int check_config_ref(struct reconcile_ctx *ctx, const struct spec_pool *pool,
                            const char **reason, char *message, size_t msglen, int *recheck,
                            struct kube_error *err)
{
    struct json_object *cm = NULL;
    *recheck = 0;
    int rc = kube_get(ctx->client, &KUBE_CONFIGMAPS, pool->ns, pool->routing.cm_name, &cm, err);
    if (rc == KUBE_ENOTFOUND) {
        *reason = REASON_CONFIGMAP_NOT_FOUND;
        *recheck = 1;
        snprintf(message, msglen,
                 "spec.routingPolicy.endpointPickerConfig.configMapRef.name: ConfigMap %s not "
                 "found in namespace %s",
                 pool->routing.cm_name, pool->ns);
        return 1;
    }
    if (rc != 0) {
        return rc;
    }
    struct json_object *data = json_get(cm, "data"), *text = NULL;
    if (!data || !json_object_object_get_ex(data, pool->routing.cm_key, &text) ||
        !json_object_is_type(text, json_type_string)) {
        *reason = REASON_CONFIGMAP_NOT_FOUND;
        *recheck = 1;
        snprintf(message, msglen,
                 "spec.routingPolicy.endpointPickerConfig.configMapRef.key: ConfigMap %s has no "
                 "key %s",
                 pool->routing.cm_name, pool->routing.cm_key);
        json_object_put(cm);
        return 1;
    }
    char field[384];
    struct spec_errors errs;
    spec_errors_init(&errs);
    snprintf(field, sizeof(field), "ConfigMap %s data[%s]", pool->routing.cm_name,
             pool->routing.cm_key);
    const char *primary =
        pool->routing.has_scheduler_profile ? pool->routing.scheduler_profile : NULL;
    rc = eppconfig_parse(json_object_get_string(text), (size_t)json_object_get_string_len(text),
                         field, primary, pool->disagg.enabled, NULL, &errs);
    json_object_put(cm);
    if (rc == -EINVAL) {
        *reason = REASON_INVALID_EPP_CONFIG;
        *recheck = 1; /* the ConfigMap is not watched: look again for a fix */
        errors_text(&errs, message, msglen);
        return 1;
    }
    return rc;
}

/* Names of the desired objects of one kind. */
static size_t names_of_kind(struct json_object *objs, enum opctl_kind kind, const char **names,
                            size_t max)
{
    size_t n = 0, len = json_object_array_length(objs);
    for (size_t i = 0; i < len && n < max; i++) {
        struct json_object *o = json_object_array_get_idx(objs, i);
        enum opctl_kind k;
        const char *name = NULL;
        if (opctl_kind_of(o, &k) == 0 && k == kind &&
            json_get_string(o, "metadata.name", &name, NULL, 0) == 0) {
            names[n++] = name;
        }
    }
    return n;
}

/* Pods of the pool (labelled with its name, in its namespace) that its selector selects. */
static int count_pods(struct reconcile_ctx *ctx, const struct spec_pool *pool,
                      struct status_pods *pods)
{
    struct json_object **items = NULL;
    size_t n = 0;
    memset(pods, 0, sizeof(*pods));
    int rc =
        opctl_cache_by_label(ctx->cache, OPCTL_POD, pool->ns, LABEL_POOL, pool->name, &items, &n);
    if (rc != 0) {
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if (spec_selector_matches(&pool->selector, json_get(items[i], "metadata.labels"))) {
            status_count_pod(pods, items[i]);
        }
    }
    opctl_items_free(items, n);
    return 0;
}

/* Applies every desired object; the live EPP Deployment goes to *epp. On failure the error
 * reason/message for the status are filled and the first error returned. */
static int apply_all(struct reconcile_ctx *ctx, struct json_object *owner, struct json_object *objs,
                     const char *epp_name, struct json_object **epp, const char **err_reason,
                     char *err_msg, size_t err_len)
{
    size_t len = json_object_array_length(objs);
    for (size_t i = 0; i < len; i++) {
        struct json_object *d = json_object_array_get_idx(objs, i), *live = NULL;
        struct kube_error kerr = {0};
        int rc = apply_object(ctx, owner, d, &live, NULL, &kerr);
        if (rc != 0) {
            const char *kind = "?", *name = "?";
            char what[384];
            json_get_string(d, "kind", &kind, NULL, 0);
            json_get_string(d, "metadata.name", &name, NULL, 0);
            tandem_set_err(what, sizeof(what), "writing %s %s", kind, name);
            *err_reason = reconcile_write_error(rc, &kerr, what, err_msg, err_len);
            return rc;
        }
        enum opctl_kind k;
        const char *name = NULL;
        if (opctl_kind_of(d, &k) == 0 && k == OPCTL_DEPLOYMENT &&
            json_get_string(d, "metadata.name", &name, NULL, 0) == 0 &&
            strcmp(name, epp_name) == 0) {
            json_object_put(*epp);
            *epp = live;
        } else {
            json_object_put(live);
        }
    }
    return 0;
}

static int sweep(struct reconcile_ctx *ctx, struct json_object *owner, const struct spec_pool *pool,
                 struct json_object *objs, const char **err_reason, char *err_msg, size_t err_len)
{
    for (size_t k = 0; k < ARRAY_SIZE(pool_kinds); k++) {
        const char *keep[16];
        size_t nkeep = names_of_kind(objs, pool_kinds[k], keep, ARRAY_SIZE(keep));
        struct kube_error kerr = {0};
        int rc = apply_delete_unwanted(ctx, owner, pool_kinds[k], pool->ns, pool->uid, keep, nkeep,
                                       NULL, &kerr);
        if (rc != 0) {
            char what[128];
            tandem_set_err(what, sizeof(what), "deleting unwanted %s",
                           opctl_resource(pool_kinds[k])->plural);
            *err_reason = reconcile_write_error(rc, &kerr, what, err_msg, err_len);
            return rc;
        }
    }
    return 0;
}

/* Everything after validation: objects, sweep, status. */
static int reconcile_valid(struct reconcile_ctx *ctx, struct json_object *live,
                           const struct spec_pool *pool, struct reconcile_result *res)
{
    char msg[STATUS_MESSAGE_MAX], err_msg[STATUS_MESSAGE_MAX] = "";
    const char *reason = NULL, *err_reason = NULL;
    struct kube_error kerr = {0};
    int rc, recheck = 0;
    if (pool->routing.cm_name) {
        rc = check_config_ref(ctx, pool, &reason, msg, sizeof(msg), &recheck, &kerr);
        if (rc < 0) {
            return rc;
        }
        if (rc == 1) {
            if (recheck) {
                res->requeue_after_ms = RECONCILE_POOL_RECHECK_MS;
            }
            rc = reconcile_set_problem(ctx, opctl_resource(OPCTL_POOL), live, reason, msg, &kerr);
            return reconcile_requeue_stale(rc, res);
        }
    }
    struct spec_errors errs;
    spec_errors_init(&errs);
    struct json_object *objs = NULL, *epp = NULL;
    rc = desired_pool_objects(pool, &ctx->opts, &objs, &errs);
    if (rc == -EINVAL) {
        errors_text(&errs, msg, sizeof(msg));
        rc = reconcile_set_problem(ctx, opctl_resource(OPCTL_POOL), live, REASON_INVALID_SPEC, msg,
                                   &kerr);
        return reconcile_requeue_stale(rc, res);
    }
    if (rc != 0) {
        return rc;
    }
    char epp_name[DESIRED_NAME_MAX];
    int failed = desired_pool_object_name(pool, "-epp", epp_name, sizeof(epp_name));
    if (failed == 0) {
        failed = apply_all(ctx, live, objs, epp_name, &epp, &err_reason, err_msg, sizeof(err_msg));
    }
    if (failed == 0) {
        failed = sweep(ctx, live, pool, objs, &err_reason, err_msg, sizeof(err_msg));
    }
    json_object_put(objs);
    if (reconcile_is_stale(failed)) { /* no status noise about it */
        json_object_put(epp);
        return reconcile_requeue_stale(failed, res);
    }
    if (failed != 0 && !err_reason) {
        json_object_put(epp);
        return failed;
    }

    struct status_pool_input in = {
        .generation = pool->generation, .error_reason = err_reason, .error_message = err_msg};
    if (!epp) { /* not reached by apply_all (it failed first) */
        epp = opctl_cache_get(ctx->cache, OPCTL_DEPLOYMENT, pool->ns, epp_name);
    }
    status_workload_from_deployment(epp, "epp", &in.epp);
    rc = count_pods(ctx, pool, &in.pods);
    struct json_object *status = rc == 0 ? reconcile_status_copy(live) : NULL;
    char now[STATUS_TIME_LEN];
    status_format_time(reconcile_now(ctx), now, sizeof(now));
    if (status) {
        const char *old = NULL;
        json_get_string(status_find_condition(json_get(status, "conditions"), COND_READY), "status",
                        &old, NULL, 0);
        int was_ready = old && strcmp(old, "True") == 0;
        rc = status_pool_compute(status, &in, now);
        int written = 0;
        if (rc >= 0) {
            rc = apply_status(ctx, opctl_resource(OPCTL_POOL), live, status, &written, &kerr);
        }
        int is_ready = status_condition_is(json_get(status, "conditions"), COND_READY, "True");
        if (rc == 0 && written && is_ready != was_ready) {
            reconcile_event(ctx, live, is_ready ? "Normal" : "Warning",
                            is_ready ? "Ready" : "NotReady", "%s",
                            is_ready ? "the pool is ready" : "the pool is not ready");
        }
    } else if (rc == 0) {
        rc = -ENOMEM;
    }
    json_object_put(status);
    json_object_put(epp);
    rc = reconcile_requeue_stale(rc, res);
    if (failed != 0) {
        log_warn("InferencePool %s/%s: %s", pool->ns, pool->name, err_msg);
        return failed;
    }
    return rc;
}

int reconcile_pool(struct reconcile_ctx *ctx, const char *ns, const char *name,
                   struct reconcile_result *res)
{
    memset(res, 0, sizeof(*res));
    struct json_object *live = opctl_cache_get(ctx->cache, OPCTL_POOL, ns, name);
    if (!live) {
        log_debug("InferencePool %s/%s is gone", ns, name);
        return 0;
    }
    if (json_get(live, "metadata.deletionTimestamp")) {
        json_object_put(live); /* garbage collection removes what it owns */
        return 0;
    }
    struct spec_pool pool;
    struct spec_errors errs;
    spec_errors_init(&errs);
    int rc = spec_pool_parse(live, &pool, &errs);
    if (rc == -EINVAL) {
        char msg[STATUS_MESSAGE_MAX];
        struct kube_error kerr = {0};
        errors_text(&errs, msg, sizeof(msg));
        rc = reconcile_set_problem(ctx, opctl_resource(OPCTL_POOL), live, REASON_INVALID_SPEC, msg,
                                   &kerr);
        rc = reconcile_requeue_stale(rc, res);
    } else if (rc == 0) {
        rc = reconcile_valid(ctx, live, &pool, res);
    }
    spec_pool_free(&pool);
    json_object_put(live);
    return rc;
}
