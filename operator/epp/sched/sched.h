/*
 * The scheduling framework of tandem-epp: llm-d's EndpointPickerConfig (YAML, both apiVersions)
 * loaded into profiles of filters → weighted scorers → a picker, run under a profile handler
 * (single, or decode-first P/D), plus the saturation detector that sheds Sheddable requests.
 *
 * Threading: one struct epp_sched is used from one thread (the EPP's main loop); nothing here
 * locks. Metrics go to the registry given at creation, which is thread-safe on its own.
 */
#ifndef TANDEM_OPERATOR_EPP_SCHED_H
#define TANDEM_OPERATOR_EPP_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/metrics.h"
#include "operator/epp/endpoint.h"

#define EPP_SCHED_MAX_TARGETS  8  /* ranked primaries kept for fallback retries */
#define EPP_SCHED_MAX_PROFILES 64 /* scheduling profiles in one config */
#define EPP_SESSION_TOKEN_MAX  512

struct epp_sched;

/* What one profile picked: indexes into the endpoint array given to epp_schedule, best first. */
struct epp_profile_result {
    const char *profile; /* the profile's name (owned by the sched object) */
    int status;          /* 0, or 503 when no endpoint passed its filters */
    int n_targets;       /* ranked, best first */
    int n_picked;        /* how many of them the picker picked */
    int targets[EPP_SCHED_MAX_TARGETS];
};

struct epp_sched_result {
    int status; /* 0, or 503 (reason says why) */
    char reason[160];
    /* Primary targets, best first: n_targets ranked endpoints, of which the first n_picked are
     * the picker's choice (maxNumOfEndpoints); the rest are fallbacks in score order. */
    int n_targets;
    int n_picked;
    struct epp_endpoint *targets[EPP_SCHED_MAX_TARGETS];
    struct epp_endpoint *prefill; /* the prefill endpoint when disaggregated, else NULL */
    bool disaggregated;
    /* The primary's prefix hit (x-cache-hit): blocks matched, out of total, and the ratio. The
     * precise match when the request has block keys, else the approximate one. */
    int32_t hit_blocks;
    int32_t total_blocks;
    double hit_ratio;
    int64_t uncached_tokens; /* the estimate the P/D decision used (-1 when none was made) */
    const char *primary_profile;
    int n_profiles;
    struct epp_profile_result profiles[EPP_SCHED_MAX_PROFILES];
};

/* What the integrator must produce for the configured scorers (epp_sched_needs). */
struct epp_sched_needs {
    bool precise;               /* some profile uses precise-prefix-cache-scorer */
    int32_t block_size;         /* tokens per block key (tokenProcessorConfig.blockSize, 16) */
    uint64_t hash_seed;         /* tokenProcessorConfig.hashSeed as a number (0 when absent) */
    const char *hash_seed_text; /* hashSeed as written ("" when absent) */
    double gpu_weight;          /* kvCacheBackendConfigs: tier weights (gpu 1.0, cpu 0.8) */
    double cpu_weight;
    int64_t index_size;         /* kvBlockIndexConfig.inMemoryConfig.size (1e8) */
    int32_t pod_cache_size;     /* kvBlockIndexConfig.inMemoryConfig.podCacheSize (10) */
    const char *zmq_endpoint;   /* kvEventsConfig.zmqEndpoint (default tcp, all interfaces, 5557) */
    const char *topic_filter;   /* kvEventsConfig.topicFilter ("kv@") */
    int32_t concurrency;        /* kvEventsConfig.concurrency (4) */
    bool discover_pods;         /* kvEventsConfig.discoverPods */
    int32_t socket_port;        /* kvEventsConfig.podDiscoveryConfig.socketPort (5556) */
    bool speculative;           /* speculativeIndexing */
    int64_t speculative_ttl_ms; /* speculativeTTL ("2s") */
    bool approximate;           /* some profile uses prefix-cache-scorer */
    bool session_affinity; /* some profile uses session-affinity-scorer (set x-session-token) */
    bool pd;               /* a P/D profile handler is configured */
};

/*
 * Loads an EndpointPickerConfig (YAML or JSON text; NULL/0: GIE's default config). reg (may be
 * NULL) receives the scheduler metrics. NULL with a message naming the field, plugin or parameter
 * in err on a bad config or OOM.
 */
struct epp_sched *epp_sched_new(const char *yaml, size_t len, struct metrics_registry *reg,
                                char *err, size_t errlen);
void epp_sched_free(struct epp_sched *s); /* NULL allowed */

/* A reload: like epp_sched_new, recording into the metric series prev registered (a registry
 * refuses a family twice). prev stays valid; free it when the new one is in place. */
struct epp_sched *epp_sched_new_like(const struct epp_sched *prev, const char *yaml, size_t len,
                                     char *err, size_t errlen);

/* Reseeds the scheduler's PRNG (tie-breaks, random pickers), for deterministic tests. */
void epp_sched_seed(struct epp_sched *s, uint64_t seed);

/*
 * Schedules r over the n endpoints eps (pm: what the data producers found for each, parallel to
 * eps; may be NULL). Endpoints that are not ready, are ejected or fall outside r's subset hint
 * never pass. Returns out->status: 0, or 503 with out->reason.
 */
int epp_schedule(struct epp_sched *s, const struct epp_request *r, struct epp_endpoint *const *eps,
                 const struct epp_prefix_match *pm, int n, struct epp_sched_result *out);

/* After the request is sent: records its prefix in the approximate indexes of the primary and of
 * the prefill endpoint (res as epp_schedule returned it, with the same r). */
void epp_sched_pre_request(struct epp_sched *s, const struct epp_request *r,
                           const struct epp_sched_result *res);

/* Forgets what the scheduler holds about an endpoint that left the pool. */
void epp_sched_endpoint_removed(struct epp_sched *s, const struct epp_endpoint *ep);

/*
 * The saturation detector: true when no ready endpoint has fresh metrics with a queue and a KV
 * cache under the thresholds (then Sheddable requests are rejected). now_ms: tandem_now_ms().
 */
bool epp_sched_saturated(const struct epp_sched *s, struct epp_endpoint *const *eps, int n,
                         int64_t now_ms);

/* What the loaded config needs from the data producers (borrowed from s). */
const struct epp_sched_needs *epp_sched_needs(const struct epp_sched *s);

/* The x-session-token value for ep: base64 of "namespace/name". Returns its length, or -ENOSPC. */
int epp_session_token(const struct epp_endpoint *ep, char *out, size_t outlen);

#endif /* TANDEM_OPERATOR_EPP_SCHED_H */
