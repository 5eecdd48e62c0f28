/*
 * The sidecar's SSRF allowlist (see allowlist.h): a pool informer whose handler turns the named
 * pool's spec.selector into a label selector and (re)starts a pod informer with it; the pod
 * informer's handlers keep the set of pod names and IPs.
 *
 * Locks: `lock` guards the set (both tables) and is the only lock the pod handlers and
 * allowlist_allows take. `swap_lock` guards the pod informer pointer and the current selector;
 * the pool handler holds it while it replaces the pod informer, and allowlist_new holds it while
 * it waits for the first pod sync. It is never taken with `lock` held, and no informer is stopped
 * with `lock` held (stopping joins a thread whose handlers take `lock`).
 */
#include "agent/allowlist.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <json-c/linkhash.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/kube/config.h"
#include "lib/kube/informer.h"
#include "lib/kube/validate.h"
#include "lib/log.h"

#define MAX_POD_IPS     4          /* podIP + podIPs (one per family), distinct */
#define MAX_TERMS       160        /* matchLabels (64) + matchExpressions (16), with room */
#define MAX_VALUES      64         /* values of one In / NotIn expression (the CRD's maxItems) */
#define MAX_SELECTOR    (64 << 10) /* bytes of a rendered label selector */
#define HOST_MAX        256        /* a normalised host: a DNS subdomain (253) or an address */
#define PREFLIGHT_LIMIT 1

/* How a pool group's spec.selector is shaped. */
enum selector_shape {
    SHAPE_LABEL_SELECTOR, /* {matchLabels, matchExpressions} */
    SHAPE_MATCH_LABELS,   /* {matchLabels} */
    SHAPE_PLAIN_MAP,      /* {key: value, ...} */
};

struct pool_group {
    const char *group;
    const char *version;
    enum selector_shape shape;
};

static const struct pool_group pool_groups[] = {
    {"tandem.dev", "v1alpha1", SHAPE_LABEL_SELECTOR},
    {"inference.networking.k8s.io", "v1", SHAPE_MATCH_LABELS},
    {"inference.networking.x-k8s.io", "v1alpha2", SHAPE_PLAIN_MAP},
};

/* One pod of the set. */
struct pod_entry {
    char *name; /* the pods table's key */
    size_t nips;
    char ips[MAX_POD_IPS][INET6_ADDRSTRLEN]; /* canonical addresses */
};

/* One address of the set, with the number of pods that have it (a released IP may already be
 * another pod's while the first pod's deletion is still on its way). */
struct ip_ref {
    char *ip; /* the ips table's key */
    int refs;
};

struct allowlist {
    struct kube_client *client;
    int own_client; /* client made here (freed with the allowlist) */
    char *ns, *pool;
    const struct pool_group *group;
    struct kube_resource pool_res; /* inferencepools of the group */
    char pool_res_name[96];        /* "inferencepools.tandem.dev", for messages */
    struct kube_informer *pools;

    pthread_mutex_t swap_lock;
    struct kube_informer *pods; /* NULL while the pool has no usable selector */
    char *selector;             /* the pod informer's label selector, or NULL */
    char pool_err[256];         /* the pool's selector problem logged last (pool thread only) */

    pthread_mutex_t lock;
    struct lh_table *by_name; /* pod name → struct pod_entry */
    struct lh_table *by_ip;   /* canonical address → struct ip_ref */
    int full_logged;          /* ALLOWLIST_MAX_PODS reached (logged once) */
};

/* ---- hosts ---- */

/* The canonical text of an IP literal (no brackets) into out (INET6_ADDRSTRLEN bytes): 1, or 0
 * when s is not one. IPv4-mapped IPv6 addresses become their IPv4 address. */
static int canonical_ip(const char *s, char out[INET6_ADDRSTRLEN])
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, s, &a4) == 1) {
        return inet_ntop(AF_INET, &a4, out, INET6_ADDRSTRLEN) != NULL;
    }
    if (inet_pton(AF_INET6, s, &a6) != 1) {
        return 0;
    }
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
        memcpy(&a4, &a6.s6_addr[12], sizeof(a4));
        return inet_ntop(AF_INET, &a4, out, INET6_ADDRSTRLEN) != NULL;
    }
    return inet_ntop(AF_INET6, &a6, out, INET6_ADDRSTRLEN) != NULL;
}

