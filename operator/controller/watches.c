/*
 * The watch table (see watches.h): predicates, map functions, and the rows that tie them to the
 * kinds and controllers.
 */
#include "operator/controller/watches.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lib/common.h"
#include "lib/json.h"
#include "operator/controller/spec.h"
#include "operator/controller/status.h"

#define KEY_MAX 512 /* "namespace/name" */

/* What the map functions need to know of each controller: the kind of object it reconciles (as
 * an owner) and the label that names such an object on a pod. */
static const struct {
    const char *kind;
    const char *pod_label;
} controller_objects[OPCTL_NCONTROLLERS] = {
    [OPCTL_CTL_POOL] = {SPEC_POOL_KIND, LABEL_POOL},
    [OPCTL_CTL_MODEL] = {SPEC_MODEL_KIND, LABEL_MODEL},
};

/* Where a map function sends its keys, and the cache it may read (NULL: nothing to read). */
struct watch_sink {
    struct opctl_cache *cache;
    enum opctl_controller ctl;
    watch_add_fn add;
    void *ud;
};

/* 1 when the event should reach the map function. */
typedef int (*watch_predicate_fn)(enum opctl_event ev, struct json_object *old_obj,
                                  struct json_object *obj);
/* Sends the keys of the event to the sink; old_obj is NULL but for updates. */
typedef void (*watch_map_fn)(const struct watch_sink *to, struct json_object *old_obj,
                             struct json_object *obj);

/* ---- object fields ---- */

static const char *member_string(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string)) {
        return NULL;
    }
    return json_object_get_string(v);
}

static const char *ns_of(struct json_object *obj)
{
    return member_string(json_get(obj, "metadata"), "namespace");
}

static const char *name_of(struct json_object *obj)
{
    return member_string(json_get(obj, "metadata"), "name");
}

static const char *pool_ref_of(struct json_object *model)
{
    return member_string(json_get(model, "spec.poolRef"), "name");
}

static const char *label_of(struct json_object *obj, const char *key)
{
    return member_string(json_get(obj, "metadata.labels"), key);
}

static int64_t generation_of(struct json_object *obj)
{
    int64_t g = 0;
    json_opt_int64(obj, "metadata.generation", 0, &g, NULL, 0);
    return g;
}

static int same_string(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* ---- predicates ---- */

/* Drops an update that only touched status (or metadata other than generation/deletion): pools
 * and models, whose reconcile does not depend on it. A resync (same resourceVersion) passes. */
static int not_status_only(enum opctl_event ev, struct json_object *old_obj,
                           struct json_object *obj)
{
    if (ev != OPCTL_UPDATED) {
        return 1;
    }
    struct json_object *om = json_get(old_obj, "metadata"), *nm = json_get(obj, "metadata");
    const char *orv = member_string(om, "resourceVersion");
    const char *nrv = member_string(nm, "resourceVersion");
    if (!orv || !nrv || strcmp(orv, nrv) == 0) {
        return 1;
    }
    int old_del = json_get(old_obj, "metadata.deletionTimestamp") != NULL;
    int new_del = json_get(obj, "metadata.deletionTimestamp") != NULL;
    return generation_of(old_obj) != generation_of(obj) || old_del != new_del;
}

/* Passes additions, deletions and updates that changed the spec (the generation). */
static int generation_changed(enum opctl_event ev, struct json_object *old_obj,
                              struct json_object *obj)
{
    return ev != OPCTL_UPDATED || generation_of(old_obj) != generation_of(obj);
}

/* Drops a pod update that changes nothing the status counts (nor the pod's pool or model). */
static int pod_counts_changed(enum opctl_event ev, struct json_object *old_obj,
                              struct json_object *obj)
{
    if (ev != OPCTL_UPDATED) {
        return 1;
    }
    struct status_pods a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    status_count_pod(&a, old_obj);
    status_count_pod(&b, obj);
    return a.total != b.total || a.ready != b.ready || a.running_unready != b.running_unready ||
           a.failing != b.failing ||
           !same_string(label_of(old_obj, LABEL_POOL), label_of(obj, LABEL_POOL)) ||
           !same_string(label_of(old_obj, LABEL_MODEL), label_of(obj, LABEL_MODEL));
}

/* ---- map functions ---- */

static void add_key(const struct watch_sink *to, const char *ns, const char *name)
{
    char key[KEY_MAX];
    if (!name || !name[0]) {
        return;
    }
    int w = snprintf(key, sizeof(key), "%s/%s", ns ? ns : "", name);
    if (w > 0 && (size_t)w < sizeof(key)) {
        to->add(to->ud, to->ctl, key);
    }
}

/* For: the object itself. */
static void map_self(const struct watch_sink *to, struct json_object *old_obj,
                     struct json_object *obj)
{
    (void)old_obj;
    add_key(to, ns_of(obj), name_of(obj));
}

/* Owns: the controller owner of the object when it is of the controller's kind (our group). */
static void add_owner(const struct watch_sink *to, struct json_object *obj)
{
    struct json_object *refs = json_get(obj, "metadata.ownerReferences");
    size_t n =
        refs && json_object_is_type(refs, json_type_array) ? json_object_array_length(refs) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *r = json_object_array_get_idx(refs, i), *ctl = NULL;
        if (!json_object_object_get_ex(r, "controller", &ctl) || !json_object_get_boolean(ctl)) {
            continue;
        }
        const char *kind = member_string(r, "kind"), *api = member_string(r, "apiVersion");
        if (kind && api && strncmp(api, SPEC_GROUP "/", strlen(SPEC_GROUP) + 1) == 0 &&
            strcmp(kind, controller_objects[to->ctl].kind) == 0) {
            add_key(to, ns_of(obj), member_string(r, "name"));
        }
    }
}

