/*
 * Fuzz target for the EndpointPickerConfig loader: bytes → epp_sched_new. Invariants: a failed
 * load always says why; a loaded config schedules a small pool (every profile handler and plugin
 * runs) with a status of 0 or 503, targets inside the pool, and survives a pre-request update and
 * an endpoint removal.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/log.h"
#include "operator/epp/sched/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_config: check failed: %s (line %d)\n", #cond, __LINE__);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define N 4

static void schedule_pool(struct epp_sched *s)
{
    static const enum epp_role roles[N] = {EPP_ROLE_DECODE, EPP_ROLE_PREFILL, EPP_ROLE_UNSET,
                                           EPP_ROLE_BOTH};
    struct epp_endpoint eps[N];
    struct epp_endpoint *ptrs[N];
    struct epp_prefix_match pm[N];
    uint64_t keys[4] = {1, 2, 3, 4};
    char text[300];
    memset(text, 'x', sizeof(text));
    memset(eps, 0, sizeof(eps));
    for (int i = 0; i < N; i++) {
        eps[i].id = (uint64_t)i + 1;
        eps[i].name = "pod";
        eps[i].ns = "ns";
        snprintf(eps[i].addr, sizeof(eps[i].addr), "10.0.0.%d:8000", i);
        eps[i].role = roles[i];
        eps[i].ready = true;
        eps[i].labels = json_object_new_object();
        eps[i].m.valid = true;
        eps[i].m.waiting = i;
        eps[i].m.kv_usage = 0.2 * i;
        pm[i].precise_blocks = i;
        pm[i].precise_score = i;
        ptrs[i] = &eps[i];
    }
    struct epp_request r = {.model = "m",
                            .prefix_text = text,
                            .prefix_len = sizeof(text),
                            .prompt_tokens = 75,
                            .block_keys = keys,
                            .n_block_keys = 4,
                            .block_size = 16};
    struct epp_sched_result res;
    for (int pass = 0; pass < 2; pass++) {
        int st = epp_schedule(s, &r, ptrs, pm, N, &res);
        CHECK(st == 0 || st == 503);
        CHECK(st != 0 || (res.n_targets > 0 && res.targets[0] >= eps && res.targets[0] < eps + N));
        epp_sched_pre_request(s, &r, &res);
        r.n_block_keys = 0; /* second pass: the approximate estimate */
    }
    epp_sched_saturated(s, ptrs, N, 0);
    epp_sched_endpoint_removed(s, &eps[0]);
    for (int i = 0; i < N; i++) {
        json_object_put(eps[i].labels);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    char err[512] = "";
    if (!quiet) {
        log_init("fuzz", LOGL_ERROR, LOG_FORMAT_TEXT);
        quiet = 1;
    }
    struct epp_sched *s = epp_sched_new((const char *)data, size, NULL, err, sizeof(err));
    if (!s) {
        CHECK(err[0] != '\0');
        return 0;
    }
    epp_sched_seed(s, 1);
    CHECK(epp_sched_needs(s) != NULL);
    schedule_pool(s);
    epp_sched_free(s);
    return 0;
}
