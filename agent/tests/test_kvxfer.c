/* Unit tests for agent/kvxfer.h: the wire codecs on their own, then two or more kvx instances in
 * one process (each its own thread, UCX worker and malloc'd pools holding a known byte pattern)
 * over 127.0.0.1: pulls with runs and gaps land exactly where asked and nowhere else, with UCX_TLS
 * unset and =tcp; notifications; the cached handshake; compatibility and engine-id checks; block
 * id checks; a producer that is gone; garbage on the side channel; a scripted fake producer
 * answering malformed metadata; kvx_free with requests in flight. Then Tandem's extensions: the
 * tandem_blocks codecs, XXH64, int8 packing within its error bound, checksummed pulls with a
 * corrupted first round (retried) and corrupted rounds (failed, naming the block), int8 pulls over
 * each transport (staging released), and producers that lack or refuse the extensions. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <msgpack.h>
#include <zmq.h>

#include "agent/kvxfer.h"
#include "kernels/cpu/kc_convert.h"
#include "lib/clock.h"
#include "lib/log.h"

/* ---- engines: a kvx over malloc'd pools of a known pattern ---- */

#define TEST_LAYERS 2
#define TEST_BLOCKS 16
#define MAX_REGIONS (2 * TEST_LAYERS)

static const struct kvx_layout test_layout = {.n_layers = TEST_LAYERS,
                                              .n_kv_heads = 2,
                                              .head_dim = 8,
                                              .block_size = 4,
                                              .num_blocks = TEST_BLOCKS,
                                              .dtype_bytes = 2};

struct engine {
    struct kvx *x;
    struct kvx_layout layout;
    char id[64];
    int tag; /* seeds the pattern */
    uint8_t *base[MAX_REGIONS];
    size_t bytes[MAX_REGIONS];
    size_t block_bytes;
    int port;
    bool ucx_alloc;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int notes;
    char last_note[KVX_NOTIFY_MAX + 1];
    size_t last_note_len;
};

static uint8_t pattern(int tag, int region, size_t off)
{
    return (uint8_t)(tag * 131 + region * 31 + off * 7 + (off >> 8) * 13);
}

