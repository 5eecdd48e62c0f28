/* Unit tests for lib/kube/workqueue: de-duplication, the processing set (also under 4 threads),
 * delayed adds, the rate limiter's exact delays, shutdown/drain and the workqueue_* metrics. Time
 * is a fake clock, so nothing sleeps for long. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/kube/workqueue.h"
#include "lib/metrics.h"

#define MS 1000000LL

struct fake_clock {
    _Atomic int64_t now;
};

static int64_t fake_now(void *ud)
{
    struct fake_clock *c = ud;
    return atomic_load(&c->now);
}

static void advance(struct fake_clock *c, int64_t ns)
{
    atomic_fetch_add(&c->now, ns);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Gets a key without blocking and checks it. */
static void expect_key(struct kube_workqueue *q, const char *want)
{
    char *key = NULL;
    int rc = kube_workqueue_get(q, &key, 0);
    if (rc != 0) {
        fail_msg("get: want %s, got rc %d", want, rc);
    }
    assert_string_equal(key, want);
    free(key);
}

static void expect_empty(struct kube_workqueue *q)
{
    char *key = NULL;
    int rc = kube_workqueue_get(q, &key, 0);
    if (rc != -ETIMEDOUT) {
        fail_msg("get: want -ETIMEDOUT, got rc %d key %s", rc, key ? key : "(null)");
    }
    assert_null(key);
}

static void test_dedup_and_fifo(void **state)
{
    (void)state;
    struct kube_workqueue *q = kube_workqueue_new("dedup", NULL);
    assert_non_null(q);
    kube_workqueue_add(q, "ns/a");
    kube_workqueue_add(q, "ns/b");
    kube_workqueue_add(q, "ns/a");
    kube_workqueue_add(q, "ns/c");
    kube_workqueue_add(q, "ns/b");
    assert_int_equal(kube_workqueue_len(q), 3);
    expect_key(q, "ns/a");
    expect_key(q, "ns/b");
    expect_key(q, "ns/c");
    expect_empty(q);
    kube_workqueue_done(q, "ns/a");
    kube_workqueue_done(q, "ns/b");
    kube_workqueue_done(q, "ns/c");
    assert_int_equal(kube_workqueue_len(q), 0);
    kube_workqueue_free(q);
}

/* The FIFO is a ring that grows when full: growing while it wraps keeps the order. */
static void test_fifo_grows_while_wrapped(void **state)
{
    (void)state;
    struct kube_workqueue *q = kube_workqueue_new("ring", NULL);
    assert_non_null(q);
    char key[32];
    int next_in = 0, next_out = 0;
    for (; next_in < 64; next_in++) { /* the first ring: 64, full */
        snprintf(key, sizeof(key), "ns/k%d", next_in);
        kube_workqueue_add(q, key);
    }
    for (; next_out < 40; next_out++) { /* the head moves on */
        snprintf(key, sizeof(key), "ns/k%d", next_out);
        expect_key(q, key);
        kube_workqueue_done(q, key);
    }
    for (; next_in < 64 + 40 + 30; next_in++) { /* wraps round, fills the ring, grows it */
        snprintf(key, sizeof(key), "ns/k%d", next_in);
        kube_workqueue_add(q, key);
    }
    assert_int_equal(kube_workqueue_len(q), next_in - next_out);
    for (; next_out < next_in; next_out++) {
        snprintf(key, sizeof(key), "ns/k%d", next_out);
        expect_key(q, key);
        kube_workqueue_done(q, key);
    }
    expect_empty(q);
    kube_workqueue_free(q);
}

static void test_readd_while_processing(void **state)
{
    (void)state;
    struct kube_workqueue *q = kube_workqueue_new("processing", NULL);
    kube_workqueue_add(q, "a");
    expect_key(q, "a");
    /* a is being processed: adding it again must not hand it to a second worker */
    kube_workqueue_add(q, "a");
    kube_workqueue_add(q, "a");
    assert_int_equal(kube_workqueue_len(q), 0);
    expect_empty(q);
    kube_workqueue_add(q, "b");
    expect_key(q, "b");
    kube_workqueue_done(q, "b");
    expect_empty(q);
    /* done re-queues it exactly once */
    kube_workqueue_done(q, "a");
    assert_int_equal(kube_workqueue_len(q), 1);
    expect_key(q, "a");
    expect_empty(q);
    kube_workqueue_done(q, "a");
    expect_empty(q);
    /* done for a key that is not processed is harmless */
    kube_workqueue_done(q, "zzz");
    expect_empty(q);
    kube_workqueue_free(q);
}

