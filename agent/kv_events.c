/*
 * KV event publisher (kv_events.h): vLLM's ZmqEventPublisher.
 *
 * Three parts: the encoder (pure: events → one msgpack payload), the publisher thread (PUB
 * socket, seq numbers, replay ring, ROUTER socket), and the public API, whose sink callbacks only
 * encode under p->mu and queue finished batches for the thread.
 *
 * A batch is encoded in place: the encoder leaves HEADER_RESERVE bytes free at the front, appends
 * each event as it comes, and when the batch is finished writes the header
 * [ts, [<n events>]] into the tail of the reserved bytes and appends data_parallel_rank. So a
 * finished payload is never copied, and every integer still has msgpack's shortest form (as
 * msgspec writes it): consumers see exactly what vLLM sends.
 */
#include "agent/kv_events.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>
#include <zmq.h>

#include "lib/clock.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/log.h"

#define DEFAULT_BUFFER_STEPS    10000
#define DEFAULT_HWM             100000
#define DEFAULT_MAX_QUEUE       100000
#define DEFAULT_MAX_BATCH_BYTES ((size_t)16 << 20)
#define DEFAULT_MEDIUM          "GPU"

/* fixarray(3) + float64 (9 bytes) + the longest array header (array32, 5 bytes) */
#define HEADER_RESERVE 15

#define LINGER_MS           1000 /* until kv_events_close sets the caller's timeout */
#define REPLAY_MAX_FRAME    256  /* ZMQ_MAXMSGSIZE of the ROUTER: requests are tiny */
#define REPLAY_ID_MAX       256  /* a ZeroMQ routing id is at most 255 bytes */
#define REPLAYS_PER_WAKE    16   /* then publishing gets its turn again */
#define DROP_WARN_PERIOD_NS (10 * 1000000000LL)

/* ---- encoding ---------------------------------------------------------------------------- */

/* A batch being built. Lives in place (pk points at sb): never copied once initialised. */
struct enc {
    msgpack_sbuffer sb; /* HEADER_RESERVE bytes, then the events; empty before the first */
    msgpack_packer pk;
    uint32_t n_events;
};

/* A finished batch: a payload and, once the thread has published it, its seq. */
struct batch {
    struct batch *next; /* queue link */
    uint64_t seq;
    char *data;      /* the encoder's allocation */
    size_t off, len; /* the payload is data[off, off + len) */
    uint32_t n_events;
};

static void enc_init(struct enc *e)
{
    msgpack_sbuffer_init(&e->sb);
    msgpack_packer_init(&e->pk, &e->sb, msgpack_sbuffer_write);
    e->n_events = 0;
}

static void enc_discard(struct enc *e)
{
    msgpack_sbuffer_destroy(&e->sb);
    enc_init(e);
}

static void batch_free(struct batch *b)
{
    if (b) {
        free(b->data);
        free(b);
    }
}

static int pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    return msgpack_pack_str(pk, n) != 0 || msgpack_pack_str_body(pk, s, n) != 0 ? -1 : 0;
}

/* ["BlockStored", hashes, parent|nil, tokens, block_size, lora_id nil, medium, lora_name|nil]:
 * the eight fields every vLLM version sends (newer ones' trailing fields default to nil and
 * msgspec's omit_defaults drops them). */
static int pack_stored(msgpack_packer *pk, const kvc_stored_event *ev, const char *medium)
{
    if (ev->n_blocks < 0 ||
        (ev->n_blocks > 0 && (!ev->block_hashes || !ev->token_ids || ev->block_size < 1))) {
        return -EINVAL;
    }
    size_t n_tokens = ev->n_blocks > 0 ? (size_t)ev->n_blocks * (size_t)ev->block_size : 0;
    if (n_tokens > UINT32_MAX) {
        return -EINVAL;
    }
    int rc = msgpack_pack_array(pk, 8);
    rc |= pack_str(pk, "BlockStored");
    rc |= msgpack_pack_array(pk, (size_t)ev->n_blocks);
    for (int32_t i = 0; i < ev->n_blocks; i++) {
        rc |= msgpack_pack_uint64(pk, ev->block_hashes[i]);
    }
    rc |= ev->has_parent ? msgpack_pack_uint64(pk, ev->parent_hash) : msgpack_pack_nil(pk);
    rc |= msgpack_pack_array(pk, n_tokens);
    for (size_t i = 0; i < n_tokens; i++) {
        rc |= msgpack_pack_int32(pk, ev->token_ids[i]);
    }
    rc |= msgpack_pack_int32(pk, ev->block_size);
    rc |= msgpack_pack_nil(pk); /* lora_id: deprecated in vLLM for lora_name */
    rc |= pack_str(pk, medium);
    rc |= ev->lora_name ? pack_str(pk, ev->lora_name) : msgpack_pack_nil(pk);
    return rc ? -ENOMEM : 0;
}

