/*
 * Create-or-update of the objects the operator owns, and the context every reconciler runs with.
 *
 * Strategy (docs/operations.md, "How objects are written"): read the live object from the
 * informer cache; missing → POST; present and desired_needs_update() → PUT a merge of the two
 * (the live object with the operator's fields overlaid, resourceVersion from the live object, so
 * a concurrent change gets 409 and the key is requeued); otherwise nothing is sent. The merge
 * keeps what others set: fields the desired object leaves out (spec.replicas when an HPA scales
 * the Deployment, server defaults, annotations such as kubectl's restartedAt, other labels) stay
 * as they are; arrays and the maps the operator owns whole (selectors, nodeSelector, ConfigMap
 * data, resource limits/requests) are replaced. An object of the same name controlled by another
 * owner is never taken over (APPLY_EOWNED).
 *
 * Server-side apply would do the same with less code here, but it needs a GET or a PATCH per
 * object per reconcile to know whether anything would change; comparing with the cache keeps a
 * steady-state reconcile at zero requests.
 */
#ifndef TANDEM_OPERATOR_APPLY_H
#define TANDEM_OPERATOR_APPLY_H

#include <stddef.h>
#include <time.h>

#include <json-c/json.h>

#include "lib/kube/client.h"
#include "lib/kube/events.h"
#include "operator/controller/desired.h"
#include "operator/controller/cache.h"

/* APPLY_EOWNED (lib/err.h): the name is taken by an object another owner controls. */

/* Everything a reconcile needs. The pointers are borrowed; the counters are updated with atomic
 * adds (several workers share one context). */
struct reconcile_ctx {
    struct kube_client *client;
    struct opctl_cache *cache;
    struct kube_event_recorder *events; /* NULL: no Events */
    struct desired_opts opts;           /* images */
    time_t (*now)(void);                /* NULL → time(NULL); tests pin the clock */
    /* Writes this context made (tests and logs). */
    unsigned long created, updated, deleted, status_writes;
};

/* What a reconcile asks of its queue besides success or error (controller-runtime's Result). */
struct reconcile_result {
    int requeue;           /* requeue through the rate limiter (the cache was stale) */
    long requeue_after_ms; /* > 0: look again after this long (waiting for something unwatched) */
};

/* The current time as the context sees it. */
time_t reconcile_now(const struct reconcile_ctx *ctx);

/* Records an Event about obj when ctx->events is set (best effort; a full queue drops it). */
void reconcile_event(struct reconcile_ctx *ctx, struct json_object *obj, const char *type,
                     const char *reason, const char *fmt, ...) TANDEM_PRINTF(5, 6);

enum apply_action {
    APPLY_NONE,     /* live already has everything desired says */
    APPLY_CREATE,   /* no live object */
    APPLY_UPDATE,   /* PUT apply_merge(live, desired) */
    APPLY_CONFLICT, /* live is controlled by another owner: leave it alone */
};

/* What apply_object would do, from the live object (NULL = absent) and the desired one. Pure. */
enum apply_action apply_decide(struct json_object *live, struct json_object *desired);

/*
 * The object to PUT (a new reference), or NULL on OOM: a deep copy of live with desired's labels
 * and annotations set, its ownerReferences in place of live's controller reference (other
 * references kept), and every other top-level field of desired merged in: objects member by
 * member, arrays, scalars and the owned maps replaced. metadata.resourceVersion is live's. Pure.
 */
struct json_object *apply_merge(struct json_object *live, struct json_object *desired);

enum apply_result { APPLY_UNCHANGED, APPLY_CREATED, APPLY_UPDATED };

/*
 * Makes the cluster hold desired (an object from desired.h with apiVersion, kind and
 * metadata.name/namespace). *live_out (may be NULL) gets the object as it now is (the server's
 * answer after a write, else the cached one; a new reference). *res (may be NULL) says what was
 * done. Returns 0; KUBE_EEXISTS (created meanwhile: requeue), KUBE_ECONFLICT (changed meanwhile:
 * requeue), APPLY_EOWNED (err->message says who owns it), another KUBE_E* or negative errno.
 * Writes are counted in ctx and reported as Events (Created / Updated) on owner (may be NULL).
 */
int apply_object(struct reconcile_ctx *ctx, struct json_object *owner, struct json_object *desired,
                 struct json_object **live_out, enum apply_result *res, struct kube_error *err);

/*
 * Deletes the cached objects of a kind in ns that the owner (by uid) controls and whose names are
 * not in keep (nkeep names): what a spec change no longer wants (a prefill Deployment after a
 * switch to Unified, HPAs after autoscaling is removed, the generated ConfigMap after a switch to
 * configMapRef). Each DELETE carries a uid precondition; 404 is success. *deleted (may be NULL)
 * gets the count. 0 or the first error.
 */
int apply_delete_unwanted(struct reconcile_ctx *ctx, struct json_object *owner,
                          enum opctl_kind kind, const char *ns, const char *owner_uid,
                          const char *const *keep, size_t nkeep, int *deleted,
                          struct kube_error *err);

/*
 * Writes status (a whole status object) through the /status subresource of live (the object as
 * cached: its resourceVersion guards the write) when status_differs(live's status, status);
 * otherwise sends nothing. *written (may be NULL) says whether it wrote. 0, KUBE_ECONFLICT (stale
 * cache: requeue), another KUBE_E* or negative errno.
 */
int apply_status(struct reconcile_ctx *ctx, const struct kube_resource *r, struct json_object *live,
                 struct json_object *status, int *written, struct kube_error *err);

/* A deep copy of live's status, or a new empty object (NULL on OOM). */
struct json_object *reconcile_status_copy(struct json_object *live);

/*
 * Reports a problem that stops the reconcile (status_set_problem: Ready=False, Progressing=False,
 * Degraded=True with reason and message) through apply_status, and a Warning Event when the
 * Ready reason changes to it. Returns as apply_status.
 */
int reconcile_set_problem(struct reconcile_ctx *ctx, const struct kube_resource *r,
                          struct json_object *live, const char *reason, const char *message,
                          struct kube_error *err);

/* 1 for the return codes that mean "the cache was stale, try again" (conflict, already exists). */
int apply_is_stale(int rc);

#endif /* TANDEM_OPERATOR_APPLY_H */
