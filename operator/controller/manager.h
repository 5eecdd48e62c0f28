/*
 * The controller manager of tandem-operator (controller-runtime's Manager in C): the informer
 * cache the reconcilers read, two rate-limited work queues ("inferencepool", "inferencemodel")
 * fed by informer events, worker threads that run the reconcilers, leader election on a Lease,
 * and the HTTP endpoints /metrics (metrics address) and /healthz, /readyz (health address).
 *
 * Lifecycle (manager_new → manager_run → manager_free): informers start at once (followers keep
 * warm caches); /readyz turns 200 when every informer has synced; only the leader runs workers;
 * SIGTERM drains the queues (a reconcile in flight finishes), releases the Lease, stops the
 * informers and returns 0; losing the Lease stops the same way and returns 1 (the process exits
 * non-zero and restarts, as with controller-runtime). docs/operations.md describes flags, metrics
 * and behaviour.
 *
 * The cache (struct opctl_cache) is usable on its own: the reconcile tests build one without the
 * rest of the manager.
 */
#ifndef TANDEM_OPERATOR_MANAGER_H
#define TANDEM_OPERATOR_MANAGER_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/kube/client.h"
#include "lib/kube/informer.h"

#define OPERATOR_NAME    "tandem-operator"
#define OPERATOR_VERSION "0.1.0"

/* The controllers (controller label of the metrics, work queue names). */
#define CONTROLLER_POOL  "inferencepool"
#define CONTROLLER_MODEL "inferencemodel"

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

/* ---- the manager ---- */

struct manager_options {
    const char *const *namespaces; /* watched namespaces; NULL/0 = all */
    size_t n_namespaces;
    int leader_elect; /* run the leader election (else lead at once) */
    const char *leader_election_namespace;
    const char *leader_election_id; /* Lease name */
    const char *identity;           /* NULL → "<$POD_NAME, else hostname>_<random uuid>" */
    long lease_duration_ms;         /* 0 → 15000 */
    long renew_deadline_ms;         /* 0 → 10000 */
    long retry_period_ms;           /* 0 → 2000 */
    const char *metrics_addr;       /* "host:port", ":port"; NULL, "" or "0" = off */
    const char *health_addr;        /* same for /healthz and /readyz */
    const char *agent_image;        /* NULL: desired.h's default */
    const char *epp_image;
    int workers;               /* per controller; 0 → 2 */
    long resync_s;             /* informer resync; 0 = off */
    long graceful_shutdown_ms; /* cap on draining the queues at SIGTERM; 0 → 30000 */
    /* Client for the Lease (NULL: the main client). A separate one keeps renewals out of the
     * reconcilers' connection pool and rate limit, and out of the main client's request stats
     * (tandem_operator_kube_requests_total then counts only informers, reconciles and Events). */
    struct kube_client *leader_client;
    /* Tests: when non-NULL, the bound ports are stored here once listening. */
    int *metrics_port_out;
    int *health_port_out;
};

struct manager;

/* A manager for client c (which must outlive it); o is copied, its strings and arrays are
 * borrowed and must outlive the manager. NULL on OOM or when the event loop cannot be made. */
struct manager *manager_new(struct kube_client *c, const struct manager_options *o);

/*
 * Runs the manager until SIGTERM/SIGINT or manager_stop (returns 0), or until the Lease is lost
 * or it cannot start (returns 1, the reason logged). Blocks the calling thread, which runs the
 * HTTP servers' libuv loop. Call once.
 */
int manager_run(struct manager *m);

/* Asks manager_run to shut down as on SIGTERM. From any thread, from manager_new until
 * manager_run has returned (a stop requested before manager_run starts takes effect at once). */
void manager_stop(struct manager *m);

/* Frees the manager (after manager_run returned, or if it never ran). NULL allowed. When the
 * workers outlived the graceful shutdown timeout the memory is left to the process exit. */
void manager_free(struct manager *m);

/*
 * Parses a bind address: ":8080" (every interface), "127.0.0.1:8080", "[::1]:8080", "8080".
 * "0" or "" means disabled (returns 1). host gets "0.0.0.0" / "::" / the literal. 0 ok, 1
 * disabled, -EINVAL malformed.
 */
int manager_parse_bind_address(const char *addr, char *host, size_t hostlen, int *port);

/* Parses a Go duration ("15s", "10m", "1h30m", "250ms", "0") into milliseconds (sub-millisecond
 * parts are rounded down). 0, or -EINVAL (malformed, negative, no unit, overflow). */
int manager_parse_duration(const char *s, long *ms);

/* Queue keys an informer event should enqueue, without cache lookups: the object's own key for
 * pools and models; the pool of a model (old and new poolRef); the controller owner of an owned
 * object; the model and pool named by a pod's labels. add(ud, controller, key) is called once per
 * key (controller is CONTROLLER_POOL or CONTROLLER_MODEL). Status-only updates of pools and
 * models (same generation, different resourceVersion) enqueue nothing. Returns 1 when the event is
 * a pool whose spec changed (or that was added/deleted): the caller also enqueues its models. */
int manager_map_event(enum opctl_kind kind, enum opctl_event ev, struct json_object *old_obj,
                      struct json_object *obj,
                      void (*add)(void *ud, const char *controller, const char *key), void *ud);

#endif /* TANDEM_OPERATOR_MANAGER_H */
