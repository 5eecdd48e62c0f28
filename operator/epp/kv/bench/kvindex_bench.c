/*
 * tandem-epp-kvindex-bench: the KV-block index's ingest rate (block hashes per second on one
 * core, through kvidx_add as the subscriber calls it, and through decode + add from real
 * payloads) and its score latency (128 keys x 64 candidate pods). Prints figures; not a test.
 *
 *   tandem-epp-kvindex-bench [blocks (4000000)] [score iterations (20000)]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "lib/clock.h"
#include "operator/epp/kv/kvevents.h"
#include "operator/epp/kv/kvindex.h"

#define PODS         64
#define KEYS         128
#define PER_EVENT    16 /* hashes per BlockStored, as a 256-token prompt at block size 16 */
#define EVENTS_BATCH 64

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void pod_name(char *out, size_t cap, int i)
{
    snprintf(out, cap, "10.0.%d.%d:8000", i / 200, i % 200 + 1);
}

/* One payload of EVENTS_BATCH BlockStored events of PER_EVENT int hashes and 16-token blocks. */
static msgpack_sbuffer make_payload(void)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, 1.0);
    msgpack_pack_array(&pk, EVENTS_BATCH);
    for (int e = 0; e < EVENTS_BATCH; e++) {
        msgpack_pack_array(&pk, 8);
        msgpack_pack_str_with_body(&pk, "BlockStored", 11);
        msgpack_pack_array(&pk, PER_EVENT);
        for (int i = 0; i < PER_EVENT; i++) {
            msgpack_pack_uint64(&pk, rnd());
        }
        msgpack_pack_nil(&pk);
        msgpack_pack_array(&pk, PER_EVENT * 16);
        for (int i = 0; i < PER_EVENT * 16; i++) {
            msgpack_pack_int32(&pk, (int32_t)(rnd() % 150000));
        }
        msgpack_pack_int32(&pk, 16);
        msgpack_pack_nil(&pk);
        msgpack_pack_str_with_body(&pk, "GPU", 3);
        msgpack_pack_nil(&pk);
    }
    msgpack_pack_int(&pk, 0);
    return sb;
}

static void bench_add(uint64_t blocks)
{
    struct kvidx *idx = kvidx_new(&(struct kvidx_config){.size = blocks}, NULL, 0);
    uint64_t *keys = malloc(blocks * sizeof(*keys));
    if (!idx || !keys) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (uint64_t i = 0; i < blocks; i++) {
        keys[i] = rnd();
    }
    char pod[64];
    int64_t t0 = tandem_now_ns();
    for (uint64_t i = 0; i + PER_EVENT <= blocks; i += PER_EVENT) {
        pod_name(pod, sizeof(pod), (int)(i / PER_EVENT % PODS));
        kvidx_add(idx, pod, "gpu", keys + i, PER_EVENT);
    }
    double s = (double)(tandem_now_ns() - t0) * 1e-9;
    printf("ingest (kvidx_add, %d hashes per event, %d pods): %" PRIu64 " hashes in %.3f s = "
           "%.2f M hashes/s\n",
           PER_EVENT, PODS, blocks, s, (double)blocks / s / 1e6);
    t0 = tandem_now_ns();
    for (uint64_t i = 0; i + PER_EVENT <= blocks; i += PER_EVENT) {
        pod_name(pod, sizeof(pod), (int)((i / PER_EVENT + 1) % PODS));
        kvidx_add(idx, pod, "gpu", keys + i, PER_EVENT);
    }
    s = (double)(tandem_now_ns() - t0) * 1e-9;
    printf("ingest, keys already present (second pod each): %.2f M hashes/s\n",
           (double)blocks / s / 1e6);
    for (uint64_t i = 0; i < blocks; i++) {
        keys[i] = rnd();
    }
    struct kvidx *small = kvidx_new(&(struct kvidx_config){.size = blocks / 4}, NULL, 0);
    t0 = tandem_now_ns();
    for (uint64_t i = 0; i + PER_EVENT <= blocks; i += PER_EVENT) {
        kvidx_add(small, "10.0.0.1:8000", "gpu", keys + i, PER_EVENT);
    }
    s = (double)(tandem_now_ns() - t0) * 1e-9;
    printf("ingest at the size bound (LRU evicting 3 of 4): %.2f M hashes/s\n",
           (double)blocks / s / 1e6);
    kvidx_free(small);
    kvidx_free(idx);
    free(keys);
}

