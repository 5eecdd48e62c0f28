/*
 * The KV-event subscriber (kvsub.h). The thread owns the ZeroMQ context and every socket; other
 * threads only queue commands (add, remove) under `mu` and wake it through an eventfd. Per-pod
 * counters live in the pod struct and are written under `mu` too, so stats readers see them
 * whole. A pod struct is reachable from the registry (`pods`) until kvsub_remove_pod unlinks it;
 * then only the command holds it, and the thread frees it once its sockets are closed.
 */
#include "operator/epp/kv/kvsub.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <zmq.h>

#include "lib/clock.h"
#include "lib/err.h"
#include "lib/log.h"
#include "operator/epp/kv/kvevents.h"

#define POLL_MS       250 /* llm-d's poll timeout: how often stop and deadlines are looked at */
#define DRAIN_PER_POD 64  /* messages per pod per wake, so one busy pod cannot starve others */
#define MAX_FRAMES    3

struct spod {
    struct spod *next; /* registry link */
    char name[KVIDX_MAX_NAME];
    char endpoint[KVIDX_MAX_NAME + 16];
    char replay_endpoint[KVIDX_MAX_NAME + 16];
    bool ipv6;
    struct kvsub_pod_stats st; /* under mu */

    /* the thread's */
    void *sub, *dealer;
    bool have_seq;   /* next_seq is known */
    bool dup_window; /* after a replay: batches below next_seq are duplicates, not a restart */
    int64_t replay_deadline_ns;
    bool has_held; /* the live batch that started the replay, applied after it */
    uint64_t held_seq;
    char *held_topic, *held_payload;
    size_t held_topic_len, held_payload_len;
};

enum cmd_type { CMD_ADD, CMD_REMOVE };

struct cmd {
    struct cmd *next;
    enum cmd_type type;
    struct spod *pod;
};

struct kvsub {
    struct kvidx *index;
    char *filter;
    int replay_timeout_ms, rcvhwm;
    void *zctx;
    int wake_fd;
    pthread_t thread;
    bool thread_running;

    pthread_mutex_t mu;
    struct spod *pods; /* registry */
    struct cmd *cmd_head, *cmd_tail;
    bool stopping;

    /* the thread's: the pods with open sockets */
    struct spod **live;
    size_t n_live, live_alloc;
};

/* A message read off a socket: up to MAX_FRAMES frames, and how many there were. */
struct msg {
    zmq_msg_t f[MAX_FRAMES];
    int n;     /* frames kept */
    int total; /* frames received */
};

static void stat_add(struct kvsub *s, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&s->mu);
    *field += n;
    pthread_mutex_unlock(&s->mu);
}

/* ---- applying batches ---- */

static void apply_event(struct kvsub *s, struct spod *p, const struct kvev_event *ev,
                        struct kvsub_pod_stats *d)
{
    int rc = 0;
    switch (ev->type) {
    case KVEV_BLOCK_STORED:
        rc = kvidx_add(s->index, p->name, ev->tier, ev->hashes, ev->n_hashes);
        d->blocks_stored += ev->n_hashes;
        break;
    case KVEV_BLOCK_REMOVED:
        rc = kvidx_remove(s->index, p->name, ev->tier, ev->hashes, ev->n_hashes);
        d->blocks_removed += ev->n_hashes;
        break;
    case KVEV_ALL_CLEARED:
        rc = kvidx_purge_pod(s->index, p->name);
        d->clears++;
        break;
    }
    if (rc != 0) {
        d->index_errors++;
    } else {
        d->events++;
    }
}

/* Decodes and applies one batch; its seq is accounted for by the caller either way. */
static void apply_payload(struct kvsub *s, struct spod *p, const void *topic, size_t topic_len,
                          const void *payload, size_t len, bool replayed)
{
    struct kvsub_pod_stats d = {0};
    char err[256];
    struct kvev_topic t;
    if (topic && kvev_parse_topic(topic, topic_len, &t, err, sizeof(err)) != 0) {
        log_warn("kv events from %s: %s; batch dropped", p->name, err);
        stat_add(s, &p->st.decode_errors, 1);
        return;
    }
    if (topic && strcmp(t.pod, p->name) != 0) {
        d.topic_mismatches++;
    }
    struct kvev_batch b;
    if (kvev_decode(payload, len, &b, err, sizeof(err)) != 0) {
        log_warn("kv events from %s: %s; batch dropped", p->name, err);
        stat_add(s, &p->st.decode_errors, 1);
        return;
    }
    for (uint32_t i = 0; i < b.n_events; i++) {
        apply_event(s, p, &b.events[i], &d);
    }
    pthread_mutex_lock(&s->mu);
    p->st.batches++;
    p->st.replayed += replayed ? 1 : 0;
    p->st.events += d.events;
    p->st.blocks_stored += d.blocks_stored;
    p->st.blocks_removed += d.blocks_removed;
    p->st.clears += d.clears;
    p->st.unknown_events += b.n_unknown;
    p->st.index_errors += d.index_errors;
    p->st.topic_mismatches += d.topic_mismatches;
    pthread_mutex_unlock(&s->mu);
    kvev_batch_free(&b);
}