static void on_notify(void *ud, const char *msg, size_t len)
{
    struct engine *e = ud;
    pthread_mutex_lock(&e->mu);
    e->notes++;
    memcpy(e->last_note, msg, len + 1);
    e->last_note_len = len;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

struct engine_opts {
    const char *model;
    bool no_listen;
    bool lax; /* enforce_compat false */
    int num_blocks;
    int listen_port;
    int timeout_ms;
    int transfer_timeout_ms;
    const char *id;
    bool ucx_alloc;  /* kvx allocates the regions */
    bool checksum;   /* block_checksum */
    bool int8;       /* wire_dtype int8 */
    int dtype_bytes; /* 0: test_layout's */
    int head_dim;    /* 0: test_layout's */
};

static int engine_start(struct engine *e, int tag, const struct engine_opts *o, char *err,
                        size_t errlen)
{
    memset(e, 0, sizeof(*e));
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->tag = tag;
    e->layout = test_layout;
    if (o && o->num_blocks) {
        e->layout.num_blocks = o->num_blocks;
    }
    if (o && o->dtype_bytes) {
        e->layout.dtype_bytes = o->dtype_bytes;
    }
    if (o && o->head_dim) {
        e->layout.head_dim = o->head_dim;
    }
    if (o && o->id) {
        snprintf(e->id, sizeof(e->id), "%s", o->id);
    } else {
        snprintf(e->id, sizeof(e->id), "engine-%d-0000-4000-8000-%012d", tag, tag);
    }
    e->block_bytes = (size_t)e->layout.n_kv_heads * (size_t)e->layout.block_size *
                     (size_t)e->layout.head_dim * (size_t)e->layout.dtype_bytes;
    e->ucx_alloc = o && o->ucx_alloc;
    for (int r = 0; r < MAX_REGIONS && !e->ucx_alloc; r++) {
        e->bytes[r] = e->block_bytes * (size_t)e->layout.num_blocks;
        e->base[r] = malloc(e->bytes[r]);
        assert_non_null(e->base[r]);
        for (size_t i = 0; i < e->bytes[r]; i++) {
            e->base[r][i] = pattern(tag, r, i);
        }
    }
    struct kvx_config c = {.engine_id = e->id,
                           .listen_host = o && o->no_listen ? NULL : "127.0.0.1",
                           .listen_port = o ? o->listen_port : 0,
                           .layout = e->layout,
                           .region_base = e->ucx_alloc ? NULL : (void *const *)e->base,
                           .region_bytes = e->ucx_alloc ? NULL : e->bytes,
                           .compat_model = o && o->model ? o->model : "test-model f16 abc123",
                           .tp_size = 1,
                           .enforce_compat = !(o && o->lax),
                           .handshake_timeout_ms = o ? o->timeout_ms : 0,
                           .transfer_timeout_ms = o ? o->transfer_timeout_ms : 0,
                           .block_checksum = o && o->checksum,
                           .wire_dtype = o && o->int8 ? KVX_WIRE_INT8 : KVX_WIRE_NATIVE,
                           .on_notify = on_notify,
                           .ud = e};
    e->x = kvx_new(&c, err, errlen);
    if (!e->x) {
        return -1;
    }
    e->port = kvx_listen_port(e->x);
    for (int r = 0; r < MAX_REGIONS && e->ucx_alloc; r++) {
        e->base[r] = kvx_region(e->x, r, &e->bytes[r]);
        assert_non_null(e->base[r]);
        assert_int_equal(e->bytes[r], e->block_bytes * (size_t)e->layout.num_blocks);
        for (size_t i = 0; i < e->bytes[r]; i++) {
            e->base[r][i] = pattern(tag, r, i);
        }
    }
    return 0;
}

static void engine_must_start(struct engine *e, int tag, const struct engine_opts *o)
{
    char err[512] = "";
    int rc = engine_start(e, tag, o, err, sizeof(err));
    if (rc != 0) {
        fail_msg("kvx_new: %s", err);
    }
}

static void engine_stop(struct engine *e)
{
    kvx_free(e->x);
    e->x = NULL;
    for (int r = 0; r < MAX_REGIONS; r++) {
        if (!e->ucx_alloc) {
            free(e->base[r]);
        }
        e->base[r] = NULL; /* kvx_free released allocated regions */
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
}

static void abs_deadline(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits until the engine has seen at least n notifications. */
static void wait_notes(struct engine *e, int n)
{
    struct timespec ts;
    abs_deadline(&ts, 10000);
    pthread_mutex_lock(&e->mu);
    while (e->notes < n) {
        if (pthread_cond_timedwait(&e->cv, &e->mu, &ts) != 0) {
            break;
        }
    }
    int got = e->notes;
    pthread_mutex_unlock(&e->mu);
    assert_int_equal(got, n);
}

/* The consumer's pools must equal its own pattern except that every local_blocks[i] holds the
 * producer's remote_blocks[i]. */
static void check_pools(const struct engine *c, const struct engine *p, const int32_t *remote,
                        const int32_t *local, int n)
{
    size_t bb = c->block_bytes;
    for (int r = 0; r < MAX_REGIONS; r++) {
        for (int32_t b = 0; b < c->layout.num_blocks; b++) {
            int src = -1;
            for (int i = 0; i < n; i++) {
                if (local[i] == b) {
                    src = remote[i];
                }
            }
            for (size_t o = 0; o < bb; o++) {
                size_t off = (size_t)b * bb + o;
                uint8_t want =
                    src < 0 ? pattern(c->tag, r, off) : pattern(p->tag, r, (size_t)src * bb + o);
                if (c->base[r][off] != want) {
                    fail_msg("region %d block %d byte %zu: 0x%02x, expected 0x%02x (%s)", r, b, o,
                             c->base[r][off], want, src < 0 ? "untouched" : "pulled");
                }
            }
        }
    }
}

/* ---- completion of a request ---- */

struct done_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int calls;
    int status;
    uint64_t bytes;
    double seconds;
    char err[600];
};

static void done_init(struct done_wait *w)
{
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

static void on_done(void *ud, int status, uint64_t bytes, double seconds, const char *error)
{
    struct done_wait *w = ud;
    pthread_mutex_lock(&w->mu);
    w->calls++;
    w->done = true;
    w->status = status;
    w->bytes = bytes;
    w->seconds = seconds;
    snprintf(w->err, sizeof(w->err), "%s", error ? error : "");
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* The request's status once done (fails the test after timeout_ms). */
static int wait_done(struct done_wait *w, int timeout_ms)
{
    struct timespec ts;
    abs_deadline(&ts, timeout_ms);
    pthread_mutex_lock(&w->mu);
    while (!w->done) {
        if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) != 0) {
            break;
        }
    }
    bool done = w->done;
    int status = w->status;
    pthread_mutex_unlock(&w->mu);
    if (!done) {
        fail_msg("request not done within %d ms", timeout_ms);
    }
    return status;
}

static void done_fini(struct done_wait *w)
{
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

/* Pulls and waits; returns the status (message in w). */
static int pull_wait(struct engine *c, const char *id, int port, const int32_t *remote,
                     const int32_t *local, int n, const char *note, struct done_wait *w)
{
    done_init(w);
    int rc = kvx_pull(c->x, id, "127.0.0.1", port, remote, local, n, note, on_done, w);
    assert_int_equal(rc, 0);
    rc = wait_done(w, 15000);
    assert_int_equal(w->calls, 1);
    return rc;
}

static void set_tls(const char *tls)
{
    if (tls) {
        setenv("UCX_TLS", tls, 1);
    } else {
        unsetenv("UCX_TLS");
    }
}

/* ---- wire codecs ---- */

static struct kvx_agent_meta sample_meta(uint8_t *addr, uint8_t (*rk)[5], const uint8_t **rkeys,
                                         size_t *rkey_lens, uint64_t *bases, uint64_t *lens)
{
    struct kvx_agent_meta m = {.n_regions = MAX_REGIONS,
                               .base_addrs = bases,
                               .block_lens = lens,
                               .device_id = 0,
                               .num_blocks = TEST_BLOCKS,
                               .block_size = 4,
                               .worker_addr = addr,
                               .worker_addr_len = 7,
                               .rkeys = rkeys,
                               .rkey_lens = rkey_lens};
    snprintf(m.engine_id, sizeof(m.engine_id), "engine-a");
    snprintf(m.kv_cache_layout, sizeof(m.kv_cache_layout), "HND");
    for (int i = 0; i < 7; i++) {
        addr[i] = (uint8_t)(0xa0 + i);
    }
    for (int r = 0; r < MAX_REGIONS; r++) {
        for (int i = 0; i < 5; i++) {
            rk[r][i] = (uint8_t)(r * 16 + i);
        }
        rkeys[r] = rk[r];
        rkey_lens[r] = 5;
        bases[r] = 0x7f0000000000ull + (uint64_t)r * 0x100000;
        lens[r] = 256;
    }
    return m;
}

static void test_wire_request(void **state)
{
    (void)state;
    char err[256];
    int64_t rank = -5;
    size_t len = 0;
    void *req = kvx_wire_encode_request(0, &len);
    assert_non_null(req);
    assert_int_equal(kvx_wire_decode_request(req, len, &rank, err, sizeof(err)), 0);
    assert_int_equal(rank, 0);
    /* every strict prefix fails cleanly */
    for (size_t i = 0; i < len; i++) {
        assert_int_equal(kvx_wire_decode_request(req, i, &rank, err, sizeof(err)), -EINVAL);
    }
    free(req);
    req = kvx_wire_encode_request(7, &len);
    assert_int_equal(kvx_wire_decode_request(req, len, &rank, err, sizeof(err)), 0);
    assert_int_equal(rank, 7);
    free(req);
    /* vLLM <= 0.9: the bare bytes */
    assert_int_equal(kvx_wire_decode_request("get_meta_msg", 12, &rank, err, sizeof(err)), 0);
    assert_int_equal(rank, 0);
    /* str instead of bin for the tag, as Python's msgpack without use_bin_type sends */
    const uint8_t str_tag[] = {0x92, 0xac, 'g', 'e', 't', '_', 'm', 'e',
                               't',  'a',  '_', 'm', 's', 'g', 0x01};
    assert_int_equal(kvx_wire_decode_request(str_tag, sizeof(str_tag), &rank, err, sizeof(err)), 0);
    assert_int_equal(rank, 1);
    const uint8_t wrong_tag[] = {0x92, 0xa3, 'f', 'o', 'o', 0x00};
    assert_int_equal(kvx_wire_decode_request(wrong_tag, sizeof(wrong_tag), &rank, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "unknown request type"));
    const uint8_t huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(kvx_wire_decode_request(huge, sizeof(huge), &rank, err, sizeof(err)), -EINVAL);
    const uint8_t bad_rank[] = {0x92, 0xc4, 12,  'g', 'e', 't', '_',  'm', 'e',
                                't',  'a',  '_', 'm', 's', 'g', 0xa1, 'x'};
    assert_int_equal(kvx_wire_decode_request(bad_rank, sizeof(bad_rank), &rank, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "tp_rank"));
    assert_int_equal(kvx_wire_decode_request("", 0, &rank, err, sizeof(err)), -EINVAL);
    const uint8_t c1[] = {0xc1};
    assert_int_equal(kvx_wire_decode_request(c1, 1, &rank, err, sizeof(err)), -EINVAL);
}

static void test_wire_agent_meta(void **state)
{
    (void)state;
    uint8_t addr[7], rk[MAX_REGIONS][5];
    const uint8_t *rkeys[MAX_REGIONS];
    size_t rkey_lens[MAX_REGIONS];
    uint64_t bases[MAX_REGIONS], lens[MAX_REGIONS];
    struct kvx_agent_meta m = sample_meta(addr, rk, rkeys, rkey_lens, bases, lens);
    char err[256];
    size_t len = 0, hs_len = 0;
    uint8_t *buf = kvx_wire_encode_agent_meta(&m, &len);
    assert_non_null(buf);
    struct kvx_agent_meta d;
    assert_int_equal(kvx_wire_decode_agent_meta(buf, len, &d, err, sizeof(err)), 0);
    assert_string_equal(d.engine_id, "engine-a");
    assert_int_equal(d.n_regions, MAX_REGIONS);
    assert_int_equal(d.num_blocks, TEST_BLOCKS);
    assert_int_equal(d.block_size, 4);
    assert_string_equal(d.kv_cache_layout, "HND");
    assert_int_equal(d.worker_addr_len, 7);
    assert_memory_equal(d.worker_addr, addr, 7);
    for (int r = 0; r < MAX_REGIONS; r++) {
        assert_int_equal(d.base_addrs[r], bases[r]);
        assert_int_equal(d.block_lens[r], 256);
        assert_int_equal(d.rkey_lens[r], 5);
        assert_memory_equal(d.rkeys[r], rk[r], 5);
    }
    struct kvx_layout l = test_layout;
    l.head_dim = 16; /* 2 heads * 4 tokens * 16 * 2 bytes = 256 */
    assert_int_equal(kvx_agent_meta_check(&d, &l, err, sizeof(err)), 0);
    l.head_dim = 8;
    assert_int_equal(kvx_agent_meta_check(&d, &l, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "block_lens mismatch"));
    l.head_dim = 16;
    l.n_layers = 3;
    assert_int_equal(kvx_agent_meta_check(&d, &l, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "4 KV regions"));
    l.n_layers = 2;
    l.block_size = 8;
    l.head_dim = 8;
    assert_int_equal(kvx_agent_meta_check(&d, &l, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "block_size"));
    assert_string_equal(d.host_ns, ""); /* optional: absent */
    kvx_agent_meta_release(&d);
    /* host_ns travels when set; a non-printable one is refused */
    snprintf(m.host_ns, sizeof(m.host_ns), "%s", "boot-1/ipc:[1]/pid:[2]");
    size_t hlen = 0;
    uint8_t *hbuf = kvx_wire_encode_agent_meta(&m, &hlen);
    assert_non_null(hbuf);
    assert_int_equal(kvx_wire_decode_agent_meta(hbuf, hlen, &d, err, sizeof(err)), 0);
    assert_string_equal(d.host_ns, "boot-1/ipc:[1]/pid:[2]");
    kvx_agent_meta_release(&d);
    free(hbuf);
    m.host_ns[0] = '\n';
    hbuf = kvx_wire_encode_agent_meta(&m, &hlen);
    assert_int_equal(kvx_wire_decode_agent_meta(hbuf, hlen, &d, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "non-printable"));
    free(hbuf);
    m.host_ns[0] = '\0';

    /* inside the handshake reply */
    char hash[KVX_HASH_HEX + 1];
    kvx_compat_hash(&test_layout, "m", 1, hash);
    uint8_t *hs = kvx_wire_encode_handshake(hash, buf, len, &hs_len);
    struct kvx_handshake h;
    assert_int_equal(kvx_wire_decode_handshake(hs, hs_len, &h, err, sizeof(err)), 0);
    assert_string_equal(h.compat_hash, hash);
    assert_int_equal(h.agent_metadata_len, len);
    assert_memory_equal(h.agent_metadata, buf, len);
    assert_string_equal(h.error, "");
    for (size_t i = 0; i < hs_len; i++) {
        assert_int_equal(kvx_wire_decode_handshake(hs, i, &h, err, sizeof(err)), -EINVAL);
    }
    free(hs);

    /* every strict prefix, and every single-byte corruption, fails cleanly or decodes */
    for (size_t i = 0; i < len; i++) {
        assert_int_equal(kvx_wire_decode_agent_meta(buf, i, &d, err, sizeof(err)), -EINVAL);
        assert_null(d.base_addrs);
        uint8_t saved = buf[i];
        for (int v = 0; v < 256; v += 17) {
            buf[i] = (uint8_t)v;
            if (kvx_wire_decode_agent_meta(buf, len, &d, err, sizeof(err)) == 0) {
                kvx_agent_meta_release(&d);
            }
        }
        buf[i] = saved;
    }
    free(buf);

    /* one rkey short */
    m.n_regions = MAX_REGIONS;
    size_t l2 = 0;
    struct kvx_agent_meta m2 = m;
    m2.n_regions = MAX_REGIONS - 1;
    uint8_t *short_keys = kvx_wire_encode_agent_meta(&m2, &l2);
    assert_int_equal(kvx_wire_decode_agent_meta(short_keys, l2, &d, err, sizeof(err)), 0);
    assert_int_equal(kvx_agent_meta_check(&d, &test_layout, err, sizeof(err)), -EINVAL);
    kvx_agent_meta_release(&d);
    free(short_keys);

    /* a region that wraps around the address space */
    m.base_addrs[1] = UINT64_MAX - 10;
    buf = kvx_wire_encode_agent_meta(&m, &len);
    assert_int_equal(kvx_wire_decode_agent_meta(buf, len, &d, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "address space"));
    free(buf);

    /* an empty rkey */
    m.rkey_lens[2] = 0;
    buf = kvx_wire_encode_agent_meta(&m, &len);
    assert_int_equal(kvx_wire_decode_agent_meta(buf, len, &d, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "binary of 0 bytes"));
    free(buf);

    /* a map claiming 2^32 pairs in 5 bytes, a duplicate key, wrong types */
    const uint8_t huge[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(kvx_wire_decode_agent_meta(huge, sizeof(huge), &d, err, sizeof(err)), -EINVAL);
    const uint8_t dup[] = {0x82, 0xa9, 'e', 'n', 'g', 'i', 'n', 'e', '_', 'i', 'd',  0xa1, 'a',
                           0xa9, 'e',  'n', 'g', 'i', 'n', 'e', '_', 'i', 'd', 0xa1, 'b'};
    assert_int_equal(kvx_wire_decode_agent_meta(dup, sizeof(dup), &d, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "duplicate key"));
    const uint8_t wrong[] = {0x81, 0xaa, 'n', 'u', 'm', '_',  'b',
                             'l',  'o',  'c', 'k', 's', 0xa1, '9'};
    assert_int_equal(kvx_wire_decode_agent_meta(wrong, sizeof(wrong), &d, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "num_blocks"));
    assert_non_null(strstr(err, "expected unsigned integer, got string"));
    const uint8_t missing[] = {0x80};
    assert_int_equal(kvx_wire_decode_agent_meta(missing, 1, &d, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "lacks"));

    /* refusal */
    size_t rl = 0;
    void *ref = kvx_wire_encode_refusal("tp_rank 3 out of range [0, 1)", &rl);
    assert_int_equal(kvx_wire_decode_handshake(ref, rl, &h, err, sizeof(err)), 0);
    assert_string_equal(h.error, "tp_rank 3 out of range [0, 1)");
    free(ref);
}

static void test_compat_hash(void **state)
{
    (void)state;
    char a[KVX_HASH_HEX + 1], b[KVX_HASH_HEX + 1];
    kvx_compat_hash(&test_layout, "model-x", 1, a);
    assert_int_equal(strlen(a), KVX_HASH_HEX);
    kvx_compat_hash(&test_layout, "model-x", 1, b);
    assert_string_equal(a, b);
    kvx_compat_hash(&test_layout, "model-y", 1, b);
    assert_string_not_equal(a, b);
    struct kvx_layout l = test_layout;
    l.dtype_bytes = 4;
    kvx_compat_hash(&l, "model-x", 1, b);
    assert_string_not_equal(a, b);
    l = test_layout;
    l.num_blocks = 999; /* pool sizes may differ between engines */
    kvx_compat_hash(&l, "model-x", 1, b);
    assert_string_equal(a, b);
    kvx_compat_hash(&test_layout, NULL, 1, a);
    kvx_compat_hash(&test_layout, "", 1, b);
    assert_string_equal(a, b);
}

/* A reply built by Python's msgpack the way vLLM's side channel builds it (maps by field name,
 * bytes as bin, an extra newer field), from the fuzz seed corpus; its hash was computed in
 * Python from the canonical string documented in kvxfer.h. */
static void test_wire_python_interop(void **state)
{
    (void)state;
    FILE *f = fopen("../fuzz/corpus/fuzz_kvx_handshake/handshake_python.bin", "rb");
    assert_non_null(f);
    uint8_t buf[4096];
    size_t len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    char err[256], hash[KVX_HASH_HEX + 1];
    struct kvx_handshake h;
    struct kvx_agent_meta m;
    assert_int_equal(kvx_wire_decode_handshake(buf, len, &h, err, sizeof(err)), 0);
    kvx_compat_hash(&test_layout, "test-model f16 abc123", 1, hash);
    assert_string_equal(h.compat_hash, hash);
    assert_string_equal(hash, "86b4324cd442e835f3b0fd8fc66c1510b85a852a2c3dd8976e1e988a3d9b9094");
    assert_int_equal(
        kvx_wire_decode_agent_meta(h.agent_metadata, h.agent_metadata_len, &m, err, sizeof(err)),
        0);
    assert_string_equal(m.engine_id, "3f2c1b5e-9a7d-4c1e-8b2a-0f6d5e4c3b2a");
    assert_int_equal(m.n_regions, 4);
    assert_int_equal(m.base_addrs[3], 0x7f0000030000ull);
    assert_int_equal(m.worker_addr_len, 40);
    assert_int_equal(m.rkey_lens[2], 12);
    assert_int_equal(m.rkeys[2][11], 2);
    struct kvx_layout l = test_layout;
    l.head_dim = 16; /* the seed's 256-byte blocks */
    assert_int_equal(kvx_agent_meta_check(&m, &l, err, sizeof(err)), 0);
    kvx_agent_meta_release(&m);
}

/* ---- two engines ---- */

static void pull_and_check(const char *tls, bool ucx_alloc)
{
    set_tls(tls);
    struct engine p, c;
    engine_must_start(&p, 1, &(struct engine_opts){.ucx_alloc = ucx_alloc});
    engine_must_start(&c, 2, &(struct engine_opts){.no_listen = true, .ucx_alloc = ucx_alloc});
    set_tls(NULL);
    assert_true(p.port > 0);
    assert_int_equal(kvx_listen_port(c.x), 0);

    /* runs (3-5 → 1-3, 12-13 → 10-11), gaps, a remote run whose local side is not one */
    const int32_t remote[] = {3, 4, 5, 9, 12, 13, 14, 15};
    const int32_t local[] = {1, 2, 3, 7, 10, 11, 14, 5};
    struct done_wait w;
    int rc = pull_wait(&c, p.id, p.port, remote, local, 8, "req-1:1", &w);
    if (rc != 0) {
        fail_msg("pull over %s failed: %s", tls ? tls : "default transports", w.err);
    }
    assert_string_equal(w.err, "");
    assert_int_equal(w.bytes, 8 * c.block_bytes * MAX_REGIONS);
    check_pools(&c, &p, remote, local, 8);
    wait_notes(&p, 1);
    assert_string_equal(p.last_note, "req-1:1");
    assert_int_equal(p.last_note_len, 7);
    done_fini(&w);

    /* a second pull reuses the handshake; no notification this time */
    const int32_t remote2[] = {6};
    const int32_t local2[] = {15};
    rc = pull_wait(&c, p.id, p.port, remote2, local2, 1, NULL, &w);
    assert_int_equal(rc, 0);
    done_fini(&w);
    const int32_t all_remote[] = {3, 4, 5, 9, 12, 13, 14, 15, 6};
    const int32_t all_local[] = {1, 2, 3, 7, 10, 11, 14, 5, 15};
    check_pools(&c, &p, all_remote, all_local, 9);

    struct kvx_stats cs, ps;
    kvx_get_stats(c.x, &cs);
    kvx_get_stats(p.x, &ps);
    assert_int_equal(cs.handshakes, 1);
    assert_int_equal(cs.pulls, 2);
    assert_int_equal(cs.pull_failures, 0);
    assert_int_equal(cs.bytes, 9 * c.block_bytes * MAX_REGIONS);
    assert_int_equal(cs.notifications_sent, 1);
    assert_int_equal(ps.notifications_received, 1);
    assert_int_equal(ps.metadata_served, 1);
    assert_int_equal(ps.bad_messages, 0);
    assert_int_equal(p.notes, 1);
    /* the producer's pools are untouched */
    for (int r = 0; r < MAX_REGIONS; r++) {
        for (size_t i = 0; i < p.bytes[r]; i++) {
            assert_int_equal(p.base[r][i], pattern(p.tag, r, i));
        }
    }
    engine_stop(&c);
    engine_stop(&p);
}

static void test_pull_default_transports(void **state)
{
    (void)state;
    pull_and_check(NULL, false);
}

static void test_pull_tcp(void **state)
{
    (void)state;
    pull_and_check("tcp", false);
}

static void test_pull_shm(void **state)
{
    (void)state;
    pull_and_check("sm,self", false);
}

/* Regions kvx allocated (UCX shared memory, served one-sided by the sysv/posix transports). */
static void test_pull_ucx_allocated(void **state)
{
    (void)state;
    pull_and_check("sm,self", true);
    pull_and_check(NULL, true);
}

static void test_notify_only_and_concurrent(void **state)
{
    (void)state;
    set_tls(NULL);
    struct engine p, c;
    engine_must_start(&p, 3, NULL);
    engine_must_start(&c, 4, &(struct engine_opts){.no_listen = true});
    /* several requests queued before the handshake completes share it */
    struct done_wait w[4];
    const int32_t remote[] = {1, 2};
    const int32_t local[] = {8, 9};
    for (int i = 0; i < 3; i++) {
        done_init(&w[i]);
        char note[32];
        snprintf(note, sizeof(note), "r%d:1", i);
        assert_int_equal(
            kvx_pull(c.x, p.id, "127.0.0.1", p.port, remote, local, 2, note, on_done, &w[i]), 0);
    }
    done_init(&w[3]);
    assert_int_equal(kvx_notify(c.x, p.id, "127.0.0.1", p.port, "only-notify:1", on_done, &w[3]),
                     0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(wait_done(&w[i], 15000), 0);
        done_fini(&w[i]);
    }
    assert_int_equal(w[3].bytes, 0);
    wait_notes(&p, 4);
    check_pools(&c, &p, remote, local, 2);
    struct kvx_stats cs;
    kvx_get_stats(c.x, &cs);
    assert_int_equal(cs.handshakes, 1);
    assert_int_equal(cs.pulls, 3);
    assert_int_equal(cs.notifications_sent, 4);
    engine_stop(&c);
    engine_stop(&p);
}

static void test_compat_mismatch(void **state)
{
    (void)state;
    set_tls(NULL);
    struct engine p, c, lax;
    engine_must_start(&p, 5, &(struct engine_opts){.model = "model A"});
    engine_must_start(&c, 6, &(struct engine_opts){.model = "model B", .no_listen = true});
    engine_must_start(&lax, 7,
                      &(struct engine_opts){.model = "model B", .no_listen = true, .lax = true});
    const int32_t remote[] = {2};
    const int32_t local[] = {3};
    struct done_wait w;
    assert_int_equal(pull_wait(&c, p.id, p.port, remote, local, 1, "x:1", &w), -EINVAL);
    assert_non_null(strstr(w.err, "compatibility hash mismatch"));
    done_fini(&w);
    /* nothing moved, no notification */
    check_pools(&c, &p, remote, local, 0);
    struct kvx_stats cs;
    kvx_get_stats(c.x, &cs);
    assert_int_equal(cs.handshakes, 0);
    assert_int_equal(cs.handshake_failures, 1);
    assert_int_equal(cs.pull_failures, 1);

    assert_int_equal(pull_wait(&lax, p.id, p.port, remote, local, 1, "y:1", &w), 0);
    done_fini(&w);
    check_pools(&lax, &p, remote, local, 1);
    wait_notes(&p, 1);
    assert_string_equal(p.last_note, "y:1");
    engine_stop(&lax);
    engine_stop(&c);
    engine_stop(&p);
}

static void test_engine_id_checks(void **state)
{
    (void)state;
    set_tls(NULL);
    struct engine p, c;
    engine_must_start(&p, 8, NULL);
    engine_must_start(&c, 9, &(struct engine_opts){.no_listen = true});
    const int32_t remote[] = {2, 3};
    const int32_t local[] = {4, 5};
    struct done_wait w;
    /* warm the cache, then ask the same address for another engine id */
    assert_int_equal(pull_wait(&c, p.id, p.port, remote, local, 2, NULL, &w), 0);
    done_fini(&w);
    assert_int_equal(pull_wait(&c, "restarted-engine-id", p.port, remote, local, 2, NULL, &w),
                     -EINVAL);
    assert_non_null(strstr(w.err, "engine id mismatch"));
    assert_non_null(strstr(w.err, p.id));
    done_fini(&w);
    /* the old id's cache entry for that address was dropped: the next pull handshakes again */
    assert_int_equal(pull_wait(&c, p.id, p.port, remote, local, 2, NULL, &w), 0);
    done_fini(&w);
    struct kvx_stats cs;
    kvx_get_stats(c.x, &cs);
    assert_int_equal(cs.handshakes, 2);
    assert_int_equal(cs.pulls, 2);
    assert_int_equal(cs.pull_failures, 1);
    engine_stop(&c);
    engine_stop(&p);
}

/* Requests queued together: a wrong engine id at the producer's address fails without disturbing
 * the right one's handshake in progress; the same id named at another address joins the
 * handshake in progress. */
static void test_concurrent_handshakes(void **state)
{
    (void)state;
    set_tls(NULL);
    struct engine p, c;
    engine_must_start(&p, 27, NULL);
    engine_must_start(&c, 28, &(struct engine_opts){.no_listen = true});
    const int32_t remote[] = {2};
    const int32_t local[] = {6};
    struct done_wait right, wrong, elsewhere;
    done_init(&right);
    done_init(&wrong);
    done_init(&elsewhere);
    assert_int_equal(
        kvx_pull(c.x, "someone-else", "127.0.0.1", p.port, remote, local, 1, NULL, on_done, &wrong),
        0);
    assert_int_equal(
        kvx_pull(c.x, p.id, "127.0.0.1", p.port, remote, local, 1, "r:1", on_done, &right), 0);
    assert_int_equal(
        kvx_pull(c.x, p.id, "127.0.0.1", 1, remote, local, 1, "e:1", on_done, &elsewhere), 0);
    assert_int_equal(wait_done(&wrong, 15000), -EINVAL);
    assert_non_null(strstr(wrong.err, "engine id mismatch"));
    assert_int_equal(wait_done(&right, 15000), 0);
    assert_int_equal(wait_done(&elsewhere, 15000), 0);
    check_pools(&c, &p, remote, local, 1);
    wait_notes(&p, 2);
    struct kvx_stats cs;
    kvx_get_stats(c.x, &cs);
    assert_int_equal(cs.handshakes, 1);
    assert_int_equal(cs.handshake_failures, 1);
    done_fini(&right);
    done_fini(&wrong);
    done_fini(&elsewhere);
    engine_stop(&c);
    engine_stop(&p);
}

static void test_block_id_checks(void **state)
{
    (void)state;
    set_tls(NULL);
    struct engine p, c;
    /* the producer has fewer blocks than the consumer: that is allowed, but its ids are bounded */
    engine_must_start(&p, 10, &(struct engine_opts){.num_blocks = 8});
    engine_must_start(&c, 11, &(struct engine_opts){.no_listen = true});
    struct done_wait w;
    done_init(&w);
    const int32_t ok[] = {1, 2};
    const int32_t zero[] = {0, 2};
    const int32_t past[] = {1, TEST_BLOCKS};
    const int32_t neg[] = {1, -3};
    const char *id = p.id;
    int port = p.port;
    assert_int_equal(kvx_pull(c.x, id, "127.0.0.1", port, ok, zero, 2, NULL, on_done, &w), -EINVAL);
    assert_int_equal(kvx_pull(c.x, id, "127.0.0.1", port, ok, past, 2, NULL, on_done, &w), -EINVAL);
    assert_int_equal(kvx_pull(c.x, id, "127.0.0.1", port, zero, ok, 2, NULL, on_done, &w), -EINVAL);
    assert_int_equal(kvx_pull(c.x, id, "127.0.0.1", port, neg, ok, 2, NULL, on_done, &w), -EINVAL);
    assert_int_equal(kvx_pull(c.x, id, "127.0.0.1", port, ok, ok, 0, NULL, on_done, &w), -EINVAL);
    assert_int_equal(
        kvx_pull(c.x, id, "127.0.0.1", port, ok, ok, TEST_BLOCKS + 1, NULL, on_done, &w), -EINVAL);
    assert_int_equal(kvx_pull(c.x, "", "127.0.0.1", port, ok, ok, 2, NULL, on_done, &w), -EINVAL);
    assert_int_equal(kvx_pull(c.x, id, "127.0.0.1", 0, ok, ok, 2, NULL, on_done, &w), -EINVAL);
    assert_int_equal(kvx_pull(c.x, id, NULL, port, ok, ok, 2, NULL, on_done, &w), -EINVAL);
    char long_note[KVX_NOTIFY_MAX + 2];
    memset(long_note, 'n', sizeof(long_note) - 1);
    long_note[sizeof(long_note) - 1] = '\0';
    assert_int_equal(kvx_pull(c.x, id, "127.0.0.1", port, ok, ok, 2, long_note, on_done, &w),
                     -EINVAL);
    assert_int_equal(kvx_notify(c.x, id, "127.0.0.1", port, NULL, on_done, &w), -EINVAL);
    assert_false(w.done);
    done_fini(&w);
    /* valid here, but past the producer's 8 blocks: refused after the handshake, nothing moves */
    const int32_t remote[] = {2, 3, 8};
    const int32_t local[] = {2, 3, 4};
    assert_int_equal(pull_wait(&c, id, port, remote, local, 3, "never:1", &w), -EINVAL);
    assert_non_null(strstr(w.err, "remote block id 8 out of range [1, 8)"));
    done_fini(&w);
    check_pools(&c, &p, remote, local, 0);
    const int32_t last[] = {7};
    assert_int_equal(pull_wait(&c, id, port, last, local, 1, "last:1", &w), 0);
    done_fini(&w);
    check_pools(&c, &p, last, local, 1);
    wait_notes(&p, 1);
    assert_string_equal(p.last_note, "last:1");
    engine_stop(&c);
    engine_stop(&p);
}

static void producer_gone(const char *tls)
{
    set_tls(tls);
    struct engine p, c, fresh;
    engine_must_start(&p, 12, NULL);
    engine_must_start(
        &c, 13,
        &(struct engine_opts){.no_listen = true, .timeout_ms = 1500, .transfer_timeout_ms = 2000});
    engine_must_start(&fresh, 14, &(struct engine_opts){.no_listen = true, .timeout_ms = 1500});
    set_tls(NULL);
    const int32_t remote[] = {2};
    const int32_t local[] = {3};
    struct done_wait w;
    assert_int_equal(pull_wait(&c, p.id, p.port, remote, local, 1, NULL, &w), 0);
    done_fini(&w);
    char id[64];
    snprintf(id, sizeof(id), "%s", p.id);
    int port = p.port;
    engine_stop(&p);

    /* no cached metadata: the handshake times out */
    int64_t t0 = tandem_now_ms();
    assert_int_equal(pull_wait(&fresh, id, port, remote, local, 1, NULL, &w), -ETIMEDOUT);
    assert_true(tandem_now_ms() - t0 < 3000);
    assert_non_null(strstr(w.err, "no answer on the side channel"));
    done_fini(&w);

    /* cached metadata of a gone engine: fails in bounded time, never hangs */
    t0 = tandem_now_ms();
    done_init(&w);
    assert_int_equal(kvx_pull(c.x, id, "127.0.0.1", port, remote, local, 1, "late:1", on_done, &w),
                     0);
    int rc = wait_done(&w, 10000);
    print_message("%s: pull from a freed producer with cached metadata: %d (%s) after %" PRId64
                  " ms\n",
                  tls ? tls : "default", rc, w.err, tandem_now_ms() - t0);
    assert_true(tandem_now_ms() - t0 < 8000);
    done_fini(&w);
    engine_stop(&fresh);
    engine_stop(&c);
}

static void test_producer_gone(void **state)
{
    (void)state;
    producer_gone(NULL);
}

static void test_producer_gone_shm(void **state)
{
    (void)state;
    producer_gone("sm,self");
}

/* The producer comes back with the same engine id on the same port (a new UCX worker): the stale
 * cached endpoint fails (or, without error handling, times out), the cache is dropped and one
 * fresh handshake makes the pull work. */
static void restart_same_id(const char *tls)
{
    set_tls(tls);
    struct engine p, c;
    engine_must_start(&p, 24, NULL);
    engine_must_start(&c, 25, &(struct engine_opts){.no_listen = true});
    const int32_t remote[] = {2, 3};
    const int32_t local[] = {4, 5};
    struct done_wait w;
    assert_int_equal(pull_wait(&c, p.id, p.port, remote, local, 2, NULL, &w), 0);
    done_fini(&w);
    int port = p.port;
    engine_stop(&p);
    engine_must_start(
        &p, 26,
        &(struct engine_opts){.listen_port = port, .id = "engine-24-0000-4000-8000-000000000024"});
    set_tls(NULL);
    const int32_t remote2[] = {7, 8};
    const int32_t local2[] = {9, 10};
    int rc = pull_wait(&c, p.id, p.port, remote2, local2, 2, "again:1", &w);
    if (rc != 0) {
        fail_msg("pull after the restart: %s", w.err);
    }
    done_fini(&w);
    /* blocks 4, 5 hold the first producer's data: check 9, 10 against the new one only */
    for (int r = 0; r < MAX_REGIONS; r++) {
        for (int i = 0; i < 2; i++) {
            for (size_t o = 0; o < c.block_bytes; o++) {
                assert_int_equal(c.base[r][(size_t)local2[i] * c.block_bytes + o],
                                 pattern(p.tag, r, (size_t)remote2[i] * c.block_bytes + o));
            }
        }
    }
    wait_notes(&p, 1);
    struct kvx_stats cs;
    kvx_get_stats(c.x, &cs);
    assert_int_equal(cs.handshakes, 2);
    assert_int_equal(cs.pulls, 2);
    engine_stop(&c);
    engine_stop(&p);
}

static void test_restart_same_id(void **state)
{
    (void)state;
    /* tcp: a same-host producer over shared memory is connected without error handling, and
     * one replaced inside the same process (same pid) is only found by the transfer timeout */
    restart_same_id("tcp");
}

static void test_taken_port(void **state)
{
    (void)state;
    set_tls(NULL);
    struct engine p, q;
    engine_must_start(&p, 15, NULL);
    char err[512] = "";
    assert_int_not_equal(
        engine_start(&q, 16, &(struct engine_opts){.listen_port = p.port}, err, sizeof(err)), 0);
    char port[16];
    snprintf(port, sizeof(port), ":%d", p.port);
    assert_non_null(strstr(err, port));
    assert_non_null(strstr(err, "in use"));
    for (int r = 0; r < MAX_REGIONS; r++) {
        free(q.base[r]);
    }
    pthread_mutex_destroy(&q.mu);
    pthread_cond_destroy(&q.cv);
    /* an explicit free port works */
    int free_port = p.port;
    engine_stop(&p);
    engine_must_start(&q, 17, &(struct engine_opts){.listen_port = free_port});
    assert_int_equal(q.port, free_port);
    engine_stop(&q);
}

/* ---- raw ZeroMQ peers ---- */

/* Sends frames on a fresh socket of type type to port and returns the reply's last frame
 * (malloc'd; NULL on timeout). */
static uint8_t *raw_exchange(void *zctx, int type, int port, const void *const *frames,
                             const size_t *lens, int n, size_t *reply_len)
{
    void *s = zmq_socket(zctx, type);
    int zero = 0, timeout = 3000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
    assert_int_equal(zmq_connect(s, ep), 0);
    for (int i = 0; i < n; i++) {
        assert_true(zmq_send(s, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0) >= 0);
    }
    uint8_t *out = NULL;
    bool more = true;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        free(out);
        *reply_len = zmq_msg_size(&m);
        out = malloc(*reply_len + 1);
        memcpy(out, zmq_msg_data(&m), *reply_len);
        zmq_msg_close(&m);
    }
    zmq_close(s);
    return out;
}

/* Expects a refusal ({"error": ...}) for the given frames. */
static void expect_refusal(void *zctx, int type, int port, const void *const *frames,
                           const size_t *lens, int n, const char *needle)
{
    size_t len = 0;
    uint8_t *reply = raw_exchange(zctx, type, port, frames, lens, n, &len);
    assert_non_null(reply);
    struct kvx_handshake h;
    char err[256];
    assert_int_equal(kvx_wire_decode_handshake(reply, len, &h, err, sizeof(err)), 0);
    if (!strstr(h.error, needle)) {
        fail_msg("refusal \"%s\" lacks \"%s\"", h.error, needle);
    }
    free(reply);
}

static void test_router_garbage(void **state)
{
    (void)state;
    set_tls(NULL);
    struct engine p, c;
    engine_must_start(&p, 18, NULL);
    engine_must_start(&c, 19, &(struct engine_opts){.no_listen = true});
    void *zctx = zmq_ctx_new();
    const uint8_t three[] = {0x13, 0x37, 0xc1};
    const uint8_t str[] = {0xa5, 'h', 'e', 'l', 'l', 'o'};
    size_t big_len = 0, neg_len = 0;
    void *big = kvx_wire_encode_request(INT64_C(1) << 40, &big_len);
    void *neg = kvx_wire_encode_request(-1, &neg_len);
    const uint8_t huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    struct {
        const void *frames[2];
        size_t lens[2];
        const char *needle;
        int type;
        int n;
    } cases[] = {
        {{""}, {0}, "empty request", ZMQ_REQ, 1},
        {{""}, {0}, "empty request", ZMQ_DEALER, 1},
        {{three}, {3}, "request", ZMQ_REQ, 1},
        {{three}, {3}, "request", ZMQ_DEALER, 1},
        {{str}, {sizeof(str)}, "got string", ZMQ_REQ, 1},
        {{big}, {big_len}, "tp_rank 1099511627776 out of range", ZMQ_REQ, 1},
        {{neg}, {neg_len}, "tp_rank -1 out of range", ZMQ_REQ, 1},
        {{huge}, {sizeof(huge)}, "array of 4294967295 elements", ZMQ_REQ, 1},
        {{three, three}, {3, 3}, "expected one message frame, got 2", ZMQ_REQ, 2},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_refusal(zctx, cases[i].type, p.port, cases[i].frames, cases[i].lens, cases[i].n,
                       cases[i].needle);
    }
    free(big);
    free(neg);
    /* a vLLM-style REQ gets the metadata: the hash and engine id check out */
    size_t req_len = 0, reply_len = 0;
    void *req = kvx_wire_encode_request(0, &req_len);
    const void *frames[] = {req};
    uint8_t *reply = raw_exchange(zctx, ZMQ_REQ, p.port, frames, &req_len, 1, &reply_len);
    free(req);
    assert_non_null(reply);
    struct kvx_handshake h;
    struct kvx_agent_meta m;
    char err[256], hash[KVX_HASH_HEX + 1];
    assert_int_equal(kvx_wire_decode_handshake(reply, reply_len, &h, err, sizeof(err)), 0);
    kvx_compat_hash(&test_layout, "test-model f16 abc123", 1, hash);
    assert_string_equal(h.compat_hash, hash);
    assert_int_equal(
        kvx_wire_decode_agent_meta(h.agent_metadata, h.agent_metadata_len, &m, err, sizeof(err)),
        0);
    assert_string_equal(m.engine_id, p.id);
    assert_int_equal(m.n_regions, MAX_REGIONS);
    assert_int_equal(m.base_addrs[1], (uint64_t)(uintptr_t)p.base[1]);
    assert_int_equal(kvx_agent_meta_check(&m, &test_layout, err, sizeof(err)), 0);
    kvx_agent_meta_release(&m);
    free(reply);
    zmq_ctx_term(zctx);

    /* the producer still serves */
    const int32_t remote[] = {5, 6};
    const int32_t local[] = {5, 6};
    struct done_wait w;
    assert_int_equal(pull_wait(&c, p.id, p.port, remote, local, 2, "after-garbage:1", &w), 0);
    done_fini(&w);
    check_pools(&c, &p, remote, local, 2);
    wait_notes(&p, 1);
    struct kvx_stats ps;
    kvx_get_stats(p.x, &ps);
    assert_int_equal(ps.bad_messages, sizeof(cases) / sizeof(cases[0]));
    assert_int_equal(ps.metadata_served, 2);
    engine_stop(&c);
    engine_stop(&p);
}

/* A scripted producer: a ROUTER on its own thread answering every request with a fixed reply
 * (or not at all). */
struct fake {
    void *zctx;
    void *router;
    int port;
    pthread_t thread;
    volatile int stop;
    const void *reply; /* NULL: never answer */
    size_t reply_len;
    const void *later; /* answers the requests after the first, when set */
    size_t later_len;
    bool silent_later; /* answer only the first request */
    int requests;
};

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    while (!f->stop) {
        zmq_pollitem_t it = {.socket = f->router, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 50) <= 0) {
            continue;
        }
        zmq_msg_t part[3];
        int n = 0;
        bool more = true;
        while (more && n < 3) {
            zmq_msg_init(&part[n]);
            if (zmq_msg_recv(&part[n], f->router, 0) < 0) {
                break;
            }
            more = zmq_msg_more(&part[n]);
            n++;
        }
        f->requests++;
        const void *reply = f->requests > 1 && f->later ? f->later : f->reply;
        size_t reply_len = f->requests > 1 && f->later ? f->later_len : f->reply_len;
        if (reply && n == 3 && !(f->silent_later && f->requests > 1)) {
            zmq_send(f->router, zmq_msg_data(&part[0]), zmq_msg_size(&part[0]), ZMQ_SNDMORE);
            zmq_send(f->router, "", 0, ZMQ_SNDMORE);
            zmq_send(f->router, reply, reply_len, 0);
        }
        for (int i = 0; i < n; i++) {
            zmq_msg_close(&part[i]);
        }
    }
    return NULL;
}

static void fake_start(struct fake *f, const void *reply, size_t reply_len)
{
    memset(f, 0, sizeof(*f));
    f->zctx = zmq_ctx_new();
    f->router = zmq_socket(f->zctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(f->router, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_bind(f->router, "tcp://127.0.0.1:*"), 0);
    char last[64];
    size_t len = sizeof(last);
    zmq_getsockopt(f->router, ZMQ_LAST_ENDPOINT, last, &len);
    f->port = (int)strtol(strrchr(last, ':') + 1, NULL, 10);
    f->reply = reply;
    f->reply_len = reply_len;
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    f->stop = 1;
    pthread_join(f->thread, NULL);
    zmq_close(f->router);
    zmq_ctx_term(f->zctx);
}

/* The real producer's agent metadata, decoded (its spans point into *raw; free both). */
static void real_meta(struct engine *p, uint8_t **raw, struct kvx_agent_meta *m)
{
    void *zctx = zmq_ctx_new();
    size_t req_len = 0, reply_len = 0;
    void *req = kvx_wire_encode_request(0, &req_len);
    const void *frames[] = {req};
    *raw = raw_exchange(zctx, ZMQ_REQ, p->port, frames, &req_len, 1, &reply_len);
    free(req);
    zmq_ctx_term(zctx);
    struct kvx_handshake h;
    char err[256];
    assert_int_equal(kvx_wire_decode_handshake(*raw, reply_len, &h, err, sizeof(err)), 0);
    assert_int_equal(
        kvx_wire_decode_agent_meta(h.agent_metadata, h.agent_metadata_len, m, err, sizeof(err)), 0);
}

/* Pulls from a fake producer answering reply; expects failure status with needle in the message. */
static void pull_from_fake(struct engine *c, const char *id, const void *reply, size_t len,
                           int status, const char *needle)
{
    struct fake f;
    fake_start(&f, reply, len);
    const int32_t remote[] = {2};
    const int32_t local[] = {3};
    struct done_wait w;
    int rc = pull_wait(c, id, f.port, remote, local, 1, "fake:1", &w);
    fake_stop(&f);
    if (rc != status || !strstr(w.err, needle)) {
        fail_msg("pull: %d \"%s\", expected %d with \"%s\"", rc, w.err, status, needle);
    }
    done_fini(&w);
}

static void test_fake_producer(void **state)
{
    (void)state;
    set_tls(NULL);
    struct engine p, c;
    engine_must_start(&p, 20, NULL);
    engine_must_start(&c, 21, &(struct engine_opts){.no_listen = true, .timeout_ms = 1000});
    uint8_t *raw;
    struct kvx_agent_meta m;
    real_meta(&p, &raw, &m);
    char hash[KVX_HASH_HEX + 1];
    kvx_compat_hash(&test_layout, "test-model f16 abc123", 1, hash);
    size_t meta_len = 0, len = 0;
    uint8_t *meta, *reply;

    /* garbage and truncation */
    const uint8_t junk[] = {0x13, 0x37, 0xc1};
    pull_from_fake(&c, p.id, junk, sizeof(junk), -EINVAL, "not a msgpack map");
    meta = kvx_wire_encode_agent_meta(&m, &meta_len);
    reply = kvx_wire_encode_handshake(hash, meta, meta_len, &len);
    pull_from_fake(&c, p.id, reply, len / 2, -EINVAL, "truncated");
    pull_from_fake(&c, p.id, reply, 0, -EINVAL, "empty handshake reply");
    free(reply);
    /* the agent metadata bytes are not msgpack */
    reply = kvx_wire_encode_handshake(hash, junk, sizeof(junk), &len);
    pull_from_fake(&c, p.id, reply, len, -EINVAL, "agent metadata");
    free(reply);
    free(meta);

    /* a refusal */
    reply = kvx_wire_encode_refusal("no such rank", &len);
    pull_from_fake(&c, p.id, reply, len, -EINVAL, "refused by the producer: no such rank");
    free(reply);

    /* region count ≠ 2 * n_layers */
    m.n_regions = MAX_REGIONS - 1;
    meta = kvx_wire_encode_agent_meta(&m, &meta_len);
    reply = kvx_wire_encode_handshake(hash, meta, meta_len, &len);
    pull_from_fake(&c, p.id, reply, len, -EINVAL, "3 KV regions");
    free(reply);
    free(meta);
    m.n_regions = MAX_REGIONS;

    /* block_lens mismatch */
    m.block_lens[2] += 2;
    meta = kvx_wire_encode_agent_meta(&m, &meta_len);
    reply = kvx_wire_encode_handshake(hash, meta, meta_len, &len);
    pull_from_fake(&c, p.id, reply, len, -EINVAL, "block_lens mismatch: region 2");
    free(reply);
    free(meta);
    m.block_lens[2] -= 2;

    /* a "HND" that is not */
    snprintf(m.kv_cache_layout, sizeof(m.kv_cache_layout), "NHD");
    meta = kvx_wire_encode_agent_meta(&m, &meta_len);
    reply = kvx_wire_encode_handshake(hash, meta, meta_len, &len);
    pull_from_fake(&c, p.id, reply, len, -EINVAL, "kv_cache_layout \"NHD\"");
    free(reply);
    free(meta);
    snprintf(m.kv_cache_layout, sizeof(m.kv_cache_layout), "HND");

    /* the producer never answers */
    pull_from_fake(&c, p.id, NULL, 0, -ETIMEDOUT, "no answer on the side channel within 1000 ms");

    /* the real metadata through the fake works (and the pull reaches the real producer) */
    meta = kvx_wire_encode_agent_meta(&m, &meta_len);
    reply = kvx_wire_encode_handshake(hash, meta, meta_len, &len);
    pull_from_fake(&c, p.id, reply, len, 0, "");
    free(reply);
    free(meta);
    const int32_t remote[] = {2};
    const int32_t local[] = {3};
    check_pools(&c, &p, remote, local, 1);
    wait_notes(&p, 1);

    struct kvx_stats cs;
    kvx_get_stats(c.x, &cs);
    assert_int_equal(cs.handshakes, 1);
    assert_true(cs.bad_messages >= 4);
    kvx_agent_meta_release(&m);
    free(raw);
    engine_stop(&c);
    engine_stop(&p);
}

/* done callbacks that record order for the free test */
static void test_free_in_flight(void **state)
{
    (void)state;
    set_tls(NULL);
    struct engine p, c;
    engine_must_start(&p, 22, NULL);
    engine_must_start(&c, 23, &(struct engine_opts){.no_listen = true});
    struct fake f;
    fake_start(&f, NULL, 0); /* never answers: the handshake stays in progress */
    const int32_t remote[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    struct done_wait hang, big, queued;
    done_init(&hang);
    done_init(&big);
    done_init(&queued);
    assert_int_equal(
        kvx_pull(c.x, "silent", "127.0.0.1", f.port, remote, remote, 1, "h:1", on_done, &hang), 0);
    /* wait until the handshake request reached the fake */
    for (int i = 0; i < 200 && f.requests == 0; i++) {
        usleep(10000);
    }
    assert_int_equal(f.requests, 1);
    assert_int_equal(
        kvx_pull(c.x, p.id, "127.0.0.1", p.port, remote, remote, 15, "b:1", on_done, &big), 0);
    assert_int_equal(kvx_notify(c.x, p.id, "127.0.0.1", p.port, "q:1", on_done, &queued), 0);
    kvx_free(c.x);
    c.x = NULL;
    /* every done ran before kvx_free returned */
    assert_int_equal(hang.calls, 1);
    assert_int_equal(hang.status, -ECANCELED);
    assert_non_null(strstr(hang.err, "shutting down"));
    assert_int_equal(big.calls, 1);
    assert_int_equal(queued.calls, 1);
    /* those two may have finished before the free reached them; if not, they were cancelled */
    assert_true(big.status == 0 || big.status == -ECANCELED);
    assert_true(queued.status == 0 || queued.status == -ECANCELED);
    print_message("kvx_free with requests in flight: %d, %d, %d\n", hang.status, big.status,
                  queued.status);
    done_fini(&hang);
    done_fini(&big);
    done_fini(&queued);
    fake_stop(&f);
    engine_stop(&c);
    engine_stop(&p);
}

static void test_new_rejects_bad_config(void **state)
{
    (void)state;
    char err[256];
    uint8_t *base[MAX_REGIONS];
    size_t bytes[MAX_REGIONS];
    for (int r = 0; r < MAX_REGIONS; r++) {
        base[r] = (uint8_t *)err;
        bytes[r] = 100; /* not num_blocks * block_bytes */
    }
    struct kvx_config c = {
        .engine_id = "e", .layout = test_layout, .region_base = (void *const *)base};
    assert_null(kvx_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "region_base and region_bytes go together"));
    c.region_bytes = bytes;
    assert_null(kvx_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "region 0"));
    c.layout.dtype_bytes = 3;
    assert_null(kvx_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "bad layout"));
    c.layout = test_layout;
    c.tp_size = 2;
    assert_null(kvx_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "tp_size"));
    c.tp_size = 1;
    c.engine_id = "";
    assert_null(kvx_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "engine_id"));
    kvx_free(NULL);
}