static int pack_removed(msgpack_packer *pk, const kvc_hash *hashes, int32_t n, const char *medium)
{
    if (n < 0 || (n > 0 && !hashes)) {
        return -EINVAL;
    }
    int rc = msgpack_pack_array(pk, 3);
    rc |= pack_str(pk, "BlockRemoved");
    rc |= msgpack_pack_array(pk, (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        rc |= msgpack_pack_uint64(pk, hashes[i]);
    }
    rc |= pack_str(pk, medium);
    return rc ? -ENOMEM : 0;
}

/* Appends one event; on failure e is as it was. 0, -EINVAL (malformed event), -ENOMEM. */
static int enc_add(struct enc *e, const struct kv_event *ev, const char *medium)
{
    if (e->n_events == UINT32_MAX) {
        return -ENOMEM;
    }
    if (e->sb.size == 0) {
        static const char reserve[HEADER_RESERVE];
        if (msgpack_sbuffer_write(&e->sb, reserve, sizeof(reserve)) != 0) {
            return -ENOMEM;
        }
    }
    size_t mark = e->sb.size;
    int rc;
    switch (ev->type) {
    case KV_EVENT_BLOCK_STORED:
        rc = pack_stored(&e->pk, &ev->stored, medium);
        break;
    case KV_EVENT_BLOCK_REMOVED:
        rc = pack_removed(&e->pk, ev->hashes, ev->n_hashes, medium);
        break;
    case KV_EVENT_ALL_CLEARED:
        rc = msgpack_pack_array(&e->pk, 1) != 0 || pack_str(&e->pk, "AllBlocksCleared") != 0
                 ? -ENOMEM
                 : 0;
        break;
    default:
        rc = -EINVAL;
        break;
    }
    if (rc != 0) {
        e->sb.size = mark; /* drop a half-written event */
        return rc;
    }
    e->n_events++;
    return 0;
}

/* msgpack writer into a fixed HEADER_RESERVE buffer (the header never needs more). */
struct header {
    char bytes[HEADER_RESERVE];
    size_t len;
};

static int header_write(void *data, const char *buf, size_t len)
{
    struct header *h = data;
    if (len > sizeof(h->bytes) - h->len) {
        return -1;
    }
    memcpy(h->bytes + h->len, buf, len);
    h->len += len;
    return 0;
}

/* Turns e's events into a batch stamped ts and rank, and leaves e empty. *out is NULL when e
 * holds no event. -ENOMEM loses e's events (e is left empty). */
static int enc_finish(struct enc *e, double ts, int rank, struct batch **out)
{
    *out = NULL;
    if (e->n_events == 0) {
        return 0;
    }
    struct batch *b = calloc(1, sizeof(*b));
    if (!b || msgpack_pack_int(&e->pk, rank) != 0) {
        free(b);
        enc_discard(e);
        return -ENOMEM;
    }
    struct header h = {.len = 0};
    msgpack_packer hp;
    msgpack_packer_init(&hp, &h, header_write);
    bool ok = msgpack_pack_array(&hp, 3) == 0 && msgpack_pack_double(&hp, ts) == 0 &&
              msgpack_pack_array(&hp, e->n_events) == 0;
    TANDEM_ASSERT(ok && h.len <= HEADER_RESERVE);
    b->off = HEADER_RESERVE - h.len;
    memcpy(e->sb.data + b->off, h.bytes, h.len);
    b->len = e->sb.size - b->off;
    b->n_events = e->n_events;
    size_t used = e->sb.size, allocated = e->sb.alloc;
    b->data = msgpack_sbuffer_release(&e->sb);
    if (allocated - used > 512) {
        /* the replay ring keeps thousands of batches: no 8 KiB each for a few hundred bytes */
        char *shrunk = realloc(b->data, used);
        b->data = shrunk ? shrunk : b->data;
    }
    e->n_events = 0;
    *out = b;
    return 0;
}

int kv_events_encode_batch(double ts, const struct kv_event *events, size_t n_events,
                           const char *medium, int data_parallel_rank, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (n_events > 0 && !events) {
        return -EINVAL;
    }
    struct enc e;
    enc_init(&e);
    for (size_t i = 0; i < n_events; i++) {
        int rc = enc_add(&e, &events[i], medium ? medium : DEFAULT_MEDIUM);
        if (rc != 0) {
            enc_discard(&e);
            return rc;
        }
    }
    struct batch *b;
    if (n_events == 0) {
        /* no event to reserve the header room: encode the empty batch directly */
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (msgpack_pack_array(&pk, 3) != 0 || msgpack_pack_double(&pk, ts) != 0 ||
            msgpack_pack_array(&pk, 0) != 0 || msgpack_pack_int(&pk, data_parallel_rank) != 0) {
            msgpack_sbuffer_destroy(&sb);
            return -ENOMEM;
        }
        *out_len = sb.size;
        *out = msgpack_sbuffer_release(&sb);
        return 0;
    }
    int rc = enc_finish(&e, ts, data_parallel_rank, &b);
    if (rc != 0) {
        return rc;
    }
    memmove(b->data, b->data + b->off, b->len);
    *out = b->data;
    *out_len = b->len;
    free(b);
    return 0;
}

static void put_be64(uint8_t out[8], uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        out[i] = (uint8_t)v;
        v >>= 8;
    }
}

