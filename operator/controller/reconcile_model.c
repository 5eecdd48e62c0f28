/*
 * InferenceModel reconciler (see reconcile_model.h): spec + pool → role Deployments (+ HPAs), or
 * one DaemonSet (deployment.type DaemonSet) → status. The workload kind the type does not want is
 * deleted, so switching between a Deployment and a DaemonSet leaves one of them.
 */
#include "operator/controller/reconcile_model.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lib/json.h"
#include "lib/log.h"
#include "operator/controller/apply.h"
#include "operator/controller/status.h"

/* "prefill", "decode", "worker": the workload's name in messages. */
static const char *role_word(enum spec_role role)
{
    switch (role) {
    case ROLE_PREFILL:
        return "prefill";
    case ROLE_DECODE:
        return "decode";
    case ROLE_BOTH:
        break;
    }
    return "worker";
}

static int problem(struct reconcile_ctx *ctx, struct json_object *live, const char *reason,
                   const char *message, struct reconcile_result *res)
{
    struct kube_error kerr = {0};
    int rc = reconcile_set_problem(ctx, opctl_resource(OPCTL_MODEL), live, reason, message, &kerr);
    return reconcile_requeue_stale(rc, res);
}

static int count_pods(struct reconcile_ctx *ctx, const struct spec_model *model,
                      struct status_pods *pods)
{
    struct json_object **items = NULL;
    size_t n = 0;
    memset(pods, 0, sizeof(*pods));
    int rc = opctl_cache_by_label(ctx->cache, OPCTL_POD, model->ns, LABEL_MODEL, model->name,
                                  &items, &n);
    if (rc != 0) {
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        const char *pool = NULL;
        struct json_object *labels = json_get(items[i], "metadata.labels"), *v = NULL;
        if (labels && json_object_object_get_ex(labels, LABEL_POOL, &v)) {
            pool = json_object_get_string(v);
        }
        if (pool && strcmp(pool, model->pool_name) == 0) {
            status_count_pod(pods, items[i]);
        }
    }
    opctl_items_free(items, n);
    return 0;
}

struct model_run {
    struct status_model_input in;
    struct json_object *live_deploy[3]; /* per role, the live Deployment or DaemonSet, or NULL */
    const char *err_reason;
    char err_msg[STATUS_MESSAGE_MAX];
};

static void run_free(struct model_run *run)
{
    for (size_t i = 0; i < ARRAY_SIZE(run->live_deploy); i++) {
        json_object_put(run->live_deploy[i]);
        run->live_deploy[i] = NULL;
    }
}

/* The workload kind of the model: Deployments, or one DaemonSet. */
static const char *workload_kind(const struct spec_model *model)
{
    return model->deployment.type == DEPLOY_DAEMONSET ? "DaemonSet" : "Deployment";
}

/* Applies the desired objects; remembers the live workload of each role. */
static int apply_all(struct reconcile_ctx *ctx, struct json_object *owner,
                     const struct spec_model *model, struct json_object *objs,
                     struct model_run *run)
{
    size_t len = json_object_array_length(objs);
    for (size_t i = 0; i < len; i++) {
        struct json_object *d = json_object_array_get_idx(objs, i), *live = NULL;
        struct kube_error kerr = {0};
        const char *kind = "?", *name = "?";
        json_get_string(d, "kind", &kind, NULL, 0);
        json_get_string(d, "metadata.name", &name, NULL, 0);
        int rc = apply_object(ctx, owner, d, &live, NULL, &kerr);
        if (rc != 0) {
            char what[384];
            tandem_set_err(what, sizeof(what), "writing %s %s", kind, name);
            run->err_reason =
                reconcile_write_error(rc, &kerr, what, run->err_msg, sizeof(run->err_msg));
            return rc;
        }
        int stored = 0;
        for (int r = 0; r < run->in.n && strcmp(kind, workload_kind(model)) == 0; r++) {
            char want[DESIRED_NAME_MAX];
            if (desired_workload_name(model, run->in.roles[r], want, sizeof(want)) == 0 &&
                strcmp(want, name) == 0) {
                json_object_put(run->live_deploy[r]);
                run->live_deploy[r] = live;
                stored = 1;
                break;
            }
        }
        if (!stored) {
            json_object_put(live);
        }
    }
    return 0;
}

