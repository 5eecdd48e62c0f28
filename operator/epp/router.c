/*
 * The EPP's request path (see router.h).
 */
#include "operator/epp/router.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/json.h"
#include "lib/log.h"
#include "lib/uuid.h"
#include "operator/epp/router_internal.h"
#include "operator/epp/sched/sched.h"

#define MAX_CANDIDATES   1024
#define EJECT_FAILURES   3     /* consecutive connection failures that eject an endpoint */
#define EJECT_MS         10000 /* for how long */
#define MAX_PREFIX_BYTES (1u << 20)

void epp_decision_free(struct epp_decision *d)
{
    free(d->body);
    d->body = NULL;
    d->body_len = 0;
}

struct epp_endpoint *epp_router_endpoint(struct epp_router *r, uint64_t id)
{
    return epp_ds_by_id(r->ds, id);
}

static void decide_error(struct epp_decision *d, int status, const char *fmt, const char *arg)
{
    d->status = status;
    snprintf(d->message, sizeof d->message, fmt, arg ? arg : "");
}

/* splitmix64: the targetModels draw (seeded per router, so tests can fix it). */
static uint64_t next_random(struct epp_router *r)
{
    uint64_t z = (r->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The target of a weighted targetModels split (GIE: weight / sum). */
static const char *pick_target(struct epp_router *r, const struct epp_model *m)
{
    uint64_t sum = 0;
    for (int i = 0; i < m->n_targets; i++) {
        sum += (uint64_t)m->targets[i].weight;
    }
    if (sum == 0) {
        return NULL;
    }
    uint64_t x = next_random(r) % sum;
    for (int i = 0; i < m->n_targets; i++) {
        if (x < (uint64_t)m->targets[i].weight) {
            return m->targets[i].name;
        }
        x -= (uint64_t)m->targets[i].weight;
    }
    return m->targets[m->n_targets - 1].name;
}

/* The InferenceModel mapping: which pods (their model label) serve the request, under which
 * OpenAI model name, whether it is a LoRA adapter of theirs, and its criticality. 0, or an HTTP
 * status in d. */
static int map_model(struct epp_router *r, struct json_object *root, struct route_ctx *c,
                     struct epp_decision *d)
{
    const char *requested = json_object_get_string(json_get(root, "model"));
    if (requested) {
        /* a copy: rewrite_model replaces the body's model, which frees this string */
        c->requested_copy = strdup(requested);
        if (!c->requested_copy) {
            decide_error(d, 500, "out of memory%s", NULL);
            return 500;
        }
        requested = c->requested_copy;
    }
    c->requested = requested;
    c->pods_model = NULL;
    c->served = requested;
    if (epp_ds_model_count(r->ds) == 0) {
        return 0; /* no InferenceModels (--endpoints, GIE pools): every pod serves every name */
    }
    const struct epp_model *m = requested ? epp_ds_model_for(r->ds, requested) : NULL;
    if (!m && !requested && epp_ds_model_count(r->ds) == 1) {
        m = epp_ds_model_at(r->ds, 0);
    }
    if (!m) {
        decide_error(d, 404, "The model `%s` does not exist.", requested ? requested : "");
        return 404;
    }
    c->criticality = m->criticality;
    c->pods_model = m->name;
    c->served = m->model_name;
    const char *t = m->n_targets > 0 ? pick_target(r, m) : NULL;
    if (t && strcmp(t, m->model_name) != 0) {
        const struct epp_model *tm = epp_ds_model_for(r->ds, t);
        if (tm) {
            c->pods_model = tm->name; /* another InferenceModel's pods serve the target */
        } else {
            c->lora = t; /* an adapter of the same pods */
        }
        c->served = t;
    }
    return 0;
}

/* The text the approximate prefix index hashes: the completion prompt, or the JSON of the chat
 * messages (GIE's producer). Borrowed from root or kept in c->prefix_buf. */
static void prefix_text(struct json_object *root, bool chat, struct route_ctx *c)
{
    struct json_object *v = json_get(root, chat ? "messages" : "prompt");
    if (json_object_is_type(v, json_type_string)) {
        c->prefix = json_object_get_string(v);
        c->prefix_len = (size_t)json_object_get_string_len(v);
        return;
    }
    buf_init(&c->prefix_buf, MAX_PREFIX_BYTES);
    if (v && json_to_buf(v, 0, &c->prefix_buf) == 0) {
        c->prefix = buf_cstr(&c->prefix_buf);
        c->prefix_len = c->prefix_buf.len;
    }
}

/* The prompt's tokens before any tokenizing: a token-id prompt's length, else a quarter of the
 * text (GIE's averageCharactersPerToken); refined when block keys are computed. */
static int64_t estimate_tokens(struct json_object *root, bool chat, size_t body_len)
{
    struct json_object *p = json_get(root, chat ? "messages" : "prompt");
    if (json_object_is_type(p, json_type_string)) {
        return json_object_get_string_len(p) / 4;
    }
    if (!chat && json_object_is_type(p, json_type_array) && json_object_array_length(p) > 0 &&
        json_object_is_type(json_object_array_get_idx(p, 0), json_type_int)) {
        return (int64_t)json_object_array_length(p);
    }
    return (int64_t)(body_len / 4);
}

/* Replaces the body's model when the targetModels split chose another name. */
static int rewrite_model(struct json_object *root, const struct route_ctx *c,
                         struct epp_decision *d)
{
    if (!c->served || (c->requested && strcmp(c->served, c->requested) == 0)) {
        return 0;
    }
    json_object_object_add(root, "model", json_object_new_string(c->served));
    struct buf b;
    buf_init(&b, 256u << 20);
    if (json_to_buf(root, 0, &b) != 0) {
        buf_free(&b);
        return -ENOMEM;
    }
    d->body = buf_detach(&b, &d->body_len);
    return d->body ? 0 : -ENOMEM;
}

static bool in_subset(const struct epp_route_in *in, const struct epp_endpoint *ep)
{
    for (int i = 0; i < in->n_subset; i++) {
        if (strcmp(in->subset[i], ep->addr) == 0) {
            return true;
        }
    }
    return false;
}

int epp_route(struct epp_router *r, const struct epp_route_in *in, struct epp_decision *d)
{
    struct route_ctx c = {0};
    char err[256] = "";
    int64_t t0 = tandem_now_ns();
    memset(d, 0, sizeof(*d));
    const char *rid = in->header ? in->header(in->header_ud, "x-request-id") : NULL;
    if (rid && *rid && strlen(rid) < sizeof d->request_id) {
        snprintf(d->request_id, sizeof d->request_id, "%s", rid);
    } else {
        tandem_uuid4(d->request_id);
    }
    struct json_object *root = json_parse(in->body ? in->body : "", in->body_len, err, sizeof err);
    if (!json_object_is_type(root, json_type_object)) {
        decide_error(d, 400, "the request body must be a JSON object: %.200s",
                     err[0] ? err : "not an object");
        json_object_put(root);
        router_count(r, "invalid_request");
        return 0;
    }
    bool chat = strstr(in->path, "chat") != NULL;
    if (map_model(r, root, &c, d) != 0) {
        router_count(r, d->status == 404 ? "model_not_found" : "error");
        route_ctx_free(&c);
        json_object_put(root);
        return 0;
    }
    if (epp_sched_needs(r->sched)->approximate) {
        prefix_text(root, chat, &c); /* a token-id prompt is serialized: only when it is used */
    }
    c.prompt_tokens = estimate_tokens(root, chat, in->body_len);
    c.session = in->header ? in->header(in->header_ud, "x-session-token") : NULL;
    c.chat = chat;
    c.path = in->path;
    c.body = in->body;
    c.body_len = in->body_len;

    /* the candidates: ready pods of the model, within Envoy's subset hint */
    struct epp_endpoint *eps[MAX_CANDIDATES];
    int n = epp_ds_candidates(r->ds, c.pods_model, tandem_now_ms(), eps, MAX_CANDIDATES);
    if (in->n_subset > 0 && !r->ignore_subset) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (in_subset(in, eps[i])) {
                eps[k++] = eps[i];
            }
        }
        n = k;
    }
    int rc = 0;
    if (n == 0) {
        decide_error(d, 503, "no ready model server for model %s", c.served ? c.served : "");
        router_count(r, "no_pods");
    } else {
        rc = router_schedule(r, &c, eps, n, d);
    }
    if (rc == 0 && d->status == 0) {
        rc = rewrite_model(root, &c, d);
    }
    snprintf(d->model, sizeof d->model, "%s", c.served ? c.served : "");
    router_observe(r, &c, d, (double)(tandem_now_ns() - t0) * 1e-9);
    route_ctx_free(&c);
    json_object_put(root);
    return rc;
}

