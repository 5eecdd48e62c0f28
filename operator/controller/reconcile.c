/*
 * The helpers every reconciler shares (see reconcile.h): the stale-cache rule, the clock, Events
 * and problem status.
 */
#include "operator/controller/reconcile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/json.h"
#include "lib/log.h"
#include "operator/controller/apply.h"
#include "operator/controller/status.h"

int reconcile_is_stale(int rc)
{
    return rc == KUBE_ECONFLICT || rc == KUBE_EEXISTS;
}

int reconcile_requeue_stale(int rc, struct reconcile_result *res)
{
    if (!reconcile_is_stale(rc)) {
        return rc;
    }
    res->requeue = 1;
    return 0;
}

const char *reconcile_write_error(int rc, const struct kube_error *kerr, const char *what,
                                  char *msg, size_t msglen)
{
    if (rc == APPLY_EOWNED) {
        tandem_set_err(msg, msglen, "%s", kerr->message);
        return REASON_OWNERSHIP_CONFLICT;
    }
    tandem_set_err(msg, msglen, "%s: %s%s%s", what, tandem_strerror(rc),
                   kerr->message[0] ? ": " : "", kerr->message);
    return REASON_RECONCILE_ERROR;
}

time_t reconcile_now(const struct reconcile_ctx *ctx)
{
    return ctx->now ? ctx->now() : time(NULL);
}

void reconcile_event(struct reconcile_ctx *ctx, struct json_object *obj, const char *type,
                     const char *reason, const char *fmt, ...)
{
    if (!ctx->events || !obj) {
        return;
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int rc = kube_event_record(ctx->events, obj, type, reason, "%s", msg);
    if (rc != 0) {
        log_debug("event %s dropped: %s", reason, tandem_strerror(rc));
    }
}

static const char *str_at(struct json_object *o, const char *path)
{
    const char *s = NULL;
    return json_get_string(o, path, &s, NULL, 0) == 0 ? s : NULL;
}

struct json_object *reconcile_status_copy(struct json_object *live)
{
    struct json_object *st = json_get(live, "status"), *copy = NULL;
    if (st && json_object_is_type(st, json_type_object)) {
        return json_object_deep_copy(st, &copy, NULL) == 0 ? copy : NULL;
    }
    return json_object_new_object();
}

int reconcile_set_problem(struct reconcile_ctx *ctx, const struct kube_resource *r,
                          struct json_object *live, const char *reason, const char *message,
                          struct kube_error *err)
{
    char now[STATUS_TIME_LEN];
    int64_t gen = 0;
    json_opt_int64(live, "metadata.generation", 0, &gen, NULL, 0);
    struct json_object *status = reconcile_status_copy(live);
    if (!status) {
        return -ENOMEM;
    }
    const char *old =
        str_at(status_find_condition(json_get(status, "conditions"), COND_READY), "reason");
    int changed_reason = !old || strcmp(old, reason) != 0;
    status_format_time(reconcile_now(ctx), now, sizeof(now));
    int written = 0;
    int rc = status_set_problem(status, gen, reason, message, now);
    if (rc >= 0) {
        rc = apply_status(ctx, r, live, status, &written, err);
    }
    json_object_put(status);
    if (rc == 0 && written && changed_reason) {
        const char *ns = str_at(live, "metadata.namespace"), *name = str_at(live, "metadata.name");
        log_warn("%s %s/%s: %s: %s", r->kind, ns ? ns : "", name ? name : "", reason, message);
        reconcile_event(ctx, live, "Warning", reason, "%s", message);
    }
    return rc;
}
