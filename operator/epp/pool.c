/*
 * The Kubernetes side of the data layer (see pool.h). Informer threads push events on a queue
 * under `lock` and wake the loop; the loop applies them to the datastore in order.
 */
#include "operator/epp/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/kube/informer.h"
#include "lib/kube/poolwatch.h"
#include "lib/list.h"
#include "lib/log.h"

static const struct kube_resource inference_models = {"tandem.dev", "v1alpha1", "inferencemodels",
                                                      "InferenceModel", 1};

enum ev_kind { EV_POOL, EV_RESET, EV_POD, EV_POD_DELETE, EV_MODEL, EV_MODEL_DELETE };

struct ev {
    struct list_node link;
    enum ev_kind kind;
    struct json_object *obj; /* a deep copy (NULL for EV_RESET and a deleted pool) */
};

/* A pod as last seen, kept to re-address the endpoints when the pool's target port changes. */
struct pod_rec {
    struct list_node link;
    struct json_object *pod;
};

struct epp_pool {
    uv_loop_t *loop;
    struct epp_ds *ds;
    char *ns, *name, *group;
    int default_port, port;
    struct kube_poolwatch *watch;
    struct kube_informer *models;
    pthread_mutex_t lock;
    struct list_node queue; /* struct ev, guarded by lock */
    uv_async_t async;
    struct list_node pods; /* struct pod_rec, loop thread only */
    bool synced;
};

static void push(struct epp_pool *p, enum ev_kind kind, struct json_object *obj)
{
    struct ev *e = calloc(1, sizeof(*e));
    if (!e) {
        log_error("epp: out of memory queueing a pool event");
        return;
    }
    e->kind = kind;
    if (obj && json_object_deep_copy(obj, &e->obj, NULL) != 0) {
        free(e);
        log_error("epp: out of memory queueing a pool event");
        return;
    }
    pthread_mutex_lock(&p->lock);
    list_push_back(&p->queue, &e->link);
    pthread_mutex_unlock(&p->lock);
    uv_async_send(&p->async);
}

/* ---- informer threads ---- */

static void w_pool(void *ud, struct json_object *pool, const char *selector)
{
    (void)selector;
    push(ud, EV_POOL, pool);
}

static void w_reset(void *ud)
{
    push(ud, EV_RESET, NULL);
}

static void w_pod(void *ud, struct json_object *pod)
{
    push(ud, EV_POD, pod);
}

static void w_pod_delete(void *ud, struct json_object *pod)
{
    push(ud, EV_POD_DELETE, pod);
}

static bool model_is_ours(const struct epp_pool *p, struct json_object *m)
{
    const char *ref = json_object_get_string(json_get(m, "spec.poolRef.name"));
    return ref && strcmp(ref, p->name) == 0;
}

static void m_add(void *ud, struct json_object *obj)
{
    struct epp_pool *p = ud;
    push(p, model_is_ours(p, obj) ? EV_MODEL : EV_MODEL_DELETE, obj);
}

static void m_update(void *ud, struct json_object *old_obj, struct json_object *new_obj)
{
    (void)old_obj;
    m_add(ud, new_obj);
}

static void m_delete(void *ud, struct json_object *obj)
{
    push(ud, EV_MODEL_DELETE, obj);
}

/* ---- the loop ---- */

static const char *name_of(struct json_object *o)
{
    return json_object_get_string(json_get(o, "metadata.name"));
}

static void pod_apply(struct epp_pool *p, struct json_object *pod)
{
    struct epp_pod ep;
    if (epp_pod_from_object(pod, p->port, &ep) != 0) {
        epp_ds_remove(p->ds, p->ns, name_of(pod) ? name_of(pod) : "");
        return;
    }
    int rc = epp_ds_upsert(p->ds, &ep);
    if (rc != 0) {
        log_warn("epp: pod %s/%s (%s): %s", ep.ns ? ep.ns : "", ep.name, ep.ip,
                 tandem_strerror(rc));
    }
}

static struct pod_rec *pod_find(struct epp_pool *p, const char *name)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&p->pods, n, tmp)
    {
        struct pod_rec *r = list_entry(n, struct pod_rec, link);
        const char *rn = name_of(r->pod);
        if (rn && name && strcmp(rn, name) == 0) {
            return r;
        }
    }
    return NULL;
}

static void pod_forget(struct epp_pool *p, const char *name)
{
    struct pod_rec *r = pod_find(p, name);
    if (r) {
        list_unlink(&r->link);
        json_object_put(r->pod);
        free(r);
    }
}

static void pods_forget_all(struct epp_pool *p)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&p->pods, n, tmp)
    {
        struct pod_rec *r = list_entry(n, struct pod_rec, link);
        list_unlink(&r->link);
        json_object_put(r->pod);
        free(r);
    }
}

/* Keeps pod (taking its reference) as the last state of its name. */
static void pod_remember(struct epp_pool *p, struct json_object *pod)
{
    pod_forget(p, name_of(pod));
    struct pod_rec *r = calloc(1, sizeof(*r));
    if (!r) {
        json_object_put(pod);
        return;
    }
    r->pod = pod;
    list_push_back(&p->pods, &r->link);
}

static void pool_apply(struct epp_pool *p, struct json_object *pool)
{
    int port = pool ? kube_pool_target_port(p->group, pool) : 0;
    if (port == 0) {
        port = p->default_port;
    }
    if (port == p->port) {
        return;
    }
    log_info("epp: pool %s/%s: target port %d", p->ns, p->name, port);
    p->port = port;
    struct list_node *n, *tmp;
    list_for_each_safe(&p->pods, n, tmp)
    {
        pod_apply(p, list_entry(n, struct pod_rec, link)->pod);
    }
}

