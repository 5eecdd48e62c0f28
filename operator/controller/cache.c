/*
 * The informer cache (see cache.h): a set of informers per watched namespace, each with a
 * transform that drops what the operator never reads, and reads that pick the set of a namespace.
 */
#include "operator/controller/cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/json.h"
#include "operator/controller/spec.h"

const struct kube_resource OPCTL_INFERENCEPOOLS = {SPEC_GROUP, SPEC_VERSION, "inferencepools",
                                                   SPEC_POOL_KIND, 1};
const struct kube_resource OPCTL_INFERENCEMODELS = {SPEC_GROUP, SPEC_VERSION, "inferencemodels",
                                                    SPEC_MODEL_KIND, 1};

#define OWNED_SELECTOR LABEL_MANAGED_BY "=" MANAGED_BY_OPERATOR

static const struct kube_resource *const kind_resources[OPCTL_NKINDS] = {
    [OPCTL_POOL] = &OPCTL_INFERENCEPOOLS,
    [OPCTL_MODEL] = &OPCTL_INFERENCEMODELS,
    [OPCTL_DEPLOYMENT] = &KUBE_DEPLOYMENTS,
    [OPCTL_SERVICE] = &KUBE_SERVICES,
    [OPCTL_CONFIGMAP] = &KUBE_CONFIGMAPS,
    [OPCTL_SERVICEACCOUNT] = &KUBE_SERVICEACCOUNTS,
    [OPCTL_ROLE] = &KUBE_ROLES,
    [OPCTL_ROLEBINDING] = &KUBE_ROLEBINDINGS,
    [OPCTL_HPA] = &KUBE_HPAS,
    [OPCTL_DAEMONSET] = &KUBE_DAEMONSETS,
    [OPCTL_POD] = &KUBE_PODS,
};

const struct kube_resource *opctl_resource(enum opctl_kind kind)
{
    TANDEM_ASSERT(kind >= 0 && kind < OPCTL_NKINDS);
    return kind_resources[kind];
}

static const char *member_string(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string)) {
        return NULL;
    }
    return json_object_get_string(v);
}

int opctl_kind_of(struct json_object *obj, enum opctl_kind *out)
{
    const char *kind = member_string(obj, "kind");
    const char *api_version = member_string(obj, "apiVersion");
    if (!kind || !api_version) {
        return -ENOENT;
    }
    for (int k = 0; k < OPCTL_NKINDS; k++) {
        const struct kube_resource *r = kind_resources[k];
        char want[128];
        if (r->group[0]) {
            snprintf(want, sizeof(want), "%s/%s", r->group, r->version);
        } else {
            snprintf(want, sizeof(want), "%s", r->version);
        }
        if (strcmp(kind, r->kind) == 0 && strcmp(api_version, want) == 0) {
            *out = (enum opctl_kind)k;
            return 0;
        }
    }
    return -ENOENT;
}

struct cache_adapter {
    struct opctl_cache *cache;
    enum opctl_kind kind;
};

struct cache_ns {
    char *ns; /* NULL: all namespaces */
    struct kube_informer *inf[OPCTL_NKINDS];
    struct cache_adapter ad[OPCTL_NKINDS];
};

struct opctl_cache {
    size_t nsets;
    struct cache_ns *sets;
    opctl_event_fn fn;
    void *ud;
};

static void ad_add(void *ud, struct json_object *obj)
{
    struct cache_adapter *ad = ud;
    if (ad->cache->fn) {
        ad->cache->fn(ad->cache->ud, ad->kind, OPCTL_ADDED, NULL, obj);
    }
}

static void ad_update(void *ud, struct json_object *old_obj, struct json_object *obj)
{
    struct cache_adapter *ad = ud;
    if (ad->cache->fn) {
        ad->cache->fn(ad->cache->ud, ad->kind, OPCTL_UPDATED, old_obj, obj);
    }
}

static void ad_delete(void *ud, struct json_object *obj)
{
    struct cache_adapter *ad = ud;
    if (ad->cache->fn) {
        ad->cache->fn(ad->cache->ud, ad->kind, OPCTL_DELETED, NULL, obj);
    }
}

#define LAST_APPLIED "kubectl.kubernetes.io/last-applied-configuration"

