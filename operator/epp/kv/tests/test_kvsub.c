/*
 * Unit tests for operator/epp/kv/kvsub, over real sockets on a 127.0.x.y loopback address:
 *  - our publisher (agent/kv_events.h) end to end: batches published before the pod is added
 *    arrive through the join replay, later ones live (a batch lost to PUB/SUB's slow join is
 *    repaired through replay), AllBlocksCleared empties the pod, removal purges it;
 *  - a raw XPUB + ROUTER driven by the test, which waits for the subscription (XPUB shows it),
 *    skips a seq and answers the replay itself: the gap is repaired in order with the duplicate
 *    skipped; then a restart (seq back to 0), malformed messages, and a replay that times out.
 * Every wait is bounded (WAIT_MS).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <msgpack.h>
#include <zmq.h>

#include "agent/kv_events.h"
#include "lib/clock.h"
#include "operator/epp/kv/kvevents.h"
#include "operator/epp/kv/kvsub.h"

#define WAIT_MS 5000

static char ip[32];

/* A port free on ip now (the kernel's choice). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &a.sin_addr);
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        fail_msg("free_port: %s", strerror(errno));
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int setup(void **state)
{
    (void)state;
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    snprintf(ip, sizeof(ip), "127.0.%d.%d", 100 + rand() % 100, 2 + rand() % 250);
    return 0;
}

struct fx {
    struct kvidx *idx;
    struct kvsub *sub;
    char pod[64];
    int port, replay_port;
};

static void fx_start(struct fx *f, int replay_timeout_ms)
{
    char err[256] = "";
    f->idx = kvidx_new(&(struct kvidx_config){.size = 10000}, err, sizeof(err));
    assert_non_null(f->idx);
    f->sub =
        kvsub_start(&(struct kvsub_config){.index = f->idx, .replay_timeout_ms = replay_timeout_ms},
                    err, sizeof(err));
    if (!f->sub) {
        fail_msg("kvsub_start: %s", err);
    }
    snprintf(f->pod, sizeof(f->pod), "%s:8000", ip);
    f->port = free_port();
    f->replay_port = free_port();
}

static void fx_stop(struct fx *f)
{
    kvsub_stop(f->sub);
    kvidx_free(f->idx);
}

static bool holds(struct fx *f, uint64_t key)
{
    struct kvidx_holder h[4];
    size_t n = kvidx_lookup(f->idx, key, h, 4);
    return n == 1 && strcmp(h[0].pod, f->pod) == 0;
}

static void wait_for(bool (*cond)(struct fx *, uint64_t), struct fx *f, uint64_t arg, bool want,
                     const char *what)
{
    int64_t end = tandem_now_ms() + WAIT_MS;
    while (cond(f, arg) != want) {
        if (tandem_now_ms() > end) {
            fail_msg("timed out waiting for %s", what);
        }
        usleep(5000);
    }
}

static bool synced(struct fx *f, uint64_t unused)
{
    (void)unused;
    struct kvsub_pod_stats st;
    return kvsub_pod_stats(f->sub, f->pod, &st) == 0 && st.synced && !st.replaying;
}

static bool keys_are(struct fx *f, uint64_t n)
{
    struct kvidx_stats st;
    kvidx_stats(f->idx, &st);
    return st.keys == n;
}

/* ---- with our publisher ---- */

static void publish_stored(kvc_event_sink *sink, uint64_t key)
{
    const int32_t tokens[2] = {1, 2};
    kvc_stored_event ev = {
        .block_hashes = &key, .n_blocks = 1, .token_ids = tokens, .block_size = 2};
    sink->stored(sink->user, &ev);
    sink->flush(sink->user);
}

