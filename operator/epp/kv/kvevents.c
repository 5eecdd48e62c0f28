/*
 * KV event decoding (kvevents.h). msgpack-c unpacks the payload into its object tree; this file
 * checks every field against vLLM's schema and copies what the index needs into one msgpack
 * zone owned by the batch, so the batch outlives the payload.
 */
#include "operator/epp/kv/kvevents.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "lib/err.h"

#define ZONE_CHUNK 8192

/* What one event decoder gets: where to allocate, where to report. */
struct dec {
    msgpack_zone *zone;
    uint32_t index; /* the event's position in the batch, for messages */
    char *err;
    size_t errlen;
};

static int bad(struct dec *d, const char *tag, const char *field, const char *want)
{
    return tandem_fail(d->err, d->errlen, -EINVAL, "kv event %u (%s): %s: want %s", d->index, tag,
                       field, want);
}

/* An int that fits int64 (a positive one above INT64_MAX does not). */
static bool get_i64(const msgpack_object *o, int64_t *out)
{
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)o->via.u64;
        return true;
    }
    return false;
}

/* vLLM's ExternalBlockHash: an int (masked to 64 bits, or a negative Go-style int64) or bytes,
 * of which the last 8 count, big-endian. */
static bool get_hash(const msgpack_object *o, uint64_t *out)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        *out = o->via.u64;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = (uint64_t)o->via.i64;
        return true;
    }
    if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size == 0) {
        return false;
    }
    uint32_t n = o->via.bin.size, from = n > 8 ? n - 8 : 0;
    uint64_t v = 0;
    for (uint32_t i = from; i < n; i++) {
        v = v << 8 | (uint8_t)o->via.bin.ptr[i];
    }
    *out = v;
    return true;
}

static bool is_nil(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_NIL;
}

/* Copies a str object into the zone, NUL-terminated. */
static int copy_str(struct dec *d, const msgpack_object *o, const char *tag, const char *field,
                    const char **out)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= KVEV_MAX_STR) {
        return bad(d, tag, field, "a string shorter than 256 bytes, or nil");
    }
    char *s = msgpack_zone_malloc(d->zone, o->via.str.size + 1);
    if (!s) {
        return -ENOMEM;
    }
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    *out = s;
    return 0;
}

static int get_hashes(struct dec *d, const msgpack_object *o, const char *tag,
                      struct kvev_event *ev)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > KVEV_MAX_HASHES) {
        return bad(d, tag, "block_hashes", "an array of at most 4194304 hashes");
    }
    uint32_t n = o->via.array.size;
    uint64_t *h = n ? msgpack_zone_malloc(d->zone, (size_t)n * sizeof(*h)) : NULL;
    if (n && !h) {
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!get_hash(&o->via.array.ptr[i], &h[i])) {
            return bad(d, tag, "block_hashes[]", "an integer or non-empty bytes");
        }
    }
    ev->hashes = h;
    ev->n_hashes = n;
    return 0;
}

static int get_tokens(struct dec *d, const msgpack_object *o, struct kvev_event *ev)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > KVEV_MAX_TOKENS) {
        return bad(d, "BlockStored", "token_ids", "an array of at most 67108864 token ids");
    }
    uint32_t n = o->via.array.size;
    int32_t *t = n ? msgpack_zone_malloc(d->zone, (size_t)n * sizeof(*t)) : NULL;
    if (n && !t) {
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        int64_t v;
        if (!get_i64(&o->via.array.ptr[i], &v) || v < INT32_MIN || v > INT32_MAX) {
            return bad(d, "BlockStored", "token_ids[]", "32-bit integers");
        }
        t[i] = (int32_t)v;
    }
    ev->token_ids = t;
    ev->n_tokens = n;
    return 0;
}

/* medium|nil → the lowercased tier, "gpu" for nil (llm-d's default DeviceTier). */
static int get_tier(struct dec *d, const msgpack_object *o, const char *tag, struct kvev_event *ev)
{
    if (!o || is_nil(o)) {
        strcpy(ev->tier, "gpu");
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 || o->via.str.size >= KVEV_MAX_STR ||
        memchr(o->via.str.ptr, '\0', o->via.str.size)) {
        return bad(d, tag, "medium", "a non-empty string shorter than 256 bytes, or nil");
    }
    for (uint32_t i = 0; i < o->via.str.size; i++) {
        ev->tier[i] = (char)tolower((unsigned char)o->via.str.ptr[i]);
    }
    ev->tier[o->via.str.size] = '\0';
    return 0;
}