static void set_seq(struct kvsub *s, struct spod *p, uint64_t next, bool synced)
{
    p->have_seq = true;
    pthread_mutex_lock(&s->mu);
    p->st.next_seq = next;
    p->st.synced = p->st.synced || synced;
    pthread_mutex_unlock(&s->mu);
}

/* ---- replay ---- */

static void be64(uint8_t out[8], uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        out[i] = (uint8_t)v;
        v >>= 8;
    }
}

static void held_drop(struct spod *p)
{
    free(p->held_topic);
    free(p->held_payload);
    p->held_topic = p->held_payload = NULL;
    p->has_held = false;
}

static void close_socket(void **sock)
{
    if (*sock) {
        int zero = 0;
        zmq_setsockopt(*sock, ZMQ_LINGER, &zero, sizeof(zero));
        zmq_close(*sock);
        *sock = NULL;
    }
}

static void live_batch(struct kvsub *s, struct spod *p, uint64_t seq, const void *topic,
                       size_t topic_len, const void *payload, size_t len);

/* The replay is over (end marker, failure or timeout): the held batch goes next. */
static void replay_finish(struct kvsub *s, struct spod *p, bool ok)
{
    close_socket(&p->dealer);
    pthread_mutex_lock(&s->mu);
    p->st.replaying = false;
    p->st.replay_failures += ok ? 0 : 1;
    p->st.synced = p->st.synced || ok;
    pthread_mutex_unlock(&s->mu);
    p->dup_window = true;
    if (p->has_held) {
        uint64_t seq = p->held_seq;
        if (!p->have_seq || seq > p->st.next_seq) {
            /* the replay did not reach it: accept the loss and follow the stream */
            if (p->have_seq) {
                stat_add(s, &p->st.gaps_unrepaired, 1);
            }
            set_seq(s, p, seq, false);
        }
        live_batch(s, p, seq, p->held_topic, p->held_topic_len, p->held_payload,
                   p->held_payload_len);
        held_drop(p);
    }
}

/* Asks p's ROUTER for every kept batch from seq `from`; the SUB socket waits meanwhile. */
static void replay_start(struct kvsub *s, struct spod *p, uint64_t from)
{
    pthread_mutex_lock(&s->mu);
    p->st.replays++;
    p->st.replaying = true;
    pthread_mutex_unlock(&s->mu);
    if (!p->replay_endpoint[0]) {
        replay_finish(s, p, false);
        return;
    }
    uint8_t start[8];
    be64(start, from);
    int zero = 0, one = 1;
    p->dealer = zmq_socket(s->zctx, ZMQ_DEALER);
    if (!p->dealer || zmq_setsockopt(p->dealer, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        (p->ipv6 && zmq_setsockopt(p->dealer, ZMQ_IPV6, &one, sizeof(one)) != 0) ||
        zmq_connect(p->dealer, p->replay_endpoint) != 0 ||
        zmq_send(p->dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(p->dealer, start, sizeof(start), ZMQ_DONTWAIT) < 0) {
        log_warn("kv events: replay request to %s: %s", p->replay_endpoint,
                 zmq_strerror(zmq_errno()));
        replay_finish(s, p, false);
        return;
    }
    p->replay_deadline_ns = tandem_now_ns() + (int64_t)s->replay_timeout_ms * 1000000;
}

/* Reads one message of up to MAX_FRAMES frames (the rest are counted and dropped). -EAGAIN when
 * none waits. */
static int msg_recv(void *sock, struct msg *m)
{
    m->n = m->total = 0;
    int more = 1;
    while (more) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, sock, ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&f);
            if (m->total == 0) {
                return e == EAGAIN ? -EAGAIN : -e;
            }
            break;
        }
        more = zmq_msg_more(&f);
        m->total++;
        if (m->n < MAX_FRAMES) {
            m->f[m->n++] = f;
        } else {
            zmq_msg_close(&f);
        }
    }
    return 0;
}

