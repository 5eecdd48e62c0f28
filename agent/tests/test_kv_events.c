/*
 * Unit tests for agent/kv_events: the payload bytes against msgpack written by Python's msgpack
 * (golden), and the publisher end to end over ipc:// (and tcp:// for connect mode and a taken
 * port) with a real SUB socket and DEALER replay clients, decoded with msgpack-c's unpacker.
 *
 * PUB/SUB has the slow-joiner problem: a subscription reaches the publisher some time after
 * connect, and what is published before is lost. fx_join publishes AllBlocksCleared probes until
 * one arrives, then drains the rest, so every test knows the seq its own batches get.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <msgpack.h>
#include <zmq.h>

#include "agent/kv_events.h"
#include "lib/common.h"

#define TOPIC      "kv@127.0.0.1:8000@tiny"
#define WAIT_MS    3000 /* for a message that must come */
#define QUIET_MS   200  /* for one that must not */
#define MAX_FRAMES 8

/* ---- helpers ---- */

/* cmocka's failures longjmp out of the test, which clang's analyzer does not know; where a check
 * guards memory that is used next, say so (abort is never reached). */
#define require(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fail_msg("required: %s", #cond);                                                       \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

struct msg {
    int n; /* frames received (the first MAX_FRAMES are kept) */
    size_t len[MAX_FRAMES];
    char *data[MAX_FRAMES];
};

static void msg_free(struct msg *m)
{
    for (int i = 0; i < m->n && i < MAX_FRAMES; i++) {
        free(m->data[i]);
    }
    memset(m, 0, sizeof(*m));
}

/* Receives one whole message: its frame count, 0 when none came within timeout_ms. */
static int recv_msg(void *s, int timeout_ms, struct msg *m)
{
    memset(m, 0, sizeof(*m));
    zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, timeout_ms) <= 0) {
        return 0;
    }
    int more = 1;
    while (more) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        require(zmq_msg_recv(&f, s, 0) >= 0);
        if (m->n < MAX_FRAMES) {
            m->len[m->n] = zmq_msg_size(&f);
            m->data[m->n] = malloc(m->len[m->n] + 1);
            require(m->data[m->n] != NULL);
            memcpy(m->data[m->n], zmq_msg_data(&f), m->len[m->n]);
            m->data[m->n][m->len[m->n]] = '\0';
        }
        more = zmq_msg_more(&f);
        zmq_msg_close(&f);
        m->n++;
    }
    return m->n;
}

static uint64_t be64(const char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = v << 8 | (uint8_t)p[i];
    }
    return v;
}

static void put_be64(char *out, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        out[i] = (char)(v & 0xff);
        v >>= 8;
    }
}

/* A decoded payload: [ts, [events], rank]. Strings point into buf (msgpack-c copies none). */
struct decoded {
    char *buf;
    msgpack_unpacked u;
    double ts;
    const msgpack_object *events;
    uint32_t n_events;
    int64_t rank;
};

