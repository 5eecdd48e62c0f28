/*
 * The datastore (see datastore.h): a small array of endpoints and one of models. Pools have tens
 * to a few hundred pods, so lookups scan; nothing here is on a per-token path.
 */
#include "operator/epp/datastore.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/log.h"

struct epp_ds {
    struct epp_ds_hooks h;
    struct epp_endpoint **eps;
    size_t n, cap;
    struct epp_model **models;
    size_t n_models, cap_models;
    uint64_t next_id;
};

struct epp_ds *epp_ds_new(const struct epp_ds_hooks *h)
{
    struct epp_ds *ds = calloc(1, sizeof(*ds));
    if (ds && h) {
        ds->h = *h;
    }
    if (ds) {
        ds->next_id = 1;
    }
    return ds;
}

static void endpoint_free(struct epp_endpoint *ep)
{
    free(ep->name);
    free(ep->ns);
    free(ep->model);
    free(ep->m.running_loras);
    free(ep->m.waiting_loras);
    if (ep->labels) {
        json_object_put(ep->labels);
    }
    free(ep);
}

static void model_free(struct epp_model *m)
{
    if (!m) {
        return;
    }
    free(m->name);
    free(m->model_name);
    for (int i = 0; i < m->n_targets; i++) {
        free(m->targets[i].name);
    }
    free(m);
}

void epp_ds_free(struct epp_ds *ds)
{
    if (!ds) {
        return;
    }
    epp_ds_reset(ds);
    free(ds->eps);
    for (size_t i = 0; i < ds->n_models; i++) {
        model_free(ds->models[i]);
    }
    free(ds->models);
    free(ds);
}

static void remove_at(struct epp_ds *ds, size_t i)
{
    struct epp_endpoint *ep = ds->eps[i];
    ds->eps[i] = ds->eps[--ds->n];
    if (ds->h.on_removed) {
        ds->h.on_removed(ds->h.ud, ep);
    }
    endpoint_free(ep);
}

void epp_ds_reset(struct epp_ds *ds)
{
    while (ds->n > 0) {
        remove_at(ds, ds->n - 1);
    }
}

static ssize_t find(const struct epp_ds *ds, const char *ns, const char *name)
{
    for (size_t i = 0; i < ds->n; i++) {
        if (strcmp(ds->eps[i]->name, name) == 0 && strcmp(ds->eps[i]->ns, ns) == 0) {
            return (ssize_t)i;
        }
    }
    return -1;
}

/* "ip:port", bracketing IPv6; -EINVAL unless ip is an IP literal. */
static int format_addr(const char *ip, int port, char *out, size_t outlen)
{
    unsigned char a[16];
    int v6 = inet_pton(AF_INET6, ip, a) == 1;
    if (!v6 && inet_pton(AF_INET, ip, a) != 1) {
        return -EINVAL;
    }
    int n = snprintf(out, outlen, v6 ? "[%s]:%d" : "%s:%d", ip, port);
    return n > 0 && (size_t)n < outlen ? 0 : -EINVAL;
}

/* A label's value, or NULL (label keys hold dots, so json_get's paths cannot name them). */
static const char *label(struct json_object *labels, const char *key)
{
    struct json_object *v = NULL;
    return json_object_object_get_ex(labels, key, &v) ? json_object_get_string(v) : NULL;
}

static int str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int set_str(char **dst, const char *src)
{
    if (str_eq(*dst, src)) {
        return 0;
    }
    char *c = src ? strdup(src) : NULL;
    if (src && !c) {
        return -ENOMEM;
    }
    free(*dst);
    *dst = c;
    return 0;
}

static int update(struct epp_endpoint *ep, const struct epp_pod *p)
{
    struct json_object *labels = NULL;
    if (p->labels && json_object_deep_copy(p->labels, &labels, NULL) != 0) {
        return -ENOMEM;
    }
    if (set_str(&ep->model, p->model) != 0) {
        json_object_put(labels);
        return -ENOMEM;
    }
    if (ep->labels) {
        json_object_put(ep->labels);
    }
    ep->labels = labels ? labels : json_object_new_object();
    ep->role = epp_role_parse(label(ep->labels, EPP_ROLE_LABEL));
    ep->ready = p->ready;
    return ep->labels ? 0 : -ENOMEM;
}

