/*
 * The sidecar's SSRF allowlist (see allowlist.h): a lib/kube pool watch whose pod handlers keep
 * the set of pod names and IPs of the pool.
 *
 * `lock` guards the set (both tables) and is the only lock the handlers and allowlist_allows take.
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

#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/kube/config.h"
#include "lib/kube/poolwatch.h"
#include "lib/kube/validate.h"
#include "lib/log.h"

#define MAX_POD_IPS 4   /* podIP + podIPs (one per family), distinct */
#define HOST_MAX    256 /* a normalised host: a DNS subdomain (253) or an address */

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
    struct kube_poolwatch *watch;

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

static void on_reset(void *ud)
{
    set_clear(ud);
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
    TANDEM_ASSERT(c != NULL);
    /* before a client is made: a bad reference is the caller's error, not the cluster's */
    if (kube_pool_check_ref(c->pool_group, c->ns, c->pool, err, errlen) != 0) {
        return NULL;
    }
    struct allowlist *al = calloc(1, sizeof(*al));
    if (!al) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&al->lock, NULL);
    if (set_init(al) != 0) {
        tandem_set_err(err, errlen, "out of memory");
        goto err_free;
    }
    if (c->client) {
        al->client = c->client;
    } else if (make_client(al, c->kubeconfig, err, errlen) != 0) {
        goto err_free;
    }
    struct kube_poolwatch_config wc = {
        .client = al->client,
        .ns = c->ns,
        .pool = c->pool,
        .pool_group = c->pool_group,
        .sync_timeout_ms = c->sync_timeout_ms > 0 ? c->sync_timeout_ms : ALLOWLIST_DEFAULT_SYNC_MS,
        .who = "allowlist",
        .handlers = {.on_reset = on_reset,
                     .on_pod = on_pod_add,
                     .on_pod_delete = on_pod_delete,
                     .ud = al},
    };
    al->watch = kube_poolwatch_new(&wc, err, errlen);
    if (!al->watch) {
        goto err_free;
    }
    log_info("allowlist: pool %s/%s: %d pods allowed", c->ns, c->pool, allowlist_size(al));
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
    kube_poolwatch_free(al->watch); /* no handler runs after this */
    set_deinit(al);
    if (al->own_client) {
        kube_client_free(al->client);
    }
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
