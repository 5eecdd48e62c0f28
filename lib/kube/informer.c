/*
 * Informer: client-go's Reflector (list, then watch with resourceVersion tracking, backoff and
 * relist on 410) feeding an indexed cache and the event handlers. See informer.h.
 *
 * Threads: the informer thread owns every change to the cache and calls the handlers; readers
 * (get/list/by_*) take the lock and deep-copy. json-c reference counts are not atomic, so only
 * the informer thread ever takes or drops references on cached objects. kube_watch polls the
 * `wake` flag; stop() and the resync timer set it to get the thread out of a watch.
 */
#include "lib/kube/informer.h"

#include <errno.h>
#include <json-c/linkhash.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/json.h"
#include "lib/kube/watch.h"
#include "lib/log.h"

#define LIST_PAGE           500
#define BACKOFF_INITIAL_NS  800000000LL    /* 800 ms */
#define BACKOFF_CAP_NS      30000000000LL  /* 30 s */
#define BACKOFF_RESET_NS    120000000000LL /* 2 min without a backoff resets it */
#define MIN_WATCH_TIMEOUT_S 300            /* timeoutSeconds in [300, 600) */
#define SHORT_WATCH_NS      1000000000LL   /* "very short watch" */
#define KEY_MAX             512

struct label_index {
    char *label;                  /* the label key */
    struct json_object *by_value; /* label value → {cache key: null} */
};

/* A cached object: its compact JSON text plus what the indexes and list filters read, so the
 * cache holds a few KB per object instead of a json-c tree (several times the text's size). */
struct entry {
    char *key;                  /* "ns/name" or "name" (the table's key) */
    char *json;                 /* compact serialization of the (transformed) object */
    size_t len;                 /* strlen(json) */
    char *rv;                   /* metadata.resourceVersion ("" when absent) */
    char *ns;                   /* metadata.namespace ("" for cluster-scoped) */
    char *owner_uid;            /* controller ownerReference uid, or NULL */
    struct json_object *labels; /* metadata.labels (a private tree), or NULL */
};

struct kube_informer {
    struct kube_client *client;
    const struct kube_resource *res;
    char *ns;       /* NULL = all namespaces */
    char *selector; /* NULL = everything */
    long resync_s;
    struct kube_informer_handlers h;
    kube_informer_transform_fn transform;
    void *transform_ud;

    pthread_mutex_t lock;
    pthread_cond_t cond;          /* synced, stop, timer and backoff sleeps (broadcast) */
    struct lh_table *cache;       /* key → struct entry */
    struct json_object *by_owner; /* controller owner uid → {key: null} */
    struct label_index *lidx;
    size_t nlidx;
    char *last_rv; /* "" until the first list */
    int synced;
    int started, stopping, joined;
    int resync_due;
    volatile int wake; /* kube_watch's stop flag */
    pthread_t thread, timer;
    int timer_running;

    /* informer thread only */
    unsigned seed;
    int64_t backoff_initial_ns, backoff_cap_ns;
    int64_t backoff_ns;         /* the next backoff step */
    int64_t last_backoff_start; /* for the 2-minute reset */
};

static struct timespec abs_timespec(int64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000LL),
                          .tv_nsec = (long)(ns % 1000000000LL)};
    return ts;
}

/* ---- label selectors (k8s.io/apimachinery/pkg/labels Parse + Matches) ---- */

static int is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '/';
}

static int is_value_char(char c)
{
    return is_key_char(c) && c != '/';
}

static void skip_ws(const char **p)
{
    while (**p == ' ' || **p == '\t') {
        (*p)++;
    }
}

/* Reads a token of key (or value) characters into out (NUL-terminated). -EINVAL when too long. */
static int read_token(const char **p, int value, char *out, size_t outlen)
{
    size_t n = 0;
    while (**p && (value ? is_value_char(**p) : is_key_char(**p))) {
        if (n + 1 >= outlen) {
            return -EINVAL;
        }
        out[n++] = *(*p)++;
    }
    out[n] = '\0';
    return 0;
}

static const char *label_value(struct json_object *labels, const char *key)
{
    struct json_object *v;
    if (labels && json_object_is_type(labels, json_type_object) &&
        json_object_object_get_ex(labels, key, &v) && json_object_is_type(v, json_type_string)) {
        return json_object_get_string(v);
    }
    return NULL;
}

static int parse_int64(const char *s, long long *out)
{
    if (!*s) {
        return -EINVAL;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno) {
        return -EINVAL;
    }
    *out = v;
    return 0;
}