/* KV pools in GPU memory: given pools only, no host-side extensions, and a UCX that can register
 * CUDA memory (Debian's cannot: the error says what to install). */
static void test_cuda_memory(void **state)
{
    (void)state;
    char err[512];
    const size_t block_bytes = (size_t)test_layout.n_kv_heads * (size_t)test_layout.block_size *
                               (size_t)test_layout.head_dim * (size_t)test_layout.dtype_bytes;
    const size_t pool = block_bytes * (size_t)test_layout.num_blocks;
    void *base[MAX_REGIONS];
    size_t bytes[MAX_REGIONS];
    for (int r = 0; r < 2 * test_layout.n_layers; r++) {
        base[r] = calloc(1, pool);
        assert_non_null(base[r]);
        bytes[r] = pool;
    }
    struct kvx_config c = {.engine_id = "gpu", .layout = test_layout, .memory = KVX_MEM_CUDA};
    assert_null(kvx_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "needs its pools given"));
    c.region_base = base;
    c.region_bytes = bytes;
    c.block_checksum = true;
    assert_null(kvx_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "cannot use block checksums"));
    c.block_checksum = false;
    c.wire_dtype = KVX_WIRE_INT8;
    assert_null(kvx_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "cannot use int8 wire compression"));
    c.wire_dtype = KVX_WIRE_NATIVE;
    c.memory = (enum kvx_memory)7;
    assert_null(kvx_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "unknown memory type"));
    /* host buffers claimed as CUDA memory: a UCX without CUDA says what is missing; one with
     * CUDA refuses to register them */
    c.memory = KVX_MEM_CUDA;
    c.device_id = 0;
    struct kvx *x = kvx_new(&c, err, sizeof(err));
    if (x) {
        kvx_free(x);
        fail_msg("host memory registered as CUDA memory");
    }
    if (!strstr(err, "cannot register CUDA memory") && !strstr(err, "registering region 0")) {
        fail_msg("unexpected error: %s", err);
    }
    print_message("    %s\n", err);
    for (int r = 0; r < 2 * test_layout.n_layers; r++) {
        free(base[r]);
    }
}