static void msg_close(struct msg *m)
{
    for (int i = 0; i < m->n; i++) {
        zmq_msg_close(&m->f[i]);
    }
    m->n = 0;
}

/* One replay answer: ["", seq, payload] (or [seq, payload]). False when the replay is over. */
static bool replay_answer(struct kvsub *s, struct spod *p, struct msg *m)
{
    int first = m->n == 3 && zmq_msg_size(&m->f[0]) == 0 ? 1 : 0;
    uint64_t seq;
    if (m->total != m->n || m->n - first != 2 ||
        kvev_parse_seq(zmq_msg_data(&m->f[first]), zmq_msg_size(&m->f[first]), &seq, NULL, 0) !=
            0) {
        log_warn("kv events: malformed replay answer from %s (%d frames)", p->replay_endpoint,
                 m->total);
        replay_finish(s, p, false);
        return false;
    }
    if (seq == KVEV_REPLAY_END) {
        replay_finish(s, p, true);
        return false;
    }
    if (p->have_seq && seq < p->st.next_seq) {
        stat_add(s, &p->st.duplicates, 1);
        return true;
    }
    apply_payload(s, p, NULL, 0, zmq_msg_data(&m->f[first + 1]), zmq_msg_size(&m->f[first + 1]),
                  true);
    set_seq(s, p, seq + 1, false);
    return true;
}

static void replay_readable(struct kvsub *s, struct spod *p)
{
    for (;;) {
        struct msg m;
        if (!p->dealer || msg_recv(p->dealer, &m) != 0) {
            return;
        }
        bool more = replay_answer(s, p, &m);
        msg_close(&m);
        if (!more) {
            return;
        }
    }
}

/* ---- live batches ---- */

static int hold(struct spod *p, uint64_t seq, const void *topic, size_t topic_len,
                const void *payload, size_t len)
{
    p->held_topic = malloc(topic_len ? topic_len : 1);
    p->held_payload = malloc(len ? len : 1);
    if (!p->held_topic || !p->held_payload) {
        held_drop(p);
        return -ENOMEM;
    }
    memcpy(p->held_topic, topic, topic_len);
    memcpy(p->held_payload, payload, len);
    p->held_topic_len = topic_len;
    p->held_payload_len = len;
    p->held_seq = seq;
    p->has_held = true;
    return 0;
}

/* A batch is missing before this one: replay from what is expected, this one after. */
static void start_gap_replay(struct kvsub *s, struct spod *p, uint64_t seq, const void *topic,
                             size_t topic_len, const void *payload, size_t len, uint64_t from)
{
    if (hold(p, seq, topic, topic_len, payload, len) != 0) {
        stat_add(s, &p->st.gaps_unrepaired, 1);
        set_seq(s, p, seq + 1, false);
        return;
    }
    replay_start(s, p, from);
}

static void live_batch(struct kvsub *s, struct spod *p, uint64_t seq, const void *topic,
                       size_t topic_len, const void *payload, size_t len)
{
    if (!p->have_seq) {
        if (seq == 0) {
            apply_payload(s, p, topic, topic_len, payload, len, false);
            set_seq(s, p, 1, true);
        } else {
            start_gap_replay(s, p, seq, topic, topic_len, payload, len, 0);
        }
        return;
    }
    uint64_t next = p->st.next_seq;
    if (seq == next) {
        p->dup_window = false;
        apply_payload(s, p, topic, topic_len, payload, len, false);
        set_seq(s, p, seq + 1, true);
    } else if (seq > next) {
        p->dup_window = false;
        stat_add(s, &p->st.gaps, 1);
        start_gap_replay(s, p, seq, topic, topic_len, payload, len, next);
    } else if (p->dup_window) {
        stat_add(s, &p->st.duplicates, 1);
    } else {
        log_info("kv events: %s restarted (seq %llu after %llu); its blocks are purged", p->name,
                 (unsigned long long)seq, (unsigned long long)next);
        kvidx_purge_pod(s->index, p->name);
        stat_add(s, &p->st.restarts, 1);
        p->have_seq = false;
        live_batch(s, p, seq, topic, topic_len, payload, len);
    }
}

