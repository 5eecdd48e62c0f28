/*
 * Leader election on a Lease, a line-by-line port of client-go's LeaderElector (acquire, renew,
 * tryAcquireOrRenew, release, maybeReportTransition) and LeaseLock. See leader.h.
 *
 * The elector thread owns the Lease cache and the observed record; the mutex guards only what
 * other threads read (leading flags, the observed holder) and the stop flag.
 */
#include "lib/kube/leader.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/clock.h"
#include "lib/common.h"
#include "lib/json.h"
#include "lib/log.h"

#define JITTER_FACTOR 1.2 /* leaderelection.JitterFactor */

/* LeaderElectionRecord. */
struct record {
    char holder[256]; /* "" when none */
    long duration_s;  /* leaseDurationSeconds */
    char acquire[40]; /* MicroTime or "" */
    char renew[40];
    long transitions;
};

struct kube_leader {
    struct kube_client *client;
    char *name, *ns, *identity;
    int64_t lease_ns, renew_deadline_ns, retry_ns;
    int release_on_cancel;
    struct kube_leader_callbacks cb;

    pthread_mutex_t lock;
    pthread_cond_t cond; /* stop */
    int started, stopping, joined;
    int leading, was_leading;
    char observed_holder[256]; /* copy for kube_leader_get_leader */
    pthread_t thread;

    /* elector thread only */
    struct json_object *lease;  /* LeaseLock.lease: the Lease last read or written */
    struct record observed;     /* observedRecord */
    int64_t observed_time;      /* observedTime, CLOCK_MONOTONIC ns */
    struct record observed_raw; /* observedRawRecord (as last read) */
    int have_raw;
    char reported[256]; /* reportedLeader */
    unsigned seed;
};

char *kube_format_micro_time(long long sec, long nsec, char *out, size_t outlen)
{
    time_t t = (time_t)sec;
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(out, outlen, "%Y-%m-%dT%H:%M:%S", &tm);
    unsigned micro = (unsigned)((nsec / 1000) % 1000000);
    if (n > 0 && n < outlen) {
        snprintf(out + n, outlen - n, ".%06uZ", micro);
    } else if (outlen > 0) {
        out[0] = '\0';
    }
    return out;
}

static void now_micro(char *out, size_t outlen)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    kube_format_micro_time((long long)ts.tv_sec, ts.tv_nsec, out, outlen);
}

/* ---- the record <-> Lease spec ---- */

static void record_from_lease(struct json_object *lease, struct record *r)
{
    const char *s;
    int64_t v;
    memset(r, 0, sizeof(*r));
    if (json_opt_string(lease, "spec.holderIdentity", "", &s, NULL, 0) == 0) {
        snprintf(r->holder, sizeof(r->holder), "%s", s);
    }
    if (json_opt_int64(lease, "spec.leaseDurationSeconds", 0, &v, NULL, 0) == 0) {
        r->duration_s = (long)v;
    }
    if (json_opt_string(lease, "spec.acquireTime", "", &s, NULL, 0) == 0) {
        snprintf(r->acquire, sizeof(r->acquire), "%s", s);
    }
    if (json_opt_string(lease, "spec.renewTime", "", &s, NULL, 0) == 0) {
        snprintf(r->renew, sizeof(r->renew), "%s", s);
    }
    if (json_opt_int64(lease, "spec.leaseTransitions", 0, &v, NULL, 0) == 0) {
        r->transitions = (long)v;
    }
}

static int record_equal(const struct record *a, const struct record *b)
{
    return strcmp(a->holder, b->holder) == 0 && a->duration_s == b->duration_s &&
           strcmp(a->acquire, b->acquire) == 0 && strcmp(a->renew, b->renew) == 0 &&
           a->transitions == b->transitions;
}

/* LeaderElectionRecordToLeaseSpec. */
static struct json_object *record_to_spec(const struct record *r)
{
    struct json_object *spec = json_object_new_object();
    if (!spec) {
        return NULL;
    }
    json_object_object_add(spec, "holderIdentity", json_object_new_string(r->holder));
    json_object_object_add(spec, "leaseDurationSeconds", json_object_new_int64(r->duration_s));
    if (r->acquire[0]) {
        json_object_object_add(spec, "acquireTime", json_object_new_string(r->acquire));
    }
    if (r->renew[0]) {
        json_object_object_add(spec, "renewTime", json_object_new_string(r->renew));
    }
    json_object_object_add(spec, "leaseTransitions", json_object_new_int64(r->transitions));
    return spec;
}

/* ---- LeaseLock ---- */