/* ---- 4 workers, 10,000 adds over 64 keys ---- */

#define STRESS_KEYS 64
#define STRESS_ADDS 10000

struct stress {
    struct kube_workqueue *q;
    atomic_int active[STRESS_KEYS];    /* workers inside a key right now */
    atomic_long last_add[STRESS_KEYS]; /* sequence number of the last add */
    atomic_long last_get[STRESS_KEYS]; /* sequence number of the last get */
    atomic_long seq;
    atomic_int violations;
    atomic_long processed;
};

static void *stress_worker(void *arg)
{
    struct stress *s = arg;
    for (long iter = 0; iter < 10L * STRESS_ADDS; iter++) { /* bounded */
        char *key = NULL;
        int rc = kube_workqueue_get(s->q, &key, 5000);
        if (rc != 0) {
            break;
        }
        int k = (int)strtol(key + 1, NULL, 10);
        long g = atomic_fetch_add(&s->seq, 1) + 1;
        atomic_store(&s->last_get[k], g);
        if (atomic_fetch_add(&s->active[k], 1) != 0) {
            atomic_fetch_add(&s->violations, 1);
        }
        if ((g & 7) == 0) {
            sched_yield();
        }
        atomic_fetch_sub(&s->active[k], 1);
        atomic_fetch_add(&s->processed, 1);
        kube_workqueue_done(s->q, key);
        free(key);
    }
    return NULL;
}

static void test_stress_exclusive(void **state)
{
    (void)state;
    struct stress *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->q = kube_workqueue_new("stress", NULL);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, stress_worker, s), 0);
    }
    unsigned seed = 12345;
    for (int i = 0; i < STRESS_ADDS; i++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 16) % STRESS_KEYS);
        char key[16];
        snprintf(key, sizeof(key), "k%d", k);
        atomic_store(&s->last_add[k], atomic_fetch_add(&s->seq, 1) + 1);
        kube_workqueue_add(s->q, key);
        if ((i & 255) == 0) {
            sched_yield();
        }
    }
    /* let the workers catch up, then drain */
    for (int i = 0; i < 500 && kube_workqueue_len(s->q) > 0; i++) {
        sleep_ms(10);
    }
    kube_workqueue_shutdown_drain(s->q);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
    }
    assert_int_equal(atomic_load(&s->violations), 0);
    long processed = atomic_load(&s->processed);
    assert_true(processed >= STRESS_KEYS);
    assert_true(processed <= STRESS_ADDS);
    /* no add was lost: every key was handed out after its last add */
    for (int k = 0; k < STRESS_KEYS; k++) {
        if (atomic_load(&s->last_add[k]) == 0) {
            continue;
        }
        if (atomic_load(&s->last_get[k]) <= atomic_load(&s->last_add[k])) {
            fail_msg("key k%d: last get %ld before last add %ld", k, atomic_load(&s->last_get[k]),
                     atomic_load(&s->last_add[k]));
        }
    }
    kube_workqueue_free(s->q);
    free(s);
}

