/*
 * Work queue and rate limiter with client-go semantics (util/workqueue queue.go,
 * delaying_queue.go, default_rate_limiters.go, metrics.go). See workqueue.h for the contract.
 *
 * One mutex guards a queue. Each key has one record (struct wq_item) in a hash table while it is
 * dirty, being processed or waiting in the delay heap; the FIFO and the heap hold pointers to the
 * records, so membership tests are O(1) and a record is freed when it is in none of them.
 */
#include "lib/kube/workqueue.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/clock.h"
#include "lib/common.h"
#include "lib/log.h"

#define NOT_WAITING        SIZE_MAX
#define FAKE_CLOCK_POLL_NS 10000000LL /* blocked getters re-read a fake clock every 10 ms */
#define UNFINISHED_PERIOD_NS                                                                       \
    500000000 /* client-go updates the unfinished-work gauges every 0.5 s */

static int64_t real_clock(void *ud)
{
    (void)ud;
    return tandem_now_ns();
}

static struct timespec ns_to_timespec(int64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000LL),
                          .tv_nsec = (long)(ns % 1000000000LL)};
    return ts;
}

/* ---- a string-keyed chained hash table of intrusive nodes ---- */

struct hnode {
    struct hnode *next;
    uint64_t hash;
    char *key; /* owned by the node's container */
};