static uint64_t get_be64(const uint8_t in[8])
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = v << 8 | in[i];
    }
    return v;
}

/* time.time(): wall-clock seconds since the epoch. */
static double wall_time_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool kv_events_endpoint_binds(const char *endpoint)
{
    return strchr(endpoint, '*') || strstr(endpoint, "::") || strncmp(endpoint, "ipc://", 6) == 0 ||
           strncmp(endpoint, "inproc://", 9) == 0;
}

/* ---- the publisher ----------------------------------------------------------------------- */

struct kv_events {
    /* set by kv_events_new, then read-only */
    char *topic;
    size_t topic_len;
    char *medium;
    int rank;
    size_t max_queue, buffer_steps, max_batch_bytes;
    void *zctx;
    void *pub;    /* the thread's once it runs */
    void *router; /* the thread's once it runs; NULL: no replay */
    int wake_fd;  /* eventfd: the queue has work or the publisher is closing */
    pthread_t thread;
    bool thread_running;

    pthread_mutex_t mu; /* guards the fields below */
    struct enc pending; /* events of the current engine step */
    struct batch *q_head, *q_tail;
    size_t q_len;
    bool wake_pending; /* wake_fd written and not yet taken by the thread */
    bool paused;       /* test hook: the thread leaves the queue alone */
    bool closing;      /* nothing more is queued; the thread publishes what is and exits */
    int64_t close_deadline_ns;
    int64_t last_drop_warn_ns;
    uint64_t drops_since_warn;
    struct kv_events_stats stats;

    /* the thread's only */
    uint64_t seq;
    struct batch **ring; /* [buffer_steps] the last published batches, for replay */
    size_t ring_head, ring_len;
};

/* Under p->mu. */
static void wake(struct kv_events *p)
{
    if (p->wake_pending) {
        return;
    }
    uint64_t one = 1;
    if (write(p->wake_fd, &one, sizeof(one)) != (ssize_t)sizeof(one)) {
        log_warn("kv events: eventfd write: %s", strerror(errno));
        return;
    }
    p->wake_pending = true;
}

/* Under p->mu. */
static void note_drop(struct kv_events *p, const char *why)
{
    p->stats.batches_dropped++;
    p->drops_since_warn++;
    int64_t now = tandem_now_ns();
    if (p->last_drop_warn_ns == 0 || now - p->last_drop_warn_ns >= DROP_WARN_PERIOD_NS) {
        log_warn("kv events: dropped %llu batch(es) (%s); consumers' view of this pod's cache is "
                 "now incomplete",
                 (unsigned long long)p->drops_since_warn, why);
        p->last_drop_warn_ns = now;
        p->drops_since_warn = 0;
    }
}