/* Deletes role Deployments, the DaemonSet and HPAs the model no longer wants (every Deployment and
 * HPA of a DaemonSet model, the DaemonSet of any other). */
static int sweep(struct reconcile_ctx *ctx, struct json_object *owner, const struct spec_pool *pool,
                 const struct spec_model *model, struct model_run *run)
{
    char names[3][DESIRED_NAME_MAX];
    const char *keep[3];
    size_t nkeep = 0;
    for (int r = 0; r < run->in.n; r++) {
        if (desired_workload_name(model, run->in.roles[r], names[r], sizeof(names[r])) == 0) {
            keep[nkeep++] = names[r];
        }
    }
    int daemon = model->deployment.type == DEPLOY_DAEMONSET;
    struct kube_error kerr = {0};
    int rc = apply_delete_unwanted(ctx, owner, OPCTL_DEPLOYMENT, model->ns, model->uid, keep,
                                   daemon ? 0 : nkeep, NULL, &kerr);
    if (rc == 0) {
        rc = apply_delete_unwanted(ctx, owner, OPCTL_DAEMONSET, model->ns, model->uid, keep,
                                   daemon ? nkeep : 0, NULL, &kerr);
    }
    if (rc == 0) {
        rc = apply_delete_unwanted(ctx, owner, OPCTL_HPA, model->ns, model->uid, keep,
                                   pool->autoscaling.enabled && !daemon ? nkeep : 0, NULL, &kerr);
    }
    if (rc != 0) {
        char what[384];
        tandem_set_err(what, sizeof(what), "deleting unwanted objects of %s", model->name);
        run->err_reason =
            reconcile_write_error(rc, &kerr, what, run->err_msg, sizeof(run->err_msg));
    }
    return rc;
}

static int reconcile_valid(struct reconcile_ctx *ctx, struct json_object *live,
                           const struct spec_pool *pool, const struct spec_model *model,
                           struct reconcile_result *res)
{
    struct model_run run;
    memset(&run, 0, sizeof(run));
    run.in.generation = model->generation;
    run.in.type = model->deployment.type;
    run.in.n = spec_model_roles(model, run.in.roles);

    struct json_object *objs = NULL;
    int rc = desired_model_objects(pool, model, &ctx->opts, &objs);
    if (rc == -ENOTSUP) {
        return problem(ctx, live, REASON_MULTINODE_NOT_SUPPORTED,
                       "spec.deployment.type: MultiNode is not supported yet; use Disaggregated, "
                       "Unified or DaemonSet",
                       res);
    }
    if (rc != 0) {
        return rc;
    }
    int failed = apply_all(ctx, live, model, objs, &run);
    json_object_put(objs);
    if (failed == 0) {
        failed = sweep(ctx, live, pool, model, &run);
    }
    if (reconcile_is_stale(failed)) {
        run_free(&run);
        return reconcile_requeue_stale(failed, res);
    }
    if (failed != 0 && !run.err_reason) {
        run_free(&run);
        return failed;
    }
    int daemon = model->deployment.type == DEPLOY_DAEMONSET;
    for (int r = 0; r < run.in.n; r++) {
        char name[DESIRED_NAME_MAX];
        if (!run.live_deploy[r] &&
            desired_workload_name(model, run.in.roles[r], name, sizeof(name)) == 0) {
            run.live_deploy[r] = opctl_cache_get(
                ctx->cache, daemon ? OPCTL_DAEMONSET : OPCTL_DEPLOYMENT, model->ns, name);
        }
        if (daemon) {
            status_workload_from_daemonset(run.live_deploy[r], role_word(run.in.roles[r]),
                                           &run.in.w[r]);
        } else {
            status_workload_from_deployment(run.live_deploy[r], role_word(run.in.roles[r]),
                                            &run.in.w[r]);
        }
    }
    run.in.error_reason = run.err_reason;
    run.in.error_message = run.err_msg;
    rc = count_pods(ctx, model, &run.in.pods);
    struct json_object *status = rc == 0 ? reconcile_status_copy(live) : NULL;
    if (status) {
        char now[STATUS_TIME_LEN];
        struct kube_error kerr = {0};
        int written = 0;
        int was_ready = status_condition_is(json_get(status, "conditions"), COND_READY, "True");
        status_format_time(reconcile_now(ctx), now, sizeof(now));
        rc = status_model_compute(status, &run.in, now);
        if (rc >= 0) {
            rc = apply_status(ctx, opctl_resource(OPCTL_MODEL), live, status, &written, &kerr);
        }
        int is_ready = status_condition_is(json_get(status, "conditions"), COND_READY, "True");
        if (rc == 0 && written && is_ready != was_ready) {
            reconcile_event(ctx, live, is_ready ? "Normal" : "Warning",
                            is_ready ? "Ready" : "NotReady", "%s",
                            is_ready ? "every worker is ready" : "some workers are not ready");
        }
    } else if (rc == 0) {
        rc = -ENOMEM;
    }
    json_object_put(status);
    run_free(&run);
    rc = reconcile_requeue_stale(rc, res);
    if (failed != 0) {
        log_warn("InferenceModel %s/%s: %s", model->ns, model->name, run.err_msg);
        return failed;
    }
    return rc;
}

