/*
 * Event recorder: a bounded queue drained by one thread that writes core/v1 Events, with
 * client-go's correlation (repeats become count/lastTimestamp patches) and per-object spam filter.
 * See events.h.
 *
 * The correlation cache and the spam buckets are small fixed arrays with least-recently-used
 * eviction (client-go uses LRU caches of 4096 entries too); both are touched only by the thread.
 */
#include "lib/kube/events.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/json.h"
#include "lib/log.h"

#define CACHE_SIZE  4096
#define MAX_MESSAGE 1024
#define MAX_REASON  128

struct ev {
    char *api_version, *kind, *ns, *name, *uid, *rv; /* the involved object ("" when absent) */
    char type[8];
    char *reason, *message;
};

struct corr_entry {
    char *key;        /* NULL when unused */
    char *event_name; /* the Event written first */
    char *event_ns;
    long count;
    char first[32]; /* firstTimestamp */
    unsigned long used;
};

struct spam_entry {
    char *key;
    double tokens;
    int64_t last_ns;
    unsigned long used;
};

struct kube_event_recorder {
    struct kube_client *client;
    char *component, *host;
    int burst;
    double refill_qps;

    pthread_mutex_t lock;
    pthread_cond_t cond; /* work arrived, stopping, idle */
    struct ev **queue;   /* ring */
    size_t cap, head, len;
    int busy, stopping;
    pthread_t thread;
    struct kube_event_recorder_stats stats;

    /* thread only */
    struct corr_entry *corr;
    struct spam_entry *spam;
    unsigned long tick;
    unsigned long long last_name_ns;
};

static void ev_free(struct ev *e)
{
    if (!e) {
        return;
    }
    free(e->api_version);
    free(e->kind);
    free(e->ns);
    free(e->name);
    free(e->uid);
    free(e->rv);
    free(e->reason);
    free(e->message);
    free(e);
}

/* metav1.Time: RFC 3339 in seconds. */
static void rfc3339_now(char *out, size_t outlen)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- spam filter (EventSourceObjectSpamFilter) ---- */

static int spam_allow(struct kube_event_recorder *r, const char *key)
{
    if (r->burst < 0) {
        return 1;
    }
    int64_t now = tandem_now_ns();
    struct spam_entry *e = NULL, *victim = &r->spam[0];
    for (size_t i = 0; i < CACHE_SIZE; i++) {
        struct spam_entry *s = &r->spam[i];
        if (s->key && strcmp(s->key, key) == 0) {
            e = s;
            break;
        }
        if (!s->key || (victim->key && s->used < victim->used)) {
            victim = s;
        }
    }
    if (!e) {
        char *k = strdup(key);
        if (!k) {
            return 1;
        }
        free(victim->key);
        e = victim;
        e->key = k;
        e->tokens = r->burst;
        e->last_ns = now;
    }
    e->used = ++r->tick;
    e->tokens += (double)(now - e->last_ns) / 1e9 * r->refill_qps;
    if (e->tokens > r->burst) {
        e->tokens = r->burst;
    }
    e->last_ns = now;
    if (e->tokens < 1) {
        return 0;
    }
    e->tokens -= 1;
    return 1;
}

/* ---- correlation cache (eventLogger) ---- */

static struct corr_entry *corr_find(struct kube_event_recorder *r, const char *key)
{
    for (size_t i = 0; i < CACHE_SIZE; i++) {
        if (r->corr[i].key && strcmp(r->corr[i].key, key) == 0) {
            r->corr[i].used = ++r->tick;
            return &r->corr[i];
        }
    }
    return NULL;
}