/* Finishes the pending batch (if any) and queues it for the thread. Under p->mu. */
static void queue_pending(struct kv_events *p)
{
    if (p->pending.n_events == 0) {
        return;
    }
    struct batch *b;
    if (enc_finish(&p->pending, wall_time_s(), p->rank, &b) != 0) {
        note_drop(p, "out of memory");
        return;
    }
    if (p->q_len >= p->max_queue) {
        batch_free(b);
        note_drop(p, "queue full");
        return;
    }
    if (p->q_tail) {
        p->q_tail->next = b;
    } else {
        p->q_head = b;
    }
    p->q_tail = b;
    p->q_len++;
    wake(p);
}

static void add_event(struct kv_events *p, const struct kv_event *ev)
{
    pthread_mutex_lock(&p->mu);
    if (!p->closing) {
        int rc = enc_add(&p->pending, ev, p->medium);
        if (rc == -EINVAL) {
            log_error("kv events: malformed event (type %d) not published", (int)ev->type);
        } else if (rc != 0) {
            log_warn("kv events: out of memory, an event was lost");
        } else if (p->pending.sb.size > p->max_batch_bytes) {
            queue_pending(p);
        }
    }
    pthread_mutex_unlock(&p->mu);
}

/* Keeps b for replay, evicting the oldest batch when the ring is full. */
static void ring_push(struct kv_events *p, struct batch *b)
{
    if (p->ring_len == p->buffer_steps) {
        batch_free(p->ring[p->ring_head]);
        p->ring_head = (p->ring_head + 1) % p->buffer_steps;
        p->ring_len--;
    }
    p->ring[(p->ring_head + p->ring_len) % p->buffer_steps] = b;
    p->ring_len++;
}