/* Decodes data (malloc'd; d takes it) into d and checks the batch's shape. */
static void decode(char *data, size_t len, struct decoded *d)
{
    require(data != NULL && len > 0);
    d->buf = data;
    msgpack_unpacked_init(&d->u);
    size_t off = 0;
    require(msgpack_unpack_next(&d->u, d->buf, len, &off) == MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(off, len); /* one object, nothing after it */
    const msgpack_object *o = &d->u.data;
    assert_int_equal(o->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(o->via.array.size, 3);
    const msgpack_object *f = o->via.array.ptr;
    assert_int_equal(f[0].type, MSGPACK_OBJECT_FLOAT64);
    d->ts = f[0].via.f64;
    assert_int_equal(f[1].type, MSGPACK_OBJECT_ARRAY);
    d->events = f[1].via.array.ptr;
    d->n_events = f[1].via.array.size;
    assert_true(f[2].type == MSGPACK_OBJECT_POSITIVE_INTEGER);
    d->rank = (int64_t)f[2].via.u64;
}

static void decoded_free(struct decoded *d)
{
    msgpack_unpacked_destroy(&d->u);
    free(d->buf);
}

static void assert_str(const msgpack_object *o, const char *s)
{
    assert_int_equal(o->type, MSGPACK_OBJECT_STR);
    assert_int_equal(o->via.str.size, strlen(s));
    assert_memory_equal(o->via.str.ptr, s, strlen(s));
}

static void assert_u64(const msgpack_object *o, uint64_t v)
{
    assert_int_equal(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_true(o->via.u64 == v);
}

static void assert_nil(const msgpack_object *o)
{
    assert_int_equal(o->type, MSGPACK_OBJECT_NIL);
}

/* Event i of d: checks its tag and field count, returns its fields (tag at [0]). */
static const msgpack_object *event_at(const struct decoded *d, uint32_t i, const char *tag,
                                      uint32_t n_fields)
{
    assert_true(i < d->n_events);
    const msgpack_object *e = &d->events[i];
    assert_int_equal(e->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(e->via.array.size, n_fields);
    assert_str(&e->via.array.ptr[0], tag);
    return e->via.array.ptr;
}

/* Checks a BlockStored event against what was given to the sink. */
static void assert_stored(const struct decoded *d, uint32_t i, const kvc_stored_event *want,
                          const char *medium)
{
    const msgpack_object *f = event_at(d, i, "BlockStored", 8);
    assert_int_equal(f[1].type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(f[1].via.array.size, want->n_blocks);
    for (int32_t b = 0; b < want->n_blocks; b++) {
        assert_u64(&f[1].via.array.ptr[b], want->block_hashes[b]);
    }
    if (want->has_parent) {
        assert_u64(&f[2], want->parent_hash);
    } else {
        assert_nil(&f[2]);
    }
    assert_int_equal(f[3].type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(f[3].via.array.size, want->n_blocks * want->block_size);
    for (int32_t t = 0; t < want->n_blocks * want->block_size; t++) {
        assert_u64(&f[3].via.array.ptr[t], (uint64_t)want->token_ids[t]);
    }
    assert_u64(&f[4], (uint64_t)want->block_size);
    assert_nil(&f[5]); /* lora_id */
    assert_str(&f[6], medium);
    if (want->lora_name) {
        assert_str(&f[7], want->lora_name);
    } else {
        assert_nil(&f[7]);
    }
}

/* ---- fixture: a publisher on ipc:// endpoints in a scratch directory, and a subscriber ---- */

struct fx {
    char dir[64];
    char ep[128], rep[128];
    void *zctx, *sub;
    struct kv_events *p;
    kvc_event_sink sink;
    uint64_t next_seq; /* the seq the next batch of the test gets */
};

/* Starts a publisher with c (endpoint and replay_endpoint default to ipc paths in a scratch
 * directory; topic to TOPIC), and a subscriber that has joined. */
static void fx_start(struct fx *f, struct kv_events_config c, bool replay)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/kvev-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->ep, sizeof(f->ep), "ipc://%s/pub", f->dir);
    snprintf(f->rep, sizeof(f->rep), "ipc://%s/replay", f->dir);
    if (!c.endpoint) {
        c.endpoint = f->ep;
    }
    if (replay && !c.replay_endpoint) {
        c.replay_endpoint = f->rep;
    }
    if (!c.topic) {
        c.topic = TOPIC;
    }
    char err[256] = "";
    f->p = kv_events_new(&c, err, sizeof(err));
    if (!f->p) {
        fail_msg("kv_events_new: %s", err);
    }
    kv_events_sink(f->p, &f->sink);
    f->zctx = zmq_ctx_new();
    assert_non_null(f->zctx);
    f->sub = zmq_socket(f->zctx, ZMQ_SUB);
    int zero = 0;
    assert_int_equal(zmq_setsockopt(f->sub, ZMQ_LINGER, &zero, sizeof(zero)), 0);
    assert_int_equal(zmq_setsockopt(f->sub, ZMQ_SUBSCRIBE, "kv@", 3), 0);
    assert_int_equal(zmq_connect(f->sub, c.endpoint), 0);
}

/* Publishes AllBlocksCleared probes until one reaches the subscriber, then takes the rest: the
 * probes are the only batches so far, so probe k has seq k. */
static void fx_join(struct fx *f)
{
    for (uint64_t sent = 1; sent <= 300; sent++) {
        kv_events_publish_all_cleared(f->p);
        struct msg m;
        if (!recv_msg(f->sub, 10, &m)) {
            continue;
        }
        for (;;) {
            require(m.n == 3 && m.len[1] == 8);
            uint64_t seq = be64(m.data[1]);
            msg_free(&m);
            if (seq == sent - 1) {
                f->next_seq = sent;
                return;
            }
            assert_true(seq < sent - 1);
            require(recv_msg(f->sub, WAIT_MS, &m) == 3);
        }
    }
    fail_msg("the subscriber never received a probe");
}

static void fx_stop(struct fx *f)
{
    kv_events_free(f->p);
    zmq_close(f->sub);
    zmq_ctx_term(f->zctx);
    char path[160];
    snprintf(path, sizeof(path), "%s/pub", f->dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/replay", f->dir);
    unlink(path);
    rmdir(f->dir);
}

/* Receives the next batch: three frames, the topic, seq == f->next_seq (then advanced). The
 * payload is decoded into d; *payload (if not NULL) gets a copy the caller frees. */
static void fx_recv_batch(struct fx *f, struct decoded *d, char **payload, size_t *payload_len)
{
    struct msg m;
    require(recv_msg(f->sub, WAIT_MS, &m) == 3);
    assert_int_equal(m.len[0], strlen(TOPIC));
    assert_string_equal(m.data[0], TOPIC);
    require(m.len[1] == 8);
    assert_true(be64(m.data[1]) == f->next_seq);
    f->next_seq++;
    if (payload) {
        *payload = malloc(m.len[2]);
        require(*payload != NULL);
        memcpy(*payload, m.data[2], m.len[2]);
        *payload_len = m.len[2];
    }
    decode(m.data[2], m.len[2], d);
    m.data[2] = NULL;
    msg_free(&m);
}

static void fx_assert_quiet(struct fx *f)
{
    struct msg m;
    int n = recv_msg(f->sub, QUIET_MS, &m);
    msg_free(&m);
    assert_int_equal(n, 0);
}

/* A BlockStored of n_blocks blocks of block_size tokens, hashes base+0.., tokens base*100+.. */
struct stored {
    kvc_hash hashes[8];
    int32_t tokens[64];
    int32_t ids[8];
    kvc_stored_event ev;
};

static void make_stored(struct stored *s, int32_t n_blocks, int32_t block_size, kvc_hash base,
                        bool has_parent, kvc_hash parent, const char *lora)
{
    assert_true(n_blocks <= 8 && n_blocks * block_size <= 64);
    for (int32_t i = 0; i < n_blocks; i++) {
        s->hashes[i] = base + (kvc_hash)i;
        s->ids[i] = i + 1;
    }
    for (int32_t i = 0; i < n_blocks * block_size; i++) {
        s->tokens[i] = (int32_t)(base % 1000) * 100 + i;
    }
    s->ev = (kvc_stored_event){.block_hashes = s->hashes,
                               .n_blocks = n_blocks,
                               .has_parent = has_parent,
                               .parent_hash = parent,
                               .token_ids = s->tokens,
                               .block_size = block_size,
                               .block_ids = s->ids,
                               .lora_name = lora};
}

/* Replay client: a DEALER on f->rep. */
static void *dealer_new(struct fx *f)
{
    void *d = zmq_socket(f->zctx, ZMQ_DEALER);
    assert_non_null(d);
    int zero = 0;
    assert_int_equal(zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero)), 0);
    assert_int_equal(zmq_connect(d, f->rep), 0);
    return d;
}

/* Sends a replay request from seq start, with vLLM's empty delimiter frame or without. */
static void replay_request(void *dealer, uint64_t start, bool delimiter)
{
    char be[8];
    put_be64(be, start);
    if (delimiter) {
        assert_int_equal(zmq_send(dealer, "", 0, ZMQ_SNDMORE), 0);
    }
    assert_int_equal(zmq_send(dealer, be, 8, 0), 8);
}

/* Reads one replay answer: the seqs (up to cap) and payload copies until the end marker; the
 * number of batches. */
static int replay_read(void *dealer, bool delimiter, uint64_t *seqs, char **payloads, size_t *lens,
                       int cap)
{
    int n = 0, skip = delimiter ? 1 : 0;
    for (;;) {
        struct msg m;
        require(recv_msg(dealer, WAIT_MS, &m) == 2 + skip);
        if (delimiter) {
            assert_int_equal(m.len[0], 0);
        }
        require(m.len[skip] == 8);
        uint64_t seq = be64(m.data[skip]);
        if (seq == KV_EVENTS_END_SEQ) {
            assert_memory_equal(m.data[skip], "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
            assert_int_equal(m.len[skip + 1], 0);
            msg_free(&m);
            return n;
        }
        assert_true(n < cap);
        seqs[n] = seq;
        lens[n] = m.len[skip + 1];
        payloads[n] = m.data[skip + 1];
        m.data[skip + 1] = NULL;
        msg_free(&m);
        n++;
    }
}

/* ---- encoding ---- */

static void test_endpoint_rule(void **state)
{
    (void)state;
    assert_true(kv_events_endpoint_binds("tcp://*:5557"));
    assert_true(kv_events_endpoint_binds("tcp://[::]:5557"));
    assert_true(kv_events_endpoint_binds("ipc:///tmp/kv"));
    assert_true(kv_events_endpoint_binds("inproc://kv"));
    assert_false(kv_events_endpoint_binds("tcp://10.0.0.7:5557"));
    assert_false(kv_events_endpoint_binds("tcp://epp.llm-d.svc:5557"));
    /* vLLM's rule taken literally: any address with "::" in it is bound */
    assert_true(kv_events_endpoint_binds("tcp://[fd00::1]:5557"));
}

/* Golden bytes from Python: msgpack.packb([1.5, [["BlockStored", [1, 2**64-1], None,
 * [1, 2, 300, 70000], 2, None, "GPU", None], ["BlockRemoved", [5], "GPU"],
 * ["AllBlocksCleared"]], 0]). */
static const uint8_t golden1[] = {
    0x93, 0xcb, 0x3f, 0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x93, 0x98, 0xab, 0x42, 0x6c, 0x6f,
    0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x92, 0x01, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xc0, 0x94, 0x01, 0x02, 0xcd, 0x01, 0x2c, 0xce, 0x00, 0x01, 0x11, 0x70, 0x02,
    0xc0, 0xa3, 0x47, 0x50, 0x55, 0xc0, 0x93, 0xac, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x52, 0x65, 0x6d,
    0x6f, 0x76, 0x65, 0x64, 0x91, 0x05, 0xa3, 0x47, 0x50, 0x55, 0x91, 0xb0, 0x41, 0x6c, 0x6c, 0x42,
    0x6c, 0x6f, 0x63, 0x6b, 0x73, 0x43, 0x6c, 0x65, 0x61, 0x72, 0x65, 0x64, 0x00};

/* msgpack.packb([1700000000.25, [["BlockStored", [0x1234567890abcdef], 0xfedcba0987654321,
 * [0, 127, 128, 65535, 65536], 5, None, "CPU", "sql-lora"], ["BlockRemoved", [], "CPU"]], 3]) */
static const uint8_t golden2[] = {
    0x93, 0xcb, 0x41, 0xd9, 0x54, 0xfc, 0x40, 0x10, 0x00, 0x00, 0x92, 0x98, 0xab, 0x42, 0x6c, 0x6f,
    0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x91, 0xcf, 0x12, 0x34, 0x56, 0x78, 0x90, 0xab,
    0xcd, 0xef, 0xcf, 0xfe, 0xdc, 0xba, 0x09, 0x87, 0x65, 0x43, 0x21, 0x95, 0x00, 0x7f, 0xcc, 0x80,
    0xcd, 0xff, 0xff, 0xce, 0x00, 0x01, 0x00, 0x00, 0x05, 0xc0, 0xa3, 0x43, 0x50, 0x55, 0xa8, 0x73,
    0x71, 0x6c, 0x2d, 0x6c, 0x6f, 0x72, 0x61, 0x93, 0xac, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x52, 0x65,
    0x6d, 0x6f, 0x76, 0x65, 0x64, 0x90, 0xa3, 0x43, 0x50, 0x55, 0x03};

/* msgpack.packb([2.0, [], 0]) */
static const uint8_t golden_empty[] = {0x93, 0xcb, 0x40, 0x00, 0x00, 0x00,
                                       0x00, 0x00, 0x00, 0x00, 0x90, 0x00};

static void test_encode_golden(void **state)
{
    (void)state;
    char *out;
    size_t len;

    kvc_hash h1[] = {1, UINT64_MAX}, h5[] = {5};
    int32_t t1[] = {1, 2, 300, 70000};
    struct kv_event ev1[] = {
        {.type = KV_EVENT_BLOCK_STORED,
         .stored = {.block_hashes = h1, .n_blocks = 2, .token_ids = t1, .block_size = 2}},
        {.type = KV_EVENT_BLOCK_REMOVED, .hashes = h5, .n_hashes = 1},
        {.type = KV_EVENT_ALL_CLEARED},
    };
    assert_int_equal(kv_events_encode_batch(1.5, ev1, 3, NULL, 0, &out, &len), 0);
    assert_int_equal(len, sizeof(golden1));
    assert_memory_equal(out, golden1, len);
    free(out);

    kvc_hash h2[] = {0x1234567890abcdefULL};
    int32_t t2[] = {0, 127, 128, 65535, 65536};
    struct kv_event ev2[] = {
        {.type = KV_EVENT_BLOCK_STORED,
         .stored = {.block_hashes = h2,
                    .n_blocks = 1,
                    .has_parent = true,
                    .parent_hash = 0xfedcba0987654321ULL,
                    .token_ids = t2,
                    .block_size = 5,
                    .lora_name = "sql-lora"}},
        {.type = KV_EVENT_BLOCK_REMOVED, .hashes = NULL, .n_hashes = 0},
    };
    assert_int_equal(kv_events_encode_batch(1700000000.25, ev2, 2, "CPU", 3, &out, &len), 0);
    assert_int_equal(len, sizeof(golden2));
    assert_memory_equal(out, golden2, len);
    free(out);

    assert_int_equal(kv_events_encode_batch(2.0, NULL, 0, NULL, 0, &out, &len), 0);
    assert_int_equal(len, sizeof(golden_empty));
    assert_memory_equal(out, golden_empty, len);
    free(out);
}

/* Malformed events are refused, never encoded half-way. */
static void test_encode_rejects(void **state)
{
    (void)state;
    char *out = (char *)1;
    size_t len = 1;
    kvc_hash h[] = {1};
    int32_t t[] = {1, 2};
    struct kv_event bad[] = {
        {.type = KV_EVENT_BLOCK_STORED,
         .stored = {.block_hashes = h, .n_blocks = -1, .token_ids = t, .block_size = 2}},
        {.type = KV_EVENT_BLOCK_STORED,
         .stored = {.block_hashes = NULL, .n_blocks = 1, .token_ids = t, .block_size = 2}},
        {.type = KV_EVENT_BLOCK_STORED,
         .stored = {.block_hashes = h, .n_blocks = 1, .token_ids = NULL, .block_size = 2}},
        {.type = KV_EVENT_BLOCK_STORED,
         .stored = {.block_hashes = h, .n_blocks = 1, .token_ids = t, .block_size = 0}},
        {.type = KV_EVENT_BLOCK_REMOVED, .hashes = NULL, .n_hashes = 1},
        {.type = KV_EVENT_BLOCK_REMOVED, .hashes = h, .n_hashes = -3},
        {.type = (enum kv_event_type)42},
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct kv_event two[2] = {{.type = KV_EVENT_ALL_CLEARED}, bad[i]};
        assert_int_equal(kv_events_encode_batch(1.0, two, 2, NULL, 0, &out, &len), -EINVAL);
        assert_null(out);
        assert_int_equal(len, 0);
    }
}

/* ---- publishing ---- */

static void test_publish_events(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){0}, false);
    fx_join(&f);

    struct stored a, b;
    make_stored(&a, 2, 4, 1000, false, 0, NULL);                    /* a chain start */
    make_stored(&b, 1, 4, 0xdeadbeefcafef00dULL, true, 1001, "l1"); /* continues a */
    kvc_hash gone[] = {0xffffffffffffffffULL};
    double before = (double)time(NULL);
    f.sink.stored(f.sink.user, &a.ev);
    f.sink.stored(f.sink.user, &b.ev);
    f.sink.removed(f.sink.user, gone, 1);
    f.sink.all_cleared(f.sink.user);
    f.sink.flush(f.sink.user);

    struct decoded d;
    fx_recv_batch(&f, &d, NULL, NULL);
    /* wall-clock seconds (vLLM's time.time()); the slack absorbs a VM's clock being stepped
     * while the test runs (seen once: the clock went back between the flush and this check) */
    double after = (double)time(NULL);
    if (!(d.ts >= before - 30 && d.ts <= after + 30)) {
        fail_msg("batch ts %.3f outside [%.0f - 30, %.0f + 30]", d.ts, before, after);
    }
    assert_int_equal(d.rank, 0);
    assert_int_equal(d.n_events, 4);
    assert_stored(&d, 0, &a.ev, "GPU");
    assert_stored(&d, 1, &b.ev, "GPU");
    const msgpack_object *r = event_at(&d, 2, "BlockRemoved", 3);
    assert_int_equal(r[1].via.array.size, 1);
    assert_u64(&r[1].via.array.ptr[0], UINT64_MAX);
    assert_str(&r[2], "GPU");
    event_at(&d, 3, "AllBlocksCleared", 1);
    decoded_free(&d);

    struct kv_events_stats st;
    kv_events_get_stats(f.p, &st);
    assert_true(st.next_seq == f.next_seq);
    assert_true(st.events_published == f.next_seq - 1 + 4); /* the probes, then these */
    assert_int_equal(st.batches_dropped, 0);
    fx_stop(&f);
}

static void test_medium_and_rank(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){.medium = "CPU", .data_parallel_rank = 3}, false);
    fx_join(&f);
    struct stored a;
    make_stored(&a, 1, 16, 77, false, 0, NULL);
    f.sink.stored(f.sink.user, &a.ev);
    f.sink.flush(f.sink.user);
    struct decoded d;
    fx_recv_batch(&f, &d, NULL, NULL);
    assert_int_equal(d.rank, 3);
    assert_int_equal(d.n_events, 1);
    assert_stored(&d, 0, &a.ev, "CPU");
    decoded_free(&d);
    fx_stop(&f);
}

