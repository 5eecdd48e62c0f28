/*
 * The EPP's request path, shared by the HTTP gateway (gateway.c) and Envoy ext-proc (extproc/):
 * one OpenAI request body in, one routing decision out. It parses the body once, maps the model
 * through the pool's InferenceModels (weighted targetModels, criticality), computes the prompt's
 * block keys with the engine's own tokenizer when a precise scorer needs them, asks the KV-block
 * index which endpoint holds how much of the prompt, runs the scheduler (filters → scorers →
 * picker, P/D decision) and sheds Sheddable requests when the pool is saturated.
 *
 * Main loop thread only.
 */
#ifndef TANDEM_OPERATOR_EPP_ROUTER_H
#define TANDEM_OPERATOR_EPP_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "operator/epp/datastore.h"
#include "operator/epp/endpoint.h"

#define EPP_MAX_FALLBACKS 4

struct epp_router;

/* A request's headers, by a getter (the gateway's http_request, ext-proc's header list). */
typedef const char *(*epp_header_fn)(void *ud, const char *lowercase_name);

struct epp_route_in {
    const char *path; /* "/v1/chat/completions", "/v1/completions", ... */
    const char *body; /* the request body (JSON) */
    size_t body_len;
    epp_header_fn header;
    void *header_ud;
    const char *const *subset; /* Envoy's subset hint, or NULL */
    int n_subset;
};

struct epp_decision {
    int status;        /* 0: route; else the HTTP status to answer (400, 404, 429, 503) */
    char message[256]; /* why, for an immediate answer */
    char request_id[64];
    /* the decode (primary) endpoints, best first: retries walk the list */
    struct epp_endpoint *targets[EPP_MAX_FALLBACKS];
    uint64_t target_ids[EPP_MAX_FALLBACKS]; /* ids, to find them again after a wait */
    int n_targets;
    struct epp_endpoint *prefill; /* NULL: no P/D */
    uint64_t prefill_id;
    char *body; /* the body to send when it changed (model rewritten), else NULL; owned */
    size_t body_len;
    char model[256];       /* the model that serves it (after targetModels) */
    int64_t prompt_tokens; /* exact when tokenized, else estimated */
    int32_t cached_blocks; /* of the primary target, from the index (precise) */
    int32_t total_blocks;
    double hit_ratio; /* cached prompt fraction on the primary target, 0..1 */
    bool sheddable;
};

void epp_decision_free(struct epp_decision *d); /* frees body; the struct may be reused */

/* Fills d. 0 whether it routes or answers (d->status); -ENOMEM. */
int epp_route(struct epp_router *r, const struct epp_route_in *in, struct epp_decision *d);

/* The request went to ep (in-flight accounting, the approximate prefix index's update). */
void epp_route_started(struct epp_router *r, const struct epp_decision *d, struct epp_endpoint *ep);
/* It finished there (ok: a 2xx answer went through). */
void epp_route_finished(struct epp_router *r, const struct epp_decision *d, uint64_t endpoint_id,
                        bool ok);
/* ep could not be reached: counts toward its ejection. */
void epp_route_failed(struct epp_router *r, uint64_t endpoint_id);
/* The endpoint with id, or NULL once it left the pool. */
struct epp_endpoint *epp_router_endpoint(struct epp_router *r, uint64_t id);
/* The x-session-token value for ep (base64 of "namespace/name"), into out: 0 or -ENOSPC. */
int epp_router_session_token(const struct epp_endpoint *ep, char *out, size_t outlen);
/* The OpenAI error type of an answer the router gives itself (429, 404, 5xx, other 4xx). */
const char *epp_error_type(int status);

#endif