static void publish(struct kv_events *p, struct batch *list)
{
    if (!list) {
        return;
    }
    /* numbers and stats first, so that a batch a subscriber sees is already counted */
    uint64_t n_batches = 0, n_events = 0;
    for (struct batch *b = list; b; b = b->next) {
        b->seq = p->seq++;
        n_batches++;
        n_events += b->n_events;
    }
    pthread_mutex_lock(&p->mu);
    p->stats.batches_published += n_batches;
    p->stats.events_published += n_events;
    p->stats.next_seq = p->seq;
    pthread_mutex_unlock(&p->mu);
    while (list) {
        struct batch *b = list;
        list = b->next;
        b->next = NULL;
        uint8_t seq_be[8];
        put_be64(seq_be, b->seq);
        /* a PUB socket never blocks: past its HWM it drops, as vLLM's does */
        if (zmq_send(p->pub, p->topic, p->topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_send(p->pub, seq_be, sizeof(seq_be), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_send(p->pub, b->data + b->off, b->len, ZMQ_DONTWAIT) < 0) {
            log_warn("kv events: batch %llu not sent: %s", (unsigned long long)b->seq,
                     zmq_strerror(zmq_errno()));
        }
        ring_push(p, b);
    }
}

/* A received frame: its first bytes and its real size (which may be larger). */
struct frame {
    uint8_t bytes[REPLAY_ID_MAX];
    int size;
};

/* Sends one replay message: the request's envelope, then seq and payload. */
static int send_reply(void *router, const struct frame *id, bool delimiter, uint64_t seq,
                      const void *payload, size_t len)
{
    uint8_t seq_be[8];
    put_be64(seq_be, seq);
    const int more = ZMQ_SNDMORE | ZMQ_DONTWAIT;
    if (zmq_send(router, id->bytes, (size_t)id->size, more) < 0 ||
        (delimiter && zmq_send(router, "", 0, more) < 0) ||
        zmq_send(router, seq_be, sizeof(seq_be), more) < 0 ||
        zmq_send(router, payload, len, ZMQ_DONTWAIT) < 0) {
        return -zmq_errno();
    }
    return 0;
}

/* Answers one request: every kept batch with seq >= start, then the end marker. */
static void replay(struct kv_events *p, const struct frame *id, bool delimiter, uint64_t start)
{
    int rc = 0;
    for (size_t i = 0; i < p->ring_len && rc == 0; i++) {
        const struct batch *b = p->ring[(p->ring_head + i) % p->buffer_steps];
        if (b->seq >= start) {
            rc = send_reply(p->router, id, delimiter, b->seq, b->data + b->off, b->len);
        }
    }
    if (rc == 0) {
        rc = send_reply(p->router, id, delimiter, KV_EVENTS_END_SEQ, "", 0);
    }
    if (rc != 0) {
        log_warn("kv events: replay from seq %llu cut short: %s", (unsigned long long)start,
                 rc == -EAGAIN ? "the client is not reading" : zmq_strerror(-rc));
    }
}

/* Reads one request ([id, "", start] or [id, start], start 8 bytes big-endian) and answers it.
 * -EAGAIN when none is waiting. */
static int serve_replay(struct kv_events *p)
{
    struct frame f[3] = {{.size = 0}};
    struct frame extra; /* frames past the third: only counted */
    int n = 0, more = 1;
    while (more) {
        struct frame *into = n < 3 ? &f[n] : &extra;
        int size = zmq_recv(p->router, into->bytes, sizeof(into->bytes), ZMQ_DONTWAIT);
        if (size < 0) {
            int e = zmq_errno();
            if (n == 0 && e == EAGAIN) {
                return -EAGAIN;
            }
            log_warn("kv events: replay socket: %s", zmq_strerror(e));
            return 0;
        }
        into->size = size;
        n++;
        size_t more_len = sizeof(more);
        if (zmq_getsockopt(p->router, ZMQ_RCVMORE, &more, &more_len) != 0) {
            more = 0;
        }
    }
    bool delimiter = n == 3 && f[1].size == 0;
    const struct frame *start = n < 2 ? NULL : delimiter ? &f[2] : &f[1];
    if (!start || (n != 2 && !delimiter) || start->size != 8 || f[0].size > REPLAY_ID_MAX) {
        pthread_mutex_lock(&p->mu);
        p->stats.bad_replay_requests++;
        pthread_mutex_unlock(&p->mu);
        log_warn("kv events: malformed replay request ignored (%d frames, start frame of %d "
                 "bytes; want [\"\", 8-byte big-endian seq])",
                 n - 1, start ? start->size : 0);
        return 0;
    }
    pthread_mutex_lock(&p->mu);
    p->stats.replay_requests++;
    pthread_mutex_unlock(&p->mu);
    replay(p, &f[0], delimiter, get_be64(start->bytes));
    return 0;
}

/* Closes the sockets, giving queued messages until the close deadline. */
static void close_sockets(struct kv_events *p)
{
    int64_t left_ms = (p->close_deadline_ns - tandem_now_ns()) / 1000000;
    int linger = left_ms <= 0 ? 0 : left_ms > INT_MAX ? INT_MAX : (int)left_ms;
    zmq_setsockopt(p->pub, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_close(p->pub);
    p->pub = NULL;
    if (p->router) {
        zmq_setsockopt(p->router, ZMQ_LINGER, &linger, sizeof(linger));
        zmq_close(p->router);
        p->router = NULL;
    }
}

static void *publisher_main(void *arg)
{
    struct kv_events *p = arg;
    for (;;) {
        zmq_pollitem_t items[2] = {
            {.socket = NULL, .fd = p->wake_fd, .events = ZMQ_POLLIN},
            {.socket = p->router, .events = ZMQ_POLLIN},
        };
        if (zmq_poll(items, p->router ? 2 : 1, -1) < 0) {
            int e = zmq_errno();
            if (e != EINTR) {
                log_error("kv events: zmq_poll: %s", zmq_strerror(e));
                usleep(100 * 1000); /* no busy loop on a persistent failure */
            }
            continue;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t count;
            if (read(p->wake_fd, &count, sizeof(count)) < 0 && errno != EAGAIN) {
                log_warn("kv events: eventfd read: %s", strerror(errno));
            }
        }
        pthread_mutex_lock(&p->mu);
        p->wake_pending = false;
        struct batch *list = NULL;
        if (!p->paused || p->closing) {
            list = p->q_head;
            p->q_head = p->q_tail = NULL;
            p->q_len = 0;
        }
        bool closing = p->closing;
        pthread_mutex_unlock(&p->mu);
        publish(p, list);
        if (closing) {
            break;
        }
        if (p->router && (items[1].revents & ZMQ_POLLIN)) {
            for (int i = 0; i < REPLAYS_PER_WAKE && serve_replay(p) == 0; i++) {
            }
        }
    }
    close_sockets(p);
    return NULL;
}

/* ---- API --------------------------------------------------------------------------------- */

static void sink_stored(void *user, const kvc_stored_event *ev)
{
    struct kv_event e = {.type = KV_EVENT_BLOCK_STORED, .stored = *ev};
    add_event(user, &e);
}

static void sink_removed(void *user, const kvc_hash *hashes, int32_t n)
{
    struct kv_event e = {.type = KV_EVENT_BLOCK_REMOVED, .hashes = hashes, .n_hashes = n};
    add_event(user, &e);
}

static void sink_all_cleared(void *user)
{
    struct kv_event e = {.type = KV_EVENT_ALL_CLEARED};
    add_event(user, &e);
}

static void sink_flush(void *user)
{
    struct kv_events *p = user;
    pthread_mutex_lock(&p->mu);
    if (!p->closing) {
        queue_pending(p);
    }
    pthread_mutex_unlock(&p->mu);
}

void kv_events_sink(struct kv_events *p, kvc_event_sink *out)
{
    *out = (kvc_event_sink){
        .user = p,
        .stored = sink_stored,
        .removed = sink_removed,
        .all_cleared = sink_all_cleared,
        .flush = sink_flush,
    };
}

void kv_events_publish_all_cleared(struct kv_events *p)
{
    struct kv_event e = {.type = KV_EVENT_ALL_CLEARED};
    pthread_mutex_lock(&p->mu);
    if (!p->closing) {
        queue_pending(p); /* an unfinished step's events happened before */
        if (enc_add(&p->pending, &e, p->medium) == 0) {
            queue_pending(p);
        } else {
            note_drop(p, "out of memory");
        }
    }
    pthread_mutex_unlock(&p->mu);
}

void kv_events__pause(struct kv_events *p, bool paused)
{
    pthread_mutex_lock(&p->mu);
    p->paused = paused;
    if (!paused && p->q_len) {
        wake(p);
    }
    pthread_mutex_unlock(&p->mu);
}

void kv_events_get_stats(struct kv_events *p, struct kv_events_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    pthread_mutex_unlock(&p->mu);
}

/* Creates a socket with the options every one of ours has. NULL: see zmq_errno(). */
static void *new_socket(void *zctx, int type, const char *endpoint, int hwm)
{
    void *s = zmq_socket(zctx, type);
    if (!s) {
        return NULL;
    }
    int linger = LINGER_MS, one = 1;
    int ipv6 = strchr(endpoint, '[') || strstr(endpoint, "::");
    if (zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm)) != 0 ||
        (ipv6 && zmq_setsockopt(s, ZMQ_IPV6, &one, sizeof(one)) != 0)) {
        int e = zmq_errno();
        zmq_close(s);
        errno = e;
        return NULL;
    }
    return s;
}

static int open_sockets(struct kv_events *p, const struct kv_events_config *c, int hwm, char *err,
                        size_t errlen)
{
    p->zctx = zmq_ctx_new();
    if (!p->zctx) {
        return tandem_fail(err, errlen, -ENOMEM, "kv events: zmq_ctx_new: %s",
                           zmq_strerror(zmq_errno()));
    }
    p->pub = new_socket(p->zctx, ZMQ_PUB, c->endpoint, hwm);
    if (!p->pub) {
        return tandem_fail(err, errlen, -EIO, "kv events: PUB socket: %s",
                           zmq_strerror(zmq_errno()));
    }
    bool bind = c->force_bind || kv_events_endpoint_binds(c->endpoint);
    if ((bind ? zmq_bind(p->pub, c->endpoint) : zmq_connect(p->pub, c->endpoint)) != 0) {
        int e = zmq_errno();
        return tandem_fail(err, errlen, e == EADDRINUSE ? -EADDRINUSE : -EINVAL,
                           "kv events: cannot %s %s: %s", bind ? "bind" : "connect to", c->endpoint,
                           zmq_strerror(e));
    }
    if (!c->replay_endpoint) {
        return 0;
    }
    /* room for a whole replay (every kept batch and the end marker) per client */
    int router_hwm = p->buffer_steps > INT_MAX - 16 ? INT_MAX : (int)p->buffer_steps + 16;
    int one = 1;
    int64_t max_frame = REPLAY_MAX_FRAME;
    p->router = new_socket(p->zctx, ZMQ_ROUTER, c->replay_endpoint, router_hwm);
    if (!p->router || zmq_setsockopt(p->router, ZMQ_ROUTER_MANDATORY, &one, sizeof(one)) != 0 ||
        zmq_setsockopt(p->router, ZMQ_MAXMSGSIZE, &max_frame, sizeof(max_frame)) != 0) {
        return tandem_fail(err, errlen, -EIO, "kv events: replay socket: %s",
                           zmq_strerror(zmq_errno()));
    }
    if (zmq_bind(p->router, c->replay_endpoint) != 0) {
        int e = zmq_errno();
        return tandem_fail(err, errlen, e == EADDRINUSE ? -EADDRINUSE : -EINVAL,
                           "kv events: cannot bind replay endpoint %s: %s", c->replay_endpoint,
                           zmq_strerror(e));
    }
    return 0;
}

struct kv_events *kv_events_new(const struct kv_events_config *c, char *err, size_t errlen)
{
    if (!c || !c->endpoint || !c->endpoint[0] || (c->replay_endpoint && !c->replay_endpoint[0])) {
        tandem_set_err(err, errlen, "kv events: an endpoint is required");
        return NULL;
    }
    if (c->buffer_steps < 0 || c->hwm < 0 || c->max_queue_size < 0) {
        tandem_set_err(err, errlen,
                       "kv events: buffer_steps (%d), hwm (%d) and max_queue_size (%d) must not "
                       "be negative",
                       c->buffer_steps, c->hwm, c->max_queue_size);
        return NULL;
    }
    struct kv_events *p = calloc(1, sizeof(*p));
    if (!p) {
        tandem_set_err(err, errlen, "kv events: out of memory");
        return NULL;
    }
    p->wake_fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    enc_init(&p->pending);
    p->topic = strdup(c->topic ? c->topic : "");
    p->medium = strdup(c->medium ? c->medium : DEFAULT_MEDIUM);
    p->rank = c->data_parallel_rank;
    p->buffer_steps = c->buffer_steps ? (size_t)c->buffer_steps : DEFAULT_BUFFER_STEPS;
    p->max_queue = c->max_queue_size ? (size_t)c->max_queue_size : DEFAULT_MAX_QUEUE;
    p->max_batch_bytes = c->max_batch_bytes ? c->max_batch_bytes : DEFAULT_MAX_BATCH_BYTES;
    p->ring = calloc(p->buffer_steps, sizeof(struct batch *));
    if (!p->topic || !p->medium || !p->ring) {
        tandem_set_err(err, errlen, "kv events: out of memory");
        goto err_free;
    }
    p->topic_len = strlen(p->topic);
    p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->wake_fd < 0) {
        tandem_set_err(err, errlen, "kv events: eventfd: %s", strerror(errno));
        goto err_free;
    }
    if (open_sockets(p, c, c->hwm ? c->hwm : DEFAULT_HWM, err, errlen) != 0) {
        goto err_free;
    }
    /* the thread takes no signals: they belong to the agent's loop */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&p->thread, NULL, publisher_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        tandem_set_err(err, errlen, "kv events: pthread_create: %s", strerror(rc));
        goto err_free;
    }
    p->thread_running = true;
    return p;