/* Parses the whole selector and evaluates it against labels: 1, 0, or -EINVAL. */
static int selector_eval(const char *s, struct json_object *labels)
{
    const char *p = s ? s : "";
    char key[320], value[320];
    int match = 1;
    skip_ws(&p);
    if (!*p) {
        return 1;
    }
    for (;;) {
        skip_ws(&p);
        int negate = 0;
        if (*p == '!') {
            negate = 1;
            p++;
            skip_ws(&p);
        }
        if (read_token(&p, 0, key, sizeof(key)) != 0 || !key[0]) {
            return -EINVAL;
        }
        skip_ws(&p);
        const char *have = label_value(labels, key);
        int r;
        if (negate) {
            r = have == NULL;
        } else if (*p == ',' || *p == '\0') {
            r = have != NULL;
        } else if (p[0] == '!' && p[1] == '=') {
            p += 2;
            skip_ws(&p);
            if (read_token(&p, 1, value, sizeof(value)) != 0) {
                return -EINVAL;
            }
            r = !have || strcmp(have, value) != 0;
        } else if (p[0] == '=') {
            p += p[1] == '=' ? 2 : 1;
            skip_ws(&p);
            if (read_token(&p, 1, value, sizeof(value)) != 0) {
                return -EINVAL;
            }
            r = have && strcmp(have, value) == 0;
        } else if (p[0] == '>' || p[0] == '<') {
            int gt = p[0] == '>';
            long long bound, v;
            p++;
            skip_ws(&p);
            if (read_token(&p, 1, value, sizeof(value)) != 0 || parse_int64(value, &bound) != 0) {
                return -EINVAL;
            }
            r = have && parse_int64(have, &v) == 0 && (gt ? v > bound : v < bound);
        } else {
            int notin;
            if (strncmp(p, "notin", 5) == 0 && (p[5] == ' ' || p[5] == '\t' || p[5] == '(')) {
                notin = 1;
                p += 5;
            } else if (strncmp(p, "in", 2) == 0 && (p[2] == ' ' || p[2] == '\t' || p[2] == '(')) {
                notin = 0;
                p += 2;
            } else {
                return -EINVAL;
            }
            skip_ws(&p);
            if (*p != '(') {
                return -EINVAL;
            }
            p++;
            int found = 0, nvalues = 0;
            for (;;) {
                skip_ws(&p);
                if (read_token(&p, 1, value, sizeof(value)) != 0) {
                    return -EINVAL;
                }
                nvalues++;
                if (have && strcmp(have, value) == 0) {
                    found = 1;
                }
                skip_ws(&p);
                if (*p == ',') {
                    p++;
                    continue;
                }
                if (*p == ')') {
                    p++;
                    break;
                }
                return -EINVAL;
            }
            if (nvalues == 0) {
                return -EINVAL;
            }
            r = notin ? !found : found;
        }
        match = match && r;
        skip_ws(&p);
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == '\0') {
            return match;
        }
        return -EINVAL;
    }
}

int kube_label_selector_match(const char *selector, struct json_object *labels)
{
    return selector_eval(selector, labels);
}

/* ---- keys and indexes ---- */

int kube_object_key(struct json_object *obj, char *out, size_t outlen)
{
    const char *name = NULL, *ns = NULL;
    if (json_get_string(obj, "metadata.name", &name, NULL, 0) != 0 || !name[0]) {
        return -EINVAL;
    }
    if (json_opt_string(obj, "metadata.namespace", "", &ns, NULL, 0) != 0) {
        return -EINVAL;
    }
    int n = ns[0] ? snprintf(out, outlen, "%s/%s", ns, name) : snprintf(out, outlen, "%s", name);
    return n < 0 || (size_t)n >= outlen ? -ENOSPC : 0;
}

static int make_key(const char *ns, const char *name, char *out, size_t outlen)
{
    int n =
        ns && ns[0] ? snprintf(out, outlen, "%s/%s", ns, name) : snprintf(out, outlen, "%s", name);
    return n < 0 || (size_t)n >= outlen ? -ENOSPC : 0;
}

static void set_add(struct json_object *idx, const char *ival, const char *key)
{
    struct json_object *set;
    if (!json_object_object_get_ex(idx, ival, &set)) {
        set = json_object_new_object();
        if (!set || json_object_object_add(idx, ival, set) != 0) {
            log_error("informer: out of memory updating an index");
            return;
        }
    }
    if (json_object_object_add(set, key, NULL) != 0) {
        log_error("informer: out of memory updating an index");
    }
}

static void set_del(struct json_object *idx, const char *ival, const char *key)
{
    struct json_object *set;
    if (json_object_object_get_ex(idx, ival, &set)) {
        json_object_object_del(set, key);
        if (json_object_object_length(set) == 0) {
            json_object_object_del(idx, ival);
        }
    }
}

/* The uid of obj's controller ownerReference, or NULL. */
static const char *controller_uid(struct json_object *obj)
{
    struct json_object *refs = json_get(obj, "metadata.ownerReferences");
    if (!refs || !json_object_is_type(refs, json_type_array)) {
        return NULL;
    }
    size_t n = json_object_array_length(refs);
    for (size_t i = 0; i < n; i++) {
        struct json_object *ref = json_object_array_get_idx(refs, i);
        struct json_object *ctl, *uid;
        if (json_object_is_type(ref, json_type_object) &&
            json_object_object_get_ex(ref, "controller", &ctl) &&
            json_object_is_type(ctl, json_type_boolean) && json_object_get_boolean(ctl) &&
            json_object_object_get_ex(ref, "uid", &uid) &&
            json_object_is_type(uid, json_type_string)) {
            return json_object_get_string(uid);
        }
    }
    return NULL;
}

static const char *object_rv(struct json_object *obj)
{
    const char *rv = NULL;
    return json_get_string(obj, "metadata.resourceVersion", &rv, NULL, 0) == 0 ? rv : "";
}

/* Adds (add != 0) or removes an entry's index entries. Under the lock. */
static void index_entry(struct kube_informer *inf, const struct entry *e, int add)
{
    if (e->owner_uid) {
        (add ? set_add : set_del)(inf->by_owner, e->owner_uid, e->key);
    }
    for (size_t i = 0; i < inf->nlidx; i++) {
        const char *v = label_value(e->labels, inf->lidx[i].label);
        if (v) {
            (add ? set_add : set_del)(inf->lidx[i].by_value, v, e->key);
        }
    }
}

