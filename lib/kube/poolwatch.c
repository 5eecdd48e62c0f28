/*
 * Following one InferencePool and its pods (see poolwatch.h): a pool informer whose handler turns
 * the named pool's spec.selector into a label selector and (re)starts a pod informer with it.
 *
 * Locks: `swap_lock` guards the pod informer pointer and the current selector; the pool handler
 * holds it while it replaces the pod informer, and kube_poolwatch_new holds it while it waits for
 * the first pod sync.
 */
#include "lib/kube/poolwatch.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/kube/informer.h"
#include "lib/kube/validate.h"
#include "lib/log.h"

#define MAX_TERMS       160        /* matchLabels (64) + matchExpressions (16), with room */
#define MAX_VALUES      64         /* values of one In / NotIn expression (the CRD's maxItems) */
#define MAX_SELECTOR    (64 << 10) /* bytes of a rendered label selector */
#define PREFLIGHT_LIMIT 1
#define MAX_KEEP        24 /* pod fields kept at one level of the object */

/* How a pool group's spec.selector is shaped. */
enum selector_shape {
    SHAPE_LABEL_SELECTOR, /* {matchLabels, matchExpressions} */
    SHAPE_MATCH_LABELS,   /* {matchLabels} */
    SHAPE_PLAIN_MAP,      /* {key: value, ...} */
};

struct pool_group {
    const char *group;
    enum selector_shape shape;
    struct kube_resource res; /* the group's inferencepools */
};

static const struct pool_group pool_groups[] = {
    {"tandem.dev",
     SHAPE_LABEL_SELECTOR,
     {"tandem.dev", "v1alpha1", "inferencepools", "InferencePool", 1}},
    {"inference.networking.k8s.io",
     SHAPE_MATCH_LABELS,
     {"inference.networking.k8s.io", "v1", "inferencepools", "InferencePool", 1}},
    {"inference.networking.x-k8s.io",
     SHAPE_PLAIN_MAP,
     {"inference.networking.x-k8s.io", "v1alpha2", "inferencepools", "InferencePool", 1}},
};

struct kube_poolwatch {
    struct kube_client *client;
    char *ns, *pool, *who;
    const struct pool_group *group;
    char pool_res_name[96]; /* "inferencepools.tandem.dev", for messages */
    struct kube_informer *pools;
    struct kube_poolwatch_handlers h;
    /* pod fields kept by the transform */
    const char *keep_meta[MAX_KEEP], *keep_status[MAX_KEEP];
    size_t n_meta, n_status;

    pthread_mutex_t swap_lock;
    struct kube_informer *pods; /* NULL while the pool has no usable selector */
    char *selector;             /* the pod informer's label selector, or NULL */
    char pool_err[256];         /* the pool's selector problem logged last (pool thread only) */
};

/* ---- selectors ---- */

static const struct pool_group *find_group(const char *group)
{
    if (!group) {
        group = KUBE_POOL_DEFAULT_GROUP;
    }
    for (size_t i = 0; i < ARRAY_SIZE(pool_groups); i++) {
        if (strcmp(pool_groups[i].group, group) == 0) {
            return &pool_groups[i];
        }
    }
    return NULL;
}

/* One requirement of a selector, rendered. */
struct term {
    const char *key; /* borrowed from the pool object */
    char *text;      /* "k=v", "k in (a,b)", "k", "!k" */
};

struct terms {
    struct term items[MAX_TERMS];
    size_t n;
};

static int cmp_term(const void *a, const void *b)
{
    const struct term *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->text, y->text);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void terms_free(struct terms *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->items[i].text);
    }
    t->n = 0;
}

static int terms_add(struct terms *t, const char *key, char *text, const char *field, char *err,
                     size_t errlen)
{
    if (!text) {
        return -ENOMEM;
    }
    if (t->n >= MAX_TERMS) {
        free(text);
        return tandem_fail(err, errlen, -EINVAL, "%s: more than %d terms", field, MAX_TERMS);
    }
    t->items[t->n++] = (struct term){.key = key, .text = text};
    return 0;
}