static void test_publisher_end_to_end(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, 0);
    char endpoint[64], replay[64], topic[96], err[256] = "";
    snprintf(endpoint, sizeof(endpoint), "tcp://%s:%d", ip, f.port);
    snprintf(replay, sizeof(replay), "tcp://%s:%d", ip, f.replay_port);
    snprintf(topic, sizeof(topic), "kv@%s@tiny", f.pod);
    struct kv_events *pub = kv_events_new(
        &(struct kv_events_config){
            .endpoint = endpoint, .replay_endpoint = replay, .topic = topic, .force_bind = 1},
        err, sizeof(err));
    if (!pub) {
        fail_msg("kv_events_new: %s", err);
    }
    kvc_event_sink sink;
    kv_events_sink(pub, &sink);
    kv_events_publish_all_cleared(pub); /* as the agent does on start */
    for (uint64_t k = 1; k <= 3; k++) {
        publish_stored(&sink, k);
    }
    struct kv_events_stats ps;
    int64_t end = tandem_now_ms() + WAIT_MS;
    do {
        kv_events_get_stats(pub, &ps);
        usleep(2000);
    } while (ps.next_seq < 4 && tandem_now_ms() < end);
    assert_int_equal(ps.next_seq, 4);

    /* joining: the replay brings the pod's history */
    assert_int_equal(kvsub_add_pod(f.sub, f.pod, ip, f.port, f.replay_port), 0);
    assert_int_equal(kvsub_add_pod(f.sub, f.pod, ip, f.port, f.replay_port), -EEXIST);
    wait_for(synced, &f, 0, true, "the join replay");
    wait_for(keys_are, &f, 3, true, "the replayed history");
    assert_true(holds(&f, 1) && holds(&f, 3));

    /* live: publish until the newest key shows; whatever the slow join lost comes by replay */
    uint64_t k = 100;
    for (end = tandem_now_ms() + WAIT_MS; !holds(&f, k); k++) {
        if (tandem_now_ms() > end) {
            fail_msg("live batches never arrived");
        }
        publish_stored(&sink, k + 1);
        usleep(20000);
    }
    for (uint64_t i = 101; i <= k; i++) {
        if (!holds(&f, i)) {
            fail_msg("key %llu of a published batch is missing", (unsigned long long)i);
        }
    }
    struct kvsub_pod_stats st;
    assert_int_equal(kvsub_pod_stats(f.sub, f.pod, &st), 0);
    assert_int_equal(st.decode_errors, 0);
    assert_int_equal(st.topic_mismatches, 0);
    assert_int_equal(st.gaps_unrepaired, 0);
    assert_true(st.replays >= 1);
    assert_int_equal(st.next_seq, 4 + (k - 100));
    assert_int_equal(st.clears, 1);

    /* AllBlocksCleared empties the pod */
    kv_events_publish_all_cleared(pub);
    wait_for(keys_are, &f, 0, true, "AllBlocksCleared");

    /* removal purges */
    publish_stored(&sink, 7);
    wait_for(keys_are, &f, 1, true, "key 7");
    assert_int_equal(kvsub_remove_pod(f.sub, f.pod), 0);
    assert_int_equal(kvsub_remove_pod(f.sub, f.pod), -ENOENT);
    wait_for(keys_are, &f, 0, true, "the purge on removal");
    assert_int_equal(kvsub_pod_stats(f.sub, f.pod, &st), -ENOENT);
    kv_events_free(pub);
    fx_stop(&f);
}

/* ---- with a publisher the test drives ---- */

struct raw {
    void *ctx, *xpub, *router;
};

