/* Tests for lib/kube/leader against localkube's API server emulator, with short durations (lease
 * 2 s, renew deadline 1.5 s, retry 0.3 s): one leader among two candidates, hand-over on release,
 * takeover after expiry (judged by the candidate's own observation, not the Lease timestamps),
 * leaseTransitions, MicroTime format, and loss of leadership when renewals fail. */
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

#include <cmocka.h>

#include "lib/json.h"
#include "lib/kube/client.h"
#include "lib/kube/leader.h"
#include "lib/log.h"

#include "lk_harness.h"

#define LEASE_MS 2000
#define RENEW_MS 1500
#define RETRY_MS 300

static struct lk g_lk;
static struct kube_client *g_client;

static int group_setup(void **state)
{
    (void)state;
    log_init("test_leader", getenv("LK_DEBUG") ? LOGL_DEBUG : LOGL_WARN, LOG_FORMAT_TEXT);
    if (lk_start(&g_lk) != 0) {
        return -1;
    }
    /* per-request timeout below the renew deadline, few quick retries */
    struct kube_client_options o = {
        .user_agent = "tandem-leader-test",
        .timeout_ms = 1000,
        .max_retries = 1,
        .backoff_base_ms = 20,
        .backoff_max_ms = 50,
    };
    g_client = lk_client(&g_lk, &o);
    return g_client ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    kube_client_free(g_client);
    lk_stop(&g_lk);
    return 0;
}

struct cand {
    const char *id;
    struct kube_leader *le;
    atomic_int started, stopped, new_leader_calls;
    atomic_llong started_at_ms;
    pthread_mutex_t lock;
    char last_new_leader[64];
};

static void on_started(void *ud)
{
    struct cand *c = ud;
    atomic_store(&c->started_at_ms, lk_now_ms());
    atomic_fetch_add(&c->started, 1);
}

static void on_stopped(void *ud)
{
    struct cand *c = ud;
    atomic_fetch_add(&c->stopped, 1);
}

static void on_new_leader(void *ud, const char *id)
{
    struct cand *c = ud;
    pthread_mutex_lock(&c->lock);
    snprintf(c->last_new_leader, sizeof(c->last_new_leader), "%s", id);
    pthread_mutex_unlock(&c->lock);
    atomic_fetch_add(&c->new_leader_calls, 1);
}

static void cand_init(struct cand *c, const char *id, const char *lease, int release)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->lock, NULL);
    c->id = id;
    struct kube_leader_config cfg = {
        .lease_name = lease,
        .lease_namespace = "default",
        .identity = id,
        .lease_duration_ms = LEASE_MS,
        .renew_deadline_ms = RENEW_MS,
        .retry_period_ms = RETRY_MS,
        .release_on_cancel = release,
        .cb = {on_started, on_stopped, on_new_leader, c},
    };
    char err[256] = "";
    c->le = kube_leader_new(g_client, &cfg, err, sizeof(err));
    if (!c->le) {
        fail_msg("kube_leader_new: %s", err);
    }
}

static void cand_deinit(struct cand *c)
{
    kube_leader_free(c->le);
    pthread_mutex_destroy(&c->lock);
}

static struct json_object *get_lease(const char *name)
{
    struct json_object *o = NULL;
    struct kube_error err = {0};
    int rc = kube_get(g_client, &KUBE_LEASES, "default", name, &o, &err);
    if (rc != 0) {
        fail_msg("get lease %s: %s %s", name, tandem_strerror(rc), err.message);
    }
    return o;
}

static const char *lease_str(struct json_object *l, const char *path)
{
    const char *s = "";
    json_get_string(l, path, &s, NULL, 0);
    return s;
}

static long lease_int(struct json_object *l, const char *path)
{
    int64_t v = -1;
    json_get_int64(l, path, &v, NULL, 0);
    return (long)v;
}