/* One flush, one batch; a flush with nothing pending publishes nothing and takes no seq. */
static void test_one_batch_per_flush(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){0}, false);
    fx_join(&f);
    kvc_hash h[] = {11, 12, 13};
    for (int step = 0; step < 3; step++) {
        for (int k = 0; k <= step; k++) {
            f.sink.removed(f.sink.user, &h[k], 1);
        }
        f.sink.flush(f.sink.user);
    }
    for (uint32_t step = 0; step < 3; step++) {
        struct decoded d;
        fx_recv_batch(&f, &d, NULL, NULL);
        assert_int_equal(d.n_events, step + 1);
        for (uint32_t k = 0; k <= step; k++) {
            const msgpack_object *r = event_at(&d, k, "BlockRemoved", 3);
            assert_u64(&r[1].via.array.ptr[0], h[k]);
        }
        decoded_free(&d);
    }
    struct kv_events_stats before;
    kv_events_get_stats(f.p, &before);
    f.sink.flush(f.sink.user);
    f.sink.flush(f.sink.user);
    fx_assert_quiet(&f);
    struct kv_events_stats after;
    kv_events_get_stats(f.p, &after);
    assert_true(after.next_seq == before.next_seq);
    assert_true(after.batches_published == before.batches_published);
    /* the next batch follows without a gap */
    f.sink.all_cleared(f.sink.user);
    f.sink.flush(f.sink.user);
    struct decoded d;
    fx_recv_batch(&f, &d, NULL, NULL);
    event_at(&d, 0, "AllBlocksCleared", 1);
    decoded_free(&d);
    fx_stop(&f);
}

