/*
 * tandem-epp-sched-bench: scheduling decision latency (p50/p99) at 64 endpoints with the precise
 * prefix scorer, queue-scorer and kv-cache-utilization-scorer, for a 2k-token prompt of 128 block
 * keys. The precise matches are filled as the KV-index producer would (a longest run per
 * endpoint, tier-weighted). Usage: tandem-epp-sched-bench [iterations].
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/metrics.h"
#include "operator/epp/sched/sched.h"

#define N_EPS  64
#define N_KEYS 128

static const char config[] = "apiVersion: llm-d.ai/v1alpha1\n"
                             "kind: EndpointPickerConfig\n"
                             "plugins:\n"
                             "- type: precise-prefix-cache-scorer\n"
                             "  parameters:\n"
                             "    tokenProcessorConfig: {blockSize: 16, hashSeed: \"42\"}\n"
                             "- type: queue-scorer\n"
                             "- type: kv-cache-utilization-scorer\n"
                             "schedulingProfiles:\n"
                             "- name: default\n"
                             "  plugins:\n"
                             "  - {pluginRef: precise-prefix-cache-scorer, weight: 3}\n"
                             "  - {pluginRef: queue-scorer, weight: 2}\n"
                             "  - {pluginRef: kv-cache-utilization-scorer, weight: 2}\n";

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void make_endpoints(struct epp_endpoint *eps, struct epp_endpoint **ptrs, char names[][32])
{
    for (int i = 0; i < N_EPS; i++) {
        struct epp_endpoint *ep = &eps[i];
        memset(ep, 0, sizeof(*ep));
        snprintf(names[i], 32, "decode-%d", i);
        ep->id = (uint64_t)i + 1;
        ep->name = names[i];
        ep->ns = "bench";
        snprintf(ep->ip, sizeof(ep->ip), "10.0.%d.%d", i / 250, i % 250 + 1);
        ep->port = 8000;
        snprintf(ep->addr, sizeof(ep->addr), "%s:%d", ep->ip, ep->port);
        ep->role = EPP_ROLE_DECODE;
        ep->ready = true;
        ep->m.valid = true;
        ep->m.waiting = (double)(i % 7);
        ep->m.running = (double)(i % 11);
        ep->m.kv_usage = (double)(i % 10) / 10.0;
        ep->m.block_size = 16;
        ptrs[i] = ep;
    }
}

/* GIE's default profile (approximate prefix index), for comparison. */
static const char approx_config[] = "apiVersion: llm-d.ai/v1alpha1\n"
                                    "kind: EndpointPickerConfig\n"
                                    "plugins:\n"
                                    "- type: queue-scorer\n"
                                    "- type: kv-cache-utilization-scorer\n"
                                    "- type: prefix-cache-scorer\n"
                                    "schedulingProfiles:\n"
                                    "- name: default\n"
                                    "  plugins:\n"
                                    "  - {pluginRef: queue-scorer, weight: 2}\n"
                                    "  - {pluginRef: kv-cache-utilization-scorer, weight: 2}\n"
                                    "  - {pluginRef: prefix-cache-scorer, weight: 3}\n";

static struct epp_endpoint eps[N_EPS];
static struct epp_endpoint *ptrs[N_EPS];
static char names[N_EPS][32];
static struct epp_prefix_match pm[N_EPS];
static uint64_t keys[N_KEYS];
static char prompt[2048 * 4 + 1];

/* What the KV-index producer would find on each endpoint for iteration it. */
static void fill_matches(int it)
{
    for (int i = 0; i < N_EPS; i++) {
        int run = (int)(((uint64_t)(i * 37 + it) * 2654435761u) % (N_KEYS + 1));
        pm[i].precise_blocks = run;
        pm[i].precise_score = run * (i % 4 == 0 ? 0.8 : 1.0);
    }
}

static int run(const char *label, const char *cfg, bool precise, int iters)
{
    char err[512];
    struct metrics_registry *reg = metrics_registry_new();
    struct epp_sched *s = epp_sched_new(cfg, strlen(cfg), reg, err, sizeof(err));
    int64_t *lat = malloc((size_t)iters * sizeof(*lat));
    struct epp_sched_result *res = malloc(sizeof(*res));
    if (!s || !lat || !res) {
        fprintf(stderr, "sched-bench: %s\n", s ? "out of memory" : err);
        free(lat);
        free(res);
        epp_sched_free(s);
        metrics_registry_free(reg);
        return 1;
    }
    struct epp_request r = {.request_id = "bench",
                            .model = "m",
                            .requested_model = "m",
                            .prefix_text = prompt,
                            .prefix_len = sizeof(prompt) - 1,
                            .prompt_tokens = 2048,
                            .block_keys = precise ? keys : NULL,
                            .n_block_keys = precise ? N_KEYS : 0,
                            .block_size = 16};
    for (int it = 0; it < iters; it++) {
        fill_matches(it);
        int64_t t0 = tandem_now_ns();
        epp_schedule(s, &r, ptrs, pm, N_EPS, res);
        lat[it] = tandem_now_ns() - t0;
        if (!precise && it < N_EPS) { /* warm the approximate index on every endpoint */
            epp_sched_pre_request(s, &r, res);
        }
    }
    qsort(lat, (size_t)iters, sizeof(*lat), cmp_i64);
    int p50 = iters / 2, p99 = (int)((int64_t)iters * 99 / 100);
    printf("%s: endpoints=%d prompt_tokens=2048 block_keys=%d iterations=%d p50_us=%.2f "
           "p99_us=%.2f max_us=%.2f\n",
           label, N_EPS, precise ? N_KEYS : 0, iters, (double)lat[p50] / 1e3,
           (double)lat[p99] / 1e3, (double)lat[iters - 1] / 1e3);
    free(lat);
    free(res);
    epp_sched_free(s);
    metrics_registry_free(reg);
    return 0;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 20000;
    if (iters <= 0) {
        fprintf(stderr, "usage: tandem-epp-sched-bench [iterations > 0]\n");
        return 2;
    }
    make_endpoints(eps, ptrs, names);
    memset(prompt, 'a', sizeof(prompt) - 1);
    for (int k = 0; k < N_KEYS; k++) {
        keys[k] = 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
    }
    int rc = run("precise+queue+kv", config, true, iters);
    return rc != 0 ? rc : run("approx-prefix+queue+kv (GIE default)", approx_config, false, iters);
}