static void entry_free(struct entry *e)
{
    if (!e) {
        return;
    }
    free(e->key);
    free(e->json);
    free(e->rv);
    free(e->ns);
    free(e->owner_uid);
    json_object_put(e->labels);
    free(e);
}

/* The lh_table's entry destructor: the value owns the key. */
static void cache_entry_free(struct lh_entry *le)
{
    entry_free((struct entry *)lh_entry_v(le));
}

/* A new entry for obj under key, or NULL on OOM. Serializes obj (which json-c caches inside obj
 * until it is freed: callers pass transient objects). */
static struct entry *entry_new(const char *key, struct json_object *obj)
{
    struct entry *e = calloc(1, sizeof(*e));
    if (!e) {
        return NULL;
    }
    size_t len = 0;
    const char *text = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    const char *ns = "";
    json_opt_string(obj, "metadata.namespace", "", &ns, NULL, 0);
    const char *uid = controller_uid(obj);
    struct json_object *labels = json_get(obj, "metadata.labels");
    e->key = strdup(key);
    e->json = text ? malloc(len + 1) : NULL;
    e->rv = strdup(object_rv(obj));
    e->ns = strdup(ns);
    e->owner_uid = uid ? strdup(uid) : NULL;
    if (labels && json_object_is_type(labels, json_type_object) &&
        json_object_deep_copy(labels, &e->labels, NULL) != 0) {
        e->labels = NULL;
        goto err_free;
    }
    if (!text || !e->key || !e->json || !e->rv || !e->ns || (uid && !e->owner_uid)) {
        goto err_free;
    }
    memcpy(e->json, text, len + 1);
    e->len = len;
    return e;

err_free:
    entry_free(e);
    return NULL;
}

/* Parses cached JSON text back into a new tree (the depth matches the client's parser). */
static struct json_object *parse_text(const char *text, size_t len)
{
    struct json_tokener *tok = json_tokener_new_ex(512);
    if (!tok) {
        return NULL;
    }
    struct json_object *obj = json_tokener_parse_ex(tok, text, (int)len);
    if (json_tokener_get_error(tok) != json_tokener_success) {
        json_object_put(obj);
        obj = NULL;
    }
    json_tokener_free(tok);
    return obj;
}

static struct entry *cache_lookup(struct kube_informer *inf, const char *key)
{
    void *v = NULL;
    return lh_table_lookup_ex(inf->cache, key, &v) ? v : NULL;
}

/* Detaches and returns the entry under key (the caller frees it), or NULL. Under the lock. */
static struct entry *cache_take(struct kube_informer *inf, const char *key)
{
    struct lh_entry *le = lh_table_lookup_entry(inf->cache, key);
    if (!le) {
        return NULL;
    }
    struct entry *old = (struct entry *)lh_entry_v(le);
    index_entry(inf, old, 0);
    lh_entry_set_val(le, NULL); /* the destructor then frees nothing */
    lh_table_delete_entry(inf->cache, le);
    return old;
}

/* Stores obj (serialized) under key; returns the previous entry (the caller frees it) or NULL.
 * Informer thread only. */
static struct entry *cache_set(struct kube_informer *inf, const char *key, struct json_object *obj)
{
    struct entry *e = entry_new(key, obj);
    pthread_mutex_lock(&inf->lock);
    struct entry *old = cache_take(inf, key);
    if (!e || lh_table_insert(inf->cache, e->key, e) != 0) {
        log_error("informer %s: out of memory caching %s", inf->res->plural, key);
        entry_free(e);
    } else {
        index_entry(inf, e, 1);
    }
    pthread_mutex_unlock(&inf->lock);
    return old;
}

/* Removes key; returns the removed entry (the caller frees it) or NULL. */
static struct entry *cache_del(struct kube_informer *inf, const char *key)
{
    pthread_mutex_lock(&inf->lock);
    struct entry *old = cache_take(inf, key);
    pthread_mutex_unlock(&inf->lock);
    return old;
}

static void set_last_rv(struct kube_informer *inf, const char *rv)
{
    if (!rv || !rv[0]) {
        return;
    }
    char *copy = strdup(rv);
    if (!copy) {
        return;
    }
    pthread_mutex_lock(&inf->lock);
    free(inf->last_rv);
    inf->last_rv = copy;
    pthread_mutex_unlock(&inf->lock);
}

/* ---- handlers ---- */

static void notify_add(struct kube_informer *inf, struct json_object *obj)
{
    if (inf->h.on_add) {
        inf->h.on_add(inf->h.ud, obj);
    }
}

static void notify_update(struct kube_informer *inf, struct json_object *old_obj,
                          struct json_object *new_obj)
{
    if (inf->h.on_update) {
        inf->h.on_update(inf->h.ud, old_obj, new_obj);
    }
}

static void notify_delete(struct kube_informer *inf, struct json_object *obj)
{
    if (inf->h.on_delete) {
        inf->h.on_delete(inf->h.ud, obj);
    }
}

/* ---- list (Replace) ---- */

/* Sets apiVersion and kind on a list item that lacks them (list items do not carry them). */
static void fill_type_meta(struct kube_informer *inf, struct json_object *item)
{
    struct json_object *v;
    if (!json_object_object_get_ex(item, "apiVersion", &v)) {
        char api[128];
        if (inf->res->group[0]) {
            snprintf(api, sizeof(api), "%s/%s", inf->res->group, inf->res->version);
        } else {
            snprintf(api, sizeof(api), "%s", inf->res->version);
        }
        json_object_object_add(item, "apiVersion", json_object_new_string(api));
    }
    if (!json_object_object_get_ex(item, "kind", &v)) {
        json_object_object_add(item, "kind", json_object_new_string(inf->res->kind));
    }
}