static int is_micro_time(const char *s)
{
    /* 2006-01-02T15:04:05.000000Z */
    static const char pat[] = "dddd-dd-ddTdd:dd:dd.ddddddZ";
    if (strlen(s) != sizeof(pat) - 1) {
        return 0;
    }
    for (size_t i = 0; pat[i]; i++) {
        if (pat[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != pat[i]) {
            return 0;
        }
    }
    return 1;
}

/* Waits until exactly one of the candidates leads; fails if two ever lead at once. Returns the
 * leader's index. */
static int wait_one_leader(struct cand *c, int n, long timeout_ms)
{
    long long end = lk_now_ms() + timeout_ms;
    while (lk_now_ms() < end) {
        int leaders = 0, who = -1;
        for (int i = 0; i < n; i++) {
            if (c[i].le && kube_leader_is_leader(c[i].le)) {
                leaders++;
                who = i;
            }
        }
        if (leaders > 1) {
            fail_msg("%d leaders at once", leaders);
        }
        if (leaders == 1) {
            return who;
        }
        lk_sleep_ms(10);
    }
    fail_msg("no leader within %ld ms", timeout_ms);
    return -1;
}

static void test_config_validation(void **state)
{
    (void)state;
    char err[256];
    struct kube_leader_config cfg = {
        .lease_name = "x", .lease_namespace = "default", .identity = "a"};
    struct kube_leader *le = kube_leader_new(g_client, &cfg, err, sizeof(err));
    assert_non_null(le); /* 15 s / 10 s / 2 s */
    kube_leader_free(le);
    cfg.lease_duration_ms = 10000; /* == renew deadline */
    assert_null(kube_leader_new(g_client, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "leaseDuration must be greater than renewDeadline"));
    cfg.lease_duration_ms = 15000;
    cfg.renew_deadline_ms = 2400; /* == 1.2 × 2000 */
    assert_null(kube_leader_new(g_client, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "renewDeadline must be greater than retryPeriod*JitterFactor"));
    cfg.renew_deadline_ms = 0;
    cfg.identity = "";
    assert_null(kube_leader_new(g_client, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "identity"));
    cfg.identity = "a";
    cfg.lease_name = NULL;
    assert_null(kube_leader_new(g_client, &cfg, NULL, 0));

    char buf[40];
    kube_format_micro_time(1136214245LL, 123456789L, buf, sizeof(buf));
    assert_string_equal(buf, "2006-01-02T15:04:05.123456Z");
    kube_format_micro_time(0, 0, buf, sizeof(buf));
    assert_string_equal(buf, "1970-01-01T00:00:00.000000Z");
}

static void test_two_candidates_release(void **state)
{
    (void)state;
    struct cand c[2];
    cand_init(&c[0], "cand-a", "two", 1);
    cand_init(&c[1], "cand-b", "two", 1);
    assert_int_equal(kube_leader_start(c[0].le), 0);
    assert_int_equal(kube_leader_start(c[0].le), -EBUSY);
    assert_int_equal(kube_leader_start(c[1].le), 0);
    int who = wait_one_leader(c, 2, 5000);
    int other = 1 - who;
    /* stays one leader for a while (renewals work, the other keeps retrying) */
    long long end = lk_now_ms() + 2 * LEASE_MS;
    while (lk_now_ms() < end) {
        assert_int_equal(wait_one_leader(c, 2, 1000), who);
        lk_sleep_ms(20);
    }
    assert_int_equal(atomic_load(&c[who].started), 1);
    assert_int_equal(atomic_load(&c[other].started), 0);

    struct json_object *l = get_lease("two");
    assert_string_equal(lease_str(l, "spec.holderIdentity"), c[who].id);
    assert_int_equal(lease_int(l, "spec.leaseDurationSeconds"), LEASE_MS / 1000);
    assert_int_equal(lease_int(l, "spec.leaseTransitions"), 0);
    assert_true(is_micro_time(lease_str(l, "spec.acquireTime")));
    assert_true(is_micro_time(lease_str(l, "spec.renewTime")));
    /* renewals keep acquireTime and move renewTime */
    char acquire[40], renew[40];
    snprintf(acquire, sizeof(acquire), "%s", lease_str(l, "spec.acquireTime"));
    snprintf(renew, sizeof(renew), "%s", lease_str(l, "spec.renewTime"));
    assert_true(strcmp(renew, acquire) > 0);
    json_object_put(l);

    /* both saw who leads */
    char *seen = kube_leader_get_leader(c[other].le);
    assert_string_equal(seen, c[who].id);
    free(seen);
    pthread_mutex_lock(&c[other].lock);
    assert_string_equal(c[other].last_new_leader, c[who].id);
    pthread_mutex_unlock(&c[other].lock);

    /* stopping the leader releases the lease: the other takes over well within the lease */
    long long t0 = lk_now_ms();
    kube_leader_stop(c[who].le);
    assert_int_equal(atomic_load(&c[who].stopped), 1);
    assert_int_equal(kube_leader_is_leader(c[who].le), 0);
    assert_int_equal(kube_leader_was_leading(c[who].le), 1);
    struct cand *rest = &c[other];
    assert_int_equal(wait_one_leader(rest, 1, LEASE_MS), 0);
    long long took = atomic_load(&rest->started_at_ms) - t0;
    if (took > LEASE_MS) {
        fail_msg("takeover after release took %lld ms", took);
    }
    l = get_lease("two");
    assert_string_equal(lease_str(l, "spec.holderIdentity"), c[other].id);
    assert_int_equal(lease_int(l, "spec.leaseTransitions"), 1);
    assert_int_equal(lease_int(l, "spec.leaseDurationSeconds"), LEASE_MS / 1000);
    assert_true(strcmp(lease_str(l, "spec.acquireTime"), acquire) > 0);
    json_object_put(l);

    /* the last one releases too */
    kube_leader_stop(c[other].le);
    l = get_lease("two");
    assert_string_equal(lease_str(l, "spec.holderIdentity"), "");
    assert_int_equal(lease_int(l, "spec.leaseDurationSeconds"), 1);
    assert_int_equal(lease_int(l, "spec.leaseTransitions"), 1);
    json_object_put(l);
    cand_deinit(&c[0]);
    cand_deinit(&c[1]);
}

static void test_killed_leader_expires(void **state)
{
    (void)state;
    struct cand c[2];
    cand_init(&c[0], "kill-a", "kill", 0); /* no release: like a killed process */
    assert_int_equal(kube_leader_start(c[0].le), 0);
    assert_int_equal(wait_one_leader(c, 1, 5000), 0);
    cand_init(&c[1], "kill-b", "kill", 0);
    assert_int_equal(kube_leader_start(c[1].le), 0);
    lk_sleep_ms(LEASE_MS + 500); /* b cannot take a lease that is being renewed */
    assert_int_equal(wait_one_leader(c, 2, 100), 0);
    assert_int_equal(atomic_load(&c[1].started), 0);

    long long t0 = lk_now_ms();
    kube_leader_stop(c[0].le);
    struct json_object *l = get_lease("kill");
    assert_string_equal(lease_str(l, "spec.holderIdentity"), "kill-a"); /* not released */
    json_object_put(l);
    assert_int_equal(wait_one_leader(&c[1], 1, 3 * LEASE_MS), 0);
    long long took = atomic_load(&c[1].started_at_ms) - t0;
    /* a's last renewal was at most one retry period (plus a request) before the stop; b takes
     * over once the record has stood unchanged for the lease duration in its own observation */
    if (took < LEASE_MS - RETRY_MS - 200 || took > LEASE_MS + 3 * RETRY_MS + 500) {
        fail_msg("takeover %lld ms after the leader died", took);
    }
    l = get_lease("kill");
    assert_string_equal(lease_str(l, "spec.holderIdentity"), "kill-b");
    assert_int_equal(lease_int(l, "spec.leaseTransitions"), 1);
    json_object_put(l);
    cand_deinit(&c[0]);
    cand_deinit(&c[1]);
}

static void test_expiry_by_own_observation(void **state)
{
    (void)state;
    /* a lease "renewed" in the year 2000 by a holder that is gone: a candidate must still wait
     * a full lease duration of its own observation before taking it (timestamps are not
     * compared with the local clock) */
    const char *body = "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
                       "\"metadata\":{\"name\":\"stale\",\"namespace\":\"default\"},"
                       "\"spec\":{\"holderIdentity\":\"ghost\",\"leaseDurationSeconds\":2,"
                       "\"acquireTime\":\"2000-01-01T00:00:00.000000Z\","
                       "\"renewTime\":\"2000-01-01T00:00:00.000000Z\",\"leaseTransitions\":7}}";
    struct json_object *o = json_parse(body, strlen(body), NULL, 0);
    assert_int_equal(kube_create(g_client, &KUBE_LEASES, "default", o, NULL, NULL), 0);
    json_object_put(o);
    struct cand c;
    cand_init(&c, "observer", "stale", 1);
    long long t0 = lk_now_ms();
    assert_int_equal(kube_leader_start(c.le), 0);
    assert_int_equal(wait_one_leader(&c, 1, 3 * LEASE_MS), 0);
    long long took = atomic_load(&c.started_at_ms) - t0;
    if (took < 2000 || took > 2000 + 3 * RETRY_MS + 500) {
        fail_msg("took the stale lease after %lld ms, want ~2000", took);
    }
    pthread_mutex_lock(&c.lock);
    assert_string_equal(c.last_new_leader, "observer");
    pthread_mutex_unlock(&c.lock);
    assert_true(atomic_load(&c.new_leader_calls) >= 2); /* ghost, then observer */
    struct json_object *l = get_lease("stale");
    assert_string_equal(lease_str(l, "spec.holderIdentity"), "observer");
    assert_int_equal(lease_int(l, "spec.leaseTransitions"), 8);
    json_object_put(l);
    cand_deinit(&c);
}

static void test_renew_failure_stops_leading(void **state)
{
    (void)state;
    struct cand c;
    cand_init(&c, "fragile", "fragile", 1);
    assert_int_equal(kube_leader_start(c.le), 0);
    assert_int_equal(wait_one_leader(&c, 1, 5000), 0);
    /* every lease write and read fails from now on */
    assert_int_equal(lk_fault(g_client, "{\"type\":\"fail\",\"verb\":\"update\",\"resource\":"
                                        "\"leases\",\"code\":500,\"count\":0}"),
                     0);
    assert_int_equal(lk_fault(g_client, "{\"type\":\"fail\",\"verb\":\"get\",\"resource\":"
                                        "\"leases\",\"code\":500,\"count\":0}"),
                     0);
    long long t0 = lk_now_ms();
    long long end = t0 + 3 * LEASE_MS;
    while (atomic_load(&c.stopped) == 0 && lk_now_ms() < end) {
        lk_sleep_ms(10);
    }
    long long took = lk_now_ms() - t0;
    assert_int_equal(lk_clear_faults(g_client), 0);
    assert_int_equal(atomic_load(&c.stopped), 1);
    assert_int_equal(kube_leader_is_leader(c.le), 0);
    /* within a retry period + the renew deadline (+ one request) */
    if (took > RETRY_MS + RENEW_MS + 1500) {
        fail_msg("leadership lost only after %lld ms", took);
    }
    kube_leader_stop(c.le);
    assert_int_equal(atomic_load(&c.stopped), 1); /* once */
    cand_deinit(&c);
}

static void test_stop_before_leading(void **state)
{
    (void)state;
    struct cand c[2];
    cand_init(&c[0], "holder", "busy", 1);
    cand_init(&c[1], "waiter", "busy", 1);
    assert_int_equal(kube_leader_start(c[0].le), 0);
    assert_int_equal(wait_one_leader(c, 1, 5000), 0);
    assert_int_equal(kube_leader_start(c[1].le), 0);
    lk_sleep_ms(3 * RETRY_MS);
    long long t0 = lk_now_ms();
    kube_leader_stop(c[1].le);
    assert_true(lk_now_ms() - t0 < 1000);
    /* client-go calls OnStoppedLeading whenever Run returns */
    assert_int_equal(atomic_load(&c[1].stopped), 1);
    assert_int_equal(kube_leader_was_leading(c[1].le), 0);
    struct json_object *l = get_lease("busy");
    assert_string_equal(lease_str(l, "spec.holderIdentity"), "holder"); /* untouched */
    json_object_put(l);
    cand_deinit(&c[1]);
    cand_deinit(&c[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_two_candidates_release),
        cmocka_unit_test(test_killed_leader_expires),
        cmocka_unit_test(test_expiry_by_own_observation),
        cmocka_unit_test(test_renew_failure_stops_leading),
        cmocka_unit_test(test_stop_before_leading),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