/* Informer transform: drops what the operator never reads before an object is cached. Every kind
 * loses metadata.managedFields (a PUT body without it keeps the server's). InferencePools and
 * InferenceModels also lose kubectl's last-applied annotation, a second copy of their spec: the
 * operator writes them only through /status, which ignores metadata. Owned objects keep it, as
 * their PUT bodies are built from the cache. */
static void strip_unread(void *ud, struct json_object *obj)
{
    const struct cache_adapter *ad = ud;
    kube_informer_strip_managed_fields(NULL, obj);
    if (ad->kind == OPCTL_POOL || ad->kind == OPCTL_MODEL) {
        struct json_object *ann = json_get(obj, "metadata.annotations");
        if (ann && json_object_is_type(ann, json_type_object)) {
            json_object_object_del(ann, LAST_APPLIED);
        }
    }
}

struct opctl_cache *opctl_cache_new(struct kube_client *c, const char *const *namespaces,
                                    size_t nns, long resync_s, opctl_event_fn fn, void *ud)
{
    struct opctl_cache *cache = calloc(1, sizeof(*cache));
    if (!cache) {
        return NULL;
    }
    cache->fn = fn;
    cache->ud = ud;
    cache->nsets = nns ? nns : 1;
    cache->sets = calloc(cache->nsets, sizeof(*cache->sets));
    if (!cache->sets) {
        free(cache);
        return NULL;
    }
    for (size_t s = 0; s < cache->nsets; s++) {
        struct cache_ns *set = &cache->sets[s];
        if (nns && !(set->ns = strdup(namespaces[s]))) {
            goto err_free;
        }
        for (int k = 0; k < OPCTL_NKINDS; k++) {
            set->ad[k].cache = cache;
            set->ad[k].kind = (enum opctl_kind)k;
            struct kube_informer_handlers h = {.on_add = ad_add,
                                               .on_update = ad_update,
                                               .on_delete = ad_delete,
                                               .ud = &set->ad[k]};
            const char *sel = k == OPCTL_POOL || k == OPCTL_MODEL ? NULL : OWNED_SELECTOR;
            set->inf[k] = kube_informer_new(c, kind_resources[k], set->ns, sel, resync_s, &h);
            if (!set->inf[k] ||
                kube_informer_set_transform(set->inf[k], strip_unread, &set->ad[k]) != 0) {
                goto err_free;
            }
            if (k == OPCTL_POD && (kube_informer_add_label_index(set->inf[k], LABEL_POOL) != 0 ||
                                   kube_informer_add_label_index(set->inf[k], LABEL_MODEL) != 0)) {
                goto err_free;
            }
        }
    }
    return cache;

err_free:
    opctl_cache_free(cache);
    return NULL;
}

int opctl_cache_start(struct opctl_cache *cache)
{
    for (size_t s = 0; s < cache->nsets; s++) {
        for (int k = 0; k < OPCTL_NKINDS; k++) {
            int rc = kube_informer_start(cache->sets[s].inf[k]);
            if (rc != 0 && rc != -EBUSY) {
                return rc;
            }
        }
    }
    return 0;
}

void opctl_cache_stop(struct opctl_cache *cache)
{
    for (size_t s = 0; cache && s < cache->nsets; s++) {
        for (int k = 0; k < OPCTL_NKINDS; k++) {
            if (cache->sets[s].inf[k]) {
                kube_informer_stop(cache->sets[s].inf[k]);
            }
        }
    }
}

void opctl_cache_free(struct opctl_cache *cache)
{
    if (!cache) {
        return;
    }
    opctl_cache_stop(cache);
    for (size_t s = 0; s < cache->nsets; s++) {
        for (int k = 0; k < OPCTL_NKINDS; k++) {
            kube_informer_free(cache->sets[s].inf[k]);
        }
        free(cache->sets[s].ns);
    }
    free(cache->sets);
    free(cache);
}

int opctl_cache_synced(struct opctl_cache *cache)
{
    for (size_t s = 0; s < cache->nsets; s++) {
        for (int k = 0; k < OPCTL_NKINDS; k++) {
            if (!kube_informer_has_synced(cache->sets[s].inf[k])) {
                return 0;
            }
        }
    }
    return 1;
}