static int check_key(const char *key, const char *field, char *err, size_t errlen)
{
    if (!kube_valid_label_key(key)) {
        return tandem_fail(err, errlen, -EINVAL, "%s: invalid label key \"%.80s\"", field, key);
    }
    return 0;
}

/* A map of label key → value into "k=v" terms. */
static int add_match_labels(struct terms *t, struct json_object *map, const char *field, char *err,
                            size_t errlen)
{
    if (!json_object_is_type(map, json_type_object)) {
        return tandem_fail(err, errlen, -EINVAL, "%s: must be an object, not %s", field,
                           json_type_label(map));
    }
    json_object_object_foreach(map, key, v)
    {
        if (check_key(key, field, err, errlen) != 0) {
            return -EINVAL;
        }
        if (!json_object_is_type(v, json_type_string)) {
            return tandem_fail(err, errlen, -EINVAL, "%s.%s: must be a string, not %s", field, key,
                               json_type_label(v));
        }
        const char *value = json_object_get_string(v);
        if (!kube_valid_label_value(value)) {
            return tandem_fail(err, errlen, -EINVAL, "%s.%s: invalid label value \"%.80s\"", field,
                               key, value);
        }
        struct buf b;
        buf_init(&b, MAX_SELECTOR);
        buf_appendf(&b, "%s=%s", key, value);
        if (buf_error(&b)) {
            buf_free(&b);
            return -ENOMEM;
        }
        int rc = terms_add(t, key, buf_detach(&b, NULL), field, err, errlen);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* The values of an In / NotIn expression, sorted and unique, as "(a,b)" into b. */
static int render_values(struct json_object *values, const char *field, struct buf *b, char *err,
                         size_t errlen)
{
    const char *sorted[MAX_VALUES];
    size_t n = json_object_is_type(values, json_type_array) ? json_object_array_length(values) : 0;
    if (!json_object_is_type(values, json_type_array) || n == 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s.values: must be a non-empty array for In "
                           "and NotIn",
                           field);
    }
    if (n > MAX_VALUES) {
        return tandem_fail(err, errlen, -EINVAL, "%s.values: more than %d values", field,
                           MAX_VALUES);
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *v = json_object_array_get_idx(values, i);
        if (!json_object_is_type(v, json_type_string)) {
            return tandem_fail(err, errlen, -EINVAL, "%s.values[%zu]: must be a string, not %s",
                               field, i, json_type_label(v));
        }
        sorted[i] = json_object_get_string(v);
        if (!kube_valid_label_value(sorted[i])) {
            return tandem_fail(err, errlen, -EINVAL,
                               "%s.values[%zu]: invalid label value \"%.80s\"", field, i,
                               sorted[i]);
        }
    }
    qsort(sorted, n, sizeof(sorted[0]), cmp_str);
    buf_appends(b, "(");
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(sorted[i], sorted[i - 1]) == 0) {
            continue;
        }
        buf_appendf(b, "%s%s", i > 0 ? "," : "", sorted[i]);
    }
    buf_appends(b, ")");
    return 0;
}