struct htable {
    struct hnode **buckets;
    size_t nbuckets; /* power of two, or 0 before the first insert */
    size_t count;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

static struct hnode *ht_find(const struct htable *t, const char *key)
{
    if (t->nbuckets == 0) {
        return NULL;
    }
    uint64_t h = hash_str(key);
    for (struct hnode *n = t->buckets[h & (t->nbuckets - 1)]; n; n = n->next) {
        if (n->hash == h && strcmp(n->key, key) == 0) {
            return n;
        }
    }
    return NULL;
}

/* Inserts n (n->key set, not present yet). -ENOMEM only when the first table cannot be made; a
 * failed grow keeps the old (denser) table. */
static int ht_insert(struct htable *t, struct hnode *n)
{
    if (t->count >= t->nbuckets) {
        size_t nb = t->nbuckets ? t->nbuckets * 2 : 16;
        struct hnode **b = calloc(nb, sizeof(struct hnode *));
        if (!b && t->nbuckets == 0) {
            return -ENOMEM;
        }
        if (b) {
            for (size_t i = 0; i < t->nbuckets; i++) {
                struct hnode *m = t->buckets[i];
                while (m) {
                    struct hnode *next = m->next;
                    m->next = b[m->hash & (nb - 1)];
                    b[m->hash & (nb - 1)] = m;
                    m = next;
                }
            }
            free((void *)t->buckets);
            t->buckets = b;
            t->nbuckets = nb;
        }
    }
    n->hash = hash_str(n->key);
    struct hnode **slot = &t->buckets[n->hash & (t->nbuckets - 1)];
    n->next = *slot;
    *slot = n;
    t->count++;
    return 0;
}

static void ht_remove(struct htable *t, struct hnode *n)
{
    struct hnode **pp = &t->buckets[n->hash & (t->nbuckets - 1)];
    while (*pp && *pp != n) {
        pp = &(*pp)->next;
    }
    TANDEM_ASSERT(*pp == n);
    *pp = n->next;
    t->count--;
}

/* ---- rate limiter ---- */

struct rl_entry {
    struct hnode node; /* first: the table hands back hnode pointers */
    int failures;
};

struct kube_rate_limiter {
    pthread_mutex_t lock;
    struct htable failures; /* key → struct rl_entry */
    int64_t base_ns, max_ns;
    double qps; /* <= 0: no bucket */
    int burst;
    double tokens;   /* x/time/rate Limiter.tokens */
    int64_t last_ns; /* Limiter.last */
    int started;     /* the bucket starts full */
};

struct kube_rate_limiter *kube_rate_limiter_new(long base_delay_ms, long max_delay_ms, double qps,
                                                int burst)
{
    struct kube_rate_limiter *rl = calloc(1, sizeof(*rl));
    if (!rl) {
        return NULL;
    }
    pthread_mutex_init(&rl->lock, NULL);
    rl->base_ns = (base_delay_ms > 0 ? base_delay_ms : 5) * 1000000LL;
    rl->max_ns = (max_delay_ms > 0 ? max_delay_ms : 1000000) * 1000000LL;
    rl->qps = qps == 0 ? 10.0 : qps;
    rl->burst = burst > 0 ? burst : 100;
    return rl;
}

void kube_rate_limiter_free(struct kube_rate_limiter *rl)
{
    if (!rl) {
        return;
    }
    for (size_t i = 0; i < rl->failures.nbuckets; i++) {
        struct hnode *n = rl->failures.buckets[i];
        while (n) {
            struct hnode *next = n->next;
            free(n->key);
            free(n);
            n = next;
        }
    }
    free((void *)rl->failures.buckets);
    pthread_mutex_destroy(&rl->lock);
    free(rl);
}

/* ItemExponentialFailureRateLimiter.When: base · 2^failures (counted before this call), capped. */
static int64_t exponential_when(struct kube_rate_limiter *rl, const char *key)
{
    struct rl_entry *e = (struct rl_entry *)ht_find(&rl->failures, key);
    if (!e) {
        e = calloc(1, sizeof(*e));
        if (e && !(e->node.key = strdup(key))) {
            free(e);
            e = NULL;
        }
        if (e && ht_insert(&rl->failures, &e->node) != 0) {
            free(e->node.key);
            free(e);
            e = NULL;
        }
        if (!e) {
            return rl->max_ns; /* out of memory: the most conservative answer */
        }
    }
    int exp = e->failures;
    if (e->failures < INT32_MAX) {
        e->failures++;
    }
    double backoff = (double)rl->base_ns * ldexp(1.0, exp);
    if (backoff >= (double)INT64_MAX) {
        return rl->max_ns;
    }
    int64_t calculated = (int64_t)backoff;
    return calculated > rl->max_ns ? rl->max_ns : calculated;
}

/* BucketRateLimiter.When: golang.org/x/time/rate Limiter.Reserve().Delay() at now. */
static int64_t bucket_when(struct kube_rate_limiter *rl, int64_t now)
{
    if (rl->qps <= 0) {
        return 0;
    }
    if (!rl->started) {
        rl->started = 1;
        rl->tokens = rl->burst;
        rl->last_ns = now;
    }
    int64_t last = rl->last_ns;
    if (now < last) {
        last = now;
    }
    double tokens = rl->tokens + (double)(now - last) / 1e9 * rl->qps;
    if (tokens > rl->burst) {
        tokens = rl->burst;
    }
    tokens -= 1;
    int64_t wait = 0;
    if (tokens < 0) {
        wait = (int64_t)(1e9 * (-tokens / rl->qps));
    }
    rl->last_ns = now;
    rl->tokens = tokens;
    return wait;
}

int64_t kube_rate_limiter_when(struct kube_rate_limiter *rl, const char *key, int64_t now_ns)
{
    pthread_mutex_lock(&rl->lock);
    int64_t a = exponential_when(rl, key);
    int64_t b = bucket_when(rl, now_ns);
    pthread_mutex_unlock(&rl->lock);
    return a > b ? a : b;
}

void kube_rate_limiter_forget(struct kube_rate_limiter *rl, const char *key)
{
    pthread_mutex_lock(&rl->lock);
    struct hnode *n = ht_find(&rl->failures, key);
    if (n) {
        ht_remove(&rl->failures, n);
        free(n->key);
        free(n);
    }
    pthread_mutex_unlock(&rl->lock);
}

int kube_rate_limiter_num_requeues(struct kube_rate_limiter *rl, const char *key)
{
    pthread_mutex_lock(&rl->lock);
    const struct rl_entry *e = (const struct rl_entry *)ht_find(&rl->failures, key);
    int n = e ? e->failures : 0;
    pthread_mutex_unlock(&rl->lock);
    return n;
}

/* ---- metrics families, registered once per registry ---- */

struct wq_families {
    struct metrics_registry *registry;
    struct metric_family *depth, *adds, *queue_duration, *work_duration, *unfinished, *longest,
        *retries;
    struct wq_families *next;
};

static pthread_mutex_t families_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wq_families *families_head; /* process lifetime; one small record per registry */

/* The workqueue_* families of m. A registry seen before (its families exist) reuses the cached
 * record; a new registry, even at a reused address, registers them afresh. */
static struct wq_families *families_for(struct metrics_registry *m)
{
    static const char *const labels[] = {"name", "controller"};
    double buckets[12];
    double b = 10e-9; /* prometheus.ExponentialBuckets(10e-9, 10, 12), computed the same way */
    for (size_t i = 0; i < ARRAY_SIZE(buckets); i++) {
        buckets[i] = b;
        b *= 10;
    }
    pthread_mutex_lock(&families_lock);
    struct wq_families *f = NULL;
    struct metric_family *depth =
        metrics_gauge_new(m, "workqueue_depth", "Current depth of workqueue", 2, labels);
    if (!depth) {
        for (f = families_head; f && f->registry != m; f = f->next) {
        }
        goto out;
    }
    for (f = families_head; f && f->registry != m; f = f->next) {
    }
    if (!f) {
        f = calloc(1, sizeof(*f));
        if (!f) {
            goto out;
        }
        f->registry = m;
        f->next = families_head;
        families_head = f;
    }
    f->depth = depth;
    f->adds = metrics_counter_new(m, "workqueue_adds_total",
                                  "Total number of adds handled by workqueue", 2, labels);
    f->queue_duration = metrics_histogram_new(
        m, "workqueue_queue_duration_seconds",
        "How long in seconds an item stays in workqueue before being requested.", 2, labels,
        buckets, ARRAY_SIZE(buckets));
    f->work_duration =
        metrics_histogram_new(m, "workqueue_work_duration_seconds",
                              "How long in seconds processing an item from workqueue takes.", 2,
                              labels, buckets, ARRAY_SIZE(buckets));
    f->unfinished = metrics_gauge_new(
        m, "workqueue_unfinished_work_seconds",
        "How many seconds of work has been done that is in progress and hasn't been observed by "
        "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
        "threads by observing the rate at which this increases.",
        2, labels);
    f->longest = metrics_gauge_new(
        m, "workqueue_longest_running_processor_seconds",
        "How many seconds has the longest running processor for workqueue been running.", 2,
        labels);
    f->retries = metrics_counter_new(m, "workqueue_retries_total",
                                     "Total number of retries handled by workqueue", 2, labels);
out:
    pthread_mutex_unlock(&families_lock);
    return f;
}

/* ---- the queue ---- */

struct wq_item {
    struct hnode node;       /* first: key and hash-table link */
    unsigned dirty : 1;      /* added and not yet handed out */
    unsigned processing : 1; /* handed out, done not called */
    unsigned queued : 1;     /* in the FIFO */
    size_t heap_idx;         /* index in the delay heap, or NOT_WAITING */
    int64_t ready_ns;        /* when waiting: the time it becomes ready */
    uint64_t heap_seq;       /* when waiting: insertion order, so equal times stay FIFO */
    int64_t add_ns;          /* when it became dirty (queue_duration), -1 when not dirty */
    int64_t start_ns;        /* when processing started (work_duration) */
};

struct wq_metrics {
    struct metric *depth, *adds, *queue_duration, *work_duration, *unfinished, *longest, *retries;
};

struct kube_workqueue {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* getters, drain */
    char *name;
    struct htable items; /* key → struct wq_item */
    struct wq_item **fifo;
    size_t fifo_head, fifo_len, fifo_cap; /* ring buffer */
    struct wq_item **heap;                /* min-heap on ready_ns */
    size_t heap_len, heap_cap;
    uint64_t heap_seq; /* next insertion number */
    size_t nprocessing;
    int shutting_down;
    struct kube_rate_limiter *rl;
    kube_clock_fn clock;
    void *clock_ud;
    int fake_clock;
    int has_metrics;
    struct wq_metrics m;
    pthread_t timer;
    int timer_running;
    int timer_stop;
    pthread_cond_t timer_cond;
};

static int64_t q_now(const struct kube_workqueue *q)
{
    return q->clock(q->clock_ud);
}

static void item_release(struct kube_workqueue *q, struct wq_item *it)
{
    if (it->dirty || it->processing || it->queued || it->heap_idx != NOT_WAITING) {
        return;
    }
    ht_remove(&q->items, &it->node);
    free(it->node.key);
    free(it);
}

static struct wq_item *item_get(struct kube_workqueue *q, const char *key)
{
    struct wq_item *it = (struct wq_item *)ht_find(&q->items, key);
    if (it) {
        return it;
    }
    it = calloc(1, sizeof(*it));
    if (!it) {
        return NULL;
    }
    it->heap_idx = NOT_WAITING;
    it->add_ns = -1;
    if (!(it->node.key = strdup(key)) || ht_insert(&q->items, &it->node) != 0) {
        free(it->node.key);
        free(it);
        return NULL;
    }
    return it;
}

static int fifo_push(struct kube_workqueue *q, struct wq_item *it)
{
    if (q->fifo_len == q->fifo_cap) {
        size_t old_cap = q->fifo_cap;
        struct wq_item **n =
            tandem_grow((void *)q->fifo, &q->fifo_cap, old_cap + 1, sizeof(struct wq_item *), 64);
        if (!n) {
            return -ENOMEM;
        }
        /* The ring was full: its wrapped part [0, head) moves to just after the old end, so the
         * items run from head on without a gap (the new capacity is at least twice the old). */
        memcpy((void *)(n + old_cap), (void *)n, q->fifo_head * sizeof(struct wq_item *));
        q->fifo = n;
    }
    q->fifo[(q->fifo_head + q->fifo_len) % q->fifo_cap] = it;
    q->fifo_len++;
    it->queued = 1;
    return 0;
}

static struct wq_item *fifo_pop(struct kube_workqueue *q)
{
    struct wq_item *it = q->fifo[q->fifo_head];
    q->fifo_head = (q->fifo_head + 1) % q->fifo_cap;
    q->fifo_len--;
    it->queued = 0;
    return it;
}

static void heap_swap(struct kube_workqueue *q, size_t i, size_t j)
{
    struct wq_item *t = q->heap[i];
    q->heap[i] = q->heap[j];
    q->heap[j] = t;
    q->heap[i]->heap_idx = i;
    q->heap[j]->heap_idx = j;
}

static int heap_less(const struct wq_item *a, const struct wq_item *b)
{
    return a->ready_ns < b->ready_ns || (a->ready_ns == b->ready_ns && a->heap_seq < b->heap_seq);
}

static void heap_up(struct kube_workqueue *q, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(q->heap[i], q->heap[parent])) {
            break;
        }
        heap_swap(q, i, parent);
        i = parent;
    }
}

