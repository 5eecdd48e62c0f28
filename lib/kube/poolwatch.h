/*
 * Following one InferencePool and its pods: a pool informer on the pool's namespace follows the
 * pool of the given name (lib/kube's informer has no field selector, so the name is filtered
 * here); its spec.selector becomes the label selector of a pod informer in the same namespace.
 * When the selector changes the pod informer is replaced: the caller is told to forget every pod
 * (on_reset) and the new informer's list adds them again. When the pool is deleted, or its
 * selector is invalid or empty, there is no pod informer and no pod. A pool that does not exist
 * yet is not an error: nothing is selected until it appears.
 *
 * The P/D sidecar's SSRF allowlist (agent/allowlist.c) and the EPP's data layer
 * (operator/epp/pool.c) are built on it.
 *
 * Pool groups, each with its version and the shape of spec.selector:
 *   tandem.dev                    v1alpha1  {matchLabels, matchExpressions} (a LabelSelector)
 *   inference.networking.k8s.io   v1        {matchLabels} only (GIE v1)
 *   inference.networking.x-k8s.io v1alpha2  a plain map of labels (GIE <= v0.5, llm-d's legacy)
 *
 * Threading: handlers run on the informers' threads: on_pool and on_reset on the pool thread,
 * on_pod and on_pod_delete on the pod thread, never two at once for one watch (a pod informer is
 * stopped, its thread joined, before on_reset). Objects are borrowed for the call.
 *
 * RBAC: get, list and watch on pods and on inferencepools of the pool group in the namespace.
 */
#ifndef TANDEM_LIB_KUBE_POOLWATCH_H
#define TANDEM_LIB_KUBE_POOLWATCH_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/kube/client.h"

#define KUBE_POOL_DEFAULT_GROUP   "tandem.dev"
#define KUBE_POOLWATCH_DEFAULT_MS 30000

struct kube_poolwatch_handlers {
    /* The pool now has this state (every add and update of it); NULL when it is gone. selector
     * is the label selector its pods are watched with, NULL when it has no usable one. */
    void (*on_pool)(void *ud, struct json_object *pool, const char *selector);
    /* The pod informer is being replaced or dropped: forget every pod reported so far. */
    void (*on_reset)(void *ud);
    void (*on_pod)(void *ud, struct json_object *pod); /* listed, added or changed */
    void (*on_pod_delete)(void *ud, struct json_object *pod);
    void *ud;
};

struct kube_poolwatch_config {
    struct kube_client *client; /* borrowed; must outlive the watch */
    const char *ns;             /* the pool's namespace (required) */
    const char *pool;           /* the pool's name (required) */
    const char *pool_group;     /* NULL → KUBE_POOL_DEFAULT_GROUP; see the table above */
    long sync_timeout_ms;       /* bound on the start; 0 → KUBE_POOLWATCH_DEFAULT_MS */
    const char *who;            /* log prefix, e.g. "allowlist" */
    /* Pod fields kept in the informer's cache besides metadata.{name,namespace,uid,
     * resourceVersion,labels} and status.{phase,podIP,podIPs}: NULL, or extra top-level names of
     * metadata and status to keep (e.g. "deletionTimestamp", "conditions"). */
    const char *const *extra_metadata;
    const char *const *extra_status;
    struct kube_poolwatch_handlers handlers;
};

struct kube_poolwatch;

/*
 * Checks that the pool group is known and that the pool and pod collections can be listed (an
 * RBAC or CRD problem is named at once), starts the informers and waits until the pool's cache
 * and then the pod cache have synced, sync_timeout_ms after the call at most. NULL with err set
 * on failure; the message names the resource that could not be listed or did not sync and,
 * where permissions may be the cause, what the ServiceAccount needs.
 */
struct kube_poolwatch *kube_poolwatch_new(const struct kube_poolwatch_config *c, char *err,
                                          size_t errlen);

/* Stops the informers (joins their threads; no handler runs after this) and frees. NULL ok. */
void kube_poolwatch_free(struct kube_poolwatch *pw);

/* Checks a pool reference: a known pool group (NULL → the default), a DNS-1123 label namespace
 * and a DNS-1123 subdomain name. 0, or -EINVAL with err saying which. */
int kube_pool_check_ref(const char *pool_group, const char *ns, const char *pool, char *err,
                        size_t errlen);

/* The resource of a pool group's InferencePools, or NULL for an unknown group (NULL → the
 * default). */
const struct kube_resource *kube_pool_resource(const char *pool_group);

/* The label selector (labels.Parse syntax, e.g. "app=a,role in (decode,prefill),!x") that the
 * spec.selector of pool, an InferencePool of pool_group (NULL → the default), stands for: terms
 * sorted by key, values sorted and unique; every key must be a valid label key and every value a
 * valid label value (nothing is escaped). *out is malloc'd (the caller frees it). 0; -EINVAL with
 * err naming the field for an unknown group, a missing, malformed or empty selector (an empty
 * selector would select every pod of the namespace), or matchExpressions where the group has
 * none; -ENOMEM. */
int kube_pool_selector(const char *pool_group, struct json_object *pool, char **out, char *err,
                       size_t errlen);

/* The pool's target port: spec.targetPort (tandem.dev), spec.targetPorts[0].number (v1) or
 * spec.targetPortNumber (v1alpha2); 0 when absent or out of range. */
int kube_pool_target_port(const char *pool_group, struct json_object *pool);

#endif /* TANDEM_LIB_KUBE_POOLWATCH_H */