int allowlist_normalize_host(const char *host, char *out, size_t outlen)
{
    char buf[HOST_MAX];
    char ip[INET6_ADDRSTRLEN];
    if (!host || !out) {
        return -EINVAL;
    }
    size_t len = strlen(host);
    if (len == 0 || len >= sizeof(buf)) {
        return -EINVAL;
    }
    if (host[0] == '[') {
        /* only an IPv6 literal may be bracketed */
        if (len < 3 || host[len - 1] != ']') {
            return -EINVAL;
        }
        memcpy(buf, host + 1, len - 2);
        buf[len - 2] = '\0';
        if (strchr(buf, ':') == NULL || !canonical_ip(buf, ip)) {
            return -EINVAL;
        }
    } else if (canonical_ip(host, ip)) {
        /* an IP literal */
    } else {
        for (size_t i = 0; i <= len; i++) {
            buf[i] = (char)tolower((unsigned char)host[i]);
        }
        struct in_addr legacy;
        /* inet_aton accepts what getaddrinfo would take for an IPv4 address ("10.1",
         * "2130706433", "0x7f.1"): such a "name" never names a pod. */
        if (!kube_valid_dns_subdomain(buf) || inet_aton(buf, &legacy) != 0) {
            return -EINVAL;
        }
        if (strlen(buf) >= outlen) {
            return -ENOSPC;
        }
        strcpy(out, buf);
        return ALLOWLIST_HOST_NAME;
    }
    if (strlen(ip) >= outlen) {
        return -ENOSPC;
    }
    strcpy(out, ip);
    return ALLOWLIST_HOST_IP;
}

/* ---- the pool reference ---- */

int allowlist_parse_pool_ref(const char *ref, char *ns, size_t nslen, char *name, size_t namelen)
{
    const char *slash = ref ? strchr(ref, '/') : NULL;
    if (!slash || !ns || !name) {
        return -EINVAL;
    }
    size_t nl = (size_t)(slash - ref);
    if (nl >= nslen || strlen(slash + 1) >= namelen) {
        return -ENOSPC;
    }
    memcpy(ns, ref, nl);
    ns[nl] = '\0';
    strcpy(name, slash + 1);
    if (!kube_valid_dns_label(ns) || !kube_valid_dns_subdomain(name)) {
        return -EINVAL;
    }
    return 0;
}

/* ---- selectors ---- */