static int lock_get(struct kube_leader *le)
{
    struct json_object *out = NULL;
    struct kube_error err = {0};
    int rc = kube_get(le->client, &KUBE_LEASES, le->ns, le->name, &out, &err);
    if (rc == 0) {
        json_object_put(le->lease);
        le->lease = out;
    } else if (rc != KUBE_ENOTFOUND) {
        log_warn("leader election: error retrieving lease %s/%s: %s: %s", le->ns, le->name,
                 tandem_strerror(rc), err.message);
    }
    return rc;
}

static int lock_create(struct kube_leader *le, const struct record *r)
{
    struct json_object *lease = json_object_new_object();
    struct json_object *meta = json_object_new_object();
    struct json_object *spec = record_to_spec(r);
    if (!lease || !meta || !spec) {
        json_object_put(lease);
        json_object_put(meta);
        json_object_put(spec);
        return -ENOMEM;
    }
    json_object_object_add(lease, "apiVersion", json_object_new_string("coordination.k8s.io/v1"));
    json_object_object_add(lease, "kind", json_object_new_string("Lease"));
    json_object_object_add(meta, "name", json_object_new_string(le->name));
    json_object_object_add(meta, "namespace", json_object_new_string(le->ns));
    json_object_object_add(lease, "metadata", meta);
    json_object_object_add(lease, "spec", spec);
    struct json_object *out = NULL;
    struct kube_error err = {0};
    int rc = kube_create(le->client, &KUBE_LEASES, le->ns, lease, &out, &err);
    json_object_put(lease);
    if (rc != 0) {
        log_warn("leader election: error initially creating lease %s/%s: %s: %s", le->ns, le->name,
                 tandem_strerror(rc), err.message);
        return rc;
    }
    json_object_put(le->lease);
    le->lease = out;
    return 0;
}

/* PUT of the cached Lease with its spec replaced: its resourceVersion makes it conditional. */
static int lock_update(struct kube_leader *le, const struct record *r)
{
    if (!le->lease) {
        return -EINVAL; /* "lease not initialized, call get or create first" */
    }
    struct json_object *spec = record_to_spec(r);
    if (!spec) {
        return -ENOMEM;
    }
    json_object_object_add(le->lease, "spec", spec);
    struct json_object *out = NULL;
    struct kube_error err = {0};
    int rc = kube_update(le->client, &KUBE_LEASES, le->ns, le->name, le->lease, &out, &err);
    if (rc != 0) {
        log_info("leader election: failed to update lease %s/%s: %s: %s", le->ns, le->name,
                 tandem_strerror(rc), err.message);
        return rc;
    }
    json_object_put(le->lease);
    le->lease = out;
    return 0;
}

/* ---- the elector ---- */

static void set_observed(struct kube_leader *le, const struct record *r)
{
    le->observed = *r;
    le->observed_time = tandem_now_ns();
    pthread_mutex_lock(&le->lock);
    snprintf(le->observed_holder, sizeof(le->observed_holder), "%s", r->holder);
    pthread_mutex_unlock(&le->lock);
}

static int is_leader(const struct kube_leader *le)
{
    return strcmp(le->observed.holder, le->identity) == 0;
}

static int lease_valid(const struct kube_leader *le, int64_t now)
{
    return le->observed_time + (int64_t)le->observed.duration_s * 1000000000LL > now;
}

static int try_acquire_or_renew(struct kube_leader *le)
{
    int64_t now = tandem_now_ns();
    struct record rec = {0};
    snprintf(rec.holder, sizeof(rec.holder), "%s", le->identity);
    rec.duration_s = (long)(le->lease_ns / 1000000000LL);
    now_micro(rec.renew, sizeof(rec.renew));
    memcpy(rec.acquire, rec.renew, sizeof(rec.acquire));

    /* 1. fast path: the leader renews optimistically with the version it wrote last */
    if (is_leader(le) && lease_valid(le, now)) {
        struct record fast = rec;
        memcpy(fast.acquire, le->observed.acquire, sizeof(fast.acquire));
        fast.transitions = le->observed.transitions;
        if (lock_update(le, &fast) == 0) {
            set_observed(le, &fast);
            return 1;
        }
        log_info("leader election: failed to update lease optimistically, falling back to the "
                 "slow path");
    }

    /* 2. get or create */
    int rc = lock_get(le);
    if (rc == KUBE_ENOTFOUND) {
        if (lock_create(le, &rec) != 0) {
            return 0;
        }
        set_observed(le, &rec);
        return 1;
    }
    if (rc != 0) {
        return 0;
    }

    /* 3. the record changed since we last looked: it was observed now, on our own clock */
    struct record old;
    record_from_lease(le->lease, &old);
    if (!le->have_raw || !record_equal(&old, &le->observed_raw)) {
        set_observed(le, &old);
        le->observed_raw = old;
        le->have_raw = 1;
    }
    if (old.holder[0] && lease_valid(le, now) && !is_leader(le)) {
        return 0; /* held by another and not expired yet */
    }

    /* 4. take it (or renew it) */
    if (is_leader(le)) {
        memcpy(rec.acquire, old.acquire, sizeof(rec.acquire));
        rec.transitions = old.transitions;
    } else {
        rec.transitions = old.transitions + 1;
    }
    if (lock_update(le, &rec) != 0) {
        return 0;
    }
    set_observed(le, &rec);
    return 1;
}

