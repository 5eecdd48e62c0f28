/*
 * Conditions (meta.SetStatusCondition semantics) and the status of pools and models computed from
 * observed Deployments and pods (see status.h). No I/O: the reconcilers feed it what the informer
 * caches hold and write the result only when status_differs says it changed.
 */
#include "operator/controller/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/json.h"

char *status_format_time(time_t t, char *out, size_t outlen)
{
    struct tm tm;
    if (outlen == 0) {
        return out;
    }
    if (!gmtime_r(&t, &tm) || strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
        out[0] = '\0';
    }
    return out;
}

static const char *member_string(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string)) {
        return NULL;
    }
    return json_object_get_string(v);
}

static int64_t member_int64(struct json_object *o, const char *key, int64_t def)
{
    struct json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v) ||
        !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))) {
        return def;
    }
    return json_object_get_int64(v);
}

struct json_object *status_find_condition(struct json_object *conditions, const char *type)
{
    if (!conditions || !json_object_is_type(conditions, json_type_array)) {
        return NULL;
    }
    size_t n = json_object_array_length(conditions);
    for (size_t i = 0; i < n; i++) {
        struct json_object *c = json_object_array_get_idx(conditions, i);
        const char *t = member_string(c, "type");
        if (t && strcmp(t, type) == 0) {
            return c;
        }
    }
    return NULL;
}

int status_condition_is(struct json_object *conditions, const char *type, const char *status)
{
    const char *s = member_string(status_find_condition(conditions, type), "status");
    return s && strcmp(s, status) == 0;
}

/* o[key] = string s unless it already is; 1 changed, 0 not, -ENOMEM. */
static int set_string(struct json_object *o, const char *key, const char *s)
{
    const char *cur = member_string(o, key);
    if (cur && strcmp(cur, s) == 0) {
        return 0;
    }
    struct json_object *v = json_object_new_string(s);
    if (!v || json_object_object_add(o, key, v) != 0) {
        json_object_put(v);
        return -ENOMEM;
    }
    return 1;
}

/* o[key] = integer v unless it already is; 1 changed, 0 not, -ENOMEM. */
static int set_int64(struct json_object *o, const char *key, int64_t v)
{
    struct json_object *cur = NULL;
    if (json_object_object_get_ex(o, key, &cur) && json_object_is_type(cur, json_type_int) &&
        json_object_get_int64(cur) == v) {
        return 0;
    }
    struct json_object *n = json_object_new_int64(v);
    if (!n || json_object_object_add(o, key, n) != 0) {
        json_object_put(n);
        return -ENOMEM;
    }
    return 1;
}

/* Accumulates "changed" results: returns the error or *changed |= rc. */
static int track(int rc, int *changed)
{
    if (rc < 0) {
        return rc;
    }
    if (rc > 0) {
        *changed = 1;
    }
    return 0;
}

int status_set_condition(struct json_object *status, const struct status_condition *c,
                         const char *now)
{
    if (!status || !json_object_is_type(status, json_type_object) || !c->type || !c->status ||
        !c->reason || !c->message || !now) {
        return -EINVAL;
    }
    struct json_object *conds = NULL;
    if (!json_object_object_get_ex(status, "conditions", &conds) ||
        !json_object_is_type(conds, json_type_array)) {
        conds = json_object_new_array();
        if (!conds || json_object_object_add(status, "conditions", conds) != 0) {
            json_object_put(conds);
            return -ENOMEM;
        }
    }
    int changed = 0, rc;
    struct json_object *cur = status_find_condition(conds, c->type);
    if (!cur) {
        cur = json_object_new_object();
        if (!cur || json_object_array_add(conds, cur) != 0) {
            json_object_put(cur);
            return -ENOMEM;
        }
        changed = 1;
        if ((rc = set_string(cur, "type", c->type)) < 0) {
            return rc;
        }
    }
    const char *old_status = member_string(cur, "status");
    int transition = !old_status || strcmp(old_status, c->status) != 0 ||
                     !member_string(cur, "lastTransitionTime");
    if ((rc = track(set_string(cur, "status", c->status), &changed)) != 0 ||
        (rc = track(set_string(cur, "reason", c->reason), &changed)) != 0 ||
        (rc = track(set_string(cur, "message", c->message), &changed)) != 0 ||
        (rc = track(set_int64(cur, "observedGeneration", c->observed_generation), &changed)) != 0) {
        return rc;
    }
    if (transition && (rc = track(set_string(cur, "lastTransitionTime", now), &changed)) != 0) {
        return rc;
    }
    return changed;
}