static void sub_readable(struct kvsub *s, struct spod *p)
{
    for (int i = 0; i < DRAIN_PER_POD && !p->dealer && p->sub; i++) {
        struct msg m;
        if (msg_recv(p->sub, &m) != 0) {
            return;
        }
        uint64_t seq;
        char err[128];
        if (m.total != 3 || kvev_parse_seq(zmq_msg_data(&m.f[1]), zmq_msg_size(&m.f[1]), &seq, err,
                                           sizeof(err)) != 0) {
            log_warn("kv events from %s: message of %d frames dropped (want [topic, 8-byte seq, "
                     "payload])",
                     p->name, m.total);
            stat_add(s, &p->st.decode_errors, 1);
        } else {
            live_batch(s, p, seq, zmq_msg_data(&m.f[0]), zmq_msg_size(&m.f[0]),
                       zmq_msg_data(&m.f[2]), zmq_msg_size(&m.f[2]));
        }
        msg_close(&m);
    }
}

/* ---- pods on the thread ---- */

static void pod_free(struct spod *p)
{
    close_socket(&p->sub);
    close_socket(&p->dealer);
    held_drop(p);
    free(p);
}

static int pod_open(struct kvsub *s, struct spod *p)
{
    int one = 1, zero = 0;
    p->sub = zmq_socket(s->zctx, ZMQ_SUB);
    if (!p->sub || zmq_setsockopt(p->sub, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(p->sub, ZMQ_RCVHWM, &s->rcvhwm, sizeof(s->rcvhwm)) != 0 ||
        (p->ipv6 && zmq_setsockopt(p->sub, ZMQ_IPV6, &one, sizeof(one)) != 0) ||
        zmq_setsockopt(p->sub, ZMQ_SUBSCRIBE, s->filter, strlen(s->filter)) != 0 ||
        zmq_connect(p->sub, p->endpoint) != 0) {
        log_error("kv events: cannot subscribe to %s: %s", p->endpoint, zmq_strerror(zmq_errno()));
        close_socket(&p->sub);
        return -EIO;
    }
    if (s->n_live == s->live_alloc) {
        size_t alloc = s->live_alloc ? s->live_alloc * 2 : 16;
        struct spod **l = realloc(s->live, alloc * sizeof(struct spod *));
        if (!l) {
            close_socket(&p->sub);
            return -ENOMEM;
        }
        s->live = l;
        s->live_alloc = alloc;
    }
    s->live[s->n_live++] = p;
    replay_start(s, p, 0); /* join: what the pod cached before we came */
    return 0;
}

static void pod_close(struct kvsub *s, struct spod *p)
{
    for (size_t i = 0; i < s->n_live; i++) {
        if (s->live[i] == p) {
            s->live[i] = s->live[--s->n_live];
            break;
        }
    }
    kvidx_purge_pod(s->index, p->name);
    pod_free(p);
}

static void run_commands(struct kvsub *s)
{
    uint64_t count;
    if (read(s->wake_fd, &count, sizeof(count)) < 0 && errno != EAGAIN) {
        log_warn("kv events: eventfd read: %s", strerror(errno));
    }
    pthread_mutex_lock(&s->mu);
    struct cmd *c = s->cmd_head;
    s->cmd_head = s->cmd_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (c) {
        struct cmd *next = c->next;
        if (c->type == CMD_ADD) {
            pod_open(s, c->pod);
        } else {
            pod_close(s, c->pod);
        }
        free(c);
        c = next;
    }
}

static int poll_timeout_ms(const struct kvsub *s)
{
    int64_t now = tandem_now_ns(), ms = POLL_MS;
    for (size_t i = 0; i < s->n_live; i++) {
        if (s->live[i]->dealer) {
            int64_t left = (s->live[i]->replay_deadline_ns - now) / 1000000 + 1;
            ms = left < ms ? (left < 0 ? 0 : left) : ms;
        }
    }
    return (int)ms;
}

static void check_deadlines(struct kvsub *s)
{
    int64_t now = tandem_now_ns();
    for (size_t i = 0; i < s->n_live; i++) {
        struct spod *p = s->live[i];
        if (p->dealer && now >= p->replay_deadline_ns) {
            log_warn("kv events: replay from %s timed out", p->replay_endpoint);
            replay_finish(s, p, false);
        }
    }
}

static void *subscriber_main(void *arg)
{
    struct kvsub *s = arg;
    zmq_pollitem_t *items = NULL;
    size_t items_alloc = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stopping) {
            break;
        }
        if (!items || items_alloc < s->n_live + 1) {
            zmq_pollitem_t *it = realloc(items, (s->n_live + 1) * sizeof(*it));
            if (!it) {
                usleep(POLL_MS * 1000);
                continue;
            }
            items = it;
            items_alloc = s->n_live + 1;
        }
        items[0] = (zmq_pollitem_t){.fd = s->wake_fd, .events = ZMQ_POLLIN};
        for (size_t i = 0; i < s->n_live; i++) {
            struct spod *p = s->live[i];
            items[i + 1] =
                (zmq_pollitem_t){.socket = p->dealer ? p->dealer : p->sub, .events = ZMQ_POLLIN};
        }
        size_t n_items = s->n_live + 1;
        if (zmq_poll(items, (int)n_items, poll_timeout_ms(s)) < 0 && zmq_errno() != EINTR) {
            log_error("kv events: zmq_poll: %s", zmq_strerror(zmq_errno()));
            usleep(100 * 1000);
            continue;
        }
        /* pods first: run_commands may close one whose item is in this round */
        for (size_t i = 1; i < n_items; i++) {
            if (items[i].revents & ZMQ_POLLIN) {
                struct spod *p = s->live[i - 1];
                if (items[i].socket == p->dealer) {
                    replay_readable(s, p);
                } else {
                    sub_readable(s, p);
                }
            }
        }
        check_deadlines(s);
        if (items[0].revents & ZMQ_POLLIN) {
            run_commands(s);
        }
    }
    free(items);
    return NULL;
}

