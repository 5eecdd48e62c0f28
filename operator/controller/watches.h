/*
 * Which cache events wake which controller, as data, after controller-runtime's pkg/handler. Each
 * row of the watch table reads "events of this kind, when the predicate holds, enqueue the keys
 * the map function names for this controller":
 *
 *   For(kind)       the object's own key (handler.EnqueueRequestForObject);
 *   Owns(kind)      the key of its controller owner of the controller's kind
 *                   (handler.EnqueueRequestForOwner with OnlyControllerOwner);
 *   Watches(kind)   keys computed from the object (handler.EnqueueRequestsFromMapFunc): the pool
 *                   a model names, the pool and model a pod is labelled with, the models of a pool
 *                   (read from the cache).
 *
 * Predicates drop what a controller does not care about (controller-runtime's predicate
 * package): a status-only update of a pool or model, a pod update that changes nothing the
 * status counts, a pool update that leaves its spec (generation) as it was for its models.
 * A resync (an update with the same resourceVersion) passes. The manager hands every cache event
 * to watches_dispatch and adds what comes out to the controller's work queue (which
 * de-duplicates: a key may come out more than once).
 */
#ifndef TANDEM_OPERATOR_WATCHES_H
#define TANDEM_OPERATOR_WATCHES_H

#include <json-c/json.h>

#include "operator/controller/cache.h"

/* The controllers, each with its own work queue (manager.c names them). */
enum opctl_controller { OPCTL_CTL_POOL, OPCTL_CTL_MODEL, OPCTL_NCONTROLLERS };

/* Receives one key ("namespace/name") for a controller's queue. */
typedef void (*watch_add_fn)(void *ud, enum opctl_controller ctl, const char *key);

/*
 * Maps the event (kind, ev, old_obj, obj: as opctl_event_fn gets them) through every row of the
 * watch table for that kind: add(ud, controller, key) once per key. cache is what map functions
 * that look things up read (the models of a pool); NULL: they find nothing. obj NULL: nothing.
 * Runs on the informer's thread.
 */
void watches_dispatch(struct opctl_cache *cache, enum opctl_kind kind, enum opctl_event ev,
                      struct json_object *old_obj, struct json_object *obj, watch_add_fn add,
                      void *ud);

#endif /* TANDEM_OPERATOR_WATCHES_H */
