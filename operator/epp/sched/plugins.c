/*
 * The plugin catalogue: llm-d's and GIE's type names (reference §1.9, §2.3) mapped to their
 * implementations. Types that configure the data layer, request parsing or flow control are
 * accepted so llm-d's configs load unchanged; the EPP's other modules act on them.
 */
#include <stddef.h>
#include <string.h>

#include "operator/epp/sched/plugins.h"

static const struct plugin_ops others[] = {
    {.type = "metrics-data-source", .kind = PK_OTHER},
    {.type = "core-metrics-extractor", .kind = PK_OTHER},
    {.type = "models-data-extractor", .kind = PK_OTHER},
    {.type = "k8s-notification-source", .kind = PK_OTHER},
    {.type = "endpoint-notification-source", .kind = PK_OTHER},
    {.type = "openai-parser", .kind = PK_OTHER},
    {.type = "passthrough-parser", .kind = PK_OTHER},
    {.type = "token-producer", .kind = PK_OTHER},
    {.type = "tokenizer", .kind = PK_OTHER},
    {.type = "inflight-load-producer", .kind = PK_OTHER},
    {.type = "approx-prefix-cache-producer", .kind = PK_OTHER},
    {.type = "global-strict-fairness-policy", .kind = PK_OTHER},
    {.type = "round-robin-fairness-policy", .kind = PK_OTHER},
    {.type = "fcfs-ordering-policy", .kind = PK_OTHER},
    {.type = "edf-ordering-policy", .kind = PK_OTHER},
    {.type = "static-usage-limit-policy", .kind = PK_OTHER},
    {.type = "slo-deadline-ordering-policy", .kind = PK_OTHER},
    {.type = "eviction-sheddable-filter", .kind = PK_OTHER},
    {.type = "eviction-priority-then-time-ordering", .kind = PK_OTHER},
    {.type = "vllmgrpc-parser", .kind = PK_OTHER},
    {.type = "vertexai-parser", .kind = PK_OTHER},
    {.type = "request-attribute-reporter", .kind = PK_OTHER},
};

static const struct plugin_ops *const table[] = {
    &filter_decode_ops,
    &filter_prefill_ops,
    &filter_encode_ops,
    &filter_label_selector_ops,
    &filter_by_label_selector_ops,
    &filter_by_label_ops,
    &filter_prefix_affinity_ops,
    &scorer_queue_ops,
    &scorer_kv_ops,
    &scorer_prefix_ops,
    &scorer_precise_ops,
    &scorer_load_aware_ops,
    &scorer_active_request_ops,
    &scorer_session_ops,
    &scorer_lora_ops,
    &scorer_running_ops,
    &scorer_token_load_ops,
    &picker_max_score_ops,
    &picker_random_ops,
    &picker_weighted_ops,
    &handler_single_ops,
    &handler_pd_ops,
    &handler_disagg_ops,
    &decider_prefix_ops,
    &decider_always_ops,
    &prereq_prefill_header_ops,
    &prereq_disagg_headers_ops,
    &saturation_utilization_ops,
};

const struct plugin_ops *sched_plugin_ops(const char *type)
{
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strcmp(table[i]->type, type) == 0) {
            return table[i];
        }
    }
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        if (strcmp(others[i].type, type) == 0) {
            return &others[i];
        }
    }
    return NULL;
}

/* llm-d types whose behaviour tandem-epp does not implement: a config naming one fails to load
 * rather than silently scheduling differently. */
static const char *const unsupported[] = {
    "slo-headroom-tier-filter",
    "context-length-aware",
    "no-hit-lru-scorer",
    "latency-scorer",
    "predicted-latency-scorer",
    "predicted-latency-producer",
    "data-parallel-profile-handler",
    "always-disagg-multimodal-decider",
    "probabilistic-admitter",
    "latency-slo-admitter",
    "concurrency-detector",
};

bool sched_plugin_unsupported(const char *type)
{
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        if (strcmp(unsupported[i], type) == 0) {
            return true;
        }
    }
    return false;
}
