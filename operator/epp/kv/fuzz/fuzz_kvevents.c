/*
 * Fuzz target for the KV-event decoder and the topic and seq parsers (operator/epp/kv/
 * kvevents.h): the input is tried as a payload, a topic and a seq frame. The decoder must refuse
 * with a message or return events whose arrays hold what their counts say, tiers lowercased and
 * never empty; the topic parser must return a non-empty pod and model without '@' outside an
 * IPv6 pod's brackets.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "operator/epp/kv/kvevents.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_kvevents: check failed: %s (line %d)\n", #cond, __LINE__);       \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_event(const struct kvev_event *e)
{
    CHECK(e->type == KVEV_BLOCK_STORED || e->type == KVEV_BLOCK_REMOVED ||
          e->type == KVEV_ALL_CLEARED);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < e->n_hashes; i++) {
        sum += e->hashes[i]; /* ASan: the array is as long as its count */
    }
    for (uint32_t i = 0; i < e->n_tokens; i++) {
        sum += (uint64_t)e->token_ids[i];
    }
    (void)sum;
    if (e->type == KVEV_ALL_CLEARED) {
        return;
    }
    CHECK(e->tier[0] != '\0');
    for (const char *c = e->tier; *c; c++) {
        CHECK(!isupper((unsigned char)*c));
    }
    if (e->type == KVEV_BLOCK_STORED) {
        CHECK(e->block_size >= 1);
    }
    CHECK(!e->lora_name || strlen(e->lora_name) < KVEV_MAX_STR);
    CHECK(!e->kv_cache_spec_kind || strlen(e->kv_cache_spec_kind) < KVEV_MAX_STR);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    struct kvev_batch b;
    err[0] = '\0';
    if (kvev_decode(data, size, &b, err, sizeof(err)) == 0) {
        for (uint32_t i = 0; i < b.n_events; i++) {
            check_event(&b.events[i]);
        }
        kvev_batch_free(&b);
    } else {
        CHECK(err[0] != '\0');
        CHECK(b.mem == NULL);
    }
    struct kvev_topic t;
    if (kvev_parse_topic(data, size, &t, err, sizeof(err)) == 0) {
        CHECK(t.pod[0] && t.model[0]);
        CHECK(!strchr(t.model, '@'));
        CHECK(t.pod[0] == '[' || !strchr(t.pod, '@'));
    }
    uint64_t seq;
    CHECK((kvev_parse_seq(data, size, &seq, NULL, 0) == 0) == (size == 8));
    return 0;
}