static void corr_insert(struct kube_event_recorder *r, const char *key, const char *name,
                        const char *ns, const char *first)
{
    struct corr_entry *victim = &r->corr[0];
    for (size_t i = 0; i < CACHE_SIZE; i++) {
        if (!r->corr[i].key) {
            victim = &r->corr[i];
            break;
        }
        if (r->corr[i].used < victim->used) {
            victim = &r->corr[i];
        }
    }
    char *k = strdup(key), *n = strdup(name), *s = strdup(ns);
    if (!k || !n || !s) {
        free(k);
        free(n);
        free(s);
        return;
    }
    free(victim->key);
    free(victim->event_name);
    free(victim->event_ns);
    victim->key = k;
    victim->event_name = n;
    victim->event_ns = s;
    victim->count = 1;
    snprintf(victim->first, sizeof(victim->first), "%s", first);
    victim->used = ++r->tick;
}

/* ---- writing ---- */

static void add_str(struct json_object *o, const char *k, const char *v)
{
    if (v && v[0]) {
        json_object_object_add(o, k, json_object_new_string(v));
    }
}

static struct json_object *event_object(struct kube_event_recorder *r, const struct ev *e,
                                        const char *name, const char *ns, long count,
                                        const char *first, const char *last)
{
    struct json_object *o = json_object_new_object();
    struct json_object *meta = json_object_new_object();
    struct json_object *ref = json_object_new_object();
    struct json_object *src = json_object_new_object();
    if (!o || !meta || !ref || !src) {
        json_object_put(o);
        json_object_put(meta);
        json_object_put(ref);
        json_object_put(src);
        return NULL;
    }
    add_str(o, "apiVersion", "v1");
    add_str(o, "kind", "Event");
    add_str(meta, "name", name);
    add_str(meta, "namespace", ns);
    json_object_object_add(o, "metadata", meta);
    add_str(ref, "apiVersion", e->api_version);
    add_str(ref, "kind", e->kind);
    add_str(ref, "namespace", e->ns);
    add_str(ref, "name", e->name);
    add_str(ref, "uid", e->uid);
    add_str(ref, "resourceVersion", e->rv);
    json_object_object_add(o, "involvedObject", ref);
    add_str(o, "reason", e->reason);
    add_str(o, "message", e->message);
    add_str(o, "type", e->type);
    add_str(src, "component", r->component);
    add_str(src, "host", r->host);
    json_object_object_add(o, "source", src);
    add_str(o, "firstTimestamp", first);
    add_str(o, "lastTimestamp", last);
    json_object_object_add(o, "count", json_object_new_int64(count));
    add_str(o, "reportingComponent", r->component);
    json_object_object_add(o, "reportingInstance", json_object_new_string(r->host ? r->host : ""));
    return o;
}

static int create_event(struct kube_event_recorder *r, const struct ev *e, const char *name,
                        const char *ns, long count, const char *first, const char *last)
{
    struct json_object *o = event_object(r, e, name, ns, count, first, last);
    if (!o) {
        return -ENOMEM;
    }
    struct kube_error err = {0};
    int rc = kube_create(r->client, &KUBE_EVENTS, ns, o, NULL, &err);
    json_object_put(o);
    if (rc != 0) {
        log_warn("events: could not create event %s/%s (%s %s): %s: %s", ns, name, e->reason,
                 e->name, tandem_strerror(rc), err.message);
    }
    return rc;
}