static void test_delayed_ordering(void **state)
{
    (void)state;
    struct fake_clock clk = {1000 * MS};
    struct kube_workqueue *q = kube_workqueue_new("delay", NULL);
    kube_workqueue_set_clock(q, fake_now, &clk);
    kube_workqueue_add_after(q, "c", 30);
    kube_workqueue_add_after(q, "a", 10);
    kube_workqueue_add_after(q, "b", 20);
    kube_workqueue_add_after(q, "d", 0); /* now */
    expect_key(q, "d");
    expect_empty(q);
    assert_int_equal(kube_workqueue_len(q), 0);
    advance(&clk, 10 * MS - 1);
    expect_empty(q);
    advance(&clk, 1);
    expect_key(q, "a");
    expect_empty(q);
    advance(&clk, 10 * MS);
    expect_key(q, "b");
    advance(&clk, 100 * MS);
    expect_key(q, "c");
    expect_empty(q);

    /* a key already waiting keeps the earlier ready time */
    kube_workqueue_add_after(q, "x", 100);
    kube_workqueue_add_after(q, "x", 50);
    kube_workqueue_add_after(q, "y", 10);
    kube_workqueue_add_after(q, "y", 100);
    advance(&clk, 10 * MS);
    expect_key(q, "y");
    expect_empty(q);
    advance(&clk, 40 * MS);
    expect_key(q, "x");
    advance(&clk, 100 * MS);
    expect_empty(q); /* neither comes a second time */

    /* a delayed key that is already queued is not queued twice */
    kube_workqueue_add(q, "z");
    kube_workqueue_add_after(q, "z", 5);
    advance(&clk, 5 * MS);
    assert_int_equal(kube_workqueue_len(q), 1);
    expect_key(q, "z");
    expect_empty(q);
    kube_workqueue_free(q);
}

struct blocked_get {
    struct kube_workqueue *q;
    int rc;
    char *key;
    int64_t waited_ns;
};

static void *blocked_get_main(void *arg)
{
    struct blocked_get *g = arg;
    int64_t t0 = tandem_now_ns();
    g->rc = kube_workqueue_get(g->q, &g->key, 10000);
    g->waited_ns = tandem_now_ns() - t0;
    return NULL;
}

static void test_blocked_getter_sees_fake_time(void **state)
{
    (void)state;
    struct fake_clock clk = {0};
    struct kube_workqueue *q = kube_workqueue_new("blocked", NULL);
    kube_workqueue_set_clock(q, fake_now, &clk);
    kube_workqueue_add_after(q, "later", 3600 * 1000L); /* an hour of fake time */
    struct blocked_get g = {.q = q};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, blocked_get_main, &g), 0);
    sleep_ms(30);
    advance(&clk, 3600 * 1000 * MS);
    pthread_join(th, NULL);
    assert_int_equal(g.rc, 0);
    assert_string_equal(g.key, "later");
    assert_true(g.waited_ns < 2000 * MS);
    free(g.key);
    kube_workqueue_free(q);
}

static void test_backoff_sequence(void **state)
{
    (void)state;
    /* the exponential limiter alone (bucket off): 5 ms · 2^n capped at 1000 s */
    struct kube_rate_limiter *rl = kube_rate_limiter_new(0, 0, -1, 0);
    assert_non_null(rl);
    int64_t want = 5 * MS;
    for (int n = 0; n < 40; n++) {
        int64_t got = kube_rate_limiter_when(rl, "k", 0);
        int64_t expect = want > 1000000 * MS ? 1000000 * MS : want;
        if (got != expect) {
            fail_msg("failure %d: delay %lld ns, want %lld", n, (long long)got, (long long)expect);
        }
        if (want <= 1000000 * MS) {
            want *= 2;
        }
        assert_int_equal(kube_rate_limiter_num_requeues(rl, "k"), n + 1);
    }
    /* the exact first values and the last uncapped one */
    kube_rate_limiter_forget(rl, "k");
    assert_int_equal(kube_rate_limiter_num_requeues(rl, "k"), 0);
    static const long long first[] = {5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560};
    for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
        assert_int_equal(kube_rate_limiter_when(rl, "k", 0), first[i] * MS);
    }
    for (int i = 10; i < 17; i++) {
        kube_rate_limiter_when(rl, "k", 0);
    }
    assert_int_equal(kube_rate_limiter_when(rl, "k", 0), 655360 * MS); /* 5 ms · 2^17 */
    assert_int_equal(kube_rate_limiter_when(rl, "k", 0), 1000000 * MS);
    /* keys are independent */
    assert_int_equal(kube_rate_limiter_when(rl, "other", 0), 5 * MS);
    assert_int_equal(kube_rate_limiter_num_requeues(rl, "nobody"), 0);
    kube_rate_limiter_free(rl);
}