/* matchExpressions into terms. */
static int add_match_expressions(struct terms *t, struct json_object *exprs, const char *field,
                                 char *err, size_t errlen)
{
    if (!json_object_is_type(exprs, json_type_array)) {
        return tandem_fail(err, errlen, -EINVAL, "%s: must be an array, not %s", field,
                           json_type_label(exprs));
    }
    for (size_t i = 0; i < json_object_array_length(exprs); i++) {
        char f[96];
        snprintf(f, sizeof(f), "%s[%zu]", field, i);
        struct json_object *e = json_object_array_get_idx(exprs, i);
        struct json_object *k = NULL, *op = NULL, *values = NULL;
        if (!json_object_is_type(e, json_type_object)) {
            return tandem_fail(err, errlen, -EINVAL, "%s: must be an object", f);
        }
        json_object_object_get_ex(e, "key", &k);
        json_object_object_get_ex(e, "operator", &op);
        json_object_object_get_ex(e, "values", &values);
        if (!json_object_is_type(k, json_type_string)) {
            return tandem_fail(err, errlen, -EINVAL, "%s.key: required string", f);
        }
        const char *key = json_object_get_string(k);
        if (check_key(key, f, err, errlen) != 0) {
            return -EINVAL;
        }
        const char *o = json_object_is_type(op, json_type_string) ? json_object_get_string(op) : "";
        int is_in = strcmp(o, "In") == 0, is_notin = strcmp(o, "NotIn") == 0;
        int exists = strcmp(o, "Exists") == 0, absent = strcmp(o, "DoesNotExist") == 0;
        struct buf b;
        buf_init(&b, MAX_SELECTOR);
        if (is_in || is_notin) {
            buf_appendf(&b, "%s %s ", key, is_in ? "in" : "notin");
            if (render_values(values, f, &b, err, errlen) != 0) {
                buf_free(&b);
                return -EINVAL;
            }
        } else if (exists || absent) {
            if (values && !(json_object_is_type(values, json_type_array) &&
                            json_object_array_length(values) == 0)) {
                buf_free(&b);
                return tandem_fail(err, errlen, -EINVAL, "%s.values: must be empty for %s", f, o);
            }
            buf_appendf(&b, "%s%s", absent ? "!" : "", key);
        } else {
            buf_free(&b);
            return tandem_fail(err, errlen, -EINVAL,
                               "%s.operator: must be In, NotIn, Exists or DoesNotExist", f);
        }
        if (buf_error(&b)) {
            int rc = buf_error(&b);
            buf_free(&b);
            return rc == -ENOSPC ? tandem_fail(err, errlen, -EINVAL, "%s: too long", f) : rc;
        }
        int rc = terms_add(t, key, buf_detach(&b, NULL), f, err, errlen);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* The terms of spec.selector in the group's shape. */
static int collect_terms(const struct pool_group *g, struct json_object *sel, struct terms *t,
                         char *err, size_t errlen)
{
    if (g->shape == SHAPE_PLAIN_MAP) {
        return add_match_labels(t, sel, "spec.selector", err, errlen);
    }
    if (!json_object_is_type(sel, json_type_object)) {
        return tandem_fail(err, errlen, -EINVAL, "spec.selector: must be an object, not %s",
                           json_type_label(sel));
    }
    json_object_object_foreach(sel, key, v)
    {
        int rc;
        if (strcmp(key, "matchLabels") == 0) {
            rc = v ? add_match_labels(t, v, "spec.selector.matchLabels", err, errlen) : 0;
        } else if (strcmp(key, "matchExpressions") == 0 && g->shape == SHAPE_LABEL_SELECTOR) {
            rc = v ? add_match_expressions(t, v, "spec.selector.matchExpressions", err, errlen) : 0;
        } else {
            /* a term we would not apply would widen the selection: refuse it */
            rc = tandem_fail(err, errlen, -EINVAL, "spec.selector.%s: not supported for %s", key,
                             g->group);
        }
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

int kube_pool_selector(const char *pool_group, struct json_object *pool, char **out, char *err,
                       size_t errlen)
{
    const struct pool_group *g = find_group(pool_group);
    struct terms *t = NULL;
    struct buf b;
    int rc;
    *out = NULL;
    if (!g) {
        return tandem_fail(err, errlen, -EINVAL, "unknown pool group \"%s\"", pool_group);
    }
    struct json_object *sel = json_get(pool, "spec.selector");
    if (!sel) {
        return tandem_fail(err, errlen, -EINVAL, "spec.selector: required field is missing");
    }
    t = calloc(1, sizeof(*t));
    if (!t) {
        return -ENOMEM;
    }
    rc = collect_terms(g, sel, t, err, errlen);
    if (rc != 0) {
        goto out_free_terms;
    }
    if (t->n == 0) {
        rc = tandem_fail(err, errlen, -EINVAL,
                         "spec.selector: has no terms (it would select every pod of the "
                         "namespace)");
        goto out_free_terms;
    }
    qsort(t->items, t->n, sizeof(t->items[0]), cmp_term);
    buf_init(&b, MAX_SELECTOR);
    for (size_t i = 0; i < t->n; i++) {
        buf_appendf(&b, "%s%s", i ? "," : "", t->items[i].text);
    }
    rc = buf_error(&b);
    if (rc == 0) {
        *out = buf_detach(&b, NULL);
        rc = *out ? 0 : -ENOMEM;
    } else if (rc == -ENOSPC) {
        rc = tandem_fail(err, errlen, -EINVAL, "spec.selector: longer than %d bytes", MAX_SELECTOR);
    }
    buf_free(&b);
out_free_terms:
    terms_free(t);
    free(t);
    return rc;
}

/* ---- pods ---- */

/* Deletes every member of o whose key is not in keep. */
static void keep_only(struct json_object *o, const char *const *keep, size_t nkeep)
{
    const char *drop[32];
    size_t ndrop;
    if (!json_object_is_type(o, json_type_object)) {
        return;
    }
    do {
        ndrop = 0;
        json_object_object_foreach(o, key, v)
        {
            (void)v;
            size_t i = 0;
            while (i < nkeep && strcmp(key, keep[i]) != 0) {
                i++;
            }
            if (i == nkeep && ndrop < ARRAY_SIZE(drop)) {
                drop[ndrop++] = key;
            }
        }
        for (size_t i = 0; i < ndrop; i++) {
            json_object_object_del(o, drop[i]);
        }
    } while (ndrop == ARRAY_SIZE(drop));
}

int kube_pool_check_ref(const char *pool_group, const char *ns, const char *pool, char *err,
                        size_t errlen)
{
    if (!find_group(pool_group)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "unknown pool group \"%s\" (tandem.dev, inference.networking.k8s.io "
                           "or inference.networking.x-k8s.io)",
                           pool_group);
    }
    if (!ns || !kube_valid_dns_label(ns) || !pool || !kube_valid_dns_subdomain(pool)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "the pool must be given as a namespace and a name (got \"%s/%s\")",
                           ns ? ns : "", pool ? pool : "");
    }
    return 0;
}

const struct kube_resource *kube_pool_resource(const char *pool_group)
{
    const struct pool_group *g = find_group(pool_group);
    return g ? &g->res : NULL;
}

int kube_pool_target_port(const char *pool_group, struct json_object *pool)
{
    const struct pool_group *g = find_group(pool_group);
    struct json_object *p = NULL;
    if (!g) {
        return 0;
    }
    if (g->shape == SHAPE_LABEL_SELECTOR) {
        p = json_get(pool, "spec.targetPort");
    } else if (g->shape == SHAPE_MATCH_LABELS) {
        struct json_object *ports = json_get(pool, "spec.targetPorts");
        if (json_object_is_type(ports, json_type_array) && json_object_array_length(ports) > 0) {
            p = json_get(json_object_array_get_idx(ports, 0), "number");
        }
    } else {
        p = json_get(pool, "spec.targetPortNumber");
    }
    int64_t port = json_object_is_type(p, json_type_int) ? json_object_get_int64(p) : 0;
    return port >= 1 && port <= 65535 ? (int)port : 0;
}

/* ---- the pod informer ---- */

/* Pods are cached with only what the handlers read (a pod's spec and status are often tens of
 * KB). */
static void pod_transform(void *ud, struct json_object *pod)
{
    static const char *const top[] = {"apiVersion", "kind", "metadata", "status"};
    const struct kube_poolwatch *pw = ud;
    keep_only(pod, top, ARRAY_SIZE(top));
    keep_only(json_get(pod, "metadata"), pw->keep_meta, pw->n_meta);
    keep_only(json_get(pod, "status"), pw->keep_status, pw->n_status);
}

static void on_pod_add(void *ud, struct json_object *obj)
{
    struct kube_poolwatch *pw = ud;
    if (pw->h.on_pod) {
        pw->h.on_pod(pw->h.ud, obj);
    }
}

static void on_pod_update(void *ud, struct json_object *old_obj, struct json_object *new_obj)
{
    (void)old_obj;
    on_pod_add(ud, new_obj);
}

static void on_pod_delete(void *ud, struct json_object *obj)
{
    struct kube_poolwatch *pw = ud;
    if (pw->h.on_pod_delete) {
        pw->h.on_pod_delete(pw->h.ud, obj);
    }
}

/* Replaces the pod informer by one for selector (NULL: none), with a reset in between. Pool
 * informer thread (or kube_poolwatch_free's). */
static void pods_replace(struct kube_poolwatch *pw, char *selector)
{
    pthread_mutex_lock(&pw->swap_lock);
    kube_informer_free(pw->pods); /* joins its thread: no pod handler runs after this */
    pw->pods = NULL;
    free(pw->selector);
    pw->selector = selector;
    if (pw->h.on_reset) {
        pw->h.on_reset(pw->h.ud);
    }
    if (selector) {
        static const struct kube_informer_handlers h0 = {
            .on_add = on_pod_add, .on_update = on_pod_update, .on_delete = on_pod_delete};
        struct kube_informer_handlers h = h0;
        h.ud = pw;
        struct kube_informer *inf =
            kube_informer_new(pw->client, &KUBE_PODS, pw->ns, selector, 0, &h);
        if (!inf || kube_informer_set_transform(inf, pod_transform, pw) != 0 ||
            kube_informer_start(inf) != 0) {
            log_error("%s: cannot start the pod informer for selector %s", pw->who, selector);
            kube_informer_free(inf);
        } else {
            pw->pods = inf;
        }
    }
    pthread_mutex_unlock(&pw->swap_lock);
}

/* ---- the pool informer ---- */

static int is_our_pool(const struct kube_poolwatch *pw, struct json_object *obj)
{
    const char *name = json_object_get_string(json_get(obj, "metadata.name"));
    return name && strcmp(name, pw->pool) == 0;
}

/* The pool (NULL: deleted) now has this state: follow its selector. */
static void pool_changed(struct kube_poolwatch *pw, struct json_object *pool)
{
    char err[256] = "";
    char *selector = NULL;
    if (pool && kube_pool_selector(pw->group->group, pool, &selector, err, sizeof(err)) != 0) {
        if (!err[0]) {
            snprintf(err, sizeof(err), "out of memory");
        }
        /* once per problem, not at every status write of the pool */
        if (strcmp(err, pw->pool_err) != 0) {
            log_error("%s: %s %s/%s: %s; no pod is selected", pw->who, pw->pool_res_name, pw->ns,
                      pw->pool, err);
            snprintf(pw->pool_err, sizeof(pw->pool_err), "%s", err);
        }
    } else {
        pw->pool_err[0] = '\0';
    }
    if (pw->h.on_pool) {
        pw->h.on_pool(pw->h.ud, pool, selector);
    }
    /* only the pool thread writes pw->selector, so it can be read here without swap_lock */
    if (selector == pw->selector ||
        (selector && pw->selector && strcmp(selector, pw->selector) == 0)) {
        free(selector);
        return;
    }
    if (selector) {
        log_info("%s: %s %s/%s selects pods by \"%s\"", pw->who, pw->pool_res_name, pw->ns,
                 pw->pool, selector);
    } else if (!pool) {
        log_warn("%s: %s %s/%s is gone; no pod is selected", pw->who, pw->pool_res_name, pw->ns,
                 pw->pool);
    }
    pods_replace(pw, selector);
}

static void on_pool_add(void *ud, struct json_object *obj)
{
    if (is_our_pool(ud, obj)) {
        pool_changed(ud, obj);
    }
}

static void on_pool_update(void *ud, struct json_object *old_obj, struct json_object *new_obj)
{
    (void)old_obj;
    if (is_our_pool(ud, new_obj)) {
        pool_changed(ud, new_obj);
    }
}

static void on_pool_delete(void *ud, struct json_object *obj)
{
    if (is_our_pool(ud, obj)) {
        pool_changed(ud, NULL);
    }
}

/* The namespace's other pools are cached as bare names; ours keeps its spec. */
static void pool_transform(void *ud, struct json_object *obj)
{
    static const char *const top[] = {"apiVersion", "kind", "metadata", "spec"};
    static const char *const meta[] = {"name", "namespace", "uid", "resourceVersion", "generation"};
    const struct kube_poolwatch *pw = ud;
    keep_only(obj, top, is_our_pool(pw, obj) ? ARRAY_SIZE(top) : ARRAY_SIZE(top) - 1);
    keep_only(json_get(obj, "metadata"), meta, ARRAY_SIZE(meta));
}

/* ---- start and stop ---- */

/* Lists one object of r (with the field selector, NULL for none) to find out at once whether
 * the collection is served and may be listed. */
static int preflight(struct kube_poolwatch *pw, const struct kube_resource *r, const char *what,
                     const char *field_selector, int *found, char *err, size_t errlen)
{
    struct kube_list_options lo = {.field_selector = field_selector, .limit = PREFLIGHT_LIMIT};
    struct kube_error ke = {0};
    struct json_object *list = NULL;
    int rc = kube_list(pw->client, r, pw->ns, &lo, &list, &ke);
    if (rc == 0) {
        struct json_object *items = json_get(list, "items");
        *found = json_object_is_type(items, json_type_array) && json_object_array_length(items) > 0;
        json_object_put(list);
        return 0;
    }
    if (rc == KUBE_EFORBIDDEN || rc == KUBE_EUNAUTHORIZED) {
        return tandem_fail(err, errlen, rc,
                           "cannot list %s in namespace %s: %s: %s (the ServiceAccount needs "
                           "get, list and watch on %s in namespace %s)",
                           what, pw->ns, tandem_strerror(rc), ke.message, what, pw->ns);
    }
    if (rc == KUBE_ENOTFOUND) {
        return tandem_fail(err, errlen, rc,
                           "the API server does not serve %s/%s (is the CRD installed? is "
                           "--pool-group right?)",
                           what, r->version);
    }
    return tandem_fail(err, errlen, rc, "cannot list %s in namespace %s: %s: %s", what, pw->ns,
                       tandem_strerror(rc), ke.message);
}

static long remaining_ms(int64_t deadline_ms)
{
    int64_t left = deadline_ms - tandem_now_ms();
    return left > 0 ? (long)left : 0;
}

static int not_synced(struct kube_poolwatch *pw, const char *what, long timeout_ms, char *err,
                      size_t errlen)
{
    return tandem_fail(err, errlen, -ETIMEDOUT,
                       "the cache of %s in namespace %s did not sync within %ld ms (the "
                       "ServiceAccount needs get, list and watch on %s in namespace %s)",
                       what, pw->ns, timeout_ms, what, pw->ns);
}

/* The pod fields the transform keeps: the fixed ones and the caller's extras. */
static void keep_lists(struct kube_poolwatch *pw, const struct kube_poolwatch_config *c)
{
    static const char *const meta[] = {"name", "namespace", "uid", "resourceVersion", "labels"};
    static const char *const status[] = {"phase", "podIP", "podIPs"};
    for (size_t i = 0; i < ARRAY_SIZE(meta); i++) {
        pw->keep_meta[pw->n_meta++] = meta[i];
    }
    for (size_t i = 0; i < ARRAY_SIZE(status); i++) {
        pw->keep_status[pw->n_status++] = status[i];
    }
    for (size_t i = 0; c->extra_metadata && c->extra_metadata[i] && pw->n_meta < MAX_KEEP; i++) {
        pw->keep_meta[pw->n_meta++] = c->extra_metadata[i];
    }
    for (size_t i = 0; c->extra_status && c->extra_status[i] && pw->n_status < MAX_KEEP; i++) {
        pw->keep_status[pw->n_status++] = c->extra_status[i];
    }
}

static int start_pools(struct kube_poolwatch *pw, int64_t deadline, long timeout_ms, char *err,
                       size_t errlen)
{
    static const struct kube_informer_handlers h0 = {
        .on_add = on_pool_add, .on_update = on_pool_update, .on_delete = on_pool_delete};
    struct kube_informer_handlers h = h0;
    h.ud = pw;
    pw->pools = kube_informer_new(pw->client, &pw->group->res, pw->ns, NULL, 0, &h);
    if (!pw->pools || kube_informer_set_transform(pw->pools, pool_transform, pw) != 0 ||
        kube_informer_start(pw->pools) != 0) {
        return tandem_fail(err, errlen, -ENOMEM, "cannot start the %s informer", pw->pool_res_name);
    }
    if (kube_informer_wait_synced(pw->pools, remaining_ms(deadline)) != 0) {
        return not_synced(pw, pw->pool_res_name, timeout_ms, err, errlen);
    }
    /* The pool's handlers have run for the listed pool: its pod informer (if any) exists. */
    pthread_mutex_lock(&pw->swap_lock);
    int rc = pw->pods ? kube_informer_wait_synced(pw->pods, remaining_ms(deadline)) : 0;
    pthread_mutex_unlock(&pw->swap_lock);
    return rc != 0 ? not_synced(pw, "pods", timeout_ms, err, errlen) : 0;
}

struct kube_poolwatch *kube_poolwatch_new(const struct kube_poolwatch_config *c, char *err,
                                          size_t errlen)
{
    TANDEM_ASSERT(c != NULL && c->client != NULL);
    long timeout_ms = c->sync_timeout_ms > 0 ? c->sync_timeout_ms : KUBE_POOLWATCH_DEFAULT_MS;
    int64_t deadline = tandem_now_ms() + timeout_ms;
    const struct pool_group *g = find_group(c->pool_group);
    int pool_found = 0, pod_found = 0;
    if (kube_pool_check_ref(c->pool_group, c->ns, c->pool, err, errlen) != 0) {
        return NULL;
    }
    struct kube_poolwatch *pw = calloc(1, sizeof(*pw));
    if (!pw) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&pw->swap_lock, NULL);
    pw->client = c->client;
    pw->group = g;
    pw->h = c->handlers;
    keep_lists(pw, c);
    snprintf(pw->pool_res_name, sizeof(pw->pool_res_name), "inferencepools.%s", g->group);
    pw->ns = strdup(c->ns);
    pw->pool = strdup(c->pool);
    pw->who = strdup(c->who ? c->who : "poolwatch");
    if (!pw->ns || !pw->pool || !pw->who) {
        tandem_set_err(err, errlen, "out of memory");
        goto err_free;
    }
    char field[300];
    snprintf(field, sizeof(field), "metadata.name=%s", pw->pool);
    if (preflight(pw, &g->res, pw->pool_res_name, field, &pool_found, err, errlen) != 0 ||
        preflight(pw, &KUBE_PODS, "pods", NULL, &pod_found, err, errlen) != 0) {
        goto err_free;
    }
    if (!pool_found) {
        log_warn("%s: %s %s/%s does not exist (yet); no pod is selected until it does", pw->who,
                 pw->pool_res_name, pw->ns, pw->pool);
    }
    if (start_pools(pw, deadline, timeout_ms, err, errlen) != 0) {
        goto err_free;
    }
    return pw;

err_free:
    kube_poolwatch_free(pw);
    return NULL;
}

void kube_poolwatch_free(struct kube_poolwatch *pw)
{
    if (!pw) {
        return;
    }
    kube_informer_free(pw->pools); /* no pool handler (no pods_replace) after this */
    kube_informer_free(pw->pods);
    free(pw->selector);
    free(pw->ns);
    free(pw->pool);
    free(pw->who);
    pthread_mutex_destroy(&pw->swap_lock);
    free(pw);
}