/* publish_all_cleared queues a step's unflushed events first, as their own batch. */
static void test_all_cleared_keeps_order(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){0}, false);
    fx_join(&f);
    kvc_hash h[] = {5};
    f.sink.removed(f.sink.user, h, 1);
    kv_events_publish_all_cleared(f.p);
    struct decoded d;
    fx_recv_batch(&f, &d, NULL, NULL);
    assert_int_equal(d.n_events, 1);
    event_at(&d, 0, "BlockRemoved", 3);
    decoded_free(&d);
    fx_recv_batch(&f, &d, NULL, NULL);
    assert_int_equal(d.n_events, 1);
    event_at(&d, 0, "AllBlocksCleared", 1);
    decoded_free(&d);
    f.sink.flush(f.sink.user); /* nothing left pending */
    fx_assert_quiet(&f);
    fx_stop(&f);
}

/* A pending batch past max_batch_bytes is queued early: each event here is 32 bytes after a
 * 15-byte reserve (47, 79, 111), so the third crosses 100 bytes. */
static void test_max_batch_bytes(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){.max_batch_bytes = 100}, false);
    fx_join(&f);
    struct stored s;
    make_stored(&s, 1, 8, 7, false, 0, NULL);
    for (int i = 0; i < 4; i++) {
        for (int t = 0; t < 8; t++) {
            s.tokens[t] = i; /* one byte each */
        }
        f.sink.stored(f.sink.user, &s.ev);
    }
    f.sink.flush(f.sink.user);
    struct decoded d;
    fx_recv_batch(&f, &d, NULL, NULL);
    assert_int_equal(d.n_events, 3);
    for (uint32_t i = 0; i < 3; i++) {
        const msgpack_object *e = event_at(&d, i, "BlockStored", 8);
        assert_u64(&e[3].via.array.ptr[0], i);
    }
    decoded_free(&d);
    fx_recv_batch(&f, &d, NULL, NULL);
    assert_int_equal(d.n_events, 1);
    assert_stored(&d, 0, &s.ev, "GPU");
    decoded_free(&d);
    fx_stop(&f);
}

