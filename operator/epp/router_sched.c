/*
 * The router's scheduling step (see router_internal.h): the prompt's block keys from the
 * engine's own tokenizer (keyring.h), the KV index's longest prefix per candidate, the scheduler
 * and the saturation detector, and the decision's metrics.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/json.h"
#include "lib/err.h"
#include "lib/log.h"
#include "operator/epp/keyring.h"
#include "operator/epp/keys/keys.h"
#include "operator/epp/router_internal.h"
#include "operator/epp/sched/sched.h"

/* The prompt's tokens and block keys when a precise scorer wants them and the model's tokenizer
 * is known; otherwise none (the approximate text and a chars/4 token estimate stay). */
static void compute_keys(struct epp_router *r, struct route_ctx *c)
{
    const struct epp_sched_needs *need = epp_sched_needs(r->sched);
    const struct epp_keys *k = epp_keyring_get(r->keyring, c->pods_model);
    if (!k || !r->index || !need->precise) {
        return;
    }
    int32_t *tokens = NULL;
    uint64_t *keys = NULL;
    size_t n_tokens = 0, n_keys = 0;
    char err[256];
    int64_t t0 = tandem_now_ns();
    int rc = epp_keys_for_request(k, c->path, c->body, c->body_len, c->lora, &tokens, &n_tokens,
                                  &keys, &n_keys, err, sizeof err);
    if (r->m_keys_seconds) {
        metric_observe(r->m_keys_seconds, (double)(tandem_now_ns() - t0) * 1e-9);
    }
    free(tokens);
    if (rc != 0) {
        /* the model server will answer this request's error itself */
        log_debug("epp: no block keys for this request: %s", err);
        return;
    }
    c->keys = keys;
    c->n_keys = (int32_t)n_keys;
    c->block_size = epp_keys_block_size(k);
    c->prompt_tokens = (int64_t)n_tokens;
}

static void fill_request(const struct route_ctx *c, const struct epp_decision *d,
                         struct epp_request *req)
{
    memset(req, 0, sizeof(*req));
    req->request_id = d->request_id;
    req->model = c->served;
    req->requested_model = c->requested;
    req->lora = c->lora;
    req->criticality = c->criticality;
    req->prefix_text = c->prefix;
    req->prefix_len = c->prefix_len;
    req->prompt_tokens = c->prompt_tokens;
    req->block_keys = c->keys;
    req->n_block_keys = c->n_keys;
    req->block_size = c->block_size;
    req->session_token = c->session;
}

int router_schedule(struct epp_router *r, struct route_ctx *c, struct epp_endpoint **eps, int n,
                    struct epp_decision *d)
{
    compute_keys(r, c);
    struct epp_prefix_match *pm = calloc((size_t)n, sizeof(*pm));
    if (!pm) {
        return -ENOMEM;
    }
    if (c->n_keys > 0) {
        router_index_match(r, c->keys, c->n_keys, eps, n, pm);
    }
    if (r->m_candidates) {
        metric_inc(r->m_candidates, n);
    }
    if (c->criticality == EPP_CRIT_SHEDDABLE &&
        epp_sched_saturated(r->sched, eps, n, tandem_now_ms())) {
        free(pm);
        d->status = 429;
        d->sheddable = true;
        snprintf(d->message, sizeof d->message,
                 "the pool is saturated and the request is sheddable; try again later");
        return 0;
    }
    struct epp_request req;
    fill_request(c, d, &req);
    struct epp_sched_result *res = calloc(1, sizeof(*res));
    if (!res) {
        free(pm);
        return -ENOMEM;
    }
    epp_schedule(r->sched, &req, eps, pm, n, res);
    free(pm);
    if (res->status == 0 && res->n_targets > 0) {
        epp_sched_pre_request(r->sched, &req, res); /* the approximate index learns the prompt */
    }
    d->prompt_tokens = c->prompt_tokens;
    if (res->status != 0 || res->n_targets == 0) {
        d->status = 503;
        snprintf(d->message, sizeof d->message, "no model server can take this request: %s",
                 res->reason[0] ? res->reason : "every endpoint was filtered out");
        free(res);
        return 0;
    }
    for (int i = 0; i < res->n_targets && d->n_targets < EPP_MAX_FALLBACKS; i++) {
        d->targets[d->n_targets] = res->targets[i];
        d->target_ids[d->n_targets++] = res->targets[i]->id;
    }
    if (res->prefill) {
        d->prefill = res->prefill;
        d->prefill_id = res->prefill->id;
    }
    d->cached_blocks = res->hit_blocks;
    d->total_blocks = res->total_blocks;
    d->hit_ratio = res->hit_ratio;
    if (c->session && r->m_sa_hits) {
        char tok[EPP_SESSION_TOKEN_MAX];
        bool hit =
            epp_session_token(res->targets[0], tok, sizeof tok) > 0 && strcmp(tok, c->session) == 0;
        metric_inc(hit ? r->m_sa_hits : r->m_sa_misses, 1);
    }
    free(res);
    return 0;
}