/* An optional int field: absent or nil leaves *has false. */
static int get_opt_int(struct dec *d, const msgpack_object *o, const char *tag, const char *field,
                       bool *has, int64_t *out)
{
    if (!o || is_nil(o)) {
        return 0;
    }
    if (!get_i64(o, out)) {
        return bad(d, tag, field, "an integer or nil");
    }
    *has = true;
    return 0;
}

static int get_opt_str(struct dec *d, const msgpack_object *o, const char *tag, const char *field,
                       const char **out)
{
    return !o || is_nil(o) ? 0 : copy_str(d, o, tag, field, out);
}

static const msgpack_object *field_at(const msgpack_object_array *a, uint32_t i)
{
    return i < a->size ? &a->ptr[i] : NULL;
}

static int decode_stored(struct dec *d, const msgpack_object_array *a, struct kvev_event *ev)
{
    static const char tag[] = "BlockStored";
    if (a->size < 5) {
        return bad(d, tag, "fields", "at least block_hashes, parent, token_ids, block_size");
    }
    ev->type = KVEV_BLOCK_STORED;
    int rc = get_hashes(d, &a->ptr[1], tag, ev);
    if (rc == 0 && !is_nil(&a->ptr[2])) {
        ev->has_parent = get_hash(&a->ptr[2], &ev->parent);
        rc = ev->has_parent ? 0 : bad(d, tag, "parent_block_hash", "a hash or nil");
    }
    rc = rc ? rc : get_tokens(d, &a->ptr[3], ev);
    int64_t bs = 0;
    if (rc == 0 && (!get_i64(&a->ptr[4], &bs) || bs < 1 || bs > INT32_MAX)) {
        rc = bad(d, tag, "block_size", "a positive integer");
    }
    ev->block_size = (int32_t)bs;
    rc = rc ? rc : get_opt_int(d, field_at(a, 5), tag, "lora_id", &ev->has_lora_id, &ev->lora_id);
    rc = rc ? rc : get_tier(d, field_at(a, 6), tag, ev);
    rc = rc ? rc : get_opt_str(d, field_at(a, 7), tag, "lora_name", &ev->lora_name);
    ev->has_extra_keys = field_at(a, 8) && !is_nil(field_at(a, 8));
    rc = rc ? rc
            : get_opt_int(d, field_at(a, 9), tag, "group_idx", &ev->has_group_idx, &ev->group_idx);
    rc = rc ? rc
            : get_opt_str(d, field_at(a, 10), tag, "kv_cache_spec_kind", &ev->kv_cache_spec_kind);
    rc = rc ? rc
            : get_opt_int(d, field_at(a, 11), tag, "kv_cache_spec_sliding_window",
                          &ev->has_sliding_window, &ev->sliding_window);
    return rc;
}

static int decode_removed(struct dec *d, const msgpack_object_array *a, struct kvev_event *ev)
{
    static const char tag[] = "BlockRemoved";
    if (a->size < 2) {
        return bad(d, tag, "fields", "at least block_hashes");
    }
    ev->type = KVEV_BLOCK_REMOVED;
    int rc = get_hashes(d, &a->ptr[1], tag, ev);
    rc = rc ? rc : get_tier(d, field_at(a, 2), tag, ev);
    return rc ? rc
              : get_opt_int(d, field_at(a, 3), tag, "group_idx", &ev->has_group_idx,
                            &ev->group_idx);
}

static bool tag_is(const msgpack_object *t, const char *name)
{
    size_t n = strlen(name);
    return t->via.str.size == n && memcmp(t->via.str.ptr, name, n) == 0;
}

/* 1: decoded into *ev; 0: unknown tag, skipped; <0: malformed. */
static int decode_event(struct dec *d, const msgpack_object *o, struct kvev_event *ev)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0 ||
        o->via.array.ptr[0].type != MSGPACK_OBJECT_STR) {
        return tandem_fail(d->err, d->errlen, -EINVAL,
                           "kv event %u: want an array starting with its tag (a string)", d->index);
    }
    const msgpack_object_array *a = &o->via.array;
    int rc;
    if (tag_is(&a->ptr[0], "BlockStored")) {
        rc = decode_stored(d, a, ev);
    } else if (tag_is(&a->ptr[0], "BlockRemoved")) {
        rc = decode_removed(d, a, ev);
    } else if (tag_is(&a->ptr[0], "AllBlocksCleared")) {
        ev->type = KVEV_ALL_CLEARED;
        rc = 0;
    } else {
        return 0;
    }
    return rc < 0 ? rc : 1;
}