static void model_apply(struct epp_pool *p, struct json_object *obj)
{
    struct epp_model m;
    char err[256];
    if (epp_model_from_object(obj, &m, err, sizeof err) != 0) {
        log_warn("epp: InferenceModel %s", err);
        epp_ds_model_remove(p->ds, name_of(obj) ? name_of(obj) : "");
        return;
    }
    if (epp_ds_model_upsert(p->ds, &m) != 0) {
        log_error("epp: out of memory adding InferenceModel %s", m.name);
    }
}

static void apply(struct epp_pool *p, struct ev *e)
{
    const char *name = e->obj ? name_of(e->obj) : NULL;
    switch (e->kind) {
    case EV_POOL:
        pool_apply(p, e->obj);
        break;
    case EV_RESET:
        pods_forget_all(p);
        epp_ds_reset(p->ds);
        break;
    case EV_POD:
        pod_apply(p, e->obj);
        pod_remember(p, json_object_get(e->obj));
        break;
    case EV_POD_DELETE:
        pod_forget(p, name);
        epp_ds_remove(p->ds, p->ns, name ? name : "");
        break;
    case EV_MODEL:
        model_apply(p, e->obj);
        break;
    case EV_MODEL_DELETE:
        epp_ds_model_remove(p->ds, name ? name : "");
        break;
    }
}

static void on_async(uv_async_t *a)
{
    struct epp_pool *p = a->data;
    struct list_node q;
    list_init(&q);
    pthread_mutex_lock(&p->lock);
    while (!list_empty(&p->queue)) {
        struct list_node *n = list_first(&p->queue);
        list_unlink(n);
        list_push_back(&q, n);
    }
    pthread_mutex_unlock(&p->lock);
    p->synced = p->watch != NULL; /* the first drain after the start has the listed state */
    struct list_node *n, *tmp;
    list_for_each_safe(&q, n, tmp)
    {
        struct ev *e = list_entry(n, struct ev, link);
        list_unlink(&e->link);
        apply(p, e);
        if (e->obj) {
            json_object_put(e->obj);
        }
        free(e);
    }
}

struct epp_pool *epp_pool_new(uv_loop_t *loop, struct epp_ds *ds, const struct epp_pool_config *c,
                              char *err, size_t errlen)
{
    struct epp_pool *p = calloc(1, sizeof(*p));
    if (!p) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    p->loop = loop;
    p->ds = ds;
    p->default_port = c->default_port > 0 ? c->default_port : 8000;
    p->port = p->default_port;
    pthread_mutex_init(&p->lock, NULL);
    list_init(&p->queue);
    list_init(&p->pods);
    p->ns = strdup(c->ns);
    p->name = strdup(c->name);
    p->group = strdup(c->group ? c->group : KUBE_POOL_DEFAULT_GROUP);
    uv_async_init(loop, &p->async, on_async);
    p->async.data = p;
    if (!p->ns || !p->name || !p->group) {
        tandem_set_err(err, errlen, "out of memory");
        goto err_free;
    }
    static const char *const extra_meta[] = {"deletionTimestamp", NULL};
    static const char *const extra_status[] = {"conditions", NULL};
    struct kube_poolwatch_config wc = {
        .client = c->client,
        .ns = c->ns,
        .pool = c->name,
        .pool_group = p->group,
        .sync_timeout_ms = c->sync_timeout_ms,
        .who = "epp",
        .extra_metadata = extra_meta,
        .extra_status = extra_status,
        .handlers = {.on_pool = w_pool,
                     .on_reset = w_reset,
                     .on_pod = w_pod,
                     .on_pod_delete = w_pod_delete,
                     .ud = p},
    };
    p->watch = kube_poolwatch_new(&wc, err, errlen);
    if (!p->watch) {
        goto err_free;
    }
    if (strcmp(p->group, "tandem.dev") == 0) {
        static const struct kube_informer_handlers h0 = {
            .on_add = m_add, .on_update = m_update, .on_delete = m_delete};
        struct kube_informer_handlers h = h0;
        h.ud = p;
        p->models = kube_informer_new(c->client, &inference_models, p->ns, NULL, 0, &h);
        if (!p->models || kube_informer_start(p->models) != 0 ||
            kube_informer_wait_synced(p->models,
                                      c->sync_timeout_ms > 0 ? c->sync_timeout_ms : 30000) != 0) {
            tandem_set_err(err, errlen,
                           "the cache of inferencemodels.tandem.dev in namespace %s did not sync "
                           "(the ServiceAccount needs get, list and watch on it)",
                           p->ns);
            goto err_free;
        }
    }
    uv_async_send(&p->async);
    return p;

err_free:
    epp_pool_free(p);
    return NULL;
}

bool epp_pool_synced(const struct epp_pool *p)
{
    return p && p->synced;
}

static void on_async_closed(uv_handle_t *h)
{
    free(h->data);
}

void epp_pool_free(struct epp_pool *p)
{
    if (!p) {
        return;
    }
    kube_poolwatch_free(p->watch); /* joins the threads: nothing is pushed after this */
    kube_informer_free(p->models);
    struct list_node *n, *tmp;
    list_for_each_safe(&p->queue, n, tmp)
    {
        struct ev *e = list_entry(n, struct ev, link);
        list_unlink(&e->link);
        if (e->obj) {
            json_object_put(e->obj);
        }
        free(e);
    }
    pods_forget_all(p);
    free(p->ns);
    free(p->name);
    free(p->group);
    pthread_mutex_destroy(&p->lock);
    uv_close((uv_handle_t *)&p->async, on_async_closed);
}