/* Handlers see the old state of an update parsed back from the cache's text. */
static struct json_object *entry_parse(const struct entry *e)
{
    struct json_object *obj = parse_text(e->json, e->len);
    if (!obj) {
        log_error("informer: cannot re-parse the cached %s", e->key);
    }
    return obj;
}

/* Caches obj (already transformed) and tells the handlers: an add, an update when the
 * resourceVersion changed (always for a watch event, only_changed 0), or nothing. */
static void store_and_notify(struct kube_informer *inf, const char *key, struct json_object *obj,
                             int only_changed)
{
    struct entry *old = cache_set(inf, key, obj);
    if (!old) {
        notify_add(inf, obj);
    } else if ((!only_changed || strcmp(old->rv, object_rv(obj)) != 0) && inf->h.on_update) {
        struct json_object *old_obj = entry_parse(old);
        if (old_obj) {
            notify_update(inf, old_obj, obj);
            json_object_put(old_obj);
        }
    }
    entry_free(old);
}

/* Applies one list page (Replace's add/update half); seen collects the keys. */
static int list_page(struct kube_informer *inf, struct json_object *page, struct json_object *seen)
{
    struct json_object *items = json_get(page, "items");
    size_t n =
        items && json_object_is_type(items, json_type_array) ? json_object_array_length(items) : 0;
    char key[KEY_MAX];
    for (size_t i = 0; i < n; i++) {
        struct json_object *item = json_object_array_get_idx(items, i);
        if (!json_object_is_type(item, json_type_object) ||
            kube_object_key(item, key, sizeof(key)) != 0) {
            continue;
        }
        fill_type_meta(inf, item);
        if (inf->transform) {
            inf->transform(inf->transform_ud, item);
        }
        if (json_object_object_add(seen, key, NULL) != 0) {
            return -ENOMEM;
        }
        store_and_notify(inf, key, item, 1);
        /* the page's tree is the big part: drop each item once cached */
        json_object_array_put_idx(items, i, NULL);
    }
    return 0;
}

/* Lists page by page (client-go's ListPager: later pages carry only the continue token), each
 * page applied to the cache as it arrives so that no list-sized tree is ever built; a continue
 * token that expires restarts the list once from scratch. Then deletes what vanished. */
static int do_list(struct kube_informer *inf, const char *rv)
{
    struct kube_list_options o = {
        .label_selector = inf->selector,
        .limit = LIST_PAGE,
        .resource_version = rv[0] ? rv : NULL,
    };
    struct kube_error err = {0};
    struct json_object *seen = json_object_new_object();
    char *cont = NULL, *list_rv = NULL;
    int rc = seen ? 0 : -ENOMEM, restarted = 0;
    while (rc == 0) {
        struct json_object *page = NULL;
        o.continue_token = cont;
        rc = kube_list(inf->client, inf->res, inf->ns, &o, &page, &err);
        /* An expired continue token, or a last-synced resourceVersion the server no longer has
         * (a paged list at RV=N is an exact read): list again once from scratch with RV "" (a
         * consistent read), as client-go's reflector does when the last sync RV is unavailable. */
        if (rc == KUBE_EEXPIRED && (cont || o.resource_version) && !restarted) {
            log_info("informer %s: %s expired; listing from scratch", inf->res->plural,
                     cont ? "continue token" : "resourceVersion");
            restarted = 1;
            free(cont);
            cont = NULL;
            o.resource_version = NULL;
            rc = 0;
            continue;
        }
        if (rc != 0) {
            log_warn("informer %s: list (resourceVersion \"%s\") failed: %s: %s", inf->res->plural,
                     rv, tandem_strerror(rc), err.message);
            break;
        }
        const char *page_rv = NULL, *next = NULL;
        json_opt_string(page, "metadata.resourceVersion", NULL, &page_rv, NULL, 0);
        json_opt_string(page, "metadata.continue", NULL, &next, NULL, 0);
        free(list_rv);
        free(cont);
        list_rv = page_rv ? strdup(page_rv) : NULL;
        cont = next && next[0] ? strdup(next) : NULL;
        rc = (next && next[0] && !cont) || (page_rv && !list_rv) ? -ENOMEM
                                                                 : list_page(inf, page, seen);
        json_object_put(page);
        if (rc != 0 || !cont) {
            break;
        }
        o.resource_version = NULL; /* "not allowed when using continue" */
    }
    free(cont);
    if (rc != 0) {
        free(list_rv);
        json_object_put(seen);
        return rc;
    }
    /* objects that vanished while we were not watching */
    pthread_mutex_lock(&inf->lock);
    size_t ngone = 0, cap = (size_t)lh_table_length(inf->cache);
    char **gone = cap ? calloc(cap, sizeof(char *)) : NULL;
    struct lh_entry *le;
    lh_foreach(inf->cache, le)
    {
        const char *k = lh_entry_k(le);
        if (gone && !json_object_object_get_ex(seen, k, NULL)) {
            gone[ngone] = strdup(k);
            if (gone[ngone]) {
                ngone++;
            }
        }
    }
    pthread_mutex_unlock(&inf->lock);
    for (size_t i = 0; i < ngone; i++) {
        struct entry *old = cache_del(inf, gone[i]);
        struct json_object *old_obj = old && inf->h.on_delete ? entry_parse(old) : NULL;
        if (old_obj) {
            notify_delete(inf, old_obj);
            json_object_put(old_obj);
        }
        entry_free(old);
        free(gone[i]);
    }
    free((void *)gone);
    json_object_put(seen);
    set_last_rv(inf, list_rv);
    free(list_rv);
    pthread_mutex_lock(&inf->lock);
    if (!inf->synced) {
        inf->synced = 1;
        pthread_cond_broadcast(&inf->cond);
    }
    pthread_mutex_unlock(&inf->lock);
#ifdef __GLIBC__
    /* a list frees many page-sized trees at once: give the pages back to the system */
    malloc_trim(0);
#endif
    return 0;
}