/* ---- API ---- */

static void push_cmd(struct kvsub *s, struct cmd *c)
{
    if (s->cmd_tail) {
        s->cmd_tail->next = c;
    } else {
        s->cmd_head = c;
    }
    s->cmd_tail = c;
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof(one)) != (ssize_t)sizeof(one)) {
        log_warn("kv events: eventfd write: %s", strerror(errno));
    }
}

static struct spod *pod_lookup(struct kvsub *s, const char *pod, struct spod ***link)
{
    for (struct spod **l = &s->pods; *l; l = &(*l)->next) {
        if (strcmp((*l)->name, pod) == 0) {
            if (link) {
                *link = l;
            }
            return *l;
        }
    }
    return NULL;
}

static int format_endpoint(char *out, size_t cap, const char *ip, int port, bool ipv6)
{
    int n = snprintf(out, cap, ipv6 ? "tcp://[%s]:%d" : "tcp://%s:%d", ip, port);
    return n < 0 || (size_t)n >= cap ? -EINVAL : 0;
}

int kvsub_add_pod(struct kvsub *s, const char *pod, const char *ip, int port, int replay_port)
{
    port = port ? port : KVSUB_DEFAULT_PORT;
    replay_port = replay_port ? replay_port : KVSUB_DEFAULT_REPLAY_PORT;
    if (!pod || !pod[0] || strlen(pod) >= KVIDX_MAX_NAME || !ip || !ip[0] ||
        strlen(ip) >= KVIDX_MAX_NAME || strpbrk(ip, "[]/ ") || port < 1 || port > 65535 ||
        replay_port < -1 || replay_port == 0 || replay_port > 65535) {
        return -EINVAL;
    }
    struct spod *p = calloc(1, sizeof(*p));
    struct cmd *c = calloc(1, sizeof(*c));
    if (!p || !c) {
        free(p);
        free(c);
        return -ENOMEM;
    }
    strcpy(p->name, pod);
    p->ipv6 = strchr(ip, ':') != NULL;
    if (format_endpoint(p->endpoint, sizeof(p->endpoint), ip, port, p->ipv6) != 0 ||
        (replay_port > 0 && format_endpoint(p->replay_endpoint, sizeof(p->replay_endpoint), ip,
                                            replay_port, p->ipv6) != 0)) {
        free(p);
        free(c);
        return -EINVAL;
    }
    c->type = CMD_ADD;
    c->pod = p;
    pthread_mutex_lock(&s->mu);
    int rc = pod_lookup(s, pod, NULL) ? -EEXIST : 0;
    if (rc == 0) {
        p->next = s->pods;
        s->pods = p;
        push_cmd(s, c);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) {
        free(p);
        free(c);
    }
    return rc;
}