/* ---- Tandem extensions: block checksums and int8 wire compression ---- */

static void test_wire_blocks(void **state)
{
    (void)state;
    char err[256];
    int32_t ids[] = {3, 4, 15};
    struct kvx_blocks_request rq = {.seq = 77, .sums = true, .int8 = true, .n = 3, .blocks = ids};
    struct kvx_blocks_request back;
    size_t len = 0;
    uint8_t *req = kvx_wire_encode_blocks_request(&rq, &len);
    assert_non_null(req);
    assert_int_equal(kvx_wire_decode_blocks_request(req, len, TEST_BLOCKS, &back, err, sizeof(err)),
                     0);
    assert_int_equal(back.seq, 77);
    assert_true(back.sums && back.int8);
    assert_int_equal(back.n, 3);
    assert_int_equal(back.blocks[2], 15);
    kvx_blocks_request_release(&back);
    assert_null(back.blocks);
    /* every strict prefix fails cleanly: not ours (too short to tell) or malformed */
    for (size_t i = 0; i < len; i++) {
        int rc = kvx_wire_decode_blocks_request(req, i, TEST_BLOCKS, &back, err, sizeof(err));
        assert_true(rc == -ENOENT || rc == -EINVAL);
        assert_null(back.blocks);
    }
    /* ids out of range: 15 is not below num_blocks 15; 0 is the null block */
    assert_int_equal(kvx_wire_decode_blocks_request(req, len, 15, &back, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "blocks"));
    free(req);
    ids[0] = 0;
    req = kvx_wire_encode_blocks_request(&rq, &len);
    assert_int_equal(kvx_wire_decode_blocks_request(req, len, TEST_BLOCKS, &back, err, sizeof(err)),
                     -EINVAL);
    free(req);
    /* an oversize list */
    int32_t *many = malloc(sizeof(*many) * (KVX_EXT_BLOCKS + 1));
    for (int i = 0; i <= KVX_EXT_BLOCKS; i++) {
        many[i] = 1;
    }
    rq.blocks = many;
    rq.n = KVX_EXT_BLOCKS + 1;
    req = kvx_wire_encode_blocks_request(&rq, &len);
    assert_int_equal(kvx_wire_decode_blocks_request(req, len, TEST_BLOCKS, &back, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "block ids"));
    free(req);
    free(many);
    /* the handshake request is not ours; other requests are checked by the old decoder */
    req = kvx_wire_encode_request(0, &len);
    assert_int_equal(kvx_wire_decode_blocks_request(req, len, TEST_BLOCKS, &back, err, sizeof(err)),
                     -ENOENT);
    free(req);
    /* wrong types, wrong item counts, unknown dtype, a missing key, trailing bytes */
    const uint8_t two_items[] = {0x92, 0xad, 't', 'a', 'n', 'd', 'e', 'm',
                                 '_',  'b',  'l', 'o', 'c', 'k', 's', 0x00};
    assert_int_equal(kvx_wire_decode_blocks_request(two_items, sizeof(two_items), TEST_BLOCKS,
                                                    &back, err, sizeof(err)),
                     -EINVAL);
    const uint8_t seq_str[] = {0x93, 0xad, 't', 'a',  'n',  'd',  'e', 'm', '_', 'b',  'l', 'o',
                               'c',  'k',  's', 0x00, 0x81, 0xa3, 's', 'e', 'q', 0xa1, 'x'};
    assert_int_equal(kvx_wire_decode_blocks_request(seq_str, sizeof(seq_str), TEST_BLOCKS, &back,
                                                    err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "seq"));
    const uint8_t no_blocks[] = {0x93, 0xad, 't', 'a', 'n',  'd',  'e',  'm', '_', 'b', 'l',
                                 'o',  'c',  'k', 's', 0x00, 0x81, 0xa3, 's', 'e', 'q', 0x01};
    assert_int_equal(kvx_wire_decode_blocks_request(no_blocks, sizeof(no_blocks), TEST_BLOCKS,
                                                    &back, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "lacks \"blocks\""));
    const uint8_t bad_dtype[] = {
        0x93, 0xad, 't', 'a', 'n', 'd',  'e',  'm', '_', 'b', 'l',  'o', 'c', 'k',  's',  0x00,
        0x83, 0xa3, 's', 'e', 'q', 0x01, 0xa6, 'b', 'l', 'o', 'c',  'k', 's', 0x91, 0x02, 0xaa,
        'w',  'i',  'r', 'e', '_', 'd',  't',  'y', 'p', 'e', 0xa4, 'b', 'f', '1',  '6'};
    assert_int_equal(kvx_wire_decode_blocks_request(bad_dtype, sizeof(bad_dtype), TEST_BLOCKS,
                                                    &back, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "bf16"));
    rq.blocks = ids;
    rq.n = 1;
    ids[0] = 1;
    req = kvx_wire_encode_blocks_request(&rq, &len);
    uint8_t *trailing = malloc(len + 1);
    memcpy(trailing, req, len);
    trailing[len] = 0xc0;
    assert_int_equal(
        kvx_wire_decode_blocks_request(trailing, len + 1, TEST_BLOCKS, &back, err, sizeof(err)),
        -EINVAL);
    assert_non_null(strstr(err, "trailing"));
    free(trailing);
    free(req);
    const uint8_t huge[] = {0x93, 0xad, 't', 'a', 'n',  'd',  'e',  'm',  '_', 'b',
                            'l',  'o',  'c', 'k', 's',  0x00, 0x81, 0xa6, 'b', 'l',
                            'o',  'c',  'k', 's', 0xdd, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(
        kvx_wire_decode_blocks_request(huge, sizeof(huge), TEST_BLOCKS, &back, err, sizeof(err)),
        -EINVAL);

    /* replies */
    uint8_t sums[16] = {1, 2, 3}, rkey[5] = {9, 9, 9, 9, 9};
    struct kvx_blocks_reply rp = {.has_seq = true,
                                  .seq = 5,
                                  .sums = sums,
                                  .sums_len = 16,
                                  .has_staging = true,
                                  .staging_id = 0x101,
                                  .staging_addr = 0x7f0000001000ull,
                                  .staging_len = 4096,
                                  .staging_rkey = rkey,
                                  .staging_rkey_len = 5};
    struct kvx_blocks_reply rb;
    uint8_t *rep = kvx_wire_encode_blocks_reply(&rp, &len);
    assert_int_equal(kvx_wire_decode_blocks_reply(rep, len, &rb, err, sizeof(err)), 0);
    assert_true(rb.has_seq && rb.seq == 5 && !rb.foreign && rb.has_staging);
    assert_int_equal(rb.sums_len, 16);
    assert_memory_equal(rb.sums, sums, 16);
    assert_int_equal(rb.staging_id, 0x101);
    assert_int_equal(rb.staging_len, 4096);
    assert_int_equal(rb.staging_rkey_len, 5);
    for (size_t i = 0; i < len; i++) {
        assert_int_equal(kvx_wire_decode_blocks_reply(rep, i, &rb, err, sizeof(err)), -EINVAL);
    }
    free(rep);
    /* a refusal keeps its seq */
    snprintf(rp.error, sizeof(rp.error), "busy");
    rep = kvx_wire_encode_blocks_reply(&rp, &len);
    assert_int_equal(kvx_wire_decode_blocks_reply(rep, len, &rb, err, sizeof(err)), 0);
    assert_string_equal(rb.error, "busy");
    assert_true(rb.has_seq && rb.seq == 5 && !rb.has_staging && !rb.sums);
    free(rep);
    /* a handshake reply (what vLLM answers to anything) is foreign; an old refusal has no seq */
    char hash[KVX_HASH_HEX + 1];
    kvx_compat_hash(&test_layout, "m", 1, hash);
    rep = kvx_wire_encode_handshake(hash, "xyz", 3, &len);
    assert_int_equal(kvx_wire_decode_blocks_reply(rep, len, &rb, err, sizeof(err)), 0);
    assert_true(rb.foreign && !rb.has_seq);
    free(rep);
    rep = kvx_wire_encode_refusal("request must be the array", &len);
    assert_int_equal(kvx_wire_decode_blocks_reply(rep, len, &rb, err, sizeof(err)), 0);
    assert_true(!rb.has_seq && rb.error[0]);
    free(rep);
    /* sums not a multiple of 8; half the staging fields; staging past 2^64; not a map */
    const uint8_t odd_sums[] = {0x81, 0xa4, 's', 'u', 'm', 's', 0xc4, 0x03, 1, 2, 3};
    assert_int_equal(
        kvx_wire_decode_blocks_reply(odd_sums, sizeof(odd_sums), &rb, err, sizeof(err)), -EINVAL);
    const uint8_t half[] = {0x81, 0xaa, 's', 't', 'a', 'g', 'i', 'n', 'g', '_', 'i', 'd', 0x01};
    assert_int_equal(kvx_wire_decode_blocks_reply(half, sizeof(half), &rb, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "go together"));
    rp.error[0] = '\0';
    rp.staging_addr = UINT64_MAX - 10;
    rep = kvx_wire_encode_blocks_reply(&rp, &len);
    assert_int_equal(kvx_wire_decode_blocks_reply(rep, len, &rb, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "address space"));
    free(rep);
    const uint8_t dup[] = {0x82, 0xa3, 's', 'e', 'q', 0x01, 0xa3, 's', 'e', 'q', 0x02};
    assert_int_equal(kvx_wire_decode_blocks_reply(dup, sizeof(dup), &rb, err, sizeof(err)),
                     -EINVAL);
    assert_int_equal(kvx_wire_decode_blocks_reply("\x91\x01", 2, &rb, err, sizeof(err)), -EINVAL);
}

static void test_hash64(void **state)
{
    (void)state;
    /* XXH64's published values (seed 0) */
    assert_true(kvx_hash64("", 0) == 0xEF46DB3751D8E999ull);
    assert_true(kvx_hash64("a", 1) == 0xD24EC4F1A98C6E5Bull);
    assert_true(kvx_hash64("abc", 3) == 0x44BC2CF5AD770999ull);
    /* every byte of a block matters, in every position of the 32-byte stripes and the tail */
    uint8_t buf[203];
    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (uint8_t)(i * 7);
    }
    uint64_t h = kvx_hash64(buf, sizeof(buf));
    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] ^= 0x01;
        assert_true(kvx_hash64(buf, sizeof(buf)) != h);
        buf[i] ^= 0x01;
    }
    assert_true(kvx_hash64(buf, sizeof(buf)) == h);
}