static void test_bucket(void **state)
{
    (void)state;
    /* the default limiter: max(exponential, bucket 10 qps burst 100) */
    struct kube_rate_limiter *rl = kube_rate_limiter_new(0, 0, 0, 0);
    int64_t t = 5000 * MS;
    char key[32];
    for (int i = 0; i < 100; i++) { /* the burst: only the per-key 5 ms */
        snprintf(key, sizeof(key), "burst-%d", i);
        assert_int_equal(kube_rate_limiter_when(rl, key, t), 5 * MS);
    }
    for (int i = 1; i <= 20; i++) { /* then one token per 100 ms */
        snprintf(key, sizeof(key), "after-%d", i);
        assert_int_equal(kube_rate_limiter_when(rl, key, t), i * 100 * MS);
    }
    /* 100 ms later one token came back: the debt of 20 tokens is now 19, the next waits 2 s */
    t += 100 * MS;
    assert_int_equal(kube_rate_limiter_when(rl, "x1", t), 2000 * MS);
    /* after a long pause the bucket is full again (not more than the burst) */
    t += 3600 * 1000 * MS;
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "again-%d", i);
        assert_int_equal(kube_rate_limiter_when(rl, key, t), 5 * MS);
    }
    assert_int_equal(kube_rate_limiter_when(rl, "again-x", t), 100 * MS);
    /* a key's own backoff wins when it is longer than the bucket's */
    for (int i = 0; i < 10; i++) {
        kube_rate_limiter_when(rl, "slow", t + 3600 * 1000 * MS);
    }
    t += 7200 * 1000 * MS;
    assert_int_equal(kube_rate_limiter_when(rl, "slow", t), 5120 * MS);
    kube_rate_limiter_free(rl);
}

static void test_rate_limited_queue(void **state)
{
    (void)state;
    struct fake_clock clk = {42 * MS};
    struct kube_workqueue *q = kube_workqueue_new("retry", NULL);
    kube_workqueue_set_clock(q, fake_now, &clk);
    int64_t expect_ms[] = {5, 10, 20, 40};
    for (size_t i = 0; i < sizeof(expect_ms) / sizeof(expect_ms[0]); i++) {
        kube_workqueue_add_rate_limited(q, "ns/obj");
        assert_int_equal(kube_workqueue_num_requeues(q, "ns/obj"), (int)i + 1);
        advance(&clk, expect_ms[i] * MS - 1);
        expect_empty(q);
        advance(&clk, 1);
        expect_key(q, "ns/obj");
        kube_workqueue_done(q, "ns/obj");
    }
    kube_workqueue_forget(q, "ns/obj");
    assert_int_equal(kube_workqueue_num_requeues(q, "ns/obj"), 0);
    kube_workqueue_add_rate_limited(q, "ns/obj");
    advance(&clk, 5 * MS);
    expect_key(q, "ns/obj");
    kube_workqueue_done(q, "ns/obj");
    kube_workqueue_free(q);

    /* the global bucket through the queue: 100 keys at once come after 5 ms, the next ones one
     * per 100 ms */
    q = kube_workqueue_new("bucket", NULL);
    kube_workqueue_set_clock(q, fake_now, &clk);
    char key[32];
    for (int i = 0; i < 103; i++) {
        snprintf(key, sizeof(key), "k%03d", i);
        kube_workqueue_add_rate_limited(q, key);
    }
    advance(&clk, 5 * MS);
    assert_int_equal(kube_workqueue_len(q), 100);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k%03d", i);
        expect_key(q, key);
        kube_workqueue_done(q, key);
    }
    expect_empty(q);
    advance(&clk, 95 * MS - 1); /* 100 ms after the adds, minus 1 ns */
    expect_empty(q);
    advance(&clk, 1);
    expect_key(q, "k100");
    expect_empty(q);
    advance(&clk, 100 * MS);
    expect_key(q, "k101");
    advance(&clk, 100 * MS);
    expect_key(q, "k102");
    expect_empty(q);
    kube_workqueue_free(q);
}