static void maybe_report_transition(struct kube_leader *le)
{
    if (strcmp(le->observed.holder, le->reported) == 0) {
        return;
    }
    snprintf(le->reported, sizeof(le->reported), "%s", le->observed.holder);
    if (le->cb.on_new_leader) {
        le->cb.on_new_leader(le->cb.ud, le->reported);
    }
}

static void release(struct kube_leader *le)
{
    if (!is_leader(le)) {
        return;
    }
    struct record rec = {0};
    rec.duration_s = 1;
    now_micro(rec.renew, sizeof(rec.renew));
    memcpy(rec.acquire, rec.renew, sizeof(rec.acquire));
    rec.transitions = le->observed.transitions;
    if (lock_update(le, &rec) != 0) {
        log_warn("leader election: failed to release lease %s/%s", le->ns, le->name);
        return;
    }
    set_observed(le, &rec);
    log_info("leader election: %s released lease %s/%s", le->identity, le->ns, le->name);
}

/* Sleeps ns unless stopped; returns 1 when stopping. */
static int sleep_or_stop(struct kube_leader *le, int64_t ns)
{
    int64_t deadline = tandem_now_ns() + ns;
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000LL),
                          .tv_nsec = (long)(deadline % 1000000000LL)};
    pthread_mutex_lock(&le->lock);
    while (!le->stopping && tandem_now_ns() < deadline) {
        pthread_cond_timedwait(&le->cond, &le->lock, &ts);
    }
    int s = le->stopping;
    pthread_mutex_unlock(&le->lock);
    return s;
}

static int stopping(struct kube_leader *le)
{
    pthread_mutex_lock(&le->lock);
    int s = le->stopping;
    pthread_mutex_unlock(&le->lock);
    return s;
}

static void set_leading(struct kube_leader *le, int leading)
{
    pthread_mutex_lock(&le->lock);
    le->leading = leading;
    if (leading) {
        le->was_leading = 1;
    }
    pthread_mutex_unlock(&le->lock);
}

/* acquire: wait.JitterUntil(tryAcquireOrRenew, RetryPeriod, 1.2, sliding). 1 when acquired. */
static int acquire(struct kube_leader *le)
{
    log_info("leader election: %s attempting to acquire lease %s/%s", le->identity, le->ns,
             le->name);
    while (!stopping(le)) {
        int ok = try_acquire_or_renew(le);
        maybe_report_transition(le);
        if (ok) {
            log_info("leader election: %s successfully acquired lease %s/%s", le->identity, le->ns,
                     le->name);
            return 1;
        }
        double jitter = (double)rand_r(&le->seed) / ((double)RAND_MAX + 1.0);
        if (sleep_or_stop(le, le->retry_ns +
                                  (int64_t)(jitter * JITTER_FACTOR * (double)le->retry_ns))) {
            break;
        }
    }
    return 0;
}

/* renew: every RetryPeriod, poll tryAcquireOrRenew for up to RenewDeadline; returns when that
 * fails or the elector is stopped. */
static void renew(struct kube_leader *le)
{
    while (!stopping(le)) {
        int64_t start = tandem_now_ns();
        int ok = 0;
        for (;;) {
            if (try_acquire_or_renew(le)) {
                ok = 1;
                break;
            }
            int64_t left = start + le->renew_deadline_ns - tandem_now_ns();
            if (left <= 0 || sleep_or_stop(le, left < le->retry_ns ? left : le->retry_ns) ||
                tandem_now_ns() - start >= le->renew_deadline_ns) {
                break;
            }
        }
        maybe_report_transition(le);
        if (!ok) {
            if (!stopping(le)) {
                log_error("leader election: %s failed to renew lease %s/%s within %lld ms: "
                          "leadership lost",
                          le->identity, le->ns, le->name,
                          (long long)(le->renew_deadline_ns / 1000000));
            }
            break;
        }
        if (sleep_or_stop(le, le->retry_ns)) {
            break;
        }
    }
    if (le->release_on_cancel) {
        release(le);
    }
}

static void *elector_main(void *arg)
{
    struct kube_leader *le = arg;
    if (acquire(le)) {
        set_leading(le, 1);
        if (le->cb.on_started_leading) {
            le->cb.on_started_leading(le->cb.ud);
        }
        renew(le);
        set_leading(le, 0);
    }
    if (le->cb.on_stopped_leading) {
        le->cb.on_stopped_leading(le->cb.ud);
    }
    return NULL;
}