static const struct pool_group *find_group(const char *group)
{
    if (!group) {
        group = ALLOWLIST_DEFAULT_GROUP;
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

int allowlist_pool_selector(const char *pool_group, struct json_object *pool, char **out, char *err,
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

/* ---- the set ---- */

static void pod_entry_free(struct lh_entry *e)
{
    struct pod_entry *p = (struct pod_entry *)lh_entry_v(e);
    free(p->name);
    free(p);
}

static void ip_ref_free(struct lh_entry *e)
{
    struct ip_ref *r = (struct ip_ref *)lh_entry_v(e);
    free(r->ip);
    free(r);
}

static int set_init(struct allowlist *al)
{
    al->by_name = lh_kchar_table_new(64, pod_entry_free);
    al->by_ip = lh_kchar_table_new(64, ip_ref_free);
    return al->by_name && al->by_ip ? 0 : -ENOMEM;
}

static void set_deinit(struct allowlist *al)
{
    if (al->by_name) {
        lh_table_free(al->by_name);
    }
    if (al->by_ip) {
        lh_table_free(al->by_ip);
    }
    al->by_name = al->by_ip = NULL;
}

/* Drops one reference to each of n addresses (lock held). */
static void set_unref_ips(struct allowlist *al, const char (*ips)[INET6_ADDRSTRLEN], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        void *v;
        if (lh_table_lookup_ex(al->by_ip, ips[i], &v) && --((struct ip_ref *)v)->refs == 0) {
            lh_table_delete(al->by_ip, ips[i]);
        }
    }
}

/* Drops pod name and its addresses (lock held). */
static void set_remove(struct allowlist *al, const char *name)
{
    void *v;
    if (lh_table_lookup_ex(al->by_name, name, &v)) {
        const struct pod_entry *p = v;
        set_unref_ips(al, p->ips, p->nips);
        lh_table_delete(al->by_name, name);
    }
}

/* Adds an address reference (lock held). */
static int set_ref_ip(struct allowlist *al, const char *ip)
{
    void *v;
    if (lh_table_lookup_ex(al->by_ip, ip, &v)) {
        ((struct ip_ref *)v)->refs++;
        return 0;
    }
    struct ip_ref *r = calloc(1, sizeof(*r));
    if (!r || !(r->ip = strdup(ip))) {
        free(r);
        return -ENOMEM;
    }
    r->refs = 1;
    if (lh_table_insert(al->by_ip, r->ip, r) != 0) {
        free(r->ip);
        free(r);
        return -ENOMEM;
    }
    return 0;
}

/* Replaces pod p's entry (lock held); p is consumed. */
static void set_put(struct allowlist *al, struct pod_entry *p)
{
    size_t added = 0;
    set_remove(al, p->name);
    if (lh_table_length(al->by_name) >= ALLOWLIST_MAX_PODS) {
        if (!al->full_logged) {
            log_error("allowlist: more than %d pods; pod %s and later ones are not allowed",
                      ALLOWLIST_MAX_PODS, p->name);
            al->full_logged = 1;
        }
        goto err_free_entry;
    }
    for (; added < p->nips; added++) {
        if (set_ref_ip(al, p->ips[added]) != 0) {
            goto err_unref;
        }
    }
    if (lh_table_insert(al->by_name, p->name, p) != 0) {
        goto err_unref;
    }
    return;
err_unref:
    log_error("allowlist: out of memory adding pod %s", p->name);
    set_unref_ips(al, p->ips, added);
err_free_entry:
    free(p->name);
    free(p);
}

static void set_clear(struct allowlist *al)
{
    pthread_mutex_lock(&al->lock);
    struct lh_entry *e, *tmp;
    lh_foreach_safe(al->by_name, e, tmp)
    {
        lh_table_delete_entry(al->by_name, e);
    }
    lh_foreach_safe(al->by_ip, e, tmp)
    {
        lh_table_delete_entry(al->by_ip, e);
    }
    al->full_logged = 0;
    pthread_mutex_unlock(&al->lock);
}

/* ---- the pod informer ---- */

/* Adds ip (any textual form) to p unless invalid or already there. */
static void pod_add_ip(struct pod_entry *p, const char *ip)
{
    char canon[INET6_ADDRSTRLEN];
    if (!ip || !ip[0] || !canonical_ip(ip, canon)) {
        return;
    }
    for (size_t i = 0; i < p->nips; i++) {
        if (strcmp(p->ips[i], canon) == 0) {
            return;
        }
    }
    if (p->nips < MAX_POD_IPS) {
        strcpy(p->ips[p->nips++], canon);
    }
}

/* The set entry a pod stands for: NULL when it has no address, is finished (Succeeded or
 * Failed: the kubelet has released its IP) or on OOM. */
static struct pod_entry *pod_entry_of(struct json_object *pod)
{
    const char *name = json_object_get_string(json_get(pod, "metadata.name"));
    const char *phase = json_object_get_string(json_get(pod, "status.phase"));
    if (!name || (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))) {
        return NULL;
    }
    struct pod_entry *p = calloc(1, sizeof(*p));
    if (!p) {
        return NULL;
    }
    pod_add_ip(p, json_object_get_string(json_get(pod, "status.podIP")));
    struct json_object *ips = json_get(pod, "status.podIPs");
    for (size_t i = 0;
         json_object_is_type(ips, json_type_array) && i < json_object_array_length(ips); i++) {
        pod_add_ip(p, json_object_get_string(json_get(json_object_array_get_idx(ips, i), "ip")));
    }
    if (p->nips == 0 || !(p->name = strdup(name))) {
        free(p);
        return NULL;
    }
    return p;
}

static void pod_upsert(struct allowlist *al, struct json_object *pod)
{
    const char *name = json_object_get_string(json_get(pod, "metadata.name"));
    if (!name) {
        return;
    }
    struct pod_entry *p = pod_entry_of(pod);
    pthread_mutex_lock(&al->lock);
    if (p) {
        set_put(al, p);
    } else {
        set_remove(al, name);
    }
    pthread_mutex_unlock(&al->lock);
}

static void on_pod_add(void *ud, struct json_object *obj)
{
    pod_upsert(ud, obj);
}

static void on_pod_update(void *ud, struct json_object *old_obj, struct json_object *new_obj)
{
    (void)old_obj;
    pod_upsert(ud, new_obj);
}

static void on_pod_delete(void *ud, struct json_object *obj)
{
    struct allowlist *al = ud;
    const char *name = json_object_get_string(json_get(obj, "metadata.name"));
    if (name) {
        pthread_mutex_lock(&al->lock);
        set_remove(al, name);
        pthread_mutex_unlock(&al->lock);
    }
}

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

/* Pods are cached with only what the set and the informer read (a pod's spec and status are
 * often tens of KB). */
static void pod_transform(void *ud, struct json_object *pod)
{
    static const char *const top[] = {"apiVersion", "kind", "metadata", "status"};
    static const char *const meta[] = {"name", "namespace", "uid", "resourceVersion", "labels"};
    static const char *const status[] = {"phase", "podIP", "podIPs"};
    (void)ud;
    keep_only(pod, top, ARRAY_SIZE(top));
    keep_only(json_get(pod, "metadata"), meta, ARRAY_SIZE(meta));
    keep_only(json_get(pod, "status"), status, ARRAY_SIZE(status));
}

/* Replaces the pod informer by one for selector (NULL: none), emptying the set in between. Pool
 * informer thread (or allowlist_free's). */
static void pods_replace(struct allowlist *al, char *selector)
{
    pthread_mutex_lock(&al->swap_lock);
    kube_informer_free(al->pods); /* joins its thread: no pod handler runs after this */
    al->pods = NULL;
    free(al->selector);
    al->selector = selector;
    set_clear(al);
    if (selector) {
        static const struct kube_informer_handlers h0 = {
            .on_add = on_pod_add, .on_update = on_pod_update, .on_delete = on_pod_delete};
        struct kube_informer_handlers h = h0;
        h.ud = al;
        struct kube_informer *inf =
            kube_informer_new(al->client, &KUBE_PODS, al->ns, selector, 0, &h);
        if (!inf || kube_informer_set_transform(inf, pod_transform, NULL) != 0 ||
            kube_informer_start(inf) != 0) {
            log_error("allowlist: cannot start the pod informer for selector %s; nothing is "
                      "allowed",
                      selector);
            kube_informer_free(inf);
        } else {
            al->pods = inf;
        }
    }
    pthread_mutex_unlock(&al->swap_lock);
}

/* ---- the pool informer ---- */

static int is_our_pool(const struct allowlist *al, struct json_object *obj)
{
    const char *name = json_object_get_string(json_get(obj, "metadata.name"));
    return name && strcmp(name, al->pool) == 0;
}

/* The pool (NULL: deleted) now has this state: follow its selector. */
static void pool_changed(struct allowlist *al, struct json_object *pool)
{
    char err[256] = "";
    char *selector = NULL;
    if (pool && allowlist_pool_selector(al->group->group, pool, &selector, err, sizeof(err)) != 0) {
        if (!err[0]) {
            snprintf(err, sizeof(err), "out of memory");
        }
        /* once per problem, not at every status write of the pool */
        if (strcmp(err, al->pool_err) != 0) {
            log_error("allowlist: %s %s/%s: %s; nothing is allowed", al->pool_res_name, al->ns,
                      al->pool, err);
            snprintf(al->pool_err, sizeof(al->pool_err), "%s", err);
        }
    } else {
        al->pool_err[0] = '\0';
    }
    /* only the pool thread writes al->selector, so it can be read here without swap_lock */
    if (selector == al->selector ||
        (selector && al->selector && strcmp(selector, al->selector) == 0)) {
        free(selector);
        return;
    }
    if (selector) {
        log_info("allowlist: %s %s/%s selects pods by \"%s\"", al->pool_res_name, al->ns, al->pool,
                 selector);
    } else if (!pool) {
        log_warn("allowlist: %s %s/%s is gone; nothing is allowed", al->pool_res_name, al->ns,
                 al->pool);
    }
    pods_replace(al, selector);
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
    static const char *const meta[] = {"name", "namespace", "uid", "resourceVersion"};
    const struct allowlist *al = ud;
    keep_only(obj, top, is_our_pool(al, obj) ? ARRAY_SIZE(top) : ARRAY_SIZE(top) - 1);
    keep_only(json_get(obj, "metadata"), meta, ARRAY_SIZE(meta));
}

/* ---- start and stop ---- */

/* Lists one object of r (with the field selector, NULL for none) to find out at once whether
 * the collection is served and may be listed. */
static int preflight(struct allowlist *al, const struct kube_resource *r, const char *what,
                     const char *field_selector, int *found, char *err, size_t errlen)
{
    struct kube_list_options lo = {.field_selector = field_selector, .limit = PREFLIGHT_LIMIT};
    struct kube_error ke = {0};
    struct json_object *list = NULL;
    int rc = kube_list(al->client, r, al->ns, &lo, &list, &ke);
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
                           what, al->ns, tandem_strerror(rc), ke.message, what, al->ns);
    }
    if (rc == KUBE_ENOTFOUND) {
        return tandem_fail(err, errlen, rc,
                           "the API server does not serve %s/%s (is the CRD installed? is "
                           "--pool-group right?)",
                           what, r->version);
    }
    return tandem_fail(err, errlen, rc, "cannot list %s in namespace %s: %s: %s", what, al->ns,
                       tandem_strerror(rc), ke.message);
}