static void test_shutdown_wakes_getters(void **state)
{
    (void)state;
    struct kube_workqueue *q = kube_workqueue_new("shutdown", NULL);
    struct blocked_get g[3] = {{.q = q}, {.q = q}, {.q = q}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, blocked_get_main, &g[i]), 0);
    }
    sleep_ms(50);
    kube_workqueue_shutdown(q);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(g[i].rc, -ESHUTDOWN);
        assert_null(g[i].key);
        assert_true(g[i].waited_ns < 2000 * MS); /* woken, not timed out after 10 s */
    }
    assert_true(kube_workqueue_shutting_down(q));
    kube_workqueue_add(q, "late");
    kube_workqueue_add_after(q, "late", 0);
    assert_int_equal(kube_workqueue_len(q), 0);
    char *key = NULL;
    assert_int_equal(kube_workqueue_get(q, &key, -1), -ESHUTDOWN);
    kube_workqueue_free(q);
}

static void test_shutdown_hands_out_queued_keys(void **state)
{
    (void)state;
    struct kube_workqueue *q = kube_workqueue_new("queued", NULL);
    kube_workqueue_add(q, "a");
    kube_workqueue_add(q, "b");
    kube_workqueue_add_after(q, "delayed", 1);
    kube_workqueue_shutdown(q);
    expect_key(q, "a");
    expect_key(q, "b");
    char *key = NULL;
    assert_int_equal(kube_workqueue_get(q, &key, 100), -ESHUTDOWN); /* "delayed" was dropped */
    kube_workqueue_done(q, "a");
    kube_workqueue_done(q, "b");
    kube_workqueue_free(q);
}

struct drainer {
    struct kube_workqueue *q;
    atomic_int finished;
};

static void *drain_main(void *arg)
{
    struct drainer *d = arg;
    kube_workqueue_shutdown_drain(d->q);
    atomic_store(&d->finished, 1);
    return NULL;
}

static void test_drain_waits(void **state)
{
    (void)state;
    struct kube_workqueue *q = kube_workqueue_new("drain", NULL);
    kube_workqueue_add(q, "a");
    kube_workqueue_add(q, "b");
    expect_key(q, "a");
    expect_key(q, "b");
    struct drainer d = {.q = q};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, drain_main, &d), 0);
    sleep_ms(50);
    assert_int_equal(atomic_load(&d.finished), 0);
    kube_workqueue_done(q, "a");
    sleep_ms(50);
    assert_int_equal(atomic_load(&d.finished), 0); /* b is still processed */
    kube_workqueue_done(q, "b");
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&d.finished), 1);
    kube_workqueue_free(q);
}

static int rendered_contains(struct metrics_registry *m, const char *needle)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(metrics_render(m, &b), 0);
    int found = strstr(buf_cstr(&b), needle) != NULL;
    if (!found) {
        print_message("missing %s in:\n%s\n", needle, buf_cstr(&b));
    }
    buf_free(&b);
    return found;
}

