/*
 * kvx: KV blocks between engines over UCX, with vLLM NixlConnector's side channel (kvxfer.h).
 *
 * The file has three parts: a bounded msgpack reader and the wire codecs (pure functions), the
 * kvx thread (UCX worker, the side-channel ROUTER, handshakes, transfers), and the public API,
 * which only validates, copies and queues. A request (struct kvx_xfer) goes queue → waiting on
 * its peer's handshake → active (UCX operations in flight) → ready (all completed) → next stage or
 * done. A remote engine (struct kvx_peer) goes handshaking → ready, and lives while it is cached
 * or a request holds it.
 */
#include "agent/kvxfer.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <msgpack.h>
#include <openssl/evp.h>
#include <ucp/api/ucp.h>
#include <zmq.h>

#include "kernels/cpu/kc_convert.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/list.h"
#include "lib/log.h"

/* ---- msgpack reading --------------------------------------------------------------------------
 * A bounded pull reader: msgpack-c's unpacker allocates what an array or map header claims
 * before it knows the input holds it (a 5-byte input can ask for gigabytes), so network bytes
 * never reach it. Every count here is checked against the bytes left. */

enum mp_kind {
    MP_NIL,
    MP_BOOL,
    MP_UINT,
    MP_INT,
    MP_FLOAT,
    MP_STR,
    MP_BIN,
    MP_ARRAY,
    MP_MAP,
    MP_EXT
};

static const char *const mp_kind_name[] = {
    "nil",   "bool", "unsigned integer", "negative integer", "float", "string", "binary",
    "array", "map",  "extension"};

struct mp_item {
    enum mp_kind kind;
    uint64_t u;          /* MP_UINT, MP_BOOL */
    int64_t i;           /* MP_INT (always negative: non-negative integers are MP_UINT) */
    uint32_t n;          /* bytes of MP_STR/MP_BIN/MP_EXT, elements of MP_ARRAY, pairs of MP_MAP */
    const uint8_t *data; /* payload of MP_STR/MP_BIN/MP_EXT */
};

struct mp {
    const uint8_t *p;
    size_t len;
    size_t off;
    char why[96]; /* why the last read failed */
};

#define MP_MAX_DEPTH 32

static void mp_init(struct mp *m, const void *buf, size_t len)
{
    m->p = buf;
    m->len = len;
    m->off = 0;
    m->why[0] = '\0';
}

/* Records why a read failed; false, for `return mp_fail(m, ...)`. A macro, so that the static
 * analyzer sees the false (it does not model variadic functions). */
#define mp_fail(m, ...) (snprintf((m)->why, sizeof((m)->why), __VA_ARGS__), false)

static bool mp_take(struct mp *m, size_t n, const uint8_t **out)
{
    if (m->len - m->off < n) {
        return mp_fail(m, "truncated at byte %zu", m->len);
    }
    *out = m->p + m->off;
    m->off += n;
    return true;
}

/* A big-endian unsigned integer of n (1, 2, 4 or 8) bytes. */
static bool mp_be(struct mp *m, size_t n, uint64_t *v)
{
    const uint8_t *b = NULL;
    if (!mp_take(m, n, &b)) {
        return false;
    }
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        *v = (*v << 8) | b[i];
    }
    return true;
}

static bool mp_payload(struct mp *m, struct mp_item *it, size_t lenbytes, bool ext)
{
    uint64_t n;
    const uint8_t *type = NULL;
    if (!mp_be(m, lenbytes, &n) || (ext && !mp_take(m, 1, &type))) {
        return false;
    }
    it->n = (uint32_t)n;
    return mp_take(m, it->n, &it->data);
}

static bool mp_count(struct mp *m, struct mp_item *it, size_t lenbytes, enum mp_kind kind)
{
    uint64_t n = it->n;
    if (lenbytes && !mp_be(m, lenbytes, &n)) {
        return false;
    }
    it->kind = kind;
    it->n = (uint32_t)n;
    /* every element takes at least one byte */
    uint64_t need = kind == MP_MAP ? 2 * n : n;
    if (need > m->len - m->off) {
        return mp_fail(m, "%s of %" PRIu64 " elements in %zu bytes", mp_kind_name[kind], n,
                       m->len - m->off);
    }
    return true;
}

static bool mp_signed(struct mp *m, struct mp_item *it, size_t bytes)
{
    uint64_t v;
    if (!mp_be(m, bytes, &v)) {
        return false;
    }
    int64_t s = bytes == 1   ? (int8_t)v
                : bytes == 2 ? (int16_t)v
                : bytes == 4 ? (int32_t)v
                             : (int64_t)v;
    if (s >= 0) {
        it->kind = MP_UINT;
        it->u = (uint64_t)s;
    } else {
        it->kind = MP_INT;
        it->i = s;
    }
    return true;
}

/* Reads the next item's header, and the bytes of a string, binary or extension; the elements of
 * an array or map follow it. */
static bool mp_next(struct mp *m, struct mp_item *it)
{
    const uint8_t *b = NULL;
    memset(it, 0, sizeof(*it));
    if (!mp_take(m, 1, &b)) {
        return false;
    }
    uint8_t c = b[0];
    if (c <= 0x7f) {
        it->kind = MP_UINT;
        it->u = c;
        return true;
    }
    if (c >= 0xe0) {
        it->kind = MP_INT;
        it->i = (int64_t)c - 256; /* negative fixint */
        return true;
    }
    if ((c & 0xf0) == 0x80 || (c & 0xf0) == 0x90) {
        it->n = c & 0x0f;
        return mp_count(m, it, 0, (c & 0xf0) == 0x80 ? MP_MAP : MP_ARRAY);
    }
    if ((c & 0xe0) == 0xa0) {
        it->kind = MP_STR;
        it->n = c & 0x1f;
        return mp_take(m, it->n, &it->data);
    }
    switch (c) {
    case 0xc0:
        it->kind = MP_NIL;
        return true;
    case 0xc2:
    case 0xc3:
        it->kind = MP_BOOL;
        it->u = c == 0xc3;
        return true;
    case 0xc4:
    case 0xc5:
    case 0xc6:
        it->kind = MP_BIN;
        return mp_payload(m, it, (size_t)1 << (c - 0xc4), false);
    case 0xc7:
    case 0xc8:
    case 0xc9:
        it->kind = MP_EXT;
        return mp_payload(m, it, (size_t)1 << (c - 0xc7), true);
    case 0xca:
    case 0xcb:
        it->kind = MP_FLOAT;
        return mp_take(m, c == 0xca ? 4 : 8, &b);
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
        it->kind = MP_UINT;
        return mp_be(m, (size_t)1 << (c - 0xcc), &it->u);
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3:
        return mp_signed(m, it, (size_t)1 << (c - 0xd0));
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
        it->kind = MP_EXT;
        it->n = 1u << (c - 0xd4);
        return mp_take(m, 1, &b) && mp_take(m, it->n, &it->data);
    case 0xd9:
    case 0xda:
    case 0xdb:
        it->kind = MP_STR;
        return mp_payload(m, it, (size_t)1 << (c - 0xd9), false);
    case 0xdc:
    case 0xdd:
        return mp_count(m, it, c == 0xdc ? 2 : 4, MP_ARRAY);
    case 0xde:
    case 0xdf:
        return mp_count(m, it, c == 0xde ? 2 : 4, MP_MAP);
    default:
        return mp_fail(m, "invalid byte 0x%02x at %zu", c, m->off - 1);
    }
}

/* Skips one item with everything in it. Work is linear in the bytes skipped. */
static bool mp_skip(struct mp *m, int depth)
{
    struct mp_item it;
    if (depth > MP_MAX_DEPTH) {
        return mp_fail(m, "nested deeper than %d", MP_MAX_DEPTH);
    }
    if (!mp_next(m, &it)) {
        return false;
    }
    uint64_t children = it.kind == MP_ARRAY ? it.n : it.kind == MP_MAP ? 2 * (uint64_t)it.n : 0;
    for (uint64_t i = 0; i < children; i++) {
        if (!mp_skip(m, depth + 1)) {
            return false;
        }
    }
    return true;
}

static bool mp_expect(struct mp *m, enum mp_kind kind, struct mp_item *it)
{
    if (!mp_next(m, it)) {
        return false;
    }
    if (it->kind != kind) {
        return mp_fail(m, "expected %s, got %s", mp_kind_name[kind], mp_kind_name[it->kind]);
    }
    return true;
}

static bool mp_uint(struct mp *m, uint64_t min, uint64_t max, uint64_t *v)
{
    struct mp_item it;
    if (!mp_expect(m, MP_UINT, &it)) {
        return false;
    }
    if (it.u < min || it.u > max) {
        return mp_fail(m, "%" PRIu64 " outside [%" PRIu64 ", %" PRIu64 "]", it.u, min, max);
    }
    *v = it.u;
    return true;
}

static bool mp_int(struct mp *m, int64_t *v)
{
    struct mp_item it;
    if (!mp_next(m, &it)) {
        return false;
    }
    if (it.kind == MP_INT) {
        *v = it.i;
        return true;
    }
    if (it.kind == MP_UINT && it.u <= INT64_MAX) {
        *v = (int64_t)it.u;
        return true;
    }
    return mp_fail(m, "expected an integer, got %s", mp_kind_name[it.kind]);
}

/* A string of printable ASCII (engine ids, layout names, hashes) copied into out (cap bytes,
 * NUL included). */
static bool mp_text(struct mp *m, char *out, size_t cap)
{
    struct mp_item it;
    if (!mp_expect(m, MP_STR, &it)) {
        return false;
    }
    if (it.n >= cap) {
        return mp_fail(m, "string of %u bytes, at most %zu allowed", it.n, cap - 1);
    }
    for (uint32_t i = 0; i < it.n; i++) {
        if (it.data[i] < 0x20 || it.data[i] > 0x7e) {
            return mp_fail(m, "string has a non-printable byte 0x%02x", it.data[i]);
        }
    }
    memcpy(out, it.data, it.n);
    out[it.n] = '\0';
    return true;
}

/* A binary of 1..max bytes. */
static bool mp_blob(struct mp *m, size_t max, const uint8_t **data, size_t *len)
{
    struct mp_item it;
    if (!mp_expect(m, MP_BIN, &it)) {
        return false;
    }
    if (it.n == 0 || it.n > max) {
        return mp_fail(m, "binary of %u bytes, 1 to %zu allowed", it.n, max);
    }
    *data = it.data;
    *len = it.n;
    return true;
}

/* An array of 1..KVX_MAX_REGIONS unsigned integers of at least min, into *out (malloc'd). */
static bool mp_uint_array(struct mp *m, uint64_t min, uint64_t **out, int32_t *n)
{
    struct mp_item it;
    if (!mp_expect(m, MP_ARRAY, &it)) {
        return false;
    }
    if (it.n == 0 || it.n > KVX_MAX_REGIONS) {
        return mp_fail(m, "%u regions, 1 to %d allowed", it.n, KVX_MAX_REGIONS);
    }
    uint64_t *v = malloc(sizeof(*v) * it.n);
    if (!v) {
        return mp_fail(m, "out of memory");
    }
    for (uint32_t i = 0; i < it.n; i++) {
        if (!mp_uint(m, min, UINT64_MAX, &v[i])) {
            free(v);
            return false;
        }
    }
    *out = v;
    *n = (int32_t)it.n;
    return true;
}

/* Reads a map key (a string) and finds it in keys (n names); *idx = -1 for an unknown key. Refuses
 * a key seen before (bit idx of *seen). */
static bool mp_key(struct mp *m, const char *const *keys, int n, unsigned *seen, int *idx)
{
    struct mp_item it;
    if (!mp_expect(m, MP_STR, &it)) {
        return false;
    }
    *idx = -1;
    for (int k = 0; k < n; k++) {
        if (strlen(keys[k]) == it.n && memcmp(keys[k], it.data, it.n) == 0) {
            if (*seen & (1u << k)) {
                return mp_fail(m, "duplicate key \"%s\"", keys[k]);
            }
            *seen |= 1u << k;
            *idx = k;
            break;
        }
    }
    return true;
}

/* ---- Wire codecs ----------------------------------------------------------------------------- */

void kvx_compat_hash(const struct kvx_layout *l, const char *model, int tp_size,
                     char out[KVX_HASH_HEX + 1])
{
    char head[256];
    int n =
        snprintf(head, sizeof(head),
                 "tandem-kvx-v1\ndtype_bytes=%d\nn_kv_heads=%d\nhead_dim=%d\nn_layers=%d\n"
                 "block_size=%d\ntp_size=%d\nmodel=",
                 l->dtype_bytes, l->n_kv_heads, l->head_dim, l->n_layers, l->block_size, tp_size);
    TANDEM_ASSERT(n > 0 && (size_t)n < sizeof(head));
    model = model ? model : "";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    TANDEM_ASSERT(ctx != NULL);
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && EVP_DigestUpdate(ctx, head, (size_t)n) &&
             EVP_DigestUpdate(ctx, model, strlen(model)) && EVP_DigestFinal_ex(ctx, md, &md_len);
    EVP_MD_CTX_free(ctx);
    TANDEM_ASSERT(ok && md_len * 2 == KVX_HASH_HEX);
    for (unsigned int i = 0; i < md_len; i++) {
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    }
}

/* A short printable rendering of untrusted bytes for messages. */
static void printable(const uint8_t *p, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        if (p[i] >= 0x20 && p[i] <= 0x7e && p[i] != '\\') {
            out[o++] = (char)p[i];
        } else {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", p[i]);
        }
    }
    out[o] = '\0';
}

int kvx_wire_decode_request(const void *buf, size_t len, int64_t *tp_rank, char *err, size_t errlen)
{
    static const char tag[] = KVX_GET_META_MSG;
    if (len == sizeof(tag) - 1 && memcmp(buf, tag, len) == 0) {
        *tp_rank = 0; /* vLLM <= 0.9 sent the bare bytes */
        return 0;
    }
    struct mp m;
    struct mp_item it;
    mp_init(&m, buf, len);
    if (len == 0) {
        return tandem_fail(err, errlen, -EINVAL, "empty request");
    }
    if (!mp_next(&m, &it)) {
        return tandem_fail(err, errlen, -EINVAL, "request is not msgpack: %s", m.why);
    }
    if (it.kind != MP_ARRAY || it.n != 2) {
        return tandem_fail(err, errlen, -EINVAL,
                           "request must be the array [\"get_meta_msg\", tp_rank], got %s",
                           mp_kind_name[it.kind]);
    }
    if (!mp_next(&m, &it)) {
        return tandem_fail(err, errlen, -EINVAL, "request: %s", m.why);
    }
    if ((it.kind != MP_BIN && it.kind != MP_STR) || it.n != sizeof(tag) - 1 ||
        memcmp(it.data, tag, it.n) != 0) {
        char shown[64] = "";
        if (it.kind == MP_BIN || it.kind == MP_STR) {
            printable(it.data, it.n < 16 ? it.n : 16, shown, sizeof(shown));
        }
        return tandem_fail(err, errlen, -EINVAL, "unknown request type %s \"%s\"",
                           mp_kind_name[it.kind], shown);
    }
    int64_t rank = 0;
    if (!mp_int(&m, &rank)) {
        return tandem_fail(err, errlen, -EINVAL, "request tp_rank: %s", m.why);
    }
    if (m.off != len) {
        return tandem_fail(err, errlen, -EINVAL, "request has %zu trailing bytes", len - m.off);
    }
    *tp_rank = rank;
    return 0;
}

int kvx_wire_decode_handshake(const void *buf, size_t len, struct kvx_handshake *out, char *err,
                              size_t errlen)
{
    static const char *const keys[] = {"compatibility_hash", "agent_metadata_bytes", "error"};
    struct mp m;
    struct mp_item it;
    unsigned seen = 0;
    memset(out, 0, sizeof(*out));
    mp_init(&m, buf, len);
    if (len == 0) {
        return tandem_fail(err, errlen, -EINVAL, "empty handshake reply");
    }
    if (!mp_expect(&m, MP_MAP, &it)) {
        return tandem_fail(err, errlen, -EINVAL, "handshake reply is not a msgpack map: %s", m.why);
    }
    for (uint32_t i = 0; i < it.n; i++) {
        int k;
        if (!mp_key(&m, keys, (int)ARRAY_SIZE(keys), &seen, &k)) {
            return tandem_fail(err, errlen, -EINVAL, "handshake reply: %s", m.why);
        }
        bool ok = true;
        if (k == 0) {
            ok = mp_text(&m, out->compat_hash, sizeof(out->compat_hash));
            if (ok && strlen(out->compat_hash) != KVX_HASH_HEX) {
                ok = mp_fail(&m, "%zu characters, expected %d", strlen(out->compat_hash),
                             KVX_HASH_HEX);
            }
        } else if (k == 1) {
            ok = mp_blob(&m, KVX_REPLY_MAX, &out->agent_metadata, &out->agent_metadata_len);
        } else if (k == 2) {
            struct mp_item e;
            ok = mp_expect(&m, MP_STR, &e);
            if (ok) {
                printable(e.data, e.n < 200 ? e.n : 200, out->error, sizeof(out->error));
                if (!out->error[0]) {
                    snprintf(out->error, sizeof(out->error), "(no reason given)");
                }
            }
        } else {
            ok = mp_skip(&m, 1);
        }
        if (!ok) {
            return tandem_fail(err, errlen, -EINVAL, "handshake reply field \"%s\": %s",
                               k >= 0 ? keys[k] : "(unknown)", m.why);
        }
    }
    if (m.off != len) {
        return tandem_fail(err, errlen, -EINVAL, "handshake reply has %zu trailing bytes",
                           len - m.off);
    }
    if (out->error[0]) {
        return 0;
    }
    for (int k = 0; k < 2; k++) {
        if (!(seen & (1u << k))) {
            return tandem_fail(err, errlen, -EINVAL, "handshake reply lacks \"%s\"", keys[k]);
        }
    }
    return 0;
}

void kvx_agent_meta_release(struct kvx_agent_meta *m)
{
    free(m->base_addrs);
    free(m->block_lens);
    free((void *)m->rkeys);
    free(m->rkey_lens);
    memset(m, 0, sizeof(*m));
}

/* BLOB: {"kvx": 1, "worker_address": bin, "rkeys": [bin...], "host_ns": str, "pid": uint}
 * (the last two optional). */