void epp_route_started(struct epp_router *r, const struct epp_decision *d, struct epp_endpoint *ep)
{
    ep->active_requests++;
    ep->active_tokens += d->prompt_tokens;
    (void)r;
}

void epp_route_finished(struct epp_router *r, const struct epp_decision *d, uint64_t endpoint_id,
                        bool ok)
{
    struct epp_endpoint *ep = epp_router_endpoint(r, endpoint_id);
    if (!ep) {
        return;
    }
    ep->active_requests = ep->active_requests > 0 ? ep->active_requests - 1 : 0;
    ep->active_tokens =
        ep->active_tokens > d->prompt_tokens ? ep->active_tokens - d->prompt_tokens : 0;
    if (ok) {
        ep->consecutive_failures = 0;
    }
}

void epp_route_failed(struct epp_router *r, uint64_t endpoint_id)
{
    struct epp_endpoint *ep = epp_router_endpoint(r, endpoint_id);
    if (!ep) {
        return;
    }
    if (++ep->consecutive_failures >= EJECT_FAILURES) {
        ep->ejected_until_ms = tandem_now_ms() + EJECT_MS;
        ep->consecutive_failures = 0;
        log_warn("epp: %s (%s) failed %d times in a row; out of rotation for %d s", ep->name,
                 ep->addr, EJECT_FAILURES, EJECT_MS / 1000);
        router_count_ejection(r);
    }
}

int epp_router_session_token(const struct epp_endpoint *ep, char *out, size_t outlen)
{
    int n = epp_session_token(ep, out, outlen); /* what session-affinity-scorer compares */
    return n < 0 ? n : 0;
}

const char *epp_error_type(int status)
{
    return status == 429   ? "rate_limit_error"
           : status == 404 ? "NotFoundError"
           : status >= 500 ? "server_error"
                           : "invalid_request_error";
}