void router_count(struct epp_router *r, const char *result)
{
    struct metric *m = r->f_decisions ? metrics_child(r->f_decisions, &result) : NULL;
    if (m) {
        metric_inc(m, 1);
    }
}

void router_count_ejection(struct epp_router *r)
{
    if (r->m_ejections) {
        metric_inc(r->m_ejections, 1);
    }
}

void router_observe(struct epp_router *r, const struct route_ctx *c, const struct epp_decision *d,
                    double seconds)
{
    const char *result = d->status == 0     ? "success"
                         : d->status == 429 ? "shed"
                         : d->status == 503 ? "no_pods"
                                            : NULL;
    if (result) {
        router_count(r, result);
    }
    if (r->m_sched_seconds && d->status != 400 && d->status != 404) {
        metric_observe(r->m_sched_seconds, seconds);
    }
    if (r->f_requests && c->served) {
        const char *lv[] = {c->requested ? c->requested : c->served, c->served};
        struct metric *m = metrics_child(r->f_requests, lv);
        if (m) {
            metric_inc(m, 1);
        }
    }
    if (d->status == 0 && d->targets[0]) {
        struct epp_endpoint *ep = d->targets[0];
        const char *lv[] = {ep->name};
        struct metric *m = r->f_hit ? metrics_child(r->f_hit, lv) : NULL;
        if (m) {
            metric_set(m, d->hit_ratio);
        }
        if (c->n_keys > 0) {
            /* the precise index's view: of the blocks routed to a pod, how many it held */
            ep->routed_blocks += (uint64_t)c->n_keys;
            ep->routed_hit_blocks += (uint64_t)(d->cached_blocks > 0 ? d->cached_blocks : 0);
            r->routed_blocks += (uint64_t)c->n_keys;
            r->routed_hit_blocks += (uint64_t)(d->cached_blocks > 0 ? d->cached_blocks : 0);
            m = r->f_kv_hit ? metrics_child(r->f_kv_hit, lv) : NULL;
            if (m) {
                metric_set(m, (double)ep->routed_hit_blocks / (double)ep->routed_blocks);
            }
            if (r->m_kv_global_hit) {
                metric_set(r->m_kv_global_hit,
                           (double)r->routed_hit_blocks / (double)r->routed_blocks);
            }
        }
    }
}

int router_prefix_match(struct epp_router *r, struct json_object *root, struct epp_endpoint **eps,
                        int n, struct epp_prefix_match *pm, int32_t *total, char *err,
                        size_t errlen)
{
    struct json_object *model = json_get(root, "model");
    struct json_object *ids = json_get(root, "prompt_token_ids");
    if (!json_object_is_type(model, json_type_string)) {
        return tandem_fail(err, errlen, -EINVAL, "model: required string");
    }
    if (ids && !json_get(root, "prompt")) {
        json_object_object_add(root, "prompt", json_object_get(ids)); /* the engine's field */
    }
    json_object_object_del(root, "prompt_token_ids");
    json_object_object_del(root, "candidate_pods");
    bool chat = json_get(root, "messages") != NULL;
    if (!chat && !json_get(root, "prompt")) {
        return tandem_fail(err, errlen, -EINVAL, "prompt, messages or prompt_token_ids: required");
    }
    const struct epp_model *m = epp_ds_model_for(r->ds, json_object_get_string(model));
    const char *pods_model = m ? m->name : NULL;
    const struct epp_keys *k = epp_keyring_get(r->keyring, pods_model);
    if (!k) {
        return tandem_fail(err, errlen, -ENOTSUP,
                           "no tokenizer known yet for model %.100s (no ready pod of it has "
                           "answered GET /tokenizer_info)",
                           json_object_get_string(model));
    }
    if (!r->index) {
        return tandem_fail(err, errlen, -ENOTSUP,
                           "no KV-block index: no scheduling profile uses "
                           "precise-prefix-cache-scorer");
    }
    struct buf b;
    buf_init(&b, 64u << 20);
    int rc = json_to_buf(root, 0, &b);
    int32_t *tokens = NULL;
    uint64_t *keys = NULL;
    size_t n_tokens = 0, n_keys = 0;
    if (rc == 0) {
        rc =
            epp_keys_for_request(k, chat ? "/v1/chat/completions" : "/v1/completions", buf_cstr(&b),
                                 b.len, NULL, &tokens, &n_tokens, &keys, &n_keys, err, errlen);
    }
    buf_free(&b);
    free(tokens);
    if (rc == 0) {
        memset(pm, 0, (size_t)n * sizeof(*pm));
        router_index_match(r, keys, (int32_t)n_keys, eps, n, pm);
        *total = (int32_t)n_keys;
    }
    free(keys);
    return rc;
}