static void heap_down(struct kube_workqueue *q, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < q->heap_len && heap_less(q->heap[l], q->heap[m])) {
            m = l;
        }
        if (r < q->heap_len && heap_less(q->heap[r], q->heap[m])) {
            m = r;
        }
        if (m == i) {
            return;
        }
        heap_swap(q, i, m);
        i = m;
    }
}

static struct wq_item *heap_pop(struct kube_workqueue *q)
{
    struct wq_item *top = q->heap[0];
    q->heap_len--;
    if (q->heap_len > 0) {
        q->heap[0] = q->heap[q->heap_len];
        q->heap[0]->heap_idx = 0;
        heap_down(q, 0);
    }
    top->heap_idx = NOT_WAITING;
    return top;
}

/* queue.go Add, under the lock. */
static void add_locked(struct kube_workqueue *q, struct wq_item *it)
{
    if (it->dirty) {
        return;
    }
    if (q->has_metrics) {
        metric_inc(q->m.adds, 1);
        metric_inc(q->m.depth, 1);
    }
    if (it->add_ns < 0) {
        it->add_ns = q_now(q);
    }
    it->dirty = 1;
    if (it->processing) {
        return;
    }
    if (fifo_push(q, it) != 0) {
        log_error("workqueue %s: out of memory queueing %s", q->name, it->node.key);
        it->dirty = 0;
        if (q->has_metrics) {
            metric_inc(q->m.depth, -1);
        }
        return;
    }
    pthread_cond_signal(&q->cond);
}

