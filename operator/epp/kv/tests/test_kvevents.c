/*
 * Unit tests for operator/epp/kv/kvevents: payloads written by our publisher's encoder
 * (agent/kv_events.h) and by msgpack-c in every shape vLLM sends (all twelve BlockStored fields,
 * trailing fields absent, bytes and int hashes, nil medium and rank), unknown tags, and a
 * malformed payload of every kind, each refused with a message naming what is wrong.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "agent/kv_events.h"
#include "operator/epp/kv/kvevents.h"

/* ---- building payloads ---- */

struct pb {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static void pb_init(struct pb *b)
{
    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
}

static void str(struct pb *b, const char *s)
{
    msgpack_pack_str_with_body(&b->pk, s, strlen(s));
}

/* [ts, [<n events follow>] */
static void batch_open(struct pb *b, uint32_t n)
{
    msgpack_pack_array(&b->pk, 3);
    msgpack_pack_double(&b->pk, 1700000000.5);
    msgpack_pack_array(&b->pk, n);
}

static void batch_close(struct pb *b)
{
    msgpack_pack_int(&b->pk, 0);
}

/* ["BlockStored", [1, 2], parent 7, [tokens x 4], 2 ... then `extra` more fields from the tail
 * list lora_id 5, "CPU", "lora-a", [["mm"]], 1, "full_attention", 4096. */
static void stored(struct pb *b, int extra)
{
    msgpack_pack_array(&b->pk, 5 + (uint32_t)extra);
    str(b, "BlockStored");
    msgpack_pack_array(&b->pk, 2);
    msgpack_pack_uint64(&b->pk, 1);
    msgpack_pack_uint64(&b->pk, UINT64_MAX);
    msgpack_pack_uint64(&b->pk, 7);
    msgpack_pack_array(&b->pk, 4);
    for (int i = 0; i < 4; i++) {
        msgpack_pack_int(&b->pk, 100 + i);
    }
    msgpack_pack_int(&b->pk, 2);
    if (extra > 0) {
        msgpack_pack_int(&b->pk, 5);
    }
    if (extra > 1) {
        str(b, "CPU");
    }
    if (extra > 2) {
        str(b, "lora-a");
    }
    if (extra > 3) {
        msgpack_pack_array(&b->pk, 1);
        msgpack_pack_array(&b->pk, 1);
        str(b, "mm");
    }
    if (extra > 4) {
        msgpack_pack_int(&b->pk, 1);
    }
    if (extra > 5) {
        str(b, "full_attention");
    }
    if (extra > 6) {
        msgpack_pack_int(&b->pk, 4096);
    }
}

/* With TANDEM_WRITE_CORPUS=<dir> set, every payload a test decodes is also written there: the
 * seed corpus of fuzz/fuzz_kvevents (operator/epp/kv/fuzz/corpus/fuzz_kvevents). */
static void corpus_write(const void *data, size_t len)
{
    static int n;
    const char *dir = getenv("TANDEM_WRITE_CORPUS");
    if (!dir) {
        return;
    }
    char path[512];
    snprintf(path, sizeof(path), "%s/payload-%03d", dir, n++);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

static int decode(struct pb *b, struct kvev_batch *out, char *err, size_t errlen)
{
    corpus_write(b->sb.data, b->sb.size);
    int rc = kvev_decode(b->sb.data, b->sb.size, out, err, errlen);
    msgpack_sbuffer_destroy(&b->sb);
    return rc;
}

/* ---- well-formed ---- */

static void test_our_publisher(void **state)
{
    (void)state;
    const kvc_hash hashes[2] = {0x1111, 0xfedcba9876543210ULL}, removed[1] = {0x1111};
    const int32_t tokens[4] = {1, 2, 3, 4};
    struct kv_event ev[3] = {
        {.type = KV_EVENT_BLOCK_STORED,
         .stored = {.block_hashes = hashes,
                    .n_blocks = 2,
                    .has_parent = true,
                    .parent_hash = 9,
                    .token_ids = tokens,
                    .block_size = 2,
                    .lora_name = "adapter"}},
        {.type = KV_EVENT_BLOCK_REMOVED, .hashes = removed, .n_hashes = 1},
        {.type = KV_EVENT_ALL_CLEARED},
    };
    char *payload;
    size_t len;
    assert_int_equal(kv_events_encode_batch(12.5, ev, 3, "GPU", 3, &payload, &len), 0);
    corpus_write(payload, len);
    struct kvev_batch b;
    char err[256] = "";
    assert_int_equal(kvev_decode(payload, len, &b, err, sizeof(err)), 0);
    free(payload);
    assert_true(b.ts == 12.5);
    assert_true(b.has_dp_rank);
    assert_int_equal(b.dp_rank, 3);
    assert_int_equal(b.n_events, 3);
    const struct kvev_event *s = &b.events[0];
    assert_int_equal(s->type, KVEV_BLOCK_STORED);
    assert_int_equal(s->n_hashes, 2);
    assert_true(s->hashes[1] == 0xfedcba9876543210ULL);
    assert_true(s->has_parent && s->parent == 9);
    assert_int_equal(s->n_tokens, 4);
    assert_int_equal(s->token_ids[3], 4);
    assert_int_equal(s->block_size, 2);
    assert_false(s->has_lora_id);
    assert_string_equal(s->tier, "gpu");
    assert_string_equal(s->lora_name, "adapter");
    assert_int_equal(b.events[1].type, KVEV_BLOCK_REMOVED);
    assert_true(b.events[1].hashes[0] == 0x1111);
    assert_string_equal(b.events[1].tier, "gpu");
    assert_int_equal(b.events[2].type, KVEV_ALL_CLEARED);
    kvev_batch_free(&b);
}

static void test_all_fields(void **state)
{
    (void)state;
    struct pb b;
    pb_init(&b);
    batch_open(&b, 1);
    stored(&b, 7);
    batch_close(&b);
    struct kvev_batch out;
    assert_int_equal(decode(&b, &out, NULL, 0), 0);
    const struct kvev_event *e = &out.events[0];
    assert_true(e->has_lora_id && e->lora_id == 5);
    assert_string_equal(e->tier, "cpu");
    assert_string_equal(e->lora_name, "lora-a");
    assert_true(e->has_extra_keys);
    assert_true(e->has_group_idx && e->group_idx == 1);
    assert_string_equal(e->kv_cache_spec_kind, "full_attention");
    assert_true(e->has_sliding_window && e->sliding_window == 4096);
    assert_true(e->hashes[1] == UINT64_MAX);
    kvev_batch_free(&out);
}

static void test_optional_absent(void **state)
{
    (void)state;
    for (int extra = 0; extra <= 7; extra++) {
        struct pb b;
        pb_init(&b);
        /* [ts, events] only: no rank */
        msgpack_pack_array(&b.pk, 2);
        msgpack_pack_int(&b.pk, 17);
        msgpack_pack_array(&b.pk, 1);
        stored(&b, extra);
        struct kvev_batch out;
        char err[256] = "";
        assert_int_equal(decode(&b, &out, err, sizeof(err)), 0);
        assert_false(out.has_dp_rank);
        assert_true(out.ts == 17.0);
        assert_int_equal(out.events[0].has_lora_id, extra > 0);
        assert_string_equal(out.events[0].tier, extra > 1 ? "cpu" : "gpu");
        assert_int_equal(out.events[0].lora_name != NULL, extra > 2);
        assert_int_equal(out.events[0].has_sliding_window, extra > 6);
        kvev_batch_free(&out);
    }
}

static void test_nils_and_bytes(void **state)
{
    (void)state;
    struct pb b;
    pb_init(&b);
    msgpack_pack_array(&b.pk, 3);
    msgpack_pack_double(&b.pk, 1.0);
    msgpack_pack_array(&b.pk, 3);
    /* 32-byte SHA-256 hash: the last 8 bytes, big-endian */
    uint8_t full[32];
    for (int i = 0; i < 32; i++) {
        full[i] = (uint8_t)i;
    }
    msgpack_pack_array(&b.pk, 12);
    str(&b, "BlockStored");
    msgpack_pack_array(&b.pk, 2);
    msgpack_pack_bin_with_body(&b.pk, full, 32);
    msgpack_pack_bin_with_body(&b.pk, full + 30, 2); /* short bytes: their value */
    msgpack_pack_bin_with_body(&b.pk, full, 32);     /* parent as bytes */
    msgpack_pack_array(&b.pk, 0);                    /* CPU offload: no tokens */
    msgpack_pack_int(&b.pk, 16);
    for (int i = 0; i < 7; i++) {
        msgpack_pack_nil(&b.pk);
    }
    msgpack_pack_array(&b.pk, 2);
    str(&b, "BlockRemoved");
    msgpack_pack_array(&b.pk, 1);
    msgpack_pack_int64(&b.pk, -2); /* a signed 64-bit hash, as Go publishers write */
    msgpack_pack_array(&b.pk, 1);
    str(&b, "AllBlocksCleared");
    msgpack_pack_nil(&b.pk);
    struct kvev_batch out;
    assert_int_equal(decode(&b, &out, NULL, 0), 0);
    assert_false(out.has_dp_rank);
    const struct kvev_event *e = &out.events[0];
    assert_true(e->hashes[0] == 0x18191a1b1c1d1e1fULL);
    assert_true(e->hashes[1] == 0x1e1fULL);
    assert_true(e->has_parent && e->parent == 0x18191a1b1c1d1e1fULL);
    assert_int_equal(e->n_tokens, 0);
    assert_string_equal(e->tier, "gpu");
    assert_null(e->lora_name);
    assert_false(e->has_extra_keys || e->has_group_idx || e->has_lora_id);
    assert_null(e->kv_cache_spec_kind);
    assert_true(out.events[1].hashes[0] == UINT64_MAX - 1);
    assert_int_equal(out.events[2].type, KVEV_ALL_CLEARED);
    kvev_batch_free(&out);
}

static void test_unknown_tags(void **state)
{
    (void)state;
    struct pb b;
    pb_init(&b);
    batch_open(&b, 3);
    msgpack_pack_array(&b.pk, 2);
    str(&b, "BlockPinned");
    msgpack_pack_int(&b.pk, 1);
    msgpack_pack_array(&b.pk, 1);
    str(&b, "AllBlocksCleared");
    msgpack_pack_array(&b.pk, 1);
    str(&b, "SomethingNew");
    batch_close(&b);
    struct kvev_batch out;
    assert_int_equal(decode(&b, &out, NULL, 0), 0);
    assert_int_equal(out.n_events, 1);
    assert_int_equal(out.n_unknown, 2);
    assert_int_equal(out.events[0].type, KVEV_ALL_CLEARED);
    kvev_batch_free(&out);

    pb_init(&b);
    batch_open(&b, 0);
    batch_close(&b);
    assert_int_equal(decode(&b, &out, NULL, 0), 0);
    assert_int_equal(out.n_events, 0);
    kvev_batch_free(&out);
}

/* ---- malformed ---- */

typedef void (*build_fn)(struct pb *b);

/* One stored event with field `which` (1..11) replaced by the value `bad` packs. */
static void stored_with(struct pb *b, int which, void (*bad)(struct pb *b))
{
    batch_open(b, 1);
    msgpack_pack_array(&b->pk, 12);
    str(b, "BlockStored");
    for (int f = 1; f <= 11; f++) {
        if (f == which) {
            bad(b);
        } else if (f == 1 || f == 3) {
            msgpack_pack_array(&b->pk, 1);
            msgpack_pack_int(&b->pk, 1);
        } else if (f == 4) {
            msgpack_pack_int(&b->pk, 16);
        } else {
            msgpack_pack_nil(&b->pk);
        }
    }
    batch_close(b);
}

static void v_str(struct pb *b)
{
    str(b, "x");
}
static void v_int(struct pb *b)
{
    msgpack_pack_int(&b->pk, 3);
}
static void v_zero(struct pb *b)
{
    msgpack_pack_int(&b->pk, 0);
}
static void v_empty_str(struct pb *b)
{
    str(b, "");
}
static void v_float(struct pb *b)
{
    msgpack_pack_double(&b->pk, 1.5);
}
static void v_map(struct pb *b)
{
    msgpack_pack_map(&b->pk, 0);
}
static void v_arr_str(struct pb *b)
{
    msgpack_pack_array(&b->pk, 1);
    str(b, "x");
}
static void v_arr_empty_bin(struct pb *b)
{
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_bin(&b->pk, 0);
}
static void v_arr_big(struct pb *b)
{
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_int64(&b->pk, (int64_t)INT32_MAX + 1);
}
static void v_arr_float(struct pb *b)
{
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_double(&b->pk, 1.0);
}
static void v_huge_u64(struct pb *b)
{
    msgpack_pack_uint64(&b->pk, UINT64_MAX);
}
static void v_long_str(struct pb *b)
{
    char s[300];
    memset(s, 'a', sizeof(s) - 1);
    s[sizeof(s) - 1] = '\0';
    str(b, s);
}

#define STORED_CASE(name, field, value)                                                            \
    static void name(struct pb *b)                                                                 \
    {                                                                                              \
        stored_with(b, field, value);                                                              \
    }
STORED_CASE(b_hashes_not_array, 1, v_int)
STORED_CASE(b_hash_str, 1, v_arr_str)
STORED_CASE(b_hash_empty_bin, 1, v_arr_empty_bin)
STORED_CASE(b_parent_str, 2, v_str)
STORED_CASE(b_tokens_not_array, 3, v_map)
STORED_CASE(b_token_big, 3, v_arr_big)
STORED_CASE(b_token_float, 3, v_arr_float)
STORED_CASE(b_block_size_zero, 4, v_zero)
STORED_CASE(b_block_size_str, 4, v_str)
STORED_CASE(b_lora_id_str, 5, v_str)
STORED_CASE(b_lora_id_huge, 5, v_huge_u64)
STORED_CASE(b_medium_int, 6, v_int)
STORED_CASE(b_medium_empty, 6, v_empty_str)
STORED_CASE(b_medium_long, 6, v_long_str)
STORED_CASE(b_lora_name_int, 7, v_int)
STORED_CASE(b_group_idx_str, 9, v_str)
STORED_CASE(b_spec_kind_float, 10, v_float)
STORED_CASE(b_window_str, 11, v_str)

static void b_not_array(struct pb *b)
{
    msgpack_pack_map(&b->pk, 0);
}
static void b_short(struct pb *b)
{
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_double(&b->pk, 1.0);
}
static void b_ts_str(struct pb *b)
{
    msgpack_pack_array(&b->pk, 3);
    str(b, "now");
    msgpack_pack_array(&b->pk, 0);
    msgpack_pack_int(&b->pk, 0);
}
static void b_events_map(struct pb *b)
{
    msgpack_pack_array(&b->pk, 3);
    msgpack_pack_double(&b->pk, 1.0);
    msgpack_pack_map(&b->pk, 0);
    msgpack_pack_int(&b->pk, 0);
}
static void b_rank_str(struct pb *b)
{
    batch_open(b, 0);
    str(b, "0");
}
static void b_event_not_array(struct pb *b)
{
    batch_open(b, 1);
    str(b, "BlockStored");
    batch_close(b);
}
static void b_event_empty(struct pb *b)
{
    batch_open(b, 1);
    msgpack_pack_array(&b->pk, 0);
    batch_close(b);
}
static void b_tag_int(struct pb *b)
{
    batch_open(b, 1);
    msgpack_pack_array(&b->pk, 1);
    msgpack_pack_int(&b->pk, 0);
    batch_close(b);
}
static void b_stored_short(struct pb *b)
{
    batch_open(b, 1);
    msgpack_pack_array(&b->pk, 4);
    str(b, "BlockStored");
    msgpack_pack_array(&b->pk, 0);
    msgpack_pack_nil(&b->pk);
    msgpack_pack_array(&b->pk, 0);
    batch_close(b);
}
static void b_removed_short(struct pb *b)
{
    batch_open(b, 1);
    msgpack_pack_array(&b->pk, 1);
    str(b, "BlockRemoved");
    batch_close(b);
}
static void b_removed_medium_int(struct pb *b)
{
    batch_open(b, 1);
    msgpack_pack_array(&b->pk, 3);
    str(b, "BlockRemoved");
    msgpack_pack_array(&b->pk, 0);
    msgpack_pack_int(&b->pk, 1);
    batch_close(b);
}
static void b_second_event_bad(struct pb *b)
{
    batch_open(b, 2);
    msgpack_pack_array(&b->pk, 1);
    str(b, "AllBlocksCleared");
    msgpack_pack_array(&b->pk, 2);
    str(b, "BlockRemoved");
    msgpack_pack_nil(&b->pk);
    batch_close(b);
}
static void b_trailing(struct pb *b)
{
    batch_open(b, 0);
    batch_close(b);
    msgpack_pack_nil(&b->pk);
}
static void b_truncated(struct pb *b)
{
    stored_with(b, 0, NULL);
    b->sb.size -= 3;
}
static void b_huge_count(struct pb *b)
{
    batch_open(b, 1);
    msgpack_sbuffer_write(&b->sb, "\xdd\xff\xff\xff\xff", 5); /* an event of 2^32-1 fields */
}
static void b_huge_map(struct pb *b)
{
    msgpack_sbuffer_write(&b->sb, "\x93\x01\xdf\x10\x00\x00\x00\x01\x02", 9);
}
static void b_garbage(struct pb *b)
{
    msgpack_sbuffer_write(&b->sb, "\xc1\xc1\xc1", 3); /* 0xc1: never used */
}

static void test_malformed(void **state)
{
    (void)state;
    static const struct {
        build_fn build;
        const char *want; /* in the message */
    } cases[] = {
        {b_not_array, "want an array [ts, events"},
        {b_short, "want an array [ts, events"},
        {b_ts_str, "ts: want a number"},
        {b_events_map, "events: want an array"},
        {b_rank_str, "data_parallel_rank"},
        {b_event_not_array, "kv event 0: want an array starting with its tag"},
        {b_event_empty, "want an array starting with its tag"},
        {b_tag_int, "want an array starting with its tag"},
        {b_stored_short, "BlockStored): fields"},
        {b_removed_short, "BlockRemoved): fields"},
        {b_removed_medium_int, "BlockRemoved): medium"},
        {b_second_event_bad, "kv event 1 (BlockRemoved): block_hashes"},
        {b_hashes_not_array, "block_hashes: want an array"},
        {b_hash_str, "block_hashes[]"},
        {b_hash_empty_bin, "block_hashes[]"},
        {b_parent_str, "parent_block_hash"},
        {b_tokens_not_array, "token_ids: want an array"},
        {b_token_big, "token_ids[]"},
        {b_token_float, "token_ids[]"},
        {b_block_size_zero, "block_size"},
        {b_block_size_str, "block_size"},
        {b_lora_id_str, "lora_id"},
        {b_lora_id_huge, "lora_id"},
        {b_medium_int, "medium"},
        {b_medium_empty, "medium"},
        {b_medium_long, "medium"},
        {b_lora_name_int, "lora_name"},
        {b_group_idx_str, "group_idx"},
        {b_spec_kind_float, "kv_cache_spec_kind"},
        {b_window_str, "kv_cache_spec_sliding_window"},
        {b_trailing, "trailing bytes"},
        {b_truncated, "truncated"},
        {b_garbage, "not msgpack"},
        {b_huge_count, "an array or map of 4294967295 entries"},
        {b_huge_map, "an array or map of 536870912 entries"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pb b;
        pb_init(&b);
        cases[i].build(&b);
        struct kvev_batch out;
        char err[256] = "";
        int rc = decode(&b, &out, err, sizeof(err));
        if (rc != -EINVAL || !strstr(err, cases[i].want)) {
            fail_msg("case %zu: rc %d, message \"%s\", want \"%s\"", i, rc, err, cases[i].want);
        }
        assert_null(out.mem);
        assert_int_equal(out.n_events, 0);
    }
    struct kvev_batch out;
    char err[128] = "";
    assert_int_equal(kvev_decode("", 0, &out, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "payload of 0 bytes"));
    assert_int_equal(kvev_decode(NULL, 5, &out, NULL, 0), -EINVAL);
}

/* ---- topic and seq ---- */

static void test_topic(void **state)
{
    (void)state;
    struct kvev_topic t;
    char err[256];
    const char *ok = "kv@10.0.0.7:8000@meta-llama/Llama-3.1-8B";
    assert_int_equal(kvev_parse_topic(ok, strlen(ok), &t, err, sizeof(err)), 0);
    assert_string_equal(t.pod, "10.0.0.7:8000");
    assert_string_equal(t.model, "meta-llama/Llama-3.1-8B");
    const char *v6 = "kv@[fd00::1]:8000@tiny";
    assert_int_equal(kvev_parse_topic(v6, strlen(v6), &t, err, sizeof(err)), 0);
    assert_string_equal(t.pod, "[fd00::1]:8000");
    assert_string_equal(t.model, "tiny");
    static const struct {
        const char *topic;
        const char *want;
    } bad[] = {
        {"", "no kv@ prefix"},
        {"kv", "no kv@ prefix"},
        {"xx@pod@model", "no kv@ prefix"},
        {"kv@pod", "two parts"},
        {"kv@pod@model@extra", "exactly three"},
        {"kv@@model", "pod: want 1 to"},
        {"kv@pod@", "model: want 1 to"},
        {"kv@[fd00::1@x]:1@m", "'@' inside"},
        {"kv@[fd00::1:8000", "unclosed '['"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        int rc = kvev_parse_topic(bad[i].topic, strlen(bad[i].topic), &t, err, sizeof(err));
        if (rc != -EINVAL || !strstr(err, bad[i].want)) {
            fail_msg("topic \"%s\": rc %d, \"%s\", want \"%s\"", bad[i].topic, rc, err,
                     bad[i].want);
        }
    }
    char nul[] = "kv@po\0d@m";
    assert_int_equal(kvev_parse_topic(nul, sizeof(nul) - 1, &t, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "NUL"));
    char longpod[400] = "kv@";
    memset(longpod + 3, 'p', 300);
    strcpy(longpod + 303, "@m");
    assert_int_equal(kvev_parse_topic(longpod, strlen(longpod), &t, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "pod: want 1 to 255"));

    uint64_t seq;
    const uint8_t be[8] = {0, 0, 0, 0, 0, 0, 1, 2};
    assert_int_equal(kvev_parse_seq(be, 8, &seq, NULL, 0), 0);
    assert_true(seq == 0x102);
    assert_int_equal(kvev_parse_seq(be, 7, &seq, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "7 bytes"));
    const uint8_t end[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(kvev_parse_seq(end, 8, &seq, NULL, 0), 0);
    assert_true(seq == KVEV_REPLAY_END);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_our_publisher),   cmocka_unit_test(test_all_fields),
        cmocka_unit_test(test_optional_absent), cmocka_unit_test(test_nils_and_bytes),
        cmocka_unit_test(test_unknown_tags),    cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_topic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