/* ---- watch ---- */

struct watch_ctx {
    struct kube_informer *inf;
    long events;
    int expired;     /* ERROR event with code 410 */
    int error_event; /* another ERROR event */
};

static int on_watch_event(void *ud, enum kube_event_type type, struct json_object *obj)
{
    struct watch_ctx *w = ud;
    struct kube_informer *inf = w->inf;
    w->events++;
    if (type == KUBE_EVENT_ERROR) {
        int code = 0;
        const char *msg = "";
        json_opt_int(obj, "code", 0, &code, NULL, 0);
        json_opt_string(obj, "message", "", &msg, NULL, 0);
        if (code == 410) {
            log_info("informer %s: watch expired: %s", inf->res->plural, msg);
            w->expired = 1;
        } else {
            log_warn("informer %s: watch error %d: %s", inf->res->plural, code, msg);
            w->error_event = 1;
        }
        return 1;
    }
    if (!json_object_is_type(obj, json_type_object)) {
        return 0;
    }
    if (type == KUBE_EVENT_BOOKMARK) {
        set_last_rv(inf, object_rv(obj));
        return 0;
    }
    char key[KEY_MAX];
    if (kube_object_key(obj, key, sizeof(key)) != 0) {
        log_warn("informer %s: %s event for an object without a name", inf->res->plural,
                 kube_event_type_name(type));
        return 0;
    }
    if (inf->transform) {
        inf->transform(inf->transform_ud, obj);
    }
    set_last_rv(inf, object_rv(obj));
    if (type == KUBE_EVENT_DELETED) {
        struct entry *old = cache_del(inf, key);
        if (old) {
            notify_delete(inf, obj);
            entry_free(old);
        }
        return 0;
    }
    store_and_notify(inf, key, obj, 0);
    return 0;
}

/* ---- the informer thread ---- */

static int is_stopping(struct kube_informer *inf)
{
    pthread_mutex_lock(&inf->lock);
    int s = inf->stopping;
    pthread_mutex_unlock(&inf->lock);
    return s;
}

/* wait.NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0): the next sleep. */
static int64_t next_backoff(struct kube_informer *inf)
{
    int64_t now = tandem_now_ns();
    if (inf->backoff_ns == 0 || now - inf->last_backoff_start > BACKOFF_RESET_NS) {
        inf->backoff_ns = inf->backoff_initial_ns;
    }
    inf->last_backoff_start = now;
    int64_t d = inf->backoff_ns;
    inf->backoff_ns = d * 2 > inf->backoff_cap_ns ? inf->backoff_cap_ns : d * 2;
    double jitter = (double)rand_r(&inf->seed) / ((double)RAND_MAX + 1.0);
    return d + (int64_t)(jitter * (double)d);
}

/* Sleeps the next backoff unless stopped first. */
static void backoff_sleep(struct kube_informer *inf)
{
    int64_t deadline = tandem_now_ns() + next_backoff(inf);
    struct timespec ts = abs_timespec(deadline);
    pthread_mutex_lock(&inf->lock);
    while (!inf->stopping && tandem_now_ns() < deadline) {
        pthread_cond_timedwait(&inf->cond, &inf->lock, &ts);
    }
    pthread_mutex_unlock(&inf->lock);
}

static void resync(struct kube_informer *inf)
{
    if (!inf->h.on_update) {
        return;
    }
    pthread_mutex_lock(&inf->lock);
    size_t n = 0, cap = (size_t)lh_table_length(inf->cache);
    char **keys = cap ? calloc(cap, sizeof(char *)) : NULL;
    struct lh_entry *le;
    if (keys) {
        lh_foreach(inf->cache, le)
        {
            if ((keys[n] = strdup(lh_entry_k(le))) != NULL) {
                n++;
            }
        }
    }
    pthread_mutex_unlock(&inf->lock);
    /* one object parsed at a time; only this thread changes the cache, so every key is there */
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&inf->lock);
        struct entry *e = cache_lookup(inf, keys[i]);
        struct json_object *obj = e ? entry_parse(e) : NULL;
        pthread_mutex_unlock(&inf->lock);
        if (obj) {
            notify_update(inf, obj, obj);
            json_object_put(obj);
        }
        free(keys[i]);
    }
    free((void *)keys);
}

static int retriable_watch_error(int rc)
{
    return rc == KUBE_ETRANSPORT || rc == KUBE_ETOOMANY || rc == KUBE_ETIMEOUT || rc == -ETIMEDOUT;
}