void opctl_cache_unsynced(struct opctl_cache *cache, char *out, size_t outlen)
{
    struct buf b;
    buf_init(&b, outlen > 0 ? outlen - 1 : 0);
    for (size_t s = 0; s < cache->nsets; s++) {
        for (int k = 0; k < OPCTL_NKINDS; k++) {
            if (!kube_informer_has_synced(cache->sets[s].inf[k])) {
                (void)buf_appendf(&b, "%s%s%s%s", b.len ? ", " : "", kind_resources[k]->plural,
                                  cache->sets[s].ns ? " in " : "",
                                  cache->sets[s].ns ? cache->sets[s].ns : "");
            }
        }
    }
    if (outlen > 0) {
        snprintf(out, outlen, "%s", buf_cstr(&b));
    }
    buf_free(&b);
}

int opctl_cache_wait_synced(struct opctl_cache *cache, long timeout_ms)
{
    int64_t t0 = tandem_now_ms();
    for (size_t s = 0; s < cache->nsets; s++) {
        for (int k = 0; k < OPCTL_NKINDS; k++) {
            long left = -1;
            if (timeout_ms >= 0) {
                long spent = (long)(tandem_now_ms() - t0);
                left = timeout_ms > spent ? timeout_ms - spent : 0;
            }
            int rc = kube_informer_wait_synced(cache->sets[s].inf[k], left);
            if (rc != 0) {
                return rc;
            }
        }
    }
    return 0;
}

static struct cache_ns *set_for(struct opctl_cache *cache, const char *ns)
{
    for (size_t s = 0; s < cache->nsets; s++) {
        if (!cache->sets[s].ns || (ns && strcmp(cache->sets[s].ns, ns) == 0)) {
            return &cache->sets[s];
        }
    }
    return NULL;
}

int opctl_cache_watches(struct opctl_cache *cache, const char *ns)
{
    return set_for(cache, ns) != NULL;
}

size_t opctl_cache_count(struct opctl_cache *cache)
{
    size_t n = 0;
    for (size_t s = 0; s < cache->nsets; s++) {
        for (int k = 0; k < OPCTL_NKINDS; k++) {
            n += kube_informer_count(cache->sets[s].inf[k]);
        }
    }
    return n;
}

struct json_object *opctl_cache_get(struct opctl_cache *cache, enum opctl_kind kind, const char *ns,
                                    const char *name)
{
    struct cache_ns *set = set_for(cache, ns);
    return set ? kube_informer_get(set->inf[kind], ns, name) : NULL;
}

int opctl_cache_list(struct opctl_cache *cache, enum opctl_kind kind, const char *ns,
                     const char *label_selector, struct json_object ***items, size_t *n)
{
    struct cache_ns *set = set_for(cache, ns);
    *items = NULL;
    *n = 0;
    return set ? kube_informer_list(set->inf[kind], ns, label_selector, items, n) : 0;
}

/* Keeps only the items in namespace ns (in place). */
static void filter_namespace(struct json_object **items, size_t *n, const char *ns)
{
    size_t out = 0;
    for (size_t i = 0; i < *n; i++) {
        const char *ins = member_string(json_get(items[i], "metadata"), "namespace");
        if (!ns || (ins && strcmp(ins, ns) == 0)) {
            items[out++] = items[i];
        } else {
            json_object_put(items[i]);
        }
    }
    *n = out;
}

int opctl_cache_owned(struct opctl_cache *cache, enum opctl_kind kind, const char *ns,
                      const char *owner_uid, struct json_object ***items, size_t *n)
{
    struct cache_ns *set = set_for(cache, ns);
    *items = NULL;
    *n = 0;
    if (!set || !owner_uid || !owner_uid[0]) {
        return 0;
    }
    int rc = kube_informer_by_owner(set->inf[kind], owner_uid, items, n);
    if (rc == 0) {
        filter_namespace(*items, n, ns);
    }
    return rc;
}

int opctl_cache_by_label(struct opctl_cache *cache, enum opctl_kind kind, const char *ns,
                         const char *key, const char *value, struct json_object ***items, size_t *n)
{
    struct cache_ns *set = set_for(cache, ns);
    *items = NULL;
    *n = 0;
    if (!set) {
        return 0;
    }
    int rc = kube_informer_by_label(set->inf[kind], key, value, items, n);
    if (rc == 0) {
        filter_namespace(*items, n, ns);
    }
    return rc;
}

void opctl_items_free(struct json_object **items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_object_put(items[i]);
    }
    free(items);
}