static void test_metrics(void **state)
{
    (void)state;
    struct metrics_registry *m = metrics_registry_new();
    struct fake_clock clk = {0};
    struct kube_workqueue_options o = {.controller = "ctl"};
    struct kube_workqueue *q = kube_workqueue_new_opts("wq", m, &o);
    kube_workqueue_set_clock(q, fake_now, &clk);
    kube_workqueue_add(q, "a");
    kube_workqueue_add(q, "a");
    kube_workqueue_add(q, "b");
    assert_true(rendered_contains(m, "workqueue_adds_total{name=\"wq\",controller=\"ctl\"} 2\n"));
    assert_true(rendered_contains(m, "workqueue_depth{name=\"wq\",controller=\"ctl\"} 2\n"));
    advance(&clk, 1500 * MS);
    expect_key(q, "a");
    assert_true(rendered_contains(m, "workqueue_depth{name=\"wq\",controller=\"ctl\"} 1\n"));
    assert_true(rendered_contains(
        m, "workqueue_queue_duration_seconds_bucket{name=\"wq\",controller=\"ctl\",le=\"1\"} 0\n"));
    assert_true(rendered_contains(
        m,
        "workqueue_queue_duration_seconds_bucket{name=\"wq\",controller=\"ctl\",le=\"10\"} 1\n"));
    assert_true(
        rendered_contains(m, "workqueue_queue_duration_seconds_sum{name=\"wq\",controller=\"ctl\"} "
                             "1.5\n"));
    advance(&clk, 3000 * MS);
    /* the unfinished-work gauges are refreshed by the queue's timer every 500 ms */
    int seen = 0;
    for (int i = 0; i < 40 && !seen; i++) {
        sleep_ms(50);
        struct buf b;
        buf_init(&b, 1 << 20);
        metrics_render(m, &b);
        seen = strstr(buf_cstr(&b),
                      "workqueue_longest_running_processor_seconds{name=\"wq\",controller=\"ctl\"} "
                      "3\n") != NULL;
        buf_free(&b);
    }
    assert_true(seen);
    assert_true(rendered_contains(
        m, "workqueue_unfinished_work_seconds{name=\"wq\",controller=\"ctl\"} 3\n"));
    kube_workqueue_done(q, "a");
    assert_true(rendered_contains(
        m, "workqueue_work_duration_seconds_sum{name=\"wq\",controller=\"ctl\"} 3\n"));
    assert_true(rendered_contains(
        m, "workqueue_work_duration_seconds_count{name=\"wq\",controller=\"ctl\"} 1\n"));
    assert_true(rendered_contains(
        m, "workqueue_work_duration_seconds_bucket{name=\"wq\",controller=\"ctl\",le=\"1e-08\"} "
           "0\n"));
    assert_true(rendered_contains(
        m, "workqueue_work_duration_seconds_bucket{name=\"wq\",controller=\"ctl\",le=\"1000\"} "
           "1\n"));
    kube_workqueue_add_rate_limited(q, "c");
    kube_workqueue_add_after(q, "d", 10);
    assert_true(
        rendered_contains(m, "workqueue_retries_total{name=\"wq\",controller=\"ctl\"} 2\n"));

    /* a second queue on the same registry gets its own series */
    struct kube_workqueue *q2 = kube_workqueue_new("other", m);
    assert_non_null(q2);
    kube_workqueue_add(q2, "x");
    assert_true(
        rendered_contains(m, "workqueue_adds_total{name=\"other\",controller=\"other\"} 1\n"));
    assert_true(rendered_contains(m, "workqueue_adds_total{name=\"wq\",controller=\"ctl\"} 2\n"));
    kube_workqueue_free(q2);
    kube_workqueue_free(q);
    /* a queue created again later on the same registry still has metrics */
    q = kube_workqueue_new("again", m);
    kube_workqueue_add(q, "x");
    assert_true(
        rendered_contains(m, "workqueue_adds_total{name=\"again\",controller=\"again\"} 1\n"));
    kube_workqueue_free(q);
    metrics_registry_free(m);

    /* a fresh registry (possibly at the same address) registers the families afresh */
    m = metrics_registry_new();
    q = kube_workqueue_new("fresh", m);
    kube_workqueue_add(q, "x");
    assert_true(
        rendered_contains(m, "workqueue_adds_total{name=\"fresh\",controller=\"fresh\"} 1\n"));
    kube_workqueue_free(q);
    metrics_registry_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dedup_and_fifo),
        cmocka_unit_test(test_fifo_grows_while_wrapped),
        cmocka_unit_test(test_readd_while_processing),
        cmocka_unit_test(test_stress_exclusive),
        cmocka_unit_test(test_delayed_ordering),
        cmocka_unit_test(test_blocked_getter_sees_fake_time),
        cmocka_unit_test(test_backoff_sequence),
        cmocka_unit_test(test_bucket),
        cmocka_unit_test(test_rate_limited_queue),
        cmocka_unit_test(test_shutdown_wakes_getters),
        cmocka_unit_test(test_shutdown_hands_out_queued_keys),
        cmocka_unit_test(test_drain_waits),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
