/*
 * The router's insides, shared by router.c (parsing, model mapping, accounting) and
 * router_sched.c (block keys, the KV index, the scheduler, metrics).
 */
#ifndef TANDEM_OPERATOR_EPP_ROUTER_INTERNAL_H
#define TANDEM_OPERATOR_EPP_ROUTER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"
#include "lib/metrics.h"
#include "operator/epp/datastore.h"
#include "operator/epp/router.h"

struct epp_sched;
struct kvidx;
struct epp_keyring;

struct epp_router {
    struct epp_ds *ds;
    struct epp_sched *sched;
    struct kvidx *index;         /* NULL: no precise prefix scoring */
    struct epp_keyring *keyring; /* the models' tokenizers and hash parameters */
    bool ignore_subset;          /* --disable-endpoint-subset-filter */
    uint64_t rng;
    /* metrics */
    struct metric_family *f_decisions;      /* llmd_epp_scheduling_decisions_total{result} */
    struct metric *m_sched_seconds;         /* llmd_epp_scheduling_duration_seconds */
    struct metric *m_ejections;             /* tandem_epp_endpoint_ejections_total */
    struct metric *m_candidates;            /* llmd_epp_candidate_pods_total */
    struct metric *m_sa_hits, *m_sa_misses; /* llmd_epp_session_affinity_{hits,misses}_total */
    struct metric_family
        *f_requests; /* inference_objective_request_total{model_name,target_model_name} */
    struct metric_family *f_hit;               /* llmd_epp_cache_hit_rate{pod} */
    struct metric_family *f_kv_hit;            /* kv_cache_manager_hit_rate{pod} */
    struct metric *m_kv_global_hit;            /* kv_cache_manager_global_hit_rate */
    uint64_t routed_blocks, routed_hit_blocks; /* over every pod, for the global rate */
    struct metric *m_keys_seconds;             /* tandem_epp_tokenize_duration_seconds */
};

/* What one request looks like while it is routed. */
struct route_ctx {
    const char *requested; /* the body's model (requested_copy: the body may be rewritten) */
    char *requested_copy;
    const char *served;     /* the name it is served under (after targetModels) */
    const char *pods_model; /* the pods' tandem.dev/model label, NULL: any pod */
    const char *lora;       /* adapter name, or NULL */
    enum epp_criticality criticality;
    const char *prefix; /* approximate prefix text */
    size_t prefix_len;
    struct buf prefix_buf;
    const char *session;
    bool chat;
    const char *path;
    const char *body;
    size_t body_len;
    uint64_t *keys; /* block keys (owned), n_keys of them */
    int32_t n_keys, block_size;
    int64_t prompt_tokens;
};

static inline void route_ctx_free(struct route_ctx *c)
{
    buf_free(&c->prefix_buf);
    free(c->keys);
    free(c->requested_copy);
}

/* Block keys, index lookup and the scheduler for n candidates; fills d. 0 or -ENOMEM. */
int router_schedule(struct epp_router *r, struct route_ctx *c, struct epp_endpoint **eps, int n,
                    struct epp_decision *d);
/* The KV index's longest prefix of keys on each of n endpoints, into pm. */
void router_index_match(struct epp_router *r, const uint64_t *keys, int32_t n_keys,
                        struct epp_endpoint **eps, int n, struct epp_prefix_match *pm);
/* Counts a decision (its result label) and its duration. */
void router_observe(struct epp_router *r, const struct route_ctx *c, const struct epp_decision *d,
                    double seconds);
void router_count(struct epp_router *r, const char *result);
void router_count_ejection(struct epp_router *r);

/* ---- for the KV-cache manager API ---- */

/* The prefix match of the request body root (prompt, messages or prompt_token_ids, and model) on
 * each of n endpoints into pm, and its number of full blocks into *total. 0; -EINVAL with err
 * naming the field; -ENOTSUP when no tokenizer is known yet for the model (err says why). */
int router_prefix_match(struct epp_router *r, struct json_object *root, struct epp_endpoint **eps,
                        int n, struct epp_prefix_match *pm, int32_t *total, char *err,
                        size_t errlen);

struct router_index_stats {
    uint64_t entries; /* (block, pod) pairs */
    uint64_t keys;    /* distinct blocks */
    uint64_t pods;    /* pods with at least one block */
};
void router_index_stats(struct epp_router *r, struct router_index_stats *out);
/* Blocks the index holds for the pod with this address. */
uint64_t router_index_pod_blocks(struct epp_router *r, const char *addr);

#endif