/* Validates the model against its pool; 0 valid, 1 problem reported, negative errors. */
static int with_pool(struct reconcile_ctx *ctx, struct json_object *live,
                     const struct spec_model *model, struct reconcile_result *res)
{
    char msg[STATUS_MESSAGE_MAX];
    struct json_object *pool_obj =
        opctl_cache_get(ctx->cache, OPCTL_POOL, model->ns, model->pool_name);
    if (!pool_obj || json_get(pool_obj, "metadata.deletionTimestamp")) {
        json_object_put(pool_obj);
        snprintf(msg, sizeof(msg), "spec.poolRef.name: InferencePool %s not found in namespace %s",
                 model->pool_name, model->ns);
        res->requeue_after_ms = RECONCILE_MODEL_RECHECK_MS;
        return problem(ctx, live, REASON_POOL_NOT_FOUND, msg, res);
    }
    struct spec_pool pool;
    struct spec_errors errs;
    spec_errors_init(&errs);
    int rc = spec_pool_parse(pool_obj, &pool, &errs);
    if (rc == -EINVAL) {
        char detail[STATUS_MESSAGE_MAX - 128];
        spec_errors_format(&errs, detail, sizeof(detail));
        snprintf(msg, sizeof(msg), "InferencePool %s has an invalid spec: %s", model->pool_name,
                 detail);
        rc = problem(ctx, live, REASON_POOL_INVALID, msg, res);
    } else if (rc == 0) {
        spec_errors_init(&errs);
        rc = spec_model_check_pool(&pool, model, &errs);
        if (rc == -EINVAL) {
            spec_errors_format(&errs, msg, sizeof(msg));
            rc = problem(ctx, live, REASON_INVALID_SPEC, msg, res);
        } else if (rc == 0) {
            rc = reconcile_valid(ctx, live, &pool, model, res);
        }
    }
    spec_pool_free(&pool);
    json_object_put(pool_obj);
    return rc;
}

int reconcile_model(struct reconcile_ctx *ctx, const char *ns, const char *name,
                    struct reconcile_result *res)
{
    memset(res, 0, sizeof(*res));
    struct json_object *live = opctl_cache_get(ctx->cache, OPCTL_MODEL, ns, name);
    if (!live) {
        log_debug("InferenceModel %s/%s is gone", ns, name);
        return 0;
    }
    if (json_get(live, "metadata.deletionTimestamp")) {
        json_object_put(live);
        return 0;
    }
    struct spec_model model;
    struct spec_errors errs;
    spec_errors_init(&errs);
    char msg[STATUS_MESSAGE_MAX];
    int rc = spec_model_parse(live, &model, &errs);
    if (rc == -EINVAL) {
        spec_errors_format(&errs, msg, sizeof(msg));
        rc = problem(ctx, live, REASON_INVALID_SPEC, msg, res);
    } else if (rc == -ENOTSUP) {
        spec_errors_format(&errs, msg, sizeof(msg));
        rc = problem(ctx, live, REASON_MULTINODE_NOT_SUPPORTED, msg, res);
    } else if (rc == 0) {
        rc = with_pool(ctx, live, &model, res);
    }
    spec_model_free(&model);
    json_object_put(live);
    return rc;
}