/* ---- lifecycle ---- */

struct kube_leader *kube_leader_new(struct kube_client *c, const struct kube_leader_config *cfg,
                                    char *err, size_t errlen)
{
    long lease = cfg->lease_duration_ms ? cfg->lease_duration_ms : 15000;
    long deadline = cfg->renew_deadline_ms ? cfg->renew_deadline_ms : 10000;
    long retry = cfg->retry_period_ms ? cfg->retry_period_ms : 2000;
    if (!cfg->lease_name || !cfg->lease_name[0] || !cfg->lease_namespace ||
        !cfg->lease_namespace[0]) {
        tandem_set_err(err, errlen, "leader election: lease name and namespace are required");
        return NULL;
    }
    if (!cfg->identity || !cfg->identity[0]) {
        tandem_set_err(err, errlen, "leader election: lock identity is empty");
        return NULL;
    }
    if (lease <= 0 || deadline <= 0 || retry <= 0) {
        tandem_set_err(err, errlen, "leader election: durations must be greater than zero");
        return NULL;
    }
    if (lease <= deadline) {
        tandem_set_err(err, errlen,
                       "leader election: leaseDuration must be greater than renewDeadline");
        return NULL;
    }
    if ((double)deadline <= JITTER_FACTOR * (double)retry) {
        tandem_set_err(
            err, errlen,
            "leader election: renewDeadline must be greater than retryPeriod*JitterFactor");
        return NULL;
    }
    if (lease < 1000) {
        tandem_set_err(err, errlen,
                       "leader election: leaseDuration must be at least 1 s (it is written "
                       "as whole seconds)");
        return NULL;
    }
    struct kube_leader *le = calloc(1, sizeof(*le));
    if (!le) {
        tandem_set_err(err, errlen, "leader election: out of memory");
        return NULL;
    }
    le->client = c;
    le->name = strdup(cfg->lease_name);
    le->ns = strdup(cfg->lease_namespace);
    le->identity = strdup(cfg->identity);
    if (!le->name || !le->ns || !le->identity) {
        free(le->name);
        free(le->ns);
        free(le->identity);
        free(le);
        tandem_set_err(err, errlen, "leader election: out of memory");
        return NULL;
    }
    le->lease_ns = (int64_t)lease * 1000000LL;
    le->renew_deadline_ns = (int64_t)deadline * 1000000LL;
    le->retry_ns = (int64_t)retry * 1000000LL;
    le->release_on_cancel = cfg->release_on_cancel;
    le->cb = cfg->cb;
    le->seed = (unsigned)tandem_now_ns() ^ (unsigned)(uintptr_t)le;
    pthread_mutex_init(&le->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&le->cond, &ca);
    pthread_condattr_destroy(&ca);
    return le;
}

int kube_leader_start(struct kube_leader *le)
{
    pthread_mutex_lock(&le->lock);
    if (le->started) {
        pthread_mutex_unlock(&le->lock);
        return -EBUSY;
    }
    le->started = 1;
    pthread_mutex_unlock(&le->lock);
    int rc = pthread_create(&le->thread, NULL, elector_main, le);
    if (rc != 0) {
        pthread_mutex_lock(&le->lock);
        le->started = 0;
        pthread_mutex_unlock(&le->lock);
        return -rc;
    }
    return 0;
}

void kube_leader_stop(struct kube_leader *le)
{
    pthread_mutex_lock(&le->lock);
    le->stopping = 1;
    pthread_cond_broadcast(&le->cond);
    int join = le->started && !le->joined;
    le->joined = 1;
    pthread_mutex_unlock(&le->lock);
    if (join) {
        pthread_join(le->thread, NULL);
    }
}

void kube_leader_free(struct kube_leader *le)
{
    if (!le) {
        return;
    }
    kube_leader_stop(le);
    json_object_put(le->lease);
    pthread_cond_destroy(&le->cond);
    pthread_mutex_destroy(&le->lock);
    free(le->name);
    free(le->ns);
    free(le->identity);
    free(le);
}

int kube_leader_is_leader(struct kube_leader *le)
{
    pthread_mutex_lock(&le->lock);
    int v = le->leading;
    pthread_mutex_unlock(&le->lock);
    return v;
}

int kube_leader_was_leading(struct kube_leader *le)
{
    pthread_mutex_lock(&le->lock);
    int v = le->was_leading;
    pthread_mutex_unlock(&le->lock);
    return v;
}

char *kube_leader_get_leader(struct kube_leader *le)
{
    pthread_mutex_lock(&le->lock);
    char *s = strdup(le->observed_holder);
    pthread_mutex_unlock(&le->lock);
    return s;
}
