/*
 * Fuzz target for the KV transport's side-channel payloads (agent/kvxfer.h): every input goes
 * through the request decoder, the handshake-reply decoder (and, when that accepts it, the agent
 * metadata it carries) and the agent-metadata decoder directly. A decoder must either refuse with
 * a message and nothing allocated, or return spans inside the input and sizes within the limits;
 * accepted metadata is checked against a layout and re-encoded, and must decode to the same thing.
 * Tandem's extension messages (the "tandem_blocks" request and its reply) go through their
 * decoders too, with the same promises, and round-trip through their encoders.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/kvxfer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_kvx_handshake: check failed: %s (line %d)\n", #cond, __LINE__);  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int inside(const uint8_t *span, size_t len, const uint8_t *buf, size_t size)
{
    return span >= buf && len <= size && (size_t)(span - buf) <= size - len;
}

static void check_equal(const struct kvx_agent_meta *a, const struct kvx_agent_meta *b)
{
    CHECK(strcmp(a->engine_id, b->engine_id) == 0);
    CHECK(a->n_regions == b->n_regions && a->num_blocks == b->num_blocks);
    CHECK(a->block_size == b->block_size && a->device_id == b->device_id);
    CHECK(strcmp(a->kv_cache_layout, b->kv_cache_layout) == 0);
    CHECK(a->worker_addr_len == b->worker_addr_len);
    CHECK(memcmp(a->worker_addr, b->worker_addr, a->worker_addr_len) == 0);
    for (int32_t r = 0; r < a->n_regions; r++) {
        CHECK(a->base_addrs[r] == b->base_addrs[r] && a->block_lens[r] == b->block_lens[r]);
        CHECK(a->rkey_lens[r] == b->rkey_lens[r]);
        CHECK(memcmp(a->rkeys[r], b->rkeys[r], a->rkey_lens[r]) == 0);
    }
}

static void check_meta(const uint8_t *buf, size_t size)
{
    static const struct kvx_layout layout = {.n_layers = 2,
                                             .n_kv_heads = 2,
                                             .head_dim = 8,
                                             .block_size = 4,
                                             .num_blocks = 16,
                                             .dtype_bytes = 2};
    char err[512] = "";
    struct kvx_agent_meta m, again;
    int rc = kvx_wire_decode_agent_meta(buf, size, &m, err, sizeof(err));
    CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc != 0) {
        CHECK(err[0] != '\0');
        CHECK(m.base_addrs == NULL && m.block_lens == NULL && m.rkeys == NULL);
        return;
    }
    CHECK(m.engine_id[0] != '\0' && strlen(m.engine_id) <= KVX_ENGINE_ID_MAX);
    CHECK(m.n_regions >= 1 && m.n_regions <= KVX_MAX_REGIONS);
    CHECK(m.num_blocks >= 1 && m.block_size >= 1);
    CHECK(m.worker_addr_len >= 1 && m.worker_addr_len <= KVX_BLOB_MAX);
    CHECK(inside(m.worker_addr, m.worker_addr_len, buf, size));
    for (int32_t r = 0; r < m.n_regions; r++) {
        CHECK(m.rkey_lens[r] >= 1 && m.rkey_lens[r] <= KVX_BLOB_MAX);
        CHECK(inside(m.rkeys[r], m.rkey_lens[r], buf, size));
        CHECK(m.block_lens[r] >= 1);
        /* the decoder promised that the region's end fits in 64 bits */
        CHECK(m.block_lens[r] <= UINT64_MAX / (uint64_t)m.num_blocks);
        CHECK(m.base_addrs[r] <= UINT64_MAX - m.block_lens[r] * (uint64_t)m.num_blocks);
    }
    err[0] = '\0';
    rc = kvx_agent_meta_check(&m, &layout, err, sizeof(err));
    CHECK(rc == 0 || (rc == -EINVAL && err[0] != '\0'));
    if (rc == 0) {
        CHECK(m.n_regions == 2 * layout.n_layers && m.block_size == layout.block_size);
    }
    size_t len = 0;
    uint8_t *enc = kvx_wire_encode_agent_meta(&m, &len);
    CHECK(enc != NULL);
    CHECK(kvx_wire_decode_agent_meta(enc, len, &again, err, sizeof(err)) == 0);
    check_equal(&m, &again);
    kvx_agent_meta_release(&again);
    free(enc);
    kvx_agent_meta_release(&m);
    CHECK(m.base_addrs == NULL);
}

