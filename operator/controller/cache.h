/*
 * The operator's informer cache (controller-runtime's cache, client-go's SharedInformer per kind):
 * one lib/kube informer per cached kind and watched namespace, read by the reconcilers and feeding
 * the manager's event handler. It knows nothing about queues or controllers: manager.c maps its
 * events to work (watches.h), as client-go keeps thread_safe_store.go apart from
 * shared_informer.go.
 *
 * Usable on its own: the reconcile tests build one without the rest of the manager.
 */
#ifndef TANDEM_OPERATOR_CACHE_H
#define TANDEM_OPERATOR_CACHE_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/kube/client.h"
#include "lib/kube/informer.h"

extern const struct kube_resource OPCTL_INFERENCEPOOLS, OPCTL_INFERENCEMODELS;

/* Every kind the operator caches. Owned kinds are listed with the label selector
 * app.kubernetes.io/managed-by=tandem-operator; pods too (their labels come from our templates). */
enum opctl_kind {
    OPCTL_POOL,
    OPCTL_MODEL,
    OPCTL_DEPLOYMENT,
    OPCTL_SERVICE,
    OPCTL_CONFIGMAP,
    OPCTL_SERVICEACCOUNT,
    OPCTL_ROLE,
    OPCTL_ROLEBINDING,
    OPCTL_HPA,
    OPCTL_DAEMONSET,
    OPCTL_POD,
    OPCTL_NKINDS
};

/* The resource of a kind. */
const struct kube_resource *opctl_resource(enum opctl_kind kind);
/* The kind of an object (by its apiVersion and kind): 0, or -ENOENT for kinds not cached. */
int opctl_kind_of(struct json_object *obj, enum opctl_kind *out);

enum opctl_event { OPCTL_ADDED, OPCTL_UPDATED, OPCTL_DELETED };

/* Informer event: old_obj is the previous state for OPCTL_UPDATED (NULL otherwise); obj the new
 * state, or the last known one for OPCTL_DELETED. Both borrowed for the call. Runs on the
 * informer's thread; must not block for long. */
typedef void (*opctl_event_fn)(void *ud, enum opctl_kind kind, enum opctl_event ev,
                               struct json_object *old_obj, struct json_object *obj);

struct opctl_cache;

/*
 * Informers for every kind in each namespace of namespaces (nns 0: one set for all namespaces).
 * c must outlive the cache; namespaces are copied; resync_s 0 = no resync; fn may be NULL.
 * NULL on OOM.
 */
struct opctl_cache *opctl_cache_new(struct kube_client *c, const char *const *namespaces,
                                    size_t nns, long resync_s, opctl_event_fn fn, void *ud);
/* Starts every informer: 0 or a negative errno. */
int opctl_cache_start(struct opctl_cache *cache);
/* Stops every informer (no event after it returns). Idempotent. */
void opctl_cache_stop(struct opctl_cache *cache);
/* Stops and frees. NULL allowed. */
void opctl_cache_free(struct opctl_cache *cache);
/* 1 when every informer has synced. */
int opctl_cache_synced(struct opctl_cache *cache);
/* Writes the plurals of the informers not synced yet ("inferencepools, pods") into out. */
void opctl_cache_unsynced(struct opctl_cache *cache, char *out, size_t outlen);
/* Waits for opctl_cache_synced: 0, -ETIMEDOUT (timeout_ms; -1 = forever), -ECANCELED. */
int opctl_cache_wait_synced(struct opctl_cache *cache, long timeout_ms);
/* 1 when objects of namespace ns are cached. */
int opctl_cache_watches(struct opctl_cache *cache, const char *ns);
/* Objects cached over all informers. */
size_t opctl_cache_count(struct opctl_cache *cache);

/* A deep copy of the cached object (new reference), or NULL when absent / not watched. */
struct json_object *opctl_cache_get(struct opctl_cache *cache, enum opctl_kind kind, const char *ns,
                                    const char *name);
/* Cached objects of a kind in namespace ns matching label_selector (NULL = all), sorted by key:
 * *items is a new array of new references (opctl_items_free). 0, -EINVAL, -ENOMEM. */
int opctl_cache_list(struct opctl_cache *cache, enum opctl_kind kind, const char *ns,
                     const char *label_selector, struct json_object ***items, size_t *n);
/* Cached objects of a kind in namespace ns whose controller ownerReference has owner_uid. */
int opctl_cache_owned(struct opctl_cache *cache, enum opctl_kind kind, const char *ns,
                      const char *owner_uid, struct json_object ***items, size_t *n);
/* Cached objects of a kind in namespace ns whose label key equals value (pods are indexed by
 * tandem.dev/pool and tandem.dev/model). Ownership as for opctl_cache_list. */
int opctl_cache_by_label(struct opctl_cache *cache, enum opctl_kind kind, const char *ns,
                         const char *key, const char *value, struct json_object ***items,
                         size_t *n);
/* Puts each item and frees the array. */
void opctl_items_free(struct json_object **items, size_t n);

#endif /* TANDEM_OPERATOR_CACHE_H */