static int decode_header(const msgpack_object *root, struct kvev_batch *out, char *err,
                         size_t errlen)
{
    if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size < 2) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kv event batch: want an array [ts, events, data_parallel_rank]");
    }
    const msgpack_object *ts = &root->via.array.ptr[0];
    if (ts->type == MSGPACK_OBJECT_FLOAT64 || ts->type == MSGPACK_OBJECT_FLOAT32) {
        out->ts = ts->via.f64;
    } else if (ts->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        out->ts = (double)ts->via.u64;
    } else {
        return tandem_fail(err, errlen, -EINVAL, "kv event batch: ts: want a number");
    }
    const msgpack_object *events = &root->via.array.ptr[1];
    if (events->type != MSGPACK_OBJECT_ARRAY || events->via.array.size > KVEV_MAX_EVENTS) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kv event batch: events: want an array of at most %u events",
                           KVEV_MAX_EVENTS);
    }
    const msgpack_object *rank = field_at(&root->via.array, 2);
    if (rank && !is_nil(rank)) {
        if (!get_i64(rank, &out->dp_rank)) {
            return tandem_fail(err, errlen, -EINVAL,
                               "kv event batch: data_parallel_rank: want an integer or nil");
        }
        out->has_dp_rank = true;
    }
    return 0;
}

static int decode_events(const msgpack_object_array *events, msgpack_zone *zone,
                         struct kvev_batch *out, char *err, size_t errlen)
{
    if (events->size == 0) {
        return 0;
    }
    out->events = msgpack_zone_malloc(zone, (size_t)events->size * sizeof(*out->events));
    if (!out->events) {
        return -ENOMEM;
    }
    struct dec d = {.zone = zone, .err = err, .errlen = errlen};
    for (uint32_t i = 0; i < events->size; i++) {
        d.index = i;
        struct kvev_event *ev = &out->events[out->n_events];
        memset(ev, 0, sizeof(*ev));
        int rc = decode_event(&d, &events->ptr[i], ev);
        if (rc < 0) {
            return rc;
        }
        if (rc == 0) {
            out->n_unknown++;
        } else {
            out->n_events++;
        }
    }
    return 0;
}

/* Big-endian n-byte unsigned at p. */
static uint64_t be_at(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        v = v << 8 | p[i];
    }
    return v;
}

/* Header of the msgpack object at p: its bytes before the children (*head, body included for
 * scalars and strings) and how many children follow (*children). False for the unused 0xc1. */
static bool mp_header(const uint8_t *p, size_t left, uint64_t *head, uint64_t *children)
{
    static const uint8_t fixed[32] = {
        /* c0..df: bytes of the header (with the length field); 0 = special */
        1, 0, 1, 1, 2, 3, 5, 3,  4,  6, 5, 9, 2, 3, 5, 9,
        2, 3, 5, 9, 3, 4, 6, 10, 18, 2, 3, 5, 3, 5, 3, 5,
    };
    uint8_t b = p[0];
    *children = 0;
    *head = 1;
    if (b <= 0x7f || b >= 0xe0) {
        return true; /* fixints */
    }
    if (b <= 0x9f) {
        *children = (uint64_t)(b & 0x0f) * (b <= 0x8f ? 2 : 1); /* fixmap, fixarray */
        return true;
    }
    if (b <= 0xbf) {
        *head = 1 + (uint64_t)(b & 0x1f); /* fixstr */
        return true;
    }
    if (b == 0xc1) {
        return false;
    }
    *head = fixed[(b - 0xc0) & 0x1f];
    if (*head > left) {
        return true; /* truncated: msgpack-c says so */
    }
    int w = (int)*head - 1; /* width of the length field, where there is one */
    if ((b >= 0xc4 && b <= 0xc6) || (b >= 0xd9 && b <= 0xdb)) {
        *head += be_at(p + 1, w); /* bin, str: the body */
    } else if (b >= 0xc7 && b <= 0xc9) {
        *head += be_at(p + 1, w - 1); /* ext: length, then a type byte */
    } else if (b == 0xdc || b == 0xdd) {
        *children = be_at(p + 1, w);
    } else if (b == 0xde || b == 0xdf) {
        *children = 2 * be_at(p + 1, w);
    }
    return true;
}

/* msgpack-c allocates what an array or map header claims before it knows the input holds it,
 * so a few bytes could ask for gigabytes: walk the headers first and refuse any count that the
 * bytes left cannot hold (every object takes at least one byte). */
static int mp_check_counts(const uint8_t *p, size_t len, char *err, size_t errlen)
{
    uint64_t pending = 1;
    size_t off = 0;
    while (pending > 0 && off < len) {
        uint64_t head, children;
        if (!mp_header(p + off, len - off, &head, &children)) {
            return 0; /* msgpack-c reports it */
        }
        pending--;
        if (head > len - off) {
            return 0; /* truncated: msgpack-c says so */
        }
        off += (size_t)head;
        if (children > len - off || pending + children > len - off) {
            return tandem_fail(
                err, errlen, -EINVAL,
                "kv event batch: truncated, or an array or map of %llu entries in %zu bytes",
                (unsigned long long)children, len - off);
        }
        pending += children;
    }
    return 0;
}