static void *informer_main(void *arg)
{
    struct kube_informer *inf = arg;
    int need_list = 1, rv_unavailable = 0;
    char *rv = NULL;
    while (!is_stopping(inf)) {
        pthread_mutex_lock(&inf->lock);
        free(rv);
        rv = strdup(rv_unavailable ? "" : inf->last_rv[0] ? inf->last_rv : "0");
        int do_resync = 0;
        if (!need_list) { /* a resync waits for the watch phase */
            do_resync = inf->resync_due && inf->synced;
            inf->resync_due = 0;
        }
        if (!inf->stopping) {
            inf->wake = 0;
        }
        pthread_mutex_unlock(&inf->lock);
        if (!rv) {
            backoff_sleep(inf);
            continue;
        }
        if (need_list) {
            int rc = do_list(inf, rv);
            if (rc == KUBE_EEXPIRED && rv[0]) {
                rv_unavailable = 1; /* relist at once with a consistent read */
                continue;
            }
            if (rc != 0) {
                backoff_sleep(inf);
                continue;
            }
            need_list = 0;
            rv_unavailable = 0;
            continue; /* re-read the RV the list returned */
        }
        if (do_resync) {
            resync(inf);
        }
        struct watch_ctx w = {.inf = inf};
        long timeout_s = MIN_WATCH_TIMEOUT_S + rand_r(&inf->seed) % MIN_WATCH_TIMEOUT_S;
        struct kube_watch_options o = {
            .label_selector = inf->selector,
            .resource_version = rv,
            .allow_bookmarks = 1,
            .timeout_seconds = timeout_s,
            .inactivity_timeout_ms = (timeout_s + 60) * 1000,
            .stop = &inf->wake,
        };
        struct kube_error err = {0};
        int64_t t0 = tandem_now_ns();
        int rc = kube_watch(inf->client, inf->res, inf->ns, &o, on_watch_event, &w, &err);
        pthread_mutex_lock(&inf->lock);
        int stop = inf->stopping, woken = inf->wake;
        pthread_mutex_unlock(&inf->lock);
        if (stop) {
            break;
        }
        if (w.expired || rc == KUBE_EEXPIRED) {
            need_list = 1;
            rv_unavailable = 1;
            backoff_sleep(inf);
        } else if (w.error_event) {
            need_list = 1;
            backoff_sleep(inf);
        } else if (rc == 0) {
            if (!woken && w.events == 0 && tandem_now_ns() - t0 < SHORT_WATCH_NS) {
                log_warn("informer %s: very short watch (resourceVersion %s)", inf->res->plural,
                         rv);
                need_list = 1;
                backoff_sleep(inf);
            }
            /* else: closed cleanly (or woken for a resync): watch again from the last RV */
        } else if (retriable_watch_error(rc)) {
            log_info("informer %s: watch failed, retrying: %s: %s", inf->res->plural,
                     tandem_strerror(rc), err.message);
            backoff_sleep(inf);
        } else {
            log_warn("informer %s: watch failed, relisting: %s: %s", inf->res->plural,
                     tandem_strerror(rc), err.message);
            need_list = 1;
            backoff_sleep(inf);
        }
    }
    free(rv);
    return NULL;
}

static void *resync_main(void *arg)
{
    struct kube_informer *inf = arg;
    int64_t period = (int64_t)inf->resync_s * 1000000000LL;
    pthread_mutex_lock(&inf->lock);
    int64_t next = tandem_now_ns() + period;
    while (!inf->stopping) {
        struct timespec ts = abs_timespec(next);
        pthread_cond_timedwait(&inf->cond, &inf->lock, &ts);
        int64_t now = tandem_now_ns();
        if (!inf->stopping && now >= next) {
            inf->resync_due = 1;
            inf->wake = 1;
            next = now + period;
        }
    }
    pthread_mutex_unlock(&inf->lock);
    return NULL;
}

/* ---- lifecycle ---- */

struct kube_informer *kube_informer_new(struct kube_client *c, const struct kube_resource *r,
                                        const char *ns, const char *label_selector,
                                        long resync_seconds, const struct kube_informer_handlers *h)
{
    struct kube_informer *inf = calloc(1, sizeof(*inf));
    if (!inf) {
        return NULL;
    }
    inf->client = c;
    inf->res = r;
    inf->resync_s = resync_seconds > 0 ? resync_seconds : 0;
    if (h) {
        inf->h = *h;
    }
    inf->ns = ns && ns[0] ? strdup(ns) : NULL;
    inf->selector = label_selector && label_selector[0] ? strdup(label_selector) : NULL;
    inf->cache = lh_kchar_table_new(64, cache_entry_free);
    inf->by_owner = json_object_new_object();
    inf->last_rv = strdup("");
    if ((ns && ns[0] && !inf->ns) || (label_selector && label_selector[0] && !inf->selector) ||
        !inf->cache || !inf->by_owner || !inf->last_rv) {
        goto err_free;
    }
    pthread_mutex_init(&inf->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&inf->cond, &ca);
    pthread_condattr_destroy(&ca);
    inf->seed = (unsigned)tandem_now_ns() ^ (unsigned)(uintptr_t)inf;
    inf->backoff_initial_ns = BACKOFF_INITIAL_NS;
    inf->backoff_cap_ns = BACKOFF_CAP_NS;
    return inf;

err_free:
    if (inf->cache) {
        lh_table_free(inf->cache);
    }
    json_object_put(inf->by_owner);
    free(inf->last_rv);
    free(inf->ns);
    free(inf->selector);
    free(inf);
    return NULL;
}

int kube_informer_add_label_index(struct kube_informer *inf, const char *label_key)
{
    pthread_mutex_lock(&inf->lock);
    int rc = 0;
    if (inf->started) {
        rc = -EBUSY;
        goto out;
    }
    struct label_index *n = realloc(inf->lidx, (inf->nlidx + 1) * sizeof(*n));
    if (!n) {
        rc = -ENOMEM;
        goto out;
    }
    inf->lidx = n;
    n[inf->nlidx].label = strdup(label_key);
    n[inf->nlidx].by_value = json_object_new_object();
    if (!n[inf->nlidx].label || !n[inf->nlidx].by_value) {
        free(n[inf->nlidx].label);
        json_object_put(n[inf->nlidx].by_value);
        rc = -ENOMEM;
        goto out;
    }
    inf->nlidx++;
out:
    pthread_mutex_unlock(&inf->lock);
    return rc;
}