/* ---- replay ---- */

static void test_replay(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){0}, true);
    fx_join(&f);
    uint64_t first = f.next_seq;
    char *sent[5];
    size_t sent_len[5];
    for (int i = 0; i < 5; i++) {
        struct stored s;
        make_stored(&s, 1, 4, 100 + (kvc_hash)i, i > 0, 99 + (kvc_hash)i, NULL);
        f.sink.stored(f.sink.user, &s.ev);
        f.sink.flush(f.sink.user);
        struct decoded d;
        fx_recv_batch(&f, &d, &sent[i], &sent_len[i]);
        decoded_free(&d);
    }
    void *dealer = dealer_new(&f);
    uint64_t seqs[320]; /* fx_join's probes (at most 300) and ours */
    char *got[320];
    size_t lens[320];

    /* vLLM's request: ["", start] → ["", seq, payload] ..., ["", END, ""] */
    replay_request(dealer, first + 2, true);
    int n = replay_read(dealer, true, seqs, got, lens, 320);
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++) {
        assert_true(seqs[i] == first + 2 + (uint64_t)i);
        assert_int_equal(lens[i], sent_len[2 + i]);
        assert_memory_equal(got[i], sent[2 + i], lens[i]);
        free(got[i]);
    }

    /* without the delimiter: [start] → [seq, payload] ..., [END, ""]; from 0: every batch */
    replay_request(dealer, 0, false);
    n = replay_read(dealer, false, seqs, got, lens, 320);
    assert_true((uint64_t)n == first + 5);
    for (int i = 0; i < n; i++) {
        assert_true(seqs[i] == (uint64_t)i);
        if (seqs[i] >= first) {
            assert_memory_equal(got[i], sent[seqs[i] - first], lens[i]);
        }
        free(got[i]);
    }

    /* from a seq not published yet: only the end marker */
    replay_request(dealer, first + 1000, true);
    assert_int_equal(replay_read(dealer, true, seqs, got, lens, 320), 0);
    replay_request(dealer, KV_EVENTS_END_SEQ, true);
    assert_int_equal(replay_read(dealer, true, seqs, got, lens, 320), 0);

    struct kv_events_stats st;
    kv_events_get_stats(f.p, &st);
    assert_int_equal(st.replay_requests, 4);
    assert_int_equal(st.bad_replay_requests, 0);
    for (int i = 0; i < 5; i++) {
        free(sent[i]);
    }
    zmq_close(dealer);
    fx_stop(&f);
}