static void write_event(struct kube_event_recorder *r, const struct ev *e)
{
    struct buf key;
    buf_init(&key, 1 << 16);
    /* the spam filter keys on source + object (getSpamKey) */
    if (buf_appendf(&key, "%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s", r->component,
                    r->host ? r->host : "", e->api_version, e->kind, e->ns, e->name, e->uid) != 0) {
        buf_free(&key);
        return;
    }
    int allowed = spam_allow(r, buf_cstr(&key));
    if (!allowed) {
        pthread_mutex_lock(&r->lock);
        r->stats.dropped_spam++;
        pthread_mutex_unlock(&r->lock);
        buf_free(&key);
        return;
    }
    /* the correlation key adds type, reason and message (getEventKey) */
    if (buf_appendf(&key, "\x1f%s\x1f%s\x1f%s", e->type, e->reason, e->message) != 0) {
        buf_free(&key);
        return;
    }
    char now[32];
    rfc3339_now(now, sizeof(now));
    int created = 0, patched = 0, failed = 0;
    struct corr_entry *c = corr_find(r, buf_cstr(&key));
    if (c) {
        c->count++;
        struct json_object *p = json_object_new_object();
        json_object_object_add(p, "count", json_object_new_int64(c->count));
        json_object_object_add(p, "lastTimestamp", json_object_new_string(now));
        json_object_object_add(p, "message", json_object_new_string(e->message));
        const char *body = json_object_to_json_string_ext(p, JSON_C_TO_STRING_PLAIN);
        struct kube_error err = {0};
        int rc = kube_patch(r->client, &KUBE_EVENTS, c->event_ns, c->event_name,
                            KUBE_PATCH_STRATEGIC, body, strlen(body), NULL, NULL, &err);
        json_object_put(p);
        if (rc == 0) {
            patched = 1;
        } else if (rc == KUBE_ENOTFOUND) { /* expired or deleted: write it again */
            if (create_event(r, e, c->event_name, c->event_ns, c->count, c->first, now) == 0) {
                created = 1;
            } else {
                failed = 1;
            }
        } else {
            log_warn("events: could not patch event %s/%s: %s: %s", c->event_ns, c->event_name,
                     tandem_strerror(rc), err.message);
            failed = 1;
        }
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long t =
            (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
        if (t <= r->last_name_ns) {
            t = r->last_name_ns + 1; /* unique even within one nanosecond */
        }
        r->last_name_ns = t;
        char name[300];
        snprintf(name, sizeof(name), "%.253s.%016llx", e->name, t);
        const char *ns = e->ns[0] ? e->ns : "default";
        if (create_event(r, e, name, ns, 1, now, now) == 0) {
            corr_insert(r, buf_cstr(&key), name, ns, now);
            created = 1;
        } else {
            failed = 1;
        }
    }
    buf_free(&key);
    pthread_mutex_lock(&r->lock);
    r->stats.created += (unsigned long)created;
    r->stats.patched += (unsigned long)patched;
    r->stats.failed += (unsigned long)failed;
    pthread_mutex_unlock(&r->lock);
}

static void *recorder_main(void *arg)
{
    struct kube_event_recorder *r = arg;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (r->len == 0 && !r->stopping) {
            pthread_cond_wait(&r->cond, &r->lock);
        }
        if (r->len == 0) {
            break; /* stopping and drained */
        }
        struct ev *e = r->queue[r->head];
        r->head = (r->head + 1) % r->cap;
        r->len--;
        r->busy = 1;
        pthread_mutex_unlock(&r->lock);
        write_event(r, e);
        ev_free(e);
        pthread_mutex_lock(&r->lock);
        r->busy = 0;
        pthread_cond_broadcast(&r->cond);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* ---- public ---- */

struct kube_event_recorder *kube_event_recorder_new(struct kube_client *c,
                                                    const struct kube_event_recorder_options *o)
{
    if (!o || !o->component || !o->component[0]) {
        return NULL;
    }
    struct kube_event_recorder *r = calloc(1, sizeof(*r));
    if (!r) {
        return NULL;
    }
    r->client = c;
    r->component = strdup(o->component);
    r->host = o->host ? strdup(o->host) : NULL;
    r->cap = o->queue_size ? o->queue_size : 1000;
    r->burst = o->burst ? o->burst : 25;
    r->refill_qps = o->refill_qps > 0 ? o->refill_qps : 1.0 / 300.0;
    r->queue = calloc(r->cap, sizeof(struct ev *));
    r->corr = calloc(CACHE_SIZE, sizeof(*r->corr));
    r->spam = calloc(CACHE_SIZE, sizeof(*r->spam));
    if (!r->component || (o->host && !r->host) || !r->queue || !r->corr || !r->spam) {
        goto err_free;
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&r->thread, NULL, recorder_main, r) != 0) {
        pthread_cond_destroy(&r->cond);
        pthread_mutex_destroy(&r->lock);
        goto err_free;
    }
    return r;

err_free:
    free((void *)r->queue);
    free(r->corr);
    free(r->spam);
    free(r->component);
    free(r->host);
    free(r);
    return NULL;
}

void kube_event_recorder_free(struct kube_event_recorder *r)
{
    if (!r) {
        return;
    }
    pthread_mutex_lock(&r->lock);
    r->stopping = 1;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->thread, NULL);
    for (size_t i = 0; i < CACHE_SIZE; i++) {
        free(r->corr[i].key);
        free(r->corr[i].event_name);
        free(r->corr[i].event_ns);
        free(r->spam[i].key);
    }
    free(r->corr);
    free(r->spam);
    free((void *)r->queue);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r->component);
    free(r->host);
    free(r);
}

