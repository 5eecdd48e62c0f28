/*
 * Create-or-update with no-op detection (see apply.h): the decision and the merge are pure
 * functions over json-c objects; apply_object adds the cache read, the write and its accounting.
 */
#include "operator/controller/apply.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lib/json.h"
#include "lib/log.h"
#include "operator/controller/status.h"

static void count(unsigned long *counter)
{
    __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

static const char *str_at(struct json_object *o, const char *path)
{
    const char *s = NULL;
    return json_get_string(o, path, &s, NULL, 0) == 0 ? s : NULL;
}

/* The uid of the controller ownerReference of refs (an array), or NULL. */
static const char *controller_uid(struct json_object *refs)
{
    size_t n =
        refs && json_object_is_type(refs, json_type_array) ? json_object_array_length(refs) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *r = json_object_array_get_idx(refs, i), *ctl = NULL;
        if (json_object_object_get_ex(r, "controller", &ctl) && json_object_get_boolean(ctl)) {
            return str_at(r, "uid");
        }
    }
    return NULL;
}

enum apply_action apply_decide(struct json_object *live, struct json_object *desired)
{
    if (!live) {
        return APPLY_CREATE;
    }
    const char *theirs = controller_uid(json_get(live, "metadata.ownerReferences"));
    const char *ours = controller_uid(json_get(desired, "metadata.ownerReferences"));
    if (theirs && (!ours || strcmp(theirs, ours) != 0)) {
        return APPLY_CONFLICT;
    }
    if (json_get(live, "metadata.deletionTimestamp")) {
        return APPLY_NONE; /* going away; its deletion event brings the owner back */
    }
    return desired_needs_update(live, desired) ? APPLY_UPDATE : APPLY_NONE;
}