static bool decode_blob(struct mp *m, struct kvx_agent_meta *out, int32_t *n_rkeys)
{
    static const char *const keys[] = {"kvx", "worker_address", "rkeys", "host_ns", "pid"};
    const int n_required = 3;
    struct mp_item it;
    unsigned seen = 0;
    if (!mp_expect(m, MP_MAP, &it)) {
        return false;
    }
    for (uint32_t i = 0; i < it.n; i++) {
        int k;
        uint64_t version;
        if (!mp_key(m, keys, (int)ARRAY_SIZE(keys), &seen, &k)) {
            return false;
        }
        if (k == 0) {
            if (!mp_uint(m, 1, 1, &version)) {
                return false;
            }
        } else if (k == 1) {
            if (!mp_blob(m, KVX_BLOB_MAX, &out->worker_addr, &out->worker_addr_len)) {
                return false;
            }
        } else if (k == 2) {
            struct mp_item arr;
            if (!mp_expect(m, MP_ARRAY, &arr)) {
                return false;
            }
            if (arr.n == 0 || arr.n > KVX_MAX_REGIONS) {
                return mp_fail(m, "%u rkeys, 1 to %d allowed", arr.n, KVX_MAX_REGIONS);
            }
            free((void *)out->rkeys); /* NULL: a duplicate key was refused; for the analyzer */
            free(out->rkey_lens);
            out->rkeys = calloc(arr.n, sizeof(*out->rkeys));
            out->rkey_lens = calloc(arr.n, sizeof(*out->rkey_lens));
            if (!out->rkeys || !out->rkey_lens) {
                return mp_fail(m, "out of memory");
            }
            for (uint32_t r = 0; r < arr.n; r++) {
                if (!mp_blob(m, KVX_BLOB_MAX, &out->rkeys[r], &out->rkey_lens[r])) {
                    return false;
                }
            }
            *n_rkeys = (int32_t)arr.n;
        } else if (k == 3) {
            if (!mp_text(m, out->host_ns, sizeof(out->host_ns))) {
                return false;
            }
        } else if (k == 4) {
            uint64_t pid;
            if (!mp_uint(m, 1, INT32_MAX, &pid)) {
                return false;
            }
            out->pid = (int64_t)pid;
        } else if (!mp_skip(m, 2)) {
            return false;
        }
    }
    for (int k = 0; k < n_required; k++) {
        if (!(seen & (1u << k))) {
            return mp_fail(m, "lacks \"%s\"", keys[k]);
        }
    }
    return true;
}

int kvx_wire_decode_agent_meta(const void *buf, size_t len, struct kvx_agent_meta *out, char *err,
                               size_t errlen)
{
    static const char *const keys[] = {"engine_id",       "agent_metadata", "kv_caches_base_addr",
                                       "device_id",       "num_blocks",     "block_lens",
                                       "kv_cache_layout", "block_size"};
    enum {
        K_ENGINE,
        K_BLOB,
        K_BASES,
        K_DEVICE,
        K_NUM_BLOCKS,
        K_BLOCK_LENS,
        K_LAYOUT,
        K_BLOCK_SIZE
    };
    struct mp m;
    struct mp_item it;
    unsigned seen = 0;
    int32_t n_bases = 0, n_lens = 0, n_rkeys = 0;
    uint64_t v = 0;
    memset(out, 0, sizeof(*out));
    mp_init(&m, buf, len);
    if (!mp_expect(&m, MP_MAP, &it)) {
        return tandem_fail(err, errlen, -EINVAL, "agent metadata is not a msgpack map: %s", m.why);
    }
    for (uint32_t i = 0; i < it.n; i++) {
        int k;
        bool ok = true;
        if (!mp_key(&m, keys, (int)ARRAY_SIZE(keys), &seen, &k)) {
            kvx_agent_meta_release(out);
            return tandem_fail(err, errlen, -EINVAL, "agent metadata: %s", m.why);
        }
        switch (k) {
        case K_ENGINE:
            ok = mp_text(&m, out->engine_id, sizeof(out->engine_id));
            if (ok && !out->engine_id[0]) {
                ok = mp_fail(&m, "empty");
            }
            break;
        case K_BLOB: {
            struct mp_item blob;
            ok = mp_expect(&m, MP_BIN, &blob);
            if (ok) {
                struct mp inner;
                mp_init(&inner, blob.data, blob.n);
                ok = decode_blob(&inner, out, &n_rkeys);
                if (ok && inner.off != inner.len) {
                    ok = mp_fail(&inner, "%zu trailing bytes", inner.len - inner.off);
                }
                if (!ok) {
                    snprintf(m.why, sizeof(m.why), "%s", inner.why);
                }
            }
            break;
        }
        case K_BASES:
            ok = mp_uint_array(&m, 0, &out->base_addrs, &n_bases);
            break;
        case K_DEVICE:
            ok = mp_int(&m, &out->device_id);
            break;
        case K_NUM_BLOCKS:
            ok = mp_uint(&m, 1, INT32_MAX, &v);
            out->num_blocks = (int32_t)v;
            break;
        case K_BLOCK_LENS:
            ok = mp_uint_array(&m, 1, &out->block_lens, &n_lens);
            break;
        case K_LAYOUT:
            ok = mp_text(&m, out->kv_cache_layout, sizeof(out->kv_cache_layout));
            break;
        case K_BLOCK_SIZE:
            ok = mp_uint(&m, 1, INT32_MAX, &v);
            out->block_size = (int32_t)v;
            break;
        default:
            ok = mp_skip(&m, 1);
            break;
        }
        if (!ok) {
            kvx_agent_meta_release(out);
            return tandem_fail(err, errlen, -EINVAL, "agent metadata field \"%s\": %s",
                               k >= 0 ? keys[k] : "(unknown)", m.why);
        }
    }
    if (m.off != len) {
        tandem_set_err(err, errlen, "agent metadata has %zu trailing bytes", len - m.off);
        goto err_release;
    }
    for (int k = 0; k < (int)ARRAY_SIZE(keys); k++) {
        if (k != K_DEVICE && !(seen & (1u << k))) {
            tandem_set_err(err, errlen, "agent metadata lacks \"%s\"", keys[k]);
            goto err_release;
        }
    }
    if (n_lens != n_bases || n_rkeys != n_bases) {
        tandem_set_err(err, errlen,
                       "agent metadata: %d base addresses, %d block_lens, %d rkeys: one each "
                       "per region expected",
                       n_bases, n_lens, n_rkeys);
        goto err_release;
    }
    out->n_regions = n_bases;
    for (int32_t r = 0; r < n_bases; r++) {
        if (out->block_lens[r] > UINT64_MAX / (uint64_t)out->num_blocks ||
            out->base_addrs[r] > UINT64_MAX - out->block_lens[r] * (uint64_t)out->num_blocks) {
            tandem_set_err(err, errlen,
                           "agent metadata: region %d (base 0x%" PRIx64 ", %d blocks of %" PRIu64
                           " bytes) does not fit in the address space",
                           r, out->base_addrs[r], out->num_blocks, out->block_lens[r]);
            goto err_release;
        }
    }
    return 0;

err_release:
    kvx_agent_meta_release(out);
    return -EINVAL;
}

int kvx_agent_meta_check(const struct kvx_agent_meta *m, const struct kvx_layout *local, char *err,
                         size_t errlen)
{
    uint64_t block_bytes = (uint64_t)local->n_kv_heads * (uint64_t)local->block_size *
                           (uint64_t)local->head_dim * (uint64_t)local->dtype_bytes;
    if (m->n_regions != 2 * local->n_layers) {
        return tandem_fail(err, errlen, -EINVAL,
                           "remote has %d KV regions, this engine %d (2 per layer)", m->n_regions,
                           2 * local->n_layers);
    }
    for (int32_t r = 0; r < m->n_regions; r++) {
        if (m->block_lens[r] != block_bytes) {
            return tandem_fail(err, errlen, -EINVAL,
                               "block_lens mismatch: region %d has %" PRIu64
                               "-byte blocks remotely, %" PRIu64 " here",
                               r, m->block_lens[r], block_bytes);
        }
    }
    if (m->block_size != local->block_size) {
        return tandem_fail(err, errlen, -EINVAL, "block_size mismatch: remote %d, local %d",
                           m->block_size, local->block_size);
    }
    if (strcmp(m->kv_cache_layout, KVX_LAYOUT_HND) != 0) {
        return tandem_fail(err, errlen, -EINVAL, "kv_cache_layout \"%s\" is not supported (\"%s\")",
                           m->kv_cache_layout, KVX_LAYOUT_HND);
    }
    if (m->num_blocks < 2) {
        return tandem_fail(err, errlen, -EINVAL, "remote has %d blocks per region", m->num_blocks);
    }
    return 0;
}

static int pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

static int pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
    return msgpack_pack_bin(pk, n) | msgpack_pack_bin_body(pk, p, n);
}

/* The packed bytes (ownership passes to the caller), or NULL when a pack call failed. */
static void *pack_finish(msgpack_sbuffer *sb, int rc, size_t *len)
{
    if (rc != 0 || !sb->data) {
        msgpack_sbuffer_destroy(sb);
        return NULL;
    }
    *len = sb->size;
    return msgpack_sbuffer_release(sb);
}

void *kvx_wire_encode_request(int64_t tp_rank, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_array(&pk, 2);
    rc |= pack_bin(&pk, KVX_GET_META_MSG, strlen(KVX_GET_META_MSG));
    rc |= msgpack_pack_int64(&pk, tp_rank);
    return pack_finish(&sb, rc, len);
}

void *kvx_wire_encode_handshake(const char *compat_hash, const void *agent_metadata,
                                size_t agent_metadata_len, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 2);
    rc |= pack_str(&pk, "compatibility_hash") | pack_str(&pk, compat_hash);
    rc |= pack_str(&pk, "agent_metadata_bytes") | pack_bin(&pk, agent_metadata, agent_metadata_len);
    return pack_finish(&sb, rc, len);
}

void *kvx_wire_encode_refusal(const char *message, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 1);
    rc |= pack_str(&pk, "error") | pack_str(&pk, message);
    return pack_finish(&sb, rc, len);
}

void *kvx_wire_encode_agent_meta(const struct kvx_agent_meta *m, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t blob_len = 0;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 3 + (m->host_ns[0] ? 1 : 0) + (m->pid > 0 ? 1 : 0));
    rc |= pack_str(&pk, "kvx") | msgpack_pack_uint32(&pk, 1);
    rc |= pack_str(&pk, "worker_address") | pack_bin(&pk, m->worker_addr, m->worker_addr_len);
    rc |= pack_str(&pk, "rkeys") | msgpack_pack_array(&pk, (size_t)m->n_regions);
    for (int32_t r = 0; r < m->n_regions; r++) {
        rc |= pack_bin(&pk, m->rkeys[r], m->rkey_lens[r]);
    }
    if (m->host_ns[0]) {
        rc |= pack_str(&pk, "host_ns") | pack_str(&pk, m->host_ns);
    }
    if (m->pid > 0) {
        rc |= pack_str(&pk, "pid") | msgpack_pack_uint64(&pk, (uint64_t)m->pid);
    }
    void *blob = pack_finish(&sb, rc, &blob_len);
    if (!blob) {
        return NULL;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rc = msgpack_pack_map(&pk, 8);
    rc |= pack_str(&pk, "engine_id") | pack_str(&pk, m->engine_id);
    rc |= pack_str(&pk, "agent_metadata") | pack_bin(&pk, blob, blob_len);
    rc |= pack_str(&pk, "kv_caches_base_addr") | msgpack_pack_array(&pk, (size_t)m->n_regions);
    for (int32_t r = 0; r < m->n_regions; r++) {
        rc |= msgpack_pack_uint64(&pk, m->base_addrs[r]);
    }
    rc |= pack_str(&pk, "device_id") | msgpack_pack_int64(&pk, m->device_id);
    rc |= pack_str(&pk, "num_blocks") | msgpack_pack_int32(&pk, m->num_blocks);
    rc |= pack_str(&pk, "block_lens") | msgpack_pack_array(&pk, (size_t)m->n_regions);
    for (int32_t r = 0; r < m->n_regions; r++) {
        rc |= msgpack_pack_uint64(&pk, m->block_lens[r]);
    }
    rc |= pack_str(&pk, "kv_cache_layout") | pack_str(&pk, m->kv_cache_layout);
    rc |= pack_str(&pk, "block_size") | msgpack_pack_int32(&pk, m->block_size);
    free(blob);
    return pack_finish(&sb, rc, len);
}

/* ---- Tandem extensions: "tandem_blocks" codecs, XXH64, int8 packing ------------------------- */

int kvx_wire_decode_blocks_request(const void *buf, size_t len, int32_t num_blocks,
                                   struct kvx_blocks_request *out, char *err, size_t errlen)
{
    static const char tag[] = KVX_BLOCKS_MSG;
    static const char *const keys[] = {"seq", "blocks", "sums", "wire_dtype"};
    struct mp m;
    struct mp_item it;
    unsigned seen = 0;
    memset(out, 0, sizeof(*out));
    mp_init(&m, buf, len);
    if (!mp_next(&m, &it) || it.kind != MP_ARRAY || it.n < 1) {
        return -ENOENT;
    }
    uint32_t items = it.n;
    if (!mp_next(&m, &it) || (it.kind != MP_BIN && it.kind != MP_STR) || it.n != sizeof(tag) - 1 ||
        memcmp(it.data, tag, it.n) != 0) {
        return -ENOENT;
    }
    if (items != 3) {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s request must be [tag, tp_rank, options], got %u items", tag, items);
    }
    if (!mp_int(&m, &out->tp_rank)) {
        return tandem_fail(err, errlen, -EINVAL, "%s tp_rank: %s", tag, m.why);
    }
    if (!mp_expect(&m, MP_MAP, &it)) {
        return tandem_fail(err, errlen, -EINVAL, "%s options: %s", tag, m.why);
    }
    for (uint32_t i = 0; i < it.n; i++) {
        int k = -1;
        bool ok = mp_key(&m, keys, (int)ARRAY_SIZE(keys), &seen, &k);
        if (ok && k == 0) {
            ok = mp_uint(&m, 0, UINT64_MAX, &out->seq);
        } else if (ok && k == 1) {
            struct mp_item arr;
            ok = mp_expect(&m, MP_ARRAY, &arr);
            if (ok && (arr.n == 0 || arr.n > KVX_EXT_BLOCKS)) {
                ok = mp_fail(&m, "%u block ids, 1 to %d allowed", arr.n, KVX_EXT_BLOCKS);
            }
            if (ok) {
                out->blocks = malloc(sizeof(*out->blocks) * arr.n);
                ok = out->blocks != NULL || mp_fail(&m, "out of memory");
            }
            for (uint32_t b = 0; ok && b < arr.n; b++) {
                uint64_t id = 0;
                ok = mp_uint(&m, 1, num_blocks > 1 ? (uint64_t)num_blocks - 1 : 0, &id);
                if (ok) {
                    out->blocks[b] = (int32_t)id;
                }
            }
            out->n = ok ? (int32_t)arr.n : 0;
        } else if (ok && k == 2) {
            struct mp_item b;
            ok = mp_expect(&m, MP_BOOL, &b);
            out->sums = ok && b.u;
        } else if (ok && k == 3) {
            char dtype[8];
            ok = mp_text(&m, dtype, sizeof(dtype));
            if (ok && strcmp(dtype, "int8") != 0 && strcmp(dtype, "fp16") != 0) {
                ok = mp_fail(&m, "\"%s\" is neither \"fp16\" nor \"int8\"", dtype);
            }
            out->int8 = ok && strcmp(dtype, "int8") == 0;
        } else if (ok) {
            ok = mp_skip(&m, 2);
        }
        if (!ok) {
            kvx_blocks_request_release(out);
            return tandem_fail(err, errlen, -EINVAL, "%s field \"%s\": %s", tag,
                               k >= 0 ? keys[k] : "(unknown)", m.why);
        }
    }
    if (m.off != len) {
        kvx_blocks_request_release(out);
        return tandem_fail(err, errlen, -EINVAL, "%s request has %zu trailing bytes", tag,
                           len - m.off);
    }
    for (int k = 0; k < 2; k++) {
        if (!(seen & (1u << k))) {
            kvx_blocks_request_release(out);
            return tandem_fail(err, errlen, -EINVAL, "%s request lacks \"%s\"", tag, keys[k]);
        }
    }
    return 0;
}

void kvx_blocks_request_release(struct kvx_blocks_request *r)
{
    free(r->blocks);
    memset(r, 0, sizeof(*r));
}

int kvx_wire_decode_blocks_reply(const void *buf, size_t len, struct kvx_blocks_reply *out,
                                 char *err, size_t errlen)
{
    static const char *const keys[] = {
        "seq",          "sums",  "staging_id",         "staging_addr",        "staging_len",
        "staging_rkey", "error", "compatibility_hash", "agent_metadata_bytes"};
    enum { K_SEQ, K_SUMS, K_ID, K_ADDR, K_LEN, K_RKEY, K_ERROR, K_HASH, K_META };
    const unsigned staging = (1u << K_ID) | (1u << K_ADDR) | (1u << K_LEN) | (1u << K_RKEY);
    struct mp m;
    struct mp_item it;
    unsigned seen = 0;
    memset(out, 0, sizeof(*out));
    mp_init(&m, buf, len);
    if (!mp_expect(&m, MP_MAP, &it)) {
        return tandem_fail(err, errlen, -EINVAL, "%s reply is not a msgpack map: %s",
                           KVX_BLOCKS_MSG, m.why);
    }
    for (uint32_t i = 0; i < it.n; i++) {
        int k;
        bool ok = mp_key(&m, keys, (int)ARRAY_SIZE(keys), &seen, &k);
        struct mp_item v;
        if (!ok) {
            return tandem_fail(err, errlen, -EINVAL, "%s reply: %s", KVX_BLOCKS_MSG, m.why);
        }
        switch (k) {
        case K_SEQ:
            ok = mp_uint(&m, 0, UINT64_MAX, &out->seq);
            out->has_seq = ok;
            break;
        case K_SUMS:
            ok = mp_expect(&m, MP_BIN, &v);
            if (ok && v.n % 8 != 0) {
                ok = mp_fail(&m, "%u bytes, not a whole number of 8-byte sums", v.n);
            }
            out->sums = ok ? v.data : NULL;
            out->sums_len = ok ? v.n : 0;
            break;
        case K_ID:
            ok = mp_uint(&m, 0, UINT64_MAX, &out->staging_id);
            break;
        case K_ADDR:
            ok = mp_uint(&m, 0, UINT64_MAX, &out->staging_addr);
            break;
        case K_LEN:
            ok = mp_uint(&m, 1, UINT64_MAX, &out->staging_len);
            break;
        case K_RKEY:
            ok = mp_blob(&m, KVX_BLOB_MAX, &out->staging_rkey, &out->staging_rkey_len);
            break;
        case K_ERROR:
            ok = mp_expect(&m, MP_STR, &v);
            if (ok) {
                printable(v.data, v.n < 200 ? v.n : 200, out->error, sizeof(out->error));
                if (!out->error[0]) {
                    snprintf(out->error, sizeof(out->error), "(no reason given)");
                }
            }
            break;
        case K_HASH:
        case K_META:
            out->foreign = true;
            ok = mp_skip(&m, 1);
            break;
        default:
            ok = mp_skip(&m, 1);
            break;
        }
        if (!ok) {
            memset(out, 0, sizeof(*out));
            return tandem_fail(err, errlen, -EINVAL, "%s reply field \"%s\": %s", KVX_BLOCKS_MSG,
                               k >= 0 ? keys[k] : "(unknown)", m.why);
        }
    }
    if (m.off != len) {
        memset(out, 0, sizeof(*out));
        return tandem_fail(err, errlen, -EINVAL, "%s reply has %zu trailing bytes", KVX_BLOCKS_MSG,
                           len - m.off);
    }
    if ((seen & staging) != 0 && (seen & staging) != staging) {
        memset(out, 0, sizeof(*out));
        return tandem_fail(err, errlen, -EINVAL,
                           "%s reply: staging_id, staging_addr, staging_len and staging_rkey go "
                           "together",
                           KVX_BLOCKS_MSG);
    }
    out->has_staging = (seen & staging) == staging;
    if (out->has_staging && out->staging_addr > UINT64_MAX - out->staging_len) {
        memset(out, 0, sizeof(*out));
        return tandem_fail(err, errlen, -EINVAL,
                           "%s reply: staging at 0x%" PRIx64 " of %" PRIu64
                           " bytes does not fit in the address space",
                           KVX_BLOCKS_MSG, out->staging_addr, out->staging_len);
    }
    return 0;
}