int epp_ds_upsert(struct epp_ds *ds, const struct epp_pod *p)
{
    char addr[sizeof(((struct epp_endpoint *)0)->addr)];
    const char *ns = p->ns ? p->ns : "";
    if (!p->name || !p->name[0] || !p->ip || p->port < 1 || p->port > 65535 ||
        strlen(p->ip) >= sizeof(((struct epp_endpoint *)0)->ip) ||
        format_addr(p->ip, p->port, addr, sizeof(addr)) != 0) {
        return -EINVAL;
    }
    ssize_t i = find(ds, ns, p->name);
    if (i >= 0 && strcmp(ds->eps[i]->addr, addr) != 0) {
        remove_at(ds, (size_t)i); /* a new address is a new endpoint */
        i = -1;
    }
    if (i >= 0) {
        return update(ds->eps[i], p);
    }
    if (ds->n == ds->cap) {
        size_t cap = ds->cap ? ds->cap * 2 : 16;
        struct epp_endpoint **eps = realloc(ds->eps, cap * sizeof(struct epp_endpoint *));
        if (!eps) {
            return -ENOMEM;
        }
        ds->eps = eps;
        ds->cap = cap;
    }
    struct epp_endpoint *ep = calloc(1, sizeof(*ep));
    if (!ep || !(ep->name = strdup(p->name)) || !(ep->ns = strdup(ns)) || update(ep, p) != 0) {
        if (ep) {
            endpoint_free(ep);
        }
        return -ENOMEM;
    }
    ep->id = ds->next_id++;
    snprintf(ep->ip, sizeof(ep->ip), "%s", p->ip);
    ep->port = p->port;
    snprintf(ep->addr, sizeof(ep->addr), "%s", addr);
    ep->stale = true;
    ds->eps[ds->n++] = ep;
    if (ds->h.on_added) {
        ds->h.on_added(ds->h.ud, ep);
    }
    return 0;
}

void epp_ds_remove(struct epp_ds *ds, const char *ns, const char *name)
{
    ssize_t i = find(ds, ns ? ns : "", name);
    if (i >= 0) {
        remove_at(ds, (size_t)i);
    }
}

size_t epp_ds_count(const struct epp_ds *ds)
{
    return ds->n;
}

struct epp_endpoint *epp_ds_at(struct epp_ds *ds, size_t i)
{
    return i < ds->n ? ds->eps[i] : NULL;
}

struct epp_endpoint *epp_ds_by_addr(struct epp_ds *ds, const char *addr)
{
    for (size_t i = 0; addr && i < ds->n; i++) {
        if (strcmp(ds->eps[i]->addr, addr) == 0) {
            return ds->eps[i];
        }
    }
    return NULL;
}

struct epp_endpoint *epp_ds_by_id(struct epp_ds *ds, uint64_t id)
{
    for (size_t i = 0; i < ds->n; i++) {
        if (ds->eps[i]->id == id) {
            return ds->eps[i];
        }
    }
    return NULL;
}

struct epp_endpoint *epp_ds_by_name(struct epp_ds *ds, const char *ns, const char *name)
{
    ssize_t i = name ? find(ds, ns ? ns : "", name) : -1;
    return i >= 0 ? ds->eps[i] : NULL;
}

void epp_ds_update_staleness(struct epp_ds *ds, int64_t now_ms, int64_t threshold_ms)
{
    for (size_t i = 0; i < ds->n; i++) {
        struct epp_endpoint *ep = ds->eps[i];
        ep->stale = !ep->m.valid || now_ms - ep->m.updated_ms > threshold_ms;
    }
}

int epp_ds_candidates(struct epp_ds *ds, const char *model, int64_t now_ms,
                      struct epp_endpoint **out, int max)
{
    int n = 0;
    for (size_t i = 0; i < ds->n && n < max; i++) {
        struct epp_endpoint *ep = ds->eps[i];
        if (!ep->ready || ep->ejected_until_ms > now_ms) {
            continue;
        }
        if (model && ep->model && strcmp(model, ep->model) != 0) {
            continue;
        }
        out[n++] = ep;
    }
    return n;
}

int epp_ds_ready_count(const struct epp_ds *ds)
{
    int n = 0;
    for (size_t i = 0; i < ds->n; i++) {
        n += ds->eps[i]->ready;
    }
    return n;
}

/* ---- models ---- */

static struct epp_model *model_copy(const struct epp_model *m)
{
    struct epp_model *c = calloc(1, sizeof(*c));
    if (!c || !(c->name = strdup(m->name)) || !(c->model_name = strdup(m->model_name))) {
        model_free(c);
        return NULL;
    }
    c->criticality = m->criticality;
    c->created = m->created;
    for (int i = 0; i < m->n_targets && i < EPP_MAX_TARGETS; i++) {
        if (!(c->targets[i].name = strdup(m->targets[i].name))) {
            model_free(c);
            return NULL;
        }
        c->targets[i].weight = m->targets[i].weight;
        c->n_targets = i + 1;
    }
    return c;
}

int epp_ds_model_upsert(struct epp_ds *ds, const struct epp_model *m)
{
    if (!m->name || !m->model_name) {
        return -EINVAL;
    }
    struct epp_model *c = model_copy(m);
    if (!c) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < ds->n_models; i++) {
        if (strcmp(ds->models[i]->name, m->name) == 0) {
            model_free(ds->models[i]);
            ds->models[i] = c;
            return 0;
        }
    }
    if (ds->n_models == ds->cap_models) {
        size_t cap = ds->cap_models ? ds->cap_models * 2 : 8;
        struct epp_model **ms = realloc(ds->models, cap * sizeof(struct epp_model *));
        if (!ms) {
            model_free(c);
            return -ENOMEM;
        }
        ds->models = ms;
        ds->cap_models = cap;
    }
    ds->models[ds->n_models++] = c;
    return 0;
}