int kvev_decode(const void *payload, size_t len, struct kvev_batch *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!payload || len == 0 || len > KVEV_MAX_PAYLOAD) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kv event batch: payload of %zu bytes (want 1 to %u)", len,
                           KVEV_MAX_PAYLOAD);
    }
    if (mp_check_counts(payload, len, err, errlen) != 0) {
        return -EINVAL;
    }
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&up, payload, len, &off);
    int rc;
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR) {
        rc = -ENOMEM;
    } else if (ur != MSGPACK_UNPACK_SUCCESS) {
        rc = tandem_fail(err, errlen, -EINVAL, "kv event batch: not msgpack (%s)",
                         ur == MSGPACK_UNPACK_CONTINUE ? "truncated" : "parse error");
    } else if (off != len) {
        rc = tandem_fail(err, errlen, -EINVAL,
                         "kv event batch: %zu trailing bytes after the msgpack array", len - off);
    } else {
        rc = decode_header(&up.data, out, err, errlen);
    }
    msgpack_zone *zone = rc == 0 ? msgpack_zone_new(ZONE_CHUNK) : NULL;
    if (rc == 0 && !zone) {
        rc = -ENOMEM;
    }
    if (rc == 0) {
        out->mem = zone;
        rc = decode_events(&up.data.via.array.ptr[1].via.array, zone, out, err, errlen);
    }
    msgpack_unpacked_destroy(&up);
    if (rc != 0) {
        kvev_batch_free(out);
        if (rc == -ENOMEM) {
            tandem_set_err(err, errlen, "kv event batch: out of memory");
        }
    }
    return rc;
}

void kvev_batch_free(struct kvev_batch *b)
{
    if (!b) {
        return;
    }
    if (b->mem) {
        msgpack_zone_free(b->mem);
    }
    memset(b, 0, sizeof(*b));
}

int kvev_parse_seq(const void *frame, size_t len, uint64_t *out, char *err, size_t errlen)
{
    if (!frame || len != KVEV_SEQ_LEN) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kv event seq frame: %zu bytes (want 8, big-endian)", len);
    }
    const uint8_t *p = frame;
    uint64_t v = 0;
    for (int i = 0; i < KVEV_SEQ_LEN; i++) {
        v = v << 8 | p[i];
    }
    *out = v;
    return 0;
}

/* Copies part [from, to) of the topic into out (NUL-terminated). */
static int topic_part(const char *t, size_t from, size_t to, char *out, const char *what, char *err,
                      size_t errlen)
{
    if (to <= from || to - from >= KVEV_MAX_STR) {
        return tandem_fail(err, errlen, -EINVAL, "kv event topic: %s: want 1 to %d bytes", what,
                           KVEV_MAX_STR - 1);
    }
    if (memchr(t + from, '\0', to - from)) {
        return tandem_fail(err, errlen, -EINVAL, "kv event topic: %s holds a NUL byte", what);
    }
    memcpy(out, t + from, to - from);
    out[to - from] = '\0';
    return 0;
}

int kvev_parse_topic(const void *topic, size_t len, struct kvev_topic *out, char *err,
                     size_t errlen)
{
    const char *t = topic;
    if (!t || len < 3 || memcmp(t, "kv@", 3) != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kv event topic: want kv@<pod>@<model> (no kv@ prefix)");
    }
    size_t pod_end = 3;
    bool bracket = false;
    while (pod_end < len && (bracket || t[pod_end] != '@')) {
        if (bracket && t[pod_end] == '@') {
            return tandem_fail(err, errlen, -EINVAL, "kv event topic: '@' inside the pod's []");
        }
        if (t[pod_end] == '[') {
            bracket = true;
        } else if (t[pod_end] == ']') {
            bracket = false;
        }
        pod_end++;
    }
    if (pod_end == len) {
        return tandem_fail(err, errlen, -EINVAL, "kv event topic: want kv@<pod>@<model> (%s)",
                           bracket ? "unclosed '[' in the pod" : "two parts");
    }
    if (memchr(t + pod_end + 1, '@', len - pod_end - 1)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kv event topic: want exactly three '@'-separated parts");
    }
    int rc = topic_part(t, 3, pod_end, out->pod, "pod", err, errlen);
    return rc ? rc : topic_part(t, pod_end + 1, len, out->model, "model", err, errlen);
}