/* Only the last buffer_steps batches are kept. */
static void test_replay_ring(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){.buffer_steps = 4}, true);
    fx_join(&f);
    for (int i = 0; i < 10; i++) {
        kvc_hash h = (kvc_hash)i;
        f.sink.removed(f.sink.user, &h, 1);
        f.sink.flush(f.sink.user);
        struct decoded d;
        fx_recv_batch(&f, &d, NULL, NULL);
        decoded_free(&d);
    }
    void *dealer = dealer_new(&f);
    uint64_t seqs[16];
    char *got[16];
    size_t lens[16];
    replay_request(dealer, 0, true);
    int n = replay_read(dealer, true, seqs, got, lens, 16);
    assert_int_equal(n, 4);
    for (int i = 0; i < n; i++) {
        assert_true(seqs[i] == f.next_seq - 4 + (uint64_t)i);
        struct decoded d;
        decode(got[i], lens[i], &d);
        const msgpack_object *r = event_at(&d, 0, "BlockRemoved", 3);
        assert_u64(&r[1].via.array.ptr[0], 6 + (uint64_t)i);
        decoded_free(&d);
    }
    zmq_close(dealer);
    fx_stop(&f);
}

/* Malformed requests are counted and ignored (no answer); the publisher keeps serving. */
static void test_replay_malformed(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){0}, true);
    fx_join(&f);
    void *dealer = dealer_new(&f);
    assert_int_equal(zmq_send(dealer, "abc", 3, 0), 3); /* start of 3 bytes */
    assert_int_equal(zmq_send(dealer, "", 0, ZMQ_SNDMORE), 0);
    assert_int_equal(zmq_send(dealer, "abc", 3, 0), 3); /* ["", 3 bytes] */
    assert_int_equal(zmq_send(dealer, "garbage", 7, ZMQ_SNDMORE), 7);
    assert_int_equal(zmq_send(dealer, "12345678", 8, 0), 8); /* no empty delimiter */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(zmq_send(dealer, "", 0, ZMQ_SNDMORE), 0);
    }
    assert_int_equal(zmq_send(dealer, "12345678", 8, 0), 8); /* four frames */
    for (int i = 0; i < 200; i++) {
        struct kv_events_stats st;
        kv_events_get_stats(f.p, &st);
        if (st.bad_replay_requests == 4) {
            break;
        }
        usleep(10 * 1000);
    }
    struct kv_events_stats st;
    kv_events_get_stats(f.p, &st);
    assert_int_equal(st.bad_replay_requests, 4);
    assert_int_equal(st.replay_requests, 0);
    struct msg m;
    assert_int_equal(recv_msg(dealer, QUIET_MS, &m), 0);
    zmq_close(dealer);
    /* a frame past the ROUTER's size limit: the connection is dropped, nothing answered */
    dealer = dealer_new(&f);
    char big[300];
    memset(big, 'x', sizeof(big));
    assert_int_equal(zmq_send(dealer, big, sizeof(big), 0), (int)sizeof(big));
    assert_int_equal(recv_msg(dealer, QUIET_MS, &m), 0);
    zmq_close(dealer);

    /* still publishing, and still answering a good request */
    kv_events_publish_all_cleared(f.p);
    struct decoded d;
    fx_recv_batch(&f, &d, NULL, NULL);
    decoded_free(&d);
    dealer = dealer_new(&f);
    uint64_t seqs[4];
    char *got[4];
    size_t lens[4];
    replay_request(dealer, f.next_seq - 1, true);
    assert_int_equal(replay_read(dealer, true, seqs, got, lens, 4), 1);
    assert_true(seqs[0] == f.next_seq - 1);
    free(got[0]);
    zmq_close(dealer);
    fx_stop(&f);
}