void *kvx_wire_encode_blocks_request(const struct kvx_blocks_request *r, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_array(&pk, 3);
    rc |= pack_bin(&pk, KVX_BLOCKS_MSG, strlen(KVX_BLOCKS_MSG));
    rc |= msgpack_pack_int64(&pk, r->tp_rank);
    rc |= msgpack_pack_map(&pk, 4);
    rc |= pack_str(&pk, "seq") | msgpack_pack_uint64(&pk, r->seq);
    rc |= pack_str(&pk, "blocks") | msgpack_pack_array(&pk, (size_t)r->n);
    for (int32_t i = 0; i < r->n; i++) {
        rc |= msgpack_pack_uint32(&pk, (uint32_t)r->blocks[i]);
    }
    rc |= pack_str(&pk, "sums") | (r->sums ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk));
    rc |= pack_str(&pk, "wire_dtype") | pack_str(&pk, r->int8 ? "int8" : "fp16");
    return pack_finish(&sb, rc, len);
}

void *kvx_wire_encode_blocks_reply(const struct kvx_blocks_reply *r, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    bool error = r->error[0] != '\0';
    size_t n = 1 + (error ? 1 : (r->sums_len ? 1 : 0) + (r->has_staging ? 4 : 0));
    int rc = msgpack_pack_map(&pk, n);
    rc |= pack_str(&pk, "seq") | msgpack_pack_uint64(&pk, r->seq);
    if (error) {
        rc |= pack_str(&pk, "error") | pack_str(&pk, r->error);
        return pack_finish(&sb, rc, len);
    }
    if (r->sums_len) {
        rc |= pack_str(&pk, "sums") | pack_bin(&pk, r->sums, r->sums_len);
    }
    if (r->has_staging) {
        rc |= pack_str(&pk, "staging_id") | msgpack_pack_uint64(&pk, r->staging_id);
        rc |= pack_str(&pk, "staging_addr") | msgpack_pack_uint64(&pk, r->staging_addr);
        rc |= pack_str(&pk, "staging_len") | msgpack_pack_uint64(&pk, r->staging_len);
        rc |= pack_str(&pk, "staging_rkey") | pack_bin(&pk, r->staging_rkey, r->staging_rkey_len);
    }
    return pack_finish(&sb, rc, len);
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvx's XXH64 and wire sums assume a little-endian host"
#endif

#define XXH_P1 0x9E3779B185EBCA87ULL
#define XXH_P2 0xC2B2AE3D27D4EB4FULL
#define XXH_P3 0x165667B19E3779F9ULL
#define XXH_P4 0x85EBCA77C2B2AE63ULL
#define XXH_P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl64(uint64_t v, int r)
{
    return (v << r) | (v >> (64 - r));
}

static inline uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t xxh_round(uint64_t acc, uint64_t in)
{
    return rotl64(acc + in * XXH_P2, 31) * XXH_P1;
}

static inline uint64_t xxh_merge(uint64_t h, uint64_t v)
{
    return (h ^ xxh_round(0, v)) * XXH_P1 + XXH_P4;
}

uint64_t kvx_hash64(const void *data, size_t n)
{
    const uint8_t *p = data, *end = p + n;
    uint64_t h;
    if (n >= 32) {
        uint64_t v1 = XXH_P1 + XXH_P2, v2 = XXH_P2, v3 = 0, v4 = 0 - XXH_P1;
        for (; end - p >= 32; p += 32) {
            v1 = xxh_round(v1, rd64(p));
            v2 = xxh_round(v2, rd64(p + 8));
            v3 = xxh_round(v3, rd64(p + 16));
            v4 = xxh_round(v4, rd64(p + 24));
        }
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xxh_merge(xxh_merge(xxh_merge(xxh_merge(h, v1), v2), v3), v4);
    } else {
        h = XXH_P5;
    }
    h += (uint64_t)n;
    for (; end - p >= 8; p += 8) {
        h = rotl64(h ^ xxh_round(0, rd64(p)), 27) * XXH_P1 + XXH_P4;
    }
    if (end - p >= 4) {
        uint32_t w;
        memcpy(&w, p, sizeof(w));
        h = rotl64(h ^ ((uint64_t)w * XXH_P1), 23) * XXH_P2 + XXH_P3;
        p += 4;
    }
    for (; p < end; p++) {
        h = rotl64(h ^ (*p * XXH_P5), 11) * XXH_P1;
    }
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    return h;
}

size_t kvx_int8_block_bytes(const struct kvx_layout *l)
{
    size_t rows = (size_t)l->n_kv_heads * (size_t)l->block_size;
    return rows * (size_t)l->head_dim + rows * sizeof(float);
}

/* One row: q = round-half-even(x * 127 / amax) over the finite values' amax; Inf clamps, NaN is 0.
 * The AVX2 path below computes exactly the same (the same F32 operations, round-half-even). */
static float pack_row_ref(const uint16_t *x, int8_t *q, int d)
{
    float amax = 0.0f;
    for (int j = 0; j < d; j++) {
        float v = fabsf(kc_f16_to_f32(x[j]));
        if (v <= FLT_MAX && v > amax) {
            amax = v;
        }
    }
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < d; j++) {
        float t = kc_f16_to_f32(x[j]) * inv;
        t = isnan(t) ? 0.0f : t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t;
        q[j] = (int8_t)nearbyintf(t);
    }
    return amax / 127.0f;
}

static void unpack_row_ref(const int8_t *q, float scale, uint16_t *x, int d)
{
    for (int j = 0; j < d; j++) {
        x[j] = kc_f32_to_f16((float)q[j] * scale);
    }
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("avx2,f16c"))) static float pack_row_avx2(const uint16_t *x, int8_t *q, int d)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
    __m256 vmax = _mm256_setzero_ps();
    for (int j = 0; j < d; j += 8) {
        __m256 v = _mm256_andnot_ps(sign, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(x + j))));
        v = _mm256_and_ps(v, _mm256_cmp_ps(v, inf, _CMP_LT_OQ)); /* Inf and NaN count as 0 */
        vmax = _mm256_max_ps(vmax, v);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    float amax = 0.0f;
    for (int i = 0; i < 8; i++) {
        amax = lanes[i] > amax ? lanes[i] : amax;
    }
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv), hi = _mm256_set1_ps(127.0f),
                 lo = _mm256_set1_ps(-127.0f);
    for (int j = 0; j < d; j += 8) {
        __m256 t = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const void *)(x + j))), vinv);
        t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q)); /* NaN → 0 */
        t = _mm256_max_ps(_mm256_min_ps(t, hi), lo);
        __m256i i32 = _mm256_cvtps_epi32(t); /* round-half-even (MXCSR default) */
        __m128i i16 =
            _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
        _mm_storel_epi64((void *)(q + j), _mm_packs_epi16(i16, i16));
    }
    return amax / 127.0f;
}

__attribute__((target("avx2,f16c"))) static void unpack_row_avx2(const int8_t *q, float scale,
                                                                 uint16_t *x, int d)
{
    const __m256 s = _mm256_set1_ps(scale);
    for (int j = 0; j < d; j += 8) {
        __m256i i32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const void *)(q + j)));
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(i32), s);
        _mm_storeu_si128((void *)(x + j), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
}

static bool have_avx2_f16c(void)
{
    static int have = -1;
    if (have < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0; /* F16C: CPUID.1:ECX bit 29 */
        have = __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) &&
               (c & (1u << 29)) != 0;
    }
    return have;
}
#endif

void kvx_int8_pack(const struct kvx_layout *l, const void *f16_block, void *out)
{
    int d = l->head_dim, rows = l->n_kv_heads * l->block_size;
    const uint16_t *x = f16_block;
    int8_t *q = out;
    uint8_t *scales = (uint8_t *)out + (size_t)rows * (size_t)d;
    for (int r = 0; r < rows; r++) {
        float scale;
#if defined(__x86_64__)
        if (d % 8 == 0 && have_avx2_f16c()) {
            scale = pack_row_avx2(x + (size_t)r * (size_t)d, q + (size_t)r * (size_t)d, d);
        } else
#endif
        {
            scale = pack_row_ref(x + (size_t)r * (size_t)d, q + (size_t)r * (size_t)d, d);
        }
        memcpy(scales + (size_t)r * sizeof(float), &scale, sizeof(float));
    }
}

void kvx_int8_unpack(const struct kvx_layout *l, const void *packed, void *f16_block)
{
    int d = l->head_dim, rows = l->n_kv_heads * l->block_size;
    const int8_t *q = packed;
    const uint8_t *scales = (const uint8_t *)packed + (size_t)rows * (size_t)d;
    uint16_t *x = f16_block;
    for (int r = 0; r < rows; r++) {
        float scale;
        memcpy(&scale, scales + (size_t)r * sizeof(float), sizeof(float));
#if defined(__x86_64__)
        if (d % 8 == 0 && have_avx2_f16c()) {
            unpack_row_avx2(q + (size_t)r * (size_t)d, scale, x + (size_t)r * (size_t)d, d);
            continue;
        }
#endif
        unpack_row_ref(q + (size_t)r * (size_t)d, scale, x + (size_t)r * (size_t)d, d);
    }
}

/* ---- The kvx object -------------------------------------------------------------------------- */

/* Zero bytes after each worker address or rkey handed to UCX, whose unpackers take no length:
 * enough for every md bit of an rkey's 64-bit map to claim a 255-byte component key. */
#define KVX_UCX_PAD (64 * 256 + 64)

#define KVX_SHUTDOWN_WAIT_MS 1000 /* for operations in flight, then for endpoint closes */
/* With operations in flight the thread progresses UCX at least this often: not every completion
 * raises an event (a shared-memory FIFO that has room again does not), and UCX 1.13 emulates RMA
 * on ordinary memory with streams of such messages. A sleep, not a spin: on a small host a
 * spinning thread starves the peer's thread it waits for. */
#define KVX_IN_FLIGHT_SLEEP_US 50
#define KVX_ROUTER_MAX_MSG     (128 * 1024) /* a tandem_blocks request of KVX_EXT_BLOCKS ids */
#define KVX_HOST_MAX           255

/* A producer's int8 staging buffer as the consumer unpacked it: kept while the peer is, because
 * the producer reuses its buffers and every fresh unpack of a shared-memory key maps the segment
 * anew, paying a page fault per 4 KiB on each pull (as much as the transfer itself). */
struct kvx_stg_key {
    uint64_t addr;
    uint8_t *blob; /* the packed key (a copy) */
    size_t blob_len;
    ucp_rkey_h rkey;
    uint64_t populated; /* bytes from addr whose pages are mapped here */
};
#define KVX_STG_KEYS (4 * KVX_STAGING_SLOTS) /* per peer; past it, keys are unpacked per pull */

/* A remote engine: handshaking (sock set, waiters queued) or ready (ep, rkeys, bases). */
struct kvx_peer {
    struct list_node node; /* in kvx.peers while it lives */
    char engine_id[KVX_ENGINE_ID_MAX + 1];
    char host[KVX_HOST_MAX + 1];
    int port;
    bool cached;       /* findable by engine id (holds one ref) */
    bool ready;        /* handshake done */
    bool failed;       /* UCX reported an endpoint error, or a transfer timed out */
    bool err_peer;     /* the endpoint has peer error handling (shared memory in UCX 1.13 has
                          none: then it is closed gracefully, or forced only when it hangs) */
    int refs;          /* the cache's + one per request using it */
    uint64_t last_use; /* for LRU eviction */
    void *sock;        /* DEALER while handshaking */
    void *ext_sock;    /* DEALER for tandem_blocks requests, from the first one on */
    struct kvx_stg_key *stg_keys; /* [KVX_STG_KEYS] the producer's staging keys seen (int8) */
    int n_stg_keys;
    int64_t deadline_ms;
    struct list_node waiters; /* requests waiting for the handshake */
    ucp_ep_h ep;
    ucp_rkey_h *rkeys; /* [n_regions] */
    uint64_t *bases;   /* [n_regions] */
    int32_t num_blocks;
    int64_t pid; /* a producer in this host's namespaces (no UCX error handling): its process,
                    checked before each reuse; 0 otherwise */
};

/* XFER_PACK: an int8 pull waits for the producer's staging; XFER_REGET: blocks that failed their
 * checksum are fetched again. */
enum xfer_stage { XFER_PACK, XFER_GETS, XFER_REGET, XFER_NOTIFY, XFER_DONE };

/* A pull or notification request; the id arrays and the message live in the same allocation. */
struct kvx_xfer {
    struct list_node node; /* in the queue, a peer's waiters, kvx.active or kvx.ready */
    bool is_pull;
    char engine_id[KVX_ENGINE_ID_MAX + 1];
    char host[KVX_HOST_MAX + 1];
    int port;
    int32_t n;
    int32_t *remote; /* [n] */
    int32_t *local;  /* [n] */
    char *msg;       /* NULL: no notification */
    size_t msg_len;
    kvx_done_fn done;
    void *ud;
    struct kvx_peer *peer; /* while active (holds a ref) */
    enum xfer_stage stage;
    int pending;          /* UCX operations in flight */
    ucs_status_t failure; /* the first failed operation's status */
    bool handshook;       /* waited for a fresh handshake: a transfer error is final */
    bool retried;
    bool notified;
    bool expired; /* its transfer timeout passed */
    uint64_t bytes;
    uint64_t wire_bytes; /* what its gets read (stats.wire_bytes) */
    int64_t t0_ns;
    /* Tandem extensions (kvxfer.h) */
    bool awaiting_reply; /* a tandem_blocks request is out (the request stays on kvx.active) */
    uint64_t ext_seq;
    uint64_t *sums; /* [n_regions * n] the producer's checksums, once answered */
    int32_t *bad;   /* [n_regions * n] indices (r * n + i) that mismatched, n_bad of them */
    int32_t n_bad;
    uint8_t *stg; /* int8: local staging buffer (stg_cap bytes) */
    size_t stg_cap;
    uint64_t stg_len; /* the producer's staging: id, address, length, key */
    uint64_t stg_id;
    uint64_t stg_addr;
    ucp_rkey_h stg_rkey;
    bool stg_rkey_owned; /* stg_rkey is the request's (else its peer's stg_keys hold it) */
    bool stg_release;    /* the notification carries stg_hdr (releases the staging) */
    uint8_t stg_hdr[8];  /* stg_id, little-endian */
};

/* Producer: a staging buffer for int8 packing, UCX-allocated so that consumers get it one-sided. */
struct kvx_staging {
    ucp_mem_h memh; /* NULL: slot empty */
    uint8_t *base;
    size_t cap;
    void *rkey; /* packed */
    size_t rkey_len;
    bool busy;           /* lent to a consumer */
    uint64_t id;         /* (generation << 8) | slot while lent */
    int64_t deadline_ms; /* reclaimed after it */
};

struct kvx {
    /* fixed at kvx_new */
    char engine_id[KVX_ENGINE_ID_MAX + 1];
    struct kvx_layout layout;
    int32_t n_regions;
    uint64_t block_bytes;
    uint8_t **base; /* [n_regions] */
    char compat_hash[KVX_HASH_HEX + 1];
    char host_ns[KVX_HOST_NS_MAX + 1]; /* see host_ns_get; "" when unknown */
    bool shm_tls;                      /* UCX_TLS (at kvx_new) allows a shared-memory transport */
    bool enforce_compat;
    bool block_checksum; /* Tandem extensions asked for as a consumer */
    bool wire_int8;
    size_t int8_block_bytes;
    int tp_size;
    enum kvx_memory memory; /* of the regions: device regions are never touched on the host */
    int device_id;
    int handshake_timeout_ms;
    int transfer_timeout_ms;
    int listen_port;
    void (*on_notify)(void *ud, const char *msg, size_t len);
    void *ud;

    /* UCX and ZeroMQ: the kvx thread's once it runs */
    ucp_context_h ctx;
    ucp_worker_h worker;
    int ucx_fd;
    ucp_mem_h *memh; /* [n_regions] */
    void *reply;     /* the handshake reply, encoded once */
    size_t reply_len;
    void *zctx;
    void *router;
    uint8_t *pad_buf; /* scratch for zero-padded blobs handed to UCX */

    pthread_t thread;
    int event_fd;

    pthread_mutex_t lock;   /* guards the fields down to stats */
    struct list_node queue; /* requests not yet taken by the thread */
    int in_flight;          /* accepted and not done */
    bool stopping;
    struct kvx_stats stats;
    int corrupt_rounds; /* kvx_debug_corrupt */

    /* the kvx thread's */
    uint64_t ext_seq;   /* last tandem_blocks request's */
    uint8_t *spare_stg; /* consumer: one idle staging buffer kept */
    size_t spare_cap;
    struct kvx_staging staging[KVX_STAGING_SLOTS]; /* producer */
    uint64_t staging_mapped;                       /* bytes of the slots' buffers */
    uint64_t staging_gen;
    struct list_node peers;
    int n_cached;
    uint64_t use_clock;
    struct list_node active;  /* requests with UCX operations in flight */
    struct list_node ready;   /* requests whose operations all completed */
    struct list_node zombies; /* reported requests whose cancelled operations UCX still holds:
                                 freed when those complete, or after the worker is destroyed */
    bool peer_failed;         /* an endpoint error was reported since the last check */
    bool cancelling;          /* kvx_free has begun: no new stage starts */
    bool warned_no_peer_errh; /* logged that a peer is connected without error handling */
    void **closing;           /* ucp_ep_close_nbx requests in progress */
    size_t n_closing;
    size_t cap_closing;
};

#define STAT_ADD(x, field, v)                                                                      \
    do {                                                                                           \
        pthread_mutex_lock(&(x)->lock);                                                            \
        (x)->stats.field += (v);                                                                   \
        pthread_mutex_unlock(&(x)->lock);                                                          \
    } while (0)

static int ucs_to_errno(ucs_status_t st)
{
    switch (st) {
    case UCS_ERR_NO_MEMORY:
        return -ENOMEM;
    case UCS_ERR_CANCELED:
        return -ECANCELED;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
        return -ETIMEDOUT;
    case UCS_ERR_INVALID_PARAM:
        return -EINVAL;
    default:
        return -EIO;
    }
}

/* ---- endpoints and peers (kvx thread) -------------------------------------------------------- */

/* Closes an endpoint: FORCE completes its outstanding operations with UCS_ERR_CANCELED at once
 * (UCX requires peer error handling on both sides for it); otherwise they are flushed first. */
static void ep_close(struct kvx *x, ucp_ep_h ep, bool force)
{
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &prm);
    if (sp == NULL || UCS_PTR_IS_ERR(sp)) {
        return;
    }
    void **n = tandem_grow(x->closing, &x->cap_closing, x->n_closing + 1, sizeof(*n), 8);
    if (!n) {
        /* out of memory: finish this close here */
        while (ucp_request_check_status(sp) == UCS_INPROGRESS) {
            ucp_worker_progress(x->worker);
        }
        ucp_request_free(sp);
        return;
    }
    x->closing = n;
    x->closing[x->n_closing++] = sp;
}