static void raw_open(struct raw *r, const struct fx *f)
{
    char ep[64];
    r->ctx = zmq_ctx_new();
    r->xpub = zmq_socket(r->ctx, ZMQ_XPUB);
    r->router = zmq_socket(r->ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(r->xpub, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(r->router, ZMQ_LINGER, &zero, sizeof(zero));
    snprintf(ep, sizeof(ep), "tcp://%s:%d", ip, f->port);
    assert_int_equal(zmq_bind(r->xpub, ep), 0);
    snprintf(ep, sizeof(ep), "tcp://%s:%d", ip, f->replay_port);
    assert_int_equal(zmq_bind(r->router, ep), 0);
}

static void raw_close(struct raw *r)
{
    zmq_close(r->xpub);
    zmq_close(r->router);
    zmq_ctx_term(r->ctx);
}

static void put_be64(uint8_t out[8], uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        out[i] = (uint8_t)v;
        v >>= 8;
    }
}

/* A payload storing key (or clearing all first, when clear). Caller frees. */
static char *payload(uint64_t key, bool clear, size_t *len)
{
    const int32_t tokens[1] = {5};
    struct kv_event ev[2] = {
        {.type = KV_EVENT_ALL_CLEARED},
        {.type = KV_EVENT_BLOCK_STORED,
         .stored = {.block_hashes = &key, .n_blocks = 1, .token_ids = tokens, .block_size = 1}},
    };
    char *out;
    assert_int_equal(
        kv_events_encode_batch(1.0, clear ? ev : ev + 1, clear ? 2 : 1, "GPU", 0, &out, len), 0);
    return out;
}

static void raw_send(struct raw *r, const char *topic, uint64_t seq, const void *data, size_t len)
{
    uint8_t be[8];
    put_be64(be, seq);
    assert_true(zmq_send(r->xpub, topic, strlen(topic), ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(r->xpub, be, 8, ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(r->xpub, data, len, 0) >= 0);
}

static void raw_send_key(struct raw *r, const char *topic, uint64_t seq, uint64_t key, bool clear)
{
    size_t len;
    char *p = payload(key, clear, &len);
    raw_send(r, topic, seq, p, len);
    free(p);
}

/* Waits for a replay request; returns its start seq and keeps the client's routing id. */
static uint64_t raw_replay_request(struct raw *r, zmq_msg_t *id)
{
    zmq_pollitem_t it = {.socket = r->router, .events = ZMQ_POLLIN};
    assert_int_equal(zmq_poll(&it, 1, WAIT_MS), 1);
    zmq_msg_init(id);
    assert_true(zmq_msg_recv(id, r->router, 0) >= 0);
    char delim[8], start[16];
    assert_int_equal(zmq_recv(r->router, delim, sizeof(delim), 0), 0);
    assert_int_equal(zmq_recv(r->router, start, sizeof(start), 0), 8);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = v << 8 | (uint8_t)start[i];
    }
    return v;
}

static void raw_reply(struct raw *r, zmq_msg_t *id, uint64_t seq, const void *data, size_t len)
{
    uint8_t be[8];
    put_be64(be, seq);
    assert_true(zmq_send(r->router, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(r->router, "", 0, ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(r->router, be, 8, ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(r->router, data, len, 0) >= 0);
}

static void raw_reply_key(struct raw *r, zmq_msg_t *id, uint64_t seq, uint64_t key)
{
    size_t len;
    char *p = payload(key, false, &len);
    raw_reply(r, id, seq, p, len);
    free(p);
}

static void raw_wait_subscription(struct raw *r)
{
    zmq_pollitem_t it = {.socket = r->xpub, .events = ZMQ_POLLIN};
    assert_int_equal(zmq_poll(&it, 1, WAIT_MS), 1);
    char sub[16];
    assert_int_equal(zmq_recv(r->xpub, sub, sizeof(sub), 0), 4);
    assert_memory_equal(sub, "\x01kv@", 4);
}

static bool stat_is(struct fx *f, uint64_t want_decode_errors)
{
    struct kvsub_pod_stats st;
    return kvsub_pod_stats(f->sub, f->pod, &st) == 0 && st.decode_errors == want_decode_errors;
}

static void test_gap_replay(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, 0);
    struct raw r;
    raw_open(&r, &f);
    char topic[96];
    snprintf(topic, sizeof(topic), "kv@%s@tiny", f.pod);
    assert_int_equal(kvsub_add_pod(f.sub, f.pod, ip, f.port, f.replay_port), 0);
    zmq_msg_t id;
    assert_int_equal(raw_replay_request(&r, &id), 0); /* the join: nothing kept yet */
    raw_reply(&r, &id, KVEV_REPLAY_END, "", 0);
    zmq_msg_close(&id);
    wait_for(synced, &f, 0, true, "the join");
    raw_wait_subscription(&r);

    raw_send_key(&r, topic, 0, 10, true);
    raw_send_key(&r, topic, 2, 12, false); /* seq 1 (key 11) never sent live */
    assert_int_equal(raw_replay_request(&r, &id), 1);
    raw_reply_key(&r, &id, 1, 11);
    raw_reply_key(&r, &id, 2, 12);
    raw_reply(&r, &id, KVEV_REPLAY_END, "", 0);
    zmq_msg_close(&id);
    raw_send_key(&r, topic, 3, 13, false);
    wait_for(keys_are, &f, 4, true, "keys 10-13");
    assert_true(holds(&f, 10) && holds(&f, 11) && holds(&f, 12) && holds(&f, 13));
    struct kvsub_pod_stats st;
    assert_int_equal(kvsub_pod_stats(f.sub, f.pod, &st), 0);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.gaps_unrepaired, 0);
    assert_int_equal(st.replays, 2);
    assert_int_equal(st.replay_failures, 0);
    assert_int_equal(st.replayed, 2);
    assert_int_equal(st.duplicates, 1); /* the held seq 2, already replayed */
    assert_int_equal(st.next_seq, 4);
    assert_int_equal(st.batches, 4);

    /* malformed messages are dropped and counted; a bad payload still takes its seq */
    assert_true(zmq_send(r.xpub, "kv@x", 4, 0) >= 0);
    wait_for(stat_is, &f, 1, true, "a one-frame message counted");
    raw_send(&r, topic, 4, "\xc1", 1);
    wait_for(stat_is, &f, 2, true, "a bad payload counted");
    raw_send_key(&r, "kv@nobody", 5, 14, false);
    wait_for(stat_is, &f, 3, true, "a bad topic counted");
    raw_send_key(&r, topic, 6, 15, false);
    wait_for(keys_are, &f, 5, true, "key 15");
    assert_int_equal(kvsub_pod_stats(f.sub, f.pod, &st), 0);
    assert_int_equal(st.gaps, 1);

    /* seq back to 0: the publisher restarted; its old blocks are purged */
    raw_send_key(&r, topic, 0, 20, false);
    wait_for(keys_are, &f, 1, true, "the restart's purge");
    assert_true(holds(&f, 20));
    assert_int_equal(kvsub_pod_stats(f.sub, f.pod, &st), 0);
    assert_int_equal(st.restarts, 1);

    raw_close(&r);
    fx_stop(&f);
}

static void test_replay_timeout(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, 200);
    struct raw r;
    raw_open(&r, &f);
    char topic[96];
    snprintf(topic, sizeof(topic), "kv@%s@tiny", f.pod);
    assert_int_equal(kvsub_add_pod(f.sub, f.pod, ip, f.port, f.replay_port), 0);
    zmq_msg_t id;
    raw_replay_request(&r, &id); /* never answered: the join fails after 200 ms */
    zmq_msg_close(&id);
    raw_wait_subscription(&r);
    struct kvsub_pod_stats st;
    int64_t end = tandem_now_ms() + WAIT_MS;
    do {
        usleep(5000);
        assert_int_equal(kvsub_pod_stats(f.sub, f.pod, &st), 0);
    } while (st.replay_failures == 0 && tandem_now_ms() < end);
    assert_int_equal(st.replay_failures, 1);
    assert_false(st.synced);
    /* a first live batch past 0: replay from 0, unanswered again, then the stream is followed */
    raw_send_key(&r, topic, 5, 50, false);
    raw_replay_request(&r, &id);
    zmq_msg_close(&id);
    wait_for(keys_are, &f, 1, true, "key 50 after the failed replay");
    raw_send_key(&r, topic, 6, 51, false);
    wait_for(keys_are, &f, 2, true, "key 51");
    wait_for(synced, &f, 0, true, "synced on the live stream");
    assert_int_equal(kvsub_pod_stats(f.sub, f.pod, &st), 0);
    assert_int_equal(st.replay_failures, 2);
    assert_int_equal(st.next_seq, 7);
    /* stop with the pod still subscribed: everything is closed and freed */
    raw_close(&r);
    fx_stop(&f);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(kvsub_start(&(struct kvsub_config){.index = NULL}, err, sizeof(err)));
    assert_non_null(strstr(err, "index"));
    struct fx f;
    fx_start(&f, 0);
    assert_int_equal(kvsub_add_pod(f.sub, "", ip, 0, 0), -EINVAL);
    assert_int_equal(kvsub_add_pod(f.sub, f.pod, "", 0, 0), -EINVAL);
    assert_int_equal(kvsub_add_pod(f.sub, f.pod, "[::1]", 0, 0), -EINVAL);
    assert_int_equal(kvsub_add_pod(f.sub, f.pod, ip, 70000, 0), -EINVAL);
    assert_int_equal(kvsub_add_pod(f.sub, f.pod, ip, 0, -2), -EINVAL);
    /* added and removed before the thread saw either */
    assert_int_equal(kvsub_add_pod(f.sub, "a:1", "::1", 0, -1), 0);
    assert_int_equal(kvsub_remove_pod(f.sub, "a:1"), 0);
    assert_int_equal(kvsub_remove_pod(f.sub, "b:1"), -ENOENT);
    struct kvsub_pod_stats sum;
    size_t n, n_synced;
    kvsub_stats(f.sub, &sum, &n, &n_synced);
    assert_int_equal(n, 0);
    fx_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publisher_end_to_end),
        cmocka_unit_test(test_gap_replay),
        cmocka_unit_test(test_replay_timeout),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