int kube_informer_set_transform(struct kube_informer *inf, kube_informer_transform_fn fn, void *ud)
{
    pthread_mutex_lock(&inf->lock);
    int rc = inf->started ? -EBUSY : 0;
    if (rc == 0) {
        inf->transform = fn;
        inf->transform_ud = ud;
    }
    pthread_mutex_unlock(&inf->lock);
    return rc;
}

void kube_informer_strip_managed_fields(void *ud, struct json_object *obj)
{
    (void)ud;
    struct json_object *meta = NULL;
    if (json_object_is_type(obj, json_type_object) &&
        json_object_object_get_ex(obj, "metadata", &meta) &&
        json_object_is_type(meta, json_type_object)) {
        json_object_object_del(meta, "managedFields");
    }
}

int kube_informer_set_backoff(struct kube_informer *inf, long initial_ms, long cap_ms)
{
    if (initial_ms <= 0 || cap_ms < initial_ms) {
        return -EINVAL;
    }
    pthread_mutex_lock(&inf->lock);
    int rc = inf->started ? -EBUSY : 0;
    if (rc == 0) {
        inf->backoff_initial_ns = (int64_t)initial_ms * 1000000LL;
        inf->backoff_cap_ns = (int64_t)cap_ms * 1000000LL;
    }
    pthread_mutex_unlock(&inf->lock);
    return rc;
}

int kube_informer_start(struct kube_informer *inf)
{
    pthread_mutex_lock(&inf->lock);
    if (inf->started) {
        pthread_mutex_unlock(&inf->lock);
        return -EBUSY;
    }
    inf->started = 1;
    pthread_mutex_unlock(&inf->lock);
    int rc = pthread_create(&inf->thread, NULL, informer_main, inf);
    if (rc != 0) {
        pthread_mutex_lock(&inf->lock);
        inf->started = 0;
        pthread_mutex_unlock(&inf->lock);
        return -rc;
    }
    if (inf->resync_s > 0 && pthread_create(&inf->timer, NULL, resync_main, inf) == 0) {
        inf->timer_running = 1;
    }
    return 0;
}

void kube_informer_stop(struct kube_informer *inf)
{
    pthread_mutex_lock(&inf->lock);
    inf->stopping = 1;
    inf->wake = 1;
    pthread_cond_broadcast(&inf->cond);
    int join = inf->started && !inf->joined;
    inf->joined = 1;
    pthread_mutex_unlock(&inf->lock);
    if (join) {
        pthread_join(inf->thread, NULL);
        if (inf->timer_running) {
            pthread_join(inf->timer, NULL);
        }
    }
}

void kube_informer_free(struct kube_informer *inf)
{
    if (!inf) {
        return;
    }
    kube_informer_stop(inf);
    for (size_t i = 0; i < inf->nlidx; i++) {
        free(inf->lidx[i].label);
        json_object_put(inf->lidx[i].by_value);
    }
    free(inf->lidx);
    lh_table_free(inf->cache);
    json_object_put(inf->by_owner);
    free(inf->last_rv);
    free(inf->ns);
    free(inf->selector);
    pthread_cond_destroy(&inf->cond);
    pthread_mutex_destroy(&inf->lock);
    free(inf);
}

int kube_informer_has_synced(struct kube_informer *inf)
{
    pthread_mutex_lock(&inf->lock);
    int s = inf->synced;
    pthread_mutex_unlock(&inf->lock);
    return s;
}

int kube_informer_wait_synced(struct kube_informer *inf, long timeout_ms)
{
    int64_t deadline = tandem_now_ns() + (int64_t)timeout_ms * 1000000LL;
    struct timespec ts = abs_timespec(deadline);
    int rc = 0;
    pthread_mutex_lock(&inf->lock);
    while (!inf->synced) {
        if (inf->stopping) {
            rc = -ECANCELED;
            break;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&inf->cond, &inf->lock);
        } else if (tandem_now_ns() >= deadline) {
            rc = -ETIMEDOUT;
            break;
        } else {
            pthread_cond_timedwait(&inf->cond, &inf->lock, &ts);
        }
    }
    pthread_mutex_unlock(&inf->lock);
    return rc;
}

char *kube_informer_last_resource_version(struct kube_informer *inf)
{
    pthread_mutex_lock(&inf->lock);
    char *rv = strdup(inf->last_rv);
    pthread_mutex_unlock(&inf->lock);
    return rv;
}

size_t kube_informer_count(struct kube_informer *inf)
{
    pthread_mutex_lock(&inf->lock);
    size_t n = (size_t)lh_table_length(inf->cache);
    pthread_mutex_unlock(&inf->lock);
    return n;
}

/* ---- readers ---- */

/* Readers copy the text under the lock and parse it after, so the informer thread never waits
 * for a parse. */
struct text_copy {
    char *json;
    size_t len;
};

static int text_copy(const struct entry *e, struct text_copy *out)
{
    out->len = e->len;
    out->json = malloc(e->len + 1);
    if (!out->json) {
        return -ENOMEM;
    }
    memcpy(out->json, e->json, e->len + 1);
    return 0;
}