/* delaying_queue.go waitingLoop: moves keys whose time has come into the FIFO. */
static void service_heap(struct kube_workqueue *q)
{
    if (q->heap_len == 0 || q->shutting_down) {
        return;
    }
    int64_t now = q_now(q);
    while (q->heap_len > 0 && q->heap[0]->ready_ns <= now) {
        struct wq_item *it = heap_pop(q);
        add_locked(q, it);
        item_release(q, it);
    }
}

static void *timer_main(void *arg);

struct kube_workqueue *kube_workqueue_new_opts(const char *name, struct metrics_registry *m,
                                               const struct kube_workqueue_options *o)
{
    static const struct kube_workqueue_options defaults = {0};
    if (!o) {
        o = &defaults;
    }
    struct kube_workqueue *q = calloc(1, sizeof(*q));
    if (!q) {
        return NULL;
    }
    q->name = strdup(name ? name : "");
    q->rl = kube_rate_limiter_new(o->base_delay_ms, o->max_delay_ms, o->qps, o->burst);
    if (!q->name || !q->rl) {
        goto err_free;
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cond, &ca);
    pthread_cond_init(&q->timer_cond, &ca);
    pthread_condattr_destroy(&ca);
    q->clock = real_clock;
    if (m) {
        struct wq_families *f = families_for(m);
        const char *values[] = {q->name, o->controller ? o->controller : q->name};
        if (f && f->depth && f->adds && f->queue_duration && f->work_duration && f->unfinished &&
            f->longest && f->retries) {
            q->m.depth = metrics_child(f->depth, values);
            q->m.adds = metrics_child(f->adds, values);
            q->m.queue_duration = metrics_child(f->queue_duration, values);
            q->m.work_duration = metrics_child(f->work_duration, values);
            q->m.unfinished = metrics_child(f->unfinished, values);
            q->m.longest = metrics_child(f->longest, values);
            q->m.retries = metrics_child(f->retries, values);
        }
        q->has_metrics = q->m.depth && q->m.adds && q->m.queue_duration && q->m.work_duration &&
                         q->m.unfinished && q->m.longest && q->m.retries;
        if (!q->has_metrics) {
            log_warn("workqueue %s: metrics unavailable (workqueue_* names taken or no memory)",
                     q->name);
        } else if (pthread_create(&q->timer, NULL, timer_main, q) == 0) {
            q->timer_running = 1;
        }
    }
    return q;

err_free:
    kube_rate_limiter_free(q->rl);
    free(q->name);
    free(q);
    return NULL;
}