void epp_ds_model_remove(struct epp_ds *ds, const char *name)
{
    for (size_t i = 0; i < ds->n_models; i++) {
        if (strcmp(ds->models[i]->name, name) == 0) {
            model_free(ds->models[i]);
            ds->models[i] = ds->models[--ds->n_models];
            return;
        }
    }
}

size_t epp_ds_model_count(const struct epp_ds *ds)
{
    return ds->n_models;
}

const struct epp_model *epp_ds_model_at(const struct epp_ds *ds, size_t i)
{
    return i < ds->n_models ? ds->models[i] : NULL;
}

const struct epp_model *epp_ds_model_for(const struct epp_ds *ds, const char *model_name)
{
    const struct epp_model *best = NULL;
    for (size_t i = 0; model_name && i < ds->n_models; i++) {
        const struct epp_model *m = ds->models[i];
        if (strcmp(m->model_name, model_name) == 0 &&
            (!best || m->created < best->created ||
             (m->created == best->created && strcmp(m->name, best->name) < 0))) {
            best = m;
        }
    }
    return best;
}

/* RFC 3339 "2026-11-27T01:02:03Z" to seconds; 0 when absent or malformed. */
static int64_t parse_time(const char *s)
{
    struct tm tm = {0};
    if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm)) {
        return 0;
    }
    return (int64_t)timegm(&tm);
}

int epp_model_from_object(struct json_object *obj, struct epp_model *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    out->name = (char *)json_object_get_string(json_get(obj, "metadata.name"));
    out->model_name = (char *)json_object_get_string(json_get(obj, "spec.modelName"));
    if (!out->name || !out->model_name || !out->model_name[0]) {
        return tandem_fail(err, errlen, -EINVAL, "%s: spec.modelName: required",
                           out->name ? out->name : "metadata.name");
    }
    out->created = parse_time(json_object_get_string(json_get(obj, "metadata.creationTimestamp")));
    const char *crit = json_object_get_string(json_get(obj, "spec.criticality"));
    if (!crit || strcmp(crit, "Standard") == 0) {
        out->criticality = EPP_CRIT_STANDARD;
    } else if (strcmp(crit, "Critical") == 0) {
        out->criticality = EPP_CRIT_CRITICAL;
    } else if (strcmp(crit, "Sheddable") == 0) {
        out->criticality = EPP_CRIT_SHEDDABLE;
    } else {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s: spec.criticality: \"%s\" is not Critical, Standard or Sheddable",
                           out->name, crit);
    }
    struct json_object *targets = json_get(obj, "spec.targetModels");
    size_t n =
        json_object_is_type(targets, json_type_array) ? json_object_array_length(targets) : 0;
    if (n > EPP_MAX_TARGETS) {
        return tandem_fail(err, errlen, -EINVAL, "%s: spec.targetModels: more than %d entries",
                           out->name, EPP_MAX_TARGETS);
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *t = json_object_array_get_idx(targets, i);
        const char *name = json_object_get_string(json_get(t, "name"));
        struct json_object *w = json_get(t, "weight");
        int64_t weight = w ? json_object_get_int64(w) : 1;
        if (!name || !name[0] || weight < 1 || weight > 1000000) {
            return tandem_fail(err, errlen, -EINVAL,
                               "%s: spec.targetModels[%zu]: needs a name and a weight in "
                               "1..1000000",
                               out->name, i);
        }
        out->targets[i].name = (char *)name;
        out->targets[i].weight = (int)weight;
        out->n_targets = (int)i + 1;
    }
    return 0;
}

/* Whether the pod's Ready condition is True. */
static bool pod_ready(struct json_object *pod)
{
    struct json_object *conds = json_get(pod, "status.conditions");
    for (size_t i = 0;
         json_object_is_type(conds, json_type_array) && i < json_object_array_length(conds); i++) {
        struct json_object *c = json_object_array_get_idx(conds, i);
        const char *type = json_object_get_string(json_get(c, "type"));
        const char *status = json_object_get_string(json_get(c, "status"));
        if (type && strcmp(type, "Ready") == 0) {
            return status && strcmp(status, "True") == 0;
        }
    }
    return false;
}

int epp_pod_from_object(struct json_object *pod, int target_port, struct epp_pod *out)
{
    memset(out, 0, sizeof(*out));
    out->ns = json_object_get_string(json_get(pod, "metadata.namespace"));
    out->name = json_object_get_string(json_get(pod, "metadata.name"));
    out->ip = json_object_get_string(json_get(pod, "status.podIP"));
    if (!out->name || !out->ip || !out->ip[0]) {
        return -EINVAL;
    }
    const char *phase = json_object_get_string(json_get(pod, "status.phase"));
    bool finished = phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
    out->port = target_port;
    out->labels = json_get(pod, "metadata.labels");
    out->model = label(out->labels, "tandem.dev/model");
    out->ready = pod_ready(pod) && !finished && !json_get(pod, "metadata.deletionTimestamp");
    return 0;
}