/* Fills every region of e with F16 values of varied magnitude (rows of 0, tiny and large rows). */
static void fill_f16(struct engine *e)
{
    size_t per_region = e->bytes[0] / 2;
    int d = e->layout.head_dim;
    for (int r = 0; r < MAX_REGIONS; r++) {
        uint16_t *v = (uint16_t *)(void *)e->base[r];
        for (size_t i = 0; i < per_region; i++) {
            size_t row = i / (size_t)d;
            float mag = row % 7 == 0 ? 0.0f : row % 5 == 0 ? 1e-3f : row % 3 == 0 ? 300.0f : 2.0f;
            v[i] = kc_f32_to_f16(mag * sinf((float)i * 0.37f + (float)(r * 11 + e->tag)));
        }
    }
}

/* |got - want| within the int8 error bound of want's row: half a step (amax / 127 / 2) plus F16
 * rounding of the result. */
static void check_int8_block(const struct kvx_layout *l, const uint16_t *want, const uint16_t *got,
                             const char *what)
{
    int d = l->head_dim, rows = l->n_kv_heads * l->block_size;
    for (int row = 0; row < rows; row++) {
        float amax = 0.0f;
        for (int j = 0; j < d; j++) {
            amax = fmaxf(amax, fabsf(kc_f16_to_f32(want[row * d + j])));
        }
        for (int j = 0; j < d; j++) {
            float w = kc_f16_to_f32(want[row * d + j]), g = kc_f16_to_f32(got[row * d + j]);
            float bound = amax / 127.0f * 0.5f * 1.0001f + fabsf(w) / 1024.0f + 1e-7f;
            if (!(fabsf(w - g) <= bound)) {
                fail_msg("%s row %d col %d: %g came back as %g (bound %g)", what, row, j, w, g,
                         bound);
            }
        }
    }
}