/* ---- queue, close, errors ---- */

static void test_queue_overflow(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){.max_queue_size = 3}, false);
    fx_join(&f);
    kv_events__pause(f.p, true);
    for (int i = 0; i < 8; i++) {
        kvc_hash h = (kvc_hash)i;
        f.sink.removed(f.sink.user, &h, 1);
        f.sink.flush(f.sink.user);
    }
    struct kv_events_stats st;
    kv_events_get_stats(f.p, &st);
    assert_int_equal(st.batches_dropped, 5);
    fx_assert_quiet(&f);
    kv_events__pause(f.p, false);
    for (uint64_t i = 0; i < 3; i++) {
        struct decoded d;
        fx_recv_batch(&f, &d, NULL, NULL); /* dropped batches take no seq */
        const msgpack_object *r = event_at(&d, 0, "BlockRemoved", 3);
        assert_u64(&r[1].via.array.ptr[0], i);
        decoded_free(&d);
    }
    fx_assert_quiet(&f);
    kv_events_get_stats(f.p, &st);
    assert_true(st.next_seq == f.next_seq);
    assert_int_equal(st.batches_dropped, 5);
    fx_stop(&f);
}

/* close publishes everything queued, and the step that never got its flush. */
static void test_close_delivers(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, (struct kv_events_config){0}, false);
    fx_join(&f);
    for (int i = 0; i < 50; i++) {
        kvc_hash h = (kvc_hash)i;
        f.sink.removed(f.sink.user, &h, 1);
        f.sink.flush(f.sink.user);
    }
    kvc_hash last = 4242;
    f.sink.removed(f.sink.user, &last, 1); /* no flush */
    kv_events_close(f.p, 2000);
    kv_events_close(f.p, 2000); /* idempotent */
    for (uint64_t i = 0; i <= 50; i++) {
        struct decoded d;
        fx_recv_batch(&f, &d, NULL, NULL);
        const msgpack_object *r = event_at(&d, 0, "BlockRemoved", 3);
        assert_u64(&r[1].via.array.ptr[0], i < 50 ? i : last);
        decoded_free(&d);
    }
    struct kv_events_stats st;
    kv_events_get_stats(f.p, &st);
    assert_true(st.next_seq == f.next_seq);
    /* after close the sink and publish_all_cleared are harmless no-ops */
    f.sink.removed(f.sink.user, &last, 1);
    f.sink.flush(f.sink.user);
    kv_events_publish_all_cleared(f.p);
    struct kv_events_stats after;
    kv_events_get_stats(f.p, &after);
    assert_memory_equal(&st, &after, sizeof(st));
    fx_stop(&f);
}