static void reap_closing(struct kvx *x)
{
    size_t kept = 0;
    for (size_t i = 0; i < x->n_closing; i++) {
        if (ucp_request_check_status(x->closing[i]) == UCS_INPROGRESS) {
            x->closing[kept++] = x->closing[i];
        } else {
            ucp_request_free(x->closing[i]);
        }
    }
    x->n_closing = kept;
}

static void destroy_rkeys(struct kvx *x, struct kvx_peer *p)
{
    for (int32_t r = 0; p->rkeys && r < x->n_regions; r++) {
        if (p->rkeys[r]) {
            ucp_rkey_destroy(p->rkeys[r]);
            p->rkeys[r] = NULL;
        }
    }
    for (int k = 0; k < p->n_stg_keys; k++) {
        ucp_rkey_destroy(p->stg_keys[k].rkey);
        free(p->stg_keys[k].blob);
    }
    p->n_stg_keys = 0;
}

static void peer_destroy(struct kvx *x, struct kvx_peer *p)
{
    TANDEM_ASSERT(p->refs == 0 && list_empty(&p->waiters));
    list_unlink(&p->node);
    if (p->sock) {
        zmq_close(p->sock);
    }
    if (p->ext_sock) {
        zmq_close(p->ext_sock);
    }
    destroy_rkeys(x, p); /* no operation uses them any more */
    if (p->ep) {
        ep_close(x, p->ep, p->err_peer || p->failed);
    }
    free(p->rkeys);
    free(p->bases);
    free(p->stg_keys);
    free(p);
}

static void peer_unref(struct kvx *x, struct kvx_peer *p)
{
    TANDEM_ASSERT(p->refs > 0);
    if (--p->refs == 0) {
        peer_destroy(x, p);
    }
}

/* Removes p from the cache; it lives on while requests hold it. */
static void peer_drop(struct kvx *x, struct kvx_peer *p)
{
    if (!p->cached) {
        return;
    }
    p->cached = false;
    x->n_cached--;
    peer_unref(x, p);
}

/* Gives up on a peer whose operations hang: FORCE-closing the endpoint completes them with
 * UCS_ERR_CANCELED (a peer without error handling is forced too: it is not answering anyway). */
static void peer_abort(struct kvx *x, struct kvx_peer *p)
{
    p->failed = true;
    if (p->ep) {
        ep_close(x, p->ep, true);
        p->ep = NULL;
    }
    destroy_rkeys(x, p); /* after the close: it completed every operation that used them */
    peer_drop(x, p);
}

static struct kvx_peer *peer_find(struct kvx *x, const char *engine_id)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&x->peers, n, tmp)
    {
        struct kvx_peer *p = list_entry(n, struct kvx_peer, node);
        if (p->cached && strcmp(p->engine_id, engine_id) == 0) {
            return p;
        }
    }
    return NULL;
}

/* Drops the least recently used ready peer no request holds; false when there is none. */
static bool peer_evict_one(struct kvx *x)
{
    struct kvx_peer *victim = NULL;
    struct list_node *n, *tmp;
    list_for_each_safe(&x->peers, n, tmp)
    {
        struct kvx_peer *p = list_entry(n, struct kvx_peer, node);
        if (p->cached && p->ready && p->refs == 1 && (!victim || p->last_use < victim->last_use)) {
            victim = p;
        }
    }
    if (!victim) {
        return false;
    }
    log_info("kvx: evicting cached engine %s at %s:%d", victim->engine_id, victim->host,
             victim->port);
    peer_drop(x, victim);
    return true;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct kvx *x = arg;
    struct list_node *n, *tmp;
    list_for_each_safe(&x->peers, n, tmp)
    {
        struct kvx_peer *p = list_entry(n, struct kvx_peer, node);
        if (p->ep == ep && !p->failed) {
            log_warn("kvx: endpoint to engine %s at %s:%d failed: %s", p->engine_id, p->host,
                     p->port, ucs_status_string(status));
            p->failed = true;
            x->peer_failed = true;
        }
    }
}

/* ---- requests (kvx thread) ------------------------------------------------------------------- */

static void xfer_start(struct kvx *x, struct kvx_xfer *xf);

static void populate(void *addr, size_t len, bool writable);

/* Consumer staging: the kept spare when it is big enough, else fresh memory (pages mapped now:
 * a pull that faults per 4 KiB is several times slower). */
static uint8_t *stg_take(struct kvx *x, size_t len, size_t *cap)
{
    if (x->spare_stg && x->spare_cap >= len) {
        uint8_t *b = x->spare_stg;
        *cap = x->spare_cap;
        x->spare_stg = NULL;
        return b;
    }
    size_t rounded = (len + 4095) & ~(size_t)4095;
    uint8_t *b = aligned_alloc(4096, rounded);
    if (b) {
        populate(b, rounded, true);
        *cap = rounded;
    }
    return b;
}

/* Keeps the larger of b and the spare (bounded by KVX_STAGING_MAX), frees the other. */
static void stg_give(struct kvx *x, uint8_t *b, size_t cap)
{
    if (b && cap <= KVX_STAGING_MAX && (!x->spare_stg || cap > x->spare_cap)) {
        free(x->spare_stg);
        x->spare_stg = b;
        x->spare_cap = cap;
    } else {
        free(b);
    }
}

/* Drops what a request holds for the extensions (before a retry, or when it is freed; no UCX
 * operation of it may be in flight). */
static void xfer_ext_reset(struct kvx *x, struct kvx_xfer *xf)
{
    if (xf->stg_rkey && xf->stg_rkey_owned) {
        ucp_rkey_destroy(xf->stg_rkey);
    }
    xf->stg_rkey = NULL;
    xf->stg_rkey_owned = false;
    stg_give(x, xf->stg, xf->stg_cap);
    xf->stg = NULL;
    xf->stg_cap = 0;
    free(xf->sums);
    free(xf->bad);
    xf->sums = NULL;
    xf->bad = NULL;
    xf->n_bad = 0;
    xf->awaiting_reply = false;
    xf->stg_release = false;
    xf->stg_id = xf->stg_addr = xf->stg_len = 0;
}

static void TANDEM_PRINTF(4, 5)
    xfer_finish(struct kvx *x, struct kvx_xfer *xf, int status, const char *fmt, ...)
{
    char msg[1024] = "";
    if (status != 0) {
        va_list ap;
        va_start(ap, fmt);
        tandem_set_errv(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    list_unlink(&xf->node);
    double seconds = xf->t0_ns ? (double)(tandem_now_ns() - xf->t0_ns) * 1e-9 : 0.0;
    uint64_t bytes = status == 0 ? xf->bytes : 0;
    pthread_mutex_lock(&x->lock);
    x->in_flight--;
    if (xf->is_pull && status == 0) {
        x->stats.pulls++;
        x->stats.bytes += bytes;
        x->stats.transfer_seconds += seconds;
    } else if (xf->is_pull) {
        x->stats.pull_failures++;
    } else if (status != 0) {
        x->stats.notification_failures++;
    }
    if (xf->notified) {
        x->stats.notifications_sent++;
    }
    x->stats.wire_bytes += xf->wire_bytes;
    pthread_mutex_unlock(&x->lock);
    if (xf->peer) {
        peer_unref(x, xf->peer);
        xf->peer = NULL;
    }
    if (status == -ECANCELED) {
        log_info("kvx: %s engine %s at %s:%d cancelled: %s",
                 xf->is_pull ? "pull from" : "notify to", xf->engine_id, xf->host, xf->port, msg);
    } else if (status != 0) {
        log_warn("kvx: %s engine %s at %s:%d failed: %s", xf->is_pull ? "pull from" : "notify to",
                 xf->engine_id, xf->host, xf->port, msg);
    }
    if (xf->done) {
        xf->done(xf->ud, status, bytes, seconds, status != 0 ? msg : NULL);
    }
    if (xf->pending > 0) {
        list_push_back(&x->zombies, &xf->node); /* UCX still calls on_op_done with it */
    } else {
        xfer_ext_reset(x, xf);
        free(xf);
    }
}

static void on_op_done(void *request, ucs_status_t status, void *user_data)
{
    struct kvx_xfer *xf = user_data;
    if (status != UCS_OK && xf->failure == UCS_OK) {
        xf->failure = status;
    }
    ucp_request_free(request);
    TANDEM_ASSERT(xf->pending > 0);
    xf->pending--;
}

/* Accounts for one posted operation; false when it failed at once (remembered in failure). */
static bool op_posted(struct kvx_xfer *xf, ucs_status_ptr_t sp)
{
    if (sp == NULL) {
        return true;
    }
    if (UCS_PTR_IS_ERR(sp)) {
        if (xf->failure == UCS_OK) {
            xf->failure = UCS_PTR_STATUS(sp);
        }
        return false;
    }
    xf->pending++;
    return true;
}

/* Posts one get per region per run of consecutive ids, then a flush of the endpoint. */
static void post_gets(struct kvx *x, struct kvx_xfer *xf)
{
    struct kvx_peer *p = xf->peer;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                               UCP_OP_ATTR_FIELD_USER_DATA |
                                               UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FLAG_MULTI_SEND,
                               .cb.send = on_op_done,
                               .user_data = xf};
    xf->bytes = 0;
    for (int32_t s = 0; s < xf->n;) {
        int32_t e = s + 1;
        while (e < xf->n && xf->remote[e] == xf->remote[e - 1] + 1 &&
               xf->local[e] == xf->local[e - 1] + 1) {
            e++;
        }
        size_t run = (size_t)(e - s) * x->block_bytes;
        uint64_t local_off = (uint64_t)xf->local[s] * x->block_bytes;
        uint64_t remote_off = (uint64_t)xf->remote[s] * x->block_bytes;
        for (int32_t r = 0; r < x->n_regions; r++) {
            prm.memh = x->memh[r];
            if (!op_posted(xf, ucp_get_nbx(p->ep, x->base[r] + local_off, run,
                                           p->bases[r] + remote_off, p->rkeys[r], &prm))) {
                return;
            }
            xf->bytes += run;
            xf->wire_bytes += run;
        }
        s = e;
    }
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    op_posted(xf, ucp_ep_flush_nbx(p->ep, &prm));
}

static void post_notify(struct kvx_xfer *xf)
{
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                               UCP_OP_ATTR_FIELD_USER_DATA |
                                               UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = UCP_AM_SEND_FLAG_EAGER,
                               .cb.send = on_op_done,
                               .user_data = xf};
    /* int8: the header (the staging id) releases the producer's staging */
    op_posted(xf, ucp_am_send_nbx(xf->peer->ep, KVX_AM_NOTIFY, xf->stg_release ? xf->stg_hdr : NULL,
                                  xf->stg_release ? sizeof(xf->stg_hdr) : 0, xf->msg,
                                  xf->msg ? xf->msg_len : 0, &prm));
}

/* int8: one get of the producer's whole staging into the local staging buffer, then a flush. */
static void post_staging_get(struct kvx *x, struct kvx_xfer *xf)
{
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.send = on_op_done,
                               .user_data = xf};
    if (op_posted(xf, ucp_get_nbx(xf->peer->ep, xf->stg, xf->stg_len, xf->stg_addr, xf->stg_rkey,
                                  &prm))) {
        xf->wire_bytes += xf->stg_len;
        op_posted(xf, ucp_ep_flush_nbx(xf->peer->ep, &prm));
    }
}

/* The blocks (of one region each) that failed their checksum, once more, then a flush. */
static void post_regets(struct kvx *x, struct kvx_xfer *xf)
{
    struct kvx_peer *p = xf->peer;
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.send = on_op_done,
                               .user_data = xf};
    for (int32_t b = 0; b < xf->n_bad; b++) {
        int32_t k = xf->bad[b], r = k / xf->n, i = k % xf->n;
        ucs_status_ptr_t sp;
        size_t len;
        if (x->wire_int8) {
            len = x->int8_block_bytes;
            sp = ucp_get_nbx(p->ep, xf->stg + (size_t)k * len, len,
                             xf->stg_addr + (uint64_t)k * len, xf->stg_rkey, &prm);
        } else {
            len = x->block_bytes;
            sp = ucp_get_nbx(p->ep, x->base[r] + (uint64_t)xf->local[i] * x->block_bytes, len,
                             p->bases[r] + (uint64_t)xf->remote[i] * x->block_bytes, p->rkeys[r],
                             &prm);
        }
        if (!op_posted(xf, sp)) {
            return;
        }
        xf->wire_bytes += len;
    }
    op_posted(xf, ucp_ep_flush_nbx(p->ep, &prm));
}

/* Compares what arrived with the producer's sums: every block after the first round, the
 * mismatched ones after a retry. Leaves the mismatches in bad / n_bad. */
static void verify_sums(struct kvx *x, struct kvx_xfer *xf)
{
    int32_t total = x->n_regions * xf->n, count = xf->stage == XFER_REGET ? xf->n_bad : total;
    int32_t n_bad = 0;
    for (int32_t b = 0; b < count; b++) {
        int32_t k = xf->stage == XFER_REGET ? xf->bad[b] : b, r = k / xf->n, i = k % xf->n;
        uint64_t h =
            x->wire_int8
                ? kvx_hash64(xf->stg + (size_t)k * x->int8_block_bytes, x->int8_block_bytes)
                : kvx_hash64(x->base[r] + (uint64_t)xf->local[i] * x->block_bytes, x->block_bytes);
        if (h != xf->sums[k]) {
            xf->bad[n_bad++] = k;
        }
    }
    xf->n_bad = n_bad;
}

/* kvx_debug_corrupt: flips a byte of the first block received, as a faulty transport would. */
static void debug_corrupt(struct kvx *x, struct kvx_xfer *xf)
{
    pthread_mutex_lock(&x->lock);
    int rounds = x->corrupt_rounds;
    if (rounds > 0) {
        x->corrupt_rounds--;
    }
    pthread_mutex_unlock(&x->lock);
    if (rounds != 0) {
        uint8_t *b = x->wire_int8 ? xf->stg : x->base[0] + (uint64_t)xf->local[0] * x->block_bytes;
        b[0] ^= 0x5a;
    }
}

/* Puts xf (in no list) on active or ready depending on whether it waits for UCX. */
static void xfer_park(struct kvx *x, struct kvx_xfer *xf)
{
    list_push_back(xf->pending || xf->awaiting_reply ? &x->active : &x->ready, &xf->node);
}

static int ext_send(struct kvx *x, struct kvx_peer *p, struct kvx_xfer *xf, char *err,
                    size_t errlen);

/* Starts the transfer of xf on the ready peer p. */
static void xfer_post(struct kvx *x, struct kvx_xfer *xf, struct kvx_peer *p)
{
    xf->peer = p;
    p->refs++;
    p->last_use = ++x->use_clock;
    xf->failure = UCS_OK;
    xf->t0_ns = tandem_now_ns();
    if (xf->is_pull) {
        for (int32_t i = 0; i < xf->n; i++) {
            if (xf->remote[i] >= p->num_blocks) {
                xfer_finish(x, xf, -EINVAL,
                            "remote block id %d out of range [1, %d) of engine %s (nothing moved)",
                            xf->remote[i], p->num_blocks, p->engine_id);
                return;
            }
        }
        xf->stage = x->wire_int8 ? XFER_PACK : XFER_GETS;
        char err[300];
        if ((x->block_checksum || x->wire_int8) && ext_send(x, p, xf, err, sizeof(err)) != 0) {
            xfer_finish(x, xf, -EIO, "%s", err);
            return;
        }
        if (xf->stage == XFER_GETS) {
            post_gets(x, xf); /* the checksums are computed meanwhile */
        }
    } else {
        xf->stage = XFER_NOTIFY;
        post_notify(xf);
    }
    xfer_park(x, xf);
}

/* A request whose operations all completed: next stage, retry or done. */
static void xfer_advance(struct kvx *x, struct kvx_xfer *xf)
{
    list_unlink(&xf->node);
    if (x->cancelling) {
        xfer_finish(x, xf, -ECANCELED, "kvx is shutting down");
        return;
    }
    struct kvx_peer *p = xf->peer;
    if (xf->expired && !xf->handshook && !xf->retried) {
        /* a cached endpoint that hangs: the producer may have been replaced under the same id
         * (a same-host endpoint without error handling cannot tell); one fresh handshake */
        log_warn("kvx: transfer from cached engine %s at %s:%d timed out; handshaking again",
                 xf->engine_id, xf->host, xf->port);
        peer_drop(x, p);
        xf->retried = true;
        xf->expired = false;
        xf->notified = false;
        peer_unref(x, p);
        xf->peer = NULL;
        xfer_ext_reset(x, xf);
        xfer_start(x, xf);
        return;
    }
    if (xf->expired) {
        xfer_finish(x, xf, -ETIMEDOUT, "%s to engine %s did not complete within %d ms",
                    xf->stage == XFER_NOTIFY ? "notification" : "transfer", xf->engine_id,
                    x->transfer_timeout_ms);
        return;
    }
    if (xf->failure != UCS_OK) {
        ucs_status_t st = xf->failure;
        peer_drop(x, p); /* its endpoint or keys are bad: the next request handshakes again */
        if (!xf->handshook && !xf->retried) {
            log_warn("kvx: transfer from cached engine %s at %s:%d failed (%s); handshaking again",
                     xf->engine_id, xf->host, xf->port, ucs_status_string(st));
            xf->retried = true;
            xf->notified = false;
            peer_unref(x, p);
            xf->peer = NULL;
            xfer_ext_reset(x, xf);
            xfer_start(x, xf);
            return;
        }
        xfer_finish(x, xf, ucs_to_errno(st), "%s to engine %s failed: %s",
                    xf->stage == XFER_NOTIFY ? "notification" : "transfer", xf->engine_id,
                    ucs_status_string(st));
        return;
    }
    if (!p->ep && xf->stage != XFER_NOTIFY) {
        xfer_finish(x, xf, -EIO, "the endpoint to engine %s was aborted", xf->engine_id);
        return;
    }
    if (xf->stage == XFER_PACK) {
        /* the producer packed the blocks (ext_reply): fetch its staging */
        xf->stage = XFER_GETS;
        post_staging_get(x, xf);
        xfer_park(x, xf);
        return;
    }
    if (xf->stage == XFER_GETS || xf->stage == XFER_REGET) {
        if (x->block_checksum) {
            debug_corrupt(x, xf);
            verify_sums(x, xf);
            if (xf->n_bad > 0 && xf->stage == XFER_GETS) {
                log_warn("kvx: pull from engine %s at %s:%d: %d block(s) failed their checksum; "
                         "fetching them again",
                         xf->engine_id, xf->host, xf->port, xf->n_bad);
                STAT_ADD(x, checksum_retries, (uint64_t)xf->n_bad);
                xf->stage = XFER_REGET;
                post_regets(x, xf);
                xfer_park(x, xf);
                return;
            }
            if (xf->n_bad > 0) {
                int32_t k = xf->bad[0], r = k / xf->n, i = k % xf->n;
                STAT_ADD(x, checksum_failures, 1);
                xfer_finish(x, xf, -EIO,
                            "block checksum mismatch after a retry: remote block %d (local %d) of "
                            "layer %d %s (region %d)%s",
                            xf->remote[i], xf->local[i], r / 2, r % 2 ? "V" : "K", r,
                            xf->n_bad > 1 ? ", and more" : "");
                return;
            }
        }
        if (x->wire_int8) {
            for (int32_t r = 0; r < x->n_regions; r++) {
                for (int32_t i = 0; i < xf->n; i++) {
                    size_t k = (size_t)r * (size_t)xf->n + (size_t)i;
                    kvx_int8_unpack(&x->layout, xf->stg + k * x->int8_block_bytes,
                                    x->base[r] + (uint64_t)xf->local[i] * x->block_bytes);
                }
            }
            xf->bytes = (uint64_t)xf->n * (uint64_t)x->n_regions * x->block_bytes;
        }
        if (xf->msg || xf->stg_release) {
            xf->stage = XFER_NOTIFY;
            post_notify(xf);
            xfer_park(x, xf);
            return;
        }
    }
    if (xf->stage == XFER_NOTIFY) {
        xf->notified = xf->msg != NULL;
    }
    xf->stage = XFER_DONE;
    xfer_finish(x, xf, 0, "%s", "");
}

