/*
 * What the EPP knows about each model-server endpoint and about each request it schedules: the
 * contract between the data layer (datastore.c: pods, scraped metrics, in-flight accounting), the
 * request parsers (gateway.c, extproc/), the data producers (the KV-block index, prefix keys) and
 * the scheduling framework (sched/).
 *
 * Threading: endpoints live on the EPP's main loop thread. The scheduler runs there too, so it
 * reads these structs without locks; nothing here may be kept past the call that lent it.
 */
#ifndef TANDEM_OPERATOR_EPP_ENDPOINT_H
#define TANDEM_OPERATOR_EPP_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <json-c/json.h>

/* The pod label llm-d's filters read, and its values (llm-d docs/disaggregation.md). */
#define EPP_ROLE_LABEL "llm-d.ai/role"

enum epp_role {
    EPP_ROLE_UNSET = 0, /* no llm-d.ai/role label */
    EPP_ROLE_PREFILL,
    EPP_ROLE_DECODE,
    EPP_ROLE_BOTH, /* deprecated spelling of prefill-decode */
    EPP_ROLE_PREFILL_DECODE,
    EPP_ROLE_ENCODE,
    EPP_ROLE_ENCODE_PREFILL,
    EPP_ROLE_ENCODE_DECODE,
    EPP_ROLE_ENCODE_PREFILL_DECODE,
    EPP_ROLE_OTHER, /* a value not in the list above */
};

static const char *const epp_role_names[] = {
    "",
    "prefill",
    "decode",
    "both",
    "prefill-decode",
    "encode",
    "encode-prefill",
    "encode-decode",
    "encode-prefill-decode",
    "other",
};

/* The role a label value names (NULL: EPP_ROLE_UNSET). */
static inline enum epp_role epp_role_parse(const char *value)
{
    if (!value) {
        return EPP_ROLE_UNSET;
    }
    for (int r = EPP_ROLE_PREFILL; r < EPP_ROLE_OTHER; r++) {
        if (strcmp(value, epp_role_names[r]) == 0) {
            return (enum epp_role)r;
        }
    }
    return EPP_ROLE_OTHER;
}

static inline const char *epp_role_name(enum epp_role r)
{
    return r >= EPP_ROLE_UNSET && r <= EPP_ROLE_OTHER ? epp_role_names[r] : "other";
}

/* What the last successful scrape of the endpoint's /metrics said (vLLM names, reference §1.7). */
struct epp_metrics {
    bool valid;             /* at least one scrape succeeded */
    int64_t updated_ms;     /* monotonic ms of that scrape (tandem_now_ms()) */
    double waiting;         /* vllm:num_requests_waiting */
    double running;         /* vllm:num_requests_running */
    double kv_usage;        /* vllm:kv_cache_usage_perc (or vllm:gpu_cache_usage_perc), 0..1 */
    int32_t block_size;     /* vllm:cache_config_info{block_size}, 0 when unknown */
    int64_t num_gpu_blocks; /* vllm:cache_config_info{num_gpu_blocks}, 0 when unknown */
    int32_t max_lora;       /* vllm:lora_requests_info{max_lora}, 0 when the server has none */
    char *running_loras;    /* comma lists from vllm:lora_requests_info; NULL when empty */
    char *waiting_loras;
};

/* One model-server endpoint: a pod's IP and the pool's target port. */
struct epp_endpoint {
    uint64_t id;   /* unique for the EPP's lifetime (a re-created pod gets a new one) */
    char *name;    /* pod name; the address in --endpoints mode */
    char *ns;      /* pod namespace; "" in --endpoints mode */
    char *model;   /* the model it serves (tandem.dev/model label, or /v1/models); may be NULL */
    char ip[64];   /* IPv4 or IPv6 text, no brackets */
    int port;      /* target port (the sidecar's, 8000) */
    char addr[80]; /* "ip:port" ("[ip]:port" for IPv6): the destination-endpoint value */
    struct json_object *labels; /* the pod's labels (an object, possibly empty), owned */
    enum epp_role role;
    bool ready; /* in rotation: Ready and not being deleted */
    struct epp_metrics m;
    bool stale; /* metrics older than --metrics-staleness-threshold (or never scraped) */
    /* What this EPP itself has sent there and not yet seen finish. */
    int32_t active_requests;
    int64_t active_tokens; /* prompt tokens (estimated) of those requests */
    /* Failure ejection (gateway): consecutive connection failures, and until when (monotonic ms)
     * the endpoint is skipped after too many. */
    int32_t consecutive_failures;
    int64_t ejected_until_ms;
    /* Prompt blocks of the requests routed here, and how many of them it held (hit rate). */
    uint64_t routed_blocks, routed_hit_blocks;
};

/* InferenceModel criticality (GIE v1alpha2). Unset is Standard. */
enum epp_criticality {
    EPP_CRIT_STANDARD = 0,
    EPP_CRIT_CRITICAL,
    EPP_CRIT_SHEDDABLE,
};

/* One request as the scheduler sees it. Every pointer is borrowed for the scheduling call. */
struct epp_request {
    const char *request_id;      /* x-request-id */
    const char *model;           /* the model to serve it (after targetModels selection) */
    const char *requested_model; /* the request's "model" field */
    const char *lora;            /* the adapter name when model is a LoRA adapter, else NULL */
    enum epp_criticality criticality;
    /* The text the approximate prefix index hashes: the completion prompt, or the JSON of the chat
     * messages (GIE's approximate producer), and its length. */
    const char *prefix_text;
    size_t prefix_len;
    /* Prompt tokens: exact when the request was tokenized, else prefix_len / 4. */
    int64_t prompt_tokens;
    /* The engine's block hashes of the prompt's full blocks (precise prefix scoring), chain
     * order, and the block size they were cut with; n_block_keys 0 when not computed. */
    const uint64_t *block_keys;
    int32_t n_block_keys;
    int32_t block_size;
    const char *session_token; /* x-session-token header, or NULL */
    /* Envoy's subset hint (x-gateway-destination-endpoint-subset): only these "ip:port" may be
     * picked; n_subset 0 = no hint. */
    const char *const *subset;
    int32_t n_subset;
    const struct json_object
        *headers; /* all request headers, lowercase names -> strings; may be NULL */
};

/* Per candidate, what the data producers found before scheduling (parallel to the endpoint
 * array given to the scheduler). */
struct epp_prefix_match {
    int32_t precise_blocks; /* longest run of the request's block keys the KV index has on it */
    double precise_score;   /* the same run weighted by tier (gpu 1.0, cpu 0.8 by default) */
};

#endif