/* Binds a TCP listener on 127.0.0.1 at an ephemeral port; returns its fd and the port. */
static int tcp_listener(int *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(s, 1), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    return s;
}

static void test_start_errors(void **state)
{
    (void)state;
    char err[256], ep[64], dir[64] = "/tmp/kvev-XXXXXX", ipc[128];
    assert_non_null(mkdtemp(dir));
    snprintf(ipc, sizeof(ipc), "ipc://%s/pub", dir);
    int port;
    int s = tcp_listener(&port);
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);

    /* the PUB endpoint is taken */
    struct kv_events_config c = {.endpoint = ep, .topic = TOPIC, .force_bind = 1};
    err[0] = '\0';
    assert_null(kv_events_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, ep));
    assert_non_null(strstr(err, "in use"));

    /* the replay endpoint is taken */
    c = (struct kv_events_config){.endpoint = ipc, .replay_endpoint = ep};
    err[0] = '\0';
    assert_null(kv_events_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, ep));
    assert_non_null(strstr(err, "replay"));

    /* bad endpoints and settings */
    c = (struct kv_events_config){.endpoint = "bogus://x"};
    err[0] = '\0';
    assert_null(kv_events_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "bogus://x"));
    c = (struct kv_events_config){.endpoint = NULL};
    assert_null(kv_events_new(&c, err, sizeof(err)));
    c = (struct kv_events_config){.endpoint = ipc, .hwm = -1};
    err[0] = '\0';
    assert_null(kv_events_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "hwm"));
    assert_null(kv_events_new(NULL, NULL, 0));
    kv_events_free(NULL);

    close(s);
    char path[160];
    snprintf(path, sizeof(path), "%s/pub", dir);
    unlink(path);
    rmdir(dir);
}

/* vLLM's rule: a concrete tcp address is connected to (the indexer binds, centralized mode). */
static void test_connect_mode(void **state)
{
    (void)state;
    struct fx f;
    memset(&f, 0, sizeof(f));
    f.zctx = zmq_ctx_new();
    f.sub = zmq_socket(f.zctx, ZMQ_SUB);
    int zero = 0;
    assert_int_equal(zmq_setsockopt(f.sub, ZMQ_LINGER, &zero, sizeof(zero)), 0);
    assert_int_equal(zmq_setsockopt(f.sub, ZMQ_SUBSCRIBE, "kv@", 3), 0);
    assert_int_equal(zmq_bind(f.sub, "tcp://127.0.0.1:*"), 0);
    char last[128];
    size_t last_len = sizeof(last);
    assert_int_equal(zmq_getsockopt(f.sub, ZMQ_LAST_ENDPOINT, last, &last_len), 0);
    assert_false(kv_events_endpoint_binds(last));
    char err[256] = "";
    struct kv_events_config c = {.endpoint = last, .topic = TOPIC};
    f.p = kv_events_new(&c, err, sizeof(err));
    if (!f.p) {
        fail_msg("kv_events_new: %s", err);
    }
    kv_events_sink(f.p, &f.sink);
    snprintf(f.dir, sizeof(f.dir), "/tmp/kvev-XXXXXX");
    assert_non_null(mkdtemp(f.dir));
    fx_join(&f);
    kvc_hash h = 9;
    f.sink.removed(f.sink.user, &h, 1);
    f.sink.flush(f.sink.user);
    struct decoded d;
    fx_recv_batch(&f, &d, NULL, NULL);
    const msgpack_object *r = event_at(&d, 0, "BlockRemoved", 3);
    assert_u64(&r[1].via.array.ptr[0], 9);
    decoded_free(&d);
    fx_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_rule),
        cmocka_unit_test(test_encode_golden),
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_publish_events),
        cmocka_unit_test(test_medium_and_rank),
        cmocka_unit_test(test_one_batch_per_flush),
        cmocka_unit_test(test_all_cleared_keeps_order),
        cmocka_unit_test(test_max_batch_bytes),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_replay_ring),
        cmocka_unit_test(test_replay_malformed),
        cmocka_unit_test(test_queue_overflow),
        cmocka_unit_test(test_close_delivers),
        cmocka_unit_test(test_start_errors),
        cmocka_unit_test(test_connect_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