/* ---- handshakes (kvx thread) ----------------------------------------------------------------- */

static void peer_fail_waiters(struct kvx *x, struct kvx_peer *p, int status, const char *msg)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&p->waiters, n, tmp)
    {
        xfer_finish(x, list_entry(n, struct kvx_xfer, node), status, "%s", msg);
    }
}

static void TANDEM_PRINTF(4, 5)
    handshake_fail(struct kvx *x, struct kvx_peer *p, int status, const char *fmt, ...)
{
    char reason[400], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof(msg), "handshake with engine %s at %s:%d: %s", p->engine_id, p->host,
             p->port, reason);
    STAT_ADD(x, handshake_failures, 1);
    p->refs++; /* keep p while its waiters finish */
    peer_fail_waiters(x, p, status, msg);
    peer_drop(x, p);
    peer_unref(x, p);
}

/* Returns a zero-padded copy of a blob for UCX (in x->pad_buf). */
static const void *padded(struct kvx *x, const uint8_t *p, size_t n)
{
    memset(x->pad_buf + n, 0, KVX_UCX_PAD);
    memcpy(x->pad_buf, p, n);
    return x->pad_buf;
}

/* Maps every page of [addr, addr + len) now (MADV_POPULATE_*, Linux 5.14), so that no transfer
 * pays a page fault per 4 KiB: first-touch faults made a pull of fresh blocks 10x slower than
 * one of warm ones. Writable: the memory is also allocated (and zeroed); a kernel without it is
 * left to fault lazily. */
static void populate(void *addr, size_t len, bool writable)
{
    uintptr_t page = 4096, off = (uintptr_t)addr & (page - 1);
    char *a = (char *)addr - off;
    size_t n = (len + off + page - 1) & ~(page - 1);
    if (madvise(a, n, writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) != 0) {
        log_debug("kvx: madvise(MADV_POPULATE_%s, %zu bytes): %s", writable ? "WRITE" : "READ", n,
                  strerror(errno));
    }
}

/* Where shared memory between two processes works: one kernel (boot id) and one IPC and PID
 * namespace (UCX's posix/sysv/cma transports need both). "" when /proc does not tell. */
static void host_ns_get(char *out, size_t cap)
{
    char boot[64] = "", ipc[64] = "", pid[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof(boot), f)) {
            boot[0] = '\0';
        }
        fclose(f);
        boot[strcspn(boot, "\r\n")] = '\0';
    }
    ssize_t n = readlink("/proc/self/ns/ipc", ipc, sizeof(ipc) - 1);
    ipc[n > 0 ? n : 0] = '\0';
    n = readlink("/proc/self/ns/pid", pid, sizeof(pid) - 1);
    pid[n > 0 ? n : 0] = '\0';
    out[0] = '\0';
    if (boot[0] && ipc[0] && pid[0]) {
        int w = snprintf(out, cap, "%s/%s/%s", boot, ipc, pid);
        if (w < 0 || (size_t)w >= cap) {
            out[0] = '\0'; /* unknown rather than cut */
        }
    }
}

/* Whether UCX_TLS (unset: every transport) lets UCX use shared memory ("sm", "shm", "posix",
 * "sysv", "all"; a "^" list excludes). */
static bool tls_allows_shm(const char *tls)
{
    if (!tls || !*tls) {
        return true;
    }
    static const char *const shm[] = {"sm", "shm", "mm", "posix", "sysv"};
    bool exclude = tls[0] == '^';
    char list[256];
    snprintf(list, sizeof(list), ",%s,", exclude ? tls + 1 : tls);
    bool named = strstr(list, ",all,") != NULL && !exclude;
    for (size_t i = 0; i < ARRAY_SIZE(shm) && !named; i++) {
        char item[16];
        snprintf(item, sizeof(item), ",%s,", shm[i]);
        named = strstr(list, item) != NULL;
    }
    return exclude ? !named : named;
}

/* Connects to a decoded, checked peer: endpoint and remote keys. */
static int peer_connect(struct kvx *x, struct kvx_peer *p, const struct kvx_agent_meta *m,
                        char *err, size_t errlen)
{
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = padded(x, m->worker_addr, m->worker_addr_len),
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = on_ep_error, .arg = x},
    };
    /* a producer on this host: no error handling, so that UCX may pick shared memory */
    bool same_host = x->shm_tls && x->host_ns[0] && strcmp(x->host_ns, m->host_ns) == 0;
    p->pid = same_host ? m->pid : 0;
    ucs_status_t st =
        same_host ? UCS_ERR_UNREACHABLE : ucp_ep_create(x->worker, &ep_params, &p->ep);
    p->err_peer = st == UCS_OK;
    if (same_host) {
        log_debug("kvx: engine %s at %s:%d shares this host's namespaces: shared memory allowed",
                  p->engine_id, p->host, p->port);
    } else if (st == UCS_ERR_UNREACHABLE) {
        /* no transport to this peer can detect its failure (UCX 1.13's shared memory; UCX logs
         * "no peer failure handler"): connect without error handling; the transfer timeout
         * still bounds every request */
        if (!x->warned_no_peer_errh) {
            log_warn("kvx: engine %s at %s:%d: no UCX transport with peer failure detection "
                     "(UCX_TLS=%s); connecting without error handling",
                     p->engine_id, p->host, p->port,
                     getenv("UCX_TLS") ? getenv("UCX_TLS") : "(unset)");
            x->warned_no_peer_errh = true;
        }
    }
    if (st == UCS_ERR_UNREACHABLE) {
        ep_params.field_mask &= ~(uint64_t)UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep_params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        ep_params.address = padded(x, m->worker_addr, m->worker_addr_len);
        st = ucp_ep_create(x->worker, &ep_params, &p->ep);
    }
    if (st != UCS_OK) {
        p->ep = NULL;
        return tandem_fail(err, errlen, -EIO, "cannot reach the remote worker: %s",
                           ucs_status_string(st));
    }
    p->rkeys = calloc((size_t)x->n_regions, sizeof(ucp_rkey_h));
    p->bases = malloc(sizeof(*p->bases) * (size_t)x->n_regions);
    if (!p->rkeys || !p->bases) {
        return tandem_fail(err, errlen, -ENOMEM, "out of memory");
    }
    for (int32_t r = 0; r < x->n_regions; r++) {
        st = ucp_ep_rkey_unpack(p->ep, padded(x, m->rkeys[r], m->rkey_lens[r]), &p->rkeys[r]);
        if (st != UCS_OK) {
            p->rkeys[r] = NULL;
            return tandem_fail(err, errlen, -EINVAL, "rkey of region %d rejected by UCX: %s", r,
                               ucs_status_string(st));
        }
        p->bases[r] = m->base_addrs[r];
        void *local = NULL;
        if (same_host && ucp_rkey_ptr(p->rkeys[r], m->base_addrs[r], &local) == UCS_OK) {
            /* the producer's region is mapped here (shared memory): map its pages now */
            populate(local, (size_t)m->block_lens[r] * (size_t)m->num_blocks, false);
        }
    }
    p->num_blocks = m->num_blocks;
    return 0;
}

/* Drops cached ready engines at p's address other than p: the address now belongs to another
 * engine. (A handshake in progress there finds out on its own.) */
static void drop_address(struct kvx *x, const struct kvx_peer *p)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&x->peers, n, tmp)
    {
        struct kvx_peer *q = list_entry(n, struct kvx_peer, node);
        if (q != p && q->cached && q->ready && q->port == p->port &&
            strcmp(q->host, p->host) == 0) {
            log_info("kvx: dropping cached engine %s: %s:%d now answers as another engine",
                     q->engine_id, q->host, q->port);
            peer_drop(x, q);
        }
    }
}

static void handshake_done(struct kvx *x, struct kvx_peer *p, const void *data, size_t len)
{
    char err[400];
    struct kvx_handshake hs;
    struct kvx_agent_meta m;
    if (kvx_wire_decode_handshake(data, len, &hs, err, sizeof(err)) != 0) {
        STAT_ADD(x, bad_messages, 1);
        handshake_fail(x, p, -EINVAL, "%s", err);
        return;
    }
    if (hs.error[0]) {
        handshake_fail(x, p, -EINVAL, "refused by the producer: %s", hs.error);
        return;
    }
    if (strcmp(hs.compat_hash, x->compat_hash) != 0) {
        if (x->enforce_compat) {
            handshake_fail(
                x, p, -EINVAL,
                "compatibility hash mismatch (remote %.12s..., local %.12s...): model, dtype "
                "or KV layout differ",
                hs.compat_hash, x->compat_hash);
            return;
        }
        log_warn("kvx: engine %s at %s:%d has compatibility hash %.12s..., this engine %.12s... "
                 "(not enforced)",
                 p->engine_id, p->host, p->port, hs.compat_hash, x->compat_hash);
    }
    if (kvx_wire_decode_agent_meta(hs.agent_metadata, hs.agent_metadata_len, &m, err,
                                   sizeof(err)) != 0) {
        STAT_ADD(x, bad_messages, 1);
        handshake_fail(x, p, -EINVAL, "%s", err);
        return;
    }
    if (strcmp(m.engine_id, p->engine_id) != 0) {
        char remote[KVX_ENGINE_ID_MAX + 1];
        snprintf(remote, sizeof(remote), "%s", m.engine_id);
        kvx_agent_meta_release(&m);
        drop_address(x, p);
        handshake_fail(x, p, -EINVAL,
                       "engine id mismatch: the side channel answers as engine %s (restarted, or "
                       "the address was reused)",
                       remote);
        return;
    }
    int rc = kvx_agent_meta_check(&m, &x->layout, err, sizeof(err));
    if (rc == 0) {
        rc = peer_connect(x, p, &m, err, sizeof(err));
    }
    int32_t num_blocks = m.num_blocks;
    kvx_agent_meta_release(&m);
    if (rc != 0) {
        handshake_fail(x, p, rc, "%s", err);
        return;
    }
    zmq_close(p->sock);
    p->sock = NULL;
    p->ready = true;
    STAT_ADD(x, handshakes, 1);
    log_info("kvx: handshake with engine %s at %s:%d: %d regions of %d blocks", p->engine_id,
             p->host, p->port, x->n_regions, num_blocks);
    struct list_node *n, *tmp;
    list_for_each_safe(&p->waiters, n, tmp)
    {
        struct kvx_xfer *xf = list_entry(n, struct kvx_xfer, node);
        list_unlink(&xf->node);
        xfer_post(x, xf, p);
    }
}

/* Receives one multipart message from sock without blocking: its first cap frames into part
 * (initialised; the caller closes them), the count of frames past cap (closed here) in *extra.
 * Returns the frames kept, 0 when nothing was waiting. */
static int recv_parts(void *sock, zmq_msg_t *part, int cap, int *extra)
{
    int n = 0;
    bool more = true;
    *extra = 0;
    while (more) {
        zmq_msg_t scratch;
        memset(&scratch, 0, sizeof(scratch));
        zmq_msg_t *m = n < cap ? &part[n] : &scratch;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(m);
            break;
        }
        more = zmq_msg_more(m);
        if (n < cap) {
            n++;
        } else {
            (*extra)++;
            zmq_msg_close(m);
        }
    }
    return n;
}

/* Reads the reply on a handshaking peer's DEALER: ["", payload] (or [payload]). */
static void handshake_read(struct kvx *x, struct kvx_peer *p)
{
    zmq_msg_t part[2];
    int extra = 0;
    int n = recv_parts(p->sock, part, 2, &extra);
    if (n == 0) {
        return; /* nothing after all */
    }
    zmq_msg_t *payload = &part[n - 1];
    if (extra || (n == 2 && zmq_msg_size(&part[0]) != 0)) {
        STAT_ADD(x, bad_messages, 1);
        handshake_fail(x, p, -EINVAL, "malformed side-channel reply (%d frames)", n + extra);
    } else {
        handshake_done(x, p, zmq_msg_data(payload), zmq_msg_size(payload));
    }
    for (int i = 0; i < n; i++) {
        zmq_msg_close(&part[i]);
    }
}