static long remaining_ms(int64_t deadline_ms)
{
    int64_t left = deadline_ms - tandem_now_ms();
    return left > 0 ? (long)left : 0;
}

static int not_synced(struct allowlist *al, const char *what, long timeout_ms, char *err,
                      size_t errlen)
{
    return tandem_fail(err, errlen, -ETIMEDOUT,
                       "the cache of %s in namespace %s did not sync within %ld ms (the "
                       "ServiceAccount needs get, list and watch on %s in namespace %s)",
                       what, al->ns, timeout_ms, what, al->ns);
}

static int make_client(struct allowlist *al, const char *kubeconfig, char *err, size_t errlen)
{
    struct kube_config *cfg = NULL;
    char msg[512] = "";
    int rc = kube_config_load(kubeconfig, NULL, &cfg, msg, sizeof(msg));
    if (rc != 0) {
        return tandem_fail(err, errlen, rc, "kubeconfig: %s", msg);
    }
    al->client = kube_client_new(cfg, NULL, msg, sizeof(msg));
    kube_config_free(cfg);
    if (!al->client) {
        return tandem_fail(err, errlen, -EINVAL, "Kubernetes client: %s", msg);
    }
    al->own_client = 1;
    return 0;
}

struct allowlist *allowlist_new(const struct allowlist_config *c, char *err, size_t errlen)
{
    long timeout_ms = c->sync_timeout_ms > 0 ? c->sync_timeout_ms : ALLOWLIST_DEFAULT_SYNC_MS;
    int64_t deadline = tandem_now_ms() + timeout_ms;
    const struct pool_group *g = find_group(c->pool_group);
    int pool_found = 0, pod_found = 0;
    TANDEM_ASSERT(c != NULL);
    if (!g) {
        tandem_set_err(err, errlen,
                       "unknown pool group \"%s\" (tandem.dev, inference.networking.k8s.io or "
                       "inference.networking.x-k8s.io)",
                       c->pool_group);
        return NULL;
    }
    if (!c->ns || !kube_valid_dns_label(c->ns) || !c->pool || !kube_valid_dns_subdomain(c->pool)) {
        tandem_set_err(err, errlen,
                       "the pool must be given as a namespace and a name (got "
                       "\"%s/%s\")",
                       c->ns ? c->ns : "", c->pool ? c->pool : "");
        return NULL;
    }
    struct allowlist *al = calloc(1, sizeof(*al));
    if (!al) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&al->lock, NULL);
    pthread_mutex_init(&al->swap_lock, NULL);
    al->group = g;
    al->pool_res = (struct kube_resource){.group = g->group,
                                          .version = g->version,
                                          .plural = "inferencepools",
                                          .kind = "InferencePool",
                                          .namespaced = 1};
    snprintf(al->pool_res_name, sizeof(al->pool_res_name), "inferencepools.%s", g->group);
    al->ns = strdup(c->ns);
    al->pool = strdup(c->pool);
    if (!al->ns || !al->pool || set_init(al) != 0) {
        tandem_set_err(err, errlen, "out of memory");
        goto err_free;
    }
    if (c->client) {
        al->client = c->client;
    } else if (make_client(al, c->kubeconfig, err, errlen) != 0) {
        goto err_free;
    }

    char field[300];
    snprintf(field, sizeof(field), "metadata.name=%s", al->pool);
    if (preflight(al, &al->pool_res, al->pool_res_name, field, &pool_found, err, errlen) != 0 ||
        preflight(al, &KUBE_PODS, "pods", NULL, &pod_found, err, errlen) != 0) {
        goto err_free;
    }
    if (!pool_found) {
        log_warn("allowlist: %s %s/%s does not exist (yet); nothing is allowed until it does",
                 al->pool_res_name, al->ns, al->pool);
    }

    static const struct kube_informer_handlers h0 = {
        .on_add = on_pool_add, .on_update = on_pool_update, .on_delete = on_pool_delete};
    struct kube_informer_handlers h = h0;
    h.ud = al;
    al->pools = kube_informer_new(al->client, &al->pool_res, al->ns, NULL, 0, &h);
    if (!al->pools || kube_informer_set_transform(al->pools, pool_transform, al) != 0 ||
        kube_informer_start(al->pools) != 0) {
        tandem_set_err(err, errlen, "cannot start the %s informer", al->pool_res_name);
        goto err_free;
    }
    if (kube_informer_wait_synced(al->pools, remaining_ms(deadline)) != 0) {
        not_synced(al, al->pool_res_name, timeout_ms, err, errlen);
        goto err_free;
    }
    /* The pool's handlers have run for the listed pool: its pod informer (if any) exists. */
    pthread_mutex_lock(&al->swap_lock);
    int rc = al->pods ? kube_informer_wait_synced(al->pods, remaining_ms(deadline)) : 0;
    pthread_mutex_unlock(&al->swap_lock);
    if (rc != 0) {
        not_synced(al, "pods", timeout_ms, err, errlen);
        goto err_free;
    }
    log_info("allowlist: %s %s/%s: %d pods allowed", al->pool_res_name, al->ns, al->pool,
             allowlist_size(al));
    return al;