struct json_object *kube_informer_get(struct kube_informer *inf, const char *ns, const char *name)
{
    char key[KEY_MAX];
    if (!name || make_key(ns, name, key, sizeof(key)) != 0) {
        return NULL;
    }
    struct text_copy t = {0};
    pthread_mutex_lock(&inf->lock);
    struct entry *e = cache_lookup(inf, key);
    int found = e && text_copy(e, &t) == 0;
    pthread_mutex_unlock(&inf->lock);
    if (!found) {
        return NULL;
    }
    struct json_object *obj = parse_text(t.json, t.len);
    free(t.json);
    return obj;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp((*(const struct entry *const *)a)->key, (*(const struct entry *const *)b)->key);
}

/* A result set being collected under the lock. */
struct collect {
    const struct entry **v; /* borrowed from the cache, valid under the lock */
    size_t n, cap;
    int rc;
};

static void collect_add(struct collect *c, const struct entry *e)
{
    if (c->rc != 0) {
        return;
    }
    const struct entry **nv =
        tandem_grow((void *)c->v, &c->cap, c->n + 1, sizeof(const struct entry *), 16);
    if (!nv) {
        c->rc = -ENOMEM;
        return;
    }
    c->v = nv;
    c->v[c->n++] = e;
}

/* Sorts the collected entries and copies their text: under the lock; then (after unlocking)
 * collect_parse hands out the objects. */
static struct text_copy *collect_texts(struct collect *c)
{
    struct text_copy *texts = NULL;
    if (c->rc == 0 && c->n > 0) {
        qsort((void *)c->v, c->n, sizeof(const struct entry *), entry_cmp);
        texts = calloc(c->n, sizeof(*texts));
        for (size_t i = 0; texts && i < c->n; i++) {
            if (text_copy(c->v[i], &texts[i]) != 0) {
                c->rc = -ENOMEM;
                break;
            }
        }
        if (!texts) {
            c->rc = -ENOMEM;
        }
    }
    free((void *)c->v);
    c->v = NULL;
    return texts;
}

static int collect_parse(struct collect *c, struct text_copy *texts, struct json_object ***items,
                         size_t *n)
{
    *items = NULL;
    *n = 0;
    int rc = c->rc;
    struct json_object **out = NULL;
    if (rc == 0 && c->n > 0) {
        out = calloc(c->n, sizeof(struct json_object *));
        rc = out ? 0 : -ENOMEM;
    }
    for (size_t i = 0; rc == 0 && i < c->n; i++) {
        if (!(out[i] = parse_text(texts[i].json, texts[i].len))) {
            rc = -ENOMEM;
        }
    }
    for (size_t i = 0; texts && i < c->n; i++) {
        free(texts[i].json);
    }
    free(texts);
    if (rc != 0) {
        for (size_t i = 0; out && i < c->n; i++) {
            json_object_put(out[i]);
        }
        free((void *)out);
        return rc;
    }
    *items = out;
    *n = out ? c->n : 0;
    return 0;
}

int kube_informer_list(struct kube_informer *inf, const char *ns, const char *label_selector,
                       struct json_object ***items, size_t *n)
{
    *items = NULL;
    *n = 0;
    if (selector_eval(label_selector, NULL) < 0) {
        return -EINVAL;
    }
    struct collect c = {0};
    struct lh_entry *le;
    pthread_mutex_lock(&inf->lock);
    lh_foreach(inf->cache, le)
    {
        const struct entry *e = lh_entry_v(le);
        if ((!ns || strcmp(e->ns, ns) == 0) && selector_eval(label_selector, e->labels) == 1) {
            collect_add(&c, e);
        }
    }
    struct text_copy *texts = collect_texts(&c);
    pthread_mutex_unlock(&inf->lock);
    return collect_parse(&c, texts, items, n);
}

/* Entries of the index set idx[value]. Under the lock. */
static void collect_set(struct kube_informer *inf, struct json_object *idx, const char *value,
                        struct collect *c)
{
    struct json_object *set;
    if (!json_object_object_get_ex(idx, value, &set)) {
        return;
    }
    json_object_object_foreach(set, key, unused)
    {
        (void)unused;
        const struct entry *e = cache_lookup(inf, key);
        if (e) {
            collect_add(c, e);
        }
    }
}

int kube_informer_by_label(struct kube_informer *inf, const char *label_key, const char *value,
                           struct json_object ***items, size_t *n)
{
    struct collect c = {0};
    pthread_mutex_lock(&inf->lock);
    struct label_index *li = NULL;
    for (size_t i = 0; i < inf->nlidx; i++) {
        if (strcmp(inf->lidx[i].label, label_key) == 0) {
            li = &inf->lidx[i];
        }
    }
    if (li) {
        collect_set(inf, li->by_value, value, &c);
    } else {
        struct lh_entry *le;
        lh_foreach(inf->cache, le)
        {
            const struct entry *e = lh_entry_v(le);
            const char *v = label_value(e->labels, label_key);
            if (v && strcmp(v, value) == 0) {
                collect_add(&c, e);
            }
        }
    }
    struct text_copy *texts = collect_texts(&c);
    pthread_mutex_unlock(&inf->lock);
    return collect_parse(&c, texts, items, n);
}

int kube_informer_by_owner(struct kube_informer *inf, const char *owner_uid,
                           struct json_object ***items, size_t *n)
{
    struct collect c = {0};
    pthread_mutex_lock(&inf->lock);
    collect_set(inf, inf->by_owner, owner_uid, &c);
    struct text_copy *texts = collect_texts(&c);
    pthread_mutex_unlock(&inf->lock);
    return collect_parse(&c, texts, items, n);
}