static void map_owner(const struct watch_sink *to, struct json_object *old_obj,
                      struct json_object *obj)
{
    add_owner(to, obj);
    if (old_obj) {
        add_owner(to, old_obj);
    }
}

/* A model → its pool, and the pool it left when poolRef changed. */
static void map_pool_of_model(const struct watch_sink *to, struct json_object *old_obj,
                              struct json_object *obj)
{
    add_key(to, ns_of(obj), pool_ref_of(obj));
    if (old_obj && !same_string(pool_ref_of(old_obj), pool_ref_of(obj))) {
        add_key(to, ns_of(old_obj), pool_ref_of(old_obj));
    }
}

/* A pod → the object of the controller's kind its label names, before and after an update. */
static void map_pod_label(const struct watch_sink *to, struct json_object *old_obj,
                          struct json_object *obj)
{
    const char *label = controller_objects[to->ctl].pod_label;
    add_key(to, ns_of(obj), label_of(obj, label));
    if (old_obj) {
        add_key(to, ns_of(old_obj), label_of(old_obj, label));
    }
}

/* A pool → the cached models whose poolRef names it (they read the pool's spec). */
static void map_models_of_pool(const struct watch_sink *to, struct json_object *old_obj,
                               struct json_object *obj)
{
    (void)old_obj;
    struct json_object **items = NULL;
    size_t n = 0;
    const char *ns = ns_of(obj), *pool = name_of(obj);
    if (!to->cache || !pool ||
        opctl_cache_list(to->cache, OPCTL_MODEL, ns, NULL, &items, &n) != 0) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (same_string(pool_ref_of(items[i]), pool)) {
            add_key(to, ns, name_of(items[i]));
        }
    }
    opctl_items_free(items, n);
}

/* ---- the table ---- */

static const struct watch {
    enum opctl_kind kind;
    enum opctl_controller ctl;
    watch_predicate_fn predicate; /* NULL: every event */
    watch_map_fn map;
} watches[] = {
    /* InferencePool: its spec, the models that name it, the pods it counts, what it owns (the
     * kinds reconcile_pool creates and sweeps). */
    {OPCTL_POOL, OPCTL_CTL_POOL, not_status_only, map_self},
    {OPCTL_MODEL, OPCTL_CTL_POOL, not_status_only, map_pool_of_model},
    {OPCTL_POD, OPCTL_CTL_POOL, pod_counts_changed, map_pod_label},
    {OPCTL_SERVICEACCOUNT, OPCTL_CTL_POOL, NULL, map_owner},
    {OPCTL_ROLE, OPCTL_CTL_POOL, NULL, map_owner},
    {OPCTL_ROLEBINDING, OPCTL_CTL_POOL, NULL, map_owner},
    {OPCTL_CONFIGMAP, OPCTL_CTL_POOL, NULL, map_owner},
    {OPCTL_DEPLOYMENT, OPCTL_CTL_POOL, NULL, map_owner},
    {OPCTL_SERVICE, OPCTL_CTL_POOL, NULL, map_owner},
    /* InferenceModel: its spec, its pool's spec, the pods it counts, what it owns (the role
     * Deployments and their HPAs, or the DaemonSet). */
    {OPCTL_MODEL, OPCTL_CTL_MODEL, not_status_only, map_self},
    {OPCTL_POOL, OPCTL_CTL_MODEL, generation_changed, map_models_of_pool},
    {OPCTL_POD, OPCTL_CTL_MODEL, pod_counts_changed, map_pod_label},
    {OPCTL_DEPLOYMENT, OPCTL_CTL_MODEL, NULL, map_owner},
    {OPCTL_HPA, OPCTL_CTL_MODEL, NULL, map_owner},
    {OPCTL_DAEMONSET, OPCTL_CTL_MODEL, NULL, map_owner},
};

void watches_dispatch(struct opctl_cache *cache, enum opctl_kind kind, enum opctl_event ev,
                      struct json_object *old_obj, struct json_object *obj, watch_add_fn add,
                      void *ud)
{
    if (!obj) {
        return;
    }
    for (size_t i = 0; i < ARRAY_SIZE(watches); i++) {
        const struct watch *w = &watches[i];
        if (w->kind != kind || (w->predicate && !w->predicate(ev, old_obj, obj))) {
            continue;
        }
        struct watch_sink to = {.cache = cache, .ctl = w->ctl, .add = add, .ud = ud};
        w->map(&to, old_obj, obj);
    }
}