err_free:
    allowlist_free(al);
    return NULL;
}

void allowlist_free(struct allowlist *al)
{
    if (!al) {
        return;
    }
    kube_informer_free(al->pools); /* no pool handler (no pods_replace) after this */
    kube_informer_free(al->pods);
    free(al->selector);
    set_deinit(al);
    if (al->own_client) {
        kube_client_free(al->client);
    }
    free(al->ns);
    free(al->pool);
    pthread_mutex_destroy(&al->swap_lock);
    pthread_mutex_destroy(&al->lock);
    free(al);
}

bool allowlist_allows(void *ud, const char *host)
{
    struct allowlist *al = ud;
    char key[HOST_MAX];
    void *v;
    if (!al || !host) {
        return false;
    }
    int kind = allowlist_normalize_host(host, key, sizeof(key));
    if (kind < 0) {
        return false;
    }
    pthread_mutex_lock(&al->lock);
    bool ok = lh_table_lookup_ex(kind == ALLOWLIST_HOST_IP ? al->by_ip : al->by_name, key, &v);
    pthread_mutex_unlock(&al->lock);
    return ok;
}

int allowlist_size(struct allowlist *al)
{
    if (!al) {
        return 0;
    }
    pthread_mutex_lock(&al->lock);
    int n = lh_table_length(al->by_name);
    pthread_mutex_unlock(&al->lock);
    return n;
}