static void check_blocks(const uint8_t *data, size_t size)
{
    char err[512] = "";
    struct kvx_blocks_request rq, rq2;
    int rc = kvx_wire_decode_blocks_request(data, size, 16, &rq, err, sizeof(err));
    CHECK(rc == 0 || rc == -ENOENT || (rc == -EINVAL && err[0] != '\0'));
    if (rc != 0) {
        CHECK(rq.blocks == NULL && rq.n == 0);
    } else {
        CHECK(rq.n >= 1 && rq.n <= KVX_EXT_BLOCKS && rq.blocks != NULL);
        for (int32_t i = 0; i < rq.n; i++) {
            CHECK(rq.blocks[i] >= 1 && rq.blocks[i] < 16);
        }
        size_t len = 0;
        uint8_t *enc = kvx_wire_encode_blocks_request(&rq, &len);
        CHECK(enc != NULL &&
              kvx_wire_decode_blocks_request(enc, len, 16, &rq2, err, sizeof(err)) == 0);
        CHECK(rq2.seq == rq.seq && rq2.n == rq.n && rq2.sums == rq.sums && rq2.int8 == rq.int8 &&
              rq2.tp_rank == rq.tp_rank);
        CHECK(memcmp(rq2.blocks, rq.blocks, sizeof(int32_t) * (size_t)rq.n) == 0);
        kvx_blocks_request_release(&rq2);
        free(enc);
        kvx_blocks_request_release(&rq);
    }

    struct kvx_blocks_reply rp, rp2;
    err[0] = '\0';
    rc = kvx_wire_decode_blocks_reply(data, size, &rp, err, sizeof(err));
    CHECK(rc == 0 || (rc == -EINVAL && err[0] != '\0'));
    if (rc != 0) {
        return;
    }
    CHECK(rp.sums_len % 8 == 0);
    CHECK(rp.sums == NULL || inside(rp.sums, rp.sums_len, data, size));
    if (rp.has_staging) {
        CHECK(rp.staging_len >= 1 && rp.staging_addr <= UINT64_MAX - rp.staging_len);
        CHECK(rp.staging_rkey_len >= 1 && rp.staging_rkey_len <= KVX_BLOB_MAX);
        CHECK(inside(rp.staging_rkey, rp.staging_rkey_len, data, size));
    }
    if (rp.foreign || !rp.has_seq) {
        return; /* not ours to re-encode */
    }
    size_t len = 0;
    uint8_t *enc = kvx_wire_encode_blocks_reply(&rp, &len);
    CHECK(enc != NULL && kvx_wire_decode_blocks_reply(enc, len, &rp2, err, sizeof(err)) == 0);
    /* the error text is escaped once more on the way back (printable), so only its presence */
    CHECK(rp2.seq == rp.seq && (rp2.error[0] != '\0') == (rp.error[0] != '\0'));
    CHECK(strchr(rp.error, '\\') != NULL || strcmp(rp2.error, rp.error) == 0);
    if (!rp.error[0]) {
        CHECK(rp2.has_staging == rp.has_staging && rp2.sums_len == rp.sums_len);
        CHECK(rp.sums_len == 0 ||
              (rp.sums && rp2.sums && memcmp(rp2.sums, rp.sums, rp.sums_len) == 0));
        CHECK(!rp.has_staging ||
              (rp2.staging_id == rp.staging_id && rp2.staging_addr == rp.staging_addr &&
               rp2.staging_len == rp.staging_len && rp2.staging_rkey_len == rp.staging_rkey_len));
    }
    free(enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_blocks(data, size);
    char err[512] = "";
    int64_t rank = -7;
    int rc = kvx_wire_decode_request(data, size, &rank, err, sizeof(err));
    CHECK(rc == 0 || (rc == -EINVAL && err[0] != '\0'));
    if (rc == 0) {
        size_t len = 0;
        uint8_t *enc = kvx_wire_encode_request(rank, &len);
        int64_t back = -7;
        CHECK(enc != NULL && kvx_wire_decode_request(enc, len, &back, err, sizeof(err)) == 0);
        CHECK(back == rank);
        free(enc);
    }

    struct kvx_handshake h;
    err[0] = '\0';
    rc = kvx_wire_decode_handshake(data, size, &h, err, sizeof(err));
    CHECK(rc == 0 || (rc == -EINVAL && err[0] != '\0'));
    if (rc == 0 && h.error[0] == '\0') {
        CHECK(strlen(h.compat_hash) == KVX_HASH_HEX);
        CHECK(h.agent_metadata_len >= 1 &&
              inside(h.agent_metadata, h.agent_metadata_len, data, size));
        size_t len = 0;
        uint8_t *enc =
            kvx_wire_encode_handshake(h.compat_hash, h.agent_metadata, h.agent_metadata_len, &len);
        struct kvx_handshake back;
        CHECK(enc != NULL && kvx_wire_decode_handshake(enc, len, &back, err, sizeof(err)) == 0);
        CHECK(strcmp(back.compat_hash, h.compat_hash) == 0);
        CHECK(back.agent_metadata_len == h.agent_metadata_len);
        CHECK(memcmp(back.agent_metadata, h.agent_metadata, h.agent_metadata_len) == 0);
        free(enc);
        check_meta(h.agent_metadata, h.agent_metadata_len);
    }
    check_meta(data, size);
    return 0;
}
