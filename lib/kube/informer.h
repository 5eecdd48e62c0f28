/*
 * Informer: list-then-watch of one resource type with a local cache, client-go's Reflector +
 * Indexer + event handlers in one object (k8s.io/client-go/tools/cache).
 *
 * Its thread lists (pages of 500 through kube_list_all; resourceVersion "0" the first time, the
 * last synced RV afterwards, "" after an Expired error), replaces the cache (handlers see adds and
 * updates for objects whose resourceVersion changed and deletes for vanished ones), then watches
 * from the list's RV with allowWatchBookmarks and a timeoutSeconds random in [300, 600). Every
 * event advances the RV; BOOKMARKs only advance it. A watch that ends cleanly is re-opened from
 * the last RV; connection errors and 429 re-watch after a backoff without relisting; an ERROR 410
 * event (or a 410 answer) relists with RV ""; other errors relist after the backoff. The backoff
 * is client-go's: 800 ms doubling to 30 s, jitter 1.0, reset after 2 minutes without one.
 * A watch that ends within 1 s without an event counts as an error ("very short watch").
 *
 * The list is processed page by page as the pages arrive (no list-sized tree is built) and
 * malloc_trim(0) gives the freed pages back afterwards.
 *
 * Cache: keyed "namespace/name" ("name" for cluster-scoped objects), with an index by controller
 * owner uid (the ownerReference with controller: true) and optional indexes by label values. Each
 * object is stored as its compact JSON text (a json-c tree takes several times the text's size)
 * plus its namespace, labels, resourceVersion and controller uid for the indexes and filters; an
 * optional transform (client-go's SetTransform) trims objects before they are cached. Every object
 * handed to the caller by the getters is a new tree parsed from that text, owned by the caller
 * (json-c reference counts are not atomic, so nothing is shared across threads).
 *
 * Handlers run on the informer's thread, in event order, never concurrently for one informer; the
 * objects they get are borrowed for the call and must not be modified (deep-copy to keep one). They
 * are parsed once per event (the old state of an update from the cache's text). A
 * handler may call the informer's getters. With resync_seconds > 0 every cached object is
 * re-delivered as on_update(obj, obj) each period (the open watch is re-opened from the last RV
 * to get the thread back; nothing is lost).
 */
#ifndef TANDEM_LIB_KUBE_INFORMER_H
#define TANDEM_LIB_KUBE_INFORMER_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/kube/client.h"

struct kube_informer_handlers {
    void (*on_add)(void *ud, struct json_object *obj);
    void (*on_update)(void *ud, struct json_object *old_obj, struct json_object *new_obj);
    void (*on_delete)(void *ud, struct json_object *obj /* last known state */);
    void *ud;
};

struct kube_informer;

/* A new informer (not started). c and r must outlive it; ns NULL or "" watches all namespaces;
 * label_selector (NULL = everything) is sent to the server; resync_seconds 0 = no resync; h may
 * be NULL (cache only) and is copied. NULL on OOM. */
struct kube_informer *kube_informer_new(struct kube_client *c, const struct kube_resource *r,
                                        const char *ns, const char *label_selector,
                                        long resync_seconds,
                                        const struct kube_informer_handlers *h);

/* Indexes the cache by the value of label key label_key (before start). -EBUSY once started,
 * -ENOMEM. kube_informer_by_label works without an index too, by scanning. */
int kube_informer_add_label_index(struct kube_informer *inf, const char *label_key);

/* Called on the informer thread for every listed or watched object (BOOKMARK and ERROR events
 * excepted) before it is cached or handed to the handlers; it may modify obj in place, e.g. drop
 * fields nobody reads. Everything the informer reports then reflects the transformed object. */
typedef void (*kube_informer_transform_fn)(void *ud, struct json_object *obj);

/* Installs a transform (NULL removes it) before start: 0, or -EBUSY once started. */
int kube_informer_set_transform(struct kube_informer *inf, kube_informer_transform_fn fn, void *ud);

/* A transform that removes metadata.managedFields (often the largest part of an object; a PUT
 * body without it leaves the server's managedFields as they are). ud is unused. */
void kube_informer_strip_managed_fields(void *ud, struct json_object *obj);

/* Replaces the reflector's backoff (800 ms doubling to 30 s) before start, e.g. for tests: -EBUSY
 * once started, -EINVAL unless 0 < initial_ms <= cap_ms. */
int kube_informer_set_backoff(struct kube_informer *inf, long initial_ms, long cap_ms);

/* Spawns the informer thread (and a resync timer thread when resync_seconds > 0). -EBUSY when
 * already started, or a negative errno from pthread_create. */
int kube_informer_start(struct kube_informer *inf);
/* Stops the threads and joins them: an open watch is abandoned within ~200 ms (a list in flight
 * finishes first, bounded by the client's timeout). No handler runs after it returns. Idempotent.
 * Not from a handler (it would join its own thread). */
void kube_informer_stop(struct kube_informer *inf);
/* Stops it if needed and frees it (and the cache). NULL allowed. */
void kube_informer_free(struct kube_informer *inf);

/* 1 once the first list has been delivered to the cache and the handlers. */
int kube_informer_has_synced(struct kube_informer *inf);
/* Waits for has_synced: 0, -ETIMEDOUT after timeout_ms (-1 = forever), -ECANCELED when the
 * informer is stopped first. */
int kube_informer_wait_synced(struct kube_informer *inf, long timeout_ms);
/* The resourceVersion the informer has seen last (a malloc'd copy; "" before the first list), or
 * NULL on OOM. */
char *kube_informer_last_resource_version(struct kube_informer *inf);

/* A new copy of the cached object ns/name (ns NULL or "" for cluster-scoped; the caller puts it),
 * or NULL. */
struct json_object *kube_informer_get(struct kube_informer *inf, const char *ns, const char *name);

/* Cached objects in namespace ns (NULL = all) matching label_selector (NULL or "" = all; the
 * labels.Parse syntax: k=v, k==v, k!=v, k in (a,b), k notin (a), k, !k, k>1, k<1, joined by ','),
 * sorted by key. *items is a new array of deep copies: the caller puts each and frees the array
 * (*items is NULL when *n is 0). 0, -EINVAL for a bad selector, -ENOMEM. */
int kube_informer_list(struct kube_informer *inf, const char *ns, const char *label_selector,
                       struct json_object ***items, size_t *n);

/* Cached objects whose label label_key equals value, sorted by key (uses the label index when
 * there is one). Ownership as for kube_informer_list. */
int kube_informer_by_label(struct kube_informer *inf, const char *label_key, const char *value,
                           struct json_object ***items, size_t *n);

/* Cached objects whose controller ownerReference (controller: true) has this uid, sorted by key.
 * Ownership as for kube_informer_list. */
int kube_informer_by_owner(struct kube_informer *inf, const char *owner_uid,
                           struct json_object ***items, size_t *n);

/* Number of cached objects. */
size_t kube_informer_count(struct kube_informer *inf);

/* The cache key of obj ("ns/name" or "name") into out; -EINVAL when it has no metadata.name,
 * -ENOSPC when it does not fit. Handlers use it to enqueue keys. */
int kube_object_key(struct json_object *obj, char *out, size_t outlen);

/* Whether labels (a JSON object of string values, or NULL) match selector (labels.Parse syntax).
 * 1 match, 0 no match, -EINVAL for a malformed selector. */
int kube_label_selector_match(const char *selector, struct json_object *labels);

#endif /* TANDEM_LIB_KUBE_INFORMER_H */