int kvsub_remove_pod(struct kvsub *s, const char *pod)
{
    struct cmd *c = calloc(1, sizeof(*c));
    if (!c) {
        return -ENOMEM;
    }
    pthread_mutex_lock(&s->mu);
    struct spod **link = NULL;
    struct spod *p = pod ? pod_lookup(s, pod, &link) : NULL;
    if (p) {
        *link = p->next;
        c->type = CMD_REMOVE;
        c->pod = p;
        push_cmd(s, c);
    }
    pthread_mutex_unlock(&s->mu);
    if (!p) {
        free(c);
        return -ENOENT;
    }
    return 0;
}

int kvsub_pod_stats(struct kvsub *s, const char *pod, struct kvsub_pod_stats *out)
{
    pthread_mutex_lock(&s->mu);
    struct spod *p = pod ? pod_lookup(s, pod, NULL) : NULL;
    if (p) {
        *out = p->st;
    }
    pthread_mutex_unlock(&s->mu);
    return p ? 0 : -ENOENT;
}

void kvsub_stats(struct kvsub *s, struct kvsub_pod_stats *sum, size_t *n_pods, size_t *n_synced)
{
    memset(sum, 0, sizeof(*sum));
    *n_pods = *n_synced = 0;
    pthread_mutex_lock(&s->mu);
    for (const struct spod *p = s->pods; p; p = p->next) {
        const struct kvsub_pod_stats *t = &p->st;
        (*n_pods)++;
        *n_synced += t->synced ? 1 : 0;
        sum->batches += t->batches;
        sum->events += t->events;
        sum->blocks_stored += t->blocks_stored;
        sum->blocks_removed += t->blocks_removed;
        sum->clears += t->clears;
        sum->unknown_events += t->unknown_events;
        sum->decode_errors += t->decode_errors;
        sum->index_errors += t->index_errors;
        sum->gaps += t->gaps;
        sum->gaps_unrepaired += t->gaps_unrepaired;
        sum->replays += t->replays;
        sum->replay_failures += t->replay_failures;
        sum->replayed += t->replayed;
        sum->duplicates += t->duplicates;
        sum->restarts += t->restarts;
        sum->topic_mismatches += t->topic_mismatches;
    }
    pthread_mutex_unlock(&s->mu);
}

struct kvsub *kvsub_start(const struct kvsub_config *c, char *err, size_t errlen)
{
    if (!c || !c->index || c->replay_timeout_ms < 0 || c->rcvhwm < 0) {
        tandem_set_err(err, errlen,
                       "kv subscriber: want an index, and no negative "
                       "replay_timeout_ms or rcvhwm");
        return NULL;
    }
    struct kvsub *s = calloc(1, sizeof(*s));
    if (!s) {
        tandem_set_err(err, errlen, "kv subscriber: out of memory");
        return NULL;
    }
    s->index = c->index;
    s->replay_timeout_ms = c->replay_timeout_ms ? c->replay_timeout_ms : KVSUB_DEFAULT_REPLAY_MS;
    s->rcvhwm = c->rcvhwm ? c->rcvhwm : KVSUB_DEFAULT_RCVHWM;
    s->wake_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->filter = strdup(c->topic_filter ? c->topic_filter : KVSUB_DEFAULT_FILTER);
    s->zctx = zmq_ctx_new();
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!s->filter || !s->zctx || s->wake_fd < 0) {
        tandem_set_err(err, errlen, "kv subscriber: out of resources (zmq context or eventfd)");
        kvsub_stop(s);
        return NULL;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, subscriber_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        tandem_set_err(err, errlen, "kv subscriber: pthread_create: %s", strerror(rc));
        kvsub_stop(s);
        return NULL;
    }
    s->thread_running = true;
    return s;
}

void kvsub_stop(struct kvsub *s)
{
    if (!s) {
        return;
    }
    if (s->thread_running) {
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        uint64_t one = 1;
        if (write(s->wake_fd, &one, sizeof(one)) != (ssize_t)sizeof(one)) {
            log_warn("kv events: eventfd write: %s", strerror(errno));
        }
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    /* commands not run: adds own pods still in the registry, removes own unlinked ones */
    for (struct cmd *c = s->cmd_head; c;) {
        struct cmd *next = c->next;
        if (c->type == CMD_REMOVE) {
            pod_free(c->pod);
        }
        free(c);
        c = next;
    }
    while (s->pods) {
        struct spod *p = s->pods;
        s->pods = p->next;
        pod_free(p);
    }
    free(s->live);
    if (s->zctx) {
        zmq_ctx_term(s->zctx);
    }
    if (s->wake_fd >= 0) {
        close(s->wake_fd);
    }
    free(s->filter);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