/* Maps the operator owns whole (as desired_needs_update compares them): replaced, not merged. */
static int owned_map_key(const char *key)
{
    static const char *const keys[] = {"labels", "matchLabels", "selector", "nodeSelector",
                                       "data",   "binaryData",  "limits",   "requests"};
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        if (strcmp(key, keys[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* parent[key] = a deep copy of v (replacing what was there). 0 or -ENOMEM. */
static int put_copy(struct json_object *parent, const char *key, struct json_object *v)
{
    struct json_object *copy = NULL;
    if (v && json_object_deep_copy(v, &copy, NULL) != 0) {
        return -ENOMEM;
    }
    if (json_object_object_add(parent, key, copy) != 0) {
        json_object_put(copy);
        return -ENOMEM;
    }
    return 0;
}

/* Merges want into parent[key]: objects member by member (except owned maps), else replaced. */
static int merge_into(struct json_object *parent, const char *key, struct json_object *want,
                      int depth)
{
    struct json_object *cur = NULL;
    json_object_object_get_ex(parent, key, &cur);
    if (depth < 64 && want && json_object_is_type(want, json_type_object) && cur &&
        json_object_is_type(cur, json_type_object) && !owned_map_key(key)) {
        json_object_object_foreach(want, k, v)
        {
            int rc = merge_into(cur, k, v, depth + 1);
            if (rc != 0) {
                return rc;
            }
        }
        return 0;
    }
    return put_copy(parent, key, want);
}

/* The object member key of o, created empty when absent or not an object; NULL on OOM. */
static struct json_object *object_member(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_object)) {
        return v;
    }
    v = json_object_new_object();
    if (!v || json_object_object_add(o, key, v) != 0) {
        json_object_put(v);
        return NULL;
    }
    return v;
}

/* live's references minus its controller reference and those desired sets, then desired's. */
static struct json_object *merged_owner_refs(struct json_object *live_refs,
                                             struct json_object *want_refs)
{
    struct json_object *out = json_object_new_array();
    size_t nl = live_refs && json_object_is_type(live_refs, json_type_array)
                    ? json_object_array_length(live_refs)
                    : 0;
    size_t nw = want_refs && json_object_is_type(want_refs, json_type_array)
                    ? json_object_array_length(want_refs)
                    : 0;
    for (size_t i = 0; out && i < nl; i++) {
        struct json_object *r = json_object_array_get_idx(live_refs, i), *ctl = NULL;
        if (json_object_object_get_ex(r, "controller", &ctl) && json_object_get_boolean(ctl)) {
            continue;
        }
        const char *uid = str_at(r, "uid");
        int replaced = 0;
        for (size_t j = 0; uid && j < nw; j++) {
            const char *wuid = str_at(json_object_array_get_idx(want_refs, j), "uid");
            replaced |= wuid && strcmp(uid, wuid) == 0;
        }
        if (!replaced && json_object_array_add(out, json_object_get(r)) != 0) {
            json_object_put(r);
            json_object_put(out);
            return NULL;
        }
    }
    for (size_t j = 0; out && j < nw; j++) {
        struct json_object *copy = NULL;
        if (json_object_deep_copy(json_object_array_get_idx(want_refs, j), &copy, NULL) != 0 ||
            json_object_array_add(out, copy) != 0) {
            json_object_put(copy);
            json_object_put(out);
            return NULL;
        }
    }
    return out;
}

struct json_object *apply_merge(struct json_object *live, struct json_object *desired)
{
    struct json_object *out = NULL;
    if (!live || !desired || json_object_deep_copy(live, &out, NULL) != 0) {
        return NULL;
    }
    struct json_object *meta = object_member(out, "metadata");
    struct json_object *dmeta = json_get(desired, "metadata");
    if (!meta) {
        goto err_put;
    }
    static const char *const maps[] = {"labels", "annotations"};
    for (size_t i = 0; i < ARRAY_SIZE(maps); i++) {
        struct json_object *want = json_get(dmeta, maps[i]);
        if (!want || !json_object_is_type(want, json_type_object)) {
            continue;
        }
        struct json_object *have = object_member(meta, maps[i]);
        if (!have) {
            goto err_put;
        }
        json_object_object_foreach(want, k, v)
        {
            if (put_copy(have, k, v) != 0) {
                goto err_put;
            }
        }
    }
    struct json_object *want_refs = json_get(dmeta, "ownerReferences");
    if (want_refs) {
        struct json_object *refs = merged_owner_refs(json_get(meta, "ownerReferences"), want_refs);
        if (!refs || json_object_object_add(meta, "ownerReferences", refs) != 0) {
            json_object_put(refs);
            goto err_put;
        }
    }
    json_object_object_foreach(desired, key, want)
    {
        if (strcmp(key, "apiVersion") == 0 || strcmp(key, "kind") == 0 ||
            strcmp(key, "metadata") == 0 || strcmp(key, "status") == 0) {
            continue;
        }
        if (merge_into(out, key, want, 0) != 0) {
            goto err_put;
        }
    }
    return out;

err_put:
    json_object_put(out);
    return NULL;
}

/* Resource, namespace and name of a desired object. */
static int identify(struct json_object *desired, enum opctl_kind *kind, const char **ns,
                    const char **name)
{
    if (opctl_kind_of(desired, kind) != 0) {
        return -EINVAL;
    }
    *ns = str_at(desired, "metadata.namespace");
    *name = str_at(desired, "metadata.name");
    return *name ? 0 : -EINVAL;
}

static void owned_message(struct kube_error *err, const char *kind, const char *name,
                          struct json_object *live)
{
    struct json_object *refs = json_get(live, "metadata.ownerReferences");
    size_t n =
        refs && json_object_is_type(refs, json_type_array) ? json_object_array_length(refs) : 0;
    const char *okind = "?", *oname = "?";
    for (size_t i = 0; i < n; i++) {
        struct json_object *r = json_object_array_get_idx(refs, i), *ctl = NULL;
        if (json_object_object_get_ex(r, "controller", &ctl) && json_object_get_boolean(ctl)) {
            okind = str_at(r, "kind") ? str_at(r, "kind") : "?";
            oname = str_at(r, "name") ? str_at(r, "name") : "?";
        }
    }
    char msg[sizeof(err->message)];
    tandem_set_err(msg, sizeof(msg),
                   "%s %s exists and is controlled by %s %s (another uid); delete it or rename the "
                   "owner",
                   kind, name, okind, oname);
    kube_error_set(err, 0, REASON_OWNERSHIP_CONFLICT, msg);
}

/* PUT the merge of live and desired. */
static int update(struct reconcile_ctx *ctx, const struct kube_resource *r, const char *ns,
                  const char *name, struct json_object *live, struct json_object *desired,
                  struct json_object **out, struct kube_error *err)
{
    struct json_object *merged = apply_merge(live, desired);
    if (!merged) {
        return -ENOMEM;
    }
    int rc = kube_update(ctx->client, r, ns, name, merged, out, err);
    json_object_put(merged);
    if (rc == 0) {
        count(&ctx->updated);
    }
    return rc;
}

int apply_object(struct reconcile_ctx *ctx, struct json_object *owner, struct json_object *desired,
                 struct json_object **live_out, enum apply_result *res, struct kube_error *err)
{
    enum opctl_kind kind;
    const char *ns = NULL, *name = NULL;
    struct json_object *live = NULL, *out = NULL;
    struct kube_error scratch = {0};
    enum apply_result done = APPLY_UNCHANGED;
    if (!err) {
        err = &scratch;
    }
    if (live_out) {
        *live_out = NULL;
    }
    if (identify(desired, &kind, &ns, &name) != 0) {
        return -EINVAL;
    }
    const struct kube_resource *r = opctl_resource(kind);
    live = opctl_cache_get(ctx->cache, kind, ns, name);
    int rc = 0;
    switch (apply_decide(live, desired)) {
    case APPLY_NONE:
        break;
    case APPLY_CONFLICT:
        owned_message(err, r->kind, name, live);
        rc = APPLY_EOWNED;
        break;
    case APPLY_UPDATE:
        rc = update(ctx, r, ns, name, live, desired, &out, err);
        done = APPLY_UPDATED;
        break;
    case APPLY_CREATE:
        rc = kube_create(ctx->client, r, ns, desired, &out, err);
        done = APPLY_CREATED;
        if (rc == 0) {
            count(&ctx->created);
        } else if (rc == KUBE_EEXISTS) {
            /* Either the cache lags behind, or an object without our label holds the name:
             * decide again from the server's copy (adopting an unowned one). */
            rc = kube_get(ctx->client, r, ns, name, &live, err);
            if (rc != 0) {
                break;
            }
            switch (apply_decide(live, desired)) {
            case APPLY_CONFLICT:
                owned_message(err, r->kind, name, live);
                rc = APPLY_EOWNED;
                break;
            case APPLY_UPDATE:
                rc = update(ctx, r, ns, name, live, desired, &out, err);
                done = APPLY_UPDATED;
                break;
            default:
                done = APPLY_UNCHANGED;
                break;
            }
        }
        break;
    }
    if (rc != 0) {
        json_object_put(live);
        json_object_put(out);
        return rc;
    }
    if (done != APPLY_UNCHANGED) {
        log_info("%s %s %s/%s", done == APPLY_CREATED ? "created" : "updated", r->kind,
                 ns ? ns : "", name);
        reconcile_event(ctx, owner, "Normal", done == APPLY_CREATED ? "Created" : "Updated",
                        "%s %s %s", done == APPLY_CREATED ? "Created" : "Updated", r->kind, name);
    }
    if (res) {
        *res = done;
    }
    if (live_out) {
        *live_out = out ? out : live;
        if (out) {
            json_object_put(live);
        }
    } else {
        json_object_put(live);
        json_object_put(out);
    }
    return 0;
}

int apply_delete_unwanted(struct reconcile_ctx *ctx, struct json_object *owner,
                          enum opctl_kind kind, const char *ns, const char *owner_uid,
                          const char *const *keep, size_t nkeep, int *deleted,
                          struct kube_error *err)
{
    struct json_object **items = NULL;
    size_t n = 0;
    int ndeleted = 0, rc = opctl_cache_owned(ctx->cache, kind, ns, owner_uid, &items, &n);
    if (deleted) {
        *deleted = 0;
    }
    if (rc != 0) {
        return rc;
    }
    const struct kube_resource *r = opctl_resource(kind);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *name = str_at(items[i], "metadata.name");
        const char *uid = str_at(items[i], "metadata.uid");
        int wanted = !name || json_get(items[i], "metadata.deletionTimestamp") != NULL;
        for (size_t k = 0; name && k < nkeep && !wanted; k++) {
            wanted = keep[k] && strcmp(keep[k], name) == 0;
        }
        if (wanted) {
            continue;
        }
        struct kube_delete_options o = {.propagation_policy = "Background",
                                        .grace_period_seconds = -1,
                                        .precondition_uid = uid};
        rc = kube_delete(ctx->client, r, ns, name, &o, NULL, err);
        if (rc == KUBE_ENOTFOUND || rc == KUBE_ECONFLICT) {
            rc = 0; /* gone already, or replaced by a new object of the same name */
            continue;
        }
        if (rc == 0) {
            ndeleted++;
            count(&ctx->deleted);
            log_info("deleted %s %s/%s (no longer wanted)", r->kind, ns ? ns : "", name);
            reconcile_event(ctx, owner, "Normal", "Deleted", "Deleted %s %s (no longer wanted)",
                            r->kind, name);
        }
    }
    opctl_items_free(items, n);
    if (deleted) {
        *deleted = ndeleted;
    }
    return rc;
}

int apply_status(struct reconcile_ctx *ctx, const struct kube_resource *r, struct json_object *live,
                 struct json_object *status, int *written, struct kube_error *err)
{
    if (written) {
        *written = 0;
    }
    if (!status_differs(json_get(live, "status"), status)) {
        return 0;
    }
    struct json_object *obj = NULL, *copy = NULL;
    if (json_object_deep_copy(live, &obj, NULL) != 0 ||
        json_object_deep_copy(status, &copy, NULL) != 0 ||
        json_object_object_add(obj, "status", copy) != 0) {
        json_object_put(copy);
        json_object_put(obj);
        return -ENOMEM;
    }
    const char *ns = str_at(obj, "metadata.namespace"), *name = str_at(obj, "metadata.name");
    int rc = name ? kube_update_status(ctx->client, r, ns, name, obj, NULL, err) : -EINVAL;
    json_object_put(obj);
    if (rc == 0) {
        count(&ctx->status_writes);
        if (written) {
            *written = 1;
        }
    }
    return rc;
}