struct kube_workqueue *kube_workqueue_new(const char *name, struct metrics_registry *m)
{
    return kube_workqueue_new_opts(name, m, NULL);
}

void kube_workqueue_free(struct kube_workqueue *q)
{
    if (!q) {
        return;
    }
    if (q->timer_running) {
        pthread_mutex_lock(&q->lock);
        q->timer_stop = 1;
        pthread_cond_broadcast(&q->timer_cond);
        pthread_mutex_unlock(&q->lock);
        pthread_join(q->timer, NULL);
    }
    for (size_t i = 0; i < q->items.nbuckets; i++) {
        struct hnode *n = q->items.buckets[i];
        while (n) {
            struct hnode *next = n->next;
            free(n->key);
            free(n);
            n = next;
        }
    }
    free((void *)q->items.buckets);
    free((void *)q->fifo);
    free((void *)q->heap);
    kube_rate_limiter_free(q->rl);
    pthread_cond_destroy(&q->cond);
    pthread_cond_destroy(&q->timer_cond);
    pthread_mutex_destroy(&q->lock);
    free(q->name);
    free(q);
}

void kube_workqueue_set_clock(struct kube_workqueue *q, kube_clock_fn now_ns, void *ud)
{
    pthread_mutex_lock(&q->lock);
    q->clock = now_ns ? now_ns : real_clock;
    q->clock_ud = now_ns ? ud : NULL;
    q->fake_clock = now_ns != NULL;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

void kube_workqueue_add(struct kube_workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    if (!q->shutting_down) {
        struct wq_item *it = item_get(q, key);
        if (it) {
            add_locked(q, it);
            item_release(q, it);
        } else {
            log_error("workqueue %s: out of memory adding %s", q->name, key);
        }
    }
    pthread_mutex_unlock(&q->lock);
}

static void add_after_ns(struct kube_workqueue *q, const char *key, int64_t delay_ns)
{
    pthread_mutex_lock(&q->lock);
    if (q->shutting_down) {
        goto out;
    }
    if (q->has_metrics) {
        metric_inc(q->m.retries, 1);
    }
    struct wq_item *it = item_get(q, key);
    if (!it) {
        log_error("workqueue %s: out of memory adding %s", q->name, key);
        goto out;
    }
    if (delay_ns <= 0) {
        add_locked(q, it);
        item_release(q, it);
        goto out;
    }
    int64_t ready = q_now(q) + delay_ns;
    if (it->heap_idx != NOT_WAITING) {
        if (ready < it->ready_ns) { /* keep the earlier ready time */
            it->ready_ns = ready;
            heap_up(q, it->heap_idx);
        }
    } else {
        struct wq_item **n = tandem_grow((void *)q->heap, &q->heap_cap, q->heap_len + 1,
                                         sizeof(struct wq_item *), 64);
        if (!n) {
            log_error("workqueue %s: out of memory delaying %s", q->name, key);
            item_release(q, it);
            goto out;
        }
        q->heap = n;
        it->ready_ns = ready;
        it->heap_seq = q->heap_seq++;
        it->heap_idx = q->heap_len;
        q->heap[q->heap_len++] = it;
        heap_up(q, it->heap_idx);
    }
    pthread_cond_broadcast(&q->cond); /* getters recompute how long to sleep */
out:
    pthread_mutex_unlock(&q->lock);
}

void kube_workqueue_add_after(struct kube_workqueue *q, const char *key, long delay_ms)
{
    add_after_ns(q, key, (int64_t)delay_ms * 1000000LL);
}

void kube_workqueue_add_rate_limited(struct kube_workqueue *q, const char *key)
{
    int64_t now;
    pthread_mutex_lock(&q->lock);
    now = q_now(q);
    pthread_mutex_unlock(&q->lock);
    add_after_ns(q, key, kube_rate_limiter_when(q->rl, key, now));
}

void kube_workqueue_forget(struct kube_workqueue *q, const char *key)
{
    kube_rate_limiter_forget(q->rl, key);
}

int kube_workqueue_num_requeues(struct kube_workqueue *q, const char *key)
{
    return kube_rate_limiter_num_requeues(q->rl, key);
}

int kube_workqueue_get(struct kube_workqueue *q, char **key, long timeout_ms)
{
    *key = NULL;
    int64_t deadline = timeout_ms > 0 ? tandem_now_ns() + (int64_t)timeout_ms * 1000000LL : 0;
    int rc;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        service_heap(q);
        if (q->fifo_len > 0) {
            break;
        }
        if (q->shutting_down) {
            rc = -ESHUTDOWN;
            goto out;
        }
        int64_t real_now = tandem_now_ns();
        if (timeout_ms == 0 || (timeout_ms > 0 && real_now >= deadline)) {
            rc = -ETIMEDOUT;
            goto out;
        }
        int64_t wake = timeout_ms > 0 ? deadline : INT64_MAX;
        if (q->heap_len > 0) {
            int64_t until = q->heap[0]->ready_ns - q_now(q);
            if (until < 0) {
                until = 0;
            }
            if (real_now + until < wake) {
                wake = real_now + until;
            }
        }
        if (q->fake_clock && real_now + FAKE_CLOCK_POLL_NS < wake) {
            wake = real_now + FAKE_CLOCK_POLL_NS;
        }
        if (wake == INT64_MAX) {
            pthread_cond_wait(&q->cond, &q->lock);
        } else {
            struct timespec ts = ns_to_timespec(wake);
            pthread_cond_timedwait(&q->cond, &q->lock, &ts);
        }
    }
    struct wq_item *it = q->fifo[q->fifo_head];
    char *copy = strdup(it->node.key);
    if (!copy) {
        rc = -ENOMEM;
        goto out;
    }
    fifo_pop(q);
    int64_t now = q_now(q);
    if (q->has_metrics) {
        metric_inc(q->m.depth, -1);
        if (it->add_ns >= 0) {
            metric_observe(q->m.queue_duration, (double)(now - it->add_ns) / 1e9);
        }
    }
    it->add_ns = -1;
    it->start_ns = now;
    it->processing = 1;
    it->dirty = 0;
    q->nprocessing++;
    *key = copy;
    rc = 0;
out:
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void kube_workqueue_done(struct kube_workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct wq_item *it = (struct wq_item *)ht_find(&q->items, key);
    if (!it || !it->processing) {
        log_warn("workqueue %s: done(%s) for a key that is not being processed", q->name, key);
        goto out;
    }
    if (q->has_metrics) {
        metric_observe(q->m.work_duration, (double)(q_now(q) - it->start_ns) / 1e9);
    }
    it->processing = 0;
    q->nprocessing--;
    if (it->dirty) {
        if (fifo_push(q, it) != 0) {
            log_error("workqueue %s: out of memory re-queueing %s", q->name, key);
            it->dirty = 0;
            it->add_ns = -1;
            if (q->has_metrics) {
                metric_inc(q->m.depth, -1);
            }
        }
        pthread_cond_broadcast(&q->cond);
    } else if (q->nprocessing == 0) {
        pthread_cond_broadcast(&q->cond); /* shutdown_drain */
    }
    item_release(q, it);
out:
    pthread_mutex_unlock(&q->lock);
}

static void shutdown_locked(struct kube_workqueue *q)
{
    q->shutting_down = 1;
    while (q->heap_len > 0) { /* the delaying queue's waiting loop stops: drop waiting keys */
        item_release(q, heap_pop(q));
    }
    pthread_cond_broadcast(&q->cond);
}

void kube_workqueue_shutdown(struct kube_workqueue *q)
{
    pthread_mutex_lock(&q->lock);
    shutdown_locked(q);
    pthread_mutex_unlock(&q->lock);
}

void kube_workqueue_shutdown_drain(struct kube_workqueue *q)
{
    pthread_mutex_lock(&q->lock);
    shutdown_locked(q);
    while (q->nprocessing > 0) {
        pthread_cond_wait(&q->cond, &q->lock);
    }
    pthread_mutex_unlock(&q->lock);
}

int kube_workqueue_shutting_down(struct kube_workqueue *q)
{
    pthread_mutex_lock(&q->lock);
    int s = q->shutting_down;
    pthread_mutex_unlock(&q->lock);
    return s;
}

size_t kube_workqueue_len(struct kube_workqueue *q)
{
    pthread_mutex_lock(&q->lock);
    service_heap(q);
    size_t n = q->fifo_len;
    pthread_mutex_unlock(&q->lock);
    return n;
}

/* metrics.go updateUnfinishedWork, every 500 ms. */
static void update_unfinished(struct kube_workqueue *q)
{
    int64_t now = q_now(q);
    double total = 0, longest = 0;
    for (size_t i = 0; i < q->items.nbuckets; i++) {
        for (const struct hnode *n = q->items.buckets[i]; n; n = n->next) {
            const struct wq_item *it = (const struct wq_item *)n;
            if (it->processing) {
                double s = (double)(now - it->start_ns) / 1e9;
                total += s;
                if (s > longest) {
                    longest = s;
                }
            }
        }
    }
    metric_set(q->m.unfinished, total);
    metric_set(q->m.longest, longest);
}

static void *timer_main(void *arg)
{
    struct kube_workqueue *q = arg;
    pthread_mutex_lock(&q->lock);
    while (!q->timer_stop) {
        update_unfinished(q);
        struct timespec ts = ns_to_timespec(tandem_now_ns() + UNFINISHED_PERIOD_NS);
        pthread_cond_timedwait(&q->timer_cond, &q->lock, &ts);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}