static char *dup_field(struct json_object *obj, const char *path)
{
    const char *s = "";
    if (json_opt_string(obj, path, "", &s, NULL, 0) != 0) {
        s = "";
    }
    return strdup(s);
}

int kube_event_record(struct kube_event_recorder *r, struct json_object *obj, const char *type,
                      const char *reason, const char *fmt, ...)
{
    if (!obj || !type || (strcmp(type, "Normal") != 0 && strcmp(type, "Warning") != 0) || !reason ||
        !reason[0] || !fmt) {
        return -EINVAL;
    }
    const char *kind = NULL, *name = NULL;
    if (json_get_string(obj, "kind", &kind, NULL, 0) != 0 || !kind[0] ||
        json_get_string(obj, "metadata.name", &name, NULL, 0) != 0 || !name[0]) {
        return -EINVAL;
    }
    char msg[MAX_MESSAGE + 4]; /* room to see whether byte MAX_MESSAGE continues a character */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) {
        return -EINVAL;
    }
    if ((size_t)n > MAX_MESSAGE) { /* cut at a UTF-8 boundary */
        size_t cut = MAX_MESSAGE;
        while (cut > 0 && ((unsigned char)msg[cut] & 0xC0) == 0x80) {
            cut--;
        }
        msg[cut] = '\0';
    }
    struct ev *e = calloc(1, sizeof(*e));
    if (!e) {
        return -ENOMEM;
    }
    snprintf(e->type, sizeof(e->type), "%s", type);
    e->api_version = dup_field(obj, "apiVersion");
    e->kind = strdup(kind);
    e->ns = dup_field(obj, "metadata.namespace");
    e->name = strdup(name);
    e->uid = dup_field(obj, "metadata.uid");
    e->rv = dup_field(obj, "metadata.resourceVersion");
    e->reason = strndup(reason, MAX_REASON);
    e->message = strdup(msg);
    if (!e->api_version || !e->kind || !e->ns || !e->name || !e->uid || !e->rv || !e->reason ||
        !e->message) {
        ev_free(e);
        return -ENOMEM;
    }
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    if (r->stopping) {
        rc = -ESHUTDOWN;
    } else if (r->len == r->cap) {
        r->stats.dropped_full++;
        rc = -ENOSPC;
    } else {
        r->queue[(r->head + r->len) % r->cap] = e;
        r->len++;
        r->stats.queued++;
        pthread_cond_broadcast(&r->cond);
        e = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    if (rc == -ENOSPC) {
        log_warn("events: queue full, dropping %s event for %s %s", reason, kind, name);
    }
    ev_free(e);
    return rc;
}

void kube_event_recorder_get_stats(struct kube_event_recorder *r,
                                   struct kube_event_recorder_stats *out)
{
    pthread_mutex_lock(&r->lock);
    *out = r->stats;
    pthread_mutex_unlock(&r->lock);
}

int kube_event_recorder_flush(struct kube_event_recorder *r, long timeout_ms)
{
    int64_t deadline = tandem_now_ns() + (int64_t)timeout_ms * 1000000LL;
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000LL),
                          .tv_nsec = (long)(deadline % 1000000000LL)};
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    while (r->len > 0 || r->busy) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&r->cond, &r->lock);
        } else if (tandem_now_ns() >= deadline) {
            rc = -ETIMEDOUT;
            break;
        } else {
            pthread_cond_timedwait(&r->cond, &r->lock, &ts);
        }
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}