static void test_int8_pack(void **state)
{
    (void)state;
    const struct kvx_layout l = {
        .n_kv_heads = 2, .head_dim = 16, .block_size = 4, .dtype_bytes = 2};
    enum { N = 2 * 4 * 16 };
    uint16_t x[N], back[N];
    uint8_t packed[2 * 4 * (16 + 4)];
    assert_int_equal(kvx_int8_block_bytes(&l), sizeof(packed));
    for (int i = 0; i < N; i++) {
        float mag = i / 16 == 1 ? 0.0f : i / 16 == 2 ? 65504.0f : i / 16 == 3 ? 6e-5f : 3.0f;
        x[i] = kc_f32_to_f16(mag * cosf((float)i));
    }
    x[16 * 4] = 0x7c00;     /* +Inf in a row: clamps, and does not widen the row's scale */
    x[16 * 4 + 1] = 0x7e00; /* NaN: 0 */
    kvx_int8_pack(&l, x, packed);
    kvx_int8_unpack(&l, packed, back);
    assert_int_equal(back[16 * 4 + 1], 0);
    assert_true(kc_f16_to_f32(back[16 * 4]) > 0.0f);
    x[16 * 4] = back[16 * 4];
    x[16 * 4 + 1] = 0;
    check_int8_block(&l, x, back, "pack");
    for (int i = 16; i < 32; i++) {
        assert_int_equal(back[i], 0); /* an all-zero row stays zero */
    }
    /* a head_dim that is not a multiple of 8 takes the portable path */
    const struct kvx_layout odd = {
        .n_kv_heads = 1, .head_dim = 5, .block_size = 3, .dtype_bytes = 2};
    uint16_t y[15], yb[15];
    uint8_t py[3 * (5 + 4)];
    assert_int_equal(kvx_int8_block_bytes(&odd), sizeof(py));
    for (int i = 0; i < 15; i++) {
        y[i] = kc_f32_to_f16((float)(i - 7) * 0.25f);
    }
    kvx_int8_pack(&odd, y, py);
    kvx_int8_unpack(&odd, py, yb);
    check_int8_block(&odd, y, yb, "odd head_dim");
}