/* ---- comparison ---- */

static int is_number(struct json_object *v)
{
    return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
}

static int values_equal(struct json_object *a, struct json_object *b, int depth)
{
    if (!a || !b) {
        return !a && !b;
    }
    if (depth > 64) {
        return 0;
    }
    if (is_number(a) && is_number(b)) {
        if (json_object_is_type(a, json_type_int) && json_object_is_type(b, json_type_int)) {
            return json_object_get_int64(a) == json_object_get_int64(b);
        }
        return json_object_get_double(a) == json_object_get_double(b);
    }
    if (json_object_get_type(a) != json_object_get_type(b)) {
        return 0;
    }
    switch (json_object_get_type(a)) {
    case json_type_object: {
        if (json_object_object_length(a) != json_object_object_length(b)) {
            return 0;
        }
        json_object_object_foreach(a, k, va)
        {
            struct json_object *vb = NULL;
            if (!json_object_object_get_ex(b, k, &vb) || !values_equal(va, vb, depth + 1)) {
                return 0;
            }
        }
        return 1;
    }
    case json_type_array: {
        size_t n = json_object_array_length(a);
        if (json_object_array_length(b) != n) {
            return 0;
        }
        for (size_t i = 0; i < n; i++) {
            if (!values_equal(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i),
                              depth + 1)) {
                return 0;
            }
        }
        return 1;
    }
    case json_type_string:
        return strcmp(json_object_get_string(a), json_object_get_string(b)) == 0;
    case json_type_boolean:
        return !json_object_get_boolean(a) == !json_object_get_boolean(b);
    case json_type_null:
        return 1;
    default:
        return 0;
    }
}

int status_differs(struct json_object *live_status, struct json_object *new_status)
{
    return !values_equal(live_status, new_status, 0);
}

/* ---- observations ---- */

void status_workload_from_deployment(struct json_object *deploy, const char *name,
                                     struct status_workload *w)
{
    memset(w, 0, sizeof(*w));
    w->name = name;
    if (!deploy) {
        return;
    }
    struct json_object *spec = json_get(deploy, "spec"), *st = json_get(deploy, "status");
    struct json_object *meta = json_get(deploy, "metadata");
    w->exists = 1;
    w->replicas = (int)member_int64(spec, "replicas", 1);
    w->status_replicas = (int)member_int64(st, "replicas", 0);
    w->updated = (int)member_int64(st, "updatedReplicas", 0);
    w->ready = (int)member_int64(st, "readyReplicas", 0);
    w->available = (int)member_int64(st, "availableReplicas", 0);
    w->generation = member_int64(meta, "generation", 0);
    w->observed_generation = member_int64(st, "observedGeneration", 0);
    struct json_object *prog = status_find_condition(json_get(st, "conditions"), "Progressing");
    const char *reason = member_string(prog, "reason");
    w->deadline_exceeded = reason && strcmp(reason, REASON_DEADLINE_EXCEEDED) == 0;
}

void status_workload_from_daemonset(struct json_object *ds, const char *name,
                                    struct status_workload *w)
{
    memset(w, 0, sizeof(*w));
    w->name = name;
    w->daemon = 1;
    if (!ds) {
        return;
    }
    struct json_object *st = json_get(ds, "status");
    w->exists = 1;
    w->replicas = (int)member_int64(st, "desiredNumberScheduled", 0);
    w->status_replicas = (int)member_int64(st, "currentNumberScheduled", 0);
    w->updated = (int)member_int64(st, "updatedNumberScheduled", 0);
    w->ready = (int)member_int64(st, "numberReady", 0);
    w->available = (int)member_int64(st, "numberAvailable", 0);
    w->generation = member_int64(json_get(ds, "metadata"), "generation", 0);
    w->observed_generation = member_int64(st, "observedGeneration", 0);
}

int status_workload_ready(const struct status_workload *w)
{
    if (!w->exists || w->ready < w->replicas) {
        return 0;
    }
    return !w->daemon || (w->replicas > 0 && w->observed_generation >= w->generation);
}

int status_workload_rolling(const struct status_workload *w)
{
    return !w->exists || w->observed_generation < w->generation || w->updated < w->replicas ||
           w->status_replicas > w->updated;
}