err_free:
    p->closing = true; /* close_sockets now lingers 0 ms */
    kv_events_free(p);
    return NULL;
}

void kv_events_close(struct kv_events *p, int timeout_ms)
{
    if (!p) {
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (!p->closing) {
        queue_pending(p); /* a step that never got its flush */
        p->closing = true;
        p->close_deadline_ns =
            tandem_now_ns() + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000;
        wake(p);
    }
    pthread_mutex_unlock(&p->mu);
    if (p->thread_running) {
        pthread_join(p->thread, NULL);
        p->thread_running = false;
    } else if (p->pub) {
        close_sockets(p); /* kv_events_new failed before the thread started */
    }
    if (p->zctx) {
        zmq_ctx_term(p->zctx); /* waits out the sockets' linger */
        p->zctx = NULL;
    }
}

void kv_events_free(struct kv_events *p)
{
    if (!p) {
        return;
    }
    kv_events_close(p, LINGER_MS);
    for (size_t i = 0; i < p->ring_len; i++) {
        batch_free(p->ring[(p->ring_head + i) % p->buffer_steps]);
    }
    while (p->q_head) {
        struct batch *b = p->q_head;
        p->q_head = b->next;
        batch_free(b);
    }
    enc_discard(&p->pending);
    if (p->wake_fd >= 0) {
        close(p->wake_fd);
    }
    pthread_mutex_destroy(&p->mu);
    free(p->ring);
    free(p->topic);
    free(p->medium);
    free(p);
}