/* Pulls with block checksums: clean, one corrupted round (retried), every round corrupted (the
 * pull fails naming the block). */
static void checksum_pulls(const char *tls, bool int8)
{
    set_tls(tls);
    struct engine p, c;
    engine_must_start(&p, 40, NULL);
    engine_must_start(&c, 41,
                      &(struct engine_opts){.no_listen = true, .checksum = true, .int8 = int8});
    set_tls(NULL);
    if (int8) {
        fill_f16(&p);
    }
    const int32_t remote[] = {2, 3, 4, 9};
    const int32_t local[] = {5, 6, 7, 1};
    struct done_wait w;
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            kvx_debug_corrupt(c.x, 1);
        }
        int rc = pull_wait(&c, p.id, p.port, remote, local, 4, "sum:1", &w);
        if (rc != 0) {
            fail_msg("checksummed pull (round %d) failed: %s", round, w.err);
        }
        assert_int_equal(w.bytes, 4 * c.block_bytes * MAX_REGIONS);
        done_fini(&w);
        if (!int8) {
            check_pools(&c, &p, remote, local, 4);
        }
        wait_notes(&p, round + 1);
    }
    struct kvx_stats cs, ps;
    kvx_get_stats(c.x, &cs);
    assert_int_equal(cs.checksum_retries, 1);
    assert_int_equal(cs.checksum_failures, 0);
    assert_int_equal(cs.pulls, 2);
    kvx_debug_corrupt(c.x, -1);
    int rc = pull_wait(&c, p.id, p.port, remote, local, 4, "sum-bad:1", &w);
    assert_int_equal(rc, -EIO);
    if (!strstr(w.err, "checksum mismatch after a retry") || !strstr(w.err, "remote block 2")) {
        fail_msg("unexpected error: %s", w.err);
    }
    done_fini(&w);
    kvx_debug_corrupt(c.x, 0);
    kvx_get_stats(c.x, &cs);
    kvx_get_stats(p.x, &ps);
    assert_int_equal(cs.checksum_retries, 2);
    assert_int_equal(cs.checksum_failures, 1);
    assert_int_equal(cs.pull_failures, 1);
    assert_int_equal(ps.blocks_requests_served, 3);
    assert_int_equal(ps.bad_messages, 0);
    engine_stop(&c);
    engine_stop(&p);
}