/* Container waiting reasons that mean the pod will not come up by itself soon. */
static int failing_reason(const char *reason)
{
    static const char *const reasons[] = {"CrashLoopBackOff",  "ErrImagePull",
                                          "ImagePullBackOff",  "InvalidImageName",
                                          "ErrImageNeverPull", "CreateContainerError",
                                          "RunContainerError", "CreateContainerConfigError"};
    for (size_t i = 0; reason && i < ARRAY_SIZE(reasons); i++) {
        if (strcmp(reason, reasons[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The first failing waiting reason among the container statuses in list (an array), or NULL. */
static const char *waiting_failure(struct json_object *list)
{
    size_t n =
        list && json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *cs = json_object_array_get_idx(list, i);
        const char *reason = member_string(json_get(cs, "state.waiting"), "reason");
        if (failing_reason(reason)) {
            return reason;
        }
    }
    return NULL;
}

void status_count_pod(struct status_pods *p, struct json_object *pod)
{
    if (!pod || json_get(pod, "metadata.deletionTimestamp")) {
        return;
    }
    struct json_object *st = json_get(pod, "status");
    const char *phase = member_string(st, "phase");
    int ready = status_condition_is(json_get(st, "conditions"), "Ready", "True");
    p->total++;
    if (ready) {
        p->ready++;
    } else if (phase && strcmp(phase, "Running") == 0) {
        p->running_unready++;
    }
    const char *why = NULL;
    if (phase && strcmp(phase, "Failed") == 0) {
        why = "Failed";
    } else {
        why = waiting_failure(json_get(st, "initContainerStatuses"));
        if (!why) {
            why = waiting_failure(json_get(st, "containerStatuses"));
        }
    }
    if (why) {
        if (p->failing == 0) {
            const char *name = member_string(json_get(pod, "metadata"), "name");
            snprintf(p->failing_detail, sizeof(p->failing_detail), "pod %s: %s", name ? name : "?",
                     why);
        }
        p->failing++;
    }
}

/* ---- whole statuses ---- */

static int set_cond(struct json_object *status, const char *type, const char *st,
                    const char *reason, const char *message, int64_t gen, const char *now,
                    int *changed)
{
    struct status_condition c = {.type = type,
                                 .status = st,
                                 .reason = reason,
                                 .message = message,
                                 .observed_generation = gen};
    return track(status_set_condition(status, &c, now), changed);
}

int status_set_problem(struct json_object *status, int64_t generation, const char *reason,
                       const char *message, const char *now)
{
    int changed = 0, rc;
    if (!status || !json_object_is_type(status, json_type_object)) {
        return -EINVAL;
    }
    if ((rc = track(set_int64(status, "observedGeneration", generation), &changed)) != 0 ||
        (rc = set_cond(status, COND_READY, "False", reason, message, generation, now, &changed)) !=
            0 ||
        (rc = set_cond(status, COND_PROGRESSING, "False", reason, message, generation, now,
                       &changed)) != 0 ||
        (rc = set_cond(status, COND_DEGRADED, "True", reason, message, generation, now,
                       &changed)) != 0) {
        return rc;
    }
    return changed;
}

/* Appends "sep + formatted text" to a message buffer (silently truncated at its cap). */
static void msg_add(struct buf *b, const char *fmt, ...) TANDEM_PRINTF(2, 3);
static void msg_add(struct buf *b, const char *fmt, ...)
{
    char part[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(part, sizeof(part), fmt, ap);
    va_end(ap);
    if (b->len && buf_appends(b, ", ") != 0) {
        return;
    }
    (void)buf_appends(b, part);
}

/* The rollout progress of one workload, for the Progressing message. */
static void rollout_detail(struct buf *b, const struct status_workload *w)
{
    if (!w->exists) {
        msg_add(b, "%s: creating", w->name);
    } else if (w->observed_generation < w->generation) {
        msg_add(b, "%s: waiting for the %s controller", w->name,
                w->daemon ? "DaemonSet" : "Deployment");
    } else if (w->updated < w->replicas) {
        msg_add(b, "%s: %d/%d updated", w->name, w->updated, w->replicas);
    } else if (w->status_replicas > w->updated) {
        int old = w->status_replicas - w->updated;
        msg_add(b, "%s: %d old pod%s terminating", w->name, old, old == 1 ? "" : "s");
    }
}

/* Degraded from an error, a stuck rollout, failing pods or lost pods; else False/AsExpected. */
static int set_degraded(struct json_object *status, const struct status_workload *w, int n,
                        const struct status_pods *pods, const char *error_reason,
                        const char *error_message, int64_t gen, const char *now, int *changed)
{
    struct buf msg;
    buf_init(&msg, STATUS_MESSAGE_MAX);
    const char *reason = REASON_AS_EXPECTED;
    if (error_reason) {
        reason = error_reason;
        msg_add(&msg, "%s", error_message ? error_message : "reconcile failed");
    } else {
        for (int i = 0; i < n; i++) {
            if (w[i].exists && w[i].deadline_exceeded) {
                reason = REASON_DEADLINE_EXCEEDED;
                msg_add(&msg, "%s: rollout exceeded its progress deadline", w[i].name);
            }
        }
        if (!msg.len && pods->failing > 0) {
            reason = REASON_PODS_FAILING;
            msg_add(&msg, "%d pod%s failing (%s)", pods->failing, pods->failing == 1 ? "" : "s",
                    pods->failing_detail);
        }
        /* fewer ready pods than wanted although no rollout is under way: lost pods */
        for (int i = 0; !msg.len && i < n; i++) {
            if (w[i].exists && !status_workload_rolling(&w[i]) && w[i].ready < w[i].replicas) {
                reason = REASON_UNAVAILABLE;
                for (int j = i; j < n; j++) {
                    if (w[j].exists && !status_workload_rolling(&w[j]) &&
                        w[j].ready < w[j].replicas) {
                        msg_add(&msg, "%s: %d/%d ready", w[j].name, w[j].ready, w[j].replicas);
                    }
                }
            }
        }
    }
    int degraded = strcmp(reason, REASON_AS_EXPECTED) != 0;
    int rc = set_cond(status, COND_DEGRADED, degraded ? "True" : "False", reason,
                      msg.len ? buf_cstr(&msg) : "no problems observed", gen, now, changed);
    buf_free(&msg);
    return rc;
}

/* Progressing=False/ProgressDeadlineExceeded when a Deployment gave up; True/RollingOut while any
 * workload rolls out; else False/RolloutComplete. */
static int set_progressing(struct json_object *status, const struct status_workload *w, int n,
                           int64_t gen, const char *now, int *changed)
{
    struct buf msg;
    buf_init(&msg, STATUS_MESSAGE_MAX);
    for (int i = 0; i < n; i++) {
        if (w[i].exists && w[i].deadline_exceeded) {
            msg_add(&msg, "%s: rollout exceeded its progress deadline", w[i].name);
        }
    }
    int rc;
    if (msg.len) {
        rc = set_cond(status, COND_PROGRESSING, "False", REASON_DEADLINE_EXCEEDED, buf_cstr(&msg),
                      gen, now, changed);
        buf_free(&msg);
        return rc;
    }
    for (int i = 0; i < n; i++) {
        if (status_workload_rolling(&w[i])) {
            rollout_detail(&msg, &w[i]);
        }
    }
    rc = msg.len ? set_cond(status, COND_PROGRESSING, "True", REASON_ROLLING_OUT, buf_cstr(&msg),
                            gen, now, changed)
                 : set_cond(status, COND_PROGRESSING, "False", REASON_ROLLOUT_COMPLETE,
                            "every workload runs the current spec", gen, now, changed);
    buf_free(&msg);
    return rc;
}

int status_pool_compute(struct json_object *status, const struct status_pool_input *in,
                        const char *now)
{
    int changed = 0, rc;
    if (!status || !json_object_is_type(status, json_type_object)) {
        return -EINVAL;
    }
    if ((rc = track(set_int64(status, "observedGeneration", in->generation), &changed)) != 0 ||
        (rc = track(set_int64(status, "totalPods", in->pods.total), &changed)) != 0 ||
        (rc = track(set_int64(status, "availablePods", in->pods.ready), &changed)) != 0 ||
        (rc = track(set_int64(status, "unhealthyPods", in->pods.running_unready), &changed)) != 0) {
        return rc;
    }
    const struct status_workload *epp = &in->epp;
    char msg[STATUS_MESSAGE_MAX];
    int epp_ok = epp->exists && epp->available > 0 && epp->available >= epp->replicas;
    if (!epp_ok) {
        snprintf(msg, sizeof(msg), "endpoint picker %d/%d available", epp->available,
                 epp->replicas);
        rc = set_cond(status, COND_READY, "False", REASON_EPP_UNAVAILABLE, msg, in->generation, now,
                      &changed);
    } else if (in->pods.ready == 0) {
        snprintf(msg, sizeof(msg), "0 of %d selected pods are ready", in->pods.total);
        rc = set_cond(status, COND_READY, "False", REASON_UNAVAILABLE, msg, in->generation, now,
                      &changed);
    } else {
        snprintf(msg, sizeof(msg), "%d/%d pods ready, endpoint picker %d/%d available",
                 in->pods.ready, in->pods.total, epp->available, epp->replicas);
        rc = set_cond(status, COND_READY, "True", REASON_AVAILABLE, msg, in->generation, now,
                      &changed);
    }
    if (rc != 0 || (rc = set_progressing(status, epp, 1, in->generation, now, &changed)) != 0 ||
        (rc = set_degraded(status, epp, 1, &in->pods, in->error_reason, in->error_message,
                           in->generation, now, &changed)) != 0) {
        return rc;
    }
    return changed;
}

/* deploymentStatus as a new object. "workers" is ready/desired per workload for kubectl's
 * default columns: "3/3" for one workload, "prefill 2/2, decode 3/3" for several. */
static struct json_object *deployment_status(const struct status_model_input *in)
{
    struct json_object *ds = json_object_new_object();
    int desired = 0, updated = 0, failed = !ds;
    struct buf workers;
    buf_init(&workers, STATUS_MESSAGE_MAX);
    for (int i = 0; i < in->n; i++) {
        const struct status_workload *w = &in->w[i];
        int want = w->exists ? w->replicas : 0;
        if (in->n == 1) {
            msg_add(&workers, "%d/%d", w->ready, want);
        } else {
            msg_add(&workers, "%s %d/%d", w->name, w->ready, want);
        }
    }
    struct json_object *ws =
        failed || buf_error(&workers) ? NULL : json_object_new_string(buf_cstr(&workers));
    buf_free(&workers);
    if (!ws || json_object_object_add(ds, "workers", ws) != 0) {
        json_object_put(ws);
        failed = 1;
    }
    for (int i = 0; i < in->n && !failed; i++) {
        const char *key = in->roles[i] == ROLE_PREFILL  ? "prefillWorkersReady"
                          : in->roles[i] == ROLE_DECODE ? "decodeWorkersReady"
                                                        : "unifiedWorkersReady";
        failed = set_int64(ds, key, in->w[i].ready) < 0;
        if (in->w[i].exists) {
            desired += in->w[i].replicas;
            updated += in->w[i].updated;
        }
    }
    if (failed || set_int64(ds, "desiredPods", desired) < 0 ||
        set_int64(ds, "updatedPods", updated) < 0 ||
        set_int64(ds, "totalPods", in->pods.total) < 0) {
        json_object_put(ds);
        return NULL;
    }
    return ds;
}

int status_model_compute(struct json_object *status, const struct status_model_input *in,
                         const char *now)
{
    int changed = 0, rc;
    if (!status || !json_object_is_type(status, json_type_object) || in->n < 0 || in->n > 3) {
        return -EINVAL;
    }
    if ((rc = track(set_int64(status, "observedGeneration", in->generation), &changed)) != 0) {
        return rc;
    }
    struct json_object *ds = deployment_status(in);
    if (!ds) {
        return -ENOMEM;
    }
    if (status_differs(json_get(status, "deploymentStatus"), ds)) {
        if (json_object_object_add(status, "deploymentStatus", ds) != 0) {
            json_object_put(ds);
            return -ENOMEM;
        }
        changed = 1;
    } else {
        json_object_put(ds);
    }

    struct buf msg;
    buf_init(&msg, STATUS_MESSAGE_MAX);
    int all_ready = 1;
    for (int i = 0; i < in->n; i++) {
        const struct status_workload *w = &in->w[i];
        if (!status_workload_ready(w)) {
            all_ready = 0;
        }
        msg_add(&msg, "%s %d/%d ready%s", w->name, w->ready, w->exists ? w->replicas : 0,
                w->daemon && w->exists && w->replicas == 0 &&
                        w->observed_generation >= w->generation
                    ? " (no node matches deployment.daemonSet.nodeSelector)"
                    : "");
    }
    rc = all_ready ? set_cond(status, COND_READY, "True", REASON_AVAILABLE, buf_cstr(&msg),
                              in->generation, now, &changed)
                   : set_cond(status, COND_READY, "False", REASON_UNAVAILABLE, buf_cstr(&msg),
                              in->generation, now, &changed);
    buf_free(&msg);
    if (rc != 0 ||
        (rc = set_progressing(status, in->w, in->n, in->generation, now, &changed)) != 0 ||
        (rc = set_degraded(status, in->w, in->n, &in->pods, in->error_reason, in->error_message,
                           in->generation, now, &changed)) != 0) {
        return rc;
    }
    return changed;
}