static struct kvx_peer *peer_new(struct kvx *x, const struct kvx_xfer *xf, char *err, size_t errlen)
{
    if (x->n_cached >= KVX_MAX_PEERS && !peer_evict_one(x)) {
        tandem_set_err(err, errlen, "%d remote engines busy; none can be evicted", KVX_MAX_PEERS);
        return NULL;
    }
    struct kvx_peer *p = calloc(1, sizeof(*p));
    if (!p) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(p->engine_id, sizeof(p->engine_id), "%s", xf->engine_id);
    snprintf(p->host, sizeof(p->host), "%s", xf->host);
    p->port = xf->port;
    list_init(&p->waiters);
    char endpoint[KVX_HOST_MAX + 32];
    bool v6 = strchr(p->host, ':') != NULL;
    snprintf(endpoint, sizeof(endpoint), v6 ? "tcp://[%s]:%d" : "tcp://%s:%d", p->host, p->port);
    int zero = 0, one = 1;
    int64_t max = KVX_REPLY_MAX + 4096;
    size_t req_len = 0;
    void *req = kvx_wire_encode_request(0, &req_len);
    p->sock = zmq_socket(x->zctx, ZMQ_DEALER);
    if (!req || !p->sock || zmq_setsockopt(p->sock, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(p->sock, ZMQ_MAXMSGSIZE, &max, sizeof(max)) != 0 ||
        (v6 && zmq_setsockopt(p->sock, ZMQ_IPV6, &one, sizeof(one)) != 0) ||
        zmq_connect(p->sock, endpoint) != 0 ||
        zmq_send(p->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) != 0 ||
        zmq_send(p->sock, req, req_len, ZMQ_DONTWAIT) != (int)req_len) {
        tandem_set_err(err, errlen, "side channel %s: %s", endpoint,
                       req ? zmq_strerror(zmq_errno()) : "out of memory");
        free(req);
        if (p->sock) {
            zmq_close(p->sock);
        }
        free(p);
        return NULL;
    }
    free(req);
    p->deadline_ms = tandem_now_ms() + x->handshake_timeout_ms;
    p->cached = true;
    p->refs = 1;
    list_push_back(&x->peers, &p->node);
    x->n_cached++;
    return p;
}

/* ---- Tandem extensions, consumer side (kvx thread) ------------------------------------------- */

/* Sends xf's tandem_blocks request on p's extension DEALER (connected on first use). */
static int ext_send(struct kvx *x, struct kvx_peer *p, struct kvx_xfer *xf, char *err,
                    size_t errlen)
{
    char endpoint[KVX_HOST_MAX + 32];
    bool v6 = strchr(p->host, ':') != NULL;
    snprintf(endpoint, sizeof(endpoint), v6 ? "tcp://[%s]:%d" : "tcp://%s:%d", p->host, p->port);
    if (!p->ext_sock) {
        int zero = 0, one = 1;
        int64_t max = KVX_REPLY_MAX + 4096;
        p->ext_sock = zmq_socket(x->zctx, ZMQ_DEALER);
        if (!p->ext_sock || zmq_setsockopt(p->ext_sock, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
            zmq_setsockopt(p->ext_sock, ZMQ_MAXMSGSIZE, &max, sizeof(max)) != 0 ||
            (v6 && zmq_setsockopt(p->ext_sock, ZMQ_IPV6, &one, sizeof(one)) != 0) ||
            zmq_connect(p->ext_sock, endpoint) != 0) {
            tandem_set_err(err, errlen, "side channel %s: %s", endpoint, zmq_strerror(zmq_errno()));
            if (p->ext_sock) {
                zmq_close(p->ext_sock);
                p->ext_sock = NULL;
            }
            return -EIO;
        }
    }
    struct kvx_blocks_request br = {.seq = ++x->ext_seq,
                                    .sums = x->block_checksum,
                                    .int8 = x->wire_int8,
                                    .n = xf->n,
                                    .blocks = xf->remote};
    size_t len = 0;
    void *req = kvx_wire_encode_blocks_request(&br, &len);
    if (!req || zmq_send(p->ext_sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) != 0 ||
        zmq_send(p->ext_sock, req, len, ZMQ_DONTWAIT) != (int)len) {
        tandem_set_err(err, errlen, "side channel %s: %s request not sent: %s", endpoint,
                       KVX_BLOCKS_MSG, req ? zmq_strerror(zmq_errno()) : "out of memory");
        free(req);
        return -EIO;
    }
    free(req);
    xf->ext_seq = br.seq;
    xf->awaiting_reply = true;
    return 0;
}

static const char *ext_what(const struct kvx *x)
{
    return x->wire_int8 && x->block_checksum ? "int8 wire compression and block checksums"
           : x->wire_int8                    ? "int8 wire compression"
                                             : "block checksums";
}

/* The remote key of the staging of rep into xf->stg_rkey: from p's cache (whose mapping of the
 * staging is populated), else unpacked and cached, else (cache full) unpacked for xf alone. */
static int stg_key_get(struct kvx *x, struct kvx_peer *p, struct kvx_xfer *xf,
                       const struct kvx_blocks_reply *rep)
{
    struct kvx_stg_key *key = NULL;
    for (int k = 0; k < p->n_stg_keys && !key; k++) {
        struct kvx_stg_key *c = &p->stg_keys[k];
        if (c->addr == rep->staging_addr && c->blob_len == rep->staging_rkey_len &&
            memcmp(c->blob, rep->staging_rkey, c->blob_len) == 0) {
            key = c;
        }
    }
    if (!key) {
        ucp_rkey_h rkey;
        ucs_status_t st =
            ucp_ep_rkey_unpack(p->ep, padded(x, rep->staging_rkey, rep->staging_rkey_len), &rkey);
        if (st != UCS_OK) {
            log_warn("kvx: engine %s: staging rkey rejected by UCX: %s", p->engine_id,
                     ucs_status_string(st));
            return -EIO;
        }
        if (!p->stg_keys) {
            p->stg_keys = calloc(KVX_STG_KEYS, sizeof(*p->stg_keys));
        }
        uint8_t *blob =
            p->stg_keys && p->n_stg_keys < KVX_STG_KEYS ? malloc(rep->staging_rkey_len) : NULL;
        if (!blob) {
            xf->stg_rkey = rkey;
            xf->stg_rkey_owned = true;
            return 0;
        }
        memcpy(blob, rep->staging_rkey, rep->staging_rkey_len);
        key = &p->stg_keys[p->n_stg_keys++];
        *key = (struct kvx_stg_key){.addr = rep->staging_addr,
                                    .blob = blob,
                                    .blob_len = rep->staging_rkey_len,
                                    .rkey = rkey};
    }
    void *local = NULL;
    if (key->populated < rep->staging_len &&
        ucp_rkey_ptr(key->rkey, rep->staging_addr, &local) == UCS_OK) {
        populate(local, rep->staging_len, false); /* shared memory: mapped here */
        key->populated = rep->staging_len;
    }
    xf->stg_rkey = key->rkey;
    xf->stg_rkey_owned = false;
    return 0;
}

/* The producer answered xf's tandem_blocks request. */
static void ext_reply(struct kvx *x, struct kvx_xfer *xf, const struct kvx_blocks_reply *rep)
{
    struct kvx_peer *p = xf->peer;
    size_t nk = (size_t)x->n_regions * (size_t)xf->n;
    xf->awaiting_reply = false;
    if (rep->foreign) {
        xfer_finish(x, xf, -EINVAL,
                    "engine %s at %s:%d does not support Tandem's %s: it answered the %s request "
                    "with its handshake (a vLLM engine?); turn the option off or pull from a "
                    "Tandem engine",
                    xf->engine_id, xf->host, xf->port, ext_what(x), KVX_BLOCKS_MSG);
        return;
    }
    if (rep->error[0]) {
        xfer_finish(x, xf, -EINVAL, "engine %s at %s:%d refused %s: %s%s", xf->engine_id, xf->host,
                    xf->port, ext_what(x), rep->error,
                    rep->has_seq ? "" : " (a kvx without Tandem's extensions?)");
        return;
    }
    if (!p->ep || p->failed) {
        xfer_finish(x, xf, -EIO, "the endpoint to engine %s failed", xf->engine_id);
        return;
    }
    if (x->block_checksum) {
        size_t sums_bytes = nk * sizeof(*xf->sums);
        if (nk == 0 || sums_bytes == 0 || rep->sums_len != sums_bytes) {
            xfer_finish(x, xf, -EINVAL, "engine %s sent %zu bytes of checksums, %zu expected",
                        xf->engine_id, rep->sums_len, sums_bytes);
            return;
        }
        xf->sums = malloc(sums_bytes);
        xf->bad = calloc(nk, sizeof(*xf->bad));
        if (!xf->sums || !xf->bad) {
            xfer_finish(x, xf, -ENOMEM, "out of memory");
            return;
        }
        memcpy(xf->sums, rep->sums, sums_bytes); /* little-endian, as this host */
    }
    if (x->wire_int8) {
        if (!rep->has_staging || rep->staging_len != nk * x->int8_block_bytes) {
            xfer_finish(x, xf, -EINVAL,
                        "engine %s: int8 staging of %" PRIu64 " bytes, %zu expected", xf->engine_id,
                        rep->has_staging ? rep->staging_len : 0, nk * x->int8_block_bytes);
            return;
        }
        int rc = stg_key_get(x, p, xf, rep);
        if (rc != 0) {
            xfer_finish(x, xf, rc, "engine %s: staging rkey rejected by UCX", xf->engine_id);
            return;
        }
        xf->stg = stg_take(x, rep->staging_len, &xf->stg_cap);
        if (!xf->stg) {
            xfer_finish(x, xf, -ENOMEM, "out of memory for %" PRIu64 " bytes of staging",
                        rep->staging_len);
            return;
        }
        xf->stg_len = rep->staging_len;
        xf->stg_addr = rep->staging_addr;
        xf->stg_id = rep->staging_id;
        for (int b = 0; b < 8; b++) {
            xf->stg_hdr[b] = (uint8_t)(rep->staging_id >> (8 * b));
        }
        xf->stg_release = true;
    }
    /* run_ucx moves it on once its gets (if any) are done too */
}

/* Reads answers on p's extension DEALER: ["", payload]. */
static void ext_read(struct kvx *x, struct kvx_peer *p)
{
    p->refs++; /* a request that finishes here may hold p's last reference */
    for (int handled = 0; handled < 64; handled++) {
        zmq_msg_t part[2];
        int extra = 0;
        int n = recv_parts(p->ext_sock, part, 2, &extra);
        if (n == 0) {
            break;
        }
        char err[300] = "";
        struct kvx_blocks_reply rep = {.has_seq = false};
        int rc = -EINVAL;
        if (extra || (n == 2 && zmq_msg_size(&part[0]) != 0)) {
            snprintf(err, sizeof(err), "malformed side-channel reply (%d frames)", n + extra);
        } else {
            rc = kvx_wire_decode_blocks_reply(zmq_msg_data(&part[n - 1]),
                                              zmq_msg_size(&part[n - 1]), &rep, err, sizeof(err));
        }
        /* the request it answers: by seq, else the oldest one out to p */
        struct kvx_xfer *xf = NULL;
        struct list_node *node, *tmp;
        list_for_each_safe(&x->active, node, tmp)
        {
            struct kvx_xfer *c = list_entry(node, struct kvx_xfer, node);
            if (c->peer == p && c->awaiting_reply &&
                (rc != 0 || !rep.has_seq ? !xf || c->ext_seq < xf->ext_seq
                                         : c->ext_seq == rep.seq)) {
                xf = c;
            }
        }
        if (rc != 0) {
            STAT_ADD(x, bad_messages, 1);
        }
        if (!xf) {
            log_info("kvx: engine %s at %s:%d: an answer to no %s request in progress (late?)",
                     p->engine_id, p->host, p->port, KVX_BLOCKS_MSG);
        } else if (rc != 0) {
            xf->awaiting_reply = false;
            xfer_finish(x, xf, -EINVAL, "engine %s: %s", xf->engine_id, err);
        } else {
            ext_reply(x, xf, &rep);
        }
        for (int i = 0; i < n; i++) {
            zmq_msg_close(&part[i]);
        }
    }
    peer_unref(x, p);
}

/* Takes a request from the queue (or a retry): to its peer's handshake, or straight to UCX. */
static void xfer_start(struct kvx *x, struct kvx_xfer *xf)
{
    struct kvx_peer *p = peer_find(x, xf->engine_id);
    /* a ready engine now named at another address, or failed, is dropped; a handshake in
     * progress is joined whatever address this request names */
    if (p && p->ready && p->pid > 0 && kill((pid_t)p->pid, 0) != 0 && errno == ESRCH) {
        /* a same-host producer is gone: its endpoint cannot tell (no error handling) */
        log_info("kvx: engine %s at %s:%d has exited; handshaking again", p->engine_id, p->host,
                 p->port);
        p->failed = true;
    }
    if (p && p->ready && (p->failed || p->port != xf->port || strcmp(p->host, xf->host) != 0)) {
        peer_drop(x, p);
        p = NULL;
    }
    if (!p) {
        char err[300];
        p = peer_new(x, xf, err, sizeof(err));
        if (!p) {
            STAT_ADD(x, handshake_failures, 1);
            xfer_finish(x, xf, -EIO, "%s", err);
            return;
        }
    }
    if (!p->ready) {
        xf->handshook = true;
        list_push_back(&p->waiters, &xf->node);
        return;
    }
    xfer_post(x, xf, p);
}

static void expire_handshakes(struct kvx *x, int64_t now_ms)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&x->peers, n, tmp)
    {
        struct kvx_peer *p = list_entry(n, struct kvx_peer, node);
        if (p->sock && now_ms >= p->deadline_ms) {
            handshake_fail(x, p, -ETIMEDOUT,
                           "no answer on the side channel within %d ms (is the producer up?)",
                           x->handshake_timeout_ms);
        }
    }
}

/* Requests whose UCX part outlived the transfer timeout: their peers are aborted (which completes
 * the operations with UCS_ERR_CANCELED); a request UCX still holds after that is reported now. */
static void expire_transfers(struct kvx *x, int64_t now_ns)
{
    int64_t limit = (int64_t)x->transfer_timeout_ms * 1000000;
    bool any = false;
    struct list_node *n, *tmp;
    list_for_each_safe(&x->active, n, tmp)
    {
        struct kvx_xfer *xf = list_entry(n, struct kvx_xfer, node);
        if (xf->awaiting_reply && xf->pending == 0 && now_ns - xf->t0_ns > limit) {
            xfer_finish(x, xf, -ETIMEDOUT,
                        "engine %s did not answer the %s request within %d ms (a producer "
                        "without Tandem's %s?)",
                        xf->engine_id, KVX_BLOCKS_MSG, x->transfer_timeout_ms, ext_what(x));
            continue;
        }
        if (xf->pending > 0 && now_ns - xf->t0_ns > limit) {
            xf->expired = true;
            any = true;
            if (xf->peer->ep) {
                log_warn("kvx: transfer to engine %s at %s:%d hangs; aborting the endpoint",
                         xf->engine_id, xf->host, xf->port);
                peer_abort(x, xf->peer);
            }
        }
    }
    if (!any) {
        return;
    }
    while (ucp_worker_progress(x->worker)) {
    }
    list_for_each_safe(&x->active, n, tmp)
    {
        struct kvx_xfer *xf = list_entry(n, struct kvx_xfer, node);
        if (xf->expired && xf->pending > 0) {
            xfer_finish(x, xf, -ETIMEDOUT,
                        "transfer to engine %s did not complete within %d ms (endpoint aborted)",
                        xf->engine_id, x->transfer_timeout_ms);
        }
    }
}

/* ---- the side channel, producer side (kvx thread) -------------------------------------------- */

