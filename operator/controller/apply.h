/*
 * Create-or-update of the objects the operator owns (the context is reconcile.h's).
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
#include "operator/controller/reconcile.h"

/* APPLY_EOWNED (lib/err.h): the name is taken by an object another owner controls. */

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
 * done. Returns 0; KUBE_EEXISTS (created meanwhile) or KUBE_ECONFLICT (changed meanwhile), both
 * stale (reconcile_requeue_stale); APPLY_EOWNED (err->message says who owns it); another KUBE_E*
 * or a negative errno.
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
 * cache: reconcile_requeue_stale), another KUBE_E* or negative errno.
 */
int apply_status(struct reconcile_ctx *ctx, const struct kube_resource *r, struct json_object *live,
                 struct json_object *status, int *written, struct kube_error *err);

#endif /* TANDEM_OPERATOR_APPLY_H */
