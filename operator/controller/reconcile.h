/*
 * What every reconciler shares, after controller-runtime's reconcile package: the context it runs
 * with, the result it hands its work queue, the one rule for a stale cache, and the helpers for
 * time, Events and problem status. reconcile_pool.h and reconcile_model.h are the reconcilers;
 * apply.h is how they write; manager.c runs them.
 */
#ifndef TANDEM_OPERATOR_RECONCILE_H
#define TANDEM_OPERATOR_RECONCILE_H

#include <time.h>

#include <json-c/json.h>

#include "lib/common.h"
#include "lib/kube/client.h"
#include "lib/kube/events.h"
#include "operator/controller/cache.h"
#include "operator/controller/desired.h"

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

/*
 * A reconciler: level-triggered and idempotent, for the object ns/name of its kind (read from
 * ctx->cache). Clears *res first. 0: done (res says whether to requeue); a negative value: failed
 * (the manager requeues with backoff and logs it).
 */
typedef int (*reconcile_fn)(struct reconcile_ctx *ctx, const char *ns, const char *name,
                            struct reconcile_result *res);

/*
 * The stale-cache rule, spelled once. A write the server refused because the cache lagged behind
 * it (KUBE_ECONFLICT: changed meanwhile; KUBE_EEXISTS: created meanwhile) is no failure: the key
 * goes back through the rate limiter and the next reconcile reads the caught-up cache, with no
 * error logged and no status written about it. Returns 0 with res->requeue set for those codes,
 * rc unchanged otherwise: `return reconcile_requeue_stale(rc, res);`.
 */
int reconcile_requeue_stale(int rc, struct reconcile_result *res);

/* 1 for the codes reconcile_requeue_stale turns into a requeue. */
int reconcile_is_stale(int rc);

/*
 * The status reason and message for a write that failed with rc (kerr: what the server or
 * apply_object said): REASON_OWNERSHIP_CONFLICT with kerr's message (who owns the object) for
 * APPLY_EOWNED, else REASON_RECONCILE_ERROR with "<what>: <tandem_strerror(rc)>[: <message>]".
 * The message goes into msg (cut to msglen); the reason is returned.
 */
const char *reconcile_write_error(int rc, const struct kube_error *kerr, const char *what,
                                  char *msg, size_t msglen);

/* The current time as the context sees it. */
time_t reconcile_now(const struct reconcile_ctx *ctx);

/* Records an Event about obj when ctx->events is set (best effort; a full queue drops it). */
void reconcile_event(struct reconcile_ctx *ctx, struct json_object *obj, const char *type,
                     const char *reason, const char *fmt, ...) TANDEM_PRINTF(5, 6);

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

#endif /* TANDEM_OPERATOR_RECONCILE_H */