static void router_reply(struct kvx *x, zmq_msg_t *identity, bool delimiter, const void *body,
                         size_t len)
{
    if (zmq_send(x->router, zmq_msg_data(identity), zmq_msg_size(identity),
                 ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        (delimiter && zmq_send(x->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) ||
        zmq_send(x->router, body, len, ZMQ_DONTWAIT) < 0) {
        log_warn("kvx: side-channel reply not sent: %s", zmq_strerror(zmq_errno()));
    }
}

static void router_refuse(struct kvx *x, zmq_msg_t *identity, bool delimiter, const char *why)
{
    size_t len = 0;
    void *body = kvx_wire_encode_refusal(why, &len);
    log_warn("kvx: bad side-channel request: %s", why);
    pthread_mutex_lock(&x->lock);
    x->stats.bad_messages++;
    pthread_mutex_unlock(&x->lock);
    if (body) {
        router_reply(x, identity, delimiter, body, len);
        free(body);
    }
}

/* ---- Tandem extensions, producer side (kvx thread) ------------------------------------------- */

static void staging_unmap(struct kvx *x, struct kvx_staging *st)
{
    if (st->rkey) {
        ucp_rkey_buffer_release(st->rkey);
    }
    if (st->memh) {
        ucp_mem_unmap(x->ctx, st->memh);
        x->staging_mapped -= st->cap;
    }
    memset(st, 0, sizeof(*st));
}

/* Maps a staging buffer of cap bytes into the empty slot st (UCX-allocated: shared memory that a
 * consumer on this host gets one-sided). */
static int staging_map(struct kvx *x, struct kvx_staging *st, size_t cap, char *err, size_t errlen)
{
    ucp_mem_map_params_t mp = {.field_mask =
                                   UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS,
                               .length = cap,
                               .flags = UCP_MEM_MAP_ALLOCATE};
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ucs_status_t s = ucp_mem_map(x->ctx, &mp, &st->memh);
    if (s != UCS_OK) {
        st->memh = NULL;
        return tandem_fail(err, errlen, -ENOMEM, "cannot allocate %zu bytes of staging: %s", cap,
                           ucs_status_string(s));
    }
    st->cap = cap;
    x->staging_mapped += cap;
    s = ucp_mem_query(st->memh, &attr);
    if (s == UCS_OK) {
        st->base = attr.address;
        s = ucp_rkey_pack(x->ctx, st->memh, &st->rkey, &st->rkey_len);
    }
    if (s != UCS_OK || st->rkey_len == 0 || st->rkey_len > KVX_BLOB_MAX) {
        if (s != UCS_OK) {
            st->rkey = NULL;
        }
        staging_unmap(x, st);
        return tandem_fail(err, errlen, -EIO, "staging registration: %s", ucs_status_string(s));
    }
    populate(st->base, cap, true);
    return 0;
}

/* Lends a staging buffer of at least need bytes: an idle one that fits, else a new one (idle
 * ones are unmapped to stay within KVX_STAGING_MAX). The slot index, or -1 with a message. */
static int staging_acquire(struct kvx *x, size_t need, char *err, size_t errlen)
{
    int best = -1, empty = -1;
    for (int s = 0; s < KVX_STAGING_SLOTS; s++) {
        struct kvx_staging *st = &x->staging[s];
        if (st->busy) {
            continue;
        }
        if (st->memh && st->cap >= need && (best < 0 || st->cap < x->staging[best].cap)) {
            best = s;
        }
        if (!st->memh && empty < 0) {
            empty = s;
        }
    }
    if (best < 0) {
        for (int s = 0; s < KVX_STAGING_SLOTS && x->staging_mapped + need > KVX_STAGING_MAX; s++) {
            if (!x->staging[s].busy && x->staging[s].memh) {
                staging_unmap(x, &x->staging[s]);
            }
        }
        for (int s = 0; s < KVX_STAGING_SLOTS && empty < 0; s++) {
            if (!x->staging[s].busy) {
                staging_unmap(x, &x->staging[s]); /* the smaller idle buffer makes room */
                empty = s;
            }
        }
        if (empty < 0) {
            tandem_set_err(err, errlen, "all %d int8 staging buffers are lent (busy)",
                           KVX_STAGING_SLOTS);
            return -1;
        }
        if (x->staging_mapped + need > KVX_STAGING_MAX) {
            tandem_set_err(err, errlen,
                           "%zu bytes of int8 staging would pass the %llu-byte cap (%" PRIu64
                           " lent)",
                           need, (unsigned long long)KVX_STAGING_MAX, x->staging_mapped);
            return -1;
        }
        size_t cap = (need + 4095) & ~(size_t)4095;
        if (staging_map(x, &x->staging[empty], cap, err, errlen) != 0) {
            return -1;
        }
        best = empty;
    }
    struct kvx_staging *st = &x->staging[best];
    st->busy = true;
    st->id = (++x->staging_gen << 8) | (uint64_t)best;
    st->deadline_ms = tandem_now_ms() + 2 * (int64_t)x->transfer_timeout_ms;
    STAT_ADD(x, staging_in_use, 1);
    return best;
}

/* A consumer is done with staging id (its notification's header). */
static void staging_release(struct kvx *x, uint64_t id)
{
    uint64_t slot = id & 0xff;
    struct kvx_staging *st = slot < KVX_STAGING_SLOTS ? &x->staging[slot] : NULL;
    if (!st || !st->busy || st->id != id) {
        log_info("kvx: release of staging %" PRIu64 ", which is not lent (expired?)", id);
        return;
    }
    st->busy = false;
    STAT_ADD(x, staging_in_use, (uint64_t)-1);
}

static void expire_staging(struct kvx *x, int64_t now_ms)
{
    for (int s = 0; s < KVX_STAGING_SLOTS; s++) {
        struct kvx_staging *st = &x->staging[s];
        if (st->busy && now_ms >= st->deadline_ms) {
            log_warn("kvx: int8 staging %" PRIu64 " not released within %d ms; reclaimed", st->id,
                     2 * x->transfer_timeout_ms);
            st->busy = false;
            pthread_mutex_lock(&x->lock);
            x->stats.staging_in_use--;
            x->stats.staging_expired++;
            pthread_mutex_unlock(&x->lock);
        }
    }
}

static void router_reply(struct kvx *x, zmq_msg_t *identity, bool delimiter, const void *body,
                         size_t len);

static void TANDEM_PRINTF(5, 6) blocks_refuse(struct kvx *x, zmq_msg_t *identity, bool delimiter,
                                              uint64_t seq, const char *fmt, ...)
{
    struct kvx_blocks_reply rep = {.has_seq = true, .seq = seq};
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(rep.error, sizeof(rep.error), fmt, ap);
    va_end(ap);
    log_warn("kvx: %s request refused: %s", KVX_BLOCKS_MSG, rep.error);
    size_t len = 0;
    void *body = kvx_wire_encode_blocks_reply(&rep, &len);
    if (body) {
        router_reply(x, identity, delimiter, body, len);
        free(body);
    }
}

/* Answers a tandem_blocks request: the checksums of the blocks, and/or the blocks packed as int8
 * into a staging buffer lent until the consumer's notification (or the timeout). */
static void serve_blocks(struct kvx *x, zmq_msg_t *identity, bool delimiter,
                         const struct kvx_blocks_request *br)
{
    size_t nk = (size_t)x->n_regions * (size_t)br->n;
    if (br->tp_rank < 0 || br->tp_rank >= x->tp_size) {
        blocks_refuse(x, identity, delimiter, br->seq, "tp_rank %" PRId64 " out of range [0, %d)",
                      br->tp_rank, x->tp_size);
        return;
    }
    if ((br->int8 || br->sums) && x->memory == KVX_MEM_CUDA) {
        blocks_refuse(x, identity, delimiter, br->seq,
                      "this engine's KV cache is in GPU memory: %s read blocks on the host; ask "
                      "for the native wire format without checksums",
                      br->int8 ? "int8 wire compression" : "block checksums");
        return;
    }
    if (br->int8 && x->layout.dtype_bytes != 2) {
        blocks_refuse(x, identity, delimiter, br->seq,
                      "wire_dtype int8 needs an F16 KV cache; this engine's has %d-byte elements",
                      x->layout.dtype_bytes);
        return;
    }
    if (br->sums && nk * 8 > KVX_REPLY_MAX - 4096) {
        blocks_refuse(x, identity, delimiter, br->seq, "%d blocks: too many checksums for a reply",
                      br->n);
        return;
    }
    uint8_t *sums = br->sums && nk > 0 ? malloc(nk * 8) : NULL; /* the decoder wants n >= 1 */
    if (br->sums && !sums) {
        blocks_refuse(x, identity, delimiter, br->seq, "out of memory");
        return;
    }
    struct kvx_blocks_reply rep = {.has_seq = true, .seq = br->seq};
    char err[256];
    for (int32_t r = 0; r < x->n_regions && !br->int8 && sums; r++) {
        for (int32_t i = 0; i < br->n; i++) {
            uint64_t h =
                kvx_hash64(x->base[r] + (uint64_t)br->blocks[i] * x->block_bytes, x->block_bytes);
            memcpy(sums + ((size_t)r * (size_t)br->n + (size_t)i) * 8, &h, 8);
        }
    }
    if (br->int8) {
        size_t pbb = kvx_int8_block_bytes(&x->layout);
        int s = staging_acquire(x, nk * pbb, err, sizeof(err));
        if (s < 0) {
            free(sums);
            blocks_refuse(x, identity, delimiter, br->seq, "%s", err);
            return;
        }
        struct kvx_staging *st = &x->staging[s];
        for (int32_t r = 0; r < x->n_regions; r++) {
            for (int32_t i = 0; i < br->n; i++) {
                size_t k = (size_t)r * (size_t)br->n + (size_t)i;
                kvx_int8_pack(&x->layout, x->base[r] + (uint64_t)br->blocks[i] * x->block_bytes,
                              st->base + k * pbb);
                if (sums) {
                    uint64_t h = kvx_hash64(st->base + k * pbb, pbb);
                    memcpy(sums + k * 8, &h, 8);
                }
            }
        }
        rep.has_staging = true;
        rep.staging_id = st->id;
        rep.staging_addr = (uint64_t)(uintptr_t)st->base;
        rep.staging_len = nk * pbb;
        rep.staging_rkey = st->rkey;
        rep.staging_rkey_len = st->rkey_len;
    }
    rep.sums = sums;
    rep.sums_len = sums ? nk * 8 : 0;
    size_t len = 0;
    void *body = kvx_wire_encode_blocks_reply(&rep, &len);
    free(sums);
    if (!body) {
        if (rep.has_staging) {
            staging_release(x, rep.staging_id);
        }
        blocks_refuse(x, identity, delimiter, br->seq, "out of memory");
        return;
    }
    router_reply(x, identity, delimiter, body, len);
    free(body);
    STAT_ADD(x, blocks_requests_served, 1);
}

/* One request: [identity, "", payload] from a REQ (vLLM), [identity, payload] from a DEALER. */
static void router_handle(struct kvx *x, zmq_msg_t *part, int n, int extra)
{
    bool delimiter = n >= 3 && zmq_msg_size(&part[1]) == 0;
    int payloads = n + extra - 1 - (delimiter ? 1 : 0);
    if (payloads != 1) {
        char why[64];
        snprintf(why, sizeof(why), "expected one message frame, got %d", payloads);
        router_refuse(x, &part[0], delimiter, why);
        return;
    }
    zmq_msg_t *payload = &part[n - 1];
    char err[256];
    int64_t tp_rank;
    struct kvx_blocks_request br;
    int rc = kvx_wire_decode_blocks_request(zmq_msg_data(payload), zmq_msg_size(payload),
                                            x->layout.num_blocks, &br, err, sizeof(err));
    if (rc == 0) {
        serve_blocks(x, &part[0], delimiter, &br);
        kvx_blocks_request_release(&br);
        return;
    }
    if (rc != -ENOENT) {
        router_refuse(x, &part[0], delimiter, err);
        return;
    }
    if (kvx_wire_decode_request(zmq_msg_data(payload), zmq_msg_size(payload), &tp_rank, err,
                                sizeof(err)) != 0) {
        router_refuse(x, &part[0], delimiter, err);
        return;
    }
    if (tp_rank < 0 || tp_rank >= x->tp_size) {
        snprintf(err, sizeof(err), "tp_rank %" PRId64 " out of range [0, %d)", tp_rank, x->tp_size);
        router_refuse(x, &part[0], delimiter, err);
        return;
    }
    router_reply(x, &part[0], delimiter, x->reply, x->reply_len);
    STAT_ADD(x, metadata_served, 1);
}

static void serve_router(struct kvx *x)
{
    for (int handled = 0; handled < 64; handled++) {
        zmq_msg_t part[3];
        int extra = 0;
        int n = recv_parts(x->router, part, 3, &extra);
        if (n == 0) {
            return;
        }
        if (n >= 2) {
            router_handle(x, part, n, extra);
        }
        for (int i = 0; i < n; i++) {
            zmq_msg_close(&part[i]);
        }
    }
}

static ucs_status_t on_am_notify(void *arg, const void *header, size_t header_length, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    struct kvx *x = arg;
    if (header_length == 8) { /* int8: the staging id (Tandem extension) */
        uint64_t id = 0;
        for (int b = 0; b < 8; b++) {
            id |= (uint64_t)((const uint8_t *)header)[b] << (8 * b);
        }
        staging_release(x, id);
        if (length == 0) {
            return UCS_OK; /* a release alone */
        }
    } else if (header_length != 0) {
        log_warn("kvx: dropped a notification with a %zu-byte header", header_length);
        STAT_ADD(x, bad_messages, 1);
        return UCS_OK;
    }
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length > KVX_NOTIFY_MAX) {
        log_warn("kvx: dropped a notification of %zu bytes (at most %d, eager)", length,
                 KVX_NOTIFY_MAX);
        STAT_ADD(x, bad_messages, 1);
        return UCS_OK;
    }
    char msg[KVX_NOTIFY_MAX + 1];
    if (length) {
        memcpy(msg, data, length);
    }
    msg[length] = '\0';
    STAT_ADD(x, notifications_received, 1);
    if (x->on_notify) {
        x->on_notify(x->ud, msg, length);
    }
    return UCS_OK;
}

/* ---- the loop (kvx thread) ------------------------------------------------------------------- */

/* Progresses UCX and moves every request whose operations completed. */
static void run_ucx(struct kvx *x)
{
    for (int round = 0; round < 64; round++) {
        unsigned progressed = 0;
        while (progressed < 100000 && ucp_worker_progress(x->worker)) {
            progressed++;
        }
        bool moved = false;
        if (x->peer_failed) {
            x->peer_failed = false;
            struct list_node *n, *tmp;
            list_for_each_safe(&x->peers, n, tmp)
            {
                struct kvx_peer *p = list_entry(n, struct kvx_peer, node);
                if (p->failed) {
                    peer_drop(x, p);
                }
            }
        }
        struct list_node *n, *tmp;
        list_for_each_safe(&x->active, n, tmp)
        {
            struct kvx_xfer *xf = list_entry(n, struct kvx_xfer, node);
            if (xf->pending == 0 && !xf->awaiting_reply) {
                list_unlink(&xf->node);
                list_push_back(&x->ready, &xf->node);
            }
        }
        while (!list_empty(&x->ready)) {
            xfer_advance(x, list_entry(list_first(&x->ready), struct kvx_xfer, node));
            moved = true;
        }
        if (!moved && progressed == 0) {
            break;
        }
    }
    struct list_node *n, *tmp;
    list_for_each_safe(&x->zombies, n, tmp)
    {
        struct kvx_xfer *xf = list_entry(n, struct kvx_xfer, node);
        if (xf->pending == 0) {
            list_unlink(&xf->node);
            xfer_ext_reset(x, xf);
            free(xf);
        }
    }
    reap_closing(x);
}

/* Takes the queued requests; false once kvx_free has begun (they stay queued for shutdown). */
static bool take_queue(struct kvx *x)
{
    uint64_t v;
    struct list_node q;
    list_init(&q);
    if (read(x->event_fd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
        log_warn("kvx: eventfd read: %s", strerror(errno));
    }
    pthread_mutex_lock(&x->lock);
    bool stopping = x->stopping;
    while (!stopping && !list_empty(&x->queue)) {
        struct list_node *n = list_first(&x->queue);
        list_unlink(n);
        list_push_back(&q, n);
    }
    pthread_mutex_unlock(&x->lock);
    while (!list_empty(&q)) {
        struct list_node *n = list_first(&q);
        list_unlink(n);
        xfer_start(x, list_entry(n, struct kvx_xfer, node));
    }
    return !stopping;
}

/* Sleeps until a side-channel message, queued work, a UCX event or a handshake deadline; with
 * transfers in flight it wakes at least every millisecond. */
static void wait_events(struct kvx *x)
{
    zmq_pollitem_t items[3 + 2 * KVX_MAX_PEERS];
    struct kvx_peer *hs[KVX_MAX_PEERS], *ext[KVX_MAX_PEERS];
    int n = 0, nhs = 0, next = 0;
    long timeout = -1;
    int64_t now = tandem_now_ms();
    items[n++] = (zmq_pollitem_t){.fd = x->event_fd, .events = ZMQ_POLLIN};
    items[n++] = (zmq_pollitem_t){.fd = x->ucx_fd, .events = ZMQ_POLLIN};
    int router_item = -1;
    if (x->router) {
        router_item = n;
        items[n++] = (zmq_pollitem_t){.socket = x->router, .events = ZMQ_POLLIN};
    }
    struct list_node *node, *tmp;
    list_for_each_safe(&x->peers, node, tmp)
    {
        struct kvx_peer *p = list_entry(node, struct kvx_peer, node);
        if (p->sock && nhs < KVX_MAX_PEERS) {
            hs[nhs++] = p;
            items[n++] = (zmq_pollitem_t){.socket = p->sock, .events = ZMQ_POLLIN};
            long left = p->deadline_ms > now ? (long)(p->deadline_ms - now) : 0;
            timeout = timeout < 0 || left < timeout ? left : timeout;
        }
    }
    int ext_first = n;
    list_for_each_safe(&x->peers, node, tmp)
    {
        struct kvx_peer *p = list_entry(node, struct kvx_peer, node);
        if (p->ext_sock && next < KVX_MAX_PEERS) {
            ext[next++] = p;
            items[n++] = (zmq_pollitem_t){.socket = p->ext_sock, .events = ZMQ_POLLIN};
        }
    }
    for (int s = 0; s < KVX_STAGING_SLOTS; s++) {
        if (x->staging[s].busy) {
            timeout = timeout < 0 || timeout > 1000 ? 1000 : timeout; /* expire_staging */
        }
    }
    bool in_flight = !list_empty(&x->active);
    if (in_flight) {
        timeout = 0; /* slept below instead, shorter than zmq_poll's milliseconds */
    }
    if (ucp_worker_arm(x->worker) == UCS_ERR_BUSY) {
        timeout = 0;
    }
    int ready = zmq_poll(items, n, timeout);
    if (ready < 0) {
        if (zmq_errno() != EINTR) {
            log_error("kvx: zmq_poll: %s", zmq_strerror(zmq_errno()));
        }
        return;
    }
    if (ready == 0 && in_flight) {
        usleep(KVX_IN_FLIGHT_SLEEP_US);
    }
    if (router_item >= 0 && (items[router_item].revents & ZMQ_POLLIN)) {
        serve_router(x);
    }
    /* answers on ready peers first: a handshake can drop other cached peers (drop_address) */
    for (int i = 0; i < next; i++) {
        if (items[ext_first + i].revents & ZMQ_POLLIN) {
            ext_read(x, ext[i]);
        }
    }
    for (int i = 0; i < nhs; i++) {
        if (items[ext_first - nhs + i].revents & ZMQ_POLLIN) {
            handshake_read(x, hs[i]);
        }
    }
}

/* Waits (bounded) until no request has UCX operations in flight. */
static void drain_active(struct kvx *x, int64_t deadline_ms)
{
    while (tandem_now_ms() < deadline_ms) {
        while (ucp_worker_progress(x->worker)) {
        }
        bool busy = false;
        struct list_node *n, *tmp;
        list_for_each_safe(&x->active, n, tmp)
        {
            busy = busy || list_entry(n, struct kvx_xfer, node)->pending > 0;
        }
        if (!busy) {
            return;
        }
        usleep(100);
    }
}

/* kvx_free's part on the thread: every request ends with -ECANCELED, every peer goes. */
static void shutdown_thread(struct kvx *x)
{
    struct list_node *n, *tmp;
    x->cancelling = true;
    pthread_mutex_lock(&x->lock);
    struct list_node q;
    list_init(&q);
    while (!list_empty(&x->queue)) {
        n = list_first(&x->queue);
        list_unlink(n);
        list_push_back(&q, n);
    }
    pthread_mutex_unlock(&x->lock);
    list_for_each_safe(&q, n, tmp)
    {
        xfer_finish(x, list_entry(n, struct kvx_xfer, node), -ECANCELED, "kvx is shutting down");
    }
    list_for_each_safe(&x->peers, n, tmp)
    {
        struct kvx_peer *p = list_entry(n, struct kvx_peer, node);
        p->refs++;
        peer_fail_waiters(x, p, -ECANCELED, "kvx is shutting down (handshake in progress)");
        peer_unref(x, p);
    }
    /* operations in flight finish on their own (a live peer answers quickly) ... */
    drain_active(x, tandem_now_ms() + KVX_SHUTDOWN_WAIT_MS);
    /* ... or are cancelled by closing their endpoints (FORCE completes them with an error) */
    list_for_each_safe(&x->active, n, tmp)
    {
        struct kvx_xfer *xf = list_entry(n, struct kvx_xfer, node);
        if (xf->pending > 0 && xf->peer->ep) {
            log_warn("kvx: cancelling transfers in flight to engine %s", xf->engine_id);
            peer_abort(x, xf->peer);
        }
    }
    drain_active(x, tandem_now_ms() + KVX_SHUTDOWN_WAIT_MS);
    while (!list_empty(&x->active) || !list_empty(&x->ready)) {
        struct list_node *first =
            list_empty(&x->active) ? list_first(&x->ready) : list_first(&x->active);
        xfer_finish(x, list_entry(first, struct kvx_xfer, node), -ECANCELED,
                    "kvx is shutting down (transfer in flight)");
    }
    list_for_each_safe(&x->peers, n, tmp)
    {
        peer_drop(x, list_entry(n, struct kvx_peer, node));
    }
    int64_t deadline = tandem_now_ms() + KVX_SHUTDOWN_WAIT_MS;
    while (x->n_closing && tandem_now_ms() < deadline) {
        ucp_worker_progress(x->worker);
        reap_closing(x);
    }
    if (x->n_closing) {
        log_warn("kvx: %zu endpoint closes still in progress at shutdown", x->n_closing);
    }
}

static void *kvx_main(void *arg)
{
    struct kvx *x = arg;
    while (take_queue(x)) {
        run_ucx(x);
        expire_handshakes(x, tandem_now_ms());
        expire_transfers(x, tandem_now_ns());
        expire_staging(x, tandem_now_ms());
        run_ucx(x);
        wait_events(x);
    }
    shutdown_thread(x);
    return NULL;
}

/* ---- setup ----------------------------------------------------------------------------------- */

static int check_config(const struct kvx_config *c, char *err, size_t errlen)
{
    const struct kvx_layout *l = &c->layout;
    if (!c->engine_id || !c->engine_id[0] || strlen(c->engine_id) > KVX_ENGINE_ID_MAX) {
        return tandem_fail(err, errlen, -EINVAL, "kvx: engine_id must be 1 to %d bytes",
                           KVX_ENGINE_ID_MAX);
    }
    for (const char *s = c->engine_id; *s; s++) {
        if (*s < 0x20 || *s > 0x7e) {
            return tandem_fail(err, errlen, -EINVAL, "kvx: engine_id has a non-printable byte");
        }
    }
    if (l->n_layers < 1 || 2 * (int64_t)l->n_layers > KVX_MAX_REGIONS || l->n_kv_heads < 1 ||
        l->head_dim < 1 || l->block_size < 1 || l->num_blocks < 2 ||
        (l->dtype_bytes != 2 && l->dtype_bytes != 4)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kvx: bad layout (n_layers %d, n_kv_heads %d, head_dim %d, block_size "
                           "%d, num_blocks %d, dtype_bytes %d)",
                           l->n_layers, l->n_kv_heads, l->head_dim, l->block_size, l->num_blocks,
                           l->dtype_bytes);
    }
    if (c->wire_dtype != KVX_WIRE_NATIVE && c->wire_dtype != KVX_WIRE_INT8) {
        return tandem_fail(err, errlen, -EINVAL, "kvx: unknown wire_dtype %d", (int)c->wire_dtype);
    }
    if (c->wire_dtype == KVX_WIRE_INT8 && l->dtype_bytes != 2) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kvx: int8 wire compression needs an F16 KV cache; this one has "
                           "%d-byte elements (F32)",
                           l->dtype_bytes);
    }
    if (c->tp_size != 0 && c->tp_size != 1) {
        return tandem_fail(err, errlen, -ENOTSUP, "kvx: tp_size %d: only 1 is supported",
                           c->tp_size);
    }
    if (c->memory != KVX_MEM_HOST && c->memory != KVX_MEM_CUDA) {
        return tandem_fail(err, errlen, -EINVAL, "kvx: unknown memory type %d", (int)c->memory);
    }
    if (c->memory == KVX_MEM_CUDA && !c->region_base) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kvx: a KV cache in GPU memory needs its pools given (region_base)");
    }
    if (c->memory == KVX_MEM_CUDA && (c->block_checksum || c->wire_dtype != KVX_WIRE_NATIVE)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kvx: a KV cache in GPU memory cannot use %s: they read blocks on the "
                           "host",
                           c->block_checksum ? "block checksums" : "int8 wire compression");
    }
    if (c->listen_port < 0 || c->listen_port > 65535 || c->handshake_timeout_ms < 0 ||
        c->transfer_timeout_ms < 0) {
        return tandem_fail(err, errlen, -EINVAL, "kvx: bad listen_port %d or timeout",
                           c->listen_port);
    }
    if (c->listen_host && (!c->listen_host[0] || strlen(c->listen_host) > KVX_HOST_MAX)) {
        return tandem_fail(err, errlen, -EINVAL, "kvx: bad listen_host");
    }
    if (!c->region_base != !c->region_bytes) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kvx: region_base and region_bytes go together (both NULL: kvx "
                           "allocates the regions)");
    }
    uint64_t block_bytes = (uint64_t)l->n_kv_heads * (uint64_t)l->block_size *
                           (uint64_t)l->head_dim * (uint64_t)l->dtype_bytes;
    for (int32_t r = 0; c->region_base && r < 2 * l->n_layers; r++) {
        if (!c->region_base[r] || c->region_bytes[r] / (uint64_t)l->num_blocks != block_bytes ||
            c->region_bytes[r] % (uint64_t)l->num_blocks != 0) {
            return tandem_fail(
                err, errlen, -EINVAL,
                "kvx: region %d: %zu bytes at %p, expected %d blocks of %" PRIu64 " bytes", r,
                c->region_bytes[r], c->region_base[r], l->num_blocks, block_bytes);
        }
    }
    return 0;
}

bool kvx_ucx_has_cuda(char *why, size_t whylen)
{
    ucp_config_t *config;
    ucp_context_h ctx;
    if (ucp_config_read(NULL, NULL, &config) != UCS_OK) {
        snprintf(why, whylen, "the UCX configuration cannot be read");
        return false;
    }
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_RMA};
    ucs_status_t st = ucp_init(&params, config, &ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        snprintf(why, whylen, "ucp_init: %s", ucs_status_string(st));
        return false;
    }
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    bool ok = ucp_context_query(ctx, &ca) == UCS_OK &&
              (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    ucp_cleanup(ctx);
    if (!ok) {
        snprintf(why, whylen, "this UCX (%s) cannot register CUDA memory",
                 ucp_get_version_string());
    }
    return ok;
}