static void test_checksum_pull(void **state)
{
    (void)state;
    checksum_pulls(NULL, false);
    checksum_pulls("sm,self", false);
}

static void test_checksum_int8_pull(void **state)
{
    (void)state;
    checksum_pulls("sm,self", true);
}

/* int8 pulls: values within the quantization bound, blocks not pulled untouched, the producer's
 * staging released by the notification (or the header alone without one). */
static void int8_pulls(const char *tls, bool ucx_alloc)
{
    set_tls(tls);
    struct engine p, c;
    engine_must_start(&p, 42, &(struct engine_opts){.ucx_alloc = ucx_alloc});
    engine_must_start(
        &c, 43, &(struct engine_opts){.no_listen = true, .int8 = true, .ucx_alloc = ucx_alloc});
    set_tls(NULL);
    fill_f16(&p);
    const int32_t remote[] = {3, 4, 5, 9, 15};
    const int32_t local[] = {1, 2, 3, 7, 14};
    struct done_wait w;
    for (int round = 0; round < 2; round++) {
        int rc = pull_wait(&c, p.id, p.port, remote, local, 5, round ? NULL : "int8:1", &w);
        if (rc != 0) {
            fail_msg("int8 pull over %s failed: %s", tls ? tls : "default transports", w.err);
        }
        assert_int_equal(w.bytes, 5 * c.block_bytes * MAX_REGIONS);
        done_fini(&w);
    }
    wait_notes(&p, 1);
    assert_string_equal(p.last_note, "int8:1");
    for (int r = 0; r < MAX_REGIONS; r++) {
        for (int32_t b = 0; b < c.layout.num_blocks; b++) {
            int src = -1;
            for (int i = 0; i < 5; i++) {
                src = local[i] == b ? remote[i] : src;
            }
            const uint8_t *got = c.base[r] + (size_t)b * c.block_bytes;
            if (src < 0) {
                for (size_t o = 0; o < c.block_bytes; o++) {
                    assert_int_equal(got[o], pattern(c.tag, r, (size_t)b * c.block_bytes + o));
                }
                continue;
            }
            char what[64];
            snprintf(what, sizeof(what), "region %d block %d", r, b);
            check_int8_block(
                &c.layout,
                (const uint16_t *)(const void *)(p.base[r] + (size_t)src * c.block_bytes),
                (const uint16_t *)(const void *)got, what);
        }
    }
    /* the header-only release of the second pull arrives after its done: wait for it */
    struct kvx_stats ps, cs;
    for (int i = 0; i < 200; i++) {
        kvx_get_stats(p.x, &ps);
        if (ps.staging_in_use == 0) {
            break;
        }
        usleep(10000);
    }
    assert_int_equal(ps.staging_in_use, 0);
    assert_int_equal(ps.blocks_requests_served, 2);
    assert_int_equal(ps.notifications_received, 1);
    kvx_get_stats(c.x, &cs);
    /* (head_dim + 4) / (2 * head_dim) of the F16 bytes moved */
    uint64_t packed = 2 * 5 * MAX_REGIONS * kvx_int8_block_bytes(&c.layout);
    assert_int_equal(cs.wire_bytes, packed);
    assert_int_equal(cs.bytes, 2 * 5 * c.block_bytes * MAX_REGIONS);
    assert_int_equal(cs.notifications_sent, 1);
    engine_stop(&c);
    engine_stop(&p);
}

static void test_int8_pull(void **state)
{
    (void)state;
    int8_pulls(NULL, false);
    int8_pulls("sm,self", true);
    int8_pulls("tcp", false);
}

/* A producer without the extension (vLLM answers its handshake to anything; an older kvx refuses
 * without a seq) or one that cannot serve it (F32), and an F32 consumer asking for int8. */
static void test_ext_unsupported(void **state)
{
    (void)state;
    set_tls(NULL);
    char err[512];
    struct engine p, c, c8, p32;
    assert_int_equal(
        engine_start(
            &c8, 44,
            &(struct engine_opts){.no_listen = true, .int8 = true, .dtype_bytes = 4, .head_dim = 4},
            err, sizeof(err)),
        -1);
    assert_non_null(strstr(err, "int8 wire compression needs an F16 KV cache"));
    for (int r = 0; r < MAX_REGIONS; r++) {
        free(c8.base[r]);
    }
    pthread_mutex_destroy(&c8.mu);
    pthread_cond_destroy(&c8.cv);

    engine_must_start(&p, 45, NULL);
    engine_must_start(
        &c, 46,
        &(struct engine_opts){
            .no_listen = true, .checksum = true, .timeout_ms = 1000, .transfer_timeout_ms = 1500});
    uint8_t *raw;
    struct kvx_agent_meta m;
    real_meta(&p, &raw, &m);
    char hash[KVX_HASH_HEX + 1];
    kvx_compat_hash(&test_layout, "test-model f16 abc123", 1, hash);
    size_t meta_len = 0, len = 0, ref_len = 0;
    uint8_t *meta = kvx_wire_encode_agent_meta(&m, &meta_len);
    uint8_t *reply = kvx_wire_encode_handshake(hash, meta, meta_len, &len);
    /* vLLM: the handshake again */
    pull_from_fake(&c, p.id, reply, len, -EINVAL, "does not support Tandem's block checksums");
    /* an older kvx: a refusal without seq */
    uint8_t *refusal = kvx_wire_encode_refusal("request must be the array", &ref_len);
    struct fake f;
    fake_start(&f, reply, len);
    f.later = refusal;
    f.later_len = ref_len;
    const int32_t remote[] = {2};
    const int32_t local[] = {3};
    struct done_wait w;
    int rc = pull_wait(&c, p.id, f.port, remote, local, 1, "fake:1", &w);
    fake_stop(&f);
    if (rc != -EINVAL || !strstr(w.err, "without Tandem's extensions")) {
        fail_msg("pull: %d \"%s\"", rc, w.err);
    }
    done_fini(&w);
    /* no answer at all */
    fake_start(&f, reply, len);
    f.later = NULL;
    f.silent_later = true;
    rc = pull_wait(&c, p.id, f.port, remote, local, 1, "fake:1", &w);
    fake_stop(&f);
    if (rc != -ETIMEDOUT || !strstr(w.err, "did not answer")) {
        fail_msg("pull: %d \"%s\"", rc, w.err);
    }
    done_fini(&w);
    free(refusal);
    free(reply);
    free(meta);
    kvx_agent_meta_release(&m);
    free(raw);
    engine_stop(&c);
    engine_stop(&p);

    /* an F32 producer whose blocks have the F16 consumer's size refuses int8 */
    engine_must_start(&p32, 47, &(struct engine_opts){.dtype_bytes = 4, .head_dim = 4});
    engine_must_start(&c8, 48, &(struct engine_opts){.no_listen = true, .int8 = true, .lax = true});
    rc = pull_wait(&c8, p32.id, p32.port, remote, local, 1, "f32:1", &w);
    if (rc != -EINVAL || !strstr(w.err, "refused int8 wire compression") ||
        !strstr(w.err, "needs an F16 KV cache")) {
        fail_msg("pull: %d \"%s\"", rc, w.err);
    }
    done_fini(&w);
    struct kvx_stats ps;
    kvx_get_stats(p32.x, &ps);
    assert_int_equal(ps.staging_in_use, 0);
    engine_stop(&c8);
    engine_stop(&p32);
}

int main(void)
{
    log_init("test_kvxfer", LOGL_WARN, LOG_FORMAT_TEXT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_request),
        cmocka_unit_test(test_wire_agent_meta),
        cmocka_unit_test(test_compat_hash),
        cmocka_unit_test(test_wire_python_interop),
        cmocka_unit_test(test_new_rejects_bad_config),
        cmocka_unit_test(test_cuda_memory),
        cmocka_unit_test(test_pull_default_transports),
        cmocka_unit_test(test_pull_shm),
        cmocka_unit_test(test_pull_tcp),
        cmocka_unit_test(test_pull_ucx_allocated),
        cmocka_unit_test(test_notify_only_and_concurrent),
        cmocka_unit_test(test_compat_mismatch),
        cmocka_unit_test(test_engine_id_checks),
        cmocka_unit_test(test_block_id_checks),
        cmocka_unit_test(test_concurrent_handshakes),
        cmocka_unit_test(test_router_garbage),
        cmocka_unit_test(test_fake_producer),
        cmocka_unit_test(test_taken_port),
        cmocka_unit_test(test_producer_gone),
        cmocka_unit_test(test_producer_gone_shm),
        cmocka_unit_test(test_restart_same_id),
        cmocka_unit_test(test_free_in_flight),
        cmocka_unit_test(test_wire_blocks),
        cmocka_unit_test(test_hash64),
        cmocka_unit_test(test_int8_pack),
        cmocka_unit_test(test_checksum_pull),
        cmocka_unit_test(test_checksum_int8_pull),
        cmocka_unit_test(test_int8_pull),
        cmocka_unit_test(test_ext_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