static void bench_decode(void)
{
    msgpack_sbuffer sb = make_payload();
    struct kvidx *idx = kvidx_new(&(struct kvidx_config){.size = 8000000}, NULL, 0);
    const int rounds = 2000;
    int64_t t0 = tandem_now_ns();
    uint64_t hashes = 0;
    for (int r = 0; r < rounds; r++) {
        struct kvev_batch b;
        if (kvev_decode(sb.data, sb.size, &b, NULL, 0) != 0) {
            fprintf(stderr, "decode failed\n");
            exit(1);
        }
        for (uint32_t e = 0; e < b.n_events; e++) {
            /* rounds reuse the payload: spread them over pods so entries are new */
            char pod[64];
            pod_name(pod, sizeof(pod), r % PODS);
            kvidx_add(idx, pod, b.events[e].tier, b.events[e].hashes, b.events[e].n_hashes);
            hashes += b.events[e].n_hashes;
        }
        kvev_batch_free(&b);
    }
    double s = (double)(tandem_now_ns() - t0) * 1e-9;
    printf("decode + ingest (%zu-byte payloads of %d BlockStored x %d hashes x 16 tokens): "
           "%.2f M hashes/s, %.1f MB/s of payload\n",
           sb.size, EVENTS_BATCH, PER_EVENT, (double)hashes / s / 1e6,
           (double)sb.size * rounds / s / 1e6);
    kvidx_free(idx);
    msgpack_sbuffer_destroy(&sb);
}

static void bench_score(int iterations)
{
    struct kvidx *idx = kvidx_new(NULL, NULL, 0);
    uint64_t keys[KEYS];
    for (int i = 0; i < KEYS; i++) {
        keys[i] = rnd();
    }
    char names[PODS][64];
    const char *pods[PODS];
    for (int p = 0; p < PODS; p++) {
        pod_name(names[p], sizeof(names[p]), p);
        pods[p] = names[p];
        /* pod p holds a prefix of p*2 blocks; every 8th one also on CPU. Only the last 10 pods
         * stored per key stay (pod_cache_size). */
        int held = p * 2 > KEYS ? KEYS : p * 2;
        kvidx_add(idx, names[p], p % 8 == 0 ? "cpu" : "gpu", keys, (size_t)held);
        for (int j = 0; j < 1000; j++) {
            uint64_t noise = rnd();
            kvidx_add(idx, names[p], "gpu", &noise, 1);
        }
    }
    struct epp_prefix_match out[PODS];
    int64_t t0 = tandem_now_ns();
    int32_t longest = 0;
    for (int i = 0; i < iterations; i++) {
        longest = kvidx_score(idx, keys, KEYS, pods, PODS, out);
    }
    double us = (double)(tandem_now_ns() - t0) * 1e-3 / iterations;
    printf("score (%d keys x %d candidate pods, longest match %d): %.2f us per request\n", KEYS,
           PODS, longest, us);
    kvidx_free(idx);
}

int main(int argc, char **argv)
{
    uint64_t blocks = argc > 1 ? strtoull(argv[1], NULL, 10) : 4000000;
    long iterations = argc > 2 ? strtol(argv[2], NULL, 10) : 20000;
    if (blocks < PER_EVENT * 4 || iterations < 1 || iterations > 100000000) {
        fprintf(stderr, "usage: %s [blocks >= 64] [score iterations >= 1]\n", argv[0]);
        return 2;
    }
    bench_add(blocks);
    bench_decode();
    bench_score((int)iterations);
    return 0;
}