/* UCX context and worker, memory registration, the encoded handshake reply. */
static int setup_ucx(struct kvx *x, const struct kvx_config *c, char *err, size_t errlen)
{
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        return tandem_fail(err, errlen, -EINVAL, "kvx: UCX configuration: %s",
                           ucs_status_string(st));
    }
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                           .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                           .name = "tandem-kvx"};
    st = ucp_init(&params, config, &x->ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        x->ctx = NULL;
        return tandem_fail(err, errlen, -EIO, "kvx: ucp_init: %s (check UCX_TLS)",
                           ucs_status_string(st));
    }
    if (x->memory == KVX_MEM_CUDA) {
        ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
        st = ucp_context_query(x->ctx, &ca);
        if (st != UCS_OK || !(ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA))) {
            return tandem_fail(err, errlen, -ENOTSUP,
                               "kvx: the KV cache is in GPU memory, but this UCX (%s) cannot "
                               "register CUDA memory: install a UCX built with CUDA (its "
                               "cuda_copy and cuda_ipc transports; ucx_info -d lists them)",
                               ucp_get_version_string());
        }
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    st = ucp_worker_create(x->ctx, &wp, &x->worker);
    if (st != UCS_OK) {
        x->worker = NULL;
        return tandem_fail(err, errlen, -EIO, "kvx: ucp_worker_create: %s", ucs_status_string(st));
    }
    st = ucp_worker_get_efd(x->worker, &x->ucx_fd);
    if (st != UCS_OK) {
        return tandem_fail(err, errlen, -EIO, "kvx: ucp_worker_get_efd: %s", ucs_status_string(st));
    }
    ucp_am_handler_param_t am = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = KVX_AM_NOTIFY,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = on_am_notify,
        .arg = x};
    st = ucp_worker_set_am_recv_handler(x->worker, &am);
    if (st != UCS_OK) {
        return tandem_fail(err, errlen, -EIO, "kvx: ucp_worker_set_am_recv_handler: %s",
                           ucs_status_string(st));
    }

    /* what the handshake reply carries */
    struct kvx_agent_meta m = {.n_regions = x->n_regions,
                               .num_blocks = x->layout.num_blocks,
                               .block_size = x->layout.block_size};
    snprintf(m.engine_id, sizeof(m.engine_id), "%s", x->engine_id);
    snprintf(m.kv_cache_layout, sizeof(m.kv_cache_layout), "%s", KVX_LAYOUT_HND);
    snprintf(m.host_ns, sizeof(m.host_ns), "%s", x->host_ns);
    m.pid = (int64_t)getpid();
    m.device_id = x->device_id;
    ucp_worker_attr_t wa = {.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS};
    void **packed = calloc((size_t)x->n_regions, sizeof(*packed));
    m.base_addrs = calloc((size_t)x->n_regions, sizeof(*m.base_addrs));
    m.block_lens = calloc((size_t)x->n_regions, sizeof(*m.block_lens));
    m.rkeys = calloc((size_t)x->n_regions, sizeof(*m.rkeys));
    m.rkey_lens = calloc((size_t)x->n_regions, sizeof(*m.rkey_lens));
    x->memh = calloc((size_t)x->n_regions, sizeof(ucp_mem_h));
    int rc = 0;
    if (!packed || !m.base_addrs || !m.block_lens || !m.rkeys || !m.rkey_lens || !x->memh) {
        rc = tandem_fail(err, errlen, -ENOMEM, "kvx: out of memory");
        goto out;
    }
    st = ucp_worker_query(x->worker, &wa);
    if (st != UCS_OK) {
        rc = tandem_fail(err, errlen, -EIO, "kvx: ucp_worker_query: %s", ucs_status_string(st));
        goto out;
    }
    m.worker_addr = (const uint8_t *)wa.address;
    m.worker_addr_len = wa.address_length;
    for (int32_t r = 0; r < x->n_regions; r++) {
        size_t bytes = x->block_bytes * (size_t)x->layout.num_blocks;
        ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                 UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                                   .address = x->base[r],
                                   .length = bytes};
        if (!x->base[r]) { /* kvx allocates: UCX's shared memory, reachable one-sided */
            mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
            mp.flags = UCP_MEM_MAP_ALLOCATE;
        } else if (x->memory == KVX_MEM_CUDA) { /* device pools: cuda_copy / cuda_ipc */
            mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
            mp.memory_type = UCS_MEMORY_TYPE_CUDA;
        }
        size_t len = 0;
        st = ucp_mem_map(x->ctx, &mp, &x->memh[r]);
        if (st == UCS_OK && !x->base[r]) {
            ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
            st = ucp_mem_query(x->memh[r], &attr);
            x->base[r] = attr.address;
            if (st == UCS_OK) {
                populate(x->base[r], bytes, true);
            }
        }
        if (st == UCS_OK) {
            st = ucp_rkey_pack(x->ctx, x->memh[r], &packed[r], &len);
            if (st != UCS_OK) {
                packed[r] = NULL;
            }
        } else {
            x->memh[r] = NULL;
        }
        if (st != UCS_OK) {
            rc = tandem_fail(err, errlen, -EIO, "kvx: %s region %d (%zu bytes): %s",
                             c->region_base ? "registering" : "allocating", r, bytes,
                             ucs_status_string(st));
            goto out_address;
        }
        if (len == 0 || len > KVX_BLOB_MAX) {
            rc = tandem_fail(err, errlen, -EIO, "kvx: region %d: packed rkey of %zu bytes", r, len);
            goto out_address;
        }
        m.rkeys[r] = packed[r];
        m.rkey_lens[r] = len;
        m.base_addrs[r] = (uint64_t)(uintptr_t)x->base[r];
        m.block_lens[r] = x->block_bytes;
    }
    if (m.worker_addr_len == 0 || m.worker_addr_len > KVX_BLOB_MAX) {
        rc = tandem_fail(err, errlen, -EIO, "kvx: worker address of %zu bytes", m.worker_addr_len);
        goto out_address;
    }
    size_t meta_len = 0;
    void *meta = kvx_wire_encode_agent_meta(&m, &meta_len);
    if (meta) {
        x->reply = kvx_wire_encode_handshake(x->compat_hash, meta, meta_len, &x->reply_len);
        free(meta);
    }
    if (!x->reply) {
        rc = tandem_fail(err, errlen, -ENOMEM, "kvx: out of memory");
    }

out_address:
    ucp_worker_release_address(x->worker, wa.address);
out:
    for (int32_t r = 0; packed && r < x->n_regions; r++) {
        if (packed[r]) {
            ucp_rkey_buffer_release(packed[r]);
        }
    }
    free(packed);
    free(m.base_addrs);
    free(m.block_lens);
    free((void *)m.rkeys);
    free(m.rkey_lens);
    return rc;
}

static int setup_side_channel(struct kvx *x, const struct kvx_config *c, char *err, size_t errlen)
{
    int zero = 0, one = 1;
    int64_t max = KVX_ROUTER_MAX_MSG;
    x->zctx = zmq_ctx_new();
    if (!x->zctx || zmq_ctx_set(x->zctx, ZMQ_BLOCKY, 0) != 0) {
        return tandem_fail(err, errlen, -ENOMEM, "kvx: zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    }
    if (!c->listen_host) {
        return 0;
    }
    bool v6 = strchr(c->listen_host, ':') != NULL;
    char endpoint[KVX_HOST_MAX + 32], port[16];
    if (c->listen_port) {
        snprintf(port, sizeof(port), "%d", c->listen_port);
    } else {
        snprintf(port, sizeof(port), "*");
    }
    snprintf(endpoint, sizeof(endpoint), v6 ? "tcp://[%s]:%s" : "tcp://%s:%s", c->listen_host,
             port);
    x->router = zmq_socket(x->zctx, ZMQ_ROUTER);
    if (!x->router || zmq_setsockopt(x->router, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_setsockopt(x->router, ZMQ_MAXMSGSIZE, &max, sizeof(max)) != 0 ||
        (v6 && zmq_setsockopt(x->router, ZMQ_IPV6, &one, sizeof(one)) != 0)) {
        return tandem_fail(err, errlen, -EIO, "kvx: side channel socket: %s",
                           zmq_strerror(zmq_errno()));
    }
    if (zmq_bind(x->router, endpoint) != 0) {
        int e = zmq_errno();
        return tandem_fail(err, errlen, e == EADDRINUSE ? -EADDRINUSE : -EINVAL,
                           "kvx: side channel %s: %s%s", endpoint, zmq_strerror(e),
                           e == EADDRINUSE ? " (another engine on this port?)" : "");
    }
    char last[KVX_HOST_MAX + 64];
    size_t last_len = sizeof(last);
    if (zmq_getsockopt(x->router, ZMQ_LAST_ENDPOINT, last, &last_len) != 0) {
        return tandem_fail(err, errlen, -EIO, "kvx: side channel endpoint: %s",
                           zmq_strerror(zmq_errno()));
    }
    const char *colon = strrchr(last, ':');
    x->listen_port = colon ? (int)strtol(colon + 1, NULL, 10) : 0;
    if (x->listen_port <= 0) {
        return tandem_fail(err, errlen, -EIO, "kvx: side channel bound at \"%s\"?", last);
    }
    log_info("kvx: engine %s serves KV metadata on %s", x->engine_id, last);
    return 0;
}

/* Releases what kvx_new set up (the thread is not running). */
static void kvx_teardown(struct kvx *x)
{
    if (x->router) {
        zmq_close(x->router);
    }
    if (x->zctx) {
        zmq_ctx_term(x->zctx);
    }
    for (int32_t r = 0; x->memh && r < x->n_regions; r++) {
        if (x->memh[r]) {
            ucp_mem_unmap(x->ctx, x->memh[r]);
        }
    }
    for (int s = 0; s < KVX_STAGING_SLOTS; s++) {
        staging_unmap(x, &x->staging[s]);
    }
    struct list_node *n, *tmp;
    list_for_each_safe(&x->zombies, n, tmp) /* their remote keys go before the worker */
    {
        struct kvx_xfer *xf = list_entry(n, struct kvx_xfer, node);
        if (xf->stg_rkey) {
            ucp_rkey_destroy(xf->stg_rkey);
            xf->stg_rkey = NULL;
        }
    }
    if (x->worker) {
        ucp_worker_destroy(x->worker);
    }
    list_for_each_safe(&x->zombies, n, tmp) /* UCX can no longer call back with them */
    {
        list_unlink(n);
        struct kvx_xfer *xf = list_entry(n, struct kvx_xfer, node);
        xfer_ext_reset(x, xf);
        free(xf);
    }
    free(x->spare_stg);
    if (x->ctx) {
        ucp_cleanup(x->ctx);
    }
    if (x->event_fd >= 0) {
        close(x->event_fd);
    }
    pthread_mutex_destroy(&x->lock);
    free(x->closing);
    free(x->memh);
    free(x->reply);
    free(x->pad_buf);
    free(x->base);
    free(x);
}

struct kvx *kvx_new(const struct kvx_config *c, char *err, size_t errlen)
{
    if (check_config(c, err, errlen) != 0) {
        return NULL;
    }
    struct kvx *x = calloc(1, sizeof(*x));
    if (!x) {
        tandem_set_err(err, errlen, "kvx: out of memory");
        return NULL;
    }
    x->event_fd = -1;
    pthread_mutex_init(&x->lock, NULL);
    list_init(&x->queue);
    list_init(&x->peers);
    list_init(&x->active);
    list_init(&x->ready);
    list_init(&x->zombies);
    snprintf(x->engine_id, sizeof(x->engine_id), "%s", c->engine_id);
    host_ns_get(x->host_ns, sizeof(x->host_ns));
    x->shm_tls = tls_allows_shm(getenv("UCX_TLS"));
    x->layout = c->layout;
    x->n_regions = 2 * c->layout.n_layers;
    x->block_bytes = (uint64_t)c->layout.n_kv_heads * (uint64_t)c->layout.block_size *
                     (uint64_t)c->layout.head_dim * (uint64_t)c->layout.dtype_bytes;
    x->enforce_compat = c->enforce_compat;
    x->block_checksum = c->block_checksum;
    x->wire_int8 = c->wire_dtype == KVX_WIRE_INT8;
    x->int8_block_bytes = kvx_int8_block_bytes(&c->layout);
    x->tp_size = 1;
    x->memory = c->memory;
    x->device_id = c->memory == KVX_MEM_CUDA ? c->device_id : 0;
    x->handshake_timeout_ms = c->handshake_timeout_ms ? c->handshake_timeout_ms : KVX_HANDSHAKE_MS;
    x->transfer_timeout_ms = c->transfer_timeout_ms ? c->transfer_timeout_ms : KVX_TRANSFER_MS;
    x->on_notify = c->on_notify;
    x->ud = c->ud;
    kvx_compat_hash(&c->layout, c->compat_model, x->tp_size, x->compat_hash);
    x->base = malloc(sizeof(*x->base) * (size_t)x->n_regions);
    x->pad_buf = malloc(KVX_BLOB_MAX + KVX_UCX_PAD);
    if (!x->base || !x->pad_buf) {
        tandem_set_err(err, errlen, "kvx: out of memory");
        goto err_teardown;
    }
    for (int32_t r = 0; r < x->n_regions; r++) {
        x->base[r] = c->region_base ? c->region_base[r] : NULL;
    }
    if (setup_ucx(x, c, err, errlen) != 0 || setup_side_channel(x, c, err, errlen) != 0) {
        goto err_teardown;
    }
    x->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (x->event_fd < 0) {
        tandem_set_err(err, errlen, "kvx: eventfd: %s", strerror(errno));
        goto err_teardown;
    }
    /* the thread takes no signals: they belong to the agent's loop */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&x->thread, NULL, kvx_main, x);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        tandem_set_err(err, errlen, "kvx: pthread_create: %s", strerror(rc));
        goto err_teardown;
    }
    return x;

err_teardown:
    kvx_teardown(x);
    return NULL;
}

void *kvx_region(const struct kvx *x, int region, size_t *bytes)
{
    TANDEM_ASSERT(region >= 0 && region < x->n_regions);
    if (bytes) {
        *bytes = x->block_bytes * (size_t)x->layout.num_blocks;
    }
    return x->base[region];
}

int kvx_listen_port(const struct kvx *x)
{
    return x->router ? x->listen_port : 0;
}

/* ---- public requests ------------------------------------------------------------------------- */

static bool valid_target(const char *what, const char *engine_id, const char *host, int port)
{
    if (!engine_id || !engine_id[0] || strlen(engine_id) > KVX_ENGINE_ID_MAX || !host || !host[0] ||
        strlen(host) > KVX_HOST_MAX || port < 1 || port > 65535) {
        log_warn("kvx: %s: the remote engine id (1-%d bytes), host (1-%d bytes) and port "
                 "(1-65535) are required",
                 what, KVX_ENGINE_ID_MAX, KVX_HOST_MAX);
        return false;
    }
    return true;
}

/* A request with room for n ids of each side and a message. */
static struct kvx_xfer *xfer_alloc(const char *engine_id, const char *host, int port, int32_t n,
                                   const char *msg, kvx_done_fn done, void *ud)
{
    size_t msg_len = msg ? strlen(msg) : 0;
    size_t ids = 2 * (size_t)n * sizeof(int32_t);
    struct kvx_xfer *xf = calloc(1, sizeof(*xf) + ids + msg_len + 1);
    if (!xf) {
        return NULL;
    }
    snprintf(xf->engine_id, sizeof(xf->engine_id), "%s", engine_id);
    snprintf(xf->host, sizeof(xf->host), "%s", host);
    xf->port = port;
    xf->n = n;
    xf->remote = (int32_t *)(void *)(xf + 1);
    xf->local = xf->remote + n;
    if (msg) {
        xf->msg = (char *)(xf->local + n);
        memcpy(xf->msg, msg, msg_len + 1);
        xf->msg_len = msg_len;
    }
    xf->done = done;
    xf->ud = ud;
    return xf;
}

static int submit(struct kvx *x, struct kvx_xfer *xf)
{
    pthread_mutex_lock(&x->lock);
    int rc = x->stopping ? -ESHUTDOWN : x->in_flight >= KVX_MAX_IN_FLIGHT ? -EAGAIN : 0;
    if (rc == 0) {
        x->in_flight++;
        list_push_back(&x->queue, &xf->node);
    }
    pthread_mutex_unlock(&x->lock);
    if (rc != 0) {
        free(xf);
        return rc;
    }
    uint64_t one = 1;
    if (write(x->event_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        log_warn("kvx: eventfd write: %s", strerror(errno));
    }
    return 0;
}

int kvx_pull(struct kvx *x, const char *remote_engine_id, const char *remote_host, int remote_port,
             const int32_t *remote_blocks, const int32_t *local_blocks, int32_t n,
             const char *notify_msg, kvx_done_fn done, void *ud)
{
    if (!valid_target("pull", remote_engine_id, remote_host, remote_port)) {
        return -EINVAL;
    }
    if (n < 1 || n > x->layout.num_blocks || !remote_blocks || !local_blocks) {
        log_warn("kvx: pull from engine %s: %d blocks (1 to %d allowed)", remote_engine_id, n,
                 x->layout.num_blocks);
        return -EINVAL;
    }
    if (notify_msg && strlen(notify_msg) > KVX_NOTIFY_MAX) {
        log_warn("kvx: pull from engine %s: notification longer than %d bytes", remote_engine_id,
                 KVX_NOTIFY_MAX);
        return -EINVAL;
    }
    for (int32_t i = 0; i < n; i++) {
        if (local_blocks[i] < 1 || local_blocks[i] >= x->layout.num_blocks ||
            remote_blocks[i] < 1) {
            log_warn("kvx: pull from engine %s: block pair %d (remote %d → local %d) out of range "
                     "(local [1, %d), remote >= 1; block 0 is the null block)",
                     remote_engine_id, i, remote_blocks[i], local_blocks[i], x->layout.num_blocks);
            return -EINVAL;
        }
    }
    if ((x->block_checksum || x->wire_int8) &&
        (n > KVX_EXT_BLOCKS || (size_t)n * (size_t)x->n_regions * 8 > KVX_REPLY_MAX - 4096 ||
         (x->wire_int8 &&
          (uint64_t)n * (uint64_t)x->n_regions * x->int8_block_bytes > KVX_STAGING_MAX))) {
        log_warn("kvx: pull from engine %s: %d blocks, more than one %s request carries",
                 remote_engine_id, n, KVX_BLOCKS_MSG);
        return -EINVAL;
    }
    struct kvx_xfer *xf =
        xfer_alloc(remote_engine_id, remote_host, remote_port, n, notify_msg, done, ud);
    if (!xf) {
        return -ENOMEM;
    }
    xf->is_pull = true;
    memcpy(xf->remote, remote_blocks, sizeof(int32_t) * (size_t)n);
    memcpy(xf->local, local_blocks, sizeof(int32_t) * (size_t)n);
    return submit(x, xf);
}

int kvx_notify(struct kvx *x, const char *remote_engine_id, const char *remote_host,
               int remote_port, const char *msg, kvx_done_fn done, void *ud)
{
    if (!valid_target("notify", remote_engine_id, remote_host, remote_port)) {
        return -EINVAL;
    }
    if (!msg || strlen(msg) > KVX_NOTIFY_MAX) {
        log_warn("kvx: notify to engine %s: a message of at most %d bytes is required",
                 remote_engine_id, KVX_NOTIFY_MAX);
        return -EINVAL;
    }
    struct kvx_xfer *xf = xfer_alloc(remote_engine_id, remote_host, remote_port, 0, msg, done, ud);
    if (!xf) {
        return -ENOMEM;
    }
    return submit(x, xf);
}

void kvx_get_stats(struct kvx *x, struct kvx_stats *out)
{
    pthread_mutex_lock(&x->lock);
    *out = x->stats;
    pthread_mutex_unlock(&x->lock);
}

void kvx_debug_corrupt(struct kvx *x, int rounds)
{
    pthread_mutex_lock(&x->lock);
    x->corrupt_rounds = rounds;
    pthread_mutex_unlock(&x->lock);
}

void kvx_free(struct kvx *x)
{
    if (!x) {
        return;
    }
    pthread_mutex_lock(&x->lock);
    x->stopping = true;
    pthread_mutex_unlock(&x->lock);
    uint64_t one = 1;
    if (write(x->event_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        log_warn("kvx: eventfd write: %s", strerror(errno));
    }
    pthread_join(x->thread, NULL);
    kvx_teardown(x);
}
